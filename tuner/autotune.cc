#include "tuner/autotune.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "topology/analysis.h"
#include "topology/discover.h"

namespace loom::tuner {

using collectives::Builder;
using collectives::CollArgs;
using collectives::Collective;
using nlohmann::json;

namespace {

// The parameters as the rule grammar spells them; slices are the simulator's, not measured.
std::string paramsText(AlgoParams p) {
  p.slices = 0;
  return formatParams(p);
}

json candidateJson(const Candidate& c) {
  return {{"algorithm", c.builder->name}, {"params", paramsText(c.params)}, {"seconds", c.time}};
}

// Reads a candidate back through the rule grammar ("allreduce -> ring lanes=2"), so names and
// parameters are checked exactly as LOOM_TUNE's are. Sets *coll from the rule.
std::string parseCandidate(const json& j, const std::string& collective, Candidate* out,
                           Collective* coll) {
  const std::string algorithm = j.at("algorithm").get<std::string>();
  const std::string params = j.at("params").get<std::string>();
  if (algorithm.find_first_of(";\n#") != std::string::npos ||
      params.find_first_of(";\n#") != std::string::npos)
    return "\"" + algorithm + " " + params + "\" is not an algorithm with parameters";
  TuneTable rule;
  Status st = TuneTable::parse(collective + " -> " + algorithm + " " + params, "rule", &rule);
  if (!st.isOk()) return st.message();
  *coll = rule.rules()[0].coll;
  *out = {rule.rules()[0].builder, rule.rules()[0].params, j.at("seconds").get<double>()};
  return "";
}

// j[key] as an integer of type T. get<T> would convert a fraction or a value out of T's range
// with undefined behaviour: such a value is refused as the wrong type, like a string would be.
template <typename T>
T integerAt(const json& j, const char* key) {
  const json& v = j.at(key);
  const bool fits =
      v.is_number_unsigned()  ? v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max())
      : v.is_number_integer() ? v.get<int64_t>() >= int64_t(std::numeric_limits<T>::min()) &&
                                    v.get<int64_t>() <= int64_t(std::numeric_limits<T>::max())
                              : false;
  if (!fits)
    throw json::type_error::create(302, std::string(key) + " must be an integer in range: " +
                                            v.dump(), &v);
  return v.get<T>();
}

// One entry of the file, or why this version cannot use it.
std::string parseEntry(const json& j, AutotuneKey* key, AutotuneEntry* entry) {
  const std::string collective = j.at("collective").get<std::string>();
  key->bucket = integerAt<int>(j, "bucket");
  key->elemSize = integerAt<uint32_t>(j, "elemSize");
  key->nranks = integerAt<int>(j, "nranks");
  entry->bytes = integerAt<uint64_t>(j, "bytes");
  std::string why = parseCandidate(j.at("winner"), collective, &entry->winner, &key->coll);
  auto parseList = [&](const json& list, std::vector<Candidate>* out) {
    Collective coll;
    for (const json& one : list) {
      if (!why.empty()) break;
      why = parseCandidate(one, collective, &out->emplace_back(), &coll);
    }
  };
  parseList(j.at("others"), &entry->others);
  if (j.contains("mapped")) parseList(j.at("mapped"), &entry->mapped);  // older files: none
  return why;
}

json candidatesJson(const std::vector<Candidate>& list) {
  json out = json::array();
  for (const Candidate& c : list) out.push_back(candidateJson(c));
  return out;
}

}  // namespace

AutotuneKey autotuneKey(const CollArgs& a) {
  return {a.coll, Tuner::sizeBucket(callBytes(a)), a.elemSize, a.nranks};
}

bool autotuneApplies(const CollArgs& a, uint64_t maxBytes) {
  const uint64_t bytes = callBytes(a);
  return a.coll != Collective::AlltoAllv && a.coll != Collective::SendRecv && a.nranks > 1 &&
         bytes > 0 && bytes <= maxBytes;
}

std::vector<Candidate> autotuneCandidates(Tuner& tuner, const CollArgs& a, int limit,
                                          bool buffersMapped) {
  const std::vector<Candidate> ranked = tuner.candidates(a, buffersMapped);  // fastest first
  std::vector<Candidate> out;
  if (!ranked.empty()) {
    const size_t wanted = size_t(std::max(1, limit));
    const double band = ranked[0].time * kAutotuneBand;
    std::vector<Candidate> variants;  // of an algorithm already in out, or beyond `wanted`
    for (const Candidate& c : ranked) {
      const bool seen = std::any_of(out.begin(), out.end(),
                                    [&](const Candidate& o) { return o.builder == c.builder; });
      const bool room = out.size() < wanted || (c.time <= band && out.size() < 2 * wanted - 1);
      (room && !seen ? out : variants).push_back(c);
    }
    for (size_t i = 0; i < variants.size() && out.size() < wanted; ++i) out.push_back(variants[i]);
    std::stable_sort(out.begin(), out.end(),
                     [](const Candidate& x, const Candidate& y) { return x.time < y.time; });
    const Candidate top = out[0];
    size_t added = 0;
    for (const Candidate& c : ranked) {
      if (added + 1 >= wanted) break;
      const bool listed = std::any_of(out.begin(), out.end(), [&](const Candidate& o) {
        return o.builder == c.builder && o.params == c.params;
      });
      if (c.builder == top.builder && !listed) out.push_back(c), ++added;
    }
    return out;
  }
  for (const Builder& b : collectives::allBuilders())
    if (b.coll == a.coll && b.build != nullptr && refusal(b, a, {}).empty())
      out.push_back({&b, {}, 0});
  return out;
}

AutotuneSchedule autotuneSchedule(const std::vector<Candidate>& candidates, int minRounds) {
  double round = 0;  // predicted seconds of one round of single calls
  for (const Candidate& c : candidates) round += c.time;
  AutotuneSchedule s;
  s.rounds = std::max(1, minRounds);
  s.batch = kAutotuneBackToBack;
  if (round <= 0) return s;
  const double wanted = std::ceil(kAutotuneBudgetSeconds / round);
  s.rounds = std::max(s.rounds, int(std::min<double>(wanted, kAutotuneMaxRounds)));
  const double batches = std::floor(kAutotuneBudgetSeconds / (round * s.rounds));
  s.batch = int(std::clamp<double>(batches, kAutotuneBackToBack, kAutotuneMaxBatch));
  // Turns of kAutotuneMinBatch calls within kAutotuneMinBatchSeconds, with fewer rounds if need
  // be (never fewer than minRounds), else turns as long as that time allows.
  if (s.batch < kAutotuneMinBatch) {
    const int batchedRounds =
        int(std::floor(kAutotuneMinBatchSeconds / (round * kAutotuneMinBatch)));
    s.rounds = std::max(std::max(1, minRounds), std::min(s.rounds, batchedRounds));
    const double fit = std::floor(kAutotuneMinBatchSeconds / (round * s.rounds));
    s.batch = int(std::clamp<double>(fit, kAutotuneBackToBack, kAutotuneMinBatch));
  }
  return s;
}

int agreedWinner(const std::vector<std::vector<double>>& times, std::vector<double>* agreed) {
  agreed->clear();
  if (times.empty() || times[0].empty()) return -1;
  for (const auto& t : times)
    if (t.size() != times[0].size()) return -1;
  agreed->assign(times[0].size(), 0);
  for (const auto& t : times)
    for (size_t i = 0; i < t.size(); ++i) (*agreed)[i] = std::max((*agreed)[i], t[i]);
  return int(std::min_element(agreed->begin(), agreed->end()) - agreed->begin());
}

std::string describeEntry(const AutotuneKey& key, const AutotuneEntry& e) {
  auto timed = [](const Candidate& c) {
    return strprintf("%s %.1f us", describe(c).c_str(), c.time * 1e6);
  };
  std::string text = strprintf("%s %s bytes, %u-byte elements, %d ranks: %s",
                               collectives::collectiveName(key.coll), formatBytes(e.bytes).c_str(),
                               key.elemSize, key.nranks, timed(e.winner).c_str());
  if (e.others.empty()) text += " (the only candidate)";
  for (size_t i = 0; i < e.others.size(); ++i)
    text += (i == 0 ? " beats " : ", ") + timed(e.others[i]);
  for (size_t i = 0; i < e.mapped.size(); ++i)
    text += (i == 0 ? "; on loomMemAlloc buffers " : ", ") + timed(e.mapped[i]);
  return text;
}

size_t autotuneWinner(const std::vector<Candidate>& predicted,
                      const std::vector<Candidate>& measured) {
  const size_t fastest = chooseWithLaneMargin(measured);
  const bool modelled =
      predicted.size() == measured.size() && !predicted.empty() &&
      std::all_of(predicted.begin(), predicted.end(), [](const Candidate& c) { return c.time > 0; });
  if (!modelled) return fastest;
  const size_t model = chooseWithLaneMargin(predicted);
  return measured[model].time <= measured[fastest].time * (1 + kAutotuneModelMargin) ? model
                                                                                     : fastest;
}

Decision autotunedDecision(const AutotuneEntry& e, double agreementSeconds) {
  Decision d{e.winner, Source::Autotune, 0, {}};
  if (!e.mapped.empty()) {
    const Candidate& best = e.mapped[chooseWithLaneMargin(e.mapped)];
    if (best.time + agreementSeconds < e.winner.time) d.whenMapped = best;
  }
  return d;
}

const AutotuneEntry* AutotuneCache::find(const AutotuneKey& key) const {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

uint64_t AutotuneCache::digest() const {
  std::string text;
  for (const auto& [k, e] : entries_) {
    text += strprintf("%d,%d,%u,%d:%s;", int(k.coll), k.bucket, k.elemSize, k.nranks,
                      describe(e.winner).c_str());
    // Measurements on mapped buffers decide too, by their times and the winner's
    // (autotunedDecision).
    if (!e.mapped.empty()) text += strprintf("%.9g;", e.winner.time);
    for (const Candidate& c : e.mapped) text += strprintf("%s %.9g;", describe(c).c_str(), c.time);
  }
  return topology::hash64(text);
}

std::string AutotuneCache::toJson(const std::string& signature) const {
  json entries = json::array();
  for (const auto& [k, e] : entries_) {
    entries.push_back({{"collective", collectives::collectiveName(k.coll)},
                       {"bucket", k.bucket},
                       {"elemSize", k.elemSize},
                       {"nranks", k.nranks},
                       {"bytes", e.bytes},
                       {"winner", candidateJson(e.winner)},
                       {"others", candidatesJson(e.others)},
                       {"mapped", candidatesJson(e.mapped)}});
  }
  json doc = {{"signature", signature}, {"entries", entries}};
  return doc.dump(1) + "\n";
}

Status AutotuneCache::parse(std::string_view text, const std::string& signature,
                            std::vector<std::string>* skipped) {
  entries_.clear();
  try {
    const json doc = json::parse(text);
    const std::string theirs = doc.at("signature").get<std::string>();
    if (theirs != signature)
      return errorf(loomSystemError, "it was measured on another topology (signature %s, not %s)",
                    theirs.c_str(), signature.c_str());
    size_t number = 0;
    for (const json& j : doc.at("entries")) {
      ++number;
      AutotuneKey key;
      AutotuneEntry entry;
      const std::string why = parseEntry(j, &key, &entry);
      if (!why.empty()) {
        skipped->push_back(strprintf("entry %zu: %s", number, why.c_str()));
        continue;
      }
      entries_[key] = std::move(entry);
    }
  } catch (const json::exception& e) {
    entries_.clear();
    return errorf(loomSystemError, "malformed (%s)", e.what());
  }
  return Status::ok();
}

Status AutotuneCache::load(const std::string& path, const std::string& signature,
                           std::vector<std::string>* skipped) {
  entries_.clear();
  std::ifstream in(path);
  if (!in) return errorf(loomInvalidUsage, "%s does not exist", path.c_str());
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), signature, skipped).withContext(path);
}

Status AutotuneCache::save(const std::string& path, const std::string& signature) const {
  return topology::writeFileAtomically(path, toJson(signature));
}

std::string autotuneCachePath(const std::string& dir, const std::string& signature) {
  return dir + "/autotune-" + signature + ".json";
}

}  // namespace loom::tuner
