// What the fuzz targets share: the input as text, and a check that stops the run with a
// message (libFuzzer keeps the input that made it fail as a crash file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace loom::fuzz {

inline std::string text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// A property of the parser that must hold for every input.
#define LOOM_FUZZ_CHECK(cond, ...)                                          \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "fuzz check failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                         \
      fprintf(stderr, "\n");                                                \
      abort();                                                              \
    }                                                                       \
  } while (0)

}  // namespace loom::fuzz
