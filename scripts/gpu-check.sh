#!/usr/bin/env bash
# Runs on a lent GPU machine (the device tool): builds cube, runs the test suite
# and the CPU benchmarks on that host's cores, and writes logs to $OUT.
# Packages the machine lacks may be carried as .deb files in .debs/ (unpacked
# into / first). The CUDA backend does not exist yet: this checks the CPU
# backend on a bigger host and that NVRTC compiles the dialect's CUDA units.
set -uo pipefail
OUT=${OUT:-/tmp/cube-gpu-check}
mkdir -p "$OUT"
if ls .debs/*.deb >/dev/null 2>&1; then
  for f in .debs/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
{
  echo "== machine"; nproc; lscpu | grep -E "Model name|Socket|Core|Thread" ; nvidia-smi -L 2>&1 | head -4
  echo "== build"
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUBE_ASAN_TESTS=OFF >/dev/null &&
    cmake --build build-gpu -j "$(nproc)" 2>&1 | tail -3
  echo "== tests"
  ctest --test-dir build-gpu -j "$(nproc)" --timeout 300 2>&1 | tail -25
} 2>&1 | tee "$OUT/check.log"
./build-gpu/bench_runtime > "$OUT/bench_runtime.txt" 2>&1
./build-gpu/bench_dialect > "$OUT/bench_dialect.txt" 2>&1
tail -5 "$OUT/bench_dialect.txt"
