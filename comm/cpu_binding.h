// How this communicator's thread uses the CPUs: how the executor waits for its peers, and the
// one CPU the thread may be bound to (Comm::spreadOverCores).
#pragma once

#include <sched.h>
#include <sys/types.h>

#include <cstdint>

namespace loom {

// The executor's waiting: polls before it yields (LOOM_SPIN_COUNT), and how long it sleeps
// once it yields (LOOM_YIELD_USEC).
struct WaitPolicy {
  int64_t spinCount = 2000;  // negative: the communicator's to choose (chooseSpin)
  uint64_t yieldNs = 2000000;
  // A negative spin count becomes 0 where the machine's ranks outnumber its usable cores, else
  // 2000: a rank beyond them must not spin, as the peer it waits for may need the very core it
  // would be burning.
  void chooseSpin(int machineRanks, int usableCores) {
    if (spinCount < 0) spinCount = machineRanks > usableCores ? 0 : 2000;
  }
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
