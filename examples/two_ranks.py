"""Two ranks sum a vector, each in a process of its own; the parent makes the id."""
import multiprocessing

import numpy as np

import loom


def rank(uid, r):
    with loom.Communicator(uid, r, 2) as comm:
        x = np.arange(1, 5, dtype=np.float32) * (r + 1)  # rank 0: 1 2 3 4, rank 1: 2 4 6 8
        comm.all_reduce(x)  # in place; comm.all_reduce(x, out) writes out instead
        print(f"rank {r}: {x}")  # [ 3.  6.  9. 12.]
        assert x.tolist() == [3, 6, 9, 12]


if __name__ == "__main__":
    uid = loom.UniqueId()  # picklable: here it reaches the ranks through multiprocessing
    ranks = [multiprocessing.Process(target=rank, args=(uid, r)) for r in range(2)]
    for p in ranks:
        p.start()
    for p in ranks:
        p.join()
    raise SystemExit(max(p.exitcode for p in ranks))
