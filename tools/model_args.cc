#include "tools/model_args.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "toolkit/units.h"
#include "topology/builders.h"

namespace loom::tools {

bool parseSizeSweep(const std::string& s, size_t* minBytes, size_t* maxBytes, int* factor) {
  size_t c1 = s.find(':'), c2 = s.find(':', c1 == std::string::npos ? c1 : c1 + 1);
  if (c1 == std::string::npos || c2 == std::string::npos) return false;
  auto lo = toolkit::parseSize(s.substr(0, c1)), hi = toolkit::parseSize(s.substr(c1 + 1, c2 - c1 - 1));
  char* end = nullptr;
  long f = strtol(s.c_str() + c2 + 1, &end, 10);
  if (!lo || !hi || *end || f < 2 || *lo > *hi) return false;
  *minBytes = *lo;
  *maxBytes = *hi;
  *factor = int(f);
  return true;
}

bool chooseUniform(const std::string& text, ModelChoice* out, std::string* error) {
  tuner::UniformCluster& u = out->uniform;
  if (sscanf(text.c_str(), "%dx%d", &u.hosts, &u.ranksPerHost) != 2 || u.hosts < 1 ||
      u.ranksPerHost < 1) {
    *error = "--uniform wants HOSTSxRANKS, e.g. 4x8, not '" + text + "'";
    return false;
  }
  out->useUniform = true;
  return true;
}

std::string modelChoiceError(const ModelChoice& choice) {
  return choice.topoFile.empty() == !choice.useUniform ? "give one of --topo and --uniform" : "";
}

bool parseNetBurst(const std::string& text, tuner::UniformCluster* out, std::string* error) {
  auto bytes = toolkit::parseSize(text);
  if (!bytes) {
    *error = "--net-burst wants bytes such as 18K, not '" + text + "'";
    return false;
  }
  out->netBurstBytes = *bytes;
  return true;
}

namespace {

// A JSON model, or when no such file exists the corpus model of that name, built in code:
// dgx-rail-1024 is in the corpus but, at several MB, has no file in topology/models/.
Status loadFileOrCorpus(const std::string& topoFile, topology::Topology* out) {
  Status st = topology::loadTopology(topoFile, out);
  if (st.isOk() || access(topoFile.c_str(), F_OK) == 0) return st;
  std::string names;
  for (topology::Topology& model : topology::corpusModels()) {
    if (model.name == topoFile) {
      *out = std::move(model);
      return Status::ok();
    }
    names += (names.empty() ? "" : ", ") + model.name;
  }
  return errorf(loomInvalidArgument, "%s, and no corpus model is called that (%s)",
                st.message().c_str(), names.c_str());
}

}  // namespace

bool loadModel(const ModelChoice& choice, int ranks, topology::Topology* out, std::string* error) {
  if (choice.useUniform) {
    *out = tuner::uniformTopology(choice.uniform);
  } else {
    Status st = loadFileOrCorpus(choice.topoFile, out);
    if (!st.isOk()) {
      *error = st.message();
      return false;
    }
  }
  if (ranks < 0 || ranks > int(out->ranks.size())) {
    *error = "--ranks " + std::to_string(ranks) + ", but the topology has " +
             std::to_string(out->ranks.size()) + " ranks";
    return false;
  }
  if (ranks > 0) out->ranks.resize(size_t(ranks));
  if (out->ranks.empty()) {
    *error = "the topology has no ranks";
    return false;
  }
  return true;
}

std::vector<int32_t> hostsByFirstAppearance(const topology::Topology& topo) {
  std::vector<int32_t> seen, hostOf;
  for (const auto& r : topo.ranks) {
    auto pos = std::find(seen.begin(), seen.end(), r.host);
    hostOf.push_back(int32_t(pos - seen.begin()));
    if (pos == seen.end()) seen.push_back(r.host);
  }
  return hostOf;
}

}  // namespace loom::tools
