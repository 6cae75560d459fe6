/* A stand-in CUDA runtime for the tests of loom's NCCL on machines without a GPU: loaded through
 * LOOM_CUDA_RUNTIME, it reports FAKE_CUDA_DEVICES devices (1 by default) and calls one static
 * range of host memory (fakeCudaDeviceBuffer) device memory. Its streams do their work at once,
 * in the calling thread: a copy copies, a host function runs (loom's wait on its progress thread
 * then blocks the enqueueing call until the call has run), so loom's CUDA device (device/cuda.cc)
 * runs whole through it. The signatures are the CUDA header's. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static char gDeviceRange[4096];
static int gQueries, gHostFunctions, gFailHostFunctions;
static cudaStream_t gCapturing; /* the stream being captured, if any */

/* The range the runtime calls device memory, and its size. */
void* fakeCudaDeviceBuffer(size_t* bytes) {
  *bytes = sizeof(gDeviceRange);
  return gDeviceRange;
}

/* How many times cudaPointerGetAttributes was asked; cudaLaunchHostFunc called. */
int fakeCudaPointerQueries(void) { return gQueries; }
int fakeCudaHostFunctions(void) { return gHostFunctions; }
/* From now on cudaLaunchHostFunc fails (fail != 0), as a runtime with a broken context would. */
void fakeCudaFailHostFunctions(int fail) { gFailHostFunctions = fail; }

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
const char* cudaGetErrorString(cudaError_t error) { return error ? "fake error" : "no error"; }

cudaError_t cudaHostAlloc(void** p, size_t size, unsigned int flags) {
  (void)flags;
  *p = malloc(size);
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void* p) {
  free(p);
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** p, size_t size) {
  (void)p, (void)size;
  return cudaErrorMemoryAllocation; /* the static range is the only device memory */
}
cudaError_t cudaFree(void* p) {
  (void)p;
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  (void)kind;
  memmove(dst, src, count);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  (void)stream;
  return cudaMemcpy(dst, src, count, kind);
}
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  (void)stream;
  if (gFailHostFunctions) return cudaErrorLaunchFailure;
  ++gHostFunctions;
  fn(userData);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  *stream = (cudaStream_t)malloc(1);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  free(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  (void)stream;
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  (void)stream;
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus* status) {
  *status = stream != NULL && stream == gCapturing ? cudaStreamCaptureStatusActive
                                                   : cudaStreamCaptureStatusNone;
  return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  (void)mode;
  gCapturing = stream;
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  (void)stream;
  gCapturing = NULL;
  *graph = NULL;
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  (void)graph;
  return cudaSuccess;
}

/* Events: the work before them is done when they are recorded (the streams run at once). */
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  (void)flags;
  *event = (cudaEvent_t)malloc(1);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  free(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  (void)event, (void)stream;
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  (void)stream, (void)event, (void)flags;
  return cudaSuccess;
}
