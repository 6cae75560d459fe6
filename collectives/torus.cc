// 2D torus allreduce: rings along the rows and columns of an X × Y grid of ranks.
#include <string>

#include "collectives/builders_reduce.h"

namespace loom::collectives {

std::string torusShape(const CollArgs& a, int* x, int* y) {
  const int n = a.nranks;
  auto why = [&](const std::string& what) { return "torus: " + what; };
  if (a.torusX < 0 || a.torusY < 0) {
    return why("dimensions " + std::to_string(a.torusX) + "x" + std::to_string(a.torusY) +
               " must be positive");
  }
  if (a.torusX > 0 || a.torusY > 0) {
    // One dimension given: the other follows from N, when it divides.
    *x = a.torusX, *y = a.torusY;
    if (*x == 0) *x = n % *y == 0 ? n / *y : 0;
    if (*y == 0) *y = n % *x == 0 ? n / *x : 0;
    if (*x == 0 || *y == 0 || uint64_t(*x) * uint64_t(*y) != uint64_t(n)) {
      return why("grid " + std::to_string(a.torusX) + "x" + std::to_string(a.torusY) +
                 " does not fit " + std::to_string(n) + " ranks (X·Y must equal N)");
    }
    return "";
  }
  // Rows are hosts when every host has as many ranks (ranks of a host are assumed to be
  // numbered together, as launchers do); otherwise the most square grid.
  const auto hosts = hostGroups(a);
  bool equal = hosts.size() > 1 && int(a.hostOf.size()) == n;
  for (const auto& h : hosts) equal = equal && h.size() == hosts[0].size();
  *x = equal ? int(hosts[0].size()) : 1;
  if (!equal) {
    while (*x * *x < n || n % *x != 0) ++*x;
  }
  *y = n / *x;
  return "";
}

std::string refuseTorus(const CollArgs& a) {
  int x = 0, y = 0;
  return torusShape(a, &x, &y);
}

RankPlan buildTorusAllReduce(const CollArgs& a, int rank) {
  int x = 1, y = 1;
  if (!torusShape(a, &x, &y).empty()) x = a.nranks, y = 1;  // refused; build a ring anyway
  RankGroup row, col;
  row.pos = rank % x, col.pos = rank / x;
  for (int i = 0; i < x; ++i) row.members.push_back(col.pos * x + i);
  for (int j = 0; j < y; ++j) col.members.push_back(j * x + row.pos);
  const int lanes = usableLanes(a.count, uint64_t(a.nranks), a.nranks == 1 ? 1 : a.lanes);
  return splitIntoLanes("torus", a.count, lanes, [&](Lane& lane, uint64_t base, uint64_t len) {
    gridAllReduce(lane, row, col, base, len);
  });
}

}  // namespace loom::collectives
