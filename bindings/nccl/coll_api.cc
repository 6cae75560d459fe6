// NCCL's collectives, point to point, groups and reduction ops over loom's. The stream is passed
// on: loom enqueues a call on device buffers on it (docs/DEVICE.md), and runs a call on host
// buffers at once where no device is in use (complete when it returns: stronger than the stream
// order NCCL promises).
//
// Each collective has two paths. The direct one is all a call takes when its datatype and op
// are NCCL's: the enums by table, one branch, loom's call, its result (a few instructions over
// loom's own call, and no saved registers). Otherwise the checked one (cold) finds what is
// wrong and says so.
#include <cstddef>

#include "bindings/nccl/shim.h"

using namespace loom::nccl;

// The checked path's steps; each returns from the function on an error.
#define LOOM_NCCL_TYPE(fn, ncclType, loomType) \
  loomDataType_t loomType;                     \
  if (!toLoomType(ncclType, &loomType)) return badType(fn, ncclType)
#define LOOM_NCCL_OP(fn, ncclOp, loomOp) \
  loomRedOp_t loomOp;                    \
  if (!toLoomOp(ncclOp, &loomOp)) return badOp(fn, ncclOp)

// The collectives of one shape share their two paths, one instance per loom function: the
// direct path is inlined into the exported function, the checked one is a function of its own.
namespace {

// Whether a call may take the direct path (and its enums in loom's terms).
inline bool direct(ncclDataType_t t, loomDataType_t* type) {
  return toLoomType(t, type);
}
inline bool direct(ncclDataType_t t, ncclRedOp_t op, loomDataType_t* type, loomRedOp_t* lop) {
  return toLoomType(t, type) && toLoomOp(op, lop);
}

// (sendbuff, recvbuff, count, datatype, op, comm): allreduce, reduce-scatter.
template <auto Loom>
[[gnu::cold, gnu::noinline]] ncclResult_t withOpChecked(const char* fn, const void* sendbuff,
                                                        void* recvbuff, size_t count,
                                                        ncclDataType_t datatype, ncclRedOp_t op,
                                                        ncclComm_t comm, void* stream) {
  LOOM_NCCL_TYPE(fn, datatype, type);
  LOOM_NCCL_OP(fn, op, lop);
  return fromLoom(Loom(sendbuff, recvbuff, count, type, lop, toLoom(comm), stream));
}
template <auto Loom>
[[gnu::always_inline]] inline ncclResult_t withOp(const char* fn, const void* sendbuff,
                                                  void* recvbuff, size_t count,
                                                  ncclDataType_t datatype, ncclRedOp_t op,
                                                  ncclComm_t comm, void* stream) {
  loomDataType_t type;
  loomRedOp_t lop;
  if (direct(datatype, op, &type, &lop))
    return fromLoom(Loom(sendbuff, recvbuff, count, type, lop, toLoom(comm), stream));
  return withOpChecked<Loom>(fn, sendbuff, recvbuff, count, datatype, op, comm, stream);
}

// (sendbuff, recvbuff, count, datatype, comm): allgather, alltoall.
template <auto Loom>
[[gnu::cold, gnu::noinline]] ncclResult_t plainChecked(const char* fn, const void* sendbuff,
                                                       void* recvbuff, size_t count,
                                                       ncclDataType_t datatype, ncclComm_t comm, void* stream) {
  LOOM_NCCL_TYPE(fn, datatype, type);
  return fromLoom(Loom(sendbuff, recvbuff, count, type, toLoom(comm), stream));
}
template <auto Loom>
[[gnu::always_inline]] inline ncclResult_t plain(const char* fn, const void* sendbuff,
                                                 void* recvbuff, size_t count,
                                                 ncclDataType_t datatype, ncclComm_t comm, void* stream) {
  loomDataType_t type;
  if (direct(datatype, &type))
    return fromLoom(Loom(sendbuff, recvbuff, count, type, toLoom(comm), stream));
  return plainChecked<Loom>(fn, sendbuff, recvbuff, count, datatype, comm, stream);
}

// (sendbuff, recvbuff, count, datatype, root, comm): broadcast, gather, scatter.
template <auto Loom>
[[gnu::cold, gnu::noinline]] ncclResult_t rootedChecked(const char* fn,
                                                        const void* sendbuff, void* recvbuff,
                                                        size_t count, ncclDataType_t datatype,
                                                        int root, ncclComm_t comm, void* stream) {
  LOOM_NCCL_TYPE(fn, datatype, type);
  return fromLoom(Loom(sendbuff, recvbuff, count, type, root, toLoom(comm), stream));
}
template <auto Loom>
[[gnu::always_inline]] inline ncclResult_t rooted(const char* fn, const void* sendbuff,
                                                  void* recvbuff, size_t count,
                                                  ncclDataType_t datatype, int root,
                                                  ncclComm_t comm, void* stream) {
  loomDataType_t type;
  if (direct(datatype, &type))
    return fromLoom(Loom(sendbuff, recvbuff, count, type, root, toLoom(comm), stream));
  return rootedChecked<Loom>(fn, sendbuff, recvbuff, count, datatype, root, comm, stream);
}

// (buffer, count, datatype, peer, comm): send (const buffer), receive.
template <auto Loom, typename Buffer>
[[gnu::cold, gnu::noinline]] ncclResult_t p2pChecked(const char* fn, Buffer buff,
                                                     size_t count, ncclDataType_t datatype,
                                                     int peer, ncclComm_t comm, void* stream) {
  LOOM_NCCL_TYPE(fn, datatype, type);
  return fromLoom(Loom(buff, count, type, peer, toLoom(comm), stream));
}
template <auto Loom, typename Buffer>
[[gnu::always_inline]] inline ncclResult_t p2p(const char* fn, Buffer buff,
                                               size_t count, ncclDataType_t datatype, int peer,
                                               ncclComm_t comm, void* stream) {
  loomDataType_t type;
  if (direct(datatype, &type))
    return fromLoom(Loom(buff, count, type, peer, toLoom(comm), stream));
  return p2pChecked<Loom>(fn, buff, count, datatype, peer, comm, stream);
}

// ncclReduce's own shape: an op and a root.
[[gnu::cold, gnu::noinline]] ncclResult_t reduceChecked(const void* sendbuff, void* recvbuff,
                                                        size_t count, ncclDataType_t datatype,
                                                        ncclRedOp_t op, int root, ncclComm_t comm, void* stream) {
  const char* fn = "ncclReduce";
  LOOM_NCCL_TYPE(fn, datatype, type);
  LOOM_NCCL_OP(fn, op, lop);
  return fromLoom(loomReduce(sendbuff, recvbuff, count, type, lop, root, toLoom(comm), stream));
}

}  // namespace

LOOM_NCCL_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return withOp<loomAllReduce>("ncclAllReduce", sendbuff, recvbuff, count, datatype, op, comm, stream);
}

LOOM_NCCL_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff,
              size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
              cudaStream_t stream) {
  return withOp<loomReduceScatter>("ncclReduceScatter", sendbuff, recvbuff, recvcount, datatype, op,
                                   comm, stream);
}

LOOM_NCCL_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount,
              ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return plain<loomAllGather>("ncclAllGather", sendbuff, recvbuff, sendcount, datatype, comm, stream);
}

LOOM_NCCL_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return plain<loomAlltoAll>("ncclAlltoAll", sendbuff, recvbuff, count, datatype, comm, stream);
}

LOOM_NCCL_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return rooted<loomBroadcast>("ncclBroadcast", sendbuff, recvbuff, count, datatype,
                               root, comm, stream);
}

// The in-place broadcast of NCCL's older API.
LOOM_NCCL_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root,
              ncclComm_t comm, cudaStream_t stream) {
  return rooted<loomBroadcast>("ncclBcast", buff, buff, count, datatype, root,
                               comm, stream);
}

LOOM_NCCL_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return rooted<loomGather>("ncclGather", sendbuff, recvbuff, count, datatype, root,
                            comm, stream);
}

LOOM_NCCL_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return rooted<loomScatter>("ncclScatter", sendbuff, recvbuff, count, datatype, root,
                             comm, stream);
}

LOOM_NCCL_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype,
              int peer, ncclComm_t comm, cudaStream_t stream) {
  return p2p<loomSend>("ncclSend", sendbuff, count, datatype, peer, comm, stream);
}

LOOM_NCCL_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype,
              int peer, ncclComm_t comm, cudaStream_t stream) {
  return p2p<loomRecv>("ncclRecv", recvbuff, count, datatype, peer, comm, stream);
}

LOOM_NCCL_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count,
              ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  loomDataType_t type;
  loomRedOp_t lop;
  if (direct(datatype, op, &type, &lop))
    return fromLoom(loomReduce(sendbuff, recvbuff, count, type, lop, root, toLoom(comm), stream));
  return reduceChecked(sendbuff, recvbuff, count, datatype, op, root, comm, stream);
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
