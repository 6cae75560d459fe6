#include "comm/info.h"

#include <string_view>

#include "base/params.h"
#include "base/reduce_kernels.h"
#include "base/status.h"
#include "collectives/builders.h"
#include "comm/connections.h"
#include "loom/loom.h"
#include "transports/ucx/ucx_transport.h"

namespace loom {
namespace {

std::string algorithmsJson() {
  std::string out = "{";
  for (int c = 0; c <= int(collectives::Collective::SendRecv); ++c) {
    auto coll = collectives::Collective(c);
    out += (c ? ", " : "") + jsonString(collectives::collectiveName(coll)) + ": [";
    const char* sep = "";
    for (std::string_view name : collectives::builderNames(coll)) {
      out += sep + jsonString(name);
      sep = ", ";
    }
    out += "]";
  }
  return out + "}";
}

// {"version": "1.13.1", "transports": ["tcp/lo", ...], "memory_types": ["host", ...],
//  "rdma": false, "cuda_memory": false} or {"error": "..."}.
std::string ucxJson() {
  const transports::ucx::UcxDescription d = transports::ucx::describeUcx();
  if (!d.error.empty()) return "{\"error\": " + jsonString(d.error) + "}";
  auto list = [](const std::vector<std::string>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + jsonString(v[i]);
    return out + "]";
  };
  return "{\"version\": " + jsonString(d.version) + ", \"transports\": " + list(d.transports) +
         ", \"memory_types\": " + list(d.memoryTypes) + ", \"rdma\": " +
         (d.rdma ? "true" : "false") + ", \"cuda_memory\": " + (d.cudaMemory ? "true" : "false") +
         "}";
}

std::string parametersJson() {
  std::string out = "{";
  const char* sep = "";
  for (const params::Value& v : params::all()) {
    out += sep + jsonString(v.entry->name) + ": {\"value\": " + jsonString(v.text) +
           ", \"default\": " + jsonString(v.entry->defaultValue) +
           ", \"source\": " + jsonString(v.source) +
           ", \"description\": " + jsonString(v.entry->description) + "}";
    sep = ", ";
  }
  return out + "}";
}

}  // namespace

std::string infoJson() {
  return strprintf("{\"version\": \"%d.%d.%d\", \"version_code\": %d, ", LOOM_MAJOR,
                   LOOM_MINOR, LOOM_PATCH, LOOM_VERSION_CODE) +
         "\"transports\": [\"shm\", \"tcp\"" + (transports::ucx::ucxBuilt() ? ", \"ucx\"" : "") +
         "], \"auto_network\": " + jsonString(autoNetworkRule()) + ", \"ucx\": " + ucxJson() +
         ", \"reduction_kernels\": " + jsonString(reduceIsa()) +
         ", \"algorithms\": " + algorithmsJson() + ", \"parameters\": " + parametersJson() + "}";
}

}  // namespace loom
