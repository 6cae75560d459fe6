#!/usr/bin/env bash
# The UCX transport beside UCX's own ucx_perftest on the same link (loopback here), and beside
# loom's shm and tcp transports: the figures of docs/PERF.md's UCX section.
#
#   perf/ucx_bench.sh [BUILD_DIR] [REPEATS]
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
build="${1:-build}"
repeats="${2:-3}"
perf="$build/perf/loom-perf"
command -v ucx_perftest > /dev/null || { echo "needs ucx_perftest (Debian: ucx-utils)"; exit 2; }
[[ -x "$perf" ]] || { echo "no $perf: build loom first"; exit 2; }
export LOOM_TIMEOUT_MS=120000
port=13337
rounds=$(mktemp)
trap 'rm -f "$rounds"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

# ucx_perftest TEST SIZE ITERS -> "latency_us bandwidth_GBps" of its Final line: the overall
# figures (all iterations' time over their count, as loom-perf's), MB/s taken as MiB/s.
# A fourth argument (-e) asks for peer error handling.
perftest() {
  local test=$1 size=$2 iters=$3 errors=${4:-}
  ucx_perftest -p $port -t "$test" -s "$size" -n "$iters" $errors > /dev/null 2>&1 &
  local server=$!
  sleep 0.5
  ucx_perftest localhost -p $port -t "$test" -s "$size" -n "$iters" $errors 2>/dev/null |
    awk '/^Final:/ {printf "%s %.4f\n", $5, $7 * 1048576 / 1e9}'
  wait $server || true
  port=$((port + 1))
}

# loom-perf broadcast on 2 ranks at SIZE -> "time_us busbw_GBps" (out of place).
loomp2p() {
  local size=$1 iters=$2
  LOOM_TRANSPORT=ucx "$perf" broadcast -N 2 -b "$size" -e "$size" -n "$iters" -w 20 2>/dev/null |
    awk '/^ +[0-9]/ {print $6, $8}'
}

for tls in default tcp; do
  if [[ $tls == default ]]; then unset UCX_TLS; else export UCX_TLS=$tls; fi
  echo "## UCX_TLS=$tls, loopback, $repeats runs each, medians"
  lat=$(for _ in $(seq "$repeats"); do perftest tag_lat 8 20000 | cut -d' ' -f1; done | median)
  mine=$(for _ in $(seq "$repeats"); do loomp2p 8 20000 | cut -d' ' -f1; done | median)
  printf "  8 B one-way latency: ucx_perftest tag_lat %.3f us, loom broadcast %.3f us (+%.3f us)\n" \
    "$lat" "$mine" "$(echo "$mine - $lat" | bc -l)"
  for size in 1048576 4194304 16777216 67108864; do
    iters=$((512 * 1048576 / size))
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
echo "## broadcast, 2 ranks: loom over UCX (UCX's default choice) against loom's own transports"
LOOM_TRANSPORT=ucx "$perf" broadcast -N 2 -b 8 -e 64M -f 8 -R "$repeats" \
  --compare shm,tcp,ucx-tcp 2>/dev/null | sed -n '/^# Comparison/,$p'
echo "## all_reduce, 2 ranks: loom over UCX with UCX_TLS=tcp against loom's own transports"
LOOM_TRANSPORT=ucx UCX_TLS=tcp "$perf" all_reduce -N 2 -b 1M -e 64M -f 4 -R "$repeats" \
  --compare tcp,shm,ucx 2>/dev/null | sed -n '/^# Comparison/,$p'
