// The TCP transport between forked ranks: connection setup in any order, bit-exact transfers
// of every size, RecvReduce, FIFO order, limits, lanes, strangers on the listener, dead peers,
// IPv6, and idle waits that use no CPU.
#include "transports/tcp/tcp_transport.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/params.h"
#include "base/socket.h"
#include "comm/options.h"
#include "tests/support/fork_ranks.h"
#include "transports/transport.h"

namespace loom::transports {
namespace {

using loom::testing::describeFailures;
using loom::testing::ForkOptions;
using loom::testing::RankContext;
using loom::testing::RankResult;
using loom::testing::runRanks;

constexpr size_t kChunk = size_t(128) << 10;
constexpr int64_t kTimeoutMs = 30000;
constexpr size_t kMiB = size_t(1) << 20;

#define RANK_OK(expr)                                            \
  do {                                                           \
    ::loom::Status rankOk_ = (expr);                             \
    RANK_CHECK(rankOk_.isOk(), "%s", rankOk_.message().c_str()); \
  } while (0)

// One rank's communicator as far as the transport sees it. It must stay where it is: the
// transport keeps a pointer to ctx, and connections must die before the transport.
struct TcpRank {
  CommContext ctx;
  std::unique_ptr<Transport> transport;
};

void fillSecret(unsigned char* secret, unsigned char salt) {
  for (int i = 0; i < 16; ++i) secret[i] = static_cast<unsigned char>(i * 7 + salt);
}

// Creates the transport (explicit options, or the LOOM_* parameters when null) and exchanges
// PeerInfo the way communicator init does.
Status startRank(RankContext& rc, const tcp::TcpOptions* options, TcpRank* r,
                 int64_t timeoutMs = kTimeoutMs) {
  r->ctx.rank = rc.rank();
  r->ctx.nranks = rc.nranks();
  r->ctx.timeoutMs = timeoutMs;
  fillSecret(r->ctx.secret, 1);
  LOOM_TRY(options != nullptr ? tcp::createTcpTransport(&r->ctx, *options, &r->transport)
                              : tcp::createTcpTransport(&r->ctx, readTcpOptions(), &r->transport));
  PeerInfo me;
  me.rank = rc.rank();
  me.pid = getpid();
  gethostname(me.hostname, sizeof(me.hostname) - 1);
  tcpListenAddress(*r->transport, &me);
  std::vector<std::string> all =
      rc.allgather(std::string(reinterpret_cast<const char*>(&me), sizeof(me)));
  r->ctx.peers.resize(all.size());
  for (size_t i = 0; i < all.size(); ++i) memcpy(&r->ctx.peers[i], all[i].data(), sizeof(me));
  return Status::ok();
}

// startRank for one of two ranks, then its lane-0 connection to the other.
Status startPair(RankContext& rc, const tcp::TcpOptions& o, TcpRank* r,
                 std::unique_ptr<Connection>* c) {
  LOOM_TRY(startRank(rc, &o, r));
  return r->transport->connect(1 - rc.rank(), 0, Deadline(kTimeoutMs), c);
}

tcp::TcpOptions options(int sockets, size_t chunkBytes = kChunk) {
  tcp::TcpOptions o;
  o.sockets = sockets;
  o.chunkBytes = chunkBytes;
  return o;
}

// Data that differs at every byte position and per stream, so a misplaced chunk shows.
uint64_t seedOf(int from, int to, int lane, int k) {
  return uint64_t(from) << 48 | uint64_t(to) << 32 | uint64_t(lane) << 16 | uint64_t(k);
}
uint8_t patternByte(uint64_t seed, size_t i) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (seed + 1) * 0xBF58476D1CE4E5B9ull;
  return uint8_t(x >> 56 ^ x >> 29);
}
std::vector<uint8_t> pattern(uint64_t seed, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = patternByte(seed, i);
  return v;
}
// "" when data holds the pattern, else where it first differs.
std::string mismatch(const uint8_t* data, size_t n, uint64_t seed) {
  for (size_t i = 0; i < n; ++i)
    if (data[i] != patternByte(seed, i))
      return strprintf("byte %zu of %zu: got %u, want %u", i, n, data[i], patternByte(seed, i));
  return "";
}

TransferOp sendOp(void* src, size_t bytes) {
  return wholeTransfer(TransferOp::Kind::Send, src, bytes);
}
TransferOp recvOp(void* dst, size_t bytes) {
  return wholeTransfer(TransferOp::Kind::Recv, dst, bytes);
}

// Drives connections until every op is complete, the way the executor waits: poll, spin a
// little, then arm, poll once more and sleep. onRound runs before every round.
Status drive(Transport& t, const std::vector<Connection*>& conns,
             const std::vector<TransferOp*>& ops, int64_t timeoutMs = kTimeoutMs,
             const std::function<void()>& onRound = nullptr) {
  Deadline deadline(timeoutMs);
  int idleRounds = 0;
  auto progressAll = [&conns](bool* progressed) {
    for (Connection* c : conns) LOOM_TRY(c->progress(progressed));
    return Status::ok();
  };
  for (;;) {
    if (onRound) onRound();
    bool progressed = false;
    LOOM_TRY(progressAll(&progressed));
    if (std::all_of(ops.begin(), ops.end(), [](TransferOp* op) { return op->complete(); }))
      return Status::ok();
    if (deadline.expired()) return errorf(loomTimeout, "test driver: ops did not complete");
    if (progressed) {
      idleRounds = 0;
      continue;
    }
    if (++idleRounds < 100) continue;
    uint64_t token = t.armSleep();
    LOOM_TRY(progressAll(&progressed));
    if (!progressed) t.sleepUs(token, 100000);
    t.disarmSleep();
  }
}

// Sends `bytes` of pattern to the peer and receives as much from it, both at once.
int exchange(RankContext& rc, TcpRank& r, Connection* c, int peer, size_t bytes, int lane, int k) {
  std::vector<uint8_t> out = pattern(seedOf(rc.rank(), peer, lane, k), bytes);
  std::vector<uint8_t> in(bytes, 0);
  TransferOp s = sendOp(out.data(), bytes), v = recvOp(in.data(), bytes);
  RANK_OK(c->post(&s));
  RANK_OK(c->post(&v));
  RANK_OK(drive(*r.transport, {c}, {&s, &v}));
  std::string bad = mismatch(in.data(), bytes, seedOf(peer, rc.rank(), lane, k));
  RANK_CHECK(bad.empty(), "from rank %d, %zu bytes: %s", peer, bytes, bad.c_str());
  return 0;
}

ForkOptions within(int seconds) {
  ForkOptions o;
  o.timeoutSec = seconds;
  return o;
}

void expectPass(const std::vector<RankResult>& results, const ForkOptions& o = {}) {
  EXPECT_EQ(describeFailures(results, o), "");
}

class TcpSizes : public ::testing::TestWithParam<int> {};

TEST_P(TcpSizes, EverySizeBothWaysBitExact) {
  const int sockets = GetParam();
  expectPass(runRanks(
      2,
      [sockets](RankContext& rc) {
        TcpRank r;
        std::unique_ptr<Connection> c;
        RANK_OK(startPair(rc, options(sockets), &r, &c));
        int peer = 1 - rc.rank();
        const size_t sizes[] = {0, 1, 7, kChunk - 1, kChunk, kChunk + 1, kMiB + 3, 64 * kMiB};
        for (int k = 0; k < int(std::size(sizes)); ++k)
          if (exchange(rc, r, c.get(), peer, sizes[k], 0, k) != 0) return 1;
        return 0;
      },
      within(120)));
}

INSTANTIATE_TEST_SUITE_P(Sockets, TcpSizes, ::testing::Values(1, 2, 4));

// Chunks as small as allowed over 3 sockets: a message becomes thousands of chunks and one
// system call carries many of them.
TEST(TcpTransport, TinyChunksOverThreeSockets) {
  expectPass(runRanks(
      2,
      [](RankContext& rc) {
        TcpRank r;
        std::unique_ptr<Connection> c;
        RANK_OK(startPair(rc, options(3, tcp::kChunkAlign), &r, &c));
        int peer = 1 - rc.rank();
        const size_t sizes[] = {1, 63, 64, 65, 64 * 3 + 1, 100000, kMiB + 3};
        for (int k = 0; k < int(std::size(sizes)); ++k)
          if (exchange(rc, r, c.get(), peer, sizes[k], 0, k) != 0) return 1;
        return 0;
      },
      within(60)));
}

// LOOM_TCP_PACING: both ends of a connection pace each of its sockets at its share of the
// rate (the kernel reports it back) once it sends a large message, and data still arrives
// intact; unpaced sockets are not. Small messages (up to 32 KiB, several at once included)
// leave every socket unpaced, whatever the rate. Per peer (LOOM_TCP_PACING=-1): every socket at
// the rate setTcpPeerPacing gave for the peer, which overrides the fixed one; a transport that
// takes no per-peer rates ignores them.
TEST(TcpTransport, PacingSharesTheRateOverTheSockets) {
  expectPass(runRanks(
      2,
      [](RankContext& rc) {
        struct Case {
          uint64_t fixed;
          bool perPeer;
          uint64_t peerRate;  // what setTcpPeerPacing gives for the peer
          uint64_t rate;      // what each of its 3 sockets must run at
        };
        const uint64_t m = uint64_t(1) << 20;
        for (const Case k : {Case{0, false, 0, 0}, Case{300 * m, false, 0, 100 * m},
                             Case{0, true, 120 * m, 120 * m}, Case{300 * m, true, 0, 0},
                             Case{300 * m, false, 120 * m, 100 * m}}) {
          const uint64_t rate = k.rate;
          tcp::TcpOptions o = options(3);
          o.pacingBytesPerSecond = k.fixed;
          o.pacingPerPeer = k.perPeer;
          TcpRank r;
          RANK_OK(startRank(rc, &o, &r));
          int peer = 1 - rc.rank();
          std::vector<uint64_t> rates(2, 7 * m);  // itself: never connected
          rates[size_t(peer)] = k.peerRate;
          RANK_CHECK(tcpPacesPerPeer(*r.transport) == k.perPeer, "per-peer pacing %s",
                     k.perPeer ? "off" : "on");
          setTcpPeerPacing(*r.transport, rates);
          std::unique_ptr<Connection> c;
          RANK_OK(r.transport->connect(peer, 0, Deadline(kTimeoutMs), &c));
          for (int k = 0; k < 4; ++k)
            if (exchange(rc, r, c.get(), peer, (size_t(8) << 10) + 3 + size_t(k), 0, k) != 0)
              return 1;
          for (uint64_t p : tcp::tcpSocketPacing(*c))
            RANK_CHECK(p > (uint64_t(1) << 40), "a socket paced at %llu bytes/s for 8 KiB",
                       (unsigned long long)p);
          if (exchange(rc, r, c.get(), peer, kMiB + 5, 0, 4) != 0) return 1;
          const std::vector<uint64_t> paced = tcp::tcpSocketPacing(*c);
          RANK_CHECK(paced.size() == 3, "%zu sockets", paced.size());
          for (uint64_t p : paced)
            RANK_CHECK(rate == 0 ? p > (uint64_t(1) << 40) : p == rate,
                       "a socket paced at %llu bytes/s for a rate of %llu", (unsigned long long)p,
                       (unsigned long long)rate);
          rc.allgather("");  // both are done with this transport
        }
        return 0;
      },
      within(60)));
}

// Each rank sends its vector a and RecvReduces the peer's into dst = b + a_peer. Inputs are
// small integers, so float sums are exact.
template <typename T>
int recvReduceRank(RankContext& rc, loomDataType_t dtype, bool inPlace, size_t chunkBytes) {
  TcpRank r;
  std::unique_ptr<Connection> c;
  RANK_OK(startPair(rc, options(2, chunkBytes), &r, &c));
  int peer = 1 - rc.rank();
  auto a = [](int rank, size_t i) { return T(int64_t((i * 7 + rank * 3) % 1000) - 300); };
  auto b = [](int rank, size_t i) { return T(int64_t((i + rank) % 517)); };
  const size_t counts[] = {1, 3, 1000, kChunk / sizeof(T) + 1, 300001};
  for (size_t n : counts) {
    std::vector<T> mine(n), local(n), result(n, T(-1));
    for (size_t i = 0; i < n; ++i) mine[i] = a(rc.rank(), i), local[i] = b(rc.rank(), i);
    TransferOp s = sendOp(mine.data(), n * sizeof(T));
    s.dtype = dtype;
    TransferOp v = wholeTransfer(TransferOp::Kind::RecvReduce,
                                 inPlace ? local.data() : result.data(), n * sizeof(T));
    v.src = local.data();
    v.dtype = dtype;
    RANK_OK(c->post(&s));
    RANK_OK(c->post(&v));
    RANK_OK(drive(*r.transport, {c.get()}, {&s, &v}));
    const T* got = static_cast<const T*>(v.dst);
    for (size_t i = 0; i < n; ++i) {
      T want = T(b(rc.rank(), i) + a(peer, i));
      RANK_CHECK(memcmp(&got[i], &want, sizeof(T)) == 0, "count %zu element %zu: got %g want %g", n,
                 i, double(got[i]), double(want));
    }
  }
  return 0;
}

TEST(TcpTransport, RecvReduceFloat32Sum) {
  expectPass(runRanks(
      2, [](RankContext& rc) { return recvReduceRank<float>(rc, loomFloat32, false, kChunk); },
      within(60)));
}

TEST(TcpTransport, RecvReduceInt64SumInPlace) {
  expectPass(runRanks(
      2, [](RankContext& rc) { return recvReduceRank<int64_t>(rc, loomInt64, true, kChunk); },
      within(60)));
}

TEST(TcpTransport, RecvReduceInt64SumTinyChunks) {
  expectPass(runRanks(
      2,
      [](RankContext& rc) {
        return recvReduceRank<int64_t>(rc, loomInt64, false, tcp::kChunkAlign);
      },
      within(60)));
}

// Hundreds of ops of mixed sizes (empty ones too) posted at once in both directions complete
// in order, each with its own bytes.
TEST(TcpTransport, ManyOpsBothWaysFifo) {
  expectPass(runRanks(
      2,
      [](RankContext& rc) {
        TcpRank r;
        std::unique_ptr<Connection> c;
        RANK_OK(startPair(rc, options(2, 4096), &r, &c));
        int peer = 1 - rc.rank();
        constexpr int kOps = 300;
        auto size = [](int from, int k) {
          uint64_t h = seedOf(from, 0, 0, k) * 0x9E3779B97F4A7C15ull >> 40;
          switch (k % 5) {
            case 0:
              return size_t(0);
            case 1:
              return size_t(h % 16);
            case 2:
              return size_t(h % 5000);
            default:
              return size_t(h % 70000);
          }
        };
        std::vector<std::vector<uint8_t>> out(kOps), in(kOps);
        std::vector<TransferOp> sends(kOps), recvs(kOps);
        std::vector<TransferOp*> all;
        for (int k = 0; k < kOps; ++k) {
          out[k] = pattern(seedOf(rc.rank(), peer, 0, k), size(rc.rank(), k));
          in[k].assign(size(peer, k), 0);
          sends[k] = sendOp(out[k].data(), out[k].size());
          recvs[k] = recvOp(in[k].data(), in[k].size());
          RANK_OK(c->post(&sends[k]));
          RANK_OK(c->post(&recvs[k]));
          all.push_back(&sends[k]);
          all.push_back(&recvs[k]);
        }
        RANK_OK(drive(*r.transport, {c.get()}, all));
        for (int k = 0; k < kOps; ++k) {
          std::string bad = mismatch(in[k].data(), in[k].size(), seedOf(peer, rc.rank(), 0, k));
          RANK_CHECK(bad.empty(), "op %d: %s", k, bad.c_str());
        }
        return 0;
      },
      within(60)));
}

// The executor releases data step by step: a send may read only below its limit (the rest of
// the source is filled in just before the limit moves), a receive may write only below its
// limit, and `done` never passes it and stays in whole elements.
TEST(TcpTransport, LimitsMoveInSteps) {
  expectPass(runRanks(
      2,
      [](RankContext& rc) {
        TcpRank r;
        std::unique_ptr<Connection> c;
        RANK_OK(startPair(rc, options(3, 8192), &r, &c));
        int peer = 1 - rc.rank();
        constexpr size_t kBytes = 5 * kMiB + 12;
        constexpr size_t kSendStep = 40000, kRecvStep = 12344, kWindow = 4096;
        constexpr uint8_t kUnwritten = 0xCD;
        std::vector<uint8_t> want = pattern(seedOf(rc.rank(), peer, 0, 0), kBytes);
        std::vector<uint8_t> src(kBytes, 0xEE), dst(kBytes, kUnwritten), zeros(kBytes, 0);
        std::vector<uint8_t> dst2(kBytes, kUnwritten);
        TransferOp s = sendOp(src.data(), kBytes), s2 = sendOp(want.data(), kBytes);
        TransferOp v = recvOp(dst.data(), kBytes);
        TransferOp v2;  // RecvReduce over zeros: lands the peer's bytes as int32 sums
        v2.kind = TransferOp::Kind::RecvReduce;
        v2.src = zeros.data();
        v2.dst = dst2.data();
        v2.bytes = kBytes;
        s.dtype = s2.dtype = v.dtype = v2.dtype = loomInt32;
        s.limit = s2.limit = v.limit = v2.limit = 0;
        for (TransferOp* op : {&s, &s2, &v, &v2}) RANK_OK(c->post(op));
        std::string violation;
        auto checkRecv = [&](const TransferOp& op, size_t prevDone) {
          const uint8_t* d = static_cast<const uint8_t*>(op.dst);
          size_t end = std::min(op.limit + kWindow, op.bytes);
          if (op.done > op.limit || op.done % 4 != 0 || op.done < prevDone)
            violation =
                strprintf("done %zu with limit %zu (before: %zu)", op.done, op.limit, prevDone);
          for (size_t i = op.limit; i < end && violation.empty(); ++i)
            if (d[i] != kUnwritten)
              violation = strprintf("byte %zu written past limit %zu", i, op.limit);
        };
        size_t vDone = 0, v2Done = 0;
        auto onRound = [&] {
          checkRecv(v, vDone);
          checkRecv(v2, v2Done);
          vDone = v.done, v2Done = v2.done;
          for (TransferOp* op : {&s, &s2}) {
            size_t next = std::min(op->limit + kSendStep, kBytes);
            if (op == &s) memcpy(src.data() + s.limit, want.data() + s.limit, next - s.limit);
            op->limit = next;
          }
          for (TransferOp* op : {&v, &v2}) op->limit = std::min(op->limit + kRecvStep, kBytes);
        };
        RANK_OK(drive(*r.transport, {c.get()}, {&s, &s2, &v, &v2}, kTimeoutMs, onRound));
        RANK_CHECK(violation.empty(), "%s", violation.c_str());
        uint64_t seed = seedOf(peer, rc.rank(), 0, 0);
        std::string bad = mismatch(dst.data(), kBytes, seed);
        RANK_CHECK(bad.empty(), "Recv: %s", bad.c_str());
        bad = mismatch(dst2.data(), kBytes, seed);
        RANK_CHECK(bad.empty(), "RecvReduce: %s", bad.c_str());
        return 0;
      },
      within(60)));
}

// A send holds back a small ready piece of a chunk until the chunk's end is ready or the piece
// reaches 16 KiB: a tiny early piece costs a packet and a wake-up and saves nothing. Chunks of
// 8 KiB on one socket; `done` is what the sender handed to the kernel.
TEST(TcpTransport, SendHoldsBackPiecesTooSmallToPay) {
  expectPass(runRanks(
      2,
      [](RankContext& rc) {
        TcpRank r;
        std::unique_ptr<Connection> c;
        RANK_OK(startPair(rc, options(1, 8192), &r, &c));
        constexpr size_t kBytes = 64 * 1024;
        const uint64_t seed = seedOf(0, 1, 0, 0);
        if (rc.rank() == 1) {
          std::vector<uint8_t> in(kBytes, 0);
          TransferOp v = recvOp(in.data(), kBytes);
          RANK_OK(c->post(&v));
          RANK_OK(drive(*r.transport, {c.get()}, {&v}));
          std::string bad = mismatch(in.data(), kBytes, seed);
          RANK_CHECK(bad.empty(), "%s", bad.c_str());
          return 0;
        }
        std::vector<uint8_t> out = pattern(seed, kBytes);
        TransferOp s = sendOp(out.data(), kBytes);
        // Each limit, and what the sender may have sent once it has made every move it can:
        // whole chunks below the limit, plus a piece of the next one if it is 16 KiB or more
        // (it never is with 8 KiB chunks, so the expected figure is exact). The first chunk
        // begins with the message's header, so chunk k ends at byte (k + 1) 8192 - header.
        constexpr size_t h = sizeof(tcp::TcpMessageHeader);
        const std::pair<size_t, size_t> stages[] = {
            {100, 0}, {8192 + 100, 8192 - h}, {3 * 8192 + 5000, 3 * 8192 - h}, {kBytes, kBytes}};
        auto progress = [&c] {
          bool progressed = false;
          return c->progress(&progressed);
        };
        for (auto [limit, sent] : stages) {
          s.limit = limit;
          if (limit == 100) RANK_OK(c->post(&s));
          for (int round = 0; round < 2000 && s.done < sent; ++round) RANK_OK(progress());
          // Then give it the chance to overshoot.
          for (int round = 0; round < 200; ++round) RANK_OK(progress());
          RANK_CHECK(s.done == sent, "limit %zu: sent %zu bytes, want %zu", limit, s.done, sent);
        }
        return 0;
      },
      within(60)));
}

class TcpLanes : public ::testing::TestWithParam<int> {};

// Lanes are independent connections; the ranks connect them in opposite orders.
TEST_P(TcpLanes, LanesCarryTheirOwnStreams) {
  const int lanes = GetParam();
  expectPass(runRanks(
      2,
      [lanes](RankContext& rc) {
        tcp::TcpOptions o = options(2);
        TcpRank r;
        RANK_OK(startRank(rc, &o, &r));
        int peer = 1 - rc.rank();
        std::vector<std::unique_ptr<Connection>> conns(lanes);
        for (int i = 0; i < lanes; ++i) {
          int lane = rc.rank() == 0 ? i : lanes - 1 - i;
          RANK_OK(r.transport->connect(peer, lane, Deadline(kTimeoutMs), &conns[lane]));
        }
        std::vector<std::vector<uint8_t>> out(lanes), in(lanes);
        std::vector<TransferOp> sends(lanes), recvs(lanes);
        std::vector<TransferOp*> all;
        std::vector<Connection*> raw;
        for (int l = 0; l < lanes; ++l) {
          size_t n = kMiB + size_t(l) * 4099;
          out[l] = pattern(seedOf(rc.rank(), peer, l, 0), n);
          in[l].assign(n, 0);
          sends[l] = sendOp(out[l].data(), n);
          recvs[l] = recvOp(in[l].data(), n);
          RANK_OK(conns[l]->post(&sends[l]));
          RANK_OK(conns[l]->post(&recvs[l]));
          all.push_back(&sends[l]);
          all.push_back(&recvs[l]);
          raw.push_back(conns[l].get());
        }
        RANK_OK(drive(*r.transport, raw, all));
        for (int l = 0; l < lanes; ++l) {
          std::string bad = mismatch(in[l].data(), in[l].size(), seedOf(peer, rc.rank(), l, 0));
          RANK_CHECK(bad.empty(), "lane %d: %s", l, bad.c_str());
        }
        return 0;
      },
      within(60)));
}

INSTANTIATE_TEST_SUITE_P(Lanes, TcpLanes, ::testing::Values(2, 3));

class TcpTriangle : public ::testing::TestWithParam<int> {};

// Three ranks connect every pair, each in its own order and some late, with no deadlock: the
// higher rank of a pair never waits inside connect().
TEST_P(TcpTriangle, ConnectsInAnyOrder) {
  const int variant = GetParam();
  expectPass(runRanks(
      3,
      [variant](RankContext& rc) {
        tcp::TcpOptions o = options(2);
        TcpRank r;
        RANK_OK(startRank(rc, &o, &r));
        int me = rc.rank();
        std::vector<int> order;
        switch (variant) {
          case 0:
            order = {(me + 1) % 3, (me + 2) % 3};
            break;
          case 1:
            order = {(me + 2) % 3, (me + 1) % 3};
            break;
          default:  // the dialing ranks arrive late
            order = {(me + 1) % 3, (me + 2) % 3};
            if (me == 0) usleep(300 * 1000);
            if (me == 1) usleep(150 * 1000);
        }
        std::vector<std::unique_ptr<Connection>> conns(3);
        for (int p : order) RANK_OK(r.transport->connect(p, 0, Deadline(kTimeoutMs), &conns[p]));
        size_t n = kMiB + 5;
        std::vector<std::vector<uint8_t>> out(3), in(3);
        std::vector<TransferOp> sends(3), recvs(3);
        std::vector<TransferOp*> all;
        std::vector<Connection*> raw;
        for (int p : order) {
          out[p] = pattern(seedOf(me, p, 0, 0), n);
          in[p].assign(n, 0);
          sends[p] = sendOp(out[p].data(), n);
          recvs[p] = recvOp(in[p].data(), n);
          RANK_OK(conns[p]->post(&sends[p]));
          RANK_OK(conns[p]->post(&recvs[p]));
          all.push_back(&sends[p]);
          all.push_back(&recvs[p]);
          raw.push_back(conns[p].get());
        }
        RANK_OK(drive(*r.transport, raw, all));
        for (int p : order) {
          std::string bad = mismatch(in[p].data(), n, seedOf(p, me, 0, 0));
          RANK_CHECK(bad.empty(), "from rank %d: %s", p, bad.c_str());
        }
        return 0;
      },
      within(60)));
}

INSTANTIATE_TEST_SUITE_P(Orders, TcpTriangle, ::testing::Values(0, 1, 2));

// Strangers on the listener (a hello with the wrong secret, one that is not a hello at all,
// one that never speaks) are refused and logged; the real connection works regardless.
TEST(TcpTransport, RefusesStrangersAndStillConnects) {
  auto results = runRanks(
      2,
      [](RankContext& rc) {
        tcp::TcpOptions o = options(2);
        TcpRank r;
        RANK_OK(startRank(rc, &o, &r));
        int peer = 1 - rc.rank();
        std::vector<int> strangers;
        if (rc.rank() == 0) {
          net::Address addr;
          addr.len = r.ctx.peers[1].tcpAddrLen;
          memcpy(&addr.storage, &r.ctx.peers[1].tcpAddr, addr.len);
          // Exactly the real first hello but for the secret: accepted, it would take socket 0.
          tcp::TcpHello wrongSecret = {};
          wrongSecret.magic = tcp::kTcpHelloMagic;
          fillSecret(wrongSecret.secret, 2);
          wrongSecret.rank = 0;
          wrongSecret.lane = 0;
          wrongSecret.socketIndex = 0;
          wrongSecret.sockets = 2;
          wrongSecret.chunkBytes = kChunk;
          char notAHello[sizeof(tcp::TcpHello)] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
          const void* const payloads[] = {&wrongSecret, notAHello, nullptr};
          for (const void* bytes : payloads) {
            int fd = -1;
            RANK_OK(net::connectTo(addr, Deadline(kTimeoutMs), &fd));
            strangers.push_back(fd);
            if (bytes != nullptr)
              RANK_OK(net::sendAll(fd, bytes, sizeof(notAHello), Deadline(kTimeoutMs)));
          }
        }
        std::unique_ptr<Connection> c;
        RANK_OK(r.transport->connect(peer, 0, Deadline(kTimeoutMs), &c));
        if (exchange(rc, r, c.get(), peer, kMiB + 3, 0, 0) != 0) return 1;
        for (int fd : strangers) close(fd);
        return 0;
      },
      within(60));
  expectPass(results);
  EXPECT_NE(results[1].output.find("wrong secret"), std::string::npos) << results[1].output;
  EXPECT_NE(results[1].output.find("not a loom TCP hello"), std::string::npos) << results[1].output;
}

class TcpPeerExit : public ::testing::TestWithParam<bool> {};

// A peer that dies mid-transfer is a loomRemoteError naming it, within seconds: reset while we
// send (its unread data makes the kernel answer with RST), closed while we only receive.
TEST_P(TcpPeerExit, BecomesRemoteErrorNamingThePeer) {
  const bool whileSending = GetParam();
  ForkOptions fo = within(60);
  fo.expectedToDie = {1};
  expectPass(
      runRanks(
          2,
          [whileSending](RankContext& rc) {
            TcpRank r;
            std::unique_ptr<Connection> c;
            RANK_OK(startPair(rc, options(2), &r, &c));
            const size_t n = 64 * kMiB;
            std::vector<uint8_t> out(n, 1), in(n, 0);
            TransferOp s = sendOp(out.data(), n), v = recvOp(in.data(), n);
            if (rc.rank() == 1) {
              // Take a few MiB (or send one), then vanish mid-stream.
              RANK_OK(c->post(whileSending ? &v : &s));
              for (;;) {
                bool progressed = false;
                RANK_OK(c->progress(&progressed));
                if (whileSending ? v.done >= 4 * kMiB : s.done >= kMiB) _exit(0);
              }
            }
            // Only one direction, so that the peer's exit is the one way this can end.
            TransferOp* mine = whileSending ? &s : &v;
            RANK_OK(c->post(mine));
            uint64_t start = nowNs();
            Status st = drive(*r.transport, {c.get()}, {mine});
            double seconds = double(nowNs() - start) / 1e9;
            RANK_CHECK(st.code() == loomRemoteError, "got code %d: %s", int(st.code()),
                       st.message().c_str());
            RANK_CHECK(st.message().find("rank 1 (host ") != std::string::npos, "%s",
                       st.message().c_str());
            const char* how = whileSending ? "reset the connection" : "closed the connection";
            RANK_CHECK(st.message().find(how) != std::string::npos, "%s", st.message().c_str());
            RANK_CHECK(seconds < 10, "took %.1f s", seconds);
            // The failure sticks.
            bool progressed = false;
            RANK_CHECK(c->progress(&progressed).code() == loomRemoteError, "error did not stick");
            return 0;
          },
          fo),
      fo);
}

INSTANTIATE_TEST_SUITE_P(Direction, TcpPeerExit, ::testing::Values(true, false));

// A peer that never dials: the higher rank's connection gives up at the deadline.
TEST(TcpTransport, PeerThatNeverConnectsTimesOut) {
  expectPass(runRanks(
      2,
      [](RankContext& rc) {
        tcp::TcpOptions o = options(2);
        TcpRank r;
        RANK_OK(startRank(rc, &o, &r));
        if (rc.rank() == 1) {
          std::unique_ptr<Connection> c;
          RANK_OK(r.transport->connect(0, 0, Deadline(500), &c));
          std::vector<uint8_t> in(16);
          TransferOp v = recvOp(in.data(), in.size());
          RANK_OK(c->post(&v));
          uint64_t start = nowNs();
          Status st = drive(*r.transport, {c.get()}, {&v}, 10000);
          double seconds = double(nowNs() - start) / 1e9;
          RANK_CHECK(st.code() == loomTimeout, "got code %d: %s", int(st.code()),
                     st.message().c_str());
          RANK_CHECK(st.message().find("rank 0") != std::string::npos, "%s", st.message().c_str());
          RANK_CHECK(seconds < 3, "took %.1f s", seconds);
        }
        rc.allgather("");  // rank 0 stays alive (and silent) until rank 1 has seen the timeout
        return 0;
      },
      within(30)));
}

// Waiting for a late peer sleeps in poll() instead of spinning.
TEST(TcpTransport, IdleWaitUsesNoCpu) {
  expectPass(runRanks(
      2,
      [](RankContext& rc) {
        TcpRank r;
        std::unique_ptr<Connection> c;
        RANK_OK(startPair(rc, options(2), &r, &c));
        uint64_t data = 0x0123456789abcdefull, got = 0;
        if (rc.rank() == 0) {
          usleep(1000 * 1000);
          TransferOp s = sendOp(&data, sizeof(data));
          RANK_OK(c->post(&s));
          RANK_OK(drive(*r.transport, {c.get()}, {&s}));
          return 0;
        }
        auto cpuSeconds = [] {
          rusage u;
          getrusage(RUSAGE_SELF, &u);
          return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
                 double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
        };
        TransferOp v = recvOp(&got, sizeof(got));
        RANK_OK(c->post(&v));
        double cpu0 = cpuSeconds();
        uint64_t start = nowNs();
        RANK_OK(drive(*r.transport, {c.get()}, {&v}));
        double wall = double(nowNs() - start) / 1e9, cpu = cpuSeconds() - cpu0;
        RANK_CHECK(got == data, "got %llx", static_cast<unsigned long long>(got));
        RANK_CHECK(wall > 0.5, "the wait took only %.3f s", wall);
        RANK_CHECK(cpu < 0.2, "waiting %.2f s used %.2f s of CPU", wall, cpu);
        return 0;
      },
      within(30)));
}

// IPv6 on ::1, chosen through LOOM_SOCKET_IFNAME / LOOM_SOCKET_FAMILY and the parameter-reading
// factory. The parameters are read once per process, so the ranks set them before anything
// reads them (or, if this process already did, the test reruns itself in a fresh process).
TEST(TcpTransport, Ipv6Loopback) {
  constexpr int kParamsAlreadyRead = 77;
  auto results = runRanks(
      2,
      [](RankContext& rc) {
        setenv("LOOM_SOCKET_IFNAME", "lo", 1);
        setenv("LOOM_SOCKET_FAMILY", "AF_INET6", 1);
        if (params::getString("LOOM_SOCKET_FAMILY") != "AF_INET6") return kParamsAlreadyRead;
        TcpRank r;
        RANK_OK(startRank(rc, nullptr, &r));
        int peer = 1 - rc.rank();
        const PeerInfo& info = r.ctx.peers[peer];
        RANK_CHECK(info.tcpAddr.ss_family == AF_INET6, "family %d", info.tcpAddr.ss_family);
        const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&info.tcpAddr);
        RANK_CHECK(IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr), "not ::1");
        std::unique_ptr<Connection> c;
        RANK_OK(r.transport->connect(peer, 0, Deadline(kTimeoutMs), &c));
        return exchange(rc, r, c.get(), peer, kMiB + 3, 0, 0);
      },
      within(60));
  if (results[0].exitCode != kParamsAlreadyRead && results[1].exitCode != kParamsAlreadyRead) {
    expectPass(results);
    return;
  }
  // An earlier test of this process read the parameters, so its children cannot change them:
  // run this test again in a fresh process of this binary, where nothing has read them yet.
  ASSERT_EQ(getenv("LOOM_TCP_TEST_FRESH"), nullptr) << "parameters read before the test began";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    setenv("LOOM_TCP_TEST_FRESH", "1", 1);
    execl("/proc/self/exe", "loom_unit_tests", "--gtest_filter=TcpTransport.Ipv6Loopback",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the test failed in a fresh process (status " << status << ")";
}

}  // namespace
}  // namespace loom::transports
