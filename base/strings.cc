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
