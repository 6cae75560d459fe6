#!/usr/bin/env bash
# The 2-host calibration sweep of docs/CALIBRATION.md (root): 2 network-namespace hosts × 2
# ranks joined by 1 Gbit/s links with jumbo frames (perf/netns-cluster.sh; at MTU 1500 this
# VM's 2 cores, not the shaped link, limit TCP). For each of allreduce, allgather and alltoall,
# one loom-perf --race run of every forced algorithm on one lane, of those the tuner may give
# more lanes again on 2 and 4 (NAME:LANES: every lane is a TCP message of its own, and what one
# costs the cores shows only where several go at once), and of loom's own choice, by the model
# ("auto") and measured at first use ("autotune": LOOM_AUTOTUNE=1, its cache fresh for the
# sweep); sizes 8 B to 8 MiB (×4), ROUNDS rounds per size, each giving every entry a turn of 40
# iterations (fewer from 512 KiB: 16 MiB a turn, so 2 at 8 MiB), each point the median of its
# rounds. Many short turns, because this VM's noise comes in spells of about half a second in
# which one plan runs up to 1.4× slower: with turns of 200 calls (stops 26 and 27, 5 rounds)
# one plan's medians lay 20–40% apart between the communicators of a 16-entry race, with 40
# within 4.4% (docs/PERF.md). In OUT: netns-COLL-ENTRY.json per
# entry (LOOM_LANES and LOOM_AUTOTUNE, which the fit reads back, in its "env") and
# netns-COLL.txt, the race's table with its regret report.
#
#   sudo docs/calibration/measure-netns.sh BUILD OUT [ROUNDS]
set -euo pipefail
build=${1:?usage: measure-netns.sh BUILD OUT [ROUNDS]}
out=${2:?usage: measure-netns.sh BUILD OUT [ROUNDS]}
rounds=${3:-25}
here=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
races=("all_reduce ring,tree,rhd,rd,hierarchical,torus,ring:2,rd:2,torus:2,hierarchical:2,ring:4,rd:4,torus:4,hierarchical:4,auto,autotune"
       "all_gather ring,rd,bruck,hierarchical,auto,autotune"
       "alltoall pairwise,bruck,incast,hierarchical,pairwise:2,pairwise:4,auto,autotune")
# The host figures and autotune decisions of this sweep only, kept (and named at the end):
# they are what loom's own choices in it were made from.
cache=$(mktemp -d /tmp/loom-sweep-cache.XXXXXX)
for race in "${races[@]}"; do
  read -r coll entries <<< "$race"
  LOOM_TIMEOUT_MS=120000 LOOM_CACHE_DIR="$cache" "$here/perf/netns-cluster.sh" -H 2 -R 2 \
    --rate 1gbit --mtu 9000 --build "$build" -- "$coll" -b 8 -e 8M -f 4 -n 40 -w 5 \
    --bytes_per_size 16M \
    -R "$rounds" --race "$entries" --json "$out/netns-$coll.json" > "$out/netns-$coll.txt"
done
echo "the host figures and autotune decisions of this sweep: $cache"
