// The tests' view of the fork launcher (toolkit/fork_ranks.h): its names in loom::testing, and
// the check a rank function reports a failure with.
#pragma once

#include <cstdio>

#include "toolkit/fork_ranks.h"

namespace loom::testing {

using toolkit::describeFailures;
using toolkit::ForkOptions;
using toolkit::RankContext;
using toolkit::RankResult;
using toolkit::runRanks;

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
