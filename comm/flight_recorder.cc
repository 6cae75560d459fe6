#include "comm/flight_recorder.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <mutex>
#include <sstream>

#include "base/clock.h"
#include "base/dtype.h"
#include "base/status.h"

namespace loom {

struct FlightRecorder::Entry {
  std::atomic<uint64_t> call{0};        // 1-based; 0: never used
  std::atomic<uint64_t> collNumber{0};  // 0: not a collective
  std::atomic<uint64_t> count{0}, bytes{0};
  std::atomic<uint64_t> startNs{0}, endNs{0};
  std::atomic<const char*> collective{nullptr}, algorithm{nullptr};
  std::atomic<int32_t> dtype{0}, op{0}, root{0}, lanes{0};
  std::atomic<uint8_t> state{0};
};

namespace {

constexpr auto kRelaxed = std::memory_order_relaxed;

// The live recorders, for the signal handlers: a fixed table, so that a handler walks it without
// a lock. A process with more live communicators than this records them all but dumps only
// these from a signal.
constexpr int kMaxLive = 256;
std::atomic<const FlightRecorder*> gLive[kMaxLive];

void addLive(const FlightRecorder* r) {
  for (auto& slot : gLive) {
    const FlightRecorder* empty = nullptr;
    if (slot.compare_exchange_strong(empty, r)) return;
  }
}

void removeLive(const FlightRecorder* r) {
  for (auto& slot : gLive) {
    const FlightRecorder* mine = r;
    if (slot.compare_exchange_strong(mine, nullptr)) return;
  }
}

void dumpLive(DumpWhen when, const char* reason) {
  for (auto& slot : gLive)
    if (const FlightRecorder* r = slot.load())
      if (r->dumpsOn(when)) (void)r->dump(reason, nullptr, nullptr);
}

constexpr int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
struct sigaction gPrevious[NSIG];

// Signal names for the dump's reason, without snprintf (not async-signal-safe).
const char* fatalReason(int sig) {
  switch (sig) {
    case SIGSEGV: return "signal SIGSEGV";
    case SIGBUS: return "signal SIGBUS";
    case SIGFPE: return "signal SIGFPE";
    case SIGILL: return "signal SIGILL";
    case SIGABRT: return "signal SIGABRT";
  }
  return "signal";
}

// Dumps, then lets the signal do what it did before: the previous disposition is restored and
// the signal raised again, delivered as this handler returns.
void onFatalSignal(int sig) {
  dumpLive(kDumpOnFatal, fatalReason(sig));
  sigaction(sig, &gPrevious[sig], nullptr);
  raise(sig);
}

void onUsr1(int sig, siginfo_t* info, void* context) {
  dumpLive(kDumpOnUsr1, "signal SIGUSR1");
  const struct sigaction& prev = gPrevious[sig];
  if ((prev.sa_flags & SA_SIGINFO) && prev.sa_sigaction != nullptr)
    prev.sa_sigaction(sig, info, context);
  else if (!(prev.sa_flags & SA_SIGINFO) && prev.sa_handler != SIG_DFL &&
           prev.sa_handler != SIG_IGN)
    prev.sa_handler(sig);
}

void installHandlers(unsigned dumpWhen) {
  static std::once_flag fatalOnce, usr1Once;
  if (dumpWhen & kDumpOnFatal)
    std::call_once(fatalOnce, [] {
      for (int sig : kFatalSignals) {
        struct sigaction sa {};
        sa.sa_handler = onFatalSignal;
        sigemptyset(&sa.sa_mask);
        sigaction(sig, &sa, &gPrevious[sig]);
      }
    });
  if (dumpWhen & kDumpOnUsr1)
    std::call_once(usr1Once, [] {
      struct sigaction sa {};
      sa.sa_sigaction = onUsr1;
      sa.sa_flags = SA_SIGINFO | SA_RESTART;
      sigemptyset(&sa.sa_mask);
      sigaction(SIGUSR1, &sa, &gPrevious[SIGUSR1]);
    });
}

// JSON out through write(2) from a fixed buffer: async-signal-safe.
class SafeJson {
 public:
  explicit SafeJson(int fd) : fd_(fd) {}
  ~SafeJson() { flush(); }
  bool ok() const { return ok_; }
  void raw(const char* s) {
    while (*s) put(*s++);
  }
  void string(const char* s) {
    if (s == nullptr) return raw("null");
    put('"');
    for (; *s; ++s) {
      unsigned char c = (unsigned char)*s;
      if (c == '"' || c == '\\') {
        put('\\');
        put(char(c));
      } else if (c < 0x20) {
        raw("\\u00");
        put("0123456789abcdef"[c >> 4]);
        put("0123456789abcdef"[c & 15]);
      } else {
        put(char(c));
      }
    }
    put('"');
  }
  void number(uint64_t v) {
    char digits[24];
    int n = 0;
    do digits[n++] = char('0' + v % 10); while ((v /= 10) != 0);
    while (n > 0) put(digits[--n]);
  }
  void number(int64_t v) {
    if (v < 0) {
      put('-');
      number(uint64_t(-(v + 1)) + 1);
    } else {
      number(uint64_t(v));
    }
  }
  void hex(uint64_t v) {
    put('"');
    for (int shift = 60; shift >= 0; shift -= 4) put("0123456789abcdef"[(v >> shift) & 15]);
    put('"');
  }
  // "name": prefixed by a comma unless first.
  void key(const char* name, bool first = false) {
    if (!first) put(',');
    string(name);
    put(':');
  }
  void flush() {
    size_t off = 0;
    while (off < n_ && ok_) {
      ssize_t w = write(fd_, buf_ + off, n_ - off);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) ok_ = false;
      else off += size_t(w);
    }
    n_ = 0;
  }

 private:
  void put(char c) {
    if (n_ == sizeof(buf_)) flush();
    buf_[n_++] = c;
  }
  int fd_;
  bool ok_ = true;
  size_t n_ = 0;
  char buf_[4096];
};

const char* stateName(FlightRecorder::State s) {
  switch (s) {
    case FlightRecorder::State::Queued: return "queued";
    case FlightRecorder::State::Running: return "running";
    case FlightRecorder::State::Done: return "done";
    case FlightRecorder::State::Failed: return "failed";
  }
  return "unknown";
}

uint64_t realNowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// Copies s into dst (size n), NUL-terminated, truncated.
void copyTruncated(char* dst, size_t n, const char* s) {
  size_t len = strnlen(s, n - 1);
  memcpy(dst, s, len);
  dst[len] = '\0';
}

}  // namespace

FlightRecorder::FlightRecorder() = default;

FlightRecorder::~FlightRecorder() {
  if (enabled()) removeLive(this);
}

void FlightRecorder::configure(const FlightRecorderOptions& options, uint64_t commHash, int rank,
                               int nranks) {
  capacity_ = options.capacity;
  dumpWhen_ = options.dumpWhen;
  rank_ = rank, nranks_ = nranks;
  commHash_ = commHash;
  if (capacity_ == 0) return;
  entries_ = std::make_unique<Entry[]>(capacity_);
  steadyAtStartNs_ = nowNs();
  realAtStartNs_ = realNowNs();
  std::string path = strprintf("%s/loom-trace-%016llx-rank%d.json",
                               options.dir.empty() ? "." : options.dir.c_str(),
                               (unsigned long long)commHash, rank);
  copyTruncated(path_, sizeof(path_), path.c_str());
  addLive(this);
  installHandlers(dumpWhen_);
}

FlightRecorder::Entry* FlightRecorder::entryOf(uint64_t call) const {
  if (call == 0 || capacity_ == 0) return nullptr;
  Entry& e = entries_[(call - 1) % capacity_];
  return e.call.load(kRelaxed) == call ? &e : nullptr;
}

uint64_t FlightRecorder::open(const char* collective, bool isCollective, uint64_t count,
                              uint64_t bytes, loomDataType_t dtype, loomRedOp_t op, int root,
                              State state) {
  if (capacity_ == 0) return 0;
  const uint64_t call = calls_.load(kRelaxed) + 1;
  Entry& e = entries_[(call - 1) % capacity_];
  e.call.store(0, kRelaxed);  // a dump meanwhile skips the entry being rewritten
  e.collNumber.store(isCollective ? ++collectives_ : 0, kRelaxed);
  e.count.store(count, kRelaxed);
  e.bytes.store(bytes, kRelaxed);
  e.startNs.store(nowNs(), kRelaxed);
  e.endNs.store(0, kRelaxed);
  e.collective.store(collective, kRelaxed);
  e.algorithm.store(nullptr, kRelaxed);
  e.dtype.store(int32_t(dtype), kRelaxed);
  e.op.store(int32_t(op), kRelaxed);
  e.root.store(root, kRelaxed);
  e.lanes.store(0, kRelaxed);
  e.state.store(uint8_t(state), kRelaxed);
  e.call.store(call, std::memory_order_release);
  calls_.store(call, std::memory_order_release);
  return call;
}

void FlightRecorder::setAlgorithm(uint64_t call, const char* algorithm, int lanes) {
  if (Entry* e = entryOf(call)) {
    e->algorithm.store(algorithm, kRelaxed);
    e->lanes.store(lanes, kRelaxed);
  }
}

void FlightRecorder::setState(uint64_t call, State state) {
  if (Entry* e = entryOf(call)) {
    if (state == State::Running) e->startNs.store(nowNs(), kRelaxed);
    e->state.store(uint8_t(state), kRelaxed);
  }
}

void FlightRecorder::close(uint64_t call, bool ok) {
  if (Entry* e = entryOf(call)) {
    e->endNs.store(nowNs(), kRelaxed);
    e->state.store(uint8_t(ok ? State::Done : State::Failed), kRelaxed);
    if (!ok && failedCall_.load(kRelaxed) == 0) failedCall_.store(call, kRelaxed);
  }
}

void FlightRecorder::noteFailure(const std::string& message) {
  if (capacity_ == 0 || failure_[0] != '\0') return;
  copyTruncated(failure_, sizeof(failure_), message.c_str());
}

loomResult_t FlightRecorder::dump(const char* reason, const char* path,
                                  std::string* written) const {
  if (capacity_ == 0) return loomInvalidUsage;
  const char* file = path != nullptr && path[0] != '\0' ? path : path_;
  int fd = ::open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return loomSystemError;
  const auto usAt = [&](uint64_t steadyNs) {
    return steadyNs == 0 ? 0 : (realAtStartNs_ + (steadyNs - steadyAtStartNs_)) / 1000;
  };
  bool ok;
  {
    SafeJson j(fd);
    j.raw("{");
    j.key("format", true), j.string("loom-flight-recorder 1");
    j.key("comm"), j.hex(commHash_);
    j.key("rank"), j.number(int64_t(rank_));
    j.key("nranks"), j.number(int64_t(nranks_));
    j.key("pid"), j.number(int64_t(getpid()));
    j.key("reason"), j.string(reason);
    j.key("dumped_at_us"), j.number(realNowNs() / 1000);
    j.key("capacity"), j.number(uint64_t(capacity_));
    const uint64_t calls = calls_.load(std::memory_order_acquire);
    j.key("calls_recorded"), j.number(calls);
    j.key("failure"), j.string(failure_[0] != '\0' ? failure_ : nullptr);
    j.key("failed_call"), j.number(failedCall_.load(kRelaxed));
    j.key("calls"), j.raw("[");
    bool first = true;
    const uint64_t from = calls > capacity_ ? calls - capacity_ + 1 : 1;
    for (uint64_t c = from; c <= calls; ++c) {
      const Entry* e = entryOf(c);
      if (e == nullptr) continue;
      if (!first) j.raw(",");
      first = false;
      j.raw("\n{");
      j.key("call", true), j.number(c);
      const uint64_t collNumber = e->collNumber.load(kRelaxed);
      j.key("collective_number");
      if (collNumber == 0) j.raw("null");
      else j.number(collNumber);
      j.key("collective"), j.string(e->collective.load(kRelaxed));
      j.key("count"), j.number(e->count.load(kRelaxed));
      j.key("bytes"), j.number(e->bytes.load(kRelaxed));
      j.key("dtype"), j.string(dtypeName(loomDataType_t(e->dtype.load(kRelaxed))));
      j.key("op"), j.string(opName(loomRedOp_t(e->op.load(kRelaxed))));
      j.key("root"), j.number(int64_t(e->root.load(kRelaxed)));
      j.key("algorithm"), j.string(e->algorithm.load(kRelaxed));
      j.key("lanes"), j.number(int64_t(e->lanes.load(kRelaxed)));
      j.key("state"), j.string(stateName(State(e->state.load(kRelaxed))));
      j.key("start_us"), j.number(usAt(e->startNs.load(kRelaxed)));
      j.key("end_us"), j.number(usAt(e->endNs.load(kRelaxed)));
      j.raw("}");
    }
    j.raw("]}\n");
    j.flush();
    ok = j.ok();
  }
  ::close(fd);
  if (!ok) return loomSystemError;
  if (written != nullptr) *written = file;
  return loomSuccess;
}

loomResult_t parseDumpWhen(const std::string& text, unsigned* out, std::string* error) {
  unsigned bits = 0;
  std::stringstream words(text);
  std::string w;
  while (std::getline(words, w, ',')) {
    if (w == "error") bits |= kDumpOnError;
    else if (w == "abort") bits |= kDumpOnAbort;
    else if (w == "fatal") bits |= kDumpOnFatal;
    else if (w == "usr1") bits |= kDumpOnUsr1;
    else if (w == "none" || w.empty()) continue;
    else {
      *error = "LOOM_FLIGHT_RECORDER_DUMP: unknown word '" + w +
               "' (use a comma list of error, abort, fatal, usr1, or none)";
      return loomInvalidArgument;
    }
  }
  *out = bits;
  return loomSuccess;
}

}  // namespace loom
