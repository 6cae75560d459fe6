"""An mpi4py program under the interposer: its collectives on NumPy arrays give the exact
answers (small integers, in every order exact), and with the preload they ran on loom.

    mpirun -np 4 -x LD_PRELOAD=libloom-mpi-preload.so -x LOOM_MPI_MIN_BYTES=4096 \\
        python3 mpi4py_test.py loom|none
"""
import ctypes
import sys

import numpy as np
from mpi4py import MPI


def loom_calls():
    """Calls that ran on loom so far, from the preload's loomMpiCounts (None without it)."""
    try:
        counts = ctypes.CDLL(None).loomMpiCounts
    except AttributeError:
        return None
    on_loom = ctypes.c_long()
    counts(ctypes.byref(on_loom), None, None)
    return on_loom.value


def main():
    mode = sys.argv[1]
    comm = MPI.COMM_WORLD.Dup()
    rank, n = comm.Get_rank(), comm.Get_size()
    count = 5000
    index = np.arange(count)
    before = loom_calls()
    failures = []

    def expect(ok, what):
        if not ok:
            failures.append(what)

    x = ((rank * 7 + index) % 11 - 5).astype(np.float64)
    total = sum(((r * 7 + index) % 11 - 5) for r in range(n)).astype(np.float64)
    out = np.empty_like(x)
    comm.Allreduce(x, out, op=MPI.SUM)
    expect(np.array_equal(out, total), "Allreduce float64 sum")
    inplace = x.copy()
    comm.Allreduce(MPI.IN_PLACE, inplace, op=MPI.SUM)
    expect(np.array_equal(inplace, total), "Allreduce float64 sum in place")

    ints = ((rank * 13 + index) % 50 - 25).astype(np.int32)
    most = np.max([((r * 13 + index) % 50 - 25) for r in range(n)], axis=0).astype(np.int32)
    out = np.empty_like(ints)
    comm.Allreduce(ints, out, op=MPI.MAX)
    expect(np.array_equal(out, most), "Allreduce int32 max")

    buf = ints.copy() if rank == 1 % n else np.zeros_like(ints)
    comm.Bcast(buf, root=1 % n)
    expect(np.array_equal(buf, ((1 % n) * 13 + index) % 50 - 25), "Bcast int32")

    gathered = np.empty(count * n, dtype=np.int32)
    comm.Allgather(ints, gathered)
    expect(np.array_equal(gathered, np.concatenate(
        [(r * 13 + index) % 50 - 25 for r in range(n)])), "Allgather int32")

    blocks = np.arange(count * n, dtype=np.int64) + rank * 1000000
    swapped = np.empty_like(blocks)
    comm.Alltoall(blocks, swapped)
    expect(np.array_equal(swapped, np.concatenate(
        [np.arange(rank * count, (rank + 1) * count) + r * 1000000 for r in range(n)])),
        "Alltoall int64")

    after = loom_calls()
    if mode == "none":
        expect(after is None, "no preload, yet loomMpiCounts is there")
    else:
        expect(after is not None and after - before == 6,
               f"6 calls on loom, not {None if after is None else after - before}")
    comm.Free()
    for what in failures:
        print(f"rank {rank}: failed: {what}", file=sys.stderr)
    failed = MPI.COMM_WORLD.allreduce(len(failures))
    if rank == 0:
        print(f"mpi4py_test: {failed} failed checks")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
