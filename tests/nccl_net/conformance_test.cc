// The conformance harness of NCCL's net plugin (libnccl-net-loom.so), without NCCL: two
// processes drive it as NCCL's proxy does, each version through its own exported struct, and
// check every byte and size that arrives. NCCL's rules (docs/NCCL_PLUGINS.md): connect and
// accept never block; up to NCCL_NET_MAX_REQUESTS requests in flight per comm; a grouped
// receive takes n messages, each into the buffer of its tag; a receive may be larger than its
// message (it completes with the sent size), never smaller; test() may be polled in any order;
// a dead peer is ncclSystemError from test(), not a hang.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "tests/nccl_net/pair.h"
#include "tests/support/two_hosts.h"

namespace loom::testing {
namespace {

const char* const kPlugin = LOOM_NCCL_NET_PLUGIN;

// The plugin opened and initialised through the version under test, in this process.
class NcclNet : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    api_ = std::make_unique<NetApi>(kPlugin, GetParam());
    ASSERT_TRUE(api_->error().empty()) << api_->error();
    ASSERT_EQ(api_->init(), ncclSuccess);
  }
  std::unique_ptr<NetApi> api_;
};

std::string versionName(const ::testing::TestParamInfo<int>& info) {
  return "v" + std::to_string(info.param);
}

// ---- one process ----

TEST_P(NcclNet, PropertiesDescribeHostInterfaces) {
  NetApi& api = *api_;
  EXPECT_STREQ(api.name(), "loom");
  int ndev = 0;
  ASSERT_EQ(api.devices(&ndev), ncclSuccess);
  ASSERT_GE(ndev, 1);
  for (int dev = 0; dev < ndev; ++dev) {
    NetApi::Props p;
    ASSERT_EQ(api.properties(dev, &p), ncclSuccess);
    EXPECT_FALSE(p.name.empty());
    EXPECT_EQ(p.ptrSupport, NCCL_PTR_HOST);
    EXPECT_GT(p.speed, 0);
    EXPECT_GE(p.latency, 0);
    EXPECT_GT(p.maxComms, 0);
    EXPECT_GT(p.maxRecvs, 1);
    EXPECT_EQ(p.netDeviceType, NCCL_NET_DEVICE_HOST);
    if (GetParam() >= 9) {
      EXPECT_GE(p.maxP2pBytes, size_t(1) << 30);
      EXPECT_LE(p.maxP2pBytes, size_t(NCCL_MAX_NET_SIZE_BYTES));
      EXPECT_GT(p.maxCollBytes, 0u);
      EXPECT_EQ(p.vDevs, 1);
      EXPECT_EQ(p.vDev0, dev);
    }
    if (GetParam() >= 11) {
      EXPECT_EQ(p.maxMultiRequestSize, 1);
    }
    if (GetParam() == 12) {
      EXPECT_EQ(p.railId, NCCL_NET_ID_UNDEF);
      EXPECT_EQ(p.planeId, NCCL_NET_ID_UNDEF);
    }
  }
  NetApi::Props none;
  EXPECT_NE(api.properties(ndev, &none), ncclSuccess);
  // Device offload and NIC fusion: absent, which NCCL checks for.
  EXPECT_EQ(api.v8()->getDeviceMr, nullptr);
  EXPECT_EQ(api.v8()->irecvConsumed, nullptr);
  if (GetParam() >= 9) {
    EXPECT_EQ(api.v9()->makeVDevice, nullptr);
  }
  if (GetParam() >= 11) {
    EXPECT_TRUE(GetParam() == 11 ? api.v11()->finalize != nullptr
                                 : api.v12()->finalize != nullptr);
    EXPECT_EQ(api.finalize(), ncclSuccess);
  }
}

TEST_P(NcclNet, RegistrationTakesHostMemoryOnly) {
  NetApi& api = *api_;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listenComm = nullptr;
  ASSERT_EQ(api.listen(0, handle, &listenComm), ncclSuccess);
  ASSERT_NE(listenComm, nullptr);
  std::vector<char> buffer(4096);
  void* mh = nullptr;
  EXPECT_EQ(api.regMr(listenComm, buffer.data(), buffer.size(), NCCL_PTR_HOST, &mh), ncclSuccess);
  EXPECT_NE(mh, nullptr);
  EXPECT_EQ(api.deregMr(listenComm, mh), ncclSuccess);
  void* refused = nullptr;
  EXPECT_EQ(api.regMr(listenComm, buffer.data(), buffer.size(), NCCL_PTR_CUDA, &refused),
            ncclInternalError);
  EXPECT_EQ(api.regMrDmaBuf(listenComm, buffer.data(), buffer.size(), NCCL_PTR_DMABUF, &refused),
            ncclInternalError);
  EXPECT_EQ(refused, nullptr);
  EXPECT_EQ(api.closeListen(listenComm), ncclSuccess);
  EXPECT_EQ(api.finalize(), ncclSuccess);
}

// A process may connect to its own handle: the refusals of bad input, on real comms.
TEST_P(NcclNet, BadInputIsRefused) {
  NetApi& api = *api_;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* stranger = nullptr;
  EXPECT_EQ(api.connect(0, handle, &stranger), ncclInvalidUsage);  // not a listen()'s handle
  EXPECT_EQ(stranger, nullptr);
  void* listenComm = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  ASSERT_EQ(api.listen(0, handle, &listenComm), ncclSuccess);
  ASSERT_EQ(api.connectLoop(0, handle, &send), ncclSuccess);
  ASSERT_EQ(api.acceptLoop(listenComm, &recv), ncclSuccess);
  std::vector<char> buffer(1024);
  void* mh = nullptr;
  ASSERT_EQ(api.regMr(send, buffer.data(), 512, NCCL_PTR_HOST, &mh), ncclSuccess);
  void* req = nullptr;
  EXPECT_EQ(api.isend(send, buffer.data() + 256, 512, 0, mh, &req), ncclInvalidArgument);
  EXPECT_EQ(req, nullptr);
  if (GetParam() >= 9) {  // past what test() can report
    EXPECT_EQ(api.isend(send, buffer.data(), (size_t(1) << 31), 0, nullptr, &req),
              ncclInvalidArgument);
  }
  void* data[9] = {};
  size_t sizes[9] = {};
  int tags[9] = {};
  EXPECT_EQ(api.irecv(recv, 9, data, sizes, tags, nullptr, &req), ncclInvalidArgument);
  EXPECT_EQ(api.isend(recv, buffer.data(), 8, 0, nullptr, &req), ncclInternalError);
  int done = 0;
  EXPECT_EQ(api.test(nullptr, &done, nullptr), ncclInternalError);
  EXPECT_EQ(api.deregMr(send, mh), ncclSuccess);
  EXPECT_EQ(api.closeSend(send), ncclSuccess);
  EXPECT_EQ(api.closeRecv(recv), ncclSuccess);
  EXPECT_EQ(api.closeListen(listenComm), ncclSuccess);
  EXPECT_EQ(api.finalize(), ncclSuccess);
}

// connect() never waits: to a listener that is gone it answers ncclSystemError at once, not
// after LOOM_TIMEOUT_MS.
TEST_P(NcclNet, ConnectToAClosedListenerFailsAtOnce) {
  NetApi& api = *api_;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* listenComm = nullptr;
  ASSERT_EQ(api.listen(0, handle, &listenComm), ncclSuccess);
  ASSERT_EQ(api.closeListen(listenComm), ncclSuccess);
  const auto start = std::chrono::steady_clock::now();
  void* send = nullptr;
  EXPECT_EQ(api.connectLoop(0, handle, &send, nullptr, 5), ncclSystemError);
  EXPECT_EQ(send, nullptr);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(api.finalize(), ncclSuccess);
}

// ---- two processes ----

// The sizes of one round of messages: empty, inline, around the inline limit, chunk-sized and
// beyond, odd.
const size_t kSizes[] = {0, 1, 8, 47, 48, 49, 4096, 131072, 131073, 1000003};

// NCCL_NET_MAX_REQUESTS sends and receives in flight at once, the receives 100 bytes larger
// than their messages, test() polled newest first; a 33rd receive is refused with a NULL
// request (NCCL posts it again later), not an error.
int manyInFlight(RankContext& ctx, int version) {
  NetApi api(kPlugin, version);
  void* comm = nullptr;
  if (joinPair(ctx, api, &comm) != 0) return 1;
  constexpr int kN = NCCL_NET_MAX_REQUESTS;
  std::vector<std::vector<char>> buffers(kN);
  std::vector<void*> mh(kN), req(kN);
  std::vector<size_t> sizes(kN);
  const bool receiver = ctx.rank() == kReceiver;
  for (int i = 0; i < kN; ++i) {
    sizes[i] = kSizes[i % std::size(kSizes)];
    buffers[i].assign(sizes[i] + (receiver ? 100 : 0), char(0x5a));
    if (!receiver) fillPattern(buffers[i].data(), sizes[i], uint64_t(i));
    RANK_CHECK(api.regMr(comm, buffers[i].data(), buffers[i].size(), NCCL_PTR_HOST, &mh[i]) ==
                   ncclSuccess, "regMr %d", i);
  }
  for (int i = 0; i < kN; ++i) {
    // NCCL marks a receive whose completion it may skip (LL, LL128) before posting it; the
    // plugin still answers a request of its own.
    req[i] = receiver && i % 2 == 0 ? reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION)
                                    : nullptr;
    if (receiver) {
      void* data = buffers[i].data();
      size_t size = buffers[i].size();
      int tag = 7;
      RANK_CHECK(api.irecv(comm, 1, &data, &size, &tag, &mh[i], &req[i]) == ncclSuccess, "irecv");
    } else {
      RANK_CHECK(api.isend(comm, buffers[i].data(), sizes[i], 7, mh[i], &req[i]) == ncclSuccess,
                 "isend %d", i);
    }
    RANK_CHECK(req[i] != nullptr &&
                   req[i] != reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION),
               "request %d of %d refused", i, kN);
  }
  if (receiver) {
    char extra[16];
    void* data = extra;
    size_t size = sizeof(extra);
    int tag = 7;
    void* more = reinterpret_cast<void*>(1);
    RANK_CHECK(api.irecv(comm, 1, &data, &size, &tag, nullptr, &more) == ncclSuccess &&
                   more == nullptr, "a receive past %d in flight: %p", kN, more);
  }
  for (int i = kN - 1; i >= 0; --i) {
    int got = -1;
    RANK_CHECK(api.wait(req[i], &got) == ncclSuccess, "test %d", i);
    RANK_CHECK(size_t(got) == sizes[i], "request %d: size %d, sent %zu", i, got, sizes[i]);
    if (receiver) {
      int64_t bad = patternMismatch(buffers[i].data(), sizes[i], uint64_t(i));
      RANK_CHECK(bad < 0, "message %d (%zu bytes) differs at byte %lld", i, sizes[i],
                 static_cast<long long>(bad));
      for (size_t b = sizes[i]; b < buffers[i].size(); ++b)
        RANK_CHECK(buffers[i][b] == char(0x5a), "message %d wrote past its size", i);
      void* flush = reinterpret_cast<void*>(1);
      void* data = buffers[i].data();
      RANK_CHECK(api.iflush(comm, 1, &data, &got, &mh[i], &flush) == ncclSuccess &&
                     flush == nullptr, "iflush of host memory");
    }
  }
  for (int i = 0; i < kN; ++i) RANK_CHECK(api.deregMr(comm, mh[i]) == ncclSuccess, "deregMr");
  ctx.allgather("");  // neither side closes while the other still tests
  RANK_CHECK((receiver ? api.closeRecv(comm) : api.closeSend(comm)) == ncclSuccess, "close");
  RANK_CHECK(api.finalize() == ncclSuccess, "finalize");
  return 0;
}

// One receive of four buffers whose tags come in another order than the messages: each
// message lands in the buffer of its tag, each size is reported where it landed. Then an
// empty message alone.
int groupedReceive(RankContext& ctx, int version) {
  NetApi api(kPlugin, version);
  void* comm = nullptr;
  if (joinPair(ctx, api, &comm) != 0) return 1;
  constexpr int kN = 4;
  const size_t sentSize[kN] = {100, 0, 70000, 5};  // by tag
  if (ctx.rank() == kSender) {
    std::vector<char> data[kN];
    void* req[kN + 1];
    for (int tag = 0; tag < kN; ++tag) {
      data[tag].resize(sentSize[tag] + 1);
      fillPattern(data[tag].data(), sentSize[tag], uint64_t(100 + tag));
      RANK_CHECK(api.isend(comm, data[tag].data(), sentSize[tag], tag, nullptr, &req[tag]) ==
                     ncclSuccess && req[tag] != nullptr, "isend tag %d", tag);
    }
    RANK_CHECK(api.isend(comm, nullptr, 0, 9, nullptr, &req[kN]) == ncclSuccess, "empty isend");
    for (int i = kN; i >= 0; --i)
      RANK_CHECK(api.wait(req[i], nullptr) == ncclSuccess, "send %d", i);
  } else {
    const int tags[kN] = {3, 1, 0, 2};
    std::vector<char> buffers[kN];
    void* data[kN];
    size_t sizes[kN];
    int tagArray[kN];
    for (int i = 0; i < kN; ++i) {
      buffers[i].assign(80000, 0);
      data[i] = buffers[i].data();
      sizes[i] = buffers[i].size();
      tagArray[i] = tags[i];
    }
    void* req = nullptr;
    RANK_CHECK(api.irecv(comm, kN, data, sizes, tagArray, nullptr, &req) == ncclSuccess &&
                   req != nullptr, "grouped irecv");
    int got[kN] = {-1, -1, -1, -1};
    RANK_CHECK(api.wait(req, got) == ncclSuccess, "grouped test");
    for (int i = 0; i < kN; ++i) {
      RANK_CHECK(size_t(got[i]) == sentSize[tags[i]], "buffer %d (tag %d): %d bytes, sent %zu",
                 i, tags[i], got[i], sentSize[tags[i]]);
      RANK_CHECK(patternMismatch(buffers[i].data(), sentSize[tags[i]], uint64_t(100 + tags[i])) < 0,
                 "buffer %d (tag %d) holds the wrong bytes", i, tags[i]);
    }
    char empty[1] = {42};
    void* one = empty;
    size_t size = 0;
    int tag = 9;
    RANK_CHECK(api.irecv(comm, 1, &one, &size, &tag, nullptr, &req) == ncclSuccess, "irecv 0");
    RANK_CHECK(api.wait(req, got) == ncclSuccess && got[0] == 0 && empty[0] == 42,
               "empty message: %d bytes", got[0]);
  }
  ctx.allgather("");
  RANK_CHECK((ctx.rank() == kReceiver ? api.closeRecv(comm) : api.closeSend(comm)) == ncclSuccess,
             "close");
  return api.finalize() == ncclSuccess ? 0 : 1;
}

// A message larger than the receive posted for it is an error from test(), not a silent cut.
int truncation(RankContext& ctx, int version) {
  NetApi api(kPlugin, version);
  void* comm = nullptr;
  if (joinPair(ctx, api, &comm) != 0) return 1;
  std::vector<char> buffer(1000, 1);
  void* req = nullptr;
  if (ctx.rank() == kSender) {
    RANK_CHECK(api.isend(comm, buffer.data(), buffer.size(), 0, nullptr, &req) == ncclSuccess,
               "isend");
    RANK_CHECK(api.wait(req, nullptr) == ncclSuccess, "send");
  } else {
    void* data = buffer.data();
    size_t size = 999;
    int tag = 0;
    RANK_CHECK(api.irecv(comm, 1, &data, &size, &tag, nullptr, &req) == ncclSuccess, "irecv");
    const ncclResult_t rc = api.wait(req, nullptr, 10);
    RANK_CHECK(rc == ncclInvalidUsage, "a 1000-byte message into 999 bytes: %d", int(rc));
  }
  ctx.allgather("");
  RANK_CHECK((ctx.rank() == kReceiver ? api.closeRecv(comm) : api.closeSend(comm)) == ncclSuccess,
             "close");
  return 0;
}

// A rank that fails stops the other, which would otherwise wait for it in the allgather.
ForkOptions pairOptions(int seconds) {
  ForkOptions options = ForkOptions::timeout(seconds);
  options.stopOthersAboveExit = 0;
  return options;
}

void runPair(const std::function<int(RankContext&, int)>& fn, int version, int seconds = 60) {
  const ForkOptions options = pairOptions(seconds);
  auto results = runRanks(2, [&](RankContext& ctx) { return fn(ctx, version); }, options);
  EXPECT_EQ(describeFailures(results, options), "");
}

TEST_P(NcclNet, ThirtyTwoInFlightArriveWhole) { runPair(manyInFlight, GetParam()); }
TEST_P(NcclNet, GroupedReceiveMatchesTags) { runPair(groupedReceive, GetParam()); }
TEST_P(NcclNet, LargerMessageThanReceiveIsAnError) { runPair(truncation, GetParam()); }

INSTANTIATE_TEST_SUITE_P(Versions, NcclNet, ::testing::Values(8, 9, 10, 11, 12), versionName);

// 1 GiB in one message: v9 on, whose sizes are size_t.
int oneGiB(RankContext& ctx, int version) {
  NetApi api(kPlugin, version);
  void* comm = nullptr;
  if (joinPair(ctx, api, &comm) != 0) return 1;
  const size_t bytes = size_t(1) << 30;
  std::unique_ptr<char[]> buffer(new char[bytes]);
  void* mh = nullptr;
  RANK_CHECK(api.regMr(comm, buffer.get(), bytes, NCCL_PTR_HOST, &mh) == ncclSuccess, "regMr");
  void* req = nullptr;
  int got = -1;
  if (ctx.rank() == kSender) {
    fillPattern(buffer.get(), bytes, 1);
    RANK_CHECK(api.isend(comm, buffer.get(), bytes, 1, mh, &req) == ncclSuccess, "isend");
    RANK_CHECK(api.wait(req, &got, 60) == ncclSuccess && size_t(got) == bytes, "send: %d", got);
  } else {
    memset(buffer.get(), 0, bytes);
    void* data = buffer.get();
    size_t size = bytes;
    int tag = 1;
    RANK_CHECK(api.irecv(comm, 1, &data, &size, &tag, &mh, &req) == ncclSuccess, "irecv");
    RANK_CHECK(api.wait(req, &got, 60) == ncclSuccess && size_t(got) == bytes, "recv: %d", got);
    int64_t bad = patternMismatch(buffer.get(), bytes, 1);
    RANK_CHECK(bad < 0, "1 GiB differs at byte %lld", static_cast<long long>(bad));
  }
  RANK_CHECK(api.deregMr(comm, mh) == ncclSuccess, "deregMr");
  ctx.allgather("");
  RANK_CHECK((ctx.rank() == kReceiver ? api.closeRecv(comm) : api.closeSend(comm)) == ncclSuccess,
             "close");
  return 0;
}

class NcclNetLarge : public ::testing::TestWithParam<int> {};
TEST_P(NcclNetLarge, OneGiBMessageArrivesWhole) { runPair(oneGiB, GetParam(), 120); }
// v10's and v11's isend and irecv take the same size_t as v9's and v12's.
INSTANTIATE_TEST_SUITE_P(Versions, NcclNetLarge, ::testing::Values(9, 12), versionName);

// ---- faults ----

// The `victim` rank dies (SIGKILL) in the middle of a 256 MiB transfer; the survivor's test()
// must answer ncclSystemError within 10 s, never done.
int killedMidTransfer(RankContext& ctx, int version, int victim) {
  NetApi api(kPlugin, version);
  void* comm = nullptr;
  if (joinPair(ctx, api, &comm) != 0) return 1;
  const size_t bytes = size_t(256) << 20;
  std::unique_ptr<char[]> buffer(new char[bytes]());
  void* req = nullptr;
  if (ctx.rank() == kSender) {
    RANK_CHECK(api.isend(comm, buffer.get(), bytes, 0, nullptr, &req) == ncclSuccess, "isend");
  } else {
    void* data = buffer.get();
    size_t size = bytes;
    int tag = 0;
    RANK_CHECK(api.irecv(comm, 1, &data, &size, &tag, nullptr, &req) == ncclSuccess, "irecv");
  }
  // The victim moves bytes for 5 ms (the survivor moving them too, in its wait below: 256 MiB
  // cannot all pass in that time), then dies with the transfer under way.
  const auto start = std::chrono::steady_clock::now();
  if (ctx.rank() == victim) {
    int done = 0;
    while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(5))
      RANK_CHECK(api.test(req, &done, nullptr) == ncclSuccess && !done, "before the kill");
    raise(SIGKILL);
  }
  const ncclResult_t rc = api.wait(req, nullptr, 10);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  RANK_CHECK(rc == ncclSystemError, "test after the peer died: %d after %.1f s", int(rc), took);
  RANK_CHECK((ctx.rank() == kReceiver ? api.closeRecv(comm) : api.closeSend(comm)) == ncclSuccess,
             "close");
  return 0;
}

// The victim killed, the survivor's answer checked.
void runKill(int version, int victim) {
  ForkOptions options = ForkOptions::timeout(60);
  options.expectedToDie = {victim};
  auto results = runRanks(
      2, [&](RankContext& ctx) { return killedMidTransfer(ctx, version, victim); }, options);
  EXPECT_EQ(describeFailures(results, options), "");
  EXPECT_EQ(results[size_t(victim)].signal, SIGKILL);
}

class NcclNetFault : public ::testing::TestWithParam<int> {};
TEST_P(NcclNetFault, SenderKilledIsSystemErrorAtReceiver) { runKill(GetParam(), kSender); }
TEST_P(NcclNetFault, ReceiverKilledIsSystemErrorAtSender) { runKill(GetParam(), kReceiver); }
INSTANTIATE_TEST_SUITE_P(Versions, NcclNetFault, ::testing::Values(8, 12), versionName);

// ---- two hosts: network namespaces joined by a bridge ----

class NcclNetTwoHosts : public TwoHostsTest {
 protected:
  void runAcross(const std::function<int(RankContext&, int)>& fn, int version) {
    const std::vector<std::string> hosts = hosts_;
    auto results = runRanks(
        2,
        [&](RankContext& ctx) {
          if (TwoHostsTest::enter(hosts[size_t(ctx.rank())]) != 0) return 2;
          return fn(ctx, version);
        },
        pairOptions(60));
    EXPECT_EQ(describeFailures(results, pairOptions(60)), "");
  }
};

// Across hosts the device is the veth (LOOM_SOCKET_IFNAME), not loopback.
int vethDevice(RankContext& ctx, int version) {
  NetApi api(kPlugin, version);
  RANK_CHECK(api.init() == ncclSuccess, "init");
  NetApi::Props p;
  RANK_CHECK(api.properties(0, &p) == ncclSuccess && p.name[0] == 'v', "device 0 is %s",
             p.name.c_str());
  (void)ctx;
  return api.finalize() == ncclSuccess ? 0 : 1;
}

TEST_F(NcclNetTwoHosts, DeviceIsTheHostsInterface) { runAcross(vethDevice, 11); }
TEST_F(NcclNetTwoHosts, ThirtyTwoInFlightArriveWhole) { runAcross(manyInFlight, 12); }
TEST_F(NcclNetTwoHosts, GroupedReceiveMatchesTags) { runAcross(groupedReceive, 9); }

}  // namespace
}  // namespace loom::testing
