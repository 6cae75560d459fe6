// The API's handle of a communicator (loomComm_t), what the C functions share: the registry of
// live handles, argument checks, the error text, a communicator still being made (in a group
// or in the background), and a call's hold on it.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "comm/comm.h"
#include "loom/loom.h"

namespace loom {

// A communicator whose init runs later (at the end of the group that holds it) or in the
// background (a non-blocking config). The handle exists meanwhile.
// Whether a config (NULL, or of a version without the field, included) asks for blocking init.
inline bool blockingInit(const loomConfig_t* config) {
  return config == nullptr || config->size < offsetof(loomConfig_t, blocking) + sizeof(int) ||
         config->blocking != 0;
}

struct PendingInit {
  int nranks = 0, rank = 0;
  loomUniqueId id{};
  bool hasConfig = false;
  bool blocking = true;  // blockingInit of the caller's config
  loomConfig_t config{};
  std::string algorithms, transport;  // the config's strings, owned
  std::thread thread;
  std::atomic<bool> started{false}, done{false};
  Status result;
  std::unique_ptr<Comm> made;

  PendingInit(int nranks, int rank, const loomUniqueId& id, const loomConfig_t* config);
  void start();  // runs Comm::create in a thread of its own
};

// One pre-multiplied sum (loomRedOpCreatePreMulSum): the type, and the scalar repeated
// kBlock times, made once, that the product kernel scales a call's input by, a block at a time.
struct PreMulSum {
  static constexpr size_t kBlock = 1024;
  bool live = false;
  loomDataType_t dtype = loomFloat32;
  std::vector<unsigned char> scalars;
};

class OrderedQueue;  // a communicator's progress thread for stream-ordered calls

}  // namespace loom

struct loomComm {
  std::unique_ptr<loom::Comm> impl;  // null until ready
  // ready: impl is set (or the init failed: initError). Read on every call.
  std::atomic<bool> ready{false};
  std::mutex readyMutex;
  std::unique_ptr<loom::PendingInit> pending;
  loom::Status initError;
  // Calls in this communicator now, so an abort from another thread waits for them to leave.
  std::atomic<int> busy{0};
  std::vector<loom::PreMulSum> preMulSums;  // op loomNumOps + i
  // The scaled inputs of pre-multiplied calls: the call's, or each one's of a group until the
  // group has run.
  std::vector<std::vector<char>> scaledInputs;
  uint64_t shrinks = 0;                     // loomCommShrink calls so far (the ranks agree)
  // Stream-ordered calls (comm/stream_calls.h): the progress thread, made at the first, and
  // how many it has yet to finish (a host call waits for them: read on every call).
  std::shared_ptr<loom::OrderedQueue> ordered;
  std::atomic<int> orderedPending{0};
};

namespace loom {

#define LOOM_HOT_TLS __attribute__((tls_model("initial-exec")))

// The thread's last error message (loomGetLastError(NULL)).
std::string& threadLastError();

// Live handles, so a call with a destroyed (or never created) communicator gets a clear error
// instead of a crash.
void registerHandle(loomComm* c);
void forget(const loomComm* c);
bool isLiveLocked(const loomComm* c);
// The thread remembers the last handle it found live and the registry's generation then, so
// its next call on that handle (the common case) needs no lock.
extern std::atomic<uint64_t> gCommsGeneration;
extern thread_local const loomComm* tLastLive LOOM_HOT_TLS;
extern thread_local uint64_t tLastLiveGeneration LOOM_HOT_TLS;
inline bool isLive(const loomComm* c) {
  if (c == tLastLive && tLastLiveGeneration == gCommsGeneration.load(std::memory_order_acquire))
    return true;
  return isLiveLocked(c);
}

// Records a failed call's message (the thread's and the communicator's) and returns its code.
loomResult_t finish(loomComm_t comm, const Status& st);

// Waits for a pending communicator (when `wait`), or says it is still being made; installs the
// result. Out of line: only the first calls of a handle get here.
Status awaitReady(loomComm* comm, const char* fn, bool wait);

// The checks of checkComm that fail, or wait for a communicator still being made.
Status checkCommSlow(loomComm* comm, const char* fn);

// Every call's first check: a few loads where the handle is live and ready.
inline Status checkComm(loomComm* comm, const char* fn) {
  if (comm != nullptr && isLive(comm) && comm->ready.load(std::memory_order_acquire) &&
      comm->impl != nullptr) [[likely]]
    return Status::ok();
  return checkCommSlow(comm, fn);
}

// A host call's wait for the communicator's earlier stream-ordered calls (comm/stream_calls.h).
Status awaitOrderedSlow(loomComm* comm);
inline Status awaitOrdered(loomComm* comm) {
  if (comm->orderedPending.load(std::memory_order_acquire) == 0) [[likely]]
    return Status::ok();
  return awaitOrderedSlow(comm);
}

inline Status checkRank(int r, int nranks, const char* fn, const char* what) {
  if (r < 0 || r >= nranks)
    return errorf(loomInvalidArgument, "%s: %s %d is out of range (communicator has %d ranks)",
                  fn, what, r, nranks);
  return Status::ok();
}

// Holds the communicator for a call: an abort waits until no call holds it.
class CallHold {
 public:
  explicit CallHold(loomComm* c) : c_(c) { c_->busy.fetch_add(1); }
  ~CallHold() { c_->busy.fetch_sub(1, std::memory_order_release); }
  CallHold(const CallHold&) = delete;
  CallHold& operator=(const CallHold&) = delete;

 private:
  loomComm* c_;
};

// The group (comm/group.cc): whether calls are being queued (read on every call: inline), and
// the queue.
extern thread_local int tGroupDepth LOOM_HOT_TLS;
inline bool inGroup() { return tGroupDepth > 0; }
Status queueCollective(loomComm* comm, const CallDesc& call);
Status queueP2P(loomComm* comm, const P2PCall& call);
void queueInit(loomComm* comm);

}  // namespace loom
