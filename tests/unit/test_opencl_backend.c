/* The OpenCL backend through the public API (PoCL here and in CI): the
 * unavailable paths (no library, no platform), views at offsets that no
 * sub-buffer could take, the build log of a broken kernel with the user's
 * line, the program binary in the kernel cache, device timestamps in
 * profiles, and streams as separate command queues.
 *
 * Each case is its own process (CTest), so the environment a case sets
 * before its first cube call is what the loader sees.
 */
// cube-test-libs: cube_static
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backends/backend.h"
#include "check.h"
#include "cube/cube.h"

/* PoCL and LLVM keep allocations until exit; not ours to report. */
const char* __lsan_default_suppressions(void);
const char* __lsan_default_suppressions(void) {
  return "leak:libpocl\nleak:libOpenCL\nleak:libLLVM\nleak:libclang\nleak:libhwloc\n";
}

static const cube_device_id_t dev0 = {CUBE_BACKEND_OPENCL, 0};

#define OPENCL_CLIENT(var)                                                   \
  cube_client_t* var = NULL;                                                 \
  do {                                                                       \
    cube_status_t s_ = cube_client_load(dev0, &var);                         \
    if (cube_status_code(s_) == CUBE_STATUS_UNAVAILABLE) {                   \
      fprintf(stderr, "%s\n", cube_status_message(s_));                      \
      cube_status_free(s_);                                                  \
      CUBE_SKIP("no OpenCL device");                                         \
    }                                                                        \
    REQUIRE_OK(s_);                                                          \
  } while (0)

static const char* const k_saxpy =
    "CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a)\n"
    "{\n"
    "    uint32_t i = ABSOLUTE_POS;\n"
    "    if (i < CUBE_LEN(y)) CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "}\n";

static cube_kernel_t* make_kernel(const char* src, const char* entry, uint32_t dim) {
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.source = src;
  d.entry = entry;
  d.cube_dim = (cube_dim_t){dim, 1, 1};
  cube_kernel_t* k = NULL;
  cube_status_t s = cube_kernel_create(&d, &k);
  if (s) {
    fprintf(stderr, "cube_kernel_create(%s): %s\n", entry, cube_status_message(s));
    cube_status_free(s);
  }
  return k;
}

/* Skips the case when this library was built without the backend (its
 * headers were absent): there is nothing to be unavailable. Asked of the
 * registry, which loads no driver (the case sets the driver's path first). */
#define REQUIRE_BUILT_IN(backend)                                              \
  do {                                                                         \
    if (!cube__backend_get(backend))                                           \
      CUBE_SKIP("the backend is not built into this library");                \
  } while (0)

CUBE_TEST(unavailable_without_library) {
  REQUIRE_BUILT_IN(CUBE_BACKEND_OPENCL);
  setenv("CUBE_OPENCL_LIBRARY", "/nonexistent/libOpenCL.so.1", 1);
  cube_status_t s = cube_backend_status(CUBE_BACKEND_OPENCL);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_UNAVAILABLE);
  CHECK(s && strstr(cube_status_message(s), "/nonexistent/libOpenCL.so.1") != NULL);
  cube_status_free(s);
  CHECK_EQ_U64(cube_test_device_count(CUBE_BACKEND_OPENCL), 0);
  cube_client_t* c = NULL;
  CHECK_STATUS(cube_client_load(dev0, &c), CUBE_STATUS_UNAVAILABLE, "libOpenCL");
  CHECK(c == NULL);
  /* The CPU backend is not affected. */
  CHECK(cube_test_device_count(CUBE_BACKEND_CPU) >= 1);
  cube_shutdown();
}

CUBE_TEST(unavailable_without_platform) {
  REQUIRE_BUILT_IN(CUBE_BACKEND_OPENCL);
  char dir[] = "/tmp/cube-no-icd.XXXXXX";
  REQUIRE(mkdtemp(dir) != NULL);
  setenv("OCL_ICD_VENDORS", dir, 1); /* the ICD loader finds no driver there */
  cube_status_t s = cube_backend_status(CUBE_BACKEND_OPENCL);
  if (s == CUBE_OK) {
    rmdir(dir);
    CUBE_SKIP("this ICD loader ignores OCL_ICD_VENDORS");
  }
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_UNAVAILABLE);
  CHECK(s && (strstr(cube_status_message(s), "no OpenCL platform") != NULL ||
              strstr(cube_status_message(s), "cannot load") != NULL));
  cube_status_free(s);
  CHECK_EQ_U64(cube_test_device_count(CUBE_BACKEND_OPENCL), 0);
  cube_shutdown();
  rmdir(dir);
}

CUBE_TEST(properties_from_the_device) {
  OPENCL_CLIENT(c);
  const cube_device_properties_t* p = cube_client_properties(c);
  CHECK(strncmp(p->name, "opencl:0 (", 10) == 0);
  CHECK(p->memory.total_memory > 0);
  CHECK(p->memory.alignment >= 64 && (p->memory.alignment & (p->memory.alignment - 1)) == 0);
  CHECK(p->memory.max_page_size > 0 && p->memory.max_page_size % p->memory.alignment == 0);
  CHECK(p->hardware.max_units_per_cube >= 1);
  CHECK(p->hardware.max_shared_memory_size > 0);
  CHECK_EQ_U64(p->timing_method, CUBE_TIMING_DEVICE);
  CHECK(!(cube_client_features(c)->bits & CUBE_FEATURE_NATIVE_KERNELS));
  cube_client_release(c);
  cube_shutdown();
}

/* A view 4 bytes into its buffer (no device aligns a sub-buffer there): the
 * kernel gets the buffer plus the offset. */
CUBE_TEST(views_at_unaligned_offsets) {
  OPENCL_CLIENT(c);
  enum { N = 1000 };
  float x[N + 3], y[N + 5], want[N];
  for (int i = 0; i < N + 3; ++i) x[i] = (float)(i % 17);
  for (int i = 0; i < N + 5; ++i) y[i] = (float)(i % 5);
  for (int i = 0; i < N; ++i) want[i] = 2.0f * x[i + 1] + y[i + 3];
  cube_handle_t hx, hy, vx, vy;
  REQUIRE_OK(cube_client_create_from_slice(c, x, sizeof(x), &hx));
  REQUIRE_OK(cube_client_create_from_slice(c, y, sizeof(y), &hy));
  REQUIRE_OK(cube_handle_offset_view(hx, 4, 8, &vx));  /* x[1 .. N] */
  REQUIRE_OK(cube_handle_offset_view(hy, 12, 8, &vy)); /* y[3 .. N+2] */
  cube_kernel_t* k = make_kernel(k_saxpy, "saxpy", 64);
  REQUIRE(k != NULL);
  cube_arg_t a[3] = {cube_arg_buffer(vx), cube_arg_buffer(vy), cube_arg_f32(2.0f)};
  CHECK_OK(cube_client_launch(c, k, cube_count_static((N + 63) / 64, 1, 1), 3, a));
  cube_bytes_t* out = NULL;
  CHECK_OK(cube_client_read_one(c, vy, &out));
  CHECK(out && cube_bytes_size(out) == sizeof(want) &&
        memcmp(cube_bytes_const_data(out), want, sizeof(want)) == 0);
  cube_bytes_release(out);
  /* The bytes around the view are untouched. */
  CHECK_OK(cube_client_read_one(c, hy, &out));
  if (out) {
    const float* f = cube_bytes_const_data(out);
    CHECK(f[0] == y[0] && f[1] == y[1] && f[2] == y[2] && f[N + 3] == y[N + 3] &&
          f[N + 4] == y[N + 4]);
  }
  cube_bytes_release(out);
  cube_handle_release(vx);
  cube_handle_release(vy);
  cube_handle_release(hx);
  cube_handle_release(hy);
  cube_kernel_release(k);
  cube_client_release(c);
  cube_shutdown();
}

/* A build error is COMPILATION_FAILED with clBuildProgram's log, which names
 * the user's line. */
CUBE_TEST(build_error_returns_the_log) {
  OPENCL_CLIENT(c);
  static const char* const broken =
      "CUBE_KERNEL(broken, CUBE_ARRAY(float, y))\n"
      "{\n"
      "    y[0] = not_declared_anywhere;\n"
      "}\n";
  cube_kernel_t* k = make_kernel(broken, "broken", 1);
  REQUIRE(k != NULL);
  cube_status_t s = cube_client_precompile(c, 1, &k, CUBE_EXEC_CHECKED);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_COMPILATION_FAILED);
  const char* m = s ? cube_status_message(s) : "";
  CHECK(strstr(m, "broken.cube:3") != NULL);
  CHECK(strstr(m, "clBuildProgram") != NULL);
  if (!strstr(m, "broken.cube:3")) fprintf(stderr, "message: %s\n", m);
  cube_status_free(s);
  /* A launch compiles first (to learn the kernel's own limits) and returns
   * the same error itself; nothing is left for the stream. */
  cube_handle_t h;
  float zero = 0;
  REQUIRE_OK(cube_client_create_from_slice(c, &zero, sizeof(zero), &h));
  cube_arg_t a[1] = {cube_arg_buffer(h)};
  CHECK_STATUS(cube_client_launch(c, k, cube_count_static(1, 1, 1), 1, a),
               CUBE_STATUS_COMPILATION_FAILED, "cube_client_launch", "broken.cube:3");
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(h);
  cube_kernel_release(k);
  cube_client_release(c);
  cube_shutdown();
}

/* Validate mode on OpenCL: the bounds record names the argument and index. */
CUBE_TEST(validate_mode_reports_the_access) {
  OPENCL_CLIENT(c);
  static const char* const over =
      "CUBE_KERNEL(over, CUBE_ARRAY(float, y))\n"
      "{\n"
      "    CUBE_STORE(y, ABSOLUTE_POS + 3, 1.0f);\n"
      "}\n";
  cube_kernel_t* k = make_kernel(over, "over", 8);
  REQUIRE(k != NULL);
  float ys[8] = {0};
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, ys, sizeof(ys), &h));
  cube_arg_t a[1] = {cube_arg_buffer(h)};
  CHECK_OK(cube_client_launch_mode(c, k, cube_count_static(1, 1, 1), 1, a, CUBE_EXEC_VALIDATE));
  CHECK_STATUS(cube_client_sync(c), CUBE_STATUS_LAUNCH_FAILED, "out-of-bounds write",
               "argument 0 ('y'");
  /* y holds no valid contents after the failure, until written whole. */
  CHECK_OK(cube_client_write(c, h, ys, sizeof(ys)));
  /* Checked mode drops the same writes. */
  CHECK_OK(cube_client_launch_mode(c, k, cube_count_static(1, 1, 1), 1, a, CUBE_EXEC_CHECKED));
  float want[8] = {0, 0, 0, 1, 1, 1, 1, 1};
  cube_bytes_t* out = NULL;
  CHECK_OK(cube_client_read_one(c, h, &out));
  CHECK(out && memcmp(cube_bytes_const_data(out), want, sizeof(want)) == 0);
  cube_bytes_release(out);
  cube_handle_release(h);
  cube_kernel_release(k);
  cube_client_release(c);
  cube_shutdown();
}

/* Profiling takes the kernel's time from OpenCL event timestamps. */
static cube_status_t run_saxpy(void* user) {
  void** p = user;
  cube_client_t* c = p[0];
  cube_kernel_t* k = p[1];
  cube_arg_t* a = p[2];
  return cube_client_launch(c, k, cube_count_static(64, 1, 1), 3, a);
}

CUBE_TEST(profile_uses_device_timestamps) {
  OPENCL_CLIENT(c);
  enum { N = 64 * 64 };
  static float x[N], y[N];
  cube_handle_t hx, hy;
  REQUIRE_OK(cube_client_create_from_slice(c, x, sizeof(x), &hx));
  REQUIRE_OK(cube_client_create_from_slice(c, y, sizeof(y), &hy));
  cube_kernel_t* k = make_kernel(k_saxpy, "saxpy", 64);
  REQUIRE(k != NULL);
  cube_arg_t a[3] = {cube_arg_buffer(hx), cube_arg_buffer(hy), cube_arg_f32(1.0f)};
  void* p[3] = {c, k, a};
  cube_profile_duration_t d;
  CHECK_OK(cube_client_profile(c, run_saxpy, p, "saxpy", &d));
  CHECK(d.end_ns >= d.start_ns);
  CHECK_EQ_U64(d.method, CUBE_TIMING_DEVICE);
  cube_handle_release(hx);
  cube_handle_release(hy);
  cube_kernel_release(k);
  cube_client_release(c);
  cube_shutdown();
}
