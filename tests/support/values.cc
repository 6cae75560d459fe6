#include "tests/support/values.h"

#include <cmath>

namespace loom::testing {
namespace {

// Encodes an exactly representable value into a binary float format with the given exponent
// and mantissa widths (IEEE-style bias; fp8 e4m3 has the same layout for finite values).
uint32_t encodeFloat(double v, int expBits, int manBits) {
  uint32_t sign = v < 0 ? 1u : 0u;
  double a = std::fabs(v);
  uint32_t bits = sign << (expBits + manBits);
  if (a == 0) return bits;
  int e = 0;
  double m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int bias = (1 << (expBits - 1)) - 1;
  int exp = e - 1 + bias;        // a = 1.f * 2^(e-1)
  double frac = m * 2 - 1;       // in [0, 1)
  uint32_t man = uint32_t(frac * double(1u << manBits));  // exact for test values
  return bits | (uint32_t(exp) << manBits) | man;
}

}  // namespace

size_t typeSize(loomDataType_t t) {
  switch (t) {
    case loomInt8: case loomUint8: case loomFloat8e4m3: case loomFloat8e5m2: return 1;
    case loomFloat16: case loomBfloat16: return 2;
    case loomInt32: case loomUint32: case loomFloat32: return 4;
    default: return 8;
  }
}

void encodeValue(loomDataType_t t, double v, void* p) {
  switch (t) {
    case loomInt8: case loomUint8: { uint8_t x = uint8_t(int64_t(v)); memcpy(p, &x, 1); break; }
    case loomInt32: case loomUint32: { uint32_t x = uint32_t(int64_t(v)); memcpy(p, &x, 4); break; }
    case loomInt64: case loomUint64: { uint64_t x = uint64_t(int64_t(v)); memcpy(p, &x, 8); break; }
    case loomFloat16: { uint16_t x = uint16_t(encodeFloat(v, 5, 10)); memcpy(p, &x, 2); break; }
    case loomBfloat16: { uint16_t x = uint16_t(encodeFloat(v, 8, 7)); memcpy(p, &x, 2); break; }
    case loomFloat8e4m3: { uint8_t x = uint8_t(encodeFloat(v, 4, 3)); memcpy(p, &x, 1); break; }
    case loomFloat8e5m2: { uint8_t x = uint8_t(encodeFloat(v, 5, 2)); memcpy(p, &x, 1); break; }
    case loomFloat32: { float x = float(v); memcpy(p, &x, 4); break; }
    default: { double x = v; memcpy(p, &x, 8); break; }
  }
}

std::string encoded(loomDataType_t t, double v) {
  std::string s(typeSize(t), '\0');
  encodeValue(t, v, s.data());
  return s;
}

// Patterns chosen so that every partial result is an exact small integer in every format:
// fp8 e5m2 holds integers exactly only up to 8, so its sums use 0/1 and stay ≤ nranks ≤ 8.
double inputValue(loomRedOp_t op, loomDataType_t t, int nranks, int r, uint64_t i) {
  bool tiny = t == loomFloat8e4m3 || t == loomFloat8e5m2;
  switch (op) {
    case loomSum: return double((uint64_t(r) + i) % (tiny ? 2 : 3));
    case loomProd: return double(1 + (uint64_t(r) + i) % 2);
    case loomMin:
    case loomMax: return double((uint64_t(r) * 7 + i) % 5);
    default:
      // avg: the sum must divide by N exactly. fp8 holds few integers exactly (e5m2: 1..8,
      // then only even ones), so there one rank contributes N and the rest 0.
      if (tiny) return uint64_t(r) == i % uint64_t(nranks) ? double(nranks) : 0.0;
      return double(nranks * int((uint64_t(r) + i) % 2));
  }
}

double expectedReduction(loomRedOp_t op, loomDataType_t t, int nranks, uint64_t i,
                         uint64_t indexOffset) {
  double acc = inputValue(op, t, nranks, 0, i + indexOffset);
  for (int r = 1; r < nranks; ++r) {
    double x = inputValue(op, t, nranks, r, i + indexOffset);
    switch (op) {
      case loomSum: case loomAvg: acc += x; break;
      case loomProd: acc *= x; break;
      case loomMin: acc = std::min(acc, x); break;
      default: acc = std::max(acc, x);
    }
  }
  return op == loomAvg ? acc / nranks : acc;
}

void fillInput(void* buf, uint64_t count, loomRedOp_t op, loomDataType_t t, int nranks, int r,
               uint64_t first) {
  size_t es = typeSize(t);
  for (uint64_t i = 0; i < count; ++i)
    encodeValue(t, inputValue(op, t, nranks, r, first + i), static_cast<char*>(buf) + i * es);
}

uint64_t countReductionErrors(const void* buf, uint64_t count, loomRedOp_t op,
                              loomDataType_t t, int nranks, uint64_t first,
                              uint64_t* firstBad) {
  size_t es = typeSize(t);
  uint64_t bad = 0;
  char want[8];
  for (uint64_t i = 0; i < count; ++i) {
    encodeValue(t, expectedReduction(op, t, nranks, i, first), want);
    if (memcmp(want, static_cast<const char*>(buf) + i * es, es) != 0) {
      if (bad == 0 && firstBad) *firstBad = i;
      ++bad;
    }
  }
  return bad;
}

const char* typeName(loomDataType_t t) {
  static const char* const k[] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                  "fp16", "bf16", "fp32", "fp64", "fp8e4m3", "fp8e5m2"};
  return int(t) >= 0 && int(t) < loomNumTypes ? k[t] : "?";
}

const char* opNameOf(loomRedOp_t op) {
  static const char* const k[] = {"sum", "prod", "min", "max", "avg"};
  return int(op) >= 0 && int(op) < loomNumOps ? k[op] : "?";
}

}  // namespace loom::testing
