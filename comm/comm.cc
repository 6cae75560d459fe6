#include "comm/comm.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <array>
#include <cstring>
#include <fstream>

#include "base/reduce_kernels.h"
#include "base/dtype.h"
#include "base/log.h"
#include "base/params.h"
#include "comm/call_check.h"
#include "topology/discover.h"
#include "transports/shm/shm_arena.h"
#include "transports/shm/shm_util.h"
#include "transports/shm/user_memory.h"

namespace loom {
namespace {

using collectives::Collective;

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

bool rangesOverlap(const void* a, size_t an, const void* b, size_t bn) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

namespace {

// Whether builder b runs this call on a copy of its input (Comm::inputCopy_): an alltoall
// whose buffers overlap, unless b exchanges in place and they are the very same buffer.
bool runsOnInputCopy(const CallDesc& call, const collectives::Builder& b) {
  const bool exchange = call.args.coll == collectives::Collective::AlltoAll ||
                        call.args.coll == collectives::Collective::AlltoAllv;
  const bool sameBuffer = call.input == call.output && call.inputBytes == call.outputBytes;
  return exchange && !(b.alltoallInPlace && sameBuffer) &&
         rangesOverlap(call.input, call.inputBytes, call.output, call.outputBytes);
}

}  // namespace

Status Comm::create(int nranks, const loomUniqueId& id, int rank, const loomConfig_t* config,
                    std::unique_ptr<Comm>* out) {
  std::unique_ptr<Comm> comm(new Comm());
  Status st = comm->init(nranks, id, rank, config);
  if (!st.isOk()) return st;
  *out = std::move(comm);
  return Status::ok();
}

Status Comm::init(int nranks, const loomUniqueId& id, int rank, const loomConfig_t* config) {
  log::setThreadRank(rank);
  ctx_.rank = rank;
  ctx_.nranks = nranks;
  CommOptions options;  // a bad setting fails here, before any rank connects
  LOOM_TRY(readCommOptions(config, &options));
  useOptions(options);
  Deadline deadline(ctx_.timeoutMs);
  transports::PeerInfo me;
  LOOM_TRY(exchangePeers(id, deadline, options, &me));
  recorder_.configure(options.flightRecorder, ctx_.commHash, rank, nranks);
  numberHosts();
  LOOM_TRY(exchangeNetworkCandidates(options, deadline));
  cpu_set_t machineCpus;
  shareMachine(me, &machineCpus);
  LOOM_TRY(discoverTopology(options.discovery, deadline));
  if (connections_.tcpPacedPerPeer()) connections_.paceTcp(topo_);
  settings_ = tuner::callSettings(options.tuning.fixed, options.tuning.call, topo_);
  // After the measurement, whose pairs of ranks share one core on purpose
  // (topology/link_measure.h).
  if (options.bindToCores) LOOM_TRY(spreadOverCores(machineCpus, machineCores_));
  initTuner(std::move(options.tuning));
  LOOM_TRY(initAutotune(options, deadline));
  int localRanks = 0;
  for (const auto& p : ctx_.peers) localRanks += p.hostId == me.hostId;
  LOOM_INFO("INIT",
            "rank %d of %d on %s (pid %d): %d host(s), %d local rank(s), %d on this machine's "
            "%d core(s), transport %s, lanes %d, spin %lld, incast lead %llu B",
            rank, nranks, me.hostname, me.pid, hostCount_, localRanks, machineRanks_,
            machineCores_, transportMode_.c_str(), settings_.lanes, (long long)wait_.spinCount,
            (unsigned long long)settings_.fanInLeadBytes);
  return Status::ok();
}

void Comm::useOptions(const CommOptions& options) {
  ctx_.timeoutMs = options.timeoutMs;
  transportMode_ = options.transport;
  forcedBuilders_ = options.forcedBuilders;
  directBytes_ = options.directBytes;
  wait_ = options.wait;
  checkCalls_ = options.checkCalls;
}

Status Comm::exchangePeers(const loomUniqueId& id, const Deadline& deadline,
                           const CommOptions& options, transports::PeerInfo* me) {
  LOOM_TRY(boot_.connect(id, rank(), nranks(), deadline));
  UniqueIdData idData;
  net::Address rootAddr;
  LOOM_TRY(decodeUniqueId(id, &idData, &rootAddr));
  memcpy(ctx_.secret, idData.secret, 16);
  ctx_.commHash = fnv1a(idData.secret, 16, fnv1a(idData.addr, idData.addrLen));

  me->rank = rank();
  transports::describeThisProcess(me);
  std::string hostname;
  me->hostId = topology::hostIdentity(&hostname);
  me->machineId = topology::machineIdentity();
  if (sched_getaffinity(0, sizeof(me->cpus), &me->cpus) != 0) CPU_SET(sched_getcpu(), &me->cpus);
  snprintf(me->hostname, sizeof(me->hostname), "%s", hostname.c_str());
  std::string ucxAddress;
  LOOM_TRY(connections_.open(&ctx_, transportMode_, options.shm, options.tcp, options.ucx, me,
                             &ucxAddress));
  // LOOM_CHECK travels with the record: a rank that checks waits for every rank in every call,
  // so the ranks must agree on it. UCX's worker address (of variable length) ends it.
  std::string record(reinterpret_cast<const char*>(me), sizeof(*me));
  record += char(checkCalls_);
  record += ucxAddress;
  std::vector<std::string> all;
  LOOM_TRY(boot_.allgather(record, &all, deadline));
  ctx_.peers.resize(nranks());
  ctx_.ucxAddresses.resize(nranks());
  std::vector<int> checking;
  for (int r = 0; r < nranks(); ++r) {
    if (all[r].size() < sizeof(transports::PeerInfo) + 1)
      return errorf(loomInternalError, "bootstrap: rank %d sent a malformed peer record", r);
    memcpy(&ctx_.peers[r], all[r].data(), sizeof(transports::PeerInfo));
    if (all[r][sizeof(transports::PeerInfo)] != 0) checking.push_back(r);
    ctx_.ucxAddresses[r] = all[r].substr(sizeof(transports::PeerInfo) + 1);
    if (transportMode_ == "shm" && ctx_.peers[r].hostId != me->hostId)
      return errorf(loomInvalidArgument,
                    "LOOM_TRANSPORT=shm but rank %d is on another host (%s)", r,
                    ctx_.peers[r].hostname);
  }
  if (!checking.empty() && int(checking.size()) != nranks())
    return errorf(loomInvalidUsage, "LOOM_CHECK=1 on rank%s %s only: set it alike on every rank",
                  checking.size() == 1 ? "" : "s", rankRanges(checking).c_str());
  peerChecks_.assign(checkCalls_ ? size_t(nranks()) : 0, 0);
  return Status::ok();
}

void Comm::numberHosts() {
  std::vector<uint64_t> hostIds;
  for (const auto& p : ctx_.peers) {
    auto pos = std::find(hostIds.begin(), hostIds.end(), p.hostId);
    hostOf_.push_back(int32_t(pos - hostIds.begin()));
    if (pos == hostIds.end()) hostIds.push_back(p.hostId);
  }
  hostCount_ = int(hostIds.size());
}

Status Comm::exchangeNetworkCandidates(const CommOptions& options, const Deadline& deadline) {
  if (transportMode_ != "auto" || hostCount_ < 2) return Status::ok();
  std::vector<std::string> all;
  LOOM_TRY(boot_.allgather(connections_.openNetworkCandidate(options.ucx, hostCount_), &all,
                           deadline));
  return connections_.learnNetworkCandidates(all, &ctx_.ucxAddresses);
}

void Comm::shareMachine(const transports::PeerInfo& me, cpu_set_t* machineCpus) {
  // Ranks in other network namespaces (or containers) of the same kernel count too: they are
  // other hosts to the plans, but they share these cores. The usable cores are all those the
  // machine's ranks may run on, together: ranks bound to a core each (mpirun --bind-to core)
  // have one each, and spin.
  CPU_ZERO(machineCpus);
  for (const auto& p : ctx_.peers) {
    if (p.machineId != me.machineId) continue;
    ++machineRanks_;
    CPU_OR(machineCpus, machineCpus, &p.cpus);
  }
  machineCores_ = std::max(1, CPU_COUNT(machineCpus));
  wait_.chooseSpin(machineRanks_, machineCores_);
}

// Where the machine's ranks outnumber its cores and nothing bound them, the scheduler may leave
// three ranks on one core and one on another, and every call then waits for the crowded core to
// take turns among three, which makes a small call's time depend on where the scheduler put
// the ranks: about 40% slower in such runs, and which one a run got was chance. So each
// rank binds its thread to one CPU, the machine's ranks (by rank order) spread evenly (unless
// LOOM_BIND=none).
Status Comm::spreadOverCores(const cpu_set_t& machineCpus, int usableCores) {
  const transports::PeerInfo& me = ctx_.peers[size_t(rank())];
  if (machineRanks_ <= usableCores) return Status::ok();
  int index = 0;
  for (int r = 0; r < nranks(); ++r) {
    const transports::PeerInfo& p = ctx_.peers[size_t(r)];
    if (p.machineId != me.machineId) continue;
    if (!CPU_EQUAL(&p.cpus, &me.cpus)) return Status::ok();  // someone chose where ranks run
    index += r < rank();
  }
  int cpu = -1;
  for (int c = 0, seen = 0; c < CPU_SETSIZE && cpu < 0; ++c)
    if (CPU_ISSET(c, &machineCpus) && seen++ == index % usableCores) cpu = c;
  if (!binding_.bind(cpu)) {
    LOOM_WARN("INIT", "rank %d: cannot bind to CPU %d (%s); left unbound", rank(), cpu,
              strerror(errno));
    return Status::ok();
  }
  LOOM_INFO("INIT", "rank %d: %d ranks on this machine's %d cores: bound to CPU %d (LOOM_BIND)",
            rank(), machineRanks_, usableCores, cpu);
  return Status::ok();
}

// The parts go in reverse order of declaration: the arena before the connections, they before
// the bootstrap.
Comm::~Comm() = default;

Status Comm::connection(int peer, int lane, transports::Connection** out,
                        transports::Transport** transport) {
  return connections_.get(peer, lane, timeoutMs(), out, transport);
}

Status Comm::pollAsyncErrors() {
  if (errors_.revoked()) return errors_.revokedStatus();
  return boot_.pollAbort();
}

// A send/receive group has no number among the collectives (its calls concern only its
// peers), and is not compared.
void Comm::reportWait(const transports::CallStamp& mine) {
  if (stampedCall_ == nullptr) return;
  const uint64_t call[2] = {mine.word, mine.count};
  boot_.reportCall(collectiveCalls_, call);
}

bool Comm::callDiffers(int* rank, transports::CallStamp* theirs) {
  uint64_t call[2];
  if (stampedCall_ == nullptr || !boot_.callDiffers(collectiveCalls_, rank, call)) return false;
  *theirs = {call[0], call[1]};
  return true;
}

void Comm::revoke(const std::string& reason) {
  if (errors_.revoked()) return;
  // After a failure the peers have been told its cause (fail); a revoke now, typically the
  // abort that follows, must not replace that cause in what they report.
  const bool failedBefore = errors_.code() != loomSuccess;
  errors_.revoke(reason);
  if (failedBefore) return;
  if (transports::ShmArena* arena = arenaToRevoke_.load(std::memory_order_acquire))
    arena->revoke(rank());
  boot_.sendAbort("the communicator was revoked: " + reason);
}

void Comm::fail(const Status& st, bool told) {
  if (!errors_.record(st)) return;
  LOOM_WARN("COLL", "%s", st.message().c_str());
  recorder_.noteFailure(st.message());
  if (recorder_.enabled() && recorder_.dumpsOn(kDumpOnError)) dumpTraceLogged("error");
  // An abort relayed from a peer, or this rank's revoke, is already known to everyone;
  // anything else, tell them.
  if (!told && st.message().find("aborted by a peer") == std::string::npos && !errors_.revoked())
    boot_.sendAbort(st.message());
}

loomResult_t Comm::asyncError() {
  if (!errors_.failed()) {
    Status st = boot_.pollAbort();
    if (!st.isOk()) fail(st);
  }
  return errors_.code();
}

const char* Comm::lastAlgorithm() {
  lastAlgorithmShown_ = lastChoice_.builder == nullptr ? "" : tuner::describe(lastChoice_);
  return lastAlgorithmShown_.c_str();
}

void Comm::abort(const std::string& reason) {
  if (!errors_.revoked() && recorder_.enabled() && recorder_.dumpsOn(kDumpOnAbort))
    dumpTraceLogged("abort");
  revoke(reason);
}

void Comm::dumpTraceLogged(const char* reason) const {
  std::string written;
  Status st = dumpTrace(nullptr, reason, &written);
  if (st.isOk()) LOOM_WARN("COLL", "rank %d: flight recorder written to %s (%s)", rank(),
                           written.c_str(), reason);
  else LOOM_WARN("COLL", "rank %d: %s", rank(), st.message().c_str());
}

void Comm::leave() {
  if (arena_) arena_->leave();
  // The root in this process waits for the others up to LOOM_TIMEOUT_MS; after a failure, which
  // ends their calls too, only as long as a call would: a rank cut off from the network
  // neither leaves nor is seen to die.
  const bool failed = errors_.code() != loomSuccess || errors_.revoked();
  boot_.leave(failed ? timeoutMs() : params::getInt("LOOM_TIMEOUT_MS"));
}

void Comm::abortPeers(const std::string& reason) { boot_.sendAbort(reason); }

void Comm::initTuner(tuner::TunerConfig config) {
  tuner_ = tuner::Tuner(topo_, std::move(config));
  if (rank() != 0 || !log::enabled(log::Level::Info, "TUNE")) return;
  // The table for float32 calls of every nccl-tests size, as this communicator would run them.
  collectives::CollArgs base;
  base.settings() = settings_;
  base.nranks = nranks();
  if (hostCount_ > 1) base.hostOf = hostOf_;
  const auto rows =
      tuner::decisionTable(tuner_, base, tuner::tabledCollectives(), 8, uint64_t(1) << 30);
  const std::string& off = tuner_.modelOff();
  LOOM_INFO("TUNE", "decision table (%s%s%s):", off.empty() ? "cost model" : "model off: ",
            off.c_str(), tuner_.config().rules.empty() ? "" : ", LOOM_TUNE rules first");
  for (const std::string& line : tuner::summarize(rows)) LOOM_INFO("TUNE", "  %s", line.c_str());
}

void Comm::completeArgs(CallDesc* call) const {
  collectives::CollArgs& a = call->args;
  a.settings() = settings_;
  if (hostCount_ > 1) a.hostOf = hostOf_;  // empty means one host: no copy per call
  a.elemSize = uint32_t(dtypeSize(call->dtype));
  call->buffersMapped = false;  // until the ranks agree otherwise (chooseBuilder)
}

bool Comm::asksBuffersMapped(const collectives::CollArgs& a,
                             const tuner::Decision& decided) const {
  return forcedBuilders_[size_t(a.coll)] == nullptr &&
         (decided.source == tuner::Source::Model || decided.source == tuner::Source::Autotune) &&
         decided.whenMapped.builder != nullptr && hostCount_ == 1;
}

Status Comm::chooseBuilder(CallDesc* call, const tuner::Decision** out) {
  collectives::CollArgs* args = &call->args;
  if (const collectives::Builder* b = forcedBuilders_[size_t(args->coll)]) {
    std::string why = b->refuse ? b->refuse(*args) : std::string();
    if (!why.empty())
      return errorf(loomInvalidArgument, "%s=%s (forced by LOOM_ALGO) cannot serve this call: %s",
                    collectives::collectiveName(args->coll), b->name, why.c_str());
    // The parameters shown are those the call runs with (LOOM_LANES, ...: already in args),
    // so that loomCommGetLastAlgorithm tells a forced ring on 2 lanes from one on 1.
    adjustedDecision_ =
        tuner::Decision{{b, tuner_.config().fixed, 0}, tuner::Source::Forced, 0, {}};
    *out = &adjustedDecision_;
    return Status::ok();
  }
  const tuner::Decision* last = memo_.decision(*args);
  if (last == nullptr) {
    tuner::Decision decided;
    LOOM_TRY(tuner_.decide(*args, &decided));
    // Measured decisions beat the model and the built-in table, not the user's rules.
    if (autotune_ && decided.source != tuner::Source::Rule)
      LOOM_TRY(autotuneDecision(*call, &decided));
    last = &memo_.rememberDecision(*args, decided);
  }
  *out = last;
  if (asksBuffersMapped(*args, *last)) {
    LOOM_TRY(agreeBuffersMapped(*call, *last->whenMapped.builder, &call->buffersMapped));
    if (call->buffersMapped) {
      adjustedDecision_ = *last;
      adjustedDecision_.choice = last->whenMapped;
      *out = &adjustedDecision_;
    }
  }
  tuner::applyParams((*out)->choice.params, args);
  return Status::ok();
}

Status Comm::agreeBuffersMapped(const CallDesc& call, const collectives::Builder& mapped,
                                bool* all) {
  // After answers of "not all", some asks are skipped (BufferAgreement).
  if (agreement_.skipAsk()) {
    *all = false;
    return Status::ok();
  }
  // A call that runs on a heap copy of its input does not read the user's buffer.
  const bool mine = transports::findUserMemory(call.input, call.inputBytes).serial != 0 &&
                    transports::findUserMemory(call.output, call.outputBytes).serial != 0 &&
                    !runsOnInputCopy(call, mapped);
  const collectives::PreparedPlan& barrier = agreement_.barrier();
  std::array<void*, 4> buffers = {};
  LOOM_TRY(mapShared(barrier, 1, buffers));  // maps the arena at its first use
  arena_->vote(agreement_.round(), mine);
  LOOM_TRY(execute(barrier, buffers, loomUint8, loomSum,
                   collectives::collectiveName(call.args.coll), 0, 0, /*aheadOfCall=*/true));
  *all = arena_->unanimous(agreement_.round());
  agreement_.answered(*all);
  LOOM_TRACE("COLL", "buffer agreement #%llu: %s; the next %d ask(s) skipped",
             (unsigned long long)agreement_.round(),
             *all ? "every rank's buffers from loomMemAlloc"
                  : "not every rank's buffers from loomMemAlloc",
             agreement_.asksToSkip());
  return Status::ok();
}

Status Comm::runCollective(CallDesc& call) {
  LOOM_TRY(usable());
  ++collectiveCalls_;
  if (call.recorded != 0) {
    recordedCall_ = call.recorded;
    recorder_.setState(recordedCall_, FlightRecorder::State::Running);
  } else {
    recordedCall_ = openRecord(call, FlightRecorder::State::Running);
  }
  Status st = chooseAndRun(call);
  recorder_.close(recordedCall_, st.isOk());
  recordedCall_ = 0;
  return st;
}

uint64_t Comm::openRecord(const CallDesc& call, FlightRecorder::State state) {
  const collectives::CollArgs& a = call.args;
  return recorder_.open(collectives::collectiveName(a.coll), true, a.count, call.outputBytes,
                        call.dtype, call.op, a.root, state);
}

void Comm::recordQueued(CallDesc* call) {
  call->recorded = openRecord(*call, FlightRecorder::State::Queued);
}

Status Comm::dumpTrace(const char* path, const char* reason, std::string* written) const {
  if (!recorder_.enabled())
    return errorf(loomInvalidUsage,
                  "the flight recorder is off (LOOM_FLIGHT_RECORDER=0): nothing to dump");
  loomResult_t rc = recorder_.dump(reason, path, written);
  if (rc != loomSuccess)
    return errorf(rc, "cannot write the flight recorder to %s: %s",
                  path != nullptr && path[0] != '\0' ? path : recorder_.defaultPath(),
                  strerror(errno));
  return Status::ok();
}

Status Comm::chooseAndRun(CallDesc& call) {
  stampedCall_ = &call;
  if (const ResolvedCall* again = memo_.repeat(call)) return runResolved(call, *again);
  completeArgs(&call);
  const tuner::Decision* decision = nullptr;
  LOOM_TRY(chooseBuilder(&call, &decision));
  ResolvedCall r;
  LOOM_TRY(resolve(call, *decision, &r));
  // Not remembered: calls that ask the ranks whether their buffers are mapped (each such call
  // must ask or count a skipped ask), that copy their input, or whose counts the key omits.
  memo_.forgetCall();
  if (!asksBuffersMapped(call.args, memo_.lastDecision()) && !r.copiesInput &&
      call.args.coll != Collective::AlltoAllv)
    memo_.rememberCall(call, r);
  return runResolved(call, r);
}

Status Comm::runDecided(const CallDesc& call, const tuner::Decision& decision) {
  ResolvedCall r;
  LOOM_TRY(resolve(call, decision, &r));
  return runResolved(call, r);
}

Status Comm::resolve(const CallDesc& call, const tuner::Decision& decision, ResolvedCall* out) {
  const collectives::CollArgs& a = call.args;
  const collectives::Builder* builder = decision.choice.builder;
  size_t es = dtypeSize(call.dtype);
  out->input = call.input;
  out->decision = decision;
  out->buffersMapped = call.buffersMapped;
  // Filled on every call (cheap, no allocation), read only when the plan is not cached yet.
  std::array<collectives::BufferAlias, 3> aliases = {{{0, 0}, {1, 0}, {2, 0}}};
  CallKey& key = callKey_;
  key.setShape(a);
  key.setPlan(builder, a.settings());
  if (rangesOverlap(call.input, call.inputBytes, call.output, call.outputBytes)) {
    auto in = reinterpret_cast<uintptr_t>(call.input);
    auto outp = reinterpret_cast<uintptr_t>(call.output);
    if (runsOnInputCopy(call, *builder)) {
      // Alltoall in place works on a copy of the input, kept between calls: a fresh one each
      // call would fault in every page of it again, which cost more than the exchange itself.
      if (inputCopy_.size() < call.inputBytes) inputCopy_.resize(call.inputBytes);
      memcpy(inputCopy_.data(), call.input, call.inputBytes);
      out->input = inputCopy_.data();
      out->copiesInput = true;
    } else if (in >= outp && in + call.inputBytes <= outp + call.outputBytes &&
               (in - outp) % es == 0) {
      aliases[0] = {1, (in - outp) / es};
      key.aliasMode = 1;
      key.aliasOffset = aliases[0].offset;
    } else if (outp >= in && outp + call.outputBytes <= in + call.inputBytes &&
               (outp - in) % es == 0) {
      aliases[1] = {0, (outp - in) / es};
      key.aliasMode = 2;
      key.aliasOffset = aliases[1].offset;
    } else {
      return errorf(loomInvalidArgument,
                    "%s: the send and receive buffers overlap, but not in the in-place layout "
                    "the API defines",
                    collectives::collectiveName(a.coll));
    }
  }
  if (a.coll == Collective::AlltoAllv)
    for (const auto* v : {&a.sendCounts, &a.sendDispls, &a.recvCounts, &a.recvDispls})
      key.counts.insert(key.counts.end(), v->begin(), v->end());
  out->plan = &memo_.plan(key, aliases, [&] { return builder->build(a, rank()); });
  return Status::ok();
}

Status Comm::runResolved(const CallDesc& call, const ResolvedCall& r) {
  const collectives::CollArgs& a = call.args;
  const collectives::PreparedPlan& prepared = *r.plan;
  lastChoice_ = r.decision.choice;
  recorder_.setAlgorithm(recordedCall_, r.decision.choice.builder->name,
                         int(prepared.lanes.size()));
  lastSource_ = r.decision.source;
  lastBuffersMapped_ = r.buffersMapped;
  size_t es = dtypeSize(call.dtype);
  LOOM_TRACE("COLL", "%s #%llu count %llu %s %s root %d: %s (%s%s), %zu lane(s)",
             collectives::collectiveName(a.coll), (unsigned long long)sequence_,
             (unsigned long long)a.count, dtypeName(call.dtype), opName(call.op), a.root,
             tuner::describe(r.decision.choice).c_str(), tuner::sourceText(r.decision).c_str(),
             r.buffersMapped ? ", every rank's buffers from loomMemAlloc" : "",
             prepared.lanes.size());
  if (scratch_.size() < prepared.scratchCount * es) scratch_.resize(prepared.scratchCount * es);
  std::array<void*, 4> buffers = {const_cast<void*>(r.input), call.output, scratch_.data(),
                                  nullptr};
  if (prepared.usesShared) LOOM_TRY(mapShared(prepared, es, buffers));
  LOOM_TRY(execute(prepared, buffers, call.dtype, call.op, collectives::collectiveName(a.coll),
                   call.inputBytes, call.outputBytes));
  if (call.op == loomAvg) {
    bool hasResult = a.coll != Collective::Reduce || a.root == rank();
    if (hasResult)
      divideInPlace(call.output, call.outputBytes / es, call.dtype, nranks());
  }
  return Status::ok();
}

Status Comm::mapShared(const collectives::PreparedPlan& plan, size_t elemSize,
                       std::span<void*> buffers) {
  // A plan that reached past its half would corrupt the other half, or another mapping.
  if (plan.sharedEnd * elemSize > settings_.sharedBytes)
    return errorf(loomInternalError,
                  "%s: the plan uses %llu bytes of the shared arena, but a call has only %llu",
                  plan.algorithm.c_str(), (unsigned long long)(plan.sharedEnd * elemSize),
                  (unsigned long long)settings_.sharedBytes);
  if (!arena_) {
    Status st = transports::ShmArena::open(ctx_, directBytes_, Deadline(timeoutMs()), &arena_);
    if (!st.isOk()) {
      fail(st);
      return st;
    }
    arenaToRevoke_.store(arena_.get(), std::memory_order_release);
  }
  buffers[collectives::kShared] = arena_->nextCallBase();
  return Status::ok();
}

Status Comm::execute(const collectives::PreparedPlan& plan, std::span<void* const> buffers,
                     loomDataType_t dtype, loomRedOp_t op, const char* collective,
                     uint64_t inputBytes, uint64_t outputBytes, bool aheadOfCall) {
  collectives::ExecCall exec;
  exec.plan = &plan;
  exec.buffers = buffers;
  exec.inputBytes = inputBytes;
  exec.outputBytes = outputBytes;
  exec.arena = arena_.get();
  exec.dtype = dtype;
  exec.op = op;
  exec.collective = collective;
  exec.sequence = aheadOfCall ? sequence_ : sequence_++;
  exec.rank = rank();
  exec.spinCount = wait_.spinCount;
  exec.yieldNs = wait_.yieldNs;
  // Every message carries the call's stamp, numbered by the calls its connection carried
  // (the executor's): sequence_ may differ between ranks (a send/receive group concerns only
  // its peers), the calls between two ranks do not. A send/receive group (no stampedCall_) is
  // stamped only as one: its ops are each rank's.
  const CallDesc* c = stampedCall_;
  exec.stamp = c == nullptr ? transports::CallStamp::of(0, kSendRecvStamp, 0, 0, 0, 0)
                            : transports::CallStamp::of(0, uint32_t(c->args.coll), c->dtype,
                                                        c->op, c->args.root, c->args.count);
  // A call through the host's arena may pair with the other ranks' without a message: it
  // checks there that no rank revoked the communicator, and that their calls match its own.
  const bool throughArena = exec.arena != nullptr && (plan.usesShared || plan.readByPeers);
  if (throughArena) {
    // Numbered by the calls through the arena, which every rank of the host runs alike (its
    // barriers need them all).
    stamp_ = exec.stamp.numbered(uint32_t(++arenaCalls_));
    const int revoker = exec.arena->enter(stamp_);
    if (revoker >= 0 && !errors_.revoked()) [[unlikely]]
      return failed(errorf(loomRemoteError, "rank %d: %s: rank %d revoked the communicator",
                           rank(), collective, revoker));
    // A plan without transfers begins before any peer can be past it: a message waiting now
    // is one an earlier call left unread, whose ranks did not match (a rank that only sent).
    int peer = -1;
    transports::MessageMismatch unread;
    if (plan.inOrder && connections_.unreadMessage(&peer, &unread)) [[unlikely]]
      return failed(unreadMessage(collective, peer, unread));
  }
  Status st = collectives::execute(*this, exec, timeoutMs(), workspace_);
  if (throughArena && st.isOk() && !exec.arena->stampsMatch(stamp_)) [[unlikely]]
    st = stampMismatch(collective);
  if (!st.isOk()) [[unlikely]]
    return failed(st);
  return st;
}

Status Comm::failed(const Status& st) {
  bool told = false;
  Status first = withFirstCause(st, &told);
  fail(first, told);
  return first;
}

// A peer that failed first leaves its calls, and this rank may see only that (its connection
// closed, its memory gone): the cause is in the abort it sent through the bootstrap, which may
// arrive a moment later. Waits briefly for it, so that every rank names the first failure.
// A timeout is reported first (*told): the root names the rank that stopped once it has heard
// from the others, who time out together (Bootstrap::sendAbort).
Status Comm::withFirstCause(const Status& st, bool* told) {
  static const std::string kRelayed = "aborted by a peer: ";
  const bool timedOut = st.code() == loomTimeout;
  const bool relayedHere = st.message().find(kRelayed) != std::string::npos;
  if ((st.code() != loomRemoteError && !timedOut) || relayedHere) return st;
  Status relayed = boot_.pollAbort(0);
  if (relayed.isOk() && timedOut) {
    boot_.sendAbort(st.message());
    *told = true;
  }
  if (relayed.isOk())
    relayed = boot_.pollAbort(timedOut ? Bootstrap::kSilenceMs + kFirstCauseWaitMs
                                       : kFirstCauseWaitMs);
  const size_t at = relayed.message().find(kRelayed);
  if (relayed.isOk() || at == std::string::npos) return st;
  const int origin = rankNamedIn(relayed.message().substr(at + kRelayed.size()));
  const std::string who = origin < 0 ? std::string() : strprintf(" rank %d failed first:", origin);
  return Status(st.code(), strprintf("%s; because%s %s", st.message().c_str(), who.c_str(),
                                     relayed.message().c_str()));
}

Status Comm::unreadMessage(const char* collective, int peer,
                           const transports::MessageMismatch& m) const {
  return errorf(loomInvalidUsage,
                "rank %d: %s (call %llu through the host's shared memory): the ranks' calls do "
                "not match: rank %d's message of %s (its call %u with this rank, %llu bytes) was "
                "never received: an earlier call of this rank took no message from it there",
                rank(), collective, (unsigned long long)stamp_.sequence(), peer,
                collectives::describeStamp(m.found).c_str(), m.found.sequence(),
                (unsigned long long)m.foundBytes);
}

Status Comm::stampMismatch(const char* collective) const {
  int other = -1;
  transports::CallStamp theirs;
  if (!arena_->mismatchedStamp(stamp_, &other, &theirs)) return Status::ok();
  return errorf(loomInvalidUsage,
                "rank %d: %s (call %llu through the host's shared memory): the ranks' calls do "
                "not match: rank %d called %s, this rank %s",
                rank(), collective, (unsigned long long)stamp_.sequence(), other,
                collectives::describeStamp(theirs).c_str(),
                collectives::describeStamp(stamp_).c_str());
}

// The collectives' descriptors go through the bootstrap's allgather, not a loom allgather: the
// bootstrap relays each rank's whole blob over a connection of its own, one exchange at a time,
// so no call's data can be read as another's, whereas a loom allgather would travel the very
// paths that mismatched calls confuse. Every rank gets the same descriptors and reaches the
// same verdict.
Status Comm::checkCall(std::span<const CallDesc* const> colls, std::span<const P2PCall> p2p) {
  LOOM_TRY(usable());
  ++checkedCalls_;
  Deadline deadline(timeoutMs());
  std::string verdict;
  Status st = colls.empty() ? Status::ok() : checkCollectives(colls, deadline, &verdict);
  if (st.isOk() && verdict.empty() && !p2p.empty()) st = checkPeers(p2p, deadline, &verdict);
  if (st.isOk() && verdict.empty()) return Status::ok();
  const char* name = checkedCallName(colls, p2p);
  if (st.isOk())
    st = errorf(loomInvalidUsage, "rank %d: %s call %llu (LOOM_CHECK): %s", rank(), name,
                (unsigned long long)checkedCalls_, verdict.c_str());
  else
    st = st.withContext(strprintf("rank %d: %s call %llu (LOOM_CHECK's exchange)", rank(), name,
                                  (unsigned long long)checkedCalls_));
  fail(st);
  return st;
}

Status Comm::checkCollectives(std::span<const CallDesc* const> colls, const Deadline& deadline,
                              std::string* verdict) {
  std::string mine;
  for (const CallDesc* c : colls) describeCollective(*c, &mine);
  std::vector<std::string> all;
  LOOM_TRY(boot_.allgather(mine, &all, deadline));
  *verdict = collectivesDiffer(all);
  return Status::ok();
}

// Each pair of ranks compares its operations with each other through the bootstrap's store,
// under keys numbered by the pair's checks so far: sends and receives concern their peers
// alone, and the other ranks may meanwhile call something else, or nothing.
Status Comm::checkPeers(std::span<const P2PCall> p2p, const Deadline& deadline,
                        std::string* verdict) {
  std::vector<int> peers;
  for (const P2PCall& c : p2p)
    if (c.op.peer != rank() && std::find(peers.begin(), peers.end(), c.op.peer) == peers.end())
      peers.push_back(c.op.peer);
  auto key = [](int from, int to, uint64_t check) {
    return strprintf("check/%d>%d/%llu", from, to, (unsigned long long)check);
  };
  std::vector<std::string> mine(peers.size());
  for (size_t i = 0; i < peers.size(); ++i) {
    describeOpsWith(peers[i], p2p, &mine[i]);
    LOOM_TRY(boot_.put(key(rank(), peers[i], ++peerChecks_[size_t(peers[i])]), mine[i],
                       deadline));
  }
  for (size_t i = 0; i < peers.size(); ++i) {
    std::string theirs;
    LOOM_TRY(boot_.take(key(peers[i], rank(), peerChecks_[size_t(peers[i])]), &theirs,
                        deadline));
    if (verdict->empty()) *verdict = opsUnpaired(rank(), mine[i], peers[i], theirs);
  }
  return Status::ok();
}

Status Comm::runP2P(const std::vector<P2PCall>& calls) {
  LOOM_TRY(usable());
  uint64_t bytes = 0;
  for (const P2PCall& c : calls) bytes += c.op.bytes;
  recordedCall_ = recorder_.open("sendrecv", false, calls.size(), bytes, loomUint8, loomSum, -1,
                                 FlightRecorder::State::Running);
  recorder_.setAlgorithm(recordedCall_, "p2p", 1);
  Status st = exchangeP2P(calls);
  recorder_.close(recordedCall_, st.isOk());
  recordedCall_ = 0;
  return st;
}

Status Comm::exchangeP2P(const std::vector<P2PCall>& calls) {
  stampedCall_ = nullptr;
  // Sends to self pair with receives from self in order: a plain copy, no transport.
  std::vector<const P2PCall*> selfSends, selfRecvs;
  // The group's plan is cached like a collective's, keyed by its operations (peer, kind,
  // bytes); the key and buffer list are members so that a repeated group allocates nothing.
  std::vector<void*>& buffers = p2pBuffers_;
  buffers.assign(collectives::kFirstUserBuffer, nullptr);
  CallKey& key = callKey_;
  key.coll = collectives::Collective::SendRecv, key.count = 0, key.root = 0, key.elemSize = 1;
  key.setPlan(nullptr, {0, 0, 0, 0});
  for (const P2PCall& c : calls) {
    if (c.op.peer == rank()) {
      (c.op.kind == collectives::P2POp::Kind::Send ? selfSends : selfRecvs).push_back(&c);
      continue;
    }
    key.counts.insert(key.counts.end(), {uint64_t(c.op.peer), uint64_t(c.op.kind), c.op.bytes});
    buffers.push_back(c.buffer);
  }
  if (selfSends.size() != selfRecvs.size())
    return errorf(loomInvalidUsage, "group has %zu send(s) to self but %zu receive(s) from self",
                  selfSends.size(), selfRecvs.size());
  for (size_t i = 0; i < selfSends.size(); ++i) {
    if (selfSends[i]->op.bytes != selfRecvs[i]->op.bytes)
      return errorf(loomInvalidUsage, "send to self of %llu bytes meets a receive of %llu",
                    (unsigned long long)selfSends[i]->op.bytes,
                    (unsigned long long)selfRecvs[i]->op.bytes);
    memmove(selfRecvs[i]->buffer, selfSends[i]->buffer, selfSends[i]->op.bytes);
  }
  if (key.counts.empty()) return Status::ok();
  // Each operation has its own buffer: nothing aliases.
  const collectives::PreparedPlan& prepared = memo_.plan(key, {}, [&] {
    std::vector<collectives::P2POp> ops;
    for (const P2PCall& c : calls)
      if (c.op.peer != rank()) ops.push_back(c.op);
    return collectives::buildP2P(ops);
  });
  return execute(prepared, buffers, loomUint8, loomSum, "sendrecv");
}

}  // namespace loom

namespace loom {

Status Comm::predict(CallDesc& call, std::string_view algorithm, double* seconds) {
  completeArgs(&call);
  const collectives::CollArgs& a = call.args;
  if (!tuner_.modelOff().empty())
    return errorf(loomInvalidUsage, "no cost model to simulate the call with: %s",
                  tuner_.modelOff().c_str());
  const collectives::Builder* builder = forcedBuilders_[size_t(a.coll)];
  if (!algorithm.empty()) {
    builder = collectives::findBuilder(a.coll, algorithm);
    const std::string why = builder == nullptr      ? std::string("no such algorithm")
                            : builder->refuse == nullptr ? std::string()
                                                         : builder->refuse(a);
    if (!why.empty())
      return errorf(loomInvalidArgument, "cannot price %s as %.*s: %s",
                    collectives::collectiveName(a.coll), int(algorithm.size()),
                    algorithm.data(), why.c_str());
  }
  tuner::AlgoParams params = tuner_.config().fixed;
  if (builder == nullptr) {
    tuner::Decision d;
    LOOM_TRY(tuner_.decide(a, &d));
    if (d.source == tuner::Source::Model && d.choice.time > 0) {
      *seconds = d.choice.time;
      return Status::ok();
    }
    builder = d.choice.builder, params = d.choice.params;
  }
  *seconds = tuner_.predict(a, *builder, params);
  if (*seconds < 0)
    return errorf(loomInternalError, "the cost model cannot simulate %s=%s of %llu elements",
                  collectives::collectiveName(a.coll), builder->name,
                  (unsigned long long)a.count);
  return Status::ok();
}

// Each rank's operations are known only to itself: the model runs the group as if every rank
// did what this one does, to the peers at the same offsets from itself.
Status Comm::predictP2P(const std::vector<P2PCall>& calls, double* seconds) const {
  if (!tuner_.modelOff().empty())
    return errorf(loomInvalidUsage, "no cost model to simulate the group with: %s",
                  tuner_.modelOff().c_str());
  const int n = nranks();
  std::vector<collectives::P2POp> mine;
  for (const P2PCall& c : calls)
    if (c.op.peer != rank()) mine.push_back(c.op);
  *seconds = 0;
  if (mine.empty()) return Status::ok();
  tuner::SimResult r = tuner::simulateBuilt(
      n,
      [&](int r) {
        std::vector<collectives::P2POp> ops = mine;
        for (collectives::P2POp& op : ops) op.peer = ((op.peer - rank() + r) % n + n) % n;
        return collectives::buildP2P(ops);
      },
      tuner_.topology(), tuner_.config().sim);
  if (!r.ok) return errorf(loomInternalError, "the cost model cannot simulate the group: %s",
                           r.message.c_str());
  *seconds = r.time;
  return Status::ok();
}

}  // namespace loom
