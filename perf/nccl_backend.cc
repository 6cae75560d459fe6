#include "perf/nccl_backend.h"

#include <cstdio>
#include <cstdlib>

#include "base/params.h"
#include "perf/launch.h"
#include "perf/nccl_api.h"
#include "perf/sweep.h"

namespace loom::perf {
namespace {

class NcclBackend : public Backend {
 public:
  NcclBackend(const nccl::Api& api, nccl::Comm* comm) : api_(api), comm_(comm) {
    api_.commUserRank(comm_, &rank_);
    api_.commCount(comm_, &nranks_);
  }

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }

  std::string describe() const override {
    const char* transport = std::getenv("LOOM_TRANSPORT");
    return "Backend: loom " + api_.loomVersion + " through NCCL " + versionText(api_.ncclVersion) +
           "'s API, loom's libnccl.so.2 at " + api_.path + " transport " +
           (transport ? transport : "auto") + " algorithms " + setting();
  }

  // Not "loom": loom-calibrate fits loom's own calls, and perf/plot.py draws this apart.
  std::string library() const override { return "loom-nccl"; }
  std::string version() const override { return api_.loomVersion; }
  std::string algorithm(Collective c) const override { return forcedAlgorithm(setting(), c); }
  std::string unsupported(Collective, loomDataType_t, loomRedOp_t) const override { return {}; }

  void* allocateShared(size_t bytes) override {
    void* p = nullptr;
    if (const nccl::Result r = api_.memAlloc(&p, bytes); r != nccl::kSuccess) {
      std::fprintf(stderr, "loom-perf: ncclMemAlloc: %s: %s\n", api_.getErrorString(r),
                   api_.getLastError(nullptr));
    }
    return p;
  }
  void releaseShared(void* p) override { api_.memFree(p); }

  bool run(const CollCall& call) override {
    const nccl::Result r = issue(call);
    if (r == nccl::kSuccess) return true;
    std::fprintf(stderr, "loom-perf: rank %d: %s of %zu elements failed: %s: %s\n", rank_,
                 ncclTestsName(call.collective), call.count, api_.getErrorString(r),
                 api_.getLastError(comm_));
    return false;
  }

  bool allGather(const void* mine, void* all, size_t bytes) override {
    const nccl::Result r = api_.allGather(mine, all, bytes, nccl::kUint8, comm_, nullptr);
    if (r != nccl::kSuccess) {
      std::fprintf(stderr, "loom-perf: rank %d: exchanging results failed: %s: %s\n", rank_,
                   api_.getErrorString(r), api_.getLastError(comm_));
    }
    return r == nccl::kSuccess;
  }

 private:
  // The call through NCCL's API, as LoomBackend::run makes it through loom's.
  nccl::Result issue(const CollCall& call) {
    const size_t n = call.count;
    const nccl::DataType t = nccl::toNccl(call.dtype);
    const nccl::RedOp op = nccl::toNccl(call.op);
    switch (call.collective) {
      case Collective::AllReduce:
        return api_.allReduce(call.send, call.recv, n, t, op, comm_, call.stream);
      case Collective::AllGather:
        return api_.allGather(call.send, call.recv, n, t, comm_, call.stream);
      case Collective::ReduceScatter:
        return api_.reduceScatter(call.send, call.recv, n, t, op, comm_, call.stream);
      case Collective::AlltoAll:
        return api_.alltoAll(call.send, call.recv, n, t, comm_, call.stream);
      case Collective::Broadcast:
        return api_.broadcast(call.send, call.recv, n, t, call.root, comm_, call.stream);
      case Collective::Reduce:
        return api_.reduce(call.send, call.recv, n, t, op, call.root, comm_, call.stream);
      case Collective::Gather:
        return api_.gather(call.send, call.recv, n, t, call.root, comm_, call.stream);
      case Collective::Scatter:
        return api_.scatter(call.send, call.recv, n, t, call.root, comm_, call.stream);
      case Collective::SendRecv: {
        // nccl-tests' pattern: to the next rank, from the previous one, in one group.
        const int next = (rank_ + 1) % nranks_;
        const int prev = (rank_ + nranks_ - 1) % nranks_;
        const nccl::Result g = api_.groupStart();
        const nccl::Result s = api_.send(call.send, n, t, next, comm_, call.stream);
        const nccl::Result v = api_.recv(call.recv, n, t, prev, comm_, call.stream);
        const nccl::Result e = api_.groupEnd();
        return g != nccl::kSuccess ? g : s != nccl::kSuccess ? s : v != nccl::kSuccess ? v : e;
      }
      case Collective::AlltoAllv:  // not one of nccl-tests' collectives: never parsed
        break;
    }
    return nccl::kInvalidArgument;
  }

  // LOOM_ALGO, which -A set for the process (loom under the library reads it at init).
  static std::string setting() {
    const char* algo = std::getenv("LOOM_ALGO");
    return algo && *algo ? algo : "auto";
  }

  const nccl::Api& api_;
  nccl::Comm* comm_;
  int rank_ = 0;
  int nranks_ = 1;
};

int initFailed(const nccl::Api& api, const char* call, nccl::Result r, int rank) {
  std::fprintf(stderr, "loom-perf: rank %d: %s failed: %s: %s\n", rank, call, api.getErrorString(r),
               api.getLastError(nullptr));
  return 3;
}

// One forked rank: its communicator through NCCL's API, the sweep, and the communicator's end.
int runRank(const nccl::Api& api, const Options& options, const std::string& gitCommit,
            toolkit::RankContext& self) {
  nccl::UniqueId id{};
  if (self.rank() == 0) {
    // On failure rank 0 exits; the others then read end-of-file and exit too.
    if (const nccl::Result r = api.getUniqueId(&id); r != nccl::kSuccess)
      return initFailed(api, "ncclGetUniqueId", r, 0);
  }
  if (!shareFromRank0(self, &id, sizeof(id))) return 3;
  nccl::Comm* comm = nullptr;
  if (const nccl::Result r = api.commInitRank(&comm, self.nranks(), id, self.rank());
      r != nccl::kSuccess) {
    return initFailed(api, "ncclCommInitRank", r, self.rank());
  }
  NcclBackend backend(api, comm);
  int rc = runSweep(backend, options, "loom-perf", gitCommit);
  // After a failure a peer may be gone: abort rather than wait for it in destroy.
  const nccl::Result r = rc >= 3 ? api.commAbort(comm) : api.commDestroy(comm);
  if (r != nccl::kSuccess && rc == 0) rc = 3;
  return rc;
}

}  // namespace

int runNcclSweep(const Options& options, const std::string& gitCommit) {
  nccl::Api api;
  std::string error;
  if (!nccl::openApi(&api, &error)) {
    std::fprintf(stderr, "loom-perf: %s\n", error.c_str());
    return 2;
  }
  if (const std::string algorithms = algorithmSetting(options); !algorithms.empty()) {
    setenv("LOOM_ALGO", algorithms.c_str(), 1);
    params::reloadFromEnvironment();
  }
  // Fork first: ncclGetUniqueId starts loom's bootstrap thread, which a fork would not carry.
  return runForkedRanks(
      options, [&](toolkit::RankContext& self) { return runRank(api, options, gitCommit, self); });
}

}  // namespace loom::perf
