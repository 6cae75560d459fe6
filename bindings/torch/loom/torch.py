"""torch.distributed on loom: importing this registers the backend "loom".

    import torch.distributed as dist
    import loom.torch  # noqa: F401
    dist.init_process_group(backend="loom")  # under torchrun, or with MASTER_ADDR/PORT, RANK...

Every call returns at once with a work that the group's worker thread completes (its future
holds the output tensors); the worker runs the calls in the order they were made. CPU tensors; any dtype moves, reductions take float, double, half, bfloat16,
int8, uint8, int32, int64, bool (SUM as logical or) and complex (SUM/AVG). Errors raise
RuntimeError with loom's message; init_process_group's timeout is the deadline of every wait.
"""
import inspect as _inspect

import torch.distributed as _dist

from ._loom_torch import ProcessGroupLoom


def _create(store, rank, size, timeout):
    return ProcessGroupLoom(store, rank, size, timeout)


if "LOOM" not in _dist.Backend._plugins:
    # PyTorch 2.x asks which devices a backend serves; 1.13 has no such argument.
    if "devices" in _inspect.signature(_dist.Backend.register_backend).parameters:
        _dist.Backend.register_backend("loom", _create, devices=["cpu"])
    else:
        _dist.Backend.register_backend("loom", _create)
