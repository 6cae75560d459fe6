// Facts about data types and reduction ops shared by every layer.
#pragma once

#include <cstddef>

#include "loom/loom.h"

namespace loom {

inline bool validDtype(int d) { return d >= 0 && d < loomNumTypes; }
inline bool validOp(int op) { return op >= 0 && op < loomNumOps; }

inline size_t dtypeSize(loomDataType_t d) {
  switch (d) {
    case loomInt8: case loomUint8: case loomFloat8e4m3: case loomFloat8e5m2: return 1;
    case loomFloat16: case loomBfloat16: return 2;
    case loomInt32: case loomUint32: case loomFloat32: return 4;
    case loomInt64: case loomUint64: case loomFloat64: return 8;
    default: return 0;
  }
}

const char* dtypeName(loomDataType_t d);  // nccl-tests spelling: "float", "half", "bfloat16"...
const char* opName(loomRedOp_t op);       // "sum", "prod", "min", "max", "avg"

}  // namespace loom
