// The one implementation of the CPU reduction kernels (base/reduce_kernels.h).
//
// This header has two parts:
//  1. Declarations shared by the dispatcher, the tests and the per-ISA translation units: the
//     kernel table and the per-ISA entry points. Always visible.
//  2. The implementation, compiled only where LOOM_REDUCE_NS is defined. Each of
//     reduce_avx512.cc, reduce_avx2.cc and reduce_generic.cc defines it (and LOOM_REDUCE_ISA_NAME)
//     and includes this header once; CMake compiles each of them with its own -m flags.
//
// Why everything of part 2 sits in an ISA namespace *and* an anonymous namespace: the same
// templates are compiled three times with different instruction sets. With external linkage the
// linker would keep one copy of each instantiation (an ODR merge) and could hand AVX-512 code to
// the baseline path. For the same reason part 2 calls no inline function of the standard library
// (std::min, std::fmin, std::bit_cast...; type traits are fine), only builtins, intrinsics (which
// are static inline) and its own code.
//
// Semantics, shared by every ISA bit for bit (the tests check it):
//  - Integers: sum and prod wrap (computed in the unsigned type); min/max compare as signed or
//    unsigned per dtype. avg reduces as sum; divideInPlace truncates toward zero.
//  - fp32/fp64: IEEE operations of the type itself (no fast-math, no contraction); subnormals
//    are kept unless the caller set FTZ/DAZ in MXCSR.
//  - fp16, bf16, fp8: decode to fp32, operate in fp32, round back to nearest even. fp32 has more
//    than 2p+2 bits of precision for every one of these formats, so a sum or product rounded
//    twice (to fp32, then to the format) equals the correctly rounded result.
//  - min/max on floats are IEEE 754-2019 minimumNumber/maximumNumber, like fminf/fmaxf and NCCL:
//    a NaN operand is ignored (the result is NaN only when both are NaN; then it is `a`), and
//    -0 < +0 so min(-0, +0) = -0 and max(-0, +0) = +0 whatever the operand order (fminf leaves
//    that open; we pin it so that every ISA and every reduction order agree).
//  - Rounding to fp16: overflow goes to inf (as __float2half_rn and F16C do). A NaN becomes a
//    quiet NaN keeping the sign and the top payload bits (exactly what F16C's vcvtps2ph does, so
//    the software and F16C paths agree). bf16 NaN: likewise (sign, quiet bit, top 6 payload bits).
//  - Rounding to fp8 follows CUDA's __nv_fp8_e4m3 / __nv_fp8_e5m2 constructors (SATFINITE, which
//    NCCL's device kernels use): round to nearest even; results beyond the largest finite value,
//    and ±inf, saturate to ±448 (e4m3) / ±57344 (e5m2); NaN gives 0x7F (e4m3) or 0x7E|payload
//    (e5m2) with the sign. e5m2 *inputs* that are inf decode to inf, so inf + x saturates to
//    ±57344, as on a GPU.
//  - divideInPlace on floats divides in the compute type (fp32 for the narrow formats) by
//    float(n) / double(n) and rounds back like the reduction does.
#ifndef LOOM_COLLECTIVES_REDUCE_IMPL_DECLS_H_
#define LOOM_COLLECTIVES_REDUCE_IMPL_DECLS_H_

#include <cstddef>
#include <cstdint>

#include "base/reduce_kernels.h"
#include "loom/loom.h"

namespace loom {
namespace reduce_internal {

// dst[i] = a[i] op b[i]; one per dtype × op (avg points at sum).
using ReduceFn = ReduceKernel;
// buf[i] /= n; one per dtype.
using DivideFn = void (*)(void* buf, size_t count, int n);

struct KernelTable {
  const char* isa;  // "avx512", "avx2" or "generic"
  ReduceFn reduce[loomNumTypes][loomNumOps];
  DivideFn divide[loomNumTypes];
};

// Test hooks, defined in reduce_kernels.cc.
// Whether this CPU (and OS) can run the kernels built for `isa`.
bool cpuSupports(const char* isa);
// The kernels of `isa`, or nullptr when the name is unknown or the CPU cannot run them.
const KernelTable* tableFor(const char* isa);
// What LOOM_REDUCE_ISA=`requested` selects on this CPU: the requested ISA, or the best one
// below it that the CPU runs ("auto" and unknown names start from the top).
const KernelTable& chooseTable(const char* requested);

}  // namespace reduce_internal

// Per-ISA entry points, one per translation unit.
namespace avx512 {
const reduce_internal::KernelTable& kernelTable();
}
namespace avx2 {
const reduce_internal::KernelTable& kernelTable();
}
namespace generic {
const reduce_internal::KernelTable& kernelTable();
}

}  // namespace loom

#endif  // LOOM_COLLECTIVES_REDUCE_IMPL_DECLS_H_

// ---------------------------------------------------------------------------------------------
// Part 2: the implementation, once per including ISA translation unit.
#ifdef LOOM_REDUCE_NS

#ifndef LOOM_REDUCE_ISA_NAME
#error "define LOOM_REDUCE_ISA_NAME together with LOOM_REDUCE_NS"
#endif

#include <type_traits>

#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace loom::LOOM_REDUCE_NS {
namespace {

// Elements are accessed through this wrapper so that the compiler assumes 1-byte alignment:
// callers pass arbitrary pointers (offset by one byte in the tests), and a plain `float*` would
// let the vectoriser peel to an assumed element alignment and then use aligned vector loads.
template <typename T>
struct __attribute__((packed, may_alias)) Unaligned {
  T v;
};

template <typename To, typename From>
inline To bitCast(From x) {
  static_assert(sizeof(To) == sizeof(From));
  return __builtin_bit_cast(To, x);
}

template <typename F>
using BitsOf = std::conditional_t<sizeof(F) == 4, uint32_t, uint64_t>;

// ---- Operators on the compute type --------------------------------------------------------

struct OpSum {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    } else {
      return a + b;
    }
  }
};

struct OpProd {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // uint8 operands promote to int, where 255 * 255 cannot overflow; wider types stay
      // unsigned. Either way the truncation back to T is the wrapped product.
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    } else {
      return a * b;
    }
  }
};

// The selects below are written so that -O3 turns them into compare + blend vectors.
struct OpMin {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return a < b ? a : b;
    } else {
      T m = a < b ? a : b;  // b when equal or unordered
      m = b != b ? a : m;   // ignore a NaN b
      // Equal operands differ at most in the sign of zero: OR keeps the -0.
      T z = bitCast<T>(bitCast<BitsOf<T>>(a) | bitCast<BitsOf<T>>(b));
      return a == b ? z : m;
    }
  }
};

struct OpMax {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return a > b ? a : b;
    } else {
      T m = a > b ? a : b;
      m = b != b ? a : m;
      T z = bitCast<T>(bitCast<BitsOf<T>>(a) & bitCast<BitsOf<T>>(b));  // AND keeps the +0
      return a == b ? z : m;
    }
  }
};

// ---- Scalar conversions of the narrow float formats ---------------------------------------
// Branch-free integer and float arithmetic, so that the block loops below vectorise with any ISA.

// A binary interchange-like format with kExp exponent and kMan mantissa bits, bias
// 2^(kExp-1)-1. kFiniteOnly: no infinities, the all-ones pattern is the only NaN (OCP E4M3FN).
// kSatFinite: results that overflow (and ±inf) saturate to the largest finite value.
template <int kExp, int kMan, bool kFiniteOnly, bool kSatFinite>
struct SmallFloat {
  static constexpr int kBias = (1 << (kExp - 1)) - 1;
  static constexpr uint32_t kEmMask = (1u << (kExp + kMan)) - 1;  // all but the sign
  static constexpr uint32_t kManMask = (1u << kMan) - 1;
  static constexpr uint32_t kExpAll = (1u << kExp) - 1;
  static constexpr uint32_t kInf = kExpAll << kMan;
  static constexpr uint32_t kMaxFinite =
      kFiniteOnly ? kEmMask - 1 : (((kExpAll - 1) << kMan) | kManMask);
  // The largest exponent of a finite value (unbiased).
  static constexpr int kEmax = (kFiniteOnly ? int(kExpAll) : int(kExpAll) - 1) - kBias;

  // Every float operation below is unconditional and its result is used unconditionally (the
  // specials are ORed or max-ed in, clamps act on inputs). A ?: picking a float result gets the
  // operation sunk into a branch, which -ftrapping-math (GCC's default) then forbids
  // if-converting back, and the loop stays scalar on SSE/AVX2 (AVX-512 escapes this with masked
  // operations). Flags are computed arithmetically rather than compared for the same reason:
  // GCC would otherwise thread the loop body into per-case paths.
  static float decode(uint32_t h) {
    uint32_t sign = ((h >> (kExp + kMan)) & 1u) << 31;
    uint32_t e = (h >> kMan) & kExpAll;
    uint32_t m = h & kManMask;
    // value = significand · 2^(max(e, 1) - bias - kMan): an exact product of a small integer and
    // a normal power of two, so no float subnormal is ever an operand (slow on some cores).
    uint32_t normal = (e + kExpAll) >> kExp;  // 1 iff e != 0
    int32_t significand = int32_t(m | (normal << kMan));
    uint32_t scaleExp = e + (1u - normal) + uint32_t(127 - kBias - kMan);
    uint32_t r = bitCast<uint32_t>(float(significand) * bitCast<float>(scaleExp << 23));
    // Inf / NaN: the product already holds the payload in its mantissa; set the exponent to all
    // ones. E4M3FN's only NaN (all ones) decodes as 480, which the same OR turns into a NaN.
    uint32_t special = kFiniteOnly ? ((h & kEmMask) + 1) >> (kExp + kMan) : (e + 1) >> kExp;
    r |= (0u - special) & 0x7f800000u;
    return bitCast<float>(r | sign);
  }

  static uint32_t encode(float f) {
    uint32_t u = bitCast<uint32_t>(f);
    uint32_t sign = (u >> 31) << (kExp + kMan);
    u &= 0x7fffffffu;
    // Inputs of 2^(emax+1) and up (inf, NaN included) are clamped to the float just below it,
    // which rounds up to inf (fp16) or past the largest finite value (saturated below).
    constexpr uint32_t kMinExp = 127 + 1 - kBias;  // fp32 biased exponent of the smallest normal
    constexpr uint32_t kOverflowBits = uint32_t(kEmax + 1 + 127) << 23;  // 2^(emax+1)
    uint32_t x = u < kOverflowBits ? u : kOverflowBits - 1;
    // Round to nearest even with the FPU: adding C = 2^(q + 23), where q is the exponent of the
    // result's last place (that of x, but not below the subnormal quantum), leaves the sum with
    // exactly that last place; its low bits are then the rounded significand k. A carry of k
    // into the next binade (or from subnormal into normal) falls into the exponent field.
    uint32_t exp = x >> 23;
    exp = exp < kMinExp ? kMinExp : exp;
    float c = bitCast<float>((exp + 23 - kMan) << 23);
    uint32_t k = bitCast<uint32_t>(bitCast<float>(x) + c) - bitCast<uint32_t>(c);
    uint32_t r = ((exp - kMinExp) << kMan) + k;
    if constexpr (kSatFinite) r = r < kMaxFinite ? r : kMaxFinite;
    // NaN: every NaN pattern is above every other result, so a max puts it in.
    uint32_t nan;
    if constexpr (kFiniteOnly) {
      nan = kEmMask;
    } else {
      nan = kInf | (1u << (kMan - 1)) | ((u >> (23 - kMan)) & kManMask);  // quiet, top payload
    }
    nan = u > 0x7f800000u ? nan : 0u;
    r = r > nan ? r : nan;
    return r | sign;
  }
};

using Fp16Codec = SmallFloat<5, 10, false, false>;
using E4m3Codec = SmallFloat<4, 3, true, true>;
using E5m2Codec = SmallFloat<5, 2, false, true>;

struct Bf16Codec {
  static float decode(uint32_t h) { return bitCast<float>((h & 0xffffu) << 16); }
  static uint32_t encode(float f) {
    uint32_t u = bitCast<uint32_t>(f);
    uint32_t rn = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = (u >> 16) | 0x40u;  // keep sign and payload, set the quiet bit
    return (u & 0x7fffffffu) > 0x7f800000u ? nan : rn;
  }
};

// ---- Block conversions ----------------------------------------------------------------------

// Narrow formats are converted through fp32 blocks of this many elements on the stack: small
// enough to stay in L1 beside the streams, large enough to amortise the loop overheads.
constexpr size_t kBlock = 512;

// Decodes n elements of Storage at src into out, and back. Plain loops (vectorised by -O3),
// except fp16 where F16C / AVX-512 convert 8 / 16 elements per instruction; their tails use the
// scalar codec, which matches the hardware bit for bit.
template <typename Storage, typename Codec>
struct Narrow {
  using StorageType = Storage;

  static void decode(const void* src, float* out, size_t n) {
    const auto* s = static_cast<const Unaligned<Storage>*>(src);
    size_t i = 0;
    if constexpr (std::is_same_v<Codec, Fp16Codec>) {
#if defined(__AVX512F__)
      for (; i + 16 <= n; i += 16)
        // The maskz forms with a full mask are the plain instruction; the unmasked intrinsics
        // trip GCC 12's -Wmaybe-uninitialized on their internal _mm512_undefined_ps().
        _mm512_storeu_ps(
            out + i, _mm512_maskz_cvtph_ps(
                         0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i_u*>(s + i))));
#elif defined(__F16C__)
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(
            out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i_u*>(s + i))));
#endif
    }
    for (; i < n; ++i) out[i] = Codec::decode(s[i].v);
  }

  static void encode(const float* in, void* dst, size_t n) {
    auto* d = static_cast<Unaligned<Storage>*>(dst);
    size_t i = 0;
    if constexpr (std::is_same_v<Codec, Fp16Codec>) {
#if defined(__AVX512F__) || defined(__F16C__)
      constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
#endif
#if defined(__AVX512F__)
      for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i_u*>(d + i),
                            _mm512_maskz_cvtps_ph(0xffff, _mm512_loadu_ps(in + i), kRound));
#elif defined(__F16C__)
      for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i_u*>(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(in + i), kRound));
#endif
    }
    for (; i < n; ++i) d[i].v = static_cast<Storage>(Codec::encode(in[i]));
  }
};

// fp8 decodes through fp16, which holds every fp8 value exactly, so that it rides on F16C where
// the ISA has it (the software decode costs about as much as the whole rest of the kernel).
// e5m2 is the top byte of an fp16. e4m3 moved into fp16's fields keeps its exponent bits, so
// it reads 2^8 too small (bias 7, not 15), subnormals included; an exact multiply by 2^8
// restores it. Its NaN (all ones) would read as 480 and is mapped to an fp16 NaN instead.
// Encoding stays direct (fp32 → fp8): rounding through fp16 would round twice.
template <typename Codec, bool kE4m3>
struct Fp8 {
  using StorageType = uint8_t;

  static void decode(const void* src, float* out, size_t n) {  // n <= kBlock
    const auto* s = static_cast<const Unaligned<uint8_t>*>(src);
    alignas(64) uint16_t h[kBlock];
    for (size_t i = 0; i < n; ++i) {
      uint32_t x = s[i].v;
      if constexpr (kE4m3) {
        uint32_t em = x & 0x7fu;
        h[i] = static_cast<uint16_t>(((x & 0x80u) << 8) | (em == 0x7fu ? 0x7e00u : em << 7));
      } else {
        h[i] = static_cast<uint16_t>(x << 8);
      }
    }
    Narrow<uint16_t, Fp16Codec>::decode(h, out, n);
    if constexpr (kE4m3) {
      for (size_t i = 0; i < n; ++i) out[i] *= 256.0f;
    }
  }

  static void encode(const float* in, void* dst, size_t n) {
    Narrow<uint8_t, Codec>::encode(in, dst, n);
  }
};

// ---- The kernels --------------------------------------------------------------------------

// Types that the CPU computes on directly.
template <typename T>
struct NativeKernels {
  template <typename Op>
  static void reduce(void* dst, const void* a, const void* b, size_t n) {
    auto* d = static_cast<Unaligned<T>*>(dst);
    const auto* x = static_cast<const Unaligned<T>*>(a);
    const auto* y = static_cast<const Unaligned<T>*>(b);
    // dst may alias a or b exactly, which carries no dependence between iterations; ivdep says so,
    // sparing the run-time overlap check and its slower fallback loop (in place: 1.6x faster).
#pragma GCC ivdep
    for (size_t i = 0; i < n; ++i) d[i].v = Op::apply(x[i].v, y[i].v);
  }

  static void divide(void* buf, size_t n, int divisor) {
    auto* p = static_cast<Unaligned<T>*>(buf);
    if constexpr (std::is_floating_point_v<T>) {
      const T q = static_cast<T>(divisor);
      for (size_t i = 0; i < n; ++i) p[i].v = p[i].v / q;
    } else if constexpr (sizeof(T) <= 4) {
      // No SIMD integer division exists; a float (8-bit) or double (32-bit) quotient truncated
      // is exact instead: |x| < 2^k and the true quotient is at least 1/n away from the next
      // integer, a relative gap of > 2^-k, larger than the rounding error 2^-24 / 2^-53.
      // (For 8-bit values a divisor above 2^24 rounds in float but the quotient is 0 anyway.)
      using Wide = std::conditional_t<sizeof(T) == 1, float, double>;
      const Wide q = static_cast<Wide>(divisor);
      for (size_t i = 0; i < n; ++i) p[i].v = static_cast<T>(static_cast<Wide>(p[i].v) / q);
    } else if constexpr (std::is_signed_v<T>) {
      const T q = static_cast<T>(divisor);
      for (size_t i = 0; i < n; ++i) p[i].v = p[i].v / q;
    } else {
      const T q = static_cast<T>(static_cast<unsigned>(divisor));
      for (size_t i = 0; i < n; ++i) p[i].v = p[i].v / q;
    }
  }
};

// Narrow float formats: convert a block to fp32 on the stack, run the fp32 kernel on it,
// convert back. The block fits L1 with room to spare, so the extra passes cost little next to
// the memory traffic, and each pass is a simple loop that vectorises on its own.
template <typename Format>
struct NarrowKernels {
  using S = typename Format::StorageType;
  template <typename Op>
  static void reduce(void* dst, const void* a, const void* b, size_t n) {
    alignas(64) float fa[kBlock];
    alignas(64) float fb[kBlock];
    auto* d = static_cast<unsigned char*>(dst);
    const auto* x = static_cast<const unsigned char*>(a);
    const auto* y = static_cast<const unsigned char*>(b);
    for (size_t i = 0; i < n; i += kBlock) {
      const size_t m = n - i < kBlock ? n - i : kBlock;
      const size_t off = i * sizeof(S);
      // Both inputs are read into the block before dst is written, so aliasing is harmless.
      Format::decode(x + off, fa, m);
      Format::decode(y + off, fb, m);
      NativeKernels<float>::template reduce<Op>(fa, fa, fb, m);
      Format::encode(fa, d + off, m);
    }
  }

  static void divide(void* buf, size_t n, int divisor) {
    alignas(64) float f[kBlock];
    auto* p = static_cast<unsigned char*>(buf);
    for (size_t i = 0; i < n; i += kBlock) {
      const size_t m = n - i < kBlock ? n - i : kBlock;
      Format::decode(p + i * sizeof(S), f, m);
      NativeKernels<float>::divide(f, m, divisor);
      Format::encode(f, p + i * sizeof(S), m);
    }
  }
};

template <typename K>
constexpr void fillRow(reduce_internal::KernelTable& t, loomDataType_t dtype) {
  t.reduce[dtype][loomSum] = &K::template reduce<OpSum>;
  t.reduce[dtype][loomProd] = &K::template reduce<OpProd>;
  t.reduce[dtype][loomMin] = &K::template reduce<OpMin>;
  t.reduce[dtype][loomMax] = &K::template reduce<OpMax>;
  t.reduce[dtype][loomAvg] = &K::template reduce<OpSum>;  // the caller divides at the end
  t.divide[dtype] = &K::divide;
}

constexpr reduce_internal::KernelTable makeTable() {
  reduce_internal::KernelTable t{};
  t.isa = LOOM_REDUCE_ISA_NAME;
  fillRow<NativeKernels<int8_t>>(t, loomInt8);
  fillRow<NativeKernels<uint8_t>>(t, loomUint8);
  fillRow<NativeKernels<int32_t>>(t, loomInt32);
  fillRow<NativeKernels<uint32_t>>(t, loomUint32);
  fillRow<NativeKernels<int64_t>>(t, loomInt64);
  fillRow<NativeKernels<uint64_t>>(t, loomUint64);
  fillRow<NarrowKernels<Narrow<uint16_t, Fp16Codec>>>(t, loomFloat16);
  fillRow<NarrowKernels<Narrow<uint16_t, Bf16Codec>>>(t, loomBfloat16);
  fillRow<NativeKernels<float>>(t, loomFloat32);
  fillRow<NativeKernels<double>>(t, loomFloat64);
  fillRow<NarrowKernels<Fp8<E4m3Codec, true>>>(t, loomFloat8e4m3);
  fillRow<NarrowKernels<Fp8<E5m2Codec, false>>>(t, loomFloat8e5m2);
  return t;
}

constinit const reduce_internal::KernelTable kTable = makeTable();

}  // namespace

const reduce_internal::KernelTable& kernelTable() { return kTable; }

}  // namespace loom::LOOM_REDUCE_NS

#endif  // LOOM_REDUCE_NS
