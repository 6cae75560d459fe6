// A small uniform cluster model built in code, for loom-sim --uniform and the simulator's tests:
// H hosts of R ranks each. It is a stand-in for the corpus of machine models in topology/, not
// a replacement: it only knows one shape.
//
//   rank ──intra── host node ──net── switch ──net── host node ──intra── rank
//
// Every rank has its own full-duplex link to its host node (the host is a non-blocking
// crossbar: shared memory between cores), every host one full-duplex link to a single switch
// (its NIC, shared by the host's ranks). A message within a host crosses 2 links, between hosts
// 4, so its latency is 2·intraLatency (+ 2·netLatency).
#pragma once

#include "topology/topology.h"

namespace loom::tuner {

struct UniformCluster {
  int hosts = 1;
  int ranksPerHost = 1;
  double intraBandwidth = 20e9;  // bytes/s, rank ↔ host node, each direction
  double intraLatency = 0.5e-6;  // s
  double netBandwidth = 12.5e9;  // bytes/s, host ↔ switch, each direction (100 Gbit/s)
  double netLatency = 2.5e-6;    // s
  uint64_t netBurstBytes = 0;    // the host links' token-bucket depth (topology::Link)
};

topology::Topology uniformTopology(const UniformCluster& c);

}  // namespace loom::tuner
