"""loom for Python: communicators and collectives over any buffer.

    import loom, numpy as np
    uid = loom.UniqueId()                      # once; pickle it to the other ranks
    with loom.Communicator(uid, rank, size) as comm:
        x = np.full(4, rank + 1, np.float32)
        comm.all_reduce(x)                     # in place; comm.all_reduce(x, out) out of place

Buffers are NumPy arrays, bytes/bytearray/memoryview (read-only ones can only be sent), CPU
torch tensors (through DLPack), or any object with the buffer protocol; C-contiguous. The
element type comes from the buffer (or dtype=). Calls release the GIL while they run and raise
loom.Error subclasses carrying loom's message.
"""
import contextlib as _contextlib
import json as _json

from . import errors as _errors
from ._loom import (UniqueId, Communicator, PreMulSum, DataType, RedOp, datatype,
                    INT8, UINT8, INT32, UINT32, INT64, UINT64, FLOAT16, BFLOAT16, FLOAT32,
                    FLOAT64, FLOAT8_E4M3, FLOAT8_E5M2, SUM, PROD, MIN, MAX, AVG)
from . import _loom
from .errors import (Error, InvalidArgumentError, InvalidUsageError, SystemCallError,
                     InternalError, RemoteError, TimeoutError, InProgressError)

_loom._set_error_classes(_errors.BY_RESULT)

__version__ = "{}.{}.{}".format(_loom._version_code() // 10000, _loom._version_code() // 100 % 100,
                                _loom._version_code() % 100)


def info():
    """What `loom-info` prints, as a dict: version, version_code, transports,
    reduction_kernels, algorithms (collective -> names) and parameters (every LOOM_* variable
    -> its value, default, source and description)."""
    return _json.loads(_loom._info_json())


@_contextlib.contextmanager
def group():
    """Calls inside run together when the block ends (loomGroupStart/End): send/recv pairs in
    any order, several collectives at once. Their buffers stay in use until then."""
    _loom._group_start()
    try:
        yield
    finally:
        _loom._group_end()


def numpy_dtype(dtype):
    """The NumPy dtype of a loom datatype (or of anything loom.datatype accepts); bfloat16 and
    the fp8 types need the ml_dtypes package."""
    import numpy
    name = datatype(dtype).numpy_name
    try:
        return numpy.dtype(name)
    except TypeError:
        pass
    try:
        import ml_dtypes
    except ImportError:
        raise InvalidArgumentError(
            f"loom.numpy_dtype: NumPy has no {name} without the ml_dtypes package") from None
    return numpy.dtype(getattr(ml_dtypes, name))
