// The arena of the direct allreduce (collectives/direct.cc): one POSIX shared-memory segment per
// communicator and host that every rank of the host maps. A header holds the host's barrier and
// who its members are; the data after it is what plans' Shared regions address.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "transports/shm/user_memory.h"
#include "transports/transport.h"

namespace loom::transports {

class Mapping;
struct ArenaHeader;
struct ArenaMember;

// Where the members of an arena's barrier raise their flags (ShmArena::arrive).
struct FlagWindow {
  char* base = nullptr;  // null: in the arena's records of its members
  size_t stride = 0;
};

class ShmArena {
 public:
  // Maps the arena of ctx's communicator on this host, with dataBytes of data. Every rank of
  // the host must call it (the communicator does at its first direct call): the lowest rank of
  // the host creates the segment, the others open it by its name (from the communicator's id
  // and the host) within the deadline. The name is removed as soon as all have mapped it, so
  // nothing stays in /dev/shm whoever dies later.
  static Status open(const CommContext& ctx, uint64_t dataBytes, const Deadline& deadline,
                     std::unique_ptr<ShmArena>* out);
  ~ShmArena();

  // What one call may use (CollArgs::sharedBytes): half the data, in whole cache lines.
  static uint64_t callBytes(uint64_t dataBytes);
  // Where this call's Shared buffer starts. Calls alternate between the two halves: a fast
  // rank's next call then cannot overwrite what a slow rank still reads in the previous one,
  // without a barrier at the end of every call. Two calls apart is safe, as every call that
  // uses the arena passes a barrier, which no rank leaves before all finished the call before.
  // Every rank of the host makes the same calls, so all agree on the half.
  void* nextCallBase();

  // The barrier of the host's ranks: arrive() announces this rank and returns a ticket;
  // passed(ticket) turns true once all members have arrived. Everything a rank wrote before
  // arriving is visible to every rank that saw the barrier pass. Each member's arrival is a
  // flag: in the arena's record of the member, or, given a FlagWindow (a Barrier step's flags,
  // collectives/plan.h), the 8 aligned bytes at base + member × stride of the call's data;
  // every member of one barrier must name the same window.
  uint64_t arrive(FlagWindow flags = {});
  bool passed(uint64_t ticket, FlagWindow flags = {});
  // Sleeps until the barrier of ticket passes, a member arrives, or timeoutMs (a futex).
  void sleep(uint64_t ticket, int timeoutMs, FlagWindow flags = {});
  int members() const { return members_; }

  // Peer reads (plan.h, peerBuffer). publish() announces where this rank's Input and Output
  // of the current call lie (before its first Barrier of the call: the barrier carries it to
  // the others); peer() tells, after that barrier, where rank `rank`'s buffer `which` (0 Input,
  // 1 Output) is: mapped here, or only readable with readProcessMemory (user_memory.h). A
  // mapping peer() gave stays valid until this rank's next publish().
  struct PeerView {
    const char* mapped = nullptr;  // the buffer in this process; null: readProcessMemory
    uint64_t addr = 0;             // the buffer in its owner's process
    pid_t pid = 0;
    int rank = -1;
  };
  void publish(const void* input, uint64_t inputBytes, const void* output, uint64_t outputBytes);
  Status peer(int rank, uint32_t which, PeerView* out);
  // A yes/no question every rank of the host must answer alike (the communicator asks whether
  // all ranks' buffers are from loomMemAlloc, Comm::agreeBuffersMapped): each votes before it
  // arrives at a barrier, and once that barrier has passed, unanimous() tells whether every
  // member voted yes and all share this process's pid namespace (else they cannot map each
  // other's memory). Votes alternate between two slots by round: no member can vote in round
  // r + 2 before all have passed the barrier of round r + 1, which each reaches only after it
  // has read round r.
  void vote(uint64_t round, bool yes);
  bool unanimous(uint64_t round) const;
  // The ranks of the host that have not reached this rank's latest barrier ("1, 3"), for
  // error messages.
  std::string absentRanks() const;
  // loomRemoteError naming the member rank whose process has exited, if one has; a member that
  // left first (leave) is not dead, whenever it exits.
  Status checkAlive();
  // Stamps this member's current call, before its first barrier (which carries it to the
  // others), and returns the rank that revoked the communicator (revoke), or -1. Once the
  // call's barriers have passed, stampsMatch tells whether every member stamped it alike;
  // mismatchedStamp finds one that did not. Stamps alternate between two slots by the call's
  // parity, like votes: no member gets two calls through the arena ahead of another. Inline:
  // every call through the arena runs both.
  int enter(const CallStamp& mine) {
    *stampSlots_[mine.word & 1][size_t(localIndex_)] = mine;
    entered_ = mine.sequence();
    return int(revokedBy_->load(std::memory_order_acquire)) - 1;
  }
  bool stampsMatch(const CallStamp& mine) const {
    for (const CallStamp* s : stampSlots_[mine.word & 1])
      if (s->word != mine.word || s->count != mine.count) return false;
    return true;
  }
  bool mismatchedStamp(const CallStamp& mine, int* rank, CallStamp* theirs) const;
  // Whether rank `rank`, a member, has entered a call through the arena that this member has
  // not (*theirs: its stamp). Such a rank has finished every call this member is in, so what it
  // sent to this member in them has been sent (read the messages after asking).
  bool memberPast(int rank, CallStamp* theirs) const;
  // Marks the communicator revoked by `rank` for every member of the host: a rank that had not
  // yet entered the call a revoke ended must not complete it alone by reading the revoker's
  // published buffers (the bootstrap's message about it may still be unread). revokedBy: that
  // rank, or -1.
  void revoke(int rank);
  int revokedBy() const;
  // Tells the other members that this rank is done with the communicator on purpose (it
  // destroys it after its last call), so that its exit is not taken for a death.
  void leave();

 private:
  ShmArena() = default;
  Status attach(const CommContext& ctx, uint64_t dataBytes, const Deadline& deadline);
  static std::atomic<uint64_t>* flagOf(FlagWindow flags, int member) {
    return reinterpret_cast<std::atomic<uint64_t>*>(flags.base + size_t(member) * flags.stride);
  }

  std::string name_;
  bool creator_ = false;
  std::unique_ptr<Mapping> mapping_;
  ArenaHeader* header_ = nullptr;
  ArenaMember* member_ = nullptr;  // [members_]
  std::vector<CallStamp*> stampSlots_[2];  // each member's stamp slot, by parity
  std::atomic<uint32_t>* revokedBy_ = nullptr;  // in the header
  char* data_ = nullptr;
  uint64_t callBytes_ = 0;
  uint64_t calls_ = 0;
  uint32_t entered_ = 0;  // the number of this member's latest call through the arena (enter)
  int members_ = 0;
  int localIndex_ = 0;
  struct {
    uint64_t ticket = 0;
    int member = 0;  // members before it are known to have arrived at the ticket's barrier
  } waitingFor_;
  std::vector<int> memberRanks_;  // communicator rank of each member, in member order
  uint64_t pidNamespace_ = 0;
  std::vector<int> pidfds_;  // per member, opened once its record is there; -1 if none yet
  std::vector<int> memberOf_;  // communicator rank -> member index, -1 off this host
  PeerSegments peerSegments_;
};

}  // namespace loom::transports
