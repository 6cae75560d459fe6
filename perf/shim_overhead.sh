#!/usr/bin/env bash
# Instructions per 8-byte allreduce call, through loom's own API and through NCCL's on loom's
# libnccl.so.2 (loom-perf --api loom / --api nccl), counted by callgrind on 2 forked ranks.
#
#   perf/shim_overhead.sh                  # prints both, their ratio and the shim's own share
#   perf/shim_overhead.sh --cpus 0,1 -n 4000
#
# Each API runs twice, with -n N1 and -n N2 timed iterations (-w 100, -c 0); loom-perf makes
# two calls per iteration (out of place, in place), so a call costs
#   (Ir(N2) - Ir(N1)) / (2 (N2 - N1))
# instructions of the API's entry point (loomAllReduce, ncclAllReduce) with everything it calls,
# averaged over the ranks: set-up and first calls cancel in the difference. The shim's own
# share is ncclAllReduce's cost less that of the loomAllReduce it calls, in the same run.
#
# A rank that waits for its peer polls, and the polls are instructions too: with the ranks on
# two cores their number depends on timing (a few hundred instructions of a ~1500 call, from one
# run to the next). So by default both ranks share one CPU (--cpus, taskset's list): loom then
# does not spin (more ranks than cores), a waiting rank yields to its peer at once, and the
# count repeats to within a few instructions.
#
# Options: --cpus LIST (default: the first CPU this process may use), -n N2 (default 2500;
# N1 = N2 / 5), --build DIR (default $LOOM_BUILD_DIR or ./build), --keep DIR (keep callgrind's
# files there for callgrind_annotate), --target PERCENT (default 5: exit 1 above it), --loom-only
# (loom's API alone: its instructions per call, e.g. under LOOM_TRANSPORT=tcp or LOOM_ALGO, which
# pass to the ranks).
set -euo pipefail

usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

build=${LOOM_BUILD_DIR:-$(cd "$(dirname "$0")/.." && pwd)/build}
cpus=$(taskset -pc $$ | sed 's/.*: //; s/[,-].*//')
n2=2500 keep='' target=5 loomOnly=0
while [[ $# -gt 0 ]]; do
  case $1 in
    --cpus) cpus=$2; shift 2 ;;
    -n) n2=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --keep) keep=$2; shift 2 ;;
    --target) target=$2; shift 2 ;;
    --loom-only) loomOnly=1; shift ;;
    -h|--help) usage ;;
    *) echo "shim_overhead.sh: unknown argument '$1'" >&2; usage 2 >&2 ;;
  esac
done
n1=$((n2 / 5))
perf=$build/perf/loom-perf
command -v valgrind > /dev/null || { echo "shim_overhead.sh: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
[[ -x $perf ]] || { echo "shim_overhead.sh: no $perf (build loom first)" >&2; exit 2; }
[[ $n1 -ge 1 ]] || { echo "shim_overhead.sh: -n must be at least 5" >&2; exit 2; }

work=${keep:-$(mktemp -d /tmp/loom-shim-overhead.XXXXXX)}
mkdir -p "$work"
[[ -n $keep ]] || trap 'rm -rf "$work"' EXIT

# The sum over ranks of the inclusive Ir of the first function (the costliest) whose
# "file:function" in callgrind_annotate's list matches ":REGEX", in a run's callgrind files;
# the launcher's own file, which never calls it, adds nothing.
sumOf() {  # DIR REGEX
  local f total=0 ir
  for f in "$1"/cg.*.out; do
    ir=$(callgrind_annotate --inclusive=yes --threshold=100 "$f" 2> /dev/null |
      awk -v re=":$2" '$3 != "=>" {
        fn = $0; sub(/^ *[0-9,]+ +\([^)]*\) +/, "", fn); sub(/ \[[^]]*\]$/, "", fn)
        if (fn ~ re) { gsub(",", "", $1); print $1; exit } }')
    total=$((total + ${ir:-0}))
  done
  echo "$total"
}

# One callgrind run of loom-perf into $work/API.ITERS.
measure() {  # API ITERS
  local dir=$work/$1.$2
  rm -rf "$dir"; mkdir -p "$dir"
  LOOM_TIMEOUT_MS=600000 taskset -c "$cpus" valgrind --tool=callgrind \
    --callgrind-out-file="$dir/cg.%p.out" "$perf" all_reduce -b 8 -e 8 -N 2 -w 100 -c 0 \
    -n "$2" --api "$1" > "$dir/out.txt" 2> "$dir/valgrind.txt" || {
    echo "shim_overhead.sh: loom-perf --api $1 failed:" >&2
    tail -5 "$dir/out.txt" "$dir/valgrind.txt" >&2
    exit 3
  }
}

# Instructions per call of the function matching REGEX, per rank, from API's runs at N1 and N2.
perCall() {  # API REGEX
  local a b
  a=$(sumOf "$work/$1.$n1" "$2")
  b=$(sumOf "$work/$1.$n2" "$2")
  [[ $a -gt 0 && $b -gt 0 ]] || { echo "shim_overhead.sh: no $2 in --api $1's callgrind files" >&2; exit 3; }
  awk -v a="$a" -v b="$b" -v calls=$((2 * 2 * (n2 - n1))) 'BEGIN { printf "%.1f", (b - a) / calls }'
}

echo "# 8-byte allreduce, 2 ranks on CPUs $cpus, callgrind; -n $n1 and -n $n2 (2 calls each)"
if [[ $loomOnly == 1 ]]; then
  measure loom $n1; measure loom $n2
  idle=$(perCall loom 'Run::idleRound\\(' 2> /dev/null) || idle=0
  echo "loom API (loomAllReduce): $(perCall loom 'loomAllReduce$') instructions per call ($idle of them idle rounds)"
  exit 0
fi
for api in loom nccl; do measure $api $n1; measure $api $n2; done
loom=$(perCall loom 'loomAllReduce$')
nccl=$(perCall nccl 'p?ncclAllReduce$')
# The shim's own instructions: ncclAllReduce less the loomAllReduce it calls, in the same runs.
shim=$(awk -v a="$(perCall nccl 'p?ncclAllReduce$')" -v b="$(perCall nccl 'loomAllReduce$')" \
  'BEGIN { printf "%.1f", a - b }')
# What loom's call spends waiting for the peer (the executor's idle rounds).
idle=$(perCall loom 'Run::idleRound\\(' 2> /dev/null) || idle=0
awk -v l="$loom" -v n="$nccl" -v s="$shim" -v i="$idle" -v t="$target" 'BEGIN {
  printf "loom API (loomAllReduce):        %8.1f instructions per call (%.1f of them idle rounds)\n", l, i
  printf "NCCL API (ncclAllReduce):        %8.1f instructions per call\n", n
  printf "ratio nccl/loom:                 %8.4f (%+.2f%%)\n", n / l, (n / l - 1) * 100
  printf "the shim itself (ncclAllReduce less loomAllReduce): %.1f per call\n", s
  printf "target: at most %s%% more: %s\n", t, (n / l - 1) * 100 <= t ? "met" : "MISSED"
  exit (n / l - 1) * 100 <= t ? 0 : 1 }'
