/* Launching kernels: results, counts, modes, shared memory, scalar
 * arguments, lifetimes. The kernels are native ones with dialect twins
 * (cts_kernel_create: native where the device runs them, else the twin). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cts.h"

CUBE_TEST(launch_saxpy_1000003) {
  CTS_CLIENT(c);
  const uint32_t n = 1000003;
  const float a = 1.7500001f;
  float* x = malloc(n * sizeof(float));
  float* y = malloc(n * sizeof(float));
  REQUIRE(x && y);
  for (uint32_t i = 0; i < n; ++i) {
    uint64_t s = 0x1234 + i;
    x[i] = (float)(cube_test_rand(&s) % 2000001) / 1000.0f - 1000.0f;
    y[i] = (float)(cube_test_rand(&s) % 1999) / 7.0f;
  }
  cube_handle_t hx, hy, ho;
  REQUIRE_OK(cube_client_create_from_slice(c, x, n * 4, &hx));
  REQUIRE_OK(cube_client_create_from_slice(c, y, n * 4, &hy));
  REQUIRE_OK(cts_poisoned(c, n * 4, &ho));
  CTS_KERNEL(k, "saxpy", cts_k_saxpy, 256, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER,
             CUBE_ARG_F32, CUBE_ARG_U32);
  CHECK_EQ_U64(cube_kernel_arg_count(k), 5);
  CHECK(cube_kernel_cube_dim(k).x == 256 && cube_kernel_cube_dim(k).y == 1);
  CHECK(strcmp(cube_kernel_name(k), "saxpy") == 0);
  cube_arg_t args[5] = {cube_arg_buffer(hx), cube_arg_buffer(hy), cube_arg_buffer(ho),
                        cube_arg_f32(a), cube_arg_u32(n)};
  uint32_t cubes = (n + 255) / 256;
  REQUIRE_OK(cube_client_launch(c, k, cube_count_static(cubes, 1, 1), 5, args));
  float* got = NULL;
  size_t got_size = 0;
  REQUIRE_OK(cts_read_alloc(c, ho, (void**)&got, &got_size));
  CHECK_EQ_U64(got_size, (uint64_t)n * 4);
  size_t bad = 0;
  for (uint32_t i = 0; i < n && got_size == (size_t)n * 4; ++i)
    if (!cts_saxpy_match(got[i], a, x[i], y[i]) && bad++ < 5)
      fprintf(stderr, "out[%u] = %.9g, expected %.9g\n", i, got[i], cts_saxpy1(a, x[i], y[i]));
  CHECK(bad == 0);
  free(got);
  CHECK_OK(cube_client_sync(c));
  cube_kernel_release(k);
  cube_handle_release(hx);
  cube_handle_release(hy);
  cube_handle_release(ho);
  free(x);
  free(y);
  CTS_END(c);
}

/* Records each cube's visit: counts[linear index] += 1 and the geometry it
 * saw in info: {count xyz, dim xyz, mode, shared != NULL, bad_pos}. */
static int cts_k_visit(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  if (n != 2) return 7;
  uint32_t* counts = args[0].buffer.data;
  uint32_t* info = args[1].buffer.data;
  uint64_t total = (uint64_t)cube->cube_count[0] * cube->cube_count[1] * cube->cube_count[2];
  if (cube->cube_pos[0] >= cube->cube_count[0] || cube->cube_pos[1] >= cube->cube_count[1] ||
      cube->cube_pos[2] >= cube->cube_count[2]) {
    __atomic_fetch_add(&info[8], 1, __ATOMIC_RELAXED);
    return 0;
  }
  uint64_t i = cts_cube_index(cube);
  if (i >= total || (i + 1) * 4 > args[0].buffer.len) return 5;
  __atomic_fetch_add(&counts[i], 1, __ATOMIC_RELAXED);
  for (int k = 0; k < 3; ++k) {
    __atomic_store_n(&info[k], cube->cube_count[k], __ATOMIC_RELAXED);
    __atomic_store_n(&info[3 + k], cube->cube_dim[k], __ATOMIC_RELAXED);
  }
  __atomic_store_n(&info[6], (uint32_t)cube->mode, __ATOMIC_RELAXED);
  return 0;
}

_Static_assert(CUBE_EXEC_CHECKED == 0 && CUBE_EXEC_VALIDATE == 1 && CUBE_EXEC_UNCHECKED == 2,
              "the twins' CTS_MODE values");
/* Each execution mode is its own compiled kernel, with CUBE_MODE_<mode> defined. */
#define CTS_MODE_DEFINE                                                                  \
  "#if defined(CUBE_MODE_CHECKED)\n#define CTS_MODE 0u\n#elif defined(CUBE_MODE_VALIDATE)\n" \
  "#define CTS_MODE 1u\n#else\n#define CTS_MODE 2u\n#endif\n"

/* The twin: unit 0 of each cube does what the native kernel does per cube
 * (an index past |counts| counts as an out-of-range position). */
static const char cts_k_visit_dialect[] =
    CTS_MODE_DEFINE
    "CUBE_KERNEL(cts_k_visit, CUBE_ARRAY(uint32_t, counts), CUBE_ARRAY(uint32_t, info)) {\n"
    "  if (UNIT_POS != 0) return;\n"
    "  if (CUBE_POS_X >= CUBE_COUNT_X || CUBE_POS_Y >= CUBE_COUNT_Y || CUBE_POS_Z >= CUBE_COUNT_Z ||\n"
    "      CUBE_POS >= CUBE_LEN(counts)) {\n"
    "    cube_atomic_add_u32(&info[8], 1u);\n"
    "    return;\n"
    "  }\n"
    "  cube_atomic_add_u32(&counts[CUBE_POS], 1u);\n"
    "  cube_atomic_exchange_u32(&info[0], CUBE_COUNT_X);\n"
    "  cube_atomic_exchange_u32(&info[1], CUBE_COUNT_Y);\n"
    "  cube_atomic_exchange_u32(&info[2], CUBE_COUNT_Z);\n"
    "  cube_atomic_exchange_u32(&info[3], CUBE_DIM_X);\n"
    "  cube_atomic_exchange_u32(&info[4], CUBE_DIM_Y);\n"
    "  cube_atomic_exchange_u32(&info[5], CUBE_DIM_Z);\n"
    "  cube_atomic_exchange_u32(&info[6], CTS_MODE);\n"
    "}\n";

static void cts_check_visits(cube_client_t* c, cube_handle_t counts, cube_handle_t info,
                             uint32_t x, uint32_t y, uint32_t z, cube_dim_t dim) {
  uint64_t total = (uint64_t)x * y * z;
  uint32_t* got = NULL;
  size_t size = 0;
  REQUIRE_OK(cts_read_alloc(c, counts, (void**)&got, &size));
  size_t wrong = 0;
  for (uint64_t i = 0; i < total && i * 4 < size; ++i)
    if (got[i] != 1 && wrong++ < 5) fprintf(stderr, "cube %llu visited %u times\n", (unsigned long long)i, got[i]);
  CHECK(wrong == 0);
  for (uint64_t i = total; i * 4 < size; ++i) CHECK(got[i] == 0xCDCDCDCDu || got[i] == 0);
  free(got);
  uint32_t* inf = NULL;
  REQUIRE_OK(cts_read_alloc(c, info, (void**)&inf, &size));
  CHECK(inf[0] == x && inf[1] == y && inf[2] == z);
  CHECK(inf[3] == dim.x && inf[4] == dim.y && inf[5] == dim.z);
  CHECK(inf[8] == 0); /* no out-of-range position */
  free(inf);
}

CUBE_TEST(launch_static_3d_visits_each_cube_once) {
  CTS_CLIENT(c);
  const uint32_t dims[][3] = {{1, 1, 1}, {3, 4, 5}, {7, 1, 3}, {1, 9, 1}, {1000, 3, 2}};
  cube_dim_t kd = {4, 2, 3};
  const cube_arg_kind_t kinds[2] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER};
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cts_kernel_create("visit", cts_k_visit, kd, 0, 2, kinds, &k));
  for (size_t t = 0; t < sizeof(dims) / sizeof(dims[0]); ++t) {
    uint32_t x = dims[t][0], y = dims[t][1], z = dims[t][2];
    size_t total = (size_t)x * y * z;
    uint32_t* zeros = calloc(total, 4);
    REQUIRE(zeros);
    cube_handle_t counts, info;
    REQUIRE_OK(cube_client_create_from_slice(c, zeros, total * 4, &counts));
    uint32_t info0[9] = {0};
    REQUIRE_OK(cube_client_create_from_slice(c, info0, sizeof(info0), &info));
    cube_arg_t args[2] = {cube_arg_buffer(counts), cube_arg_buffer(info)};
    REQUIRE_OK(cube_client_launch(c, k, cube_count_static(x, y, z), 2, args));
    cts_check_visits(c, counts, info, x, y, z, kd);
    cube_handle_release(counts);
    cube_handle_release(info);
    free(zeros);
  }
  cube_kernel_release(k);
  CTS_END(c);
}

CUBE_TEST(launch_dynamic_count) {
  CTS_CLIENT(c);
  if (!(cube_client_features(c)->bits & CUBE_FEATURE_DYNAMIC_COUNT)) {
    CTS_END(c);
    CUBE_SKIP("%s: no CUBE_FEATURE_DYNAMIC_COUNT", cts_backend()->name);
  }
  CTS_KERNEL(k, "visit_dyn", cts_k_visit, 8, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER);
  cube_dim_t kd = {8, 1, 1};
  uint32_t zeros[64] = {0};
  cube_handle_t counts, info, dyn;
  REQUIRE_OK(cube_client_create_from_slice(c, zeros, sizeof(zeros), &counts));
  REQUIRE_OK(cube_client_create_from_slice(c, zeros, 9 * 4, &info));
  const uint32_t xyz[3] = {2, 3, 4};
  REQUIRE_OK(cube_client_create_from_slice(c, xyz, sizeof(xyz), &dyn));
  cube_arg_t args[2] = {cube_arg_buffer(counts), cube_arg_buffer(info)};
  REQUIRE_OK(cube_client_launch(c, k, cube_count_dynamic(dyn), 2, args));
  cts_check_visits(c, counts, info, 2, 3, 4, kd);
  cube_handle_release(counts);
  cube_handle_release(info);

  /* The count is read when the launch runs: a kernel queued before may
   * write it. Here a copy kernel writes {5,1,2} into the count buffer. */
  const uint32_t xyz2[3] = {5, 1, 2};
  cube_handle_t src;
  REQUIRE_OK(cube_client_create_from_slice(c, xyz2, sizeof(xyz2), &src));
  REQUIRE_OK(cube_client_create_from_slice(c, zeros, sizeof(zeros), &counts));
  REQUIRE_OK(cube_client_create_from_slice(c, zeros, 9 * 4, &info));
  CTS_KERNEL(copy, "copy", cts_k_copy, 1, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER);
  cube_arg_t cargs[2] = {cube_arg_buffer(src), cube_arg_buffer(dyn)};
  REQUIRE_OK(cube_client_launch(c, copy, cube_count_static(1, 1, 1), 2, cargs));
  cube_arg_t args2[2] = {cube_arg_buffer(counts), cube_arg_buffer(info)};
  REQUIRE_OK(cube_client_launch(c, k, cube_count_dynamic(dyn), 2, args2));
  /* Released right after the launch: the launch keeps it. */
  cube_handle_release(dyn);
  cts_check_visits(c, counts, info, 5, 1, 2, kd);
  cube_handle_release(counts);
  cube_handle_release(info);
  cube_handle_release(src);
  cube_kernel_release(copy);
  cube_kernel_release(k);
  CTS_END(c);
}

CUBE_TEST(launch_zero_count_runs_nothing) {
  CTS_CLIENT(c);
  CTS_KERNEL(k, "add", cts_k_add_u32, 16, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32,
             CUBE_ARG_U32);
  CTS_KERNEL(fail, "must_not_run", cts_k_fail, 1, 0, CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_U32,
             CUBE_ARG_U32, CUBE_ARG_I32);
  uint32_t in[100];
  cube_test_fill_random(in, sizeof(in), 4000);
  cube_handle_t hi, ho;
  REQUIRE_OK(cube_client_create_from_slice(c, in, sizeof(in), &hi));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &ho));
  cube_arg_t args[4] = {cube_arg_buffer(hi), cube_arg_buffer(ho), cube_arg_u32(1), cube_arg_u32(100)};
  cube_arg_t fargs[5] = {cube_arg_buffer(hi), cube_arg_u32(0), cube_arg_u32(0), cube_arg_u32(0),
                         cube_arg_i32(3)};
  const uint32_t zs[3][3] = {{0, 7, 1}, {7, 0, 1}, {7, 1, 0}};
  for (int i = 0; i < 3; ++i) {
    CHECK_OK(cube_client_launch(c, k, cube_count_static(zs[i][0], zs[i][1], zs[i][2]), 4, args));
    CHECK_OK(cts_launch_fail(c, fail, cube_count_static(zs[i][0], zs[i][1], zs[i][2]), 5, fargs));
  }
  /* Dynamic counts with a zero component run nothing either. */
  const uint32_t dz[3] = {7, 0, 1};
  cube_handle_t dyn;
  REQUIRE_OK(cube_client_create_from_slice(c, dz, sizeof(dz), &dyn));
  if (cube_client_features(c)->bits & CUBE_FEATURE_DYNAMIC_COUNT) {
    CHECK_OK(cube_client_launch(c, k, cube_count_dynamic(dyn), 4, args));
    CHECK_OK(cts_launch_fail(c, fail, cube_count_dynamic(dyn), 5, fargs));
  }
  CHECK_OK(cube_client_sync(c)); /* the failing kernel never ran */
  uint8_t poison[sizeof(in)];
  memset(poison, CTS_POISON, sizeof(poison));
  CHECK(cts_read_equals(c, ho, poison, sizeof(poison)));
  /* A real count does run. */
  CHECK_OK(cube_client_launch(c, k, cube_count_static(7, 1, 1), 4, args));
  for (int i = 0; i < 100; ++i) in[i] += 1;
  CHECK(cts_read_equals(c, ho, in, sizeof(in)));
  cube_handle_release(dyn);
  cube_handle_release(hi);
  cube_handle_release(ho);
  cube_kernel_release(k);
  cube_kernel_release(fail);
  CTS_END(c);
}

/* Writes its execution mode into out[0] (one cube). */
static int cts_k_mode(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  if (n != 1 || args[0].buffer.len < 4) return 7;
  ((uint32_t*)args[0].buffer.data)[0] = (uint32_t)cube->mode;
  return 0;
}

static const char cts_k_mode_dialect[] =
    CTS_MODE_DEFINE
    "CUBE_KERNEL(cts_k_mode, CUBE_ARRAY(uint32_t, out)) {\n"
    "  if (CUBE_POS == 0 && UNIT_POS == 0) CUBE_STORE(out, 0, CTS_MODE);\n"
    "}\n";

CUBE_TEST(launch_unchecked_and_modes) {
  if (getenv("CUBE_CHECK_MODE")) unsetenv("CUBE_CHECK_MODE");
  CTS_CLIENT(c);
  /* launch_unchecked computes as launch. */
  CTS_KERNEL(k, "add", cts_k_add_u32, 32, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32,
             CUBE_ARG_U32);
  const uint32_t n = 1003;
  uint32_t* in = malloc(n * 4);
  REQUIRE(in);
  cube_test_fill_random(in, n * 4, 4100);
  cube_handle_t hi, ho;
  REQUIRE_OK(cube_client_create_from_slice(c, in, n * 4, &hi));
  REQUIRE_OK(cts_poisoned(c, n * 4, &ho));
  cube_arg_t args[4] = {cube_arg_buffer(hi), cube_arg_buffer(ho), cube_arg_u32(77), cube_arg_u32(n)};
  CHECK_OK(cube_client_launch_unchecked(c, k, cube_count_static((n + 31) / 32, 1, 1), 4, args));
  for (uint32_t i = 0; i < n; ++i) in[i] += 77;
  CHECK(cts_read_equals(c, ho, in, n * 4));
  /* The mode each entry point runs in. */
  CTS_KERNEL(m, "mode", cts_k_mode, 1, 0, CUBE_ARG_BUFFER);
  cube_handle_t hm;
  REQUIRE_OK(cts_poisoned(c, 4, &hm));
  cube_arg_t ma = cube_arg_buffer(hm);
  uint32_t mode = 0xFFFFFFFFu;
  CHECK_OK(cube_client_launch(c, m, cube_count_static(1, 1, 1), 1, &ma));
  mode = CUBE_EXEC_CHECKED;
  CHECK(cts_read_equals(c, hm, &mode, 4));
  CHECK_OK(cube_client_launch_unchecked(c, m, cube_count_static(1, 1, 1), 1, &ma));
  mode = CUBE_EXEC_UNCHECKED; /* check mode auto */
  CHECK(cts_read_equals(c, hm, &mode, 4));
  CHECK_OK(cube_client_launch_mode(c, m, cube_count_static(1, 1, 1), 1, &ma, CUBE_EXEC_VALIDATE));
  mode = CUBE_EXEC_VALIDATE;
  CHECK(cts_read_equals(c, hm, &mode, 4));
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(hm);
  cube_handle_release(hi);
  cube_handle_release(ho);
  cube_kernel_release(k);
  cube_kernel_release(m);
  free(in);
  CTS_END(c);
}

CUBE_TEST(launch_unchecked_check_mode_enforce) {
  setenv("CUBE_CHECK_MODE", "enforce", 1);
  CTS_CLIENT(c);
  CTS_KERNEL(m, "mode", cts_k_mode, 1, 0, CUBE_ARG_BUFFER);
  cube_handle_t hm;
  REQUIRE_OK(cts_poisoned(c, 4, &hm));
  cube_arg_t ma = cube_arg_buffer(hm);
  CHECK_OK(cube_client_launch_unchecked(c, m, cube_count_static(1, 1, 1), 1, &ma));
  uint32_t mode = CUBE_EXEC_CHECKED;
  CHECK(cts_read_equals(c, hm, &mode, 4));
  cube_handle_release(hm);
  cube_kernel_release(m);
  CTS_END(c);
}

/* Reverses each block of dim.x floats through the cube's shared scratch. */
static int cts_k_reverse_shared(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  if (n != 2) return 7;
  uint32_t dim = cube->cube_dim[0];
  if (!cube->shared || cube->shared_size != (uint64_t)dim * 4) return 6;
  const float* in = args[0].buffer.data;
  float* out = args[1].buffer.data;
  float* sh = cube->shared;
  uint64_t base = cts_cube_index(cube) * dim;
  if ((base + dim) * 4 > args[0].buffer.len) return 5;
  for (uint32_t u = 0; u < dim; ++u) sh[u] = in[base + u]; /* "units" store */
  for (uint32_t u = 0; u < dim; ++u) out[base + u] = sh[dim - 1 - u]; /* after the barrier */
  return 0;
}

/* The twin: the same through CUBE_SHARED and sync_cube (dim.x <= 256), on
 * the bits (u32) so that no float is ever loaded into a register. */
static const char cts_k_reverse_shared_dialect[] =
    "CUBE_KERNEL(cts_k_reverse_shared, CUBE_ARRAY(const uint32_t, in), CUBE_ARRAY(uint32_t, out)) {\n"
    "  CUBE_SHARED(uint32_t, sh, 256);\n"
    "  uint32_t u = UNIT_POS;\n"
    "  uint64_t base = (uint64_t)CUBE_POS * CUBE_DIM;\n"
    "  sh[u] = CUBE_LOAD(in, base + u);\n"
    "  sync_cube();\n"
    "  CUBE_STORE(out, base + u, sh[CUBE_DIM - 1u - u]);\n"
    "}\n";

CUBE_TEST(launch_shared_memory_scratch) {
  CTS_CLIENT(c);
  const uint32_t dim = 256, blocks = 97;
  const size_t n = (size_t)dim * blocks;
  float* in = malloc(n * 4);
  float* expect = malloc(n * 4);
  REQUIRE(in && expect);
  cube_test_fill_random(in, n * 4, 4200);
  for (size_t b = 0; b < blocks; ++b)
    for (uint32_t u = 0; u < dim; ++u) expect[b * dim + u] = in[b * dim + dim - 1 - u];
  cube_handle_t hi, ho;
  REQUIRE_OK(cube_client_create_from_slice(c, in, n * 4, &hi));
  REQUIRE_OK(cts_poisoned(c, n * 4, &ho));
  CTS_KERNEL(k, "reverse_shared", cts_k_reverse_shared, 256, 256 * 4, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER);
  cube_arg_t args[2] = {cube_arg_buffer(hi), cube_arg_buffer(ho)};
  for (int rep = 0; rep < 3; ++rep) {
    CHECK_OK(cube_client_launch(c, k, cube_count_static(blocks, 1, 1), 2, args));
    CHECK(cts_read_equals(c, ho, expect, n * 4));
  }
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(hi);
  cube_handle_release(ho);
  cube_kernel_release(k);
  free(in);
  free(expect);
  CTS_END(c);
}

typedef struct cts_scalars {
  uint32_t u32;
  int32_t i32;
  uint64_t u64;
  int64_t i64;
  float f32;
  uint32_t pad;
  double f64;
  uint64_t buf_len;
} cts_scalars_t;

static int cts_k_scalars(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube;
  if (n != 8) return 7;
  cts_scalars_t* out = args[0].buffer.data;
  if (args[0].buffer.len < sizeof(*out)) return 5;
  out->u32 = args[1].u32;
  out->i32 = args[2].i32;
  out->u64 = args[3].u64;
  out->i64 = args[4].i64;
  out->f32 = args[5].f32;
  out->pad = 0;
  out->f64 = args[6].f64;
  out->buf_len = args[7].buffer.len;
  return 0;
}

/* The twin writes the same struct as u32 words (little-endian halves), the
 * floats through unions (bits, NaN payloads included, never an FP operation). */
static const char cts_k_scalars_dialect[] =
    "CUBE_KERNEL(cts_k_scalars, CUBE_ARRAY(uint32_t, out), uint32_t u32, int32_t i32, uint64_t u64,\n"
    "            int64_t i64, float f32, double f64, CUBE_ARRAY(uint8_t, buf)) {\n"
    "  if (CUBE_POS != 0 || UNIT_POS != 0 || CUBE_LEN(out) < 12) return;\n"
    "  union { float f; uint32_t u; } fu;\n"
    "  union { double d; uint64_t u; } du;\n"
    "  fu.f = f32;\n"
    "  du.d = f64;\n"
    "  uint64_t len = CUBE_LEN(buf);\n"
    "  out[0] = u32;\n"
    "  out[1] = (uint32_t)i32;\n"
    "  out[2] = (uint32_t)u64;\n"
    "  out[3] = (uint32_t)(u64 >> 32);\n"
    "  out[4] = (uint32_t)(uint64_t)i64;\n"
    "  out[5] = (uint32_t)((uint64_t)i64 >> 32);\n"
    "  out[6] = fu.u;\n"
    "  out[7] = 0u;\n"
    "  out[8] = (uint32_t)du.u;\n"
    "  out[9] = (uint32_t)(du.u >> 32);\n"
    "  out[10] = (uint32_t)len;\n"
    "  out[11] = (uint32_t)(len >> 32);\n"
    "}\n";
_Static_assert(sizeof(cts_scalars_t) == 48, "the twin writes 12 words");

CUBE_TEST(launch_scalar_args_intact) {
  CTS_CLIENT(c);
  if (!cts_native_kernels() && !(cube_client_features(c)->bits & CUBE_FEATURE_F64)) {
    CTS_END(c); /* the twin has a double parameter */
    CUBE_SKIP("%s: no CUBE_FEATURE_F64 for the dialect twin's double", cts_backend()->name);
  }
  CTS_KERNEL(k, "scalars", cts_k_scalars, 1, 0, CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_I32,
             CUBE_ARG_U64, CUBE_ARG_I64, CUBE_ARG_F32, CUBE_ARG_F64, CUBE_ARG_BUFFER);
  cube_handle_t ho, hb;
  REQUIRE_OK(cts_poisoned(c, sizeof(cts_scalars_t), &ho));
  REQUIRE_OK(cts_poisoned(c, 12345, &hb));
  const struct {
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f32;
    double f64;
  } vals[3] = {
      {0xDEADBEEFu, -123456789, 0xFEDCBA9876543210ull, INT64_MIN + 7, -3.25e-7f, 1.0e300},
      {0, 0, 0, 0, -0.0f, -0.0},
      {UINT32_MAX, INT32_MIN, UINT64_MAX, INT64_MAX, 3.4028235e38f, 4.9e-324},
  };
  for (int i = 0; i < 3; ++i) {
    cube_arg_t args[8] = {cube_arg_buffer(ho),       cube_arg_u32(vals[i].u32), cube_arg_i32(vals[i].i32),
                          cube_arg_u64(vals[i].u64), cube_arg_i64(vals[i].i64), cube_arg_f32(vals[i].f32),
                          cube_arg_f64(vals[i].f64), cube_arg_buffer(hb)};
    REQUIRE_OK(cube_client_launch(c, k, cube_count_static(1, 1, 1), 8, args));
    cts_scalars_t expect;
    memset(&expect, 0, sizeof(expect));
    expect.u32 = vals[i].u32;
    expect.i32 = vals[i].i32;
    expect.u64 = vals[i].u64;
    expect.i64 = vals[i].i64;
    expect.f32 = vals[i].f32;
    expect.f64 = vals[i].f64;
    expect.buf_len = 12345;
    CHECK(cts_read_equals(c, ho, &expect, sizeof(expect)));
  }
  /* NaN payload bits survive too. */
  uint32_t nan_bits = 0x7FC0BEEFu;
  uint64_t dnan_bits = 0x7FF8000000C0FFEEull;
  float fnan;
  double dnan;
  memcpy(&fnan, &nan_bits, 4);
  memcpy(&dnan, &dnan_bits, 8);
  cube_arg_t args[8] = {cube_arg_buffer(ho), cube_arg_u32(1), cube_arg_i32(2), cube_arg_u64(3),
                        cube_arg_i64(4),     cube_arg_f32(fnan), cube_arg_f64(dnan), cube_arg_buffer(hb)};
  REQUIRE_OK(cube_client_launch(c, k, cube_count_static(1, 1, 1), 8, args));
  cts_scalars_t* got = NULL;
  size_t size = 0;
  REQUIRE_OK(cts_read_alloc(c, ho, (void**)&got, &size));
  CHECK(memcmp(&got->f32, &nan_bits, 4) == 0);
  CHECK(memcmp(&got->f64, &dnan_bits, 8) == 0);
  free(got);
  cube_handle_release(ho);
  cube_handle_release(hb);
  cube_kernel_release(k);
  CTS_END(c);
}

CUBE_TEST(launch_keeps_buffers_alive) {
  CTS_CLIENT(c);
  const size_t n = 100003;
  uint8_t* data = malloc(n);
  uint8_t* junk = malloc(n);
  REQUIRE(data && junk);
  cube_test_fill_random(data, n, 4300);
  memset(junk, 0x11, n);
  CTS_KERNEL(copy, "copy", cts_k_copy, 1, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER);
  int queued = !cube_client_is_blocking(c);
  cube_handle_t hin, hout, hdummy;
  REQUIRE_OK(cube_client_create_from_slice(c, data, n, &hin));
  REQUIRE_OK(cts_poisoned(c, n, &hout));
  REQUIRE_OK(cube_client_empty(c, 16, &hdummy));
  /* Hold the device so that the copy below cannot run yet. */
  if (queued) REQUIRE(cts_gate_hold(c));
  cube_arg_t args[2] = {cube_arg_buffer(hin), cube_arg_buffer(hout)};
  CHECK_OK(cube_client_launch(c, copy, cube_count_static(1, 1, 1), 2, args));
  /* The kernel object and both handles go right after the launch. */
  cube_kernel_release(copy);
  copy = NULL;
  cube_handle_t hout2 = cube_handle_retain(hout);
  cube_handle_release(hin);
  cube_handle_release(hout);
  cube_handle_release(hdummy);
  /* New buffers of the same size would take the input's slice if it had
   * been freed; fill them with junk. */
  cube_handle_t others[4];
  for (int i = 0; i < 4; ++i) REQUIRE_OK(cube_client_create_from_slice(c, junk, n, &others[i]));
  cts_gate_open();
  CHECK(cts_read_equals(c, hout2, data, n));
  for (int i = 0; i < 4; ++i) CHECK(cts_read_equals(c, others[i], junk, n));
  CHECK_OK(cube_client_sync(c));
  cube_handle_release_array(others, 4);
  cube_handle_release(hout2);
  free(data);
  free(junk);
  CTS_END(c);
}

CUBE_TEST(launch_order_and_views) {
  CTS_CLIENT(c);
  const uint32_t n = 4099;
  uint32_t* in = malloc(n * 4);
  REQUIRE(in);
  cube_test_fill_random(in, n * 4, 4400);
  cube_handle_t a, b;
  REQUIRE_OK(cube_client_create_from_slice(c, in, n * 4, &a));
  REQUIRE_OK(cts_poisoned(c, n * 4, &b));
  CTS_KERNEL(k, "add", cts_k_add_u32, 64, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_U32);
  uint32_t cubes = (n + 63) / 64;
  /* a -> b (+1), b -> a (+2), a -> b (+3), ...: each depends on the one before. */
  for (uint32_t i = 1; i <= 10; ++i) {
    cube_arg_t args[4] = {cube_arg_buffer(i % 2 ? a : b), cube_arg_buffer(i % 2 ? b : a),
                          cube_arg_u32(i), cube_arg_u32(n)};
    CHECK_OK(cube_client_launch(c, k, cube_count_static(cubes, 1, 1), 4, args));
  }
  for (uint32_t i = 0; i < n; ++i) in[i] += 55;
  CHECK(cts_read_equals(c, a, in, n * 4)); /* the 10th launch wrote a */
  /* A kernel sees a view's start and length. */
  cube_handle_t v;
  REQUIRE_OK(cube_handle_offset_view(a, 400, 4 * 99, &v));
  cube_handle_t out;
  REQUIRE_OK(cts_poisoned(c, (n - 100 - 99) * 4, &out));
  cube_arg_t args[4] = {cube_arg_buffer(v), cube_arg_buffer(out), cube_arg_u32(0),
                        cube_arg_u32(n - 100 - 99)};
  CHECK_OK(cube_client_launch(c, k, cube_count_static(cubes, 1, 1), 4, args));
  CHECK(cts_read_equals(c, out, in + 100, (n - 100 - 99) * 4));
  CTS_KERNEL(copy, "copy", cts_k_copy, 1, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER);
  /* The copy kernel copies min(len) bytes: the view's length must be exact,
   * so a 1-byte-shorter destination leaves the rest of |b| untouched. */
  cube_handle_t bv;
  REQUIRE_OK(cube_handle_offset_view(b, 4, 0, &bv));
  uint8_t* before = NULL;
  size_t bsize = 0;
  REQUIRE_OK(cts_read_alloc(c, b, (void**)&before, &bsize));
  cube_arg_t cargs[2] = {cube_arg_buffer(out), cube_arg_buffer(bv)};
  CHECK_OK(cube_client_launch(c, copy, cube_count_static(1, 1, 1), 2, cargs));
  memcpy(before + 4, in + 100, (n - 100 - 99) * 4);
  CHECK(cts_read_equals(c, b, before, bsize));
  free(before);
  cube_handle_release(bv);
  cube_handle_release(v);
  cube_handle_release(out);
  cube_handle_release(a);
  cube_handle_release(b);
  cube_kernel_release(k);
  cube_kernel_release(copy);
  free(in);
  CTS_END(c);
}

/* CubeCountSelection and CubeDim::new (docs/cubecl.md, "CubeCount and CubeDim helpers"). */
CUBE_TEST(launch_count_select_and_dim_helpers) {
  cube_count_t cnt;
  bool exact = false;
  const uint32_t m1[3] = {32, 32, 32};
  CHECK_OK(cube_count_select(2048, m1, &cnt, &exact));
  CHECK(cnt.kind == CUBE_COUNT_STATIC && cnt.x == 32 && cnt.y == 32 && cnt.z == 2);
  CHECK(exact);
  const uint32_t m2[3] = {48, 32, 16};
  CHECK_OK(cube_count_select(3177, m2, &cnt, &exact));
  CHECK(cnt.x == 25 && cnt.y == 32 && cnt.z == 4);
  CHECK(!exact);
  CHECK_OK(cube_count_select(7, m1, &cnt, &exact));
  CHECK(cnt.x == 7 && cnt.y == 1 && cnt.z == 1 && exact);
  CTS_CLIENT(c);
  const cube_device_properties_t* p = cube_client_properties(c);
  cube_dim_t d = cube_dim_for_units(p, 1);
  CHECK(d.x >= 1 && d.y >= 1 && d.z == 1);
  CHECK((uint64_t)d.x * d.y <= p->hardware.max_units_per_cube);
  d = cube_dim_for_units(p, 1000000);
  CHECK(d.x == p->hardware.plane_size_max);
  CHECK((uint64_t)d.x * d.y * d.z <= p->hardware.max_units_per_cube);
  if (cts_backend()->backend == CUBE_BACKEND_CPU) {
    uint32_t cores = p->hardware.num_cpu_cores;
    uint32_t expect = cores < p->hardware.max_units_per_cube ? cores : p->hardware.max_units_per_cube;
    CHECK(d.x == 1 && d.y == (expect ? expect : 1) && d.z == 1);
  }
  CTS_END(c);
}

static atomic_uint cts_noarg_cubes = 0;
static int cts_k_noargs(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube;
  if (n != 0) return 7;
  (void)args;
  atomic_fetch_add(&cts_noarg_cubes, 1);
  return 0;
}

CUBE_TEST(launch_kernel_without_args) {
  /* A dialect kernel has at least one parameter (docs/dialect.md). */
  CTS_REQUIRE_NATIVE("a kernel without arguments is native only");
  CTS_CLIENT(c);
  cube_kernel_t* k = NULL;
  cube_dim_t dim = {2, 2, 1};
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = "noargs";
  d.cube_dim = dim;
  d.cpu_fn = cts_k_noargs;
  REQUIRE_OK(cube_kernel_create(&d, &k));
  CHECK_EQ_U64(cube_kernel_arg_count(k), 0);
  atomic_store(&cts_noarg_cubes, 0);
  CHECK_OK(cube_client_launch(c, k, cube_count_static(5, 7, 3), 0, NULL));
  CHECK_OK(cube_client_launch_unchecked(c, k, cube_count_static(1, 1, 1), 0, NULL));
  CHECK_OK(cube_client_sync(c));
  CHECK_EQ_U64(atomic_load(&cts_noarg_cubes), 5 * 7 * 3 + 1);
  cube_kernel_release(k);
  CTS_END(c);
}
