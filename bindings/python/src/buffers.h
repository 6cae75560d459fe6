// The caller's buffers: any object with the buffer protocol (NumPy arrays, bytes, bytearray,
// memoryview, array.array), DLPack (__dlpack__: PyTorch CPU tensors, which lack the buffer
// protocol) or the array interface (NumPy arrays of ml_dtypes' bfloat16 and fp8 types, which
// NumPy cannot export as buffers), as memory, size and element type; and loom's datatypes.
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>

#include "loom/loom.h"

namespace loompy {

// An element type as the exporter describes it.
struct Element {
  std::string name = "uint8";  // NumPy's spelling: "float32", "complex64", "bool", "int16"
  size_t size = 1;             // bytes
  int dtype = -1;              // loom's datatype of the element (or of each part); -1: none
  int parts = 1;               // 2 for a complex number: its real and imaginary part
  bool boolean = false;
};

struct Buffer {
  const char* what = "";    // its name in errors: "send", "recv"
  pybind11::object source;  // what the caller passed; None when absent
  pybind11::object holder;  // what keeps the memory exported: a memoryview, a DLPack capsule
  char* data = nullptr;
  size_t bytes = 0;
  bool readonly = false;
  Element element;
  bool present() const { return source && !source.is_none(); }
};

// The memory of obj, which must be C-contiguous. fn and what name the call and the argument in
// errors; written: the call writes it (a read-only one is refused); optional: None is allowed
// (an absent buffer).
Buffer acquire(pybind11::handle obj, const char* fn, const char* what, bool written,
               bool optional = false);

size_t datatypeSize(loomDataType_t dtype);
const char* datatypeName(loomDataType_t dtype);  // "float32", "bfloat16", "float8_e4m3fn"
// A loom.DataType, or what names one: a NumPy or PyTorch dtype, or a name ("float16",
// "bfloat16", "float8_e4m3fn"); nullopt when it names none of loom's.
std::optional<loomDataType_t> datatypeOf(pybind11::handle spec);

}  // namespace loompy
