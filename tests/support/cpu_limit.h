// Runs a test's ranks on a few CPUs whatever the machine has: ranks forked while a CpuLimit
// lives inherit its affinity, so a test of "more ranks than cores" can pick its own core count.
#pragma once

#include <sched.h>

namespace loom::testing {

class CpuLimit {
 public:
  // Restricts the calling thread to the first `most` of the CPUs it may use (all of them where
  // it may use fewer); cpus() then says how many it has.
  explicit CpuLimit(int most) {
    ok_ = sched_getaffinity(0, sizeof(saved_), &saved_) == 0;
    if (!ok_) return;
    cpu_set_t limited;
    CPU_ZERO(&limited);
    for (int c = 0, kept = 0; c < CPU_SETSIZE && kept < most; ++c)
      if (CPU_ISSET(c, &saved_)) CPU_SET(c, &limited), ++kept;
    ok_ = sched_setaffinity(0, sizeof(limited), &limited) == 0;
  }
  ~CpuLimit() {
    if (ok_) sched_setaffinity(0, sizeof(saved_), &saved_);
  }
  CpuLimit(const CpuLimit&) = delete;
  CpuLimit& operator=(const CpuLimit&) = delete;

  bool ok() const { return ok_; }
  int cpus() const {
    cpu_set_t now;
    return sched_getaffinity(0, sizeof(now), &now) == 0 ? CPU_COUNT(&now) : 0;
  }

 private:
  cpu_set_t saved_;
  bool ok_ = false;
};

}  // namespace loom::testing
