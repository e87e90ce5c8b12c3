"""The package as a C user would see it: clients, buffers, kernels, streams,
profiling, memory usage and errors."""

import array
import threading

import numpy as np
import pytest

import cube

SAXPY = """
CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a, uint32_t n) {
  uint64_t i = (uint64_t)CUBE_POS * CUBE_DIM + UNIT_POS;
  if (i < n) CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));
}
"""


def test_devices_and_properties(client):
    assert ("cpu", 0) in cube.devices()
    assert cube.version().count(".") == 2
    p = client.properties
    assert p.name.startswith("cpu:0") and p.backend == "cpu" and p.index == 0
    assert p.total_memory > 0 and p.max_units_per_cube > 0
    assert client.dlpack_device() == (1, 0)
    assert client.dlpack_stream() is None


def test_errors_carry_code_and_message():
    with pytest.raises(cube.CubeError) as e:
        cube.Client("nosuchbackend")
    assert e.value.code == cube.StatusCode.INVALID_ARGUMENT
    assert "nosuchbackend" in e.value.message
    with pytest.raises(cube.CubeError) as e:
        cube.Client("cpu", 999)
    assert e.value.code == cube.StatusCode.NOT_FOUND
    assert "999" in e.value.message and "[NOT_FOUND]" in str(e.value)


@pytest.mark.parametrize("n", [1, 3, 4096, 1 << 20 | 5])
def test_upload_and_read_buffer_protocol(client, rng, n):
    data = rng.integers(0, 256, n, dtype=np.uint8)
    for obj in (data.tobytes(), bytearray(data.tobytes()), memoryview(data), data,
                array.array("B", data.tobytes())):
        b = client.upload(obj)
        assert b.size == n
        assert b.read() == data.tobytes()
        b.close()
    b = client.empty(n)
    b.write(data[::-1].copy())
    out = np.full(n, 0xCD, dtype=np.uint8)
    b.read_into(out)
    assert np.array_equal(out, data[::-1])
    with pytest.raises(BufferError):
        client.upload(np.zeros((4, 4))[:, 1])  # not contiguous: the buffer protocol refuses
    with pytest.raises(cube.CubeError) as e:
        b.read_into(np.empty(n + 1, dtype=np.uint8))
    assert e.value.code == cube.StatusCode.INVALID_ARGUMENT


def test_tensors_from_and_to_numpy(client, rng):
    for dt in (np.float32, np.float64, np.int8, np.uint16, np.int64, np.complex64, np.bool_):
        a = (rng.standard_normal((7, 5, 3)) * 100).astype(dt)
        t = client.from_numpy(a)
        assert t.shape == a.shape and t.nbytes == a.nbytes
        assert cube.numpy_dtype(t.dtype) == a.dtype
        assert np.array_equal(t.numpy(), a)
    f = np.asfortranarray(rng.standard_normal((4, 6)))
    assert np.array_equal(client.from_numpy(f).numpy(), f)


def test_kernel_launch_matches_numpy(client, rng):
    n = 100_003
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    k = client.kernel(SAXPY, "saxpy", cube_dim=64)
    assert k.arg_kinds == (0, 0, 5, 1) and k.name == "saxpy" and k.cube_dim == (64, 1, 1)
    tx, ty = client.from_numpy(x), client.from_numpy(y)
    client.launch(k, (n + 63) // 64, tx, ty, 2.5, n)
    got = ty.numpy()
    assert np.allclose(got, np.float32(2.5) * x + y, rtol=1e-6, atol=1e-6)
    # A dynamic count: three u32 in a buffer, read when the launch runs.
    counts = client.upload(np.array([(n + 63) // 64, 1, 1], dtype=np.uint32))
    client.launch(k, counts, tx, ty, -2.5, n)
    assert np.allclose(ty.numpy(), y, rtol=1e-5, atol=1e-5)


def test_launch_argument_checks_come_from_c(client):
    k = client.kernel(SAXPY, "saxpy", cube_dim=64)
    b = client.empty(64)
    with pytest.raises(cube.CubeError) as e:
        client.launch(k, 1, b, b, 1.0)  # one argument short
    assert e.value.code == cube.StatusCode.INVALID_ARGUMENT and "saxpy" in e.value.message
    with pytest.raises(cube.CubeError) as e:
        client.launch(k, 1, 3, b, 1.0, 16)  # a scalar where a buffer goes
    assert "argument 0" in e.value.message
    dead = client.empty(64)
    h = dead.handle
    dead.close()
    with pytest.raises(cube.CubeError) as e:
        client.launch(k, 1, b, cube.Buffer(client, h), 1.0, 16)  # a released handle
    assert e.value.code == cube.StatusCode.NOT_FOUND and "saxpy" in e.value.message
    with pytest.raises(OverflowError):
        client.launch(k, 1, b, b, 1.0, -1)  # u32
    with pytest.raises(TypeError):
        client.launch(k, 1, b, b, 1.0, 2.5)


def test_compile_error_is_raised_with_line(client):
    k = client.kernel("CUBE_KERNEL(bad, CUBE_ARRAY(float, x)) {\n  x[0] = undefined_name;\n}\n",
                      "bad")
    b = client.empty(16)
    with pytest.raises(cube.CubeError) as e:
        client.launch(k, 1, b)
        client.sync()
    assert e.value.code == cube.StatusCode.COMPILATION_FAILED
    assert "undefined_name" in e.value.message and "bad.cube:2" in e.value.message


def test_streams_threads_and_pinning(client, rng):
    k = client.kernel(SAXPY, "saxpy", cube_dim=32)
    results = {}

    def work(seed):
        n = 5000 + seed
        x = np.random.default_rng(seed).standard_normal(n).astype(np.float32)
        tx, ty = client.from_numpy(x), client.from_numpy(np.zeros(n, np.float32))
        client.launch(k, (n + 31) // 32, tx, ty, 3.0, n)
        client.sync()
        results[seed] = (cube.current_stream(), np.allclose(ty.numpy(), 3 * x))

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(ok for _, ok in results.values())
    assert len({s for s, _ in results.values()}) == 4  # each thread its own stream
    s = cube.new_stream()
    pinned = client.clone()
    pinned.set_stream(s)
    assert pinned.stream == s and client.stream == cube.current_stream()
    pinned.unset_stream()
    assert pinned.stream == cube.current_stream()


def test_profile_and_memory_usage(client):
    k = client.kernel(SAXPY, "saxpy", cube_dim=64)
    n = 1 << 18
    tx = client.from_numpy(np.ones(n, np.float32))
    ty = client.from_numpy(np.zeros(n, np.float32))
    before = client.memory_usage()
    extra = client.empty(1 << 20)
    assert client.memory_usage().bytes_in_use >= before.bytes_in_use + (1 << 20)
    extra.close()
    result, ns = client.profile(lambda: client.launch(k, n // 64, tx, ty, 1.0, n) or 42)
    assert result == 42 and ns > 0
    with pytest.raises(ZeroDivisionError):
        client.profile(lambda: 1 / 0)
    assert np.all(ty.numpy() == 1.0)


def test_client_after_shutdown_is_refused():
    c = cube.Client("cpu")
    b = c.empty(16)
    cube.shutdown()
    with pytest.raises(cube.CubeError) as e:
        c.empty(16)
    assert e.value.code == cube.StatusCode.FAILED_PRECONDITION
    assert b.size == 0  # the handle was released by the shutdown
    b.close()
    c.close()
    assert cube.Client("cpu").empty(8).size == 8  # usable again
