// Host-aware ("hierarchical") allreduce, allgather and reduce-scatter, and the grid allreduce
// they share with the 2D torus: rings within each host, rings across hosts among the ranks
// with the same local index.
#include <algorithm>
#include <string>
#include <vector>

#include "collectives/builders_reduce.h"

namespace loom::collectives {

void gridAllReduce(Lane& lane, const RankGroup& row, const RankGroup& col, uint64_t base,
                   uint64_t len) {
  const int x = row.size(), y = col.size();
  auto chunk = [=](uint32_t buf, int c) {
    return Region{buf, base + partOffset(len, uint64_t(x), uint64_t(c)),
                  partCount(len, uint64_t(x), uint64_t(c))};
  };
  if (x == 1 && y == 1) return addCopy(lane, chunk(kInput, 0), chunk(kOutput, 0));
  groupReduceScatter(lane, row, row.pos, [&](int c) { return chunk(kInput, c); },
                     [&](int, int c) { return chunk(kOutput, c); });
  // The row chunk this rank completed; with a single column nothing was reduced yet, so it is
  // still in Input and the column ring reads it there (as the plain ring allreduce does).
  const int mine = wrap(row.pos + 1, x);
  const Region held = chunk(x > 1 ? kOutput : kInput, mine);
  auto sub = [&](uint32_t buf) {
    return [=](int c) {
      return Region{buf, held.offset + partOffset(held.count, uint64_t(y), uint64_t(c)),
                    partCount(held.count, uint64_t(y), uint64_t(c))};
    };
  };
  const auto colOut = sub(kOutput);
  groupReduceScatter(lane, col, col.pos, sub(held.buf), [&](int, int c) { return colOut(c); });
  groupAllGather(lane, col, col.pos + 1, colOut(wrap(col.pos + 1, y)), colOut);
  groupAllGather(lane, row, mine, chunk(kOutput, mine), [&](int c) { return chunk(kOutput, c); });
}

std::vector<std::vector<int>> hostGroups(const CollArgs& a) {
  std::vector<std::vector<int>> hosts;
  if (a.hostOf.empty()) {
    hosts.emplace_back(size_t(a.nranks));
    for (int r = 0; r < a.nranks; ++r) hosts[0][size_t(r)] = r;
    return hosts;
  }
  for (int r = 0; r < int(a.hostOf.size()); ++r) {
    const size_t h = size_t(std::max(0, a.hostOf[size_t(r)]));
    if (hosts.size() <= h) hosts.resize(h + 1);
    hosts[h].push_back(r);
  }
  return hosts;
}

std::string refuseHierarchical(const CollArgs& a) {
  if (!a.hostOf.empty() && int(a.hostOf.size()) != a.nranks) {
    return "hierarchical: hostOf has " + std::to_string(a.hostOf.size()) + " entries for " +
           std::to_string(a.nranks) + " ranks";
  }
  for (int32_t h : a.hostOf) {
    if (h < 0 || h >= a.nranks) return "hierarchical: invalid host index " + std::to_string(h);
  }
  const auto hosts = hostGroups(a);
  for (size_t h = 0; h < hosts.size(); ++h) {
    if (hosts[h].size() != hosts[0].size()) {
      return "hierarchical needs the same number of ranks on every host, but host 0 has " +
             std::to_string(hosts[0].size()) + " and host " + std::to_string(h) + " has " +
             std::to_string(hosts[h].size()) + "; use another algorithm";
    }
  }
  return "";
}

namespace {

// This rank's place among the hosts: its host's ranks (the row) and the ranks with its local
// index on every host (the column).
struct HostView {
  std::vector<std::vector<int>> hosts;
  RankGroup row, col;
  int hostCount() const { return int(hosts.size()); }
  int perHost() const { return row.size(); }
};

HostView hostView(const CollArgs& a, int rank) {
  HostView v;
  v.hosts = hostGroups(a);
  for (int h = 0; h < v.hostCount(); ++h) {
    const auto& members = v.hosts[size_t(h)];
    const auto it = std::find(members.begin(), members.end(), rank);
    if (it == members.end()) continue;
    v.row = {members, int(it - members.begin())};
    v.col.pos = h;
  }
  for (const auto& members : v.hosts) v.col.members.push_back(members[size_t(v.row.pos)]);
  return v;
}

}  // namespace

RankPlan buildHierarchicalAllReduce(const CollArgs& a, int rank) {
  const HostView v = hostView(a, rank);
  const int lanes = usableLanes(a.count, uint64_t(a.nranks), a.nranks == 1 ? 1 : a.lanes);
  return splitIntoLanes("hierarchical", a.count, lanes,
                        [&](Lane& lane, uint64_t base, uint64_t len) {
                          gridAllReduce(lane, v.row, v.col, base, len);
                        });
}

RankPlan buildHierarchicalAllGather(const CollArgs& a, int rank) {
  const HostView v = hostView(a, rank);
  const uint64_t count = a.count;
  const int hosts = v.hostCount(), local = v.row.pos;
  const int lanes = usableLanes(count, 1, a.nranks == 1 ? 1 : a.lanes);
  return splitIntoLanes("hierarchical", count, lanes, [&](Lane& lane, uint64_t base, uint64_t len) {
    auto blockOf = [&](int r) { return Region{kOutput, uint64_t(r) * count + base, len}; };
    const Region own{kInput, base, len};
    addCopy(lane, own, blockOf(rank));  // the executor skips it in place
    // Across hosts first, so each block crosses the network once; then every host's blocks
    // go round this host, in the order the cross-host ring delivers them.
    groupAllGather(lane, v.col, v.col.pos, own,
                   [&](int h) { return blockOf(v.hosts[size_t(h)][size_t(local)]); });
    for (int k = 0; k < hosts; ++k) {
      const auto& members = v.hosts[size_t(wrap(v.col.pos - k, hosts))];
      groupAllGather(lane, v.row, local, k == 0 ? own : blockOf(members[size_t(local)]),
                     [&](int c) { return blockOf(members[size_t(c)]); });
    }
  });
}

RankPlan buildHierarchicalReduceScatter(const CollArgs& a, int rank) {
  const HostView v = hostView(a, rank);
  const uint64_t count = a.count;
  const int hosts = v.hostCount(), perHost = v.perHost();
  const int lanes = usableLanes(count, 1, a.nranks == 1 ? 1 : a.lanes);
  auto fill = [&](Lane& lane, uint64_t base, uint64_t len) {
    auto in = [&](int r) { return Region{kInput, uint64_t(r) * count + base, len}; };
    auto slot = [&](int k) { return Region{kScratch, uint64_t(k) * count + base, len}; };
    const Region result{kOutput, base, len};
    if (a.nranks == 1) return addCopy(lane, in(0), result);
    // Scratch slots: 0..H−1 the host sums, then two per host for the partial sums of its
    // ring, then two for the cross-host ring (separate slots keep the rings independent).
    auto hostSum = [&](int h) { return hosts == 1 ? result : slot(h); };
    // Within the host: for host h (in the order the cross-host ring needs them), reduce the
    // blocks of h's ranks so that this rank ends with the one of its local index.
    for (int k = 1; k <= hosts && perHost > 1; ++k) {
      const int h = wrap(v.col.pos - k, hosts);
      const auto& members = v.hosts[size_t(h)];
      groupReduceScatter(lane, v.row, v.row.pos - 1,
                         [&](int c) { return in(members[size_t(c)]); },
                         [&](int s, int) {
                           return s == perHost - 2 ? hostSum(h) : slot(hosts + 2 * h + s % 2);
                         });
    }
    // Across hosts among the ranks with this local index; in place the last step reads
    // Input block r (when nothing was reduced within the host) as it writes Output.
    groupReduceScatter(
        lane, v.col, v.col.pos - 1,
        [&](int h) { return perHost == 1 ? in(v.hosts[size_t(h)][0]) : hostSum(h); },
        [&](int s, int) { return s == hosts - 2 ? result : slot(3 * hosts + s % 2); });
  };
  RankPlan plan = splitIntoLanes("hierarchical", count, lanes, fill);
  plan.scratchCount = a.nranks > 1 ? uint64_t(3 * hosts + 2) * count : 0;
  return plan;
}

}  // namespace loom::collectives
