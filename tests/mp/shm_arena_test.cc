// The direct allreduce's arena (transports/shm/shm_arena.h) between forked ranks: one segment
// shared by the ranks of a host whose name is gone once all mapped it, a barrier that orders
// every rank's writes before every rank's reads, a dead member noticed, and clear errors for
// an arena that never comes or that the ranks disagree about.
#include "transports/shm/shm_arena.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/fork_ranks.h"
#include "tests/support/shm_files.h"
#include "transports/shm/shm_transport.h"
#include "transports/shm/shm_util.h"

namespace loom::transports {
namespace {

using testing::ForkOptions;
using testing::RankContext;
using testing::runRanks;

constexpr uint64_t kDataBytes = 1 << 20;

uint64_t newCommHash() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(getpid());
}

// Names in /dev/shm of communicator commHash.
std::vector<std::string> leftovers(uint64_t commHash) {
  return testing::shmFiles(shmNamePrefix(commHash));
}

// The context a communicator would have: every rank's pid, all on one host.
CommContext context(RankContext& rc, uint64_t commHash) {
  CommContext ctx;
  ctx.rank = rc.rank();
  ctx.nranks = rc.nranks();
  ctx.commHash = commHash;
  PeerInfo me;
  me.rank = rc.rank();
  describeThisProcess(&me);
  me.hostId = 0x5678;
  for (const std::string& s : rc.allgather(std::string(reinterpret_cast<char*>(&me), sizeof(me)))) {
    PeerInfo p;
    memcpy(&p, s.data(), sizeof(p));
    ctx.peers.push_back(p);
  }
  return ctx;
}

bool waitBarrier(ShmArena& arena, uint64_t ticket, FlagWindow flags = {}) {
  const Deadline deadline(20000);
  while (!arena.passed(ticket, flags)) {
    if (deadline.expired()) return false;
    arena.sleep(ticket, 10, flags);
  }
  return true;
}

// Runs body(rc, ctx, arena) on n forked ranks once every one of them has mapped the arena of
// communicator `hash`.
std::vector<testing::RankResult> runWithArena(
    int n, uint64_t hash, const ForkOptions& options,
    const std::function<int(RankContext&, const CommContext&, ShmArena&)>& body) {
  return runRanks(
      n,
      [&](RankContext& rc) {
        const CommContext ctx = context(rc, hash);
        std::unique_ptr<ShmArena> arena;
        const Status st = ShmArena::open(ctx, kDataBytes, Deadline(20000), &arena);
        RANK_CHECK(st.isOk(), "%s", st.message().c_str());
        rc.allgather("");
        return body(rc, ctx, *arena);
      },
      options);
}

// Each round every rank writes its word of the round's half, passes the barrier and reads all
// words: a barrier that let anyone through early shows up as a stale word. First with the
// flags in the arena's records, then in the data (a Barrier step's src, collectives/plan.h):
// each rank's word just past its flag, in the flag's line. What earlier calls left there (here:
// every small number a ticket could be) never passes for a flag, and a rank that comes late,
// after the others went to sleep, wakes them.
TEST(ShmArena, BarrierOrdersWritesBeforeReadsAndTheNameIsGone) {
  const uint64_t hash = newCommHash();
  const int n = 4, rounds = 300;
  const auto results = runRanks(
      n,
      [&](RankContext& rc) {
        const CommContext ctx = context(rc, hash);
        std::unique_ptr<ShmArena> arena;
        const Status st = ShmArena::open(ctx, kDataBytes, Deadline(20000), &arena);
        RANK_CHECK(st.isOk(), "%s", st.message().c_str());
        RANK_CHECK(arena->members() == n, "%d members", arena->members());
        rc.allgather("");  // everyone has mapped it: the name must be gone
        RANK_CHECK(leftovers(hash).empty(), "%s is still in /dev/shm", leftovers(hash)[0].c_str());
        constexpr size_t kLine = 64;
        for (const bool inData : {false, true}) {
          if (inData) {
            // Once every rank is done with the rounds before, each half is filled with the
            // very ticket its first round's barrier will have (the one after next, then the
            // next): unsalted, that would pass at once.
            const uint64_t ticket = arena->arrive();
            RANK_CHECK(waitBarrier(*arena, ticket), "barrier timed out");
            for (uint64_t half = 0; half < 2; ++half) {
              auto* words = static_cast<uint64_t*>(arena->nextCallBase());
              if (rc.rank() == 0)
                for (size_t i = 0; i < ShmArena::callBytes(kDataBytes) / 8; ++i)
                  words[i] = ticket + 2 + half;
            }
            RANK_CHECK(waitBarrier(*arena, arena->arrive()), "barrier timed out");
          }
          for (int round = 0; round < rounds; ++round) {
            char* base = static_cast<char*>(arena->nextCallBase());
            const FlagWindow flags = inData ? FlagWindow{base, kLine} : FlagWindow{};
            auto word = [&](int r) {
              return reinterpret_cast<std::atomic<uint64_t>*>(inData ? base + size_t(r) * kLine + 8
                                                                     : base + size_t(r) * 8);
            };
            if (inData && round % 100 == 0 && rc.rank() == n - 1)
              std::this_thread::sleep_for(std::chrono::milliseconds(30));
            word(rc.rank())->store(uint64_t(round) * 16 + uint64_t(rc.rank()),
                                   std::memory_order_relaxed);
            RANK_CHECK(waitBarrier(*arena, arena->arrive(flags), flags),
                       "round %d: barrier timed out", round);
            for (int r = 0; r < n; ++r) {
              const uint64_t w = word(r)->load(std::memory_order_relaxed);
              RANK_CHECK(w == uint64_t(round) * 16 + uint64_t(r),
                         "%s, round %d: rank %d wrote %llu", inData ? "flags in data" : "records",
                         round, r, (unsigned long long)w);
            }
          }
        }
        return 0;
      },
      ForkOptions::timeout(60));
  EXPECT_EQ(testing::describeFailures(results), "");
  EXPECT_TRUE(leftovers(hash).empty());
}

// Peer reads (ShmArena::publish / peer): a buffer from loomMemAlloc is seen through a mapping
// of the very pages (a later write by its owner shows without another read), any other buffer
// by its address, which process_vm_readv reads; a freed segment is refused by loomMemFree twice.
TEST(ShmArena, PeersSeeUserMemoryMappedAndOtherBuffersByAddress) {
  const uint64_t hash = newCommHash();
  constexpr size_t kBytes = 3 * 4096 + 100;
  const auto results = runRanks(
      2,
      [&](RankContext& rc) {
        const CommContext ctx = context(rc, hash);
        std::unique_ptr<ShmArena> arena;
        Status st = ShmArena::open(ctx, kDataBytes, Deadline(20000), &arena);
        RANK_CHECK(st.isOk(), "%s", st.message().c_str());
        void* user = nullptr;
        st = allocUserMemory(kBytes, &user);
        RANK_CHECK(st.isOk(), "%s", st.message().c_str());
        std::vector<unsigned char> plain(kBytes);
        for (size_t i = 0; i < kBytes; ++i) {
          static_cast<unsigned char*>(user)[i] = (unsigned char)(i * 3 + rc.rank());
          plain[i] = (unsigned char)(i * 5 + rc.rank());
        }
        // The segment holds the whole buffer, and no more: a range past its end is not in it.
        RANK_CHECK(findUserMemory(user, kBytes).serial != 0, "the buffer is not found");
        RANK_CHECK(findUserMemory(static_cast<char*>(user) + 8, 4 * 4096).serial == 0,
                   "a range past the segment is found in it");
        arena->publish(static_cast<char*>(user) + 100, kBytes - 100, plain.data(), kBytes);
        RANK_CHECK(waitBarrier(*arena, arena->arrive()), "barrier timed out");
        const int other = 1 - rc.rank();
        ShmArena::PeerView in, out;
        st = arena->peer(other, 0, &in);
        RANK_CHECK(st.isOk(), "%s", st.message().c_str());
        st = arena->peer(other, 1, &out);
        RANK_CHECK(st.isOk(), "%s", st.message().c_str());
        RANK_CHECK(in.mapped != nullptr, "the loomMemAlloc buffer is not mapped");
        RANK_CHECK(out.mapped == nullptr, "a plain buffer is mapped");
        for (size_t i = 0; i + 100 < kBytes; ++i)
          RANK_CHECK((unsigned char)in.mapped[i] == (unsigned char)((i + 100) * 3 + other),
                     "mapped byte %zu is wrong", i);
        std::vector<unsigned char> read(kBytes);
        st = readProcessMemory(out.pid, out.rank, out.addr, read.data(), kBytes);
        RANK_CHECK(st.isOk(), "%s", st.message().c_str());
        for (size_t i = 0; i < kBytes; ++i)
          RANK_CHECK(read[i] == (unsigned char)(i * 5 + other), "byte %zu read is wrong", i);
        RANK_CHECK(arena->peer(rc.rank(), 0, &in).code() == loomInternalError,
                   "a rank's own buffer is no peer's");
        // The owner writes; after a barrier the reader sees it through the same mapping.
        RANK_CHECK(waitBarrier(*arena, arena->arrive()), "barrier timed out");
        static_cast<unsigned char*>(user)[100] = 0xa5;
        RANK_CHECK(waitBarrier(*arena, arena->arrive()), "barrier timed out");
        st = arena->peer(other, 0, &in);
        RANK_CHECK(st.isOk() && (unsigned char)in.mapped[0] == 0xa5,
                   "the owner's write does not show through the mapping");
        RANK_CHECK(waitBarrier(*arena, arena->arrive()), "barrier timed out");
        RANK_CHECK(freeUserMemory(user).isOk(), "loomMemFree failed");
        RANK_CHECK(freeUserMemory(user).code() == loomInvalidArgument, "freed twice");
        return 0;
      },
      ForkOptions::timeout(60));
  EXPECT_EQ(testing::describeFailures(results), "");
}

TEST(ShmArena, ADeadMemberIsNoticed) {
  const uint64_t hash = newCommHash();
  ForkOptions options = ForkOptions::timeout(60);
  options.expectedToDie = {1};
  // Survivors that have seen rank 1's death, in memory the forked ranks share: each stays until
  // the other has checked too, or the one that exits first would be the dead member the other
  // finds first.
  void* shared = mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  auto* checked = new (shared) std::atomic<int>(0);
  const auto results = runWithArena(
      3, hash, options, [&](RankContext& rc, const CommContext&, ShmArena& arena) {
        if (rc.rank() == 1) raise(SIGKILL);
        const uint32_t ticket = arena.arrive();
        const auto start = std::chrono::steady_clock::now();
        Status alive = Status::ok();
        while (alive.isOk() &&
               std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
          arena.sleep(ticket, 10);
          alive = arena.checkAlive();
        }
        RANK_CHECK(!arena.passed(ticket), "the barrier passed without rank 1");
        const bool named = alive.code() == loomRemoteError &&
                           alive.message().find("rank 1 (pid") != std::string::npos;
        checked->fetch_add(1);
        while (checked->load() < 2 && std::chrono::steady_clock::now() - start <
                                          std::chrono::seconds(20)) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        RANK_CHECK(named, "got: %s", alive.message().c_str());
        return 0;
      });
  munmap(shared, sizeof(std::atomic<int>));
  EXPECT_EQ(testing::describeFailures(results, options), "");
  EXPECT_TRUE(leftovers(hash).empty());
}

// A member that left on purpose (its communicator destroyed after its last call) may exit
// while the others still run calls of their own: its exit is no death.
TEST(ShmArena, AMemberThatLeftMayExit) {
  const uint64_t hash = newCommHash();
  const auto results = runWithArena(
      2, hash, ForkOptions::timeout(60),
      [&](RankContext& rc, const CommContext& ctx, ShmArena& arena) {
        if (rc.rank() == 1) {
          arena.leave();
          return 0;
        }
        const pid_t left = ctx.peers[1].pid;
        const int pidfd = pidfdOpen(left);
        const auto start = std::chrono::steady_clock::now();
        bool exited = false;
        while (!(exited = processExited(pidfd, left)) &&
               std::chrono::steady_clock::now() - start < std::chrono::seconds(20))
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        if (pidfd >= 0) close(pidfd);
        RANK_CHECK(exited, "rank 1 (pid %d) has not exited", int(left));
        const Status alive = arena.checkAlive();
        RANK_CHECK(alive.isOk(), "%s", alive.message().c_str());
        return 0;
      });
  EXPECT_EQ(testing::describeFailures(results), "");
  EXPECT_TRUE(leftovers(hash).empty());
}

TEST(ShmArena, ClearErrors) {
  const uint64_t hash = newCommHash();
  const auto results = runRanks(
      2,
      [&](RankContext& rc) {
        const CommContext ctx = context(rc, hash);
        std::unique_ptr<ShmArena> arena;
        if (rc.rank() == 1) {
          // The creator (rank 0) has not come yet.
          const Status st = ShmArena::open(ctx, kDataBytes, Deadline(300), &arena);
          RANK_CHECK(
              st.code() == loomTimeout &&
                  st.message().find("timed out waiting for rank 0 to create") != std::string::npos,
              "got: %s", st.message().c_str());
        }
        rc.allgather("");
        // Now it comes, with another size than rank 1 expects.
        const Status st = ShmArena::open(ctx, rc.rank() == 0 ? kDataBytes : 2 * kDataBytes,
                                         Deadline(5000), &arena);
        if (rc.rank() == 0) {
          RANK_CHECK(st.isOk(), "%s", st.message().c_str());
        } else {
          RANK_CHECK(st.code() == loomInvalidUsage &&
                         st.message().find("LOOM_SHM_DIRECT_BYTES must be the same on every "
                                           "rank") != std::string::npos,
                     "got: %s", st.message().c_str());
        }
        rc.allgather("");
        return 0;
      },
      ForkOptions::timeout(30));
  EXPECT_EQ(testing::describeFailures(results), "");
  EXPECT_TRUE(leftovers(hash).empty());  // the creator removed the name rank 1 never mapped
}

}  // namespace
}  // namespace loom::transports
