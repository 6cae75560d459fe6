// Micro-benchmark of the CPU reduction kernels: sum of two buffers into a third for every dtype
// at 32 KiB (L1/L2), 1 MiB (L2/L3) and 64 MiB (memory), beside memcpy of the same buffer size.
//
// Units: "bytes_per_second" counts memory traffic, reads plus writes (3 buffers for a reduction,
// 2 for memcpy), so a kernel running at memory speed shows the same figure as memcpy; the
// "buf_GB" counter is one buffer's bytes per second (the algorithmic rate).
//
//   loom_bench_reduce                           every dtype with the ISA in use (LOOM_REDUCE_ISA)
//   loom_bench_reduce --benchmark_filter=fp32   one dtype, every ISA the CPU runs
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/reduce_impl.h"
#include "base/reduce_kernels.h"
#include "base/dtype.h"

namespace loom::collectives {
namespace {

constexpr size_t kSizes[] = {32 << 10, 1 << 20, 64 << 20};

struct Buffers {
  explicit Buffers(size_t bytes) : bytes(bytes) {
    for (auto** p : {&a, &b, &dst}) {
      *p = static_cast<unsigned char*>(aligned_alloc(64, bytes));
      // 0x3c in every byte is a normal, finite value in every float format (1.0 in fp8 e5m2,
      // 1.5 in e4m3, 1.05 in fp16...), so no kernel hits a subnormal slow path; writing it
      // also faults the pages in before timing.
      memset(*p, 0x3c, bytes);
    }
  }
  ~Buffers() {
    free(a);
    free(b);
    free(dst);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  size_t bytes;
  unsigned char* a = nullptr;
  unsigned char* b = nullptr;
  unsigned char* dst = nullptr;
};

void setRates(benchmark::State& state, size_t bytes, int buffersTouched) {
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes) * buffersTouched);
  state.counters["buf_GB"] = benchmark::Counter(double(state.iterations()) * double(bytes) / 1e9,
                                                benchmark::Counter::kIsRate);
}

void benchReduce(benchmark::State& state, loomDataType_t dtype,
                 const reduce_internal::KernelTable* table, bool inPlace) {
  const size_t bytes = size_t(state.range(0));
  Buffers buf(bytes);
  const size_t count = bytes / dtypeSize(dtype);
  unsigned char* dst = inPlace ? buf.a : buf.dst;
  for (auto _ : state) {
    if (table != nullptr)
      table->reduce[dtype][loomSum](dst, buf.a, buf.b, count);
    else
      reduce(dst, buf.a, buf.b, count, dtype, loomSum);
    benchmark::DoNotOptimize(dst);
    benchmark::ClobberMemory();
  }
  setRates(state, bytes, 3);
}

void benchMemcpy(benchmark::State& state) {
  const size_t bytes = size_t(state.range(0));
  Buffers buf(bytes);
  for (auto _ : state) {
    memcpy(buf.dst, buf.a, bytes);
    benchmark::DoNotOptimize(buf.dst);
    benchmark::ClobberMemory();
  }
  setRates(state, bytes, 2);
}

// Names as nccl-tests spells dtypes, but fp-prefixed for the float ones so filters read well.
const char* shortName(loomDataType_t d) {
  switch (d) {
    case loomInt8: return "int8";
    case loomUint8: return "uint8";
    case loomInt32: return "int32";
    case loomUint32: return "uint32";
    case loomInt64: return "int64";
    case loomUint64: return "uint64";
    case loomFloat16: return "fp16";
    case loomBfloat16: return "bf16";
    case loomFloat32: return "fp32";
    case loomFloat64: return "fp64";
    case loomFloat8e4m3: return "fp8e4m3";
    case loomFloat8e5m2: return "fp8e5m2";
    default: return "invalid";
  }
}

void registerAll() {
  auto sizes = [](benchmark::internal::Benchmark* b) {
    for (size_t s : kSizes) b->Arg(int64_t(s));
    // Rates come from CPU time (Google Benchmark's default): one thread, buffers pre-faulted,
    // so it equals wall time on an idle machine and stays meaningful on a shared one.
    b->Unit(benchmark::kMicrosecond);
  };
  sizes(benchmark::RegisterBenchmark("memcpy", benchMemcpy));
  // Every dtype through the public entry point (the ISA that LOOM_REDUCE_ISA selects).
  for (int d = 0; d < loomNumTypes; ++d) {
    auto dtype = static_cast<loomDataType_t>(d);
    std::string name = std::string("sum/") + shortName(dtype) + "/" + reduceIsa();
    sizes(benchmark::RegisterBenchmark(name.c_str(), benchReduce, dtype, nullptr, false));
  }
  // The formats that matter most, under every ISA the CPU runs, and fp32 in place (how the
  // executor's recvReduce calls it).
  for (loomDataType_t dtype : {loomFloat32, loomFloat16, loomBfloat16}) {
    for (const char* isa : {"avx512", "avx2", "generic"}) {
      const reduce_internal::KernelTable* table = reduce_internal::tableFor(isa);
      if (table == nullptr || std::string(isa) == reduceIsa()) continue;
      std::string name = std::string("sum/") + shortName(dtype) + "/" + isa;
      sizes(benchmark::RegisterBenchmark(name.c_str(), benchReduce, dtype, table, false));
    }
  }
  sizes(benchmark::RegisterBenchmark((std::string("sum_inplace/fp32/") + reduceIsa()).c_str(),
                                     benchReduce, loomFloat32, nullptr, true));
}

}  // namespace
}  // namespace loom::collectives

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  loom::collectives::registerAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
