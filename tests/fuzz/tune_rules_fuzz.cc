// LOOM_TUNE's rule grammar (tuner/tune_table.h): any text parses or fails with a message, and
// every rule it accepts reads back, from its own text, as the same rule.
#include "tests/fuzz/fuzz.h"
#include "tuner/tune_table.h"

using loom::tuner::CallShape;
using loom::tuner::TuneRule;
using loom::tuner::TuneTable;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input = loom::fuzz::text(data, size);
  TuneTable table;
  const loom::Status st = TuneTable::parse(input, "LOOM_TUNE", &table);
  if (!st.isOk()) {
    LOOM_FUZZ_CHECK(!st.message().empty(), "an error without a message");
    return 0;
  }
  for (const TuneRule& rule : table.rules()) {
    TuneTable again;
    const loom::Status back = TuneTable::parse(rule.text, "rule", &again);
    LOOM_FUZZ_CHECK(back.isOk() && again.rules().size() == 1, "rule \"%s\" does not read back: %s",
                    rule.text.c_str(), back.message().c_str());
    const TuneRule& r = again.rules()[0];
    LOOM_FUZZ_CHECK(r.coll == rule.coll && r.builder == rule.builder && r.params == rule.params &&
                        r.minBytes == rule.minBytes && r.maxBytes == rule.maxBytes &&
                        r.minRanks == rule.minRanks && r.maxRanks == rule.maxRanks &&
                        r.minHosts == rule.minHosts && r.maxHosts == rule.maxHosts,
                    "rule \"%s\" reads back as another", rule.text.c_str());
    (void)loom::tuner::formatParams(rule.params);
    for (uint64_t bytes : {uint64_t(0), uint64_t(1) << 20, ~uint64_t(0)})
      (void)rule.matches(CallShape{rule.coll, bytes, 4, 2});
  }
  return 0;
}
