// loom's errors as Python exceptions. A failed call throws Error, which the module turns into
// the loom.Error subclass of its result code (the classes are loom/errors.py's, handed to the
// extension when the package imports it).
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "loom/loom.h"

namespace loompy {

struct Error {
  loomResult_t result;
  std::string message;
};

// printf into a std::string, for messages (up to 1 KiB).
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

[[noreturn]] void fail(loomResult_t result, std::string message);
// An invalid argument found by the binding itself, with the call's name in front.
[[noreturn]] void invalid(const char* fn, const std::string& message);
// Throws Error carrying the calling thread's last loom error unless rc is loomSuccess. Call it
// in the thread that made the failed call, before that thread calls loom again.
void check(loomResult_t rc);

// call() with the GIL released, for calls that wait (on other ranks).
template <typename Call>
loomResult_t released(Call&& call) {
  pybind11::gil_scoped_release nogil;
  return call();
}

// _set_error_classes(dict result code -> class) and the translation of Error.
void bindErrors(pybind11::module_& m);

}  // namespace loompy
