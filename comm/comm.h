// The communicator: this rank's view of a group of ranks. It coordinates its parts: the
// connections to its peers (comm/connections.h), what it remembers of earlier calls
// (comm/call_memo.h), the buffer agreement (comm/buffer_agreement.h), its use of the CPUs
// (comm/cpu_binding.h) and its error state (comm/error_state.h); and its topology and tuner.
// The C API (comm/api.cc) is a thin layer over it.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "collectives/builders.h"
#include "collectives/executor.h"
#include "comm/bootstrap.h"
#include "comm/buffer_agreement.h"
#include "comm/call.h"
#include "comm/call_memo.h"
#include "comm/connections.h"
#include "comm/cpu_binding.h"
#include "comm/error_state.h"
#include "comm/flight_recorder.h"
#include "comm/options.h"
#include "base/status.h"
#include "topology/topology.h"
#include "transports/transport.h"
#include "tuner/autotuner.h"
#include "tuner/tuner.h"

namespace loom {

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
  // How this rank shares its machine (shareMachine): the communicator's ranks on it, in any
  // network namespace, the cores they may run on together, and how its executor waits.
  int machineRanks() const { return machineRanks_; }
  int machineCores() const { return machineCores_; }
  const WaitPolicy& waitPolicy() const { return wait_; }
  // Plans run so far: the user's calls and autotune's trials, not the buffer agreement's.
  uint64_t callsRun() const { return sequence_; }
  // Who decided the last collective's algorithm, and LOOM_AUTOTUNE's state (null: off).
  tuner::Source lastSource() const { return lastSource_; }
  // Whether the last call ran as on every rank's loomMemAlloc buffers, and how many times the
  // ranks have voted on that so far (the asks it did not skip).
  bool lastBuffersMapped() const { return lastBuffersMapped_; }
  uint64_t buffersAgreements() const { return agreement_.round(); }
  const tuner::Autotuner* autotuner() const { return autotune_.get(); }

  // Runs one collective to completion (host buffers, in this thread); call.args takes the
  // chosen algorithm's parameters. By reference: a small call's whole budget is ~0.1 us.
  Status runCollective(CallDesc& call);
  // Where the API describes each call before running it: one per communicator, refilled, so
  // that a call neither constructs nor destroys its vectors (hostOf, alltoallv's counts) and
  // keeps their storage. A communicator runs one call at a time, as NCCL's does.
  CallDesc& apiCall() { return apiCall_; }
  // Runs a group of sends and receives together.
  Status runP2P(const std::vector<P2PCall>& calls);
  // The flight recorder (comm/flight_recorder.h). A group's collective is recorded as queued
  // when the group ends (recordQueued sets call->recorded), then runs under that entry.
  void recordQueued(CallDesc* call);
  // Writes the flight recorder to path (null or empty: its default file); *written the file.
  Status dumpTrace(const char* path, const char* reason, std::string* written) const;
  // LOOM_CHECK: the ranks agree on a call (a group's collectives and sends and receives, all
  // together) before it runs (comm/call_check.h); where they differ, every rank of the call
  // fails the communicator with what differed. Without LOOM_CHECK, nothing.
  Status agreeOnCall(std::span<const CallDesc* const> colls, std::span<const P2PCall> p2p) {
    if (!checkCalls_) [[likely]]
      return Status::ok();
    return checkCall(colls, p2p);
  }

  // Error state: after a failure the communicator refuses further work with the first error.
  Status usable() const { return errors_.usable(); }
  // Records, and tells the peers through the bootstrap unless they were told (told).
  void fail(const Status& st, bool told = false);
  loomResult_t asyncError();
  void setLastError(const std::string& msg) { errors_.setLastError(msg); }
  const char* lastError() { return errors_.lastError(); }
  // The algorithm and parameters of the last collective (tuner::describe), "" before the first.
  const char* lastAlgorithm();

  // Ends the call in flight (at its next check, within ~0.1 s) and refuses later ones, and
  // tells the peers, whose calls end too. Any thread (loomCommRevoke, loomCommAbort).
  void revoke(const std::string& reason);
  bool revoked() const { return errors_.revoked(); }
  // loomCommAbort: writes the flight recorder where LOOM_FLIGHT_RECORDER_DUMP asks (once: not
  // after a revoke), and revokes.
  void abort(const std::string& reason);
  // Tells the peers this rank is gone on purpose (destroy) or not (abort).
  void leave();
  void abortPeers(const std::string& reason);
  // The model's prediction of a call (loomGroupSimulateEnd), in seconds, as the tuner or
  // LOOM_ALGO would run it, or as `algorithm` (a builder's name) would where one is given;
  // no measurement, no exchange with the ranks.
  Status predict(CallDesc& call, std::string_view algorithm, double* seconds);
  Status predictP2P(const std::vector<P2PCall>& calls, double* seconds) const;

  // ExecHost.
  Status connection(int peer, int lane, transports::Connection** out,
                    transports::Transport** transport) override;
  Status pollAsyncErrors() override;
  void reportWait(const transports::CallStamp& mine) override;
  bool callDiffers(int* rank, transports::CallStamp* theirs) override;

 private:
  Comm() = default;
  // init runs its phases, in this order, then the topology's, the tuner's and autotune's.
  Status init(int nranks, const loomUniqueId& id, int rank, const loomConfig_t* config);
  // Keeps what the calls need of the options readCommOptions read.
  void useOptions(const CommOptions& options);
  // Joins the bootstrap, opens the transports and learns every rank's PeerInfo (ctx_.peers),
  // *me this rank's.
  Status exchangePeers(const loomUniqueId& id, const Deadline& deadline,
                       const CommOptions& options, transports::PeerInfo* me);
  // Numbers the hosts by first appearance (hostOf_, hostCount_), for hierarchical plans.
  void numberHosts();
  // Under auto on several hosts: opens UCX beside tcp as a candidate for the links between
  // hosts, and learns which ranks have it (Connections::openNetworkCandidate); discovery then
  // chooses one. Every rank runs it (an allgather) where hostCount_ > 1.
  Status exchangeNetworkCandidates(const CommOptions& options, const Deadline& deadline);
  // The ranks of this rank's machine (machineRanks_), the CPUs they may run on together
  // (*machineCpus, machineCores_ their count), and whether they spin while they wait (wait_).
  void shareMachine(const transports::PeerInfo& me, cpu_set_t* machineCpus);
  // Builds tuner_ from the rules and mode read at init, the fixed parameters and topo_; logs
  // its decision table (INFO, rank 0).
  void initTuner(tuner::TunerConfig config);

  // Topology (comm/topology_discovery.cc: topology::discoverCommTopology over the bootstrap and
  // the transports). discoverTopology fills topo_: LOOM_TOPO_FILE, or the probe, the per-host
  // cache and a short measurement, exchanged so that every rank builds the same model; and
  // the transport of the links between hosts that the figures make cheaper.
  Status discoverTopology(const topology::DiscoveryOptions& options, const Deadline& deadline);
  Status spreadOverCores(const cpu_set_t& machineCpus, int usableCores);
  // The transport the measurement uses to reach peer: the one its connections will use.
  transports::Transport* transportFor(int peer) const { return connections_.transportFor(peer); }

  // LOOM_AUTOTUNE (comm/autotune_runner.cc, over tuner::Autotuner). Init reads the cache file,
  // and the ranks agree on it; a call of a bucket without an entry measures the candidates
  // first. Replaces *out with the measured winner when the call is one autotune measures.
  Status initAutotune(const CommOptions& options, const Deadline& deadline);
  Status autotuneDecision(const CallDesc& call, tuner::Decision* out);
  // Runs a measurement's trials as calls of this communicator (tuner::AutotuneRunner).
  class AutotuneTrials;
  // Brings the ranks together before a timed call of a measurement: a one-byte allreduce as the
  // model runs it (not through autotune, which is what is measuring).
  Status syncRanks();

  // A call's way: completeArgs, chooseBuilder, resolve, runResolved.
  // What every call's args take from the communicator before its algorithm is chosen.
  void completeArgs(CallDesc* call) const;
  // The algorithm for a call: LOOM_ALGO's, else the tuner's (or autotune's). Applies the
  // decision's parameters (lanes, torus dims, fan-in) to call->args, so that the plan and its
  // key see them. *out: memo_'s decision, or adjustedDecision_ where this call's differs.
  Status chooseBuilder(CallDesc* call, const tuner::Decision** out);
  // Whether every rank's Input and Output of this call are from loomMemAlloc, as the ranks of
  // the host agree: each votes, and a barrier of theirs (a plan of one Barrier step, run like
  // any call) carries the votes to all. Asked only where the answer changes the model's or
  // autotune's choice (tuner::Decision::whenMapped): all ranks then ask, in the same calls.
  // `mapped`: the algorithm the mapped choice would run.
  Status agreeBuffersMapped(const CallDesc& call, const collectives::Builder& mapped, bool* all);
  // Whether a call chooseBuilder decides with `decided` (the tuner's) asks that.
  bool asksBuffersMapped(const collectives::CollArgs& a, const tuner::Decision& decided) const;
  // The decision's prepared plan for the call (built once per plan key), with the call's
  // buffers laid out as the plan expects them (in-place aliasing, the alltoall's copy).
  Status resolve(const CallDesc& call, const tuner::Decision& decision, ResolvedCall* out);
  Status runResolved(const CallDesc& call, const ResolvedCall& r);
  // Runs a call whose args carry the decision's parameters: resolve, then runResolved.
  Status runDecided(const CallDesc& call, const tuner::Decision& decision);
  // Runs a prepared plan over the given buffers; a failure marks the communicator failed.
  // A plan that runs ahead of the call it belongs to (the buffer agreement: aheadOfCall) is
  // reported under that call's collective and number, which the call then keeps.
  Status execute(const collectives::PreparedPlan& plan, std::span<void* const> buffers,
                 loomDataType_t dtype, loomRedOp_t op, const char* collective,
                 uint64_t inputBytes = 0, uint64_t outputBytes = 0, bool aheadOfCall = false);
  // agreeOnCall's exchanges: the collectives' descriptors with every rank, the sends' and
  // receives' with each peer concerned (theirs alone: the other ranks do not take part).
  Status checkCall(std::span<const CallDesc* const> colls, std::span<const P2PCall> p2p);
  Status checkCollectives(std::span<const CallDesc* const> colls, const Deadline& deadline,
                          std::string* verdict);
  Status checkPeers(std::span<const P2PCall> p2p, const Deadline& deadline,
                    std::string* verdict);
  // runCollective's and runP2P's work between their flight recorder entry's opening and
  // closing.
  Status chooseAndRun(CallDesc& call);
  // Opens a collective's flight recorder entry in `state`; its number (0: recorder off).
  uint64_t openRecord(const CallDesc& call, FlightRecorder::State state);
  Status exchangeP2P(const std::vector<P2PCall>& calls);
  // Writes the flight recorder to its default file, and logs where (or why not).
  void dumpTraceLogged(const char* reason) const;
  // Marks the communicator failed with st (withFirstCause's) and returns that.
  Status failed(const Status& st);
  // st, with the cause a peer relays when it failed first (waiting up to kFirstCauseWaitMs).
  static constexpr int kFirstCauseWaitMs = 500;
  Status withFirstCause(const Status& st, bool* told);
  // The error of a call through the arena whose stamp (stamp_) another rank's differs from.
  Status stampMismatch(const char* collective) const;
  // The error of a call through the arena that found an unread message from peer waiting
  // (Connections::unreadMessage).
  Status unreadMessage(const char* collective, int peer,
                       const transports::MessageMismatch& m) const;
  static constexpr uint32_t kSendRecvStamp = uint32_t(collectives::Collective::SendRecv);
  // Points buffers[kShared] at this call's half of the arena, mapping it first if need be.
  Status mapShared(const collectives::PreparedPlan& plan, size_t elemSize,
                   std::span<void*> buffers);

  // Configuration, read at init.
  transports::CommContext ctx_;
  std::string transportMode_;  // LOOM_TRANSPORT: auto, shm, tcp
  ForcedBuilders forcedBuilders_{};  // LOOM_ALGO: the builder forced per collective, or null
  // What every call's CollArgs start from (tuner::callSettings): lanes, torus dims and fan-in
  // the user fixed (else 1 / derived / 1), the incast lead, the direct arena's bytes per call.
  collectives::CallSettings settings_;
  uint64_t directBytes_ = 0;  // LOOM_SHM_DIRECT_BYTES: the direct allreduce's arena
  // The group's layout.
  std::vector<int32_t> hostOf_;  // host index of every rank (CollArgs::hostOf)
  int hostCount_ = 1;
  int machineRanks_ = 0;  // ranks on this rank's machine (PeerInfo::machineId), itself too
  int machineCores_ = 1;  // the CPUs those ranks may run on together (at least 1)
  topology::Topology topo_;  // the communicator's topology (discoverTopology)
  // Parts.
  Bootstrap boot_;
  CpuBinding binding_;
  WaitPolicy wait_;
  // LOOM_CHECK, the calls it checked, and per peer the checks of sends and receives with it.
  bool checkCalls_ = false;
  uint64_t checkedCalls_ = 0;
  std::vector<uint64_t> peerChecks_;
  Connections connections_;
  std::unique_ptr<transports::ShmArena> arena_;  // mapped at the first call that uses it
  // arena_, published once mapped, for revoke(), which another thread may run (loomCommAbort,
  // loomCommRevoke) while a call maps the arena: reading arena_ itself there would race with
  // its assignment.
  std::atomic<transports::ShmArena*> arenaToRevoke_{nullptr};
  BufferAgreement agreement_;
  ErrorState errors_;
  // Choosing: the tuner picks algorithm and parameters per call (initTuner).
  tuner::Tuner tuner_;
  // A call's decision where it is not memo_'s as is: forced by LOOM_ALGO, or the choice for
  // buffers every rank has from loomMemAlloc (chooseBuilder).
  tuner::Decision adjustedDecision_;
  // LOOM_AUTOTUNE's measured decisions; null when it is off.
  std::unique_ptr<tuner::Autotuner> autotune_;
  // Running: what the communicator remembers of earlier calls, the key of the call being
  // resolved (a send/receive group's: coll SendRecv, its operations in counts), and what each
  // call reuses so that it allocates nothing.
  CallMemo memo_;
  CallKey callKey_;
  CallDesc apiCall_;
  std::vector<void*> p2pBuffers_;
  collectives::ExecWorkspace workspace_;
  std::vector<char> scratch_;
  std::vector<char> inputCopy_;  // an in-place alltoall's input, see resolve
  uint64_t sequence_ = 0;
  // The collectives begun (runCollective): every rank of a program that matches numbers its
  // calls alike, unlike sequence_, which counts send/receive groups too (reportWait).
  uint64_t collectiveCalls_ = 0;
  FlightRecorder recorder_;
  uint64_t recordedCall_ = 0;  // the flight recorder's entry of the call running (0: none)
  // The call being run (runCollective; null for a send/receive group), and the stamp execute
  // gives a call through the host's arena from it (execute, stampMismatch).
  const CallDesc* stampedCall_ = nullptr;
  transports::CallStamp stamp_;
  uint64_t arenaCalls_ = 0;
  // What the last collective ran: kept as the decision's parts, described only when asked.
  tuner::Candidate lastChoice_;
  tuner::Source lastSource_{};
  bool lastBuffersMapped_ = false;
  std::string lastAlgorithmShown_;
};

// The communicator behind an API handle (comm/api.cc), for tests of what it chose at init.
Comm& commOf(loomComm_t comm);

}  // namespace loom
