// NCCL's communicator functions over loom's: ids, init, split, shrink, teardown, queries.
#include <cstring>
#include <mutex>

#include "bindings/nccl/shim.h"

namespace loom::nccl {

void noteCommunicatorCreated() {
  static std::once_flag once;
  std::call_once(once, [] {
    int v = 0;
    (void)loomGetVersion(&v);
    char line[128];
    snprintf(line, sizeof(line), "loom %d.%d.%d standing in for NCCL %d.%d.%d%s", v / 10000,
             v / 100 % 100, v % 100, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, NCCL_SUFFIX);
    loomLogInfo("INIT", line);
  });
}

namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(loomUniqueId), "both ids are 128 opaque bytes");
loomUniqueId toLoom(const ncclUniqueId& id) {
  loomUniqueId out;
  memcpy(out.internal, id.internal, sizeof(out.internal));
  return out;
}

// What every init and split ends with: the result, and on the first communicator the version
// line. An init that is still in progress made its communicator.
ncclResult_t created(loomResult_t r) {
  if (r == loomSuccess || r == loomInProgress) noteCommunicatorCreated();
  return fromLoom(r);
}

ncclResult_t initRank(const char* fn, ncclComm_t* comm, int nranks, const ncclUniqueId& id,
                      int rank, const ncclConfig_t* config) {
  loomConfig_t cfg;
  if (ncclResult_t r = readConfig(config, fn, &cfg); r != ncclSuccess) return r;
  return created(loomCommInitRankConfig(toLoomStorage(comm), nranks, toLoom(id), rank, &cfg));
}

}  // namespace
}  // namespace loom::nccl

using namespace loom::nccl;

LOOM_NCCL_API(ncclResult_t, ncclGetVersion, int* version) {
  if (version == nullptr) return fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;  // the NCCL this library stands in for: frameworks check it
  return ncclSuccess;
}

LOOM_NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  loomUniqueId id;
  loomResult_t r = loomGetUniqueId(&id);
  if (r == loomSuccess) memcpy(uniqueId->internal, id.internal, sizeof(id.internal));
  return fromLoom(r);
}

LOOM_NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* comm, int nranks,
              ncclUniqueId commId, int rank, ncclConfig_t* config) {
  return initRank("ncclCommInitRankConfig", comm, nranks, commId, rank, config);
}

LOOM_NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t* comm, int nranks, ncclUniqueId commId,
              int rank) {
  return initRank("ncclCommInitRank", comm, nranks, commId, rank, nullptr);
}

// Every rank passes the same ids; NCCL spreads its bootstrap over several roots, loom's one
// root serves all ranks, so the first id is the communicator's.
LOOM_NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank,
              int nId, ncclUniqueId* commIds, ncclConfig_t* config) {
  const char* fn = "ncclCommInitRankScalable";
  if (nId < 1) return fail(ncclInvalidArgument, "%s: nId is %d; it must be at least 1", fn, nId);
  if (commIds == nullptr) return fail(ncclInvalidArgument, "%s: commIds is NULL", fn);
  return initRank(fn, newcomm, nranks, commIds[0], myrank, config);
}

// ndev ranks in this process, made in one group (loom runs the inits of a group one thread
// each). devlist names CUDA devices, which loom's host ranks do not use.
LOOM_NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comm, int ndev, const int* devlist) {
  (void)devlist;
  const char* fn = "ncclCommInitAll";
  if (comm == nullptr) return fail(ncclInvalidArgument, "%s: comm is NULL", fn);
  if (ndev < 1) return fail(ncclInvalidArgument, "%s: ndev is %d; it must be at least 1", fn, ndev);
  loomUniqueId id;
  if (loomResult_t r = loomGetUniqueId(&id); r != loomSuccess) return fromLoom(r);
  loomResult_t first = loomGroupStart();
  for (int i = 0; i < ndev && first == loomSuccess; ++i)
    first = loomCommInitRankConfig(toLoomStorage(&comm[i]), ndev, id, i, nullptr);
  const loomResult_t end = loomGroupEnd();
  return created(first != loomSuccess ? first : end);
}

// Loom's calls have completed when they return: nothing is left to flush.
LOOM_NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  int count = 0;
  return fromLoom(loomCommCount(toLoom(comm), &count));
}

LOOM_NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  const loomResult_t r = loomCommDestroy(toLoom(comm));
  if (r == loomSuccess) dropRegistrations(comm);
  return fromLoom(r);
}

LOOM_NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  const loomResult_t r = loomCommAbort(toLoom(comm));
  if (r == loomSuccess) dropRegistrations(comm);
  return fromLoom(r);
}

LOOM_NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  if (revokeFlags != NCCL_REVOKE_DEFAULT)
    return fail(ncclInvalidArgument,
                "ncclCommRevoke: revokeFlags is %d; it must be "
                "NCCL_REVOKE_DEFAULT (%d)",
                revokeFlags, NCCL_REVOKE_DEFAULT);
  return fromLoom(loomCommRevoke(toLoom(comm)));
}

// A NULL config inherits from the parent as loom's split and shrink do (its deadline).
LOOM_NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
              ncclConfig_t* config) {
  const char* fn = "ncclCommSplit";
  loomConfig_t cfg;
  if (ncclResult_t r = readConfig(config, fn, &cfg); r != ncclSuccess) return r;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return fail(ncclInvalidArgument, "%s: color is %d; it must be >= 0 or NCCL_SPLIT_NOCOLOR", fn,
                color);
  const int loomColor = color == NCCL_SPLIT_NOCOLOR ? LOOM_SPLIT_NOCOLOR : color;
  return created(loomCommSplit(toLoom(comm), loomColor, key, toLoomStorage(newcomm),
                               config != nullptr ? &cfg : nullptr));
}

LOOM_NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList,
              int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  const char* fn = "ncclCommShrink";
  loomConfig_t cfg;
  if (ncclResult_t r = readConfig(config, fn, &cfg); r != ncclSuccess) return r;
  int flags;
  if (shrinkFlags == NCCL_SHRINK_DEFAULT)
    flags = LOOM_SHRINK_DEFAULT;
  else if (shrinkFlags == NCCL_SHRINK_ABORT)
    flags = LOOM_SHRINK_ABORT;
  else
    return fail(ncclInvalidArgument,
                "%s: shrinkFlags is %d; it must be NCCL_SHRINK_DEFAULT or "
                "NCCL_SHRINK_ABORT",
                fn, shrinkFlags);
  return created(loomCommShrink(toLoom(comm), excludeRanksList, excludeRanksCount,
                                toLoomStorage(newcomm), config != nullptr ? &cfg : nullptr,
                                flags));
}

LOOM_NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError) {
  if (asyncError == nullptr)
    return fail(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  loomResult_t e = loomSuccess;
  const loomResult_t r = loomCommGetAsyncError(toLoom(comm), &e);
  if (r == loomSuccess) *asyncError = toNcclResult(e);
  return fromLoom(r);
}

LOOM_NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  return fromLoom(loomCommCount(toLoom(comm), count));
}

LOOM_NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  return fromLoom(loomCommUserRank(toLoom(comm), rank));
}

LOOM_NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  (void)comm;
  (void)device;
  return fail(ncclInvalidUsage,
              "ncclCommCuDevice: loom's communicators run on the host and "
              "have no CUDA device");
}

LOOM_NCCL_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  return fromLoom(loomMemAlloc(ptr, size));  // host memory the host's ranks map for each other
}

LOOM_NCCL_API(ncclResult_t, ncclMemFree, void* ptr) { return fromLoom(loomMemFree(ptr)); }

// NCCL re-reads NCCL_DEBUG here; loom reads its log settings once per process.
LOOM_NCCL_API(void, ncclResetDebugInit, void) {}
extern "C" __attribute__((visibility("default"))) void ncclResetDebugInitInternal(void) {}
