#!/usr/bin/env bash
# perf/gpu-check.sh [OUT_DIR]: loom's CUDA path on a machine with a GPU (docs/DEVICE.md), in under
# 8 minutes (GPU_CHECK_SECONDS, default 470, bounds the whole run; every step has a deadline). It
#   1. builds loom (build-gpu/: the library, its tests, loom-perf, and the drop-in libnccl.so.2
#      where CUDA's nccl.h is found);
#   2. runs the device tests on the GPU (LOOM_TEST_DEVICE=cuda: 1 to 8 ranks sharing the one GPU,
#      two streams, groups, capture, a killed rank);
#   3. runs loom-perf on device buffers (--mem device) for allreduce and allgather at 1, 2 and 4
#      ranks;
#   4. where nccl-tests' all_reduce_perf is found (NCCL_TESTS_DIR, else PATH), runs it on the
#      real NCCL and on loom's libnccl.so.2, one rank on the GPU, the same sizes.
# Results go to OUT_DIR (default gpu-check-DATE): a log per step, the JSON of each run, and
# summary.txt with each step's exit status. The script exits non-zero if a step failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out="${1:-gpu-check-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"
build="${LOOM_BUILD_DIR:-build-gpu}"
summary="$out/summary.txt"
: > "$summary"
failed=0

# The whole run's budget: each step's deadline is cut to what is left of it.
budget=${GPU_CHECK_SECONDS:-470}

# step NAME SECONDS COMMAND...: runs COMMAND under a deadline, its output in NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((budget - SECONDS))
  if [ "$left" -lt 10 ]; then
    echo "$name: skipped (the ${budget}s budget is spent)" | tee -a "$summary"
    failed=1
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (at most ${limit}s)"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "$name: exit $rc after $((SECONDS - start))s" | tee -a "$summary"
  [ "$rc" -eq 0 ] || failed=1
  return "$rc"
}

# The CUDA runtime loom loads (LOOM_DEVICE=cuda): the loader's, else the toolkit's or a Python
# wheel's libcudart, named by LOOM_CUDA_RUNTIME.
find_cudart() {
  ldconfig -p 2> /dev/null | grep -q 'libcudart\.so' && return 0
  local found
  found=$(ls "${CUDA_HOME:-/usr/local/cuda}"/lib64/libcudart.so.* /usr/local/cuda*/lib64/libcudart.so.* \
            /usr/lib/python3*/*-packages/nvidia/cuda_runtime/lib/libcudart.so.* \
            /usr/local/lib/python3*/*-packages/nvidia/cuda_runtime/lib/libcudart.so.* 2> /dev/null |
            head -1)
  [ -n "$found" ] && export LOOM_CUDA_RUNTIME="$found"
  [ -n "$found" ]
}

{
  date -u
  git rev-parse HEAD 2> /dev/null
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2> /dev/null ||
    echo "nvidia-smi: not found"
} > "$out/machine.txt"
find_cudart || echo "no libcudart found: the CUDA steps will fail" | tee -a "$summary"
echo "LOOM_CUDA_RUNTIME=${LOOM_CUDA_RUNTIME:-none: the loader finds it}" >> "$out/machine.txt"

launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
step configure 60 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" &&
  step build 200 cmake --build "$build" -j"$(nproc)" --target loom_mp_tests loom-perf || {
  echo "the build failed: see $out/build.log"
  exit 1
}
# The drop-in libnccl.so.2, where CUDA's nccl.h was found (else the target does not exist).
grep -q 'loom_nccl' "$build/Makefile" 2> /dev/null &&
  step build_nccl 60 cmake --build "$build" -j"$(nproc)" --target loom_nccl

export LOOM_TEST_DEVICE=cuda LOOM_DEVICE=cuda
step device_tests 100 "$build/tests/loom_mp_tests" \
  --gtest_filter='Ranks/DeviceCollectives.*:DeviceStreams.*' \
  --gtest_output="json:$out/device_tests.json"

for coll in all_reduce all_gather; do
  for n in 1 2 4; do
    step "loom_perf_${coll}_N$n" 20 "$build/perf/loom-perf" "$coll" -N "$n" --mem device \
      -b 8 -e 64M -f 8 -n 10 -w 3 --json "$out/loom_perf_${coll}_N$n.json"
  done
done

nccl_tests="${NCCL_TESTS_DIR:+$NCCL_TESTS_DIR/}all_reduce_perf"
if command -v "$nccl_tests" > /dev/null 2>&1; then
  step nccl_tests_real_nccl 25 "$nccl_tests" -b 8 -e 64M -f 8 -g 1 -n 10 -w 3
  loom_nccl_dir="$build/nccl"
  if [ -e "$loom_nccl_dir/libnccl.so.2" ]; then
    step nccl_tests_loom 25 env LD_LIBRARY_PATH="$loom_nccl_dir:${LD_LIBRARY_PATH:-}" \
      "$nccl_tests" -b 8 -e 64M -f 8 -g 1 -n 10 -w 3
  else
    echo "nccl_tests_loom: skipped (no $loom_nccl_dir/libnccl.so.2: nccl.h not found)" | tee -a "$summary"
  fi
else
  echo "nccl-tests: skipped (no all_reduce_perf in NCCL_TESTS_DIR or on PATH)" | tee -a "$summary"
fi

echo "results in $out"
exit "$failed"
