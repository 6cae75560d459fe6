#include "tests/support/verifier.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "base/status.h"

// Each check returns false after recording the failure in result_.
#define RETURN_IF_FAILED(expr) \
  do {                         \
    if (!(expr)) return false; \
  } while (0)

namespace loom::test {

using collectives::CollArgs;
using collectives::Collective;
using collectives::kFirstUserBuffer;
using collectives::kInput;
using collectives::kOutput;
using collectives::kScratch;
using collectives::kShared;
using collectives::P2POp;
using collectives::RankPlan;
using collectives::Region;
using collectives::Step;
using collectives::StepKind;

namespace {

// ---- Rank sets ------------------------------------------------------------------------------

struct Interval {
  int lo, hi;  // ranks [lo, hi)
  bool operator==(const Interval&) const = default;
};

// Interned sets of ranks, each a sorted list of disjoint, non-adjacent intervals, named by a
// small id so that symbolic elements stay plain data. Ring algorithms produce sets that are
// one or two intervals, so even a thousand ranks cost little.
class RankSets {
 public:
  RankSets() : index_(16, Hash{this}, Eq{this}) {}

  uint32_t range(int lo, int hi) {
    const Interval one[] = {{lo, hi}};
    return intern(one);
  }

  // The union of two sets, or nullopt when they share a rank.
  std::optional<uint32_t> unite(uint32_t a, uint32_t b) {
    const std::span<const Interval> x = get(a), y = get(b);
    scratch_.clear();
    size_t i = 0, j = 0;
    while (i < x.size() || j < y.size()) {
      const bool takeX = j == y.size() || (i < x.size() && x[i].lo < y[j].lo);
      const Interval next = takeX ? x[i++] : y[j++];
      if (!scratch_.empty() && scratch_.back().hi > next.lo) return std::nullopt;
      if (!scratch_.empty() && scratch_.back().hi == next.lo) {
        scratch_.back().hi = next.hi;
      } else {
        scratch_.push_back(next);
      }
    }
    return intern(scratch_);
  }

  std::string format(uint32_t id) const {
    std::string s = "{";
    for (const Interval& v : get(id)) {
      if (s.size() > 1) s += ",";
      s += v.hi - v.lo == 1 ? strprintf("%d", v.lo) : strprintf("%d-%d", v.lo, v.hi - 1);
    }
    return s + "}";
  }

 private:
  std::span<const Interval> get(uint32_t id) const {
    return {pool_.data() + sets_[id].first, sets_[id].second};
  }

  // Appends the set as a candidate id and keeps it only when it is new.
  uint32_t intern(std::span<const Interval> set) {
    const uint32_t id = uint32_t(sets_.size());
    sets_.emplace_back(uint32_t(pool_.size()), uint32_t(set.size()));
    pool_.insert(pool_.end(), set.begin(), set.end());
    auto [it, inserted] = index_.insert(id);
    if (!inserted) {
      pool_.resize(sets_.back().first);
      sets_.pop_back();
    }
    return *it;
  }

  struct Hash {
    const RankSets* self;
    size_t operator()(uint32_t id) const {
      size_t h = 0;
      for (const Interval& v : self->get(id))
        h = h * 1000003u ^ (size_t(v.lo) << 20 ^ size_t(v.hi));
      return h;
    }
  };
  struct Eq {
    const RankSets* self;
    bool operator()(uint32_t a, uint32_t b) const {
      const auto x = self->get(a), y = self->get(b);
      return std::equal(x.begin(), x.end(), y.begin(), y.end());
    }
  };

  std::vector<Interval> pool_;
  std::vector<std::pair<uint32_t, uint32_t>> sets_;  // (first interval in pool_, count)
  std::unordered_set<uint32_t, Hash, Eq> index_;
  std::vector<Interval> scratch_;
};

// ---- Symbolic memory ------------------------------------------------------------------------

constexpr uint32_t kUndefined = UINT32_MAX;  // the origin of an element nobody wrote

// A symbolic element: element `index` of buffer `origin` (on the contributing ranks), summed
// over the ranks in `ranks`.
struct Value {
  uint32_t origin = kUndefined;
  uint32_t ranks = 0;
  uint64_t index = 0;
  bool defined() const { return origin != kUndefined; }
  Value advanced(uint64_t d) const {
    Value v = *this;
    if (defined()) v.index += d;
    return v;
  }
  bool operator==(const Value&) const = default;
};

// `len` consecutive elements; the first is `v`, each next one has the next index.
struct Run {
  uint64_t len;
  Value v;
};

bool continues(const Run& a, const Run& b) {
  return a.v.origin == b.v.origin && a.v.ranks == b.v.ranks &&
         (!a.v.defined() || a.v.index + a.len == b.v.index);
}

// One rank's memory, as runs keyed by their first element.
class Memory {
 public:
  explicit Memory(uint64_t size) {
    if (size > 0) runs_.emplace(0, Run{size, Value{}});
  }

  void read(uint64_t off, uint64_t count, std::vector<Run>& out) const {
    out.clear();
    if (count == 0) return;
    auto it = std::prev(runs_.upper_bound(off));
    for (uint64_t pos = off, end = off + count; pos < end; ++it) {
      const uint64_t skip = pos - it->first;
      const uint64_t len = std::min(it->second.len - skip, end - pos);
      out.push_back(Run{len, it->second.v.advanced(skip)});
      pos += len;
    }
  }

  void write(uint64_t off, const std::vector<Run>& runs) {
    uint64_t end = off;
    for (const Run& r : runs) end += r.len;
    if (end == off) return;
    split(off);
    split(end);
    auto it = runs_.erase(runs_.lower_bound(off), runs_.lower_bound(end));
    for (uint64_t pos = off; const Run& r : runs) {
      if (r.len == 0) continue;
      auto before = it == runs_.begin() ? runs_.end() : std::prev(it);
      if (before != runs_.end() && continues(before->second, r)) {
        before->second.len += r.len;
      } else {
        runs_.emplace_hint(it, pos, r);
      }
      pos += r.len;
    }
    if (it != runs_.end() && it != runs_.begin()) {
      auto before = std::prev(it);
      if (continues(before->second, it->second)) {
        before->second.len += it->second.len;
        runs_.erase(it);
      }
    }
  }

 private:
  // Makes a run start at pos (unless pos is the end).
  void split(uint64_t pos) {
    auto it = runs_.upper_bound(pos);
    if (it == runs_.begin()) return;
    --it;
    const uint64_t d = pos - it->first;
    if (d == 0 || d >= it->second.len) return;
    const Run tail{it->second.len - d, it->second.v.advanced(d)};
    it->second.len = d;
    runs_.emplace_hint(std::next(it), pos, tail);
  }

  std::map<uint64_t, Run> runs_;
};

// ---- Access history, for the conflicts between the steps of a lane ---------------------------

// For every element of one memory: the last step of the lane that wrote it and the steps that
// read it since. A step then depends on exactly the earlier steps it conflicts with, up to
// transitivity: a writer on the last writer and the readers since, a reader on the last writer.
class AccessHistory {
 public:
  void clear() { segs_.clear(); }

  void read(uint64_t lo, uint64_t hi, uint32_t step, std::vector<uint32_t>& deps) {
    visit(lo, hi, [&](Seg& s) {
      if (s.writer >= 0) deps.push_back(uint32_t(s.writer));
      if (s.readers.empty() || s.readers.back() != step) s.readers.push_back(step);
    });
  }

  void write(uint64_t lo, uint64_t hi, uint32_t step, std::vector<uint32_t>& deps) {
    visit(lo, hi, [&](Seg& s) {
      if (s.writer >= 0) deps.push_back(uint32_t(s.writer));
      deps.insert(deps.end(), s.readers.begin(), s.readers.end());
      s.writer = int64_t(step);
      s.readers.clear();
    });
  }

 private:
  struct Seg {
    uint64_t end;
    int64_t writer = -1;
    std::vector<uint32_t> readers;
  };

  // Calls f on segments tiling exactly [lo, hi), creating and splitting them as needed.
  template <typename F>
  void visit(uint64_t lo, uint64_t hi, F f) {
    if (lo >= hi) return;
    split(lo);
    split(hi);
    auto it = segs_.lower_bound(lo);
    for (uint64_t pos = lo; pos < hi;) {
      if (it == segs_.end() || it->first > pos) {
        const uint64_t gapEnd = it == segs_.end() ? hi : std::min(hi, it->first);
        it = segs_.emplace_hint(it, pos, Seg{gapEnd, -1, {}});
      }
      f(it->second);
      pos = it->second.end;
      ++it;
    }
  }

  void split(uint64_t pos) {
    auto it = segs_.upper_bound(pos);
    if (it == segs_.begin()) return;
    --it;
    if (it->first == pos || it->second.end <= pos) return;
    Seg tail = it->second;
    it->second.end = pos;
    segs_.emplace_hint(std::next(it), pos, std::move(tail));
  }

  std::map<uint64_t, Seg> segs_;
};

// ---- The verifier ---------------------------------------------------------------------------

const char* bufferName(uint32_t buf) {
  switch (buf) {
    case kInput:
      return "Input";
    case kOutput:
      return "Output";
    case kScratch:
      return "Scratch";
    case kShared:
      return "Shared";
    default:
      return nullptr;
  }
}

std::string bufferLabel(uint32_t buf) {
  if (collectives::isPeerBuffer(buf))
    return strprintf("rank %d's %s", collectives::peerBufferRank(buf),
                     bufferName(collectives::peerBufferKind(buf)));
  const char* name = bufferName(buf);
  return name ? name : strprintf("op%u", buf - kFirstUserBuffer);
}

bool isComm(StepKind k) {
  return k == StepKind::Send || k == StepKind::Recv || k == StepKind::RecvReduce;
}
bool isRecv(StepKind k) { return k == StepKind::Recv || k == StepKind::RecvReduce; }
bool readsSrc(StepKind k) { return k != StepKind::Recv && k != StepKind::Barrier; }
bool writesDst(StepKind k) { return k != StepKind::Send && k != StepKind::Barrier; }
bool readsDst(StepKind k) { return k == StepKind::RecvReduce || k == StepKind::Reduce; }

// Where a rank's buffer lives: memory `mem` from element `base`, `size` elements.
struct BufferMap {
  bool exists = false;
  bool writable = true;
  uint32_t mem = 0;
  uint64_t base = 0;
  uint64_t size = 0;
};

// A region resolved to memory: memory `mem` of rank `rank` (its own, or a peer's it reads;
// kShared is the host's whatever the rank).
struct Loc {
  uint32_t mem;
  uint64_t off, count;
  int32_t rank;
  bool operator==(const Loc&) const = default;
  bool overlaps(const Loc& o) const {
    return mem == o.mem && rank == o.rank && off < o.off + o.count && o.off < off + count;
  }
};

struct LaneRef {
  int rank;
  int lane;
  uint32_t first;  // global id of its step 0
};

// One step's access to a range of one memory, for the race checks.
struct RangeAccess {
  uint64_t group;  // accesses can only race within a group (a memory; a phase between barriers)
  uint64_t off, end;
  uint32_t actor;  // a lane, or a rank: one actor's accesses are ordered among themselves
  uint32_t id;     // the step
  bool write;
};

// The furthest end the accesses seen so far reach, kept for the best actor and the best other
// actor, so that "the furthest reach of any actor but a" is a lookup.
struct Reach {
  uint64_t end = 0, end2 = 0;
  uint32_t actor = UINT32_MAX, id = 0, id2 = 0;
  void add(uint64_t e, uint32_t a, uint32_t i) {
    if (a == actor) {
      if (e > end) end = e, id = i;
    } else if (e > end) {
      end2 = end, id2 = id;
      end = e, actor = a, id = i;
    } else if (e > end2) {
      end2 = e, id2 = i;
    }
  }
  std::pair<uint64_t, uint32_t> other(uint32_t a) const {
    return actor != a ? std::pair(end, id) : std::pair(end2, id2);
  }
};

// The first two accesses (step ids) of different actors in one group that overlap, one of them
// writing; nullopt when there are none. Sorts `accesses` (stably: ties keep step order).
std::optional<std::pair<uint32_t, uint32_t>> findRace(std::vector<RangeAccess>& accesses) {
  std::stable_sort(accesses.begin(), accesses.end(),
                   [](const RangeAccess& a, const RangeAccess& b) {
                     return std::pair(a.group, a.off) < std::pair(b.group, b.off);
                   });
  Reach writes, any;
  for (size_t i = 0; i < accesses.size(); ++i) {
    const RangeAccess& x = accesses[i];
    if (i > 0 && x.group != accesses[i - 1].group) writes = any = Reach{};
    const auto w = writes.other(x.actor), a = any.other(x.actor);
    if (w.first > x.off) return std::pair(w.second, x.id);
    if (x.write && a.first > x.off) return std::pair(a.second, x.id);
    if (x.write) writes.add(x.end, x.actor, x.id);
    any.add(x.end, x.actor, x.id);
  }
  return std::nullopt;
}

// What a rank's buffer must hold at the end: `count` elements from `off` start with `v`.
struct Expectation {
  uint32_t buf;
  uint64_t off, count;
  Value v;
};

class Verifier {
 public:
  Verifier(const std::vector<CollArgs>* args, const std::vector<std::vector<P2POp>>* ops,
           const std::vector<RankPlan>& plans, bool inPlace)
      : args_(args), ops_(ops), plans_(plans), inPlace_(inPlace) {
    n_ = int(plans.size());
    coll_ = args ? (args->empty() ? Collective::AllReduce : (*args)[0].coll) : Collective::SendRecv;
  }

  VerifyResult run() {
    if (checkArgs() && layOutBuffers() && checkSteps() && matchMessages() && matchBarriers() &&
        checkBarrierFlags() && checkSharedRaces() && buildDependencies() && execute() &&
        checkResults() &&
        measureFanIn()) {
      result_.ok = true;
    }
    return std::move(result_);
  }

  // Asks run() to measure fan-in, ignoring messages of at most controlElements elements.
  void measureFanInToo(uint64_t controlElements) {
    fanIn_ = true;
    controlElements_ = controlElements;
  }

 private:
  bool fail(std::string message) {
    result_.ok = false;
    result_.message = std::move(message);
    return false;
  }

  const Step& step(uint32_t id) const { return *steps_[id]; }
  int rankOf(uint32_t id) const { return lanes_[laneOf_[id]].rank; }

  // "rank 3 lane 0 step 5 (RecvReduce from 2, 17 elements)".
  std::string where(uint32_t id) const {
    const LaneRef& l = lanes_[laneOf_[id]];
    const Step& s = step(id);
    if (s.kind == StepKind::Barrier) {
      return strprintf("rank %d lane %d step %u (Barrier)", l.rank, l.lane, id - l.first);
    }
    const uint64_t count = s.kind == StepKind::Send ? s.src.count : s.dst.count;
    std::string peer;
    if (s.kind == StepKind::Send) peer = strprintf(" to %d", s.peer);
    if (isRecv(s.kind)) peer = strprintf(" from %d", s.peer);
    return strprintf("rank %d lane %d step %u (%s%s, %llu elements)", l.rank, l.lane, id - l.first,
                     collectives::stepKindName(s.kind), peer.c_str(), (unsigned long long)count);
  }

  std::string describe(const Value& v) const {
    if (!v.defined()) return "nothing (never written)";
    return strprintf("%s[%llu] of ranks %s", bufferLabel(v.origin).c_str(),
                     (unsigned long long)v.index, sets_.format(v.ranks).c_str());
  }

  // ---- Arguments and buffers ----

  bool checkArgs() {
    if (n_ == 0) return fail("no plans");
    if (args_ && args_->size() != size_t(n_)) {
      return fail(strprintf("%zu plans but %zu argument sets", size_t(n_), args_->size()));
    }
    if (ops_ && ops_->size() != size_t(n_)) {
      return fail(strprintf("%zu plans but %zu operation lists", size_t(n_), ops_->size()));
    }
    if (!args_) return checkOps();
    for (int r = 0; r < n_; ++r) {
      const CollArgs& a = arg(r);
      if (a.coll != coll_ || a.nranks != n_) {
        return fail(strprintf("rank %d: arguments of another call (%s, %d ranks)", r,
                              collectives::collectiveName(a.coll), a.nranks));
      }
      if (collectives::hasRoot(coll_) && (a.root < 0 || a.root >= n_)) {
        return fail(strprintf("rank %d: root %d out of range", r, a.root));
      }
      if (!a.hostOf.empty() && a.hostOf.size() != size_t(n_)) {
        return fail(
            strprintf("rank %d: hostOf has %zu entries for %d ranks", r, a.hostOf.size(), n_));
      }
    }
    if (coll_ == Collective::AlltoAllv) RETURN_IF_FAILED(checkAlltoallvArgs());
    if (inPlace_ && coll_ == Collective::AlltoAllv) {
      return fail(strprintf("%s has no in-place form", collectives::collectiveName(coll_)));
    }
    return true;
  }

  bool checkAlltoallvArgs() {
    const size_t n = size_t(n_);
    for (int r = 0; r < n_; ++r) {
      const CollArgs& a = arg(r);
      if (a.sendCounts.size() != n || a.sendDispls.size() != n || a.recvCounts.size() != n ||
          a.recvDispls.size() != n) {
        return fail(
            strprintf("rank %d: alltoallv counts and displacements need %d entries", r, n_));
      }
    }
    for (int r = 0; r < n_; ++r) {
      for (int j = 0; j < n_; ++j) {
        const uint64_t expected = arg(r).recvCounts[size_t(j)];
        const uint64_t sent = arg(j).sendCounts[size_t(r)];
        if (expected != sent) {
          return fail(strprintf("rank %d expects %llu elements from rank %d, which sends %llu", r,
                                (unsigned long long)expected, j, (unsigned long long)sent));
        }
      }
    }
    return true;
  }

  bool checkOps() {
    for (int r = 0; r < n_; ++r) {
      for (const P2POp& op : (*ops_)[size_t(r)]) {
        if (op.peer < 0 || op.peer >= n_) {
          return fail(strprintf("rank %d: operation with peer %d out of range", r, op.peer));
        }
      }
    }
    return true;
  }

  const CollArgs& arg(int r) const { return (*args_)[size_t(r)]; }

  // The host of rank r (CollArgs::hostOf; none means one host). A p2p group has no Shared.
  int32_t hostOf(int r) const {
    return args_ == nullptr || arg(r).hostOf.empty() ? 0 : arg(r).hostOf[size_t(r)];
  }

  // Maps every buffer of every rank to memory, aliasing Input and Output in place, and fills
  // Input (and p2p send buffers) with each element's own symbolic value.
  bool layOutBuffers() {
    ranks_.resize(size_t(n_));
    std::vector<uint64_t> hostShared;  // elements of each host's Shared memory
    for (int r = 0; r < n_; ++r) {
      std::vector<BufferMap>& bufs = ranks_[size_t(r)].bufs;
      if (args_) {
        const CollArgs& a = arg(r);
        bufs.resize(kShared + 1);
        bufs[kInput] = {true, false, 0, 0, collectives::inputCount(a, r)};
        bufs[kOutput] = {true, true, 1, 0, collectives::outputCount(a, r)};
        bufs[kScratch] = {true, true, 2, 0, plans_[size_t(r)].scratchCount};
        // One memory per host (see memory()); the rank's own memory kShared stays unused.
        const uint64_t shared = a.sharedBytes / std::max<uint32_t>(1, a.elemSize);
        bufs[kShared] = {true, true, kShared, 0, shared};
        const size_t host = size_t(hostOf(r));
        if (hostShared.size() <= host) hostShared.resize(host + 1, 0);
        hostShared[host] = std::max(hostShared[host], shared);
        if (inPlace_) alias(bufs, a, r);
      } else {
        const auto& ops = (*ops_)[size_t(r)];
        bufs.resize(kFirstUserBuffer + ops.size());
        for (size_t i = 0; i < ops.size(); ++i) {
          bufs[kFirstUserBuffer + i] = {true, ops[i].kind == P2POp::Kind::Recv,
                                        uint32_t(kFirstUserBuffer + i), 0, ops[i].bytes};
        }
      }
      std::vector<uint64_t> sizes;
      for (const BufferMap& b : bufs) {
        if (!b.exists) continue;
        if (sizes.size() <= b.mem) sizes.resize(b.mem + 1, 0);
        sizes[b.mem] = std::max(sizes[b.mem], b.base + b.size);
      }
      RankState& st = ranks_[size_t(r)];
      st.mems.reserve(sizes.size());
      for (uint64_t size : sizes) st.mems.emplace_back(size);
      const uint32_t self = sets_.range(r, r + 1);
      for (uint32_t buf = 0; buf < bufs.size(); ++buf) {
        // The read-only buffers (Input, p2p send buffers) are the sources of all data.
        if (bufs[buf].exists && !bufs[buf].writable && bufs[buf].size > 0) {
          st.mems[bufs[buf].mem].write(bufs[buf].base, {Run{bufs[buf].size, {buf, self, 0}}});
        }
      }
    }
    for (uint64_t size : hostShared) hostMems_.emplace_back(size);
    return true;
  }

  void alias(std::vector<BufferMap>& bufs, const CollArgs& a, int r) {
    switch (coll_) {
      case Collective::AllGather:
        bufs[kInput].mem = bufs[kOutput].mem;
        bufs[kInput].base = uint64_t(r) * a.count;
        break;
      case Collective::ReduceScatter:
        bufs[kOutput].mem = bufs[kInput].mem;
        bufs[kOutput].base = uint64_t(r) * a.count;
        break;
      case Collective::Gather:  // the root's Input is its Output block root; others have none
        if (r != a.root) break;
        bufs[kInput].mem = bufs[kOutput].mem;
        bufs[kInput].base = uint64_t(r) * a.count;
        break;
      case Collective::Scatter:  // the root's Output is its Input block root
        if (r != a.root) break;
        bufs[kOutput].mem = bufs[kInput].mem;
        bufs[kOutput].base = uint64_t(r) * a.count;
        break;
      default:  // allreduce, broadcast, reduce, alltoall: one buffer
        bufs[kOutput].mem = bufs[kInput].mem;
        break;
    }
  }

  // The rank whose buffer reg names: rank itself, or the peer of a peerBuffer.
  static int ownerOf(int rank, const Region& reg) {
    return collectives::isPeerBuffer(reg.buf) ? collectives::peerBufferRank(reg.buf) : rank;
  }
  static uint32_t ownBuffer(const Region& reg) {
    return collectives::isPeerBuffer(reg.buf) ? collectives::peerBufferKind(reg.buf) : reg.buf;
  }

  Loc resolve(int rank, const Region& reg) const {
    const int owner = ownerOf(rank, reg);
    const BufferMap& b = ranks_[size_t(owner)].bufs[ownBuffer(reg)];
    return {b.mem, b.base + reg.offset, reg.count, owner};
  }

  // A Copy onto itself: in place, the executor skips it, and so does the verifier.
  bool isNoop(int rank, const Step& s) const {
    return s.kind == StepKind::Copy && resolve(rank, s.src) == resolve(rank, s.dst);
  }

  // ---- Static checks ----

  bool checkSteps() {
    uint32_t total = 0;
    for (int r = 0; r < n_; ++r) {
      for (size_t l = 0; l < plans_[size_t(r)].lanes.size(); ++l) {
        lanes_.push_back({r, int(l), total});
        const size_t count = plans_[size_t(r)].lanes[l].steps.size();
        if (total + count > UINT32_MAX / 2) return fail("too many steps");
        total += uint32_t(count);
        laneOf_.insert(laneOf_.end(), count, uint32_t(lanes_.size() - 1));
        for (const Step& s : plans_[size_t(r)].lanes[l].steps) steps_.push_back(&s);
      }
    }
    stepCount_ = total;
    result_.counts.assign(size_t(n_), RankCounts{});
    for (uint32_t id = 0; id < total; ++id) {
      RETURN_IF_FAILED(checkStep(id));
      const Step& s = step(id);
      RankCounts& c = result_.counts[size_t(rankOf(id))];
      ++c.steps;
      c.barriers += s.kind == StepKind::Barrier;
      if (s.kind == StepKind::Send) {
        ++c.messagesSent;
        c.elementsSent += s.src.count;
      } else if (isRecv(s.kind)) {
        ++c.messagesReceived;
        c.elementsReceived += s.dst.count;
      }
    }
    for (int r = 0; r < n_; ++r) RETURN_IF_FAILED(checkLaneOverlap(r));
    return true;
  }

  bool checkRegion(uint32_t id, const Region& reg, const char* role, bool write) {
    if (collectives::isPeerBuffer(reg.buf)) RETURN_IF_FAILED(checkPeerRegion(id, reg, write));
    const auto& bufs = ranks_[size_t(ownerOf(rankOf(id), reg))].bufs;
    if (ownBuffer(reg) >= bufs.size() || !bufs[ownBuffer(reg)].exists) {
      return fail(strprintf("%s: %s names buffer %u, which this call does not have",
                            where(id).c_str(), role, reg.buf));
    }
    const BufferMap& b = bufs[ownBuffer(reg)];
    if (reg.offset > b.size || reg.count > b.size - reg.offset) {
      return fail(strprintf("%s: %s %s[%llu+%llu] lies outside the buffer of %llu elements",
                            where(id).c_str(), role, bufferLabel(reg.buf).c_str(),
                            (unsigned long long)reg.offset, (unsigned long long)reg.count,
                            (unsigned long long)b.size));
    }
    if (write && !b.writable) {
      return fail(strprintf("%s: writes %s, which the call must leave unchanged", where(id).c_str(),
                            bufferLabel(reg.buf).c_str()));
    }
    return true;
  }

  // A peer's Input or Output: read (never written) by a Copy or Reduce of a one-lane plan of a
  // collective, from another rank of the host whose plan says peers read it (plan.h).
  bool checkPeerRegion(uint32_t id, const Region& reg, bool write) {
    const int rank = rankOf(id), owner = collectives::peerBufferRank(reg.buf);
    const Step& s = step(id);
    if (!args_ || owner < 0 || owner >= n_ || owner == rank ||
        collectives::peerBufferKind(reg.buf) > kOutput) {
      return fail(strprintf("%s: names %s, which is no peer's Input or Output", where(id).c_str(),
                            bufferLabel(reg.buf).c_str()));
    }
    if (write || !(s.kind == StepKind::Copy || s.kind == StepKind::Reduce)) {
      return fail(strprintf("%s: only a Copy's or Reduce's source may name %s",
                            where(id).c_str(), bufferLabel(reg.buf).c_str()));
    }
    if (plans_[size_t(rank)].lanes.size() != 1 || hostOf(owner) != hostOf(rank)) {
      return fail(strprintf("%s: reads %s, but only one-lane plans read peers, on their host",
                            where(id).c_str(), bufferLabel(reg.buf).c_str()));
    }
    if (!plans_[size_t(owner)].readByPeers || plans_[size_t(owner)].lanes.size() != 1) {
      return fail(strprintf("%s: reads %s, whose plan is not a one-lane plan marked readByPeers",
                            where(id).c_str(), bufferLabel(reg.buf).c_str()));
    }
    return true;
  }

  bool checkStep(uint32_t id) {
    const Step& s = step(id);
    const int rank = rankOf(id);
    if (uint8_t(s.kind) > uint8_t(StepKind::Barrier)) {
      return fail(strprintf("%s: unknown step kind %d", where(id).c_str(), int(s.kind)));
    }
    const bool laneZero = lanes_[laneOf_[id]].lane == 0;
    if (s.kind == StepKind::Barrier &&
        ((s.src.count > 0 && s.src.buf != kShared) || s.dst.count > 0 || !laneZero)) {
      return fail(strprintf("%s: a Barrier has no regions and sits on lane 0 (its src, if any, "
                            "is where its flags go in Shared)",
                            where(id).c_str()));
    }
    if (!laneZero && ((readsSrc(s.kind) && s.src.buf == kShared) ||
                      (writesDst(s.kind) && s.dst.buf == kShared))) {
      return fail(
          strprintf("%s: Shared regions belong on lane 0, with the barriers", where(id).c_str()));
    }
    if (isComm(s.kind) && (s.peer < 0 || s.peer >= n_)) {
      return fail(strprintf("%s: peer %d out of range", where(id).c_str(), s.peer));
    }
    if (readsSrc(s.kind)) RETURN_IF_FAILED(checkRegion(id, s.src, "source", false));
    if (writesDst(s.kind)) RETURN_IF_FAILED(checkRegion(id, s.dst, "destination", true));
    if (readsSrc(s.kind) && writesDst(s.kind)) {
      if (s.src.count != s.dst.count) {
        return fail(strprintf("%s: source has %llu elements but destination %llu",
                              where(id).c_str(), (unsigned long long)s.src.count,
                              (unsigned long long)s.dst.count));
      }
      const Loc src = resolve(rank, s.src), dst = resolve(rank, s.dst);
      if (src.overlaps(dst) && !(src == dst)) {
        return fail(strprintf("%s: source and destination overlap partly", where(id).c_str()));
      }
    }
    return true;
  }

  // Lanes run concurrently, so two lanes must not touch the same elements if one writes.
  bool checkLaneOverlap(int rank) {
    if (plans_[size_t(rank)].lanes.size() < 2) return true;
    std::vector<RangeAccess> accesses;
    for (const LaneRef& l : lanes_) {
      if (l.rank != rank) continue;
      const auto& steps = plans_[size_t(rank)].lanes[size_t(l.lane)].steps;
      for (uint32_t i = 0; i < steps.size(); ++i) {
        forEachAccess(rank, steps[i], [&](const Loc& loc, bool write) {
          if (loc.rank != rank) return;  // a peer's buffer: checkPeerRaces
          accesses.push_back(
              {loc.mem, loc.off, loc.off + loc.count, uint32_t(l.lane), l.first + i, write});
        });
      }
    }
    return noRace(accesses, "touch the same elements from different lanes, one of them writing");
  }

  // Fails with "<step> and <step> <what>" if two actors' accesses race (findRace).
  bool noRace(std::vector<RangeAccess>& accesses, const char* what) {
    const auto race = findRace(accesses);
    if (!race) return true;
    return fail(
        strprintf("%s and %s %s", where(race->first).c_str(), where(race->second).c_str(), what));
  }

  // Calls f(loc, write) for each memory range the step touches, reads first.
  template <typename F>
  void forEachAccess(int rank, const Step& s, F f) const {
    if (isNoop(rank, s)) return;
    if (readsSrc(s.kind) && s.src.count > 0) f(resolve(rank, s.src), false);
    if (writesDst(s.kind) && s.dst.count > 0) {
      const Loc dst = resolve(rank, s.dst);
      if (readsDst(s.kind)) f(dst, false);
      f(dst, true);
    }
  }

  // ---- Message matching ----

  // Key of the messages from `from` to `to` on `lane`.
  uint64_t channel(int from, int to, int lane) const {
    return (uint64_t(from) * uint64_t(n_) + uint64_t(to)) * (1ull << 24) + uint64_t(lane);
  }

  bool matchMessages() {
    partner_.assign(stepCount_, UINT32_MAX);
    std::unordered_map<uint64_t, std::vector<uint32_t>> recvs;
    for (uint32_t id = 0; id < stepCount_; ++id) {
      const Step& s = step(id);
      if (isRecv(s.kind))
        recvs[channel(s.peer, rankOf(id), lanes_[laneOf_[id]].lane)].push_back(id);
    }
    std::unordered_map<uint64_t, size_t> sent;
    for (uint32_t id = 0; id < stepCount_; ++id) {
      const Step& s = step(id);
      if (s.kind != StepKind::Send) continue;
      const int lane = lanes_[laneOf_[id]].lane;
      const uint64_t key = channel(rankOf(id), s.peer, lane);
      const size_t k = sent[key]++;
      const auto it = recvs.find(key);
      if (it == recvs.end() || k >= it->second.size()) {
        return fail(
            strprintf("%s has no matching receive: rank %d lane %d posts %zu receives "
                      "from rank %d",
                      where(id).c_str(), s.peer, lane,
                      it == recvs.end() ? size_t(0) : it->second.size(), rankOf(id)));
      }
      const uint32_t other = it->second[k];
      if (step(other).dst.count != s.src.count) {
        return fail(
            strprintf("%s meets %s: counts differ", where(id).c_str(), where(other).c_str()));
      }
      partner_[id] = other;
      partner_[other] = id;
    }
    for (uint32_t id = 0; id < stepCount_; ++id) {
      if (isRecv(step(id).kind) && partner_[id] == UINT32_MAX) {
        return fail(strprintf("%s has no matching Send", where(id).c_str()));
      }
    }
    return true;
  }

  // ---- Barriers and the Shared memory ----

  // The k-th Barrier of every rank's lane 0 meet: every rank needs as many, on one host.
  bool matchBarriers() {
    barrierOf_.assign(stepCount_, UINT32_MAX);
    barriers_.clear();
    int firstRank = -1;
    for (const LaneRef& l : lanes_) {
      if (l.lane != 0) continue;
      const auto& steps = plans_[size_t(l.rank)].lanes[0].steps;
      uint32_t k = 0;
      for (uint32_t i = 0; i < steps.size(); ++i) {
        if (steps[i].kind != StepKind::Barrier) continue;
        if (barriers_.size() <= k) barriers_.emplace_back();
        barriers_[k].push_back(l.first + i);
        barrierOf_[l.first + i] = k++;
      }
      if (k > 0 && firstRank < 0) firstRank = l.rank;
      if (k > 0 && hostOf(l.rank) != hostOf(firstRank)) {
        return fail(
            strprintf("rank %d and rank %d have Barrier steps but are on different hosts "
                      "(a barrier joins the ranks of one host's Shared arena)",
                      firstRank, l.rank));
      }
    }
    for (uint32_t k = 0; k < barriers_.size(); ++k) {
      if (barriers_[k].size() == size_t(n_)) continue;
      std::vector<uint8_t> has(size_t(n_), 0);
      for (uint32_t id : barriers_[k]) has[size_t(rankOf(id))] = 1;
      const int missing = int(std::find(has.begin(), has.end(), 0) - has.begin());
      return fail(
          strprintf("%s has no matching Barrier on rank %d, which has only %u (every rank "
                    "must pass the same barriers)",
                    where(barriers_[k][0]).c_str(), missing, k));
    }
    return true;
  }

  // A Barrier's flags in Shared (plan.h): the same place on every rank, 8 aligned bytes per
  // rank inside the Shared buffer. (That no one touches them while they matter is a race
  // checkSharedRaces finds.)
  bool checkBarrierFlags() {
    if (!args_) return true;
    const uint64_t es = std::max<uint32_t>(1, arg(0).elemSize);
    const uint64_t sharedElems = ranks_[0].bufs[kShared].size;
    for (const std::vector<uint32_t>& ids : barriers_) {
      const Region w = step(ids[0]).src;
      for (uint32_t id : ids) {
        if (!(step(id).src == w))
          return fail(strprintf("%s puts its flags elsewhere than %s: every rank must name the "
                                "same place",
                                where(id).c_str(), where(ids[0]).c_str()));
      }
      if (w.count > 0 && (w.offset * es % 8 != 0 || w.count * es < 8 || w.count * es % 8 != 0 ||
                          w.offset + uint64_t(n_) * w.count > sharedElems))
        return fail(strprintf("%s: flags every %llu elements from Shared element %llu are not "
                              "8-byte aligned, or do not fit in Shared's %llu elements",
                              where(ids[0]).c_str(), (unsigned long long)w.count,
                              (unsigned long long)w.offset, (unsigned long long)sharedElems));
    }
    return true;
  }

  // Between two barriers the ranks of a host run concurrently: no rank may write Shared
  // elements that another rank reads or writes in the same phase. A Barrier's flag in Shared
  // is written as its rank arrives and read until every rank has passed: an access of the
  // phases before and after that Barrier, by an actor of its own. Likewise peers' buffers
  // (plan.h, peerBuffer): they are read only after the first barrier (every rank is in the
  // call) and before the last (a rank past it may return and reuse its buffers), and between
  // two barriers nobody reads what the owner writes. Plans that read peers have one lane, so
  // the barrier count of lane 0 places every access of such a rank in a phase.
  bool checkSharedRaces() {
    if (!args_) return true;
    std::vector<RangeAccess> shared, owned;
    for (const LaneRef& l : lanes_) {
      if (l.lane != 0) continue;
      const auto& steps = plans_[size_t(l.rank)].lanes[0].steps;
      const bool readByPeers = plans_[size_t(l.rank)].readByPeers;
      const uint64_t barriers = uint64_t(std::count_if(
          steps.begin(), steps.end(), [](const Step& s) { return s.kind == StepKind::Barrier; }));
      uint64_t phase = 0;
      for (uint32_t i = 0; i < steps.size(); ++i) {
        phase += steps[i].kind == StepKind::Barrier;
        const Region& src = steps[i].src;
        if (steps[i].kind == StepKind::Barrier && src.count > 0) {
          const uint64_t es = std::max<uint32_t>(1, arg(l.rank).elemSize);
          const uint64_t at = src.offset + uint64_t(l.rank) * src.count, end = at + (8 + es - 1) / es;
          const uint32_t flagActor = uint32_t(n_) + barrierOf_[l.first + i];
          for (uint64_t p : {phase - 1, phase})
            shared.push_back({uint64_t(hostOf(l.rank)) << 32 | p, at, end, flagActor,
                              l.first + i, true});
          continue;
        }
        if (collectives::isPeerBuffer(src.buf) && src.count > 0 &&
            (phase == 0 || phase >= barriers)) {
          return fail(strprintf("%s: reads %s %s", where(l.first + i).c_str(),
                                bufferLabel(src.buf).c_str(),
                                phase == 0 ? "before the plan's first Barrier (the peer may not "
                                             "be in the call yet)"
                                           : "after the plan's last Barrier (the peer may "
                                             "have returned)"));
        }
        forEachAccess(l.rank, steps[i], [&](const Loc& loc, bool write) {
          const uint32_t actor = uint32_t(l.rank), id = l.first + i;
          if (loc.mem == kShared) {
            shared.push_back({uint64_t(hostOf(l.rank)) << 32 | phase, loc.off,
                              loc.off + loc.count, actor, id, write});
          } else if (loc.rank != l.rank || readByPeers) {
            owned.push_back({uint64_t(loc.rank) << 40 | uint64_t(loc.mem) << 32 | phase, loc.off,
                             loc.off + loc.count, actor, id, write});
          }
        });
      }
    }
    return noRace(shared,
                  "touch the same Shared elements between the same two barriers, one of them "
                  "writing: a race") &&
           noRace(owned,
                  "touch the same elements of a rank's buffer between the same two barriers, "
                  "one of them its owner writing: a race");
  }

  // ---- Dependencies ----

  // For each step, the later steps of its lane that wait for it (conflicts and FIFO order),
  // as a compressed list, and how many steps each waits for.
  bool buildDependencies() {
    pending_.assign(stepCount_, 0);
    depStart_.assign(stepCount_ + 1, 0);
    depTargets_.clear();
    std::vector<AccessHistory> history;
    std::unordered_map<uint64_t, uint32_t> lastOnChannel;
    std::vector<std::pair<uint32_t, uint32_t>> edges;  // (earlier, later), global ids
    std::vector<uint32_t> deps;
    for (const LaneRef& l : lanes_) {
      const auto& steps = plans_[size_t(l.rank)].lanes[size_t(l.lane)].steps;
      history.resize(ranks_[size_t(l.rank)].mems.size());
      for (AccessHistory& h : history) h.clear();
      lastOnChannel.clear();
      edges.clear();
      // A Barrier waits for every earlier step of its lane; every later step waits for it.
      uint32_t lastBarrier = UINT32_MAX, sinceBarrier = l.first;
      for (uint32_t i = 0; i < steps.size(); ++i) {
        const Step& s = steps[i];
        const uint32_t id = l.first + i;
        deps.clear();
        if (lastBarrier != UINT32_MAX) deps.push_back(lastBarrier);
        if (s.kind == StepKind::Barrier) {
          for (uint32_t e = sinceBarrier; e < id; ++e) deps.push_back(e);
          lastBarrier = id;
          sinceBarrier = id + 1;
        }
        forEachAccess(l.rank, s, [&](const Loc& loc, bool write) {
          // A peer's buffer orders nothing on this lane; the barriers order it (checkPeerRaces).
          if (loc.rank != l.rank) return;
          AccessHistory& h = history[loc.mem];
          if (write) {
            h.write(loc.off, loc.off + loc.count, id, deps);
          } else {
            h.read(loc.off, loc.off + loc.count, id, deps);
          }
        });
        if (isComm(s.kind)) {
          const uint64_t key = uint64_t(s.peer) * 2 + (s.kind == StepKind::Send ? 0 : 1);
          auto [it, first] = lastOnChannel.try_emplace(key, id);
          if (!first) {
            deps.push_back(it->second);
            it->second = id;
          }
        }
        std::sort(deps.begin(), deps.end());
        deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
        for (uint32_t d : deps) {
          if (d == id) continue;
          edges.emplace_back(d, id);
          ++pending_[id];
        }
      }
      // Group the edges by their earlier step: a counting sort, as ids are dense in a lane.
      const uint32_t base = uint32_t(depTargets_.size());
      std::vector<uint32_t>& starts = laneStarts_;
      starts.assign(steps.size() + 1, 0);
      for (const auto& [from, to] : edges) ++starts[from - l.first + 1];
      starts[0] = base;
      for (size_t i = 1; i < starts.size(); ++i) starts[i] += starts[i - 1];
      for (uint32_t i = 0; i < steps.size(); ++i) depStart_[l.first + i] = starts[i];
      depTargets_.resize(base + edges.size());
      for (const auto& [from, to] : edges) depTargets_[starts[from - l.first]++] = to;
    }
    depStart_[stepCount_] = uint32_t(depTargets_.size());
    return true;
  }

  // ---- Symbolic execution ----

  bool execute() {
    done_.assign(stepCount_, 0);
    ready_.assign(stepCount_, 0);
    level_.assign(stepCount_, 0);
    std::vector<uint32_t> todo;
    for (uint32_t id = 0; id < stepCount_; ++id) {
      if (pending_[id] == 0) todo.push_back(id);
    }
    uint32_t completed = 0;
    while (!todo.empty()) {
      const uint32_t id = todo.back();
      todo.pop_back();
      const Step& s = step(id);
      if (s.kind == StepKind::Barrier) {
        completed += arriveAtBarrier(id, todo);
        continue;
      }
      if (!isComm(s.kind)) {
        RETURN_IF_FAILED(applyLocal(id));
        completed += complete(id, todo);
        continue;
      }
      ready_[id] = 1;
      const uint32_t other = partner_[id];
      if (!ready_[other]) continue;
      const uint32_t send = s.kind == StepKind::Send ? id : other;
      RETURN_IF_FAILED(transfer(send, partner_[send]));
      const uint32_t level = std::max(level_[id], level_[other]) + 1;
      level_[id] = level_[other] = level;
      result_.rounds = std::max<uint64_t>(result_.rounds, level);
      completed += complete(id, todo);
      completed += complete(other, todo);
    }
    if (completed < stepCount_) return reportDeadlock(completed);
    return true;
  }

  // Completes the barrier once its last rank arrives; a barrier is one round.
  uint32_t arriveAtBarrier(uint32_t id, std::vector<uint32_t>& todo) {
    ready_[id] = 1;
    const std::vector<uint32_t>& members = barriers_[barrierOf_[id]];
    for (uint32_t m : members) {
      if (!ready_[m]) return 0;
    }
    uint32_t level = 0;
    for (uint32_t m : members) level = std::max(level, level_[m]);
    result_.rounds = std::max<uint64_t>(result_.rounds, level + 1);
    uint32_t completed = 0;
    for (uint32_t m : members) {
      level_[m] = level + 1;
      completed += complete(m, todo);
    }
    return completed;
  }

  uint32_t complete(uint32_t id, std::vector<uint32_t>& todo) {
    done_[id] = 1;
    order_.push_back(id);
    for (uint32_t e = depStart_[id]; e < depStart_[id + 1]; ++e) {
      const uint32_t d = depTargets_[e];
      level_[d] = std::max(level_[d], level_[id]);
      if (--pending_[d] == 0) todo.push_back(d);
    }
    return 1;
  }

  Memory& memory(int rank, const Loc& loc) {
    if (args_ && loc.mem == kShared) return hostMems_[size_t(hostOf(rank))];
    return ranks_[size_t(loc.rank)].mems[loc.mem];
  }

  // Reads a region, failing on elements nobody wrote.
  bool readDefined(uint32_t id, int rank, const Region& reg, std::vector<Run>& out) {
    const Loc loc = resolve(rank, reg);
    memory(rank, loc).read(loc.off, loc.count, out);
    uint64_t pos = reg.offset;
    for (const Run& r : out) {
      if (!r.v.defined()) {
        return fail(strprintf("%s reads %s[%llu] on rank %d, which nobody wrote", where(id).c_str(),
                              bufferLabel(reg.buf).c_str(), (unsigned long long)pos, rank));
      }
      pos += r.len;
    }
    return true;
  }

  void writeRegion(int rank, const Region& reg, const std::vector<Run>& runs) {
    const Loc loc = resolve(rank, reg);
    memory(rank, loc).write(loc.off, runs);
  }

  // out = a ⊕ b, elementwise; `dst` (for messages) is where the result goes.
  bool combine(uint32_t id, const Region& dst, const std::vector<Run>& a, const std::vector<Run>& b,
               std::vector<Run>& out) {
    out.clear();
    size_t i = 0, j = 0;
    uint64_t usedA = 0, usedB = 0;
    for (uint64_t pos = dst.offset; i < a.size() && j < b.size();) {
      const Value x = a[i].v.advanced(usedA), y = b[j].v.advanced(usedB);
      const uint64_t len = std::min(a[i].len - usedA, b[j].len - usedB);
      auto failAt = [&](const char* what) {
        return fail(strprintf("%s: at %s[%llu] %s: %s with %s", where(id).c_str(),
                              bufferLabel(dst.buf).c_str(), (unsigned long long)pos, what,
                              describe(x).c_str(), describe(y).c_str()));
      };
      if (x.origin != y.origin || x.index != y.index) return failAt("combines different elements");
      const std::optional<uint32_t> ranks = sets_.unite(x.ranks, y.ranks);
      if (!ranks) return failAt("counts some ranks twice");
      const Run r{len, {x.origin, *ranks, x.index}};
      if (!out.empty() && continues(out.back(), r)) {
        out.back().len += len;
      } else {
        out.push_back(r);
      }
      pos += len;
      usedA += len;
      usedB += len;
      if (usedA == a[i].len) ++i, usedA = 0;
      if (usedB == b[j].len) ++j, usedB = 0;
    }
    return true;
  }

  bool applyLocal(uint32_t id) {
    const Step& s = step(id);
    const int rank = rankOf(id);
    if (isNoop(rank, s)) return true;
    RETURN_IF_FAILED(readDefined(id, rank, s.src, bufA_));
    if (s.kind == StepKind::Reduce) {
      RETURN_IF_FAILED(readDefined(id, rank, s.dst, bufB_));
      RETURN_IF_FAILED(combine(id, s.dst, bufB_, bufA_, out_));
      std::swap(bufA_, out_);
    }
    writeRegion(rank, s.dst, bufA_);
    return true;
  }

  bool transfer(uint32_t send, uint32_t recv) {
    const Step& s = step(send);
    const Step& r = step(recv);
    const int to = rankOf(recv);
    RETURN_IF_FAILED(readDefined(send, rankOf(send), s.src, bufA_));
    if (r.kind == StepKind::RecvReduce) {
      RETURN_IF_FAILED(readDefined(recv, to, r.src, bufB_));
      RETURN_IF_FAILED(combine(recv, r.dst, bufB_, bufA_, out_));
      std::swap(bufA_, out_);
    }
    writeRegion(to, r.dst, bufA_);
    return true;
  }

  // Names, for a few stuck lanes, the first step that never completed and what it waits for.
  bool reportDeadlock(uint32_t completed) {
    std::string msg =
        strprintf("deadlock: %u of %u steps never complete", stepCount_ - completed, stepCount_);
    int shown = 0;
    for (const LaneRef& l : lanes_) {
      const uint32_t size = uint32_t(plans_[size_t(l.rank)].lanes[size_t(l.lane)].steps.size());
      uint32_t id = l.first;
      while (id < l.first + size && done_[id]) ++id;
      if (id == l.first + size) continue;
      if (shown++ == 4) {
        msg += "; ...";
        break;
      }
      msg += "; " + where(id) + " waits for ";
      if (step(id).kind == StepKind::Barrier && ready_[id]) {
        for (uint32_t m : barriers_[barrierOf_[id]]) {
          if (!ready_[m]) {
            msg += strprintf("rank %d to reach its barrier %u", rankOf(m), barrierOf_[id]);
            break;
          }
        }
        continue;
      }
      const uint32_t other = partner_[id];
      if (other == UINT32_MAX) {
        msg += "an earlier step";
        continue;
      }
      msg += where(other);
      if (const std::optional<uint32_t> blocker = blockerOf(other)) {
        msg += strprintf(", which waits for its lane's step %u",
                         *blocker - lanes_[laneOf_[*blocker]].first);
      }
    }
    return fail(msg);
  }

  // An unfinished earlier step that `id` waits for, if any.
  std::optional<uint32_t> blockerOf(uint32_t id) const {
    const uint32_t first = lanes_[laneOf_[id]].first;
    for (uint32_t e = first; e < id; ++e) {
      if (done_[e]) continue;
      for (uint32_t k = depStart_[e]; k < depStart_[e + 1]; ++k) {
        if (depTargets_[k] == id) return e;
      }
    }
    return std::nullopt;
  }

  // ---- Fan-in ----

  // For each receiver, the data messages into it and, for each, the set of them that complete
  // before its Send may start (propagated along the completion order, which is topological);
  // then the largest antichain of that order, as M minus a maximum matching (Kuhn).
  bool measureFanIn() {
    if (!fanIn_) return true;
    std::vector<std::vector<uint32_t>> into(static_cast<size_t>(n_));  // Send ids, per receiver
    for (uint32_t id = 0; id < stepCount_; ++id) {
      const Step& s = step(id);
      if (s.kind == StepKind::Send && s.src.count > controlElements_) {
        into[size_t(rankOf(partner_[id]))].push_back(id);
      }
    }
    std::vector<uint32_t> message(stepCount_, UINT32_MAX);
    std::vector<uint64_t> before;
    std::vector<uint8_t> seen;
    for (int r = 0; r < n_; ++r) {
      const auto& sends = into[size_t(r)];
      const size_t m = sends.size(), words = (m + 63) / 64;
      if (m <= result_.maxFanIn) continue;
      for (size_t i = 0; i < m; ++i) message[sends[i]] = uint32_t(i);
      before.assign(size_t(stepCount_) * words, 0);
      seen.assign(stepCount_, 0);
      std::vector<std::vector<uint64_t>> past(m);
      auto set = [&](uint32_t id) { return before.data() + size_t(id) * words; };
      auto propagate = [&](uint32_t id, const uint64_t* bits) {
        for (uint32_t e = depStart_[id]; e < depStart_[id + 1]; ++e) {
          uint64_t* d = set(depTargets_[e]);
          for (size_t w = 0; w < words; ++w) d[w] |= bits[w];
        }
      };
      std::vector<uint64_t> after(words);
      for (uint32_t id : order_) {
        if (seen[id]) continue;
        seen[id] = 1;
        if (step(id).kind == StepKind::Barrier) {
          // Whatever precedes any rank's arrival precedes every rank's departure.
          std::fill(after.begin(), after.end(), 0);
          for (uint32_t b : barriers_[barrierOf_[id]]) {
            for (size_t w = 0; w < words; ++w) after[w] |= set(b)[w];
          }
          for (uint32_t b : barriers_[barrierOf_[id]]) seen[b] = 1, propagate(b, after.data());
          continue;
        }
        if (!isComm(step(id).kind)) {
          propagate(id, set(id));
          continue;
        }
        const uint32_t other = partner_[id];
        seen[other] = 1;
        const uint32_t send = step(id).kind == StepKind::Send ? id : other;
        for (size_t w = 0; w < words; ++w) after[w] = set(id)[w] | set(other)[w];
        if (message[send] != UINT32_MAX && rankOf(partner_[send]) == r) {
          past[message[send]].assign(set(send), set(send) + words);
          after[message[send] / 64] |= uint64_t(1) << (message[send] % 64);
        }
        propagate(id, after.data());
        propagate(other, after.data());
      }
      for (uint32_t id : sends) message[id] = UINT32_MAX;
      const uint64_t antichain = m - maxMatching(past);
      if (antichain > result_.maxFanIn) {
        result_.maxFanIn = antichain;
        result_.fanInRank = r;
      }
    }
    return true;
  }

  // A maximum matching of i → j (i completes before j starts), bit i of past[j].
  static size_t maxMatching(const std::vector<std::vector<uint64_t>>& past) {
    const size_t m = past.size();
    std::vector<int> matchOf(m, -1);  // j → the i matched to it
    std::vector<uint8_t> visited;
    std::function<bool(size_t)> augment = [&](size_t i) {
      for (size_t j = 0; j < m; ++j) {
        if (visited[j] || !(past[j][i / 64] >> (i % 64) & 1)) continue;
        visited[j] = 1;
        if (matchOf[j] < 0 || augment(size_t(matchOf[j]))) {
          matchOf[j] = int(i);
          return true;
        }
      }
      return false;
    };
    size_t matched = 0;
    for (size_t i = 0; i < m; ++i) {
      visited.assign(m, 0);
      if (augment(i)) ++matched;
    }
    return matched;
  }

  // ---- Postconditions ----

  bool checkResults() {
    std::vector<Expectation> expect;
    for (int r = 0; r < n_; ++r) {
      expect.clear();
      RETURN_IF_FAILED(expectations(r, expect));
      for (const Expectation& e : expect) {
        const Loc loc = resolve(r, {e.buf, e.off, e.count});
        memory(r, loc).read(loc.off, loc.count, bufA_);
        uint64_t pos = 0;
        for (const Run& run : bufA_) {
          const Value want = e.v.advanced(pos);
          if (!(run.v == want)) {
            return fail(strprintf("rank %d %s[%llu] holds %s, expected %s", r,
                                  bufferLabel(e.buf).c_str(), (unsigned long long)(e.off + pos),
                                  describe(run.v).c_str(), describe(want).c_str()));
          }
          pos += run.len;
        }
      }
    }
    return true;
  }

  bool expectations(int r, std::vector<Expectation>& out) {
    if (!args_) return p2pExpectations(r, out);
    const CollArgs& a = arg(r);
    const uint64_t count = a.count;
    const uint32_t all = sets_.range(0, n_);
    auto from = [&](int j) { return sets_.range(j, j + 1); };
    switch (coll_) {
      case Collective::AllReduce:
        out.push_back({kOutput, 0, count, {kInput, all, 0}});
        break;
      case Collective::ReduceScatter:
        out.push_back({kOutput, 0, count, {kInput, all, uint64_t(r) * count}});
        break;
      case Collective::Reduce:
        if (r == a.root) out.push_back({kOutput, 0, count, {kInput, all, 0}});
        break;
      case Collective::Broadcast:
        out.push_back({kOutput, 0, count, {kInput, from(a.root), 0}});
        break;
      case Collective::AllGather:
        for (int j = 0; j < n_; ++j) {
          out.push_back({kOutput, uint64_t(j) * count, count, {kInput, from(j), 0}});
        }
        break;
      case Collective::AlltoAll:
        for (int j = 0; j < n_; ++j) {
          out.push_back(
              {kOutput, uint64_t(j) * count, count, {kInput, from(j), uint64_t(r) * count}});
        }
        break;
      case Collective::Gather:
        for (int j = 0; j < n_ && r == a.root; ++j)
          out.push_back({kOutput, uint64_t(j) * count, count, {kInput, from(j), 0}});
        break;
      case Collective::Scatter:
        out.push_back({kOutput, 0, count, {kInput, from(a.root), uint64_t(r) * count}});
        break;
      case Collective::AlltoAllv:
        for (int j = 0; j < n_; ++j) {
          out.push_back({kOutput,
                         a.recvDispls[size_t(j)],
                         a.recvCounts[size_t(j)],
                         {kInput, from(j), arg(j).sendDispls[size_t(r)]}});
        }
        break;
      case Collective::SendRecv:
        break;
    }
    return true;
  }

  // The k-th receive from p must hold p's k-th send to this rank.
  bool p2pExpectations(int r, std::vector<Expectation>& out) {
    const auto& ops = (*ops_)[size_t(r)];
    std::unordered_map<int, size_t> received;
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].kind != P2POp::Kind::Recv) continue;
      const int p = ops[i].peer;
      const size_t k = received[p]++;
      const auto& theirs = (*ops_)[size_t(p)];
      size_t seen = 0, m = 0;
      for (; m < theirs.size(); ++m) {
        if (theirs[m].kind == P2POp::Kind::Send && theirs[m].peer == r && seen++ == k) break;
      }
      if (m == theirs.size() || theirs[m].bytes != ops[i].bytes) {
        return fail(
            strprintf("rank %d op %zu receives %llu bytes from rank %d, which sends no "
                      "such message",
                      r, i, (unsigned long long)ops[i].bytes, p));
      }
      out.push_back({uint32_t(kFirstUserBuffer + i),
                     0,
                     ops[i].bytes,
                     {uint32_t(kFirstUserBuffer + m), sets_.range(p, p + 1), 0}});
    }
    return true;
  }

  struct RankState {
    std::vector<BufferMap> bufs;
    std::vector<Memory> mems;
  };

  const std::vector<CollArgs>* args_;           // null for a p2p group
  const std::vector<std::vector<P2POp>>* ops_;  // null for a collective
  const std::vector<RankPlan>& plans_;
  const bool inPlace_;
  int n_ = 0;
  Collective coll_;
  VerifyResult result_;
  RankSets sets_;
  std::vector<RankState> ranks_;
  std::vector<Memory> hostMems_;  // the Shared memory of each host

  // Every step of every lane has a global id; lanes_ lists the lanes in rank order.
  std::vector<LaneRef> lanes_;
  std::vector<uint32_t> laneOf_;
  std::vector<const Step*> steps_;
  uint32_t stepCount_ = 0;
  std::vector<uint32_t> partner_;                // the matching Send or receive of a message step
  std::vector<uint32_t> barrierOf_;              // k for the k-th Barrier of a lane 0
  std::vector<std::vector<uint32_t>> barriers_;  // the k-th Barrier of every rank
  std::vector<uint32_t> pending_;                // earlier steps still to complete
  std::vector<uint32_t> depStart_, depTargets_;
  std::vector<uint32_t> laneStarts_;
  std::vector<uint8_t> done_, ready_;
  std::vector<uint32_t> level_;  // messages on the longest chain that ends here
  std::vector<Run> bufA_, bufB_, out_;
  std::vector<uint32_t> order_;  // steps in the order they completed
  bool fanIn_ = false;
  uint64_t controlElements_ = 0;
};

}  // namespace

VerifyResult verifyPlans(const std::vector<CollArgs>& args, const std::vector<RankPlan>& plans,
                         bool inPlace) {
  return Verifier(&args, nullptr, plans, inPlace).run();
}

VerifyResult verifyP2PPlans(const std::vector<std::vector<P2POp>>& ops,
                            const std::vector<RankPlan>& plans) {
  return Verifier(nullptr, &ops, plans, false).run();
}

VerifyResult verifyBuilder(const collectives::Builder& b, const std::vector<CollArgs>& args,
                           bool inPlace) {
  std::vector<RankPlan> plans;
  plans.reserve(args.size());
  for (size_t r = 0; r < args.size(); ++r) plans.push_back(b.build(args[r], int(r)));
  return verifyPlans(args, plans, inPlace);
}

VerifyResult verifyBuilder(const collectives::Builder& b, const CollArgs& a, bool inPlace) {
  return verifyBuilder(b, std::vector<CollArgs>(size_t(a.nranks), a), inPlace);
}

VerifyResult verifyPlansFanIn(const std::vector<CollArgs>& args, const std::vector<RankPlan>& plans,
                              uint64_t controlElements) {
  Verifier v(&args, nullptr, plans, false);
  v.measureFanInToo(controlElements);
  return v.run();
}

VerifyResult verifyBuilderFanIn(const collectives::Builder& b, const std::vector<CollArgs>& args,
                                uint64_t controlElements) {
  std::vector<RankPlan> plans;
  plans.reserve(args.size());
  for (size_t r = 0; r < args.size(); ++r) plans.push_back(b.build(args[r], int(r)));
  return verifyPlansFanIn(args, plans, controlElements);
}

VerifyResult verifyP2P(const std::vector<std::vector<P2POp>>& ops) {
  std::vector<RankPlan> plans;
  plans.reserve(ops.size());
  for (const auto& rankOps : ops) plans.push_back(collectives::buildP2P(rankOps));
  return verifyP2PPlans(ops, plans);
}

}  // namespace loom::test
