/* The OpenCL backend through the public API (PoCL here and in CI): the
 * unavailable paths (no library, no platform), views at offsets that no
 * sub-buffer could take, the build log of a broken kernel with the user's
 * line, the program binary in the kernel cache, device timestamps in
 * profiles, streams as separate command queues ordered by the event slots,
 * writes that do not wait (copied small ones, and held ones of any size:
 * the write_held slot), a write the driver fails, and event_elapsed.
 *
 * Each case is its own process (CTest), so the environment a case sets
 * before its first cube call is what the loader sees.
 */
// cube-test-libs: cube_static
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backends/backend.h"
#include "check.h"
#include "cube/cube.h"
#include "platform/platform.h"
#include "kernel/kernel.h"
#ifdef CUBE_HAVE_OPENCL
#include "backends/opencl/opencl_backend_internal.h"
#endif

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

//===----------------------------------------------------------------------===//
// Writes from held bytes (the write_held slot): no copy, no wait
//===----------------------------------------------------------------------===//

/* A source that the caller hands over as OTHER bytes: on its release the
 * memory is poisoned and freed, so a driver still reading it would read
 * garbage (and ASan would see the use after free). */
static atomic_int held_released;
static void held_poison_release(void* user, void* data, size_t size) {
  (void)user;
  memset(data, 0xEE, size);
  free(data);
  atomic_fetch_add(&held_released, 1);
}

/* |n| bytes of |want| as OTHER bytes that poison themselves on release. */
static cube_bytes_t* held_source(const void* want, size_t n) {
  void* mem = malloc(n);
  if (!mem) return NULL;
  memcpy(mem, want, n);
  cube_bytes_t* b = NULL;
  cube_status_t s = cube_bytes_wrap(mem, n, held_poison_release, NULL, &b);
  if (s) {
    cube_status_free(s);
    free(mem);
    return NULL;
  }
  return b;
}

#ifdef CUBE_HAVE_OPENCL
/* The library's user events (clCreateUserEvent, clSetUserEventStatus):
 * false when it has none. */
typedef struct user_events {
  void* lib;
  __typeof__(&clCreateUserEvent) create;
  __typeof__(&clSetUserEventStatus) set;
} user_events_t;
static bool user_events_open(user_events_t* u) {
  memset(u, 0, sizeof(*u));
  u->lib = dlopen(cube__ocl_library_name(), RTLD_NOW | RTLD_NOLOAD);
  if (!u->lib) return false;
  u->create = (__typeof__(&clCreateUserEvent))dlsym(u->lib, "clCreateUserEvent");
  u->set = (__typeof__(&clSetUserEventStatus))dlsym(u->lib, "clSetUserEventStatus");
  return u->create && u->set;
}
static void user_events_close(user_events_t* u) {
  if (u->lib) dlclose(u->lib);
}

/* Opens |u| for the test, or skips it (closing |f|) where the library has
 * no user events. */
#define USER_EVENTS_OR_SKIP(f, u)                                   \
  do {                                                              \
    if (!user_events_open(&(u))) {                                  \
      user_events_close(&(u));                                      \
      ocl_fixture_close(&(f));                                      \
      CUBE_SKIP("the OpenCL library has no user events");           \
    }                                                               \
  } while (0)
#endif

/* Large writes (several MiB, odd sizes, random) through write_held, each
 * source released by the caller right after the call: they land, in order
 * with a blocking write (the write slot, over the copy limit) and a small
 * copied one between them, and with a rect write (pitch > width) of 4.6 MiB.
 * Stream A first waits for a user event set only after the first write
 * returned: that write cannot have run, so its source must still be held
 * (not released, not copied away: the caller's release poisons it). Every
 * held source is released exactly once, by the time of the sync. */
CUBE_TEST(held_large_writes_land) {
#ifndef CUBE_HAVE_OPENCL
  CUBE_SKIP("the backend is not built into this library");
#else
  OCL_FIXTURE(f);
  REQUIRE(f.vt->write_held != NULL);
  user_events_t u;
  USER_EVENTS_OR_SKIP(f, u);
  cl_int err = CL_SUCCESS;
  cl_event gate = u.create(f.dev->ctx, &err);
  REQUIRE(gate && err == CL_SUCCESS);
  CHECK_OK(f.vt->event_wait(f.dev, f.a, gate));
  enum { BYTES = (5 << 20) + 4099, ROW = 3001, ROWS = 1601, PITCH = 3072 };
  enum { RECT = PITCH * (ROWS - 1) + ROW };
  cube__storage_t x, y;
  REQUIRE_OK(f.vt->alloc(f.dev, BYTES, &x));
  REQUIRE_OK(f.vt->alloc(f.dev, RECT, &y));
  unsigned char* want = malloc(BYTES);
  unsigned char* want_y = malloc(RECT);
  unsigned char* part = malloc(BYTES);
  unsigned char* got = malloc(BYTES);
  REQUIRE(want && want_y && part && got);
  atomic_store(&held_released, 0);
  int held = 0;
  /* 1: the whole of x, held. */
  cube_test_fill_random(want, BYTES, 8101);
  cube_bytes_t* b = held_source(want, BYTES);
  REQUIRE(b);
  CHECK_OK(f.vt->write_held(f.dev, f.a, &x, 0, BYTES, cube_bytes_const_data(b), BYTES, 1, b));
  cube_bytes_release(b);
  held++;
  CHECK_EQ_U64((uint64_t)atomic_load(&held_released), 0); /* held while the gate is shut */
  CHECK(u.set(gate, CL_COMPLETE) == CL_SUCCESS);
  /* 2: 1 MiB + 7 at an odd offset, blocking (the write slot, over the copy
   * limit), from a source freed at once. */
  enum { MID = (1 << 20) + 7, MID_AT = 123457 };
  unsigned char* src = malloc(MID);
  REQUIRE(src);
  cube_test_fill_random(src, MID, 8102);
  memcpy(want + MID_AT, src, MID);
  CHECK_OK(f.vt->write(f.dev, f.a, &x, MID_AT, MID, src, MID, 1));
  memset(src, 0xC3, MID);
  free(src);
  /* 3: a small copied write inside the blocking one's range. */
  unsigned char small[333];
  cube_test_fill_random(small, sizeof(small), 8103);
  memcpy(want + MID_AT + 1000, small, sizeof(small));
  CHECK_OK(f.vt->write(f.dev, f.a, &x, MID_AT + 1000, sizeof(small), small, sizeof(small), 1));
  memset(small, 0x3C, sizeof(small));
  /* 4: 3 MiB + 1 held, over the end of the blocking one (ordered after it). */
  enum { TAIL = (3 << 20) + 1, TAIL_AT = BYTES - TAIL };
  cube_test_fill_random(part, TAIL, 8104);
  memcpy(want + TAIL_AT, part, TAIL);
  b = held_source(part, TAIL);
  REQUIRE(b);
  CHECK_OK(f.vt->write_held(f.dev, f.a, &x, TAIL_AT, TAIL, cube_bytes_const_data(b), TAIL, 1, b));
  cube_bytes_release(b);
  held++;
  /* 5: rect, held, on stream B: rows of ROW bytes PITCH apart; the gaps keep
   * what a first (held) write put there. */
  cube_test_fill_random(want_y, RECT, 8105);
  b = held_source(want_y, RECT);
  REQUIRE(b);
  CHECK_OK(f.vt->write_held(f.dev, f.b, &y, 0, RECT, cube_bytes_const_data(b), RECT, 1, b));
  cube_bytes_release(b);
  held++;
  unsigned char* rows = malloc((size_t)ROW * ROWS);
  REQUIRE(rows);
  cube_test_fill_random(rows, (size_t)ROW * ROWS, 8106);
  for (int r = 0; r < ROWS; ++r)
    memcpy(want_y + (size_t)r * PITCH, rows + (size_t)r * ROW, ROW);
  b = held_source(rows, (size_t)ROW * ROWS);
  free(rows);
  REQUIRE(b);
  CHECK_OK(f.vt->write_held(f.dev, f.b, &y, 0, PITCH, cube_bytes_const_data(b), ROW, ROWS, b));
  cube_bytes_release(b);
  held++;
  CHECK_OK(f.vt->sync(f.dev, f.a));
  CHECK_OK(f.vt->sync(f.dev, f.b));
  CHECK_EQ_U64((uint64_t)atomic_load(&held_released), (uint64_t)held);
  memset(got, 0x5A, BYTES);
  CHECK_OK(f.vt->read(f.dev, f.a, got, &x, 0, BYTES, BYTES, 1));
  CHECK(memcmp(got, want, BYTES) == 0);
  memset(got, 0x5A, RECT);
  CHECK_OK(f.vt->read(f.dev, f.b, got, &y, 0, RECT, RECT, 1));
  CHECK(memcmp(got, want_y, RECT) == 0);
  f.dev->cl->ReleaseEvent(gate);
  f.vt->dealloc(f.dev, &x);
  f.vt->dealloc(f.dev, &y);
  free(want);
  free(want_y);
  free(part);
  free(got);
  ocl_fixture_close(&f);
  user_events_close(&u);
#endif
}

#ifdef CUBE_HAVE_OPENCL
/* Opens |gate| once |issued| is set (and a little later), from its own
 * thread: the writes behind the gate cannot complete before. */
typedef struct gate_opener {
  user_events_t* u;
  cl_event gate;
  atomic_int issued;
} gate_opener_t;
static void* gate_open_later(void* p) {
  gate_opener_t* g = p;
  struct timespec ms = {0, 1000000}, later = {0, 50000000};
  while (!atomic_load(&g->issued)) nanosleep(&ms, NULL);
  nanosleep(&later, NULL);
  g->u->set(g->gate, CL_COMPLETE);
  return NULL;
}

/* Closes |stream| behind a new gate (a user event) that |opener| opens once
 * g->issued is set; false when either cannot be made. */
static bool gate_close(ocl_fixture_t* f, user_events_t* u, void* stream, gate_opener_t* g,
                       pthread_t* opener) {
  g->u = u;
  atomic_init(&g->issued, 0);
  cl_int err = CL_SUCCESS;
  g->gate = u->create(f->dev->ctx, &err);
  if (!g->gate || err != CL_SUCCESS) return false;
  cube_status_t st = f->vt->event_wait(f->dev, stream, g->gate);
  bool ok = st == CUBE_OK;
  cube_status_free(st);
  return ok && pthread_create(opener, NULL, gate_open_later, g) == 0;
}

/* Waits for the opener and drops the gate. */
static void gate_done(ocl_fixture_t* f, gate_opener_t* g, pthread_t opener) {
  pthread_join(opener, NULL);
  f->dev->cl->ReleaseEvent(g->gate);
}
#endif

/* Counts releases of bytes over memory the test keeps (nothing freed). */
static atomic_int kept_released;
static void kept_release(void* user, void* data, size_t size) {
  (void)user;
  (void)data;
  (void)size;
  atomic_fetch_add(&kept_released, 1);
}

/* Held writes of 24 MiB + 13 on stream A, behind a user event opened from
 * another thread only once ten of them were issued: those ten (240 MiB) stay
 * in flight (they did not wait), the eleventh waits for the gate instead of
 * passing CUBE__OCL_PENDING_BYTES_MAX (256 MiB), and the stream never holds
 * more. Every write lands (read on stream B after an event: ordered across
 * queues); every source is released once, the last ones by stream destroy.
 * The sources are slices of one array, handed over without a copy. */
CUBE_TEST(held_writes_in_flight_are_bounded) {
#ifndef CUBE_HAVE_OPENCL
  CUBE_SKIP("the backend is not built into this library");
#else
  OCL_FIXTURE(f);
  user_events_t u;
  USER_EVENTS_OR_SKIP(f, u);
  enum { COUNT = 12, PIECE = (24 << 20) + 13 };
  const uint64_t bytes = (uint64_t)COUNT * PIECE;
  CHECK(10 * (uint64_t)PIECE <= CUBE__OCL_PENDING_BYTES_MAX &&
        11 * (uint64_t)PIECE > CUBE__OCL_PENDING_BYTES_MAX);
  cube__storage_t x;
  REQUIRE_OK(f.vt->alloc(f.dev, bytes, &x));
  unsigned char* want = malloc(bytes);
  unsigned char* got = malloc(PIECE);
  REQUIRE(want && got);
  cube_test_fill_random(want, bytes, 8201);
  atomic_store(&kept_released, 0);
  gate_opener_t g;
  pthread_t opener;
  REQUIRE(gate_close(&f, &u, f.a, &g, &opener));
  const cube__ocl_stream_t* s = f.a;
  uint64_t most = 0;
  for (int i = 0; i < COUNT; ++i) {
    uint64_t at = (uint64_t)i * PIECE;
    cube_bytes_t* b = NULL;
    REQUIRE_OK(cube_bytes_wrap(want + at, PIECE, kept_release, NULL, &b));
    CHECK_OK(f.vt->write_held(f.dev, f.a, &x, at, PIECE, want + at, PIECE, 1, b));
    cube_bytes_release(b);
    if (s->pending_bytes > most) most = s->pending_bytes;
    CHECK(s->pending_bytes <= CUBE__OCL_PENDING_BYTES_MAX);
    CHECK_EQ_U64(s->copied_bytes, 0); /* nothing copied */
    if (i + 1 == 10) atomic_store(&g.issued, 1);
  }
  gate_done(&f, &g, opener);
  CHECK_EQ_U64(most, 10 * (uint64_t)PIECE); /* the ten behind the gate did not wait */
  void* ev = NULL;
  CHECK_OK(f.vt->event_record(f.dev, f.a, &ev));
  REQUIRE(ev);
  CHECK_OK(f.vt->event_wait(f.dev, f.b, ev));
  int bad = 0;
  for (int i = 0; i < COUNT; ++i) {
    memset(got, 0x5A, PIECE);
    CHECK_OK(f.vt->read(f.dev, f.b, got, &x, (uint64_t)i * PIECE, PIECE, PIECE, 1));
    bad += memcmp(got, want + (uint64_t)i * PIECE, PIECE) != 0;
  }
  CHECK_EQ_U64(bad, 0);
  f.vt->event_destroy(f.dev, ev);
  f.vt->dealloc(f.dev, &x);
  ocl_fixture_close(&f); /* releases what the stream still held */
  CHECK_EQ_U64((uint64_t)atomic_load(&kept_released), COUNT);
  free(want);
  free(got);
  user_events_close(&u);
#endif
}

/* Copied writes (the write slot, 200 KiB + 7 each, sources freed and
 * poisoned at once) behind a gate: the copies in flight stop at
 * CUBE__OCL_COPIED_BYTES_MAX (32 MiB: 163 of them), the next write waits for
 * the gate, and every write lands. */
CUBE_TEST(copied_writes_in_flight_are_bounded) {
#ifndef CUBE_HAVE_OPENCL
  CUBE_SKIP("the backend is not built into this library");
#else
  OCL_FIXTURE(f);
  user_events_t u;
  USER_EVENTS_OR_SKIP(f, u);
  enum { PIECE = 200 * 1024 + 7, FIT = 163, COUNT = FIT + 20 };
  const uint64_t bytes = (uint64_t)COUNT * PIECE;
  CHECK(PIECE <= CUBE__OCL_WRITE_COPY_MAX);
  CHECK(FIT * (uint64_t)PIECE <= CUBE__OCL_COPIED_BYTES_MAX &&
        (FIT + 1) * (uint64_t)PIECE > CUBE__OCL_COPIED_BYTES_MAX);
  cube__storage_t x;
  REQUIRE_OK(f.vt->alloc(f.dev, bytes, &x));
  unsigned char* want = malloc(bytes);
  unsigned char* got = malloc(bytes);
  REQUIRE(want && got);
  cube_test_fill_random(want, bytes, 8211);
  gate_opener_t g;
  pthread_t opener;
  REQUIRE(gate_close(&f, &u, f.b, &g, &opener));
  const cube__ocl_stream_t* s = f.b;
  uint64_t most = 0;
  for (int i = 0; i < COUNT; ++i) {
    uint64_t at = (uint64_t)i * PIECE;
    unsigned char* src = malloc(PIECE);
    REQUIRE(src);
    memcpy(src, want + at, PIECE);
    CHECK_OK(f.vt->write(f.dev, f.b, &x, at, PIECE, src, PIECE, 1));
    memset(src, 0xC3, PIECE);
    free(src);
    if (s->copied_bytes > most) most = s->copied_bytes;
    CHECK(s->copied_bytes <= CUBE__OCL_COPIED_BYTES_MAX);
    if (i + 1 == FIT) atomic_store(&g.issued, 1);
  }
  gate_done(&f, &g, opener);
  CHECK_EQ_U64(most, FIT * (uint64_t)PIECE);
  CHECK_OK(f.vt->sync(f.dev, f.b));
  CHECK_EQ_U64(s->copied_bytes, 0);
  memset(got, 0x5A, bytes);
  CHECK_OK(f.vt->read(f.dev, f.b, got, &x, 0, bytes, bytes, 1));
  CHECK(memcmp(got, want, bytes) == 0);
  f.vt->dealloc(f.dev, &x);
  ocl_fixture_close(&f);
  free(want);
  free(got);
  user_events_close(&u);
#endif
}

#ifdef CUBE_HAVE_OPENCL
/* Fault injection for the driver: writes enqueued behind a user event that
 * the test then fails (clSetUserEventStatus with a negative status), so that
 * their own events end failed, as a write the device could not do would. */
static const cube__ocl_api_t* fail_real;
static cl_event fail_gate;
static cl_int fail_enqueue_write(cl_command_queue q, cl_mem m, cl_bool blocking, size_t off,
                                 size_t n, const void* p, cl_uint nw, const cl_event* w,
                                 cl_event* ev) {
  (void)nw;
  (void)w;
  return fail_real->EnqueueWriteBuffer(q, m, blocking, off, n, p, 1, &fail_gate, ev);
}
static cl_int fail_enqueue_write_rect(cl_command_queue q, cl_mem m, cl_bool blocking,
                                      const size_t* bo, const size_t* ho, const size_t* region,
                                      size_t brp, size_t bsp, size_t hrp, size_t hsp,
                                      const void* p, cl_uint nw, const cl_event* w, cl_event* ev) {
  (void)nw;
  (void)w;
  return fail_real->EnqueueWriteBufferRect(q, m, blocking, bo, ho, region, brp, bsp, hrp, hsp, p,
                                           1, &fail_gate, ev);
}
#endif

/* A held write and a held rect write that fail on the device (after the
 * slot returned OK) are reported by the next sync, naming the write, its
 * size, storage and stream; nothing hangs, and the sources are released. */
CUBE_TEST(held_write_failed_by_the_driver_is_reported_at_sync) {
#ifndef CUBE_HAVE_OPENCL
  CUBE_SKIP("the backend is not built into this library");
#else
  OCL_FIXTURE(f);
  user_events_t u;
  USER_EVENTS_OR_SKIP(f, u);
  cl_int err = CL_SUCCESS;
  fail_gate = u.create(f.dev->ctx, &err);
  REQUIRE(fail_gate && err == CL_SUCCESS);
  fail_real = f.dev->cl;
  cube__ocl_api_t faulty = *fail_real;
  faulty.EnqueueWriteBuffer = fail_enqueue_write;
  faulty.EnqueueWriteBufferRect = fail_enqueue_write_rect;
  enum { BYTES = (4 << 20) + 77, ROW = 1000, ROWS = 999, PITCH = 1024 };
  cube__storage_t x;
  REQUIRE_OK(f.vt->alloc(f.dev, BYTES, &x));
  unsigned char* data = malloc(BYTES);
  REQUIRE(data);
  cube_test_fill_random(data, BYTES, 8301);
  atomic_store(&held_released, 0);
  f.dev->cl = &faulty;
  cube_bytes_t* b = held_source(data, BYTES);
  cube_bytes_t* r = held_source(data, (size_t)ROW * ROWS);
  REQUIRE(b && r);
  CHECK_OK(f.vt->write_held(f.dev, f.a, &x, 0, BYTES, cube_bytes_const_data(b), BYTES, 1, b));
  CHECK_OK(f.vt->write_held(f.dev, f.a, &x, 64, PITCH, cube_bytes_const_data(r), ROW, ROWS, r));
  cube_bytes_release(b);
  cube_bytes_release(r);
  f.dev->cl = fail_real;
  /* Not released: the writes wait for the gate. */
  CHECK_EQ_U64((uint64_t)atomic_load(&held_released), 0);
  CHECK(u.set(fail_gate, -1) == CL_SUCCESS);
  char bytes_text[64];
  snprintf(bytes_text, sizeof(bytes_text), "write of %d bytes to storage", BYTES);
  CHECK_STATUS(f.vt->sync(f.dev, f.a), CUBE_STATUS_INTERNAL, bytes_text, "on stream 1");
  CHECK_EQ_U64((uint64_t)atomic_load(&held_released), 2);
  /* Reported once: the next sync of the stream has nothing to say of it. */
  cube_status_t again = f.vt->sync(f.dev, f.a);
  CHECK(again == NULL || strstr(cube_status_message(again), bytes_text) == NULL);
  cube_status_free(again);
  /* The other stream is not affected. */
  memset(data, 0x11, 4096);
  CHECK_OK(f.vt->write(f.dev, f.b, &x, 0, 4096, data, 4096, 1));
  unsigned char got[4096];
  CHECK_OK(f.vt->read(f.dev, f.b, got, &x, 0, 4096, 4096, 1));
  CHECK(memcmp(got, data, 4096) == 0);
  CHECK_OK(f.vt->sync(f.dev, f.b));
  fail_real->ReleaseEvent(fail_gate);
  f.vt->dealloc(f.dev, &x);
  free(data);
  ocl_fixture_close(&f);
  user_events_close(&u);
#endif
}

//===----------------------------------------------------------------------===//
// event_elapsed
//===----------------------------------------------------------------------===//

/* Device time between markers: > 0 across 16 MiB of writes, not more than
 * the host saw around them, monotone (a later marker is no nearer), and the
 * reverse order is OUT_OF_RANGE. A marker that waits for a user event not
 * yet set is FAILED_PRECONDITION ("has not completed"), without waiting;
 * NULL is INVALID_ARGUMENT. */
CUBE_TEST(event_elapsed_between_markers) {
#ifndef CUBE_HAVE_OPENCL
  CUBE_SKIP("the backend is not built into this library");
#else
  OCL_FIXTURE(f);
  REQUIRE(f.vt->event_elapsed != NULL);
  enum { BYTES = 16 << 20 };
  cube__storage_t x;
  REQUIRE_OK(f.vt->alloc(f.dev, BYTES, &x));
  unsigned char* data = malloc(BYTES);
  REQUIRE(data);
  cube_test_fill_random(data, BYTES, 8401);
  uint64_t h0 = cube__now_ns();
  void *e0 = NULL, *e1 = NULL, *e2 = NULL;
  CHECK_OK(f.vt->event_record(f.dev, f.a, &e0));
  CHECK_OK(f.vt->write(f.dev, f.a, &x, 0, BYTES, data, BYTES, 1));
  CHECK_OK(f.vt->event_record(f.dev, f.a, &e1));
  CHECK_OK(f.vt->write(f.dev, f.a, &x, 0, BYTES, data, BYTES, 1));
  CHECK_OK(f.vt->event_record(f.dev, f.a, &e2));
  REQUIRE(e0 && e1 && e2);
  CHECK_OK(f.vt->sync(f.dev, f.a));
  uint64_t host = cube__now_ns() - h0;
  uint64_t d01 = UINT64_MAX, d02 = UINT64_MAX, d12 = UINT64_MAX, d00 = UINT64_MAX;
  CHECK_OK(f.vt->event_elapsed(f.dev, e0, e1, &d01));
  CHECK_OK(f.vt->event_elapsed(f.dev, e0, e2, &d02));
  CHECK_OK(f.vt->event_elapsed(f.dev, e1, e2, &d12));
  CHECK_OK(f.vt->event_elapsed(f.dev, e0, e0, &d00));
  fprintf(stderr, "elapsed: %llu, %llu, %llu ns (host %llu ns)\n", (unsigned long long)d01,
          (unsigned long long)d02, (unsigned long long)d12, (unsigned long long)host);
  CHECK_EQ_U64(d00, 0);
  CHECK(d01 > 0 && d12 > 0);
  CHECK(d02 >= d01 && d02 >= d12);
  CHECK(d02 == d01 + d12);
  CHECK(d02 <= host);
  uint64_t back = 7;
  CHECK_STATUS(f.vt->event_elapsed(f.dev, e2, e0, &back), CUBE_STATUS_OUT_OF_RANGE,
               "ended", "before the start event");
  CHECK_EQ_U64(back, 0);
  CHECK_STATUS(f.vt->event_elapsed(f.dev, NULL, e1, &back), CUBE_STATUS_INVALID_ARGUMENT,
               "without a start event");
  /* A marker that has not completed: stream B waits for a user event. */
  user_events_t u;
  if (user_events_open(&u)) {
    cl_int err = CL_SUCCESS;
    cl_event gate = u.create(f.dev->ctx, &err);
    REQUIRE(gate && err == CL_SUCCESS);
    void* late = NULL;
    CHECK_OK(f.vt->event_wait(f.dev, f.b, gate));
    CHECK_OK(f.vt->event_record(f.dev, f.b, &late));
    REQUIRE(late);
    CHECK(!f.vt->event_done(f.dev, late));
    CHECK_STATUS(f.vt->event_elapsed(f.dev, e0, late, &back), CUBE_STATUS_FAILED_PRECONDITION,
                 "the end event has not completed");
    CHECK_STATUS(f.vt->event_elapsed(f.dev, late, e0, &back), CUBE_STATUS_FAILED_PRECONDITION,
                 "the start event has not completed");
    CHECK(u.set(gate, CL_COMPLETE) == CL_SUCCESS);
    CHECK_OK(f.vt->event_sync(f.dev, late));
    void* later = NULL;
    CHECK_OK(f.vt->event_record(f.dev, f.b, &later));
    CHECK_OK(f.vt->event_sync(f.dev, later));
    uint64_t d = UINT64_MAX;
    CHECK_OK(f.vt->event_elapsed(f.dev, late, later, &d));
    CHECK(d != UINT64_MAX);
    f.vt->event_destroy(f.dev, later);
    f.vt->event_destroy(f.dev, late);
    f.dev->cl->ReleaseEvent(gate);
  }
  user_events_close(&u);
  f.vt->event_destroy(f.dev, e0);
  f.vt->event_destroy(f.dev, e1);
  f.vt->event_destroy(f.dev, e2);
  CHECK_OK(f.vt->sync(f.dev, f.b));
  f.vt->dealloc(f.dev, &x);
  free(data);
  ocl_fixture_close(&f);
#endif
}

//===----------------------------------------------------------------------===//
// Through the client
//===----------------------------------------------------------------------===//

/* The server's large write goes through write_held, whose fault site is
 * write's: an injected failure of an upload of 3 MiB + 5 is the stream's
 * error at the next sync, the buffer then has no valid contents, and a
 * whole write gives it its contents again. */
CUBE_TEST(held_write_fails_at_the_write_fault_site) {
  OPENCL_CLIENT(c);
  enum { N = (3 << 20) + 5 };
  unsigned char* data = malloc(N);
  unsigned char* got = malloc(N);
  REQUIRE(data && got);
  cube_test_fill_random(data, N, 8601);
  cube__fault_site_t site = cube__fault_backend_site(CUBE_BACKEND_OPENCL, CUBE__SLOT_WRITE);
  cube__fault_reset();
  cube__fault_set(site, 1, 1);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, data, N, &h));
  CHECK_STATUS(cube_client_sync(c), CUBE_STATUS_INTERNAL, "opencl write of 3145733 bytes",
               "injected fault");
  CHECK_EQ_U64(cube__fault_calls(site), 1);
  CHECK_STATUS(cube_client_read_into(c, h, got, N), CUBE_STATUS_DATA_LOST, "no valid contents");
  cube_test_fill_random(data, N, 8602);
  CHECK_OK(cube_client_write(c, h, data, N));
  memset(got, 0x5A, N);
  CHECK_OK(cube_client_read_into(c, h, got, N));
  CHECK(memcmp(got, data, N) == 0);
  CHECK_EQ_U64(cube__fault_calls(site), 2);
  cube__fault_reset();
  cube_handle_release(h);
  free(data);
  free(got);
  cube_client_release(c);
  cube_shutdown();
}

/* Large uploads in flight on two streams (cube_client_create_from_slice
 * from sources freed and poisoned at once, cube_client_create from OTHER
 * bytes handed over, cube_client_write into buffers that queued work uses),
 * then a kernel on stream A over buffers of both streams: the results are
 * the host's. A profile of the kernel brackets it with device time no
 * longer than the host saw. */
CUBE_TEST(large_uploads_on_two_streams_then_launch) {
  OPENCL_CLIENT(c);
  cube_client_t* c2 = NULL;
  REQUIRE_OK(cube_client_clone(c, &c2));
  cube_client_set_stream(c2, cube_stream_id_new());
  enum { COUNT = 6, N = (1 << 20) + 301 }; /* 4 MiB + 1204 bytes of floats each */
  cube_kernel_t* k = make_kernel(k_saxpy, "saxpy", 64);
  REQUIRE(k != NULL);
  atomic_store(&held_released, 0);
  float* want = malloc(sizeof(float) * N);
  float* xs = malloc(sizeof(float) * N);
  float* ys = malloc(sizeof(float) * N);
  REQUIRE(want && xs && ys);
  cube_handle_t hx[COUNT], hy[COUNT];
  float* expect[COUNT];
  uint64_t seed = 8501;
  for (int i = 0; i < COUNT; ++i) {
    for (int j = 0; j < N; ++j) {
      xs[j] = (float)(cube_test_rand(&seed) % 1000) / 8.0f;
      ys[j] = (float)(cube_test_rand(&seed) % 1000) / 4.0f;
    }
    /* x on stream B from a slice (freed and poisoned right after); y on
     * stream A from OTHER bytes handed over (poisoned when released). */
    float* tmp = malloc(sizeof(float) * N);
    REQUIRE(tmp);
    memcpy(tmp, xs, sizeof(float) * N);
    REQUIRE_OK(cube_client_create_from_slice(c2, tmp, sizeof(float) * N, &hx[i]));
    memset(tmp, 0xEE, sizeof(float) * N);
    free(tmp);
    cube_bytes_t* b = held_source(ys, sizeof(float) * N);
    REQUIRE(b);
    REQUIRE_OK(cube_client_create(c, b, &hy[i]));
    expect[i] = malloc(sizeof(float) * N);
    REQUIRE(expect[i]);
    for (int j = 0; j < N; ++j) expect[i][j] = 3.0f * xs[j] + ys[j];
  }
  /* Then x[0] overwritten on stream B by a write that waits for nothing. */
  for (int j = 0; j < N; ++j) xs[j] = (float)(j % 97);
  CHECK_OK(cube_client_write(c2, hx[0], xs, sizeof(float) * N));
  for (int j = 0; j < N; ++j) xs[j] = -1.0f; /* the caller reuses its source */
  uint64_t seed0 = 8501;
  for (int j = 0; j < N; ++j) {
    (void)cube_test_rand(&seed0);
    float y0 = (float)(cube_test_rand(&seed0) % 1000) / 4.0f;
    expect[0][j] = 3.0f * (float)(j % 97) + y0;
  }
  for (int i = 0; i < COUNT; ++i) {
    cube_arg_t a[3] = {cube_arg_buffer(hx[i]), cube_arg_buffer(hy[i]), cube_arg_f32(3.0f)};
    CHECK_OK(cube_client_launch(c, k, cube_count_static((N + 63) / 64, 1, 1), 3, a));
  }
  for (int i = 0; i < COUNT; ++i) {
    cube_bytes_t* out = NULL;
    CHECK_OK(cube_client_read_one(c, hy[i], &out));
    CHECK(out && cube_bytes_size(out) == sizeof(float) * N &&
          memcmp(cube_bytes_const_data(out), expect[i], sizeof(float) * N) == 0);
    cube_bytes_release(out);
  }
  CHECK_OK(cube_client_sync(c));
  CHECK_OK(cube_client_sync(c2));
  CHECK_EQ_U64((uint64_t)atomic_load(&held_released), COUNT);
  /* A profiled kernel: device time, within what the host saw. */
  cube_arg_t a[3] = {cube_arg_buffer(hx[1]), cube_arg_buffer(hy[1]), cube_arg_f32(1.0f)};
  void* p[3] = {c, k, a};
  cube_profile_duration_t d;
  uint64_t h0 = cube__now_ns();
  CHECK_OK(cube_client_profile(c, run_saxpy, p, "saxpy", &d));
  uint64_t h1 = cube__now_ns();
  CHECK_EQ_U64(d.method, CUBE_TIMING_DEVICE);
  CHECK(d.start_ns >= h0 && d.end_ns >= d.start_ns && d.end_ns - d.start_ns <= h1 - h0);
  for (int i = 0; i < COUNT; ++i) {
    cube_handle_release(hx[i]);
    cube_handle_release(hy[i]);
    free(expect[i]);
  }
  free(want);
  free(xs);
  free(ys);
  cube_kernel_release(k);
  cube_client_release(c2);
  cube_client_release(c);
  cube_shutdown();
}

//===----------------------------------------------------------------------===//
// Torn PoCL binaries: never cached, never loaded
//===----------------------------------------------------------------------===//

#ifdef CUBE_HAVE_OPENCL
#include <ftw.h>

/* PoCL packs its own cache directory (program.bc ...) into a program's
 * binary; another process rewriting that directory (remove, then rename)
 * opens a window in which the binary is packed without the file, and PoCL's
 * loader aborts (assert) on such a binary. The wrapper below opens that
 * window on purpose: while armed, the first CL_PROGRAM_BINARY_SIZES query
 * (PoCL packs the binary then) runs with every program.bc under
 * POCL_CACHE_DIR moved away and a FIFO in its place (a missing file would do
 * the same, but PoCL 3.1 then reads an uninitialised stat result and may
 * crash itself; a FIFO is neither file nor directory, so PoCL packs nothing
 * for it), and the first binary handed out is kept. */
static const cube__ocl_api_t* torn_real;
static int torn_armed, torn_moved_away, torn_moved_back;
static unsigned char* torn_copy;
static size_t torn_copy_size;
static char torn_paths[16][1024]; /* the program.bc files found */
static int torn_found;

static int torn_find(const char* path, const struct stat* st, int type, struct FTW* ftw) {
  (void)st;
  (void)ftw;
  size_t n = strlen(path);
  if (type == FTW_F && n >= 11 && n < sizeof(torn_paths[0]) - 8 &&
      strcmp(path + n - 11, "/program.bc") == 0 && torn_found < 16)
    memcpy(torn_paths[torn_found++], path, n + 1);
  return 0;
}

/* Moves every program.bc under POCL_CACHE_DIR away (a FIFO in its place),
 * or back. */
static void torn_move(bool away) {
  char other[1100];
  if (away) {
    torn_found = 0;
    nftw(getenv("POCL_CACHE_DIR"), torn_find, 16, FTW_PHYS);
  }
  for (int i = 0; i < torn_found; ++i) {
    snprintf(other, sizeof(other), "%s.away", torn_paths[i]);
    if (away) {
      if (rename(torn_paths[i], other) == 0 && mkfifo(torn_paths[i], 0600) == 0)
        torn_moved_away++;
    } else {
      unlink(torn_paths[i]);
      if (rename(other, torn_paths[i]) == 0) torn_moved_back++;
    }
  }
}

static cl_int torn_get_program_info(cl_program p, cl_program_info what, size_t size, void* value,
                                    size_t* ret) {
  if (what == CL_PROGRAM_BINARY_SIZES && torn_armed) {
    torn_armed = 0;
    torn_move(true);
    cl_int e = torn_real->GetProgramInfo(p, what, size, value, ret);
    torn_move(false);
    return e;
  }
  cl_int e = torn_real->GetProgramInfo(p, what, size, value, ret);
  if (what == CL_PROGRAM_BINARIES && e == CL_SUCCESS && !torn_copy) {
    size_t n = 0;
    if (torn_real->GetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof(n), &n, NULL) ==
            CL_SUCCESS &&
        (torn_copy = malloc(n)) != NULL) {
      memcpy(torn_copy, *(unsigned char**)value, n);
      torn_copy_size = n;
    }
  }
  return e;
}

/* A fresh private directory under the tests' temporary one, named in |env|. */
static bool torn_fresh_dir(const char* env, const char* tag) {
  const char* base = getenv("CUBE_TEST_TMPDIR");
  char path[1024];
  if (base && *base) mkdir(base, 0700);
  snprintf(path, sizeof(path), "%s/%s.XXXXXX", base && *base ? base : "/tmp", tag);
  if (!mkdtemp(path)) return false;
  setenv(env, path, 1);
  return true;
}

/* The clbin entry of the cache directory: its key and payload (malloc'd). */
static bool torn_only_entry(cube__cache_key_t* key, unsigned char** data, size_t* size) {
  cube_kernel_cache_entry_t* e = NULL;
  size_t n = 0;
  if (cube_status_consume(cube_kernel_cache_list(&e, &n))) return false;
  bool ok = false;
  for (size_t i = 0; i < n && !ok; ++i) {
    char hi[17] = {0}, lo[17] = {0};
    if (strcmp(e[i].kind, "clbin") != 0 || strlen(e[i].file) < 32) continue;
    memcpy(hi, e[i].file, 16);
    memcpy(lo, e[i].file + 16, 16);
    key->hi = strtoull(hi, NULL, 16);
    key->lo = strtoull(lo, NULL, 16);
    void* d = NULL;
    ok = cube__cache_disk_load(*key, "clbin", &d, size) == CUBE_OK;
    *data = d;
  }
  cube_kernel_cache_list_free(e);
  return ok;
}

static uint64_t torn_corrupt_count(void) {
  cube_kernel_cache_stats_t s = {.struct_size = sizeof(s)};
  if (cube_status_consume(cube_kernel_cache_stats(&s))) return UINT64_MAX;
  return s.corrupt_entries;
}

static void torn_put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = (unsigned char)(v >> (8 * i));
}
#endif

/* The first binary PoCL packs for a new program is taken with its
 * program.bc away (the window another process's rewrite opens, made here on
 * purpose): PoCL 3.1 packs an empty root entry for it, PoCL 5.0 none; cube
 * sees the binary torn, does not store it, builds the source again and
 * stores that, sound, binary. The check itself refuses both torn forms, cut
 * headers, a root entry longer than the rest, no kernels, and accepts
 * another platform's bytes. Then a torn binary (the sound one with root
 * entry 0 emptied) is planted in the cache under the kernel's key: a launch
 * after cube_shutdown finds it torn, discards it (counted as corrupt),
 * builds from source and computes saxpy right; the process goes on (PoCL
 * 3.1's loader aborts on that binary). */
CUBE_TEST(torn_pocl_binary_neither_cached_nor_loaded) {
#ifndef CUBE_HAVE_OPENCL
  CUBE_SKIP("the backend is not built into this library");
#else
  REQUIRE(torn_fresh_dir("CUBE_CACHE_DIR", "torn-cube-cache"));
  REQUIRE(torn_fresh_dir("POCL_CACHE_DIR", "torn-pocl-cache"));
  OCL_FIXTURE(f);
  cube_kernel_t* k = make_kernel(k_saxpy, "saxpy", 64);
  REQUIRE(k != NULL);
  torn_real = f.dev->cl;
  cube__ocl_api_t wrapped = *torn_real;
  wrapped.GetProgramInfo = torn_get_program_info;
  torn_armed = 1;
  f.dev->cl = &wrapped;
  CHECK_OK(f.vt->prepare(f.dev, k, CUBE_EXEC_CHECKED));
  f.dev->cl = torn_real;
  ocl_fixture_close(&f);
  CHECK_EQ_U64((uint64_t)torn_moved_back, (uint64_t)torn_moved_away);
  REQUIRE(torn_copy != NULL);
  char why[160] = "";
  cube__cache_key_t key;
  unsigned char* stored = NULL;
  size_t stored_size = 0;
  REQUIRE(torn_only_entry(&key, &stored, &stored_size));
  if (stored_size < 8 || memcmp(stored, "poclbin", 8) != 0 || torn_moved_away == 0) {
    free(stored);
    free(torn_copy);
    cube_kernel_release(k);
    cube_shutdown();
    CUBE_SKIP("the OpenCL platform is not PoCL (no PoCL binary, no program.bc in its cache)");
  }
  /* Root entry 0 (program.bc), by the test's own reading of PoCL's layout:
   * the header (the root entries' count at byte 32), then per root entry a
   * u64 length and the entry. */
  size_t root = 8 + 8 + 4 + 4 + 8 + 4 + 41 + ((stored[24] & 2) ? 8 : 0);
  REQUIRE(stored_size > root + 8 && torn_copy_size > root + 8);
  uint32_t stored_roots = 0, torn_roots = 0;
  uint64_t root_len = 0, torn_len = 0;
  for (int i = 3; i >= 0; --i) {
    stored_roots = stored_roots << 8 | stored[32 + i];
    torn_roots = torn_roots << 8 | torn_copy[32 + i];
  }
  for (int i = 7; i >= 0; --i) {
    root_len = root_len << 8 | stored[root + (size_t)i];
    torn_len = torn_len << 8 | torn_copy[root + (size_t)i];
  }
  /* Stored: a sound binary, program.bc in it. */
  CHECK(cube__ocl_pocl_binary_sound(stored, stored_size, why, sizeof(why)));
  REQUIRE(stored_roots >= 1);
  REQUIRE(root_len > 0 && root_len < stored_size - root - 8);
  if (torn_roots == 0 || torn_len == 0) {
    /* PoCL packed the first binary while program.bc was away, leaving an
     * empty root entry (3.1) or none (5.0): cube saw it torn and stored
     * another one. */
    CHECK(!cube__ocl_pocl_binary_sound(torn_copy, torn_copy_size, why, sizeof(why)));
    fprintf(stderr, "PoCL's torn binary: %s\n", why);
    CHECK(strstr(why, torn_roots == 0 ? "no root entries" : "root entry 0") != NULL);
    CHECK(stored_size != torn_copy_size || memcmp(stored, torn_copy, stored_size) != 0);
  } else {
    CHECK(!"PoCL packed program.bc although it was away: the case tears nothing");
  }
  /* Both torn forms, made from the sound binary: root entry 0 emptied (3.1),
   * and no root entries (5.0). The planted one below is the former. */
  unsigned char* none = malloc(stored_size);
  REQUIRE(none != NULL);
  memcpy(none, stored, root);
  memset(none + 32, 0, 4);
  memcpy(none + root, stored + root + 8 + root_len, stored_size - root - 8 - root_len);
  CHECK(!cube__ocl_pocl_binary_sound(none, stored_size - 8 - root_len, why, sizeof(why)));
  CHECK(strstr(why, "no root entries") != NULL);
  free(none);
  free(torn_copy);
  torn_copy_size = stored_size - (size_t)root_len;
  torn_copy = malloc(torn_copy_size);
  REQUIRE(torn_copy != NULL);
  memcpy(torn_copy, stored, root);
  torn_put_u64(torn_copy + root, 0);
  memcpy(torn_copy + root + 8, stored + root + 8 + root_len, stored_size - root - 8 - root_len);
  CHECK(!cube__ocl_pocl_binary_sound(torn_copy, torn_copy_size, why, sizeof(why)));
  CHECK(strstr(why, "root entry 0") != NULL);
  /* The check on altered copies of the sound binary. */
  unsigned char* alt = malloc(stored_size);
  REQUIRE(alt != NULL);
  CHECK(!cube__ocl_pocl_binary_sound(stored, 40, why, sizeof(why)));      /* header cut */
  CHECK(strstr(why, "header cut short") != NULL);
  memcpy(alt, stored, stored_size);
  memset(alt + 20, 0, 4);                                                 /* no kernels */
  CHECK(!cube__ocl_pocl_binary_sound(alt, stored_size, why, sizeof(why)));
  CHECK(strstr(why, "no kernels") != NULL);
  memcpy(alt, stored, stored_size);
  torn_put_u64(alt + root, stored_size);                                  /* too long */
  CHECK(!cube__ocl_pocl_binary_sound(alt, stored_size, why, sizeof(why)));
  CHECK(strstr(why, "root entry 0") != NULL);
  memcpy(alt, stored, stored_size);
  memcpy(alt, "notpocl", 8);                                              /* not PoCL's */
  CHECK(cube__ocl_pocl_binary_sound(alt, stored_size, why, sizeof(why)));
  free(alt);
  /* Planted: the torn binary under the kernel's key. */
  const cube__cache_meta_t meta = {"saxpy", "opencl", "planted by the test"};
  REQUIRE_OK(cube__cache_disk_store_meta(key, "clbin", &meta, torn_copy, torn_copy_size));
  cube_shutdown();
  uint64_t corrupt = torn_corrupt_count();
  OPENCL_CLIENT(c);
  enum { N = 64 * 37 + 5 };
  float* x = malloc(N * sizeof(float));
  float* y = malloc(N * sizeof(float));
  REQUIRE(x && y);
  cube_test_fill_random(x, N * sizeof(float), 9101);
  cube_test_fill_random(y, N * sizeof(float), 9102);
  for (int i = 0; i < N; ++i) {
    x[i] = (float)((uint32_t*)x)[i] / 4294967296.0f;
    y[i] = (float)((uint32_t*)y)[i] / 4294967296.0f;
  }
  cube_handle_t hx, hy;
  REQUIRE_OK(cube_client_create_from_slice(c, x, N * sizeof(float), &hx));
  REQUIRE_OK(cube_client_create_from_slice(c, y, N * sizeof(float), &hy));
  cube_arg_t a[3] = {cube_arg_buffer(hx), cube_arg_buffer(hy), cube_arg_f32(3.0f)};
  CHECK_OK(cube_client_launch(c, k, cube_count_static((N + 63) / 64, 1, 1), 3, a));
  cube_bytes_t* out = NULL;
  CHECK_OK(cube_client_read_one(c, hy, &out));
  REQUIRE(out != NULL);
  const float* got = cube_bytes_const_data(out);
  int wrong = 0;
  for (int i = 0; i < N; ++i) { /* PoCL may contract to an fma */
    float want = 3.0f * x[i] + y[i];
    wrong += !(got[i] >= want - 1e-6f * (want + 1) && got[i] <= want + 1e-6f * (want + 1));
  }
  CHECK_EQ_U64((uint64_t)wrong, 0);
  CHECK_EQ_U64(torn_corrupt_count(), corrupt + 1);
  cube_bytes_release(out);
  cube_handle_release(hx);
  cube_handle_release(hy);
  cube_client_release(c);
  /* The entry on disk is a sound binary again. */
  free(stored);
  REQUIRE(torn_only_entry(&key, &stored, &stored_size));
  CHECK(cube__ocl_pocl_binary_sound(stored, stored_size, why, sizeof(why)));
  free(stored);
  free(torn_copy);
  free(x);
  free(y);
  cube_kernel_release(k);
  cube_shutdown();
#endif
}

#ifdef CUBE_HAVE_OPENCL
typedef struct once_racer {
  const cube__backend_vtable_t* vt;
  cube__backend_device_t* dev;
  cube_kernel_t* k;
  pthread_barrier_t* go;
  cube_status_t st;
} once_racer_t;

static void* once_race(void* p) {
  once_racer_t* r = p;
  pthread_barrier_wait(r->go);
  r->st = r->vt->prepare(r->dev, r->k, CUBE_EXEC_CHECKED);
  return NULL;
}
#endif

/* Two devices (two contexts, two kernel tables: as two processes would be)
 * compile the same new unit at once, sharing a cache directory: one builds,
 * the other waits on the unit's lock in the directory and loads the first's
 * binary: one miss and one disk hit, not two misses. */
CUBE_TEST(one_build_per_unit_across_devices_sharing_the_cache) {
#ifndef CUBE_HAVE_OPENCL
  CUBE_SKIP("the backend is not built into this library");
#else
  REQUIRE(torn_fresh_dir("CUBE_CACHE_DIR", "once-cube-cache"));
  OCL_FIXTURE(f);
  cube_device_properties_t p;
  cube_features_t feat;
  cube_backend_info_t info;
  cube__backend_device_t* dev2 = NULL;
  REQUIRE_OK(f.vt->device_create(0, NULL, &dev2, &p, &feat, &info));
  char src[512];
  unsigned salt = (unsigned)getpid() * 2654435761u ^ (unsigned)time(NULL);
  snprintf(src, sizeof(src),
           "CUBE_KERNEL(salted, CUBE_ARRAY(float, y))\n"
           "{\n"
           "    uint32_t i = ABSOLUTE_POS;\n"
           "    if (i < CUBE_LEN(y)) CUBE_STORE(y, i, CUBE_LOAD(y, i) + %u.0f);\n"
           "}\n",
           salt % 100000u);
  cube_kernel_t* k = make_kernel(src, "salted", 64);
  REQUIRE(k != NULL);
  cube_kernel_cache_stats_t s0 = {.struct_size = sizeof(s0)}, s1 = {.struct_size = sizeof(s1)};
  REQUIRE_OK(cube_kernel_cache_stats(&s0));
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, 2);
  once_racer_t r[2] = {{f.vt, f.dev, k, &go, NULL}, {f.vt, dev2, k, &go, NULL}};
  pthread_t t[2];
  for (int i = 0; i < 2; ++i) REQUIRE(pthread_create(&t[i], NULL, once_race, &r[i]) == 0);
  for (int i = 0; i < 2; ++i) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&go);
  CHECK_OK(r[0].st);
  CHECK_OK(r[1].st);
  REQUIRE_OK(cube_kernel_cache_stats(&s1));
  CHECK_EQ_U64(s1.misses - s0.misses, 1);
  CHECK_EQ_U64(s1.disk_hits - s0.disk_hits, 1);
  CHECK_EQ_U64(s1.disk_entries, 1);
  f.vt->device_destroy(dev2);
  ocl_fixture_close(&f);
  cube_kernel_release(k);
  cube_shutdown();
#endif
}
