// NCCL's C API as loom-perf --api nccl calls it: loom's drop-in libnccl.so.2, opened with
// dlopen and its functions resolved into a table, so that loom-perf builds and runs without
// NCCL's headers or any libnccl.so.2 (--api nccl then says the library is absent).
//
// The types and numbers below are NCCL 2.28's ABI (nccl.h) as far as loom-perf uses it;
// perf/nccl_header_check.cc compares them with the header wherever loom's library is built.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <utility>

#include "loom/loom.h"

namespace loom::perf::nccl {

using Result = int;  // ncclResult_t
constexpr Result kSuccess = 0;
constexpr Result kInvalidArgument = 4;

struct Comm;  // struct ncclComm: ncclComm_t is Comm*

constexpr size_t kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
struct UniqueId {
  char internal[kUniqueIdBytes];
};

// ncclDataType_t's numbers (nccl.h), which are not loom's: NCCL has float32 at 7 and bfloat16
// at 9, loom bfloat16 at 7 and float32 at 8.
enum DataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
  kFloat8e4m3 = 10,
  kFloat8e5m2 = 11,
};
// ncclRedOp_t's built-in ops: NCCL has max at 2 and min at 3, loom the other way round.
enum RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };

/** NCCL's number for each of loom's datatypes and ops, by name; -1 for a value loom does not
 *  define, which the library refuses. Tables: they are read in the timed loop. */
template <typename From, typename To, int N>
constexpr std::array<To, N> enumTable(std::initializer_list<std::pair<From, To>> pairs) {
  std::array<To, N> table{};
  table.fill(To(-1));
  for (const auto& [from, to] : pairs) table[size_t(from)] = to;
  return table;
}
inline constexpr auto kDataTypeOf = enumTable<loomDataType_t, DataType, loomNumTypes>({
    {loomInt8, kInt8},       {loomUint8, kUint8},           {loomInt32, kInt32},
    {loomUint32, kUint32},   {loomInt64, kInt64},           {loomUint64, kUint64},
    {loomFloat16, kFloat16}, {loomBfloat16, kBfloat16},     {loomFloat32, kFloat32},
    {loomFloat64, kFloat64}, {loomFloat8e4m3, kFloat8e4m3}, {loomFloat8e5m2, kFloat8e5m2},
});
inline constexpr auto kRedOpOf = enumTable<loomRedOp_t, RedOp, loomNumOps>({
    {loomSum, kSum}, {loomProd, kProd}, {loomMin, kMin}, {loomMax, kMax}, {loomAvg, kAvg},
});
inline DataType toNccl(loomDataType_t t) {
  return unsigned(t) < unsigned(loomNumTypes) ? kDataTypeOf[t] : DataType(-1);
}
inline RedOp toNccl(loomRedOp_t op) {
  return unsigned(op) < unsigned(loomNumOps) ? kRedOpOf[op] : RedOp(-1);
}

/** The functions loom-perf calls, with NCCL's signatures (a cudaStream_t is a void*; loom-perf
 *  passes null: loom's call has completed when it returns). */
struct Api {
  Result (*getVersion)(int* version);
  Result (*getUniqueId)(UniqueId* id);
  Result (*commInitRank)(Comm** comm, int nranks, UniqueId id, int rank);
  Result (*commDestroy)(Comm* comm);
  Result (*commAbort)(Comm* comm);
  Result (*commCount)(const Comm* comm, int* count);
  Result (*commUserRank)(const Comm* comm, int* rank);
  const char* (*getErrorString)(Result result);
  const char* (*getLastError)(Comm* comm);
  Result (*allReduce)(const void* send, void* recv, size_t count, DataType type, RedOp op,
                      Comm* comm, void* stream);
  Result (*allGather)(const void* send, void* recv, size_t sendcount, DataType type, Comm* comm,
                      void* stream);
  Result (*reduceScatter)(const void* send, void* recv, size_t recvcount, DataType type, RedOp op,
                          Comm* comm, void* stream);
  Result (*alltoAll)(const void* send, void* recv, size_t count, DataType type, Comm* comm,
                     void* stream);
  Result (*broadcast)(const void* send, void* recv, size_t count, DataType type, int root,
                      Comm* comm, void* stream);
  Result (*reduce)(const void* send, void* recv, size_t count, DataType type, RedOp op, int root,
                   Comm* comm, void* stream);
  Result (*gather)(const void* send, void* recv, size_t count, DataType type, int root, Comm* comm,
                   void* stream);
  Result (*scatter)(const void* send, void* recv, size_t count, DataType type, int root, Comm* comm,
                    void* stream);
  Result (*send)(const void* send, size_t count, DataType type, int peer, Comm* comm, void* stream);
  Result (*recv)(void* recv, size_t count, DataType type, int peer, Comm* comm, void* stream);
  Result (*groupStart)();
  Result (*groupEnd)();
  Result (*memAlloc)(void** ptr, size_t size);
  Result (*memFree)(void* ptr);

  std::string path;         // the file opened
  int ncclVersion = 0;      // ncclGetVersion's code (22809 for 2.28.9)
  std::string loomVersion;  // of the libloom.so it runs on, "X.Y.Z"
};

/** The library --api nccl opens: LOOM_NCCL_LIBRARY when set, else the libnccl.so.2 built with
 *  loom-perf (known at configure time) where it exists, else "libnccl.so.2" by the loader's
 *  search. */
std::string libraryToOpen();

/** Opens libraryToOpen(), checks that it is loom's (it loads libloom.so: loomGetVersion is in
 *  its dependencies) and resolves every function of Api. False, with why in *error, when the
 *  library is absent, not loom's, or lacks a function. */
bool openApi(Api* api, std::string* error);

}  // namespace loom::perf::nccl
