"""The package in one process: loom.info() against loom-info, datatypes both ways, unique ids,
and the errors a 1-rank communicator raises for bad buffers, sizes, types and state."""
import gc
import json
import os
import pathlib
import pickle
import subprocess
import threading
import weakref

import numpy as np
import pytest

import loom


@pytest.fixture
def comm():
    with loom.Communicator(loom.UniqueId(), 0, 1, timeout=30) as c:
        yield c


def raises(cls, *fragments):
    """pytest.raises for cls whose message holds every fragment."""
    class Check:
        def __enter__(self):
            self.ctx = pytest.raises(cls)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self.ctx.__exit__(*exc)
            for fragment in fragments:
                assert fragment in str(self.info.value), str(self.info.value)
            return handled
    return Check()


def loom_info(*args):
    program = os.environ.get("LOOM_INFO_PROGRAM")
    if not program:
        pytest.skip("LOOM_INFO_PROGRAM (ctest sets it to build/loom-info) is not set")
    return subprocess.run([program, *args], capture_output=True, text=True, check=True).stdout


def test_info_is_what_loom_info_prints():
    info = loom.info()
    assert info == json.loads(loom_info("--json"))
    assert loom.__version__ == info["version"]
    assert "ring" in info["algorithms"]["allreduce"] and info["transports"][:2] == ["shm", "tcp"]
    # ucx is listed where the build has it, and then info["ucx"] describes it.
    assert ("ucx" in info["transports"]) == ("error" not in info["ucx"])
    printed = [line.split()[0] for line in loom_info("--params").splitlines()
               if line.startswith("  LOOM_")]
    assert list(info["parameters"]) == printed
    timeout = info["parameters"]["LOOM_TIMEOUT_MS"]
    assert set(timeout) == {"value", "default", "source", "description"}


def test_datatypes_both_ways():
    torch = pytest.importorskip("torch", reason="torch is not installed for this interpreter")
    for name in ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "float32",
                 "float64"]:
        dt = loom.datatype(np.dtype(name))
        assert loom.datatype(name) == dt == loom.datatype(getattr(np, name))
        assert loom.numpy_dtype(dt) == np.dtype(name) and dt.numpy_name == name
        assert loom.datatype(np.zeros(3, name)) == dt
        assert dt.itemsize == np.dtype(name).itemsize
    assert loom.datatype(torch.bfloat16) == loom.BFLOAT16 == loom.datatype("bfloat16")
    assert loom.datatype(torch.zeros(2, dtype=torch.bfloat16)) == loom.BFLOAT16
    assert loom.datatype(torch.float16) == loom.FLOAT16
    assert loom.datatype("float8_e4m3fn") == loom.FLOAT8_E4M3
    assert loom.datatype(loom.FLOAT64) == loom.FLOAT64
    with raises(loom.InvalidArgumentError, "names none of loom's datatypes"):
        loom.datatype("int16")
    with raises(loom.InvalidArgumentError, "complex64, which is none of loom's datatypes"):
        loom.datatype(np.zeros(2, np.complex64))


def test_numpy_dtype_of_bfloat16_needs_ml_dtypes():
    try:
        import ml_dtypes  # noqa: F401
    except ImportError:
        with raises(loom.InvalidArgumentError, "ml_dtypes"):
            loom.numpy_dtype(loom.BFLOAT16)
    else:
        assert loom.numpy_dtype(loom.BFLOAT16).name == "bfloat16"


class Bfloat16Array:
    """What an ml_dtypes array shows loom: the array interface, no buffer export."""

    class dtype:
        name = "bfloat16"
        itemsize = 2

    def __init__(self, raw, strides=None):
        self.raw = raw  # uint16 bits
        self.__array_interface__ = {"data": (raw.ctypes.data, False), "shape": raw.shape,
                                    "strides": strides, "typestr": "<V2", "version": 3}


def test_array_interface_buffers(comm):
    bits = np.array([0x3f80, 0x4000, 0xc040], np.uint16)  # 1, 2, -3 in bfloat16
    assert loom.datatype(Bfloat16Array(bits)) == loom.BFLOAT16
    out = Bfloat16Array(np.zeros(3, np.uint16))
    comm.all_reduce(Bfloat16Array(bits), out, loom.MAX)
    assert out.raw.tolist() == bits.tolist()
    with raises(loom.InvalidArgumentError, "not C-contiguous"):
        comm.all_reduce(Bfloat16Array(bits, strides=(4,)))


def test_unique_id_is_bytes_like_and_picklable():
    a, b = loom.UniqueId(), loom.UniqueId()
    assert len(bytes(a)) == len(a) == 128 and bytes(memoryview(a)) == bytes(a)
    assert pickle.loads(pickle.dumps(a)) == a != b
    assert loom.UniqueId(bytes(a)) == a and hash(loom.UniqueId(bytearray(bytes(a)))) == hash(a)
    with raises(loom.InvalidArgumentError, "holds 5 bytes; a loom unique id is 128"):
        loom.UniqueId(b"12345")


def test_bad_options_and_ranks():
    uid = loom.UniqueId()
    with raises(loom.InvalidArgumentError, "timeout -1 s must be positive"):
        loom.Communicator(uid, 0, 1, timeout=-1)
    with raises(loom.InvalidArgumentError, "rank 5 is out of range"):
        loom.Communicator(uid, 5, 2)


def test_buffers_refused(comm):
    x = np.arange(8, dtype=np.float32)
    with raises(loom.InvalidArgumentError, "send (a str) is not a buffer"):
        comm.all_reduce("abc")
    with raises(loom.InvalidArgumentError, "send (a numpy.ndarray) is not C-contiguous"):
        comm.all_reduce(x[::2])
    frozen = np.zeros(8, np.float32)
    frozen.flags.writeable = False
    with raises(loom.InvalidArgumentError, "recv (a numpy.ndarray) is read-only"):
        comm.all_reduce(x, frozen)
    with raises(loom.InvalidArgumentError, "send (a bytes) is read-only"):
        comm.all_to_all(b"abcd")
    assert comm.broadcast(b"abcd", root=0) == b"abcd"  # the root only reads it
    with raises(loom.InvalidArgumentError, "recv is None"):
        comm.all_gather(x, None)


def test_torch_tensors_refused():
    torch = pytest.importorskip("torch", reason="torch is not installed for this interpreter")
    with loom.Communicator(loom.UniqueId(), 0, 1) as comm:
        with raises(loom.InvalidArgumentError, "(a torch.Tensor) is not C-contiguous"):
            comm.all_reduce(torch.zeros(4, 3)[:, 1])
        with raises(loom.InvalidArgumentError, "cannot be read through DLPack", "Bool"):
            comm.all_reduce(torch.zeros(3, dtype=torch.bool), op=loom.MAX)


def test_types_refused(comm):
    x = np.arange(4, dtype=np.float32)
    with raises(loom.InvalidArgumentError, "holds int16, which loom cannot reduce"):
        comm.all_reduce(np.zeros(4, np.int16))
    with raises(loom.InvalidArgumentError, "dtype='int16' is not one of loom's datatypes"):
        comm.all_reduce(x, dtype="int16")
    with raises(loom.InvalidArgumentError, "send holds float32 and recv float64"):
        comm.all_reduce(x, np.zeros(4))
    with raises(loom.InvalidArgumentError, "complex numbers reduce with SUM, AVG"):
        comm.all_reduce(np.zeros(2, np.complex64), op=loom.PROD)
    with raises(loom.InvalidArgumentError, "bool, which reduces with MIN or MAX only"):
        comm.all_reduce(np.zeros(2, bool))
    with raises(loom.InvalidArgumentError, "op 3 is not a reduction"):
        comm.all_reduce(x, op=3)
    with raises(loom.InvalidArgumentError, "6 bytes, not a whole number of float32"):
        comm.all_reduce(bytearray(6), dtype=loom.FLOAT32)


def test_sizes_refused(comm):
    x = np.arange(4, dtype=np.float32)
    with raises(loom.InvalidArgumentError, "recv holds 3 float32 elements; all_reduce needs 4"):
        comm.all_reduce(x, np.zeros(3, np.float32))
    with raises(loom.InvalidArgumentError, "all_gather needs 4 (4 from each of 1 ranks)"):
        comm.all_gather(x, np.zeros(5, np.float32))
    with raises(loom.InvalidArgumentError, "recv holds 2 float32 elements; reduce_scatter"):
        comm.reduce_scatter(x, np.zeros(2, np.float32))
    with raises(loom.InvalidArgumentError, "send_counts has 2 entries; the communicator has 1"):
        comm.all_to_allv(x, [2, 2], np.zeros(4, np.float32), [4])
    with raises(loom.InvalidArgumentError, "its block 0 (4 at 1) ends past them"):
        comm.all_to_allv(x, [4], np.zeros(4, np.float32), [4], recv_displs=[1])
    with raises(loom.InvalidArgumentError, "broadcast needs 3, as recv"):
        comm.broadcast(x, np.zeros(3, np.float32))


def test_loom_checks_reach_python(comm):
    x = np.arange(4, dtype=np.float32)
    with raises(loom.InvalidArgumentError, "loomBroadcast", "root 3 is out of range"):
        comm.broadcast(x, root=3)
    with raises(loom.InvalidArgumentError, "loomSend", "peer 1 is out of range"):
        comm.send(x, 1)
    assert isinstance(pytest.raises(loom.Error, comm.send, x, 1).value, ValueError)


def test_destroyed_communicator():
    comm = loom.Communicator(loom.UniqueId(), 0, 1)
    comm.all_reduce(np.zeros(2))
    assert comm.last_algorithm and not comm.closed
    comm.destroy()
    comm.destroy()  # once destroyed, destroy and close do nothing
    assert comm.closed and "destroyed" in repr(comm)
    with raises(loom.InvalidUsageError, "Communicator.all_reduce: the communicator was "
                                        "destroyed"):
        comm.all_reduce(np.zeros(2))
    with raises(loom.InvalidUsageError, "destroyed"):
        comm.split(0)
    with loom.Communicator(loom.UniqueId(), 0, 1) as other:
        pass
    assert other.closed


def test_group_keeps_its_buffers_until_it_ends(comm):
    got = np.zeros(5, np.int64)
    with loom.group():
        comm.send(np.arange(5, dtype=np.int64) * 7, 0)  # nobody else holds this array
        comm.recv(got, 0)
        ref = weakref.ref(comm.all_reduce(np.ones(3)))
        gc.collect()
        assert ref() is not None
    gc.collect()
    assert ref() is None and got.tolist() == [0, 7, 14, 21, 28]


def test_calls_release_the_gil():
    """Two ranks in two threads of this process: each init and all_reduce waits for the other
    thread's, which could not run if the waiting one held the GIL."""
    uid, results = loom.UniqueId(), {}

    def rank(r):
        with loom.Communicator(uid, r, 2, timeout=20) as c:
            x = np.full(3, r + 1.0)
            c.all_reduce(x)
            results[r] = x.tolist()

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {0: [3.0] * 3, 1: [3.0] * 3}


def test_readme_shows_the_python_example():
    root = pathlib.Path(__file__).resolve().parents[3]
    example = (root / "examples/two_ranks.py").read_text()
    assert "```python\n" + example + "```" in (root / "README.md").read_text()
