#!/usr/bin/env bash
# The 2-host calibration sweep of docs/CALIBRATION.md (root): 2 network-namespace hosts × 2
# ranks joined by 1 Gbit/s links (perf/netns-cluster.sh), every forced algorithm of allreduce,
# allgather and alltoall, sizes 8 B to 2 MiB (×4); one loom-perf --json file per run in OUT.
#
#   sudo docs/calibration/measure-netns.sh BUILD OUT
set -euo pipefail
build=${1:?usage: measure-netns.sh BUILD OUT}
out=${2:?usage: measure-netns.sh BUILD OUT}
here=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
runs=(all_reduce:ring all_reduce:tree all_reduce:rhd all_reduce:rd all_reduce:hierarchical
      all_gather:ring all_gather:rd all_gather:bruck all_gather:hierarchical
      alltoall:pairwise alltoall:bruck alltoall:incast alltoall:hierarchical)
for run in "${runs[@]}"; do
  coll=${run%%:*} algo=${run##*:}
  LOOM_TIMEOUT_MS=120000 "$here/perf/netns-cluster.sh" -H 2 -R 2 --rate 1gbit --build "$build" \
    -- "$coll" -b 8 -e 2M -f 4 -n 20 -w 2 -A "$algo" --json "$out/netns-$coll-$algo.json" \
    > /dev/null
done
