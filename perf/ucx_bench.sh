#!/usr/bin/env bash
# The UCX transport beside UCX's own ucx_perftest on the same link (loopback here, or two
# network-namespace hosts), and beside loom's shm and tcp transports: the figures of
# docs/PERF.md's UCX section.
#
#   perf/ucx_bench.sh [BUILD_DIR] [REPEATS]
#   sudo perf/ucx_bench.sh --netns RATE [BUILD_DIR] [REPEATS]
#
# --netns RATE: on a testbed of perf/netns-cluster.sh (2 hosts, their links shaped to RATE, e.g.
# 1gbit; namespaces named $LOOM_NETNS_PREFIX, default ucxh): ucx_perftest's server and rank 0 on
# host 0, its client and rank 1 on host 1, UCX on the hosts' link (UCX_TLS=tcp,
# UCX_NET_DEVICES), shorter runs for the slower link; then, instead of --compare, loom-perf
# all_reduce at 1-64 MiB over ucx (UCX_TLS=tcp) and over loom's tcp, in turns, medians.
#
# For each UCX_TLS (UCX's default choice, and tcp):
#   - ucx_perftest tag_lat at 8 B and tag_bw at 1, 4, 16 and 64 MiB (one server, one client),
#     REPEATS runs each, median; tag_bw also with peer error handling (-e), as loom's endpoints
#     have it (with UCX_MM_ERROR_HANDLING=y, as loom sets it: the same transports);
#   - loom-perf broadcast on 2 ranks over LOOM_TRANSPORT=ucx (one message root -> rank 1: the
#     same one-way transfer), 8 B and 1-64 MiB, REPEATS runs, median; at 1-64 MiB also with
#     LOOM_UCX_PEER_ERRORS=0 (endpoints without peer error handling, as ucx_perftest's);
# then loom-perf broadcast and all_reduce on 2 ranks over ucx against loom's own tcp and shm
# (--compare, medians of REPEATS): broadcast with UCX's default choice, all_reduce with
# UCX_TLS=tcp.
set -euo pipefail
netns=""
if [[ ${1:-} == --netns ]]; then
  netns=$2
  shift 2
fi
build="${1:-build}"
repeats="${2:-3}"
perf="$build/perf/loom-perf"
command -v ucx_perftest > /dev/null || { echo "needs ucx_perftest (Debian: ucx-utils)"; exit 2; }
[[ -x "$perf" ]] || { echo "no $perf: build loom first"; exit 2; }
export LOOM_TIMEOUT_MS=120000
if [[ -n $netns && -z ${NETNS_HOSTS:-} ]]; then
  exec env LOOM_NETNS_PREFIX="${LOOM_NETNS_PREFIX:-ucxh}" "$(dirname "$0")/netns-cluster.sh" \
    -H 2 --rate "$netns" --exec -- "$0" --netns "$netns" "$build" "$repeats"
fi
port=13337
rounds=$(mktemp)
trap 'rm -f "$rounds"' EXIT
read -r -a hosts <<< "${NETNS_HOSTS:-}"
read -r -a addrs <<< "${NETNS_ADDRS:-}"
read -r -a ifnames <<< "${NETNS_IFNAMES:-}"
# Bytes each bandwidth figure moves (its message count: this over the size).
volume=$((512 * 1048576))
[[ -n $netns ]] && volume=$((128 * 1048576))

# on HOST COMMAND...: runs COMMAND on host HOST (0 or 1) of the testbed, UCX on its link; as it
# is on loopback.
on() {
  local host=$1
  shift
  if [[ -z $netns ]]; then "$@"; return; fi
  ip netns exec "${hosts[$host]}" env UCX_NET_DEVICES="${ifnames[$host]}" "$@"
}

# loomrun COLLECTIVE ARGS...: loom-perf on 2 ranks (-N 2 on loopback; one per host on the
# testbed), rank 0's output.
loomrun() {
  local coll=$1
  shift
  if [[ -z $netns ]]; then "$perf" "$coll" -N 2 "$@" 2>/dev/null; return; fi
  port=$((port + 1))
  local root=${addrs[0]}:$port
  on 1 env LOOM_RANK=1 LOOM_WORLD_SIZE=2 LOOM_ROOT="$root" LOOM_SOCKET_IFNAME="${ifnames[1]}" \
    "$perf" "$coll" "$@" > /dev/null 2>&1 &
  local other=$!
  on 0 env LOOM_RANK=0 LOOM_WORLD_SIZE=2 LOOM_ROOT="$root" LOOM_SOCKET_IFNAME="${ifnames[0]}" \
    "$perf" "$coll" "$@" 2>/dev/null
  wait $other || true
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

# ucx_perftest TEST SIZE ITERS -> "latency_us bandwidth_GBps" of its Final line: the overall
# figures (all iterations' time over their count, as loom-perf's), MB/s taken as MiB/s.
# A fourth argument (-e) asks for peer error handling.
perftest() {
  local test=$1 size=$2 iters=$3 errors=${4:-}
  on 0 ucx_perftest -p $port -t "$test" -s "$size" -n "$iters" $errors > /dev/null 2>&1 &
  local server=$!
  sleep 0.5
  on 1 ucx_perftest "${addrs[0]:-localhost}" -p $port -t "$test" -s "$size" -n "$iters" $errors \
    2>/dev/null |
    awk '/^Final:/ {printf "%s %.4f\n", $5, $7 * 1048576 / 1e9}'
  wait $server || true
  port=$((port + 1))
}

# loom-perf broadcast on 2 ranks at SIZE -> "time_us busbw_GBps" (out of place).
loomp2p() {
  local size=$1 iters=$2
  LOOM_TRANSPORT=ucx loomrun broadcast -b "$size" -e "$size" -n "$iters" -w 20 |
    awk '/^ +[0-9]/ {print $6, $8}'
}

tlss="default tcp"
[[ -n $netns ]] && tlss=tcp  # UCX's default would take shared memory between the namespaces
for tls in $tlss; do
  if [[ $tls == default ]]; then unset UCX_TLS; else export UCX_TLS=$tls; fi
  link=loopback
  [[ -n $netns ]] && link="a $netns link between 2 netns hosts"
  echo "## UCX_TLS=$tls, $link, $repeats runs each, medians"
  lat=$(for _ in $(seq "$repeats"); do perftest tag_lat 8 20000 | cut -d' ' -f1; done | median)
  mine=$(for _ in $(seq "$repeats"); do loomp2p 8 20000 | cut -d' ' -f1; done | median)
  printf "  8 B one-way latency: ucx_perftest tag_lat %.3f us, loom broadcast %.3f us (+%.3f us)\n" \
    "$lat" "$mine" "$(echo "$mine - $lat" | bc -l)"
  for size in 1048576 4194304 16777216 67108864; do
    iters=$((volume / size))
    # Interleaved, so that each figure of a round sees the same machine.
    for _ in $(seq "$repeats"); do
      echo "$(perftest tag_bw $size $iters | cut -d' ' -f2)" \
        "$(UCX_MM_ERROR_HANDLING=y perftest tag_bw $size $iters -e | cut -d' ' -f2)" \
        "$(loomp2p $size $iters | cut -d' ' -f2)" \
        "$(LOOM_UCX_PEER_ERRORS=0 loomp2p $size $iters | cut -d' ' -f2)"
    done > "$rounds"
    col() { cut -d' ' -f"$1" "$rounds" | median; }
    bw=$(col 1) bwe=$(col 2) mine=$(col 3) none=$(col 4)
    printf "  %8d B bandwidth: ucx_perftest tag_bw %.3f GB/s (-e %.3f), loom broadcast %.3f GB/s (%.0f%% of -e), LOOM_UCX_PEER_ERRORS=0 %.3f GB/s (%.0f%% of tag_bw)\n" \
      $size "$bw" "$bwe" "$mine" "$(echo "100 * $mine / $bwe" | bc -l)" "$none" \
      "$(echo "100 * $none / $bw" | bc -l)"
  done
done
unset UCX_TLS
if [[ -n $netns ]]; then
  echo "## all_reduce, 2 ranks (one per host): loom over UCX (UCX_TLS=tcp) and over loom's tcp," \
    "in turns, median time"
  for size in 1048576 4194304 16777216 67108864; do
    iters=$((4 * 67108864 / size))
    [[ $iters -gt 50 ]] && iters=50
    for _ in $(seq "$repeats"); do
      echo "$(LOOM_TRANSPORT=ucx UCX_TLS=tcp loomrun all_reduce -b "$size" -e "$size" \
                -n "$iters" -w 2 | awk '/^ +[0-9]/ {print $6}')" \
        "$(LOOM_TRANSPORT=tcp loomrun all_reduce -b "$size" -e "$size" -n "$iters" -w 2 |
             awk '/^ +[0-9]/ {print $6}')"
    done > "$rounds"
    col() { cut -d' ' -f"$1" "$rounds" | median; }
    ucx=$(col 1) tcp=$(col 2)
    printf "  %8d B all_reduce: ucx (UCX_TLS=tcp) %.0f us, loom tcp %.0f us (ucx takes %.2fx tcp's time)\n" \
      $size "$ucx" "$tcp" "$(echo "$ucx / $tcp" | bc -l)"
  done
  exit 0
fi
echo "## broadcast, 2 ranks: loom over UCX (UCX's default choice) against loom's own transports"
LOOM_TRANSPORT=ucx "$perf" broadcast -N 2 -b 8 -e 64M -f 8 -R "$repeats" \
  --compare shm,tcp,ucx-tcp 2>/dev/null | sed -n '/^# Comparison/,$p'
echo "## all_reduce, 2 ranks: loom over UCX with UCX_TLS=tcp against loom's own transports"
LOOM_TRANSPORT=ucx UCX_TLS=tcp "$perf" all_reduce -N 2 -b 1M -e 64M -f 4 -R "$repeats" \
  --compare tcp,shm,ucx 2>/dev/null | sed -n '/^# Comparison/,$p'
