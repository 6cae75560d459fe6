// The shared-memory transport: ranks on one host exchange data through
// a ring of slots per direction in a POSIX shared-memory segment per (pair, lane), and large
// messages move with a single copy (process_vm_readv) straight from the sender's buffer.
// The transport starts no threads; a connection is driven by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "transports/shm/shm_util.h"
#include "transports/transport.h"

namespace loom::transports {

// A CMA Recv reads at most this much per system call so that acknowledgements (and so the
// sender's `done`) flow back while a large message is still being read. The simulator
// charges HostCpu::singleCopyOverhead per such call.
constexpr size_t kCmaPieceBytes = 1 << 20;

// A whole message of at most this many bytes travels inside its slot's header line, so that
// the receiver takes one cache line from the sender's core instead of two in a row.
constexpr size_t kHeaderPayloadBytes = 32;

// Chunks of at least this size are copied into slots with non-temporal stores (copyToSlot in
// shm_transport.cc): they go through memory, whatever fits the caches. The simulator prices
// their bytes at memory speed.
constexpr size_t kNonTemporalBytes = 4096;

// Sizes of the rings and the single-copy threshold (a communicator's: the LOOM_SHM_*
// parameters, comm/options.h).
struct ShmOptions {
  size_t slotBytes = 256 << 10;    // rounded up to a whole page
  int slots = 8;                   // per direction
  // Sends of at least this many bytes, all released when they start, go by CMA; 0: never.
  size_t cmaThreshold = 16 << 10;
};

Status createShmTransport(const CommContext* ctx, const ShmOptions& options,
                          std::unique_ptr<Transport>* out);

// What a connection of this transport has sent, by path (tests check which path was taken).
struct ShmConnectionStats {
  uint64_t slotBytes = 0;    // copied through the ring's slots (headerBytes included)
  uint64_t headerBytes = 0;  // of those, carried inside slot headers (kHeaderPayloadBytes)
  uint64_t cmaBytes = 0;     // described in the ring and read by the peer with one copy
};
// Fills *out and returns true if conn was made by the shm transport.
bool shmConnectionStats(const Connection& conn, ShmConnectionStats* out);

// Every name loom gives a file in /dev/shm starts with kShmNamePrefix; those of communicator
// commHash with shmNamePrefix(commHash) (without the leading '/').
inline const std::string kShmNamePrefix = "loom-";
std::string shmNamePrefix(uint64_t commHash);
// Whether `name` (in /dev/shm, without the '/') is one loom makes, and the processes it names
// as its owners: a doorbell's rank, both ranks of a connection's segment, the rank that made
// a host's arena (each as ownerTag writes it).
bool shmNameOwners(const std::string& name, std::vector<ProcessId>* owners);
// Removes the names loom made in /dev/shm that start with prefix (shmNamePrefix(commHash), or
// kShmNamePrefix for every communicator) and name an owner that has certainly ended
// (processGone): never those of live processes, nor those whose owners' pids mean nothing
// here. Returns the names removed.
std::vector<std::string> removeStaleShm(const std::string& prefix);

}  // namespace loom::transports
