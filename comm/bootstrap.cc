#include "comm/bootstrap.h"

#include <poll.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <map>
#include <set>
#include <thread>

#include "base/fork_safe.h"
#include "base/log.h"
#include "base/params.h"

namespace loom {
namespace {

enum MessageType : uint32_t {
  kGather = 1,
  kGatherResult = 2,
  kAbort = 3,
  kLeave = 4,
  kPut = 5,        // key, value
  kGet = 6,        // key; answered by kGetResult once the key is there
  kGetResult = 7,  // value
  kJoinTimeout = 8,  // why the communicator was not made: the ranks that never joined
  kTake = 9,         // key; as kGet, and the root forgets the key once it answered
  kWaiting = 10,      // BootstrapCall: this rank's call, in which it waits for a message
  kCallDiffers = 11,  // BootstrapCall: another rank's call of that number, which differs
};


// How long past its deadline a rank that waits to hear that every rank has joined still waits
// for the root's word naming those that did not: the root's deadline for the rank ends with the
// rank's own, plus the hello's time on the way and in the root's queue, which takes a second or
// more on a loaded host.
constexpr int kJoinVerdictMs = 3000;
// How often a rank retries a root at rank 0 that is still another communicator's.
constexpr int kBusyRootRetryMs = 20;

// How long a new connection may take to send its whole hello. Hellos are read as their bytes
// arrive, beside everything else the root does, so that a stranger that connects and sends
// nothing (a port scan, a half-open connection) holds up no rank.
constexpr int kHelloMs = 5000;

Status sendMessage(int fd, uint32_t type, const std::string& payload, const Deadline& d) {
  BootstrapMessageHeader h = {type, uint32_t(payload.size())};
  LOOM_TRY(net::sendAll(fd, &h, sizeof(h), d));
  return net::sendAll(fd, payload.data(), payload.size(), d);
}

Status recvMessage(int fd, uint32_t* type, std::string* payload, const Deadline& d) {
  BootstrapMessageHeader h;
  LOOM_TRY(net::recvAll(fd, &h, sizeof(h), d));
  LOOM_TRY(checkMessageHeader(h));
  payload->resize(h.len);
  LOOM_TRY(net::recvAll(fd, payload->data(), h.len, d));
  *type = h.type;
  return Status::ok();
}

// The roots this process serves, by their id's secret, until every rank has left them: a
// rank of this process waits for that when it leaves (Bootstrap::leave). Never destroyed, as
// the detached root threads may outlive main. Each root is kept with the pid of the process
// whose thread serves it: a child forked after loomGetUniqueId inherits this record but not
// the thread, and must not wait for a root that only its parent serves.
struct RootsHere {
  std::mutex mutex;
  std::condition_variable ended;
  std::map<std::string, pid_t> serving;
  // Ranks of this process connected to each root (several when one process runs several
  // ranks), by the root's secret and the pid (a forked child's ranks are not its parent's):
  // only the last of them to leave waits for the others.
  std::map<std::pair<std::string, pid_t>, int> connectedHere;
};
RootsHere& rootsHere() {
  static auto* roots = [] {
    auto* fresh = new RootsHere;
    keepUsableAcrossFork(&fresh->mutex);
    return fresh;
  }();
  return *roots;
}

// The root's state; owned by its thread.
class Root {
 public:
  Root(int listenFd, const unsigned char secret[16]) : listenFd_(listenFd) {
    memcpy(secret_, secret, 16);
  }
  void run() {
    runPhases();
    closeGracefully();
    for (const Pending& c : pending_) close(c.fd);
    close(listenFd_);
  }

 private:
  void runPhases() {
    if (!awaitJoins()) return;
    // Phase 2: relay gathers and aborts until every rank has left.
    while (active_ > 0) {
      // A failure held back for its first cause waits until settle_ (relayAbort).
      for (int r : pollOnce(held_.empty() ? Deadline::never() : settle_, true)) serve(r);
      if (!held_.empty() && settle_.expired()) relayHeld();
    }
  }

  // Waits for something to do until `wake`: accepts a connection, reads what has come of the
  // hellos (admitting or dropping the complete ones), and returns the joined ranks that have
  // sent something (withRanks; in phase 1 their gathers wait in their sockets).
  std::vector<int> pollOnce(Deadline wake, bool withRanks) {
    std::vector<pollfd> p;
    p.push_back({listenFd_, POLLIN, 0});
    for (const Pending& c : pending_) {
      p.push_back({c.fd, POLLIN, 0});
      if (c.deadline.before(wake)) wake = c.deadline;
    }
    const size_t firstRank = p.size();
    if (withRanks)
      for (int fd : fds_) p.push_back({fd, short(fd >= 0 ? POLLIN : 0), 0});
    // Rounded up, so that a deadline less than 1 ms away is not polled for with 0 over and over.
    if (poll(p.data(), p.size(), wake.bounded() ? wake.remainingMs(INT32_MAX - 1) + 1 : -1) < 0)
      return {};
    std::vector<int> ready;
    for (size_t r = 0; withRanks && r < fds_.size(); ++r)
      if (fds_[r] >= 0 && (p[firstRank + r].revents & (POLLIN | POLLHUP | POLLERR)))
        ready.push_back(int(r));
    for (size_t i = pending_.size(); i-- > 0;) readHello(i, p[i + 1].revents);
    if (p[0].revents & POLLIN) {
      int fd = -1;
      if (net::acceptOne(listenFd_, Deadline(0), &fd).isOk())
        pending_.push_back({fd, {}, 0, Deadline(kHelloMs)});
    }
    return ready;
  }

  // Reads what has arrived of pending connection i's hello; once it is whole, admits the rank
  // or refuses it; drops the connection when it closes, fails or runs out of time first.
  void readHello(size_t i, short revents) {
    Pending& c = pending_[i];
    bool broken = false;
    if (revents != 0) {
      ssize_t n = recv(c.fd, reinterpret_cast<char*>(&c.hello) + c.got, sizeof(c.hello) - c.got,
                       MSG_DONTWAIT);
      if (n > 0)
        c.got += size_t(n);
      else
        broken = n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    const bool whole = c.got == sizeof(c.hello);
    if (!whole && !broken && !c.deadline.expired()) return;
    const Pending done = c;
    pending_.erase(pending_.begin() + ptrdiff_t(i));
    if (whole)
      admit(done.fd, done.hello);
    else
      refuse(done.fd, broken ? "closed before sending a whole hello"
                             : "sent no whole hello within 5 s");
  }

  // Drops a connection that is no rank of this communicator.
  void refuse(int fd, const char* why) {
    // A rank of the next communicator made through the same LOOM_ROOT retries every
    // kBusyRootRetryMs until this root ends: one warning per reason, the rest at INFO.
    ++dropped_;
    if (warned_.insert(why).second)
      LOOM_WARN("BOOT", "bootstrap root: dropped a connection that %s", why);
    else
      LOOM_INFO("BOOT", "bootstrap root: dropped connection %llu, which %s",
                (unsigned long long)dropped_, why);
    close(fd);
  }

  // Phase 1: every rank connects. Bounded by LOOM_TIMEOUT_MS, so that a job that never starts
  // does not leave a thread listening forever, and by each joined rank's own deadline, so that
  // the ranks that came hear which ones did not. False: the communicator cannot be made.
  bool awaitJoins() {
    joinDeadline_ = Deadline(params::getInt("LOOM_TIMEOUT_MS"));
    while (nranks_ < 0 || joined_ < nranks_) {
      if (joinDeadline_.expired()) {
        const std::string why = missingRanks();
        LOOM_WARN("BOOT", "bootstrap root: %s", why.c_str());
        broadcast(kJoinTimeout, why);
        return false;
      }
      pollOnce(joinDeadline_, false);
      if (!fatal_.empty()) {
        // A rank with a different communicator size: nobody can succeed; say why at once
        // instead of letting the others wait for their deadline.
        broadcastAbort(fatal_);
        return false;
      }
    }
    return true;
  }

  std::string missingRanks() const {
    if (nranks_ < 0) return "bootstrap: no rank joined before the deadline (LOOM_TIMEOUT_MS)";
    std::vector<int> missing;
    for (int r = 0; r < nranks_; ++r)
      if (fds_[size_t(r)] < 0) missing.push_back(r);
    return strprintf("bootstrap: rank%s %s of %d never joined before the deadline "
                     "(LOOM_TIMEOUT_MS, or the config's timeoutMs)",
                     missing.size() == 1 ? "" : "s", rankRanges(missing).c_str(), nranks_);
  }

  // Registers the rank whose whole hello came on fd, or refuses it.
  void admit(int fd, const BootstrapHello& h) {
    const BootstrapReply reply =
        judgeHello(h, secret_, nranks_, fds_, nranks_ >= 0 && joined_ >= nranks_);
    if (reply == kNotProven) {
      refuse(fd, "did not prove the secret of this unique id");
      return;
    }
    if (reply == kAccepted && nranks_ < 0) {
      nranks_ = h.nranks;
      fds_.assign(nranks_, -1);
      gathers_.assign(nranks_, std::string());
      hasGather_.assign(nranks_, false);
      waitingCalls_.assign(size_t(nranks_), BootstrapCall{});
    }
    net::sendAll(fd, &reply, 1, Deadline(kHelloMs)).ignore();
    if (reply == kWrongSize)
      fatal_ = strprintf("bootstrap: a rank joined with nranks=%d, which differs from this "
                         "communicator's %d",
                         h.nranks, nranks_);
    if (reply != kAccepted) {
      LOOM_WARN("BOOT", "bootstrap root: refused rank %d of %d (communicator has %d ranks): %s",
                h.rank, h.nranks, nranks_,
                reply == kWrongSize ? "wrong size" : reply == kBadRank ? "bad rank or size"
                                                                       : "rank already joined");
      close(fd);
      return;
    }
    fds_[h.rank] = fd;
    ++joined_;
    ++active_;
    if (h.timeoutMs >= 0 && Deadline(h.timeoutMs).before(joinDeadline_))
      joinDeadline_ = Deadline(h.timeoutMs);
  }

  void serve(int r) {
    uint32_t type = 0;
    std::string payload;
    Status st = recvMessage(fds_[r], &type, &payload, Deadline(10000));
    if (!st.isOk()) {
      drop(r);
      causeSent_ = true;
      broadcastAbort(strprintf("rank %d lost its bootstrap connection (its process died or was "
                               "killed)", r));
      if (!held_.empty()) relayHeld();
      return;
    }
    switch (type) {
      case kGather:
        gathers_[r] = std::move(payload);
        hasGather_[r] = true;
        if (++gathered_ == active_) finishGather();
        break;
      case kAbort:
        relayAbort(r, payload);
        break;
      case kLeave:
        drop(r);
        break;
      case kPut:
      case kGet:
      case kTake:
        serveStore(r, type, payload);
        break;
      case kWaiting:
        serveWait(r, payload);
        break;
      default:
        LOOM_WARN("BOOT", "bootstrap root: rank %d sent an unknown message %u", r, type);
        drop(r);
    }
  }

  // The key-value store: what survives a failed rank (a gather waits for every rank; a get
  // only for the key), so the others can agree on what comes next (loomCommShrink).
  void serveStore(int r, uint32_t type, const std::string& payload) {
    std::string key, value;
    if (!unpackKeyed(payload, &key, &value)) {
      LOOM_WARN("BOOT", "bootstrap root: rank %d sent a malformed store message", r);
      drop(r);
      return;
    }
    const bool take = type == kTake;
    if (type == kGet || take) {
      auto it = store_.find(key);
      if (it == store_.end()) {
        waiting_.push_back({r, key, take});
        return;
      }
      answer(r, it->second);
      if (take) store_.erase(it);
      return;
    }
    bool taken = false;
    for (size_t i = 0; i < waiting_.size();) {
      if (waiting_[i].key != key) {
        ++i;
        continue;
      }
      const Waiting w = waiting_[i];
      waiting_.erase(waiting_.begin() + i);
      answer(w.rank, value);
      taken |= w.take;
    }
    if (!taken) store_[key] = value;
  }

  // Keeps r's latest call with a receive that waits long; where another rank's call of the
  // same number differs, tells each of the two the other's. Ranks that made different calls
  // wait for messages no peer sends, however they wait on each other (two each on the other,
  // or a cycle of any length); two of them found in calls of the same number that differ
  // suffice to name the mismatch.
  void serveWait(int r, const std::string& payload) {
    BootstrapCall w;
    if (!unpackCall(payload, nranks_, &w) || w.rank != r) {
      LOOM_WARN("BOOT", "bootstrap root: rank %d sent a malformed wait", r);
      drop(r);
      return;
    }
    waitingCalls_[size_t(r)] = w;
    for (const BootstrapCall& theirs : waitingCalls_) {
      if (theirs.rank == r || theirs.number != w.number ||
          (theirs.call[0] == w.call[0] && theirs.call[1] == w.call[1]))
        continue;
      tell(r, kCallDiffers, std::string(reinterpret_cast<const char*>(&theirs), sizeof(theirs)));
      tell(theirs.rank, kCallDiffers, std::string(reinterpret_cast<const char*>(&w), sizeof(w)));
    }
  }

  void tell(int r, uint32_t type, const std::string& payload) {
    if (fds_[r] >= 0 && !sendMessage(fds_[r], type, payload, Deadline(10000)).isOk()) drop(r);
  }

  void answer(int r, const std::string& value) { tell(r, kGetResult, value); }

  void finishGather() {
    const std::string result = packGather(gathers_);
    // Highest rank first: rank 0, which usually runs in this root's process, gets its answer
    // last, so when it leaves (and may exit, taking the root along) every other rank's answer
    // is already in its socket.
    for (int q = nranks_ - 1; q >= 0; --q) {
      if (fds_[q] >= 0 && !sendMessage(fds_[q], kGatherResult, result, Deadline(10000)).isOk())
        drop(q);
      gathers_[q].clear();
      hasGather_[q] = false;
    }
    gathered_ = 0;
  }

  // Closes the connections still open (the root gave up before every rank joined) once each
  // rank has read what it was last told: closing a socket with unread data in it (a rank's
  // gather, which the root does not read before every rank joined) resets the connection, and
  // drops what the root sent but the kernel had not yet delivered.
  void closeGracefully() {
    for (int fd : fds_)
      if (fd >= 0) shutdown(fd, SHUT_WR);
    Deadline linger(kJoinVerdictMs);
    for (int fd : fds_) {
      if (fd < 0) continue;
      char discard[4096];
      while (net::recvAll(fd, discard, 1, linger).isOk()) {
        if (recv(fd, discard, sizeof(discard), MSG_DONTWAIT) < 0 && errno != EAGAIN) break;
      }
      close(fd);
    }
  }

  // The first cause goes out first: every rank keeps the first abort it reads. A rank's
  // failure that names a peer whose process is already gone (its connection to the root
  // closed, unread) follows that peer's death; a timeout waits for the others' (Bootstrap::
  // sendAbort).
  void relayAbort(int r, const std::string& payload) {
    if (!causeSent_) {
      const int suspect = rankNamedIn(payload, r);
      const bool connected = suspect >= 0 && suspect < nranks_ && fds_[suspect] >= 0;
      // A call's timeout (collectives/executor.cc's timeoutError) ends so.
      const bool timedOut = payload.find("(LOOM_TIMEOUT_MS)") != std::string::npos;
      if (connected && hungUp(fds_[suspect])) {
        serve(suspect);
      } else if (!held_.empty() || (connected && timedOut)) {
        if (held_.empty()) settle_ = Deadline(Bootstrap::kSilenceMs);
        held_.push_back({r, connected ? suspect : -1, payload});
        return;
      }
    }
    causeSent_ = true;
    broadcastAbort(payload, r);
  }

  static bool hungUp(int fd) {
    char c;
    const ssize_t got = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }

  // The held failures' first cause: a rank that reported nothing while its connection stays
  // open (stopped, hung, or cut off), reached from a held failure by who waited on whom. Each
  // held failure's chain is followed in the order they came; one that loops back (ranks that
  // wait on each other, which a transport stalled by the silent rank can leave behind) is
  // passed over for the next. Where no chain ends in a silent rank, the first report stands.
  void relayHeld() {
    int waiter = -1, suspect = -1;
    bool silent = false;
    for (size_t first = 0; first < held_.size() && !silent; ++first) {
      std::vector<bool> seen(size_t(nranks_), false);
      waiter = held_[first].rank;
      suspect = held_[first].suspect;
      seen[size_t(waiter)] = true;
      while (suspect >= 0 && !seen[size_t(suspect)]) {
        auto next = std::find_if(held_.begin(), held_.end(),
                                 [&](const Held& h) { return h.rank == suspect; });
        if (next == held_.end()) break;
        seen[size_t(suspect)] = true;
        waiter = suspect;
        suspect = next->suspect;
      }
      silent = suspect >= 0 && !seen[size_t(suspect)] && fds_[size_t(suspect)] >= 0;
    }
    if (!causeSent_)
      broadcastAbort(silent ? strprintf("rank %d stopped responding: rank %d waited on it until "
                                        "LOOM_TIMEOUT_MS, and it reported no timeout of its own "
                                        "within %d ms while its bootstrap connection stayed "
                                        "open (the process is stopped or hung, or its network "
                                        "is down)", suspect, waiter, Bootstrap::kSilenceMs)
                            : held_[0].payload);
    causeSent_ = true;
    for (const Held& h : held_) broadcastAbort(h.payload, h.rank);
    held_.clear();
  }

  void broadcastAbort(const std::string& reason, int except = -1) {
    broadcast(kAbort, reason, except);
  }
  void broadcast(uint32_t type, const std::string& payload, int except = -1) {
    for (int q = 0; q < int(fds_.size()); ++q)
      if (q != except && fds_[q] >= 0) sendMessage(fds_[q], type, payload, Deadline(2000)).ignore();
  }

  void drop(int r) {
    if (fds_[r] < 0) return;
    std::erase_if(waiting_, [r](const Waiting& w) { return w.rank == r; });
    close(fds_[r]);
    fds_[r] = -1;
    --active_;
    if (hasGather_[r]) --gathered_;
  }

  // A connection whose hello has not all arrived.
  struct Pending {
    int fd;
    BootstrapHello hello;
    size_t got;
    Deadline deadline;
  };

  int listenFd_;
  std::vector<Pending> pending_;
  Deadline joinDeadline_ = Deadline::never();
  std::string fatal_;  // set when the job cannot succeed (mismatched sizes)
  unsigned char secret_[16];
  uint64_t dropped_ = 0;  // connections that were no rank of this communicator
  std::set<std::string> warned_;  // the reasons for dropping one said at WARN
  int nranks_ = -1;
  int joined_ = 0;
  int active_ = 0;
  int gathered_ = 0;
  std::vector<int> fds_;
  std::vector<std::string> gathers_;
  std::vector<bool> hasGather_;
  std::map<std::string, std::string> store_;
  // Gets and takes not answered yet.
  struct Waiting {
    int rank;
    std::string key;
    bool take;
  };
  std::vector<Waiting> waiting_;
  // Each rank's latest call with a receive that waits long (serveWait; number 0: none).
  std::vector<BootstrapCall> waitingCalls_;
  // Failures held back until their first cause is known (relayAbort), for kSilenceMs from
  // the first.
  struct Held {
    int rank;
    int suspect;
    std::string payload;
  };
  std::vector<Held> held_;
  Deadline settle_ = Deadline::never();
  bool causeSent_ = false;  // a failure or a death went out: later ones are relayed as they come
};

Status packId(const net::Address& root, const unsigned char secret[16], uint32_t flags,
              loomUniqueId* id) {
  UniqueIdData data = {};
  data.magic = kUniqueIdMagic;
  if (root.len > sizeof(data.addr))
    return errorf(loomInternalError, "bootstrap address too long (%u bytes)", root.len);
  data.addrLen = root.len;
  memcpy(data.addr, &root.storage, root.len);
  memcpy(data.secret, secret, 16);
  data.flags = flags;
  memset(id, 0, sizeof(*id));
  memcpy(id->internal, &data, sizeof(data));
  return Status::ok();
}

}  // namespace

Status serveNewRoot(loomUniqueId* id) {
  net::Address addr;
  std::string ifname;
  LOOM_TRY(net::chooseInterfaceAddress(&addr, &ifname));
  unsigned char secret[16];
  if (getrandom(secret, 16, 0) != 16)
    return errorf(loomSystemError, "getrandom: %s", strerror(errno));
  return startBootstrapRoot(addr, secret, id);
}

Status rankZeroRootId(const std::string& address, loomUniqueId* id) {
  net::Address addr;
  LOOM_TRY(net::parseAddress(address, &addr));
  if (addr.port() == 0)
    return errorf(loomInvalidArgument, "\"%s\" names no port (expected host:port)",
                  address.c_str());
  // No channel shares a random secret among the ranks: it is derived from what they all see.
  std::string basis = address;
  for (const char* job : {"TORCHELASTIC_RUN_ID", "OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID"})
    if (const char* v = getenv(job)) basis += std::string("/") + v;
  // The n-th id a process makes this way belongs to the n-th communicator it makes through such
  // an address, on every rank alike: communicators made one after another through one address
  // then differ in their secret, and a rank early for the next one is refused by the root of
  // the last one, still serving its slower ranks, instead of joining it (Bootstrap::connect
  // retries).
  static std::atomic<uint64_t> made{0};
  basis += "#" + std::to_string(++made);
  unsigned char secret[16] = {};
  for (size_t i = 0; i < basis.size(); ++i) secret[i % 16] = secret[i % 16] * 31 + basis[i];
  return packId(addr, secret, kRootAtRankZero, id);
}

Status startBootstrapRoot(const net::Address& listenAt, const unsigned char secret[16],
                          loomUniqueId* id, int* failedErrno) {
  int fd = -1;
  net::Address bound;
  LOOM_TRY(net::listenOn(listenAt, &fd, &bound, failedErrno));
  if (Status st = packId(bound, secret, 0, id); !st.isOk()) {
    close(fd);
    return st;
  }
  LOOM_INFO("BOOT", "bootstrap root listening at %s", bound.toString().c_str());
  const std::string key(reinterpret_cast<const char*>(secret), 16);
  {
    std::lock_guard<std::mutex> lock(rootsHere().mutex);
    rootsHere().serving.emplace(key, getpid());
  }
  std::thread([fd, key] {
    Root(fd, reinterpret_cast<const unsigned char*>(key.data())).run();
    std::lock_guard<std::mutex> lock(rootsHere().mutex);
    rootsHere().serving.erase(key);
    rootsHere().ended.notify_all();
  }).detach();
  return Status::ok();
}

Status decodeUniqueId(const loomUniqueId& id, UniqueIdData* out, net::Address* root) {
  memcpy(out, id.internal, sizeof(*out));
  if (out->magic != kUniqueIdMagic || out->addrLen == 0 || out->addrLen > sizeof(out->addr))
    return errorf(loomInvalidArgument,
                  "the unique id is not valid (it was not made by loomGetUniqueId)");
  memset(&root->storage, 0, sizeof(root->storage));
  memcpy(&root->storage, out->addr, out->addrLen);
  root->len = out->addrLen;
  if (root->family() != AF_INET && root->family() != AF_INET6)
    return errorf(loomInvalidArgument, "the unique id is not valid (bad address family)");
  return Status::ok();
}

bool bootstrapSecretsEqual(const unsigned char* a, const unsigned char* b) {
  unsigned char diff = 0;  // constant time, so timing does not leak the secret
  for (int i = 0; i < 16; ++i) diff |= a[i] ^ b[i];
  return diff == 0;
}

BootstrapReply judgeHello(const BootstrapHello& h, const unsigned char secret[16], int nranks,
                          const std::vector<int>& rankFds, bool everyoneJoined) {
  if (h.magic != kUniqueIdMagic || !bootstrapSecretsEqual(h.secret, secret)) return kNotProven;
  if (h.nranks < 1 || h.nranks > kMaxBootstrapRanks) return kBadRank;
  if (nranks >= 0 && h.nranks != nranks) return kWrongSize;
  if (h.rank < 0 || h.rank >= h.nranks) return kBadRank;
  if (everyoneJoined || (size_t(h.rank) < rankFds.size() && rankFds[size_t(h.rank)] >= 0))
    return kDuplicateRank;
  return kAccepted;
}

Status checkMessageHeader(const BootstrapMessageHeader& h) {
  if (h.len > kMaxBootstrapMessageBytes)
    return errorf(loomRemoteError,
                  "bootstrap: a message of %u bytes (type %u) is over the limit of %u: a "
                  "corrupt or foreign connection", h.len, h.type, kMaxBootstrapMessageBytes);
  return Status::ok();
}

std::string packKeyed(const std::string& key, const std::string& value) {
  uint32_t len = uint32_t(key.size());
  return std::string(reinterpret_cast<const char*>(&len), sizeof(len)) + key + value;
}

bool unpackCall(const std::string& payload, int nranks, BootstrapCall* out) {
  if (payload.size() != sizeof(BootstrapCall)) return false;
  memcpy(out, payload.data(), sizeof(*out));
  return out->rank >= 0 && out->rank < nranks && out->number > 0;
}

bool unpackKeyed(const std::string& payload, std::string* key, std::string* value) {
  uint32_t len = 0;
  if (payload.size() < sizeof(len)) return false;
  memcpy(&len, payload.data(), sizeof(len));
  if (payload.size() - sizeof(len) < len) return false;
  *key = payload.substr(sizeof(len), len);
  *value = payload.substr(sizeof(len) + len);
  return true;
}

std::string packGather(const std::vector<std::string>& blobs) {
  std::string out;
  for (const std::string& b : blobs) {
    const uint32_t len = uint32_t(b.size());
    out.append(reinterpret_cast<const char*>(&len), sizeof(len));
    out += b;
  }
  return out;
}

Status unpackGather(const std::string& payload, size_t nranks, std::vector<std::string>* all) {
  all->clear();
  size_t pos = 0;
  for (size_t r = 0; r < nranks; ++r) {
    uint32_t len = 0;
    if (payload.size() - pos < sizeof(len))
      return errorf(loomRemoteError, "it ends before rank %zu's blob (%zu bytes)", r,
                    payload.size());
    memcpy(&len, payload.data() + pos, sizeof(len));
    pos += sizeof(len);
    if (payload.size() - pos < len)
      return errorf(loomRemoteError, "rank %zu's blob of %u bytes runs past its end", r, len);
    all->push_back(payload.substr(pos, len));
    pos += len;
  }
  if (pos != payload.size())
    return errorf(loomRemoteError, "%zu bytes follow the %zu ranks' blobs", payload.size() - pos,
                  nranks);
  return Status::ok();
}

Bootstrap::~Bootstrap() {
  if (fd_ >= 0) close(fd_);
}

Status Bootstrap::connect(const loomUniqueId& id, int rank, int nranks,
                          const Deadline& deadline) {
  UniqueIdData data;
  net::Address root;
  LOOM_TRY(decodeUniqueId(id, &data, &root));
  rank_ = rank;
  nranks_ = nranks;
  secret_.assign(reinterpret_cast<const char*>(data.secret), 16);
  // Through a root at rank 0 (LOOM_ROOT), the address may still be held by the root of the
  // communicator made through it before, until its last rank leaves it, and that root refuses
  // this one's ranks: both wait for it, until the deadline.
  const bool rootMayBeBusy = (data.flags & kRootAtRankZero) != 0;
  if (rootMayBeBusy && rank == 0) {
    loomUniqueId served;
    int failedErrno = 0;
    Status st = startBootstrapRoot(root, data.secret, &served, &failedErrno);
    while (!st.isOk() && failedErrno == EADDRINUSE && !deadline.expired()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(kBusyRootRetryMs));
      failedErrno = 0;
      st = startBootstrapRoot(root, data.secret, &served, &failedErrno);
    }
    if (!st.isOk())
      return st.withContext("bootstrap: rank 0 cannot serve the root at " + root.toString() +
                            " (LOOM_ROOT or NCCL_COMM_ID must name an address of rank 0's host)");
  }
  uint8_t reply = 255;
  for (;;) {
    Status st = net::connectTo(root, deadline, &fd_);
    if (!st.isOk())
      return st.withContext("bootstrap: cannot reach the root at " + root.toString());
    BootstrapHello h = {kUniqueIdMagic, {}, rank, nranks,
               deadline.bounded() ? deadline.remainingMs(INT32_MAX) : -1};
    memcpy(h.secret, data.secret, 16);
    LOOM_TRY(net::sendAll(fd_, &h, sizeof(h), deadline));
    if (net::recvAll(fd_, &reply, 1, deadline).isOk()) break;
    close(fd_);
    fd_ = -1;
    if (!rootMayBeBusy || deadline.expired())
      return errorf(loomInvalidArgument,
                    "bootstrap: the root at %s refused this rank: the unique id's secret does "
                    "not match (a stale or wrong unique id%s?)",
                    root.toString().c_str(),
                    rootMayBeBusy ? ", or the root of another communicator made through the "
                                    "same address that never ended"
                                  : "");
    std::this_thread::sleep_for(std::chrono::milliseconds(kBusyRootRetryMs));
  }
  switch (reply) {
    case kAccepted: {
      std::lock_guard<std::mutex> lock(rootsHere().mutex);
      ++rootsHere().connectedHere[{secret_, getpid()}];
      return Status::ok();
    }
    case kWrongSize:
      return errorf(loomInvalidArgument,
                    "bootstrap: nranks=%d differs from the other ranks' value", nranks);
    case kDuplicateRank:
      return errorf(loomInvalidArgument, "bootstrap: rank %d has already joined", rank);
    default:
      return errorf(loomInvalidArgument,
                    "bootstrap: rank %d of %d refused by the root (rank or size out of range)",
                    rank, nranks);
  }
}

Status Bootstrap::readMessage(uint32_t* type, std::string* payload, const Deadline& deadline) {
  Status st = recvMessage(fd_, type, payload, deadline);
  if (st.code() == loomRemoteError)
    return errorf(loomRemoteError,
                  "lost the connection to the bootstrap root (the process that created the "
                  "unique id died?)");
  return st;
}

bool Bootstrap::stopped(uint32_t type, const std::string& payload) {
  if (type == kAbort) {
    abortCode_ = loomRemoteError;
    abortReason_ = "aborted by a peer: " + payload;
  } else if (type == kJoinTimeout) {
    abortCode_ = loomTimeout;
    abortReason_ = payload;
  } else {
    return false;
  }
  return true;
}

Status Bootstrap::allgather(const std::string& mine, std::vector<std::string>* all,
                            const Deadline& deadline) {
  if (!abortReason_.empty()) return Status(abortCode_, abortReason_);
  Status sent;
  {
    std::lock_guard<std::mutex> g(sendMutex_);
    sent = sendMessage(fd_, kGather, mine, deadline);
  }
  if (!sent.isOk()) {
    // The root may have closed after telling us why: prefer its reason to "broken pipe".
    uint32_t type = 0;
    std::string payload;
    if (!recvMessage(fd_, &type, &payload, Deadline(1000)).isOk() || !stopped(type, payload)) {
      abortCode_ = loomRemoteError;
      abortReason_ = "lost the connection to the bootstrap root (the process that created the "
                     "unique id died?)";
    }
    return Status(abortCode_, abortReason_);
  }
  for (;;) {
    uint32_t type = 0;
    std::string payload;
    // Until every rank has joined, the root's word on which did not beats "timed out"; it
    // comes when this rank's deadline passes.
    LOOM_TRY(readMessage(&type, &payload, joined_ ? deadline : deadline.extended(kJoinVerdictMs)));
    if (stopped(type, payload)) return Status(abortCode_, abortReason_);
    if (notedCallDiffers(type, payload)) continue;
    if (type != kGatherResult)
      return errorf(loomInternalError, "bootstrap: unexpected message %u", type);
    if (Status st = unpackGather(payload, size_t(nranks_), all); !st.isOk())
      return errorf(loomRemoteError, "bootstrap: the root's allgather result is malformed: %s",
                    st.message().c_str());
    joined_ = true;
    return Status::ok();
  }
}

Status Bootstrap::put(const std::string& key, const std::string& value,
                      const Deadline& deadline) {
  std::lock_guard<std::mutex> g(sendMutex_);
  return sendMessage(fd_, kPut, packKeyed(key, value), deadline);
}

Status Bootstrap::get(const std::string& key, std::string* value, const Deadline& deadline) {
  return fetchKey(kGet, key, value, deadline);
}

Status Bootstrap::take(const std::string& key, std::string* value, const Deadline& deadline) {
  return fetchKey(kTake, key, value, deadline);
}

Status Bootstrap::fetchKey(uint32_t request, const std::string& key, std::string* value,
                           const Deadline& deadline) {
  {
    std::lock_guard<std::mutex> g(sendMutex_);
    LOOM_TRY(sendMessage(fd_, request, packKeyed(key, std::string()), deadline));
  }
  for (;;) {
    uint32_t type = 0;
    Status st = readMessage(&type, value, deadline);
    if (st.code() == loomTimeout)
      return errorf(loomTimeout,
                    "bootstrap: nobody published \"%s\" before the deadline (did every rank "
                    "pass the same arguments?)",
                    key.c_str());
    LOOM_TRY(st);
    // An abort relayed earlier (a rank died) is what the caller is recovering from.
    if (type == kAbort) {
      if (abortReason_.empty()) abortReason_ = "aborted by a peer: " + *value;
      continue;
    }
    if (notedCallDiffers(type, *value)) continue;
    if (type != kGetResult)
      return errorf(loomInternalError, "bootstrap: unexpected message %u", type);
    return Status::ok();
  }
}

int rankNamedIn(const std::string& text, int except) {
  for (size_t at = text.find("rank "); at != std::string::npos; at = text.find("rank ", at + 1)) {
    const char* digits = text.c_str() + at + 5;
    if (*digits < '0' || *digits > '9') continue;
    const int r = atoi(digits);
    if (r != except) return r;
  }
  return -1;
}

Status Bootstrap::pollAbort(int waitMs) {
  for (;;) {
    if (!abortReason_.empty()) return Status(abortCode_, abortReason_);
    if (fd_ < 0) return Status::ok();
    pollfd p = {fd_, POLLIN, 0};
    if (poll(&p, 1, waitMs) <= 0) return Status::ok();
    uint32_t type = 0;
    std::string payload;
    Status st = readMessage(&type, &payload, Deadline(5000));
    if (!st.isOk()) {
      abortCode_ = st.code();
      abortReason_ = st.message();
      return st;
    }
    if (stopped(type, payload)) return Status(abortCode_, abortReason_);
    if (!notedCallDiffers(type, payload))
      return errorf(loomInternalError, "bootstrap: unexpected message %u outside an exchange",
                    type);
    waitMs = 0;  // only what else has arrived
  }
}

bool Bootstrap::notedCallDiffers(uint32_t type, const std::string& payload) {
  if (type != kCallDiffers) return false;
  BootstrapCall c;
  if (!unpackCall(payload, nranks_, &c)) return true;  // the root's own: never malformed
  std::lock_guard<std::mutex> g(differsMutex_);
  differs_ = c;
  return true;
}

void Bootstrap::reportCall(uint64_t number, const uint64_t call[2]) {
  const BootstrapCall c = {rank_, 0, number, {call[0], call[1]}};
  std::lock_guard<std::mutex> g(sendMutex_);
  if (fd_ >= 0)
    sendMessage(fd_, kWaiting, std::string(reinterpret_cast<const char*>(&c), sizeof(c)),
                Deadline(1000))
        .ignore();
}

bool Bootstrap::callDiffers(uint64_t number, int* rank, uint64_t call[2]) const {
  std::lock_guard<std::mutex> g(differsMutex_);
  if (differs_.number != number) return false;
  *rank = differs_.rank;
  call[0] = differs_.call[0];
  call[1] = differs_.call[1];
  return true;
}

void Bootstrap::sendAbort(const std::string& reason) {
  std::lock_guard<std::mutex> g(sendMutex_);
  const std::string self = strprintf("rank %d: ", rank_);
  if (fd_ >= 0)
    sendMessage(fd_, kAbort, reason.starts_with(self) ? reason : self + reason, Deadline(1000))
        .ignore();
}

void Bootstrap::leave(int64_t timeoutMs) {
  if (fd_ < 0) return;
  {
    std::lock_guard<std::mutex> g(sendMutex_);
    sendMessage(fd_, kLeave, std::string(), Deadline(1000)).ignore();
  }
  close(fd_);
  fd_ = -1;
  // Where the root runs in this process, the process must not exit (taking the root along)
  // while other ranks still work: each would see the root lost and fail. One rank can finish
  // an alltoall while the others still exchange (8 ranks over TCP did so in a test). So it waits
  // until every rank has left or died, or timeoutMs.
  RootsHere& roots = rootsHere();
  std::unique_lock<std::mutex> lock(roots.mutex);
  auto here = roots.connectedHere.find({secret_, getpid()});
  if (here != roots.connectedHere.end() && --here->second > 0) return;  // the last one waits
  if (here != roots.connectedHere.end()) roots.connectedHere.erase(here);
  const pid_t self = getpid();
  const auto gone = [&] {
    auto it = roots.serving.find(secret_);
    return it == roots.serving.end() || it->second != self;
  };
  if (timeoutMs < 0)
    roots.ended.wait(lock, gone);
  else if (!roots.ended.wait_for(lock, std::chrono::milliseconds(timeoutMs), gone))
    LOOM_WARN("BOOT", "rank %d: left while some ranks of the communicator still had not after "
                      "the communicator's timeout; the bootstrap root in this process ends with it",
              rank_);
}

}  // namespace loom
