// The NCCL net plugin beside loom's own TCP transport on the same link, in one run: one-way
// bandwidth (1–64 MiB messages, 4 in flight; median of 5) and 8-byte latency (half a
// ping-pong; median of 41 runs of 200 round trips), and their ratio. A program, not a test
// (it measures; docs/NCCL_PLUGINS.md has its figures):
//
//   loom_nccl_net_bench                                   # loopback, two processes
//   loom_nccl_net_bench --gtest_filter='*TwoHosts*'       # two netns hosts, 1 Gbit/s (tc)
//
// Both sides read the same LOOM_TCP_* parameters, so they run the same sockets and chunks.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "tests/nccl_net/pair.h"
#include "tests/support/two_hosts.h"
#include "transports/tcp/tcp_transport.h"

namespace loom::testing {
namespace {

using transports::TransferOp;

constexpr int kWindow = 4;
constexpr int kRepeats = 5;           // per bandwidth figure
constexpr int kLatencyRepeats = 41;   // of kLatencyRounds round trips each
constexpr int kLatencyRounds = 200;

// One rank's two directions to the other, of one kind or the other.
class Endpoint {
 public:
  virtual ~Endpoint() = default;
  // `count` messages of `bytes`, at most kWindow in flight; false on any error.
  virtual bool sendMany(char* buf, size_t bytes, int count) = 0;
  virtual bool recvMany(char* buf, size_t bytes, int count) = 0;
};

class PluginEndpoint final : public Endpoint {
 public:
  PluginEndpoint(NetApi* api, void* send, void* recv) : api_(api), send_(send), recv_(recv) {}
  ~PluginEndpoint() override {
    api_->closeSend(send_);
    api_->closeRecv(recv_);
  }
  bool sendMany(char* buf, size_t bytes, int count) override {
    return run(count, [&](void** req) { return api_->isend(send_, buf, bytes, 0, nullptr, req); });
  }
  bool recvMany(char* buf, size_t bytes, int count) override {
    return run(count, [&](void** req) {
      void* data = buf;
      int tag = 0;
      return api_->irecv(recv_, 1, &data, &bytes, &tag, nullptr, req);
    });
  }

 private:
  template <typename Post>
  bool run(int count, Post post) {
    std::vector<void*> inFlight;
    int posted = 0;
    while (posted < count || !inFlight.empty()) {
      while (posted < count && int(inFlight.size()) < kWindow) {
        void* req = nullptr;
        if (post(&req) != ncclSuccess) return false;
        if (req == nullptr) break;
        inFlight.push_back(req);
        ++posted;
      }
      int done = 0;
      if (api_->test(inFlight.front(), &done, nullptr) != ncclSuccess) return false;
      if (done) inFlight.erase(inFlight.begin());
    }
    return true;
  }
  NetApi* api_;
  void* send_;
  void* recv_;
};

class TransportEndpoint final : public Endpoint {
 public:
  bool sendMany(char* buf, size_t bytes, int count) override {
    return run(TransferOp::Kind::Send, buf, bytes, count);
  }
  bool recvMany(char* buf, size_t bytes, int count) override {
    return run(TransferOp::Kind::Recv, buf, bytes, count);
  }
  transports::CommContext ctx;
  std::unique_ptr<transports::Transport> transport;
  std::unique_ptr<transports::Connection> conn;

 private:
  bool run(TransferOp::Kind kind, char* buf, size_t bytes, int count) {
    TransferOp ops[kWindow];
    int posted = 0, finished = 0;
    while (finished < count) {
      while (posted < count && posted - finished < kWindow) {
        TransferOp& op = ops[posted % kWindow];
        op = transports::wholeTransfer(kind, buf, bytes);
        if (!conn->post(&op).isOk()) return false;
        ++posted;
      }
      bool moved = false;
      if (!conn->progress(&moved).isOk()) return false;
      while (finished < posted && ops[finished % kWindow].complete()) ++finished;
    }
    return true;
  }
};

// Both directions through the plugin: each rank listens, connects to the other, accepts.
std::unique_ptr<Endpoint> pluginEndpoint(RankContext& ctx, NetApi& api) {
  if (!api.error().empty() || api.init() != ncclSuccess) return nullptr;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* listenComm = nullptr;
  if (api.listen(0, handle, &listenComm) != ncclSuccess) return nullptr;
  const std::string theirs = ctx.allgather(std::string(handle, sizeof(handle)))[1 - ctx.rank()];
  memcpy(handle, theirs.data(), sizeof(handle));
  void* send = nullptr;
  void* recv = nullptr;
  if (api.connectLoop(0, handle, &send) != ncclSuccess) return nullptr;
  if (api.acceptLoop(listenComm, &recv) != ncclSuccess) return nullptr;
  api.closeListen(listenComm);
  return std::make_unique<PluginEndpoint>(&api, send, recv);
}

// A connection of loom's TCP transport between the two ranks, as a communicator makes one.
std::unique_ptr<Endpoint> transportEndpoint(RankContext& ctx) {
  auto e = std::make_unique<TransportEndpoint>();
  e->ctx.rank = ctx.rank();
  e->ctx.nranks = 2;
  e->ctx.peers.resize(2);
  e->ctx.timeoutMs = 30000;
  if (!transports::tcp::createTcpTransport(&e->ctx, transports::tcp::tcpOptionsFromParams(),
                                           &e->transport).isOk())
    return nullptr;
  transports::PeerInfo self;
  transports::tcpListenAddress(*e->transport, &self);
  const std::vector<std::string> all =
      ctx.allgather(std::string(reinterpret_cast<const char*>(&self), sizeof(self)));
  for (int r = 0; r < 2; ++r) memcpy(&e->ctx.peers[r], all[r].data(), sizeof(self));
  if (!e->transport->connect(1 - ctx.rank(), 0, Deadline(30000), &e->conn).isOk()) return nullptr;
  return e;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Rank 1 streams to rank 0 and takes its 8-byte answer; bytes/s at rank 1 (0 at rank 0).
double bandwidth(RankContext& ctx, Endpoint& e, std::vector<char>& buf, size_t bytes, int count) {
  ctx.allgather("");
  const auto start = std::chrono::steady_clock::now();
  if (ctx.rank() == 1) {
    if (!e.sendMany(buf.data(), bytes, count) || !e.recvMany(buf.data(), 8, 1)) return -1;
  } else if (!e.recvMany(buf.data(), bytes, count) || !e.sendMany(buf.data(), 8, 1)) {
    return -1;
  }
  return double(bytes) * count /
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Half the round trip of an 8-byte ping-pong, seconds.
double latency(RankContext& ctx, Endpoint& e, std::vector<char>& buf, int rounds) {
  ctx.allgather("");
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i) {
    bool ok = ctx.rank() == 1
                  ? e.sendMany(buf.data(), 8, 1) && e.recvMany(buf.data(), 8, 1)
                  : e.recvMany(buf.data(), 8, 1) && e.sendMany(buf.data(), 8, 1);
    if (!ok) return -1;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
         rounds / 2;
}

// Every figure, both ways, interleaved (plugin, transport, plugin, ...) so that the machine's
// load falls on both alike; rank 1 prints the table.
int measure(RankContext& ctx, const char* link, double bytesBudget) {
  NetApi api(LOOM_NCCL_NET_PLUGIN, 11);
  std::unique_ptr<Endpoint> ends[2] = {pluginEndpoint(ctx, api), transportEndpoint(ctx)};
  RANK_CHECK(ends[0] && ends[1], "could not connect (%s)", api.error().c_str());
  std::vector<char> buf(size_t(64) << 20, 1);
  if (ctx.rank() == 1) printf("%-12s %-14s %14s %14s %8s\n", "link", "figure", "plugin", "loom tcp",
                              "ratio");
  for (size_t mib : {1, 4, 16, 64}) {
    const size_t bytes = mib << 20;
    const int count = std::max(2, int(bytesBudget / double(bytes)));
    std::vector<double> got[2];
    for (int rep = 0; rep < kRepeats; ++rep)
      for (int k = 0; k < 2; ++k) got[k].push_back(bandwidth(ctx, *ends[k], buf, bytes, count));
    if (ctx.rank() == 1)
      printf("%-12s %3zu MiB GB/s   %14.3f %14.3f %8.3f\n", link, mib, median(got[0]) / 1e9,
             median(got[1]) / 1e9, median(got[0]) / median(got[1]));
    fflush(stdout);
  }
  std::vector<double> lat[2];
  for (int rep = 0; rep < kLatencyRepeats; ++rep)
    for (int k = 0; k < 2; ++k) lat[k].push_back(latency(ctx, *ends[k], buf, kLatencyRounds));
  if (ctx.rank() == 1)
    printf("%-12s %-14s %14.2f %14.2f %8.3f\n", link, "8 B lat. us", median(lat[0]) * 1e6,
           median(lat[1]) * 1e6, median(lat[0]) / median(lat[1]));
  fflush(stdout);  // a rank leaves by _exit
  ctx.allgather("");
  return 0;
}

// Unpinned: on a machine busy with other work, a pinned rank waits for its one core.
ForkOptions benchOptions() { return ForkOptions::timeout(600); }

TEST(NcclNetBench, Loopback) {
  auto results = runRanks(2, [](RankContext& ctx) { return measure(ctx, "loopback", 1 << 30); },
                          benchOptions());
  EXPECT_EQ(describeFailures(results), "");
}

class NcclNetBenchTwoHosts : public TwoHostsTest {};

TEST_F(NcclNetBenchTwoHosts, OneGbit) {
  ASSERT_TRUE(shapeLinks("1gbit", 64 << 10)) << "tc refused to shape the links";
  const std::vector<std::string> hosts = hosts_;
  auto results = runRanks(
      2,
      [&](RankContext& ctx) {
        if (TwoHostsTest::enter(hosts[size_t(ctx.rank())]) != 0) return 2;
        return measure(ctx, "netns 1Gbit", 128 << 20);
      },
      benchOptions());
  EXPECT_EQ(describeFailures(results), "");
}

}  // namespace
}  // namespace loom::testing
