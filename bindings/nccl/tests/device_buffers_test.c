/* Device buffers go through loom's stream-ordered path, host buffers run: loom's NCCL on one
 * rank with the stand-in CUDA runtime (fake_cudart.c), which calls one range device memory and
 * runs stream work at once.
 *
 *   device_buffers_test routed     the runtime reports a device: every collective and
 *                                  send/recv on the range goes through loom's CUDA device (the
 *                                  runtime's pointer queries and host functions), with the right
 *                                  result; a capturing stream is refused with a clear message
 *   device_buffers_test unchecked  no runtime, or one that reports no device: no buffer is
 *                                  checked (the runtime is never asked) and the range is used
 *                                  as the host memory it is */
#include <nccl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

void* fakeCudaDeviceBuffer(size_t* bytes);
int fakeCudaPointerQueries(void);
int fakeCudaHostFunctions(void);
void fakeCudaFailHostFunctions(int fail);

static void routed(ncclComm_t comm, float* device, float* host) {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream) == cudaSuccess);
  const int before = fakeCudaHostFunctions();
  device[0] = 5;
  host[0] = 0;
  CHECK(ncclAllReduce(device, host, 1, ncclFloat32, ncclSum, comm, stream) == ncclSuccess);
  CHECK(host[0] == 5);
  host[0] = 6;
  CHECK(ncclAllReduce(host, device, 1, ncclFloat32, ncclSum, comm, stream) == ncclSuccess);
  CHECK(device[0] == 6);
  CHECK(ncclBcast(device, 1, ncclFloat32, 0, comm, stream) == ncclSuccess && device[0] == 6);
  host[0] = 2;
  CHECK(ncclAllGather(host, device + 1, 1, ncclFloat32, comm, stream) == ncclSuccess);
  CHECK(device[1] == 2);
  CHECK(ncclReduceScatter(device, host + 1, 1, ncclFloat32, ncclMax, comm, NULL) == ncclSuccess);
  CHECK(host[1] == 6);
  /* A send to itself and its receive, in a group, device to device. */
  device[2] = 9;
  CHECK(ncclGroupStart() == ncclSuccess);
  CHECK(ncclSend(device + 2, 1, ncclFloat32, 0, comm, stream) == ncclSuccess);
  CHECK(ncclRecv(device + 3, 1, ncclFloat32, 0, comm, stream) == ncclSuccess);
  CHECK(ncclGroupEnd() == ncclSuccess);
  CHECK(device[3] == 9);
  CHECK(fakeCudaPointerQueries() > 0);
  CHECK(fakeCudaHostFunctions() > before); /* the stream's handshakes ran */
  /* Graph capture: refused, and the stream works again after it. */
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  ncclResult_t r = ncclAllReduce(device, device, 1, ncclFloat32, ncclSum, comm, stream);
  const char* message = ncclGetLastError(comm);
  if (r != ncclInvalidUsage || strstr(message, "captured into a graph") == NULL) {
    fprintf(stderr, "allreduce on a capturing stream: result %d, message '%s'\n", (int)r, message);
    ++failures;
  }
  cudaGraph_t graph;
  CHECK(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  CHECK(ncclAllReduce(device, device, 1, ncclFloat32, ncclSum, comm, stream) == ncclSuccess);
  /* Host buffers still run, with any stream. */
  float in = 3, out = 0;
  CHECK(ncclAllReduce(&in, &out, 1, ncclFloat32, ncclSum, comm, stream) == ncclSuccess);
  CHECK(out == 3);
  /* A call the runtime refuses to enqueue: its error now, and the communicator fails (its calls
   * could no longer match the peers'): the next call says so instead of waiting. */
  fakeCudaFailHostFunctions(1);
  CHECK(ncclAllReduce(device, device, 1, ncclFloat32, ncclSum, comm, stream) != ncclSuccess);
  fakeCudaFailHostFunctions(0);
  ncclResult_t async = ncclSuccess;
  /* The progress thread fails the communicator: within 5 s. */
  for (int i = 0; i < 5000 && async == ncclSuccess; ++i) {
    CHECK(ncclCommGetAsyncError(comm, &async) == ncclSuccess);
    if (async == ncclSuccess) usleep(1000);
  }
  CHECK(async != ncclSuccess);
  CHECK(ncclAllReduce(&in, &out, 1, ncclFloat32, ncclSum, comm, stream) != ncclSuccess);
  CHECK(strstr(ncclGetLastError(comm), "could not be enqueued") != NULL);
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
}

static void unchecked(ncclComm_t comm, float* device) {
  float in = 7;
  device[0] = 0;
  CHECK(ncclAllReduce(&in, device, 1, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess);
  CHECK(device[0] == 7);
  CHECK(fakeCudaPointerQueries() == 0);
}

int main(int argc, char** argv) {
  if (argc != 2 || (strcmp(argv[1], "routed") != 0 && strcmp(argv[1], "unchecked") != 0)) {
    fprintf(stderr, "usage: %s routed|unchecked\n", argv[0]);
    return 2;
  }
  size_t bytes = 0;
  float* device = (float*)fakeCudaDeviceBuffer(&bytes);
  ncclUniqueId id;
  ncclComm_t comm;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) {
    fprintf(stderr, "init: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  float host[4] = {0};
  if (strcmp(argv[1], "routed") == 0)
    routed(comm, device, host);
  else
    unchecked(comm, device);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  if (failures == 0) printf("%s: all checks passed\n", argv[1]);
  return failures == 0 ? 0 : 1;
}
