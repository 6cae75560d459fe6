! The interposed calls from Fortran (`use mpi`; `use mpi_f08` built with LOOM_F08 defined), in
! place and out of place, the non-blocking mpi_iallreduce and mpi_ibcast under
! MPI_THREAD_MULTIPLE too; and that each ran on loom (argument "loom") or that no preload is
! there (argument "none"). The calls read the same in both bindings; only the module differs.
! Every rank's input is a function of its rank (xval, ival), so each rank computes every
! result itself: no reference call through MPI, whose Fortran PMPI_* names in MPICH lead to its
! C MPI_* entry points, which the preload interposes.
!
!   mpirun -np 4 [-x LD_PRELOAD=libloom-mpi-preload.so] loom_mpi_fortran_test loom|none
program fortran_test
#ifdef LOOM_F08
  use mpi_f08
#else
  use mpi
#endif
  implicit none
  integer, parameter :: n = 4099
  integer :: ierr, rank, nranks, i, j, fails, total, expected, provided
  integer(kind=8) :: before, after
  character(len=8) :: mode
  ! y and iy: the buffers of the non-blocking calls, written while they are in flight.
  double precision :: x(n), ref(n)
  double precision, asynchronous :: y(n)
  integer :: ix(n * 8), iref(n * 8)
  integer, asynchronous :: iy(n * 8)
  integer :: counts(8), displs(8)
#ifdef LOOM_F08
  type(MPI_Request) :: requests(2)
#else
  integer :: requests(2)
#endif

  ! MPI_THREAD_MULTIPLE: the preload runs non-blocking calls on loom only then.
  call mpi_init_thread(MPI_THREAD_MULTIPLE, provided, ierr)
  call mpi_comm_rank(MPI_COMM_WORLD, rank, ierr)
  call mpi_comm_size(MPI_COMM_WORLD, nranks, ierr)
  call get_command_argument(1, mode)
  fails = 0
  call loom_calls_on_loom(before)

  do i = 1, n
    x(i) = xval(rank, i)
    ref(i) = sum([(xval(j, i), j = 0, nranks - 1)])
  end do
  call mpi_allreduce(x, y, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  call expect(all(y == ref), 'mpi_allreduce sum')
  y = x
  call mpi_allreduce(MPI_IN_PLACE, y, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  call expect(all(y == ref), 'mpi_allreduce sum in place')

  do i = 1, n * nranks
    ix(i) = ival(rank, i)
  end do
  do i = 1, n
    iref(i) = maxval([(ival(j, i), j = 0, nranks - 1)])
  end do
  call mpi_reduce(ix, iy, n, MPI_INTEGER, MPI_MAX, nranks - 1, MPI_COMM_WORLD, ierr)
  if (rank == nranks - 1) call expect(all(iy(1:n) == iref(1:n)), 'mpi_reduce max')

  do i = 1, n
    iref(i) = minval([(ival(j, rank * n + i), j = 0, nranks - 1)])
  end do
  iy(1:n * nranks) = ix(1:n * nranks)
  call mpi_reduce_scatter_block(MPI_IN_PLACE, iy, n, MPI_INTEGER, MPI_MIN, MPI_COMM_WORLD, ierr)
  call expect(all(iy(1:n) == iref(1:n)), 'mpi_reduce_scatter_block min in place')

  iy(1:n) = ix(1:n)
  iref(1:n) = [(ival(1, i), i = 1, n)]
  call mpi_bcast(iy, n, MPI_INTEGER, 1, MPI_COMM_WORLD, ierr)
  call expect(all(iy(1:n) == iref(1:n)), 'mpi_bcast')

  do j = 0, nranks - 1
    iref(j * n + 1:(j + 1) * n) = [(ival(j, i), i = 1, n)]
  end do
  call mpi_allgather(ix, n, MPI_INTEGER, iy, n, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  call expect(all(iy(1:n * nranks) == iref(1:n * nranks)), 'mpi_allgather')

  ! Rank j's block for this rank, from each j in turn.
  do j = 0, nranks - 1
    iref(j * n + 1:(j + 1) * n) = [(ival(j, rank * n + i), i = 1, n)]
  end do
  call mpi_alltoall(ix, n, MPI_INTEGER, iy, n, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  call expect(all(iy(1:n * nranks) == iref(1:n * nranks)), 'mpi_alltoall')

  do i = 1, nranks
    counts(i) = n
    displs(i) = (i - 1) * n
  end do
  call mpi_alltoallv(ix, counts, displs, MPI_INTEGER, iy, counts, displs, MPI_INTEGER, &
                     MPI_COMM_WORLD, ierr)
  call expect(all(iy(1:n * nranks) == iref(1:n * nranks)), 'mpi_alltoallv')

  ! Non-blocking, both in flight at once (the blocking calls above made the world's loom
  ! communicator, which they need).
  y = x
  iy(1:n) = ix(1:n)
  iref(1:n) = [(ival(0, i), i = 1, n)]
  call mpi_iallreduce(MPI_IN_PLACE, y, n, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, &
                      requests(1), ierr)
  call mpi_ibcast(iy, n, MPI_INTEGER, 0, MPI_COMM_WORLD, requests(2), ierr)
  call mpi_waitall(2, requests, MPI_STATUSES_IGNORE, ierr)
  call expect(ierr == MPI_SUCCESS, 'mpi_waitall')
  call expect(all(y == ref), 'mpi_iallreduce sum in place')
  call expect(all(iy(1:n) == iref(1:n)), 'mpi_ibcast')

  ! Ten calls of at least 4096 bytes with types and ops loom has.
  call loom_calls_on_loom(after)
  expected = 10
  call expect(provided == MPI_THREAD_MULTIPLE, 'MPI_THREAD_MULTIPLE was not provided')
  if (trim(mode) == 'none') then
    call expect(after == -1, 'no preload, yet loomMpiCounts is there')
  else
    call expect(after - before == expected, 'every call ran on loom')
  end if
  call mpi_barrier(MPI_COMM_WORLD, ierr)
  call pmpi_allreduce(fails, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a, i0, a)', 'loom_mpi_fortran_test: ', total, ' failed checks'
  call mpi_finalize(ierr)
  if (total /= 0) stop 1

contains

  ! Rank r's inputs: small integers, whose sums are exact in any order.
  double precision function xval(r, i)
    integer, intent(in) :: r, i
    xval = dble(mod(r * 7 + i, 11) - 5)
  end function xval

  integer function ival(r, i)
    integer, intent(in) :: r, i
    ival = mod(r * 13 + i * 7, 50) - 25
  end function ival

  subroutine expect(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      print '(a, i0, 2a)', 'rank ', rank, ': failed: ', what
      fails = fails + 1
    end if
  end subroutine expect
end program fortran_test
