#!/usr/bin/env bash
# The calibration sweep of docs/CALIBRATION.md, 4 ranks on this host: for each of allreduce,
# allgather and alltoall, one loom-perf --race run of every algorithm the tuner may choose for
# these calls (hierarchical refuses one host; alltoall's pairwise and xor also on the 2 lanes
# the tuner gives them at some KiB, NAME:2) and of loom's own choice, by its model ("auto") and
# measured at first use ("autotune": LOOM_AUTOTUNE=1, its cache fresh for the sweep); sizes 8 B
# to 64 MiB (×4), ROUNDS rounds per size, each giving every entry a turn of 1000 iterations
# (fewer where loom-perf's 512 MB per size budget caps them), each point the median of its
# rounds. In OUT: COLL-ENTRY.json per entry (LOOM_LANES and LOOM_AUTOTUNE, which the fit reads
# back, in its "env") and COLL.txt, the race's table with its regret report.
#
#   docs/calibration/measure.sh BUILD OUT [ROUNDS]
set -euo pipefail
build=${1:?usage: measure.sh BUILD OUT [ROUNDS]}
out=${2:?usage: measure.sh BUILD OUT [ROUNDS]}
rounds=${3:-5}
mkdir -p "$out"
races=("all_reduce ring,tree,rhd,rd,torus,direct,peer,auto,autotune"
       "all_gather ring,rd,bruck,direct,pairwise,peer,auto,autotune"
       "alltoall pairwise,xor,bruck,incast,direct,peer,pairwise:2,xor:2,auto,autotune")
# The host figures and autotune decisions of this sweep only, kept (and named at the end):
# they are what loom's own choices in it were made from.
cache=$(mktemp -d /tmp/loom-sweep-cache.XXXXXX)
for race in "${races[@]}"; do
  read -r coll entries <<< "$race"
  LOOM_TIMEOUT_MS=120000 LOOM_CACHE_DIR="$cache" "$build/perf/loom-perf" "$coll" -b 8 -e 64M \
    -f 4 -N 4 -n 1000 -R "$rounds" --race "$entries" --json "$out/$coll.json" > "$out/$coll.txt"
done
echo "the host figures and autotune decisions of this sweep: $cache"
