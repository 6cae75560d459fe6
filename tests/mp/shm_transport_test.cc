// The shared-memory transport between forked ranks: data bit for bit through the ring and
// by single copy, reductions, FIFO order, pipelining under a moving limit, lanes, lazy
// connection, sleeping, a dying peer, and nothing left in /dev/shm afterwards.
#include "transports/shm/shm_transport.h"
#include "transports/shm/shm_util.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/dtype.h"
#include "tests/support/fork_ranks.h"
#include "tests/support/shm_files.h"

namespace loom::transports {
namespace {

using testing::ForkOptions;
using testing::RankContext;
using testing::runRanks;
using Kind = TransferOp::Kind;

constexpr size_t kSlot = 256 << 10;  // ShmOptions' default slot
constexpr int kTimeoutMs = 20000;

uint64_t newCommHash() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(getpid());
}

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::vector<char> pattern(size_t bytes, uint64_t seed) {
  std::vector<char> v(bytes);
  for (size_t i = 0; i < bytes; i += 8) {
    uint64_t w = mix(seed * 0x100000001b3ull + i);
    memcpy(v.data() + i, &w, std::min<size_t>(8, bytes - i));
  }
  return v;
}

// Offset of the first differing byte, or -1.
long firstDifference(const void* a, const void* b, size_t n) {
  if (n == 0 || memcmp(a, b, n) == 0) return -1;
  for (size_t i = 0; i < n; ++i)
    if (static_cast<const char*>(a)[i] != static_cast<const char*>(b)[i]) return long(i);
  return -1;
}

// Names in /dev/shm of communicator commHash.
std::vector<std::string> leftovers(uint64_t commHash) {
  return testing::shmFiles(shmNamePrefix(commHash));
}

// One rank's transport, built the way a communicator builds it: create, then exchange
// PeerInfo (pid, host) with the other ranks.
struct TestRank {
  CommContext ctx;
  std::unique_ptr<Transport> transport;
  std::vector<std::unique_ptr<Connection>> lanes;  // to the one peer, by lane
};

Status setUp(RankContext& rc, uint64_t commHash, const ShmOptions& options, TestRank* r) {
  r->ctx.rank = rc.rank();
  r->ctx.nranks = rc.nranks();
  r->ctx.commHash = commHash;
  r->ctx.timeoutMs = kTimeoutMs;
  LOOM_TRY(createShmTransport(&r->ctx, options, &r->transport));
  PeerInfo me;
  me.rank = rc.rank();
  describeThisProcess(&me);
  me.hostId = 0x1234;
  for (const std::string& s : rc.allgather(std::string(reinterpret_cast<char*>(&me), sizeof(me)))) {
    PeerInfo p;
    memcpy(&p, s.data(), sizeof(p));
    r->ctx.peers.push_back(p);
  }
  return Status::ok();
}

Status connectLanes(TestRank* r, int peer, int lanes) {
  for (int lane = 0; lane < lanes; ++lane) {
    std::unique_ptr<Connection> c;
    LOOM_TRY(r->transport->connect(peer, lane, Deadline(kTimeoutMs), &c));
    r->lanes.push_back(std::move(c));
  }
  return Status::ok();
}

// Connects and makes sure both sides have seen each other (so the CMA probe is done and
// the path a send takes is deterministic).
Status connectAndSettle(RankContext& rc, TestRank* r, int lanes) {
  LOOM_TRY(connectLanes(r, 1 - rc.rank(), lanes));
  rc.allgather("");
  for (auto& c : r->lanes) {
    bool p = false;
    LOOM_TRY(c->progress(&p));
  }
  rc.allgather("");
  return Status::ok();
}

// The executor's contract in miniature: progress every connection; after spinRounds idle
// rounds, check the peers, arm the sleep, poll once more and sleep if still idle; at the end
// flush the notifications. tick() plays the executor's part (e.g.
// moving limits) and says whether it changed anything.
struct Driver {
  Transport* transport;
  std::vector<Connection*> conns;
  int spinRounds = 2000;
  int sleepCapMs = 100;

  Status run(const std::function<bool()>& done, const std::function<bool()>& tick = nullptr,
             int timeoutMs = kTimeoutMs) const {
    Deadline deadline(timeoutMs);
    int idle = 0;
    while (!done()) {
      bool progressed = tick && tick();
      LOOM_TRY(poll(&progressed));
      if (progressed) {
        idle = 0;
        continue;
      }
      if (deadline.expired()) return Status(loomTimeout, "driver: timed out");
      if (++idle < spinRounds) continue;
      for (Connection* c : conns) LOOM_TRY(c->checkAlive());
      uint64_t token = transport->armSleep();
      progressed = false;
      Status st = poll(&progressed);
      if (st.isOk() && !progressed) transport->sleepUs(token, int64_t(deadline.remainingMs(sleepCapMs)) * 1000);
      transport->disarmSleep();
      LOOM_TRY(st);
    }
    flush();
    return Status::ok();
  }

  void flush() const {
    for (Connection* c : conns) c->flushNotifications();
  }

  Status poll(bool* progressed) const {
    for (Connection* c : conns) {
      bool p = false;
      LOOM_TRY(c->progress(&p));
      *progressed = *progressed || p;
    }
    return Status::ok();
  }

  Status runOps(const std::vector<TransferOp*>& ops) const {
    return run([&] {
      for (TransferOp* op : ops)
        if (!op->complete()) return false;
      return true;
    });
  }
};

Driver driverFor(TestRank& r) {
  Driver d{r.transport.get(), {}};
  for (auto& c : r.lanes) d.conns.push_back(c.get());
  return d;
}

TransferOp sendOp(void* src, size_t bytes, loomDataType_t dtype = loomUint8) {
  TransferOp op = wholeTransfer(Kind::Send, src, bytes);
  op.dtype = dtype;
  return op;
}

TransferOp recvOp(void* dst, size_t bytes, loomDataType_t dtype = loomUint8) {
  TransferOp op = wholeTransfer(Kind::Recv, dst, bytes);
  op.dtype = dtype;
  return op;
}

TransferOp recvReduceOp(const void* local, void* dst, size_t bytes, loomDataType_t dtype) {
  TransferOp op = recvOp(dst, bytes, dtype);
  op.kind = Kind::RecvReduce;
  op.src = local;
  op.op = loomSum;
  return op;
}

#define RANK_OK(expr)                                                        \
  do {                                                                       \
    ::loom::Status rankOkStatus_ = (expr);                                   \
    RANK_CHECK(rankOkStatus_.isOk(), "%s", rankOkStatus_.message().c_str()); \
  } while (0)

// Runs fn on two forked ranks and expects both to pass and /dev/shm to be clean afterwards.
void runPair(const std::function<int(RankContext&, uint64_t)>& fn, int timeoutSec = 60) {
  uint64_t hash = newCommHash();
  ForkOptions options;
  options.timeoutSec = timeoutSec;
  auto results = runRanks(
      2, [&](RankContext& rc) { return fn(rc, hash); }, options);
  EXPECT_EQ(testing::describeFailures(results, options), "");
  std::vector<std::string> left = leftovers(hash);
  for (const std::string& name : left) shm_unlink(("/" + name).c_str());
  EXPECT_TRUE(left.empty()) << "left in /dev/shm: " << left.front();
}

enum class Path { Slots, Cma };

ShmOptions optionsFor(Path path) {
  ShmOptions o;
  o.cmaThreshold = path == Path::Cma ? 1 : 0;  // every message by CMA, or none
  return o;
}

class ShmPathTest : public ::testing::TestWithParam<Path> {};

// Both ranks send a message of each size to each other at once and check it bit for bit.
TEST_P(ShmPathTest, SizesBothDirections) {
  Path path = GetParam();
  runPair([path](RankContext& rc, uint64_t hash) {
    TestRank r;
    RANK_OK(setUp(rc, hash, optionsFor(path), &r));
    RANK_OK(connectAndSettle(rc, &r, 1));
    Driver d = driverFor(r);
    const size_t sizes[] = {0, 1, 7, kSlot - 1, kSlot, kSlot + 1, 3 * kSlot + 5, 1 << 20, 64 << 20};
    size_t total = 0;
    for (size_t size : sizes) {
      std::vector<char> src = pattern(size, size * 2 + rc.rank());
      std::vector<char> dst(size, 0x5a);
      TransferOp s = sendOp(src.data(), size), v = recvOp(dst.data(), size);
      RANK_OK(r.lanes[0]->post(&s));
      RANK_OK(r.lanes[0]->post(&v));
      RANK_OK(d.runOps({&s, &v}));
      std::vector<char> expect = pattern(size, size * 2 + 1 - rc.rank());
      long bad = firstDifference(dst.data(), expect.data(), size);
      RANK_CHECK(bad < 0, "size %zu: first wrong byte at %ld", size, bad);
      total += size;
    }
    ShmConnectionStats stats;
    RANK_CHECK(shmConnectionStats(*r.lanes[0], &stats), "not an shm connection");
    size_t expectCma = path == Path::Cma ? total : 0;
    RANK_CHECK(stats.cmaBytes == expectCma && stats.slotBytes == total - expectCma,
               "path: %llu bytes by slots, %llu by CMA", (unsigned long long)stats.slotBytes,
               (unsigned long long)stats.cmaBytes);
    return 0;
  });
}

// Each rank sends its vector and receive-reduces the peer's: both end with the exact sum
// (the 2-rank allreduce), out of place and in place, float32 and int32.
TEST_P(ShmPathTest, RecvReduceSums) {
  Path path = GetParam();
  runPair([path](RankContext& rc, uint64_t hash) {
    TestRank r;
    RANK_OK(setUp(rc, hash, optionsFor(path), &r));
    RANK_OK(connectAndSettle(rc, &r, 1));
    Driver d = driverFor(r);
    auto values = [](int rank, size_t count, bool isFloat) {
      std::vector<char> v(count * 4);
      for (size_t i = 0; i < count; ++i) {
        int32_t x = int32_t(mix(i * 7 + rank) % 2000001) - 1000000;
        if (isFloat) {
          float f = float(x);
          memcpy(&v[i * 4], &f, 4);
        } else {
          memcpy(&v[i * 4], &x, 4);
        }
      }
      return v;
    };
    for (loomDataType_t dtype : {loomFloat32, loomInt32}) {
      bool isFloat = dtype == loomFloat32;
      for (size_t count : {size_t(1), kSlot / 4 + 3, size_t(3) << 20}) {
        for (bool inPlace : {false, true}) {
          size_t bytes = count * 4;
          std::vector<char> mine = values(rc.rank(), count, isFloat);
          std::vector<char> theirs = values(1 - rc.rank(), count, isFloat);
          std::vector<char> out(bytes, 0x33);
          std::vector<char> sendCopy = mine;  // sending from a buffer we reduce into in place
          char* dst = inPlace ? mine.data() : out.data();
          TransferOp s = sendOp(sendCopy.data(), bytes, dtype);
          TransferOp v = recvReduceOp(mine.data(), dst, bytes, dtype);
          RANK_OK(r.lanes[0]->post(&s));
          RANK_OK(r.lanes[0]->post(&v));
          RANK_OK(d.runOps({&s, &v}));
          for (size_t i = 0; i < count; ++i) {
            int32_t a, b;
            memcpy(&a, &sendCopy[i * 4], 4);
            memcpy(&b, &theirs[i * 4], 4);
            bool ok;
            if (isFloat) {
              float fa, fb, got;
              memcpy(&fa, &a, 4);
              memcpy(&fb, &b, 4);
              memcpy(&got, dst + i * 4, 4);
              ok = got == fa + fb;
            } else {
              int32_t got;
              memcpy(&got, dst + i * 4, 4);
              ok = got == a + b;
            }
            RANK_CHECK(ok, "%s count %zu%s: wrong sum at element %zu", dtypeName(dtype), count,
                       inPlace ? " in place" : "", i);
          }
        }
      }
    }
    return 0;
  });
}

// The executor releases the source and the destination in steps: the transport must never
// read source bytes past the send's limit nor write destination bytes past the receive's.
// The source past the limit holds poison until its step, so any early read shows up. A send
// goes by CMA only when all of it is released when it starts, so on the CMA path the source is
// released whole at once (and only the receive in steps), on the slot path in steps too.
TEST_P(ShmPathTest, PipelinedLimits) {
  Path path = GetParam();
  const bool cma = path == Path::Cma;
  runPair([path, cma](RankContext& rc, uint64_t hash) {
    TestRank r;
    RANK_OK(setUp(rc, hash, optionsFor(path), &r));
    RANK_OK(connectAndSettle(rc, &r, 1));
    Driver d = driverFor(r);
    const size_t bytes = (5 << 20) + 4 * 1001;
    const size_t sendStep = 4 * 12347, recvStep = 4 * 30011;  // float32 elements
    std::vector<char> expectMine = pattern(bytes, 77 + rc.rank());
    std::vector<char> expectTheirs = pattern(bytes, 77 + 1 - rc.rank());
    std::vector<char> src(bytes, char(0xee)), dst(bytes, char(0x11));
    TransferOp s = sendOp(src.data(), bytes, loomFloat32);
    TransferOp v = recvOp(dst.data(), bytes, loomFloat32);
    if (cma) src = expectMine;
    s.limit = cma ? bytes : 0;
    v.limit = 0;
    RANK_OK(r.lanes[0]->post(&s));
    RANK_OK(r.lanes[0]->post(&v));
    bool violated = false;
    size_t round = 0;
    auto tick = [&]() {
      // Written beyond the receive's limit?
      size_t check = std::min(bytes - v.limit, size_t(64));
      for (size_t i = 0; i < check; ++i) violated = violated || dst[v.limit + i] != char(0x11);
      violated = violated || s.done > s.limit || v.done > v.limit;
      if (++round % 3 != 0) return false;  // let the transport catch up between steps
      bool moved = false;
      if (s.limit < bytes) {
        size_t next = std::min(bytes, s.limit + sendStep);
        memcpy(&src[s.limit], &expectMine[s.limit], next - s.limit);
        s.limit = next;
        moved = true;
      }
      if (v.limit < bytes) {
        v.limit = std::min(bytes, v.limit + recvStep);
        moved = true;
      }
      return moved;
    };
    RANK_OK(d.run([&] { return s.complete() && v.complete(); }, tick));
    RANK_CHECK(!violated, "the transport went past a limit");
    long bad = firstDifference(dst.data(), expectTheirs.data(), bytes);
    RANK_CHECK(bad < 0, "first wrong byte at %ld", bad);
    ShmConnectionStats stats;
    RANK_CHECK(shmConnectionStats(*r.lanes[0], &stats), "not an shm connection");
    RANK_CHECK(stats.cmaBytes == (cma ? bytes : 0), "%zu bytes by CMA", size_t(stats.cmaBytes));
    return 0;
  });
}

// A send of at least the threshold goes by a single copy once all of it is released, however
// it is released (whole, or in steps as a ring forwards what it receives): nothing of it goes
// out before. A smaller one goes through the slots as it is released.
TEST(ShmTransport, SingleCopySendsWaitUntilReleasedWhole) {
  runPair([](RankContext& rc, uint64_t hash) {
    ShmOptions options;
    options.cmaThreshold = 64 << 10;
    TestRank r;
    RANK_OK(setUp(rc, hash, options, &r));
    RANK_OK(connectAndSettle(rc, &r, 1));
    Driver d = driverFor(r);
    for (size_t bytes : {size_t(1) << 20, size_t(32) << 10}) {
      const bool single = bytes >= options.cmaThreshold;
      for (bool whole : {true, false}) {
        std::vector<char> src = pattern(bytes, 5 + rc.rank()), dst(bytes, 0);
        TransferOp s = sendOp(src.data(), bytes), v = recvOp(dst.data(), bytes);
        if (!whole) s.limit = 4096;
        ShmConnectionStats before;
        RANK_CHECK(shmConnectionStats(*r.lanes[0], &before), "not an shm connection");
        RANK_OK(r.lanes[0]->post(&s));
        RANK_OK(r.lanes[0]->post(&v));
        bool early = false;  // bytes were handed over before all of them were released
        RANK_OK(d.run([&] { return s.complete() && v.complete(); }, [&] {
          if (s.limit == bytes) return false;
          early = early || s.done > 0;
          s.limit = std::min(bytes, s.limit + 4096);
          return true;
        }));
        const char* how = whole ? "whole" : "in steps";
        RANK_CHECK(dst == pattern(bytes, 5 + 1 - rc.rank()), "%zu bytes released %s: wrong data",
                   bytes, how);
        ShmConnectionStats after;
        RANK_CHECK(shmConnectionStats(*r.lanes[0], &after), "not an shm connection");
        const uint64_t byCma = after.cmaBytes - before.cmaBytes;
        RANK_CHECK(byCma == (single ? bytes : 0), "%zu bytes released %s: %llu by CMA", bytes,
                   how, (unsigned long long)byCma);
        RANK_CHECK(!single || !early, "%zu bytes by CMA: handed over before all were released",
                   bytes);
        RANK_CHECK(single || whole || early, "%zu bytes by the slots: waited for all of them",
                   bytes);
      }
    }
    return 0;
  });
}

INSTANTIATE_TEST_SUITE_P(Paths, ShmPathTest, ::testing::Values(Path::Slots, Path::Cma),
                         [](const auto& info) {
                           return std::string(info.param == Path::Slots ? "Slots" : "Cma");
                         });

// Messages of up to kHeaderPayloadBytes travel in their slot's header when they are released
// whole; one released in parts, or one byte larger, goes through the slot's data. Receives
// released in two parts take a header-carried message in two parts too. Checked bit for bit,
// plain receives and float32 receive-reduces, with the path each took.
TEST(ShmTransport, SmallMessagesInTheSlotHeader) {
  runPair([](RankContext& rc, uint64_t hash) {
    TestRank r;
    RANK_OK(setUp(rc, hash, ShmOptions(), &r));
    RANK_OK(connectAndSettle(rc, &r, 1));
    Driver d = driverFor(r);
    uint64_t expectHeader = 0, total = 0;
    for (size_t size : {size_t(1), size_t(8), size_t(24), kHeaderPayloadBytes,
                        kHeaderPayloadBytes + 4}) {
      for (int mode = 0; mode < 4; ++mode) {  // bit 0: send released in two parts; bit 1: recv
        const bool splitSend = mode & 1, splitRecv = mode & 2;
        const bool reduce = size % 4 == 0 && mode == 0;
        std::vector<char> src = pattern(size, size * 8 + mode * 2 + rc.rank());
        std::vector<char> theirs = pattern(size, size * 8 + mode * 2 + 1 - rc.rank());
        std::vector<char> local(size, 0), dst(size, 0x5a);
        TransferOp s = sendOp(src.data(), size, reduce ? loomFloat32 : loomUint8);
        TransferOp v = reduce ? recvReduceOp(local.data(), dst.data(), size, loomFloat32)
                              : recvOp(dst.data(), size);
        const size_t half = size / 8 * 4;  // a whole float32 element boundary
        if (splitSend) s.limit = half;
        if (splitRecv) v.limit = half;
        RANK_OK(r.lanes[0]->post(&s));
        RANK_OK(r.lanes[0]->post(&v));
        int rounds = 0;
        auto release = [&]() {
          if (++rounds < 50 || (s.limit == size && v.limit == size)) return false;
          s.limit = v.limit = size;
          return true;
        };
        RANK_OK(d.run([&] { return s.complete() && v.complete(); }, release));
        std::vector<char> expect = theirs;
        if (reduce)  // local is 0.0f: computed here the same way, bit for bit (NaNs included)
          for (size_t i = 0; i < size; i += 4) {
            float a, b;
            memcpy(&a, &local[i], 4);
            memcpy(&b, &theirs[i], 4);
            b = a + b;
            memcpy(&expect[i], &b, 4);
          }
        long bad = firstDifference(dst.data(), expect.data(), size);
        RANK_CHECK(bad < 0, "size %zu mode %d: first wrong byte at %ld", size, mode, bad);
        if (size <= kHeaderPayloadBytes && !(splitSend && half > 0)) expectHeader += size;
        total += size;
      }
    }
    ShmConnectionStats stats;
    RANK_CHECK(shmConnectionStats(*r.lanes[0], &stats), "not an shm connection");
    RANK_CHECK(stats.headerBytes == expectHeader && stats.slotBytes == total && stats.cmaBytes == 0,
               "%llu bytes in headers (expected %llu), %llu by slots of %llu",
               (unsigned long long)stats.headerBytes, (unsigned long long)expectHeader,
               (unsigned long long)stats.slotBytes, (unsigned long long)total);
    return 0;
  });
}

// Many messages of mixed sizes (some by slots, some by CMA) posted at once in both
// directions arrive in order, and sends complete in the order posted.
TEST(ShmTransport, ManyOpsFifoBothDirections) {
  runPair([](RankContext& rc, uint64_t hash) {
    ShmOptions options;
    options.cmaThreshold = 100 << 10;
    options.slotBytes = 64 << 10;
    options.slots = 4;
    TestRank r;
    RANK_OK(setUp(rc, hash, options, &r));
    RANK_OK(connectAndSettle(rc, &r, 1));
    Driver d = driverFor(r);
    const int kOps = 300;
    auto sizeOf = [](int i) {
      return size_t(mix(i) % 5 == 0 ? mix(i + 1000) % (600 << 10) : mix(i + 2000) % 300);
    };
    std::vector<std::vector<char>> src(kOps), dst(kOps);
    std::vector<TransferOp> sends(kOps), recvs(kOps);
    for (int i = 0; i < kOps; ++i) {
      src[i] = pattern(sizeOf(i), i * 2 + rc.rank());
      dst[i].assign(sizeOf(i), 0);
      sends[i] = sendOp(src[i].data(), src[i].size());
      recvs[i] = recvOp(dst[i].data(), dst[i].size());
    }
    for (int i = 0; i < kOps; ++i) {
      RANK_OK(r.lanes[0]->post(&sends[i]));
      RANK_OK(r.lanes[0]->post(&recvs[i]));
    }
    bool outOfOrder = false;
    auto tick = [&]() {
      for (int i = 1; i < kOps; ++i)
        outOfOrder =
            outOfOrder || (sends[i].complete() && sends[i].bytes > 0 && !sends[i - 1].complete());
      return false;
    };
    std::vector<TransferOp*> all;
    for (int i = 0; i < kOps; ++i) all.push_back(&sends[i]), all.push_back(&recvs[i]);
    RANK_OK(d.run(
        [&] {
          for (TransferOp* op : all)
            if (!op->complete()) return false;
          return true;
        },
        tick));
    RANK_CHECK(!outOfOrder, "a send completed before an earlier one");
    for (int i = 0; i < kOps; ++i) {
      std::vector<char> expect = pattern(sizeOf(i), i * 2 + 1 - rc.rank());
      RANK_CHECK(dst[i] == expect, "message %d (%zu bytes) is wrong", i, expect.size());
    }
    ShmConnectionStats stats;
    RANK_CHECK(shmConnectionStats(*r.lanes[0], &stats) && stats.cmaBytes > 0 && stats.slotBytes > 0,
               "expected both paths to be used");
    return 0;
  });
}

// Several lanes to the same peer are independent connections, all busy at once.
TEST(ShmTransport, FourLanesAtOnce) {
  runPair([](RankContext& rc, uint64_t hash) {
    ShmOptions options;
    options.cmaThreshold = 512 << 10;
    TestRank r;
    RANK_OK(setUp(rc, hash, options, &r));
    const int kLanes = 4;
    RANK_OK(connectAndSettle(rc, &r, kLanes));
    Driver d = driverFor(r);
    std::vector<std::vector<char>> src(kLanes), dst(kLanes);
    std::vector<TransferOp> sends(kLanes), recvs(kLanes);
    std::vector<TransferOp*> all;
    for (int lane = 0; lane < kLanes; ++lane) {
      size_t bytes = (lane + 1) * 700001;
      src[lane] = pattern(bytes, lane * 2 + rc.rank());
      dst[lane].assign(bytes, 0);
      sends[lane] = sendOp(src[lane].data(), bytes);
      recvs[lane] = recvOp(dst[lane].data(), bytes);
      RANK_OK(r.lanes[lane]->post(&sends[lane]));
      RANK_OK(r.lanes[lane]->post(&recvs[lane]));
      all.push_back(&sends[lane]);
      all.push_back(&recvs[lane]);
    }
    RANK_OK(d.runOps(all));
    for (int lane = 0; lane < kLanes; ++lane)
      RANK_CHECK(dst[lane] == pattern(dst[lane].size(), lane * 2 + 1 - rc.rank()),
                 "lane %d: wrong data", lane);
    return 0;
  });
}

// The lazy-connection rule: a sender connects and fills the ring before the receiver has
// even called connect(); connect() never waits for the peer.
TEST(ShmTransport, SenderRunsAheadOfReceiversConnect) {
  runPair([](RankContext& rc, uint64_t hash) {
    TestRank r;
    RANK_OK(setUp(rc, hash, ShmOptions(), &r));
    const size_t bytes = 3 << 20;  // more than the ring holds
    std::vector<char> data = pattern(bytes, 5);
    if (rc.rank() == 0) {
      RANK_OK(connectLanes(&r, 1, 1));
      TransferOp s = sendOp(data.data(), bytes);
      RANK_OK(r.lanes[0]->post(&s));
      for (int i = 0; i < 100; ++i) {
        bool p = false;
        RANK_OK(r.lanes[0]->progress(&p));
      }
      RANK_CHECK(s.done > 0 && !s.complete(), "sent %zu of %zu before the peer connected", s.done,
                 bytes);
      rc.allgather("");  // only now does rank 1 connect
      RANK_OK(driverFor(r).runOps({&s}));
    } else {
      rc.allgather("");
      RANK_OK(connectLanes(&r, 0, 1));
      std::vector<char> dst(bytes);
      TransferOp v = recvOp(dst.data(), bytes);
      RANK_OK(r.lanes[0]->post(&v));
      RANK_OK(driverFor(r).runOps({&v}));
      RANK_CHECK(dst == data, "wrong data");
    }
    return 0;
  });
}

// Ping-pong where every wait goes to sleep at once: a lost wake-up would stall a round trip
// for the whole sleep (5 s here), which no scheduling delay explains; and an idle wait
// burns no CPU.
TEST(ShmTransport, SleepsWithoutLosingWakeups) {
  runPair([](RankContext& rc, uint64_t hash) {
    TestRank r;
    RANK_OK(setUp(rc, hash, ShmOptions(), &r));
    RANK_OK(connectAndSettle(rc, &r, 1));
    Driver d = driverFor(r);
    d.spinRounds = 1;
    d.sleepCapMs = 5000;
    double slowest = 0;
    for (int i = 0; i < 300; ++i) {
      uint64_t start = nowNs();
      uint64_t out = i, in = ~0ull;
      TransferOp s = sendOp(&out, 8), v = recvOp(&in, 8);
      if (rc.rank() == 0) {
        RANK_OK(r.lanes[0]->post(&s));
        RANK_OK(d.runOps({&s}));
        RANK_OK(r.lanes[0]->post(&v));
        RANK_OK(d.runOps({&v}));
      } else {
        RANK_OK(r.lanes[0]->post(&v));
        RANK_OK(d.runOps({&v}));
        RANK_OK(r.lanes[0]->post(&s));
        RANK_OK(d.runOps({&s}));
      }
      RANK_CHECK(in == uint64_t(i), "round %d got %llu", i, (unsigned long long)in);
      slowest = std::max(slowest, (nowNs() - start) * 1e-9);
    }
    RANK_CHECK(slowest < 2.5, "a sleeping round trip took %.2f s: a lost wake-up", slowest);

    // Rank 0 waits 300 ms for a message; it must sleep, not spin.
    uint64_t word = 42, got = 0;
    if (rc.rank() == 0) {
      TransferOp v = recvOp(&got, 8);
      RANK_OK(r.lanes[0]->post(&v));
      d.spinRounds = 2000;
      timespec c0, c1;
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
      RANK_OK(d.runOps({&v}));
      clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
      double cpu = (c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) * 1e-9;
      RANK_CHECK(got == 42, "wrong message");
      RANK_CHECK(cpu < 0.05, "an idle wait of 300 ms used %.3f s of CPU", cpu);
    } else {
      usleep(300 * 1000);
      TransferOp s = sendOp(&word, 8);
      RANK_OK(r.lanes[0]->post(&s));
      RANK_OK(d.runOps({&s}));
    }
    return 0;
  });
}

// A peer that dies mid-transfer turns into loomRemoteError naming it, within seconds, on
// the receiving side (ring and CMA) and on the sending side.
TEST(ShmTransport, PeerExitMidTransferIsRemoteError) {
  for (Path path : {Path::Slots, Path::Cma}) {
    for (int victim : {0, 1}) {  // rank 0 sends to rank 1; the victim dies mid-way
      SCOPED_TRACE(strprintf("path %d victim %d", int(path), victim));
      runPair([path, victim](RankContext& rc, uint64_t hash) {
        TestRank r;
        RANK_OK(setUp(rc, hash, optionsFor(path), &r));
        RANK_OK(connectAndSettle(rc, &r, 1));
        Driver d = driverFor(r);
        const size_t bytes = 64 << 20;
        std::vector<char> buf(bytes, 1);
        TransferOp op = rc.rank() == 0 ? sendOp(buf.data(), bytes) : recvOp(buf.data(), bytes);
        // The victim stops a quarter in; a single-copy send goes only whole, so that sender
        // dies once its peer has read an eighth of it.
        if (rc.rank() == victim && !(path == Path::Cma && victim == 0)) op.limit = bytes / 4;
        RANK_OK(r.lanes[0]->post(&op));
        if (rc.rank() == victim) {
          RANK_OK(d.run([&] { return op.done >= bytes / 8; }));
          _exit(0);  // no destructors: as if killed
        }
        uint64_t start = nowNs();
        Status st = d.runOps({&op});
        double seconds = (nowNs() - start) * 1e-9;
        RANK_CHECK(st.code() == loomRemoteError, "got %d: %s", int(st.code()),
                   st.message().c_str());
        RANK_CHECK(st.message().find(strprintf("rank %d", victim)) != std::string::npos,
                   "the error does not name the peer: %s", st.message().c_str());
        RANK_CHECK(seconds < 5, "noticed after %.1f s", seconds);
        return 0;
      });
    }
  }
}

// Connections the peer never joins, and transports destroyed right after creation, leave
// nothing behind in /dev/shm (runPair checks).
TEST(ShmTransport, NothingLeftWhenPeerNeverConnects) {
  runPair([](RankContext& rc, uint64_t hash) {
    TestRank r;
    RANK_OK(setUp(rc, hash, ShmOptions(), &r));
    if (rc.rank() == 0) {
      RANK_OK(connectLanes(&r, 1, 3));
      std::vector<char> data(1000, 7);
      TransferOp s = sendOp(data.data(), data.size());
      RANK_OK(r.lanes[0]->post(&s));
      bool p = false;
      RANK_OK(r.lanes[0]->progress(&p));
      RANK_CHECK(r.lanes[0]->checkAlive().isOk(), "peer reported dead");
    }
    rc.allgather("");
    return 0;
  });
}

TEST(ShmTransport, CanConnectOnlyOnTheSameHost) {
  runPair([](RankContext& rc, uint64_t hash) {
    TestRank r;
    RANK_OK(setUp(rc, hash, ShmOptions(), &r));
    RANK_CHECK(r.transport->canConnect(1 - rc.rank()), "same host refused");
    r.ctx.peers[1 - rc.rank()].hostId ^= 1;
    RANK_CHECK(!r.transport->canConnect(1 - rc.rank()), "another host accepted");
    std::unique_ptr<Connection> c;
    RANK_CHECK(!r.transport->connect(1 - rc.rank(), 0, Deadline(1000), &c).isOk(),
               "connected to another host");
    rc.allgather("");
    return 0;
  });
}

}  // namespace
}  // namespace loom::transports
