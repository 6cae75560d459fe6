// The topology model (docs/TOPOLOGY.md): a graph of hosts, devices, switches and links,
// each link with a bandwidth and a latency, and where every rank sits. It is what the probe
// finds, what JSON files describe (so a user can model a cluster that is not the machine in
// front of them), and what the simulator replays plans over. No CUDA, no sockets: it builds and
// tests anywhere. docs/TOPOLOGY.md describes the conventions and the JSON schema.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace loom::topology {

struct Topology;

enum class NodeKind : uint8_t { Host, Cpu, Numa, Gpu, Nic, Switch };
const char* nodeKindName(NodeKind k);  // "host", "cpu", "numa", "gpu", "nic", "switch"
std::optional<NodeKind> parseNodeKind(std::string_view name);

// The CPU of a host, as the simulator costs local work (docs/TOPOLOGY.md, docs/SIMULATOR.md).
// Every field 0 means "not modelled": then each rank has a core of its own, local work runs at
// the simulator's default memory bandwidth, and plan steps cost no CPU time of their own.
struct HostCpu {
  int32_t cores = 0;        // cores the host's ranks share (fewer than ranks: they compete)
  double memBandwidth = 0;  // bytes/s one core copies or reduces (data in memory)
  // s of one core's time per transfer or barrier step (bookkeeping, doorbells, wake-ups); a
  // Copy or Reduce costs only its bytes
  double stepOverhead = 0;
  // The last-level cache the host's ranks share, and how fast one core copies data that is in
  // it: the part of a call's working set that fits is copied at cacheBandwidth, the rest at
  // memBandwidth. 0: no cache model.
  uint64_t cacheBytes = 0;
  double cacheBandwidth = 0;
  // CPU bytes a byte of a message between two CPU endpoints of the host costs; 0: 2, the shm
  // transport's copy into a slot of its ring and out of it. More when its synchronisation (slot
  // handshakes, wake-ups) costs more than the copies themselves.
  double messageCopies = 0;
  // s of one core per message a rank of the host sends or receives over the network, on top of
  // stepOverhead: the kernel's protocol work (TCP send and receive calls, interrupts), which on
  // a host with fewer cores than ranks delays the others as much as a copy would.
  double netMessageOverhead = 0;
  // CPU bytes a byte read from another rank's buffer in place costs (the "peer" algorithms);
  // 0: 1, a plain copy. More where the buffers are not from loomMemAlloc, so that the kernel
  // copies them (process_vm_readv pins the pages first).
  double peerReadCopies = 0;
  // s of one core per step that reads another process's memory through the kernel
  // (process_vm_readv: a system call, and the pages pinned): the receive of a single-copy shm
  // message (LOOM_SHM_CMA_THRESHOLD) and a peer read. On top of stepOverhead.
  double singleCopyOverhead = 0;
  // Data that a rank wrote earlier in the same call sits in its core's private cache (up to
  // privateCacheBytes of it, the most recently written), and another core reads such lines
  // slower than lines from memory or the shared cache: each has to be fetched out of the
  // writer's cache. dirtyReadCopies is what that adds, in CPU bytes per byte of such data, to a
  // read of another rank's memory in place (a single-copy shm receive of forwarded data, a peer
  // read of a peer's output). 0: not modelled.
  uint64_t privateCacheBytes = 0;
  double dirtyReadCopies = 0;
  // What a byte of a large final Copy (one that writes with streaming stores: collectives/
  // plan.h, kStreamingCopyBytes) costs where it goes to memory, per byte a plain copy costs
  // there: less, as the destination is not read into the cache first. 0: 1, not modelled.
  double streamingCopies = 0;
  // s from the last of the ranks reaching a Barrier until all of them go on: the arena's
  // cache-line hand-offs between cores, and waking the ranks that slept (where ranks outnumber
  // cores, a wake-up waits for a core). 0: SimOptions::barrierLatency.
  double barrierLatency = 0;
  // s a message between two of the host's ranks that share a core takes beyond its links'
  // latency, where the host's ranks outnumber its cores: the receiver runs only once the sender
  // has given the core up (a context switch), where a rank on another core sees the message as
  // soon as it polls. The ranks are placed as LOOM_BIND places them: the host's ranks in rank
  // order, the i-th on core i mod cores. 0: not modelled.
  double sharedCoreLatency = 0;
  // The machine whose cores the host's ranks run on, where hosts share one (network namespaces
  // of one box, each a host with its own network stack): hosts that name the same machine
  // share its `cores` (each says the machine's count) and its memory, LOOM_BIND places all
  // their ranks together (in rank order, the i-th on core i mod cores), and a message between
  // two ranks on one core costs sharedCoreLatency whichever hosts they are on. Empty: the host
  // is a machine of its own.
  std::string machine = {};  // (the initializer keeps HostCpu{cores, ...} quiet)

  bool operator==(const HostCpu&) const = default;
};

struct Node {
  NodeKind kind = NodeKind::Host;
  std::string name;   // unique within the topology, e.g. "node3/nic2", "leaf7"
  int32_t host = -1;  // the host this node belongs to (-1 for switches)
  HostCpu cpu = {};   // host nodes only (the initializer keeps {kind, name, host} quiet)

  bool operator==(const Node&) const = default;
};

// A directed link: traffic from `from` to `to` shares `bandwidth` (bytes per second) fairly
// among the flows crossing it, and pays `latency` (seconds) once per message. Full-duplex
// connections are two links.
struct Link {
  int32_t from = 0, to = 0;  // node indices
  double bandwidth = 0;      // bytes/s
  double latency = 0;        // s
  std::string kind;          // "shm", "nvlink", "pcie", "eth", "ib", "xgmi"... (for reports)
  // Bytes the link passes at once after it has been idle: the depth of a token bucket that
  // shapes it (tc htb/tbf "burst"), refilled at `bandwidth`; 0 for a link no shaper fronts.
  uint64_t burstBytes = 0;

  bool operator==(const Link&) const = default;
};

struct Rank {
  int32_t host = 0;      // host index (order of the hosts in `nodes` of kind Host)
  int32_t endpoint = 0;  // the node its traffic enters the graph at (a CPU/NUMA/GPU node)

  bool operator==(const Rank&) const = default;
};

// The adjacency route() searches, built once per topology on first use (a 1024-node fat-tree
// is routed millions of times by the simulator; rebuilding per call would dominate). Copies
// start empty, so a copied-then-edited topology never routes over a stale graph; the cache
// also rebuilds itself when the node or link count changes. Edit links in place (from/to)
// after routing only through a fresh copy or after invalidate(). Compares equal always: it is
// derived data, not part of the model.
class RouteCache {
 public:
  struct Graph;  // compressed-sparse-row out- and in-adjacency (topology.cc)

  RouteCache() = default;
  RouteCache(const RouteCache&) {}
  RouteCache& operator=(const RouteCache&) {
    invalidate();
    return *this;
  }
  void invalidate();
  std::shared_ptr<const Graph> get(const Topology& t) const;
  friend bool operator==(const RouteCache&, const RouteCache&) { return true; }

 private:
  mutable std::mutex mutex_;
  mutable std::shared_ptr<const Graph> graph_;
};

struct Topology {
  std::string name;
  std::vector<Node> nodes;
  std::vector<Link> links;
  std::vector<Rank> ranks;
  RouteCache routeCache_ = {};

  int hostCount() const;
  // The links (indices) on a shortest path by hop count from node fromNode to node toNode, in
  // order. Empty when fromNode == toNode or when no path exists (validate() reports that).
  // Among equal-length paths the choice is a deterministic hash of (fromNode, toNode) at each
  // branching, so flows between different pairs spread over parallel spines like ECMP instead
  // of all crossing the lowest-numbered one. Thread-safe.
  std::vector<int32_t> route(int32_t fromNode, int32_t toNode) const;
  // Structural checks with a clear message: indices in range, unique names, positive
  // bandwidths, non-negative latencies, host indices consistent, ranks on existing nodes,
  // every pair of ranks connected.
  Status validate() const;
  // Host index → node index of that Host node.
  std::vector<int32_t> hostNodes() const;
  // Host index → the host index of the first host on its machine (HostCpu::machine): itself
  // where it names none, so hosts with equal entries share one machine's cores.
  std::vector<int32_t> hostMachines() const;
  int32_t findNode(std::string_view name) const;  // -1 when absent (linear scan)

  bool operator==(const Topology&) const = default;
};

// JSON (nlohmann::json) load/save. The schema is documented in docs/TOPOLOGY.md.
Status loadTopology(const std::string& path, Topology* out);
Status parseTopology(const std::string& json, Topology* out);
std::string toJson(const Topology& t);
Status saveTopology(const Topology& t, const std::string& path);

// "400Gbit", "400 Gbit/s", "25GB", "25 GB/s", "1.5GiB", "100Gbps" or a plain number → bytes/s.
// Decimal prefixes are powers of 1000, binary ones (Ki, Mi, Gi, Ti) of 1024; "bit"/"b" are
// bits and "B" bytes. Returns an error naming the text when it cannot be read.
Status parseBandwidth(std::string_view text, double* bytesPerSecond);
// "1.5us", "500ns", "2ms", "0.001s" or a plain number → seconds.
Status parseLatency(std::string_view text, double* seconds);
// A unit spelling that parses back to exactly `bytesPerSecond` ("400Gbit" with preferBits,
// as network links are quoted; "25GB" without), or the plain number when none is exact.
std::string formatBandwidth(double bytesPerSecond, bool preferBits = false);
std::string formatLatency(double seconds);
// Network links ("eth", "ib", "roce", "net", "tcp") are quoted in bits per second.
bool isNetworkLinkKind(std::string_view kind);
// The bandwidth (bytes/s) of the slowest network link on the route from rank `from` to rank
// `to`: what one flow between them can send at most. 0 when the route crosses no network link
// (the ranks share a host) or a rank is out of range.
double slowestNetworkLink(const Topology& t, int from, int to);

}  // namespace loom::topology
