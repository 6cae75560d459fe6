// An allgather among the ranks of a communicator: what the layers below comm/ need of its
// bootstrap (topology discovery's records, autotune's agreement on its cache file), so that
// they run over any implementation of it, a test's included.
#pragma once

#include <string>
#include <vector>

#include "base/clock.h"
#include "base/status.h"

namespace loom {

class RankExchange {
 public:
  virtual ~RankExchange() = default;
  // Every rank contributes a blob; all receive every rank's blob, in rank order. Also a
  // barrier.
  virtual Status allgather(const std::string& mine, std::vector<std::string>* all,
                           const Deadline& deadline) = 0;
};

}  // namespace loom
