// Machine-shape constructors and the corpus of topology/models/.
#include "topology/builders.h"

#include <algorithm>

namespace loom::topology {

TopologyBuilder::TopologyBuilder(Topology existing) : topology_(std::move(existing)) {
  for (size_t i = 0; i < topology_.nodes.size(); ++i)
    if (topology_.nodes[i].kind == NodeKind::Host) hosts_.push_back({int32_t(i), 0});
  for (const Node& n : topology_.nodes)
    if (n.kind == NodeKind::Cpu && n.host >= 0 && size_t(n.host) < hosts_.size())
      ++hosts_[size_t(n.host)].cpus;
}

int32_t TopologyBuilder::addHost(const std::string& name) {
  int32_t host = int32_t(hosts_.size());
  hosts_.push_back({int32_t(topology_.nodes.size()), 0});
  return addNode(NodeKind::Host, name, host);
}

int32_t TopologyBuilder::addNode(NodeKind kind, const std::string& name, int32_t host) {
  Node node;
  node.kind = kind;
  node.name = name;
  node.host = host;
  topology_.nodes.push_back(std::move(node));
  return int32_t(topology_.nodes.size() - 1);
}

void TopologyBuilder::connect(int32_t a, int32_t b, const LinkSpec& spec) {
  topology_.links.push_back({a, b, spec.bandwidth, spec.latency, spec.kind, spec.burstBytes});
  topology_.links.push_back({b, a, spec.bandwidth, spec.latency, spec.kind, spec.burstBytes});
}

int32_t TopologyBuilder::addCpuRank(int32_t host, int32_t hub, const LinkSpec& spec) {
  HostState& state = hosts_[size_t(host)];
  int32_t cpu = addNode(NodeKind::Cpu,
                        topology_.nodes[size_t(state.node)].name + "/cpu" +
                            std::to_string(state.cpus++),
                        host);
  LinkSpec half = spec;  // the hub is crossed twice between two ranks of a host
  half.latency = spec.latency / 2;
  connect(cpu, hub, half);
  addRank(host, cpu);
  return cpu;
}

namespace {

std::string hostName(int h) { return "node" + std::to_string(h); }

// One CPU host: its NUMA hubs, rank endpoints, and (if `withNic`) a NIC on socket 0, which is
// returned (else -1).
int32_t addCpuHost(TopologyBuilder* b, int h, const CpuHostSpec& spec, bool withNic) {
  std::string name = hostName(h);
  b->addHost(name);
  std::vector<int32_t> hubs;
  for (int s = 0; s < spec.sockets; ++s) {
    hubs.push_back(b->addNode(NodeKind::Numa, name + "/numa" + std::to_string(s), h));
    for (int p = 0; p < s; ++p) b->connect(hubs[size_t(p)], hubs.back(), spec.interSocket);
  }
  for (int32_t hub : hubs)
    for (int r = 0; r < spec.ranksPerSocket; ++r) b->addCpuRank(h, hub, spec.memory);
  if (!withNic) return -1;
  int32_t nic = b->addNode(NodeKind::Nic, name + "/nic0", h);
  b->connect(hubs[0], nic, spec.pcie);
  return nic;
}

// Leaves over `ports` (NIC nodes, in groups of fabric.hostsPerLeaf) and spines over the
// leaves. `leafPrefix` names the leaves ("leaf", "rail3/leaf"); spines are added by the caller
// once so several rails can share them.
void addLeaves(TopologyBuilder* b, const std::vector<int32_t>& ports, const FabricSpec& fabric,
               const std::string& leafPrefix, const std::vector<int32_t>& spines) {
  size_t perLeaf = size_t(std::max(1, fabric.hostsPerLeaf));
  for (size_t first = 0, leaf = 0; first < ports.size(); first += perLeaf, ++leaf) {
    size_t last = std::min(ports.size(), first + perLeaf);
    int32_t node = b->addNode(NodeKind::Switch, leafPrefix + std::to_string(leaf), -1);
    for (size_t p = first; p < last; ++p) b->connect(ports[p], node, fabric.hostLink);
    if (spines.empty()) continue;
    LinkSpec up{fabric.hostLink.bandwidth * double(last - first) /
                    (fabric.oversubscription * double(spines.size())),
                fabric.spineLatency,
                fabric.spineKind.empty() ? fabric.hostLink.kind : fabric.spineKind};
    for (int32_t spine : spines) b->connect(node, spine, up);
  }
}

std::vector<int32_t> addSpines(TopologyBuilder* b, const FabricSpec& fabric) {
  std::vector<int32_t> spines;
  for (int s = 0; s < fabric.spines; ++s)
    spines.push_back(b->addNode(NodeKind::Switch, "spine" + std::to_string(s), -1));
  return spines;
}

}  // namespace

Topology fatTree(const std::string& name, int hosts, const CpuHostSpec& host,
                 const FabricSpec& fabric) {
  TopologyBuilder b(name);
  std::vector<int32_t> nics;
  for (int h = 0; h < hosts; ++h) {
    int32_t nic = addCpuHost(&b, h, host, hosts > 1);
    if (nic >= 0) nics.push_back(nic);
  }
  if (!nics.empty()) addLeaves(&b, nics, fabric, "leaf", addSpines(&b, fabric));
  return b.take();
}

Topology uniformHosts(const std::string& name, int hosts, const CpuHostSpec& host,
                      const LinkSpec& hostLink) {
  FabricSpec oneSwitch;
  oneSwitch.hostsPerLeaf = std::max(1, hosts);
  oneSwitch.hostLink = hostLink;
  return fatTree(name, hosts, host, oneSwitch);
}

Topology railOptimized(const std::string& name, int nodes, const GpuNodeSpec& node,
                       const FabricSpec& fabric) {
  TopologyBuilder b(name);
  std::vector<std::vector<int32_t>> rails(size_t(node.gpus));
  for (int h = 0; h < nodes; ++h) {
    std::string host = hostName(h);
    b.addHost(host);
    int32_t nvswitch = b.addNode(NodeKind::Switch, host + "/nvswitch", h);
    for (int g = 0; g < node.gpus; ++g) {
      int32_t gpu = b.addNode(NodeKind::Gpu, host + "/gpu" + std::to_string(g), h);
      int32_t nic = b.addNode(NodeKind::Nic, host + "/nic" + std::to_string(g), h);
      b.connect(gpu, nvswitch, node.nvlink);
      b.connect(gpu, nic, node.pcie);
      b.addRank(h, gpu);
      rails[size_t(g)].push_back(nic);
    }
  }
  std::vector<int32_t> spines = addSpines(&b, fabric);
  for (size_t r = 0; r < rails.size(); ++r)
    addLeaves(&b, rails[r], fabric, "rail" + std::to_string(r) + "/leaf", spines);
  return b.take();
}

Topology torus2d(const std::string& name, int x, int y, const CpuHostSpec& host,
                 const LinkSpec& torusLink) {
  TopologyBuilder b(name);
  std::vector<int32_t> routers;
  for (int h = 0; h < x * y; ++h) routers.push_back(addCpuHost(&b, h, host, true));
  auto at = [&](int i, int j) { return routers[size_t(((j + y) % y) * x + (i + x) % x)]; };
  for (int j = 0; j < y; ++j) {
    for (int i = 0; i < x; ++i) {
      // The +1 neighbour in each dimension; with a dimension of 2 the -1 neighbour is the same
      // host (one link, not two parallel ones), with 1 there is none.
      if (x > 1 && (x > 2 || i == 0)) b.connect(at(i, j), at(i + 1, j), torusLink);
      if (y > 1 && (y > 2 || j == 0)) b.connect(at(i, j), at(i, j + 1), torusLink);
    }
  }
  return b.take();
}

namespace {

// Figures for the corpus: vendor data-sheet numbers, rounded (docs/TOPOLOGY.md lists them).
// Latencies are written as literals, not n * 1e-6, so they are the doubles "1us" parses to and
// the JSON files spell them with units.
constexpr double kGB = 1e9, kGbit = 1e9 / 8;

CpuHostSpec cpuHost(int sockets, int ranksPerSocket) {
  CpuHostSpec h;
  h.sockets = sockets;
  h.ranksPerSocket = ranksPerSocket;
  h.memory = {10 * kGB, 1e-6, "shm"};
  h.interSocket = {40 * kGB, 0.2e-6, "upi"};
  h.pcie = {32 * kGB, 0.5e-6, "pcie"};
  return h;
}

Topology dgxRail(const std::string& name, int nodes, int spines, double oversubscription) {
  GpuNodeSpec node;
  node.nvlink = {450 * kGB, 0.5e-6, "nvlink"};
  node.pcie = {64 * kGB, 0.5e-6, "pcie"};
  FabricSpec fabric;
  fabric.hostsPerLeaf = 32;
  fabric.spines = spines;
  fabric.oversubscription = oversubscription;
  fabric.hostLink = {400 * kGbit, 1e-6, "ib"};
  fabric.spineLatency = 0.5e-6;
  return railOptimized(name, nodes, node, fabric);
}

}  // namespace

std::vector<Topology> corpusModels(bool includeHuge) {
  std::vector<Topology> models;
  // A small machine: one host, two cores, four ranks over shared memory (as the local
  // calibration sweep runs, docs/CALIBRATION.md).
  CpuHostSpec local = cpuHost(1, 4);
  local.memory = {8 * kGB, 1e-6, "shm"};
  models.push_back(uniformHosts("local-1host-2core-shm", 1, local, {}));
  models.push_back(dgxRail("dgx-rail-16", 16, 4, 1));
  models.push_back(dgxRail("dgx-rail-128", 128, 16, 1));
  if (includeHuge) models.push_back(dgxRail("dgx-rail-1024", 1024, 32, 1));
  FabricSpec twoToOne;
  twoToOne.hostsPerLeaf = 16;
  twoToOne.spines = 4;
  twoToOne.oversubscription = 2;
  twoToOne.hostLink = {200 * kGbit, 1e-6, "ib"};
  twoToOne.spineLatency = 0.5e-6;
  models.push_back(fatTree("fattree-2to1-128", 128, cpuHost(1, 8), twoToOne));
  models.push_back(torus2d("torus-16x16", 16, 16, cpuHost(1, 1), {200 * kGbit, 1e-6, "eth"}));
  models.push_back(uniformHosts("cpu-2socket-100gbe-16", 16, cpuHost(2, 16),
                                {100 * kGbit, 5e-6, "eth"}));
  return models;
}

}  // namespace loom::topology
