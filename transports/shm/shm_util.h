// Pieces the shared-memory transport and the direct-allreduce arena share: mapped segments,
// file descriptors, futexes, bounded polling and process liveness.
#pragma once

#include <sys/types.h>
#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/clock.h"
#include "base/status.h"
#include "transports/transport.h"

namespace loom::transports {

// Words written by different processes sit two lines apart: adjacent-line prefetchers move
// lines in pairs, which would make neighbours falsely shared.
constexpr size_t kPad = 128;
constexpr size_t kPage = 4096;

inline size_t alignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

// FUTEX_WAIT / FUTEX_WAKE on a word that may be shared between processes (not private).
long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout);

// Unmaps on destruction.
class Mapping {
 public:
  Mapping(void* base, size_t size) : base_(static_cast<char*>(base)), size_(size) {}
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  char* base() const { return base_; }
  size_t size() const { return size_; }

 private:
  char* base_;
  size_t size_;
};

// Closes on destruction.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd();
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Maps size bytes of fd shared and read-write, pages faulted in now; name is for errors.
Status mapFd(int fd, size_t size, const std::string& name, std::unique_ptr<Mapping>* out);

// Gives the segment its pages now: tmpfs would otherwise fail with SIGBUS at first touch
// when /dev/shm is full (containers often give it only 64 MiB).
Status allocateFd(int fd, size_t size, const std::string& name);

// Polls pred until it holds or the deadline passes: yields first, since the other side is
// usually microseconds away, then naps so a long wait costs no CPU.
bool waitUntil(const Deadline& deadline, bool (*pred)(const void*), const void* arg);
template <typename Pred>
bool waitUntil(const Deadline& deadline, Pred pred) {
  return waitUntil(
      deadline, [](const void* p) { return (*static_cast<const Pred*>(p))(); }, &pred);
}

// Inode of /proc/self/ns/pid (0 if unknown): pids mean the same only within one namespace.
uint64_t pidNamespaceId();

// A process as the names loom gives its files in /dev/shm record it: its pid, when it started
// (clock ticks from boot, /proc/<pid>/stat; 0 if unknown) and its pid namespace (0 if unknown).
// The start time tells the process from a later one that reuses its pid; the namespace says
// whether the pid means anything here.
struct ProcessId {
  int32_t pid = 0;
  uint64_t start = 0;
  uint64_t pidNamespace = 0;
  bool operator==(const ProcessId&) const = default;
};
ProcessId thisProcess();
// Fills the pid, pidStart and pidNamespace of a rank's PeerInfo with this process's.
void describeThisProcess(PeerInfo* me);
ProcessId processOf(const PeerInfo& peer);
// "<pidNamespace>.<pid>.<start>", as a name in /dev/shm carries its owner.
std::string ownerTag(const ProcessId& p);
// Whether p has certainly ended, as this process sees it: its pid is free, a zombie's, or
// another process's (a different start time). A process of another pid namespace, or of an
// unknown one, is taken as alive: its pid names nothing here.
bool processGone(const ProcessId& p);
// A pidfd for pid, or -1 where the kernel has none.
int pidfdOpen(pid_t pid);
// Whether the process is gone: its pidfd (if >= 0) turned readable, which happens at exit,
// zombie or not, and cannot name a recycled pid; else kill(pid, 0) finds no such process.
bool processExited(int pidfd, pid_t pid);

}  // namespace loom::transports
