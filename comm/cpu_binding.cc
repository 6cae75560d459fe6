#include "comm/cpu_binding.h"

#include <sys/syscall.h>
#include <unistd.h>

namespace loom {

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
