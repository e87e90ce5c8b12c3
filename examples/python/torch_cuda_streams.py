"""A cube kernel writes a CUDA buffer, PyTorch reads it on its own stream:
no sync in between but the DLPack stream protocol's (torch passes its
current stream to __dlpack__, cube makes it wait for the kernel).

Run: python3 examples/python/torch_cuda_streams.py   (needs PyTorch and a GPU;
says so and exits 0 otherwise)
"""

import sys

import numpy as np

import cube

FILL = """
CUBE_KERNEL(fill_iota, CUBE_ARRAY(float, x), uint32_t n) {
  uint64_t i = (uint64_t)CUBE_POS * CUBE_DIM + UNIT_POS;
  if (i < n) CUBE_STORE(x, i, (float)i);
}
"""


def main() -> int:
    try:
        import torch
    except ImportError:
        print("SKIP: PyTorch is not installed")
        return 0
    if not torch.cuda.is_available() or not cube.backend_available("cuda"):
        print("SKIP: no GPU for both PyTorch and cube")
        return 0
    client = cube.Client("cuda", 0)
    n = 1 << 24
    t = client.empty_tensor((n,), np.float32)
    client.launch(client.kernel(FILL, "fill_iota", cube_dim=256), n // 256, t, n)
    x = torch.from_dlpack(t)  # zero copy; ordered after the kernel
    ok = x.data_ptr() == t.buffer.address() and x[-1].item() == float(n - 1)
    print("torch reads cube's CUDA buffer:", "ok" if ok else "WRONG")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
