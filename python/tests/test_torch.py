"""DLPack with PyTorch: zero copy both ways on the CPU; on CUDA (when both
PyTorch and cube see a GPU), zero copy with the stream protocol: a cube
kernel writes, PyTorch reads on its own stream with no sync in between but
the protocol's. Skips where PyTorch (or a GPU) is absent."""

import numpy as np
import pytest

import cube

torch = pytest.importorskip("torch")

FILL = """
CUBE_KERNEL(fill_iota, CUBE_ARRAY(float, x), float base, uint32_t n) {
  uint64_t i = (uint64_t)CUBE_POS * CUBE_DIM + UNIT_POS;
  if (i < n) CUBE_STORE(x, i, base + (float)i);
}
"""


def test_torch_cpu_zero_copy_both_ways(client, rng):
    a = torch.from_numpy(rng.standard_normal((64, 33)).astype(np.float32))
    t = cube.from_dlpack(a, client)
    assert t.buffer.address() == a.data_ptr() and t.shape == (64, 33)
    b = torch.from_dlpack(t)
    assert b.data_ptr() == a.data_ptr()
    own = client.from_numpy(np.arange(10, dtype=np.int64))
    c = torch.from_dlpack(own)
    assert c.data_ptr() == own.buffer.address() and c.tolist() == list(range(10))
    del own
    assert c.tolist() == list(range(10))  # the export keeps cube's buffer


def _cuda_client():
    if not torch.cuda.is_available() or not cube.backend_available("cuda"):
        pytest.skip("needs a GPU for both PyTorch and cube")
    return cube.Client("cuda", 0)


def test_torch_cuda_stream_ordering_and_zero_copy():
    cc = _cuda_client()
    n = 1 << 24
    t = cc.empty_tensor((n,), np.float32)
    k = cc.kernel(FILL, "fill_iota", cube_dim=256)
    for r in range(3):
        cc.launch(k, n // 256, t, float(r), n)  # queued, not synced
        x = torch.from_dlpack(t)  # torch's current stream waits for cube's work
        assert x.device.type == "cuda" and x.data_ptr() == t.buffer.address()
        expect = float(r) * n + (n - 1) * n / 2
        assert abs(x.double().sum().item() - expect) / expect < 1e-6
        del x


def test_torch_cuda_import_without_copy():
    cc = _cuda_client()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free0, _ = torch.cuda.mem_get_info()
    x = torch.arange(1 << 26, device="cuda", dtype=torch.float32)  # 256 MiB
    t = cube.from_dlpack(x, cc)
    assert t.buffer.address() == x.data_ptr()
    assert cc.memory_usage(device=True).bytes_in_use < (1 << 20)  # no cube buffer for it
    back = torch.from_dlpack(t)
    assert back.data_ptr() == x.data_ptr()
    torch.cuda.synchronize()
    del back, t, x
    # PyTorch's caching allocator keeps x's block until empty_cache; the block
    # goes back to the driver only if cube let go of x (its deleter ran).
    torch.cuda.empty_cache()
    assert torch.cuda.mem_get_info()[0] >= free0 - (64 << 20)
