#include "comm/info.h"

#include <string_view>

#include "base/params.h"
#include "base/reduce_kernels.h"
#include "base/status.h"
#include "collectives/builders.h"
#include "loom/loom.h"

namespace loom {
namespace {

// s as a JSON string, quotes included.
std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += strprintf("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string algorithmsJson() {
  std::string out = "{";
  for (int c = 0; c <= int(collectives::Collective::SendRecv); ++c) {
    auto coll = collectives::Collective(c);
    out += (c ? ", " : "") + quoted(collectives::collectiveName(coll)) + ": [";
    const char* sep = "";
    for (std::string_view name : collectives::builderNames(coll)) {
      out += sep + quoted(name);
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
    out += sep + quoted(v.entry->name) + ": {\"value\": " + quoted(v.text) +
           ", \"default\": " + quoted(v.entry->defaultValue) +
           ", \"source\": " + quoted(v.source) +
           ", \"description\": " + quoted(v.entry->description) + "}";
    sep = ", ";
  }
  return out + "}";
}

}  // namespace

std::string infoJson() {
  return strprintf("{\"version\": \"%d.%d.%d\", \"version_code\": %d, ", LOOM_MAJOR,
                   LOOM_MINOR, LOOM_PATCH, LOOM_VERSION_CODE) +
         "\"transports\": [\"shm\", \"tcp\"], \"reduction_kernels\": " + quoted(reduceIsa()) +
         ", \"algorithms\": " + algorithmsJson() + ", \"parameters\": " + parametersJson() + "}";
}

}  // namespace loom
