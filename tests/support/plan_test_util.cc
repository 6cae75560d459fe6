#include "tests/support/plan_test_util.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace loom::test {

collectives::CollArgs makeArgs(collectives::Collective coll, int n, uint64_t count, int lanes,
                               int root) {
  collectives::CollArgs a;
  a.coll = coll;
  a.nranks = n;
  a.count = count;
  a.lanes = lanes;
  a.root = root;
  return a;
}

std::string forEachParallel(size_t jobs, const std::function<std::string(size_t)>& check) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  size_t firstFailed = jobs;
  std::string failure;
  auto worker = [&] {
    for (size_t i; (i = next++) < jobs;) {
      std::string error = check(i);
      if (error.empty()) continue;
      std::lock_guard<std::mutex> lock(mu);
      if (i < firstFailed) firstFailed = i, failure = std::move(error);
    }
  };
  std::vector<std::thread> threads(std::max(1u, std::thread::hardware_concurrency()) - 1);
  for (auto& t : threads) t = std::thread(worker);
  worker();
  for (auto& t : threads) t.join();
  return failure;
}

}  // namespace loom::test
