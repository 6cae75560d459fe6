"""An mpi4py program that leans on the collectives: Allreduce, Reduce, Bcast, Allgather,
Reduce_scatter_block, Alltoall, Alltoallv and Barrier on NumPy arrays of several types and
sizes, in place and not, on the world and on a split. Rank 0 prints one digest per rank and call
of what it received, so that two runs (with and without a preload library) can be compared line by
line; run under mpirun."""
import hashlib

import numpy as np
from mpi4py import MPI


def digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def data(rank, count, dtype, seed):
    """Small integers: exact sums in any order."""
    rng = np.random.default_rng(1000 * seed + rank)
    return rng.integers(-8, 9, count).astype(dtype)


def run(comm, tag):
    rank, size = comm.Get_rank(), comm.Get_size()
    lines = []
    for seed, count in enumerate((1, 100, 30000, 1 << 20)):
        for dtype in (np.float64, np.float32, np.int32, np.int64):
            x = data(rank, count, dtype, seed)
            for op, name in ((MPI.SUM, "sum"), (MPI.MAX, "max"), (MPI.MIN, "min")):
                out = np.empty_like(x)
                comm.Allreduce(x, out, op=op)
                inplace = x.copy()
                comm.Allreduce(MPI.IN_PLACE, inplace, op=op)
                lines.append(f"{tag} Allreduce {count} {np.dtype(dtype).name} {name} "
                             f"{digest(out)} {digest(inplace)}")
            root = seed % size
            red = np.empty_like(x) if rank == root else None
            comm.Reduce(x, red, op=MPI.SUM, root=root)
            b = x.copy()
            comm.Bcast(b, root=root)
            gathered = np.empty(count * size, dtype)
            comm.Allgather(x, gathered)
            block = np.empty(max(1, count // size), dtype)
            comm.Reduce_scatter_block(data(rank, block.size * size, dtype, seed), block, op=MPI.SUM)
            sent = data(rank, block.size * size, dtype, seed + 1)
            got = np.empty_like(sent)
            comm.Alltoall(sent, got)
            lines.append(f"{tag} rooted/gathers {count} {np.dtype(dtype).name} "
                         f"{digest(red) if red is not None else '-'} {digest(b)} "
                         f"{digest(gathered)} {digest(block)} {digest(got)}")
    # Alltoallv: rank r sends r + j + 1 elements to rank j.
    send_counts = [rank + j + 1 for j in range(size)]
    recv_counts = [j + rank + 1 for j in range(size)]
    sent = data(rank, sum(send_counts), np.float64, 9)
    got = np.empty(sum(recv_counts))
    comm.Alltoallv([sent, send_counts], [got, recv_counts])
    comm.Barrier()
    lines.append(f"{tag} Alltoallv {digest(got)}")
    # The pickle-based lower-case API.
    lines.append(f"{tag} allreduce(object) {comm.allreduce(rank * 3 + 1)}")
    return lines


world = MPI.COMM_WORLD
lines = run(world, "world")
half = world.Split(world.Get_rank() % 2, world.Get_rank())
lines += run(half, f"split{world.Get_rank() % 2}")
half.Free()
# Rank 0 prints every rank's lines (ranks printing at once could interleave their lines).
everyone = world.gather(lines, root=0)
if world.Get_rank() == 0:
    print("\n".join(f"rank {r}: {line}" for r, mine in enumerate(everyone) for line in mine))
