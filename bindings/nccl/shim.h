// What the drop-in libnccl.so.2's sources share: the export macro, the translation between
// NCCL's enums and loom's (tables, never casts: the values differ), the binding's own error
// messages.
#pragma once

#include <nccl.h>

#include <atomic>
#include <cstddef>
#include <utility>

#include "loom/loom.h"

// Defines pnccl<name> (strong) with ncclX a weak alias of it, as NCCL itself exports them: a
// profiler may define ncclX and call pncclX. Both are declared again here with the signature
// of the definition, so a signature that differs from nccl.h's is a compile error.
#define LOOM_NCCL_API(ret, name, ...)                                     \
  extern "C" __attribute__((visibility("default"))) ret name(__VA_ARGS__) \
      __attribute__((weak, alias("p" #name)));                            \
  extern "C" __attribute__((visibility("default"))) ret p##name(__VA_ARGS__)

namespace loom::nccl {

// Communicator handles are loom's own, passed through: loom's check of a live handle then
// answers a destroyed or bogus ncclComm_t too.
inline loomComm_t toLoom(ncclComm_t comm) { return reinterpret_cast<loomComm_t>(comm); }
// Where loom may fill the caller's handle later (an init inside a group runs at its end), loom
// is given the caller's own storage.
inline loomComm_t* toLoomStorage(ncclComm_t* comm) { return reinterpret_cast<loomComm_t*>(comm); }
static_assert(sizeof(ncclComm_t) == sizeof(loomComm_t));

// A table from one enum to another, indexed by the source's value, built from a list of
// pairs so that each correspondence is written once; `invalid` fills what no pair names.
template <typename From, typename To, int N>
struct EnumTable {
  To to[N];
  template <size_t P>
  constexpr EnumTable(const std::pair<From, To> (&pairs)[P], To invalid) : to{} {
    for (int i = 0; i < N; ++i) to[i] = invalid;
    for (const auto& p : pairs) to[int(p.first)] = p.second;
  }
};

// NCCL's datatypes in loom's terms; loomNumTypes for a value nccl.h does not define.
extern const EnumTable<ncclDataType_t, loomDataType_t, ncclNumTypes> kDataTypes;
// The built-in reduction ops.
extern const EnumTable<ncclRedOp_t, loomRedOp_t, ncclNumOps> kBuiltinOps;
// Loom's results in NCCL's terms.
extern const EnumTable<loomResult_t, ncclResult_t, loomNumResults> kResults;

inline bool toLoomType(ncclDataType_t t, loomDataType_t* out) {
  if (unsigned(t) >= unsigned(ncclNumTypes)) return false;
  *out = kDataTypes.to[t];
  return true;
}

// Built-in ops by the table; ops made by ncclRedOpCreatePreMulSum are numbered from
// ncclNumOps up here and from loomNumOps up in loom, in the same order.
static_assert(int(loomNumOps) <= int(ncclNumOps), "a dynamic op must fit loom's range");
inline bool toLoomOp(ncclRedOp_t op, loomRedOp_t* out) {
  const unsigned u = unsigned(op);
  if (u < unsigned(ncclNumOps))
    *out = kBuiltinOps.to[u];
  else if (u <= unsigned(ncclMaxRedOp))
    *out = loomRedOp_t(u - ncclNumOps + loomNumOps);
  else
    return false;
  return true;
}
// The reverse, for the ops loom makes (loomRedOpCreatePreMulSum).
ncclRedOp_t toNcclOp(loomRedOp_t op);

// Loom's result in NCCL's terms.
inline ncclResult_t toNcclResult(loomResult_t r) {
  return unsigned(r) < unsigned(loomNumResults) ? kResults.to[r] : ncclInternalError;
}
// A failed loom call's result in NCCL's terms; it makes loom's message the last error again.
[[gnu::cold]] ncclResult_t fromLoomFailure(loomResult_t r);
inline ncclResult_t fromLoom(loomResult_t r) {
  if (__builtin_expect(r == loomSuccess, 1)) return ncclSuccess;
  return fromLoomFailure(r);
}

// Fails a call in the binding itself: the message (printf-style, starting with the function's
// name) becomes what ncclGetLastError returns on this thread until a loom call fails.
[[gnu::cold]] ncclResult_t fail(ncclResult_t code, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
// The binding's message of the last call it failed on this thread, or NULL.
const char* ownLastError();

[[gnu::cold]] ncclResult_t badType(const char* fn, ncclDataType_t t);
[[gnu::cold]] ncclResult_t badOp(const char* fn, ncclRedOp_t op);

// NCCL's config (NULL: defaults) as loom's: checked as NCCL checks it, with the fields loom
// has no use for ignored (config.cc says which and why).
ncclResult_t readConfig(const ncclConfig_t* in, const char* fn, loomConfig_t* out);

// Frees the registrations and windows of a communicator that was destroyed or aborted.
void dropRegistrations(ncclComm_t comm);

// Logs loom's version the first time a communicator is made.
void noteCommunicatorCreated();


}  // namespace loom::nccl
