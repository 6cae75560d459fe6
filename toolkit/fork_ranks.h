// The fork launcher of the programs above libloom (tests, loom-perf, its Gloo peer, the
// transport benchmarks): forks N ranks, gives them a way to exchange bytes (an allgather over
// pipes through the parent), and can bound the whole run with a deadline so that a hung rank
// fails instead of hanging. Forking comes before any library call, so no rank inherits another's
// threads or sockets.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace loom::toolkit {

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
  int exitCode = -1;     // the function's return value (0 = pass); -1 if killed
  int signal = 0;        // non-zero when the rank died of a signal
  bool stopped = false;  // killed by the launcher: past the deadline, or another rank failed
  std::string output;    // what it wrote to stderr (its failure messages), when captured
};

struct ForkOptions {
  int timeoutSec = 120;  // the whole run; ranks still alive then are killed. 0: no deadline
  // Ranks whose exit is expected not to be 0 (fault tests): their status is not an error.
  std::vector<int> expectedToDie;
  // Whether the ranks' stderr goes into RankResult::output (else to the launcher's stderr).
  bool captureOutput = true;
  // Pin rank r to the (r mod count)-th CPU this process may use.
  bool bindCores = false;
  // A rank that dies of a signal or exits with more than this stops the others (SIGTERM),
  // which would otherwise wait for it forever in a collective; -1: they run on.
  int stopOthersAboveExit = -1;
  static ForkOptions timeout(int sec) {
    ForkOptions o;
    o.timeoutSec = sec;
    return o;
  }
};

// Runs fn(ctx) in n forked processes and returns each rank's result. fn returns 0 on
// success. A rank does not outlive the launcher.
std::vector<RankResult> runRanks(int n, const std::function<int(RankContext&)>& fn,
                                 const ForkOptions& options = {});

// A message naming every rank that failed (with its output), empty if all passed.
std::string describeFailures(const std::vector<RankResult>& results,
                             const ForkOptions& options = {});

}  // namespace loom::toolkit
