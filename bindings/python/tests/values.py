"""Buffers of small integers, so that every reduction is exact in every type and any order, as
NumPy arrays or torch tensors; the expected results; and exact comparison."""
import numpy as np

NUMPY_TYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32",
               "float64", "complex64"]
TORCH_TYPES = ["int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64",
               "complex64"]
FLOATS = {"float16", "bfloat16", "float32", "float64"}


def types(lib):
    return NUMPY_TYPES if lib == "numpy" else TORCH_TYPES


def ops(dtype):
    """The ops each type reduces with (complex numbers: SUM and AVG; AVG only where exact)."""
    if dtype.startswith("complex"):
        return ["SUM", "AVG"]
    return ["SUM", "PROD", "MIN", "MAX"] + (["AVG"] if dtype in FLOATS else [])


def contribution(op, rank, count):
    """Rank's input for op: products stay below 2^size, sums below 64."""
    i = np.arange(count)
    if op == "PROD":
        return (1 + (i + rank) % 2).astype(np.float64)
    if op in ("MIN", "MAX"):
        return ((i * 7 + rank * 3) % 11).astype(np.float64)
    return ((rank + 1) * (i % 5 + 1)).astype(np.float64)


def reduced(op, size, count):
    stack = np.array([contribution(op, r, count) for r in range(size)]).reshape(size, count)
    return {"SUM": stack.sum(0), "PROD": stack.prod(0), "MIN": stack.min(0),
            "MAX": stack.max(0), "AVG": stack.sum(0) / size}[op]


def make(lib, dtype, values):
    """values (float64) as a buffer of dtype; complex ones get an imaginary part twice the real."""
    values = np.asarray(values, dtype=np.float64)
    if dtype.startswith("complex"):
        values = values * (1 + 2j)
    if lib == "numpy":
        return values.astype(dtype)
    import torch
    return torch.from_numpy(values.copy()).to(getattr(torch, dtype))


def zeros(lib, dtype, count):
    return make(lib, dtype, np.zeros(count))


def read(buf):
    """A buffer's values as a float64 (complex128) NumPy array."""
    if isinstance(buf, np.ndarray):
        return buf.astype(np.complex128 if buf.dtype.kind == "c" else np.float64)
    import torch
    return buf.to(torch.complex128 if buf.is_complex() else torch.float64).numpy()


def check(buf, want, what):
    want = np.asarray(want)
    if read(buf).dtype.kind == "c":
        want = want * (1 + 2j)
    got = read(buf)
    assert got.shape == want.shape and np.array_equal(got, want), \
        f"{what}: got {got[:8]}..., want {want[:8]}..."
