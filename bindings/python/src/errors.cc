#include "bindings/python/src/errors.h"

#include <cstdarg>
#include <cstdio>

namespace py = pybind11;

namespace loompy {

namespace {
// result code -> exception class; leaked, so that nothing touches Python at process exit.
py::dict* gClasses = nullptr;
}  // namespace

std::string format(const char* fmt, ...) {
  char text[1024];  // a message; longer ones are cut
  va_list args;
  va_start(args, fmt);
  vsnprintf(text, sizeof text, fmt, args);
  va_end(args);
  return text;
}

void fail(loomResult_t result, std::string message) { throw Error{result, std::move(message)}; }

void invalid(const char* fn, const std::string& message) {
  fail(loomInvalidArgument, format("loom.%s: %s", fn, message.c_str()));
}

void check(loomResult_t rc) {
  if (rc != loomSuccess) fail(rc, loomGetLastError(nullptr));
}

void bindErrors(py::module_& m) {
  m.def("_set_error_classes", [](py::dict classes) {
    if (gClasses == nullptr) gClasses = new py::dict();
    *gClasses = std::move(classes);
  });
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      py::gil_scoped_acquire gil;
      py::int_ code(int(e.result));
      py::object cls = gClasses && gClasses->contains(code) ? (*gClasses)[code]
                                                            : py::reinterpret_borrow<py::object>(
                                                                  PyExc_RuntimeError);
      py::object error = cls(e.message);
      PyErr_SetObject(cls.ptr(), error.ptr());
    }
  });
}

}  // namespace loompy
