// The emulated device: what the stream-ordered collectives need of a GPU, on the CPU, made so
// that a host read of device memory fails. Device memory is a range of one memfd mapped twice:
// the addresses handed out are a PROT_NONE mapping (a host load or store there faults), and the
// streams' workers alone reach the bytes, through a second mapping of the same file whose pages
// are readable only while allocated (an overrun by a copy faults on the guard page left after
// every allocation). Fresh allocations are poisoned (0xA5). A stream is a worker thread running
// its queue in order: copies, host functions, waits on a flag.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "base/clock.h"
#include "base/params.h"
#include "device/device.h"

namespace loom::device {
namespace {

constexpr size_t kRegionBytes = size_t(16) << 30;  // address space only: the memfd is sparse
constexpr unsigned char kPoison = 0xA5;

class Memory {
 public:
  Memory() {
    page_ = size_t(sysconf(_SC_PAGESIZE));
    fd_ = memfd_create("loom-emulated-device", MFD_CLOEXEC);
    if (fd_ >= 0 && ftruncate(fd_, off_t(kRegionBytes)) == 0) {
      void* user = mmap(nullptr, kRegionBytes, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd_, 0);
      void* alias = mmap(nullptr, kRegionBytes, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd_, 0);
      if (user != MAP_FAILED && alias != MAP_FAILED) {
        user_ = static_cast<char*>(user);
        alias_ = static_cast<char*>(alias);
      }
    }
    free_[page_] = kRegionBytes - page_;  // offset 0 stays unused: no device pointer is NULL-like
  }

  bool usable() const { return user_ != nullptr; }
  bool contains(const void* p) const {
    auto c = static_cast<const char*>(p);
    return user_ != nullptr && c >= user_ && c < user_ + kRegionBytes;
  }

  Status alloc(void** p, size_t bytes) {
    if (!usable()) return errorf(loomSystemError, "the emulated device has no memory (memfd)");
    size_t size = (std::max<size_t>(bytes, 1) + page_ - 1) / page_ * page_;
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < size + page_) continue;  // + the guard page after it
      size_t off = it->first, left = it->second - size - page_;
      free_.erase(it);
      if (left > 0) free_[off + size + page_] = left;
      used_[off] = size;
      if (mprotect(alias_ + off, size, PROT_READ | PROT_WRITE) != 0)
        return errorf(loomSystemError, "emulated device: mprotect failed: %s", strerror(errno));
      memset(alias_ + off, kPoison, size);
      *p = user_ + off;
      return Status::ok();
    }
    return errorf(loomSystemError, "the emulated device is out of memory (%zu bytes asked)", bytes);
  }

  Status release(void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = contains(p) ? used_.find(size_t(static_cast<char*>(p) - user_)) : used_.end();
    if (it == used_.end())
      return errorf(loomInvalidArgument, "%p is not an allocation of the emulated device", p);
    size_t off = it->first, size = it->second;
    used_.erase(it);
    mprotect(alias_ + off, size, PROT_NONE);
    fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off_t(off), off_t(size));
    free_[off] = size + page_;  // not merged with neighbours: the region is large
    return Status::ok();
  }

  // Where the workers reach [p, p + bytes): device memory through the alias, host memory as is.
  // A range that leaves its allocation is an error, not a read past it.
  Status reach(const void* p, size_t bytes, char** out) {
    if (!contains(p)) {
      *out = const_cast<char*>(static_cast<const char*>(p));
      return Status::ok();
    }
    size_t off = size_t(static_cast<const char*>(p) - user_);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = used_.upper_bound(off);
    if (it == used_.begin() || (--it, off + bytes > it->first + it->second))
      return errorf(loomInvalidArgument,
                    "emulated device: %zu bytes at %p leave the allocation they start in", bytes,
                    p);
    *out = alias_ + off;
    return Status::ok();
  }

 private:
  size_t page_ = 4096;
  int fd_ = -1;
  char* user_ = nullptr;
  char* alias_ = nullptr;
  std::mutex mu_;
  std::map<size_t, size_t> free_, used_;  // offset -> bytes
};

// An event: how many times it was recorded, and the last record a stream has reached.
struct Event {
  std::atomic<uint64_t> recorded{0}, reached{0};
};

struct Op {
  enum class Kind { Copy, HostFn, Wait, WriteValue, WaitValue } kind;
  char* dst = nullptr;
  const char* src = nullptr;
  size_t bytes = 0;
  HostFn fn = nullptr;
  void* arg = nullptr;
  const std::atomic<uint32_t>* flag = nullptr;
  std::atomic<uint64_t>* value = nullptr;  // WriteValue's target, WaitValue's word
  uint64_t operand = 0;                    // what WriteValue writes, WaitValue awaits (at least)
  int64_t timeoutMs = 0;
};

// An in-order queue and the thread that runs it. After a failure (a failed wait) the stream
// skips its copies and waits, as a CUDA stream does after an error, but still runs its host
// functions: they are loom's handshakes, which the other ranks and the progress thread await.
class Stream {
 public:
  Stream() : worker_([this] { run(); }) {}
  ~Stream() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  void push(const Op& op) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ops_.push_back(op);
      ++enqueued_;
    }
    cv_.notify_all();
  }

  Status synchronize(int64_t timeoutMs) {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t target = enqueued_;
    Deadline deadline(timeoutMs);
    while (completed_ < target) {
      if (deadline.expired())
        return errorf(loomTimeout, "emulated stream: %llu operation(s) still queued after %lld ms",
                      (unsigned long long)(target - completed_), (long long)timeoutMs);
      cv_.wait_for(lock, std::chrono::milliseconds(10));
    }
    return error_;
  }

  bool capturing = false;

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !ops_.empty(); });
      if (ops_.empty()) return;
      Op op = ops_.front();
      ops_.pop_front();
      bool failed = !error_.isOk();
      lock.unlock();
      Status st = failed && op.kind != Op::Kind::HostFn ? Status::ok() : execute(op);
      lock.lock();
      if (!st.isOk() && error_.isOk()) error_ = st;
      ++completed_;
      cv_.notify_all();
    }
  }

  static Status execute(const Op& op) {
    switch (op.kind) {
      case Op::Kind::Copy:
        memmove(op.dst, op.src, op.bytes);
        return Status::ok();
      case Op::Kind::HostFn:
        op.fn(op.arg);
        return Status::ok();
      case Op::Kind::WriteValue:
        op.value->store(op.operand, std::memory_order_release);
        return Status::ok();
      case Op::Kind::WaitValue: {
        Deadline deadline(op.timeoutMs);
        while (op.value->load(std::memory_order_acquire) < op.operand)
          if (deadline.expired())
            return errorf(loomTimeout, "emulated stream: an event wait passed %lld ms",
                          (long long)op.timeoutMs);
          else
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        return Status::ok();
      }
      case Op::Kind::Wait: {
        Deadline deadline(op.timeoutMs);
        uint32_t v;
        while ((v = op.flag->load(std::memory_order_acquire)) == kPending && !deadline.expired())
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        if (v == kDone) return Status::ok();
        return v == kFailed ? errorf(loomRemoteError,
                                     "emulated stream: the stream-ordered call it waited for "
                                     "failed (loomGetLastError of the communicator says why)")
                            : errorf(loomTimeout, "emulated stream: a wait passed %lld ms",
                                     (long long)op.timeoutMs);
      }
    }
    return Status::ok();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> ops_;
  uint64_t enqueued_ = 0, completed_ = 0;
  bool stop_ = false;
  Status error_;
  std::thread worker_;
};

class Emulated final : public Device {
 public:
  const char* name() const override { return "emulated"; }
  bool isDeviceMemory(const void* p) override { return memory_.contains(p); }
  Status checkRange(const void* p, size_t bytes) override {
    char* reached = nullptr;
    return memory_.reach(p, bytes, &reached);
  }
  Status allocHost(void** p, size_t bytes) override {
    *p = ::malloc(std::max<size_t>(bytes, 1));
    return *p ? Status::ok() : errorf(loomSystemError, "out of host memory (%zu bytes)", bytes);
  }
  void freeHost(void* p) override { ::free(p); }

  Status copyAsync(void* dst, const void* src, size_t bytes, void* stream) override {
    Op op{Op::Kind::Copy};
    op.bytes = bytes;
    LOOM_TRY(memory_.reach(dst, bytes, &op.dst));
    char* s = nullptr;
    LOOM_TRY(memory_.reach(src, bytes, &s));
    op.src = s;
    return enqueue(stream, op);
  }
  Status launchHostFunc(void* stream, HostFn fn, void* arg) override {
    Op op{Op::Kind::HostFn};
    op.fn = fn;
    op.arg = arg;
    return enqueue(stream, op);
  }
  Status waitFlag(void* stream, const std::atomic<uint32_t>* flag, int64_t timeoutMs) override {
    Op op{Op::Kind::Wait};
    op.flag = flag;
    op.timeoutMs = timeoutMs;
    return enqueue(stream, op);
  }
  Status isCapturing(void* stream, bool* capturing) override {
    *capturing = of(stream)->capturing;
    return Status::ok();
  }

  Status malloc(void** p, size_t bytes) override { return memory_.alloc(p, bytes); }
  Status free(void* p) override { return p == nullptr ? Status::ok() : memory_.release(p); }
  // The device's own copy engine: it alone may reach device memory, as the workers do.
  Status copy(void* dst, const void* src, size_t bytes) override {
    char *to = nullptr, *from = nullptr;
    LOOM_TRY(memory_.reach(dst, bytes, &to));
    LOOM_TRY(memory_.reach(src, bytes, &from));
    memmove(to, from, bytes);
    return Status::ok();
  }
  Status streamCreate(void** stream) override {
    *stream = new Stream;
    return Status::ok();
  }
  Status streamDestroy(void* stream) override {
    if (stream == nullptr) return errorf(loomInvalidArgument, "the default stream is not destroyed");
    delete static_cast<Stream*>(stream);
    return Status::ok();
  }
  Status streamSynchronize(void* stream, int64_t timeoutMs) override {
    return of(stream)->synchronize(timeoutMs);
  }
  Status beginCapture(void* stream) override {
    of(stream)->capturing = true;
    return Status::ok();
  }
  Status endCapture(void* stream) override {
    of(stream)->capturing = false;
    return Status::ok();
  }
  Status eventCreate(void** event) override {
    *event = new Event;
    return Status::ok();
  }
  Status eventDestroy(void* event) override {
    delete static_cast<Event*>(event);
    return Status::ok();
  }
  // A record is a value write of its number; a wait, for the number recorded last (none: no
  // wait, as CUDA's), with the deadline of every wait.
  Status eventRecord(void* event, void* stream) override {
    auto* e = static_cast<Event*>(event);
    Op op{Op::Kind::WriteValue};
    op.value = &e->reached;
    op.operand = ++e->recorded;
    return enqueue(stream, op);
  }
  Status streamWaitEvent(void* stream, void* event) override {
    auto* e = static_cast<Event*>(event);
    Op op{Op::Kind::WaitValue};
    op.value = &e->reached;
    op.operand = e->recorded.load();
    op.timeoutMs = params::getInt("LOOM_TIMEOUT_MS");
    return op.operand == 0 ? Status::ok() : enqueue(stream, op);
  }

 private:
  Stream* of(void* stream) {
    if (stream != nullptr) return static_cast<Stream*>(stream);
    std::call_once(defaultOnce_, [this] { default_ = new Stream; });  // lives with the process
    return default_;
  }
  Status enqueue(void* stream, const Op& op) {
    of(stream)->push(op);
    return Status::ok();
  }

  Memory memory_;
  std::once_flag defaultOnce_;
  Stream* default_ = nullptr;
};

}  // namespace

Device* makeEmulated() { return new Emulated; }

}  // namespace loom::device
