// What the bootstrap root reads from a connection (comm/bootstrap.h): the hello, then messages
// (a header and a payload each), and what a rank reads back: allgather results and the store's
// keyed payloads. The input is the connection's bytes in order. Anything is refused with a
// reason or parses into what the root and the ranks can use, and what parses packs back into
// the same bytes.
#include <algorithm>
#include <cstring>
#include <vector>

#include "comm/bootstrap.h"
#include "tests/fuzz/fuzz.h"

namespace {

// The secret is all zeros, as in the seeds (tests/fuzz/seeds/bootstrap/), so the fuzzer gets
// past it.
const unsigned char kSecret[16] = {};

// The hello as the root judges it: before any rank joined, and with ranks 1 and 3 of 4 in.
int judge(const loom::BootstrapHello& h) {
  const loom::BootstrapReply first = loom::judgeHello(h, kSecret, -1, {}, false);
  if (first == loom::kAccepted)
    LOOM_FUZZ_CHECK(h.nranks >= 1 && h.nranks <= loom::kMaxBootstrapRanks && h.rank >= 0 &&
                        h.rank < h.nranks,
                    "accepted rank %d of %d", h.rank, h.nranks);
  const std::vector<int> fds = {-1, 7, -1, 9};
  const loom::BootstrapReply later = loom::judgeHello(h, kSecret, 4, fds, false);
  if (later == loom::kAccepted)
    LOOM_FUZZ_CHECK(h.nranks == 4 && (h.rank == 0 || h.rank == 2), "accepted rank %d of %d",
                    h.rank, h.nranks);
  return first == loom::kAccepted ? h.nranks : 0;
}

void readPayload(uint32_t type, const std::string& payload, int nranks) {
  std::string key, value;
  if (loom::unpackKeyed(payload, &key, &value))
    LOOM_FUZZ_CHECK(loom::packKeyed(key, value) == payload, "keyed payload does not pack back");
  std::vector<std::string> blobs;
  // As an allgather's result, for the hello's ranks (few, to keep runs fast) and for the
  // type's low bits as a count.
  for (size_t n : {size_t(std::min(nranks, 64)), size_t(type & 7)}) {
    if (loom::unpackGather(payload, n, &blobs).isOk())
      LOOM_FUZZ_CHECK(blobs.size() == n && loom::packGather(blobs) == payload,
                      "a gather of %zu ranks does not pack back", n);
  }
  // As a rank's call (kWaiting, kCallDiffers), among the hello's ranks.
  loom::BootstrapCall c;
  if (loom::unpackCall(payload, nranks, &c))
    LOOM_FUZZ_CHECK(c.rank >= 0 && c.rank < nranks && c.number > 0,
                    "accepted a call of rank %d of %d numbered %llu", c.rank, nranks,
                    (unsigned long long)c.number);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::BootstrapHello hello;
  if (size < sizeof(hello)) return 0;  // the root drops a connection that closes sooner
  memcpy(&hello, data, sizeof(hello));
  const int nranks = judge(hello);
  size_t pos = sizeof(hello);
  loom::BootstrapMessageHeader h;
  while (size - pos >= sizeof(h)) {
    memcpy(&h, data + pos, sizeof(h));
    pos += sizeof(h);
    if (!loom::checkMessageHeader(h).isOk()) return 0;  // the root drops the rank
    if (size - pos < h.len) return 0;  // the connection closed within the payload
    readPayload(h.type, std::string(reinterpret_cast<const char*>(data + pos), h.len), nranks);
    pos += h.len;
  }
  return 0;
}
