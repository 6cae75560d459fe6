// Alltoall, broadcast, reduce, gather and scatter builders beyond the foundation
// (collectives/builders.h).
// Same contract and notation as builders.h: pure functions, any N ≥ 1 and any count, costs per
// rank as the symbolic verifier counts them (steps, messages sent, elements sent, rounds), with
// zero-element steps left out. c = count, N = nranks, r = this rank, v = (r − root) mod N the
// rank's place in a rooted algorithm, lg(N) = ⌈log2 N⌉.
#pragma once

#include <string>

#include "collectives/plan.h"

namespace loom::collectives {

// ---- Alltoall(v) ----------------------------------------------------------------------------

// XOR pairwise exchange: for N a power of two, round k = 1..N−1 exchanges with r XOR k in
// both directions (each round a perfect matching, so no link carries two messages at once);
// otherwise the linear shift of buildPairwiseAlltoAll (send to r+k, receive from r−k). Round k
// runs on lane k % L, L = min(lanes, max(1, N−1)).
// Cost (c > 0): 1 + 2(N−1) steps, N−1 messages, (N−1)·c elements sent, 1 round, no scratch.
RankPlan buildXorAlltoAll(const CollArgs& a, int rank);
// As buildXorAlltoAll with this rank's counts; zero blocks produce no steps.
// Cost: messages = #{j ≠ r : sendCounts[j] > 0}, elements = Σ_{j≠r} sendCounts[j].
RankPlan buildXorAlltoAllv(const CollArgs& a, int rank);

// Bruck alltoall, for small blocks: rotate Input into Scratch (block i = Input block (r+i)%N),
// then for each bit b with 2^b < N pack the blocks whose index has bit b into a contiguous
// buffer, send it to r + 2^b, receive the same positions from r − 2^b and unpack; finally
// Output block (r − i) % N = Scratch block i. One lane.
// Cost (N > 1, c > 0), with m_b = #{i < N : bit b of i set}: lg(N) messages and rounds,
// c·Σ_b m_b elements sent (≈ c·N·lg(N)/2), steps 2 + Σ_b (2·m_b + 2) + N,
// scratch (N + 2·⌈N/2⌉)·c. N = 1: one Copy.
RankPlan buildBruckAlltoAll(const CollArgs& a, int rank);

// Hierarchical alltoall over a.hostOf (empty: one host): every rank sends its whole Input to
// its host's leader (the lowest rank on it); each leader packs, for every other host, the
// blocks its ranks send there (ordered by destination, then source), exchanges one message
// with every other leader, assembles for each local rank the N blocks it receives (ordered by
// source) and sends them to it in one message. One lane.
// Cost, with H hosts, ℓ ranks on this host (c > 0): a non-leader: 2 steps, 1 message, N·c
// elements; a leader: (ℓ−1) + (H−1) messages, (ℓ−1)·N·c + ℓ·(N−ℓ)·c elements, scratch
// 2·(ℓ−1)·N·c + 2·ℓ·(N−ℓ)·c; rounds 3 (gather, exchange, scatter), fewer when H = 1 or ℓ = 1.
RankPlan buildHierarchicalAlltoAll(const CollArgs& a, int rank);
// Why the hierarchical alltoall cannot serve a call: hostOf of the wrong size or out of range.
std::string refuseHierarchicalAlltoAll(const CollArgs& a);

// Incast-aware alltoall(v): every receiver admits at most k = min(a.fanIn, N−1) senders at a
// time. Receiver R numbers its senders by position p = (R − s − 1) mod N and keeps k slots;
// the first k positions start at once, every later non-empty one is given (longest-processing
// -time first: the slot with the least data so far) to a slot and may start only when the
// slot's earlier messages have arrived but for the last `lead` elements (a.fanInLeadBytes, in
// elements; its default is the receiver's share of its link's queue, or what a round trip keeps
// in flight where that is more, tuner::defaultFanInLead): the
// next sender's first bytes then reach R as the last ones of the current sender do, and R's
// link never idles for the round trip between. Each slot is thus a chain of messages, so at
// most k messages of more than `lead` elements are in flight into R (besides them only the
// tails of at most `lead` split off the messages before), and a slot is refilled as it
// drains, which keeps a hot receiver's link busy without flooding it. A message that starts
// within `lead` elements of its slot's start needs no turn: small calls run as the plain
// exchange does.
//
// How a turn is enforced with FIFO point-to-point steps: a step waits only for earlier steps
// of its lane whose regions it conflicts with, and Input is read-only, so a send straight from
// Input could never wait. A gated send therefore goes from a staging copy in Scratch: the
// sender first receives a one-element token from R into the first element of the staging slot,
// then Copies its Input block over the slot (write-after-write: the copy waits for the token),
// then sends the slot (read-after-write: the send streams behind the copy). R sends the token
// from the element of an earlier receive of the slot after which at most `lead` elements are
// still to come, so it leaves only when that element has arrived; that receive is split into
// two messages after that element, so that a step, not part of one, is what the token waits
// for. All steps are on one lane (lanes do not order one another) and are ordered by position:
// for p = 0..N−2, the token sent for p, the token received for p (and its staging copy), the
// data sent at p, the data received at p. Every dependency goes from a smaller (position,
// kind) to a larger one, on both ends of every channel, so the plan cannot deadlock.
// Alltoall, blocks of c elements, ℓ = lead elements, m = ⌊ℓ/c⌋, ρ = ℓ mod c: position p is
// message i = ⌊p/k⌋ of slot p mod k; it is gated when i > m, its token leaves after element
// c − 1 − ρ of message i − 1 − m of its slot, and its message is split after c − ρ elements
// when ρ > 0 and position (i + m + 1)·k + p mod k ≤ N − 2 waits for it.
// Alltoallv: a sender knows only its own counts, so it cannot know where its message falls in
// the receiver's slots: no lead (every token waits for the whole previous message), and every
// gated sender (position ≥ k, non-empty) first sends R a one-element request (the first
// element of its block) that R keeps in Scratch and returns as the token when the slot has no
// earlier message. Requests and tokens are one element and carry no result; the verifier's
// fan-in check ignores such control messages.
// Cost, alltoall, c > 0, g gated positions and s split ones (g = N−1−k and s = 0 when ℓ = 0):
// 1 + 2(N−1) + 3g + 2s steps, (N−1) + g + s messages, (N−1)·c + g elements sent, scratch g·c;
// rounds between 2·⌈(N−1)/k⌉ − 1 (the token chain, ℓ = 0) and 2(N−1) (FIFO order on a channel
// can lengthen the chain).
// Alltoallv: as alltoall over the non-empty blocks with ℓ = 0, plus one request per gated
// send; scratch Σ gated sendCounts + N−1.
RankPlan buildIncastAlltoAll(const CollArgs& a, int rank);
RankPlan buildIncastAlltoAllv(const CollArgs& a, int rank);
// Refuses fanIn < 1.
std::string refuseIncast(const CollArgs& a);

// Direct shared memory alltoall ("direct", collectives/direct.cc; refused as the direct
// allreduce is, by refuseDirect, and when a slot cannot hold one element per rank): with slots
// of S elements (as the direct allreduce's) and P = ⌊S/N⌋ elements per block and chunk,
// Copy the own block Input → Output, then per chunk k of P elements of every block (c_k its
// size, half k mod 2): Copy piece k of each other block j into slot r at j·c_k; Barrier; Copy
// piece k of block r from each other rank's slot into Output block j.
// Cost: no messages; K = ⌈count / P⌉ chunks: 1 + K·(2(N−1) + 1) steps, K barriers (rounds).
// N = 1: one Copy; count = 0: the (empty) own copy is dropped, nothing else.
RankPlan buildDirectAlltoAll(const CollArgs& a, int rank);

// ---- Broadcast ------------------------------------------------------------------------------

// Pipelined binary tree broadcast: place v has parent (v−1)/2 and children 2v+1, 2v+2; each
// rank receives into Output and forwards from Output (the root from Input, plus a Copy), and
// the executor streams every hop at element granularity. Lanes split the buffer as in chain,
// L = min(lanes, max(1, c)).
// Cost: messages = L·#children, elements = c·#children, steps = L·(1 + #children) (the root's
// 1 is its Copy), rounds = ⌊log2 N⌋.
RankPlan buildTreeBroadcast(const CollArgs& a, int rank);

// Scatter + allgather broadcast (van de Geijn), for large messages: the buffer is cut into N
// parts, part v for place v; a binomial scatter gives every place its part (each subtree's
// parts are contiguous), then a chain allgather 0 → 1 → … → N−1 in which the root injects part
// −s at step s from Input and every other place forwards what it received, so each non-root
// receives the N−1 parts it lacks and the root receives nothing. One lane.
// Cost (c ≥ N): every non-root receives exactly c elements (its scatter range, then the rest
// in the chain) and the root none; each rank sends at most 2c (the root c − c/N in each phase);
// the root has lg(N) scatter and N−1 chain messages; rounds ≤ lg(N) + N − 1.
RankPlan buildScatterAllgatherBroadcast(const CollArgs& a, int rank);

// ---- Reduce ---------------------------------------------------------------------------------

// Binary tree reduce toward the root (same tree as buildTreeBroadcast): a leaf sends Input;
// an inner place combines Input with its children's sums (RecvReduce, pipelined) into Scratch
// (Output on the root, which may be Input in place) and sends the sum to its parent. Non-roots
// never touch Output. Lanes split the buffer, L = min(lanes, max(1, c)).
// Cost: L·#children + L·(v ≠ 0) steps, L messages and c elements from every non-root,
// rounds ≤ 2·⌊log2 N⌋ (the second child's sum is combined after the first's), scratch c on
// inner non-roots. N = 1: one Copy.
RankPlan buildTreeReduce(const CollArgs& a, int rank);

// Reduce-scatter + gather reduce, for large messages: a ring reduce-scatter in place order
// leaves the full sum of part v on place v (partial sums in Scratch, the root's in Output), then
// every place sends its part to the root. One lane.
// Cost (c ≥ N, N > 1), c_0 = partCount(c, N, 0): a non-root: 2(N−1) + 1 steps, N messages,
// c elements sent, scratch c; the root: 3(N−1) steps, N−1 messages, c − c_0 elements sent;
// N rounds.
RankPlan buildRsagReduce(const CollArgs& a, int rank);

// ---- Gather and scatter ------------------------------------------------------------------------

// Block j of the root's buffer is rank j's count elements (Output for gather, Input for
// scatter); non-roots never touch it (NCCL ignores it there). The linear builders, the
// foundation's, are in builders.h.

// Binomial tree gather ("tree", for small messages): over places (binomialSpan), place v
// gathers the blocks of its subtree, places [v, v + s) with s = min(span(v), N − v), in Scratch
// in place order (its own Input copied to the front, each child's range received behind it)
// and sends them to its parent in one message; the root receives each child's range straight
// into Output. A range of places is one range of ranks unless it wraps past rank N−1 (it holds
// place N − root, root > 0): such a message to the root goes as two, split there. A leaf sends
// its Input. One lane. With k(v) children and w = 1 when v's range wraps, 0 otherwise:
// Cost: a leaf 1 step, 1 message, c elements; an inner non-root 2 + k(v) steps (+1 when its
// parent is the root and w = 1), 1 (+w) messages, s·c elements, scratch s·c; the root
// k(0) + 1 (+1 for the wrapping child) steps, where k(0) = ⌈log2 N⌉; ⌊log2 N⌋ rounds (the
// most bits set in a place; +1 for the FIFO pair of a split message).
RankPlan buildTreeGather(const CollArgs& a, int rank);
// Binomial tree scatter ("tree"): the reverse: the root sends each child its subtree's range
// of Input (largest first; split where it wraps), an inner place receives its range into
// Scratch, passes each child's part on (largest first) and copies its own block to Output, a
// leaf receives straight into Output. One lane.
// Cost: the root k(0) (+1) messages, (N−1)·c elements; an inner non-root k(v) messages,
// (s − 1)·c elements, scratch s·c; ⌊log2 N⌋ rounds (+1 for a split message). Every block
// travels popcount(its place) hops, in both trees.
RankPlan buildTreeScatter(const CollArgs& a, int rank);

}  // namespace loom::collectives
