// Run-time dispatch of the reduction kernels: the kernel table is chosen once, from
// LOOM_REDUCE_ISA and what the CPU supports; every call is then one indexed indirect call.
#include "base/reduce_kernels.h"

#include <strings.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "base/reduce_impl.h"
#include "base/dtype.h"
#include "base/log.h"
#include "base/params.h"

namespace loom {
namespace reduce_internal {
namespace {

struct IsaEntry {
  const char* name;
  const KernelTable& (*table)();
};

// Best first: a request falls back down this list.
constexpr IsaEntry kIsas[] = {
    {"avx512", &avx512::kernelTable},
    {"avx2", &avx2::kernelTable},
    {"generic", &generic::kernelTable},
};
constexpr int kNumIsas = sizeof(kIsas) / sizeof(kIsas[0]);

int isaIndex(const char* name) {
  for (int i = 0; i < kNumIsas; ++i)
    if (strcasecmp(name, kIsas[i].name) == 0) return i;
  return -1;
}

const KernelTable& activeTable() {
  // A function-local static: initialised once, thread-safely, on the first reduction.
  static const KernelTable& table = chooseTable(params::getString("LOOM_REDUCE_ISA").c_str());
  return table;
}

#if defined(__x86_64__) || defined(__i386__)
// By CPUID: clang's __builtin_cpu_supports does not know "f16c".
bool hasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

}  // namespace

bool cpuSupports(const char* isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  switch (isaIndex(isa)) {
    case 0:
      // The exact feature set reduce_avx512.cc is compiled with (see CMakeLists.txt).
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx2") &&
             __builtin_cpu_supports("fma") && hasF16c();
    case 1:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && hasF16c();
    case 2:
      return true;
    default:
      return false;
  }
#else
  return isaIndex(isa) == 2;
#endif
}

const KernelTable* tableFor(const char* isa) {
  int i = isaIndex(isa);
  if (i < 0 || !cpuSupports(kIsas[i].name)) return nullptr;
  return &kIsas[i].table();
}

const KernelTable& chooseTable(const char* requested) {
  const bool isAuto = strcasecmp(requested, "auto") == 0;
  int start = 0;
  if (!isAuto) {
    start = isaIndex(requested);
    if (start < 0) {
      LOOM_WARN("COLL", "LOOM_REDUCE_ISA=%s is not one of auto, avx512, avx2, generic; using auto",
                requested);
      start = 0;
    }
  }
  for (int i = start; i < kNumIsas; ++i) {
    if (!cpuSupports(kIsas[i].name)) continue;
    if (i != start && !isAuto)
      LOOM_WARN("COLL", "LOOM_REDUCE_ISA=%s: this CPU lacks it; using %s", requested,
                kIsas[i].name);
    return kIsas[i].table();
  }
  return generic::kernelTable();  // not reached: generic always runs
}

}  // namespace reduce_internal

void reduce(void* dst, const void* a, const void* b, size_t count, loomDataType_t dtype,
            loomRedOp_t op) {
  // Callers validate dtype and op at the API boundary; a bad value here is a no-op rather than
  // an out-of-bounds read of the table.
  if (count == 0) return;
  if (ReduceKernel kernel = reduceKernel(dtype, op)) kernel(dst, a, b, count);
}

ReduceKernel reduceKernel(loomDataType_t dtype, loomRedOp_t op) {
  if (!validDtype(dtype) || !validOp(op)) return nullptr;
  return reduce_internal::activeTable().reduce[dtype][op];
}

void divideInPlace(void* buf, size_t count, loomDataType_t dtype, int n) {
  // n is a rank count; dividing by 1 changes nothing, and n < 1 has no meaning for avg.
  if (count == 0 || n <= 1 || !validDtype(dtype)) return;
  reduce_internal::activeTable().divide[dtype](buf, count, n);
}

const char* reduceIsa() { return reduce_internal::activeTable().isa; }

}  // namespace loom
