#include "perf/launch.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace loom::perf {

namespace {

// Exit 1 is a finished run with wrong results; anything above it, or a signal, is a failure.
constexpr int kFinishedWithWrongResults = 1;

}  // namespace

int runForkedRanks(const Options& options, const std::function<int(toolkit::RankContext&)>& body) {
  if (options.nranks < 1) return 2;
  toolkit::ForkOptions fork;
  fork.timeoutSec = 0;
  fork.captureOutput = false;
  fork.bindCores = options.bindCores;
  fork.stopOthersAboveExit = kFinishedWithWrongResults;
  const std::vector<toolkit::RankResult> results = toolkit::runRanks(options.nranks, body, fork);
  int finished = 0;
  for (size_t r = 0; r < results.size(); ++r) {
    const toolkit::RankResult& rank = results[r];
    if (rank.stopped) continue;  // stopped because another failed
    if (rank.signal != 0) {
      std::fprintf(stderr, "rank %zu died of signal %d (%s)\n", r, rank.signal,
                   strsignal(rank.signal));
      return 128 + rank.signal;
    }
    if (rank.exitCode > kFinishedWithWrongResults) return rank.exitCode;
    if (rank.exitCode == kFinishedWithWrongResults) finished = kFinishedWithWrongResults;
  }
  return finished;
}

bool shareFromRank0(toolkit::RankContext& self, void* data, size_t bytes) {
  const std::string mine =
      self.rank() == 0 ? std::string(static_cast<const char*>(data), bytes) : std::string();
  const std::vector<std::string> all = self.allgather(mine);
  if (all[0].size() != bytes) return false;
  std::memcpy(data, all[0].data(), bytes);
  return true;
}

}  // namespace loom::perf
