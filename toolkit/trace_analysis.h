// Reading and merging flight recorder dumps (comm/flight_recorder.h's JSON, one file per rank):
// what loom-trace prints. It answers the questions of a hang or a failure: which ranks are
// behind the others, which collective the ranks called differently, which rank failed first,
// and which peers the failed calls were waiting for.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace loom::toolkit {

struct TraceCall {
  uint64_t call = 0;
  uint64_t collectiveNumber = 0;  // 0: a group of sends and receives
  std::string collective, dtype, op, algorithm, state;
  uint64_t count = 0, bytes = 0;
  int root = 0, lanes = 0;
  uint64_t startUs = 0, endUs = 0;
  // "allreduce count 100 float sum": what the ranks must call alike (count, op and root where
  // the collective has them).
  std::string signature() const;
};

struct TraceDump {
  std::string file, comm, reason, failure;
  int rank = -1, nranks = 0, pid = 0;
  uint64_t failedCall = 0, callsRecorded = 0, dumpedAtUs = 0;
  std::vector<TraceCall> calls;  // oldest first
  // The last collective this rank opened, or null.
  const TraceCall* lastCollective() const;
};

// Parses one dump; nullopt with *error when the file is missing or not a flight recorder dump.
std::optional<TraceDump> readTraceDump(const std::string& path, std::string* error);

// What the dumps of one communicator say.
struct TraceAnalysis {
  std::string comm;
  int nranks = 0;
  std::vector<int> ranks;         // those with a dump
  std::vector<int> missingRanks;  // those without
  // The furthest collective any rank opened, and the ranks whose last collective is older.
  uint64_t frontCollective = 0;
  std::vector<int> behindRanks;
  // The first collective the ranks called differently: its number, and each signature with
  // the ranks that called it.
  uint64_t mismatchedCollective = 0;
  std::map<std::string, std::vector<int>> mismatch;
  // The failure recorded first (by its call's end time; ranks of other hosts compare by clock),
  // -1 where none failed.
  int firstFailedRank = -1;
  // Per failed rank: the peers its failure message names as the ones it waited on.
  std::map<int, std::vector<int>> waitedOn;
  std::vector<std::string> report;  // the findings, as loom-trace prints them
};

// Groups the dumps by communicator and analyses each.
std::vector<TraceAnalysis> analyzeTraces(const std::vector<TraceDump>& dumps);

}  // namespace loom::toolkit
