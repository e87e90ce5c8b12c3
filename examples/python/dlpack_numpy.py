"""Memory shared with NumPy through DLPack, without a copy, both ways.

Run: python3 examples/python/dlpack_numpy.py
"""

import sys

import numpy as np

import cube

INCREMENT = """
CUBE_KERNEL(increment, CUBE_ARRAY(int32_t, x), int32_t by, uint32_t n) {
  uint64_t i = (uint64_t)CUBE_POS * CUBE_DIM + UNIT_POS;
  if (i < n) CUBE_STORE(x, i, CUBE_LOAD(x, i) + by);
}
"""


def main() -> int:
    client = cube.Client("cpu")
    kernel = client.kernel(INCREMENT, "increment", cube_dim=64)

    # NumPy -> cube: the kernel writes the NumPy array's own memory.
    a = np.arange(1000, dtype=np.int32)
    t = cube.from_dlpack(a, client)
    client.launch(kernel, (a.size + 63) // 64, t, 5, a.size)
    client.sync()
    ok = t.buffer.address() == a.ctypes.data and a[0] == 5 and a[-1] == 1004

    # cube -> NumPy: NumPy reads cube's buffer; the export waits for the kernel.
    u = client.from_numpy(np.zeros(1000, dtype=np.int32))
    client.launch(kernel, (1000 + 63) // 64, u, 7, 1000)
    b = np.from_dlpack(u)
    ok = ok and b.ctypes.data == u.buffer.address() and bool((b == 7).all())

    # The NumPy array keeps cube's memory alive, past the client and a shutdown.
    u.close()
    client.close()
    cube.shutdown()
    ok = ok and bool((b == 7).all())
    print("dlpack with numpy:", "ok" if ok else "WRONG")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
