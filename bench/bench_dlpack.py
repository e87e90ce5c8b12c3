"""DLPack and Python-binding benchmarks (docs/benchmarks.md, "DLPack and Python").

  [1] NumPy -> cube -> NumPy of 1 GiB on the CPU backend: an upload
      (Client.upload, a copy) and a download into a NumPy array
      (Buffer.read_into, a copy), against two plain memcpys (ctypes.memmove)
      of the same bytes into memory already touched, in alternating runs;
      medians. Also the zero-copy path (cube.from_dlpack then np.from_dlpack:
      no byte moves) and its cost per exchange.
  [2] The launch cost of a small kernel from Python (Client.launch of one
      cube, no sync in the loop), on the CPU; with CuPy and a GPU also on
      CUDA, against CuPy's RawKernel launch of the same kernel in the same
      run, alternating.
  [3] With PyTorch and a GPU: export + import of a 1 GiB CUDA tensor
      (torch -> cube -> torch) costs no device copy: the device's free
      memory and cube's memory usage before and after.

Run: CUBE_LIBRARY=build/libcube.so PYTHONPATH=python/src python3 bench/bench_dlpack.py
(or with the package installed). Options: --gib N (size of [1], default 1),
--runs N (default 5), --launches N (default 20000).
"""

import argparse
import ctypes
import statistics
import sys
import time

import numpy as np

import cube


def ms(s):
    return f"{s * 1e3:9.2f} ms"


def bench_copies(gib, runs):
    n = int(gib * (1 << 30))
    c = cube.Client("cpu")
    src = np.arange(n // 8, dtype=np.uint64).view(np.uint8)  # NumPy's: 16 bytes past a page
    tmp = cube.aligned_empty(n)  # the baseline's middle buffer, page-aligned as cube's is
    tmp[:] = 0
    dests = [("page-aligned destination (cube.aligned_empty, what Tensor.numpy() uses)",
              cube.aligned_empty(n)),
             ("np.empty destination (16 bytes past a page, as NumPy allocates)",
              np.empty_like(src))]
    warm = c.upload(src)  # the pool's page, faulted in once (as tmp and the destinations are)
    warm.close()
    print(f"[1] NumPy -> cube -> NumPy, {n / (1 << 30):.2f} GiB each way, {runs} alternating runs;"
          " baseline: memcpy src -> middle, memcpy middle -> destination (ctypes.memmove)")
    for label, dst in dests:
        dst[:] = 0
        cube_t, base_t = [], []
        for _ in range(runs):
            t0 = time.perf_counter()
            b = c.upload(src)
            b.read_into(dst)
            t1 = time.perf_counter()
            b.close()
            cube_t.append(t1 - t0)
            t0 = time.perf_counter()
            ctypes.memmove(tmp.ctypes.data, src.ctypes.data, n)
            ctypes.memmove(dst.ctypes.data, tmp.ctypes.data, n)
            t1 = time.perf_counter()
            base_t.append(t1 - t0)
        assert np.array_equal(dst[:: 1 << 20], src[:: 1 << 20])
        mc, mb = statistics.median(cube_t), statistics.median(base_t)
        print(f"    {label}")
        print(f"      cube upload + read_into  median {ms(mc)}  ({2 * n / mc / 1e9:.2f} GB/s moved)")
        print(f"      2 x memcpy               median {ms(mb)}  ({2 * n / mb / 1e9:.2f} GB/s)")
        print(f"      ratio memcpy/cube        {mb / mc:.3f}x  (target >= 0.9x)")
    # Zero copy: the bytes never move.
    zc = []
    for _ in range(max(runs, 20)):
        t0 = time.perf_counter()
        t = cube.from_dlpack(src, c)
        back = np.from_dlpack(t)
        t1 = time.perf_counter()
        assert back.ctypes.data == src.ctypes.data
        del back
        t.close()
        zc.append(t1 - t0)
    print(f"    zero copy (cube.from_dlpack + np.from_dlpack): median "
          f"{statistics.median(zc) * 1e6:.1f} us per exchange, the same address both ways")
    c.close()


NOP = "CUBE_KERNEL(tiny, CUBE_ARRAY(float, x), uint32_t n) {\n" \
      "  uint64_t i = (uint64_t)CUBE_POS * CUBE_DIM + UNIT_POS;\n" \
      "  if (i < n) CUBE_STORE(x, i, CUBE_LOAD(x, i) + 1.0f);\n}\n"
CUPY_NOP = r'''
extern "C" __global__ void tiny(float* x, unsigned int n) {
  unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] + 1.0f;
}
'''


def per_launch(fn, launches, sync):
    fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(launches):
        fn()
    t1 = time.perf_counter()
    sync()
    return (t1 - t0) / launches


def bench_launch(launches, runs):
    c = cube.Client("cpu")
    k = c.kernel(NOP, "tiny", cube_dim=32)
    x = c.empty_tensor((32,), np.float32)
    cpu = [per_launch(lambda: c.launch(k, 1, x, 32), launches, c.sync) for _ in range(runs)]
    print(f"[2] Python launch of a small kernel (1 cube of 32 units), {launches} launches, "
          f"{runs} runs")
    print(f"    cpu:0   median {statistics.median(cpu) * 1e6:7.2f} us per launch")
    c.close()
    try:
        import cupy as cp
        if cp.cuda.runtime.getDeviceCount() < 1 or not cube.backend_available("cuda"):
            raise RuntimeError("no GPU")
    except Exception as e:  # noqa: BLE001 - any reason means: not here
        print(f"    cuda: skipped (CuPy and a GPU for both: {type(e).__name__}: {e})")
        return
    g = cube.Client("cuda", 0)
    gk = g.kernel(NOP, "tiny", cube_dim=32)
    gx = g.empty_tensor((32,), np.float32)
    raw = cp.RawKernel(CUPY_NOP, "tiny")
    cx = cp.zeros(32, dtype=cp.float32)
    n32 = np.uint32(32)
    cube_t, cupy_t = [], []
    for _ in range(runs):
        cube_t.append(per_launch(lambda: g.launch(gk, 1, gx, 32), launches, g.sync))
        cupy_t.append(per_launch(lambda: raw((1,), (32,), (cx, n32)), launches,
                                 cp.cuda.Stream.null.synchronize))
    mc, mr = statistics.median(cube_t), statistics.median(cupy_t)
    print(f"    cuda:0  cube   median {mc * 1e6:7.2f} us per launch")
    print(f"    cuda:0  CuPy RawKernel median {mr * 1e6:7.2f} us per launch")
    print(f"    ratio cube/CuPy {mc / mr:.3f}x  (target <= 1.5x)")


def bench_torch_cuda(gib):
    try:
        import torch
        if not torch.cuda.is_available() or not cube.backend_available("cuda"):
            raise RuntimeError("no GPU")
    except Exception as e:  # noqa: BLE001
        print(f"[3] torch CUDA export + import: skipped (PyTorch and a GPU: "
              f"{type(e).__name__}: {e})")
        return
    g = cube.Client("cuda", 0)
    n = int(gib * (1 << 30)) // 4
    x = torch.ones(n, device="cuda", dtype=torch.float32)
    torch.cuda.synchronize()
    free0 = torch.cuda.mem_get_info()[0]
    use0 = g.memory_usage(device=True)
    t0 = time.perf_counter()
    t = cube.from_dlpack(x, g)
    y = torch.from_dlpack(t)
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    free1 = torch.cuda.mem_get_info()[0]
    use1 = g.memory_usage(device=True)
    same = y.data_ptr() == x.data_ptr() == t.buffer.address()
    print(f"[3] torch -> cube -> torch, {n * 4 / (1 << 30):.2f} GiB CUDA tensor: "
          f"{(t1 - t0) * 1e6:.1f} us, same address: {same}")
    print(f"    device free memory {free0} -> {free1} bytes (change {free1 - free0}); "
          f"cube bytes_in_use {use0.bytes_in_use} -> {use1.bytes_in_use}, "
          f"reserved {use0.bytes_reserved} -> {use1.bytes_reserved}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--launches", type=int, default=20000)
    a = ap.parse_args()
    print(f"cube {cube.version()} ({cube.LIBRARY_PATH}), Python {sys.version.split()[0]}, "
          f"NumPy {np.__version__}")
    bench_copies(a.gib, a.runs)
    bench_launch(a.launches, a.runs)
    bench_torch_cuda(a.gib)


if __name__ == "__main__":
    main()
