#include "bindings/python/src/buffers.h"

#include <cstring>

#include "bindings/python/src/errors.h"

namespace py = pybind11;

namespace loompy {
namespace {

struct NamedType {
  const char* name;
  loomDataType_t dtype;
  size_t size;
};
// NumPy's (and ml_dtypes', and PyTorch's) names of loom's datatypes.
constexpr NamedType kTypes[] = {
    {"int8", loomInt8, 1},         {"uint8", loomUint8, 1},
    {"int32", loomInt32, 4},       {"uint32", loomUint32, 4},
    {"int64", loomInt64, 8},       {"uint64", loomUint64, 8},
    {"float16", loomFloat16, 2},   {"bfloat16", loomBfloat16, 2},
    {"float32", loomFloat32, 4},   {"float64", loomFloat64, 8},
    {"float8_e4m3fn", loomFloat8e4m3, 1}, {"float8_e5m2", loomFloat8e5m2, 1},
};

int lookup(const std::string& name) {
  for (const NamedType& t : kTypes)
    if (name == t.name) return t.dtype;
  return -1;
}

// An element of a kind ("int", "uint", "float", "bfloat", "complex", "bool") and size.
Element element(const std::string& kind, size_t bytes) {
  Element e;
  e.size = bytes;
  if (kind == "bool") {
    e.name = "bool";
    e.dtype = bytes == 1 ? loomUint8 : -1;
    e.boolean = true;
  } else if (kind == "complex") {
    e.name = "complex" + std::to_string(bytes * 8);
    e.dtype = lookup("float" + std::to_string(bytes * 4));
    e.parts = 2;
  } else {
    e.name = kind + std::to_string(bytes * 8);
    e.dtype = lookup(e.name);
  }
  return e;
}

// The element of a buffer-protocol format (the struct module's codes).
Element fromFormat(const char* format, size_t itemsize) {
  std::string f = format ? format : "B";
  bool foreignOrder = false;
  if (!f.empty() && strchr("@=<>!", f[0])) {
    foreignOrder = f[0] == '>' || f[0] == '!';  // this is a little-endian machine
    f.erase(0, 1);
  }
  std::string kind;
  if (f.size() == 1 && strchr("bhilqn", f[0])) kind = "int";
  else if (f.size() == 1 && strchr("BHILQNc", f[0])) kind = "uint";
  else if (f.size() == 1 && strchr("efdg", f[0])) kind = "float";
  else if (f == "?") kind = "bool";
  else if (f == "Zf" || f == "Zd" || f == "Zg") kind = "complex";
  Element e;
  e.size = itemsize;
  if (kind.empty()) {
    e.name = format ? format : "";
    e.name = "elements of format '" + e.name + "'";
    return e;
  }
  e = element(kind, itemsize);
  if (foreignOrder) {
    e.name = "big-endian " + e.name;
    e.dtype = -1;
  }
  return e;
}

// "numpy.ndarray", "torch.Tensor", "bytes".
std::string typeName(py::handle obj) {
  py::handle type = py::type::handle_of(obj);
  std::string module = py::str(type.attr("__module__"));
  std::string name = py::str(type.attr("__qualname__"));
  return module == "builtins" ? name : module + "." + name;
}

[[noreturn]] void refuse(const char* fn, const char* what, py::handle obj, const std::string& why) {
  invalid(fn, format("%s (a %s) %s", what, typeName(obj).c_str(), why.c_str()));
}

// The message of the Python error being raised, which is cleared.
std::string takeError() {
  py::error_already_set e;
  return e.what();
}

bool fromBufferProtocol(py::handle obj, Buffer* b, std::string* whyNot) {
  auto view = py::reinterpret_steal<py::object>(PyMemoryView_FromObject(obj.ptr()));
  if (!view) {
    *whyNot = takeError();
    return false;
  }
  Py_buffer* v = PyMemoryView_GET_BUFFER(view.ptr());
  if (!PyBuffer_IsContiguous(v, 'C')) {
    *whyNot = "is not C-contiguous (copy it first, e.g. numpy.ascontiguousarray)";
    return false;
  }
  b->holder = view;
  b->data = static_cast<char*>(v->buf);
  b->bytes = size_t(v->len);
  b->readonly = v->readonly != 0;
  b->element = fromFormat(v->format, size_t(v->itemsize));
  return true;
}

// DLPack's C ABI (0.x, as PyTorch and NumPy export it): the capsule "dltensor" points at a
// managed tensor whose first member is this description. The capsule, kept unconsumed while
// the call runs, gives the memory back when it is freed.
struct DLDevice {
  int32_t type;  // 1: CPU, 3: CUDA pinned host memory
  int32_t id;
};
struct DLDataType {
  uint8_t code;  // 0 int, 1 uint, 2 float, 4 bfloat, 5 complex, 6 bool
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null: compact row-major
  uint64_t byteOffset;
};

bool fromDlpack(py::handle obj, Buffer* b, std::string* whyNot) {
  py::object capsule;
  try {
    // A tensor that requires grad exports only through detach(), which shares its memory, as
    // torch.distributed writes such tensors in place.
    py::object exporter = py::reinterpret_borrow<py::object>(obj);
    if (py::hasattr(obj, "requires_grad") && py::bool_(obj.attr("requires_grad")))
      exporter = obj.attr("detach")();
    capsule = exporter.attr("__dlpack__")();
  } catch (py::error_already_set& e) {
    *whyNot = std::string("cannot be read through DLPack: ") + e.what();
    return false;
  }
  auto* t = static_cast<DLTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (t == nullptr) {
    *whyNot = "gave a DLPack capsule that is not a \"dltensor\": " + takeError();
    return false;
  }
  if (t->device.type != 1 && t->device.type != 3) {
    *whyNot = format("is on a device (DLPack device type %d); loom's Python package takes host "
                     "memory", t->device.type);
    return false;
  }
  static const char* kKinds[] = {"int", "uint", "float", nullptr, "bfloat", "complex", "bool"};
  const char* kind = t->dtype.code < 7 ? kKinds[t->dtype.code] : nullptr;
  if (kind == nullptr || t->dtype.lanes != 1 || t->dtype.bits % 8 != 0) {
    *whyNot = format("has a DLPack element type loom cannot read (code %d, %d bits, %d lanes)",
                     t->dtype.code, t->dtype.bits, t->dtype.lanes);
    return false;
  }
  size_t elements = 1;
  int64_t expected = 1;  // the stride of a C-contiguous tensor, innermost first
  bool contiguous = true;
  for (int d = t->ndim - 1; d >= 0; --d) {
    if (t->strides != nullptr && t->shape[d] != 1 && t->strides[d] != expected)
      contiguous = false;
    expected *= t->shape[d];
    elements *= size_t(t->shape[d]);
  }
  if (!contiguous) {
    *whyNot = "is not C-contiguous (copy it first, e.g. tensor.contiguous())";
    return false;
  }
  b->holder = capsule;
  b->data = static_cast<char*>(t->data) + t->byteOffset;
  b->element = element(kind, t->dtype.bits / 8);
  b->bytes = elements * b->element.size;
  return true;
}

// NumPy arrays of ml_dtypes' types (bfloat16, float8_*), which NumPy exports neither as
// buffers nor through DLPack.
bool fromArrayInterface(py::handle obj, Buffer* b, std::string* whyNot) {
  py::dict face = obj.attr("__array_interface__");
  if (!face.contains("strides") || !face["strides"].is_none()) {
    *whyNot = "is not C-contiguous (copy it first, e.g. numpy.ascontiguousarray)";
    return false;
  }
  py::tuple data = face["data"];
  py::object dtype = obj.attr("dtype");
  b->element = Element{};
  b->element.name = py::str(dtype.attr("name"));
  b->element.size = dtype.attr("itemsize").cast<size_t>();
  b->element.dtype = lookup(b->element.name);
  size_t elements = 1;
  for (py::handle extent : py::tuple(face["shape"])) elements *= extent.cast<size_t>();
  b->holder = py::reinterpret_borrow<py::object>(obj);
  b->data = reinterpret_cast<char*>(data[0].cast<uintptr_t>());
  b->readonly = py::bool_(data[1]);
  b->bytes = elements * b->element.size;
  return true;
}

}  // namespace

Buffer acquire(py::handle obj, const char* fn, const char* what, bool written, bool optional) {
  Buffer b;
  b.source = py::reinterpret_borrow<py::object>(obj);
  b.what = what;
  if (obj.is_none()) {
    if (!optional) invalid(fn, format("%s is None: this call needs a buffer", what));
    return b;
  }
  std::string whyNot;
  bool ok = false;
  bool tried = false;
  if (PyObject_CheckBuffer(obj.ptr())) {
    tried = true;
    ok = fromBufferProtocol(obj, &b, &whyNot);
  }
  if (!ok && !tried && py::hasattr(obj, "__dlpack__")) {
    tried = true;
    ok = fromDlpack(obj, &b, &whyNot);
  }
  if (!ok && py::hasattr(obj, "__array_interface__") && py::hasattr(obj, "dtype") &&
      lookup(py::str(obj.attr("dtype").attr("name"))) >= 0) {
    tried = true;
    whyNot.clear();
    ok = fromArrayInterface(obj, &b, &whyNot);
  }
  if (!tried)
    refuse(fn, what, obj,
           "is not a buffer: pass a NumPy array, bytes, bytearray, memoryview, a CPU "
           "torch.Tensor, or an object with the buffer protocol or __dlpack__");
  if (!ok) refuse(fn, what, obj, whyNot);
  if (written && b.readonly)
    refuse(fn, what, obj, "is read-only, and this call writes it: pass a writable buffer");
  return b;
}

size_t datatypeSize(loomDataType_t dtype) {
  for (const NamedType& t : kTypes)
    if (t.dtype == dtype) return t.size;
  return 0;
}

const char* datatypeName(loomDataType_t dtype) {
  for (const NamedType& t : kTypes)
    if (t.dtype == dtype) return t.name;
  return "unknown";
}

std::optional<loomDataType_t> datatypeOf(py::handle spec) {
  if (py::isinstance<loomDataType_t>(spec)) return spec.cast<loomDataType_t>();
  std::string name;
  if (py::isinstance<py::str>(spec)) name = spec.cast<std::string>();
  else if (PyType_Check(spec.ptr())) name = py::str(spec.attr("__name__"));  // numpy.float32
  else if (py::hasattr(spec, "itemsize") && py::hasattr(spec, "name"))       // numpy.dtype
    name = py::str(spec.attr("name"));
  else name = py::str(spec);                                                 // torch.float16
  if (name.rfind("torch.", 0) == 0) name.erase(0, 6);
  int dtype = lookup(name);
  if (dtype < 0) return std::nullopt;
  return loomDataType_t(dtype);
}

}  // namespace loompy
