#include "base/log.h"

#include <sys/time.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>

#include "base/params.h"

namespace loom::log {

std::atomic<int> gFinestLevel{-1};

namespace {

thread_local int tRank = -1;

struct Config {
  Level level = Level::Warn;
  std::string subsys;  // "ALL" or a comma list
  FILE* out = stderr;
  char host[64] = {};
};

Config makeConfig() {
  Config k;
  std::string lvl = params::getString("LOOM_DEBUG");
  for (auto& ch : lvl) ch = char(toupper(ch));
  k.level = lvl == "NONE" ? Level::None
            : lvl == "INFO" ? Level::Info
            : lvl == "TRACE" ? Level::Trace
                             : Level::Warn;
  k.subsys = params::getString("LOOM_DEBUG_SUBSYS");
  for (auto& ch : k.subsys) ch = char(toupper(ch));
  gethostname(k.host, sizeof(k.host) - 1);
  std::string file = params::getString("LOOM_DEBUG_FILE");
  if (!file.empty()) {
    std::string path;
    for (size_t i = 0; i < file.size(); ++i) {
      const char next = file[i] == '%' && i + 1 < file.size() ? file[i + 1] : '\0';
      if (next == 'h' || next == 'p' || next == '%') {
        path += next == 'h' ? std::string(k.host) : next == 'p' ? std::to_string(getpid()) : "%";
        ++i;
      } else {
        path += file[i];
      }
    }
    if (FILE* f = fopen(path.c_str(), "a")) k.out = f;
  }
  return k;
}

Config& configSlot() {
  static Config c = [] {
    Config k = makeConfig();
    gFinestLevel.store(int(k.level), std::memory_order_relaxed);
    return k;
  }();
  return c;
}

const Config& config() { return configSlot(); }

// LOOM_DEBUG_SUBSYS: empty or ALL logs every subsystem; a comma list those it names (ALL among
// them: every one); a leading ^ every subsystem but those.
bool subsysWanted(const std::string& spec, const char* subsys) {
  if (spec.empty()) return true;
  const bool invert = spec[0] == '^';
  const std::string list = invert ? spec.substr(1) : spec;
  bool named = false;
  for (size_t start = 0; start <= list.size() && !named;) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string item = list.substr(start, end - start);
    named = item == "ALL" || item == subsys;
    start = end + 1;
  }
  return named != invert;
}

}  // namespace

void setThreadRank(int rank) { tRank = rank; }

void reload() {
  Config& c = configSlot();
  if (c.out != stderr) fclose(c.out);
  c = makeConfig();
  gFinestLevel.store(int(c.level), std::memory_order_relaxed);
}

bool enabledSlow(Level level, const char* subsys) {
  const Config& c = config();
  if (level > c.level) return false;
  // Warnings always show; finer levels follow the subsystem filter.
  return level == Level::Warn || subsysWanted(c.subsys, subsys);
}

void write(Level level, const char* subsys, const char* fmt, ...) {
  const Config& c = config();
  static const char* const kLevelNames[] = {"", "WARN", "INFO", "TRACE"};
  char line[2048];
  timeval tv;
  gettimeofday(&tv, nullptr);
  int n = snprintf(line, sizeof(line), "%s:%d:%d [%ld.%06ld] loom %s %s ", c.host, getpid(),
                   tRank, long(tv.tv_sec), long(tv.tv_usec), kLevelNames[int(level)], subsys);
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && size_t(n) < sizeof(line)) vsnprintf(line + n, sizeof(line) - n, fmt, ap);
  va_end(ap);
  // One fputs per line so lines of concurrent ranks do not interleave mid-line.
  size_t len = strnlen(line, sizeof(line) - 2);
  line[len] = '\n';
  line[len + 1] = '\0';
  fputs(line, c.out);
  fflush(c.out);
}

}  // namespace loom::log
