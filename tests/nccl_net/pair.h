// Two processes joined through NCCL's net plugin as NCCL joins two ranks: the receiver (rank 0)
// listens and passes its handle (here through the fork launcher's allgather, in NCCL through
// its bootstrap), the sender (rank 1) connects, the receiver accepts; both loop on the
// non-blocking calls until they hand out a comm. And the bytes the tests send: a pattern
// that differs in every 8-byte word and every message, checked bit for bit.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "tests/nccl_net/net_api.h"
#include "tests/support/fork_ranks.h"

namespace loom::testing {

inline constexpr int kReceiver = 0;
inline constexpr int kSender = 1;

// Opens, inits and connects; *comm is the receive comm on rank 0, the send comm on rank 1.
// Returns 0, or 1 after reporting what failed (RANK_CHECK).
inline int joinPair(RankContext& ctx, NetApi& api, void** comm) {
  RANK_CHECK(api.error().empty(), "%s", api.error().c_str());
  RANK_CHECK(api.init() == ncclSuccess, "init");
  int ndev = 0;
  RANK_CHECK(api.devices(&ndev) == ncclSuccess && ndev >= 1, "devices: %d", ndev);
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  if (ctx.rank() == kReceiver) {
    void* listenComm = nullptr;
    RANK_CHECK(api.listen(0, handle, &listenComm) == ncclSuccess && listenComm != nullptr,
               "listen");
    // Nobody has connected yet: accept must answer at once, with no comm.
    void* early = reinterpret_cast<void*>(1);
    RANK_CHECK(api.accept(listenComm, &early) == ncclSuccess && early == nullptr,
               "accept before any connect: %p", early);
    ctx.allgather(std::string(handle, sizeof(handle)));
    RANK_CHECK(api.acceptLoop(listenComm, comm) == ncclSuccess, "accept loop");
    RANK_CHECK(api.closeListen(listenComm) == ncclSuccess, "closeListen");
  } else {
    const std::string theirs = ctx.allgather("")[kReceiver];
    memcpy(handle, theirs.data(), sizeof(handle));
    RANK_CHECK(api.connectLoop(0, handle, comm) == ncclSuccess, "connect loop");
  }
  return 0;
}

inline uint64_t patternWord(uint64_t seed, size_t word) {
  uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ull + word;
  x ^= x >> 29;
  return x * 0xbf58476d1ce4e5b9ull;
}

inline void fillPattern(void* data, size_t bytes, uint64_t seed) {
  auto* p = static_cast<unsigned char*>(data);
  size_t words = bytes / 8;
  for (size_t w = 0; w < words; ++w) {
    uint64_t v = patternWord(seed, w);
    memcpy(p + w * 8, &v, 8);
  }
  uint64_t tail = patternWord(seed, words);
  memcpy(p + words * 8, &tail, bytes % 8);
}

// The first byte that differs from the pattern, or -1.
inline int64_t patternMismatch(const void* data, size_t bytes, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  size_t words = bytes / 8;
  for (size_t w = 0; w < words; ++w) {
    uint64_t v = patternWord(seed, w);
    if (memcmp(p + w * 8, &v, 8) != 0) return int64_t(w * 8);
  }
  uint64_t tail = patternWord(seed, words);
  return memcmp(p + words * 8, &tail, bytes % 8) == 0 ? -1 : int64_t(words * 8);
}

}  // namespace loom::testing
