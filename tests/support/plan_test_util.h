// Helpers shared by the plan-verification test files.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "collectives/plan.h"

namespace loom::test {

// A call's arguments with the fields every builder reads; the rest keep their defaults.
collectives::CollArgs makeArgs(collectives::Collective coll, int n, uint64_t count,
                               int lanes = 1, int root = 0);

// Runs check(i) for i in [0, jobs) on every core (builders and the verifier are pure, so the
// cases are independent). Returns the failure of the lowest failing case, or "".
std::string forEachParallel(size_t jobs, const std::function<std::string(size_t)>& check);

}  // namespace loom::test
