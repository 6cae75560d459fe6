#!/usr/bin/env bash
# loom's NCCL plugins under the real NCCL of a GPU machine (docs/NCCL_PLUGINS.md), in one call
# of a few minutes: builds loom and its plugins, compiles a small NCCL program of ours
# (perf/nccl_plugins_probe.cu) with nvcc against the machine's NCCL, runs it with each plugin
# and NCCL_DEBUG=INFO, and keeps from NCCL's log what shows each plugin loaded and what it did.
#
# Usage: perf/nccl-plugins-gpu.sh [--dry-run] [RESULTS_DIR]   (default: $OUT, else
#        ./nccl-plugins-results). --dry-run prints the commands and runs none.
# Needs: nvcc and NCCL's nccl.h and libnccl.so (CUDA_HOME, /usr/local/cuda or /usr), cmake, a
# C++ compiler. Writes RESULTS_DIR/summary.txt and a log per step; exits 1 when a check fails.
set -uo pipefail
cd "$(dirname "$0")/.."

dry=0
if [[ "${1:-}" == "--dry-run" ]]; then dry=1; shift; fi
results="${1:-${OUT:-$PWD/nccl-plugins-results}}"
build="${LOOM_BUILD_DIR:-$PWD/build-gpu}"
cuda="${CUDA_HOME:-/usr/local/cuda}"
failed=0

# Runs a command (or prints it in a dry run), its output into RESULTS_DIR/<name>.log, with a
# deadline so that the whole script stays within minutes.
step() {
  local name="$1" limit="$2"; shift 2
  echo "== $name: $*" | tee -a "$results/summary.txt"
  ((dry)) && return 0
  timeout "$limit" "$@" > "$results/$name.log" 2>&1
  local rc=$?
  echo "   exit $rc (log: $name.log)" | tee -a "$results/summary.txt"
  return $rc
}

# Records a check's outcome: the lines of a log matching a pattern, or a failure.
expect() {
  local what="$1" log="$2" pattern="$3"
  ((dry)) && { echo "   would check: $what" >> "$results/summary.txt"; return 0; }
  if grep -E "$pattern" "$results/$log" > "$results/$what.txt" 2>/dev/null; then
    echo "   ok: $what ($(wc -l < "$results/$what.txt") lines in $what.txt)" | tee -a "$results/summary.txt"
  else
    echo "   FAILED: $what: no line of $log matches '$pattern'" | tee -a "$results/summary.txt"
    failed=1
  fi
}

build_all() {
  step configure 300 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DLOOM_BUILD_TESTS=OFF \
    -DLOOM_BUILD_PERF=OFF -DLOOM_BUILD_PYTHON=OFF -DLOOM_BUILD_NCCL=OFF || return 1
  step build 420 cmake --build "$build" -j"$(nproc)" || return 1
  local nvcc="$cuda/bin/nvcc"
  [[ -x "$nvcc" ]] || nvcc=nvcc
  step compile_probe 120 "$nvcc" -O2 -std=c++17 -o "$build/nccl_plugins_probe" \
    perf/nccl_plugins_probe.cu -I"$cuda/include" -L"$cuda/lib64" -Xlinker -rpath -Xlinker "$cuda/lib64" \
    -lnccl -lcudart
}

# The tuner: NCCL loads libnccl-tuner-loom.so by NCCL_TUNER_PLUGIN=loom from the library path,
# logs its init (the model it uses) and, with two GPUs or more, its choice per size.
check_tuner_plugin() {
  step tuner_probe 120 env LD_LIBRARY_PATH="$build/bindings/nccl-tuner:$build:${LD_LIBRARY_PATH:-}" \
    NCCL_TUNER_PLUGIN=loom NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING \
    "$build/nccl_plugins_probe" || failed=1
  expect tuner_loaded tuner_probe.log 'TUNER/Plugin: Using loom'
  expect tuner_model tuner_probe.log 'loom tuner: model'
  expect probe_ok tuner_probe.log 'probe: OK'
  # Choices appear only where NCCL asks a tuner: communicators of two ranks or more.
  if ((dry)) || grep -q 'on [2-9] GPUs' "$results/tuner_probe.log" 2>/dev/null; then
    expect tuner_choices tuner_probe.log 'loom tuner: AllReduce [0-9]+ bytes'
  else
    echo "   (one GPU: NCCL runs each call as a copy and asks the tuner nothing)" | tee -a "$results/summary.txt"
  fi
}

# The net plugin: NCCL loads libnccl-net-loom.so by NCCL_NET_PLUGIN=loom from the library path
# at init (one GPU is enough), takes its newest ncclNetPlugin_vN, and names it in its log.
check_net_plugin() {
  step net_probe 120 env LD_LIBRARY_PATH="$build/nccl-net:$build:${LD_LIBRARY_PATH:-}" \
    NCCL_NET_PLUGIN=loom NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
    "$build/nccl_plugins_probe" || failed=1
  expect net_loaded net_probe.log 'NET/loom|NET/Plugin.*loom'
  expect net_probe_ok net_probe.log 'probe: OK'
}

main() {
  mkdir -p "$results"
  : > "$results/summary.txt"
  ((dry)) && echo "(dry run: nothing is built or run)" >> "$results/summary.txt"
  if ! build_all; then
    echo "FAILED: build (see the logs in $results)" | tee -a "$results/summary.txt"
    exit 1
  fi
  check_tuner_plugin
  check_net_plugin
  ((dry)) || nvidia-smi -L > "$results/gpus.txt" 2>&1
  echo "result: $( ((failed)) && echo FAILED || echo OK)" | tee -a "$results/summary.txt"
  exit $failed
}

main
