// The CUDA device: libcudart loaded with dlopen at first use, so that loom builds, loads and
// runs without CUDA. The functions are declared here with the runtime's ABI (plain ints, enums
// and pointers, the same from CUDA 11 on) rather than from its headers.
//
// The stream's wait on loom's flag is cuStreamWaitValue32 (libcuda's, the GPU itself waiting on
// the pinned host word) where the driver has it: the runtime may run every stream's host
// functions on one thread, so a host function that blocked until the flag were set could hold
// back another stream's arrival that the awaited call needs. Without it, the wait is a host
// function that polls the flag, with that limit (one stream per process is safe).
#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "base/clock.h"
#include "device/device.h"

namespace loom::device {
namespace {

using cudaError = int;
constexpr int kMemcpyDefault = 4;          // cudaMemcpyDefault: the runtime sees which side is which
constexpr int kMemoryTypeDevice = 2;       // cudaMemoryTypeDevice
constexpr int kCaptureModeRelaxed = 2;     // cudaStreamCaptureModeRelaxed
constexpr unsigned kHostAllocPortable = 1; // cudaHostAllocPortable
constexpr unsigned kEventDisableTiming = 2;  // cudaEventDisableTiming
constexpr unsigned kWaitValueAnd = 2;      // CU_STREAM_WAIT_VALUE_AND: until (*addr & value) != 0

struct PointerAttributes {  // cudaPointerAttributes' fields (CUDA 11 on)
  int type;
  int device;
  void* devicePointer;
  void* hostPointer;
  char reserved[64];  // room for fields a later runtime adds
};

struct Api {
  cudaError (*getDeviceCount)(int*);
  cudaError (*pointerGetAttributes)(PointerAttributes*, const void*);
  cudaError (*getLastError)();
  const char* (*getErrorString)(cudaError);
  cudaError (*hostAlloc)(void**, size_t, unsigned);
  cudaError (*freeHost)(void*);
  cudaError (*memcpyAsync)(void*, const void*, size_t, int, void*);
  cudaError (*memcpy)(void*, const void*, size_t, int);
  cudaError (*launchHostFunc)(void*, HostFn, void*);
  cudaError (*streamIsCapturing)(void*, int*);
  cudaError (*malloc)(void**, size_t);
  cudaError (*free)(void*);
  cudaError (*streamCreate)(void**);
  cudaError (*streamDestroy)(void*);
  cudaError (*streamSynchronize)(void*);
  cudaError (*streamQuery)(void*);
  cudaError (*beginCapture)(void*, int);
  cudaError (*endCapture)(void*, void**);
  cudaError (*graphDestroy)(void*);
  cudaError (*eventCreateWithFlags)(void**, unsigned);
  cudaError (*eventDestroy)(void*);
  cudaError (*eventRecord)(void*, void*);
  cudaError (*streamWaitEvent)(void*, void*, unsigned);
  // libcuda's (optional): CUresult cuStreamWaitValue32(CUstream, CUdeviceptr, uint32_t, unsigned)
  int (*streamWaitValue32)(void*, uint64_t, uint32_t, unsigned) = nullptr;
};

constexpr const char* kNames[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11",
                                  "libcudart.so"};

void* openRuntime(int flags, std::string* name) {
  if (const char* forced = getenv("LOOM_CUDA_RUNTIME"); forced && *forced) {
    *name = forced;
    return dlopen(forced, flags);
  }
  for (const char* candidate : kNames)
    if (void* h = dlopen(candidate, flags)) {
      *name = candidate;
      return h;
    }
  return nullptr;
}

// Host function of waitFlag: polls until the flag leaves kPending or the deadline passes.
struct FlagWait {
  const std::atomic<uint32_t>* flag;
  int64_t timeoutMs;
};
void pollFlag(void* arg) {
  auto* w = static_cast<FlagWait*>(arg);
  Deadline deadline(w->timeoutMs);
  while (w->flag->load(std::memory_order_acquire) == kPending && !deadline.expired())
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  delete w;
}

class Cuda final : public Device {
 public:
  explicit Cuda(const Api& api) : api_(api) {}
  const char* name() const override { return "cuda"; }

  bool isDeviceMemory(const void* p) override {
    if (p == nullptr) return false;
    PointerAttributes a{};
    if (api_.pointerGetAttributes(&a, p) != 0) {
      api_.getLastError();  // unknown to CUDA: host memory; leave no error set
      return false;
    }
    return a.type == kMemoryTypeDevice;
  }
  Status allocHost(void** p, size_t bytes) override {
    return check(api_.hostAlloc(p, std::max<size_t>(bytes, 1), kHostAllocPortable), "cudaHostAlloc");
  }
  void freeHost(void* p) override { api_.freeHost(p); }
  Status copyAsync(void* dst, const void* src, size_t bytes, void* stream) override {
    return check(api_.memcpyAsync(dst, src, bytes, kMemcpyDefault, stream), "cudaMemcpyAsync");
  }
  Status launchHostFunc(void* stream, HostFn fn, void* arg) override {
    return check(api_.launchHostFunc(stream, fn, arg), "cudaLaunchHostFunc");
  }
  // The flag is in memory from allocHost: pinned, so (with unified addressing) its address is
  // the device's too. A driver that refuses the wait once is not asked again.
  Status waitFlag(void* stream, const std::atomic<uint32_t>* flag, int64_t timeoutMs) override {
    if (api_.streamWaitValue32 != nullptr && gpuWaits_.load(std::memory_order_relaxed)) {
      const uint32_t either = kDone | kFailed;
      if (api_.streamWaitValue32(stream, reinterpret_cast<uint64_t>(flag), either,
                                 kWaitValueAnd) == 0)
        return Status::ok();
      gpuWaits_.store(false);
      api_.getLastError();
    }
    auto* w = new FlagWait{flag, timeoutMs};
    Status st = launchHostFunc(stream, pollFlag, w);
    if (!st.isOk()) delete w;
    return st;
  }
  Status isCapturing(void* stream, bool* capturing) override {
    int status = 0;
    LOOM_TRY(check(api_.streamIsCapturing(stream, &status), "cudaStreamIsCapturing"));
    *capturing = status != 0;  // active, or invalidated: either way no plain enqueue
    return Status::ok();
  }
  Status malloc(void** p, size_t bytes) override { return check(api_.malloc(p, bytes), "cudaMalloc"); }
  Status free(void* p) override { return check(api_.free(p), "cudaFree"); }
  Status copy(void* dst, const void* src, size_t bytes) override {
    return check(api_.memcpy(dst, src, bytes, kMemcpyDefault), "cudaMemcpy");
  }
  Status streamCreate(void** s) override { return check(api_.streamCreate(s), "cudaStreamCreate"); }
  Status streamDestroy(void* s) override { return check(api_.streamDestroy(s), "cudaStreamDestroy"); }
  // Polls cudaStreamQuery so that the wait has a deadline (cudaStreamSynchronize has none).
  Status streamSynchronize(void* s, int64_t timeoutMs) override {
    Deadline deadline(timeoutMs);
    for (;;) {
      cudaError e = api_.streamQuery(s);
      if (e != 600) return check(e, "cudaStreamQuery");  // 600: cudaErrorNotReady
      if (deadline.expired())
        return errorf(loomTimeout, "CUDA stream still busy after %lld ms", (long long)timeoutMs);
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  Status beginCapture(void* s) override {
    return check(api_.beginCapture(s, kCaptureModeRelaxed), "cudaStreamBeginCapture");
  }
  Status eventCreate(void** e) override {
    return check(api_.eventCreateWithFlags(e, kEventDisableTiming), "cudaEventCreateWithFlags");
  }
  Status eventDestroy(void* e) override { return check(api_.eventDestroy(e), "cudaEventDestroy"); }
  Status eventRecord(void* e, void* s) override {
    return check(api_.eventRecord(e, s), "cudaEventRecord");
  }
  Status streamWaitEvent(void* s, void* e) override {
    return check(api_.streamWaitEvent(s, e, 0), "cudaStreamWaitEvent");
  }
  Status endCapture(void* s) override {
    void* graph = nullptr;
    LOOM_TRY(check(api_.endCapture(s, &graph), "cudaStreamEndCapture"));
    if (graph != nullptr) api_.graphDestroy(graph);
    return Status::ok();
  }

 private:
  Status check(cudaError e, const char* what) {
    if (e == 0) return Status::ok();
    api_.getLastError();
    return errorf(loomSystemError, "%s failed: CUDA error %d (%s)", what, e,
                  api_.getErrorString ? api_.getErrorString(e) : "?");
  }
  Api api_;
  std::atomic<bool> gpuWaits_{true};
};

template <typename F>
bool bind(void* h, const char* symbol, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(h, symbol));
  return *fn != nullptr;
}

bool bindAll(void* h, Api* a) {
  return bind(h, "cudaGetDeviceCount", &a->getDeviceCount) &&
         bind(h, "cudaPointerGetAttributes", &a->pointerGetAttributes) &&
         bind(h, "cudaGetLastError", &a->getLastError) &&
         bind(h, "cudaGetErrorString", &a->getErrorString) &&
         bind(h, "cudaHostAlloc", &a->hostAlloc) && bind(h, "cudaFreeHost", &a->freeHost) &&
         bind(h, "cudaMemcpyAsync", &a->memcpyAsync) && bind(h, "cudaMemcpy", &a->memcpy) &&
         bind(h, "cudaLaunchHostFunc", &a->launchHostFunc) &&
         bind(h, "cudaStreamIsCapturing", &a->streamIsCapturing) &&
         bind(h, "cudaMalloc", &a->malloc) && bind(h, "cudaFree", &a->free) &&
         bind(h, "cudaStreamCreate", &a->streamCreate) &&
         bind(h, "cudaStreamDestroy", &a->streamDestroy) &&
         bind(h, "cudaStreamSynchronize", &a->streamSynchronize) &&
         bind(h, "cudaStreamQuery", &a->streamQuery) &&
         bind(h, "cudaStreamBeginCapture", &a->beginCapture) &&
         bind(h, "cudaStreamEndCapture", &a->endCapture) &&
         bind(h, "cudaGraphDestroy", &a->graphDestroy) &&
         bind(h, "cudaEventCreateWithFlags", &a->eventCreateWithFlags) &&
         bind(h, "cudaEventDestroy", &a->eventDestroy) &&
         bind(h, "cudaEventRecord", &a->eventRecord) &&
         bind(h, "cudaStreamWaitEvent", &a->streamWaitEvent);
}

}  // namespace

bool cudaRuntimeLoaded() {
  std::string name;
  void* h = openRuntime(RTLD_NOW | RTLD_NOLOAD, &name);
  if (h != nullptr) dlclose(h);  // drops the reference RTLD_NOLOAD took
  return h != nullptr;
}

Device* makeCuda(Status* st) {
  std::string name;
  void* h = openRuntime(RTLD_NOW | RTLD_LOCAL, &name);
  if (h == nullptr) {
    *st = errorf(loomSystemError, "no CUDA runtime loads (tried libcudart.so.13/12/11: %s)",
                 dlerror());
    return nullptr;
  }
  Api api{};
  int devices = 0;
  if (!bindAll(h, &api)) {
    *st = errorf(loomSystemError, "%s lacks a function loom uses (CUDA 11 or later is needed)",
                 name.c_str());
    return nullptr;
  }
  // libcuda, which the runtime has loaded by now (or will): the GPU-side wait.
  if (void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)) {
    if (!bind(driver, "cuStreamWaitValue32_v2", &api.streamWaitValue32))
      bind(driver, "cuStreamWaitValue32", &api.streamWaitValue32);
  }
  if (api.getDeviceCount(&devices) != 0 || devices == 0) {
    api.getLastError();
    *st = errorf(loomSystemError, "%s sees no CUDA device", name.c_str());
    return nullptr;
  }
  return new Cuda(api);
}

}  // namespace loom::device
