// What the communicator remembers of earlier calls, each memory under the part of their CallKey
// it depends on (comm/call.h): the last decision of the tuner, the last call whole, and the
// prepared plans.
#pragma once

#include <span>
#include <unordered_map>

#include "collectives/executor.h"
#include "comm/call.h"
#include "tuner/tuner.h"

namespace loom {

// What a call runs once its algorithm is chosen (Comm::resolve).
struct ResolvedCall {
  const collectives::PreparedPlan* plan = nullptr;
  const void* input = nullptr;  // an in-place alltoall's: the copy of its input
  tuner::Decision decision;
  bool copiesInput = false;    // input is that copy, refreshed by resolve on every call
  bool buffersMapped = false;  // CallDesc::buffersMapped: as the ranks agreed for the call
};

class CallMemo {
 public:
  // The last call's decision (the tuner's, or autotune's), before the buffer agreement: what
  // decides depends on the call's shape only (CallKey::sameDecision), and a loop of like calls
  // then skips the tuner's lookups (~10% of a 2-rank, 8-byte allreduce). Null: none for a.
  const tuner::Decision* decision(const collectives::CollArgs& a) const {
    return decided_ && decisionKey_.sameDecision(a) ? &decision_ : nullptr;
  }
  const tuner::Decision& rememberDecision(const collectives::CollArgs& a,
                                          const tuner::Decision& d) {
    decisionKey_.setShape(a);
    decision_ = d;
    decided_ = true;
    return decision_;
  }
  // The last decision remembered (valid once one is).
  const tuner::Decision& lastDecision() const { return decision_; }

  // The last call that Comm::runCollective resolved, whole: a loop that repeats a call
  // (CallKey::sameCall) runs it again without choosing and resolving it again (~27% of the
  // instructions of a 2-rank 8-byte allreduce). Null: c is not that call.
  const ResolvedCall* repeat(const CallDesc& c) const {
    return repeats_ && repeatKey_.sameCall(c) ? &repeat_ : nullptr;
  }
  void rememberCall(const CallDesc& c, const ResolvedCall& r) {
    repeatKey_.setArguments(c);
    repeat_ = r;
    repeats_ = true;
  }
  void forgetCall() { repeats_ = false; }

  // The prepared plan of key (CallKey::samePlan), built (build() returns the RankPlan) and
  // prepared with aliases the first time.
  template <typename Build>
  const collectives::PreparedPlan& plan(const CallKey& key,
                                        std::span<const collectives::BufferAlias> aliases,
                                        const Build& build) {
    // A loop of like calls finds its plan by one comparison with the last call's key.
    if (lastPlan_ != nullptr && key.samePlan(lastPlanKey_)) return *lastPlan_;
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      if (plans_.size() >= kMaxPlans) {
        plans_.clear();
        forgetCall();  // it points into the cache
      }
      it = plans_.emplace(key, collectives::preparePlan(build(), aliases)).first;
    }
    lastPlanKey_ = key;       // assigned into the old key's storage: no allocation once warm
    lastPlan_ = &it->second;  // unordered_map nodes stay put until the clear above
    return *lastPlan_;
  }

 private:
  static constexpr size_t kMaxPlans = 256;  // bounded: signatures are few in practice
  bool decided_ = false;
  CallKey decisionKey_;
  tuner::Decision decision_;
  bool repeats_ = false;
  CallKey repeatKey_;
  ResolvedCall repeat_;
  std::unordered_map<CallKey, collectives::PreparedPlan, CallKey::PlanHash, CallKey::SamePlan>
      plans_;
  CallKey lastPlanKey_;  // the last plan's key, and its entry of plans_ (null: none)
  const collectives::PreparedPlan* lastPlan_ = nullptr;
};

}  // namespace loom
