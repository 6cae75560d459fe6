// Micro-benchmarks of the TCP transport between two forked ranks on this host: ping-pong
// latency, one-way streaming, both ways at once, and the data movement of a 2-rank ring
// allreduce (RecvReduce of one half, forwarding it as it is reduced). Rank 0 runs Google
// Benchmark and tells rank 1 over the connection what to serve next.
//
//   loom_bench_tcp [--benchmark_filter=...]
//   (LOOM_TCP_SOCKETS, LOOM_TCP_CHUNK_BYTES, LOOM_SPIN_COUNT, LOOM_YIELD_USEC apply)
#include <benchmark/benchmark.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "comm/options.h"
#include "toolkit/fork_ranks.h"
#include "transports/transport.h"

namespace loom::transports {
namespace {

constexpr int64_t kTimeoutMs = 60000;

enum class Kind : uint32_t { PingPong, Stream, Exchange, Allreduce, Quit };

struct Command {
  Kind kind;
  uint32_t reserved;
  uint64_t bytes;
  uint64_t iterations;
};

struct Rank {
  CommContext ctx;
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Connection> conn;
  int peer = 0;
};
Rank* gRank = nullptr;  // rank 0's, for the benchmark functions

// Runs ops to completion the way the executor waits: the communicator's wait policy (its
// LOOM_SPIN_COUNT polls, as for two ranks on two cores), then sched_yield for LOOM_YIELD_USEC,
// then poll() in the transport. onRound runs before every round.
void run(Rank& r, std::initializer_list<TransferOp*> ops,
         const std::function<void()>& onRound = nullptr) {
  static const WaitPolicy kWait = [] {
    WaitPolicy w = readWaitPolicy();
    w.chooseSpin(2, 2);
    return w;
  }();
  static const int64_t kSpins = kWait.spinCount;
  static const uint64_t kYieldNs = kWait.yieldNs;
  for (TransferOp* op : ops) {
    Status st = r.conn->post(op);
    if (!st.isOk()) fprintf(stderr, "post: %s\n", st.message().c_str()), _exit(2);
  }
  Deadline deadline(kTimeoutMs);
  int64_t idle = 0;
  uint64_t idleSince = 0;
  for (;;) {
    if (onRound) onRound();
    bool progressed = false;
    Status st = r.conn->progress(&progressed);
    if (!st.isOk()) fprintf(stderr, "progress: %s\n", st.message().c_str()), _exit(3);
    bool all = true;
    for (TransferOp* op : ops) all = all && op->complete();
    if (all) return;
    if (deadline.expired()) fprintf(stderr, "benchmark op timed out\n"), _exit(4);
    if (progressed) {
      idle = 0;
      continue;
    }
    if (++idle <= kSpins) continue;
    if (idle == kSpins + 1) idleSince = nowNs();
    if (nowNs() - idleSince < kYieldNs) {
      sched_yield();
      continue;
    }
    uint64_t token = r.transport->armSleep();
    st = r.conn->progress(&progressed);
    if (!progressed && st.isOk()) r.transport->sleepUs(token, 100000);
    r.transport->disarmSleep();
  }
}

// The movements of one benchmark iteration, the same on both ranks (mirror images).
struct Buffers {
  std::vector<char> a, b, c;
  explicit Buffers(size_t bytes) : a(bytes, 1), b(bytes, 2), c(bytes, 0) {}  // c: float 0s
};

void pingPong(Rank& r, Buffers& buf, size_t bytes, bool first) {
  TransferOp s = wholeTransfer(TransferOp::Kind::Send, buf.a.data(), bytes);
  TransferOp v = wholeTransfer(TransferOp::Kind::Recv, buf.b.data(), bytes);
  if (first) {
    run(r, {&s});
    run(r, {&v});
  } else {
    run(r, {&v});
    run(r, {&s});
  }
}

// One-way: rank 0 sends, rank 1 receives and acknowledges, so the time covers delivery.
void stream(Rank& r, Buffers& buf, size_t bytes, bool sender) {
  uint64_t ack = 0;
  TransferOp data = wholeTransfer(sender ? TransferOp::Kind::Send : TransferOp::Kind::Recv,
                                  buf.a.data(), bytes);
  TransferOp a =
      wholeTransfer(sender ? TransferOp::Kind::Recv : TransferOp::Kind::Send, &ack, sizeof(ack));
  if (sender) {
    run(r, {&data, &a});
  } else {
    run(r, {&data});
    run(r, {&a});
  }
}

void exchange(Rank& r, Buffers& buf, size_t bytes) {
  TransferOp s = wholeTransfer(TransferOp::Kind::Send, buf.a.data(), bytes);
  TransferOp v = wholeTransfer(TransferOp::Kind::Recv, buf.b.data(), bytes);
  run(r, {&s, &v});
}

// A 2-rank ring allreduce of float32 over the transport: reduce-scatter (send the peer's half,
// RecvReduce our own) then allgather (forward our reduced half as it is reduced, receive the
// other), all posted at once with the forward's limit following the reduction.
void allreduce(Rank& r, Buffers& buf, size_t bytes, int rank) {
  size_t count = bytes / sizeof(float);
  size_t half = count / 2;
  size_t mineStart = rank == 0 ? 0 : half, mineCount = rank == 0 ? half : count - half;
  size_t theirStart = rank == 0 ? half : 0, theirCount = count - mineCount;
  char* data = buf.c.data();
  TransferOp scatter =
      wholeTransfer(TransferOp::Kind::Send, data + theirStart * 4, theirCount * 4);
  TransferOp reduce =
      wholeTransfer(TransferOp::Kind::RecvReduce, data + mineStart * 4, mineCount * 4);
  TransferOp forward = wholeTransfer(TransferOp::Kind::Send, data + mineStart * 4, mineCount * 4);
  TransferOp gather =
      wholeTransfer(TransferOp::Kind::Recv, data + theirStart * 4, theirCount * 4);
  for (TransferOp* op : {&scatter, &reduce, &forward, &gather}) op->dtype = loomFloat32;
  reduce.op = loomSum;
  forward.limit = 0;
  // The gather overwrites what the scatter sends: it may land only where the scatter is done.
  gather.limit = 0;
  run(r, {&scatter, &reduce, &forward, &gather}, [&] {
    forward.limit = reduce.done;
    gather.limit = scatter.done;
  });
}

void serve(Rank& r) {
  for (;;) {
    Command cmd = {};
    TransferOp v = wholeTransfer(TransferOp::Kind::Recv, &cmd, sizeof(cmd));
    run(r, {&v});
    if (cmd.kind == Kind::Quit) return;
    Buffers buf(cmd.bytes);
    // Allocating the buffers is no part of the measurement: rank 0 waits for this.
    uint64_t ready = 1;
    TransferOp s = wholeTransfer(TransferOp::Kind::Send, &ready, sizeof(ready));
    run(r, {&s});
    for (uint64_t i = 0; i < cmd.iterations; ++i) {
      switch (cmd.kind) {
        case Kind::PingPong:
          pingPong(r, buf, cmd.bytes, false);
          break;
        case Kind::Stream:
          stream(r, buf, cmd.bytes, false);
          break;
        case Kind::Exchange:
          exchange(r, buf, cmd.bytes);
          break;
        case Kind::Allreduce:
          allreduce(r, buf, cmd.bytes, 1);
          break;
        case Kind::Quit:
          break;
      }
    }
  }
}

void command(Kind kind, uint64_t bytes, uint64_t iterations) {
  Command cmd = {kind, 0, bytes, iterations};
  uint64_t ready = 0;
  TransferOp s = wholeTransfer(TransferOp::Kind::Send, &cmd, sizeof(cmd));
  TransferOp v = wholeTransfer(TransferOp::Kind::Recv, &ready, sizeof(ready));
  run(*gRank, {&s});
  if (kind != Kind::Quit) run(*gRank, {&v});
}

// Counters in the field's units: one-way latency in microseconds, bandwidth in GB/s (1e9).
void BM_PingPong(benchmark::State& state) {
  size_t bytes = size_t(state.range(0));
  Buffers buf(bytes);
  command(Kind::PingPong, bytes, state.max_iterations);
  uint64_t start = nowNs();
  for (auto _ : state) pingPong(*gRank, buf, bytes, true);
  state.counters["one_way_us"] = double(nowNs() - start) / 1e3 / 2 / double(state.iterations());
}
BENCHMARK(BM_PingPong)->Arg(8)->Arg(4096)->Arg(65536)->UseRealTime();

void bandwidth(benchmark::State& state, Kind kind) {
  size_t bytes = size_t(state.range(0));
  Buffers buf(bytes);
  command(kind, bytes, state.max_iterations);
  for (auto _ : state) {
    switch (kind) {
      case Kind::Stream:
        stream(*gRank, buf, bytes, true);
        break;
      case Kind::Exchange:
        exchange(*gRank, buf, bytes);
        break;
      default:
        allreduce(*gRank, buf, bytes, 0);
        break;
    }
  }
  // Stream, Exchange: bytes each way per second. Allreduce: busbw = algbw for 2 ranks.
  state.counters["GBps"] = benchmark::Counter(double(state.iterations()) * double(bytes) / 1e9,
                                              benchmark::Counter::kIsRate);
}
void BM_Stream(benchmark::State& state) { bandwidth(state, Kind::Stream); }
void BM_Exchange(benchmark::State& state) { bandwidth(state, Kind::Exchange); }
void BM_Allreduce(benchmark::State& state) { bandwidth(state, Kind::Allreduce); }
BENCHMARK(BM_Stream)->Arg(1 << 20)->Arg(64 << 20)->UseRealTime();
BENCHMARK(BM_Exchange)->Arg(1 << 20)->Arg(64 << 20)->UseRealTime();
BENCHMARK(BM_Allreduce)->Arg(8)->Arg(1 << 20)->Arg(16 << 20)->Arg(64 << 20)->UseRealTime();

int rankMain(toolkit::RankContext& rc) {
  Rank r;
  r.ctx.rank = rc.rank();
  r.ctx.nranks = 2;
  r.ctx.timeoutMs = kTimeoutMs;
  memcpy(r.ctx.secret, "loom-bench-tcp!", 16);
  Status st = tcp::createTcpTransport(&r.ctx, readTcpOptions(), &r.transport);
  if (!st.isOk()) return fprintf(stderr, "%s\n", st.message().c_str()), 1;
  PeerInfo me;
  me.rank = rc.rank();
  gethostname(me.hostname, sizeof(me.hostname) - 1);
  tcpListenAddress(*r.transport, &me);
  auto all = rc.allgather(std::string(reinterpret_cast<const char*>(&me), sizeof(me)));
  r.ctx.peers.resize(2);
  for (int i = 0; i < 2; ++i) memcpy(&r.ctx.peers[i], all[i].data(), sizeof(me));
  r.peer = 1 - rc.rank();
  st = r.transport->connect(r.peer, 0, Deadline(kTimeoutMs), &r.conn);
  if (!st.isOk()) return fprintf(stderr, "%s\n", st.message().c_str()), 1;
  if (rc.rank() == 1) {
    serve(r);
  } else {
    gRank = &r;
    benchmark::RunSpecifiedBenchmarks();
    command(Kind::Quit, 0, 0);
  }
  return 0;
}

}  // namespace
}  // namespace loom::transports

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  loom::toolkit::ForkOptions options;
  options.timeoutSec = 1800;
  auto results = loom::toolkit::runRanks(2, loom::transports::rankMain, options);
  std::string failures = loom::toolkit::describeFailures(results, options);
  if (!failures.empty()) fprintf(stderr, "%s", failures.c_str());
  benchmark::Shutdown();
  return failures.empty() ? 0 : 1;
}
