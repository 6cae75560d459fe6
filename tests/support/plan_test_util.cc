#include "tests/support/plan_test_util.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tests/support/verifier.h"

namespace loom::test {

namespace {
bool smallSweep() {
  const char* v = std::getenv("LOOM_VERIFY_SWEEP");
  return v != nullptr && std::string(v) == "small";
}
}  // namespace

int sweepRanksUpTo(int full) { return smallSweep() ? std::min(full, 32) : full; }

bool sweepBigRanks() { return !smallSweep(); }

std::vector<uint64_t> sweepCounts(int n) {
  std::vector<uint64_t> c = {
      0, 1, uint64_t(n - 1), uint64_t(n), uint64_t(2 * n + 1), kPrimeCount, kLargeCount};
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

collectives::CollArgs makeArgs(collectives::Collective coll, int n, uint64_t count, int lanes,
                               int root) {
  collectives::CollArgs a;
  a.coll = coll;
  a.nranks = n;
  a.count = count;
  a.lanes = lanes;
  a.root = root;
  a.sharedBytes = kSweepSharedBytes;
  return a;
}

std::vector<collectives::CollArgs> alltoallvArgs(const std::vector<std::vector<uint64_t>>& sends,
                                                 int lanes, int fanIn) {
  const int n = int(sends.size());
  std::vector<collectives::CollArgs> args(
      size_t(n), makeArgs(collectives::Collective::AlltoAllv, n, 0, lanes));
  for (int r = 0; r < n; ++r) {
    collectives::CollArgs& a = args[size_t(r)];
    a.fanIn = fanIn;
    a.sendCounts.resize(size_t(n));
    a.sendDispls.resize(size_t(n));
    a.recvCounts.resize(size_t(n));
    a.recvDispls.resize(size_t(n));
    uint64_t sendAt = 0, recvAt = 0;
    for (int k = 0; k < n; ++k) {
      const size_t j = size_t(n - 1 - k);
      a.sendDispls[j] = sendAt;
      a.sendCounts[j] = sends[size_t(r)][j];
      sendAt += a.sendCounts[j] + 3;
      a.recvDispls[size_t(k)] = recvAt;
      a.recvCounts[size_t(k)] = sends[size_t(k)][size_t(r)];
      recvAt += a.recvCounts[size_t(k)] + 1;
    }
  }
  return args;
}

void addLaneHints(const collectives::Builder& b, collectives::CollArgs a,
                  std::vector<collectives::CollArgs>* out) {
  size_t lanesSeen = 0;
  for (int hint : {1, 2, 4}) {
    a.lanes = hint;
    const size_t lanes = b.build(a, 0).lanes.size();
    if (lanes == lanesSeen) continue;
    lanesSeen = lanes;
    out->push_back(a);
  }
}

const collectives::Builder& builderNamed(collectives::Collective c, const char* name) {
  const collectives::Builder* b = collectives::findBuilder(c, name);
  if (!b) throw std::runtime_error(std::string("no builder ") + name);
  return *b;
}

bool hasInPlaceForm(const collectives::Builder& b) {
  if (b.coll == collectives::Collective::AlltoAll) return b.alltoallInPlace;
  return b.coll != collectives::Collective::AlltoAllv;
}

std::string describeCase(const collectives::CollArgs& a, bool inPlace) {
  std::string hosts;
  for (int32_t h : a.hostOf) hosts += std::to_string(h);
  return std::string(collectives::collectiveName(a.coll)) + " N=" + std::to_string(a.nranks) +
         " count=" + std::to_string(a.count) + " lanes=" + std::to_string(a.lanes) +
         " root=" + std::to_string(a.root) + " fanIn=" + std::to_string(a.fanIn) +
         " torus=" + std::to_string(a.torusX) + "x" + std::to_string(a.torusY) + " hosts=[" +
         hosts + "] shared=" + std::to_string(a.sharedBytes) +
         (inPlace ? " in place: " : " out of place: ");
}

std::string verifyCases(const collectives::Builder& b,
                        const std::vector<collectives::CollArgs>& cases) {
  return forEachParallel(cases.size(), [&](size_t i) -> std::string {
    for (bool inPlace : {false, true}) {
      if (inPlace && !hasInPlaceForm(b)) continue;
      const VerifyResult r = verifyBuilder(b, cases[i], inPlace);
      if (!r.ok) return describeCase(cases[i], inPlace) + r.message;
    }
    return "";
  });
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
