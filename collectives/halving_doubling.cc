// Recursive halving and doubling: Rabenseifner allreduce ("rhd"), recursive doubling allreduce
// and allgather ("rd"), recursive halving reduce-scatter ("rh"), and Bruck allgather ("bruck").
#include <algorithm>
#include <vector>

#include "collectives/builders_reduce.h"

namespace loom::collectives {

namespace {

// The fold of N ranks onto p = 2^lg virtual ranks: ranks r < 2e pair up (r even, r+1), the
// odd one acting as virtual rank r/2 for both; ranks from 2e on are virtual rank r − e. The
// fold works on positions: a rank's position is the rank itself unless rankAt (position →
// rank, see hostMinorOrder) says otherwise.
struct Fold {
  int n = 1, p = 1, lg = 0, extra = 0;
  int vrank = 0;     // this rank's virtual rank; -1 when it sits out
  int partner = -1;  // the other rank of its pair, if it has one
  std::vector<int> rankAt;  // empty: position = rank
  int rankOf(int position) const { return rankAt.empty() ? position : rankAt[size_t(position)]; }
  // The rank that acts as virtual rank v.
  int actor(int v) const { return rankOf(v < extra ? 2 * v + 1 : v + extra); }
  // The first of the (contiguous) positions whose blocks virtual rank v stands for; first(p) = n.
  int first(int v) const { return v < extra ? 2 * v : v + extra; }
};

Fold foldOf(int n, int rank, std::vector<int> rankAt = {}) {
  Fold f;
  f.n = n;
  f.rankAt = std::move(rankAt);
  const auto& order = f.rankAt;
  const int pos =
      order.empty() ? rank : int(std::find(order.begin(), order.end(), rank) - order.begin());
  while (f.p * 2 <= n) f.p *= 2, ++f.lg;
  f.extra = n - f.p;
  if (pos < 2 * f.extra) {
    f.partner = f.rankOf(pos ^ 1);
    f.vrank = pos % 2 == 0 ? -1 : pos / 2;
  } else {
    f.vrank = pos - f.extra;
  }
  return f;
}

// Position → rank for the recursive algorithms on several hosts: position = local index · H
// + host, when N is a power of two and the H hosts have M > 1 ranks each (otherwise, and when
// that is the ranks' own order, empty: position = rank). Then bit k of a position is a host
// bit for k < lg H: the exchanges at distances below H cross hosts and the others stay within
// one. Doubling starts at distance 1 and halving ends there, so the messages that cross hosts
// are the smallest: per rank (H−1)·count elements of an allgather cross instead of M·(H−1)·count
// in host-major order, and the first exchange of a small allgather crosses at the call's start
// rather than after the exchanges within the host.
std::vector<int> hostMinorOrder(const CollArgs& a) {
  const int n = a.nranks;
  if (a.hostOf.empty() || (n & (n - 1)) != 0 || !refuseHierarchical(a).empty()) return {};
  const auto hosts = hostGroups(a);
  const size_t perHost = hosts[0].size();
  if (hosts.size() == 1 || perHost == 1) return {};
  std::vector<int> rankAt;
  bool same = true;
  for (size_t local = 0; local < perHost; ++local) {
    for (const auto& members : hosts) {
      same = same && members[local] == int(rankAt.size());
      rankAt.push_back(members[local]);
    }
  }
  return same ? std::vector<int>{} : rankAt;
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
  // Which chunk a virtual rank ends up with is the plan's own choice, so the host-minor order
  // costs nothing here.
  const Fold f = foldOf(a.nranks, rank, hostMinorOrder(a));
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
  const Fold f = foldOf(a.nranks, rank, hostMinorOrder(a));
  const uint64_t count = a.count;
  // In the host-minor order the blocks of a range of positions are not contiguous in Output:
  // the exchanges gather them in Scratch, position by position, and copies put them in place.
  const bool ordered = !f.rankAt.empty();
  RankPlan plan = splitIntoLanes("rd", count, 1, [&](Lane& lane, uint64_t, uint64_t) {
    // The blocks virtual ranks [lo, hi) stand for: contiguous by construction of the fold.
    auto blocks = [&](int lo, int hi) {
      const uint64_t from = uint64_t(f.first(lo)) * count;
      return Region{ordered ? kScratch : kOutput, from, uint64_t(f.first(hi)) * count - from};
    };
    auto outBlock = [&](int r) { return Region{kOutput, uint64_t(r) * count, count}; };
    const Region in{kInput, 0, count}, all = blocks(0, f.p);
    if (f.vrank < 0) return sitOut(lane, f, in, all);
    addCopy(lane, in, outBlock(rank));
    if (ordered) addCopy(lane, in, blocks(f.vrank, f.vrank + 1));
    if (f.partner >= 0) addRecv(lane, f.partner, outBlock(f.partner));
    for (int d = 1; d < f.p; d *= 2) {
      const int peer = f.actor(f.vrank ^ d);
      const int own = f.vrank & ~(d - 1), theirs = own ^ d;
      addSend(lane, peer, blocks(own, own + d));
      addRecv(lane, peer, blocks(theirs, theirs + d));
    }
    if (f.partner >= 0) addSend(lane, f.partner, all);
    for (int v = 0; ordered && v < f.p; ++v) {
      if (f.rankOf(v) != rank) addCopy(lane, blocks(v, v + 1), outBlock(f.rankOf(v)));
    }
  });
  plan.scratchCount = ordered ? uint64_t(a.nranks) * count : 0;
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
  const Fold f = foldOf(a.nranks, rank, hostMinorOrder(a));
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
    if (!f.rankAt.empty()) {
      // Host-minor order: the blocks go to Scratch position by position, so that a range of
      // positions is contiguous there.
      for (int v = 0; v < f.p; ++v) addCopy(lane, block(kInput, f.rankOf(v)), block(kScratch, v));
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
