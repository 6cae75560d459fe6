/* Device buffers are refused, host buffers run: loom's NCCL on one rank with the stand-in CUDA
 * runtime (fake_cudart.c), which calls one range device memory.
 *
 *   device_buffers_test refused    the runtime reports a device: every collective and
 *                                  send/recv refuses the range with ncclInvalidUsage and a
 *                                  message naming the argument, and leaves memory untouched
 *   device_buffers_test unchecked  no runtime, or one that reports no device: no buffer is
 *                                  checked (the runtime is never asked) and the range is used
 *                                  as the host memory it is */
#include <nccl.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

void* fakeCudaDeviceBuffer(size_t* bytes);
int fakeCudaPointerQueries(void);

/* The call returned ncclInvalidUsage and its message names `argument` as device memory. */
static void expectRefused(ncclResult_t r, ncclComm_t comm, const char* fn, const char* argument) {
  char expected[128];
  snprintf(expected, sizeof(expected), "%s: %s (", fn, argument);
  const char* message = ncclGetLastError(comm);
  if (r != ncclInvalidUsage || strstr(message, expected) == NULL ||
      strstr(message, "device memory") == NULL) {
    fprintf(stderr, "%s with device %s: result %d, message '%s'\n", fn, argument, (int)r, message);
    ++failures;
  }
}

static void refused(ncclComm_t comm, float* device, float* host) {
  const float before = device[0];
  host[0] = 5;
  expectRefused(ncclAllReduce(device, host, 1, ncclFloat32, ncclSum, comm, NULL), comm,
                "ncclAllReduce", "sendbuff");
  expectRefused(ncclAllReduce(host, device, 1, ncclFloat32, ncclSum, comm, NULL), comm,
                "ncclAllReduce", "recvbuff");
  expectRefused(ncclBroadcast(host, device, 1, ncclFloat32, 0, comm, NULL), comm, "ncclBroadcast",
                "recvbuff");
  expectRefused(ncclBcast(device, 1, ncclFloat32, 0, comm, NULL), comm, "ncclBcast", "buff");
  expectRefused(ncclReduce(device, host, 1, ncclFloat32, ncclSum, 0, comm, NULL), comm,
                "ncclReduce", "sendbuff");
  expectRefused(ncclAllGather(host, device, 1, ncclFloat32, comm, NULL), comm, "ncclAllGather",
                "recvbuff");
  expectRefused(ncclReduceScatter(device, host, 1, ncclFloat32, ncclSum, comm, NULL), comm,
                "ncclReduceScatter", "sendbuff");
  expectRefused(ncclAlltoAll(device, host, 1, ncclFloat32, comm, NULL), comm, "ncclAlltoAll",
                "sendbuff");
  expectRefused(ncclGather(host, device, 1, ncclFloat32, 0, comm, NULL), comm, "ncclGather",
                "recvbuff");
  expectRefused(ncclScatter(device, host, 1, ncclFloat32, 0, comm, NULL), comm, "ncclScatter",
                "sendbuff");
  expectRefused(ncclSend(device, 1, ncclFloat32, 0, comm, NULL), comm, "ncclSend", "sendbuff");
  expectRefused(ncclRecv(device, 1, ncclFloat32, 0, comm, NULL), comm, "ncclRecv", "recvbuff");
  CHECK(device[0] == before && host[0] == 5); /* nothing was read or written */
  /* Host buffers still run, with any stream. */
  float in = 3, out = 0;
  CHECK(ncclAllReduce(&in, &out, 1, ncclFloat32, ncclSum, comm, (cudaStream_t)0x1234) ==
        ncclSuccess);
  CHECK(out == 3);
  CHECK(fakeCudaPointerQueries() > 0);
}

static void unchecked(ncclComm_t comm, float* device) {
  float in = 7;
  device[0] = 0;
  CHECK(ncclAllReduce(&in, device, 1, ncclFloat32, ncclSum, comm, NULL) == ncclSuccess);
  CHECK(device[0] == 7);
  CHECK(fakeCudaPointerQueries() == 0);
}

int main(int argc, char** argv) {
  if (argc != 2 || (strcmp(argv[1], "refused") != 0 && strcmp(argv[1], "unchecked") != 0)) {
    fprintf(stderr, "usage: %s refused|unchecked\n", argv[0]);
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
  if (strcmp(argv[1], "refused") == 0)
    refused(comm, device, host);
  else
    unchecked(comm, device);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  if (failures == 0) printf("%s: all checks passed\n", argv[1]);
  return failures == 0 ? 0 : 1;
}
