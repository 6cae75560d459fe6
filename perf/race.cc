#include "perf/race.h"

#include <cctype>
#include <map>

#include "base/status.h"

namespace loom::perf {

std::string contestantPath(const std::string& path, const std::string& label) {
  if (path.empty() || label.empty()) return path;
  std::string tag;
  for (char ch : label) tag += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '-';
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  const bool hasExtension = dot != std::string::npos && (slash == std::string::npos || dot > slash);
  const size_t at = hasExtension ? dot : path.size();
  return path.substr(0, at) + "-" + tag + path.substr(at);
}

std::vector<std::pair<std::string, std::string>> contestantEnvironment(const Contestant& who) {
  std::map<std::string, std::string> env;
  for (const auto& [key, value] : loomEnvironment()) env[key] = value;
  for (const auto& [key, value] : who.env) env[key] = value;
  return {env.begin(), env.end()};
}

std::string formatRegrets(const std::vector<Contestant>& contestants, Collective c,
                          const std::vector<std::vector<ResultRow>>& rows, int rounds) {
  std::vector<size_t> forced, choosing;
  for (size_t i = 0; i < contestants.size(); ++i)
    (contestants[i].backend->algorithm(c) == "auto" ? choosing : forced).push_back(i);
  if (forced.empty() || choosing.empty()) return {};
  constexpr double kWithin = 1.10;
  // Within 10% at how many sizes, and the worst ratio and its size.
  struct Tally {
    int within = 0;
    double worst = 0;
    size_t worstBytes = 0;
    void add(double ratio, size_t bytes) {
      within += ratio <= kWithin;
      if (ratio > worst) worst = ratio, worstBytes = bytes;
    }
    std::string text(int counted) const {
      return strprintf("within 10%% of the fastest forced at %d of %d sizes", within,
                          counted) +
             (counted ? strprintf("; worst %+.1f%% at %zu B", (worst - 1) * 100, worstBytes)
                      : "");
    }
  };
  std::string out;
  for (size_t who : choosing) {
    const std::string& label = contestants[who].label;
    out += strprintf(
        "#\n# Regret of %s: its out-of-place time against the fastest forced algorithm of the same "
        "size (medians of %d rounds), and round by round: the median over rounds of its time "
        "over a forced one's in the same round, against the one it trails most\n"
        "# %10s  %8s  %-14s  %9s  %9s  %7s  %-14s  %7s  %s\n",
        label.c_str(), rounds, "size (B)", "type", "fastest forced", "time (us)",
        (label + " (us)").c_str(), "regret", "trails most", "by round", "it ran");
    Tally medians, byRound;
    int counted = 0;
    for (size_t r = 0; r < rows[who].size(); ++r) {
      const ResultRow& mine = rows[who][r];
      if (mine.bytes == 0) continue;  // no data: every algorithm does nothing alike
      size_t best = forced[0], trailed = forced[0];
      double paired = -1;
      for (size_t f : forced) {
        if (rows[f][r].outOfPlace.timeUs < rows[best][r].outOfPlace.timeUs) best = f;
        const double ratio = pairedRatio(mine.roundsUs, rows[f][r].roundsUs);
        if (ratio > paired) paired = ratio, trailed = f;
      }
      const double ratio = mine.outOfPlace.timeUs / rows[best][r].outOfPlace.timeUs;
      ++counted;
      medians.add(ratio, mine.bytes);
      byRound.add(paired, mine.bytes);
      out += strprintf("  %10zu  %8s  %-14s  %9.2f  %9.2f  %+6.1f%%  %-14s  %+6.1f%%  %s\n",
                          mine.bytes, dtypeName(mine.dtype), contestants[best].label.c_str(),
                          rows[best][r].outOfPlace.timeUs, mine.outOfPlace.timeUs,
                          (ratio - 1) * 100, contestants[trailed].label.c_str(),
                          (paired - 1) * 100, mine.ran.c_str());
    }
    out += "# " + label + ": " + medians.text(counted) + "\n# " + label +
           ", round by round: " + byRound.text(counted) + "\n";
  }
  return out;
}


}  // namespace loom::perf
