// CPU reduction kernels for every dtype × op. One portable implementation compiled for
// several instruction sets (AVX-512, AVX2, baseline); the best one the CPU supports is
// chosen once at run time. fp16, bf16 and fp8 accumulate in fp32 and round to nearest even.
#pragma once

#include <cstddef>

#include "loom/loom.h"

namespace loom {

// dst[i] = a[i] ⊕ b[i] for i < count. dst may alias a or b exactly; no alignment needed.
// loomAvg reduces as a sum (the caller divides once at the end with divideInPlace).
void reduce(void* dst, const void* a, const void* b, size_t count, loomDataType_t dtype,
            loomRedOp_t op);

// The kernel reduce() runs for dtype and op: kernel(dst, a, b, count), same contract, count
// > 0. For a caller that reduces many pieces with one dtype and op (the executor's calls), so
// that it looks the kernel up once. Null for an invalid dtype or op.
using ReduceKernel = void (*)(void* dst, const void* a, const void* b, size_t count);
ReduceKernel reduceKernel(loomDataType_t dtype, loomRedOp_t op);

// buf[i] = buf[i] / n, the final step of loomAvg (integer types divide, truncating).
void divideInPlace(void* buf, size_t count, loomDataType_t dtype, int n);

// The instruction set in use: "avx512", "avx2" or "generic".
const char* reduceIsa();

}  // namespace loom
