"""What each rank runs in the backend's tests: every op on loom (the default group) against Gloo
(a group beside it, same processes, same inputs), and DDP training on both. Run as a script
under torchrun (`python3 -m torch.distributed.run --nproc_per_node=N workers.py ops`) or
through spawn() from the tests."""
import datetime
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import loom.torch  # noqa: F401  registers backend "loom"

R = dist.ReduceOp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(check, size, timeout_s=60):
    """Runs check(rank, size, gloo_group) in `size` processes started by mp.spawn."""
    mp.spawn(_spawned, args=(check, size, free_port(), timeout_s), nprocs=size)


def _spawned(rank, check, size, port, timeout_s):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    _run(check, rank, size, timeout_s)


def _run(check, rank, size, timeout_s):
    cpus = os.sched_getaffinity(0)
    dist.init_process_group("loom", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    # Where ranks outnumber cores loom binds the thread that runs its calls (LOOM_BIND), the
    # group's worker, never the program's: its threads started later would inherit one core.
    assert os.sched_getaffinity(0) == cpus, (sorted(cpus), sorted(os.sched_getaffinity(0)))
    assert dist.get_backend() == "loom"
    gloo = dist.new_group(backend="gloo")
    check(rank, size, gloo)
    dist.barrier()
    dist.destroy_process_group()


def same(a, b, what):
    """Bit for bit (NaN-free inputs): a and b, tensors or lists of them."""
    a = a if isinstance(a, (list, tuple)) else [a]
    b = b if isinstance(b, (list, tuple)) else [b]
    assert len(a) == len(b), what
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape, f"{what}: {x.dtype}{x.shape} {y.dtype}{y.shape}"
        assert torch.equal(x, y), f"{what}: loom {x.flatten()[:8]} gloo {y.flatten()[:8]}"


def values(rank, shape, dtype, seed=0):
    """Small integer-valued data, different on every rank: exact under any summation order."""
    g = torch.Generator().manual_seed(1000 * seed + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        return torch.complex(values(rank, shape, torch.float32, seed),
                             values(rank, shape, torch.float32, seed + 7)).to(dtype)
    low = 0 if dtype == torch.uint8 else -3
    return torch.randint(low, 4, shape, generator=g).to(dtype)


def strided(t, group):
    """t (non-contiguous) for loom; Gloo reads some calls' non-contiguous inputs as raw
    storage, so it gets a contiguous copy of the same values."""
    return t.contiguous() if group is not None else t


def both(gloo, call):
    """call(group) on loom and on Gloo: (loom's result, Gloo's)."""
    return call(None), call(gloo)


GLOO_TYPES = [torch.float32, torch.float64, torch.float16, torch.int8, torch.uint8, torch.int32,
              torch.int64]


def check_allreduce(rank, size, gloo):
    for dtype in GLOO_TYPES:
        for seed, op in enumerate((R.SUM, R.PRODUCT, R.MIN, R.MAX)):
            def call(group):
                x = values(rank, (3, 333), dtype, seed)
                dist.all_reduce(x, op=op, group=group)
                return x
            same(*both(gloo, call), f"all_reduce {dtype} {op}")
    for dtype in (torch.int32, torch.uint8, torch.int64):
        for op in (R.BAND, R.BOR, R.BXOR):
            same(*both(gloo, lambda g: _reduced(values(rank, (100,), dtype), op, g)),
                 f"all_reduce {dtype} {op}")
    # Non-contiguous: a transposed view, reduced in place in the caller's tensor.
    def transposed(group):
        base = values(rank, (40, 30), torch.float32)
        view = base.t()
        dist.all_reduce(view, group=group)
        return base
    same(*both(gloo, transposed), "all_reduce of a transposed view")
    # Complex: PyTorch passes the real view; bfloat16, bool and AVG Gloo lacks: exact references.
    same(*both(gloo, lambda g: _reduced(values(rank, (50,), torch.complex64), R.SUM, g)),
         "all_reduce complex64")
    everyone = [values(r, (257,), torch.float64) for r in range(size)]
    expected = sum(everyone)
    same(_reduced(values(rank, (257,), torch.bfloat16), R.SUM, None),
         sum(everyone).to(torch.bfloat16), "all_reduce bfloat16")
    same(_reduced(values(rank, (257,), torch.float64), R.AVG, None), expected / size,
         "all_reduce AVG")
    same(_reduced(values(rank, (257,), torch.float64), dist._make_nccl_premul_sum(0.5), None),
         expected * 0.5, "all_reduce PREMUL_SUM")
    bits = [values(r, (99,), torch.bool) for r in range(size)]
    same(_reduced(values(rank, (99,), torch.bool), R.SUM, None),
         torch.stack(bits).any(0), "all_reduce bool SUM")
    same(_reduced(values(rank, (99,), torch.bool), R.MIN, None),
         torch.stack(bits).all(0), "all_reduce bool MIN")


def _reduced(x, op, group):
    dist.all_reduce(x, op=op, group=group)
    return x


def check_rooted(rank, size, gloo):
    root = size - 1
    for dtype in (torch.float32, torch.int64, torch.float16):
        def bcast(group):
            x = values(rank, (20, 10), dtype).t()  # non-contiguous
            dist.broadcast(x, src=root, group=group)
            return x
        same(*both(gloo, bcast), f"broadcast {dtype}")

        def red(group):
            x = values(rank, (1001,), dtype)
            dist.reduce(x, dst=root, op=R.MAX, group=group)
            return x
        loom_x, gloo_x = both(gloo, red)
        if rank == root:
            same(loom_x, gloo_x, f"reduce {dtype}")

        def gath(group):
            out = [torch.zeros(5, 3, dtype=dtype) for _ in range(size)] if rank == root else None
            dist.gather(strided(values(rank, (3, 5), dtype).t(), group), out, dst=root, group=group)
            return out or []
        same(*both(gloo, gath), f"gather {dtype}")

        def scat(group):
            parts = [values(r, (7,), dtype, seed=3) for r in range(size)] if rank == root else None
            out = torch.zeros(7, dtype=dtype)
            dist.scatter(out, parts, src=root, group=group)
            return out
        same(*both(gloo, scat), f"scatter {dtype}")


def check_gathers(rank, size, gloo):
    # Gloo moves no bfloat16 or int16: those are checked against the inputs themselves.
    for dtype in (torch.float32, torch.complex128, torch.bfloat16, torch.int16):
        def gathered(group):
            out = [torch.empty(4, 6, dtype=dtype) for _ in range(size)]
            dist.all_gather(out, values(rank, (6, 4), dtype).t(), group=group)
            return out
        expected = [values(r, (6, 4), dtype).t() for r in range(size)]
        same(gathered(None), expected, f"all_gather {dtype}")
        if dtype in GLOO_TYPES or dtype.is_complex:
            same(gathered(None), gathered(gloo), f"all_gather {dtype} (Gloo)")
        out = torch.empty(size * 24, dtype=dtype)
        dist.all_gather_into_tensor(out, values(rank, (6, 4), dtype).t().reshape(-1))
        same(out, torch.cat([t.reshape(-1) for t in expected]), f"all_gather_into_tensor {dtype}")
    # reduce_scatter against Gloo's all_reduce of the same inputs, sliced.
    for dtype in (torch.float32, torch.int32, torch.float64):
        inputs = [values(rank, (33,), dtype, seed=r) for r in range(size)]
        full = torch.cat(inputs)
        dist.all_reduce(full, group=gloo)
        mine = full[rank * 33:(rank + 1) * 33]
        out = torch.empty(33, dtype=dtype)
        dist.reduce_scatter(out, [t.clone() for t in inputs])
        same(out, mine, f"reduce_scatter {dtype}")
        out = torch.empty(33, dtype=dtype)
        dist.reduce_scatter_tensor(out, torch.cat(inputs))
        same(out, mine, f"reduce_scatter_tensor {dtype}")
    out = torch.empty(4, dtype=torch.complex64)
    parts = [values(rank, (4,), torch.complex64, seed=r) for r in range(size)]
    dist.reduce_scatter(out, parts, op=R.AVG)
    expected = sum(values(r, (4,), torch.complex64, seed=rank) for r in range(size)) / size
    same(out, expected, "reduce_scatter complex AVG")


def check_alltoall(rank, size, gloo):
    for dtype in (torch.float32, torch.int64, torch.complex64):
        def even(group):
            out = torch.empty(size * 3, 2, dtype=dtype)
            dist.all_to_all_single(out, values(rank, (size * 3, 2), dtype), group=group)
            return out
        same(*both(gloo, even), f"all_to_all_single {dtype}")
        # Rank r sends r + j + 1 rows to rank j.
        send = [rank + j + 1 for j in range(size)]
        recv = [j + rank + 1 for j in range(size)]

        def uneven(group):
            out = torch.empty(sum(recv), 3, dtype=dtype)
            dist.all_to_all_single(out, values(rank, (sum(send), 3), dtype), recv, send,
                                   group=group)
            return out
        loom_out, gloo_out = both(gloo, uneven)
        same(loom_out, gloo_out, f"all_to_all_single with splits {dtype}")
        # The list form: the same blocks, as separate (non-contiguous) tensors.
        inputs = [t.t().contiguous().t() for t in values(rank, (sum(send), 3), dtype).split(send)]
        outputs = [torch.empty(n, 3, dtype=dtype) for n in recv]
        dist.all_to_all(outputs, inputs)
        same(torch.cat(outputs), gloo_out, f"all_to_all {dtype}")


def check_p2p(rank, size, gloo):
    right, left = (rank + 1) % size, (rank - 1) % size

    def ring(group):
        x = values(rank, (500,), torch.float32)
        got = torch.empty(500)
        if rank % 2 == 0:
            dist.send(x, right, group=group)
            dist.recv(got, left, group=group)
        else:
            dist.recv(got, left, group=group)
            dist.send(x, right, group=group)
        return got
    same(*both(gloo, ring), "send/recv")

    def batched(group):
        x, got = values(rank, (64,), torch.int32), torch.empty(64, dtype=torch.int32)
        ops = [dist.P2POp(dist.irecv, got, left, group), dist.P2POp(dist.isend, x, right, group)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        return got
    same(*both(gloo, batched), "batch_isend_irecv")


def check_coalesced_and_work(rank, size, gloo):
    def coalesced(group):
        ts = [values(rank, (10,), torch.float32), values(rank, (3, 4), torch.float32)]
        dist.all_reduce_coalesced(ts, group=group)
        return ts
    same(*both(gloo, coalesced), "all_reduce_coalesced")
    # all_gather_coalesced: out[r][i] is rank r's i-th tensor.
    def gathered_coalesced(group):
        ins = [values(rank, (5,), torch.float64), values(rank, (2, 3), torch.float64, seed=1)]
        out = [[torch.empty_like(t) for t in ins] for _ in range(size)]
        dist.all_gather_coalesced(out, ins, group=group)
        return [t for lst in out for t in lst]
    same(*both(gloo, gathered_coalesced), "all_gather_coalesced")
    # Async works: several calls in flight, completed in order; wait, is_completed, the future
    # and a callback chained on it as DDP's communication hooks do.
    xs = [values(rank, (1000,), torch.float32, seed=s) for s in range(4)]
    works = [dist.all_reduce(x, async_op=True) for x in xs]
    halves = works[-1].get_future().then(lambda f: f.value()[0] / 2)
    for work in works:
        assert work.wait()
        assert work.is_completed() and work.is_success()
    expected = [sum(values(r, (1000,), torch.float32, seed=s) for r in range(size))
                for s in range(4)]
    same(xs, expected, "async all_reduce")
    same(works[0].get_future().wait()[0], expected[0], "the future's tensor")
    same(halves.wait(), expected[3] / 2, "a callback on the future")
    work = dist.barrier(async_op=True)
    work.wait()
    # A wait with a timeout raises when the call has not completed by then (rank 0's allreduce
    # waits for the others', made 1.5 s later); waiting again without one then completes.
    if rank == 0:
        x = torch.ones(3)
        work = dist.all_reduce(x, async_op=True)
        try:
            work.wait(timeout=datetime.timedelta(milliseconds=300))
            raise AssertionError("a wait did not time out")
        except RuntimeError as e:
            assert "timed out" in str(e), e
        work.wait()
    else:
        time.sleep(1.5)
        x = torch.ones(3)
        dist.all_reduce(x)
    same(x, torch.full((3,), float(size)), "all_reduce after a timed-out wait")
    # A bad call raises, with loom's message, and the group goes on working.
    try:
        dist.all_reduce(torch.zeros(2, dtype=torch.int16))
        raise AssertionError("an int16 reduction did not raise")
    except RuntimeError as e:
        assert "loom" in str(e), e
    try:
        dist.broadcast(torch.zeros(2), src=size + 3)
        raise AssertionError("a bad root did not raise")
    except (RuntimeError, ValueError) as e:
        assert str(e), e


def check_ops(rank, size, gloo):
    for check in (check_allreduce, check_rooted, check_gathers, check_alltoall, check_p2p,
                  check_coalesced_and_work):
        check(rank, size, gloo)


def check_ddp(rank, size, gloo, steps=150):
    """DDP on loom and on Gloo from the same start and data: bitwise equal parameters where the
    gradients are integer-valued (a linear model, a loss linear in its output), allclose for an
    MLP trained with MSE."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train(make, loss_of, lr, group):
        torch.manual_seed(5)
        model = DDP(make(), process_group=group)
        opt = torch.optim.SGD(model.parameters(), lr=lr)
        g = torch.Generator().manual_seed(rank)
        for _ in range(steps):
            x = torch.randint(-3, 4, (16, 32), generator=g).float()
            t = torch.randint(-3, 4, (16, 8), generator=g).float()
            opt.zero_grad()
            loss_of(model(x), t).backward()
            opt.step()
        return [p.detach().clone() for p in model.parameters()]

    linear = lambda: torch.nn.Linear(32, 8)  # noqa: E731
    dot = lambda y, t: (y * t).sum()  # noqa: E731
    same(*both(gloo, lambda grp: train(linear, dot, 2.0 ** -10, grp)), "DDP, integer gradients")

    def mlp():
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    mse = torch.nn.functional.mse_loss
    loom_p, gloo_p = both(gloo, lambda grp: train(mlp, mse, 0.01, grp))
    for a, b in zip(loom_p, gloo_p):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (a - b).abs().max()


def check_zero(rank, size, gloo, steps=50):
    """ZeRO-style sharding (ZeroRedundancyOptimizer: each rank steps its shard of Adam's state,
    then broadcasts its parameters) over DDP, on loom and on Gloo from the same start and data:
    allclose parameters. (PyTorch 1.13's FSDP does not import under Debian's Python 3.11: a
    dataclass error inside torch.distributed._shard.)"""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train(group):
        torch.manual_seed(5)
        model = DDP(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                        torch.nn.Linear(64, 8)), process_group=group)
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam,
                                      lr=0.01, process_group=group)
        g = torch.Generator().manual_seed(rank)
        for _ in range(steps):
            x, t = torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), t).backward()
            opt.step()
        return [p.detach().clone() for p in model.parameters()]

    loom_p, gloo_p = both(gloo, train)
    for a, b in zip(loom_p, gloo_p):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (a - b).abs().max()


if __name__ == "__main__":  # under torchrun: workers.py ops|ddp
    _run({"ops": check_ops, "ddp": check_ddp}[sys.argv[1]], int(os.environ["RANK"]),
         int(os.environ["WORLD_SIZE"]), 60)
    print("rank", os.environ["RANK"], "passed", sys.argv[1])
