"""DLPack with CuPy on CUDA: zero copy both ways and the stream protocol.
Skips where CuPy or a GPU is absent."""

import numpy as np
import pytest

import cube

cp = pytest.importorskip("cupy")

FILL = """
CUBE_KERNEL(fill_iota, CUBE_ARRAY(float, x), float base, uint32_t n) {
  uint64_t i = (uint64_t)CUBE_POS * CUBE_DIM + UNIT_POS;
  if (i < n) CUBE_STORE(x, i, base + (float)i);
}
"""


def _cuda_client():
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            raise RuntimeError
    except Exception:
        pytest.skip("no GPU for CuPy")
    if not cube.backend_available("cuda"):
        pytest.skip("cube's CUDA backend is not available")
    return cube.Client("cuda", 0)


def test_cupy_zero_copy_and_stream_ordering():
    cc = _cuda_client()
    n = 1 << 22
    t = cc.empty_tensor((n,), np.float32)
    k = cc.kernel(FILL, "fill_iota", cube_dim=256)
    cc.launch(k, n // 256, t, 1.0, n)
    x = cp.from_dlpack(t)  # CuPy's stream waits for cube's work
    assert x.data.ptr == t.buffer.address()
    assert float(x[n - 1]) == float(n)
    y = cp.arange(n, dtype=cp.float32)
    u = cube.from_dlpack(y, cc)
    assert u.buffer.address() == y.data.ptr
    cc.launch(k, n // 256, u, 5.0, n)
    cc.sync()
    assert float(y[7]) == 12.0
