#include "perf/options.h"

#include <getopt.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "collectives/plan.h"

namespace loom::perf {

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
constexpr int kOptApi = 1010;

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
    case kOptApi:
      return "-api";
    default:
      return std::string(1, static_cast<char>(ch));
  }
}

}  // namespace

std::string usage(const char* program) {
  std::string u = "usage: ";
  u += program;
  u += " COLLECTIVE [options]\n"
       "  COLLECTIVE: all_reduce all_gather reduce_scatter alltoall broadcast reduce gather\n"
       "              scatter sendrecv\n"
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
       "  -r, --root N               root of broadcast, reduce, gather and scatter (default 0)\n"
       "  -N, --nranks N             fork N local ranks (0: ranks come from the launcher)\n"
       "  -A, --algo NAME            the backend's algorithm\n"
       "      --bind core|none       pin forked rank r to the r-th CPU (default none)\n"
       "      --mem plain|shared|device\n"
       "                             buffers from aligned_alloc, from the library's\n"
       "                             shareable allocator (loom: loomMemAlloc; default plain),\n"
       "                             or device memory (loomDeviceMalloc: LOOM_DEVICE), the\n"
       "                             calls enqueued on a stream (docs/DEVICE.md)\n"
       "      --bytes_per_size SIZE  fewer iterations for sizes where iters * size would\n"
       "                             pass SIZE, so long sweeps stay short (default 512M; 0: off)\n"
       "  -a, --average 0|1|2|3      a row's time: rank 0's, the average, min or max over\n"
       "                             ranks (default 1, as nccl-tests)\n"
       "  -z, --blocking 0|1         nccl-tests' blocking mode; every call of a host library\n"
       "                             returns when done, so 0 and 1 measure the same\n"
       "      --json FILE            write every row and the run's metadata as JSON\n"
       "      --csv FILE             ... and as CSV\n"
       "      --api loom|nccl        loom-perf: call loom's own C API (default), or NCCL's API\n"
       "                             through loom's libnccl.so.2 (LOOM_NCCL_LIBRARY, else the\n"
       "                             one built with loom-perf, else libnccl.so.2 on the\n"
       "                             loader's path); needs -N\n"
       "      --compare mpi,gloo,nccl,shm,tcp,ucx,ucx-tcp,ucx-sm\n"
       "                             loom-perf: run the same sweep with the peers, side by side;\n"
       "                             nccl: loom through its libnccl.so.2 (--api nccl);\n"
       "                             shm, tcp, ucx: loom over that transport (LOOM_TRANSPORT),\n"
       "                             ucx-tcp, ucx-sm: over UCX limited to that (UCX_TLS);\n"
       "                             --json FILE: every library's runs in one document\n"
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

namespace {

const option kLong[] = {
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
    {"api", required_argument, nullptr, kOptApi},
    {"compare", required_argument, nullptr, kOptCompare},
    {"repeats", required_argument, nullptr, 'R'},
    {"race", required_argument, nullptr, kOptRace},
    {"sim", no_argument, nullptr, kOptSim},
    {"topo", required_argument, nullptr, kOptTopo},
    {"inject_error", no_argument, nullptr, kOptInjectError},
    {"help", no_argument, nullptr, 'h'},
    {nullptr, 0, nullptr, 0},
};
constexpr const char* kShort = "b:e:i:f:n:w:c:o:d:r:N:A:a:z:R:h";

// Sizes (K/M/G suffixes) and counts within their ranges; false on a bad value.
bool applyNumber(int ch, const char* arg, Options* o, bool* sawStepBytes) {
  bool ok = true;
  switch (ch) {
    case 'b':
    case 'e':
    case 'i':
    case kOptBytesPerSize: {
      std::optional<size_t> v = parseSize(arg);
      ok = v.has_value();
      if (!ok) break;
      if (ch == 'b') o->minBytes = *v;
      if (ch == 'e') o->maxBytes = *v;
      if (ch == 'i') o->stepBytes = *v, *sawStepBytes = true;
      if (ch == kOptBytesPerSize) o->bytesPerSize = *v;
      break;
    }
    case 'f':
      ok = parseInt(arg, 1, 1 << 20, &o->stepFactor);
      break;
    case 'n':
      ok = parseInt(arg, 1, INT_MAX, &o->iters);
      break;
    case 'w':
      ok = parseInt(arg, 0, INT_MAX, &o->warmup);
      break;
    case 'r':
      ok = parseInt(arg, 0, INT_MAX, &o->root);
      break;
    case 'N':
      ok = parseInt(arg, 0, 4096, &o->nranks);
      break;
    case 'c': {
      int v = 0;
      ok = parseInt(arg, 0, 1, &v);
      o->check = v != 0;
      break;
    }
    case 'a': {
      int v = 0;
      ok = parseInt(arg, 0, 3, &v);
      o->average = static_cast<Aggregate>(v);
      break;
    }
    case 'z':
      ok = parseInt(arg, 0, 1, &o->blocking);
      break;
    case 'R':
      ok = parseInt(arg, 1, 1000, &o->repeats);
      break;
  }
  return ok;
}

// Lists (--compare, --race) and named choices; false on a bad value.
bool applyChoice(int ch, const char* arg, Options* o) {
  bool ok = true;
  switch (ch) {
    case kOptCompare:
      o->compare = splitList(arg);
      for (const std::string& name : o->compare)
        ok = ok && (name == "mpi" || name == "gloo" || name == "nccl" ||
                    !loomTransportSetting(name).empty());
      break;
    case kOptApi:
      ok = std::strcmp(arg, "loom") == 0 || std::strcmp(arg, "nccl") == 0;
      o->api = std::strcmp(arg, "nccl") == 0 ? Api::kNccl : Api::kLoom;
      break;
    case kOptRace: {
      o->race = splitList(arg);
      for (size_t i = 0; i < o->race.size(); ++i) {
        ok = ok && !o->race[i].empty() &&
             std::find(o->race.begin(), o->race.begin() + long(i), o->race[i]) ==
                 o->race.begin() + long(i);
      }
      ok = ok && o->race.size() >= 2;
      break;
    }
    case 'o': {
      o->allOps = std::strcmp(arg, "all") == 0;
      if (o->allOps) break;
      std::optional<loomRedOp_t> v = parseOp(arg);
      ok = v.has_value();
      if (ok) o->op = *v;
      break;
    }
    case 'd': {
      o->allDtypes = std::strcmp(arg, "all") == 0;
      if (o->allDtypes) break;
      std::optional<loomDataType_t> v = parseDtype(arg);
      ok = v.has_value();
      if (ok) o->dtype = *v;
      break;
    }
    case kOptBind:
      ok = std::strcmp(arg, "core") == 0 || std::strcmp(arg, "none") == 0;
      o->bindCores = std::strcmp(arg, "core") == 0;
      break;
    case kOptMem:
      ok = std::strcmp(arg, "shared") == 0 || std::strcmp(arg, "plain") == 0 ||
           std::strcmp(arg, "device") == 0;
      o->sharedBuffers = std::strcmp(arg, "shared") == 0;
      o->deviceBuffers = std::strcmp(arg, "device") == 0;
      break;
  }
  return ok;
}

// One option of kLong / kShort (not -h); false when its value is bad.
bool applyOption(int ch, const char* arg, Options* o, bool* sawStepBytes) {
  switch (ch) {
    case kOptJson:
      o->jsonPath = arg;
      break;
    case kOptCsv:
      o->csvPath = arg;
      break;
    case kOptSim:
      o->sim = true;
      break;
    case kOptTopo:
      o->topoFile = arg;
      break;
    case kOptInjectError:
      o->injectError = true;
      break;
    case 'A':
      o->algorithm = arg;
      break;
    case kOptCompare:
    case kOptApi:
    case kOptRace:
    case 'o':
    case 'd':
    case kOptBind:
    case kOptMem:
      return applyChoice(ch, arg, o);
    default:
      return applyNumber(ch, arg, o, sawStepBytes);
  }
  return true;
}

// What no single option shows: options that contradict each other; "" when there are none.
std::string contradiction(const Options& o, bool sawStepBytes) {
  if (!o.race.empty() && (!o.compare.empty() || !o.algorithm.empty()))
    return "--race names the algorithms itself: not with -A or --compare";
  if (o.api == Api::kNccl) {
    // NCCL's API has no communicator split with an algorithm, no rendezvous from the
    // environment and no loom cost model: those stay with loom's own API.
    if (!o.race.empty()) return "--race splits loom communicators: not with --api nccl";
    if (o.sim) return "--sim predicts loom's own calls: not with --api nccl";
    if (!o.compare.empty())
      return "--compare runs loom's own API first: add nccl to its list instead of --api nccl";
    if (o.nranks == 0)
      return "--api nccl needs -N RANKS: its ranks share ncclGetUniqueId's id, which loom-perf "
             "hands to the ranks it forks";
  }
  if (o.minBytes > o.maxBytes) return "minbytes is larger than maxbytes";
  if (o.stepFactor <= 1 && o.stepBytes == 0 && o.minBytes != o.maxBytes)
    return sawStepBytes ? "stepbytes 0 would never reach maxbytes" : "no step";
  return {};
}

}  // namespace

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
  optind = 0;
  opterr = 0;
  const int n = static_cast<int>(args.size()) - 1;
  int ch;
  bool sawStepBytes = false;
  while ((ch = getopt_long(n, args.data(), kShort, kLong, nullptr)) != -1) {
    if (ch == 'h') return false;
    if (ch == '?' || ch == ':') {
      *error = "unknown option or missing value near '" +
               std::string(optind > 0 && optind <= n ? args[optind - 1] : "?") + "'";
      return false;
    }
    if (!applyOption(ch, optarg, &o, &sawStepBytes)) {
      *error = std::string("bad value '") + optarg + "' for -" + longName(ch);
      return false;
    }
  }
  if (optind < n) {
    *error = std::string("unexpected argument '") + args[optind] + "'";
    return false;
  }
  *error = contradiction(o, sawStepBytes);
  if (!error->empty()) return false;
  *options = o;
  return true;
}

std::vector<std::string> loomTransportSetting(const std::string& name) {
  if (name == "shm" || name == "tcp" || name == "ucx") return {"LOOM_TRANSPORT=" + name};
  if (name == "ucx-tcp" || name == "ucx-sm") return {"LOOM_TRANSPORT=ucx", "UCX_TLS=" + name.substr(4)};
  return {};
}

std::string algorithmSetting(const Options& o) {
  if (o.algorithm.empty() || o.algorithm.find('=') != std::string::npos) return o.algorithm;
  return std::string(collectives::collectiveName(o.collective)) + "=" + o.algorithm;
}

std::string forcedAlgorithm(const std::string& setting, Collective c) {
  const std::string list = "," + setting + ",";
  const std::string key = std::string(",") + collectives::collectiveName(c) + "=";
  const size_t at = list.find(key);
  if (at == std::string::npos) return "auto";
  const size_t from = at + key.size();
  return list.substr(from, list.find(',', from) - from);
}

std::vector<std::string> sweepArgs(const Options& o) {
  std::vector<std::string> a = {ncclTestsName(o.collective)};
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
  add("--mem", o.deviceBuffers ? "device" : o.sharedBuffers ? "shared" : "plain");
  return a;
}

}  // namespace loom::perf
