"""DLPack on OpenCL (PoCL in CI): exports name kDLOpenCL and carry the cl_mem
with a byte offset; cube's own exports come back without a copy; host
tensors are refused, naming the device types. Skips without an OpenCL
device."""

import numpy as np
import pytest

import cube
from conftest import opencl_client

SCALE = """
CUBE_KERNEL(scale, CUBE_ARRAY(float, x), float a, uint32_t n) {
  uint64_t i = (uint64_t)CUBE_POS * CUBE_DIM + UNIT_POS;
  if (i < n) CUBE_STORE(x, i, a * CUBE_LOAD(x, i));
}
"""


def test_opencl_export_and_own_import(rng):
    oc = opencl_client()
    a = rng.standard_normal(10_007).astype(np.float32)
    t = oc.from_numpy(a)
    assert t.__dlpack_device__() == (4, 0)
    back = cube.from_dlpack(t, oc)  # cube's own export: the same cl_mem and offset
    assert back.buffer.address() == t.buffer.address()
    k = oc.kernel(SCALE, "scale", cube_dim=64)
    oc.launch(k, (a.size + 63) // 64, back, 2.0, a.size)
    assert np.array_equal(t.numpy(), a * 2)  # written through one, read through the other
    view = cube.Tensor(t.buffer, (100,), np.float32, byte_offset=400)
    part = cube.from_dlpack(view, oc)
    assert part.buffer.address() == t.buffer.address() + 400
    assert np.array_equal(part.numpy(), a[100:200] * 2)
    oc.close()


def test_opencl_refuses_host_tensors_and_numpy_refuses_opencl(rng):
    oc = opencl_client()
    a = rng.standard_normal(64).astype(np.float32)
    with pytest.raises(cube.CubeError) as e:
        cube.from_dlpack(a, oc)
    assert e.value.code == cube.StatusCode.INVALID_ARGUMENT
    assert "device type 1" in e.value.message and "opencl:0" in e.value.message
    t = oc.from_numpy(a)
    with pytest.raises((BufferError, RuntimeError, TypeError, ValueError)):
        np.from_dlpack(t)  # NumPy takes CPU memory only
    assert np.array_equal(t.numpy(), a)
    oc.close()
