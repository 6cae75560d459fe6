// The executor runs one rank's plan over transports, in the caller's thread.
//
// Every step of a lane is started as soon as the data it needs is there: a step may work on
// the prefix of its regions that no unfinished earlier step still touches (read after write,
// write after read, write after write), tracked element by element. So a ring step forwards a
// chunk's first slices while the rest is still arriving, with no slicing in the builders.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "collectives/plan.h"
#include "base/clock.h"
#include "base/status.h"
#include "transports/shm/shm_arena.h"
#include "transports/transport.h"

namespace loom::collectives {

// A plan prepared for execution: buffers that alias each other folded into one, and for every
// step the earlier steps whose regions it conflicts with. Built once, cached by the caller.
struct PreparedPlan {
  struct Conflict {
    uint32_t step;        // the earlier step, index within the lane
    uint64_t theirStart;  // where the earlier step's region starts (canonical buffer offset)
    uint64_t overlapBegin, overlapEnd;  // the overlap, canonical buffer offsets
    uint64_t myStart;                   // where this step's region starts (canonical buffer offset)
  };
  struct LaneSteps {
    std::vector<Step> steps;                       // regions rewritten to canonical buffers
    std::vector<uint64_t> counts;  // per step: the elements it handles (a Barrier: 1 unit)
    std::vector<std::vector<Conflict>> conflicts;  // per step
    std::vector<uint8_t> fuseNext;  // per step: fusedWithNext(it, the next step) (plan.h)
    std::vector<uint8_t> finalCopy;  // per step: finalCopies (plan.h)
  };
  std::vector<LaneSteps> lanes;
  uint64_t scratchCount = 0;
  std::string algorithm;
  bool usesShared = false;  // has Shared regions or Barrier steps: the call needs the arena
  bool readByPeers = false;  // RankPlan::readByPeers: the call publishes its buffers
  // One lane and no transfers (the direct shared-memory plans): the steps run one after
  // another, each to its end.
  bool inOrder = false;
  uint64_t sharedEnd = 0;   // elements of Shared the plan reaches (its furthest region's end)
};

// How one buffer id maps into memory: canonical buffer id and element offset within it.
struct BufferAlias {
  uint32_t canonical;
  uint64_t offset;
};

// Prepares plan; aliases[b] folds buffer b into another. Buffers past the end of aliases are
// their own (so an empty list means no aliasing).
PreparedPlan preparePlan(const RankPlan& plan, std::span<const BufferAlias> aliases);

// What the executor needs from the communicator.
class ExecHost {
 public:
  virtual ~ExecHost() = default;
  // The connection to peer on lane, made on first use.
  virtual Status connection(int peer, int lane, transports::Connection** out,
                            transports::Transport** transport) = 0;
  // Errors that arrive outside the data path (a peer's abort through the bootstrap).
  virtual Status pollAsyncErrors() = 0;
  // A call with a receive that waits long: `mine` is the call's stamp. The host compares it
  // with the calls other ranks report so, and callDiffers then returns, where another rank's
  // call of the same number among the communicator's collectives differs, that rank and its
  // call's stamp (once pollAsyncErrors has read it). A host that cannot leaves both as they are
  // here.
  virtual void reportWait(const transports::CallStamp& /*mine*/) {}
  virtual bool callDiffers(int* /*rank*/, transports::CallStamp* /*theirs*/) { return false; }
};

struct ExecCall {
  const PreparedPlan* plan = nullptr;
  std::span<void* const> buffers;  // base address of each canonical buffer id
  // The host's arena (Barrier steps; buffers[kShared] points into it) when plan->usesShared.
  transports::ShmArena* arena = nullptr;
  // Bytes of buffers[kInput] and buffers[kOutput], published for peers when plan->readByPeers.
  uint64_t inputBytes = 0, outputBytes = 0;
  loomDataType_t dtype = loomUint8;
  loomRedOp_t op = loomSum;
  // Waiting: polls before yielding, then how long to yield before sleeping.
  int64_t spinCount = 2000;
  uint64_t yieldNs = 2000000;
  // What each message of the call carries, numbered per connection (transports::CallStamp).
  transports::CallStamp stamp;
  // For error messages: "allreduce #12".
  const char* collective = "";
  uint64_t sequence = 0;
  int rank = 0;
};

// Memory the executor reuses from call to call (one per communicator), so that a call in the
// steady state allocates nothing.
class ExecWorkspace {
 public:
  ExecWorkspace();
  ~ExecWorkspace();
  struct Impl;
  std::unique_ptr<Impl> impl;
};

// How errors name a call from its stamp: "allreduce of 100 elements (float32, sum, root 0)", or
// "a send/receive group".
std::string describeStamp(const transports::CallStamp& s);
// The error of a receive whose message did not match it (Connection::mismatch), from rank
// `peer`; `what` is the transport's own error.
Status messageMismatch(const Status& what, int peer, const transports::MessageMismatch& m);

// Runs the plan. Every wait has a deadline of timeoutMs (< 0: none), counted from the call's
// first idle moment: a call that never has to wait reads no clock for it.
Status execute(ExecHost& host, const ExecCall& call, int64_t timeoutMs, ExecWorkspace& workspace);

}  // namespace loom::collectives
