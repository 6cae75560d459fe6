#!/usr/bin/python3
"""torch.distributed on loom against Gloo, side by side in one run: the collectives PyTorch
programs call on CPU tensors, and a DDP training step where communication dominates.

  /usr/bin/python3 perf/torch_bench.py                       # 2 and 4 ranks, 4 KiB .. 256 MiB
  /usr/bin/python3 perf/torch_bench.py -n 2 -e 16M --json out.json
  perf/plot.py -o docs/perf/torch_allreduce out.json          # busbw against size, as PNG/SVG

Every rank joins one world whose default group is backend "loom" and a second group over the
same ranks on Gloo; each size is timed on both, taking turns, so that both see the same machine.
A time is the slowest rank's mean over the timed iterations; busbw uses nccl-tests' factors
(allreduce 2(n-1)/n, the others (n-1)/n). Where Gloo lacks an operation (PyTorch 1.13's Gloo has
neither all_gather_into_tensor nor reduce_scatter_tensor), it is timed as a Gloo user writes
it: all_gather into a list, all_reduce then the rank's slice (marked *). The DDP step trains a
25 M-parameter MLP with a batch of 1 on one thread per rank, so that the gradient allreduce
weighs as much as it can beside the step's own passes over the parameters (DDP with
gradient_as_bucket_view, zero_grad(set_to_none=True), on both backends); the same step under
DDP's no_sync, which skips the allreduce, says how much of each backend's step is communication. --json writes loom-perf's schema
(loom-perf-set/1 with one run per backend and operation), which perf/plot.py draws.
"""
import argparse
import contextlib
import json
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

OPS = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single")


def parse_bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def bus_factor(op, n):
    return 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tensors(op, size, n):
    """The op's input and output for `size` bytes (nccl-tests' size: the larger buffer)."""
    count = max(1, size // 4)
    if op == "all_reduce":
        return torch.ones(count), None
    per_rank = max(1, count // n)
    if op == "all_gather_into_tensor":
        return torch.ones(per_rank), torch.empty(per_rank * n)
    if op == "reduce_scatter_tensor":
        return torch.ones(per_rank * n), torch.empty(per_rank)
    return torch.ones(per_rank * n), torch.empty(per_rank * n)  # all_to_all_single


def run_op(op, group, inp, out, fallback=False):
    """op on group; `fallback`: what a Gloo user writes where the backend lacks op (all_gather
    into a list of views, all_reduce then the rank's slice)."""
    if op == "all_reduce":
        dist.all_reduce(inp, group=group)
    elif op == "all_gather_into_tensor" and fallback:
        dist.all_gather(list(out.chunk(dist.get_world_size(group))), inp, group=group)
    elif op == "all_gather_into_tensor":
        dist.all_gather_into_tensor(out, inp, group=group)
    elif op == "reduce_scatter_tensor" and fallback:
        dist.all_reduce(inp, group=group)
        out.copy_(inp.chunk(dist.get_world_size(group))[dist.get_rank(group)])
    elif op == "reduce_scatter_tensor":
        dist.reduce_scatter_tensor(out, inp, group=group)
    else:
        dist.all_to_all_single(out, inp, group=group)


def time_op(op, group, inp, out, iters, sync, fallback):
    """Mean seconds per op over iters, the slowest rank's (max over ranks on `sync`)."""
    run_op(op, group, inp, out, fallback)  # warm-up
    dist.barrier(group=sync)
    start = time.perf_counter()
    for _ in range(iters):
        run_op(op, group, inp, out, fallback)
    elapsed = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=sync)
    return elapsed.item()


def needs_fallback(op, group, n):
    """Whether the group's backend lacks op (PyTorch 1.13's Gloo lacks two of them)."""
    inp, out = tensors(op, 4096, n)
    try:
        run_op(op, group, inp, out)
        return False
    except RuntimeError:
        return True


def ddp_steps(group, steps, sync=True):
    """Median seconds per DDP training step of the MLP over `group`; without `sync`, each step
    runs under DDP's no_sync (no gradient allreduce): what the step costs without communication."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2048, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 4096))
    # PyTorch's settings for speed, on both backends: gradients live in DDP's buckets (no copy
    # in or out), and zero_grad frees them (PyTorch 2's default) instead of filling with zeros.
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group,
                                                    gradient_as_bucket_view=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x, y = torch.randn(1, 2048), torch.randn(1, 4096)
    times = []
    for step in range(steps + 2):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with contextlib.nullcontext() if sync else ddp.no_sync():
            torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
        if step >= 2:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def worker(rank, n, port, args, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)  # one core per rank: the ranks share the machine
    import loom.torch  # noqa: F401  registers backend "loom"
    dist.init_process_group("loom", rank=rank, world_size=n)
    gloo = dist.new_group(backend="gloo")
    groups = {"loom": dist.group.WORLD, "gloo": gloo}
    rows = []
    for op in args.ops.split(","):
        fallback = {name: needs_fallback(op, g, n) for name, g in groups.items()}
        size = args.minbytes
        while size <= args.maxbytes:
            inp, out = tensors(op, size, n)
            iters = max(args.min_iters, min(args.iters, (64 << 20) // size))
            row = {"op": op, "size": size, "count": inp.numel(), "fallback": fallback}
            for _ in range(args.rounds):  # taking turns, so both see the same machine
                for name, g in groups.items():
                    row.setdefault(name, []).append(
                        time_op(op, g, inp, out, iters, gloo, fallback[name]))
            rows.append(row)
            size *= args.stepfactor
    ddp = {}
    if args.ddp_steps > 0:
        for _ in range(args.rounds):
            for name, g in groups.items():
                ddp.setdefault(name, []).append(ddp_steps(g, args.ddp_steps))
            ddp.setdefault("no_sync", []).append(ddp_steps(gloo, args.ddp_steps, sync=False))
    if rank == 0:
        results.put({"rows": rows, "ddp": ddp})
    dist.destroy_process_group()


def busbw(op, size, seconds, n):
    return size / seconds / 1e9 * bus_factor(op, n) if seconds else 0.0


def report(n, data, doc_runs):
    print(f"# torch.distributed, {n} ranks, CPU tensors (float32); busbw in GB/s, median of rounds")
    print(f"# {'op':<24}{'size (B)':>12}{'loom':>10}{'gloo':>10}{'loom/gloo':>11}")
    print("# (* Gloo lacks the op: timed as a Gloo user writes it, all_gather into a list or "
          "all_reduce then the rank's slice)")
    per_run = {}
    for row in data["rows"]:
        op, size = row["op"], row["size"]
        bw = {name: busbw(op, size, statistics.median(row[name]), n) for name in ("loom", "gloo")}
        mark = "*" if row["fallback"]["gloo"] else ""
        print(f"  {op:<24}{size:>12}{bw['loom']:>10.3f}{bw['gloo']:>9.3f}{mark:1}"
              f"{bw['loom'] / bw['gloo']:>10.2f}")
        for name, value in bw.items():
            t = statistics.median(row[name])
            m = {"time_us": t * 1e6, "algbw_gbs": size / t / 1e9, "busbw_gbs": value}
            per_run.setdefault((name, op), []).append(
                {"size": size, "count": row["count"], "type": "float", "redop": "sum",
                 "root": -1, "algorithm": "auto", "out_of_place": m, "in_place": m})
    for (name, op), rows in per_run.items():
        doc_runs.append({"schema": "loom-perf/1", "program": "torch_bench.py",
                         "library": f"{name} (torch.distributed)", "collective": op,
                         "ranks": n, "hosts": 1, "rows": rows, "env": {}})
    if data["ddp"]:
        step = {name: statistics.median(times) for name, times in data["ddp"].items()}
        print(f"# DDP step (MLP 2048-4096-2048-4096, 25.2 M parameters, batch 1): "
              f"loom {step['loom'] * 1e3:.1f} ms, gloo {step['gloo'] * 1e3:.1f} ms, "
              f"gloo/loom {step['gloo'] / step['loom']:.2f}")
        comm = {name: max(0.0, 1 - step["no_sync"] / step[name]) for name in ("loom", "gloo")}
        print(f"# the same step without the gradient allreduce (DDP no_sync): "
              f"{step['no_sync'] * 1e3:.1f} ms; communication is {comm['gloo']:.0%} of Gloo's "
              f"step, {comm['loom']:.0%} of loom's")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--ranks", default="2,4", help="rank counts, e.g. 2,4")
    ap.add_argument("--ops", default=",".join(OPS), help="operations, e.g. all_reduce")
    ap.add_argument("-b", "--minbytes", default="4K")
    ap.add_argument("-e", "--maxbytes", default="256M")
    ap.add_argument("-f", "--stepfactor", type=int, default=4)
    ap.add_argument("-i", "--iters", type=int, default=100, help="most timed iterations a size")
    ap.add_argument("--min-iters", type=int, default=3)
    ap.add_argument("-R", "--rounds", type=int, default=3, help="turns of each backend a size")
    ap.add_argument("--ddp-steps", type=int, default=20, help="0 skips the DDP step")
    ap.add_argument("--json", help="write the results here (loom-perf-set/1)")
    args = ap.parse_args()
    args.minbytes, args.maxbytes = parse_bytes(args.minbytes), parse_bytes(args.maxbytes)
    runs = []
    for n in (int(x) for x in args.ranks.split(",")):
        results = mp.get_context("spawn").SimpleQueue()
        mp.start_processes(worker, args=(n, free_port(), args, results), nprocs=n,
                           start_method="spawn")
        report(n, results.get(), runs)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"schema": "loom-perf-set/1", "runs": runs}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
