/* Kernels in the cube dialect, compiled for real: the CPU unit by the system
 * C compiler (run here, cube by cube, by a small host loop), the CUDA unit by
 * NVRTC (compile only; skipped without NVRTC) and the OpenCL unit by the
 * first OpenCL platform (PoCL here and in CI; saxpy and the reduction also
 * run there). Nothing here links a vendor library: NVRTC and OpenCL are
 * dlopen'ed.
 */
// cube-test-libs: cube_static
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cube/backends/cpu.h"
#include "subprocess.h"
#include "backends/cpu/cpu_compiler.h"
#include "kernel/dialect.h"

/* NVRTC and PoCL keep allocations until exit; not ours to report. */
const char* __lsan_default_suppressions(void);
const char* __lsan_default_suppressions(void) {
  return "leak:libnvrtc\nleak:libpocl\nleak:libOpenCL\nleak:libLLVM\nleak:libclang\n";
}

/* The test kernels ---------------------------------------------------------------- */

static const char* const K_SAXPY =
    "/* CUBE_KERNEL(decoy, int x) */\n"
    "CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a)\n"
    "{\n"
    "    uint32_t i = ABSOLUTE_POS;\n"
    "    if (i < CUBE_LEN(y))\n"
    "        CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "}\n";

/* A shared-memory tree reduction that works for any cube size. */
static const char* const K_REDUCE =
    "CUBE_KERNEL(reduce, CUBE_ARRAY(const float, in), CUBE_ARRAY(float, out))\n"
    "{\n"
    "    CUBE_SHARED(float, sh, 1024);\n"
    "    uint32_t u = UNIT_POS;\n"
    "    sh[u] = CUBE_LOAD(in, CUBE_POS * CUBE_DIM + u);\n"
    "    sync_cube();\n"
    "    for (uint32_t s = 1; s < CUBE_DIM; s *= 2) {\n"
    "        if (u % (2 * s) == 0 && u + s < CUBE_DIM) sh[u] += sh[u + s];\n"
    "        sync_cube();\n"
    "    }\n"
    "    if (u == 0) CUBE_STORE(out, CUBE_POS, sh[0]);\n"
    "}\n";

/* Units that return before a barrier no longer hold the others back. */
static const char* const K_EARLY_EXIT =
    "CUBE_KERNEL(early_exit, CUBE_ARRAY(uint32_t, out), uint32_t active)\n"
    "{\n"
    "    CUBE_SHARED(uint32_t, sh, 256);\n"
    "    uint32_t u = UNIT_POS;\n"
    "    if (u >= active) return;\n"
    "    sh[u] = u + 1u;\n"
    "    sync_cube();\n"
    "    uint32_t sum = 0;\n"
    "    for (uint32_t k = 0; k < active; ++k) sum += sh[k];\n"
    "    sync_cube();\n"
    "    CUBE_STORE(out, CUBE_POS * CUBE_DIM + u, sum);\n"
    "}\n";

#define POS_FIELDS 22
/* Every builtin position, written at ABSOLUTE_POS; %s is an optional
 * sync_cube() so that the same text also runs as fibers. */
static const char* const K_POSITIONS_FMT =
    "CUBE_KERNEL(positions, CUBE_ARRAY(uint32_t, out))\n"
    "{\n"
    "    %s\n"
    "    uint32_t b = ABSOLUTE_POS * 22u;\n"
    "    uint32_t v[22] = {UNIT_POS_X, UNIT_POS_Y, UNIT_POS_Z, UNIT_POS,\n"
    "                      CUBE_POS_X, CUBE_POS_Y, CUBE_POS_Z, CUBE_POS,\n"
    "                      CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z, CUBE_DIM,\n"
    "                      CUBE_COUNT_X, CUBE_COUNT_Y, CUBE_COUNT_Z, CUBE_COUNT,\n"
    "                      ABSOLUTE_POS_X, ABSOLUTE_POS_Y, ABSOLUTE_POS_Z, ABSOLUTE_POS,\n"
    "                      PLANE_DIM, UNIT_POS_PLANE};\n"
    "    for (uint32_t k = 0; k < 22u; ++k) CUBE_STORE(out, b + k, v[k]);\n"
    "}\n";

static const char* const K_HISTOGRAM =
    "CUBE_KERNEL(histogram, CUBE_ARRAY(const uint32_t, data), CUBE_ARRAY(uint32_t, bins),\n"
    "            uint32_t nbins)\n"
    "{\n"
    "    uint32_t i = ABSOLUTE_POS;\n"
    "    if (i < CUBE_LEN(data))\n"
    "        cube_atomic_add_u32(&bins[CUBE_LOAD(data, i) % nbins], 1u);\n"
    "}\n";

static const char* const K_ATOMIC_OPS =
    "CUBE_KERNEL(atomic_ops, CUBE_ARRAY(uint32_t, u), CUBE_ARRAY(int32_t, s),\n"
    "            CUBE_ARRAY(float, f), CUBE_ARRAY(uint32_t, seen))\n"
    "{\n"
    "    uint32_t i = ABSOLUTE_POS;\n"
    "    if (i >= CUBE_LEN(seen)) return;\n"
    "    int32_t si = (int32_t)i;\n"
    "    cube_atomic_add_u32(&u[0], 1u);\n"
    "    cube_atomic_min_u32(&u[1], i + 5u);\n"
    "    cube_atomic_max_u32(&u[2], i * 3u);\n"
    "    cube_atomic_sub_u32(&u[3], 2u);\n"
    "    cube_atomic_or_u32(&u[4], 1u << (i % 32u));\n"
    "    cube_atomic_xor_u32(&u[5], i);\n"
    "    cube_atomic_and_u32(&u[6], ~(1u << (i % 32u)));\n"
    "    seen[i] = cube_atomic_exchange_u32(&u[7], i + 1u);\n"
    "    for (;;) {\n"
    "        uint32_t old = u[8];\n"
    "        if (cube_atomic_compare_exchange_u32(&u[8], old, old + 1u) == old) break;\n"
    "    }\n"
    "    cube_atomic_add_i32(&s[0], -1);\n"
    "    cube_atomic_min_i32(&s[1], -si);\n"
    "    cube_atomic_max_i32(&s[2], si - 7);\n"
    "    cube_atomic_sub_i32(&s[3], 3);\n"
    "    cube_atomic_or_i32(&s[4], 1);\n"
    "    cube_atomic_xor_i32(&s[5], si);\n"
    "    cube_atomic_and_i32(&s[6], -2);\n"
    "    cube_atomic_exchange_i32(&s[7], 5);\n"
    "    for (;;) {\n"
    "        int32_t old = s[8];\n"
    "        if (cube_atomic_compare_exchange_i32(&s[8], old, old - 1) == old) break;\n"
    "    }\n"
    "    cube_atomic_add_f32(&f[0], 0.5f);\n"
    "}\n";

/* Atomics on cube-local memory (OpenCL: __local overloads). */
static const char* const K_SHARED_ATOMICS =
    "CUBE_KERNEL(shared_atomics, CUBE_ARRAY(uint32_t, count), CUBE_ARRAY(float, fsum))\n"
    "{\n"
    "    CUBE_SHARED(uint32_t, c, 1);\n"
    "    CUBE_SHARED(float, f, 1);\n"
    "    if (UNIT_POS == 0) { c[0] = 0u; f[0] = 0.0f; }\n"
    "    sync_cube();\n"
    "    cube_atomic_add_u32(&c[0], 1u);\n"
    "    cube_atomic_max_u32(&c[0], 0u);\n"
    "    cube_atomic_add_f32(&f[0], 2.0f);\n"
    "    sync_cube();\n"
    "    if (UNIT_POS == 0) {\n"
    "        CUBE_STORE(count, CUBE_POS, c[0]);\n"
    "        CUBE_STORE(fsum, CUBE_POS, f[0]);\n"
    "    }\n"
    "}\n";

/* Reads in[i + rs], writes out[i + ws]. */
static const char* const K_OOB =
    "CUBE_KERNEL(oob, CUBE_ARRAY(const float, in), CUBE_ARRAY(float, out), int32_t rs,\n"
    "            int32_t ws)\n"
    "{\n"
    "    int32_t i = (int32_t)ABSOLUTE_POS;\n"
    "    float v = CUBE_LOAD(in, i + rs);\n"
    "    CUBE_STORE(out, i + ws, v + 1.0f);\n"
    "}\n";

#define MATH_F 15
#define MATH_D 14
static const char* const K_MATH =
    "CUBE_FN float poly(float x) { return fmaf(x, x, 1.0f); }\n"
    "CUBE_FN void put(CUBE_GLOBAL float* o, uint32_t k, float v) { o[k] = v; }\n"
    "CUBE_KERNEL(math, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, of),\n"
    "            CUBE_ARRAY(double, od))\n"
    "{\n"
    "    uint32_t i = ABSOLUTE_POS;\n"
    "    if (i >= CUBE_LEN(x)) return;\n"
    "    float v = CUBE_LOAD(x, i);\n"
    "    CUBE_GLOBAL float* o = &of[i * 15u];\n"
    "    put(o, 0, sqrtf(v)); put(o, 1, expf(v)); put(o, 2, logf(v));\n"
    "    put(o, 3, sinf(v)); put(o, 4, cosf(v)); put(o, 5, tanhf(v));\n"
    "    put(o, 6, fabsf(-v)); put(o, 7, fminf(v, 1.0f)); put(o, 8, fmaxf(v, 1.0f));\n"
    "    put(o, 9, powf(v, 1.5f)); put(o, 10, floorf(3.0f * v)); put(o, 11, ceilf(3.0f * v));\n"
    "    put(o, 12, fmaf(v, 2.0f, 1.0f)); put(o, 13, poly(v)); put(o, 14, FLT_MAX > v ? 1.0f : 0.0f);\n"
    "    double d = (double)v;\n"
    "    uint32_t b = i * 14u;\n"
    "    od[b + 0] = sqrt(d); od[b + 1] = exp(d); od[b + 2] = log(d); od[b + 3] = sin(d);\n"
    "    od[b + 4] = cos(d); od[b + 5] = tanh(d); od[b + 6] = fabs(-d); od[b + 7] = fmin(d, 1.0);\n"
    "    od[b + 8] = fmax(d, 1.0); od[b + 9] = pow(d, 1.5); od[b + 10] = floor(3.0 * d);\n"
    "    od[b + 11] = ceil(3.0 * d); od[b + 12] = fma(d, 2.0, 1.0); od[b + 13] = d;\n"
    "}\n";

static const char* const K_PLANE =
    "CUBE_KERNEL(plane, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, of),\n"
    "            CUBE_ARRAY(uint32_t, ou), CUBE_ARRAY(int32_t, oi))\n"
    "{\n"
    "    uint32_t i = ABSOLUTE_POS;\n"
    "    float v = CUBE_LOAD(x, i);\n"
    "    float fs = cube_plane_sum_f32(v), fmn = cube_plane_min_f32(v), fmx = cube_plane_max_f32(v);\n"
    "    uint32_t us = cube_plane_sum_u32(i), umn = cube_plane_min_u32(i), umx = cube_plane_max_u32(i);\n"
    "    int32_t is = cube_plane_sum_i32(-(int32_t)i), imn = cube_plane_min_i32(-(int32_t)i);\n"
    "    int32_t imx = cube_plane_max_i32(-(int32_t)i);\n"
    "    if (UNIT_POS_PLANE == 0) {\n"
    "        uint32_t p = i / PLANE_DIM;\n"
    "        CUBE_STORE(of, 3u * p, fs); CUBE_STORE(of, 3u * p + 1u, fmn); CUBE_STORE(of, 3u * p + 2u, fmx);\n"
    "        CUBE_STORE(ou, 3u * p, us); CUBE_STORE(ou, 3u * p + 1u, umn); CUBE_STORE(ou, 3u * p + 2u, umx);\n"
    "        CUBE_STORE(oi, 3u * p, is); CUBE_STORE(oi, 3u * p + 1u, imn); CUBE_STORE(oi, 3u * p + 2u, imx);\n"
    "    }\n"
    "}\n";

/* Two kernels in one source; every scalar type as a parameter. */
static const char* const K_TWO =
    "CUBE_KERNEL(fill_a, CUBE_ARRAY(float, p), float v)\n"
    "{\n"
    "    CUBE_STORE(p, ABSOLUTE_POS, v);\n"
    "}\n"
    "\n"
    "CUBE_KERNEL(fill_b, CUBE_ARRAY(double, q), float v, double d, uint32_t a, int32_t b,\n"
    "            uint64_t c, int64_t e)\n"
    "{\n"
    "    uint32_t i = ABSOLUTE_POS;\n"
    "    CUBE_STORE(q, i, CUBE_LOAD(q, i) + (double)v + d + (double)a + (double)b + (double)c +\n"
    "                     (double)e);\n"
    "}\n";

/* Helpers with the unit's context: positions, sync_cube() and the checked
 * accessors inside CUBE_FN functions. */
static const char* const K_HELPERS =
    "CUBE_FN float load_twice(CUBE_UNIT_PARAMS, CUBE_ARRAY(const float, x), uint32_t i)\n"
    "{\n"
    "    return 2.0f * CUBE_LOAD(x, i);\n"
    "}\n"
    "CUBE_FN void rotate(CUBE_UNIT_PARAMS, CUBE_LOCAL float* sh, float mine, CUBE_GLOBAL float* dst)\n"
    "{\n"
    "    sh[UNIT_POS] = mine;\n"
    "    sync_cube();\n"
    "    dst[ABSOLUTE_POS] = sh[(UNIT_POS + 1u) % CUBE_DIM];\n"
    "}\n"
    "CUBE_KERNEL(helpers, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y))\n"
    "{\n"
    "    CUBE_SHARED(float, sh, 256);\n"
    "    float mine = load_twice(CUBE_UNIT_ARGS, CUBE_ARRAY_ARG(x), ABSOLUTE_POS);\n"
    "    rotate(CUBE_UNIT_ARGS, sh, mine, y);\n"
    "}\n";

/* Many values live across barriers (callee-saved integer and floating-point
 * registers must survive the fiber switch). */
static const char* const K_REGS =
    "CUBE_KERNEL(regs, CUBE_ARRAY(double, out), uint32_t rounds)\n"
    "{\n"
    "    uint32_t u = UNIT_POS;\n"
    "    double a = u * 1.5, b = u + 0.25, c = 3.0 - u, d = u * 0.5;\n"
    "    float e = (float)u * 2.0f, f = 1.0f / ((float)u + 1.0f);\n"
    "    uint64_t g = u * 0x9E3779B97F4A7C15ull, h = ~(uint64_t)u;\n"
    "    for (uint32_t r = 0; r < rounds; ++r) {\n"
    "        a = a * 0.5 + b; b = b - c * 0.5; c = c + d * 0.25; d = d * 0.75 + a * 0.125;\n"
    "        e = e * 0.5f + f; f = f * 0.25f + e * 0.125f;\n"
    "        g = g * 6364136223846793005ull + 1442695040888963407ull; h ^= g >> 7;\n"
    "        sync_cube();\n"
    "    }\n"
    "    CUBE_STORE(out, 3u * u, a + b + c + d);\n"
    "    CUBE_STORE(out, 3u * u + 1u, (double)(e + f));\n"
    "    CUBE_STORE(out, 3u * u + 2u, (double)((g ^ h) >> 12));\n"
    "}\n";

/* The example of docs/dialect.md, verbatim. */
static const char* const K_DOC =
    "/* Two kernels in one source; the kernel object names the one it runs (its entry). */\n"
    "CUBE_FN float squared(float v) { return v * v; }\n"
    "\n"
    "CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a)\n"
    "{\n"
    "    uint32_t i = ABSOLUTE_POS;\n"
    "    if (i < CUBE_LEN(y))\n"
    "        CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "}\n"
    "\n"
    "/* Sum of squares per cube: one partial sum per cube, any cube size up to BLOCK. */\n"
    "CUBE_KERNEL(sum_squares, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, partial))\n"
    "{\n"
    "    CUBE_SHARED(float, sh, BLOCK);          /* BLOCK: a compile-time define, e.g. 256 */\n"
    "    uint32_t u = UNIT_POS;\n"
    "    sh[u] = squared(CUBE_LOAD(x, ABSOLUTE_POS));   /* 0 past the end */\n"
    "    sync_cube();\n"
    "    for (uint32_t s = 1; s < CUBE_DIM; s *= 2) {\n"
    "        if ((u & (2 * s - 1)) == 0 && u + s < CUBE_DIM) sh[u] += sh[u + s];\n"
    "        sync_cube();\n"
    "    }\n"
    "    if (u == 0) CUBE_STORE(partial, CUBE_POS, sh[0]);\n"
    "}\n";
static const cube_define_t DOC_DEFINES[1] = {{"BLOCK", "256"}};
static const cube_define_t TYPES_DEFINES[1] = {{"DBL_MAX_OK", "1"}};

/* The types and constants every prelude provides. */
static const char* const K_TYPES =
    "CUBE_KERNEL(types, CUBE_ARRAY(uint32_t, o))\n"
    "{\n"
    "    size_t n = sizeof(float); bool b = n == 4; int8_t a = -1; uint8_t a2 = 1;\n"
    "    int16_t c0 = -2; uint16_t c = 7; int64_t d = INT64_MIN; uint64_t e = UINT64_MAX;\n"
    "    float f = INFINITY, g = NAN, h = FLT_EPSILON, m = FLT_MAX, l = FLT_MIN;\n"
    "    o[0] = (uint32_t)n + (b ? 1u : 0u) + (uint32_t)a + a2 + (uint32_t)c0 + c;\n"
    "    o[1] = (uint32_t)(d < INT64_MAX) + (uint32_t)(e == UINT64_MAX) + (f > m ? 1u : 0u);\n"
    "    o[2] = (g != g ? 1u : 0u) + (h > 0.0f ? 1u : 0u) + (l > 0.0f ? 1u : 0u) + INT32_MAX;\n"
    "    o[3] = UINT32_MAX + (uint32_t)(INT32_MIN < 0) + (uint32_t)DBL_MAX_OK;\n"
    "}\n";

typedef struct test_kernel {
  const char* entry;
  const char* source;
  const cube_define_t* defines;
  uint32_t define_count;
} test_kernel_t;

static char positions_plain[2048], positions_sync[2048];

static const char* positions_source(bool with_sync) {
  char* buf = with_sync ? positions_sync : positions_plain;
  if (!buf[0])
    snprintf(buf, sizeof positions_plain, K_POSITIONS_FMT, with_sync ? "sync_cube();" : "");
  return buf;
}

/* Every test kernel, for the compile-everywhere cases. */
static size_t all_kernels(test_kernel_t* out) {
  size_t n = 0;
  out[n++] = (test_kernel_t){"saxpy", K_SAXPY, NULL, 0};
  out[n++] = (test_kernel_t){"reduce", K_REDUCE, NULL, 0};
  out[n++] = (test_kernel_t){"early_exit", K_EARLY_EXIT, NULL, 0};
  out[n++] = (test_kernel_t){"positions", positions_source(false), NULL, 0};
  out[n++] = (test_kernel_t){"positions", positions_source(true), NULL, 0};
  out[n++] = (test_kernel_t){"histogram", K_HISTOGRAM, NULL, 0};
  out[n++] = (test_kernel_t){"atomic_ops", K_ATOMIC_OPS, NULL, 0};
  out[n++] = (test_kernel_t){"shared_atomics", K_SHARED_ATOMICS, NULL, 0};
  out[n++] = (test_kernel_t){"oob", K_OOB, NULL, 0};
  out[n++] = (test_kernel_t){"math", K_MATH, NULL, 0};
  out[n++] = (test_kernel_t){"plane", K_PLANE, NULL, 0};
  out[n++] = (test_kernel_t){"fill_a", K_TWO, NULL, 0};
  out[n++] = (test_kernel_t){"fill_b", K_TWO, NULL, 0};
  out[n++] = (test_kernel_t){"helpers", K_HELPERS, NULL, 0};
  out[n++] = (test_kernel_t){"regs", K_REGS, NULL, 0};
  out[n++] = (test_kernel_t){"saxpy", K_DOC, DOC_DEFINES, 1};
  out[n++] = (test_kernel_t){"sum_squares", K_DOC, DOC_DEFINES, 1};
  out[n++] = (test_kernel_t){"types", K_TYPES, TYPES_DEFINES, 1};
  return n;
}
#define MAX_KERNELS 24

/* Temporary files ---------------------------------------------------------------- */

static char tmp_dir_path[1024];

static int remove_entry(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

/* The case's scratch directory goes when the process ends. */
static void remove_tmp_dir(void) {
  if (tmp_dir_path[0]) nftw(tmp_dir_path, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static const char* tmp_dir(void) {
  char* dir = tmp_dir_path;
  if (!dir[0]) {
    const char* base = getenv("CUBE_TEST_TMPDIR");
    if (!base || !base[0]) base = "/tmp";
    mkdir(base, 0755);
    snprintf(dir, sizeof tmp_dir_path, "%s/dialect-%ld", base, (long)getpid());
    mkdir(dir, 0755);
    atexit(remove_tmp_dir);
  }
  return dir;
}

static char* read_file(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* buf = malloc((size_t)(n > 0 ? n : 0) + 1);
  if (buf) {
    size_t got = fread(buf, 1, (size_t)(n > 0 ? n : 0), f);
    buf[got] = '\0';
  }
  fclose(f);
  return buf;
}


static bool have_program(const char* name) {
  char* argv[] = {(char*)name, (char*)"--version", NULL};
  char log[1100];
  snprintf(log, sizeof log, "%s/version.log", tmp_dir());
  return run_with_stdin(argv, "", log) == 0;
}

/* The CPU: compile, load, run ---------------------------------------------------- */

typedef struct cpu_kernel {
  void* handle;
  cube_cpu_kernel_fn fn;
  cube__signature_t sig;
  char so_path[1100];
} cpu_kernel_t;

static atomic_int so_counter;

/* The compiler and extra flags cpu_build uses (the runtime-flags case
 * changes them). */
static const char* build_cc = "cc";
static const char* const* build_flags = NULL;

/* Compiles |text| with |cc| (extra flags in |flags|, NULL-terminated) into a
 * shared object; returns true on success, else the compiler's messages in
 * |*out_log| (malloc'd) when it is given. */
static bool cc_compile(const char* cc, const char* const* flags, const char* text,
                       const char* so_path, char** out_log) {
  char* argv[40];
  int a = 0;
  argv[a++] = (char*)cc;
  argv[a++] = (char*)"-O2";
  argv[a++] = (char*)"-shared";
  argv[a++] = (char*)"-fPIC";
  argv[a++] = (char*)"-Wall";
  argv[a++] = (char*)"-Wextra";
  argv[a++] = (char*)"-Werror";
  for (int i = 0; flags && flags[i] && a < 30; ++i) argv[a++] = (char*)flags[i];
  argv[a++] = (char*)"-x";
  argv[a++] = (char*)"c";
  argv[a++] = (char*)"-";
  argv[a++] = (char*)"-o";
  argv[a++] = (char*)so_path;
  argv[a] = NULL;
  char log_path[1200];
  snprintf(log_path, sizeof log_path, "%s.log", so_path);
  int rc = run_with_stdin(argv, text, log_path);
  char* log = read_file(log_path);
  unlink(log_path);
  if (rc != 0) {
    if (out_log) {
      *out_log = log;
    } else {
      fprintf(stderr, "%s failed (%d):\n%s\n", cc, rc, log ? log : "");
      free(log);
    }
    return false;
  }
  free(log);
  return true;
}

/* Parses, generates, compiles and loads |entry| of |source|. */
static bool cpu_build(cpu_kernel_t* k, const char* source, const char* entry,
                      cube_execution_mode_t mode, const cube_define_t* defines,
                      uint32_t define_count, const char* const* flags) {
  memset(k, 0, sizeof *k);
  cube_status_t st = cube__dialect_parse(source, entry, &k->sig);
  if (st) {
    fprintf(stderr, "parse %s: %s\n", entry, cube_status_message(st));
    cube_status_free(st);
    return false;
  }
  char* text = NULL;
  st = cube__dialect_generate(CUBE__TARGET_CPU, &k->sig, source, defines, define_count, mode,
                              &text);
  if (st) {
    fprintf(stderr, "generate %s: %s\n", entry, cube_status_message(st));
    cube_status_free(st);
    return false;
  }
  snprintf(k->so_path, sizeof k->so_path, "%s/%s-%d.so", tmp_dir(), entry,
           atomic_fetch_add(&so_counter, 1));
  const char* all[24];
  int na = 0;
  for (int i = 0; build_flags && build_flags[i] && na < 11; ++i) all[na++] = build_flags[i];
  for (int i = 0; flags && flags[i] && na < 22; ++i) all[na++] = flags[i];
  all[na] = NULL;
  bool ok = cc_compile(build_cc, all, text, k->so_path, NULL);
  free(text);
  if (!ok) return false;
  k->handle = dlopen(k->so_path, RTLD_NOW | RTLD_LOCAL);
  if (!k->handle) {
    fprintf(stderr, "dlopen %s: %s\n", k->so_path, dlerror());
    return false;
  }
  k->fn = (cube_cpu_kernel_fn)(uintptr_t)dlsym(k->handle, "cube_kernel_entry");
  if (!k->fn) fprintf(stderr, "dlsym cube_kernel_entry: %s\n", dlerror());
  return k->fn != NULL;
}

static void cpu_unload(cpu_kernel_t* k) {
  if (k->handle) dlclose(k->handle);
  if (k->so_path[0]) unlink(k->so_path);
  memset(k, 0, sizeof *k);
}

typedef struct launch {
  const cpu_kernel_t* k;
  uint32_t count[3], dim[3];
  cube_execution_mode_t mode;
  const cube_cpu_arg_t* args;
  uint32_t nargs;
  cube_bounds_error_t* bounds;
  uint32_t threads; /* 0 = 1 */
  const cube_define_t* defines;
  uint32_t define_count;
} launch_t;

typedef struct worker_arg {
  const launch_t* l;
  uint64_t first, end; /* linear cube range */
  uint32_t worker;
  int rc;
} worker_arg_t;

static void* cpu_worker(void* p) {
  worker_arg_t* w = p;
  const launch_t* l = w->l;
  uint64_t units = (uint64_t)l->dim[0] * l->dim[1] * l->dim[2];
  uint64_t scratch_size =
      cube__dialect_cpu_scratch_size(&l->k->sig, units, l->defines, l->define_count);
  void* scratch = scratch_size ? malloc(scratch_size) : NULL;
  if (scratch_size && !scratch) {
    w->rc = -1;
    return NULL;
  }
  cube_cpu_cube_t c;
  memset(&c, 0, sizeof c);
  memcpy(c.cube_count, l->count, sizeof c.cube_count);
  memcpy(c.cube_dim, l->dim, sizeof c.cube_dim);
  c.mode = l->mode;
  c.worker = w->worker;
  c.bounds = l->bounds;
  c.scratch = scratch;
  c.scratch_size = scratch_size;
  for (uint64_t i = w->first; i < w->end && w->rc == 0; ++i) {
    c.cube_pos[0] = (uint32_t)(i % l->count[0]);
    c.cube_pos[1] = (uint32_t)(i / l->count[0] % l->count[1]);
    c.cube_pos[2] = (uint32_t)(i / l->count[0] / l->count[1]);
    w->rc = l->k->fn(&c, l->args, l->nargs);
  }
  free(scratch);
  return NULL;
}

/* Runs every cube of the launch over |threads| threads (contiguous ranges);
 * returns the first non-zero return of the entry, or 0. */
static int cpu_launch(const launch_t* l) {
  uint32_t threads = l->threads ? l->threads : 1;
  if (threads > 16) threads = 16;
  uint64_t cubes = (uint64_t)l->count[0] * l->count[1] * l->count[2];
  worker_arg_t w[16];
  pthread_t tid[16];
  for (uint32_t t = 0; t < threads; ++t) {
    w[t] = (worker_arg_t){l, cubes * t / threads, cubes * (t + 1) / threads, t, 0};
    if (threads == 1) {
      cpu_worker(&w[t]);
    } else if (pthread_create(&tid[t], NULL, cpu_worker, &w[t]) != 0) {
      w[t].rc = -1;
      cpu_worker(&w[t]);
    }
  }
  int rc = 0;
  for (uint32_t t = 0; t < threads; ++t) {
    if (threads > 1) pthread_join(tid[t], NULL);
    if (w[t].rc && !rc) rc = w[t].rc;
  }
  return rc;
}

static cube_cpu_arg_t buf_arg(void* data, uint64_t bytes) {
  cube_cpu_arg_t a;
  memset(&a, 0, sizeof a);
  a.buffer.data = data;
  a.buffer.len = bytes;
  return a;
}
static cube_cpu_arg_t f32_arg(float v) {
  cube_cpu_arg_t a;
  memset(&a, 0, sizeof a);
  a.f32 = v;
  return a;
}
static cube_cpu_arg_t u32_arg(uint32_t v) {
  cube_cpu_arg_t a;
  memset(&a, 0, sizeof a);
  a.u32 = v;
  return a;
}
static cube_cpu_arg_t i32_arg(int32_t v) {
  cube_cpu_arg_t a;
  memset(&a, 0, sizeof a);
  a.i32 = v;
  return a;
}

static float small_int_float(uint64_t* rng) { return (float)(int)(cube_test_rand(rng) % 17) - 8.0f; }

/* CPU cases ------------------------------------------------------------------------ */

CUBE_TEST(cpu_saxpy_every_mode) {
  for (int m = 0; m < 3; ++m) {
    cpu_kernel_t k;
    if (!cpu_build(&k, K_SAXPY, "saxpy", (cube_execution_mode_t)m, NULL, 0, NULL)) {
      CHECK(!"build saxpy");
      cpu_unload(&k);
      continue;
    }
    CHECK_EQ_U64(cube__dialect_cpu_scratch_size(&k.sig, 256, NULL, 0), 0);
    const uint32_t n = 100003; /* not a multiple of the cube */
    float* x = malloc(n * sizeof(float));
    float* y = malloc(n * sizeof(float));
    float* want = malloc(n * sizeof(float));
    uint64_t rng = 42 + (uint64_t)m;
    for (uint32_t i = 0; i < n; ++i) {
      x[i] = (float)(cube_test_rand(&rng) % 1000) / 7.0f;
      y[i] = (float)(cube_test_rand(&rng) % 1000) / 3.0f;
      want[i] = 2.5f * x[i] + y[i];
    }
    cube_cpu_arg_t args[3] = {buf_arg(x, n * sizeof(float)), buf_arg(y, n * sizeof(float)),
                              f32_arg(2.5f)};
    cube_bounds_error_t bounds = {0};
    launch_t l = {&k, {(n + 255) / 256, 1, 1}, {256, 1, 1}, (cube_execution_mode_t)m, args, 3,
                  &bounds, 2, NULL, 0};
    CHECK_EQ_U64(cpu_launch(&l), 0);
    uint32_t bad = 0;
    for (uint32_t i = 0; i < n; ++i)
      if (fabsf(y[i] - want[i]) > 1e-3f * fabsf(want[i]) + 1e-3f) ++bad;
    CHECK_EQ_U64(bad, 0);
    CHECK_EQ_U64(bounds.flag, 0);
    /* A wrong argument count is refused. */
    cube_cpu_cube_t c = {0};
    c.cube_count[0] = c.cube_count[1] = c.cube_count[2] = 1;
    c.cube_dim[0] = c.cube_dim[1] = c.cube_dim[2] = 1;
    CHECK_EQ_U64(k.fn(&c, args, 2), 2);
    free(x);
    free(y);
    free(want);
    cpu_unload(&k);
  }
}

static void check_reduce(const cpu_kernel_t* k, const uint32_t dim[3], uint32_t cubes,
                         uint32_t threads) {
  uint32_t units = dim[0] * dim[1] * dim[2];
  uint32_t n = units * cubes;
  float* in = malloc(n * sizeof(float));
  float* out = malloc(cubes * sizeof(float));
  uint64_t rng = 7 + units;
  for (uint32_t i = 0; i < n; ++i) in[i] = small_int_float(&rng);
  for (uint32_t c = 0; c < cubes; ++c) out[c] = -12345.0f;
  cube_cpu_arg_t args[2] = {buf_arg(in, n * sizeof(float)), buf_arg(out, cubes * sizeof(float))};
  launch_t l = {k, {cubes, 1, 1}, {dim[0], dim[1], dim[2]}, CUBE_EXEC_CHECKED, args, 2, NULL,
                threads, NULL, 0};
  int rc = cpu_launch(&l);
  if (rc) fprintf(stderr, "reduce dim (%u,%u,%u): %s\n", dim[0], dim[1], dim[2],
                  cube__dialect_cpu_entry_error(rc));
  CHECK_EQ_U64(rc, 0);
  uint32_t bad = 0;
  for (uint32_t c = 0; c < cubes; ++c) {
    float want = 0.0f;
    for (uint32_t u = 0; u < units; ++u) want += in[c * units + u];
    if (out[c] != want) {
      if (bad < 3)
        fprintf(stderr, "reduce dim (%u,%u,%u) cube %u: %g, want %g\n", dim[0], dim[1], dim[2], c,
                (double)out[c], (double)want);
      ++bad;
    }
  }
  CHECK_EQ_U64(bad, 0);
  free(in);
  free(out);
}

CUBE_TEST(cpu_reduce_sync_cube_fibers) {
  cpu_kernel_t k;
  if (!cpu_build(&k, K_REDUCE, "reduce", CUBE_EXEC_CHECKED, NULL, 0, NULL)) {
    CHECK(!"build reduce");
    cpu_unload(&k);
    return;
  }
  CHECK(k.sig.uses_sync_cube);
  static const uint32_t dims[][3] = {{1, 1, 1}, {7, 1, 1}, {64, 1, 1}, {256, 1, 1},
                                     {4, 4, 4}, {3, 5, 2}, {1024, 1, 1}};
  for (size_t d = 0; d < sizeof dims / sizeof dims[0]; ++d) {
    check_reduce(&k, dims[d], 37, 1);
    check_reduce(&k, dims[d], 64, 3); /* cube-local memory per worker thread */
  }
  /* Too little scratch: the entry says so instead of running. */
  uint32_t units = 64;
  uint64_t need = cube__dialect_cpu_scratch_size(&k.sig, units, NULL, 0);
  CHECK(need >= units * 16384u);
  float in[64] = {0}, out[1] = {0};
  cube_cpu_arg_t args[2] = {buf_arg(in, sizeof in), buf_arg(out, sizeof out)};
  cube_cpu_cube_t c = {0};
  c.cube_count[0] = c.cube_count[1] = c.cube_count[2] = 1;
  c.cube_dim[0] = units;
  c.cube_dim[1] = c.cube_dim[2] = 1;
  c.scratch = malloc(need);
  c.scratch_size = need - 1;
  CHECK_EQ_U64(k.fn(&c, args, 2), 1);
  c.scratch_size = need;
  CHECK_EQ_U64(k.fn(&c, args, 2), 0);
  free(c.scratch);
  cpu_unload(&k);
}

CUBE_TEST(cpu_reduce_ucontext_fallback) {
  cpu_kernel_t k;
  const char* flags[] = {"-DCUBE_CPU_FIBER_UCONTEXT", NULL};
  if (!cpu_build(&k, K_REDUCE, "reduce", CUBE_EXEC_CHECKED, NULL, 0, flags)) {
    CHECK(!"build reduce (ucontext)");
    cpu_unload(&k);
    return;
  }
  static const uint32_t dims[][3] = {{7, 1, 1}, {64, 1, 1}, {2, 3, 4}};
  for (size_t d = 0; d < sizeof dims / sizeof dims[0]; ++d) check_reduce(&k, dims[d], 9, 2);
  cpu_unload(&k);
}

CUBE_TEST(cpu_fiber_stack_define) {
  /* 40 KiB of locals per unit: needs CUBE_CPU_FIBER_STACK above the default. */
  const char* src =
      "CUBE_KERNEL(deep, CUBE_ARRAY(uint32_t, out))\n"
      "{\n"
      "    volatile uint32_t big[10240];\n"
      "    for (uint32_t k = 0; k < 10240u; ++k) big[k] = k ^ UNIT_POS;\n"
      "    sync_cube();\n"
      "    uint32_t s = 0;\n"
      "    for (uint32_t k = 0; k < 10240u; ++k) s += big[k];\n"
      "    CUBE_STORE(out, ABSOLUTE_POS, s);\n"
      "}\n";
  cube_define_t def = {"CUBE_CPU_FIBER_STACK", "65536"};
  cpu_kernel_t k;
  if (!cpu_build(&k, src, "deep", CUBE_EXEC_CHECKED, &def, 1, NULL)) {
    CHECK(!"build deep");
    cpu_unload(&k);
    return;
  }
  CHECK(cube__dialect_cpu_scratch_size(&k.sig, 16, &def, 1) >= 16u * 65536u);
  uint32_t out[32];
  cube_cpu_arg_t args[1] = {buf_arg(out, sizeof out)};
  launch_t l = {&k, {2, 1, 1}, {16, 1, 1}, CUBE_EXEC_CHECKED, args, 1, NULL, 1, &def, 1};
  CHECK_EQ_U64(cpu_launch(&l), 0);
  for (uint32_t i = 0; i < 32; ++i) {
    uint32_t want = 0;
    for (uint32_t j = 0; j < 10240u; ++j) want += j ^ (i % 16);
    CHECK_EQ_U64(out[i], want);
  }
  /* The runtime must size the scratch with the defines: the default size is
   * refused, not overrun. */
  l.defines = NULL;
  l.define_count = 0;
  CHECK_EQ_U64(cpu_launch(&l), 1);
  cpu_unload(&k);
}

CUBE_TEST(cpu_early_exit_before_barrier) {
  cpu_kernel_t k;
  if (!cpu_build(&k, K_EARLY_EXIT, "early_exit", CUBE_EXEC_CHECKED, NULL, 0, NULL)) {
    CHECK(!"build early_exit");
    cpu_unload(&k);
    return;
  }
  const uint32_t dim = 64, cubes = 3;
  static const uint32_t actives[] = {0, 1, 5, 63, 64};
  for (size_t a = 0; a < sizeof actives / sizeof actives[0]; ++a) {
    uint32_t active = actives[a];
    uint32_t out[64 * 3];
    for (uint32_t i = 0; i < dim * cubes; ++i) out[i] = 0xdeadu;
    cube_cpu_arg_t args[2] = {buf_arg(out, sizeof out), u32_arg(active)};
    launch_t l = {&k, {cubes, 1, 1}, {dim, 1, 1}, CUBE_EXEC_CHECKED, args, 2, NULL, 1, NULL, 0};
    CHECK_EQ_U64(cpu_launch(&l), 0);
    uint32_t want = active * (active + 1) / 2;
    for (uint32_t i = 0; i < dim * cubes; ++i)
      CHECK_EQ_U64(out[i], (i % dim) < active ? want : 0xdeadu);
  }
  cpu_unload(&k);
}

static void check_positions(bool with_sync) {
  cpu_kernel_t k;
  if (!cpu_build(&k, positions_source(with_sync), "positions", CUBE_EXEC_CHECKED, NULL, 0,
                 NULL)) {
    CHECK(!"build positions");
    cpu_unload(&k);
    return;
  }
  CHECK(k.sig.uses_sync_cube == with_sync);
  static const uint32_t shapes[][6] = {
      /* count x y z, dim x y z */
      {3, 2, 2, 4, 3, 2}, {5, 3, 1, 8, 2, 1}, {2, 1, 1, 1, 1, 1}, {1, 1, 1, 7, 1, 1},
      {1, 4, 3, 1, 1, 5}, {2, 2, 2, 16, 4, 1},
  };
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; ++s) {
    const uint32_t* sh = shapes[s];
    uint32_t nx = sh[0], ny = sh[1], nz = sh[2], dx = sh[3], dy = sh[4], dz = sh[5];
    uint32_t total = nx * ny * nz * dx * dy * dz;
    uint32_t* out = malloc((size_t)total * POS_FIELDS * sizeof(uint32_t));
    memset(out, 0xff, (size_t)total * POS_FIELDS * sizeof(uint32_t));
    cube_cpu_arg_t args[1] = {buf_arg(out, (uint64_t)total * POS_FIELDS * sizeof(uint32_t))};
    launch_t l = {&k, {nx, ny, nz}, {dx, dy, dz}, CUBE_EXEC_CHECKED, args, 1, NULL, 2, NULL, 0};
    CHECK_EQ_U64(cpu_launch(&l), 0);
    uint32_t bad = 0;
    for (uint32_t cz = 0; cz < nz; ++cz)
      for (uint32_t cy = 0; cy < ny; ++cy)
        for (uint32_t cx = 0; cx < nx; ++cx)
          for (uint32_t uz = 0; uz < dz; ++uz)
            for (uint32_t uy = 0; uy < dy; ++uy)
              for (uint32_t ux = 0; ux < dx; ++ux) {
                uint32_t ax = cx * dx + ux, ay = cy * dy + uy, az = cz * dz + uz;
                uint32_t abs = ax + nx * dx * (ay + ny * dy * az);
                uint32_t want[POS_FIELDS] = {
                    ux, uy, uz, ux + dx * (uy + dy * uz),
                    cx, cy, cz, cx + nx * (cy + ny * cz),
                    dx, dy, dz, dx * dy * dz,
                    nx, ny, nz, nx * ny * nz,
                    ax, ay, az, abs,
                    1, 0};
                for (int f = 0; f < POS_FIELDS; ++f) {
                  if (out[(size_t)abs * POS_FIELDS + (size_t)f] != want[f]) {
                    if (bad < 5)
                      fprintf(stderr, "shape %zu unit (%u,%u,%u) cube (%u,%u,%u) field %d: %u, "
                                      "want %u\n",
                              s, ux, uy, uz, cx, cy, cz, f,
                              out[(size_t)abs * POS_FIELDS + (size_t)f], want[f]);
                    ++bad;
                  }
                }
              }
    CHECK_EQ_U64(bad, 0);
    free(out);
  }
  cpu_unload(&k);
}

CUBE_TEST(cpu_positions_2d_3d) { check_positions(false); }
CUBE_TEST(cpu_positions_2d_3d_fibers) { check_positions(true); }

CUBE_TEST(cpu_atomics_histogram) {
  cpu_kernel_t k;
  if (!cpu_build(&k, K_HISTOGRAM, "histogram", CUBE_EXEC_VALIDATE, NULL, 0, NULL)) {
    CHECK(!"build histogram");
    cpu_unload(&k);
    return;
  }
  const uint32_t n = 50000, nbins = 37;
  uint32_t* data = malloc(n * sizeof(uint32_t));
  uint32_t bins[37] = {0}, want[37] = {0};
  uint64_t rng = 99;
  for (uint32_t i = 0; i < n; ++i) {
    data[i] = (uint32_t)cube_test_rand(&rng);
    want[data[i] % nbins]++;
  }
  cube_cpu_arg_t args[3] = {buf_arg(data, n * sizeof(uint32_t)), buf_arg(bins, sizeof bins),
                            u32_arg(nbins)};
  cube_bounds_error_t bounds = {0};
  launch_t l = {&k, {(n + 127) / 128, 1, 1}, {128, 1, 1}, CUBE_EXEC_VALIDATE, args, 3, &bounds,
                4, NULL, 0};
  CHECK_EQ_U64(cpu_launch(&l), 0);
  for (uint32_t b = 0; b < nbins; ++b) CHECK_EQ_U64(bins[b], want[b]);
  CHECK_EQ_U64(bounds.flag, 0);
  free(data);
  cpu_unload(&k);
}

CUBE_TEST(cpu_atomics_every_op) {
  cpu_kernel_t k;
  if (!cpu_build(&k, K_ATOMIC_OPS, "atomic_ops", CUBE_EXEC_CHECKED, NULL, 0, NULL)) {
    CHECK(!"build atomic_ops");
    cpu_unload(&k);
    return;
  }
  const uint32_t n = 4096;
  uint32_t u[9] = {0, 0xffffffffu, 0, 100000, 0, 0, 0xffffffffu, 0, 0};
  int32_t s[9] = {0, 0, INT32_MIN, 0, 0, 0, -1, 0, 0};
  float f[1] = {0.0f};
  uint32_t* seen = calloc(n, sizeof(uint32_t));
  cube_cpu_arg_t args[4] = {buf_arg(u, sizeof u), buf_arg(s, sizeof s), buf_arg(f, sizeof f),
                            buf_arg(seen, n * sizeof(uint32_t))};
  launch_t l = {&k, {n / 64, 1, 1}, {64, 1, 1}, CUBE_EXEC_CHECKED, args, 4, NULL, 4, NULL, 0};
  CHECK_EQ_U64(cpu_launch(&l), 0);
  uint32_t x = 0;
  for (uint32_t i = 0; i < n; ++i) x ^= i;
  CHECK_EQ_U64(u[0], n);
  CHECK_EQ_U64(u[1], 5);
  CHECK_EQ_U64(u[2], (n - 1) * 3);
  CHECK_EQ_U64(u[3], 100000u - 2u * n);
  CHECK_EQ_U64(u[4], 0xffffffffu);
  CHECK_EQ_U64(u[5], x);
  CHECK_EQ_U64(u[6], 0);
  CHECK_EQ_U64(u[8], n);
  /* Exchange: the old values and the final one are 0, 1, ..., n once each. */
  char* hit = calloc(n + 1, 1);
  hit[u[7]]++;
  for (uint32_t i = 0; i < n; ++i)
    if (seen[i] <= n) hit[seen[i]]++;
  uint32_t missing = 0;
  for (uint32_t i = 0; i <= n; ++i) missing += hit[i] != 1;
  CHECK_EQ_U64(missing, 0);
  free(hit);
  CHECK_EQ_U64((uint64_t)(int64_t)s[0], (uint64_t)-(int64_t)n);
  CHECK_EQ_U64((uint64_t)(int64_t)s[1], (uint64_t)(-(int64_t)(n - 1)));
  CHECK_EQ_U64((uint64_t)(int64_t)s[2], (uint64_t)(int64_t)(n - 1 - 7));
  CHECK_EQ_U64((uint64_t)(int64_t)s[3], (uint64_t)(-3 * (int64_t)n));
  CHECK_EQ_U64(s[4], 1);
  CHECK_EQ_U64((uint64_t)(int64_t)s[5], (uint64_t)(int64_t)(int32_t)x);
  CHECK_EQ_U64((uint64_t)(int64_t)s[6], (uint64_t)(int64_t)-2);
  CHECK_EQ_U64(s[7], 5);
  CHECK_EQ_U64((uint64_t)(int64_t)s[8], (uint64_t)-(int64_t)n);
  CHECK(f[0] == 0.5f * (float)n);
  free(seen);
  cpu_unload(&k);
}

CUBE_TEST(cpu_atomics_shared_memory) {
  cpu_kernel_t k;
  if (!cpu_build(&k, K_SHARED_ATOMICS, "shared_atomics", CUBE_EXEC_CHECKED, NULL, 0, NULL)) {
    CHECK(!"build shared_atomics");
    cpu_unload(&k);
    return;
  }
  const uint32_t cubes = 20, dim = 48;
  uint32_t count[20];
  float fsum[20];
  cube_cpu_arg_t args[2] = {buf_arg(count, sizeof count), buf_arg(fsum, sizeof fsum)};
  launch_t l = {&k, {cubes, 1, 1}, {dim, 1, 1}, CUBE_EXEC_CHECKED, args, 2, NULL, 3, NULL, 0};
  CHECK_EQ_U64(cpu_launch(&l), 0);
  for (uint32_t c = 0; c < cubes; ++c) {
    CHECK_EQ_U64(count[c], dim);
    CHECK(fsum[c] == 2.0f * (float)dim);
  }
  cpu_unload(&k);
}

/* Runs oob with 16 units over in/out of 16 visible elements (plus 8 guard
 * elements each, initialised to |guard|). */
static void run_oob(const cpu_kernel_t* k, cube_execution_mode_t mode, int32_t rs, int32_t ws,
                    float* in, float* out, cube_bounds_error_t* bounds) {
  for (int i = 0; i < 24; ++i) {
    in[i] = i < 16 ? (float)(i * 10) : 1000.0f + (float)i;
    out[i] = -1.0f;
  }
  cube_cpu_arg_t args[4] = {buf_arg(in, 16 * sizeof(float)), buf_arg(out, 16 * sizeof(float)),
                            i32_arg(rs), i32_arg(ws)};
  if (bounds) memset(bounds, 0, sizeof *bounds);
  launch_t l = {k, {2, 1, 1}, {8, 1, 1}, mode, args, 4, bounds, 1, NULL, 0};
  CHECK_EQ_U64(cpu_launch(&l), 0);
}

CUBE_TEST(cpu_oob_checked) {
  cpu_kernel_t k;
  if (!cpu_build(&k, K_OOB, "oob", CUBE_EXEC_CHECKED, NULL, 0, NULL)) {
    CHECK(!"build oob");
    cpu_unload(&k);
    return;
  }
  float in[24], out[24];
  cube_bounds_error_t bounds;
  /* out[i - 4] = in[i + 4] + 1 */
  run_oob(&k, CUBE_EXEC_CHECKED, 4, -4, in, out, &bounds);
  for (int j = 0; j < 8; ++j) CHECK(out[j] == in[j + 8] + 1.0f);
  for (int j = 8; j < 12; ++j) CHECK(out[j] == 1.0f); /* read past the end gave 0 */
  for (int j = 12; j < 24; ++j) CHECK(out[j] == -1.0f); /* writes dropped, guard intact */
  CHECK_EQ_U64(bounds.flag, 0);                         /* Checked records nothing */
  cpu_unload(&k);
}

CUBE_TEST(cpu_oob_validate) {
  cpu_kernel_t k;
  if (!cpu_build(&k, K_OOB, "oob", CUBE_EXEC_VALIDATE, NULL, 0, NULL)) {
    CHECK(!"build oob");
    cpu_unload(&k);
    return;
  }
  float in[24], out[24];
  cube_bounds_error_t b;
  run_oob(&k, CUBE_EXEC_VALIDATE, 0, 0, in, out, &b);
  CHECK_EQ_U64(b.flag, 0);
  for (int j = 0; j < 16; ++j) CHECK(out[j] == in[j] + 1.0f);
  /* One write before the start: argument 1, index -1. */
  run_oob(&k, CUBE_EXEC_VALIDATE, 0, -1, in, out, &b);
  CHECK_EQ_U64(b.flag, 1);
  CHECK_EQ_U64(b.arg, 1);
  CHECK_EQ_U64(b.index, UINT64_MAX);
  CHECK_EQ_U64(b.len, 16);
  CHECK_EQ_U64(b.is_write, 1);
  for (int j = 0; j < 15; ++j) CHECK(out[j] == in[j + 1] + 1.0f);
  CHECK(out[15] == -1.0f);
  /* Reads past the end (units 13..15): argument 0, a read; 0 was read. */
  run_oob(&k, CUBE_EXEC_VALIDATE, 3, 0, in, out, &b);
  CHECK_EQ_U64(b.flag, 1);
  CHECK_EQ_U64(b.arg, 0);
  CHECK(b.index >= 16 && b.index <= 18);
  CHECK_EQ_U64(b.len, 16);
  CHECK_EQ_U64(b.is_write, 0);
  for (int j = 13; j < 16; ++j) CHECK(out[j] == 1.0f);
  for (int j = 16; j < 24; ++j) CHECK(out[j] == -1.0f);
  /* The first error stays: a later one does not overwrite it. */
  cube_cpu_arg_t args[4] = {buf_arg(in, 16 * sizeof(float)), buf_arg(out, 16 * sizeof(float)),
                            i32_arg(0), i32_arg(100)};
  launch_t l = {&k, {2, 1, 1}, {8, 1, 1}, CUBE_EXEC_VALIDATE, args, 4, &b, 1, NULL, 0};
  CHECK_EQ_U64(cpu_launch(&l), 0);
  CHECK_EQ_U64(b.arg, 0);
  CHECK_EQ_U64(b.is_write, 0);
  /* No record (NULL): still safe. */
  run_oob(&k, CUBE_EXEC_VALIDATE, 5, -5, in, out, NULL);
  for (int j = 16; j < 24; ++j) CHECK(out[j] == -1.0f);
  cpu_unload(&k);
}

CUBE_TEST(cpu_oob_unchecked) {
  cpu_kernel_t k;
  if (!cpu_build(&k, K_OOB, "oob", CUBE_EXEC_UNCHECKED, NULL, 0, NULL)) {
    CHECK(!"build oob");
    cpu_unload(&k);
    return;
  }
  float in[24], out[24];
  cube_bounds_error_t b;
  /* Plain access: past the visible length lands in the guard elements. */
  run_oob(&k, CUBE_EXEC_UNCHECKED, 4, 4, in, out, &b);
  for (int i = 0; i < 16; ++i) {
    float want = (i + 4 < 16 ? (float)((i + 4) * 10) : 1000.0f + (float)(i + 4)) + 1.0f;
    CHECK(out[i + 4] == want);
  }
  CHECK_EQ_U64(b.flag, 0);
  cpu_unload(&k);
}

CUBE_TEST(cpu_math_helpers) {
  cpu_kernel_t k;
  if (!cpu_build(&k, K_MATH, "math", CUBE_EXEC_CHECKED, NULL, 0, NULL)) {
    CHECK(!"build math");
    cpu_unload(&k);
    return;
  }
  enum { N = 100 };
  float x[N];
  static float of[N * MATH_F];
  static double od[N * MATH_D];
  for (int i = 0; i < N; ++i) x[i] = 0.1f + 0.019f * (float)i;
  cube_cpu_arg_t args[3] = {buf_arg(x, sizeof x), buf_arg(of, sizeof of), buf_arg(od, sizeof od)};
  launch_t l = {&k, {4, 1, 1}, {32, 1, 1}, CUBE_EXEC_CHECKED, args, 3, NULL, 1, NULL, 0};
  CHECK_EQ_U64(cpu_launch(&l), 0);
  uint32_t bad = 0;
  for (int i = 0; i < N; ++i) {
    float v = x[i];
    double d = (double)v;
    float wf[MATH_F] = {sqrtf(v), expf(v), logf(v), sinf(v), cosf(v), tanhf(v), v,
                        fminf(v, 1.0f), fmaxf(v, 1.0f), powf(v, 1.5f), floorf(3.0f * v),
                        ceilf(3.0f * v), fmaf(v, 2.0f, 1.0f), fmaf(v, v, 1.0f), 1.0f};
    double wd[MATH_D] = {sqrt(d), exp(d), log(d), sin(d), cos(d), tanh(d), d,
                         fmin(d, 1.0), fmax(d, 1.0), pow(d, 1.5), floor(3.0 * d),
                         ceil(3.0 * d), fma(d, 2.0, 1.0), d};
    for (int f = 0; f < MATH_F; ++f)
      if (fabsf(of[i * MATH_F + f] - wf[f]) > 1e-5f * fabsf(wf[f]) + 1e-6f) ++bad;
    for (int f = 0; f < MATH_D; ++f)
      if (fabs(od[i * MATH_D + f] - wd[f]) > 1e-12 * fabs(wd[f]) + 1e-14) ++bad;
  }
  CHECK_EQ_U64(bad, 0);
  cpu_unload(&k);
}

CUBE_TEST(cpu_plane_width_one) {
  cpu_kernel_t k;
  if (!cpu_build(&k, K_PLANE, "plane", CUBE_EXEC_CHECKED, NULL, 0, NULL)) {
    CHECK(!"build plane");
    cpu_unload(&k);
    return;
  }
  enum { N = 64 };
  float x[N], of[3 * N];
  uint32_t ou[3 * N];
  int32_t oi[3 * N];
  for (int i = 0; i < N; ++i) x[i] = (float)i * 0.25f;
  cube_cpu_arg_t args[4] = {buf_arg(x, sizeof x), buf_arg(of, sizeof of), buf_arg(ou, sizeof ou),
                            buf_arg(oi, sizeof oi)};
  launch_t l = {&k, {2, 1, 1}, {32, 1, 1}, CUBE_EXEC_CHECKED, args, 4, NULL, 1, NULL, 0};
  CHECK_EQ_U64(cpu_launch(&l), 0);
  for (int i = 0; i < N; ++i) {
    for (int j = 0; j < 3; ++j) {
      CHECK(of[3 * i + j] == x[i]);
      CHECK_EQ_U64(ou[3 * i + j], (uint32_t)i);
      CHECK_EQ_U64((uint64_t)(int64_t)oi[3 * i + j], (uint64_t)(int64_t)-i);
    }
  }
  cpu_unload(&k);
}

CUBE_TEST(cpu_two_kernels_run_the_entry) {
  for (int m = 0; m < 3; ++m) {
    cpu_kernel_t k;
    if (!cpu_build(&k, K_TWO, "fill_b", (cube_execution_mode_t)m, NULL, 0, NULL)) {
      CHECK(!"build fill_b");
      cpu_unload(&k);
      continue;
    }
    CHECK_EQ_U64(k.sig.count, 7);
    double q[40];
    for (int i = 0; i < 40; ++i) q[i] = (double)i;
    cube_cpu_arg_t args[7];
    memset(args, 0, sizeof args);
    args[0] = buf_arg(q, sizeof q);
    args[1].f32 = 0.5f;
    args[2].f64 = 0.25;
    args[3].u32 = 3000000000u;
    args[4].i32 = -7;
    args[5].u64 = 1ull << 40;
    args[6].i64 = -(1ll << 41);
    launch_t l = {&k, {5, 1, 1}, {8, 1, 1}, (cube_execution_mode_t)m, args, 7, NULL, 1, NULL, 0};
    CHECK_EQ_U64(cpu_launch(&l), 0);
    double add = 0.5 + 0.25 + 3000000000.0 - 7.0 + (double)(1ull << 40) - (double)(1ll << 41);
    for (int i = 0; i < 40; ++i) CHECK(q[i] == (double)i + add);
    cpu_unload(&k);
  }
}

CUBE_TEST(cpu_syntax_error_names_user_line) {
  const char* src =
      "CUBE_KERNEL(broken, CUBE_ARRAY(float, x))\n"
      "{\n"
      "    x[0] = 1.0f;\n"
      "    x[1] = undeclared_thing;\n"
      "}\n";
  cube__signature_t sig;
  REQUIRE_OK(cube__dialect_parse(src, "broken", &sig));
  char* text = NULL;
  REQUIRE_OK(cube__dialect_generate(CUBE__TARGET_CPU, &sig, src, NULL, 0, CUBE_EXEC_CHECKED,
                                    &text));
  char so[1100], *log = NULL;
  snprintf(so, sizeof so, "%s/broken.so", tmp_dir());
  bool ok = cc_compile("cc", NULL, text, so, &log);
  free(text);
  CHECK(!ok);
  CHECK(log != NULL && strstr(log, "broken.cube:4:") != NULL);
  if (log && !strstr(log, "broken.cube:4:")) fprintf(stderr, "compiler said:\n%s\n", log);
  free(log);
  unlink(so);
}

/* The prelude's copies of the ABI types are checked against the runtime's:
 * a unit whose asserted offset is off by 8 does not compile. */
CUBE_TEST(cpu_layout_mismatch_is_caught) {
  cube__signature_t sig;
  REQUIRE_OK(cube__dialect_parse(K_SAXPY, "saxpy", &sig));
  char* text = NULL;
  REQUIRE_OK(cube__dialect_generate(CUBE__TARGET_CPU, &sig, K_SAXPY, NULL, 0, CUBE_EXEC_CHECKED,
                                    &text));
  char so[1100];
  snprintf(so, sizeof so, "%s/layout.so", tmp_dir());
  CHECK(cc_compile("cc", NULL, text, so, NULL));
  const char* key = "_Static_assert(offsetof(cube_cpu_cube_t, bounds) == ";
  char* at = strstr(text, key);
  REQUIRE(at != NULL);
  char* num = at + strlen(key);
  unsigned long off = strtoul(num, NULL, 10);
  CHECK_EQ_U64(off, offsetof(cube_cpu_cube_t, bounds));
  /* Rewrite the number (same width or wider: build a new text). */
  size_t prefix = (size_t)(num - text);
  char* end = num;
  while (*end >= '0' && *end <= '9') ++end;
  size_t len = strlen(text);
  char* bad = malloc(len + 32);
  REQUIRE(bad != NULL);
  memcpy(bad, text, prefix);
  int w = sprintf(bad + prefix, "%lu", off + 8);
  memcpy(bad + prefix + (size_t)w, end, len - (size_t)(end - text) + 1);
  char* log = NULL;
  CHECK(!cc_compile("cc", NULL, bad, so, &log));
  CHECK(log != NULL && strstr(log, "cube_cpu_cube_t.bounds") != NULL);
  free(log);
  free(bad);
  free(text);
  unlink(so);
}

/* Every test kernel, every mode, warning-free under gcc and clang with
 * -std=c11 -pedantic -Wall -Wextra -Werror. */
CUBE_TEST(cpu_units_warning_free_gcc_clang) {
  static const char* compilers[] = {"gcc", "clang"};
  test_kernel_t ks[MAX_KERNELS];
  size_t nk = all_kernels(ks);
  int tried = 0;
  for (int c = 0; c < 2; ++c) {
    if (!have_program(compilers[c])) {
      fprintf(stderr, "%s not found, not tried\n", compilers[c]);
      continue;
    }
    ++tried;
    for (size_t i = 0; i < nk; ++i) {
      cube__signature_t sig;
      REQUIRE_OK(cube__dialect_parse(ks[i].source, ks[i].entry, &sig));
      for (int m = 0; m < 3; ++m) {
        char* text = NULL;
        REQUIRE_OK(cube__dialect_generate(CUBE__TARGET_CPU, &sig, ks[i].source, ks[i].defines,
                                          ks[i].define_count, (cube_execution_mode_t)m, &text));
        char so[1100];
        snprintf(so, sizeof so, "%s/warn-%s-%zu-%d.so", tmp_dir(), compilers[c], i, m);
        const char* flags[] = {"-std=c11", "-pedantic", NULL};
        if (!cc_compile(compilers[c], flags, text, so, NULL))
          fprintf(stderr, "... kernel '%s' mode %d\n", ks[i].entry, m);
        CHECK(access(so, F_OK) == 0);
        /* Only cube_kernel_entry is exported. */
        void* h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
        CHECK(h != NULL);
        if (h) {
          CHECK(dlsym(h, "cube_kernel_entry") != NULL);
          CHECK(dlsym(h, "cube__ctx_switch") == NULL);
          CHECK(dlsym(h, "cube__fiber_start") == NULL);
          dlclose(h);
        }
        unlink(so);
        free(text);
      }
    }
  }
  if (!tried) CUBE_SKIP("neither gcc nor clang found");
}

static void check_helpers(void) {
  cpu_kernel_t k;
  if (!cpu_build(&k, K_HELPERS, "helpers", CUBE_EXEC_VALIDATE, NULL, 0, NULL)) {
    CHECK(!"build helpers");
    cpu_unload(&k);
    return;
  }
  const uint32_t dim = 48, cubes = 5, n = dim * cubes;
  float x[240], y[240];
  for (uint32_t i = 0; i < n; ++i) {
    x[i] = (float)i;
    y[i] = -1.0f;
  }
  cube_cpu_arg_t args[2] = {buf_arg(x, sizeof x), buf_arg(y, sizeof y)};
  cube_bounds_error_t b = {0};
  launch_t l = {&k, {cubes, 1, 1}, {dim, 1, 1}, CUBE_EXEC_VALIDATE, args, 2, &b, 2, NULL, 0};
  CHECK_EQ_U64(cpu_launch(&l), 0);
  for (uint32_t c = 0; c < cubes; ++c)
    for (uint32_t u = 0; u < dim; ++u) CHECK(y[c * dim + u] == 2.0f * x[c * dim + (u + 1) % dim]);
  CHECK_EQ_U64(b.flag, 0);
  /* Reads past x in the helper are recorded against the entry's 'x'. */
  args[0] = buf_arg(x, (n - 3) * sizeof(float));
  CHECK_EQ_U64(cpu_launch(&l), 0);
  CHECK_EQ_U64(b.flag, 1);
  CHECK_EQ_U64(b.arg, 0);
  CHECK_EQ_U64(b.len, n - 3);
  CHECK_EQ_U64(b.is_write, 0);
  CHECK(y[n - 4] == 0.0f);
  cpu_unload(&k);
}

CUBE_TEST(cpu_helpers_with_unit_context) { check_helpers(); }

static void check_regs(void) {
  cpu_kernel_t k;
  if (!cpu_build(&k, K_REGS, "regs", CUBE_EXEC_CHECKED, NULL, 0, NULL)) {
    CHECK(!"build regs");
    cpu_unload(&k);
    return;
  }
  const uint32_t dim = 33, rounds = 50;
  double out[99];
  cube_cpu_arg_t args[2] = {buf_arg(out, sizeof out), u32_arg(rounds)};
  launch_t l = {&k, {1, 1, 1}, {dim, 1, 1}, CUBE_EXEC_CHECKED, args, 2, NULL, 1, NULL, 0};
  CHECK_EQ_U64(cpu_launch(&l), 0);
  uint32_t bad = 0;
  for (uint32_t u = 0; u < dim; ++u) {
    double a = u * 1.5, b = u + 0.25, c = 3.0 - u, d = u * 0.5;
    float e = (float)u * 2.0f, f = 1.0f / ((float)u + 1.0f);
    uint64_t g = u * 0x9E3779B97F4A7C15ull, h = ~(uint64_t)u;
    for (uint32_t r = 0; r < rounds; ++r) {
      a = a * 0.5 + b;
      b = b - c * 0.5;
      c = c + d * 0.25;
      d = d * 0.75 + a * 0.125;
      e = e * 0.5f + f;
      f = f * 0.25f + e * 0.125f;
      g = g * 6364136223846793005ull + 1442695040888963407ull;
      h ^= g >> 7;
    }
    double w0 = a + b + c + d, w1 = (double)(e + f), w2 = (double)((g ^ h) >> 12);
    if (fabs(out[3 * u] - w0) > 1e-9 * fabs(w0) + 1e-12) ++bad;
    if (fabs(out[3 * u + 1] - w1) > 1e-5 * fabs(w1) + 1e-7) ++bad;
    if (out[3 * u + 2] != w2) ++bad;
  }
  CHECK_EQ_U64(bad, 0);
  cpu_unload(&k);
}

CUBE_TEST(cpu_fibers_keep_registers) { check_regs(); }

/* The example of docs/dialect.md runs as documented. */
CUBE_TEST(cpu_doc_example) {
  cpu_kernel_t k;
  if (!cpu_build(&k, K_DOC, "sum_squares", CUBE_EXEC_CHECKED, DOC_DEFINES, 1, NULL)) {
    CHECK(!"build sum_squares");
    cpu_unload(&k);
    return;
  }
  const uint32_t n = 1000, dim = 256, cubes = (n + dim - 1) / dim;
  float x[1000], partial[4];
  uint64_t rng = 3;
  for (uint32_t i = 0; i < n; ++i) x[i] = small_int_float(&rng);
  cube_cpu_arg_t args[2] = {buf_arg(x, sizeof x), buf_arg(partial, sizeof partial)};
  launch_t l = {&k, {cubes, 1, 1}, {dim, 1, 1}, CUBE_EXEC_CHECKED, args, 2, NULL, 2, NULL, 0};
  CHECK_EQ_U64(cpu_launch(&l), 0);
  for (uint32_t c = 0; c < cubes; ++c) {
    float want = 0.0f;
    for (uint32_t i = c * dim; i < (c + 1) * dim && i < n; ++i) want += x[i] * x[i];
    CHECK(partial[c] == want);
  }
  cpu_unload(&k);
  /* And the types kernel. */
  if (!cpu_build(&k, K_TYPES, "types", CUBE_EXEC_CHECKED, TYPES_DEFINES, 1, NULL)) {
    CHECK(!"build types");
    cpu_unload(&k);
    return;
  }
  uint32_t o[4] = {0};
  cube_cpu_arg_t targs[1] = {buf_arg(o, sizeof o)};
  launch_t tl = {&k, {1, 1, 1}, {1, 1, 1}, CUBE_EXEC_CHECKED, targs, 1, NULL, 1, NULL, 0};
  CHECK_EQ_U64(cpu_launch(&tl), 0);
  CHECK_EQ_U64(o[0], 4u + 1u + 0xffffffffu + 1u + (uint32_t)-2 + 7u);
  CHECK_EQ_U64(o[1], 3);
  CHECK_EQ_U64(o[2], 3u + 0x7fffffffu);
  CHECK_EQ_U64(o[3], (uint32_t)(0xffffffffu + 1u + 1u));
  cpu_unload(&k);
}

/* The flags the CPU backend compiles with (clang when present, -O3
 * -march=native -fopenmp-simd): fibers, positions and the saxpy loop. */
CUBE_TEST(cpu_runtime_compiler_flags) {
  static const char* const flags[] = {"-O3", "-march=native", "-std=gnu11", "-fno-math-errno",
                                      "-fopenmp-simd", NULL};
  build_cc = have_program("clang") ? "clang" : "cc";
  build_flags = flags;
  check_helpers();
  check_regs();
  check_positions(false);
  check_positions(true);
  static const uint32_t dims[][3] = {{1, 1, 1}, {7, 1, 1}, {256, 1, 1}, {3, 5, 2}};
  cpu_kernel_t k;
  if (cpu_build(&k, K_REDUCE, "reduce", CUBE_EXEC_UNCHECKED, NULL, 0, NULL)) {
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; ++d) check_reduce(&k, dims[d], 50, 2);
  } else {
    CHECK(!"build reduce");
  }
  cpu_unload(&k);
  build_cc = "cc";
  build_flags = NULL;
}

/* The unit loop vectorises under each C compiler present ------------------------- */

/* Kernels whose unit loop every compiler should vectorise: the guard of a
 * scalar bound (a masked store), the guard of the array's length (folds away
 * in an interior cube), a copy, and a kernel with several arrays and a
 * position-dependent value. */
static const char* const K_VEC_SAXPY_N =
    "CUBE_KERNEL(vec_saxpy_n, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a,\n"
    "            uint32_t n) {\n"
    "  uint32_t i = ABSOLUTE_POS;\n"
    "  if (i < n) CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "}\n";
static const char* const K_VEC_COPY =
    "CUBE_KERNEL(vec_copy, CUBE_ARRAY(const int32_t, in), CUBE_ARRAY(int32_t, out)) {\n"
    "  uint32_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(out)) CUBE_STORE(out, i, CUBE_LOAD(in, i));\n"
    "}\n";
static const char* const K_VEC_FMA =
    "CUBE_KERNEL(vec_fma, CUBE_ARRAY(const double, a), CUBE_ARRAY(const double, b),\n"
    "            CUBE_ARRAY(double, c), double s) {\n"
    "  uint32_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(c))\n"
    "    CUBE_STORE(c, i, CUBE_LOAD(a, i) * CUBE_LOAD(b, i) + s * (double)i);\n"
    "}\n";

/* A 2-D kernel: ABSOLUTE_POS_X and _Y, a guard on both, a row index in 64
 * bits, and the column's value in the result (the interior unit loop counts
 * ABSOLUTE_POS_X for it). */
static const char* const K_VEC_ADD2D =
    "CUBE_KERNEL(vec_add2d, CUBE_ARRAY(const float, a), CUBE_ARRAY(const float, b),\n"
    "            CUBE_ARRAY(float, c), uint32_t w, uint32_t h) {\n"
    "  uint32_t x = ABSOLUTE_POS_X;\n"
    "  uint32_t y = ABSOLUTE_POS_Y;\n"
    "  if (x < w && y < h) {\n"
    "    uint64_t i = (uint64_t)y * w + x;\n"
    "    CUBE_STORE(c, i, CUBE_LOAD(a, i) + 2.0f * CUBE_LOAD(b, i) + (float)(x % 8u));\n"
    "  }\n"
    "}\n";

/* Generates |entry| in |mode| and compiles it with the backend's compiler
 * and flags and the compiler's vectorisation report; true when the report
 * names a vectorised loop (gcc: in the kernel's file or its generated entry's,
 * where the unit loops are). */
static bool unit_loop_vectorised_with(const char* source, const char* entry,
                                      cube_execution_mode_t mode, bool clang, bool all_notes,
                                      char** out_log);
static bool unit_loop_vectorised(const char* source, const char* entry, cube_execution_mode_t mode,
                                 bool clang, char** out_log) {
  return unit_loop_vectorised_with(source, entry, mode, clang, false, out_log);
}

static bool unit_loop_vectorised_with(const char* source, const char* entry,
                                      cube_execution_mode_t mode, bool clang, bool all_notes,
                                      char** out_log) {
  *out_log = NULL;
  cube__signature_t sig;
  if (cube__dialect_parse(source, entry, &sig)) return false;
  char* text = NULL;
  cube_status_t st = cube__dialect_generate(CUBE__TARGET_CPU, &sig, source, NULL, 0, mode, &text);
  if (st) {
    cube_status_free(st);
    return false;
  }
  const char* gcc_args[] = {all_notes ? "-fopt-info-vec-all" : "-fopt-info-vec-optimized", "-S",
                            "-x", "c", "-", "-o", "/dev/null", NULL};
  const char* clang_args[] = {"-Rpass=loop-vectorize", "-S", "-x", "c", "-", "-o", "/dev/null",
                              NULL};
  bool ok = false;
  st = cube__cpu_cc_capture(true, clang ? clang_args : gcc_args, text, out_log, &ok);
  free(text);
  if (st) {
    fprintf(stderr, "%s\n", cube_status_message(st));
    cube_status_free(st);
    return false;
  }
  if (!ok || !*out_log) return false;
  /* The kernel's file, or its generated entry's (whose only loops are the
   * unit loops): gcc names either, as the loop's first statement falls. */
  char file[96];
  snprintf(file, sizeof file, "%s.", entry);
  for (const char* line = *out_log; line && *line;) {
    const char* end = strchr(line, '\n');
    size_t n = end ? (size_t)(end - line) : strlen(line);
    char buf[512];
    snprintf(buf, sizeof buf, "%.*s", (int)(n < 500 ? n : 500), line);
    if (clang ? strstr(buf, "remark: vectorized loop") != NULL
              : strstr(buf, "loop vectorized") != NULL && strstr(buf, file) != NULL)
      return true;
    line = end ? end + 1 : NULL;
  }
  return false;
}

static void check_compiler_vectorises(const char* program, bool clang) {
  char path[PATH_MAX];
  bool found = false;
  const char* p = getenv("PATH");
  for (const char* d = p ? p : "/usr/bin"; d && *d && !found;) {
    const char* colon = strchr(d, ':');
    size_t n = colon ? (size_t)(colon - d) : strlen(d);
    snprintf(path, sizeof path, "%.*s/%s", (int)n, d, program);
    found = access(path, X_OK) == 0;
    d = colon ? colon + 1 : NULL;
  }
  if (!found) CUBE_SKIP("%s is not on PATH", program);
  REQUIRE_OK(cube_option_set("CUBE_CC", program));
  /* The public report says the same. */
  cube_cpu_compiler_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  REQUIRE_OK(cube_cpu_compiler_info(&info));
  CHECK(strstr(info.command, program) != NULL);
  CHECK(strstr(info.flags, "-fno-trapping-math") != NULL);
  CHECK_EQ_U64(info.unit_loop_vectorised, 1);
  if (info.unit_loop_vectorised != 1)
    fprintf(stderr, "%s (%s): %s\n", program, info.version, info.report);
  static const struct {
    const char* src;
    const char* entry;
  } ks[] = {{NULL, "saxpy"},   {NULL, "vec_saxpy_n"}, {NULL, "vec_copy"},
             {NULL, "vec_fma"}, {NULL, "vec_add2d"}};
  const char* srcs[] = {K_SAXPY, K_VEC_SAXPY_N, K_VEC_COPY, K_VEC_FMA, K_VEC_ADD2D};
  const cube_execution_mode_t modes[] = {CUBE_EXEC_CHECKED, CUBE_EXEC_UNCHECKED};
  for (size_t i = 0; i < sizeof ks / sizeof ks[0]; ++i) {
    for (size_t m = 0; m < 2; ++m) {
      char* log = NULL;
      bool v = unit_loop_vectorised(srcs[i], ks[i].entry, modes[m], clang, &log);
      CHECK(v);
      if (!v)
        fprintf(stderr, "%s did not vectorise the unit loop of '%s' (mode %d); its report:\n%s\n",
                program, ks[i].entry, (int)modes[m], log ? log : "(none)");
      free(log);
      /* A guard on an array's length folds away in an interior cube: gcc's
       * full report then names no masked store (it did, through gcc 12 and
       * 13, until the interior loop stated its end before the loop). */
      if (!clang && strstr(srcs[i], "< CUBE_LEN(") != NULL) {
        log = NULL;
        v = unit_loop_vectorised_with(srcs[i], ks[i].entry, modes[m], false, true, &log);
        CHECK(v);
        bool masked = log && strstr(log, "MASK_STORE") != NULL;
        CHECK(!masked);
        if (masked)
          fprintf(stderr, "gcc if-converted the length guard of '%s' (mode %d) into masked "
                          "stores; its report:\n%s\n", ks[i].entry, (int)modes[m], log);
        free(log);
      }
    }
  }
  REQUIRE_OK(cube_option_set("CUBE_CC", NULL));
}

/* The 2-D kernel whose interior unit loop counts ABSOLUTE_POS_X computes what
 * the host does, in every mode, with interior and edge cubes (a grid larger
 * than the data, odd sizes, a cube of 16 x 4 and one of 7 x 3), and with a
 * short output array: Checked drops the writes past its end, Validate
 * reports the first. */
CUBE_TEST(cpu_add2d_counter_x) {
  const uint32_t w = 1001, h = 299;
  const uint64_t n = (uint64_t)w * h;
  static const uint32_t dims[][2] = {{16, 4}, {7, 3}};
  for (int m = 0; m < 3; ++m) {
    cpu_kernel_t k;
    if (!cpu_build(&k, K_VEC_ADD2D, "vec_add2d", (cube_execution_mode_t)m, NULL, 0, NULL)) {
      CHECK(!"build vec_add2d");
      cpu_unload(&k);
      continue;
    }
    float* a = malloc(n * sizeof(float));
    float* b = malloc(n * sizeof(float));
    float* c = malloc((n + 64) * sizeof(float));
    uint64_t rng = 7 + (uint64_t)m;
    for (uint64_t i = 0; i < n; ++i) {
      a[i] = small_int_float(&rng);
      b[i] = small_int_float(&rng);
    }
    for (size_t d = 0; d < 2; ++d) {
      for (int shortc = 0; shortc < 2; ++shortc) {
        if (shortc && m == 2) continue; /* Unchecked: an out-of-bounds store is the user's */
        const uint64_t clen = shortc ? n - 37 : n;
        for (uint64_t i = 0; i < n + 64; ++i) c[i] = -1000.0f;
        cube_cpu_arg_t args[5] = {buf_arg(a, n * sizeof(float)), buf_arg(b, n * sizeof(float)),
                                  buf_arg(c, clen * sizeof(float)), u32_arg(w), u32_arg(h)};
        cube_bounds_error_t bounds = {0};
        launch_t l = {&k, {(w + dims[d][0] - 1) / dims[d][0] + 1,
                           (h + dims[d][1] - 1) / dims[d][1], 1},
                      {dims[d][0], dims[d][1], 1}, (cube_execution_mode_t)m, args, 5, &bounds,
                      2, NULL, 0};
        CHECK_EQ_U64(cpu_launch(&l), 0);
        uint64_t bad = 0;
        for (uint64_t i = 0; i < n + 64; ++i) {
          float want = i < clen ? a[i] + 2.0f * b[i] + (float)((i % w) % 8u) : -1000.0f;
          if (c[i] != want) ++bad;
        }
        CHECK_EQ_U64(bad, 0);
        if (bad)
          fprintf(stderr, "mode %d, cube %ux%u, output of %llu: %llu wrong\n", m, dims[d][0],
                  dims[d][1], (unsigned long long)clen, (unsigned long long)bad);
        if (m == 1 && shortc) {
          CHECK_EQ_U64(bounds.flag, 1);
          CHECK_EQ_U64(bounds.arg, 2);
          CHECK(bounds.index >= clen && bounds.index < n);
          CHECK_EQ_U64(bounds.len, clen);
          CHECK_EQ_U64(bounds.is_write, 1);
        } else {
          CHECK_EQ_U64(bounds.flag, 0);
        }
      }
    }
    free(a);
    free(b);
    free(c);
    cpu_unload(&k);
  }
}

CUBE_TEST(cpu_unit_loop_vectorises_gcc) { check_compiler_vectorises("gcc", false); }

CUBE_TEST(cpu_unit_loop_vectorises_clang) { check_compiler_vectorises("clang", true); }

/* CUDA through NVRTC ---------------------------------------------------------------- */

typedef struct nvrtc_program_s* nvrtc_program_t;
typedef int (*nvrtc_create_fn)(nvrtc_program_t*, const char*, const char*, int, const char* const*,
                               const char* const*);
typedef int (*nvrtc_compile_fn)(nvrtc_program_t, int, const char* const*);
typedef int (*nvrtc_log_size_fn)(nvrtc_program_t, size_t*);
typedef int (*nvrtc_log_fn)(nvrtc_program_t, char*);
typedef int (*nvrtc_destroy_fn)(nvrtc_program_t*);

CUBE_TEST(cuda_nvrtc_compiles_every_kernel) {
  static const char* libs[] = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  void* h = NULL;
  for (size_t i = 0; i < 3 && !h; ++i) h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
  if (!h) CUBE_SKIP("NVRTC not found (libnvrtc.so.13 / .12)");
  nvrtc_create_fn create = (nvrtc_create_fn)(uintptr_t)dlsym(h, "nvrtcCreateProgram");
  nvrtc_compile_fn compile = (nvrtc_compile_fn)(uintptr_t)dlsym(h, "nvrtcCompileProgram");
  nvrtc_log_size_fn log_size = (nvrtc_log_size_fn)(uintptr_t)dlsym(h, "nvrtcGetProgramLogSize");
  nvrtc_log_fn get_log = (nvrtc_log_fn)(uintptr_t)dlsym(h, "nvrtcGetProgramLog");
  nvrtc_destroy_fn destroy = (nvrtc_destroy_fn)(uintptr_t)dlsym(h, "nvrtcDestroyProgram");
  REQUIRE(create && compile && log_size && get_log && destroy);
  test_kernel_t ks[MAX_KERNELS];
  size_t nk = all_kernels(ks);
  for (size_t i = 0; i < nk; ++i) {
    cube__signature_t sig;
    REQUIRE_OK(cube__dialect_parse(ks[i].source, ks[i].entry, &sig));
    /* Each mode in both forms the backend compiles: any launch, and launches of 1
     * in y and z (CUBE_LAUNCH_1D ahead of the text, as cuda_kernel.c puts it). */
    for (int v = 0; v < 6; ++v) {
      const int m = v % 3;
      char* text = NULL;
      REQUIRE_OK(cube__dialect_generate(CUBE__TARGET_CUDA, &sig, ks[i].source, ks[i].defines,
                                        ks[i].define_count, (cube_execution_mode_t)m, &text));
      if (v >= 3) {
        static const char def[] = "#define CUBE_LAUNCH_1D 1\n";
        size_t tn = strlen(text);
        char* with = malloc(sizeof def + tn);
        REQUIRE(with != NULL);
        memcpy(with, def, sizeof def - 1);
        memcpy(with + sizeof def - 1, text, tn + 1);
        free(text);
        text = with;
      }
      char name[160];
      snprintf(name, sizeof name, "%s.cu", ks[i].entry);
      nvrtc_program_t prog = NULL;
      int rc = create(&prog, text, name, 0, NULL, NULL);
      CHECK_EQ_U64(rc, 0);
      if (rc == 0) {
        const char* opts[] = {"--gpu-architecture=compute_90"};
        rc = compile(prog, 1, opts);
        size_t n = 0;
        log_size(prog, &n);
        char* log = malloc(n + 1);
        if (log) {
          log[0] = '\0';
          get_log(prog, log);
          log[n] = '\0';
        }
        if (rc != 0 || (log && strstr(log, "warning")))
          fprintf(stderr, "NVRTC: kernel '%s' mode %d%s (%d):\n%s\n", ks[i].entry, m,
                  v >= 3 ? " 1-D" : "", rc, log ? log : "");
        CHECK_EQ_U64(rc, 0);
        CHECK(log == NULL || strstr(log, "warning") == NULL); /* warning-free */
        free(log);
        destroy(&prog);
      }
      free(text);
    }
  }
  /* A user error names the user's line. */
  const char* broken = "CUBE_KERNEL(broken, CUBE_ARRAY(float, x))\n{\n  x[0] = oops;\n}\n";
  cube__signature_t sig;
  REQUIRE_OK(cube__dialect_parse(broken, "broken", &sig));
  char* text = NULL;
  REQUIRE_OK(cube__dialect_generate(CUBE__TARGET_CUDA, &sig, broken, NULL, 0, CUBE_EXEC_CHECKED,
                                    &text));
  nvrtc_program_t prog = NULL;
  if (create(&prog, text, "broken.cu", 0, NULL, NULL) == 0) {
    const char* opts[] = {"--gpu-architecture=compute_90"};
    CHECK(compile(prog, 1, opts) != 0);
    size_t n = 0;
    log_size(prog, &n);
    char* log = malloc(n + 1);
    if (log) {
      get_log(prog, log);
      log[n] = '\0';
      CHECK(strstr(log, "broken.cube(3)") != NULL || strstr(log, "broken.cube:3") != NULL);
      if (!strstr(log, "broken.cube(3)") && !strstr(log, "broken.cube:3"))
        fprintf(stderr, "NVRTC said:\n%s\n", log);
    }
    free(log);
    destroy(&prog);
  }
  free(text);
  /* NVRTC stays loaded: unloading it at exit is not worth the risk. */
}

/* OpenCL ---------------------------------------------------------------------------- */

#if defined(__has_include)
#if __has_include(<CL/cl.h>)
#define CUBE_TEST_HAVE_CL_H 1
#endif
#endif

#ifdef CUBE_TEST_HAVE_CL_H
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

typedef struct ocl {
  void* lib;
  cl_device_id device;
  cl_context ctx;
  cl_command_queue queue;
  __typeof__(clGetPlatformIDs)* GetPlatformIDs;
  __typeof__(clGetDeviceIDs)* GetDeviceIDs;
  __typeof__(clGetDeviceInfo)* GetDeviceInfo;
  __typeof__(clCreateContext)* CreateContext;
  __typeof__(clCreateCommandQueue)* CreateCommandQueue;
  __typeof__(clCreateProgramWithSource)* CreateProgramWithSource;
  __typeof__(clBuildProgram)* BuildProgram;
  __typeof__(clGetProgramBuildInfo)* GetProgramBuildInfo;
  __typeof__(clCreateKernel)* CreateKernel;
  __typeof__(clSetKernelArg)* SetKernelArg;
  __typeof__(clCreateBuffer)* CreateBuffer;
  __typeof__(clEnqueueNDRangeKernel)* EnqueueNDRangeKernel;
  __typeof__(clEnqueueReadBuffer)* EnqueueReadBuffer;
  __typeof__(clFinish)* Finish;
  __typeof__(clReleaseMemObject)* ReleaseMemObject;
  __typeof__(clReleaseKernel)* ReleaseKernel;
  __typeof__(clReleaseProgram)* ReleaseProgram;
  __typeof__(clReleaseCommandQueue)* ReleaseCommandQueue;
  __typeof__(clReleaseContext)* ReleaseContext;
} ocl_t;

/* 0 = ready, 1 = no platform (skip), -1 = failure. */
static int ocl_open(ocl_t* o) {
  memset(o, 0, sizeof *o);
  char cache[1100];
  snprintf(cache, sizeof cache, "%s/pocl-cache", tmp_dir());
  mkdir(cache, 0755);
  setenv("POCL_CACHE_DIR", cache, 1);
  o->lib = dlopen("libOpenCL.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!o->lib) return 1;
#define LOAD(f)                                                          \
  o->f = (__typeof__(o->f))(uintptr_t)dlsym(o->lib, "cl" #f);            \
  if (!o->f) {                                                           \
    fprintf(stderr, "libOpenCL.so.1 lacks cl" #f "\n");                  \
    return -1;                                                           \
  }
  LOAD(GetPlatformIDs) LOAD(GetDeviceIDs) LOAD(GetDeviceInfo) LOAD(CreateContext)
  LOAD(CreateCommandQueue) LOAD(CreateProgramWithSource) LOAD(BuildProgram)
  LOAD(GetProgramBuildInfo) LOAD(CreateKernel) LOAD(SetKernelArg) LOAD(CreateBuffer)
  LOAD(EnqueueNDRangeKernel) LOAD(EnqueueReadBuffer) LOAD(Finish) LOAD(ReleaseMemObject)
  LOAD(ReleaseKernel) LOAD(ReleaseProgram) LOAD(ReleaseCommandQueue) LOAD(ReleaseContext)
#undef LOAD
  cl_uint np = 0;
  cl_platform_id platform;
  if (o->GetPlatformIDs(1, &platform, &np) != CL_SUCCESS || np == 0) return 1;
  cl_uint nd = 0;
  if (o->GetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &o->device, &nd) != CL_SUCCESS || nd == 0)
    return 1;
  cl_int err = 0;
  o->ctx = o->CreateContext(NULL, 1, &o->device, NULL, NULL, &err);
  if (!o->ctx) return -1;
  o->queue = o->CreateCommandQueue(o->ctx, o->device, 0, &err);
  return o->queue ? 0 : -1;
}

static void ocl_close(ocl_t* o) {
  if (o->queue) o->ReleaseCommandQueue(o->queue);
  if (o->ctx) o->ReleaseContext(o->ctx);
  /* The library stays loaded (PoCL does not like being unloaded). */
}

/* Builds the OpenCL unit of |entry|; NULL (and the log printed) on failure. */
static cl_program ocl_build(ocl_t* o, const char* source, const char* entry,
                            const cube_define_t* defines, uint32_t define_count,
                            cube_execution_mode_t mode, char** out_log) {
  cube__signature_t sig;
  cube_status_t st = cube__dialect_parse(source, entry, &sig);
  if (st) {
    fprintf(stderr, "parse: %s\n", cube_status_message(st));
    cube_status_free(st);
    return NULL;
  }
  char* text = NULL;
  st = cube__dialect_generate(CUBE__TARGET_OPENCL, &sig, source, defines, define_count, mode,
                              &text);
  if (st) {
    fprintf(stderr, "generate: %s\n", cube_status_message(st));
    cube_status_free(st);
    return NULL;
  }
  cl_int err = 0;
  const char* srcs[1] = {text};
  cl_program p = o->CreateProgramWithSource(o->ctx, 1, srcs, NULL, &err);
  free(text);
  if (!p) return NULL;
  err = o->BuildProgram(p, 1, &o->device, "", NULL, NULL);
  if (err != CL_SUCCESS) {
    size_t n = 0;
    o->GetProgramBuildInfo(p, o->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
    char* log = malloc(n + 1);
    if (log) {
      o->GetProgramBuildInfo(p, o->device, CL_PROGRAM_BUILD_LOG, n, log, NULL);
      log[n] = '\0';
    }
    if (out_log) {
      *out_log = log;
    } else {
      fprintf(stderr, "OpenCL build of '%s' (mode %d) failed (%d):\n%s\n", entry, (int)mode, err,
              log ? log : "");
      free(log);
    }
    o->ReleaseProgram(p);
    return NULL;
  }
  /* Warning-free here too. */
  size_t n = 0;
  o->GetProgramBuildInfo(p, o->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n);
  char* log = malloc(n + 1);
  if (log) {
    o->GetProgramBuildInfo(p, o->device, CL_PROGRAM_BUILD_LOG, n, log, NULL);
    log[n] = '\0';
    if (strstr(log, "warning")) {
      fprintf(stderr, "OpenCL build of '%s' (mode %d) warns:\n%s\n", entry, (int)mode, log);
      cube_test_failures++;
    }
    free(log);
  }
  return p;
}

static void opencl_builds_every_kernel_impl(void) {
  ocl_t o;
  int rc = ocl_open(&o);
  if (rc == 1) {
    ocl_close(&o);
    CUBE_SKIP("no OpenCL platform");
  }
  REQUIRE(rc == 0);
  test_kernel_t ks[MAX_KERNELS];
  size_t nk = all_kernels(ks);
  for (size_t i = 0; i < nk; ++i) {
    for (int m = 0; m < 3; ++m) {
      cl_program p = ocl_build(&o, ks[i].source, ks[i].entry, ks[i].defines, ks[i].define_count,
                               (cube_execution_mode_t)m, NULL);
      CHECK(p != NULL);
      if (!p) continue;
      cl_int err = 0;
      cl_kernel k = o.CreateKernel(p, "cube_kernel_entry", &err);
      CHECK(k != NULL);
      if (k) o.ReleaseKernel(k);
      o.ReleaseProgram(p);
    }
  }
  /* A user error names the user's line. */
  char* log = NULL;
  cl_program p = ocl_build(&o, "CUBE_KERNEL(broken, CUBE_ARRAY(float, x))\n{\n  x[0] = oops;\n}\n",
                           "broken", NULL, 0, CUBE_EXEC_CHECKED, &log);
  CHECK(p == NULL);
  CHECK(log != NULL && strstr(log, "broken.cube:3") != NULL);
  if (log && !strstr(log, "broken.cube:3")) fprintf(stderr, "OpenCL said:\n%s\n", log);
  free(log);
  ocl_close(&o);
}

static cl_mem ocl_buffer(ocl_t* o, void* host, size_t bytes) {
  cl_int err = 0;
  return o->CreateBuffer(o->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, host, &err);
}

static void opencl_runs_saxpy_impl(void) {
  ocl_t o;
  int rc = ocl_open(&o);
  if (rc == 1) {
    ocl_close(&o);
    CUBE_SKIP("no OpenCL platform");
  }
  REQUIRE(rc == 0);
  for (int m = 0; m < 3; ++m) {
    cl_program p = ocl_build(&o, K_SAXPY, "saxpy", NULL, 0, (cube_execution_mode_t)m, NULL);
    CHECK(p != NULL);
    if (!p) continue;
    cl_int err = 0;
    cl_kernel k = o.CreateKernel(p, "cube_kernel_entry", &err);
    REQUIRE(k != NULL);
    const uint32_t n = 10000, dim = 64, cubes = (n + dim - 1) / dim;
    float* x = malloc(n * sizeof(float));
    float* y = malloc(n * sizeof(float));
    float* want = malloc(n * sizeof(float));
    uint64_t rng = 5;
    for (uint32_t i = 0; i < n; ++i) {
      x[i] = small_int_float(&rng);
      y[i] = small_int_float(&rng);
      want[i] = 3.0f * x[i] + y[i];
    }
    cl_mem bx = ocl_buffer(&o, x, n * sizeof(float)), by = ocl_buffer(&o, y, n * sizeof(float));
    uint32_t zero[8] = {0};
    cl_mem bb = ocl_buffer(&o, zero, sizeof zero);
    cl_ulong bytes = n * sizeof(float);
    float a = 3.0f;
    cl_ulong zero_offset = 0; /* the entry's arrays: buffer, bytes, offset */
    cl_uint arg = 0;
    CHECK(o.SetKernelArg(k, arg++, sizeof(cl_mem), &bx) == CL_SUCCESS);
    CHECK(o.SetKernelArg(k, arg++, sizeof(cl_ulong), &bytes) == CL_SUCCESS);
    CHECK(o.SetKernelArg(k, arg++, sizeof(cl_ulong), &zero_offset) == CL_SUCCESS);
    CHECK(o.SetKernelArg(k, arg++, sizeof(cl_mem), &by) == CL_SUCCESS);
    CHECK(o.SetKernelArg(k, arg++, sizeof(cl_ulong), &bytes) == CL_SUCCESS);
    CHECK(o.SetKernelArg(k, arg++, sizeof(cl_ulong), &zero_offset) == CL_SUCCESS);
    CHECK(o.SetKernelArg(k, arg++, sizeof(float), &a) == CL_SUCCESS);
    if (m == CUBE_EXEC_VALIDATE) CHECK(o.SetKernelArg(k, arg++, sizeof(cl_mem), &bb) == CL_SUCCESS);
    size_t global = (size_t)cubes * dim, local = dim;
    CHECK(o.EnqueueNDRangeKernel(o.queue, k, 1, NULL, &global, &local, 0, NULL, NULL) ==
          CL_SUCCESS);
    CHECK(o.EnqueueReadBuffer(o.queue, by, CL_TRUE, 0, n * sizeof(float), y, 0, NULL, NULL) ==
          CL_SUCCESS);
    CHECK(o.EnqueueReadBuffer(o.queue, bb, CL_TRUE, 0, sizeof zero, zero, 0, NULL, NULL) ==
          CL_SUCCESS);
    uint32_t bad = 0;
    for (uint32_t i = 0; i < n; ++i) bad += y[i] != want[i];
    CHECK_EQ_U64(bad, 0);
    CHECK_EQ_U64(zero[0], 0); /* the grid overhangs the buffer: checked, nothing recorded */
    o.ReleaseMemObject(bx);
    o.ReleaseMemObject(by);
    o.ReleaseMemObject(bb);
    o.ReleaseKernel(k);
    o.ReleaseProgram(p);
    free(x);
    free(y);
    free(want);
  }
  ocl_close(&o);
}

static void opencl_runs_reduce_impl(void) {
  ocl_t o;
  int rc = ocl_open(&o);
  if (rc == 1) {
    ocl_close(&o);
    CUBE_SKIP("no OpenCL platform");
  }
  REQUIRE(rc == 0);
  cl_program p = ocl_build(&o, K_REDUCE, "reduce", NULL, 0, CUBE_EXEC_CHECKED, NULL);
  REQUIRE(p != NULL);
  cl_int err = 0;
  cl_kernel k = o.CreateKernel(p, "cube_kernel_entry", &err);
  REQUIRE(k != NULL);
  static const uint32_t dims[] = {1, 7, 64, 256};
  for (size_t d = 0; d < 4; ++d) {
    const uint32_t dim = dims[d], cubes = 40, n = dim * cubes;
    float* in = malloc(n * sizeof(float));
    float out[40];
    uint64_t rng = 11 + dim;
    for (uint32_t i = 0; i < n; ++i) in[i] = small_int_float(&rng);
    for (uint32_t c = 0; c < cubes; ++c) out[c] = -1.0f;
    cl_mem bi = ocl_buffer(&o, in, n * sizeof(float)), bo = ocl_buffer(&o, out, sizeof out);
    cl_ulong ib = n * sizeof(float), ob = sizeof out, off = 0;
    CHECK(o.SetKernelArg(k, 0, sizeof(cl_mem), &bi) == CL_SUCCESS);
    CHECK(o.SetKernelArg(k, 1, sizeof(cl_ulong), &ib) == CL_SUCCESS);
    CHECK(o.SetKernelArg(k, 2, sizeof(cl_ulong), &off) == CL_SUCCESS);
    CHECK(o.SetKernelArg(k, 3, sizeof(cl_mem), &bo) == CL_SUCCESS);
    CHECK(o.SetKernelArg(k, 4, sizeof(cl_ulong), &ob) == CL_SUCCESS);
    CHECK(o.SetKernelArg(k, 5, sizeof(cl_ulong), &off) == CL_SUCCESS);
    size_t global = n, local = dim;
    CHECK(o.EnqueueNDRangeKernel(o.queue, k, 1, NULL, &global, &local, 0, NULL, NULL) ==
          CL_SUCCESS);
    CHECK(o.EnqueueReadBuffer(o.queue, bo, CL_TRUE, 0, sizeof out, out, 0, NULL, NULL) ==
          CL_SUCCESS);
    for (uint32_t c = 0; c < cubes; ++c) {
      float want = 0.0f;
      for (uint32_t u = 0; u < dim; ++u) want += in[c * dim + u];
      if (out[c] != want)
        fprintf(stderr, "OpenCL reduce dim %u cube %u: %g, want %g\n", dim, c, (double)out[c],
                (double)want);
      CHECK(out[c] == want);
    }
    o.ReleaseMemObject(bi);
    o.ReleaseMemObject(bo);
    free(in);
  }
  o.ReleaseKernel(k);
  o.ReleaseProgram(p);
  ocl_close(&o);
}
#endif /* CUBE_TEST_HAVE_CL_H */

#ifdef CUBE_TEST_HAVE_CL_H
#define OPENCL_CASE(name) name##_impl()
#else
#define OPENCL_CASE(name) CUBE_SKIP("<CL/cl.h> not installed")
#endif

CUBE_TEST(opencl_builds_every_kernel) { OPENCL_CASE(opencl_builds_every_kernel); }
CUBE_TEST(opencl_runs_saxpy) { OPENCL_CASE(opencl_runs_saxpy); }
CUBE_TEST(opencl_runs_reduce) { OPENCL_CASE(opencl_runs_reduce); }
