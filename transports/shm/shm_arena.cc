// Layout of the arena segment: ArenaHeader, one ArenaMember per rank of the host (in rank
// order), padding to a page, then the data (two halves, see nextCallBase).
#include "transports/shm/shm_arena.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <new>

#include "base/log.h"
#include "transports/shm/shm_transport.h"
#include "transports/shm/shm_util.h"

namespace loom::transports {

constexpr uint64_t kArenaMagic = 0x326e7261656d6f6cull;  // "lomearn2"
constexpr uint64_t kLineBytes = 64;

struct alignas(kPad) ArenaHeader {
  std::atomic<uint64_t> magic;  // kArenaMagic once the creator has initialized the rest
  uint32_t members;
  uint64_t dataBytes;
  uint64_t dataOffset;
  uint64_t flagSalt;  // random: what a flag in the data holds is its ticket xor this
  alignas(kPad) std::atomic<uint32_t> attached;  // members that mapped the segment
  alignas(kPad) std::atomic<uint32_t> wakeups;   // the futex word of sleep(): bumped to wake
  alignas(kPad) std::atomic<uint32_t> sleepers;  // members that may be in FUTEX_WAIT
  // 1 + the rank that revoked the communicator (ShmArena::revoke), 0 before: written once,
  // read at the start of every call that uses the arena.
  alignas(kPad) std::atomic<uint32_t> revokedBy;
};

// Where a member's buffer of its current call is (ShmArena::publish): written before the
// member arrives at the call's first barrier, read by the others after it passes.
struct PublishedBuffer {
  uint64_t addr;
  SegmentRef segment;
};

// Written only by its member, read by the others; a block of its own, so that one member's
// arrival moves one block between caches, the Input and Output it published with it.
struct alignas(kPad) ArenaMember {
  int32_t rank;
  int32_t pid;
  uint64_t pidNamespace;
  std::atomic<uint32_t> present;   // 1 once rank, pid and pidNamespace are valid
  std::atomic<uint32_t> left;      // 1 once the member has left on purpose (ShmArena::leave)
  std::atomic<uint64_t> arrivals;  // barriers this member has arrived at: its flag
  PublishedBuffer buffers[2];      // Input, Output
  CallStamp stamps[2];             // ShmArena::stamp, by sequence parity
  std::atomic<uint32_t> votes[2];  // ShmArena::vote, by round parity
};

namespace {

size_t dataOffset(int members) {
  return alignUp(sizeof(ArenaHeader) + size_t(members) * sizeof(ArenaMember), kPage);
}

}  // namespace

uint64_t ShmArena::callBytes(uint64_t dataBytes) { return dataBytes / 2 / kLineBytes * kLineBytes; }

Status ShmArena::open(const CommContext& ctx, uint64_t dataBytes, const Deadline& deadline,
                      std::unique_ptr<ShmArena>* out) {
  std::unique_ptr<ShmArena> arena(new ShmArena());
  LOOM_TRY(arena->attach(ctx, dataBytes, deadline));
  *out = std::move(arena);
  return Status::ok();
}

Status ShmArena::attach(const CommContext& ctx, uint64_t dataBytes, const Deadline& deadline) {
  const uint64_t host = ctx.peers[size_t(ctx.rank)].hostId;
  int lowest = -1;
  for (const PeerInfo& p : ctx.peers) {
    if (p.hostId != host) continue;
    if (lowest < 0) lowest = p.rank;
    if (p.rank == ctx.rank) localIndex_ = members_;
    memberRanks_.push_back(p.rank);
    ++members_;
  }
  memberOf_.assign(ctx.peers.size(), -1);
  for (int i = 0; i < members_; ++i) memberOf_[size_t(memberRanks_[size_t(i)])] = i;
  name_ = "/" + shmNamePrefix(ctx.commHash) + strprintf("arena-%016llx-", (unsigned long long)host) +
          ownerTag(processOf(ctx.peers[size_t(lowest)]));
  const size_t offset = dataOffset(members_), total = offset + dataBytes;
  creator_ = localIndex_ == 0;
  if (creator_) {
    Fd fd(shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600));
    if (fd.get() < 0)
      return errorf(loomSystemError, "shm: cannot create the direct arena %s: %s", name_.c_str(),
                    strerror(errno));
    LOOM_TRY(allocateFd(fd.get(), total, name_));
    LOOM_TRY(mapFd(fd.get(), total, name_, &mapping_));
    header_ = new (mapping_->base()) ArenaHeader();
    header_->members = uint32_t(members_);
    header_->dataBytes = dataBytes;
    header_->dataOffset = offset;
    if (getrandom(&header_->flagSalt, sizeof(header_->flagSalt), 0) != sizeof(uint64_t))
      header_->flagSalt = nowNs() * 0x9e3779b97f4a7c15ull ^ uint64_t(getpid());
    for (int i = 0; i < members_; ++i)
      new (mapping_->base() + sizeof(ArenaHeader) + i * sizeof(ArenaMember)) ArenaMember();
    header_->magic.store(kArenaMagic, std::memory_order_release);
  } else {
    // The header first: it says whether the ranks agree on the arena, before the whole of it
    // is mapped (the creator sized the segment before it published the magic).
    const size_t headerBytes = alignUp(sizeof(ArenaHeader), kPage);
    int fd = -1;
    struct stat st = {};
    const bool opened = waitUntil(deadline, [&] {
      if (fd < 0) fd = shm_open(name_.c_str(), O_RDWR, 0);
      return fd >= 0 && fstat(fd, &st) == 0 && size_t(st.st_size) >= headerBytes;
    });
    Fd holder(fd);
    if (!opened)
      return errorf(loomTimeout,
                    "shm: timed out waiting for rank %d to create the direct arena %s (%s)", lowest,
                    name_.c_str(), fd < 0 ? strerror(errno) : "too small");
    std::unique_ptr<Mapping> head;
    LOOM_TRY(mapFd(fd, headerBytes, name_, &head));
    const auto* h = reinterpret_cast<const ArenaHeader*>(head->base());
    if (!waitUntil(deadline,
                   [&] { return h->magic.load(std::memory_order_acquire) == kArenaMagic; }))
      return errorf(loomTimeout, "shm: timed out waiting for rank %d to initialize %s", lowest,
                    name_.c_str());
    if (h->members != uint32_t(members_) || h->dataBytes != dataBytes)
      return errorf(loomInvalidUsage,
                    "shm: the direct arena %s has %llu bytes for %u ranks, this rank expects "
                    "%llu bytes for %d: LOOM_SHM_DIRECT_BYTES must be the same on every rank",
                    name_.c_str(), (unsigned long long)h->dataBytes, h->members,
                    (unsigned long long)dataBytes, members_);
    head.reset();
    LOOM_TRY(mapFd(fd, total, name_, &mapping_));
    header_ = reinterpret_cast<ArenaHeader*>(mapping_->base());
  }
  member_ = reinterpret_cast<ArenaMember*>(mapping_->base() + sizeof(ArenaHeader));
  data_ = mapping_->base() + offset;
  callBytes_ = callBytes(dataBytes);
  pidNamespace_ = pidNamespaceId();
  pidfds_.assign(size_t(members_), -1);
  for (int parity = 0; parity < 2; ++parity) {
    stampSlots_[parity].clear();
    for (int i = 0; i < members_; ++i) stampSlots_[parity].push_back(&member_[i].stamps[parity]);
  }
  revokedBy_ = &header_->revokedBy;
  ArenaMember& me = member_[localIndex_];
  me.rank = ctx.rank;
  me.pid = getpid();
  me.pidNamespace = pidNamespace_;
  me.present.store(1, std::memory_order_release);
  // Whoever maps it last removes the name: from then on only the mappings hold the memory.
  if (header_->attached.fetch_add(1, std::memory_order_acq_rel) + 1 == uint32_t(members_))
    shm_unlink(name_.c_str());
  LOOM_INFO("SHM", "rank %d mapped the direct arena %s (%d ranks, %llu bytes)", ctx.rank,
            name_.c_str(), members_, (unsigned long long)dataBytes);
  return Status::ok();
}

ShmArena::~ShmArena() {
  for (int fd : pidfds_)
    if (fd >= 0) close(fd);
  // A member that died before mapping the arena leaves its name behind; the creator removes it.
  if (creator_) shm_unlink(name_.c_str());
}

void* ShmArena::nextCallBase() { return data_ + (calls_++ % 2) * callBytes_; }

uint64_t ShmArena::arrive(FlagWindow flags) {
  // Each member raises a flag of its own and waits until every member's flag has reached the
  // same barrier: no locked read-modify-write on one line that all members fight over. The
  // flag is in the member's own block, or where the plan put it (FlagWindow): in the line the
  // member has just written its data to, so that a peer takes both in one transfer.
  std::atomic<uint64_t>& arrivals = member_[localIndex_].arrivals;
  const uint64_t ticket = arrivals.load(std::memory_order_relaxed) + 1;
  // seq_cst, with the load after it: pairs with sleep() (Dekker): either the sleeper sees this
  // arrival, or this sees the sleeper and wakes it.
  if (flags.base != nullptr) {
    arrivals.store(ticket, std::memory_order_relaxed);  // for absentRanks
    flagOf(flags, localIndex_)->store(ticket ^ header_->flagSalt, std::memory_order_seq_cst);
  } else {
    arrivals.store(ticket, std::memory_order_seq_cst);
  }
  if (header_->sleepers.load(std::memory_order_seq_cst) > 0) {
    header_->wakeups.fetch_add(1, std::memory_order_release);
    futex(&header_->wakeups, FUTEX_WAKE, INT_MAX, nullptr);
  }
  return ticket;
}

bool ShmArena::passed(uint64_t ticket, FlagWindow flags) {
  // Members seen there stay there: start from the first one not yet seen. A flag in the data
  // must equal its salted ticket exactly, so that what other calls left there never passes; it
  // keeps that value until every member has seen it (the next write of that line is two calls
  // on, as nextCallBase explains).
  if (waitingFor_.ticket != ticket) waitingFor_ = {ticket, 0};
  for (; waitingFor_.member < members_; ++waitingFor_.member) {
    const bool there =
        flags.base != nullptr
            ? flagOf(flags, waitingFor_.member)->load(std::memory_order_seq_cst) ==
                  (ticket ^ header_->flagSalt)
            : member_[waitingFor_.member].arrivals.load(std::memory_order_seq_cst) >= ticket;
    if (!there) return false;
  }
  return true;
}

void ShmArena::sleep(uint64_t ticket, int timeoutMs, FlagWindow flags) {
  if (timeoutMs <= 0) return;
  header_->sleepers.fetch_add(1, std::memory_order_seq_cst);
  const uint32_t wakeups = header_->wakeups.load(std::memory_order_seq_cst);
  if (!passed(ticket, flags)) {
    timespec timeout{timeoutMs / 1000, long(timeoutMs % 1000) * 1000000L};
    futex(&header_->wakeups, FUTEX_WAIT, wakeups, &timeout);
  }
  header_->sleepers.fetch_sub(1, std::memory_order_relaxed);
}

void ShmArena::publish(const void* input, uint64_t inputBytes, const void* output,
                       uint64_t outputBytes) {
  peerSegments_.trim();  // the previous call's views are done with
  PublishedBuffer* mine = member_[localIndex_].buffers;
  mine[0] = {reinterpret_cast<uint64_t>(input), findUserMemory(input, inputBytes)};
  mine[1] = {reinterpret_cast<uint64_t>(output), findUserMemory(output, outputBytes)};
}

void ShmArena::vote(uint64_t round, bool yes) {
  member_[localIndex_].votes[round % 2].store(yes ? 1 : 0, std::memory_order_relaxed);
}

bool ShmArena::unanimous(uint64_t round) const {
  for (int m = 0; m < members_; ++m) {
    const ArenaMember& member = member_[m];
    if (member.votes[round % 2].load(std::memory_order_relaxed) == 0) return false;
    if (member.pidNamespace != pidNamespace_ || pidNamespace_ == 0) return false;
  }
  return true;
}

Status ShmArena::peer(int rank, uint32_t which, PeerView* out) {
  const int m = rank >= 0 && size_t(rank) < memberOf_.size() ? memberOf_[size_t(rank)] : -1;
  if (m < 0 || m == localIndex_ || which > 1)
    return errorf(loomInternalError,
                  "shm: a plan reads buffer %u of rank %d, not a peer on this host", which, rank);
  const ArenaMember& member = member_[m];
  const PublishedBuffer& b = member.buffers[which];
  out->addr = b.addr;
  out->pid = member.pid;
  out->rank = rank;
  out->mapped = nullptr;
  // A pid from another pid namespace names some other process here.
  if (b.segment.serial != 0 && member.pidNamespace == pidNamespace_ && pidNamespace_ != 0)
    out->mapped = peerSegments_.map(member.pid, b.segment);
  return Status::ok();
}

std::string ShmArena::absentRanks() const {
  const uint64_t mine = member_[localIndex_].arrivals.load(std::memory_order_relaxed);
  std::string ranks;
  for (int i = 0; i < members_; ++i) {
    if (member_[i].arrivals.load(std::memory_order_relaxed) >= mine) continue;
    ranks += strprintf("%s%d", ranks.empty() ? "" : ", ", memberRanks_[size_t(i)]);
  }
  return ranks;
}

bool ShmArena::mismatchedStamp(const CallStamp& mine, int* rank, CallStamp* theirs) const {
  for (int i = 0; i < members_; ++i) {
    const CallStamp& s = member_[i].stamps[mine.word & 1];
    if (s == mine) continue;
    *rank = member_[i].rank;
    *theirs = s;
    return true;
  }
  return false;
}

bool ShmArena::memberPast(int rank, CallStamp* theirs) const {
  if (rank < 0 || size_t(rank) >= memberOf_.size() || memberOf_[size_t(rank)] < 0) return false;
  const CallStamp(&stamps)[2] = member_[memberOf_[size_t(rank)]].stamps;
  const CallStamp latest =
      int32_t(stamps[0].sequence() - stamps[1].sequence()) > 0 ? stamps[0] : stamps[1];
  // The stamp before the messages: what the member sent before stamping is then seen.
  std::atomic_thread_fence(std::memory_order_acquire);
  if (int32_t(latest.sequence() - entered_) <= 0) return false;
  *theirs = latest;
  return true;
}

void ShmArena::revoke(int rank) {
  uint32_t none = 0;
  header_->revokedBy.compare_exchange_strong(none, uint32_t(rank) + 1);
}

int ShmArena::revokedBy() const {
  return int(header_->revokedBy.load(std::memory_order_acquire)) - 1;
}

void ShmArena::leave() { member_[localIndex_].left.store(1, std::memory_order_release); }

Status ShmArena::checkAlive() {
  for (int i = 0; i < members_; ++i) {
    const ArenaMember& m = member_[i];
    // A member that has not mapped the arena yet has no pid here; the caller's deadline covers
    // it. Pids from another pid namespace mean nothing in ours. A member that left on purpose
    // finished every call it had, and may exit while the others still run theirs.
    if (i == localIndex_ || m.present.load(std::memory_order_acquire) == 0 ||
        m.left.load(std::memory_order_acquire) != 0 || m.pidNamespace != pidNamespace_ ||
        pidNamespace_ == 0)
      continue;
    if (pidfds_[size_t(i)] < 0) pidfds_[size_t(i)] = pidfdOpen(m.pid);
    if (processExited(pidfds_[size_t(i)], m.pid))
      return errorf(loomRemoteError, "shm: rank %d (pid %d) of this host has exited", m.rank,
                    m.pid);
  }
  return Status::ok();
}

}  // namespace loom::transports
