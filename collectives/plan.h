// The plan IR (docs/ARCHITECTURE.md). Every algorithm is a pure function that builds, for one
// rank, ordered lists of steps over regions of the call's buffers. The executor runs plans,
// the verifier (tests/) executes them symbolically, the simulator (tuner/) costs them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/loom.h"

namespace loom::collectives {

enum class Collective : uint8_t {
  AllReduce,
  Broadcast,
  Reduce,
  AllGather,
  ReduceScatter,
  AlltoAll,
  AlltoAllv,
  Gather,
  Scatter,
  SendRecv,  // a group of point-to-point operations; the last: loops over collectives end here
};
const char* collectiveName(Collective c);  // "allreduce", "broadcast", ...
// Whether the call has a root: broadcast, reduce, gather, scatter.
bool hasRoot(Collective c);
// Whether the call reduces: allreduce, reduce, reduce-scatter.
bool reduces(Collective c);
// How errors name a call: "allreduce of 100 elements (float32, sum)", "broadcast of 8 elements
// (int32, root 1)" (an alltoallv without its count; the op of a reduction, the root of a call
// that has one).
std::string describeCall(Collective c, uint64_t count, loomDataType_t dtype, loomRedOp_t op,
                         int root);
// Whether the call's count is one rank's block of a buffer of N blocks: allgather,
// reduce-scatter, alltoall, gather, scatter.
bool countsBlocks(Collective c);

// Buffers a region can name. Collectives use Input, Output and Scratch, and Shared: an arena
// of shared memory that every rank of a host maps, so one rank's writes are the others' reads
// (CollArgs::sharedBytes says how large it is; ranks coordinate through Barrier steps). A
// group of point-to-point operations names the buffer of its i-th operation as
// kFirstUserBuffer + i.
enum : uint32_t { kInput = 0, kOutput = 1, kScratch = 2, kShared = 3, kFirstUserBuffer = 4 };

// Another rank's Input or Output, read in place (the "peer" builders, collectives/peer.cc).
// Only a Copy's or Reduce's src may name one: peers' buffers are never written. The rule that
// makes such a read safe is the plan's: the ranks share one host (Barrier steps), the plan has
// one lane, no peer buffer is read before the plan's first Barrier (every rank has entered the
// call, so its Input holds the call's data) nor after its last (a rank that has passed it may
// return to its caller, who may reuse the buffers), and between two barriers nobody reads what
// its owner writes. The executor reads a peer's buffer through a mapping when the peer's
// memory came from loomMemAlloc, else with process_vm_readv (transports/shm/user_memory.h).
constexpr uint32_t kFirstPeerBuffer = 1u << 30;
inline uint32_t peerBuffer(int rank, uint32_t buf) {  // buf: kInput or kOutput
  return kFirstPeerBuffer + uint32_t(rank) * 2 + buf;
}
inline bool isPeerBuffer(uint32_t buf) { return buf >= kFirstPeerBuffer; }
inline int peerBufferRank(uint32_t buf) { return int((buf - kFirstPeerBuffer) / 2); }
inline uint32_t peerBufferKind(uint32_t buf) { return (buf - kFirstPeerBuffer) % 2; }

// A range of elements of one buffer. Offsets and counts are in elements of the plan's dtype.
struct Region {
  uint32_t buf = kInput;
  uint64_t offset = 0;
  uint64_t count = 0;
  bool operator==(const Region&) const = default;
};

enum class StepKind : uint8_t {
  Send,        // send src to peer
  Recv,        // receive from peer into dst
  RecvReduce,  // dst = src (local operand) ⊕ received; src may equal dst
  Copy,        // dst = src (local)
  Reduce,      // dst = dst ⊕ src (local)
  // Completes once every rank of the plan has reached its matching Barrier (the k-th of each
  // rank's lane 0); it starts after every earlier step of its lane and no later one starts
  // before it completes. The ranks must share one host (the barrier lives in the host's Shared
  // arena); Barrier steps and Shared regions appear on lane 0 only. Its src, if not empty, says
  // where in Shared the ranks raise their arrival flags (else in the arena's own records):
  // rank r's is the first 8 bytes of [src.offset + r·src.count, + src.count), 8-byte aligned,
  // the same src on every rank, and no step of the plan touches those bytes nor another
  // Barrier's. A rank that writes its data just past its flag, in the same cache line, hands
  // a peer both in one transfer (builders.h, flagElements).
  Barrier,
};
const char* stepKindName(StepKind k);

struct Step {
  StepKind kind;
  int32_t peer = -1;  // for Send, Recv, RecvReduce (-1 for the others)
  Region src;         // Send, RecvReduce, Copy, Reduce; Barrier: its flags (see above)
  Region dst;         // Recv, RecvReduce, Copy, Reduce
};

// Whether regions a and b share elements of one buffer.
inline bool overlaps(const Region& a, const Region& b) {
  return a.buf == b.buf && a.offset < b.offset + b.count && b.offset < a.offset + a.count;
}

// Whether the executor runs Copy `s` and the Reduce `next` after it on its lane as one pass
// (dst = s.src ⊕ next.src, piece by piece, while the two go in step): `next` reduces into the
// very region s writes, from a source that does not overlap it, and s is no Copy onto itself.
// The simulator costs such a Copy as nothing beyond its Reduce.
inline bool fusedWithNext(const Step& s, const Step& next) {
  return s.kind == StepKind::Copy && next.kind == StepKind::Reduce && next.dst == s.dst &&
         !(s.src == s.dst) && !overlaps(next.src, s.dst);
}

// Steps of one lane run in order; a later step may start on the part of its regions that
// no unfinished earlier step still touches (the executor pipelines at element granularity).
// Sends and receives between a pair of ranks on one lane match in order (FIFO), with equal
// counts. Lanes run concurrently, each on its own connections, on disjoint regions.
struct Lane {
  std::vector<Step> steps;
};

// Bytes a local step handles per pass, so that later steps can start on its output early; a
// read of an unmapped peer's buffer is one process_vm_readv per pass (the simulator charges
// HostCpu::singleCopyOverhead per such call).
constexpr uint64_t kLocalChunkBytes = 256 << 10;

// A Copy step of at least this many bytes whose destination its lane does not touch again
// writes it with streaming stores (copyBypassingCache): a destination beyond the private
// cache costs a third less memory traffic so (a streamed copy moves 2 bytes per byte, read
// and write, where memcpy moves 3: the destination is read first). A copy that fits in the
// private cache is faster with memcpy, which leaves its destination there.
constexpr uint64_t kStreamingCopyBytes = 2 << 20;

// Per step of `steps` (one lane): 1 for a Copy whose destination no later step reads or
// writes. A large one may write with streaming stores (kStreamingCopyBytes): what
// it writes is not wanted in this core's cache.
std::vector<uint8_t> finalCopies(const std::vector<Step>& steps);

struct RankPlan {
  std::vector<Lane> lanes;
  uint64_t scratchCount = 0;  // elements of scratch space the plan needs
  std::string algorithm;      // builder name, for logs and errors
  // Peers read this rank's Input or Output (peerBuffer): the executor tells them where they are.
  bool readByPeers = false;
};

// What a communicator gives each of its calls besides the call's own arguments
// (tuner::callSettings: its LOOM_* parameters and its model). A call's CollArgs takes them
// with one assignment (settings()), so that a new one cannot be left out of a call.
struct CallSettings {
  int lanes = 1;  // a hint; a builder may use fewer when there is too little data
  // 2D torus shape X × Y (X·Y = nranks); 0 means derive it (from hosts, else near-square).
  int torusX = 0, torusY = 0;
  // Alltoall: the most senders any receiver has at once (incast-aware scheduling), and how
  // many bytes before the end of a slot's message its receiver lets the slot's next sender
  // start (its lead: the bytes a round trip keeps in flight, so that the link does not idle).
  int fanIn = 1;
  uint64_t fanInLeadBytes = 0;
  // Bytes of the Shared buffer a plan may use (the communicator's LOOM_SHM_DIRECT_BYTES arena
  // gives each call half of it); 0: there is none.
  uint64_t sharedBytes = 0;
};

// Everything a builder needs to know about one rank's call: its shape and, as CallSettings,
// the algorithm's parameters. Every field is one that builders read; what only the tuner or
// the communicator needs of a call lives with them (comm's CallDesc, Tuner::decide).
struct CollArgs : CallSettings {
  CallSettings& settings() { return *this; }
  const CallSettings& settings() const { return *this; }

  Collective coll = Collective::AllReduce;
  int nranks = 1;
  // Elements, as the NCCL API counts them: allreduce/broadcast/reduce: the buffer;
  // allgather, gather: each rank's contribution; reduce-scatter, scatter: each rank's result;
  // alltoall: per peer.
  uint64_t count = 0;
  int root = 0;
  // Host index (0..H-1, numbered by first appearance) of every rank; empty means one host.
  // Hierarchical builders group ranks by it.
  std::vector<int32_t> hostOf;
  // Bytes per element: plans are in elements, but choosing an algorithm depends on bytes.
  uint32_t elemSize = 4;
  // Alltoallv, this rank's view, in elements (size nranks each).
  std::vector<uint64_t> sendCounts, sendDispls, recvCounts, recvDispls;
};

// Element counts of the Input and Output buffers for a call (what the verifier allocates).
uint64_t inputCount(const CollArgs& a, int rank);
uint64_t outputCount(const CollArgs& a, int rank);

// Splits n elements into `parts` nearly equal contiguous pieces; piece i starts at
// partOffset(n, parts, i) and has partCount(n, parts, i) elements (the first n % parts get one
// more). Shared by every builder so their chunkings agree.
inline uint64_t partCount(uint64_t n, uint64_t parts, uint64_t i) {
  return n / parts + (i < n % parts ? 1 : 0);
}
inline uint64_t partOffset(uint64_t n, uint64_t parts, uint64_t i) {
  return i * (n / parts) + (i < n % parts ? i : n % parts);
}

}  // namespace loom::collectives
