// The shared-memory transport. See shm_transport.h for the outline; the layout of a
// connection's segment is:
//
//   SegmentHeader (magic, ring geometry, what each side published when it attached)
//   direction 0 (lower rank -> higher rank): RingControl, SlotHeader[slots], slot data
//   direction 1 (higher rank -> lower rank): the same
//
// Every control word has exactly one writer: the sender owns the slot it fills (its `seq`
// included), the receiver owns `tail` and `acked`. Publication is a release store, observation
// an acquire load, so the data of a slot is visible once its `seq` is.
#include "transports/shm/shm_transport.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <dirent.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <deque>
#include <map>
#include <new>

#include "base/reduce_kernels.h"
#include "base/copy.h"
#include "base/dtype.h"
#include "base/log.h"
#include "transports/shm/shm_util.h"
#include "transports/shm/user_memory.h"

namespace loom::transports {
namespace {

constexpr size_t kLine = 64;
constexpr uint64_t kSegmentMagic = 0x316d68736d6f6f6cull;  // "loomshm1"
constexpr uint32_t kLayoutVersion = 4;
// A CMA RecvReduce reads the sender's data into this buffer and reduces from it; small
// enough to still be in L2 when the reduction reads it.
constexpr size_t kBounceBytes = 256 << 10;
// Bytes one progress() call receives at most, so that a call stays short even when one
// descriptor covers a whole large message.
constexpr size_t kRecvBudgetBytes = 4 << 20;
// Copies a chunk into a slot and makes it globally visible before the caller publishes head.
// Larger chunks bypass the cache: with ordinary stores each line of the slot is first pulled
// out of the receiver's cache (its last read left it there) and then pulled back by the
// receiver, and where the two cores sit far apart (another chiplet or socket, or vCPUs the
// hypervisor placed so) that traffic of dirty lines dominates, several times the cost of the
// copy itself; where the cores share a cache streaming costs some bandwidth instead, the
// smaller loss. Tiny messages stay in the cache for latency.
void copyToSlot(char* dst, const char* src, size_t n) {
  if (n >= kNonTemporalBytes)
    copyBypassingCache(dst, src, n);  // fenced: visible before the release of head
  else
    memcpy(dst, src, n);
}

// What each rank of a pair publishes when it attaches to the pair's segment.
struct alignas(kPad) SideInfo {
  std::atomic<uint32_t> attached;     // 1 once the fields below are valid
  std::atomic<uint32_t> canReadPeer;  // the CMA probe of the other side: a ProbeResult
  int32_t pid;
  uint64_t pidNamespace;  // inode of /proc/self/ns/pid; 0 if unknown
  uint64_t probeAddr;     // a word in this process that holds probeValue
  uint64_t probeValue;
  // The stamp of this side's latest call that posted to the connection (TransferOp::stamp),
  // which a peer waiting for this side's message compares with its own (checkAlive).
  std::atomic<uint64_t> callWord;
  std::atomic<uint64_t> callCount;
};
enum ProbeResult : uint32_t { kProbeUnknown = 0, kProbeYes = 1, kProbeNo = 2 };

struct alignas(kPad) SegmentHeader {
  std::atomic<uint64_t> magic;  // kSegmentMagic once the creator has initialized the rest
  uint32_t version;
  uint32_t slots;
  uint64_t slotBytes;
  uint64_t totalBytes;
  SideInfo side[2];  // [0]: the lower rank of the pair
};

// The control words of one direction. What the sender has published is in the slots
// themselves (SlotHeader::seq).
struct RingControl {
  alignas(kPad) std::atomic<uint64_t> tail;   // slots released (receiver)
  alignas(kPad) std::atomic<uint64_t> acked;  // single-copy bytes read (receiver)
};

enum class SlotKind : uint8_t { Inline = 1, Cma = 2, Header = 3 };

// The chunk of a message that one slot carries: data in the slot (Inline), a range of the
// sender's memory that the receiver reads itself (Cma), or, for a whole message of at most
// kHeaderPayloadBytes, the data in the header's own line (Header): the receiver then takes one
// cache line from the sender's core instead of two in a row (the header, then the slot's
// data): one cross-core transfer less per small message. Every slot carries its message's
// size and call (TransferOp::stamp), which the receive checks before it takes any byte.
struct alignas(kLine) SlotHeader {
  // 1 + the slot's position in the direction's stream once the chunk is there, stored last.
  // The receiver polls the header itself rather than a ring index, so that a small message
  // costs it one cache line from the sender's core (the header), not two in a row (an index,
  // then the header it points to).
  std::atomic<uint64_t> seq;
  // The message's size (low 56 bits; checked against the receive, which must have the same
  // size) and the slot's kind (the top 8), in one word so that the stamp fits the line too.
  uint64_t bytesAndKind;
  CallStamp stamp;  // the message's call: the receive's must be the same
  struct Chunk {
    uint64_t offset;  // of the chunk in its message
    uint64_t length;
    uint64_t addr;  // Cma: where the chunk starts in the sender
  };
  union {
    Chunk chunk;                                // Inline and Cma
    unsigned char bytes[kHeaderPayloadBytes];  // Header: the whole message
  };
  static constexpr int kKindShift = 56;
  SlotKind kind() const { return SlotKind(bytesAndKind >> kKindShift); }
  uint64_t messageBytes() const { return bytesAndKind & ((uint64_t(1) << kKindShift) - 1); }
  void describe(SlotKind k, uint64_t bytes) {
    bytesAndKind = bytes | uint64_t(k) << kKindShift;
  }
  uint64_t offset() const { return kind() == SlotKind::Header ? 0 : chunk.offset; }
  uint64_t length() const { return kind() == SlotKind::Header ? messageBytes() : chunk.length; }
};
static_assert(sizeof(SlotHeader) == kLine && kHeaderPayloadBytes == kLine - 4 * sizeof(uint64_t),
              "a slot header is one cache line, the payload all of it past the fixed fields");

// Byte offsets of everything in a segment, from the ring geometry alone, so both sides
// compute the same layout from the header.
struct Layout {
  size_t control[2], headers[2], data[2], total;
  Layout(size_t slots, size_t slotBytes) {
    size_t off = alignUp(sizeof(SegmentHeader), kPage);
    for (int d = 0; d < 2; ++d) {
      control[d] = off;
      headers[d] = off + sizeof(RingControl);
      off = alignUp(headers[d] + slots * sizeof(SlotHeader), kPage);
      data[d] = off;
      off += slots * slotBytes;
    }
    total = off;
  }
};

// One direction of a connection, as pointers into the mapped segment.
struct Ring {
  RingControl* control = nullptr;
  SlotHeader* headers = nullptr;
  char* data = nullptr;
  size_t slotBytes = 0;
  char* slot(uint64_t index) const { return data + index * slotBytes; }
};

// A rank's doorbell: peers ring it after publishing something the rank may be waiting for.
struct Doorbell {
  alignas(kPad) std::atomic<uint32_t> seq;       // the futex word; bumped by every ring
  alignas(kPad) std::atomic<uint32_t> sleeping;  // set by the owner while it may sleep
};

// Wakes the owner of db if it is (about to be) asleep. Callers publish first.
void ring(Doorbell* db) {
  // Pairs with the fence in armSleep (Dekker): either the sleeper's last poll sees what was
  // published before this call, or this load sees its flag and wakes it.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (db->sleeping.load(std::memory_order_relaxed) == 0) return;
  db->seq.fetch_add(1, std::memory_order_release);
  futex(&db->seq, FUTEX_WAKE, INT_MAX, nullptr);
}

// The names carry their owners (ownerTag), so that whoever finds one can tell whether it is
// stale (removeStaleShm); shmNameOwners reads them back.
std::string connectionName(uint64_t commHash, int a, const ProcessId& ownerA, int b,
                           const ProcessId& ownerB, int lane) {
  if (b < a) return connectionName(commHash, b, ownerB, a, ownerA, lane);
  return "/" + shmNamePrefix(commHash) + strprintf("c%d-%d-%d-", a, b, lane) + ownerTag(ownerA) +
         "-" + ownerTag(ownerB);
}

std::string doorbellName(uint64_t commHash, int rank, const ProcessId& owner) {
  return "/" + shmNamePrefix(commHash) + strprintf("db%d-", rank) + ownerTag(owner);
}

bool allDigits(std::string_view s, bool hex = false) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [hex](char c) {
    return hex ? isxdigit(static_cast<unsigned char>(c)) != 0 : (c >= '0' && c <= '9');
  });
}

// "<pidNamespace>.<pid>.<start>" (ownerTag).
bool parseOwnerTag(const std::string& tag, ProcessId* out) {
  const size_t dot1 = tag.find('.'), dot2 = tag.find('.', dot1 + 1);
  if (dot1 == std::string::npos || dot2 == std::string::npos ||
      !allDigits(std::string_view(tag).substr(0, dot1)) ||
      !allDigits(std::string_view(tag).substr(dot1 + 1, dot2 - dot1 - 1)) ||
      !allDigits(std::string_view(tag).substr(dot2 + 1)) || dot2 - dot1 - 1 > 9)
    return false;
  out->pidNamespace = strtoull(tag.c_str(), nullptr, 10);
  out->pid = int32_t(strtol(tag.c_str() + dot1 + 1, nullptr, 10));
  out->start = strtoull(tag.c_str() + dot2 + 1, nullptr, 10);
  return true;
}

// One peer on one lane, both directions.
class ShmConnection final : public Connection {
 public:
  ShmConnection(int rank, int peer, int lane, std::string name, std::string peerDoorbellName,
                std::unique_ptr<Mapping> segment, std::shared_ptr<Mapping> peerDoorbell,
                size_t cmaThreshold)
      : rank_(rank),
        peer_(peer),
        lane_(lane),
        name_(std::move(name)),
        peerDoorbellName_(std::move(peerDoorbellName)),
        segment_(std::move(segment)),
        peerDoorbellMapping_(std::move(peerDoorbell)),
        peerDoorbell_(reinterpret_cast<Doorbell*>(peerDoorbellMapping_->base())),
        cmaThreshold_(cmaThreshold) {
    header_ = reinterpret_cast<SegmentHeader*>(segment_->base());
    slots_ = header_->slots;
    Layout layout(header_->slots, header_->slotBytes);
    int me = rank_ < peer_ ? 0 : 1;
    mine_ = &header_->side[me];
    theirs_ = &header_->side[1 - me];
    out_ = ringAt(layout, me);
    in_ = ringAt(layout, 1 - me);
  }

  ~ShmConnection() override {
    if (pidfd_ >= 0) close(pidfd_);
    unlinkName();
  }

  // Publishes this side of the pair and looks for the other one.
  void attach(uint64_t pidNamespace, const uint64_t* probeWord) {
    pidNamespace_ = pidNamespace;
    mine_->pid = getpid();
    mine_->pidNamespace = pidNamespace;
    mine_->probeAddr = reinterpret_cast<uintptr_t>(probeWord);
    mine_->probeValue = *probeWord;
    // seq_cst with the load in pollPeer: of two sides attaching at once, at least one sees
    // both attached, and that one unlinks the name.
    mine_->attached.store(1, std::memory_order_seq_cst);
    pollPeer();
  }

  const ShmConnectionStats& stats() const { return stats_; }

  Status post(TransferOp* op) override {
    if (op == nullptr || !validDtype(op->dtype))
      return errorf(loomInvalidArgument, "shm: invalid transfer posted to rank %d", peer_);
    size_t es = dtypeSize(op->dtype);
    bool isSend = op->kind == TransferOp::Kind::Send;
    bool isReduce = op->kind == TransferOp::Kind::RecvReduce;
    if (op->bytes % es != 0 || (isReduce && !validOp(op->op)) ||
        (op->bytes > 0 && ((isSend || isReduce) && op->src == nullptr)) ||
        (op->bytes > 0 && !isSend && op->dst == nullptr))
      return errorf(loomInvalidArgument,
                    "shm: malformed %s of %zu bytes (dtype %d, op %d) for rank %d",
                    isSend ? "send" : "receive", op->bytes, int(op->dtype), int(op->op), peer_);
    op->done = 0;
    if (op->bytes == 0) return Status::ok();  // an empty message never touches the ring
    if (isSend)
      sends_.push_back(Send{op});
    else
      recvs_.push_back(op);
    return Status::ok();
  }

  Status progress(bool* progressed) override {
    *progressed = false;
    flushNotifications();  // what the previous call published: its stores have drained since
    if (!peerAttached_) pollPeer();
    Status st = progressSends(progressed);
    if (st.isOk()) st = progressRecvs(progressed);
    return st;
  }

  void flushNotifications() override {
    if (!notify_) return;
    notify_ = false;
    ring(peerDoorbell_);
  }

  Status checkAlive() override {
    if (!peerAttached_) pollPeer();
    // Before the peer attaches we know no pid that is valid in our pid namespace; the
    // caller's deadline covers a peer that dies before it ever connects.
    if (!peerAttached_) return Status::ok();
    if (pidUsable_ && processExited(pidfd_, peerPid_)) return peerExited();
    return checkPeerCall();
  }
  bool seesPeersCall() const override { return true; }

  void beginCall(const CallStamp& stamp) override {
    mine_->callCount.store(stamp.count, std::memory_order_release);
    mine_->callWord.store(stamp.word, std::memory_order_release);
  }

  bool unreadMessage(MessageMismatch* out) const override {
    const SlotHeader& h = in_.headers[tail_ % slots_];
    if (!recvs_.empty() || h.seq.load(std::memory_order_acquire) != tail_ + 1) return false;
    *out = {};
    out->found = h.stamp;
    out->foundBytes = h.messageBytes();
    return true;
  }

 private:
  struct Send {
    TransferOp* op;
    size_t posted = 0;     // bytes handed to the ring: copied, or described for CMA
    bool started = false;  // the path (cma) is chosen when the op reaches the ring
    bool cma = false;
    uint64_t cmaStart = 0;  // position of the op's first byte in this direction's CMA stream
  };

  Ring ringAt(const Layout& layout, int direction) const {
    Ring r;
    r.control = reinterpret_cast<RingControl*>(segment_->base() + layout.control[direction]);
    r.headers = reinterpret_cast<SlotHeader*>(segment_->base() + layout.headers[direction]);
    r.data = segment_->base() + layout.data[direction];
    r.slotBytes = header_->slotBytes;
    return r;
  }

  Status peerError(const char* what, loomResult_t code) const {
    return errorf(code, "shm lane %d: peer rank %d (pid %d) %s", lane_, peer_, peerPid_, what);
  }

  Status peerExited() const {
    // A dead peer cannot remove its doorbell; do it for it so /dev/shm does not fill up.
    shm_unlink(peerDoorbellName_.c_str());
    return peerError("has exited", loomRemoteError);
  }

  void unlinkName() {
    if (unlinked_) return;
    unlinked_ = true;
    shm_unlink(name_.c_str());
  }

  // While this rank waits for the peer's message (nothing of it has come), the peer's latest
  // call on this connection must be that message's, or an earlier one (it is behind): a later
  // one means it finished the call without the message, the same one stamped otherwise means
  // it called something else. Both ranks may be waiting for each other's message then.
  Status checkPeerCall() {
    if (recvs_.empty() || received_ != 0) return Status::ok();
    // The peer's stamp first: what it published before it (the message) is then seen below.
    const CallStamp theirs{theirs_->callWord.load(std::memory_order_acquire),
                           theirs_->callCount.load(std::memory_order_acquire)};
    if (in_.headers[tail_ % slots_].seq.load(std::memory_order_acquire) == tail_ + 1)
      return Status::ok();  // a message is there: progress() compares its stamp
    const TransferOp& op = *recvs_.front();
    const bool behind = int32_t(theirs.sequence() - op.stamp.sequence()) < 0;
    if (behind || theirs == op.stamp) return Status::ok();
    recordMismatch({op.stamp, theirs, op.bytes, 0, true, true});
    return peerError("is in another call than the one whose message this rank waits for",
                     loomInvalidUsage);
  }

  bool peerCanReadMe() {
    if (peerCanReadMe_ == kProbeUnknown)
      peerCanReadMe_ = theirs_->canReadPeer.load(std::memory_order_acquire);
    return peerCanReadMe_ == kProbeYes;
  }

  // Notices the peer's attach: probes whether we can read its memory, gets a handle on its
  // liveness, and unlinks the segment's name, which nobody needs any more.
  void pollPeer() {
    if (theirs_->attached.load(std::memory_order_seq_cst) == 0) return;
    peerAttached_ = true;
    peerPid_ = theirs_->pid;
    uint64_t value = 0;
    iovec local{&value, sizeof(value)};
    iovec remote{reinterpret_cast<void*>(theirs_->probeAddr), sizeof(value)};
    bool canRead = process_vm_readv(peerPid_, &local, 1, &remote, 1, 0) == sizeof(value) &&
                   value == theirs_->probeValue;
    if (!canRead)
      LOOM_INFO("SHM", "rank %d cannot read rank %d's memory (%s); large messages use the ring",
                rank_, peer_, strerror(errno));
    mine_->canReadPeer.store(canRead ? kProbeYes : kProbeNo, std::memory_order_release);
    // A successful probe proves the pid is the peer's in our pid namespace.
    pidUsable_ = canRead || (pidNamespace_ != 0 && theirs_->pidNamespace == pidNamespace_);
    if (pidUsable_) pidfd_ = pidfdOpen(peerPid_);
    unlinkName();
  }

  Status readRemote(void* dst, uint64_t addr, size_t n) {
    bool exited = false;
    Status st = readProcessMemory(peerPid_, peer_, addr, dst, n, &exited);
    if (exited) return peerExited();
    return st.isOk() ? st : st.withContext(strprintf("shm lane %d", lane_));
  }

  Status progressSends(bool* progressed) {
    // Hand ready bytes to the ring, op after op.
    while (nextPost_ < sends_.size()) {
      Send& s = sends_[nextPost_];
      TransferOp* op = s.op;
      size_t ready = std::min(op->limit, op->bytes);
      if (s.posted >= ready) break;  // the executor has not released more yet
      if (!s.started) {
        // A message of at least the threshold goes by a single copy: the peer reads it from
        // this rank's memory in a few large pieces, which halves the copying of the slots'
        // path (copy in, copy out). It goes once all of it is released: a message still being
        // produced (a ring forwarding what it receives) would otherwise be read in as many
        // small pieces as it is released, each a system call and a round trip. Waiting cannot
        // deadlock: no plan needs a message's first part delivered to produce its last (the
        // verifier runs every plan with steps that complete whole).
        const bool single = cmaThreshold_ > 0 && op->bytes >= cmaThreshold_ && peerCanReadMe();
        if (single && ready < op->bytes) break;
        s.started = true;
        s.cma = single;
        s.cmaStart = cmaPosted_;
      }
      if (head_ - tailSeen_ == slots_) {
        tailSeen_ = out_.control->tail.load(std::memory_order_acquire);
        if (head_ - tailSeen_ == slots_) break;  // ring full
      }
      uint64_t index = head_ % slots_;
      SlotHeader& h = out_.headers[index];
      const char* src = static_cast<const char*>(op->src) + s.posted;
      size_t n = ready - s.posted;
      SlotKind kind = SlotKind::Inline;
      if (s.cma) {
        kind = SlotKind::Cma;
        h.chunk.addr = reinterpret_cast<uintptr_t>(src);
        cmaPosted_ += n;
        stats_.cmaBytes += n;
      } else if (s.posted == 0 && n == op->bytes && n <= kHeaderPayloadBytes) {
        memcpy(h.bytes, src, n);
        kind = SlotKind::Header;
        stats_.slotBytes += n;
        stats_.headerBytes += n;
      } else {
        n = std::min(n, out_.slotBytes);
        copyToSlot(out_.slot(index), src, n);
        h.chunk.addr = 0;
        stats_.slotBytes += n;
      }
      h.describe(kind, op->bytes);
      h.stamp = op->stamp;
      if (kind != SlotKind::Header) {
        h.chunk.offset = s.posted;
        h.chunk.length = n;
      }
      h.seq.store(++head_, std::memory_order_release);
      s.posted += n;
      notify_ = true;
      *progressed = true;
      if (s.posted == op->bytes) ++nextPost_;
    }
    // Report completion in posting order (the interface promises FIFO completion): only
    // the oldest op's `done` moves. A copied slot is finished; a CMA range only once acked.
    while (!sends_.empty()) {
      Send& s = sends_.front();
      TransferOp* op = s.op;
      size_t finished = s.posted;
      if (s.cma) {
        uint64_t acked = out_.control->acked.load(std::memory_order_acquire);
        finished =
            acked > s.cmaStart ? size_t(std::min<uint64_t>(acked - s.cmaStart, finished)) : 0;
      }
      size_t es = dtypeSize(op->dtype);
      size_t done = finished == op->bytes ? finished : finished - finished % es;
      if (done != op->done) {
        op->done = done;
        *progressed = true;
      }
      if (done < op->bytes) break;
      sends_.pop_front();
      --nextPost_;
    }
    return Status::ok();
  }

  // Receives in order: each round takes what the head slot holds for the first receive, as
  // far as the executor has released its destination, within kRecvBudgetBytes.
  Status progressRecvs(bool* progressed) {
    size_t budget = kRecvBudgetBytes;
    while (!recvs_.empty() && budget > 0) {
      TransferOp* op = recvs_.front();
      const uint64_t index = tail_ % slots_;
      const SlotHeader& h = in_.headers[index];
      if (h.seq.load(std::memory_order_acquire) != tail_ + 1) break;  // nothing new
      LOOM_TRY(checkSlotMatches(h, *op));
      size_t n = 0;
      LOOM_TRY(receivableBytes(h, *op, budget, &n));
      if (n == 0) break;  // the executor has not released more of dst yet
      LOOM_TRY(takeFromSlot(h, index, *op, n));
      budget -= n;
      finishPiece(op, n, h.length(), progressed);
    }
    return Status::ok();
  }

  // The head slot continues the message the first receive expects, where it left off: of the
  // receive's call and size (else a mismatch, which the executor describes), at its place.
  Status checkSlotMatches(const SlotHeader& h, const TransferOp& op) {
    if (!(h.stamp == op.stamp) || h.messageBytes() != op.bytes) [[unlikely]] {
      recordMismatch({op.stamp, h.stamp, op.bytes, h.messageBytes(), true});
      return peerError("sent a message that is not the one this rank receives",
                       loomInvalidUsage);
    }
    const uint64_t chunkOffset = h.offset(), chunkLength = h.length();
    if (chunkOffset + slotConsumed_ != received_ || slotConsumed_ >= chunkLength ||
        (h.kind() == SlotKind::Inline && chunkLength > in_.slotBytes) ||
        (h.kind() == SlotKind::Header && chunkLength > kHeaderPayloadBytes))
      return peerError(strprintf("sent a chunk at %llu of its %llu-byte message where this "
                                 "rank is at %zu",
                                 (unsigned long long)chunkOffset,
                                 (unsigned long long)h.messageBytes(), received_)
                           .c_str(),
                       loomInternalError);
    return Status::ok();
  }

  // *n: the bytes of the head slot to take now: what it still holds, as far as the executor
  // released the destination, within the budget; a CMA read at most one piece (or the bounce
  // buffer); a reduction whole elements. 0: none yet.
  Status receivableBytes(const SlotHeader& h, const TransferOp& op, size_t budget,
                         size_t* n) const {
    const bool reduceOp = op.kind == TransferOp::Kind::RecvReduce;
    const size_t es = dtypeSize(op.dtype);
    const size_t available = h.length() - slotConsumed_;
    const size_t limit = std::min(op.limit, op.bytes);
    const size_t room = limit > received_ ? limit - received_ : 0;
    *n = std::min({available, room, budget});
    if (h.kind() == SlotKind::Cma) *n = std::min(*n, reduceOp ? kBounceBytes : kCmaPieceBytes);
    if (reduceOp) *n -= *n % es;
    if (*n == 0 && reduceOp && available < es && room >= es)
      return peerError(strprintf("sent a chunk that splits a %zu-byte element; send and "
                                 "receive must use the same dtype",
                                 es)
                           .c_str(),
                       loomInternalError);
    return Status::ok();
  }

  // Copies (or reduces) n bytes of the head slot into the receive's destination: from the slot
  // itself, or for a CMA slot from the sender's memory.
  Status takeFromSlot(const SlotHeader& h, uint64_t index, const TransferOp& op, size_t n) {
    const bool reduceOp = op.kind == TransferOp::Kind::RecvReduce;
    const size_t es = dtypeSize(op.dtype);
    char* dst = static_cast<char*>(op.dst) + received_;
    const char* local = static_cast<const char*>(op.src) + received_;
    if (h.kind() == SlotKind::Inline || h.kind() == SlotKind::Header) {
      const char* data = (h.kind() == SlotKind::Header ? reinterpret_cast<const char*>(h.bytes)
                                                     : in_.slot(index)) +
                         slotConsumed_;
      if (reduceOp)
        reduce(dst, local, data, n / es, op.dtype, op.op);
      else
        memcpy(dst, data, n);
      return Status::ok();
    }
    if (h.kind() != SlotKind::Cma)
      return peerError(strprintf("left a corrupt slot (kind %u)", unsigned(h.kind())).c_str(),
                       loomInternalError);
    const uint64_t addr = h.chunk.addr + slotConsumed_;
    // A RecvReduce reads straight into its destination and combines there, unless that
    // would overwrite its local operand first (in place): then through the bounce buffer.
    // One pass fewer over the data (2 ranks, 64 MiB: 3.9 -> 4.2 GB/s out of place).
    const auto d = reinterpret_cast<uintptr_t>(dst), l = reinterpret_cast<uintptr_t>(local);
    if (reduceOp && (d + n <= l || l + n <= d)) {
      LOOM_TRY(readRemote(dst, addr, n));
      reduce(dst, local, dst, n / es, op.dtype, op.op);
    } else if (reduceOp) {
      if (!bounce_) bounce_.reset(new char[kBounceBytes]);
      LOOM_TRY(readRemote(bounce_.get(), addr, n));
      reduce(dst, local, bounce_.get(), n / es, op.dtype, op.op);
    } else {
      LOOM_TRY(readRemote(dst, addr, n));
    }
    acked_ += n;
    in_.control->acked.store(acked_, std::memory_order_release);
    return Status::ok();
  }

  // Accounts n bytes taken from the head slot (chunkLength bytes long): frees the slot once it
  // is all taken, reports the receive's progress (whole elements), and retires a finished one.
  void finishPiece(TransferOp* op, size_t n, uint64_t chunkLength, bool* progressed) {
    slotConsumed_ += n;
    received_ += n;
    if (slotConsumed_ == chunkLength) {
      slotConsumed_ = 0;
      in_.control->tail.store(++tail_, std::memory_order_release);
    }
    const size_t es = dtypeSize(op->dtype);
    op->done = received_ == op->bytes ? received_ : received_ - received_ % es;
    notify_ = true;
    *progressed = true;
    if (received_ == op->bytes) {
      recvs_.pop_front();
      received_ = 0;
    }
  }

  const int rank_, peer_, lane_;
  const std::string name_;
  const std::string peerDoorbellName_;
  bool unlinked_ = false;
  std::unique_ptr<Mapping> segment_;
  std::shared_ptr<Mapping> peerDoorbellMapping_;
  Doorbell* peerDoorbell_;
  const size_t cmaThreshold_;
  SegmentHeader* header_;
  SideInfo* mine_;
  SideInfo* theirs_;
  Ring out_, in_;
  uint64_t slots_;
  uint64_t pidNamespace_ = 0;
  ShmConnectionStats stats_;
  bool notify_ = false;  // published something the peer may wait for; not yet rung

  // The sending side.
  std::deque<Send> sends_;  // posted, not complete; [nextPost_, end) not fully handed over
  size_t nextPost_ = 0;
  uint64_t head_ = 0, tailSeen_ = 0;  // slots published; tail as last seen
  uint64_t cmaPosted_ = 0;  // bytes ever described by CMA slots in our direction

  // The receiving side.
  std::deque<TransferOp*> recvs_;
  size_t received_ = 0;      // of the oldest receive
  size_t slotConsumed_ = 0;  // of the slot at tail_
  uint64_t tail_ = 0;
  uint64_t acked_ = 0;
  std::unique_ptr<char[]> bounce_;

  // The peer, once attached.
  bool peerAttached_ = false;
  int peerPid_ = 0;
  bool pidUsable_ = false;  // peerPid_ names the peer in our pid namespace
  int pidfd_ = -1;
  uint32_t peerCanReadMe_ = kProbeUnknown;
};

class ShmTransport final : public Transport {
 public:
  ShmTransport(const CommContext* ctx, const ShmOptions& options) : ctx_(ctx), options_(options) {}

  ~ShmTransport() override {
    if (doorbellMapping_) shm_unlink(doorbellOf(ctx_->rank).c_str());
    // Peers killed before they could clean up leave their files (a doorbell, a segment not
    // attached yet, the host's arena); the ranks that outlive them remove those.
    removeStaleShm(shmNamePrefix(ctx_->commHash));
  }

  Status init() {
    // Under Yama ptrace_scope 1, process_vm_readv needs the target's consent; give it so
    // peers on this host can take the single-copy path. Without Yama this is a no-op.
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    if (getrandom(&probeWord_, sizeof(probeWord_), 0) != sizeof(probeWord_))
      probeWord_ = nowNs() ^ (uint64_t(getpid()) << 32);
    self_ = thisProcess();
    // What processes that ended without cleaning up left here, whichever job they ran.
    removeStaleShm(kShmNamePrefix);

    std::string name = doorbellOf(ctx_->rank);
    int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 && errno == EEXIST) {
      // Left by a process of the same communicator and rank that crashed: not ours to keep.
      shm_unlink(name.c_str());
      fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    }
    if (fd < 0)
      return errorf(loomSystemError, "shm: cannot create %s: %s", name.c_str(), strerror(errno));
    Fd holder(fd);
    Status st = allocateFd(fd, kPage, name);
    if (st.isOk()) st = mapFd(fd, kPage, name, &doorbellMapping_);
    if (!st.isOk()) {
      shm_unlink(name.c_str());
      return st;
    }
    doorbell_ = new (doorbellMapping_->base()) Doorbell();
    return Status::ok();
  }

  const char* name() const override { return "shm"; }

  bool canConnect(int peer) const override {
    if (peer < 0 || size_t(peer) >= ctx_->peers.size() || size_t(ctx_->rank) >= ctx_->peers.size())
      return false;
    if (ctx_->peers[peer].hostId != ctx_->peers[ctx_->rank].hostId) return false;
    // Same host but another /dev/shm (another IPC or mount namespace) cannot work: the
    // peer created its doorbell before the ranks exchanged their info, so look for it.
    int fd = shm_open(doorbellOf(peer).c_str(), O_RDONLY, 0);
    if (fd < 0) return false;
    close(fd);
    return true;
  }

  Status connect(int peer, int lane, const Deadline& deadline,
                 std::unique_ptr<Connection>* out) override {
    if (peer == ctx_->rank || !canConnect(peer))
      return errorf(loomInvalidUsage, "shm: rank %d cannot connect to rank %d", ctx_->rank, peer);
    std::shared_ptr<Mapping> peerDoorbell;
    LOOM_TRY(openPeerDoorbell(peer, &peerDoorbell));
    std::string name = connectionName(ctx_->commHash, ctx_->rank, self_, peer,
                                      processOf(ctx_->peers[size_t(peer)]), lane);
    std::unique_ptr<Mapping> segment;
    Status st = openSegment(name, peer, deadline, &segment);
    if (!st.isOk()) {
      shm_unlink(name.c_str());  // whoever created it, nobody will use it now
      return st;
    }
    auto conn = std::make_unique<ShmConnection>(
        ctx_->rank, peer, lane, name, doorbellOf(peer), std::move(segment),
        std::move(peerDoorbell), options_.cmaThreshold);
    conn->attach(self_.pidNamespace, &probeWord_);
    LOOM_INFO("SHM", "rank %d connected to rank %d lane %d (%s)", ctx_->rank, peer, lane,
              name.c_str());
    *out = std::move(conn);
    return Status::ok();
  }

  uint64_t armSleep() override {
    uint32_t token = doorbell_->seq.load(std::memory_order_acquire);
    doorbell_->sleeping.store(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with ring()
    return token;
  }

  void sleepUs(uint64_t token, int64_t timeoutUs) override {
    if (timeoutUs <= 0) return;
    timespec timeout{time_t(timeoutUs / 1000000), long(timeoutUs % 1000000) * 1000L};
    // Returns at once if any ring came after armSleep (seq moved past the token).
    futex(&doorbell_->seq, FUTEX_WAIT, uint32_t(token), &timeout);
  }

  void disarmSleep() override { doorbell_->sleeping.store(0, std::memory_order_relaxed); }

  Cost cost() const override { return {0.5e-6, 1.0 / 10e9}; }

 private:
  std::string doorbellOf(int rank) const {
    return doorbellName(ctx_->commHash, rank,
                        rank == ctx_->rank ? self_ : processOf(ctx_->peers[size_t(rank)]));
  }

  Status openPeerDoorbell(int peer, std::shared_ptr<Mapping>* out) {
    auto it = peerDoorbells_.find(peer);
    if (it != peerDoorbells_.end()) {
      *out = it->second;
      return Status::ok();
    }
    std::string name = doorbellOf(peer);
    Fd fd(shm_open(name.c_str(), O_RDWR, 0));
    struct stat st;
    if (fd.get() < 0 || fstat(fd.get(), &st) != 0 || size_t(st.st_size) < sizeof(Doorbell))
      return errorf(loomRemoteError, "shm: peer rank %d (pid %d) has no doorbell %s: %s", peer,
                    ctx_->peers[peer].pid, name.c_str(),
                    fd.get() < 0 ? strerror(errno) : "too small");
    std::unique_ptr<Mapping> mapping;
    LOOM_TRY(mapFd(fd.get(), kPage, name, &mapping));
    *out = peerDoorbells_[peer] = std::shared_ptr<Mapping>(std::move(mapping));
    return Status::ok();
  }

  // Creates the pair's segment, or attaches to the one the peer created. Waits only for
  // the creator to finish initializing, which it does inside its own connect().
  Status openSegment(const std::string& name, int peer, const Deadline& deadline,
                     std::unique_ptr<Mapping>* out) {
    for (;;) {
      int created = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (created >= 0) {
        Fd fd(created);
        return initSegment(fd.get(), name, out);
      }
      if (errno != EEXIST)
        return errorf(loomSystemError, "shm: cannot create %s: %s", name.c_str(), strerror(errno));
      Fd fd(shm_open(name.c_str(), O_RDWR, 0));
      if (fd.get() >= 0) return attachSegment(fd.get(), name, peer, deadline, out);
      if (errno != ENOENT)
        return errorf(loomSystemError, "shm: cannot open %s: %s", name.c_str(), strerror(errno));
      // Unlinked between our two opens (a stale name being cleaned up): try again.
      sched_yield();
      if (deadline.expired())
        return errorf(loomTimeout, "shm: timed out opening %s for rank %d", name.c_str(), peer);
    }
  }

  Status initSegment(int fd, const std::string& name, std::unique_ptr<Mapping>* out) {
    size_t slotBytes = options_.slotBytes;
    Layout layout(options_.slots, slotBytes);
    LOOM_TRY(allocateFd(fd, layout.total, name));
    LOOM_TRY(mapFd(fd, layout.total, name, out));
    char* base = (*out)->base();
    auto* header = new (base) SegmentHeader();
    header->version = kLayoutVersion;
    header->slots = uint32_t(options_.slots);
    header->slotBytes = slotBytes;
    header->totalBytes = layout.total;
    for (int d = 0; d < 2; ++d) new (base + layout.control[d]) RingControl();
    header->magic.store(kSegmentMagic, std::memory_order_release);
    return Status::ok();
  }

  Status attachSegment(int fd, const std::string& name, int peer, const Deadline& deadline,
                       std::unique_ptr<Mapping>* out) {
    auto timeout = [&](const char* what) {
      return errorf(loomTimeout, "shm: timed out waiting for rank %d to %s %s", peer, what,
                    name.c_str());
    };
    struct stat st = {};
    if (!waitUntil(deadline, [&] {
          return fstat(fd, &st) == 0 && size_t(st.st_size) >= sizeof(SegmentHeader);
        }))
      return timeout("size");
    std::unique_ptr<Mapping> first;
    LOOM_TRY(mapFd(fd, kPage, name, &first));
    auto* header = reinterpret_cast<SegmentHeader*>(first->base());
    if (!waitUntil(deadline,
                   [&] { return header->magic.load(std::memory_order_acquire) == kSegmentMagic; }))
      return timeout("initialize");
    size_t total = header->totalBytes;
    fstat(fd, &st);
    if (header->version != kLayoutVersion || header->slots == 0 || header->slotBytes == 0 ||
        Layout(header->slots, header->slotBytes).total != total || size_t(st.st_size) < total)
      return errorf(loomInternalError,
                    "shm: %s has an unexpected layout (version %u, %u slots of %llu bytes)",
                    name.c_str(), header->version, header->slots,
                    (unsigned long long)header->slotBytes);
    first.reset();
    return mapFd(fd, total, name, out);
  }

  const CommContext* ctx_;
  const ShmOptions options_;
  std::unique_ptr<Mapping> doorbellMapping_;
  Doorbell* doorbell_ = nullptr;
  std::map<int, std::shared_ptr<Mapping>> peerDoorbells_;
  ProcessId self_;  // this process, as its files in /dev/shm name it
  uint64_t probeWord_ = 0;  // peers read it to test whether CMA works
};

}  // namespace

bool shmConnectionStats(const Connection& conn, ShmConnectionStats* out) {
  auto* shm = dynamic_cast<const ShmConnection*>(&conn);
  if (shm == nullptr) return false;
  *out = shm->stats();
  return true;
}

std::string shmNamePrefix(uint64_t commHash) {
  return kShmNamePrefix + strprintf("%016llx-", (unsigned long long)commHash);
}

bool shmNameOwners(const std::string& name, std::vector<ProcessId>* owners) {
  // loom-<communicator, 16 hex digits>-, then db<rank>-<owner>, c<rank>-<rank>-<lane>-<owner>-
  // <owner> or arena-<host, 16 hex digits>-<owner>.
  const size_t head = kShmNamePrefix.size() + 17;
  if (name.size() <= head || name.compare(0, kShmNamePrefix.size(), kShmNamePrefix) != 0 ||
      !allDigits(std::string_view(name).substr(kShmNamePrefix.size(), 16), true) ||
      name[head - 1] != '-')
    return false;
  std::vector<std::string> t;
  for (size_t pos = head;;) {
    const size_t dash = name.find('-', pos);
    t.push_back(name.substr(pos, dash == std::string::npos ? std::string::npos : dash - pos));
    if (dash == std::string::npos) break;
    pos = dash + 1;
  }
  size_t first = 0;
  if (t.size() == 2 && t[0].rfind("db", 0) == 0 && allDigits(std::string_view(t[0]).substr(2)))
    first = 1;
  else if (t.size() == 5 && t[0].rfind("c", 0) == 0 && allDigits(std::string_view(t[0]).substr(1)) &&
           allDigits(t[1]) && allDigits(t[2]))
    first = 3;
  else if (t.size() == 3 && t[0] == "arena" && t[1].size() == 16 && allDigits(t[1], true))
    first = 2;
  else
    return false;
  owners->assign(t.size() - first, ProcessId());
  for (size_t i = first; i < t.size(); ++i)
    if (!parseOwnerTag(t[i], &(*owners)[i - first])) return false;
  return true;
}

std::vector<std::string> removeStaleShm(const std::string& prefix) {
  std::vector<std::string> removed;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return removed;
  std::vector<ProcessId> owners;
  while (const dirent* e = readdir(dir)) {
    const std::string name = e->d_name;
    // One ended owner is enough: a pair's segment is of no use to the other side any more.
    if (name.compare(0, prefix.size(), prefix) == 0 && shmNameOwners(name, &owners) &&
        std::any_of(owners.begin(), owners.end(), processGone) &&
        shm_unlink(("/" + name).c_str()) == 0)
      removed.push_back(name);
  }
  closedir(dir);
  for (const std::string& name : removed)
    LOOM_INFO("SHM", "removed /dev/shm/%s: its owner has ended", name.c_str());
  return removed;
}

Status createShmTransport(const CommContext* ctx, const ShmOptions& options,
                          std::unique_ptr<Transport>* out) {
  if (options.slots < 1 || options.slots > 4096 || options.slotBytes == 0 ||
      options.slotBytes > (size_t(1) << 30))
    return errorf(loomInvalidArgument,
                  "shm: LOOM_SHM_SLOTS (%d) must be 1..4096 and LOOM_SHM_SLOT_BYTES (%zu) "
                  "1 byte..1 GiB",
                  options.slots, options.slotBytes);
  ShmOptions o = options;
  o.slotBytes = alignUp(o.slotBytes, kPage);  // keeps every slot's data page-aligned
  auto transport = std::make_unique<ShmTransport>(ctx, o);
  LOOM_TRY(transport->init());
  *out = std::move(transport);
  return Status::ok();
}

}  // namespace loom::transports
