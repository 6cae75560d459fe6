#include "transports/shm/user_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "base/log.h"
#include "transports/shm/shm_util.h"

namespace loom::transports {
namespace {

struct Segment {
  size_t size;
  int fd;
  uint64_t serial;
};

// Every live segment of this process, by base address.
struct Registry {
  std::mutex mu;
  std::map<uintptr_t, Segment> segments;
  uint64_t serials = 0;
  std::map<uint64_t, SegmentFreeHook> freeHooks;  // by the id addSegmentFreeHook gave
  uint64_t hookIds = 0;
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: frees may come during exit
  return *r;
}

}  // namespace

Status allocUserMemory(size_t bytes, void** out) {
  *out = nullptr;
  const size_t size = alignUp(std::max<size_t>(bytes, 1), kPage);
  Fd fd(memfd_create("loom-mem", MFD_CLOEXEC));
  if (fd.get() < 0)
    return errorf(loomSystemError, "loomMemAlloc: memfd_create failed: %s", strerror(errno));
  if (ftruncate(fd.get(), off_t(size)) != 0)
    return errorf(loomSystemError, "loomMemAlloc: cannot size a segment of %zu bytes: %s", size,
                  strerror(errno));
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED)
    return errorf(loomSystemError, "loomMemAlloc: mmap of %zu bytes failed: %s", size,
                  strerror(errno));
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  // The descriptor stays open for the segment's life: peers open it by its number.
  r.segments[reinterpret_cast<uintptr_t>(p)] = {size, dup(fd.get()), ++r.serials};
  *out = p;
  return Status::ok();
}

Status freeUserMemory(void* p) {
  if (p == nullptr) return Status::ok();
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.segments.find(reinterpret_cast<uintptr_t>(p));
  if (it == r.segments.end())
    return errorf(loomInvalidArgument, "loomMemFree: %p did not come from loomMemAlloc", p);
  for (auto& [id, hook] : r.freeHooks) hook(it->second.serial);
  munmap(p, it->second.size);
  close(it->second.fd);
  r.segments.erase(it);
  return Status::ok();
}

uint64_t addSegmentFreeHook(SegmentFreeHook hook) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.freeHooks[++r.hookIds] = std::move(hook);
  return r.hookIds;
}

void removeSegmentFreeHook(uint64_t id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.freeHooks.erase(id);
}

SegmentRef findUserMemory(const void* p, size_t bytes) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto at = reinterpret_cast<uintptr_t>(p);
  auto it = r.segments.upper_bound(at);
  if (it == r.segments.begin()) return {};
  --it;
  const Segment& s = it->second;
  const uintptr_t offset = at - it->first;
  if (offset > s.size || bytes > s.size - offset) return {};
  return {s.serial, s.fd, s.size, offset};
}

PeerSegments::PeerSegments() = default;
PeerSegments::~PeerSegments() = default;

const char* PeerSegments::map(pid_t pid, const SegmentRef& ref) {
  auto it = mapped_.find(std::pair(pid, ref.serial));
  if (it == mapped_.end()) {
    std::unique_ptr<Mapping> m;
    const std::string path = strprintf("/proc/%d/fd/%d", int(pid), ref.fd);
    Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
    struct stat st = {};
    void* p = MAP_FAILED;
    if (fd.get() >= 0 && fstat(fd.get(), &st) == 0 && uint64_t(st.st_size) == ref.size)
      p = mmap(nullptr, ref.size, PROT_READ, MAP_SHARED, fd.get(), 0);
    if (p != MAP_FAILED) m = std::make_unique<Mapping>(p, ref.size);
    if (!m)
      LOOM_INFO("SHM", "cannot map %s (%s); reading that peer's buffer with process_vm_readv",
                path.c_str(), fd.get() < 0 ? strerror(errno) : "not the segment");
    it = mapped_.emplace(std::pair(pid, ref.serial), Entry{std::move(m), 0}).first;
  }
  it->second.lastUse = ++uses_;
  return it->second.mapping ? it->second.mapping->base() + ref.offset : nullptr;
}

void PeerSegments::trim() {
  while (mapped_.size() > kMaxMapped) {
    auto oldest = mapped_.begin();
    for (auto it = mapped_.begin(); it != mapped_.end(); ++it)
      if (it->second.lastUse < oldest->second.lastUse) oldest = it;
    mapped_.erase(oldest);
  }
}

Status readProcessMemory(pid_t pid, int rank, uint64_t addr, void* dst, size_t n, bool* exited) {
  char* d = static_cast<char*>(dst);
  while (n > 0) {
    iovec local{d, n};
    iovec remote{reinterpret_cast<void*>(addr), n};
    ssize_t r = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == ESRCH) {
      if (exited) *exited = true;
      return errorf(loomRemoteError, "shm: rank %d (pid %d) of this host has exited", rank,
                    int(pid));
    }
    if (r < 0 && errno == EFAULT)
      return errorf(loomRemoteError,
                    "shm: rank %d (pid %d) of this host no longer has the memory being read "
                    "(it has left the call)",
                    rank, int(pid));
    if (r <= 0)
      return errorf(loomSystemError,
                    "shm: cannot read the memory of rank %d (pid %d) of this host "
                    "(process_vm_readv: %s)",
                    rank, int(pid), r < 0 ? strerror(errno) : "no progress");
    d += r;
    addr += uint64_t(r);
    n -= size_t(r);
  }
  return Status::ok();
}

}  // namespace loom::transports
