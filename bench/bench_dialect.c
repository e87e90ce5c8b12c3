/* bench_dialect: kernels written in the cube dialect on the CPU backend, each
 * measured in the same run, on the same data, beside its baselines
 * (docs/benchmarks.md, "Targets", compares ratios, not absolute figures):
 *
 *   1. saxpy over 16M floats (CUBE_BENCH_SAXPY_N: another count): cube
 *      (dialect kernel, cube_dim 256) vs a plain C loop vs an OpenMP loop vs
 *      PoCL running the same source as OpenCL
 *   2. sum over 16M floats with cube-local memory and sync_cube (the tree
 *      kernel of examples/reduce.c, 256 units per cube, partial sums finished
 *      on the host): cube vs OpenMP reduction(+) vs PoCL
 *   3. tiled matmul 512x512x512 (examples/matmul.c, TILE 16): cube and PoCL vs
 *      a naive C triple loop and an OpenMP loop parallel over i
 *   4. kernel cache: cold compile vs disk hit (a child process) vs memory hit
 *   5. empty launch + sync of a dialect kernel, 1 cube, threaded queue
 *   6. tuned matmul (examples/tuned_matmul.h: 7 candidates, tiles 8-32,
 *      vector widths 1-4) over six shapes from 64 to 4096, square and not:
 *      the tuning's choice vs every candidate measured alone (target: within
 *      3 % of the best), and its speedup over the untuned default (TILE 16)
 *   7. the cost of a tuned launch that hits (key function + lookup) over a
 *      plain launch of the same kernel (target: <= 0.1 us)
 *   8. opencl only: 16 writes of 4 KiB + sync, and 16 empty launches
 *      alternating between two streams + sync of both, against PoCL direct
 *      (non-blocking writes; two queues with no ordering between them)
 *
 * Arguments name the sections to run (saxpy reduce matmul cache empty tune
 * tune_hit ocl_streams), and "quick"; no section named runs all of them.
 * CUBE_BENCH_ONLY=saxpy,reduce,... (a comma-separated subset of the same
 * names) runs only those sections too; with both, a section runs when both
 * name it.
 *
 * Sections 1-3 and 5 also run the same kernel objects through cube's own
 * opencl backend (opencl:0, PoCL here), beside the cpu backend, in the same
 * run: "cube opencl vs cube cpu" and "cube opencl vs PoCL direct" (the cost
 * of cube's layer over the same driver) are measured ratios.
 *
 * PoCL is reached through libOpenCL.so.1 opened with dlopen at run time (the
 * bench never links it); every OpenCL function used is resolved with dlsym.
 * The OpenCL translation unit is cube's own: cube__dialect_generate(
 * CUBE__TARGET_OPENCL, ...) of the same source in Checked mode (the mode of
 * cube_client_launch). Without OpenCL or a platform the PoCL lines say
 * "PoCL: not available (<reason>)" and the rest runs.
 *
 * Every result is checked (saxpy within 1e-6 relative, sums within 1e-3
 * relative of a double host sum, matmul max relative error < 1e-4); a wrong
 * result makes the exit status 1.
 *
 * Figures of sections 1, 2, 3, 5 and 8: alternating rounds (bench_rounds.h).
 * Every system of a section (cube cpu, cube opencl, the C and OpenMP loops,
 * PoCL direct) runs once per round, in an order rotated and reversed each
 * round; its round figure is the median of that round's few trials (section
 * 5: a trial's figure is the median of its launches, each timed alone). A
 * system line gives the median of its round figures with min and max; a
 * ratio line "median of N alternating rounds X.XXx (min A, max B)" is the
 * median of the per-round ratios (both sides from the same round), and the
 * target verdicts use that median. N >= 5 (CUBE_BENCH_ROUNDS raises it);
 * "quick" (or CUBE_BENCH_QUICK=1) runs 2 rounds of 1 trial, saxpy and sum on
 * 1M floats (matmul stays 512), for the smoke test (tests/CMakeLists.txt,
 * bench.dialect_smoke): not results.
 * Other sections: median and minimum over trials after warm-up. Timed with
 * CLOCK_MONOTONIC; cube trials are launch + sync, PoCL trials enqueue +
 * clFinish (buffers created once). A "rate ratio" is rate / B's rate
 * (higher is better); a "time ratio" time / B's time (lower is better).
 */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <dlfcn.h>
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#define BENCH_NAME "bench_dialect"
#include "bench_common.h"
#include "bench_rounds.h"
#include "../examples/tuned_matmul.h"
#include "cube/cube.h"
/* Internal: the OpenCL unit of a dialect source, and the CPU compiler. */
#include "backends/cpu/cpu_compiler.h"
#include "kernel/dialect.h"

//===----------------------------------------------------------------------===//
// Kernel sources (the dialect kernels of examples/)
//===----------------------------------------------------------------------===//

static const char* const k_saxpy_src =
    "CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(y)) CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "}\n";

static const char* const k_reduce_src =
    "CUBE_KERNEL(block_sum, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, partial)) {\n"
    "  CUBE_SHARED(float, tile, BLOCK);\n"
    "  uint32_t u = UNIT_POS_X;\n"
    "  uint64_t i = ABSOLUTE_POS_X;\n"
    "  tile[u] = i < CUBE_LEN(x) ? x[i] : 0.0f;\n"
    "  sync_cube();\n"
    "  for (uint32_t s = BLOCK / 2; s > 0; s >>= 1) {\n"
    "    if (u < s) tile[u] += tile[u + s];\n"
    "    sync_cube();\n"
    "  }\n"
    "  if (u == 0) partial[CUBE_POS_X] = tile[0];\n"
    "}\n";

/* The same tree behind the common guard `if (i >= n) return;` before the
 * barriers: split into loops with a per-unit "returned" flag since issue 16
 * part 3 (fibers before); run both ways in section 2. */
static const char* const k_reduce_ret_src =
    "CUBE_KERNEL(block_sum_ret, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, partial)) {\n"
    "  CUBE_SHARED(float, tile, BLOCK);\n"
    "  uint32_t u = UNIT_POS_X;\n"
    "  uint64_t i = ABSOLUTE_POS_X;\n"
    "  tile[u] = 0.0f;\n"
    "  if (i >= CUBE_LEN(x)) return;\n"
    "  tile[u] = x[i];\n"
    "  sync_cube();\n"
    "  for (uint32_t s = BLOCK / 2; s > 0; s >>= 1) {\n"
    "    if (u < s) tile[u] += tile[u + s];\n"
    "    sync_cube();\n"
    "  }\n"
    "  if (u == 0) partial[CUBE_POS_X] = tile[0];\n"
    "}\n";

static const char* const k_matmul_src =
    "CUBE_KERNEL(matmul, CUBE_ARRAY(const float, a), CUBE_ARRAY(const float, b),\n"
    "            CUBE_ARRAY(float, c), uint32_t m, uint32_t n, uint32_t k) {\n"
    "  CUBE_SHARED(float, ta, TILE * TILE);\n"
    "  CUBE_SHARED(float, tb, TILE * TILE);\n"
    "  uint32_t tx = UNIT_POS_X, ty = UNIT_POS_Y;\n"
    "  uint32_t row = CUBE_POS_Y * TILE + ty, col = CUBE_POS_X * TILE + tx;\n"
    "  float acc = 0.0f;\n"
    "  for (uint32_t t = 0; t < k; t += TILE) {\n"
    "    ta[ty * TILE + tx] = (row < m && t + tx < k) ? a[(uint64_t)row * k + t + tx] : 0.0f;\n"
    "    tb[ty * TILE + tx] = (t + ty < k && col < n) ? b[(uint64_t)(t + ty) * n + col] : 0.0f;\n"
    "    sync_cube();\n"
    "    for (uint32_t q = 0; q < TILE; ++q) acc += ta[ty * TILE + q] * tb[q * TILE + tx];\n"
    "    sync_cube();\n"
    "  }\n"
    "  if (row < m && col < n) CUBE_STORE(c, (uint64_t)row * n + col, acc);\n"
    "}\n";

static const char* const k_empty_src = "CUBE_KERNEL(empty, uint32_t unused) {}\n";

//===----------------------------------------------------------------------===//
// Timing, statistics, output
//===----------------------------------------------------------------------===//

static int cmp_u64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

/* Lets spinning helpers of the system measured before (OpenMP, PoCL, cube's
 * pool) go to sleep before the next system is timed: on a machine with few
 * cores a spinner steals a core from the next measurement. */
static void settle(void) {
  struct timespec ts = {0, 30 * 1000 * 1000};
  nanosleep(&ts, NULL);
}

static volatile float g_sink;


static void wrong(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void wrong(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "bench_dialect: WRONG RESULT: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  printf("  WRONG RESULT (see stderr)\n");
  g_failures++;
}

#define LABEL_W 56

/* Rates: |work| units of work per operation (bytes, flops) -> G<unit>/s. */
static double grate(double work, double us) { return work / (us * 1e3); }

//===----------------------------------------------------------------------===//
// Data
//===----------------------------------------------------------------------===//

static float rnd(uint64_t* s) {
  *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
  return (float)((*s * 0x2545F4914F6CDD1Dull) >> 40) / (float)(1u << 24) - 0.5f;
}

static void* xmalloc(size_t n) {
  void* p = malloc(n);
  if (!p) {
    fprintf(stderr, "bench_dialect: out of memory (%zu bytes)\n", n);
    exit(1);
  }
  return p;
}

//===----------------------------------------------------------------------===//
// OpenCL (PoCL) through dlopen
//===----------------------------------------------------------------------===//

#define OCL_FUNCS(X)                                                                     \
  X(clGetPlatformIDs)                                                                    \
  X(clGetPlatformInfo)                                                                   \
  X(clGetDeviceIDs)                                                                      \
  X(clGetDeviceInfo)                                                                     \
  X(clCreateContext)                                                                     \
  X(clReleaseContext)                                                                    \
  X(clCreateCommandQueue)                                                                \
  X(clReleaseCommandQueue)                                                               \
  X(clCreateProgramWithSource)                                                           \
  X(clBuildProgram)                                                                      \
  X(clGetProgramBuildInfo)                                                               \
  X(clReleaseProgram)                                                                    \
  X(clCreateKernel)                                                                      \
  X(clReleaseKernel)                                                                     \
  X(clSetKernelArg)                                                                      \
  X(clCreateBuffer)                                                                      \
  X(clReleaseMemObject)                                                                  \
  X(clEnqueueNDRangeKernel)                                                              \
  X(clEnqueueReadBuffer)                                                                 \
  X(clEnqueueWriteBuffer)                                                                \
  X(clFinish)                                                                            \
  X(clFlush)

typedef struct ocl {
  void* lib;
#define OCL_MEMBER(f) __typeof__(f)* f;
  OCL_FUNCS(OCL_MEMBER)
#undef OCL_MEMBER
  cl_platform_id platform;
  cl_device_id device;
  cl_context context;
  cl_command_queue queue;
  bool ok;
  char platform_name[256];
  char platform_version[256];
  char device_name[256];
  cl_uint compute_units;
  char reason[512]; /* why not available */
} ocl_t;

static ocl_t g_ocl;

static void ocl_init(void) {
  ocl_t* o = &g_ocl;
  o->lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!o->lib) {
    const char* e = dlerror();
    snprintf(o->reason, sizeof(o->reason), "dlopen libOpenCL.so.1: %s", e ? e : "?");
    return;
  }
#define OCL_RESOLVE(f)                                                                  \
  do {                                                                                  \
    void* p_ = dlsym(o->lib, #f);                                                       \
    if (!p_) {                                                                          \
      snprintf(o->reason, sizeof(o->reason), "libOpenCL.so.1 has no %s", #f);           \
      return;                                                                           \
    }                                                                                   \
    memcpy(&o->f, &p_, sizeof(p_));                                                     \
  } while (0);
  OCL_FUNCS(OCL_RESOLVE)
#undef OCL_RESOLVE

  cl_uint np = 0;
  cl_int err = o->clGetPlatformIDs(0, NULL, &np);
  if (err != CL_SUCCESS || np == 0) {
    snprintf(o->reason, sizeof(o->reason), "no OpenCL platform (clGetPlatformIDs: error %d, %u "
             "platforms)", (int)err, (unsigned)np);
    return;
  }
  cl_platform_id plats[16];
  if (np > 16) np = 16;
  err = o->clGetPlatformIDs(np, plats, NULL);
  if (err != CL_SUCCESS) {
    snprintf(o->reason, sizeof(o->reason), "clGetPlatformIDs: error %d", (int)err);
    return;
  }
  /* PoCL if present, else the first platform with a device. */
  int pick = -1;
  for (cl_uint i = 0; i < np; ++i) {
    char name[256] = "";
    o->clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, sizeof(name), name, NULL);
    cl_uint nd = 0;
    if (o->clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, 0, NULL, &nd) != CL_SUCCESS || nd == 0)
      continue;
    if (strstr(name, "Portable Computing Language") || strstr(name, "PoCL") ||
        strstr(name, "pocl")) {
      pick = (int)i;
      break;
    }
    if (pick < 0) pick = (int)i;
  }
  if (pick < 0) {
    snprintf(o->reason, sizeof(o->reason), "%u OpenCL platform(s), none with a device",
             (unsigned)np);
    return;
  }
  o->platform = plats[pick];
  o->clGetPlatformInfo(o->platform, CL_PLATFORM_NAME, sizeof(o->platform_name), o->platform_name,
                       NULL);
  o->clGetPlatformInfo(o->platform, CL_PLATFORM_VERSION, sizeof(o->platform_version),
                       o->platform_version, NULL);
  err = o->clGetDeviceIDs(o->platform, CL_DEVICE_TYPE_ALL, 1, &o->device, NULL);
  if (err != CL_SUCCESS) {
    snprintf(o->reason, sizeof(o->reason), "clGetDeviceIDs: error %d", (int)err);
    return;
  }
  o->clGetDeviceInfo(o->device, CL_DEVICE_NAME, sizeof(o->device_name), o->device_name, NULL);
  o->clGetDeviceInfo(o->device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(o->compute_units),
                     &o->compute_units, NULL);
  o->context = o->clCreateContext(NULL, 1, &o->device, NULL, NULL, &err);
  if (!o->context || err != CL_SUCCESS) {
    snprintf(o->reason, sizeof(o->reason), "clCreateContext: error %d", (int)err);
    return;
  }
  o->queue = o->clCreateCommandQueue(o->context, o->device, 0, &err);
  if (!o->queue || err != CL_SUCCESS) {
    snprintf(o->reason, sizeof(o->reason), "clCreateCommandQueue: error %d", (int)err);
    o->clReleaseContext(o->context);
    o->context = NULL;
    return;
  }
  o->ok = true;
}

static void ocl_fini(void) {
  ocl_t* o = &g_ocl;
  if (o->queue) o->clReleaseCommandQueue(o->queue);
  if (o->context) o->clReleaseContext(o->context);
  o->queue = NULL;
  o->context = NULL;
  /* libOpenCL stays loaded: PoCL's threads may outlive the context. */
}

static void ocl_not_available(void) {
  printf("%-*s PoCL: not available (%s)\n", LABEL_W, "PoCL (same source as OpenCL):",
         g_ocl.reason);
}

/* A dialect kernel built for OpenCL from cube's own OpenCL unit. */
typedef struct ocl_kernel {
  cl_program program;
  cl_kernel kernel;
  cube__signature_t sig;
  double build_ms;
  bool ok;
} ocl_kernel_t;

/* Builds |source|'s |entry| for the PoCL device; on failure prints why (a
 * failure of cube's generated unit counts as a bench failure). */
static bool ocl_build(const char* source, const char* entry, const cube_define_t* defs,
                      uint32_t ndefs, ocl_kernel_t* out) {
  memset(out, 0, sizeof(*out));
  if (!g_ocl.ok) return false;
  cube_status_t s = cube__dialect_parse(source, entry, &out->sig);
  if (s) {
    fail_status("cube__dialect_parse (OpenCL)", s);
    return false;
  }
  char* text = NULL;
  s = cube__dialect_generate(CUBE__TARGET_OPENCL, &out->sig, source, defs, ndefs,
                             CUBE_EXEC_CHECKED, &text);
  if (s) {
    fail_status("cube__dialect_generate(CUBE__TARGET_OPENCL)", s);
    return false;
  }
  cl_int err;
  const char* srcs[1] = {text};
  uint64_t t0 = now_ns();
  out->program = g_ocl.clCreateProgramWithSource(g_ocl.context, 1, srcs, NULL, &err);
  if (!out->program || err != CL_SUCCESS) {
    printf("  PoCL: clCreateProgramWithSource('%s') failed: error %d\n", entry, (int)err);
    g_failures++;
    free(text);
    return false;
  }
  err = g_ocl.clBuildProgram(out->program, 1, &g_ocl.device, "-cl-std=CL1.2", NULL, NULL);
  if (err != CL_SUCCESS) {
    size_t len = 0;
    g_ocl.clGetProgramBuildInfo(out->program, g_ocl.device, CL_PROGRAM_BUILD_LOG, 0, NULL, &len);
    char* log = xmalloc(len + 1);
    log[0] = '\0';
    g_ocl.clGetProgramBuildInfo(out->program, g_ocl.device, CL_PROGRAM_BUILD_LOG, len + 1, log,
                                NULL);
    log[len] = '\0';
    printf("  PoCL: building cube's OpenCL unit of '%s' failed (error %d):\n%.4000s\n", entry,
           (int)err, log);
    fprintf(stderr, "bench_dialect: PoCL build of '%s' failed; the unit was:\n%s\n", entry, text);
    free(log);
    g_failures++;
    g_ocl.clReleaseProgram(out->program);
    out->program = NULL;
    free(text);
    return false;
  }
  free(text);
  out->kernel = g_ocl.clCreateKernel(out->program, "cube_kernel_entry", &err);
  if (!out->kernel || err != CL_SUCCESS) {
    printf("  PoCL: clCreateKernel(cube_kernel_entry of '%s') failed: error %d\n", entry,
           (int)err);
    g_failures++;
    g_ocl.clReleaseProgram(out->program);
    out->program = NULL;
    return false;
  }
  out->build_ms = (double)(now_ns() - t0) / 1e6;
  out->ok = true;
  return true;
}

static void ocl_kernel_release(ocl_kernel_t* k) {
  if (k->kernel) g_ocl.clReleaseKernel(k->kernel);
  if (k->program) g_ocl.clReleaseProgram(k->program);
  k->kernel = NULL;
  k->program = NULL;
  k->ok = false;
}

/* One launch argument for an OpenCL unit: a buffer (cl_mem and its bytes,
 * passed as the unit's (T*, ulong bytes) pair) or a scalar. */
typedef struct ocl_arg {
  cube_arg_kind_t kind;
  cl_mem mem;
  uint64_t bytes;
  cube_arg_t scalar;
} ocl_arg_t;

static ocl_arg_t ocl_buf(cl_mem m, uint64_t bytes) {
  ocl_arg_t a;
  memset(&a, 0, sizeof(a));
  a.kind = CUBE_ARG_BUFFER;
  a.mem = m;
  a.bytes = bytes;
  return a;
}

static ocl_arg_t ocl_scalar(cube_arg_t s) {
  ocl_arg_t a;
  memset(&a, 0, sizeof(a));
  a.kind = s.kind;
  a.scalar = s;
  return a;
}

/* Sets the arguments of the unit's cube_kernel_entry in Checked mode: per
 * array (global T*, ulong bytes, ulong view offset), per scalar itself, no
 * bounds record (the OpenCL entry ABI, src/kernel/preludes/opencl.h). */
static bool ocl_set_args(ocl_kernel_t* k, uint32_t n, const ocl_arg_t* args) {
  if (n != k->sig.count) {
    printf("  PoCL: kernel '%s' takes %u arguments, given %u\n", k->sig.entry, k->sig.count, n);
    g_failures++;
    return false;
  }
  cl_uint idx = 0;
  cl_int err = CL_SUCCESS;
  for (uint32_t i = 0; i < n && err == CL_SUCCESS; ++i) {
    const cube__param_t* p = &k->sig.params[i];
    if (p->kind != args[i].kind) {
      printf("  PoCL: kernel '%s' argument %u: kind %s, given %s\n", k->sig.entry, i,
             cube_arg_kind_name(p->kind), cube_arg_kind_name(args[i].kind));
      g_failures++;
      return false;
    }
    switch (p->kind) {
      case CUBE_ARG_BUFFER: {
        cl_ulong bytes = args[i].bytes;
        err = g_ocl.clSetKernelArg(k->kernel, idx++, sizeof(cl_mem), &args[i].mem);
        if (err == CL_SUCCESS) err = g_ocl.clSetKernelArg(k->kernel, idx++, sizeof(bytes), &bytes);
        cl_ulong offset = 0;
        if (err == CL_SUCCESS)
          err = g_ocl.clSetKernelArg(k->kernel, idx++, sizeof(offset), &offset);
        break;
      }
      case CUBE_ARG_U32: {
        cl_uint v = args[i].scalar.v.u32;
        err = g_ocl.clSetKernelArg(k->kernel, idx++, sizeof(v), &v);
        break;
      }
      case CUBE_ARG_I32: {
        cl_int v = args[i].scalar.v.i32;
        err = g_ocl.clSetKernelArg(k->kernel, idx++, sizeof(v), &v);
        break;
      }
      case CUBE_ARG_U64: {
        cl_ulong v = args[i].scalar.v.u64;
        err = g_ocl.clSetKernelArg(k->kernel, idx++, sizeof(v), &v);
        break;
      }
      case CUBE_ARG_I64: {
        cl_long v = args[i].scalar.v.i64;
        err = g_ocl.clSetKernelArg(k->kernel, idx++, sizeof(v), &v);
        break;
      }
      case CUBE_ARG_F32: {
        cl_float v = args[i].scalar.v.f32;
        err = g_ocl.clSetKernelArg(k->kernel, idx++, sizeof(v), &v);
        break;
      }
      case CUBE_ARG_F64: {
        cl_double v = args[i].scalar.v.f64;
        err = g_ocl.clSetKernelArg(k->kernel, idx++, sizeof(v), &v);
        break;
      }
      default: err = CL_INVALID_VALUE; break;
    }
  }
  if (err != CL_SUCCESS) {
    printf("  PoCL: clSetKernelArg for '%s' failed: error %d\n", k->sig.entry, (int)err);
    g_failures++;
    return false;
  }
  return true;
}

static cl_mem ocl_buffer(cl_mem_flags flags, size_t size, void* host) {
  cl_int err;
  cl_mem m = g_ocl.clCreateBuffer(g_ocl.context, flags | (host ? CL_MEM_COPY_HOST_PTR : 0), size,
                                  host, &err);
  if (!m || err != CL_SUCCESS) {
    printf("  PoCL: clCreateBuffer(%zu bytes) failed: error %d\n", size, (int)err);
    g_failures++;
    return NULL;
  }
  return m;
}

/* Enqueue + clFinish. */
static bool ocl_run(ocl_kernel_t* k, cl_uint dims, const size_t* global, const size_t* local) {
  cl_int err = g_ocl.clEnqueueNDRangeKernel(g_ocl.queue, k->kernel, dims, NULL, global, local, 0,
                                            NULL, NULL);
  if (err == CL_SUCCESS) err = g_ocl.clFinish(g_ocl.queue);
  if (err != CL_SUCCESS) {
    fprintf(stderr, "bench_dialect: PoCL launch of '%s' failed: error %d\n", k->sig.entry,
            (int)err);
    g_failures++;
    return false;
  }
  return true;
}

static bool ocl_read(cl_mem m, size_t size, void* dst) {
  cl_int err = g_ocl.clEnqueueReadBuffer(g_ocl.queue, m, CL_TRUE, 0, size, dst, 0, NULL, NULL);
  if (err != CL_SUCCESS) {
    fprintf(stderr, "bench_dialect: clEnqueueReadBuffer failed: error %d\n", (int)err);
    g_failures++;
    return false;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// cube helpers
//===----------------------------------------------------------------------===//

static cube_client_t* g_client; /* the client the cube trials use: cpu:0 or opencl:0 */
static cube_client_t* g_cpu_client; /* cpu:0, threaded queue */
static cube_client_t* g_cl_client;  /* opencl:0, threaded queue; NULL when unavailable */
static char g_cl_reason[256];

static cube_kernel_t* make_dialect(const char* source, const char* entry, uint32_t dx, uint32_t dy,
                                   const cube_define_t* defs, uint32_t ndefs) {
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.cube_dim = (cube_dim_t){dx, dy, 1};
  d.source = source;
  d.entry = entry;
  d.defines = defs;
  d.define_count = ndefs;
  cube_kernel_t* k = NULL;
  cube_status_t s = cube_kernel_create(&d, &k);
  if (s) {
    fail_status("cube_kernel_create", s);
    exit(1);
  }
  return k;
}

/* Compiles |k| now (Checked mode) and returns the time it took in ms. */
static double precompile_ms(cube_kernel_t* k) {
  uint64_t t0 = now_ns();
  cube_status_t s = cube_client_precompile(g_client, 1, &k, CUBE_EXEC_CHECKED);
  double ms = (double)(now_ns() - t0) / 1e6;
  if (s) {
    fail_status("cube_client_precompile", s);
    exit(1);
  }
  return ms;
}

static cube_handle_t upload(const void* data, size_t size) {
  cube_handle_t h = CUBE_HANDLE_NULL;
  cube_status_t s = cube_client_create_from_slice(g_client, data, size, &h);
  if (s) {
    fail_status("cube_client_create_from_slice", s);
    exit(1);
  }
  return h;
}

/* Reads |h| into |dst| (|size| bytes); false on failure. */
static bool download(cube_handle_t h, void* dst, size_t size) {
  cube_bytes_t* b = NULL;
  cube_status_t s = cube_client_read_one(g_client, h, &b);
  if (s) {
    fail_status("cube_client_read_one", s);
    return false;
  }
  bool ok = cube_bytes_size(b) == size;
  if (ok) memcpy(dst, cube_bytes_const_data(b), size);
  else {
    fprintf(stderr, "bench_dialect: read %zu bytes, expected %zu\n", cube_bytes_size(b), size);
    g_failures++;
  }
  cube_bytes_release(b);
  return ok;
}

/* A trial of |fn| on |client| (g_client for the time of the trial): lets a
 * round alternate cube's cpu and opencl clients. */
typedef struct on_client {
  cube_client_t* client;
  trial_fn fn;
  void* ctx;
} on_client_t;

static uint64_t trial_on_client(void* p, uint64_t iters) {
  on_client_t* o = p;
  cube_client_t* saved = g_client;
  g_client = o->client;
  uint64_t t = o->fn(o->ctx, iters);
  g_client = saved;
  return t;
}

static bool g_quick;  /* quick mode: small sizes, ROUNDS_QUICK rounds (smoke tests) */
static int g_rounds = ROUNDS_MIN;

static void print_rounds_header(const rounds_t* r, int per) {
  printf("  %d alternating rounds (order rotated and reversed each round), each system's figure "
         "per round the median of %d trial(s)%s\n", r->n_rounds, per,
         g_quick ? "; QUICK MODE: not a result" : "");
}

/* "<name> median X ms (min A, max B) = R unit (min-max ...)" over the round
 * figures of |i|. */
static void line_fig_rate(const rounds_t* r, int i, const char* name, double work,
                          const char* unit) {
  spread_t f = rounds_figure(r, i);
  if (!f.n_valid) {
    printf("%-*s no valid round\n", LABEL_W, name);
    return;
  }
  printf("%-*s median %9.3f ms (min %9.3f, max %9.3f) = %7.2f %s (%.2f-%.2f)\n", LABEL_W, name,
         f.median / 1e3, f.min / 1e3, f.max / 1e3, grate(work, f.median), unit,
         grate(work, f.max), grate(work, f.min));
}

/* The per-round ratio of |a| over |b| (of rates when |rate|, else of times). */
static spread_t line_rounds_ratio(const rounds_t* r, const char* name, int a, int b, bool rate) {
  spread_t s = rounds_ratio(r, a, b, rate);
  printf("%-*s %s ", LABEL_W, name, rate ? "rate ratio," : "time ratio,");
  print_ratio_spread(s, r->n_rounds);
  return s;
}

/* "met" / "NOT met" on the median of a ratio against |bound| (at least it
 * when |at_least|, else at most). */
static const char* verdict(spread_t s, double bound, bool at_least) {
  if (!s.n_valid) return "not measured";
  return (at_least ? s.median >= bound : s.median <= bound) ? "met" : "NOT met";
}

static void line_cl_absent(const char* name) {
  if (!g_cl_client) printf("%-*s not available (%s)\n", LABEL_W, name, g_cl_reason);
  else printf("%-*s no valid result\n", LABEL_W, name);
}

//===----------------------------------------------------------------------===//
// 1. saxpy
//===----------------------------------------------------------------------===//

#define DIM 256u

typedef struct saxpy_ctx {
  uint64_t n;
  float a;
  const float* x;  /* host */
  const float* y0; /* host, initial y */
  float* yw;       /* host work copy for the C loops and read-backs */
  cube_kernel_t* k;
  cube_handle_t hx, hy;
  ocl_kernel_t ok;
  cl_mem cx, cy;
} saxpy_ctx_t;

/* y = a*x + y0 within 1e-6 of the magnitude of its terms (an FMA rounds once). */
static bool saxpy_check(const char* who, const saxpy_ctx_t* s, const float* y) {
  uint64_t bad = 0, first = 0;
  for (uint64_t i = 0; i < s->n; ++i) {
    double ax = (double)s->a * s->x[i], e = ax + s->y0[i];
    double tol = 1e-6 * (fabs(ax) + fabs((double)s->y0[i])) + 1e-30;
    if (!(fabs((double)y[i] - e) <= tol)) {
      if (!bad) first = i;
      bad++;
    }
  }
  if (bad) {
    wrong("saxpy (%s): %llu of %llu elements wrong (first at %llu: %.9g, expected %.9g)", who,
          (unsigned long long)bad, (unsigned long long)s->n, (unsigned long long)first,
          (double)y[first], (double)s->a * s->x[first] + s->y0[first]);
    return false;
  }
  return true;
}

static void saxpy_plain(uint64_t n, float a, const float* restrict x, float* restrict y) {
  for (uint64_t i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}

#ifdef _OPENMP
static void saxpy_omp(uint64_t n, float a, const float* restrict x, float* restrict y) {
  int64_t nn = (int64_t)n;
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < nn; ++i) y[i] = a * x[i] + y[i];
}
#endif

static bool saxpy_cube_once(saxpy_ctx_t* s) {
  cube_arg_t args[3] = {cube_arg_buffer(s->hx), cube_arg_buffer(s->hy), cube_arg_f32(s->a)};
  cube_status_t st = cube_client_launch(g_client, s->k,
                                        cube_count_static((uint32_t)(s->n / DIM), 1, 1), 3, args);
  if (st) {
    fail_status("cube_client_launch (saxpy)", st);
    return false;
  }
  st = cube_client_sync(g_client);
  if (st) {
    fail_status("cube_client_sync (saxpy)", st);
    return false;
  }
  return true;
}

static uint64_t trial_saxpy_cube(void* p, uint64_t iters) {
  saxpy_ctx_t* s = p;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) (void)saxpy_cube_once(s);
  return now_ns() - t0;
}

static uint64_t trial_saxpy_plain(void* p, uint64_t iters) {
  saxpy_ctx_t* s = p;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) saxpy_plain(s->n, s->a, s->x, s->yw);
  uint64_t t1 = now_ns();
  g_sink = s->yw[s->n / 2];
  return t1 - t0;
}

#ifdef _OPENMP
static uint64_t trial_saxpy_omp(void* p, uint64_t iters) {
  saxpy_ctx_t* s = p;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) saxpy_omp(s->n, s->a, s->x, s->yw);
  uint64_t t1 = now_ns();
  g_sink = s->yw[s->n / 2];
  return t1 - t0;
}
#endif

static uint64_t trial_saxpy_ocl(void* p, uint64_t iters) {
  saxpy_ctx_t* s = p;
  size_t global = s->n, local = DIM;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) (void)ocl_run(&s->ok, 1, &global, &local);
  return now_ns() - t0;
}

static void bench_saxpy(void) {
  uint64_t n = g_quick ? (1u << 20) : (16u << 20);
  /* CUBE_BENCH_SAXPY_N: another size (elements, rounded down to whole cubes,
   * at least one), to see the kernel where the data fit in the caches. */
  const char* want = getenv("CUBE_BENCH_SAXPY_N");
  if (want && *want) {
    unsigned long long v = strtoull(want, NULL, 0);
    n = v / DIM * DIM;
    if (n == 0) n = DIM;
  }
  const double bytes = 12.0 * (double)n;
  printf("[1] saxpy y = a*x + y over %.2fM floats (12 bytes per element), cube_dim 256, %llu "
         "cubes\n", (double)n / (1u << 20), (unsigned long long)(n / DIM));
  saxpy_ctx_t s;
  memset(&s, 0, sizeof(s));
  s.n = n;
  s.a = 2.5f;
  float* x = xmalloc(n * sizeof(float));
  float* y0 = xmalloc(n * sizeof(float));
  s.yw = xmalloc(n * sizeof(float));
  uint64_t seed = 42;
  for (uint64_t i = 0; i < n; ++i) x[i] = rnd(&seed), y0[i] = rnd(&seed);
  s.x = x;
  s.y0 = y0;
  const int warm = g_quick ? 1 : 3, per = g_quick ? 1 : 3;
  rounds_t R;
  rounds_init(&R, g_rounds, settle);

  /* cube: compile, one checked launch on y0; timed in the rounds below. */
  s.k = make_dialect(k_saxpy_src, "saxpy", DIM, 1, NULL, 0);
  double compile = precompile_ms(s.k);
  s.hx = upload(x, n * sizeof(float));
  s.hy = upload(y0, n * sizeof(float));
  bool cube_ok = saxpy_cube_once(&s) && download(s.hy, s.yw, n * sizeof(float)) &&
                 saxpy_check("cube", &s, s.yw);
  on_client_t on_cpu = {g_cpu_client, trial_saxpy_cube, &s};
  int i_cube = rounds_add(&R, "cube cpu", trial_on_client, &on_cpu, 1, warm, per);
  /* The same kernel object through cube's opencl backend (its own buffers). */
  saxpy_ctx_t t = s;
  on_client_t on_cl = {g_cl_client, trial_saxpy_cube, &t};
  int i_cl = -1;
  t.hx = t.hy = CUBE_HANDLE_NULL;
  if (g_cl_client) {
    g_client = g_cl_client;
    (void)precompile_ms(t.k);
    t.hx = upload(x, n * sizeof(float));
    t.hy = upload(y0, n * sizeof(float));
    if (saxpy_cube_once(&t) && download(t.hy, s.yw, n * sizeof(float)) &&
        saxpy_check("cube opencl", &t, s.yw))
      i_cl = rounds_add(&R, "cube opencl", trial_on_client, &on_cl, 1, warm, per);
    g_client = g_cpu_client;
  }

  /* Plain C loop and OpenMP: checked on a fresh copy of y0 first. */
  memcpy(s.yw, y0, n * sizeof(float));
  saxpy_plain(n, s.a, x, s.yw);
  (void)saxpy_check("plain C loop", &s, s.yw);
  int i_plain = rounds_add(&R, "plain C", trial_saxpy_plain, &s, 1, warm > 2 ? 2 : warm, per);
#ifdef _OPENMP
  memcpy(s.yw, y0, n * sizeof(float));
  saxpy_omp(n, s.a, x, s.yw);
  (void)saxpy_check("OpenMP loop", &s, s.yw);
  int i_omp = rounds_add(&R, "OpenMP", trial_saxpy_omp, &s, 1, warm, per);
#endif

  /* PoCL: buffers created once (copied once), checked launch. */
  int i_pocl = -1;
  if (ocl_build(k_saxpy_src, "saxpy", NULL, 0, &s.ok)) {
    s.cx = ocl_buffer(CL_MEM_READ_ONLY, n * sizeof(float), x);
    s.cy = ocl_buffer(CL_MEM_READ_WRITE, n * sizeof(float), y0);
    ocl_arg_t args[3] = {ocl_buf(s.cx, n * sizeof(float)), ocl_buf(s.cy, n * sizeof(float)),
                         ocl_scalar(cube_arg_f32(s.a))};
    size_t global = n, local = DIM;
    if (s.cx && s.cy && ocl_set_args(&s.ok, 3, args) && ocl_run(&s.ok, 1, &global, &local) &&
        ocl_read(s.cy, n * sizeof(float), s.yw) && saxpy_check("PoCL", &s, s.yw))
      i_pocl = rounds_add(&R, "PoCL", trial_saxpy_ocl, &s, 1, warm, per);
  }

  rounds_run(&R);
  print_rounds_header(&R, per);
  printf("  cube compile of the dialect kernel (precompile, cold): %.1f ms\n", compile);
  if (s.ok.ok) printf("  PoCL build of the same source (clBuildProgram, POCL_CACHE_DIR may hit): "
                      "%.1f ms\n", s.ok.build_ms);
  line_fig_rate(&R, i_plain, "plain C loop (1 thread):", bytes, "GB/s");
#ifdef _OPENMP
  line_fig_rate(&R, i_omp, "OpenMP parallel for simd loop:", bytes, "GB/s");
#else
  printf("%-*s not built with -fopenmp\n", LABEL_W, "OpenMP parallel for simd loop:");
#endif
  line_fig_rate(&R, i_cube, "cube dialect kernel, launch + sync:", bytes, "GB/s");
  if (i_pocl >= 0)
    line_fig_rate(&R, i_pocl, "PoCL, same source (enqueue + clFinish):", bytes, "GB/s");
  else if (!g_ocl.ok)
    ocl_not_available();
  if (i_cl >= 0) line_fig_rate(&R, i_cl, "cube opencl backend, launch + sync:", bytes, "GB/s");
  else line_cl_absent("cube opencl backend, launch + sync:");
#ifdef _OPENMP
  line_rounds_ratio(&R, "OpenMP vs plain C:", i_omp, i_plain, true);
#endif
  line_rounds_ratio(&R, "cube vs plain C:", i_cube, i_plain, true);
#ifdef _OPENMP
  spread_t vs_omp = line_rounds_ratio(&R, "cube vs OpenMP:", i_cube, i_omp, true);
  if (i_pocl >= 0) line_rounds_ratio(&R, "PoCL vs OpenMP:", i_pocl, i_omp, true);
#endif
  spread_t vs_pocl = {NAN, NAN, NAN, 0};
  if (i_pocl >= 0) vs_pocl = line_rounds_ratio(&R, "cube vs PoCL:", i_cube, i_pocl, true);
  if (i_cl >= 0) {
    line_rounds_ratio(&R, "cube opencl vs cube cpu:", i_cl, i_cube, true);
    if (i_pocl >= 0) line_rounds_ratio(&R, "cube opencl vs PoCL direct:", i_cl, i_pocl, true);
  }
#ifdef _OPENMP
  printf("  target (on the medians of the per-round ratios): cube >= 0.9x the OpenMP loop -> %s",
         verdict(vs_omp, 0.9, true));
#else
  printf("  target: cube >= 0.9x the OpenMP loop -> not measured (no OpenMP)");
#endif
  printf("; cube >= PoCL -> %s\n", i_pocl >= 0 ? verdict(vs_pocl, 1.0, true) : "not measured");
  if (!cube_ok) printf("  cube result was WRONG\n");
  printf("\n");

  cube_handle_release(t.hx);
  cube_handle_release(t.hy);
  if (s.cx) g_ocl.clReleaseMemObject(s.cx);
  if (s.cy) g_ocl.clReleaseMemObject(s.cy);
  ocl_kernel_release(&s.ok);
  cube_handle_release(s.hx);
  cube_handle_release(s.hy);
  cube_kernel_release(s.k);
  free(x);
  free(y0);
  free(s.yw);
  fflush(stdout);
}

//===----------------------------------------------------------------------===//
// 2. Reduction with sync_cube
//===----------------------------------------------------------------------===//

typedef struct reduce_ctx {
  uint64_t n;
  uint32_t cubes;
  const float* x;
  double expect;
  float* partial; /* host copy of the partial sums */
  cube_kernel_t* k;
  cube_handle_t hx, hp;
  ocl_kernel_t ok;
  cl_mem cx, cp;
  uint64_t bad;   /* trials with a wrong sum */
  double worst;   /* the worst sum seen */
} reduce_ctx_t;

static bool sum_ok(double got, double expect) {
  return fabs(got - expect) <= 1e-3 * fabs(expect) + 1e-6;
}

static void reduce_note(reduce_ctx_t* r, double got) {
  if (!sum_ok(got, r->expect)) {
    r->bad++;
    r->worst = got;
  }
}

static double finish(const float* partial, uint32_t cubes) {
  double s = 0;
  for (uint32_t i = 0; i < cubes; ++i) s += partial[i];
  return s;
}

static uint64_t trial_reduce_cube(void* p, uint64_t iters) {
  reduce_ctx_t* r = p;
  cube_arg_t args[2] = {cube_arg_buffer(r->hx), cube_arg_buffer(r->hp)};
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) {
    cube_status_t s =
        cube_client_launch(g_client, r->k, cube_count_static(r->cubes, 1, 1), 2, args);
    if (s) {
      fail_status("cube_client_launch (block_sum)", s);
      continue;
    }
    cube_bytes_t* b = NULL; /* the read waits for the launch */
    s = cube_client_read_one(g_client, r->hp, &b);
    if (s) {
      fail_status("cube_client_read_one (partials)", s);
      continue;
    }
    reduce_note(r, finish(cube_bytes_const_data(b), r->cubes));
    cube_bytes_release(b);
  }
  return now_ns() - t0;
}

static uint64_t trial_reduce_ocl(void* p, uint64_t iters) {
  reduce_ctx_t* r = p;
  size_t global = r->n, local = DIM;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) {
    if (!ocl_run(&r->ok, 1, &global, &local)) continue;
    if (!ocl_read(r->cp, r->cubes * sizeof(float), r->partial)) continue;
    reduce_note(r, finish(r->partial, r->cubes));
  }
  return now_ns() - t0;
}

#ifdef _OPENMP
static float sum_omp_simd(const float* restrict x, uint64_t n) {
  float s = 0.0f;
  int64_t nn = (int64_t)n;
#pragma omp parallel for simd reduction(+ : s) schedule(static)
  for (int64_t i = 0; i < nn; ++i) s += x[i];
  return s;
}

static float sum_omp_scalar(const float* restrict x, uint64_t n) {
  float s = 0.0f;
  int64_t nn = (int64_t)n;
#pragma omp parallel for reduction(+ : s) schedule(static)
  for (int64_t i = 0; i < nn; ++i) s += x[i];
  return s;
}

static uint64_t trial_reduce_omp_simd(void* p, uint64_t iters) {
  reduce_ctx_t* r = p;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) reduce_note(r, sum_omp_simd(r->x, r->n));
  return now_ns() - t0;
}

static uint64_t trial_reduce_omp_scalar(void* p, uint64_t iters) {
  reduce_ctx_t* r = p;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) reduce_note(r, sum_omp_scalar(r->x, r->n));
  return now_ns() - t0;
}
#endif

static void reduce_verdict(reduce_ctx_t* r, const char* who) {
  if (r->bad)
    wrong("sum (%s): %llu trials wrong (e.g. %.6f, expected %.6f)", who,
          (unsigned long long)r->bad, r->worst, r->expect);
  r->bad = 0;
}

static void bench_reduce(void) {
  const uint64_t n = g_quick ? (1u << 20) : (16u << 20);
  const double bytes = 4.0 * (double)n;
  reduce_ctx_t r;
  memset(&r, 0, sizeof(r));
  r.n = n;
  r.cubes = (uint32_t)(n / DIM);
  printf("[2] sum over %lluM floats: cube of 256 units, CUBE_SHARED + sync_cube tree, %u partial "
         "sums finished on the host (timed: launch + read of the partials + host sum)\n",
         (unsigned long long)(n >> 20), r.cubes);
  float* x = xmalloc(n * sizeof(float));
  r.partial = xmalloc(r.cubes * sizeof(float));
  uint64_t seed = 7;
  for (uint64_t i = 0; i < n; ++i) r.expect += x[i] = rnd(&seed);
  r.x = x;
  const int warm = g_quick ? 1 : 2, per = g_quick ? 1 : 3;
  rounds_t R;
  rounds_init(&R, g_rounds, settle);

  /* Each system has its own context: its wrong sums are counted apart. */
  cube_define_t defs[] = {{"BLOCK", "256"}};
  r.k = make_dialect(k_reduce_src, "block_sum", DIM, 1, defs, 1);
  double compile = precompile_ms(r.k);
  r.hx = upload(x, n * sizeof(float));
  TRY("cube_client_empty", cube_client_empty(g_client, r.cubes * sizeof(float), &r.hp));
  on_client_t on_cpu = {g_cpu_client, trial_reduce_cube, &r};
  int i_cube = rounds_add(&R, "cube cpu", trial_on_client, &on_cpu, 1, warm, per);
  /* The return-guard tree on the cpu client, split and as fibers. */
  cube_define_t defs_fib[] = {{"BLOCK", "256"}, {"CUBE_CPU_FIBERS", "1"}};
  reduce_ctx_t r_ret = r, r_retf = r;
  r_ret.k = make_dialect(k_reduce_ret_src, "block_sum_ret", DIM, 1, defs, 1);
  r_retf.k = make_dialect(k_reduce_ret_src, "block_sum_ret", DIM, 1, defs_fib, 2);
  (void)precompile_ms(r_ret.k);
  (void)precompile_ms(r_retf.k);
  on_client_t on_ret = {g_cpu_client, trial_reduce_cube, &r_ret};
  on_client_t on_retf = {g_cpu_client, trial_reduce_cube, &r_retf};
  int i_ret = rounds_add(&R, "cube cpu, return guard, split", trial_on_client, &on_ret, 1, warm,
                         per);
  int i_retf = rounds_add(&R, "cube cpu, return guard, fibers", trial_on_client, &on_retf, 1,
                          warm, per);
  reduce_ctx_t t = r;
  t.hx = t.hp = CUBE_HANDLE_NULL;
  on_client_t on_cl = {g_cl_client, trial_reduce_cube, &t};
  int i_cl = -1;
  if (g_cl_client) {
    g_client = g_cl_client;
    (void)precompile_ms(t.k);
    t.hx = upload(x, n * sizeof(float));
    TRY("cube_client_empty", cube_client_empty(g_client, t.cubes * sizeof(float), &t.hp));
    g_client = g_cpu_client;
    i_cl = rounds_add(&R, "cube opencl", trial_on_client, &on_cl, 1, warm, per);
  }
#ifdef _OPENMP
  reduce_ctx_t r_omp = r, r_omps = r;
  int i_omp = rounds_add(&R, "OpenMP simd", trial_reduce_omp_simd, &r_omp, 1, warm, per);
  int i_omps = rounds_add(&R, "OpenMP", trial_reduce_omp_scalar, &r_omps, 1, warm, per);
#endif
  reduce_ctx_t r_pocl = r;
  int i_pocl = -1;
  if (ocl_build(k_reduce_src, "block_sum", defs, 1, &r_pocl.ok)) {
    r_pocl.cx = ocl_buffer(CL_MEM_READ_ONLY, n * sizeof(float), x);
    r_pocl.cp = ocl_buffer(CL_MEM_READ_WRITE, r.cubes * sizeof(float), NULL);
    ocl_arg_t args[2] = {ocl_buf(r_pocl.cx, n * sizeof(float)),
                         ocl_buf(r_pocl.cp, r.cubes * sizeof(float))};
    if (r_pocl.cx && r_pocl.cp && ocl_set_args(&r_pocl.ok, 2, args))
      i_pocl = rounds_add(&R, "PoCL", trial_reduce_ocl, &r_pocl, 1, 1, per);
  }

  rounds_run(&R);
  reduce_verdict(&r, "cube");
  reduce_verdict(&r_ret, "cube, return guard, split");
  reduce_verdict(&r_retf, "cube, return guard, fibers");
  if (i_cl >= 0) reduce_verdict(&t, "cube opencl");
#ifdef _OPENMP
  reduce_verdict(&r_omp, "OpenMP simd");
  reduce_verdict(&r_omps, "OpenMP");
#endif
  if (i_pocl >= 0) reduce_verdict(&r_pocl, "PoCL");

  print_rounds_header(&R, per);
  printf("  host sum (double): %.6f\n", r.expect);
  printf("  cube compile of the dialect kernel (precompile, cold): %.1f ms\n", compile);
  if (r_pocl.ok.ok) printf("  PoCL build of the same source: %.1f ms\n", r_pocl.ok.build_ms);
#ifdef _OPENMP
  line_fig_rate(&R, i_omp, "OpenMP parallel for simd reduction(+):", bytes, "GB/s");
  line_fig_rate(&R, i_omps, "OpenMP parallel for reduction(+) (no simd):", bytes, "GB/s");
#endif
  line_fig_rate(&R, i_cube, "cube dialect kernel (sync_cube), launch + read:", bytes, "GB/s");
  line_fig_rate(&R, i_ret, "same behind `if (i >= n) return;`, split:", bytes, "GB/s");
  line_fig_rate(&R, i_retf, "same behind `if (i >= n) return;`, fibers:", bytes, "GB/s");
  line_rounds_ratio(&R, "return guard: split vs fibers:", i_ret, i_retf, true);
  line_rounds_ratio(&R, "return guard split vs plain tree:", i_ret, i_cube, true);
  if (i_pocl >= 0)
    line_fig_rate(&R, i_pocl, "PoCL, same source (enqueue + clFinish + read):", bytes, "GB/s");
  else if (!g_ocl.ok)
    ocl_not_available();
  if (i_cl >= 0) line_fig_rate(&R, i_cl, "cube opencl backend, launch + read:", bytes, "GB/s");
  else line_cl_absent("cube opencl backend, launch + read:");
#ifdef _OPENMP
  line_rounds_ratio(&R, "OpenMP (no simd) vs OpenMP simd:", i_omps, i_omp, true);
  line_rounds_ratio(&R, "cube vs OpenMP simd:", i_cube, i_omp, true);
  if (i_pocl >= 0) line_rounds_ratio(&R, "PoCL vs OpenMP simd:", i_pocl, i_omp, true);
#endif
  if (i_cl >= 0) {
    line_rounds_ratio(&R, "cube opencl vs cube cpu:", i_cl, i_cube, true);
    if (i_pocl >= 0) line_rounds_ratio(&R, "cube opencl vs PoCL direct:", i_cl, i_pocl, true);
  }
  if (i_pocl >= 0) {
    spread_t vs = line_rounds_ratio(&R, "cube vs PoCL:", i_cube, i_pocl, true);
    printf("  target (on the median of the per-round ratios): cube no slower than PoCL -> %s; "
           "issue 16: cube >= 1.2x PoCL -> %s\n", verdict(vs, 1.0, true), verdict(vs, 1.2, true));
  } else {
    spread_t f = rounds_figure(&R, i_cube);
    printf("  target: cube no slower than PoCL (docs/benchmarks.md: 109 ms) -> PoCL not measured; "
           "cube %.1f ms\n", f.median / 1e3);
  }
  printf("\n");

  if (r_pocl.cx) g_ocl.clReleaseMemObject(r_pocl.cx);
  if (r_pocl.cp) g_ocl.clReleaseMemObject(r_pocl.cp);
  ocl_kernel_release(&r_pocl.ok);
  cube_handle_release(t.hx);
  cube_handle_release(t.hp);
  cube_handle_release(r.hx);
  cube_handle_release(r.hp);
  cube_kernel_release(r.k);
  cube_kernel_release(r_ret.k);
  cube_kernel_release(r_retf.k);
  free(x);
  free(r.partial);
  fflush(stdout);
}

//===----------------------------------------------------------------------===//
// 3. matmul
//===----------------------------------------------------------------------===//

#define MM 512u
#define TILE 16u

typedef struct mm_ctx {
  const float* a;
  const float* b;
  float* c; /* host result for the C loops and read-backs */
  const double* ref;
  const double* mag;
  cube_kernel_t* k;
  cube_handle_t ha, hb, hc;
  ocl_kernel_t ok;
  cl_mem ca, cb, cc;
} mm_ctx_t;

/* Rows [i0, i1) of the naive i-j-k product. Both the 1-thread loop and the
 * OpenMP one call this (the OpenMP outlined region would otherwise drop the
 * restrict qualifiers and compile a different, slower inner loop). */
__attribute__((noinline)) static void mm_rows_ijk(const float* restrict a,
                                                  const float* restrict b, float* restrict c,
                                                  uint32_t i0, uint32_t i1) {
  for (uint32_t i = i0; i < i1; ++i)
    for (uint32_t j = 0; j < MM; ++j) {
      float acc = 0.0f;
      for (uint32_t q = 0; q < MM; ++q) acc += a[i * MM + q] * b[q * MM + j];
      c[i * MM + j] = acc;
    }
}

static void mm_naive(const float* restrict a, const float* restrict b, float* restrict c) {
  mm_rows_ijk(a, b, c, 0, MM);
}

#ifdef _OPENMP
static void mm_omp(const float* restrict a, const float* restrict b, float* restrict c) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < (int)MM; ++i) mm_rows_ijk(a, b, c, (uint32_t)i, (uint32_t)i + 1);
}

/* The same loop nest in i-k-j order (the inner loop runs along rows of b and
 * c and vectorises): what a C programmer would write. */
__attribute__((noinline)) static void mm_rows_ikj(const float* restrict a,
                                                  const float* restrict b, float* restrict c,
                                                  uint32_t i) {
  float* restrict ci = c + i * MM;
  for (uint32_t j = 0; j < MM; ++j) ci[j] = 0.0f;
  for (uint32_t q = 0; q < MM; ++q) {
    float aiq = a[i * MM + q];
    const float* restrict bq = b + q * MM;
    for (uint32_t j = 0; j < MM; ++j) ci[j] += aiq * bq[j];
  }
}

static void mm_omp_ikj(const float* restrict a, const float* restrict b, float* restrict c) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < (int)MM; ++i) mm_rows_ikj(a, b, c, (uint32_t)i);
}
#endif

static bool mm_check(const char* who, const mm_ctx_t* m, const float* c) {
  double worst = 0;
  uint64_t at = 0;
  for (uint64_t i = 0; i < (uint64_t)MM * MM; ++i) {
    double rel = fabs((double)c[i] - m->ref[i]) / (m->mag[i] > 0 ? m->mag[i] : 1.0);
    if (!(rel <= worst)) worst = rel, at = i;
  }
  if (!(worst < 1e-4)) {
    wrong("matmul (%s): max relative error %.3e at (%llu, %llu): %.9g, expected %.9g", who, worst,
          (unsigned long long)(at / MM), (unsigned long long)(at % MM), (double)c[at], m->ref[at]);
    return false;
  }
  return true;
}

typedef void (*mm_fn)(const float* restrict, const float* restrict, float* restrict);
typedef struct mm_host_ctx {
  mm_ctx_t* m;
  mm_fn fn;
  float* c; /* this loop's own result, checked after the rounds */
} mm_host_ctx_t;

static uint64_t trial_mm_host(void* p, uint64_t iters) {
  mm_host_ctx_t* h = p;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) h->fn(h->m->a, h->m->b, h->c);
  uint64_t t1 = now_ns();
  g_sink = h->c[7];
  return t1 - t0;
}

static uint64_t trial_mm_cube(void* p, uint64_t iters) {
  mm_ctx_t* m = p;
  cube_arg_t args[6] = {cube_arg_buffer(m->ha), cube_arg_buffer(m->hb), cube_arg_buffer(m->hc),
                        cube_arg_u32(MM), cube_arg_u32(MM), cube_arg_u32(MM)};
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) {
    TRY("cube_client_launch (matmul)",
        cube_client_launch(g_client, m->k, cube_count_static(MM / TILE, MM / TILE, 1), 6, args));
    TRY("cube_client_sync (matmul)", cube_client_sync(g_client));
  }
  return now_ns() - t0;
}

static uint64_t trial_mm_ocl(void* p, uint64_t iters) {
  mm_ctx_t* m = p;
  size_t global[2] = {MM, MM}, local[2] = {TILE, TILE};
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) (void)ocl_run(&m->ok, 2, global, local);
  return now_ns() - t0;
}

static void bench_matmul(void) {
  const double flops = 2.0 * MM * MM * MM;
  const size_t bytes = (size_t)MM * MM * sizeof(float);
  printf("[3] matmul C = A*B, %ux%ux%u floats (2*M*N*K flops), tiled dialect kernel TILE %u "
         "(cube_dim 16x16, %ux%u cubes)\n",
         MM, MM, MM, TILE, MM / TILE, MM / TILE);
  mm_ctx_t m;
  memset(&m, 0, sizeof(m));
  float* a = xmalloc(bytes);
  float* b = xmalloc(bytes);
  m.c = xmalloc(bytes);
  double* ref = xmalloc((size_t)MM * MM * sizeof(double));
  double* mag = xmalloc((size_t)MM * MM * sizeof(double));
  uint64_t seed = 3;
  for (uint32_t i = 0; i < MM * MM; ++i) a[i] = rnd(&seed);
  for (uint32_t i = 0; i < MM * MM; ++i) b[i] = rnd(&seed);
  memset(ref, 0, (size_t)MM * MM * sizeof(double));
  memset(mag, 0, (size_t)MM * MM * sizeof(double));
  for (uint32_t i = 0; i < MM; ++i)
    for (uint32_t q = 0; q < MM; ++q) {
      double aiq = a[i * MM + q];
      for (uint32_t j = 0; j < MM; ++j) {
        double t = aiq * b[q * MM + j];
        ref[i * MM + j] += t;
        mag[i * MM + j] += fabs(t);
      }
    }
  m.a = a;
  m.b = b;
  m.ref = ref;
  m.mag = mag;

  const int per = g_quick ? 1 : 3;
  rounds_t R;
  rounds_init(&R, g_rounds, settle);
  cube_define_t defs[] = {{"TILE", "16"}};
  m.k = make_dialect(k_matmul_src, "matmul", TILE, TILE, defs, 1);
  double compile = precompile_ms(m.k);
  m.ha = upload(a, bytes);
  m.hb = upload(b, bytes);
  TRY("cube_client_empty", cube_client_empty(g_client, bytes, &m.hc));
  on_client_t on_cpu = {g_cpu_client, trial_mm_cube, &m};
  int i_cube = rounds_add(&R, "cube cpu", trial_on_client, &on_cpu, 1, 1, per);
  mm_ctx_t t = m;
  t.ha = t.hb = t.hc = CUBE_HANDLE_NULL;
  on_client_t on_cl = {g_cl_client, trial_mm_cube, &t};
  int i_cl = -1;
  if (g_cl_client) {
    g_client = g_cl_client;
    (void)precompile_ms(t.k);
    t.ha = upload(a, bytes);
    t.hb = upload(b, bytes);
    TRY("cube_client_empty", cube_client_empty(g_client, bytes, &t.hc));
    g_client = g_cpu_client;
    i_cl = rounds_add(&R, "cube opencl", trial_on_client, &on_cl, 1, 1, per);
  }
  /* The 1-thread loop is slow: one trial per round. */
  mm_host_ctx_t h_naive = {&m, mm_naive, xmalloc(bytes)};
  int i_naive = rounds_add(&R, "naive", trial_mm_host, &h_naive, 1, g_quick ? 0 : 1, 1);
#ifdef _OPENMP
  mm_host_ctx_t h_omp = {&m, mm_omp, xmalloc(bytes)}, h_ikj = {&m, mm_omp_ikj, xmalloc(bytes)};
  int i_omp = rounds_add(&R, "OpenMP i-j-k", trial_mm_host, &h_omp, 1, 1, per);
  int i_ikj = rounds_add(&R, "OpenMP i-k-j", trial_mm_host, &h_ikj, 1, g_quick ? 1 : 2, per);
#endif
  int i_pocl = -1;
  if (ocl_build(k_matmul_src, "matmul", defs, 1, &m.ok)) {
    m.ca = ocl_buffer(CL_MEM_READ_ONLY, bytes, a);
    m.cb = ocl_buffer(CL_MEM_READ_ONLY, bytes, b);
    m.cc = ocl_buffer(CL_MEM_READ_WRITE, bytes, NULL);
    ocl_arg_t args[6] = {ocl_buf(m.ca, bytes), ocl_buf(m.cb, bytes), ocl_buf(m.cc, bytes),
                         ocl_scalar(cube_arg_u32(MM)), ocl_scalar(cube_arg_u32(MM)),
                         ocl_scalar(cube_arg_u32(MM))};
    if (m.ca && m.cb && m.cc && ocl_set_args(&m.ok, 6, args))
      i_pocl = rounds_add(&R, "PoCL", trial_mm_ocl, &m, 1, 1, per);
  }

  rounds_run(&R);
  /* Every result, checked after the rounds (each system wrote its own C). A
   * wrong one makes its figures NaN ("no valid round"). */
  if (!download(m.hc, m.c, bytes) || !mm_check("cube", &m, m.c))
    for (int i = 0; i < R.n_rounds; ++i) R.sys[i_cube].us[i] = NAN;
  if (i_cl >= 0) {
    memset(m.c, 0, bytes);
    g_client = g_cl_client;
    bool fine = download(t.hc, m.c, bytes) && mm_check("cube opencl", &t, m.c);
    g_client = g_cpu_client;
    if (!fine)
      for (int i = 0; i < R.n_rounds; ++i) R.sys[i_cl].us[i] = NAN;
  }
  if (!mm_check("naive C loop", &m, h_naive.c))
    for (int i = 0; i < R.n_rounds; ++i) R.sys[i_naive].us[i] = NAN;
#ifdef _OPENMP
  if (!mm_check("OpenMP i-parallel loop", &m, h_omp.c))
    for (int i = 0; i < R.n_rounds; ++i) R.sys[i_omp].us[i] = NAN;
  if (!mm_check("OpenMP i-k-j loop", &m, h_ikj.c))
    for (int i = 0; i < R.n_rounds; ++i) R.sys[i_ikj].us[i] = NAN;
#endif
  if (i_pocl >= 0) {
    memset(m.c, 0, bytes);
    if (!ocl_read(m.cc, bytes, m.c) || !mm_check("PoCL", &m, m.c))
      for (int i = 0; i < R.n_rounds; ++i) R.sys[i_pocl].us[i] = NAN;
  }

  print_rounds_header(&R, per);
  printf("  (the 1-thread naive loop: 1 trial per round)\n");
  printf("  cube compile of the dialect kernel (precompile, cold): %.1f ms\n", compile);
  if (m.ok.ok) printf("  PoCL build of the same source: %.1f ms\n", m.ok.build_ms);
  line_fig_rate(&R, i_naive, "naive C triple loop i-j-k (1 thread):", flops, "GFLOP/s");
#ifdef _OPENMP
  line_fig_rate(&R, i_omp, "OpenMP i-parallel loop (same i-j-k nest):", flops, "GFLOP/s");
  line_fig_rate(&R, i_ikj, "OpenMP i-parallel loop, i-k-j order (vectorised):", flops,
                "GFLOP/s");
#endif
  line_fig_rate(&R, i_cube, "cube dialect kernel, launch + sync:", flops, "GFLOP/s");
  if (i_pocl >= 0)
    line_fig_rate(&R, i_pocl, "PoCL, same source (enqueue + clFinish):", flops, "GFLOP/s");
  else if (!g_ocl.ok)
    ocl_not_available();
  if (i_cl >= 0) line_fig_rate(&R, i_cl, "cube opencl backend, launch + sync:", flops, "GFLOP/s");
  else line_cl_absent("cube opencl backend, launch + sync:");
  line_rounds_ratio(&R, "cube vs naive:", i_cube, i_naive, true);
#ifdef _OPENMP
  line_rounds_ratio(&R, "cube vs OpenMP i-parallel (i-j-k):", i_cube, i_omp, true);
  line_rounds_ratio(&R, "cube vs OpenMP i-k-j:", i_cube, i_ikj, true);
#endif
  if (i_cl >= 0) {
    line_rounds_ratio(&R, "cube opencl vs cube cpu:", i_cl, i_cube, true);
    if (i_pocl >= 0) line_rounds_ratio(&R, "cube opencl vs PoCL direct:", i_cl, i_pocl, true);
  }
  if (i_pocl >= 0) {
    spread_t vs = line_rounds_ratio(&R, "cube vs PoCL:", i_cube, i_pocl, true);
    printf("  target (issue 16, on the median of the per-round ratios): cube >= 1.5x PoCL -> %s\n",
           verdict(vs, 1.5, true));
  }
  printf("\n");

  if (m.ca) g_ocl.clReleaseMemObject(m.ca);
  if (m.cb) g_ocl.clReleaseMemObject(m.cb);
  if (m.cc) g_ocl.clReleaseMemObject(m.cc);
  ocl_kernel_release(&m.ok);
  cube_handle_release(t.ha);
  cube_handle_release(t.hb);
  cube_handle_release(t.hc);
  cube_handle_release(m.ha);
  cube_handle_release(m.hb);
  cube_handle_release(m.hc);
  cube_kernel_release(m.k);
  free(h_naive.c);
#ifdef _OPENMP
  free(h_omp.c);
  free(h_ikj.c);
#endif
  free(a);
  free(b);
  free(m.c);
  free(ref);
  free(mag);
  fflush(stdout);
}

//===----------------------------------------------------------------------===//
// 4. Kernel cache: cold compile, disk hit (child process), memory hit
//===----------------------------------------------------------------------===//

/* Kernels of the cache bench: the saxpy source with a define that changes
 * the unit (so the key) and nothing else. */
#define CACHE_SALTS 5

typedef struct cache_child_result {
  int ok;
  char error[400];
  uint64_t ns[CACHE_SALTS]; /* precompile of each salt */
  uint64_t disk_hits, misses, memory_hits, load_ns;
} cache_child_result_t;

typedef struct cache_child {
  pid_t pid;
  int go_fd;     /* parent writes one byte: the disk entries are there */
  int result_fd; /* child writes a cache_child_result_t */
} cache_child_t;

static cache_child_t g_child = {-1, -1, -1};

static void salt_define(int salt, char* value, size_t size, cube_define_t* def) {
  snprintf(value, size, "%d", salt);
  def->name = "CUBE_BENCH_CACHE_PROBE";
  def->value = value;
}

static bool write_full(int fd, const void* p, size_t n) {
  const char* c = p;
  while (n) {
    ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= (size_t)w;
  }
  return true;
}

static bool read_full(int fd, void* p, size_t n) {
  char* c = p;
  while (n) {
    ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= (size_t)r;
  }
  return true;
}

/* The child: a fresh process (forked before any cube call, so no runtime
 * state is inherited) that waits for the parent's cold compiles, then loads
 * the same kernels from the disk cache. */
static void cache_child_main(int go_fd, int result_fd) {
  char go;
  if (!read_full(go_fd, &go, 1)) _exit(0); /* the parent went away */
  cache_child_result_t r;
  memset(&r, 0, sizeof(r));
  cube_client_t* c = NULL;
  cube_status_t s = cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &c);
  if (s) {
    snprintf(r.error, sizeof(r.error), "cube_client_load: %s", cube_status_message(s));
    cube_status_free(s);
  } else {
    r.ok = 1;
    for (int i = 0; i < CACHE_SALTS && r.ok; ++i) {
      char v[16];
      cube_define_t def;
      salt_define(i, v, sizeof(v), &def);
      cube_kernel_desc_t d;
      memset(&d, 0, sizeof(d));
      d.cube_dim = (cube_dim_t){DIM, 1, 1};
      d.source = k_saxpy_src;
      d.entry = "saxpy";
      d.defines = &def;
      d.define_count = 1;
      cube_kernel_t* k = NULL;
      s = cube_kernel_create(&d, &k);
      if (!s) {
        uint64_t t0 = now_ns();
        s = cube_client_precompile(c, 1, &k, CUBE_EXEC_CHECKED);
        r.ns[i] = now_ns() - t0;
        cube_kernel_release(k);
      }
      if (s) {
        snprintf(r.error, sizeof(r.error), "salt %d: %s", i, cube_status_message(s));
        cube_status_free(s);
        r.ok = 0;
      }
    }
    cube_kernel_cache_stats_t st = {0};
    s = cube_kernel_cache_stats(&st);
    if (!s) {
      r.disk_hits = st.disk_hits;
      r.misses = st.misses;
      r.memory_hits = st.memory_hits;
      r.load_ns = st.load_ns;
    } else {
      cube_status_free(s);
    }
    cube_client_release(c);
  }
  (void)write_full(result_fd, &r, sizeof(r));
  _exit(0);
}

static void cache_child_start(void) {
  int go[2], res[2];
  if (pipe(go) != 0 || pipe(res) != 0) {
    perror("bench_dialect: pipe");
    return;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    perror("bench_dialect: fork");
    close(go[0]), close(go[1]), close(res[0]), close(res[1]);
    return;
  }
  if (pid == 0) {
    close(go[1]);
    close(res[0]);
    cache_child_main(go[0], res[1]);
    _exit(0);
  }
  close(go[0]);
  close(res[1]);
  g_child.pid = pid;
  g_child.go_fd = go[1];
  g_child.result_fd = res[0];
}

static void cache_child_stop(void) {
  if (g_child.go_fd >= 0) close(g_child.go_fd);
  if (g_child.result_fd >= 0) close(g_child.result_fd);
  g_child.go_fd = g_child.result_fd = -1;
  if (g_child.pid > 0) {
    int ws;
    while (waitpid(g_child.pid, &ws, 0) < 0 && errno == EINTR) {
    }
    g_child.pid = -1;
  }
}

static double median_u64_ms(uint64_t* v, int n) {
  qsort(v, (size_t)n, sizeof(uint64_t), cmp_u64);
  return (n % 2 ? (double)v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + (double)v[n / 2])) / 1e6;
}

static void bench_cache(void) {
  printf("[4] kernel cache: cold compile vs disk hit vs memory hit (saxpy source + a distinct "
         "define per kernel, Checked mode; CUBE_CACHE_DIR=%s)\n",
         cube_kernel_cache_dir());
  cube_kernel_cache_stats_t st0 = {0}, st1 = {0}, st2 = {0};
  TRY("cube_kernel_cache_stats", cube_kernel_cache_stats(&st0));

  /* Cold: the first precompile of each key (none is on disk: the cache
   * directory is fresh). */
  uint64_t cold[CACHE_SALTS];
  char vals[CACHE_SALTS][16];
  cube_define_t defs[CACHE_SALTS];
  for (int i = 0; i < CACHE_SALTS; ++i) {
    salt_define(i, vals[i], sizeof(vals[i]), &defs[i]);
    cube_kernel_t* k = make_dialect(k_saxpy_src, "saxpy", DIM, 1, &defs[i], 1);
    uint64_t t0 = now_ns();
    cube_status_t s = cube_client_precompile(g_client, 1, &k, CUBE_EXEC_CHECKED);
    cold[i] = now_ns() - t0;
    if (s) fail_status("cube_client_precompile (cold)", s);
    cube_kernel_release(k);
  }
  TRY("cube_kernel_cache_stats", cube_kernel_cache_stats(&st1));

  /* Memory hit: a different kernel object with the same source and define. */
  enum { MEM_TRIALS = 201 };
  uint64_t mem[MEM_TRIALS];
  for (int i = 0; i < MEM_TRIALS; ++i) {
    cube_kernel_t* k = make_dialect(k_saxpy_src, "saxpy", DIM, 1, &defs[i % CACHE_SALTS], 1);
    uint64_t t0 = now_ns();
    cube_status_t s = cube_client_precompile(g_client, 1, &k, CUBE_EXEC_CHECKED);
    mem[i] = now_ns() - t0;
    if (s) fail_status("cube_client_precompile (memory hit)", s);
    cube_kernel_release(k);
  }
  TRY("cube_kernel_cache_stats", cube_kernel_cache_stats(&st2));

  /* Disk hit: the child process loads the same keys. */
  cache_child_result_t r;
  memset(&r, 0, sizeof(r));
  bool have_child = false;
  if (g_child.pid > 0) {
    char go = 'g';
    if (write_full(g_child.go_fd, &go, 1) && read_full(g_child.result_fd, &r, sizeof(r)))
      have_child = true;
    cache_child_stop();
  }

  uint64_t cold_first = cold[0];
  double cold_ms = median_u64_ms(cold, CACHE_SALTS);
  double mem_ms = median_u64_ms(mem, MEM_TRIALS);
  printf("%-*s median %9.3f ms (min %9.3f, first %9.3f) over %d kernels\n", LABEL_W,
         "cold compile (precompile, empty cache):", cold_ms, (double)cold[0] / 1e6,
         (double)cold_first / 1e6, CACHE_SALTS);
  printf("  counters: misses +%llu, compile time %.1f ms in all, disk entries %llu (%llu bytes)\n",
         (unsigned long long)(st1.misses - st0.misses),
         (double)(st1.compile_ns - st0.compile_ns) / 1e6, (unsigned long long)st1.disk_entries,
         (unsigned long long)st1.disk_bytes);
  if (st1.misses - st0.misses != CACHE_SALTS) {
    wrong("cold compiles: %llu cache misses counted, expected %d",
          (unsigned long long)(st1.misses - st0.misses), CACHE_SALTS);
  }
  if (have_child && r.ok) {
    uint64_t first = r.ns[0];
    double disk_ms = median_u64_ms(r.ns, CACHE_SALTS);
    printf("%-*s median %9.3f ms (min %9.3f, first %9.3f) over %d kernels, ratio vs cold %.4f\n",
           LABEL_W, "disk hit (precompile in a fresh child process):", disk_ms,
           (double)r.ns[0] / 1e6, (double)first / 1e6, CACHE_SALTS, disk_ms / cold_ms);
    printf("  child counters: disk hits %llu, misses %llu, memory hits %llu, load time %.3f ms "
           "in all (the first includes the process's one-time setup)\n",
           (unsigned long long)r.disk_hits, (unsigned long long)r.misses,
           (unsigned long long)r.memory_hits, (double)r.load_ns / 1e6);
    if (r.disk_hits != CACHE_SALTS || r.misses != 0)
      wrong("disk hits: the child counted %llu disk hits and %llu misses, expected %d and 0",
            (unsigned long long)r.disk_hits, (unsigned long long)r.misses, CACHE_SALTS);
    printf("  target: disk hit / cold <= 0.01 -> %s\n",
           disk_ms / cold_ms <= 0.01 ? "met" : "NOT met");
  } else {
    printf("%-*s not measured (%s)\n", LABEL_W, "disk hit (child process):",
           have_child ? r.error : "the child process could not be started or did not answer");
    g_failures++;
  }
  qsort(mem, MEM_TRIALS, sizeof(uint64_t), cmp_u64);
  printf("%-*s median %9.3f ms (min %9.3f) over %d kernel objects, ratio vs cold %.6f\n",
         LABEL_W, "memory hit (new kernel object, same source):", mem_ms, (double)mem[0] / 1e6,
         MEM_TRIALS, mem_ms / cold_ms);
  printf("  counters: memory hits +%llu\n",
         (unsigned long long)(st2.memory_hits - st1.memory_hits));
  if (st2.memory_hits - st1.memory_hits != MEM_TRIALS || st2.misses != st1.misses)
    wrong("memory hits: %llu counted (and %llu misses), expected %d",
          (unsigned long long)(st2.memory_hits - st1.memory_hits),
          (unsigned long long)(st2.misses - st1.misses), MEM_TRIALS);
  printf("  target (memory): hit / cold <= 0.01 -> %s\n\n",
         mem_ms / cold_ms <= 0.01 ? "met" : "NOT met");
  fflush(stdout);
}

//===----------------------------------------------------------------------===//
// 5. Empty launch + sync
//===----------------------------------------------------------------------===//

static int k_native_empty(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube;
  (void)args;
  (void)n;
  return 0;
}

/* An empty-launch trial times each of its launches alone and returns the
 * median launch times |iters| (so the round's per-operation figure is the
 * median single launch + sync, not a mean that one preemption can move). */
typedef struct empty_ctx {
  cube_kernel_t* k;    /* cube systems (on g_client) */
  ocl_kernel_t* ocl;   /* PoCL direct */
  double t[4096];
} empty_ctx_t;

static uint64_t empty_median_times(empty_ctx_t* e, uint64_t iters) {
  qsort(e->t, (size_t)iters, sizeof(double), cmp_double);
  return (uint64_t)(median_sorted(e->t, (int)iters) * (double)iters);
}

static uint64_t trial_empty_cube(void* p, uint64_t iters) {
  empty_ctx_t* e = p;
  cube_arg_t arg = cube_arg_u32(0);
  cube_count_t one = cube_count_static(1, 1, 1);
  if (iters > 4096) iters = 4096;
  for (uint64_t i = 0; i < iters; ++i) {
    uint64_t t0 = now_ns();
    cube_status_t s = cube_client_launch(g_client, e->k, one, 1, &arg);
    if (!s) s = cube_client_sync(g_client);
    uint64_t t1 = now_ns();
    if (s) {
      fail_status("launch + sync (empty)", s);
      return 0;
    }
    e->t[i] = (double)(t1 - t0);
  }
  return empty_median_times(e, iters);
}

static uint64_t trial_empty_ocl(void* p, uint64_t iters) {
  empty_ctx_t* e = p;
  size_t one = 1;
  if (iters > 4096) iters = 4096;
  for (uint64_t i = 0; i < iters; ++i) {
    uint64_t t0 = now_ns();
    bool fine = ocl_run(e->ocl, 1, &one, &one);
    uint64_t t1 = now_ns();
    if (!fine) return 0;
    e->t[i] = (double)(t1 - t0);
  }
  return empty_median_times(e, iters);
}

static void line_fig_time(const rounds_t* r, int i, const char* name) {
  spread_t f = rounds_figure(r, i);
  if (!f.n_valid) printf("%-*s no valid round\n", LABEL_W, name);
  else
    printf("%-*s median %8.2f us (min %8.2f, max %8.2f)\n", LABEL_W, name, f.median, f.min,
           f.max);
}

static void bench_empty(void) {
  const uint64_t per_trial = g_quick ? 200 : 2000;
  const int per = g_quick ? 1 : 3;
  printf("[5] empty launch + sync, 1 cube of 1 unit, threaded queue (each launch timed alone; a "
         "trial's figure is the median of its %llu launches)\n", (unsigned long long)per_trial);
  rounds_t R;
  rounds_init(&R, g_rounds, settle);
  empty_ctx_t* dia = xmalloc(sizeof(empty_ctx_t));
  empty_ctx_t* nat = xmalloc(sizeof(empty_ctx_t));
  empty_ctx_t* cl = xmalloc(sizeof(empty_ctx_t));
  empty_ctx_t* pocl = xmalloc(sizeof(empty_ctx_t));
  cube_kernel_t* k = make_dialect(k_empty_src, "empty", 1, 1, NULL, 0);
  (void)precompile_ms(k);
  dia->k = k;
  on_client_t on_dia = {g_cpu_client, trial_empty_cube, dia};
  int i_dia = rounds_add(&R, "cube dialect", trial_on_client, &on_dia, per_trial, 1, per);
  static const cube_arg_kind_t kinds[1] = {CUBE_ARG_U32};
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = "native_empty";
  d.cube_dim = (cube_dim_t){1, 1, 1};
  d.arg_kinds = kinds;
  d.arg_count = 1;
  d.cpu_fn = k_native_empty;
  cube_kernel_t* kn = NULL;
  TRY("cube_kernel_create (native)", cube_kernel_create(&d, &kn));
  nat->k = kn;
  on_client_t on_nat = {g_cpu_client, trial_empty_cube, nat};
  int i_nat = kn ? rounds_add(&R, "cube native", trial_on_client, &on_nat, per_trial, 1, per) : -1;
  int i_cl = -1;
  on_client_t on_cl = {g_cl_client, trial_empty_cube, cl};
  if (g_cl_client) {
    g_client = g_cl_client;
    (void)precompile_ms(k);
    g_client = g_cpu_client;
    cl->k = k;
    i_cl = rounds_add(&R, "cube opencl", trial_on_client, &on_cl, per_trial, 1, per);
  }
  int i_pocl = -1;
  ocl_kernel_t ok;
  if (ocl_build(k_empty_src, "empty", NULL, 0, &ok)) {
    ocl_arg_t arg = ocl_scalar(cube_arg_u32(0));
    pocl->ocl = &ok;
    if (ocl_set_args(&ok, 1, &arg))
      i_pocl = rounds_add(&R, "PoCL", trial_empty_ocl, pocl, per_trial, 1, per);
  }

  rounds_run(&R);
  print_rounds_header(&R, per);
  line_fig_time(&R, i_dia, "cube dialect kernel, launch + sync:");
  if (i_nat >= 0) line_fig_time(&R, i_nat, "cube native kernel, launch + sync:");
  if (i_pocl >= 0) line_fig_time(&R, i_pocl, "PoCL, same source (enqueue + clFinish):");
  else if (!g_ocl.ok) ocl_not_available();
  if (i_cl >= 0) line_fig_time(&R, i_cl, "cube opencl backend, launch + sync:");
  else line_cl_absent("cube opencl backend:");
  if (i_nat >= 0) line_rounds_ratio(&R, "cube native vs cube dialect:", i_nat, i_dia, false);
  if (i_pocl >= 0) line_rounds_ratio(&R, "PoCL vs cube dialect:", i_pocl, i_dia, false);
  if (i_cl >= 0) line_rounds_ratio(&R, "cube opencl vs cube dialect (cpu):", i_cl, i_dia, false);
  if (i_cl >= 0 && i_pocl >= 0)
    line_rounds_ratio(&R, "cube opencl vs PoCL direct:", i_cl, i_pocl, false);
  spread_t f = rounds_figure(&R, i_dia);
  if (f.n_valid)
    printf("  target: empty launch + sync <= 10 us (median of the round figures) -> %s\n\n",
           f.median <= 10.0 ? "met" : "NOT met");
  ocl_kernel_release(&ok);
  cube_kernel_release(k);
  cube_kernel_release(kn);
  free(dia);
  free(nat);
  free(cl);
  free(pocl);
  fflush(stdout);
}

//===----------------------------------------------------------------------===//
// 8. OpenCL: small writes, and launches that alternate between two streams
//===----------------------------------------------------------------------===//

/* What the OpenCL backend waits for besides the work itself: 16 writes of
 * 4 KiB then a sync (a write that blocks waits for PoCL's thread each time),
 * 16 writes of 4 MiB then a sync (cube_client_write: the server copies the
 * caller's source once, on the calling thread, and the runner queues the
 * write from that copy), and 16 empty launches alternating between two
 * streams (two queues) then a sync of both (ordering every command after the
 * other queue's last one serialises the switch). PoCL direct does the same
 * with non-blocking clEnqueueWriteBuffer on one queue from sources it keeps
 * (for 4 MiB also with each source first copied, as cube_client_write does),
 * and with two queues and no ordering between them. Last, 16 uploads of
 * 4 MiB on one stream then 16 empty launches on another, timed to the second
 * stream's sync: whether large writes hold the runner (and so the other
 * stream) back. A trial's figure is one
 * batch of 16, in microseconds. */
enum { OCLS_BATCH = 16, OCLS_BYTES = 4096, OCLS_BIG = 4 << 20 };

typedef struct ocls_ctx {
  cube_client_t* b;   /* a clone of the opencl client on a second stream */
  cube_handle_t h[OCLS_BATCH];
  cube_kernel_t* k;
  ocl_kernel_t* ocl;
  cl_command_queue q2;
  cl_mem m[OCLS_BATCH];
  unsigned char src[OCLS_BATCH][OCLS_BYTES];
  unsigned char* srcp[OCLS_BATCH]; /* src[i] */
  cube_handle_t hb[OCLS_BATCH]; /* OCLS_BIG bytes each */
  cl_mem mb[OCLS_BATCH];
  unsigned char* big[OCLS_BATCH];
  unsigned char* copy[OCLS_BATCH]; /* PoCL with cube's copy: the source copied first */
} ocls_ctx_t;

/* A batch of cube_client_write calls of |bytes| each (sources |src|) and a
 * sync, |iters| times; 0 after a failure (counted). */
static uint64_t ocls_cube_writes(const cube_handle_t* h, unsigned char* const* src, size_t bytes,
                                 uint64_t iters, const char* what) {
  uint64_t t0 = now_ns();
  for (uint64_t it = 0; it < iters; ++it) {
    cube_status_t s = CUBE_OK;
    for (int i = 0; i < OCLS_BATCH && !s; ++i)
      s = cube_client_write(g_cl_client, h[i], src[i], bytes);
    if (!s) s = cube_client_sync(g_cl_client);
    if (s) {
      fail_status(what, s);
      return 0;
    }
  }
  return now_ns() - t0;
}

/* The same through PoCL directly: non-blocking writes on one queue and a
 * clFinish; with |copy|, each source first copied there (memcpy into memory
 * of its own, as cube_client_write copies the caller's source). */
static uint64_t ocls_pocl_writes(const cl_mem* m, unsigned char* const* src,
                                 unsigned char* const* copy, size_t bytes, uint64_t iters,
                                 const char* what) {
  uint64_t t0 = now_ns();
  for (uint64_t it = 0; it < iters; ++it) {
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < OCLS_BATCH && err == CL_SUCCESS; ++i) {
      if (copy) memcpy(copy[i], src[i], bytes);
      err = g_ocl.clEnqueueWriteBuffer(g_ocl.queue, m[i], CL_FALSE, 0, bytes,
                                       copy ? copy[i] : src[i], 0, NULL, NULL);
    }
    if (err == CL_SUCCESS) err = g_ocl.clFinish(g_ocl.queue);
    if (err != CL_SUCCESS) {
      fprintf(stderr, "bench_dialect: %s failed: error %d\n", what, (int)err);
      g_failures++;
      return 0;
    }
  }
  return now_ns() - t0;
}

static uint64_t trial_ocls_big_cube(void* p, uint64_t iters) {
  ocls_ctx_t* c = p;
  return ocls_cube_writes(c->hb, c->big, OCLS_BIG, iters, "16 writes of 4 MiB + sync (opencl)");
}

static uint64_t trial_ocls_big_pocl(void* p, uint64_t iters) {
  ocls_ctx_t* c = p;
  return ocls_pocl_writes(c->mb, c->big, NULL, OCLS_BIG, iters, "PoCL writes of 4 MiB");
}

static uint64_t trial_ocls_big_pocl_copy(void* p, uint64_t iters) {
  ocls_ctx_t* c = p;
  return ocls_pocl_writes(c->mb, c->big, c->copy, OCLS_BIG, iters,
                          "PoCL copied writes of 4 MiB");
}

static uint64_t trial_ocls_write_cube(void* p, uint64_t iters) {
  ocls_ctx_t* c = p;
  return ocls_cube_writes(c->h, c->srcp, OCLS_BYTES, iters, "16 writes + sync (opencl)");
}

static uint64_t trial_ocls_write_pocl(void* p, uint64_t iters) {
  ocls_ctx_t* c = p;
  return ocls_pocl_writes(c->m, c->srcp, NULL, OCLS_BYTES, iters, "PoCL writes");
}




static uint64_t trial_ocls_switch_cube(void* p, uint64_t iters) {
  ocls_ctx_t* c = p;
  cube_arg_t arg = cube_arg_u32(0);
  cube_count_t one = cube_count_static(1, 1, 1);
  uint64_t t0 = now_ns();
  for (uint64_t it = 0; it < iters; ++it) {
    cube_status_t s = CUBE_OK;
    for (int i = 0; i < OCLS_BATCH && !s; ++i)
      s = cube_client_launch(i % 2 ? c->b : g_cl_client, c->k, one, 1, &arg);
    if (!s) s = cube_client_sync(g_cl_client);
    if (!s) s = cube_client_sync(c->b);
    if (s) {
      fail_status("16 launches on two streams + sync (opencl)", s);
      return 0;
    }
  }
  return now_ns() - t0;
}

static uint64_t trial_ocls_switch_pocl(void* p, uint64_t iters) {
  ocls_ctx_t* c = p;
  size_t one = 1;
  uint64_t t0 = now_ns();
  for (uint64_t it = 0; it < iters; ++it) {
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < OCLS_BATCH && err == CL_SUCCESS; ++i)
      err = g_ocl.clEnqueueNDRangeKernel(i % 2 ? c->q2 : g_ocl.queue, c->ocl->kernel, 1, NULL,
                                         &one, &one, 0, NULL, NULL);
    if (err == CL_SUCCESS) err = g_ocl.clFinish(g_ocl.queue);
    if (err == CL_SUCCESS) err = g_ocl.clFinish(c->q2);
    if (err != CL_SUCCESS) {
      fprintf(stderr, "bench_dialect: PoCL launches on two queues failed: error %d\n", (int)err);
      g_failures++;
      return 0;
    }
  }
  return now_ns() - t0;
}


/* Bytes handed over to cube_client_create that the bench keeps: nothing to
 * free. */
static void ocls_keep(void* user, void* data, size_t size) {
  (void)user;
  (void)data;
  (void)size;
}

/* 16 uploads of 4 MiB on stream A (cube_client_create from bytes handed over:
 * no copy on the calling thread), then 16 empty launches on stream B; the
 * figure is the time until B's sync returned (A is synced after, untimed).
 * One runner serves both streams: a write that blocks it holds B back. */
static uint64_t trial_ocls_behind_cube(void* p, uint64_t iters) {
  ocls_ctx_t* c = p;
  cube_arg_t arg = cube_arg_u32(0);
  cube_count_t one = cube_count_static(1, 1, 1);
  uint64_t total = 0;
  for (uint64_t it = 0; it < iters; ++it) {
    cube_handle_t h[OCLS_BATCH];
    cube_bytes_t* b[OCLS_BATCH];
    cube_status_t s = CUBE_OK;
    int wrapped = 0;
    for (; wrapped < OCLS_BATCH && !s; ++wrapped)
      s = cube_bytes_wrap(c->big[wrapped], OCLS_BIG, ocls_keep, NULL, &b[wrapped]);
    if (s) {
      cube_bytes_release_array(b, (size_t)(wrapped - 1));
      fail_status("cube_bytes_wrap (opencl)", s);
      return 0;
    }
    int made = 0;
    uint64_t t0 = now_ns();
    for (; made < OCLS_BATCH && !s; ++made) s = cube_client_create(g_cl_client, b[made], &h[made]);
    if (s) made--; /* the failed create consumed its bytes and made no handle */
    for (int i = made + (s ? 1 : 0); i < OCLS_BATCH; ++i) cube_bytes_release(b[i]);
    for (int i = 0; i < OCLS_BATCH && !s; ++i) s = cube_client_launch(c->b, c->k, one, 1, &arg);
    if (!s) s = cube_client_sync(c->b);
    total += now_ns() - t0;
    cube_status_t sa = cube_client_sync(g_cl_client);
    for (int i = 0; i < made; ++i) cube_handle_release(h[i]);
    if (s) {
      cube_status_free(sa);
      fail_status("16 uploads of 4 MiB on A, 16 launches on B + sync of B (opencl)", s);
      return 0;
    }
    if (sa) {
      fail_status("sync of A after its 16 uploads of 4 MiB (opencl)", sa);
      return 0;
    }
  }
  return total;
}

/* The same with PoCL: 16 non-blocking writes of 4 MiB on one queue, 16 empty
 * kernels on another, the time to clFinish of the second. */
static uint64_t trial_ocls_behind_pocl(void* p, uint64_t iters) {
  ocls_ctx_t* c = p;
  size_t one = 1;
  uint64_t total = 0;
  for (uint64_t it = 0; it < iters; ++it) {
    cl_int err = CL_SUCCESS;
    uint64_t t0 = now_ns();
    for (int i = 0; i < OCLS_BATCH && err == CL_SUCCESS; ++i)
      err = g_ocl.clEnqueueWriteBuffer(g_ocl.queue, c->mb[i], CL_FALSE, 0, OCLS_BIG, c->big[i],
                                       0, NULL, NULL);
    if (err == CL_SUCCESS) g_ocl.clFlush(g_ocl.queue);
    for (int i = 0; i < OCLS_BATCH && err == CL_SUCCESS; ++i)
      err = g_ocl.clEnqueueNDRangeKernel(c->q2, c->ocl->kernel, 1, NULL, &one, &one, 0, NULL,
                                         NULL);
    if (err == CL_SUCCESS) err = g_ocl.clFinish(c->q2);
    total += now_ns() - t0;
    if (err == CL_SUCCESS) err = g_ocl.clFinish(g_ocl.queue);
    if (err != CL_SUCCESS) {
      fprintf(stderr, "bench_dialect: PoCL writes and launches on two queues failed: error %d\n",
              (int)err);
      g_failures++;
      return 0;
    }
  }
  return total;
}

static void bench_ocl_streams(void) {
  printf("[8] opencl: %d writes of %d bytes + sync; %d writes of %d MiB + sync; %d empty "
         "launches alternating between two streams + sync of both; %d uploads of %d MiB on "
         "one stream, then %d empty launches on another, to that one's sync (a trial's "
         "figure: one batch)\n",
         OCLS_BATCH, OCLS_BYTES, OCLS_BATCH, OCLS_BIG >> 20, OCLS_BATCH, OCLS_BATCH,
         OCLS_BIG >> 20, OCLS_BATCH);
  if (!g_cl_client) {
    line_cl_absent("cube opencl backend:");
    return;
  }
  if (!g_ocl.ok) {
    ocl_not_available();
    return;
  }
  const uint64_t per_trial = g_quick ? 10 : 100;
  const int per = g_quick ? 1 : 3;
  ocls_ctx_t* c = xmalloc(sizeof(ocls_ctx_t));
  memset(c, 0, sizeof(*c));
  for (int i = 0; i < OCLS_BATCH; ++i) {
    for (int j = 0; j < OCLS_BYTES; ++j) c->src[i][j] = (unsigned char)(i * 31 + j);
    c->srcp[i] = c->src[i];
    TRY("cube_client_empty", cube_client_empty(g_cl_client, OCLS_BYTES, &c->h[i]));
    c->m[i] = ocl_buffer(CL_MEM_READ_WRITE, OCLS_BYTES, NULL);
    c->big[i] = xmalloc(OCLS_BIG);
    c->copy[i] = xmalloc(OCLS_BIG);
    for (int j = 0; j < OCLS_BIG; ++j) c->big[i][j] = (unsigned char)(i * 7 + j * 13 + (j >> 12));
    TRY("cube_client_empty", cube_client_empty(g_cl_client, OCLS_BIG, &c->hb[i]));
    c->mb[i] = ocl_buffer(CL_MEM_READ_WRITE, OCLS_BIG, NULL);
  }
  TRY("cube_client_clone", cube_client_clone(g_cl_client, &c->b));
  if (c->b) cube_client_set_stream(c->b, cube_stream_id_new());
  c->k = make_dialect(k_empty_src, "empty", 1, 1, NULL, 0);
  g_client = g_cl_client;
  (void)precompile_ms(c->k);
  g_client = g_cpu_client;
  cl_int err = CL_SUCCESS;
  c->q2 = g_ocl.clCreateCommandQueue(g_ocl.context, g_ocl.device, 0, &err);
  ocl_kernel_t ok;
  bool built = ocl_build(k_empty_src, "empty", NULL, 0, &ok);
  ocl_arg_t arg = ocl_scalar(cube_arg_u32(0));
  if (built && ocl_set_args(&ok, 1, &arg)) c->ocl = &ok;

  rounds_t R;
  rounds_init(&R, g_rounds, settle);
  int i_wc = rounds_add(&R, "cube opencl writes", trial_ocls_write_cube, c, per_trial, 1, per);
  int i_wp = rounds_add(&R, "PoCL writes", trial_ocls_write_pocl, c, per_trial, 1, per);
  const uint64_t per_big = g_quick ? 1 : 4;
  int i_bc = rounds_add(&R, "cube opencl 4 MiB writes", trial_ocls_big_cube, c, per_big, 1, per);
  int i_bp = rounds_add(&R, "PoCL 4 MiB writes", trial_ocls_big_pocl, c, per_big, 1, per);
  int i_bq = rounds_add(&R, "PoCL 4 MiB copied writes", trial_ocls_big_pocl_copy, c, per_big, 1,
                        per);
  int i_sc = -1, i_sp = -1;
  if (c->b && c->k) i_sc = rounds_add(&R, "cube opencl two streams", trial_ocls_switch_cube, c,
                                      per_trial, 1, per);
  if (c->q2 && c->ocl)
    i_sp = rounds_add(&R, "PoCL two queues", trial_ocls_switch_pocl, c, per_trial, 1, per);
  int i_hc = -1, i_hp = -1;
  if (c->b && c->k)
    i_hc = rounds_add(&R, "cube opencl launches behind uploads", trial_ocls_behind_cube, c,
                      per_big, 1, per);
  if (c->q2 && c->ocl)
    i_hp = rounds_add(&R, "PoCL launches behind writes", trial_ocls_behind_pocl, c, per_big, 1,
                      per);
  rounds_run(&R);
  print_rounds_header(&R, per);
  /* The writes landed: every buffer holds its source. */
  for (int i = 0; i < OCLS_BATCH; ++i) {
    cube_bytes_t* b = NULL;
    cube_status_t s = cube_client_read_one(g_cl_client, c->h[i], &b);
    if (s) fail_status("read after the writes (opencl)", s);
    else if (cube_bytes_size(b) != OCLS_BYTES ||
             memcmp(cube_bytes_const_data(b), c->src[i], OCLS_BYTES) != 0) {
      fprintf(stderr, "bench_dialect: opencl buffer %d does not hold what was written\n", i);
      g_failures++;
    }
    cube_bytes_release(b);
    s = cube_client_read_one(g_cl_client, c->hb[i], &b);
    if (s) fail_status("read after the writes of 4 MiB (opencl)", s);
    else if (cube_bytes_size(b) != OCLS_BIG ||
             memcmp(cube_bytes_const_data(b), c->big[i], OCLS_BIG) != 0) {
      fprintf(stderr, "bench_dialect: opencl buffer %d of 4 MiB does not hold what was written\n",
              i);
      g_failures++;
    }
    cube_bytes_release(b);
  }
  line_fig_time(&R, i_wc, "cube opencl, 16 writes of 4 KiB + sync:");
  line_fig_time(&R, i_wp, "PoCL, 16 non-blocking writes + clFinish:");
  line_fig_time(&R, i_bc, "cube opencl, 16 writes of 4 MiB + sync:");
  line_fig_time(&R, i_bp, "PoCL, 16 non-blocking 4 MiB writes + clFinish:");
  line_fig_time(&R, i_bq, "PoCL, 16 x (memcpy + non-blocking write) + clFinish:");
  if (i_sc >= 0) line_fig_time(&R, i_sc, "cube opencl, 16 launches on 2 streams + syncs:");
  if (i_sp >= 0) line_fig_time(&R, i_sp, "PoCL, 16 launches on 2 queues + clFinish x2:");
  if (i_hc >= 0) line_fig_time(&R, i_hc, "cube opencl, B's 16 launches behind A's 64 MiB:");
  if (i_hp >= 0) line_fig_time(&R, i_hp, "PoCL, queue 2's 16 kernels behind queue 1's 64 MiB:");
  line_rounds_ratio(&R, "writes: cube opencl vs PoCL direct:", i_wc, i_wp, false);
  line_rounds_ratio(&R, "4 MiB writes: cube opencl vs PoCL direct:", i_bc, i_bp, false);
  line_rounds_ratio(&R, "4 MiB writes: cube opencl vs PoCL copying first:", i_bc, i_bq, false);
  if (i_sc >= 0 && i_sp >= 0)
    line_rounds_ratio(&R, "two streams: cube opencl vs PoCL direct:", i_sc, i_sp, false);
  if (i_hc >= 0 && i_hp >= 0)
    line_rounds_ratio(&R, "launches behind uploads: cube opencl vs PoCL:", i_hc, i_hp, false);
  printf("\n");
  if (c->ocl) ocl_kernel_release(&ok);
  if (c->q2) g_ocl.clReleaseCommandQueue(c->q2);
  for (int i = 0; i < OCLS_BATCH; ++i) {
    cube_handle_release(c->h[i]);
    if (c->m[i]) g_ocl.clReleaseMemObject(c->m[i]);
    cube_handle_release(c->hb[i]);
    if (c->mb[i]) g_ocl.clReleaseMemObject(c->mb[i]);
    free(c->big[i]);
    free(c->copy[i]);
  }
  cube_kernel_release(c->k);
  cube_client_release(c->b);
  free(c);
  fflush(stdout);
}

//===----------------------------------------------------------------------===//
// 6. tuned matmul
//===----------------------------------------------------------------------===//

typedef struct tune_shape {
  uint32_t m, n, k;
} tune_shape_t;

static const tune_shape_t k_tune_shapes[6] = {
    {64, 64, 64}, {256, 256, 256}, {512, 512, 512}, {1024, 1024, 1024}, {4096, 64, 256},
    {64, 4096, 512},
};

/* Launch (candidate |which|, or the operation when -1) |iters| times, then
 * sync; the time in ns, 0 on failure. */
static uint64_t tune_trial(cube_tune_op_t* op, int which, const cube_arg_t* args, int iters) {
  uint64_t t0 = now_ns();
  for (int i = 0; i < iters; ++i) {
    cube_status_t st = which < 0 ? cube_tune_op_launch(op, g_client, 6, args)
                                 : cube_tune_op_launch_candidate(op, g_client, (uint32_t)which, 6,
                                                                 args);
    if (st) {
      fail_status("tuned matmul launch", st);
      return 0;
    }
  }
  cube_status_t st = cube_client_sync(g_client);
  if (st) {
    fail_status("cube_client_sync (tuned matmul)", st);
    return 0;
  }
  return now_ns() - t0;
}

/* Checks 64 sampled elements of C against a double host product. */
static void tune_check(const tune_shape_t* sh, const float* a, const float* b, cube_handle_t hc,
                       const char* who) {
  size_t bytes = (size_t)sh->m * sh->n * sizeof(float);
  float* c = xmalloc(bytes);
  if (!download(hc, c, bytes)) {
    free(c);
    return;
  }
  uint64_t seed = 11;
  for (int s = 0; s < 64; ++s) {
    seed ^= seed >> 12, seed ^= seed << 25, seed ^= seed >> 27;
    uint32_t i = (uint32_t)(seed % sh->m), j = (uint32_t)((seed >> 20) % sh->n);
    double r = 0, mag = 0;
    for (uint32_t q = 0; q < sh->k; ++q) {
      double t = (double)a[(size_t)i * sh->k + q] * b[(size_t)q * sh->n + j];
      r += t;
      mag += fabs(t);
    }
    double err = fabs(c[(size_t)i * sh->n + j] - r) / (mag > 0 ? mag : 1);
    if (err > 1e-4) {
      wrong("tuned matmul %ux%ux%u (%s): relative error %.3e at (%u, %u)", sh->m, sh->n, sh->k,
            who, err, i, j);
      break;
    }
  }
  free(c);
}

static void bench_tune_on(const char* backend) {
  cube_tune_op_t* op = NULL;
  /* The default budget (CUBE_TUNE_BUDGET, 10 s): on PoCL a 1024^3 sample
   * takes 100-200 ms, and two samples per candidate (what 2 s allowed) did
   * not separate candidates 10 % apart on the H200 machine's CPU. */
  cube_status_t st = tuned_matmul_create(0, &op, NULL);
  if (st) {
    fail_status("tuned_matmul_create", st);
    return;
  }
  printf("  %s: shape MxNxK (bucket)      tuning    default   best alone (which)   tuned "
         "(which)     tuned/best  speedup vs default\n",
         backend);
  int met = 0, measured = 0, choice_met = 0;
  for (int s = 0; s < 6; ++s) {
    const tune_shape_t* sh = &k_tune_shapes[s];
    size_t na = (size_t)sh->m * sh->k, nb = (size_t)sh->k * sh->n, nc = (size_t)sh->m * sh->n;
    float* a = xmalloc(na * sizeof(float));
    float* b = xmalloc(nb * sizeof(float));
    uint64_t seed = 3 + (uint64_t)s;
    for (size_t i = 0; i < na; ++i) a[i] = rnd(&seed);
    for (size_t i = 0; i < nb; ++i) b[i] = rnd(&seed);
    cube_handle_t ha = upload(a, na * sizeof(float)), hb = upload(b, nb * sizeof(float));
    cube_handle_t hc = CUBE_HANDLE_NULL;
    TRY("cube_client_empty (tuned matmul)", cube_client_empty(g_client, nc * sizeof(float), &hc));
    cube_arg_t args[6] = {cube_arg_buffer(ha),   cube_arg_buffer(hb),   cube_arg_buffer(hc),
                          cube_arg_u32(sh->m), cube_arg_u32(sh->n), cube_arg_u32(sh->k)};
    /* The first launch tunes (the candidates compiled and measured). */
    uint64_t t0 = now_ns();
    uint64_t first = tune_trial(op, -1, args, 1);
    double tuning_s = (double)(now_ns() - t0) / 1e9;
    cube_tune_record_t rec;
    memset(&rec, 0, sizeof(rec));
    rec.struct_size = sizeof(rec);
    st = cube_tune_op_record(op, g_client, 6, args, &rec);
    if (!first || st) {
      if (st) fail_status("cube_tune_op_record", st);
      cube_handle_release(ha);
      cube_handle_release(hb);
      cube_handle_release(hc);
      free(a);
      free(b);
      continue;
    }
    tune_check(sh, a, b, hc, "tuned");
    /* Alternating trials: every valid candidate alone, then the operation,
     * in a rotated order each round; each trial at least ~30 ms. */
    bool runs[TUNED_MATMUL_CANDIDATES + 1];
    double est_us = rec.results[rec.winner].median_ns / 1e3;
    int iters = est_us > 0 ? (int)(30000.0 / est_us) + 1 : 1;
    if (iters > 200) iters = 200;
    enum { ROUNDS = 7 };
    double t[TUNED_MATMUL_CANDIDATES + 1][ROUNDS];
    for (int c = 0; c <= TUNED_MATMUL_CANDIDATES; ++c)
      runs[c] = c == TUNED_MATMUL_CANDIDATES ||
                (rec.results[c].outcome != CUBE_TUNE_INVALID &&
                 rec.results[c].outcome != CUBE_TUNE_WRONG &&
                 rec.results[c].outcome != CUBE_TUNE_FAILED);
    for (int c = 0; c < TUNED_MATMUL_CANDIDATES; ++c) /* warm: compiled, caches filled */
      if (runs[c]) (void)tune_trial(op, c, args, 1);
    for (int r = 0; r < ROUNDS; ++r)
      for (int j = 0; j <= TUNED_MATMUL_CANDIDATES; ++j) {
        int c = (j + r) % (TUNED_MATMUL_CANDIDATES + 1);
        if (!runs[c]) continue;
        uint64_t ns = tune_trial(op, c == TUNED_MATMUL_CANDIDATES ? -1 : c, args, iters);
        t[c][r] = (double)ns / 1e3 / iters;
      }
    double med[TUNED_MATMUL_CANDIDATES + 1], lo[TUNED_MATMUL_CANDIDATES + 1],
        hi[TUNED_MATMUL_CANDIDATES + 1];
    int best = -1;
    for (int c = 0; c <= TUNED_MATMUL_CANDIDATES; ++c) {
      if (!runs[c]) continue;
      qsort(t[c], ROUNDS, sizeof(double), cmp_double);
      med[c] = median_sorted(t[c], ROUNDS);
      lo[c] = t[c][0];
      hi[c] = t[c][ROUNDS - 1];
      if (c < TUNED_MATMUL_CANDIDATES && (best < 0 || med[c] < med[best])) best = c;
    }
    const int T = TUNED_MATMUL_CANDIDATES, D = TUNED_MATMUL_DEFAULT;
    /* The target's ratio: the tuned operation against the best candidate
     * alone in adjacent pairs of trials (which goes first alternating), the
     * median of the pairs' ratios, so that the host's drift between two
     * trials far apart in the rounds above does not count. */
    enum { PAIRS = 15 };
    double pr[PAIRS];
    for (int r = 0; r < PAIRS; ++r) {
      double tt = 0, tb = 0;
      for (int side = 0; side < 2; ++side) {
        bool tuned_side = (side + r) % 2;
        double us = (double)tune_trial(op, tuned_side ? -1 : best, args, iters) / 1e3 / iters;
        if (tuned_side)
          tt = us;
        else
          tb = us;
      }
      pr[r] = tb > 0 ? tt / tb : 0;
    }
    qsort(pr, PAIRS, sizeof(double), cmp_double);
    double ratio = median_sorted(pr, PAIRS);
    /* The same question without the tuned launches' own noise: the chosen
     * candidate's median alone against the best one's. */
    double choice = runs[rec.winner] ? med[rec.winner] / med[best] : 0;
    measured++;
    met += ratio <= 1.03;
    choice_met += choice <= 1.03;
    char shape[48];
    snprintf(shape, sizeof(shape), "%ux%ux%u (%llux%llux%llu)", sh->m, sh->n, sh->k,
             (unsigned long long)rec.key.values[0], (unsigned long long)rec.key.values[1],
             (unsigned long long)rec.key.values[2]);
    printf("  %-34s %6.2f s %9.3f ms %9.3f ms (%-5s) %9.3f ms (%-5s)  %5.3f %s  %5.2fx\n", shape,
           tuning_s, med[D] / 1e3, med[best] / 1e3, tuned_matmul_variants[best].name,
           med[T] / 1e3, tuned_matmul_variants[rec.winner].name, ratio,
           ratio <= 1.03 ? "ok  " : "OVER", med[D] / med[T]);
    printf("  %-34s tuned/best: median of %d adjacent pairs' ratios (%.3f-%.3f); rounds' "
           "medians %.3f; choice alone / best alone %.3f; spread (min-max over %d rounds of %d "
           "launches): tuned %.3f-%.3f ms, best %.3f-%.3f ms; every candidate:",
           "", PAIRS, pr[0], pr[PAIRS - 1], med[T] / med[best], choice, ROUNDS, iters,
           lo[T] / 1e3, hi[T] / 1e3, lo[best] / 1e3, hi[best] / 1e3);
    for (int c = 0; c < T; ++c)
      if (runs[c])
        printf(" %s %.3f", tuned_matmul_variants[c].name, med[c] / 1e3);
      else
        printf(" %s (%s)", tuned_matmul_variants[c].name,
               cube_tune_outcome_name(rec.results[c].outcome));
    printf("; the tuner's medians:");
    for (int c = 0; c < T; ++c)
      if (rec.results[c].samples)
        printf(" %s %.3f (%u)", tuned_matmul_variants[c].name, rec.results[c].median_ns / 1e6,
               rec.results[c].samples);
    printf("\n");
    fflush(stdout);
    cube_handle_release(ha);
    cube_handle_release(hb);
    cube_handle_release(hc);
    free(a);
    free(b);
  }
  printf("  target: tuned within 3 %% of the best candidate alone -> %d of %d shapes (the "
         "chosen candidate alone within 3 %%: %d of %d)\n",
         met, measured, choice_met, measured);
  cube_tune_op_release(op);
}

static void bench_tune(void) {
  printf("[6] tuned matmul (examples/tuned_matmul.h, 7 candidates: TILE 8/16/32 x VW 1/2/4; "
         "default t16v1), the default budget (CUBE_TUNE_BUDGET);\n    times per launch (launch + sync), medians "
         "of 7 alternating rounds;\n    tuned/best: the median ratio of 15 adjacent pairs of "
         "trials (tuned, best alone; which first alternating)\n");
  bench_tune_on("cpu");
  settle();
  if (g_cl_client) {
    g_client = g_cl_client;
    bench_tune_on("opencl");
    g_client = g_cpu_client;
    settle();
  } else {
    printf("  opencl: not available (%s)\n", g_cl_reason);
  }
  printf("\n");
  fflush(stdout);
}

//===----------------------------------------------------------------------===//
// 7. a tuned launch that hits vs a plain launch
//===----------------------------------------------------------------------===//

static cube_status_t hit_count(void* user, size_t n, const cube_arg_t* args, cube_count_t* out) {
  (void)user;
  (void)n;
  (void)args;
  *out = cube_count_static(1, 1, 1);
  return CUBE_OK;
}

static cube_status_t hit_key(void* user, const cube_device_properties_t* props, size_t n,
                             const cube_arg_t* args, cube_tune_key_t* out) {
  (void)user;
  (void)props;
  (void)n;
  out->count = 1;
  out->values[0] = cube_tune_anchor(args[0].v.u32, 0);
  return CUBE_OK;
}

/* Batches of |batch| launches from an idle device (synced before, untimed):
 * the caller's time per launch, ns. */
static double hit_batch(cube_tune_op_t* op, cube_kernel_t* k, int batch) {
  cube_arg_t arg = cube_arg_u32(100);
  TRY("cube_client_sync (hit)", cube_client_sync(g_client));
  uint64_t t0 = now_ns();
  for (int i = 0; i < batch; ++i) {
    cube_status_t st = op ? cube_tune_op_launch(op, g_client, 1, &arg)
                          : cube_client_launch(g_client, k, cube_count_static(1, 1, 1), 1, &arg);
    if (st) {
      fail_status("launch (hit)", st);
      return 0;
    }
  }
  return (double)(now_ns() - t0) / batch;
}

static void bench_tune_hit_on(const char* backend) {
  cube_kernel_t* k[2] = {make_dialect(k_empty_src, "empty", 1, 1, NULL, 0),
                         make_dialect(k_empty_src, "empty", 2, 1, NULL, 0)};
  cube_tune_candidate_t cands[2] = {{"one", k[0], hit_count, NULL, NULL},
                                    {"two", k[1], hit_count, NULL, NULL}};
  cube_tune_op_desc_t od;
  cube_tune_op_desc_initialize(&od);
  od.name = "bench_hit";
  od.version = "1";
  od.candidates = cands;
  od.candidate_count = 2;
  od.key = hit_key;
  od.budget_s = 0.5;
  cube_tune_op_t* op = NULL;
  TRY("cube_tune_op_create (hit)", cube_tune_op_create(&od, &op));
  if (!op) return;
  cube_arg_t arg = cube_arg_u32(100);
  TRY("tune (hit)", cube_tune_op_launch(op, g_client, 1, &arg));
  cube_tune_record_t rec;
  memset(&rec, 0, sizeof(rec));
  rec.struct_size = sizeof(rec);
  TRY("cube_tune_op_record (hit)", cube_tune_op_record(op, g_client, 1, &arg, &rec));
  cube_kernel_t* winner = k[rec.winner < 2 ? rec.winner : 0];
  enum { BATCH = 32, ROUNDS = 41, PER = 25 };
  double plain[ROUNDS], tuned[ROUNDS], diff[ROUNDS];
  for (int w = 0; w < 50; ++w) (void)hit_batch(op, winner, BATCH), (void)hit_batch(NULL, winner, BATCH);
  for (int r = 0; r < ROUNDS; ++r) {
    /* Each round: PER batches of each, alternating; the median batch of each. */
    double p[PER], q[PER];
    for (int i = 0; i < PER; ++i) {
      if ((i + r) % 2) {
        p[i] = hit_batch(NULL, winner, BATCH);
        q[i] = hit_batch(op, winner, BATCH);
      } else {
        q[i] = hit_batch(op, winner, BATCH);
        p[i] = hit_batch(NULL, winner, BATCH);
      }
    }
    qsort(p, PER, sizeof(double), cmp_double);
    qsort(q, PER, sizeof(double), cmp_double);
    plain[r] = median_sorted(p, PER);
    tuned[r] = median_sorted(q, PER);
    diff[r] = tuned[r] - plain[r];
  }
  TRY("cube_client_sync (hit)", cube_client_sync(g_client));
  qsort(plain, ROUNDS, sizeof(double), cmp_double);
  qsort(tuned, ROUNDS, sizeof(double), cmp_double);
  qsort(diff, ROUNDS, sizeof(double), cmp_double);
  double d = median_sorted(diff, ROUNDS);
  printf("  %-7s plain launch %7.1f ns (%.1f-%.1f), tuned launch (hit) %7.1f ns (%.1f-%.1f): "
         "%+.1f ns per launch (rounds' differences %+.1f to %+.1f) -> target <= 100 ns %s\n",
         backend, median_sorted(plain, ROUNDS), plain[0], plain[ROUNDS - 1],
         median_sorted(tuned, ROUNDS), tuned[0], tuned[ROUNDS - 1], d, diff[0],
         diff[ROUNDS - 1], d <= 100.0 ? "met" : "NOT met");
  cube_tune_op_release(op);
  cube_kernel_release(k[0]);
  cube_kernel_release(k[1]);
}

static void bench_tune_hit(void) {
  printf("[7] tuned launch that hits vs plain launch of the same kernel (empty kernel, 1 cube; "
         "caller's time per launch in batches of 32 from an idle device; median of 41 rounds of "
         "25 alternating batches each)\n");
  bench_tune_hit_on("cpu");
  if (g_cl_client) {
    g_client = g_cl_client;
    bench_tune_hit_on("opencl");
    g_client = g_cpu_client;
  } else {
    printf("  opencl: not available (%s)\n", g_cl_reason);
  }
  printf("\n");
  fflush(stdout);
}

//===----------------------------------------------------------------------===//
// Header, environment, main
//===----------------------------------------------------------------------===//

static char g_cache_dir[PATH_MAX];

static int rm_entry(const char* path, const struct stat* sb, int flag, struct FTW* ftw) {
  (void)sb;
  (void)flag;
  (void)ftw;
  return remove(path);
}

/* POCL_CACHE_DIR: left alone when set; else <dir of this executable>/pocl-cache
 * (the build tree), else /tmp/cube-bench-pocl-cache. */
static void set_pocl_cache_dir(void) {
  if (getenv("POCL_CACHE_DIR")) return;
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  char dir[PATH_MAX + 16] = "";
  if (n > 0) {
    exe[n] = '\0';
    char* slash = strrchr(exe, '/');
    if (slash) {
      *slash = '\0';
      snprintf(dir, sizeof(dir), "%s/pocl-cache", exe);
      if (mkdir(dir, 0700) != 0 && errno != EEXIST) dir[0] = '\0';
      else if (access(dir, W_OK) != 0) dir[0] = '\0';
    }
  }
  if (!dir[0]) {
    snprintf(dir, sizeof(dir), "/tmp/cube-bench-pocl-cache-%lu", (unsigned long)geteuid());
    (void)mkdir(dir, 0700);
  }
  setenv("POCL_CACHE_DIR", dir, 1);
}

static void print_header(void) {
  print_machine("bench_dialect", cube_version());
  const char* cc = NULL;
  const char* ident = NULL;
  cube_status_t s = cube__cpu_compiler(&cc, &ident);
  if (s) {
    printf("kernel compiler (cube CPU backend): unavailable: %s\n", cube_status_message(s));
    cube_status_free(s);
  } else {
    printf("kernel compiler (cube CPU backend): %s\n  identity: %s\n", cc, ident);
  }
#if defined(__clang__)
  printf("bench compiler: clang %s", __clang_version__);
#elif defined(__GNUC__)
  printf("bench compiler: gcc %s", __VERSION__);
#else
  printf("bench compiler: unknown");
#endif
#ifdef __OPTIMIZE__
  printf(", optimised");
#else
  printf(", not optimised");
#endif
#ifdef _OPENMP
  printf(", OpenMP %d (%d threads, GOMP_SPINCOUNT=%s, OMP_WAIT_POLICY=%s)\n", _OPENMP,
         omp_get_max_threads(), getenv("GOMP_SPINCOUNT") ? getenv("GOMP_SPINCOUNT") : "default",
         getenv("OMP_WAIT_POLICY") ? getenv("OMP_WAIT_POLICY") : "default");
#else
  printf(", no OpenMP (built without -fopenmp)\n");
#endif
  printf("device: cpu:0, threaded queue: %s\n", cube_client_properties(g_client)->name);
  if (g_cl_client)
    printf("device: opencl:0 (cube's opencl backend), threaded queue: %s\n",
           cube_client_properties(g_cl_client)->name);
  else
    printf("cube opencl backend: not available (%s)\n", g_cl_reason);
  if (g_ocl.ok)
    printf("PoCL: %s, %s, device %s (%u compute units); POCL_CACHE_DIR=%s\n",
           g_ocl.platform_name, g_ocl.platform_version, g_ocl.device_name,
           (unsigned)g_ocl.compute_units, getenv("POCL_CACHE_DIR"));
  else
    printf("PoCL: not available (%s)\n", g_ocl.reason);
  printf("cube kernel cache: %s (fresh for this run)\n", cube_kernel_cache_dir());
  printf("sections saxpy, reduce, matmul, empty, ocl_streams: %d alternating rounds "
         "(CUBE_BENCH_ROUNDS, at least %d)%s; each system's round figure is the median of that round's trials;\n"
         "a system line gives the median of its round figures (min, max); a ratio line the median "
         "of the per-round ratios, both\nsides from the same round (min, max): \"rate ratio\" = "
         "rate / B's rate (higher is better), \"time ratio\" = time / B's time\n(lower is "
         "better). Other sections: median and min over trials after warm-up. GB = 1e9 bytes.\n\n",
         g_rounds, ROUNDS_MIN, g_quick ? " -- QUICK MODE (small sizes, smoke test): not results" : "");
}

int main(int argc, char** argv) {
  /* A fresh kernel cache directory, before any cube call: the first compile
   * of each kernel is cold. */
  snprintf(g_cache_dir, sizeof(g_cache_dir), "%s/cube-bench-dialect-XXXXXX",
           getenv("TMPDIR") && getenv("TMPDIR")[0] == '/' ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(g_cache_dir)) {
    perror("bench_dialect: mkdtemp");
    return 1;
  }
  if (setenv("CUBE_CACHE_DIR", g_cache_dir, 1) != 0) return 1;
  g_quick = bench_quick_env();
  int named = 0; /* sections named on the command line */
  for (int a = 1; a < argc; ++a) {
    static const char* const known[] = {"saxpy", "reduce", "matmul",   "cache",
                                        "empty", "tune",   "tune_hit", "ocl_streams"};
    if (!strcmp(argv[a], "quick")) {
      g_quick = true;
      continue;
    }
    named++;
    bool ok = false;
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); ++i) ok |= !strcmp(argv[a], known[i]);
    if (!ok) {
      fprintf(stderr, "bench_dialect: unknown section '%s' (saxpy reduce matmul cache empty tune "
                      "tune_hit ocl_streams, and quick)\n", argv[a]);
      (void)rmdir(g_cache_dir);
      return 2;
    }
  }
  bool adjusted = false;
  g_rounds = rounds_parse(getenv("CUBE_BENCH_ROUNDS"), g_quick, &adjusted);
  if (adjusted)
    fprintf(stderr, "bench_dialect: CUBE_BENCH_ROUNDS='%s' taken as %d (%d to %d)\n",
            getenv("CUBE_BENCH_ROUNDS"), g_rounds, ROUNDS_MIN, ROUNDS_MAX);
  set_pocl_cache_dir();
  /* OpenMP and cube share the cores in one run. libgomp's idle team spins for
   * a long while after each parallel region (GOMP_SPINCOUNT, default 300000
   * per wait), so the OpenMP trials kept both cores of the CI machine busy
   * during cube's trials that followed (measured: cube at 0.61x of OpenMP with
   * OMP_WAIT_POLICY=active, 0.95x with passive). A short spin keeps OpenMP's
   * back-to-back regions hot and lets its threads sleep between sections.
   * A value the user set wins. */
  setenv("GOMP_SPINCOUNT", "10000", 0);

  /* The disk-hit child is forked now, while the process has no threads and
   * no runtime state; it waits for section 4. */
  cache_child_start();

  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.queue_mode = CUBE_QUEUE_THREADED;
  cube_status_t s = cube_client_init((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &o, &g_client);
  if (s) {
    fail_status("cube_client_init cpu:0 (threaded)", s);
    cache_child_stop();
    return 1;
  }
  g_cpu_client = g_client;
  s = cube_client_init((cube_device_id_t){CUBE_BACKEND_OPENCL, 0}, &o, &g_cl_client);
  if (s) {
    snprintf(g_cl_reason, sizeof(g_cl_reason), "%s", cube_status_message(s));
    cube_status_free(s);
    g_cl_client = NULL;
  }
  if (cube_client_is_blocking(g_client)) {
    fprintf(stderr, "bench_dialect: the threaded queue mode was not applied\n");
    g_failures++;
  }
  ocl_init();
  print_header();
  fflush(stdout);

  /* Sections named on the command line (none: every one), and in
   * CUBE_BENCH_ONLY when it is set. */
  static const struct {
    const char* name;
    void (*run)(void);
  } sections[] = {{"saxpy", bench_saxpy}, {"reduce", bench_reduce}, {"matmul", bench_matmul},
                  {"cache", bench_cache},  {"empty", bench_empty},   {"tune", bench_tune},
                  {"tune_hit", bench_tune_hit}, {"ocl_streams", bench_ocl_streams}};
  for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); ++i) {
    bool run = named == 0;
    for (int a = 1; a < argc; ++a) run |= strcmp(argv[a], sections[i].name) == 0;
    if (run && bench_wanted(sections[i].name)) sections[i].run();
  }

  cache_child_stop();
  ocl_fini();
  cube_client_release(g_client);
  cube_client_release(g_cl_client);
  TRY("cube_kernel_cache_clear", cube_kernel_cache_clear());
  cube_shutdown();
  (void)nftw(g_cache_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  if (g_failures) {
    printf("\n%d failures (see stderr)\n", g_failures);
    return 1;
  }
  printf("all results verified\n");
  return 0;
}
