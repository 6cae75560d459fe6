#!/usr/bin/env bash
# On a machine with a GPU, CUDA and NVIDIA's NCCL: shows the real NCCL loading loom's plugins
# in a one-GPU run of a small NCCL program (an allreduce), and prints what its log says of them.
#
#   perf/nccl-plugins-gpu.sh [BUILD_DIR]      (default build/; run scripts/build.sh first)
#
# CUDA_HOME (default /usr/local/cuda) must hold nccl.h and libnccl.so, or NCCL_HOME may.
set -uo pipefail
cd "$(dirname "$0")/.."
build="$(realpath "${1:-build}")"
cuda="${CUDA_HOME:-/usr/local/cuda}"
nccl="${NCCL_HOME:-$cuda}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The one-GPU program: an allreduce of 1 Mi floats on device 0, checked.
build_program() {
  cat > "$work/one_gpu.c" <<'C'
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
int main(void) {
  ncclComm_t comm;
  int dev = 0;
  size_t n = 1 << 20;
  float* buf;
  float host = 0;
  cudaStream_t s;
  if (ncclCommInitAll(&comm, 1, &dev) != ncclSuccess) return 1;
  cudaMalloc((void**)&buf, n * sizeof(float));
  cudaMemset(buf, 0, n * sizeof(float));
  cudaStreamCreate(&s);
  if (ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, s) != ncclSuccess) return 2;
  cudaStreamSynchronize(s);
  cudaMemcpy(&host, buf, sizeof(float), cudaMemcpyDeviceToHost);
  ncclCommDestroy(comm);
  printf("one_gpu: allreduce done, element 0 = %g\n", host);
  return host == 0 ? 0 : 3;
}
C
  gcc -O2 -o "$work/one_gpu" "$work/one_gpu.c" -I"$cuda/include" -I"$nccl/include" \
    -L"$cuda/lib64" -L"$nccl/lib" -L"$nccl/lib64" -lnccl -lcudart
}

# NCCL_NET_PLUGIN=loom: NCCL dlopens libnccl-net-loom.so (build/nccl-net/ on the library path)
# and takes its newest ncclNetPlugin_vN; the plugin's init logs "NET/loom".
check_net_plugin() {
  local log="$work/net.log"
  LD_LIBRARY_PATH="$build/nccl-net:$build:$nccl/lib:$nccl/lib64:${LD_LIBRARY_PATH:-}" \
    NCCL_NET_PLUGIN=loom NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
    timeout 120 "$work/one_gpu" > "$log" 2>&1
  local rc=$?
  grep -iE "NET/Plugin|NET/loom|Using network" "$log"
  if [ $rc -eq 0 ] && grep -q "NET/loom" "$log"; then
    echo "check_net_plugin: PASS (NCCL loaded libnccl-net-loom.so)"
  else
    echo "check_net_plugin: FAIL (exit $rc; log: $log)"; tail -20 "$log"; return 1
  fi
}

build_program || { echo "cannot build the one-GPU NCCL program (CUDA_HOME=$cuda)"; exit 1; }
status=0
check_net_plugin || status=1
exit $status
