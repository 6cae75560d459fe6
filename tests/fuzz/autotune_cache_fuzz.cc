// The autotune cache file (tuner/autotune.h, <LOOM_CACHE_DIR>/autotune-<signature>.json): any
// text loads or fails with a message, and a cache that loads is written as a file that loads
// again to the same decisions.
#include "tests/fuzz/fuzz.h"
#include "tuner/autotune.h"

using loom::tuner::AutotuneCache;

// The signature the seeds (tests/fuzz/seeds/autotune_cache/) were written for.
static const std::string kSignature = "fuzz";

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  AutotuneCache cache;
  std::vector<std::string> skipped;
  const loom::Status st = cache.parse(loom::fuzz::text(data, size), kSignature, &skipped);
  if (!st.isOk()) {
    LOOM_FUZZ_CHECK(!st.message().empty() && cache.size() == 0, "a failed load kept entries");
    return 0;
  }
  AutotuneCache again;
  std::vector<std::string> skippedAgain;
  const std::string written = cache.toJson(kSignature);
  const loom::Status back = again.parse(written, kSignature, &skippedAgain);
  LOOM_FUZZ_CHECK(back.isOk() && skippedAgain.empty() && again.digest() == cache.digest(),
                  "a cache that loaded does not load again as itself: %s\n%s",
                  back.message().c_str(), written.c_str());
  return 0;
}
