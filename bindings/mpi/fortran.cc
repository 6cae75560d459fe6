// The Fortran entry points of the interposed calls (mpif.h, `use mpi` and `use mpi_f08`), for
// Open MPI, whose Fortran bindings call PMPI_* directly and so would pass the C ones by: each
// converts the Fortran handles and MPI_IN_PLACE and calls the C entry point, which routes it.
#include "bindings/mpi/interpose.h"

#ifdef OPEN_MPI

// Open MPI's Fortran MPI_IN_PLACE and MPI_BOTTOM: common blocks whose addresses a Fortran
// caller passes. Weak, so that the library loads where Open MPI's Fortran support is absent.
extern "C" __attribute__((weak)) int mpi_fortran_in_place_;
extern "C" __attribute__((weak)) int mpi_fortran_bottom_;

namespace {

template <typename T>
T* fromFortran(T* buffer) {
  const void* p = buffer;
  if (&mpi_fortran_in_place_ != nullptr && p == &mpi_fortran_in_place_) return (T*)MPI_IN_PLACE;
  if (&mpi_fortran_bottom_ != nullptr && p == &mpi_fortran_bottom_) return (T*)MPI_BOTTOM;
  return buffer;
}

void done(MPI_Fint* ierr, int rc) {
  if (ierr != nullptr) *ierr = rc;
}

}  // namespace

// gfortran's name (lower case, one underscore) is the definition; the other spellings that
// Open MPI's own Fortran library answers to are aliases of it, and so is the mpi_f08 module's
// entry point (name_f08_): it takes the same arguments (a handle type's one INTEGER, by
// reference; ierror optional, so maybe NULL) and, like the others, calls Open MPI's C PMPI_*
// directly. mpi_f08's PMPI_* entry points (pmpi_*_f08_) stay Open MPI's.
#define LOOM_FORTRAN_ALIAS(name, alias_name) \
  extern "C" __attribute__((visibility("default"), alias(#name "_"))) decltype(name##_) alias_name;
#define LOOM_FORTRAN_ALIASES(name, upper) \
  LOOM_FORTRAN_ALIAS(name, name)          \
  LOOM_FORTRAN_ALIAS(name, name##__)      \
  LOOM_FORTRAN_ALIAS(name, upper)         \
  LOOM_FORTRAN_ALIAS(name, name##_f08_)
#define LOOM_FORTRAN extern "C" __attribute__((visibility("default"))) void

LOOM_FORTRAN mpi_allreduce_(const void* sendbuf, void* recvbuf, MPI_Fint* count,
                            MPI_Fint* datatype, MPI_Fint* op, MPI_Fint* comm, MPI_Fint* ierr) {
  done(ierr, MPI_Allreduce(fromFortran(sendbuf), recvbuf, *count, PMPI_Type_f2c(*datatype),
                           PMPI_Op_f2c(*op), PMPI_Comm_f2c(*comm)));
}
LOOM_FORTRAN_ALIASES(mpi_allreduce, MPI_ALLREDUCE)

LOOM_FORTRAN mpi_reduce_(const void* sendbuf, void* recvbuf, MPI_Fint* count, MPI_Fint* datatype,
                         MPI_Fint* op, MPI_Fint* root, MPI_Fint* comm, MPI_Fint* ierr) {
  done(ierr, MPI_Reduce(fromFortran(sendbuf), recvbuf, *count, PMPI_Type_f2c(*datatype),
                        PMPI_Op_f2c(*op), *root, PMPI_Comm_f2c(*comm)));
}
LOOM_FORTRAN_ALIASES(mpi_reduce, MPI_REDUCE)

LOOM_FORTRAN mpi_bcast_(void* buffer, MPI_Fint* count, MPI_Fint* datatype, MPI_Fint* root,
                        MPI_Fint* comm, MPI_Fint* ierr) {
  done(ierr, MPI_Bcast(buffer, *count, PMPI_Type_f2c(*datatype), *root, PMPI_Comm_f2c(*comm)));
}
LOOM_FORTRAN_ALIASES(mpi_bcast, MPI_BCAST)

LOOM_FORTRAN mpi_allgather_(const void* sendbuf, MPI_Fint* sendcount, MPI_Fint* sendtype,
                            void* recvbuf, MPI_Fint* recvcount, MPI_Fint* recvtype,
                            MPI_Fint* comm, MPI_Fint* ierr) {
  done(ierr, MPI_Allgather(fromFortran(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype), recvbuf,
                           *recvcount, PMPI_Type_f2c(*recvtype), PMPI_Comm_f2c(*comm)));
}
LOOM_FORTRAN_ALIASES(mpi_allgather, MPI_ALLGATHER)

LOOM_FORTRAN mpi_reduce_scatter_block_(const void* sendbuf, void* recvbuf, MPI_Fint* recvcount,
                                       MPI_Fint* datatype, MPI_Fint* op, MPI_Fint* comm,
                                       MPI_Fint* ierr) {
  done(ierr, MPI_Reduce_scatter_block(fromFortran(sendbuf), recvbuf, *recvcount,
                                      PMPI_Type_f2c(*datatype), PMPI_Op_f2c(*op),
                                      PMPI_Comm_f2c(*comm)));
}
LOOM_FORTRAN_ALIASES(mpi_reduce_scatter_block, MPI_REDUCE_SCATTER_BLOCK)

LOOM_FORTRAN mpi_alltoall_(const void* sendbuf, MPI_Fint* sendcount, MPI_Fint* sendtype,
                           void* recvbuf, MPI_Fint* recvcount, MPI_Fint* recvtype, MPI_Fint* comm,
                           MPI_Fint* ierr) {
  done(ierr, MPI_Alltoall(fromFortran(sendbuf), *sendcount, PMPI_Type_f2c(*sendtype), recvbuf,
                          *recvcount, PMPI_Type_f2c(*recvtype), PMPI_Comm_f2c(*comm)));
}
LOOM_FORTRAN_ALIASES(mpi_alltoall, MPI_ALLTOALL)

// MPI_Fint is C's int here (Open MPI with gfortran), so the count arrays pass as they are.
static_assert(sizeof(MPI_Fint) == sizeof(int), "Fortran INTEGER arrays are int arrays");

LOOM_FORTRAN mpi_alltoallv_(const void* sendbuf, const MPI_Fint* sendcounts,
                            const MPI_Fint* sdispls, MPI_Fint* sendtype, void* recvbuf,
                            const MPI_Fint* recvcounts, const MPI_Fint* rdispls,
                            MPI_Fint* recvtype, MPI_Fint* comm, MPI_Fint* ierr) {
  done(ierr, MPI_Alltoallv(fromFortran(sendbuf), sendcounts, sdispls, PMPI_Type_f2c(*sendtype),
                           recvbuf, recvcounts, rdispls, PMPI_Type_f2c(*recvtype),
                           PMPI_Comm_f2c(*comm)));
}
LOOM_FORTRAN_ALIASES(mpi_alltoallv, MPI_ALLTOALLV)

LOOM_FORTRAN mpi_barrier_(MPI_Fint* comm, MPI_Fint* ierr) {
  done(ierr, MPI_Barrier(PMPI_Comm_f2c(*comm)));
}
LOOM_FORTRAN_ALIASES(mpi_barrier, MPI_BARRIER)

// The non-blocking calls hand MPI's request back as a Fortran handle (MPI_Request_c2f), which
// Fortran's mpi_wait and the rest turn back into the C request, generalized or MPI's own.
LOOM_FORTRAN mpi_iallreduce_(const void* sendbuf, void* recvbuf, MPI_Fint* count,
                             MPI_Fint* datatype, MPI_Fint* op, MPI_Fint* comm, MPI_Fint* request,
                             MPI_Fint* ierr) {
  MPI_Request r = MPI_REQUEST_NULL;
  const int rc = MPI_Iallreduce(fromFortran(sendbuf), recvbuf, *count, PMPI_Type_f2c(*datatype),
                                PMPI_Op_f2c(*op), PMPI_Comm_f2c(*comm), &r);
  if (rc == MPI_SUCCESS) *request = PMPI_Request_c2f(r);
  done(ierr, rc);
}
LOOM_FORTRAN_ALIASES(mpi_iallreduce, MPI_IALLREDUCE)

LOOM_FORTRAN mpi_ibcast_(void* buffer, MPI_Fint* count, MPI_Fint* datatype, MPI_Fint* root,
                         MPI_Fint* comm, MPI_Fint* request, MPI_Fint* ierr) {
  MPI_Request r = MPI_REQUEST_NULL;
  const int rc =
      MPI_Ibcast(buffer, *count, PMPI_Type_f2c(*datatype), *root, PMPI_Comm_f2c(*comm), &r);
  if (rc == MPI_SUCCESS) *request = PMPI_Request_c2f(r);
  done(ierr, rc);
}
LOOM_FORTRAN_ALIASES(mpi_ibcast, MPI_IBCAST)

LOOM_FORTRAN mpi_finalize_(MPI_Fint* ierr) { done(ierr, MPI_Finalize()); }
LOOM_FORTRAN_ALIASES(mpi_finalize, MPI_FINALIZE)

#endif  // OPEN_MPI
