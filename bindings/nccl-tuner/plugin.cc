// NCCL's tuner plugin over loom's model of NCCL's algorithms (include/loom/loom_nccl_model.h):
// the const structs ncclTunerPlugin_v2 .. _v5 that NCCL looks up in libnccl-tuner-loom.so (or
// in the net plugin library, which links these objects too). docs/NCCL_PLUGINS.md, "Tuner
// plugin", says what NCCL gets.
#include <atomic>
#include <cstdio>
#include <new>

#include "loom/loom_nccl_model.h"
#include "tuner_abi.h"

namespace {

using namespace nccl_tuner_abi;

constexpr int kBuckets = 65;  // one "logged" flag per function and power-of-two size

struct Context {
  loomNcclModel_t model = nullptr;
  DebugLogger log = nullptr;
  // Each function's first call of each size bucket is logged (NCCL_DEBUG_SUBSYS=TUNING), the
  // rest not: getCollInfo runs on every collective.
  std::atomic<bool> logged[LOOM_NCCL_NUM_FUNCTIONS][kBuckets] = {};
};

// NCCL's logger takes a format; without one (a caller that passes none), stderr for warnings.
#define TUNER_LOG(log, level, flags, ...)                                             \
  do {                                                                               \
    if ((log) != nullptr) (log)((level), (flags), __FILE__, __LINE__, __VA_ARGS__);  \
    else if ((level) == kLogWarn) fprintf(stderr, __VA_ARGS__), fputc('\n', stderr);      \
  } while (0)

Result fromLoom(loomResult_t r) {
  return r == loomSuccess ? kSuccess : r == loomInvalidArgument ? kInvalidArgument : kInternalError;
}

Result initContext(size_t nRanks, size_t nNodes, DebugLogger log, void** context) {
  if (context == nullptr) {
    TUNER_LOG(log, kLogWarn, kLogAll, "loom tuner: init without a context pointer");
    return kInvalidArgument;
  }
  *context = nullptr;
  auto* ctx = new (std::nothrow) Context;
  if (ctx == nullptr) return kInternalError;
  ctx->log = log;
  const loomResult_t r = loomNcclModelCreate(nRanks, nNodes, &ctx->model);
  if (r != loomSuccess) {
    TUNER_LOG(log, kLogWarn, kLogAll, "loom tuner: %s", loomGetLastError(nullptr));
    delete ctx;
    return fromLoom(r);
  }
  TUNER_LOG(log, kLogInfo, kLogInit | kLogTuning, "loom tuner: model %s",
            loomNcclModelDescription(ctx->model));
  *context = ctx;
  return kSuccess;
}

// The model's answer for one call; `known` false for NCCL's functions that are not tuned
// (send/recv, alltoall...), which are left to NCCL.
struct Answer {
  float costs[LOOM_NCCL_NUM_ALGORITHMS][LOOM_NCCL_NUM_PROTOCOLS];
  int channels = 0;
  bool known = false;
};

Result modelCosts(Context* ctx, int collType, size_t nBytes, Answer* out) {
  if (ctx == nullptr) return kInvalidArgument;
  if (collType < 0 || collType >= kNumFuncs) {
    TUNER_LOG(ctx->log, kLogWarn, kLogAll, "loom tuner: getCollInfo: collType %d is not one of "
              "NCCL's functions (0..%d)", collType, kNumFuncs - 1);
    return kInvalidArgument;
  }
  if (collType >= LOOM_NCCL_NUM_FUNCTIONS) return kSuccess;
  out->known = true;
  return fromLoom(loomNcclModelCosts(ctx->model, collType, nBytes, out->costs, &out->channels));
}

// The model's channels go with its own algorithms (Ring, Tree, PAT); NCCL's keep NCCL's. The
// choice is logged once per function and size bucket.
void finishChoice(Context* ctx, int collType, size_t nBytes, int algo, int proto, float cost,
                  int channels, int* nChannels) {
  if (algo == kAlgoRing || algo == kAlgoTree || algo == kAlgoPat) *nChannels = channels;
  channels = *nChannels;
  const int bucket = nBytes == 0 ? 0 : 64 - __builtin_clzll(nBytes);
  if (ctx->log == nullptr || ctx->logged[collType][bucket].load(std::memory_order_relaxed)) return;
  ctx->logged[collType][bucket].store(true, std::memory_order_relaxed);
  static const char* algos[] = {"Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"};
  static const char* protos[] = {"LL", "LL128", "Simple"};
  static const char* funcs[] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"};
  if (algo < 0) {
    ctx->log(kLogInfo, kLogTuning, __FILE__, __LINE__,
             "loom tuner: %s %zu bytes: no entry NCCL allows, left to NCCL", funcs[collType], nBytes);
    return;
  }
  ctx->log(kLogInfo, kLogTuning, __FILE__, __LINE__,
           "loom tuner: %s %zu bytes: %s/%s %.2f us, %d channels", funcs[collType], nBytes,
           algos[algo], protos[proto], double(cost), channels);
}

// v3..v5: writes the model's cost into every entry NCCL left open (>= 0) that the model prices,
// leaves the others as they are, and sets the channels where the cheapest entry is the model's
// Ring, Tree or PAT.
Result fillTable(void* context, int collType, size_t nBytes, float** collCostTable, int numAlgo,
                 int numProto, int* nChannels) {
  auto* ctx = static_cast<Context*>(context);
  if (ctx != nullptr && (collCostTable == nullptr || nChannels == nullptr || numAlgo <= 0 ||
                         numProto <= 0)) {
    TUNER_LOG(ctx->log, kLogWarn, kLogAll, "loom tuner: getCollInfo: %s",
              collCostTable == nullptr ? "the cost table is NULL"
              : nChannels == nullptr   ? "nChannels is NULL"
                                       : "the cost table has no entries");
    return kInvalidArgument;
  }
  Answer answer;
  const Result r = modelCosts(ctx, collType, nBytes, &answer);
  if (r != kSuccess || !answer.known) return r;
  // NCCL's table is float[numAlgo][numProto], passed as float**: not an array of pointers.
  float* table = reinterpret_cast<float*>(collCostTable);
  const int algos = numAlgo < kNumAlgorithms ? numAlgo : kNumAlgorithms;
  const int protos = numProto < kNumProtocols ? numProto : kNumProtocols;
  int bestAlgo = -1, bestProto = -1;
  float best = 0;
  for (int a = 0; a < algos; ++a)
    for (int p = 0; p < protos; ++p) {
      float& entry = table[a * numProto + p];
      if (entry < 0) continue;  // NCCL_ALGO_PROTO_IGNORE: NCCL cannot use it here
      if (answer.costs[a][p] >= 0) entry = answer.costs[a][p];
      if (bestAlgo < 0 || entry < best) best = entry, bestAlgo = a, bestProto = p;
    }
  finishChoice(ctx, collType, nBytes, bestAlgo, bestProto, best, answer.channels, nChannels);
  return kSuccess;
}

Result getCollInfoV2(void* context, int collType, size_t nBytes, int collNetSupport,
                     int nvlsSupport, int /*numPipeOps*/, int* algorithm, int* protocol,
                     int* nChannels) {
  auto* ctx = static_cast<Context*>(context);
  if (ctx != nullptr && (algorithm == nullptr || protocol == nullptr || nChannels == nullptr)) {
    TUNER_LOG(ctx->log, kLogWarn, kLogAll, "loom tuner: getCollInfo (v2): a result pointer is NULL");
    return kInvalidArgument;
  }
  Answer answer;
  const Result r = modelCosts(ctx, collType, nBytes, &answer);
  if (r != kSuccess || !answer.known) return r;
  const auto& costs = answer.costs;
  // v2 has no table: the cheapest of the model's entries that this communicator supports.
  int bestAlgo = -1, bestProto = -1;
  for (int a = 0; a < kNumAlgorithms; ++a) {
    if (!nvlsSupport && (a == kAlgoNvls || a == kAlgoNvlsTree)) continue;
    if (!collNetSupport && (a == kAlgoCollNetDirect || a == kAlgoCollNetChain)) continue;
    for (int p = 0; p < kNumProtocols; ++p)
      if (costs[a][p] >= 0 && (bestAlgo < 0 || costs[a][p] < costs[bestAlgo][bestProto]))
        bestAlgo = a, bestProto = p;
  }
  if (bestAlgo < 0) return kSuccess;
  *algorithm = bestAlgo;
  *protocol = bestProto;
  finishChoice(ctx, collType, nBytes, bestAlgo, bestProto, costs[bestAlgo][bestProto],
               answer.channels, nChannels);
  return kSuccess;
}

Result getCollInfoV3(void* context, int collType, size_t nBytes, int /*numPipeOps*/,
                     float** collCostTable, int numAlgo, int numProto, int* nChannels) {
  return fillTable(context, collType, nBytes, collCostTable, numAlgo, numProto, nChannels);
}

Result getCollInfoV4(void* context, int collType, size_t nBytes, int /*numPipeOps*/,
                     float** collCostTable, int numAlgo, int numProto, int /*regBuff*/,
                     int* nChannels) {
  return fillTable(context, collType, nBytes, collCostTable, numAlgo, numProto, nChannels);
}

Result initV5(void** context, uint64_t /*commId*/, size_t nRanks, size_t nNodes,
              DebugLogger log, NvlDomainInfoV5* /*nvlDomainInfo*/,
              TunerConstantsV5* /*constants*/) {
  // NCCL's own constants are left as they are: the plugin prices the entries instead.
  return initContext(nRanks, nNodes, log, context);
}

Result destroy(void* context) {
  auto* ctx = static_cast<Context*>(context);
  if (ctx == nullptr) return kSuccess;
  loomNcclModelDestroy(ctx->model);
  delete ctx;
  return kSuccess;
}

}  // namespace

#define LOOM_EXPORT __attribute__((visibility("default")))

extern "C" {
LOOM_EXPORT extern const TunerV2 ncclTunerPlugin_v2;
LOOM_EXPORT extern const TunerV3 ncclTunerPlugin_v3;
LOOM_EXPORT extern const TunerV4 ncclTunerPlugin_v4;
LOOM_EXPORT extern const TunerV5 ncclTunerPlugin_v5;

const TunerV2 ncclTunerPlugin_v2 = {"loom", initContext, getCollInfoV2, destroy};
const TunerV3 ncclTunerPlugin_v3 = {"loom", initContext, getCollInfoV3, destroy};
const TunerV4 ncclTunerPlugin_v4 = {"loom", initContext, getCollInfoV4, destroy};
const TunerV5 ncclTunerPlugin_v5 = {"loom", initV5, getCollInfoV4, destroy};
}
