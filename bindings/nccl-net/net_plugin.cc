#include "bindings/nccl-net/net_plugin.h"

#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/log.h"
#include "base/params.h"
#include "base/socket.h"
#include "topology/probe.h"
#include "transports/tcp/tcp_transport.h"
#include "transports/transport.h"

namespace loom::ncclnet {

namespace {

using transports::Connection;
using transports::TransferOp;

ncclDebugLogger_t gLogger = nullptr;

// Tells NCCL's log (where NCCL_DEBUG shows it) and loom's (LOOM_DEBUG).
template <typename... Args>
void info(const char* fmt, Args... args) {
  std::string text = strprintf(fmt, args...);
  if (gLogger != nullptr) gLogger(NCCL_LOG_INFO, NCCL_NET, "loom", __LINE__, "%s", text.c_str());
  LOOM_INFO("NET", "%s", text.c_str());
}

ncclResult_t failWith(ncclResult_t code, const std::string& what) {
  if (gLogger != nullptr)
    gLogger(NCCL_LOG_WARN, NCCL_ALL, "loom", __LINE__, "NET/loom: %s", what.c_str());
  LOOM_WARN("NET", "%s", what.c_str());
  return code;
}

// loom's failures as NCCL's: the network's and the peer's are system errors (NCCL's word for
// "the network failed"), a caller's mistakes usage errors.
ncclResult_t fromStatus(const Status& st) {
  if (st.isOk()) return ncclSuccess;
  switch (st.code()) {
    case loomInvalidArgument:
    case loomInvalidUsage:
      return failWith(ncclInvalidUsage, st.message());
    case loomInternalError:
      return failWith(ncclInternalError, st.message());
    default:
      return failWith(ncclSystemError, st.message());
  }
}

struct Device {
  std::string name;
  net::Address address;
  std::string pciPath;  // empty: virtual
  int speedMbps = 0;
  double bytesPerSecond = 0;  // the port's, where the kernel says
};

std::once_flag gDevicesOnce;
std::vector<Device> gDevices;
Status gDevicesStatus;

// Interfaces whose speed the kernel does not report (veth, loopback, most VMs' NICs) are
// taken as 10 Gbit/s, NCCL's own socket transport's figure for them.
constexpr int kUnknownSpeedMbps = 10000;

void findDevices() {
  std::vector<net::Interface> all;
  gDevicesStatus = net::listInterfaces(&all);
  if (!gDevicesStatus.isOk()) return;
  // Loopback only where nothing else is allowed, as loom's own choice of interface.
  const bool onlyLoopback =
      std::all_of(all.begin(), all.end(), [](const net::Interface& i) { return i.loopback; });
  for (const net::Interface& i : all) {
    if (i.loopback && !onlyLoopback) continue;
    Device d;
    d.name = i.name;
    d.address = i.address;
    char resolved[PATH_MAX];
    if (realpath(("/sys/class/net/" + i.name + "/device").c_str(), resolved) != nullptr)
      d.pciPath = resolved;
    d.bytesPerSecond = topology::nicLinkBandwidth(i.name);
    d.speedMbps = d.bytesPerSecond > 0 ? int(d.bytesPerSecond * 8 / 1e6) : kUnknownSpeedMbps;
    gDevices.push_back(std::move(d));
  }
}

Status deviceAt(int dev, const Device** out) {
  std::call_once(gDevicesOnce, findDevices);
  LOOM_TRY(gDevicesStatus);
  if (dev < 0 || size_t(dev) >= gDevices.size())
    return errorf(loomInvalidArgument, "device %d: there are %zu", dev, gDevices.size());
  *out = &gDevices[size_t(dev)];
  return Status::ok();
}

// What listen() hands NCCL to pass to the connecting peer (NCCL_NET_HANDLE_MAXSIZE bytes).
struct Handle {
  uint64_t magic;
  unsigned char secret[16];
  uint32_t addressLen;
  uint32_t reserved;
  sockaddr_in6 address;  // or a sockaddr_in
  // The connecting side's comm while its sockets connect: NCCL calls connect() again with the
  // same handle until it hands out the comm. NULL as listen() writes it.
  void* pending;
};
static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE, "a handle fits NCCL's");
constexpr uint64_t kHandleMagic = 0x6c6f6f6d2d6e6574ull;  // "loom-net"

// One TCP transport of two ranks: the listening side is rank 1, the dialing side rank 0, which
// is how loom's transport pairs a connection's two ends (the lower rank dials).
struct Link {
  transports::CommContext ctx;
  std::unique_ptr<transports::Transport> transport;
};

Status makeLink(int rank, const unsigned char secret[16], const Context* c,
                const net::Address& listenAt, std::shared_ptr<Link>* out) {
  auto link = std::make_shared<Link>();
  link->ctx.rank = rank;
  link->ctx.nranks = 2;
  link->ctx.commHash = c->commId;
  memcpy(link->ctx.secret, secret, sizeof(link->ctx.secret));
  link->ctx.peers.resize(2);
  link->ctx.peers[0].rank = 0;
  link->ctx.peers[1].rank = 1;
  link->ctx.timeoutMs = params::getInt("LOOM_TIMEOUT_MS");
  transports::tcp::TcpOptions options = transports::tcp::tcpOptionsFromParams();
  options.listens = rank == 1;
  options.listenAddress = listenAt;
  options.dialWithoutWaiting = true;
  LOOM_TRY(transports::tcp::createTcpTransport(&link->ctx, options, &link->transport));
  *out = std::move(link);
  return Status::ok();
}

// Every message starts with a header: its size and tag, and its bytes when they fit (so that a
// small message is one transfer, as on loom's own transport).
constexpr size_t kInlineBytes = 48;
struct Header {
  uint64_t size;
  int32_t tag;
  uint32_t magic;
  unsigned char payload[kInlineBytes];
};
static_assert(sizeof(Header) == 64, "Header is a wire format");
constexpr uint32_t kHeaderMagic = 0x6e63636c;  // "nccl"

struct MemoryHandle {
  char* data;
  size_t size;
};

enum class Kind : uint32_t { Send, Recv };

class Comm;

struct Request {
  Kind kind;
  bool busy = false;
  Comm* comm = nullptr;
  int n = 0;             // messages: 1 for a send, the buffers of a receive
  int received = 0;      // receive: headers matched so far
  Header header = {};    // send: the header it sends
  void* data[kMaxRecvs] = {};
  size_t capacity[kMaxRecvs] = {};
  int tags[kMaxRecvs] = {};
  size_t sizes[kMaxRecvs] = {};
  bool matched[kMaxRecvs] = {};
  TransferOp ops[kMaxRecvs + 1];  // a send: header, payload; a receive: each buffer's payload
};

// A send or receive comm: a connection of its Link and fixed request slots (TransferOps must
// stay where they were posted).
class Comm {
 public:
  Comm(Kind kind, std::shared_ptr<Link> link, std::unique_ptr<Connection> conn, size_t slots)
      : kind_(kind), link_(std::move(link)), conn_(std::move(conn)), slots_(slots) {
    for (Request& r : slots_) {
      r.kind = kind;
      r.comm = this;
    }
  }
  Kind kind() const { return kind_; }
  bool connected() const { return transports::tcp::tcpConnected(*conn_); }

  Request* take() {
    for (Request& r : slots_)
      if (!r.busy) {
        r.busy = true;
        r.received = 0;
        std::fill(std::begin(r.matched), std::end(r.matched), false);
        std::fill(std::begin(r.sizes), std::end(r.sizes), 0);
        for (TransferOp& op : r.ops) op = TransferOp();
        return &r;
      }
    return nullptr;
  }

  Status post(TransferOp* op) {
    if (!error_.isOk()) return error_;
    Status st = conn_->post(op);
    return st.isOk() ? st : fail(std::move(st));
  }

  // Moves what the sockets can move now; on a receive comm also matches the headers that
  // arrived with the posted receives and posts their payloads, until nothing moves.
  Status progress() {
    if (!error_.isOk()) return error_;
    for (;;) {
      if (!headerPosted_ && !expecting_.empty()) LOOM_TRY(postHeader());
      bool moved = false;
      Status st = conn_->progress(&moved);
      if (!st.isOk()) return fail(std::move(st));
      if (kind_ == Kind::Send) return Status::ok();
      if (!headerPosted_ || !headerOp_.complete()) return Status::ok();
      headerPosted_ = false;
      LOOM_TRY(deliver());
    }
  }

  void expect(Request* r) { expecting_.push_back(r); }
  const Status& usable() const { return error_; }
  Status fail(Status st) {
    if (error_.isOk()) error_ = std::move(st);
    return error_;
  }

 private:
  Status postHeader() {
    headerOp_ = transports::wholeTransfer(TransferOp::Kind::Recv, &header_, sizeof(header_));
    headerPosted_ = true;
    return post(&headerOp_);
  }
  // Gives the message whose header arrived a buffer of the oldest receive still expecting one:
  // the buffer of its tag, which must hold it.
  Status deliver() {
    Request* r = expecting_.front();
    if (header_.magic != kHeaderMagic)
      return fail(errorf(loomInternalError, "a message header with a wrong mark: the stream is out "
                                            "of step (a peer not of this plugin?)"));
    int i = 0;
    while (i < r->n && (r->matched[i] || r->tags[i] != header_.tag)) ++i;
    if (i == r->n)
      return fail(errorf(loomInvalidUsage, "a message with tag %d matches no buffer of the "
                                           "receive posted for it", header_.tag));
    if (header_.size > r->capacity[i])
      return fail(errorf(loomInvalidUsage, "a message of %llu bytes is larger than the receive "
                                           "of %zu bytes posted for it (tag %d)",
                         static_cast<unsigned long long>(header_.size), r->capacity[i],
                         header_.tag));
    r->matched[i] = true;
    r->sizes[i] = size_t(header_.size);
    if (header_.size <= kInlineBytes) {
      if (header_.size > 0) memcpy(r->data[i], header_.payload, header_.size);
    } else {
      r->ops[i] = transports::wholeTransfer(TransferOp::Kind::Recv, r->data[i], r->sizes[i]);
      LOOM_TRY(post(&r->ops[i]));
    }
    if (++r->received == r->n) expecting_.pop_front();
    if (!expecting_.empty()) LOOM_TRY(postHeader());
    return Status::ok();
  }

  Kind kind_;
  std::shared_ptr<Link> link_;  // outlives conn_, which its transport serves
  std::unique_ptr<Connection> conn_;
  std::vector<Request> slots_;
  std::deque<Request*> expecting_;  // receives with buffers still unmatched, in posted order
  Header header_ = {};
  TransferOp headerOp_;
  bool headerPosted_ = false;
  Status error_;
};

struct ListenComm {
  std::shared_ptr<Link> link;
  std::unique_ptr<Connection> pending;  // the connection accept() waits for
};

Context gDefaultContext;

}  // namespace

Context* defaultContext() { return &gDefaultContext; }

ncclResult_t init(ncclDebugLogger_t logger) {
  if (logger != nullptr) gLogger = logger;
  int n = 0;
  ncclResult_t rc = devices(&n);
  if (rc != ncclSuccess) return rc;
  std::string names;
  for (const Device& d : gDevices)
    names += (names.empty() ? "" : ", ") + d.name + " " + d.address.toString();
  info("NET/loom: loom's TCP transport on %d interface(s): %s", n, names.c_str());
  return ncclSuccess;
}

ncclResult_t devices(int* ndev) {
  if (ndev == nullptr) return failWith(ncclInvalidArgument, "devices: ndev is NULL");
  std::call_once(gDevicesOnce, findDevices);
  if (!gDevicesStatus.isOk()) return fromStatus(gDevicesStatus);
  *ndev = int(gDevices.size());
  return ncclSuccess;
}

ncclResult_t properties(int dev, DeviceProps* out) {
  const Device* d = nullptr;
  if (Status st = deviceAt(dev, &d); !st.isOk()) return fromStatus(st.withContext("getProperties"));
  out->name = const_cast<char*>(d->name.c_str());
  out->pciPath = d->pciPath.empty() ? nullptr : const_cast<char*>(d->pciPath.c_str());
  out->guid = uint64_t(dev);
  out->speedMbps = d->speedMbps;
  out->latencyUs = 0;  // unknown: NCCL adds none
  return ncclSuccess;
}

ncclResult_t listen(Context* ctx, int dev, void* handle, void** listenComm) {
  const Device* d = nullptr;
  if (Status st = deviceAt(dev, &d); !st.isOk()) return fromStatus(st.withContext("listen"));
  if (handle == nullptr || listenComm == nullptr)
    return failWith(ncclInternalError, "listen: handle or listenComm is NULL");
  Handle h = {};
  h.magic = kHandleMagic;
  if (getrandom(h.secret, sizeof(h.secret), 0) != ssize_t(sizeof(h.secret)))
    return failWith(ncclSystemError, "listen: getrandom failed");
  auto comm = std::make_unique<ListenComm>();
  if (Status st = makeLink(1, h.secret, ctx != nullptr ? ctx : defaultContext(), d->address,
                           &comm->link);
      !st.isOk())
    return fromStatus(st.withContext("listen on " + d->name));
  transports::PeerInfo self;
  transports::tcpListenAddress(*comm->link->transport, &self);
  h.addressLen = std::min<uint32_t>(self.tcpAddrLen, sizeof(h.address));
  memcpy(&h.address, &self.tcpAddr, h.addressLen);
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, &h, sizeof(h));
  *listenComm = comm.release();
  return ncclSuccess;
}

namespace {

// The first connect() with a handle: a transport of its own that dials the listener's address
// without waiting (its sockets connect as the comm progresses).
Status startConnect(Context* ctx, const Device& d, const Handle& h, Comm** out) {
  std::shared_ptr<Link> link;
  LOOM_TRY(makeLink(0, h.secret, ctx != nullptr ? ctx : defaultContext(), net::Address(), &link));
  memcpy(&link->ctx.peers[1].tcpAddr, &h.address, h.addressLen);
  link->ctx.peers[1].tcpAddrLen = h.addressLen;
  // LOOM_TCP_PACING=-1 paces each socket at the link's rate, as loom's own connections are at
  // the topology's slowest link: here the device's port, where the kernel knows it.
  if (d.bytesPerSecond > 0)
    transports::setTcpPeerPacing(*link->transport, {0, uint64_t(d.bytesPerSecond)});
  std::unique_ptr<Connection> conn;
  LOOM_TRY(link->transport->connect(1, 0, Deadline(link->ctx.timeoutMs), &conn));
  *out = new Comm(Kind::Send, std::move(link), std::move(conn),
                  size_t(NCCL_NET_MAX_REQUESTS) * kMaxRecvs);
  return Status::ok();
}

}  // namespace

ncclResult_t connect(Context* ctx, int dev, void* handle, void** sendComm) {
  const Device* d = nullptr;
  if (Status st = deviceAt(dev, &d); !st.isOk()) return fromStatus(st.withContext("connect"));
  if (handle == nullptr || sendComm == nullptr)
    return failWith(ncclInternalError, "connect: handle or sendComm is NULL");
  *sendComm = nullptr;
  Handle h;
  memcpy(&h, handle, sizeof(h));
  if (h.magic != kHandleMagic || h.addressLen == 0 || h.addressLen > sizeof(h.address))
    return failWith(ncclInvalidUsage, "connect: the handle is not one of this plugin's listen()");
  auto* c = static_cast<Comm*>(h.pending);
  Status st = c == nullptr ? startConnect(ctx, *d, h, &c) : Status::ok();
  if (st.isOk()) st = c->progress();
  h.pending = st.isOk() && !c->connected() ? c : nullptr;
  memcpy(handle, &h, sizeof(h));
  if (!st.isOk()) {
    delete c;
    return fromStatus(st.withContext("connect"));
  }
  if (h.pending == nullptr) *sendComm = c;  // else not yet: NCCL calls again
  return ncclSuccess;
}

ncclResult_t accept(void* listenComm, void** recvComm) {
  auto* l = static_cast<ListenComm*>(listenComm);
  if (l == nullptr || recvComm == nullptr)
    return failWith(ncclInternalError, "accept: listenComm or recvComm is NULL");
  *recvComm = nullptr;
  Status st;
  if (l->pending == nullptr)
    st = l->link->transport->connect(0, 0, Deadline(l->link->ctx.timeoutMs), &l->pending);
  bool moved = false;
  if (st.isOk()) st = l->pending->progress(&moved);
  if (!st.isOk()) {
    l->pending.reset();
    return fromStatus(st.withContext("accept"));
  }
  if (!transports::tcp::tcpConnected(*l->pending)) return ncclSuccess;  // called again
  *recvComm = new Comm(Kind::Recv, l->link, std::move(l->pending), NCCL_NET_MAX_REQUESTS);
  return ncclSuccess;
}

ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if (comm == nullptr || mhandle == nullptr)
    return failWith(ncclInternalError, "regMr: comm or mhandle is NULL");
  if (type != NCCL_PTR_HOST)
    return failWith(ncclInternalError,
                    strprintf("regMr: memory of type %d; this plugin reports NCCL_PTR_HOST only",
                              type));
  *mhandle = new MemoryHandle{static_cast<char*>(data), size};
  return ncclSuccess;
}

ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t, int,
                         void** mhandle) {
  if (type != NCCL_PTR_HOST)
    return failWith(ncclInternalError, "regMrDmaBuf: dma-buf memory; this plugin reports "
                                       "NCCL_PTR_HOST only");
  return regMr(comm, data, size, type, mhandle);
}

ncclResult_t deregMr(void*, void* mhandle) {
  delete static_cast<MemoryHandle*>(mhandle);
  return ncclSuccess;
}

namespace {

// A buffer must lie inside the memory registered for it, where there is a registration.
bool inside(const void* mhandle, const void* data, size_t size) {
  const auto* m = static_cast<const MemoryHandle*>(mhandle);
  if (m == nullptr || size == 0) return true;
  const char* p = static_cast<const char*>(data);
  return p >= m->data && size_t(p - m->data) <= m->size && size <= m->size - size_t(p - m->data);
}

}  // namespace

ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                   void** request) {
  auto* c = static_cast<Comm*>(sendComm);
  if (c == nullptr || c->kind() != Kind::Send || request == nullptr)
    return failWith(ncclInternalError, "isend: not a send comm of this plugin");
  if (size > kMaxMessageBytes)
    return failWith(ncclInvalidArgument,
                    strprintf("isend: %zu bytes; at most %zu (maxP2pBytes)", size,
                              kMaxMessageBytes));
  if ((data == nullptr && size > 0) || !inside(mhandle, data, size))
    return failWith(ncclInvalidArgument, "isend: the buffer lies outside its registration");
  Request* r = c->take();
  *request = r;
  if (r == nullptr) return ncclSuccess;  // all slots in flight: NCCL posts it again later
  r->n = 1;
  r->sizes[0] = size;
  r->header = Header{size, tag, kHeaderMagic, {}};
  const bool inlined = size <= kInlineBytes;
  if (inlined && size > 0) memcpy(r->header.payload, data, size);
  r->ops[0] = transports::wholeTransfer(TransferOp::Kind::Send, &r->header, sizeof(Header));
  r->ops[1] = transports::wholeTransfer(TransferOp::Kind::Send, data, inlined ? 0 : size);
  Status st = c->post(&r->ops[0]);
  if (st.isOk() && !inlined) st = c->post(&r->ops[1]);
  if (!st.isOk()) {
    r->busy = false;
    *request = nullptr;
    return fromStatus(st.withContext("isend"));
  }
  (void)c->progress();  // what fails from here is the comm's, and test() reports it
  return ncclSuccess;
}

ncclResult_t irecv(void* recvComm, int n, void** data, const size_t* sizes, const int* tags,
                   void** mhandles, void** request) {
  auto* c = static_cast<Comm*>(recvComm);
  if (c == nullptr || c->kind() != Kind::Recv || request == nullptr)
    return failWith(ncclInternalError, "irecv: not a receive comm of this plugin");
  if (n < 1 || n > kMaxRecvs || data == nullptr || sizes == nullptr || tags == nullptr)
    return failWith(ncclInvalidArgument,
                    strprintf("irecv: %d buffers; 1 to %d (maxRecvs), with sizes and tags", n,
                              kMaxRecvs));
  for (int i = 0; i < n; ++i)
    if ((data[i] == nullptr && sizes[i] > 0) ||
        !inside(mhandles != nullptr ? mhandles[i] : nullptr, data[i], sizes[i]))
      return failWith(ncclInvalidArgument,
                      strprintf("irecv: buffer %d lies outside its registration", i));
  Request* r = c->take();
  *request = r;
  if (r == nullptr) return ncclSuccess;
  r->n = n;
  for (int i = 0; i < n; ++i) {
    r->data[i] = data[i];
    r->capacity[i] = sizes[i];
    r->tags[i] = tags[i];
  }
  if (Status st = c->usable(); !st.isOk()) {
    r->busy = false;
    *request = nullptr;
    return fromStatus(st.withContext("irecv"));
  }
  c->expect(r);
  (void)c->progress();  // what fails from here is the comm's, and test() reports it
  return ncclSuccess;
}

ncclResult_t iflush(void* recvComm, int, void**, int*, void**, void** request) {
  if (recvComm == nullptr || request == nullptr)
    return failWith(ncclInternalError, "iflush: recvComm or request is NULL");
  *request = nullptr;  // host memory: what test() reported done is in place already
  return ncclSuccess;
}

ncclResult_t test(void* request, int* done, int* sizes) {
  auto* r = static_cast<Request*>(request);
  if (r == nullptr || done == nullptr || !r->busy)
    return failWith(ncclInternalError, "test: not a request in flight of this plugin");
  *done = 0;
  if (Status st = r->comm->progress(); !st.isOk()) return fromStatus(st);
  const int ops = r->kind == Kind::Send ? 2 : r->n;
  for (int i = 0; i < ops; ++i)
    if (!r->ops[i].complete()) return ncclSuccess;
  if (r->kind == Kind::Recv && r->received < r->n) return ncclSuccess;
  *done = 1;
  if (sizes != nullptr)
    for (int i = 0; i < r->n; ++i) sizes[i] = int(r->sizes[i]);
  r->busy = false;
  return ncclSuccess;
}

ncclResult_t closeSend(void* sendComm) {
  delete static_cast<Comm*>(sendComm);
  return ncclSuccess;
}

ncclResult_t closeRecv(void* recvComm) {
  delete static_cast<Comm*>(recvComm);
  return ncclSuccess;
}

ncclResult_t closeListen(void* listenComm) {
  delete static_cast<ListenComm*>(listenComm);
  return ncclSuccess;
}

}  // namespace loom::ncclnet
