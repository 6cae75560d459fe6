// Ranks on two "hosts": network namespaces joined by a veth pair. Ranks in one namespace talk
// over shared memory, across namespaces over TCP, inside one communicator. Needs root and
// iproute2; skips (and says why) otherwise.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"
#include "tests/support/values.h"

namespace loom::testing {
namespace {

// Two namespaces "lmA<pid>" and "lmB<pid>" with a veth pair between them. The addresses live
// only inside these namespaces; nothing leaves the machine.
class TwoHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to create network namespaces";
    if (system("ip -V > /dev/null 2>&1") != 0) GTEST_SKIP() << "needs iproute2 (ip)";
    std::string id = std::to_string(getpid() % 100000);
    a_ = "lmA" + id, b_ = "lmB" + id;
    subnet_ = "10.213." + std::to_string(getpid() % 250) + ".";
    std::string va = "va" + id, vb = "vb" + id;
    std::string script =
        "set -e; ip netns add " + a_ + "; ip netns add " + b_ + "; ip link add " + va +
        " type veth peer name " + vb + "; ip link set " + va + " netns " + a_ +
        "; ip link set " + vb + " netns " + b_ + "; ip -n " + a_ + " addr add " + subnet_ +
        "1/24 dev " + va + "; ip -n " + b_ + " addr add " + subnet_ + "2/24 dev " + vb +
        "; ip -n " + a_ + " link set " + va + " up; ip -n " + b_ + " link set " + vb +
        " up; ip -n " + a_ + " link set lo up; ip -n " + b_ + " link set lo up";
    if (system(("(" + script + ") > /tmp/loom-netns.log 2>&1").c_str()) != 0) {
      TearDown();
      GTEST_SKIP() << "could not create network namespaces (see /tmp/loom-netns.log); a "
                      "container without CAP_NET_ADMIN?";
    }
    created_ = true;
  }
  void TearDown() override {
    if (a_.empty()) return;
    // Deleting a namespace removes its end of the veth pair, and with it the other end.
    system(("ip netns del " + a_ + " 2>/dev/null; ip netns del " + b_ + " 2>/dev/null").c_str());
  }

  // Moves the calling (forked) rank into host h's namespace and points loom at its veth.
  static int enter(const std::string& ns) {
    int fd = open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) return -1;
    close(fd);
    setenv("LOOM_SOCKET_IFNAME", "v", 1);  // the veth ("va…"/"vb…"), not loopback
    return 0;
  }

  std::string a_, b_, subnet_;
  bool created_ = false;
};

TEST_F(TwoHosts, ShmInsideTcpAcrossEveryCollective) {
  const int n = 4;  // ranks 0,1 on host A; 2,3 on host B
  std::string a = a_, b = b_;
  auto results = runRanks(n, [&](RankContext& ctx) {
    RANK_CHECK(enter(ctx.rank() < 2 ? a : b) == 0, "setns failed");
    loomComm_t comm = nullptr;
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.timeoutMs = 30000;
    RANK_LOOM(initComm(ctx, &comm, &config));
    for (uint64_t count : {uint64_t(0), uint64_t(1), uint64_t(1001), uint64_t(1) << 20}) {
      for (loomRedOp_t op : {loomSum, loomMax}) {
        std::vector<float> in(count + 1), out(count + 1);
        fillInput(in.data(), count, op, loomFloat32, n, ctx.rank());
        RANK_LOOM(loomAllReduce(in.data(), out.data(), count, loomFloat32, op, comm, nullptr));
        uint64_t bad = countReductionErrors(out.data(), count, op, loomFloat32, n);
        RANK_CHECK(bad == 0, "allreduce count %llu: %llu wrong", (unsigned long long)count,
                   (unsigned long long)bad);
      }
      std::vector<int32_t> mine(count + 1, ctx.rank() * 10 + 1), all(count * n + 1);
      RANK_LOOM(loomAllGather(mine.data(), all.data(), count, loomInt32, comm, nullptr));
      for (uint64_t i = 0; i < count * n; ++i)
        RANK_CHECK(all[i] == int32_t(i / count) * 10 + 1, "allgather element %llu",
                   (unsigned long long)i);
      std::vector<int32_t> bc(count + 1, ctx.rank() == 3 ? 77 : 0);
      RANK_LOOM(loomBroadcast(bc.data(), bc.data(), count, loomInt32, 3, comm, nullptr));
      for (uint64_t i = 0; i < count; ++i) RANK_CHECK(bc[i] == 77, "broadcast");
      std::vector<int32_t> send(count * n + 1), recv(count * n + 1);
      for (uint64_t i = 0; i < count * n; ++i) send[i] = int32_t(ctx.rank() * 1000 + i / count);
      RANK_LOOM(loomAlltoAll(send.data(), recv.data(), count, loomInt32, comm, nullptr));
      for (uint64_t i = 0; i < count * n; ++i)
        RANK_CHECK(recv[i] == int32_t((i / count) * 1000 + ctx.rank()), "alltoall");
    }
    RANK_LOOM(loomCommDestroy(comm));
    return 0;
  }, ForkOptions::timeout(120));
  EXPECT_EQ(describeFailures(results), "");
}

}  // namespace
}  // namespace loom::testing
