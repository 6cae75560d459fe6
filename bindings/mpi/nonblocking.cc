// MPI_Iallreduce and MPI_Ibcast on loom: each loom communicator that gets one has a thread of
// its own that runs its non-blocking calls in the order they were made, and completes each
// call's request, a generalized request of MPI's (MPI_Grequest_start), when loom returns. That
// completion comes from the thread, which MPI allows only under MPI_THREAD_MULTIPLE: elsewhere
// the calls fall through (the routing in collectives.cc). A blocking call on the communicator
// waits for the queue first (awaitQueue), so that every rank runs the communicator's calls in
// the order the program made them, as MPI requires.
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "bindings/mpi/interpose.h"

namespace loom::mpi {
namespace {

// What a request carries to its query function: the call's MPI error code, set by the thread
// before it completes the request.
struct RequestState {
  int error = MPI_SUCCESS;
};

int queryRequest(void* extra, MPI_Status* status) {
  PMPI_Status_set_elements(status, MPI_BYTE, 0);
  PMPI_Status_set_cancelled(status, 0);
  status->MPI_SOURCE = MPI_UNDEFINED;
  status->MPI_TAG = MPI_UNDEFINED;
  return static_cast<RequestState*>(extra)->error;
}

int freeRequest(void* extra) {
  delete static_cast<RequestState*>(extra);
  return MPI_SUCCESS;
}

// A collective cannot be taken back once some rank may have started it: the call completes.
int cancelRequest(void*, int) { return MPI_SUCCESS; }

struct Job {
  Call call;
  Pending args;
  MPI_Request request;
  RequestState* state;
};

// Non-blocking calls queued or running, over every communicator: a blocking call looks no
// further while it is 0.
std::atomic<long> gQueued{0};

class Queue {
 public:
  explicit Queue(loomComm_t comm) : comm_(comm), thread_([this] { run(); }) {}
  ~Queue() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    thread_.join();  // after the queued calls: every one of them is loom's to finish
  }

  void push(const Job& job) {
    gQueued.fetch_add(1);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back(job);
    }
    ready_.notify_all();
  }

  // Bounded by the queued calls' own deadlines (LOOM_TIMEOUT_MS): each returns by then.
  void drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [this] { return jobs_.empty(); });
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      const Job job = jobs_.front();  // stays queued while it runs: drain waits for it
      lock.unlock();
      job.state->error = mpiError(job.call, comm_, execute(job));
      PMPI_Grequest_complete(job.request);
      lock.lock();
      jobs_.pop_front();
      gQueued.fetch_sub(1);
      idle_.notify_all();
    }
  }

  loomResult_t execute(const Job& job) const { return runPending(comm_, job.call, job.args); }

  const loomComm_t comm_;
  std::mutex mutex_;
  std::condition_variable ready_, idle_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::thread thread_;  // last: it starts at construction, with the members above made
};

// Never destroyed, as comm_cache.cc's background destructions: a process that exits with a
// call still queued (never waited for, its communicator never freed) must not wait for it.
std::mutex gQueuesMutex;
std::map<loomComm_t, std::unique_ptr<Queue>>& gQueues =
    *new std::map<loomComm_t, std::unique_ptr<Queue>>;

Queue* queueOf(loomComm_t comm, bool make) {
  std::lock_guard<std::mutex> lock(gQueuesMutex);
  auto it = gQueues.find(comm);
  if (it != gQueues.end()) return it->second.get();
  if (!make) return nullptr;
  return gQueues.emplace(comm, std::make_unique<Queue>(comm)).first->second.get();
}

}  // namespace

loomResult_t runPending(loomComm_t comm, Call call, const Pending& a) {
  if (call == Call::Ibcast)
    return loomBroadcast(a.out, a.out, a.count, loomUint8, a.root, comm, nullptr);
  return loomAllReduce(a.in, a.out, a.count, a.type, a.op, comm, nullptr);
}

int enqueue(loomComm_t comm, Call call, const Pending& args, MPI_Request* request) {
  auto* state = new RequestState;
  const int rc =
      PMPI_Grequest_start(queryRequest, freeRequest, cancelRequest, state, request);
  if (rc != MPI_SUCCESS) {
    delete state;
    return rc;
  }
  queueOf(comm, true)->push(Job{call, args, *request, state});
  return MPI_SUCCESS;
}

void awaitQueue(loomComm_t comm) {
  if (gQueued.load() == 0) [[likely]]
    return;
  if (Queue* queue = queueOf(comm, false)) queue->drain();
}

void endQueue(loomComm_t comm) {
  std::unique_ptr<Queue> queue;
  {
    std::lock_guard<std::mutex> lock(gQueuesMutex);
    auto it = gQueues.find(comm);
    if (it == gQueues.end()) return;
    queue = std::move(it->second);
    gQueues.erase(it);
  }
  queue.reset();
}

}  // namespace loom::mpi
