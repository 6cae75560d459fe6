#include "perf/check.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace loom::perf {

// // Rank r's input element g holds value(r, g), a small integer chosen per op and dtype so that
// every partial result of the reduction is exactly representable: the order in which a
// library combines the ranks cannot change the result, so the check can be exact (bit for
// bit). Only avg of floating types gets a tolerance, since a library may pre-scale by 1/n.
// The values repeat with a short period in g, so expected results are computed for one
// period and the check runs at memory speed.

namespace {

// Minifloats (half, bfloat16, fp8) by their exponent and mantissa widths. Round to nearest
// even; overflow goes to the all-ones exponent (inf, or NaN for e4m3), which the benchmark's
// values never reach.
uint32_t encodeMini(double x, int expBits, int manBits) {
  const int bias = (1 << (expBits - 1)) - 1;
  const uint32_t sign = std::signbit(x) ? 1u << (expBits + manBits) : 0u;
  x = std::fabs(x);
  if (std::isnan(x)) return sign | (((1u << expBits) - 1) << manBits) | ((1u << manBits) - 1);
  if (x == 0) return sign;
  int e2 = 0;
  std::frexp(x, &e2);
  int exponent = e2 - 1;  // x = 1.m * 2^exponent
  if (exponent + bias <= 0) {
    // Subnormal: the mantissa counts units of 2^(1 - bias - manBits). A carry into the
    // exponent field is the smallest normal, which this sum encodes right.
    const uint32_t m = static_cast<uint32_t>(std::nearbyint(std::ldexp(x, manBits + bias - 1)));
    return sign | m;
  }
  uint32_t m = static_cast<uint32_t>(std::nearbyint(std::ldexp(x, manBits - exponent)));
  if (m == (2u << manBits)) {
    m >>= 1;
    ++exponent;
  }
  const int biased = exponent + bias;
  if (biased >= (1 << expBits) - 1 && !(expBits == 4 && manBits == 3)) {
    return sign | (((1u << expBits) - 1) << manBits);  // inf
  }
  if (biased > (1 << expBits) - 1) return sign | 0x7fu;  // e4m3 has no inf: NaN
  return sign | (static_cast<uint32_t>(biased) << manBits) | (m - (1u << manBits));
}

double decodeMini(uint32_t bits, int expBits, int manBits) {
  const int bias = (1 << (expBits - 1)) - 1;
  const bool negative = (bits >> (expBits + manBits)) & 1;
  const int biased = static_cast<int>((bits >> manBits) & ((1u << expBits) - 1));
  const uint32_t man = bits & ((1u << manBits) - 1);
  double v;
  if (biased == 0) {
    v = std::ldexp(static_cast<double>(man), 1 - bias - manBits);
  } else if (biased == (1 << expBits) - 1 && !(expBits == 4 && manBits == 3)) {
    v = man ? NAN : INFINITY;
  } else if (expBits == 4 && manBits == 3 && biased == 15 && man == 7) {
    v = NAN;
  } else {
    v = std::ldexp(static_cast<double>(man | (1u << manBits)), biased - bias - manBits);
  }
  return negative ? -v : v;
}

template <typename S>
struct PlainCodec {
  using Storage = S;
  static constexpr int kMantissaBits = 0;  // integer types: every result is exact
  static S encode(double v) { return static_cast<S>(v); }
  static double decode(S s) { return static_cast<double>(s); }
};
template <typename S, int kMantissa>
struct FloatCodec {
  using Storage = S;
  static constexpr int kMantissaBits = kMantissa;
  static S encode(double v) { return static_cast<S>(v); }
  static double decode(S s) { return static_cast<double>(s); }
};
template <typename S, int kExp, int kMan>
struct MiniCodec {
  using Storage = S;
  static constexpr int kMantissaBits = kMan;
  static S encode(double v) { return static_cast<S>(encodeMini(v, kExp, kMan)); }
  static double decode(S s) { return decodeMini(s, kExp, kMan); }
};

template <typename F>
void withCodec(loomDataType_t d, F&& f) {
  switch (d) {
    case loomInt8:
      f(PlainCodec<int8_t>{});
      break;
    case loomUint8:
      f(PlainCodec<uint8_t>{});
      break;
    case loomInt32:
      f(PlainCodec<int32_t>{});
      break;
    case loomUint32:
      f(PlainCodec<uint32_t>{});
      break;
    case loomInt64:
      f(PlainCodec<int64_t>{});
      break;
    case loomUint64:
      f(PlainCodec<uint64_t>{});
      break;
    case loomFloat16:
      f(MiniCodec<uint16_t, 5, 10>{});
      break;
    case loomBfloat16:
      f(MiniCodec<uint16_t, 8, 7>{});
      break;
    case loomFloat32:
      f(FloatCodec<float, 23>{});
      break;
    case loomFloat64:
      f(FloatCodec<double, 52>{});
      break;
    case loomFloat8e4m3:
      f(MiniCodec<uint8_t, 4, 3>{});
      break;
    case loomFloat8e5m2:
      f(MiniCodec<uint8_t, 5, 2>{});
      break;
    default:
      break;
  }
}

// Every integer in 0..maxExactInt is exact in the type.
double maxExactInt(loomDataType_t d) {
  switch (d) {
    case loomInt8:
      return 127;
    case loomUint8:
      return 255;
    case loomFloat16:
      return 2048;
    case loomBfloat16:
      return 256;
    case loomFloat8e4m3:
      return 16;
    case loomFloat8e5m2:
      return 8;
    case loomFloat32:
      return 16777216.0;
    default:
      return 9007199254740992.0;  // 2^53: the values are computed in double
  }
}

constexpr double kMaxValue = 250;  // keeps periods short (and below uint8's poison, 255)

// The input pattern: value(rank, g), periodic in g.
class Pattern {
 public:
  Pattern(Collective c, loomDataType_t dtype, loomRedOp_t op, int nranks)
      : op_(collectiveHasOp(c) ? op : loomSum), nranks_(nranks), moves_(!collectiveHasOp(c)) {
    const double exact = maxExactInt(dtype);
    if (moves_) {
      // Nothing is combined: any values that fit; distinct per rank to catch misplacement.
      limit_ = std::min(exact, kMaxValue);
      period_ = static_cast<size_t>(limit_) + 1;
      return;
    }
    switch (op_) {
      case loomSum:
      case loomAvg:
        // Sum of n values <= limit stays <= exact; with more ranks than that (fp8), each
        // element gets a single 1 from one rank.
        limit_ = std::min(std::floor(exact / nranks), kMaxValue);
        period_ = limit_ >= 1 ? static_cast<size_t>(limit_) + 1 : static_cast<size_t>(nranks);
        break;
      case loomProd:
        // Factors of 1 and 2, at most log2(exact) twos per element.
        twos_ = std::min(nranks, static_cast<int>(std::floor(std::log2(exact))));
        period_ = static_cast<size_t>(nranks) + 1;
        break;
      default:  // min, max
        limit_ = std::min(exact, kMaxValue);
        period_ = static_cast<size_t>(limit_) + 1;
        break;
    }
  }

  size_t period() const { return period_; }

  double value(int rank, size_t g) const {
    const size_t p = g % period_;
    const size_t r = static_cast<size_t>(rank);
    if (moves_) return static_cast<double>((p + 7 * r) % period_);
    switch (op_) {
      case loomSum:
        if (limit_ < 1) return (p + r) % period_ == 0 ? 1 : 0;
        return static_cast<double>((p + r) % period_);
      case loomAvg:
        // Every rank the same value: the average is that value, whatever the division.
        if (limit_ < 1) return p == 0 ? 1 : 0;
        return static_cast<double>(p);
      case loomProd:
        return (p + r) % period_ < static_cast<size_t>(twos_) ? 2 : 1;
      default:
        return static_cast<double>((p + 5 * r) % period_);
    }
  }

  // The reduction over all ranks of element g.
  double reduced(size_t g) const {
    double acc = value(0, g);
    for (int r = 1; r < nranks_; ++r) {
      const double v = value(r, g);
      switch (op_) {
        case loomSum:
        case loomAvg:
          acc += v;
          break;
        case loomProd:
          acc *= v;
          break;
        case loomMin:
          acc = std::min(acc, v);
          break;
        case loomMax:
          acc = std::max(acc, v);
          break;
        default:
          break;
      }
    }
    return op_ == loomAvg ? acc / nranks_ : acc;
  }

  bool needsTolerance() const { return op_ == loomAvg && !moves_; }

 private:
  loomRedOp_t op_;
  int nranks_;
  bool moves_;
  double limit_ = 0;
  int twos_ = 0;
  size_t period_ = 1;
};

// A stretch of a rank's output: `count` elements at `offset` that hold element gStart.. of
// rank `source`'s input, or of the reduction over all ranks when source < 0.
struct Block {
  size_t offset;
  size_t count;
  int source;
  size_t gStart;
};
constexpr int kReduced = -1;

std::vector<Block> outputBlocks(Collective c, int nranks, int rank, int root, const CollSizes& s) {
  const size_t c1 = s.paramCount;
  std::vector<Block> blocks;
  switch (c) {
    case Collective::AllReduce:
      blocks.push_back({0, s.recvCount, kReduced, 0});
      break;
    case Collective::Reduce:
      if (rank == root) blocks.push_back({0, s.recvCount, kReduced, 0});
      break;
    case Collective::ReduceScatter:
      blocks.push_back({0, c1, kReduced, static_cast<size_t>(rank) * c1});
      break;
    case Collective::AllGather:
      for (int j = 0; j < nranks; ++j) blocks.push_back({j * c1, c1, j, 0});
      break;
    case Collective::AlltoAll:
    case Collective::AlltoAllv:  // equal counts: alltoall's layout
      for (int j = 0; j < nranks; ++j) {
        blocks.push_back({j * c1, c1, j, static_cast<size_t>(rank) * c1});
      }
      break;
    case Collective::Broadcast:
      blocks.push_back({0, s.recvCount, root, 0});
      break;
    case Collective::Gather:
      for (int j = 0; j < nranks && rank == root; ++j) blocks.push_back({j * c1, c1, j, 0});
      break;
    case Collective::Scatter:
      blocks.push_back({0, c1, root, static_cast<size_t>(rank) * c1});
      break;
    case Collective::SendRecv:
      blocks.push_back({0, s.recvCount, (rank + nranks - 1) % nranks, 0});
      break;
  }
  return blocks;
}

// Expected values of one period, starting at the block's first element.
std::vector<double> expectedPeriod(const Pattern& pattern, const Block& b) {
  std::vector<double> out(pattern.period());
  for (size_t p = 0; p < out.size(); ++p) {
    const size_t g = b.gStart + p;
    out[p] = b.source == kReduced ? pattern.reduced(g) : pattern.value(b.source, g);
  }
  return out;
}

template <typename Codec>
std::vector<typename Codec::Storage> encodeAll(const std::vector<double>& values) {
  std::vector<typename Codec::Storage> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = Codec::encode(values[i]);
  return out;
}

// Writes count elements, cycling through one period.
template <typename S>
void writeCyclic(S* dst, size_t count, const std::vector<S>& period) {
  size_t p = 0;
  for (size_t i = 0; i < count; ++i) {
    dst[i] = period[p];
    if (++p == period.size()) p = 0;
  }
}

}  // namespace

void fillInput(Collective c, loomDataType_t dtype, loomRedOp_t op, int nranks, int rank, int root,
               const CollSizes& sizes, void* send) {
  (void)root;
  const Pattern pattern(c, dtype, op, nranks);
  std::vector<double> values(pattern.period());
  for (size_t p = 0; p < values.size(); ++p) values[p] = pattern.value(rank, p);
  withCodec(dtype, [&](auto codec) {
    using Codec = decltype(codec);
    writeCyclic(static_cast<typename Codec::Storage*>(send), sizes.sendCount,
                encodeAll<Codec>(values));
  });
}

bool rankHasOutput(Collective c, int rank, int root) {
  return rank == root || (c != Collective::Reduce && c != Collective::Gather);
}

void writeExpected(Collective c, loomDataType_t dtype, loomRedOp_t op, int nranks, int rank,
                   int root, const CollSizes& sizes, void* recv) {
  const Pattern pattern(c, dtype, op, nranks);
  withCodec(dtype, [&](auto codec) {
    using Codec = decltype(codec);
    auto* out = static_cast<typename Codec::Storage*>(recv);
    for (const Block& b : outputBlocks(c, nranks, rank, root, sizes)) {
      writeCyclic(out + b.offset, b.count, encodeAll<Codec>(expectedPeriod(pattern, b)));
    }
  });
}

size_t countWrong(Collective c, loomDataType_t dtype, loomRedOp_t op, int nranks, int rank,
                  int root, const CollSizes& sizes, const void* recv) {
  const Pattern pattern(c, dtype, op, nranks);
  size_t wrong = 0;
  withCodec(dtype, [&](auto codec) {
    using Codec = decltype(codec);
    using S = typename Codec::Storage;
    const S* got = static_cast<const S*>(recv);
    for (const Block& b : outputBlocks(c, nranks, rank, root, sizes)) {
      const std::vector<double> expected = expectedPeriod(pattern, b);
      const std::vector<S> exact = encodeAll<Codec>(expected);
      const S* g = got + b.offset;
      size_t p = 0;
      if (pattern.needsTolerance() && Codec::kMantissaBits > 0) {
        // n rounding steps of at most one ulp each, relative to the result's magnitude.
        const double tol = nranks * std::ldexp(1.0, -Codec::kMantissaBits);
        for (size_t i = 0; i < b.count; ++i) {
          const double want = expected[p];
          const double have = Codec::decode(g[i]);
          if (!(std::fabs(have - want) <= tol * std::max(1.0, std::fabs(want)))) ++wrong;
          if (++p == exact.size()) p = 0;
        }
      } else {
        for (size_t i = 0; i < b.count; ++i) {
          if (!(g[i] == exact[p])) ++wrong;
          if (++p == exact.size()) p = 0;
        }
      }
    }
  });
  return wrong;
}

}  // namespace loom::perf
