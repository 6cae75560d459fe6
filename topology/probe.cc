// hwloc probe and the bounded local link measurement.
#include "topology/probe.h"

#include <arpa/inet.h>
#include <hwloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "base/clock.h"
#include "transports/shm/shm_util.h"
#include "transports/shm/user_memory.h"

namespace loom::topology {

namespace {

int numaOf(hwloc_topology_t topo, hwloc_obj_t obj) {
  hwloc_obj_t anchor = hwloc_get_non_io_ancestor_obj(topo, obj);
  if (!anchor || !anchor->nodeset) return -1;
  int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < n; ++i) {
    hwloc_obj_t numa = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, unsigned(i));
    if (hwloc_bitmap_isincluded(numa->nodeset, anchor->nodeset)) return i;
  }
  return -1;
}

hwloc_obj_t pciParent(hwloc_obj_t obj) {
  for (hwloc_obj_t p = obj->parent; p; p = p->parent)
    if (p->type == HWLOC_OBJ_PCI_DEVICE) return p;
  return nullptr;
}

void addCaches(hwloc_topology_t topo, HostInfo* out) {
  const std::pair<hwloc_obj_type_t, const char*> kTypes[] = {
      {HWLOC_OBJ_L1CACHE, "L1d"}, {HWLOC_OBJ_L2CACHE, "L2"}, {HWLOC_OBJ_L3CACHE, "L3"},
      {HWLOC_OBJ_L4CACHE, "L4"}};
  for (auto [type, name] : kTypes) {
    int n = hwloc_get_nbobjs_by_type(topo, type);
    if (n <= 0) continue;
    hwloc_obj_t first = hwloc_get_obj_by_type(topo, type, 0);
    out->caches.push_back({name, int(first->attr->cache.depth), first->attr->cache.size, n});
  }
}

void addDevices(hwloc_topology_t topo, HostInfo* out) {
  for (hwloc_obj_t os = hwloc_get_next_osdev(topo, nullptr); os;
       os = hwloc_get_next_osdev(topo, os)) {
    hwloc_obj_osdev_type_t type = os->attr->osdev.type;
    bool nic = type == HWLOC_OBJ_OSDEV_NETWORK || type == HWLOC_OBJ_OSDEV_OPENFABRICS;
    bool gpu = type == HWLOC_OBJ_OSDEV_GPU || type == HWLOC_OBJ_OSDEV_COPROC;
    if (!nic && !gpu) continue;
    PciDevice d;
    d.kind = nic ? NodeKind::Nic : NodeKind::Gpu;
    d.name = os->name ? os->name : "?";
    if (hwloc_obj_t pci = pciParent(os)) {
      const auto& a = pci->attr->pcidev;
      d.busId = strprintf("%04x:%02x:%02x.%01x", a.domain, a.bus, a.dev, a.func);
      d.pcieBandwidth = double(a.linkspeed) * 1e9;  // hwloc: GB/s
    }
    d.numa = numaOf(topo, os);
    if (type == HWLOC_OBJ_OSDEV_NETWORK) d.linkBandwidth = nicLinkBandwidth(d.name);
    out->devices.push_back(std::move(d));
  }
}

}  // namespace

uint64_t privateCacheOf(const HostInfo& info) {
  uint64_t bytes = 0;
  for (const CacheLevel& c : info.caches)  // innermost first: the last that qualifies wins
    if (info.cores > 0 && c.count >= info.cores && c.size > 0 && c.size <= kCacheClaimChecked)
      bytes = c.size;
  return bytes;
}

CacheLevel lastLevelCacheOf(const HostInfo& info) {
  CacheLevel last;
  for (const CacheLevel& c : info.caches)  // innermost first
    if (c.size > 0) last = c;
  return last;
}

double nicLinkBandwidth(const std::string& ifname) {  // /sys: Mbit/s, -1 for virtual links
  std::ifstream in("/sys/class/net/" + ifname + "/speed");
  long mbit = 0;
  return in >> mbit && mbit > 0 ? double(mbit) * 1e6 / 8 : 0;
}

std::vector<std::string> rdmaDevices() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/infiniband", ec))
    out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

Status probeHost(HostInfo* out, bool withDevices) {
  hwloc_topology_t topo = nullptr;
  if (hwloc_topology_init(&topo) != 0)
    return Status(loomSystemError, "hwloc_topology_init failed");
  std::unique_ptr<hwloc_topology, void (*)(hwloc_topology_t)> guard(topo,
                                                                    hwloc_topology_destroy);
  hwloc_topology_set_io_types_filter(
      topo, withDevices ? HWLOC_TYPE_FILTER_KEEP_IMPORTANT : HWLOC_TYPE_FILTER_KEEP_NONE);
  if (hwloc_topology_load(topo) != 0)
    return errorf(loomSystemError, "hwloc_topology_load failed: %s", strerror(errno));
  HostInfo info;
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  info.hostname = name;
  info.packages = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE));
  info.numaNodes = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE));
  info.cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  info.pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  for (int i = 0; i < info.numaNodes; ++i) {
    hwloc_obj_t numa = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, unsigned(i));
    info.numaMemory.push_back(numa ? numa->attr->numanode.local_memory : 0);
    info.coresPerNuma.push_back(
        numa ? hwloc_get_nbobjs_inside_cpuset_by_type(topo, numa->cpuset, HWLOC_OBJ_CORE) : 0);
    std::vector<int>& cpus = info.numaCpus.emplace_back();
    if (numa) {
      unsigned cpu = 0;
      hwloc_bitmap_foreach_begin(cpu, numa->cpuset) cpus.push_back(int(cpu));
      hwloc_bitmap_foreach_end();
    }
  }
  addCaches(topo, &info);
  if (withDevices) addDevices(topo, &info);
  *out = std::move(info);
  return Status::ok();
}

Topology localTopology(const HostInfo& info, const LocalLinkFigures& figures) {
  TopologyBuilder b(info.hostname.empty() ? "localhost" : info.hostname);
  const std::string& host = b.topology().name;
  b.addHost(host);
  std::vector<int32_t> hubs;
  for (int i = 0; i < std::max(1, info.numaNodes); ++i) {
    hubs.push_back(b.addNode(NodeKind::Numa, host + "/numa" + std::to_string(i), 0));
    for (size_t p = 0; p + 1 < hubs.size(); ++p) b.connect(hubs[p], hubs.back(), figures.interSocket);
  }
  for (const PciDevice& d : info.devices) {
    int32_t node = b.addNode(d.kind, host + "/" + d.name, 0);
    double bw = d.pcieBandwidth > 0 ? d.pcieBandwidth : figures.pcieBandwidth;
    b.connect(hubs[size_t(std::clamp(d.numa, 0, int(hubs.size()) - 1))], node,
              {bw, figures.pcieLatency, "pcie"});
  }
  return b.take();
}

int32_t addLocalRank(Topology* t, int numa, const LinkSpec& memory) {
  int32_t hub = t->findNode(t->nodes[size_t(t->hostNodes().at(0))].name + "/numa" +
                            std::to_string(numa));
  if (hub < 0) hub = t->findNode(t->nodes[size_t(t->hostNodes().at(0))].name + "/numa0");
  TopologyBuilder b(std::move(*t));
  int32_t cpu = b.addCpuRank(0, hub, memory);
  *t = b.take();
  return cpu;
}

namespace {

// An anonymous mapping (null if refused); `huge` asks for huge pages (one fault per 2 MiB),
// else it keeps ordinary pages as most user buffers have. Touched at once, so the measured
// passes take no faults.
std::unique_ptr<transports::Mapping> touchedMapping(size_t bytes, bool huge) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  auto m = std::make_unique<transports::Mapping>(p, bytes);
  if (huge) madvise(p, bytes, MADV_HUGEPAGE);
  memset(p, 1, bytes);
  return m;
}

// The best of at least `minimum` and at most `maximum` timed runs of f (fewer past `budget`).
template <typename F>
double bestSeconds(int minimum, int maximum, double budget, F f) {
  double best = 0;
  auto start = Clock::now();
  for (int i = 0; i < maximum && (i < minimum || secondsSince(start) < budget); ++i) {
    auto t = Clock::now();
    f();
    const double s = secondsSince(t);
    if (i == 0 || s < best) best = s;
  }
  return best;
}

// Reads `bytes` of this process's memory at src into dst through the kernel, as the shm
// transport reads a peer's; false if refused.
bool kernelRead(char* dst, const char* src, size_t bytes) {
  return transports::readProcessMemory(getpid(), -1, reinterpret_cast<uint64_t>(src), dst, bytes)
      .isOk();
}

}  // namespace

uint64_t cachedReach(const std::vector<CopyRate>& rates) {
  auto byRate = [](const CopyRate& a, const CopyRate& b) { return a.rate < b.rate; };
  // The fastest set is surely cached (the first can be slow: a cold core, pages settling), and
  // the slowest after it the nearest to memory's speed.
  auto peak = std::max_element(rates.begin(), rates.end(), byRate);
  if (peak == rates.end()) return 0;
  const double slowest = std::min_element(peak, rates.end(), byRate)->rate;
  if (slowest > kCacheFallRatio * peak->rate) return rates.back().bytes;  // no fall seen
  // A set is within reach while its time per byte is nearer the cache's than memory's: by the
  // simulator's rule (time per byte f/cache + (1 - f)/memory) at least half of it was cached.
  const double threshold = 2 / (1 / peak->rate + 1 / slowest);
  uint64_t reach = 0;
  for (auto r = peak; r != rates.end() && r->rate >= threshold; ++r) reach = r->bytes;
  return reach;
}

uint64_t measuredCacheReach(uint64_t claimedInstance) {
  if (claimedInstance <= kCacheClaimChecked) return 0;
  const auto buffers = touchedMapping(kCacheCheckLast, true);
  if (buffers == nullptr) return 0;
  std::vector<CopyRate> rates;
  for (uint64_t set = kCacheCheckFirst; set <= kCacheCheckLast; set *= 2) {
    const size_t half = set / 2;
    char* src = buffers->base();
    memcpy(src + half, src, half);  // warm: the first pass brings the set into the cache
    const double s = bestSeconds(3, 3, 0, [&] { memcpy(src + half, src, half); });
    rates.push_back({set, double(half) / s});
  }
  const uint64_t reach = cachedReach(rates);
  return reach >= claimedInstance || reach == rates.back().bytes ? 0 : reach;
}

void applyCacheReach(HostInfo* info, uint64_t reach) {
  if (info->caches.empty() || reach == 0) return;
  CacheLevel& last = info->caches.back();
  last.claimedSize = last.size;
  last.size = reach;
  last.count = 1;
}

void checkCacheClaim(HostInfo* info) {
  if (!info->caches.empty()) applyCacheReach(info, measuredCacheReach(info->caches.back().size));
}

MemoryFigures measureMemory(uint64_t cacheBytes, double budgetSeconds) {
  constexpr size_t kSmallRead = 4096;
  constexpr int kSmallReads = 64;
  const uint64_t reach = measuredCacheReach(cacheBytes);
  const uint64_t instance = reach > 0 ? reach : cacheBytes > 0 ? cacheBytes : 16 << 20;
  const size_t cached = std::clamp<uint64_t>(instance / 4, 256 << 10, 4 << 20);
  const size_t beyond = std::clamp<uint64_t>(instance, 8 << 20, 64 << 20);
  MemoryFigures m;
  m.cacheBytes = reach;
  const double share = budgetSeconds / 3;
  {
    const auto big = touchedMapping(2 * beyond, true);
    if (big == nullptr) return m;
    char* dst = big->base() + beyond;
    m.memBandwidth = double(beyond) / bestSeconds(2, 4, share, [&] {
      memcpy(dst, big->base(), beyond);
    });
  }
  const auto small = touchedMapping(2 * cached, false);
  if (small == nullptr) return {};
  char *src = small->base(), *dst = small->base() + cached;
  const double copy = bestSeconds(3, 16, share, [&] { memcpy(dst, src, cached); });
  m.cacheBandwidth = double(cached) / copy;
  bool refused = false;
  const double read = bestSeconds(3, 16, share / 2, [&] {
    refused = refused || !kernelRead(dst, src, cached);
  });
  const double smallReads = bestSeconds(3, 8, share / 2, [&] {
    for (int i = 0; i < kSmallReads; ++i)
      refused = refused || !kernelRead(dst + (i % 2) * kSmallRead, src + (i % 8) * kSmallRead,
                                       kSmallRead);
  });
  if (refused) return m;
  m.kernelReadCopies = read / copy;
  // What a small read costs beyond its bytes at the large reads' rate.
  m.kernelReadOverhead =
      std::max(0.0, smallReads / kSmallReads - double(kSmallRead) * read / double(cached));
  return m;
}

namespace {

// The floor of a shm message: a 64-byte copy, cache-hot.
double measureSmallCopy() {
  constexpr size_t kSmall = 64;
  constexpr int kSmallCopies = 100000;
  char src[2 * kSmall] = {1}, dst[2 * kSmall];
  auto t = Clock::now();
  for (int i = 0; i < kSmallCopies; ++i) {
    memcpy(dst + (i & 1) * kSmall, src + (i & 7), kSmall);
    asm volatile("" ::: "memory");  // keep each copy
  }
  return secondsSince(t) / kSmallCopies;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

bool waitFor(int fd, short events, double deadlineSeconds, Clock::time_point start) {
  pollfd p{fd, events, 0};
  int ms = int((deadlineSeconds - secondsSince(start)) * 1000);
  return ms > 0 && poll(&p, 1, ms) == 1;
}

// A 1-byte ping-pong over loopback between two sockets of this thread (non-blocking, so a
// stuck kernel cannot hold the caller past the budget).
void measureTcp(double budget, LinkMeasurement* m) {
  auto start = Clock::now();
  Fd listener, client, server;
  listener.fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (listener.fd < 0 || bind(listener.fd, (sockaddr*)&addr, sizeof(addr)) != 0 ||
      listen(listener.fd, 1) != 0 || getsockname(listener.fd, (sockaddr*)&addr, &len) != 0)
    return;
  client.fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (client.fd < 0) return;
  connect(client.fd, (sockaddr*)&addr, sizeof(addr));  // EINPROGRESS: finished by accept
  if (!waitFor(listener.fd, POLLIN, budget, start)) return;
  server.fd = accept4(listener.fd, nullptr, nullptr, SOCK_NONBLOCK);
  if (server.fd < 0) return;
  int one = 1;
  setsockopt(client.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(server.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  char byte = 0;
  int rounds = 0;
  auto pingStart = Clock::now();
  for (; rounds < 2000 && secondsSince(start) < budget; ++rounds) {
    int from = rounds & 1 ? server.fd : client.fd, to = rounds & 1 ? client.fd : server.fd;
    if (send(from, &byte, 1, MSG_NOSIGNAL) != 1 || !waitFor(to, POLLIN, budget, start) ||
        recv(to, &byte, 1, 0) != 1)
      break;
  }
  if (rounds > 0) m->tcpLatency = secondsSince(pingStart) / rounds;
}

}  // namespace

LinkMeasurement measureLocalLinks(uint64_t cacheBytes, double budgetSeconds) {
  LinkMeasurement m;
  // Fixed shares: the memory passes may overrun theirs on a slow machine, and the TCP figure
  // should not be what pays for it.
  m.memory = measureMemory(cacheBytes, budgetSeconds * 0.6);
  m.memcpyLatency = measureSmallCopy();
  measureTcp(budgetSeconds * 0.4, &m);
  return m;
}

}  // namespace loom::topology
