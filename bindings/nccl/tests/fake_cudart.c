/* A stand-in CUDA runtime for the tests of loom's NCCL on machines without a GPU: loaded through
 * LOOM_CUDA_RUNTIME, it reports FAKE_CUDA_DEVICES devices (1 by default) and calls one static
 * range of host memory (fakeCudaDeviceBuffer) device memory. The signatures are the CUDA
 * header's. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static char gDeviceRange[4096];
static int gQueries;

/* The range the runtime calls device memory, and its size. */
void* fakeCudaDeviceBuffer(size_t* bytes) {
  *bytes = sizeof(gDeviceRange);
  return gDeviceRange;
}

/* How many times cudaPointerGetAttributes was asked. */
int fakeCudaPointerQueries(void) { return gQueries; }

cudaError_t cudaGetDeviceCount(int* count) {
  const char* devices = getenv("FAKE_CUDA_DEVICES");
  *count = devices != NULL ? atoi(devices) : 1;
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attributes, const void* ptr) {
  ++gQueries;
  const uintptr_t p = (uintptr_t)ptr;
  const uintptr_t begin = (uintptr_t)gDeviceRange;
  memset(attributes, 0, sizeof(*attributes));
  if (p >= begin && p < begin + sizeof(gDeviceRange)) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->devicePointer = (void*)ptr;
  } else {
    attributes->type = cudaMemoryTypeUnregistered;
  }
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) { return cudaSuccess; }
