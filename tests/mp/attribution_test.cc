// Fault attribution: when one rank dies (SIGKILL), stops (SIGSTOP) or loses its link mid-
// allreduce, every other rank's error names that rank as the first cause, within a deadline,
// with or without the machine's cores busy; when one rank's allreduce mismatches the others'
// (another count), every rank's call ends with an error within the deadline, each survivor's
// naming that rank. A stopped rank is told from a slow one by
// LOOM_TIMEOUT_MS alone: the rank whose wait for it expires first reports it, and the others,
// which wait on ranks that wait on it, are then told "because rank V failed".
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "loom/loom.h"
#include "tests/support/comm_harness.h"
#include "tests/support/fork_ranks.h"
#include "tests/support/rank_sets.h"
#include "tests/support/two_hosts.h"

namespace loom::testing {
namespace {

enum class Fault { Kill, Stop, LinkDown, Mismatch };

const char* faultName(Fault f) {
  return f == Fault::Kill       ? "Kill"
         : f == Fault::Stop     ? "Stop"
         : f == Fault::Mismatch ? "Mismatch"
                                : "LinkDown";
}

// The rank an error blames as the first cause: the origin a relayed cause names ("because rank
// R failed", or the root's "rank R lost its bootstrap connection"), else the rank that relayed
// it ("aborted by a peer: rank R"), else the first other rank the error itself names (the peer
// whose connection closed or that never answered). -1: none.
int blamedRank(const std::string& msg, int self) {
  std::smatch m;
  static const std::regex because("because rank (\\d+) failed");
  static const std::regex lost("rank (\\d+) lost its bootstrap connection");
  static const std::regex relayed("aborted by a peer: rank (\\d+)");
  for (const std::regex* re : {&because, &lost, &relayed})
    if (std::regex_search(msg, m, *re)) return std::stoi(m[1]);
  static const std::regex any("rank (\\d+)");
  for (auto it = std::sregex_iterator(msg.begin(), msg.end(), any); it != std::sregex_iterator();
       ++it)
    if (std::stoi((*it)[1]) != self) return std::stoi((*it)[1]);
  return -1;
}

// A mismatch has no single first cause (the ranks that see it each report it, their peers are
// told): an error is right where it names the rank whose call differed, anywhere.
bool namesRank(const std::string& msg, int rank) {
  return std::regex_search(msg, std::regex("rank " + std::to_string(rank) + "\\b"));
}

// What the ranks share across fork: survivors count themselves done here, and the last one
// ends a stopped victim (which cannot end itself) so that the run does not wait for the
// launcher's deadline.
struct Shared {
  std::atomic<int> done{0};
  std::atomic<int> victimPid{0};
  std::atomic<int> named{0};  // survivors whose error blamed the victim
  std::atomic<bool> mismatched{false};  // Fault::Mismatch: the victim's calls differ from now on
};

Shared* mapShared() {
  void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                 0);
  return p == MAP_FAILED ? nullptr : new (p) Shared;
}

// Processes that spin on the machine's cores for as long as this object lives (faults under
// load: the ranks share the cores with them).
class BusyCores {
 public:
  explicit BusyCores(int count) {
    for (int i = 0; i < count; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);  // a test that crashes leaves no spinner behind
        volatile unsigned long spin = 0;
        for (;;) spin = spin + 1;
      }
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~BusyCores() {
    for (pid_t pid : pids_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }

 private:
  std::vector<pid_t> pids_;
};

// Each survivor's line on what it was told and when (the figures of docs/RELIABILITY.md).
void printAttributions(const std::vector<RankResult>& results) {
  for (const RankResult& r : results)
    for (const std::string& line : linesWith(r.output, "ATTRIBUTION")) printf("%s\n", line.c_str());
}

struct Case {
  const char* transport;  // null: each pair's own (the netns hosts)
  int nranks;
  Fault fault;
  bool underLoad;
  const char* ucxTls = nullptr;  // for ucx: UCX_TLS (null: UCX's default choice)
};

// A rank's run: allreduces of 4 MiB until one fails; the victim's fault strikes 300 ms in
// (fault() runs on a thread of the victim). Survivors check what their error names.
int runRank(RankContext& ctx, const Case& c, int victim, Shared* shared,
            const std::function<void()>& fault) {
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.transport = c.transport;  // null: shm within a host, tcp across
  // A death is seen when its connections close, and a mismatch in the messages' stamps, long
  // before any timeout: a 60 s timeout shows that detection does not rely on it. A stop or a
  // downed link is seen by the timeout only.
  config.timeoutMs = c.fault == Fault::Kill || c.fault == Fault::Mismatch ? 60000 : 3000;
  loomComm_t comm = nullptr;
  RANK_LOOM(initComm(ctx, &comm, &config));
  std::vector<float> a(1 << 20, 1.0f), b(1 << 20);
  RANK_LOOM(loomAllReduce(a.data(), b.data(), a.size(), loomFloat32, loomSum, comm, nullptr));
  const auto faultAt = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  if (ctx.rank() == victim) {
    shared->victimPid = getpid();
    std::thread([faultAt, fault] {
      std::this_thread::sleep_until(faultAt);
      fault();
    }).detach();
  }
  loomResult_t rc = loomSuccess;
  for (int i = 0; i < 1000000 && rc == loomSuccess; ++i) {
    // A mismatching victim's calls from its fault on have half the others' count.
    const size_t count = shared->mismatched && ctx.rank() == victim ? a.size() / 2 : a.size();
    rc = loomAllReduce(a.data(), b.data(), count, loomFloat32, loomSum, comm, nullptr);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - faultAt).count();
  const std::string msg = loomGetLastError(comm);
  if (ctx.rank() == victim) {
    // A mismatching victim's call ends in an error like the others'; a downed link's victim
    // fails too, but what it says is moot.
    if (c.fault != Fault::Mismatch) return 0;
    RANK_CHECK(rc != loomSuccess && seconds < 10, "the victim: %s after %.1f s: %s",
               loomGetErrorString(rc), seconds, msg.c_str());
    RANK_LOOM(loomCommAbort(comm));
    return 0;
  }
  const bool mismatch = c.fault == Fault::Mismatch;
  const int blamed = mismatch ? (namesRank(msg, victim) ? victim : -1) : blamedRank(msg, ctx.rank());
  if (blamed == victim) ++shared->named;
  fprintf(stderr, "ATTRIBUTION %s n=%d %s%s rank %d after %.2f s blamed %d: %s\n",
          c.transport == nullptr ? "netns" : c.transport,
          c.nranks, faultName(c.fault), c.underLoad ? " underLoad" : "", ctx.rank(), seconds,
          blamed, msg.c_str());
  if (++shared->done == c.nranks - 1 && c.fault == Fault::Stop) kill(shared->victimPid, SIGKILL);
  RANK_CHECK(rc != loomSuccess, "the loop ended without an error");
  RANK_CHECK(seconds < 10, "the error took %.1f s: %s", seconds, msg.c_str());
  RANK_CHECK(blamed == victim, "blamed rank %d, not the victim %d: %s", blamed, victim,
             msg.c_str());
  RANK_LOOM(loomCommAbort(comm));
  return 0;
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << (c.transport == nullptr ? "netns" : c.transport)
      << (c.ucxTls == nullptr ? "" : std::string(" UCX_TLS=") + c.ucxTls) << " " << c.nranks
      << " ranks "
      << faultName(c.fault) << (c.underLoad ? " underLoad" : "");
}

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  const std::string tls = c.ucxTls == nullptr ? "" : std::string("_") + c.ucxTls;
  return std::string(c.transport) + tls + "_" + std::to_string(c.nranks) + "ranks_" +
         faultName(c.fault) + (c.underLoad ? "_underLoad" : "");
}

class FaultAttribution : public ::testing::TestWithParam<Case> {};

TEST_P(FaultAttribution, EverySurvivorNamesTheVictim) {
  const Case c = GetParam();
  const int victim = c.nranks / 2;  // not rank 0, whose process holds the bootstrap root
  Shared* shared = mapShared();
  ASSERT_NE(shared, nullptr);
  const bool mismatch = c.fault == Fault::Mismatch;
  ForkOptions options;
  options.timeoutSec = 40;
  if (!mismatch) options.expectedToDie = {victim};
  const int signal = c.fault == Fault::Kill ? SIGKILL : SIGSTOP;
  std::vector<RankResult> results;
  {
    RankSetEnvironment environment(RankSet{c.nranks, c.transport, c.ucxTls});
    BusyCores busy(c.underLoad ? 2 : 0);
    results = runRanks(c.nranks, [&](RankContext& ctx) {
      return runRank(ctx, c, victim, shared, [signal, mismatch, shared] {
        if (mismatch) shared->mismatched = true;
        else raise(signal);
      });
    }, options);
  }
  printAttributions(results);
  EXPECT_EQ(describeFailures(results, options), "");
  EXPECT_EQ(shared->named.load(), c.nranks - 1) << "survivors that named the victim";
  if (!mismatch) {
    EXPECT_EQ(results[victim].signal, SIGKILL);
  }
  munmap(shared, sizeof(Shared));
}

// Kills and stops over every transport and several sizes (a stop is seen by the timeout
// only); the same under load where the ranks outnumber the free cores most; mismatches under
// load.
INSTANTIATE_TEST_SUITE_P(
    Faults, FaultAttribution,
    ::testing::Values(Case{"shm", 2, Fault::Kill, false}, Case{"shm", 4, Fault::Kill, false},
                      Case{"tcp", 2, Fault::Kill, false}, Case{"tcp", 4, Fault::Kill, false},
                      Case{"tcp", 8, Fault::Kill, false}, Case{"shm", 4, Fault::Stop, false},
                      Case{"tcp", 2, Fault::Stop, false}, Case{"tcp", 4, Fault::Stop, false},
                      Case{"tcp", 8, Fault::Stop, false}, Case{"shm", 4, Fault::Kill, true},
                      Case{"tcp", 8, Fault::Kill, true}, Case{"tcp", 4, Fault::Stop, true},
                      Case{"shm", 2, Fault::Mismatch, true}, Case{"shm", 4, Fault::Mismatch, true},
                      Case{"tcp", 2, Fault::Mismatch, true},
                      Case{"tcp", 4, Fault::Mismatch, true},
                      // UCX (label ucx): over its TCP, its shared memory and its default.
                      Case{"ucx", 4, Fault::Kill, false, "tcp"},
                      Case{"ucx", 4, Fault::Kill, false, "sm"}, Case{"ucx", 4, Fault::Kill, false},
                      Case{"ucx", 4, Fault::Stop, false, "tcp"},
                      Case{"ucx", 4, Fault::Stop, false, "sm"}, Case{"ucx", 4, Fault::Stop, false}),
    caseName);

// A host's link goes down under a rank: the others, on the other host, see only silence.
class LinkDownTwoHosts : public TwoHostsTest, public ::testing::WithParamInterface<bool> {};

TEST_P(LinkDownTwoHosts, TheOtherHostNamesTheCutOffRank) {
  const Case c{nullptr, 3, Fault::LinkDown, GetParam()};
  const int victim = 2;  // ranks 0, 1 on host A; rank 2 alone on host B
  Shared* shared = mapShared();
  ASSERT_NE(shared, nullptr);
  ForkOptions options;
  options.timeoutSec = 40;
  options.expectedToDie = {victim};
  const std::string a = hostA_, b = hostB_, downB = "ip link set " + veths_[1] + " down";
  std::vector<RankResult> results;
  {
    RankSetEnvironment environment(RankSet{c.nranks, c.transport, c.ucxTls});
    BusyCores busy(c.underLoad ? 2 : 0);
    results = runRanks(c.nranks, [&](RankContext& ctx) {
      RANK_CHECK(enter(ctx.rank() == victim ? b : a) == 0, "setns failed");
      return runRank(ctx, c, victim, shared, [downB] {
        if (system(downB.c_str()) != 0) fprintf(stderr, "could not down the link\n");
      });
    }, options);
  }
  printAttributions(results);
  EXPECT_EQ(describeFailures(results, options), "");
  EXPECT_EQ(shared->named.load(), c.nranks - 1) << "survivors that named the victim";
  munmap(shared, sizeof(Shared));
}

INSTANTIATE_TEST_SUITE_P(Load, LinkDownTwoHosts, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "underLoad" : "idle");
                         });

}  // namespace
}  // namespace loom::testing
