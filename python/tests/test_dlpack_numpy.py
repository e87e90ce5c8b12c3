"""DLPack with NumPy on the CPU backend: zero copy both ways (the same
addresses), lifetimes in both orders, deleters exactly once, refusals."""

import ctypes
import gc
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import cube

ADD = """
CUBE_KERNEL(add_u32, CUBE_ARRAY(const uint32_t, x), CUBE_ARRAY(uint32_t, y), uint32_t k,
            uint32_t n) {
  uint64_t i = (uint64_t)CUBE_POS * CUBE_DIM + UNIT_POS;
  if (i < n) CUBE_STORE(y, i, CUBE_LOAD(x, i) + k);
}
"""

NUMPY_VERSIONED = tuple(int(v) for v in np.__version__.split(".")[:2]) >= (2, 1)


def test_export_to_numpy_is_zero_copy(client, rng):
    data = rng.integers(0, 2**32, 100_003, dtype=np.uint32)
    t = client.from_numpy(data)
    a = np.from_dlpack(t)
    assert a.ctypes.data == t.buffer.address()  # the same memory
    assert a.dtype == np.uint32 and a.shape == data.shape
    assert np.array_equal(a, data)
    # Written at that address (NumPy < 2 marks legacy imports read-only), read by cube.
    ctypes.memmove(a.ctypes.data, np.full(10, 7, np.uint32).ctypes.data, 40)
    assert np.array_equal(t.numpy()[:10], np.full(10, 7, np.uint32))
    assert np.array_equal(a[:10], np.full(10, 7, np.uint32))
    assert t.__dlpack_device__() == (1, 0)


def test_import_from_numpy_is_zero_copy(client, rng):
    n = 65_537
    x = rng.integers(0, 2**31, n, dtype=np.uint32)
    y = np.full(n, 0xCDCDCDCD, dtype=np.uint32)
    tx, ty = cube.from_dlpack(x, client), cube.from_dlpack(y, client)
    assert tx.buffer.address() == x.ctypes.data and ty.buffer.address() == y.ctypes.data
    assert tx.shape == (n,) and tx.dtype == (1, 32, 1)
    k = client.kernel(ADD, "add_u32", cube_dim=64)
    client.launch(k, (n + 63) // 64, tx, ty, 11, n)
    client.sync()
    assert np.array_equal(y, x + 11)  # the kernel wrote NumPy's own memory


def test_round_trips_keep_the_address(client, rng):
    a = rng.standard_normal((33, 17))
    t = cube.from_dlpack(a, client)
    b = np.from_dlpack(t)
    assert b.ctypes.data == a.ctypes.data
    if b.flags.writeable:
        t2 = cube.from_dlpack(b, client)
        assert t2.buffer.address() == a.ctypes.data
    elif NUMPY_VERSIONED:  # marked read-only: taken only when the caller says so
        with pytest.raises(cube.CubeError) as e:
            cube.from_dlpack(b, client)
        assert e.value.code == cube.StatusCode.FAILED_PRECONDITION
        t2 = cube.from_dlpack(b, client, read_only=True)
        assert t2.buffer.address() == a.ctypes.data
    else:  # NumPy 1.x exports no read-only array
        with pytest.raises(BufferError):
            cube.from_dlpack(b, client)
    own = client.from_numpy(a)
    back = cube.from_dlpack(own, client)  # cube's own export: the same buffer
    assert back.buffer.address() == own.buffer.address()
    assert np.array_equal(back.numpy(), a)


def test_fortran_order_and_unit_dimensions(client, rng):
    f = np.asfortranarray(rng.standard_normal((5, 7, 3)).astype(np.float32))
    t = cube.from_dlpack(f, client)
    assert t.strides == (1, 5, 35) and t.buffer.size == f.nbytes
    assert np.array_equal(t.numpy(), f)
    assert np.array_equal(np.from_dlpack(t), f)


def test_consumer_outlives_producer_and_shutdown(rng):
    c = cube.Client("cpu")
    data = rng.standard_normal(1 << 18)
    t = c.from_numpy(data)
    a = np.from_dlpack(t)
    t.close()
    c.close()
    del t, c
    cube.shutdown()
    gc.collect()
    assert np.array_equal(a, data)  # still cube's memory, still valid
    del a  # the deleter runs now, after the shutdown
    gc.collect()
    assert cube.Client("cpu").empty(8).size == 8


def test_producer_outlives_consumer(client, rng):
    data = rng.integers(0, 255, 4099, dtype=np.uint8)
    a = data.copy()
    t = cube.from_dlpack(a, client)
    del a  # NumPy's array stays alive inside the capsule cube holds
    gc.collect()
    assert t.buffer.read() == data.tobytes()
    t.close()


def test_export_deleter_frees_the_buffer(client):
    n = 1 << 20
    t = client.from_numpy(np.zeros(n, np.uint8))
    base = client.memory_usage().bytes_in_use
    a = np.from_dlpack(t)
    t.close()
    assert client.memory_usage().bytes_in_use == base  # held by NumPy's array
    del a
    gc.collect()
    assert client.memory_usage().bytes_in_use <= base - n


def test_unconsumed_capsule_is_deleted_once(client):
    n = 1 << 20
    t = client.from_numpy(np.zeros(n, np.uint8))
    base = client.memory_usage().bytes_in_use
    caps = [t.__dlpack__(), t.__dlpack__(max_version=(1, 0))]
    t.close()
    assert client.memory_usage().bytes_in_use == base
    del caps
    gc.collect()
    assert client.memory_usage().bytes_in_use <= base - n


@pytest.mark.parametrize("versioned", [True, False])
def test_import_deleter_exactly_once(client, producer, versioned):
    p = producer(np.arange(1000, dtype=np.float32), versioned=versioned)
    t = cube.from_dlpack(p, client)
    gc.collect()
    assert p.calls == 0  # cube holds it; the capsule was renamed
    assert t.buffer.address() == p.array.ctypes.data
    k = client.kernel("CUBE_KERNEL(nop, CUBE_ARRAY(float, x)) {}", "nop")
    client.launch(k, 1, t)
    t.close()  # the queued launch may still hold it
    client.sync()
    assert p.calls == 1
    gc.collect()
    assert p.calls == 1


def test_import_deleter_on_another_thread_and_at_shutdown(producer):
    c = cube.Client("cpu")
    p1 = producer(np.arange(64, dtype=np.int64))
    p2 = producer(np.arange(64, dtype=np.int64))
    t1, t2 = cube.from_dlpack(p1, c), cube.from_dlpack(p2, c)
    th = threading.Thread(target=t1.close)
    th.start()
    th.join()
    assert p1.calls == 1 and p1.threads == [th.ident]
    assert p2.calls == 0
    cube.shutdown()  # t2's handle is live: the shutdown drops it
    assert p2.calls == 1
    t2.close()
    c.close()
    assert p2.calls == 1


def test_bad_tensors_are_refused(client, producer):
    a = np.arange(64, dtype=np.float32)
    cases = [
        (a[::2], cube.StatusCode.UNSUPPORTED, "gaps"),
        (np.lib.stride_tricks.as_strided(a, shape=(4, 4), strides=(0, 4)),
         cube.StatusCode.UNSUPPORTED, "overlap"),
    ]
    for arr, code, word in cases:
        with pytest.raises(cube.CubeError) as e:
            cube.from_dlpack(arr, client)
        assert e.value.code == code and word in e.value.message
    with pytest.raises((cube.CubeError, BufferError)) as e:  # NumPy may refuse to export it
        cube.from_dlpack(a[::-1], client)
    if isinstance(e.value, cube.CubeError):
        assert "negative" in e.value.message
    bad = [
        (dict(dtype=(2, 32, 4)), cube.StatusCode.UNSUPPORTED, "4 lanes"),
        (dict(dtype=(3, 64, 1)), cube.StatusCode.UNSUPPORTED, "opaque"),
        (dict(device=(2, 0)), cube.StatusCode.INVALID_ARGUMENT, "device type 2"),
        (dict(shape=(0,), strides=(1,)), cube.StatusCode.UNSUPPORTED, "no elements"),
        (dict(flags=1), cube.StatusCode.FAILED_PRECONDITION, "read-only"),
    ]
    for kw, code, word in bad:
        p = producer(a, **kw)
        with pytest.raises(cube.CubeError) as e:
            cube.from_dlpack(p, client)
        assert e.value.code == code and word in e.value.message, (kw, e.value)
        gc.collect()
        assert p.calls == 1  # refused, not consumed: the capsule deleted it once
    p = producer(a, flags=1)
    t = cube.from_dlpack(p, client, read_only=True)
    assert np.array_equal(t.numpy(), a)
    t.close()
    assert p.calls == 1


def test_export_protocol_arguments(client):
    t = client.from_numpy(np.arange(12, dtype=np.int32).reshape(3, 4))
    with pytest.raises(BufferError):
        t.__dlpack__(stream=5)  # a CPU tensor has no streams
    with pytest.raises(BufferError):
        t.__dlpack__(dl_device=(2, 0))
    with pytest.raises(BufferError):
        t.__dlpack__(copy=True)
    cap = t.__dlpack__(stream=-1, max_version=(1, 1), dl_device=(1, 0), copy=False)
    assert "dltensor_versioned" in repr(cap)
    if NUMPY_VERSIONED:
        assert np.array_equal(np.from_dlpack(t), np.arange(12).reshape(3, 4))


def test_export_after_queued_kernel_sees_its_result(client, rng):
    n = 1 << 20
    x = rng.integers(0, 2**31, n, dtype=np.uint32)
    tx = client.from_numpy(x)
    ty = client.empty_tensor((n,), np.uint32)
    k = client.kernel(ADD, "add_u32", cube_dim=64)
    for r in range(3):
        client.launch(k, n // 64, tx, ty, r + 1, n)
        y = np.from_dlpack(ty)  # no sync: the export waits for the stream
        assert np.array_equal(y, x + r + 1)
        del y


def test_exports_and_deletes_from_threads(client, rng):
    data = rng.standard_normal(4096)
    t = client.from_numpy(data)
    arrays = []
    lock = threading.Lock()

    def take():
        for _ in range(50):
            a = np.from_dlpack(t)
            with lock:
                arrays.append(a)

    ths = [threading.Thread(target=take) for _ in range(4)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert len(arrays) == 200 and all(a.ctypes.data == t.buffer.address() for a in arrays)
    t.close()
    half = arrays[100:]
    del arrays[100:]
    th = threading.Thread(target=lambda: half.clear())
    th.start()
    th.join()
    assert all(np.array_equal(a, data) for a in arrays)


def test_no_leak_in_a_fresh_process():
    """An export deleted after cube_shutdown frees the kept pool: run under
    the C library's own accounting in a child process."""
    code = textwrap.dedent("""
        import gc, numpy as np, cube
        c = cube.Client("cpu")
        a = np.from_dlpack(c.from_numpy(np.ones(1 << 20)))
        c.close()
        cube.shutdown()
        assert a.sum() == 1 << 20
        del a
        gc.collect()
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
