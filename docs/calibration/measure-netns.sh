#!/usr/bin/env bash
# The 2-host calibration sweep of docs/CALIBRATION.md (root): 2 network-namespace hosts × 2
# ranks joined by 1 Gbit/s links with jumbo frames (perf/netns-cluster.sh; at MTU 1500 this
# VM's 2 cores, not the shaped link, limit TCP), every forced algorithm of allreduce, allgather
# and alltoall, sizes 8 B to 8 MiB (×4), REPEATS runs each, on one lane, and the algorithms
# the tuner may give more lanes again on 2 and 4 (every lane is a TCP message of its own, and
# what one costs the cores shows only where several go at once); one loom-perf --json file per
# run in OUT (LOOM_LANES, which the fit reads back, in its "env").
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
for ((k = 1; k <= repeats; ++k)); do
  for run in "${runs[@]}"; do
    IFS=: read -r coll algo lanes <<< "$run"
    name=$coll-$algo-$k
    if ((lanes > 1)); then name=$coll-$algo-lanes$lanes-$k; fi
    LOOM_LANES=$lanes LOOM_TIMEOUT_MS=120000 "$here/perf/netns-cluster.sh" -H 2 -R 2 \
      --rate 1gbit --mtu 9000 --build "$build" -- "$coll" -b 8 -e 8M -f 4 -n 50 -w 5 \
      -A "$algo" --json "$out/netns-$name.json" > /dev/null
  done
done
