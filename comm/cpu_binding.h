// How this communicator's thread uses the CPUs: how the executor waits for its peers, and the
// one CPU the thread may be bound to (Comm::spreadOverCores).
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <cstdint>

namespace loom {

// The executor's waiting (LOOM_SPIN_COUNT, LOOM_YIELD_USEC).
struct WaitPolicy {
  int64_t spinCount = 2000;
  uint64_t yieldNs = 2000000;
  // Ranks beyond the machine's usable cores must not spin (LOOM_SPIN_COUNT's default): the peer
  // they wait for may need the very core they would be burning.
  static WaitPolicy fromParams(int machineRanks, int usableCores);
};

// LOOM_BIND: the thread bound to one CPU, given back the CPUs it had when this goes, unless
// someone bound it elsewhere since.
class CpuBinding {
 public:
  CpuBinding() = default;
  CpuBinding(const CpuBinding&) = delete;
  CpuBinding& operator=(const CpuBinding&) = delete;
  ~CpuBinding();
  // Binds the calling thread to cpu; false (errno set) where it cannot, leaving it unbound.
  bool bind(int cpu);

 private:
  pid_t tid_ = 0;  // 0: none bound
  int cpu_ = -1;
  cpu_set_t before_ = {};
};

}  // namespace loom
