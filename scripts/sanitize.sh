#!/usr/bin/env bash
# Builds loom's library, its unit and multi-process test programs and the tools those run
# (loom-info, loom-trace) with GCC under sanitizers (LOOM_SANITIZE, CMakeLists.txt), and runs
# the tests there; any sanitizer report, in the test process, a forked rank or a tool, fails the
# run. docs/RELIABILITY.md ("Sanitizers") says what runs, what it costs and what it found.
#   address   build-asan/ (or $LOOM_ASAN_BUILD_DIR): AddressSanitizer, LeakSanitizer (also in
#             each forked rank as it exits) and UndefinedBehaviorSanitizer; the unit and
#             multiprocess tiers of loom_unit_tests and loom_mp_tests, less the slow tests
#             named below ($asan_slow, $asan_mp_left_out).
#   thread    build-tsan/ (or $LOOM_TSAN_BUILD_DIR): ThreadSanitizer; the tests of the code that
#             runs threads (below, $tsan_tests).
#   scripts/sanitize.sh                 both
#   scripts/sanitize.sh thread          one
#   scripts/sanitize.sh address -R Soak extra arguments go to ctest
# Not run here: loom-perf's tests (a benchmark driver; LOOM_BUILD_PERF=OFF keeps its build out
# of the stage's time), the bindings' tests (the Python interpreter, mpiexec and NCCL's own
# programs are not built with the sanitizer runtime and cannot load a library that is), and the
# netns and ucx tiers (root, network namespaces; UCX's own memory pools).
set -euo pipefail
cd "$(dirname "$0")/.."

# The tests of code that runs threads, all in loom_mp_tests (the only program the ThreadSanitizer
# build builds): the bootstrap root's thread, which every multi-rank test runs beside rank 0's
# calls, and its strangers (Bootstrap*, RootInParent, InitErrors, Ip), nonblocking init's thread
# (NonBlocking), abort and revoke from another thread (RevokeOrAbort, Revoke, Shrink, Timeouts),
# the flight recorder's dumps from signal handlers and other threads (FlightRecorder*), a group
# over several communicators (a thread each: Groups), the streams' ordered queues and the
# emulated device's worker (DeviceStreams, DeviceCollectives, DeviceMemory), and the faults whose
# tests kill or stop a rank from a thread of its own (FaultAttribution, KillMidAllreduce,
# ShmCleanup).
tsan_tests='Bootstrap|RootInParent|InitErrors|Ip/|NonBlocking|RevokeOrAbort|Revoke\.|Shrink|'
tsan_tests+='Timeouts|FlightRecorder|Groups|GroupSimulateEnd|DeviceStreams|DeviceCollectives|'
tsan_tests+='DeviceMemory|FaultAttribution|KillMidAllreduce|ShmCleanup|Leaving'

# The plan verifier's sweeps stop at 32 ranks under the sanitizers (LOOM_VERIFY_SWEEP=small,
# tests/support/plan_test_util.h): 32 ranks hold every shape a sweep to 64 does, and the
# verifier runs several times slower there. Left out of the AddressSanitizer run: the unit
# tests that take over 2 s each in the normal build even so: the direct alltoall's verification
# (N² steps a chunk), the verifier at a thousand ranks, the simulator, the tuner and the
# calibration over large models and thousands of ranks. The same builders, simulator and fits
# run at small sizes in the other tests of their suites (Simulator.* and Calibrate.* their
# other cases), and the collectives' plans run with real data in the multi-process tests.
# TopologyScale also asserts a duration.
asan_slow='^(Calibrate\.RecoversTheFiguresThatMadeTheMeasurements|ExchangeVerify\.DirectAlltoAll'
asan_slow+='|PlanVerify\.ScalesToAThousandRanks|SimulatorFast\.|TunerFast\.|TunerBound\.'
asan_slow+='|Tuner\.(AllReduceChoiceIsTheArgminOnTheWholeDgxRail16|ModelChoiceIsTheSimulatorsArgmin)'
asan_slow+='|Simulator\.(RingAllReduceAtScale|AllReduceOf8192Ranks)|TopologyScale\.)'

# Left out of the multi-process run: the soak (Soak.*) and the 13,000 communicators of
# Transports/ManyCommunicators, whose resident memory bounds cannot hold under ASan (freed
# memory waits in its quarantine, up to 256 MiB) and whose calls take many minutes there; the
# sweeps of Ranks/* at 5 to 8 ranks (2 to 4 ranks run every algorithm at a power of two of
# ranks and not; 5 to 8 ranks on 2 cores took 8 minutes under ASan); and the 64 MiB calls at 3
# and more ranks (1 and 2 ranks run the large messages' path); and RootInParent's forks of
# ranks while the parent's bootstrap root serves the first one: GCC 12's ASan does not hold its
# allocator's lock across fork, so a child forked while the root's thread allocates inherits
# the lock taken and deadlocks in its first free (seen 3 times in 4; gdb: the rank in
# asan's SizeClassAllocator64 lock; ThreadSanitizer runs the test). The normal suite runs them
# all. The fault tests run at every rank count.
asan_mp_left_out='^Soak\.|^Transports/ManyCommunicators\.|^Ranks/[^ ]*/(shm|tcp|x)?[5-8]( |$)|^Ranks/Collectives\.SixtyFourMiB/(shm|tcp)[34]'
asan_mp_left_out+='|^RootInParent\.ForkedRanksLeaveWithoutWaitingForIt'

sanitizers=()
while (($#)) && [[ "$1" == address || "$1" == thread ]]; do sanitizers+=("$1"); shift; done
((${#sanitizers[@]})) || sanitizers=(address thread)

launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

# Configures $1 with LOOM_SANITIZE=$2 and builds the targets after it (test programs; the tools
# they run come with them).
build() {
  local dir=$1 san=$2
  shift 2
  # -O1 with line tables (-g1): what the sanitizers' documentation advises, and quick to build.
  cmake -S . -B "$dir" -DLOOM_SANITIZE="$san" -DLOOM_BUILD_PERF=OFF \
    -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -g1" \
    "${launcher[@]}" > "$dir.configure.log" 2>&1 || { cat "$dir.configure.log"; exit 1; }
  cmake --build "$dir" --target "$@" -j"$(nproc)"
}

# Runs ctest in $1 with the rest of the arguments; each process writes its reports to
# $1/reports/<sanitizer>.<pid>, so a report fails the run even where the test that caused it
# passed (a forked rank's report, a tool's).
run() {
  local dir=$1 reports
  shift
  reports="$(pwd)/$dir/reports"
  rm -rf "$reports" && mkdir -p "$reports"
  local status=0
  # handle_segv=0: tests make a rank die of SIGSEGV on purpose (a host read of emulated device
  # memory, the flight recorder's dump on a fatal signal) and require that it died of it; the
  # sanitizer's handler would end it with exit code 1 instead. A stray SIGSEGV still fails its
  # test.
  # die_after_fork=0: tests fork ranks from a process that runs a thread (the bootstrap root in
  # the parent), and the ranks start threads of their own, which ThreadSanitizer otherwise
  # forbids.
  # UCX, which libloom links for its UCX transport, is third-party and not built with the
  # sanitizers: its memory hooks (libucm, which patches mmap and madvise) crash ThreadSanitizer
  # in a thread's exit (madvise of its stack, a SIGSEGV in TSan's rwlock interceptor), and its
  # fatal-signal handler frees memory inside the handler (a TSan report against libucs.so).
  # Neither is needed here: loom registers no memory through UCX outside the ucx tier, and
  # loom's flight recorder has its own fatal-signal handler.
  # HWLOC_COMPONENTS=-pci: hwloc's PCI plugin loads libpciaccess, which leaks 1 KiB at exit
  # (third-party, reported by LeakSanitizer from a module unloaded by then, so no suppression
  # could name it). Set here, for every test: a second variable in the tests' ENVIRONMENT
  # property does not reach gtest_discover_tests' tests, which take its first only.
  HWLOC_COMPONENTS=-pci LOOM_VERIFY_SWEEP=small \
  ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:check_initialization_order=1:handle_segv=0:log_path=$reports/asan" \
  UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$reports/ubsan" \
  TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:die_after_fork=0:handle_segv=0:log_path=$reports/tsan" \
  UCX_MEM_MMAP_HOOK_MODE=none UCX_ERROR_SIGNALS= \
    ctest --test-dir "$dir" --output-on-failure --timeout 600 "$@" || status=$?
  if compgen -G "$reports/*" > /dev/null; then
    echo "sanitize: reports in $reports:"
    for f in "$reports"/*; do echo "== $f"; head -60 "$f"; done
    status=1
  fi
  return $status
}

failed=()
for san in "${sanitizers[@]}"; do
  start=$SECONDS
  if [[ $san == address ]]; then
    dir="${LOOM_ASAN_BUILD_DIR:-build-asan}"
    build "$dir" address,undefined loom_unit_tests loom_mp_tests
    built=$SECONDS
    # Every test of the two programs in the unit and multiprocess tiers (their names are those
    # of gtest's suites: a capital first letter); the unit tier two at a time (one process
    # each), the multi-process tier one at a time as scripts/test.sh runs it.
    run "$dir" -L '^unit$' -R '^[A-Z]' -E "$asan_slow" -j2 "$@" || failed+=("address (unit)")
    run "$dir" -L '^multiprocess$' -R '^[A-Z]' -E "$asan_mp_left_out" "$@" || failed+=("address (multiprocess)")
  else
    dir="${LOOM_TSAN_BUILD_DIR:-build-tsan}"
    build "$dir" thread loom_mp_tests
    built=$SECONDS
    run "$dir" -L '^multiprocess$' -R "$tsan_tests" "$@" || failed+=("thread")
  fi
  echo "sanitize $san: build $((built - start)) s, tests $((SECONDS - built)) s"
done
if ((${#failed[@]})); then
  echo "sanitize: failures under ${failed[*]}"
  exit 1
fi
