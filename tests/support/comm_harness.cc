#include "tests/support/comm_harness.h"

#include <cstdlib>
#include <cstring>

#include "base/log.h"
#include "base/params.h"

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

void logInRank(const char* level, const char* subsystems) {
  setenv("LOOM_DEBUG", level, 1);
  setenv("LOOM_DEBUG_SUBSYS", subsystems, 1);
  params::reloadFromEnvironment();
  log::reload();
}

std::vector<std::string> linesWith(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    if (line.find(needle) != std::string::npos) out.push_back(std::move(line));
    start = end + 1;
  }
  return out;
}

}  // namespace loom::testing
