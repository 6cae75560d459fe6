// The few operations loom needs from a GPU runtime, behind one interface with two
// implementations: CUDA (cuda.cc: libcudart loaded with dlopen at first use, so loom needs no
// CUDA to build, load or run) and an emulated device (emulated.cc: "device memory" that host
// code cannot read, streams as in-order worker threads) on which the stream-ordered
// collectives are tested without a GPU. LOOM_DEVICE picks one (select.cc).
//
// A stream is the runtime's handle (cudaStream_t, or the emulated stream), passed as void*.
// A stream-ordered call is built from copies, host functions and waits on a flag that a host
// thread sets: work enqueued on the stream after the wait sees what that thread did.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "base/status.h"

namespace loom::device {

// The handshake between a stream and a host thread: the thread writes kDone or kFailed; the
// stream's work after waitFlag runs once the flag has left kPending.
enum FlagState : uint32_t { kPending = 0, kDone = 1, kFailed = 2 };
using HostFn = void (*)(void*);

class Device {
 public:
  virtual ~Device() = default;
  virtual const char* name() const = 0;

  // Whether p is device memory (NULL, host memory and unknown pointers: false).
  virtual bool isDeviceMemory(const void* p) = 0;
  // Whether [p, p + bytes) of device memory lies within one allocation, where the runtime can
  // tell (the emulated device; CUDA says nothing of an allocation's size here).
  virtual Status checkRange(const void* p, size_t bytes) {
    (void)p, (void)bytes;
    return Status::ok();
  }
  // Host memory a stream copies to and from quickly (pinned, where the runtime has it).
  virtual Status allocHost(void** p, size_t bytes) = 0;
  virtual void freeHost(void* p) = 0;

  // Stream-ordered work. A NULL stream is the runtime's default stream.
  virtual Status copyAsync(void* dst, const void* src, size_t bytes, void* stream) = 0;
  // fn(arg) runs on a host thread once the stream's earlier work has completed; later work
  // waits for it. fn must not call the runtime.
  virtual Status launchHostFunc(void* stream, HostFn fn, void* arg) = 0;
  // Later work waits until *flag leaves kPending; flag must be in memory from allocHost (the
  // GPU may read it). kFailed, or timeoutMs passing first, fails the
  // stream (the emulated stream's error is sticky and reported by streamSynchronize; CUDA's
  // stream goes on: the caller reports the failure through the communicator).
  virtual Status waitFlag(void* stream, const std::atomic<uint32_t>* flag, int64_t timeoutMs) = 0;
  // Whether the stream is being captured into a graph.
  virtual Status isCapturing(void* stream, bool* capturing) = 0;

  // What a program needs to use the device through loom's API (include/loom/loom_device.h):
  // the tests use it, so that they run on the emulated device here and on CUDA on a GPU.
  virtual Status malloc(void** p, size_t bytes) = 0;
  virtual Status free(void* p) = 0;
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;  // synchronous
  virtual Status streamCreate(void** stream) = 0;
  virtual Status streamDestroy(void* stream) = 0;
  virtual Status streamSynchronize(void* stream, int64_t timeoutMs) = 0;
  virtual Status beginCapture(void* stream) = 0;
  virtual Status endCapture(void* stream) = 0;
  // Events, for ordering one stream after another's work (cudaEvent_t).
  virtual Status eventCreate(void** event) = 0;
  virtual Status eventDestroy(void* event) = 0;
  virtual Status eventRecord(void* event, void* stream) = 0;
  virtual Status streamWaitEvent(void* stream, void* event) = 0;
};

// The device LOOM_DEVICE selects, made at first use: "emulated", "cuda" (an error if no CUDA
// runtime loads), "none" (nullptr: host memory only), or "auto" (the default): CUDA where the
// process has already loaded a CUDA runtime (a program that holds device memory has), else none.
// A process that forks gets a device of its own in the child.
Device* current();
// Why current() is nullptr where it is (LOOM_DEVICE=none, no runtime loaded, a load failure).
const char* whyNone();

// The two implementations (select.cc picks).
Device* makeEmulated();
Device* makeCuda(Status* st);  // nullptr with *st set when no runtime loads or has no device
bool cudaRuntimeLoaded();      // a CUDA runtime is already in the process (RTLD_NOLOAD)

}  // namespace loom::device
