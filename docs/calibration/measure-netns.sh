#!/usr/bin/env bash
# The 2-host calibration sweep of docs/CALIBRATION.md (root): 2 network-namespace hosts × 2
# ranks joined by 1 Gbit/s links with jumbo frames (perf/netns-cluster.sh; at MTU 1500 this
# VM's 2 cores, not the shaped link, limit TCP), every forced algorithm of allreduce, allgather
# and alltoall, sizes 8 B to 8 MiB (×4), REPEATS runs each, on one lane, and the algorithms
# the tuner may give more lanes again on 2 and 4 (every lane is a TCP message of its own, and
# what one costs the cores shows only where several go at once); then loom's own choice of
# each collective, by the model ("auto") and measured at first use (LOOM_AUTOTUNE=1, its cache
# fresh for the sweep), which loom-calibrate sets beside the best forced algorithm of the same
# sweep. One loom-perf --json file per run in OUT (LOOM_LANES and LOOM_AUTOTUNE, which the
# fit reads back, in its "env").
#
#   sudo docs/calibration/measure-netns.sh BUILD OUT [REPEATS]
set -euo pipefail
build=${1:?usage: measure-netns.sh BUILD OUT [REPEATS]}
out=${2:?usage: measure-netns.sh BUILD OUT [REPEATS]}
repeats=${3:-3}
here=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
runs=(all_reduce:ring:1 all_reduce:tree:1 all_reduce:rhd:1 all_reduce:rd:1
      all_reduce:hierarchical:1 all_reduce:torus:1
      all_gather:ring:1 all_gather:rd:1 all_gather:bruck:1 all_gather:hierarchical:1
      alltoall:pairwise:1 alltoall:bruck:1 alltoall:incast:1 alltoall:hierarchical:1)
for lanes in 2 4; do
  runs+=(all_reduce:ring:$lanes all_reduce:rd:$lanes all_reduce:torus:$lanes
         all_reduce:hierarchical:$lanes alltoall:pairwise:$lanes)
done
# Lanes 0: LOOM_LANES unset, loom picks them too.
runs+=(all_reduce:auto:0 all_gather:auto:0 alltoall:auto:0
       all_reduce:autotune:0 all_gather:autotune:0 alltoall:autotune:0)
# The host figures and autotune decisions of this sweep only, kept (and named at the end):
# they are what loom's own choices in it were made from.
cache=$(mktemp -d /tmp/loom-sweep-cache.XXXXXX)
source "$(dirname "$0")/run-settings.sh"
for ((k = 1; k <= repeats; ++k)); do
  for run in "${runs[@]}"; do
    IFS=: read -r coll algo lanes <<< "$run"
    name=$coll-$algo-$k
    if ((lanes > 1)); then name=$coll-$algo-lanes$lanes-$k; fi
    run_settings "$algo" "$lanes"
    env "${vars[@]}" "$here/perf/netns-cluster.sh" -H 2 -R 2 --rate 1gbit --mtu 9000 \
      --build "$build" -- "$coll" -b 8 -e 8M -f 4 -n 50 -w 5 "${args[@]}" \
      --json "$out/netns-$name.json" > /dev/null
  done
done
echo "the host figures and autotune decisions of this sweep: $cache"
