// Refusing CUDA device buffers: loom's NCCL moves host memory only, and a device pointer read
// as host memory would crash or return garbage. The CUDA runtime tells them apart; it is loaded
// with dlopen, once, only where it is installed, so the library needs no CUDA to load or run.
// Without a runtime, or when it sees no device, no device memory can exist and no call is
// checked (gDeviceMemory = 0: one predictable branch per call).
//
// LOOM_CUDA_RUNTIME=path loads that library instead of the usual names: the tests use it to
// load a stand-in runtime that reports a device.
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

#include "bindings/nccl/shim.h"

namespace loom::nccl {

std::atomic<int> gDeviceMemory{-1};

namespace {

// The runtime's functions used here, with the types of the header built against (their
// signatures and cudaPointerAttributes' leading fields are the same from CUDA 11 on).
struct Runtime {
  decltype(&cudaGetDeviceCount) getDeviceCount = nullptr;
  decltype(&cudaPointerGetAttributes) pointerGetAttributes = nullptr;
  decltype(&cudaGetLastError) getLastError = nullptr;  // optional
};
Runtime gRuntime;
std::once_flag gProbeOnce;

void* openRuntime(std::string* name) {
  if (const char* forced = getenv("LOOM_CUDA_RUNTIME"); forced != nullptr && *forced != '\0') {
    *name = forced;
    return dlopen(forced, RTLD_NOW | RTLD_LOCAL);
  }
  for (const char* candidate :
       {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11", "libcudart.so"}) {
    if (void* h = dlopen(candidate, RTLD_NOW | RTLD_LOCAL)) {
      *name = candidate;
      return h;
    }
  }
  return nullptr;
}

// Sets gDeviceMemory to 1 if a runtime with at least one device is there, else 0.
void probe() {
  std::string name;
  void* h = openRuntime(&name);
  Runtime rt;
  int devices = 0;
  if (h != nullptr) {
    rt.getDeviceCount =
        reinterpret_cast<decltype(rt.getDeviceCount)>(dlsym(h, "cudaGetDeviceCount"));
    rt.pointerGetAttributes =
        reinterpret_cast<decltype(rt.pointerGetAttributes)>(dlsym(h, "cudaPointerGetAttributes"));
    rt.getLastError = reinterpret_cast<decltype(rt.getLastError)>(dlsym(h, "cudaGetLastError"));
    if (rt.getDeviceCount == nullptr || rt.pointerGetAttributes == nullptr ||
        rt.getDeviceCount(&devices) != cudaSuccess)
      devices = 0;
    if (devices == 0 && rt.getLastError != nullptr) rt.getLastError();  // leave no error set
  }
  std::string line = h == nullptr
                         ? std::string("no CUDA runtime found")
                         : "CUDA runtime " + name + ": " + std::to_string(devices) + " device(s)";
  line += devices > 0 ? "; device buffers are refused (loom's NCCL moves host memory only)"
                      : "; no device memory can exist, buffers are not checked";
  loomLogInfo("INIT", line.c_str());
  if (devices > 0) {
    gRuntime = rt;
    gDeviceMemory.store(1, std::memory_order_release);
  } else {
    gDeviceMemory.store(0, std::memory_order_release);
  }
}

bool isDevicePointer(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes attributes = {};
  if (gRuntime.pointerGetAttributes(&attributes, p) != cudaSuccess) {
    if (gRuntime.getLastError != nullptr) gRuntime.getLastError();
    return false;  // not memory CUDA knows of
  }
  return attributes.type == cudaMemoryTypeDevice;
}

}  // namespace

void probeDeviceMemory() { std::call_once(gProbeOnce, probe); }

ncclResult_t refuseDeviceBuffers(const char* fn, const char* nameA, const void* a,
                                 const char* nameB, const void* b) {
  probeDeviceMemory();
  if (gDeviceMemory.load(std::memory_order_acquire) == 0) return ncclSuccess;
  for (auto [name, p] : {std::pair{nameA, a}, std::pair{nameB, b}}) {
    if (name != nullptr && isDevicePointer(p))
      return fail(ncclInvalidUsage,
                  "%s: %s (%p) is CUDA device memory; loom's NCCL moves host memory only "
                  "(device buffers are not supported yet): pass host buffers",
                  fn, name, p);
  }
  return ncclSuccess;
}

}  // namespace loom::nccl
