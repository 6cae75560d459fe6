#!/usr/bin/env bash
# The 2-host calibration sweep of docs/CALIBRATION.md (root): 2 network-namespace hosts × 2
# ranks joined by 1 Gbit/s links with jumbo frames (perf/netns-cluster.sh; at MTU 1500 this
# VM's 2 cores, not the shaped link, limit TCP), every forced algorithm of allreduce, allgather
# and alltoall, sizes 8 B to 8 MiB (×4), REPEATS runs each; one loom-perf --json file per run
# in OUT.
#
#   sudo docs/calibration/measure-netns.sh BUILD OUT [REPEATS]
set -euo pipefail
build=${1:?usage: measure-netns.sh BUILD OUT [REPEATS]}
out=${2:?usage: measure-netns.sh BUILD OUT [REPEATS]}
repeats=${3:-3}
here=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
runs=(all_reduce:ring all_reduce:tree all_reduce:rhd all_reduce:rd all_reduce:hierarchical
      all_gather:ring all_gather:rd all_gather:bruck all_gather:hierarchical
      alltoall:pairwise alltoall:bruck alltoall:incast alltoall:hierarchical)
for ((k = 1; k <= repeats; ++k)); do
  for run in "${runs[@]}"; do
    coll=${run%%:*} algo=${run##*:}
    LOOM_TIMEOUT_MS=120000 "$here/perf/netns-cluster.sh" -H 2 -R 2 --rate 1gbit --mtu 9000 \
      --build "$build" -- "$coll" -b 8 -e 8M -f 4 -n 50 -w 5 -A "$algo" \
      --json "$out/netns-$coll-$algo-$k.json" > /dev/null
  done
done
