// Multi-process test harness: forks N ranks, gives them a way to exchange bytes (an
// allgather over pipes through the parent), and bounds the whole run with a deadline so a
// hung rank fails the test instead of hanging it.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace loom::testing {

class RankContext {
 public:
  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  // Every rank contributes `mine` (any length); returns all contributions by rank.
  // Also a barrier.
  std::vector<std::string> allgather(const std::string& mine);

 private:
  friend struct ForkRunner;
  int rank_ = 0, nranks_ = 1;
  int toParent_ = -1, fromParent_ = -1;
};

struct RankResult {
  int exitCode = -1;      // the function's return value (0 = pass); -1 if killed
  int signal = 0;         // non-zero when the rank died of a signal
  std::string output;     // what it wrote to stderr (its failure messages)
};

struct ForkOptions {
  int timeoutSec = 120;   // the whole run; ranks still alive then are killed
  // Ranks whose exit is expected not to be 0 (fault tests): their status is not an error.
  std::vector<int> expectedToDie;
  static ForkOptions timeout(int sec) {
    ForkOptions o;
    o.timeoutSec = sec;
    return o;
  }
};

// Runs fn(ctx) in n forked processes. Returns each rank's result. fn returns 0 on success;
// anything it prints to stderr is captured. Use expectRanksPass() in gtest.
std::vector<RankResult> runRanks(int n, const std::function<int(RankContext&)>& fn,
                                 const ForkOptions& options = {});

// A gtest assertion message if any rank failed, empty if all passed.
std::string describeFailures(const std::vector<RankResult>& results,
                             const ForkOptions& options = {});

}  // namespace loom::testing

// Inside a rank: report a failure and return 1 from the rank function.
#define RANK_CHECK(cond, ...)                                              \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                        \
      fprintf(stderr, "\n");                                               \
      return 1;                                                            \
    }                                                                      \
  } while (0)
