// Recursive halving and doubling: Rabenseifner allreduce ("rhd"), recursive doubling allreduce
// and allgather ("rd"), recursive halving reduce-scatter ("rh"), and Bruck allgather ("bruck").
#include <algorithm>

#include "collectives/builders_reduce.h"

namespace loom::collectives {

namespace {

// The fold of N ranks onto p = 2^lg virtual ranks: ranks r < 2e pair up (r even, r+1), the
// odd one acting as virtual rank r/2 for both; ranks from 2e on are virtual rank r − e.
struct Fold {
  int n = 1, p = 1, lg = 0, extra = 0;
  int vrank = 0;     // this rank's virtual rank; -1 when it sits out
  int partner = -1;  // the other rank of its pair, if it has one
  // The rank that acts as virtual rank v.
  int actor(int v) const { return v < extra ? 2 * v + 1 : v + extra; }
  // The first of the (contiguous) ranks whose blocks virtual rank v stands for; first(p) = n.
  int first(int v) const { return v < extra ? 2 * v : v + extra; }
};

Fold foldOf(int n, int rank) {
  Fold f;
  f.n = n;
  while (f.p * 2 <= n) f.p *= 2, ++f.lg;
  f.extra = n - f.p;
  if (rank < 2 * f.extra) {
    f.partner = rank ^ 1;
    f.vrank = rank % 2 == 0 ? -1 : rank / 2;
  } else {
    f.vrank = rank - f.extra;
  }
  return f;
}

// A folded-out rank hands its data to its partner and receives the result.
void sitOut(Lane& lane, const Fold& f, Region mine, Region result) {
  addSend(lane, f.partner, mine);
  addRecv(lane, f.partner, result);
}

Region slot(uint64_t count, int k, uint64_t base, uint64_t len) {
  return {kScratch, uint64_t(k) * count + base, len};
}

}  // namespace

RankPlan buildRhdAllReduce(const CollArgs& a, int rank) {
  const Fold f = foldOf(a.nranks, rank);
  const int lanes = usableLanes(a.count, uint64_t(f.p), a.nranks == 1 ? 1 : a.lanes);
  return splitIntoLanes("rhd", a.count, lanes, [&](Lane& lane, uint64_t base, uint64_t len) {
    const uint64_t p = uint64_t(f.p);
    // Chunks [lo, hi) of this lane's part in buffer buf.
    auto chunks = [&](uint32_t buf, int lo, int hi) {
      const uint64_t from = partOffset(len, p, uint64_t(lo));
      return Region{buf, base + from, partOffset(len, p, uint64_t(hi)) - from};
    };
    const Region in = chunks(kInput, 0, f.p), out = chunks(kOutput, 0, f.p);
    if (a.nranks == 1) return addCopy(lane, in, out);
    if (f.vrank < 0) return sitOut(lane, f, in, out);
    uint32_t cur = kInput;  // where this rank's partial sums are
    if (f.partner >= 0) addRecvReduce(lane, f.partner, in, out), cur = kOutput;
    const int v = f.vrank;
    // Halving: keep the half of the current range on this rank's side of bit d. Each
    // RecvReduce reads Input for the last time as it first writes those Output elements.
    int lo = 0;
    for (int d = f.p / 2; d >= 1; d /= 2) {
      const int peer = f.actor(v ^ d);
      const int keep = (v & d) ? lo + d : lo, give = (v & d) ? lo : lo + d;
      addSend(lane, peer, chunks(cur, give, give + d));
      addRecvReduce(lane, peer, chunks(cur, keep, keep + d), chunks(kOutput, keep, keep + d));
      lo = keep, cur = kOutput;
    }
    // Doubling: swap the owned range (d chunks, aligned) for the partner's.
    for (int d = 1; d < f.p; d *= 2) {
      const int peer = f.actor(v ^ d);
      const int own = v & ~(d - 1), theirs = own ^ d;
      addSend(lane, peer, chunks(kOutput, own, own + d));
      addRecv(lane, peer, chunks(kOutput, theirs, theirs + d));
    }
    if (f.partner >= 0) addSend(lane, f.partner, out);
  });
}

RankPlan buildRdAllReduce(const CollArgs& a, int rank) {
  const Fold f = foldOf(a.nranks, rank);
  const uint64_t count = a.count;
  const int lanes = usableLanes(count, 1, a.nranks == 1 ? 1 : a.lanes);
  RankPlan plan = splitIntoLanes("rd", count, lanes, [&](Lane& lane, uint64_t base, uint64_t len) {
    const Region in{kInput, base, len}, out{kOutput, base, len};
    if (a.nranks == 1) return addCopy(lane, in, out);
    if (f.vrank < 0) return sitOut(lane, f, in, out);
    Region work = in;
    if (f.partner >= 0) addRecvReduce(lane, f.partner, in, out), work = out;
    for (int k = 0; k < f.lg; ++k) {
      // The partner's data goes to Scratch, never to the buffer being sent (in place that
      // would wait on the send, which waits on the peer doing the same: a deadlock).
      const bool last = k + 1 == f.lg;
      const Region dst = last && work.buf == kScratch ? out : slot(count, k % 2, base, len);
      const int peer = f.actor(f.vrank ^ (1 << k));
      addSend(lane, peer, work);
      addRecv(lane, peer, dst);
      addReduce(lane, work, dst);
      work = dst;
    }
    if (work.buf != kOutput) addCopy(lane, work, out);
    if (f.partner >= 0) addSend(lane, f.partner, out);
  });
  plan.scratchCount = uint64_t(std::min(f.lg, 2)) * count;
  return plan;
}

RankPlan buildRdAllGather(const CollArgs& a, int rank) {
  const Fold f = foldOf(a.nranks, rank);
  const uint64_t count = a.count;
  RankPlan plan = splitIntoLanes("rd", count, 1, [&](Lane& lane, uint64_t, uint64_t) {
    // The blocks virtual ranks [lo, hi) stand for: contiguous by construction of the fold.
    auto blocks = [&](int lo, int hi) {
      const uint64_t from = uint64_t(f.first(lo)) * count;
      return Region{kOutput, from, uint64_t(f.first(hi)) * count - from};
    };
    const Region in{kInput, 0, count}, all = blocks(0, f.p);
    if (f.vrank < 0) return sitOut(lane, f, in, all);
    addCopy(lane, in, Region{kOutput, uint64_t(rank) * count, count});
    if (f.partner >= 0) {
      addRecv(lane, f.partner, Region{kOutput, uint64_t(f.partner) * count, count});
    }
    for (int d = 1; d < f.p; d *= 2) {
      const int peer = f.actor(f.vrank ^ d);
      const int own = f.vrank & ~(d - 1), theirs = own ^ d;
      addSend(lane, peer, blocks(own, own + d));
      addRecv(lane, peer, blocks(theirs, theirs + d));
    }
    if (f.partner >= 0) addSend(lane, f.partner, all);
  });
  return plan;
}

RankPlan buildBruckAllGather(const CollArgs& a, int rank) {
  const int n = a.nranks;
  const uint64_t count = a.count;
  RankPlan plan = splitIntoLanes("bruck", count, 1, [&](Lane& lane, uint64_t, uint64_t) {
    const Region in{kInput, 0, count};
    auto out = [&](int first, int blocks) {
      return Region{kOutput, uint64_t(first) * count, uint64_t(blocks) * count};
    };
    auto t = [&](int first, int blocks) {
      return Region{kScratch, uint64_t(first) * count, uint64_t(blocks) * count};
    };
    addCopy(lane, in, out(rank, 1));  // the executor skips it in place
    if (n == 1) return;
    addCopy(lane, in, t(0, 1));
    for (int d = 1; d < n; d *= 2) {
      const int m = std::min(d, n - d);
      addSend(lane, wrap(rank - d, n), t(0, m));
      addRecv(lane, wrap(rank + d, n), t(d, m));
    }
    // T[i] holds block (rank + i) mod n: rotate it into place around the own block.
    addCopy(lane, t(1, n - rank - 1), out(rank + 1, n - rank - 1));
    addCopy(lane, t(n - rank, rank), out(0, rank));
  });
  plan.scratchCount = n > 1 ? uint64_t(n) * count : 0;
  return plan;
}

RankPlan buildRhReduceScatter(const CollArgs& a, int rank) {
  const Fold f = foldOf(a.nranks, rank);
  const uint64_t count = a.count, n = uint64_t(a.nranks);
  RankPlan plan = splitIntoLanes("rh", count, 1, [&](Lane& lane, uint64_t, uint64_t) {
    auto blocks = [&](uint32_t buf, int lo, int hi) {
      const uint64_t from = uint64_t(f.first(lo)) * count;
      return Region{buf, from, uint64_t(f.first(hi)) * count - from};
    };
    auto block = [&](uint32_t buf, int r) { return Region{buf, uint64_t(r) * count, count}; };
    const Region result{kOutput, 0, count};
    if (n == 1) return addCopy(lane, block(kInput, 0), result);
    if (f.vrank < 0) return sitOut(lane, f, Region{kInput, 0, n * count}, result);
    uint32_t cur = kInput;
    if (f.partner >= 0) {
      addRecvReduce(lane, f.partner, Region{kInput, 0, n * count}, Region{kScratch, 0, n * count});
      cur = kScratch;
    }
    // Halving over virtual ranks; sums of kept blocks go to Scratch (Input is read-only), the
    // last straight to Output when this rank keeps only its own block. In place Output is
    // Input block r, which that last step reads for the last time.
    int lo = 0;
    for (int d = f.p / 2; d >= 1; d /= 2) {
      const int peer = f.actor(f.vrank ^ d);
      const int keep = (f.vrank & d) ? lo + d : lo, give = (f.vrank & d) ? lo : lo + d;
      addSend(lane, peer, blocks(cur, give, give + d));
      const Region dst =
          d == 1 && f.partner < 0 ? result : blocks(kScratch, keep, keep + d);
      addRecvReduce(lane, peer, blocks(cur, keep, keep + d), dst);
      lo = keep, cur = kScratch;
    }
    if (f.partner >= 0) {
      addSend(lane, f.partner, block(kScratch, f.partner));
      addCopy(lane, block(kScratch, rank), result);
    }
  });
  plan.scratchCount = n > 2 ? n * count : 0;
  return plan;
}

}  // namespace loom::collectives
