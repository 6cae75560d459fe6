"""The torch.distributed backend "loom" in 2 and 4 processes, launched by mp.spawn and by
torchrun: every op against Gloo's answer in the same processes, DDP training against DDP on
Gloo, the Work API, and a killed rank."""
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest

import workers

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("size", [2, 4])
def test_ops_match_gloo(size):
    workers.spawn(workers.check_ops, size)


@pytest.mark.parametrize("size", [2, 4])
def test_ddp_matches_gloo(size):
    workers.spawn(workers.check_ddp, size)


@pytest.mark.parametrize("size", [2, 4])
def test_zero_sharding_matches_gloo(size):
    workers.spawn(workers.check_zero, size)


# torchrun 1.13 under Python 3.11 fails on its default --redirects/--tee ("0": Python 3.11's
# IntFlag no longer lists it); these keep every rank's output on the console.
TORCHRUN = ["--redirects=1", "--tee=1"]


@pytest.mark.parametrize("check", ["ops", "ddp"])
def test_torchrun(check, tmp_path):
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", *TORCHRUN,
                          f"--log_dir={tmp_path}", "--nproc_per_node=4",
                          "--master_addr=127.0.0.1", f"--master_port={workers.free_port()}",
                          os.path.join(HERE, "workers.py"), check],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count(f"passed {check}") == 4, run.stdout


def _survivor(rank, size, port, victim, results):
    """Ranks but victim all-reduce until the victim dies; each reports how it ended."""
    import datetime
    import torch
    import torch.distributed as dist
    import loom.torch  # noqa: F401
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("loom", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))
    dist.all_reduce(torch.ones(4))
    if rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        for _ in range(1000):
            dist.all_reduce(torch.ones(1 << 16))
        results.put((rank, "no error", 0.0))
    except RuntimeError as e:
        results.put((rank, str(e), time.monotonic() - start))


TIMEOUT_S = 10


@pytest.mark.parametrize("size,victim", [(2, 1), (4, 2)])
def test_killed_rank_raises_within_timeout(size, victim):
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    port = workers.free_port()
    procs = [ctx.Process(target=_survivor, args=(r, size, port, victim, results))
             for r in range(size)]
    for p in procs:
        p.start()
    try:
        got = [results.get(timeout=TIMEOUT_S + 60) for _ in range(size - 1)]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert procs[victim].exitcode == -signal.SIGKILL
    for rank, message, seconds in got:
        assert rank != victim
        assert "loom" in message and "failed" in message, message
        assert seconds < TIMEOUT_S + 5, (rank, seconds, message)
