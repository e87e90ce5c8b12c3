// cube-test-libs: cube_static
/* What a launch refuses at once, not at a later sync (docs/errors.md,
 * "Launch limits"): a buffer smaller than one element of its CUBE_ARRAY's
 * type; a native kernel's cube-local memory beyond the device's; and the
 * limits only the compiled kernel knows: CUDA's threads per block of the
 * function (over the mock driver, which takes a smaller limit from
 * CUBE_MOCK_CUDA_FUNC_MAX_THREADS), OpenCL's local memory of the kernel
 * (PoCL aborted the process in clEnqueueNDRangeKernel before). In every case
 * the stream has no deferred error afterwards and the client still works. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "cube/cube.h"
#include "read_check.h"

/* NVRTC and PoCL (with its LLVM) keep allocations until exit; not ours to
 * report. */
const char* __lsan_default_suppressions(void);
const char* __lsan_default_suppressions(void) {
  return "leak:libnvrtc\nleak:libpocl\nleak:libOpenCL\nleak:libLLVM\nleak:libclang\nleak:libhwloc\n";
}


static const cube_device_id_t cpu0 = {CUBE_BACKEND_CPU, 0};

/* y[i] = x[i] * 2 + z[i] for the elements all three have; w is a struct
 * array (its element size is the source's business: not checked). */
static const char* k_mixed_src =
    "typedef struct { float a, b, c; } triple_t;\n"
    "CUBE_KERNEL(mixed, CUBE_ARRAY(float, y), CUBE_ARRAY(const double, x),\n"
    "            CUBE_ARRAY(const REAL, z), CUBE_ARRAY(triple_t, w)) {\n"
    "  uint32_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(y) && i < CUBE_LEN(x) && i < CUBE_LEN(z))\n"
    "    y[i] = (float)(x[i] * 2.0) + (float)z[i];\n"
    "  if (i == 0 && CUBE_LEN(w) > 0) w[0].a = 1.0f;\n"
    "}\n";

static cube_kernel_t* mixed_kernel(void) {
  cube_define_t defs[1] = {{"REAL", "uint16_t"}};
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.source = k_mixed_src;
  d.entry = "mixed";
  d.cube_dim = (cube_dim_t){16, 1, 1};
  d.defines = defs;
  d.define_count = 1;
  cube_kernel_t* k = NULL;
  cube_status_t s = cube_kernel_create(&d, &k);
  if (s) {
    fprintf(stderr, "%s\n", cube_status_message(s));
    cube_status_free(s);
  }
  return k;
}

/* A handle viewing |n| bytes (a view into a larger buffer when |offset|). */
static cube_handle_t bytes_handle(cube_client_t* c, size_t n, bool offset, cube_handle_t* base) {
  cube_handle_t h = CUBE_HANDLE_NULL;
  *base = CUBE_HANDLE_NULL;
  if (!offset) {
    if (cube_status_consume(cube_client_empty(c, n, &h))) return CUBE_HANDLE_NULL;
    return h;
  }
  if (cube_status_consume(cube_client_empty(c, n + 100, base))) return CUBE_HANDLE_NULL;
  if (cube_status_consume(cube_handle_offset_view(*base, 37, 63, &h))) return CUBE_HANDLE_NULL;
  return h;
}

CUBE_TEST(buffer_smaller_than_one_element_is_refused_at_launch) {
  uint64_t seed = (uint64_t)time(NULL);
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cpu0, &c));
  cube_kernel_t* k = mixed_kernel();
  REQUIRE(k != NULL);
  enum { N = 16 };
  float ys[N];
  double xs[N];
  uint16_t zs[N];
  for (int i = 0; i < N; ++i) {
    xs[i] = (double)(cube_test_rand(&seed) % 1000) / 8.0;
    zs[i] = (uint16_t)(cube_test_rand(&seed) % 5000);
    ys[i] = -1.0f;
  }
  cube_handle_t y, x, z, w;
  REQUIRE_OK(cube_client_create_from_slice(c, ys, sizeof(ys), &y));
  REQUIRE_OK(cube_client_create_from_slice(c, xs, sizeof(xs), &x));
  REQUIRE_OK(cube_client_create_from_slice(c, zs, sizeof(zs), &z));
  REQUIRE_OK(cube_client_empty(c, 12, &w));
  const char* names[3] = {"'y', CUBE_ARRAY(float)", "'x', CUBE_ARRAY(const double)",
                          "'z', CUBE_ARRAY(const REAL)"};
  const uint32_t sizes[3] = {4, 8, 2};
  for (int arg = 0; arg < 3; ++arg) {
    for (int offset = 0; offset < 2; ++offset) {
      size_t n = 1 + (size_t)(cube_test_rand(&seed) % (sizes[arg] - 1)); /* 1 .. size - 1 */
      cube_handle_t base, small = bytes_handle(c, n, offset, &base);
      REQUIRE(!cube_handle_is_null(small));
      CHECK_EQ_U64(cube_handle_size(small), n);
      cube_arg_t a[4] = {cube_arg_buffer(y), cube_arg_buffer(x), cube_arg_buffer(z),
                         cube_arg_buffer(w)};
      a[arg] = cube_arg_buffer(small);
      char views[48], elem[48], argn[24];
      snprintf(views, sizeof(views), "views %zu byte%s", n, n == 1 ? "" : "s");
      snprintf(elem, sizeof(elem), "one element of %u bytes", sizes[arg]);
      snprintf(argn, sizeof(argn), "argument %d", arg);
      CHECK_STATUS(cube_client_launch(c, k, cube_count_static(1, 1, 1), 4, a),
                   CUBE_STATUS_INVALID_ARGUMENT, "cube_client_launch", "kernel 'mixed'", argn,
                   names[arg], views, elem);
      cube_handle_release(small);
      if (!cube_handle_is_null(base)) cube_handle_release(base);
    }
  }
  /* Nothing was queued: no deferred error, and y is as it was. */
  CHECK_OK(cube_client_sync(c));
  CHECK(cube_test_read_equals(c, y, ys, sizeof(ys)));

  /* One element each is enough; a struct array of 1 byte is the source's
   * business (not checked); the results are the kernel's. */
  cube_handle_t y1, x1, z1, w1;
  REQUIRE_OK(cube_client_create_from_slice(c, ys, 4, &y1));
  REQUIRE_OK(cube_client_create_from_slice(c, xs, 8, &x1));
  REQUIRE_OK(cube_client_create_from_slice(c, zs, 2, &z1));
  REQUIRE_OK(cube_client_empty(c, 1, &w1));
  cube_arg_t one[4] = {cube_arg_buffer(y1), cube_arg_buffer(x1), cube_arg_buffer(z1),
                       cube_arg_buffer(w1)};
  CHECK_OK(cube_client_launch(c, k, cube_count_static(1, 1, 1), 4, one));
  float want1 = (float)(xs[0] * 2.0) + (float)zs[0];
  CHECK(cube_test_read_equals(c, y1, &want1, sizeof(want1)));
  cube_arg_t all[4] = {cube_arg_buffer(y), cube_arg_buffer(x), cube_arg_buffer(z),
                       cube_arg_buffer(w)};
  CHECK_OK(cube_client_launch(c, k, cube_count_static(1, 1, 1), 4, all));
  float want[N];
  for (int i = 0; i < N; ++i) want[i] = (float)(xs[i] * 2.0) + (float)zs[i];
  CHECK(cube_test_read_equals(c, y, want, sizeof(want)));
  cube_handle_release(y1);
  cube_handle_release(x1);
  cube_handle_release(z1);
  cube_handle_release(w1);
  cube_handle_release(y);
  cube_handle_release(x);
  cube_handle_release(z);
  cube_handle_release(w);
  cube_kernel_release(k);
  CHECK_OK(cube_client_sync(c));
  cube_client_release(c);
  cube_shutdown();
}

static int native_noop(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube;
  (void)args;
  (void)n;
  return 0;
}

CUBE_TEST(native_shared_memory_beyond_device_is_refused_at_launch) {
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cpu0, &c));
  uint64_t max = cube_client_properties(c)->hardware.max_shared_memory_size;
  REQUIRE(max > 0);
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = "big_scratch";
  d.cpu_fn = native_noop;
  d.shared_memory_size = max + 1 + (uint64_t)(time(NULL) % 4096);
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cube_kernel_create(&d, &k));
  char want[64];
  snprintf(want, sizeof(want), "shared_memory_size %llu", (unsigned long long)d.shared_memory_size);
  CHECK_STATUS(cube_client_launch(c, k, cube_count_static(2, 1, 1), 0, NULL),
               CUBE_STATUS_OUT_OF_RANGE, "cube_client_launch", "kernel 'big_scratch'", want,
               "cpu:0");
  CHECK_OK(cube_client_sync(c)); /* nothing deferred */
  cube_kernel_release(k);
  d.shared_memory_size = max; /* exactly the device's: runs */
  REQUIRE_OK(cube_kernel_create(&d, &k));
  CHECK_OK(cube_client_launch(c, k, cube_count_static(2, 1, 1), 0, NULL));
  CHECK_OK(cube_client_sync(c));
  cube_kernel_release(k);
  cube_client_release(c);
  cube_shutdown();
}

static const char* k_fill_src =
    "CUBE_KERNEL(fill, CUBE_ARRAY(float, y)) {\n"
    "  CUBE_SHARED(float, t, SH);\n"
    "  t[UNIT_POS % SH] = 1.0f;\n"
    "  sync_cube();\n"
    "  uint32_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(y)) y[i] = t[0] - 1.0f + (float)i;\n"
    "}\n";

static cube_kernel_t* fill_kernel(cube_dim_t dim, const char* sh) {
  cube_define_t defs[1] = {{"SH", sh}};
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.source = k_fill_src;
  d.entry = "fill";
  d.cube_dim = dim;
  d.defines = defs;
  d.define_count = 1;
  cube_kernel_t* k = NULL;
  cube_status_t s = cube_kernel_create(&d, &k);
  cube_status_free(s);
  return k;
}

/* CUDA: the function allows 256 threads (the mock's stand-in for register
 * pressure) where the device allows 1024: 512 is refused by the launch. */
CUBE_TEST(cuda_function_thread_limit_is_refused_at_launch) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  setenv("CUBE_CUDA_DRIVER", CUBE_MOCK_CUDA_PATH, 1);
  setenv("CUBE_MOCK_CUDA_DELAY_US", "0", 1);
  setenv("CUBE_MOCK_CUDA_LAUNCH_OK", "1", 1); /* launches run nothing, successfully */
  setenv("CUBE_MOCK_CUDA_FUNC_MAX_THREADS", "256", 1);
  cube_client_t* c = NULL;
  cube_device_id_t cu0 = {CUBE_BACKEND_CUDA, 0};
  REQUIRE_OK(cube_client_load(cu0, &c));
  REQUIRE(cube_client_properties(c)->hardware.max_units_per_cube >= 512);
  cube_kernel_t* big = fill_kernel((cube_dim_t){512, 1, 1}, "16");
  cube_kernel_t* ok = fill_kernel((cube_dim_t){256, 1, 1}, "16");
  REQUIRE(big && ok);
  cube_handle_t y;
  REQUIRE_OK(cube_client_empty(c, 4096, &y));
  cube_arg_t a[1] = {cube_arg_buffer(y)};
  cube_status_t s = cube_client_launch(c, ok, cube_count_static(1, 1, 1), 1, a);
  if (cube_status_code(s) == CUBE_STATUS_UNAVAILABLE) {
    fprintf(stderr, "%s\n", cube_status_message(s));
    cube_status_free(s);
    cube_handle_release(y);
    cube_kernel_release(big);
    cube_kernel_release(ok);
    cube_client_release(c);
    cube_shutdown();
    CUBE_SKIP("no NVRTC");
  }
  CHECK_OK(s);
  CHECK_STATUS(cube_client_launch(c, big, cube_count_static(1, 1, 1), 1, a),
               CUBE_STATUS_OUT_OF_RANGE, "cube_client_launch", "kernel 'fill'",
               "(512, 1, 1) = 512 units", "256 units this kernel runs", "cuda:0");
  CHECK_OK(cube_client_sync(c)); /* nothing deferred */
  cube_handle_release(y);
  cube_kernel_release(big);
  cube_kernel_release(ok);
  cube_client_release(c);
  cube_shutdown();
#endif
}

/* The limits a launch learned are remembered per device: a kernel whose
 * function allows 1024 threads on cuda:0 and 256 on cuda:1 launches 512 on
 * the first, again and again, and is refused on the second every time. */
CUBE_TEST(cuda_compiled_limits_are_remembered_per_device) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  setenv("CUBE_CUDA_DRIVER", CUBE_MOCK_CUDA_PATH, 1);
  setenv("CUBE_MOCK_CUDA_DEVICES", "2", 1);
  setenv("CUBE_MOCK_CUDA_DELAY_US", "0", 1);
  setenv("CUBE_MOCK_CUDA_LAUNCH_OK", "1", 1);
  setenv("CUBE_MOCK_CUDA_FUNC_MAX_THREADS", "1024", 1);
  /* The mock counts its devices once per process: an earlier case of this
   * process (a run of every case) may have loaded it with one. */
  if (cube_test_device_count(CUBE_BACKEND_CUDA) < 2) {
    cube_shutdown();
    CUBE_SKIP("the mock driver has fewer than 2 devices in this process");
  }
  cube_client_t* c0 = NULL;
  cube_client_t* c1 = NULL;
  REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CUDA, 0}, &c0));
  REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CUDA, 1}, &c1));
  cube_kernel_t* big = fill_kernel((cube_dim_t){512, 1, 1}, "16");
  REQUIRE(big);
  cube_handle_t y0, y1;
  REQUIRE_OK(cube_client_empty(c0, 4096, &y0));
  REQUIRE_OK(cube_client_empty(c1, 4096, &y1));
  cube_arg_t a0[1] = {cube_arg_buffer(y0)};
  cube_arg_t a1[1] = {cube_arg_buffer(y1)};
  cube_status_t s = cube_client_launch(c0, big, cube_count_static(1, 1, 1), 1, a0);
  bool no_nvrtc = cube_status_code(s) == CUBE_STATUS_UNAVAILABLE;
  if (!no_nvrtc) {
    CHECK_OK(s);
    /* cuda:1 compiles its own function, which allows 256. */
    setenv("CUBE_MOCK_CUDA_FUNC_MAX_THREADS", "256", 1);
    for (int round = 0; round < 3; ++round) {
      CHECK_STATUS(cube_client_launch(c1, big, cube_count_static(1, 1, 1), 1, a1),
                   CUBE_STATUS_OUT_OF_RANGE, "cube_client_launch", "256 units this kernel runs",
                   "cuda:1");
      CHECK_OK(cube_client_launch(c0, big, cube_count_static(1, 1, 1), 1, a0));
    }
    CHECK_OK(cube_client_sync(c0));
    CHECK_OK(cube_client_sync(c1));
  } else {
    cube_status_free(s);
  }
  cube_handle_release(y0);
  cube_handle_release(y1);
  cube_kernel_release(big);
  cube_client_release(c0);
  cube_client_release(c1);
  cube_shutdown();
  if (no_nvrtc) CUBE_SKIP("no NVRTC");
#endif
}

static cube_client_t* opencl_client(void) {
  cube_status_t s = cube_backend_status(CUBE_BACKEND_OPENCL);
  if (s || cube_test_device_count(CUBE_BACKEND_OPENCL) == 0) {
    cube_status_free(s);
    return NULL;
  }
  cube_device_id_t cl0 = {CUBE_BACKEND_OPENCL, 0};
  cube_client_t* c = NULL;
  if (cube_status_consume(cube_client_load(cl0, &c))) return NULL;
  return c;
}

/* OpenCL: a kernel whose CUBE_SHARED arrays exceed the device's local memory
 * is refused by the launch; PoCL aborted the process in
 * clEnqueueNDRangeKernel before. */
CUBE_TEST(opencl_local_memory_beyond_device_is_refused_at_launch) {
  cube_client_t* c = opencl_client();
  if (!c) CUBE_SKIP("no OpenCL device");
  uint64_t local = cube_client_properties(c)->hardware.max_shared_memory_size;
  REQUIRE(local > 0);
  char sh[32];
  uint64_t floats = local / 4 + 1 + (uint64_t)(time(NULL) % 64); /* just past the device's */
  snprintf(sh, sizeof(sh), "%llu", (unsigned long long)floats);
  cube_kernel_t* big = fill_kernel((cube_dim_t){64, 1, 1}, sh);
  cube_kernel_t* ok = fill_kernel((cube_dim_t){64, 1, 1}, "64");
  REQUIRE(big && ok);
  cube_handle_t y;
  REQUIRE_OK(cube_client_empty(c, 256 * 4, &y));
  cube_arg_t a[1] = {cube_arg_buffer(y)};
  CHECK_STATUS(cube_client_launch(c, big, cube_count_static(4, 1, 1), 1, a),
               CUBE_STATUS_OUT_OF_RANGE, "cube_client_launch", "kernel 'fill'",
               "of cube-local memory", "opencl:0");
  CHECK_OK(cube_client_sync(c)); /* nothing deferred, and the process is alive */
  CHECK_OK(cube_client_launch(c, ok, cube_count_static(4, 1, 1), 1, a));
  float want[256];
  for (int i = 0; i < 256; ++i) want[i] = (float)i;
  CHECK(cube_test_read_equals(c, y, want, sizeof(want)));
  cube_handle_release(y);
  cube_kernel_release(big);
  cube_kernel_release(ok);
  cube_client_release(c);
  cube_shutdown();
}

/* OpenCL compiles at the launch (to learn the kernel's limits): a build
 * error is the launch's own status, not the stream's later. */
CUBE_TEST(opencl_build_error_is_the_launch_status) {
  cube_client_t* c = opencl_client();
  if (!c) CUBE_SKIP("no OpenCL device");
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.source = "CUBE_KERNEL(bad, CUBE_ARRAY(float, y)) {\n  y[0] = nothing_here;\n}\n";
  d.entry = "bad";
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cube_kernel_create(&d, &k));
  cube_handle_t y;
  REQUIRE_OK(cube_client_empty(c, 64, &y));
  cube_arg_t a[1] = {cube_arg_buffer(y)};
  CHECK_STATUS(cube_client_launch(c, k, cube_count_static(1, 1, 1), 1, a),
               CUBE_STATUS_COMPILATION_FAILED, "cube_client_launch", "bad.cube:2:10:",
               "nothing_here");
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(y);
  cube_kernel_release(k);
  cube_client_release(c);
  cube_shutdown();
}
