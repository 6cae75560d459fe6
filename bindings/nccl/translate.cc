// NCCL's enums against loom's, the binding's own error messages, and NCCL's error text.
#include <cstdarg>
#include <cstdio>
#include <string>

#include "bindings/nccl/shim.h"

namespace loom::nccl {

constexpr std::pair<ncclDataType_t, loomDataType_t> kTypePairs[] = {
    {ncclInt8, loomInt8},       {ncclUint8, loomUint8},           {ncclInt32, loomInt32},
    {ncclUint32, loomUint32},   {ncclInt64, loomInt64},           {ncclUint64, loomUint64},
    {ncclFloat16, loomFloat16}, {ncclBfloat16, loomBfloat16},     {ncclFloat32, loomFloat32},
    {ncclFloat64, loomFloat64}, {ncclFloat8e4m3, loomFloat8e4m3}, {ncclFloat8e5m2, loomFloat8e5m2},
};
static_assert(std::size(kTypePairs) == ncclNumTypes, "every NCCL datatype has a loom one");
constexpr EnumTable<ncclDataType_t, loomDataType_t, ncclNumTypes> kDataTypes(kTypePairs,
                                                                             loomNumTypes);

constexpr std::pair<ncclRedOp_t, loomRedOp_t> kOpPairs[] = {
    {ncclSum, loomSum}, {ncclProd, loomProd}, {ncclMax, loomMax},
    {ncclMin, loomMin}, {ncclAvg, loomAvg},
};
static_assert(std::size(kOpPairs) == ncclNumOps, "every NCCL op has a loom one");
constexpr EnumTable<ncclRedOp_t, loomRedOp_t, ncclNumOps> kBuiltinOps(kOpPairs, loomNumOps);

// loomTimeout becomes ncclRemoteError: a wait passes its deadline when a peer did not take its
// part in time (it died, hangs, or called something else), which is what NCCL's remote error
// tells a user to look for; frameworks' watchdogs abort the communicator on it as they should.
constexpr std::pair<loomResult_t, ncclResult_t> kResultPairs[] = {
    {loomSuccess, ncclSuccess},
    {loomInvalidArgument, ncclInvalidArgument},
    {loomInvalidUsage, ncclInvalidUsage},
    {loomSystemError, ncclSystemError},
    {loomInternalError, ncclInternalError},
    {loomRemoteError, ncclRemoteError},
    {loomTimeout, ncclRemoteError},
    {loomInProgress, ncclInProgress},
};
static_assert(std::size(kResultPairs) == loomNumResults, "every loom result has an NCCL one");
constexpr EnumTable<loomResult_t, ncclResult_t, loomNumResults> kResults(kResultPairs,
                                                                         ncclInternalError);

ncclRedOp_t toNcclOp(loomRedOp_t op) {
  for (const auto& [n, l] : kOpPairs)
    if (l == op) return n;
  return ncclRedOp_t(unsigned(op) - loomNumOps + ncclNumOps);
}

namespace {
thread_local std::string tOwnError;
}

const char* ownLastError() { return tOwnError.empty() ? nullptr : tOwnError.c_str(); }

ncclResult_t fromLoomFailure(loomResult_t r) {
  tOwnError.clear();
  return toNcclResult(r);
}

ncclResult_t fail(ncclResult_t code, const char* fmt, ...) {
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  tOwnError = text;
  loomLogInfo("API", text);
  return code;
}

ncclResult_t badType(const char* fn, ncclDataType_t t) {
  return fail(ncclInvalidArgument, "%s: unknown datatype %d (nccl.h's are 0..%d)", fn, int(t),
              ncclNumTypes - 1);
}

ncclResult_t badOp(const char* fn, ncclRedOp_t op) {
  return fail(ncclInvalidArgument,
              "%s: unknown reduction op %d (0..%d, or one from ncclRedOpCreatePreMulSum)", fn,
              int(op), ncclNumOps - 1);
}

}  // namespace loom::nccl

using namespace loom::nccl;

// Our own wording; the meaning of each code is NCCL's.
LOOM_NCCL_API(const char*, ncclGetErrorString, ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "success";
    case ncclUnhandledCudaError:
      return "a CUDA call failed";
    case ncclSystemError:
      return "the system refused a request (socket, memory, shared memory)";
    case ncclInternalError:
      return "internal error in loom's NCCL (please report it)";
    case ncclInvalidArgument:
      return "an argument is invalid (ncclGetLastError says which)";
    case ncclInvalidUsage:
      return "the call is not allowed here or not supported (ncclGetLastError says why)";
    case ncclRemoteError:
      return "a peer failed, left, aborted or did not answer in time, or the network failed";
    case ncclInProgress:
      return "still in progress (poll ncclCommGetAsyncError)";
    default:
      return "unknown result code";
  }
}

LOOM_NCCL_API(const char*, ncclGetLastError, ncclComm_t comm) {
  if (const char* own = ownLastError()) return own;
  return loomGetLastError(toLoom(comm));
}
