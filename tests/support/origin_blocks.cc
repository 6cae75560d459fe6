#include "tests/support/origin_blocks.h"

#include <cstdio>

namespace loom::testing {

char originByte(int src, int dst, uint64_t i) {
  return char((uint64_t(src) * 131 + uint64_t(dst) * 29 + i * 7 + (i >> 8) * 13) & 0xff);
}

void fillOrigin(char* p, uint64_t bytes, int src, int dst) {
  for (uint64_t i = 0; i < bytes; ++i) p[i] = originByte(src, dst, i);
}

bool isOrigin(const char* p, uint64_t bytes, int src, int dst) {
  for (uint64_t i = 0; i < bytes; ++i)
    if (p[i] != originByte(src, dst, i)) return false;
  return true;
}

std::vector<char> guardedBuffer(uint64_t bytes) {
  return std::vector<char>(bytes + kGuard, kUntouched);
}

bool isUntouched(const char* p, uint64_t bytes) {
  for (uint64_t i = 0; i < bytes; ++i)
    if (p[i] != kUntouched) return false;
  return true;
}

bool guardIntact(const std::vector<char>& b) {
  return isUntouched(b.data() + b.size() - kGuard, kGuard);
}

void CaseLog::fail(const std::string& what, const std::string& msg) {
  fprintf(stderr, "rank %d/%d [%s]: %s: %s\n", rank_, n_, label_.c_str(), what.c_str(),
          msg.c_str());
  ++failures_;
}

}  // namespace loom::testing
