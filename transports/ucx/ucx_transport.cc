#include "transports/ucx/ucx_transport.h"

#include <poll.h>
#include <unistd.h>
#include <ucp/api/ucp.h>
#include <ucs/memory/memory_type.h>
#include <uct/api/uct.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

#include "base/dtype.h"
#include "base/log.h"
#include "base/reduce_kernels.h"
#include "transports/shm/shm_util.h"
#include "transports/shm/user_memory.h"

namespace loom::transports::ucx {
namespace {

// What a rank publishes: this header, then its worker's address.
constexpr uint64_t kAddressMagic = 0x6c6f6f6d2d756378ull;  // "loom-ucx"
struct AddressHeader {
  uint64_t magic;
  uint64_t chunkBytes;
};
constexpr size_t kMaxChunkBytes = size_t(1) << 30;

// A chunk's tag: lane (24 bits: the probe's lanes lie past 2^20), sending rank (20), whether
// it is an op's header (1, below), the chunk's number in its direction (19, wrapping: far more
// than are ever in flight at once). Matching is exact.
constexpr int kSeqBits = 19, kRankBits = 20;
constexpr int kMaxRanks = 1 << kRankBits;
constexpr int kMaxLanes = 1 << 24;
constexpr uint64_t kHeaderTag = uint64_t(1) << kSeqBits;
uint64_t tagOf(int lane, int rank, uint64_t seq) {
  return (uint64_t(lane) << (kRankBits + 1 + kSeqBits)) | (uint64_t(rank) << (kSeqBits + 1)) |
         (seq & (kHeaderTag - 1));
}

// What begins each op's header message (tagged apart): the call's stamp and the op's size,
// which the receive compares with its own before it counts a byte of the op as received or
// reduces one (a message of another call is an error naming both calls, not data). UCX's own
// headers cannot carry it. An op of up to kInlineBytes travels inside its header message, so a
// small op is still one message; a larger one's chunks follow its header.
struct MessageHeader {
  CallStamp stamp;
  uint64_t bytes = 0;
};
constexpr size_t kInlineBytes = 8192;
constexpr size_t kMessageBytes = sizeof(MessageHeader) + kInlineBytes;

// RecvReduce chunks in flight per direction (each lands in a bounce buffer of its own).
constexpr size_t kMaxBounceChunks = 4;
// Calls of ucp_worker_progress per progress(), at most: each makes one round over UCX's
// transports; more than a few in a row only delay the executor's own bookkeeping.
constexpr int kMaxProgressRounds = 16;

Status ucsError(loomResult_t code, ucs_status_t st, const std::string& what) {
  return errorf(code, "ucx: %s: %s", what.c_str(), ucs_status_string(st));
}

// Whether UCX_TLS lets UCX use a transport known by any of `names` (its own and its aliases'):
// UCX_TLS unset, naming one of them, or an exclusion ("^...") naming none.
bool ucxTlsAllows(std::initializer_list<std::string_view> names) {
  const char* tls = getenv("UCX_TLS");
  if (tls == nullptr || *tls == '\0') return true;
  const bool excluding = tls[0] == '^';
  const std::string_view list = excluding ? tls + 1 : tls;
  bool named = false;
  for (size_t at = 0; at <= list.size();) {
    const size_t end = std::min(list.find(',', at), list.size());
    const std::string_view t = list.substr(at, end - at);
    for (std::string_view n : names) named = named || t == n;
    at = end + 1;
  }
  return excluding ? !named : named;
}
bool ucxMayUsePosix() { return ucxTlsAllows({"all", "sm", "shm", "mm", "posix"}); }
bool ucxMayUseCma() { return ucxTlsAllows({"all", "sm", "shm", "cma"}); }

// A context with the tag API and wake-ups (the event fd). Its workers are the communicator's
// one; mt_workers_shared makes ucp_mem_unmap safe from loomMemFree's thread. UCX's posix shared
// memory is told to offer peer error handling (UCX_POSIX_ERROR_HANDLING, off by default in
// 1.13; the user's setting stands): every endpoint asks for it, and without it UCX would leave
// posix out of them, keeping only sysv, which can never offer it (where UCX_TLS leaves posix
// out, UCX would only warn of the setting). betweenHostsOnly: see UcxOptions.
Status createContext(ucp_context_h* out, bool betweenHostsOnly = false) {
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return ucsError(loomSystemError, st, "reading UCX's settings (UCX_*)");
  const bool noSharedMemory = betweenHostsOnly && getenv("UCX_TLS") == nullptr;
  if (noSharedMemory) {
    st = ucp_config_modify(config, "TLS", "^sm");
    if (st != UCS_OK) {
      ucp_config_release(config);
      return ucsError(loomSystemError, st, "leaving UCX's shared memory out (UCX_TLS=^sm)");
    }
  } else if (getenv("UCX_POSIX_ERROR_HANDLING") == nullptr &&
             getenv("UCX_MM_ERROR_HANDLING") == nullptr && ucxMayUsePosix()) {
    // The shared-memory transports' setting (posix's, sysv's); sysv ignores it.
    st = ucp_config_modify(config, "MM_ERROR_HANDLING", "y");
    if (st != UCS_OK)
      LOOM_INFO("UCX", "cannot ask posix shared memory for peer error handling: %s",
                ucs_status_string(st));
  }
  ucp_params_t params = {};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 1;
  st = ucp_init(&params, config, out);
  ucp_config_release(config);
  if (st != UCS_OK)
    return ucsError(loomSystemError, st, "ucp_init (check UCX_TLS and UCX_NET_DEVICES)");
  return Status::ok();
}

// The memory types a context can move ("host", "cuda"...).
std::vector<std::string> memoryTypesOf(ucp_context_h context) {
  std::vector<std::string> out;
  ucp_context_attr_t attr = {};
  attr.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  if (ucp_context_query(context, &attr) != UCS_OK) return out;
  for (int t = 0; t < UCS_MEMORY_TYPE_LAST; ++t)
    if (attr.memory_types & (uint64_t(1) << t)) out.push_back(ucs_memory_type_names[t]);
  return out;
}

// Every transport resource of one memory domain, as "tl/device"; sets *rdma for a network
// device that is not TCP (verbs: rc, dc, ud).
void addTransportsOf(uct_component_h component, const char* mdName,
                     std::vector<std::string>* out, bool* rdma) {
  uct_md_config_t* config = nullptr;
  if (uct_md_config_read(component, nullptr, nullptr, &config) != UCS_OK) return;
  uct_md_h md = nullptr;
  ucs_status_t st = uct_md_open(component, mdName, config, &md);
  uct_config_release(config);
  if (st != UCS_OK) return;
  uct_tl_resource_desc_t* tls = nullptr;
  unsigned count = 0;
  if (uct_md_query_tl_resources(md, &tls, &count) == UCS_OK) {
    for (unsigned i = 0; i < count; ++i) {
      out->push_back(std::string(tls[i].tl_name) + "/" + tls[i].dev_name);
      if (tls[i].dev_type == UCT_DEVICE_TYPE_NET && strcmp(tls[i].tl_name, "tcp") != 0)
        *rdma = true;
    }
    uct_release_tl_resource_list(tls);
  }
  uct_md_close(md);
}

void listTransports(UcxDescription* d) {
  uct_component_h* components = nullptr;
  unsigned count = 0;
  if (uct_query_components(&components, &count) != UCS_OK) return;
  for (unsigned c = 0; c < count; ++c) {
    uct_component_attr_t attr = {};
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    if (uct_component_query(components[c], &attr) != UCS_OK) continue;
    std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = mds.data();
    if (uct_component_query(components[c], &attr) != UCS_OK) continue;
    for (const auto& md : mds) addTransportsOf(components[c], md.md_name, &d->transports, &d->rdma);
  }
  uct_release_component_list(components);
}

class UcxConnection;

class UcxTransportImpl final : public Transport {
 public:
  UcxTransportImpl(const CommContext* ctx, const UcxOptions& options)
      : ctx_(ctx), options_(options) {}
  ~UcxTransportImpl() override;

  Status init();
  const char* name() const override { return "ucx"; }
  bool canConnect(int) const override { return true; }
  Status connect(int peer, int lane, const Deadline& deadline,
                 std::unique_ptr<Connection>* out) override;
  void sleepUs(uint64_t token, int64_t timeoutUs) override;
  // Until the probe measures the link: UCX's shared memory on one host as ucx_perftest shows
  // it here (~0.5 us, ~4 GB/s); other links come from topology probing.
  Cost cost() const override { return {1e-6, 1.0 / 4e9}; }

  const std::string& published() const { return published_; }
  ucp_worker_h worker() const { return worker_; }
  const CommContext& comm() const { return *ctx_; }
  const UcxOptions& options() const { return options_; }
  // Runs the worker until it has nothing more to do (or a few rounds); true when it did work.
  bool progressWorker() {
    bool any = false;
    for (int i = 0; i < kMaxProgressRounds && ucp_worker_progress(worker_) != 0; ++i) any = true;
    return any;
  }
  // The handle of the loomMemAlloc segment holding [p, p+bytes), mapped on first use; null for
  // other memory (UCX registers that itself where it must).
  ucp_mem_h memoryHandle(const void* p, size_t bytes);
  std::string peerName(int rank) const { return describePeer(*ctx_, rank); }
  // Transfers handed to UCX and not yet finished, over all connections (sleep()).
  void requestStarted() { ++requestsInFlight_; }
  void requestEnded() { --requestsInFlight_; }

 private:
  void segmentFreed(uint64_t serial);

  const CommContext* ctx_;
  UcxOptions options_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int efd_ = -1;
  std::string published_;
  // loomMemAlloc segments mapped with ucp_mem_map, by serial; loomMemFree's hook (another
  // thread, perhaps) unmaps them, hence the lock.
  std::mutex memMutex_;
  std::map<uint64_t, ucp_mem_h> memory_;
  uint64_t freeHook_ = 0;
  size_t requestsInFlight_ = 0;
};

// One direction of a connection. Ops are cut in chunks of chunkBytes; chunk numbers run on
// from the first op, so both ends name every chunk alike whatever order they post them in.
class Direction {
 public:
  // A chunk of the op's bytes [begin, end), or (begin = end = 0, first in flight) its header
  // message.
  struct Chunk {
    size_t begin, end;
    void* request;  // UCX's; null once finished
    std::unique_ptr<char[]> bounce;  // RecvReduce: where the chunk lands
    bool received = false;           // RecvReduce: landed, waiting for the limit to reduce
    bool header() const { return end == 0; }
  };
  struct OpState {
    TransferOp* op = nullptr;
    uint64_t firstChunk = 0;
    size_t posted = 0;  // bytes handed to UCX (an inline receive's: taken)
    std::deque<Chunk> inFlight;
    bool headerPosted = false;
    bool inlineArrived = false;  // an inline receive's bytes wait in `message` for the limit
    // The header message (kMessageBytes, from the direction's spares once posted): a
    // MessageHeader, then an inline op's bytes.
    std::unique_ptr<char[]> message;
    bool isInline() const { return op->bytes <= kInlineBytes; }
    // Until its header has arrived and matched, a receive takes no byte of its chunks.
    bool headerPending() const {
      return !inFlight.empty() && inFlight.front().header() && inFlight.front().request != nullptr;
    }
  };

  void push(TransferOp* op, size_t chunkBytes) {
    OpState& s = ops_.emplace_back();
    s.op = op;
    s.firstChunk = nextChunk_;
    // An inline op takes a number too: its header message's tag must be its own.
    nextChunk_ += op->bytes > kInlineBytes ? (op->bytes + chunkBytes - 1) / chunkBytes : 1;
  }
  bool idle() const { return ops_.empty(); }
  std::deque<OpState>& ops() { return ops_; }

  // Buffers of one size, reused from earlier ops or chunks: a fresh allocation each time costs
  // the allocator's work on the path of every op (and for chunks, the kernel's page faults:
  // glibc returns blocks this large to the kernel), and zeroing it a pass over memory that a
  // receive overwrites anyway.
  class Spares {
   public:
    explicit Spares(size_t bytes) : bytes_(bytes) {}
    std::unique_ptr<char[]> take() {
      if (spare_.empty()) return std::make_unique_for_overwrite<char[]>(bytes_);
      std::unique_ptr<char[]> b = std::move(spare_.back());
      spare_.pop_back();
      return b;
    }
    void give(std::unique_ptr<char[]> b) {  // keeps up to kMaxBounceChunks
      if (b != nullptr && spare_.size() < kMaxBounceChunks) spare_.push_back(std::move(b));
    }

   private:
    size_t bytes_;
    std::vector<std::unique_ptr<char[]>> spare_;
  };

  // `chunkBytes`: the connection's chunk size, which every RecvReduce chunk's bounce fits.
  explicit Direction(size_t chunkBytes) : bounces(chunkBytes), messages(kMessageBytes) {}
  Spares bounces, messages;

  // Moves `done` of the leading ops and retires the complete ones, in order; true if any moved.
  bool updateDone() {
    bool moved = false;
    while (!ops_.empty()) {
      OpState& s = ops_.front();
      while (!s.inFlight.empty() && s.inFlight.front().request == nullptr &&
             !s.inFlight.front().received)
        s.inFlight.pop_front();
      size_t done = s.inFlight.empty() ? s.posted : s.inFlight.front().begin;
      if (done > s.op->done) {
        s.op->done = done;
        moved = true;
      }
      if (!s.op->complete()) break;
      messages.give(std::move(s.message));
      ops_.pop_front();
    }
    return moved;
  }

 private:
  std::deque<OpState> ops_;
  uint64_t nextChunk_ = 0;
};

class UcxConnection final : public Connection {
 public:
  UcxConnection(UcxTransportImpl* transport, int peer, int lane, size_t chunkBytes)
      : transport_(transport), peer_(peer), lane_(lane), chunkBytes_(chunkBytes),
        send_(chunkBytes), recv_(chunkBytes) {}
  ~UcxConnection() override;

  Status open(const ucp_address_t* address);
  Status post(TransferOp* op) override;
  Status progress(bool* progressed) override;
  Status checkAlive() override;

 private:
  // UCX failing the endpoint is also what a healthy peer's close looks like: one that finished
  // its part of the call and destroyed its communicator while this rank is still in it (over
  // tcp, its close ends the socket). So the loss is kept aside (peerLost_), and fails the
  // connection only where it still needs the peer (progress).
  static void onError(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* c = static_cast<UcxConnection*>(arg);
    if (c->peerLost_.isOk())
      c->peerLost_ = ucsError(loomRemoteError, status,
                              strprintf("lost the connection to %s (lane %d)",
                                        c->transport_->peerName(c->peer_).c_str(), c->lane_));
  }
  // Whether a receive waits on UCX for bytes (a header or a chunk) it has not delivered yet.
  bool receiveAwaitsPeer() {
    for (const Direction::OpState& s : recv_.ops())
      for (const Direction::Chunk& c : s.inFlight)
        if (c.request != nullptr) return true;
    return false;
  }
  // Hands UCX the chunks the ops' limits allow; true if any.
  Status postChunks(Direction* d, bool sending, bool* progressed);
  Status postChunk(Direction::OpState* s, bool sending, size_t end);
  Status postHeader(Direction::OpState* s, bool sending);
  // Collects finished chunks (RecvReduce: reduces those the limit allows); true if any.
  Status collect(Direction* d, bool* progressed);
  Status finish(Direction::OpState& s, Direction::Chunk* c);
  // Fails where a receive's header (arrived) is not that of the message it expects; else marks
  // an inline op's bytes arrived. A header message that matches is of the op's own size, so
  // it arrived whole.
  Status checkHeader(Direction::OpState& s);
  // An inline receive's bytes, once arrived, into dst when the limit lets them all be written
  // (RecvReduce: reduced); true if taken.
  bool takeInline(Direction::OpState& s);
  Status createEndpoint(const ucp_address_t* address, ucp_err_handling_mode_t mode);
  void closeEndpoint();

  UcxTransportImpl* transport_;
  int peer_;
  int lane_;
  size_t chunkBytes_;
  ucp_ep_h ep_ = nullptr;
  ucp_err_handling_mode_t errMode_ = UCP_ERR_HANDLING_MODE_NONE;
  Direction send_, recv_;
  Status error_;
  Status peerLost_;  // UCX's endpoint error (onError)
  int pidfd_ = -1;  // the peer's, where it runs on this machine in this pid namespace
};

// ---- UcxTransportImpl ----

Status UcxTransportImpl::init() {
  LOOM_TRY(createContext(&context_, options_.betweenHostsOnly));
  ucp_worker_params_t wp = {};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;  // the executor's thread drives it
  ucs_status_t st = ucp_worker_create(context_, &wp, &worker_);
  if (st != UCS_OK) return ucsError(loomSystemError, st, "ucp_worker_create");
  st = ucp_worker_get_efd(worker_, &efd_);
  if (st != UCS_OK) {
    efd_ = -1;  // sleep() naps instead
    LOOM_WARN("UCX", "no event fd (%s): idle waits nap for 1 ms at a time",
              ucs_status_string(st));
  }
  ucp_address_t* address = nullptr;
  size_t length = 0;
  st = ucp_worker_get_address(worker_, &address, &length);
  if (st != UCS_OK) return ucsError(loomSystemError, st, "ucp_worker_get_address");
  AddressHeader h = {kAddressMagic, options_.chunkBytes};
  published_.assign(reinterpret_cast<const char*>(&h), sizeof(h));
  published_.append(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(worker_, address);
  freeHook_ = addSegmentFreeHook([this](uint64_t serial) { segmentFreed(serial); });
  LOOM_INFO("UCX", "worker ready: %zu-byte address, %zu-byte chunks, memory types %s", length,
            options_.chunkBytes, [&] {
              std::string s;
              for (const auto& t : memoryTypesOf(context_)) s += (s.empty() ? "" : ",") + t;
              return s;
            }().c_str());
  return Status::ok();
}

UcxTransportImpl::~UcxTransportImpl() {
  if (freeHook_ != 0) removeSegmentFreeHook(freeHook_);
  for (auto& [serial, memh] : memory_) ucp_mem_unmap(context_, memh);
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
}

ucp_mem_h UcxTransportImpl::memoryHandle(const void* p, size_t bytes) {
  // The segment first, outside memMutex_: its free hook takes memMutex_ under the registry's
  // lock, so the order is always registry, then memMutex_.
  const SegmentRef seg = findUserMemory(p, bytes);
  if (seg.serial == 0) return nullptr;
  std::lock_guard<std::mutex> lock(memMutex_);
  auto it = memory_.find(seg.serial);
  if (it != memory_.end()) return it->second;
  ucp_mem_map_params_t mp = {};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = const_cast<char*>(static_cast<const char*>(p) - seg.offset);
  mp.length = seg.size;
  ucp_mem_h memh = nullptr;
  ucs_status_t st = ucp_mem_map(context_, &mp, &memh);
  if (st != UCS_OK) {
    LOOM_INFO("UCX", "ucp_mem_map of a %llu-byte segment: %s; UCX registers it per transfer",
              (unsigned long long)seg.size, ucs_status_string(st));
    memh = nullptr;
  }
  memory_[seg.serial] = memh;  // a failure is remembered too: it is not tried again
  return memh;
}

void UcxTransportImpl::segmentFreed(uint64_t serial) {
  std::lock_guard<std::mutex> lock(memMutex_);
  auto it = memory_.find(serial);
  if (it == memory_.end()) return;
  if (it->second != nullptr) ucp_mem_unmap(context_, it->second);
  memory_.erase(it);
}

Status UcxTransportImpl::connect(int peer, int lane, const Deadline&,
                                 std::unique_ptr<Connection>* out) {
  if (peer < 0 || peer >= ctx_->nranks || peer == ctx_->rank || lane < 0 || lane >= kMaxLanes ||
      ctx_->nranks > kMaxRanks)
    return errorf(loomInvalidArgument, "ucx: cannot connect rank %d to rank %d lane %d",
                  ctx_->rank, peer, lane);
  const std::string* theirs =
      size_t(peer) < ctx_->ucxAddresses.size() ? &ctx_->ucxAddresses[size_t(peer)] : nullptr;
  AddressHeader h = {};
  if (theirs != nullptr && theirs->size() > sizeof(h)) memcpy(&h, theirs->data(), sizeof(h));
  if (h.magic != kAddressMagic || h.chunkBytes < kChunkAlign || h.chunkBytes > kMaxChunkBytes)
    return errorf(loomInvalidUsage, "ucx: %s published no UCX address (is it using UCX?)",
                  peerName(peer).c_str());
  // The pair's chunks: the smaller size, so that both ends cut every op alike.
  const size_t chunk = std::min<size_t>(options_.chunkBytes, h.chunkBytes);
  auto conn = std::make_unique<UcxConnection>(this, peer, lane, chunk);
  LOOM_TRY(conn->open(reinterpret_cast<const ucp_address_t*>(theirs->data() + sizeof(h))));
  *out = std::move(conn);
  return Status::ok();
}

void UcxTransportImpl::sleepUs(uint64_t, int64_t timeoutUs) {
  // poll() counts milliseconds: a shorter turn rounds up to one.
  const int timeoutMs = int(std::min<int64_t>((std::max<int64_t>(timeoutUs, 0) + 999) / 1000,
                                              INT32_MAX));
  if (efd_ < 0) {
    poll(nullptr, 0, std::min(timeoutMs, 1));
    return;
  }
  // BUSY: events arrived since the last progress; the caller polls again at once.
  ucs_status_t st = ucp_worker_arm(worker_);
  if (st == UCS_ERR_BUSY) return;
  if (st != UCS_OK) {
    poll(nullptr, 0, std::min(timeoutMs, 1));
    return;
  }
  // With transfers in flight, the wait is cut to 1 ms: over UCX's TCP with peer error handling
  // (rendezvous through active messages) a transfer was seen to move on only when a wait ran
  // out, with no event on the fd (two ranks sleeping out 100 ms waits for minutes in a 16 MiB
  // all_reduce); an idle communicator still sleeps in full.
  pollfd p = {efd_, POLLIN, 0};
  poll(&p, 1, requestsInFlight_ > 0 ? std::min(timeoutMs, 1) : timeoutMs);
}

// ---- UcxConnection ----

Status UcxConnection::createEndpoint(const ucp_address_t* address, ucp_err_handling_mode_t mode) {
  ucp_ep_params_t p = {};
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  p.address = address;
  p.err_mode = mode;
  if (mode == UCP_ERR_HANDLING_MODE_PEER) {
    p.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.err_handler.cb = onError;
    p.err_handler.arg = this;
  }
  ucs_status_t st = ucp_ep_create(transport_->worker(), &p, &ep_);
  if (st == UCS_OK) {
    errMode_ = mode;
    return Status::ok();
  }
  ep_ = nullptr;
  return ucsError(loomRemoteError, st,
                  strprintf("connecting to %s lane %d", transport_->peerName(peer_).c_str(),
                            lane_));
}

Status UcxConnection::open(const ucp_address_t* address) {
  // An endpoint asks for UCX's peer error handling (UCP_ERR_HANDLING_MODE_PEER), which
  // restricts it to transports that report a failed peer (tcp, cma, posix; not sysv). Without
  // it UCX 1.13 aborts the process when a transfer with a failed peer fails (a CMA read of a dead
  // process, a reset TCP connection: "will not be handled since no error callback is
  // installed", logged as fatal). A peer of this machine and pid namespace is watched by loom
  // too (a pidfd; checkAlive), which sees its exit at once; to such a peer the endpoint goes
  // without it where UCX cannot use CMA (below). Where UCX_TLS leaves no transport that offers
  // it, the endpoint goes without it, and says so.
  const CommContext& comm = transport_->comm();
  const PeerInfo& me = comm.peers[size_t(comm.rank)];
  const PeerInfo& them = comm.peers[size_t(peer_)];
  if (them.machineId == me.machineId && them.pidNamespace != 0 &&
      them.pidNamespace == me.pidNamespace)
    pidfd_ = pidfdOpen(them.pid);
  const bool watched = pidfd_ >= 0 && them.hostId == me.hostId;
  // A watched rank of this host needs UCX's own handling only where UCX may read it by CMA:
  // over tcp alone loom's watch sees its exit, and UCX 1.13's rendezvous over tcp under peer
  // error handling (active messages, zero-copy) was seen to abort a survivor on an assertion of
  // its own (`comp->count > 0`) when a peer was killed mid-transfer. LOOM_UCX_PEER_ERRORS=0:
  // CMA for ranks of this host, whose exit loom still sees itself.
  const bool peerErrors = !watched || (transport_->options().peerErrors && ucxMayUseCma());
  Status st = createEndpoint(address, peerErrors ? UCP_ERR_HANDLING_MODE_PEER
                                                 : UCP_ERR_HANDLING_MODE_NONE);
  if (!st.isOk() && peerErrors) {
    LOOM_WARN("UCX", "%s; connecting without UCX's peer error handling (UCX_TLS offers no "
              "transport with it): UCX aborts this process if %s fails mid-transfer",
              st.message().c_str(), transport_->peerName(peer_).c_str());
    st = createEndpoint(address, UCP_ERR_HANDLING_MODE_NONE);
  }
  LOOM_TRY(st);
  LOOM_INFO("UCX", "endpoint to %s lane %d: %zu-byte chunks, %s%s",
            transport_->peerName(peer_).c_str(), lane_, chunkBytes_,
            errMode_ == UCP_ERR_HANDLING_MODE_PEER ? "UCX's peer error handling"
                                                   : "no peer error handling",
            pidfd_ >= 0 ? ", its process watched by loom" : "");
  return Status::ok();
}

UcxConnection::~UcxConnection() {
  closeEndpoint();
  if (pidfd_ >= 0) close(pidfd_);
}

void UcxConnection::closeEndpoint() {
  ucp_worker_h worker = transport_->worker();
  // Receives still waiting (after an error) are cancelled; sends finish or fail with the flush.
  for (auto& s : recv_.ops())
    for (auto& c : s.inFlight)
      if (c.request != nullptr) ucp_request_cancel(worker, c.request);
  // Flushing sends what is still queued, so a peer's last message is not lost when this rank
  // destroys its communicator first. Where UCX allows it (peer error handling on the endpoint)
  // the endpoint is closed at once instead when nothing is left to deliver: the peer failed or
  // exited, or ops are still unfinished (the communicator goes down mid-call, after an error
  // or an abort), whose transfers are lost either way and which a dead peer never flushes.
  void* close = nullptr;
  if (ep_ != nullptr) {
    const bool abandoned =
        !error_.isOk() || !peerLost_.isOk() || !send_.idle() || !recv_.idle() ||
        (pidfd_ >= 0 && processExited(pidfd_, transport_->comm().peers[size_t(peer_)].pid));
    ucp_request_param_t p = {};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = abandoned && errMode_ == UCP_ERR_HANDLING_MODE_PEER ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    close = ucp_ep_close_nbx(ep_, &p);
    ep_ = nullptr;
    if (!UCS_PTR_IS_PTR(close)) close = nullptr;
  }
  // Then the close and every request of this connection run to their end (within a bound): UCX
  // ends a failed endpoint's requests, with an error, only once it has discarded its lanes in
  // the worker's progress, and destroying the worker while an endpoint still holds requests
  // fails an assertion of UCX's (an abort).
  auto pending = [](void* request) {
    return request != nullptr && ucp_request_check_status(request) == UCS_INPROGRESS;
  };
  auto anyPending = [&] {
    if (pending(close)) return true;
    for (Direction* d : {&recv_, &send_})
      for (auto& s : d->ops())
        for (auto& c : s.inFlight)
          if (pending(c.request)) return true;
    return false;
  };
  const int64_t timeout = transport_->comm().timeoutMs;
  Deadline deadline(timeout < 0 ? 2000 : std::min<int64_t>(timeout, 2000));
  while (anyPending() && !deadline.expired()) transport_->progressWorker();
  if (close != nullptr) ucp_request_free(close);
  for (Direction* d : {&recv_, &send_})
    for (auto& s : d->ops())
      for (auto& c : s.inFlight)
        if (c.request != nullptr) {
          ucp_request_free(c.request);
          c.request = nullptr;
          transport_->requestEnded();
        }
}

Status UcxConnection::post(TransferOp* op) {
  if (!error_.isOk()) return error_;
  if (op->kind == TransferOp::Kind::RecvReduce && dtypeSize(op->dtype) == 0)
    return errorf(loomInvalidArgument, "ucx: RecvReduce with invalid dtype %d", int(op->dtype));
  if (op->bytes == 0) return Status::ok();  // complete as posted; no chunk, no pointer kept
  (op->kind == TransferOp::Kind::Send ? send_ : recv_).push(op, chunkBytes_);
  return Status::ok();
}

Status UcxConnection::postHeader(Direction::OpState* s, bool sending) {
  const CommContext& comm = transport_->comm();
  TransferOp* op = s->op;
  s->message = (sending ? send_ : recv_).messages.take();
  size_t length = kMessageBytes;  // a receive's room: a header and the most inline bytes
  if (sending) {
    const MessageHeader h{op->stamp, op->bytes};
    std::memcpy(s->message.get(), &h, sizeof(h));
    length = sizeof(h);
    if (s->isInline()) {
      std::memcpy(s->message.get() + sizeof(h), op->src, op->bytes);
      length += op->bytes;
      s->posted = op->bytes;
    }
  }
  s->headerPosted = true;
  ucp_request_param_t p = {};
  void* request =
      sending ? ucp_tag_send_nbx(ep_, s->message.get(), length,
                                 tagOf(lane_, comm.rank, s->firstChunk) | kHeaderTag, &p)
              : ucp_tag_recv_nbx(transport_->worker(), s->message.get(), length,
                                 tagOf(lane_, peer_, s->firstChunk) | kHeaderTag, ~uint64_t(0),
                                 &p);
  if (UCS_PTR_IS_ERR(request))
    return ucsError(loomRemoteError, UCS_PTR_STATUS(request),
                    strprintf("%s a message header %s %s (lane %d)",
                              sending ? "sending" : "receiving", sending ? "to" : "from",
                              transport_->peerName(peer_).c_str(), lane_));
  if (request == nullptr) {  // finished already
    if (!sending) LOOM_TRY(checkHeader(*s));
    return Status::ok();
  }
  transport_->requestStarted();
  s->inFlight.push_back({0, 0, request, nullptr, false});
  return Status::ok();
}

Status UcxConnection::checkHeader(Direction::OpState& s) {
  const TransferOp& op = *s.op;
  MessageHeader h;
  std::memcpy(&h, s.message.get(), sizeof(h));
  if (h.stamp == op.stamp && h.bytes == op.bytes) {
    s.inlineArrived = s.isInline();
    return Status::ok();
  }
  recordMismatch({op.stamp, h.stamp, op.bytes, h.bytes});
  return errorf(loomInvalidUsage,
                "ucx: %s sent on lane %d a message that is not the one this rank receives",
                transport_->peerName(peer_).c_str(), lane_);
}

bool UcxConnection::takeInline(Direction::OpState& s) {
  TransferOp* op = s.op;
  if (!s.inlineArrived || op->limit < op->bytes) return false;
  const char* in = s.message.get() + sizeof(MessageHeader);
  if (op->kind == TransferOp::Kind::RecvReduce)
    reduce(op->dst, op->src, in, op->bytes / dtypeSize(op->dtype), op->dtype, op->op);
  else
    std::memcpy(op->dst, in, op->bytes);
  s.inlineArrived = false;
  s.posted = op->bytes;
  return true;
}

Status UcxConnection::postChunk(Direction::OpState* s, bool sending, size_t end) {
  TransferOp* op = s->op;
  const size_t begin = s->posted;
  const uint64_t seq = s->firstChunk + begin / chunkBytes_;
  const CommContext& comm = transport_->comm();
  Direction::Chunk c{begin, end, nullptr, nullptr, false};
  char* where = nullptr;
  if (sending) {
    where = static_cast<char*>(const_cast<void*>(op->src)) + begin;
  } else if (op->kind == TransferOp::Kind::RecvReduce) {
    c.bounce = recv_.bounces.take();
    where = c.bounce.get();
  } else {
    where = static_cast<char*>(op->dst) + begin;
  }
  ucp_request_param_t p = {};
  if (c.bounce == nullptr)
    if (ucp_mem_h memh = transport_->memoryHandle(where, end - begin); memh != nullptr) {
      p.op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
      p.memh = memh;
    }
  void* request =
      sending ? ucp_tag_send_nbx(ep_, where, end - begin, tagOf(lane_, comm.rank, seq), &p)
              : ucp_tag_recv_nbx(transport_->worker(), where, end - begin,
                                 tagOf(lane_, peer_, seq), ~uint64_t(0), &p);
  if (UCS_PTR_IS_ERR(request))
    return ucsError(loomRemoteError, UCS_PTR_STATUS(request),
                    strprintf("%s %zu bytes %s %s (lane %d)", sending ? "sending" : "receiving",
                              end - begin, sending ? "to" : "from",
                              transport_->peerName(peer_).c_str(), lane_));
  c.request = request;  // null: finished already
  if (request != nullptr) transport_->requestStarted();
  c.received = request == nullptr && c.bounce != nullptr;
  s->inFlight.push_back(std::move(c));
  s->posted = end;
  return Status::ok();
}

Status UcxConnection::postChunks(Direction* d, bool sending, bool* progressed) {
  size_t bounces = 0;
  for (Direction::OpState& s : d->ops()) {
    TransferOp* op = s.op;
    const bool reduce = op->kind == TransferOp::Kind::RecvReduce;
    if (!s.headerPosted) {
      // A receive's header message is awaited at once (it lands aside); a send's goes first,
      // once an inline op's bytes may all be read.
      if (sending && s.isInline() && op->limit < op->bytes) continue;
      LOOM_TRY(postHeader(&s, sending));
      *progressed = true;
    }
    if (s.isInline()) continue;
    if (reduce) bounces += s.inFlight.size();
    while (s.posted < op->bytes) {
      const size_t end = std::min(s.posted + chunkBytes_, op->bytes);
      // A send's source and a receive's destination may be touched up to the limit only; a
      // RecvReduce chunk lands aside and waits for it there.
      if (reduce ? bounces >= kMaxBounceChunks : end > op->limit) break;
      LOOM_TRY(postChunk(&s, sending, end));
      bounces += reduce;
      *progressed = true;
    }
  }
  return Status::ok();
}

Status UcxConnection::finish(Direction::OpState& s, Direction::Chunk* c) {
  const ucs_status_t st = ucp_request_check_status(c->request);
  if (st == UCS_INPROGRESS) return Status::ok();
  if (c->header()) {
    ucp_request_free(c->request);
    c->request = nullptr;
    transport_->requestEnded();
    if (st != UCS_OK)
      return ucsError(loomRemoteError, st,
                      strprintf("a message header %s %s (lane %d)",
                                s.op->kind == TransferOp::Kind::Send ? "to" : "from",
                                transport_->peerName(peer_).c_str(), lane_));
    return s.op->kind == TransferOp::Kind::Send ? Status::ok() : checkHeader(s);
  }
  size_t length = c->end - c->begin;
  if (st == UCS_OK && s.op->kind != TransferOp::Kind::Send) {
    ucp_tag_recv_info_t info = {};
    if (ucp_tag_recv_request_test(c->request, &info) == UCS_OK) length = info.length;
  }
  ucp_request_free(c->request);
  c->request = nullptr;
  transport_->requestEnded();
  const bool sending = s.op->kind == TransferOp::Kind::Send;
  if (st != UCS_OK)
    return ucsError(st == UCS_ERR_MESSAGE_TRUNCATED ? loomInvalidUsage : loomRemoteError, st,
                    strprintf("%s %zu bytes %s %s (lane %d)", sending ? "sending" : "receiving",
                              c->end - c->begin, sending ? "to" : "from",
                              transport_->peerName(peer_).c_str(), lane_));
  if (length != c->end - c->begin)
    return errorf(loomInvalidUsage,
                  "ucx: %s sent %zu bytes where this rank receives %zu (lane %d): the ranks' "
                  "calls differ",
                  transport_->peerName(peer_).c_str(), length, c->end - c->begin, lane_);
  c->received = c->bounce != nullptr;
  return Status::ok();
}

Status UcxConnection::collect(Direction* d, bool* progressed) {
  for (Direction::OpState& s : d->ops()) {
    TransferOp* op = s.op;
    for (Direction::Chunk& c : s.inFlight) {
      if (c.request != nullptr) {
        LOOM_TRY(finish(s, &c));
        if (c.request == nullptr) *progressed = true;
      }
      // dst = src ⊕ received, once the executor lets this chunk of dst and src be touched.
      if (c.received && c.end <= op->limit && !s.headerPending()) {
        const size_t elt = dtypeSize(op->dtype);
        reduce(static_cast<char*>(op->dst) + c.begin,
               static_cast<const char*>(op->src) + c.begin, c.bounce.get(),
               (c.end - c.begin) / elt, op->dtype, op->op);
        c.received = false;
        d->bounces.give(std::move(c.bounce));
        *progressed = true;
      }
    }
    if (takeInline(s)) *progressed = true;
  }
  return Status::ok();
}

Status UcxConnection::progress(bool* progressed) {
  if (!error_.isOk()) return error_;
  if (transport_->progressWorker()) *progressed = true;
  Status st = postChunks(&send_, true, progressed);
  if (st.isOk()) st = postChunks(&recv_, false, progressed);
  if (st.isOk() && !send_.idle()) st = collect(&send_, progressed);
  if (st.isOk() && !recv_.idle()) st = collect(&recv_, progressed);
  if (st.isOk()) {
    if (send_.updateDone()) *progressed = true;
    if (recv_.updateDone()) *progressed = true;
  }
  // The endpoint's error handler may have run in the worker's progress above. By then UCX has
  // taken in all the peer sent before (a socket's end comes after its bytes), matched to the
  // receives posted or kept for those posted later; so the loss is this connection's error only
  // where a send is left, or a receive that UCX has not finished.
  if (st.isOk() && !peerLost_.isOk() && (!send_.idle() || receiveAwaitsPeer())) st = peerLost_;
  if (!st.isOk()) {
    error_ = peerLost_.isOk() ? st : peerLost_;
    LOOM_INFO("UCX", "%s", error_.message().c_str());
    return error_;
  }
  return Status::ok();
}

Status UcxConnection::checkAlive() {
  if (!error_.isOk()) return error_;
  if (pidfd_ < 0) return Status::ok();
  const PeerInfo& them = transport_->comm().peers[size_t(peer_)];
  if (!processExited(pidfd_, them.pid)) return Status::ok();
  // What it sent before it exited may still be in UCX's queues: take that first.
  bool progressed = false;
  LOOM_TRY(progress(&progressed));
  if (progressed || (send_.idle() && recv_.idle())) return Status::ok();
  error_ = errorf(loomRemoteError, "ucx: %s exited (pid %d) with transfers on lane %d pending",
                  transport_->peerName(peer_).c_str(), them.pid, lane_);
  return error_;
}

}  // namespace

bool ucxBuilt() { return true; }

UcxDescription describeUcx() {
  UcxDescription d;
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  d.version = strprintf("%u.%u.%u", major, minor, release);
  ucp_context_h context = nullptr;
  Status st = createContext(&context);
  if (!st.isOk()) {
    d.error = st.message();
    return d;
  }
  d.memoryTypes = memoryTypesOf(context);
  d.cudaMemory = std::find(d.memoryTypes.begin(), d.memoryTypes.end(), "cuda") !=
                 d.memoryTypes.end();
  ucp_cleanup(context);
  listTransports(&d);
  return d;
}

Status createUcxTransport(const CommContext* ctx, const UcxOptions& options,
                          std::unique_ptr<Transport>* out) {
  UcxOptions o = options;
  if (o.chunkBytes < kChunkAlign || o.chunkBytes > kMaxChunkBytes)
    return errorf(loomInvalidArgument, "ucx: chunks of %zu bytes; want %zu to %zu", o.chunkBytes,
                  kChunkAlign, kMaxChunkBytes);
  o.chunkBytes -= o.chunkBytes % kChunkAlign;
  auto t = std::make_unique<UcxTransportImpl>(ctx, o);
  LOOM_TRY(t->init());
  *out = std::move(t);
  return Status::ok();
}

std::string ucxAddress(const Transport& transport) {
  const auto* t = dynamic_cast<const UcxTransportImpl*>(&transport);
  return t == nullptr ? std::string() : t->published();
}

}  // namespace loom::transports::ucx
