/* Kernels written in the cube dialect (source + entry + defines), compiled by
 * the backend at first launch: results on random data and odd sizes, cube
 * memory and sync_cube, atomics, defines, dynamic counts, every position
 * builtin, the three execution modes, compile errors and malformed
 * declarations. The kernel cache through the public API is in
 * cts_dialect_cache.c. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cts.h"

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/* A dialect kernel; |name| NULL = the entry. */
static cube_status_t dk_create(const char* source, const char* entry, const char* name,
                               cube_dim_t dim, const cube_define_t* defines,
                               uint32_t define_count, cube_kernel_t** out) {
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = name;
  d.cube_dim = dim;
  d.source = source;
  d.entry = entry;
  d.defines = defines;
  d.define_count = define_count;
  return cube_kernel_create(&d, out);
}

#define DK(var, source, entry, dx, dy, dz, defines, define_count)                         \
  cube_kernel_t* var = NULL;                                                               \
  do {                                                                                     \
    cube_dim_t dk_d_ = {(dx), (dy), (dz)};                                                 \
    REQUIRE_OK(dk_create((source), (entry), NULL, dk_d_, (defines), (define_count), &var)); \
  } while (0)

/* A float in [lo, hi). */
static float frand(uint64_t* s, float lo, float hi) {
  double u = (double)(cube_test_rand(s) >> 11) / 9007199254740992.0;
  return (float)(lo + (hi - lo) * u);
}

/* A float of magnitude in [0.5, 1.5) with a random sign: dropping or doubling
 * any one element moves a sum by at least 0.5. */
static float frand_signed_unit(uint64_t* s) {
  float v = frand(s, 0.5f, 1.5f);
  return (cube_test_rand(s) & 1) ? -v : v;
}

static cube_kernel_cache_stats_t dk_stats(void) {
  cube_kernel_cache_stats_t st = {0};
  memset(&st, 0, sizeof(st));
  cube_status_t s = cube_kernel_cache_stats(&st);
  if (s) {
    fprintf(stderr, "cube_kernel_cache_stats: %s\n", cube_status_message(s));
    cube_status_free(s);
    cube_test_failures++;
  }
  return st;
}

static uint32_t poison_u32(void) {
  uint32_t v;
  memset(&v, CTS_POISON, sizeof(v));
  return v;
}

//===----------------------------------------------------------------------===//
// 1. saxpy
//===----------------------------------------------------------------------===//

static const char* k_saxpy =
    "/* out = a * x + y, guarded by n (the output may be longer). */\n"
    "CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(const float, y),\n"
    "            CUBE_ARRAY(float, out), float a, uint32_t n) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < n) CUBE_STORE(out, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "}\n";

/* |r| is a * x + y rounded once (FMA) or twice. */
static int saxpy_close(float r, float a, float x, float y) {
  double e = (double)a * x + y;
  double tol = 2.5e-7 * (fabs((double)a * x) + fabs((double)y)) + 1e-30;
  return fabs((double)r - e) <= tol;
}

CUBE_TEST(dialect_saxpy) {
  CTS_CLIENT(c);
  const uint32_t n = 10007, extra = 13, dim = 64;
  const float a = -1.3750001f;
  uint64_t seed = 0xDA1A5A;
  float* x = malloc(n * 4);
  float* y = malloc(n * 4);
  REQUIRE(x && y);
  for (uint32_t i = 0; i < n; ++i) x[i] = frand(&seed, -100.0f, 100.0f), y[i] = frand(&seed, -50.0f, 50.0f);
  cube_handle_t hx, hy;
  REQUIRE_OK(cube_client_create_from_slice(c, x, n * 4, &hx));
  REQUIRE_OK(cube_client_create_from_slice(c, y, n * 4, &hy));
  DK(k, k_saxpy, "saxpy", dim, 1, 1, NULL, 0);
  CHECK(strcmp(cube_kernel_name(k), "saxpy") == 0);
  CHECK_EQ_U64(cube_kernel_arg_count(k), 5);
  static const cube_execution_mode_t modes[3] = {CUBE_EXEC_CHECKED, CUBE_EXEC_VALIDATE,
                                                 CUBE_EXEC_UNCHECKED};
  for (int m = 0; m < 3; ++m) {
    cube_handle_t ho;
    REQUIRE_OK(cts_poisoned(c, (n + extra) * 4, &ho));
    cube_arg_t args[5] = {cube_arg_buffer(hx), cube_arg_buffer(hy), cube_arg_buffer(ho),
                          cube_arg_f32(a), cube_arg_u32(n)};
    REQUIRE_OK(cube_client_launch_mode(c, k, cube_count_static((n + dim - 1) / dim, 1, 1), 5, args,
                                       modes[m]));
    float* got = NULL;
    size_t size = 0;
    CHECK_OK(cts_read_alloc(c, ho, (void**)&got, &size));
    CHECK_EQ_U64(size, (uint64_t)(n + extra) * 4);
    if (got && size == (size_t)(n + extra) * 4) {
      size_t bad = 0;
      for (uint32_t i = 0; i < n; ++i)
        if (!saxpy_close(got[i], a, x[i], y[i]) && bad++ < 5)
          fprintf(stderr, "mode %d: out[%u] = %.9g, expected %.9g\n", m, i, got[i],
                  (double)a * x[i] + y[i]);
      uint32_t p = poison_u32();
      for (uint32_t i = n; i < n + extra; ++i)
        if (memcmp(&got[i], &p, 4) != 0 && bad++ < 5)
          fprintf(stderr, "mode %d: out[%u] past n was written\n", m, i);
      CHECK(bad == 0);
    }
    free(got);
    cube_handle_release(ho);
  }
  CHECK_OK(cube_client_sync(c));
  cube_kernel_release(k);
  cube_handle_release(hx);
  cube_handle_release(hy);
  free(x);
  free(y);
  CTS_END(c);
}

//===----------------------------------------------------------------------===//
// 2. Sum reduction with sync_cube and CUBE_SHARED
//===----------------------------------------------------------------------===//

/* One partial sum per cube; BLOCK (a define) is the cube dimension, any value
 * (a tree from next_pow2(dim)/2 down that skips the missing upper half). */
static const char* k_block_sum =
    "CUBE_KERNEL(block_sum, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, partial)) {\n"
    "  CUBE_SHARED(float, tile, BLOCK);\n"
    "  uint32_t u = UNIT_POS_X;\n"
    "  uint64_t i = ABSOLUTE_POS_X;\n"
    "  tile[u] = CUBE_LOAD(x, i);\n"
    "  sync_cube();\n"
    "  uint32_t p2 = 1;\n"
    "  while (p2 < BLOCK) p2 <<= 1;\n"
    "  for (uint32_t s = p2 / 2; s > 0; s >>= 1) {\n"
    "    if (u < s && u + s < BLOCK) tile[u] += tile[u + s];\n"
    "    sync_cube();\n"
    "  }\n"
    "  if (u == 0) CUBE_STORE(partial, CUBE_POS_X, tile[0]);\n"
    "}\n";

CUBE_TEST(dialect_reduce_sync_cube) {
  CTS_CLIENT(c);
  const uint32_t n = 10007; /* prime: every block size leaves a partial last cube */
  uint64_t seed = 0x5EED5;
  float* x = malloc(n * 4);
  REQUIRE(x);
  double total = 0, total_abs = 0;
  for (uint32_t i = 0; i < n; ++i) {
    x[i] = frand_signed_unit(&seed);
    total += x[i];
    total_abs += fabs(x[i]);
  }
  cube_handle_t hx;
  REQUIRE_OK(cube_client_create_from_slice(c, x, n * 4, &hx));
  static const uint32_t blocks[] = {1, 7, 64, 256};
  for (size_t run = 0; run < 2 * sizeof(blocks) / sizeof(blocks[0]); ++run) {
    const uint32_t block = blocks[run / 2], fibers = run % 2;
    char value[16];
    snprintf(value, sizeof(value), "%u", block);
    /* CUBE_CPU_FIBERS forces the fiber entry where the CPU backend would run
     * the kernel as loops over its units between barriers. */
    cube_define_t defs[] = {{"BLOCK", value}, {"CUBE_CPU_FIBERS", "1"}};
    DK(k, k_block_sum, "block_sum", block, 1, 1, defs, 1 + fibers);
    const uint32_t cubes = (n + block - 1) / block;
    cube_handle_t hp;
    REQUIRE_OK(cts_poisoned(c, (size_t)cubes * 4, &hp));
    cube_arg_t args[2] = {cube_arg_buffer(hx), cube_arg_buffer(hp)};
    CHECK_OK(cube_client_launch(c, k, cube_count_static(cubes, 1, 1), 2, args));
    float* got = NULL;
    size_t size = 0;
    CHECK_OK(cts_read_alloc(c, hp, (void**)&got, &size));
    CHECK_EQ_U64(size, (uint64_t)cubes * 4);
    if (got && size == (size_t)cubes * 4) {
      double sum = 0;
      size_t bad = 0;
      for (uint32_t q = 0; q < cubes; ++q) {
        double ref = 0, ref_abs = 0;
        for (uint32_t i = q * block; i < n && i < (q + 1) * block; ++i) {
          ref += x[i];
          ref_abs += fabs(x[i]);
        }
        /* A float tree over <= 256 values: log2(256) roundings at most. */
        if (!(fabs((double)got[q] - ref) <= 1e-5 * ref_abs + 1e-6) && bad++ < 5)
          fprintf(stderr, "BLOCK=%u%s: partial[%u] = %.9g, expected %.9g\n", block,
                  fibers ? " (fibers)" : "", q, got[q], ref);
        sum += got[q];
      }
      CHECK(bad == 0);
      if (!(fabs(sum - total) <= 1e-6 * total_abs)) {
        fprintf(stderr, "BLOCK=%u: sum %.9g, host (double) %.9g\n", block, sum, total);
        CHECK(!"block sums add up to the host sum");
      }
    }
    free(got);
    cube_handle_release(hp);
    cube_kernel_release(k);
  }
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(hx);
  free(x);
  CTS_END(c);
}

//===----------------------------------------------------------------------===//
// 2b. Kernel shapes around sync_cube
//===----------------------------------------------------------------------===//

/* Unit-private values kept across barriers, a loop with barriers whose bounds
 * every unit shares, locals declared in that loop, several declarators in one
 * declaration, const and 64-bit and double locals, comments: integer
 * arithmetic, so every path must give the exact host result. */
static const char* k_ring =
    "/* Rounds of a ring exchange in cube memory. */\n"
    "CUBE_KERNEL(ring, CUBE_ARRAY(const uint32_t, x), CUBE_ARRAY(uint32_t, out),\n"
    "            uint32_t rounds) {\n"
    "  CUBE_SHARED(uint32_t, buf, 64);\n"
    "  const uint32_t u = UNIT_POS;\n"
    "  uint32_t n = CUBE_DIM, left = (u + n - 1u) % n, right = (u + 1u) % n;\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  uint64_t acc = 0; // a line comment\n"
    "  double dsum = 0.0;\n"
    "  uint32_t v = CUBE_LOAD(x, i);\n"
    "  for (uint32_t r = 0; r < rounds; ++r) {\n"
    "    buf[u] = v;\n"
    "    sync_cube();\n"
    "    uint32_t l = buf[left], rr = buf[right];\n"
    "    sync_cube();\n"
    "    v = l + 2u * v /* wraps */ + 3u * rr + r;\n"
    "    acc += v;\n"
    "    dsum += (double)(v & 0xffffu);\n"
    "  }\n"
    "  CUBE_STORE(out, 2 * i, v ^ (uint32_t)acc);\n"
    "  CUBE_STORE(out, 2 * i + 1, (uint32_t)(acc >> 32) + (uint32_t)dsum);\n"
    "}\n";

/* A tree over a cube of any size (P2: the next power of two), then every unit
 * reads the total and a neighbour's value. */
static const char* k_tree =
    "CUBE_KERNEL(tree, CUBE_ARRAY(const uint32_t, x), CUBE_ARRAY(uint32_t, out)) {\n"
    "  CUBE_SHARED(uint32_t, t, 256);\n"
    "  uint32_t u = UNIT_POS_X;\n"
    "  uint32_t mine = CUBE_LOAD(x, ABSOLUTE_POS) * 3u;\n"
    "  t[u] = mine;\n"
    "  sync_cube();\n"
    "  for (uint32_t s = P2 / 2u; s > 0u; s >>= 1) {\n"
    "    if (u < s && u + s < CUBE_DIM_X) t[u] += t[u + s];\n"
    "    sync_cube();\n"
    "  }\n"
    "  uint32_t total = t[0];\n"
    "  sync_cube();\n"
    "  t[u] = total - mine;\n"
    "  sync_cube();\n"
    "  CUBE_STORE(out, ABSOLUTE_POS, t[(u + 1u) % CUBE_DIM_X] + mine);\n"
    "}\n";

/* Units past |active| return before the barrier (they stop counting). */
static const char* k_partial_units =
    "CUBE_KERNEL(partial_units, CUBE_ARRAY(const uint32_t, x), CUBE_ARRAY(uint32_t, out),\n"
    "            uint32_t active) {\n"
    "  CUBE_SHARED(uint32_t, t, 128);\n"
    "  uint32_t u = UNIT_POS_X;\n"
    "  if (u >= active) return;\n"
    "  t[u] = CUBE_LOAD(x, ABSOLUTE_POS);\n"
    "  sync_cube();\n"
    "  uint32_t sum = 0;\n"
    "  for (uint32_t k = 0; k < active; ++k) sum += t[k];\n"
    "  CUBE_STORE(out, ABSOLUTE_POS, sum + u);\n"
    "}\n";

/* The barrier in a helper (docs/dialect.md's example, in integers). */
static const char* k_helpers =
    "CUBE_FN uint32_t load_twice(CUBE_UNIT_PARAMS, CUBE_ARRAY(const uint32_t, x), uint64_t i) {\n"
    "  return 2u * CUBE_LOAD(x, i);\n"
    "}\n"
    "CUBE_FN void rotate(CUBE_UNIT_PARAMS, CUBE_LOCAL uint32_t* sh, uint32_t mine,\n"
    "                    CUBE_GLOBAL uint32_t* dst) {\n"
    "  sh[UNIT_POS] = mine;\n"
    "  sync_cube();\n"
    "  dst[ABSOLUTE_POS] = sh[(UNIT_POS + 1u) % CUBE_DIM];\n"
    "}\n"
    "CUBE_KERNEL(helpers, CUBE_ARRAY(const uint32_t, x), CUBE_ARRAY(uint32_t, y)) {\n"
    "  CUBE_SHARED(uint32_t, sh, 256);\n"
    "  rotate(CUBE_UNIT_ARGS, sh, load_twice(CUBE_UNIT_ARGS, CUBE_ARRAY_ARG(x), ABSOLUTE_POS), y);\n"
    "}\n";

/* Inclusive scans (Hillis-Steele, double-buffered): with a for loop whose
 * bounds every unit shares, and with a while loop over a unit's own variable.
 * Two kernels in one source. */
static const char* k_scans =
    "CUBE_KERNEL(scan_for, CUBE_ARRAY(const uint32_t, x), CUBE_ARRAY(uint32_t, out)) {\n"
    "  CUBE_SHARED(uint32_t, a, 256);\n"
    "  CUBE_SHARED(uint32_t, b, 256);\n"
    "  uint32_t u = UNIT_POS_X;\n"
    "  a[u] = CUBE_LOAD(x, ABSOLUTE_POS);\n"
    "  sync_cube();\n"
    "  for (uint32_t off = 1; off < CUBE_DIM_X; off <<= 1) {\n"
    "    b[u] = u >= off ? a[u] + a[u - off] : a[u];\n"
    "    sync_cube();\n"
    "    a[u] = b[u];\n"
    "    sync_cube();\n"
    "  }\n"
    "  CUBE_STORE(out, ABSOLUTE_POS, a[u]);\n"
    "}\n"
    "\n"
    "CUBE_KERNEL(scan_while, CUBE_ARRAY(const uint32_t, x), CUBE_ARRAY(uint32_t, out)) {\n"
    "  CUBE_SHARED(uint32_t, a, 256);\n"
    "  CUBE_SHARED(uint32_t, b, 256);\n"
    "  uint32_t u = UNIT_POS_X;\n"
    "  uint32_t off = 1;\n"
    "  a[u] = CUBE_LOAD(x, ABSOLUTE_POS);\n"
    "  sync_cube();\n"
    "  while (off < CUBE_DIM_X) {\n"
    "    b[u] = u >= off ? a[u] + a[u - off] : a[u];\n"
    "    sync_cube();\n"
    "    a[u] = b[u];\n"
    "    sync_cube();\n"
    "    off <<= 1;\n"
    "  }\n"
    "  CUBE_STORE(out, ABSOLUTE_POS, a[u]);\n"
    "}\n";

typedef struct shape_grid {
  uint32_t dim[3], count[3];
} shape_grid_t;

static uint32_t grid_units(const shape_grid_t* g) { return g->dim[0] * g->dim[1] * g->dim[2]; }
static uint32_t grid_cubes(const shape_grid_t* g) {
  return g->count[0] * g->count[1] * g->count[2];
}

/* ABSOLUTE_POS of unit |u| (UNIT_POS) of cube |q| (CUBE_POS). */
static uint64_t grid_abs(const shape_grid_t* g, uint32_t q, uint32_t u) {
  uint32_t cx = q % g->count[0], cy = (q / g->count[0]) % g->count[1],
           cz = q / (g->count[0] * g->count[1]);
  uint32_t ux = u % g->dim[0], uy = (u / g->dim[0]) % g->dim[1], uz = u / (g->dim[0] * g->dim[1]);
  uint64_t ax = (uint64_t)cx * g->dim[0] + ux, ay = (uint64_t)cy * g->dim[1] + uy,
           az = (uint64_t)cz * g->dim[2] + uz;
  uint64_t gx = (uint64_t)g->count[0] * g->dim[0], gy = (uint64_t)g->count[1] * g->dim[1];
  return ax + gx * (ay + gy * az);
}

static void ref_ring(const shape_grid_t* g, const uint32_t* x, uint32_t* out, uint32_t rounds) {
  const uint32_t n = grid_units(g);
  uint32_t v[64], nv[64];
  uint64_t acc[64];
  double dsum[64];
  for (uint32_t q = 0; q < grid_cubes(g); ++q) {
    for (uint32_t u = 0; u < n; ++u) v[u] = x[grid_abs(g, q, u)], acc[u] = 0, dsum[u] = 0;
    for (uint32_t r = 0; r < rounds; ++r) {
      for (uint32_t u = 0; u < n; ++u)
        nv[u] = v[(u + n - 1) % n] + 2u * v[u] + 3u * v[(u + 1) % n] + r;
      for (uint32_t u = 0; u < n; ++u) {
        v[u] = nv[u];
        acc[u] += v[u];
        dsum[u] += (double)(v[u] & 0xffffu);
      }
    }
    for (uint32_t u = 0; u < n; ++u) {
      uint64_t i = grid_abs(g, q, u);
      out[2 * i] = v[u] ^ (uint32_t)acc[u];
      out[2 * i + 1] = (uint32_t)(acc[u] >> 32) + (uint32_t)dsum[u];
    }
  }
}

static void ref_tree(const shape_grid_t* g, const uint32_t* x, uint32_t* out, uint32_t unused) {
  (void)unused;
  const uint32_t n = grid_units(g);
  for (uint32_t q = 0; q < grid_cubes(g); ++q) {
    uint32_t total = 0;
    for (uint32_t u = 0; u < n; ++u) total += 3u * x[grid_abs(g, q, u)];
    for (uint32_t u = 0; u < n; ++u)
      out[grid_abs(g, q, u)] =
          (total - 3u * x[grid_abs(g, q, (u + 1) % n)]) + 3u * x[grid_abs(g, q, u)];
  }
}

static void ref_partial_units(const shape_grid_t* g, const uint32_t* x, uint32_t* out,
                              uint32_t active) {
  const uint32_t n = grid_units(g);
  for (uint32_t q = 0; q < grid_cubes(g); ++q) {
    uint32_t sum = 0;
    for (uint32_t u = 0; u < active && u < n; ++u) sum += x[grid_abs(g, q, u)];
    for (uint32_t u = 0; u < active && u < n; ++u) out[grid_abs(g, q, u)] = sum + u;
  }
}

static void ref_helpers(const shape_grid_t* g, const uint32_t* x, uint32_t* out, uint32_t unused) {
  (void)unused;
  const uint32_t n = grid_units(g);
  for (uint32_t q = 0; q < grid_cubes(g); ++q)
    for (uint32_t u = 0; u < n; ++u)
      out[grid_abs(g, q, u)] = 2u * x[grid_abs(g, q, (u + 1) % n)];
}

static void ref_scan(const shape_grid_t* g, const uint32_t* x, uint32_t* out, uint32_t unused) {
  (void)unused;
  const uint32_t n = grid_units(g);
  for (uint32_t q = 0; q < grid_cubes(g); ++q) {
    uint32_t run = 0;
    for (uint32_t u = 0; u < n; ++u) {
      run += x[grid_abs(g, q, u)];
      out[grid_abs(g, q, u)] = run;
    }
  }
}

CUBE_TEST(dialect_sync_cube_shapes) {
  CTS_CLIENT(c);
  static const struct {
    const char* source;
    const char* entry;
    const char* p2; /* value of the define P2, or NULL */
    shape_grid_t grid;
    uint32_t out_per_unit;
    int has_scalar;
    uint32_t scalar;
    void (*ref)(const shape_grid_t*, const uint32_t*, uint32_t*, uint32_t);
  } shapes[] = {
      {NULL, "ring", NULL, {{4, 3, 2}, {3, 2, 1}}, 2, 1, 5, ref_ring},
      {NULL, "ring", NULL, {{7, 1, 1}, {5, 1, 1}}, 2, 1, 0, ref_ring},
      {NULL, "tree", "128", {{100, 1, 1}, {4, 1, 1}}, 1, 0, 0, ref_tree},
      {NULL, "tree", "1", {{1, 1, 1}, {9, 1, 1}}, 1, 0, 0, ref_tree},
      {NULL, "partial_units", NULL, {{96, 1, 1}, {3, 1, 1}}, 1, 1, 77, ref_partial_units},
      {NULL, "helpers", NULL, {{5, 4, 3}, {2, 2, 1}}, 1, 0, 0, ref_helpers},
      {NULL, "scan_for", NULL, {{200, 1, 1}, {3, 1, 1}}, 1, 0, 0, ref_scan},
      {NULL, "scan_while", NULL, {{200, 1, 1}, {3, 1, 1}}, 1, 0, 0, ref_scan},
  };
  const char* sources[] = {k_ring, k_ring, k_tree, k_tree, k_partial_units, k_helpers, k_scans,
                           k_scans};
  uint64_t seed = 0x5A4E5;
  for (size_t sh = 0; sh < sizeof(shapes) / sizeof(shapes[0]); ++sh) {
    /* Units leaving before a barrier is the CPU's promise only; on OpenCL
     * (and GPUs) it is undefined (docs/dialect.md). */
    if (strcmp(shapes[sh].entry, "partial_units") == 0 && cts_backend()->backend != CUBE_BACKEND_CPU)
      continue;
    const shape_grid_t* g = &shapes[sh].grid;
    const uint32_t total = grid_units(g) * grid_cubes(g);
    const size_t out_len = (size_t)total * shapes[sh].out_per_unit;
    uint32_t* x = malloc((size_t)total * 4);
    uint32_t* expect = malloc(out_len * 4);
    REQUIRE(x && expect);
    for (uint32_t i = 0; i < total; ++i) x[i] = (uint32_t)cube_test_rand(&seed);
    memset(expect, CTS_POISON, out_len * 4);
    shapes[sh].ref(g, x, expect, shapes[sh].scalar);
    cube_handle_t hx;
    REQUIRE_OK(cube_client_create_from_slice(c, x, (size_t)total * 4, &hx));
    for (int fibers = 0; fibers < 2; ++fibers) {
      cube_define_t defs[2];
      uint32_t nd = 0;
      if (shapes[sh].p2) defs[nd++] = (cube_define_t){"P2", shapes[sh].p2};
      if (fibers) defs[nd++] = (cube_define_t){"CUBE_CPU_FIBERS", "1"};
      DK(k, sources[sh], shapes[sh].entry, g->dim[0], g->dim[1], g->dim[2], defs, nd);
      cube_handle_t ho;
      REQUIRE_OK(cts_poisoned(c, out_len * 4, &ho));
      cube_arg_t args[3] = {cube_arg_buffer(hx), cube_arg_buffer(ho),
                            cube_arg_u32(shapes[sh].scalar)};
      CHECK_OK(cube_client_launch(c, k, cube_count_static(g->count[0], g->count[1], g->count[2]),
                                  shapes[sh].has_scalar ? 3 : 2, args));
      uint32_t* got = NULL;
      size_t size = 0;
      CHECK_OK(cts_read_alloc(c, ho, (void**)&got, &size));
      CHECK_EQ_U64(size, out_len * 4);
      if (got && size == out_len * 4) {
        size_t bad = 0;
        for (size_t i = 0; i < out_len; ++i)
          if (got[i] != expect[i] && bad++ < 5)
            fprintf(stderr, "%s (shape %zu%s): out[%zu] = %u, expected %u\n", shapes[sh].entry,
                    sh, fibers ? ", fibers" : "", i, got[i], expect[i]);
        CHECK(bad == 0);
      }
      free(got);
      cube_handle_release(ho);
      cube_kernel_release(k);
    }
    cube_handle_release(hx);
    free(x);
    free(expect);
  }
  CHECK_OK(cube_client_sync(c));
  CTS_END(c);
}

//===----------------------------------------------------------------------===//
// 3. Tiled matmul
//===----------------------------------------------------------------------===//

static const char* k_matmul =
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

CUBE_TEST(dialect_matmul_tiled) {
  CTS_CLIENT(c);
  const uint32_t M = 67, K = 45, N = 91;
  uint64_t seed = 0x3A73;
  float* a = malloc((size_t)M * K * 4);
  float* b = malloc((size_t)K * N * 4);
  REQUIRE(a && b);
  for (uint32_t i = 0; i < M * K; ++i) a[i] = frand(&seed, -1.0f, 1.0f);
  for (uint32_t i = 0; i < K * N; ++i) b[i] = frand(&seed, -1.0f, 1.0f);
  cube_handle_t ha, hb;
  REQUIRE_OK(cube_client_create_from_slice(c, a, (size_t)M * K * 4, &ha));
  REQUIRE_OK(cube_client_create_from_slice(c, b, (size_t)K * N * 4, &hb));
  static const uint32_t tiles[] = {16, 5, 16};
  for (size_t t = 0; t < 3; ++t) {
    const uint32_t tile = tiles[t];
    char value[16];
    snprintf(value, sizeof(value), "%u", tile);
    cube_define_t defs[] = {{"TILE", value}, {"CUBE_CPU_FIBERS", "1"}};
    DK(k, k_matmul, "matmul", tile, tile, 1, defs, t == 2 ? 2 : 1);
    cube_handle_t hc;
    REQUIRE_OK(cts_poisoned(c, (size_t)M * N * 4, &hc));
    cube_arg_t args[6] = {cube_arg_buffer(ha), cube_arg_buffer(hb), cube_arg_buffer(hc),
                          cube_arg_u32(M),     cube_arg_u32(N),     cube_arg_u32(K)};
    CHECK_OK(cube_client_launch(c, k, cube_count_static((N + tile - 1) / tile, (M + tile - 1) / tile, 1),
                                6, args));
    float* r = NULL;
    size_t size = 0;
    CHECK_OK(cts_read_alloc(c, hc, (void**)&r, &size));
    CHECK_EQ_U64(size, (uint64_t)M * N * 4);
    if (r && size == (size_t)M * N * 4) {
      double max_rel = 0;
      size_t bad = 0;
      for (uint32_t i = 0; i < M; ++i)
        for (uint32_t j = 0; j < N; ++j) {
          double s = 0, mag = 0;
          for (uint32_t q = 0; q < K; ++q) {
            double p = (double)a[i * K + q] * b[q * N + j];
            s += p;
            mag += fabs(p);
          }
          double rel = fabs((double)r[i * N + j] - s) / (mag > 0 ? mag : 1);
          if (!(rel < 1e-5)) {
            if (bad++ < 5)
              fprintf(stderr, "TILE=%u: c[%u][%u] = %.9g, expected %.9g\n", tile, i, j,
                      r[i * N + j], s);
            rel = 1; /* NaN too */
          }
          if (rel > max_rel) max_rel = rel;
        }
      if (bad) fprintf(stderr, "TILE=%u: max relative error %.3g\n", tile, max_rel);
      CHECK(bad == 0);
    }
    free(r);
    cube_handle_release(hc);
    cube_kernel_release(k);
  }
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(ha);
  cube_handle_release(hb);
  free(a);
  free(b);
  CTS_END(c);
}

//===----------------------------------------------------------------------===//
// 4. Atomic histogram
//===----------------------------------------------------------------------===//

/* Straight to the global bins (a plain unit loop: no sync_cube in the
 * source), and per cube in cube memory first (grid-stride loop, barriers), then
 * added to the global bins. */
static const char* k_hist_global =
    "CUBE_KERNEL(hist_global, CUBE_ARRAY(const uint8_t, data), CUBE_ARRAY(uint32_t, bins)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(data)) cube_atomic_add_u32(&bins[data[i]], 1u);\n"
    "}\n";

static const char* k_hist_shared =
    "CUBE_KERNEL(hist_shared, CUBE_ARRAY(const uint8_t, data), CUBE_ARRAY(uint32_t, bins)) {\n"
    "  CUBE_SHARED(uint32_t, local, 256);\n"
    "  for (uint32_t b = UNIT_POS; b < 256; b += CUBE_DIM) local[b] = 0;\n"
    "  sync_cube();\n"
    "  uint64_t stride = (uint64_t)CUBE_DIM * CUBE_COUNT;\n"
    "  for (uint64_t i = ABSOLUTE_POS; i < CUBE_LEN(data); i += stride)\n"
    "    cube_atomic_add_u32(&local[data[i]], 1u);\n"
    "  sync_cube();\n"
    "  for (uint32_t b = UNIT_POS; b < 256; b += CUBE_DIM)\n"
    "    if (local[b]) cube_atomic_add_u32(&bins[b], local[b]);\n"
    "}\n";

CUBE_TEST(dialect_atomic_histogram) {
  CTS_CLIENT(c);
  const uint32_t n = 1000003;
  uint8_t* data = malloc(n);
  REQUIRE(data);
  cube_test_fill_random(data, n, 0x4157);
  /* A third of the bytes in one bin: heavy contention there. */
  for (uint32_t i = 0; i < n; i += 3) data[i] = 0x2A;
  uint32_t init[256], expect[256];
  uint64_t seed = 0xB1B5;
  for (int b = 0; b < 256; ++b) init[b] = (uint32_t)(cube_test_rand(&seed) % 1000);
  memcpy(expect, init, sizeof(expect));
  for (uint32_t i = 0; i < n; ++i) expect[data[i]]++;
  cube_handle_t hd;
  REQUIRE_OK(cube_client_create_from_slice(c, data, n, &hd));
  struct {
    const char* source;
    const char* entry;
    uint32_t dim[3];
    uint32_t count[3];
    int fibers;
  } runs[] = {
      {k_hist_global, "hist_global", {128, 1, 1}, {(n + 127) / 128, 1, 1}, 0},
      {k_hist_global, "hist_global", {8, 4, 2}, {(n + 63) / 64, 1, 1}, 0},
      {k_hist_shared, "hist_shared", {32, 3, 1}, {5, 3, 1}, 0},
      {k_hist_shared, "hist_shared", {1, 1, 1}, {7, 1, 1}, 0},
      {k_hist_shared, "hist_shared", {32, 3, 1}, {5, 3, 1}, 1},
  };
  for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); ++r) {
    cube_define_t fdefs[] = {{"CUBE_CPU_FIBERS", "1"}};
    DK(k, runs[r].source, runs[r].entry, runs[r].dim[0], runs[r].dim[1], runs[r].dim[2], fdefs,
       runs[r].fibers ? 1 : 0);
    cube_handle_t hb;
    REQUIRE_OK(cube_client_create_from_slice(c, init, sizeof(init), &hb));
    cube_arg_t args[2] = {cube_arg_buffer(hd), cube_arg_buffer(hb)};
    CHECK_OK(cube_client_launch(c, k, cube_count_static(runs[r].count[0], runs[r].count[1],
                                                        runs[r].count[2]),
                                2, args));
    uint32_t* got = NULL;
    size_t size = 0;
    CHECK_OK(cts_read_alloc(c, hb, (void**)&got, &size));
    CHECK_EQ_U64(size, sizeof(expect));
    if (got && size == sizeof(expect)) {
      size_t bad = 0;
      for (int b = 0; b < 256; ++b)
        if (got[b] != expect[b] && bad++ < 5)
          fprintf(stderr, "%s run %zu: bins[%d] = %u, expected %u\n", runs[r].entry, r, b, got[b],
                  expect[b]);
      CHECK(bad == 0);
    }
    free(got);
    cube_handle_release(hb);
    cube_kernel_release(k);
  }
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(hd);
  free(data);
  CTS_END(c);
}

//===----------------------------------------------------------------------===//
// 5. One source, several define sets
//===----------------------------------------------------------------------===//

static const char* k_binop =
    "CUBE_KERNEL(binop, CUBE_ARRAY(const float, a), CUBE_ARRAY(const float, b),\n"
    "            CUBE_ARRAY(float, out)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i >= CUBE_LEN(out)) return;\n"
    "#if OP == 1\n"
    "  float r = (a[i] + b[i]) * SCALE;\n"
    "#elif OP == 2\n"
    "  float r = (a[i] * b[i]) * SCALE;\n"
    "#else\n"
    "#error OP must be 1 or 2\n"
    "#endif\n"
    "#ifdef NEGATE\n"
    "  r = -r;\n"
    "#endif\n"
    "  out[i] = r;\n"
    "}\n";

static float binop_host(int op, int negate, float a, float b) {
  volatile float t = op == 1 ? a + b : a * b;
  volatile float r = t * 3.0f;
  return negate ? -r : r;
}

/* Runs |k| on (ha, hb) and compares with binop_host(op, negate). */
static void binop_check(cube_client_t* c, cube_kernel_t* k, cube_handle_t ha, cube_handle_t hb,
                        const float* a, const float* b, uint32_t n, int op, int negate,
                        float* out_copy) {
  cube_handle_t ho;
  cube_status_t s = cts_poisoned(c, (size_t)n * 4, &ho);
  if (s) {
    CHECK_OK(s);
    return;
  }
  cube_arg_t args[3] = {cube_arg_buffer(ha), cube_arg_buffer(hb), cube_arg_buffer(ho)};
  CHECK_OK(cube_client_launch(c, k, cube_count_static((n + 31) / 32, 1, 1), 3, args));
  float* got = NULL;
  size_t size = 0;
  CHECK_OK(cts_read_alloc(c, ho, (void**)&got, &size));
  CHECK_EQ_U64(size, (uint64_t)n * 4);
  if (got && size == (size_t)n * 4) {
    size_t bad = 0;
    for (uint32_t i = 0; i < n; ++i) {
      float e = binop_host(op, negate, a[i], b[i]);
      if (memcmp(&got[i], &e, 4) != 0 && bad++ < 5)
        fprintf(stderr, "OP=%d%s: out[%u] = %.9g, expected %.9g\n", op, negate ? " NEGATE" : "",
                i, got[i], e);
    }
    CHECK(bad == 0);
    if (out_copy) memcpy(out_copy, got, (size_t)n * 4);
  }
  free(got);
  cube_handle_release(ho);
}

CUBE_TEST(dialect_defines_specialise) {
  CTS_CLIENT(c);
  const uint32_t n = 1001;
  uint64_t seed = 0xDEF5;
  float* a = malloc(n * 4);
  float* b = malloc(n * 4);
  float* r_add = calloc(n, 4);
  float* r_mul = calloc(n, 4);
  REQUIRE(a && b && r_add && r_mul);
  for (uint32_t i = 0; i < n; ++i) a[i] = frand(&seed, -8.0f, 8.0f), b[i] = frand(&seed, 2.0f, 4.0f);
  cube_handle_t ha, hb;
  REQUIRE_OK(cube_client_create_from_slice(c, a, n * 4, &ha));
  REQUIRE_OK(cube_client_create_from_slice(c, b, n * 4, &hb));

  cube_define_t add_defs[] = {{"OP", "1"}, {"SCALE", "3.0f"}};
  cube_define_t mul_defs[] = {{"OP", "2"}, {"SCALE", "3.0f"}};
  cube_define_t add_reordered[] = {{"SCALE", "3.0f"}, {"OP", "1"}};
  cube_define_t add_negate[] = {{"NEGATE", NULL}, {"SCALE", "3.0f"}, {"OP", "1"}};
  DK(k_add, k_binop, "binop", 32, 1, 1, add_defs, 2);
  DK(k_mul, k_binop, "binop", 32, 1, 1, mul_defs, 2);

  cube_kernel_cache_stats_t s0 = dk_stats();
  binop_check(c, k_add, ha, hb, a, b, n, 1, 0, r_add);
  cube_kernel_cache_stats_t s1 = dk_stats();
  /* A first use: compiled or loaded from disk, not found in memory. */
  CHECK_EQ_U64((s1.misses - s0.misses) + (s1.disk_hits - s0.disk_hits), 1);
  CHECK_EQ_U64(s1.memory_hits - s0.memory_hits, 0);
  binop_check(c, k_mul, ha, hb, a, b, n, 2, 0, r_mul);
  cube_kernel_cache_stats_t s2 = dk_stats();
  CHECK_EQ_U64((s2.misses - s1.misses) + (s2.disk_hits - s1.disk_hits), 1);
  CHECK_EQ_U64(s2.memory_hits - s1.memory_hits, 0);
  /* The two specialisations differ (add vs multiply of b in [2, 4)). */
  size_t same = 0;
  for (uint32_t i = 0; i < n; ++i) same += memcmp(&r_add[i], &r_mul[i], 4) == 0;
  CHECK(same < n / 10);

  /* The same set in another order: the same kernel, found in memory. */
  DK(k_add2, k_binop, "binop", 32, 1, 1, add_reordered, 2);
  binop_check(c, k_add2, ha, hb, a, b, n, 1, 0, NULL);
  cube_kernel_cache_stats_t s3 = dk_stats();
  CHECK_EQ_U64(s3.memory_hits - s2.memory_hits, 1);
  CHECK_EQ_U64(s3.misses - s2.misses, 0);
  CHECK_EQ_U64(s3.disk_hits - s2.disk_hits, 0);

  /* One more define (with no value: defined, empty) is another kernel. */
  DK(k_neg, k_binop, "binop", 32, 1, 1, add_negate, 3);
  binop_check(c, k_neg, ha, hb, a, b, n, 1, 1, NULL);
  cube_kernel_cache_stats_t s4 = dk_stats();
  CHECK_EQ_U64((s4.misses - s3.misses) + (s4.disk_hits - s3.disk_hits), 1);
  CHECK_EQ_U64(s4.memory_hits - s3.memory_hits, 0);

  /* Interleaved launches of the kernels already built keep their own code. */
  binop_check(c, k_mul, ha, hb, a, b, n, 2, 0, NULL);
  binop_check(c, k_add, ha, hb, a, b, n, 1, 0, NULL);
  binop_check(c, k_neg, ha, hb, a, b, n, 1, 1, NULL);

  /* Without OP the source does not compile (#error): the define is used. */
  cube_define_t no_op[] = {{"SCALE", "3.0f"}};
  DK(k_bad, k_binop, "binop", 32, 1, 1, no_op, 1);
  CHECK_STATUS(cube_client_precompile(c, 1, &k_bad, CUBE_EXEC_CHECKED),
               CUBE_STATUS_COMPILATION_FAILED, "OP must be 1 or 2");

  CHECK_OK(cube_client_sync(c));
  cube_kernel_release(k_add);
  cube_kernel_release(k_mul);
  cube_kernel_release(k_add2);
  cube_kernel_release(k_neg);
  cube_kernel_release(k_bad);
  cube_handle_release(ha);
  cube_handle_release(hb);
  free(a);
  free(b);
  free(r_add);
  free(r_mul);
  CTS_END(c);
}

//===----------------------------------------------------------------------===//
// 6. Dynamic cube count
//===----------------------------------------------------------------------===//

/* out[2i] = i + salt, out[2i+1] = the cube count as x*10000 + y*100 + z. */
static const char* k_mark =
    "CUBE_KERNEL(mark, CUBE_ARRAY(uint32_t, out), uint32_t salt) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  CUBE_STORE(out, 2 * i, (uint32_t)i + salt);\n"
    "  CUBE_STORE(out, 2 * i + 1, CUBE_COUNT_X * 10000u + CUBE_COUNT_Y * 100u + CUBE_COUNT_Z);\n"
    "}\n"
    "\n"
    "/* Writes a cube count for a later launch. */\n"
    "CUBE_KERNEL(set_count, CUBE_ARRAY(uint32_t, count), uint32_t x, uint32_t y, uint32_t z) {\n"
    "  if (ABSOLUTE_POS == 0) { count[0] = x; count[1] = y; count[2] = z; }\n"
    "}\n";

static void mark_check(cube_client_t* c, cube_handle_t out, uint32_t len, uint32_t units,
                       const uint32_t count[3], uint32_t salt, const char* what) {
  uint32_t* got = NULL;
  size_t size = 0;
  CHECK_OK(cts_read_alloc(c, out, (void**)&got, &size));
  CHECK_EQ_U64(size, (uint64_t)len * 4);
  if (!got || size != (size_t)len * 4) {
    free(got);
    return;
  }
  size_t bad = 0;
  uint32_t cc = count[0] * 10000u + count[1] * 100u + count[2];
  for (uint32_t i = 0; i < len / 2; ++i) {
    uint32_t e0 = i < units ? i + salt : poison_u32();
    uint32_t e1 = i < units ? cc : poison_u32();
    if ((got[2 * i] != e0 || got[2 * i + 1] != e1) && bad++ < 5)
      fprintf(stderr, "%s: unit %u wrote (%u, %u), expected (%u, %u)\n", what, i, got[2 * i],
              got[2 * i + 1], e0, e1);
  }
  CHECK(bad == 0);
  free(got);
}

CUBE_TEST(dialect_dynamic_count) {
  CTS_CLIENT(c);
  const uint32_t len = 2 * 400; /* room for 400 units */
  uint64_t seed = 0xD1CE;
  DK(k, k_mark, "mark", 3, 2, 1, NULL, 0);
  DK(ks, k_mark, "set_count", 1, 1, 1, NULL, 0);

  /* From the host: {4, 3, 2} cubes of 6 units. */
  {
    uint32_t count[3] = {4, 3, 2};
    uint32_t salt = (uint32_t)cube_test_rand(&seed) & 0xffffff;
    cube_handle_t hc, ho;
    REQUIRE_OK(cube_client_create_from_slice(c, count, sizeof(count), &hc));
    REQUIRE_OK(cts_poisoned(c, (size_t)len * 4, &ho));
    cube_arg_t args[2] = {cube_arg_buffer(ho), cube_arg_u32(salt)};
    CHECK_OK(cube_client_launch(c, k, cube_count_dynamic(hc), 2, args));
    mark_check(c, ho, len, 4 * 3 * 2 * 6, count, salt, "host count (4,3,2)");
    cube_handle_release(hc);
    cube_handle_release(ho);
  }
  /* Written by a kernel queued just before (no host sync in between), at
   * random: the count is read when the launch runs. */
  for (int round = 0; round < 3; ++round) {
    uint32_t count[3] = {1 + (uint32_t)(cube_test_rand(&seed) % 7),
                         1 + (uint32_t)(cube_test_rand(&seed) % 4),
                         1 + (uint32_t)(cube_test_rand(&seed) % 2)};
    uint32_t salt = (uint32_t)cube_test_rand(&seed) & 0xffffff;
    cube_handle_t hc, ho;
    REQUIRE_OK(cts_poisoned(c, 3 * 4, &hc)); /* garbage until set_count runs */
    REQUIRE_OK(cts_poisoned(c, (size_t)len * 4, &ho));
    cube_arg_t sargs[4] = {cube_arg_buffer(hc), cube_arg_u32(count[0]), cube_arg_u32(count[1]),
                           cube_arg_u32(count[2])};
    CHECK_OK(cube_client_launch(c, ks, cube_count_static(1, 1, 1), 4, sargs));
    cube_arg_t args[2] = {cube_arg_buffer(ho), cube_arg_u32(salt)};
    CHECK_OK(cube_client_launch(c, k, cube_count_dynamic(hc), 2, args));
    char what[64];
    snprintf(what, sizeof(what), "kernel-written count (%u,%u,%u)", count[0], count[1], count[2]);
    mark_check(c, ho, len, count[0] * count[1] * count[2] * 6, count, salt, what);
    cube_handle_release(hc);
    cube_handle_release(ho);
  }
  /* A zero component: nothing runs. */
  {
    uint32_t count[3] = {5, 0, 2};
    cube_handle_t hc, ho;
    REQUIRE_OK(cube_client_create_from_slice(c, count, sizeof(count), &hc));
    REQUIRE_OK(cts_poisoned(c, (size_t)len * 4, &ho));
    cube_arg_t args[2] = {cube_arg_buffer(ho), cube_arg_u32(1)};
    CHECK_OK(cube_client_launch(c, k, cube_count_dynamic(hc), 2, args));
    mark_check(c, ho, len, 0, count, 1, "count (5,0,2)");
    cube_handle_release(hc);
    cube_handle_release(ho);
  }
  CHECK_OK(cube_client_sync(c));
  cube_kernel_release(k);
  cube_kernel_release(ks);
  CTS_END(c);
}

//===----------------------------------------------------------------------===//
// 7. Every position builtin in 1-D, 2-D and 3-D
//===----------------------------------------------------------------------===//

#define POS_VALUES 22

/* %s: nothing, or a sync_cube() (the units then no longer run as one plain
 * loop: fibers, or loops split at the barrier). */
static const char* k_positions_fmt =
    "CUBE_KERNEL(positions, CUBE_ARRAY(uint32_t, out)) {\n"
    "  uint64_t b = (uint64_t)ABSOLUTE_POS * 22u;\n"
    "  CUBE_STORE(out, b + 0, UNIT_POS_X);\n"
    "  CUBE_STORE(out, b + 1, UNIT_POS_Y);\n"
    "  CUBE_STORE(out, b + 2, UNIT_POS_Z);\n"
    "  CUBE_STORE(out, b + 3, UNIT_POS);\n"
    "  CUBE_STORE(out, b + 4, CUBE_POS_X);\n"
    "  CUBE_STORE(out, b + 5, CUBE_POS_Y);\n"
    "  CUBE_STORE(out, b + 6, CUBE_POS_Z);\n"
    "  CUBE_STORE(out, b + 7, CUBE_POS);\n"
    "  CUBE_STORE(out, b + 8, CUBE_DIM_X);\n"
    "  CUBE_STORE(out, b + 9, CUBE_DIM_Y);\n"
    "  CUBE_STORE(out, b + 10, CUBE_DIM_Z);\n"
    "%s"
    "  CUBE_STORE(out, b + 11, CUBE_DIM);\n"
    "  CUBE_STORE(out, b + 12, CUBE_COUNT_X);\n"
    "  CUBE_STORE(out, b + 13, CUBE_COUNT_Y);\n"
    "  CUBE_STORE(out, b + 14, CUBE_COUNT_Z);\n"
    "  CUBE_STORE(out, b + 15, CUBE_COUNT);\n"
    "  CUBE_STORE(out, b + 16, ABSOLUTE_POS_X);\n"
    "  CUBE_STORE(out, b + 17, ABSOLUTE_POS_Y);\n"
    "  CUBE_STORE(out, b + 18, ABSOLUTE_POS_Z);\n"
    "  CUBE_STORE(out, b + 19, ABSOLUTE_POS);\n"
    "  CUBE_STORE(out, b + 20, PLANE_DIM);\n"
    "  CUBE_STORE(out, b + 21, UNIT_POS_PLANE);\n"
    "}\n";

static const char* const pos_names[POS_VALUES] = {
    "UNIT_POS_X",   "UNIT_POS_Y",     "UNIT_POS_Z",     "UNIT_POS",       "CUBE_POS_X",
    "CUBE_POS_Y",   "CUBE_POS_Z",     "CUBE_POS",       "CUBE_DIM_X",     "CUBE_DIM_Y",
    "CUBE_DIM_Z",   "CUBE_DIM",       "CUBE_COUNT_X",   "CUBE_COUNT_Y",   "CUBE_COUNT_Z",
    "CUBE_COUNT",   "ABSOLUTE_POS_X", "ABSOLUTE_POS_Y", "ABSOLUTE_POS_Z", "ABSOLUTE_POS",
    "PLANE_DIM",    "UNIT_POS_PLANE"};

/* Each kernel object is launched with every count of |counts| in turn (a
 * backend may compile a form of it per shape of launch: CUDA's 1-D form). */
static void check_positions_counts(const uint32_t dim[3], const uint32_t (*counts)[3],
                                   size_t ncounts) {
  CTS_CLIENT(c);
  const cube_device_properties_t* props = cube_client_properties(c);
  /* 0: a plain unit loop; 1: with a barrier (the backend's choice of entry);
   * 2: with a barrier, fibers forced. */
  static const char* const variants[3] = {"loop", "barrier", "fibers"};
  for (int variant = 0; variant < 3; ++variant) {
    char src[4096];
    snprintf(src, sizeof(src), k_positions_fmt, variant ? "  sync_cube();\n" : "");
    cube_define_t fdefs[] = {{"CUBE_CPU_FIBERS", "1"}};
    DK(k, src, "positions", dim[0], dim[1], dim[2], fdefs, variant == 2 ? 1 : 0);
    for (size_t ci = 0; ci < ncounts; ++ci) {
      const uint32_t* count = counts[ci];
      const uint64_t units = (uint64_t)dim[0] * dim[1] * dim[2] * count[0] * count[1] * count[2];
      const size_t len = (size_t)(units + 1) * POS_VALUES; /* one unit's worth of guard */
      cube_handle_t ho;
      REQUIRE_OK(cts_poisoned(c, len * 4, &ho));
      cube_arg_t args[1] = {cube_arg_buffer(ho)};
      CHECK_OK(cube_client_launch(c, k, cube_count_static(count[0], count[1], count[2]), 1, args));
      uint32_t* got = NULL;
      size_t size = 0;
      CHECK_OK(cts_read_alloc(c, ho, (void**)&got, &size));
      CHECK_EQ_U64(size, (uint64_t)len * 4);
      if (got && size == len * 4) {
        size_t bad = 0;
        uint32_t plane = got[20];
        CHECK(plane >= props->hardware.plane_size_min && plane <= props->hardware.plane_size_max);
        if (plane == 0) plane = 1;
        const uint64_t gx = (uint64_t)count[0] * dim[0], gy = (uint64_t)count[1] * dim[1];
        for (uint32_t cz = 0; cz < count[2]; ++cz)
          for (uint32_t cy = 0; cy < count[1]; ++cy)
            for (uint32_t cx = 0; cx < count[0]; ++cx)
              for (uint32_t uz = 0; uz < dim[2]; ++uz)
                for (uint32_t uy = 0; uy < dim[1]; ++uy)
                  for (uint32_t ux = 0; ux < dim[0]; ++ux) {
                    uint64_t ax = (uint64_t)cx * dim[0] + ux, ay = (uint64_t)cy * dim[1] + uy,
                             az = (uint64_t)cz * dim[2] + uz;
                    uint64_t abs = ax + gx * (ay + gy * az);
                    uint32_t unit = ux + dim[0] * (uy + dim[1] * uz);
                    uint32_t e[POS_VALUES] = {ux,           uy,
                                              uz,           unit,
                                              cx,           cy,
                                              cz,           cx + count[0] * (cy + count[1] * cz),
                                              dim[0],       dim[1],
                                              dim[2],       dim[0] * dim[1] * dim[2],
                                              count[0],     count[1],
                                              count[2],     count[0] * count[1] * count[2],
                                              (uint32_t)ax, (uint32_t)ay,
                                              (uint32_t)az, (uint32_t)abs,
                                              plane,        unit % plane};
                    const uint32_t* g = got + abs * POS_VALUES;
                    for (int v = 0; v < POS_VALUES; ++v)
                      if (g[v] != e[v] && bad++ < 8)
                        fprintf(stderr,
                                "%s, count (%u,%u,%u): cube (%u,%u,%u) unit (%u,%u,%u): %s = %u, "
                                "expected %u\n",
                                variants[variant], count[0], count[1], count[2], cx, cy, cz, ux, uy,
                                uz, pos_names[v], g[v], e[v]);
                  }
        for (size_t i = (size_t)units * POS_VALUES; i < len; ++i)
          if (got[i] != poison_u32() && bad++ < 8)
            fprintf(stderr, "%s: out[%zu] past the last unit was written\n", variants[variant], i);
        CHECK(bad == 0);
      }
      free(got);
      cube_handle_release(ho);
    }
    cube_kernel_release(k);
  }
  CHECK_OK(cube_client_sync(c));
  CTS_END(c);
}

static void check_positions(const uint32_t dim[3], const uint32_t count[3]) {
  const uint32_t counts[1][3] = {{count[0], count[1], count[2]}};
  check_positions_counts(dim, counts, 1);
}

CUBE_TEST(dialect_positions_1d) {
  const uint32_t dim[3] = {7, 1, 1}, count[3] = {5, 1, 1};
  check_positions(dim, count);
}

CUBE_TEST(dialect_positions_2d) {
  const uint32_t dim[3] = {3, 5, 1}, count[3] = {4, 3, 1};
  check_positions(dim, count);
}

CUBE_TEST(dialect_positions_3d) {
  const uint32_t dim[3] = {3, 5, 2}, count[3] = {4, 3, 2};
  check_positions(dim, count);
}

/* One kernel of a 1-D cube dim launched 1-D, then with counts in y and z, then
 * 1-D again: each launch sees its own positions whichever form runs it. */
CUBE_TEST(dialect_positions_count_shapes) {
  const uint32_t dim[3] = {7, 1, 1};
  const uint32_t counts[4][3] = {{5, 1, 1}, {2, 3, 2}, {3, 1, 4}, {6, 1, 1}};
  check_positions_counts(dim, counts, 4);
}

//===----------------------------------------------------------------------===//
// 8. Out-of-bounds access per execution mode
//===----------------------------------------------------------------------===//

/* y[i] = x[i] + 1 for i < limit, through the bounds-checked accessors. */
static const char* k_oob =
    "CUBE_KERNEL(oob_probe, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), uint32_t limit) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < limit) CUBE_STORE(y, i, CUBE_LOAD(x, i) + 1.0f);\n"
    "}\n";

/* y[i + shift] = x[i + shift] + 1: with every ABSOLUTE_POS inside both arrays
 * (an interior cube) the shifted accesses may still leave them. */
static const char* k_oob_shift =
    "CUBE_KERNEL(oob_shift, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), uint32_t shift) {\n"
    "  uint64_t i = (uint64_t)ABSOLUTE_POS + shift;\n"
    "  CUBE_STORE(y, i, CUBE_LOAD(x, i) + 1.0f);\n"
    "}\n";

/* A buffer of front + len + back floats: the view holds random values (or
 * |view_fill| when not NaN), the guards are 1000 + k. */
typedef struct guarded {
  cube_handle_t whole, view;
  uint32_t front, len, back;
  float* host; /* the whole buffer as created */
} guarded_t;

static cube_status_t guarded_make(cube_client_t* c, uint32_t front, uint32_t len, uint32_t back,
                                  float view_fill, uint64_t* seed, guarded_t* g) {
  memset(g, 0, sizeof(*g));
  uint32_t total = front + len + back;
  g->host = malloc((size_t)total * 4);
  if (!g->host) return cube_client_empty(c, 0, &g->whole);
  g->front = front;
  g->len = len;
  g->back = back;
  for (uint32_t k = 0; k < total; ++k) {
    bool in_view = k >= front && k < front + len;
    g->host[k] = !in_view ? 1000.0f + (float)k : isnan(view_fill) ? frand(seed, -9.0f, 9.0f) : view_fill;
  }
  cube_status_t s = cube_client_create_from_slice(c, g->host, (size_t)total * 4, &g->whole);
  if (s) return s;
  return cube_handle_offset_view(g->whole, (uint64_t)front * 4, (uint64_t)back * 4, &g->view);
}

static void guarded_free(guarded_t* g) {
  cube_handle_release(g->view);
  cube_handle_release(g->whole);
  free(g->host);
  memset(g, 0, sizeof(*g));
}

/* Reads the whole buffer of |g|: the guards must be as created; *out (may be
 * NULL) gets the view's floats (caller frees). */
static void guarded_read(cube_client_t* c, guarded_t* g, const char* what, float** out) {
  if (out) *out = NULL;
  float* got = NULL;
  size_t size = 0;
  uint32_t total = g->front + g->len + g->back;
  CHECK_OK(cts_read_alloc(c, g->whole, (void**)&got, &size));
  CHECK_EQ_U64(size, (uint64_t)total * 4);
  if (!got || size != (size_t)total * 4) {
    free(got);
    return;
  }
  size_t bad = 0;
  for (uint32_t k = 0; k < total; ++k) {
    if (k >= g->front && k < g->front + g->len) continue;
    if (memcmp(&got[k], &g->host[k], 4) != 0 && bad++ < 5)
      fprintf(stderr, "%s: guard element %u (view %u..%u) is %.9g, was %.9g\n", what, k, g->front,
              g->front + g->len, got[k], g->host[k]);
  }
  CHECK(bad == 0);
  if (out) {
    *out = malloc((size_t)g->len * 4 + 4);
    if (*out) memcpy(*out, got + g->front, (size_t)g->len * 4);
  }
  free(got);
}

/* The index in "... at index N" of a message, or UINT64_MAX. */
static uint64_t message_index(const char* msg) {
  const char* at = msg ? strstr(msg, "at index ") : NULL;
  if (!at) return UINT64_MAX;
  return strtoull(at + strlen("at index "), NULL, 10);
}

CUBE_TEST(dialect_oob_checked) {
  CTS_CLIENT(c);
  uint64_t seed = 0x00B1;
  DK(k, k_oob, "oob_probe", 32, 1, 1, NULL, 0);
  /* x: 37 visible of 53; y: 41 visible (all -777) of 51; 128 units. */
  guarded_t x, y;
  REQUIRE_OK(guarded_make(c, 5, 37, 11, NAN, &seed, &x));
  REQUIRE_OK(guarded_make(c, 3, 41, 7, -777.0f, &seed, &y));
  cube_arg_t args[3] = {cube_arg_buffer(x.view), cube_arg_buffer(y.view), cube_arg_u32(UINT32_MAX)};
  CHECK_OK(cube_client_launch(c, k, cube_count_static(4, 1, 1), 3, args));
  CHECK_OK(cube_client_sync(c)); /* no error in Checked mode */
  float* yv = NULL;
  guarded_read(c, &y, "checked: y", &yv);
  guarded_read(c, &x, "checked: x", NULL);
  if (yv) {
    size_t bad = 0;
    for (uint32_t i = 0; i < y.len; ++i) {
      /* Past x's 37 elements the read gives 0, not the guard values. */
      float e = i < x.len ? x.host[x.front + i] + 1.0f : 1.0f;
      if (memcmp(&yv[i], &e, 4) != 0 && bad++ < 5)
        fprintf(stderr, "checked: y[%u] = %.9g, expected %.9g\n", i, yv[i], e);
    }
    CHECK(bad == 0);
  }
  free(yv);

  /* Interior cubes (every ABSOLUTE_POS inside both arrays) with accesses past
   * the end: 2 cubes of 32 units over 80 elements, shifted by 60. */
  {
    DK(ks, k_oob_shift, "oob_shift", 32, 1, 1, NULL, 0);
    guarded_t sx, sy;
    REQUIRE_OK(guarded_make(c, 7, 80, 13, NAN, &seed, &sx));
    REQUIRE_OK(guarded_make(c, 9, 80, 11, -777.0f, &seed, &sy));
    cube_arg_t sargs[3] = {cube_arg_buffer(sx.view), cube_arg_buffer(sy.view), cube_arg_u32(60)};
    CHECK_OK(cube_client_launch(c, ks, cube_count_static(2, 1, 1), 3, sargs));
    CHECK_OK(cube_client_sync(c));
    float* syv = NULL;
    guarded_read(c, &sy, "checked shifted: y", &syv);
    guarded_read(c, &sx, "checked shifted: x", NULL);
    if (syv) {
      size_t bad = 0;
      for (uint32_t i = 0; i < 80; ++i) {
        float e = i < 60 ? -777.0f : sx.host[sx.front + i] + 1.0f;
        if (memcmp(&syv[i], &e, 4) != 0 && bad++ < 5)
          fprintf(stderr, "checked shifted: y[%u] = %.9g, expected %.9g\n", i, syv[i], e);
      }
      CHECK(bad == 0);
    }
    free(syv);
    guarded_free(&sx);
    guarded_free(&sy);
    cube_kernel_release(ks);
  }

  /* Packed tensors: the neighbour of y is a real tensor of the same buffer. */
  {
    const uint64_t lx = 19, ly = 23, lg = 29;
    cube_layout_desc_t d[3];
    REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 1, &lx, 4, &d[0]));
    REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 1, &ly, 4, &d[1]));
    REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 1, &lg, 4, &d[2]));
    float hx[19], hy[23], hg[29];
    for (int i = 0; i < 19; ++i) hx[i] = frand(&seed, -5.0f, 5.0f);
    for (int i = 0; i < 23; ++i) hy[i] = -55.0f;
    for (int i = 0; i < 29; ++i) hg[i] = frand(&seed, 100.0f, 200.0f);
    const void* data[3] = {hx, hy, hg};
    const size_t sizes[3] = {sizeof(hx), sizeof(hy), sizeof(hg)};
    cube_tensor_t t[3];
    REQUIRE_OK(cube_client_create_tensors_from_slices(c, 3, d, data, sizes, t));
    cube_arg_t targs[3] = {cube_arg_buffer(t[0].handle), cube_arg_buffer(t[1].handle),
                           cube_arg_u32(UINT32_MAX)};
    CHECK_OK(cube_client_launch(c, k, cube_count_static(3, 1, 1), 3, targs)); /* 96 units */
    float ey[23];
    for (int i = 0; i < 23; ++i) ey[i] = i < 19 ? hx[i] + 1.0f : 1.0f;
    CHECK(cts_read_equals(c, t[1].handle, ey, sizeof(ey)));
    CHECK(cts_read_equals(c, t[2].handle, hg, sizeof(hg)));
    CHECK(cts_read_equals(c, t[0].handle, hx, sizeof(hx)));
    CHECK_OK(cube_client_sync(c));
    cube_tensor_release_array(t, 3);
  }
  guarded_free(&x);
  guarded_free(&y);
  cube_kernel_release(k);
  CTS_END(c);
}

CUBE_TEST(dialect_oob_validate) {
  CTS_CLIENT(c);
  uint64_t seed = 0x7A11D;
  DK(k, k_oob, "oob_probe", 32, 1, 1, NULL, 0);

  /* Reads past x only (limit = len(y)): reported by the next sync. */
  {
    guarded_t x, y;
    REQUIRE_OK(guarded_make(c, 5, 37, 11, NAN, &seed, &x));
    REQUIRE_OK(guarded_make(c, 3, 53, 7, -777.0f, &seed, &y));
    cube_arg_t args[3] = {cube_arg_buffer(x.view), cube_arg_buffer(y.view), cube_arg_u32(53)};
    CHECK_OK(cube_client_launch_mode(c, k, cube_count_static(4, 1, 1), 3, args, CUBE_EXEC_VALIDATE));
    cube_status_t s = cube_client_sync(c);
    CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_LAUNCH_FAILED);
    const char* msg = cube_status_message(s);
    CHECK(cts_contains(msg, "oob_probe", "'x'", "read", NULL));
    uint64_t idx = message_index(msg);
    CHECK(idx >= 37 && idx < 53);
    if (!cts_contains(msg, "oob_probe", "'x'", "read", NULL) || !(idx >= 37 && idx < 53))
      fprintf(stderr, "validate (read): %s\n", msg);
    cube_status_free(s);
    guarded_read(c, &x, "validate read: x", NULL);
    float* yv = NULL;
    guarded_read(c, &y, "validate read: y", &yv);
    if (yv) {
      size_t bad = 0;
      for (uint32_t i = 0; i < 37; ++i) {
        float e = x.host[x.front + i] + 1.0f;
        if (memcmp(&yv[i], &e, 4) != 0 && bad++ < 5)
          fprintf(stderr, "validate: y[%u] = %.9g, expected %.9g\n", i, yv[i], e);
      }
      CHECK(bad == 0);
    }
    free(yv);
    guarded_free(&x);
    guarded_free(&y);
  }
  /* Writes past y only (limit = len(x)): reported by the next read. */
  {
    guarded_t x, y;
    REQUIRE_OK(guarded_make(c, 2, 61, 9, NAN, &seed, &x));
    REQUIRE_OK(guarded_make(c, 6, 29, 40, -777.0f, &seed, &y));
    cube_arg_t args[3] = {cube_arg_buffer(x.view), cube_arg_buffer(y.view), cube_arg_u32(61)};
    CHECK_OK(cube_client_launch_mode(c, k, cube_count_static(2, 1, 1), 3, args, CUBE_EXEC_VALIDATE));
    cube_bytes_t* b = NULL;
    cube_status_t s = cube_client_read_one(c, y.view, &b);
    CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_LAUNCH_FAILED);
    const char* msg = cube_status_message(s);
    CHECK(cts_contains(msg, "oob_probe", "'y'", "write", NULL));
    uint64_t idx = message_index(msg);
    CHECK(idx >= 29 && idx < 61);
    if (!cts_contains(msg, "oob_probe", "'y'", "write", NULL) || !(idx >= 29 && idx < 61))
      fprintf(stderr, "validate (write): %s\n", msg);
    cube_status_free(s);
    if (b) cube_bytes_release(b);
    /* The writes were dropped: the 40 guard floats after y are intact. */
    guarded_read(c, &y, "validate write: y", NULL);
    guarded_free(&x);
    guarded_free(&y);
  }
  /* An interior cube reading and writing past the end (index >= 80). */
  {
    DK(ks, k_oob_shift, "oob_shift", 32, 1, 1, NULL, 0);
    guarded_t sx, sy;
    REQUIRE_OK(guarded_make(c, 3, 80, 5, NAN, &seed, &sx));
    REQUIRE_OK(guarded_make(c, 3, 80, 40, -777.0f, &seed, &sy));
    cube_arg_t sargs[3] = {cube_arg_buffer(sx.view), cube_arg_buffer(sy.view), cube_arg_u32(60)};
    CHECK_OK(cube_client_launch_mode(c, ks, cube_count_static(2, 1, 1), 3, sargs,
                                     CUBE_EXEC_VALIDATE));
    cube_status_t s = cube_client_sync(c);
    CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_LAUNCH_FAILED);
    const char* msg = cube_status_message(s);
    uint64_t idx = message_index(msg);
    if (!cts_contains(msg, "oob_shift", NULL) || !(idx >= 80 && idx < 124)) {
      fprintf(stderr, "validate (shifted): %s\n", msg);
      CHECK(!"names the kernel and an index past the end");
    }
    cube_status_free(s);
    guarded_read(c, &sy, "validate shifted: y", NULL);
    guarded_free(&sx);
    guarded_free(&sy);
    cube_kernel_release(ks);
  }
  /* Reported by flush too; then a launch in bounds is clean. */
  {
    guarded_t x, y;
    REQUIRE_OK(guarded_make(c, 1, 10, 1, NAN, &seed, &x));
    REQUIRE_OK(guarded_make(c, 1, 10, 1, 0.0f, &seed, &y));
    cube_arg_t args[3] = {cube_arg_buffer(x.view), cube_arg_buffer(y.view), cube_arg_u32(UINT32_MAX)};
    CHECK_OK(cube_client_launch_mode(c, k, cube_count_static(1, 1, 1), 3, args, CUBE_EXEC_VALIDATE));
    CHECK_STATUS(cube_client_flush(c), CUBE_STATUS_LAUNCH_FAILED, "oob_probe", "index");
    CHECK_OK(cube_client_sync(c)); /* taken by the flush */
    args[2] = cube_arg_u32(10);
    CHECK_OK(cube_client_launch_mode(c, k, cube_count_static(1, 1, 1), 3, args, CUBE_EXEC_VALIDATE));
    CHECK_OK(cube_client_sync(c));
    float e[10];
    for (int i = 0; i < 10; ++i) e[i] = x.host[1 + i] + 1.0f;
    CHECK(cts_read_equals(c, y.view, e, sizeof(e)));
    guarded_read(c, &y, "validate in bounds: y", NULL);
    guarded_free(&x);
    guarded_free(&y);
  }
  cube_kernel_release(k);
  CTS_END(c);
}

/* Records the mode the unit was compiled for (1 checked, 2 validate, 3
 * unchecked) and doubles x into y, in bounds only. */
static const char* k_mode_probe =
    "CUBE_KERNEL(mode_probe, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y),\n"
    "            CUBE_ARRAY(uint32_t, mode)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(y) && i < CUBE_LEN(x)) CUBE_STORE(y, i, CUBE_LOAD(x, i) * 2.0f);\n"
    "  if (i == 0) {\n"
    "#if defined(CUBE_MODE_UNCHECKED)\n"
    "    mode[0] = 3;\n"
    "#elif defined(CUBE_MODE_VALIDATE)\n"
    "    mode[0] = 2;\n"
    "#elif defined(CUBE_MODE_CHECKED)\n"
    "    mode[0] = 1;\n"
    "#endif\n"
    "  }\n"
    "}\n";

typedef enum { VIA_LAUNCH, VIA_UNCHECKED, VIA_VALIDATE } via_t;

/* Runs mode_probe through |via| and returns the mode it ran in (0 on error);
 * checks y and the guards around it. */
static uint32_t mode_probe_run(cube_client_t* c, cube_kernel_t* k, via_t via, uint64_t* seed) {
  guarded_t x, y;
  cube_status_t s = guarded_make(c, 4, 45, 4, NAN, seed, &x);
  if (!s) s = guarded_make(c, 4, 45, 4, -1.0f, seed, &y);
  if (s) {
    CHECK_OK(s);
    return 0;
  }
  cube_handle_t hm;
  s = cts_poisoned(c, 4, &hm);
  if (s) {
    CHECK_OK(s);
    return 0;
  }
  cube_arg_t args[3] = {cube_arg_buffer(x.view), cube_arg_buffer(y.view), cube_arg_buffer(hm)};
  cube_count_t count = cube_count_static(3, 1, 1); /* 48 units, guarded in the kernel */
  if (via == VIA_LAUNCH) CHECK_OK(cube_client_launch(c, k, count, 3, args));
  if (via == VIA_UNCHECKED) CHECK_OK(cube_client_launch_unchecked(c, k, count, 3, args));
  if (via == VIA_VALIDATE)
    CHECK_OK(cube_client_launch_mode(c, k, count, 3, args, CUBE_EXEC_VALIDATE));
  CHECK_OK(cube_client_sync(c));
  float* yv = NULL;
  guarded_read(c, &y, "mode_probe: y", &yv);
  if (yv) {
    size_t bad = 0;
    for (uint32_t i = 0; i < 45; ++i) {
      float e = x.host[4 + i] * 2.0f;
      if (memcmp(&yv[i], &e, 4) != 0 && bad++ < 5)
        fprintf(stderr, "mode_probe: y[%u] = %.9g, expected %.9g\n", i, yv[i], e);
    }
    CHECK(bad == 0);
  }
  free(yv);
  uint32_t* m = NULL;
  size_t size = 0;
  CHECK_OK(cts_read_alloc(c, hm, (void**)&m, &size));
  uint32_t mode = m && size == 4 ? m[0] : 0;
  free(m);
  cube_handle_release(hm);
  guarded_free(&x);
  guarded_free(&y);
  return mode;
}

CUBE_TEST(dialect_unchecked_in_bounds) {
  unsetenv("CUBE_CHECK_MODE");
  uint64_t seed = 0xC4EC;
  {
    CTS_CLIENT(c);
    DK(k, k_mode_probe, "mode_probe", 16, 1, 1, NULL, 0);
    /* Check mode auto: launch_unchecked runs Unchecked. */
    CHECK_EQ_U64(mode_probe_run(c, k, VIA_UNCHECKED, &seed), 3);
    CHECK_EQ_U64(mode_probe_run(c, k, VIA_LAUNCH, &seed), 1);
    CHECK_EQ_U64(mode_probe_run(c, k, VIA_VALIDATE, &seed), 2);
    CHECK_EQ_U64(mode_probe_run(c, k, VIA_UNCHECKED, &seed), 3);
    cube_kernel_release(k);
    CTS_END(c);
  }
  /* A server whose check mode is enforce / validate runs launch_unchecked
   * Checked / Validate. */
  static const struct {
    cube_check_mode_t mode;
    uint32_t expect;
  } servers[] = {{CUBE_CHECK_ENFORCE, 1}, {CUBE_CHECK_VALIDATE, 2}};
  for (int i = 0; i < 2; ++i) {
    cube_server_options_t o;
    cube_server_options_initialize(&o);
    o.check_mode = servers[i].mode;
    cube_client_t* c = NULL;
    REQUIRE_OK(cube_client_init(cts_device(0), &o, &c));
    cube_kernel_t* k = NULL;
    cube_dim_t dim = {16, 1, 1};
    REQUIRE_OK(dk_create(k_mode_probe, "mode_probe", NULL, dim, NULL, 0, &k));
    CHECK_EQ_U64(mode_probe_run(c, k, VIA_UNCHECKED, &seed), servers[i].expect);
    CHECK_EQ_U64(mode_probe_run(c, k, VIA_LAUNCH, &seed), 1);
    cube_kernel_release(k);
    CTS_END(c);
  }
}

//===----------------------------------------------------------------------===//
// 9. Compile errors and malformed declarations
//===----------------------------------------------------------------------===//

static const char* k_broken =
    "/* line 1 */\n"
    "CUBE_KERNEL(broken_k, CUBE_ARRAY(float, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(y)) y[i] = undeclared_value_42 + ;\n"
    "}\n";

/* Compiles unless BAD is non-zero: the error is on line 7 of the source, after
 * the defines the runtime put in front of it. */
static const char* k_maybe_broken =
    "CUBE_KERNEL(maybe_k, CUBE_ARRAY(uint32_t, y), uint32_t v) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(y)) y[i] = v + (uint32_t)i;\n"
    "}\n"
    "\n"
    "#if BAD\n"
    "static int also_broken(void) { return missing_identifier_7; }\n"
    "#endif\n";

/* A saxpy round trip on |c| (the client still works). */
static void saxpy_round_trip(cube_client_t* c) {
  const uint32_t n = 333;
  uint64_t seed = 0x5A1;
  float x[333], y[333];
  for (uint32_t i = 0; i < n; ++i) x[i] = frand(&seed, -4.0f, 4.0f), y[i] = frand(&seed, -4.0f, 4.0f);
  cube_handle_t hx, hy, ho;
  REQUIRE_OK(cube_client_create_from_slice(c, x, sizeof(x), &hx));
  REQUIRE_OK(cube_client_create_from_slice(c, y, sizeof(y), &hy));
  REQUIRE_OK(cts_poisoned(c, sizeof(x), &ho));
  DK(k, k_saxpy, "saxpy", 32, 1, 1, NULL, 0);
  cube_arg_t args[5] = {cube_arg_buffer(hx), cube_arg_buffer(hy), cube_arg_buffer(ho),
                        cube_arg_f32(0.5f), cube_arg_u32(n)};
  CHECK_OK(cube_client_launch(c, k, cube_count_static((n + 31) / 32, 1, 1), 5, args));
  float* got = NULL;
  size_t size = 0;
  CHECK_OK(cts_read_alloc(c, ho, (void**)&got, &size));
  CHECK_EQ_U64(size, sizeof(x));
  if (got && size == sizeof(x)) {
    size_t bad = 0;
    for (uint32_t i = 0; i < n; ++i) bad += !saxpy_close(got[i], 0.5f, x[i], y[i]);
    CHECK(bad == 0);
  }
  free(got);
  CHECK_OK(cube_client_sync(c));
  cube_kernel_release(k);
  cube_handle_release(hx);
  cube_handle_release(hy);
  cube_handle_release(ho);
}

CUBE_TEST(dialect_compile_error) {
  CTS_CLIENT(c);
  cube_kernel_cache_stats_t s0 = dk_stats();
  /* The declaration is fine: creation succeeds, the error comes at launch. */
  DK(k, k_broken, "broken_k", 8, 1, 1, NULL, 0);
  cube_handle_t hy;
  REQUIRE_OK(cts_poisoned(c, 64 * 4, &hy));
  cube_arg_t args[1] = {cube_arg_buffer(hy)};
  cube_status_t s = cube_client_launch(c, k, cube_count_static(8, 1, 1), 1, args);
  if (cube_status_code(s) == CUBE_STATUS_OK) s = cube_client_sync(c); /* deferred */
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_COMPILATION_FAILED);
  const char* msg = cube_status_message(s);
  /* The compiler's own message, at the user's line 4 (cc and clang write
   * "broken_k.cube:4:", NVRTC "broken_k.cube(4)"). */
  if (!cts_contains(msg, "broken_k", "error", NULL) ||
      (!strstr(msg, "broken_k.cube:4:") && !strstr(msg, "broken_k.cube(4)"))) {
    fprintf(stderr, "compile error message: %s\n", msg);
    CHECK(!"message names the kernel and the user's line 4");
  }
  cube_status_free(s);
  CHECK_OK(cube_client_sync(c)); /* reported once */
  cube_kernel_cache_stats_t s1 = dk_stats();
  CHECK(s1.compile_failures > s0.compile_failures);
  /* The buffer was not touched. */
  uint8_t poison[64 * 4];
  memset(poison, CTS_POISON, sizeof(poison));
  CHECK(cts_read_equals(c, hy, poison, sizeof(poison)));

  /* Precompile reports it at once, also in another mode. */
  CHECK_STATUS(cube_client_precompile(c, 1, &k, CUBE_EXEC_CHECKED),
               CUBE_STATUS_COMPILATION_FAILED, "broken_k.cube:4:");
  CHECK_STATUS(cube_client_precompile(c, 1, &k, CUBE_EXEC_VALIDATE),
               CUBE_STATUS_COMPILATION_FAILED, "broken_k.cube:4:");

  /* An error that only a define set brings in keeps the user's numbering. */
  cube_define_t good[] = {{"BAD", "0"}}, bad[] = {{"BAD", "1"}};
  DK(kg, k_maybe_broken, "maybe_k", 16, 1, 1, good, 1);
  DK(kb, k_maybe_broken, "maybe_k", 16, 1, 1, bad, 1);
  CHECK_OK(cube_client_precompile(c, 1, &kg, CUBE_EXEC_CHECKED));
  CHECK_STATUS(cube_client_precompile(c, 1, &kb, CUBE_EXEC_CHECKED),
               CUBE_STATUS_COMPILATION_FAILED, "maybe_k.cube:7:", "missing_identifier_7");
  /* An error in a kernel with barriers (which the backend may restructure)
   * still names the user's line. */
  {
    static const char* k_sync_broken =
        "CUBE_KERNEL(sync_broken, CUBE_ARRAY(uint32_t, y)) {\n"
        "  CUBE_SHARED(uint32_t, t, 64);\n"
        "  uint32_t u = UNIT_POS_X;\n"
        "  t[u] = u;\n"
        "  sync_cube();\n"
        "  y[u] = t[63 - u] + not_declared_6;\n"
        "}\n";
    DK(kx, k_sync_broken, "sync_broken", 64, 1, 1, NULL, 0);
    CHECK_STATUS(cube_client_precompile(c, 1, &kx, CUBE_EXEC_CHECKED),
                 CUBE_STATUS_COMPILATION_FAILED, "sync_broken.cube:6:", "not_declared_6");
    cube_kernel_release(kx);
  }
  /* A batch stops at the bad kernel and names it. */
  cube_kernel_t* batch[2] = {kg, kb};
  CHECK_STATUS(cube_client_precompile(c, 2, batch, CUBE_EXEC_CHECKED),
               CUBE_STATUS_COMPILATION_FAILED, "kernels[1]", "maybe_k.cube:7:");

  /* The client still works: the good one and a fresh saxpy. */
  cube_handle_t ho;
  REQUIRE_OK(cts_poisoned(c, 50 * 4, &ho));
  cube_arg_t gargs[2] = {cube_arg_buffer(ho), cube_arg_u32(1000)};
  CHECK_OK(cube_client_launch(c, kg, cube_count_static(4, 1, 1), 2, gargs));
  uint32_t e[50];
  for (uint32_t i = 0; i < 50; ++i) e[i] = 1000 + i;
  CHECK(cts_read_equals(c, ho, e, sizeof(e)));
  saxpy_round_trip(c);

  /* A failed launch of the broken kernel after good work: only it fails. */
  CHECK_OK(cube_client_launch(c, kg, cube_count_static(4, 1, 1), 2, gargs));
  s = cube_client_launch(c, k, cube_count_static(8, 1, 1), 1, args);
  if (cube_status_code(s) == CUBE_STATUS_OK) s = cube_client_sync(c);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_COMPILATION_FAILED);
  cube_status_free(s);
  CHECK(cts_read_equals(c, ho, e, sizeof(e)));

  CHECK_OK(cube_client_sync(c));
  cube_handle_release(hy);
  cube_handle_release(ho);
  cube_kernel_release(k);
  cube_kernel_release(kg);
  cube_kernel_release(kb);
  CTS_END(c);
}

CUBE_TEST(dialect_malformed_declaration) {
  static const struct {
    const char* source;
    const char* entry;
    const char* words[3]; /* the message holds each */
  } cases[] = {
      /* CUBE_ARRAY without the comma, on line 3. */
      {"// comment\n\nCUBE_KERNEL(k1, CUBE_ARRAY(float x), uint32_t n) {\n}\n",
       "k1",
       {"k1", "line 3", "CUBE_ARRAY"}},
      /* A pointer parameter on line 4 (the declaration spans lines 2-4). */
      {"\nCUBE_KERNEL(k2,\n  CUBE_ARRAY(float, x),\n  float* p) {\n}\n",
       "k2",
       {"k2", "line 4", "parameter 2"}},
      /* An unknown scalar type on line 2. */
      {"#define X 1\nCUBE_KERNEL(k3, CUBE_ARRAY(float, x), half h) {\n}\n",
       "k3",
       {"k3", "line 2", "half"}},
      /* Never closed (line 5). */
      {"\n\n\n\nCUBE_KERNEL(k4, CUBE_ARRAY(float, x) {\n  x[0] = 1;\n}\n",
       "k4",
       {"k4", "line 5", "unbalanced"}},
      /* No parameters (line 1). */
      {"CUBE_KERNEL(k5) {\n}\n", "k5", {"k5", "line 1", "no parameters"}},
      /* A stray comma (line 2). */
      {"\nCUBE_KERNEL(k6, CUBE_ARRAY(float, x), , uint32_t n) {\n}\n",
       "k6",
       {"k6", "line 2", "empty parameter"}},
      /* The same name twice (line 3). */
      {"\n\nCUBE_KERNEL(k7, CUBE_ARRAY(float, x), uint32_t x) {\n}\n",
       "k7",
       {"k7", "line 3", "'x'"}},
      /* The entry is not in the source: the message lists what is. */
      {"CUBE_KERNEL(other_one, CUBE_ARRAY(float, x)) {\n}\n",
       "k8",
       {"k8", "other_one", NULL}},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    cube_kernel_t* k = NULL;
    cube_dim_t dim = {4, 1, 1};
    cube_status_t s = dk_create(cases[i].source, cases[i].entry, NULL, dim, NULL, 0, &k);
    int ok = cube_status_code(s) == CUBE_STATUS_INVALID_ARGUMENT;
    for (int w = 0; ok && w < 3 && cases[i].words[w]; ++w)
      ok = strstr(cube_status_message(s), cases[i].words[w]) != NULL;
    if (!ok) {
      fprintf(stderr, "malformed case %zu (%s): [%s] %s\n", i, cases[i].entry,
              cube_status_code_name(cube_status_code(s)), cube_status_message(s));
      CHECK(!"cube_kernel_create fails with INVALID_ARGUMENT naming the line");
    }
    cube_status_free(s);
    if (k) cube_kernel_release(k);
  }
  /* The signature comes from the source: launches with other kinds fail at once. */
  CTS_CLIENT(c);
  DK(k, k_saxpy, "saxpy", 32, 1, 1, NULL, 0);
  cube_handle_t h;
  REQUIRE_OK(cts_poisoned(c, 64, &h));
  cube_arg_t wrong[5] = {cube_arg_buffer(h), cube_arg_buffer(h), cube_arg_buffer(h),
                         cube_arg_u32(1), cube_arg_u32(16)};
  CHECK_STATUS(cube_client_launch(c, k, cube_count_static(1, 1, 1), 5, wrong),
               CUBE_STATUS_INVALID_ARGUMENT, "saxpy");
  CHECK_STATUS(cube_client_launch(c, k, cube_count_static(1, 1, 1), 4, wrong),
               CUBE_STATUS_INVALID_ARGUMENT, "saxpy");
  /* A declared signature that disagrees with the source. */
  cube_arg_kind_t kinds[5] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32,
                              CUBE_ARG_U32};
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.source = k_saxpy;
  d.entry = "saxpy";
  d.arg_kinds = kinds;
  d.arg_count = 5;
  cube_kernel_t* k2 = NULL;
  CHECK_STATUS(cube_kernel_create(&d, &k2), CUBE_STATUS_INVALID_ARGUMENT, "saxpy");
  kinds[3] = CUBE_ARG_F32;
  CHECK_OK(cube_kernel_create(&d, &k2));
  cube_kernel_release(k2);
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(h);
  cube_kernel_release(k);
  CTS_END(c);
}
