// -N: loom-perf and loom-gloo-perf fork their ranks on this host through the toolkit's fork
// launcher (toolkit/fork_ranks.h).
#pragma once

#include <cstddef>
#include <functional>

#include "perf/options.h"
#include "toolkit/fork_ranks.h"

namespace loom::perf {

/** Forks options.nranks ranks (bound to a CPU each under --bind core), runs body in each and
 *  waits for them. When a rank fails the others are stopped rather than left waiting for it in
 *  a collective; a rank that finished with wrong results (exit 1) lets the others finish too
 *  (rank 0 still prints its footer and files). Returns 0 when all exit 0, 1 when some found
 *  wrong results, else the failed rank's code (128 + the signal of one that died). */
int runForkedRanks(const Options& options, const std::function<int(toolkit::RankContext&)>& body);

/** Rank 0's `bytes` at data, to every rank (a bootstrap id): every rank calls it. */
bool shareFromRank0(toolkit::RankContext& self, void* data, size_t bytes);

}  // namespace loom::perf
