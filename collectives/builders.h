// Plan builders (docs/ARCHITECTURE.md): one pure function per algorithm, building the plan of
// one rank. Every builder works for any nranks N ≥ 1 and any count (0, fewer elements than
// ranks, odd sizes), and every rank's plan matches its peers' plans built from the same call.
//
// Each builder states its cost per rank as the symbolic verifier (tests/support/verifier.h)
// counts it: plan steps, messages sent, elements sent, and rounds (the longest chain of
// messages that must follow one another). Notation: N ranks, r this rank, L lanes in use,
// n_l = partCount(count, L, l) the elements of lane l, and c_l(i) = partCount(n_l, N, i) the
// size of chunk i of lane l. Steps that would move zero elements are left out, so the step
// and message counts below hold when every chunk is non-empty (count ≥ L·N for allreduce,
// count ≥ L elsewhere); with fewer elements the empty chunks' steps are missing.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/plan.h"

namespace loom::collectives {

// ---- Collective builders --------------------------------------------------------------------

// Ring allreduce: a ring reduce-scatter then a ring allgather, each lane a full ring over its
// contiguous part of the buffer; L = min(lanes, max(1, count / N)), so every chunk holds an
// element. The first pass combines Input with what arrives straight into Output, so there is
// no copy pass, and it is correct in place.
// Cost (N > 1): 4(N−1)·L steps, 2(N−1)·L messages, Σ_l 2·n_l − c_l(r+1) − c_l(r+2) elements
// sent (= 2(N−1)·count/N when L·N divides count), 2(N−1) rounds, no scratch.
// N = 1: one Copy, nothing sent.
RankPlan buildRingAllReduce(const CollArgs& a, int rank);

// Ring allgather: Copy of Input into Output block r (a no-op in place), then N−1 ring steps
// passing blocks on; lanes split every block alike, L = min(lanes, max(1, count)).
// Cost: (2N−1)·L steps, (N−1)·L messages, (N−1)·count elements sent, N−1 rounds.
RankPlan buildRingAllGather(const CollArgs& a, int rank);

// Ring reduce-scatter: N−1 ring steps; partial sums travel through two scratch slots per lane
// and the last step combines Input block r with the arriving sum into Output, so it is correct
// in place. Lanes split every block alike, L = min(lanes, max(1, count)).
// Cost (N > 1): 2(N−1)·L steps, (N−1)·L messages, (N−1)·count elements sent, N−1 rounds,
// scratch 2·count when N > 2. N = 1: one Copy.
RankPlan buildRingReduceScatter(const CollArgs& a, int rank);

// Chain broadcast root → root+1 → … → root−1: each rank receives into Output and forwards
// from Output; the root sends from Input and copies Input to Output. The executor pipelines
// the chain at element granularity. Lanes split the buffer, L = min(lanes, max(1, count)).
// Cost: root 2·L steps, last rank L steps, others 2·L; every rank but the last sends L
// messages and count elements; N−1 rounds. N = 1: one Copy.
RankPlan buildChainBroadcast(const CollArgs& a, int rank);

// Chain reduce toward the root, root−1 → … → root+1 → root: the last rank sends its Input,
// the ones between combine their Input with the arriving partial sum into Scratch and pass it
// on, the root combines into Output. Non-roots never touch Output (NCCL ignores recvbuff there).
// Lanes split the buffer, L = min(lanes, max(1, count)).
// Cost: root L steps, last rank L steps, others 2·L; every rank but the root sends L messages
// and count elements; N−1 rounds; scratch count on ranks between the ends. N = 1: one Copy.
RankPlan buildChainReduce(const CollArgs& a, int rank);

// Pairwise alltoall: Copy of the own block, then N−1 rounds; round k sends block (r+k)%N to
// rank (r+k)%N and receives block (r−k)%N from rank (r−k)%N. Round k runs on lane k % L,
// L = min(lanes, max(1, N−1)); the rounds do not wait for one another.
// Cost: 1 + 2(N−1) steps, N−1 messages, (N−1)·count elements sent, 1 round (count > 0).
RankPlan buildPairwiseAlltoAll(const CollArgs& a, int rank);

// Pairwise alltoallv: as buildPairwiseAlltoAll with this rank's counts and displacements;
// blocks of zero elements produce no steps.
// Cost: messages = #{j ≠ r : sendCounts[j] > 0}, elements sent = Σ_{j≠r} sendCounts[j],
// steps = messages + #{j ≠ r : recvCounts[j] > 0} + (sendCounts[r] > 0).
RankPlan buildPairwiseAlltoAllv(const CollArgs& a, int rank);

// Pairwise allgather: Copy of Input into Output block r, then N−1 rounds; round k sends the
// whole Input to rank (r+k)%N and receives block (r−k)%N from it. Every message leaves from
// the Input, all there when it starts, so on one host each goes by a single copy (the receiver
// reads the sender's Input; LOOM_SHM_CMA_THRESHOLD), where ring and rd forward what they
// received and copy twice. Across hosts it is an all-to-all of the blocks (incast at every
// receiver). Lanes as buildPairwiseAlltoAll.
// Cost: 1 + 2(N−1) steps, N−1 messages, (N−1)·count elements sent, 1 round (count > 0).
RankPlan buildPairwiseAllGather(const CollArgs& a, int rank);

// Linear gather ("linear", for large messages; collectives/gather.cc): every non-root sends
// its Input to the root, which receives block j of its Output (rank j's count elements)
// straight from rank j, places 1, 2, … in turn, and copies its own Input into block root (a
// no-op in place). Non-roots never touch Output. All messages are in flight at once: the
// root's link is the bottleneck, and each block crosses it once. Lanes split every block
// alike, L = min(lanes, max(1, count)) for N > 1.
// Cost: a non-root L steps, L messages, count elements; the root L·N steps, no messages,
// (N−1)·count elements received; 1 round (count > 0). N = 1: one Copy.
RankPlan buildLinearGather(const CollArgs& a, int rank);
// Linear scatter ("linear"): the root sends block j of its Input to rank j (places 1, 2, …)
// and copies block root into its Output; a non-root receives into Output and never touches
// Input. Lanes as gather's.
// Cost: the root L·N steps, (N−1)·L messages, (N−1)·count elements; a non-root L steps;
// 1 round.
RankPlan buildLinearScatter(const CollArgs& a, int rank);

// ---- Point-to-point groups ------------------------------------------------------------------

// One send or receive of a group (loomGroupStart … loomGroupEnd), in bytes.
struct P2POp {
  enum class Kind : uint8_t { Send, Recv };
  int peer = 0;
  Kind kind = Kind::Send;
  uint64_t bytes = 0;
};

// A group of sends and receives: the buffer of ops[i] is kFirstUserBuffer + i, an element is a
// byte, and every operation is one step on lane 0, in call order (the executor posts them out
// of order as far as FIFO per peer allows, so any order of calls completes). Zero-byte
// operations produce no step.
// Cost: one step per operation; messages and bytes sent = the group's sends; rounds = the
// most messages from one rank to another (FIFO order chains them).
RankPlan buildP2P(const std::vector<P2POp>& ops);

// ---- Registry -------------------------------------------------------------------------------

struct Builder {
  Collective coll;
  const char* name;  // "ring", "chain", "pairwise", "linear", "p2p"
  // Builds one rank's plan. Null for Collective::SendRecv, whose plans come from buildP2P.
  RankPlan (*build)(const CollArgs& a, int rank);
  // Why this builder cannot serve a call (e.g. torus dims that do not match nranks), or an
  // empty string when it can. Null: it serves every call.
  std::string (*refuse)(const CollArgs& a) = nullptr;
  // An alltoall whose plan stays right when Input and Output are one buffer (every block is
  // read before anything overwrites it, and no wait closes a cycle), so an in-place call runs
  // it as is; other alltoalls in place work on a copy of the input (comm/comm.cc).
  bool alltoallInPlace = false;
};

// Every builder, grouped by collective.
std::span<const Builder> allBuilders();
// The names of the builders of one collective, in registry order.
std::vector<std::string_view> builderNames(Collective c);
// The builder of collective c called name, or null.
const Builder* findBuilder(Collective c, std::string_view name);

// ---- Helpers shared by the builders ---------------------------------------------------------

// Lanes worth using: at most `hint`, and few enough that each lane has minPerLane elements.
int usableLanes(uint64_t count, uint64_t minPerLane, int hint);

// A plan named `algorithm` whose `lanes` lanes each work on one contiguous part of `count`
// elements: calls fill(lane, offset, count) with lane l's part (partOffset/partCount).
template <typename Fill>
RankPlan splitIntoLanes(const char* algorithm, uint64_t count, int lanes, Fill fill) {
  RankPlan plan;
  plan.algorithm = algorithm;
  plan.lanes.resize(size_t(lanes));
  for (int l = 0; l < lanes; ++l) {
    fill(plan.lanes[size_t(l)], partOffset(count, uint64_t(lanes), uint64_t(l)),
         partCount(count, uint64_t(lanes), uint64_t(l)));
  }
  return plan;
}

// x mod n in [0, n), for ring arithmetic on ranks and chunks that may go negative.
inline int wrap(int64_t x, int n) { return int(((x % n) + n) % n); }

// A rank's place v = (r − root) mod N in a rooted algorithm and the rank at any place.
struct Rooted {
  int n, root, v;
  Rooted(const CollArgs& a, int rank) : n(a.nranks), root(a.root), v(wrap(rank - a.root, n)) {}
  int rankAt(int place) const { return wrap(int64_t(place) + root, n); }
};

// The binomial tree over the places 0..n−1, rooted at place 0: place p ≠ 0 hangs below
// p − binomialSpan(p, n) and its subtree is the places [p, min(p + span, n)); its children are
// p + m for m = span/2, span/4, …, 1 (those below n). Place 0's span is the least power of
// two ≥ n. The subtrees are contiguous in place order, so a subtree's blocks are one range.
inline int binomialSpan(int place, int n) {
  int span = 1;
  while (place == 0 ? span < n : (place & span) == 0) span <<= 1;
  return span;
}

// Append a step to a lane unless it would move nothing. Dropping empty steps keeps both sides
// of a message consistent because every rank computes the same chunk sizes.
void addSend(Lane& lane, int peer, Region src);
void addRecv(Lane& lane, int peer, Region dst);
void addRecvReduce(Lane& lane, int peer, Region src, Region dst);
void addCopy(Lane& lane, Region src, Region dst);
void addReduce(Lane& lane, Region src, Region dst);
// A Barrier step (plan.h): on lane 0 of plans whose ranks share one host's arena; flags, if
// not empty, is where in Shared the ranks raise their arrival flags (plan.h, StepKind::Barrier).
void addBarrier(Lane& lane, Region flags = {});
// Elements of elemSize bytes that hold a Barrier's 8-byte flag; 0 if they cannot.
uint64_t flagElements(uint32_t elemSize);

}  // namespace loom::collectives
