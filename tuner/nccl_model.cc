#include "tuner/nccl_model.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/params.h"
#include "topology/analysis.h"
#include "topology/builders.h"

namespace loom::tuner::nccl {

namespace {

// NCCL's published per-step times of its protocols (µs; its tuning model's default constants,
// Hopper-era): a step of an algorithm never takes less than these, whatever the wire's latency.
// [algorithm][protocol]; 0 where NCCL has no such pair.
constexpr double kNvlinkStepUs[kAlgorithms][kProtocols] = {
    {0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 25}, {0, 0, 25}, {0, 0, 4.0}};
constexpr double kPcieStepUs[kAlgorithms][kProtocols] = {
    {1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}, {0, 0, 3.7}, {0, 0, 2.8}, {0, 0, 0}, {0, 0, 0}, {0, 0, 4.0}};
constexpr double kNetStepUs[kAlgorithms][kProtocols] = {
    {5.0, 8.5, 14}, {2.7, 4.0, 14}, {0, 0, 31}, {0, 0, 30}, {0, 0, 18}, {0, 0, 20.9}, {0, 0, 14}};
// The launch of a kernel and its first step, per algorithm and protocol (µs).
constexpr double kBaseUs[kAlgorithms][kProtocols] = {
    {6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {8.0, 8.0, 8.0}};

// Bandwidth ceilings (bytes/s) NCCL publishes for Hopper, by scale (1 node, 2 nodes, more).
constexpr double kGB = 1e9;
constexpr double kLLMaxBus[3] = {141.0 * kGB, 39.0 * kGB, 20.4 * kGB};  // LL's whole bus
constexpr double kRingLL128PerChannel = 36.7 * kGB;
constexpr double kTreeLL128PerChannel[3] = {36.7 * kGB, 36.7 * kGB, 29.0 * kGB};
constexpr double kTreePerChannel[3] = {38.7 * kGB, 41.4 * kGB, 36.0 * kGB};
// What one channel moves at most with Simple: the channel count is the least that covers the
// cluster's fastest path at this rate.
constexpr double kSimplePerChannel = 38.7 * kGB;
constexpr int kMaxChannels = 32;
// Below this many bytes per channel a channel is not worth its synchronisation: small calls
// use fewer channels.
constexpr uint64_t kMinBytesPerChannel = 64 << 10;
// The protocols' share of the wire: LL sends a flag with every 4 bytes of data, LL128 one
// 8-byte flag per 128-byte line (NCCL prices it at 92%); Simple sends data only.
constexpr double kLLShare = 0.5, kLL128Share = 0.92;
// Tree's extra costs: its pipeline runs at 92% of the ring's rate, LL is ~3.8× slower on it,
// LL128 7/9 (one node: a chain) or 15/16 of Simple.
constexpr double kTreeShare = 0.92, kTreeLLSlowdown = 3.8;
// PAT (Bruck-like allgather/reduce-scatter, one rank per node) runs at 75% of the ring's rate.
constexpr double kPatShare = 0.75;
// NVLink SHARP: the switch reduces and multicasts, so an allreduce crosses a rank's link once
// each way. Fitted to the busbw NVIDIA publishes for 8 H100 of a DGX (about 480 GB/s,
// docs/NCCL_PLUGINS.md): the switch's reductions do not run at the links' full rate.
constexpr double kNvlsShare = 0.61;

int scaleIndex(int nodes) { return nodes <= 1 ? 0 : nodes == 2 ? 1 : 2; }
double log2Ceil(int n) { return n <= 1 ? 0 : std::ceil(std::log2(double(n))); }
bool tunable(int function) { return function >= 0 && function < kFunctions; }

// Ranks of each host, in rank order.
std::vector<std::vector<int>> ranksByHost(const topology::Topology& t) {
  std::vector<std::vector<int>> hosts(size_t(std::max(1, t.hostCount())));
  for (size_t r = 0; r < t.ranks.size(); ++r)
    if (t.ranks[r].host >= 0 && size_t(t.ranks[r].host) < hosts.size())
      hosts[size_t(t.ranks[r].host)].push_back(int(r));
  return hosts;
}

// Whether the route between two endpoints meets at a switch of their host over NVLink only.
bool meetsAtNvSwitch(const topology::Topology& t, int32_t from, int32_t to) {
  bool switchSeen = false;
  for (int32_t l : t.route(from, to)) {
    const topology::Link& link = t.links[size_t(l)];
    if (link.kind != "nvlink") return false;
    const topology::Node& n = t.nodes[size_t(link.to)];
    switchSeen |= n.kind == topology::NodeKind::Switch && n.host >= 0;
  }
  return switchSeen;
}

int nicsOf(const topology::Topology& t, int host) {
  int nics = 0;
  for (const topology::Node& n : t.nodes) nics += n.kind == topology::NodeKind::Nic && n.host == host;
  return nics;
}

}  // namespace

const char* algorithmName(int a) {
  static const char* names[] = {"Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"};
  return a >= 0 && a < kAlgorithms ? names[a] : "?";
}
const char* protocolName(int p) {
  static const char* names[] = {"LL", "LL128", "Simple"};
  return p >= 0 && p < kProtocols ? names[p] : "?";
}
const char* functionName(int f) {
  static const char* names[] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"};
  return tunable(f) ? names[f] : "?";
}

Status factsFromTopology(const topology::Topology& t, int ranks, int nodes, ClusterFacts* out) {
  if (ranks < 1 || nodes < 1 || nodes > ranks)
    return errorf(loomInvalidArgument, "%d ranks on %d nodes: need 1 <= nodes <= ranks", ranks, nodes);
  const auto hosts = ranksByHost(t);
  ClusterFacts f;
  f.source = t.name;
  f.ranks = ranks;
  f.nodes = nodes;
  const std::vector<int>* pairHost = nullptr;
  for (const auto& h : hosts)
    if (h.size() >= 2) {
      pairHost = &h;
      break;
    }
  if (ranks > nodes) {
    if (pairHost == nullptr)
      return errorf(loomInvalidArgument, "topology '%s' has no host with two ranks: it cannot "
                    "describe %d ranks on %d nodes", t.name.c_str(), ranks, nodes);
    const int32_t a = t.ranks[size_t((*pairHost)[0])].endpoint;
    const int32_t b = t.ranks[size_t((*pairHost)[1])].endpoint;
    const topology::PathFigures p = topology::pathFigures(t, a, b);
    f.intraBandwidth = p.bandwidth;
    f.intraLatency = p.latency;
    f.nvlink = p.kind == "nvlink";
    f.nvswitch = meetsAtNvSwitch(t, a, b);
  }
  if (nodes > 1) {
    if (hosts.size() < 2 || hosts[0].empty() || hosts[1].empty())
      return errorf(loomInvalidArgument, "topology '%s' has fewer than two hosts with ranks: it "
                    "cannot describe %d nodes", t.name.c_str(), nodes);
    const int from = hosts[0][0], to = hosts[1][0];
    const topology::PathFigures p =
        topology::pathFigures(t, t.ranks[size_t(from)].endpoint, t.ranks[size_t(to)].endpoint);
    // A host sends over as many of its NICs as it has ranks to drive them (NCCL's channels
    // spread over the NICs); a rank's own link bounds what it sends through them.
    const double ranksPerNode = double(ranks) / nodes;
    const int nics = std::max(1, nicsOf(t, 0));
    const double nic = topology::slowestNetworkLink(t, from, to);
    f.netBandwidth = (nic > 0 ? nic : p.bandwidth) *
                     std::min<double>(nics, std::max(1.0, std::floor(ranksPerNode)));
    f.netLatency = p.latency;
    if (ranks == nodes) f.intraBandwidth = p.bandwidth;  // no intra-host step: the rank's link
  }
  if ((ranks > nodes && f.intraBandwidth <= 0) || (nodes > 1 && f.netBandwidth <= 0))
    return errorf(loomInvalidArgument, "topology '%s': no route between the ranks it needs",
                  t.name.c_str());
  *out = f;
  return Status();
}

Status clusterFacts(size_t ranks, size_t nodes, ClusterFacts* out) {
  if (ranks == 0 || nodes == 0 || nodes > ranks || ranks > (1u << 30))
    return errorf(loomInvalidArgument, "%zu ranks on %zu nodes: need 1 <= nodes <= ranks", ranks,
                  nodes);
  const std::string file = params::getString("LOOM_TOPO_FILE");
  topology::Topology t;
  std::string source;
  if (!file.empty()) {
    Status st = topology::loadTopology(file, &t);
    if (!st.isOk()) return st.withContext("LOOM_TOPO_FILE");
    source = "LOOM_TOPO_FILE " + file;
  } else {
    const std::string name = params::getString("LOOM_TOPO_MODEL");
    std::string names;
    for (topology::Topology& m : topology::corpusModels(false)) {
      if (m.name == name) t = std::move(m);
      names += (names.empty() ? "" : ", ") + m.name;
    }
    if (t.name != name)
      return errorf(loomInvalidArgument, "LOOM_TOPO_MODEL: no model is called '%s' (models: %s)",
                    name.c_str(), names.c_str());
    source = "LOOM_TOPO_MODEL " + name;
  }
  LOOM_TRY(factsFromTopology(t, int(ranks), int(nodes), out));
  out->source = source;
  return Status();
}

Model::Model(const ClusterFacts& facts) : facts_(facts) {
  const double fastest = std::max(facts_.intraBandwidth, facts_.netBandwidth);
  maxChannels_ = std::clamp(int(std::ceil(fastest / kSimplePerChannel)), 2, kMaxChannels);
  for (int f = 0; f < kFunctions; ++f)
    for (int k = 0; k < kBuckets; ++k) {
      table_[f][k].channels = bucketChannels(k);
      for (int a = 0; a < kAlgorithms; ++a)
        for (int p = 0; p < kProtocols; ++p) table_[f][k].cells[a][p] = cell(f, a, p, k);
    }
}

int Model::bucketChannels(int bucket) const {
  const uint64_t low = bucket == 0 ? 0 : uint64_t(1) << (bucket - 1);
  return int(std::clamp<uint64_t>((low + kMinBytesPerChannel - 1) / kMinBytesPerChannel, 1,
                                  uint64_t(maxChannels_)));
}

int Model::channels(uint64_t bytes) const { return bucketChannels(bucketOf(bytes)); }

double Model::price(int function, int algorithm, int protocol, uint64_t bytes) const {
  if (!tunable(function) || algorithm < 0 || algorithm >= kAlgorithms || protocol < 0 ||
      protocol >= kProtocols)
    return -1;
  return cell(function, algorithm, protocol, bucketOf(bytes)).at(bytes);
}

// One cell of the table: NCCL's algorithm over this cluster, as latency + bytes × time per byte.
Cell Model::cell(int f, int a, int p, int bucket) const {
  const ClusterFacts& c = facts_;
  const int n = c.ranks, nodes = c.nodes, scale = scaleIndex(nodes);
  const double ppn = double(n) / nodes;
  const double nc = bucketChannels(bucket);
  const double intraBus = c.intraBandwidth * (c.nvlink ? kNvlinkShare : 1.0);
  const double rawBus = nodes == 1 ? intraBus : std::min(intraBus, c.netBandwidth);
  // A step costs the wire's latency, or the protocol's own time where that is longer.
  const auto& intraTable = c.nvlink ? kNvlinkStepUs : kPcieStepUs;
  const double intraStep = std::max(c.intraLatency * 1e6, intraTable[a][p]);
  const double netStep = std::max(c.netLatency * 1e6, kNetStepUs[a][p]) +
                         (p == kSimple ? c.netLatency * 1e6 : 0);  // Simple flushes too
  Cell out;
  double bus = 0, bytesPerByte = 0;  // bus bandwidth, and bytes on the bus per byte of nBytes
  if (a == kRing) {
    const bool reduces = f == kAllReduce;
    const int steps = n <= 1 ? 0 : reduces ? 2 * (n - 1) : n - 1;
    const int netSteps = nodes <= 1 ? 0 : reduces ? 2 * (nodes - 1) : nodes - 1;
    out.latencyUs = kBaseUs[a][p] + (steps - netSteps) * intraStep + netSteps * netStep;
    bus = p == kLL      ? std::min(rawBus * kLLShare, kLLMaxBus[scale])
          : p == kLL128 ? std::min(rawBus * kLL128Share, nc * kRingLL128PerChannel)
                        : std::min(rawBus, nc * kSimplePerChannel);
    bytesPerByte = n <= 1                              ? 0
                   : reduces                          ? 2.0 * (n - 1) / n
                   : f == kAllGather || f == kReduceScatter ? double(n - 1) / n
                                                            : 1.0;
  } else if (a == kTree && f == kAllReduce && n > 1) {
    out.latencyUs = kBaseUs[a][p] + 2 * ((ppn - 1) * intraStep + log2Ceil(nodes) * netStep);
    const double simple = std::min(rawBus * kTreeShare, nc * kTreePerChannel[scale]);
    bus = p == kLL      ? std::min(simple / kTreeLLSlowdown, kLLMaxBus[scale])
          : p == kLL128 ? std::min(simple * (nodes == 1 ? 7.0 / 9 : 15.0 / 16),
                                   nc * kTreeLL128PerChannel[scale])
                        : simple;
    bytesPerByte = 2;  // every byte goes up the tree and comes back down
  } else if (a == kPat && p == kSimple && (f == kAllGather || f == kReduceScatter) &&
             ppn == 1 && n > 1) {
    out.latencyUs = kBaseUs[a][p] + log2Ceil(n) * netStep;
    bus = rawBus * kPatShare;
    bytesPerByte = double(n - 1) / n;
  } else if (a == kNvls && p == kSimple && c.nvswitch && nodes == 1 && n > 1 &&
             (f == kAllReduce || f == kAllGather || f == kReduceScatter)) {
    out.latencyUs = std::max(c.intraLatency * 1e6, kNvlinkStepUs[a][p]);
    bus = c.intraBandwidth * kNvlsShare;
    bytesPerByte = f == kAllReduce ? 1.0 : double(n - 1) / n;
  } else if (a == kNvlsTree && p == kSimple && c.nvswitch && nodes > 1 && f == kAllReduce) {
    out.latencyUs = std::max(c.intraLatency * 1e6, kNvlinkStepUs[a][p]) +
                    2 * log2Ceil(nodes) * netStep;
    // Within a node the switch reduces; between nodes a tree of the nodes' NICs carries the
    // node's sum up and the result down (both ways at once between two nodes).
    bus = std::min(c.intraBandwidth * kNvlsShare, c.netBandwidth * (nodes <= 2 ? 1.0 : 0.5));
    bytesPerByte = 1;
  } else {
    return Cell{};  // NCCL has no such pair, or this cluster lacks its hardware (CollNet: always)
  }
  out.usPerByte = bus > 0 ? bytesPerByte / bus * 1e6 : 0;
  return out;
}

}  // namespace loom::tuner::nccl
