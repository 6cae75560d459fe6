// NCCL's tuner plugin ABI (versions 2 to 5), declared here from its documented layouts
// (docs/NCCL_PLUGINS.md, "Tuner plugin"), with their sizes and offsets checked: the plugin and
// its harness are compiled against these, not against NCCL's headers. NCCL passes enums as
// ints; its result codes are ncclResult_t's.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nccl_tuner_abi {

using Result = int;  // ncclResult_t
constexpr Result kSuccess = 0, kInternalError = 3, kInvalidArgument = 4, kInvalidUsage = 5;

// ncclDebugLogLevel and the subsystem flags the plugin logs under.
constexpr int kLogWarn = 2, kLogInfo = 3;
constexpr unsigned long kLogInit = 1, kLogTuning = 64, kLogAll = ~0ul;
using DebugLogger = void (*)(int level, unsigned long flags, const char* file, int line,
                             const char* fmt, ...);

constexpr int kNumAlgorithms = 7, kNumProtocols = 3;
constexpr int kAlgoTree = 0, kAlgoRing = 1, kAlgoCollNetDirect = 2, kAlgoCollNetChain = 3,
              kAlgoNvls = 4, kAlgoNvlsTree = 5, kAlgoPat = 6;
constexpr int kNumFuncs = 11;  // ncclFunc_t's values: 0..4 tunable, 5..10 not (SendRecv ...)
constexpr float kIgnore = -1.0f;  // NCCL_ALGO_PROTO_IGNORE

struct TunerV2 {
  const char* name;
  Result (*init)(size_t nRanks, size_t nNodes, DebugLogger logFunction, void** context);
  Result (*getCollInfo)(void* context, int collType, size_t nBytes, int collNetSupport,
                        int nvlsSupport, int numPipeOps, int* algorithm, int* protocol,
                        int* nChannels);
  Result (*destroy)(void* context);
};

// v3 and v4: the cost table, float[kNumAlgorithms][kNumProtocols] row-major, passed as float**.
struct TunerV3 {
  const char* name;
  Result (*init)(size_t nRanks, size_t nNodes, DebugLogger logFunction, void** context);
  Result (*getCollInfo)(void* context, int collType, size_t nBytes, int numPipeOps,
                        float** collCostTable, int numAlgo, int numProto, int* nChannels);
  Result (*destroy)(void* context);
};

struct TunerV4 {
  const char* name;
  Result (*init)(size_t nRanks, size_t nNodes, DebugLogger logFunction, void** context);
  Result (*getCollInfo)(void* context, int collType, size_t nBytes, int numPipeOps,
                        float** collCostTable, int numAlgo, int numProto, int regBuff,
                        int* nChannels);
  Result (*destroy)(void* context);
};

struct NvlDomainInfoV5 {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
};

// NCCL core's layout (1152 bytes); its ext-tuner example's copy stops before the last member.
struct TunerConstantsV5 {
  double baseLatencies[7][3];
  double hwLatencies[3][7][3];
  double llMaxBws[4][3];
  double perChMaxRingLL128Bws[4][3];
  double perChMaxTreeLL128Bws[4][3];
  double perChMaxTreeBws[4][3];
  double perChMaxNVLSTreeBws[4][3];
};

struct TunerV5 {
  const char* name;
  Result (*init)(void** context, uint64_t commId, size_t nRanks, size_t nNodes,
                 DebugLogger logFunction, NvlDomainInfoV5* nvlDomainInfo,
                 TunerConstantsV5* constants);
  Result (*getCollInfo)(void* context, int collType, size_t nBytes, int numPipeOps,
                        float** collCostTable, int numAlgo, int numProto, int regBuff,
                        int* nChannels);
  Result (*finalize)(void* context);
};

static_assert(sizeof(TunerV2) == 32 && offsetof(TunerV2, getCollInfo) == 16 &&
              offsetof(TunerV2, destroy) == 24);
static_assert(sizeof(TunerV3) == 32 && offsetof(TunerV3, getCollInfo) == 16);
static_assert(sizeof(TunerV4) == 32 && offsetof(TunerV4, getCollInfo) == 16);
static_assert(sizeof(TunerV5) == 32 && offsetof(TunerV5, init) == 8 &&
              offsetof(TunerV5, finalize) == 24);
static_assert(sizeof(NvlDomainInfoV5) == 12);
static_assert(sizeof(TunerConstantsV5) == 1152 && offsetof(TunerConstantsV5, hwLatencies) == 168 &&
              offsetof(TunerConstantsV5, llMaxBws) == 672 &&
              offsetof(TunerConstantsV5, perChMaxNVLSTreeBws) == 1056);

}  // namespace nccl_tuner_abi
