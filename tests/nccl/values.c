#include "values.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const ncclDataType_t kTypes[NCCL_TEST_NTYPES] = {
    ncclInt8,    ncclUint8,   ncclInt32,   ncclUint32,    ncclInt64,     ncclUint64,
    ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
const ncclRedOp_t kOps[NCCL_TEST_NOPS] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};

size_t typeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

const char* typeName(ncclDataType_t t) {
  static const char* const names[] = {"int8",    "uint8",   "int32", "uint32",
                                      "int64",   "uint64",  "half",  "float",
                                      "double",  "bfloat16", "f8e4m3", "f8e5m2"};
  return (int)t >= 0 && (int)t < NCCL_TEST_NTYPES ? names[t] : "?";
}

const char* opName(ncclRedOp_t op) {
  static const char* const names[] = {"sum", "prod", "max", "min", "avg"};
  return (int)op >= 0 && (int)op < NCCL_TEST_NOPS ? names[op] : "premulsum";
}

int isFloatType(ncclDataType_t t) { return t >= ncclFloat16; }

int isSignedType(ncclDataType_t t) {
  return t == ncclInt8 || t == ncclInt32 || t == ncclInt64 || isFloatType(t);
}

/* The float format (expBits, manBits) of t, which is a float type other than fp32/fp64. */
static void narrowFormat(ncclDataType_t t, int* expBits, int* manBits) {
  switch (t) {
    case ncclFloat16: *expBits = 5; *manBits = 10; break;
    case ncclBfloat16: *expBits = 8; *manBits = 7; break;
    case ncclFloat8e4m3: *expBits = 4; *manBits = 3; break;
    default: *expBits = 5; *manBits = 2; break; /* ncclFloat8e5m2 */
  }
}

/* Re-biases a double's exponent and keeps the top manBits of its fraction: exact, or the test's
 * values are wrong, which aborts (a bug of the test, not of the library). */
static uint32_t narrowFloatBits(double v, int expBits, int manBits) {
  uint64_t bits;
  memcpy(&bits, &v, sizeof bits);
  uint32_t out = (uint32_t)(bits >> 63) << (expBits + manBits);
  if (v == 0) return out;
  const int bias = (1 << (expBits - 1)) - 1;
  const int exponent = (int)((bits >> 52) & 0x7ff) - 1023 + bias;
  const uint64_t fraction = bits & ((UINT64_C(1) << 52) - 1);
  const int dropped = 52 - manBits;
  if (exponent < 1 || exponent >= (1 << expBits) ||
      (fraction & ((UINT64_C(1) << dropped) - 1)) != 0) {
    fprintf(stderr, "test bug: %g is not exact with %d exponent and %d mantissa bits\n", v,
            expBits, manBits);
    abort();
  }
  return out | (uint32_t)exponent << manBits | (uint32_t)(fraction >> dropped);
}

void encodeValue(ncclDataType_t t, double v, void* p) {
  const uint64_t wrapped = (uint64_t)(int64_t)v; /* integer types: two's complement, truncated */
  switch (t) {
    case ncclFloat32: { float f = (float)v; memcpy(p, &f, 4); return; }
    case ncclFloat64: memcpy(p, &v, 8); return;
    case ncclFloat16: case ncclBfloat16: case ncclFloat8e4m3: case ncclFloat8e5m2: {
      int e, m;
      narrowFormat(t, &e, &m);
      const uint32_t bits = narrowFloatBits(v, e, m);
      if (typeSize(t) == 2) { uint16_t h = (uint16_t)bits; memcpy(p, &h, 2); }
      else { uint8_t b = (uint8_t)bits; memcpy(p, &b, 1); }
      return;
    }
    default: break;
  }
  if (typeSize(t) == 1) { uint8_t x = (uint8_t)wrapped; memcpy(p, &x, 1); }
  else if (typeSize(t) == 4) { uint32_t x = (uint32_t)wrapped; memcpy(p, &x, 4); }
  else memcpy(p, &wrapped, 8);
}

static double decodeNarrow(uint32_t bits, int expBits, int manBits) {
  const int bias = (1 << (expBits - 1)) - 1;
  const uint32_t man = bits & ((1u << manBits) - 1);
  const int exponent = (int)((bits >> manBits) & ((1u << expBits) - 1));
  const double mag = exponent == 0
                         ? ldexp((double)man, 1 - bias - manBits)
                         : ldexp((double)(man | 1u << manBits), exponent - bias - manBits);
  return (bits >> (expBits + manBits)) & 1 ? -mag : mag;
}

double decodeValue(ncclDataType_t t, const void* p) {
  uint8_t b[8] = {0};
  memcpy(b, p, typeSize(t));
  int8_t i8; int32_t i32; int64_t i64; uint32_t u32; uint64_t u64; uint16_t u16; float f; double d;
  switch (t) {
    case ncclInt8: memcpy(&i8, b, 1); return i8;
    case ncclUint8: return b[0];
    case ncclInt32: memcpy(&i32, b, 4); return i32;
    case ncclUint32: memcpy(&u32, b, 4); return u32;
    case ncclInt64: memcpy(&i64, b, 8); return (double)i64;
    case ncclUint64: memcpy(&u64, b, 8); return (double)u64;
    case ncclFloat32: memcpy(&f, b, 4); return f;
    case ncclFloat64: memcpy(&d, b, 8); return d;
    default: break;
  }
  int e, m;
  narrowFormat(t, &e, &m);
  memcpy(&u16, b, 2);
  return decodeNarrow(typeSize(t) == 2 ? u16 : b[0], e, m);
}

double reductionInput(ncclRedOp_t op, ncclDataType_t t, int n, int r, size_t i) {
  const int sign = isSignedType(t);
  const int fp8 = t == ncclFloat8e4m3 || t == ncclFloat8e5m2;
  switch (op) {
    case ncclSum: return (double)((r + 2 * i) % 3) - sign;
    case ncclProd: {
      static const double signedSet[3] = {1, 2, -1};
      return sign ? signedSet[(r + i) % 3] : (double)(1 + (r + i) % 2);
    }
    case ncclMax: case ncclMin: return (double)((5 * r + 3 * i) % 9) - 4 * sign;
    default: break;
  }
  /* avg: integers truncate (so sums that do not divide by n are wanted); floats must divide
   * exactly, and fp8, which holds few integers, gets one contributor per element. */
  if (!isFloatType(t)) return (double)((3 * r + i) % 5) - 2 * sign;
  if (!fp8) return n * ((double)((r + i) % 3) - 1);
  static const double fp8Set[3] = {1, -1, 2};
  return (size_t)r == i % (size_t)n ? n * fp8Set[i % 3] : 0;
}

double reductionResult(ncclRedOp_t op, ncclDataType_t t, int n, size_t i) {
  int64_t acc = (int64_t)reductionInput(op, t, n, 0, i);
  for (int r = 1; r < n; ++r) {
    const int64_t x = (int64_t)reductionInput(op, t, n, r, i);
    switch (op) {
      case ncclProd: acc *= x; break;
      case ncclMax: acc = x > acc ? x : acc; break;
      case ncclMin: acc = x < acc ? x : acc; break;
      default: acc += x; break; /* sum, avg */
    }
  }
  return op == ncclAvg ? (double)(acc / n) : (double)acc; /* C division truncates toward 0 */
}

double preMulInput(ncclDataType_t t, int r, size_t i) {
  return (double)((r + i) % 3) - isSignedType(t);
}

double preMulScalar(ncclDataType_t t, int variant) {
  if (variant == 0) return 2;
  return isFloatType(t) ? 0.5 : 3;
}

double preMulResult(ncclDataType_t t, double scalar, int n, size_t i) {
  double sum = 0;
  for (int r = 0; r < n; ++r) sum += scalar * preMulInput(t, r, i);
  return sum;
}

uint8_t movedByte(int r, size_t k) {
  return (uint8_t)(97u * (unsigned)r + 13u * (unsigned)k + 7u * (unsigned)(k >> 8) + 1u);
}
