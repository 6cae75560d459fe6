// Every collective × dtype × op, in place and out of place, over shm, tcp and ucx, with forked
// ranks, checked bit for bit against independently computed expectations; and a soak of
// random calls on every algorithm, with the process's memory and descriptors watched.
#include <gtest/gtest.h>

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "base/params.h"
#include "base/status.h"
#include "collectives/builders.h"
#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"
#include "tests/support/rank_sets.h"
#include "tests/support/temp_dir.h"
#include "tests/support/values.h"

namespace loom::testing {
namespace {

// A failure description, or empty. Every case allocates its own buffers so that one case's
// leftovers cannot make another pass.
using Result = std::string;

#define CASE_CHECK(cond, ...)                                  \
  do {                                                         \
    if (!(cond)) return what + ": " + strprintf(__VA_ARGS__); \
  } while (0)

struct Case {
  loomDataType_t t;
  loomRedOp_t op;
  uint64_t count;
  bool inPlace;
  int root;
};

std::string describe(const char* coll, const Case& c) {
  return strprintf("%s %s %s count %llu %s root %d", coll, typeName(c.t), opNameOf(c.op),
                    (unsigned long long)c.count, c.inPlace ? "in-place" : "out-of-place",
                    c.root);
}

loomResult_t lastRc;
#define CALL(expr)                                                                   \
  do {                                                                               \
    lastRc = (expr);                                                                 \
    CASE_CHECK(lastRc == loomSuccess, "%s -> %s: %s", #expr, loomGetErrorString(lastRc), \
               loomGetLastError(comm));                                              \
  } while (0)

Result allReduce(loomComm_t comm, int rank, int n, const Case& c) {
  std::string what = describe("allreduce", c);
  size_t es = typeSize(c.t);
  std::vector<char> in(c.count * es + 1), out(c.count * es + 1);
  fillInput(in.data(), c.count, c.op, c.t, n, rank);
  void* dst = c.inPlace ? in.data() : out.data();
  CALL(loomAllReduce(in.data(), dst, c.count, c.t, c.op, comm, nullptr));
  uint64_t firstBad = 0;
  uint64_t bad = countReductionErrors(dst, c.count, c.op, c.t, n, 0, &firstBad);
  CASE_CHECK(bad == 0, "%llu wrong elements, first at %llu", (unsigned long long)bad,
             (unsigned long long)firstBad);
  return "";
}

Result reduce(loomComm_t comm, int rank, int n, const Case& c) {
  std::string what = describe("reduce", c);
  size_t es = typeSize(c.t);
  std::vector<char> in(c.count * es + 1), out(c.count * es + 1, 0x5a);
  fillInput(in.data(), c.count, c.op, c.t, n, rank);
  void* dst = c.inPlace ? in.data() : out.data();
  CALL(loomReduce(in.data(), dst, c.count, c.t, c.op, c.root, comm, nullptr));
  if (rank == c.root) {
    uint64_t bad = countReductionErrors(dst, c.count, c.op, c.t, n);
    CASE_CHECK(bad == 0, "%llu wrong elements at the root", (unsigned long long)bad);
  } else if (!c.inPlace) {
    for (char b : out) CASE_CHECK(b == 0x5a, "a non-root's recvbuff was written");
  }
  return "";
}

Result reduceScatter(loomComm_t comm, int rank, int n, const Case& c) {
  std::string what = describe("reducescatter", c);
  size_t es = typeSize(c.t);
  std::vector<char> in(c.count * n * es + 1), out(c.count * es + 1);
  fillInput(in.data(), c.count * n, c.op, c.t, n, rank);
  void* dst = c.inPlace ? in.data() + rank * c.count * es : out.data();
  CALL(loomReduceScatter(in.data(), dst, c.count, c.t, c.op, comm, nullptr));
  uint64_t bad = countReductionErrors(dst, c.count, c.op, c.t, n, rank * c.count);
  CASE_CHECK(bad == 0, "%llu wrong elements", (unsigned long long)bad);
  return "";
}

// Data-movement collectives carry a value that names its origin: (rank, index) → small int.
double origin(int r, uint64_t i) { return double((uint64_t(r) * 31 + i * 7) % 100); }

void fillOrigin(char* p, uint64_t count, loomDataType_t t, int r, uint64_t first) {
  // Data movement is format-blind, so the value is written as a raw integer of the type's size.
  size_t es = typeSize(t);
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t v = uint64_t(origin(r, first + i));
    memcpy(p + i * es, &v, es);  // little-endian: the low bytes
  }
}

bool sameOrigin(const char* p, uint64_t count, loomDataType_t t, int r, uint64_t first) {
  std::vector<char> want(count * typeSize(t) + 1);
  fillOrigin(want.data(), count, t, r, first);
  return memcmp(want.data(), p, count * typeSize(t)) == 0;
}

Result broadcast(loomComm_t comm, int rank, int /*n*/, const Case& c) {
  std::string what = describe("broadcast", c);
  size_t es = typeSize(c.t);
  std::vector<char> in(c.count * es + 1), out(c.count * es + 1);
  if (rank == c.root) fillOrigin(in.data(), c.count, c.t, c.root, 0);
  char* dst = c.inPlace ? in.data() : out.data();
  CALL(loomBroadcast(in.data(), dst, c.count, c.t, c.root, comm, nullptr));
  CASE_CHECK(sameOrigin(dst, c.count, c.t, c.root, 0), "wrong data");
  return "";
}

Result allGather(loomComm_t comm, int rank, int n, const Case& c) {
  std::string what = describe("allgather", c);
  size_t es = typeSize(c.t);
  std::vector<char> in(c.count * es + 1), out(c.count * n * es + 1);
  char* src = c.inPlace ? out.data() + rank * c.count * es : in.data();
  fillOrigin(src, c.count, c.t, rank, 0);
  CALL(loomAllGather(src, out.data(), c.count, c.t, comm, nullptr));
  for (int j = 0; j < n; ++j)
    CASE_CHECK(sameOrigin(out.data() + j * c.count * es, c.count, c.t, j, 0),
               "block %d is wrong", j);
  return "";
}

Result alltoall(loomComm_t comm, int rank, int n, const Case& c) {
  std::string what = describe("alltoall", c);
  size_t es = typeSize(c.t);
  std::vector<char> in(c.count * n * es + 1), out(c.count * n * es + 1);
  // Block j of rank r: origin(r, j*count + i); it lands in block r of rank j.
  fillOrigin(in.data(), c.count * n, c.t, rank, 0);
  char* dst = c.inPlace ? in.data() : out.data();
  CALL(loomAlltoAll(in.data(), dst, c.count, c.t, comm, nullptr));
  for (int j = 0; j < n; ++j)
    CASE_CHECK(sameOrigin(dst + j * c.count * es, c.count, c.t, j, rank * c.count),
               "block from rank %d is wrong", j);
  return "";
}

// Skewed counts: rank s sends (s + 2d + base) % 4 * unit elements to rank d, displaced with gaps.
Result alltoallv(loomComm_t comm, int rank, int n, const Case& c) {
  std::string what = describe("alltoallv", c);
  size_t es = typeSize(c.t);
  auto cnt = [&](int s, int d) { return uint64_t((s + 2 * d + c.count) % 4) * (c.count + 1); };
  std::vector<size_t> sc(n), sd(n), rc(n), rd(n);
  size_t inTotal = 0, outTotal = 0;
  for (int j = 0; j < n; ++j) {
    sc[j] = cnt(rank, j), sd[j] = inTotal, inTotal += sc[j] + 1;  // +1: a gap
    rc[j] = cnt(j, rank), rd[j] = outTotal, outTotal += rc[j] + 2;
  }
  std::vector<char> in(inTotal * es + 1), out(outTotal * es + 1);
  for (int j = 0; j < n; ++j) fillOrigin(in.data() + sd[j] * es, sc[j], c.t, rank, j * 1000);
  CALL(loomAlltoAllv(in.data(), sc.data(), sd.data(), out.data(), rc.data(), rd.data(), c.t,
                     comm, nullptr));
  for (int j = 0; j < n; ++j)
    CASE_CHECK(sameOrigin(out.data() + rd[j] * es, rc[j], c.t, j, rank * 1000),
               "block from rank %d is wrong", j);
  return "";
}

// A group where every rank sends to the next two ranks and receives from the previous two,
// receives posted before sends on odd ranks (any order must work).
Result sendRecv(loomComm_t comm, int rank, int n, const Case& c) {
  std::string what = describe("sendrecv", c);
  size_t es = typeSize(c.t);
  int hops = std::min(2, n - 1);
  std::vector<std::vector<char>> outBufs(hops), inBufs(hops);
  for (int h = 0; h < hops; ++h) {
    outBufs[h].resize(c.count * es + 1);
    inBufs[h].resize(c.count * es + 1);
    fillOrigin(outBufs[h].data(), c.count, c.t, rank, h * 100);
  }
  CALL(loomGroupStart());
  for (int k = 0; k < 2 * hops; ++k) {
    bool sendFirst = rank % 2 == 0;
    int h = k % hops;
    bool doSend = (k < hops) == sendFirst;
    if (doSend)
      CALL(loomSend(outBufs[h].data(), c.count, c.t, (rank + 1 + h) % n, comm, nullptr));
    else
      CALL(loomRecv(inBufs[h].data(), c.count, c.t, (rank - 1 - h + 2 * n) % n, comm, nullptr));
  }
  CALL(loomGroupEnd());
  for (int h = 0; h < hops; ++h)
    CASE_CHECK(sameOrigin(inBufs[h].data(), c.count, c.t, (rank - 1 - h + 2 * n) % n, h * 100),
               "message from %d hops back is wrong", h + 1);
  return "";
}

using CaseFn = Result (*)(loomComm_t, int, int, const Case&);

// Runs the whole matrix in one set of ranks; returns the rank's exit code.
int runMatrix(RankContext& ctx, const char* transport, bool large) {
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.transport = transport;
  config.timeoutMs = 60000;
  loomComm_t comm = nullptr;
  RANK_LOOM(initComm(ctx, &comm, &config));
  int n = ctx.nranks(), rank = ctx.rank();
  std::vector<uint64_t> counts = {0, 1, 7, 1001};
  std::vector<Case> cases;
  const std::pair<const char*, CaseFn> reductions[] = {
      {"allreduce", allReduce}, {"reduce", reduce}, {"reducescatter", reduceScatter}};
  const std::pair<const char*, CaseFn> movements[] = {
      {"broadcast", broadcast}, {"allgather", allGather}, {"alltoall", alltoall},
      {"alltoallv", alltoallv}, {"sendrecv", sendRecv}};
  int failures = 0;
  auto run = [&](CaseFn fn, const Case& c) {
    Result r = fn(comm, rank, n, c);
    if (!r.empty()) {
      fprintf(stderr, "rank %d: %s\n", rank, r.c_str());
      ++failures;
    }
  };
  if (!large) {
    for (auto t : kAllTypes)
      for (uint64_t count : counts)
        for (bool inPlace : {false, true}) {
          for (auto& [name, fn] : reductions)
            for (auto op : kAllOps) run(fn, {t, op, count, inPlace, int(count % n)});
          for (auto& [name, fn] : movements) run(fn, {t, loomSum, count, inPlace, n - 1});
        }
  } else {
    // 64 MiB buffers (the largest buffer of the call), fp32 sum.
    uint64_t big = (64ull << 20) / 4;
    for (bool inPlace : {false, true}) {
      run(allReduce, {loomFloat32, loomSum, big, inPlace, 0});
      run(reduceScatter, {loomFloat32, loomSum, big / n, inPlace, 0});
      run(allGather, {loomFloat32, loomSum, big / n, inPlace, 0});
      run(broadcast, {loomFloat32, loomSum, big, inPlace, n / 2});
      run(reduce, {loomFloat32, loomSum, big, inPlace, n - 1});
      run(alltoall, {loomFloat32, loomSum, big / n, inPlace, 0});
    }
  }
  RANK_LOOM(loomCommDestroy(comm));
  return failures == 0 ? 0 : 1;
}

class Collectives : public ::testing::TestWithParam<RankSet> {};

TEST_P(Collectives, EveryTypeOpAndSmallCount) {
  auto p = GetParam();
  RankSetEnvironment environment(p);
  auto results = runRanks(p.nranks, [&](RankContext& ctx) {
    return runMatrix(ctx, p.transport, false);
  }, ForkOptions::timeout(240));
  EXPECT_EQ(describeFailures(results), "");
}

TEST_P(Collectives, SixtyFourMiB) {
  auto p = GetParam();
  if (!runsHeavyCases(p)) GTEST_SKIP() << "64 MiB runs over tcp at 2 and 3 ranks, over UCX at 2 (test time)";
  RankSetEnvironment environment(p);
  auto results = runRanks(p.nranks, [&](RankContext& ctx) {
    return runMatrix(ctx, p.transport, true);
  }, ForkOptions::timeout(240));
  EXPECT_EQ(describeFailures(results), "");
}

// A loop of calls on the same buffers (what the communicator runs again without choosing and
// resolving it: Comm::RepeatCall) sees each call's new data, and a call that differs from the
// last in one respect (op, in place, count, collective) runs as itself, not as the last one.
TEST_P(Collectives, RepeatedCallsOnTheSameBuffers) {
  auto p = GetParam();
  RankSetEnvironment environment(p);
  auto results = runRanks(p.nranks, [&](RankContext& ctx) {
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.transport = p.transport;
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm, &config));
    const int n = p.nranks, r = ctx.rank();
    const size_t count = 1001;
    std::vector<float> in(n * count), out(n * count);
    for (int iter = 0; iter < 12; ++iter) {
      const int kind = iter % 3;  // sum, max, avg in place
      const loomRedOp_t op = kind == 1 ? loomMax : kind == 2 ? loomAvg : loomSum;
      for (int again = 0; again < 3; ++again) {
        // The same call with new data, then in place instead of out of place (or back).
        float* dst = (kind == 2) != (again == 2) ? in.data() : out.data();
        // Small integers: every sum, max and average is exact in float.
        const int seed = iter * 3 + again;
        for (size_t i = 0; i < count; ++i) in[i] = float((seed + int(i) + r) % 64);
        std::vector<float> want(count);
        for (size_t i = 0; i < count; ++i) {
          float sum = 0, max = 0;
          for (int q = 0; q < n; ++q) {
            const float v = float((seed + int(i) + q) % 64);
            sum += v, max = std::max(max, v);
          }
          want[i] = op == loomMax ? max : op == loomAvg ? sum / float(n) : sum;
        }
        RANK_LOOM(loomAllReduce(in.data(), dst, count, loomFloat32, op, comm, nullptr));
        for (size_t i = 0; i < count; ++i)
          RANK_CHECK(dst[i] == want[i], "iteration %d.%d, element %zu: %g, expected %g", iter,
                     again, i, double(dst[i]), double(want[i]));
      }
      // The same buffers, another collective, then another count.
      for (size_t c : {count - iter, count - iter - 1}) {
        for (size_t i = 0; i < count; ++i) in[i] = float(r * 1000 + iter + int(i % 7));
        std::fill(out.begin(), out.end(), -1.0f);
        RANK_LOOM(loomAllGather(in.data(), out.data(), c, loomFloat32, comm, nullptr));
        for (size_t i = 0; i < out.size(); ++i) {
          const size_t q = i / c;
          const float want = q < size_t(n) ? float(int(q) * 1000 + iter + int(i % c % 7)) : -1;
          RANK_CHECK(out[i] == want, "allgather of %zu, iteration %d, element %zu: %g, expected %g",
                     c, iter, i, double(out[i]), double(want));
        }
      }
    }
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(240));
  EXPECT_EQ(describeFailures(results), "");
}

// Open descriptors and resident pages of this process.
int openDescriptors() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

size_t residentBytes() {
  long pages = 0, resident = 0;
  if (FILE* f = fopen("/proc/self/statm", "r")) {
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    fclose(f);
  }
  return size_t(resident) * size_t(sysconf(_SC_PAGESIZE));
}

// The soak's communicators: the tuner's choice, and variant k forcing every collective's k-th
// algorithm (modulo their number), over shm; the tuner's choice and the first variants over tcp.
std::vector<std::pair<std::string, const char*>> soakVariants() {
  std::vector<std::pair<std::string, const char*>> v = {{"", "shm"}, {"", "tcp"}};
  size_t most = 0;
  for (int c = 0; c < int(collectives::Collective::SendRecv); ++c)
    most = std::max(most, collectives::builderNames(collectives::Collective(c)).size());
  for (size_t k = 0; k < most; ++k) {
    std::string algos;
    for (int c = 0; c < int(collectives::Collective::SendRecv); ++c) {
      auto names = collectives::builderNames(collectives::Collective(c));
      algos += (algos.empty() ? "" : ",") +
               std::string(collectives::collectiveName(collectives::Collective(c))) + "=" +
               std::string(names[k % names.size()]);
    }
    v.push_back({algos, "shm"});
    if (k < 3) v.push_back({algos, "tcp"});
  }
  return v;
}

// 20,000 calls chosen at random (the same sequence on every rank): every collective, type, op,
// in place or not, counts from 0 to 64 Ki elements, on communicators that force each algorithm
// in turn over shm and tcp. Every result is exact; a forced algorithm may refuse a call it
// cannot serve (on every rank alike). Sampled every 1,000 calls, the open descriptors must not
// grow from the 2,000th call on (connections open at first use), and the resident memory,
// once the plan caches are full, not grow by more than 8 MiB.
TEST(Soak, RandomCallsStayExactWithMemoryAndDescriptorsFlat) {
  constexpr int kRanks = 4, kCalls = 20000, kSample = 1000;
  TempDir cache("soak-cache");
  auto results = runRanks(kRanks, [&](RankContext& ctx) {
    const int n = ctx.nranks(), rank = ctx.rank();
    // The links' default figures, not the probe's nor those other tests cached: which algorithm
    // the tuned communicators run for a shape, and so which connections it opens, then depends
    // on the calls alone, not on the machine's load while a probe measured.
    setenv("LOOM_TOPO_MEASURE", "0", 1);
    setenv("LOOM_CACHE_DIR", cache.path().c_str(), 1);
    params::reloadFromEnvironment();
    std::vector<loomComm_t> comms;
    std::vector<std::string> names;
    for (auto& [algos, transport] : soakVariants()) {
      loomConfig_t config = LOOM_CONFIG_INITIALIZER;
      config.transport = transport;
      config.algorithms = algos.empty() ? nullptr : algos.c_str();
      config.timeoutMs = 60000;
      loomComm_t comm = nullptr;
      RANK_LOOM(initComm(ctx, &comm, &config));
      comms.push_back(comm);
      names.push_back(std::string(transport) + " " + (algos.empty() ? "tuned" : algos));
    }
    const CaseFn fns[] = {allReduce, reduce,   reduceScatter, broadcast,
                          allGather, alltoall, alltoallv,     sendRecv};
    const bool reduces[] = {true, true, true, false, false, false, false, false};
    // A communicator opens its connections at first use, each algorithm to its peers and the
    // lanes by the size, a rooted collective's tree by its root: first every collective at
    // every power of two of bytes the calls below reach and every root on each, so that what
    // is open after is what must stay.
    int refused = 0;
    for (size_t which = 0; which < comms.size(); ++which)
      for (size_t fn = 0; fn < std::size(fns); ++fn)
        for (uint64_t bytes = 1; bytes <= 65535 * 8; bytes *= 2)
          for (int root = 0; root < (fn == 1 || fn == 3 ? n : 1); ++root) {
          Result r = fns[fn](comms[which], rank, n, {loomUint8, loomSum, bytes, false, root});
          refused += r.find("cannot serve this call") != std::string::npos;
          RANK_CHECK(r.empty() || r.find("cannot serve this call") != std::string::npos,
                     "warm-up on %s: %s", names[which].c_str(), r.c_str());
        }
    const int fdsAtStart = openDescriptors();
    malloc_trim(0);
    // Connections a call of a shape the warm-up missed may still open (a lane or a peer): a
    // few, and none in the second half.
    constexpr int kMostLazy = 16;
    constexpr int kSettledAt = kCalls / 2;
    int fdsSettled = -1;
    // Each communicator keeps up to 256 prepared plans (comm/call_memo.h), a few KiB each:
    // random calls fill those caches in about 12,000 calls, after which memory stays flat.
    constexpr int kCallsToFill = 12000;
    constexpr size_t kMostCached = size_t(96) << 20;
    size_t rssFilled = 0;
    const size_t rssAtStart = residentBytes();
    std::mt19937_64 random(20261206);
    for (int i = 0; i < kCalls; ++i) {
      const size_t which = random() % comms.size(), fn = random() % std::size(fns);
      Case c;
      c.t = kAllTypes[random() % std::size(kAllTypes)];
      c.op = reduces[fn] ? kAllOps[random() % std::size(kAllOps)] : loomSum;
      const uint64_t shape = random() % 16;
      c.count = shape == 0 ? 0 : shape < 12 ? random() % 512 : shape < 15 ? random() % 8192
                                                                          : random() % 65536;
      c.inPlace = random() % 2 == 0;
      c.root = int(random() % n);
      Result r = fns[fn](comms[which], rank, n, c);
      if (r.find("cannot serve this call") != std::string::npos) {
        ++refused;
        continue;
      }
      RANK_CHECK(r.empty(), "call %d on %s: %s", i, names[which].c_str(), r.c_str());
      if ((i + 1) % kSample != 0) continue;
      const int fds = openDescriptors();
      malloc_trim(0);  // what the heap holds free is not the process's
      const size_t rss = residentBytes();
      if (i + 1 == kSettledAt) fdsSettled = fds;
      if (i + 1 == kCallsToFill) rssFilled = rss;
      RANK_CHECK(fdsSettled < 0 || fds <= fdsSettled,
                 "%d descriptors open after %d calls, %d after %d", fds, i + 1, fdsSettled,
                 kSettledAt);
      RANK_CHECK(fds <= fdsAtStart + kMostLazy, "%d descriptors open after %d calls, %d before",
                 fds, i + 1, fdsAtStart);
      RANK_CHECK(rss < rssAtStart + kMostCached, "resident memory grew from %zu to %zu KiB in %d calls",
                 rssAtStart >> 10, rss >> 10, i + 1);
      RANK_CHECK(rssFilled == 0 || rss < rssFilled + (8u << 20),
                 "resident memory grew from %zu KiB after %d calls to %zu KiB after %d",
                 rssFilled >> 10, kCallsToFill, rss >> 10, i + 1);
      if (rank == 0 && i + 1 == kCalls)
        fprintf(stderr, "soak: %d calls on %zu communicators, %d refused by a forced "
                        "algorithm; descriptors %d after the warm-up, %d from call %d on; "
                        "resident %zu KiB after the warm-up, %zu after %d calls, %zu after %d\n",
                kCalls, comms.size(), refused, fdsAtStart, fds, kSettledAt, rssAtStart >> 10,
                rssFilled >> 10, kCallsToFill, rss >> 10, kCalls);
    }
    RANK_CHECK(refused < kCalls / 4, "%d of %d calls refused", refused, kCalls);
    for (loomComm_t comm : comms) RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(280));
  EXPECT_EQ(describeFailures(results), "");
}

INSTANTIATE_TEST_SUITE_P(
    Ranks, Collectives,
    ::testing::Values(RankSet{1, "shm"}, RankSet{2, "shm"}, RankSet{3, "shm"}, RankSet{4, "shm"},
                      RankSet{8, "shm"}, RankSet{2, "tcp"}, RankSet{3, "tcp"}, RankSet{4, "tcp"},
                      RankSet{8, "tcp"}, RankSet{1, "ucx"}, LOOM_UCX_RANK_SETS),
    rankSetName);

}  // namespace
}  // namespace loom::testing
