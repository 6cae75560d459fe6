#include "transports/shm/shm_util.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace loom::transports {

long futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0);
}

Mapping::~Mapping() { munmap(base_, size_); }

Fd::~Fd() {
  if (fd_ >= 0) close(fd_);
}

Status mapFd(int fd, size_t size, const std::string& name, std::unique_ptr<Mapping>* out) {
  // MAP_POPULATE: take the page faults now rather than in the first transfers.
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED)
    return errorf(loomSystemError, "shm: mmap of %s (%zu bytes) failed: %s", name.c_str(), size,
                  strerror(errno));
  *out = std::make_unique<Mapping>(p, size);
  return Status::ok();
}

Status allocateFd(int fd, size_t size, const std::string& name) {
  int err = posix_fallocate(fd, 0, off_t(size));
  if (err == 0) return Status::ok();
  return errorf(loomSystemError,
                "shm: cannot allocate %zu bytes for %s: %s (is /dev/shm large enough? "
                "containers may need a larger --shm-size)",
                size, name.c_str(), strerror(err));
}

bool waitUntil(const Deadline& deadline, bool (*pred)(const void*), const void* arg) {
  for (int i = 0;; ++i) {
    if (pred(arg)) return true;
    if (deadline.expired()) return false;
    if (i < 100) {
      sched_yield();
    } else {
      timespec nap{0, 100 * 1000};
      nanosleep(&nap, nullptr);
    }
  }
}

uint64_t pidNamespaceId() {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? uint64_t(st.st_ino) : 0;
}

namespace {

// Reads /proc/<pid>/stat ("self" for pid 0): the state letter and the start time. False if
// there is no such process (or no /proc).
bool readProcStat(pid_t pid, char* state, uint64_t* start) {
  char path[64];
  if (pid == 0) snprintf(path, sizeof(path), "/proc/self/stat");
  else snprintf(path, sizeof(path), "/proc/%d/stat", int(pid));
  Fd fd(open(path, O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return false;
  char buf[1024];
  const ssize_t n = read(fd.get(), buf, sizeof(buf) - 1);
  if (n <= 0) return false;
  buf[n] = '\0';
  // The command name, in parentheses, may hold anything: the fields follow its last ')'.
  const char* p = strrchr(buf, ')');
  if (p == nullptr) return false;
  unsigned long long ticks = 0;
  // state (field 3), then 18 fields up to starttime (field 22).
  if (sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
             state, &ticks) != 2)
    return false;
  *start = ticks;
  return true;
}

}  // namespace

ProcessId thisProcess() {
  ProcessId p;
  p.pid = int32_t(getpid());
  char state = 0;
  if (!readProcStat(0, &state, &p.start)) p.start = 0;
  p.pidNamespace = pidNamespaceId();
  return p;
}

void describeThisProcess(PeerInfo* me) {
  const ProcessId p = thisProcess();
  me->pid = p.pid;
  me->pidStart = p.start;
  me->pidNamespace = p.pidNamespace;
}

ProcessId processOf(const PeerInfo& peer) { return {peer.pid, peer.pidStart, peer.pidNamespace}; }

std::string ownerTag(const ProcessId& p) {
  return strprintf("%llu.%d.%llu", (unsigned long long)p.pidNamespace, int(p.pid),
                   (unsigned long long)p.start);
}

bool processGone(const ProcessId& p) {
  if (p.pid <= 0 || p.pidNamespace == 0 || p.pidNamespace != pidNamespaceId()) return false;
  char state = 0;
  uint64_t start = 0;
  if (!readProcStat(p.pid, &state, &start)) return kill(p.pid, 0) != 0 && errno == ESRCH;
  return state == 'Z' || state == 'X' || (p.start != 0 && start != p.start);
}

int pidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  return int(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

bool processExited(int pidfd, pid_t pid) {
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
  }
  return kill(pid, 0) != 0 && errno == ESRCH;
}

}  // namespace loom::transports
