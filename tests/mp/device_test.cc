// Stream-ordered collectives on device buffers (comm/stream_calls.h), on the emulated device
// (LOOM_TEST_DEVICE=cuda runs them on a GPU: perf/gpu-check.sh): every collective at 1 to 8
// ranks on two streams, groups, a chain on one stream that needs the earlier result, graph
// capture refused, a killed rank failing every stream's wait, and a host read of device memory
// faulting. Results are checked bit for bit after the streams are synchronised.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "base/params.h"
#include "base/status.h"
#include "loom/loom.h"
#include "loom/loom_device.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"
#include "tests/support/origin_blocks.h"
#include "tests/support/values.h"

namespace loom::testing {
namespace {

// The device the ranks use: LOOM_TEST_DEVICE (cuda on a GPU machine), else the emulated one.
void useDevice() {
  const char* want = getenv("LOOM_TEST_DEVICE");
  setenv("LOOM_DEVICE", want != nullptr && *want != '\0' ? want : "emulated", 1);
  params::reloadFromEnvironment();
}

bool emulated() { return strcmp(loomDeviceName(), "emulated") == 0; }

// A rank's device buffers and the checks to run once its streams have completed.
class Device {
 public:
  ~Device() {
    for (void* p : allocations_) loomDeviceFree(p);
  }
  // A device buffer holding `host` (bytes of it).
  char* copyOf(const void* host, size_t bytes) {
    void* p = nullptr;
    if (loomDeviceMalloc(&p, bytes) != loomSuccess) return nullptr;
    allocations_.push_back(p);
    loomDeviceMemcpy(p, host, bytes);
    return static_cast<char*>(p);
  }
  char* copyOf(const std::vector<char>& host) { return copyOf(host.data(), host.size()); }
  static std::vector<char> read(const void* dev, size_t bytes) {
    std::vector<char> out(bytes);
    loomDeviceMemcpy(out.data(), dev, bytes);
    return out;
  }
  // A check, run by failures(): an empty string where it passes.
  void expect(std::function<std::string()> check) { checks_.push_back(std::move(check)); }
  // The failed checks' messages, the first ten and a count of the others.
  std::string failures() {
    std::string all;
    int failed = 0;
    for (auto& c : checks_) {
      std::string f = c();
      if (!f.empty() && ++failed <= 10) all += f + "\n";
    }
    if (failed > 10) all += strprintf("... and %d more\n", failed - 10);
    return all;
  }

 private:
  std::vector<void*> allocations_;
  std::vector<std::function<std::string()>> checks_;
};

std::string reductionCheck(const char* what, loomDataType_t t, loomRedOp_t op, int n,
                           const void* dev, uint64_t count, uint64_t first = 0) {
  std::vector<char> got = Device::read(dev, count * typeSize(t));
  uint64_t bad = countReductionErrors(got.data(), count, op, t, n, first);
  if (bad == 0) return "";
  return strprintf("%s %s %s: %llu wrong elements", what, typeName(t), opNameOf(op),
                   (unsigned long long)bad);
}

std::string originCheck(const char* what, const void* dev, uint64_t bytes, int src, int dst) {
  std::vector<char> got = Device::read(dev, bytes);
  return isOrigin(got.data(), bytes, src, dst) ? "" : strprintf("%s: block of %d wrong", what, src);
}

// Every one of count int32 elements of device buffer dev is want, else what differs.
std::string int32Check(const char* what, const void* dev, size_t count, int32_t want) {
  std::vector<char> raw = Device::read(dev, count * 4);
  for (size_t i = 0; i < count; ++i) {
    int32_t v;
    memcpy(&v, raw.data() + i * 4, 4);
    if (v != want) return strprintf("%s: element %zu is %d, not %d", what, i, v, want);
  }
  return "";
}

// Every reducing collective, enqueued alternately on the two streams.
int enqueueReductions(loomComm_t comm, int rank, int n, void* const streams[2], Device& dev) {
  const uint64_t count = 37;
  int k = 0;
  for (loomDataType_t t : kAllTypes)
    for (loomRedOp_t op : kAllOps) {
      const size_t bytes = count * typeSize(t);
      std::vector<char> in(bytes);
      fillInput(in.data(), count, op, t, n, rank);
      char* a = dev.copyOf(in);
      char* b = dev.copyOf(std::vector<char>(bytes, kUntouched));
      // In place every other call: the staging keeps the aliasing.
      char* out = (k % 2) ? a : b;
      RANK_LOOM(loomAllReduce(a, out, count, t, op, comm, streams[k++ % 2]));
      dev.expect([=] { return reductionCheck("allreduce", t, op, n, out, count); });
    }
  for (loomRedOp_t op : kAllOps) {
    const loomDataType_t t = op == loomAvg ? loomFloat32 : loomInt32;
    std::vector<char> in(count * n * typeSize(t));
    fillInput(in.data(), count * n, op, t, n, rank);
    char* a = dev.copyOf(in);
    char* inPlace = a + size_t(rank) * count * typeSize(t);
    RANK_LOOM(loomReduceScatter(a, inPlace, count, t, op, comm, streams[k++ % 2]));
    dev.expect([=] { return reductionCheck("reducescatter", t, op, n, inPlace, count, rank * count); });
    const int root = n - 1;
    char* r = dev.copyOf(in.data(), count * typeSize(t));
    char* ro = dev.copyOf(std::vector<char>(count * typeSize(t), kUntouched));
    RANK_LOOM(loomReduce(r, ro, count, t, op, root, comm, streams[k++ % 2]));
    if (rank == root) dev.expect([=] { return reductionCheck("reduce", t, op, n, ro, count); });
    else dev.expect([=] {
      std::vector<char> got = Device::read(ro, count * typeSize(t));
      return isUntouched(got.data(), got.size()) ? "" : std::string("reduce: a non-root's output was written");
    });
  }
  return 0;
}

// The data-movement collectives, alternately on the two streams.
int enqueueMovement(loomComm_t comm, int rank, int n, void* const streams[2], Device& dev) {
  const uint64_t bytes = 1000;  // int8 elements
  std::vector<char> mine(bytes), blocks(bytes * n);
  fillOrigin(mine.data(), bytes, rank, -1);
  for (int j = 0; j < n; ++j) fillOrigin(blocks.data() + j * bytes, bytes, rank, j);
  for (int root : {0, n - 1}) {
    std::vector<char> rootData(bytes);
    fillOrigin(rootData.data(), bytes, root, -1);
    char* b = dev.copyOf(rank == root ? rootData : std::vector<char>(bytes, kUntouched));
    RANK_LOOM(loomBroadcast(b, b, bytes, loomInt8, root, comm, streams[root % 2]));
    dev.expect([=] { return originCheck("broadcast", b, bytes, root, -1); });
  }
  char* all = dev.copyOf(std::vector<char>(bytes * n, kUntouched));
  char* own = dev.copyOf(mine);
  RANK_LOOM(loomAllGather(own, all, bytes, loomInt8, comm, streams[0]));
  for (int j = 0; j < n; ++j)
    dev.expect([=] { return originCheck("allgather", all + j * bytes, bytes, j, -1); });
  char* sendAll = dev.copyOf(blocks);
  char* recvAll = dev.copyOf(std::vector<char>(bytes * n, kUntouched));
  RANK_LOOM(loomAlltoAll(sendAll, recvAll, bytes, loomInt8, comm, streams[1]));
  for (int j = 0; j < n; ++j)
    dev.expect([=] { return originCheck("alltoall", recvAll + j * bytes, bytes, j, rank); });
  // Alltoallv with a gap before each received block: the gaps must stay as they were.
  std::vector<size_t> counts(n, bytes), sdispls(n), rdispls(n);
  for (int j = 0; j < n; ++j) sdispls[j] = j * bytes, rdispls[j] = j * (bytes + 8) + 8;
  char* recvV = dev.copyOf(std::vector<char>((bytes + 8) * n, kUntouched));
  RANK_LOOM(loomAlltoAllv(sendAll, counts.data(), sdispls.data(), recvV, counts.data(),
                        rdispls.data(), loomInt8, comm, streams[0]));
  for (int j = 0; j < n; ++j)
    dev.expect([=] {
      std::vector<char> gap = Device::read(recvV + j * (bytes + 8), 8);
      if (!isUntouched(gap.data(), 8)) return std::string("alltoallv wrote a gap");
      return originCheck("alltoallv", recvV + j * (bytes + 8) + 8, bytes, j, rank);
    });
  const int root = n / 2;
  char* gathered = dev.copyOf(std::vector<char>(bytes * n, kUntouched));
  RANK_LOOM(loomGather(own, gathered, bytes, loomInt8, root, comm, streams[1]));
  if (rank == root)
    for (int j = 0; j < n; ++j)
      dev.expect([=] { return originCheck("gather", gathered + j * bytes, bytes, j, -1); });
  char* part = dev.copyOf(std::vector<char>(bytes, kUntouched));
  RANK_LOOM(loomScatter(sendAll, part, bytes, loomInt8, root, comm, streams[0]));
  dev.expect([=] { return originCheck("scatter", part, bytes, root, rank); });
  return 0;
}

// A group on both streams: an allreduce, an allgather and a ring of sends and receives.
int enqueueGroup(loomComm_t comm, int rank, int n, void* const streams[2], Device& dev) {
  const uint64_t count = 1000;
  std::vector<char> in(count * 4);
  fillInput(in.data(), count, loomSum, loomFloat32, n, rank);
  char* a = dev.copyOf(in);
  std::vector<char> mine(count);
  fillOrigin(mine.data(), count, rank, -1);
  char* own = dev.copyOf(mine);
  char* all = dev.copyOf(std::vector<char>(count * n, kUntouched));
  char* got = dev.copyOf(std::vector<char>(count, kUntouched));
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  RANK_LOOM(loomGroupStart());
  RANK_LOOM(loomAllReduce(a, a, count, loomFloat32, loomSum, comm, streams[0]));
  RANK_LOOM(loomAllGather(own, all, count, loomInt8, comm, streams[1]));
  RANK_LOOM(loomSend(own, count, loomInt8, next, comm, streams[0]));
  RANK_LOOM(loomRecv(got, count, loomInt8, prev, comm, streams[1]));
  RANK_LOOM(loomGroupEnd());
  dev.expect([=] { return reductionCheck("group allreduce", loomFloat32, loomSum, n, a, count); });
  for (int j = 0; j < n; ++j)
    dev.expect([=] { return originCheck("group allgather", all + j * count, count, j, -1); });
  dev.expect([=] { return originCheck("group recv", got, count, prev, -1); });
  return 0;
}

// Two allreduces on one stream, the second reading the first's output without a
// synchronisation between them: int32 sums of rank+1, then n times that.
int enqueueChain(loomComm_t comm, int rank, int n, void* stream, Device& dev) {
  std::vector<int32_t> in(1000, rank + 1);
  char* a = dev.copyOf(in.data(), in.size() * 4);
  char* b = dev.copyOf(std::vector<char>(in.size() * 4, kUntouched));
  RANK_LOOM(loomAllReduce(a, b, in.size(), loomInt32, loomSum, comm, stream));
  RANK_LOOM(loomAllReduce(b, b, in.size(), loomInt32, loomSum, comm, stream));
  dev.expect([=] { return int32Check("chain", b, in.size(), n * n * (n + 1) / 2); });
  return 0;
}

int everyCollective(RankContext& ctx) {
  useDevice();
  const int rank = ctx.rank(), n = ctx.nranks();
  loomComm_t comm = nullptr;
  RANK_LOOM(initComm(ctx, &comm));
  void* streams[2] = {nullptr, nullptr};
  RANK_LOOM(loomStreamCreate(&streams[0]));
  RANK_LOOM(loomStreamCreate(&streams[1]));
  {
    Device dev;
    if (int rc = enqueueReductions(comm, rank, n, streams, dev)) return rc;
    if (int rc = enqueueMovement(comm, rank, n, streams, dev)) return rc;
    if (int rc = enqueueGroup(comm, rank, n, streams, dev)) return rc;
    if (int rc = enqueueChain(comm, rank, n, streams[1], dev)) return rc;
    // The default stream (NULL) with device buffers.
    std::vector<char> mine(100);
    fillOrigin(mine.data(), mine.size(), 0, -1);
    char* b = dev.copyOf(rank == 0 ? mine : std::vector<char>(100, kUntouched));
    RANK_LOOM(loomBroadcast(b, b, 100, loomInt8, 0, comm, nullptr));
    dev.expect([=] { return originCheck("broadcast on the default stream", b, 100, 0, -1); });
    for (void* s : {streams[0], streams[1], static_cast<void*>(nullptr)})
      RANK_LOOM(loomStreamSynchronize(s, 60000));
    std::string failures = dev.failures();
    RANK_CHECK(failures.empty(), "%s", failures.c_str());
  }
  RANK_LOOM(loomStreamDestroy(streams[0]));
  RANK_LOOM(loomStreamDestroy(streams[1]));
  RANK_LOOM(loomCommDestroy(comm));
  return 0;
}

class DeviceCollectives : public ::testing::TestWithParam<int> {};

TEST_P(DeviceCollectives, EveryCollectiveOnTwoStreamsAndInGroupsIsExact) {
  auto results = runRanks(GetParam(), everyCollective, ForkOptions::timeout(120));
  EXPECT_EQ(describeFailures(results), "");
}
INSTANTIATE_TEST_SUITE_P(Ranks, DeviceCollectives, ::testing::Values(1, 2, 3, 5, 8));

// Runs body(ctx, comm) in two forked ranks on the device, each with a communicator that it
// destroys after; the ranks' results, any failure already reported.
std::vector<RankResult> onTwoRanks(const std::function<int(RankContext&, loomComm_t)>& body) {
  auto results = runRanks(2, [&](RankContext& ctx) {
    useDevice();
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm));
    if (int rc = body(ctx, comm)) return rc;
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
  return results;
}

// Holds stream back: a 64 MiB copy ahead of what is enqueued next, from *ballast (which lives
// until the stream has run it) into scratch device memory.
loomResult_t holdBack(Device& dev, void* stream, std::vector<char>* ballast) {
  const size_t big = size_t(64) << 20;
  ballast->assign(big, 1);
  char* scratch = dev.copyOf(std::vector<char>(big, 0));
  return loomDeviceMemcpyAsync(scratch, ballast->data(), big, stream);
}

TEST(DeviceStreams, ACapturingStreamIsRefusedAndTheStreamStaysUsable) {
  onTwoRanks([](RankContext& ctx, loomComm_t comm) {
    void* s = nullptr;
    RANK_LOOM(loomStreamCreate(&s));
    std::vector<int32_t> in(64, ctx.rank() + 1);
    Device dev;
    char* a = dev.copyOf(in.data(), 256);
    RANK_LOOM(loomStreamBeginCapture(s));
    loomResult_t rc = loomAllReduce(a, a, 64, loomInt32, loomSum, comm, s);
    std::string msg = loomGetLastError(comm);
    RANK_LOOM(loomStreamEndCapture(s));
    RANK_CHECK(rc == loomInvalidUsage, "got %s", loomGetErrorString(rc));
    RANK_CHECK(msg.find("captured into a graph") != std::string::npos, "message: %s", msg.c_str());
    RANK_LOOM(loomAllReduce(a, a, 64, loomInt32, loomSum, comm, s));
    RANK_LOOM(loomStreamSynchronize(s, 30000));
    std::string wrong = int32Check("the allreduce after the capture", a, 64, 3);
    RANK_CHECK(wrong.empty(), "%s", wrong.c_str());
    RANK_LOOM(loomStreamDestroy(s));
    return 0;
  });
}

// One process drives three ranks (one GPU's ranks, as loom allows) on one stream: a group of
// their allreduces starts them together, though each waits on that stream for its own.
TEST(DeviceStreams, OneThreadDrivesSeveralRanksOnOneStream) {
  auto results = runRanks(1, [](RankContext&) {
    useDevice();
    const int n = 3;
    loomUniqueId id;
    RANK_LOOM(loomGetUniqueId(&id));
    loomComm_t comms[n] = {};
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.timeoutMs = 20000;
    RANK_LOOM(loomGroupStart());
    for (int r = 0; r < n; ++r) RANK_LOOM(loomCommInitRankConfig(&comms[r], n, id, r, &config));
    RANK_LOOM(loomGroupEnd());
    void* s = nullptr;
    RANK_LOOM(loomStreamCreate(&s));
    Device dev;
    char* bufs[n];
    for (int r = 0; r < n; ++r) {
      std::vector<int32_t> in(257, r + 1);
      bufs[r] = dev.copyOf(in.data(), in.size() * 4);
    }
    auto start = std::chrono::steady_clock::now();
    RANK_LOOM(loomGroupStart());
    for (int r = 0; r < n; ++r)
      RANK_LOOM(loomAllReduce(bufs[r], bufs[r], 257, loomInt32, loomSum, comms[r], s));
    RANK_LOOM(loomGroupEnd());
    RANK_LOOM(loomStreamSynchronize(s, 30000));
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    RANK_CHECK(seconds < 5, "the group took %.1f s", seconds);
    for (int r = 0; r < n; ++r) {
      std::string wrong = int32Check("a rank's allreduce", bufs[r], 257, 6);
      RANK_CHECK(wrong.empty(), "rank %d: %s", r, wrong.c_str());
    }
    RANK_LOOM(loomStreamDestroy(s));
    for (int r = 0; r < n; ++r) RANK_LOOM(loomCommDestroy(comms[r]));
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

// A call whose stream is held back past its communicator's timeout (here by a call of another
// communicator ahead of it on the stream, whose peer comes late) fails, and the stream's wait
// on it ends, instead of the stream waiting forever.
TEST(DeviceStreams, ACallWhoseStreamDoesNotReachItInTimeFails) {
  auto results = runRanks(2, [](RankContext& ctx) {
    useDevice();
    loomConfig_t slow = LOOM_CONFIG_INITIALIZER, quick = LOOM_CONFIG_INITIALIZER;
    slow.timeoutMs = 30000;
    quick.timeoutMs = 1000;
    loomComm_t x = nullptr, y = nullptr;
    RANK_LOOM(initComm(ctx, &x, &slow));
    RANK_LOOM(initComm(ctx, &y, &quick));
    void* s = nullptr;
    RANK_LOOM(loomStreamCreate(&s));
    std::vector<int32_t> in(64, 1);
    Device dev;
    char* a = dev.copyOf(in.data(), 256);
    char* b = dev.copyOf(in.data(), 256);
    if (ctx.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(3));
    RANK_LOOM(loomAllReduce(a, a, 64, loomInt32, loomSum, x, s));
    RANK_LOOM(loomAllReduce(b, b, 64, loomInt32, loomSum, y, s));
    loomResult_t synced = loomStreamSynchronize(s, 30000);
    loomResult_t async = loomSuccess;
    RANK_LOOM(loomCommGetAsyncError(y, &async));
    RANK_CHECK(async != loomSuccess, "y did not fail");
    if (ctx.rank() == 0) {
      std::string msg = loomGetLastError(y);
      RANK_CHECK(async == loomTimeout && msg.find("did not all reach it") != std::string::npos,
                 "y: %s: %s", loomGetErrorString(async), msg.c_str());
      if (emulated()) RANK_CHECK(synced != loomSuccess, "the stream did not fail");
    }
    // x's call, ahead on the stream, was not affected.
    std::string wrong = int32Check("x's allreduce", a, 64, 2);
    RANK_CHECK(wrong.empty(), "%s", wrong.c_str());
    RANK_LOOM(loomCommAbort(y));
    RANK_LOOM(loomCommDestroy(x));
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
}

// A collective on one stream ordered after another stream's copy by an event: it reduces what
// the copy wrote, though that stream was held up by a large copy first.
TEST(DeviceStreams, AnEventOrdersACollectiveAfterAnotherStreamsCopy) {
  onTwoRanks([](RankContext& ctx, loomComm_t comm) {
    void *producer = nullptr, *consumer = nullptr, *ready = nullptr;
    RANK_LOOM(loomStreamCreate(&producer));
    RANK_LOOM(loomStreamCreate(&consumer));
    RANK_LOOM(loomEventCreate(&ready));
    std::vector<int32_t> in(1024, ctx.rank() + 1);
    std::vector<char> ballast;
    Device dev;
    char* a = dev.copyOf(std::vector<char>(in.size() * 4, kUntouched));
    RANK_LOOM(holdBack(dev, producer, &ballast));
    RANK_LOOM(loomDeviceMemcpyAsync(a, in.data(), in.size() * 4, producer));
    RANK_LOOM(loomEventRecord(ready, producer));
    RANK_LOOM(loomStreamWaitEvent(consumer, ready));
    RANK_LOOM(loomAllReduce(a, a, in.size(), loomInt32, loomSum, comm, consumer));
    RANK_LOOM(loomStreamSynchronize(consumer, 30000));
    std::string wrong = int32Check("the allreduce after the event", a, in.size(), 3);
    RANK_CHECK(wrong.empty(), "%s", wrong.c_str());
    RANK_LOOM(loomStreamSynchronize(producer, 30000));
    RANK_LOOM(loomEventDestroy(ready));
    RANK_LOOM(loomStreamDestroy(producer));
    RANK_LOOM(loomStreamDestroy(consumer));
    return 0;
  });
}

// A pre-multiplied sum is applied as it was when the call was enqueued: the program may destroy
// the op, and make another in its place, before the stream reaches the call.
TEST(DeviceStreams, APreMulSumOpIsTakenAtTheEnqueue) {
  onTwoRanks([](RankContext& ctx, loomComm_t comm) {
    void* s = nullptr;
    RANK_LOOM(loomStreamCreate(&s));
    std::vector<int32_t> in(256, ctx.rank() + 1);
    std::vector<char> ballast;
    Device dev;
    char* a = dev.copyOf(in.data(), in.size() * 4);
    RANK_LOOM(holdBack(dev, s, &ballast));  // while the op is replaced
    const int32_t two = 2, five = 5;
    loomRedOp_t op;
    RANK_LOOM(loomRedOpCreatePreMulSum(&op, &two, loomInt32, comm));
    RANK_LOOM(loomAllReduce(a, a, in.size(), loomInt32, op, comm, s));
    RANK_LOOM(loomRedOpDestroy(op, comm));
    loomRedOp_t other;
    RANK_LOOM(loomRedOpCreatePreMulSum(&other, &five, loomInt32, comm));
    RANK_LOOM(loomStreamSynchronize(s, 30000));
    std::string wrong = int32Check("the pre-multiplied sum", a, in.size(), 2 * (1 + 2));
    RANK_CHECK(wrong.empty(), "%s", wrong.c_str());
    RANK_LOOM(loomRedOpDestroy(other, comm));
    RANK_LOOM(loomStreamDestroy(s));
    return 0;
  });
}

// What a call on device buffers is told apart by: TRACE names the path it took; a buffer that
// runs past its allocation is refused, not read past; and a group that mixes stream-ordered and
// host calls of one communicator is refused.
TEST(DeviceStreams, TraceNamesThePathAndBadCallsAreRefused) {
  auto results = onTwoRanks([](RankContext& ctx, loomComm_t comm) {
    logInRank("TRACE", "COLL");
    std::vector<int32_t> in(64, ctx.rank() + 1), host(64, 0);
    Device dev;
    char* a = dev.copyOf(in.data(), 256);
    RANK_LOOM(loomAllReduce(a, a, 64, loomInt32, loomSum, comm, nullptr));
    RANK_LOOM(loomStreamSynchronize(nullptr, 30000));
    if (emulated()) {
      loomResult_t rc = loomAllReduce(a, a, 4096, loomInt32, loomSum, comm, nullptr);
      std::string msg = loomGetLastError(comm);
      RANK_CHECK(rc == loomInvalidArgument && msg.find("leave the allocation") != std::string::npos,
                 "a buffer past its allocation: %s: %s", loomGetErrorString(rc), msg.c_str());
    }
    RANK_LOOM(loomGroupStart());
    RANK_LOOM(loomAllReduce(a, a, 64, loomInt32, loomSum, comm, nullptr));
    RANK_LOOM(loomAllReduce(host.data(), host.data(), 64, loomInt32, loomSum, comm, nullptr));
    loomResult_t rc = loomGroupEnd();
    std::string msg = loomGetLastError(nullptr);
    RANK_CHECK(rc == loomInvalidUsage && msg.find("both stream-ordered") != std::string::npos,
               "a mixed group: %s: %s", loomGetErrorString(rc), msg.c_str());
    // Host buffers without a stream still run on the host, at once.
    RANK_LOOM(loomAllReduce(host.data(), host.data(), 64, loomInt32, loomSum, comm, nullptr));
    return 0;
  });
  // Two stream-ordered calls were described (the first, and the group's, refused at its end);
  // the host calls ran on the host, as the executor's lines (#0, #1) say.
  for (const RankResult& r : results) {
    EXPECT_EQ(linesWith(r.output, "stream-ordered on the ").size(), 2u) << r.output;
    EXPECT_EQ(linesWith(r.output, "reduced on the host").size(), 2u) << r.output;
    EXPECT_EQ(linesWith(r.output, "allreduce #").size(), 2u) << r.output;
  }
}

// A rank killed while the others' calls wait on two streams: each stream's wait ends with an
// error within seconds (not the 60 s deadline), and the communicator says why.
TEST(DeviceStreams, AKilledRankEndsEveryStreamsWaitWithAnError) {
  const int n = 3, victim = 2;
  ForkOptions options = ForkOptions::timeout(60);
  options.expectedToDie = {victim};
  auto results = runRanks(n, [&](RankContext& ctx) {
    useDevice();
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.timeoutMs = 60000;
    loomComm_t comm = nullptr;
    RANK_LOOM(initComm(ctx, &comm, &config));
    void* streams[2] = {nullptr, nullptr};
    RANK_LOOM(loomStreamCreate(&streams[0]));
    RANK_LOOM(loomStreamCreate(&streams[1]));
    const size_t count = 1 << 20;
    std::vector<float> ones(count, 1.0f);
    Device dev;
    char* a = dev.copyOf(ones.data(), count * 4);
    char* b = dev.copyOf(ones.data(), count * 4);
    RANK_LOOM(loomAllReduce(a, a, count, loomFloat32, loomSum, comm, streams[0]));
    RANK_LOOM(loomStreamSynchronize(streams[0], 30000));
    ctx.allgather("");
    if (ctx.rank() == victim) raise(SIGKILL);
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i)
      RANK_LOOM(loomAllReduce(i % 2 ? a : b, i % 2 ? a : b, count, loomFloat32, loomSum, comm,
                            streams[i % 2]));
    loomResult_t s0 = loomStreamSynchronize(streams[0], 30000);
    loomResult_t s1 = loomStreamSynchronize(streams[1], 30000);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    RANK_CHECK(seconds < 15, "the streams' waits took %.1f s", seconds);
    if (emulated()) {  // a CUDA stream has no error of loom's to carry
      RANK_CHECK(s0 == loomRemoteError && s1 == loomRemoteError, "streams: %s, %s",
                 loomGetErrorString(s0), loomGetErrorString(s1));
    }
    loomResult_t async = loomSuccess;
    RANK_LOOM(loomCommGetAsyncError(comm, &async));
    RANK_CHECK(async == loomRemoteError, "async error: %s", loomGetErrorString(async));
    std::string msg = loomGetLastError(comm);
    RANK_CHECK(msg.find("rank 2") != std::string::npos, "message: %s", msg.c_str());
    RANK_LOOM(loomCommAbort(comm));
    return 0;
  }, options);
  EXPECT_EQ(describeFailures(results, options), "");
  EXPECT_EQ(results[victim].signal, SIGKILL);
}

// Device memory is unreadable by host code: a load from it kills the process (SIGSEGV), so no
// path of loom's can have read device memory as host memory in the tests above. The bytes are
// there for the device: a copy back returns them, and fresh memory is poisoned.
TEST(DeviceMemory, AHostReadOfDeviceMemoryFaults) {
  ForkOptions options = ForkOptions::timeout(30);
  options.expectedToDie = {0};
  auto results = runRanks(1, [](RankContext&) {
    useDevice();
    void* p = nullptr;
    RANK_LOOM(loomDeviceMalloc(&p, 4096));
    if (emulated()) {
      std::vector<char> fresh = Device::read(p, 16);
      RANK_CHECK(fresh[0] == char(0xA5) && fresh[15] == char(0xA5), "fresh memory not poisoned");
    }
    const char text[] = "device bytes";
    RANK_LOOM(loomDeviceMemcpy(p, text, sizeof(text)));
    RANK_CHECK(Device::read(p, sizeof(text)) == std::vector<char>(text, text + sizeof(text)),
               "the copy back differs");
    fprintf(stderr, "reading device memory from the host\n");
    volatile char c = *static_cast<volatile char*>(p);
    fprintf(stderr, "read %d: the host reached device memory\n", c);
    return 2;
  }, options);
  EXPECT_EQ(results[0].signal, SIGSEGV) << results[0].output;
}

}  // namespace
}  // namespace loom::testing
