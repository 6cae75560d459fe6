// MPI's predefined datatypes and ops as loom's, and which datatypes are plain bytes.
#include <cstdint>
#include <type_traits>

#include "bindings/mpi/interpose.h"

namespace loom::mpi {
namespace {

constexpr loomDataType_t kNoType = loomNumTypes;

// The loom integer type of a C integer type, by width and signedness (loom has no 16-bit
// integers).
template <typename T>
constexpr loomDataType_t integer() {
  constexpr bool s = std::is_signed_v<T>;
  switch (sizeof(T)) {
    case 1:
      return s ? loomInt8 : loomUint8;
    case 4:
      return s ? loomInt32 : loomUint32;
    case 8:
      return s ? loomInt64 : loomUint64;
    default:
      return kNoType;
  }
}

struct TypeEntry {
  MPI_Datatype mpi;
  loomDataType_t loom;
  size_t parts;  // 2: a complex number, whose parts only add
};

// Looked up by handle: MPI's predefined handles are not constants to switch on. MPI_CHAR and
// MPI_BYTE are not reduction types in MPI, and loom has no logical ops for MPI_C_BOOL.
// MPI_OFFSET stays with MPI: Open MPI 4.1 orders it as unsigned in MPI_MIN and MPI_MAX, and
// the interposer must not change an answer.
const TypeEntry kTypes[] = {
    {MPI_SIGNED_CHAR, integer<signed char>(), 1},
    {MPI_UNSIGNED_CHAR, integer<unsigned char>(), 1},
    {MPI_INT, integer<int>(), 1},
    {MPI_UNSIGNED, integer<unsigned>(), 1},
    {MPI_LONG, integer<long>(), 1},
    {MPI_UNSIGNED_LONG, integer<unsigned long>(), 1},
    {MPI_LONG_LONG, integer<long long>(), 1},
    {MPI_UNSIGNED_LONG_LONG, integer<unsigned long long>(), 1},
    {MPI_INT8_T, loomInt8, 1},
    {MPI_UINT8_T, loomUint8, 1},
    {MPI_INT32_T, loomInt32, 1},
    {MPI_UINT32_T, loomUint32, 1},
    {MPI_INT64_T, loomInt64, 1},
    {MPI_UINT64_T, loomUint64, 1},
    {MPI_AINT, integer<MPI_Aint>(), 1},
    {MPI_COUNT, integer<MPI_Count>(), 1},
    {MPI_FLOAT, loomFloat32, 1},
    {MPI_DOUBLE, loomFloat64, 1},
    {MPI_C_FLOAT_COMPLEX, loomFloat32, 2},
    {MPI_C_DOUBLE_COMPLEX, loomFloat64, 2},
};

}  // namespace

Route reduction(MPI_Datatype type, MPI_Op op, Reduction* out) {
  const TypeEntry* entry = nullptr;
  for (const TypeEntry& e : kTypes) {
    if (e.mpi == type && e.loom != kNoType) entry = &e;
  }
  if (entry == nullptr) return Route::Datatype;
  loomRedOp_t loomOp;
  if (op == MPI_SUM) loomOp = loomSum;
  else if (op == MPI_PROD) loomOp = loomProd;
  else if (op == MPI_MIN) loomOp = loomMin;
  else if (op == MPI_MAX) loomOp = loomMax;
  else return Route::Op;
  // A complex number's parts add one by one; its product, minimum and maximum do not.
  if (entry->parts > 1 && loomOp != loomSum) return Route::Op;
  int size = 0;
  PMPI_Type_size(type, &size);
  *out = {entry->loom, loomOp, entry->parts, size_t(size)};
  return Route::Loom;
}

bool dense(MPI_Datatype type, size_t* bytes) {
  if (type == MPI_DATATYPE_NULL) return false;
  int size = 0;
  MPI_Aint lb = 0, extent = 0, trueLb = 0, trueExtent = 0;
  if (PMPI_Type_size(type, &size) != MPI_SUCCESS || size <= 0) return false;
  PMPI_Type_get_extent(type, &lb, &extent);
  PMPI_Type_get_true_extent(type, &trueLb, &trueExtent);
  *bytes = size_t(size);
  return lb == 0 && trueLb == 0 && extent == size && trueExtent == size;
}

}  // namespace loom::mpi
