#!/usr/bin/env bash
# The GPU check, in one command on a machine with an NVIDIA GPU (the device
# tool's H200): builds cube, runs the conformance suite on `cuda` and `cpu`,
# runs compute-sanitizer memcheck over the CUDA conformance cases, runs the
# CUDA benchmarks beside the raw-CUDA baseline programs of shared/bench-peers/,
# and writes every log under $OUT.
#
#   scripts/gpu-check.sh            everything
#   scripts/gpu-check.sh tests      build + conformance (cuda, cpu) + unit tests
#   scripts/gpu-check.sh memcheck   build + compute-sanitizer over cts.cuda
#   scripts/gpu-check.sh bench      build + bench_cuda + raw peers
#   scripts/gpu-check.sh nccl       build + the CUDA collectives on the GPU through NCCL
#                                   (CTS, the staged fallback, the mock cases) + bench_nccl
#                                   (cube's nccl transport beside raw NCCL, 1 MiB .. 4 GiB)
# Several words may be given. CUBE_GPU_CTS_REGEX narrows the CTS cases;
# CUBE_NCCL_BENCH_MAX_MIB caps bench_nccl's sweep (default 4096).
set -uo pipefail
OUT=${OUT:-/tmp/cube-gpu-check}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PEERS=${CUBE_BENCH_PEERS:-shared/bench-peers}
[ -d "$PEERS" ] || PEERS=../shared/bench-peers
what=${*:-tests memcheck bench nccl}
has() { case " $what " in *" $1 "*) return 0 ;; esac; return 1; }
J=$(nproc)
export CUBE_CACHE_DIR=${CUBE_CACHE_DIR:-/tmp/cube-kernel-cache}

{
  echo "== machine $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -8
  lscpu | grep -E "Model name" ; echo "cores: $J"
  echo "nccl: $(ls /usr/lib/x86_64-linux-gnu/libnccl.so.2 /usr/local/cuda/lib*/libnccl.so.2 2>/dev/null | head -2 | tr '\n' ' ')"
  echo "mpi: $(command -v mpicc mpiexec | tr '\n' ' ') compute-sanitizer: $(command -v compute-sanitizer)"
  echo "gcc: $(gcc --version | head -1); clang: $(command -v clang)"
  echo "== build"
  t0=$(date +%s)
  cmake -S . -B build-gpu -G Ninja ${CUBE_GPU_CMAKE_ARGS:-} -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCUBE_ASAN_TESTS=OFF >/dev/null &&
    cmake --build build-gpu -j "$J" 2>&1 | grep -E "error|warning|FAILED" | head -30
  echo "build: $(( $(date +%s) - t0 )) s"
  ./build-gpu/cube info 2>&1 | sed -n '/backend cuda/,/backend opencl/p'
} 2>&1 | tee "$OUT/build.log"

if has tests; then
  {
    echo "== unit tests (cuda)"
    ctest --test-dir build-gpu -R '^unit\.cuda_backend' --output-on-failure 2>&1 | tail -15
    echo "== conformance on cuda"
    ctest --test-dir build-gpu -R "^cts\.cuda\.${CUBE_GPU_CTS_REGEX:-}" -j 8 --timeout 120 \
      --output-on-failure > "$OUT/cts-cuda.log" 2>&1
    grep -E "tests passed|Failed|\*\*\*|Timeout|SEGFAULT|Exception" "$OUT/cts-cuda.log" | head -60
    echo "== demo and examples on cuda"
    for e in "./build-gpu/cube demo" ./build-gpu/tests/example_saxpy ./build-gpu/tests/example_reduce \
             ./build-gpu/tests/example_matmul; do
      CUBE_BACKEND=cuda $e > "$OUT/example.log" 2>&1; echo "$e: exit $?"; tail -2 "$OUT/example.log"
    done
    echo "== conformance on cpu"
    ctest --test-dir build-gpu -R '^cts\.cpu\.' -j "$J" --timeout 120 2>&1 | tail -6
  } 2>&1 | tee "$OUT/tests.log"
fi

if has memcheck; then
  {
    echo "== compute-sanitizer memcheck over cts.cuda"
    CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    fails=0; runs=0
    for c in $(./build-gpu/tests/cube_cts --list 2>/dev/null); do
      case "$c" in *${CUBE_GPU_CTS_REGEX:-}*) ;; *) continue ;; esac
      runs=$((runs + 1))
      "$CS" --tool memcheck --error-exitcode 99 --print-limit 20 \
        ./build-gpu/tests/cube_cts --backend cuda "$c" > "$OUT/memcheck-case.log" 2>&1
      rc=$?
      if [ $rc -eq 99 ]; then
        fails=$((fails + 1)); echo "memcheck error in $c:"; grep -E "=========" "$OUT/memcheck-case.log" | head -20
      fi
    done
    echo "memcheck: $runs cases, $fails with sanitizer errors"
  } 2>&1 | tee "$OUT/memcheck.log"
fi

if has bench; then
  {
    echo "== raw CUDA peers (${PEERS})"
    if [ -f "$PEERS/cuda_driver_limits.c" ]; then
      gcc -O2 "$PEERS/cuda_driver_limits.c" -I/usr/local/cuda/include -L/usr/local/cuda/lib64 \
        -lcuda -lnvrtc -o /tmp/cuda_driver_limits && /tmp/cuda_driver_limits
    fi
    echo "== bench_cuda"
    timeout 300 ./build-gpu/bench_cuda
  } 2>&1 | tee "$OUT/bench.log"
fi

if has nccl; then
  {
    echo "== nccl: the transport of CUDA collectives (NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE)"
    ./build-gpu/cube info 2>&1 | grep -E "device cuda|collectives:" | head -8
    echo "== nccl: CUDA collectives CTS on the GPU through NCCL (one GPU: the one-device cases run,"
    echo "   the two-device ones skip)"
    ctest --test-dir build-gpu -R '^cts\.cuda\..*collectives' --timeout 300 --output-on-failure 2>&1 |
      grep -E "Test +#|tests passed|Failed|\*\*\*|Timeout|SEGFAULT|SKIP" | head -20
    echo "== nccl: the same cases through the staged fallback (no NCCL)"
    for c in $(./build-gpu/tests/cube_cts --list 2>/dev/null | grep collectives); do
      CUBE_NCCL_LIBRARY=/nonexistent/libnccl.so.2 timeout 300 ./build-gpu/tests/cube_cts \
        --backend cuda "$c" > "$OUT/nccl-staged-case.log" 2>&1
      echo "staged $c: exit $? ($(tail -1 "$OUT/nccl-staged-case.log"))"
    done
    echo "== nccl: the transport over the mocks (two mock GPUs, threads, inline, timeouts, processes)"
    ctest --test-dir build-gpu -R '^unit\.nccl|^cts\.cuda-mock.*collectives|^mpi\.nccl' -j "$J" \
      --timeout 300 2>&1 | grep -E "tests passed|Failed|\*\*\*|Timeout" | head -20
    echo "== nccl: bench_nccl (all_reduce f32 sum, cube's nccl transport beside raw NCCL)"
    BENCH_MAX_MIB=${CUBE_NCCL_BENCH_MAX_MIB:-4096} timeout 900 ./build-gpu/bench_nccl
    echo "bench_nccl: exit $?"
  } 2>&1 | tee "$OUT/nccl.log"
fi
