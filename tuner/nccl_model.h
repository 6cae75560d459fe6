// loom's model of NCCL's own algorithms and protocols on a cluster (docs/NCCL_PLUGINS.md,
// "Tuner plugin"): what the NCCL tuner plugin (bindings/nccl-tuner) answers NCCL with. The
// cluster is loom's topology model (LOOM_TOPO_FILE, or the corpus model LOOM_TOPO_MODEL
// scaled to NCCL's rank and node counts); NCCL's Ring, Tree, PAT, NVLS and NVLS_TREE are priced
// in closed form over the figures of that topology (a rank's link within its host, the hosts'
// NICs, the routes' latencies) with per-protocol factors: LL half the bandwidth and the lowest
// step latency, LL128 ~92% of it, Simple all of it and the highest latency. CollNet needs
// in-network reduction, which no loom topology describes: it is never priced.
//
// Every cost is a line in the message size within a size bucket (a power of two: the channel
// count is the bucket's), so the table built at construction answers a call by a lookup and
// price() gives the same figure computed afresh.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/status.h"
#include "topology/topology.h"

namespace loom::tuner::nccl {

// NCCL's indices (its tuner ABI's constants).
constexpr int kAlgorithms = 7, kProtocols = 3, kFunctions = 5;
enum Algorithm { kTree = 0, kRing = 1, kCollNetDirect = 2, kCollNetChain = 3, kNvls = 4,
                 kNvlsTree = 5, kPat = 6 };
enum Protocol { kLL = 0, kLL128 = 1, kSimple = 2 };
enum Function { kBroadcast = 0, kReduce = 1, kAllGather = 2, kReduceScatter = 3, kAllReduce = 4 };
const char* algorithmName(int algorithm);  // "Tree", "Ring", ... as NCCL's logs spell them
const char* protocolName(int protocol);    // "LL", "LL128", "Simple"
const char* functionName(int function);    // "Broadcast" ... "AllReduce"

// The share of an NVLink's bandwidth NCCL's Ring, Tree and PAT reach (their kernels' copies
// and flags), fitted to the ring allreduce busbw NVIDIA publishes for 8 H100 of a DGX (about
// 370 GB/s of 450, docs/NCCL_PLUGINS.md). Elsewhere (PCIe, memory, networks) the link's rate.
constexpr double kNvlinkShare = 0.82;

// What the model needs of a cluster, read off loom's topology.
struct ClusterFacts {
  std::string source;  // where the figures came from, for logs
  int ranks = 1, nodes = 1;
  double intraBandwidth = 0;  // bytes/s a rank sends to another of its host (narrowest link)
  double intraLatency = 0;    // s, the route between two ranks of a host
  double netBandwidth = 0;    // bytes/s a host sends to the others (all its NICs together)
  double netLatency = 0;      // s, the route between ranks of two hosts
  bool nvlink = false;        // ranks of a host meet over NVLink (else PCIe or memory)
  bool nvswitch = false;      // ... at a switch of their host: NVLink SHARP (NVLS) hardware
};

// Figures of `t` for NCCL's `ranks` and `nodes` (hosts): the intra-host path is the one between
// the first two ranks of a host holding two, the network's between a rank and the rank of the
// same local index on another host; NCCL's counts replace the topology's own.
Status factsFromTopology(const topology::Topology& t, int ranks, int nodes, ClusterFacts* out);
// The cluster of a communicator of `ranks` over `nodes` hosts: LOOM_TOPO_FILE's model where it
// is set, else the corpus model (topology/models) named by LOOM_TOPO_MODEL.
Status clusterFacts(size_t ranks, size_t nodes, ClusterFacts* out);

struct Cell {
  double latencyUs = -1;  // < 0: the model has no figure (this cluster has no such algorithm)
  double usPerByte = 0;
  double at(uint64_t bytes) const { return latencyUs < 0 ? -1 : latencyUs + usPerByte * double(bytes); }
};

class Model {
 public:
  static constexpr int kBuckets = 65;  // bucket k holds sizes of bit width k (0: zero bytes)

  explicit Model(const ClusterFacts& facts);
  const ClusterFacts& facts() const { return facts_; }

  // The cost of `algorithm` × `protocol` for `function` on `bytes` (NCCL's nBytes), in µs,
  // computed afresh; -1 where the model has no figure.
  double price(int function, int algorithm, int protocol, uint64_t bytes) const;
  // The channel count the model prices Ring, Tree and PAT with at this size.
  int channels(uint64_t bytes) const;
  // price() for every cell, and channels(), from the table built at construction.
  void costs(int function, uint64_t bytes, float out[kAlgorithms][kProtocols], int* nChannels) const {
    const Bucket& b = table_[function][bucketOf(bytes)];
    for (int a = 0; a < kAlgorithms; ++a)
      for (int p = 0; p < kProtocols; ++p) out[a][p] = float(b.cells[a][p].at(bytes));
    *nChannels = b.channels;
  }

  static int bucketOf(uint64_t bytes) { return bytes == 0 ? 0 : 64 - __builtin_clzll(bytes); }

 private:
  struct Bucket {
    Cell cells[kAlgorithms][kProtocols];
    int channels = 1;
  };
  Cell cell(int function, int algorithm, int protocol, int bucket) const;
  int bucketChannels(int bucket) const;

  ClusterFacts facts_;
  int maxChannels_ = 1;
  Bucket table_[kFunctions][kBuckets];
};

}  // namespace loom::tuner::nccl
