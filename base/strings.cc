#include <cstdarg>
#include <cstdio>

#include "base/dtype.h"
#include "base/status.h"

namespace loom {

std::string strprintf(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string s(n > 0 ? size_t(n) : 0, '\0');
  if (n > 0) vsnprintf(s.data(), s.size() + 1, fmt, ap2);
  va_end(ap2);
  return s;
}

std::string jsonString(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      out += strprintf("\\u%04x", ch);
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string rankRanges(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t end = i + 1;  // [i, end) is a run of consecutive ranks
    while (end < ranks.size() && ranks[end] == ranks[end - 1] + 1) ++end;
    if (!out.empty()) out += ", ";
    if (end - i >= 3) {
      out += strprintf("%d-%d", ranks[i], ranks[end - 1]);
    } else {
      out += std::to_string(ranks[i]);
      if (end - i == 2) out += ", " + std::to_string(ranks[i + 1]);
    }
    i = end;
  }
  return out;
}

const char* dtypeName(loomDataType_t d) {
  static const char* const kNames[] = {"int8",  "uint8",    "int32", "uint32",
                                       "int64", "uint64",   "half",  "bfloat16",
                                       "float", "double",   "f8e4m3", "f8e5m2"};
  return validDtype(d) ? kNames[d] : "invalid";
}

const char* opName(loomRedOp_t op) {
  static const char* const kNames[] = {"sum", "prod", "min", "max", "avg"};
  return validOp(op) ? kNames[op] : "invalid";
}

}  // namespace loom
