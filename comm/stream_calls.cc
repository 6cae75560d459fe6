// Stream-ordered calls (comm/stream_calls.h): staging, the jobs that the streams hand to a
// communicator's progress thread, and that thread.
//
// A job is one communicator's calls of one enqueue (a call, or a group's calls); an enqueue's
// jobs share a gate. On each stream of the enqueue: copies of device input into staging, a host
// function that counts the stream in at the gate (the last stream to arrive posts every job), a
// wait on each of its jobs' flags, copies of the staged output back, host functions that let go
// of the jobs. Each progress thread runs its communicator's posted jobs in the order they were
// enqueued, each as a group of host calls, and sets the job's flag.
#include <algorithm>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/log.h"
#include "collectives/plan.h"
#include "comm/handle.h"
#include "comm/stream_calls.h"

namespace loom {

// The communicator's progress thread: posted jobs, run one after another.
class OrderedQueue;

namespace {

thread_local bool tOnProgressThread = false;

// A device buffer's host copy: copied in before the call, out after it, or both.
struct Staged {
  void* user = nullptr;
  void* host = nullptr;
  size_t bytes = 0;
  size_t capacity = 0;  // of host, from the pool
  bool in = false, out = false;
};

// Staging memory kept for reuse: pinned memory is slow to get (cudaHostAlloc pins and maps
// pages: milliseconds for megabytes) and a training loop stages the same sizes call after call.
// Sizes round up to a power of two, and a few buffers of each size stay. The pool belongs
// to one device: a forked child's new device starts it again.
class StagingPool {
 public:
  // Buffers kept per size: more of the smallest, which every call's flag takes.
  static size_t keep(size_t size) { return size <= 4096 ? 64 : 8; }

  Status take(device::Device* dev, size_t bytes, void** p, size_t* capacity) {
    size_t size = 4096;
    while (size < bytes) size *= 2;
    *capacity = size;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (dev != owner_) {
        free_.clear();  // another process's (before a fork), or another device's
        owner_ = dev;
      }
      std::vector<void*>& kept = free_[size];
      if (!kept.empty()) {
        *p = kept.back();
        kept.pop_back();
        return Status::ok();
      }
    }
    return dev->allocHost(p, size);
  }

  void give(device::Device* dev, void* p, size_t capacity) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::vector<void*>& kept = free_[capacity];
      if (dev == owner_ && kept.size() < keep(capacity)) {
        kept.push_back(p);
        return;
      }
    }
    dev->freeHost(p);
  }

 private:
  std::mutex mu_;
  device::Device* owner_ = nullptr;
  std::map<size_t, std::vector<void*>> free_;  // by size
};
// Never destroyed: streams' threads give staging back until the process ends.
StagingPool& stagingPool() {
  static StagingPool* pool = new StagingPool;
  return *pool;
}

void releaseStaging(device::Device* dev, std::vector<Staged>& staged) {
  for (Staged& s : staged) stagingPool().give(dev, s.host, s.capacity);
  staged.clear();
}

struct Item {
  loomComm* comm = nullptr;
  void* stream = nullptr;
  bool isP2P = false;
  CallDesc coll;
  P2PCall p2p{};
  std::vector<Staged> staged;
  std::shared_ptr<const PreMulSum> premul;  // a copy of the call's pre-multiplied sum op
};

struct Job {
  loomComm* comm = nullptr;
  device::Device* dev = nullptr;
  std::shared_ptr<OrderedQueue> queue;
  std::vector<Item> items;
  std::atomic<int> refs{0};  // its streams' letGo, the progress thread's completion, launch
  // Set by the progress thread, awaited by the streams: in pinned memory (the GPU may read it).
  std::atomic<uint32_t>* flag = nullptr;
  void* flagMemory = nullptr;
  size_t flagCapacity = 0;
  uint64_t seq = 0;  // the enqueue's number on the communicator: jobs run in this order
  std::atomic<bool> abandoned{false};  // its enqueue failed: it fails without running
  ~Job() {
    for (Item& it : items) releaseStaging(dev, it.staged);
    if (flagMemory != nullptr) stagingPool().give(dev, flagMemory, flagCapacity);
  }
  Status makeFlag() {
    LOOM_TRY(stagingPool().take(dev, sizeof(std::atomic<uint32_t>), &flagMemory, &flagCapacity));
    flag = new (flagMemory) std::atomic<uint32_t>(device::kPending);
    return Status::ok();
  }
};

}  // namespace

class OrderedQueue {
 public:
  explicit OrderedQueue(loomComm* comm)
      : comm_(comm), rank_(comm->impl->rank()), timeoutMs_(comm->impl->timeoutMs()) {
    thread_ = std::thread([this] { run(); });
  }
  ~OrderedQueue() { stop(); }

  // Numbers job, at its enqueue (the caller's thread).
  void number(Job* job) {
    std::lock_guard<std::mutex> lock(mu_);
    job->seq = enqueued_++;
    numbered_[job->seq] = job;
    cv_.notify_all();  // the deadline for its posting starts
  }

  // Posted by the last of a job's streams to arrive (a host function of the runtime). Jobs run
  // in the order they were enqueued, whichever stream arrives first: every rank then runs the
  // communicator's calls in the order it made them, as the ranks' calls must match.
  void post(Job* job) {
    std::unique_lock<std::mutex> lock(mu_);
    // After the end (the communicator may be gone, its count of pending jobs with it), or too
    // late (failed by the deadline already): it fails without running.
    if (stopped_ || job->seq < next_) {
      lock.unlock();
      finishJob(job, false);
      return;
    }
    posted_[job->seq] = job;
    cv_.notify_all();
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    cv_.notify_all();
    thread_.join();
    for (auto& [seq, job] : posted_) complete(job, false);  // never started
    // Enqueued but never posted (a stream has not arrived): their waits end; the streams that
    // arrive later let go of them.
    for (auto& [seq, job] : numbered_)
      if (posted_.count(seq) == 0) job->flag->store(device::kFailed, std::memory_order_release);
    posted_.clear();
    numbered_.clear();
  }

 private:
  void run() {
    tOnProgressThread = true;
    log::setThreadRank(rank_);
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (!awaitNext(lock)) return;
      Job* job = numbered_[next_];
      numbered_.erase(next_);
      const bool posted = posted_.erase(next_++) > 0;
      lock.unlock();
      if (posted) complete(job, job->abandoned.load() ? failAbandoned() : runJob(job));
      else failLate(job);
      lock.lock();
    }
  }

  // Waits until the next job is posted, or was enqueued longer ago than the deadline without
  // being posted (its streams have not all arrived: true, and it is not in posted_); false once
  // stopped. Idle (nothing enqueued), it waits without a deadline.
  bool awaitNext(std::unique_lock<std::mutex>& lock) {
    Deadline postBy(timeoutMs_);
    while (!stopped_ && posted_.count(next_) == 0) {
      if (numbered_.count(next_) == 0) {
        cv_.wait(lock);
        postBy = Deadline(timeoutMs_);
      } else if (postBy.expired()) {
        return true;
      } else {
        cv_.wait_for(lock, std::chrono::milliseconds(100));
      }
    }
    return !stopped_;
  }

  // A job whose streams did not all arrive in time: it fails, and the communicator with it (the
  // calls after it can no longer match the peers'). Its streams' later arrival lets go of it.
  void failLate(Job* job) {
    Status st = errorf(loomTimeout,
                       "a stream-ordered call's streams did not all reach it within %lld ms "
                       "(is one of them blocked?)",
                       (long long)timeoutMs_);
    fail(st);
    comm_->orderedPending.fetch_sub(1, std::memory_order_acq_rel);
    job->flag->store(device::kFailed, std::memory_order_release);
  }

  // The job's calls as one group of host calls on the staging buffers.
  bool runJob(Job* job) {
    loomGroupStart();
    Status st;
    for (Item& it : job->items) {
      if (!st.isOk()) break;
      if (it.premul) scaleByPreMulSum(comm_, it.coll, *it.premul);
      st = it.isP2P ? submitP2P(comm_, it.p2p) : submitCollective(comm_, it.coll);
    }
    loomResult_t r = loomGroupEnd();
    if (st.isOk() && r != loomSuccess) st = Status(r, loomGetLastError(nullptr));
    if (st.isOk()) return true;
    LOOM_WARN("COLL", "a stream-ordered call failed: %s", st.message().c_str());
    if (comm_->impl) comm_->impl->fail(st);  // loomCommGetAsyncError says so
    return false;
  }

  // A job whose enqueue failed: the ranks' calls no longer match, so the communicator fails.
  bool failAbandoned() {
    Status st = errorf(loomSystemError,
                       "a stream-ordered call could not be enqueued on its streams (its caller "
                       "was told why); the communicator's calls can no longer match the peers'");
    fail(st);
    return false;
  }

  // Fails the communicator (loomCommGetAsyncError, its WARN line) and records why as its last
  // error (loomGetLastError(comm)): the call that caused it has returned long ago.
  void fail(const Status& st) {
    if (comm_->impl) comm_->impl->fail(st);
    finish(comm_, st);
  }

  void complete(Job* job, bool ok) {
    comm_->orderedPending.fetch_sub(1, std::memory_order_acq_rel);
    finishJob(job, ok);
  }
  static void finishJob(Job* job, bool ok) {
    job->flag->store(ok ? device::kDone : device::kFailed, std::memory_order_release);
    if (job->refs.fetch_sub(1) == 1) delete job;
  }

  loomComm* comm_;
  int rank_;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t timeoutMs_;
  std::map<uint64_t, Job*> numbered_, posted_;  // by number: enqueued, and of those posted
  uint64_t enqueued_ = 0, next_ = 0;  // numbers given out; the next to run
  bool stopped_ = false;
  std::thread thread_;
};

namespace {

// What the streams of one enqueue share: a call's job, or a group's jobs (one per
// communicator). Each stream counts in once; the last to arrive posts every job, so that a
// group's communicators (ranks of this process, which must progress together) start together
// even where they share a stream, which a wait per job before the next job's arrival would block.
struct Gate {
  std::vector<Job*> jobs;
  std::vector<void*> streams;  // distinct, in order of first use
  std::atomic<int> toArrive{0}, refs{0};
};

void postAll(Gate* gate) {
  for (Job* job : gate->jobs) {
    std::shared_ptr<OrderedQueue> queue = job->queue;  // a stopped queue may go with the job
    queue->post(job);
  }
}

// Host functions run by the streams.
void arrive(void* arg) {
  auto* gate = static_cast<Gate*>(arg);
  if (gate->toArrive.fetch_sub(1) == 1) postAll(gate);
  if (gate->refs.fetch_sub(1) == 1) delete gate;
}
void letGo(void* arg) {
  auto* job = static_cast<Job*>(arg);
  if (job->refs.fetch_sub(1) == 1) delete job;
}

bool touches(const Job* job, void* stream) {
  for (const Item& it : job->items)
    if (it.stream == stream) return true;
  return false;
}

// The host side of [p, p + bytes) where it is device memory, else p. Device input and output
// that overlap (the in-place layouts) share one copy, so the call sees the same aliasing.
Status stage(device::Device* dev, Item& it, const void* in, size_t inBytes, void* out,
             size_t outBytes, bool outReadFirst, const void** hostIn, void** hostOut) {
  *hostIn = in;
  *hostOut = out;
  const bool inDev = inBytes > 0 && dev->isDeviceMemory(in);
  const bool outDev = outBytes > 0 && dev->isDeviceMemory(out);
  if (inDev) LOOM_TRY(dev->checkRange(in, inBytes));
  if (outDev) LOOM_TRY(dev->checkRange(out, outBytes));
  auto add = [&](const void* user, size_t bytes, bool copyIn, bool copyOut, char** host) {
    void* p = nullptr;
    size_t capacity = 0;
    LOOM_TRY(stagingPool().take(dev, bytes, &p, &capacity));
    it.staged.push_back({const_cast<void*>(user), p, bytes, capacity, copyIn, copyOut});
    *host = static_cast<char*>(p);
    return Status::ok();
  };
  const char* a = static_cast<const char*>(in);
  char* b = static_cast<char*>(out);
  if (inDev && outDev && a < b + outBytes && b < a + inBytes) {
    const char* lo = std::min<const char*>(a, b);
    const char* hi = std::max<const char*>(a + inBytes, b + outBytes);
    char* host = nullptr;
    LOOM_TRY(add(lo, size_t(hi - lo), true, true, &host));
    *hostIn = host + (a - lo);
    *hostOut = host + (b - lo);
    return Status::ok();
  }
  char* host = nullptr;
  if (inDev) {
    LOOM_TRY(add(in, inBytes, true, false, &host));
    *hostIn = host;
  }
  if (outDev) {
    LOOM_TRY(add(out, outBytes, outReadFirst, true, &host));
    *hostOut = host;
  }
  return Status::ok();
}

Status refuseCapture(device::Device* dev, void* stream, const char* what) {
  bool capturing = false;
  LOOM_TRY(dev->isCapturing(stream, &capturing));
  if (!capturing) return Status::ok();
  return errorf(loomInvalidUsage,
                "%s: the stream is being captured into a graph, and loom's stream-ordered calls "
                "are not capturable (each hands its call to loom's progress thread once, from a "
                "host function): make the call outside the capture",
                what);
}

Status itemFor(device::Device* dev, void* stream, const CallDesc& call, Item* it) {
  LOOM_TRY(refuseCapture(dev, stream, collectives::collectiveName(call.args.coll)));
  it->stream = stream;
  it->coll = call;
  // An alltoallv need not write every element of its output: what it skips must stay as it was.
  const bool outReadFirst = call.args.coll == collectives::Collective::AlltoAllv;
  void* out = nullptr;
  LOOM_TRY(stage(dev, *it, call.input, call.inputBytes, call.output, call.outputBytes,
                 outReadFirst, &it->coll.input, &out));
  it->coll.output = out;
  if (call.op >= loomNumOps)
    it->premul = std::make_shared<const PreMulSum>(it->comm->preMulSums[size_t(call.op) - loomNumOps]);
  LOOM_TRACE("COLL", "%s of %zu bytes: stream-ordered on the %s device, %zu buffer(s) staged "
             "through host memory, reduced on the host",
             collectives::collectiveName(call.args.coll),
             std::max(call.inputBytes, call.outputBytes), dev->name(), it->staged.size());
  return Status::ok();
}

Status p2pItemFor(device::Device* dev, void* stream, const P2PCall& call, Item* it) {
  const bool send = call.op.kind == collectives::P2POp::Kind::Send;
  LOOM_TRY(refuseCapture(dev, stream, send ? "loomSend" : "loomRecv"));
  it->stream = stream;
  it->isP2P = true;
  it->p2p = call;
  const void* in = nullptr;
  void* out = nullptr;
  LOOM_TRY(stage(dev, *it, send ? call.buffer : nullptr, send ? call.op.bytes : 0,
                 send ? nullptr : call.buffer, send ? 0 : call.op.bytes, false, &in, &out));
  it->p2p.buffer = send ? const_cast<void*>(in) : out;
  LOOM_TRACE("COLL", "%s of %zu bytes: stream-ordered on the %s device, %zu buffer(s) staged",
             send ? "send" : "recv", call.op.bytes, dev->name(), it->staged.size());
  return Status::ok();
}

// How far an enqueue got: the streams whose arrival was enqueued, and per job the letGo
// enqueued (a runtime may refuse any step).
struct Progress {
  int arrivals = 0;
  std::vector<int> letGos;
};

// The gate's work on stream s: copies in, the arrival, a wait per job, copies out, the releases.
Status enqueueOn(Gate* gate, void* s, int64_t waitMs, Progress* done) {
  device::Device* dev = gate->jobs[0]->dev;
  for (const Job* job : gate->jobs)
    for (const Item& it : job->items)
      for (const Staged& st : it.staged)
        if (it.stream == s && st.in) LOOM_TRY(dev->copyAsync(st.host, st.user, st.bytes, s));
  LOOM_TRY(dev->launchHostFunc(s, arrive, gate));
  ++done->arrivals;
  for (const Job* job : gate->jobs)
    if (touches(job, s)) LOOM_TRY(dev->waitFlag(s, job->flag, waitMs));
  for (const Job* job : gate->jobs)
    for (const Item& it : job->items)
      for (const Staged& st : it.staged)
        if (it.stream == s && st.out) LOOM_TRY(dev->copyAsync(st.user, st.host, st.bytes, s));
  for (size_t j = 0; j < gate->jobs.size(); ++j)
    if (touches(gate->jobs[j], s)) {
      LOOM_TRY(dev->launchHostFunc(s, letGo, gate->jobs[j]));
      ++done->letGos[j];
    }
  return Status::ok();
}

// An enqueue that failed part way: its jobs still go to their progress threads, which fail them
// without running them (and their communicators): their numbers must be used, or the calls
// after them would wait. What the streams will never do is counted out.
void abandon(Gate* gate, const Progress& done) {
  for (size_t j = 0; j < gate->jobs.size(); ++j) {
    Job* job = gate->jobs[j];
    job->abandoned.store(true);
    int streams = 0;
    for (void* s : gate->streams) streams += touches(job, s) ? 1 : 0;
    job->refs.fetch_sub(streams - done.letGos[j]);  // the launcher's stays: never 0 here
  }
  const int never = int(gate->streams.size()) - done.arrivals;
  if (never > 0 && gate->toArrive.fetch_sub(never) == never) postAll(gate);
  gate->refs.fetch_sub(never);  // the launcher's stays: never 0 here
}

// Enqueues the jobs (one per communicator) on their streams, behind one gate (see the top of
// the file). The jobs are the streams' from here.
Status launch(std::vector<Job*> jobs) {
  for (Job* job : jobs) {
    Status st = job->makeFlag();
    if (!st.isOk()) {
      for (Job* j : jobs) delete j;
      return st;
    }
  }
  auto* gate = new Gate;
  gate->jobs = std::move(jobs);
  int64_t waitMs = -1;
  for (Job* job : gate->jobs) {
    loomComm* comm = job->comm;
    if (!comm->ordered) comm->ordered = std::make_shared<OrderedQueue>(comm);
    job->queue = comm->ordered;
    job->queue->number(job);
    int streams = 0;
    for (const Item& it : job->items) {
      auto& all = gate->streams;
      if (std::find(all.begin(), all.end(), it.stream) == all.end()) all.push_back(it.stream);
    }
    for (void* s : gate->streams) streams += touches(job, s) ? 1 : 0;
    job->refs.store(streams + 2);  // + the progress thread's, + the launcher's until it returns
    // A stream waits at most as long as the calls queued before this one and it may take.
    const int64_t timeout = comm->impl->timeoutMs();
    const int pending = comm->orderedPending.fetch_add(1) + 1;
    if (timeout >= 0) waitMs = std::max(waitMs, timeout * pending + 10000);
  }
  const int n = int(gate->streams.size());
  gate->toArrive.store(n);
  gate->refs.store(n + 1);  // each stream's arrival, and the launcher's until it returns
  Progress done;
  done.letGos.assign(gate->jobs.size(), 0);
  Status st;
  for (void* s : gate->streams) {
    st = enqueueOn(gate, s, waitMs, &done);
    if (!st.isOk()) break;
  }
  if (!st.isOk()) abandon(gate, done);
  for (Job* job : gate->jobs) letGo(job);  // the launcher's references
  if (gate->refs.fetch_sub(1) == 1) delete gate;
  return st;
}

Status launchOne(loomComm* comm, device::Device* dev, Item&& it) {
  auto* job = new Job;
  job->comm = comm;
  job->dev = dev;
  job->items.push_back(std::move(it));
  return launch({job});
}

// The thread's stream-ordered calls in the group being queued.
struct Queued {
  device::Device* dev;
  Item item;
};
thread_local std::vector<Queued> tQueued;

}  // namespace

namespace {

// A described item: kept for the group's end, or enqueued now.
Status enqueueItem(device::Device* dev, Item&& it, Status described) {
  // A communicator known to have failed refuses now rather than from the stream.
  if (described.isOk()) described = it.comm->impl->usable();
  if (!described.isOk()) {
    releaseStaging(dev, it.staged);
    return described;
  }
  if (inGroup()) {
    tQueued.push_back({dev, std::move(it)});
    return Status::ok();
  }
  loomComm* comm = it.comm;
  return launchOne(comm, dev, std::move(it));
}

}  // namespace

Status enqueueCollective(loomComm* comm, device::Device* dev, void* stream, const CallDesc& call) {
  Item it;
  it.comm = comm;
  Status st = itemFor(dev, stream, call, &it);
  return enqueueItem(dev, std::move(it), st);
}

Status enqueueP2P(loomComm* comm, device::Device* dev, void* stream, const P2PCall& call) {
  Item it;
  it.comm = comm;
  Status st = p2pItemFor(dev, stream, call, &it);
  return enqueueItem(dev, std::move(it), st);
}

Status enqueueGroup(bool (*hostCallsOf)(loomComm*, void*), void* ctx) {
  std::vector<Queued> queued;
  queued.swap(tQueued);
  Status first;
  std::vector<Job*> jobs;
  for (Queued& q : queued) {
    loomComm* c = q.item.comm;
    auto same = [c](Job* j) { return j->comm == c; };
    auto found = std::find_if(jobs.begin(), jobs.end(), same);
    if (found == jobs.end()) {
      jobs.push_back(new Job);
      jobs.back()->comm = c;
      jobs.back()->dev = q.dev;
      found = jobs.end() - 1;
    }
    (*found)->items.push_back(std::move(q.item));
  }
  std::vector<Job*> ready;
  for (Job* job : jobs) {
    Status st = checkComm(job->comm, "loomGroupEnd");
    if (st.isOk() && hostCallsOf(job->comm, ctx))
      st = errorf(loomInvalidUsage,
                  "loomGroupEnd: the group holds both stream-ordered calls (device buffers or a "
                  "stream) and host calls of one communicator; make them all one kind");
    if (st.isOk()) ready.push_back(job);
    else delete job;
    if (!st.isOk() && first.isOk()) first = st;
  }
  if (!ready.empty()) {
    Status st = launch(std::move(ready));
    if (!st.isOk() && first.isOk()) first = st;
  }
  return first;
}

void dropGroup() {
  for (Queued& q : tQueued) releaseStaging(q.dev, q.item.staged);
  tQueued.clear();
}

Status awaitOrderedSlow(loomComm* comm) {
  if (tOnProgressThread) return Status::ok();
  Deadline deadline(comm->impl->timeoutMs());
  while (comm->orderedPending.load(std::memory_order_acquire) > 0) {
    if (deadline.expired())
      return errorf(loomTimeout,
                    "a host call waited %lld ms for the communicator's earlier stream-ordered "
                    "calls to run (are their streams blocked?)",
                    (long long)comm->impl->timeoutMs());
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return Status::ok();
}

void stopOrdered(loomComm* comm) {
  if (!comm->ordered) return;
  comm->ordered->stop();
  comm->ordered.reset();  // jobs still on streams keep the stopped queue alive
}

}  // namespace loom
