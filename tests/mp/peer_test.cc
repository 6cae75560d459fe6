// The peer-read algorithms (collectives/peer.cc), forced for every collective they serve and
// run by forked ranks of one host, checked bit for bit: over buffers from loomMemAlloc (peers
// read them through mappings), over plain heap buffers (process_vm_readv) and with half the
// ranks on each, in place and out of place, every dtype and op for the reductions. The arena's
// fault tests (a rank killed at a barrier, two hosts refused) run peer too (direct_test.cc).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "base/params.h"
#include "base/status.h"
#include "comm/comm.h"
#include "comm/options.h"
#include "loom/loom.h"
#include "topology/topology.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"
#include "tests/support/temp_dir.h"
#include "tests/support/values.h"
#include "tuner/tuner.h"
#include "tuner/uniform_topology.h"

namespace loom::testing {
namespace {

enum class Memory { Plain, Loom, Mixed };
const char* memoryName(Memory m) {
  return m == Memory::Plain ? "plain" : m == Memory::Loom ? "loomMemAlloc" : "mixed";
}

// bytes (+1, so that zero-sized calls still get a valid pointer) from loomMemAlloc or the heap.
class Buffer {
 public:
  Buffer(size_t bytes, bool loom) : loom_(loom) {
    if (loom_) {
      loomMemAlloc(&data_, bytes + 1);
    } else {
      data_ = calloc(bytes + 1, 1);
    }
  }
  ~Buffer() {
    if (loom_) {
      loomMemFree(data_);
    } else {
      free(data_);
    }
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  char* data() const { return static_cast<char*>(data_); }

 private:
  bool loom_;
  void* data_ = nullptr;
};

// Byte i of the block that rank `from` gives rank `to` (allgather: to = 0), whatever the dtype.
char blockByte(int from, int to, size_t i) { return char((from * 131 + to * 17 + i * 7) & 0xff); }

class Case {
 public:
  Case(loomComm_t comm, int rank, int n, bool loom, bool inPlace)
      : comm_(comm), rank_(rank), n_(n), loom_(loom), inPlace_(inPlace) {}

  const std::string& failures() const { return failures_; }

  void allReduce(loomDataType_t t, loomRedOp_t op, uint64_t count) {
    const size_t es = typeSize(t);
    Buffer in(count * es, loom_), out(count * es, loom_);
    fillInput(in.data(), count, op, t, n_, rank_);
    char* dst = inPlace_ ? in.data() : out.data();
    if (!ok("allreduce", t, count, loomAllReduce(in.data(), dst, count, t, op, comm_, nullptr)))
      return;
    expectReduced("allreduce", t, op, count, dst, 0);
  }

  void reduceScatter(loomDataType_t t, uint64_t count) {
    const size_t es = typeSize(t);
    Buffer in(count * n_ * es, loom_), out(count * es, loom_);
    fillInput(in.data(), count * n_, loomSum, t, n_, rank_);
    char* dst = inPlace_ ? in.data() + rank_ * count * es : out.data();
    if (!ok("reducescatter", t, count,
            loomReduceScatter(in.data(), dst, count, t, loomSum, comm_, nullptr)))
      return;
    expectReduced("reducescatter", t, loomSum, count, dst, rank_ * count);
  }

  void reduce(loomDataType_t t, loomRedOp_t op, uint64_t count, int root) {
    const size_t es = typeSize(t);
    Buffer in(count * es, loom_), out(count * es, loom_);
    fillInput(in.data(), count, op, t, n_, rank_);
    char* dst = inPlace_ ? in.data() : out.data();
    if (!ok("reduce", t, count, loomReduce(in.data(), dst, count, t, op, root, comm_, nullptr)))
      return;
    if (rank_ == root) expectReduced("reduce", t, op, count, dst, 0);
  }

  void allGather(loomDataType_t t, uint64_t count) {
    const size_t block = count * typeSize(t);
    Buffer in(block, loom_), out(block * n_, loom_);
    char* src = inPlace_ ? out.data() + rank_ * block : in.data();
    for (size_t i = 0; i < block; ++i) src[i] = blockByte(rank_, 0, i);
    if (!ok("allgather", t, count, loomAllGather(src, out.data(), count, t, comm_, nullptr)))
      return;
    for (int r = 0; r < n_; ++r)
      expectBlock("allgather", t, count, out.data() + r * block, r, 0, block);
  }

  void alltoAll(loomDataType_t t, uint64_t count) {
    const size_t block = count * typeSize(t);
    Buffer in(block * n_, loom_), out(block * n_, loom_);
    for (int to = 0; to < n_; ++to)
      for (size_t i = 0; i < block; ++i) in.data()[to * block + i] = blockByte(rank_, to, i);
    char* dst = inPlace_ ? in.data() : out.data();
    if (!ok("alltoall", t, count, loomAlltoAll(in.data(), dst, count, t, comm_, nullptr))) return;
    for (int from = 0; from < n_; ++from)
      expectBlock("alltoall", t, count, dst + from * block, from, rank_, block);
  }

  void broadcast(loomDataType_t t, uint64_t count, int root) {
    const size_t bytes = count * typeSize(t);
    Buffer in(bytes, loom_), out(bytes, loom_);
    for (size_t i = 0; i < bytes; ++i) in.data()[i] = blockByte(rank_, 0, i);
    char* dst = inPlace_ ? in.data() : out.data();
    if (!ok("broadcast", t, count, loomBroadcast(in.data(), dst, count, t, root, comm_, nullptr)))
      return;
    expectBlock("broadcast", t, count, dst, root, 0, bytes);
  }

  void gather(loomDataType_t t, uint64_t count, int root) {
    const size_t block = count * typeSize(t);
    Buffer in(block, loom_), out(block * n_, loom_);
    char* src = inPlace_ ? out.data() + rank_ * block : in.data();
    for (size_t i = 0; i < block; ++i) src[i] = blockByte(rank_, root, i);
    if (!ok("gather", t, count, loomGather(src, out.data(), count, t, root, comm_, nullptr)))
      return;
    for (int r = 0; r < n_ && rank_ == root; ++r)
      expectBlock("gather", t, count, out.data() + r * block, r, root, block);
  }

  void scatter(loomDataType_t t, uint64_t count, int root) {
    const size_t block = count * typeSize(t);
    Buffer in(block * n_, loom_), out(block, loom_);
    for (int to = 0; to < n_; ++to)
      for (size_t i = 0; i < block; ++i) in.data()[to * block + i] = blockByte(rank_, to, i);
    char* dst = inPlace_ ? in.data() + rank_ * block : out.data();
    if (!ok("scatter", t, count, loomScatter(in.data(), dst, count, t, root, comm_, nullptr)))
      return;
    expectBlock("scatter", t, count, dst, root, rank_, block);
  }

 private:
  std::string what(const char* coll, loomDataType_t t, uint64_t count) const {
    return strprintf("%s %s count %llu %s", coll, typeName(t), (unsigned long long)count,
                     inPlace_ ? "in place" : "out of place");
  }

  bool ok(const char* coll, loomDataType_t t, uint64_t count, loomResult_t rc) {
    if (rc == loomSuccess) return true;
    failures_ += what(coll, t, count) + ": " + loomGetLastError(comm_) + "\n";
    return false;
  }

  void expectReduced(const char* coll, loomDataType_t t, loomRedOp_t op, uint64_t count,
                     const char* buf, uint64_t first) {
    uint64_t firstBad = 0;
    const uint64_t bad = countReductionErrors(buf, count, op, t, n_, first, &firstBad);
    if (bad > 0)
      failures_ += what(coll, t, count) + strprintf(" %s: %llu wrong elements, the first at %llu\n",
                                                    opNameOf(op), (unsigned long long)bad,
                                                    (unsigned long long)firstBad);
  }

  void expectBlock(const char* coll, loomDataType_t t, uint64_t count, const char* got, int from,
                   int to, size_t bytes) {
    for (size_t i = 0; i < bytes; ++i) {
      if (got[i] == blockByte(from, to, i)) continue;
      failures_ +=
          what(coll, t, count) + strprintf(": byte %zu of rank %d's block is wrong\n", i, from);
      return;
    }
  }

  loomComm_t comm_;
  int rank_, n_;
  bool loom_, inPlace_;
  std::string failures_;
};

const uint64_t kCounts[] = {0, 1, 7, 1001, 65537, uint64_t(1) << 18};

class PeerReads : public ::testing::TestWithParam<int> {};

TEST_P(PeerReads, EveryCollectiveOverEveryKindOfMemory) {
  const int n = GetParam();
  const auto results = runRanks(
      n,
      [&](RankContext& ctx) {
        loomConfig_t config = LOOM_CONFIG_INITIALIZER;
        config.algorithms =
            "allreduce=peer,reducescatter=peer,allgather=peer,alltoall=peer,broadcast=peer,"
            "reduce=peer,gather=peer,scatter=peer";
        config.timeoutMs = 60000;
        loomComm_t comm = nullptr;
        RANK_LOOM(initComm(ctx, &comm, &config));
        int failures = 0;
        const int rank = ctx.rank();
        for (Memory m : {Memory::Loom, Memory::Plain, Memory::Mixed}) {
          const bool loom = m == Memory::Loom || (m == Memory::Mixed && rank % 2 == 0);
          for (bool inPlace : {false, true}) {
            Case c(comm, rank, n, loom, inPlace);
            for (loomDataType_t t : kAllTypes) c.allReduce(t, loomSum, 1001);
            for (loomRedOp_t op : kAllOps) {
              c.allReduce(loomFloat32, op, 5000);
              c.reduce(loomBfloat16, op, 999, n - 1);
            }
            for (uint64_t count : kCounts) {
              c.allReduce(loomFloat32, loomSum, count);
              c.reduceScatter(loomInt32, count);
              c.allGather(loomFloat32, count);
              c.alltoAll(loomFloat16, count);
              c.broadcast(loomUint8, count, count % uint64_t(n));
              c.reduce(loomFloat64, loomMax, count, 0);
              c.gather(loomInt64, count, n - 1);
              c.scatter(loomUint8, count, int(count % uint64_t(n)));
            }
            if (!c.failures().empty()) {
              fprintf(stderr, "rank %d, %s memory:\n%s", rank, memoryName(m), c.failures().c_str());
              ++failures;
            }
          }
        }
        // After a failure the peers may be gone: abort rather than wait for them in destroy.
        RANK_LOOM(failures == 0 ? loomCommDestroy(comm) : loomCommAbort(comm));
        return failures == 0 ? 0 : 1;
      },
      ForkOptions::timeout(240));
  EXPECT_EQ(describeFailures(results), "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, PeerReads, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "x" + std::to_string(info.param); });

// Writes to `file` a one-host model of kRanks ranks on which reading plain memory through the
// kernel costs three copies, and checks that its tuner then runs a 4-rank alltoall of kCount
// floats per peer as `peer` only over loomMemAlloc buffers (so every such call asks the ranks).
constexpr int kRanks = 4;
constexpr uint64_t kCount = uint64_t(1) << 20;  // per peer: a 16 MiB alltoall of floats
void writePeerModel(const std::string& file) {
  topology::Topology topo = tuner::uniformTopology({1, kRanks});
  topology::HostCpu& cpu = topo.nodes[size_t(topo.hostNodes()[0])].cpu;
  cpu = {2, 8e9, 1e-7};
  cpu.peerReadCopies = 3;
  cpu.singleCopyOverhead = 2e-6;
  cpu.streamingCopies = 0.67;
  ASSERT_TRUE(topology::saveTopology(topo, file).isOk());
  // The test means something only where the answer changes the choice: check that first.
  {
    tuner::TunerConfig config;
    ASSERT_TRUE(readTuning(&config).isOk());
    tuner::Tuner tuner(topo, config);
    collectives::CollArgs a;
    a.settings() = tuner::callSettings(config.fixed, config.call, topo);
    a.coll = collectives::Collective::AlltoAll;
    a.nranks = kRanks;
    a.count = kCount;
    tuner::Decision d;
    ASSERT_TRUE(tuner.decide(a, &d).isOk());
    ASSERT_NE(d.whenMapped.builder, nullptr) << tuner::describe(d.choice);
    ASSERT_STREQ(d.whenMapped.builder->name, "peer");
    ASSERT_STRNE(d.choice.builder->name, "peer");
  }
}

// What a call of TheModelReadsPeersWhenEveryRanksBuffersAreMapped ran: peer reads or not, on
// buffers the ranks agreed are all mapped or not, and the ranks' votes so far.
struct PeerRun {
  bool peer = false, mapped = false;
  uint64_t votes = 0;
};

// Checks the calls' runs (one rank's) against the memory they ran on: peer exactly where the
// ranks agreed every buffer is mapped; on calls 0 and 3; never on plain, mixed or in-place
// buffers; back on loomMemAlloc buffers from some call on, and at every call after it; and
// "not all" answers skip asks: of the calls from inPlace + 2 to the one that ran peer again,
// every one could have asked, and fewer did.
int checkPeerRuns(const std::vector<PeerRun>& ran, const std::vector<Memory>& kinds,
                  size_t inPlace, size_t backAt) {
  for (size_t i = 0; i < ran.size(); ++i)
    RANK_CHECK(ran[i].peer == ran[i].mapped, "call %zu: %s on buffers %s mapped", i,
               ran[i].peer ? "peer" : "not peer", ran[i].mapped ? "agreed" : "not agreed");
  for (size_t i : {0, 3}) RANK_CHECK(ran[i].peer, "call %zu did not read peers", i);
  for (size_t i = 0; i < backAt; ++i)
    RANK_CHECK(!ran[i].peer || (kinds[i] == Memory::Loom && i != inPlace),
               "call %zu read peers on %s buffers", i, memoryName(kinds[i]));
  size_t first = backAt;
  while (first < ran.size() && !ran[first].peer) ++first;
  RANK_CHECK(first < ran.size(), "no call from %zu on read peers again", backAt);
  for (size_t i = first; i < ran.size(); ++i)
    RANK_CHECK(ran[i].peer, "call %zu did not read peers after call %zu did", i, first);
  const uint64_t asks = ran[first].votes - ran[inPlace + 1].votes;
  RANK_CHECK(asks >= 1 && asks < first - inPlace, "%llu asks in calls %zu to %zu",
             (unsigned long long)asks, inPlace + 2, first);
  return 0;
}

// With no algorithm forced, the model chooses peer reads for a large alltoall only when every
// rank's buffers are from loomMemAlloc, which the ranks find out together (a vote at a barrier
// of the host's ranks): on a model where reading plain memory through the kernel costs three
// copies, a call over loomMemAlloc buffers on every rank runs peer, one over plain or mixed
// buffers the other choice (and so does an alltoall in place, which runs on a heap copy of its
// input), and all ranks choose alike (else the call would not complete).
TEST(PeerMemory, TheModelReadsPeersWhenEveryRanksBuffersAreMapped) {
  TempDir dir("peer-model");
  std::filesystem::create_directories(dir.path());
  const std::string file = dir.path() + "/model.json";
  ASSERT_NO_FATAL_FAILURE(writePeerModel(file));
  // Call 4 runs in place, on a heap copy of its input: not mapped. Then plain buffers for a
  // while, and loomMemAlloc ones again: asks skipped after "not all" answers (below).
  constexpr size_t kInPlace = 4, kBackAt = 8;
  std::vector<Memory> kinds = {Memory::Loom,  Memory::Plain, Memory::Mixed, Memory::Loom,
                               Memory::Loom,  Memory::Plain, Memory::Plain, Memory::Plain};
  kinds.resize(kBackAt + 8, Memory::Loom);
  auto results = runRanks(kRanks, [&](RankContext& ctx) {
    setenv("LOOM_TOPO_FILE", file.c_str(), 1);
    params::reloadFromEnvironment();
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm));
    const int rank = ctx.rank();
    int failures = 0;
    std::vector<PeerRun> ran;
    for (size_t call = 0; call < kinds.size(); ++call) {
      const Memory m = kinds[call];
      Case c(comm, rank, kRanks, m == Memory::Loom || (m == Memory::Mixed && rank != 2),
             call == kInPlace);
      c.alltoAll(loomFloat32, kCount);
      if (!c.failures().empty()) {
        fprintf(stderr, "rank %d, %s memory:\n%s", rank, memoryName(m), c.failures().c_str());
        ++failures;
      }
      const char* algorithm = nullptr;
      RANK_LOOM(loomCommGetLastAlgorithm(comm, &algorithm));
      const Comm& state = commOf(comm);
      ran.push_back({std::string(algorithm).rfind("peer", 0) == 0, state.lastBuffersMapped(),
                     state.buffersAgreements()});
    }
    if (failures == 0) failures += checkPeerRuns(ran, kinds, kInPlace, kBackAt);
    RANK_LOOM(failures == 0 ? loomCommDestroy(comm) : loomCommAbort(comm));
    return failures == 0 ? 0 : 1;
  }, ForkOptions::timeout(120));
  ASSERT_EQ(describeFailures(results), "");
}

// A rank that fails while the ranks agree on their buffers reports the call it was making:
// one rank of four never calls, and the others time out in the agreement's barrier.
TEST(PeerMemory, AFailedAgreementNamesTheCall) {
  TempDir dir("peer-model");
  std::filesystem::create_directories(dir.path());
  const std::string file = dir.path() + "/model.json";
  ASSERT_NO_FATAL_FAILURE(writePeerModel(file));
  auto results = runRanks(kRanks, [&](RankContext& ctx) {
    setenv("LOOM_TOPO_FILE", file.c_str(), 1);
    params::reloadFromEnvironment();
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.timeoutMs = 1500;
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm, &config));
    if (ctx.rank() != kRanks - 1) {
      void *in = nullptr, *out = nullptr;
      RANK_LOOM(loomMemAlloc(&in, kRanks * kCount * sizeof(float)));
      RANK_LOOM(loomMemAlloc(&out, kRanks * kCount * sizeof(float)));
      loomResult_t rc = loomAlltoAll(in, out, kCount, loomFloat32, comm, nullptr);
      // A timeout, or the error of a rank that timed out first.
      RANK_CHECK(rc == loomTimeout || rc == loomRemoteError, "got %s", loomGetErrorString(rc));
      std::string msg = loomGetLastError(comm);
      RANK_CHECK(msg.find("alltoall #") != std::string::npos &&
                     msg.find("(buffer agreement)") != std::string::npos,
                 "message lacks the call: %s", msg.c_str());
      RANK_LOOM(loomMemFree(in));
      RANK_LOOM(loomMemFree(out));
    }
    ctx.allgather("");  // the last rank waits here, silent, until the others have timed out
    RANK_LOOM(loomCommAbort(comm));
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

TEST(PeerMemory, BadArgumentsAreClearErrors) {
  EXPECT_EQ(loomMemAlloc(nullptr, 16), loomInvalidArgument);
  EXPECT_NE(std::string(loomGetLastError(nullptr)).find("loomMemAlloc: ptr is NULL"),
            std::string::npos);
  int notOurs = 0;
  EXPECT_EQ(loomMemFree(&notOurs), loomInvalidArgument);
  EXPECT_NE(std::string(loomGetLastError(nullptr)).find("did not come from loomMemAlloc"),
            std::string::npos);
  EXPECT_EQ(loomMemFree(nullptr), loomSuccess);
  void* p = nullptr;
  ASSERT_EQ(loomMemAlloc(&p, 0), loomSuccess);  // a page, like malloc(0)'s unique pointer
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(static_cast<char*>(p)[0], 0);
  EXPECT_EQ(loomMemFree(p), loomSuccess);
}

}  // namespace
}  // namespace loom::testing
