// The communicator: this rank's view of a group of ranks, its transports and connections,
// its plan cache, and its error state. The C API (core/api.cc) is a thin layer over it.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
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
  Status runCollective(const CallDesc& call);
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
  Status execute(const collectives::RankPlan& plan, const std::string& cacheKey,
                 const std::vector<collectives::BufferAlias>& aliases,
                 std::vector<void*> buffers, loomDataType_t dtype, loomRedOp_t op,
                 collectives::Collective coll);

  transports::CommContext ctx_;
  Bootstrap boot_;
  std::unique_ptr<transports::Transport> shm_, tcp_;
  std::string transportMode_;  // auto, shm, tcp
  std::map<std::string, std::string> forcedAlgos_;  // collective name -> builder name
  int lanes_ = 1;
  int64_t spinCount_ = 2000;  // executor waiting, see LOOM_SPIN_COUNT / LOOM_YIELD_USEC
  uint64_t yieldNs_ = 2000000;
  // Connections by (lane, peer).
  std::vector<std::vector<std::unique_ptr<transports::Connection>>> conns_;
  std::vector<std::vector<transports::Transport*>> connTransport_;
  std::map<std::string, collectives::PreparedPlan> planCache_;
  std::vector<char> scratch_;
  uint64_t sequence_ = 0;
  Status failed_;
  std::atomic<int> asyncError_{loomSuccess};
  std::mutex errorMutex_;
  std::string lastError_;
  std::string lastErrorShown_;
};

}  // namespace loom
