// The UCX transport beyond the collective suites' UCX rank sets: what loom-info says of UCX,
// loomMemAlloc buffers (registered once per segment, released by loomMemFree) moving over it,
// ranks with different chunk sizes, a bad chunk size refused, LOOM_UCX_PEER_ERRORS=0, and a
// peer that closed after sending.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>
#include <vector>

#include "base/params.h"
#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"
#include "topology/probe.h"

namespace loom::testing {
namespace {

#ifdef LOOM_INFO_BINARY
// loom-info lists UCX with its transports (this machine has at least TCP on loopback and
// shared memory) and the memory types its context moves (host at least), and says what auto
// carries the links between hosts over.
TEST(UcxInfo, LoomInfoListsUcxTransportsAndMemoryTypes) {
  FILE* p = popen(LOOM_INFO_BINARY " 2>&1", "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  ASSERT_EQ(pclose(p), 0) << out;
  EXPECT_NE(out.find("transports: shm (POSIX shared memory + process_vm_readv), tcp, ucx\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("ucx: UCX 1."), std::string::npos) << out;
  EXPECT_NE(out.find(" tcp/lo"), std::string::npos) << out;
  EXPECT_NE(out.find(" posix/memory"), std::string::npos) << out;
  EXPECT_NE(out.find("ucx memory types: host"), std::string::npos) << out;
  const std::vector<std::string> rdma = topology::rdmaDevices();
  EXPECT_NE(out.find("links between hosts under LOOM_TRANSPORT=auto: ucx where every host has "
                     "an RDMA device (this host: " +
                     (rdma.empty() ? std::string("none") : rdma.front()) +
                     "), else tcp, unless the network link's measured or cached figures make the "
                     "other at least 20% cheaper\n"),
            std::string::npos)
      << out;
}
#endif

// An allreduce of `count` floats from and into buf (in place), checked exactly.
int allReduceInPlace(loomComm_t comm, float* buf, size_t count, int rank, int n, int round) {
  for (size_t i = 0; i < count; ++i) buf[i] = float((rank + int(i) + round) % 32);
  RANK_LOOM(loomAllReduce(buf, buf, count, loomFloat32, loomSum, comm, nullptr));
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int q = 0; q < n; ++q) want += float((q + int(i) + round) % 32);
    RANK_CHECK(buf[i] == want, "round %d element %zu: %g, expected %g", round, i,
               double(buf[i]), double(want));
  }
  return 0;
}

// A communicator over UCX whose chunks are `chunk` bytes (LOOM_UCX_CHUNK_BYTES) on this rank.
loomResult_t initUcxComm(RankContext& ctx, const char* chunk, loomComm_t* comm) {
  setenv("LOOM_UCX_CHUNK_BYTES", chunk, 1);
  params::reloadFromEnvironment();
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.transport = "ucx";
  config.timeoutMs = 30000;
  return initComm(ctx, comm, &config);
}

// Buffers from loomMemAlloc (mapped with ucp_mem_map at first use) give exact results, and so
// do new ones after loomMemFree released the old (whose pages may come back at the same
// address: a stale registration would then be used); the communicator outlives them all.
TEST(UcxMemory, LoomMemAllocBuffersAcrossFrees) {
  const int n = 3;
  auto results = runRanks(n, [&](RankContext& ctx) {
    loomComm_t comm = nullptr;
    RANK_LOOM(initUcxComm(ctx, "256K", &comm));  // several chunks, rendezvous each
    const size_t count = (size_t(3) << 20) / sizeof(float) + 17;
    for (int round = 0; round < 4; ++round) {
      void* p = nullptr;
      RANK_LOOM(loomMemAlloc(&p, count * sizeof(float)));
      if (allReduceInPlace(comm, static_cast<float*>(p), count, ctx.rank(), n, round) != 0)
        return 1;
      RANK_LOOM(loomMemFree(p));
    }
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(120));
  EXPECT_EQ(describeFailures(results), "");
}

// Ranks configured with different chunk sizes agree on the smaller for their pair.
TEST(UcxChunks, RanksWithDifferentChunkSizesAgree) {
  const int n = 3;
  auto results = runRanks(n, [&](RankContext& ctx) {
    const char* chunk[] = {"64K", "1M", "192K"};
    loomComm_t comm = nullptr;
    RANK_LOOM(initUcxComm(ctx, chunk[ctx.rank()], &comm));
    std::vector<float> buf((size_t(5) << 20) / sizeof(float) + 3);
    if (allReduceInPlace(comm, buf.data(), buf.size(), ctx.rank(), n, 0) != 0) return 1;
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(120));
  EXPECT_EQ(describeFailures(results), "");
}

// LOOM_UCX_PEER_ERRORS=0: endpoints within the host go without UCX's peer error handling, so
// UCX may move the rendezvous chunks by CMA; results stay exact over UCX's shared memory, and
// the communicator closes cleanly.
TEST(UcxPeerErrors, OffWithinAHostResultsAreExact) {
  const int n = 3;
  setenv("UCX_TLS", "sm", 1);
  setenv("LOOM_UCX_PEER_ERRORS", "0", 1);
  auto results = runRanks(n, [&](RankContext& ctx) {
    loomComm_t comm = nullptr;
    RANK_LOOM(initUcxComm(ctx, "1M", &comm));
    std::vector<float> buf((size_t(5) << 20) / sizeof(float) + 3);
    for (int round = 0; round < 2; ++round)
      if (allReduceInPlace(comm, buf.data(), buf.size(), ctx.rank(), n, round) != 0) return 1;
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(120));
  unsetenv("LOOM_UCX_PEER_ERRORS");
  unsetenv("UCX_TLS");
  params::reloadFromEnvironment();
  EXPECT_EQ(describeFailures(results), "");
}

// A healthy peer that closed its endpoints (it sent its part and destroyed its communicator)
// leaves a rank that still receives what it sent with that data, not an error: over UCX's tcp
// with peer error handling its close ends the socket and UCX fails the endpoint, but the bytes
// came first. Rank 1 waits on rank 0 while rank 2 sends, closes and stays alive, so that rank
// 1's worker takes rank 2's message and then the end of its socket before rank 1 asks for that
// message. (Rank 2, not 0: the bootstrap's root, rank 0, waits for the others' leave.)
TEST(UcxPeerClose, AReceiveAfterThePeerDestroyedItsCommunicatorTakesWhatItSent) {
  const int n = 3;
  // cma beside tcp: the endpoints within this host then ask for UCX's peer error handling too
  // (UcxConnection::open), as those to other hosts do; the messages still go over tcp.
  setenv("UCX_TLS", "tcp,cma", 1);
  auto results = runRanks(n, [&](RankContext& ctx) {
    loomComm_t comm = nullptr;
    RANK_LOOM(initUcxComm(ctx, "1M", &comm));
    std::vector<float> connect(64);  // every endpoint up first
    if (allReduceInPlace(comm, connect.data(), connect.size(), ctx.rank(), n, 0) != 0) return 1;
    // Inline in its header message, eager: a send finishes without its receiver.
    std::vector<int32_t> message(1024);
    auto value = [](int from, size_t i) { return int32_t(i * 7 + 1 + size_t(from) * 100000); };
    if (ctx.rank() != 1) {
      if (ctx.rank() == 0) usleep(500 * 1000);
      for (size_t i = 0; i < message.size(); ++i) message[i] = value(ctx.rank(), i);
      RANK_LOOM(loomSend(message.data(), message.size(), loomInt32, 1, comm, nullptr));
      RANK_LOOM(loomCommDestroy(comm));
      if (ctx.rank() == 2) usleep(1500 * 1000);
      return 0;
    }
    for (int from : {0, 2}) {
      RANK_LOOM(loomRecv(message.data(), message.size(), loomInt32, from, comm, nullptr));
      for (size_t i = 0; i < message.size(); ++i)
        RANK_CHECK(message[i] == value(from, i), "from rank %d: [%zu] = %d", from, i, message[i]);
    }
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(60));
  unsetenv("UCX_TLS");
  EXPECT_EQ(describeFailures(results), "");
}

// A chunk size out of range fails the communicator's creation with a message that says why.
TEST(UcxChunks, ATooSmallChunkIsRefused) {
  auto results = runRanks(1, [&](RankContext& ctx) {
    loomComm_t comm = nullptr;
    const loomResult_t rc = initUcxComm(ctx, "16", &comm);
    RANK_CHECK(rc == loomInvalidArgument, "got %s", loomGetErrorString(rc));
    const std::string msg = loomGetLastError(nullptr);
    RANK_CHECK(msg.find("ucx: chunks of 16 bytes") != std::string::npos, "message: %s",
               msg.c_str());
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

}  // namespace
}  // namespace loom::testing
