// The C API: argument checks with clear messages, handles, groups, and the error text.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>

#include "comm/comm.h"
#include "comm/info.h"
#include "base/dtype.h"
#include "base/log.h"
#include "base/params.h"
#include "loom/loom.h"
#include "transports/shm/user_memory.h"

struct loomComm {
  std::unique_ptr<loom::Comm> impl;
};

namespace loom {
namespace {

using collectives::Collective;

thread_local std::string tLastError;

// Live handles, so a call with a destroyed (or never created) communicator gets a clear error
// instead of a crash. Every removal bumps the generation; a thread remembers the last handle
// it found live and the generation then, so its next call on that handle (the common case)
// needs no lock: nothing was destroyed since if the generation is the same.
std::mutex gCommsMutex;
std::set<const loomComm*> gComms;
std::atomic<uint64_t> gCommsGeneration{0};
// Read on every call: the initial-exec model makes each read one %fs-relative load instead of
// a call to __tls_get_addr (~4% of a 1-rank 8-byte call); 20 bytes of static TLS.
#define LOOM_HOT_TLS __attribute__((tls_model("initial-exec")))
thread_local const loomComm* tLastLive LOOM_HOT_TLS = nullptr;
thread_local uint64_t tLastLiveGeneration LOOM_HOT_TLS = 0;

// isLive's look-up under the lock; out of line, so that the test before it inlines.
[[gnu::noinline]] bool isLiveLocked(const loomComm* c) {
  std::lock_guard<std::mutex> g(gCommsMutex);
  if (gComms.count(c) == 0) return false;
  tLastLive = c;
  tLastLiveGeneration = gCommsGeneration.load(std::memory_order_relaxed);
  return true;
}

bool isLive(const loomComm* c) {
  if (c == tLastLive && tLastLiveGeneration == gCommsGeneration.load(std::memory_order_acquire))
    return true;
  return isLiveLocked(c);
}

void forget(const loomComm* c) {
  std::lock_guard<std::mutex> g(gCommsMutex);
  gComms.erase(c);
  gCommsGeneration.fetch_add(1, std::memory_order_release);
}

loomResult_t finish(loomComm_t comm, const Status& st) {
  if (st.isOk()) return loomSuccess;
  tLastError = st.message();
  if (comm != nullptr && isLive(comm)) comm->impl->setLastError(st.message());
  LOOM_INFO("API", "%s: %s", loomGetErrorString(st.code()), st.message().c_str());
  return st.code();
}

inline Status checkComm(const loomComm* comm, const char* fn) {
  if (comm == nullptr) return errorf(loomInvalidArgument, "%s: comm is NULL", fn);
  if (!isLive(comm))
    return errorf(loomInvalidUsage,
                  "%s: the communicator was destroyed (or never created); it cannot be used",
                  fn);
  return Status::ok();
}

inline Status checkStream(void* stream, const char* fn) {
  if (stream != nullptr)
    return errorf(loomInvalidUsage,
                  "%s: stream-ordered (device) calls are not supported yet; pass stream = NULL "
                  "with host buffers for a synchronous call",
                  fn);
  return Status::ok();
}

inline Status checkType(int dtype, const char* fn) {
  if (!validDtype(dtype))
    return errorf(loomInvalidArgument, "%s: unknown datatype %d (valid: 0..%d)", fn, dtype,
                  loomNumTypes - 1);
  return Status::ok();
}

inline Status checkOp(int op, const char* fn) {
  if (!validOp(op))
    return errorf(loomInvalidArgument, "%s: unknown reduction op %d (valid: 0..%d)", fn, op,
                  loomNumOps - 1);
  return Status::ok();
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

inline Status checkRank(int r, int nranks, const char* fn, const char* what) {
  if (r < 0 || r >= nranks)
    return errorf(loomInvalidArgument, "%s: %s %d is out of range (communicator has %d ranks)",
                  fn, what, r, nranks);
  return Status::ok();
}

// Calls queued between GroupStart and GroupEnd.
struct GroupItem {
  loomComm* comm;
  bool p2p;
  P2PCall p2pCall;
  CallDesc coll;
};
thread_local int tGroupDepth LOOM_HOT_TLS = 0;
thread_local std::vector<GroupItem> tGroup;

Status submitCollective(loomComm* comm, CallDesc& call) {
  if (tGroupDepth > 0) {
    tGroup.push_back({comm, false, {}, call});
    return Status::ok();
  }
  return comm->impl->runCollective(call);
}

// The shared front half of every collective: comm, stream, dtype checks. Inline: it is the
// start of every call, and its checks are a few compares.
inline Status prologue(loomComm* comm, loomDataType_t dtype, void* stream, const char* fn) {
  LOOM_TRY(checkComm(comm, fn));
  LOOM_TRY(checkStream(stream, fn));
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

loomResult_t loomCommGetLastAlgorithm(loomComm_t comm, const char** algorithm) {
  Status st = checkComm(comm, "loomCommGetLastAlgorithm");
  if (st.isOk() && algorithm == nullptr)
    st = errorf(loomInvalidArgument, "loomCommGetLastAlgorithm: algorithm is NULL");
  if (!st.isOk()) return finish(nullptr, st);
  *algorithm = comm->impl->lastAlgorithm();
  return loomSuccess;
}

const char* loomGetLastError(loomComm_t comm) {
  if (comm != nullptr && isLive(comm)) return comm->impl->lastError();
  return tLastError.c_str();
}

loomResult_t loomGetVersion(int* version) {
  if (version == nullptr)
    return finish(nullptr, errorf(loomInvalidArgument, "loomGetVersion: version is NULL"));
  *version = LOOM_VERSION_CODE;
  return loomSuccess;
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
  net::Address addr;
  std::string ifname;
  Status st = net::chooseInterfaceAddress(&addr, &ifname);
  unsigned char secret[16];
  if (st.isOk()) st = randomSecret(secret);
  if (st.isOk()) st = startBootstrapRoot(addr, secret, uniqueId);
  return finish(nullptr, st);
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
  std::unique_ptr<Comm> impl;
  st = Comm::create(nranks, commId, rank, config, &impl);
  if (!st.isOk())
    return finish(nullptr, st.withContext(strprintf("loomCommInitRank (rank %d of %d)", rank,
                                                    nranks)));
  auto* handle = new loomComm{std::move(impl)};
  {
    std::lock_guard<std::mutex> g(gCommsMutex);
    gComms.insert(handle);
  }
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
                "loomCommInitFromEnv: no rendezvous address (set LOOM_ROOT=host:port, or "
                "MASTER_ADDR and MASTER_PORT)");
  if (!st.isOk()) return finish(nullptr, st);
  net::Address addr;
  st = net::parseAddress(root, &addr);
  if (!st.isOk()) return finish(nullptr, st.withContext("loomCommInitFromEnv"));
  // Without a channel to share a random secret, it is derived from what every rank sees.
  std::string basis = root + "/" + std::to_string(size);
  for (const char* job : {"TORCHELASTIC_RUN_ID", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID"})
    if (const char* v = getenv(job)) basis += std::string("/") + v;
  unsigned char secret[16] = {};
  for (size_t i = 0; i < basis.size(); ++i) secret[i % 16] = secret[i % 16] * 31 + basis[i];
  loomUniqueId id;
  if (rank == 0) {
    st = startBootstrapRoot(addr, secret, &id);
    if (!st.isOk()) return finish(nullptr, st.withContext("loomCommInitFromEnv: rank 0"));
  } else {
    UniqueIdData data = {};
    data.magic = kUniqueIdMagic;
    data.addrLen = addr.len;
    memcpy(data.addr, &addr.storage, addr.len);
    memcpy(data.secret, secret, 16);
    memset(&id, 0, sizeof(id));
    memcpy(id.internal, &data, sizeof(data));
  }
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
    loomResult_t rc = loomGetUniqueId(&id);
    if (rc != loomSuccess) return finish(comm, Status(rc, tLastError));
    published.assign(id.internal, sizeof(id.internal));
  }
  st = c.bootstrap().allgather(published, &all, deadline);
  if (!st.isOk()) return finish(comm, st.withContext("loomCommSplit"));
  if (color < 0) return loomSuccess;  // LOOM_SPLIT_NOCOLOR: this rank joins no group
  loomUniqueId id;
  memcpy(id.internal, all[members[0].second].data(), sizeof(id.internal));
  return loomCommInitRankConfig(newcomm, int(members.size()), id, newRank, config);
}

loomResult_t loomCommDestroy(loomComm_t comm) {
  Status st = checkComm(comm, "loomCommDestroy");
  if (!st.isOk()) return finish(nullptr, st);
  forget(comm);
  comm->impl->leave();
  delete comm;
  return loomSuccess;
}

loomResult_t loomCommAbort(loomComm_t comm) {
  Status st = checkComm(comm, "loomCommAbort");
  if (!st.isOk()) return finish(nullptr, st);
  forget(comm);
  comm->impl->abortPeers("the communicator was aborted by the application");
  comm->impl->leave();
  delete comm;
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
  Status st = checkComm(comm, "loomCommGetAsyncError");
  if (st.isOk() && asyncError == nullptr)
    st = errorf(loomInvalidArgument, "loomCommGetAsyncError: asyncError is NULL");
  if (!st.isOk()) return finish(nullptr, st);
  *asyncError = comm->impl->asyncError();
  return loomSuccess;
}

loomResult_t loomAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                           void* stream) {
  const char* fn = "loomAllReduce";
  size_t bytes = 0;
  Status st = prologue(comm, datatype, stream, fn);
  if (st.isOk()) st = checkOp(op, fn);
  if (st.isOk()) st = checkBytes(count, 1, datatype, fn, "a buffer", &bytes);
  if (st.isOk()) st = checkBuffer(sendbuff, bytes, fn, "sendbuff");
  if (st.isOk()) st = checkBuffer(recvbuff, bytes, fn, "recvbuff");
  if (st.isOk())
    st = submitCollective(comm, describe(comm, Collective::AllReduce, count, sendbuff, recvbuff,
                                         datatype, op, 0, bytes, bytes));
  return finish(comm, st);
}

loomResult_t loomBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           loomDataType_t datatype, int root, loomComm_t comm, void* stream) {
  const char* fn = "loomBroadcast";
  size_t bytes = 0;
  Status st = prologue(comm, datatype, stream, fn);
  if (st.isOk()) st = checkRank(root, comm->impl->nranks(), fn, "root");
  if (st.isOk()) st = checkBytes(count, 1, datatype, fn, "a buffer", &bytes);
  if (st.isOk() && comm->impl->rank() == root) st = checkBuffer(sendbuff, bytes, fn, "sendbuff");
  if (st.isOk()) st = checkBuffer(recvbuff, bytes, fn, "recvbuff");
  if (st.isOk())
    st = submitCollective(comm, describe(comm, Collective::Broadcast, count, sendbuff, recvbuff,
                                         datatype, loomSum, root,
                                         comm->impl->rank() == root ? bytes : 0, bytes));
  return finish(comm, st);
}

loomResult_t loomReduce(const void* sendbuff, void* recvbuff, size_t count,
                        loomDataType_t datatype, loomRedOp_t op, int root, loomComm_t comm,
                        void* stream) {
  const char* fn = "loomReduce";
  size_t bytes = 0;
  Status st = prologue(comm, datatype, stream, fn);
  if (st.isOk()) st = checkOp(op, fn);
  if (st.isOk()) st = checkRank(root, comm->impl->nranks(), fn, "root");
  if (st.isOk()) st = checkBytes(count, 1, datatype, fn, "a buffer", &bytes);
  if (st.isOk()) st = checkBuffer(sendbuff, bytes, fn, "sendbuff");
  bool isRoot = st.isOk() && comm->impl->rank() == root;
  if (st.isOk() && isRoot) st = checkBuffer(recvbuff, bytes, fn, "recvbuff");
  if (st.isOk())
    st = submitCollective(comm, describe(comm, Collective::Reduce, count, sendbuff, recvbuff,
                                         datatype, op, root, bytes, isRoot ? bytes : 0));
  return finish(comm, st);
}

loomResult_t loomAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           loomDataType_t datatype, loomComm_t comm, void* stream) {
  const char* fn = "loomAllGather";
  size_t inBytes = 0, outBytes = 0;
  Status st = prologue(comm, datatype, stream, fn);
  if (st.isOk()) st = checkBytes(sendcount, 1, datatype, fn, "sendcount", &inBytes);
  if (st.isOk())
    st = checkBytes(sendcount, comm->impl->nranks(), datatype, fn, "the output", &outBytes);
  if (st.isOk()) st = checkBuffer(sendbuff, inBytes, fn, "sendbuff");
  if (st.isOk()) st = checkBuffer(recvbuff, outBytes, fn, "recvbuff");
  if (st.isOk())
    st = submitCollective(comm, describe(comm, Collective::AllGather, sendcount, sendbuff,
                                         recvbuff, datatype, loomSum, 0, inBytes, outBytes));
  return finish(comm, st);
}

loomResult_t loomReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                               void* stream) {
  const char* fn = "loomReduceScatter";
  size_t inBytes = 0, outBytes = 0;
  Status st = prologue(comm, datatype, stream, fn);
  if (st.isOk()) st = checkOp(op, fn);
  if (st.isOk()) st = checkBytes(recvcount, 1, datatype, fn, "recvcount", &outBytes);
  if (st.isOk())
    st = checkBytes(recvcount, comm->impl->nranks(), datatype, fn, "the input", &inBytes);
  if (st.isOk()) st = checkBuffer(sendbuff, inBytes, fn, "sendbuff");
  if (st.isOk()) st = checkBuffer(recvbuff, outBytes, fn, "recvbuff");
  if (st.isOk())
    st = submitCollective(comm, describe(comm, Collective::ReduceScatter, recvcount, sendbuff,
                                         recvbuff, datatype, op, 0, inBytes, outBytes));
  return finish(comm, st);
}

loomResult_t loomAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          loomDataType_t datatype, loomComm_t comm, void* stream) {
  const char* fn = "loomAlltoAll";
  size_t bytes = 0;
  Status st = prologue(comm, datatype, stream, fn);
  if (st.isOk()) st = checkBytes(count, comm->impl->nranks(), datatype, fn, "a buffer", &bytes);
  if (st.isOk()) st = checkBuffer(sendbuff, bytes, fn, "sendbuff");
  if (st.isOk()) st = checkBuffer(recvbuff, bytes, fn, "recvbuff");
  if (st.isOk())
    st = submitCollective(comm, describe(comm, Collective::AlltoAll, count, sendbuff, recvbuff,
                                         datatype, loomSum, 0, bytes, bytes));
  return finish(comm, st);
}

loomResult_t loomAlltoAllv(const void* sendbuff, const size_t sendcounts[],
                           const size_t sdispls[], void* recvbuff, const size_t recvcounts[],
                           const size_t rdispls[], loomDataType_t datatype, loomComm_t comm,
                           void* stream) {
  const char* fn = "loomAlltoAllv";
  Status st = prologue(comm, datatype, stream, fn);
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
      st = submitCollective(comm, d);
    }
  }
  return finish(comm, st);
}

static loomResult_t pointToPoint(void* buff, size_t count, loomDataType_t datatype, int peer,
                                 loomComm_t comm, void* stream, collectives::P2POp::Kind kind) {
  const char* fn = kind == collectives::P2POp::Kind::Send ? "loomSend" : "loomRecv";
  size_t bytes = 0;
  Status st = prologue(comm, datatype, stream, fn);
  if (st.isOk()) st = checkRank(peer, comm->impl->nranks(), fn, "peer");
  if (st.isOk()) st = checkBytes(count, 1, datatype, fn, "the message", &bytes);
  if (st.isOk()) st = checkBuffer(buff, bytes, fn, "the buffer");
  if (!st.isOk()) return finish(comm, st);
  P2PCall call{{peer, kind, bytes}, buff};
  if (tGroupDepth > 0) {
    tGroup.push_back({comm, true, call, {}});
    return loomSuccess;
  }
  return finish(comm, comm->impl->runP2P({call}));
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

loomResult_t loomGroupStart(void) {
  ++tGroupDepth;
  return loomSuccess;
}

loomResult_t loomGroupEnd(void) {
  if (tGroupDepth == 0)
    return finish(nullptr, errorf(loomInvalidUsage, "loomGroupEnd without loomGroupStart"));
  if (--tGroupDepth > 0) return loomSuccess;
  // The lists below are cleared rather than freed (the group's items go back to tGroup at the
  // end), so that a loop of like groups, a send/receive exchange per step, allocates nothing.
  thread_local std::vector<GroupItem> items;
  thread_local std::vector<loomComm*> comms;
  thread_local std::vector<P2PCall> p2p;
  items.clear();
  items.swap(tGroup);
  // Per communicator, in order of first appearance: its sends and receives together as one
  // plan (so any order of calls completes), then its collectives in call order.
  comms.clear();
  for (const GroupItem& it : items)
    if (std::find(comms.begin(), comms.end(), it.comm) == comms.end()) comms.push_back(it.comm);
  for (loomComm* c : comms) {
    Status st = checkComm(c, "loomGroupEnd");
    if (!st.isOk()) return finish(nullptr, st);
    p2p.clear();
    for (const GroupItem& it : items)
      if (it.comm == c && it.p2p) p2p.push_back(it.p2pCall);
    if (!p2p.empty()) {
      st = c->impl->runP2P(p2p);
      if (!st.isOk()) return finish(c, st.withContext("loomGroupEnd"));
    }
    for (GroupItem& it : items) {
      if (it.comm != c || it.p2p) continue;
      st = c->impl->runCollective(it.coll);
      if (!st.isOk()) return finish(c, st.withContext("loomGroupEnd"));
    }
  }
  items.clear();
  items.swap(tGroup);  // tGroup is empty: it takes the capacity
  return loomSuccess;
}

// Declared in loom.h; each is built in its own change.
static loomResult_t notBuiltYet(const char* fn) {
  return finish(nullptr, errorf(loomInvalidUsage, "%s is not built yet", fn));
}
loomResult_t loomCommShrink(loomComm_t, const int*, int, loomComm_t*, const loomConfig_t*, int) {
  return notBuiltYet("loomCommShrink");
}
loomResult_t loomCommRevoke(loomComm_t) { return notBuiltYet("loomCommRevoke"); }
loomResult_t loomRedOpCreatePreMulSum(loomRedOp_t*, const void*, loomDataType_t, loomComm_t) {
  return notBuiltYet("loomRedOpCreatePreMulSum");
}
loomResult_t loomRedOpDestroy(loomRedOp_t, loomComm_t) { return notBuiltYet("loomRedOpDestroy"); }
loomResult_t loomGather(const void*, void*, size_t, loomDataType_t, int, loomComm_t, void*) {
  return notBuiltYet("loomGather");
}
loomResult_t loomScatter(const void*, void*, size_t, loomDataType_t, int, loomComm_t, void*) {
  return notBuiltYet("loomScatter");
}
loomResult_t loomGroupSimulateEnd(float*) { return notBuiltYet("loomGroupSimulateEnd"); }

}  // extern "C"
