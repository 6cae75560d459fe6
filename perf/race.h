// --race's parts beside the sweep itself (sweep.h's runRace): each contestant's files and
// variables, and the closing report of regrets.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "perf/output.h"
#include "perf/sweep.h"

namespace loom::perf {

/** A contestant's --json / --csv file: FILE with "-LABEL" before its extension (a plain sweep,
 *  without a label, writes FILE itself). */
std::string contestantPath(const std::string& path, const std::string& label);

/** The process's LOOM_* variables with the contestant's own on top, sorted by name. */
std::vector<std::pair<std::string, std::string>> contestantEnvironment(const Contestant& who);

/** --race's closing report: for each contestant that chose its own algorithm, every row's
 *  median time against the fastest forced contestant's of the same row, and how many rows are
 *  within 10%; then the same round by round (pairedRatio) against the forced contestant it
 *  trails most, which the machine's drift between rounds does not move. rows[i] are contestant
 *  i's rows, all in the same order. */
std::string formatRegrets(const std::vector<Contestant>& contestants, Collective c,
                          const std::vector<std::vector<ResultRow>>& rows, int rounds);

}  // namespace loom::perf
