// The C API of loom's model of NCCL's algorithms (include/loom/loom_nccl_model.h) over
// tuner/nccl_model.h.
#include <cstdio>
#include <memory>
#include <string>

#include "comm/handle.h"
#include "loom/loom_nccl_model.h"
#include "tuner/nccl_model.h"

static_assert(LOOM_NCCL_NUM_ALGORITHMS == loom::tuner::nccl::kAlgorithms &&
              LOOM_NCCL_NUM_PROTOCOLS == loom::tuner::nccl::kProtocols &&
              LOOM_NCCL_NUM_FUNCTIONS == loom::tuner::nccl::kFunctions);

struct loomNcclModel {
  explicit loomNcclModel(const loom::tuner::nccl::ClusterFacts& facts) : model(facts) {}
  loom::tuner::nccl::Model model;
  std::string description;
};

namespace {

std::string describe(const loom::tuner::nccl::ClusterFacts& f) {
  char text[512];
  snprintf(text, sizeof text,
           "%s: %d ranks on %d nodes; within a node %.0f GB/s, %.2f us (%s%s); between nodes "
           "%.0f GB/s per node, %.2f us",
           f.source.c_str(), f.ranks, f.nodes, f.intraBandwidth / 1e9, f.intraLatency * 1e6,
           f.nvlink ? "nvlink" : "pcie/memory", f.nvswitch ? ", NVSwitch: NVLS" : "",
           f.netBandwidth / 1e9, f.netLatency * 1e6);
  return text;
}

}  // namespace

loomResult_t loomNcclModelCreate(size_t nRanks, size_t nNodes, loomNcclModel_t* model) {
  using namespace loom;
  if (model == nullptr)
    return finish(nullptr, errorf(loomInvalidArgument, "loomNcclModelCreate: model is NULL"));
  *model = nullptr;
  tuner::nccl::ClusterFacts facts;
  Status st = tuner::nccl::clusterFacts(nRanks, nNodes, &facts);
  if (!st.isOk()) return finish(nullptr, st.withContext("loomNcclModelCreate"));
  auto made = std::make_unique<loomNcclModel>(facts);
  made->description = describe(facts);
  *model = made.release();
  return loomSuccess;
}

loomResult_t loomNcclModelCosts(loomNcclModel_t model, int function, size_t nBytes,
                                float costs[LOOM_NCCL_NUM_ALGORITHMS][LOOM_NCCL_NUM_PROTOCOLS],
                                int* nChannels) {
  using namespace loom;
  if (model == nullptr || costs == nullptr || nChannels == nullptr)
    return finish(nullptr, errorf(loomInvalidArgument, "loomNcclModelCosts: %s is NULL",
                                  model == nullptr ? "model" : costs == nullptr ? "costs" : "nChannels"));
  if (function < 0 || function >= LOOM_NCCL_NUM_FUNCTIONS)
    return finish(nullptr, errorf(loomInvalidArgument,
                                  "loomNcclModelCosts: function %d is not one of NCCL's tunable "
                                  "collectives (0 Broadcast .. 4 AllReduce)", function));
  model->model.costs(function, nBytes, costs, nChannels);
  return loomSuccess;
}

const char* loomNcclModelDescription(loomNcclModel_t model) {
  return model == nullptr ? "(no model)" : model->description.c_str();
}

loomResult_t loomNcclModelDestroy(loomNcclModel_t model) {
  delete model;
  return loomSuccess;
}
