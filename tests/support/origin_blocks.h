// Blocks of bytes that say where they come from, for the data-movement collectives checked bit
// for bit (alltoall, broadcast, gather, scatter): byte i of the block rank src gives rank dst,
// whatever the dtype; buffers with guard bytes past their end; and a rank's log of failed cases.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace loom::testing {

// Byte i of the block rank src gives rank dst. The (i >> 8) term keeps a block shifted by 256
// bytes from matching.
char originByte(int src, int dst, uint64_t i);
void fillOrigin(char* p, uint64_t bytes, int src, int dst);
bool isOrigin(const char* p, uint64_t bytes, int src, int dst);

// What the library must never write: bytes outside the result, and buffers NCCL ignores.
inline constexpr char kUntouched = char(0x5a);
// Bytes past the end of every buffer, to catch writes beyond the result.
inline constexpr size_t kGuard = 16;
// `bytes` bytes plus the guard, all kUntouched.
std::vector<char> guardedBuffer(uint64_t bytes);
bool isUntouched(const char* p, uint64_t bytes);
bool guardIntact(const std::vector<char>& b);

// A rank's failed cases: each goes to stderr with the rank and the label (the configuration
// they ran under), and is counted.
class CaseLog {
 public:
  CaseLog(int rank, int n, std::string label) : rank_(rank), n_(n), label_(std::move(label)) {}
  int failures() const { return failures_; }
  void fail(const std::string& what, const std::string& msg);

 protected:
  const int rank_, n_;

 private:
  std::string label_;
  int failures_ = 0;
};

}  // namespace loom::testing
