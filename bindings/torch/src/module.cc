// loom._loom_torch: the process group class, for loom/torch.py to register as backend "loom".
#include <pybind11/chrono.h>
#include <torch/python.h>

#include "process_group.h"

namespace py = pybind11;

PYBIND11_MODULE(_loom_torch, m) {
  // The base class's Python type, registered by torch's C extension (in 2.x,
  // torch.distributed.Backend is another class: the Python enum of backend names).
  py::object base = py::module_::import("torch._C._distributed_c10d").attr(
#if TORCH_VERSION_MAJOR >= 2
      "Backend"
#else
      "ProcessGroup"
#endif
  );
  py::class_<loom_torch::LoomProcessGroup, c10::intrusive_ptr<loom_torch::LoomProcessGroup>>(
      m, "ProcessGroupLoom", base)
      .def(py::init([](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                       std::chrono::duration<double> timeout) {
             return c10::make_intrusive<loom_torch::LoomProcessGroup>(
                 store, rank, size,
                 std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
           }),
           py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>());
}
