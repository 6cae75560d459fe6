// The communicator: this rank's view of a group of ranks, its transports and connections,
// its plan cache, and its error state. The C API (comm/api.cc) is a thin layer over it.
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <string>
#include <vector>

#include "collectives/builders.h"
#include "collectives/executor.h"
#include "comm/bootstrap.h"
#include "comm/options.h"
#include "base/dtype.h"
#include "base/status.h"
#include "topology/topology.h"
#include "transports/transport.h"
#include "tuner/autotune.h"
#include "tuner/tuner.h"

namespace loom {

// One collective or point-to-point call, as the API layer describes it to the communicator.
struct CallDesc {
  collectives::CollArgs args;
  const void* input = nullptr;
  void* output = nullptr;
  loomDataType_t dtype = loomFloat32;
  loomRedOp_t op = loomSum;
  // Bytes of input and output (to detect in-place calls and aliasing).
  size_t inputBytes = 0, outputBytes = 0;
};

// Whether two byte ranges share a byte (empty ranges share none).
bool rangesOverlap(const void* a, size_t an, const void* b, size_t bn);

struct P2PCall {
  collectives::P2POp op;
  void* buffer;  // const for sends
};

class Comm final : public collectives::ExecHost {
 public:
  static Status create(int nranks, const loomUniqueId& id, int rank, const loomConfig_t* config,
                       std::unique_ptr<Comm>* out);
  ~Comm() override;

  int rank() const { return ctx_.rank; }
  int nranks() const { return ctx_.nranks; }
  const transports::PeerInfo& peer(int r) const { return ctx_.peers[r]; }
  Bootstrap& bootstrap() { return boot_; }
  int64_t timeoutMs() const { return ctx_.timeoutMs; }
  // Identical on every rank (docs/TOPOLOGY.md, "Discovery at init").
  const topology::Topology& topology() const { return topo_; }

  // Runs one collective to completion (host buffers, in this thread); call.args takes the
  // chosen algorithm's parameters. By reference: a small call's whole budget is ~0.1 us.
  Status runCollective(CallDesc& call);
  // Where the API describes each call before running it: one per communicator, refilled, so
  // that a call neither constructs nor destroys its vectors (hostOf, alltoallv's counts) and
  // keeps their storage. A communicator runs one call at a time, as NCCL's does.
  CallDesc& apiCall() { return apiCall_; }
  // Runs a group of sends and receives together.
  Status runP2P(const std::vector<P2PCall>& calls);

  // Error state: after a failure the communicator refuses further work with the first error.
  Status usable() const {
    if (failed_.isOk()) return Status::ok();
    return errorf(failed_.code(),
                  "the communicator failed earlier and can only be destroyed or aborted: %s",
                  failed_.message().c_str());
  }
  void fail(const Status& st);  // records, and tells the peers through the bootstrap
  loomResult_t asyncError();
  void setLastError(const std::string& msg);
  const char* lastError();
  // The algorithm and parameters of the last collective (tuner::describe), "" before the first.
  const char* lastAlgorithm();

  // Tells the peers this rank is gone on purpose (destroy) or not (abort).
  void leave();
  void abortPeers(const std::string& reason);

  // ExecHost.
  Status connection(int peer, int lane, transports::Connection** out,
                    transports::Transport** transport) override;
  Status pollAsyncErrors() override;

 private:
  Comm() = default;
  Status init(int nranks, const loomUniqueId& id, int rank, const loomConfig_t* config);
  // Fills topo_ (comm/comm_topology.cc): LOOM_TOPO_FILE, or the probe, the per-host cache and
  // a short measurement, exchanged so that every rank builds the same model.
  Status discoverTopology(const Deadline& deadline);
  Status spreadOverCores(const cpu_set_t& machineCpus, int usableCores);
  Status detectTopology(const Deadline& deadline);  // the part without LOOM_TOPO_FILE
  // The transport a connection to `peer` uses (LOOM_TRANSPORT, else shm within a host).
  transports::Transport* transportFor(int peer) const;
  // LOOM_TCP_PACING=-1: paces the TCP connections to each peer at the slowest network link of
  // topo_ on the way there (topology::slowestNetworkLink): a flow faster than that only fills
  // the queue in front of the link, and a short queue overflows (docs/CALIBRATION.md, netns).
  void setTcpPacing();
  // Builds tuner_ from the rules and mode read at init, the fixed parameters and topo_; logs
  // its decision table (INFO, rank 0).
  void initTuner(tuner::TunerConfig config);
  // The algorithm for a call: LOOM_ALGO's, else the tuner's (or autotune's). Applies the
  // decision's parameters (lanes, torus dims, fan-in) to call->args, so that the plan and its
  // cache key see them.
  // *out: lastDecision_'s, or adjustedDecision_ where this call's differs from it.
  Status chooseBuilder(CallDesc* call, const tuner::Decision** out);
  // Whether every rank's Input and Output of this call are from loomMemAlloc, as the ranks of
  // the host agree: each votes, and a barrier of theirs (a plan of one Barrier step, run like
  // any call) carries the votes to all. Asked only where the answer changes the model's or
  // autotune's choice (tuner::Decision::whenMapped): all ranks then ask, in the same calls.
  // `mapped`: the algorithm the mapped choice would run.
  Status agreeBuffersMapped(const CallDesc& call, const collectives::Builder& mapped, bool* all);
  // Whether a call chooseBuilder decides with `decided` (the tuner's) asks that.
  bool asksBuffersMapped(const collectives::CollArgs& a, const tuner::Decision& decided) const {
    return forcedBuilders_[size_t(a.coll)] == nullptr &&
           (decided.source == tuner::Source::Model || decided.source == tuner::Source::Autotune) &&
           decided.whenMapped.builder != nullptr && hostCount_ == 1;
  }
  // Runs a call whose args carry the decision's parameters: the plan (cached) and its execution.
  Status runDecided(const CallDesc& call, const tuner::Decision& decision);
  // What a call runs once its algorithm is chosen (resolve), and its run (runResolved).
  struct Resolved {
    const collectives::PreparedPlan* plan = nullptr;
    const void* input = nullptr;  // an in-place alltoall's: the copy of its input
    tuner::Decision decision;
    bool copiesInput = false;    // input is that copy, refreshed by resolve on every call
    bool buffersMapped = false;  // CollArgs::buffersMapped: as the ranks agreed for the call
  };
  // The decision's prepared plan for the call (built once per PlanKey), with the call's buffers
  // laid out as the plan expects them (in-place aliasing, the alltoall's copy).
  Status resolve(const CallDesc& call, const tuner::Decision& decision, Resolved* out);
  Status runResolved(const CallDesc& call, const Resolved& r);
  // LOOM_AUTOTUNE (comm/comm_autotune.cc). Init reads the cache file, and the ranks agree on
  // it; a call of a bucket without an entry measures the candidates first. Replaces *out with
  // the measured winner when the call is one autotune measures.
  Status initAutotune(const Deadline& deadline);
  Status autotuneDecision(const CallDesc& call, tuner::Decision* out);
  // Runs each candidate once, then in rounds (tuner::autotuneSchedule: LOOM_AUTOTUNE_RUNS or
  // more for small calls, a batch of calls per turn for the smallest) on scratch buffers shaped
  // like the call's (a bounded cost: candidates x rounds x batch calls of that size, about 5 ms
  // of them where small, each turn after an untimed lead call, a single timed call also after
  // syncRanks; one bootstrap allgather).
  Status measureBucket(const CallDesc& call, tuner::AutotuneEntry* out);
  // Brings the ranks together before a timed call of measureBucket: a one-byte allreduce as the
  // model runs it (not through autotune, which is what is measuring).
  Status syncRanks();
  // What every call's args take from the communicator before its algorithm is chosen.
  void completeArgs(CallDesc* call) const {
    collectives::CollArgs& a = call->args;
    a.settings() = settings_;
    if (hostCount_ > 1) a.hostOf = hostOf_;  // empty means one host: no copy per call
    a.elemSize = uint32_t(dtypeSize(call->dtype));
    a.buffersMapped = false;  // until the ranks agree otherwise (chooseBuilder)
  }
  // Runs a prepared plan over the given buffers; a failure marks the communicator failed.
  // A plan that runs ahead of the call it belongs to (the buffer agreement: aheadOfCall) is
  // reported under that call's collective and number, which the call then keeps.
  Status execute(const collectives::PreparedPlan& plan, std::span<void* const> buffers,
                 loomDataType_t dtype, loomRedOp_t op, const char* collective,
                 uint64_t inputBytes = 0, uint64_t outputBytes = 0, bool aheadOfCall = false);
  // Points buffers[kShared] at this call's half of the arena, mapping it first if need be.
  Status mapShared(const collectives::PreparedPlan& plan, size_t elemSize,
                   std::span<void*> buffers);

  // What identifies a prepared plan: everything a builder reads, plus the aliasing.
  struct PlanKey {
    collectives::Collective coll;
    const collectives::Builder* builder;
    uint64_t count;
    int root, lanes, torusX, torusY, fanIn;
    uint32_t elemSize;  // the direct allreduce sizes its arena slots in elements
    int aliasMode;  // 0: none, 1: input inside output, 2: output inside input
    uint64_t aliasOffset;
    // Alltoallv: counts and displacements; a send/receive group: (peer, kind, bytes) per op.
    std::vector<uint64_t> counts;
    bool operator==(const PlanKey&) const = default;
    // Refills the key in place, no alias and no counts: its counts keep their storage, so a
    // loop of calls allocates nothing (a fresh key per call cost a small call ~3%).
    void reset(collectives::Collective c, const collectives::Builder* b, uint64_t n, int r,
               const collectives::CallSettings& s, uint32_t es) {
      coll = c, builder = b, count = n, root = r, lanes = s.lanes, torusX = s.torusX,
      torusY = s.torusY, fanIn = s.fanIn, elemSize = es, aliasMode = 0, aliasOffset = 0;
      counts.clear();
    }
  };
  struct PlanKeyHash {
    size_t operator()(const PlanKey& k) const {
      size_t h = std::hash<uint64_t>()(k.count) ^ (size_t(k.coll) << 56) ^
                 std::hash<const void*>()(k.builder) ^ (size_t(k.root) << 40) ^
                 (size_t(k.aliasMode) << 60) ^ std::hash<uint64_t>()(k.aliasOffset << 1) ^
                 (size_t(k.lanes) << 48) ^ (size_t(k.fanIn) << 24) ^ (size_t(k.torusX) << 32);
      for (uint64_t c : k.counts) h = h * 1099511628211ull ^ c;
      return h;
    }
  };
  // The prepared plan of key from planCache_, built (build() returns the RankPlan) and prepared
  // with aliases the first time.
  template <typename Build>
  const collectives::PreparedPlan& cachedPlan(const PlanKey& key,
                                              std::span<const collectives::BufferAlias> aliases,
                                              const Build& build);

  transports::CommContext ctx_;
  Bootstrap boot_;
  std::unique_ptr<transports::Transport> shm_, tcp_;
  std::string transportMode_;  // auto, shm, tcp
  ForcedBuilders forcedBuilders_{};  // LOOM_ALGO: the builder forced per collective, or null
  // What every call's CollArgs start from (tuner::callSettings): lanes, torus dims and fan-in
  // the user fixed (else 1 / derived / 1), the incast lead, the direct arena's bytes per call.
  collectives::CallSettings settings_;
  std::vector<int32_t> hostOf_;  // host index of every rank (CollArgs::hostOf)
  uint64_t directBytes_ = 0;  // LOOM_SHM_DIRECT_BYTES: the direct allreduce's arena
  std::string cacheDir_;      // topology and autotune caches (CommOptions::cacheDir); "": none
  std::unique_ptr<transports::ShmArena> arena_;  // mapped at the first call that uses it
  int machineRanks_ = 0;     // ranks on this rank's machine (PeerInfo::machineId), itself too
  int64_t spinCount_ = 2000;  // executor waiting, see LOOM_SPIN_COUNT / LOOM_YIELD_USEC
  // LOOM_BIND: the thread this communicator bound to one CPU, the CPU, and the thread's CPUs
  // before (restored when the communicator goes); boundTid_ 0: none bound.
  pid_t boundTid_ = 0;
  int boundCpu_ = -1;
  cpu_set_t unboundCpus_ = {};
  uint64_t yieldNs_ = 2000000;
  // Connections by (lane, peer).
  std::vector<std::vector<std::unique_ptr<transports::Connection>>> conns_;
  std::vector<std::vector<transports::Transport*>> connTransport_;
  std::unordered_map<PlanKey, collectives::PreparedPlan, PlanKeyHash> planCache_;
  PlanKey lastPlanKey_{};  // the last call's, and its entry of planCache_ (null: none)
  const collectives::PreparedPlan* lastPlan_ = nullptr;
  // The key of the call being run (runDecided; a send/receive group's: coll SendRecv, its
  // operations in counts), and a group's buffers.
  PlanKey callKey_{};
  CallDesc apiCall_;
  std::vector<void*> p2pBuffers_;
  collectives::ExecWorkspace workspace_;
  int hostCount_ = 1;
  topology::Topology topo_;  // the communicator's topology (discoverTopology)
  tuner::Tuner tuner_;       // picks algorithm and parameters per call (initTuner)
  // The last call's decision (the tuner's, or autotune's), before the buffer agreement: what
  // decides depends on the collective and the call's bytes only, and a loop of like calls then
  // skips the tuner's lookups (~10% of a 2-rank, 8-byte allreduce).
  struct LastDecision {
    bool valid = false;
    collectives::Collective coll{};
    uint64_t count = 0;
    uint32_t elemSize = 0;
    tuner::Decision decision;
  } lastDecision_;
  // The last call that runCollective resolved, whole: a loop that repeats a call (buffers, count,
  // dtype, op and root alike) runs it again without choosing and resolving it again (~27% of
  // the instructions of a 2-rank 8-byte allreduce). Not kept for calls that ask the
  // ranks whether their buffers are mapped (each such call must ask or count a skipped ask) or
  // that copy their input; cleared with the plan cache it points into.
  struct RepeatCall {
    bool valid = false;
    collectives::Collective coll{};
    uint64_t count = 0;
    int root = 0;
    loomDataType_t dtype{};
    loomRedOp_t op{};
    const void* input = nullptr;
    void* output = nullptr;
    size_t inputBytes = 0, outputBytes = 0;
    Resolved resolved;
    bool matches(const CallDesc& c) const {
      return valid && c.input == input && c.output == output && c.args.count == count &&
             c.args.coll == coll && c.dtype == dtype && c.op == op && c.args.root == root &&
             c.inputBytes == inputBytes && c.outputBytes == outputBytes;
    }
  } repeat_;
  // A call's decision where it is not lastDecision_'s as is: forced by LOOM_ALGO, or the
  // choice for buffers every rank has from loomMemAlloc (chooseBuilder).
  tuner::Decision adjustedDecision_;
  // LOOM_AUTOTUNE's measured decisions; null when it is off.
  std::unique_ptr<tuner::AutotuneCache> autotune_;
  std::string autotunePath_;  // its file; "" when there is no cache directory
  int autotuneCandidates_ = 3, autotuneRuns_ = 3;
  uint64_t autotuneMaxBytes_ = 0;
  std::vector<char> scratch_;
  std::vector<char> inputCopy_;  // an in-place alltoall's input, see runDecided
  collectives::PreparedPlan agreementPlan_;  // agreeBuffersMapped's barrier, built at first use
  uint64_t agreements_ = 0;                  // its rounds so far (ShmArena::vote)
  static constexpr int kMaxNotAllAnswers = 6;  // skips at most 2^6 - 1 asks in a row
  int notAllAnswers_ = 0;  // "not every rank's buffers mapped" answers in a row
  int asksToSkip_ = 0;     // asks still to be skipped after them (agreeBuffersMapped)
  uint64_t sequence_ = 0;
  Status failed_;
  std::atomic<int> asyncError_{loomSuccess};
  std::mutex errorMutex_;
  std::string lastError_;
  // What the last collective ran: kept as the decision's parts, described only when asked.
  tuner::Candidate lastChoice_;
  std::string lastAlgorithmShown_;
  std::string lastErrorShown_;
};

}  // namespace loom
