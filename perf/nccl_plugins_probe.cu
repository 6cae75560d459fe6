// A small NCCL program for perf/nccl-plugins-gpu.sh: every visible GPU (up to 8) in one
// communicator, a few allreduce sizes (8 B .. 64 MiB), each checked, each timed. Run under
// NCCL_TUNER_PLUGIN=loom (and NCCL_NET_PLUGIN=loom) with NCCL_DEBUG=INFO, NCCL's log shows the
// plugins loading and the tuner's choices. Built with nvcc against the machine's own NCCL.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

static void check(bool ok, const char* call, const char* error, const char* file, int line) {
  if (ok) return;
  fprintf(stderr, "%s:%d %s: %s\n", file, line, call, error);
  exit(1);
}
#define CHECK_CUDA(x)                                                                       \
  do {                                                                                      \
    cudaError_t e_ = (x);                                                                   \
    check(e_ == cudaSuccess, #x, cudaGetErrorString(e_), __FILE__, __LINE__);               \
  } while (0)
#define CHECK_NCCL(x)                                                                       \
  do {                                                                                      \
    ncclResult_t r_ = (x);                                                                  \
    check(r_ == ncclSuccess, #x, ncclGetErrorString(r_), __FILE__, __LINE__);               \
  } while (0)

int main() {
  int version = 0, ndev = 0;
  CHECK_NCCL(ncclGetVersion(&version));
  CHECK_CUDA(cudaGetDeviceCount(&ndev));
  if (ndev > 8) ndev = 8;
  // Every visible GPU in one communicator (NCCL refuses two ranks on one GPU). With one GPU
  // NCCL runs a call as a copy and asks no tuner: only the plugin's load and init show then.
  printf("probe: NCCL %d, %d GPUs\n", version, ndev);
  std::vector<int> devs(ndev);
  for (int d = 0; d < ndev; ++d) devs[d] = d;
  std::vector<ncclComm_t> comms(ndev);
  CHECK_NCCL(ncclCommInitAll(comms.data(), ndev, devs.data()));
  const size_t maxCount = size_t(16) << 20;  // 64 MiB of floats
  std::vector<float*> bufs(ndev);
  std::vector<cudaStream_t> streams(ndev);
  for (int d = 0; d < ndev; ++d) {
    CHECK_CUDA(cudaSetDevice(d));
    CHECK_CUDA(cudaStreamCreate(&streams[d]));
    CHECK_CUDA(cudaMalloc(&bufs[d], maxCount * sizeof(float)));
  }
  std::vector<float> host(maxCount);
  auto allreduce = [&](size_t count) {
    CHECK_NCCL(ncclGroupStart());
    for (int d = 0; d < ndev; ++d)
      CHECK_NCCL(ncclAllReduce(bufs[d], bufs[d], count, ncclFloat, ncclSum, comms[d], streams[d]));
    CHECK_NCCL(ncclGroupEnd());
    for (int d = 0; d < ndev; ++d) CHECK_CUDA(cudaStreamSynchronize(streams[d]));
  };
  int failures = 0;
  for (size_t count = 2; count <= maxCount; count *= 16) {
    for (size_t i = 0; i < count; ++i) host[i] = float(i % 7);
    for (int d = 0; d < ndev; ++d)
      CHECK_CUDA(cudaMemcpy(bufs[d], host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
    allreduce(count);  // checked: every element is ndev times its input
    CHECK_CUDA(cudaMemcpy(host.data(), bufs[0], count * sizeof(float), cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += host[i] != float(i % 7) * ndev;
    failures += wrong != 0;
    const int iters = 20;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) allreduce(count);
    const double us = std::chrono::duration<double, std::micro>(
                          std::chrono::steady_clock::now() - start).count() / iters;
    printf("probe: allreduce %zu bytes on %d GPUs: %.2f us, %zu wrong\n", count * sizeof(float),
           ndev, us, wrong);
  }
  for (int d = 0; d < ndev; ++d) {
    CHECK_CUDA(cudaSetDevice(d));
    CHECK_CUDA(cudaFree(bufs[d]));
    CHECK_NCCL(ncclCommDestroy(comms[d]));
  }
  printf("probe: %s\n", failures ? "FAILED" : "OK");
  return failures ? 1 : 0;
}
