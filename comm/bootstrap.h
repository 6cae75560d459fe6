// Bootstrap: how the ranks of a new communicator find each other.
//
// The process that creates a unique id serves its rendezvous: a "root" thread that listens
// at the address written into the id. Every rank connects, proves the id's 128-bit secret,
// and from then on the root relays small collective exchanges (allgather of blobs, used to
// share transport addresses and for communicator split) and aborts: when one rank reports an
// error or its connection drops, the root tells every other rank. A connection that cannot
// prove the secret is dropped and logged.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/rank_exchange.h"
#include "base/socket.h"
#include "base/status.h"
#include "loom/loom.h"

namespace loom {

// A rank's call, as it tells the root when a receive of the call waits long (kWaiting: `rank`
// is the sender) and as the root tells a rank another's that differs (kCallDiffers: `rank` is
// that other): the call's number among the communicator's collectives (from 1), and its stamp
// (transports::CallStamp's two words, without a message number).
struct BootstrapCall {
  int32_t rank;
  uint32_t reserved;
  uint64_t number;
  uint64_t call[2];
};
// A call from a payload that holds exactly one, of a rank in 0..nranks-1 and a number from 1;
// false otherwise.
bool unpackCall(const std::string& payload, int nranks, BootstrapCall* out);

// The contents of loomUniqueId.
struct UniqueIdData {
  uint32_t magic;
  uint32_t addrLen;
  unsigned char addr[28];  // sockaddr_in or sockaddr_in6 of the root
  unsigned char secret[16];
  uint32_t flags;  // kRootAtRankZero
};
static_assert(sizeof(UniqueIdData) <= LOOM_UNIQUE_ID_BYTES);
constexpr uint32_t kUniqueIdMagic = 0x4d4f4f4c;  // "LOOM"
// No process serves the id's root yet: rank 0 starts it at the id's address when it connects.
constexpr uint32_t kRootAtRankZero = 1;

// Starts a root at `listenAt` (port 0 picks one) with the given secret; fills *id. Where it
// cannot listen there, *failedErrno (if given) receives why (net::listenOn).
Status startBootstrapRoot(const net::Address& listenAt, const unsigned char secret[16],
                          loomUniqueId* id, int* failedErrno = nullptr);
// A new id whose root this process serves, at the interface LOOM_SOCKET_IFNAME chooses, with a
// random secret.
Status serveNewRoot(loomUniqueId* id);
// An id for a root at `address` (host:port) that rank 0 serves when it connects. Its secret is
// derived from the address and the launcher's job id, so every rank of the job that calls this
// with the same address makes the same id (LOOM_ROOT, NCCL_COMM_ID).
Status rankZeroRootId(const std::string& address, loomUniqueId* id);
// Checks and unpacks an id.
Status decodeUniqueId(const loomUniqueId& id, UniqueIdData* out, net::Address* root);

// What the root and the ranks read from a connection. Anyone who can reach the root's port can
// send it anything, so every length and count is checked before it is trusted; these are pure
// so that tests/fuzz/ can feed them garbage without sockets.
//
// A rank's first bytes to the root.
struct BootstrapHello {
  uint32_t magic;  // kUniqueIdMagic
  unsigned char secret[16];
  int32_t rank;
  int32_t nranks;
  // What is left of the rank's init deadline, in ms (-1: none): the root gives up waiting for
  // the missing ranks no later than that, so the rank hears which ones before it gives up.
  int32_t timeoutMs;
};
// The most ranks a communicator may have: a hello that claims more is refused before the root
// sizes its tables by it.
constexpr int32_t kMaxBootstrapRanks = 1 << 20;
// The root's one-byte answer to a hello. kNotProven is never sent: the connection is dropped.
enum BootstrapReply : uint8_t {
  kAccepted = 0,
  kNotProven = 1,  // wrong magic or secret: a stranger, or another communicator's rank
  kWrongSize = 2,  // nranks differs from that of the ranks that came first
  kDuplicateRank = 3,
  kBadRank = 4,  // rank outside 0..nranks-1, or nranks outside 1..kMaxBootstrapRanks
};
// The root's answer to `h`, given the communicator's size so far (-1: no rank has joined yet),
// each rank's connection (`rankFds`, -1 where none) and whether every rank had joined: a rank
// that joins after that, or twice, is a duplicate.
BootstrapReply judgeHello(const BootstrapHello& h, const unsigned char secret[16], int nranks,
                          const std::vector<int>& rankFds, bool everyoneJoined);
bool bootstrapSecretsEqual(const unsigned char* a, const unsigned char* b);

// Every message after the hello: a header, then `len` bytes of payload.
struct BootstrapMessageHeader {
  uint32_t type;
  uint32_t len;
};
// The largest payload either side accepts: a header claiming more is a broken or hostile peer,
// refused before anything is allocated for it.
constexpr uint32_t kMaxBootstrapMessageBytes = 1u << 30;
Status checkMessageHeader(const BootstrapMessageHeader& h);
// A key and a value in one payload: the key's length (4 bytes), the key, the value.
std::string packKeyed(const std::string& key, const std::string& value);
bool unpackKeyed(const std::string& payload, std::string* key, std::string* value);
// An allgather's result: every rank's blob after its length (4 bytes), rank 0 first.
std::string packGather(const std::vector<std::string>& blobs);
// Exactly `nranks` blobs filling the payload, or an error that says what is wrong.
Status unpackGather(const std::string& payload, size_t nranks, std::vector<std::string>* all);


// One rank's connection to the root.
class Bootstrap final : public RankExchange {
 public:
  Bootstrap() = default;
  ~Bootstrap() override;
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  Status connect(const loomUniqueId& id, int rank, int nranks, const Deadline& deadline);
  // Every rank's blob to all, relayed by the root. Also a barrier.
  Status allgather(const std::string& mine, std::vector<std::string>* all,
                   const Deadline& deadline) override;
  // The root's key-value store: put publishes, get waits (until the deadline) for a key to be
  // published. Unlike allgather they work after a rank failed or died, and ignore the aborts
  // relayed meanwhile: the ranks left use them to agree on what comes next.
  Status put(const std::string& key, const std::string& value, const Deadline& deadline);
  Status get(const std::string& key, std::string* value, const Deadline& deadline);
  // get, for a key one rank reads once: the root then forgets it, so that keys used once per
  // call (LOOM_CHECK's) do not pile up. The value of a key taken before it is put goes only to
  // the taker.
  Status take(const std::string& key, std::string* value, const Deadline& deadline);
  // Non-blocking: an abort relayed from another rank, or a lost root, becomes an error.
  // waitMs: how long to wait for one (0: only what has arrived).
  Status pollAbort(int waitMs = 0);
  // Tells every other rank (through the root) that this rank failed. Any thread may call it.
  // A timeout (a reason that names LOOM_TIMEOUT_MS) names the rank waited on; the root holds it
  // kSilenceMs for the others' (which a stop makes expire together), follows who waited on
  // whom to the rank that reported none, the one that stopped or was cut off, and relays
  // that rank as the first cause: a rank merely slower than the others reports its own
  // timeout within that window, a stopped one cannot.
  void sendAbort(const std::string& reason);
  static constexpr int kSilenceMs = 500;
  // Ranks whose calls differ wait for messages their peers never send, until their deadline
  // (a pair over tcp or UCX, or a cycle of ranks over any transport). A rank whose receive
  // waits long reports its call (reportCall: `number` among the communicator's collectives,
  // and its stamp); the root compares it with the calls other ranks reported waiting in, and
  // tells each of two whose calls of the same number differ the other's, which callDiffers
  // then returns (read by pollAbort; false if none for that number).
  void reportCall(uint64_t number, const uint64_t call[2]);
  bool callDiffers(uint64_t number, int* rank, uint64_t call[2]) const;
  // A clean goodbye, so the root does not report this rank as lost. In the process that runs
  // the root, it returns once every rank has left (or died), or after timeoutMs (< 0: never).
  void leave(int64_t timeoutMs);

 private:
  Status fetchKey(uint32_t request, const std::string& key, std::string* value,
                  const Deadline& deadline);
  Status readMessage(uint32_t* type, std::string* payload, const Deadline& deadline);
  // Records an abort, or the root's word that not every rank joined, as what every later call
  // reports; false for any other message.
  bool stopped(uint32_t type, const std::string& payload);
  // Keeps the root's word that another rank's call differs from this rank's (kCallDiffers);
  // false for any other message.
  bool notedCallDiffers(uint32_t type, const std::string& payload);
  int fd_ = -1;
  int rank_ = 0;
  int nranks_ = 0;
  std::mutex sendMutex_;  // a revoke from another thread must not interleave with a message
  std::string secret_;       // the id's, which names its root among those of this process
  std::string abortReason_;  // first abort seen, kept so every later call reports it
  loomResult_t abortCode_ = loomRemoteError;
  bool joined_ = false;  // the first exchange ended: every rank had joined
  mutable std::mutex differsMutex_;
  BootstrapCall differs_ = {};  // the latest kCallDiffers (number 0: none)
};

// The first rank that `text` names ("rank N") other than `except`; -1 where it names none.
// The root reads a failed rank's suspect from its message, a rank the first cause's origin.
int rankNamedIn(const std::string& text, int except = -1);

}  // namespace loom
