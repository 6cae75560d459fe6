// NCCL's collectives, point to point, groups and reduction ops over loom's. The stream is not
// passed on: loom's call has completed when it returns, which is stronger than the stream
// order NCCL promises.
//
// Each collective has two paths. The direct one is all a call takes when its datatype and op
// are NCCL's and no CUDA device can exist: the enums by table, one branch, loom's call, its
// result (a few instructions over loom's own call, and no saved registers). Otherwise the
// checked one (cold) finds what is wrong and says so, refuses device buffers, and else makes
// the same call.
#include <cstddef>

#include "bindings/nccl/shim.h"

using namespace loom::nccl;

namespace {

inline bool direct(ncclDataType_t t, loomDataType_t* type) {
  return toLoomType(t, type) && !mayHoldDeviceMemory();
}
inline bool direct(ncclDataType_t t, ncclRedOp_t op, loomDataType_t* type, loomRedOp_t* lop) {
  return toLoomType(t, type) && toLoomOp(op, lop) && !mayHoldDeviceMemory();
}

}  // namespace

// The checked path's steps; each returns from the function on an error.
#define LOOM_NCCL_TYPE(fn, ncclType, loomType) \
  loomDataType_t loomType;                     \
  if (!toLoomType(ncclType, &loomType)) return badType(fn, ncclType)
#define LOOM_NCCL_OP(fn, ncclOp, loomOp) \
  loomRedOp_t loomOp;                    \
  if (!toLoomOp(ncclOp, &loomOp)) return badOp(fn, ncclOp)
#define LOOM_NCCL_HOST_BUFFERS(fn, ...)                                                    \
  if (ncclResult_t refused = refuseDeviceBuffers(fn, __VA_ARGS__); refused != ncclSuccess) \
  return refused

namespace {

[[gnu::cold, gnu::noinline]] ncclResult_t allReduceChecked(const void* sendbuff, void* recvbuff,
                                                           size_t count, ncclDataType_t datatype,
                                                           ncclRedOp_t op, ncclComm_t comm) {
  const char* fn = "ncclAllReduce";
  LOOM_NCCL_TYPE(fn, datatype, type);
  LOOM_NCCL_OP(fn, op, lop);
  LOOM_NCCL_HOST_BUFFERS(fn, "sendbuff", sendbuff, "recvbuff", recvbuff);
  return fromLoom(loomAllReduce(sendbuff, recvbuff, count, type, lop, toLoom(comm), nullptr));
}

[[gnu::cold, gnu::noinline]] ncclResult_t broadcastChecked(const char* fn, const void* sendbuff,
                                                           void* recvbuff, size_t count,
                                                           ncclDataType_t datatype, int root,
                                                           ncclComm_t comm) {
  LOOM_NCCL_TYPE(fn, datatype, type);
  if (sendbuff == recvbuff) {
    LOOM_NCCL_HOST_BUFFERS(fn, "buff", recvbuff);
  } else {
    LOOM_NCCL_HOST_BUFFERS(fn, "sendbuff", sendbuff, "recvbuff", recvbuff);
  }
  return fromLoom(loomBroadcast(sendbuff, recvbuff, count, type, root, toLoom(comm), nullptr));
}

[[gnu::cold, gnu::noinline]] ncclResult_t reduceChecked(const void* sendbuff, void* recvbuff,
                                                        size_t count, ncclDataType_t datatype,
                                                        ncclRedOp_t op, int root, ncclComm_t comm) {
  const char* fn = "ncclReduce";
  LOOM_NCCL_TYPE(fn, datatype, type);
  LOOM_NCCL_OP(fn, op, lop);
  LOOM_NCCL_HOST_BUFFERS(fn, "sendbuff", sendbuff, "recvbuff", recvbuff);
  return fromLoom(loomReduce(sendbuff, recvbuff, count, type, lop, root, toLoom(comm), nullptr));
}

[[gnu::cold, gnu::noinline]] ncclResult_t allGatherChecked(const void* sendbuff, void* recvbuff,
                                                           size_t sendcount,
                                                           ncclDataType_t datatype,
                                                           ncclComm_t comm) {
  const char* fn = "ncclAllGather";
  LOOM_NCCL_TYPE(fn, datatype, type);
  LOOM_NCCL_HOST_BUFFERS(fn, "sendbuff", sendbuff, "recvbuff", recvbuff);
  return fromLoom(loomAllGather(sendbuff, recvbuff, sendcount, type, toLoom(comm), nullptr));
}

[[gnu::cold, gnu::noinline]] ncclResult_t reduceScatterChecked(const void* sendbuff, void* recvbuff,
                                                               size_t recvcount,
                                                               ncclDataType_t datatype,
                                                               ncclRedOp_t op, ncclComm_t comm) {
  const char* fn = "ncclReduceScatter";
  LOOM_NCCL_TYPE(fn, datatype, type);
  LOOM_NCCL_OP(fn, op, lop);
  LOOM_NCCL_HOST_BUFFERS(fn, "sendbuff", sendbuff, "recvbuff", recvbuff);
  return fromLoom(
      loomReduceScatter(sendbuff, recvbuff, recvcount, type, lop, toLoom(comm), nullptr));
}

[[gnu::cold, gnu::noinline]] ncclResult_t alltoAllChecked(const void* sendbuff, void* recvbuff,
                                                          size_t count, ncclDataType_t datatype,
                                                          ncclComm_t comm) {
  const char* fn = "ncclAlltoAll";
  LOOM_NCCL_TYPE(fn, datatype, type);
  LOOM_NCCL_HOST_BUFFERS(fn, "sendbuff", sendbuff, "recvbuff", recvbuff);
  return fromLoom(loomAlltoAll(sendbuff, recvbuff, count, type, toLoom(comm), nullptr));
}

[[gnu::cold, gnu::noinline]] ncclResult_t gatherChecked(const void* sendbuff, void* recvbuff,
                                                        size_t count, ncclDataType_t datatype,
                                                        int root, ncclComm_t comm) {
  const char* fn = "ncclGather";
  LOOM_NCCL_TYPE(fn, datatype, type);
  LOOM_NCCL_HOST_BUFFERS(fn, "sendbuff", sendbuff, "recvbuff", recvbuff);
  return fromLoom(loomGather(sendbuff, recvbuff, count, type, root, toLoom(comm), nullptr));
}

[[gnu::cold, gnu::noinline]] ncclResult_t scatterChecked(const void* sendbuff, void* recvbuff,
                                                         size_t count, ncclDataType_t datatype,
                                                         int root, ncclComm_t comm) {
  const char* fn = "ncclScatter";
  LOOM_NCCL_TYPE(fn, datatype, type);
  LOOM_NCCL_HOST_BUFFERS(fn, "sendbuff", sendbuff, "recvbuff", recvbuff);
  return fromLoom(loomScatter(sendbuff, recvbuff, count, type, root, toLoom(comm), nullptr));
}

[[gnu::cold, gnu::noinline]] ncclResult_t sendChecked(const void* sendbuff, size_t count,
                                                      ncclDataType_t datatype, int peer,
                                                      ncclComm_t comm) {
  const char* fn = "ncclSend";
  LOOM_NCCL_TYPE(fn, datatype, type);
  LOOM_NCCL_HOST_BUFFERS(fn, "sendbuff", sendbuff);
  return fromLoom(loomSend(sendbuff, count, type, peer, toLoom(comm), nullptr));
}

[[gnu::cold, gnu::noinline]] ncclResult_t recvChecked(void* recvbuff, size_t count,
                                                      ncclDataType_t datatype, int peer,
                                                      ncclComm_t comm) {
  const char* fn = "ncclRecv";
  LOOM_NCCL_TYPE(fn, datatype, type);
  LOOM_NCCL_HOST_BUFFERS(fn, "recvbuff", recvbuff);
  return fromLoom(loomRecv(recvbuff, count, type, peer, toLoom(comm), nullptr));
}

}  // namespace

LOOM_NCCL_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  loomDataType_t type;
  loomRedOp_t lop;
  if (direct(datatype, op, &type, &lop))
    return fromLoom(loomAllReduce(sendbuff, recvbuff, count, type, lop, toLoom(comm), nullptr));
  return allReduceChecked(sendbuff, recvbuff, count, datatype, op, comm);
}

LOOM_NCCL_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t) {
  loomDataType_t type;
  if (direct(datatype, &type))
    return fromLoom(loomBroadcast(sendbuff, recvbuff, count, type, root, toLoom(comm), nullptr));
  return broadcastChecked("ncclBroadcast", sendbuff, recvbuff, count, datatype, root, comm);
}

// The in-place broadcast of NCCL's older API.
LOOM_NCCL_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root,
              ncclComm_t comm, cudaStream_t) {
  loomDataType_t type;
  if (direct(datatype, &type))
    return fromLoom(loomBroadcast(buff, buff, count, type, root, toLoom(comm), nullptr));
  return broadcastChecked("ncclBcast", buff, buff, count, datatype, root, comm);
}

LOOM_NCCL_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t) {
  loomDataType_t type;
  loomRedOp_t lop;
  if (direct(datatype, op, &type, &lop))
    return fromLoom(loomReduce(sendbuff, recvbuff, count, type, lop, root, toLoom(comm), nullptr));
  return reduceChecked(sendbuff, recvbuff, count, datatype, op, root, comm);
}

LOOM_NCCL_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount,
              ncclDataType_t datatype, ncclComm_t comm, cudaStream_t) {
  loomDataType_t type;
  if (direct(datatype, &type))
    return fromLoom(loomAllGather(sendbuff, recvbuff, sendcount, type, toLoom(comm), nullptr));
  return allGatherChecked(sendbuff, recvbuff, sendcount, datatype, comm);
}

LOOM_NCCL_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff,
              size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
              cudaStream_t) {
  loomDataType_t type;
  loomRedOp_t lop;
  if (direct(datatype, op, &type, &lop))
    return fromLoom(
        loomReduceScatter(sendbuff, recvbuff, recvcount, type, lop, toLoom(comm), nullptr));
  return reduceScatterChecked(sendbuff, recvbuff, recvcount, datatype, op, comm);
}

LOOM_NCCL_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, ncclComm_t comm, cudaStream_t) {
  loomDataType_t type;
  if (direct(datatype, &type))
    return fromLoom(loomAlltoAll(sendbuff, recvbuff, count, type, toLoom(comm), nullptr));
  return alltoAllChecked(sendbuff, recvbuff, count, datatype, comm);
}

LOOM_NCCL_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t) {
  loomDataType_t type;
  if (direct(datatype, &type))
    return fromLoom(loomGather(sendbuff, recvbuff, count, type, root, toLoom(comm), nullptr));
  return gatherChecked(sendbuff, recvbuff, count, datatype, root, comm);
}

LOOM_NCCL_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t) {
  loomDataType_t type;
  if (direct(datatype, &type))
    return fromLoom(loomScatter(sendbuff, recvbuff, count, type, root, toLoom(comm), nullptr));
  return scatterChecked(sendbuff, recvbuff, count, datatype, root, comm);
}

LOOM_NCCL_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype,
              int peer, ncclComm_t comm, cudaStream_t) {
  loomDataType_t type;
  if (direct(datatype, &type))
    return fromLoom(loomSend(sendbuff, count, type, peer, toLoom(comm), nullptr));
  return sendChecked(sendbuff, count, datatype, peer, comm);
}

LOOM_NCCL_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype,
              int peer, ncclComm_t comm, cudaStream_t) {
  loomDataType_t type;
  if (direct(datatype, &type))
    return fromLoom(loomRecv(recvbuff, count, type, peer, toLoom(comm), nullptr));
  return recvChecked(recvbuff, count, datatype, peer, comm);
}

LOOM_NCCL_API(ncclResult_t, ncclGroupStart, void) { return fromLoom(loomGroupStart()); }

LOOM_NCCL_API(ncclResult_t, ncclGroupEnd, void) { return fromLoom(loomGroupEnd()); }

// The group ends (running nothing) even when simInfo is refused, so that the caller's calls
// are not left queued in a group it cannot close.
LOOM_NCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo) {
  const char* fn = "ncclGroupSimulateEnd";
  float estimatedUs = 0;
  const loomResult_t r = loomGroupSimulateEnd(&estimatedUs);
  const ncclSimInfo_t reference = NCCL_SIM_INFO_INITIALIZER;
  if (simInfo == nullptr) return fail(ncclInvalidArgument, "%s: simInfo is NULL", fn);
  if (simInfo->size < offsetof(ncclSimInfo_t, estimatedTime) + sizeof(float))
    return fail(ncclInvalidArgument,
                "%s: simInfo->size is %zu, too small for an ncclSimInfo_t "
                "(initialise it with NCCL_SIM_INFO_INITIALIZER)",
                fn, simInfo->size);
  if (simInfo->magic != reference.magic)
    return fail(ncclInvalidArgument,
                "%s: simInfo->magic is 0x%x, not 0x%x: it was not "
                "initialised with NCCL_SIM_INFO_INITIALIZER",
                fn, simInfo->magic, reference.magic);
  if (r == loomSuccess) simInfo->estimatedTime = estimatedUs;  // microseconds, as NCCL's
  return fromLoom(r);
}

// The scalar is read now, so it must be in host memory; NCCL's device-resident scalar is read
// by a GPU kernel at each call, which loom's host communicators cannot do.
LOOM_NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar,
              ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm) {
  const char* fn = "ncclRedOpCreatePreMulSum";
  if (op == nullptr) return fail(ncclInvalidArgument, "%s: op is NULL", fn);
  if (residence == ncclScalarDevice)
    return fail(ncclInvalidUsage,
                "%s: the scalar is device-resident (ncclScalarDevice); loom's "
                "communicators run on the host: pass ncclScalarHostImmediate",
                fn);
  if (residence != ncclScalarHostImmediate)
    return fail(ncclInvalidArgument, "%s: unknown scalar residence %d", fn, int(residence));
  LOOM_NCCL_TYPE(fn, datatype, type);
  loomRedOp_t lop;
  const loomResult_t r = loomRedOpCreatePreMulSum(&lop, scalar, type, toLoom(comm));
  if (r == loomSuccess) *op = toNcclOp(lop);
  return fromLoom(r);
}

LOOM_NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  LOOM_NCCL_OP("ncclRedOpDestroy", op, lop);
  return fromLoom(loomRedOpDestroy(lop, toLoom(comm)));
}
