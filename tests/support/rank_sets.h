// The sets of forked ranks the multi-process suites run on, and their gtest names.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>

namespace loom::testing {

// N ranks over one transport ("shm" or "tcp").
struct RankSet {
  int nranks;
  const char* transport;
};

inline void PrintTo(const RankSet& s, std::ostream* os) {
  *os << s.transport << " x" << s.nranks;
}

// "shm4", "tcp8": names for INSTANTIATE_TEST_SUITE_P.
inline std::string rankSetName(const ::testing::TestParamInfo<RankSet>& info) {
  return std::string(info.param.transport) + std::to_string(info.param.nranks);
}

// Rank counts for forced-algorithm suites: powers of two and not, over both transports.
inline auto algorithmRankSets() {
  return ::testing::Values(RankSet{2, "shm"}, RankSet{3, "shm"}, RankSet{4, "shm"},
                           RankSet{6, "shm"}, RankSet{8, "shm"}, RankSet{2, "tcp"},
                           RankSet{3, "tcp"}, RankSet{4, "tcp"}, RankSet{6, "tcp"},
                           RankSet{8, "tcp"});
}

}  // namespace loom::testing
