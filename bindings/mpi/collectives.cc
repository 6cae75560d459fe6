// The interposed MPI calls: each runs on loom when it can (interpose.h says how that is
// decided), and is handed to PMPI_* unchanged when it cannot.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <vector>

#include "bindings/mpi/interpose.h"

namespace loom::mpi {
namespace {

// Where a call runs: on loom (comm, its loom communicator) or on MPI; timed: a trial call
// (measuredRoute), whose time goes to recordTrial.
struct Admission {
  loomComm_t comm = nullptr;
  bool onLoom = false;
  bool timed = false;
};

// Where a call runs, noting its route. bytes is the call's size as LOOM_MPI_MIN_BYTES measures
// it: the same on every rank (SIZE_MAX: no size, loom whatever the threshold). Without a
// threshold set, loom's model decides (modelPrefersLoom), pricing run(loomComm), the loom call
// that runs it, and a blocking call the model sends to loom is timed against MPI's on its
// size's first calls (measuredRoute). A blocking call on loom runs after the communicator's
// queued non-blocking ones; a non-blocking call never makes a loom communicator (see
// madeLoomCommOf), nor is timed (it must not wait for the other ranks, as the verdict does):
// where the model sends it to loom, it follows its blocking counterpart's verdict of the same
// size (blockingVerdict) once there is one.
template <typename Run>
Admission admit(Call call, MPI_Comm comm, Route route, size_t bytes, const Run& run,
                bool blocking = true) {
  Admission a;
  const size_t threshold = minBytes(call);
  if (!interposing()) route = Route::Disabled;
  else if (route == Route::Loom && threshold != SIZE_MAX && bytes < threshold) route = Route::Small;
  if (route == Route::Loom) {
    a.comm = blocking ? loomCommOf(comm, &route) : madeLoomCommOf(comm, &route);
  }
  a.onLoom = a.comm != nullptr;
  const Issue issue{[](const void* context, loomComm_t c) {
                      return (*static_cast<const Run*>(context))(c);
                    },
                    &run};
  if (a.onLoom && threshold == SIZE_MAX && bytes != SIZE_MAX) {
    if (!modelPrefersLoom(a.comm, call, bytes, issue)) {
      route = Route::Model;
      a.onLoom = false;
    } else if (blocking) {
      const Measured m = measuredRoute(a.comm, call, bytes);
      a.onLoom = m.onLoom;
      a.timed = m.timed;
      if (!m.onLoom) route = m.trial ? Route::Trial : Route::Measured;
    } else if (blockingVerdict(a.comm, call, bytes) == 0) {
      route = Route::Measured;
      a.onLoom = false;
    }
  }
  if (a.onLoom && blocking) awaitQueue(a.comm);
  note(call, route);
  return a;
}

// Runs a blocking call where admit sends it: run(loomComm) on loom, then after(loomComm) where
// it succeeded; or fallback(), MPI's own call. A trial call's time goes to recordTrial.
template <typename Run, typename Fallback, typename After>
int dispatch(Call call, MPI_Comm comm, Route route, size_t bytes, const Run& run,
             const Fallback& fallback, const After& after) {
  const Admission a = admit(call, comm, route, bytes, run);
  // Read only for a trial call, whose time recordTrial takes; other calls have no use for it.
  const auto start = a.timed ? std::chrono::steady_clock::now()
                             : std::chrono::steady_clock::time_point{};
  int rc = MPI_SUCCESS;
  if (a.onLoom) {
    const loomResult_t result = run(a.comm);
    if (result == loomSuccess) after(a.comm);
    rc = finish(call, comm, a.comm, result);
  } else {
    rc = fallback();
  }
  if (a.timed) {
    const auto elapsed = std::chrono::steady_clock::now() - start;
    recordTrial(a.comm, comm, call, bytes, a.onLoom,
                std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count());
  }
  return rc;
}
template <typename Run, typename Fallback>
int dispatch(Call call, MPI_Comm comm, Route route, size_t bytes, const Run& run,
             const Fallback& fallback) {
  return dispatch(call, comm, route, bytes, run, fallback, [](loomComm_t) {});
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
  return dispatch(Call::Allreduce, comm, route, size_t(count) * r.elementBytes, run,
                  [&] { return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm); });
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
  return dispatch(Call::Reduce, comm, route, size_t(count) * r.elementBytes, run, [&] {
    return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
  });
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
  return dispatch(Call::Bcast, comm, route, bytes, run,
                  [&] { return PMPI_Bcast(buffer, count, datatype, root, comm); });
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
  return dispatch(Call::Allgather, comm, route, block * ranksOf(comm), run, [&] {
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  });
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
  return dispatch(
      Call::ReduceScatterBlock, comm, route, block * ranksOf(comm), run,
      [&] { return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm); },
      [&](loomComm_t c) {
        if (mine(c) != recvbuf) std::memmove(recvbuf, mine(c), block);
      });
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
  return dispatch(Call::Alltoall, comm, route, block * ranksOf(comm), run, [&] {
    return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  });
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
  return dispatch(Call::Alltoallv, comm, route, SIZE_MAX, run, [&] {
    return PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                          recvtype, comm);
  });
}

LOOM_MPI_ENTRY int MPI_Barrier(MPI_Comm comm) {
  // No rank leaves an allreduce before every rank has entered it.
  uint8_t token = 0;
  const auto run = [&](loomComm_t c) {
    return loomAllReduce(&token, &token, 1, loomUint8, loomSum, c, nullptr);
  };
  return dispatch(Call::Barrier, comm, Route::Loom, 0, run, [&] { return PMPI_Barrier(comm); });
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
  const Admission a =
      admit(Call::Iallreduce, comm, route, size_t(count) * r.elementBytes, priced, false);
  if (!a.onLoom) return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  return enqueue(a.comm, Call::Iallreduce, args, request);
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
  const Admission a = admit(Call::Ibcast, comm, route, bytes, priced, false);
  if (!a.onLoom) return PMPI_Ibcast(buffer, count, datatype, root, comm, request);
  return enqueue(a.comm, Call::Ibcast, args, request);
}

LOOM_MPI_ENTRY int MPI_Finalize(void) {
  releaseAtFinalize();
  return PMPI_Finalize();
}
