// What the TCP transport reads from a peer (transports/tcp/tcp_transport.h): the hello on each
// socket, which files the socket under a rank, lane and position, and the header before every
// message, which a receive checks against the message it expects. The input's first
// sizeof(TcpHello) bytes are a hello, the next sizeof(TcpMessageHeader) a message header. A
// hello is refused with a reason or names a socket the transport can use; a header is accepted
// only as the very message expected, and a refused one is reported as it was read.
#include <algorithm>
#include <cstring>

#include "tests/fuzz/fuzz.h"
#include "transports/tcp/tcp_transport.h"

namespace tcp = loom::transports::tcp;
using loom::transports::CallStamp;
using loom::transports::MessageMismatch;

namespace {

void checkHello(const uint8_t* data, size_t size) {
  // The secret is all zeros, as in the seeds (tests/fuzz/seeds/tcp_wire/), so the fuzzer gets
  // past it; the listener is rank 8 of its communicator.
  static const unsigned char kSecret[16] = {};
  constexpr int kMyRank = 8;
  tcp::TcpHello hello;
  memset(&hello, 0, sizeof(hello));
  memcpy(&hello, data, std::min(size, sizeof(hello)));
  const std::string why = tcp::checkTcpHello(hello, kSecret, kMyRank);
  if (!why.empty()) return;
  LOOM_FUZZ_CHECK(hello.rank >= 0 && hello.rank < kMyRank && hello.sockets >= 1 &&
                      hello.sockets <= tcp::kMaxSockets && hello.socketIndex >= 0 &&
                      hello.socketIndex < hello.sockets && hello.lane >= 0 &&
                      hello.chunkBytes % tcp::kChunkAlign == 0 && hello.chunkBytes > 0 &&
                      hello.chunkBytes <= tcp::kMaxChunkBytes,
                  "accepted a hello the transport cannot use");
}

void checkMessageHeader(const uint8_t* data, size_t size) {
  // The receive the seeds' headers are for: call 3 on its link, an allreduce (collective 0) of
  // 100 int32 elements (dtype 2), sum, 400 bytes.
  const CallStamp expected = CallStamp::of(3, 0, 2, 0, 0, 100);
  constexpr uint64_t kBytes = 400;
  tcp::TcpMessageHeader h;
  memset(&h, 0, sizeof(h));
  memcpy(&h, data, std::min(size, sizeof(h)));
  MessageMismatch m;
  const bool ok = tcp::checkTcpMessage(h, expected, kBytes, &m);
  const bool same = h.magic == tcp::kTcpMessageMagic && h.bytes == kBytes && h.stamp == expected;
  LOOM_FUZZ_CHECK(ok == same, "a header %s that is %s the message expected",
                  ok ? "accepted" : "refused", same ? "exactly" : "not");
  if (ok) return;
  LOOM_FUZZ_CHECK(m.header == (h.magic == tcp::kTcpMessageMagic) && m.found == h.stamp &&
                      m.foundBytes == h.bytes && m.expected == expected &&
                      m.expectedBytes == kBytes,
                  "a refused header reported otherwise than it was read");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  checkHello(data, size);
  const size_t at = std::min(size, sizeof(tcp::TcpHello));
  checkMessageHeader(data + at, size - at);
  return 0;
}
