#include "comm/call_check.h"

#include <algorithm>
#include <cstring>

#include "base/dtype.h"
#include "base/status.h"

namespace loom {
namespace {

using collectives::Collective;
using collectives::describeCall;
using collectives::hasRoot;
using collectives::reduces;

void append(const CheckRecord& r, std::string* out) {
  out->append(reinterpret_cast<const char*>(&r), sizeof(r));
}

std::vector<CheckRecord> records(const std::string& blob) {
  std::vector<CheckRecord> out(blob.size() / sizeof(CheckRecord));
  if (!out.empty()) memcpy(out.data(), blob.data(), out.size() * sizeof(CheckRecord));
  return out;
}

bool sameRecord(const CheckRecord& a, const CheckRecord& b) {
  return a.kind == b.kind && a.coll == b.coll && a.dtype == b.dtype && a.op == b.op &&
         a.rank == b.rank && a.count == b.count;
}

std::string describeRecord(const CheckRecord& r) {
  return describeCall(Collective(r.coll), r.count, loomDataType_t(r.dtype), loomRedOp_t(r.op),
                      r.rank);
}

// A rank's collectives, without an alltoallv's blocks, and how they read.
std::vector<CheckRecord> collectivesOf(const std::vector<CheckRecord>& all) {
  std::vector<CheckRecord> out;
  for (const CheckRecord& r : all)
    if (r.kind == CheckRecord::kCollective) out.push_back(r);
  return out;
}
std::string describeCalls(const std::vector<CheckRecord>& colls) {
  if (colls.empty()) return "no collective (sends and receives only)";
  std::string out;
  for (const CheckRecord& r : colls) out += (out.empty() ? "" : " then ") + describeRecord(r);
  return colls.size() > 1 ? "a group of " + out : out;
}

// The ranks grouped by the collectives they called, the smallest group first.
std::string groupsDiffer(const std::vector<std::vector<CheckRecord>>& calls) {
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < int(calls.size()); ++r) {
    auto same = [&](const std::vector<int>& g) {
      const auto& first = calls[size_t(g[0])];
      return first.size() == calls[size_t(r)].size() &&
             std::equal(first.begin(), first.end(), calls[size_t(r)].begin(), sameRecord);
    };
    auto it = std::find_if(groups.begin(), groups.end(), same);
    if (it == groups.end()) groups.push_back({r});
    else it->push_back(r);
  }
  if (groups.size() == 1) return "";
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.size() < b.size(); });
  std::string out = "the ranks' calls differ: ";
  for (size_t i = 0; i < groups.size(); ++i)
    out += strprintf("%s%s %s%s %s", i == 0 ? "" : ", ",
                     groups[i].size() == 1 ? "rank" : "ranks", rankRanges(groups[i]).c_str(),
                     i == 0 ? " called" : "", describeCalls(calls[size_t(groups[i][0])]).c_str());
  return out;
}

// In a rank's records: its block of `kind` with `peer` in its collective number `which` (an
// alltoallv).
const CheckRecord* alltoallvBlock(const std::vector<CheckRecord>& all, size_t which, int peer,
                                  CheckRecord::Kind kind) {
  size_t seen = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].kind != CheckRecord::kCollective) continue;
    if (seen++ != which) continue;
    for (size_t j = i + 1; j < all.size() && all[j].kind != CheckRecord::kCollective; ++j)
      if (all[j].kind == kind && all[j].rank == peer) return &all[j];
    return nullptr;
  }
  return nullptr;
}

// An alltoallv's blocks: what rank i sends rank j is what j expects from i.
std::string blocksDiffer(const std::vector<std::vector<CheckRecord>>& all,
                         const std::vector<CheckRecord>& colls) {
  const int n = int(all.size());
  for (size_t c = 0; c < colls.size(); ++c) {
    if (Collective(colls[c].coll) != Collective::AlltoAllv) continue;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        const CheckRecord* s = alltoallvBlock(all[size_t(i)], c, j, CheckRecord::kSend);
        const CheckRecord* r = alltoallvBlock(all[size_t(j)], c, i, CheckRecord::kRecv);
        if (s == nullptr || r == nullptr || s->count != r->count)
          return strprintf("alltoallv counts do not pair: rank %d sends %llu elements to rank "
                           "%d, which receives %llu from rank %d",
                           i, (unsigned long long)(s ? s->count : 0), j,
                           (unsigned long long)(r ? r->count : 0), i);
      }
  }
  return "";
}

const char* kindName(uint8_t kind) { return kind == CheckRecord::kSend ? "send" : "receive"; }

// a's operations of `kind` with b against b's of the other kind with a, in order.
std::string directionUnpaired(int a, const std::vector<CheckRecord>& aOps, int b,
                              const std::vector<CheckRecord>& bOps, uint8_t kind) {
  const uint8_t other = kind == CheckRecord::kSend ? CheckRecord::kRecv : CheckRecord::kSend;
  std::vector<uint64_t> mine, theirs;
  for (const CheckRecord& r : aOps)
    if (r.kind == kind) mine.push_back(r.count);
  for (const CheckRecord& r : bOps)
    if (r.kind == other) theirs.push_back(r.count);
  for (size_t i = 0; i < std::max(mine.size(), theirs.size()); ++i) {
    if (i < mine.size() && i < theirs.size() && mine[i] == theirs[i]) continue;
    if (i >= theirs.size())
      return strprintf("rank %d's %s %zu with rank %d (%llu bytes) meets no %s on rank %d", a,
                       kindName(kind), i + 1, b, (unsigned long long)mine[i], kindName(other),
                       b);
    if (i >= mine.size())
      return strprintf("rank %d's %s %zu with rank %d (%llu bytes) meets no %s on rank %d", b,
                       kindName(other), i + 1, a, (unsigned long long)theirs[i],
                       kindName(kind), a);
    return strprintf("rank %d's %s %zu to rank %d is of %llu bytes, rank %d's %s of it %llu "
                     "bytes",
                     a, kindName(kind), i + 1, b, (unsigned long long)mine[i], b,
                     kindName(other), (unsigned long long)theirs[i]);
  }
  return "";
}

}  // namespace

void describeCollective(const CallDesc& call, std::string* out) {
  const collectives::CollArgs& a = call.args;
  CheckRecord r;
  r.coll = uint8_t(a.coll);
  r.dtype = uint8_t(call.dtype);
  r.op = reduces(a.coll) ? uint8_t(call.op) : CheckRecord::kNoOp;
  r.rank = hasRoot(a.coll) ? a.root : 0;
  r.count = a.coll == Collective::AlltoAllv ? 0 : a.count;
  append(r, out);
  if (a.coll != Collective::AlltoAllv) return;
  for (int peer = 0; peer < int(a.sendCounts.size()); ++peer) {
    append({CheckRecord::kSend, r.coll, r.dtype, r.op, peer, a.sendCounts[size_t(peer)]}, out);
    append({CheckRecord::kRecv, r.coll, r.dtype, r.op, peer, a.recvCounts[size_t(peer)]}, out);
  }
}

void describeOpsWith(int peer, std::span<const P2PCall> ops, std::string* out) {
  for (const P2PCall& c : ops)
    if (c.op.peer == peer)
      append({c.op.kind == collectives::P2POp::Kind::Send ? CheckRecord::kSend
                                                          : CheckRecord::kRecv,
              uint8_t(Collective::SendRecv), 0, CheckRecord::kNoOp, peer, c.op.bytes},
             out);
}

std::string collectivesDiffer(const std::vector<std::string>& all) {
  std::vector<std::vector<CheckRecord>> parsed, colls;
  for (const std::string& blob : all) {
    parsed.push_back(records(blob));
    colls.push_back(collectivesOf(parsed.back()));
  }
  std::string differ = groupsDiffer(colls);
  if (!differ.empty() || colls.empty()) return differ;
  return blocksDiffer(parsed, colls[0]);
}

std::string opsUnpaired(int a, const std::string& aWithB, int b, const std::string& bWithA) {
  const std::vector<CheckRecord> aOps = records(aWithB), bOps = records(bWithA);
  std::string why = directionUnpaired(a, aOps, b, bOps, CheckRecord::kSend);
  if (why.empty()) why = directionUnpaired(b, bOps, a, aOps, CheckRecord::kSend);
  return why.empty() ? "" : "the ranks' sends and receives do not pair: " + why;
}

const char* checkedCallName(std::span<const CallDesc* const> colls,
                            std::span<const P2PCall> p2p) {
  if (!colls.empty()) return collectiveName(colls[0]->args.coll);
  if (p2p.size() == 1) return p2p[0].op.kind == collectives::P2POp::Kind::Send ? "send" : "recv";
  return "sendrecv";
}

}  // namespace loom
