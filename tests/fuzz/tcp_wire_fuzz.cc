// What the TCP transport's listener reads from a peer (transports/tcp/tcp_transport.h): the
// hello on each socket, which files the socket under a rank, lane and position. Anything is
// refused with a reason or names a socket the transport can use.
#include <algorithm>
#include <cstring>

#include "tests/fuzz/fuzz.h"
#include "transports/tcp/tcp_transport.h"

namespace tcp = loom::transports::tcp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The secret is all zeros, as in the seeds (tests/fuzz/seeds/tcp_wire/), so the fuzzer gets
  // past it; the listener is rank 8 of its communicator.
  static const unsigned char kSecret[16] = {};
  constexpr int kMyRank = 8;
  tcp::TcpHello hello;
  memset(&hello, 0, sizeof(hello));
  memcpy(&hello, data, std::min(size, sizeof(hello)));
  const std::string why = tcp::checkTcpHello(hello, kSecret, kMyRank);
  if (!why.empty()) return 0;
  LOOM_FUZZ_CHECK(hello.rank >= 0 && hello.rank < kMyRank && hello.sockets >= 1 &&
                      hello.sockets <= tcp::kMaxSockets && hello.socketIndex >= 0 &&
                      hello.socketIndex < hello.sockets && hello.lane >= 0 &&
                      hello.chunkBytes % tcp::kChunkAlign == 0 && hello.chunkBytes > 0 &&
                      hello.chunkBytes <= tcp::kMaxChunkBytes,
                  "accepted a hello the transport cannot use");
  return 0;
}
