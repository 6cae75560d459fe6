#include "collectives/plan.h"

#include <algorithm>

#include "base/dtype.h"
#include "base/status.h"

namespace loom::collectives {

const char* collectiveName(Collective c) {
  switch (c) {
    case Collective::AllReduce:
      return "allreduce";
    case Collective::Broadcast:
      return "broadcast";
    case Collective::Reduce:
      return "reduce";
    case Collective::AllGather:
      return "allgather";
    case Collective::ReduceScatter:
      return "reducescatter";
    case Collective::AlltoAll:
      return "alltoall";
    case Collective::AlltoAllv:
      return "alltoallv";
    case Collective::Gather:
      return "gather";
    case Collective::Scatter:
      return "scatter";
    case Collective::SendRecv:
      return "sendrecv";
  }
  return "invalid";
}

bool countsBlocks(Collective c) {
  return c == Collective::AllGather || c == Collective::ReduceScatter ||
         c == Collective::AlltoAll || c == Collective::Gather || c == Collective::Scatter;
}

bool hasRoot(Collective c) {
  return c == Collective::Broadcast || c == Collective::Reduce || c == Collective::Gather ||
         c == Collective::Scatter;
}

bool reduces(Collective c) {
  return c == Collective::AllReduce || c == Collective::Reduce || c == Collective::ReduceScatter;
}

std::string describeCall(Collective c, uint64_t count, loomDataType_t dtype, loomRedOp_t op,
                         int root) {
  const char* type = dtypeName(dtype);
  std::string what = c == Collective::AlltoAllv
                         ? strprintf("%s (%s", collectiveName(c), type)
                         : strprintf("%s of %llu elements (%s", collectiveName(c),
                                     (unsigned long long)count, type);
  if (reduces(c)) what += std::string(", ") + opName(op);
  if (hasRoot(c)) what += strprintf(", root %d", root);
  return what + ")";
}

const char* stepKindName(StepKind k) {
  switch (k) {
    case StepKind::Send:
      return "Send";
    case StepKind::Recv:
      return "Recv";
    case StepKind::RecvReduce:
      return "RecvReduce";
    case StepKind::Copy:
      return "Copy";
    case StepKind::Reduce:
      return "Reduce";
    case StepKind::Barrier:
      return "Barrier";
  }
  return "invalid";
}

namespace {

// The extent of an alltoallv buffer: the end of its furthest block. Blocks may come in any
// order and leave gaps, so the size is a maximum rather than a sum.
uint64_t extent(const std::vector<uint64_t>& counts, const std::vector<uint64_t>& displs) {
  uint64_t end = 0;
  for (size_t i = 0; i < counts.size() && i < displs.size(); ++i) {
    if (counts[i] > 0) end = std::max(end, displs[i] + counts[i]);
  }
  return end;
}

}  // namespace

// NCCL ignores sendbuff on the non-roots of a broadcast or scatter and recvbuff on those of a
// reduce or gather, so those buffers have no elements: a plan that touches them is wrong.
uint64_t inputCount(const CollArgs& a, int rank) {
  const uint64_t n = uint64_t(a.nranks);
  switch (a.coll) {
    case Collective::AllReduce:
    case Collective::Reduce:
    case Collective::AllGather:
      return a.count;
    case Collective::Broadcast:
      return rank == a.root ? a.count : 0;
    case Collective::ReduceScatter:
    case Collective::AlltoAll:
      return n * a.count;
    case Collective::AlltoAllv:
      return extent(a.sendCounts, a.sendDispls);
    case Collective::Gather:
      return a.count;
    case Collective::Scatter:
      return rank == a.root ? n * a.count : 0;
    case Collective::SendRecv:
      return 0;  // each operation has its own buffer
  }
  return 0;
}

uint64_t outputCount(const CollArgs& a, int rank) {
  const uint64_t n = uint64_t(a.nranks);
  switch (a.coll) {
    case Collective::AllReduce:
    case Collective::Broadcast:
    case Collective::ReduceScatter:
      return a.count;
    case Collective::Reduce:
      return rank == a.root ? a.count : 0;
    case Collective::AllGather:
    case Collective::AlltoAll:
      return n * a.count;
    case Collective::AlltoAllv:
      return extent(a.recvCounts, a.recvDispls);
    case Collective::Gather:
      return rank == a.root ? n * a.count : 0;
    case Collective::Scatter:
      return a.count;
    case Collective::SendRecv:
      return 0;
  }
  return 0;
}

std::vector<uint8_t> finalCopies(const std::vector<Step>& steps) {
  // The regions a step reads or writes: src for all but Recv and Barrier, dst for all but Send.
  auto touches = [](const Step& s, const Region& r) {
    const bool src = s.kind != StepKind::Recv && s.kind != StepKind::Barrier;
    const bool dst = s.kind != StepKind::Send && s.kind != StepKind::Barrier;
    return (src && overlaps(s.src, r)) || (dst && overlaps(s.dst, r));
  };
  std::vector<uint8_t> out(steps.size(), 0);
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].kind != StepKind::Copy) continue;
    bool touched = false;
    for (size_t j = i + 1; j < steps.size() && !touched; ++j)
      touched = touches(steps[j], steps[i].dst);
    out[i] = !touched;
  }
  return out;
}

}  // namespace loom::collectives
