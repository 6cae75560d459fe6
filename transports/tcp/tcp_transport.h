// The TCP transport: several non-blocking sockets per peer and lane, each
// direction one byte stream cut in chunks striped round-robin over the sockets.
//
// Connection setup: the lower rank of a pair opens the sockets to the higher rank's listener and
// sends a TcpHello on each without waiting for an answer; the higher rank's connect() returns at
// once and its connection picks its sockets out of the listener as they arrive (progress()),
// so neither side ever waits for the other to reach connect().
//
// A transport and its connections are driven from one thread at a time (the executor's).
//
// createTcpTransport is declared here, tcpListenAddress and the pacing in transports/transport.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "base/socket.h"
#include "base/status.h"
#include "transports/transport.h"

namespace loom::transports::tcp {

// Settings of one TCP transport (a communicator's: LOOM_TCP_SOCKETS / LOOM_TCP_CHUNK_BYTES /
// LOOM_TCP_PACING, comm/options.h). The connecting (lower) rank's sockets and chunks govern a connection: they
// travel in its hello, so two ranks configured differently still agree on every chunk boundary.
struct TcpOptions {
  int sockets = 2;
  size_t chunkBytes = size_t(128) << 10;  // rounded down to a multiple of kChunkAlign
  // The most bytes per second a connection sends, shared evenly by its sockets and paced by
  // the kernel (SO_MAX_PACING_RATE); 0: unpaced. Where a switch's (or here, a shaped link's)
  // queue is short, bursts at line rate overflow it and TCP stalls on retransmission timeouts.
  uint64_t pacingBytesPerSecond = 0;
  // LOOM_TCP_PACING=-1: each socket to a peer is paced at the rate setTcpPeerPacing gives for
  // it (the communicator's: its topology's slowest network link on the way); a message of up to
  // one chunk goes whole on one socket, and must still have the link's rate.
  // pacingBytesPerSecond for peers it gives none.
  bool pacingPerPeer = false;
  // Whether the transport listens for the connections of lower ranks. One that only dials
  // (the NCCL net plugin's sending side, a rank 0 of two) needs no listener.
  bool listens = true;
  // Where it listens; empty (len 0): the interface LOOM_SOCKET_IFNAME chooses.
  net::Address listenAddress;
  // Whether a lower rank's connect() returns before its sockets are connected: they connect in
  // progress(), and tcpConnected says when they have (for callers that must never wait, as
  // NCCL's connect must not).
  bool dialWithoutWaiting = false;
};

// LOOM_TCP_SOCKETS, LOOM_TCP_CHUNK_BYTES and LOOM_TCP_PACING as TcpOptions.
TcpOptions tcpOptionsFromParams();

// Whether conn's sockets are all there (a higher rank's connection gets them from its
// listener, as the lower rank dials); false if conn is not a TCP connection.
bool tcpConnected(const Connection& conn);

// The pacing rate each of conn's sockets sends under, as the kernel reports it
// (SO_MAX_PACING_RATE; ~0 when unpaced); empty if conn is not a TCP connection.
std::vector<uint64_t> tcpSocketPacing(const Connection& conn);

inline constexpr size_t kChunkAlign = 64;  // keeps chunk boundaries on element boundaries
inline constexpr int kMaxSockets = 64;

// The first bytes on every socket, sent by the connecting (lower) rank. Host byte order: the
// ranks of one job share an architecture.
struct TcpHello {
  uint64_t magic;
  unsigned char secret[16];  // CommContext::secret
  int32_t rank;              // the connecting rank
  int32_t lane;
  int32_t socketIndex;  // 0 .. sockets-1: the position in the round-robin
  int32_t sockets;
  uint64_t chunkBytes;
};
static_assert(sizeof(TcpHello) == 48, "TcpHello is a wire format");
inline constexpr uint64_t kTcpHelloMagic = 0x6c6f6f6d2d746370ull;  // "loom-tcp"
inline constexpr size_t kMaxChunkBytes = size_t(1) << 30;

// What precedes every message (TransferOp) on its direction's stream, in the message's first
// chunk: its size and its call (TransferOp::stamp). The receive checks it before it counts any
// of the message's bytes as received, so a message of another call, or of another size (after
// which the stream no longer splits alike at both ends), is an error, not data. Host byte order,
// as the hello.
struct TcpMessageHeader {
  uint64_t magic;  // kTcpMessageMagic
  uint64_t bytes;
  CallStamp stamp;
};
static_assert(sizeof(TcpMessageHeader) == 32 && kChunkAlign % sizeof(TcpMessageHeader) == 0,
              "TcpMessageHeader is a wire format, and keeps the messages' chunks on element "
              "boundaries");
inline constexpr uint64_t kTcpMessageMagic = 0x67736d2d6d6f6f6cull;  // "loom-msg"

// Whether header h, as received, begins the message a receive of `bytes` bytes of call `stamp`
// expects; where not, *out says what it found. Pure, so that tests/fuzz/ can feed it garbage.
bool checkTcpMessage(const TcpMessageHeader& h, const CallStamp& stamp, uint64_t bytes,
                     MessageMismatch* out);

// Why a listening rank (`myRank`, of a communicator whose secret is `secret`) refuses hello m,
// or "" when it files the socket. Anyone who reaches the listener may send anything: pure,
// so tests/fuzz/ can feed it garbage.
std::string checkTcpHello(const TcpHello& m, const unsigned char secret[16], int myRank);

Status createTcpTransport(const CommContext* ctx, const TcpOptions& options,
                          std::unique_ptr<Transport>* out);

}  // namespace loom::transports::tcp
