// The pair measurement of a link at init (topology/link_measure.h).
#include "topology/link_measure.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "base/clock.h"

namespace loom::topology {
namespace {

using transports::Connection;
using transports::TransferOp;
using transports::wholeTransfer;

// A lane no plan uses: the measurement gets connections of its own, dropped afterwards, so a
// measurement that fails half-way leaves nothing behind on the connections collectives use.
constexpr int kMeasureLane = 1 << 20;
constexpr size_t kBulkBytes = 1 << 20;
constexpr size_t kMinPings = 5, kMaxPings = 64, kMinBulks = 2, kMaxBulks = 8;
constexpr size_t kUntimedPings = 2;  // before the timed rounds (Initiator::settle)
// A measurement that takes longer than this is abandoned (defaults, a WARN): the pair's ranks
// are both in init, so only a broken or badly overloaded host gets here.
constexpr int64_t kMeasureTimeoutMs = 3000;
// kPingApart: a ping the responder answers from the CPU after the initiator's (Initiator).
// kShaperProbe: kShaperProbeBytes of the bulk buffer, acknowledged like kBulk.
enum Command : uint64_t {
  kStop = 0,
  kPing = 1,
  kBulk = 2,
  kBurst = 3,
  kPingApart = 4,
  kShaperProbe = 5
};
constexpr size_t kBurstMessages = 8;  // a burst: this many 8-byte messages each way
// The network link's shaper (LinkFigures::burstBytes): a message of this size after the link
// has idled long enough to refill a bucket of its size, kShaperProbes times. A bucket deeper
// than the message reads as the message's size; one shallower than an eighth of it as none,
// so that an unshaped link's small messages, a little faster per byte than 1 MiB, do not read
// as a shaper.
constexpr size_t kShaperProbeBytes = 64 << 10;
constexpr size_t kShaperProbes = 5;
constexpr double kShaperMaxIdle = 5e-3;  // s, so a slow link's refill stays within the budget

// The bytes of the bulk buffer that follow a command (0: none).
size_t payloadBytes(uint64_t command) {
  return command == kBulk ? kBulkBytes : command == kShaperProbe ? kShaperProbeBytes : 0;
}

// Posts `ops` in order and progresses them to completion. Yields the CPU while idle: the
// peer may share this core.
Status runOps(Connection* c, const std::vector<TransferOp*>& ops, const Deadline& deadline) {
  for (TransferOp* op : ops) LOOM_TRY(c->post(op));
  for (;;) {
    if (std::all_of(ops.begin(), ops.end(), [](TransferOp* op) { return op->complete(); })) {
      c->flushNotifications();
      return Status::ok();
    }
    bool progressed = false;
    LOOM_TRY(c->progress(&progressed));
    if (progressed) continue;
    if (deadline.expired())
      return errorf(loomTimeout, "no answer within %lld ms", (long long)kMeasureTimeoutMs);
    LOOM_TRY(c->checkAlive());
    sched_yield();
  }
}

// Sends or receives `count` 8-byte messages back to back (their contents do not matter).
Status runBurst(Connection* c, TransferOp::Kind kind, size_t count, const Deadline& deadline) {
  std::vector<uint64_t> words(count, kBurst);
  std::vector<TransferOp> ops;
  std::vector<TransferOp*> all;
  ops.reserve(count);
  for (uint64_t& w : words) all.push_back(&ops.emplace_back(wholeTransfer(kind, &w, sizeof(w))));
  return runOps(c, all, deadline);
}

// Holds the calling thread on one CPU it may run on until release(), then gives it back its
// CPUs: the which-th of them (mod their count), -1 for none; moveTo(which) holds it on another.
// Both ends of a pair pinned alike share one core; pairs of hosts that share a machine
// (network namespaces) measure at the same time, so each host's pair takes its own CPU
// (which = its host), or they would all crowd CPU 0 and one host's per-message figure would
// read 10 us instead of 0.05.
class OneCore {
 public:
  explicit OneCore(int which) {
    savedOk_ = which >= 0 && sched_getaffinity(0, sizeof(saved_), &saved_) == 0;
    moveTo(which);
  }
  ~OneCore() { release(); }
  void moveTo(int which) {
    if (!savedOk_ || which < 0 || which == which_) return;
    const int allowed = CPU_COUNT(&saved_);
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0, seen = 0; c < CPU_SETSIZE && allowed > 0; ++c) {
      if (!CPU_ISSET(c, &saved_) || seen++ != which % allowed) continue;
      CPU_SET(c, &one);
      break;
    }
    if (sched_setaffinity(0, sizeof(one), &one) == 0) which_ = which;
  }
  void release() {
    if (which_ >= 0) sched_setaffinity(0, sizeof(saved_), &saved_);
    which_ = -1;
  }

 private:
  cpu_set_t saved_;
  bool savedOk_ = false;  // saved_ holds the thread's CPUs
  int which_ = -1;         // the CPU it holds the thread on, -1: none
};

// The responder echoes pings and acknowledges bulk transfers until the initiator says stop.
// sharedCore: the CPU (OneCore) it answers the pings from, the initiator's (see Initiator), and
// kPingApart from the next one.
Status respond(Connection* c, std::vector<char>* bulk, int sharedCore, const Deadline& deadline) {
  OneCore pin(sharedCore);
  for (;;) {
    uint64_t command = kStop;
    TransferOp in = wholeTransfer(TransferOp::Kind::Recv, &command, sizeof(command));
    LOOM_TRY(runOps(c, {&in}, deadline));
    if (command == kStop) return Status::ok();
    const size_t payload = payloadBytes(command);
    if (sharedCore >= 0 && payload == 0)
      pin.moveTo(command == kPingApart ? sharedCore + 1 : sharedCore);
    if (payload > 0) {
      pin.release();
      TransferOp data = wholeTransfer(TransferOp::Kind::Recv, bulk->data(), payload);
      LOOM_TRY(runOps(c, {&data}, deadline));
    }
    if (command == kBurst) {
      LOOM_TRY(runBurst(c, TransferOp::Kind::Recv, kBurstMessages - 1, deadline));
      LOOM_TRY(runBurst(c, TransferOp::Kind::Send, kBurstMessages, deadline));
      continue;
    }
    TransferOp reply = wholeTransfer(TransferOp::Kind::Send, &command, sizeof(command));
    LOOM_TRY(runOps(c, {&reply}, deadline));
  }
}

// The initiator's side. Latency: half the median round trip of 8-byte pings. Bandwidth: 1 MiB
// over the fastest bulk round, less one round trip (the command and the acknowledgement).
// sharedCore, apart and shaper: PairMeasurement's.
class Initiator {
 public:
  Initiator(Connection* c, std::vector<char>* bulk, const PairMeasurement& how,
            const Deadline& deadline)
      : c_(c), bulk_(bulk), how_(how), deadline_(deadline) {}

  Status run(LinkFigures* out) {
    OneCore pin(how_.sharedCore);
    LOOM_TRY(settle());
    const auto start = Clock::now();
    double rtt = 0, rttApart = 0;
    bool apart = how_.apart && how_.sharedCore >= 0;
    if (apart) LOOM_TRY(medianRound([&](double* s) { return round(kPingApart, s); }, &rttApart));
    LOOM_TRY(medianRound([&](double* s) { return round(kPing, s); }, &rtt));
    LOOM_TRY(timeBursts(rtt, out));
    pin.release();
    double fastest = 0;
    LOOM_TRY(fastestBulk(start, &fastest));
    // Apart pings slower than one core's were disturbed (the other core busy): then the
    // one-core figure stands for both, as without them.
    apart = apart && rttApart < rtt;
    out->latency = (apart ? rttApart : rtt) / 2;
    out->sharedCore = apart ? (rtt - rttApart) / 2 : 0;
    out->bandwidth = double(kBulkBytes) / std::max(fastest - 2 * out->latency, fastest / 2);
    if (how_.shaper) LOOM_TRY(probeShaper(rtt, out));
    command_ = kStop;
    TransferOp stop = wholeTransfer(TransferOp::Kind::Send, &command_, sizeof(command_));
    return runOps(c_, {&stop}, deadline_);
  }

 private:
  // One command and its answer (with the command's payload, if any), timed.
  Status round(uint64_t what, double* seconds) {
    command_ = what;
    TransferOp ask = wholeTransfer(TransferOp::Kind::Send, &command_, sizeof(command_));
    TransferOp data = wholeTransfer(TransferOp::Kind::Send, bulk_->data(), payloadBytes(what));
    TransferOp answer = wholeTransfer(TransferOp::Kind::Recv, &reply_, sizeof(reply_));
    auto t = Clock::now();
    Status st = data.bytes > 0 ? runOps(c_, {&ask, &data, &answer}, deadline_)
                               : runOps(c_, {&ask, &answer}, deadline_);
    *seconds = secondsSince(t);
    return st;
  }

  // The median of rounds timed for a quarter of the budget (kMinPings to kMaxPings of them).
  template <typename TimedRound>
  Status medianRound(TimedRound&& timedRound, double* median) {
    std::vector<double> times;
    auto since = Clock::now();
    while (times.size() < kMinPings ||
           (times.size() < kMaxPings && secondsSince(since) < how_.budgetSeconds / 4)) {
      LOOM_TRY(timedRound(&times.emplace_back()));
    }
    std::nth_element(times.begin(), times.begin() + long(times.size() / 2), times.end());
    *median = times[times.size() / 2];
    return Status::ok();
  }

  // Untimed pings first: the first one waits while the responder finishes the pair it measured
  // before this one (a rank may be in two), and the second still finds it settling in. Between
  // 2 netns hosts they took 0.9-1.4 ms and 0.04-0.6 ms, the rest 27-31 us; timed, they were 2
  // of the 5 pings the link's quarter of the budget then held, and where a third was slow too
  // the median read 3 times the round trip (and the shaper's burst 26 KB for 18).
  Status settle() {
    for (size_t i = 0; i < kUntimedPings; ++i) {
      double ignored = 0;
      LOOM_TRY(round(kPing, &ignored));
    }
    return Status::ok();
  }

  // Per message: a burst round trip (kBurstMessages each way, the first one the command)
  // against a ping's; its 2·(kBurstMessages − 1) further messages are what it adds.
  Status timeBursts(double rtt, LinkFigures* out) {
    double burst = 0;
    LOOM_TRY(medianRound(
        [&](double* seconds) -> Status {
          auto t = Clock::now();
          LOOM_TRY(runBurst(c_, TransferOp::Kind::Send, kBurstMessages, deadline_));
          LOOM_TRY(runBurst(c_, TransferOp::Kind::Recv, kBurstMessages, deadline_));
          *seconds = secondsSince(t);
          return Status::ok();
        },
        &burst));
    out->perMessage = std::max(0.0, burst - rtt) / double(2 * (kBurstMessages - 1));
    return Status::ok();
  }

  // The fastest of kMinBulks bulk rounds, and more while the budget (from `start`) lasts.
  Status fastestBulk(Clock::time_point start, double* fastest) {
    *fastest = 1e30;
    for (size_t n = 0;
         n < kMinBulks || (n < kMaxBulks && secondsSince(start) < how_.budgetSeconds); ++n) {
      double seconds = 0;
      LOOM_TRY(round(kBulk, &seconds));
      *fastest = std::min(*fastest, seconds);
    }
    return Status::ok();
  }

  // A shaper's bucket passes its depth at once and the rest at the bandwidth, so a probe takes
  // rtt + (probe - depth) / bandwidth; an unshaped link, rtt + probe / bandwidth. The fastest
  // probe counts, as the fastest bulk round does for the bandwidth: a busy machine only adds
  // time (a wait for a core of a millisecond hides a 25 KB bucket at 200 Mbit/s), and each
  // probe finds the bucket refilled.
  Status probeShaper(double rtt, LinkFigures* out) {
    const double idle = std::min(kShaperMaxIdle, double(kShaperProbeBytes) / out->bandwidth);
    double fastest = 1e30;
    for (size_t i = 0; i < kShaperProbes; ++i) {
      std::this_thread::sleep_for(std::chrono::duration<double>(idle));
      double seconds = 0;
      LOOM_TRY(round(kShaperProbe, &seconds));
      fastest = std::min(fastest, seconds);
    }
    const double depth =
        double(kShaperProbeBytes) - std::max(0.0, fastest - rtt) * out->bandwidth;
    out->burstBytes = depth >= double(kShaperProbeBytes) / 8 ? depth : 0;
    return Status::ok();
  }

  Connection* c_;
  std::vector<char>* bulk_;
  const PairMeasurement& how_;
  const Deadline& deadline_;
  uint64_t command_ = kPing, reply_ = 0;  // the buffers of a round's command and answer
};

}  // namespace

Status measureLinkPair(transports::Transport* transport, int peer, const PairMeasurement& how,
                       LinkFigures* out) {
  const int64_t ms =
      how.timeoutMs < 0 ? kMeasureTimeoutMs : std::min(how.timeoutMs, kMeasureTimeoutMs);
  Deadline deadline(ms);
  std::vector<char> bulk(kBulkBytes, 1);  // touched now, so page faults are not measured
  std::unique_ptr<Connection> conn;       // declared after its buffers: destroyed first
  LOOM_TRY(transport->connect(peer, kMeasureLane, deadline, &conn));
  return how.initiator ? Initiator(conn.get(), &bulk, how, deadline).run(out)
                       : respond(conn.get(), &bulk, how.sharedCore, deadline);
}

}  // namespace loom::topology
