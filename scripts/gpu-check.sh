#!/usr/bin/env bash
# The GPU check, in one command on a machine with an NVIDIA GPU (the device
# tool's H200): builds cube, runs the conformance suite on `cuda` and `cpu`,
# runs compute-sanitizer memcheck over the CUDA conformance cases, runs the
# CUDA benchmarks beside the raw-CUDA baseline programs of bench/peers/,
# and writes every log under $OUT.
#
#   scripts/gpu-check.sh            everything
#   scripts/gpu-check.sh tests      build + conformance (cuda, cpu) + unit tests
#   scripts/gpu-check.sh memcheck   build + compute-sanitizer over cts.cuda
#   scripts/gpu-check.sh bench      build + bench_cuda + raw peers
#   scripts/gpu-check.sh python     build + the DLPack conformance cases on cuda + the pytest
#                                   suite (PyTorch and CuPy on CUDA, where installed) +
#                                   bench/bench_dlpack.py (the launch against CuPy's RawKernel,
#                                   the 1 GiB PyTorch exchange)
#   scripts/gpu-check.sh nccl       build + the CUDA collectives on the GPU through NCCL
#                                   (CTS, the staged fallback, the mock cases) + bench_nccl
#                                   (cube's nccl transport beside raw NCCL, 1 MiB .. 4 GiB)
#   scripts/gpu-check.sh timer      build + what tracing costs (issue 17): the raw peer
#                                   bench/peers/cuda_timing_cost.c (empty and saxpy: the
#                                   timing forms side by side, the end words' layouts among
#                                   them; then saxpy's forms over 32, 64 and 128 planes of
#                                   ends and with the tests' forms three times), bench_cuda's figure 11 with CUBE_CUDA_KERNEL_TIMER
#                                   self, cupti, self, cupti, the CUDA cases self-timed, and
#                                   the demo's trace self-timed
# Several words may be given. CUBE_GPU_CTS_REGEX narrows the CTS cases;
# CUBE_NCCL_BENCH_MAX_MIB caps bench_nccl's sweep (default 4096).
set -uo pipefail
OUT=${OUT:-/tmp/cube-gpu-check}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
PEERS=${CUBE_BENCH_PEERS:-bench/peers}
[ -d "$PEERS" ] || echo "gpu-check: no baseline programs in $PEERS (set CUBE_BENCH_PEERS to their directory); peer runs are skipped" >&2
what=${*:-tests memcheck bench nccl}   # also: tune (staging ring settings)
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

if has python; then
  {
    echo "== DLPack conformance on cuda"
    ctest --test-dir build-gpu -R '^cts\.cuda\.dlpack' -j 4 --timeout 120 --output-on-failure 2>&1 | tail -20
    echo "== pytest (python/tests) with this build's libcube"
    CUBE_LIBRARY=$PWD/build-gpu/libcube.so PYTHONPATH=$PWD/python/src \
      python3 python/tests/run.py -q -rs -p no:cacheprovider --rootdir=python python/tests 2>&1 | tail -20
    echo "== bench_dlpack"
    CUBE_LIBRARY=$PWD/build-gpu/libcube.so PYTHONPATH=$PWD/python/src \
      python3 bench/bench_dlpack.py --gib 1 --runs 5 --launches 20000 2>&1
  } 2>&1 | tee "$OUT/python.log"
fi

if has tests; then
  {
    echo "== unit tests (cuda)"
    ctest --test-dir build-gpu -R '^unit\.(cuda_backend|cross_backend\.cuda)' --output-on-failure 2>&1 | tail -25
    echo "== the same kernels on cuda and cpu"
    ./build-gpu/tests/test_cross_backend cuda_matches_cpu 2>&1 | tail -12
    echo "== conformance on cuda"
    ctest --test-dir build-gpu -R "^cts\.cuda\.${CUBE_GPU_CTS_REGEX:-}" -j 8 --timeout 120 \
      --output-on-failure > "$OUT/cts-cuda.log" 2>&1
    grep -E "tests passed|Failed|\*\*\*|Timeout|SEGFAULT|Exception" "$OUT/cts-cuda.log" | head -60
    echo "== demo and examples on cuda"
    for e in "./build-gpu/cube demo" ./build-gpu/examples/example_saxpy ./build-gpu/examples/example_reduce \
             ./build-gpu/examples/example_matmul; do
      CUBE_BACKEND=cuda $e > /tmp/example.log 2>&1; echo "$e: exit $?"; tail -2 /tmp/example.log
    done
    echo "== conformance on cpu"
    ctest --test-dir build-gpu -R '^cts\.cpu\.' -j "$J" --timeout 120 2>&1 | tail -6
  } 2>&1 | tee "$OUT/tests.log"
fi

if has memcheck; then
  {
    echo "== compute-sanitizer memcheck over cts.cuda (8 at a time)"
    CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    MC=/tmp/cube-memcheck; rm -rf "$MC"; mkdir -p "$MC"
    ./build-gpu/tests/cube_cts --list 2>/dev/null | grep -e "${CUBE_GPU_CTS_REGEX:-.}" > "$MC/cases"
    t0=$(date +%s)
    xargs -P 8 -I{} sh -c '"$0" --tool memcheck --error-exitcode 99 --print-limit 20 \
        ./build-gpu/tests/cube_cts --backend cuda "$1" > "$2/$1.log" 2>&1; echo "$1 $?" >> "$2/rc"' \
        "$CS" {} "$MC" < "$MC/cases"
    runs=$(wc -l < "$MC/rc"); errs=$(awk '$2 == 99' "$MC/rc" | wc -l)
    other=$(awk '$2 != 0 && $2 != 77 && $2 != 99' "$MC/rc" | wc -l)
    skips=$(awk '$2 == 77' "$MC/rc" | wc -l)
    # Errors whose every report is NCCL's own start-up probe (it asks
    # cudaFuncGetAttributes of kernels built for other architectures, and the
    # runtime answers "no kernel image") are counted apart: not cube's calls.
    nccl_only=0
    for c in $(awk '$2 == 99 {print $1}' "$MC/rc"); do
      heads=$(grep -E '^========= [^ ]' "$MC/$c.log" | grep -cvE 'COMPUTE-SANITIZER|ERROR SUMMARY')
      probes=$(grep -cE '^========= Program hit cudaErrorNoKernelImageForDevice .*cudaFuncGetAttributes' "$MC/$c.log")
      if [ "$heads" -gt 0 ] && [ "$heads" = "$probes" ] && grep -q "in libnccl.so" "$MC/$c.log"; then
        nccl_only=$((nccl_only + 1)); echo "NCCL-internal API errors only in $c ($probes)"; continue
      fi
      echo "memcheck error in $c:"; grep -E "=========" "$MC/$c.log" | head -20
    done
    errs=$((errs - nccl_only))
    for c in $(awk '$2 != 0 && $2 != 77 && $2 != 99 {print $1}' "$MC/rc"); do
      echo "case failed under memcheck: $c (exit $(awk -v c=$c '$1 == c {print $2}' "$MC/rc"))"; tail -5 "$MC/$c.log"
    done
    echo "memcheck: $runs cases in $(( $(date +%s) - t0 )) s: $errs with sanitizer errors, $nccl_only with NCCL-internal API errors only, $other failed otherwise, $skips skipped"
    grep -h "ERROR SUMMARY" "$MC"/*.log | sort | uniq -c
  } 2>&1 | tee "$OUT/memcheck.log"
fi

if has tune; then
  {
    echo "== staging ring settings: bench_cuda transfers under each"
    for cfg in "CUBE_CUDA_STREAM_COPY=down" "CUBE_CUDA_STREAM_COPY=down" \
               "CUBE_CUDA_STAGING_CHUNK=2M" "CUBE_CUDA_STAGING_CHUNK=2M" \
               "CUBE_CUDA_STAGING_CHUNK=8M" "CUBE_CUDA_STAGING_CHUNK=8M" \
               "CUBE_CUDA_COPY_THREADS=12" "CUBE_CUDA_STREAM_COPY=1"; do
      echo "-- $cfg"
      env $cfg CUBE_BENCH_ONLY=transfers timeout 120 ./build-gpu/bench_cuda 2>&1 |
        grep -E "^\[5\] |^\[6c\] |ceiling|FAIL"
    done
  } 2>&1 | tee "$OUT/tune.log"
fi

if has timer; then
  {
    echo "== raw peer: per-launch timing forms (10,000 launches, 11 alternating rounds)"
    if [ -f "$PEERS/cuda_timing_cost.c" ] &&
       gcc -O2 -pthread "$PEERS/cuda_timing_cost.c" -I/usr/local/cuda/include \
         -L/usr/local/cuda/lib64 -lcuda -lnvrtc -ldl -o /tmp/cuda_timing_cost; then
      for k in empty saxpy; do
        echo "-- CUDA_TIMING_KERNEL=$k"
        CUDA_TIMING_KERNEL=$k timeout 240 /tmp/cuda_timing_cost 2>&1
      done
      # The ends' planes (32, 64, 128) and the tests' forms (every index in
      # every unit, nested, nested by inline PTX, the x indices only), and
      # nothing written, three times.
      for r in 1 2 3; do
        echo "-- CUDA_TIMING_KERNEL=saxpy CUDA_TIMING_MODES=12,23,24,25,26,27,20, run $r"
        CUDA_TIMING_KERNEL=saxpy CUDA_TIMING_MODES=12,23,24,25,26,27,20 timeout 120 \
          /tmp/cuda_timing_cost 2>&1 | grep -E "^  |launches"
      done
    fi
    echo "== bench_cuda figure 11 (tracing on / off), each timer twice, alternating"
    for t in self cupti self cupti; do
      echo "-- CUBE_CUDA_KERNEL_TIMER=$t"
      CUBE_CUDA_KERNEL_TIMER=$t CUBE_BENCH_ONLY=trace timeout 300 ./build-gpu/bench_cuda 2>&1 |
        grep -E "^## \[11|ratio on/off|per launch, medians|FAIL"
    done
    echo "== the CUDA cases and unit tests, self-timed"
    CUBE_CUDA_KERNEL_TIMER=self ctest --test-dir build-gpu \
      -R "^(cts\.cuda\.|unit\.cuda_activity)${CUBE_GPU_CTS_REGEX:-}" -j 8 --timeout 120 \
      --output-on-failure > "$OUT/cts-cuda-self.log" 2>&1
    grep -E "tests passed|Failed|\*\*\*|Timeout|SEGFAULT" "$OUT/cts-cuda-self.log" | head -30
    echo "== the demo's trace, self-timed"
    CUBE_CUDA_KERNEL_TIMER=self CUBE_BACKEND=cuda CUBE_TRACE="$OUT/demo-self-trace.json" \
      ./build-gpu/cube demo 2>&1 | tail -2
    python3 - "$OUT/demo-self-trace.json" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
k = [e for e in ev if e.get("cat") == "kernel"]
print("demo trace: %d events, %d kernels, details %s" % (len(ev), len(k),
      sorted({e.get("args", {}).get("detail") for e in k})))
PY
  } 2>&1 | tee "$OUT/timer.log"
fi

if has bench; then
  {
    echo "== raw CUDA peers (${PEERS})"
    if [ -f "$PEERS/cuda_driver_limits.c" ]; then
      gcc -O2 "$PEERS/cuda_driver_limits.c" -I/usr/local/cuda/include -L/usr/local/cuda/lib64 \
        -lcuda -lnvrtc -o /tmp/cuda_driver_limits && /tmp/cuda_driver_limits
    fi
    if [ -f "$PEERS/torch_graph_step.py" ]; then
      echo "== PyTorch: eager vs CUDA graph of the step (200 in-place adds of 4096 floats)"
      timeout 300 python3 "$PEERS/torch_graph_step.py" 2>&1 | tee /tmp/torch_graph_step.log | tail -6
      # bench_cuda's row 9f compares cube's replay of the same step with it.
      CUBE_BENCH_TORCH_GRAPH_STEP_US=$(sed -n 's/^graph: step synced \([0-9.]*\) us.*/\1/p' \
        /tmp/torch_graph_step.log | head -1)
      export CUBE_BENCH_TORCH_GRAPH_STEP_US
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
        --backend cuda "$c" > /tmp/nccl-staged-case.log 2>&1
      echo "staged $c: exit $? ($(tail -1 /tmp/nccl-staged-case.log))"
    done
    echo "== nccl: the transport over the mocks (two mock GPUs, threads, inline, timeouts, processes)"
    ctest --test-dir build-gpu -R '^unit\.nccl|^cts\.cuda-mock.*collectives|^mpi\.nccl' -j "$J" \
      --timeout 300 2>&1 | grep -E "tests passed|Failed|\*\*\*|Timeout" | head -20
    echo "== nccl: bench_nccl (all_reduce f32 sum, cube's nccl transport beside raw NCCL)"
    BENCH_MAX_MIB=${CUBE_NCCL_BENCH_MAX_MIB:-4096} timeout 300 ./build-gpu/bench_nccl
    echo "bench_nccl: exit $?"
    ngpu=$(nvidia-smi -L 2>/dev/null | grep -c "^GPU")
    if [ "$ngpu" -ge 2 ]; then
      echo "== nccl: $ngpu GPUs: the PyTorch + NCCL peer in the same call (one process a GPU)"
      timeout 600 python3 "$PEERS/nccl_allreduce_torch.py" 2>&1 | tail -14
      echo "== nccl: 2 processes x 1 GPU (mpiexec, CUDA_VISIBLE_DEVICES per rank, real NCCL)"
      timeout 300 mpiexec --allow-run-as-root --oversubscribe -np 2 -x CUBE_TEST_REAL_GPUS=1 \
        -x NCCL_NVLS_ENABLE=0 sh -c 'CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK exec \
        ./build-gpu/tests/test_collective_mpi nccl_real_two_processes' 2>&1 | tail -6
      echo "2 processes: exit $?"
    else
      echo "== nccl: one GPU: no bus bandwidth, no PyTorch peer, no two-process run" \
           "(run on nvidia-h200-x2 for those)"
    fi
  } 2>&1 | tee "$OUT/nccl.log"
fi
