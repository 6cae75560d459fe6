// LOOM_ALGO's grammar (comm/options.h parseAlgorithms) and NCCL_ALGO's translation into it
// (base/nccl_env.h): any text parses or fails with a message, and what NCCL_ALGO translates to
// without an error is a LOOM_ALGO that parses.
#include "base/nccl_env.h"
#include "comm/options.h"
#include "tests/fuzz/fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input = loom::fuzz::text(data, size);
  loom::ForcedBuilders forced{};
  const loom::Status st = loom::parseAlgorithms(input, &forced);
  LOOM_FUZZ_CHECK(st.isOk() || !st.message().empty(), "an error without a message");

  const loom::params::Translation t = loom::ncclenv::algorithms(input);
  if (!t.error.empty()) return 0;
  loom::ForcedBuilders translated{};
  const loom::Status back = loom::parseAlgorithms(t.text, &translated);
  LOOM_FUZZ_CHECK(back.isOk(), "NCCL_ALGO=\"%s\" translates to LOOM_ALGO=\"%s\", which fails: %s",
                  input.c_str(), t.text.c_str(), back.message().c_str());
  return 0;
}
