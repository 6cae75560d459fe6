// The torch.distributed backend "loom": a c10d process group over loom's public C API.
//
// Every call runs synchronously on the calling thread (loom's host calls are complete when they
// return) and returns a Work that is already completed, whose future holds the output tensors.
// Between startCoalescing and endCoalescing (batch_isend_irecv) the calls go into one loom
// group: their Works complete when the group ends.
#pragma once

#include <loom/loom.h>
#include <torch/version.h>

#include <chrono>
#include <functional>
#include <string>
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

// A call's Work: completed at once, or when the coalescing group it was queued in ends.
class LoomWork : public c10d::Work {
 public:
  LoomWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs);
  // Completes the work: the future gets the outputs, or the error.
  void complete(std::exception_ptr error);
  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
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
  // Runs call (loom calls; nonzero results throw) and then finish (copies staged outputs back),
  // or queues both in the open coalescing group. The Work's future holds outputs.
  WorkPtr run(c10d::OpType type, Tensors outputs, const std::function<loomResult_t()>& call,
              std::function<void()> finish = {});
  void check(loomResult_t result, const char* what) const;
  // Reduces buffer (contiguous) in place on every rank, or onto root when root >= 0.
  loomResult_t reduceInPlace(const at::Tensor& buffer, const c10d::ReduceOp& op, int root);
  // Reduces in (contiguous) and scatters: this rank's block lands in out (contiguous).
  loomResult_t reduceScatter(const at::Tensor& in, const at::Tensor& out,
                             const c10d::ReduceOp& op);
  // BAND, BOR and BXOR, which loom lacks: every rank gathers all inputs and folds them.
  loomResult_t bitwiseAllReduce(const at::Tensor& buffer, c10d::ReduceOp::RedOpType op);

  struct Pending {
    c10::intrusive_ptr<LoomWork> work;
    std::function<void()> finish;
  };
  loomComm_t comm_ = nullptr;
  bool coalescing_ = false;
  std::vector<Pending> pending_;
};

}  // namespace loom_torch
