// The interposed MPI calls: each runs on loom when it can (interpose.h says how that is
// decided), and is handed to PMPI_* unchanged when it cannot.
#include <cstdint>
#include <cstring>
#include <vector>

#include "bindings/mpi/interpose.h"

namespace loom::mpi {
namespace {

// The loom communicator a call runs on, or NULL when it falls through; notes the route.
// bytes is the call's size as LOOM_MPI_MIN_BYTES measures it: the same on every rank (SIZE_MAX:
// no size, loom whatever the threshold). Without a threshold set, loom's model decides
// (modelPrefersLoom), pricing run(loomComm), the loom call that runs it. A blocking call runs
// after the communicator's queued non-blocking ones; a non-blocking call never makes a loom
// communicator (see madeLoomCommOf).
template <typename Run>
loomComm_t admit(Call call, MPI_Comm comm, Route route, size_t bytes, const Run& run,
                 bool blocking = true) {
  loomComm_t loomComm = nullptr;
  const size_t threshold = minBytes(call);
  if (!interposing()) route = Route::Disabled;
  else if (route == Route::Loom && threshold != SIZE_MAX && bytes < threshold) route = Route::Small;
  if (route == Route::Loom) {
    loomComm = blocking ? loomCommOf(comm, &route) : madeLoomCommOf(comm, &route);
  }
  const Issue issue{[](const void* context, loomComm_t c) {
                      return (*static_cast<const Run*>(context))(c);
                    },
                    &run};
  if (loomComm != nullptr && threshold == SIZE_MAX && bytes != SIZE_MAX &&
      !modelPrefersLoom(loomComm, call, bytes, issue)) {
    route = Route::Model;
    loomComm = nullptr;
  }
  if (loomComm != nullptr && blocking) awaitQueue(loomComm);
  note(call, route);
  return loomComm;
}

// comm's size; 0 for MPI_COMM_NULL and intercommunicators, which fall through (an
// intercommunicator's counts and roots name the remote group's ranks).
size_t ranksOf(MPI_Comm comm) {
  int size = 0, inter = 0;
  if (comm == MPI_COMM_NULL || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter ||
      PMPI_Comm_size(comm, &size) != MPI_SUCCESS) {
    return 0;
  }
  return size_t(size);
}

Route rooted(MPI_Comm comm, int root, Route route) {
  const size_t n = ranksOf(comm);
  if (n == 0) return Route::BadComm;
  return root >= 0 && size_t(root) < n ? route : Route::BadArgument;
}

// A send buffer that is the receive buffer other than through MPI_IN_PLACE is MPI's to judge
// (Open MPI refuses it in MPI_Allreduce, takes it in MPI_Alltoall); loom would take it as in
// place.
Route unaliased(const void* sendbuf, const void* recvbuf, Route route) {
  return sendbuf != MPI_IN_PLACE && sendbuf != nullptr && sendbuf == recvbuf ? Route::BadArgument
                                                                              : route;
}

int rankIn(loomComm_t comm) {
  int rank = 0;
  loomCommUserRank(comm, &rank);
  return rank;
}

// The route of a data-moving call with a send side (count, type) and a receive side: both
// dense and of the same size; *block is that size in bytes. inPlace: the send side is unused.
Route moving(int sendCount, MPI_Datatype sendType, int recvCount, MPI_Datatype recvType,
             bool inPlace, size_t* block) {
  size_t sendBytes = 0, recvBytes = 0;
  if (sendCount < 0 || recvCount < 0) return Route::BadArgument;
  if (!dense(recvType, &recvBytes) || (!inPlace && !dense(sendType, &sendBytes))) {
    return Route::Datatype;
  }
  *block = recvBytes * size_t(recvCount);
  if (!inPlace && sendBytes * size_t(sendCount) != *block) return Route::Mismatch;
  return Route::Loom;
}

}  // namespace
}  // namespace loom::mpi

using namespace loom::mpi;

LOOM_MPI_ENTRY int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count,
                                 MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  Reduction r{};
  const Route route = count < 0 ? Route::BadArgument
                                : unaliased(sendbuf, recvbuf, reduction(datatype, op, &r));
  const void* in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  const auto run = [&](loomComm_t c) {
    return loomAllReduce(in, recvbuf, size_t(count) * r.perElement, r.type, r.op, c, nullptr);
  };
  loomComm_t lc = admit(Call::Allreduce, comm, route, size_t(count) * r.elementBytes, run);
  if (lc == nullptr) return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  return finish(Call::Allreduce, comm, lc, run(lc));
}

LOOM_MPI_ENTRY int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype,
                              MPI_Op op, int root, MPI_Comm comm) {
  Reduction r{};
  int rank = -1;
  if (comm != MPI_COMM_NULL) PMPI_Comm_rank(comm, &rank);
  Route route = count < 0 ? Route::BadArgument : rooted(comm, root, reduction(datatype, op, &r));
  if (rank == root) route = unaliased(sendbuf, recvbuf, route);  // recvbuf is the root's alone
  // MPI_IN_PLACE is the root's: its input is already in recvbuf.
  const void* in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  const auto run = [&](loomComm_t c) {
    return loomReduce(in, recvbuf, size_t(count) * r.perElement, r.type, r.op, root, c,
                      nullptr);
  };
  loomComm_t lc = admit(Call::Reduce, comm, route, size_t(count) * r.elementBytes, run);
  if (lc == nullptr) return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
  return finish(Call::Reduce, comm, lc, run(lc));
}

LOOM_MPI_ENTRY int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root,
                             MPI_Comm comm) {
  size_t element = 0;
  Route route = count < 0 ? Route::BadArgument
                          : rooted(comm, root, dense(datatype, &element) ? Route::Loom
                                                                         : Route::Datatype);
  const size_t bytes = size_t(count) * element;
  const auto run = [&](loomComm_t c) {
    return loomBroadcast(buffer, buffer, bytes, loomUint8, root, c, nullptr);
  };
  loomComm_t lc = admit(Call::Bcast, comm, route, bytes, run);
  if (lc == nullptr) return PMPI_Bcast(buffer, count, datatype, root, comm);
  return finish(Call::Bcast, comm, lc, run(lc));
}

LOOM_MPI_ENTRY int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                 void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                 MPI_Comm comm) {
  const bool inPlace = sendbuf == MPI_IN_PLACE;
  size_t block = 0;
  const Route route = unaliased(
      sendbuf, recvbuf, moving(sendcount, sendtype, recvcount, recvtype, inPlace, &block));
  const auto run = [&](loomComm_t c) {
    // In place, this rank's block is already where loom's in-place allgather expects it.
    const void* in = inPlace ? static_cast<char*>(recvbuf) + size_t(rankIn(c)) * block : sendbuf;
    return loomAllGather(in, recvbuf, block, loomUint8, c, nullptr);
  };
  loomComm_t lc = admit(Call::Allgather, comm, route, block * ranksOf(comm), run);
  if (lc == nullptr) {
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  }
  return finish(Call::Allgather, comm, lc, run(lc));
}

LOOM_MPI_ENTRY int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
                                            MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  Reduction r{};
  const Route route = recvcount < 0 ? Route::BadArgument
                                    : unaliased(sendbuf, recvbuf, reduction(datatype, op, &r));
  const size_t block = size_t(recvcount) * r.elementBytes;
  const size_t count = size_t(recvcount) * r.perElement;
  // MPI's in place reduces all of recvbuf and leaves this rank's block at its start; loom's
  // leaves it where it was in the input, from where it moves down (below).
  const bool inPlace = sendbuf == MPI_IN_PLACE;
  const auto mine = [&](loomComm_t c) {
    return static_cast<char*>(recvbuf) + (inPlace ? size_t(rankIn(c)) * block : 0);
  };
  const auto run = [&](loomComm_t c) {
    return loomReduceScatter(inPlace ? recvbuf : sendbuf, mine(c), count, r.type, r.op, c,
                             nullptr);
  };
  loomComm_t lc = admit(Call::ReduceScatterBlock, comm, route, block * ranksOf(comm), run);
  if (lc == nullptr) {
    return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
  }
  const loomResult_t result = run(lc);
  if (result == loomSuccess && mine(lc) != recvbuf) std::memmove(recvbuf, mine(lc), block);
  return finish(Call::ReduceScatterBlock, comm, lc, result);
}

LOOM_MPI_ENTRY int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype,
                                void* recvbuf, int recvcount, MPI_Datatype recvtype,
                                MPI_Comm comm) {
  size_t block = 0;
  const Route route =
      sendbuf == MPI_IN_PLACE
          ? Route::InPlace
          : unaliased(sendbuf, recvbuf,
                      moving(sendcount, sendtype, recvcount, recvtype, false, &block));
  const auto run = [&](loomComm_t c) {
    return loomAlltoAll(sendbuf, recvbuf, block, loomUint8, c, nullptr);
  };
  loomComm_t lc = admit(Call::Alltoall, comm, route, block * ranksOf(comm), run);
  if (lc == nullptr) {
    return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  }
  return finish(Call::Alltoall, comm, lc, run(lc));
}

namespace loom::mpi {
namespace {

// An MPI_Alltoallv's counts and displacements (elements of `element` bytes) in bytes, for
// loomAlltoAllv; false when one is negative.
bool inBytes(const int* counts, const int* displs, size_t n, size_t element,
             std::vector<size_t>* byteCounts, std::vector<size_t>* byteDispls) {
  byteCounts->resize(n);
  byteDispls->resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (counts[i] < 0 || displs[i] < 0) return false;
    (*byteCounts)[i] = size_t(counts[i]) * element;
    (*byteDispls)[i] = size_t(displs[i]) * element;
  }
  return true;
}

}  // namespace
}  // namespace loom::mpi

LOOM_MPI_ENTRY int MPI_Alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                                 MPI_Datatype sendtype, void* recvbuf, const int recvcounts[],
                                 const int rdispls[], MPI_Datatype recvtype, MPI_Comm comm) {
  // The counts differ from rank to rank, so no size threshold: every rank must agree.
  thread_local std::vector<size_t> sc, sd, rc, rd;
  size_t sendElement = 0, recvElement = 0;
  const size_t n = ranksOf(comm);
  Route route = Route::Loom;
  if (n == 0) route = Route::BadComm;
  else if (sendbuf == MPI_IN_PLACE) route = Route::InPlace;
  else if (unaliased(sendbuf, recvbuf, route) != route) route = Route::BadArgument;
  else if (!dense(sendtype, &sendElement) || !dense(recvtype, &recvElement))
    route = Route::Datatype;
  else if (!inBytes(sendcounts, sdispls, n, sendElement, &sc, &sd) ||
           !inBytes(recvcounts, rdispls, n, recvElement, &rc, &rd))
    route = Route::BadArgument;
  const auto run = [&](loomComm_t c) {
    return loomAlltoAllv(sendbuf, sc.data(), sd.data(), recvbuf, rc.data(), rd.data(),
                         loomUint8, c, nullptr);
  };
  loomComm_t lc = admit(Call::Alltoallv, comm, route, SIZE_MAX, run);
  if (lc == nullptr) {
    return PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                          recvtype, comm);
  }
  return finish(Call::Alltoallv, comm, lc, run(lc));
}

LOOM_MPI_ENTRY int MPI_Barrier(MPI_Comm comm) {
  // No rank leaves an allreduce before every rank has entered it.
  uint8_t token = 0;
  const auto run = [&](loomComm_t c) {
    return loomAllReduce(&token, &token, 1, loomUint8, loomSum, c, nullptr);
  };
  loomComm_t lc = admit(Call::Barrier, comm, Route::Loom, 0, run);
  if (lc == nullptr) return PMPI_Barrier(comm);
  return finish(Call::Barrier, comm, lc, run(lc));
}

LOOM_MPI_ENTRY int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count,
                                  MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                  MPI_Request* request) {
  Reduction r{};
  Route route = count < 0 || request == nullptr
                    ? Route::BadArgument
                    : unaliased(sendbuf, recvbuf, reduction(datatype, op, &r));
  const void* in = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  const Pending args{in, recvbuf, size_t(count) * r.perElement, r.type, r.op, 0};
  const auto priced = [&](loomComm_t c) { return runPending(c, Call::Iallreduce, args); };
  loomComm_t lc =
      admit(Call::Iallreduce, comm, route, size_t(count) * r.elementBytes, priced, false);
  if (lc == nullptr) {
    return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  }
  return enqueue(lc, Call::Iallreduce, args, request);
}

LOOM_MPI_ENTRY int MPI_Ibcast(void* buffer, int count, MPI_Datatype datatype, int root,
                              MPI_Comm comm, MPI_Request* request) {
  size_t element = 0;
  Route route = count < 0 || request == nullptr
                    ? Route::BadArgument
                    : rooted(comm, root, dense(datatype, &element) ? Route::Loom
                                                                   : Route::Datatype);
  const size_t bytes = size_t(count) * element;
  const Pending args{nullptr, buffer, bytes, loomUint8, loomSum, root};
  const auto priced = [&](loomComm_t c) { return runPending(c, Call::Ibcast, args); };
  loomComm_t lc = admit(Call::Ibcast, comm, route, bytes, priced, false);
  if (lc == nullptr) return PMPI_Ibcast(buffer, count, datatype, root, comm, request);
  return enqueue(lc, Call::Ibcast, args, request);
}

LOOM_MPI_ENTRY int MPI_Finalize(void) {
  releaseAtFinalize();
  return PMPI_Finalize();
}
