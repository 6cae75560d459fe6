// The host half of NCCL's device API (device communicators, teams, barriers and all-to-all
// resources for GPU kernels), compiled against the toolkit's own declarations. Loom's
// communicators live on the host and no GPU kernel can use them: each function fails with
// ncclInvalidUsage and says so, and those that return a team or a number return one no caller
// can take for valid (a team of 0 ranks, -1).
#include <nccl_device/core.h>
#include <nccl_device/gin_barrier.h>
#include <nccl_device/ll_a2a.h>
#include <nccl_device/lsa_barrier.h>

#include "bindings/nccl/shim.h"

using namespace loom::nccl;

namespace {

ncclResult_t noDeviceApi(const char* fn) {
  return fail(ncclInvalidUsage,
              "%s: loom's NCCL has no device API: its communicators run on "
              "the host, where no GPU kernel can use them",
              fn);
}

ncclTeam_t noTeam(const char* fn) {
  noDeviceApi(fn);
  return ncclTeam_t{0, -1, 0};
}

int noNumber(const char* fn) {
  noDeviceApi(fn);
  return -1;
}

}  // namespace

LOOM_NCCL_API(ncclResult_t, ncclDevCommCreate, ncclComm_t, ncclDevCommRequirements_t const*,
              ncclDevComm_t*) {
  return noDeviceApi("ncclDevCommCreate");
}

LOOM_NCCL_API(ncclResult_t, ncclDevCommDestroy, ncclComm_t, ncclDevComm_t const*) {
  return noDeviceApi("ncclDevCommDestroy");
}

LOOM_NCCL_API(ncclTeam_t, ncclTeamWorld, ncclComm_t) { return noTeam("ncclTeamWorld"); }
LOOM_NCCL_API(ncclTeam_t, ncclTeamLsa, ncclComm_t) { return noTeam("ncclTeamLsa"); }
LOOM_NCCL_API(ncclTeam_t, ncclTeamRail, ncclComm_t) { return noTeam("ncclTeamRail"); }

LOOM_NCCL_API(int, ncclTeamRankToWorld, ncclComm_t, ncclTeam_t, int) {
  return noNumber("ncclTeamRankToWorld");
}

LOOM_NCCL_API(int, ncclTeamRankToLsa, ncclComm_t, ncclTeam_t, int) {
  return noNumber("ncclTeamRankToLsa");
}

LOOM_NCCL_API(ncclResult_t, ncclLsaBarrierCreateRequirement, ncclTeam_t, int,
              ncclLsaBarrierHandle_t*, ncclDevResourceRequirements_t*) {
  return noDeviceApi("ncclLsaBarrierCreateRequirement");
}

LOOM_NCCL_API(ncclResult_t, ncclGinBarrierCreateRequirement, ncclComm_t, ncclTeam_t, int,
              ncclGinBarrierHandle_t*, ncclDevResourceRequirements_t*) {
  return noDeviceApi("ncclGinBarrierCreateRequirement");
}

LOOM_NCCL_API(int, ncclLLA2ACalcSlots, int, int) { return noNumber("ncclLLA2ACalcSlots"); }

LOOM_NCCL_API(ncclResult_t, ncclLLA2ACreateRequirement, int, int, ncclLLA2AHandle_t*,
              ncclDevResourceRequirements_t*) {
  return noDeviceApi("ncclLLA2ACreateRequirement");
}
