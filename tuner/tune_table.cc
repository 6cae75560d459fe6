#include "tuner/tune_table.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "tuner/simulator.h"

namespace loom::tuner {

using collectives::Builder;
using collectives::CollArgs;
using collectives::Collective;

// The defaults, in the grammar. Up to 16 KiB per rank buffer the algorithms with the fewest
// rounds (log N instead of N) win, above it the bandwidth-optimal ring, chain, pairwise and
// linear (gather, scatter: every block crosses the root's link once, not log N times);
// hierarchical allreduce serves several hosts of equal size (the rule is skipped on unequal
// hosts, where it refuses). The thresholds are where the measured crossover sits on one host.
const char kBuiltinTable[] = R"(# built-in defaults
allreduce      size=0-16K  ranks=2-*  -> rd
allreduce      hosts=2-*              -> hierarchical
allreduce                             -> ring
allgather      size=0-16K  ranks=3-*  -> bruck
allgather                             -> ring
reducescatter                         -> ring
alltoall       size=0-16K  ranks=3-*  -> bruck
alltoall                              -> pairwise
alltoallv                             -> pairwise
broadcast      size=0-16K  ranks=4-*  -> tree
broadcast                             -> chain
reduce         size=0-16K  ranks=4-*  -> tree
reduce                                -> chain
gather         size=0-16K  ranks=4-*  -> tree
gather                                -> linear
scatter        size=0-16K  ranks=4-*  -> tree
scatter                               -> linear
)";

namespace {

constexpr int kMaxLanes = 64;

// Collectives a rule can name: every one with builders to choose from.
std::string knownCollectives() {
  std::string known;
  for (int c = 0; c < int(Collective::SendRecv); ++c)
    known += (known.empty() ? "" : ", ") + std::string(collectiveName(Collective(c)));
  return known;
}

bool parseCollective(std::string_view name, Collective* out) {
  for (int c = 0; c < int(Collective::SendRecv); ++c) {
    if (name == collectiveName(Collective(c))) {
      *out = Collective(c);
      return true;
    }
  }
  return false;
}

// Parses one rule's tokens; errors are bare ("what was wrong") and name their token.
class RuleParser {
 public:
  explicit RuleParser(TuneRule* rule) : rule_(rule) {}

  // On failure, *token is the offending token and the result says what was expected.
  std::string parse(const std::vector<std::string>& tokens, std::string* token) {
    size_t i = 0;
    *token = tokens[0];
    if (!parseCollective(tokens[0], &rule_->coll)) {
      return tokens[0] == "sendrecv" ? "sendrecv has no algorithms to choose from"
                                     : "unknown collective (known: " + knownCollectives() + ")";
    }
    for (i = 1; i < tokens.size() && tokens[i] != "->"; ++i) {
      *token = tokens[i];
      std::string why = parseCondition(tokens[i]);
      if (!why.empty()) return why;
    }
    if (i + 1 >= tokens.size()) {
      *token = tokens.back();
      return "expected \"-> ALGORITHM\" after the conditions";
    }
    *token = tokens[++i];
    rule_->builder = collectives::findBuilder(rule_->coll, tokens[i]);
    if (rule_->builder == nullptr) {
      std::string known;
      for (auto n : collectives::builderNames(rule_->coll))
        known += (known.empty() ? "" : ", ") + std::string(n);
      return std::string(collectiveName(rule_->coll)) + " has no algorithm \"" + tokens[i] +
             "\" (known: " + known + ")";
    }
    for (++i; i < tokens.size(); ++i) {
      *token = tokens[i];
      std::string why = parseParam(tokens[i]);
      if (!why.empty()) return why;
    }
    return "";
  }

 private:
  // "size=16K-*", "ranks=4", "hosts=2-*".
  std::string parseCondition(const std::string& tok) {
    const size_t eq = tok.find('=');
    const std::string key = tok.substr(0, eq);
    const bool isSize = key == "size";
    uint64_t *lo = nullptr, *hi = nullptr;
    if (isSize) lo = &rule_->minBytes, hi = &rule_->maxBytes;
    if (key == "ranks") lo = &rule_->minRanks, hi = &rule_->maxRanks;
    if (key == "hosts") lo = &rule_->minHosts, hi = &rule_->maxHosts;
    if (eq == std::string::npos || lo == nullptr)
      return "expected a condition (size=, ranks=, hosts=) or \"->\"";
    if (!seen_.insert(key)) return "\"" + key + "\" is given twice";
    std::string value = tok.substr(eq + 1);
    if (isSize && rule_->coll == Collective::AlltoAllv && value != "*")
      return "alltoallv calls have no size that every rank shares; leave size out";
    if (value == "*") return "";
    const size_t dash = value.find('-');
    std::string why = parseBound(value.substr(0, dash), isSize, lo);
    if (!why.empty()) return why;
    *hi = *lo;
    if (dash == std::string::npos) return "";
    const std::string upper = value.substr(dash + 1);
    if (upper == "*") {
      *hi = TuneRule::kAny;
      return "";
    }
    why = parseBound(upper, isSize, hi);
    if (!why.empty()) return why;
    if (*lo > *hi) return "empty range (" + value.substr(0, dash) + " is above " + upper + ")";
    return "";
  }

  // A whole number, for sizes with an optional binary unit K, M or G.
  static std::string parseBound(const std::string& text, bool isSize, uint64_t* out) {
    const std::string expected =
        isSize ? "expected a size in bytes (e.g. 16K, 1M) or *" : "expected a whole number or *";
    size_t digits = 0;
    uint64_t n = 0;
    for (; digits < text.size() && isdigit(static_cast<unsigned char>(text[digits])); ++digits) {
      if (n > (TuneRule::kAny - 9) / 10) return "\"" + text + "\" is too large";
      n = n * 10 + uint64_t(text[digits] - '0');
    }
    if (digits == 0) return expected;
    const std::string unit = text.substr(digits);
    int shift = 0;
    if (!unit.empty()) {
      if (!isSize) return expected + ", not \"" + text + "\"";
      if (unit == "K" || unit == "k")
        shift = 10;
      else if (unit == "M" || unit == "m")
        shift = 20;
      else if (unit == "G" || unit == "g")
        shift = 30;
      else
        return "unknown unit \"" + unit + "\" (use K, M, G)";
    }
    if (n > (TuneRule::kAny >> shift)) return "\"" + text + "\" is too large";
    *out = n << shift;
    return "";
  }

  // "lanes=2", "slices=8", "dims=4x2", "k=2".
  std::string parseParam(const std::string& tok) {
    const size_t eq = tok.find('=');
    const std::string key = tok.substr(0, eq);
    if (eq == std::string::npos ||
        (key != "lanes" && key != "slices" && key != "dims" && key != "k"))
      return "expected a parameter: lanes=, slices=, dims= or k=";
    if (!seen_.insert(key)) return "\"" + key + "\" is given twice";
    const std::string value = tok.substr(eq + 1);
    const Builder& b = *rule_->builder;
    AlgoParams& p = rule_->params;
    if (key == "dims") {
      if (!readsTorusDims(b)) return std::string(b.name) + " has no dims (only torus has)";
      size_t cut = value.find('x');
      uint64_t dx = 0, dy = 0;
      if (cut == std::string::npos || !parseBound(value.substr(0, cut), false, &dx).empty() ||
          !parseBound(value.substr(cut + 1), false, &dy).empty() || dx < 1 || dy < 1 ||
          dx > 1u << 20 || dy > 1u << 20)
        return "expected dims=XxY with positive X and Y, e.g. dims=4x2";
      p.torusX = int(dx), p.torusY = int(dy);
      return "";
    }
    uint64_t n = 0;
    std::string why = parseBound(value, false, &n);
    if (!why.empty()) return why;
    if (key == "lanes") {
      if (n < 1 || n > kMaxLanes) return "lanes must be 1 to " + std::to_string(kMaxLanes);
      p.lanes = int(n);
    } else if (key == "slices") {
      if (n < 1 || n > uint64_t(SimOptions::kMaxSlices))
        return "slices must be 1 to " + std::to_string(SimOptions::kMaxSlices);
      p.slices = int(n);
    } else {
      if (!readsFanIn(b)) return std::string(b.name) + " has no k (only incast has)";
      if (n < 1 || n > 1u << 20) return "k must be at least 1";
      p.fanIn = int(n);
    }
    return "";
  }

  // The keys given so far (each may appear once).
  struct Seen {
    std::vector<std::string> keys;
    bool insert(const std::string& k) {
      if (std::find(keys.begin(), keys.end(), k) != keys.end()) return false;
      keys.push_back(k);
      return true;
    }
  };
  TuneRule* rule_;
  Seen seen_;
};

// Whitespace-separated tokens, with "->" its own token even when written without spaces.
std::vector<std::string> tokenize(std::string text) {
  for (size_t p = 0; (p = text.find("->", p)) != std::string::npos; p += 4)
    text.replace(p, 2, " -> ");
  std::istringstream in(text);
  std::vector<std::string> tokens;
  for (std::string t; in >> t;) tokens.push_back(t);
  return tokens;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

std::string formatParams(const AlgoParams& p) {
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : " ") + s; };
  if (p.lanes > 0) add("lanes=" + std::to_string(p.lanes));
  if (p.torusX > 0) add("dims=" + std::to_string(p.torusX) + "x" + std::to_string(p.torusY));
  if (p.fanIn > 0) add("k=" + std::to_string(p.fanIn));
  if (p.slices > 0) add("slices=" + std::to_string(p.slices));
  return out;
}

void applyParams(const AlgoParams& p, collectives::CallSettings* a) {
  if (p.lanes > 0) a->lanes = p.lanes;
  if (p.torusX > 0) a->torusX = p.torusX, a->torusY = p.torusY;
  if (p.fanIn > 0) a->fanIn = p.fanIn;
}

std::string refusal(const Builder& b, const CollArgs& a, const AlgoParams& p) {
  if (b.refuse == nullptr) return "";
  if (p.torusX == 0 && p.fanIn == 0) return b.refuse(a);  // lanes never make a builder refuse
  CollArgs withParams = a;
  applyParams(p, &withParams);
  return b.refuse(withParams);
}

bool readsTorusDims(const Builder& b) {
  return b.coll == Collective::AllReduce && std::string_view(b.name) == "torus";
}

bool readsFanIn(const Builder& b) {
  return (b.coll == Collective::AlltoAll || b.coll == Collective::AlltoAllv) &&
         std::string_view(b.name) == "incast";
}

uint64_t callBytes(const CollArgs& a) {
  if (a.coll == Collective::AlltoAllv || a.coll == Collective::SendRecv) return 0;
  return a.count * (collectives::countsBlocks(a.coll) ? uint64_t(a.nranks) : 1) * a.elemSize;
}

int hostCount(const CollArgs& a) {
  // Hosts are numbered by first appearance, so the largest index + 1 counts them.
  int32_t last = 0;
  for (int32_t h : a.hostOf) last = std::max(last, h);
  return int(last) + 1;
}

CallShape callShape(const CollArgs& a) {
  return CallShape{a.coll, callBytes(a), a.nranks, hostCount(a)};
}

std::string formatBytes(uint64_t bytes) {
  static const char kUnits[] = {'G', 'M', 'K'};
  for (int i = 0; i < 3; ++i) {
    const int shift = 30 - 10 * i;
    if (bytes >= (uint64_t(1) << shift) && bytes % (uint64_t(1) << shift) == 0)
      return std::to_string(bytes >> shift) + kUnits[i];
  }
  return std::to_string(bytes);
}

bool TuneRule::matches(const CallShape& call) const {
  return call.coll == coll && call.bytes >= minBytes && call.bytes <= maxBytes &&
         uint64_t(call.ranks) >= minRanks && uint64_t(call.ranks) <= maxRanks &&
         uint64_t(call.hosts) >= minHosts && uint64_t(call.hosts) <= maxHosts;
}

Status TuneTable::parse(std::string_view text, std::string_view origin, TuneTable* out) {
  TuneTable table;
  table.origin_ = origin;
  std::istringstream lines{std::string(text)};
  int lineNo = 0;
  for (std::string line; std::getline(lines, line);) {
    ++lineNo;
    line = line.substr(0, line.find('#'));
    std::istringstream parts(line);
    for (std::string part; std::getline(parts, part, ';');) {
      std::vector<std::string> tokens = tokenize(part);
      if (tokens.empty()) continue;
      TuneRule rule;
      std::string token;
      std::string why = RuleParser(&rule).parse(tokens, &token);
      if (!why.empty()) {
        return errorf(loomInvalidArgument, "%.*s line %d: \"%s\": %s", int(origin.size()),
                      origin.data(), lineNo, token.c_str(), why.c_str());
      }
      rule.number = int(table.rules_.size()) + 1;
      rule.text = trim(part);
      table.rules_.push_back(std::move(rule));
    }
  }
  *out = std::move(table);
  return Status::ok();
}

Status TuneTable::fromSetting(const std::string& setting, TuneTable* out) {
  if (setting.empty() || setting[0] != '@') return parse(setting, "LOOM_TUNE", out);
  const std::string path = setting.substr(1);
  std::ifstream file(path);
  if (!file)
    return errorf(loomInvalidArgument, "LOOM_TUNE=@%s: cannot read the file", path.c_str());
  std::stringstream text;
  text << file.rdbuf();
  return parse(text.str(), path, out);
}

const TuneRule* TuneTable::match(const CollArgs& a, const CallShape& call) const {
  for (const TuneRule& rule : rules_) {
    if (!rule.matches(call)) continue;
    if (refusal(*rule.builder, a, rule.params).empty()) return &rule;
  }
  return nullptr;
}

const TuneTable& builtinTable() {
  static const TuneTable table = [] {
    TuneTable t;
    Status st = TuneTable::parse(kBuiltinTable, "built-in table", &t);
    if (!st.isOk()) {  // a bug in kBuiltinTable: tune_table_test catches it first
      fprintf(stderr, "loom: internal error: %s\n", st.message().c_str());
      abort();
    }
    return t;
  }();
  return table;
}

}  // namespace loom::tuner
