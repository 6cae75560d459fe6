// The torch.distributed backend "loom": a c10d process group over loom's public C API.
//
// A call checks its arguments and stages its tensors on the calling thread, then queues the loom
// call for the group's one worker thread and returns its Work at once: the caller (DDP's
// backward, say) goes on while the worker communicates, and the Work completes, with its future
// holding the output tensors, when the worker has run it. The worker runs the calls in the order
// they were made, which is the order every rank makes them. Between startCoalescing and
// endCoalescing (batch_isend_irecv) the calls are held and queued as one loom group.
#pragma once

#include <loom/loom.h>
#include <torch/version.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

// The one version switch: PyTorch 1.x backends subclass c10d::ProcessGroup; from 2.0 a backend
// subclasses c10d::Backend (the ProcessGroup dispatches to it) with the same collective methods,
// and coalescing ends with endCoalescing() returning one Work. Built and tested here: 1.13.
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#define LOOM_TORCH_BASE c10d::Backend
#define LOOM_TORCH_END_COALESCING c10::intrusive_ptr<c10d::Work> endCoalescing() override
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#define LOOM_TORCH_BASE c10d::ProcessGroup
#define LOOM_TORCH_END_COALESCING \
  void endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& reqs) override
#endif
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace loom_torch {

// A call's Work: completed by the worker thread once the call ran.
class LoomWork : public c10d::Work {
 public:
  LoomWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs);
  // Completes the work: the future gets the outputs, or the error.
  void complete(std::exception_ptr error);
  // Whether the call has been handed to the worker (a call of an open coalescing group has not).
  void markQueued() { queued_ = true; }
  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::atomic<bool> queued_{false};
};

class LoomProcessGroup : public LOOM_TORCH_BASE {
 public:
  using Tensors = std::vector<at::Tensor>;
  using TensorLists = std::vector<std::vector<at::Tensor>>;
  using WorkPtr = c10::intrusive_ptr<c10d::Work>;

  // Collective over the group's ranks: rank 0 makes the unique id and sets it in store (which
  // PyTorch prefixes with the group's name), the others read it there.
  LoomProcessGroup(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                   std::chrono::milliseconds timeout);
  ~LoomProcessGroup() override;

  const std::string getBackendName() const override { return "loom"; }
  void startCoalescing() override;
  LOOM_TORCH_END_COALESCING;

  WorkPtr broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override;
  WorkPtr allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override;
  WorkPtr allreduce_coalesced(Tensors& tensors,
                              const c10d::AllreduceCoalescedOptions& opts) override;
  WorkPtr allgather_coalesced(TensorLists& outputs, Tensors& inputs,
                              const c10d::AllgatherOptions& opts) override;
  WorkPtr reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override;
  WorkPtr allgather(TensorLists& outputs, Tensors& inputs,
                    const c10d::AllgatherOptions& opts) override;
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input,
                          const c10d::AllgatherOptions& opts) override;
  WorkPtr gather(TensorLists& outputs, Tensors& inputs, const c10d::GatherOptions& opts) override;
  WorkPtr scatter(Tensors& outputs, TensorLists& inputs, const c10d::ScatterOptions& opts) override;
  WorkPtr reduce_scatter(Tensors& outputs, TensorLists& inputs,
                         const c10d::ReduceScatterOptions& opts) override;
  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override;
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
                        std::vector<int64_t>& inputSplits,
                        const c10d::AllToAllOptions& opts) override;
  WorkPtr alltoall(Tensors& outputs, Tensors& inputs, const c10d::AllToAllOptions& opts) override;
  WorkPtr send(Tensors& tensors, int dstRank, int tag) override;
  WorkPtr recv(Tensors& tensors, int srcRank, int tag) override;
  WorkPtr recvAnysource(Tensors& tensors, int tag) override;
  WorkPtr barrier(const c10d::BarrierOptions& opts) override;

 private:
  // A loom call with what copies its staged outputs back (may be empty), for the worker.
  struct Call {
    std::function<loomResult_t()> run;
    std::function<void()> finish;
    std::string name = "";  // the op, for errors; run() sets it
  };
  struct Task {
    std::vector<Call> calls;  // several: one coalescing group, run between loomGroupStart/End
    std::vector<c10::intrusive_ptr<LoomWork>> works;  // completed once every call ran
    // CUDA tensors: the device, and the current stream of it when the call was made. Such a
    // task is enqueued on that stream by the calling thread (loom returns once it is enqueued),
    // so that kernels launched after the op are ordered after the collective.
    bool onDevice = false;
    c10::Device device = c10::Device(c10::DeviceType::CPU);
    void* stream = nullptr;
  };
  // Queues call for the worker, or holds it in the open coalescing group; the Work's future
  // holds outputs. call.run's captures must own what it touches: it runs later, elsewhere. A
  // call on CUDA tensors runs now instead (Task::onDevice); inputs: tensors that place it too
  // (a gather's input, where a non-root has no output).
  WorkPtr run(c10d::OpType type, Tensors outputs, Call call, const Tensors& inputs = {});
  void enqueue(Task task);
  void serve();  // the worker thread, between making the communicator and close()
  void close();  // destroys the communicator, or aborts it where it failed (its peers may be gone)
  void execute(Task& task);
  void check(loomResult_t result, const char* what) const;
  // Reduces buffer (contiguous) in place on every rank, or onto root when root >= 0.
  loomResult_t reduceInPlace(const at::Tensor& buffer, const c10d::ReduceOp& op, int root);
  // Reduces in (contiguous) and scatters: this rank's block lands in out (contiguous).
  loomResult_t reduceScatter(const at::Tensor& in, const at::Tensor& out,
                             const c10d::ReduceOp& op);
  // BAND, BOR and BXOR, which loom lacks: every rank gathers all inputs and folds them.
  loomResult_t bitwiseAllReduce(const at::Tensor& buffer, c10d::ReduceOp::RedOpType op);

  loomComm_t comm_ = nullptr;
  bool coalescing_ = false;
  Task held_;  // the open coalescing group's calls

  std::mutex queueMutex_;
  std::condition_variable queueChanged_;
  std::deque<Task> queue_;
  bool running_ = false;  // the worker is running a task
  bool stopping_ = false;
  void* stream_ = nullptr;  // the stream of the task being executed (its loom calls')
  std::thread worker_;
};

}  // namespace loom_torch
