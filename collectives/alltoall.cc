// Alltoall(v) builders beyond the foundation's pairwise shift: XOR pairing, Bruck, hierarchical
// and incast-aware scheduling (collectives/builders_exchange.h states each one's cost).
#include <algorithm>

#include "collectives/builders.h"
#include "collectives/builders_exchange.h"
#include "base/status.h"

namespace loom::collectives {

namespace {

// The blocks of one rank's alltoall or alltoallv call: send(j) is the Input region destined to
// rank j, recv(j) the Output region for the data from rank j.
struct Blocks {
  const CollArgs& a;
  bool varying() const { return a.coll == Collective::AlltoAllv; }
  Region send(int j) const {
    if (varying()) return {kInput, a.sendDispls[size_t(j)], a.sendCounts[size_t(j)]};
    return {kInput, uint64_t(j) * a.count, a.count};
  }
  Region recv(int j) const {
    if (varying()) return {kOutput, a.recvDispls[size_t(j)], a.recvCounts[size_t(j)]};
    return {kOutput, uint64_t(j) * a.count, a.count};
  }
};

bool isPowerOfTwo(int n) { return (n & (n - 1)) == 0; }

// Round k = 1..N−1 exchanges with r XOR k when N is a power of two (a perfect matching per
// round), else sends to r+k and receives from r−k. Both ends put round k on lane k % L.
RankPlan xorOrShift(const CollArgs& a, int rank) {
  const int n = a.nranks;
  const Blocks b{a};
  RankPlan plan;
  plan.algorithm = "xor";
  plan.lanes.resize(size_t(usableLanes(uint64_t(n - 1), 1, a.lanes)));
  addCopy(plan.lanes[0], b.send(rank), b.recv(rank));
  const bool pairs = isPowerOfTwo(n);
  for (int k = 1; k < n; ++k) {
    Lane& lane = plan.lanes[size_t(k) % plan.lanes.size()];
    const int to = pairs ? rank ^ k : wrap(rank + k, n);
    const int from = pairs ? rank ^ k : wrap(rank - k, n);
    addSend(lane, to, b.send(to));
    addRecv(lane, from, b.recv(from));
  }
  return plan;
}

// ---- Hosts ----

// Ranks grouped by host, each group in rank order; the first rank of a group leads it.
struct Hosts {
  std::vector<std::vector<int>> members;
  std::vector<int> host;   // per rank
  std::vector<int> local;  // per rank: its index within its host
};

Hosts groupByHost(const CollArgs& a) {
  const int n = a.nranks;
  Hosts h;
  h.host.assign(size_t(n), 0);
  h.local.assign(size_t(n), 0);
  std::vector<int> index(size_t(n), -1);  // host id → group, numbered by first appearance
  for (int r = 0; r < n; ++r) {
    const int id = a.hostOf.empty() ? 0 : a.hostOf[size_t(r)];
    if (index[size_t(id)] < 0) {
      index[size_t(id)] = int(h.members.size());
      h.members.emplace_back();
    }
    const int g = index[size_t(id)];
    h.host[size_t(r)] = g;
    h.local[size_t(r)] = int(h.members[size_t(g)].size());
    h.members[size_t(g)].push_back(r);
  }
  return h;
}

}  // namespace

// ---- XOR pairwise ----------------------------------------------------------------------------

RankPlan buildXorAlltoAll(const CollArgs& a, int rank) { return xorOrShift(a, rank); }
RankPlan buildXorAlltoAllv(const CollArgs& a, int rank) { return xorOrShift(a, rank); }

// ---- Bruck -----------------------------------------------------------------------------------

RankPlan buildBruckAlltoAll(const CollArgs& a, int rank) {
  const int n = a.nranks;
  const uint64_t c = a.count, r = uint64_t(rank), un = uint64_t(n);
  RankPlan plan;
  plan.algorithm = "bruck";
  plan.lanes.resize(1);
  Lane& lane = plan.lanes[0];
  if (n == 1) {
    addCopy(lane, {kInput, 0, c}, {kOutput, 0, c});
    return plan;
  }
  // Scratch: the rotated blocks, then a pack buffer for the outgoing and one for the incoming
  // blocks of a round (at most ⌈N/2⌉ indices have a given bit set).
  const uint64_t half = (un + 1) / 2, pack = un * c, unpack = pack + half * c;
  plan.scratchCount = c == 0 ? 0 : (un + 2 * half) * c;
  auto tmp = [&](uint64_t i) { return Region{kScratch, i * c, c}; };
  addCopy(lane, {kInput, r * c, (un - r) * c}, {kScratch, 0, (un - r) * c});
  addCopy(lane, {kInput, 0, r * c}, {kScratch, (un - r) * c, r * c});
  for (int d = 1; d < n; d <<= 1) {
    uint64_t m = 0;
    for (int i = 0; i < n; ++i) {
      if (i & d) addCopy(lane, tmp(uint64_t(i)), {kScratch, pack + c * m++, c});
    }
    addSend(lane, wrap(rank + d, n), {kScratch, pack, m * c});
    addRecv(lane, wrap(rank - d, n), {kScratch, unpack, m * c});
    m = 0;
    for (int i = 0; i < n; ++i) {
      if (i & d) addCopy(lane, {kScratch, unpack + c * m++, c}, tmp(uint64_t(i)));
    }
  }
  // Block i now holds what rank r − i sends to this rank.
  for (int i = 0; i < n; ++i) {
    addCopy(lane, tmp(uint64_t(i)), {kOutput, uint64_t(wrap(rank - i, n)) * c, c});
  }
  return plan;
}

// ---- Hierarchical ----------------------------------------------------------------------------

std::string refuseHierarchicalAlltoAll(const CollArgs& a) {
  if (a.hostOf.empty()) return "";
  if (a.hostOf.size() != size_t(a.nranks)) {
    return strprintf("hostOf has %zu entries for %d ranks", a.hostOf.size(), a.nranks);
  }
  for (size_t r = 0; r < a.hostOf.size(); ++r) {
    if (a.hostOf[r] < 0 || a.hostOf[r] >= a.nranks) {
      return strprintf("hostOf[%zu] = %d is not a host index below %d", r, int(a.hostOf[r]),
                       a.nranks);
    }
  }
  return "";
}

RankPlan buildHierarchicalAlltoAll(const CollArgs& a, int rank) {
  const int n = a.nranks;
  const uint64_t c = a.count, row = uint64_t(n) * c;  // row: one rank's whole Input
  const Hosts h = groupByHost(a);
  const int me = h.host[size_t(rank)];
  const std::vector<int>& mine = h.members[size_t(me)];
  const uint64_t l = mine.size();
  RankPlan plan;
  plan.algorithm = "hierarchical";
  plan.lanes.resize(1);
  Lane& lane = plan.lanes[0];
  if (mine[0] != rank) {
    addSend(lane, mine[0], {kInput, 0, row});
    addRecv(lane, mine[0], {kOutput, 0, row});
    return plan;
  }
  // Leader's Scratch: the gathered rows of its other ranks, the assembled rows for them
  // (ordered by source rank; its own is Output), then a pack and an unpack buffer per host.
  auto gathered = [&](uint64_t i, int j) {  // block of local rank i for rank j
    if (i == 0) return Region{kInput, uint64_t(j) * c, c};
    return Region{kScratch, (i - 1) * row + uint64_t(j) * c, c};
  };
  auto assembled = [&](uint64_t i, int j) {  // block from rank j for local rank i
    if (i == 0) return Region{kOutput, uint64_t(j) * c, c};
    return Region{kScratch, (l - 1 + i - 1) * row + uint64_t(j) * c, c};
  };
  uint64_t offset = 2 * (l - 1) * row;
  std::vector<uint64_t> packAt(h.members.size()), unpackAt(h.members.size());
  for (size_t g = 0; g < h.members.size(); ++g) {
    if (int(g) == me) continue;
    const uint64_t size = l * h.members[g].size() * c;
    packAt[g] = offset;
    unpackAt[g] = offset + size;
    offset += 2 * size;
  }
  plan.scratchCount = offset;
  for (uint64_t i = 1; i < l; ++i) addRecv(lane, mine[i], {kScratch, (i - 1) * row, row});
  // To each other host: for each of its ranks, the blocks of this host's ranks in local order.
  for (size_t g = 0; g < h.members.size(); ++g) {
    if (int(g) == me) continue;
    uint64_t at = packAt[g];
    for (int j : h.members[g]) {
      for (uint64_t i = 0; i < l; ++i, at += c) addCopy(lane, gathered(i, j), {kScratch, at, c});
    }
    addSend(lane, h.members[g][0], {kScratch, packAt[g], at - packAt[g]});
  }
  for (size_t g = 0; g < h.members.size(); ++g) {
    if (int(g) == me) continue;
    const uint64_t size = l * h.members[g].size() * c;
    addRecv(lane, h.members[g][0], {kScratch, unpackAt[g], size});
    uint64_t at = unpackAt[g];
    for (uint64_t i = 0; i < l; ++i) {
      for (int j : h.members[g]) addCopy(lane, {kScratch, at, c}, assembled(i, j)), at += c;
    }
  }
  for (uint64_t i = 0; i < l; ++i) {
    for (uint64_t j = 0; j < l; ++j) addCopy(lane, gathered(j, mine[i]), assembled(i, mine[j]));
  }
  for (uint64_t i = 1; i < l; ++i) addSend(lane, mine[i], {kScratch, (l - 1 + i - 1) * row, row});
  return plan;
}

// ---- Incast-aware ----------------------------------------------------------------------------

std::string refuseIncast(const CollArgs& a) {
  if (a.fanIn < 1) return strprintf("fanIn is %d; it must be at least 1", a.fanIn);
  return "";
}

namespace {

// What position p of a receiver makes of the message sent there (see buildIncastAlltoAll):
// gated or not; the receive whose element tokenElem releases its token (a position; −1: the
// request, alltoallv); and how many elements go in the first of its messages (all: one).
struct Turn {
  bool gated = false;
  int tokenPos = -1;
  uint64_t tokenElem = 0;
  uint64_t head = 0;
};

// Alltoall, blocks of c > 0 elements, so both ends know every slot: position p is message
// i = ⌊p/k⌋ of slot p mod k (the least loaded slot, all loads equal) and starts at element i·c
// of the slot's stream. It goes at once when i·c ≤ lead; else its token leaves when the stream
// has i·c − lead elements, that is after element c − 1 − (lead mod c) of message
// i − 1 − ⌊lead/c⌋. A message some later one waits for that way is split there, so that its
// first message ends at that element.
Turn equalTurn(int p, int k, int n, uint64_t c, uint64_t lead) {
  lead = std::min(lead, uint64_t(n) * c);  // more changes nothing (all go at once), and this
                                           // keeps the position arithmetic below from overflowing
  const uint64_t i = uint64_t(p / k), slot = uint64_t(p % k), m = lead / c, r = lead % c;
  Turn t;
  t.head = c;
  if (i > m) {
    t.gated = true;
    t.tokenPos = int((i - m - 1) * uint64_t(k) + slot);
    t.tokenElem = c - 1 - r;
  }
  if (r != 0 && (i + m + 1) * uint64_t(k) + slot <= uint64_t(n - 2)) t.head = c - r;
  return t;
}

// Sends (or receives) region r to (from) peer as one message, or as two split after `head`.
void addPieces(Lane& lane, StepKind kind, int peer, Region r, uint64_t head) {
  auto add = [&](Region piece) {
    kind == StepKind::Send ? addSend(lane, peer, piece) : addRecv(lane, peer, piece);
  };
  if (head >= r.count) return add(r);
  add({r.buf, r.offset, head});
  add({r.buf, r.offset + head, r.count - head});
}

// Positions: the sender at position p of receiver R is R − p − 1; the receiver at which this
// rank has position p is r + p + 1. See buildIncastAlltoAll in builders_exchange.h.
struct Positions {
  int rank, n;
  int senderAt(int p) const { return wrap(rank - p - 1, n); }
  int receiverAt(int p) const { return wrap(rank + p + 1, n); }
};

// What each position makes of the message this rank receives there (recv) and sends there
// (send), with k slots.
struct Turns {
  std::vector<Turn> recv, send;
};

// Alltoall: every position's turn as equalTurn gives it, both ways.
Turns equalTurns(const CollArgs& a, int k, uint64_t lead) {
  const int n = a.nranks;
  Turns t{std::vector<Turn>(size_t(n - 1)), std::vector<Turn>(size_t(n - 1))};
  for (int p = 0; p < n - 1 && a.count > 0; ++p)
    t.recv[size_t(p)] = t.send[size_t(p)] = equalTurn(p, k, n, a.count, lead);
  return t;
}

// Alltoallv: as a receiver, every non-empty position in a slot, least loaded slot first; a
// later one waits for the last element of the slot's previous message (none: the request). As
// a sender, a message past the first k positions is gated and goes whole.
Turns varyingTurns(const Blocks& b, const Positions& at, int k) {
  const int n = at.n;
  Turns t{std::vector<Turn>(size_t(n - 1)), std::vector<Turn>(size_t(n - 1))};
  std::vector<int> last(size_t(k), -1);
  std::vector<uint64_t> load(size_t(k), 0);
  for (int p = 0; p < n - 1; ++p) {
    const uint64_t count = b.recv(at.senderAt(p)).count;
    Turn& in = t.recv[size_t(p)];
    in.head = count;
    if (count == 0) continue;
    const size_t slot = p < k ? size_t(p) : size_t(std::min_element(load.begin(), load.end()) -
                                                   load.begin());
    in.gated = p >= k;
    in.tokenPos = last[slot];
    if (in.tokenPos >= 0) in.tokenElem = b.recv(at.senderAt(in.tokenPos)).count - 1;
    last[slot] = p;
    load[slot] += count;
  }
  for (int p = 0; p < n - 1; ++p) {
    const uint64_t count = b.send(at.receiverAt(p)).count;
    t.send[size_t(p)] = {p >= k && count > 0, -1, 0, count};
  }
  return t;
}

// As a sender: a staging slot in Scratch for every gated send (their offsets, by position);
// *scratch: the elements they take.
std::vector<uint64_t> stagingSlots(const Blocks& b, const Positions& at, const Turns& turns,
                                   uint64_t* scratch) {
  std::vector<uint64_t> stageAt(size_t(at.n - 1), 0);
  *scratch = 0;
  for (int p = 0; p < at.n - 1; ++p) {
    if (!turns.send[size_t(p)].gated) continue;
    stageAt[size_t(p)] = *scratch;
    *scratch += b.send(at.receiverAt(p)).count;
  }
  return stageAt;
}

// Alltoallv: every gated sender first sends its receiver one element, its request for a turn;
// each receiver takes the requests of its gated senders into Scratch at requestAt, one element
// per position.
void addRequests(Lane& lane, const Blocks& b, const Positions& at, const Turns& turns,
                 uint64_t requestAt) {
  for (int p = 0; p < at.n - 1; ++p) {
    const int to = at.receiverAt(p);
    if (turns.send[size_t(p)].gated) addSend(lane, to, {kInput, b.send(to).offset, 1});
  }
  for (int p = 0; p < at.n - 1; ++p) {
    const Region request{kScratch, requestAt + uint64_t(p), 1};
    if (turns.recv[size_t(p)].gated) addRecv(lane, at.senderAt(p), request);
  }
}

// Position p of both roles: the token this rank gives its sender there (once the gating
// receive's element has arrived), its own message (after the receiver's token, from its
// staging slot, if gated), and the message it receives.
void addPosition(Lane& lane, const Blocks& b, const Positions& at, const Turns& turns, int p,
                 uint64_t stage, uint64_t requestAt) {
  const int from = at.senderAt(p), to = at.receiverAt(p);
  const Turn& in = turns.recv[size_t(p)];
  if (in.gated) {
    // The token leaves once element tokenElem of the gating receive has arrived.
    Region token{kScratch, requestAt + uint64_t(p), 1};
    if (in.tokenPos >= 0) {
      const Region prev = b.recv(at.senderAt(in.tokenPos));
      token = {prev.buf, prev.offset + in.tokenElem, 1};
    }
    addSend(lane, from, token);
  }
  const Turn& out = turns.send[size_t(p)];
  Region data = b.send(to);
  if (out.gated) {
    const Region staged{kScratch, stage, data.count};
    addRecv(lane, to, {kScratch, staged.offset, 1});
    addCopy(lane, data, staged);  // overwrites the token, so it waits for it
    data = staged;
  }
  addPieces(lane, StepKind::Send, to, data, out.head);
  addPieces(lane, StepKind::Recv, from, b.recv(from), in.head);
}

RankPlan incast(const CollArgs& a, int rank) {
  const int n = a.nranks;
  const Blocks b{a};
  const int k = std::max(1, std::min(a.fanIn, n - 1));
  // A sender of alltoallv knows only its own counts, not where its message falls in the
  // receiver's slots: no lead there.
  const uint64_t lead = b.varying() ? 0 : a.fanInLeadBytes / std::max<uint32_t>(1, a.elemSize);
  RankPlan plan;
  plan.algorithm = "incast";
  plan.lanes.resize(1);
  Lane& lane = plan.lanes[0];
  addCopy(lane, b.send(rank), b.recv(rank));
  if (n == 1) return plan;
  const Positions at{rank, n};
  const Turns turns = b.varying() ? varyingTurns(b, at, k) : equalTurns(a, k, lead);
  // Scratch: the staging slots, then (alltoallv) one element per position for the requests of
  // gated senders.
  uint64_t requestAt = 0;
  const std::vector<uint64_t> stageAt = stagingSlots(b, at, turns, &requestAt);
  plan.scratchCount = requestAt + (b.varying() ? uint64_t(n - 1) : 0);
  if (b.varying()) addRequests(lane, b, at, turns, requestAt);
  for (int p = 0; p < n - 1; ++p)
    addPosition(lane, b, at, turns, p, stageAt[size_t(p)], requestAt);
  return plan;
}

}  // namespace

RankPlan buildIncastAlltoAll(const CollArgs& a, int rank) { return incast(a, rank); }
RankPlan buildIncastAlltoAllv(const CollArgs& a, int rank) { return incast(a, rank); }

}  // namespace loom::collectives
