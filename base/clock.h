// Monotonic time and deadlines: every wait in loom is bounded by a Deadline.
#pragma once

#include <chrono>
#include <cstdint>

namespace loom {

using Clock = std::chrono::steady_clock;

inline uint64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

// Seconds from t until now.
inline double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

class Deadline {
 public:
  // timeoutMs < 0 means no deadline.
  explicit Deadline(int64_t timeoutMs)
      : endNs_(timeoutMs < 0 ? UINT64_MAX : nowNs() + uint64_t(timeoutMs) * 1000000ull) {}
  static Deadline never() { return Deadline(-1); }
  bool expired() const { return nowNs() >= endNs_; }
  bool bounded() const { return endNs_ != UINT64_MAX; }
  bool before(const Deadline& other) const { return endNs_ < other.endNs_; }
  // This deadline moved ms later.
  Deadline extended(int64_t ms) const {
    Deadline d = *this;
    if (bounded()) d.endNs_ += uint64_t(ms) * 1000000ull;
    return d;
  }
  // Milliseconds left, clamped to [0, capMs].
  int remainingMs(int capMs) const {
    if (endNs_ == UINT64_MAX) return capMs;
    uint64_t now = nowNs();
    if (now >= endNs_) return 0;
    uint64_t ms = (endNs_ - now) / 1000000ull;
    return ms > uint64_t(capMs) ? capMs : int(ms);
  }

 private:
  uint64_t endNs_;
};

}  // namespace loom
