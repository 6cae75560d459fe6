"""Every collective and point-to-point call on 1, 2 and 4 ranks, each rank a process of its own,
on NumPy arrays and torch tensors of every type, in place and out of place, and on bytes-like
buffers; results checked exactly."""
import struct

import numpy as np
import pytest

import loom
from ranks import RankPool
from values import check, contribution, make, ops, read, reduced, types, zeros

LIBS = ["numpy", "torch"]


@pytest.fixture(scope="module", params=[1, 2, 4], ids=lambda n: f"{n}ranks")
def pool(request):
    pool = RankPool(request.param)
    yield pool
    pool.close()


@pytest.fixture(params=LIBS)
def lib(request):
    if request.param == "torch":
        pytest.importorskip("torch", reason="torch is not installed for this interpreter")
    return request.param


# Each function below runs on every rank (pool.run) and asserts there.

def all_reduce(comm, lib, count):
    for dtype in types(lib):
        for op in ops(dtype):
            want = reduced(op, comm.size, count)
            x = make(lib, dtype, contribution(op, comm.rank, count))
            out = zeros(lib, dtype, count)
            assert comm.all_reduce(x, out, getattr(loom, op)) is out
            check(out, want, f"{dtype} {op}")
            assert comm.all_reduce(x, op=getattr(loom, op)) is x
            check(x, want, f"{dtype} {op} in place")
    return comm.last_algorithm


def broadcast(comm, lib, count):
    for dtype in types(lib):
        for root in sorted({0, comm.size - 1}):
            data = contribution("SUM", root + 3, count)
            x = make(lib, dtype, data if comm.rank == root else np.zeros(count))
            out = zeros(lib, dtype, count)
            assert comm.broadcast(x, out, root=root) is out
            check(out, data, f"{dtype} root {root}")
            assert comm.broadcast(x, root=root) is x
            check(x, data, f"{dtype} root {root} in place")


def reduce(comm, lib, count):
    root = comm.size - 1
    for dtype in types(lib):
        for op in ops(dtype):
            want = reduced(op, comm.size, count)
            x = make(lib, dtype, contribution(op, comm.rank, count))
            out = zeros(lib, dtype, count)
            comm.reduce(x, out, getattr(loom, op), root=root)
            if comm.rank == root:
                check(out, want, f"{dtype} {op}")
            comm.reduce(x, op=getattr(loom, op), root=root)
            if comm.rank == root:
                check(x, want, f"{dtype} {op} in place")


def all_gather(comm, lib, count):
    want = np.concatenate([contribution("SUM", r, count) for r in range(comm.size)])
    mine = slice(comm.rank * count, (comm.rank + 1) * count)
    for dtype in types(lib):
        out = zeros(lib, dtype, count * comm.size)
        assert comm.all_gather(make(lib, dtype, contribution("SUM", comm.rank, count)), out) is out
        check(out, want, dtype)
        out = zeros(lib, dtype, count * comm.size)
        out[mine] = make(lib, dtype, contribution("SUM", comm.rank, count))
        assert comm.all_gather(None, out) is out
        check(out, want, f"{dtype} in place")
        out[:] = 0
        out[mine] = make(lib, dtype, contribution("SUM", comm.rank, count))
        comm.all_gather(out[mine], out)  # this rank's block of recv: in place too
        check(out, want, f"{dtype} in place through a view")


def reduce_scatter(comm, lib, count):
    mine = slice(comm.rank * count, (comm.rank + 1) * count)
    for dtype in types(lib):
        for op in ops(dtype):
            want = reduced(op, comm.size, count * comm.size)[mine]
            x = make(lib, dtype, contribution(op, comm.rank, count * comm.size))
            out = zeros(lib, dtype, count)
            assert comm.reduce_scatter(x, out, getattr(loom, op)) is out
            check(out, want, f"{dtype} {op}")
            assert comm.reduce_scatter(x, op=getattr(loom, op)) is x
            check(x[mine], want, f"{dtype} {op} in place")


def exchange_value(sender, receiver, count, size):
    """Block of sender's send buffer for receiver in all_to_all(v)."""
    return (sender * size + receiver) * 3 + np.arange(count) % 3


def all_to_all(comm, lib, count):
    n = comm.size
    send = np.concatenate([exchange_value(comm.rank, j, count, n) for j in range(n)])
    want = np.concatenate([exchange_value(j, comm.rank, count, n) for j in range(n)])
    for dtype in types(lib):
        out = zeros(lib, dtype, count * n)
        x = make(lib, dtype, send)
        assert comm.all_to_all(x, out) is out
        check(out, want, dtype)
        assert comm.all_to_all(x) is x
        check(x, want, f"{dtype} in place")


def all_to_allv(comm, lib, count):
    n, r = comm.size, comm.rank
    send_counts = [(r + 2 * j) % 3 * count for j in range(n)]
    recv_counts = [(j + 2 * r) % 3 * count for j in range(n)]
    send = np.concatenate([exchange_value(r, j, send_counts[j], n) for j in range(n)])
    want = [exchange_value(j, r, recv_counts[j], n) for j in range(n)]
    # Received blocks in reverse order, one element apart.
    recv_displs, at = [0] * n, 0
    for j in reversed(range(n)):
        recv_displs[j], at = at, at + recv_counts[j] + 1
    for dtype in types(lib):
        out = zeros(lib, dtype, sum(recv_counts))
        assert comm.all_to_allv(make(lib, dtype, send), send_counts, out, recv_counts) is out
        check(out, np.concatenate(want), dtype)
        out = make(lib, dtype, np.full(at, 99))
        comm.all_to_allv(make(lib, dtype, send), send_counts, out, recv_counts,
                         recv_displs=recv_displs)
        expected = np.full(at, 99.0)
        for j in range(n):
            expected[recv_displs[j]:recv_displs[j] + recv_counts[j]] = want[j]
        check(out, expected, f"{dtype} with displacements")


def gather(comm, lib, count):
    root = comm.size - 1
    want = np.concatenate([contribution("SUM", r, count) for r in range(comm.size)])
    for dtype in types(lib):
        x = make(lib, dtype, contribution("SUM", comm.rank, count))
        out = zeros(lib, dtype, count * comm.size) if comm.rank == root else None
        comm.gather(x, out, root=root)
        if comm.rank == root:
            check(out, want, dtype)
            out[:] = 0
            out[root * count:] = x
            comm.gather(None, out, root=root)
            check(out, want, f"{dtype} in place")
        else:
            comm.gather(x, root=root)


def scatter(comm, lib, count):
    root = 0
    data = np.concatenate([contribution("SUM", r, count) for r in range(comm.size)])
    mine = contribution("SUM", comm.rank, count)
    for dtype in types(lib):
        x = make(lib, dtype, data) if comm.rank == root else None
        out = zeros(lib, dtype, count)
        assert comm.scatter(x, out, root=root) is out
        check(out, mine, dtype)
        if comm.rank == root:
            assert comm.scatter(x, root=root) is x
            check(x[:count], mine, f"{dtype} in place")
        else:
            comm.scatter(None, zeros(lib, dtype, count), root=root)


def send_recv(comm, lib, count):
    n, r = comm.size, comm.rank
    for dtype in types(lib):
        # A ring in one group: every rank sends before it receives.
        got = zeros(lib, dtype, count)
        with loom.group():
            comm.send(make(lib, dtype, contribution("SUM", r, count)), (r + 1) % n)
            comm.recv(got, (r - 1) % n)
        check(got, contribution("SUM", (r - 1) % n, count), f"{dtype} ring")
        # Pairs without a group: the even rank of each pair sends first.
        peer = r ^ 1
        if peer < n:
            got = zeros(lib, dtype, count)
            mine = make(lib, dtype, contribution("SUM", r, count))
            if r % 2 == 0:
                comm.send(mine, peer)
                comm.recv(got, peer)
            else:
                comm.recv(got, peer)
                comm.send(mine, peer)
            check(got, contribution("SUM", peer, count), f"{dtype} pair")


@pytest.mark.parametrize("count", [0, 1, 1001])
@pytest.mark.parametrize("fn", [all_reduce, broadcast, reduce, all_gather, reduce_scatter,
                                all_to_all, all_to_allv, send_recv],
                         ids=lambda f: f.__name__)
def test_collective(pool, lib, fn, count):
    pool.run(fn, lib, count)


@pytest.mark.parametrize("count", [0, 1, 1001])
@pytest.mark.parametrize("fn", [gather, scatter], ids=lambda f: f.__name__)
def test_gather_scatter(pool, lib, fn, count):
    pool.run(fn, lib, count)


def test_last_algorithm_names_what_ran(pool):
    names = pool.run(all_reduce, "numpy", 64)
    assert all(name and name == names[0] for name in names), names


def grouped_collectives(comm):
    a = np.full(10, comm.rank + 1, np.int32)
    b = np.full(3, comm.rank + 1, np.float64)
    c = np.arange(4, dtype=np.float32) if comm.rank == 0 else np.zeros(4, np.float32)
    with loom.group():
        comm.all_reduce(a)
        comm.all_reduce(b, op=loom.MAX)
        comm.broadcast(c, root=0)
    total = comm.size * (comm.size + 1) // 2
    assert (a == total).all() and (b == comm.size).all() and (c == np.arange(4)).all()


def test_group_runs_collectives_together(pool):
    pool.run(grouped_collectives)


def split(comm):
    colour = comm.rank % 2
    sub = comm.split(colour, key=-comm.rank)  # reversed order within each colour
    members = [r for r in range(comm.size) if r % 2 == colour]
    assert sub.size == len(members)
    assert sub.rank == len(members) - 1 - members.index(comm.rank)
    x = np.array([comm.rank + 1], np.int64)
    sub.all_reduce(x)
    assert x[0] == sum(r + 1 for r in members)
    sub.destroy()
    none = comm.split(None if comm.rank == 0 else 0)
    assert (none is None) == (comm.rank == 0)
    if none is not None:
        assert none.size == comm.size - 1
        none.destroy()


def test_split(pool):
    pool.run(split)


def bytes_like(comm):
    root = 0
    payload = bytes(range(7)) * 3
    buf = bytearray(payload) if comm.rank == root else bytearray(len(payload))
    assert comm.broadcast(buf, root=root) is buf and bytes(buf) == payload
    view = memoryview(bytearray(40))
    comm.broadcast(memoryview(bytearray(payload[:10])), view[5:15], root=root)
    assert bytes(view[5:15]) == payload[:10] and bytes(view[:5]) == bytes(5)
    # Raw bytes read as float32 with dtype=; read-only bytes can be sent.
    raw = bytearray(struct.pack("3f", comm.rank, 1.5, -2))
    comm.all_reduce(raw, dtype=loom.FLOAT32)
    n = comm.size
    assert struct.unpack("3f", raw) == (n * (n - 1) / 2, 1.5 * n, -2.0 * n)
    out = bytearray(4 * n)
    comm.all_gather(struct.pack("i", comm.rank * 10), out)
    assert struct.unpack(f"{n}i", out) == tuple(10 * r for r in range(n))


def test_bytes_like_buffers(pool):
    pool.run(bytes_like)


def foreign_types(comm):
    """Types loom has no datatype for move as bytes; bool reduces with MIN and MAX."""
    n = comm.size
    out = np.zeros(2 * n, np.int16)
    comm.all_gather(np.array([-comm.rank, 300 * comm.rank], np.int16), out)
    assert (out == np.array([[-r, 300 * r] for r in range(n)]).ravel()).all()
    z = np.array([1 + 2j, -3.5j]) if comm.rank == 0 else np.zeros(2, np.complex128)
    comm.broadcast(z, root=0)
    assert (z == np.array([1 + 2j, -3.5j])).all()
    flags = np.array([comm.rank == 0, True, False])
    comm.all_reduce(flags, op=loom.MAX)
    assert flags.tolist() == [True, True, False]
    flags = np.array([comm.rank == 0, True, False])
    comm.all_reduce(flags, op=loom.MIN)
    assert flags.tolist() == [n == 1, True, False]


def test_types_loom_lacks(pool):
    pool.run(foreign_types)


def parameters(comm):
    """A tensor that requires grad (a model's parameter) is written in place, as
    torch.distributed does."""
    import torch
    weight = torch.nn.Parameter(torch.full((5,), float(comm.rank)))
    comm.broadcast(weight, root=comm.size - 1)
    assert (weight.detach() == comm.size - 1).all() and weight.requires_grad


def test_torch_parameters(pool):
    pytest.importorskip("torch", reason="torch is not installed for this interpreter")
    pool.run(parameters)


def premul_sum(comm):
    with comm.premul_sum(0.5, loom.FLOAT32) as half:
        x = np.full(6, 2 * (comm.rank + 1), np.float32)
        comm.all_reduce(x, op=half)
        assert (x == comm.size * (comm.size + 1) / 2).all()
    with comm.premul_sum(np.array([3], np.int32), "int32") as triple:
        y = np.ones(2, np.int32)
        comm.all_reduce(y, op=triple)
        assert (y == 3 * comm.size).all()


def test_premul_sum(pool):
    pool.run(premul_sum)
