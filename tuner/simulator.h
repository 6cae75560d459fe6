// The plan simulator (docs/SIMULATOR.md): replays every rank's plan of one
// call over a topology at flow level and predicts how long it takes.
//
// Model, in short (docs/SIMULATOR.md has the details and why):
//  - a message is a flow over the links of topo.route() between the two ranks' endpoints. It
//    transmits its bytes at a rate that is max-min fair among all flows crossing the same links
//    at the same time (progressive filling, recomputed at every flow start and finish, only
//    over the flows that share links with the change; a connection's next slice that takes
//    its finished one's place changes no link's flows and recomputes nothing), then arrives
//    route-latency later (α, paid once per message; the next message on the connection
//    transmits meanwhile);
//  - the executor's semantics: every transfer of a lane is posted at once, transfers between a
//    pair of ranks on a lane go in FIFO order, and a step may work on the prefix of its regions
//    that the earlier conflicting steps of its lane have finished. The simulator cuts each step
//    into `slices` equal pieces and lets piece j start once the earlier conflicting steps have
//    finished the pieces that cover it — the executor's element-granular rule at slice
//    granularity. slices = 1 is whole-step (store-and-forward) execution;
//  - a message starts when both its send and its receive may touch the slice (rendezvous);
//  - Copy and Reduce, and each step's bookkeeping (HostCpu::stepOverhead), run one after another
//    on the rank's thread (the executor runs them in the calling thread), as flows over the
//    rank's core and, when the host model gives its core count, the host's cores, which all its
//    ranks' local work and shm messages share max-min (HostCpu, docs/SIMULATOR.md "Local work
//    and the CPU"); the combine of a RecvReduce is overlapped with the transfer.
//  - a Barrier completes barrierLatency (the last rank's host's HostCpu::barrierLatency, else
//    SimOptions') after the last rank reaches it; it waits for the earlier
//    steps of its lane and holds back the later ones. Shared regions are local memory.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/plan.h"
#include "topology/topology.h"

namespace loom::tuner {

struct SimOptions {
  uint32_t elemSize = 4;  // bytes per element of the plans' dtype
  // Pieces each step is cut into for pipelining (1 = whole steps); at most kMaxSlices.
  int slices = 4;
  // Bytes per second of one core's Copy/Reduce on hosts whose model gives no memBandwidth
  // (topology::HostCpu), and of a message between two ranks on the same endpoint node (empty
  // route). 0: local work is free.
  double memBandwidth = 20e9;
  // Seconds from the last rank's arrival at a Barrier until all go on (a few cache-line
  // transfers between cores, and waking the ranks that slept), where the host's model does not
  // say (HostCpu::barrierLatency).
  double barrierLatency = 1e-6;
  // A message between ranks of one host of at least this many bytes goes by the shm
  // transport's single-copy path (LOOM_SHM_CMA_THRESHOLD): it starts once all of its data is
  // there, and when its receiver only stores it (a Recv) it costs the host's CPU one copy
  // instead of messageCopies. 0: no such path; every such message is pipelined in slices and
  // costs messageCopies.
  uint64_t singleCopyBytes = 0;
  // The shm transport's ways with a message, as a communicator's options give them
  // (loom::withTransportFacts, comm/options.h). A single-copy receive reads at most this many
  // bytes per system call, each costing HostCpu::singleCopyOverhead; 0: the whole message in
  // one.
  uint64_t singleCopyPieceBytes = 0;
  // A message of at least this many bytes goes through the slots with non-temporal stores, so
  // its copies run at memory speed whatever the cache holds; 0: none does.
  uint64_t nonTemporalBytes = 0;
  // Every rank's buffers are from loomMemAlloc (Tuner::decide's buffersMapped): a read of a
  // peer's buffer in place is a plain copy, not a process_vm_readv (HostCpu::peerReadCopies
  // and singleCopyOverhead do not apply to it).
  bool peersMapped = false;
  // The fast path (tuner/symmetry.h, docs/SIMULATOR.md "The fast path"): where every host has
  // the same nodes and links and every rank's plan is its host-0 counterpart's with its peers
  // moved by a shift or an xor of the hosts, only host 0's ranks are simulated (ring allreduce
  // of 8192 ranks: under a second instead of hours). Elsewhere the full simulation runs, and
  // SimResult::fastRefusal says why.
  bool fast = false;
  // Stop once the simulated clock passes this many seconds (0: run to the end): the result is
  // then `stopped`, its time a lower bound past this one. The tuner gives a candidate the time
  // of the fastest so far: a slower one cannot be chosen, and what follows that time is not
  // simulated.
  double stopAfter = 0;
  static constexpr int kMaxSlices = 16;
  bool operator==(const SimOptions&) const = default;
};

// Seconds a Barrier takes after its last rank arrives, on a host with CPU figures `cpu`: its
// barrierLatency where the model gives one, else the options'.
inline double barrierSeconds(const topology::HostCpu& cpu, const SimOptions& options) {
  return cpu.barrierLatency > 0 ? cpu.barrierLatency : options.barrierLatency;
}

struct SimResult {
  bool ok = true;
  std::string message;  // on failure: mismatched plans, a missing route, or a deadlock
  double time = 0;      // seconds until the last rank finished
  std::vector<double> rankTime;  // per rank: when its last step finished
  uint64_t messages = 0;         // plan messages (Send steps), not slices
  uint64_t bytes = 0;            // bytes sent over all messages
  uint64_t flows = 0;            // flows simulated (messages × their slices)
  // The link that was busy longest (bytes it carried / its bandwidth); -1 when no message
  // crossed a link.
  int32_t busiestLink = -1;
  uint64_t busiestLinkBytes = 0;
  double busiestLinkBusy = 0;  // seconds of transmission at full bandwidth
  // The largest saving a shaped link's burst offered (Link::burstBytes), in seconds, before
  // the bounds on it; 0: the call crossed no shaped link.
  double burstSaving = 0;
  // SimOptions::fast: whether the fast path ran (then `flows` counts the flows of host 0's
  // ranks, the ones simulated); when it did not, why (the full simulation ran instead).
  bool fast = false;
  std::string fastRefusal;
  // SimOptions::stopAfter passed before the last rank finished: `time` is less than the call
  // takes but more than stopAfter, and the other figures cover what was simulated.
  bool stopped = false;
};

// Simulates plans[r] (rank r's plan) over topo; topo.ranks must cover every rank of the plans.
SimResult simulate(const std::vector<collectives::RankPlan>& plans,
                   const topology::Topology& topo, const SimOptions& options);

struct CompiledTransfers;

// What compiling plans found about the order of their steps: for each slice of each step, how
// many slices of which earlier steps of its lane it waits for (most of the compilation's work).
// Plans whose every region is those plans' times one integer (an algorithm's plans at a larger
// size bucket, where its chunks divide evenly) have the same dependencies, provided every step
// of the plans compiled cuts into its slices evenly: then every boundary the compilation
// compares scales alike. The tuner keeps one per candidate across size buckets.
struct CompiledSteps {
  std::vector<collectives::RankPlan> plans;  // what was compiled; empty: nothing yet
  const topology::Topology* topo = nullptr;
  SimOptions options;
  std::vector<uint32_t> depBegin, depStep;
  std::vector<uint8_t> depNeed;
  // Per step: the elements of a Send's source that earlier steps of its lane wrote (for the
  // part a single-copy message finds in its sender's cache), where the Send could go by one copy.
  std::vector<uint64_t> written;
  // The connections between the ranks, their messages and routes (simulator.cc).
  std::shared_ptr<const CompiledTransfers> transfers;
};

// The integer k with every region (offset and count) of `plans` k times its counterpart in
// `was`, step for step, the steps otherwise the same; 0 where there is none.
uint64_t planScale(const std::vector<collectives::RankPlan>& was,
                   const std::vector<collectives::RankPlan>& plans);
// Whether every step of `plans` cuts into `slices` pieces (SimOptions::slices) evenly.
bool slicesEvenly(const std::vector<collectives::RankPlan>& plans, int slices);

// simulate(), taking the dependencies from *compiled where `plans` are its plans scaled
// (options.fast off, the same topology and options), and otherwise keeping in it what this
// compilation found, where its steps cut into their slices evenly. The result is simulate()'s,
// bit for bit.
SimResult simulate(const std::vector<collectives::RankPlan>& plans,
                   const topology::Topology& topo, const SimOptions& options,
                   CompiledSteps* compiled);

// As simulate(), but builds rank r's plan with build(r) one rank at a time and keeps only the
// simulator's compact form of it, so that plans of thousands of ranks need not be held at once
// (8192-rank ring allreduce plans take ~15 GB as RankPlans).
SimResult simulateBuilt(int nranks, const std::function<collectives::RankPlan(int)>& build,
                        const topology::Topology& topo, const SimOptions& options);

}  // namespace loom::tuner
