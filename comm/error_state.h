// A communicator's error state: after a failure it refuses further work with the first error;
// a revoke (from any thread) ends the call in flight and refuses the later ones; and the last
// error message of the API, per communicator.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "base/status.h"
#include "loom/loom.h"

namespace loom {

class ErrorState {
 public:
  // Any thread: a stream's worker records a failure while the API's thread checks whether
  // the communicator is usable before enqueueing on it.
  Status usable() const {
    if (revoked()) return revokedStatus();
    if (code() == loomSuccess) return Status::ok();
    std::lock_guard<std::mutex> g(mutex_);
    return errorf(failed_.code(),
                  "the communicator failed earlier and can only be destroyed or aborted: %s",
                  failed_.message().c_str());
  }
  bool failed() const { return code() != loomSuccess; }
  // Records st as the failure; false where one was recorded before (which stays).
  bool record(const Status& st) {
    std::lock_guard<std::mutex> g(mutex_);
    if (!failed_.isOk()) return false;
    failed_ = st;
    asyncError_.store(st.code());
    return true;
  }
  // The failure's code, loomSuccess before one (readable from any thread).
  loomResult_t code() const { return loomResult_t(asyncError_.load()); }

  // Revokes the communicator on this rank: the first reason stays. Any thread.
  void revoke(const std::string& reason) {
    std::lock_guard<std::mutex> g(mutex_);
    if (revoked_.load(std::memory_order_relaxed)) return;
    revokeReason_ = reason;
    revoked_.store(true, std::memory_order_release);
  }
  bool revoked() const { return revoked_.load(std::memory_order_acquire); }
  Status revokedStatus() const {
    std::lock_guard<std::mutex> g(mutex_);
    return errorf(loomInvalidUsage,
                  "the communicator was revoked on this rank (%s); it can only be shrunk "
                  "(LOOM_SHRINK_ABORT), destroyed or aborted",
                  revokeReason_.c_str());
  }

  void setLastError(const std::string& msg) {
    std::lock_guard<std::mutex> g(mutex_);
    lastError_ = msg;
  }
  // Valid until the next call.
  const char* lastError() {
    std::lock_guard<std::mutex> g(mutex_);
    lastErrorShown_ = lastError_;
    return lastErrorShown_.c_str();
  }

 private:
  Status failed_;  // under mutex_
  std::atomic<int> asyncError_{loomSuccess};
  std::atomic<bool> revoked_{false};
  std::string revokeReason_;
  mutable std::mutex mutex_;
  std::string lastError_, lastErrorShown_;
};

}  // namespace loom
