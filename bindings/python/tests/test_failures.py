"""Failures across ranks, each rank a process of its own: a killed rank, a silent one, an
aborted communicator; and communicators from the environment, as launchers start ranks."""
import os
import socket
import time

import numpy as np
import pytest

import loom
from ranks import RankPool


def die(comm):
    os._exit(3)


def all_reduce_error(comm):
    """The error an all_reduce raises here, with how long it took."""
    start = time.monotonic()
    try:
        comm.all_reduce(np.ones(1000, np.float32))
    except loom.Error as e:
        return type(e).__name__, str(e), time.monotonic() - start
    return None


def abort(comm):
    comm.abort()
    assert comm.closed


def test_killed_rank_raises_on_the_others():
    pool = RankPool(3, comm_timeout=20)
    try:
        pool.conns[2].send((die, ()))
        pool.procs[2].join(30)
        for name, message, seconds in pool.run(all_reduce_error, ranks=[0, 1]):
            assert name == "RemoteError" and "rank 2" in message, message
            assert seconds < 20, f"took {seconds:.1f} s, the communicator's timeout is 20 s"
    finally:
        pool.kill()


def test_silent_rank_times_out():
    pool = RankPool(2, comm_timeout=2)
    try:
        name, message, seconds = pool.run(all_reduce_error, ranks=[0])[0]
        assert name == "TimeoutError", message
        assert 1.5 < seconds < 10, f"took {seconds:.1f} s with a 2 s timeout: {message}"
    finally:
        pool.kill()


def test_aborted_communicator_fails_its_peers():
    pool = RankPool(2)
    try:
        pool.run(abort, ranks=[1])
        name, message, _ = pool.run(all_reduce_error, ranks=[0])[0]
        assert name == "RemoteError" and "abort" in message, message
    finally:
        pool.kill()


def sum_of_ranks(comm):
    x = np.array([comm.rank + 1], np.int64)
    comm.all_reduce(x)
    return comm.rank, comm.size, int(x[0])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("launcher", ["loom", "torchrun"])
def test_from_env(launcher):
    port, size = free_port(), 3
    if launcher == "loom":
        envs = [{"LOOM_RANK": str(r), "LOOM_WORLD_SIZE": str(size),
                 "LOOM_ROOT": f"127.0.0.1:{port}"} for r in range(size)]
    else:
        envs = [{"RANK": str(r), "WORLD_SIZE": str(size), "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": str(port)} for r in range(size)]
    pool = RankPool(size, envs=envs, from_env=True)
    try:
        assert pool.run(sum_of_ranks) == [(r, size, 6) for r in range(size)]
    finally:
        pool.close()


def shrink_without(comm, dead):
    smaller = comm.shrink([dead], abort=True)
    x = np.array([comm.rank + 1], np.int64)
    smaller.all_reduce(x)
    assert smaller.size == comm.size - 1 and x[0] == sum(r + 1 for r in range(comm.size)
                                                          if r != dead)
    smaller.destroy()


def test_shrink_leaves_a_dead_rank_out():
    pool = RankPool(3, comm_timeout=20)
    try:
        pool.conns[2].send((die, ()))
        pool.procs[2].join(30)
        pool.run(shrink_without, 2, ranks=[0, 1])
    finally:
        pool.kill()
