// cube-test-libs: cube_static
/* Kernel objects and the launch-shape helpers (docs/cubecl.md, "CubeCount and CubeDim helpers"). */
#include "base/abi.h"
#include "check.h"
#include "cube/backends/cpu.h"
#include "cube/device.h"
#include "cube/kernel.h"

static int noop_kernel(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args,
                       uint32_t arg_count) {
  (void)cube;
  (void)args;
  (void)arg_count;
  return 0;
}

static cube_kernel_desc_t good_desc(void) {
  static const cube_arg_kind_t kinds[] = {CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_F64};
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = "axpy";
  d.cube_dim = (cube_dim_t){64, 2, 1};
  d.arg_kinds = kinds;
  d.arg_count = 3;
  d.shared_memory_size = 256;
  d.cpu_fn = noop_kernel;
  return d;
}

/* Kernel objects -------------------------------------------------------------- */

CUBE_TEST(create_and_query) {
  cube_kernel_desc_t d = good_desc();
  char name[16];
  strcpy(name, "axpy");
  d.name = name;
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cube_kernel_create(&d, &k));
  name[0] = 'X'; /* the name was copied */
  CHECK(strcmp(cube_kernel_name(k), "axpy") == 0);
  cube_dim_t dim = cube_kernel_cube_dim(k);
  CHECK(dim.x == 64 && dim.y == 2 && dim.z == 1);
  CHECK_EQ_U64(cube_kernel_arg_count(k), 3);
  CHECK(cube_kernel_retain(k) == k);
  cube_kernel_release(k);
  CHECK(strcmp(cube_kernel_name(k), "axpy") == 0);
  cube_kernel_release(k);
  cube_kernel_release(NULL);
  CHECK(cube_kernel_retain(NULL) == NULL);
}

CUBE_TEST(create_zero_dim_means_one) {
  cube_kernel_desc_t d = good_desc();
  d.cube_dim = (cube_dim_t){0, 0, 0};
  d.arg_count = 0;
  d.arg_kinds = NULL;
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cube_kernel_create(&d, &k));
  cube_dim_t dim = cube_kernel_cube_dim(k);
  CHECK(dim.x == 1 && dim.y == 1 && dim.z == 1);
  CHECK_EQ_U64(cube_kernel_arg_count(k), 0);
  cube_kernel_release(k);
}

CUBE_TEST(create_max_args) {
  cube_arg_kind_t kinds[CUBE_MAX_KERNEL_ARGS];
  for (int i = 0; i < CUBE_MAX_KERNEL_ARGS; ++i)
    kinds[i] = (cube_arg_kind_t)(i % CUBE__ARG_KIND_COUNT);
  cube_kernel_desc_t d = good_desc();
  d.arg_kinds = kinds;
  d.arg_count = CUBE_MAX_KERNEL_ARGS;
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cube_kernel_create(&d, &k));
  CHECK_EQ_U64(cube_kernel_arg_count(k), CUBE_MAX_KERNEL_ARGS);
  cube_kernel_release(k);
}

CUBE_TEST(create_rejects_null_desc_and_out) {
  cube_kernel_t* k = NULL;
  CHECK_STATUS(cube_kernel_create(NULL, &k), CUBE_STATUS_INVALID_ARGUMENT, "cube_kernel_create",
               "desc is NULL");
  cube_kernel_desc_t d = good_desc();
  CHECK_STATUS(cube_kernel_create(&d, NULL), CUBE_STATUS_INVALID_ARGUMENT, "cube_kernel_create",
               "out_kernel");
  CHECK(k == NULL);
}

CUBE_TEST(create_rejects_bad_name) {
  cube_kernel_t* k = NULL;
  cube_kernel_desc_t d = good_desc();
  d.name = NULL;
  CHECK_STATUS(cube_kernel_create(&d, &k), CUBE_STATUS_INVALID_ARGUMENT, "cube_kernel_create",
               "desc->name is NULL");
  d.name = "";
  CHECK_STATUS(cube_kernel_create(&d, &k), CUBE_STATUS_INVALID_ARGUMENT, "cube_kernel_create",
               "desc->name is empty");
  CHECK(k == NULL);
}

CUBE_TEST(create_rejects_null_cpu_fn) {
  cube_kernel_t* k = NULL;
  cube_kernel_desc_t d = good_desc();
  d.cpu_fn = NULL;
  CHECK_STATUS(cube_kernel_create(&d, &k), CUBE_STATUS_INVALID_ARGUMENT, "cube_kernel_create",
               "axpy", "desc->cpu_fn is NULL");
  CHECK(k == NULL);
}

CUBE_TEST(create_rejects_partly_zero_dim) {
  cube_kernel_t* k = NULL;
  cube_kernel_desc_t d = good_desc();
  d.cube_dim = (cube_dim_t){4, 0, 1};
  CHECK_STATUS(cube_kernel_create(&d, &k), CUBE_STATUS_INVALID_ARGUMENT, "cube_kernel_create",
               "desc->cube_dim.y is 0", "(4, 0, 1)");
  d.cube_dim = (cube_dim_t){0, 8, 8};
  CHECK_STATUS(cube_kernel_create(&d, &k), CUBE_STATUS_INVALID_ARGUMENT, "desc->cube_dim.x is 0");
  d.cube_dim = (cube_dim_t){2, 2, 0};
  CHECK_STATUS(cube_kernel_create(&d, &k), CUBE_STATUS_INVALID_ARGUMENT, "desc->cube_dim.z is 0");
  d.cube_dim = (cube_dim_t){65536, 65536, 2};
  CHECK_STATUS(cube_kernel_create(&d, &k), CUBE_STATUS_INVALID_ARGUMENT, "desc->cube_dim",
               "65536");
  CHECK(k == NULL);
}

CUBE_TEST(create_rejects_too_many_args) {
  cube_arg_kind_t kinds[CUBE_MAX_KERNEL_ARGS + 1] = {CUBE_ARG_BUFFER};
  cube_kernel_t* k = NULL;
  cube_kernel_desc_t d = good_desc();
  d.arg_kinds = kinds;
  d.arg_count = CUBE_MAX_KERNEL_ARGS + 1;
  CHECK_STATUS(cube_kernel_create(&d, &k), CUBE_STATUS_INVALID_ARGUMENT, "cube_kernel_create",
               "desc->arg_count 65", "64");
  CHECK(k == NULL);
}

CUBE_TEST(create_rejects_null_arg_kinds) {
  cube_kernel_t* k = NULL;
  cube_kernel_desc_t d = good_desc();
  d.arg_kinds = NULL;
  d.arg_count = 2;
  CHECK_STATUS(cube_kernel_create(&d, &k), CUBE_STATUS_INVALID_ARGUMENT, "cube_kernel_create",
               "desc->arg_kinds is NULL", "2");
  CHECK(k == NULL);
}

CUBE_TEST(create_rejects_unknown_arg_kind) {
  cube_arg_kind_t kinds[] = {CUBE_ARG_BUFFER, CUBE_ARG_U32, (cube_arg_kind_t)42};
  cube_kernel_t* k = NULL;
  cube_kernel_desc_t d = good_desc();
  d.arg_kinds = kinds;
  d.arg_count = 3;
  CHECK_STATUS(cube_kernel_create(&d, &k), CUBE_STATUS_INVALID_ARGUMENT, "cube_kernel_create",
               "desc->arg_kinds[2] is 42");
  kinds[2] = (cube_arg_kind_t)-1;
  CHECK_STATUS(cube_kernel_create(&d, &k), CUBE_STATUS_INVALID_ARGUMENT,
               "desc->arg_kinds[2] is -1");
  CHECK(k == NULL);
}

CUBE_TEST(arg_kind_names) {
  CHECK(strcmp(cube_arg_kind_name(CUBE_ARG_BUFFER), "buffer") == 0);
  CHECK(strcmp(cube_arg_kind_name(CUBE_ARG_U32), "u32") == 0);
  CHECK(strcmp(cube_arg_kind_name(CUBE_ARG_I32), "i32") == 0);
  CHECK(strcmp(cube_arg_kind_name(CUBE_ARG_U64), "u64") == 0);
  CHECK(strcmp(cube_arg_kind_name(CUBE_ARG_I64), "i64") == 0);
  CHECK(strcmp(cube_arg_kind_name(CUBE_ARG_F32), "f32") == 0);
  CHECK(strcmp(cube_arg_kind_name(CUBE_ARG_F64), "f64") == 0);
  CHECK(strcmp(cube_arg_kind_name(CUBE__ARG_KIND_COUNT), "unknown") == 0);
}

/* CubeCountSelection ----------------------------------------------------------- */

CUBE_TEST(count_select_2048_exact) {
  const uint32_t max[3] = {32, 32, 32};
  cube_count_t c;
  bool exact = false;
  REQUIRE_OK(cube_count_select(2048, max, &c, &exact));
  CHECK(c.kind == CUBE_COUNT_STATIC);
  CHECK_EQ_U64(c.x, 32);
  CHECK_EQ_U64(c.y, 32);
  CHECK_EQ_U64(c.z, 2);
  CHECK(exact);
}

CUBE_TEST(count_select_3177_approx) {
  const uint32_t max[3] = {48, 32, 16};
  cube_count_t c;
  bool exact = true;
  REQUIRE_OK(cube_count_select(3177, max, &c, &exact));
  CHECK_EQ_U64(c.x, 25);
  CHECK_EQ_U64(c.y, 32);
  CHECK_EQ_U64(c.z, 4);
  CHECK(!exact); /* 3200 cubes for 3177 */
}

CUBE_TEST(count_select_fits_in_x) {
  const uint32_t max[3] = {65535, 65535, 65535};
  cube_count_t c;
  bool exact = false;
  REQUIRE_OK(cube_count_select(1000, max, &c, &exact));
  CHECK(c.x == 1000 && c.y == 1 && c.z == 1 && exact);
  REQUIRE_OK(cube_count_select(65535, max, &c, &exact));
  CHECK(c.x == 65535 && c.y == 1 && c.z == 1 && exact);
  REQUIRE_OK(cube_count_select(1, max, &c, NULL));
  CHECK(c.x == 1 && c.y == 1 && c.z == 1);
  /* Just past the limit: x halves (rounding up), y doubles. */
  REQUIRE_OK(cube_count_select(65537, max, &c, &exact));
  CHECK(c.x == 32769 && c.y == 2 && c.z == 1 && !exact);
}

CUBE_TEST(count_select_zero_cubes) {
  const uint32_t max[3] = {32, 32, 32};
  cube_count_t c;
  bool exact = false;
  REQUIRE_OK(cube_count_select(0, max, &c, &exact));
  CHECK(c.x == 0 && c.y == 1 && c.z == 1 && exact);
}

CUBE_TEST(count_select_limits) {
  const uint32_t max[3] = {32, 32, 32};
  cube_count_t c = cube_count_static(7, 7, 7);
  bool exact = false;
  /* Exactly the product of the limits fits. */
  REQUIRE_OK(cube_count_select(32 * 32 * 32, max, &c, &exact));
  CHECK(c.x == 32 && c.y == 32 && c.z == 32 && exact);
  /* One more does not. */
  c = cube_count_static(7, 7, 7);
  CHECK_STATUS(cube_count_select(32 * 32 * 32 + 1, max, &c, &exact), CUBE_STATUS_OUT_OF_RANGE,
               "cube_count_select", "32769", "(32, 32, 32)");
  CHECK(c.x == 7); /* untouched on failure */
  const uint32_t ones[3] = {1, 1, 1};
  CHECK_STATUS(cube_count_select(UINT64_MAX, ones, &c, &exact), CUBE_STATUS_OUT_OF_RANGE,
               "cube_count_select");
  const uint32_t big[3] = {UINT32_MAX, UINT32_MAX, UINT32_MAX};
  REQUIRE_OK(cube_count_select(UINT64_MAX, big, &c, &exact));
  CHECK(!exact || (uint64_t)c.x * c.y * c.z == UINT64_MAX);
}

CUBE_TEST(count_select_rejects_bad_arguments) {
  const uint32_t zero_y[3] = {32, 0, 32};
  const uint32_t max[3] = {32, 32, 32};
  cube_count_t c;
  bool exact;
  CHECK_STATUS(cube_count_select(10, zero_y, &c, &exact), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_count_select", "max_count[1]");
  CHECK_STATUS(cube_count_select(10, NULL, &c, &exact), CUBE_STATUS_INVALID_ARGUMENT,
               "max_count is NULL");
  CHECK_STATUS(cube_count_select(10, max, NULL, &exact), CUBE_STATUS_INVALID_ARGUMENT,
               "out_count");
}

CUBE_TEST(count_select_spread_covers_all) {
  uint64_t seed = 99;
  for (int i = 0; i < 2000; ++i) {
    uint32_t max[3] = {1 + (uint32_t)(cube_test_rand(&seed) % 100),
                       1 + (uint32_t)(cube_test_rand(&seed) % 100),
                       1 + (uint32_t)(cube_test_rand(&seed) % 100)};
    uint64_t n = cube_test_rand(&seed) % 200000;
    cube_count_t c;
    bool exact = false;
    cube_status_t s = cube_count_select(n, max, &c, &exact);
    if (s) {
      CHECK(cube_status_code(s) == CUBE_STATUS_OUT_OF_RANGE);
      CHECK(n > max[0]); /* only a count that overflows x is spread */
      cube_status_free(s);
      continue;
    }
    CHECK(c.x <= max[0] && c.y <= max[1] && c.z <= max[2]);
    uint64_t got = (uint64_t)c.x * c.y * c.z;
    CHECK(got >= n);
    CHECK(exact == (got == n));
  }
}

/* CubeDim::new ----------------------------------------------------------------- */

static cube_device_properties_t cuda_like_props(void) {
  cube_device_properties_t p;
  memset(&p, 0, sizeof(p));
  p.id.backend = CUBE_BACKEND_CUDA;
  p.hardware.plane_size_min = 32;
  p.hardware.plane_size_max = 32;
  p.hardware.max_units_per_cube = 1024;
  return p;
}

static cube_device_properties_t cpu_props(uint32_t cores) {
  cube_device_properties_t p;
  memset(&p, 0, sizeof(p));
  p.id.backend = CUBE_BACKEND_CPU;
  p.hardware.plane_size_min = 1;
  p.hardware.plane_size_max = 1;
  p.hardware.max_units_per_cube = 1024;
  p.hardware.num_cpu_cores = cores;
  return p;
}

static int dim_is(cube_dim_t d, uint32_t x, uint32_t y, uint32_t z) {
  if (d.x == x && d.y == y && d.z == z) return 1;
  fprintf(stderr, "dim (%u, %u, %u), expected (%u, %u, %u)\n", d.x, d.y, d.z, x, y, z);
  return 0;
}

CUBE_TEST(dim_for_units_cuda) {
  cube_device_properties_t p = cuda_like_props();
  CHECK(dim_is(cube_dim_for_units(&p, 1), 32, 1, 1));
  CHECK(dim_is(cube_dim_for_units(&p, 0), 32, 1, 1));
  CHECK(dim_is(cube_dim_for_units(&p, 32), 32, 1, 1));
  CHECK(dim_is(cube_dim_for_units(&p, 64), 32, 2, 1));
  CHECK(dim_is(cube_dim_for_units(&p, 100), 32, 2, 1)); /* 3 planes -> 2 */
  CHECK(dim_is(cube_dim_for_units(&p, 128), 32, 4, 1));
  CHECK(dim_is(cube_dim_for_units(&p, 256), 32, 8, 1));
  CHECK(dim_is(cube_dim_for_units(&p, 1000000), 32, 8, 1));
  CHECK(dim_is(cube_dim_for_units(&p, UINT64_MAX), 32, 8, 1));
}

CUBE_TEST(dim_for_units_limited_by_max_units) {
  cube_device_properties_t p = cuda_like_props();
  p.hardware.max_units_per_cube = 128; /* at most 4 planes of 32 */
  CHECK(dim_is(cube_dim_for_units(&p, 1000000), 32, 4, 1));
  p.hardware.max_units_per_cube = 16; /* less than a plane: still one plane */
  CHECK(dim_is(cube_dim_for_units(&p, 1000000), 32, 1, 1));
}

CUBE_TEST(dim_for_units_cpu) {
  cube_device_properties_t p = cpu_props(2);
  CHECK(dim_is(cube_dim_for_units(&p, 1), 1, 1, 1));
  CHECK(dim_is(cube_dim_for_units(&p, 2), 1, 2, 1));
  CHECK(dim_is(cube_dim_for_units(&p, 1000), 1, 2, 1));
  CHECK(dim_is(cube_dim_for_units(&p, 0), 1, 1, 1));
  cube_device_properties_t p16 = cpu_props(16);
  CHECK(dim_is(cube_dim_for_units(&p16, 5), 1, 5, 1));
  CHECK(dim_is(cube_dim_for_units(&p16, 100), 1, 16, 1));
  CHECK(dim_is(cube_dim_for_units(NULL, 100), 1, 1, 1));
}
