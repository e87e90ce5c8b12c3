"""y = a * x + y with a kernel in the cube dialect, from NumPy arrays and back.

Run: python3 examples/python/saxpy.py [backend]   (cpu by default; opencl, cuda)
"""

import sys

import numpy as np

import cube

SAXPY = """
CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a, uint32_t n) {
  uint64_t i = (uint64_t)CUBE_POS * CUBE_DIM + UNIT_POS;
  if (i < n) CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));
}
"""


def main() -> int:
    backend = sys.argv[1] if len(sys.argv) > 1 else "cpu"
    client = cube.Client(backend)
    rng = np.random.default_rng(7)
    n = 1_000_003
    x = rng.standard_normal(n).astype(np.float32)
    y = rng.standard_normal(n).astype(np.float32)
    kernel = client.kernel(SAXPY, "saxpy", cube_dim=256)
    tx, ty = client.from_numpy(x), client.from_numpy(y)
    client.launch(kernel, (n + 255) // 256, tx, ty, 2.0, n)
    got = ty.numpy()  # a read after the launch
    ok = np.allclose(got, 2.0 * x + y, rtol=1e-5, atol=1e-5)
    print(f"saxpy on {client.properties.name}: {n} elements, {'ok' if ok else 'WRONG'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
