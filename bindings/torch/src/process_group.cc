#include "process_group.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cstring>
#include <future>
#include <limits>

#include "loom/loom_device.h"

namespace loom_torch {
namespace {

using RedOpType = c10d::ReduceOp::RedOpType;

// How loom reduces a dtype: its element type, and how many of those one tensor element is
// (complex tensors reduce as pairs of their real type; bool as uint8).
struct Elements {
  loomDataType_t dtype;
  int64_t perElement;
};

Elements reductionElements(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return {loomFloat32, 1};
    case at::kDouble: return {loomFloat64, 1};
    case at::kHalf: return {loomFloat16, 1};
    case at::kBFloat16: return {loomBfloat16, 1};
    case at::kChar: return {loomInt8, 1};
    case at::kByte: return {loomUint8, 1};
    case at::kBool: return {loomUint8, 1};
    case at::kInt: return {loomInt32, 1};
    case at::kLong: return {loomInt64, 1};
    case at::kComplexHalf: return {loomFloat16, 2};
    case at::kComplexFloat: return {loomFloat32, 2};
    case at::kComplexDouble: return {loomFloat64, 2};
    default: TORCH_CHECK(false, "loom: no reductions over ", type, " tensors");
  }
}

loomRedOp_t loomOp(RedOpType op, at::ScalarType type) {
  if (at::isComplexType(type)) {
    TORCH_CHECK(op == RedOpType::SUM || op == RedOpType::AVG,
                "loom: complex tensors reduce with SUM or AVG only");
  }
  if (type == at::kBool) {  // logical or / and, as PyTorch's other backends do
    TORCH_CHECK(op != RedOpType::AVG, "loom: AVG of bool tensors is undefined");
    if (op == RedOpType::SUM) return loomMax;
    if (op == RedOpType::PRODUCT) return loomMin;
  }
  switch (op) {
    case RedOpType::SUM: return loomSum;
    case RedOpType::AVG: return loomAvg;
    case RedOpType::PRODUCT: return loomProd;
    case RedOpType::MIN: return loomMin;
    case RedOpType::MAX: return loomMax;
    default: TORCH_CHECK(false, "loom: reduce op ", int(op), " is for allreduce only");
  }
}

// Calls fn(dtype, perElement, op) with op in loom's terms; PREMUL_SUM makes a loom op for
// the call (its factor converted to the tensor's dtype) and frees it after.
loomResult_t withReduction(loomComm_t comm, at::ScalarType type, const c10d::ReduceOp& op,
                           const std::function<loomResult_t(loomDataType_t, int64_t,
                                                            loomRedOp_t)>& fn) {
  Elements e = reductionElements(type);
  if (op.op_ != RedOpType::PREMUL_SUM) return fn(e.dtype, e.perElement, loomOp(op.op_, type));
  TORCH_CHECK(at::isFloatingType(type), "loom: PREMUL_SUM needs floating-point tensors");
  auto* factor = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(factor, "loom: PREMUL_SUM without its factor");
  at::Tensor scalar = factor->tensor_factors.empty()
      ? at::scalar_tensor(factor->double_factor, at::TensorOptions().dtype(type))
      : factor->tensor_factors[0].to(at::kCPU, type).reshape({-1}).slice(0, 0, 1).contiguous();
  loomRedOp_t premul;
  loomResult_t result = loomRedOpCreatePreMulSum(&premul, scalar.data_ptr(), e.dtype, comm);
  if (result != loomSuccess) return result;
  result = fn(e.dtype, e.perElement, premul);
  loomRedOpDestroy(premul, comm);
  return result;
}

size_t bytes(const at::Tensor& t) { return t.numel() * t.element_size(); }

// Dense CPU or CUDA tensors (CUDA: stream-ordered, docs/DEVICE.md).
void checkCpu(const at::Tensor& t, const char* op) {
  TORCH_CHECK((t.device().is_cpu() || t.device().is_cuda()) && t.layout() == at::kStrided, "loom ",
              op, ": dense CPU or CUDA tensors only (got ", t.device(), ", ", t.layout(), ")");
}

// The device of a call's tensors and the current stream of that device, where they are CUDA
// tensors: loom enqueues the call on that stream. Every tensor must be on one device.
void placeOnDevice(const std::vector<at::Tensor>& tensors, const char* op, bool* onDevice,
                   c10::Device* device, void** stream) {
  *onDevice = false;
  for (const at::Tensor& t : tensors) {
    if (!t.defined()) continue;
    if (!*onDevice && t.device().is_cuda()) *device = t.device();
    *onDevice = *onDevice || t.device().is_cuda();
    TORCH_CHECK(!*onDevice || t.device() == *device, "loom ", op,
                ": tensors on different devices (", *device, ", ", t.device(), ")");
  }
  if (!*onDevice) return;
  TORCH_CHECK(std::strcmp(loomDeviceName(), "cuda") == 0, "loom ", op,
              ": CUDA tensors, but loom's device is '", loomDeviceName(),
              "': set LOOM_DEVICE=cuda (and LOOM_CUDA_RUNTIME=path of libcudart where the loader "
              "does not find it); ", loomGetLastError(nullptr));
  const c10::Stream current =
      c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(*device);
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2)
  *stream = current.native_handle();
#else
  // Without c10::Stream::native_handle (PyTorch 2.2) the one stream whose handle is known is
  // the default stream (id 0, cudaStream_t 0: loom's NULL stream).
  TORCH_CHECK(current.id() == 0, "loom ", op,
              ": CUDA tensors on a stream other than the default need PyTorch 2.2 or later");
  *stream = nullptr;
#endif
}

// The one tensor of a per-device list (CPU process groups take one).
at::Tensor single(const std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK(tensors.size() == 1, "loom ", op, ": one tensor per call (got ", tensors.size(),
              ")");
  checkCpu(tensors[0], op);
  return tensors[0];
}

// parts must be count tensors of like's dtype and numel each.
void checkParts(const std::vector<at::Tensor>& parts, size_t count, const at::Tensor& like,
                const char* op) {
  TORCH_CHECK(parts.size() == count, "loom ", op, ": ", count, " tensors expected, got ",
              parts.size());
  for (const at::Tensor& p : parts) {
    checkCpu(p, op);
    TORCH_CHECK(p.scalar_type() == like.scalar_type() && p.numel() == like.numel(), "loom ", op,
                ": every tensor must have ", like.numel(), " elements of ", like.scalar_type(),
                " (got ", p.numel(), " of ", p.scalar_type(), ")");
  }
}

void checkSizes(const at::Tensor& big, const at::Tensor& small, int64_t times, const char* op) {
  checkCpu(big, op);
  checkCpu(small, op);
  TORCH_CHECK(big.scalar_type() == small.scalar_type(), "loom ", op, ": dtypes differ (",
              big.scalar_type(), ", ", small.scalar_type(), ")");
  TORCH_CHECK(big.numel() == small.numel() * times, "loom ", op, ": the larger tensor must have ",
              times, " times the elements of the smaller (", big.numel(), " vs ", small.numel(),
              ")");
}

// The tensors one after another in one contiguous 1-D tensor.
at::Tensor flatten(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Copies consecutive pieces of flat into the tensors.
void unflatten(const at::Tensor& flat, std::vector<at::Tensor> tensors) {
  int64_t offset = 0;
  for (at::Tensor& t : tensors) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

// What copies a staged (contiguous) buffer back into the user's tensor; nothing where they are
// the same tensor (the call's lambda keeps the buffer alive until it ran).
std::function<void()> copyBack(at::Tensor tensor, at::Tensor buffer) {
  if (buffer.is_same(tensor)) return {};
  return [tensor, buffer]() mutable { tensor.copy_(buffer); };
}

// Byte counts and offsets of alltoall blocks: rows of splits (all equal when empty).
void blocks(const at::Tensor& t, const std::vector<int64_t>& splits, int size,
            std::vector<size_t>& counts, std::vector<size_t>& offsets) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const size_t rowBytes = rows == 0 ? 0 : bytes(t) / rows;
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "loom alltoall_base: ", rows,
                " rows do not split evenly over ", size, " ranks");
  } else {
    TORCH_CHECK(int(splits.size()) == size, "loom alltoall_base: ", size,
                " split sizes expected, got ", splits.size());
    int64_t total = 0;
    for (int64_t s : splits) total += s;
    TORCH_CHECK(total == rows, "loom alltoall_base: split sizes add up to ", total, ", not ",
                rows, " rows");
  }
  counts.assign(size, 0);
  offsets.assign(size, 0);
  size_t offset = 0;
  for (int r = 0; r < size; ++r) {
    counts[r] = (splits.empty() ? rows / size : splits[r]) * rowBytes;
    offsets[r] = offset;
    offset += counts[r];
  }
}

}  // namespace

LoomWork::LoomWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type),
      outputs_(std::move(outputs)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {}

void LoomWork::complete(std::exception_ptr error) {
  if (error) {
    future_->setError(error);
  } else {
    future_->markCompleted(c10::IValue(outputs_));
  }
  finish(error);
}

bool LoomWork::wait(std::chrono::milliseconds timeout) {
  TORCH_CHECK(queued_, "loom: wait() on a call of a coalescing group (batch_isend_irecv) "
                       "before the group ended");
  return c10d::Work::wait(timeout);  // a timeout throws; so does the call's error
}

std::vector<at::Tensor> LoomWork::result() { return outputs_; }

c10::intrusive_ptr<c10::ivalue::Future> LoomWork::getFuture() { return future_; }

LoomProcessGroup::LoomProcessGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                   int size, std::chrono::milliseconds timeout)
    : LOOM_TORCH_BASE(rank, size) {
  // The store PyTorch hands a backend is prefixed with the group's name: the key is the group's.
  const std::string key = "loom_unique_id";
  loomUniqueId id;
  if (rank == 0) {
    check(loomGetUniqueId(&id), "loomGetUniqueId");
    const auto* raw = reinterpret_cast<const uint8_t*>(id.internal);
    store->set(key, std::vector<uint8_t>(raw, raw + sizeof id.internal));
  } else {
    std::vector<uint8_t> raw = store->get(key);
    TORCH_CHECK(raw.size() == sizeof id.internal, "loom: the store holds a unique id of ",
                raw.size(), " bytes, not ", sizeof id.internal);
    std::memcpy(id.internal, raw.data(), raw.size());
  }
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.timeoutMs = int(std::clamp<int64_t>(timeout.count(), 1, std::numeric_limits<int>::max()));
  // The worker makes the communicator, runs its calls and closes it. Where ranks outnumber the
  // cores, loom binds the thread that makes a communicator to one core (LOOM_BIND=auto): that
  // must be the thread that runs its calls, not the program's, whose affinity every thread it
  // starts later would inherit (torch's intra-op pool, Gloo's workers, DataLoader workers).
  std::promise<std::pair<loomResult_t, std::string>> made;
  auto init = made.get_future();
  worker_ = std::thread([this, size, id, rank, config, &made] {
    const loomResult_t result = loomCommInitRankConfig(&comm_, size, id, rank, &config);
    made.set_value({result, loomGetLastError(comm_)});  // the error is this thread's
    if (result != loomSuccess) return;
    serve();
    close();
  });
  const auto [result, error] = init.get();
  if (result != loomSuccess) worker_.join();
  TORCH_CHECK(result == loomSuccess, "loom loomCommInitRankConfig failed (",
              loomGetErrorString(result), "): ", error);
}

LoomProcessGroup::~LoomProcessGroup() {
  if (worker_.joinable()) {  // runs what was queued first: those calls' peers make them too
    {
      std::lock_guard<std::mutex> lock(queueMutex_);
      stopping_ = true;
    }
    queueChanged_.notify_all();
    worker_.join();
  }
}

void LoomProcessGroup::close() {
  loomResult_t async = loomSuccess;
  // A failed communicator is aborted: its peers may be gone, and destroy would wait for them.
  if (loomCommGetAsyncError(comm_, &async) != loomSuccess || async != loomSuccess) {
    loomCommAbort(comm_);
  } else {
    loomCommDestroy(comm_);
  }
}

void LoomProcessGroup::check(loomResult_t result, const char* what) const {
  TORCH_CHECK(result == loomSuccess, "loom ", what, " failed (", loomGetErrorString(result),
              "): ", loomGetLastError(comm_));
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::run(c10d::OpType type, Tensors outputs,
                                                     Call call, const Tensors& inputs) {
  call.name = c10d::opTypeToString(type);
  Task task;
  Tensors placed = outputs;
  placed.insert(placed.end(), inputs.begin(), inputs.end());
  placeOnDevice(placed, call.name.c_str(), &task.onDevice, &task.device, &task.stream);
  auto work = c10::make_intrusive<LoomWork>(rank_, type, std::move(outputs));
  if (coalescing_) {
    TORCH_CHECK(held_.calls.empty() || (held_.onDevice == task.onDevice &&
                                        held_.device == task.device && held_.stream == task.stream),
                "loom: a coalescing group's calls must all be on CPU tensors or all on CUDA "
                "tensors of one device and stream");
    held_.onDevice = task.onDevice;
    held_.device = task.device;
    held_.stream = task.stream;
    held_.calls.push_back(std::move(call));
    held_.works.push_back(work);
    return work;
  }
  task.calls.push_back(std::move(call));
  task.works.push_back(work);
  enqueue(std::move(task));
  return work;
}

void LoomProcessGroup::enqueue(Task task) {
  for (auto& work : task.works) work->markQueued();
  if (task.onDevice) {
    // After the calls queued before it (every rank makes them in this order), then now: loom
    // returns once the call is on the stream.
    std::unique_lock<std::mutex> lock(queueMutex_);
    queueChanged_.wait(lock, [this] { return queue_.empty() && !running_; });
    lock.unlock();
    c10::DeviceGuard guard(task.device);
    execute(task);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(queueMutex_);
    queue_.push_back(std::move(task));
  }
  queueChanged_.notify_one();
}

void LoomProcessGroup::serve() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(queueMutex_);
      queueChanged_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      task = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    execute(task);
    {
      std::lock_guard<std::mutex> lock(queueMutex_);
      running_ = false;
    }
    queueChanged_.notify_all();
  }
}

void LoomProcessGroup::execute(Task& task) {
  std::exception_ptr error;
  stream_ = task.stream;
  try {
    const bool group = task.calls.size() > 1;
    if (group) check(loomGroupStart(), "loomGroupStart");
    for (Call& call : task.calls) check(call.run(), call.name.c_str());
    if (group) check(loomGroupEnd(), "loomGroupEnd");
    for (Call& call : task.calls)
      if (call.finish) call.finish();
  } catch (...) {
    error = std::current_exception();
  }
  for (auto& work : task.works) work->complete(error);
}

void LoomProcessGroup::startCoalescing() {
  TORCH_CHECK(!coalescing_, "loom: coalescing groups do not nest");
  coalescing_ = true;
}

#if TORCH_VERSION_MAJOR >= 2
c10::intrusive_ptr<c10d::Work> LoomProcessGroup::endCoalescing() {
#else
void LoomProcessGroup::endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>&) {
#endif
  TORCH_CHECK(coalescing_, "loom: endCoalescing without startCoalescing");
  coalescing_ = false;
  Task group = std::move(held_);
  held_ = Task();
#if TORCH_VERSION_MAJOR >= 2
  // One Work for the group: it completes when the group's last call does.
  std::vector<at::Tensor> outputs;
  for (auto& work : group.works)
    for (const at::Tensor& t : work->result()) outputs.push_back(t);
  auto whole = c10::make_intrusive<LoomWork>(rank_, c10d::OpType::COALESCED, outputs);
  group.works.push_back(whole);
  enqueue(std::move(group));
  return whole;
#else
  if (!group.calls.empty()) enqueue(std::move(group));  // each call's Work completes with it
#endif
}

loomResult_t LoomProcessGroup::reduceInPlace(const at::Tensor& buffer, const c10d::ReduceOp& op,
                                             int root) {
  RedOpType type = op.op_;
  if (type == RedOpType::BAND || type == RedOpType::BOR || type == RedOpType::BXOR) {
    TORCH_CHECK(root < 0, "loom reduce: BAND, BOR and BXOR are for allreduce only");
    return bitwiseAllReduce(buffer, type);
  }
  void* data = buffer.data_ptr();
  return withReduction(comm_, buffer.scalar_type(), op,
                       [&](loomDataType_t dtype, int64_t per, loomRedOp_t lop) {
    size_t count = buffer.numel() * per;
    return root < 0 ? loomAllReduce(data, data, count, dtype, lop, comm_, stream_)
                    : loomReduce(data, data, count, dtype, lop, root, comm_, stream_);
  });
}

loomResult_t LoomProcessGroup::reduceScatter(const at::Tensor& in, const at::Tensor& out,
                                             const c10d::ReduceOp& op) {
  return withReduction(comm_, out.scalar_type(), op,
                       [&](loomDataType_t dtype, int64_t per, loomRedOp_t lop) {
    return loomReduceScatter(in.data_ptr(), out.data_ptr(), out.numel() * per, dtype, lop, comm_,
                             stream_);
  });
}

loomResult_t LoomProcessGroup::bitwiseAllReduce(const at::Tensor& buffer, RedOpType op) {
  TORCH_CHECK(at::isIntegralType(buffer.scalar_type(), /*includeBool=*/true),
              "loom: BAND, BOR and BXOR need integer or bool tensors");
  at::Tensor all = at::empty({size_, buffer.numel()}, buffer.options());
  loomResult_t result = loomAllGather(buffer.data_ptr(), all.data_ptr(), bytes(buffer),
                                      loomUint8, comm_, stream_);
  if (result != loomSuccess) return result;
  at::Tensor folded = all[0].clone();
  for (int r = 1; r < size_; ++r) {
    if (op == RedOpType::BAND) folded.bitwise_and_(all[r]);
    if (op == RedOpType::BOR) folded.bitwise_or_(all[r]);
    if (op == RedOpType::BXOR) folded.bitwise_xor_(all[r]);
  }
  buffer.view({-1}).copy_(folded);
  return loomSuccess;
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::broadcast(Tensors& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  at::Tensor t = single(tensors, "broadcast"), buf = t.contiguous();
  const int root = int(opts.rootRank);
  return run(c10d::OpType::BROADCAST, tensors, {[this, buf, root] {
    return loomBroadcast(buf.data_ptr(), buf.data_ptr(), bytes(buf), loomUint8, root, comm_,
                         stream_);
  }, copyBack(t, buf)});
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::allreduce(Tensors& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  at::Tensor t = single(tensors, "allreduce"), buf = t.contiguous();
  return run(c10d::OpType::ALLREDUCE, tensors,
             {[this, buf, op = opts.reduceOp] { return reduceInPlace(buf, op, -1); },
              copyBack(t, buf)});
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::allreduce_coalesced(
    Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "loom allreduce_coalesced: no tensors");
  for (const at::Tensor& t : tensors) {
    checkCpu(t, "allreduce_coalesced");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(),
                "loom allreduce_coalesced: the tensors must share one dtype");
  }
  at::Tensor flat = flatten(tensors);
  return run(c10d::OpType::ALLREDUCE_COALESCED, tensors,
             {[this, flat, op = opts.reduceOp] { return reduceInPlace(flat, op, -1); },
              [flat, tensors] { unflatten(flat, tensors); }});
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::reduce(Tensors& tensors,
                                                        const c10d::ReduceOptions& opts) {
  at::Tensor t = single(tensors, "reduce"), buf = t.contiguous();
  return run(c10d::OpType::REDUCE, tensors,
             {[this, buf, op = opts.reduceOp, root = int(opts.rootRank)] {
                return reduceInPlace(buf, op, root);
              },
              copyBack(t, buf)});
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::allgather(TensorLists& outputs, Tensors& inputs,
                                                           const c10d::AllgatherOptions&) {
  at::Tensor in = single(inputs, "allgather").contiguous();
  TORCH_CHECK(outputs.size() == 1, "loom allgather: one output list per call");
  checkParts(outputs[0], size_, in, "allgather");
  at::Tensor flat = at::empty({size_ * in.numel()}, in.options());
  return run(c10d::OpType::ALLGATHER, outputs[0], {[this, in, flat] {
    return loomAllGather(in.data_ptr(), flat.data_ptr(), bytes(in), loomUint8, comm_, stream_);
  }, [flat, parts = outputs[0]] { unflatten(flat, parts); }});
}

// output_lists[r][i] receives rank r's inputs[i]: one allgather of every input back to back.
c10::intrusive_ptr<c10d::Work> LoomProcessGroup::allgather_coalesced(
    TensorLists& outputs, Tensors& inputs, const c10d::AllgatherOptions&) {
  TORCH_CHECK(!inputs.empty(), "loom allgather_coalesced: no tensors");
  TORCH_CHECK(int(outputs.size()) == size_, "loom allgather_coalesced: ", size_,
              " output lists expected, got ", outputs.size());
  for (const at::Tensor& t : inputs) {
    checkCpu(t, "allgather_coalesced");
    TORCH_CHECK(t.scalar_type() == inputs[0].scalar_type(),
                "loom allgather_coalesced: the tensors must share one dtype");
  }
  Tensors parts;  // every output tensor, rank by rank
  for (const Tensors& list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(), "loom allgather_coalesced: every output list "
                "must have ", inputs.size(), " tensors");
    for (size_t i = 0; i < list.size(); ++i) {
      checkParts({list[i]}, 1, inputs[i], "allgather_coalesced");
      parts.push_back(list[i]);
    }
  }
  at::Tensor in = flatten(inputs);
  at::Tensor flat = at::empty({size_ * in.numel()}, in.options());
  return run(c10d::OpType::ALLGATHER_COALESCED, parts, {[this, in, flat] {
    return loomAllGather(in.data_ptr(), flat.data_ptr(), bytes(in), loomUint8, comm_, stream_);
  }, [flat, parts] { unflatten(flat, parts); }});
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::_allgather_base(at::Tensor& output,
                                                                 at::Tensor& input,
                                                                 const c10d::AllgatherOptions&) {
  checkSizes(output, input, size_, "_allgather_base");
  at::Tensor in = input.contiguous(), out = output.contiguous();
  return run(c10d::OpType::_ALLGATHER_BASE, {output}, {[this, in, out] {
    return loomAllGather(in.data_ptr(), out.data_ptr(), bytes(in), loomUint8, comm_, stream_);
  }, copyBack(output, out)});
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::gather(TensorLists& outputs, Tensors& inputs,
                                                        const c10d::GatherOptions& opts) {
  at::Tensor in = single(inputs, "gather").contiguous();
  const int root = int(opts.rootRank);
  Tensors parts;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1, "loom gather: the root takes one output list");
    checkParts(outputs[0], size_, in, "gather");
    parts = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty() || outputs[0].empty(),
                "loom gather: only the root takes output tensors");
  }
  at::Tensor flat = rank_ == root ? at::empty({size_ * in.numel()}, in.options()) : at::Tensor();
  return run(c10d::OpType::GATHER, parts, {[this, in, flat, root] {
    return loomGather(in.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, bytes(in),
                      loomUint8, root, comm_, stream_);
  }, [flat, parts] {
    if (flat.defined()) unflatten(flat, parts);
  }}, {in});
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::scatter(Tensors& outputs, TensorLists& inputs,
                                                         const c10d::ScatterOptions& opts) {
  at::Tensor t = single(outputs, "scatter"), out = t.contiguous();
  const int root = int(opts.rootRank);
  at::Tensor flat;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1, "loom scatter: the root takes one input list");
    checkParts(inputs[0], size_, out, "scatter");
    flat = flatten(inputs[0]);
  } else {
    TORCH_CHECK(inputs.empty() || inputs[0].empty(),
                "loom scatter: only the root takes input tensors");
  }
  return run(c10d::OpType::SCATTER, outputs, {[this, flat, out, root] {
    return loomScatter(flat.defined() ? flat.data_ptr() : nullptr, out.data_ptr(), bytes(out),
                       loomUint8, root, comm_, stream_);
  }, copyBack(t, out)});
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::reduce_scatter(
    Tensors& outputs, TensorLists& inputs, const c10d::ReduceScatterOptions& opts) {
  at::Tensor t = single(outputs, "reduce_scatter"), out = t.contiguous();
  TORCH_CHECK(inputs.size() == 1, "loom reduce_scatter: one input list per call");
  checkParts(inputs[0], size_, out, "reduce_scatter");
  at::Tensor flat = flatten(inputs[0]);
  return run(c10d::OpType::REDUCE_SCATTER, outputs,
             {[this, flat, out, op = opts.reduceOp] { return reduceScatter(flat, out, op); },
              copyBack(t, out)});
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  checkSizes(input, output, size_, "_reduce_scatter_base");
  at::Tensor in = input.contiguous(), out = output.contiguous();
  return run(c10d::OpType::_REDUCE_SCATTER_BASE, {output},
             {[this, in, out, op = opts.reduceOp] { return reduceScatter(in, out, op); },
              copyBack(output, out)});
}

// Byte counts and offsets of the blocks each rank sends and receives.
struct AlltoallLayout {
  std::vector<size_t> sendCounts, sendOffsets, recvCounts, recvOffsets;
};

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
    std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions&) {
  checkCpu(output, "alltoall_base");
  checkCpu(input, "alltoall_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "loom alltoall_base: dtypes differ");
  at::Tensor in = input.contiguous(), out = output.contiguous();
  auto layout = std::make_shared<AlltoallLayout>();
  blocks(in, inputSplits, size_, layout->sendCounts, layout->sendOffsets);
  blocks(out, outputSplits, size_, layout->recvCounts, layout->recvOffsets);
  if (inputSplits.empty() && outputSplits.empty() && bytes(in) == bytes(out)) {
    // Equal blocks (all_to_all_single without splits): loom's alltoall, whose algorithm the
    // tuner chooses by size like any collective's; an alltoallv has no size the ranks share
    // and always runs the built-in table's pairwise exchange.
    return run(c10d::OpType::ALLTOALL_BASE, {output}, {[this, in, out, block = bytes(in) / size_] {
      return loomAlltoAll(in.data_ptr(), out.data_ptr(), block, loomUint8, comm_, stream_);
    }, copyBack(output, out)});
  }
  return run(c10d::OpType::ALLTOALL_BASE, {output}, {[this, in, out, layout] {
    return loomAlltoAllv(in.data_ptr(), layout->sendCounts.data(), layout->sendOffsets.data(),
                         out.data_ptr(), layout->recvCounts.data(), layout->recvOffsets.data(),
                         loomUint8, comm_, stream_);
  }, copyBack(output, out)});
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::alltoall(Tensors& outputs, Tensors& inputs,
                                                          const c10d::AllToAllOptions&) {
  TORCH_CHECK(int(outputs.size()) == size_ && int(inputs.size()) == size_, "loom alltoall: ",
              size_, " input and output tensors expected");
  auto layout = std::make_shared<AlltoallLayout>();
  size_t sent = 0, received = 0;
  for (int r = 0; r < size_; ++r) {
    checkCpu(inputs[r], "alltoall");
    checkCpu(outputs[r], "alltoall");
    TORCH_CHECK(inputs[r].scalar_type() == inputs[0].scalar_type() &&
                outputs[r].scalar_type() == inputs[0].scalar_type(),
                "loom alltoall: the tensors must share one dtype");
    layout->sendOffsets.push_back(sent);
    layout->sendCounts.push_back(bytes(inputs[r]));
    sent += layout->sendCounts.back();
    layout->recvOffsets.push_back(received);
    layout->recvCounts.push_back(bytes(outputs[r]));
    received += layout->recvCounts.back();
  }
  at::Tensor in = flatten(inputs);
  at::Tensor out = at::empty({int64_t(received / inputs[0].element_size())}, in.options());
  return run(c10d::OpType::ALLTOALL, outputs, {[this, in, out, layout] {
    return loomAlltoAllv(in.data_ptr(), layout->sendCounts.data(), layout->sendOffsets.data(),
                         out.data_ptr(), layout->recvCounts.data(), layout->recvOffsets.data(),
                         loomUint8, comm_, stream_);
  }, [out, outputs] { unflatten(out, outputs); }});
}

// Tags are not matched: messages between two ranks arrive in the order they were sent.
c10::intrusive_ptr<c10d::Work> LoomProcessGroup::send(Tensors& tensors, int dstRank, int) {
  at::Tensor buf = single(tensors, "send").contiguous();
  return run(c10d::OpType::SEND, tensors, {[this, buf, dstRank] {
    return loomSend(buf.data_ptr(), bytes(buf), loomUint8, dstRank, comm_, stream_);
  }, {}});
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::recv(Tensors& tensors, int srcRank, int) {
  at::Tensor t = single(tensors, "recv"), buf = t.contiguous();
  return run(c10d::OpType::RECV, tensors, {[this, buf, srcRank] {
    return loomRecv(buf.data_ptr(), bytes(buf), loomUint8, srcRank, comm_, stream_);
  }, copyBack(t, buf)});
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::recvAnysource(Tensors&, int) {
  TORCH_CHECK(false, "loom: recv from any source is not supported; name the source rank");
}

c10::intrusive_ptr<c10d::Work> LoomProcessGroup::barrier(const c10d::BarrierOptions&) {
  at::Tensor token = at::zeros({1}, at::kByte);
  return run(c10d::OpType::BARRIER, {}, {[this, token] {
    return loomAllReduce(token.data_ptr(), token.data_ptr(), 1, loomUint8, loomMax, comm_,
                         stream_);
  }, {}});
}

}  // namespace loom_torch
