// Constructors for common machine shapes, used for the corpus in topology/models/ (see
// corpusModels), by tests, and by the probe (TopologyBuilder). Conventions (docs/TOPOLOGY.md):
// a Host node labels a host and carries no traffic; memory is a Numa hub per socket; a CPU
// rank gets its own Cpu endpoint joined to its hub, so two ranks on one socket still pay for a
// copy (half the intra-host latency on each side of the hub); GPU ranks sit on their Gpu node.
#pragma once

#include <string>
#include <vector>

#include "topology/topology.h"

namespace loom::topology {

struct LinkSpec {
  double bandwidth = 0;  // bytes/s, each direction
  double latency = 0;    // s
  std::string kind;
  uint64_t burstBytes = 0;  // Link::burstBytes, each direction
};

// Appends named nodes and full-duplex connections to a Topology.
class TopologyBuilder {
 public:
  explicit TopologyBuilder(std::string name) { topology_.name = std::move(name); }
  explicit TopologyBuilder(Topology existing);  // continues it (e.g. adds ranks)
  int32_t addHost(const std::string& name);  // the Host node; its host index is hostCount - 1
  int32_t addNode(NodeKind kind, const std::string& name, int32_t host);
  void connect(int32_t a, int32_t b, const LinkSpec& spec);  // a→b then b→a
  // A Cpu endpoint "<host>/cpu<k>" joined to `hub` by `spec`, with a rank on it.
  int32_t addCpuRank(int32_t host, int32_t hub, const LinkSpec& spec);
  void addRank(int32_t host, int32_t endpoint) { topology_.ranks.push_back({host, endpoint}); }
  Node& node(int32_t index) { return topology_.nodes[size_t(index)]; }  // e.g. to set a host's cpu
  const Topology& topology() const { return topology_; }
  Topology take() { return std::move(topology_); }

 private:
  struct HostState {
    int32_t node = 0;  // the Host node
    int cpus = 0;      // Cpu endpoints named so far
  };
  Topology topology_;
  std::vector<HostState> hosts_;
};

// CPU hosts: `sockets` NUMA hubs joined pairwise by `interSocket`, `ranksPerSocket` ranks on
// each, one NIC on socket 0 (the usual single-NIC server).
struct CpuHostSpec {
  int sockets = 1;
  int ranksPerSocket = 1;
  LinkSpec memory;       // rank endpoint ↔ its NUMA hub (per-rank copy bandwidth)
  LinkSpec interSocket;  // NUMA hub ↔ NUMA hub
  LinkSpec pcie;         // NUMA hub 0 ↔ NIC
};

// Two-level Clos: leaves of `hostsPerLeaf` NICs, every leaf joined to every spine. Each
// leaf–spine connection gets (the leaf's down bandwidth / oversubscription / spines), i.e.
// parallel cables are one link. One leaf and no spines is a single switch.
struct FabricSpec {
  int hostsPerLeaf = 32;
  int spines = 0;
  double oversubscription = 1;
  LinkSpec hostLink;   // NIC ↔ leaf
  double spineLatency = 0;  // leaf ↔ spine
  std::string spineKind;    // defaults to hostLink.kind
};

// H hosts × R ranks joined by one switch (a single host has no NIC or switch).
Topology uniformHosts(const std::string& name, int hosts, const CpuHostSpec& host,
                      const LinkSpec& hostLink);
// CPU hosts in a two-level fat-tree.
Topology fatTree(const std::string& name, int hosts, const CpuHostSpec& host,
                 const FabricSpec& fabric);

// Rail-optimised GPU nodes: `gpus` GPUs on an NVSwitch, GPU i beside NIC i over PCIe, and
// NIC i of every node on rail i's leaves (so same-rail traffic stays one leaf hop away). The
// spines are shared by all rails.
struct GpuNodeSpec {
  int gpus = 8;
  LinkSpec nvlink;  // GPU ↔ NVSwitch (half the GPU-to-GPU latency)
  LinkSpec pcie;    // GPU ↔ its NIC
};
Topology railOptimized(const std::string& name, int nodes, const GpuNodeSpec& node,
                       const FabricSpec& fabric);

// An X × Y 2D torus of CPU hosts: each host's NIC is a router linked to its four neighbours,
// with wraparound (a dimension of 2 has one neighbour, of 1 none).
Topology torus2d(const std::string& name, int x, int y, const CpuHostSpec& host,
                 const LinkSpec& torusLink);

// The models of topology/models/, built fresh (loom-topo --generate writes them). The
// 1024-node rail model is built but not committed when `includeHuge` is false (its file is
// several MB; tests build it instead).
std::vector<Topology> corpusModels(bool includeHuge = true);

}  // namespace loom::topology
