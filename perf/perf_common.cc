#include "perf/perf_common.h"

#include <fcntl.h>
#include <getopt.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

namespace loom::perf {

// ---- Names and sizes ----------------------------------------------------------------------

namespace {

constexpr const char* kCollectiveNames[kNumCollectives] = {
    "all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv"};

struct DtypeInfo {
  loomDataType_t type;
  const char* name;  // nccl-tests' spelling first
  const char* alias1;
  const char* alias2;
};
constexpr DtypeInfo kDtypes[] = {
    {loomInt8, "int8", "char", "i8"},
    {loomUint8, "uint8", "u8", nullptr},
    {loomInt32, "int32", "int", "i32"},
    {loomUint32, "uint32", "u32", nullptr},
    {loomInt64, "int64", "i64", nullptr},
    {loomUint64, "uint64", "u64", nullptr},
    {loomFloat16, "half", "float16", "fp16"},
    {loomBfloat16, "bfloat16", "bf16", nullptr},
    {loomFloat32, "float", "float32", "fp32"},
    {loomFloat64, "double", "float64", "fp64"},
    {loomFloat8e4m3, "f8e4m3", "fp8e4m3", "e4m3"},
    {loomFloat8e5m2, "f8e5m2", "fp8e5m2", "e5m2"},
};

constexpr const char* kOpNames[loomNumOps] = {"sum", "prod", "min", "max", "avg"};

}  // namespace

const char* collectiveName(Collective c) { return kCollectiveNames[static_cast<int>(c)]; }

std::optional<Collective> parseCollective(std::string_view name) {
  for (int i = 0; i < kNumCollectives; ++i) {
    if (name == kCollectiveNames[i]) return static_cast<Collective>(i);
  }
  // Also the spellings of the API and of other tools.
  if (name == "allreduce") return Collective::kAllReduce;
  if (name == "allgather") return Collective::kAllGather;
  if (name == "reducescatter") return Collective::kReduceScatter;
  if (name == "all_to_all" || name == "alltoall") return Collective::kAllToAll;
  if (name == "bcast") return Collective::kBroadcast;
  if (name == "send_recv") return Collective::kSendRecv;
  return std::nullopt;
}

bool collectiveHasOp(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter || c == Collective::kReduce;
}

bool collectiveHasRoot(Collective c) {
  return c == Collective::kBroadcast || c == Collective::kReduce;
}

double busBwFactor(Collective c, int nranks) {
  const double n = nranks;
  switch (c) {
    case Collective::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return (n - 1) / n;
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSendRecv:
      return 1.0;
  }
  return 1.0;
}

CollSizes collSizes(Collective c, size_t sizeBytes, size_t elemSize, int nranks) {
  const size_t count = sizeBytes / elemSize;
  const size_t n = static_cast<size_t>(nranks);
  const size_t perRank = count / n;
  CollSizes s;
  switch (c) {
    case Collective::kAllGather:
      s.sendCount = perRank;
      s.recvCount = perRank * n;
      s.paramCount = perRank;
      s.sendInPlaceOffset = perRank;
      break;
    case Collective::kReduceScatter:
      s.sendCount = perRank * n;
      s.recvCount = perRank;
      s.paramCount = perRank;
      s.recvInPlaceOffset = perRank;
      break;
    case Collective::kAllToAll:
      s.sendCount = perRank * n;
      s.recvCount = perRank * n;
      s.paramCount = perRank;
      break;
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSendRecv:
      s.sendCount = s.recvCount = s.paramCount = count;
      break;
  }
  return s;
}

size_t dtypeBytes(loomDataType_t d) {
  switch (d) {
    case loomInt8:
    case loomUint8:
    case loomFloat8e4m3:
    case loomFloat8e5m2:
      return 1;
    case loomFloat16:
    case loomBfloat16:
      return 2;
    case loomInt32:
    case loomUint32:
    case loomFloat32:
      return 4;
    case loomInt64:
    case loomUint64:
    case loomFloat64:
      return 8;
    default:
      return 0;
  }
}

const char* dtypeName(loomDataType_t d) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.type == d) return info.name;
  }
  return "?";
}

std::optional<loomDataType_t> parseDtype(std::string_view name) {
  for (const DtypeInfo& info : kDtypes) {
    if (name == info.name || (info.alias1 && name == info.alias1) ||
        (info.alias2 && name == info.alias2)) {
      return info.type;
    }
  }
  return std::nullopt;
}

const char* opName(loomRedOp_t op) { return op >= 0 && op < loomNumOps ? kOpNames[op] : "?"; }

std::optional<loomRedOp_t> parseOp(std::string_view name) {
  for (int i = 0; i < loomNumOps; ++i) {
    if (name == kOpNames[i]) return static_cast<loomRedOp_t>(i);
  }
  if (name == "product") return loomProd;
  return std::nullopt;
}

std::optional<size_t> parseSize(std::string_view text) {
  if (text.empty()) return std::nullopt;
  size_t value = 0;
  size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const size_t digit = static_cast<size_t>(text[i] - '0');
    if (value > (SIZE_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  if (i == 0) return std::nullopt;
  int shift = 0;
  if (i < text.size()) {
    switch (text[i]) {
      case 'k':
      case 'K':
        shift = 10;
        break;
      case 'm':
      case 'M':
        shift = 20;
        break;
      case 'g':
      case 'G':
        shift = 30;
        break;
      default:
        return std::nullopt;
    }
    ++i;
    if (i < text.size() && (text[i] == 'B' || text[i] == 'b')) ++i;  // "64KB" too
  }
  if (i != text.size()) return std::nullopt;
  if (shift && value > (SIZE_MAX >> shift)) return std::nullopt;
  return value << shift;
}

std::vector<size_t> sizeSweep(size_t minBytes, size_t maxBytes, int factor, size_t stepBytes) {
  std::vector<size_t> sizes;
  for (size_t size = minBytes; size <= maxBytes;) {
    sizes.push_back(size);
    size_t next;
    if (factor > 1) {
      // 0 * factor would never advance; overflow would wrap around.
      if (size == 0) {
        next = 1;
      } else if (size > SIZE_MAX / static_cast<size_t>(factor)) {
        break;
      } else {
        next = size * static_cast<size_t>(factor);
      }
    } else {
      if (stepBytes == 0 || size > SIZE_MAX - stepBytes) break;
      next = size + stepBytes;
    }
    size = next;
  }
  return sizes;
}

int itersForSize(int iters, size_t bytes, size_t budgetBytes) {
  if (iters <= 0 || budgetBytes == 0 || bytes == 0) return iters;
  const size_t fit = budgetBytes / bytes;
  if (fit >= static_cast<size_t>(iters)) return iters;
  return fit < 1 ? 1 : static_cast<int>(fit);
}

// ---- Options ------------------------------------------------------------------------------

namespace {

bool parseInt(const char* text, long lo, long hi, int* out) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno || end == text || *end != '\0' || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

constexpr int kOptBytesPerSize = 1000;
constexpr int kOptBind = 1001;
constexpr int kOptJson = 1002;
constexpr int kOptCsv = 1003;
constexpr int kOptCompare = 1004;
constexpr int kOptSim = 1005;
constexpr int kOptInjectError = 1006;
constexpr int kOptTopo = 1007;
constexpr int kOptMem = 1008;
constexpr int kOptRace = 1009;

// "a,b,c" as its items; empty items stay (the caller rejects them).
std::vector<std::string> splitList(std::string_view list) {
  std::vector<std::string> items;
  for (size_t from = 0;;) {
    const size_t comma = list.find(',', from);
    items.emplace_back(list.substr(from, comma - from));
    if (comma == std::string_view::npos) return items;
    from = comma + 1;
  }
}

std::string longName(int ch) {
  switch (ch) {
    case kOptBytesPerSize:
      return "-bytes_per_size";
    case kOptBind:
      return "-bind";
    case kOptMem:
      return "-mem";
    case kOptCompare:
      return "-compare";
    case kOptRace:
      return "-race";
    default:
      return std::string(1, static_cast<char>(ch));
  }
}

}  // namespace

std::string usage(const char* program) {
  std::string u = "usage: ";
  u += program;
  u += " COLLECTIVE [options]\n"
       "  COLLECTIVE: all_reduce all_gather reduce_scatter alltoall broadcast reduce sendrecv\n"
       "  -b, --minbytes SIZE        smallest size (default 32M); K/M/G suffixes\n"
       "  -e, --maxbytes SIZE        largest size (default 32M)\n"
       "  -f, --stepfactor N         multiply the size by N each step\n"
       "  -i, --stepbytes SIZE       else add SIZE each step (default 1M)\n"
       "  -n, --iters N              timed iterations per size (default 20)\n"
       "  -w, --warmup_iters N       untimed iterations per size (default 5)\n"
       "  -c, --check 0|1            check every result (default 1)\n"
       "  -o, --op OP                sum prod min max avg (default sum)\n"
       "  -d, --datatype TYPE        int8 uint8 int32 uint32 int64 uint64 half bfloat16\n"
       "                             float double f8e4m3 f8e5m2 (default float)\n"
       "  -r, --root N               root of broadcast and reduce (default 0)\n"
       "  -N, --nranks N             fork N local ranks (0: ranks come from the launcher)\n"
       "  -A, --algo NAME            the backend's algorithm\n"
       "      --bind core|none       pin forked rank r to the r-th CPU (default none)\n"
       "      --mem plain|shared     buffers from aligned_alloc, or from the library's\n"
       "                             shareable allocator (loom: loomMemAlloc; default plain)\n"
       "      --bytes_per_size SIZE  fewer iterations for sizes where iters * size would\n"
       "                             pass SIZE, so long sweeps stay short (default 512M; 0: off)\n"
       "  -a, --average 0|1|2|3      a row's time: rank 0's, the average, min or max over\n"
       "                             ranks (default 1, as nccl-tests)\n"
       "  -z, --blocking 0|1         nccl-tests' blocking mode; every call of a host library\n"
       "                             returns when done, so 0 and 1 measure the same\n"
       "      --json FILE            write every row and the run's metadata as JSON\n"
       "      --csv FILE             ... and as CSV\n"
       "      --compare mpi,gloo     loom-perf: run the same sweep with the peers, side by side\n"
       "  -R, --repeats K            with --compare: K runs of each library, medians;\n"
       "                             with --race: K rounds\n"
       "      --race A,B,...         loom-perf: these algorithms in one run, interleaved\n"
       "                             size by size (NAME, NAME:LANES, auto, autotune), and\n"
       "                             the regret of loom's own choice against the fastest\n"
       "                             forced one; --json FILE: one file per algorithm\n"
       "      --sim                  the model's predicted time and busbw beside the measured\n"
       "      --topo FILE            --sim's topology model (default LOOM_TOPO_FILE, else a\n"
       "                             uniform model of the run's hosts)\n"
       "  -d all, -o all             every datatype / op, one block of rows each\n";
  return u;
}

bool parseOptions(int argc, char** argv, Options* options, std::string* error) {
  error->clear();
  if (argc < 2 || argv[1][0] == '-') {
    if (argc >= 2 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)) {
      return false;
    }
    *error = "missing the collective";
    return false;
  }
  std::optional<Collective> coll = parseCollective(argv[1]);
  if (!coll) {
    *error = std::string("unknown collective '") + argv[1] + "'";
    return false;
  }
  Options o;
  o.collective = *coll;

  // getopt keeps global state: scan a copy without the collective, restarting with optind 0.
  std::vector<char*> args;
  args.push_back(argv[0]);
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  static const option kLong[] = {
      {"minbytes", required_argument, nullptr, 'b'},
      {"maxbytes", required_argument, nullptr, 'e'},
      {"stepbytes", required_argument, nullptr, 'i'},
      {"stepfactor", required_argument, nullptr, 'f'},
      {"iters", required_argument, nullptr, 'n'},
      {"warmup_iters", required_argument, nullptr, 'w'},
      {"check", required_argument, nullptr, 'c'},
      {"op", required_argument, nullptr, 'o'},
      {"datatype", required_argument, nullptr, 'd'},
      {"root", required_argument, nullptr, 'r'},
      {"nranks", required_argument, nullptr, 'N'},
      {"algo", required_argument, nullptr, 'A'},
      {"bytes_per_size", required_argument, nullptr, kOptBytesPerSize},
      {"bind", required_argument, nullptr, kOptBind},
      {"mem", required_argument, nullptr, kOptMem},
      {"average", required_argument, nullptr, 'a'},
      {"blocking", required_argument, nullptr, 'z'},
      {"json", required_argument, nullptr, kOptJson},
      {"csv", required_argument, nullptr, kOptCsv},
      {"compare", required_argument, nullptr, kOptCompare},
      {"repeats", required_argument, nullptr, 'R'},
      {"race", required_argument, nullptr, kOptRace},
      {"sim", no_argument, nullptr, kOptSim},
      {"topo", required_argument, nullptr, kOptTopo},
      {"inject_error", no_argument, nullptr, kOptInjectError},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  optind = 0;
  opterr = 0;
  const int n = static_cast<int>(args.size()) - 1;
  int ch;
  bool sawStepBytes = false;
  while ((ch = getopt_long(n, args.data(), "b:e:i:f:n:w:c:o:d:r:N:A:a:z:R:h", kLong, nullptr)) != -1) {
    const char* arg = optarg;
    bool ok = true;
    switch (ch) {
      case 'b':
      case 'e':
      case 'i':
      case kOptBytesPerSize: {
        std::optional<size_t> v = parseSize(arg);
        ok = v.has_value();
        if (!ok) break;
        if (ch == 'b') o.minBytes = *v;
        if (ch == 'e') o.maxBytes = *v;
        if (ch == 'i') o.stepBytes = *v, sawStepBytes = true;
        if (ch == kOptBytesPerSize) o.bytesPerSize = *v;
        break;
      }
      case 'f':
        ok = parseInt(arg, 1, 1 << 20, &o.stepFactor);
        break;
      case 'n':
        ok = parseInt(arg, 1, INT_MAX, &o.iters);
        break;
      case 'w':
        ok = parseInt(arg, 0, INT_MAX, &o.warmup);
        break;
      case 'r':
        ok = parseInt(arg, 0, INT_MAX, &o.root);
        break;
      case 'N':
        ok = parseInt(arg, 0, 4096, &o.nranks);
        break;
      case 'c': {
        int v = 0;
        ok = parseInt(arg, 0, 1, &v);
        o.check = v != 0;
        break;
      }
      case 'a': {
        int v = 0;
        ok = parseInt(arg, 0, 3, &v);
        o.average = static_cast<Aggregate>(v);
        break;
      }
      case 'z':
        ok = parseInt(arg, 0, 1, &o.blocking);
        break;
      case 'R':
        ok = parseInt(arg, 1, 1000, &o.repeats);
        break;
      case kOptJson:
        o.jsonPath = arg;
        break;
      case kOptCsv:
        o.csvPath = arg;
        break;
      case kOptSim:
        o.sim = true;
        break;
      case kOptTopo:
        o.topoFile = arg;
        break;
      case kOptInjectError:
        o.injectError = true;
        break;
      case kOptCompare:
        o.compare = splitList(arg);
        for (const std::string& name : o.compare) ok = ok && (name == "mpi" || name == "gloo");
        break;
      case kOptRace: {
        o.race = splitList(arg);
        for (size_t i = 0; i < o.race.size(); ++i) {
          ok = ok && !o.race[i].empty() &&
               std::find(o.race.begin(), o.race.begin() + long(i), o.race[i]) ==
                   o.race.begin() + long(i);
        }
        ok = ok && o.race.size() >= 2;
        break;
      }
      case 'o': {
        o.allOps = std::strcmp(arg, "all") == 0;
        if (o.allOps) break;
        std::optional<loomRedOp_t> v = parseOp(arg);
        ok = v.has_value();
        if (ok) o.op = *v;
        break;
      }
      case 'd': {
        o.allDtypes = std::strcmp(arg, "all") == 0;
        if (o.allDtypes) break;
        std::optional<loomDataType_t> v = parseDtype(arg);
        ok = v.has_value();
        if (ok) o.dtype = *v;
        break;
      }
      case kOptBind:
        ok = std::strcmp(arg, "core") == 0 || std::strcmp(arg, "none") == 0;
        o.bindCores = std::strcmp(arg, "core") == 0;
        break;
      case kOptMem:
        ok = std::strcmp(arg, "shared") == 0 || std::strcmp(arg, "plain") == 0;
        o.sharedBuffers = std::strcmp(arg, "shared") == 0;
        break;
      case 'A':
        o.algorithm = arg;
        break;
      case 'h':
        return false;
      default:
        *error = "unknown option or missing value near '" +
                 std::string(optind > 0 && optind <= n ? args[optind - 1] : "?") + "'";
        return false;
    }
    if (!ok) {
      *error = std::string("bad value '") + arg + "' for -" + longName(ch);
      return false;
    }
  }
  if (optind < n) {
    *error = std::string("unexpected argument '") + args[optind] + "'";
    return false;
  }
  if (!o.race.empty() && (!o.compare.empty() || !o.algorithm.empty())) {
    *error = "--race names the algorithms itself: not with -A or --compare";
    return false;
  }
  if (o.minBytes > o.maxBytes) {
    *error = "minbytes is larger than maxbytes";
    return false;
  }
  if (o.stepFactor <= 1 && o.stepBytes == 0 && o.minBytes != o.maxBytes) {
    *error = sawStepBytes ? "stepbytes 0 would never reach maxbytes" : "no step";
    return false;
  }
  *options = o;
  return true;
}

std::vector<std::string> sweepArgs(const Options& o) {
  std::vector<std::string> a = {collectiveName(o.collective)};
  const auto add = [&a](const char* flag, const std::string& value) {
    a.emplace_back(flag);
    a.push_back(value);
  };
  add("-b", std::to_string(o.minBytes));
  add("-e", std::to_string(o.maxBytes));
  add("-f", std::to_string(o.stepFactor));
  add("-i", std::to_string(o.stepBytes));
  add("-n", std::to_string(o.iters));
  add("-w", std::to_string(o.warmup));
  add("-c", o.check ? "1" : "0");
  add("-o", o.allOps ? "all" : opName(o.op));
  add("-d", o.allDtypes ? "all" : dtypeName(o.dtype));
  add("-r", std::to_string(o.root));
  add("-a", std::to_string(static_cast<int>(o.average)));
  add("-z", std::to_string(o.blocking));
  add("--bytes_per_size", std::to_string(o.bytesPerSize));
  add("--bind", o.bindCores ? "core" : "none");
  add("--mem", o.sharedBuffers ? "shared" : "plain");
  return a;
}

double medianOf(std::vector<double> v) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

double pairedRatio(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return -1;
  std::vector<double> ratios;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] > 0 && b[i] > 0) ratios.push_back(a[i] / b[i]);
  return medianOf(ratios);
}

double aggregateTimes(Aggregate a, const std::vector<double>& t) {
  if (t.empty()) return 0;
  switch (a) {
    case Aggregate::kRank0:
      return t[0];
    case Aggregate::kMin:
      return *std::min_element(t.begin(), t.end());
    case Aggregate::kMax:
      return *std::max_element(t.begin(), t.end());
    case Aggregate::kAvg:
      break;
  }
  double sum = 0;
  for (double v : t) sum += v;
  return sum / static_cast<double>(t.size());
}

// ---- Data ---------------------------------------------------------------------------------
//
// Rank r's input element g holds value(r, g), a small integer chosen per op and dtype so that
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
    case Collective::kAllReduce:
      blocks.push_back({0, s.recvCount, kReduced, 0});
      break;
    case Collective::kReduce:
      if (rank == root) blocks.push_back({0, s.recvCount, kReduced, 0});
      break;
    case Collective::kReduceScatter:
      blocks.push_back({0, c1, kReduced, static_cast<size_t>(rank) * c1});
      break;
    case Collective::kAllGather:
      for (int j = 0; j < nranks; ++j) blocks.push_back({j * c1, c1, j, 0});
      break;
    case Collective::kAllToAll:
      for (int j = 0; j < nranks; ++j) {
        blocks.push_back({j * c1, c1, j, static_cast<size_t>(rank) * c1});
      }
      break;
    case Collective::kBroadcast:
      blocks.push_back({0, s.recvCount, root, 0});
      break;
    case Collective::kSendRecv:
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

// ---- The table ----------------------------------------------------------------------------

namespace {

std::string printfString(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string printfString(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof(buf), format, args);
  va_end(args);
  return buf;
}

}  // namespace

Measurement makeMeasurement(Collective c, size_t bytes, int nranks, double timeUs, int64_t wrong) {
  Measurement m;
  m.timeUs = timeUs;
  // bytes / 1e9 / (timeUs / 1e6)
  m.algBw = timeUs > 0 ? static_cast<double>(bytes) / (timeUs * 1e3) : 0.0;
  m.busBw = m.algBw * busBwFactor(c, nranks);
  m.wrong = wrong;
  return m;
}

namespace {

// nccl-tests' widths: fewer decimals as the time grows, so the column stays 7 wide.
std::string timeColumn(double timeUs) {
  const char* format = timeUs >= 10000.0 ? "%7.0f" : timeUs >= 100.0 ? "%7.1f" : "%7.2f";
  return printfString(format, timeUs);
}

}  // namespace

std::string rankLine(int rank, int pid, const char* host) {
  return printfString("#  Rank %2d Pid %6d on %10s\n", rank, pid, host);
}

std::string formatHeader(const std::string& program, const Options& o, int nranks,
                         const std::string& backend, const std::vector<std::string>& ranks) {
  std::string h = printfString(
      "# %s %s: nranks %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
      "validation: %d bytes per size: %zu average: %d blocking: %d\n",
      program.c_str(), collectiveName(o.collective), nranks, o.minBytes, o.maxBytes,
      o.stepFactor > 1 ? static_cast<size_t>(o.stepFactor) : o.stepBytes,
      o.stepFactor > 1 ? "factor" : "bytes", o.warmup, o.iters, o.check ? 1 : 0, o.bytesPerSize,
      static_cast<int>(o.average), o.blocking);
  h += "# " + backend + "\n";
  if (o.bindCores) h += "# Forked ranks bound to one CPU each\n";
  if (o.sharedBuffers) h += "# Buffers from the library's shareable allocator (--mem shared)\n";
  h += "#\n# Using ranks\n";
  for (const std::string& line : ranks) h += line;
  h += "#\n";
  h += printfString(
      "# %10s  %12s  %8s  %6s  %6s           out-of-place                       "
      "in-place          %s\n",
      "", "", "", "", "", o.sim ? "       simulated" : "");
  h += printfString(
      "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s%s\n", "size", "count",
      "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
      "#wrong", o.sim ? printfString("  %7s  %6s  %s", "time", "busbw", "algorithm").c_str() : "");
  h +=
      printfString("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s%s\n", "(B)",
                   "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                   "(GB/s)", "", o.sim ? printfString("  %7s  %6s", "(us)", "(GB/s)").c_str() : "");
  return h;
}

std::string formatRow(Collective c, const CollSizes& sizes, loomDataType_t dtype, loomRedOp_t op,
                      int root, const Measurement& outOfPlace, const Measurement& inPlace,
                      const Prediction* simulated) {
  std::string row = printfString(
      "%12zu  %12zu  %8s  %6s  %6d", sizes.bytes(dtypeBytes(dtype)), sizes.paramCount,
      dtypeName(dtype), collectiveHasOp(c) ? opName(op) : "none", collectiveHasRoot(c) ? root : -1);
  for (const Measurement* m : {&outOfPlace, &inPlace}) {
    const std::string timeText = timeColumn(m->timeUs);
    if (m->wrong >= 0) {
      row += printfString("  %7s  %6.2f  %6.2f  %5g", timeText.c_str(), m->algBw, m->busBw,
                          static_cast<double>(m->wrong));
    } else {
      row += printfString("  %7s  %6.2f  %6.2f  %5s", timeText.c_str(), m->algBw, m->busBw, "N/A");
    }
  }
  if (simulated) {
    const Measurement& m = simulated->time;
    row += m.timeUs > 0 ? printfString("  %7s  %6.2f  %s", timeColumn(m.timeUs).c_str(), m.busBw,
                                       simulated->algorithm.c_str())
                        : printfString("  %7s  %6s  %s", "-", "-", simulated->algorithm.c_str());
  }
  return row + "\n";
}

std::string formatFooter(int64_t wrongTotal, double avgBusBw, bool checked) {
  std::string f;
  if (checked) {
    f += printfString("# Out of bounds values : %lld %s\n", static_cast<long long>(wrongTotal),
                      wrongTotal ? "FAILED" : "OK");
  }
  f += printfString("# Avg bus bandwidth    : %g \n#\n", avgBusBw);
  return f;
}

// ---- Machine-readable results -------------------------------------------------------------

std::vector<std::pair<std::string, std::string>> loomEnvironment() {
  std::vector<std::pair<std::string, std::string>> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    const size_t eq = entry.find('=');
    if (entry.rfind("LOOM_", 0) != 0 || eq == std::string_view::npos) continue;
    env.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
  }
  std::sort(env.begin(), env.end());
  return env;
}

namespace {

std::string jsonString(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      out += printfString("\\u%04x", ch);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// Full precision: consumers recompute ratios, and the table's 2 decimals read 0.00 at 8 B.
std::string jsonNumber(double v) { return std::isfinite(v) ? printfString("%.9g", v) : "null"; }

std::string jsonMeasurement(const Measurement& m) {
  return "{\"time_us\": " + jsonNumber(m.timeUs) + ", \"algbw_gbs\": " + jsonNumber(m.algBw) +
         ", \"busbw_gbs\": " + jsonNumber(m.busBw) +
         ", \"wrong\": " + (m.wrong < 0 ? std::string("null") : std::to_string(m.wrong)) + "}";
}

// CSV fields are quoted only when they must be (RFC 4180).
std::string csvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (const char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

}  // namespace

std::string formatJson(const RunMetadata& meta, const Options& o,
                       const std::vector<ResultRow>& rows, int64_t wrongTotal, double avgBusBw) {
  std::string env;
  for (const auto& [key, value] : meta.env) {
    env += (env.empty() ? "" : ", ") + jsonString(key) + ": " + jsonString(value);
  }
  std::string j = "{\n";
  j += "  \"schema\": \"loom-perf/1\",\n";
  j += "  \"program\": " + jsonString(meta.program) + ",\n";
  j += "  \"library\": " + jsonString(meta.library) + ",\n";
  j += "  \"version\": " + jsonString(meta.version) + ",\n";
  j += "  \"git_commit\": " + jsonString(meta.gitCommit) + ",\n";
  j += "  \"backend\": " + jsonString(meta.backend) + ",\n";
  j += "  \"collective\": " + jsonString(collectiveName(meta.collective)) + ",\n";
  j += printfString("  \"ranks\": %d,\n  \"hosts\": %d,\n", meta.ranks, meta.hosts);
  j += printfString(
      "  \"options\": {\"minbytes\": %zu, \"maxbytes\": %zu, \"stepfactor\": %d, "
      "\"stepbytes\": %zu, \"iters\": %d, \"warmup_iters\": %d, \"check\": %d, "
      "\"average\": %d, \"blocking\": %d, \"bytes_per_size\": %zu},\n",
      o.minBytes, o.maxBytes, o.stepFactor, o.stepBytes, o.iters, o.warmup, o.check ? 1 : 0,
      static_cast<int>(o.average), o.blocking, o.bytesPerSize);
  j += "  \"env\": {" + env + "},\n";
  if (!meta.race.empty()) j += "  \"race\": " + jsonString(meta.race) + ",\n";
  j += "  \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const ResultRow& r = rows[i];
    j += i ? ",\n    " : "\n    ";
    j += printfString(
        "{\"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", "
        "\"root\": %d, \"algorithm\": ",
        r.bytes, r.count, dtypeName(r.dtype),
        collectiveHasOp(meta.collective) ? opName(r.op) : "none", r.root);
    j += jsonString(r.algorithm);
    if (!r.ran.empty()) j += ", \"ran\": " + jsonString(r.ran);
    j += ", \"out_of_place\": " + jsonMeasurement(r.outOfPlace) +
         ", \"in_place\": " + jsonMeasurement(r.inPlace);
    if (!r.roundsUs.empty()) {
      std::string list;
      for (double t : r.roundsUs) list += (list.empty() ? "" : ", ") + jsonNumber(t);
      j += ", \"rounds_us\": [" + list + "]";
    }
    if (r.simulated && r.simulated->time.timeUs > 0) {
      const Measurement& m = r.simulated->time;
      j += ", \"simulated\": {\"time_us\": " + jsonNumber(m.timeUs) +
           ", \"algbw_gbs\": " + jsonNumber(m.algBw) + ", \"busbw_gbs\": " + jsonNumber(m.busBw) +
           ", \"algorithm\": " + jsonString(r.simulated->algorithm) + "}";
    }
    j += "}";
  }
  j += rows.empty() ? "],\n" : "\n  ],\n";
  j += "  \"wrong_total\": " + (o.check ? std::to_string(wrongTotal) : std::string("null")) +
       ",\n  \"avg_busbw_gbs\": " + jsonNumber(avgBusBw) + "\n}\n";
  return j;
}

std::string formatCsv(const RunMetadata& meta, const std::vector<ResultRow>& rows) {
  std::string env;
  for (const auto& [key, value] : meta.env) env += (env.empty() ? "" : ";") + key + "=" + value;
  std::string c =
      "library,version,git_commit,collective,ranks,hosts,algorithm,size,count,type,redop,root,"
      "oop_time_us,oop_algbw_gbs,oop_busbw_gbs,oop_wrong,ip_time_us,ip_algbw_gbs,ip_busbw_gbs,"
      "ip_wrong,env\n";
  for (const ResultRow& r : rows) {
    c += csvField(meta.library) + "," + csvField(meta.version) + "," + csvField(meta.gitCommit) +
         "," + collectiveName(meta.collective) + printfString(",%d,%d,", meta.ranks, meta.hosts) +
         csvField(r.algorithm) +
         printfString(",%zu,%zu,%s,%s,%d", r.bytes, r.count, dtypeName(r.dtype),
                      collectiveHasOp(meta.collective) ? opName(r.op) : "none", r.root);
    for (const Measurement* m : {&r.outOfPlace, &r.inPlace}) {
      c += printfString(",%.9g,%.9g,%.9g,", m->timeUs, m->algBw, m->busBw);
      if (m->wrong >= 0) c += std::to_string(m->wrong);
    }
    c += "," + csvField(env) + "\n";
  }
  return c;
}

const JsonValue* JsonValue::find(std::string_view key) const {
  for (const auto& [k, v] : members) {
    if (k == key) return &v;
  }
  return nullptr;
}

namespace {

// A recursive-descent reader of standard JSON (\u escapes beyond ASCII are kept as '?':
// nothing loom writes needs them).
class JsonReader {
 public:
  explicit JsonReader(std::string_view text) : s_(text) {}

  std::optional<JsonValue> document(std::string* error) {
    JsonValue v;
    if (!value(&v, 0) || (skipSpace(), pos_ != s_.size())) {
      *error = printfString("malformed JSON at offset %zu", pos_);
      return std::nullopt;
    }
    return v;
  }

 private:
  static constexpr int kMaxDepth = 64;

  void skipSpace() {
    while (pos_ < s_.size() && std::strchr(" \t\r\n", s_[pos_]) && s_[pos_]) ++pos_;
  }
  bool eat(char ch) {
    skipSpace();
    if (pos_ < s_.size() && s_[pos_] == ch) return ++pos_, true;
    return false;
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  bool string(std::string* out) {
    if (!eat('"')) return false;
    while (pos_ < s_.size() && s_[pos_] != '"') {
      char ch = s_[pos_++];
      if (ch == '\\') {
        if (pos_ >= s_.size()) return false;
        const char e = s_[pos_++];
        const char* from = "\"\\/bfnrt";
        const char* to = "\"\\/\b\f\n\r\t";
        if (const char* hit = e ? std::strchr(from, e) : nullptr) {
          ch = to[hit - from];
        } else if (e == 'u' && pos_ + 4 <= s_.size()) {
          const unsigned code = std::strtoul(std::string(s_.substr(pos_, 4)).c_str(), nullptr, 16);
          pos_ += 4;
          ch = code < 0x80 ? static_cast<char>(code) : '?';
        } else {
          return false;
        }
      }
      out->push_back(ch);
    }
    return eat('"');
  }
  bool value(JsonValue* v, int depth) {
    if (depth > kMaxDepth) return false;
    skipSpace();
    if (pos_ >= s_.size()) return false;
    const char ch = s_[pos_];
    if (ch == '"') return v->kind = JsonValue::Kind::kString, string(&v->text);
    if (ch == '{') {
      v->kind = JsonValue::Kind::kObject;
      ++pos_;
      if (eat('}')) return true;
      do {
        std::string key;
        JsonValue member;
        if (!string(&key) || !eat(':') || !value(&member, depth + 1)) return false;
        v->members.emplace_back(std::move(key), std::move(member));
      } while (eat(','));
      return eat('}');
    }
    if (ch == '[') {
      v->kind = JsonValue::Kind::kArray;
      ++pos_;
      if (eat(']')) return true;
      do {
        v->items.emplace_back();
        if (!value(&v->items.back(), depth + 1)) return false;
      } while (eat(','));
      return eat(']');
    }
    if (literal("true")) return v->kind = JsonValue::Kind::kBool, v->boolean = true, true;
    if (literal("false")) return v->kind = JsonValue::Kind::kBool, true;
    if (literal("null")) return true;
    const std::string rest(s_.substr(pos_, std::min<size_t>(s_.size() - pos_, 64)));
    char* end = nullptr;
    v->number = std::strtod(rest.c_str(), &end);
    if (end == rest.c_str()) return false;
    v->kind = JsonValue::Kind::kNumber;
    pos_ += static_cast<size_t>(end - rest.c_str());
    return true;
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

std::optional<JsonValue> parseJson(std::string_view text, std::string* error) {
  return JsonReader(text).document(error);
}

// ---- The driver ---------------------------------------------------------------------------

bool Backend::barrier() {
  char mine = 0;
  std::vector<char> all(static_cast<size_t>(nranks()));
  return allGather(&mine, all.data(), 1);
}

void* Backend::allocateShared(size_t bytes) { return std::aligned_alloc(4096, bytes); }

void Backend::releaseShared(void* p) { std::free(p); }

size_t Backend::inPlaceOutputOffset(Collective c, const CollSizes& sizes) const {
  (void)c;
  return sizes.recvInPlaceOffset * static_cast<size_t>(rank());
}

namespace {

struct BufferRelease {
  Backend* shared;  // null: std::free
  void operator()(char* p) const {
    if (shared) {
      shared->releaseShared(p);
    } else {
      std::free(p);
    }
  }
};
using Buffer = std::unique_ptr<char, BufferRelease>;

// Page-aligned and touched once, so first-touch page faults stay out of the timings.
Buffer allocateBuffer(size_t bytes, Backend* shared) {
  const size_t kAlign = 4096;
  const size_t rounded = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
  void* p = shared ? shared->allocateShared(rounded) : std::aligned_alloc(kAlign, rounded);
  Buffer b(static_cast<char*>(p), BufferRelease{shared});
  if (b) std::memset(b.get(), 0, rounded);
  return b;
}

constexpr size_t kWarmupShare = 8;

// A rank's pid and host; hosts are told apart as loom does, by name and network namespace,
// so that namespace "hosts" on one machine (perf/netns-cluster.sh) count as hosts.
struct RankId {
  int32_t pid;
  char host[60];
  uint64_t netns;
};

struct SizeResult {
  double timeUs[2];
  int64_t wrong[2];
  int32_t failed;
  int32_t pad;
};

// The progress line: only on a terminal, so logs and pipes stay byte-identical to
// nccl-tests' output. Time left is extrapolated from the cost of what is done, with a size's
// cost taken as its timed bytes plus a fixed per-call share for the latency-bound sizes.
class Progress {
 public:
  Progress(bool enabled, std::vector<double> costs)
      : enabled_(enabled && isatty(STDERR_FILENO)), costs_(std::move(costs)) {
    for (double c : costs_) total_ += c;
  }
  ~Progress() {
    if (shown_) std::fputs("\r\033[K", stderr);
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void done(size_t index, size_t bytes) {
    if (!enabled_) return;
    done_ += costs_[index];
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double left = done_ > 0 ? elapsed * (total_ - done_) / done_ : 0;
    std::fprintf(stderr, "\r\033[K[%zu/%zu] size %zu B done, about %.0f s left", index + 1,
                 costs_.size(), bytes, left);
    std::fflush(stderr);
    shown_ = true;
  }

 private:
  bool enabled_;
  bool shown_ = false;
  std::vector<double> costs_;
  double total_ = 0, done_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// A collective's per-call latency, in bytes of bandwidth, for the progress estimate.
constexpr double kCallCostBytes = 64 << 10;

bool writeFile(const std::string& path, const std::string& text, const std::string& program) {
  FILE* f = std::fopen(path.c_str(), "w");
  const bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f && std::fclose(f) != 0) return false;
  if (!ok) std::fprintf(stderr, "%s: cannot write %s\n", program.c_str(), path.c_str());
  return ok;
}

}  // namespace

namespace {

// One contestant's turn at one size: for each placement the warm-up and the timed batch, then
// the check; what the library ran out of place goes to *ran.
SizeResult takeTurn(Backend& backend, const Options& o, const CollSizes& s, loomDataType_t dtype,
                    loomRedOp_t op, int warmup, int iters, char* sendBuf, char* recvBuf,
                    std::string* ran) {
  const Collective c = o.collective;
  const int n = backend.nranks();
  const int rank = backend.rank();
  const size_t elem = dtypeBytes(dtype);
  const size_t bytes = s.bytes(elem);
  SizeResult mine{};
  for (int placement = 0; placement < 2 && !mine.failed; ++placement) {
    const bool inPlace = placement == 1;
    CollCall call{c, dtype, op, o.root, sendBuf, recvBuf, s.paramCount, inPlace};
    if (inPlace) {
      call.send = recvBuf + s.sendInPlaceOffset * static_cast<size_t>(rank) * elem;
      call.recv = recvBuf + s.recvInPlaceOffset * static_cast<size_t>(rank) * elem;
    }
    if (!backend.prepare(call)) {
      mine.failed = 1;
      break;
    }
    bool ok = true;
    for (int i = 0; i < warmup && ok; ++i) ok = backend.run(call);
    ok = ok && backend.barrier();
    // The timed batch: one clock read on each side, nothing else in the loop.
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters && ok; ++i) ok = backend.run(call);
    const auto end = std::chrono::steady_clock::now();
    mine.timeUs[placement] = std::chrono::duration<double, std::micro>(end - start).count() / iters;
    if (placement == 0) *ran = backend.lastAlgorithm();
    mine.wrong[placement] = -1;
    if (ok && o.check) {
      // Poison the output first so that a call which writes nothing cannot pass on
      // what an earlier one left there (0xff: NaN, or a negative or unused integer).
      std::memset(recvBuf, 0xff, inPlace ? bytes : s.recvCount * elem);
      fillInput(c, dtype, op, n, rank, o.root, s, const_cast<void*>(call.send));
      ok = backend.run(call);
      char* out = inPlace ? recvBuf + backend.inPlaceOutputOffset(c, s) * elem
                          : static_cast<char*>(call.recv);
      const bool hasOutput = s.recvCount > 0 && (c != Collective::kReduce || rank == o.root);
      if (o.injectError && rank == 0 && hasOutput) out[0] = static_cast<char>(out[0] ^ 0x55);
      mine.wrong[placement] = static_cast<int64_t>(countWrong(c, dtype, op, n, rank, o.root, s, out));
    }
    if (!ok) mine.failed = 1;
  }
  return mine;
}

// A contestant's --json / --csv file: FILE with "-LABEL" before its extension (a plain sweep,
// without a label, writes FILE itself).
std::string contestantPath(const std::string& path, const std::string& label) {
  if (path.empty() || label.empty()) return path;
  std::string tag;
  for (char ch : label) tag += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '-';
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  const bool hasExtension = dot != std::string::npos && (slash == std::string::npos || dot > slash);
  const size_t at = hasExtension ? dot : path.size();
  return path.substr(0, at) + "-" + tag + path.substr(at);
}

// The process's LOOM_* variables with the contestant's own on top, sorted by name.
std::vector<std::pair<std::string, std::string>> contestantEnvironment(const Contestant& who) {
  std::map<std::string, std::string> env;
  for (const auto& [key, value] : loomEnvironment()) env[key] = value;
  for (const auto& [key, value] : who.env) env[key] = value;
  return {env.begin(), env.end()};
}

// --race's closing report: for each contestant that chose its own algorithm, every row's
// median time against the fastest forced contestant's of the same row, and how many rows are
// within 10%; then the same round by round (pairedRatio) against the forced contestant it
// trails most, which the machine's drift between rounds does not move. rows[i] are contestant
// i's rows, all in the same order.
std::string formatRegrets(const std::vector<Contestant>& contestants, Collective c,
                          const std::vector<std::vector<ResultRow>>& rows, int rounds) {
  std::vector<size_t> forced, choosing;
  for (size_t i = 0; i < contestants.size(); ++i)
    (contestants[i].backend->algorithm(c) == "auto" ? choosing : forced).push_back(i);
  if (forced.empty() || choosing.empty()) return {};
  constexpr double kWithin = 1.10;
  // Within 10% at how many sizes, and the worst ratio and its size.
  struct Tally {
    int within = 0;
    double worst = 0;
    size_t worstBytes = 0;
    void add(double ratio, size_t bytes) {
      within += ratio <= kWithin;
      if (ratio > worst) worst = ratio, worstBytes = bytes;
    }
    std::string text(int counted) const {
      return printfString("within 10%% of the fastest forced at %d of %d sizes", within,
                          counted) +
             (counted ? printfString("; worst %+.1f%% at %zu B", (worst - 1) * 100, worstBytes)
                      : "");
    }
  };
  std::string out;
  for (size_t who : choosing) {
    const std::string& label = contestants[who].label;
    out += printfString(
        "#\n# Regret of %s: its out-of-place time against the fastest forced algorithm of the same "
        "size (medians of %d rounds), and round by round: the median over rounds of its time "
        "over a forced one's in the same round, against the one it trails most\n"
        "# %10s  %8s  %-14s  %9s  %9s  %7s  %-14s  %7s  %s\n",
        label.c_str(), rounds, "size (B)", "type", "fastest forced", "time (us)",
        (label + " (us)").c_str(), "regret", "trails most", "by round", "it ran");
    Tally medians, byRound;
    int counted = 0;
    for (size_t r = 0; r < rows[who].size(); ++r) {
      const ResultRow& mine = rows[who][r];
      if (mine.bytes == 0) continue;  // no data: every algorithm does nothing alike
      size_t best = forced[0], trailed = forced[0];
      double paired = -1;
      for (size_t f : forced) {
        if (rows[f][r].outOfPlace.timeUs < rows[best][r].outOfPlace.timeUs) best = f;
        const double ratio = pairedRatio(mine.roundsUs, rows[f][r].roundsUs);
        if (ratio > paired) paired = ratio, trailed = f;
      }
      const double ratio = mine.outOfPlace.timeUs / rows[best][r].outOfPlace.timeUs;
      ++counted;
      medians.add(ratio, mine.bytes);
      byRound.add(paired, mine.bytes);
      out += printfString("  %10zu  %8s  %-14s  %9.2f  %9.2f  %+6.1f%%  %-14s  %+6.1f%%  %s\n",
                          mine.bytes, dtypeName(mine.dtype), contestants[best].label.c_str(),
                          rows[best][r].outOfPlace.timeUs, mine.outOfPlace.timeUs,
                          (ratio - 1) * 100, contestants[trailed].label.c_str(),
                          (paired - 1) * 100, mine.ran.c_str());
    }
    out += "# " + label + ": " + medians.text(counted) + "\n# " + label +
           ", round by round: " + byRound.text(counted) + "\n";
  }
  return out;
}

}  // namespace

int runSweep(Backend& backend, const Options& o, const std::string& program,
             const std::string& gitCommit) {
  return runRace({Contestant{&backend, "", {}}}, o, program, gitCommit);
}

int runRace(const std::vector<Contestant>& contestants, const Options& o,
            const std::string& program, const std::string& gitCommit) {
  Backend& backend = *contestants[0].backend;  // the one that exchanges results and buffers
  const size_t racers = contestants.size();
  const bool race = racers > 1;
  const int rounds = race ? o.repeats : 1;
  const int rank = backend.rank();
  const int n = backend.nranks();
  const Collective c = o.collective;
  const bool leader = rank == 0;

  // The (dtype, op) blocks of rows: one unless -d all / -o all.
  std::vector<std::pair<loomDataType_t, loomRedOp_t>> combos;
  std::vector<std::string> skipped;
  for (int d = 0; d < loomNumTypes; ++d) {
    const auto dtype = static_cast<loomDataType_t>(d);
    if (!(o.allDtypes ? dtypeBytes(dtype) > 0 : dtype == o.dtype)) continue;
    for (int p = 0; p < loomNumOps; ++p) {
      const auto op = static_cast<loomRedOp_t>(p);
      // Collectives without an op run once per dtype, under the op the options name.
      if (!(o.allOps && collectiveHasOp(c) ? true : op == o.op)) continue;
      const std::string why = backend.unsupported(c, dtype, op);
      if (why.empty()) {
        combos.emplace_back(dtype, op);
      } else {
        skipped.push_back(std::string(dtypeName(dtype)) + " " + opName(op) + ": " + why);
      }
    }
  }
  std::string why;
  if (combos.empty()) why = skipped.empty() ? "nothing to run" : skipped.front();
  if (why.empty() && collectiveHasRoot(c) && o.root >= n) why = "root is not a rank";
  if (!why.empty()) {
    if (leader) std::fprintf(stderr, "%s: %s: %s\n", program.c_str(), collectiveName(c), why.c_str());
    return 2;
  }

  // The header names every rank's host and pid.
  RankId me{};
  me.pid = static_cast<int32_t>(getpid());
  gethostname(me.host, sizeof(me.host) - 1);
  struct stat ns {};
  if (stat("/proc/self/ns/net", &ns) == 0) me.netns = ns.st_ino;
  std::vector<RankId> ids(static_cast<size_t>(n));
  if (!backend.allGather(&me, ids.data(), sizeof(RankId))) return 3;
  std::vector<RunMetadata> meta(racers);
  if (leader) {
    std::vector<std::string> lines;
    std::vector<std::pair<std::string, uint64_t>> hosts;
    for (int r = 0; r < n; ++r) {
      lines.push_back(rankLine(r, ids[r].pid, ids[r].host));
      const std::pair<std::string, uint64_t> host(ids[r].host, ids[r].netns);
      if (std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
    }
    // A race's files name it alike (rank 0's host and pid, and when it started), so that a
    // reader pairs their rounds only with those of the same race.
    const std::string raceName =
        race ? printfString("%s:%d:%lld", me.host, int(me.pid),
                            (long long)std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count())
             : std::string();
    for (size_t i = 0; i < racers; ++i) {
      const Backend& b = *contestants[i].backend;
      meta[i] = RunMetadata{program,      b.library(), b.version(), gitCommit,
                            b.describe(), c,           n,           int(hosts.size()),
                            contestantEnvironment(contestants[i]), raceName};
    }
    std::string header = formatHeader(program, o, n, meta[0].backend, lines);
    if (race) {
      std::string names;
      for (const Contestant& who : contestants) names += " " + who.label;
      header.insert(0, printfString("# --race:%s; %d rounds of them all per size, each row the "
                                    "median (its last column names it)\n",
                                    names.c_str(), rounds));
    }
    if (o.sim) {
      std::vector<int> hostOfRank;
      for (int r = 0; r < n; ++r) {
        const std::pair<std::string, uint64_t> host(ids[r].host, ids[r].netns);
        hostOfRank.push_back(int(std::find(hosts.begin(), hosts.end(), host) - hosts.begin()));
      }
      std::string line;
      for (const Contestant& who : contestants)
        line = who.backend->setUpPrediction(o, hostOfRank);
      header.insert(0, "# --sim: " + line + "\n");
    }
    if (o.allDtypes || o.allOps) {
      for (const std::string& s : skipped) header.insert(0, "# skipped " + s + "\n");
    }
    std::fputs(header.c_str(), stdout);
    std::fflush(stdout);
  }

  const size_t elem0 = 8;  // the widest dtype sizes the buffers for every block
  const std::vector<size_t> sweep = sizeSweep(o.minBytes, o.maxBytes, o.stepFactor, o.stepBytes);
  size_t maxBytes = 0;
  for (size_t size : sweep) {
    maxBytes = std::max(maxBytes, collSizes(c, size, 1, n).bytes(1) + elem0 * n);
  }
  Backend* shared = o.sharedBuffers ? &backend : nullptr;
  Buffer sendBuf = allocateBuffer(maxBytes, shared);
  Buffer recvBuf = allocateBuffer(maxBytes, shared);
  if (!sendBuf || !recvBuf) {
    std::fprintf(stderr, "%s: rank %d: cannot allocate 2 x %zu bytes\n", program.c_str(), rank,
                 maxBytes);
    return 3;
  }

  std::vector<double> costs;
  for (size_t b = 0; b < combos.size(); ++b) {
    for (size_t size : sweep) {
      costs.push_back(double(itersForSize(o.iters, size, o.bytesPerSize)) *
                      (double(size) + kCallCostBytes));
    }
  }
  Progress progress(leader, std::move(costs));
  size_t progressIndex = 0;

  std::vector<std::vector<ResultRow>> results(racers);
  std::vector<int64_t> wrongOf(racers, 0);  // wrong elements of each contestant's checks
  std::vector<double> busBwSum(racers, 0.0);
  int rows = 0;
  for (const auto& [dtype, op] : combos) {
    const size_t elem = dtypeBytes(dtype);
    for (size_t size : sweep) {
      const CollSizes s = collSizes(c, size, elem, n);
      const size_t bytes = s.bytes(elem);
      // Warm-up only has to build connections and plans and fault in pages: at large sizes
      // one or two calls do that, so it gets a smaller share of the budget than the timed
      // batch.
      const int warmup = itersForSize(
          o.warmup, bytes, o.bytesPerSize ? std::max<size_t>(o.bytesPerSize / kWarmupShare, 1) : 0);
      const int iters = itersForSize(o.iters, bytes, o.bytesPerSize);
      // Per contestant and placement: the row's time of each round; wrong results over all.
      std::vector<std::vector<double>> times[2];
      times[0].resize(racers);
      times[1].resize(racers);
      std::vector<std::array<int64_t, 2>> wrong(racers, {0, 0});
      std::vector<std::string> ran(racers);  // what each ran out of place, where it says
      for (int round = 0; round < rounds; ++round) {
        for (size_t turn = 0; turn < racers; ++turn) {
          const size_t who = (turn + size_t(round)) % racers;
          const SizeResult mine = takeTurn(*contestants[who].backend, o, s, dtype, op, warmup,
                                           iters, sendBuf.get(), recvBuf.get(), &ran[who]);
          // Every rank must reach this exchange, even after an error, or the others would hang.
          std::vector<SizeResult> all(static_cast<size_t>(n));
          if (!backend.allGather(&mine, all.data(), sizeof(SizeResult))) return 3;
          bool failed = false;
          for (int p = 0; p < 2; ++p) {
            std::vector<double> ranks;
            for (const SizeResult& r : all) {
              ranks.push_back(r.timeUs[p]);
              wrong[who][p] += r.wrong[p];
              failed |= r.failed != 0;
            }
            times[p][who].push_back(aggregateTimes(o.average, ranks));
          }
          if (failed) {
            if (leader) {
              std::fprintf(stderr, "%s: a rank failed at size %zu%s%s\n", program.c_str(), size,
                           race ? " running " : "", contestants[who].label.c_str());
            }
            return 3;
          }
        }
      }
      for (size_t who = 0; who < racers; ++who) {
        if (!o.check) wrong[who] = {-1, -1};
        ResultRow row;
        row.bytes = bytes;
        row.count = s.paramCount;
        row.dtype = dtype;
        row.op = op;
        row.root = collectiveHasRoot(c) ? o.root : -1;
        row.algorithm = contestants[who].backend->algorithm(c);
        row.ran = ran[who];
        row.outOfPlace = makeMeasurement(c, bytes, n, medianOf(times[0][who]), wrong[who][0]);
        row.inPlace = makeMeasurement(c, bytes, n, medianOf(times[1][who]), wrong[who][1]);
        if (race) row.roundsUs = times[0][who];
        if (o.check) wrongOf[who] += wrong[who][0] + wrong[who][1];
        busBwSum[who] += row.outOfPlace.busBw + row.inPlace.busBw;
        if (leader && o.sim) {
          Prediction p;
          const CollCall call{c,    dtype, op, o.root, sendBuf.get(), recvBuf.get(), s.paramCount,
                              false};
          if (contestants[who].backend->predict(call, &p))
            p.time = makeMeasurement(c, bytes, n, p.time.timeUs, -1);
          row.simulated = p;
        }
        if (leader) {
          std::string line = formatRow(c, s, dtype, op, o.root, row.outOfPlace, row.inPlace,
                                       row.simulated ? &*row.simulated : nullptr);
          if (race) {
            line.pop_back();  // the newline
            line += "  " + contestants[who].label +
                    (row.ran.empty() || row.algorithm != "auto" ? "" : " (ran " + row.ran + ")") +
                    "\n";
          }
          std::fputs(line.c_str(), stdout);
          std::fflush(stdout);
          results[who].push_back(std::move(row));
        }
      }
      rows += 2;
      if (leader) progress.done(progressIndex, bytes);
      ++progressIndex;
    }
  }
  int64_t wrongTotal = 0;
  for (int64_t w : wrongOf) wrongTotal += w;
  int rc = wrongTotal ? 1 : 0;
  if (leader) {
    double avgSum = 0;
    for (double sum : busBwSum) avgSum += rows ? sum / rows : 0.0;
    std::fputs(formatFooter(wrongTotal, avgSum / double(racers), o.check).c_str(), stdout);
    if (race) std::fputs(formatRegrets(contestants, c, results, rounds).c_str(), stdout);
    std::fflush(stdout);
    for (size_t who = 0; who < racers; ++who) {
      const std::string& label = contestants[who].label;
      const double avg = rows ? busBwSum[who] / rows : 0.0;
      const std::string json = contestantPath(o.jsonPath, label);
      const std::string csv = contestantPath(o.csvPath, label);
      if (!json.empty() &&
          !writeFile(json, formatJson(meta[who], o, results[who], wrongOf[who], avg), program)) {
        rc = 3;
      }
      if (!csv.empty() && !writeFile(csv, formatCsv(meta[who], results[who]), program)) rc = 3;
    }
  }
  return rc;
}

// ---- Forked ranks -------------------------------------------------------------------------

namespace {

bool writeAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool readAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

bool ForkedRank::shareFromRank0(void* data, size_t bytes) {
  bool ok = true;
  for (int fd : fds_) {
    ok = (rank_ == 0 ? writeAll(fd, static_cast<const char*>(data), bytes)
                     : readAll(fd, static_cast<char*>(data), bytes)) &&
         ok;
    close(fd);
  }
  fds_.clear();
  return ok;
}

namespace {

// Pins the calling process to the (index mod count)-th CPU of the set it may run on.
void bindToCpu(int index) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  const int count = CPU_COUNT(&allowed);
  if (count == 0) return;
  int wanted = index % count;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed) || wanted-- > 0) continue;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    sched_setaffinity(0, sizeof(one), &one);
    return;
  }
}

}  // namespace

int forkRanks(int n, bool bindCores, const std::function<int(ForkedRank&)>& body) {
  if (n < 1) return 2;
  std::vector<int> readEnds(static_cast<size_t>(n), -1), writeEnds(static_cast<size_t>(n), -1);
  for (int r = 1; r < n; ++r) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      std::perror("pipe");
      return 3;
    }
    readEnds[r] = fds[0];
    writeEnds[r] = fds[1];
  }
  // Buffered output would otherwise be written once by the parent and once per child.
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids(static_cast<size_t>(n), -1);
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      for (int q = 0; q < r; ++q) kill(pids[q], SIGKILL);
      return 3;
    }
    if (pid == 0) {
      // A rank must not outlive the launcher (Ctrl-C, a killed sweep script).
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (bindCores) bindToCpu(r);
      ForkedRank self;
      self.rank_ = r;
      self.nranks_ = n;
      for (int q = 1; q < n; ++q) {
        if (r == 0) {
          self.fds_.push_back(writeEnds[q]);
          close(readEnds[q]);
        } else if (q == r) {
          self.fds_.push_back(readEnds[q]);
          close(writeEnds[q]);
        } else {
          close(readEnds[q]);
          close(writeEnds[q]);
        }
      }
      const int rc = body(self);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(rc);
    }
    pids[r] = pid;
  }
  for (int r = 1; r < n; ++r) {
    close(readEnds[r]);
    close(writeEnds[r]);
  }
  int result = 0;
  for (int remaining = n; remaining > 0;) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    const auto it = std::find(pids.begin(), pids.end(), pid);
    if (it == pids.end()) continue;
    *it = -1;
    --remaining;
    const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    // Exit 1 is a finished run with wrong results: the other ranks finish too (rank 0 still
    // prints its footer and files), so only worse failures stop them.
    const bool finished = WIFEXITED(status) && WEXITSTATUS(status) == 1;
    if (finished && result == 0) result = 1;
    if (clean || finished || (result != 0 && result != 1)) continue;
    // The first failure: report it and stop the rest, which would wait for it forever.
    const int r = static_cast<int>(it - pids.begin());
    if (WIFSIGNALED(status)) {
      std::fprintf(stderr, "rank %d died of signal %d (%s)\n", r, WTERMSIG(status),
                   strsignal(WTERMSIG(status)));
      result = 128 + WTERMSIG(status);
    } else {
      result = WEXITSTATUS(status);
    }
    for (pid_t other : pids) {
      if (other > 0) kill(other, SIGTERM);
    }
  }
  return result;
}

}  // namespace loom::perf
