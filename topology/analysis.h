// Whole-topology figures for reports (loom-topo): link classes, bisection bandwidth, and the
// kind of path between two nodes (the `nvidia-smi topo -m` matrix).
#pragma once

#include <string>
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

// A short label for the path between two nodes: "X" (same node), else the kind of the
// narrowest link on the route and the hop count, e.g. "nvlink2", "ib6"; "-" when unreachable.
std::string pathLabel(const Topology& t, int32_t from, int32_t to);

}  // namespace loom::topology
