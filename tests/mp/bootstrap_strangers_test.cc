// The bootstrap root among strangers: whoever reaches its port (a port scan, a stale job, a
// broken client) may connect and send garbage, nothing, half a hello or a wrong secret, before
// and while the real ranks join. The root must drop them without holding up the ranks, and say
// so in its log.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/socket.h"
#include "comm/bootstrap.h"
#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"

namespace loom::testing {
namespace {

constexpr int kRanks = 4;
// Init of 4 ranks takes well under a second here; the root waits up to 5 s for a connection's
// hello, so one stranger it waited for in turn would push init past this.
constexpr double kInitBoundSeconds = 3.0;

// Opens a connection to the root and sends `bytes` (none: a half-open connection that says
// nothing). The socket stays open until the caller closes it.
int stranger(const net::Address& root, const std::string& bytes) {
  int fd = -1;
  if (!net::connectTo(root, Deadline(5000), &fd).isOk()) return -1;
  if (!bytes.empty() && !net::sendAll(fd, bytes.data(), bytes.size(), Deadline(5000)).isOk()) {
    close(fd);
    return -1;
  }
  return fd;
}

// What strangers send: nothing, an HTTP request, half a hello, a whole hello with the wrong
// secret, and a hello that claims 2^31-1 ranks with the wrong secret.
std::vector<std::string> strangerPayloads() {
  BootstrapHello wrong = {kUniqueIdMagic, {}, 0, kRanks, -1};
  memset(wrong.secret, 0x5a, sizeof(wrong.secret));
  BootstrapHello huge = wrong;
  huge.nranks = 0x7fffffff;
  const std::string wrongBytes(reinterpret_cast<const char*>(&wrong), sizeof(wrong));
  return {"", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", wrongBytes.substr(0, 10), wrongBytes,
          std::string(reinterpret_cast<const char*>(&huge), sizeof(huge))};
}

// Connects strangers to the root over and over, from its own thread, until destroyed: a port
// scan (connect, close) and strangerPayloads, each left open until the end.
class Scanner {
 public:
  explicit Scanner(const net::Address& root)
      : thread_([this, root] {
          std::vector<int> open;
          while (!done_.load()) {
            close(stranger(root, ""));
            for (const std::string& p : strangerPayloads()) open.push_back(stranger(root, p));
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
          }
          for (int fd : open) close(fd);
        }) {}
  ~Scanner() {
    done_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

TEST(BootstrapStrangers, GarbageAndHalfOpenConnectionsDoNotStallInit) {
  auto results = runRanks(kRanks, [](RankContext& ctx) {
    loomUniqueId id;
    std::string mine;
    std::vector<int> open;
    std::unique_ptr<Scanner> scanner;
    if (ctx.rank() == 0) {
      RANK_LOOM(loomGetUniqueId(&id));
      UniqueIdData data;
      net::Address root;
      RANK_CHECK(decodeUniqueId(id, &data, &root).isOk(), "cannot decode the id");
      // Before any rank joins: the root accepts these first.
      for (const std::string& p : strangerPayloads()) {
        const int fd = stranger(root, p);
        RANK_CHECK(fd >= 0, "cannot reach the root");
        open.push_back(fd);
      }
      // While the ranks join and run.
      scanner = std::make_unique<Scanner>(root);
      mine.assign(id.internal, sizeof(id.internal));
    }
    memcpy(id.internal, ctx.allgather(mine)[0].data(), sizeof(id.internal));
    loomComm_t comm = nullptr;
    const auto start = Clock::now();
    RANK_LOOM(loomCommInitRank(&comm, kRanks, id, ctx.rank()));
    const double initSeconds = secondsSince(start);
    int64_t v = ctx.rank() + 1, sum = 0;
    RANK_LOOM(loomAllReduce(&v, &sum, 1, loomInt64, loomSum, comm, nullptr));
    RANK_CHECK(sum == kRanks * (kRanks + 1) / 2, "sum %lld", (long long)sum);
    // Before the root closes: a connect to a closed port is retried until its deadline.
    scanner.reset();
    RANK_LOOM(loomCommDestroy(comm));
    for (int fd : open) close(fd);
    RANK_CHECK(initSeconds < kInitBoundSeconds, "init took %.2f s among strangers", initSeconds);
    return 0;
  }, ForkOptions::timeout(60));
  EXPECT_EQ(describeFailures(results), "");
  // The root runs in rank 0: it said why it dropped the strangers.
  const std::string& log = results[0].output;
  EXPECT_NE(log.find("dropped a connection that did not prove the secret"), std::string::npos)
      << log;
  EXPECT_NE(log.find("dropped a connection that closed before sending a whole hello"),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace loom::testing
