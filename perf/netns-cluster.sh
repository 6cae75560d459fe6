#!/usr/bin/env bash
# A multi-host testbed on one machine (root): H network namespaces ("hosts") joined through a
# Linux bridge by veth pairs, each host's link shaped with tc (htb rate, bfifo queue: this
# kernel has no netem), and loom-perf run with R ranks per host, exactly as on a cluster:
# every rank is started with LOOM_RANK / LOOM_WORLD_SIZE / LOOM_ROOT, so loom sees H hosts
# (hosts are told apart by network namespace) and uses TCP between them, shm within one.
#
#   sudo perf/netns-cluster.sh -H 2 -R 2 --rate 10gbit -- all_reduce -b 8 -e 64M -f 4
#   sudo perf/netns-cluster.sh -H 4 --rate 1gbit --peers -- all_reduce -b 1K -e 16M -f 4
#
# Options: -H hosts (2), -R ranks per host (1), --rate RATE (tc units: 1gbit, 100mbit; default
# 10gbit), --queue BYTES (bfifo limit per link; default 1 MB), --build DIR (CMake build folder;
# default $LOOM_BUILD or ./build), --map-by host|node (host: ranks 0..R-1 on host 0, the next
# R on host 1, ...; node: round robin, rank r on host r % H, as mpirun --map-by node; default
# host), --mtu BYTES (the links' MTU; default 1500: 9000 plays jumbo frames, which costs this
# machine's CPUs fewer packets per byte), --peers (also run loom-mpi-perf through mpirun, its ranks
# placed in the namespaces by an rsh agent doing `ip netns exec`), --port P (bootstrap port,
# default 29517), --mpi (run no loom-perf: the arguments after -- are a command, run in the
# root namespace with an `mpirun` first on its PATH that places its ranks on the hosts, -R
# slots each, and takes every other mpirun option; the script exits with the command's code),
# --exec (run no loom-perf: the arguments after -- are a command, run in the root namespace
# with NETNS_HOSTS, NETNS_ADDRS and NETNS_IFNAMES exported: the hosts' namespaces, addresses
# and link interfaces, space-separated in host order, for a script that places its own
# processes; the script exits with the command's code).
# Arguments after -- go to loom-perf (and the peer). Hosts get 10.215.N.1..H on the bridge,
# N from the script's pid (so that two testbeds never share a subnet); the bridge itself gets
# 10.215.N.254 in the root namespace, for mpirun's own channel. At the end it prints how many
# packets each link's queue dropped (incast shows there). Everything is torn down on exit,
# Ctrl-C included. Exits 77 where it cannot build a testbed (not root, no iproute2). Host i's
# namespace is named $LOOM_NETNS_PREFIX (default lmh), i, "n" and the script's pid: a prefix of
# one's own keeps testbeds apart by name, and away from other tools' namespaces.
#
#   sudo perf/netns-cluster.sh -H 2 -R 2 --mpi -- mpirun -np 4 -x LD_PRELOAD=... ./app
set -euo pipefail

usage() { sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

hosts=2 per=1 rate=10gbit queue=1000000 peers=0 port=29517 mapby=host mtu=1500 mpi=0 exec=0
build=${LOOM_BUILD:-$(cd "$(dirname "$0")/.." && pwd)/build}
args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    -H) hosts=$2; shift 2 ;;
    -R) per=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --queue) queue=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --map-by) mapby=$2; shift 2 ;;
    --mtu) mtu=$2; shift 2 ;;
    --peers) peers=1; shift ;;
    --port) port=$2; shift 2 ;;
    --mpi) mpi=1; shift ;;
    --exec) exec=1; shift ;;
    --) shift; args=("$@"); break ;;
    -h|--help) usage 0 ;;
    *) echo "netns-cluster.sh: unknown argument '$1'" >&2; usage 2 ;;
  esac
done
[[ $(id -u) == 0 ]] || { echo "netns-cluster.sh: needs root (network namespaces, tc)" >&2; exit 77; }
command -v ip > /dev/null && command -v tc > /dev/null ||
  { echo "netns-cluster.sh: needs iproute2 (ip, tc)" >&2; exit 77; }
((hosts >= 1 && hosts <= 200 && per >= 1)) || { echo "netns-cluster.sh: bad -H/-R" >&2; exit 2; }
((mtu >= 576 && mtu <= 65535)) || { echo "netns-cluster.sh: --mtu takes 576..65535" >&2; exit 2; }
[[ $mapby == host || $mapby == node ]] ||
  { echo "netns-cluster.sh: --map-by takes host or node, not '$mapby'" >&2; exit 2; }
if ((mpi || exec)); then
  [[ ${#args[@]} -gt 0 ]] ||
    { echo "netns-cluster.sh: --mpi and --exec need a command after --" >&2; exit 2; }
fi
if ((exec)); then
  :
elif ((mpi)); then
  mpirun_path=$(command -v mpirun) || { echo "netns-cluster.sh: --mpi: no mpirun" >&2; exit 77; }
else
  [[ ${#args[@]} -gt 0 ]] || args=(all_reduce -b 8 -e 1M -f 4)
  perf=$build/perf/loom-perf
  [[ -x $perf ]] || { echo "netns-cluster.sh: $perf is not built" >&2; exit 2; }
fi

# Names carry this script's pid, so two testbeds (or a crashed one's leftovers) never clash;
# interface names stay within Linux's 15 characters.
tag=$$
bridge=lmbr$tag
prefix=${LOOM_NETNS_PREFIX:-lmh}
[[ $prefix =~ ^[A-Za-z][A-Za-z0-9-]*$ ]] ||
  { echo "netns-cluster.sh: LOOM_NETNS_PREFIX takes letters, digits and '-'" >&2; exit 2; }
ns() { echo "$prefix${1}n$tag"; }  # host i's namespace (no dot: mpirun reads one as a domain)
inner() { echo "lmh$1"; }       # host i's end of its link, inside its namespace
outer() { echo "lmo$1.$tag"; }  # the bridge's end
net=10.215.$((tag % 250))
tmp=$(mktemp -d /tmp/loom-netns.XXXXXX)

pids=() ranks=()
cleanup() {
  trap - EXIT INT TERM
  for p in ${pids[@]+"${pids[@]}"}; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for ((i = 0; i < hosts; i++)); do
    # Deleting a namespace deletes its veth end, and with it the bridge's end.
    ip netns del "$(ns $i)" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM  # runs cleanup through EXIT

# Shapes egress of dev (run with `ip -n NS` prefix or none): htb at the link rate, its queue a
# bfifo of `queue` bytes, so bursts queue and then drop as on a real switch port. The token
# bucket holds two packets: tc's default (rate / HZ, 1375 B at 1 Gbit) is less than one jumbo
# frame, and each packet then waited for htb's timer, which made a 2 x 2-rank
# alltoall of 1.5-2 KB messages take twice its wire time (8 and 16 KiB alike, ~165 us);
# with the two-packet bucket every size runs at the line rate, as on a real link.
shape() {
  local dev=$1; shift
  "$@" tc qdisc add dev "$dev" root handle 1: htb default 10
  "$@" tc class add dev "$dev" parent 1: classid 1:10 htb rate "$rate" ceil "$rate" \
    burst $((2 * mtu)) cburst $((2 * mtu))
  "$@" tc qdisc add dev "$dev" parent 1:10 handle 10: bfifo limit "$queue"
}

ip link add "$bridge" mtu "$mtu" type bridge
ip addr add $net.254/24 dev "$bridge"
ip link set "$bridge" up
for ((i = 0; i < hosts; i++)); do
  n=$(ns $i)
  ip netns add "$n"
  ip link add "$(outer $i)" mtu "$mtu" type veth peer name "$(inner $i)" mtu "$mtu"
  ip link set "$(inner $i)" netns "$n"
  ip link set "$(outer $i)" master "$bridge" up
  ip -n "$n" addr add "$net.$((i + 1))/24" dev "$(inner $i)"
  ip -n "$n" link set "$(inner $i)" up
  ip -n "$n" link set lo up
  # No segmentation offload: TCP then hands the link MTU-sized packets, as a switch port sees
  # them, so a short bfifo queue drops packets of an incast burst instead of 64 KB super-frames
  # (a super-frame larger than the queue would never get through).
  ip -n "$n" link set "$(inner $i)" gso_max_segs 1
  ip link set "$(outer $i)" gso_max_segs 1
  # Both directions of the host's link: what it sends (inside) and what it receives (bridge).
  shape "$(inner $i)" ip netns exec "$n"
  shape "$(outer $i)"
done
echo "# netns-cluster: $hosts hosts x $per ranks, links $rate, queue $queue B, mtu $mtu;" \
  "bridge $bridge" >&2

# Packets dropped by a link's queue so far (the bfifo's counter), to report incast.
drops() { "$@" tc -s qdisc show dev "$dev" | awk '/^qdisc bfifo/ {q = 1} q && /dropped/ {
  sub(/,/, "", $7); print $7; exit }'; }
report_drops() {
  local line="# netns-cluster: packets dropped by each host's queues (out, in):"
  for ((i = 0; i < hosts; i++)); do
    dev=$(inner $i) out=$(drops ip netns exec "$(ns $i)")
    dev=$(outer $i) in=$(drops)
    line+=" h$i $out,$in"
  done
  echo "$line" >&2
}

world=$((hosts * per))

# An `mpirun` (the real one: $1) that places its ranks on the hosts: it "logs in" to host h by
# running its daemon in namespace h (the rsh agent gets "HOST command..." and HOST is the
# namespace name) under a hostname of its own (Open MPI names its per-host files by hostname);
# $2: Open MPI's transports and options (--peers keeps TCP alone, as its tables were measured).
mpibin=$tmp/bin
make_mpirun() {
  local agent=$tmp/netns-rsh hostlist
  printf '#!/bin/sh\nns=$1; shift\nexec ip netns exec "$ns" unshare --uts sh -c "hostname $ns && $*"\n' >"$agent"
  hostlist=$(for ((i = 0; i < hosts; i++)); do printf '%s:%d,' "$(ns $i)" "$per"; done)
  mkdir -p "$mpibin"
  cat >"$mpibin/mpirun" <<EOF
#!/bin/sh
exec $1 --allow-run-as-root --mca plm_rsh_agent $agent $2 \\
  --mca btl_tcp_if_include $net.0/24 --mca oob_tcp_if_include $net.0/24 \\
  -H ${hostlist%,} "\$@"
EOF
  chmod +x "$agent" "$mpibin/mpirun"
}

if ((exec)); then
  NETNS_HOSTS=$(for ((i = 0; i < hosts; i++)); do printf '%s ' "$(ns $i)"; done)
  NETNS_ADDRS=$(for ((i = 0; i < hosts; i++)); do printf '%s ' "$net.$((i + 1))"; done)
  NETNS_IFNAMES=$(for ((i = 0; i < hosts; i++)); do printf '%s ' "$(inner $i)"; done)
  export NETNS_HOSTS NETNS_ADDRS NETNS_IFNAMES
  rc=0
  "${args[@]}" || rc=$?
  report_drops
  exit $rc
fi

if ((mpi)); then
  # Ranks on one host share memory (vader), hosts talk TCP; and they yield when idle, since the
  # hosts' slots outnumber this machine's cores.
  make_mpirun "$mpirun_path" "--mca btl tcp,vader,self --mca mpi_yield_when_idle 1"
  rc=0
  PATH=$mpibin:$PATH "${args[@]}" || rc=$?
  report_drops
  exit $rc
fi

for ((i = 0; i < hosts; i++)); do
  for ((l = 0; l < per; l++)); do
    r=$((i * per + l))
    [[ $mapby == node ]] && r=$((l * hosts + i))
    # Rank 0 prints the table; the others' output is kept for the error report.
    out=$tmp/rank$r.out
    [[ $r == 0 ]] && out=/dev/stdout
    ip netns exec "$(ns $i)" env LOOM_RANK=$r LOOM_WORLD_SIZE=$world \
      LOOM_ROOT=$net.1:$port LOOM_SOCKET_IFNAME="$(inner $i)" \
      "$perf" "${args[@]}" >"$out" 2>"$tmp/rank$r.err" &
    pids+=($!)
    ranks+=($r)
  done
done
rc=0
for ((k = 0; k < world; k++)); do
  r=${ranks[$k]}
  if ! wait "${pids[$k]}"; then
    rc=1
    echo "netns-cluster.sh: rank $r failed: $(tail -n 3 "$tmp/rank$r.err")" >&2
  fi
done
pids=()
report_drops

if ((peers)); then
  mpiperf=$build/perf/loom-mpi-perf
  if [[ ! -x $mpiperf ]] || ! mpirun_path=$(command -v mpirun); then
    echo "netns-cluster.sh: --peers: no mpirun, or $mpiperf is not built" >&2
  else
    make_mpirun "$mpirun_path" "--mca btl tcp,self"
    echo "# netns-cluster: Open MPI over the same links" >&2
    "$mpibin/mpirun" --oversubscribe -np "$world" \
      --map-by "$([[ $mapby == node ]] && echo node || echo slot)" \
      "$mpiperf" "${args[@]}" || rc=1
    report_drops  # counted from the start: loom's and Open MPI's together
  fi
fi
exit $rc
