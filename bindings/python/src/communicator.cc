#include "bindings/python/src/communicator.h"

#include <pybind11/stl.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace py = pybind11;

namespace loompy {

loomConfig_t Options::config() const {
  loomConfig_t c = LOOM_CONFIG_INITIALIZER;
  c.timeoutMs = timeoutMs;
  c.algorithms = algorithms ? algorithms->c_str() : nullptr;
  c.transport = transport ? transport->c_str() : nullptr;
  return c;
}

Options readOptions(py::handle timeout, py::handle algorithms, py::handle transport) {
  const char* fn = "Communicator";
  Options o;
  if (!timeout.is_none()) {
    double seconds = py::hasattr(timeout, "total_seconds")
                         ? timeout.attr("total_seconds")().cast<double>()
                         : py::float_(py::reinterpret_borrow<py::object>(timeout)).cast<double>();
    if (!(seconds > 0) || seconds * 1000 > 2e9)
      invalid(fn, format("timeout %g s must be positive and under 2e6 s", seconds));
    o.timeoutMs = int(std::ceil(seconds * 1000));
  }
  if (!algorithms.is_none()) o.algorithms = algorithms.cast<std::string>();
  if (!transport.is_none()) o.transport = transport.cast<std::string>();
  return o;
}

Communicator::Communicator(loomComm_t handle, Options options)
    : state_(std::make_shared<CommState>()) {
  state_->handle = handle;
  state_->options = std::move(options);
  check(loomCommUserRank(handle, &state_->rank));
  check(loomCommCount(handle, &state_->size));
}

Communicator::~Communicator() {
  if (state_->handle == nullptr) return;
  loomComm_t handle = std::exchange(state_->handle, nullptr);
  released([&] { return loomCommDestroy(handle); });  // an error has nobody to go to here
}

loomComm_t Communicator::live(const char* fn) const {
  if (state_->handle == nullptr)
    fail(loomInvalidUsage, format("loom.%s: the communicator was destroyed (or aborted); it "
                                  "cannot be used", fn));
  return state_->handle;
}

ReduceOp Communicator::reduceOp(const char* fn, py::handle op) const {
  if (py::isinstance<PreMulSum>(op)) {
    const auto& p = op.cast<const PreMulSum&>();
    if (p.comm != state_) invalid(fn, "op is a premul_sum op of another communicator");
    if (p.destroyed) invalid(fn, "op is a premul_sum op that was destroyed");
    return {p.op, p.dtype};
  }
  if (!py::isinstance<loomRedOp_t>(op))
    invalid(fn, format("op %s is not a reduction: pass loom.SUM, PROD, MIN, MAX, AVG or an op "
                       "of Communicator.premul_sum", py::repr(op).cast<std::string>().c_str()));
  return {op.cast<loomRedOp_t>(), -1};
}

void Communicator::end(loomResult_t (*end)(loomComm_t)) {
  if (state_->handle == nullptr) return;
  loomComm_t handle = std::exchange(state_->handle, nullptr);
  check(released([&] { return end(handle); }));
}

void Communicator::destroy() {
  if (state_->handle != nullptr && state_->inFlight > 0)
    fail(loomInvalidUsage, "loom.Communicator.destroy: a call on the communicator runs in "
                           "another thread; abort() stops it");
  end(loomCommDestroy);
}

void Communicator::abort() { end(loomCommAbort); }

void PreMulSum::destroy() {
  if (destroyed) return;
  destroyed = true;
  if (comm->handle != nullptr) check(loomRedOpDestroy(op, comm->handle));
}

PreMulSum::~PreMulSum() {
  if (!destroyed && comm->handle != nullptr) loomRedOpDestroy(op, comm->handle);
}

namespace {

thread_local int tGroupDepth = 0;
py::object* gThreadLocal = nullptr;  // a threading.local holding each thread's group's buffers

py::list groupHeld() {
  return gThreadLocal->attr("__dict__").attr("setdefault")("held", py::list());
}

struct UniqueId {
  loomUniqueId id;
};

UniqueId uniqueIdFrom(py::handle obj) {
  if (py::isinstance<UniqueId>(obj)) return obj.cast<UniqueId>();
  Buffer b = acquire(obj, "UniqueId", "the id", false);
  if (b.bytes != LOOM_UNIQUE_ID_BYTES)
    invalid("UniqueId", format("the id holds %zu bytes; a loom unique id is %d", b.bytes,
                               LOOM_UNIQUE_ID_BYTES));
  UniqueId u;
  memcpy(u.id.internal, b.data, LOOM_UNIQUE_ID_BYTES);
  return u;
}

py::bytes uniqueIdBytes(const UniqueId& u) { return py::bytes(u.id.internal, sizeof u.id); }

void bindUniqueId(py::module_& m) {
  py::class_<UniqueId>(m, "UniqueId", py::buffer_protocol(), R"doc(
A communicator's id: made once (UniqueId() starts the rendezvous in this process, which then
serves it until every rank has left) and handed to every rank. It is 128 bytes: bytes(uid),
UniqueId(those bytes), and pickling (multiprocessing, a store) carry it.)doc")
      .def(py::init([] {
        UniqueId u;
        check(loomGetUniqueId(&u.id));
        return u;
      }))
      .def(py::init(&uniqueIdFrom), py::arg("data"))
      .def_buffer([](UniqueId& u) {
        return py::buffer_info(u.id.internal, 1, "B", 1, {LOOM_UNIQUE_ID_BYTES}, {1}, true);
      })
      .def("__bytes__", &uniqueIdBytes)
      .def("__len__", [](const UniqueId&) { return LOOM_UNIQUE_ID_BYTES; })
      .def("__eq__", [](const UniqueId& a, py::handle b) {
        return py::isinstance<UniqueId>(b) &&
               memcmp(a.id.internal, b.cast<const UniqueId&>().id.internal, sizeof a.id) == 0;
      })
      .def("__hash__", [](const UniqueId& u) { return py::hash(uniqueIdBytes(u)); })
      .def("__repr__", [](const UniqueId&) { return "loom.UniqueId(<128 bytes>)"; })
      .def(py::pickle(&uniqueIdBytes, [](py::bytes b) { return uniqueIdFrom(b); }));
}

// A new communicator's handle, made by init with the GIL released (inits wait for the other
// ranks); null for a rank that joins none (a split's LOOM_SPLIT_NOCOLOR).
template <typename Init>
loomComm_t makeHandle(const Options& options, Init&& init) {
  loomConfig_t config = options.config();
  loomComm_t handle = nullptr;
  check(released([&] { return init(&handle, &config); }));
  return handle;
}

py::object wrap(loomComm_t handle, const Options& options) {
  if (handle == nullptr) return py::none();
  return py::cast(std::make_unique<Communicator>(handle, options));
}

std::unique_ptr<Communicator> construct(py::handle id, int rank, int size, py::handle timeout,
                                        py::handle algorithms, py::handle transport) {
  UniqueId u = uniqueIdFrom(id);
  Options options = readOptions(timeout, algorithms, transport);
  loomComm_t handle = makeHandle(options, [&](loomComm_t* h, const loomConfig_t* config) {
    return loomCommInitRankConfig(h, size, u.id, rank, config);
  });
  return std::make_unique<Communicator>(handle, options);
}

std::unique_ptr<Communicator> fromEnv(py::handle timeout, py::handle algorithms,
                                      py::handle transport) {
  Options options = readOptions(timeout, algorithms, transport);
  return std::make_unique<Communicator>(makeHandle(options, loomCommInitFromEnv), options);
}

py::object split(Communicator& c, py::handle color, py::handle key) {
  loomComm_t parent = c.live("Communicator.split");
  int colour = color.is_none() ? LOOM_SPLIT_NOCOLOR : color.cast<int>();
  int k = key.is_none() ? c.state()->rank : key.cast<int>();
  const Options& options = c.state()->options;
  return wrap(makeHandle(options, [&](loomComm_t* handle, const loomConfig_t* config) {
                return loomCommSplit(parent, colour, k, handle, config);
              }),
              options);
}

py::object shrink(Communicator& c, const std::vector<int>& exclude, bool abort) {
  loomComm_t parent = c.live("Communicator.shrink");
  const Options& options = c.state()->options;
  return wrap(makeHandle(options, [&](loomComm_t* handle, const loomConfig_t* config) {
                return loomCommShrink(parent, exclude.data(), int(exclude.size()), handle,
                                      config, abort ? LOOM_SHRINK_ABORT : LOOM_SHRINK_DEFAULT);
              }),
              options);
}

// The scalar of a premul_sum op as one element of dtype: a Python number, or a buffer that
// holds one element (the way to give an fp8 scalar).
std::string scalarBytes(py::handle scalar, loomDataType_t dtype) {
  const char* fn = "Communicator.premul_sum";
  std::string out(datatypeSize(dtype), '\0');
  if (!PyNumber_Check(scalar.ptr()) || PyObject_CheckBuffer(scalar.ptr()) ||
      py::hasattr(scalar, "__dlpack__")) {
    Buffer b = acquire(scalar, fn, "scalar", false);
    if (b.bytes != out.size())
      invalid(fn, format("scalar holds %zu bytes; one %s is %zu", b.bytes, datatypeName(dtype),
                         out.size()));
    memcpy(out.data(), b.data, out.size());
    return out;
  }
  static const char* kFormats[loomNumTypes] = {"b", "B", "i", "I", "q", "Q", "e", nullptr,
                                               "f", "d", nullptr, nullptr};
  py::object number = py::reinterpret_borrow<py::object>(scalar);
  if (dtype == loomBfloat16) {  // float32's upper half, rounded to nearest even
    float f = number.cast<float>();
    uint32_t bits;
    memcpy(&bits, &f, 4);
    uint16_t half = std::isnan(f) ? 0x7fc0 : uint16_t((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
    memcpy(out.data(), &half, 2);
    return out;
  }
  if (kFormats[dtype] == nullptr)
    invalid(fn, format("a %s scalar cannot be made from a Python number: pass a one-element "
                       "buffer of it (e.g. an ml_dtypes array)", datatypeName(dtype)));
  py::bytes packed = py::module_::import("struct").attr("pack")(kFormats[dtype], number);
  return packed;
}

py::object premulSum(Communicator& c, py::handle scalar, py::handle dtypeSpec) {
  const char* fn = "Communicator.premul_sum";
  auto dtype = datatypeOf(dtypeSpec);
  if (!dtype)
    invalid(fn, format("dtype %s is not one of loom's datatypes",
                       py::repr(dtypeSpec).cast<std::string>().c_str()));
  std::string bytes = scalarBytes(scalar, *dtype);
  auto p = std::make_unique<PreMulSum>();
  p->comm = c.state();
  p->dtype = *dtype;
  check(loomRedOpCreatePreMulSum(&p->op, bytes.data(), *dtype, c.live(fn)));
  return py::cast(p.release(), py::return_value_policy::take_ownership);
}

}  // namespace

void groupStart() {
  check(loomGroupStart());
  ++tGroupDepth;
}

void groupEnd() {
  loomResult_t rc = released(loomGroupEnd);
  if (tGroupDepth > 0 && --tGroupDepth == 0) groupHeld().attr("clear")();
  check(rc);
}

bool inGroup() { return tGroupDepth > 0; }

void holdUntilGroupEnd(std::initializer_list<const Buffer*> buffers) {
  py::list held = groupHeld();
  for (const Buffer* b : buffers)  // a block of another buffer (in place) has neither
    for (const py::object& o : {b->source, b->holder})
      if (o) held.append(o);
}

void bindCommunicator(py::module_& m) {
  gThreadLocal = new py::object(py::module_::import("threading").attr("local")());
  bindUniqueId(m);
  py::class_<PreMulSum>(m, "PreMulSum", "A reduction op of Communicator.premul_sum.")
      .def_property_readonly("dtype", [](const PreMulSum& p) { return p.dtype; })
      .def("destroy", &PreMulSum::destroy, "Frees the op (loomRedOpDestroy).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PreMulSum& p, py::args) { p.destroy(); });

  py::class_<Communicator> cls(m, "Communicator", R"doc(
A communicator: Communicator(unique_id, rank, size, timeout=None, algorithms=None,
transport=None) joins rank of size (it waits for the others); Communicator.from_env() joins as
the launcher's variables say (loomCommInitFromEnv). timeout is seconds or a timedelta;
algorithms (e.g. "allreduce=ring") and transport ("auto", "shm", "tcp", "ucx") as LOOM_ALGO and
LOOM_TRANSPORT. A context manager: leaving it destroys the communicator.

Collectives take send and recv buffers (C-contiguous; the datatype is theirs, or dtype=) and
return the one that holds the result; counts come from their sizes.)doc");
  cls.def(py::init(&construct), py::arg("unique_id"), py::arg("rank"), py::arg("size"),
          py::arg("timeout") = py::none(), py::arg("algorithms") = py::none(),
          py::arg("transport") = py::none())
      .def_static("from_env", &fromEnv, py::arg("timeout") = py::none(),
                  py::arg("algorithms") = py::none(), py::arg("transport") = py::none())
      .def_property_readonly("rank", [](const Communicator& c) { return c.state()->rank; })
      .def_property_readonly("size", [](const Communicator& c) { return c.state()->size; })
      .def_property_readonly("last_algorithm", [](const Communicator& c) {
        const char* name = "";
        check(loomCommGetLastAlgorithm(c.live("Communicator.last_algorithm"), &name));
        return std::string(name);
      })
      .def_property_readonly("closed", [](const Communicator& c) {
        return c.state()->handle == nullptr;
      })
      .def("split", &split, py::arg("color"), py::arg("key") = py::none())
      .def("shrink", &shrink, py::arg("exclude"), py::arg("abort") = false)
      .def("revoke", [](Communicator& c) {
        loomComm_t handle = c.live("Communicator.revoke");
        check(released([&] { return loomCommRevoke(handle); }));
      })
      .def("abort", &Communicator::abort)
      .def("destroy", &Communicator::destroy)
      .def("close", &Communicator::destroy)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](Communicator& c, py::args) { c.destroy(); })
      .def("premul_sum", &premulSum, py::arg("scalar"), py::arg("dtype"))
      .def("__repr__", [](const Communicator& c) {
        if (c.state()->handle == nullptr) return std::string("<loom.Communicator (destroyed)>");
        return format("<loom.Communicator rank %d of %d>", c.state()->rank, c.state()->size);
      });
  bindCollectives(cls);
  m.def("_group_start", &groupStart);
  m.def("_group_end", &groupEnd);
}

}  // namespace loompy
