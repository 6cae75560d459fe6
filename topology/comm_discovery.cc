// The communicator's topology at init (topology/comm_discovery.h).
#include "topology/comm_discovery.h"

#include <sched.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "base/log.h"
#include "topology/analysis.h"
#include "topology/discover.h"
#include "topology/link_measure.h"
#include "topology/probe.h"

namespace loom::topology {
namespace {

// The records' figures: one slot per link kind within a host, and one per candidate transport
// for the network (the last kind).
constexpr int kNetworkTransports = 2;  // at most: tcp and ucx
constexpr int kFigureSlots = kLinkKinds - 1 + kNetworkTransports;
int slotOf(LinkKind k, int candidate) { return int(k) + (k == LinkKind::Network ? candidate : 0); }

// What every rank tells the others before the measurement (fixed size: it is copied raw).
struct ProbeRecord {
  int32_t numa = -1;  // the NUMA node it is bound to, -1: none
  int32_t cores = 0;  // of its host
  int32_t numaNodes = 1;
  int32_t machineRanks = 0;  // ranks on its machine (several hosts' when they share it)
  uint64_t privateCacheBytes = 0;  // of its host's cores
  uint64_t cacheBytes = 0;         // its host's last-level caches, all of them
  LinkFigures cached[kFigureSlots];  // from its host's cache, zero when absent
  MemoryFigures cachedMemory;      // likewise
};
struct MeasureRecord {
  LinkFigures measured[kFigureSlots];  // by the pairs it initiated, zero otherwise
  MemoryFigures memory;              // where it measured its machine's memory
};
struct FileRecord {  // LOOM_TOPO_FILE: whether the rank could use it, and what it loaded
  int32_t code = loomSuccess;
  int32_t padding = 0;
  uint64_t signature = 0;
};

template <typename Record>
Status allgatherRecords(RankExchange& ranks, const Record& mine, int nranks,
                        const Deadline& deadline, std::vector<Record>* out) {
  std::vector<std::string> all;
  LOOM_TRY(ranks.allgather(std::string(reinterpret_cast<const char*>(&mine), sizeof(mine)), &all,
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
bool probeThisHost(const std::string& signature, HostCache* cache) {
  if (cache->cores > 0 && !cache->numaCpus.empty()) return false;
  static std::mutex mutex;
  static std::map<std::string, HostCache> probed;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = probed.find(signature);
  if (it == probed.end()) {
    HostInfo info;
    HostCache& entry = probed[signature];
    if (Status st = probeHost(&info, false); st.isOk()) {
      entry.cores = info.cores;
      entry.privateCacheBytes = privateCacheOf(info);
      const CacheLevel last = lastLevelCacheOf(info);
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
std::pair<int, int> groupingDifference(const Topology& t, const std::vector<int32_t>& hostOf) {
  for (size_t r = 0; r < hostOf.size(); ++r)
    for (size_t q = r + 1; q < hostOf.size(); ++q)
      if ((t.ranks[r].host == t.ranks[q].host) != (hostOf[r] == hostOf[q])) return {int(r), int(q)};
  return {-1, -1};
}

std::string rateText(double bytesPerSecond) { return strprintf("%.3g GB/s", bytesPerSecond / 1e9); }

// LOOM_TOPO_FILE: every rank loads the file; the allgather makes sure all of them got the same
// model, and tells everyone when one rank could not.
Status loadModelFile(const DiscoverySetup& setup, const std::string& file, RankExchange& ranks,
                     const Deadline& deadline, Topology* out) {
  const int n = setup.comm->nranks, me = setup.comm->rank;
  Status st = loadTopology(file, out);
  if (st.isOk()) st = out->validate();
  if (st.isOk() && out->ranks.size() != size_t(n))
    st = out->ranks.empty()
             ? errorf(loomInvalidArgument,
                      "%s: the model has no ranks; list the communicator's %d in \"ranks\" "
                      "(docs/TOPOLOGY.md)",
                      file.c_str(), n)
             : errorf(loomInvalidArgument,
                      "%s: the model has %zu ranks but the communicator has %d", file.c_str(),
                      out->ranks.size(), n);
  st = st.withContext("LOOM_TOPO_FILE");  // the messages name the file
  FileRecord mine{int32_t(st.code()), 0, hash64(st.isOk() ? topologySignature(*out) : "")};
  std::vector<FileRecord> all;
  LOOM_TRY(allgatherRecords(ranks, mine, n, deadline, &all));
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
  if (auto [r, q] = groupingDifference(*out, setup.hostOf); r >= 0 && me == 0) {
    bool together = setup.hostOf[size_t(r)] == setup.hostOf[size_t(q)];
    LOOM_WARN("INIT",
              "LOOM_TOPO_FILE=%s: the model puts ranks %d and %d on %s but they run on %s; "
              "the model is used as given",
              file.c_str(), r, q, together ? "two hosts" : "one host",
              together ? "one host" : "two hosts");
  }
  return Status::ok();
}

// The model without LOOM_TOPO_FILE, in phases that every rank runs in the same order: this
// host's probe and cache, the records' exchange, the pairs' and the memory's measurements, the
// model from the figures (measured, else cached, else default), and the cache of what is new.
class Detector {
 public:
  Detector(const DiscoverySetup& setup, const DiscoveryOptions& options, RankExchange& ranks,
           const Deadline& deadline)
      : setup_(setup),
        options_(options),
        ranks_(ranks),
        deadline_(deadline),
        n_(setup.comm->nranks),
        me_(setup.comm->rank),
        hosts_(setup.hostCount),
        myHost_(setup.hostOf[size_t(me_)]),
        budget_(double(std::max<int64_t>(0, options.measureMs)) / 1e3),
        transport_(setup.hostTransport),
        networkTransports_(setup.networkTransports),
        firstRank_(size_t(hosts_), -1),
        hostRanks_(size_t(hosts_), 0) {
    for (int r = n_ - 1; r >= 0; --r) {
      firstRank_[size_t(setup.hostOf[size_t(r)])] = r;
      ++hostRanks_[size_t(setup.hostOf[size_t(r)])];
    }
  }

  Status run(Topology* out) {
    if (options_.measureMode < 0 || options_.measureMode > 2)
      return errorf(loomInvalidArgument,
                    "LOOM_TOPO_MEASURE=%lld: expected 0 (never measure), 1 (when not cached) or "
                    "2 (always)",
                    (long long)options_.measureMode);
    if (networkTransports_.empty() || networkTransports_.size() > size_t(kNetworkTransports))
      return errorf(loomInternalError, "topology: %zu candidate network transports (a bug)",
                    networkTransports_.size());
    readThisHost();
    LOOM_TRY(allgatherRecords(ranks_, probeRecord(), n_, deadline_, &records_));
    for (const ProbeRecord& r : records_) numaOf_.push_back(r.numa);
    pairs_ = measurementPairs(setup_.hostOf, numaOf_, wantedLinks().data());
    LOOM_TRY(measure());
    describe();
    if (hosts_ > 1) chooseNetwork();
    *out = buildCommTopology(strprintf("comm-%dr-%dh", n_, hosts_), description_);
    if (Status st = out->validate(); !st.isOk())
      return st.withContext("topology: the communicator's model is inconsistent (a bug)");
    logFigures();
    fileNewFigures();
    return Status::ok();
  }

  const NetworkChoice& networkChoice() const { return networkChoice_; }

 private:
  const transports::PeerInfo& peer(int r) const { return setup_.comm->peers[size_t(r)]; }

  // LOOM_TOPO_MEASURE: whether a figure is measured, given whether the cache has it.
  bool measures(bool cached) const {
    return options_.measureMode == 2 || (options_.measureMode == 1 && !cached);
  }

  // The transports a link kind is measured over: the network's candidates, else one.
  int transportsOf(LinkKind k) const {
    return k == LinkKind::Network ? int(networkTransports_.size()) : 1;
  }

  // Cache keys; the network figures are those between hosts 0 and 1, filed on both, one entry
  // per candidate transport.
  std::string cacheKey(LinkKind k, int host, int candidate) const {
    if (k != LinkKind::Network)
      return linkCacheKey(k, transport_) + (sharedCore_ ? "/shared-core" : "");
    if (hosts_ < 2 || host > 1) return "";
    return linkCacheKey(k, networkTransports_[size_t(candidate)],
                        peer(firstRank_[size_t(1 - host)]).hostId);
  }

  // This host's cache entry, and its probe where the entry has none.
  void readThisHost() {
    signature_ = hostSignature(peer(me_).hostname, peer(me_).hostId);
    if (!options_.cacheDir.empty()) {
      Status st = loadHostCache(options_.cacheDir, signature_, &cache_);
      if (st.code() == loomSystemError) LOOM_WARN("INIT", "topology: %s", st.message().c_str());
      if (!st.isOk()) cache_ = {};
    }
    cache_.signature = signature_;
    probed_ = probeThisHost(signature_, &cache_);
    // Whether this machine's ranks (other network namespaces' included) outnumber this host's
    // cores: then the within-host latency is measured with the pair on one core and cached
    // apart from the figures of communicators that have a core per rank.
    sharedCore_ = setup_.machineRanks > cache_.cores;
  }

  ProbeRecord probeRecord() const {
    ProbeRecord mine;
    mine.numa = boundNumaNode(allowedCpus(), cache_.numaCpus);
    mine.cores = cache_.cores;
    mine.machineRanks = setup_.machineRanks;
    mine.privateCacheBytes = cache_.privateCacheBytes;
    mine.cacheBytes = cache_.cacheBytes;
    mine.cachedMemory = cache_.memory;
    mine.numaNodes = std::max(1, int(cache_.numaCpus.size()));
    for (int k = 0; k < kLinkKinds; ++k)
      for (int c = 0; c < transportsOf(LinkKind(k)); ++c)
        if (std::string key = cacheKey(LinkKind(k), myHost_, c);
            !key.empty() && cache_.links.count(key))
          mine.cached[slotOf(LinkKind(k), c)] = cache_.links.at(key);
    return mine;
  }

  // Every rank decides the same measurements from the same records: a host's cache is what
  // its first rank read; the network's is what rank 0 read (networkWanted_: per candidate).
  std::array<std::vector<bool>, kLinkKinds> wantedLinks() {
    std::array<std::vector<bool>, kLinkKinds> wanted;
    for (int k = 0; k < kLinkKinds - 1; ++k)
      for (int h = 0; h < hosts_; ++h)
        wanted[size_t(k)].push_back(
            measures(records_[size_t(firstRank_[size_t(h)])].cached[k].known()));
    networkWanted_.clear();
    for (int c = 0; c < transportsOf(LinkKind::Network); ++c)
      networkWanted_.push_back(measures(records_[0].cached[slotOf(LinkKind::Network, c)].known()));
    wanted[int(LinkKind::Network)].push_back(
        std::find(networkWanted_.begin(), networkWanted_.end(), true) != networkWanted_.end());
    return wanted;
  }

  // This rank's pairs, in order; a pair that fails leaves its figures unknown (a WARN).
  MeasureRecord measurePairs() const {
    MeasureRecord measured;
    for (const MeasurePair& p : pairs_) {
      if (p.initiator != me_ && p.responder != me_) continue;
      const int peerRank = p.initiator == me_ ? p.responder : p.initiator;
      // Pings on two cores as well where the host has two and is alone on its machine: pairs of
      // hosts that share one measure at the same time, and on two cores they would take each
      // other's.
      const ProbeRecord& initiator = records_[size_t(p.initiator)];
      PairMeasurement how;
      how.initiator = p.initiator == me_;
      how.sharedCore = sharedCore_ && p.kind != LinkKind::Network ? p.host : -1;
      how.apart = initiator.cores > 1 && initiator.machineRanks == hostRanks_[size_t(p.host)];
      how.shaper = p.kind == LinkKind::Network;
      how.budgetSeconds = budget_;
      how.timeoutMs = setup_.comm->timeoutMs;
      for (int c = 0; c < transportsOf(p.kind); ++c) {
        if (p.kind == LinkKind::Network && !networkWanted_[size_t(c)]) continue;
        const int slot = slotOf(p.kind, c);
        transports::Transport* transport =
            p.kind == LinkKind::Network ? setup_.transportNamed(networkTransports_[size_t(c)])
                                        : setup_.transportTo(peerRank);
        LinkFigures figures;
        Status st = measureLinkPair(transport, peerRank, how, &figures);
        if (!st.isOk())
          LOOM_WARN("INIT",
                    "topology: measuring the %s link (%s) with rank %d failed (%s); using %s "
                    "figures",
                    linkKindName(p.kind), transport->name(), peerRank, st.message().c_str(),
                    records_[size_t(firstRank_[size_t(p.host)])].cached[slot].known()
                        ? "cached"
                        : "default");
        measured.measured[slot] = figures;
      }
    }
    return measured;
  }

  // The links' pairs, then the memory; every rank ends with every rank's results.
  Status measure() {
    MeasureRecord measured = measurePairs();
    // A host's memory figures are measured by its first rank when its cache has none (or
    // always, mode 2), once per machine: hosts that share one (network namespaces) take the
    // figures of its first such host, since two measuring at once would halve each other's
    // cores. After every pair has finished (the links' allgather), so that every other rank of
    // the machine sleeps in the memory's allgather meanwhile.
    memoryMeasurer_.assign(size_t(hosts_), -1);
    std::map<uint64_t, int> machineMeasurer;  // machine id -> the first rank measuring there
    for (int h = 0; h < hosts_; ++h) {
      const int first = firstRank_[size_t(h)];
      if (!measures(records_[size_t(first)].cachedMemory.known())) continue;
      memoryMeasurer_[size_t(h)] =
          machineMeasurer.emplace(peer(first).machineId, first).first->second;
    }
    results_.assign(size_t(n_), {});
    if (!pairs_.empty()) LOOM_TRY(allgatherRecords(ranks_, measured, n_, deadline_, &results_));
    if (std::any_of(memoryMeasurer_.begin(), memoryMeasurer_.end(), [](int r) { return r >= 0; })) {
      if (std::find(memoryMeasurer_.begin(), memoryMeasurer_.end(), me_) != memoryMeasurer_.end())
        measured.memory = measureMemory(cache_.cacheInstanceBytes, budget_);
      LOOM_TRY(allgatherRecords(ranks_, measured, n_, deadline_, &results_));
    }
    return Status::ok();
  }

  // Measured, else cached, else default, per host and kind (and the network's candidate).
  LinkFigures resolve(LinkKind k, int host, FigureSource* source, int candidate = 0) const {
    const int slot = slotOf(k, candidate);
    for (const MeasurePair& p : pairs_)
      if (p.kind == k && p.host == host && results_[size_t(p.initiator)].measured[slot].known()) {
        *source = FigureSource::Measured;
        return results_[size_t(p.initiator)].measured[slot];
      }
    const LinkFigures& cached = records_[size_t(firstRank_[size_t(host)])].cached[slot];
    *source = cached.known() ? FigureSource::Cached : FigureSource::Default;
    return cached.known() ? cached : defaultFigures(k);
  }

  // description_ from the records and results, and where this host's figures came from.
  void describe() {
    for (int h = 0; h < hosts_; ++h) {
      const ProbeRecord& first = records_[size_t(firstRank_[size_t(h)])];
      HostDescription host;
      host.name = peer(firstRank_[size_t(h)]).hostname;
      // Hosts that share a machine (network namespaces of one box) share its cores and its
      // caches: the model names the machine, or it would count them once per host.
      host.cores = first.cores;
      if (first.machineRanks > hostRanks_[size_t(h)])
        host.machine =
            strprintf("%016llx", (unsigned long long)peer(firstRank_[size_t(h)]).machineId);
      host.privateCacheBytes = first.privateCacheBytes;
      host.cacheBytes = first.cacheBytes;
      host.numaNodes = first.numaNodes;
      const int measurer = memoryMeasurer_[size_t(h)];
      const bool memoryMeasured = measurer >= 0 && results_[size_t(measurer)].memory.known();
      host.memory = memoryMeasured ? results_[size_t(measurer)].memory : first.cachedMemory;
      // What the memory measurement's copies showed, where hwloc's claim was implausible.
      if (host.memory.cacheBytes > 0) host.cacheBytes = host.memory.cacheBytes;
      if (h == myHost_)
        memorySource_ = memoryMeasured            ? FigureSource::Measured
                        : host.memory.known()     ? FigureSource::Cached
                                                  : FigureSource::Default;
      FigureSource same, cross;
      host.sameNuma = resolve(LinkKind::SameNuma, h, &same);
      host.crossNuma = resolve(LinkKind::CrossNuma, h, &cross);
      if (h == myHost_) sources_[0] = same, sources_[1] = cross;
      description_.hosts.push_back(host);
    }
    description_.rankHost = setup_.hostOf;
    description_.rankNuma = numaOf_;
  }

  // The network's figures over each candidate; where every candidate has figures, the default
  // (the rule without figures) carries the links between hosts unless another moves an 8-byte
  // and a 1 MiB message in clearly less time; else the default. From the allgathered records
  // and results: the same on every rank.
  void chooseNetwork() {
    const std::vector<std::string>& names = networkTransports_;
    bool allKnown = true;
    std::vector<double> time;  // networkMessagesTime, per candidate
    std::string times;         // the same, for the log
    for (int c = 0; c < int(names.size()); ++c) {
      FigureSource source;
      networkFigures_.push_back(resolve(LinkKind::Network, 0, &source, c));
      networkSources_.push_back(source);
      allKnown = allKnown && source != FigureSource::Default;
      time.push_back(networkMessagesTime(networkFigures_.back()));
      times += strprintf("%s%s %.4g us (%s)", times.empty() ? "" : ", ", names[size_t(c)].c_str(),
                         time.back() * 1e6, figureSourceName(source));
    }
    auto named = std::find(names.begin(), names.end(), setup_.defaultNetworkTransport);
    int chosen = named == names.end() ? 0 : int(named - names.begin());
    networkChoice_.reason = setup_.defaultNetworkReason;
    if (names.size() > 1 && allKnown) {
      const int byRule = chosen;
      for (int c = 0; c < int(names.size()); ++c)
        if (time[size_t(c)] * 100 < time[size_t(chosen)] * (100 - kNetworkMarginPercent))
          chosen = c;
      networkChoice_.reason =
          strprintf("%s %d%% or more for an 8-byte and a 1 MiB message by the network link's "
                    "figures: %s",
                    chosen == byRule ? "not beaten by" : "the cheaper by", kNetworkMarginPercent,
                    times.c_str());
    }
    networkChoice_.transport = names[size_t(chosen)];
    description_.network = networkFigures_[size_t(chosen)];
    sources_[int(LinkKind::Network)] = networkSources_[size_t(chosen)];
  }

  // This host's figures (the links this communicator uses, with where each came from).
  LinkFigures shownFigures(int k) const {
    const HostDescription& host = description_.hosts[size_t(myHost_)];
    return k == 0 ? host.sameNuma : k == 1 ? host.crossNuma : description_.network;
  }

  void logFigures() const {
    const HostDescription& host = description_.hosts[size_t(myHost_)];
    for (int k = 0; k < kLinkKinds; ++k) {
      bool used = k == 0 || (k == 1 && host.numaNodes > 1) || (k == 2 && hosts_ > 1);
      const LinkFigures shown = shownFigures(k);
      if (used)
        LOOM_INFO("INIT",
                  "topology: %s link (%s) %.3g us (%.3g us more between ranks of one core), %s, "
                  "%.3g us per further message, %.0f bytes at once after idling (%s)",
                  linkKindName(LinkKind(k)),
                  (k == 2 ? networkChoice_.transport : transport_).c_str(),
                  shown.latency * 1e6, shown.sharedCore * 1e6, rateText(shown.bandwidth).c_str(),
                  shown.perMessage * 1e6, shown.burstBytes, figureSourceName(sources_[k]));
    }
    if (const MemoryFigures& m = host.memory; m.known())
      LOOM_INFO("INIT",
                "topology: one core copies %s in its cache, %s beyond it; a read through the "
                "kernel costs %.3g copies and %.3g us (%s)",
                rateText(m.cacheBandwidth).c_str(), rateText(m.memBandwidth).c_str(),
                m.kernelReadCopies, m.kernelReadOverhead * 1e6, figureSourceName(memorySource_));
  }

  // The first rank of each host files what is new for its host.
  void fileNewFigures() {
    bool fresh = probed_;
    if (memorySource_ == FigureSource::Measured) {
      cache_.memory = description_.hosts[size_t(myHost_)].memory;
      fresh = true;
    }
    for (int k = 0; k < kLinkKinds - 1; ++k) {
      if (sources_[k] != FigureSource::Measured) continue;
      cache_.links[cacheKey(LinkKind(k), myHost_, 0)] = shownFigures(k);
      fresh = true;
    }
    for (size_t c = 0; c < networkSources_.size() && myHost_ <= 1; ++c) {
      if (networkSources_[c] != FigureSource::Measured) continue;
      cache_.links[cacheKey(LinkKind::Network, myHost_, int(c))] = networkFigures_[c];
      fresh = true;
    }
    if (fresh && me_ == firstRank_[size_t(myHost_)] && !options_.cacheDir.empty()) {
      // Merge with what other communicators filed since we read the file.
      HostCache latest;
      if (loadHostCache(options_.cacheDir, signature_, &latest).isOk())
        for (const auto& [key, figures] : latest.links) cache_.links.emplace(key, figures);
      if (Status st = saveHostCache(options_.cacheDir, cache_); !st.isOk())
        LOOM_WARN("INIT", "topology: cannot cache this host's figures: %s", st.message().c_str());
    }
  }

  const DiscoverySetup& setup_;
  const DiscoveryOptions& options_;
  RankExchange& ranks_;
  const Deadline& deadline_;
  const int n_, me_, hosts_, myHost_;
  const double budget_;           // s, each measurement's (LOOM_TOPO_MEASURE_MS)
  const std::string transport_;   // within a host: shm, tcp or ucx
  const std::vector<std::string> networkTransports_;  // between hosts: the candidates
  std::vector<int32_t> firstRank_;  // of each host
  std::vector<int> hostRanks_;      // ranks on each host
  std::string signature_;           // this host's (hostSignature)
  HostCache cache_;                 // this host's entry, probed where it had none
  bool probed_ = false;             // the probe ran: the entry is new
  bool sharedCore_ = false;         // see readThisHost
  std::vector<ProbeRecord> records_;  // every rank's, after the first allgather
  std::vector<int32_t> numaOf_;       // every rank's NUMA node (ProbeRecord::numa)
  std::vector<MeasurePair> pairs_;
  std::vector<int> memoryMeasurer_;   // per host, the rank that measures its memory (-1: none)
  std::vector<MeasureRecord> results_;  // every rank's measurements
  CommDescription description_;
  FigureSource sources_[kLinkKinds] = {};  // of this rank's host's figures
  std::vector<bool> networkWanted_;           // per candidate: whether it is measured
  std::vector<LinkFigures> networkFigures_;   // per candidate (chooseNetwork)
  std::vector<FigureSource> networkSources_;
  NetworkChoice networkChoice_;
  FigureSource memorySource_ = FigureSource::Default;
};

}  // namespace

double networkMessagesTime(const LinkFigures& f) {
  return 2 * f.latency + (8.0 + double(1 << 20)) / f.bandwidth;
}

Status discoverCommTopology(const DiscoverySetup& setup, const DiscoveryOptions& options,
                            RankExchange& ranks, const Deadline& deadline, Topology* out,
                            NetworkChoice* network) {
  const auto start = Clock::now();
  std::string how;
  *network = {setup.defaultNetworkTransport, setup.defaultNetworkReason};
  if (!options.file.empty()) {
    LOOM_TRY(loadModelFile(setup, options.file, ranks, deadline, out));
    how = "loaded from " + options.file;
  } else {
    Detector detector(setup, options, ranks, deadline);
    LOOM_TRY(detector.run(out));
    if (setup.hostCount > 1) *network = detector.networkChoice();
    how = "detected";
  }
  if (!options.dump.empty() && setup.comm->rank == 0) {
    if (Status st = saveTopology(*out, options.dump); !st.isOk())
      LOOM_WARN("INIT", "LOOM_TOPO_DUMP: %s", st.message().c_str());
  }
  LOOM_INFO("INIT", "topology %s: %d host(s), %zu rank(s), signature %s, in %.1f ms", how.c_str(),
            out->hostCount(), out->ranks.size(), topologySignature(*out).c_str(),
            secondsSince(start) * 1e3);
  return Status::ok();
}

}  // namespace loom::topology
