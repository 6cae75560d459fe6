// The C API: argument checks with clear messages, handles, groups, and the error text.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/info.h"
#include "base/dtype.h"
#include "base/reduce_kernels.h"
#include "comm/comm.h"
#include "comm/handle.h"
#include "comm/stream_calls.h"
#include "base/log.h"
#include "base/params.h"
#include "loom/loom.h"
#include "transports/shm/user_memory.h"

namespace loom {
namespace {

using collectives::Collective;

inline Status checkType(int dtype, const char* fn) {
  if (!validDtype(dtype))
    return errorf(loomInvalidArgument, "%s: unknown datatype %d (valid: 0..%d)", fn, dtype,
                  loomNumTypes - 1);
  return Status::ok();
}

// A built-in op, or a live pre-multiplied sum of comm created for dtype.
inline Status checkOp(const loomComm* comm, int op, loomDataType_t dtype, const char* fn) {
  if (validOp(op)) return Status::ok();
  size_t i = size_t(op) - loomNumOps;
  if (op >= loomNumOps && i < comm->preMulSums.size() && comm->preMulSums[i].live) {
    if (comm->preMulSums[i].dtype == dtype) return Status::ok();
    return errorf(loomInvalidArgument, "%s: op %d is a pre-multiplied sum of %s, not of %s", fn,
                  op, dtypeName(comm->preMulSums[i].dtype), dtypeName(dtype));
  }
  return errorf(loomInvalidArgument,
                "%s: unknown reduction op %d (valid: 0..%d, or one of loomRedOpCreatePreMulSum "
                "on this communicator)",
                fn, op, loomNumOps - 1);
}

// elements × multiplier × element size must fit in size_t (and in a signed 64-bit offset).
inline Status checkBytes(size_t count, size_t multiplier, loomDataType_t dtype, const char* fn,
                  const char* what, size_t* bytes) {
  size_t es = dtypeSize(dtype);
  unsigned __int128 b = (unsigned __int128)count * multiplier * es;
  if (b > (unsigned __int128)(LLONG_MAX))
    return errorf(loomInvalidArgument, "%s: %s of %zu elements of %s is too many bytes", fn,
                  what, count, dtypeName(dtype));
  *bytes = size_t(b);
  return Status::ok();
}

inline Status checkBuffer(const void* p, size_t bytes, const char* fn, const char* name) {
  if (p == nullptr && bytes > 0)
    return errorf(loomInvalidArgument, "%s: %s is NULL but %zu bytes are to be moved", fn, name,
                  bytes);
  return Status::ok();
}

}  // namespace

// A call with a pre-multiplied sum reduces as loomSum over its input scaled by the op's
// scalar: the scaled copy (comm->scaledInputs) becomes the call's input. The scaling is the
// product kernel against a block of the scalar, so every type rounds as a product does.
void scaleByPreMulSum(loomComm* comm, CallDesc& d, const PreMulSum& pm) {
  const size_t es = dtypeSize(d.dtype);
  const size_t count = d.inputBytes / es;
  std::vector<std::vector<char>>& copies = comm->scaledInputs;
  if (!inGroup()) copies.resize(1);
  else copies.emplace_back();  // kept until the group has run (comm/group.cc)
  copies.back().resize(d.inputBytes);
  const char* in = static_cast<const char*>(d.input);
  char* out = copies.back().data();
  for (size_t i = 0; i < count; i += PreMulSum::kBlock) {
    size_t n = std::min(PreMulSum::kBlock, count - i);
    reduce(out + i * es, in + i * es, pm.scalars.data(), n, d.dtype, loomProd);
  }
  d.input = out;
  d.op = loomSum;
}

namespace {

void applyPreMulSum(loomComm* comm, CallDesc& d) {
  scaleByPreMulSum(comm, d, comm->preMulSums[size_t(d.op) - loomNumOps]);
}

// A split's or shrink's config: the caller's, or (NULL) one with the parent's deadline.
const loomConfig_t* orParents(const loomConfig_t* config, const Comm& parent,
                              loomConfig_t* storage) {
  if (config != nullptr) return config;
  *storage = LOOM_CONFIG_INITIALIZER;
  storage->timeoutMs = int(parent.timeoutMs());
  return storage;
}

// A call through the stream (device buffers, or a stream given while a device is in use), else
// on the host now. Without a device a stream is only an order, which a call that has completed
// when it returns keeps.
Status submit(loomComm* comm, void* stream, CallDesc& call) {
  if (device::Device* dev = orderedDevice(stream, call.input, call.output)) [[unlikely]]
    return enqueueCollective(comm, dev, stream, call);
  if (stream != nullptr)
    LOOM_TRACE("COLL", "%s: a stream without a device in use (%s): runs on the host now",
               collectives::collectiveName(call.args.coll), device::whyNone());
  return submitCollective(comm, call);
}

}  // namespace

Status submitCollective(loomComm* comm, CallDesc& call) {
  // First: the progress thread may be using comm->scaledInputs for an earlier call.
  LOOM_TRY(awaitOrdered(comm));
  if (call.op >= loomNumOps) applyPreMulSum(comm, call);
  if (inGroup()) return queueCollective(comm, call);
  CallHold hold(comm);
  const CallDesc* one = &call;
  LOOM_TRY(comm->impl->agreeOnCall({&one, 1}, {}));
  return comm->impl->runCollective(call);
}

Status submitP2P(loomComm* comm, const P2PCall& call) {
  if (inGroup()) return queueP2P(comm, call);
  LOOM_TRY(awaitOrdered(comm));
  CallHold hold(comm);
  LOOM_TRY(comm->impl->agreeOnCall({}, {&call, 1}));
  return comm->impl->runP2P({call});
}

namespace {

// The shared front half of every collective: comm and dtype checks. Inline: it is the
// start of every call, and its checks are a few compares.
inline Status prologue(loomComm* comm, loomDataType_t dtype, const char* fn) {
  LOOM_TRY(checkComm(comm, fn));
  LOOM_TRY(checkType(dtype, fn));
  return Status::ok();
}

// The communicator's CallDesc (Comm::apiCall), filled for this call.
CallDesc& describe(loomComm* comm, Collective coll, size_t count, const void* in, void* out,
                   loomDataType_t dtype, loomRedOp_t op, int root, size_t inBytes,
                   size_t outBytes) {
  CallDesc& d = comm->impl->apiCall();
  d.args.coll = coll;
  d.args.nranks = comm->impl->nranks();
  d.args.count = count;
  d.args.root = root;
  d.input = in;
  d.output = out;
  d.dtype = dtype;
  d.op = op;
  d.inputBytes = inBytes;
  d.outputBytes = outBytes;
  return d;
}

}  // namespace

Comm& commOf(loomComm_t comm) { return *comm->impl; }

}  // namespace loom

using namespace loom;

extern "C" {

const char* loomGetErrorString(loomResult_t result) {
  switch (result) {
    case loomSuccess: return "success";
    case loomInvalidArgument: return "invalid argument";
    case loomInvalidUsage: return "invalid usage";
    case loomSystemError: return "system error";
    case loomInternalError: return "internal error";
    case loomRemoteError: return "remote error";
    case loomTimeout: return "timeout";
    case loomInProgress: return "in progress";
    default: return "unknown result code";
  }
}

loomResult_t loomGetInfo(const char** json) {
  if (json == nullptr)
    return finish(nullptr, errorf(loomInvalidArgument, "loomGetInfo: json is NULL"));
  thread_local std::string text;
  text = infoJson();
  *json = text.c_str();
  return loomSuccess;
}

loomResult_t loomCommDumpTrace(loomComm_t comm, const char* path) {
  Status st = checkComm(comm, "loomCommDumpTrace");
  if (st.isOk()) st = comm->impl->dumpTrace(path, "request", nullptr);
  if (!st.isOk()) return finish(nullptr, st.withContext("loomCommDumpTrace"));
  return loomSuccess;
}

loomResult_t loomCommGetLastAlgorithm(loomComm_t comm, const char** algorithm) {
  Status st = checkComm(comm, "loomCommGetLastAlgorithm");
  if (st.isOk() && algorithm == nullptr)
    st = errorf(loomInvalidArgument, "loomCommGetLastAlgorithm: algorithm is NULL");
  if (!st.isOk()) return finish(nullptr, st);
  *algorithm = comm->impl->lastAlgorithm();
  return loomSuccess;
}

const char* loomGetLastError(loomComm_t comm) {
  if (comm != nullptr && isLive(comm) && comm->ready.load() && comm->impl)
    return comm->impl->lastError();
  return threadLastError().c_str();
}

loomResult_t loomGetVersion(int* version) {
  if (version == nullptr)
    return finish(nullptr, errorf(loomInvalidArgument, "loomGetVersion: version is NULL"));
  *version = LOOM_VERSION_CODE;
  return loomSuccess;
}

void loomLogInfo(const char* subsys, const char* message) {
  if (subsys != nullptr && message != nullptr) LOOM_INFO(subsys, "%s", message);
}

loomResult_t loomMemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr)
    return finish(nullptr, errorf(loomInvalidArgument, "loomMemAlloc: ptr is NULL"));
  return finish(nullptr, transports::allocUserMemory(size, ptr));
}

loomResult_t loomMemFree(void* ptr) { return finish(nullptr, transports::freeUserMemory(ptr)); }

loomResult_t loomGetUniqueId(loomUniqueId* uniqueId) {
  if (uniqueId == nullptr)
    return finish(nullptr, errorf(loomInvalidArgument, "loomGetUniqueId: uniqueId is NULL"));
  // LOOM_ROOT (or NCCL_COMM_ID) names where rank 0 will serve the root: every rank may make the
  // id itself, and none is served here.
  const params::Value root = params::get("LOOM_ROOT");
  if (root.text.empty()) return finish(nullptr, serveNewRoot(uniqueId));
  return finish(nullptr, rankZeroRootId(root.text, uniqueId)
                             .withContext(strprintf("loomGetUniqueId: %s", root.source)));
}

loomResult_t loomCommInitRankConfig(loomComm_t* comm, int nranks, loomUniqueId commId, int rank,
                                    const loomConfig_t* config) {
  Status st;
  if (comm == nullptr) st = errorf(loomInvalidArgument, "loomCommInitRank: comm is NULL");
  else if (nranks <= 0)
    st = errorf(loomInvalidArgument, "loomCommInitRank: nranks %d must be at least 1", nranks);
  else st = checkRank(rank, nranks, "loomCommInitRank", "rank");
  if (!st.isOk()) return finish(nullptr, st);
  *comm = nullptr;
  auto* handle = new loomComm;
  if (inGroup() || !blockingInit(config)) {
    // Made at the group's end, or in the background: the handle exists meanwhile.
    handle->pending = std::make_unique<PendingInit>(nranks, rank, commId, config);
    registerHandle(handle);
    *comm = handle;
    if (inGroup()) {
      queueInit(handle);
      return loomSuccess;
    }
    handle->pending->start();
    return loomInProgress;
  }
  st = Comm::create(nranks, commId, rank, config, &handle->impl);
  if (!st.isOk()) {
    delete handle;
    return finish(nullptr, st.withContext(strprintf("loomCommInitRank (rank %d of %d)", rank,
                                                    nranks)));
  }
  handle->ready.store(true, std::memory_order_release);
  registerHandle(handle);
  *comm = handle;
  return loomSuccess;
}

loomResult_t loomCommInitRank(loomComm_t* comm, int nranks, loomUniqueId commId, int rank) {
  return loomCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

loomResult_t loomCommInitFromEnv(loomComm_t* comm, const loomConfig_t* config) {
  // The first variable that is set wins, in the order of loom's own, torchrun's, then the
  // launchers'.
  auto firstInt = [](std::initializer_list<const char*> names, const char** which) -> long {
    for (const char* n : names)
      if (const char* v = getenv(n); v != nullptr && *v != '\0') {
        *which = n;
        return strtol(v, nullptr, 10);
      }
    return -1;
  };
  const char* rankVar = "";
  const char* sizeVar = "";
  long rank = params::getInt("LOOM_RANK");
  if (rank < 0)
    rank = firstInt({"RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"},
                    &rankVar);
  long size = params::getInt("LOOM_WORLD_SIZE");
  if (size < 0)
    size = firstInt({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"},
                    &sizeVar);
  std::string root = params::getString("LOOM_ROOT");
  if (root.empty() && getenv("MASTER_ADDR") && getenv("MASTER_PORT"))
    root = std::string(getenv("MASTER_ADDR")) + ":" + getenv("MASTER_PORT");
  Status st;
  if (rank < 0 || size <= 0)
    st = errorf(loomInvalidUsage,
                "loomCommInitFromEnv: no rank/size in the environment (set LOOM_RANK and "
                "LOOM_WORLD_SIZE, or RANK and WORLD_SIZE, or run under mpirun/srun)");
  else if (root.empty())
    st = errorf(loomInvalidUsage,
                "loomCommInitFromEnv: no rendezvous address (set LOOM_ROOT=host:port or "
                "NCCL_COMM_ID, or MASTER_ADDR and MASTER_PORT)");
  if (!st.isOk()) return finish(nullptr, st);
  loomUniqueId id;
  st = rankZeroRootId(root, &id);
  if (!st.isOk()) return finish(nullptr, st.withContext("loomCommInitFromEnv"));
  (void)rankVar;
  (void)sizeVar;
  return loomCommInitRankConfig(comm, int(size), id, int(rank), config);
}

loomResult_t loomCommSplit(loomComm_t comm, int color, int key, loomComm_t* newcomm,
                           const loomConfig_t* config) {
  Status st = checkComm(comm, "loomCommSplit");
  if (st.isOk() && newcomm == nullptr)
    st = errorf(loomInvalidArgument, "loomCommSplit: newcomm is NULL");
  if (!st.isOk()) return finish(comm, st);
  *newcomm = nullptr;
  Comm& c = *comm->impl;
  Deadline deadline(c.timeoutMs());
  // Round 1: everyone's (color, key). Round 2: each group's first rank publishes a new id.
  int mine[2] = {color, key};
  std::vector<std::string> all;
  st = c.bootstrap().allgather(std::string(reinterpret_cast<char*>(mine), sizeof(mine)), &all,
                               deadline);
  if (!st.isOk()) return finish(comm, st.withContext("loomCommSplit"));
  std::vector<std::pair<int, int>> members;  // (key, rank) of my color
  for (int r = 0; r < c.nranks(); ++r) {
    int theirs[2];
    memcpy(theirs, all[r].data(), sizeof(theirs));
    if (color >= 0 && theirs[0] == color) members.push_back({theirs[1], r});
  }
  std::sort(members.begin(), members.end());
  int newRank = -1;
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].second == c.rank()) newRank = int(i);
  std::string published;
  if (newRank == 0) {
    loomUniqueId id;
    st = serveNewRoot(&id);  // not loomGetUniqueId: LOOM_ROOT names the parent's root
    if (!st.isOk()) return finish(comm, st.withContext("loomCommSplit"));
    published.assign(id.internal, sizeof(id.internal));
  }
  st = c.bootstrap().allgather(published, &all, deadline);
  if (!st.isOk()) return finish(comm, st.withContext("loomCommSplit"));
  if (color < 0) return loomSuccess;  // LOOM_SPLIT_NOCOLOR: this rank joins no group
  loomUniqueId id;
  memcpy(id.internal, all[members[0].second].data(), sizeof(id.internal));
  loomConfig_t inherited;
  return loomCommInitRankConfig(newcomm, int(members.size()), id, newRank,
                                orParents(config, c, &inherited));
}

// Frees a handle: its communicator leaves (after telling the peers why, when aborted).
// Waits for a pending init to end first, and for the calls of other threads to leave.
static loomResult_t release(loomComm_t comm, const char* fn, const char* abortReason) {
  if (comm == nullptr) return finish(nullptr, errorf(loomInvalidArgument, "%s: comm is NULL", fn));
  if (!isLive(comm))
    return finish(nullptr, errorf(loomInvalidUsage,
                                  "%s: the communicator was destroyed (or never created)", fn));
  if (!comm->ready.load() && comm->pending && comm->pending->started)
    awaitReady(comm, fn, true).ignore();
  if (comm->impl && comm->ordered) {
    // A destroy lets the stream-ordered calls already enqueued run first (they are bounded by
    // the deadline); an abort revokes, so that the one running ends, and drops the others.
    if (abortReason != nullptr) comm->impl->abort(abortReason);
    else awaitOrderedSlow(comm).ignore();
    stopOrdered(comm);
  }
  forget(comm);
  if (comm->impl) {
    if (abortReason != nullptr) comm->impl->abort(abortReason);
    Deadline deadline(comm->impl->timeoutMs());
    while (comm->busy.load(std::memory_order_acquire) > 0 && !deadline.expired())
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (comm->busy.load() > 0) {
      // A call that does not notice the revoke in time keeps the communicator: freeing it
      // under that call would crash the process.
      return finish(nullptr, errorf(loomInternalError,
                                    "%s: a call in another thread did not end before the "
                                    "deadline; the communicator is left allocated",
                                    fn));
    }
    comm->impl->leave();
  }
  delete comm;
  return loomSuccess;
}

loomResult_t loomCommDestroy(loomComm_t comm) {
  return release(comm, "loomCommDestroy", nullptr);
}

loomResult_t loomCommAbort(loomComm_t comm) {
  return release(comm, "loomCommAbort", "the communicator was aborted by the application");
}

loomResult_t loomCommRevoke(loomComm_t comm) {
  Status st = checkComm(comm, "loomCommRevoke");
  if (!st.isOk()) return finish(nullptr, st);
  comm->impl->revoke("loomCommRevoke on this rank");
  return loomSuccess;
}

loomResult_t loomCommCount(const loomComm_t comm, int* count) {
  Status st = checkComm(comm, "loomCommCount");
  if (st.isOk() && count == nullptr) st = errorf(loomInvalidArgument, "loomCommCount: count is NULL");
  if (!st.isOk()) return finish(nullptr, st);
  *count = comm->impl->nranks();
  return loomSuccess;
}

loomResult_t loomCommUserRank(const loomComm_t comm, int* rank) {
  Status st = checkComm(comm, "loomCommUserRank");
  if (st.isOk() && rank == nullptr)
    st = errorf(loomInvalidArgument, "loomCommUserRank: rank is NULL");
  if (!st.isOk()) return finish(nullptr, st);
  *rank = comm->impl->rank();
  return loomSuccess;
}

loomResult_t loomCommGetAsyncError(loomComm_t comm, loomResult_t* asyncError) {
  const char* fn = "loomCommGetAsyncError";
  Status st;
  if (comm == nullptr || !isLive(comm)) st = checkComm(comm, fn);
  else if (asyncError == nullptr) st = errorf(loomInvalidArgument, "%s: asyncError is NULL", fn);
  if (!st.isOk()) return finish(nullptr, st);
  // A communicator still being made is loomInProgress; one whose init failed, that failure.
  if (!comm->ready.load(std::memory_order_acquire)) {
    st = awaitReady(comm, fn, false);
    if (st.code() == loomInProgress || (!st.isOk() && comm->ready.load())) {
      *asyncError = st.code();
      return loomSuccess;
    }
    if (!st.isOk()) return finish(nullptr, st);
  }
  if (comm->impl && comm->impl->revoked()) {
    // Revoked here: in progress while a call still holds it, then quiescent (NCCL's meaning),
    // so that the application knows when shrink or destroy may proceed.
    *asyncError = comm->busy.load(std::memory_order_acquire) > 0 ? loomInProgress : loomSuccess;
    return loomSuccess;
  }
  *asyncError = comm->impl ? comm->impl->asyncError() : comm->initError.code();
  return loomSuccess;
}

loomResult_t loomAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                           void* stream) {
  const char* fn = "loomAllReduce";
  size_t bytes = 0;
  Status st = prologue(comm, datatype, fn);
  if (st.isOk()) st = checkOp(comm, op, datatype, fn);
  if (st.isOk()) st = checkBytes(count, 1, datatype, fn, "a buffer", &bytes);
  if (st.isOk()) st = checkBuffer(sendbuff, bytes, fn, "sendbuff");
  if (st.isOk()) st = checkBuffer(recvbuff, bytes, fn, "recvbuff");
  if (st.isOk())
    st = submit(comm, stream, describe(comm, Collective::AllReduce, count, sendbuff, recvbuff,
                                         datatype, op, 0, bytes, bytes));
  return finish(comm, st);
}

loomResult_t loomBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           loomDataType_t datatype, int root, loomComm_t comm, void* stream) {
  const char* fn = "loomBroadcast";
  size_t bytes = 0;
  Status st = prologue(comm, datatype, fn);
  if (st.isOk()) st = checkRank(root, comm->impl->nranks(), fn, "root");
  if (st.isOk()) st = checkBytes(count, 1, datatype, fn, "a buffer", &bytes);
  if (st.isOk() && comm->impl->rank() == root) st = checkBuffer(sendbuff, bytes, fn, "sendbuff");
  if (st.isOk()) st = checkBuffer(recvbuff, bytes, fn, "recvbuff");
  if (st.isOk())
    st = submit(comm, stream, describe(comm, Collective::Broadcast, count, sendbuff, recvbuff,
                                         datatype, loomSum, root,
                                         comm->impl->rank() == root ? bytes : 0, bytes));
  return finish(comm, st);
}

loomResult_t loomReduce(const void* sendbuff, void* recvbuff, size_t count,
                        loomDataType_t datatype, loomRedOp_t op, int root, loomComm_t comm,
                        void* stream) {
  const char* fn = "loomReduce";
  size_t bytes = 0;
  Status st = prologue(comm, datatype, fn);
  if (st.isOk()) st = checkOp(comm, op, datatype, fn);
  if (st.isOk()) st = checkRank(root, comm->impl->nranks(), fn, "root");
  if (st.isOk()) st = checkBytes(count, 1, datatype, fn, "a buffer", &bytes);
  if (st.isOk()) st = checkBuffer(sendbuff, bytes, fn, "sendbuff");
  bool isRoot = st.isOk() && comm->impl->rank() == root;
  if (st.isOk() && isRoot) st = checkBuffer(recvbuff, bytes, fn, "recvbuff");
  if (st.isOk())
    st = submit(comm, stream, describe(comm, Collective::Reduce, count, sendbuff, recvbuff,
                                         datatype, op, root, bytes, isRoot ? bytes : 0));
  return finish(comm, st);
}

loomResult_t loomAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           loomDataType_t datatype, loomComm_t comm, void* stream) {
  const char* fn = "loomAllGather";
  size_t inBytes = 0, outBytes = 0;
  Status st = prologue(comm, datatype, fn);
  if (st.isOk()) st = checkBytes(sendcount, 1, datatype, fn, "sendcount", &inBytes);
  if (st.isOk())
    st = checkBytes(sendcount, comm->impl->nranks(), datatype, fn, "the output", &outBytes);
  if (st.isOk()) st = checkBuffer(sendbuff, inBytes, fn, "sendbuff");
  if (st.isOk()) st = checkBuffer(recvbuff, outBytes, fn, "recvbuff");
  if (st.isOk())
    st = submit(comm, stream, describe(comm, Collective::AllGather, sendcount, sendbuff,
                                         recvbuff, datatype, loomSum, 0, inBytes, outBytes));
  return finish(comm, st);
}

loomResult_t loomReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                               void* stream) {
  const char* fn = "loomReduceScatter";
  size_t inBytes = 0, outBytes = 0;
  Status st = prologue(comm, datatype, fn);
  if (st.isOk()) st = checkOp(comm, op, datatype, fn);
  if (st.isOk()) st = checkBytes(recvcount, 1, datatype, fn, "recvcount", &outBytes);
  if (st.isOk())
    st = checkBytes(recvcount, comm->impl->nranks(), datatype, fn, "the input", &inBytes);
  if (st.isOk()) st = checkBuffer(sendbuff, inBytes, fn, "sendbuff");
  if (st.isOk()) st = checkBuffer(recvbuff, outBytes, fn, "recvbuff");
  if (st.isOk())
    st = submit(comm, stream, describe(comm, Collective::ReduceScatter, recvcount, sendbuff,
                                         recvbuff, datatype, op, 0, inBytes, outBytes));
  return finish(comm, st);
}

loomResult_t loomAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          loomDataType_t datatype, loomComm_t comm, void* stream) {
  const char* fn = "loomAlltoAll";
  size_t bytes = 0;
  Status st = prologue(comm, datatype, fn);
  if (st.isOk()) st = checkBytes(count, comm->impl->nranks(), datatype, fn, "a buffer", &bytes);
  if (st.isOk()) st = checkBuffer(sendbuff, bytes, fn, "sendbuff");
  if (st.isOk()) st = checkBuffer(recvbuff, bytes, fn, "recvbuff");
  if (st.isOk())
    st = submit(comm, stream, describe(comm, Collective::AlltoAll, count, sendbuff, recvbuff,
                                         datatype, loomSum, 0, bytes, bytes));
  return finish(comm, st);
}

loomResult_t loomAlltoAllv(const void* sendbuff, const size_t sendcounts[],
                           const size_t sdispls[], void* recvbuff, const size_t recvcounts[],
                           const size_t rdispls[], loomDataType_t datatype, loomComm_t comm,
                           void* stream) {
  const char* fn = "loomAlltoAllv";
  Status st = prologue(comm, datatype, fn);
  if (st.isOk() && (!sendcounts || !sdispls || !recvcounts || !rdispls))
    st = errorf(loomInvalidArgument, "%s: a counts or displacements array is NULL", fn);
  if (st.isOk()) {
    int n = comm->impl->nranks();
    size_t inElems = 0, outElems = 0;
    for (int r = 0; r < n && st.isOk(); ++r) {
      size_t a = 0, b = 0;
      st = checkBytes(sdispls[r] + sendcounts[r], 1, datatype, fn, "a send block", &a);
      if (st.isOk()) st = checkBytes(rdispls[r] + recvcounts[r], 1, datatype, fn,
                                     "a receive block", &b);
      if (sdispls[r] + sendcounts[r] < sdispls[r] || rdispls[r] + recvcounts[r] < rdispls[r])
        st = errorf(loomInvalidArgument, "%s: block %d's displacement + count overflows", fn, r);
      if (sendcounts[r] > 0) inElems = std::max(inElems, sdispls[r] + sendcounts[r]);
      if (recvcounts[r] > 0) outElems = std::max(outElems, rdispls[r] + recvcounts[r]);
    }
    size_t es = dtypeSize(datatype);
    if (st.isOk()) st = checkBuffer(sendbuff, inElems * es, fn, "sendbuff");
    if (st.isOk()) st = checkBuffer(recvbuff, outElems * es, fn, "recvbuff");
    if (st.isOk()) {
      CallDesc& d = describe(comm, Collective::AlltoAllv, 0, sendbuff, recvbuff, datatype,
                             loomSum, 0, inElems * es, outElems * es);
      d.args.sendCounts.assign(sendcounts, sendcounts + n);
      d.args.sendDispls.assign(sdispls, sdispls + n);
      d.args.recvCounts.assign(recvcounts, recvcounts + n);
      d.args.recvDispls.assign(rdispls, rdispls + n);
      st = submit(comm, stream, d);
    }
  }
  return finish(comm, st);
}

// On the root of a gather or scatter the rank's own block may be the root's block `root` of
// the other buffer (in place), and may not overlap it anywhere else: the plans would overwrite
// what they have yet to read.
static Status checkRootBlock(const void* own, size_t ownBytes, const void* all, size_t allBytes,
                             int root, const char* fn, const char* ownName, const char* allName) {
  const char* inPlace = static_cast<const char*>(all) + size_t(root) * ownBytes;
  if (own == inPlace || !rangesOverlap(own, ownBytes, all, allBytes)) return Status::ok();
  return errorf(loomInvalidArgument,
                "%s: %s overlaps %s but is not %s + root*count (the in-place layout)", fn,
                ownName, allName, allName);
}

loomResult_t loomGather(const void* sendbuff, void* recvbuff, size_t count,
                        loomDataType_t datatype, int root, loomComm_t comm, void* stream) {
  const char* fn = "loomGather";
  size_t bytes = 0, allBytes = 0;
  Status st = prologue(comm, datatype, fn);
  if (st.isOk()) st = checkRank(root, comm->impl->nranks(), fn, "root");
  if (st.isOk()) st = checkBytes(count, 1, datatype, fn, "count", &bytes);
  if (st.isOk())
    st = checkBytes(count, comm->impl->nranks(), datatype, fn, "the output", &allBytes);
  if (st.isOk()) st = checkBuffer(sendbuff, bytes, fn, "sendbuff");
  // recvbuff is the root's alone: NCCL ignores it on the other ranks.
  const bool isRoot = st.isOk() && comm->impl->rank() == root;
  if (isRoot) st = checkBuffer(recvbuff, allBytes, fn, "recvbuff");
  if (isRoot && st.isOk())
    st = checkRootBlock(sendbuff, bytes, recvbuff, allBytes, root, fn, "sendbuff", "recvbuff");
  if (st.isOk())
    st = submit(comm, stream, describe(comm, Collective::Gather, count, sendbuff, recvbuff,
                                         datatype, loomSum, root, bytes, isRoot ? allBytes : 0));
  return finish(comm, st);
}

loomResult_t loomScatter(const void* sendbuff, void* recvbuff, size_t count,
                         loomDataType_t datatype, int root, loomComm_t comm, void* stream) {
  const char* fn = "loomScatter";
  size_t bytes = 0, allBytes = 0;
  Status st = prologue(comm, datatype, fn);
  if (st.isOk()) st = checkRank(root, comm->impl->nranks(), fn, "root");
  if (st.isOk()) st = checkBytes(count, 1, datatype, fn, "count", &bytes);
  if (st.isOk())
    st = checkBytes(count, comm->impl->nranks(), datatype, fn, "the input", &allBytes);
  // sendbuff is the root's alone: NCCL ignores it on the other ranks.
  const bool isRoot = st.isOk() && comm->impl->rank() == root;
  if (isRoot) st = checkBuffer(sendbuff, allBytes, fn, "sendbuff");
  if (st.isOk()) st = checkBuffer(recvbuff, bytes, fn, "recvbuff");
  if (isRoot && st.isOk())
    st = checkRootBlock(recvbuff, bytes, sendbuff, allBytes, root, fn, "recvbuff", "sendbuff");
  if (st.isOk())
    st = submit(comm, stream, describe(comm, Collective::Scatter, count, sendbuff, recvbuff,
                                         datatype, loomSum, root, isRoot ? allBytes : 0, bytes));
  return finish(comm, st);
}

static loomResult_t pointToPoint(void* buff, size_t count, loomDataType_t datatype, int peer,
                                 loomComm_t comm, void* stream, collectives::P2POp::Kind kind) {
  const char* fn = kind == collectives::P2POp::Kind::Send ? "loomSend" : "loomRecv";
  size_t bytes = 0;
  Status st = prologue(comm, datatype, fn);
  if (st.isOk()) st = checkRank(peer, comm->impl->nranks(), fn, "peer");
  if (st.isOk()) st = checkBytes(count, 1, datatype, fn, "the message", &bytes);
  if (st.isOk()) st = checkBuffer(buff, bytes, fn, "the buffer");
  if (!st.isOk()) return finish(comm, st);
  P2PCall call{{peer, kind, bytes}, buff};
  if (device::Device* dev = orderedDevice(stream, buff, nullptr)) [[unlikely]]
    return finish(comm, enqueueP2P(comm, dev, stream, call));
  return finish(comm, submitP2P(comm, call));
}

loomResult_t loomSend(const void* sendbuff, size_t count, loomDataType_t datatype, int peer,
                      loomComm_t comm, void* stream) {
  return pointToPoint(const_cast<void*>(sendbuff), count, datatype, peer, comm, stream,
                      collectives::P2POp::Kind::Send);
}

loomResult_t loomRecv(void* recvbuff, size_t count, loomDataType_t datatype, int peer,
                      loomComm_t comm, void* stream) {
  return pointToPoint(recvbuff, count, datatype, peer, comm, stream,
                      collectives::P2POp::Kind::Recv);
}

loomResult_t loomRedOpCreatePreMulSum(loomRedOp_t* op, const void* scalar,
                                      loomDataType_t datatype, loomComm_t comm) {
  const char* fn = "loomRedOpCreatePreMulSum";
  Status st = checkComm(comm, fn);
  if (st.isOk()) st = checkType(datatype, fn);
  if (st.isOk() && (op == nullptr || scalar == nullptr))
    st = errorf(loomInvalidArgument, "%s: %s is NULL", fn, op == nullptr ? "op" : "scalar");
  if (!st.isOk()) return finish(comm, st);
  std::vector<PreMulSum>& ops = comm->preMulSums;
  size_t i = 0;
  while (i < ops.size() && ops[i].live) ++i;
  if (i == ops.size()) ops.emplace_back();
  const size_t es = dtypeSize(datatype);
  ops[i].live = true;
  ops[i].dtype = datatype;
  ops[i].scalars.resize(PreMulSum::kBlock * es);
  for (size_t k = 0; k < PreMulSum::kBlock; ++k)
    memcpy(ops[i].scalars.data() + k * es, scalar, es);
  *op = loomRedOp_t(loomNumOps + int(i));
  return loomSuccess;
}

loomResult_t loomRedOpDestroy(loomRedOp_t op, loomComm_t comm) {
  const char* fn = "loomRedOpDestroy";
  Status st = checkComm(comm, fn);
  const size_t i = size_t(op) - loomNumOps;
  if (st.isOk() && (op < loomNumOps || i >= comm->preMulSums.size() || !comm->preMulSums[i].live))
    st = errorf(loomInvalidArgument,
                "%s: op %d is not a live loomRedOpCreatePreMulSum op of this communicator", fn,
                int(op));
  if (!st.isOk()) return finish(comm, st);
  comm->preMulSums[i].live = false;
  return loomSuccess;
}

// The ranks of comm but the excluded ones agree on the new communicator's unique id through
// the key-value store of comm's bootstrap root, which works after a rank died: the lowest rank
// left publishes it under a key that names the shrink and the excluded ranks, so ranks that
// pass different lists never meet (they wait for a key nobody publishes, until the deadline).
loomResult_t loomCommShrink(loomComm_t comm, const int* excludeRanks, int excludeCount,
                            loomComm_t* newcomm, const loomConfig_t* config, int flags) {
  const char* fn = "loomCommShrink";
  Status st = checkComm(comm, fn);
  if (st.isOk() && newcomm == nullptr) st = errorf(loomInvalidArgument, "%s: newcomm is NULL", fn);
  if (st.isOk() && flags != LOOM_SHRINK_DEFAULT && flags != LOOM_SHRINK_ABORT)
    st = errorf(loomInvalidArgument, "%s: flags %d (valid: LOOM_SHRINK_DEFAULT, LOOM_SHRINK_ABORT)",
                fn, flags);
  if (st.isOk() && excludeCount < 0)
    st = errorf(loomInvalidArgument, "%s: excludeCount %d is negative", fn, excludeCount);
  if (st.isOk() && excludeCount > 0 && excludeRanks == nullptr)
    st = errorf(loomInvalidArgument, "%s: excludeRanks is NULL", fn);
  if (!st.isOk()) return finish(nullptr, st);
  Comm& c = *comm->impl;
  std::vector<bool> excluded(c.nranks(), false);
  for (int i = 0; i < excludeCount && st.isOk(); ++i) {
    st = checkRank(excludeRanks[i], c.nranks(), fn, "excluded rank");
    if (st.isOk() && excluded[excludeRanks[i]])
      st = errorf(loomInvalidArgument, "%s: rank %d is excluded twice", fn, excludeRanks[i]);
    if (st.isOk()) excluded[excludeRanks[i]] = true;
  }
  if (st.isOk() && excluded[c.rank()])
    st = errorf(loomInvalidUsage, "%s: this rank (%d) is in the excluded list", fn, c.rank());
  if (st.isOk() && flags == LOOM_SHRINK_DEFAULT) {
    st = c.usable();
    if (!st.isOk()) st = st.withContext(strprintf("%s: LOOM_SHRINK_DEFAULT needs a healthy "
                                                  "communicator; LOOM_SHRINK_ABORT shrinks one "
                                                  "that failed", fn));
  }
  if (!st.isOk()) return finish(comm, st);
  *newcomm = nullptr;
  if (flags == LOOM_SHRINK_ABORT) c.revoke("shrunk with LOOM_SHRINK_ABORT");
  std::string key = strprintf("shrink/%llu/", (unsigned long long)comm->shrinks++);
  int newRank = 0, newSize = 0, first = -1;
  for (int r = 0; r < c.nranks(); ++r) {
    if (excluded[r]) continue;
    if (first < 0) first = r;
    if (r == c.rank()) newRank = newSize;
    ++newSize;
    key += std::to_string(r) + ",";
  }
  Deadline deadline(c.timeoutMs());
  std::string published;
  if (c.rank() == first) {
    loomUniqueId id;
    st = serveNewRoot(&id);  // not loomGetUniqueId: LOOM_ROOT names the parent's root
    if (!st.isOk()) return finish(comm, st.withContext(fn));
    published.assign(id.internal, sizeof(id.internal));
    st = c.bootstrap().put(key, published, deadline);
  } else {
    st = c.bootstrap().get(key, &published, deadline);
  }
  if (st.isOk() && published.size() != sizeof(loomUniqueId))
    st = errorf(loomInternalError, "%s: the published unique id has %zu bytes", fn,
                published.size());
  if (!st.isOk()) return finish(comm, st.withContext(fn));
  loomUniqueId id;
  memcpy(id.internal, published.data(), sizeof(id.internal));
  loomConfig_t inherited;
  return loomCommInitRankConfig(newcomm, newSize, id, newRank, orParents(config, c, &inherited));
}

}  // extern "C"
