#include "collectives/executor.h"

#include <sched.h>

#include <algorithm>
#include <cstring>

#include "base/reduce_kernels.h"
#include "base/copy.h"
#include "base/dtype.h"
#include "base/log.h"
#include "base/params.h"

namespace loom::collectives {
namespace {

using transports::Connection;
using transports::TransferOp;
using transports::Transport;

// An idle wait past its spinning reads the clock (deadline, peer checks, when to sleep) on one
// round in this many (Run::run).
constexpr int64_t kIdleRoundsPerClockRead = 8;
// A sleeping wait's first turn on each of several transports (sleepUntilEvent), microseconds.
constexpr int64_t kFirstTurnUs = 50;

bool isTransfer(StepKind k) {
  return k == StepKind::Send || k == StepKind::Recv || k == StepKind::RecvReduce;
}

// The regions a step touches and whether it writes them.
struct Access {
  Region region;
  bool write;
};

int accesses(const Step& s, Access out[2]) {
  switch (s.kind) {
    case StepKind::Send:
      out[0] = {s.src, false};
      return 1;
    case StepKind::Recv:
      out[0] = {s.dst, true};
      return 1;
    case StepKind::RecvReduce:
    case StepKind::Copy:
    case StepKind::Reduce:
      out[0] = {s.src, false};
      out[1] = {s.dst, true};
      return 2;
    case StepKind::Barrier:
      return 0;
  }
  return 0;
}

// Elements a step handles; a Barrier is one unit, done when it has passed. Kept per step in
// LaneSteps::counts, which is what the executor reads.
uint64_t stepCount(const Step& s) {
  if (s.kind == StepKind::Barrier) return 1;
  return s.kind == StepKind::Send ? s.src.count : s.dst.count;
}

}  // namespace

PreparedPlan preparePlan(const RankPlan& plan, std::span<const BufferAlias> aliases) {
  PreparedPlan out;
  out.scratchCount = plan.scratchCount;
  out.algorithm = plan.algorithm;
  out.readByPeers = plan.readByPeers;
  auto canon = [&](Region r) {
    if (r.buf < aliases.size()) {
      r.offset += aliases[r.buf].offset;
      r.buf = aliases[r.buf].canonical;
    }
    return r;
  };
  for (const Lane& lane : plan.lanes) {
    PreparedPlan::LaneSteps ls;
    for (Step s : lane.steps) {
      s.src = canon(s.src);
      s.dst = canon(s.dst);
      ls.steps.push_back(s);
      ls.counts.push_back(stepCount(s));
      out.usesShared = out.usesShared || s.kind == StepKind::Barrier;
      for (const Region& r : {s.src, s.dst}) {
        if (r.count == 0 || r.buf != kShared) continue;
        out.usesShared = true;
        out.sharedEnd = std::max(out.sharedEnd, r.offset + r.count);
      }
    }
    ls.conflicts.resize(ls.steps.size());
    ls.fuseNext.assign(ls.steps.size(), 0);
    for (size_t i = 0; i + 1 < ls.steps.size(); ++i)
      ls.fuseNext[i] = fusedWithNext(ls.steps[i], ls.steps[i + 1]);
    ls.finalCopy = finalCopies(ls.steps);
    size_t sinceBarrier = 0;  // steps before the last Barrier are done before later ones start
    for (size_t i = 0; i < ls.steps.size(); ++i) {
      if (ls.steps[i].kind == StepKind::Barrier) sinceBarrier = i + 1;
      Access mine[2];
      int nm = accesses(ls.steps[i], mine);
      for (size_t j = sinceBarrier; j < i; ++j) {
        Access theirs[2];
        int nt = accesses(ls.steps[j], theirs);
        for (int a = 0; a < nm; ++a)
          for (int b = 0; b < nt; ++b) {
            const Region& x = mine[a].region;
            const Region& y = theirs[b].region;
            if (!(mine[a].write || theirs[b].write) || x.buf != y.buf) continue;
            uint64_t begin = std::max(x.offset, y.offset);
            uint64_t end = std::min(x.offset + x.count, y.offset + y.count);
            if (begin >= end) continue;
            ls.conflicts[i].push_back({uint32_t(j), y.offset, begin, end, x.offset});
          }
      }
    }
    out.lanes.push_back(std::move(ls));
  }
  out.inOrder = out.lanes.size() == 1 &&
                std::none_of(plan.lanes[0].steps.begin(), plan.lanes[0].steps.end(),
                             [](const Step& s) { return isTransfer(s.kind); });
  return out;
}

namespace {

struct StepState {
  TransferOp op;
  uint64_t done = 0;    // elements finished
  bool posted = false;  // a transfer handed to its connection, or this rank at a Barrier
  Connection* conn = nullptr;
  uint64_t ticket = 0;  // Barrier: what the arena returned on arrival
};

}  // namespace

struct ExecWorkspace::Impl {
  std::vector<std::vector<StepState>> state;  // per lane, per step
  std::vector<size_t> first;                  // per lane: the first unfinished step
  std::vector<Connection*> conns;             // connections this call posted to
  std::vector<size_t> connLane;
  std::vector<Transport*> transports;
  std::vector<uint64_t> tokens;
  // Peer reads: where each peer buffer of this call is (by peerBuffer id − kFirstPeerBuffer,
  // rank < 0: not looked up yet), and the bounce a Reduce reads an unmapped peer's data into.
  std::vector<transports::ShmArena::PeerView> peers;
  std::vector<char> bounce;
  // The last call's reduction, looked up again only when dtype or op changes.
  loomDataType_t kernelDtype = loomUint8;
  loomRedOp_t kernelOp = loomSum;
  ReduceKernel kernel = reduceKernel(loomUint8, loomSum);
  ReduceKernel kernelFor(loomDataType_t dtype, loomRedOp_t op) {
    if (dtype != kernelDtype || op != kernelOp) {
      kernel = reduceKernel(dtype, op);
      kernelDtype = dtype;
      kernelOp = op;
    }
    return kernel;
  }
};

ExecWorkspace::ExecWorkspace() : impl(std::make_unique<Impl>()) {}
ExecWorkspace::~ExecWorkspace() = default;

namespace {

class Run {
 public:
  Run(ExecHost& host, const ExecCall& call, int64_t timeoutMs, ExecWorkspace::Impl& ws)
      : host_(host),
        call_(call),
        timeoutMs_(timeoutMs),
        es_(dtypeSize(call.dtype)),
        buffers_(call.buffers.data()),
        chunkElements_(std::max<uint64_t>(1, kLocalChunkBytes / es_)),
        reduceKernel_(ws.kernelFor(call.dtype, call.op)),
        state_(ws.state),
        first_(ws.first),
        conns_(ws.conns),
        connLane_(ws.connLane),
        transports_(ws.transports),
        tokens_(ws.tokens),
        peers_(ws.peers),
        bounce_(ws.bounce) {
    size_t lanes = call.plan->lanes.size();
    state_.resize(lanes);
    for (size_t l = 0; l < lanes; ++l) {
      // Only what is read before it is set: a transfer's op is filled when it is posted, a
      // Barrier's ticket when the rank arrives (copying a whole fresh state into every step
      // was ~8% of a 2-rank 8-byte allreduce).
      state_[l].resize(call.plan->lanes[l].steps.size());
      for (StepState& ss : state_[l]) {
        ss.done = 0;
        ss.posted = false;
        ss.conn = nullptr;
      }
    }
    first_.assign(lanes, 0);
    conns_.clear();
    connLane_.clear();
    transports_.clear();
    peers_.clear();
  }

  Status run() {
    if (call_.plan->usesShared && call_.arena == nullptr)
      return errorf(loomInternalError, "%s: the plan uses the shared arena, but there is none",
                    header().c_str());
    if (reduceKernel_ == nullptr)  // the API refuses such calls; this keeps the executor safe
      return errorf(loomInternalError, "%s: no reduction for datatype %d and op %d",
                    header().c_str(), int(call_.dtype), int(call_.op));
    if (call_.plan->readByPeers)
      call_.arena->publish(call_.buffers[kInput], call_.inputBytes, call_.buffers[kOutput],
                           call_.outputBytes);
    if (call_.plan->inOrder) return runInOrder();
    IdleWait wait;
    for (;;) {
      bool progressed = false;
      bool finished = true;
      barrierWaiting_ = nullptr;
      for (size_t l = 0; l < state_.size(); ++l) {
        LOOM_TRY(advanceLane(l, &progressed));
        finished = finished && first_[l] == state_[l].size();
      }
      if (finished) return Status::ok();
      LOOM_TRY(progressConnections(&progressed));
      if (progressed) {
        wait = IdleWait();
        continue;
      }
      LOOM_TRY(idleRound(&wait));
    }
  }

  // Rings the doorbells that the call's connections have left pending (Connection).
  void flushNotifications() {
    for (Connection* c : conns_) c->flushNotifications();
  }

 private:
  // A wait's progress through spinning, yielding and sleeping (idleRound).
  struct IdleWait {
    int64_t rounds = 0;
    uint64_t sinceNs = 0;      // when yielding began (0: not read yet)
    uint64_t lastCheckNs = 0;  // the last look for dead peers; read at the first idle moment,
                               // as is the deadline: a call that never waits reads no clock
                               // (a small call's budget is ~0.2 us)
    int64_t turnUs = kFirstTurnUs;  // sleepUntilEvent's next turn per transport, where several
  };

  // One round in which nothing progressed. Past spinning: yield the CPU for a while (a peer
  // may need it), then sleep. Both are also the time to look for trouble that does not show on
  // the data path. The clock is read on every kIdleRoundsPerClockRead-th such round only: where
  // ranks outnumber the cores every wait yields at once, and reading the clock each time cost
  // more than the rest of an idle round (6% of a 4-rank, 2-core 32-byte allgather).
  Status idleRound(IdleWait* w) {
    if (++w->rounds < call_.spinCount) return Status::ok();
    if ((w->rounds - std::max<int64_t>(call_.spinCount, 1)) % kIdleRoundsPerClockRead == 0) {
      uint64_t now = nowNs();
      if (w->sinceNs == 0) w->sinceNs = now;
      if (w->lastCheckNs == 0) {
        w->lastCheckNs = now;
        deadline_ = Deadline(timeoutMs_);
      }
      if (now - w->lastCheckNs > 100 * 1000000ull) {
        w->lastCheckNs = now;
        LOOM_TRY(checkPeers());
      }
      if (deadline_.expired()) return timeoutError();
      if (now - w->sinceNs >= call_.yieldNs) return sleepUntilEvent(w);
    }
    sched_yield();
    return Status::ok();
  }

  // A plan of one lane without transfers (PreparedPlan::inOrder): nothing can progress while
  // a step waits, so each step runs to its end before the next starts. The general loop above
  // would scan the lane again on every pass; here a 2-rank 8-byte direct allreduce spends
  // ~0.1 us less.
  Status runInOrder() {
    // In locals, as in runLocal: the steps' work writes through char pointers.
    const Step* const steps = lane(0).steps.data();
    const uint64_t* const counts = lane(0).counts.data();
    const size_t n = lane(0).steps.size();
    StepState* const st = state_[0].data();
    size_t& first = first_[0];
    for (size_t i = 0; i < n; ++i) {
      first = i;
      const Step& s = steps[i];
      StepState& ss = st[i];
      if (ss.done == counts[i]) continue;  // run fused with the step before it
      if (s.kind != StepKind::Barrier) {
        while (ss.done < counts[i]) {
          Status result = runLocal(0, i, counts[i]);
          if (!result.isOk()) return result.withContext(stepContext(0, i));
        }
        continue;
      }
      ss.ticket = call_.arena->arrive(flags(s));
      ss.posted = true;
      IdleWait wait;
      while (!call_.arena->passed(ss.ticket, flags(s))) {
        barrierWaiting_ = &s;
        barrierTicket_ = ss.ticket;
        LOOM_TRY(idleRound(&wait));
      }
      ss.done = 1;
    }
    first = n;
    return Status::ok();
  }

  const PreparedPlan::LaneSteps& lane(size_t l) const { return call_.plan->lanes[l]; }

  char* address(const Region& r) const {
    return static_cast<char*>(buffers_[r.buf]) + r.offset * es_;
  }

  // Where Barrier b's ranks raise their flags (plan.h): by default in the arena's records.
  transports::FlagWindow flags(const Step& b) const {
    if (b.src.count == 0) return {};
    return {address(b.src), b.src.count * es_};
  }

  // How many elements of step i may be touched now, given the earlier conflicting steps
  // (but for step `except`, which the caller runs in step with this one).
  uint64_t readyLimit(size_t l, size_t i, size_t except = SIZE_MAX) const {
    const auto& ls = lane(l);
    uint64_t limit = ls.counts[i];
    for (const auto& c : ls.conflicts[i]) {
      if (c.step == except) continue;
      uint64_t theirDone = state_[l][c.step].done;
      if (c.theirStart + theirDone >= c.overlapEnd) continue;
      uint64_t ready = std::max(c.overlapBegin, c.theirStart + theirDone);
      limit = std::min(limit, ready - c.myStart);
    }
    return limit;
  }

  Status advanceLane(size_t l, bool* progressed) {
    const Step* steps = lane(l).steps.data();
    const uint64_t* counts = lane(l).counts.data();
    StepState* st = state_[l].data();
    const size_t n = state_[l].size();
    // The lane's first unfinished step, kept in a local while the pass runs (stored back at
    // every exit): through the reference the compiler reloaded it after each store to a step's
    // state, several times per step of every small call.
    size_t first = first_[l];
    Status result;
    // Per (peer, direction) FIFO: a transfer is posted only after every earlier transfer of
    // the lane to the same peer in the same direction.
    for (size_t i = first; i < n; ++i) {
      const Step& s = steps[i];
      StepState& ss = st[i];
      const uint64_t count = counts[i];
      if (ss.done == count) {
        if (i == first) ++first;
        continue;
      }
      if (s.kind == StepKind::Barrier) {
        if (i != first) break;  // arrive only after every earlier step, start none after
        if (!ss.posted) {
          ss.ticket = call_.arena->arrive(flags(s));
          ss.posted = true;
          *progressed = true;
        }
        if (!call_.arena->passed(ss.ticket, flags(s))) {
          barrierWaiting_ = &s;
          barrierTicket_ = ss.ticket;
          break;
        }
        ss.done = 1;
        ++first;
        *progressed = true;
        continue;
      }
      const uint64_t limit = readyLimit(l, i);
      if (isTransfer(s.kind)) {
        if (!ss.posted) {
          result = post(l, i);
          if (!result.isOk()) break;
          *progressed = true;
        }
        size_t limitBytes = limit * es_;
        if (limitBytes > ss.op.limit) ss.op.limit = limitBytes;
        continue;
      }
      if (limit <= ss.done) continue;
      result = runLocal(l, i, limit);
      if (!result.isOk()) {
        result = result.withContext(stepContext(l, i));
        break;
      }
      *progressed = true;
      if (ss.done == count && i == first) ++first;
    }
    first_[l] = first;
    return result;
  }

  Status post(size_t l, size_t i) {
    const Step& s = lane(l).steps[i];
    StepState& ss = state_[l][i];
    Transport* transport = nullptr;
    Status st = host_.connection(s.peer, int(l), &ss.conn, &transport);
    if (!st.isOk()) return st.withContext(stepContext(l, i));
    TransferOp& op = ss.op;
    op = TransferOp();  // the state of an earlier call's step may be left in it
    op.dtype = call_.dtype;
    op.op = call_.op;
    op.bytes = lane(l).counts[i] * es_;
    switch (s.kind) {
      case StepKind::Send:
        op.kind = TransferOp::Kind::Send;
        op.src = address(s.src);
        break;
      case StepKind::Recv:
        op.kind = TransferOp::Kind::Recv;
        op.dst = address(s.dst);
        break;
      default:
        op.kind = TransferOp::Kind::RecvReduce;
        op.src = address(s.src);
        op.dst = address(s.dst);
    }
    // The call's first post to this connection numbers the call on it (Connection::nextCall).
    if (std::find(conns_.begin(), conns_.end(), ss.conn) == conns_.end()) {
      ss.conn->beginCall(call_.stamp.numbered(ss.conn->nextCall()));
      conns_.push_back(ss.conn);
      connLane_.push_back(l);
      if (std::find(transports_.begin(), transports_.end(), transport) == transports_.end())
        transports_.push_back(transport);
    }
    op.stamp = call_.stamp.numbered(ss.conn->currentCall());
    st = ss.conn->post(&op);
    if (!st.isOk()) return st.withContext(stepContext(l, i));
    ss.posted = true;
    return Status::ok();
  }

  // Runs the next piece of local step i of lane l, up to element `limit`: a Copy, a Reduce, or
  // a Copy fused with the Reduce after it (fuseNext) while the two go in step.
  Status runLocal(size_t l, size_t i, uint64_t limit) {
    // The lane's arrays in locals: the copies and reductions below write through char
    // pointers, after which the compiler would reload them from the plan on every use.
    const PreparedPlan::LaneSteps& ls = lane(l);
    const Step& s = ls.steps[i];
    StepState* const st = state_[l].data();
    StepState* const ss = &st[i];
    const uint64_t done = ss->done, count = ls.counts[i];
    const uint64_t end = std::min(limit, done + chunkElements_);
    char* dst = address(s.dst) + done * es_;
    if (s.kind == StepKind::Copy && !isPeerBuffer(s.src.buf) &&
        address(s.src) + done * es_ == dst) {
      ss->done = count;  // an in-place copy is nothing to do
      return Status::ok();
    }
    if (ls.fuseNext[i] && st[i + 1].done == done) {
      const Step& next = ls.steps[i + 1];
      const uint64_t both = std::min(end, readyLimit(l, i + 1, i));  // what the Reduce may take
      if (both > done) {
        const char *a = nullptr, *b = nullptr;
        LOOM_TRY(readable(s.src, done, both - done, 0, &a));
        LOOM_TRY(readable(next.src, done, both - done, 1, &b));
        reduceKernel_(dst, a, b, both - done);
        ss->done = st[i + 1].done = both;
        return Status::ok();
      }
    }
    const uint64_t n = end - done;
    const char* src = nullptr;
    // An unmapped peer's data for a Copy goes straight into the destination.
    LOOM_TRY(readable(s.src, done, n, s.kind == StepKind::Copy ? -1 : 0, &src, dst));
    if (s.kind == StepKind::Copy) {
      const bool streaming = ls.finalCopy[i] && count * es_ >= kStreamingCopyBytes;
      if (src != dst && streaming)
        copyBypassingCache(dst, src, n * es_);
      else if (src != dst)
        memcpy(dst, src, n * es_);
    } else {
      reduceKernel_(dst, dst, src, n);
    }
    ss->done = end;
    return Status::ok();
  }

  // Elements [from, from+n) of region r where this rank can load them: its own memory, a
  // peer's mapped here, or else what process_vm_readv copied into bounce half `half` (or, for
  // half -1, into `into`).
  Status readable(const Region& r, uint64_t from, uint64_t n, int half, const char** out,
                  char* into = nullptr) {
    if (!isPeerBuffer(r.buf)) {
      *out = address(r) + from * es_;
      return Status::ok();
    }
    return readablePeer(r, from, n, half, out, into);
  }

  // readable() for a peer's buffer: out of line, so that the own-memory case above, which
  // every small call takes, inlines into runLocal.
  [[gnu::noinline]] Status readablePeer(const Region& r, uint64_t from, uint64_t n, int half,
                                        const char** out, char* into) {
    const transports::ShmArena::PeerView* view = nullptr;
    LOOM_TRY(peerView(r.buf, &view));
    const uint64_t at = (r.offset + from) * es_;
    if (view->mapped != nullptr) {
      *out = view->mapped + at;
      return Status::ok();
    }
    if (half >= 0) {
      const size_t bytes = std::max<size_t>(kLocalChunkBytes, n * es_);
      if (bounce_.size() < 2 * bytes) bounce_.resize(2 * bytes);
      into = bounce_.data() + size_t(half) * bytes;
    }
    Status st =
        transports::readProcessMemory(view->pid, view->rank, view->addr + at, into, n * es_);
    if (st.code() == loomSystemError)  // e.g. ptrace rules forbid it
      return errorf(st.code(),
                    "%s; peers read buffers from loomMemAlloc without it, or choose another "
                    "algorithm than %s",
                    st.message().c_str(), call_.plan->algorithm.c_str());
    if (!st.isOk()) {
      // A peer that left the call did so over an error of its own, most often another rank's
      // death: name that rank when there is one.
      Status alive = call_.arena->checkAlive();
      return alive.isOk() ? st : alive;
    }
    *out = into;
    return Status::ok();
  }

  // Where peer buffer `buf` of this call is, looked up at its first read (after the plan's
  // first Barrier, when every peer has published).
  Status peerView(uint32_t buf, const transports::ShmArena::PeerView** out) {
    const size_t i = buf - kFirstPeerBuffer;
    if (peers_.size() <= i) peers_.resize(i + 1);
    if (peers_[i].rank < 0)
      LOOM_TRY(call_.arena->peer(peerBufferRank(buf), peerBufferKind(buf), &peers_[i]));
    *out = &peers_[i];
    return Status::ok();
  }

  Status progressConnections(bool* progressed) {
    for (size_t c = 0; c < conns_.size(); ++c) {
      bool p = false;
      Status st = conns_[c]->progress(&p);
      if (!st.isOk()) [[unlikely]]
        return connectionError(c, st);
      *progressed = *progressed || p;
    }
    if (!*progressed && conns_.empty()) return Status::ok();
    for (size_t l = 0; l < state_.size(); ++l)
      for (size_t i = first_[l]; i < state_[l].size(); ++i) {
        StepState& ss = state_[l][i];
        // Transfers only: a posted Barrier has no op of its own (its op may hold what an
        // earlier call's transfer at this index left, and a done read from there would pass
        // the Barrier before every rank had arrived).
        if (ss.posted && isTransfer(lane(l).steps[i].kind)) ss.done = ss.op.done / es_;
      }
    return Status::ok();
  }

  Status checkPeers() {
    for (size_t c = 0; c < conns_.size(); ++c) {
      Status st = conns_[c]->checkAlive();
      if (!st.isOk()) return connectionError(c, st);
    }
    if (call_.arena != nullptr) {
      Status st = call_.arena->checkAlive();
      if (!st.isOk()) return st.withContext(firstUnfinishedContext());
    }
    Status st = host_.pollAsyncErrors();
    if (!st.isOk()) return st.withContext(header());
    return compareWaits();
  }

  // Ranks whose calls differ wait for messages their peers never send, until the deadline:
  // the call of a receive that nothing of its message has reached by a check is reported to
  // the host, once per call, and fails where the host finds another rank's call of the same
  // number that differs (ExecHost::callDiffers), however the ranks wait on each other (a
  // cycle of ranks in calls by messages, which no peer's arena call shows, included).
  Status compareWaits() {
    bool waits = false;
    for (size_t c = 0; c < conns_.size(); ++c) {
      const StepState* waiting = firstWaitingReceive(c);
      if (waiting == nullptr) continue;
      if (conns_[c]->seesPeersCall())
        LOOM_TRY(checkPeerInArenaCall(c, *waiting, peerOf(c)));
      waits = true;
    }
    if (!waits) return Status::ok();
    if (!waitReported_) {
      host_.reportWait(call_.stamp);
      waitReported_ = true;
      return Status::ok();
    }
    int rank = -1;
    transports::CallStamp theirs;
    if (!host_.callDiffers(&rank, &theirs)) return Status::ok();
    return errorf(loomInvalidUsage,
                  "%s: the ranks' calls do not match: rank %d is in %s, and this rank in %s, "
                  "as the communicator's collective of that number (each rank waited for "
                  "messages that its peers' calls do not send)",
                  firstUnfinishedContext().c_str(), rank, describeStamp(theirs).c_str(),
                  describeStamp(call_.stamp).c_str());
  }

  // A peer of the host that has entered a call through the arena which this rank has not
  // (ShmArena::memberPast) has finished every call this rank is in: the message this rank
  // waits for from it, if its call was this one, has been sent, and shows once the
  // connection is read after the arena. Where it still does not, the peer called something
  // else (a call through the arena, where this rank's goes by messages: another count, say).
  Status checkPeerInArenaCall(size_t c, const StepState& waiting, int peer) {
    transports::CallStamp theirs;
    if (call_.arena == nullptr || !call_.arena->memberPast(peer, &theirs)) return Status::ok();
    bool progressed = false;
    if (Status st = conns_[c]->progress(&progressed); !st.isOk()) return connectionError(c, st);
    if (waiting.op.done != 0) return Status::ok();
    return errorf(loomInvalidUsage,
                  "%s: the ranks' calls do not match: rank %d is in %s (its call %u through the "
                  "host's shared memory, which this rank has not made), while this rank waits "
                  "for its message of %s (its call %u with rank %d, %llu bytes)",
                  connectionContext(c).c_str(), peer, describeStamp(theirs).c_str(),
                  theirs.sequence(), describeStamp(waiting.op.stamp).c_str(),
                  waiting.op.stamp.sequence(), peer, (unsigned long long)waiting.op.bytes);
  }

  // The receive on connection c that waits for its message with none of it arrived; null
  // where c's first unfinished receive has some, or there is none.
  const StepState* firstWaitingReceive(size_t c) const {
    const size_t l = connLane_[c];
    for (size_t i = first_[l]; i < state_[l].size(); ++i) {
      const StepState& ss = state_[l][i];
      if (!ss.posted || ss.conn != conns_[c] || ss.op.kind == TransferOp::Kind::Send ||
          ss.done == lane(l).counts[i])
        continue;
      return ss.op.done == 0 && ss.op.bytes > 0 ? &ss : nullptr;
    }
    return nullptr;
  }

  Status sleepUntilEvent(IdleWait* w) {
    if (transports_.empty() && barrierWaiting_ == nullptr) {
      sched_yield();
      return Status::ok();
    }
    std::vector<uint64_t>& tokens = tokens_;
    tokens.clear();
    for (Transport* t : transports_) tokens.push_back(t->armSleep());
    bool progressed = false;
    Status st = progressConnections(&progressed);
    if (st.isOk() && !progressed) {
      // One thing to wait for: sleep on it until its event. Several: take turns, briefly, as
      // an event on one wakes no other: turns of kFirstTurnUs, doubling to a millisecond, so
      // that a message that arrives on one transport while the rank sleeps on another waits
      // little where the wait is short. Turns of a millisecond from the start cost a 2 x
      // 2-rank netns allreduce of 512 B - 8 KiB 1.3-2.5 ms a call where it slept at once.
      const bool one = transports_.size() + (barrierWaiting_ != nullptr) == 1;
      const int cap = one ? 100 : 1;
      const int64_t turnUs =
          one ? int64_t(deadline_.remainingMs(cap)) * 1000
              : std::min<int64_t>(w->turnUs, int64_t(deadline_.remainingMs(cap)) * 1000);
      if (!one) w->turnUs = std::min<int64_t>(2 * w->turnUs, 1000);
      for (size_t t = 0; t < transports_.size(); ++t) transports_[t]->sleepUs(tokens[t], turnUs);
      if (barrierWaiting_ != nullptr)
        call_.arena->sleep(barrierTicket_, deadline_.remainingMs(cap), flags(*barrierWaiting_));
    }
    for (Transport* t : transports_) t->disarmSleep();
    return st;
  }

  std::string header() const {
    return strprintf("rank %d: %s #%llu (%s)", call_.rank, call_.collective,
                     (unsigned long long)call_.sequence, call_.plan->algorithm.c_str());
  }

  std::string stepContext(size_t l, size_t i) const {
    const Step& s = lane(l).steps[i];
    const StepState& ss = state_[l][i];
    if (s.kind == StepKind::Barrier) {
      const std::string absent = ss.posted ? "not there yet: rank " + call_.arena->absentRanks()
                                           : std::string("this rank not there yet");
      return strprintf("%s, lane %zu step %zu (Barrier of the %d ranks of this host; %s)",
                       header().c_str(), l, i, call_.arena->members(), absent.c_str());
    }
    if (isPeerBuffer(s.src.buf))
      return strprintf("%s, lane %zu step %zu (%s from rank %d's %s, %llu of %llu elements done)",
                       header().c_str(), l, i, stepKindName(s.kind), peerBufferRank(s.src.buf),
                       peerBufferKind(s.src.buf) == kInput ? "Input" : "Output",
                       (unsigned long long)ss.done, (unsigned long long)lane(l).counts[i]);
    bool toPeer = s.kind == StepKind::Send;
    return strprintf("%s, lane %zu step %zu (%s %s rank %d, %llu of %llu elements done)",
                     header().c_str(), l, i, stepKindName(s.kind), toPeer ? "to" : "from", s.peer,
                     (unsigned long long)ss.done, (unsigned long long)lane(l).counts[i]);
  }

  // Connection c's error st, with the calls named where its message did not match.
  [[gnu::noinline]] Status connectionError(size_t c, const Status& st) const {
    const transports::MessageMismatch* m = conns_[c]->mismatch();
    const Status out = m == nullptr ? st : messageMismatch(st, peerOf(c), *m);
    return out.withContext(connectionContext(c));
  }

  // The peer of connection c: that of a step of this call that uses it.
  int peerOf(size_t c) const {
    const size_t l = connLane_[c];
    for (size_t i = 0; i < state_[l].size(); ++i)
      if (state_[l][i].conn == conns_[c]) return lane(l).steps[i].peer;
    return -1;
  }

  // Names the first unfinished step that uses connection c.
  std::string connectionContext(size_t c) const {
    size_t l = connLane_[c];
    for (size_t i = first_[l]; i < state_[l].size(); ++i) {
      const StepState& ss = state_[l][i];
      if (ss.conn == conns_[c] && ss.done < lane(l).counts[i]) return stepContext(l, i);
    }
    return header();
  }

  // Names the first unfinished step of the first unfinished lane.
  std::string firstUnfinishedContext() const {
    for (size_t l = 0; l < state_.size(); ++l)
      if (first_[l] < state_[l].size()) return stepContext(l, first_[l]);
    return header();
  }

  Status timeoutError() const {
    return errorf(loomTimeout, "%s: no progress before the deadline (LOOM_TIMEOUT_MS)",
                  firstUnfinishedContext().c_str());
  }

  ExecHost& host_;
  const ExecCall& call_;
  const int64_t timeoutMs_;
  Deadline deadline_ = Deadline::never();  // set at the first idle moment
  size_t es_;
  void* const* buffers_;  // call_.buffers', held here: address() runs several times per step
  uint64_t chunkElements_;  // a local step's piece: kLocalChunkBytes in elements
  ReduceKernel reduceKernel_;  // the call's dtype and op (null for invalid ones: run refuses)
  std::vector<std::vector<StepState>>& state_;
  std::vector<size_t>& first_;
  std::vector<Connection*>& conns_;
  std::vector<size_t>& connLane_;
  std::vector<Transport*>& transports_;
  std::vector<uint64_t>& tokens_;
  std::vector<transports::ShmArena::PeerView>& peers_;
  std::vector<char>& bounce_;
  bool waitReported_ = false;  // compareWaits: this call's wait was reported
  const Step* barrierWaiting_ = nullptr;  // the Barrier this pass found not yet passed
  uint64_t barrierTicket_ = 0;            // and its ticket
};

}  // namespace

std::string describeStamp(const transports::CallStamp& s) {
  const auto coll = Collective(s.collective());
  if (coll == Collective::SendRecv) return "a send/receive group";
  return describeCall(coll, s.count, loomDataType_t(s.dtype()), loomRedOp_t(s.op()),
                      int(s.root()));
}

Status messageMismatch(const Status& what, int peer, const transports::MessageMismatch& m) {
  if (!m.header)
    return errorf(loomInvalidUsage,
                  "%s: rank %d's messages and this rank's receives no longer line up (a message "
                  "of another size: the ranks' calls do not match): this rank called %s, its "
                  "call %u with rank %d, receiving %llu bytes",
                  what.message().c_str(), peer, describeStamp(m.expected).c_str(),
                  m.expected.sequence(), peer, (unsigned long long)m.expectedBytes);
  if (m.waiting)
    return errorf(loomInvalidUsage,
                  "%s: the ranks' calls do not match: rank %d is in %s (its call %u with this "
                  "rank), while this rank waits for its message of %s (its call %u with rank %d, "
                  "%llu bytes)",
                  what.message().c_str(), peer, describeStamp(m.found).c_str(),
                  m.found.sequence(), describeStamp(m.expected).c_str(), m.expected.sequence(),
                  peer, (unsigned long long)m.expectedBytes);
  if (m.found == m.expected)
    return errorf(loomInvalidUsage,
                  "%s: rank %d sent %llu bytes where this rank receives %llu, in %s (call %u with "
                  "rank %d): the ranks' sends and receives do not match",
                  what.message().c_str(), peer, (unsigned long long)m.foundBytes,
                  (unsigned long long)m.expectedBytes, describeStamp(m.expected).c_str(),
                  m.expected.sequence(), peer);
  return errorf(loomInvalidUsage,
                "%s: the ranks' calls do not match: rank %d called %s (its call %u with this "
                "rank, a message of %llu bytes), this rank %s (its call %u with rank %d, "
                "receiving %llu bytes)",
                what.message().c_str(), peer, describeStamp(m.found).c_str(), m.found.sequence(),
                (unsigned long long)m.foundBytes, describeStamp(m.expected).c_str(),
                m.expected.sequence(), peer, (unsigned long long)m.expectedBytes);
}

Status execute(ExecHost& host, const ExecCall& call, int64_t timeoutMs, ExecWorkspace& workspace) {
  Run run(host, call, timeoutMs, *workspace.impl);
  Status st = run.run();
  run.flushNotifications();  // whatever the outcome: a peer may sleep on what was published
  return st;
}

}  // namespace loom::collectives
