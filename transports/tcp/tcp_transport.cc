#include "transports/tcp/tcp_transport.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "base/reduce_kernels.h"
#include "base/dtype.h"
#include "base/log.h"
#include "base/params.h"
#include "base/socket.h"

namespace loom::transports {
namespace tcp {

namespace {

// Segments one sendmsg/recvmsg may cover: enough for many small ops in one system call.
constexpr int kMaxIov = 64;
// The least a send moves of a chunk whose end is not ready yet (the executor raises an op's
// limit as earlier steps produce its data). A smaller piece costs a system call, a packet and
// a wake-up at the receiver, and saves less than it costs: Bruck's allgather forwards a block
// it has with one it is still waiting for, and sending the first alone made each of its
// 32 B – 2 KiB calls 25–30% slower on netns hosts. 16 KiB takes ~130 us at 1 Gbit/s and ~8 us
// over loopback, so pipelining large messages loses little.
constexpr size_t kMinEarlyPieceBytes = size_t(16) << 10;
// The most a socket sends unpaced at once (TcpOptions pacing). Pacing keeps the large bursts of
// many sockets from overflowing a short queue together; a burst of at most this much does not
// need it (16 sockets of a host together send 512 KiB, half the netns testbed's queue), and a
// paced one pays a pacing-timer wake-up per few packets: on a busy host that timer's softirq
// waits for a CPU, and a netns 2 x 2-rank alltoall of 32 KiB (8 KiB messages) took 2.1-2.4 ms
// paced against 0.18-0.53 ms unpaced. A socket is paced while what it sends now (the memory
// one sendmsg covers) or the message it belongs to is larger.
constexpr size_t kUnpacedBurstBytes = size_t(32) << 10;

// A file descriptor that closes itself.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  void reset() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

constexpr size_t kHeaderBytes = sizeof(TcpMessageHeader);

// A queue that keeps its storage: the ops in flight of one direction, oldest first. A deque of
// them allocated and freed a block every few messages, and a small call's messages paid for it.
template <typename T>
class Ring {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  T& operator[](size_t i) { return items_[(head_ + i) & (items_.size() - 1)]; }
  const T& operator[](size_t i) const { return items_[(head_ + i) & (items_.size() - 1)]; }
  T& front() { return (*this)[0]; }
  T& push_back(const T& item) {
    if (size_ == items_.size()) {  // full: double, the oldest first
      std::vector<T> grown(std::max<size_t>(8, 2 * items_.size()));
      for (size_t i = 0; i < size_; ++i) grown[i] = (*this)[i];
      items_ = std::move(grown);
      head_ = 0;
    }
    T& slot = (*this)[size_++];
    slot = item;
    return slot;
  }
  void pop_front() {
    head_ = (head_ + 1) & (items_.size() - 1);
    --size_;
  }

 private:
  std::vector<T> items_;  // a power of two long
  size_t head_ = 0, size_ = 0;
};

// One direction of a connection. Its ops form one byte stream cut in chunks: each op is its
// header (TcpMessageHeader) and its bytes, cut in chunks of chunkBytes (the last one shorter),
// never shared with another op, so both ends derive the same boundaries from the op sizes
// alone. A position in an op counts its header's bytes first: the op's byte b is at
// kHeaderBytes + b. Chunks are numbered from the first byte of the connection in this
// direction; chunk g travels on socket g % S, and each socket carries its chunks in order.
// Sockets advance independently, so the transfer is as fast as the sum of the sockets and
// `done` is the prefix that every socket has covered.
class Stream {
 public:
  void init(int sockets, size_t chunkBytes) {
    sockets_ = sockets;
    chunkBytes_ = chunkBytes;
    pos_.resize(sockets);
    for (int s = 0; s < sockets; ++s) pos_[s] = Pos{uint64_t(s), frontSeq_, 0, 0};
    bounce_.resize(sockets);
  }

  void push(TransferOp* op) {
    uint64_t chunks = (kHeaderBytes + op->bytes + chunkBytes_ - 1) / chunkBytes_;
    Entry& e = ops_.push_back(Entry{op, nextChunk_, chunks, {}});
    if (op->kind == TransferOp::Kind::Send)
      e.header = TcpMessageHeader{kTcpMessageMagic, op->bytes, op->stamp};
    nextChunk_ += chunks;
    for (Pos& p : pos_) seek(&p);  // sockets waiting past the last op may find work in it
  }

  bool idle() const { return ops_.empty(); }

  // Describes in iov (at most maxIov entries) the memory socket s may move next, in stream
  // order, stopping at an op's limit; returns the number of entries, 0 when nothing may move.
  // A RecvReduce chunk's bytes land in the socket's bounce buffer, and the chunk always comes
  // alone (its header, where it has one, before them). *largestOp, where given, becomes the
  // size of the largest message the entries belong to.
  int gather(int s, iovec* iov, int maxIov, uint64_t* largestOp = nullptr) {
    Pos p = pos_[s];
    int n = 0;
    while (n < maxIov) {
      Entry* e = entry(p.seq);
      if (e == nullptr) break;
      const TransferOp* op = e->op;
      if (largestOp != nullptr) *largestOp = std::max<uint64_t>(*largestOp, op->bytes);
      const bool reduceOp = op->kind == TransferOp::Kind::RecvReduce;
      if (reduceOp && n > 0) break;
      size_t start = chunkStart(*e, p.chunk);
      size_t end = std::min(start + chunkBytes_, kHeaderBytes + op->bytes);
      size_t stop = std::min(end, kHeaderBytes + op->limit);
      size_t from = start + p.moved;
      if (stop <= from) break;
      if (op->kind == TransferOp::Kind::Send && stop < end && stop - from < kMinEarlyPieceBytes)
        break;
      if (from < kHeaderBytes) {  // the op's first chunk begins with its header
        iov[n++] = {reinterpret_cast<char*>(&e->header) + from, kHeaderBytes - from};
        from = kHeaderBytes;
        if (n == maxIov) break;
      }
      if (from < stop) {
        if (reduceOp) {
          iov[n++] = {bounce(s) + (from - std::max(start, kHeaderBytes)), stop - from};
          break;
        }
        char* base = op->kind == TransferOp::Kind::Send
                         ? static_cast<char*>(const_cast<void*>(op->src))
                         : static_cast<char*>(op->dst);
        iov[n++] = {base + (from - kHeaderBytes), stop - from};
      }
      if (stop < end) break;
      p.chunk += sockets_;
      p.moved = 0;
      seek(&p);
    }
    return n;
  }

  // Accounts for n bytes that socket s moved into or out of the memory gather() described.
  // False where a receive's header does not begin the message it expects (*mismatch says
  // what it found): nothing of that message counts as received.
  bool consume(int s, size_t n, MessageMismatch* mismatch) {
    Pos& p = pos_[s];
    while (n > 0) {
      const Entry& e = *entry(p.seq);
      const TransferOp& op = *e.op;
      size_t start = chunkStart(e, p.chunk);
      size_t len = std::min(chunkBytes_, kHeaderBytes + op.bytes - start);
      size_t take = std::min(n, len - p.moved);
      const bool headerArrives = start + p.moved < kHeaderBytes &&
                                 start + p.moved + take >= kHeaderBytes &&
                                 op.kind != TransferOp::Kind::Send;
      p.moved += take;
      n -= take;
      if (headerArrives && !checkTcpMessage(e.header, op.stamp, op.bytes, mismatch))
        return false;
      if (op.kind == TransferOp::Kind::RecvReduce) {
        reduceReceived(s, op, start);
      } else {
        p.settled = p.moved;
      }
      if (p.settled == len) {
        p.chunk += sockets_;
        p.moved = p.settled = 0;
        seek(&p);
      }
    }
    return true;
  }

  // Moves `done` of the leading ops forward and retires the complete ones, in order; true when
  // any `done` moved.
  bool updateDone() {
    bool moved = false;
    while (!ops_.empty()) {
      const Entry& e = ops_.front();
      TransferOp* op = e.op;
      size_t covered = op->bytes;
      for (int s = 0; s < sockets_; ++s) covered = std::min(covered, frontier(s, e));
      covered -= covered % std::max<size_t>(dtypeSize(op->dtype), 1);
      if (covered > op->done) {
        op->done = covered;
        moved = true;
      }
      if (!op->complete()) break;
      ops_.pop_front();
      ++frontSeq_;
    }
    return moved;
  }

 private:
  struct Entry {
    TransferOp* op;
    uint64_t firstChunk;  // number of the chunk holding the op's header
    uint64_t chunks;
    TcpMessageHeader header;  // a send's; where a receive's arrives
  };
  // Where one socket stands: the chunk it works on and the op holding it (the first op past
  // it, or the end of the queue, when it has none yet).
  struct Pos {
    uint64_t chunk;
    uint64_t seq;
    size_t moved;    // bytes of the chunk sent or received
    size_t settled;  // bytes of the chunk finished: = moved, or reduced for RecvReduce
  };

  Entry* entry(uint64_t seq) {
    uint64_t i = seq - frontSeq_;
    return i < ops_.size() ? &ops_[i] : nullptr;
  }
  // The position of chunk's first byte in its op (header included).
  size_t chunkStart(const Entry& e, uint64_t chunk) const {
    return size_t(chunk - e.firstChunk) * chunkBytes_;
  }
  void seek(Pos* p) {
    for (const Entry* e = entry(p->seq); e != nullptr && p->chunk >= e->firstChunk + e->chunks;
         e = entry(++p->seq)) {
    }
  }

  // The prefix of op e's bytes that socket s does not hold up: everything before the first
  // chunk of e that the socket still has to finish (plus what it finished of that chunk).
  size_t frontier(int s, const Entry& e) const {
    const Pos& p = pos_[s];
    uint64_t end = e.firstChunk + e.chunks;
    uint64_t first = p.chunk;
    if (first < e.firstChunk) first += (e.firstChunk - first + sockets_ - 1) / sockets_ * sockets_;
    if (first >= end) return e.op->bytes;
    size_t start = chunkStart(e, first);
    size_t at = first == p.chunk ? start + p.settled : start;
    return at > kHeaderBytes ? at - kHeaderBytes : 0;
  }

  char* bounce(int s) {
    if (!bounce_[s]) bounce_[s] = std::make_unique<char[]>(chunkBytes_);
    return bounce_[s].get();
  }

  // Combines the complete elements received so far into dst: dst = src ⊕ received. A partial
  // element stays in the bounce buffer until its last bytes arrive; the bounce buffer holds
  // the chunk's bytes of the op, past its header.
  void reduceReceived(int s, const TransferOp& op, size_t chunkStart) {
    Pos& p = pos_[s];
    const size_t header = chunkStart < kHeaderBytes ? kHeaderBytes - chunkStart : 0;
    if (p.moved <= header) {
      p.settled = p.moved;
      return;
    }
    size_t elt = std::max<size_t>(dtypeSize(op.dtype), 1);
    size_t moved = p.moved - header;
    size_t settled = p.settled > header ? p.settled - header : 0;
    size_t ready = moved - moved % elt;
    if (ready > settled) {
      size_t at = chunkStart + header - kHeaderBytes + settled;
      reduce(static_cast<char*>(op.dst) + at, static_cast<const char*>(op.src) + at,
             bounce(s) + settled, (ready - settled) / elt, op.dtype, op.op);
      settled = ready;
    }
    p.settled = header + settled;
  }

  int sockets_ = 1;
  size_t chunkBytes_ = 1;
  Ring<Entry> ops_;
  uint64_t frontSeq_ = 0;   // sequence number of ops_.front()
  uint64_t nextChunk_ = 0;  // first chunk of the next op posted
  std::vector<Pos> pos_;
  std::vector<std::unique_ptr<char[]>> bounce_;  // per socket, for RecvReduce
};

class TcpTransportImpl;

class TcpConnection final : public Connection {
 public:
  TcpConnection(TcpTransportImpl* transport, int peer, int lane, const Deadline& deadline);
  ~TcpConnection() override;

  Status post(TransferOp* op) override;
  Status progress(bool* progressed) override;

  // Starts moving data over these sockets (in round-robin order).
  void establish(std::vector<UniqueFd> fds, int sockets, size_t chunkBytes);
  // The lower rank's sockets, connecting (TcpOptions::dialWithoutWaiting): each sends `hello`
  // (its socketIndex set) once connected, and the last one establishes the connection.
  void startDial(std::vector<UniqueFd> fds, const TcpHello& hello) {
    dialing_ = std::move(fds);
    dialed_.assign(dialing_.size(), false);
    hello_ = hello;
  }
  // Adds the sockets with work waiting on the kernel; returns true while the connection still
  // waits for its sockets from the listener.
  bool addPollFds(std::vector<pollfd>* fds);
  const std::vector<UniqueFd>& sockets() const { return fds_; }
  bool established() const { return !fds_.empty(); }

 private:
  Status acceptSockets(bool* progressed);
  Status continueDial(bool* progressed);
  // Moves what socket s can move in one direction now, until the kernel pushes back.
  Status pump(Stream* stream, int s, bool sending, bool* progressed);
  // Paces socket s (at pacing_) for a send of `burst` bytes of messages of up to `largestOp`
  // bytes, or leaves it unpaced (kUnpacedBurstBytes); a system call only where that changes.
  void paceFor(int s, size_t burst, uint64_t largestOp);
  Status fail(Status status);

  TcpTransportImpl* transport_;
  int peer_;
  int lane_;
  Deadline deadline_;  // for the peer's sockets to arrive (the higher rank)
  std::vector<UniqueFd> fds_;
  uint64_t pacing_ = 0;        // each socket's rate while it sends a large burst; 0: unpaced
  std::vector<char> paced_;    // whether socket s is paced now
  std::vector<TransferOp*> early_;  // posted before the sockets arrived
  std::vector<UniqueFd> dialing_;   // startDial's sockets while they connect
  std::vector<bool> dialed_;
  TcpHello hello_ = {};
  Stream send_, recv_;
  Status error_;
};

class TcpTransportImpl final : public Transport {
 public:
  TcpTransportImpl(const CommContext* ctx, const TcpOptions& options)
      : ctx_(ctx), options_(options) {}
  // Connections must be destroyed first: they detach themselves from the transport.
  ~TcpTransportImpl() override = default;

  Status listen() {
    net::Address addr = options_.listenAddress;
    std::string ifname = "given";
    if (addr.len == 0) LOOM_TRY(net::chooseInterfaceAddress(&addr, &ifname));
    int fd = -1;
    LOOM_TRY(net::listenOn(addr, &fd, &bound_));
    listener_ = UniqueFd(fd);
    LOOM_TRY(net::setNonBlocking(fd, true));
    LOOM_INFO("TCP", "listening on %s (%s), %d sockets per peer and lane, %zu-byte chunks",
              bound_.toString().c_str(), ifname.c_str(), options_.sockets, options_.chunkBytes);
    return Status::ok();
  }

  const char* name() const override { return "tcp"; }
  bool canConnect(int) const override { return true; }
  Status connect(int peer, int lane, const Deadline& deadline,
                 std::unique_ptr<Connection>* out) override;
  void sleepUs(uint64_t token, int64_t timeoutUs) override;
  // Loopback as measured by perf/bench_tcp (one way: ~15 us for 8 bytes, ~2 GB/s streaming);
  // real networks come from topology probing.
  Cost cost() const override { return {15e-6, 1.0 / 2e9}; }

  const net::Address& bound() const { return bound_; }
  const TcpOptions& options() const { return options_; }
  // The pacing rate of each of the `sockets` sockets of a connection to `peer`: a fixed rate is
  // the connection's, shared by its sockets; a peer's (TcpOptions::pacingPerPeer) is the link's,
  // which every socket keeps whole, as a message of up to one chunk travels on one socket.
  uint64_t socketPacing(int peer, size_t sockets) const {
    if (options_.pacingPerPeer && peer >= 0 && size_t(peer) < peerPacing_.size())
      return peerPacing_[size_t(peer)];
    return options_.pacingBytesPerSecond / std::max<size_t>(1, sockets);
  }
  void setPeerPacing(std::vector<uint64_t> bytesPerSecond) {
    peerPacing_ = std::move(bytesPerSecond);
  }
  std::string peerName(int rank) const { return describePeer(*ctx_, rank); }

  // Accepts the connections waiting on the listener and reads their hellos, without blocking.
  Status serviceListener();
  // Hands out the complete set of sockets the peer opened for lane, if it has arrived.
  bool takeSockets(int peer, int lane, std::vector<UniqueFd>* fds, int* sockets,
                   size_t* chunkBytes);

  void attach(TcpConnection* c) { connections_.push_back(c); }
  void detach(TcpConnection* c) {
    connections_.erase(std::remove(connections_.begin(), connections_.end(), c),
                       connections_.end());
  }

 private:
  struct Handshake {
    UniqueFd fd;
    TcpHello hello;
    size_t got;
  };
  struct Stashed {
    UniqueFd fd;
    int sockets;
    size_t chunkBytes;
  };
  using Key = std::tuple<int, int, int>;  // rank, lane, socket index

  // Checks a complete hello; files its socket under (rank, lane, index) or drops it.
  void admit(Handshake* h);

  const CommContext* ctx_;
  TcpOptions options_;
  std::vector<uint64_t> peerPacing_;  // by peer rank (socketPacing)
  UniqueFd listener_;
  net::Address bound_;
  std::vector<Handshake> handshakes_;
  std::map<Key, std::deque<Stashed>> stash_;
  std::vector<TcpConnection*> connections_;
  std::vector<pollfd> pollFds_;
};

// ---- TcpTransportImpl ----

Status TcpTransportImpl::connect(int peer, int lane, const Deadline& deadline,
                                 std::unique_ptr<Connection>* out) {
  if (peer < 0 || peer >= ctx_->nranks || peer == ctx_->rank || lane < 0)
    return errorf(loomInvalidArgument, "tcp: cannot connect rank %d to rank %d lane %d", ctx_->rank,
                  peer, lane);
  auto conn = std::make_unique<TcpConnection>(this, peer, lane, deadline);
  if (ctx_->rank < peer) {
    // We dial. The peer's listener exists since before the PeerInfo exchange, so the kernel
    // completes the connections and takes the hellos whether or not the peer is looking.
    if (size_t(peer) >= ctx_->peers.size() || ctx_->peers[peer].tcpAddrLen == 0)
      return errorf(loomInvalidUsage, "tcp: %s published no TCP address", peerName(peer).c_str());
    net::Address addr;
    addr.len = std::min<socklen_t>(ctx_->peers[peer].tcpAddrLen, sizeof(addr.storage));
    memcpy(&addr.storage, &ctx_->peers[peer].tcpAddr, addr.len);
    std::string context = strprintf("tcp: connecting to %s lane %d at %s", peerName(peer).c_str(),
                                    lane, addr.toString().c_str());
    TcpHello hello = {};
    hello.magic = kTcpHelloMagic;
    memcpy(hello.secret, ctx_->secret, sizeof(hello.secret));
    hello.rank = ctx_->rank;
    hello.lane = lane;
    hello.sockets = options_.sockets;
    hello.chunkBytes = options_.chunkBytes;
    std::vector<UniqueFd> fds;
    if (options_.dialWithoutWaiting) {
      for (int i = 0; i < options_.sockets; ++i) {
        int fd = -1;
        Status st = net::connectStart(addr, &fd);
        if (!st.isOk()) return st.withContext(context);
        fds.emplace_back(fd);
      }
      conn->startDial(std::move(fds), hello);
      *out = std::move(conn);
      return Status::ok();
    }
    for (int i = 0; i < options_.sockets; ++i) {
      int fd = -1;
      Status st = net::connectTo(addr, deadline, &fd);
      if (!st.isOk()) return st.withContext(context);
      fds.emplace_back(fd);
      hello.socketIndex = i;
      st = net::sendAll(fd, &hello, sizeof(hello), deadline);
      if (st.isOk()) st = net::setNonBlocking(fd, true);
      if (!st.isOk()) return st.withContext(context);
    }
    conn->establish(std::move(fds), options_.sockets, options_.chunkBytes);
  } else {
    // The peer dials us; take what has arrived already, progress() collects the rest.
    bool progressed = false;
    LOOM_TRY(conn->progress(&progressed));
  }
  *out = std::move(conn);
  return Status::ok();
}

Status TcpTransportImpl::serviceListener() {
  for (;;) {
    int fd = accept4(listener_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      net::setNoDelay(fd);
      handshakes_.push_back({UniqueFd(fd), {}, 0});
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    // A connection reset while queued, or a signal: the next one may be fine.
    if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
    return errorf(loomSystemError, "tcp: accept on %s: %s", bound_.toString().c_str(),
                  strerror(errno));
  }
  for (size_t i = 0; i < handshakes_.size();) {
    Handshake& h = handshakes_[i];
    ssize_t n = recv(h.fd.get(), reinterpret_cast<char*>(&h.hello) + h.got, sizeof(h.hello) - h.got,
                     MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      ++i;
      continue;
    }
    if (n > 0) {
      h.got += size_t(n);
      if (h.got < sizeof(h.hello)) continue;  // read again: more may be there
      admit(&h);
    } else {
      LOOM_INFO("TCP", "a connection closed before its hello; ignored");
    }
    handshakes_.erase(handshakes_.begin() + ptrdiff_t(i));
  }
  return Status::ok();
}

void TcpTransportImpl::admit(Handshake* h) {
  net::Address from;
  from.len = sizeof(from.storage);
  getpeername(h->fd.get(), reinterpret_cast<sockaddr*>(&from.storage), &from.len);
  const TcpHello& m = h->hello;
  const std::string why = checkTcpHello(m, ctx_->secret, ctx_->rank);
  if (!why.empty()) {
    LOOM_WARN("TCP", "refused a connection from %s: %s", from.toString().c_str(), why.c_str());
    return;
  }
  stash_[Key(m.rank, m.lane, m.socketIndex)].push_back(
      {std::move(h->fd), m.sockets, size_t(m.chunkBytes)});
}

}  // namespace

std::string checkTcpHello(const TcpHello& m, const unsigned char secret[16], int myRank) {
  if (m.magic != kTcpHelloMagic) return "not a loom TCP hello";
  // Constant time, so a stranger cannot learn the secret byte by byte.
  unsigned char diff = 0;
  for (size_t i = 0; i < sizeof(m.secret); ++i) diff |= m.secret[i] ^ secret[i];
  if (diff != 0)
    return strprintf("claiming rank %d: wrong secret (another communicator or job)", m.rank);
  if (m.rank < 0 || m.rank >= myRank || m.lane < 0 || m.sockets < 1 || m.sockets > kMaxSockets ||
      m.socketIndex < 0 || m.socketIndex >= m.sockets || m.chunkBytes < kChunkAlign ||
      m.chunkBytes > kMaxChunkBytes || m.chunkBytes % kChunkAlign != 0)
    return strprintf("malformed hello (rank %d lane %d socket %d of %d, chunk %llu)", m.rank,
                     m.lane, m.socketIndex, m.sockets,
                     static_cast<unsigned long long>(m.chunkBytes));
  return "";
}

bool checkTcpMessage(const TcpMessageHeader& h, const CallStamp& stamp, uint64_t bytes,
                     MessageMismatch* out) {
  if (h.magic == kTcpMessageMagic && h.bytes == bytes && h.stamp == stamp) return true;
  *out = {stamp, h.stamp, bytes, h.bytes, h.magic == kTcpMessageMagic};
  return false;
}

namespace {

bool TcpTransportImpl::takeSockets(int peer, int lane, std::vector<UniqueFd>* fds, int* sockets,
                                   size_t* chunkBytes) {
  auto first = stash_.find(Key(peer, lane, 0));
  if (first == stash_.end() || first->second.empty()) return false;
  int count = first->second.front().sockets;
  size_t chunk = first->second.front().chunkBytes;
  for (int i = 1; i < count; ++i) {
    auto it = stash_.find(Key(peer, lane, i));
    if (it == stash_.end() || it->second.empty()) return false;
  }
  fds->clear();
  for (int i = 0; i < count; ++i) {
    auto it = stash_.find(Key(peer, lane, i));
    fds->push_back(std::move(it->second.front().fd));
    it->second.pop_front();
    if (it->second.empty()) stash_.erase(it);
  }
  *sockets = count;
  *chunkBytes = chunk;
  return true;
}

void TcpTransportImpl::sleepUs(uint64_t, int64_t timeoutUs) {
  pollFds_.clear();
  bool accepting = false;
  for (TcpConnection* c : connections_) accepting = c->addPollFds(&pollFds_) || accepting;
  if (accepting) {
    pollFds_.push_back({listener_.get(), POLLIN, 0});
    for (const Handshake& h : handshakes_) pollFds_.push_back({h.fd.get(), POLLIN, 0});
  }
  // EINTR or an event: either way the caller polls its connections again.
  const int64_t us = std::max<int64_t>(timeoutUs, 0);
  const timespec timeout{time_t(us / 1000000), long(us % 1000000) * 1000L};
  ppoll(pollFds_.data(), pollFds_.size(), &timeout, nullptr);
}

// ---- TcpConnection ----

TcpConnection::TcpConnection(TcpTransportImpl* transport, int peer, int lane,
                             const Deadline& deadline)
    : transport_(transport), peer_(peer), lane_(lane), deadline_(deadline) {
  transport_->attach(this);
}

TcpConnection::~TcpConnection() { transport_->detach(this); }

void TcpConnection::establish(std::vector<UniqueFd> fds, int sockets, size_t chunkBytes) {
  fds_ = std::move(fds);
  pacing_ = transport_->socketPacing(peer_, fds_.size());
  paced_.assign(fds_.size(), 0);
  send_.init(sockets, chunkBytes);
  recv_.init(sockets, chunkBytes);
  for (TransferOp* op : early_) (op->kind == TransferOp::Kind::Send ? send_ : recv_).push(op);
  early_.clear();
  LOOM_INFO("TCP", "connected to %s lane %d: %d sockets, %zu-byte chunks",
            transport_->peerName(peer_).c_str(), lane_, sockets, chunkBytes);
}

Status TcpConnection::post(TransferOp* op) {
  if (!error_.isOk()) return error_;
  if (op->kind == TransferOp::Kind::RecvReduce && dtypeSize(op->dtype) == 0)
    return errorf(loomInvalidArgument, "tcp: RecvReduce with invalid dtype %d", int(op->dtype));
  // An empty op is complete as posted, so the caller may free it at once: keep no pointer.
  // It travels as nothing, not even a header (both ends leave it out alike), so leaving it out
  // changes no boundary; an empty message holds nothing that could be taken for another's.
  if (op->bytes == 0) return Status::ok();
  if (fds_.empty()) {
    early_.push_back(op);
  } else {
    (op->kind == TransferOp::Kind::Send ? send_ : recv_).push(op);
  }
  return Status::ok();
}

Status TcpConnection::fail(Status status) {
  error_ = std::move(status);
  LOOM_INFO("TCP", "%s", error_.message().c_str());
  return error_;
}

Status TcpConnection::acceptSockets(bool* progressed) {
  Status st = transport_->serviceListener();
  if (!st.isOk()) return fail(st);
  std::vector<UniqueFd> fds;
  int sockets = 0;
  size_t chunkBytes = 0;
  if (transport_->takeSockets(peer_, lane_, &fds, &sockets, &chunkBytes)) {
    establish(std::move(fds), sockets, chunkBytes);
    *progressed = true;
  } else if (deadline_.expired()) {
    return fail(errorf(loomTimeout,
                       "tcp: %s did not connect lane %d before the deadline "
                       "(LOOM_TIMEOUT_MS)",
                       transport_->peerName(peer_).c_str(), lane_));
  }
  return Status::ok();
}

Status TcpConnection::continueDial(bool* progressed) {
  for (size_t i = 0; i < dialing_.size(); ++i) {
    if (dialed_[i]) continue;
    bool done = false;
    Status st = net::connectDone(dialing_[i].get(), &done);
    if (!st.isOk())
      return fail(st.withContext("tcp: connecting to " + transport_->peerName(peer_)));
    if (!done) continue;
    // A fresh socket's buffer takes the whole hello.
    hello_.socketIndex = int32_t(i);
    if (send(dialing_[i].get(), &hello_, sizeof(hello_), MSG_NOSIGNAL | MSG_DONTWAIT) !=
        ssize_t(sizeof(hello_)))
      return fail(errorf(loomSystemError, "tcp: cannot greet %s: %s",
                         transport_->peerName(peer_).c_str(), strerror(errno)));
    dialed_[i] = true;
    *progressed = true;
  }
  if (std::find(dialed_.begin(), dialed_.end(), false) == dialed_.end()) {
    const int sockets = int(dialing_.size());
    establish(std::move(dialing_), sockets, size_t(hello_.chunkBytes));
    dialing_.clear();
  } else if (deadline_.expired()) {
    return fail(errorf(loomTimeout, "tcp: could not connect to %s before the deadline",
                       transport_->peerName(peer_).c_str()));
  }
  return Status::ok();
}

void TcpConnection::paceFor(int s, size_t burst, uint64_t largestOp) {
  const bool pace = pacing_ > 0 && (burst > kUnpacedBurstBytes || largestOp > kUnpacedBurstBytes);
  if (pace == bool(paced_[size_t(s)])) return;
  // ~0: no limit (the kernel's own pacing, far above the link's rate, is all that remains).
  const unsigned long rate = pace ? std::max<unsigned long>(1, pacing_) : ~0UL;
  if (setsockopt(fds_[size_t(s)].get(), SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof(rate)) != 0) {
    LOOM_WARN("TCP", "LOOM_TCP_PACING: cannot pace a socket to %s: %s",
              transport_->peerName(peer_).c_str(), strerror(errno));
    pacing_ = 0;  // warn once; the socket sends unpaced
    return;
  }
  paced_[size_t(s)] = pace;
}

Status TcpConnection::pump(Stream* stream, int s, bool sending, bool* progressed) {
  iovec iov[kMaxIov];
  for (;;) {
    uint64_t largestOp = 0;
    int n = stream->gather(s, iov, kMaxIov, &largestOp);
    if (n == 0) return Status::ok();
    size_t want = 0;
    for (int i = 0; i < n; ++i) want += iov[i].iov_len;
    if (sending) paceFor(s, want, largestOp);
    msghdr msg = {};
    msg.msg_iov = iov;
    msg.msg_iovlen = size_t(n);
    int fd = fds_[s].get();
    ssize_t got =
        sending ? sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) : recvmsg(fd, &msg, MSG_DONTWAIT);
    if (got < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::ok();
      std::string who = transport_->peerName(peer_);
      if (errno == ECONNRESET || errno == EPIPE)
        return fail(errorf(loomRemoteError, "tcp: %s reset the connection (lane %d): %s",
                           who.c_str(), lane_, strerror(errno)));
      return fail(errorf(loomRemoteError, "tcp: lost the connection to %s (lane %d): %s",
                         who.c_str(), lane_, strerror(errno)));
    }
    if (got == 0 && !sending)
      return fail(errorf(loomRemoteError, "tcp: %s closed the connection (lane %d)",
                         transport_->peerName(peer_).c_str(), lane_));
    if (MessageMismatch found; !stream->consume(s, size_t(got), &found)) [[unlikely]] {
      recordMismatch(found);
      return fail(errorf(loomInvalidUsage,
                         "tcp: %s sent on lane %d a message that is not the one this rank "
                         "receives",
                         transport_->peerName(peer_).c_str(), lane_));
    }
    *progressed = true;
    if (size_t(got) < want) return Status::ok();  // the kernel is full (or empty) for now
  }
}

Status TcpConnection::progress(bool* progressed) {
  if (!error_.isOk()) return error_;
  if (fds_.empty()) {
    LOOM_TRY(dialing_.empty() ? acceptSockets(progressed) : continueDial(progressed));
    if (fds_.empty()) return Status::ok();
  }
  for (size_t s = 0; s < fds_.size(); ++s) {
    if (!send_.idle()) LOOM_TRY(pump(&send_, int(s), true, progressed));
    if (!recv_.idle()) LOOM_TRY(pump(&recv_, int(s), false, progressed));
  }
  if (send_.updateDone()) *progressed = true;
  if (recv_.updateDone()) *progressed = true;
  return Status::ok();
}

bool TcpConnection::addPollFds(std::vector<pollfd>* fds) {
  if (!error_.isOk()) return false;
  if (fds_.empty()) return true;
  iovec probe;
  for (size_t s = 0; s < fds_.size(); ++s) {
    short events = 0;
    if (send_.gather(int(s), &probe, 1) > 0) events |= POLLOUT;
    if (recv_.gather(int(s), &probe, 1) > 0) events |= POLLIN;
    if (events != 0) fds->push_back({fds_[s].get(), events, 0});
  }
  return false;
}

}  // namespace

Status createTcpTransport(const CommContext* ctx, const TcpOptions& options,
                          std::unique_ptr<Transport>* out) {
  TcpOptions o = options;
  if (o.sockets < 1 || o.sockets > kMaxSockets)
    return errorf(loomInvalidArgument, "tcp: %d sockets per peer and lane; want 1 to %d", o.sockets,
                  kMaxSockets);
  if (o.chunkBytes < kChunkAlign || o.chunkBytes > kMaxChunkBytes)
    return errorf(loomInvalidArgument, "tcp: chunks of %zu bytes; want %zu to %zu", o.chunkBytes,
                  kChunkAlign, kMaxChunkBytes);
  o.chunkBytes -= o.chunkBytes % kChunkAlign;
  auto t = std::make_unique<TcpTransportImpl>(ctx, o);
  if (o.listens) LOOM_TRY(t->listen());
  *out = std::move(t);
  return Status::ok();
}

TcpOptions tcpOptionsFromParams() {
  TcpOptions o;
  o.sockets = int(params::getInt("LOOM_TCP_SOCKETS"));
  o.chunkBytes = size_t(std::max<int64_t>(0, params::getInt("LOOM_TCP_CHUNK_BYTES")));
  const int64_t pacing = params::getInt("LOOM_TCP_PACING");
  o.pacingBytesPerSecond = uint64_t(std::max<int64_t>(0, pacing));
  o.pacingPerPeer = pacing < 0;
  return o;
}

bool tcpConnected(const Connection& conn) {
  const auto* c = dynamic_cast<const TcpConnection*>(&conn);
  return c != nullptr && c->established();
}

std::vector<uint64_t> tcpSocketPacing(const Connection& conn) {
  std::vector<uint64_t> out;
  const auto* c = dynamic_cast<const TcpConnection*>(&conn);
  if (c == nullptr) return out;
  for (const UniqueFd& fd : c->sockets()) {
    unsigned long rate = 0;
    socklen_t len = sizeof(rate);
    if (getsockopt(fd.get(), SOL_SOCKET, SO_MAX_PACING_RATE, &rate, &len) != 0) rate = 0;
    out.push_back(rate);
  }
  return out;
}

}  // namespace tcp

bool tcpPacesPerPeer(const Transport& transport) {
  const auto* t = dynamic_cast<const tcp::TcpTransportImpl*>(&transport);
  return t != nullptr && t->options().pacingPerPeer;
}

void setTcpPeerPacing(Transport& transport, std::vector<uint64_t> bytesPerSecondByPeer) {
  if (!tcpPacesPerPeer(transport)) return;
  static_cast<tcp::TcpTransportImpl&>(transport).setPeerPacing(std::move(bytesPerSecondByPeer));
}

void tcpListenAddress(const Transport& transport, PeerInfo* info) {
  const auto* t = dynamic_cast<const tcp::TcpTransportImpl*>(&transport);
  if (t == nullptr) return;
  const net::Address& a = t->bound();
  memset(&info->tcpAddr, 0, sizeof(info->tcpAddr));
  memcpy(&info->tcpAddr, &a.storage, a.len);
  info->tcpAddrLen = a.len;
}

}  // namespace loom::transports
