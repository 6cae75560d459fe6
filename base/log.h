// Logging controlled by LOOM_DEBUG (WARN, INFO, TRACE) and LOOM_DEBUG_SUBSYS (a comma list
// of subsystems such as INIT,SHM,TCP,COLL, or ^ and those not to log; ALL by default), or by
// NCCL_DEBUG and NCCL_DEBUG_SUBSYS where those are unset. Each line carries rank and host.
#pragma once

#include <atomic>

namespace loom::log {

enum class Level { None = 0, Warn = 1, Info = 2, Trace = 3 };

// The finest level LOOM_DEBUG lets through, -1 until it has been read: checked inline, so that
// a line that is off (every TRACE of a call, by default) costs one load rather than a call.
extern std::atomic<int> gFinestLevel;
bool enabledSlow(Level level, const char* subsys);
inline bool enabled(Level level, const char* subsys) {
  const int finest = gFinestLevel.load(std::memory_order_relaxed);
  return (finest < 0 || int(level) <= finest) && enabledSlow(level, subsys);
}
void write(Level level, const char* subsys, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
// The rank printed on this thread's lines (-1 before a communicator exists).
void setThreadRank(int rank);
// Reads LOOM_DEBUG, LOOM_DEBUG_SUBSYS and LOOM_DEBUG_FILE (or NCCL's) again (after
// params::reloadFromEnvironment), for a forked test rank with its own settings. Not while
// other threads log.
void reload();

}  // namespace loom::log

#define LOOM_LOG(level, subsys, ...)                                        \
  do {                                                                       \
    if (::loom::log::enabled(::loom::log::Level::level, subsys))             \
      ::loom::log::write(::loom::log::Level::level, subsys, __VA_ARGS__);    \
  } while (0)
#define LOOM_WARN(subsys, ...) LOOM_LOG(Warn, subsys, __VA_ARGS__)
#define LOOM_INFO(subsys, ...) LOOM_LOG(Info, subsys, __VA_ARGS__)
#define LOOM_TRACE(subsys, ...) LOOM_LOG(Trace, subsys, __VA_ARGS__)
