// Built where NCCL's nccl.h is installed (perf/nccl.cmake): loom-perf's copy of NCCL's ABI
// (perf/nccl_api.h), which lets it call libnccl.so.2 without the header, must have NCCL's
// numbers and sizes. Nothing here runs; a difference fails loom-perf's build.
#include <nccl.h>

#include "perf/nccl_api.h"

namespace n = loom::perf::nccl;

static_assert(n::kSuccess == ncclSuccess && n::kInvalidArgument == ncclInvalidArgument);
static_assert(sizeof(n::UniqueId) == sizeof(ncclUniqueId) &&
              n::kUniqueIdBytes == NCCL_UNIQUE_ID_BYTES);
static_assert(sizeof(n::Result) == sizeof(ncclResult_t) &&
              sizeof(n::DataType) == sizeof(ncclDataType_t) &&
              sizeof(n::RedOp) == sizeof(ncclRedOp_t));

static_assert(n::kInt8 == ncclInt8 && n::kUint8 == ncclUint8 && n::kInt32 == ncclInt32 &&
              n::kUint32 == ncclUint32 && n::kInt64 == ncclInt64 && n::kUint64 == ncclUint64);
static_assert(n::kFloat16 == ncclFloat16 && n::kFloat32 == ncclFloat32 &&
              n::kFloat64 == ncclFloat64 && n::kBfloat16 == ncclBfloat16);
static_assert(n::kFloat8e4m3 == ncclFloat8e4m3 && n::kFloat8e5m2 == ncclFloat8e5m2);
static_assert(n::kSum == ncclSum && n::kProd == ncclProd && n::kMax == ncclMax &&
              n::kMin == ncclMin && n::kAvg == ncclAvg);
