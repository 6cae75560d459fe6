#include "perf/sweep.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "base/status.h"
#include "loom/loom_device.h"
#include "perf/check.h"
#include "perf/race.h"

namespace loom::perf {

int itersForSize(int iters, size_t bytes, size_t budgetBytes) {
  if (iters <= 0 || budgetBytes == 0 || bytes == 0) return iters;
  const size_t fit = budgetBytes / bytes;
  if (fit >= static_cast<size_t>(iters)) return iters;
  return fit < 1 ? 1 : static_cast<int>(fit);
}

double aggregateTimes(Aggregate a, const std::vector<double>& t) {
  if (t.empty()) return 0;
  switch (a) {
    case Aggregate::kRank0:
      return t[0];
    case Aggregate::kMin:
      return *std::min_element(t.begin(), t.end());
    case Aggregate::kMax:
      return *std::max_element(t.begin(), t.end());
    case Aggregate::kAvg:
      break;
  }
  double sum = 0;
  for (double v : t) sum += v;
  return sum / static_cast<double>(t.size());
}

bool Backend::barrier() {
  char mine = 0;
  std::vector<char> all(static_cast<size_t>(nranks()));
  return allGather(&mine, all.data(), 1);
}

void* Backend::allocateShared(size_t bytes) { return std::aligned_alloc(4096, bytes); }

void Backend::releaseShared(void* p) { std::free(p); }

size_t Backend::inPlaceOutputOffset(Collective c, const CollSizes& sizes) const {
  (void)c;
  return sizes.recvInPlaceOffset * static_cast<size_t>(rank());
}

namespace {

struct BufferRelease {
  Backend* shared;  // null: std::free
  bool device;      // --mem device: loomDeviceFree
  void operator()(char* p) const {
    if (device) {
      loomDeviceFree(p);
    } else if (shared) {
      shared->releaseShared(p);
    } else {
      std::free(p);
    }
  }
};
using Buffer = std::unique_ptr<char, BufferRelease>;

// Page-aligned and touched once, so first-touch page faults stay out of the timings. Device
// memory is zeroed by a copy from the host.
Buffer allocateBuffer(size_t bytes, Backend* shared, bool device) {
  const size_t kAlign = 4096;
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  void* p = nullptr;
  if (device) {
    if (loomDeviceMalloc(&p, rounded) != loomSuccess) p = nullptr;
  } else {
    p = shared ? shared->allocateShared(rounded) : std::aligned_alloc(kAlign, rounded);
  }
  Buffer b(static_cast<char*>(p), BufferRelease{shared, device});
  if (b && device) loomDeviceMemcpy(b.get(), std::vector<char>(rounded, 0).data(), rounded);
  else if (b) std::memset(b.get(), 0, rounded);
  return b;
}

// --mem device: the stream every call is enqueued on, and host copies of the two buffers that
// the check fills and reads (device memory is not host memory).
struct DeviceSide {
  void* stream = nullptr;
  char* send = nullptr;
  char* recv = nullptr;
  size_t bytes = 0;
  std::vector<char> hostSend, hostRecv;

  bool synchronize() const {
    const loomResult_t r = loomStreamSynchronize(stream, -1);
    if (r != loomSuccess)
      std::fprintf(stderr, "loom-perf: the stream failed: %s: %s\n", loomGetErrorString(r),
                   loomGetLastError(nullptr));
    return r == loomSuccess;
  }
  // The host copy of a place in either buffer.
  char* host(const void* p) {
    const char* c = static_cast<const char*>(p);
    if (c >= send && c < send + bytes) return hostSend.data() + (c - send);
    return hostRecv.data() + (c - recv);
  }
  void toDevice() {
    loomDeviceMemcpy(send, hostSend.data(), bytes);
    loomDeviceMemcpy(recv, hostRecv.data(), bytes);
  }
  void fromDevice() { loomDeviceMemcpy(hostRecv.data(), recv, bytes); }
};

constexpr size_t kWarmupShare = 8;

// A rank's pid and host; hosts are told apart as loom does, by name and network namespace,
// so that namespace "hosts" on one machine (perf/netns-cluster.sh) count as hosts.
struct RankId {
  int32_t pid;
  char host[60];
  uint64_t netns;
};

struct SizeResult {
  double timeUs[2];
  int64_t wrong[2];
  int32_t failed;
  int32_t pad;
};

// The progress line: only on a terminal, so logs and pipes stay byte-identical to
// nccl-tests' output. Time left is extrapolated from the cost of what is done, with a size's
// cost taken as its timed bytes plus a fixed per-call share for the latency-bound sizes.
class Progress {
 public:
  Progress(bool enabled, std::vector<double> costs)
      : enabled_(enabled && isatty(STDERR_FILENO)), costs_(std::move(costs)) {
    for (double c : costs_) total_ += c;
  }
  ~Progress() {
    if (shown_) std::fputs("\r\033[K", stderr);
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void done(size_t index, size_t bytes) {
    if (!enabled_) return;
    done_ += costs_[index];
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double left = done_ > 0 ? elapsed * (total_ - done_) / done_ : 0;
    std::fprintf(stderr, "\r\033[K[%zu/%zu] size %zu B done, about %.0f s left", index + 1,
                 costs_.size(), bytes, left);
    std::fflush(stderr);
    shown_ = true;
  }

 private:
  bool enabled_;
  bool shown_ = false;
  std::vector<double> costs_;
  double total_ = 0, done_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// A collective's per-call latency, in bytes of bandwidth, for the progress estimate.
constexpr double kCallCostBytes = 64 << 10;

// One contestant's turn at one size: for each placement the warm-up and the timed batch, then
// the check; what the library ran out of place goes to *ran.
SizeResult takeTurn(Backend& backend, const Options& o, const CollSizes& s, loomDataType_t dtype,
                    loomRedOp_t op, int warmup, int iters, char* sendBuf, char* recvBuf,
                    DeviceSide* dev, std::string* ran) {
  const Collective c = o.collective;
  const int n = backend.nranks();
  const int rank = backend.rank();
  const size_t elem = dtypeSize(dtype);
  const size_t bytes = s.bytes(elem);
  SizeResult mine{};
  for (int placement = 0; placement < 2 && !mine.failed; ++placement) {
    const bool inPlace = placement == 1;
    CollCall call{c, dtype, op, o.root, sendBuf, recvBuf, s.paramCount, inPlace,
                  dev ? dev->stream : nullptr};
    if (inPlace) {
      call.send = recvBuf + s.sendInPlaceOffset * static_cast<size_t>(rank) * elem;
      call.recv = recvBuf + s.recvInPlaceOffset * static_cast<size_t>(rank) * elem;
    }
    if (!backend.prepare(call)) {
      mine.failed = 1;
      break;
    }
    bool ok = true;
    for (int i = 0; i < warmup && ok; ++i) ok = backend.run(call);
    if (dev) ok = ok && dev->synchronize();
    ok = ok && backend.barrier();
    // The timed batch: one clock read on each side, nothing else in the loop (but, with device
    // buffers, the stream's synchronisation at its end).
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters && ok; ++i) ok = backend.run(call);
    if (dev) ok = ok && dev->synchronize();
    const auto end = std::chrono::steady_clock::now();
    mine.timeUs[placement] = std::chrono::duration<double, std::micro>(end - start).count() / iters;
    if (placement == 0) *ran = backend.lastAlgorithm();
    mine.wrong[placement] = -1;
    if (ok && o.check) {
      // Poison the output first so that a call which writes nothing cannot pass on
      // what an earlier one left there (0xff: NaN, or a negative or unused integer).
      std::memset(dev ? dev->host(recvBuf) : recvBuf, 0xff, inPlace ? bytes : s.recvCount * elem);
      fillInput(c, dtype, op, n, rank, o.root, s, dev ? dev->host(call.send) : const_cast<void*>(call.send));
      if (dev) dev->toDevice();
      ok = backend.run(call);
      if (dev && (ok = ok && dev->synchronize())) dev->fromDevice();
      char* out = inPlace ? recvBuf + backend.inPlaceOutputOffset(c, s) * elem
                          : static_cast<char*>(call.recv);
      if (dev) out = dev->host(out);
      const bool hasOutput = s.recvCount > 0 && rankHasOutput(c, rank, o.root);
      if (o.injectError && rank == 0 && hasOutput) out[0] = static_cast<char>(out[0] ^ 0x55);
      mine.wrong[placement] =
          static_cast<int64_t>(countWrong(c, dtype, op, n, rank, o.root, s, out));
    }
    if (!ok) mine.failed = 1;
  }
  return mine;
}

}  // namespace

int runSweep(Backend& backend, const Options& o, const std::string& program,
             const std::string& gitCommit) {
  return runRace({Contestant{&backend, "", {}}}, o, program, gitCommit);
}

namespace {

// The (dtype, op) blocks of rows: one unless -d all / -o all; those the backend refuses are
// skipped, with its reason.
struct Blocks {
  std::vector<std::pair<loomDataType_t, loomRedOp_t>> combos;
  std::vector<std::string> skipped;
};

Blocks planBlocks(const Backend& backend, const Options& o) {
  Blocks blocks;
  const Collective c = o.collective;
  for (int d = 0; d < loomNumTypes; ++d) {
    const auto dtype = static_cast<loomDataType_t>(d);
    if (!(o.allDtypes ? dtypeSize(dtype) > 0 : dtype == o.dtype)) continue;
    for (int p = 0; p < loomNumOps; ++p) {
      const auto op = static_cast<loomRedOp_t>(p);
      // Collectives without an op run once per dtype, under the op the options name.
      if (!(o.allOps && collectiveHasOp(c) ? true : op == o.op)) continue;
      const std::string why = backend.unsupported(c, dtype, op);
      if (why.empty()) {
        blocks.combos.emplace_back(dtype, op);
      } else {
        blocks.skipped.push_back(std::string(dtypeName(dtype)) + " " + opName(op) + ": " + why);
      }
    }
  }
  return blocks;
}

// One run of runRace, phase by phase: the header (which needs every rank's id), the buffers,
// each size's rounds, and the closing footer and files.
class RaceRun {
 public:
  RaceRun(const std::vector<Contestant>& contestants, const Options& o, const std::string& program,
          const std::string& gitCommit)
      : contestants_(contestants),
        o_(o),
        program_(program),
        gitCommit_(gitCommit),
        backend_(*contestants[0].backend),
        racers_(contestants.size()),
        race_(racers_ > 1),
        rounds_(race_ ? o.repeats : 1),
        n_(backend_.nranks()),
        leader_(backend_.rank() == 0),
        meta_(racers_),
        results_(racers_),
        wrongOf_(racers_, 0),
        busBwSum_(racers_, 0.0) {}

  int run() {
    const Blocks blocks = planBlocks(backend_, o_);
    std::string why;
    if (blocks.combos.empty())
      why = blocks.skipped.empty() ? "nothing to run" : blocks.skipped.front();
    if (why.empty() && collectiveHasRoot(o_.collective) && o_.root >= n_)
      why = "root is not a rank";
    if (!why.empty()) {
      if (leader_)
        std::fprintf(stderr, "%s: %s: %s\n", program_.c_str(), ncclTestsName(o_.collective),
                     why.c_str());
      return 2;
    }
    if (!introduce(blocks.skipped)) return 3;
    const std::vector<size_t> sweep =
        sizeSweep(o_.minBytes, o_.maxBytes, o_.stepFactor, o_.stepBytes);
    if (!allocateBuffers(sweep)) return 3;
    Progress progress(leader_, progressCosts(blocks.combos.size(), sweep));
    size_t progressIndex = 0;
    for (const auto& [dtype, op] : blocks.combos) {
      for (size_t size : sweep) {
        size_t bytes = 0;
        if (!measureSize(dtype, op, size, &bytes)) return 3;
        if (leader_) progress.done(progressIndex, bytes);
        ++progressIndex;
      }
    }
    return finish();
  }

 private:
  // Exchanges every rank's pid and host; rank 0 then records each contestant's metadata and
  // prints the header, which names them.
  bool introduce(const std::vector<std::string>& skipped) {
    RankId me{};
    me.pid = static_cast<int32_t>(getpid());
    gethostname(me.host, sizeof(me.host) - 1);
    struct stat ns {};
    if (stat("/proc/self/ns/net", &ns) == 0) me.netns = ns.st_ino;
    std::vector<RankId> ids(static_cast<size_t>(n_));
    if (!backend_.allGather(&me, ids.data(), sizeof(RankId))) return false;
    if (!leader_) return true;
    std::vector<std::string> lines;
    std::vector<std::pair<std::string, uint64_t>> hosts;
    for (int r = 0; r < n_; ++r) {
      lines.push_back(rankLine(r, ids[r].pid, ids[r].host));
      const std::pair<std::string, uint64_t> host(ids[r].host, ids[r].netns);
      if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
    }
    recordMetadata(me, int(hosts.size()));
    std::string header = formatHeader(program_, o_, n_, meta_[0].backend, lines);
    if (race_) {
      std::string names;
      for (const Contestant& who : contestants_) names += " " + who.label;
      header.insert(0, strprintf("# --race:%s; %d rounds of them all per size, each row the "
                                 "median (its last column names it)\n",
                                 names.c_str(), rounds_));
    }
    if (o_.sim) {
      std::vector<int> hostOfRank;
      for (int r = 0; r < n_; ++r) {
        const std::pair<std::string, uint64_t> host(ids[r].host, ids[r].netns);
        hostOfRank.push_back(int(std::find(hosts.begin(), hosts.end(), host) - hosts.begin()));
      }
      std::string line;
      for (const Contestant& who : contestants_)
        line = who.backend->setUpPrediction(o_, hostOfRank);
      header.insert(0, "# --sim: " + line + "\n");
    }
    if (o_.allDtypes || o_.allOps) {
      for (const std::string& s : skipped) header.insert(0, "# skipped " + s + "\n");
    }
    std::fputs(header.c_str(), stdout);
    std::fflush(stdout);
    return true;
  }

  void recordMetadata(const RankId& me, int hosts) {
    // A race's files name it alike (rank 0's host and pid, and when it started), so that a
    // reader pairs their rounds only with those of the same race.
    const std::string raceName =
        race_ ? strprintf("%s:%d:%lld", me.host, int(me.pid),
                          (long long)std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count())
              : std::string();
    for (size_t i = 0; i < racers_; ++i) {
      const Backend& b = *contestants_[i].backend;
      meta_[i] = RunMetadata{program_,   b.library(),  b.version(),
                             gitCommit_, b.describe(), o_.collective,
                             n_,         hosts,        contestantEnvironment(contestants_[i]),
                             raceName};
    }
  }

  bool allocateBuffers(const std::vector<size_t>& sweep) {
    const size_t elem0 = 8;  // the widest dtype sizes the buffers for every block
    size_t maxBytes = 0;
    for (size_t size : sweep) {
      maxBytes = std::max(maxBytes, collSizes(o_.collective, size, 1, n_).bytes(1) + elem0 * n_);
    }
    Backend* shared = o_.sharedBuffers ? &backend_ : nullptr;
    sendBuf_ = allocateBuffer(maxBytes, shared, o_.deviceBuffers);
    recvBuf_ = allocateBuffer(maxBytes, shared, o_.deviceBuffers);
    if (o_.deviceBuffers && sendBuf_ && recvBuf_) {
      if (loomStreamCreate(&device_.stream) != loomSuccess) {
        std::fprintf(stderr, "%s: rank %d: --mem device: %s\n", program_.c_str(), backend_.rank(),
                     loomGetLastError(nullptr));
        return false;
      }
      device_.send = sendBuf_.get();
      device_.recv = recvBuf_.get();
      device_.bytes = (std::max<size_t>(maxBytes, 1) + 4095) / 4096 * 4096;
      device_.hostSend.resize(device_.bytes);
      device_.hostRecv.resize(device_.bytes);
    }
    if (!sendBuf_ || !recvBuf_) {
      std::fprintf(stderr, "%s: rank %d: cannot allocate 2 x %zu bytes%s%s\n", program_.c_str(),
                   backend_.rank(), maxBytes, o_.deviceBuffers ? " of device memory: " : "",
                   o_.deviceBuffers ? loomGetLastError(nullptr) : "");
      return false;
    }
    return true;
  }

  std::vector<double> progressCosts(size_t blocks, const std::vector<size_t>& sweep) const {
    std::vector<double> costs;
    for (size_t b = 0; b < blocks; ++b) {
      for (size_t size : sweep) {
        costs.push_back(double(itersForSize(o_.iters, size, o_.bytesPerSize)) *
                        (double(size) + kCallCostBytes));
      }
    }
    return costs;
  }

  // What one size's rounds gave each contestant: per placement the row's time of each round,
  // the wrong results over all, and what it ran out of place (where it says).
  struct SizeTally {
    std::vector<std::vector<double>> times[2];
    std::vector<std::array<int64_t, 2>> wrong;
    std::vector<std::string> ran;
  };

  // Every contestant's rounds at one size, then its row; false when a rank failed. *bytes: the
  // row's size.
  bool measureSize(loomDataType_t dtype, loomRedOp_t op, size_t size, size_t* bytesOut) {
    const CollSizes s = collSizes(o_.collective, size, dtypeSize(dtype), n_);
    const size_t bytes = s.bytes(dtypeSize(dtype));
    *bytesOut = bytes;
    // Warm-up only has to build connections and plans and fault in pages: at large sizes
    // one or two calls do that, so it gets a smaller share of the budget than the timed
    // batch.
    const int warmup =
        itersForSize(o_.warmup, bytes,
                     o_.bytesPerSize ? std::max<size_t>(o_.bytesPerSize / kWarmupShare, 1) : 0);
    const int iters = itersForSize(o_.iters, bytes, o_.bytesPerSize);
    SizeTally tally;
    tally.times[0].resize(racers_);
    tally.times[1].resize(racers_);
    tally.wrong.assign(racers_, {0, 0});
    tally.ran.resize(racers_);
    for (int round = 0; round < rounds_; ++round) {
      for (size_t turn = 0; turn < racers_; ++turn) {
        const size_t who = (turn + size_t(round)) % racers_;
        const SizeResult mine =
            takeTurn(*contestants_[who].backend, o_, s, dtype, op, warmup, iters, sendBuf_.get(),
                     recvBuf_.get(), o_.deviceBuffers ? &device_ : nullptr, &tally.ran[who]);
        if (!gatherTurn(mine, who, size, &tally)) return false;
      }
    }
    for (size_t who = 0; who < racers_; ++who) recordRow(who, s, dtype, op, tally);
    rows_ += 2;
    return true;
  }

  // Every rank must reach this exchange, even after an error, or the others would hang.
  bool gatherTurn(const SizeResult& mine, size_t who, size_t size, SizeTally* tally) {
    std::vector<SizeResult> all(static_cast<size_t>(n_));
    if (!backend_.allGather(&mine, all.data(), sizeof(SizeResult))) return false;
    bool failed = false;
    for (int p = 0; p < 2; ++p) {
      std::vector<double> ranks;
      for (const SizeResult& r : all) {
        ranks.push_back(r.timeUs[p]);
        tally->wrong[who][p] += r.wrong[p];
        failed |= r.failed != 0;
      }
      tally->times[p][who].push_back(aggregateTimes(o_.average, ranks));
    }
    if (failed && leader_) {
      std::fprintf(stderr, "%s: a rank failed at size %zu%s%s\n", program_.c_str(), size,
                   race_ ? " running " : "", contestants_[who].label.c_str());
    }
    return !failed;
  }

  // A contestant's row of one size: counted on every rank, printed and kept by rank 0.
  void recordRow(size_t who, const CollSizes& s, loomDataType_t dtype, loomRedOp_t op,
                 SizeTally& tally) {
    const Collective c = o_.collective;
    const size_t bytes = s.bytes(dtypeSize(dtype));
    std::array<int64_t, 2>& wrong = tally.wrong[who];
    if (!o_.check) wrong = {-1, -1};
    ResultRow row;
    row.bytes = bytes;
    row.count = s.paramCount;
    row.dtype = dtype;
    row.op = op;
    row.root = collectiveHasRoot(c) ? o_.root : -1;
    row.algorithm = contestants_[who].backend->algorithm(c);
    row.ran = tally.ran[who];
    row.outOfPlace = makeMeasurement(c, bytes, n_, medianOf(tally.times[0][who]), wrong[0]);
    row.inPlace = makeMeasurement(c, bytes, n_, medianOf(tally.times[1][who]), wrong[1]);
    if (race_) row.roundsUs = tally.times[0][who];
    if (o_.check) wrongOf_[who] += wrong[0] + wrong[1];
    busBwSum_[who] += row.outOfPlace.busBw + row.inPlace.busBw;
    if (!leader_) return;
    if (o_.sim) {
      Prediction p;
      const CollCall call{c,    dtype, op, o_.root, sendBuf_.get(), recvBuf_.get(), s.paramCount,
                          false};
      if (contestants_[who].backend->predict(call, &p))
        p.time = makeMeasurement(c, bytes, n_, p.time.timeUs, -1);
      row.simulated = p;
    }
    std::string line = formatRow(c, s, dtype, op, o_.root, row.outOfPlace, row.inPlace,
                                 row.simulated ? &*row.simulated : nullptr);
    if (race_) {
      line.pop_back();  // the newline
      line += "  " + contestants_[who].label +
              (row.ran.empty() || row.algorithm != "auto" ? "" : " (ran " + row.ran + ")") + "\n";
    }
    std::fputs(line.c_str(), stdout);
    std::fflush(stdout);
    results_[who].push_back(std::move(row));
  }

  // The footer, --race's regrets and the --json / --csv files; the exit code.
  int finish() {
    int64_t wrongTotal = 0;
    for (int64_t w : wrongOf_) wrongTotal += w;
    int rc = wrongTotal ? 1 : 0;
    if (!leader_) return rc;
    double avgSum = 0;
    for (double sum : busBwSum_) avgSum += rows_ ? sum / rows_ : 0.0;
    std::fputs(formatFooter(wrongTotal, avgSum / double(racers_), o_.check).c_str(), stdout);
    if (race_)
      std::fputs(formatRegrets(contestants_, o_.collective, results_, rounds_).c_str(), stdout);
    std::fflush(stdout);
    for (size_t who = 0; who < racers_; ++who) {
      const std::string& label = contestants_[who].label;
      const double avg = rows_ ? busBwSum_[who] / rows_ : 0.0;
      const std::string json = contestantPath(o_.jsonPath, label);
      const std::string csv = contestantPath(o_.csvPath, label);
      if (!json.empty() &&
          !writeTextFile(json, formatJson(meta_[who], o_, results_[who], wrongOf_[who], avg),
                         program_)) {
        rc = 3;
      }
      if (!csv.empty() && !writeTextFile(csv, formatCsv(meta_[who], results_[who]), program_))
        rc = 3;
    }
    return rc;
  }

  const std::vector<Contestant>& contestants_;
  const Options& o_;
  const std::string& program_;
  const std::string& gitCommit_;
  Backend& backend_;  // the one that exchanges results and buffers
  const size_t racers_;
  const bool race_;
  const int rounds_;
  const int n_;
  const bool leader_;
  std::vector<RunMetadata> meta_;
  Buffer sendBuf_, recvBuf_;
  DeviceSide device_;  // --mem device
  std::vector<std::vector<ResultRow>> results_;  // rank 0: each contestant's rows
  std::vector<int64_t> wrongOf_;                 // wrong elements of each contestant's checks
  std::vector<double> busBwSum_;
  int rows_ = 0;
};

}  // namespace

int runRace(const std::vector<Contestant>& contestants, const Options& o,
            const std::string& program, const std::string& gitCommit) {
  return RaceRun(contestants, o, program, gitCommit).run();
}

}  // namespace loom::perf
