// Memory that the ranks of a host can read in each other's processes: loomMemAlloc gives the
// caller pages of a memfd (shared, but otherwise plain memory), and a peer that learns where a
// buffer lies in such a segment maps the same pages through /proc/<pid>/fd and reads them
// with plain loads. Buffers elsewhere are read with process_vm_readv (one copy in the kernel,
// which pins the pages first and can cost half as much again per byte as a plain copy).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "base/status.h"

namespace loom::transports {

// Where a buffer lies in a loomMemAlloc segment; serial 0: it does not lie in one.
struct SegmentRef {
  uint64_t serial = 0;  // the segment's number in its process, never reused
  int32_t fd = -1;      // the memfd, as the owner's process numbers it
  uint64_t size = 0;    // bytes of the segment
  uint64_t offset = 0;  // where the buffer starts in it
};

// A segment of `bytes` (rounded up to pages), zero-filled, mapped read-write.
Status allocUserMemory(size_t bytes, void** out);
// Frees what allocUserMemory returned; loomInvalidArgument for any other pointer.
Status freeUserMemory(void* p);
// The segment that holds all of [p, p+bytes), if one does.
SegmentRef findUserMemory(const void* p, size_t bytes);

// Called with a segment's serial just before freeUserMemory unmaps it, under the registry's
// lock (a hook must not call back into this file): what a transport registered of the segment
// (the UCX transport's ucp_mem_map) is released with it. Returns an id for removeSegmentFreeHook.
using SegmentFreeHook = std::function<void(uint64_t serial)>;
uint64_t addSegmentFreeHook(SegmentFreeHook hook);
void removeSegmentFreeHook(uint64_t id);

class Mapping;

// One rank's read-only mappings of its peers' segments, by (pid, serial), made on first use.
// A peer's freed segment stays mapped here (its pages with it) until trim() drops it.
class PeerSegments {
 public:
  PeerSegments();
  ~PeerSegments();
  // The start of `ref`'s buffer in this process, or null when the segment cannot be mapped
  // (another pid namespace, no /proc, no permission): the caller reads with process_vm_readv.
  // Valid until the next trim().
  const char* map(pid_t pid, const SegmentRef& ref);
  // Unmaps the least recently used mappings beyond kMaxMapped. Only between calls: a pointer
  // map() gave the current call must stay valid until its end.
  void trim();

 private:
  static constexpr size_t kMaxMapped = 64;
  struct Entry {
    std::unique_ptr<Mapping> mapping;  // null: the segment could not be mapped
    uint64_t lastUse;
  };
  std::map<std::pair<pid_t, uint64_t>, Entry> mapped_;
  uint64_t uses_ = 0;
};

// Reads n bytes at addr in process pid, communicator rank `rank` of this host, into dst
// (process_vm_readv, resuming short reads). loomRemoteError when the process is gone (then
// *exited, if given, is set) or no longer has those pages mapped (it has left the call that
// lent them, after an error of its own).
Status readProcessMemory(pid_t pid, int rank, uint64_t addr, void* dst, size_t n,
                         bool* exited = nullptr);

}  // namespace loom::transports
