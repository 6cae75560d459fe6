// A uniform H × R cluster built in code (tuner/uniform_topology.h).
#include "tuner/uniform_topology.h"

#include "base/status.h"

namespace loom::tuner {

using topology::Node;
using topology::NodeKind;

topology::Topology uniformTopology(const UniformCluster& c) {
  topology::Topology t;
  t.name = strprintf("uniform %dx%d", c.hosts, c.ranksPerHost);
  auto addNode = [&](NodeKind kind, std::string name, int host) {
    t.nodes.push_back(Node{kind, std::move(name), host});
    return int32_t(t.nodes.size() - 1);
  };
  auto connect = [&](int32_t a, int32_t b, double bandwidth, double latency, const char* kind,
                     uint64_t burst = 0) {
    t.links.push_back({a, b, bandwidth, latency, kind, burst});
    t.links.push_back({b, a, bandwidth, latency, kind, burst});
  };
  const int32_t sw = c.hosts > 1 ? addNode(NodeKind::Switch, "switch", -1) : -1;
  for (int h = 0; h < c.hosts; ++h) {
    const int32_t host = addNode(NodeKind::Host, strprintf("host%d", h), h);
    if (sw >= 0) connect(host, sw, c.netBandwidth, c.netLatency, "net", c.netBurstBytes);
    for (int i = 0; i < c.ranksPerHost; ++i) {
      const int32_t cpu = addNode(NodeKind::Cpu, strprintf("host%d/cpu%d", h, i), h);
      connect(cpu, host, c.intraBandwidth, c.intraLatency, "shm");
      t.ranks.push_back({h, cpu});
    }
  }
  return t;
}

}  // namespace loom::tuner
