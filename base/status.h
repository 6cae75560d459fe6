// Status: the result of an internal operation, carrying a loomResult_t code and a message.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/loom.h"

namespace loom {

// printf-style formatting into a std::string (GCC 12 has no std::format).
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// s as a JSON string, quotes included (loomGetInfo's and loom-perf's JSON).
std::string jsonString(std::string_view s);
// Ascending ranks as a short list for messages: runs of 3 or more become a range
// ({2, 5} -> "2, 5"; {0, 3, 4, 5, 6, 7} -> "0, 3-7").
std::string rankRanges(const std::vector<int>& ranks);

class [[nodiscard]] Status {
 public:
  Status() = default;  // success
  Status(loomResult_t code, std::string message)
      : code_(code), message_(std::make_unique<std::string>(std::move(message))) {}
  Status(const Status& o)
      : code_(o.code_), message_(o.message_ ? std::make_unique<std::string>(*o.message_) : nullptr) {}
  Status(Status&&) noexcept = default;
  Status& operator=(const Status& o) {
    if (this != &o) *this = Status(o);
    return *this;
  }
  Status& operator=(Status&&) noexcept = default;

  static Status ok() { return Status(); }
  bool isOk() const { return code_ == loomSuccess; }
  loomResult_t code() const { return code_; }
  const std::string& message() const { return message_ ? *message_ : noMessage(); }

  // For best-effort calls whose failure is detected by other means (e.g. a goodbye message).
  void ignore() const {}

  // Prepends context ("allreduce #3: ") so the final message reads outermost-first.
  Status withContext(const std::string& context) const {
    if (isOk()) return *this;
    return Status(code_, context + ": " + message());
  }

 private:
  static const std::string& noMessage() {
    static const std::string empty;
    return empty;
  }

  loomResult_t code_ = loomSuccess;
  // Null on success: every call returns a Status, and a success that carries nothing costs the
  // hot paths nothing to make and destroy (a std::string member was ~15% of an 8-byte call).
  std::unique_ptr<std::string> message_;
};

// Cold and never inlined: a check on a hot path then inlines into its caller as the test
// alone, and what makes the message lies out of the way.
template <typename... Args>
[[gnu::cold, gnu::noinline]] Status errorf(loomResult_t code, const char* fmt, Args... args) {
  return Status(code, strprintf(fmt, args...));
}

}  // namespace loom

#define LOOM_TRY(expr)                        \
  do {                                        \
    ::loom::Status loomTryStatus_ = (expr);   \
    if (!loomTryStatus_.isOk()) return loomTryStatus_; \
  } while (0)
