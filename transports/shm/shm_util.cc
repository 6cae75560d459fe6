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
