// The collectives and point-to-point calls of loom.Communicator over the caller's buffers.
// Counts come from the buffers' sizes, checked against each other before loom is called (the C
// API cannot see a buffer's end); every call returns the buffer that holds its result: recv,
// or send when in place.
#include <pybind11/stl.h>

#include <vector>

#include "bindings/python/src/communicator.h"

namespace py = pybind11;

namespace loompy {
namespace {

bool reducibleComplex(const ReduceOp& r) {
  return r.premulDtype >= 0 || r.op == loomSum || r.op == loomAvg;
}

// The datatype a call on these buffers runs with: dtype= when given (their bytes read as that
// type), else their own element type. reduce: the call's reduction (null: it moves data, which
// any element type can, as bytes).
loomDataType_t callDatatype(const char* fn, std::initializer_list<const Buffer*> buffers,
                            py::handle dtype, const ReduceOp* reduce) {
  loomDataType_t dt = loomUint8;
  const Buffer* first = nullptr;
  for (const Buffer* b : buffers) {
    if (!b->present()) continue;
    if (first == nullptr) first = b;
    else if (dtype.is_none() && b->element.name != first->element.name)
      invalid(fn, format("%s holds %s and %s %s: they must be alike (or pass dtype=)",
                         first->what, first->element.name.c_str(), b->what,
                         b->element.name.c_str()));
  }
  if (!dtype.is_none()) {
    auto d = datatypeOf(dtype);
    if (!d)
      invalid(fn, format("dtype=%s is not one of loom's datatypes (int8, uint8, int32, uint32, "
                         "int64, uint64, float16, bfloat16, float32, float64, float8_e4m3fn, "
                         "float8_e5m2)", py::repr(dtype).cast<std::string>().c_str()));
    dt = *d;
  } else if (first != nullptr) {
    const Element& e = first->element;
    if (reduce != nullptr && e.dtype < 0)
      invalid(fn, format("%s holds %s, which loom cannot reduce (pass dtype= to read its bytes "
                         "as one of loom's datatypes)", first->what, e.name.c_str()));
    if (reduce != nullptr && e.parts == 2 && !reducibleComplex(*reduce))
      invalid(fn, format("%s holds %s: complex numbers reduce with SUM, AVG or a premul_sum "
                         "op only", first->what, e.name.c_str()));
    if (reduce != nullptr && e.boolean && reduce->op != loomMin && reduce->op != loomMax)
      invalid(fn, format("%s holds bool, which reduces with MIN or MAX only", first->what));
    if (e.dtype >= 0) dt = loomDataType_t(e.dtype);
  }
  if (reduce != nullptr && reduce->premulDtype >= 0 && reduce->premulDtype != dt)
    invalid(fn, format("op is a premul_sum op for %s, and this call reduces %s",
                       datatypeName(loomDataType_t(reduce->premulDtype)), datatypeName(dt)));
  return dt;
}

size_t countOf(const char* fn, const Buffer& b, loomDataType_t dt) {
  size_t size = datatypeSize(dt);
  if (b.bytes % size != 0)
    invalid(fn, format("%s holds %zu bytes, not a whole number of %s elements (%zu bytes)",
                       b.what, b.bytes, datatypeName(dt), size));
  return b.bytes / size;
}

void expectCount(const char* fn, const Buffer& b, loomDataType_t dt, size_t want,
                 const std::string& why) {
  size_t have = countOf(fn, b, dt);
  if (have != want)
    invalid(fn, format("%s holds %zu %s elements; %s", b.what, have, datatypeName(dt),
                       why.c_str()));
}

// b's count in dt split into one block per rank.
size_t blockCount(const char* fn, const Buffer& b, loomDataType_t dt, int size) {
  size_t n = countOf(fn, b, dt);
  if (n % size != 0)
    invalid(fn, format("%s holds %zu %s elements, which do not split into %d equal blocks "
                       "(one per rank)", b.what, n, datatypeName(dt), size));
  return n / size;
}

// Block `index` of `count` elements of whole, as the other buffer of an in-place call.
Buffer blockOf(const Buffer& whole, int index, size_t count, loomDataType_t dt,
               const char* what) {
  Buffer b;
  b.what = what;
  b.data = whole.data + size_t(index) * count * datatypeSize(dt);
  b.bytes = count * datatypeSize(dt);
  b.element = whole.element;
  return b;
}

std::string perRank(size_t count, int size) {
  return format("%zu (%zu from each of %d ranks)", count * size, count, size);
}

py::object allReduce(Communicator& c, py::handle send, py::handle recv, py::handle op,
                     py::handle dtype) {
  const char* fn = "Communicator.all_reduce";
  bool inPlace = recv.is_none();
  ReduceOp r = c.reduceOp(fn, op);
  Buffer in = acquire(send, fn, "send", inPlace);
  Buffer out = inPlace ? in : acquire(recv, fn, "recv", true);
  loomDataType_t dt = callDatatype(fn, {&in, &out}, dtype, &r);
  size_t n = countOf(fn, in, dt);
  expectCount(fn, out, dt, n, format("all_reduce needs %zu, as send", n));
  c.run(fn, {&in, &out}, [&](loomComm_t h) {
    return loomAllReduce(in.data, out.data, n, dt, r.op, h, nullptr);
  });
  return out.source;
}

py::object broadcast(Communicator& c, py::handle send, py::handle recv, int root,
                     py::handle dtype) {
  const char* fn = "Communicator.broadcast";
  bool isRoot = c.state()->rank == root;
  bool inPlace = recv.is_none();
  Buffer in = acquire(send, fn, "send", inPlace && !isRoot, !isRoot && !inPlace);
  Buffer out = inPlace ? in : acquire(recv, fn, "recv", true);
  loomDataType_t dt = callDatatype(fn, {&in, &out}, dtype, nullptr);
  size_t n = countOf(fn, out, dt);
  if (in.present()) expectCount(fn, in, dt, n, format("broadcast needs %zu, as recv", n));
  c.run(fn, {&in, &out}, [&](loomComm_t h) {
    return loomBroadcast(in.data, out.data, n, dt, root, h, nullptr);
  });
  return out.source;
}

py::object reduce(Communicator& c, py::handle send, py::handle recv, py::handle op, int root,
                  py::handle dtype) {
  const char* fn = "Communicator.reduce";
  bool isRoot = c.state()->rank == root;
  bool inPlace = recv.is_none();
  ReduceOp r = c.reduceOp(fn, op);
  Buffer in = acquire(send, fn, "send", inPlace && isRoot);
  Buffer out = inPlace ? in : acquire(isRoot ? recv : py::none(), fn, "recv", true, !isRoot);
  loomDataType_t dt = callDatatype(fn, {&in, &out}, dtype, &r);
  size_t n = countOf(fn, in, dt);
  if (isRoot) expectCount(fn, out, dt, n, format("reduce needs %zu, as send", n));
  c.run(fn, {&in, &out}, [&](loomComm_t h) {
    return loomReduce(in.data, out.data, n, dt, r.op, root, h, nullptr);
  });
  return inPlace ? in.source : py::reinterpret_borrow<py::object>(recv);
}

py::object allGather(Communicator& c, py::handle send, py::handle recv, py::handle dtype) {
  const char* fn = "Communicator.all_gather";
  const CommState& s = *c.state();
  Buffer out = acquire(recv, fn, "recv", true);
  Buffer in = acquire(send, fn, "send", false, true);
  loomDataType_t dt = callDatatype(fn, {&in, &out}, dtype, nullptr);
  size_t n;
  if (in.present()) {
    n = countOf(fn, in, dt);
    expectCount(fn, out, dt, n * s.size, "all_gather needs " + perRank(n, s.size));
  } else {  // in place: this rank's block of recv is its input
    n = blockCount(fn, out, dt, s.size);
    in = blockOf(out, s.rank, n, dt, "send");
  }
  c.run(fn, {&in, &out}, [&](loomComm_t h) {
    return loomAllGather(in.data, out.data, n, dt, h, nullptr);
  });
  return out.source;
}

py::object reduceScatter(Communicator& c, py::handle send, py::handle recv, py::handle op,
                         py::handle dtype) {
  const char* fn = "Communicator.reduce_scatter";
  const CommState& s = *c.state();
  bool inPlace = recv.is_none();
  ReduceOp r = c.reduceOp(fn, op);
  Buffer in = acquire(send, fn, "send", inPlace);
  Buffer out = acquire(recv, fn, "recv", true, true);
  loomDataType_t dt = callDatatype(fn, {&in, &out}, dtype, &r);
  size_t n = blockCount(fn, in, dt, s.size);
  if (inPlace) out = blockOf(in, s.rank, n, dt, "recv");  // the result is this rank's block
  else expectCount(fn, out, dt, n, format("reduce_scatter needs %zu (send's %zu / %d ranks)",
                                          n, n * s.size, s.size));
  c.run(fn, {&in, &out}, [&](loomComm_t h) {
    return loomReduceScatter(in.data, out.data, n, dt, r.op, h, nullptr);
  });
  return inPlace ? in.source : out.source;
}

py::object allToAll(Communicator& c, py::handle send, py::handle recv, py::handle dtype) {
  const char* fn = "Communicator.all_to_all";
  bool inPlace = recv.is_none();
  Buffer in = acquire(send, fn, "send", inPlace);
  Buffer out = inPlace ? in : acquire(recv, fn, "recv", true);
  loomDataType_t dt = callDatatype(fn, {&in, &out}, dtype, nullptr);
  size_t n = blockCount(fn, in, dt, c.state()->size);
  expectCount(fn, out, dt, n * c.state()->size,
              format("all_to_all needs %zu, as send", n * c.state()->size));
  c.run(fn, {&in, &out}, [&](loomComm_t h) {
    return loomAlltoAll(in.data, out.data, n, dt, h, nullptr);
  });
  return out.source;
}

// Counts and displacements in loom's elements: the caller's are in the buffers' elements (a
// complex number is two of loom's, an int16 two bytes), or in dtype='s. Displacements not given
// put each block right after the one before.
struct Blocks {
  std::vector<size_t> counts, displs;
};
Blocks blocks(const char* fn, const char* what, const std::vector<size_t>& counts,
              const std::optional<std::vector<size_t>>& displs, int size, size_t scale) {
  if (int(counts.size()) != size)
    invalid(fn, format("%s_counts has %zu entries; the communicator has %d ranks", what,
                       counts.size(), size));
  if (displs && int(displs->size()) != size)
    invalid(fn, format("%s_displs has %zu entries; the communicator has %d ranks", what,
                       displs->size(), size));
  Blocks b{counts, displs ? *displs : std::vector<size_t>(size)};
  for (int r = 1; r < size && !displs; ++r) b.displs[r] = b.displs[r - 1] + counts[r - 1];
  for (int r = 0; r < size; ++r) {
    b.counts[r] *= scale;
    b.displs[r] *= scale;
  }
  return b;
}

void expectBlocksFit(const char* fn, const Buffer& b, loomDataType_t dt, const Blocks& k) {
  size_t n = countOf(fn, b, dt);
  for (size_t r = 0; r < k.counts.size(); ++r)
    if (k.counts[r] > 0 && (k.displs[r] > n || k.counts[r] > n - k.displs[r]))
      invalid(fn, format("%s holds %zu %s elements; its block %zu (%zu at %zu) ends past them",
                         b.what, n, datatypeName(dt), r, k.counts[r], k.displs[r]));
}

py::object allToAllv(Communicator& c, py::handle send, const std::vector<size_t>& sendCounts,
                     py::handle recv, const std::vector<size_t>& recvCounts,
                     const std::optional<std::vector<size_t>>& sendDispls,
                     const std::optional<std::vector<size_t>>& recvDispls, py::handle dtype) {
  const char* fn = "Communicator.all_to_allv";
  int size = c.state()->size;
  Buffer in = acquire(send, fn, "send", false);
  Buffer out = acquire(recv, fn, "recv", true);
  loomDataType_t dt = callDatatype(fn, {&in, &out}, dtype, nullptr);
  size_t scale = dtype.is_none() ? in.element.size / datatypeSize(dt) : 1;
  Blocks s = blocks(fn, "send", sendCounts, sendDispls, size, scale);
  Blocks r = blocks(fn, "recv", recvCounts, recvDispls, size, scale);
  expectBlocksFit(fn, in, dt, s);
  expectBlocksFit(fn, out, dt, r);
  c.run(fn, {&in, &out}, [&](loomComm_t h) {
    return loomAlltoAllv(in.data, s.counts.data(), s.displs.data(), out.data, r.counts.data(),
                         r.displs.data(), dt, h, nullptr);
  });
  return out.source;
}

// Gather's and scatter's buffers: each rank's part (count elements) and the root's whole (a
// block per rank; other ranks' is ignored). In place on the root, its part is whole's block.
struct Rooted {
  Buffer part, whole;
  size_t count;
  loomDataType_t dt;
};
Rooted rooted(const Communicator& c, const char* fn, py::handle part, py::handle whole,
              bool gathers, int root, py::handle dtype) {
  const CommState& s = *c.state();
  bool isRoot = s.rank == root;
  const char* partName = gathers ? "send" : "recv";
  const char* wholeName = gathers ? "recv" : "send";
  Rooted r;
  r.whole = acquire(isRoot ? whole : py::none(), fn, wholeName, gathers, !isRoot);
  r.part = acquire(part, fn, partName, !gathers, isRoot);
  r.dt = callDatatype(fn, {&r.part, &r.whole}, dtype, nullptr);
  if (r.part.present()) {
    r.count = countOf(fn, r.part, r.dt);
    if (isRoot)
      expectCount(fn, r.whole, r.dt, r.count * s.size,
                  std::string(gathers ? "gather" : "scatter") + " needs " +
                      perRank(r.count, s.size));
  } else {
    r.count = blockCount(fn, r.whole, r.dt, s.size);
    r.part = blockOf(r.whole, root, r.count, r.dt, partName);
  }
  return r;
}

// gather (gathers) or scatter. Returns recv: the root's whole for gather (None elsewhere), the
// part for scatter (send in place).
py::object rootedCall(Communicator& c, py::handle send, py::handle recv, int root,
                      py::handle dtype, bool gathers) {
  const char* fn = gathers ? "Communicator.gather" : "Communicator.scatter";
  Rooted r = gathers ? rooted(c, fn, send, recv, true, root, dtype)
                     : rooted(c, fn, recv, send, false, root, dtype);
  c.run(fn, {&r.part, &r.whole}, [&](loomComm_t h) {
    return gathers ? loomGather(r.part.data, r.whole.data, r.count, r.dt, root, h, nullptr)
                   : loomScatter(r.whole.data, r.part.data, r.count, r.dt, root, h, nullptr);
  });
  return !gathers && r.part.present() ? r.part.source : r.whole.source;
}

py::object gather(Communicator& c, py::handle send, py::handle recv, int root, py::handle dt) {
  return rootedCall(c, send, recv, root, dt, true);
}

py::object scatter(Communicator& c, py::handle send, py::handle recv, int root, py::handle dt) {
  return rootedCall(c, send, recv, root, dt, false);
}

// send (isSend) or recv: buf's elements to or from peer.
py::object pointToPoint(Communicator& c, py::handle buf, int peer, py::handle dtype,
                        bool isSend) {
  const char* fn = isSend ? "Communicator.send" : "Communicator.recv";
  Buffer b = acquire(buf, fn, "buf", !isSend);
  loomDataType_t dt = callDatatype(fn, {&b}, dtype, nullptr);
  size_t n = countOf(fn, b, dt);
  c.run(fn, {&b}, [&](loomComm_t h) {
    return isSend ? loomSend(b.data, n, dt, peer, h, nullptr)
                  : loomRecv(b.data, n, dt, peer, h, nullptr);
  });
  return b.source;
}

py::object send(Communicator& c, py::handle buf, int peer, py::handle dtype) {
  return pointToPoint(c, buf, peer, dtype, true);
}

py::object recv(Communicator& c, py::handle buf, int peer, py::handle dtype) {
  return pointToPoint(c, buf, peer, dtype, false);
}

}  // namespace

void bindCollectives(py::class_<Communicator>& cls) {
  using py::arg;
  auto none = py::none();
  auto sum = py::cast(loomSum);
  cls.def("all_reduce", &allReduce,
          "Every rank gets the reduction (op) of all ranks' send: in recv, or in send when "
          "recv is None.",
          arg("send"), arg("recv") = none, arg("op") = sum, py::kw_only(), arg("dtype") = none)
      .def("broadcast", &broadcast,
           "root's send into every rank's recv (send itself when recv is None); send is read "
           "on root only.",
           arg("send"), arg("recv") = none, arg("root") = 0, py::kw_only(), arg("dtype") = none)
      .def("reduce", &reduce,
           "The reduction (op) of all ranks' send into root's recv (send when recv is None).",
           arg("send"), arg("recv") = none, arg("op") = sum, arg("root") = 0, py::kw_only(),
           arg("dtype") = none)
      .def("all_gather", &allGather,
           "Every rank's send, in rank order, into every rank's recv. send None: in place "
           "(this rank's block of recv is its input).",
           arg("send"), arg("recv"), py::kw_only(), arg("dtype") = none)
      .def("reduce_scatter", &reduceScatter,
           "Block r of the reduction (op) of all ranks' send into rank r's recv; recv None: "
           "in place, into this rank's block of send.",
           arg("send"), arg("recv") = none, arg("op") = sum, py::kw_only(), arg("dtype") = none)
      .def("all_to_all", &allToAll,
           "Block j of send to rank j, whose block i of recv (send when recv is None) gets it.",
           arg("send"), arg("recv") = none, py::kw_only(), arg("dtype") = none)
      .def("all_to_allv", &allToAllv,
           "all_to_all with counts per rank, in the buffers' elements; displacements default "
           "to the blocks one after another.",
           arg("send"), arg("send_counts"), arg("recv"), arg("recv_counts"),
           arg("send_displs") = none, arg("recv_displs") = none, py::kw_only(),
           arg("dtype") = none)
      .def("gather", &gather,
           "Every rank's send, in rank order, into root's recv; send None on root: in place.",
           arg("send"), arg("recv") = none, arg("root") = 0, py::kw_only(), arg("dtype") = none)
      .def("scatter", &scatter,
           "Block r of root's send into rank r's recv; recv None on root: in place.",
           arg("send"), arg("recv") = none, arg("root") = 0, py::kw_only(), arg("dtype") = none)
      .def("send", &send, "buf to peer; inside loom.group() sends and receives pair in any order.",
           arg("buf"), arg("peer"), py::kw_only(), arg("dtype") = none)
      .def("recv", &recv, "Fills buf from peer's send.", arg("buf"), arg("peer"), py::kw_only(),
           arg("dtype") = none);
}

}  // namespace loompy
