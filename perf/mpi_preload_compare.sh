#!/usr/bin/env bash
# MPI_Allreduce (or another loom-mpi-perf collective) of an unchanged MPI program with and
# without libloom-mpi-preload.so, side by side: K runs of each, interleaved, and each size's
# median out-of-place time.
#
#   perf/mpi_preload_compare.sh BUILD_DIR NRANKS [K] [MAXBYTES] [COLLECTIVE] [STEPFACTOR] [MIN]
#
# The preloaded runs set LOOM_MPI_MIN_BYTES=MIN (default 0: every size runs on loom); MIN
# "model" sets none, and loom's model decides which sizes run on loom (docs/MPI.md). Prints:
# size (B), MPI's median (us), the preloaded run's median (us), and MPI's time over the
# preloaded run's (above 1: the preload is faster).
set -euo pipefail
build="$1"
nranks="$2"
repeats="${3:-5}"
maxbytes="${4:-64M}"
collective="${5:-all_reduce}"
factor="${6:-2}"
threshold=(-x LOOM_MPI_MIN_BYTES="${7:-0}")
[[ ${7:-0} == model ]] && threshold=()
preload="$build/bindings/mpi/libloom-mpi-preload.so"
bench="$build/perf/loom-mpi-perf"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
mpirun_=(mpirun --allow-run-as-root --oversubscribe --timeout 600 -np "$nranks")
# 10 warm-up calls a size: the preload's trials (docs/MPI.md) take a size's first 8 by default,
# which the timed calls are not to include. The two take turns at going first: on a loaded
# machine the run after another is not the same as the first.
sweep=("$bench" "$collective" -b 8 -e "$maxbytes" -f "$factor" -n 20 -w 10)
runMpi() { "${mpirun_[@]}" "${sweep[@]}" > "$out/mpi.$k"; }
runLoom() {
  "${mpirun_[@]}" -x LD_PRELOAD="$preload" ${threshold[@]+"${threshold[@]}"} "${sweep[@]}" \
    > "$out/loom.$k"
}
for ((k = 0; k < repeats; ++k)); do
  if ((k % 2)); then runLoom; runMpi; else runMpi; runLoom; fi
done
/usr/bin/python3 - "$out" "$repeats" <<'PY'
import statistics, sys
folder, repeats = sys.argv[1], int(sys.argv[2])
def times(name):
    rows = {}
    for k in range(repeats):
        for line in open(f"{folder}/{name}.{k}"):
            f = line.split()
            if f and f[0].isdigit():
                if f[8] != "0": sys.exit(f"{name} run {k}: {f[8]} wrong results at {f[0]} B")
                rows.setdefault(int(f[0]), []).append(float(f[5]))
    return {size: statistics.median(t) for size, t in rows.items()}
mpi, loom = times("mpi"), times("loom")
print(f"{'size (B)':>10} {'MPI (us)':>10} {'loom (us)':>10} {'MPI/loom':>9}")
for size in sorted(mpi):
    print(f"{size:>10} {mpi[size]:>10.1f} {loom[size]:>10.1f} {mpi[size] / loom[size]:>9.2f}")
PY
