#!/usr/bin/env bash
# Runs loom-perf (shm, then tcp), loom-mpi-perf and loom-gloo-perf on the same collective, sizes
# and ranks, R times each, and prints one table of bus bandwidth per size: the median of the R
# runs for each, and loom's ratios to the peers. The runs of one repeat go round the four
# programs in turn, so that a noisy spell of the machine hits them all alike.
#
#   perf/compare.sh all_reduce -N 4 -b 8 -e 256M -f 4 -R 5
#   perf/compare.sh all_gather -N 2 -b 1K -e 64M -R 3 --build build-perf -- -d int32
#
# Options: -N ranks (4), -b/-e/-f size sweep (8, 64M, 4), -R repeats (3), -n/-w iterations
# (passed on), --place oop|ip (which column of the table: out-of-place by default), --build DIR
# (the CMake build folder; default $LOOM_BUILD or ./build), --check (keep the result check on:
# off by default, as it adds time but changes no timing), --bind none|core (pin every rank to a
# CPU, mpirun's ranks and the forked ones alike; default none: on a loaded machine pinning
# changes small-size latency tenfold, so both sides must get the same); arguments after -- go
# to every program.
set -euo pipefail

usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

[[ $# -ge 1 ]] || usage 2
coll=$1
shift
[[ $coll == -h || $coll == --help ]] && usage 0
ranks=4 minb=8 maxb=64M factor=4 repeats=3 place=oop check=0 bind=none
build=${LOOM_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
iters=() extra=()
while [[ $# -gt 0 ]]; do
  case $1 in
    -N) ranks=$2; shift 2 ;;
    -b) minb=$2; shift 2 ;;
    -e) maxb=$2; shift 2 ;;
    -f) factor=$2; shift 2 ;;
    -R) repeats=$2; shift 2 ;;
    -n|-w) iters+=("$1" "$2"); shift 2 ;;
    --place) place=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --check) check=1; shift ;;
    --bind) bind=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) usage 0 ;;
    *) echo "compare.sh: unknown argument '$1'" >&2; usage 2 ;;
  esac
done
[[ $place == oop || $place == ip ]] || { echo "compare.sh: --place oop|ip" >&2; exit 2; }
[[ $bind == none || $bind == core ]] || { echo "compare.sh: --bind none|core" >&2; exit 2; }

perfdir=$build/perf
tmp=$(mktemp -d /tmp/loom-compare.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
common=("$coll" -b "$minb" -e "$maxb" -f "$factor" -c "$check" ${iters[@]+"${iters[@]}"}
        ${extra[@]+"${extra[@]}"})

# name: how to run it. A program that is not built, or that fails, leaves its column empty.
names=(loom-shm loom-tcp mpi gloo)
run() {
  case $1 in
    loom-shm) LOOM_TRANSPORT=shm "$perfdir/loom-perf" "${common[@]}" -N "$ranks" --bind "$bind" ;;
    loom-tcp) LOOM_TRANSPORT=tcp "$perfdir/loom-perf" "${common[@]}" -N "$ranks" --bind "$bind" ;;
    mpi) mpirun --allow-run-as-root --oversubscribe --bind-to "$bind" -np "$ranks" \
           "$perfdir/loom-mpi-perf" "${common[@]}" ;;
    gloo) "$perfdir/loom-gloo-perf" "${common[@]}" -N "$ranks" --bind "$bind" ;;
  esac
}
binary() {
  case $1 in
    loom-*) echo "$perfdir/loom-perf" ;;
    mpi) echo "$perfdir/loom-mpi-perf" ;;
    gloo) echo "$perfdir/loom-gloo-perf" ;;
  esac
}

for ((r = 1; r <= repeats; r++)); do
  for name in "${names[@]}"; do
    out=$tmp/$name.$r
    if [[ ! -x $(binary "$name") ]]; then
      : >"$out"
      continue
    fi
    if ! run "$name" >"$out" 2>"$out.err"; then
      echo "compare.sh: $name (run $r) failed: $(tail -n 1 "$out.err")" >&2
    fi
  done
  echo "compare.sh: repeat $r of $repeats done" >&2
done

# Table rows have 13 fields: size count type redop root, then time algbw busbw #wrong for
# out-of-place and in-place. busbw is recomputed from the time, as the table's two decimals
# read 0.00 for small sizes; the factor is nccl-tests' (the same as perf_common's).
for name in "${names[@]}"; do
  for ((r = 1; r <= repeats; r++)); do
    awk -v name="$name" -v place="$place" '
      !/^#/ && NF == 13 {
        t = (place == "oop") ? $6 : $10
        print name, $1, t
      }' "$tmp/$name.$r"
  done
done | awk -v coll="$coll" -v n="$ranks" -v reps="$repeats" -v place="$place" -v bind="$bind" '
  function median(list,    k, cnt, v, i, j, x) {
    cnt = split(list, v, " ")
    for (i = 2; i <= cnt; i++) {  # insertion sort: mawk has no asort
      x = v[i] + 0
      for (j = i - 1; j >= 1 && v[j] + 0 > x; j--) v[j + 1] = v[j]
      v[j + 1] = x
    }
    if (cnt == 0) return -1
    return (cnt % 2) ? v[(cnt + 1) / 2] : (v[cnt / 2] + v[cnt / 2 + 1]) / 2
  }
  function fmt(x) { return x < 0 ? sprintf("%10s", "-") : sprintf("%10.4g", x) }
  function ratio(a, b) { return (a <= 0 || b <= 0) ? sprintf("%8s", "-") : sprintf("%8.2f", a / b) }
  BEGIN {
    if (coll == "all_reduce") f = 2 * (n - 1) / n
    else if (coll == "all_gather" || coll == "reduce_scatter" || coll == "alltoall") f = (n - 1) / n
    else f = 1
  }
  {
    if (!($2 in seen)) { seen[$2] = 1; sizes[++ns] = $2 }
    if ($3 > 0) busbw[$1, $2] = busbw[$1, $2] " " ($2 / ($3 * 1e3) * f)
  }
  END {
    printf "# %s, %d ranks (bind %s): busbw in GB/s (%s), median of %d runs\n", coll, n, bind,
           place == "oop" ? "out-of-place" : "in-place", reps
    printf "# %10s %10s %10s %10s %10s %8s %8s %8s\n", "size (B)", "loom-shm", "loom-tcp",
           "mpi", "gloo", "shm/mpi", "shm/gloo", "tcp/gloo"
    for (i = 1; i <= ns; i++) {
      s = sizes[i]
      shm = median(busbw["loom-shm", s]); tcp = median(busbw["loom-tcp", s])
      mpi = median(busbw["mpi", s]); gloo = median(busbw["gloo", s])
      printf "  %10s %s %s %s %s %s %s %s\n", s, fmt(shm), fmt(tcp), fmt(mpi), fmt(gloo),
             ratio(shm, mpi), ratio(shm, gloo), ratio(tcp, gloo)
    }
  }'
