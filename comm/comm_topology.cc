// The communicator's topology at init (docs/TOPOLOGY.md, "Discovery at init"): a model from
// LOOM_TOPO_FILE, or one built from the per-host probe and cache and a short measurement of
// each link kind by one pair of ranks. Every rank builds it from the same allgathered records,
// so every rank holds the same model.
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "base/log.h"
#include "base/params.h"
#include "topology/analysis.h"
#include "topology/discover.h"
#include "topology/probe.h"

namespace loom {
namespace {

using topology::FigureSource;
using topology::kLinkKinds;
using topology::LinkFigures;
using topology::LinkKind;
using topology::MemoryFigures;
using transports::Connection;
using transports::TransferOp;

// A lane no plan uses: the measurement gets connections of its own, dropped afterwards, so a
// measurement that fails half-way leaves nothing behind on the connections collectives use.
constexpr int kMeasureLane = 1 << 20;
constexpr size_t kBulkBytes = 1 << 20;
constexpr size_t kMinPings = 5, kMaxPings = 64, kMinBulks = 2, kMaxBulks = 8;
constexpr size_t kUntimedPings = 2;  // before the timed rounds (initiate)
// A measurement that takes longer than this is abandoned (defaults, a WARN): the pair's ranks
// are both in init, so only a broken or badly overloaded host gets here.
constexpr int64_t kMeasureTimeoutMs = 3000;
// kPingApart: a ping the responder answers from the CPU after the initiator's (initiate).
// kShaperProbe: kShaperProbeBytes of the bulk buffer, acknowledged like kBulk.
enum Command : uint64_t {
  kStop = 0,
  kPing = 1,
  kBulk = 2,
  kBurst = 3,
  kPingApart = 4,
  kShaperProbe = 5
};
constexpr size_t kBurstMessages = 8;  // a burst: this many 8-byte messages each way
// The network link's shaper (LinkFigures::burstBytes): a message of this size after the link
// has idled long enough to refill a bucket of its size, kShaperProbes times. A bucket deeper
// than the message reads as the message's size; one shallower than an eighth of it as none,
// so that an unshaped link's small messages, a little faster per byte than 1 MiB, do not read
// as a shaper.
constexpr size_t kShaperProbeBytes = 64 << 10;
constexpr size_t kShaperProbes = 5;
constexpr double kShaperMaxIdle = 5e-3;  // s, so a slow link's refill stays within the budget

// The bytes of the bulk buffer that follow a command (0: none).
size_t payloadBytes(uint64_t command) {
  return command == kBulk ? kBulkBytes : command == kShaperProbe ? kShaperProbeBytes : 0;
}

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

TransferOp transferOp(TransferOp::Kind kind, void* buffer, size_t bytes) {
  TransferOp op;
  op.kind = kind;
  op.src = buffer;
  op.dst = buffer;
  op.bytes = bytes;
  op.limit = bytes;
  return op;
}

// Posts `ops` in order and progresses them to completion. Yields the CPU while idle: the
// peer may share this core.
Status runOps(Connection* c, const std::vector<TransferOp*>& ops, const Deadline& deadline) {
  for (TransferOp* op : ops) LOOM_TRY(c->post(op));
  for (;;) {
    if (std::all_of(ops.begin(), ops.end(), [](TransferOp* op) { return op->complete(); })) {
      c->flushNotifications();
      return Status::ok();
    }
    bool progressed = false;
    LOOM_TRY(c->progress(&progressed));
    if (progressed) continue;
    if (deadline.expired())
      return errorf(loomTimeout, "no answer within %lld ms", (long long)kMeasureTimeoutMs);
    LOOM_TRY(c->checkAlive());
    sched_yield();
  }
}

// Sends or receives `count` 8-byte messages back to back (their contents do not matter).
Status runBurst(Connection* c, TransferOp::Kind kind, size_t count, const Deadline& deadline) {
  std::vector<uint64_t> words(count, kBurst);
  std::vector<TransferOp> ops;
  std::vector<TransferOp*> all;
  ops.reserve(count);
  for (uint64_t& w : words) all.push_back(&ops.emplace_back(transferOp(kind, &w, sizeof(w))));
  return runOps(c, all, deadline);
}

// Holds the calling thread on one CPU it may run on until release(), then gives it back its
// CPUs: the which-th of them (mod their count), -1 for none; moveTo(which) holds it on another.
// Both ends of a pair pinned alike share one core; pairs of hosts that share a machine
// (network namespaces) measure at the same time, so each host's pair takes its own CPU
// (which = its host), or they would all crowd CPU 0 and one host's per-message figure would
// read 10 us instead of 0.05.
class OneCore {
 public:
  explicit OneCore(int which) {
    savedOk_ = which >= 0 && sched_getaffinity(0, sizeof(saved_), &saved_) == 0;
    moveTo(which);
  }
  ~OneCore() { release(); }
  void moveTo(int which) {
    if (!savedOk_ || which < 0 || which == which_) return;
    const int allowed = CPU_COUNT(&saved_);
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0, seen = 0; c < CPU_SETSIZE && allowed > 0; ++c) {
      if (!CPU_ISSET(c, &saved_) || seen++ != which % allowed) continue;
      CPU_SET(c, &one);
      break;
    }
    if (sched_setaffinity(0, sizeof(one), &one) == 0) which_ = which;
  }
  void release() {
    if (which_ >= 0) sched_setaffinity(0, sizeof(saved_), &saved_);
    which_ = -1;
  }

 private:
  cpu_set_t saved_;
  bool savedOk_ = false;  // saved_ holds the thread's CPUs
  int which_ = -1;         // the CPU it holds the thread on, -1: none
};

// The responder echoes pings and acknowledges bulk transfers until the initiator says stop.
// sharedCore: the CPU (OneCore) it answers the pings from, the initiator's (see initiate), and
// kPingApart from the next one.
Status respond(Connection* c, std::vector<char>* bulk, int sharedCore, const Deadline& deadline) {
  OneCore pin(sharedCore);
  for (;;) {
    uint64_t command = kStop;
    TransferOp in = transferOp(TransferOp::Kind::Recv, &command, sizeof(command));
    LOOM_TRY(runOps(c, {&in}, deadline));
    if (command == kStop) return Status::ok();
    const size_t payload = payloadBytes(command);
    if (sharedCore >= 0 && payload == 0)
      pin.moveTo(command == kPingApart ? sharedCore + 1 : sharedCore);
    if (payload > 0) {
      pin.release();
      TransferOp data = transferOp(TransferOp::Kind::Recv, bulk->data(), payload);
      LOOM_TRY(runOps(c, {&data}, deadline));
    }
    if (command == kBurst) {
      LOOM_TRY(runBurst(c, TransferOp::Kind::Recv, kBurstMessages - 1, deadline));
      LOOM_TRY(runBurst(c, TransferOp::Kind::Send, kBurstMessages, deadline));
      continue;
    }
    TransferOp reply = transferOp(TransferOp::Kind::Send, &command, sizeof(command));
    LOOM_TRY(runOps(c, {&reply}, deadline));
  }
}

// Latency: half the median round trip of 8-byte pings. Bandwidth: 1 MiB over the fastest
// bulk round, less one round trip (the command and the acknowledgement). sharedCore (a CPU for
// OneCore, -1 for none): the pings run with both ends on one core, so every answer waits for
// the other end to be scheduled — as it does in a collective between two ranks of one core
// when the host has more ranks than cores, which a pair pinging on two otherwise idle cores
// would never show. With `apart` as well, pings with the ends on two cores give the latency,
// and what one core adds is LinkFigures::sharedCore: LOOM_BIND puts the host's consecutive
// ranks on different cores, so most of a collective's messages see the two-core figure.
// `shaper`: probe for a shaper's burst as well (LinkFigures::burstBytes; the network link).
Status initiate(Connection* c, std::vector<char>* bulk, double budget, int sharedCore, bool apart,
                bool shaper, const Deadline& deadline, LinkFigures* out) {
  auto start = Clock::now();
  OneCore pin(sharedCore);
  uint64_t command = kPing, reply = 0;
  auto round = [&](uint64_t what, double* seconds) {
    command = what;
    TransferOp ask = transferOp(TransferOp::Kind::Send, &command, sizeof(command));
    TransferOp data = transferOp(TransferOp::Kind::Send, bulk->data(), payloadBytes(what));
    TransferOp answer = transferOp(TransferOp::Kind::Recv, &reply, sizeof(reply));
    auto t = Clock::now();
    Status st = data.bytes > 0 ? runOps(c, {&ask, &data, &answer}, deadline)
                               : runOps(c, {&ask, &answer}, deadline);
    *seconds = secondsSince(t);
    return st;
  };
  // The median of rounds timed for a quarter of the budget (kMinPings to kMaxPings of them).
  auto medianRound = [&](auto&& timedRound, double* median) -> Status {
    std::vector<double> times;
    auto since = Clock::now();
    while (times.size() < kMinPings ||
           (times.size() < kMaxPings && secondsSince(since) < budget / 4)) {
      LOOM_TRY(timedRound(&times.emplace_back()));
    }
    std::nth_element(times.begin(), times.begin() + long(times.size() / 2), times.end());
    *median = times[times.size() / 2];
    return Status::ok();
  };
  // Untimed pings first: the first one waits while the responder finishes the pair it measured
  // before this one (a rank may be in two), and the second still finds it settling in. Between
  // 2 netns hosts they took 0.9-1.4 ms and 0.04-0.6 ms, the rest 27-31 us; timed, they were 2
  // of the 5 pings the link's quarter of the budget then held, and where a third was slow too
  // the median read 3 times the round trip (and the shaper's burst 26 KB for 18).
  for (size_t i = 0; i < kUntimedPings; ++i) {
    double ignored = 0;
    LOOM_TRY(round(kPing, &ignored));
  }
  start = Clock::now();
  double rtt = 0, rttApart = 0, burst = 0;
  apart = apart && sharedCore >= 0;
  if (apart)
    LOOM_TRY(medianRound([&](double* seconds) { return round(kPingApart, seconds); }, &rttApart));
  LOOM_TRY(medianRound([&](double* seconds) { return round(kPing, seconds); }, &rtt));
  // Per message: a burst round trip (kBurstMessages each way, the first one the command)
  // against a ping's; its 2·(kBurstMessages − 1) further messages are what it adds.
  LOOM_TRY(medianRound(
      [&](double* seconds) -> Status {
        auto t = Clock::now();
        LOOM_TRY(runBurst(c, TransferOp::Kind::Send, kBurstMessages, deadline));
        LOOM_TRY(runBurst(c, TransferOp::Kind::Recv, kBurstMessages, deadline));
        *seconds = secondsSince(t);
        return Status::ok();
      },
      &burst));
  out->perMessage = std::max(0.0, burst - rtt) / double(2 * (kBurstMessages - 1));
  pin.release();
  double fastest = 1e30;
  for (size_t n = 0; n < kMinBulks || (n < kMaxBulks && secondsSince(start) < budget); ++n) {
    double seconds = 0;
    LOOM_TRY(round(kBulk, &seconds));
    fastest = std::min(fastest, seconds);
  }
  // Apart pings slower than one core's were disturbed (the other core busy): then the
  // one-core figure stands for both, as without them.
  apart = apart && rttApart < rtt;
  out->latency = (apart ? rttApart : rtt) / 2;
  out->sharedCore = apart ? (rtt - rttApart) / 2 : 0;
  out->bandwidth = double(kBulkBytes) / std::max(fastest - 2 * out->latency, fastest / 2);
  if (shaper) {
    // A shaper's bucket passes its depth at once and the rest at the bandwidth, so a probe
    // takes rtt + (probe - depth) / bandwidth; an unshaped link, rtt + probe / bandwidth.
    const double idle = std::min(kShaperMaxIdle, double(kShaperProbeBytes) / out->bandwidth);
    std::vector<double> times;
    for (size_t i = 0; i < kShaperProbes; ++i) {
      std::this_thread::sleep_for(std::chrono::duration<double>(idle));
      LOOM_TRY(round(kShaperProbe, &times.emplace_back()));
    }
    std::nth_element(times.begin(), times.begin() + long(times.size() / 2), times.end());
    const double depth =
        double(kShaperProbeBytes) - std::max(0.0, times[times.size() / 2] - rtt) * out->bandwidth;
    out->burstBytes = depth >= double(kShaperProbeBytes) / 8 ? depth : 0;
  }
  command = kStop;
  TransferOp stop = transferOp(TransferOp::Kind::Send, &command, sizeof(command));
  LOOM_TRY(runOps(c, {&stop}, deadline));
  return Status::ok();
}

// One pair's measurement over a connection of its own, closed before returning.
Status measurePair(transports::Transport* t, int peer, bool initiator, int sharedCore, bool apart,
                   bool shaper, double budget, int64_t timeoutMs, LinkFigures* out) {
  int64_t ms = timeoutMs < 0 ? kMeasureTimeoutMs : std::min(timeoutMs, kMeasureTimeoutMs);
  Deadline deadline(ms);
  std::vector<char> bulk(kBulkBytes, 1);  // touched now, so page faults are not measured
  std::unique_ptr<Connection> conn;       // declared after its buffers: destroyed first
  LOOM_TRY(t->connect(peer, kMeasureLane, deadline, &conn));
  return initiator ? initiate(conn.get(), &bulk, budget, sharedCore, apart, shaper, deadline, out)
                   : respond(conn.get(), &bulk, sharedCore, deadline);
}

// What every rank tells the others before the measurement (fixed size: it is copied raw).
struct ProbeRecord {
  int32_t numa = -1;  // the NUMA node it is bound to, -1: none
  int32_t cores = 0;  // of its host
  int32_t numaNodes = 1;
  int32_t machineRanks = 0;  // ranks on its machine (several hosts' when they share it)
  uint64_t privateCacheBytes = 0;  // of its host's cores
  uint64_t cacheBytes = 0;         // its host's last-level caches, all of them
  LinkFigures cached[kLinkKinds];  // from its host's cache, zero when absent
  MemoryFigures cachedMemory;      // likewise
};
struct MeasureRecord {
  LinkFigures measured[kLinkKinds];  // by the pairs it initiated, zero otherwise
  MemoryFigures memory;              // where it measured its machine's memory
};
struct FileRecord {  // LOOM_TOPO_FILE: whether the rank could use it, and what it loaded
  int32_t code = loomSuccess;
  int32_t padding = 0;
  uint64_t signature = 0;
};

template <typename Record>
Status allgatherRecords(Bootstrap& boot, const Record& mine, int nranks, const Deadline& deadline,
                        std::vector<Record>* out) {
  std::vector<std::string> all;
  LOOM_TRY(boot.allgather(std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)), &all,
                          deadline));
  out->resize(size_t(nranks));
  for (int r = 0; r < nranks; ++r) {
    if (all[size_t(r)].size() != sizeof(Record))
      return errorf(loomInternalError, "topology: rank %d sent a malformed record", r);
    memcpy(&(*out)[size_t(r)], all[size_t(r)].data(), sizeof(Record));
  }
  return Status::ok();
}

// The probe data of this host: from the cache file, else hwloc (remembered per process, since
// hwloc takes tens of milliseconds and the cache directory may be unwritable).
bool probeThisHost(const std::string& signature, topology::HostCache* cache) {
  if (cache->cores > 0 && !cache->numaCpus.empty()) return false;
  static std::mutex mutex;
  static std::map<std::string, topology::HostCache> probed;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = probed.find(signature);
  if (it == probed.end()) {
    topology::HostInfo info;
    topology::HostCache& entry = probed[signature];
    if (Status st = topology::probeHost(&info, false); st.isOk()) {
      entry.cores = info.cores;
      entry.privateCacheBytes = topology::privateCacheOf(info);
      const topology::CacheLevel last = topology::lastLevelCacheOf(info);
      entry.cacheInstanceBytes = last.size;
      entry.cacheBytes = last.size * uint64_t(std::max(1, last.count));
      entry.numaCpus = info.numaCpus;
    } else {
      LOOM_WARN("INIT", "topology: %s; assuming one NUMA node", st.message().c_str());
      cpu_set_t set;
      entry.cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
      entry.numaCpus.assign(1, {});
    }
    it = probed.find(signature);
  }
  cache->cores = it->second.cores;
  cache->privateCacheBytes = it->second.privateCacheBytes;
  cache->cacheInstanceBytes = it->second.cacheInstanceBytes;
  cache->cacheBytes = it->second.cacheBytes;
  cache->numaCpus = it->second.numaCpus;
  return true;
}

std::vector<int> allowedCpus() {
  cpu_set_t set;
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// The first pair of ranks the model puts on one host and the communicator on two, or the other
// way round; {-1, -1} when the groupings agree.
std::pair<int, int> groupingDifference(const topology::Topology& t,
                                       const std::vector<int32_t>& hostOf) {
  for (size_t r = 0; r < hostOf.size(); ++r)
    for (size_t q = r + 1; q < hostOf.size(); ++q)
      if ((t.ranks[r].host == t.ranks[q].host) != (hostOf[r] == hostOf[q])) return {int(r), int(q)};
  return {-1, -1};
}

std::string rateText(double bytesPerSecond) { return strprintf("%.3g GB/s", bytesPerSecond / 1e9); }

}  // namespace

Status Comm::discoverTopology(const Deadline& deadline) {
  auto start = Clock::now();
  const int n = nranks(), me = rank();
  std::string file = params::getString("LOOM_TOPO_FILE");
  std::string how;
  if (!file.empty()) {
    // Every rank loads the file; the allgather makes sure all of them got the same model,
    // and tells everyone when one rank could not.
    Status st = topology::loadTopology(file, &topo_);
    if (st.isOk()) st = topo_.validate();
    if (st.isOk() && topo_.ranks.size() != size_t(n))
      st = topo_.ranks.empty()
               ? errorf(loomInvalidArgument,
                        "%s: the model has no ranks; list the communicator's %d in \"ranks\" "
                        "(docs/TOPOLOGY.md)",
                        file.c_str(), n)
               : errorf(loomInvalidArgument,
                        "%s: the model has %zu ranks but the communicator has %d", file.c_str(),
                        topo_.ranks.size(), n);
    st = st.withContext("LOOM_TOPO_FILE");  // the messages name the file
    FileRecord mine{int32_t(st.code()), 0,
                    topology::hash64(st.isOk() ? topology::topologySignature(topo_) : "")};
    std::vector<FileRecord> all;
    LOOM_TRY(allgatherRecords(boot_, mine, n, deadline, &all));
    LOOM_TRY(st);
    for (int r = 0; r < n; ++r) {
      if (all[size_t(r)].code != loomSuccess)
        return errorf(loomInvalidArgument,
                      "LOOM_TOPO_FILE=%s: rank %d could not use it (its error says why)",
                      file.c_str(), r);
      if (all[size_t(r)].signature != mine.signature)
        return errorf(loomInvalidArgument,
                      "LOOM_TOPO_FILE=%s: rank %d loaded a different model than rank %d; every "
                      "rank must see the same file",
                      file.c_str(), r, me);
    }
    if (auto [r, q] = groupingDifference(topo_, hostOf_); r >= 0 && me == 0) {
      bool together = hostOf_[size_t(r)] == hostOf_[size_t(q)];
      LOOM_WARN("INIT",
                "LOOM_TOPO_FILE=%s: the model puts ranks %d and %d on %s but they run on %s; "
                "the model is used as given",
                file.c_str(), r, q, together ? "two hosts" : "one host",
                together ? "one host" : "two hosts");
    }
    how = "loaded from " + file;
  } else {
    LOOM_TRY(detectTopology(deadline));
    how = "detected";
  }
  if (std::string dump = params::getString("LOOM_TOPO_DUMP"); !dump.empty() && me == 0) {
    if (Status st = topology::saveTopology(topo_, dump); !st.isOk())
      LOOM_WARN("INIT", "LOOM_TOPO_DUMP: %s", st.message().c_str());
  }
  LOOM_INFO("INIT", "topology %s: %d host(s), %zu rank(s), signature %s, in %.1f ms", how.c_str(),
            topo_.hostCount(), topo_.ranks.size(), topology::topologySignature(topo_).c_str(),
            secondsSince(start) * 1e3);
  return Status::ok();
}

Status Comm::detectTopology(const Deadline& deadline) {
  const int n = nranks(), me = rank(), myHost = hostOf_[size_t(me)];
  const int64_t mode = params::getInt("LOOM_TOPO_MEASURE");
  if (mode < 0 || mode > 2)
    return errorf(loomInvalidArgument,
                  "LOOM_TOPO_MEASURE=%lld: expected 0 (never measure), 1 (when not cached) or 2 "
                  "(always)",
                  (long long)mode);
  const double budget = double(std::max<int64_t>(0, params::getInt("LOOM_TOPO_MEASURE_MS"))) / 1e3;
  const std::string transport = transportMode_ == "tcp" ? "tcp" : "shm";  // within a host
  std::vector<int32_t> firstRank(size_t(hostCount_), -1);
  std::vector<int> hostRanks(size_t(hostCount_), 0);
  for (int r = n - 1; r >= 0; --r) {
    firstRank[size_t(hostOf_[size_t(r)])] = r;
    ++hostRanks[size_t(hostOf_[size_t(r)])];
  }
  // Whether this machine's ranks (other network namespaces' included) outnumber this host's
  // cores: then the within-host latency is measured with the pair on one core and cached
  // apart from the figures of communicators that have a core per rank (set once the host's
  // cores are known, below).
  bool sharedCore = false;
  // Cache keys; the network figures are those between hosts 0 and 1, filed on both.
  auto cacheKey = [&](LinkKind k, int host) -> std::string {
    if (k != LinkKind::Network)
      return topology::linkCacheKey(k, transport) + (sharedCore ? "/shared-core" : "");
    if (hostCount_ < 2 || host > 1) return "";
    return topology::linkCacheKey(k, "tcp", peer(firstRank[size_t(1 - host)]).hostId);
  };

  const std::string& cacheDir = cacheDir_;
  const std::string signature = topology::hostSignature(peer(me).hostname, peer(me).hostId);
  topology::HostCache cache;
  if (!cacheDir.empty()) {
    Status st = topology::loadHostCache(cacheDir, signature, &cache);
    if (st.code() == loomSystemError) LOOM_WARN("INIT", "topology: %s", st.message().c_str());
    if (!st.isOk()) cache = {};
  }
  cache.signature = signature;
  bool probed = probeThisHost(signature, &cache);
  sharedCore = machineRanks_ > cache.cores;
  ProbeRecord mine;
  mine.numa = topology::boundNumaNode(allowedCpus(), cache.numaCpus);
  mine.cores = cache.cores;
  mine.machineRanks = machineRanks_;
  mine.privateCacheBytes = cache.privateCacheBytes;
  mine.cacheBytes = cache.cacheBytes;
  mine.cachedMemory = cache.memory;
  mine.numaNodes = std::max(1, int(cache.numaCpus.size()));
  for (int k = 0; k < kLinkKinds; ++k)
    if (std::string key = cacheKey(LinkKind(k), myHost); !key.empty() && cache.links.count(key))
      mine.cached[k] = cache.links[key];
  std::vector<ProbeRecord> records;
  LOOM_TRY(allgatherRecords(boot_, mine, n, deadline, &records));

  // Every rank decides the same measurements from the same records: a host's cache is what
  // its first rank read; the network's is what rank 0 read.
  std::vector<bool> wanted[kLinkKinds];
  std::vector<int32_t> numaOf;
  for (const ProbeRecord& r : records) numaOf.push_back(r.numa);
  for (int k = 0; k < kLinkKinds; ++k) {
    int hosts = LinkKind(k) == LinkKind::Network ? 1 : hostCount_;
    for (int h = 0; h < hosts; ++h)
      wanted[k].push_back(mode == 2 ||
                          (mode == 1 && !records[size_t(firstRank[size_t(h)])].cached[k].known()));
  }
  std::vector<topology::MeasurePair> pairs = topology::measurementPairs(hostOf_, numaOf, wanted);
  MeasureRecord measured;
  for (const topology::MeasurePair& p : pairs) {
    if (p.initiator != me && p.responder != me) continue;
    int peerRank = p.initiator == me ? p.responder : p.initiator;
    LinkFigures figures;
    const int oneCore = sharedCore && p.kind != LinkKind::Network ? p.host : -1;
    // Pings on two cores as well where the host has two and is alone on its machine: pairs of
    // hosts that share one measure at the same time, and on two cores they would take each
    // other's.
    const ProbeRecord& initiator = records[size_t(p.initiator)];
    const bool apart = initiator.cores > 1 && initiator.machineRanks == hostRanks[size_t(p.host)];
    Status st = measurePair(transportFor(peerRank), peerRank, p.initiator == me, oneCore, apart,
                            p.kind == LinkKind::Network, budget, timeoutMs(), &figures);
    if (!st.isOk())
      LOOM_WARN("INIT",
                "topology: measuring the %s link with rank %d failed (%s); using %s figures",
                topology::linkKindName(p.kind), peerRank, st.message().c_str(),
                records[size_t(firstRank[size_t(p.host)])].cached[int(p.kind)].known() ? "cached"
                                                                                       : "default");
    measured.measured[int(p.kind)] = figures;
  }
  // A host's memory figures are measured by its first rank when its cache has none (or always,
  // mode 2), once per machine: hosts that share one (network namespaces) take the figures of
  // its first such host, since two measuring at once would halve each other's cores. After
  // every pair has finished (the links' allgather), so that every other rank of the machine
  // sleeps in the memory's allgather meanwhile.
  std::vector<int> memoryMeasurer(size_t(hostCount_), -1);
  std::map<uint64_t, int> machineMeasurer;  // machine id -> the first rank measuring there
  for (int h = 0; h < hostCount_; ++h) {
    const int first = firstRank[size_t(h)];
    if (mode == 0 || (mode == 1 && records[size_t(first)].cachedMemory.known())) continue;
    memoryMeasurer[size_t(h)] = machineMeasurer.emplace(peer(first).machineId, first).first->second;
  }
  std::vector<MeasureRecord> results(static_cast<size_t>(n));
  if (!pairs.empty()) LOOM_TRY(allgatherRecords(boot_, measured, n, deadline, &results));
  if (std::any_of(memoryMeasurer.begin(), memoryMeasurer.end(), [](int r) { return r >= 0; })) {
    if (std::find(memoryMeasurer.begin(), memoryMeasurer.end(), me) != memoryMeasurer.end())
      measured.memory = topology::measureMemory(cache.cacheInstanceBytes, budget);
    LOOM_TRY(allgatherRecords(boot_, measured, n, deadline, &results));
  }

  // Measured, else cached, else default, per host and kind.
  auto resolve = [&](LinkKind k, int host, FigureSource* source) {
    for (const topology::MeasurePair& p : pairs)
      if (p.kind == k && p.host == host && results[size_t(p.initiator)].measured[int(k)].known()) {
        *source = FigureSource::Measured;
        return results[size_t(p.initiator)].measured[int(k)];
      }
    const LinkFigures& cached = records[size_t(firstRank[size_t(host)])].cached[int(k)];
    *source = cached.known() ? FigureSource::Cached : FigureSource::Default;
    return cached.known() ? cached : topology::defaultFigures(k);
  };
  topology::CommDescription d;
  FigureSource sources[kLinkKinds] = {};  // of this rank's host's figures
  FigureSource memorySource = FigureSource::Default;
  for (int h = 0; h < hostCount_; ++h) {
    const ProbeRecord& first = records[size_t(firstRank[size_t(h)])];
    topology::HostDescription host;
    host.name = peer(firstRank[size_t(h)]).hostname;
    // Hosts that share a machine (network namespaces of one box) share its cores and its
    // caches: the model names the machine, or it would count them once per host.
    host.cores = first.cores;
    if (first.machineRanks > hostRanks[size_t(h)])
      host.machine = strprintf("%016llx", (unsigned long long)peer(firstRank[size_t(h)]).machineId);
    host.privateCacheBytes = first.privateCacheBytes;
    host.cacheBytes = first.cacheBytes;
    host.numaNodes = first.numaNodes;
    const int measurer = memoryMeasurer[size_t(h)];
    const bool memoryMeasured = measurer >= 0 && results[size_t(measurer)].memory.known();
    host.memory = memoryMeasured ? results[size_t(measurer)].memory : first.cachedMemory;
    // What the memory measurement's copies showed, where hwloc's claim was implausible.
    if (host.memory.cacheBytes > 0) host.cacheBytes = host.memory.cacheBytes;
    if (h == myHost)
      memorySource = memoryMeasured            ? FigureSource::Measured
                     : host.memory.known()     ? FigureSource::Cached
                                               : FigureSource::Default;
    FigureSource same, cross;
    host.sameNuma = resolve(LinkKind::SameNuma, h, &same);
    host.crossNuma = resolve(LinkKind::CrossNuma, h, &cross);
    if (h == myHost) sources[0] = same, sources[1] = cross;
    d.hosts.push_back(host);
  }
  if (hostCount_ > 1) d.network = resolve(LinkKind::Network, 0, &sources[2]);
  d.rankHost = hostOf_;
  d.rankNuma = numaOf;
  topo_ = topology::buildCommTopology(strprintf("comm-%dr-%dh", n, hostCount_), d);
  if (Status st = topo_.validate(); !st.isOk())
    return st.withContext("topology: the communicator's model is inconsistent (a bug)");

  const topology::HostDescription& host = d.hosts[size_t(myHost)];
  const LinkFigures shown[kLinkKinds] = {host.sameNuma, host.crossNuma, d.network};
  for (int k = 0; k < kLinkKinds; ++k) {
    bool used = k == 0 || (k == 1 && host.numaNodes > 1) || (k == 2 && hostCount_ > 1);
    if (used)
      LOOM_INFO("INIT",
                "topology: %s link (%s) %.3g us (%.3g us more between ranks of one core), %s, "
                "%.3g us per further message, %.0f bytes at once after idling (%s)",
                topology::linkKindName(LinkKind(k)), k == 2 ? "tcp" : transport.c_str(),
                shown[k].latency * 1e6, shown[k].sharedCore * 1e6,
                rateText(shown[k].bandwidth).c_str(), shown[k].perMessage * 1e6,
                shown[k].burstBytes, topology::figureSourceName(sources[k]));
  }

  if (const MemoryFigures& m = host.memory; m.known())
    LOOM_INFO("INIT",
              "topology: one core copies %s in its cache, %s beyond it; a read through the "
              "kernel costs %.3g copies and %.3g us (%s)",
              rateText(m.cacheBandwidth).c_str(), rateText(m.memBandwidth).c_str(),
              m.kernelReadCopies, m.kernelReadOverhead * 1e6,
              topology::figureSourceName(memorySource));

  // The first rank of each host files what is new for its host.
  bool fresh = probed;
  if (memorySource == FigureSource::Measured) {
    cache.memory = host.memory;
    fresh = true;
  }
  for (int k = 0; k < kLinkKinds; ++k) {
    if (sources[k] != FigureSource::Measured || (k == 2 && myHost > 1)) continue;
    cache.links[cacheKey(LinkKind(k), myHost)] = shown[k];
    fresh = true;
  }
  if (fresh && me == firstRank[size_t(myHost)] && !cacheDir.empty()) {
    // Merge with what other communicators filed since we read the file.
    topology::HostCache latest;
    if (topology::loadHostCache(cacheDir, signature, &latest).isOk())
      for (const auto& [key, figures] : latest.links) cache.links.emplace(key, figures);
    if (Status st = topology::saveHostCache(cacheDir, cache); !st.isOk())
      LOOM_WARN("INIT", "topology: cannot cache this host's figures: %s", st.message().c_str());
  }
  return Status::ok();
}

}  // namespace loom
