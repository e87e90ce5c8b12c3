/* bench_cuda: cube's CUDA backend beside raw CUDA, measured in the same
 * process on the same GPU (docs/benchmarks.md, "Targets", compares
 * ratios; its "Targets" table says what "good" means).
 *
 * The raw side is the driver API and NVRTC through cube's own dlopen tables
 * (src/backends/cuda/cuda_api.h: nothing links libcuda), the device's primary
 * context retained and made current, its own non-blocking stream and its own
 * NVRTC-compiled module of plain CUDA C kernels with the same bodies (and the
 * same argument ABI: a buffer is a pointer plus its length in bytes) as the
 * cube dialect kernels. It is measured as bench/peers/
 * cuda_driver_limits.c measures it.
 *
 *   1. caller-side cost of cube_client_launch (threaded queue) of an empty
 *      kernel, N back to back, sync not timed; raw: cuLaunchKernel back to back.
 *      1b: the same in bursts of 256 launches (fit in the 1024-cell ring).
 *   2. sustained launches per second: N launches + sync, both sides.
 *   3. launch + read back of 4 bytes (kernel writes v + 1; read_one), median
 *      of per-iteration times; raw: launch + cuMemcpyDtoHAsync into pinned +
 *      cuStreamSynchronize. Then "where the time goes": 400 more iterations
 *      of each with the backend trace hook timing every backend call (cube:
 *      which thread made the launch and the read, the time before, in and
 *      after each driver call; raw: each driver call), medians.
 *   4. cube_client_empty(1 MiB) + cube_handle_release (pool hit) vs
 *      cuMemAllocAsync + cuMemFreeAsync (default pool, release threshold high).
 *   5. create_from_slice of 1 GiB of random pageable data, call -> sync
 *      returned; vs raw cuMemcpyHtoDAsync from pageable and from pinned.
 *  5w. (opt-in, CUBE_BENCH_ONLY=upload_why) the same upload from sources of
 *      4 KiB pages, huge pages, as malloc gives them, and never touched, in
 *      alternating rounds: what the upload's rate depends on.
 *   6. read_one of a 1 GiB handle vs raw cuMemcpyDtoHAsync into pageable and
 *      pinned memory (the round trip of 5 -> 6 is checked byte for byte).
 *   7. kernel cache: cold compile (fresh define) through cube_client_precompile
 *      vs a disk hit (after cube_shutdown, which drops every in-memory cache
 *      and module, a new server loads the entry from disk) vs an in-process
 *      hit (new kernel object of the same source); beside raw NVRTC compiling
 *      the very unit cube compiles (cube__dialect_generate) + cuModuleLoadData.
 *   8. saxpy (12 B/element) and copy (8 B/element) dialect kernels over 1 GiB
 *      arrays timed with cube_client_profile (device events), vs raw
 *      cuMemcpyDtoDAsync (read + written), and raw saxpy / copy / add kernels
 *      timed with events; 8f-8g: the copy with one float4 per unit (the
 *      dialect's CUBE_VLOAD / CUBE_VSTORE) vs D2D and vs the raw float4 copy.
 *      The saxpy and copy outputs are checked.
 *   9. graphs: 1000 empty kernels captured once and replayed, per kernel and
 *      the caller-side cost of one replay (also of a 10-node graph), beside
 *      the same chain as a raw CUDA graph; 9d-9f: the step of
 *      bench/peers/torch_graph_step.py (200 in-place adds of 4096 floats)
 *      replayed + synced, beside the raw graph, cube's eager launches and
 *      (CUBE_BENCH_TORCH_GRAPH_STEP_US, set by scripts/gpu-check.sh from the
 *      peer's output) PyTorch's CUDA graph. The step's result is checked.
 *      Then where the step's time goes (traced as for figure 3), and raw
 *      graphs that differ from the raw step in one way each: an event after
 *      each launch, the kernel code cube generates in its form for any
 *      launch (NVRTC'd here), cube's buffer, and the 1-D form cube compiles
 *      for launches of 1 in y and z (the one cube's step runs).
 *  10. tuning (docs/autotune.md): the tuned matmul of examples/tuned_matmul.h
 *      over six shapes from 64 to 4096 (square and not): the time of the
 *      tuning's choice vs the best candidate measured alone, in alternating
 *      rounds (target <= 1.03x), and its speedup over the untuned default;
 *      10b: a tuned launch that hits vs a plain launch of the same kernel,
 *      caller-side, in bursts of 32 (target: <= 0.1 us more).
 *  11. tracing on vs off (issue 17): 10,000 launches + sync, 31 alternating
 *      rounds, of the empty kernel (11) and of saxpy over 2^20 floats (11b);
 *      target <= 1.05x each.
 *
 * Output: one line per figure "name: cube X | raw Y | ratio R | target T |
 * met|MISSED" (ratio = cube / raw, for times lower is better, for rates higher
 * is better), then a summary table. CUBE_BENCH_QUICK=1 shrinks sizes and
 * iterations about 10x. Without a usable GPU it prints "cuda unavailable:
 * <reason>" and exits 0; any failed call prints its message and exits 1.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define BENCH_NAME "bench_cuda"
#include "bench_common.h"
#include "cube/cube.h"
#include "../examples/tuned_matmul.h"

#ifndef CUBE_HAVE_CUDA

int main(void) {
  print_machine("bench_cuda", cube_version());
  printf("cuda unavailable: cube was built without the CUDA backend (no cuda.h / nvrtc.h)\n");
  return 0;
}

#else /* CUBE_HAVE_CUDA */

#include <stdatomic.h>

#include "backends/backend.h"
#include "backends/cuda/cuda_api.h"
#include "kernel/dialect.h"

//===----------------------------------------------------------------------===//
// Settings
//===----------------------------------------------------------------------===//

static bool g_quick;
static uint64_t g_n_launch;      /* figures 1, 2 */
static size_t g_big;             /* bytes of the big transfers and arrays */
static int g_rt_warm, g_rt_iters; /* figure 3 */
static int g_pool_trials;        /* figure 4 */
static uint64_t g_pool_iters;
static int g_copy_reps;          /* figures 5, 6 */
static int g_kernel_reps;        /* figure 8: launches per timed trial */
static int g_salts;              /* figure 7 */

#define FIG8_TRIALS 3
#define MAX_SALTS 3
#define BURST 256
#define BURSTS 200
#define SAXPY_A 2.0f

//===----------------------------------------------------------------------===//
// Failure handling
//===----------------------------------------------------------------------===//

/* Any failed cube call is fatal. */
#define CHECK(what, expr)                       \
  do {                                          \
    cube_status_t s_ = (expr);                  \
    if (s_ != CUBE_OK) {                        \
      fail_status((what), s_);                  \
      exit(1);                                  \
    }                                           \
  } while (0)

static const cube__cuda_driver_t* cu;
static const cube__nvrtc_t* nv;

static void cu_fatal(CUresult r, const char* what, int line) {
  const char* name = NULL;
  const char* text = NULL;
  if (cu->GetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
  if (cu->GetErrorString(r, &text) != CUDA_SUCCESS) text = NULL;
  fprintf(stderr, BENCH_NAME ": line %d: %s failed: %s (%s, error %d)\n", line, what,
          name ? name : "CUDA error", text ? text : "no description", (int)r);
  exit(1);
}

#define CK(x)                                           \
  do {                                                  \
    CUresult r_ = (x);                                  \
    if (r_ != CUDA_SUCCESS) cu_fatal(r_, #x, __LINE__); \
  } while (0)

static void* xmalloc(size_t n) {
  void* p = malloc(n);
  if (!p) {
    fprintf(stderr, BENCH_NAME ": out of host memory (%zu bytes)\n", n);
    exit(1);
  }
  return p;
}

static void wrong(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void wrong(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, BENCH_NAME ": WRONG RESULT: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  g_failures++;
}

//===----------------------------------------------------------------------===//
// Result rows
//===----------------------------------------------------------------------===//

typedef enum target_kind_e {
  T_ABS_LE,   /* cube value <= target */
  T_ABS_GE,   /* cube value >= target */
  T_RATIO_LE, /* cube / base <= target */
  T_RATIO_GE, /* cube / base >= target */
  T_INFO,     /* no target */
} target_kind_t;

typedef struct row {
  char id[8];
  char name[96];
  double cube, base;
  const char* unit;
  const char* base_label; /* "raw" unless the baseline is something else */
  target_kind_t kind;
  double target;
  const char* target_unit; /* for T_ABS_* */
  bool has_base;
} row_t;

#define MAX_ROWS 48
static row_t g_rows[MAX_ROWS];
static int g_row_count;

typedef struct check {
  char name[96];
  bool pass;
} check_t;
static check_t g_checks[8];
static int g_check_count;

static void target_text(const row_t* r, char* out, size_t size) {
  switch (r->kind) {
    case T_ABS_LE: snprintf(out, size, "<= %g %s", r->target, r->target_unit); break;
    case T_ABS_GE: snprintf(out, size, ">= %g %s", r->target, r->target_unit); break;
    case T_RATIO_LE: snprintf(out, size, "<= %gx", r->target); break;
    case T_RATIO_GE: snprintf(out, size, ">= %gx", r->target); break;
    default: snprintf(out, size, "-"); break;
  }
}

static double row_ratio(const row_t* r) { return r->has_base && r->base > 0 ? r->cube / r->base : 0; }

static const char* row_result(const row_t* r) {
  double q = row_ratio(r);
  switch (r->kind) {
    case T_ABS_LE: return r->cube <= r->target ? "met" : "MISSED";
    case T_ABS_GE: return r->cube >= r->target ? "met" : "MISSED";
    case T_RATIO_LE: return r->has_base && q <= r->target ? "met" : "MISSED";
    case T_RATIO_GE: return r->has_base && q >= r->target ? "met" : "MISSED";
    default: return "info";
  }
}

static const char* fmt_val(double v, char* buf, size_t size) {
  if (v >= 1000) snprintf(buf, size, "%.0f", v);
  else if (v >= 10) snprintf(buf, size, "%.2f", v);
  else if (v >= 0.1 || v == 0) snprintf(buf, size, "%.3f", v);
  else snprintf(buf, size, "%.3g", v);
  return buf;
}

static const char* fmt_ratio(double q, char* buf, size_t size) {
  if (q >= 0.01 || q == 0) snprintf(buf, size, "%.3f", q);
  else snprintf(buf, size, "%.2e", q);
  return buf;
}

static void add_row(const char* id, const char* name, double cube, const char* unit, double base,
                    bool has_base, const char* base_label, target_kind_t kind, double target,
                    const char* target_unit) {
  if (g_row_count == MAX_ROWS) return;
  row_t* r = &g_rows[g_row_count++];
  memset(r, 0, sizeof(*r));
  snprintf(r->id, sizeof(r->id), "%s", id);
  snprintf(r->name, sizeof(r->name), "%s", name);
  r->cube = cube;
  r->base = base;
  r->has_base = has_base;
  r->unit = unit;
  r->base_label = base_label ? base_label : "raw";
  r->kind = kind;
  r->target = target;
  r->target_unit = target_unit ? target_unit : unit;
  char a[32], b[32], t[48], q[32];
  target_text(r, t, sizeof(t));
  if (has_base)
    printf("[%s] %s: cube %s %s | %s %s %s | ratio %s | target %s | %s\n", r->id, r->name,
           fmt_val(cube, a, sizeof(a)), unit, r->base_label, fmt_val(base, b, sizeof(b)), unit,
           fmt_ratio(row_ratio(r), q, sizeof(q)), t, row_result(r));
  else
    printf("[%s] %s: cube %s %s | %s n/a | ratio n/a | target %s | %s\n", r->id, r->name,
           fmt_val(cube, a, sizeof(a)), unit, r->base_label, t, row_result(r));
  fflush(stdout);
}

static void add_check(const char* name, bool pass) {
  if (g_check_count < (int)(sizeof(g_checks) / sizeof(g_checks[0]))) {
    snprintf(g_checks[g_check_count].name, sizeof(g_checks[0].name), "%s", name);
    g_checks[g_check_count].pass = pass;
    g_check_count++;
  }
  printf("  check: %s: %s\n", name, pass ? "PASS" : "FAIL");
  fflush(stdout);
}

static void print_summary(void) {
  printf("\nsummary (ratio = cube / baseline)\n");
  printf("%-4s %-56s %12s %-10s %12s %-22s %8s %-14s %s\n", "fig", "measure", "cube", "unit",
         "baseline", "(what)", "ratio", "target", "result");
  int met = 0, missed = 0;
  for (int i = 0; i < g_row_count; ++i) {
    const row_t* r = &g_rows[i];
    char a[32], b[32], t[48], q[32];
    target_text(r, t, sizeof(t));
    if (r->has_base) fmt_ratio(row_ratio(r), q, sizeof(q));
    else snprintf(q, sizeof(q), "n/a");
    printf("%-4s %-56.56s %12s %-10s %12s %-22.22s %8s %-14s %s\n", r->id, r->name,
           fmt_val(r->cube, a, sizeof(a)), r->unit, r->has_base ? fmt_val(r->base, b, sizeof(b)) : "n/a",
           r->base_label, q, t, row_result(r));
    const char* res = row_result(r);
    if (strcmp(res, "met") == 0) met++;
    else if (strcmp(res, "MISSED") == 0) missed++;
  }
  for (int i = 0; i < g_check_count; ++i)
    printf("%-4s %-56.56s %12s %-10s %12s %-22s %8s %-14s %s\n", "chk", g_checks[i].name, "", "", "",
           "", "", "correct", g_checks[i].pass ? "PASS" : "FAIL");
  printf("targets: %d met, %d missed; checks: ", met, missed);
  int pass = 0;
  for (int i = 0; i < g_check_count; ++i) pass += g_checks[i].pass;
  printf("%d of %d pass\n", pass, g_check_count);
}

//===----------------------------------------------------------------------===//
// Statistics
//===----------------------------------------------------------------------===//

static double median_of(double* v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  return median_sorted(v, n);
}

static double gbps(double bytes, double ns) { return bytes / ns; } /* 1e9 B/s */

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

/* The cube side: dialect kernels (one source, the entry picks the kernel). */
static const char* k_cube_src =
    "CUBE_KERNEL(empty, CUBE_ARRAY(float, p))\n"
    "{\n"
    "}\n"
    "\n"
    "CUBE_KERNEL(write4, CUBE_ARRAY(uint32_t, out), uint32_t v)\n"
    "{\n"
    "    if (ABSOLUTE_POS == 0) CUBE_STORE(out, 0, v + 1u);\n"
    "}\n"
    "\n"
    "CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a)\n"
    "{\n"
    "    uint32_t i = ABSOLUTE_POS;\n"
    "    if (i < CUBE_LEN(y))\n"
    "        CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "}\n"
    "\n"
    "CUBE_KERNEL(copy, CUBE_ARRAY(const float, in), CUBE_ARRAY(float, out))\n"
    "{\n"
    "    uint32_t i = ABSOLUTE_POS;\n"
    "    if (i < CUBE_LEN(out))\n"
    "        CUBE_STORE(out, i, CUBE_LOAD(in, i));\n"
    "}\n"
    "\n"
    "/* The same copy 16 bytes per unit (docs/dialect.md, \"Vector types\"); the unit\n"
    " * after the last whole vector copies the tail. */\n"
    "CUBE_KERNEL(copy4, CUBE_ARRAY(const float, in), CUBE_ARRAY(float, out))\n"
    "{\n"
    "    uint32_t i = ABSOLUTE_POS;\n"
    "    uint64_t nv = CUBE_LEN(out) / 4;\n"
    "    if (i < nv)\n"
    "        CUBE_VSTORE(float4, out, i, CUBE_VLOAD(float4, in, i));\n"
    "    else if (i == nv)\n"
    "        for (uint64_t k = nv * 4; k < CUBE_LEN(out); ++k) CUBE_STORE(out, k, CUBE_LOAD(in, k));\n"
    "}\n"
    "\n"
    "CUBE_KERNEL(addc, CUBE_ARRAY(float, x), float v)\n"
    "{\n"
    "    uint32_t i = ABSOLUTE_POS;\n"
    "    if (i < CUBE_LEN(x))\n"
    "        CUBE_STORE(x, i, CUBE_LOAD(x, i) + v);\n"
    "}\n";

/* The kernel of the cache figure: saxpy alone (a one-line kernel). */
static const char* k_cache_src =
    "CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a)\n"
    "{\n"
    "    uint32_t i = ABSOLUTE_POS;\n"
    "    if (i < CUBE_LEN(y))\n"
    "        CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "}\n";

/* The raw side: the same bodies in plain CUDA C, the same argument ABI
 * (a buffer is its pointer and its length in bytes), plus the add kernel of
 * cuda_driver_limits.c. */
static const char* k_raw_src =
    "extern \"C\" __global__ void empty(float* p, unsigned long long p_bytes) {}\n"
    "extern \"C\" __global__ void write4(unsigned* out, unsigned long long out_bytes, unsigned v) {\n"
    "  if (blockIdx.x * blockDim.x + threadIdx.x == 0) out[0] = v + 1u;\n"
    "}\n"
    "extern \"C\" __global__ void saxpy(const float* x, unsigned long long x_bytes, float* y,\n"
    "                                  unsigned long long y_bytes, float a) {\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < y_bytes / sizeof(float)) y[i] = a * x[i] + y[i];\n"
    "}\n"
    "extern \"C\" __global__ void copy(const float* in, unsigned long long in_bytes, float* out,\n"
    "                                 unsigned long long out_bytes) {\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < out_bytes / sizeof(float)) out[i] = in[i];\n"
    "}\n"
    "extern \"C\" __global__ void copy4(const float4* in, unsigned long long in_bytes, float4* out,\n"
    "                                  unsigned long long out_bytes) {\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < out_bytes / sizeof(float4)) out[i] = in[i];\n"
    "}\n"
    "extern \"C\" __global__ void addc(float* x, unsigned long long x_bytes, float v) {\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < x_bytes / sizeof(float)) x[i] = x[i] + v;\n"
    "}\n"
    "extern \"C\" __global__ void add(const float* a, const float* b, float* c, unsigned n) {\n"
    "  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) c[i] = a[i] + b[i];\n"
    "}\n";

//===----------------------------------------------------------------------===//
// State
//===----------------------------------------------------------------------===//

static struct {
  CUdevice dev;
  CUcontext ctx;
  CUstream s;
  char arch[16];
  CUmodule mod;
  CUfunction f_empty, f_write4, f_saxpy, f_copy, f_copy4, f_add, f_addc;
  CUevent e0, e1;
} R;

static struct {
  cube_client_t* c;
  cube_kernel_t* k_empty;
  cube_kernel_t* k_write4;
  cube_kernel_t* k_saxpy;
  cube_kernel_t* k_copy;
  cube_kernel_t* k_copy4;
  cube_kernel_t* k_addc;
  cube_handle_t h_small; /* the empty kernel's argument */
} C;

/* NVRTC with the options cube's CUDA backend uses. Returns the compile time
 * in ns (create + compile + get cubin + destroy); |out_cubin| is malloc'd. */
static uint64_t raw_nvrtc(const char* text, const char* unit, char** out_cubin, size_t* out_size) {
  char arch[48];
  snprintf(arch, sizeof(arch), "--gpu-architecture=%s", R.arch);
  const char* opts[] = {arch, "--std=c++17", "-lineinfo", "--device-as-default-execution-space"};
  uint64_t t0 = now_ns();
  nvrtcProgram prog = NULL;
  nvrtcResult r = nv->CreateProgram(&prog, text, unit, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS) {
    fprintf(stderr, BENCH_NAME ": nvrtcCreateProgram(%s): %s\n", unit, nv->GetErrorString(r));
    exit(1);
  }
  r = nv->CompileProgram(prog, (int)(sizeof(opts) / sizeof(opts[0])), opts);
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    char* log = NULL;
    if (nv->GetProgramLogSize(prog, &n) == NVRTC_SUCCESS && n && (log = malloc(n + 1))) {
      if (nv->GetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = '\0';
      log[n] = '\0';
    }
    fprintf(stderr, BENCH_NAME ": NVRTC compile of %s for %s failed (%s):\n%s\n", unit, R.arch,
            nv->GetErrorString(r), log ? log : "(no log)");
    exit(1);
  }
  size_t n = 0;
  r = nv->GetCUBINSize(prog, &n);
  if (r != NVRTC_SUCCESS || n == 0) {
    fprintf(stderr, BENCH_NAME ": nvrtcGetCUBINSize(%s): %s\n", unit, nv->GetErrorString(r));
    exit(1);
  }
  char* cubin = xmalloc(n);
  r = nv->GetCUBIN(prog, cubin);
  if (r != NVRTC_SUCCESS) {
    fprintf(stderr, BENCH_NAME ": nvrtcGetCUBIN(%s): %s\n", unit, nv->GetErrorString(r));
    exit(1);
  }
  nv->DestroyProgram(&prog);
  uint64_t t1 = now_ns();
  *out_cubin = cubin;
  *out_size = n;
  return t1 - t0;
}

static cube_kernel_t* make_kernel(const char* source, const char* entry, uint32_t dim,
                                  const cube_define_t* defs, uint32_t ndefs) {
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = entry;
  d.source = source;
  d.entry = entry;
  d.cube_dim = (cube_dim_t){dim, 1, 1};
  d.defines = defs;
  d.define_count = ndefs;
  cube_kernel_t* k = NULL;
  CHECK("cube_kernel_create", cube_kernel_create(&d, &k));
  return k;
}

static void raw_setup(void) {
  CK(cu->DeviceGet(&R.dev, 0));
  CK(cu->DevicePrimaryCtxRetain(&R.ctx, R.dev));
  CK(cu->CtxSetCurrent(R.ctx));
  int major = 0, minor = 0;
  CK(cu->DeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, R.dev));
  CK(cu->DeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, R.dev));
  snprintf(R.arch, sizeof(R.arch), "sm_%d%d", major, minor);
  CK(cu->StreamCreate(&R.s, CU_STREAM_NON_BLOCKING));
  CK(cu->EventCreate(&R.e0, CU_EVENT_DEFAULT));
  CK(cu->EventCreate(&R.e1, CU_EVENT_DEFAULT));
  char* cubin = NULL;
  size_t size = 0;
  uint64_t ns = raw_nvrtc(k_raw_src, "raw_kernels.cu", &cubin, &size);
  CK(cu->ModuleLoadData(&R.mod, cubin));
  free(cubin);
  CK(cu->ModuleGetFunction(&R.f_empty, R.mod, "empty"));
  CK(cu->ModuleGetFunction(&R.f_write4, R.mod, "write4"));
  CK(cu->ModuleGetFunction(&R.f_saxpy, R.mod, "saxpy"));
  CK(cu->ModuleGetFunction(&R.f_copy, R.mod, "copy"));
  CK(cu->ModuleGetFunction(&R.f_copy4, R.mod, "copy4"));
  CK(cu->ModuleGetFunction(&R.f_add, R.mod, "add"));
  CK(cu->ModuleGetFunction(&R.f_addc, R.mod, "addc"));
  printf("raw: primary context of device 0, own stream, raw module compiled by NVRTC %d.%d for "
         "%s in %.1f ms (%zu bytes of cubin; first compile of the process)\n",
         nv->major, nv->minor, R.arch, (double)ns / 1e6, size);
}

static void cube_setup(void) {
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.queue_mode = CUBE_QUEUE_THREADED;
  CHECK("cube_client_init cuda:0 (threaded queue)",
        cube_client_init((cube_device_id_t){CUBE_BACKEND_CUDA, 0}, &o, &C.c));
  C.k_empty = make_kernel(k_cube_src, "empty", 32, NULL, 0);
  C.k_write4 = make_kernel(k_cube_src, "write4", 32, NULL, 0);
  C.k_saxpy = make_kernel(k_cube_src, "saxpy", 256, NULL, 0);
  C.k_copy = make_kernel(k_cube_src, "copy", 256, NULL, 0);
  C.k_copy4 = make_kernel(k_cube_src, "copy4", 256, NULL, 0);
  C.k_addc = make_kernel(k_cube_src, "addc", 256, NULL, 0);
  cube_kernel_t* all[6] = {C.k_empty, C.k_write4, C.k_saxpy, C.k_copy, C.k_addc, C.k_copy4};
  uint64_t t0 = now_ns();
  CHECK("cube_client_precompile", cube_client_precompile(C.c, 6, all, CUBE_EXEC_CHECKED));
  uint64_t t1 = now_ns();
  CHECK("cube_client_empty (empty kernel's argument)", cube_client_empty(C.c, 256, &C.h_small));
  const cube_device_properties_t* p = cube_client_properties(C.c);
  printf("cube: %s, %s, threaded queue (blocking: %s); 5 kernels precompiled in %.1f ms "
         "(Checked mode; disk cache: %s)\n",
         p->name, cube_client_info(C.c)->version, cube_client_is_blocking(C.c) ? "yes" : "no",
         (double)(t1 - t0) / 1e6, cube_kernel_cache_dir()[0] ? cube_kernel_cache_dir() : "off");
}

static void cube_teardown(void) {
  cube_handle_release(C.h_small);
  cube_kernel_release(C.k_empty);
  cube_kernel_release(C.k_write4);
  cube_kernel_release(C.k_saxpy);
  cube_kernel_release(C.k_copy);
  cube_kernel_release(C.k_copy4);
  cube_kernel_release(C.k_addc);
  cube_client_release(C.c);
  memset(&C, 0, sizeof(C));
}

//===----------------------------------------------------------------------===//
// 1, 2. Launch cost and throughput
//===----------------------------------------------------------------------===//

typedef struct launch_times {
  double submit_ns, total_ns;
} launch_times_t;

static launch_times_t cube_launches_of(uint64_t n, cube_kernel_t* k, cube_count_t count,
                                       uint32_t argc, const cube_arg_t* args) {
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < n; ++i) {
    cube_status_t s = cube_client_launch(C.c, k, count, argc, args);
    if (s) {
      fail_status("cube_client_launch", s);
      exit(1);
    }
  }
  uint64_t t1 = now_ns();
  CHECK("cube_client_sync", cube_client_sync(C.c));
  uint64_t t2 = now_ns();
  return (launch_times_t){(double)(t1 - t0), (double)(t2 - t0)};
}

static launch_times_t cube_launches(uint64_t n) {
  cube_arg_t arg = cube_arg_buffer(C.h_small);
  return cube_launches_of(n, C.k_empty, cube_count_static(1, 1, 1), 1, &arg);
}

static launch_times_t raw_launches(uint64_t n, CUdeviceptr p) {
  unsigned long long bytes = 256;
  void* args[] = {&p, &bytes};
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < n; ++i)
    CK(cu->LaunchKernel(R.f_empty, 1, 1, 1, 32, 1, 1, 0, R.s, args, NULL));
  uint64_t t1 = now_ns();
  CK(cu->StreamSynchronize(R.s));
  uint64_t t2 = now_ns();
  return (launch_times_t){(double)(t1 - t0), (double)(t2 - t0)};
}

static void fig_launch(void) {
  const int trials = 5;
  uint64_t n = g_n_launch;
  printf("\n## [1/2] empty kernel (1 cube of 32 units, one buffer argument), N = %" PRIu64
         " launches back to back, then sync; %d trials after 1 warm-up, medians\n",
         n, trials);
  CUdeviceptr p;
  CK(cu->MemAlloc(&p, 256));
  double rs[8], rt[8], cs[8], ct[8];
  (void)raw_launches(n / 10 + 1, p);
  for (int i = 0; i < trials; ++i) {
    launch_times_t t = raw_launches(n, p);
    rs[i] = t.submit_ns / (double)n;
    rt[i] = t.total_ns;
  }
  (void)cube_launches(n / 10 + 1);
  for (int i = 0; i < trials; ++i) {
    launch_times_t t = cube_launches(n);
    cs[i] = t.submit_ns / (double)n;
    ct[i] = t.total_ns;
  }
  double raw_submit = median_of(rs, trials) / 1e3, cube_submit = median_of(cs, trials) / 1e3;
  double raw_total = median_of(rt, trials), cube_total = median_of(ct, trials);
  char name[96];
  snprintf(name, sizeof(name), "caller-side launch cost, N = %" PRIu64, n);
  add_row("1", name, cube_submit, "us", raw_submit, true, NULL, T_ABS_LE, 0.5, "us");

  /* Bursts that fit in the 1024-cell ring: the enqueue cost itself. */
  double bs[BURSTS], br[BURSTS];
  int bursts = g_quick ? BURSTS / 10 : BURSTS;
  for (int i = 0; i < bursts; ++i) {
    launch_times_t t = raw_launches(BURST, p);
    br[i] = t.submit_ns / BURST;
  }
  for (int i = 0; i < bursts; ++i) {
    launch_times_t t = cube_launches(BURST);
    bs[i] = t.submit_ns / BURST;
  }
  snprintf(name, sizeof(name), "caller-side launch cost, bursts of %d (median of %d)", BURST,
           bursts);
  add_row("1b", name, median_of(bs, bursts) / 1e3, "us", median_of(br, bursts) / 1e3, true, NULL,
          T_ABS_LE, 0.5, "us");

  double cube_rate = (double)n / cube_total * 1e3; /* M launches / s */
  double raw_rate = (double)n / raw_total * 1e3;
  snprintf(name, sizeof(name), "sustained launches/s (N = %" PRIu64 " + sync)", n);
  add_row("2", name, cube_rate, "Mlaunch/s", raw_rate, true, NULL, T_RATIO_GE, 0.9, NULL);
  printf("  (%.3f us per launch through cube, %.3f us raw, including the sync)\n",
         cube_total / (double)n / 1e3, raw_total / (double)n / 1e3);
  CK(cu->MemFree(p));
}

//===----------------------------------------------------------------------===//
// Where the time goes: backend calls timed through the trace hook
//===----------------------------------------------------------------------===//

/* Each backend call (slot entry and exit) of a traced iteration, with the
 * time and whether the bench's own thread made it (else cube's runner).
 * Used after a figure's own measurement, in a loop of its own, so that the
 * hook's cost is not in the figure. */
typedef struct phase_ev {
  uint64_t t;
  int slot;
  int status; /* -1: entry */
  bool caller;
} phase_ev_t;

#define PHASE_EVS 64
static phase_ev_t g_pev[PHASE_EVS];
static atomic_uint g_pev_n;
static pthread_t g_pev_caller;

static void phase_hook(void* user, const cube__backend_call_t* call) {
  (void)user;
  unsigned i = atomic_fetch_add_explicit(&g_pev_n, 1, memory_order_relaxed);
  if (i >= PHASE_EVS) return;
  g_pev[i] = (phase_ev_t){now_ns(), (int)call->slot, call->status,
                          pthread_equal(pthread_self(), g_pev_caller) != 0};
}

static void phase_begin(void) {
  g_pev_caller = pthread_self();
  atomic_store(&g_pev_n, 0);
  cube__backend_set_trace(phase_hook, NULL);
}

static void phase_end(void) { cube__backend_set_trace(NULL, NULL); }

/* The first entry (|status| -1) or exit (0) of |slot| in this iteration's
 * events, at or after |from|; 0 when absent. *caller: whose thread. */
static uint64_t phase_at(int slot, bool entry, uint64_t from, bool* caller) {
  unsigned n = atomic_load(&g_pev_n);
  if (n > PHASE_EVS) n = PHASE_EVS;
  for (unsigned i = 0; i < n; ++i) {
    const phase_ev_t* e = &g_pev[i];
    if (e->slot == slot && (entry ? e->status < 0 : e->status >= 0) && e->t >= from) {
      if (caller) *caller = e->caller;
      return e->t;
    }
  }
  return 0;
}

/* Prints "name median us" for each of |n| phases over |iters| iterations
 * (columns of v[iter * n + phase]). */
static void phase_print(const char* title, const char* const* names, int n, double* v,
                        int iters) {
  printf("  where the time goes, %s (medians of %d traced iterations, us):\n", title, iters);
  double* col = xmalloc(sizeof(double) * (size_t)iters);
  for (int p = 0; p < n; ++p) {
    int m = 0;
    for (int i = 0; i < iters; ++i)
      if (v[i * n + p] >= 0) col[m++] = v[i * n + p];
    if (m) printf("    %-62s %8.3f (%d)\n", names[p], median_of(col, m) / 1e3, m);
  }
  free(col);
}

//===----------------------------------------------------------------------===//
// 9. Graphs: replay per kernel, caller-side cost of a replay, a decode step
//===----------------------------------------------------------------------===//

/* A raw CUDA graph: |n| launches of |f| (|args|, one cube of |dim| units
 * each... |count| cubes) in a chain, instantiated. */
static CUgraphExec raw_graph(CUfunction f, void** args, unsigned count, unsigned dim, int n) {
  CUgraph g;
  CK(cu->GraphCreate(&g, 0));
  CUgraphNode prev = NULL;
  for (int i = 0; i < n; ++i) {
    CUDA_KERNEL_NODE_PARAMS_v2 p;
    memset(&p, 0, sizeof(p));
    p.func = f;
    p.gridDimX = count;
    p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = dim;
    p.blockDimY = p.blockDimZ = 1;
    p.kernelParams = args;
    CUgraphNode node;
    CK(cu->GraphAddKernelNode(&node, g, prev ? &prev : NULL, prev ? 1 : 0, &p));
    prev = node;
  }
  CUgraphExec e;
  CK(cu->GraphInstantiateWithFlags(&e, g, 0));
  CK(cu->GraphDestroy(g));
  return e;
}

static cube_graph_t* cube_graph_of(cube_kernel_t* k, cube_count_t count, uint32_t argc,
                                   const cube_arg_t* args, int n) {
  CHECK("cube_client_capture_begin", cube_client_capture_begin(C.c));
  for (int i = 0; i < n; ++i) CHECK("cube_client_launch (captured)", cube_client_launch(C.c, k, count, argc, args));
  cube_graph_t* g = NULL;
  CHECK("cube_client_capture_end", cube_client_capture_end(C.c, &g));
  return g;
}

/* |reps| replays back to back, then a sync: ns per replay (total), and the
 * median caller-side ns of one replay call. */
static void cube_replays(cube_graph_t* g, int reps, double* total_ns, double* call_ns) {
  double* calls = xmalloc(sizeof(double) * (size_t)reps);
  uint64_t t0 = now_ns();
  for (int i = 0; i < reps; ++i) {
    uint64_t a = now_ns();
    CHECK("cube_client_replay", cube_client_replay(C.c, g, 0, NULL));
    calls[i] = (double)(now_ns() - a);
  }
  CHECK("cube_client_sync", cube_client_sync(C.c));
  *total_ns = (double)(now_ns() - t0) / reps;
  *call_ns = median_of(calls, reps);
  free(calls);
}

static void raw_replays(CUgraphExec e, int reps, double* total_ns, double* call_ns) {
  double* calls = xmalloc(sizeof(double) * (size_t)reps);
  uint64_t t0 = now_ns();
  for (int i = 0; i < reps; ++i) {
    uint64_t a = now_ns();
    CK(cu->GraphLaunch(e, R.s));
    calls[i] = (double)(now_ns() - a);
  }
  CK(cu->StreamSynchronize(R.s));
  *total_ns = (double)(now_ns() - t0) / reps;
  *call_ns = median_of(calls, reps);
  free(calls);
}

/* The step of bench/peers/torch_graph_step.py: |k| in-place adds of 1e-4 to
 * |n| floats. Synced: median of per-step (replay or launches + sync) times. */
static double step_synced(cube_graph_t* g, int k, cube_handle_t x, uint32_t n, int steps) {
  double* t = xmalloc(sizeof(double) * (size_t)steps);
  cube_arg_t args[2] = {cube_arg_buffer(x), cube_arg_f32(1e-4f)};
  cube_count_t count = cube_count_static((n + 255) / 256, 1, 1);
  for (int s = 0; s < steps; ++s) {
    uint64_t t0 = now_ns();
    if (g) {
      CHECK("cube_client_replay (step)", cube_client_replay(C.c, g, 0, NULL));
    } else {
      for (int i = 0; i < k; ++i)
        CHECK("cube_client_launch (step)", cube_client_launch(C.c, C.k_addc, count, 2, args));
    }
    CHECK("cube_client_sync (step)", cube_client_sync(C.c));
    t[s] = (double)(now_ns() - t0);
  }
  double m = median_of(t, steps);
  free(t);
  return m;
}

/* The step again, |steps| replays + syncs with the trace hook on, then the
 * raw graph's: the parts of a step. Returns the steps it applied to the
 * graph's buffer. */
static int step_variants(cube_handle_t hx, CUgraphExec raw, CUdeviceptr rx, int steps);

static int step_phases(cube_graph_t* g, cube_handle_t hx, CUgraphExec raw, CUdeviceptr rx,
                       int steps) {
  enum { P = 7 };
  static const char* const names[P] = {
      "cube_client_replay returns (caller)",
      "call -> cuGraphLaunch entered (graph_launch slot)",
      "graph_launch slot (cuGraphLaunch)",
      "graph_launch exit -> sync slot entry",
      "sync slot (cuStreamSynchronize)",
      "sync slot exit -> cube_client_sync returns",
      "whole step (traced)"};
  double* v = xmalloc(sizeof(double) * (size_t)steps * P);
  int sync_on_caller = 0, launch_on_caller = 0;
  for (int i = 0; i < steps; ++i) {
    phase_begin();
    uint64_t t0 = now_ns();
    CHECK("cube_client_replay (step)", cube_client_replay(C.c, g, 0, NULL));
    uint64_t t1 = now_ns();
    CHECK("cube_client_sync (step)", cube_client_sync(C.c));
    uint64_t t6 = now_ns();
    phase_end();
    bool sc = false, lc = false;
    uint64_t li = phase_at(CUBE__SLOT_GRAPH_LAUNCH, true, t0, &lc);
    uint64_t lo = phase_at(CUBE__SLOT_GRAPH_LAUNCH, false, t0, NULL);
    uint64_t si = phase_at(CUBE__SLOT_SYNC, true, t0, &sc);
    uint64_t so = phase_at(CUBE__SLOT_SYNC, false, t0, NULL);
    double* r = v + (size_t)i * P;
    r[0] = (double)(t1 - t0);
    r[1] = li ? (double)(li - t0) : -1;
    r[2] = li && lo ? (double)(lo - li) : -1;
    r[3] = lo && si ? (double)si - (double)lo : -1;
    r[4] = si && so ? (double)(so - si) : -1;
    r[5] = so ? (double)(t6 - so) : -1;
    r[6] = (double)(t6 - t0);
    sync_on_caller += sc;
    launch_on_caller += lc;
  }
  phase_print("cube step", names, P, v, steps);
  printf("    cuGraphLaunch on the calling thread in %d of %d, the sync in %d of %d\n",
         launch_on_caller, steps, sync_on_caller, steps);
  enum { Q = 3 };
  static const char* const rnames[Q] = {"cuGraphLaunch", "cuStreamSynchronize", "whole step"};
  for (int i = 0; i < steps; ++i) {
    uint64_t t0 = now_ns();
    CK(cu->GraphLaunch(raw, R.s));
    uint64_t t1 = now_ns();
    CK(cu->StreamSynchronize(R.s));
    uint64_t t2 = now_ns();
    double* r = v + (size_t)i * Q;
    r[0] = (double)(t1 - t0);
    r[1] = (double)(t2 - t1);
    r[2] = (double)(t2 - t0);
  }
  phase_print("raw step", rnames, Q, v, steps);
  free(v);
  return steps + step_variants(hx, raw, rx, steps);
}

/* The raw graph's step beside raw graphs that differ from it in one way
 * each, to tell where a difference between cube's replay and the raw graph
 * comes from: an event recorded after each launch (as cube's native graph
 * does), the kernel code cube generates for the same kernel (NVRTC'd here,
 * run on the raw buffer), the raw kernel on cube's buffer. Median of |steps|
 * launches + syncs each, 3 alternating rounds. Returns the steps applied to
 * cube's buffer |hx|. */
static int step_variants(cube_handle_t hx, CUgraphExec raw, CUdeviceptr rx, int steps) {
  const int k = 200;
  const uint32_t n = 4096;
  static const char* k_addc = "CUBE_KERNEL(addc, CUBE_ARRAY(float, x), float v)\n"
                              "{\n"
                              "    uint32_t i = ABSOLUTE_POS;\n"
                              "    if (i < CUBE_LEN(x))\n"
                              "        CUBE_STORE(x, i, CUBE_LOAD(x, i) + v);\n"
                              "}\n";
  cube__signature_t sig;
  CHECK("cube__dialect_parse (addc)", cube__dialect_parse(k_addc, "addc", &sig));
  char* text = NULL;
  CHECK("cube__dialect_generate (addc)",
        cube__dialect_generate(CUBE__TARGET_CUDA, &sig, k_addc, NULL, 0, CUBE_EXEC_CHECKED, &text));
  /* The same unit in the 1-D form the backend compiles for launches of 1 in y
   * and z (CUBE_LAUNCH_1D ahead of it, as cuda_kernel.c does), to see what
   * the 3-D form's positions cost. */
  static const char one_d[] = "#define CUBE_LAUNCH_1D 1\n";
  char* text1 = xmalloc(strlen(text) + sizeof(one_d));
  strcpy(text1, one_d);
  strcat(text1, text);
  CUmodule m, m1;
  CUfunction f, f1;
  for (int u = 0; u < 2; ++u) {
    char* cubin = NULL;
    size_t size = 0;
    (void)raw_nvrtc(u ? text1 : text, "addc.cu", &cubin, &size);
    CK(cu->CtxSetCurrent(R.ctx));
    CK(cu->ModuleLoadData(u ? &m1 : &m, cubin));
    CK(cu->ModuleGetFunction(u ? &f1 : &f, u ? m1 : m, "cube_kernel_entry"));
    free(cubin);
  }
  free(text);
  free(text1);
  unsigned long long xb = n * 4;
  float v = 1e-4f;
  void* args_raw[] = {&rx, &xb, &v};
  CUgraphExec cubecode = raw_graph(f, args_raw, (n + 255) / 256, 256, k);
  CUgraphExec cubecode1 = raw_graph(f1, args_raw, (n + 255) / 256, 256, k);
  cube_resource_t* res = NULL;
  CHECK("cube_client_get_resource (step)", cube_client_get_resource(C.c, hx, &res));
  CUdeviceptr cx = (CUdeviceptr)(uintptr_t)cube_resource_ptr(res);
  void* args_cube[] = {&cx, &xb, &v};
  CUgraphExec onbuf = raw_graph(R.f_addc, args_cube, (n + 255) / 256, 256, k);
  CUevent ev;
  CK(cu->EventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  enum { VARIANTS = 5, ROUNDS = 3 };
  static const char* const names[VARIANTS] = {
      "raw graph", "raw graph + cuEventRecord after it",
      "raw graph of cube's generated kernel, 3-D form", "raw graph on cube's buffer",
      "raw graph of cube's generated kernel, 1-D form (cube's)"};
  CUgraphExec execs[VARIANTS] = {raw, raw, cubecode, onbuf, cubecode1};
  double* t = xmalloc(sizeof(double) * (size_t)steps);
  double med[VARIANTS][ROUNDS];
  int on_hx = 0;
  for (int r = 0; r < ROUNDS; ++r) {
    for (int vi = 0; vi < VARIANTS; ++vi) {
      for (int i = 0; i < steps; ++i) {
        uint64_t t0 = now_ns();
        CK(cu->GraphLaunch(execs[vi], R.s));
        if (vi == 1) CK(cu->EventRecord(ev, R.s));
        CK(cu->StreamSynchronize(R.s));
        t[i] = (double)(now_ns() - t0);
      }
      if (vi == 3) on_hx += steps;
      med[vi][r] = median_of(t, steps) / 1e3;
    }
  }
  printf("  raw variants of the step (medians of %d steps, %d alternating rounds, us):\n", steps,
         ROUNDS);
  for (int vi = 0; vi < VARIANTS; ++vi)
    printf("    %-62s %8.2f %8.2f %8.2f\n", names[vi], med[vi][0], med[vi][1], med[vi][2]);
  free(t);
  CK(cu->EventDestroy(ev));
  CK(cu->GraphExecDestroy(cubecode));
  CK(cu->GraphExecDestroy(cubecode1));
  CK(cu->GraphExecDestroy(onbuf));
  CK(cu->ModuleUnload(m));
  CK(cu->ModuleUnload(m1));
  cube_resource_release(res);
  return on_hx;
}

static void fig_graph(void) {
  const int nodes = 1000, reps = g_quick ? 10 : 50, trials = 5;
  printf("\n## [9] graphs: %d empty kernels (1 cube of 32 units) captured once, %d replays back "
         "to back + sync, %d trials, medians; raw: the same chain as a CUDA graph "
         "(cuGraphAddKernelNode, instantiated once, cuGraphLaunch)\n",
         nodes, reps, trials);
  CUdeviceptr p;
  CK(cu->MemAlloc(&p, 256));
  unsigned long long bytes = 256;
  void* rargs[] = {&p, &bytes};
  CUgraphExec re = raw_graph(R.f_empty, rargs, 1, 32, nodes);
  cube_arg_t arg = cube_arg_buffer(C.h_small);
  cube_graph_t* cg = cube_graph_of(C.k_empty, cube_count_static(1, 1, 1), 1, &arg, nodes);
  cube_graph_t* cg10 = cube_graph_of(C.k_empty, cube_count_static(1, 1, 1), 1, &arg, 10);
  double rt[8], rc[8], ct[8], cc[8], c10[8], lt[8];
  double tot, call;
  raw_replays(re, 2, &tot, &call);
  cube_replays(cg, 2, &tot, &call); /* the first replay builds the native graph */
  cube_replays(cg10, 2, &tot, &call);
  for (int i = 0; i < trials; ++i) { /* alternating */
    raw_replays(re, reps, &rt[i], &rc[i]);
    cube_replays(cg, reps, &ct[i], &cc[i]);
    cube_replays(cg10, reps, &tot, &c10[i]);
  }
  bool native = cube_graph_is_native(cg);
  /* The same graph node by node (a fresh graph: the choice is made at its
   * first replay). */
  CHECK("CUBE_GRAPHS_NATIVE=0", cube_option_set_u64(CUBE_OPTION_GRAPHS_NATIVE, 0));
  cube_graph_t* cl = cube_graph_of(C.k_empty, cube_count_static(1, 1, 1), 1, &arg, nodes);
  cube_replays(cl, 2, &tot, &call);
  for (int i = 0; i < trials; ++i) cube_replays(cl, reps / 5 + 1, &lt[i], &call);
  CHECK("CUBE_GRAPHS_NATIVE=1", cube_option_set_u64(CUBE_OPTION_GRAPHS_NATIVE, 1));
  printf("  cube's graph is %s; node by node (CUBE_GRAPHS_NATIVE=0): %.3f us per kernel\n",
         native ? "a native CUDA graph" : "NOT native (node by node)",
         median_of(lt, trials) / nodes / 1e3);
  char name[96];
  snprintf(name, sizeof(name), "graph replay per kernel (%d nodes)", nodes);
  add_row("9", name, median_of(ct, trials) / nodes / 1e3, "us", median_of(rt, trials) / nodes / 1e3,
          true, "raw graph", T_RATIO_LE, 1.1, NULL);
  snprintf(name, sizeof(name), "caller-side cost of one replay (%d nodes)", nodes);
  add_row("9b", name, median_of(cc, trials) / 1e3, "us", median_of(rc, trials) / 1e3, true,
          "raw graph", T_ABS_LE, 2, "us");
  add_row("9c", "caller-side cost of one replay (10 nodes)", median_of(c10, trials) / 1e3, "us",
          0, false, NULL, T_ABS_LE, 2, "us");
  cube_graph_release(cl);
  cube_graph_release(cg);
  cube_graph_release(cg10);
  CK(cu->GraphExecDestroy(re));
  CK(cu->MemFree(p));

  /* The step. */
  const int k = 200, steps = g_quick ? 20 : 50;
  const uint32_t n = 4096;
  printf("\n## [9d] the step of bench/peers/torch_graph_step.py: %d in-place adds of 1e-4 to %u "
         "floats; per step (replay or %d launches, then sync), median of %d steps, alternating\n",
         k, n, k, steps);
  float* x0 = xmalloc(n * sizeof(float));
  for (uint32_t i = 0; i < n; ++i) x0[i] = (float)(i % 97) * 0.25f;
  cube_handle_t hx;
  CHECK("cube_client_create_from_slice (step)", cube_client_create_from_slice(C.c, x0, n * 4, &hx));
  cube_arg_t sargs[2] = {cube_arg_buffer(hx), cube_arg_f32(1e-4f)};
  cube_graph_t* sg = cube_graph_of(C.k_addc, cube_count_static((n + 255) / 256, 1, 1), 2, sargs, k);
  CUdeviceptr rx;
  CK(cu->MemAlloc(&rx, n * 4));
  CK(cu->MemcpyHtoDAsync(rx, x0, n * 4, R.s));
  unsigned long long xb = n * 4;
  float v = 1e-4f;
  void* aargs[] = {&rx, &xb, &v};
  CUgraphExec se = raw_graph(R.f_addc, aargs, (n + 255) / 256, 256, k);
  double gs[8], es[8], rs[8];
  int done_steps = 0; /* steps applied to hx, for the check */
  (void)step_synced(sg, k, hx, n, 3);
  (void)step_synced(NULL, k, hx, n, 3);
  done_steps += 6;
  for (int i = 0; i < trials; ++i) {
    gs[i] = step_synced(sg, k, hx, n, steps);
    es[i] = step_synced(NULL, k, hx, n, steps);
    done_steps += 2 * steps;
    double* t = xmalloc(sizeof(double) * (size_t)steps);
    for (int s = 0; s < steps; ++s) {
      uint64_t t0 = now_ns();
      CK(cu->GraphLaunch(se, R.s));
      CK(cu->StreamSynchronize(R.s));
      t[s] = (double)(now_ns() - t0);
    }
    rs[i] = median_of(t, steps);
    free(t);
  }
  done_steps += step_phases(sg, hx, se, rx, steps);
  /* Check: every add happened, in order (float adds, the same on the host). */
  float* got = xmalloc(n * sizeof(float));
  cube_bytes_t* b = NULL;
  CHECK("cube_client_read_one (step)", cube_client_read_one(C.c, hx, &b));
  memcpy(got, cube_bytes_const_data(b), n * 4);
  cube_bytes_release(b);
  uint32_t bad = 0;
  for (uint32_t i = 0; i < n; i += 61) {
    float e = x0[i];
    for (long j = 0; j < (long)done_steps * k; ++j) e = e + 1e-4f;
    if (got[i] != e) ++bad;
  }
  if (bad) wrong("the step's result differs from the host's adds in %u of %u checked elements", bad,
                 (n + 60) / 61);
  double g_us = median_of(gs, trials) / 1e3, e_us = median_of(es, trials) / 1e3;
  double r_us = median_of(rs, trials) / 1e3;
  printf("  cube graph %.1f us/step (%.3f us/kernel), cube eager %.1f us/step, raw graph %.1f "
         "us/step; result checked: %s\n",
         g_us, g_us / k, e_us, r_us, bad ? "WRONG" : "equal to the host's adds");
  add_row("9d", "step of 200 adds: replay + sync", g_us, "us", r_us, true, "raw graph", T_RATIO_LE,
          1.1, NULL);
  add_row("9e", "step of 200 adds: replay vs cube eager", g_us, "us", e_us, true, "cube eager",
          T_RATIO_LE, 1.0 / 3.0, NULL);
  const char* torch = getenv("CUBE_BENCH_TORCH_GRAPH_STEP_US");
  if (torch && atof(torch) > 0)
    add_row("9f", "step of 200 adds vs PyTorch CUDA graph", g_us, "us", atof(torch), true,
            "torch graph", T_RATIO_LE, 1.0, NULL);
  cube_graph_release(sg);
  cube_handle_release(hx);
  CK(cu->GraphExecDestroy(se));
  CK(cu->MemFree(rx));
  free(x0);
  free(got);
}

/* Figure 3 again, |iters| iterations with the trace hook on: the parts of a
 * round trip, cube's and raw's. */
static void roundtrip_phases(cube_handle_t out, int iters) {
  enum { P = 7 };
  static const char* const names[P] = {
      "cube_client_launch returns (caller)",
      "call -> launch slot entered",
      "launch slot (cuLaunchKernel)",
      "launch slot exit -> read slot entry",
      "read slot (cuMemcpyDtoHAsync + cuStreamSynchronize)",
      "read slot exit -> cube_client_read_one returns",
      "whole round trip (traced)"};
  double* v = xmalloc(sizeof(double) * (size_t)iters * P);
  cube_count_t one = cube_count_static(1, 1, 1);
  int on_caller = 0, launch_on_caller = 0;
  for (int i = -20; i < iters; ++i) {
    cube_arg_t args[2] = {cube_arg_buffer(out), cube_arg_u32((uint32_t)i)};
    phase_begin();
    uint64_t t0 = now_ns();
    CHECK("cube_client_launch (write4)", cube_client_launch(C.c, C.k_write4, one, 2, args));
    uint64_t t1 = now_ns();
    cube_bytes_t* b = NULL;
    CHECK("cube_client_read_one (4 bytes)", cube_client_read_one(C.c, out, &b));
    uint64_t t6 = now_ns();
    phase_end();
    cube_bytes_release(b);
    if (i < 0) continue;
    bool rc = false, lc = false;
    uint64_t li = phase_at(CUBE__SLOT_LAUNCH, true, t0, &lc);
    uint64_t lo = phase_at(CUBE__SLOT_LAUNCH, false, t0, NULL);
    uint64_t ri = phase_at(CUBE__SLOT_READ, true, t0, &rc);
    uint64_t ro = phase_at(CUBE__SLOT_READ, false, t0, NULL);
    double* r = v + (size_t)i * P;
    r[0] = (double)(t1 - t0);
    r[1] = li ? (double)(li - t0) : -1;
    r[2] = li && lo ? (double)(lo - li) : -1;
    r[3] = lo && ri ? (double)ri - (double)lo : -1;
    r[4] = ri && ro ? (double)(ro - ri) : -1;
    r[5] = ro ? (double)(t6 - ro) : -1;
    r[6] = (double)(t6 - t0);
    on_caller += rc;
    launch_on_caller += lc;
  }
  phase_print("cube", names, P, v, iters);
  printf("    the launch ran on the calling thread in %d of %d, the read in %d of %d\n",
         launch_on_caller, iters, on_caller, iters);

  enum { Q = 4 };
  static const char* const rnames[Q] = {"cuLaunchKernel", "cuMemcpyDtoHAsync (4 bytes, pinned)",
                                        "cuStreamSynchronize", "whole round trip"};
  CUdeviceptr d;
  CK(cu->MemAlloc(&d, 256));
  uint32_t* pin = NULL;
  CK(cu->MemHostAlloc((void**)&pin, 4096, 0));
  unsigned long long bytes = 4;
  /* The raw loop twice: with the raw module's write4, then with the unit cube
   * generates for write4 (its 1-D form, NVRTC'd here), to tell the cost of
   * cube's kernel from the cost of cube's path to it. */
  cube__signature_t sig;
  CHECK("cube__dialect_parse (write4)", cube__dialect_parse(k_cube_src, "write4", &sig));
  char* text = NULL;
  CHECK("cube__dialect_generate (write4)",
        cube__dialect_generate(CUBE__TARGET_CUDA, &sig, k_cube_src, NULL, 0, CUBE_EXEC_CHECKED,
                               &text));
  static const char one_d[] = "#define CUBE_LAUNCH_1D 1\n";
  char* text1 = xmalloc(strlen(text) + sizeof(one_d));
  strcpy(text1, one_d);
  strcat(text1, text);
  free(text);
  char* cubin = NULL;
  size_t size = 0;
  (void)raw_nvrtc(text1, "write4.cu", &cubin, &size);
  free(text1);
  CUmodule m;
  CUfunction fc;
  CK(cu->CtxSetCurrent(R.ctx));
  CK(cu->ModuleLoadData(&m, cubin));
  CK(cu->ModuleGetFunction(&fc, m, "cube_kernel_entry"));
  free(cubin);
  for (int variant = 0; variant < 2; ++variant) {
    CUfunction f = variant ? fc : R.f_write4;
    for (int i = -20; i < iters; ++i) {
      unsigned x = (unsigned)i;
      void* a[] = {&d, &bytes, &x};
      uint64_t t0 = now_ns();
      CK(cu->LaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, R.s, a, NULL));
      uint64_t t1 = now_ns();
      CK(cu->MemcpyDtoHAsync(pin, d, 4, R.s));
      uint64_t t2 = now_ns();
      CK(cu->StreamSynchronize(R.s));
      uint64_t t3 = now_ns();
      if (*pin != x + 1u) wrong("raw round trip (%s): %u, expected %u", variant ? "cube's unit" : "raw", *pin, x + 1u);
      if (i < 0) continue;
      double* r = v + (size_t)i * Q;
      r[0] = (double)(t1 - t0);
      r[1] = (double)(t2 - t1);
      r[2] = (double)(t3 - t2);
      r[3] = (double)(t3 - t0);
    }
    phase_print(variant ? "raw, launching cube's generated write4 (1-D form)" : "raw", rnames, Q,
                v, iters);
  }
  CK(cu->ModuleUnload(m));
  CK(cu->MemFree(d));
  CK(cu->MemFreeHost(pin));
  free(v);
}

//===----------------------------------------------------------------------===//
// 3. Launch + 4-byte read back
//===----------------------------------------------------------------------===//

/* One round trip through the raw driver: launch write4(v), copy the 4 bytes
 * into pinned memory, synchronize. Returns the nanoseconds; counts a wrong
 * value in |bad|. */
static double raw_round_trip(CUdeviceptr d, uint32_t* pin, uint32_t v, uint64_t* bad) {
  unsigned long long bytes = 4;
  void* args[] = {&d, &bytes, &v};
  uint64_t t0 = now_ns();
  CK(cu->LaunchKernel(R.f_write4, 1, 1, 1, 32, 1, 1, 0, R.s, args, NULL));
  CK(cu->MemcpyDtoHAsync(pin, d, 4, R.s));
  CK(cu->StreamSynchronize(R.s));
  uint64_t t1 = now_ns();
  if (*pin != v + 1u) (*bad)++;
  return (double)(t1 - t0);
}

/* The same through cube: cube_client_launch + cube_client_read_one. */
static double cube_round_trip(cube_handle_t out, uint32_t v, uint64_t* bad) {
  cube_arg_t args[2] = {cube_arg_buffer(out), cube_arg_u32(v)};
  uint64_t t0 = now_ns();
  cube_status_t s = cube_client_launch(C.c, C.k_write4, cube_count_static(1, 1, 1), 2, args);
  if (s) {
    fail_status("cube_client_launch (write4)", s);
    exit(1);
  }
  cube_bytes_t* b = NULL;
  s = cube_client_read_one(C.c, out, &b);
  uint64_t t1 = now_ns();
  if (s) {
    fail_status("cube_client_read_one (4 bytes)", s);
    exit(1);
  }
  uint32_t got = 0;
  if (cube_bytes_size(b) != 4) (*bad)++;
  else memcpy(&got, cube_bytes_const_data(b), 4);
  if (got != v + 1u) (*bad)++;
  cube_bytes_release(b);
  return (double)(t1 - t0);
}

static void fig_roundtrip(void) {
  int warm = g_rt_warm, iters = g_rt_iters;
  enum { BLOCKS = 10 };
  const int per = iters / BLOCKS > 0 ? iters / BLOCKS : 1;
  iters = per * BLOCKS;
  printf("\n## [3] launch (kernel writes v + 1 into 4 bytes) + read back of the 4 bytes; median of "
         "%d each after %d warm-up, in %d alternating blocks of %d (raw, cube; then cube, raw)\n",
         iters, warm, BLOCKS, per);
  double* tr = xmalloc(sizeof(double) * (size_t)iters);
  double* tc = xmalloc(sizeof(double) * (size_t)iters);
  CUdeviceptr d;
  CK(cu->MemAlloc(&d, 256));
  uint32_t* pin = NULL;
  CK(cu->MemHostAlloc((void**)&pin, 4096, 0));
  cube_handle_t out;
  CHECK("cube_client_empty (4 bytes)", cube_client_empty(C.c, 4, &out));
  uint64_t bad_raw = 0, bad_cube = 0;
  uint32_t v = 0;
  for (int i = 0; i < warm; ++i) {
    (void)raw_round_trip(d, pin, v++, &bad_raw);
    (void)cube_round_trip(out, v++, &bad_cube);
  }
  int nr = 0, nc = 0;
  for (int b = 0; b < BLOCKS; ++b) {
    for (int side = 0; side < 2; ++side) {
      bool raw_now = (side == 0) == (b % 2 == 0);
      for (int i = 0; i < per; ++i) {
        if (raw_now) tr[nr++] = raw_round_trip(d, pin, v++, &bad_raw);
        else tc[nc++] = cube_round_trip(out, v++, &bad_cube);
      }
    }
  }
  if (bad_raw) wrong("raw 4-byte round trip: %" PRIu64 " wrong values", bad_raw);
  if (bad_cube) wrong("cube 4-byte round trip: %" PRIu64 " wrong values", bad_cube);
  CK(cu->MemFree(d));
  CK(cu->MemFreeHost(pin));
  roundtrip_phases(out, iters < 400 ? iters : 400);
  cube_handle_release(out);
  double raw = median_of(tr, iters) / 1e3;
  double raw_p99 = tr[(int)(0.99 * (iters - 1))] / 1e3;
  double cube = median_of(tc, iters) / 1e3;
  double cube_p99 = tc[(int)(0.99 * (iters - 1))] / 1e3;
  add_row("3", "launch + 4-byte read back", cube, "us", raw, true, NULL, T_RATIO_LE, 1.15, NULL);
  printf("  (p99: cube %.3f us, raw %.3f us)\n", cube_p99, raw_p99);
  add_check("4-byte round trip values (cube and raw)", bad_raw == 0 && bad_cube == 0);
  free(tr);
  free(tc);
}

//===----------------------------------------------------------------------===//
// 4. Pool allocation + release
//===----------------------------------------------------------------------===//

static uint64_t trial_cube_pool(void* ctx, uint64_t iters) {
  (void)ctx;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) {
    cube_handle_t h;
    cube_status_t s = cube_client_empty(C.c, 1u << 20, &h);
    if (s) {
      fail_status("cube_client_empty (1 MiB)", s);
      exit(1);
    }
    cube_handle_release(h);
  }
  return now_ns() - t0;
}

static uint64_t trial_raw_pool(void* ctx, uint64_t iters) {
  (void)ctx;
  uint64_t t0 = now_ns();
  for (uint64_t i = 0; i < iters; ++i) {
    CUdeviceptr q;
    CK(cu->MemAllocAsync(&q, 1u << 20, R.s));
    CK(cu->MemFreeAsync(q, R.s));
  }
  CK(cu->StreamSynchronize(R.s)); /* as cuda_driver_limits.c: in the timing */
  return now_ns() - t0;
}

static void fig_pool(void) {
  int trials = g_pool_trials;
  uint64_t iters = g_pool_iters;
  printf("\n## [4] allocation + release of 1 MiB, pool hit: %d trials of %" PRIu64
         " pairs after 1 warm-up trial, median per pair\n",
         trials, iters);
  stats_t cube = measure(trial_cube_pool, NULL, iters, 1, trials);
  bool have_raw = cu->MemAllocAsync && cu->MemFreeAsync && cu->DeviceGetDefaultMemPool &&
                  cu->MemPoolSetAttribute;
  int pools = 0;
  if (have_raw &&
      cu->DeviceGetAttribute(&pools, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, R.dev) != CUDA_SUCCESS)
    pools = 0;
  have_raw = have_raw && pools;
  stats_t raw = {0};
  if (have_raw) {
    CUmemoryPool pool;
    CK(cu->DeviceGetDefaultMemPool(&pool, R.dev));
    cuuint64_t thr = ~0ull;
    CK(cu->MemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
    raw = measure(trial_raw_pool, NULL, iters, 1, trials);
    /* Back to what cube's CUDA backend set at device creation (0): the default
     * pool is shared with cube. */
    thr = 0;
    CK(cu->MemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
    if (cu->MemPoolTrimTo) CK(cu->MemPoolTrimTo(pool, 0));
  } else {
    printf("  raw: stream-ordered allocation not supported here\n");
  }
  add_row("4", "pool alloc + release, 1 MiB", cube.median_us, "us", raw.median_us, have_raw, NULL,
          T_ABS_LE, 0.2, "us");
  add_row("4b", "pool alloc + release, 1 MiB, vs cuMemAllocAsync", cube.median_us, "us",
          raw.median_us, have_raw, NULL, T_RATIO_LE, 0.3, NULL);
  printf("  (min: cube %.3f us, raw %.3f us)\n", cube.min_us, raw.min_us);
}

//===----------------------------------------------------------------------===//
// 5, 6. Upload and download of 1 GiB
//===----------------------------------------------------------------------===//

static void fill_random(void* p, size_t n, uint64_t seed) {
  uint64_t x = seed | 1;
  uint64_t* w = p;
  size_t words = n / 8;
  for (size_t i = 0; i < words; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    w[i] = x;
  }
  for (size_t i = words * 8; i < n; ++i) ((uint8_t*)p)[i] = (uint8_t)i;
}

static double raw_h2d(CUdeviceptr d, const void* src, size_t n, int reps) {
  double t[16];
  CK(cu->MemcpyHtoDAsync(d, src, n, R.s)); /* warm-up */
  CK(cu->StreamSynchronize(R.s));
  for (int i = 0; i < reps; ++i) {
    uint64_t t0 = now_ns();
    CK(cu->MemcpyHtoDAsync(d, src, n, R.s));
    CK(cu->StreamSynchronize(R.s));
    t[i] = (double)(now_ns() - t0);
  }
  return gbps((double)n, median_of(t, reps));
}

static double raw_d2h(void* dst, CUdeviceptr d, size_t n, int reps) {
  double t[16];
  CK(cu->MemcpyDtoHAsync(dst, d, n, R.s)); /* warm-up */
  CK(cu->StreamSynchronize(R.s));
  for (int i = 0; i < reps; ++i) {
    uint64_t t0 = now_ns();
    CK(cu->MemcpyDtoHAsync(dst, d, n, R.s));
    CK(cu->StreamSynchronize(R.s));
    t[i] = (double)(now_ns() - t0);
  }
  return gbps((double)n, median_of(t, reps));
}

typedef struct {
  uint8_t* dst;
  const uint8_t* src;
  size_t n;
} copy_part_t;

static void* copy_part(void* p) {
  copy_part_t* c = p;
  memcpy(c->dst, c->src, c->n);
  return NULL;
}

/* The threads cube's CUDA backend copies one transfer with. */
static uint32_t host_copy_threads(void) {
  const char* e = getenv("CUBE_CUDA_COPY_THREADS");
  long v = e ? strtol(e, NULL, 10) : 0;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (v <= 0) v = cores < 16 ? cores : 16;
  if (v > cores) v = cores;
  return v > 0 ? (uint32_t)v : 1;
}

/* memcpy of |n| bytes split over |threads| threads: median GB/s of 3. */
static double host_copy_gbps(void* dst, const void* src, size_t n, uint32_t threads) {
  enum { MAXT = 64 };
  if (threads > MAXT) threads = MAXT;
  double t[3];
  for (int r = 0; r < 3; ++r) {
    pthread_t th[MAXT];
    copy_part_t parts[MAXT];
    size_t per = (n / threads + 4095) & ~(size_t)4095;
    uint64_t t0 = now_ns();
    uint32_t started = 0;
    for (uint32_t i = 0; i < threads; ++i) {
      size_t b = (size_t)i * per;
      if (b >= n) break;
      parts[i] = (copy_part_t){(uint8_t*)dst + b, (const uint8_t*)src + b, b + per > n ? n - b : per};
      if (pthread_create(&th[i], NULL, copy_part, &parts[i]) != 0) {
        copy_part(&parts[i]);
        continue;
      }
      th[started++] = th[i];
    }
    for (uint32_t i = 0; i < started; ++i) pthread_join(th[i], NULL);
    t[r] = (double)(now_ns() - t0);
  }
  return gbps((double)n, median_of(t, 3));
}

static void fig_transfers(void) {
  size_t n = g_big;
  int reps = g_copy_reps;
  double mib = (double)n / (1 << 20);
  printf("\n## [5/6] upload / download of %.0f MiB (random data); median of %d after 1 warm-up; "
         "GB/s = 1e9 B/s of bytes moved once\n",
         mib, reps);
  uint8_t* src = xmalloc(n);
  fill_random(src, n, 0x9e3779b97f4a7c15ull ^ now_ns());
  uint8_t* dst = xmalloc(n);
  memset(dst, 0, n); /* touched */
  void* pin = NULL;
  uint64_t tp = now_ns();
  CK(cu->MemHostAlloc(&pin, n, 0));
  memcpy(pin, src, n);
  printf("  raw: cuMemHostAlloc of %.0f MiB + fill took %.1f ms\n", mib,
         (double)(now_ns() - tp) / 1e6);
  CUdeviceptr d;
  CK(cu->MemAlloc(&d, n));

  /* 5. Upload. */
  double raw_pageable = raw_h2d(d, src, n, reps);
  double raw_pinned = raw_h2d(d, pin, n, reps);
  double t[16];
  for (int i = -1; i < reps; ++i) {
    cube_handle_t h;
    uint64_t t0 = now_ns();
    CHECK("cube_client_create_from_slice (big)", cube_client_create_from_slice(C.c, src, n, &h));
    CHECK("cube_client_sync", cube_client_sync(C.c));
    uint64_t t1 = now_ns();
    cube_handle_release(h);
    if (i >= 0) t[i] = (double)(t1 - t0);
  }
  double cube_up = gbps((double)n, median_of(t, reps));
  add_row("5", "upload create_from_slice (pageable) vs raw pinned", cube_up, "GB/s", raw_pinned,
          true, "raw pinned", T_ABS_GE, 40, "GB/s");
  add_row("5b", "upload create_from_slice vs raw pinned H2D", cube_up, "GB/s", raw_pinned, true,
          "raw pinned", T_RATIO_GE, 0.75, NULL);
  add_row("5c", "upload create_from_slice vs raw pageable H2D", cube_up, "GB/s", raw_pageable,
          true, "raw pageable", T_RATIO_GE, 5, NULL);

  /* 6. Download (and the round trip check). */
  cube_handle_t h;
  CHECK("cube_client_create_from_slice (big)", cube_client_create_from_slice(C.c, src, n, &h));
  CHECK("cube_client_sync", cube_client_sync(C.c));
  double raw_d_pinned = raw_d2h(pin, d, n, reps);
  double raw_d_pageable = raw_d2h(dst, d, n, reps);
  bool same = true;
  for (int i = -1; i < reps; ++i) {
    cube_bytes_t* b = NULL;
    uint64_t t0 = now_ns();
    CHECK("cube_client_read_one (big)", cube_client_read_one(C.c, h, &b));
    uint64_t t1 = now_ns();
    if (i == -1) {
      same = cube_bytes_size(b) == n && memcmp(cube_bytes_const_data(b), src, n) == 0;
      if (!same) wrong("create_from_slice -> read_one of %zu bytes: content differs", n);
      printf("  cube: read_one returns %s bytes\n", cube_bytes_property_name(cube_bytes_property(b)));
    }
    cube_bytes_release(b);
    if (i >= 0) t[i] = (double)(t1 - t0);
  }
  double cube_down = gbps((double)n, median_of(t, reps));
  /* 6c. Into the caller's ordinary memory: read_into, through the ring. */
  bool into_same = true;
  for (int i = -1; i < reps; ++i) {
    if (i == -1) memset(dst, 0, n);
    uint64_t t0 = now_ns();
    CHECK("cube_client_read_into (big)", cube_client_read_into(C.c, h, dst, n));
    uint64_t t1 = now_ns();
    if (i == -1) {
      into_same = memcmp(dst, src, n) == 0;
      if (!into_same) wrong("create_from_slice -> read_into of %zu bytes: content differs", n);
    }
    if (i >= 0) t[i] = (double)(t1 - t0);
  }
  double cube_into = gbps((double)n, median_of(t, reps));
  cube_handle_release(h);
  add_row("6", "download read_one vs raw D2H pinned", cube_down, "GB/s", raw_d_pinned, true,
          "raw pinned", T_ABS_GE, 40, "GB/s");
  add_row("6b", "download read_one vs raw D2H pageable", cube_down, "GB/s", raw_d_pageable, true,
          "raw pageable", T_INFO, 0, NULL);
  add_row("6c", "download read_into (pageable memory) vs raw D2H pinned", cube_into, "GB/s",
          raw_d_pinned, true, "raw pinned", T_ABS_GE, 40, "GB/s");
  add_row("6d", "download read_into (pageable) vs raw D2H pageable", cube_into, "GB/s",
          raw_d_pageable, true, "raw pageable", T_INFO, 0, NULL);
  /* What the host side allows: the copy between pageable and pinned memory
   * that a staged transfer must make, over as many threads as cube uses. */
  uint32_t threads = host_copy_threads();
  double up_host = host_copy_gbps(pin, src, n, threads);
  double down_host = host_copy_gbps(dst, pin, n, threads);
  printf("  host copy ceiling (memcpy over %u threads, no DMA running): pageable -> pinned %.1f GB/s, "
         "pinned -> pageable %.1f GB/s\n", threads, up_host, down_host);
  add_row("5d", "upload create_from_slice vs host copy ceiling (same threads)", cube_up, "GB/s",
          up_host, true, "host memcpy", T_INFO, 0, NULL);
  memcpy(dst, src, n); /* host_copy_gbps overwrote it */
  CK(cu->MemcpyDtoHAsync(dst, d, n, R.s)); /* the raw round trip, again */
  CK(cu->StreamSynchronize(R.s));
  bool raw_same = memcmp(dst, src, n) == 0 && memcmp(pin, src, n) == 0;
  if (!raw_same) wrong("raw H2D -> D2H of %zu bytes: content differs", n);
  add_check("upload -> download round trip content (cube and raw)", same && raw_same);
  add_check("upload -> read_into round trip content", into_same);

  CK(cu->MemFree(d));
  CK(cu->MemFreeHost(pin));
  free(src);
  free(dst);
}

//===----------------------------------------------------------------------===//
// 8. Bandwidth kernels
//===----------------------------------------------------------------------===//

typedef struct prof_ctx {
  cube_kernel_t* k;
  cube_count_t count;
  cube_arg_t args[3];
  size_t nargs;
  int reps;
} prof_ctx_t;

static cube_status_t prof_launches(void* user) {
  prof_ctx_t* p = user;
  for (int i = 0; i < p->reps; ++i) {
    cube_status_t s = cube_client_launch(C.c, p->k, p->count, p->nargs, p->args);
    if (s) return s;
  }
  return CUBE_OK;
}

/* Median over FIG8_TRIALS (after 1 warm-up) of |p->reps| launches timed by
 * cube_client_profile; returns ns per launch. */
static double cube_profiled(prof_ctx_t* p, const char* name, cube_timing_method_t* method) {
  double t[FIG8_TRIALS];
  for (int i = -1; i < FIG8_TRIALS; ++i) {
    cube_profile_duration_t d;
    CHECK("cube_client_profile", cube_client_profile(C.c, prof_launches, p, name, &d));
    *method = d.method;
    if (i >= 0) t[i] = (double)cube_profile_duration_ns(&d) / p->reps;
  }
  return median_of(t, FIG8_TRIALS);
}

typedef enum raw_op_e { RAW_D2D, RAW_SAXPY, RAW_COPY, RAW_COPY4, RAW_ADD } raw_op_t;

/* Median over FIG8_TRIALS (after 1 warm-up) of |reps| operations between two
 * events; returns ns per operation. */
static double raw_timed(raw_op_t op, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, size_t bytes,
                        int reps) {
  unsigned long long nb = bytes;
  unsigned n = (unsigned)(bytes / 4);
  float alpha = SAXPY_A;
  unsigned blocks = (n + 255) / 256;
  double t[FIG8_TRIALS];
  for (int i = -1; i < FIG8_TRIALS; ++i) {
    CK(cu->EventRecord(R.e0, R.s));
    for (int r = 0; r < reps; ++r) {
      if (op == RAW_D2D) {
        CK(cu->MemcpyDtoDAsync(b, a, bytes, R.s));
      } else if (op == RAW_SAXPY) {
        void* args[] = {&a, &nb, &b, &nb, &alpha};
        CK(cu->LaunchKernel(R.f_saxpy, blocks, 1, 1, 256, 1, 1, 0, R.s, args, NULL));
      } else if (op == RAW_COPY) {
        void* args[] = {&a, &nb, &b, &nb};
        CK(cu->LaunchKernel(R.f_copy, blocks, 1, 1, 256, 1, 1, 0, R.s, args, NULL));
      } else if (op == RAW_COPY4) { /* bytes is a multiple of 1 KiB here */
        void* args[] = {&a, &nb, &b, &nb};
        CK(cu->LaunchKernel(R.f_copy4, (n / 4 + 255) / 256, 1, 1, 256, 1, 1, 0, R.s, args, NULL));
      } else {
        void* args[] = {&a, &b, &c, &n};
        CK(cu->LaunchKernel(R.f_add, blocks, 1, 1, 256, 1, 1, 0, R.s, args, NULL));
      }
    }
    CK(cu->EventRecord(R.e1, R.s));
    CK(cu->EventSynchronize(R.e1));
    float ms = 0;
    CK(cu->EventElapsedTime(&ms, R.e0, R.e1));
    if (i >= 0) t[i] = (double)ms * 1e6 / reps;
  }
  return median_of(t, FIG8_TRIALS);
}

/* Why the staged upload of 1 GiB from ordinary memory swung (issue 16, part
 * 4): the same create_from_slice + sync from sources prepared four ways, in
 * rounds that alternate them (order rotated each round): "as is" (malloc and
 * filled, as figure 5: the host's transparent huge page policy decides its
 * pages), "4 KiB pages" (madvise MADV_NOHUGEPAGE before the fill), "huge
 * pages" (MADV_HUGEPAGE before the fill) and "not touched" (a fresh
 * allocation each trial, never written: its pages are first mapped by the
 * upload's own reads). Opt-in: CUBE_BENCH_ONLY=upload_why. */
static void fig_upload_why(void) {
  size_t n = g_big;
  enum { KINDS = 4, ROUNDS = 7 };
  static const char* const names[KINDS] = {"as is", "4 KiB pages", "huge pages", "not touched"};
  char thp[128] = "?";
  FILE* f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f) {
    if (!fgets(thp, sizeof(thp), f)) snprintf(thp, sizeof(thp), "?");
    fclose(f);
    thp[strcspn(thp, "\n")] = 0;
  }
  printf("\n## [5w] why the upload swings: create_from_slice of %.0f MiB + sync, %d rounds "
         "alternating four sources (THP: %s)\n",
         (double)n / (1 << 20), ROUNDS, thp);
  uint8_t* src[3];
  for (int k = 0; k < 3; ++k) {
    void* p = NULL;
    if (posix_memalign(&p, (size_t)2 << 20, n) != 0) {
      printf("  no host memory\n");
      return;
    }
#ifdef MADV_HUGEPAGE
    if (k == 1) (void)madvise(p, n, MADV_NOHUGEPAGE);
    if (k == 2) (void)madvise(p, n, MADV_HUGEPAGE);
#endif
    fill_random(p, n, 0x51ed270b1f4a7c15ull + (uint64_t)k);
    src[k] = p;
  }
  double t[KINDS][ROUNDS];
  for (int r = -1; r < ROUNDS; ++r) {
    for (int j = 0; j < KINDS; ++j) {
      int k = (j + (r < 0 ? 0 : r)) % KINDS;
      uint8_t* from = k < 3 ? src[k] : mmap(NULL, n, PROT_READ | PROT_WRITE,
                                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (from == MAP_FAILED) {
        printf("  mmap failed\n");
        return;
      }
      cube_handle_t h;
      uint64_t t0 = now_ns();
      CHECK("cube_client_create_from_slice (upload_why)",
            cube_client_create_from_slice(C.c, from, n, &h));
      CHECK("cube_client_sync", cube_client_sync(C.c));
      uint64_t t1 = now_ns();
      cube_handle_release(h);
      if (k == 3) munmap(from, n);
      if (r >= 0) t[k][r] = (double)(t1 - t0);
    }
  }
  for (int k = 0; k < KINDS; ++k) {
    double v[ROUNDS];
    memcpy(v, t[k], sizeof(v));
    double med = median_of(v, ROUNDS);
    double lo = v[0], hi = v[0];
    for (int i = 1; i < ROUNDS; ++i) {
      if (v[i] < lo) lo = v[i];
      if (v[i] > hi) hi = v[i];
    }
    printf("  %-12s median %6.2f GB/s (min %6.2f, max %6.2f) over %d rounds\n", names[k],
           gbps((double)n, med), gbps((double)n, hi), gbps((double)n, lo), ROUNDS);
  }
  for (int k = 0; k < 3; ++k) free(src[k]);
}

static void fig_bandwidth(void) {
  size_t bytes = g_big;
  uint64_t n = bytes / 4;
  int reps = g_kernel_reps;
  printf("\n## [8] device bandwidth over %.0f MiB arrays (%" PRIu64 " floats, cube dim 256): %d "
         "launches per trial, median of %d trials after 1 warm-up; cube timed with "
         "cube_client_profile, raw with events\n",
         (double)bytes / (1 << 20), n, reps, FIG8_TRIALS);
  /* Raw. */
  CUdeviceptr a, b, c;
  CK(cu->MemAlloc(&a, bytes));
  CK(cu->MemAlloc(&b, bytes));
  CK(cu->MemAlloc(&c, bytes));
  CK(cu->MemsetD32Async(a, 0x3f800000u, n, R.s)); /* 1.0f */
  CK(cu->MemsetD32Async(b, 0x40000000u, n, R.s)); /* 2.0f */
  CK(cu->StreamSynchronize(R.s));
  double d2d = gbps(2.0 * (double)bytes, raw_timed(RAW_D2D, a, b, c, bytes, reps));
  double raw_add = gbps(3.0 * (double)bytes, raw_timed(RAW_ADD, a, b, c, bytes, reps));
  double raw_saxpy = gbps(3.0 * (double)bytes, raw_timed(RAW_SAXPY, a, b, c, bytes, reps));
  double raw_copy = gbps(2.0 * (double)bytes, raw_timed(RAW_COPY, a, b, c, bytes, reps));
  double raw_copy4 = gbps(2.0 * (double)bytes, raw_timed(RAW_COPY4, a, b, c, bytes, reps));
  CK(cu->MemFree(a));
  CK(cu->MemFree(b));
  CK(cu->MemFree(c));
  printf("  raw: cuMemcpyDtoDAsync %.1f GB/s (read + written), add kernel %.1f GB/s, saxpy "
         "kernel %.1f GB/s, copy kernel %.1f GB/s, float4 copy kernel %.1f GB/s\n",
         d2d, raw_add, raw_saxpy, raw_copy, raw_copy4);

  /* cube: x[i] = i mod 1024, y[i] = i mod 7 (every value stays exact). */
  float* hx = xmalloc(bytes);
  float* hy = xmalloc(bytes);
  for (uint64_t i = 0; i < n; ++i) {
    hx[i] = (float)(i & 1023u);
    hy[i] = (float)(i % 7u);
  }
  cube_handle_t x, y, out;
  CHECK("cube_client_create_from_slice (x)", cube_client_create_from_slice(C.c, hx, bytes, &x));
  CHECK("cube_client_create_from_slice (y)", cube_client_create_from_slice(C.c, hy, bytes, &y));
  CHECK("cube_client_empty (out)", cube_client_empty(C.c, bytes, &out));
  cube_handle_t out4;
  CHECK("cube_client_empty (out4)", cube_client_empty(C.c, bytes, &out4));
  CHECK("cube_client_sync", cube_client_sync(C.c));
  cube_timing_method_t method = CUBE_TIMING_SYSTEM;
  prof_ctx_t ps = {C.k_saxpy, cube_count_static((uint32_t)(n / 256), 1, 1),
                   {cube_arg_buffer(x), cube_arg_buffer(y), cube_arg_f32(SAXPY_A)}, 3, reps};
  double cube_saxpy = gbps(3.0 * (double)bytes, cube_profiled(&ps, "saxpy", &method));
  int saxpy_runs = (FIG8_TRIALS + 1) * reps;
  prof_ctx_t pc = {C.k_copy, cube_count_static((uint32_t)(n / 256), 1, 1),
                   {cube_arg_buffer(x), cube_arg_buffer(out), cube_arg_f32(0)}, 2, reps};
  double cube_copy = gbps(2.0 * (double)bytes, cube_profiled(&pc, "copy", &method));
  /* float4: one unit per 4 floats, and one more for the tail (none here). */
  uint64_t units4 = n / 4 + 1;
  prof_ctx_t pc4 = {C.k_copy4, cube_count_static((uint32_t)((units4 + 255) / 256), 1, 1),
                    {cube_arg_buffer(x), cube_arg_buffer(out4), cube_arg_f32(0)}, 2, reps};
  double cube_copy4 = gbps(2.0 * (double)bytes, cube_profiled(&pc4, "copy4", &method));
  printf("  cube: timing method %s\n",
         method == CUBE_TIMING_DEVICE ? "device (events)" : "system (host clock around syncs)");
  add_row("8", "saxpy (12 B/elem) vs raw D2D copy rate", cube_saxpy, "GB/s", d2d, true,
          "raw D2D", T_INFO, 0, NULL);
  add_row("8b", "saxpy vs raw saxpy kernel (same body)", cube_saxpy, "GB/s", raw_saxpy, true,
          NULL, T_INFO, 0, NULL);
  add_row("8c", "copy kernel (8 B/elem) vs raw D2D copy rate", cube_copy, "GB/s", d2d, true,
          "raw D2D", T_INFO, 0, NULL);
  add_row("8d", "copy kernel vs raw copy kernel (same body)", cube_copy, "GB/s", raw_copy, true,
          NULL, T_INFO, 0, NULL);
  add_row("8e", "saxpy vs raw add kernel (cuda_driver_limits)", cube_saxpy, "GB/s", raw_add, true,
          NULL, T_INFO, 0, NULL);
  /* Issue 16: the vectorised copy kernel >= 0.9x the raw D2D copy rate. */
  add_row("8f", "float4 copy kernel (16 B/unit) vs raw D2D copy rate", cube_copy4, "GB/s", d2d,
          true, "raw D2D", T_RATIO_GE, 0.9, NULL);
  add_row("8g", "float4 copy kernel vs raw float4 copy kernel", cube_copy4, "GB/s", raw_copy4,
          true, NULL, T_INFO, 0, NULL);

  /* Correctness: y = y0 + runs * a * x, exactly; out = x. */
  cube_bytes_t* by = NULL;
  cube_bytes_t* bo = NULL;
  CHECK("cube_client_read_one (y)", cube_client_read_one(C.c, y, &by));
  CHECK("cube_client_read_one (out)", cube_client_read_one(C.c, out, &bo));
  uint64_t bad_y = 0, bad_o = 0, checked = 0, first_y = UINT64_MAX;
  float got_first = 0, want_first = 0;
  if (cube_bytes_size(by) != bytes || cube_bytes_size(bo) != bytes) {
    wrong("saxpy / copy read back %zu / %zu bytes, expected %zu", cube_bytes_size(by),
          cube_bytes_size(bo), bytes);
    bad_y = bad_o = 1;
  } else {
    const float* ry = cube_bytes_const_data(by);
    const float* ro = cube_bytes_const_data(bo);
    uint64_t stride = n / (1u << 20) ? n / (1u << 20) : 1;
    uint64_t seed = 0x2545f4914f6cdd1dull;
    for (uint64_t k = 0; k < n; k += stride) {
      /* a strided sample, jittered, plus both ends */
      seed ^= seed << 13;
      seed ^= seed >> 7;
      seed ^= seed << 17;
      uint64_t idx[3] = {k + seed % stride, k < 1024 ? k : n - 1 - (k % 1024), k};
      for (int j = 0; j < 3; ++j) {
        uint64_t i = idx[j] < n ? idx[j] : n - 1;
        float want = hy[i];
        for (int r = 0; r < saxpy_runs; ++r) want = SAXPY_A * hx[i] + want;
        if (ry[i] != want) {
          if (bad_y == 0) {
            first_y = i;
            got_first = ry[i];
            want_first = want;
          }
          bad_y++;
        }
        if (ro[i] != hx[i]) bad_o++;
        checked++;
      }
    }
  }
  if (bad_y)
    wrong("saxpy: %" PRIu64 " of %" PRIu64 " sampled elements wrong (first y[%" PRIu64
          "] = %g, expected %g)",
          bad_y, checked, first_y, (double)got_first, (double)want_first);
  if (bad_o) wrong("copy: %" PRIu64 " of %" PRIu64 " sampled elements wrong", bad_o, checked);
  char name[96];
  snprintf(name, sizeof(name), "saxpy output (%d runs, %" PRIu64 " sampled elements)", saxpy_runs,
           checked);
  add_check(name, bad_y == 0);
  add_check("copy kernel output (same sample)", bad_o == 0);
  cube_bytes_release(by);
  cube_bytes_release(bo);
  /* The float4 copy, every byte. */
  cube_bytes_t* b4 = NULL;
  CHECK("cube_client_read_one (out4)", cube_client_read_one(C.c, out4, &b4));
  bool ok4 = cube_bytes_size(b4) == bytes && memcmp(cube_bytes_const_data(b4), hx, bytes) == 0;
  if (!ok4) wrong("float4 copy: the output differs from x");
  add_check("float4 copy kernel output (every byte)", ok4);
  cube_bytes_release(b4);
  cube_handle_release(out4);
  cube_handle_release(x);
  cube_handle_release(y);
  cube_handle_release(out);
  free(hx);
  free(hy);
}

//===----------------------------------------------------------------------===//
// 7. Kernel cache
//===----------------------------------------------------------------------===//

static uint64_t splitmix(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double precompile_ns(const cube_define_t* def) {
  cube_kernel_t* k = make_kernel(k_cache_src, "saxpy", 256, def, 1);
  uint64_t t0 = now_ns();
  CHECK("cube_client_precompile (cache figure)",
        cube_client_precompile(C.c, 1, &k, CUBE_EXEC_CHECKED));
  uint64_t t1 = now_ns();
  cube_kernel_release(k);
  return (double)(t1 - t0);
}

/* Runs after every other figure: it calls cube_shutdown in the middle. */
static void fig_cache(void) {
  int salts = g_salts;
  bool disk = cube_kernel_cache_dir()[0] != '\0';
  printf("\n## [7] kernel cache, saxpy source + a fresh random define per kernel, Checked mode, %d "
         "kernels, medians (disk cache: %s)\n",
         salts, disk ? cube_kernel_cache_dir() : "off (CUBE_CACHE_DIR=off)");
  uint64_t seed = now_ns() ^ ((uint64_t)getpid() << 32);
  char values[MAX_SALTS][40];
  cube_define_t defs[MAX_SALTS];
  for (int i = 0; i < salts; ++i) {
    snprintf(values[i], sizeof(values[i]), "0x%016" PRIx64 "ull", splitmix(&seed));
    defs[i].name = "CUBE_BENCH_CUDA_SALT";
    defs[i].value = values[i];
  }
  cube_kernel_cache_stats_t st0 = {0}, st1 = {0}, st2 = {0}, st3 = {0};
  CHECK("cube_kernel_cache_stats", cube_kernel_cache_stats(&st0));
  /* Cold: a key never seen (compile, store on disk, load the module). */
  double cold[MAX_SALTS], mem[MAX_SALTS], hit[MAX_SALTS], raw_c[MAX_SALTS], raw_l[MAX_SALTS];
  for (int i = 0; i < salts; ++i) cold[i] = precompile_ns(&defs[i]);
  CHECK("cube_kernel_cache_stats", cube_kernel_cache_stats(&st1));
  if (st1.misses - st0.misses != (uint64_t)salts)
    wrong("cache: %d cold compiles counted %" PRIu64 " misses", salts, st1.misses - st0.misses);
  /* In-process: a new kernel object of the same source and define. */
  for (int i = 0; i < salts; ++i) mem[i] = precompile_ns(&defs[i]);
  /* Raw: NVRTC on the very unit cube compiles (another fresh define), then
   * cuModuleLoadData. */
  cube__signature_t sig;
  CHECK("cube__dialect_parse", cube__dialect_parse(k_cache_src, "saxpy", &sig));
  for (int i = 0; i < salts; ++i) {
    char v[40];
    snprintf(v, sizeof(v), "0x%016" PRIx64 "ull", splitmix(&seed));
    cube_define_t def = {"CUBE_BENCH_CUDA_SALT", v};
    char* text = NULL;
    CHECK("cube__dialect_generate (cuda)",
          cube__dialect_generate(CUBE__TARGET_CUDA, &sig, k_cache_src, &def, 1, CUBE_EXEC_CHECKED,
                                 &text));
    char* cubin = NULL;
    size_t size = 0;
    raw_c[i] = (double)raw_nvrtc(text, "saxpy.cu", &cubin, &size);
    CK(cu->CtxSetCurrent(R.ctx));
    CUmodule m;
    CUfunction f;
    uint64_t t0 = now_ns();
    CK(cu->ModuleLoadData(&m, cubin));
    CK(cu->ModuleGetFunction(&f, m, "cube_kernel_entry"));
    raw_l[i] = (double)(now_ns() - t0);
    CK(cu->ModuleUnload(m));
    free(cubin);
    free(text);
  }
  double cold_ms = median_of(cold, salts) / 1e6;
  double mem_ms = median_of(mem, salts) / 1e6;
  double raw_compile_ms = median_of(raw_c, salts) / 1e6;
  double raw_load_ms = median_of(raw_l, salts) / 1e6;

  /* Disk: cube_shutdown drops the in-memory cache, the modules and the
   * server; a new server must load the entries from disk. */
  double hit_ms = 0;
  bool have_hit = false;
  if (disk) {
    cube_teardown();
    cube_shutdown();
    cube_server_options_t o;
    cube_server_options_initialize(&o);
    o.queue_mode = CUBE_QUEUE_THREADED;
    CHECK("cube_client_init cuda:0 (after cube_shutdown)",
          cube_client_init((cube_device_id_t){CUBE_BACKEND_CUDA, 0}, &o, &C.c));
    /* Warm-up: one disk hit of the bench's empty kernel (compiled in
     * cube_setup) absorbs the first-use costs of the new server. */
    cube_kernel_t* k = make_kernel(k_cube_src, "empty", 32, NULL, 0);
    CHECK("cube_client_precompile (warm-up)",
          cube_client_precompile(C.c, 1, &k, CUBE_EXEC_CHECKED));
    cube_kernel_release(k);
    CHECK("cube_kernel_cache_stats", cube_kernel_cache_stats(&st2));
    for (int i = 0; i < salts; ++i) hit[i] = precompile_ns(&defs[i]);
    CHECK("cube_kernel_cache_stats", cube_kernel_cache_stats(&st3));
    uint64_t dh = st3.disk_hits - st2.disk_hits, mi = st3.misses - st2.misses;
    printf("  disk hits after cube_shutdown: %" PRIu64 " disk hits, %" PRIu64
           " misses counted (expected %d and 0); disk load time %.3f ms in all\n",
           dh, mi, salts, (double)(st3.load_ns - st2.load_ns) / 1e6);
    if (dh != (uint64_t)salts || mi != 0)
      wrong("cache: expected %d disk hits and 0 misses, counted %" PRIu64 " and %" PRIu64, salts,
            dh, mi);
    hit_ms = median_of(hit, salts) / 1e6;
    have_hit = true;
    cube_client_release(C.c);
    C.c = NULL;
  }
  if (have_hit) {
    add_row("7", "kernel cache disk hit vs cold compile (cube)", hit_ms, "ms", cold_ms, true,
            "cube cold", T_RATIO_LE, 0.01, NULL);
    add_row("7b", "kernel cache disk hit vs raw cuModuleLoadData", hit_ms, "ms", raw_load_ms, true,
            NULL, T_INFO, 0, NULL);
  } else {
    printf("  disk cache off: only the in-process hit is measurable\n");
  }
  add_row("7c", "in-process hit (new kernel object, same source) vs cold", mem_ms, "ms", cold_ms,
          true, "cube cold", have_hit ? T_INFO : T_RATIO_LE, have_hit ? 0 : 0.01, NULL);
  add_row("7d", "cold compile + load (cube) vs raw NVRTC + load", cold_ms, "ms",
          raw_compile_ms + raw_load_ms, true, NULL, T_INFO, 0, NULL);
  printf("  (raw NVRTC compile of cube's unit %.2f ms, cuModuleLoadData %.3f ms)\n",
         raw_compile_ms, raw_load_ms);
}

//===----------------------------------------------------------------------===//
// Main
//===----------------------------------------------------------------------===//

//===----------------------------------------------------------------------===//
// 10. Tuning
//===----------------------------------------------------------------------===//

typedef struct tune_shape {
  uint32_t m, n, k;
} tune_shape_t;

/* Launch candidate |which| (or the operation when -1) |iters| times, then
 * sync; the time in ns, 0 on failure. */
static uint64_t tune_trial(cube_tune_op_t* op, int which, const cube_arg_t* args, int iters) {
  uint64_t t0 = now_ns();
  for (int i = 0; i < iters; ++i) {
    cube_status_t st = which < 0 ? cube_tune_op_launch(op, C.c, 6, args)
                                 : cube_tune_op_launch_candidate(op, C.c, (uint32_t)which, 6, args);
    if (st) {
      fail_status("tuned matmul launch", st);
      return 0;
    }
  }
  CHECK("cube_client_sync (tune)", cube_client_sync(C.c));
  return now_ns() - t0;
}

/* A batch of launches of one candidate, for cube_client_profile (what the
 * tuner times). */
typedef struct tune_batch {
  cube_tune_op_t* op;
  uint32_t which;
  const cube_arg_t* args;
  int launches;
} tune_batch_t;

static cube_status_t tune_batch_run(void* p) {
  tune_batch_t* b = p;
  for (int i = 0; i < b->launches; ++i)
    CUBE_RETURN_IF_ERROR(cube_tune_op_launch_candidate(b->op, C.c, b->which, 6, b->args));
  return CUBE_OK;
}

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
  (void)args;
  out->count = 1;
  out->values[0] = 1;
  return CUBE_OK;
}

static void fig_tune(void) {
  static const tune_shape_t shapes[6] = {{64, 64, 64},     {512, 512, 512},  {1024, 1024, 1024},
                                         {4096, 4096, 4096}, {4096, 256, 1024}, {128, 4096, 4096}};
  printf("\n## [10] tuned matmul (examples/tuned_matmul.h: TILE 8/16/32 x VW 1/2/4, default "
         "t16v1), budget 2 s per shape; launch + sync per launch, medians of 7 alternating "
         "rounds\n");
  cube_tune_op_t* op = NULL;
  CHECK("tuned_matmul_create", tuned_matmul_create(2.0, &op, NULL));
  if (!op) return;
  for (int s = 0; s < (g_quick ? 3 : 6); ++s) {
    const tune_shape_t* sh = &shapes[s];
    size_t na = (size_t)sh->m * sh->k, nb = (size_t)sh->k * sh->n, nc = (size_t)sh->m * sh->n;
    float* a = malloc(na * sizeof(float));
    float* b = malloc(nb * sizeof(float));
    if (!a || !b) {
      free(a);
      free(b);
      continue;
    }
    fill_random(a, na * sizeof(float), 3 + (uint64_t)s);
    fill_random(b, nb * sizeof(float), 5 + (uint64_t)s);
    for (size_t i = 0; i < na; ++i) a[i] = (float)(((uint32_t*)a)[i] % 1000) / 1000.0f - 0.5f;
    for (size_t i = 0; i < nb; ++i) b[i] = (float)(((uint32_t*)b)[i] % 1000) / 1000.0f - 0.5f;
    cube_handle_t ha = CUBE_HANDLE_NULL, hb = CUBE_HANDLE_NULL, hc = CUBE_HANDLE_NULL;
    CHECK("upload a", cube_client_create_from_slice(C.c, a, na * sizeof(float), &ha));
    CHECK("upload b", cube_client_create_from_slice(C.c, b, nb * sizeof(float), &hb));
    CHECK("empty c", cube_client_empty(C.c, nc * sizeof(float), &hc));
    cube_arg_t args[6] = {cube_arg_buffer(ha), cube_arg_buffer(hb), cube_arg_buffer(hc),
                          cube_arg_u32(sh->m), cube_arg_u32(sh->n), cube_arg_u32(sh->k)};
    uint64_t t0 = now_ns();
    uint64_t first = tune_trial(op, -1, args, 1);
    double tuning_s = (double)(now_ns() - t0) / 1e9;
    cube_tune_record_t rec;
    memset(&rec, 0, sizeof(rec));
    rec.struct_size = sizeof(rec);
    cube_status_t st = cube_tune_op_record(op, C.c, 6, args, &rec);
    if (!first || st) {
      if (st) fail_status("cube_tune_op_record", st);
    } else {
      enum { N = TUNED_MATMUL_CANDIDATES, ROUNDS = 7 };
      bool runs[N + 1];
      for (int c = 0; c <= N; ++c)
        runs[c] = c == N || (rec.results[c].outcome != CUBE_TUNE_INVALID &&
                             rec.results[c].outcome != CUBE_TUNE_WRONG &&
                             rec.results[c].outcome != CUBE_TUNE_FAILED);
      double est_us = rec.results[rec.winner].median_ns / 1e3;
      int iters = est_us > 0 ? (int)(20000.0 / est_us) + 1 : 1;
      if (iters > 1000) iters = 1000;
      for (int c = 0; c < N; ++c)
        if (runs[c]) (void)tune_trial(op, c, args, 1);
      double t[N + 1][ROUNDS];
      for (int r = 0; r < ROUNDS; ++r)
        for (int j = 0; j <= N; ++j) {
          int c = (j + r) % (N + 1);
          if (runs[c]) t[c][r] = (double)tune_trial(op, c == N ? -1 : c, args, iters) / 1e3 / iters;
        }
      double med[N + 1];
      int best = -1;
      for (int c = 0; c <= N; ++c) {
        if (!runs[c]) continue;
        qsort(t[c], ROUNDS, sizeof(double), cmp_double);
        med[c] = median_sorted(t[c], ROUNDS);
        if (c < N && (best < 0 || med[c] < med[best])) best = c;
      }
      /* The target's ratio: the tuned operation against the best candidate
       * alone in adjacent pairs of trials (which goes first alternating),
       * the median of the pairs' ratios. */
      enum { PAIRS = 9 };
      double pt[PAIRS], pb[PAIRS], pr[PAIRS];
      for (int r = 0; r < PAIRS; ++r) {
        for (int side = 0; side < 2; ++side) {
          bool tuned_side = (side + r) % 2;
          double us = (double)tune_trial(op, tuned_side ? -1 : best, args, iters) / 1e3 / iters;
          if (tuned_side)
            pt[r] = us;
          else
            pb[r] = us;
        }
        pr[r] = pb[r] > 0 ? pt[r] / pb[r] : 0;
      }
      qsort(pt, PAIRS, sizeof(double), cmp_double);
      qsort(pb, PAIRS, sizeof(double), cmp_double);
      qsort(pr, PAIRS, sizeof(double), cmp_double);
      double ratio = median_sorted(pr, PAIRS);
      printf("  %ux%ux%u: tuning %.2f s, winner %s; tuned %.1f us (%.1f-%.1f), best alone %s "
             "%.1f us, default %.1f us: speedup vs default %.2fx\n",
             sh->m, sh->n, sh->k, tuning_s, tuned_matmul_variants[rec.winner].name, med[N],
             t[N][0], t[N][ROUNDS - 1], tuned_matmul_variants[best].name, med[best],
             med[TUNED_MATMUL_DEFAULT], med[TUNED_MATMUL_DEFAULT] / med[N]);
      printf("    tuned/best in %d adjacent pairs: median ratio %.3f (%.3f-%.3f); tuned %.2f us, "
             "best %.2f us (pairs' medians); the tuner's medians (device time):",
             PAIRS, ratio, pr[0], pr[PAIRS - 1], median_sorted(pt, PAIRS),
             median_sorted(pb, PAIRS));
      for (int c = 0; c < N; ++c)
        if (rec.results[c].samples)
          printf(" %s %.2f (%u)", tuned_matmul_variants[c].name, rec.results[c].median_ns / 1e3,
                 rec.results[c].samples);
      printf("\n");
      if (sh->m * sh->n * sh->k <= 512u * 512u * 512u) {
        /* Where the two ways of timing part: each candidate's device time
         * over a profiled batch of 256 launches (as the tuner measures),
         * median of 5, beside the host-timed back-to-back launches above. */
        printf("    profiled batches of 256 (device time per launch, median of 5) / host-timed:");
        for (int c = 0; c < N; ++c) {
          if (!runs[c]) continue;
          double v[5];
          for (int r = 0; r < 5; ++r) {
            tune_batch_t tb = {op, (uint32_t)c, args, 256};
            cube_profile_duration_t d;
            cube_status_t ps = cube_client_profile(C.c, tune_batch_run, &tb, NULL, &d);
            if (ps) {
              fail_status("cube_client_profile (tune batch)", ps);
              v[r] = 0;
            } else {
              v[r] = (double)cube_profile_duration_ns(&d) / 1e3 / 256;
            }
          }
          qsort(v, 5, sizeof(double), cmp_double);
          printf(" %s %.2f/%.2f", tuned_matmul_variants[c].name, v[2], med[c]);
        }
        printf(" us\n");
      }
      char id[8], name[96];
      snprintf(id, sizeof(id), "10.%d", s + 1);
      snprintf(name, sizeof(name), "tuned matmul %ux%ux%u vs best candidate alone (pairs)",
               sh->m, sh->n, sh->k);
      add_row(id, name, ratio * median_sorted(pb, PAIRS), "us", median_sorted(pb, PAIRS), true,
              "best", T_RATIO_LE, 1.03, NULL);
    }
    cube_handle_release(ha);
    cube_handle_release(hb);
    cube_handle_release(hc);
    free(a);
    free(b);
  }
  cube_tune_op_release(op);

  /* 10b: the cost of a hit. */
  cube_tune_candidate_t cands[2] = {{"one", C.k_empty, hit_count, NULL, NULL},
                                    {"two", C.k_empty, hit_count, NULL, NULL}};
  cube_tune_op_desc_t od;
  cube_tune_op_desc_initialize(&od);
  od.name = "bench_cuda_hit";
  od.version = "1";
  od.candidates = cands;
  od.candidate_count = 2;
  od.key = hit_key;
  od.budget_s = 0.5;
  cube_tune_op_t* hop = NULL;
  CHECK("cube_tune_op_create (hit)", cube_tune_op_create(&od, &hop));
  if (!hop) return;
  cube_arg_t arg = cube_arg_buffer(C.h_small);
  CHECK("tune (hit)", cube_tune_op_launch(hop, C.c, 1, &arg));
  enum { HIT_BURST = 32, HIT_ROUNDS = 201 };
  double plain[HIT_ROUNDS], tuned[HIT_ROUNDS];
  for (int r = 0; r < HIT_ROUNDS; ++r) {
    for (int side = 0; side < 2; ++side) {
      bool tuned_side = (side + r) % 2;
      CHECK("cube_client_sync (hit)", cube_client_sync(C.c));
      uint64_t t0 = now_ns();
      for (int i = 0; i < HIT_BURST; ++i) {
        cube_status_t st = tuned_side
                               ? cube_tune_op_launch(hop, C.c, 1, &arg)
                               : cube_client_launch(C.c, C.k_empty, cube_count_static(1, 1, 1), 1,
                                                    &arg);
        if (st) {
          fail_status("launch (hit)", st);
          break;
        }
      }
      double per = (double)(now_ns() - t0) / 1e3 / HIT_BURST;
      if (tuned_side)
        tuned[r] = per;
      else
        plain[r] = per;
    }
  }
  CHECK("cube_client_sync (hit)", cube_client_sync(C.c));
  qsort(plain, HIT_ROUNDS, sizeof(double), cmp_double);
  qsort(tuned, HIT_ROUNDS, sizeof(double), cmp_double);
  double p = median_sorted(plain, HIT_ROUNDS), q = median_sorted(tuned, HIT_ROUNDS);
  add_row("10b", "tuned launch (hit) minus plain launch, caller side", q - p, "us", p, true,
          "plain launch", T_ABS_LE, 0.1, "us");
  cube_tune_op_release(hop);
}

/* Figure 11: the cost of tracing (issue 17): N = 10,000 launches then a
 * sync, end to end, with no trace and with a trace recording (every launch
 * timed: by CUPTI's activity records where CUPTI is there, else by two
 * events resolved later), alternating which goes first; the ratio on/off
 * per round, its median over the rounds and the spread; and the caller-side
 * cost per launch of each (where a difference comes from). Two kernels: the
 * empty one (launch-bound: the host's cost per launch is all there is) and
 * saxpy over 2^20 floats (12 MiB moved, a few microseconds of device time:
 * an elementwise operation of a small model). */
static void fig_trace_of(const char* row, const char* what, cube_kernel_t* k, cube_count_t count,
                         uint32_t argc, const cube_arg_t* args) {
  enum { ROUNDS = 31 };
  const uint64_t n = 10000;
  printf("\n## [%s] tracing on vs off: N = %" PRIu64 " launches of %s + sync, end to end; %d "
         "rounds alternating off/on\n",
         row, n, what, ROUNDS);
  char path[256];
  snprintf(path, sizeof(path), "/tmp/bench_cuda_trace.%ld.json", (long)getpid());
  double off[ROUNDS], on[ROUNDS], ratio[ROUNDS], sub_off[ROUNDS], sub_on[ROUNDS];
  (void)cube_launches_of(n, k, count, argc, args); /* warm */
  for (int i = 0; i < ROUNDS; ++i) {
    /* Alternating which goes first. */
    for (int j = 0; j < 2; ++j) {
      bool traced = (j == 0) == (i % 2 == 1);
      if (traced) {
        unlink(path);
        CHECK("cube_trace_start", cube_trace_start(path));
      }
      launch_times_t t = cube_launches_of(n, k, count, argc, args);
      if (traced) {
        CHECK("cube_trace_stop", cube_trace_stop());
        unlink(path);
        on[i] = t.total_ns;
        sub_on[i] = t.submit_ns;
      } else {
        off[i] = t.total_ns;
        sub_off[i] = t.submit_ns;
      }
    }
    ratio[i] = on[i] / off[i];
  }
  qsort(ratio, ROUNDS, sizeof(double), cmp_double);
  printf("  ratio on/off per round: min %.3f, median %.3f, max %.3f\n", ratio[0],
         ratio[ROUNDS / 2], ratio[ROUNDS - 1]);
  printf("  per launch, medians: caller side off %.3f us, on %.3f us; to the sync's end off %.3f "
         "us, on %.3f us\n",
         median_of(sub_off, ROUNDS) / (double)n / 1e3, median_of(sub_on, ROUNDS) / (double)n / 1e3,
         median_of(off, ROUNDS) / (double)n / 1e3, median_of(on, ROUNDS) / (double)n / 1e3);
  char label[160];
  snprintf(label, sizeof(label), "10,000 launches (%s) + sync, tracing on (time, us)", what);
  add_row(row, label, median_of(on, ROUNDS) / 1e3, "us", median_of(off, ROUNDS) / 1e3, true,
          "tracing off", T_RATIO_LE, 1.05, "");
}

static void fig_trace(void) {
  cube_arg_t empty_arg = cube_arg_buffer(C.h_small);
  fig_trace_of("11", "an empty kernel", C.k_empty, cube_count_static(1, 1, 1), 1, &empty_arg);
  enum { SAXPY_N = 1 << 20 };
  cube_handle_t x, y;
  CHECK("cube_client_empty (x)", cube_client_empty(C.c, (uint64_t)SAXPY_N * 4, &x));
  CHECK("cube_client_empty (y)", cube_client_empty(C.c, (uint64_t)SAXPY_N * 4, &y));
  cube_arg_t a[3] = {cube_arg_buffer(x), cube_arg_buffer(y), cube_arg_f32(0.5f)};
  fig_trace_of("11b", "saxpy over 2^20 floats", C.k_saxpy,
               cube_count_static(SAXPY_N / 256, 1, 1), 3, a);
  cube_handle_release(x);
  cube_handle_release(y);
}

static void settings(void) {
  const char* q = getenv("CUBE_BENCH_QUICK");
  g_quick = q && q[0] && strcmp(q, "0") != 0;
  g_n_launch = g_quick ? 10000 : 100000;
  g_big = g_quick ? (size_t)100 << 20 : (size_t)1 << 30;
  g_rt_warm = g_quick ? 10 : 100;
  g_rt_iters = g_quick ? 100 : 1000;
  g_pool_trials = 50;
  g_pool_iters = g_quick ? 200 : 2000;
  g_copy_reps = g_quick ? 2 : 5;
  g_kernel_reps = g_quick ? 2 : 20;
  g_salts = g_quick ? 2 : MAX_SALTS;
}

int main(void) {
  settings();
  print_machine("bench_cuda", cube_version());
  uint64_t t_start = now_ns();

  cube_status_t s = cube_backend_status(CUBE_BACKEND_CUDA);
  if (!s) s = cube__cuda_driver(&cu);
  if (!s) s = cube__cuda_nvrtc(&nv);
  if (s) {
    printf("cuda unavailable: %s\n", cube_status_message(s));
    cube_status_free(s);
    cube_shutdown();
    return 0;
  }
  char name[128] = "?";
  {
    CUdevice d0;
    CK(cu->DeviceGet(&d0, 0));
    if (cu->DeviceGetName(name, (int)sizeof(name), d0) != CUDA_SUCCESS) snprintf(name, sizeof(name), "?");
  }
  printf("device: %s, driver %d.%d, NVRTC %d.%d%s\n", name, cu->version / 1000,
         (cu->version % 1000) / 10, nv->major, nv->minor,
         g_quick ? "; CUBE_BENCH_QUICK: sizes and iterations ~10x smaller" : "");
  raw_setup();
  cube_setup();
  fflush(stdout);

  /* CUBE_BENCH_ONLY=launch,roundtrip,pool,transfers,bandwidth,graph,tune,trace,cache runs those
   * alone. */
  if (bench_wanted("launch")) fig_launch();
  if (bench_wanted("roundtrip")) fig_roundtrip();
  if (bench_wanted("pool")) fig_pool();
  if (bench_wanted("transfers")) fig_transfers();
  if (bench_wanted("bandwidth")) fig_bandwidth();
  if (bench_wanted("graph")) fig_graph();
  if (bench_wanted("tune")) fig_tune();
  if (bench_wanted("trace")) fig_trace();
  if (bench_only_set() && bench_wanted("upload_why")) fig_upload_why(); /* opt-in */
  if (bench_wanted("cache")) fig_cache(); /* last: shuts cube down and starts it again */

  if (C.c) cube_teardown();
  cube_shutdown();
  CK(cu->CtxSetCurrent(R.ctx));
  CK(cu->EventDestroy(R.e0));
  CK(cu->EventDestroy(R.e1));
  CK(cu->ModuleUnload(R.mod));
  CK(cu->StreamDestroy(R.s));
  /* The primary context stays retained, as cube's own (the driver table has
   * no cuDevicePrimaryCtxRelease). */

  print_summary();
  printf("total time %.1f s\n", (double)(now_ns() - t_start) / 1e9);
  if (g_failures) {
    printf("\n%d failures (see stderr)\n", g_failures);
    return 1;
  }
  return 0;
}

#endif /* CUBE_HAVE_CUDA */
