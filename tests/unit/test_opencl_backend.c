/* The OpenCL backend through the public API (PoCL here and in CI): the
 * unavailable paths (no library, no platform), views at offsets that no
 * sub-buffer could take, the build log of a broken kernel with the user's
 * line, the program binary in the kernel cache, device timestamps in
 * profiles, streams as separate command queues ordered by the event slots,
 * and writes that do not wait.
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

//===----------------------------------------------------------------------===//
// The backend's table driven directly: events and writes that do not wait
//===----------------------------------------------------------------------===//

/* Device 0 and two streams (two command queues) of the OpenCL table. */
typedef struct ocl_fixture {
  const cube__backend_vtable_t* vt;
  cube__backend_device_t* dev;
  void* a;
  void* b;
} ocl_fixture_t;

#define OCL_FIXTURE(f)                                                        \
  ocl_fixture_t f;                                                            \
  do {                                                                        \
    memset(&f, 0, sizeof(f));                                                 \
    f.vt = cube__backend_get(CUBE_BACKEND_OPENCL);                            \
    if (!f.vt) CUBE_SKIP("the backend is not built into this library");      \
    cube_status_t s_ = f.vt->availability();                                  \
    if (s_) {                                                                 \
      fprintf(stderr, "%s\n", cube_status_message(s_));                       \
      cube_status_free(s_);                                                   \
      CUBE_SKIP("no OpenCL device");                                          \
    }                                                                         \
    cube_device_properties_t p_;                                              \
    cube_features_t feat_;                                                    \
    cube_backend_info_t info_;                                                \
    REQUIRE_OK(f.vt->device_create(0, NULL, &f.dev, &p_, &feat_, &info_));    \
    REQUIRE_OK(f.vt->stream_create(f.dev, 1, &f.a));                          \
    REQUIRE_OK(f.vt->stream_create(f.dev, 2, &f.b));                          \
  } while (0)

static void ocl_fixture_close(ocl_fixture_t* f) {
  f->vt->stream_destroy(f->dev, f->a);
  f->vt->stream_destroy(f->dev, f->b);
  f->vt->device_destroy(f->dev);
}

/* The event slots are all there, and order two queues: a write and a copy
 * queued on stream A (neither waits), an event recorded after them, stream B
 * made to wait for it and B's blocking read of the copy's destination sees
 * the write. Random data each round; without the wait, B's read races A's
 * work (PoCL runs the two queues on its worker threads). */
CUBE_TEST(events_order_two_queues) {
  OCL_FIXTURE(f);
  CHECK(f.vt->event_record && f.vt->event_wait && f.vt->event_done && f.vt->event_sync &&
        f.vt->event_destroy);
  enum { ROUNDS = 200, BYTES = 200 * 1024 + 12 }; /* under CUBE__OCL_WRITE_COPY_MAX */
  cube__storage_t x, y;
  REQUIRE_OK(f.vt->alloc(f.dev, BYTES, &x));
  REQUIRE_OK(f.vt->alloc(f.dev, BYTES, &y));
  unsigned char* want = malloc(BYTES);
  unsigned char* got = malloc(BYTES);
  REQUIRE(want && got);
  int bad = 0;
  for (int r = 0; r < ROUNDS && !bad; ++r) {
    cube_test_fill_random(want, BYTES, 7100 + (uint64_t)r);
    /* The source is freed (and its memory poisoned) at once. */
    unsigned char* src = malloc(BYTES);
    REQUIRE(src);
    memcpy(src, want, BYTES);
    CHECK_OK(f.vt->write(f.dev, f.a, &x, 0, BYTES, src, BYTES, 1));
    memset(src, 0xA5, BYTES);
    free(src);
    CHECK_OK(f.vt->copy(f.dev, f.a, &y, 0, &x, 0, BYTES));
    void* ev = NULL;
    CHECK_OK(f.vt->event_record(f.dev, f.a, &ev));
    REQUIRE(ev != NULL);
    CHECK_OK(f.vt->event_wait(f.dev, f.b, ev));
    memset(got, 0x5A, BYTES);
    CHECK_OK(f.vt->read(f.dev, f.b, got, &y, 0, BYTES, BYTES, 1));
    if (memcmp(got, want, BYTES) != 0) {
      fprintf(stderr, "round %d: stream B read before stream A's write and copy\n", r);
      bad = 1;
    }
    /* B's read waited for the event: it has completed. */
    CHECK(f.vt->event_done(f.dev, ev));
    CHECK_OK(f.vt->event_sync(f.dev, ev));
    f.vt->event_destroy(f.dev, ev);
  }
  CHECK(!bad);
  CHECK_OK(f.vt->sync(f.dev, f.a));
  CHECK_OK(f.vt->sync(f.dev, f.b));
  f.vt->dealloc(f.dev, &x);
  f.vt->dealloc(f.dev, &y);
  free(want);
  free(got);
  ocl_fixture_close(&f);
}

/* Many small writes (rows, pitched rows, odd sizes) that do not wait, each
 * from a source freed and poisoned right after the call: every one lands
 * (the backend keeps its own copy until the write completed). Then a write
 * larger than the copy limit (a blocking one) over part of them. */
CUBE_TEST(writes_from_released_sources_land) {
  OCL_FIXTURE(f);
  enum { COUNT = 300, ROW = 37, ROWS = 5, PITCH = 64, PART = COUNT * ROWS * PITCH };
  enum { BIG = 300 * 1024, BIG_AT = PART - 4000, BYTES = BIG_AT + BIG }; /* BIG over the limit */
  cube__storage_t x;
  REQUIRE_OK(f.vt->alloc(f.dev, BYTES, &x));
  unsigned char* want = malloc(BYTES);
  unsigned char* got = malloc(BYTES);
  REQUIRE(want && got);
  memset(want, 0, BYTES);
  unsigned char zero[PITCH] = {0};
  for (uint64_t at = 0; at < BYTES; at += PITCH) {
    uint64_t n = BYTES - at < PITCH ? BYTES - at : PITCH;
    CHECK_OK(f.vt->write(f.dev, f.a, &x, at, n, zero, n, 1));
  }
  for (int i = 0; i < COUNT; ++i) {
    uint64_t base = (uint64_t)i * ROWS * PITCH;
    unsigned char* src = malloc(ROW * ROWS);
    REQUIRE(src);
    cube_test_fill_random(src, ROW * ROWS, 7300 + (uint64_t)i);
    if (i % 2) { /* pitched rows */
      for (int r = 0; r < ROWS; ++r) memcpy(want + base + (uint64_t)r * PITCH, src + r * ROW, ROW);
      CHECK_OK(f.vt->write(f.dev, f.a, &x, base, PITCH, src, ROW, ROWS));
    } else { /* one row */
      memcpy(want + base, src, ROW * ROWS);
      CHECK_OK(f.vt->write(f.dev, f.a, &x, base, ROW * ROWS, src, ROW * ROWS, 1));
    }
    memset(src, 0xC3, ROW * ROWS);
    free(src);
  }
  /* Larger than the copy limit: written blocking, ordered after the rest
   * (its first 4000 bytes over the last small writes). */
  unsigned char* big = malloc(BIG);
  REQUIRE(big);
  cube_test_fill_random(big, BIG, 7399);
  memcpy(want + BIG_AT, big, BIG);
  CHECK_OK(f.vt->write(f.dev, f.a, &x, BIG_AT, BIG, big, BIG, 1));
  free(big);
  CHECK_OK(f.vt->sync(f.dev, f.a));
  memset(got, 0x5A, BYTES);
  CHECK_OK(f.vt->read(f.dev, f.a, got, &x, 0, BYTES, BYTES, 1));
  CHECK(memcmp(got, want, BYTES) == 0);
  f.vt->dealloc(f.dev, &x);
  free(want);
  free(got);
  ocl_fixture_close(&f);
}
