// Which device a process uses (LOOM_DEVICE), made once per process: a forked child makes its
// own, since the parent's streams (threads) do not carry over and its memory is shared.
#include <pthread.h>

#include <atomic>
#include <mutex>
#include <new>
#include <string>

#include "base/log.h"
#include "base/params.h"
#include "device/device.h"

namespace loom::device {
namespace {

struct Selected {
  Device* device = nullptr;
  std::string why;
};
std::mutex gMutex;
Selected gSelected;
// Whether gSelected holds this process's choice: one load on every call's path. A forked child
// chooses again (the parent's device leaks there), with a fresh mutex (a parent's thread may
// have held it at the fork).
std::atomic<bool> gChosen{false};
const int gAtFork = pthread_atfork(nullptr, nullptr, [] {
  new (&gMutex) std::mutex;
  gChosen.store(false, std::memory_order_relaxed);
});

void select(Selected* s) {
  const std::string want = params::getString("LOOM_DEVICE");
  Status st;
  if (want == "emulated") {
    s->device = makeEmulated();
  } else if (want == "cuda" || (want == "auto" && cudaRuntimeLoaded())) {
    s->device = makeCuda(&st);
    if (s->device == nullptr) s->why = st.message();
  } else if (want == "none" || want == "auto") {
    s->why = want == "none" ? "LOOM_DEVICE=none" : "no CUDA runtime is loaded in this process";
  } else {
    s->why = "LOOM_DEVICE=" + want + " is not one of auto, cuda, emulated, none";
  }
  if (s->device == nullptr && want != "auto" && want != "none")
    LOOM_WARN("INIT", "device: %s; host memory only", s->why.c_str());
  else
    LOOM_INFO("INIT", "device: %s", s->device ? s->device->name() : s->why.c_str());
}

}  // namespace

Device* current() {
  if (gChosen.load(std::memory_order_acquire)) [[likely]]
    return gSelected.device;
  std::lock_guard<std::mutex> lock(gMutex);
  if (!gChosen.load(std::memory_order_relaxed)) {
    (void)gAtFork;
    gSelected = Selected{};
    select(&gSelected);
    gChosen.store(true, std::memory_order_release);
  }
  return gSelected.device;
}

const char* whyNone() {
  current();
  return gSelected.why.c_str();
}

}  // namespace loom::device
