/* The same dialect kernels, with the same random inputs, on the CPU backend
 * and on another backend (OpenCL through PoCL in CI, CUDA on a GPU host):
 * integer results must be identical, floating-point ones equal within the
 * rounding the targets' math libraries and FMA contraction allow.
 *
 * A backend with no device makes its case skip (exit 77).
 */
// cube-test-libs: cube_static
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cube/cube.h"

const char* __lsan_default_suppressions(void);
const char* __lsan_default_suppressions(void) {
  return "leak:libpocl\nleak:libOpenCL\nleak:libLLVM\nleak:libclang\nleak:libhwloc\nleak:libnvrtc\n"
         "leak:libcuda\n";
}

static const char* const k_src =
    "CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(y)) CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "}\n"
    "CUBE_KERNEL(math_f32, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i >= CUBE_LEN(y)) return;\n"
    "  float v = CUBE_LOAD(x, i);\n"
    "  float r = sinf(v) * expf(0.5f * v) + sqrtf(fabsf(v)) + logf(1.0f + v * v)\n"
    "          + powf(fabsf(v) + 1.0f, 0.7f) + tanhf(v) + atan2f(v, 1.5f) + floorf(4.0f * v);\n"
    "  CUBE_STORE(y, i, r);\n"
    "}\n"
    "CUBE_KERNEL(math_f64, CUBE_ARRAY(const double, x), CUBE_ARRAY(double, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i >= CUBE_LEN(y)) return;\n"
    "  double v = CUBE_LOAD(x, i);\n"
    "  double r = sin(v) * exp(0.5 * v) + sqrt(fabs(v)) + log(1.0 + v * v)\n"
    "           + pow(fabs(v) + 1.0, 0.7) + tanh(v) + cos(3.0 * v) + fmod(v, 0.3);\n"
    "  CUBE_STORE(y, i, r);\n"
    "}\n"
    "CUBE_KERNEL(ints, CUBE_ARRAY(const uint32_t, a), CUBE_ARRAY(const int64_t, b),\n"
    "            CUBE_ARRAY(uint32_t, u), CUBE_ARRAY(int64_t, s)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i >= CUBE_LEN(u)) return;\n"
    "  uint32_t x = CUBE_LOAD(a, i);\n"
    "  int64_t y = CUBE_LOAD(b, i);\n"
    "  CUBE_STORE(u, i, (x * 2654435761u) ^ (x >> 7) ^ (x << 13) ^ (uint32_t)(y >> 17));\n"
    "  CUBE_STORE(s, i, (int64_t)x * (y >> 20) - y / (int64_t)(x | 1u) + (y % 97));\n"
    "}\n"
    "CUBE_KERNEL(partial_sums, CUBE_ARRAY(const double, x), CUBE_ARRAY(double, out)) {\n"
    "  CUBE_SHARED(double, tile, 256);\n"
    "  uint32_t u = UNIT_POS_X;\n"
    "  uint64_t i = ABSOLUTE_POS_X;\n"
    "  tile[u] = i < CUBE_LEN(x) ? x[i] : 0.0;\n"
    "  sync_cube();\n"
    "  for (uint32_t k = 128; k > 0; k >>= 1) {\n"
    "    if (u < k) tile[u] += tile[u + k];\n"
    "    sync_cube();\n"
    "  }\n"
    "  if (u == 0) CUBE_STORE(out, CUBE_POS_X, tile[0]);\n"
    "}\n"
    "CUBE_KERNEL(histogram, CUBE_ARRAY(const uint32_t, v), CUBE_ARRAY(uint32_t, bins)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(v)) cube_atomic_add_u32(&bins[CUBE_LOAD(v, i) % CUBE_LEN(bins)], 1u);\n"
    "}\n"
    "CUBE_KERNEL(positions, CUBE_ARRAY(uint32_t, out)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(out))\n"
    "    CUBE_STORE(out, i, (UNIT_POS << 20) ^ (CUBE_POS_X << 12) ^ (CUBE_POS_Y << 6) ^ CUBE_POS_Z);\n"
    "}\n";

enum { N = 1000003, BINS = 1021 };

typedef struct {
  float *x32, *y32, *math32_in;
  double *x64, *sum_in;
  uint32_t *a, *hv;
  int64_t* b;
} inputs_t;

typedef struct {
  cube_bytes_t *saxpy, *math32, *math64, *u, *s, *sums, *hist, *pos;
} outputs_t;

static cube_kernel_t* make_kernel(const char* entry, uint32_t x, uint32_t y, uint32_t z) {
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.source = k_src;
  d.entry = entry;
  d.cube_dim = (cube_dim_t){x, y, z};
  cube_kernel_t* k = NULL;
  cube_status_t s = cube_kernel_create(&d, &k);
  if (s) {
    fprintf(stderr, "kernel %s: %s\n", entry, cube_status_message(s));
    cube_status_free(s);
  }
  return k;
}

static cube_handle_t upload(cube_client_t* c, const void* p, size_t n) {
  cube_handle_t h = CUBE_HANDLE_NULL;
  cube_status_t s = cube_client_create_from_slice(c, p, n, &h);
  if (s) {
    fprintf(stderr, "upload of %zu bytes: %s\n", n, cube_status_message(s));
    cube_status_free(s);
  }
  return h;
}

/* A buffer of |n| bytes poisoned with 0xCD: every element must be written. */
static cube_handle_t poisoned(cube_client_t* c, size_t n) {
  void* p = malloc(n);
  memset(p, 0xCD, n);
  cube_handle_t h = upload(c, p, n);
  free(p);
  return h;
}

static cube_bytes_t* launch_read(cube_client_t* c, const char* entry, cube_dim_t dim,
                                 cube_count_t count, size_t nargs, cube_arg_t* args,
                                 cube_handle_t result) {
  cube_kernel_t* k = make_kernel(entry, dim.x, dim.y, dim.z);
  cube_bytes_t* out = NULL;
  if (!k) return NULL;
  cube_status_t s = cube_client_launch(c, k, count, nargs, args);
  if (!s) s = cube_client_read_one(c, result, &out);
  if (s) {
    fprintf(stderr, "%s on %s: %s\n", entry, cube_client_properties(c)->name,
            cube_status_message(s));
    cube_status_free(s);
  }
  cube_kernel_release(k);
  return out;
}

static void run_all(cube_client_t* c, const inputs_t* in, outputs_t* o) {
  const cube_dim_t d256 = {256, 1, 1};
  const cube_count_t blocks = cube_count_static((N + 255) / 256, 1, 1);
  cube_handle_t hx = upload(c, in->x32, N * 4), hy = upload(c, in->y32, N * 4);
  cube_arg_t a1[] = {cube_arg_buffer(hx), cube_arg_buffer(hy), cube_arg_f32(1.75f)};
  o->saxpy = launch_read(c, "saxpy", d256, blocks, 3, a1, hy);

  cube_handle_t hm = upload(c, in->math32_in, N * 4), hm_out = poisoned(c, N * 4);
  cube_arg_t a2[] = {cube_arg_buffer(hm), cube_arg_buffer(hm_out)};
  o->math32 = launch_read(c, "math_f32", d256, blocks, 2, a2, hm_out);

  cube_handle_t hd = upload(c, in->x64, N * 8), hd_out = poisoned(c, N * 8);
  cube_arg_t a3[] = {cube_arg_buffer(hd), cube_arg_buffer(hd_out)};
  o->math64 = launch_read(c, "math_f64", d256, blocks, 2, a3, hd_out);

  cube_handle_t ha = upload(c, in->a, N * 4), hb = upload(c, in->b, N * 8);
  cube_handle_t hu = poisoned(c, N * 4), hs = poisoned(c, N * 8);
  cube_arg_t a4[] = {cube_arg_buffer(ha), cube_arg_buffer(hb), cube_arg_buffer(hu),
                     cube_arg_buffer(hs)};
  o->u = launch_read(c, "ints", d256, blocks, 4, a4, hu);
  cube_status_t st = cube_client_read_one(c, hs, &o->s);
  if (st) {
    fprintf(stderr, "read of ints' s: %s\n", cube_status_message(st));
    cube_status_free(st);
  }

  const uint32_t cubes = (N + 255) / 256;
  cube_handle_t hsum = upload(c, in->sum_in, N * 8), hparts = poisoned(c, cubes * 8);
  cube_arg_t a5[] = {cube_arg_buffer(hsum), cube_arg_buffer(hparts)};
  o->sums = launch_read(c, "partial_sums", d256, blocks, 2, a5, hparts);

  uint32_t zeros[BINS];
  memset(zeros, 0, sizeof(zeros));
  cube_handle_t hv = upload(c, in->hv, N * 4), hbins = upload(c, zeros, sizeof(zeros));
  cube_arg_t a6[] = {cube_arg_buffer(hv), cube_arg_buffer(hbins)};
  o->hist = launch_read(c, "histogram", d256, blocks, 2, a6, hbins);

  /* 3-D grid of 2-D cubes, fewer units than elements in the last cubes. */
  const uint32_t pn = 7 * 5 * 3 * 64;
  cube_handle_t hp = poisoned(c, (size_t)pn * 4);
  cube_arg_t a7[] = {cube_arg_buffer(hp)};
  o->pos = launch_read(c, "positions", (cube_dim_t){16, 4, 1}, cube_count_static(7, 5, 3), 1, a7,
                       hp);

  cube_handle_t all[] = {hx, hy, hm, hm_out, hd, hd_out, ha, hb, hu, hs, hsum, hparts, hv, hbins, hp};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) cube_handle_release(all[i]);
}

static void release_all(outputs_t* o) {
  cube_bytes_t* all[] = {o->saxpy, o->math32, o->math64, o->u, o->s, o->sums, o->hist, o->pos};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); ++i) cube_bytes_release(all[i]);
}

/* Counts elements (f32 or f64, |elem| bytes) further apart than |rel|
 * (relative to the larger magnitude, with |abs_floor| as the floor) and
 * prints the worst. NaN counts as apart. */
static uint64_t compare_float(const char* what, const cube_bytes_t* a, const cube_bytes_t* b,
                              size_t elem, double rel, double abs_floor) {
  if (!a || !b || cube_bytes_size(a) != cube_bytes_size(b)) return 1;
  const uint8_t* x = cube_bytes_const_data(a);
  const uint8_t* y = cube_bytes_const_data(b);
  size_t n = cube_bytes_size(a) / elem;
  uint64_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    double u, v;
    if (elem == 4) {
      float f, g;
      memcpy(&f, x + i * 4, 4);
      memcpy(&g, y + i * 4, 4);
      u = f, v = g;
    } else {
      memcpy(&u, x + i * 8, 8);
      memcpy(&v, y + i * 8, 8);
    }
    double e = fabs(u - v) / fmax(fmax(fabs(u), fabs(v)), abs_floor);
    if (!(e <= rel)) ++bad;
    if (e > worst) worst = e;
  }
  printf("  %-12s %zu elements, worst relative difference %.3g, %" PRIu64 " beyond %.1g\n", what,
         n, worst, bad, rel);
  return bad;
}

static uint64_t compare_exact(const char* what, const cube_bytes_t* a, const cube_bytes_t* b) {
  if (!a || !b || cube_bytes_size(a) != cube_bytes_size(b)) return 1;
  const uint8_t* x = cube_bytes_const_data(a);
  const uint8_t* y = cube_bytes_const_data(b);
  uint64_t bad = 0;
  for (size_t i = 0; i < cube_bytes_size(a); ++i) bad += x[i] != y[i];
  printf("  %-12s %zu bytes, %" PRIu64 " differ\n", what, cube_bytes_size(a), bad);
  return bad;
}

static void compare_with_cpu(cube_backend_t backend, const char* name) {
  cube_client_t* other = NULL;
  cube_status_t s = cube_client_load((cube_device_id_t){backend, 0}, &other);
  if (cube_status_code(s) == CUBE_STATUS_UNAVAILABLE || cube_status_code(s) == CUBE_STATUS_NOT_FOUND) {
    fprintf(stderr, "%s\n", cube_status_message(s));
    cube_status_free(s);
    cube_shutdown();
    CUBE_SKIP("no %s device", name);
  }
  REQUIRE_OK(s);
  cube_client_t* cpu = NULL;
  REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &cpu));

  inputs_t in;
  in.x32 = malloc(N * 4);
  in.y32 = malloc(N * 4);
  in.math32_in = malloc(N * 4);
  in.x64 = malloc(N * 8);
  in.sum_in = malloc(N * 8);
  in.a = malloc(N * 4);
  in.hv = malloc(N * 4);
  in.b = malloc(N * 8);
  REQUIRE(in.x32 && in.y32 && in.math32_in && in.x64 && in.sum_in && in.a && in.hv && in.b);
  uint64_t seed = 0x243F6A8885A308D3ull;
  cube_test_fill_random(in.a, N * 4, seed + 1);
  cube_test_fill_random(in.hv, N * 4, seed + 2);
  cube_test_fill_random(in.b, N * 8, seed + 3);
  for (size_t i = 0; i < N; ++i) {
    /* Floats in [-4, 4) from the random integers: no NaN or infinity in. */
    in.x32[i] = (float)((int32_t)in.a[i]) / 536870912.0f;
    in.y32[i] = (float)((int32_t)in.hv[i]) / 536870912.0f;
    in.math32_in[i] = (float)((int32_t)(in.a[i] ^ in.hv[i])) / 536870912.0f;
    in.x64[i] = (double)in.b[i] / 2305843009213693952.0; /* 2^61: [-4, 4) */
    in.sum_in[i] = (double)(in.b[i] >> 11) / 4503599627370496.0;
  }
  outputs_t a, b;
  memset(&a, 0, sizeof(a));
  memset(&b, 0, sizeof(b));
  run_all(cpu, &in, &a);
  run_all(other, &in, &b);
  printf("%s vs cpu (%s):\n", cube_client_properties(other)->name, cube_client_properties(cpu)->name);
  /* FMA contraction: a * x + y rounds once or twice. */
  CHECK_EQ_U64(compare_float("saxpy", a.saxpy, b.saxpy, 4, 2.5e-7, 1e-3), 0);
  /* The targets' libm: a few ulps per function, over eight terms. */
  CHECK_EQ_U64(compare_float("math f32", a.math32, b.math32, 4, 2e-5, 1.0), 0);
  CHECK_EQ_U64(compare_float("math f64", a.math64, b.math64, 8, 1e-13, 1.0), 0);
  CHECK_EQ_U64(compare_exact("ints u32", a.u, b.u), 0);
  CHECK_EQ_U64(compare_exact("ints i64", a.s, b.s), 0);
  /* The same tree in the same order: identical up to contraction. */
  CHECK_EQ_U64(compare_float("cube sums", a.sums, b.sums, 8, 1e-15, 1e-300), 0);
  CHECK_EQ_U64(compare_exact("histogram", a.hist, b.hist), 0);
  CHECK_EQ_U64(compare_exact("positions", a.pos, b.pos), 0);
  /* The histogram counted every element once. */
  if (a.hist) {
    const uint32_t* h = cube_bytes_const_data(a.hist);
    uint64_t total = 0;
    for (int i = 0; i < BINS; ++i) total += h[i];
    CHECK_EQ_U64(total, N);
  }
  release_all(&a);
  release_all(&b);
  free(in.x32);
  free(in.y32);
  free(in.math32_in);
  free(in.x64);
  free(in.sum_in);
  free(in.a);
  free(in.hv);
  free(in.b);
  cube_client_release(cpu);
  cube_client_release(other);
  cube_shutdown();
}

CUBE_TEST(cuda_matches_cpu) { compare_with_cpu(CUBE_BACKEND_CUDA, "cuda"); }

CUBE_TEST(opencl_matches_cpu) { compare_with_cpu(CUBE_BACKEND_OPENCL, "opencl"); }
