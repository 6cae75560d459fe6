// The communicator: this rank's view of a group of ranks, its transports and connections,
// its plan cache, and its error state. The C API (core/api.cc) is a thin layer over it.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <string>
#include <vector>

#include "collectives/builders.h"
#include "collectives/executor.h"
#include "core/bootstrap.h"
#include "core/status.h"
#include "transports/transport.h"

namespace loom {

// One collective or point-to-point call, as the API layer describes it to the communicator.
struct CallDesc {
  collectives::CollArgs args;
  const void* input = nullptr;
  void* output = nullptr;
  loomDataType_t dtype = loomFloat32;
  loomRedOp_t op = loomSum;
  // Bytes of input and output (to detect in-place calls and aliasing).
  size_t inputBytes = 0, outputBytes = 0;
};

struct P2PCall {
  collectives::P2POp op;
  void* buffer;  // const for sends
};

class Comm final : public collectives::ExecHost {
 public:
  static Status create(int nranks, const loomUniqueId& id, int rank, const loomConfig_t* config,
                       std::unique_ptr<Comm>* out);
  ~Comm() override;

  int rank() const { return ctx_.rank; }
  int nranks() const { return ctx_.nranks; }
  const transports::PeerInfo& peer(int r) const { return ctx_.peers[r]; }
  Bootstrap& bootstrap() { return boot_; }
  int64_t timeoutMs() const { return ctx_.timeoutMs; }

  // Runs one collective to completion (host buffers, in this thread).
  Status runCollective(CallDesc call);
  // Runs a group of sends and receives together.
  Status runP2P(const std::vector<P2PCall>& calls);

  // Error state: after a failure the communicator refuses further work with the first error.
  Status usable() const;
  void fail(const Status& st);  // records, and tells the peers through the bootstrap
  loomResult_t asyncError();
  void setLastError(const std::string& msg);
  const char* lastError();

  // Tells the peers this rank is gone on purpose (destroy) or not (abort).
  void leave();
  void abortPeers(const std::string& reason);

  // ExecHost.
  Status connection(int peer, int lane, transports::Connection** out,
                    transports::Transport** transport) override;
  Status pollAsyncErrors() override;

 private:
  Comm() = default;
  Status init(int nranks, const loomUniqueId& id, int rank, const loomConfig_t* config);
  Status chooseBuilder(const collectives::CollArgs& args, const collectives::Builder** out);
  // Runs a prepared plan over the given buffers; a failure marks the communicator failed.
  Status execute(const collectives::PreparedPlan& plan, std::span<void* const> buffers,
                 loomDataType_t dtype, loomRedOp_t op, const char* collective);

  // What identifies a prepared plan: everything a builder reads, plus the aliasing.
  struct PlanKey {
    collectives::Collective coll;
    const collectives::Builder* builder;
    uint64_t count;
    int root, lanes, torusX, torusY, fanIn;
    int aliasMode;  // 0: none, 1: input inside output, 2: output inside input
    uint64_t aliasOffset;
    std::vector<uint64_t> counts;  // alltoallv counts and displacements
    bool operator==(const PlanKey&) const = default;
  };
  struct PlanKeyHash {
    size_t operator()(const PlanKey& k) const {
      size_t h = std::hash<uint64_t>()(k.count) ^ (size_t(k.coll) << 56) ^
                 std::hash<const void*>()(k.builder) ^ (size_t(k.root) << 40) ^
                 (size_t(k.aliasMode) << 60) ^ std::hash<uint64_t>()(k.aliasOffset << 1);
      for (uint64_t c : k.counts) h = h * 1099511628211ull ^ c;
      return h;
    }
  };

  transports::CommContext ctx_;
  Bootstrap boot_;
  std::unique_ptr<transports::Transport> shm_, tcp_;
  std::string transportMode_;  // auto, shm, tcp
  std::map<std::string, std::string> forcedAlgos_;  // collective name -> builder name
  int lanes_ = 1;
  std::vector<int32_t> hostOf_;  // host index of every rank (CollArgs::hostOf)
  int torusX_ = 0, torusY_ = 0;  // LOOM_TORUS_DIMS
  int fanIn_ = 1;                // LOOM_ALLTOALL_FANIN
  int64_t spinCount_ = 2000;  // executor waiting, see LOOM_SPIN_COUNT / LOOM_YIELD_USEC
  uint64_t yieldNs_ = 2000000;
  // Connections by (lane, peer).
  std::vector<std::vector<std::unique_ptr<transports::Connection>>> conns_;
  std::vector<std::vector<transports::Transport*>> connTransport_;
  std::unordered_map<PlanKey, collectives::PreparedPlan, PlanKeyHash> planCache_;
  collectives::ExecWorkspace workspace_;
  int hostCount_ = 1;
  std::vector<char> scratch_;
  uint64_t sequence_ = 0;
  Status failed_;
  std::atomic<int> asyncError_{loomSuccess};
  std::mutex errorMutex_;
  std::string lastError_;
  std::string lastErrorShown_;
};

}  // namespace loom
