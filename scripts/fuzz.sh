#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang, AddressSanitizer and
# UndefinedBehaviorSanitizer in build-fuzz/ (or $LOOM_FUZZ_BUILD_DIR), then runs each for
# $LOOM_FUZZ_SECONDS seconds (default 10) from its seeds (tests/fuzz/seeds/<target>/) and the
# corpus earlier runs grew (build-fuzz/corpus/<target>/). Fails on any crash, sanitizer report,
# leak, failed property, slow input or memory blow-up, and keeps the input that caused it.
#   scripts/fuzz.sh                       every target
#   LOOM_FUZZ_SECONDS=3600 scripts/fuzz.sh bootstrap params   longer, some targets
set -euo pipefail
cd "$(dirname "$0")/.."
build="${LOOM_FUZZ_BUILD_DIR:-build-fuzz}"
seconds="${LOOM_FUZZ_SECONDS:-10}"
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# -O1 with line tables: what libFuzzer's documentation advises, and quicker to build than -O2 -g.
CC=clang CXX=clang++ cmake -S . -B "$build" -DLOOM_FUZZ=ON -DLOOM_BUILD_TESTS=OFF \
  -DLOOM_BUILD_PERF=OFF -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -gline-tables-only" \
  "${launcher[@]}" > "$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" --target loom_fuzz -j"$(nproc)"

targets=("$@")
if ((${#targets[@]} == 0)); then
  for dir in tests/fuzz/seeds/*/; do targets+=("$(basename "$dir")"); done
fi
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:allocator_may_return_null=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
failed=()
for t in "${targets[@]}"; do
  corpus="$build/corpus/$t"
  log="$build/fuzz-$t.log"
  mkdir -p "$corpus" "$build/crashes"
  # The corpus grows in the build folder; the seeds in the tree stay as written. A 10 s input
  # is a hang (nothing loom parses takes that long), 2 GB a memory blow-up.
  # A fixed seed (LOOM_FUZZ_SEED, default 1) makes a run repeatable: the same mutations in the
  # same order, as far as the time allows; another seed explores elsewhere.
  if "$build/fuzz_$t" -max_total_time="$seconds" -seed="${LOOM_FUZZ_SEED:-1}" -timeout=10 -rss_limit_mb=2048 \
       -print_final_stats=1 -artifact_prefix="$build/crashes/$t-" "$corpus" \
       "tests/fuzz/seeds/$t" > "$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    echo "fuzz $t: ${runs:-?} inputs in ${seconds} s, no failure"
  else
    echo "fuzz $t: FAILED (input kept in $build/crashes/; log $log):"
    grep -E "ERROR|runtime error|fuzz check failed|Test unit written|SUMMARY" "$log" | head -20 || tail -30 "$log"
    failed+=("$t")
  fi
done
if ((${#failed[@]})); then
  echo "fuzz: failures in ${failed[*]}"
  exit 1
fi
