// The override grammar (docs/TUNING.md): rules that map a call — collective, size, rank and
// host counts — to an algorithm and its parameters. LOOM_TUNE holds the user's rules; the
// built-in defaults (kBuiltinTable) are written in the same grammar.
//
//   allreduce  size=0-16K  ranks=2-*  hosts=1  -> rd
//   allreduce  size=16K-*  hosts=2-*           -> hierarchical lanes=2
//   alltoall   size=*                          -> incast k=2
//   allreduce  size=1M-*   ranks=4             -> torus dims=2x2 slices=8
//
// One rule per line or ';'-separated, '#' starts a comment. Ranges LO-HI include both ends,
// '*' is any, a single value is exactly that; the first matching rule whose algorithm accepts
// the call wins.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "collectives/builders.h"
#include "base/status.h"

namespace loom::tuner {

// Parameters a decision sets besides the algorithm; 0 means "not set": the communicator's own
// setting (LOOM_LANES, LOOM_TORUS_DIMS, LOOM_ALLTOALL_FANIN) applies.
struct AlgoParams {
  int lanes = 0;
  int torusX = 0, torusY = 0;  // "dims=XxY"
  int fanIn = 0;               // "k=": alltoall fan-in
  int slices = 0;  // the simulator's pipelining pieces the prediction used (recorded only)
  bool operator==(const AlgoParams&) const = default;
};

// "lanes=2 dims=4x2", the parameters that are set, in the grammar's spelling ("" for none).
std::string formatParams(const AlgoParams& p);

// Sets on *a the parameters that p sets.
void applyParams(const AlgoParams& p, collectives::CallSettings* a);
// Why builder b cannot serve call a with parameters p applied, or "" when it can.
std::string refusal(const collectives::Builder& b, const collectives::CollArgs& a,
                    const AlgoParams& p);

// The parameters a builder reads besides lanes: the torus its dims, the incast alltoall its
// fan-in. Rules may set only these (and lanes, slices); the tuner tries candidates of them.
bool readsTorusDims(const collectives::Builder& b);
bool readsFanIn(const collectives::Builder& b);

// A call as rules see it. bytes is the per-rank buffer as nccl-tests counts it (callBytes).
struct CallShape {
  collectives::Collective coll = collectives::Collective::AllReduce;
  uint64_t bytes = 0;
  int ranks = 1;
  int hosts = 1;
};

// nccl-tests' size of a call: count × element size for allreduce, broadcast and reduce, and
// count × N × element size for allgather, reduce-scatter, alltoall, gather and scatter (count
// is per rank).
// Alltoallv has no size shared by every rank: 0 (rules for it cannot name a size).
uint64_t callBytes(const collectives::CollArgs& a);
// The number of distinct hosts in a.hostOf (1 when it is empty).
int hostCount(const collectives::CollArgs& a);
CallShape callShape(const collectives::CollArgs& a);

// 1536 → "1536", 16384 → "16K", 1 << 30 → "1G": the largest binary unit that divides exactly.
std::string formatBytes(uint64_t bytes);

struct TuneRule {
  static constexpr uint64_t kAny = std::numeric_limits<uint64_t>::max();
  collectives::Collective coll = collectives::Collective::AllReduce;
  uint64_t minBytes = 0, maxBytes = kAny;  // inclusive
  uint64_t minRanks = 1, maxRanks = kAny;  // inclusive
  uint64_t minHosts = 1, maxHosts = kAny;  // inclusive
  const collectives::Builder* builder = nullptr;
  AlgoParams params;
  int number = 0;    // 1-based position in its table ("rule 3" in logs and loom-tune)
  std::string text;  // the rule as written, trimmed

  bool matches(const CallShape& call) const;
};

class TuneTable {
 public:
  // Parses rules; `origin` names the text in error messages ("LOOM_TUNE", a file path). An
  // error says the line, the token and what was expected, e.g.
  //   LOOM_TUNE line 2: "size=16Q": unknown unit "Q" (use K, M, G)
  static Status parse(std::string_view text, std::string_view origin, TuneTable* out);
  // LOOM_TUNE's value: rules inline, or "@/path/file" to read them from a file.
  static Status fromSetting(const std::string& setting, TuneTable* out);

  // The first rule that matches the call and whose algorithm does not refuse it (hierarchical
  // on unequal hosts, say), or null.
  const TuneRule* match(const collectives::CollArgs& a, const CallShape& call) const;

  const std::vector<TuneRule>& rules() const { return rules_; }
  bool empty() const { return rules_.empty(); }
  const std::string& origin() const { return origin_; }

 private:
  std::vector<TuneRule> rules_;
  std::string origin_;
};

// The built-in defaults: what loom picks when no cost model decides (no topology, or
// LOOM_TUNER=table). It ends with a catch-all rule for every collective that has builders.
extern const char kBuiltinTable[];
const TuneTable& builtinTable();

}  // namespace loom::tuner
