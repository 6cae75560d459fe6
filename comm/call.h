// One call as the API describes it to the communicator, and the key the communicator remembers
// calls by (comm/call_memo.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/builders.h"
#include "collectives/plan.h"
#include "loom/loom.h"

namespace loom {

// One collective call.
struct CallDesc {
  collectives::CollArgs args;
  const void* input = nullptr;
  void* output = nullptr;
  loomDataType_t dtype = loomFloat32;
  loomRedOp_t op = loomSum;
  // Bytes of input and output (to detect in-place calls and aliasing).
  size_t inputBytes = 0, outputBytes = 0;
  // Every rank's Input and Output of this call are from loomMemAlloc, as the ranks of the host
  // agreed (Comm::agreeBuffersMapped): the peer algorithms read them with plain loads. The
  // tuner's model costs such reads as plain copies (Tuner::decide); builders do not read it.
  bool buffersMapped = false;
  // The call's flight recorder entry where a group recorded it as queued (Comm::recordQueued).
  uint64_t recorded = 0;
};

// Whether two byte ranges share a byte (empty ranges share none).
bool rangesOverlap(const void* a, size_t an, const void* b, size_t bn);

// One operation of a group of sends and receives.
struct P2PCall {
  collectives::P2POp op;
  void* buffer;  // const for sends
};

// What identifies a call, in three parts: its shape (what the tuner decides by), its arguments
// (buffers, type and operation) and its plan (the algorithm and parameters that run it, how its
// buffers alias, and the counts an alltoallv or a send/receive group lays out). Each memory of
// the communicator compares the parts it depends on (sameDecision, sameCall, samePlan). A key
// is refilled in place: its counts keep their storage, so a loop of calls allocates nothing (a
// fresh key per call cost a small call ~3%).
struct CallKey {
  // Shape.
  collectives::Collective coll{};
  uint64_t count = 0;
  int root = 0;
  uint32_t elemSize = 0;  // the direct allreduce sizes its arena slots in elements
  // Arguments.
  loomDataType_t dtype{};
  loomRedOp_t op{};
  const void* input = nullptr;
  void* output = nullptr;
  size_t inputBytes = 0, outputBytes = 0;
  // Plan.
  const collectives::Builder* builder = nullptr;
  int lanes = 0, torusX = 0, torusY = 0, fanIn = 0;
  int aliasMode = 0;  // 0: none, 1: input inside output, 2: output inside input
  uint64_t aliasOffset = 0;
  // Alltoallv: counts and displacements; a send/receive group: (peer, kind, bytes) per op.
  std::vector<uint64_t> counts;

  void setShape(const collectives::CollArgs& a) {
    coll = a.coll, count = a.count, root = a.root, elemSize = a.elemSize;
  }
  void setArguments(const CallDesc& c) {
    setShape(c.args);
    dtype = c.dtype, op = c.op, input = c.input, output = c.output;
    inputBytes = c.inputBytes, outputBytes = c.outputBytes;
  }
  // The plan part: builder b with the parameters of s, no alias, no counts.
  void setPlan(const collectives::Builder* b, const collectives::CallSettings& s) {
    builder = b, lanes = s.lanes, torusX = s.torusX, torusY = s.torusY, fanIn = s.fanIn;
    aliasMode = 0, aliasOffset = 0;
    counts.clear();
  }

  // The tuner's decision depends on the collective and the call's bytes only; an alltoallv's
  // also on its counts, which the key does not compare: it never has the same decision.
  bool sameDecision(const collectives::CollArgs& a) const {
    return a.coll == coll && a.count == count && a.elemSize == elemSize &&
           a.coll != collectives::Collective::AlltoAllv;
  }
  // The very same call again: shape and arguments alike (an alltoallv's counts are not compared,
  // so its calls are never remembered as one).
  bool sameCall(const CallDesc& c) const {
    return c.input == input && c.output == output && c.args.count == count &&
           c.args.coll == coll && c.dtype == dtype && c.op == op && c.args.root == root &&
           c.inputBytes == inputBytes && c.outputBytes == outputBytes;
  }
  // One prepared plan serves both: what a builder reads, and the aliasing.
  bool samePlan(const CallKey& k) const {
    return coll == k.coll && builder == k.builder && count == k.count && root == k.root &&
           lanes == k.lanes && torusX == k.torusX && torusY == k.torusY && fanIn == k.fanIn &&
           elemSize == k.elemSize && aliasMode == k.aliasMode && aliasOffset == k.aliasOffset &&
           counts == k.counts;
  }
  // A hash of the plan part, and the comparison, for a map of plans.
  struct PlanHash {
    size_t operator()(const CallKey& k) const {
      size_t h = std::hash<uint64_t>()(k.count) ^ (size_t(k.coll) << 56) ^
                 std::hash<const void*>()(k.builder) ^ (size_t(k.root) << 40) ^
                 (size_t(k.aliasMode) << 60) ^ std::hash<uint64_t>()(k.aliasOffset << 1) ^
                 (size_t(k.lanes) << 48) ^ (size_t(k.fanIn) << 24) ^ (size_t(k.torusX) << 32);
      for (uint64_t c : k.counts) h = h * 1099511628211ull ^ c;
      return h;
    }
  };
  struct SamePlan {
    bool operator()(const CallKey& a, const CallKey& b) const { return a.samePlan(b); }
  };
};

}  // namespace loom
