// The communicator's topology builder, the choice of measuring pairs, and the per-host cache.
#include "topology/discover.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>

#include "topology/analysis.h"
#include "topology/builders.h"
#include "topology/probe.h"

namespace loom::topology {

const char* linkKindName(LinkKind k) {
  switch (k) {
    case LinkKind::SameNuma:
      return "same-NUMA";
    case LinkKind::CrossNuma:
      return "cross-NUMA";
    case LinkKind::Network:
      return "network";
  }
  return "?";
}

const char* figureSourceName(FigureSource s) {
  switch (s) {
    case FigureSource::Default:
      return "default";
    case FigureSource::Cached:
      return "cached";
    case FigureSource::Measured:
      return "measured";
  }
  return "?";
}

LinkFigures defaultFigures(LinkKind k) {
  const LocalLinkFigures local;
  switch (k) {
    case LinkKind::SameNuma:
      return {local.memory.latency, local.memory.bandwidth};
    case LinkKind::CrossNuma:
      return {local.memory.latency + local.interSocket.latency,
              std::min(local.memory.bandwidth, local.interSocket.bandwidth)};
    case LinkKind::Network:
      return {25e-6, 10e9 / 8};
  }
  return {};
}

namespace {

constexpr double kKernelReadOverhead = 1e-6, kKernelReadCopies = 1.1;
// s of a core per message sent or received over TCP: the kernel's work, which the init
// measurement folds into the link's latency (paid once per message, in parallel), but which
// each extra lane's messages pay again on the host's cores. Not measured at init: the netns
// sweeps of docs/CALIBRATION.md, which run lanes 1, 2 and 4, fit 3.4-7.9 us with a core per
// host, and the communicator's own model of either of the last two sweeps predicts them best
// with 6.5 us (its worst ratio 1.96-2.00x, where 3.5 us gave 2.51-2.85x).
constexpr double kNetMessageOverhead = 6.5e-6;
// CPU bytes a byte read out of another core's private cache adds (docs/CALIBRATION.md).
constexpr double kDirtyReadCopies = 0.66;
// A streamed copy to memory moves 2 bytes (read, write) where a plain one moves 3 (the
// destination is read first), so a large streamed copy takes about two thirds of memcpy's time
// (collectives/plan.h, kStreamingCopyBytes).
constexpr double kStreamingCopies = 0.67;

LinkFigures orDefault(const LinkFigures& f, LinkKind k) {
  return f.known() ? f : defaultFigures(k);
}

// Host names as node names: unique (network namespaces of one machine share a hostname).
std::vector<std::string> uniqueHostNames(const std::vector<HostDescription>& hosts) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  for (size_t h = 0; h < hosts.size(); ++h) {
    std::string name = hosts[h].name.empty() ? "host" : hosts[h].name;
    if (!seen.insert(name).second) {
      name += "-" + std::to_string(h);
      seen.insert(name);
    }
    names.push_back(name);
  }
  return names;
}

// Each host's rank-to-rank figures as a rank's link takes them. The pair measured at init had
// its cores to itself; in a call every rank of the host is busy, and where they outnumber the
// cores (k ranks per core, sharedCore measured), a rank on another core is running only 1/k of
// the time: a message to it waits, on average, (1 - 1/k) of the switch that a one-core trip
// measures. That share moves from sharedCore to the latency, so a message to a rank of the
// sender's own core still costs the measured one-core trip. (The calibration of the
// 2026-12-02 VM, 4 ranks on 2 cores, fitted 3.9 us per message where the two-core ping measured
// 1.5 and the one-core one 6.5.)
std::vector<LinkFigures> busySameNuma(const CommDescription& d) {
  std::vector<int64_t> ranks(d.hosts.size(), 0);
  for (int32_t h : d.rankHost) ++ranks[size_t(h)];
  std::vector<LinkFigures> out;
  for (size_t h = 0; h < d.hosts.size(); ++h) {
    LinkFigures same = orDefault(d.hosts[h].sameNuma, LinkKind::SameNuma);
    const int cores = d.hosts[h].cores;
    if (same.sharedCore > 0 && cores > 0 && ranks[h] > cores) {
      const double waiting = 1.0 - double(cores) / double(ranks[h]);
      same.latency += waiting * same.sharedCore;
      same.sharedCore -= waiting * same.sharedCore;
    }
    out.push_back(same);
  }
  return out;
}

}  // namespace

Topology buildCommTopology(const std::string& name, const CommDescription& d) {
  TopologyBuilder b(name);
  std::vector<std::string> names = uniqueHostNames(d.hosts);
  std::vector<std::vector<int32_t>> hubs(d.hosts.size());
  const std::vector<LinkFigures> busy = busySameNuma(d);
  for (size_t h = 0; h < d.hosts.size(); ++h) {
    const HostDescription& host = d.hosts[h];
    int32_t hostNode = b.addHost(names[h]);
    b.node(hostNode).cpu.cores = std::max(0, host.cores);
    b.node(hostNode).cpu.machine = host.machine;
    LinkFigures same = orDefault(host.sameNuma, LinkKind::SameNuma);
    b.node(hostNode).cpu.stepOverhead = std::max(0.0, same.perMessage);
    // Nor is a barrier of the host's ranks timed at init: it is each rank's flag taking one
    // trip between cores (ShmArena), as a small message's first cache line does; where the
    // ranks share cores, the last flag can be for the other rank of the sender's core: the
    // one-core trip.
    b.node(hostNode).cpu.barrierLatency = same.latency + same.sharedCore;
    b.node(hostNode).cpu.sharedCoreLatency = busy[h].sharedCore;
    // Reading another process's memory through the kernel (a single-copy shm receive, a peer
    // read of plain memory) costs a system call and the pinning of the pages; where the host's
    // memory figures were not measured, what an earlier calibration (docs/CALIBRATION.md) fitted
    // on an Intel VM, whose kernel reads cost little more than a memcpy.
    b.node(hostNode).cpu.singleCopyOverhead = kKernelReadOverhead;
    b.node(hostNode).cpu.peerReadCopies = kKernelReadCopies;
    // Measured at init, once per host: one core's copy rates, in its last-level cache and
    // beyond it, and what a read through the kernel costs on this kernel and CPU.
    if (const MemoryFigures& m = host.memory; m.known() && host.cacheBytes > 0) {
      b.node(hostNode).cpu.cacheBytes = host.cacheBytes;
      b.node(hostNode).cpu.cacheBandwidth = m.cacheBandwidth;
      b.node(hostNode).cpu.memBandwidth = m.memBandwidth;
      if (m.kernelReadCopies > 0) {
        b.node(hostNode).cpu.peerReadCopies = m.kernelReadCopies;
        b.node(hostNode).cpu.singleCopyOverhead = m.kernelReadOverhead;
      }
    }
    b.node(hostNode).cpu.netMessageOverhead = kNetMessageOverhead;
    b.node(hostNode).cpu.streamingCopies = kStreamingCopies;
    // Nor is reading what another core just wrote; its reach is the probed private cache.
    if (host.privateCacheBytes > 0) {
      b.node(hostNode).cpu.privateCacheBytes = host.privateCacheBytes;
      b.node(hostNode).cpu.dirtyReadCopies = kDirtyReadCopies;
    }
    LinkFigures cross = orDefault(host.crossNuma, LinkKind::CrossNuma);
    // Rank → hub → hub → rank must cost the measured cross-NUMA figures (and a busy receiver's
    // wait, on the rank links): the hub-to-hub link carries what crossing adds to a same-NUMA
    // copy as measured.
    LinkSpec socketLink{cross.bandwidth, std::max(0.0, cross.latency - same.latency), "upi"};
    for (int n = 0; n < std::max(1, host.numaNodes); ++n) {
      hubs[h].push_back(
          b.addNode(NodeKind::Numa, names[h] + "/numa" + std::to_string(n), int32_t(h)));
      for (size_t p = 0; p + 1 < hubs[h].size(); ++p)
        b.connect(hubs[h][p], hubs[h].back(), socketLink);
    }
  }
  for (size_t r = 0; r < d.rankHost.size(); ++r) {
    size_t h = size_t(d.rankHost[r]);
    int numa = r < d.rankNuma.size() ? d.rankNuma[r] : 0;
    int32_t hub = hubs[h][size_t(std::clamp(numa, 0, int(hubs[h].size()) - 1))];
    b.addCpuRank(int32_t(h), hub, {busy[h].bandwidth, busy[h].latency, "shm"});
  }
  if (d.hosts.size() > 1) {
    // Rank → hub → NIC → switch → NIC → hub → rank: the two NIC-switch hops carry what the
    // network adds to a same-NUMA copy of host 0 (never less than a quarter of the total, so
    // a noisy measurement cannot make the network free).
    LinkFigures net = orDefault(d.network, LinkKind::Network);
    LinkFigures same0 = orDefault(d.hosts[0].sameNuma, LinkKind::SameNuma);
    double hop = std::max((net.latency - same0.latency) / 2, net.latency / 4);
    LinkSpec pcie{LocalLinkFigures().pcieBandwidth, 0, "pcie"};
    int32_t fabric = b.addNode(NodeKind::Switch, "switch", -1);
    for (size_t h = 0; h < d.hosts.size(); ++h) {
      int32_t nic = b.addNode(NodeKind::Nic, names[h] + "/nic0", int32_t(h));
      b.connect(hubs[h][0], nic, pcie);
      b.connect(nic, fabric, {net.bandwidth, hop, "tcp", uint64_t(net.burstBytes)});
    }
  }
  return b.take();
}

int boundNumaNode(const std::vector<int>& allowedCpus,
                  const std::vector<std::vector<int>>& numaCpus) {
  if (allowedCpus.empty()) return -1;
  for (size_t n = 0; n < numaCpus.size(); ++n) {
    const std::vector<int>& node = numaCpus[n];
    bool inside = std::all_of(allowedCpus.begin(), allowedCpus.end(), [&](int cpu) {
      return std::find(node.begin(), node.end(), cpu) != node.end();
    });
    if (inside) return int(n);
  }
  return -1;
}

std::vector<MeasurePair> measurementPairs(const std::vector<int32_t>& rankHost,
                                          const std::vector<int32_t>& rankNuma,
                                          const std::vector<bool> wanted[kLinkKinds]) {
  int hosts = rankHost.empty() ? 0 : *std::max_element(rankHost.begin(), rankHost.end()) + 1;
  std::vector<std::vector<int32_t>> ranksOf(size_t(std::max(0, hosts)));
  for (size_t r = 0; r < rankHost.size(); ++r) ranksOf[size_t(rankHost[r])].push_back(int32_t(r));
  auto numa = [&](int32_t r) { return std::max(0, rankNuma[size_t(r)]); };
  auto want = [&](LinkKind k, int h) {
    const std::vector<bool>& w = wanted[int(k)];
    return size_t(h) < w.size() && w[size_t(h)];
  };
  std::vector<MeasurePair> pairs;
  for (LinkKind kind : {LinkKind::SameNuma, LinkKind::CrossNuma}) {
    bool sameNode = kind == LinkKind::SameNuma;
    for (int h = 0; h < hosts; ++h) {
      if (!want(kind, h)) continue;
      const std::vector<int32_t>& ranks = ranksOf[size_t(h)];
      bool found = false;
      for (size_t i = 0; i < ranks.size() && !found; ++i)
        for (size_t j = i + 1; j < ranks.size() && !found; ++j)
          if ((numa(ranks[i]) == numa(ranks[j])) == sameNode) {
            pairs.push_back({kind, h, ranks[i], ranks[j]});
            found = true;
          }
    }
  }
  if (hosts > 1 && want(LinkKind::Network, 0))
    pairs.push_back({LinkKind::Network, 0, ranksOf[0][0], ranksOf[1][0]});
  return pairs;
}

namespace {

using nlohmann::json;

std::string readLine(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line.empty() ? "?" : line;
}

}  // namespace

uint64_t hostIdentity(std::string* hostname) {
  char name[64] = {};
  gethostname(name, sizeof(name) - 1);
  *hostname = name;
  struct stat st = {};
  stat("/proc/self/ns/net", &st);
  return hash64(*hostname + "\n" + readLine("/proc/sys/kernel/random/boot_id") + "\n" +
                std::to_string(st.st_ino));
}

uint64_t machineIdentity() {
  return hash64("machine\n" + readLine("/proc/sys/kernel/random/boot_id"));
}

std::string linkCacheKey(LinkKind kind, const std::string& transport, uint64_t peerHostId) {
  std::string key = std::string(linkKindName(kind)) + "/" + transport;
  if (kind == LinkKind::Network) key += strprintf("/%016llx", (unsigned long long)peerHostId);
  return key;
}

std::string hostSignature(const std::string& hostname, uint64_t hostId) {
  return strprintf("%s id=%016llx cpus=%ld numa=%s", hostname.c_str(), (unsigned long long)hostId,
                   sysconf(_SC_NPROCESSORS_CONF),
                   readLine("/sys/devices/system/node/online").c_str());
}

std::string hostCachePath(const std::string& dir, const std::string& signature) {
  return dir + "/host-" + strprintf("%016llx", (unsigned long long)hash64(signature)) + ".json";
}

Status loadHostCache(const std::string& dir, const std::string& signature, HostCache* out) {
  std::string path = hostCachePath(dir, signature);
  std::ifstream in(path);
  if (!in) return errorf(loomInvalidUsage, "no cache entry %s", path.c_str());
  HostCache cache;
  try {
    json doc = json::parse(in);
    cache.signature = doc.at("signature").get<std::string>();
    // Another host whose signature hashes the same: not ours, as if absent.
    if (cache.signature != signature)
      return errorf(loomInvalidUsage, "%s belongs to another host (%s)", path.c_str(),
                    cache.signature.c_str());
    // An entry from before loom recorded the last-level cache holds only part of what the
    // probe gives, and one from before it checked hwloc's cache sizes (checkCacheClaim) may hold
    // a hypervisor's fiction as the private cache: their probe fields are left empty, so that
    // init probes once and files all of it. (The probe fields hold hwloc's last-level claim as
    // is; what the copies showed is the memory figures' cacheBytes, below.)
    if (doc.contains("cacheBytes") && doc.value("cacheChecked", false)) {
      cache.cores = doc.at("cores").get<int>();
      cache.privateCacheBytes = doc.at("privateCacheBytes").get<uint64_t>();
      cache.cacheInstanceBytes = doc.at("cacheInstanceBytes").get<uint64_t>();
      cache.cacheBytes = doc.at("cacheBytes").get<uint64_t>();
      cache.numaCpus = doc.at("numaCpus").get<std::vector<std::vector<int>>>();
    }
    if (doc.contains("memory")) {
      const json& m = doc.at("memory");
      // Figures from before the memory measurement checked hwloc's cache claim (cacheChecked),
      // or checked it by another rule than cachedReach's (cacheRule), were measured with a size
      // the claim may have made up: measured again.
      if (m.value("cacheChecked", false) && m.value("cacheRule", 1) == kCacheCheckRule)
        cache.memory = {m.at("cacheBandwidth").get<double>(), m.at("memBandwidth").get<double>(),
                        m.at("kernelReadCopies").get<double>(),
                        m.at("kernelReadOverhead").get<double>(), m.value("cacheBytes", uint64_t(0))};
    }
    for (const auto& [key, figures] : doc.at("links").items())
      cache.links[key] = {figures.at("latency").get<double>(),
                          figures.at("bandwidth").get<double>(),
                          figures.value("perMessage", 0.0), figures.value("sharedCore", 0.0),
                          figures.value("burstBytes", 0.0)};
  } catch (const json::exception& e) {
    return errorf(loomSystemError, "the topology cache %s is malformed (%s); delete it",
                  path.c_str(), e.what());
  }
  *out = std::move(cache);
  return Status::ok();
}

Status writeFileAtomically(const std::string& path, const std::string& text) {
  std::error_code ec;
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (!dir.empty()) std::filesystem::create_directories(dir, ec);
  if (ec)
    return errorf(loomSystemError, "cannot create the cache directory %s: %s", dir.c_str(),
                  ec.message().c_str());
  // Unique per writer, so ranks starting together never write into one temporary file.
  std::string tmp =
      path + strprintf(".%d.%llx.tmp", int(getpid()), (unsigned long long)std::random_device()());
  {
    std::ofstream outFile(tmp, std::ios::trunc);
    outFile << text;
    if (!outFile.flush())
      return errorf(loomSystemError, "cannot write %s: %s", tmp.c_str(), strerror(errno));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    Status st = errorf(loomSystemError, "cannot rename %s to %s: %s", tmp.c_str(), path.c_str(),
                       strerror(errno));
    unlink(tmp.c_str());
    return st;
  }
  return Status::ok();
}

Status saveHostCache(const std::string& dir, const HostCache& cache) {
  json links = json::object();
  for (const auto& [key, f] : cache.links) {
    links[key] = {{"latency", f.latency}, {"bandwidth", f.bandwidth}, {"perMessage", f.perMessage}};
    if (f.sharedCore > 0) links[key]["sharedCore"] = f.sharedCore;
    if (f.burstBytes > 0) links[key]["burstBytes"] = f.burstBytes;
  }
  json doc = {{"signature", cache.signature},
              {"cores", cache.cores},
              {"privateCacheBytes", cache.privateCacheBytes},
              {"cacheInstanceBytes", cache.cacheInstanceBytes},
              {"cacheBytes", cache.cacheBytes},
              {"cacheChecked", true},
              {"numaCpus", cache.numaCpus},
              {"links", links}};
  if (cache.memory.known())
    doc["memory"] = {{"cacheBandwidth", cache.memory.cacheBandwidth},
                     {"memBandwidth", cache.memory.memBandwidth},
                     {"kernelReadCopies", cache.memory.kernelReadCopies},
                     {"kernelReadOverhead", cache.memory.kernelReadOverhead},
                     {"cacheBytes", cache.memory.cacheBytes},
                     {"cacheChecked", true},
                     {"cacheRule", kCacheCheckRule}};
  return writeFileAtomically(hostCachePath(dir, cache.signature), doc.dump(1) + "\n");
}

std::string cacheDirectory(const std::string& setting) {
  if (!setting.empty()) return setting;
  if (const char* xdg = getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0')
    return std::string(xdg) + "/loom";
  if (const char* home = getenv("HOME"); home != nullptr && *home != '\0')
    return std::string(home) + "/.cache/loom";
  return "";
}

}  // namespace loom::topology
