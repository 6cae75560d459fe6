#!/usr/bin/env bash
# The calibration sweep of docs/CALIBRATION.md: forced algorithms of allreduce, allgather
# and alltoall, sizes 8 B to 32 MiB (×4), 4 ranks on this host, REPEATS runs each (1000
# iterations per size, fewer where loom-perf's 512 MB per size budget caps them), then loom's
# own choice of each, by the model ("auto") and measured at first use (LOOM_AUTOTUNE=1, its
# cache fresh for the sweep); one loom-perf --json file per run in OUT (LOOM_LANES, which the
# fit reads back, in its "env").
#
#   docs/calibration/measure.sh BUILD OUT [REPEATS]
set -euo pipefail
build=${1:?usage: measure.sh BUILD OUT [REPEATS]}
out=${2:?usage: measure.sh BUILD OUT [REPEATS]}
repeats=${3:-3}
mkdir -p "$out"
# Every algorithm the tuner may choose for these calls (hierarchical refuses one host), on one
# lane, and on 2 those it may give 2 here (alltoall's pairwise and xor at some KiB), so that
# each choice of loom's has a forced run of its own to be priced by; COLL:ALGO[:LANES].
runs=(all_reduce:ring all_reduce:tree all_reduce:rhd all_reduce:rd all_reduce:torus all_reduce:direct all_reduce:peer
      all_gather:ring all_gather:rd all_gather:bruck all_gather:direct all_gather:pairwise all_gather:peer
      alltoall:pairwise alltoall:xor alltoall:bruck alltoall:incast alltoall:direct alltoall:peer
      alltoall:pairwise:2 alltoall:xor:2
      all_reduce:auto all_gather:auto alltoall:auto
      all_reduce:autotune all_gather:autotune alltoall:autotune)
# The host figures and autotune decisions of this sweep only, kept (and named at the end):
# they are what loom's own choices in it were made from.
cache=$(mktemp -d /tmp/loom-sweep-cache.XXXXXX)
source "$(dirname "$0")/run-settings.sh"
for ((k = 1; k <= repeats; ++k)); do
  for run in "${runs[@]}"; do
    IFS=: read -r coll algo lanes <<< "$run"
    name=$coll-$algo-$k
    if ((${lanes:-0} > 1)); then name=$coll-$algo-lanes$lanes-$k; fi
    run_settings "$algo" "${lanes:-0}"
    env "${vars[@]}" "$build/perf/loom-perf" "$coll" -b 8 -e 64M -f 4 -N 4 "${args[@]}" \
      -n 1000 --json "$out/$name.json" > /dev/null
  done
done
echo "the host figures and autotune decisions of this sweep: $cache"
