// The one narrow interface every transport implements.
//
// A Connection joins this rank to one peer on one lane, both directions. Transfers are posted
// as TransferOps and advanced by progress() without blocking; in each direction they complete
// in the order posted, and a receive is posted with the same byte count as its send. The
// executor moves an op's `limit` forward as the data it needs becomes ready (pipelining), and
// the transport moves `done` forward as bytes finish.
#pragma once

#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "loom/loom.h"

namespace loom::transports {

// What identifies a call alike on every rank (its role aside), in two words. The members of
// the host's arena stamp each call with it (ShmArena::enter, stampsMatch), and every message
// carries its call's stamp (TransferOp::stamp) in the header its transport already sends, so
// that a rank whose call does not match the others' finds out instead of returning what it read
// of another call. `word`: the call's number (low 32 bits: among the calls through the arena,
// or for a message among the calls its connection carried, Connection::nextCall), its
// collective (4 bits), datatype (4), reduction op (8) and root (low 16 bits); `count`: its
// count. A send/receive group is stamped as one (collective SendRecv, the rest 0): its
// operations are each rank's own, and their sizes are checked message by message.
struct CallStamp {
  uint64_t word = 0, count = 0;
  static CallStamp of(uint64_t sequence, uint32_t collective, uint32_t dtype, uint32_t op,
                      int32_t root, uint64_t count) {
    return {(sequence & 0xffffffffu) | uint64_t(collective & 0xfu) << 32 |
                uint64_t(dtype & 0xfu) << 36 | uint64_t(op & 0xffu) << 40 |
                uint64_t(uint16_t(root)) << 48,
            count};
  }
  // The same call as its n-th on a connection.
  CallStamp numbered(uint32_t n) const { return {(word & ~0xffffffffull) | n, count}; }
  uint32_t sequence() const { return uint32_t(word); }
  uint32_t collective() const { return uint32_t(word >> 32) & 0xfu; }
  uint32_t dtype() const { return uint32_t(word >> 36) & 0xfu; }
  uint32_t op() const { return uint32_t(word >> 40) & 0xffu; }
  uint32_t root() const { return uint32_t(word >> 48); }
  bool operator==(const CallStamp&) const = default;
};

struct TransferOp {
  enum class Kind : uint8_t { Send, Recv, RecvReduce };
  Kind kind = Kind::Send;
  const void* src = nullptr;  // Send: the data; RecvReduce: the local operand
  void* dst = nullptr;        // Recv, RecvReduce: where the result lands
  size_t bytes = 0;
  loomDataType_t dtype = loomUint8;  // RecvReduce: element type and op
  loomRedOp_t op = loomSum;
  // Set by the executor: the transport may touch bytes [0, limit) only. Grows monotonically
  // up to `bytes`; always a multiple of the element size.
  size_t limit = 0;
  // Set by the transport: bytes [0, done) are finished. For a send that means the source may
  // be overwritten (the peer has its copy); for a receive that dst holds the result.
  // Grows monotonically, in whole elements; the op is complete when done == bytes.
  size_t done = 0;
  // The call the message belongs to (CallStamp): a send's travels with it, a receive's is what
  // it must find there. Users of a transport outside calls (the topology's measurement, NCCL's
  // net plugin) leave it 0 at both ends.
  CallStamp stamp;
  bool complete() const { return done == bytes; }
};

// An op whose bytes are all ready (limit = bytes) in `buffer`: the source of a send, where a
// receive lands.
inline TransferOp wholeTransfer(TransferOp::Kind kind, void* buffer, size_t bytes) {
  TransferOp op;
  op.kind = kind;
  op.src = buffer;
  op.dst = buffer;
  op.bytes = bytes;
  op.limit = bytes;
  return op;
}

// What each rank publishes at init and every rank learns about every other rank.
struct PeerInfo {
  int32_t rank = 0;
  int32_t pid = 0;
  // When the process started and its pid namespace (transports/shm/shm_util.h, ProcessId):
  // the names of its files in /dev/shm carry them, so that they can be told stale.
  uint64_t pidStart = 0;
  uint64_t pidNamespace = 0;
  uint64_t hostId = 0;    // hash of hostname, boot id and network namespace inode
  uint64_t machineId = 0; // hash of the boot id alone: ranks that share CPUs
  cpu_set_t cpus = {};     // the CPUs the rank may run on (its affinity at init)
  char hostname[64] = {};
  // The rank's TCP listening address (sockaddr_in or sockaddr_in6).
  sockaddr_storage tcpAddr = {};
  uint32_t tcpAddrLen = 0;
};

// Everything a transport needs to know about its communicator.
struct CommContext {
  int rank = 0;
  int nranks = 1;
  uint64_t commHash = 0;           // unique per communicator; names shared memory segments
  unsigned char secret[16] = {};   // proves a connection belongs to this communicator
  std::vector<PeerInfo> peers;     // indexed by rank, this rank included
  int64_t timeoutMs = -1;          // the communicator's deadline for any wait
  // What each rank's UCX transport published (transports/ucx/ucx_transport.h, ucxAddress), by
  // rank; empty where the communicator has no UCX transport.
  std::vector<std::string> ucxAddresses;
};

// "rank 3 (host node7)", or "rank 3" where its hostname is unknown: how errors name a peer.
inline std::string describePeer(const CommContext& ctx, int rank) {
  if (rank >= 0 && size_t(rank) < ctx.peers.size() && ctx.peers[size_t(rank)].hostname[0] != 0)
    return strprintf("rank %d (host %.64s)", rank, ctx.peers[size_t(rank)].hostname);
  return strprintf("rank %d", rank);
}

// What a receive found where its message should begin (Connection::mismatch): a message of
// another call (its stamp), of another size, or, where `header` is false, bytes that are no
// message header at all (a stream the two ends no longer cut alike).
// `waiting`: no message came; the peer is in another call with this rank than the one whose
// message this rank waits for (found: its call, foundBytes 0), as what it published says.
struct MessageMismatch {
  CallStamp expected, found;
  uint64_t expectedBytes = 0, foundBytes = 0;
  bool header = true;
  bool waiting = false;
};

class Connection {
 public:
  virtual ~Connection() = default;
  // The number of the next call that posts to this connection; the executor takes one per call
  // at the call's first post here. Both ends of a link count alike for matched calls (their
  // plans post to each other, or neither does), whatever else each rank runs: a message carries
  // its number in its stamp, so a message left over from an earlier call is told apart.
  uint32_t nextCall() { return ++calls_; }
  uint32_t currentCall() const { return calls_; }
  // Told once per call, at its first post here, the stamp its messages carry on this
  // connection (a transport that lets a waiting peer see it publishes it).
  virtual void beginCall(const CallStamp& /*stamp*/) {}
  // Why progress() failed, where it did because a message did not match its receive (the
  // caller names the two calls); null otherwise.
  const MessageMismatch* mismatch() const { return mismatched_ ? &mismatch_ : nullptr; }
  // Whether a message has arrived that no posted receive takes (*out: its stamp and size, as
  // `found`). Asked where none can be due: as a call with no transfers begins, whose peers
  // cannot be past it yet, such a message is one an earlier call left unread.
  virtual bool unreadMessage(MessageMismatch* /*out*/) const { return false; }
  // Queues op. The op must stay alive and at the same address until complete.
  virtual Status post(TransferOp* op) = 0;
  // Advances posted ops without blocking; sets *progressed when any `done` moved or any
  // internal state changed in a way worth polling again for. Errors name the peer.
  virtual Status progress(bool* progressed) = 0;
  // Cheap check for waits that see no progress: the peer process exists; where the transport
  // can tell (seesPeersCall), the peer is in the call whose message this rank waits for (else
  // a mismatch).
  virtual Status checkAlive() { return Status::ok(); }
  // Whether checkAlive sees the peer's call (a transport that shares memory with the peer
  // publishes it there), which tells a pair apart at once; the executor also compares the
  // calls of long waits through its host (collectives::ExecHost::reportWait), which finds
  // ranks that wait on each other in a cycle.
  virtual bool seesPeersCall() const { return false; }
  // Wakes the peer if progress() published something it may be asleep waiting for. A
  // transport may leave that to the start of its next progress() call, so that the wake-up's
  // full fence is not paid between publishing a small message and polling for the answer
  // (where it would wait for the stores to reach the peer); whoever stops calling progress()
  // on a connection (a finished call) calls this once.
  virtual void flushNotifications() {}

 protected:
  // A receive found another message than its own (what mismatch() then returns); the transport
  // fails its progress() with loomInvalidUsage.
  void recordMismatch(const MessageMismatch& m) {
    mismatch_ = m;
    mismatched_ = true;
  }

 private:
  uint32_t calls_ = 0;
  MessageMismatch mismatch_;
  bool mismatched_ = false;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual bool canConnect(int peer) const = 0;
  // Connects to peer on lane. Both ranks call it for their shared edge; it must not wait for
  // the peer to make any other progress (so lazy connection cannot deadlock).
  virtual Status connect(int peer, int lane, const Deadline& deadline,
                         std::unique_ptr<Connection>* out) = 0;

  // Sleeping while nothing progresses: armSleep() announces the intent and returns a token,
  // the caller then polls its connections once more, and only if still idle calls sleepUs(),
  // which returns on any event for this rank on this transport, or after timeoutUs
  // microseconds (a caller taking turns among several transports, where an event on one wakes
  // no other, sleeps on each briefly).
  virtual uint64_t armSleep() { return 0; }
  virtual void sleepUs(uint64_t token, int64_t timeoutUs) = 0;
  virtual void disarmSleep() {}

  // Link cost the tuner reads: latency in seconds, inverse bandwidth in seconds per byte.
  struct Cost { double alpha; double beta; };
  virtual Cost cost() const = 0;
};

// The factories take each transport's options (its own folder's header). The TCP transport
// starts listening when created; its address goes into PeerInfo before the peers are known,
// hence the two steps.
// Fills info->tcpAddr for the TCP transport (called between create and the exchange).
void tcpListenAddress(const Transport& tcp, PeerInfo* info);
// Whether the TCP transport paces each peer at a rate of its own (LOOM_TCP_PACING=-1,
// TcpOptions::pacingPerPeer), which setTcpPeerPacing gives.
bool tcpPacesPerPeer(const Transport& tcp);
// The rate (bytes/s, 0: unpaced) of each TCP socket to each peer, by rank, for the connections
// made after it; ignored where tcpPacesPerPeer is false.
void setTcpPeerPacing(Transport& tcp, std::vector<uint64_t> bytesPerSecondByPeer);

}  // namespace loom::transports
