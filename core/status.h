// Status: the result of an internal operation, carrying a loomResult_t code and a message.
#pragma once

#include <string>
#include <utility>

#include "loom/loom.h"

namespace loom {

// printf-style formatting into a std::string (GCC 12 has no std::format).
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

class [[nodiscard]] Status {
 public:
  Status() = default;  // success
  Status(loomResult_t code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool isOk() const { return code_ == loomSuccess; }
  loomResult_t code() const { return code_; }
  const std::string& message() const { return message_; }

  // For best-effort calls whose failure is detected by other means (e.g. a goodbye message).
  void ignore() const {}

  // Prepends context ("allreduce #3: ") so the final message reads outermost-first.
  Status withContext(const std::string& context) const {
    if (isOk()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  loomResult_t code_ = loomSuccess;
  std::string message_;
};

template <typename... Args>
Status errorf(loomResult_t code, const char* fmt, Args... args) {
  return Status(code, strprintf(fmt, args...));
}

}  // namespace loom

#define LOOM_TRY(expr)                        \
  do {                                        \
    ::loom::Status loomTryStatus_ = (expr);   \
    if (!loomTryStatus_.isOk()) return loomTryStatus_; \
  } while (0)
