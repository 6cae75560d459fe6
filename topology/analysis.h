// Whole-topology figures for reports (loom-topo): link classes, bisection bandwidth, and the
// kind of path between two nodes (the `nvidia-smi topo -m` matrix).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "topology/topology.h"

namespace loom::topology {

struct LinkClass {
  std::string kind;
  double bandwidth = 0, latency = 0;
  int count = 0;  // directed links
};
// Links grouped by (kind, bandwidth, latency), most numerous first.
std::vector<LinkClass> linkClasses(const Topology& t);

// The maximum flow from the ranks of the first half of the hosts (by host index) to the ranks
// of the second half, in bytes/s: the bisection bandwidth for the cut builders lay out (leaf
// groups and torus rows are contiguous in host order). With one host, the ranks are halved
// instead. 0 when there are fewer than two ranks.
double bisectionBandwidth(const Topology& t);

// The route between two nodes as one message sees it: latencies summed, the narrowest link's
// bandwidth and kind. `hops` is 0 from a node to itself and -1 when unreachable.
struct PathFigures {
  double latency = 0, bandwidth = 0;
  int hops = 0;
  std::string kind;  // of the narrowest link
};
PathFigures pathFigures(const Topology& t, int32_t from, int32_t to);

// The bytes a route holds over one round trip: its narrowest bandwidth × 2 × (its latency +
// what a message costs the sending host's CPU: stepOverhead, and netMessageOverhead where the
// route leaves the host), for the narrowest of the routes from rank 0 to the other ranks (the
// one an incast floods first; of equally narrow ones, the most). How far ahead of the end of a
// message a receiver must ask for the next one to keep that link busy (the incast-aware
// alltoall's lead). 0 with fewer than two ranks.
uint64_t roundTripBytes(const Topology& t);

// A short label for the path between two nodes: "X" (same node), else the kind of the
// narrowest link on the route and the hop count, e.g. "nvlink2", "ib6"; "-" when unreachable.
std::string pathLabel(const Topology& t, int32_t from, int32_t to);

// A stable 64-bit FNV-1a hash (the same on every build and machine, unlike std::hash).
uint64_t hash64(std::string_view text);

// A short stable name for a topology's structure and figures, e.g. "2h4r-5f0c9e1d2a3b4c5d"
// (hosts, ranks, hash), for caches keyed by "the same machine shape": names are left out, and
// bandwidths, latencies and host CPU figures are rounded to half-octave buckets, so run-to-run
// noise in measured figures rarely changes it.
std::string topologySignature(const Topology& t);

}  // namespace loom::topology
