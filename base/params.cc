#include "base/params.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/fork_safe.h"
#include "base/nccl_env.h"

namespace loom::params {
namespace {

// The registry. Keep it sorted by subsystem; every tunable of loom is here and nowhere else.
// An entry's NCCL variable is read where its LOOM_* one is unset (docs/NCCL_ENV.md).
const Entry kEntries[] = {
    // Communicator and waiting.
    {"LOOM_TIMEOUT_MS", Type::Int, "300000",
     "Deadline of every blocking wait, in milliseconds; -1 waits forever."},
    {"LOOM_SPIN_COUNT", Type::Int, "-1",
     "Polls of an idle wait before it starts yielding the CPU; -1: 2000, or 0 when this machine "
     "(ranks in other network namespaces or containers of the same kernel included) has more "
     "ranks than the cores they may run on (spinning would starve the peers)."},
    {"LOOM_BIND", Type::String, "auto",
     "auto: where this machine has more ranks than the cores they may run on and none of them "
     "is bound (they all may run on the same CPUs), each rank binds the thread that creates its "
     "communicator to one of those CPUs, the ranks spread evenly over them, until the "
     "communicator is destroyed (left alone, the scheduler may crowd three ranks on one core "
     "and one on another); threads that thread starts meanwhile inherit the binding. none: "
     "never bind."},
    {"LOOM_CHECK", Type::Bool, "0",
     "1: before every call the ranks exchange what each of them calls (collective, count, "
     "type, op, root; an alltoallv's counts; the bytes of each send and receive, with the peers "
     "concerned) through the bootstrap and compare; where they differ every rank's call "
     "returns loomInvalidUsage naming the ranks and what differed, and the communicator fails "
     "(docs/RELIABILITY.md). Costs each call a round trip through the bootstrap root. Set it "
     "alike on every rank."},
    {"LOOM_FLIGHT_RECORDER", Type::Int, "2000",
     "Calls each communicator keeps in its flight recorder (collective, count, type, op, "
     "algorithm, state, times), written as JSON by LOOM_FLIGHT_RECORDER_DUMP's events and by "
     "loomCommDumpTrace; tools/loom-trace merges the ranks' files. 0: record nothing. Each "
     "entry takes under 100 bytes."},
    {"LOOM_FLIGHT_RECORDER_DUMP", Type::String, "error,abort,fatal",
     "When a communicator writes its flight recorder by itself, a comma list: error (its first "
     "failed call: a timeout, a dead peer, a mismatch), abort (loomCommAbort), fatal (the "
     "process dies of SIGSEGV, SIGBUS, SIGFPE, SIGILL or SIGABRT; the handler chains to the one "
     "it replaced), usr1 (SIGUSR1 dumps every live communicator and the process goes on), or "
     "none."},
    {"LOOM_FLIGHT_RECORDER_DIR", Type::String, "",
     "Where flight recorder files go (loom-trace-<communicator>-rank<r>.json); empty: $TMPDIR, "
     "else /tmp."},
    {"LOOM_YIELD_USEC", Type::Int, "2000",
     "Microseconds an idle wait yields the CPU (sched_yield) before it sleeps (futex or poll)."},
    {"LOOM_DEBUG", Type::String, "WARN", "Log level: NONE, WARN, INFO or TRACE.", "NCCL_DEBUG",
     ncclenv::debugLevel},
    {"LOOM_DEBUG_SUBSYS", Type::String, "ALL",
     "Comma list of subsystems to log at INFO and TRACE (INIT, BOOT, SHM, TCP, COLL, TUNE, API, "
     "ENV) or ALL; a leading ^ logs all but those. Warnings always show.",
     "NCCL_DEBUG_SUBSYS", ncclenv::debugSubsystems},
    {"LOOM_DEBUG_FILE", Type::String, "",
     "Write logs to this file instead of stderr; %h is the host, %p the pid, %% a %.",
     "NCCL_DEBUG_FILE"},
    // Bootstrap and sockets.
    {"LOOM_SOCKET_IFNAME", Type::String, "",
     "Network interfaces to use (prefix match; ^ excludes, = exact), like NCCL_SOCKET_IFNAME. "
     "Empty: the first non-loopback interface that is up, else loopback.",
     "NCCL_SOCKET_IFNAME"},
    {"LOOM_SOCKET_FAMILY", Type::String, "",
     "Restrict sockets to AF_INET or AF_INET6; empty takes either.", "NCCL_SOCKET_FAMILY"},
    {"LOOM_RANK", Type::Int, "-1", "This process's rank, for loomCommInitFromEnv."},
    {"LOOM_WORLD_SIZE", Type::Int, "-1", "The number of ranks, for loomCommInitFromEnv."},
    {"LOOM_ROOT", Type::String, "",
     "host:port where rank 0 serves the bootstrap: for loomCommInitFromEnv, and where set, "
     "loomGetUniqueId starts no root but writes an id naming this address, the same on every "
     "rank (each may make it itself), and rank 0 serves the root there when it initialises.",
     "NCCL_COMM_ID"},
    // Device memory.
    {"LOOM_DEVICE", Type::String, "auto",
     "Where device buffers come from: auto (CUDA where the process has loaded a CUDA runtime, "
     "else host memory only), cuda, emulated (a CPU stand-in whose memory host code cannot "
     "read and whose streams are threads: for tests), or none (host memory only)."},
    // Transports.
    {"LOOM_TRANSPORT", Type::String, "auto",
     "auto (shm within a host; across hosts, where loom was built with UCX, ucx where every "
     "host has an RDMA device, else tcp, unless the network link's measured or cached figures "
     "make the other at least 20% cheaper), shm, tcp (TCP everywhere) or ucx (UCX everywhere: UCX "
     "picks shared memory, CMA, verbs or TCP itself; UCX_TLS narrows its choice).",
     "NCCL_SHM_DISABLE", ncclenv::shmDisable},
    {"LOOM_SHM_SLOT_BYTES", Type::Bytes, "256K",
     "Size of one slot of a shared-memory ring."},
    {"LOOM_SHM_SLOTS", Type::Int, "8",
     "Slots per direction of a shared-memory connection (memory per pair and lane: "
     "2 x slots x slot bytes)."},
    {"LOOM_SHM_CMA_THRESHOLD", Type::Bytes, "16K",
     "Shared-memory messages of at least this size move by a single copy (the receiver's "
     "process_vm_readv) instead of through the slot ring, once all of their data is there (a "
     "ring forwards a chunk when it is complete); smaller ones go through the ring as they are "
     "produced. 0 disables the single-copy path."},
    {"LOOM_SHM_DIRECT_BYTES", Type::Bytes, "16M",
     "Shared-memory arena of the direct algorithms, one per communicator and host, mapped at "
     "its first call. A call uses half, as 2 x ranks slots; larger messages go through the "
     "slots in chunks, two barriers each, so a larger arena means fewer barriers. The peer "
     "algorithms use only its barriers and where each rank's buffers are. 0 disables both."},
    {"LOOM_UCX_CHUNK_BYTES", Type::Bytes, "1M",
     "The UCX transport cuts messages in tagged messages of this size (a pair uses the smaller "
     "of its two settings); UCX sends each above its rendezvous threshold (UCX_RNDV_THRESH) "
     "zero-copy."},
    {"LOOM_UCX_PEER_ERRORS", Type::Bool, "1",
     "1: UCX endpoints use UCX's peer error handling, so a rank that dies is an error on the "
     "others (within a host only where UCX_TLS lets UCX read peers by CMA, whose failure UCX "
     "otherwise turns into an abort; over tcp loom's own watch of the peer suffices). 0: endpoints to ranks of this host go without it, which lets UCX move large "
     "messages by CMA (zero-copy; UCX 1.13 offers no CMA under peer error handling), but UCX "
     "aborts a rank whose transfer with a rank that died fails."},
    {"LOOM_TCP_SOCKETS", Type::Int, "2", "TCP sockets per peer and lane."},
    {"LOOM_TCP_CHUNK_BYTES", Type::Bytes, "128K",
     "Messages are striped over a peer's sockets in chunks of this size."},
    {"LOOM_TCP_PACING", Type::Bytes, "-1",
     "TCP pacing by the kernel. -1: every socket to a peer at the slowest network link on the "
     "way there, from the topology (measured at init, or LOOM_TOPO_FILE's), so that no flow "
     "bursts past the line rate into a short queue; 0: unpaced; a rate: the most bytes per "
     "second one connection (a peer and lane) sends, shared by its sockets. Sends of up to "
     "32 KiB at once (of messages of up to 32 KiB) go unpaced either way. Where switch queues "
     "are very short, the host's network rate divided by its ranks keeps even concurrent flows "
     "from overflowing them (README.md, the incast measurements)."},
    // Collectives.
    {"LOOM_ALGO", Type::String, "",
     "Force algorithms per collective, e.g. allreduce=ring,allgather=ring.", "NCCL_ALGO",
     ncclenv::algorithms},
    {"LOOM_LANES", Type::Int, "0",
     "Lanes (concurrent connections per peer) a plan may use; 0 lets loom choose."},
    {"LOOM_TORUS_DIMS", Type::String, "",
     "XxY shape of the 2D-torus allreduce (X*Y = ranks); empty derives it from the hosts."},
    {"LOOM_ALLTOALL_FANIN", Type::Int, "0",
     "Incast-aware alltoall: the most ranks that send to one receiver at the same time; 0 "
     "lets the tuner choose (1 when no cost model decides)."},
    {"LOOM_ALLTOALL_LEAD", Type::Int, "-1",
     "Incast-aware alltoall: bytes before the end of a sender's message at which its receiver "
     "lets the next sender start, so that the link does not idle for the round trip between; "
     "-1: the receiving rank's share of a 1 MiB link queue (1 MiB / (2 x the most ranks a host "
     "has)), or what the communicator's model says one round trip holds where that is more; "
     "for a network whose links queue Q bytes, set Q / (2 x ranks per host); 0: only once the "
     "message has arrived. Alltoallv has none (a sender cannot know where its message falls)."},
    {"LOOM_TUNE", Type::String, "",
     "Tuning rules that override the cost model (docs/TUNING.md), ';' or newline separated, "
     "e.g. \"allreduce size=0-64K -> rd; alltoall -> incast k=2\"; @FILE reads them from FILE."},
    {"LOOM_TUNER", Type::String, "model",
     "How loom picks algorithms without a matching LOOM_TUNE rule: model (simulate the "
     "candidates on the communicator's topology; the built-in table when there is none) or "
     "table (the built-in table only)."},
    {"LOOM_SIM_FAST", Type::Bool, "1",
     "1: the model simulates a call whose hosts and plans are alike with the simulator's fast "
     "path, one host's ranks for all (docs/SIMULATOR.md); 0: every rank, as the full "
     "simulation does."},
    {"LOOM_AUTOTUNE", Type::Bool, "0",
     "1: measure the best candidates of each size bucket on the communicator at its first call "
     "and cache the winners per topology signature in LOOM_CACHE_DIR (docs/TUNING.md, "
     "\"Autotune\"); later communicators read them. Set it alike on every rank."},
    {"LOOM_AUTOTUNE_CANDIDATES", Type::Int, "3",
     "Autotune: how many of the cost model's fastest algorithms to measure per size bucket, "
     "each at its best variant (more, up to twice as many less one, where the model puts them "
     "within 25% of its fastest), with up to one fewer other variants of the fastest (without "
     "a model: every algorithm that accepts the call)."},
    {"LOOM_AUTOTUNE_MAX_BYTES", Type::Bytes, "16M",
     "Autotune measures calls up to this size (nccl-tests bytes; its scratch buffers are the "
     "call's size); larger ones keep the cost model's choice."},
    {"LOOM_AUTOTUNE_RUNS", Type::Int, "3",
     "Autotune: timed rounds of each candidate (at least; small calls get more, up to 64, to "
     "fill about 5 ms), after two warm-up runs; the candidates take turns of up to 16 calls "
     "(0.25 s of rounds at most), each timed by its median round."},
    {"LOOM_REDUCE_ISA", Type::String, "auto",
     "Reduction kernel instruction set: auto, avx512, avx2 or generic."},
    // Topology (docs/TOPOLOGY.md).
    {"LOOM_TOPO_MEASURE", Type::Int, "1",
     "Link and memory measurement at init: 0 never (cached figures, else defaults), 1 when "
     "this host's cache has no figures for a link kind the communicator uses or for its "
     "memory, 2 always."},
    {"LOOM_TOPO_MEASURE_MS", Type::Int, "4",
     "Milliseconds one pair of ranks spends measuring one link kind (latency and bandwidth), "
     "besides connecting, and a host's first rank its memory; at least a few samples are "
     "always taken."},
    {"LOOM_TOPO_FILE", Type::String, "",
     "Load the communicator's topology from this JSON model instead of detecting it (its "
     "ranks must match the communicator)."},
    {"LOOM_TOPO_DUMP", Type::String, "",
     "Rank 0 writes the communicator's topology to this JSON file after init."},
    {"LOOM_TOPO_MODEL", Type::String, "dgx-rail-16",
     "The corpus model (topology/models) whose hosts and fabric the NCCL tuner plugin "
     "(libnccl-tuner-loom.so) prices NCCL's algorithms on, at NCCL's rank and node counts, "
     "where LOOM_TOPO_FILE is not set (docs/NCCL_PLUGINS.md)."},
    {"LOOM_CACHE_DIR", Type::String, "",
     "Directory of loom's per-host caches (topology probe and link figures, LOOM_AUTOTUNE's "
     "measurements); empty: $XDG_CACHE_HOME/loom, else ~/.cache/loom."},
};

struct Cache {
  std::mutex mutex;
  bool loaded = false;
  uint64_t generation = 0;
  std::vector<Value> values;
};

// LOOM_X if set, else NCCL_X if set and not empty (in loom's syntax), else the default.
Value readValue(const Entry& e) {
  if (const char* env = getenv(e.name)) return {&e, env, e.name, "", "", ""};
  const char* nccl = e.ncclName != nullptr ? getenv(e.ncclName) : nullptr;
  if (nccl == nullptr || *nccl == '\0') return {&e, e.defaultValue, "default", "", "", ""};
  Translation t = e.fromNccl != nullptr ? e.fromNccl(nccl) : Translation{nccl, "", ""};
  if (!t.error.empty()) return {&e, e.defaultValue, "default", nccl, "", t.error};
  return {&e, t.text, e.ncclName, nccl, t.warning, ""};
}

Cache& cache() {
  // Never destroyed: detached bootstrap root threads may still read parameters while the
  // process runs its exit-time destructors.
  static Cache& c = *[] {
    auto* fresh = new Cache;
    keepUsableAcrossFork(&fresh->mutex);
    return fresh;
  }();
  std::lock_guard<std::mutex> g(c.mutex);
  if (!c.loaded) {
    c.values.clear();
    for (const Entry& e : kEntries) c.values.push_back(readValue(e));
    ++c.generation;
    c.loaded = true;
  }
  return c;
}

const Value& find(const char* name) {
  for (const Value& v : cache().values)
    if (strcmp(v.entry->name, name) == 0) return v;
  fprintf(stderr, "loom: internal error: parameter %s is not in the registry\n", name);
  abort();
}

// Parses "123", "-1", "64K", "8M", "1G". On bad text, or a value out of int64_t's range, warns
// and returns the default.
int64_t parseInt(const Value& v, bool bytes) {
  auto parse = [bytes](const std::string& text, int64_t* out) {
    errno = 0;
    char* end = nullptr;
    long long n = strtoll(text.c_str(), &end, 0);
    if (errno != 0 || end == text.c_str()) return false;
    int64_t mult = 1;
    if (bytes && *end != '\0') {
      switch (*end) {
        case 'k': case 'K': mult = 1ll << 10; break;
        case 'm': case 'M': mult = 1ll << 20; break;
        case 'g': case 'G': mult = 1ll << 30; break;
        default: return false;
      }
      ++end;
      if (*end == 'i' || *end == 'B') ++end;
      if (*end == 'B') ++end;
    }
    if (*end != '\0') return false;
    // "9000000000G" is as invalid as "12Q": out of range, not wrapped round.
    return !__builtin_mul_overflow(int64_t(n), mult, out);
  };
  int64_t out = 0;
  if (parse(v.text, &out)) return out;
  fprintf(stderr, "loom: WARN %s=\"%s\" is not a valid %s; using the default %s\n",
          v.entry->name, v.text.c_str(), bytes ? "byte size" : "integer",
          v.entry->defaultValue);
  parse(v.entry->defaultValue, &out);
  return out;
}

}  // namespace

int64_t getInt(const char* name) {
  const Value& v = find(name);
  return parseInt(v, v.entry->type == Type::Bytes);
}

bool getBool(const char* name) {
  const std::string& t = find(name).text;
  return t == "1" || t == "true" || t == "yes" || t == "on" || t == "TRUE" || t == "ON";
}

std::string getString(const char* name) { return find(name).text; }

Value get(const char* name) { return find(name); }

std::vector<Value> all() { return cache().values; }

Status checkNccl() {
  for (const Value& v : cache().values)
    if (!v.error.empty())
      return errorf(loomInvalidArgument, "%s=\"%s\": %s", v.entry->ncclName, v.ncclText.c_str(),
                    v.error.c_str());
  return Status::ok();
}

uint64_t generation() { return cache().generation; }

void reloadFromEnvironment() {
  Cache& c = cache();
  std::lock_guard<std::mutex> g(c.mutex);
  c.loaded = false;
}

}  // namespace loom::params
