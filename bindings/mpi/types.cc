// MPI's predefined datatypes and ops as loom's, and which datatypes are plain bytes.
#include "bindings/mpi/interpose.h"

namespace loom::mpi {
namespace {

enum class Kind { Signed, Unsigned, Real, Complex };

struct TypeEntry {
  MPI_Datatype mpi;
  Kind kind;
};

// Looked up by handle (MPI's predefined handles are not constants to switch on); the loom
// type follows from the kind and the size MPI gives, so that C's long and Fortran's INTEGER
// map to whatever width they have here. MPI_CHAR and MPI_BYTE are not reduction types in MPI,
// and loom has no logical ops for MPI_C_BOOL or MPI_LOGICAL. MPI_OFFSET stays with MPI: Open
// MPI 4.1 orders it as unsigned in MPI_MIN and MPI_MAX, and the interposer must not change an
// answer.
const TypeEntry kTypes[] = {
    {MPI_SIGNED_CHAR, Kind::Signed},      {MPI_UNSIGNED_CHAR, Kind::Unsigned},
    {MPI_INT, Kind::Signed},              {MPI_UNSIGNED, Kind::Unsigned},
    {MPI_LONG, Kind::Signed},             {MPI_UNSIGNED_LONG, Kind::Unsigned},
    {MPI_LONG_LONG, Kind::Signed},        {MPI_UNSIGNED_LONG_LONG, Kind::Unsigned},
    {MPI_INT8_T, Kind::Signed},           {MPI_UINT8_T, Kind::Unsigned},
    {MPI_INT32_T, Kind::Signed},          {MPI_UINT32_T, Kind::Unsigned},
    {MPI_INT64_T, Kind::Signed},          {MPI_UINT64_T, Kind::Unsigned},
    {MPI_AINT, Kind::Signed},             {MPI_COUNT, Kind::Signed},
    {MPI_FLOAT, Kind::Real},              {MPI_DOUBLE, Kind::Real},
    {MPI_C_FLOAT_COMPLEX, Kind::Complex}, {MPI_C_DOUBLE_COMPLEX, Kind::Complex},
    // Fortran's, which a Fortran program's calls carry (MPI_Type_f2c of its handles).
    {MPI_INTEGER, Kind::Signed},          {MPI_INTEGER1, Kind::Signed},
    {MPI_INTEGER4, Kind::Signed},         {MPI_INTEGER8, Kind::Signed},
    {MPI_REAL, Kind::Real},               {MPI_DOUBLE_PRECISION, Kind::Real},
    {MPI_REAL4, Kind::Real},              {MPI_REAL8, Kind::Real},
    {MPI_COMPLEX, Kind::Complex},         {MPI_DOUBLE_COMPLEX, Kind::Complex},
};

// loom's type for one part (a whole number, or a complex number's real or imaginary part)
// of partBytes bytes; loomNumTypes when loom has none (16-bit integers, half and quad floats).
loomDataType_t loomType(Kind kind, size_t partBytes) {
  if (kind == Kind::Real || kind == Kind::Complex) {
    return partBytes == 4 ? loomFloat32 : partBytes == 8 ? loomFloat64 : loomNumTypes;
  }
  const bool s = kind == Kind::Signed;
  switch (partBytes) {
    case 1:
      return s ? loomInt8 : loomUint8;
    case 4:
      return s ? loomInt32 : loomUint32;
    case 8:
      return s ? loomInt64 : loomUint64;
    default:
      return loomNumTypes;
  }
}

}  // namespace

Route reduction(MPI_Datatype type, MPI_Op op, Reduction* out) {
  const TypeEntry* entry = nullptr;
  for (const TypeEntry& e : kTypes) {
    if (e.mpi == type && type != MPI_DATATYPE_NULL) entry = &e;
  }
  if (entry == nullptr) return Route::Datatype;
  int size = 0;
  PMPI_Type_size(type, &size);
  const size_t parts = entry->kind == Kind::Complex ? 2 : 1;
  const loomDataType_t loom = loomType(entry->kind, size_t(size) / parts);
  if (size <= 0 || loom == loomNumTypes) return Route::Datatype;
  loomRedOp_t loomOp;
  if (op == MPI_SUM) loomOp = loomSum;
  else if (op == MPI_PROD) loomOp = loomProd;
  else if (op == MPI_MIN) loomOp = loomMin;
  else if (op == MPI_MAX) loomOp = loomMax;
  else return Route::Op;
  // A complex number's parts add one by one; its product, minimum and maximum do not.
  if (parts > 1 && loomOp != loomSum) return Route::Op;
  *out = {loom, loomOp, parts, size_t(size)};
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
