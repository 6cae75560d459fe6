#include "comm/handle.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "base/log.h"

namespace loom {
namespace {

std::mutex gCommsMutex;
std::set<const loomComm*> gComms;

}  // namespace

std::atomic<uint64_t> gCommsGeneration{0};
// Read on every call: the initial-exec model makes each read one %fs-relative load instead of
// a call to __tls_get_addr (~4% of a 1-rank 8-byte call); 20 bytes of static TLS.
thread_local const loomComm* tLastLive LOOM_HOT_TLS = nullptr;
thread_local uint64_t tLastLiveGeneration LOOM_HOT_TLS = 0;

std::string& threadLastError() {
  thread_local std::string message;
  return message;
}

void registerHandle(loomComm* c) {
  std::lock_guard<std::mutex> g(gCommsMutex);
  gComms.insert(c);
}

// isLive's look-up under the lock; out of line, so that the test before it inlines.
[[gnu::noinline]] bool isLiveLocked(const loomComm* c) {
  std::lock_guard<std::mutex> g(gCommsMutex);
  if (gComms.count(c) == 0) return false;
  tLastLive = c;
  tLastLiveGeneration = gCommsGeneration.load(std::memory_order_relaxed);
  return true;
}

void forget(const loomComm* c) {
  std::lock_guard<std::mutex> g(gCommsMutex);
  gComms.erase(c);
  gCommsGeneration.fetch_add(1, std::memory_order_release);
}

loomResult_t finish(loomComm_t comm, const Status& st) {
  if (st.isOk()) return loomSuccess;
  threadLastError() = st.message();
  if (comm != nullptr && isLive(comm) && comm->ready.load() && comm->impl)
    comm->impl->setLastError(st.message());
  LOOM_INFO("API", "%s: %s", loomGetErrorString(st.code()), st.message().c_str());
  return st.code();
}

PendingInit::PendingInit(int nranks, int rank, const loomUniqueId& id,
                         const loomConfig_t* config)
    : nranks(nranks),
      rank(rank),
      id(id),
      hasConfig(config != nullptr),
      blocking(blockingInit(config)) {
  if (config == nullptr) return;
  // The caller's struct may be older (smaller) than ours: copy what it has, default the rest.
  loomConfig_t defaults = LOOM_CONFIG_INITIALIZER;
  this->config = defaults;
  memcpy(&this->config, config, std::min(config->size, sizeof(loomConfig_t)));
  this->config.size = std::min(config->size, sizeof(loomConfig_t));
  if (this->config.algorithms) algorithms = this->config.algorithms;
  if (this->config.transport) transport = this->config.transport;
}

void PendingInit::start() {
  started = true;
  thread = std::thread([this] {
    loomConfig_t c = config;
    c.algorithms = algorithms.empty() ? nullptr : algorithms.c_str();
    c.transport = transport.empty() ? nullptr : transport.c_str();
    result = Comm::create(nranks, id, rank, hasConfig ? &c : nullptr, &made);
    if (!result.isOk())
      result = result.withContext(strprintf("loomCommInitRank (rank %d of %d)", rank, nranks));
    done.store(true, std::memory_order_release);
  });
}

Status checkCommSlow(loomComm* comm, const char* fn) {
  if (comm == nullptr) return errorf(loomInvalidArgument, "%s: comm is NULL", fn);
  if (!isLive(comm))
    return errorf(loomInvalidUsage,
                  "%s: the communicator was destroyed (or never created); it cannot be used",
                  fn);
  return awaitReady(comm, fn, true);
}

Status awaitReady(loomComm* comm, const char* fn, bool wait) {
  std::lock_guard<std::mutex> g(comm->readyMutex);
  if (!comm->ready.load()) {
    PendingInit& p = *comm->pending;
    if (!p.started)
      return errorf(loomInvalidUsage,
                    "%s: the communicator is made at the end of the group that creates it "
                    "(loomGroupEnd); it cannot be used before",
                    fn);
    if (!wait && !p.done.load(std::memory_order_acquire))
      return Status(loomInProgress, "the communicator is still being initialised");
    p.thread.join();
    comm->impl = std::move(p.made);
    comm->initError = p.result;
    comm->pending.reset();
    comm->ready.store(true, std::memory_order_release);
  }
  if (comm->impl == nullptr) return comm->initError;
  return Status::ok();
}

}  // namespace loom
