// Tests of the CPU reduction kernels (base/reduce_kernels.h) against a scalar reference
// written independently here: its narrow-float codecs search a table of every finite value of
// the format instead of using bit tricks, and results are compared bit for bit (NaN results:
// any NaN matches, and every ISA must then agree with the others byte for byte).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/reduce_impl.h"
#include "base/reduce_kernels.h"
#include "base/dtype.h"

namespace loom::collectives {
namespace {

using reduce_internal::KernelTable;

constexpr const char* kIsas[] = {"avx512", "avx2", "generic"};
constexpr loomDataType_t kDtypes[] = {loomInt8,    loomUint8,   loomInt32,      loomUint32,
                                      loomInt64,   loomUint64,  loomFloat16,    loomBfloat16,
                                      loomFloat32, loomFloat64, loomFloat8e4m3, loomFloat8e5m2};
constexpr loomRedOp_t kOps[] = {loomSum, loomProd, loomMin, loomMax, loomAvg};
constexpr size_t kLengths[] = {0, 1, 7, 33, 1000 + 3, 4096 + 3};

// ---- Reference narrow-float formats ---------------------------------------------------------

struct FormatSpec {
  int exp;
  int man;
  bool finiteOnly;  // no infinities; all-ones is the only NaN (E4M3FN)
  bool satFinite;   // overflow saturates to the largest finite value (CUDA SATFINITE)
};

constexpr uint32_t kAnyNan = 0xffffffffu;  // "some NaN": matches any NaN bit pattern

class RefFormat {
 public:
  explicit RefFormat(FormatSpec s) : s_(s) {
    bias_ = (1 << (s.exp - 1)) - 1;
    signShift_ = s.exp + s.man;
    uint32_t expAll = (1u << s.exp) - 1;
    maxPattern_ = s.finiteOnly ? (1u << signShift_) - 2 : ((expAll - 1) << s.man) | manMask();
    for (uint32_t p = 0; p <= maxPattern_; ++p) values_.push_back(decode(p));
    // Patterns of finite positive values increase with their value: the table is sorted.
    for (size_t i = 1; i < values_.size(); ++i) EXPECT_LT(values_[i - 1], values_[i]);
  }

  uint32_t manMask() const { return (1u << s_.man) - 1; }
  uint32_t maxPattern() const { return maxPattern_; }

  bool isNan(uint32_t bits) const {
    uint32_t em = bits & ((1u << signShift_) - 1);
    if (s_.finiteOnly) return em == (1u << signShift_) - 1;
    return (em >> s_.man) == (1u << s_.exp) - 1 && (em & manMask()) != 0;
  }

  double decode(uint32_t bits) const {
    double sign = (bits >> signShift_) & 1 ? -1.0 : 1.0;
    uint32_t e = (bits >> s_.man) & ((1u << s_.exp) - 1);
    uint32_t m = bits & manMask();
    if (isNan(bits)) return std::nan("");
    if (!s_.finiteOnly && e == (1u << s_.exp) - 1) return sign * INFINITY;
    if (e == 0) return sign * std::ldexp(double(m), 1 - bias_ - s_.man);
    return sign * std::ldexp(double(m + (1u << s_.man)), int(e) - bias_ - s_.man);
  }

  // Round to nearest even; kAnyNan for NaN.
  uint32_t encode(float x) const {
    if (std::isnan(x)) return kAnyNan;
    uint32_t sign = std::signbit(x) ? 1u << signShift_ : 0u;
    double a = std::fabs(double(x));
    double maxValue = values_.back();
    // The value one ulp above the largest finite one (inf's place, or E4M3's NaN).
    double next = maxValue + std::ldexp(1.0, int(std::ilogb(maxValue)) - s_.man);
    double mid = (maxValue + next) / 2;
    if (a >= maxValue) {
      if (s_.satFinite) return maxPattern_ | sign;
      bool up = a > mid || (a == mid && ((maxPattern_ + 1) & 1) == 0);
      return (up ? (((1u << s_.exp) - 1) << s_.man) : maxPattern_) | sign;
    }
    auto it = std::lower_bound(values_.begin(), values_.end(), a);
    uint32_t hi = uint32_t(it - values_.begin());
    if (values_[hi] == a) return hi | sign;
    uint32_t lo = hi - 1;
    double m = (values_[lo] + values_[hi]) / 2;  // exact: both have few significant bits
    uint32_t p = a < m ? lo : a > m ? hi : ((lo & 1) == 0 ? lo : hi);
    return p | sign;
  }

 private:
  FormatSpec s_;
  int bias_;
  int signShift_;
  uint32_t maxPattern_;
  std::vector<double> values_;
};

const RefFormat& refFormat(loomDataType_t dtype) {
  static const RefFormat fp16({5, 10, false, false});
  static const RefFormat bf16({8, 7, false, false});
  static const RefFormat e4m3({4, 3, true, true});
  static const RefFormat e5m2({5, 2, false, true});
  switch (dtype) {
    case loomFloat16: return fp16;
    case loomBfloat16: return bf16;
    case loomFloat8e4m3: return e4m3;
    default: return e5m2;
  }
}

bool isNarrowFloat(loomDataType_t d) {
  return d == loomFloat16 || d == loomBfloat16 || d == loomFloat8e4m3 || d == loomFloat8e5m2;
}
bool isFloat(loomDataType_t d) { return isNarrowFloat(d) || d == loomFloat32 || d == loomFloat64; }

// ---- Reference element operations -----------------------------------------------------------

template <typename F>
F refMin(F a, F b) {
  if (std::isnan(a)) return b;  // NaN only when both are
  if (std::isnan(b)) return a;
  if (a == b) return std::signbit(a) ? a : b;  // -0 below +0
  return a < b ? a : b;
}

template <typename F>
F refMax(F a, F b) {
  if (std::isnan(a)) return b;
  if (std::isnan(b)) return a;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

template <typename F>
F refFloatOp(loomRedOp_t op, F a, F b) {
  switch (op) {
    case loomProd: return a * b;
    case loomMin: return refMin(a, b);
    case loomMax: return refMax(a, b);
    default: return a + b;  // sum, avg
  }
}

template <typename T>
T refIntOp(loomRedOp_t op, T a, T b) {
  // Wrapping arithmetic modulo 2^64, then truncation to T (modular since C++20).
  switch (op) {
    case loomProd: return static_cast<T>(uint64_t(a) * uint64_t(b));
    case loomMin: return a < b ? a : b;
    case loomMax: return a > b ? a : b;
    default: return static_cast<T>(uint64_t(a) + uint64_t(b));
  }
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
void store(uint8_t* p, T v) {
  memcpy(p, &v, sizeof(T));
}

uint32_t loadBits(loomDataType_t d, const uint8_t* p) {
  return dtypeSize(d) == 1 ? p[0] : load<uint16_t>(p);
}
void storeBits(loomDataType_t d, uint8_t* p, uint32_t bits) {
  if (dtypeSize(d) == 1)
    p[0] = uint8_t(bits);
  else
    store<uint16_t>(p, uint16_t(bits));
}

// The expected result of one element; writes kAnyNan's meaning as a canonical NaN and returns
// whether the expected value is NaN (then any NaN in the output is right).
bool refElement(loomDataType_t d, loomRedOp_t op, const uint8_t* a, const uint8_t* b,
                uint8_t* out) {
  switch (d) {
    case loomInt8: store(out, refIntOp(op, load<int8_t>(a), load<int8_t>(b))); return false;
    case loomUint8: store(out, refIntOp(op, load<uint8_t>(a), load<uint8_t>(b))); return false;
    case loomInt32: store(out, refIntOp(op, load<int32_t>(a), load<int32_t>(b))); return false;
    case loomUint32: store(out, refIntOp(op, load<uint32_t>(a), load<uint32_t>(b))); return false;
    case loomInt64: store(out, refIntOp(op, load<int64_t>(a), load<int64_t>(b))); return false;
    case loomUint64: store(out, refIntOp(op, load<uint64_t>(a), load<uint64_t>(b))); return false;
    case loomFloat32: {
      float r = refFloatOp(op, load<float>(a), load<float>(b));
      store(out, r);
      return std::isnan(r);
    }
    case loomFloat64: {
      double r = refFloatOp(op, load<double>(a), load<double>(b));
      store(out, r);
      return std::isnan(r);
    }
    default: {
      const RefFormat& f = refFormat(d);
      float x = float(f.decode(loadBits(d, a)));
      float y = float(f.decode(loadBits(d, b)));
      uint32_t bits = f.encode(refFloatOp(op, x, y));
      storeBits(d, out, bits == kAnyNan ? 0 : bits);
      return bits == kAnyNan;
    }
  }
}

bool refDivide(loomDataType_t d, const uint8_t* in, int n, uint8_t* out) {
  switch (d) {
    case loomInt8: store<int8_t>(out, int8_t(int64_t(load<int8_t>(in)) / n)); return false;
    case loomUint8:
      store<uint8_t>(out, uint8_t(uint64_t(load<uint8_t>(in)) / uint64_t(n)));
      return false;
    case loomInt32: store<int32_t>(out, int32_t(int64_t(load<int32_t>(in)) / n)); return false;
    case loomUint32: store<uint32_t>(out, uint32_t(load<uint32_t>(in) / uint64_t(n))); return false;
    case loomInt64: store<int64_t>(out, load<int64_t>(in) / int64_t(n)); return false;
    case loomUint64: store<uint64_t>(out, load<uint64_t>(in) / uint64_t(n)); return false;
    case loomFloat32: {
      float r = load<float>(in) / float(n);
      store(out, r);
      return std::isnan(r);
    }
    case loomFloat64: {
      double r = load<double>(in) / double(n);
      store(out, r);
      return std::isnan(r);
    }
    default: {
      const RefFormat& f = refFormat(d);
      uint32_t bits = f.encode(float(f.decode(loadBits(d, in))) / float(n));
      storeBits(d, out, bits == kAnyNan ? 0 : bits);
      return bits == kAnyNan;
    }
  }
}

bool isNanElement(loomDataType_t d, const uint8_t* p) {
  if (d == loomFloat32) return std::isnan(load<float>(p));
  if (d == loomFloat64) return std::isnan(load<double>(p));
  if (isNarrowFloat(d)) return refFormat(d).isNan(loadBits(d, p));
  return false;
}

std::string hexElement(loomDataType_t d, const uint8_t* p) {
  std::string s = "0x";
  char buf[4];
  for (size_t i = dtypeSize(d); i-- > 0;) {
    snprintf(buf, sizeof(buf), "%02x", p[i]);
    s += buf;
  }
  return s;
}

// ---- Inputs -----------------------------------------------------------------------------------

// Random inputs that reach every interesting case: a quarter are raw random bits (NaN, inf,
// subnormals, huge and tiny values), the rest pair each a[i] with a nearby b[i] of random sign,
// so that sums cancel, round at ties and land in the subnormal range.
void fillInputs(loomDataType_t d, uint8_t* a, uint8_t* b, size_t n, std::mt19937_64& rng) {
  size_t size = dtypeSize(d);
  for (size_t i = 0; i < n; ++i) {
    uint64_t ra = rng(), rb = rng();
    uint64_t kind = rng() % 4;
    if (isFloat(d) && kind != 0) {
      if (d == loomFloat32) {
        float x = float(int64_t(ra % 2001) - 1000) * std::ldexp(1.0f, int(ra >> 32) % 40 - 20);
        float y = std::bit_cast<float>(std::bit_cast<uint32_t>(x) ^ uint32_t(rb & 0x800000ff));
        memcpy(a + i * size, &x, size);
        memcpy(b + i * size, &y, size);
        continue;
      }
      if (d == loomFloat64) {
        double x = double(int64_t(ra % 2001) - 1000) * std::ldexp(1.0, int(ra >> 32) % 80 - 40);
        double y = std::bit_cast<double>(std::bit_cast<uint64_t>(x) ^ (rb & 0x80000000000000ffull));
        memcpy(a + i * size, &x, size);
        memcpy(b + i * size, &y, size);
        continue;
      }
      // Narrow: b differs from a in the low mantissa bits and maybe the sign.
      uint32_t signBit = size == 1 ? 0x80u : 0x8000u;
      uint32_t x = uint32_t(ra) & (size == 1 ? 0xffu : 0xffffu);
      uint32_t y = x ^ (uint32_t(rb) & 0x7u) ^ ((rb >> 8) & 1 ? signBit : 0u);
      storeBits(d, a + i * size, x);
      storeBits(d, b + i * size, y);
      continue;
    }
    memcpy(a + i * size, &ra, size);
    memcpy(b + i * size, &rb, size);
  }
}

// ---- The sweep --------------------------------------------------------------------------------

enum class Alias { kNone, kDstIsA, kDstIsB, kAll };
const char* aliasName(Alias m) {
  switch (m) {
    case Alias::kNone: return "none";
    case Alias::kDstIsA: return "dst==a";
    case Alias::kDstIsB: return "dst==b";
    default: return "dst==a==b";
  }
}

constexpr size_t kGuard = 64;  // canary bytes around every output buffer
constexpr uint8_t kCanary = 0xa5;

// Runs one reduction through `table` and checks it against the reference. Returns the output
// (for the cross-ISA comparison).
std::vector<uint8_t> checkReduce(const KernelTable& table, loomDataType_t d, loomRedOp_t op,
                                 size_t n, size_t offset, Alias alias, uint64_t seed) {
  const size_t size = dtypeSize(d);
  const size_t bytes = n * size;
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> a0(bytes + 1), b0(bytes + 1);
  fillInputs(d, a0.data(), b0.data(), n, rng);
  if (alias == Alias::kAll) b0 = a0;

  // Three separately allocated buffers with canaries, each offset by `offset` bytes.
  std::vector<uint8_t> bufA(bytes + 2 * kGuard, kCanary), bufB = bufA, bufD = bufA;
  uint8_t* pa = bufA.data() + kGuard + offset;
  uint8_t* pb = bufB.data() + kGuard + offset;
  uint8_t* pd = bufD.data() + kGuard + offset;
  memcpy(pa, a0.data(), bytes);
  memcpy(pb, b0.data(), bytes);
  std::vector<uint8_t>* outBuf = &bufD;
  switch (alias) {
    case Alias::kNone: break;
    case Alias::kDstIsA:
      pd = pa;
      outBuf = &bufA;
      break;
    case Alias::kDstIsB:
      pd = pb;
      outBuf = &bufB;
      break;
    case Alias::kAll:
      pb = pa;
      pd = pa;
      outBuf = &bufA;
      break;
  }
  table.reduce[d][op](pd, pa, pb, n);

  std::string where = std::string(table.isa) + " " + dtypeName(d) + " " + opName(op) +
                      " n=" + std::to_string(n) + " offset=" + std::to_string(offset) + " " +
                      aliasName(alias);
  size_t begin = kGuard + offset;
  for (size_t i = 0; i < outBuf->size(); ++i) {
    if (i >= begin && i < begin + bytes) continue;
    if ((*outBuf)[i] != kCanary) {
      ADD_FAILURE() << where << ": wrote outside the output at byte " << i;
      break;
    }
  }
  int failures = 0;
  uint8_t want[8];
  for (size_t i = 0; i < n && failures < 5; ++i) {
    const uint8_t* ea = a0.data() + i * size;
    const uint8_t* eb = b0.data() + i * size;
    const uint8_t* got = pd + i * size;
    bool wantNan = refElement(d, op, ea, eb, want);
    bool ok = wantNan ? isNanElement(d, got) : memcmp(got, want, size) == 0;
    if (!ok) {
      ++failures;
      ADD_FAILURE() << where << " element " << i << ": " << hexElement(d, ea) << " " << opName(op)
                    << " " << hexElement(d, eb) << " = " << hexElement(d, got) << ", want "
                    << (wantNan ? "NaN" : hexElement(d, want));
    }
  }
  return std::vector<uint8_t>(pd, pd + bytes);
}

struct ReduceCase {
  const char* isa;
  loomDataType_t dtype;
  loomRedOp_t op;
};

std::string caseName(const testing::TestParamInfo<ReduceCase>& info) {
  return std::string(info.param.isa) + "_" + dtypeName(info.param.dtype) + "_" +
         opName(info.param.op);
}

std::vector<ReduceCase> allCases() {
  std::vector<ReduceCase> cases;
  for (const char* isa : kIsas)
    for (loomDataType_t d : kDtypes)
      for (loomRedOp_t op : kOps) cases.push_back({isa, d, op});
  return cases;
}

const KernelTable* tableOrSkipReason(const char* isa, std::string* reason) {
  const KernelTable* t = reduce_internal::tableFor(isa);
  if (t == nullptr) *reason = std::string("this CPU cannot run the ") + isa + " kernels";
  return t;
}

class ReduceSweep : public testing::TestWithParam<ReduceCase> {};

TEST_P(ReduceSweep, MatchesReference) {
  const ReduceCase& c = GetParam();
  std::string reason;
  const KernelTable* table = tableOrSkipReason(c.isa, &reason);
  if (table == nullptr) GTEST_SKIP() << reason;
  EXPECT_STREQ(table->isa, c.isa);
  uint64_t seed = 1;
  for (size_t n : kLengths)
    for (size_t offset : {0, 1})
      for (Alias alias : {Alias::kNone, Alias::kDstIsA, Alias::kDstIsB, Alias::kAll})
        checkReduce(*table, c.dtype, c.op, n, offset, alias, seed++);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, ReduceSweep, testing::ValuesIn(allCases()), caseName);

// Every ISA must produce the same bytes, NaN payloads included: ranks on different machines
// reduce different slices of one buffer.
TEST(ReduceCrossIsa, IdenticalBytes) {
  std::vector<const KernelTable*> tables;
  for (const char* isa : kIsas)
    if (const KernelTable* t = reduce_internal::tableFor(isa)) tables.push_back(t);
  if (tables.size() < 2) GTEST_SKIP() << "only one ISA runs on this CPU";
  for (loomDataType_t d : kDtypes) {
    for (loomRedOp_t op : kOps) {
      std::vector<uint8_t> first = checkReduce(*tables[0], d, op, 4096 + 5, 1, Alias::kNone, 99);
      for (size_t i = 1; i < tables.size(); ++i) {
        std::vector<uint8_t> other = checkReduce(*tables[i], d, op, 4096 + 5, 1, Alias::kNone, 99);
        EXPECT_TRUE(first == other) << tables[0]->isa << " and " << tables[i]->isa << " differ for "
                                    << dtypeName(d) << " " << opName(op);
      }
    }
  }
}

// ---- Narrow formats exhaustively ------------------------------------------------------------

// max(x, x) = x decodes and re-encodes every pattern; NaNs must stay NaN (quieted).
TEST(ReduceNarrow, EveryPatternRoundTrips) {
  for (const char* isa : kIsas) {
    const KernelTable* t = reduce_internal::tableFor(isa);
    if (t == nullptr) continue;
    for (loomDataType_t d : {loomFloat16, loomBfloat16, loomFloat8e4m3, loomFloat8e5m2}) {
      const RefFormat& f = refFormat(d);
      size_t size = dtypeSize(d);
      size_t count = size == 1 ? 256 : 65536;
      std::vector<uint8_t> in(count * size), out(count * size);
      for (size_t p = 0; p < count; ++p) storeBits(d, in.data() + p * size, uint32_t(p));
      t->reduce[d][loomMax](out.data(), in.data(), in.data(), count);
      for (size_t p = 0; p < count; ++p) {
        uint32_t got = loadBits(d, out.data() + p * size);
        double v = f.decode(uint32_t(p));
        if (std::isnan(v)) {
          EXPECT_TRUE(f.isNan(got)) << isa << " " << dtypeName(d) << " " << p;
        } else if (d == loomFloat8e5m2 && std::isinf(v)) {
          // SATFINITE: an infinite input saturates on the way back.
          EXPECT_EQ(got, (p & 0x80) | 0x7bu) << isa << " e5m2 inf " << p;
        } else {
          EXPECT_EQ(got, p) << isa << " " << dtypeName(d);
        }
      }
    }
  }
}

// Rounding from fp32: every pair sum of a grid of values, checked against the table-search
// reference, covers ties, overflow to inf / saturation and the subnormal range.
TEST(ReduceNarrow, SumsOfAllPairsOfAGrid) {
  for (const char* isa : kIsas) {
    const KernelTable* t = reduce_internal::tableFor(isa);
    if (t == nullptr) continue;
    for (loomDataType_t d : {loomFloat16, loomBfloat16, loomFloat8e4m3, loomFloat8e5m2}) {
      size_t size = dtypeSize(d);
      // fp8: every pair; 16-bit formats: every pattern against a fixed set.
      std::vector<uint32_t> xs, ys;
      if (size == 1) {
        for (uint32_t p = 0; p < 256; ++p) xs.push_back(p);
        ys = xs;
      } else {
        for (uint32_t p = 0; p < 65536; ++p) xs.push_back(p);
        ys = d == loomFloat16
                 ? std::vector<uint32_t>{0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x1000,
                                         0x3c00, 0xbc00, 0x3c01, 0x4c00, 0x7bff, 0xfbff, 0x7c00}
                 : std::vector<uint32_t>{0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x0080, 0x3b80,
                                         0x3f80, 0xbf80, 0x3f81, 0x7f7f, 0xff7f, 0x7f80, 0x7380};
      }
      for (uint32_t y : ys) {
        for (loomRedOp_t op : {loomSum, loomProd}) {
          size_t n = xs.size();
          std::vector<uint8_t> a(n * size), b(n * size), out(n * size);
          for (size_t i = 0; i < n; ++i) {
            storeBits(d, a.data() + i * size, xs[i]);
            storeBits(d, b.data() + i * size, y);
          }
          t->reduce[d][op](out.data(), a.data(), b.data(), n);
          int failures = 0;
          for (size_t i = 0; i < n && failures < 3; ++i) {
            uint8_t want[2];
            bool wantNan = refElement(d, op, a.data() + i * size, b.data() + i * size, want);
            const uint8_t* got = out.data() + i * size;
            if (wantNan ? !isNanElement(d, got) : memcmp(got, want, size) != 0) {
              ++failures;
              ADD_FAILURE() << isa << " " << dtypeName(d) << " " << opName(op) << " "
                            << hexElement(d, a.data() + i * size) << " , " << y << " = "
                            << hexElement(d, got) << " want " << hexElement(d, want);
            }
          }
        }
      }
    }
  }
}

// ---- Special values with explicit expectations -------------------------------------------

template <typename T>
T reduceOne(const KernelTable& t, loomDataType_t d, loomRedOp_t op, T a, T b) {
  T out{};
  t.reduce[d][op](&out, &a, &b, 1);
  return out;
}

class ReduceSpecial : public testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    table_ = reduce_internal::tableFor(GetParam());
    if (table_ == nullptr) GTEST_SKIP() << "this CPU cannot run the " << GetParam() << " kernels";
  }
  const KernelTable* table_ = nullptr;
};

TEST_P(ReduceSpecial, Float32) {
  const KernelTable& t = *table_;
  const float nan = std::nanf(""), inf = INFINITY;
  auto bits = [](float f) { return std::bit_cast<uint32_t>(f); };
  // Signed zeros: min prefers -0 and max +0 whatever the order.
  EXPECT_EQ(bits(reduceOne(t, loomFloat32, loomMin, -0.0f, 0.0f)), bits(-0.0f));
  EXPECT_EQ(bits(reduceOne(t, loomFloat32, loomMin, 0.0f, -0.0f)), bits(-0.0f));
  EXPECT_EQ(bits(reduceOne(t, loomFloat32, loomMax, -0.0f, 0.0f)), bits(0.0f));
  EXPECT_EQ(bits(reduceOne(t, loomFloat32, loomMax, 0.0f, -0.0f)), bits(0.0f));
  // A NaN operand is ignored by min/max (fminf semantics); two NaNs give NaN.
  EXPECT_EQ(reduceOne(t, loomFloat32, loomMin, nan, 1.0f), 1.0f);
  EXPECT_EQ(reduceOne(t, loomFloat32, loomMin, 1.0f, nan), 1.0f);
  EXPECT_EQ(reduceOne(t, loomFloat32, loomMax, nan, -inf), -inf);
  EXPECT_TRUE(std::isnan(reduceOne(t, loomFloat32, loomMax, nan, nan)));
  // Sum and prod propagate NaN and follow IEEE for inf.
  EXPECT_TRUE(std::isnan(reduceOne(t, loomFloat32, loomSum, nan, 1.0f)));
  EXPECT_TRUE(std::isnan(reduceOne(t, loomFloat32, loomSum, inf, -inf)));
  EXPECT_TRUE(std::isnan(reduceOne(t, loomFloat32, loomProd, inf, 0.0f)));
  EXPECT_EQ(reduceOne(t, loomFloat32, loomSum, inf, 1.0f), inf);
  EXPECT_EQ(bits(reduceOne(t, loomFloat32, loomSum, -0.0f, -0.0f)), bits(-0.0f));
  // Subnormals are kept (no flush to zero).
  float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(reduceOne(t, loomFloat32, loomSum, tiny, tiny), 2 * tiny);
  EXPECT_EQ(reduceOne(t, loomFloat64, loomSum, 4.9e-324, 4.9e-324), 2 * 4.9e-324);
  EXPECT_EQ(std::bit_cast<uint64_t>(reduceOne(t, loomFloat64, loomMin, 0.0, -0.0)),
            std::bit_cast<uint64_t>(-0.0));
}

TEST_P(ReduceSpecial, Float16) {
  const KernelTable& t = *table_;
  auto h = [&](loomRedOp_t op, uint16_t a, uint16_t b) {
    return reduceOne<uint16_t>(t, loomFloat16, op, a, b);
  };
  EXPECT_EQ(h(loomSum, 0x3c00, 0x1000), 0x3c00);   // 1 + 2^-11: a tie, to even (down)
  EXPECT_EQ(h(loomSum, 0x3c01, 0x1000), 0x3c02);   // a tie, to even (up)
  EXPECT_EQ(h(loomSum, 0x7bff, 0x4c00), 0x7c00);   // 65504 + 16 = 65520: a tie, to inf
  EXPECT_EQ(h(loomSum, 0x7bff, 0x4bff), 0x7bff);   // just below the tie
  EXPECT_EQ(h(loomSum, 0x0001, 0x0001), 0x0002);   // subnormals
  EXPECT_EQ(h(loomSum, 0x03ff, 0x0001), 0x0400);   // subnormal to normal
  EXPECT_EQ(h(loomProd, 0x0001, 0x3800), 0x0000);  // 2^-25: a tie, to even zero
  EXPECT_EQ(h(loomProd, 0x0003, 0x3800), 0x0002);  // 1.5 · 2^-24: a tie, to even
  EXPECT_EQ(h(loomSum, 0x8000, 0x8000), 0x8000);   // -0 + -0
  EXPECT_EQ(h(loomMin, 0x0000, 0x8000), 0x8000);
  EXPECT_EQ(h(loomMax, 0x8000, 0x0000), 0x0000);
  EXPECT_EQ(h(loomMin, 0x7e00, 0x3c00), 0x3c00);
  EXPECT_EQ(h(loomSum, 0x7c00, 0x3c00), 0x7c00);
  // NaN stays NaN, quieted, keeping the top payload bits (as F16C does).
  EXPECT_EQ(h(loomSum, 0x7d00, 0x3c00), 0x7f00);
  EXPECT_EQ(h(loomSum, 0xfe01, 0x3c00), 0xfe01);
  EXPECT_EQ(h(loomSum, 0x7c00, 0xfc00) & 0x7fff, 0x7e00);  // inf - inf: the default NaN
}

TEST_P(ReduceSpecial, Bfloat16) {
  const KernelTable& t = *table_;
  auto h = [&](loomRedOp_t op, uint16_t a, uint16_t b) {
    return reduceOne<uint16_t>(t, loomBfloat16, op, a, b);
  };
  EXPECT_EQ(h(loomSum, 0x3f80, 0x3b80), 0x3f80);  // 1 + 2^-8: a tie, to even (down)
  EXPECT_EQ(h(loomSum, 0x3f81, 0x3b80), 0x3f82);  // a tie, to even (up)
  EXPECT_EQ(h(loomSum, 0x7f7f, 0x7f7f), 0x7f80);  // overflow to inf
  EXPECT_EQ(h(loomSum, 0x0001, 0x0001), 0x0002);  // subnormals
  EXPECT_EQ(h(loomMin, 0x8000, 0x0000), 0x8000);
  EXPECT_EQ(h(loomSum, 0x7f81, 0x3f80), 0x7fc1);  // NaN quieted, payload kept
  EXPECT_EQ(h(loomSum, 0xff80, 0x3f80), 0xff80);  // -inf
}

TEST_P(ReduceSpecial, Float8) {
  const KernelTable& t = *table_;
  auto e4 = [&](loomRedOp_t op, uint8_t a, uint8_t b) {
    return reduceOne<uint8_t>(t, loomFloat8e4m3, op, a, b);
  };
  auto e5 = [&](loomRedOp_t op, uint8_t a, uint8_t b) {
    return reduceOne<uint8_t>(t, loomFloat8e5m2, op, a, b);
  };
  // E4M3FN: 0x7e = 448 is the largest; SATFINITE clamps overflow; 0x7f / 0xff are NaN.
  EXPECT_EQ(e4(loomSum, 0x7e, 0x58), 0x7e);   // 448 + 16 = 464, a tie to even
  EXPECT_EQ(e4(loomSum, 0x7e, 0x60), 0x7e);   // 448 + 32 = 480 saturates
  EXPECT_EQ(e4(loomProd, 0xfe, 0x7e), 0xfe);  // -448 · 448 saturates to -448
  EXPECT_EQ(e4(loomSum, 0x7f, 0x38), 0x7f);   // NaN + 1
  EXPECT_EQ(e4(loomSum, 0xff, 0x38), 0xff);   // -NaN + 1 keeps the sign, as CUDA does
  EXPECT_EQ(e4(loomMax, 0x7f, 0x38), 0x38);   // max ignores the NaN
  EXPECT_EQ(e4(loomSum, 0x01, 0x01), 0x02);   // subnormals: 2^-9 + 2^-9
  EXPECT_EQ(e4(loomSum, 0x07, 0x01), 0x08);   // subnormal to normal
  EXPECT_EQ(e4(loomSum, 0x80, 0x80), 0x80);   // -0 + -0
  EXPECT_EQ(e4(loomMin, 0x00, 0x80), 0x80);
  // E5M2: inf exists as an input, but SATFINITE results never are inf.
  EXPECT_EQ(e5(loomSum, 0x7c, 0x3c), 0x7b);  // inf + 1 saturates to 57344
  EXPECT_EQ(e5(loomSum, 0xfc, 0x3c), 0xfb);
  EXPECT_EQ(e5(loomProd, 0x7b, 0x40), 0x7b);        // 57344 · 2 saturates
  EXPECT_EQ(e5(loomMax, 0x7c, 0x3c), 0x7b);         // even a max of inf
  EXPECT_EQ(e5(loomSum, 0x7e, 0x3c) & 0x7f, 0x7e);  // NaN
  EXPECT_EQ(e5(loomSum, 0x7d, 0x3c), 0x7f);         // a signalling NaN comes out quiet
  EXPECT_EQ(e5(loomSum, 0x01, 0x01), 0x02);
  EXPECT_EQ(e5(loomSum, 0x3c, 0x38), 0x3e);  // 1 + 0.5
  EXPECT_EQ(e5(loomSum, 0x3c, 0x30), 0x3c);  // 1 + 0.125: a tie, to even
  EXPECT_EQ(e5(loomSum, 0x3d, 0x30), 0x3e);  // 1.25 + 0.125: a tie, to even (up)
}

TEST_P(ReduceSpecial, IntegersWrap) {
  const KernelTable& t = *table_;
  EXPECT_EQ(reduceOne<int8_t>(t, loomInt8, loomSum, 127, 1), -128);
  EXPECT_EQ(reduceOne<int8_t>(t, loomInt8, loomProd, -128, -1), -128);
  EXPECT_EQ(reduceOne<uint8_t>(t, loomUint8, loomProd, 255, 255), 1);
  EXPECT_EQ(reduceOne<int32_t>(t, loomInt32, loomSum, INT32_MAX, 1), INT32_MIN);
  EXPECT_EQ(reduceOne<int32_t>(t, loomInt32, loomProd, INT32_MIN, -1), INT32_MIN);
  EXPECT_EQ(reduceOne<int64_t>(t, loomInt64, loomSum, INT64_MAX, 1), INT64_MIN);
  EXPECT_EQ(reduceOne<uint64_t>(t, loomUint64, loomSum, UINT64_MAX, 2), 1u);
  EXPECT_EQ(reduceOne<int64_t>(t, loomInt64, loomMin, -1, INT64_MAX), -1);
  EXPECT_EQ(reduceOne<uint64_t>(t, loomUint64, loomMax, 1, UINT64_MAX), UINT64_MAX);
  EXPECT_EQ(reduceOne<int8_t>(t, loomInt8, loomMax, -1, 1), 1);
  EXPECT_EQ(reduceOne<uint8_t>(t, loomUint8, loomMax, 0xff, 1), 0xff);
}

// ---- divideInPlace ----------------------------------------------------------------------------

TEST_P(ReduceSpecial, DivideMatchesReference) {
  const KernelTable& t = *table_;
  uint64_t seed = 7;
  for (loomDataType_t d : kDtypes) {
    const size_t size = dtypeSize(d);
    for (int n : {2, 3, 7, 8, 1000, 1 << 20, (1 << 24) + 1, INT_MAX}) {
      for (size_t count : {size_t(1), size_t(33), size_t(1000 + 3)}) {
        std::mt19937_64 rng(seed++);
        std::vector<uint8_t> in(count * size), unused(count * size);
        fillInputs(d, in.data(), unused.data(), count, rng);
        std::vector<uint8_t> buf(count * size + 1);
        memcpy(buf.data() + 1, in.data(), in.size());  // unaligned
        t.divide[d](buf.data() + 1, count, n);
        int failures = 0;
        for (size_t i = 0; i < count && failures < 3; ++i) {
          uint8_t want[8];
          bool wantNan = refDivide(d, in.data() + i * size, n, want);
          const uint8_t* got = buf.data() + 1 + i * size;
          if (wantNan ? !isNanElement(d, got) : memcmp(got, want, size) != 0) {
            ++failures;
            ADD_FAILURE() << t.isa << " " << dtypeName(d) << " "
                          << hexElement(d, in.data() + i * size) << " / " << n << " = "
                          << hexElement(d, got) << ", want "
                          << (wantNan ? "NaN" : hexElement(d, want));
          }
        }
      }
    }
  }
}

TEST_P(ReduceSpecial, DivideEdges) {
  const KernelTable& t = *table_;
  int32_t i32[] = {INT32_MIN, INT32_MAX, -7, 7, -1};
  t.divide[loomInt32](i32, 5, 2);
  EXPECT_EQ(i32[0], INT32_MIN / 2);
  EXPECT_EQ(i32[1], INT32_MAX / 2);
  EXPECT_EQ(i32[2], -3);  // truncates toward zero
  EXPECT_EQ(i32[3], 3);
  EXPECT_EQ(i32[4], 0);
  uint32_t u32[] = {UINT32_MAX, UINT32_MAX - 1};
  t.divide[loomUint32](u32, 2, 3);
  EXPECT_EQ(u32[0], UINT32_MAX / 3);
  EXPECT_EQ(u32[1], (UINT32_MAX - 1) / 3);
  uint64_t u64[] = {UINT64_MAX};
  t.divide[loomUint64](u64, 1, INT_MAX);
  EXPECT_EQ(u64[0], UINT64_MAX / uint64_t(INT_MAX));
  int64_t i64[] = {INT64_MIN};
  t.divide[loomInt64](i64, 1, 3);
  EXPECT_EQ(i64[0], INT64_MIN / 3);
  int8_t i8[] = {-128, 127, -5};
  t.divide[loomInt8](i8, 3, 4);
  EXPECT_EQ(i8[0], -32);
  EXPECT_EQ(i8[1], 31);
  EXPECT_EQ(i8[2], -1);
  uint16_t h[] = {0x3c00, 0x0001};  // 1/3 rounds; the smallest subnormal / 2 ties to zero
  t.divide[loomFloat16](h, 1, 3);
  EXPECT_EQ(h[0], 0x3555);
  t.divide[loomFloat16](h + 1, 1, 2);
  EXPECT_EQ(h[1], 0x0000);
}

INSTANTIATE_TEST_SUITE_P(AllIsas, ReduceSpecial, testing::ValuesIn(kIsas),
                         [](const testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param);
                         });

// ---- Dispatch ---------------------------------------------------------------------------------

TEST(ReduceDispatch, ChoosesAndFallsBack) {
  ASSERT_TRUE(reduce_internal::cpuSupports("generic"));
  EXPECT_FALSE(reduce_internal::cpuSupports("sse9"));
  EXPECT_EQ(reduce_internal::tableFor("sse9"), nullptr);
  EXPECT_STREQ(reduce_internal::chooseTable("generic").isa, "generic");
  // Requests fall back down avx512 → avx2 → generic to what the CPU runs.
  const char* best = reduce_internal::cpuSupports("avx512") ? "avx512"
                     : reduce_internal::cpuSupports("avx2") ? "avx2"
                                                            : "generic";
  EXPECT_STREQ(reduce_internal::chooseTable("auto").isa, best);
  EXPECT_STREQ(reduce_internal::chooseTable("bogus").isa, best);
  EXPECT_STREQ(reduce_internal::chooseTable("avx512").isa, best);
  EXPECT_STREQ(reduce_internal::chooseTable("AVX2").isa,
               reduce_internal::cpuSupports("avx2") ? "avx2" : "generic");
  // The public entry points use one of them.
  std::string isa = reduceIsa();
  EXPECT_TRUE(isa == "avx512" || isa == "avx2" || isa == "generic") << isa;
  EXPECT_NE(reduce_internal::tableFor(isa.c_str()), nullptr);
}

// LOOM_REDUCE_ISA is read once per process, so each value is checked in a fresh child (the
// "threadsafe" death-test style re-executes this binary, which inherits the environment).
TEST(ReduceDispatchDeathTest, HonoursLoomReduceIsa) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  for (const char* isa : kIsas) {
    if (!reduce_internal::cpuSupports(isa)) continue;
    setenv("LOOM_REDUCE_ISA", isa, 1);
    EXPECT_EXIT(
        {
          fprintf(stderr, "isa=%s\n", reduceIsa());
          exit(0);
        },
        testing::ExitedWithCode(0), std::string("isa=") + isa);
  }
  unsetenv("LOOM_REDUCE_ISA");
}

TEST(ReduceDispatch, PublicApi) {
  std::vector<float> a(1000 + 3), b(a.size()), d(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = float(i);
    b[i] = 0.5f * float(i);
  }
  reduce(d.data(), a.data(), b.data(), a.size(), loomFloat32, loomAvg);
  divideInPlace(d.data(), d.size(), loomFloat32, 2);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(d[i], 0.75f * float(i)) << i;
  // Nothing happens for count 0 (null pointers allowed) or a bad dtype / op.
  reduce(nullptr, nullptr, nullptr, 0, loomFloat32, loomSum);
  reduce(d.data(), a.data(), b.data(), a.size(), loomNumTypes, loomSum);
  reduce(d.data(), a.data(), b.data(), a.size(), loomFloat32, loomNumOps);
  divideInPlace(d.data(), d.size(), loomFloat32, 1);
  EXPECT_EQ(d[2], 1.5f);
}

}  // namespace
}  // namespace loom::collectives
