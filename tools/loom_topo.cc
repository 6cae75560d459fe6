// loom-topo: the local topology (hwloc view, link measurement, path matrix like
// `nvidia-smi topo -m`), the cluster view of a JSON model, and the corpus generator.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "comm/options.h"
#include "topology/analysis.h"
#include "topology/builders.h"
#include "topology/discover.h"
#include "topology/probe.h"

namespace {

using namespace loom::topology;

constexpr double kMeasureBudgetSeconds = 0.2;
constexpr size_t kMatrixMax = 16;  // wider matrices stop being readable

const char* kUsage =
    "usage: loom-topo [--ranks N]        the local host: hwloc view, measured links, path matrix;\n"
    "                                    with N, also the model a communicator of N ranks here\n"
    "                                    gets at init (link kinds and figures between ranks)\n"
    "       loom-topo --file MODEL.json  the cluster view of a model\n"
    "       loom-topo --dump OUT.json [--ranks N]  write the probed host as a model\n"
    "       loom-topo --generate DIR     write the corpus of models (topology/models/)\n";

int fail(const loom::Status& s) {
  fprintf(stderr, "loom-topo: %s\n", s.message().c_str());
  return 1;
}

std::string bytes(double v) {  // 32768 → "32 KiB"
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return loom::strprintf("%.4g %s", v, units[u]);
}

std::string rate(double bytesPerSecond) { return loom::strprintf("%.4g GB/s", bytesPerSecond / 1e9); }

// The matrix of path labels between `nodes` (rows and columns named by `labels`).
void printMatrix(const Topology& t, const std::vector<int32_t>& nodes,
                 const std::vector<std::string>& labels) {
  size_t n = std::min(nodes.size(), kMatrixMax);
  size_t width = 8;
  for (size_t i = 0; i < n; ++i) width = std::max(width, labels[i].size() + 1);
  printf("%-*s", int(width), "");
  for (size_t j = 0; j < n; ++j) printf(" %8.8s", labels[j].c_str());
  printf("\n");
  for (size_t i = 0; i < n; ++i) {
    printf("%-*s", int(width), labels[i].c_str());
    for (size_t j = 0; j < n; ++j) printf(" %8s", pathLabel(t, nodes[i], nodes[j]).c_str());
    printf("\n");
  }
  if (nodes.size() > n) printf("(first %zu of %zu shown)\n", n, nodes.size());
  printf("legend: X = same node; else <narrowest link kind><hops>, e.g. shm2 = two shm hops\n");
}

void printRankMatrix(const Topology& t) {
  std::vector<int32_t> nodes;
  std::vector<std::string> labels;
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    nodes.push_back(t.ranks[r].endpoint);
    labels.push_back("rank" + std::to_string(r));
  }
  printMatrix(t, nodes, labels);
}

// A rank-by-rank matrix of what one message sees between two ranks: latency and bandwidth.
void printFigureMatrix(const Topology& t) {
  size_t n = std::min(t.ranks.size(), kMatrixMax);
  printf("%-8s", "");
  for (size_t j = 0; j < n; ++j) printf(" %14s", ("rank" + std::to_string(j)).c_str());
  printf("\n");
  for (size_t i = 0; i < n; ++i) {
    printf("%-8s", ("rank" + std::to_string(i)).c_str());
    for (size_t j = 0; j < n; ++j) {
      PathFigures f = pathFigures(t, t.ranks[i].endpoint, t.ranks[j].endpoint);
      std::string cell =
          f.hops == 0 ? "X" : loom::strprintf("%.3gus %.3gG", f.latency * 1e6, f.bandwidth / 1e9);
      printf(" %14s", cell.c_str());
    }
    printf("\n");
  }
  printf("cells: one-way latency of a small message, bandwidth of one stream in GB/s\n");
}

// The model a communicator of `ranks` ranks on this host gets at init
// (topology/comm_discovery.h), with this host's cached figures where init measured them before,
// else the defaults. Ranks are spread over the NUMA nodes, as when a launcher binds them
// round-robin.
void showCommunicator(const HostInfo& info, int ranks) {
  std::string hostname;
  uint64_t hostId = hostIdentity(&hostname);
  std::string dir = loom::readCacheDirectory(), signature = hostSignature(hostname, hostId);
  HostCache cache;
  bool haveCache = !dir.empty() && loadHostCache(dir, signature, &cache).isOk();
  HostDescription host;
  host.name = hostname;
  host.cores = info.cores;
  host.privateCacheBytes = privateCacheOf(info);
  host.numaNodes = info.numaNodes;
  printf("\ncommunicator of %d rank(s) on this host, as init builds it (LOOM_TOPO_MEASURE):\n",
         ranks);
  for (LinkKind kind : {LinkKind::SameNuma, LinkKind::CrossNuma}) {
    if (kind == LinkKind::CrossNuma && info.numaNodes < 2) continue;
    auto it = cache.links.find(linkCacheKey(kind, "shm"));
    bool cached = it != cache.links.end() && it->second.known();
    LinkFigures f = cached ? it->second : defaultFigures(kind);
    (kind == LinkKind::SameNuma ? host.sameNuma : host.crossNuma) = f;
    printf("  %-10s shm %.3g us, %s (%s)\n", linkKindName(kind), f.latency * 1e6,
           rate(f.bandwidth).c_str(), cached ? "cached" : "default: init measures it");
  }
  printf("  cache: %s\n", dir.empty() ? "none (no LOOM_CACHE_DIR, XDG_CACHE_HOME or HOME)"
                          : haveCache ? hostCachePath(dir, signature).c_str()
                                      : (hostCachePath(dir, signature) + " (absent)").c_str());
  CommDescription d;
  d.hosts = {host};
  for (int r = 0; r < ranks; ++r) {
    d.rankHost.push_back(0);
    d.rankNuma.push_back(r % std::max(1, info.numaNodes));
  }
  Topology t = buildCommTopology("local", d);
  printRankMatrix(t);
  printFigureMatrix(t);
}

Topology probedTopology(const HostInfo& info, int ranks) {
  Topology t = localTopology(info);
  LinkSpec memory = LocalLinkFigures().memory;
  for (int r = 0; r < ranks; ++r) addLocalRank(&t, r % std::max(1, info.numaNodes), memory);
  return t;
}

int showLocal(int ranks) {
  HostInfo info;
  if (auto s = probeHost(&info); !s.isOk()) return fail(s);
  // First, so that the caches below are what the copies showed where hwloc's claim was not.
  auto start = std::chrono::steady_clock::now();
  LinkMeasurement m = measureLocalLinks(lastLevelCacheOf(info).size, kMeasureBudgetSeconds);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                  .count();
  applyCacheReach(&info, m.memory.cacheBytes);
  printf("host %s: %d package(s), %d NUMA node(s), %d cores, %d PUs\n", info.hostname.c_str(),
         info.packages, info.numaNodes, info.cores, info.pus);
  for (int i = 0; i < info.numaNodes; ++i)
    printf("  numa%d: %d cores, %s\n", i, info.coresPerNuma[size_t(i)],
           bytes(double(info.numaMemory[size_t(i)])).c_str());
  for (const CacheLevel& c : info.caches)
    printf("  %-4s %s x %d%s\n", c.name.c_str(), bytes(double(c.size)).c_str(), c.count,
           c.claimedSize > 0
               ? (" (measured; hwloc said " + bytes(double(c.claimedSize)) + " each)").c_str()
               : "");
  if (info.devices.empty()) printf("  no PCI NICs or GPUs reported by hwloc\n");
  for (const PciDevice& d : info.devices)
    printf("  %-4s %-10s pci %s numa %d%s%s\n", nodeKindName(d.kind), d.name.c_str(),
           d.busId.empty() ? "?" : d.busId.c_str(), d.numa,
           d.pcieBandwidth > 0 ? (", pcie " + rate(d.pcieBandwidth)).c_str() : "",
           d.linkBandwidth > 0 ? (", port " + rate(d.linkBandwidth)).c_str() : "");
  printf("measured (%.0f ms): memcpy %s in cache, %s beyond; kernel read %.3g copies + %.3g us;"
         " 64 B copy %.3g us, tcp loopback one-way %.3g us\n",
         ms, rate(m.memory.cacheBandwidth).c_str(), rate(m.memory.memBandwidth).c_str(),
         m.memory.kernelReadCopies, m.memory.kernelReadOverhead * 1e6, m.memcpyLatency * 1e6,
         m.tcpLatency * 1e6);
  Topology t = probedTopology(info, ranks);
  std::vector<int32_t> nodes;
  std::vector<std::string> labels;
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    if (t.nodes[i].kind == NodeKind::Host) continue;
    nodes.push_back(int32_t(i));
    std::string name = t.nodes[i].name;
    labels.push_back(name.substr(name.find('/') + 1));
  }
  printf("\npaths between devices%s:\n", ranks ? " and rank endpoints" : "");
  printMatrix(t, nodes, labels);
  if (ranks > 0) showCommunicator(info, ranks);
  return 0;
}

int showModel(const std::string& path) {
  Topology t;
  if (auto s = loadTopology(path, &t); !s.isOk()) return fail(s);
  if (auto s = t.validate(); !s.isOk()) return fail(s);
  std::map<std::string, int> kinds;
  for (const Node& n : t.nodes) ++kinds[nodeKindName(n.kind)];
  printf("model %s: %d hosts, %zu ranks, %zu nodes (", t.name.c_str(), t.hostCount(),
         t.ranks.size(), t.nodes.size());
  const char* sep = "";
  for (const auto& [kind, n] : kinds) printf("%s%d %s", std::exchange(sep, ", "), n, kind.c_str());
  printf("), %zu links\n", t.links.size());
  int fabricSwitches = 0;
  for (const Node& n : t.nodes) fabricSwitches += n.kind == NodeKind::Switch && n.host < 0;
  printf("fabric switches: %d\n", fabricSwitches);
  printf("link classes:\n");
  for (const LinkClass& c : linkClasses(t))
    printf("  %-8s %10s %8s  x %d\n", c.kind.c_str(), formatBandwidth(c.bandwidth, isNetworkLinkKind(c.kind)).c_str(),
           formatLatency(c.latency).c_str(), c.count);
  auto start = std::chrono::steady_clock::now();
  double bisection = bisectionBandwidth(t);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                  .count();
  printf("bisection bandwidth (first half of the hosts -> second half): %s, %s per rank "
         "(%.0f ms)\n", rate(bisection).c_str(),
         rate(t.ranks.empty() ? 0 : bisection / double(t.ranks.size() / 2)).c_str(), ms);
  printf("\npaths between ranks:\n");
  printRankMatrix(t);
  return 0;
}

int generate(const std::string& dir) {
  for (const Topology& t : corpusModels(false)) {
    std::string path = dir + "/" + t.name + ".json";
    if (auto s = t.validate(); !s.isOk()) return fail(s);
    if (auto s = saveTopology(t, path); !s.isOk()) return fail(s);
    printf("wrote %s (%d hosts, %zu ranks, %zu nodes, %zu links)\n", path.c_str(),
           t.hostCount(), t.ranks.size(), t.nodes.size(), t.links.size());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode, arg;
  int ranks = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if ((a == "--file" || a == "--dump" || a == "--generate") && i + 1 < argc) {
      mode = a;
      arg = argv[++i];
    } else if (a == "--ranks" && i + 1 < argc) {
      ranks = atoi(argv[++i]);
    } else {
      fputs(kUsage, a == "--help" || a == "-h" ? stdout : stderr);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }
  if (mode == "--file") return showModel(arg);
  if (mode == "--generate") return generate(arg);
  if (mode == "--dump") {
    HostInfo info;
    if (auto s = probeHost(&info); !s.isOk()) return fail(s);
    checkCacheClaim(&info);
    if (auto s = saveTopology(probedTopology(info, ranks), arg); !s.isOk()) return fail(s);
    printf("wrote %s\n", arg.c_str());
    return 0;
  }
  return showLocal(ranks);
}
