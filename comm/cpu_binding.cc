#include "comm/cpu_binding.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

#include "base/params.h"

namespace loom {

WaitPolicy WaitPolicy::fromParams(int machineRanks, int usableCores) {
  WaitPolicy w;
  w.spinCount = params::getInt("LOOM_SPIN_COUNT");
  if (w.spinCount < 0) w.spinCount = machineRanks > usableCores ? 0 : 2000;
  w.yieldNs = uint64_t(std::max<int64_t>(0, params::getInt("LOOM_YIELD_USEC"))) * 1000;
  return w;
}

bool CpuBinding::bind(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  const pid_t tid = pid_t(syscall(SYS_gettid));
  if (sched_getaffinity(0, sizeof(before_), &before_) != 0 ||
      sched_setaffinity(0, sizeof(one), &one) != 0)
    return false;
  tid_ = tid;
  cpu_ = cpu;
  return true;
}

CpuBinding::~CpuBinding() {
  if (tid_ == 0) return;
  cpu_set_t now;
  if (sched_getaffinity(tid_, sizeof(now), &now) == 0 && CPU_COUNT(&now) == 1 &&
      CPU_ISSET(cpu_, &now))
    sched_setaffinity(tid_, sizeof(before_), &before_);
}

}  // namespace loom
