#include "toolkit/trace_analysis.h"

#include <algorithm>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "base/status.h"
#include "toolkit/json.h"

namespace loom::toolkit {
namespace {

bool hasOp(const std::string& c) {
  return c == "allreduce" || c == "reduce" || c == "reducescatter";
}
bool hasRoot(const std::string& c) {
  return c == "broadcast" || c == "reduce" || c == "gather" || c == "scatter";
}

uint64_t number(const JsonValue& v, const char* key) {
  const JsonValue* m = v.find(key);
  return m != nullptr && m->kind == JsonValue::Kind::kNumber ? uint64_t(m->number) : 0;
}
std::string text(const JsonValue& v, const char* key) {
  const JsonValue* m = v.find(key);
  return m != nullptr && m->kind == JsonValue::Kind::kString ? m->text : std::string();
}

TraceCall readCall(const JsonValue& c) {
  TraceCall t;
  t.call = number(c, "call");
  t.collectiveNumber = number(c, "collective_number");
  t.collective = text(c, "collective");
  t.dtype = text(c, "dtype");
  t.op = text(c, "op");
  t.algorithm = text(c, "algorithm");
  t.state = text(c, "state");
  t.count = number(c, "count");
  t.bytes = number(c, "bytes");
  const JsonValue* root = c.find("root");
  t.root = root != nullptr ? int(root->number) : 0;
  t.lanes = int(number(c, "lanes"));
  t.startUs = number(c, "start_us");
  t.endUs = number(c, "end_us");
  return t;
}

std::string describe(const TraceCall& c) {
  std::string s = "#" + std::to_string(c.collectiveNumber) + " " + c.signature();
  if (!c.algorithm.empty()) s += " (" + c.algorithm + ")";
  return s + ", " + c.state;
}

// The ranks a failure message names as those its call waited on ("from rank 3", "to rank 3",
// "rank 3's Input", "rank 3 is gone"...), this rank excluded.
std::vector<int> peersNamed(const std::string& message, int self) {
  static const std::regex kPeer("rank (\\d+)");
  std::set<int> peers;
  for (auto it = std::sregex_iterator(message.begin(), message.end(), kPeer);
       it != std::sregex_iterator(); ++it) {
    int r = std::stoi((*it)[1]);
    if (r != self) peers.insert(r);
  }
  return {peers.begin(), peers.end()};
}

void findMismatch(const std::vector<const TraceDump*>& dumps, TraceAnalysis* a) {
  std::map<uint64_t, std::map<std::string, std::vector<int>>> byNumber;
  for (const TraceDump* d : dumps)
    for (const TraceCall& c : d->calls)
      if (c.collectiveNumber != 0) byNumber[c.collectiveNumber][c.signature()].push_back(d->rank);
  for (auto& [number, signatures] : byNumber) {
    if (signatures.size() < 2) continue;
    a->mismatchedCollective = number;
    a->mismatch = signatures;
    std::string line = "collective #" + std::to_string(number) + " was called differently:";
    for (auto& [signature, ranks] : signatures)
      line += strprintf(" rank%s %s called %s;", ranks.size() == 1 ? "" : "s",
                        rankRanges(ranks).c_str(), signature.c_str());
    line.pop_back();
    a->report.push_back(line);
    return;
  }
}

void findBehind(const std::vector<const TraceDump*>& dumps, TraceAnalysis* a) {
  std::map<int, const TraceCall*> last;
  for (const TraceDump* d : dumps) {
    last[d->rank] = d->lastCollective();
    if (last[d->rank] != nullptr)
      a->frontCollective = std::max(a->frontCollective, last[d->rank]->collectiveNumber);
  }
  std::vector<int> front;
  for (auto& [rank, call] : last) {
    if (call != nullptr && call->collectiveNumber == a->frontCollective) front.push_back(rank);
    else a->behindRanks.push_back(rank);
  }
  if (a->behindRanks.empty() || front.empty()) return;
  const TraceCall* lead = last[front.front()];
  a->report.push_back(strprintf("rank%s %s %s behind: ranks %s are in collective %s",
                                a->behindRanks.size() == 1 ? "" : "s",
                                rankRanges(a->behindRanks).c_str(),
                                a->behindRanks.size() == 1 ? "is" : "are",
                                rankRanges(front).c_str(), describe(*lead).c_str()));
  for (int r : a->behindRanks)
    a->report.push_back(
        last[r] == nullptr
            ? strprintf("  rank %d never called a collective", r)
            : strprintf("  rank %d's last collective is %s", r, describe(*last[r]).c_str()));
}

void findFailures(const std::vector<const TraceDump*>& dumps, TraceAnalysis* a) {
  uint64_t firstEnd = UINT64_MAX;
  for (const TraceDump* d : dumps) {
    if (d->failure.empty()) continue;
    uint64_t end = d->dumpedAtUs;
    for (const TraceCall& c : d->calls)
      if (c.call == d->failedCall && c.endUs != 0) end = c.endUs;
    if (end < firstEnd) firstEnd = end, a->firstFailedRank = d->rank;
    std::vector<int> peers = peersNamed(d->failure, d->rank);
    if (!peers.empty()) a->waitedOn[d->rank] = peers;
  }
  if (a->firstFailedRank < 0) return;
  for (const TraceDump* d : dumps)
    if (d->rank == a->firstFailedRank)
      a->report.push_back(strprintf("first failure (rank %d): %s", d->rank, d->failure.c_str()));
  for (auto& [rank, peers] : a->waitedOn)
    a->report.push_back(strprintf("rank %d's failed call names rank%s %s", rank,
                                  peers.size() == 1 ? "" : "s", rankRanges(peers).c_str()));
}

TraceAnalysis analyzeComm(const std::string& comm, std::vector<const TraceDump*> dumps) {
  std::sort(dumps.begin(), dumps.end(),
            [](const TraceDump* x, const TraceDump* y) { return x->rank < y->rank; });
  TraceAnalysis a;
  a.comm = comm;
  a.nranks = dumps.front()->nranks;
  for (const TraceDump* d : dumps) a.ranks.push_back(d->rank);
  for (int r = 0; r < a.nranks; ++r)
    if (!std::binary_search(a.ranks.begin(), a.ranks.end(), r)) a.missingRanks.push_back(r);
  a.report.push_back(strprintf("communicator %s: %d rank%s, dumps from %s", comm.c_str(),
                               a.nranks, a.nranks == 1 ? "" : "s", rankRanges(a.ranks).c_str()));
  if (!a.missingRanks.empty())
    a.report.push_back(strprintf("no dump from rank%s %s (alive without a failure, or gone "
                                 "before writing one)",
                                 a.missingRanks.size() == 1 ? "" : "s",
                                 rankRanges(a.missingRanks).c_str()));
  for (const TraceDump* d : dumps) {
    const TraceCall* last = d->lastCollective();
    a.report.push_back(strprintf("  rank %d (pid %d, %s): %llu calls; last collective %s", d->rank,
                                 d->pid, d->reason.c_str(),
                                 (unsigned long long)d->callsRecorded,
                                 last == nullptr ? "none" : describe(*last).c_str()));
  }
  findMismatch(dumps, &a);
  findBehind(dumps, &a);
  findFailures(dumps, &a);
  return a;
}

}  // namespace

std::string TraceCall::signature() const {
  std::string s = collective + " count " + std::to_string(count) + " " + dtype;
  if (hasOp(collective)) s += " " + op;
  if (hasRoot(collective)) s += " root " + std::to_string(root);
  return s;
}

const TraceCall* TraceDump::lastCollective() const {
  for (auto it = calls.rbegin(); it != calls.rend(); ++it)
    if (it->collectiveNumber != 0) return &*it;
  return nullptr;
}

std::optional<TraceDump> readTraceDump(const std::string& path, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = path + ": cannot open";
    return std::nullopt;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string parseError;
  std::optional<JsonValue> doc = parseJson(buffer.str(), &parseError);
  if (!doc || text(*doc, "format") != "loom-flight-recorder 1") {
    *error = path + ": not a loom flight recorder dump" +
             (parseError.empty() ? "" : " (" + parseError + ")");
    return std::nullopt;
  }
  TraceDump d;
  d.file = path;
  d.comm = text(*doc, "comm");
  d.reason = text(*doc, "reason");
  d.failure = text(*doc, "failure");
  d.rank = int(number(*doc, "rank"));
  d.nranks = int(number(*doc, "nranks"));
  d.pid = int(number(*doc, "pid"));
  d.failedCall = number(*doc, "failed_call");
  d.callsRecorded = number(*doc, "calls_recorded");
  d.dumpedAtUs = number(*doc, "dumped_at_us");
  if (const JsonValue* calls = doc->find("calls"))
    for (const JsonValue& c : calls->items) d.calls.push_back(readCall(c));
  return d;
}

std::vector<TraceAnalysis> analyzeTraces(const std::vector<TraceDump>& dumps) {
  std::map<std::string, std::vector<const TraceDump*>> byComm;
  for (const TraceDump& d : dumps) byComm[d.comm].push_back(&d);
  std::vector<TraceAnalysis> out;
  for (auto& [comm, list] : byComm) out.push_back(analyzeComm(comm, list));
  return out;
}

}  // namespace loom::toolkit
