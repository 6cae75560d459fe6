// Topology JSON (topology/json.cc, docs/TOPOLOGY.md; LOOM_TOPO_FILE and the per-host cache):
// any text loads or fails with a message, and a model that loads is written out as JSON that
// loads again. The bandwidth and latency grammars ("100Gb/s", "1.5us") take every line alone.
#include "tests/fuzz/fuzz.h"
#include "topology/topology.h"

namespace topology = loom::topology;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input = loom::fuzz::text(data, size);
  const std::string line = input.substr(0, input.find('\n'));
  double value = 0;
  if (topology::parseBandwidth(line, &value).isOk()) (void)topology::formatBandwidth(value);
  if (topology::parseLatency(line, &value).isOk()) (void)topology::formatLatency(value);

  topology::Topology topo;
  const loom::Status st = topology::parseTopology(input, &topo);
  if (!st.isOk()) {
    LOOM_FUZZ_CHECK(!st.message().empty(), "an error without a message");
    return 0;
  }
  const std::string written = topology::toJson(topo);
  topology::Topology again;
  const loom::Status back = topology::parseTopology(written, &again);
  LOOM_FUZZ_CHECK(back.isOk(), "a model that loaded is written as JSON that does not: %s\n%s",
                  back.message().c_str(), written.c_str());
  return 0;
}
