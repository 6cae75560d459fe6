// Copies that bypass the cache, for data no one on this core reads again soon.
#pragma once

#include <cstddef>

namespace loom {

// Copies n bytes with non-temporal (streaming) stores and fences them, so that the copy is
// globally visible when this returns. The destination lines are written to memory without
// being read into the cache first (a plain copy reads each line before it overwrites it: a
// third of the memory traffic of a large copy), and they do not evict the cache's contents.
// Only worth it for destinations larger than a core's private cache, or read by another core.
// Any alignment: the unaligned head and tail go through memcpy.
void copyBypassingCache(void* dst, const void* src, size_t n);

}  // namespace loom
