// The state of the ranks' agreement on whether a call's buffers are all from loomMemAlloc
// (Comm::agreeBuffersMapped): its barrier, its rounds, and the asks it skips.
#pragma once

#include <cstdint>

#include "collectives/executor.h"

namespace loom {

class BufferAgreement {
 public:
  // Asking costs every call a barrier of the host's ranks (~10 us with 4 ranks on 2 cores), and
  // an answer of "not all" tends to stay so (a framework's tensors are not loomMemAlloc
  // memory): after k such answers in a row the next 2^k - 1 asks (at most 63) are skipped and
  // their calls run as not all mapped. Every rank has had the same answers, so all skip alike;
  // buffers that become mapped on every rank are taken up within 64 calls.
  // Whether this ask is one to skip (and counts it).
  bool skipAsk() {
    if (asksToSkip_ == 0) return false;
    --asksToSkip_;
    return true;
  }
  // The barrier that carries the votes (a plan of one Barrier step), built at first use.
  const collectives::PreparedPlan& barrier();
  // The round to vote in (ShmArena::vote), then the answer of that round.
  uint64_t round() const { return rounds_; }
  void answered(bool all);
  int asksToSkip() const { return asksToSkip_; }

 private:
  static constexpr int kMaxNotAllAnswers = 6;  // skips at most 2^6 - 1 asks in a row
  collectives::PreparedPlan barrier_;
  uint64_t rounds_ = 0;    // rounds so far
  int notAllAnswers_ = 0;  // "not every rank's buffers mapped" answers in a row
  int asksToSkip_ = 0;     // asks still to be skipped after them
};

}  // namespace loom
