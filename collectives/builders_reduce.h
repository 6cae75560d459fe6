// Allreduce, allgather and reduce-scatter algorithms beyond the ring (collectives/builders.h):
// double binary trees, recursive halving and doubling, Bruck, a 2D torus and host-aware
// (hierarchical) plans, plus the group helpers they share.
//
// Notation as in builders.h, and: p = the largest power of two ≤ N, e = N − p, lg = log2 p.
// Non-powers of two use the standard fold: ranks r < 2e pair up (r even, r+1); the even rank
// hands its data to the odd one, sits out, and gets the result back at the end. A folded-out
// rank sends 1 message and has 2 steps; its partner has 2 extra steps, 1 extra message and
// 2 extra rounds on top of the formulas below, which are for the p ranks that take part.
// As in builders.h, steps that would move nothing are left out, so step and message counts
// hold when every chunk is non-empty.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/builders.h"
#include "collectives/plan.h"

namespace loom::collectives {

// ---- Allreduce ------------------------------------------------------------------------------

// Double binary tree ("tree", NCCL's scheme): tree 0 is a binary tree rooted at rank 0 whose
// leaves are the odd ranks; tree 1 is tree 0 mirrored (r → N−1−r, N even) or shifted by one
// (N odd), so every rank is interior in at most one tree (rank 0 in both when N is odd).
// L = min(max(2, lanes), count) lanes for N > 1, lane l runs tree l % 2 on its part: reduce
// up (RecvReduce from each child, then Send to the parent), broadcast down (Recv from the
// parent, Send to each child). The executor pipelines the whole-region steps.
// Cost per lane l with tree t: k = children of r in t, u = 1 unless r is t's root:
// 2(k + u) steps, k + u messages, (k + u)·n_l elements sent. The trees have height
// ⌈log2 N⌉; rounds are between 2·⌈log2 N⌉ and 4·⌈log2 N⌉, as the verifier counts a rank's two
// RecvReduces (which write the same region) one after the other; the executor pipelines them.
// N = 1: one Copy.
RankPlan buildTreeAllReduce(const CollArgs& a, int rank);

// Recursive halving-doubling ("rhd", Rabenseifner): reduce-scatter by recursive halving over
// p chunks c_l(i) = partCount(n_l, p, i), then allgather by recursive doubling; lane l runs
// both on its part, L = min(lanes, max(1, count / p)).
// Cost per lane (rank taking part): 4·lg steps, 2·lg messages, 2(p−1)·n_l/p elements sent
// when p divides n_l (in general n_l − c_l(v) in the halving plus, in the doubling, the sizes
// of the aligned ranges of 1, 2, …, p/2 chunks holding chunk v), 2·lg rounds. Fold: the
// partner adds 2 steps, 1 message and n_l elements. No scratch. N = 1: one Copy.
// Host-minor order (rhd, rh and rd allgather): on H equal hosts of M > 1 ranks with N a power
// of two, virtual rank v is the rank with local index v / H on host v mod H, so the exchanges
// at distances below H cross hosts and carry the fewest chunks: per rank 2(H−1)·n_l/N elements
// cross hosts, M times fewer than in host-major order (where the first halving's N/2 chunks
// cross). A layout whose own order is host-minor keeps it; other N and layouts: v is the rank.
RankPlan buildRhdAllReduce(const CollArgs& a, int rank);

// Recursive doubling ("rd"): lg exchanges of the whole (folded) buffer with rank v ^ 2^k, for
// small messages. Each exchange receives into Scratch and reduces there (in place the send
// still reads the buffer the receive would overwrite); the last lands in Output directly
// unless that would overwrite what is being sent (lg = 1), then a Copy follows.
// L = min(lanes, max(1, count)).
// Cost per lane: 3·lg steps (+1 Copy when lg = 1), lg messages, lg·n_l elements sent,
// lg rounds; scratch min(lg, 2)·count. Fold as above. N = 1: one Copy.
RankPlan buildRdAllReduce(const CollArgs& a, int rank);

// 2D torus ("torus"): ranks on an X × Y grid (x = r mod X, y = r / X): a ring reduce-scatter
// along each row (X chunks), a ring allreduce along each column on the row chunk a rank
// holds, a ring allgather along each row. X × Y is a.torusX × a.torusY when set (one of them
// set: the other is N / it), else X = ranks per host when every host has the same number,
// else the near-square X = the smallest divisor of N ≥ √N. 1 × N and N × 1 are rings.
// L = min(lanes, max(1, count / N)).
// Cost per lane (see gridAllReduce): 4(X−1) + 4(Y−1) steps, 2(X−1) + 2(Y−1) messages,
// elements n_l − c(x+1) + n_l − c(x+2) + 2m − d(y+1) − d(y+2), with c(i) = partCount(n_l, X,
// i), m = c(x+1), d(j) = partCount(m, Y, j); 2(X−1) + 2(Y−1) rounds; no scratch.
RankPlan buildTorusAllReduce(const CollArgs& a, int rank);
std::string refuseTorus(const CollArgs& a);
// The grid buildTorusAllReduce uses, or why there is none (empty string: *x, *y are set).
std::string torusShape(const CollArgs& a, int* x, int* y);

// Hierarchical ("hierarchical"): the torus plan with rows = the M ranks of a host and
// columns = the ranks with the same local index on the H hosts (a.hostOf; empty = one host):
// reduce-scatter within each host, allreduce across hosts, allgather within each host. Every
// host must have the same number of ranks (refuseHierarchical says which do not).
// Cost: as torus with X = M, Y = H and x, y the local and host index.
RankPlan buildHierarchicalAllReduce(const CollArgs& a, int rank);

// Direct shared memory ("direct"): the ranks of one host reduce through its Shared arena
// (CollArgs::sharedBytes) instead of exchanging messages. The arena holds two halves of N slots
// of S elements (S = sharedBytes / elemSize / 2N, rounded down to whole cache lines once it
// holds one). Up to 16 KiB that fits a slot (one-shot): Copy Input to slot r; Barrier; Copy
// slot 0 to Output and Reduce slots 1..N−1 into it. Otherwise per chunk k of S elements
// (c_k = its size, half k mod 2): Copy Input chunk to slot r; Barrier; Reduce slice r
// (partCount(c_k, N, r) elements) of slots 1..N−1 into slot 0; Barrier; Copy slot 0 to Output.
// Refuses ranks on several hosts, no arena, or an arena too small for one element per slot.
// Cost: no messages. One-shot: N + 2 steps, 1 barrier. Chunked, K = ⌈count / S⌉ chunks:
// 4K + (N−1)·#{k : partCount(c_k, N, r) > 0} steps, 2K barriers. The verifier counts each
// barrier as a round. N = 1: one Copy; count = 0: nothing.
RankPlan buildDirectAllReduce(const CollArgs& a, int rank);
// Why a direct builder (allreduce, allgather, alltoall) cannot serve a call: ranks on several
// hosts, no arena, or slots too small (alltoall needs one element per rank in a slot).
std::string refuseDirect(const CollArgs& a);
// Why an algorithm that needs one host's arena (direct, peer) cannot serve a call: ranks on
// several hosts, or no arena; names `algorithm` in the message. Empty when it can.
std::string refuseOffHost(const char* algorithm, const CollArgs& a);

// Peer reads ("peer", collectives/peer.cc): the ranks of one host read each other's buffers in
// place (plan.h, peerBuffer), so every byte moves with one copy straight from the buffer that
// holds it (a mapping of loomMemAlloc memory, else process_vm_readv) and nothing is sent. One
// lane; an opening Barrier (every rank has entered the call) and a closing one (nobody returns
// while a peer may still read its buffers). Sums start with the rank's own Input, then add the
// others' from rank r+1 on, so ranks summing at once read different peers; copies also go
// from r+1 on. Refused (refusePeer) as refuseOffHost says. With S_j = partCount(count, N, j):
//   allreduce: rank r sums slice r (S_r elements at partOffset) of all Inputs into its Output;
//     Barrier; copies slice j of rank j's Output for every j ≠ r. Steps: 3 barriers + 1 +
//     (N−1) (the sum) + (N−1) (the copies) = 2N + 2 when every slice is non-empty.
//   reduce-scatter: sums block r of all Inputs into Output: N + 2 steps.
//   allgather: copies every rank's Input (its own first) into Output block j: N + 2 steps.
//   alltoall: copies block r of every rank's Input into Output block j: N + 2 steps (in place
//     it works on a copy of the input: peers read the blocks this rank overwrites).
//   broadcast: copies the root's Input to Output: 3 steps.
//   reduce: the root sums all Inputs into its Output (N + 2 steps), the others only pass the
//     2 barriers.
//   gather: the root copies every rank's Input (its own first) into Output block j (N + 2
//     steps), the others only pass the 2 barriers.
//   scatter: every rank copies block r of the root's Input to its Output: 3 steps.
// Cost: no messages; 2 barriers (3 for allreduce), counted as rounds. N = 1: the own Copy
// alone; count = 0: nothing.
RankPlan buildPeerAllReduce(const CollArgs& a, int rank);
RankPlan buildPeerReduceScatter(const CollArgs& a, int rank);
RankPlan buildPeerAllGather(const CollArgs& a, int rank);
RankPlan buildPeerAlltoAll(const CollArgs& a, int rank);
RankPlan buildPeerBroadcast(const CollArgs& a, int rank);
RankPlan buildPeerReduce(const CollArgs& a, int rank);
RankPlan buildPeerGather(const CollArgs& a, int rank);
RankPlan buildPeerScatter(const CollArgs& a, int rank);
std::string refusePeer(const CollArgs& a);

// ---- Allgather ------------------------------------------------------------------------------

// Direct shared memory allgather ("direct", collectives/direct.cc; refuseDirect): with slots of
// S elements as the direct allreduce's, Copy Input → Output block r, then per chunk k of S
// elements of the contribution (c_k its size, half k mod 2): Copy the chunk into slot r;
// Barrier; Copy the chunk of every other rank j from its slot into Output block j.
// Cost: no messages; K = ⌈count / S⌉ chunks: 1 + K·(N + 1) steps, K barriers (rounds).
// N = 1: one Copy (none in place); count = 0: nothing.
RankPlan buildDirectAllGather(const CollArgs& a, int rank);

// Recursive doubling ("rd"): Copy of Input into Output block r, then lg exchanges of the
// blocks gathered so far (virtual rank v owns the blocks of the ranks folded onto it, which
// are contiguous). One lane: a message is a range of whole blocks.
// Cost (e = 0): 1 + 2·lg steps, lg messages, (N−1)·count elements sent, lg rounds. Fold: the
// partner also receives 1 block and sends all N·count elements back; lg + 1 or lg + 2 rounds.
// In host-minor order (see rhd) the exchanges run in Scratch, blocks by virtual rank (a range
// of them is not contiguous in Output), and N more Copy steps put the blocks in place; scratch
// N·count. (H−1)·count elements cross hosts per rank instead of M·(H−1)·count.
RankPlan buildRdAllGather(const CollArgs& a, int rank);

// Bruck ("bruck"), any N: scratch T holds block (r+i) mod N at T[i]; step k sends T[0, m)
// to r − 2^k and receives T[2^k, 2^k + m) from r + 2^k, m = min(2^k, N − 2^k); a final
// rotation copies T into place. One lane.
// Cost: 2 + 2·⌈log2 N⌉ + (1 if r is 0 or N−1, else 2) steps, ⌈log2 N⌉ messages, (N−1)·count
// elements sent, at most ⌈log2 N⌉ rounds (a step that forwards only T[0] need not wait),
// scratch N·count. N = 1: one Copy.
RankPlan buildBruckAllGather(const CollArgs& a, int rank);

// Hierarchical ("hierarchical"): a ring allgather across hosts among the ranks with the same
// local index, then for each host a ring allgather within the host of that host's blocks.
// Lanes split every block alike, L = min(lanes, max(1, count)).
// Cost per lane: 1 + 2(H−1) + 2H(M−1) steps, (H−1) + H(M−1) messages, and
// ((H−1) + H(M−1))·n_l elements sent.
RankPlan buildHierarchicalAllGather(const CollArgs& a, int rank);

// ---- Reduce-scatter -------------------------------------------------------------------------

// Recursive halving ("rh"): lg exchanges, each sending the half of the (virtual) blocks this
// rank gives up and combining the half it keeps into Scratch; the last lands in Output. One
// lane. Fold: the folded-out rank sends its whole Input (N·count) and gets its block back.
// Cost (e = 0): 2·lg steps, lg messages, (N−1)·count elements sent, lg rounds; scratch
// N·count when N > 2. In host-minor order (see rhd) N Copy steps first put Input's blocks in
// Scratch by virtual rank; (H−1)·count elements cross hosts per rank, not M·(H−1)·count.
RankPlan buildRhReduceScatter(const CollArgs& a, int rank);

// Hierarchical ("hierarchical"): for each host, a ring reduce-scatter within this host of the
// blocks of that host's ranks (into Scratch), then a ring reduce-scatter across hosts among
// the ranks with the same local index. Lanes split every block alike, L = min(lanes,
// max(1, count)).
// Cost per lane: 2H(M−1) + 2(H−1) steps (one Copy when N = 1), H(M−1) + (H−1) messages,
// (H(M−1) + (H−1))·n_l elements sent; scratch (3H + 2)·count when N > 1.
RankPlan buildHierarchicalReduceScatter(const CollArgs& a, int rank);

// Why the hierarchical builders cannot serve a.hostOf (wrong size, unequal hosts), or "".
std::string refuseHierarchical(const CollArgs& a);

// ---- Helpers shared by these builders ---------------------------------------------------------

// Parent of `rank` in tree `tree` (0 or 1) of the double binary tree over n ranks; -1 at the
// root.
int treeParent(int n, int tree, int rank);

// The hosts of a.hostOf: hosts[h] lists host h's ranks in rank order; empty = one host.
std::vector<std::vector<int>> hostGroups(const CollArgs& a);

// A ring over a subset of the ranks: members in ring order, this rank at members[pos].
struct RankGroup {
  std::vector<int> members;
  int pos = 0;
  int size() const { return int(members.size()); }
  int at(int64_t i) const { return members[size_t(wrap(i, size()))]; }
};

// A ring reduce-scatter pass over group g, as in ring.cc: at step s this rank sends chunk
// first−s and combines chunk first−s−1, arriving from its predecessor, with its own
// contribution in(c) into acc(s, c) (read again at step s+1, to pass it on). The last step
// (s = size−2) completes chunk first+1. A group of one has no steps: its chunk is in(pos).
template <typename In, typename Acc>
void groupReduceScatter(Lane& lane, const RankGroup& g, int first, In in, Acc acc) {
  const int n = g.size();
  const int next = g.at(g.pos + 1), prev = g.at(g.pos - 1);
  for (int s = 0; s + 1 < n; ++s) {
    addSend(lane, next, s == 0 ? in(wrap(first, n)) : acc(s - 1, wrap(first - s, n)));
    const int c = wrap(first - s - 1, n);
    addRecvReduce(lane, prev, in(c), acc(s, c));
  }
}

// A ring allgather pass over group g: this rank holds chunk `first` (in `own`) and, at step
// s, passes chunk first−s on and receives chunk first−s−1 into out(c).
template <typename Out>
void groupAllGather(Lane& lane, const RankGroup& g, int first, Region own, Out out) {
  const int n = g.size();
  const int next = g.at(g.pos + 1), prev = g.at(g.pos - 1);
  for (int s = 0; s + 1 < n; ++s) {
    addSend(lane, next, s == 0 ? own : out(wrap(first - s, n)));
    addRecv(lane, prev, out(wrap(first - s - 1, n)));
  }
}

// Allreduce of the elements [base, base+len) on a grid: reduce-scatter along `row` (row.size()
// chunks), ring allreduce along `col` on the row chunk this rank completed, allgather along
// `row`. Correct in place: Input chunks are read for the last time by the steps that first
// write the same Output chunks. A 1 × 1 grid is one Copy.
void gridAllReduce(Lane& lane, const RankGroup& row, const RankGroup& col, uint64_t base,
                   uint64_t len);

}  // namespace loom::collectives
