// loom-gloo-perf: the Gloo baseline for loom-perf (Gloo's TCP transport on 127.0.0.1), measured
// and printed the same way (perf/sweep.h).
//
//   loom-gloo-perf all_reduce -N 4 -b 8 -e 256M -f 4 [-A ring|bcube|hd|ring_chunked]
//
// all_reduce runs Gloo's ring (what PyTorch's CPU allreduce uses) unless -A picks bcube, or
// one of the older in-place algorithm classes: hd (halving-doubling) or ring_chunked.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/config.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "perf/launch.h"
#include "perf/sweep.h"

namespace loom::perf {
namespace {

// Long enough for a 256 MiB call over loopback TCP on a loaded machine.
constexpr std::chrono::seconds kTimeout(300);

// Runs f(std::type_identity<T>{}) for the element type Gloo uses for d; false when Gloo
// has none (bfloat16, fp8).
template <typename F>
bool withGlooType(loomDataType_t d, F&& f) {
  switch (d) {
    case loomInt8:
      f(std::type_identity<int8_t>{});
      return true;
    case loomUint8:
      f(std::type_identity<uint8_t>{});
      return true;
    case loomInt32:
      f(std::type_identity<int32_t>{});
      return true;
    case loomUint32:
      f(std::type_identity<uint32_t>{});
      return true;
    case loomInt64:
      f(std::type_identity<int64_t>{});
      return true;
    case loomUint64:
      f(std::type_identity<uint64_t>{});
      return true;
    case loomFloat16:
      f(std::type_identity<gloo::float16>{});
      return true;
    case loomFloat32:
      f(std::type_identity<float>{});
      return true;
    case loomFloat64:
      f(std::type_identity<double>{});
      return true;
    default:
      return false;
  }
}

// The reduction for the option-style API (gloo::allreduce, gloo::reduce).
template <typename T>
void (*reduceFunction(loomRedOp_t op))(void*, const void*, const void*, size_t) {
  using Fn = void (*)(void*, const void*, const void*, size_t);
  switch (op) {
    case loomProd:
      return static_cast<Fn>(&gloo::product<T>);
    case loomMin:
      return static_cast<Fn>(&gloo::min<T>);
    case loomMax:
      return static_cast<Fn>(&gloo::max<T>);
    default:
      return static_cast<Fn>(&gloo::sum<T>);
  }
}

// The reduction for the older algorithm classes (AllreduceHalvingDoubling, ...).
template <typename T>
const gloo::ReductionFunction<T>* reductionFunction(loomRedOp_t op) {
  switch (op) {
    case loomProd:
      return gloo::ReductionFunction<T>::product;
    case loomMin:
      return gloo::ReductionFunction<T>::min;
    case loomMax:
      return gloo::ReductionFunction<T>::max;
    default:
      return gloo::ReductionFunction<T>::sum;
  }
}

class GlooBackend : public Backend {
 public:
  GlooBackend(std::shared_ptr<gloo::rendezvous::Context> context, std::string algorithm)
      : context_(std::move(context)), algorithm_(std::move(algorithm)) {}

  int rank() const override { return context_->rank; }
  int nranks() const override { return context_->size; }

  std::string describe() const override {
    return "Backend: gloo " + version() + " tcp 127.0.0.1, allreduce algorithm " +
           (algorithm_.empty() ? std::string("ring") : algorithm_);
  }

  std::string library() const override { return "gloo"; }

  std::string version() const override {
    return std::to_string(GLOO_VERSION_MAJOR) + "." + std::to_string(GLOO_VERSION_MINOR) + "." +
           std::to_string(GLOO_VERSION_PATCH);
  }

  // Only allreduce has a choice of algorithm in Gloo.
  std::string algorithm(Collective c) const override {
    if (c != Collective::AllReduce) return "auto";
    return algorithm_.empty() ? "ring" : algorithm_;
  }

  std::string unsupported(Collective c, loomDataType_t dtype, loomRedOp_t op) const override {
    switch (c) {
      case Collective::AllReduce:
      case Collective::AllGather:
      case Collective::Broadcast:
      case Collective::Reduce:
      case Collective::AlltoAll:
      case Collective::Gather:
      case Collective::Scatter:
        break;
      default:
        return "not in Gloo's collective API";
    }
    if (!withGlooType(dtype, [](auto) {})) return "Gloo has no such datatype";
    if (collectiveHasOp(c) && op == loomAvg) return "Gloo has no average";
    if (c == Collective::AllReduce && !algorithm_.empty() && algorithm_ != "ring" &&
        algorithm_ != "bcube" && algorithm_ != "hd" && algorithm_ != "ring_chunked") {
      return "unknown allreduce algorithm '" + algorithm_ + "' (ring, bcube, hd, ring_chunked)";
    }
    return {};
  }

  // Gloo binds buffers when a call's options or algorithm object is built, so that happens
  // here, once per size and placement, and run() only executes it.
  bool prepare(const CollCall& call) override {
    op_ = nullptr;
    return guarded(call, [&] {
      withGlooType(call.dtype,
                   [&](auto type) { op_ = build<typename decltype(type)::type>(call); });
    });
  }

  bool run(const CollCall& call) override { return guarded(call, op_); }

  bool allGather(const void* mine, void* all, size_t bytes) override {
    return guarded(nullptr, [&] {
      gloo::AllgatherOptions opts(context_);
      opts.setInput(static_cast<uint8_t*>(const_cast<void*>(mine)), bytes);
      opts.setOutput(static_cast<uint8_t*>(all), bytes * static_cast<size_t>(nranks()));
      gloo::allgather(opts);
    });
  }

  bool barrier() override {
    return guarded(nullptr, [&] {
      gloo::BarrierOptions opts(context_);
      gloo::barrier(opts);
    });
  }

 private:
  template <typename T>
  std::function<void()> build(const CollCall& call) {
    T* send = static_cast<T*>(const_cast<void*>(call.send));
    T* recv = static_cast<T*>(call.recv);
    const size_t count = call.count;
    const size_t n = static_cast<size_t>(nranks());
    if (count == 0) return [] {};  // nothing to move; Gloo would reject empty buffers
    switch (call.collective) {
      case Collective::AllReduce: {
        if (algorithm_ == "hd" || algorithm_ == "ring_chunked") {
          // These classes reduce in place only: out of place costs the copy a caller would
          // make.
          std::shared_ptr<gloo::Algorithm> algo;
          const std::vector<T*> ptrs{recv};
          if (algorithm_ == "hd") {
            algo = std::make_shared<gloo::AllreduceHalvingDoubling<T>>(
                context_, ptrs, static_cast<int>(count), reductionFunction<T>(call.op));
          } else {
            algo = std::make_shared<gloo::AllreduceRingChunked<T>>(
                context_, ptrs, static_cast<int>(count), reductionFunction<T>(call.op));
          }
          if (call.inPlace) return [algo] { algo->run(); };
          const size_t bytes = count * sizeof(T);
          return [algo, from = call.send, to = call.recv, bytes] {
            std::memcpy(to, from, bytes);
            algo->run();
          };
        }
        auto opts = std::make_shared<gloo::AllreduceOptions>(context_);
        opts->setAlgorithm(algorithm_ == "bcube" ? gloo::AllreduceOptions::Algorithm::BCUBE
                                                 : gloo::AllreduceOptions::Algorithm::RING);
        if (!call.inPlace) opts->setInput(send, count);
        opts->setOutput(recv, count);
        opts->setReduceFunction(reduceFunction<T>(call.op));
        opts->setTimeout(kTimeout);
        return [opts] { gloo::allreduce(*opts); };
      }
      case Collective::AllGather: {
        // Without an input Gloo gathers in place, from this rank's block of the output.
        auto opts = std::make_shared<gloo::AllgatherOptions>(context_);
        if (!call.inPlace) opts->setInput(send, count);
        opts->setOutput(recv, count * n);
        opts->setTimeout(kTimeout);
        return [opts] { gloo::allgather(*opts); };
      }
      case Collective::Broadcast: {
        auto opts = std::make_shared<gloo::BroadcastOptions>(context_);
        if (!call.inPlace && rank() == call.root) opts->setInput(send, count);
        opts->setOutput(recv, count);
        opts->setRoot(call.root);
        opts->setTimeout(kTimeout);
        return [opts] { gloo::broadcast(*opts); };
      }
      case Collective::Reduce: {
        auto opts = std::make_shared<gloo::ReduceOptions>(context_);
        if (!call.inPlace) opts->setInput(send, count);
        opts->setOutput(recv, count);
        opts->setRoot(call.root);
        opts->setReduceFunction(reduceFunction<T>(call.op));
        opts->setTimeout(kTimeout);
        return [opts] { gloo::reduce(*opts); };
      }
      case Collective::Gather: {
        // In place the root's input is its block of the output: Gloo copies it onto itself.
        auto opts = std::make_shared<gloo::GatherOptions>(context_);
        opts->setInput(send, count);
        if (rank() == call.root) opts->setOutput(recv, count * n);
        opts->setRoot(call.root);
        opts->setTimeout(kTimeout);
        return [opts] { gloo::gather(*opts); };
      }
      case Collective::Scatter: {
        auto opts = std::make_shared<gloo::ScatterOptions>(context_);
        if (rank() == call.root) {
          std::vector<T*> blocks(n);
          for (size_t j = 0; j < n; ++j) blocks[j] = send + j * count;
          opts->setInputs(blocks, count);
        }
        opts->setOutput(recv, count);
        opts->setRoot(call.root);
        opts->setTimeout(kTimeout);
        return [opts] { gloo::scatter(*opts); };
      }
      case Collective::AlltoAll: {
        // Gloo's alltoall needs distinct buffers: in place costs a copy into scratch space,
        // made here so the timed loop allocates nothing.
        const size_t bytes = count * n * sizeof(T);
        auto scratch = std::make_shared<std::vector<T>>(call.inPlace ? count * n : 0);
        auto opts = std::make_shared<gloo::AlltoallOptions>(context_);
        opts->setInput(call.inPlace ? scratch->data() : send, count * n);
        opts->setOutput(recv, count * n);
        opts->setTimeout(kTimeout);
        if (!call.inPlace) return [opts] { gloo::alltoall(*opts); };
        return [opts, scratch, to = static_cast<void*>(scratch->data()), from = call.recv, bytes] {
          std::memcpy(to, from, bytes);
          gloo::alltoall(*opts);
        };
      }
      default:
        return nullptr;
    }
  }

  // Gloo reports failures (timeouts, closed peers) by throwing.
  template <typename F>
  bool guarded(const CollCall* call, F&& f) {
    try {
      f();
      return true;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "loom-gloo-perf: rank %d: %s failed: %s\n", rank(),
                   call ? ncclTestsName(call->collective) : "exchange", e.what());
      return false;
    }
  }
  template <typename F>
  bool guarded(const CollCall& call, F&& f) {
    return guarded(&call, std::forward<F>(f));
  }

  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::string algorithm_;
  std::function<void()> op_;  // the prepared call
};

int runRank(toolkit::RankContext& self, const Options& options, const std::string& storeDir) {
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(self.rank(), self.nranks());
    context->setTimeout(kTimeout);
    gloo::rendezvous::FileStore store(storeDir);
    context->connectFullMesh(store, device);
    GlooBackend backend(std::move(context), options.algorithm);
    return runSweep(backend, options, "loom-gloo-perf", LOOM_GIT_COMMIT);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom-gloo-perf: rank %d: %s\n", self.rank(), e.what());
    return 3;
  }
}

}  // namespace
}  // namespace loom::perf

int main(int argc, char** argv) {
  using namespace loom::perf;
  Options options;
  std::string error;
  if (!parseOptions(argc, argv, &options, &error)) {
    if (!error.empty()) std::fprintf(stderr, "loom-gloo-perf: %s\n", error.c_str());
    std::fputs(usage("loom-gloo-perf").c_str(), stderr);
    return error.empty() ? 0 : 2;
  }
  if (options.nranks < 1) {
    std::fprintf(stderr, "loom-gloo-perf: -N RANKS is required (it forks its ranks)\n");
    return 2;
  }
  // The ranks meet through Gloo's FileStore in a fresh directory, removed afterwards.
  char dir[] = "/tmp/loom-gloo-perf.XXXXXX";
  if (!mkdtemp(dir)) {
    std::perror("loom-gloo-perf: mkdtemp");
    return 3;
  }
  const int rc = runForkedRanks(
      options, [&](loom::toolkit::RankContext& self) { return runRank(self, options, dir); });
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return rc;
}
