#include "comm/info.h"

#include <string_view>

#include "base/params.h"
#include "base/reduce_kernels.h"
#include "base/status.h"
#include "collectives/builders.h"
#include "loom/loom.h"

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
         "\"transports\": [\"shm\", \"tcp\"], \"reduction_kernels\": " + jsonString(reduceIsa()) +
         ", \"algorithms\": " + algorithmsJson() + ", \"parameters\": " + parametersJson() + "}";
}

}  // namespace loom
