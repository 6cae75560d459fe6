#include "base/nccl_env.h"

#include <strings.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "base/log.h"

extern char** environ;

namespace loom::ncclenv {
namespace {

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

// The pieces of `s` between `sep`, trimmed; empty pieces are skipped, as NCCL's parser does.
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  for (size_t start = 0; start <= s.size();) {
    size_t end = s.find(sep, start);
    if (end == std::string::npos) end = s.size();
    std::string piece = trim(s.substr(start, end - start));
    if (!piece.empty()) out.push_back(piece);
    start = end + 1;
  }
  return out;
}

std::string upper(std::string s) {
  for (char& ch : s) ch = char(toupper(static_cast<unsigned char>(ch)));
  return s;
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : sep) + item;
  return out;
}

void addOnce(std::vector<std::string>* list, const std::string& item) {
  for (const std::string& have : *list)
    if (have == item) return;
  list->push_back(item);
}

// NCCL's subsystems (NCCL_DEBUG_SUBSYS) and loom's that logs the same kind of event; "" where
// loom has none (it has no proxy thread, no NVLink SHARP, no profiler or RAS service).
constexpr struct {
  const char* nccl;
  const char* loom;
} kSubsystems[] = {
    {"INIT", "INIT"},   {"COLL", "COLL"},      {"P2P", "SHM"},  // within a host: shared memory
    {"SHM", "SHM"},     {"NET", "TCP"},        {"GRAPH", "INIT"},  // topology logs as INIT
    {"TUNING", "TUNE"}, {"ENV", "ENV"},        {"ALLOC", "SHM"},   // loomMemAlloc is shm's
    {"CALL", "API"},    {"PROXY", ""},         {"NVLS", ""},
    {"BOOTSTRAP", "BOOT"}, {"REG", "SHM"},     // registered buffers: shm's peer mappings
    {"PROFILE", ""},    {"RAS", ""},           {"ALL", "ALL"},
};

// The functions NCCL_ALGO names, with loom's collective of each.
constexpr int kFunctions = 5;
constexpr struct {
  const char* nccl;
  const char* loom;
} kFunctionNames[kFunctions] = {{"AllReduce", "allreduce"},
                                {"Broadcast", "broadcast"},
                                {"Reduce", "reduce"},
                                {"AllGather", "allgather"},
                                {"ReduceScatter", "reducescatter"}};

// NCCL's algorithms in NCCL's order, and loom's builder of the same shape per function of
// kFunctionNames (null: loom has none). Ring broadcast and reduce are NCCL's pipelined chains
// around the ring; PAT is a logarithmic-step schedule of Bruck's kind for allgather and
// reduce-scatter; CollNet and NVLS are offloads to switches that loom does not drive.
constexpr struct {
  const char* nccl;
  const char* loom[kFunctions];
} kAlgorithms[] = {
    {"Tree", {"tree", "tree", "tree", nullptr, nullptr}},
    {"Ring", {"ring", "chain", "chain", "ring", "ring"}},
    {"CollNetDirect", {}},
    {"CollNetChain", {}},
    {"NVLS", {}},
    {"NVLSTree", {}},
    {"PAT", {nullptr, nullptr, nullptr, "bruck", "rh"}},
};
constexpr int kNumAlgorithms = int(sizeof(kAlgorithms) / sizeof(kAlgorithms[0]));

bool hasCounterpart(int algorithm) {
  for (const char* builder : kAlgorithms[algorithm].loom)
    if (builder != nullptr) return true;
  return false;
}

std::string knownNames(bool functions) {
  std::vector<std::string> names;
  if (functions)
    for (const auto& f : kFunctionNames) names.push_back(f.nccl);
  else
    for (const auto& a : kAlgorithms) names.push_back(a.nccl);
  return join(names, ", ");
}

// One LIST of NCCL_ALGO: the algorithms it allows, in the order they count. Names loom has no
// counterpart for go to *unmatched; a name NCCL does not know is *error.
std::vector<int> parseAlgorithmList(const std::string& text, std::vector<std::string>* unmatched,
                                    std::string* error) {
  const bool exclude = !text.empty() && text[0] == '^';
  std::vector<bool> named(kNumAlgorithms, false);
  std::vector<int> written;
  for (const std::string& name : split(exclude ? text.substr(1) : text, ',')) {
    int a = 0;
    while (a < kNumAlgorithms && strcasecmp(name.c_str(), kAlgorithms[a].nccl) != 0) ++a;
    if (a == kNumAlgorithms) {
      *error = "unknown algorithm \"" + name + "\" (NCCL's: " + knownNames(false) + ")";
      return {};
    }
    named[a] = true;
    written.push_back(a);
    if (!exclude && !hasCounterpart(a)) addOnce(unmatched, kAlgorithms[a].nccl);
  }
  if (!exclude) return written;
  std::vector<int> rest;
  for (int a = 0; a < kNumAlgorithms; ++a)
    if (!named[a]) rest.push_back(a);
  return rest;
}

// `pattern` is a name, or has one '*' that stands for any text.
bool matches(const std::string& pattern, const std::string& name) {
  const size_t star = pattern.find('*');
  if (star == std::string::npos) return name == pattern;
  const size_t tail = pattern.size() - star - 1;
  return name.size() >= star + tail && name.compare(0, star, pattern, 0, star) == 0 &&
         name.compare(name.size() - tail, tail, pattern, star + 1, tail) == 0;
}

}  // namespace

params::Translation debugLevel(const std::string& nccl) {
  const std::string level = upper(trim(nccl));
  if (level == "NONE" || level == "WARN" || level == "INFO" || level == "TRACE")
    return {level, "", ""};
  if (level == "VERSION") return {"WARN", "", ""};
  if (level == "ABORT") return {"INFO", "", ""};
  return {"WARN", "unknown level (NCCL's: NONE, VERSION, WARN, INFO, ABORT, TRACE); loom logs at WARN",
          ""};
}

params::Translation debugSubsystems(const std::string& nccl) {
  std::string list = trim(nccl);
  const bool invert = !list.empty() && list[0] == '^';
  if (invert) list = list.substr(1);
  std::vector<std::string> mapped, unknown;
  for (const std::string& name : split(list, ',')) {
    bool known = false;
    for (const auto& s : kSubsystems)
      if (strcasecmp(name.c_str(), s.nccl) == 0) {
        known = true;
        if (*s.loom != '\0') addOnce(&mapped, s.loom);
      }
    if (!known) addOnce(&unknown, name);
  }
  params::Translation t;
  // Nothing left: all of them (^ of nothing) or none (^ALL, all but all).
  if (mapped.empty()) t.text = invert ? "ALL" : "^ALL";
  else t.text = (invert ? "^" : "") + join(mapped, ",");
  if (!unknown.empty()) t.warning = "unknown subsystem(s) " + join(unknown, ", ") + " left out";
  return t;
}

params::Translation algorithms(const std::string& nccl) {
  std::vector<int> allowed[kFunctions];
  bool set[kFunctions] = {};
  std::vector<std::string> unmatched;
  params::Translation t;
  const std::vector<std::string> entries = split(nccl, ';');
  for (size_t i = 0; i < entries.size(); ++i) {
    const size_t colon = entries[i].find(':');
    int function = -1;  // -1: every function
    if (colon != std::string::npos) {
      const std::string prefix = trim(entries[i].substr(0, colon));
      while (++function < kFunctions && strcasecmp(prefix.c_str(), kFunctionNames[function].nccl));
      if (function == kFunctions) {
        t.error = "unknown function \"" + prefix + "\" (NCCL's: " + knownNames(true) + ")";
        return t;
      }
    } else if (i > 0) {
      t.error = "\"" + entries[i] + "\": every list but the first needs a function (e.g. "
                "allreduce:ring)";
      return t;
    }
    const std::string list = trim(colon == std::string::npos ? entries[i]
                                                             : entries[i].substr(colon + 1));
    std::vector<int> algos = parseAlgorithmList(list, &unmatched, &t.error);
    if (!t.error.empty()) return t;
    for (int f = 0; f < kFunctions; ++f)
      if (function < 0 || function == f) {
        allowed[f] = algos;
        set[f] = true;
      }
  }
  std::vector<std::string> forced;
  for (int f = 0; f < kFunctions; ++f) {
    if (!set[f]) continue;
    for (int a : allowed[f])
      if (const char* builder = kAlgorithms[a].loom[f]) {
        forced.push_back(std::string(kFunctionNames[f].loom) + "=" + builder);
        break;
      }
  }
  t.text = join(forced, ",");
  if (!unmatched.empty())
    t.warning = "loom has no counterpart for " + join(unmatched, ", ") + "; left out";
  return t;
}

params::Translation shmDisable(const std::string& nccl) {
  char* end = nullptr;
  const long long v = strtoll(nccl.c_str(), &end, 0);
  if (end == nccl.c_str() || *end != '\0') return {"", "", "expected an integer (1 disables)"};
  return {v != 0 ? "tcp" : "auto", "", ""};
}

std::vector<Counterpart> algorithmCounterparts() {
  std::vector<Counterpart> out;
  for (const auto& a : kAlgorithms)
    for (int f = 0; f < kFunctions; ++f)
      out.push_back({a.nccl, kFunctionNames[f].nccl, kFunctionNames[f].loom, a.loom[f]});
  return out;
}

const std::vector<Ignored>& ignoredVariables() {
  static const std::vector<Ignored> kIgnored = {
      {"NCCL_PROTO",
       "loom has no protocols: LL, LL128 and Simple are NCCL's ways of moving data in GPU "
       "kernels; each loom algorithm has one way",
       false},
      {"NCCL_TOPO_FILE",
       "NCCL's XML describes one node's PCI and NVLink tree (GPUs, NICs, CPUs), not the ranks, "
       "hosts and measured links of loom's model (LOOM_TOPO_FILE, JSON); loom detects the "
       "topology instead",
       true},
      {"NCCL_TOPO_DUMP_FILE", "loom writes its own JSON model: LOOM_TOPO_DUMP", false},
      {"NCCL_NET", "loom's network transport is TCP (LOOM_TRANSPORT, LOOM_TCP_*)", false},
      {"NCCL_NET_*", "loom's network transport is TCP (LOOM_TRANSPORT, LOOM_TCP_*); it loads no "
                     "net plugins",
       false},
      {"NCCL_IB_*", "loom has no InfiniBand or RoCE transport", false},
      {"NCCL_P2P_*", "GPU peer-to-peer; loom moves data within a host through shared memory "
                     "(LOOM_SHM_*)",
       false},
      {"NCCL_SHM_*", "loom's shared memory settings are LOOM_SHM_* (NCCL_SHM_DISABLE is read)",
       false},
      {"NCCL_SOCKET_NTHREADS", "loom's sockets per peer: LOOM_TCP_SOCKETS", false},
      {"NCCL_NSOCKS_PERTHREAD", "loom's sockets per peer: LOOM_TCP_SOCKETS", false},
      {"NCCL_COLLNET_*", "loom does not drive in-network reduction (SHARP)", false},
      {"NCCL_NVLS_*", "loom does not drive NVLink SHARP", false},
      {"NCCL_*_PLUGIN", "loom loads no NCCL plugins", false},
  };
  return kIgnored;
}

std::vector<IgnoredSetting> ignoredSettings() {
  const std::vector<params::Value> values = params::all();
  std::vector<IgnoredSetting> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry(*e);
    const size_t eq = entry.find('=');
    if (entry.rfind("NCCL_", 0) != 0 || eq == std::string::npos) continue;
    const std::string name = entry.substr(0, eq);
    bool read = false;
    for (const params::Value& v : values)
      read = read || (v.entry->ncclName != nullptr && name == v.entry->ncclName);
    if (read) continue;
    IgnoredSetting s{name, entry.substr(eq + 1), "no loom meaning", false};
    for (const Ignored& i : ignoredVariables())
      if (matches(i.pattern, name)) {
        s.reason = i.reason;
        s.warn = i.warn;
        break;
      }
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(),
            [](const IgnoredSetting& a, const IgnoredSetting& b) { return a.name < b.name; });
  return out;
}

void reportOnce() {
  static std::atomic<uint64_t> reported{0};
  const uint64_t generation = params::generation();
  if (reported.exchange(generation) == generation) return;
  for (const params::Value& v : params::all()) {
    const char* nccl = v.entry->ncclName;
    if (nccl == nullptr) continue;
    if (strcmp(v.source, nccl) == 0) {
      LOOM_INFO("ENV", "%s=\"%s\" read as %s=\"%s\"", nccl, v.ncclText.c_str(), v.entry->name,
                v.text.c_str());
      if (!v.warning.empty())
        LOOM_WARN("ENV", "%s=\"%s\": %s", nccl, v.ncclText.c_str(), v.warning.c_str());
    } else if (const char* set = getenv(nccl); set != nullptr && *set != '\0' &&
                                                     strcmp(v.source, v.entry->name) == 0) {
      LOOM_INFO("ENV", "%s=\"%s\" ignored: %s is set", nccl, set, v.entry->name);
    }
  }
  for (const IgnoredSetting& s : ignoredSettings()) {
    if (s.warn)
      LOOM_WARN("ENV", "%s=\"%s\" ignored: %s", s.name.c_str(), s.value.c_str(), s.reason);
    else
      LOOM_INFO("ENV", "%s=\"%s\" ignored: %s", s.name.c_str(), s.value.c_str(), s.reason);
  }
}

}  // namespace loom::ncclenv
