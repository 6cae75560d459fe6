// Built with loom's libnccl.so.2, against the nccl.h it is compiled against (perf/nccl.cmake):
// loom-perf's copy of NCCL's ABI (perf/nccl_api.h), which lets it call libnccl.so.2 without the
// header, must have NCCL's numbers and sizes. Nothing here runs; a difference fails the build.
#include <nccl.h>

#include "perf/nccl_api.h"

namespace n = loom::perf::nccl;

namespace {
constexpr bool same(int ours, int ncclValue) { return ours == ncclValue; }
}  // namespace

static_assert(same(n::kSuccess, ncclSuccess) && same(n::kInvalidArgument, ncclInvalidArgument));
static_assert(sizeof(n::UniqueId) == sizeof(ncclUniqueId) &&
              n::kUniqueIdBytes == NCCL_UNIQUE_ID_BYTES);
static_assert(sizeof(n::Result) == sizeof(ncclResult_t) &&
              sizeof(n::DataType) == sizeof(ncclDataType_t) &&
              sizeof(n::RedOp) == sizeof(ncclRedOp_t));

static_assert(same(n::kInt8, ncclInt8) && same(n::kUint8, ncclUint8) &&
              same(n::kInt32, ncclInt32) && same(n::kUint32, ncclUint32) &&
              same(n::kInt64, ncclInt64) && same(n::kUint64, ncclUint64));
static_assert(same(n::kFloat16, ncclFloat16) && same(n::kFloat32, ncclFloat32) &&
              same(n::kFloat64, ncclFloat64) && same(n::kBfloat16, ncclBfloat16));
static_assert(same(n::kFloat8e4m3, ncclFloat8e4m3) && same(n::kFloat8e5m2, ncclFloat8e5m2));
static_assert(same(n::kSum, ncclSum) && same(n::kProd, ncclProd) && same(n::kMax, ncclMax) &&
              same(n::kMin, ncclMin) && same(n::kAvg, ncclAvg));
