// loom-mpi-perf: the MPI baseline for loom-perf, measured and printed the same way (perf/sweep.h).
//
//   mpirun --allow-run-as-root --oversubscribe -np 4 loom-mpi-perf all_reduce -b 8 -e 256M -f 4
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <string>

#include "perf/sweep.h"

namespace loom::perf {
namespace {

MPI_Datatype mpiType(loomDataType_t d) {
  switch (d) {
    case loomInt8:
      return MPI_INT8_T;
    case loomUint8:
      return MPI_UINT8_T;
    case loomInt32:
      return MPI_INT32_T;
    case loomUint32:
      return MPI_UINT32_T;
    case loomInt64:
      return MPI_INT64_T;
    case loomUint64:
      return MPI_UINT64_T;
    case loomFloat32:
      return MPI_FLOAT;
    case loomFloat64:
      return MPI_DOUBLE;
    default:
      return MPI_DATATYPE_NULL;  // MPI 3 has no half, bfloat16 or fp8
  }
}

MPI_Op mpiOp(loomRedOp_t op) {
  switch (op) {
    case loomSum:
      return MPI_SUM;
    case loomProd:
      return MPI_PROD;
    case loomMin:
      return MPI_MIN;
    case loomMax:
      return MPI_MAX;
    default:
      return MPI_OP_NULL;  // no average in MPI
  }
}

class MpiBackend : public Backend {
 public:
  MpiBackend() {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &nranks_);
    // Errors come back as codes, so a failed call is reported with the collective's name.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }

  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }

  std::string describe() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string text(version, static_cast<size_t>(length));
    const size_t cut = text.find_first_of("\n,");
    return "Backend: " + text.substr(0, cut);
  }

  std::string library() const override { return "mpi"; }

  std::string version() const override {
    const std::string d = describe();
    return d.substr(d.find(' ') + 1);  // "Open MPI v4.1.4"
  }

  std::string unsupported(Collective c, loomDataType_t dtype, loomRedOp_t op) const override {
    if (mpiType(dtype) == MPI_DATATYPE_NULL) return "MPI has no such datatype";
    if (collectiveHasOp(c) && mpiOp(op) == MPI_OP_NULL) return "MPI has no such op";
    return {};
  }

  bool run(const CollCall& call) override {
    if (call.count > static_cast<size_t>(INT_MAX)) return fail(call, MPI_ERR_COUNT);
    const int count = static_cast<int>(call.count);
    const MPI_Datatype type = mpiType(call.dtype);
    const MPI_Op op = mpiOp(call.op);
    const void* in = call.inPlace ? MPI_IN_PLACE : call.send;
    void* send = const_cast<void*>(call.send);
    int rc = MPI_SUCCESS;
    switch (call.collective) {
      case Collective::AllReduce:
        rc = MPI_Allreduce(in, call.recv, count, type, op, comm_);
        break;
      case Collective::AllGather:
        // In place, MPI finds this rank's block inside recv, where nccl-tests puts it.
        rc = MPI_Allgather(in, count, type, call.recv, count, type, comm_);
        break;
      case Collective::ReduceScatter:
        // In place, MPI reduces the whole buffer and leaves the result at its start
        // (inPlaceOutputOffset says so to the check).
        rc = call.inPlace ? MPI_Reduce_scatter_block(MPI_IN_PLACE, send, count, type, op, comm_)
                          : MPI_Reduce_scatter_block(send, call.recv, count, type, op, comm_);
        break;
      case Collective::AlltoAll:
        rc = MPI_Alltoall(in, count, type, call.recv, count, type, comm_);
        break;
      case Collective::Broadcast:
        // MPI broadcasts one buffer; out of place the root's own output must be filled too,
        // as nccl's out-of-place broadcast does.
        if (!call.inPlace && rank_ == call.root) {
          std::memcpy(call.recv, call.send, call.count * dtypeSize(call.dtype));
        }
        rc = MPI_Bcast(call.recv, count, type, call.root, comm_);
        break;
      case Collective::Reduce:
        rc = MPI_Reduce(call.inPlace && rank_ == call.root ? MPI_IN_PLACE : call.send, call.recv,
                        count, type, op, call.root, comm_);
        break;
      case Collective::Gather:
        // In place, the root's block is already in recv, where nccl-tests puts it.
        rc = MPI_Gather(call.inPlace && rank_ == call.root ? MPI_IN_PLACE : call.send, count,
                        type, call.recv, count, type, call.root, comm_);
        break;
      case Collective::Scatter:
        // In place, the root's block stays where it is in send (nccl-tests' output there).
        rc = MPI_Scatter(call.send, count, type,
                         call.inPlace && rank_ == call.root ? MPI_IN_PLACE : call.recv, count,
                         type, call.root, comm_);
        break;
      case Collective::SendRecv: {
        // The nccl-tests pattern: send to the next rank, receive from the previous one.
        const int next = (rank_ + 1) % nranks_;
        const int prev = (rank_ + nranks_ - 1) % nranks_;
        rc = call.inPlace ? MPI_Sendrecv_replace(call.recv, count, type, next, 0, prev, 0, comm_,
                                                 MPI_STATUS_IGNORE)
                          : MPI_Sendrecv(call.send, count, type, next, 0, call.recv, count, type,
                                         prev, 0, comm_, MPI_STATUS_IGNORE);
        break;
      }
      case Collective::AlltoAllv:  // not one of nccl-tests' collectives: never parsed
        rc = MPI_ERR_OP;
        break;
    }
    return rc == MPI_SUCCESS || fail(call, rc);
  }

  bool allGather(const void* mine, void* all, size_t bytes) override {
    return MPI_Allgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes),
                         MPI_BYTE, comm_) == MPI_SUCCESS;
  }

  bool barrier() override { return MPI_Barrier(comm_) == MPI_SUCCESS; }

  size_t inPlaceOutputOffset(Collective c, const CollSizes& sizes) const override {
    return c == Collective::ReduceScatter ? 0 : Backend::inPlaceOutputOffset(c, sizes);
  }

 private:
  bool fail(const CollCall& call, int rc) const {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(rc, text, &length);
    std::fprintf(stderr, "loom-mpi-perf: rank %d: %s of %zu elements failed: %.*s\n", rank_,
                 ncclTestsName(call.collective), call.count, length, text);
    return false;
  }

  MPI_Comm comm_ = MPI_COMM_WORLD;
  int rank_ = 0;
  int nranks_ = 1;
};

}  // namespace
}  // namespace loom::perf

int main(int argc, char** argv) {
  using namespace loom::perf;
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  Options options;
  std::string error;
  if (!parseOptions(argc, argv, &options, &error)) {
    if (rank == 0) {
      if (!error.empty()) std::fprintf(stderr, "loom-mpi-perf: %s\n", error.c_str());
      std::fputs(usage("loom-mpi-perf").c_str(), stderr);
    }
    MPI_Finalize();
    return error.empty() ? 0 : 2;
  }
  if (options.nranks > 0 && options.nranks != size) {
    // mpirun makes the ranks here; a different -N is a mistake in the command line.
    if (rank == 0) {
      std::fprintf(stderr, "loom-mpi-perf: -N %d but mpirun started %d ranks\n", options.nranks,
                   size);
    }
    MPI_Finalize();
    return 2;
  }
  MpiBackend backend;
  const int rc = runSweep(backend, options, "loom-mpi-perf", LOOM_GIT_COMMIT);
  if (rc >= 3) MPI_Abort(MPI_COMM_WORLD, rc);  // a rank may be stuck; don't wait for it
  MPI_Finalize();
  return rc;
}
