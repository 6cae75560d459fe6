// Micro-benchmarks of the shared-memory transport between two forked ranks: ping-pong
// latency, one-way streaming, both ways at once, and the data movement of a 2-rank ring
// allreduce, each through the ring's slots (path 0) and by single copy (path 1), beside a
// memcpy of the same size in one process. Rank 0 runs Google Benchmark and tells rank 1
// what to serve next.
//
//   loom_bench_transport [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "comm/options.h"
#include "toolkit/fork_ranks.h"
#include "transports/shm/shm_transport.h"
#include "transports/shm/shm_util.h"

namespace loom::transports {
namespace {

constexpr int64_t kTimeoutMs = 60000;
constexpr int kPaths = 2;  // 0: slots only, 1: single copy from 64 KiB on

enum class Job : uint32_t { PingPong, Stream, Exchange, Allreduce, Quit };

struct Command {
  Job job;
  uint32_t path;
  uint64_t bytes;
  uint64_t iterations;
};

// One transport per path (they differ in options), each under its own communicator hash so
// their shared-memory names do not collide.
struct Rank {
  int rank = 0;
  CommContext ctx[kPaths];
  std::unique_ptr<Transport> transport[kPaths];
  std::unique_ptr<Connection> conn[kPaths];
};
Rank* gRank = nullptr;  // rank 0's, for the benchmark functions

[[noreturn]] void die(const char* what, const Status& st) {
  fprintf(stderr, "%s: %s\n", what, st.message().c_str());
  _exit(2);
}

// Posts ops and runs them to completion with the executor's waiting: spin (latency is what
// is measured), and after a long idle stretch arm the sleep, poll once more, sleep.
// beforeRound plays the executor moving limits.
void run(Rank& r, int path, std::initializer_list<TransferOp*> ops,
         const std::function<void()>& beforeRound = nullptr) {
  Connection& conn = *r.conn[path];
  Transport& transport = *r.transport[path];
  for (TransferOp* op : ops) {
    Status st = conn.post(op);
    if (!st.isOk()) die("post", st);
  }
  auto finished = [&] {
    for (TransferOp* op : ops)
      if (!op->complete()) return false;
    return true;
  };
  Deadline deadline(kTimeoutMs);
  for (int idle = 0; !finished();) {
    if (beforeRound) beforeRound();
    bool progressed = false;
    Status st = conn.progress(&progressed);
    if (!st.isOk()) die("progress", st);
    if (progressed) {
      idle = 0;
      continue;
    }
    if (deadline.expired()) die("wait", Status(loomTimeout, "timed out"));
    if (++idle < 20000) {
      // On SMT siblings a tight spin takes issue slots from the peer doing the copying.
      __builtin_ia32_pause();
      continue;
    }
    st = conn.checkAlive();
    if (!st.isOk()) die("checkAlive", st);
    uint64_t token = transport.armSleep();
    st = conn.progress(&progressed);
    if (st.isOk() && !progressed) transport.sleepUs(token, 10000);
    transport.disarmSleep();
    idle = 0;
  }
  conn.flushNotifications();
}

struct Buffers {
  std::vector<char> a, b, c;
  explicit Buffers(size_t bytes) : a(bytes, 1), b(bytes, 2), c(bytes, 0) {}  // c: float 0s
};

void pingPong(Rank& r, int path, Buffers& buf, size_t bytes) {
  TransferOp s = wholeTransfer(TransferOp::Kind::Send, buf.a.data(), bytes);
  TransferOp v = wholeTransfer(TransferOp::Kind::Recv, buf.b.data(), bytes);
  bool first = r.rank == 0;
  run(r, path, {first ? &s : &v});
  run(r, path, {first ? &v : &s});
}

// One way, rank 0 to rank 1, with an 8-byte acknowledgement so the time covers delivery.
void stream(Rank& r, int path, Buffers& buf, size_t bytes) {
  bool sender = r.rank == 0;
  uint64_t ack = 0;
  TransferOp data = wholeTransfer(sender ? TransferOp::Kind::Send : TransferOp::Kind::Recv,
                                  buf.a.data(), bytes);
  TransferOp reply =
      wholeTransfer(sender ? TransferOp::Kind::Recv : TransferOp::Kind::Send, &ack, sizeof(ack));
  run(r, path, {&data});
  run(r, path, {&reply});
}

void exchange(Rank& r, int path, Buffers& buf, size_t bytes) {
  TransferOp s = wholeTransfer(TransferOp::Kind::Send, buf.a.data(), bytes);
  TransferOp v = wholeTransfer(TransferOp::Kind::Recv, buf.b.data(), bytes);
  run(r, path, {&s, &v});
}

// A 2-rank ring allreduce of float32 in place: reduce-scatter (send the peer's half,
// RecvReduce ours) then allgather (forward our half as it is reduced, receive theirs where
// the peer has finished reading), all posted at once, limits following the data.
void allreduce(Rank& r, int path, Buffers& buf, size_t bytes) {
  size_t count = bytes / sizeof(float), half = count / 2;
  size_t mine = r.rank == 0 ? 0 : half, mineCount = r.rank == 0 ? half : count - half;
  size_t theirs = r.rank == 0 ? half : 0, theirCount = count - mineCount;
  char* data = buf.c.data();
  TransferOp scatter = wholeTransfer(TransferOp::Kind::Send, data + theirs * 4, theirCount * 4);
  TransferOp reduce =
      wholeTransfer(TransferOp::Kind::RecvReduce, data + mine * 4, mineCount * 4);
  TransferOp forward = wholeTransfer(TransferOp::Kind::Send, data + mine * 4, mineCount * 4);
  TransferOp gather = wholeTransfer(TransferOp::Kind::Recv, data + theirs * 4, theirCount * 4);
  for (TransferOp* op : {&scatter, &reduce, &forward, &gather}) op->dtype = loomFloat32;
  forward.limit = gather.limit = 0;
  run(r, path, {&scatter, &reduce, &forward, &gather}, [&] {
    forward.limit = reduce.done;
    gather.limit = scatter.done;
  });
}

void perform(Rank& r, const Command& cmd, Buffers& buf) {
  int path = int(cmd.path);
  switch (cmd.job) {
    case Job::PingPong:
      pingPong(r, path, buf, cmd.bytes);
      break;
    case Job::Stream:
      stream(r, path, buf, cmd.bytes);
      break;
    case Job::Exchange:
      exchange(r, path, buf, cmd.bytes);
      break;
    case Job::Allreduce:
      allreduce(r, path, buf, cmd.bytes);
      break;
    case Job::Quit:
      break;
  }
}

// Rank 1: commands arrive on the slots connection.
void serve(Rank& r) {
  for (;;) {
    Command cmd = {};
    TransferOp v = wholeTransfer(TransferOp::Kind::Recv, &cmd, sizeof(cmd));
    v.dtype = loomUint8;
    run(r, 0, {&v});
    if (cmd.job == Job::Quit) return;
    Buffers buf(cmd.bytes);
    for (uint64_t i = 0; i < cmd.iterations; ++i) perform(r, cmd, buf);
  }
}

void command(Job job, int path, uint64_t bytes, uint64_t iterations) {
  Command cmd = {job, uint32_t(path), bytes, iterations};
  TransferOp s = wholeTransfer(TransferOp::Kind::Send, &cmd, sizeof(cmd));
  s.dtype = loomUint8;
  run(*gRank, 0, {&s});
}

// Args: {bytes, path}. Counters in the field's units: one-way latency in microseconds,
// bandwidth in GB/s (1e9 bytes); for the 2-rank allreduce busbw equals algbw.
void runJob(benchmark::State& state, Job job) {
  size_t bytes = size_t(state.range(0));
  int path = int(state.range(1));
  Buffers buf(bytes);
  command(job, path, bytes, state.max_iterations);
  for (auto _ : state) perform(*gRank, Command{job, uint32_t(path), bytes, 0}, buf);
  if (job == Job::PingPong) {
    state.counters["one_way_us"] =
        benchmark::Counter(double(state.iterations()) * 2 / 1e6,
                           benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  } else {
    state.counters["GBps"] = benchmark::Counter(double(state.iterations()) * double(bytes) / 1e9,
                                                benchmark::Counter::kIsRate);
  }
}
void BM_PingPong(benchmark::State& state) { runJob(state, Job::PingPong); }
void BM_Stream(benchmark::State& state) { runJob(state, Job::Stream); }
void BM_Exchange(benchmark::State& state) { runJob(state, Job::Exchange); }
void BM_Allreduce(benchmark::State& state) { runJob(state, Job::Allreduce); }
BENCHMARK(BM_PingPong)->ArgsProduct({{8, 4096}, {0}})->UseRealTime();
BENCHMARK(BM_PingPong)->ArgsProduct({{65536, 1 << 20}, {0, 1}})->UseRealTime();
BENCHMARK(BM_Stream)->ArgsProduct({{1 << 20, 64 << 20}, {0, 1}})->UseRealTime();
BENCHMARK(BM_Exchange)->ArgsProduct({{1 << 20, 64 << 20}, {0, 1}})->UseRealTime();
BENCHMARK(BM_Allreduce)->ArgsProduct({{1 << 20, 16 << 20, 64 << 20}, {0, 1}})->UseRealTime();

// The yardstick: one process copying the same bytes.
void BM_Memcpy(benchmark::State& state) {
  size_t bytes = size_t(state.range(0));
  Buffers buf(bytes);
  for (auto _ : state) {
    memcpy(buf.b.data(), buf.a.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.counters["GBps"] = benchmark::Counter(double(state.iterations()) * double(bytes) / 1e9,
                                              benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Memcpy)->Arg(1 << 20)->Arg(64 << 20)->UseRealTime();

int rankMain(toolkit::RankContext& rc, uint64_t commHash) {
  Rank r;
  r.rank = rc.rank();
  for (int path = 0; path < kPaths; ++path) {
    CommContext& ctx = r.ctx[path];
    ctx.rank = rc.rank();
    ctx.nranks = 2;
    ctx.commHash = commHash + path;
    ctx.timeoutMs = kTimeoutMs;
    ShmOptions options = readShmOptions();
    options.cmaThreshold = path == 0 ? 0 : 64 << 10;
    Status st = createShmTransport(&ctx, options, &r.transport[path]);
    if (!st.isOk()) die("create", st);
    PeerInfo me;
    me.rank = rc.rank();
    describeThisProcess(&me);
    me.hostId = 1;
    auto all = rc.allgather(std::string(reinterpret_cast<const char*>(&me), sizeof(me)));
    ctx.peers.resize(2);
    for (int i = 0; i < 2; ++i) memcpy(&ctx.peers[i], all[i].data(), sizeof(me));
    st = r.transport[path]->connect(1 - rc.rank(), 0, Deadline(kTimeoutMs), &r.conn[path]);
    if (!st.isOk()) die("connect", st);
  }
  rc.allgather("");  // both attached: the single-copy probe is done before the first send
  for (auto& conn : r.conn) {
    bool progressed = false;
    (void)conn->progress(&progressed);
  }
  rc.allgather("");
  if (rc.rank() == 1) {
    serve(r);
  } else {
    gRank = &r;
    benchmark::RunSpecifiedBenchmarks();
    command(Job::Quit, 0, 0, 0);
  }
  return 0;
}

}  // namespace
}  // namespace loom::transports

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  uint64_t commHash = (uint64_t(getpid()) << 32) ^ loom::nowNs();
  loom::toolkit::ForkOptions options;
  options.timeoutSec = 1800;
  auto results = loom::toolkit::runRanks(
      2, [&](loom::toolkit::RankContext& rc) { return loom::transports::rankMain(rc, commHash); },
      options);
  std::string failures = loom::toolkit::describeFailures(results, options);
  if (!failures.empty()) fprintf(stderr, "%s", failures.c_str());
  benchmark::Shutdown();
  return failures.empty() ? 0 : 1;
}
