#include "tests/support/comm_harness.h"

#include <cstring>

namespace loom::testing {

loomResult_t initComm(RankContext& ctx, loomComm_t* comm, const loomConfig_t* config) {
  loomUniqueId id;
  std::string mine;
  if (ctx.rank() == 0) {
    loomResult_t rc = loomGetUniqueId(&id);
    if (rc != loomSuccess) return rc;
    mine.assign(id.internal, sizeof(id.internal));
  }
  std::string shared = ctx.allgather(mine)[0];
  memcpy(id.internal, shared.data(), sizeof(id.internal));
  return loomCommInitRankConfig(comm, ctx.nranks(), id, ctx.rank(), config);
}

}  // namespace loom::testing
