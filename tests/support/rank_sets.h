// The sets of forked ranks the multi-process suites run on, and their gtest names.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <ostream>
#include <string>

namespace loom::testing {

// N ranks over one transport ("shm", "tcp" or "ucx"); for ucx, the UCX transports UCX may use
// (UCX_TLS: "tcp", "sm"...; null: UCX's default choice).
struct RankSet {
  int nranks;
  const char* transport;
  const char* ucxTls = nullptr;
};

inline void PrintTo(const RankSet& s, std::ostream* os) {
  *os << s.transport << (s.ucxTls ? std::string(" UCX_TLS=") + s.ucxTls : "") << " x" << s.nranks;
}

// "shm4", "tcp8", "ucx_sm4", "ucx3": names for INSTANTIATE_TEST_SUITE_P.
inline std::string rankSetName(const ::testing::TestParamInfo<RankSet>& info) {
  std::string tls = info.param.ucxTls ? std::string("_") + info.param.ucxTls : "";
  for (char& c : tls)
    if (c == ',') c = '_';
  return std::string(info.param.transport) + tls + std::to_string(info.param.nranks);
}

// Sets UCX_TLS as the set asks for the ranks forked while it lives (they inherit it; UCX reads
// it when a communicator creates its UCX context), and restores it after.
class RankSetEnvironment {
 public:
  explicit RankSetEnvironment(const RankSet& s) {
    if (s.ucxTls == nullptr) return;
    if (const char* old = getenv("UCX_TLS")) old_ = old, had_ = true;
    setenv("UCX_TLS", s.ucxTls, 1);
    set_ = true;
  }
  ~RankSetEnvironment() {
    if (!set_) return;
    if (had_) setenv("UCX_TLS", old_.c_str(), 1);
    else unsetenv("UCX_TLS");
  }
  RankSetEnvironment(const RankSetEnvironment&) = delete;
  RankSetEnvironment& operator=(const RankSetEnvironment&) = delete;

 private:
  bool set_ = false, had_ = false;
  std::string old_;
};

// The UCX transport's sets (ctest runs them under the "ucx." prefix and label): over UCX's TCP,
// over its shared memory (posix/sysv mappings and CMA: UCX_TLS=sm), and as UCX chooses, between
// them 2 to 8 ranks (the suites that take one rank add RankSet{1, "ucx"}).
#define LOOM_UCX_RANK_SETS                                                                     \
  RankSet{2, "ucx", "tcp"}, RankSet{3, "ucx", "tcp"}, RankSet{8, "ucx", "tcp"},               \
      RankSet{2, "ucx", "sm"}, RankSet{4, "ucx", "sm"}, RankSet{6, "ucx", "sm"},              \
      RankSet{4, "ucx"}, RankSet{5, "ucx"}
// Fewer for the forced-algorithm suites, whose every set runs each algorithm on many cases:
// one rank count per UCX_TLS, a power of two and not.
#define LOOM_UCX_ALGORITHM_RANK_SETS \
  RankSet{2, "ucx", "tcp"}, RankSet{4, "ucx", "sm"}, RankSet{3, "ucx"}

// Whether a suite's heavy cases (64 MiB buffers) run on s: on every shm set, on tcp at 2 and 3
// ranks (a power of two and not) and on UCX at 2 ranks, to keep the test command's time down:
// more ranks over the same transport move the same bytes through the same paths, and the
// forced-algorithm suites run every rank count at smaller sizes.
inline bool runsHeavyCases(const RankSet& s) {
  const std::string transport = s.transport;
  if (transport == "ucx") return s.nranks == 2;
  if (transport == "tcp") return s.nranks <= 3;
  return true;
}

// Rank counts for forced-algorithm suites: powers of two and not, over every transport.
inline auto algorithmRankSets() {
  return ::testing::Values(RankSet{2, "shm"}, RankSet{3, "shm"}, RankSet{4, "shm"},
                           RankSet{6, "shm"}, RankSet{8, "shm"}, RankSet{2, "tcp"},
                           RankSet{3, "tcp"}, RankSet{4, "tcp"}, RankSet{6, "tcp"},
                           RankSet{8, "tcp"}, LOOM_UCX_ALGORITHM_RANK_SETS);
}

}  // namespace loom::testing
