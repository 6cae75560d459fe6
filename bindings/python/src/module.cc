// loom._loom: the extension module of the loom package (loom/__init__.py re-exports it), over
// loom's public C API alone.
#include <pybind11/pybind11.h>

#include "bindings/python/src/buffers.h"
#include "bindings/python/src/communicator.h"
#include "bindings/python/src/errors.h"
#include "loom/loom.h"

namespace py = pybind11;
using namespace loompy;

namespace {

void bindTypes(py::module_& m) {
  py::enum_<loomDataType_t>(m, "DataType", "loom's datatypes (loomDataType_t).")
      .value("INT8", loomInt8)
      .value("UINT8", loomUint8)
      .value("INT32", loomInt32)
      .value("UINT32", loomUint32)
      .value("INT64", loomInt64)
      .value("UINT64", loomUint64)
      .value("FLOAT16", loomFloat16)
      .value("BFLOAT16", loomBfloat16)
      .value("FLOAT32", loomFloat32)
      .value("FLOAT64", loomFloat64)
      .value("FLOAT8_E4M3", loomFloat8e4m3)
      .value("FLOAT8_E5M2", loomFloat8e5m2)
      .export_values()
      .def_property_readonly("itemsize", [](loomDataType_t t) { return datatypeSize(t); })
      .def_property_readonly("numpy_name", [](loomDataType_t t) { return datatypeName(t); });
  py::enum_<loomRedOp_t>(m, "RedOp", "loom's reduction ops (loomRedOp_t).")
      .value("SUM", loomSum)
      .value("PROD", loomProd)
      .value("MIN", loomMin)
      .value("MAX", loomMax)
      .value("AVG", loomAvg)
      .export_values();
}

// loom.datatype(x): the loom datatype x names (a DataType, NumPy or PyTorch dtype, a name) or
// that buffer x holds.
loomDataType_t datatype(py::handle x) {
  const char* fn = "datatype";
  if (auto d = datatypeOf(x)) return *d;
  bool isBuffer = PyObject_CheckBuffer(x.ptr()) || py::hasattr(x, "__dlpack__") ||
                  py::hasattr(x, "__array_interface__");
  if (!isBuffer)
    invalid(fn, format("%s names none of loom's datatypes",
                       py::repr(x).cast<std::string>().c_str()));
  Buffer b = acquire(x, fn, "the buffer", false);
  if (b.element.dtype < 0 || b.element.parts != 1 || b.element.boolean)
    invalid(fn, format("the buffer holds %s, which is none of loom's datatypes",
                       b.element.name.c_str()));
  return loomDataType_t(b.element.dtype);
}

}  // namespace

PYBIND11_MODULE(_loom, m) {
  m.doc() = "loom's C API (include/loom/loom.h) for Python; use it as the package loom.";
  bindErrors(m);
  bindTypes(m);
  bindCommunicator(m);
  m.def("datatype", &datatype, py::arg("x"));
  m.def("_info_json", [] {
    const char* json = nullptr;
    check(loomGetInfo(&json));
    return std::string(json);
  });
  m.def("_version_code", [] {
    int version = 0;
    check(loomGetVersion(&version));
    return version;
  });
}
