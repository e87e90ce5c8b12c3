// cube-test-libs: cube_static
/* The CUDA backend against the mock driver (tests/mock_cuda/mock_cuda.c): a
 * CPU stand-in whose streams are threads that run their work later, so the
 * backend's staging ring, pitched copies, stream-ordered allocation, events,
 * cross-stream ordering, cleanup and out-of-memory paths are exercised in CI
 * with no GPU. Kernels do not run on the mock (it refuses launches); NVRTC,
 * where installed, still compiles them. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "backends/backend.h"
#include "check.h"
#include "read_check.h"
#include "cube/backends/cuda.h"
#include "cube/cube.h"

#ifdef CUBE_MOCK_CUDA_PATH
#define MOCK_SETUP(delay_us)                                   \
  do {                                                         \
    setenv("CUBE_CUDA_DRIVER", CUBE_MOCK_CUDA_PATH, 1);        \
    setenv("CUBE_MOCK_CUDA_DELAY_US", (delay_us), 1);          \
  } while (0)
/* Uploads land |us| after everything else. */
#define MOCK_LATE_UPLOADS(us) setenv("CUBE_MOCK_CUDA_H2D_DELAY_US", (us), 1)
#else
#define MOCK_SETUP(delay_us) CUBE_SKIP("the CUDA backend is not built (no CUDA headers)")
#define MOCK_LATE_UPLOADS(us) ((void)(us))
#endif

/* NVRTC keeps allocations until exit; not ours to report. */
const char* __lsan_default_suppressions(void);
const char* __lsan_default_suppressions(void) { return "leak:libnvrtc\n"; }

static const cube_device_id_t cuda0 = {CUBE_BACKEND_CUDA, 0};
typedef int CUresult_t; /* the driver's CUresult, without its header */

typedef struct {
  uint64_t copies, bytes_h2d, bytes_d2h, async_allocs, async_frees, launches, device_bytes_used;
  int pinned_allocations, streams;
  int context_pushes_outstanding;
} mock_stats_t;

static void mock_stats(mock_stats_t* out) {
  memset(out, 0, sizeof(*out));
#ifdef CUBE_MOCK_CUDA_PATH
  void* h = dlopen(CUBE_MOCK_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return;
  void (*fn)(mock_stats_t*) = (void (*)(mock_stats_t*))(uintptr_t)dlsym(h, "cube_mock_cuda_stats");
  if (fn) fn(out);
  dlclose(h);
#endif
}

static void fill_random(void* p, size_t n, unsigned seed) {
  unsigned char* b = p;
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1103515245u + 12345u;
    b[i] = (unsigned char)(seed >> 16);
  }
}

CUBE_TEST(devices_and_properties) {
  MOCK_SETUP("0");
  setenv("CUBE_MOCK_CUDA_MEMORY", "268435456", 1);
  setenv("CUBE_MOCK_CUDA_DEVICES", "2", 1);
  REQUIRE_OK(cube_backend_status(CUBE_BACKEND_CUDA));
  CHECK_EQ_U64(cube_test_device_count(CUBE_BACKEND_CUDA), 2);
  for (uint32_t i = 0; i < 2; ++i) {
    cube_client_t* c = NULL;
    cube_device_id_t id = {CUBE_BACKEND_CUDA, i};
    REQUIRE_OK(cube_client_load(id, &c));
    const cube_device_properties_t* p = cube_client_properties(c);
    char want[64];
    snprintf(want, sizeof(want), "cube mock GPU %u", i);
    CHECK(strstr(p->name, want) != NULL);
    CHECK(strstr(p->name, "sm_90") != NULL);
    CHECK_EQ_U64(p->memory.alignment, 512);
    CHECK_EQ_U64(p->memory.total_memory, 256ull << 20);
    CHECK_EQ_U64(p->memory.max_page_size, 64ull << 20);
    CHECK(p->layout_policy == CUBE_LAYOUT_POLICY_PITCHED);
    CHECK_EQ_U64(p->hardware.num_streaming_multiprocessors, 4);
    CHECK_EQ_U64(p->hardware.l2_cache_size, 3u << 20);
    CHECK_EQ_U64(p->hardware.compute_capability, 90);
    CHECK_EQ_U64(p->hardware.max_cube_dim[2], 64);
    CHECK_EQ_U64(p->hardware.max_cube_count[1], 65535);
    CHECK(!(cube_client_features(c)->bits & CUBE_FEATURE_NATIVE_KERNELS));
    cube_client_release(c);
  }
  cube_device_id_t bad = {CUBE_BACKEND_CUDA, 2};
  cube_client_t* c = NULL;
  CHECK_STATUS(cube_client_load(bad, &c), CUBE_STATUS_NOT_FOUND, "cuda:2");
  cube_shutdown();
}

/* Sizes around the staging chunk (2 MiB) and the parallel split, with the
 * mock's uploads landing 3 ms late: a chunk reused before its DMA ran would
 * corrupt the data. */
CUBE_TEST(upload_download_sizes) {
  MOCK_SETUP("0");
  MOCK_LATE_UPLOADS("3000");
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  const size_t sizes[] = {1, 3, 4095, 65537, (2u << 20) - 1, 2u << 20, (2u << 20) + 1,
                          (7u << 20) + 3, (21u << 20) + 17};
  uint64_t total = 0;
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
    size_t n = sizes[k];
    unsigned char* data = malloc(n);
    REQUIRE(data);
    fill_random(data, n, (unsigned)(k * 77 + 1));
    cube_handle_t h;
    REQUIRE_OK(cube_client_create_from_slice(c, data, n, &h));
    /* The caller's memory is borrowed for the call only. */
    memset(data, 0x5A, n);
    fill_random(data, n, (unsigned)(k * 77 + 1));
    CHECK(cube_test_read_equals(c, h, data, n));
    total += n;
    cube_handle_release(h);
    free(data);
  }
  mock_stats_t st;
  mock_stats(&st);
  CHECK(st.bytes_h2d >= total);
  CHECK(st.bytes_d2h >= total);
  CHECK(st.async_allocs > 0); /* pages came from cuMemAllocAsync */
  CHECK_OK(cube_client_sync(c));
  cube_client_release(c);
  cube_shutdown();
}

/* Optimized tensors are pitched on cuda: rows of 1001 f32 are padded to a
 * multiple of 512 bytes; reads give back the dense rows. Rows longer than a
 * staging chunk take the per-row path. */
CUBE_TEST(pitched_tensor_roundtrip) {
  MOCK_SETUP("50");
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  const uint64_t shapes[][2] = {{37, 1001}, {3, 600001}, {1, 5}, {4100, 3}};
  for (size_t k = 0; k < 4; ++k) {
    size_t n = (size_t)(shapes[k][0] * shapes[k][1] * 4);
    float* data = malloc(n);
    REQUIRE(data);
    fill_random(data, n, (unsigned)k + 3);
    cube_tensor_t t;
    REQUIRE_OK(cube_client_create_tensor_from_slice(c, data, n, 2, shapes[k], 4, &t));
    CHECK_EQ_U64(t.strides[1], 1);
    uint64_t pitch_bytes = t.strides[0] * 4;
    if (shapes[k][0] > 1) {
      /* The pitched layout (docs/cubecl.md, "Layouts"): the row is rounded to next_pow2(row bytes) clamped
       * to [16, 512]. */
      uint64_t row = shapes[k][1] * 4, align = 16;
      while (align < row && align < 512) align *= 2;
      CHECK_EQ_U64(pitch_bytes, (row + align - 1) / align * align);
    }
    cube_bytes_t* b = NULL;
    CHECK_OK(cube_client_read_tensor(c, 1, &t, &b));
    CHECK(b && cube_bytes_size(b) == n && memcmp(cube_bytes_const_data(b), data, n) == 0);
    cube_bytes_release(b);
    cube_tensor_release(&t);
    free(data);
  }
  cube_client_release(c);
  cube_shutdown();
}

typedef struct {
  cube_client_t* c;
  unsigned seed;
  int failures;
} worker_t;

static void* worker_main(void* p) {
  worker_t* w = p;
  for (int it = 0; it < 40; ++it) {
    w->seed = w->seed * 1664525u + 1013904223u;
    size_t n = 1 + (w->seed >> 8) % (5u << 20);
    unsigned char* data = malloc(n);
    if (!data) {
      w->failures++;
      continue;
    }
    fill_random(data, n, w->seed);
    cube_handle_t h;
    cube_status_t s = cube_client_create_from_slice(w->c, data, n, &h);
    if (s) {
      fprintf(stderr, "create: %s\n", cube_status_message(s));
      cube_status_free(s);
      w->failures++;
    } else {
      if (!cube_test_read_equals(w->c, h, data, n)) w->failures++;
      cube_handle_release(h);
    }
    free(data);
  }
  return NULL;
}

/* Six threads, each its own stream, sharing the device's staging ring. */
CUBE_TEST(threads_share_the_ring) {
  MOCK_SETUP("30");
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  pthread_t t[6];
  worker_t w[6];
  for (int i = 0; i < 6; ++i) {
    w[i] = (worker_t){c, 1000u + (unsigned)i, 0};
    REQUIRE(pthread_create(&t[i], NULL, worker_main, &w[i]) == 0);
  }
  int failures = 0;
  for (int i = 0; i < 6; ++i) {
    pthread_join(t[i], NULL);
    failures += w[i].failures;
  }
  CHECK(failures == 0);
  mock_stats_t st;
  mock_stats(&st);
  CHECK(st.streams >= 6);
  cube_client_release(c);
  cube_shutdown();
}

/* A buffer made on one stream and read on another: the read waits for the
 * upload (the mock runs the upload late on its own stream thread). */
CUBE_TEST(cross_stream_read_waits_for_the_upload) {
  MOCK_SETUP("0");
  MOCK_LATE_UPLOADS("20000");
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  size_t n = (3u << 20) + 5;
  unsigned char* data = malloc(n);
  REQUIRE(data);
  fill_random(data, n, 99);
  cube_client_set_stream(c, 11);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, data, n, &h));
  cube_client_set_stream(c, 12);
  CHECK(cube_test_read_equals(c, h, data, n));
  /* Released on the other stream, then the owner reuses the memory. */
  cube_handle_release(h);
  cube_client_set_stream(c, 11);
  fill_random(data, n, 100);
  REQUIRE_OK(cube_client_create_from_slice(c, data, n, &h));
  CHECK(cube_test_read_equals(c, h, data, n));
  cube_handle_release(h);
  cube_client_unset_stream(c);
  free(data);
  cube_client_release(c);
  cube_shutdown();
}

/* A copy between two buffers is one device-to-device copy on the stream:
 * no byte crosses to the host. Made on another stream, with the upload
 * landing late, the source is copied only once the upload is done; and a
 * failure of the driver's copy comes back from the next read, naming it. */
CUBE_TEST(device_copy_stays_on_the_device) {
  MOCK_SETUP("0");
  MOCK_LATE_UPLOADS("20000");
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  size_t n = (5u << 20) + 3;
  unsigned char* data = malloc(n);
  REQUIRE(data);
  fill_random(data, n, 123);
  cube_client_set_stream(c, 21);
  cube_handle_t src, dst;
  REQUIRE_OK(cube_client_create_from_slice(c, data, n, &src));
  cube_client_set_stream(c, 22);
  REQUIRE_OK(cube_client_empty(c, n, &dst));
  CHECK_OK(cube_client_sync(c));
  mock_stats_t before, after;
  mock_stats(&before);
  CHECK_OK(cube_client_copy(c, src, dst));
  CHECK_OK(cube_client_sync(c));
  mock_stats(&after);
  /* The late upload's own copies may run inside this window: count bytes,
   * which the mock counts when a copy is queued. */
  CHECK_EQ_U64(after.bytes_h2d, before.bytes_h2d);
  CHECK_EQ_U64(after.bytes_d2h, before.bytes_d2h);
  CHECK(cube_test_read_equals(c, dst, data, n));
  /* Everything settled: one more copy is one operation of the driver. */
  cube_client_set_stream(c, 21);
  CHECK_OK(cube_client_sync(c));
  cube_client_set_stream(c, 22);
  mock_stats(&before);
  CHECK_OK(cube_client_copy(c, src, dst));
  CHECK_OK(cube_client_sync(c));
  mock_stats(&after);
  CHECK_EQ_U64(after.copies - before.copies, 1);
  CHECK_EQ_U64(after.bytes_h2d, before.bytes_h2d);
  CHECK_EQ_U64(after.bytes_d2h, before.bytes_d2h);
#ifdef CUBE_MOCK_CUDA_PATH
  void* lib = dlopen(CUBE_MOCK_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(lib);
  void (*fail)(const char*, long) =
      (void (*)(const char*, long))(uintptr_t)dlsym(lib, "cube_mock_cuda_fail");
  REQUIRE(fail);
  fail("cuMemcpyDtoDAsync", 1);
  CHECK_OK(cube_client_copy(c, src, dst)); /* queued; it fails on the runner */
  cube_bytes_t* b = NULL;
  CHECK_STATUS(cube_client_read_one(c, dst, &b), CUBE_STATUS_INTERNAL, "deferred error",
               "copy of 5242883 bytes", "device-to-device copy", "CUDA_ERROR_UNKNOWN");
  /* The copy's destination holds no valid contents now (taint), until a
   * copy over all of it succeeds. */
  CHECK_STATUS(cube_client_read_one(c, dst, &b), CUBE_STATUS_DATA_LOST, "no valid contents",
               "copy of 5242883 bytes", "CUDA_ERROR_UNKNOWN");
  fail("", 0);
  dlclose(lib);
  CHECK_OK(cube_client_copy(c, src, dst));
#endif
  CHECK(cube_test_read_equals(c, dst, data, n));
  cube_handle_release(src);
  cube_handle_release(dst);
  cube_client_unset_stream(c);
  free(data);
  cube_client_release(c);
  cube_shutdown();
}

/* Backend reads made on the calling thread / elsewhere (the trace hook). */
static pthread_t g_reader;
static atomic_int g_reads_here, g_reads_elsewhere;
static void count_reads(void* user, const cube__backend_call_t* call) {
  (void)user;
  if (call->slot != CUBE__SLOT_READ || call->status >= 0) return;
  atomic_fetch_add(pthread_equal(pthread_self(), g_reader) ? &g_reads_here : &g_reads_elsewhere, 1);
}

/* A read with no task queued before it runs on the calling thread, with the
 * device's context pushed there, on the stream's CUDA stream: after device
 * work still in flight on it (uploads the mock lands 20 ms late), whether the
 * work came from the caller (create_from_slice) or from a queued write that
 * the runner issued; a read into the caller's memory as well. */
CUBE_TEST(read_on_caller_after_work_in_flight) {
  MOCK_SETUP("0");
  MOCK_LATE_UPLOADS("20000");
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  REQUIRE(!cube_client_is_blocking(c));
  size_t sizes[2] = {4, (1u << 20) + 3};
  for (int k = 0; k < 2; ++k) {
    size_t n = sizes[k];
    unsigned char* a = malloc(n);
    unsigned char* b = malloc(n);
    unsigned char* into = malloc(n);
    REQUIRE(a && b && into);
    fill_random(a, n, 300 + (unsigned)k);
    fill_random(b, n, 310 + (unsigned)k);
    g_reader = pthread_self();
    atomic_store(&g_reads_here, 0);
    atomic_store(&g_reads_elsewhere, 0);
    cube__backend_set_trace(count_reads, NULL);
    cube_handle_t h;
    REQUIRE_OK(cube_client_create_from_slice(c, a, n, &h));
    CHECK(cube_test_read_equals(c, h, a, n)); /* nothing queued: here */
    CHECK_EQ_U64(atomic_load(&g_reads_here), 1);
    CHECK_OK(cube_client_write(c, h, b, n)); /* queued: the runner issues it */
    memset(into, 0, n);
    CHECK_OK(cube_client_read_into(c, h, into, n));
    CHECK(memcmp(into, b, n) == 0);
    CHECK_OK(cube_client_sync(c));
    cube_future_t* f = NULL;
    REQUIRE_OK(cube_client_read_async(c, 1, &h, &f));
    CHECK(cube_future_is_ready(f));
    cube_bytes_t* out = NULL;
    CHECK_OK(cube_future_wait(f, 0, &out));
    CHECK(out && cube_bytes_size(out) == n && memcmp(cube_bytes_const_data(out), b, n) == 0);
    cube_bytes_release(out);
    cube_future_release(f);
    cube__backend_set_trace(NULL, NULL);
    /* The first and the last read ran here (the middle one ran where the
     * write's task left it). */
    CHECK(atomic_load(&g_reads_here) >= 2);
    CHECK_EQ_U64(atomic_load(&g_reads_here) + atomic_load(&g_reads_elsewhere), 3);
    cube_handle_release(h);
    free(a);
    free(b);
    free(into);
  }
  cube_client_release(c);
  cube_shutdown();
  mock_stats_t st;
  mock_stats(&st);
  CHECK_EQ_U64(st.context_pushes_outstanding, 0);
}

/* Memory given back by cleanup reaches the driver (cuMemFreeAsync), and an
 * allocation past the device's memory is an OUT_OF_MEMORY status with the
 * report, after which the client still works. */
CUBE_TEST(cleanup_and_out_of_memory) {
  MOCK_SETUP("0");
  setenv("CUBE_MOCK_CUDA_MEMORY", "268435456", 1);
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  cube_handle_t hs[16];
  size_t made = 0;
  cube_status_t s = CUBE_OK;
  for (; made < 16; ++made) {
    s = cube_client_empty(c, 40u << 20, &hs[made]);
    if (s) break;
  }
  REQUIRE(s != CUBE_OK); /* 16 x 40 MiB cannot fit in 256 MiB */
  CHECK(cube_status_code(s) == CUBE_STATUS_OUT_OF_MEMORY);
  CHECK(strstr(cube_status_message(s), "cuda") != NULL);
  cube_memory_report_t rep = {0};
  uint64_t requested = 0;
  CHECK(cube_status_oom_report(s, &requested, &rep));
  CHECK_EQ_U64(requested, 40u << 20);
  fprintf(stderr, "after %zu: %s\n", made, cube_status_message(s));
  cube_status_free(s);
  CHECK(made >= 4);
  for (size_t i = 0; i < made; ++i) cube_handle_release(hs[i]);
  CHECK_OK(cube_client_sync(c));
  mock_stats_t before, after;
  mock_stats(&before);
  CHECK(before.device_bytes_used >= (uint64_t)made * (40u << 20));
  CHECK_OK(cube_client_memory_cleanup(c));
  CHECK_OK(cube_client_sync(c));
  mock_stats(&after);
  CHECK(after.device_bytes_used < before.device_bytes_used);
  CHECK(after.async_frees > before.async_frees);
  /* Usable again. */
  unsigned char data[777];
  fill_random(data, sizeof(data), 5);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  CHECK(cube_test_read_equals(c, h, data, sizeof(data)));
  cube_handle_release(h);
  cube_client_release(c);
  cube_shutdown();
}

/* A pool hit (the same size allocated and released again and again) is
 * served by cube's pools alone: no allocation, free or copy reaches the
 * driver, and no context is left pushed. Only the first allocation (a new
 * page) calls cuMemAllocAsync. */
CUBE_TEST(pool_hit_makes_no_driver_call) {
  MOCK_SETUP("0");
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  mock_stats_t start, before, after;
  mock_stats(&start);
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 1u << 20, &h));
  cube_handle_release(h);
  mock_stats(&before);
  CHECK(before.async_allocs > start.async_allocs);
  for (int i = 0; i < 10000; ++i) {
    REQUIRE_OK(cube_client_empty(c, 1u << 20, &h));
    cube_handle_release(h);
  }
  mock_stats(&after);
  CHECK_EQ_U64(after.async_allocs, before.async_allocs);
  CHECK_EQ_U64(after.async_frees, before.async_frees);
  CHECK_EQ_U64(after.copies, before.copies);
  CHECK_EQ_U64(after.context_pushes_outstanding, 0);
  CHECK_OK(cube_client_sync(c));
  cube_client_release(c);
  cube_shutdown();
}

/* Pinned staging comes from cuMemHostAlloc; an upload from it and a read
 * result kept past cube_shutdown stay valid. */
CUBE_TEST(staging_and_read_past_shutdown) {
  MOCK_SETUP("100");
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  size_t n = (1u << 20) + 3;
  cube_bytes_t* staged = NULL;
  REQUIRE_OK(cube_client_reserve_staging(c, 1, &n, &staged));
  CHECK(cube_bytes_property(staged) == CUBE_BYTES_PINNED);
  fill_random(cube_bytes_data(staged), n, 42);
  unsigned char* copy = malloc(n);
  REQUIRE(copy);
  memcpy(copy, cube_bytes_const_data(staged), n);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create(c, staged, &h)); /* consumes |staged| */
  cube_bytes_t* kept = NULL;
  REQUIRE_OK(cube_client_read_one(c, h, &kept));
  cube_handle_release(h);
  cube_client_release(c);
  cube_shutdown();
  CHECK(cube_bytes_size(kept) == n && memcmp(cube_bytes_const_data(kept), copy, n) == 0);
  cube_bytes_release(kept);
  free(copy);
  cube_shutdown(); /* frees the orphaned pinned pool */
}

/* Staged copies with host memory that was never touched (the staging ring
 * maps its pages first, cube__prefault): an upload from an untouched mapping
 * gives a buffer of zeros, and a read into an untouched mapping gives the
 * buffer's bytes; odd sizes over several staging chunks, random data. */
CUBE_TEST(staged_copies_with_untouched_host_memory) {
  MOCK_SETUP("0");
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  const size_t n = (9u << 20) + 4093;
  void* src = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* dst = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(src != MAP_FAILED && dst != MAP_FAILED);
  cube_handle_t zeros;
  REQUIRE_OK(cube_client_create_from_slice(c, src, n, &zeros));
  unsigned char* back = malloc(n);
  REQUIRE(back);
  memset(back, 0xA5, n);
  REQUIRE_OK(cube_client_read_into(c, zeros, back, n));
  size_t nonzero = 0;
  for (size_t i = 0; i < n; ++i) nonzero += back[i] != 0;
  CHECK_EQ_U64(nonzero, 0);
  fill_random(back, n, 77);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, back, n, &h));
  REQUIRE_OK(cube_client_read_into(c, h, dst, n));
  CHECK(memcmp(dst, back, n) == 0);
  cube_handle_release(zeros);
  cube_handle_release(h);
  free(back);
  munmap(src, n);
  munmap(dst, n);
  cube_client_release(c);
  cube_shutdown();
}

static cube_status_t upload_twice(void* user) {
  cube_client_t* c = user;
  static unsigned char data[300000];
  fill_random(data, sizeof(data), 8);
  cube_handle_t h[2];
  cube_status_t s0 = cube_client_create_from_slice(c, data, sizeof(data), &h[0]);
  if (s0) return s0;
  cube_status_t s = cube_client_create_from_slice(c, data, sizeof(data), &h[1]);
  cube_handle_release(h[0]);
  if (!s) cube_handle_release(h[1]);
  return s;
}

/* Profiling brackets the work with device events. */
CUBE_TEST(profile_uses_device_time) {
  MOCK_SETUP("3000");
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  cube_profile_duration_t d;
  memset(&d, 0, sizeof(d));
  REQUIRE_OK(cube_client_profile(c, upload_twice, c, "uploads", &d));
  CHECK(d.method == CUBE_TIMING_DEVICE);
  /* Two chunked copies of 3 ms each on the mock's stream, at least. */
  CHECK(d.end_ns - d.start_ns >= 5000000ull);
  CHECK(d.end_ns - d.start_ns < 5000000000ull);
  cube_client_release(c);
  cube_shutdown();
}

static const char* saxpy_src =
    "CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a) {\n"
    "  uint32_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(y)) CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "}\n";

/* A dialect kernel of saxpy_src (cube dim 256). */
static cube_status_t saxpy_kernel(cube_kernel_t** out) {
  cube_kernel_desc_t d;
  cube_kernel_desc_initialize(&d);
  d.name = "saxpy";
  d.source = saxpy_src;
  d.entry = "saxpy";
  d.cube_dim = (cube_dim_t){256, 1, 1};
  return cube_kernel_create(&d, out);
}

/* Kernels: the dialect unit compiles with NVRTC (when installed) and the
 * launch the mock refuses is a deferred LAUNCH_FAILED naming the kernel; a
 * syntax error is COMPILATION_FAILED with NVRTC's log at the user's line; a
 * native CPU kernel is refused by name. */
CUBE_TEST(kernels_compile_and_fail_cleanly) {
  MOCK_SETUP("0");
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = "saxpy";
  d.source = saxpy_src;
  d.entry = "saxpy";
  d.cube_dim = (cube_dim_t){256, 1, 1};
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cube_kernel_create(&d, &k));
  cube_status_t pre = cube_client_precompile(c, 1, &k, CUBE_EXEC_CHECKED);
  bool nvrtc = pre == CUBE_OK;
  if (pre) {
    CHECK(cube_status_code(pre) == CUBE_STATUS_UNAVAILABLE);
    CHECK(strstr(cube_status_message(pre), "NVRTC") != NULL);
    fprintf(stderr, "no NVRTC: %s\n", cube_status_message(pre));
    cube_status_free(pre);
  }
  float xs[1000], ys[1000];
  fill_random(xs, sizeof(xs), 1);
  fill_random(ys, sizeof(ys), 2);
  cube_handle_t x, y;
  REQUIRE_OK(cube_client_create_from_slice(c, xs, sizeof(xs), &x));
  REQUIRE_OK(cube_client_create_from_slice(c, ys, sizeof(ys), &y));
  cube_arg_t args[3] = {cube_arg_buffer(x), cube_arg_buffer(y), cube_arg_f32(2.0f)};
  cube_count_t count = cube_count_static(4, 1, 1);
  /* The launch compiles first (to learn the function's own limits): without
   * NVRTC it fails itself; with it the mock's refusal is deferred. */
  if (nvrtc) {
    CHECK_OK(cube_client_launch(c, k, count, 3, args));
    CHECK_STATUS(cube_client_sync(c), CUBE_STATUS_LAUNCH_FAILED, "saxpy", "CUDA_ERROR_NOT_SUPPORTED");
  } else {
    CHECK_STATUS(cube_client_launch(c, k, count, 3, args), CUBE_STATUS_UNAVAILABLE, "saxpy");
  }
  CHECK_OK(cube_client_sync(c)); /* the errors were taken */
  /* x (CUBE_ARRAY(const float, x): read-only) keeps its contents; y, which
   * the failed launch should have written, holds no valid contents (taint)
   * until written whole. */
  CHECK(cube_test_read_equals(c, x, xs, sizeof(xs)));
  if (nvrtc) {
    cube_bytes_t* b = NULL;
    CHECK_STATUS(cube_client_read_one(c, y, &b), CUBE_STATUS_DATA_LOST, "saxpy",
                 "CUDA_ERROR_NOT_SUPPORTED");
    CHECK_OK(cube_client_write(c, y, ys, sizeof(ys)));
  }
  CHECK(cube_test_read_equals(c, y, ys, sizeof(ys)));
  cube_kernel_release(k);

  if (nvrtc) {
    d.source = "CUBE_KERNEL(broken, CUBE_ARRAY(float, y)) {\n  y[0] = 1.0f\n}\n";
    d.name = "broken";
    d.entry = "broken";
    REQUIRE_OK(cube_kernel_create(&d, &k));
    CHECK_STATUS(cube_client_precompile(c, 1, &k, CUBE_EXEC_CHECKED),
                 CUBE_STATUS_COMPILATION_FAILED, "broken", "NVRTC", "broken.cube:3:");
    cube_kernel_release(k);
  }
  cube_handle_release(x);
  cube_handle_release(y);
  cube_client_release(c);
  cube_shutdown();
}

/* Where launches and replays run (docs/architecture.md, "How a call
 * travels"): the launch or replay right after a read or sync that ran on the
 * calling thread runs there too when nothing is queued ahead; the next one of
 * a burst is queued to the runner; another thread's blocking call does not
 * count for this thread; CUBE_CALLER_RUNS=0 sends everything to the runner.
 * The trace hook tells the thread of each launch and graph launch. */
static pthread_t g_launcher;
static atomic_int g_launches_here, g_launches_elsewhere;
static void count_launches(void* user, const cube__backend_call_t* call) {
  (void)user;
  if ((call->slot != CUBE__SLOT_LAUNCH && call->slot != CUBE__SLOT_GRAPH_LAUNCH) ||
      call->status >= 0)
    return;
  atomic_fetch_add(pthread_equal(pthread_self(), g_launcher) ? &g_launches_here
                                                              : &g_launches_elsewhere,
                   1);
}

/* Runs |n| launches of |k| then a sync, and says where the launches ran. */
static void launches_where(cube_client_t* c, cube_kernel_t* k, const cube_arg_t* args, int n,
                           int* here, int* elsewhere) {
  atomic_store(&g_launches_here, 0);
  atomic_store(&g_launches_elsewhere, 0);
  for (int i = 0; i < n; ++i) CHECK_OK(cube_client_launch(c, k, cube_count_static(4, 1, 1), 3, args));
  CHECK_OK(cube_client_sync(c));
  *here = atomic_load(&g_launches_here);
  *elsewhere = atomic_load(&g_launches_elsewhere);
}

/* Waits for everything queued, then syncs once more: that second sync finds
 * nothing ahead of it, so it runs on this thread (the first may have been
 * queued behind work still on the runner). */
static void settle(cube_client_t* c) {
  CHECK_OK(cube_client_sync(c));
  CHECK_OK(cube_client_sync(c));
}

static void* sync_on_other_thread(void* p) {
  cube_client_t* c = p;
  cube_status_t s = cube_client_sync(c); /* runs there: this thread's blocking call */
  cube_status_free(s);
  return NULL;
}

CUBE_TEST(launch_and_replay_after_a_blocking_call_on_caller) {
  MOCK_SETUP("0");
  setenv("CUBE_MOCK_CUDA_LAUNCH_OK", "1", 1); /* launches succeed (and run nothing) */
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  REQUIRE(!cube_client_is_blocking(c));
  cube_kernel_t* k = NULL;
  REQUIRE_OK(saxpy_kernel(&k));
  cube_status_t pre = cube_client_precompile(c, 1, &k, CUBE_EXEC_CHECKED);
  if (pre) {
    fprintf(stderr, "no NVRTC: %s\n", cube_status_message(pre));
    cube_status_free(pre);
    cube_kernel_release(k);
    cube_client_release(c);
    cube_shutdown();
    unsetenv("CUBE_MOCK_CUDA_LAUNCH_OK");
    CUBE_SKIP("NVRTC is not available: no dialect kernel to launch");
  }
  float xs[1000];
  fill_random(xs, sizeof(xs), 11);
  cube_handle_t x, y;
  REQUIRE_OK(cube_client_create_from_slice(c, xs, sizeof(xs), &x));
  REQUIRE_OK(cube_client_create_from_slice(c, xs, sizeof(xs), &y));
  cube_arg_t args[3] = {cube_arg_buffer(x), cube_arg_buffer(y), cube_arg_f32(2.0f)};
  g_launcher = pthread_self();
  cube__backend_set_trace(count_launches, NULL);
  int here = 0, elsewhere = 0;

  /* After a sync that ran here: the first launch here, the other three on
   * the runner. */
  settle(c);
  launches_where(c, k, args, 4, &here, &elsewhere);
  CHECK_EQ_U64(here, 1);
  CHECK_EQ_U64(elsewhere, 3);
  /* After a read that ran here: the same. */
  settle(c);
  CHECK(cube_test_read_equals(c, x, xs, sizeof(xs)));
  launches_where(c, k, args, 2, &here, &elsewhere);
  CHECK_EQ_U64(here, 1);
  CHECK_EQ_U64(elsewhere, 1);
  /* A launch then a read, over and over: every launch here (each read finds
   * nothing ahead: the launch before it ran here). */
  settle(c);
  atomic_store(&g_launches_here, 0);
  atomic_store(&g_launches_elsewhere, 0);
  for (int i = 0; i < 20; ++i) {
    CHECK_OK(cube_client_launch(c, k, cube_count_static(4, 1, 1), 3, args));
    cube_bytes_t* b = NULL;
    CHECK_OK(cube_client_read_one(c, y, &b));
    cube_bytes_release(b);
  }
  CHECK_EQ_U64(atomic_load(&g_launches_here), 20);
  CHECK_EQ_U64(atomic_load(&g_launches_elsewhere), 0);
  /* Another thread's sync is not this thread's blocking call. */
  CHECK_OK(cube_client_flush(c)); /* a queued blocking call: nothing follows it here */
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, sync_on_other_thread, c) == 0);
  pthread_join(th, NULL);
  launches_where(c, k, args, 1, &here, &elsewhere);
  CHECK_EQ_U64(here, 0);
  CHECK_EQ_U64(elsewhere, 1);
  /* Replays: a loop of replay, sync replays on this thread; a burst after
   * a sync, its first replay only. */
  REQUIRE_OK(cube_client_capture_begin(c));
  CHECK_OK(cube_client_launch(c, k, cube_count_static(4, 1, 1), 3, args));
  CHECK_OK(cube_client_launch(c, k, cube_count_static(4, 1, 1), 3, args));
  cube_graph_t* g = NULL;
  REQUIRE_OK(cube_client_capture_end(c, &g));
  settle(c);
  atomic_store(&g_launches_here, 0);
  atomic_store(&g_launches_elsewhere, 0);
  for (int i = 0; i < 5; ++i) {
    CHECK_OK(cube_client_replay(c, g, 0, NULL));
    CHECK_OK(cube_client_sync(c));
  }
  int replay_here = atomic_load(&g_launches_here);
  CHECK_EQ_U64(atomic_load(&g_launches_elsewhere), 0);
  CHECK(replay_here >= 5); /* natively one graph launch a replay, else two launches */
  settle(c);
  atomic_store(&g_launches_here, 0);
  for (int i = 0; i < 3; ++i) CHECK_OK(cube_client_replay(c, g, 0, NULL));
  CHECK_OK(cube_client_sync(c));
  CHECK_EQ_U64(atomic_load(&g_launches_here), replay_here / 5); /* the first replay */
  CHECK_EQ_U64(atomic_load(&g_launches_elsewhere), 2 * (replay_here / 5));
  /* CUBE_CALLER_RUNS=0: everything on the runner. */
  REQUIRE_OK(cube_option_set_u64(CUBE_OPTION_CALLER_RUNS, 0));
  settle(c);
  launches_where(c, k, args, 2, &here, &elsewhere);
  CHECK_EQ_U64(here, 0);
  CHECK_EQ_U64(elsewhere, 2);
  REQUIRE_OK(cube_option_set_u64(CUBE_OPTION_CALLER_RUNS, 1));
  cube__backend_set_trace(NULL, NULL);
  cube_graph_release(g);
  cube_handle_release(x);
  cube_handle_release(y);
  cube_kernel_release(k);
  cube_client_release(c);
  cube_shutdown();
  unsetenv("CUBE_MOCK_CUDA_LAUNCH_OK");
  mock_stats_t st;
  mock_stats(&st);
  CHECK_EQ_U64(st.context_pushes_outstanding, 0);
}

/* cube puts back the calling thread's context after every call: a program's
 * own CUDA code on the same thread keeps its context (here: none at all, and
 * one of its own). */
CUBE_TEST(callers_context_is_left_alone) {
  MOCK_SETUP("0");
#ifdef CUBE_MOCK_CUDA_PATH
  void* lib = dlopen(CUBE_MOCK_CUDA_PATH, RTLD_NOW);
  REQUIRE(lib);
  typedef CUresult_t (*get_proc_t)(const char*, void**, int, uint64_t, int*);
  get_proc_t get = (get_proc_t)(uintptr_t)dlsym(lib, "cuGetProcAddress_v2");
  REQUIRE(get);
  void *getp = NULL, *setp = NULL;
  REQUIRE(get("cuCtxGetCurrent", &getp, 12000, 0, NULL) == 0);
  REQUIRE(get("cuCtxSetCurrent", &setp, 12000, 0, NULL) == 0);
  CUresult_t (*ctx_get)(void**) = (CUresult_t (*)(void**))(uintptr_t)getp;
  CUresult_t (*ctx_set)(void*) = (CUresult_t (*)(void*))(uintptr_t)setp;
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  void* cur = (void*)1;
  CHECK(ctx_get(&cur) == 0 && cur == NULL); /* loading left none current */
  int mine = 0;
  REQUIRE(ctx_set(&mine) == 0);
  unsigned char data[5000];
  fill_random(data, sizeof(data), 3);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  CHECK(ctx_get(&cur) == 0 && cur == &mine);
  CHECK(cube_test_read_equals(c, h, data, sizeof(data)));
  cube_handle_release(h);
  CHECK_OK(cube_client_memory_cleanup(c));
  CHECK(ctx_get(&cur) == 0 && cur == &mine);
  REQUIRE(ctx_set(NULL) == 0);
  cube_client_release(c);
  cube_shutdown();
  mock_stats_t st;
  mock_stats(&st);
  CHECK_EQ_U64(st.context_pushes_outstanding, 0);
  dlclose(lib);
#endif
}

/* Fault injection ----------------------------------------------------------- */

typedef struct {
  int ops;        /* operations that returned OK */
  int errors;     /* operations that returned an error status */
  int corrupted;  /* reads that returned OK with wrong bytes: never allowed */
} workload_result_t;

static void note(workload_result_t* r, cube_status_t s, const char* what) {
  if (!s) {
    r->ops++;
    return;
  }
  r->errors++;
  const char* m = cube_status_message(s);
  /* Every failure names what failed. */
  if (!m || strlen(m) < 10) {
    fprintf(stderr, "%s: status without a message\n", what);
    r->corrupted++;
  }
  cube_status_free(s);
}

/* Uploads, reads back and compares buffers and a pitched tensor, cleans up
 * and shuts down; every call either succeeds or returns a status. */
__attribute__((unused)) static void workload(unsigned seed, workload_result_t* r) {
  cube_client_t* c = NULL;
  cube_status_t s = cube_client_load(cuda0, &c);
  if (s) {
    note(r, s, "load");
    cube_shutdown();
    return;
  }
  const size_t sizes[] = {100, 70001, (5u << 20) + 3};
  for (size_t k = 0; k < 3; ++k) {
    size_t n = sizes[k];
    unsigned char* data = malloc(n);
    if (!data) continue;
    fill_random(data, n, seed + (unsigned)k);
    cube_handle_t h;
    s = cube_client_create_from_slice(c, data, n, &h);
    if (!s) {
      r->ops++;
      cube_bytes_t* b = NULL;
      cube_status_t rs = cube_client_read_one(c, h, &b);
      if (!rs && (cube_bytes_size(b) != n || memcmp(cube_bytes_const_data(b), data, n) != 0)) {
        fprintf(stderr, "read of %zu bytes returned OK with wrong bytes\n", n);
        r->corrupted++;
      }
      bool read_ok = !rs;
      note(r, rs, "read");
      cube_bytes_release(b);
      /* And a copy of it, on the device. */
      cube_handle_t h2;
      cube_status_t es = read_ok ? cube_client_empty(c, n, &h2) : CUBE_OK;
      if (read_ok && !es) {
        cube_status_t cs = cube_client_copy(c, h, h2);
        cube_bytes_t* b2 = NULL;
        cube_status_t rs2 = cs ? CUBE_OK : cube_client_read_one(c, h2, &b2);
        if (!cs && !rs2 &&
            (cube_bytes_size(b2) != n || memcmp(cube_bytes_const_data(b2), data, n) != 0)) {
          fprintf(stderr, "read of a copy of %zu bytes returned OK with wrong bytes\n", n);
          r->corrupted++;
        }
        note(r, cs, "copy");
        if (!cs) note(r, rs2, "read of the copy");
        cube_bytes_release(b2);
        cube_handle_release(h2);
      } else if (read_ok) {
        note(r, es, "empty");
      }
      cube_handle_release(h);
    } else {
      note(r, s, "create");
    }
    free(data);
  }
  const uint64_t shape[2] = {9, 333};
  float t_data[9 * 333];
  fill_random(t_data, sizeof(t_data), seed + 9);
  cube_tensor_t t;
  s = cube_client_create_tensor_from_slice(c, t_data, sizeof(t_data), 2, shape, 4, &t);
  if (!s) {
    cube_bytes_t* b = NULL;
    cube_status_t rs = cube_client_read_tensor(c, 1, &t, &b);
    if (!rs && (cube_bytes_size(b) != sizeof(t_data) ||
                memcmp(cube_bytes_const_data(b), t_data, sizeof(t_data)) != 0)) {
      fprintf(stderr, "tensor read returned OK with wrong bytes\n");
      r->corrupted++;
    }
    note(r, rs, "read_tensor");
    cube_bytes_release(b);
    cube_tensor_release(&t);
  } else {
    note(r, s, "create_tensor");
  }
  note(r, cube_client_memory_cleanup(c), "cleanup");
  note(r, cube_client_sync(c), "sync");
  note(r, cube_client_sync(c), "sync again");
  cube_client_release(c);
  cube_shutdown();
}

/* For each driver entry point, fail its 1st, 2nd, ... call during the
 * workload until the workload no longer reaches that call: every fault comes
 * back as a status (or is absorbed), no read ever returns wrong bytes, and a
 * clean run afterwards works. Under ASan this also proves nothing leaks on
 * the error paths. */
CUBE_TEST(driver_faults_surface_as_statuses) {
  MOCK_SETUP("0");
  MOCK_LATE_UPLOADS("200");
#ifdef CUBE_MOCK_CUDA_PATH
  /* Load the mock through cube first, so the functions below are its. */
  REQUIRE_OK(cube_backend_status(CUBE_BACKEND_CUDA));
  void* lib = dlopen(CUBE_MOCK_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(lib);
  void (*fail)(const char*, long) = (void (*)(const char*, long))(uintptr_t)dlsym(lib, "cube_mock_cuda_fail");
  int (*fired)(void) = (int (*)(void))(uintptr_t)dlsym(lib, "cube_mock_cuda_faults_fired");
  REQUIRE(fail && fired);
  static const char* const sites[] = {"cuStreamCreate", "cuStreamSynchronize", "cuEventCreate",
                                      "cuEventRecord", "cuEventSynchronize", "cuStreamWaitEvent",
                                      "cuMemAllocAsync", "cuMemAlloc", "cuMemHostAlloc", "h2d", "d2h",
                                      "cuMemcpyDtoDAsync"};
  int injected = 0, surfaced = 0;
  for (size_t i = 0; i < sizeof(sites) / sizeof(sites[0]); ++i) {
    for (long n = 1; n <= 40; ++n) {
      int before = fired();
      if (getenv("CUBE_TEST_VERBOSE")) fprintf(stderr, "fault %s #%ld\n", sites[i], n);
      fail(sites[i], n);
      workload_result_t r = {0, 0, 0};
      workload((unsigned)(i * 100 + (size_t)n), &r);
      fail("", 0);
      CHECK(r.corrupted == 0);
      if (r.corrupted) fprintf(stderr, "site %s call %ld: corrupted\n", sites[i], n);
      if (fired() == before) break; /* the workload makes fewer calls than n */
      injected++;
      if (r.errors) surfaced++;
      /* The library recovers: a clean run right after works. */
      workload_result_t clean = {0, 0, 0};
      workload(7, &clean);
      CHECK(clean.errors == 0 && clean.corrupted == 0);
      if (clean.errors) fprintf(stderr, "site %s call %ld: no recovery\n", sites[i], n);
    }
  }
  fprintf(stderr, "%d faults injected, %d surfaced as statuses, the rest absorbed\n", injected,
          surfaced);
  CHECK(injected >= 30);
  CHECK(surfaced >= injected / 2);
  dlclose(lib);
#endif
}

//===----------------------------------------------------------------------===//
// Per-device parameters (cube_cuda_params_t)
//===----------------------------------------------------------------------===//

/* Uploads |n| random bytes to |c| and reads them back; the driver copies
 * (DMA operations) the upload took. */
static uint64_t staged_upload_copies(cube_client_t* c, size_t n, unsigned seed, bool* ok) {
  unsigned char* data = malloc(n);
  *ok = data != NULL;
  if (!data) return 0;
  fill_random(data, n, seed);
  mock_stats_t before, after;
  CHECK_OK(cube_client_sync(c));
  mock_stats(&before);
  cube_handle_t h;
  cube_status_t st = cube_client_create_from_slice(c, data, n, &h);
  CHECK_OK(st);
  if (st) {
    *ok = false;
    free(data);
    return 0;
  }
  CHECK_OK(cube_client_sync(c));
  mock_stats(&after);
  *ok = cube_test_read_equals(c, h, data, n);
  cube_handle_release(h);
  free(data);
  return after.copies - before.copies;
}

/* The staging chunk and the allocator given through cube_client_init are the
 * ones the device uses: a 1 MiB upload takes a DMA per chunk (17 of 64 KiB,
 * 2 of 1 MiB), and without async allocation no cuMemAllocAsync is made. */
CUBE_TEST(params_staging_chunk_and_async_alloc) {
  MOCK_SETUP("0");
  setenv("CUBE_MOCK_CUDA_DEVICES", "3", 1);
  setenv("CUBE_CUDA_STAGING_CHUNK", "256K", 1);
  cube_cuda_params_t small, big, env;
  cube_cuda_params_initialize(&env);
  CHECK_EQ_U64(env.struct_size, sizeof(env));
  CHECK(env.backend == CUBE_BACKEND_CUDA);
  CHECK_EQ_U64(env.staging_chunk, 256u << 10); /* from the environment */
  CHECK_EQ_U64(env.copy_threads, 0);
  CHECK(env.stream_copy == CUBE_CUDA_STREAM_COPY_DOWN);
  CHECK(env.async_alloc);
  small = env;
  small.staging_chunk = 64u << 10;
  small.async_alloc = false;
  big = env;
  big.staging_chunk = 1u << 20;
  big.stream_copy = CUBE_CUDA_STREAM_COPY_BOTH;
  big.copy_threads = 1;
  cube_server_options_t os, ob;
  cube_server_options_initialize(&os);
  cube_server_options_initialize(&ob);
  os.backend_params = &small;
  ob.backend_params = &big;
  cube_client_t *cs = NULL, *cb = NULL, *ce = NULL;
  REQUIRE_OK(cube_client_init(cuda0, &os, &cs));
  REQUIRE_OK(cube_client_init((cube_device_id_t){CUBE_BACKEND_CUDA, 1}, &ob, &cb));
  REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CUDA, 2}, &ce));
  const size_t n = (1u << 20) + 5;
  bool ok_s = false, ok_b = false, ok_e = false;
  mock_stats_t a0, a1;
  mock_stats(&a0);
  uint64_t copies_small = staged_upload_copies(cs, n, 11, &ok_s);
  mock_stats(&a1);
  CHECK_EQ_U64(a1.async_allocs, a0.async_allocs); /* async_alloc = false */
  mock_stats(&a0);
  uint64_t copies_big = staged_upload_copies(cb, n, 12, &ok_b);
  mock_stats(&a1);
  CHECK(a1.async_allocs > a0.async_allocs);
  uint64_t copies_env = staged_upload_copies(ce, n, 13, &ok_e);
  printf("DMA copies of a 1 MiB + 5 upload: 64 KiB chunks %llu, 1 MiB %llu, 256 KiB (env) %llu\n",
         (unsigned long long)copies_small, (unsigned long long)copies_big,
         (unsigned long long)copies_env);
  CHECK(ok_s && ok_b && ok_e);
  CHECK_EQ_U64(copies_small, 17);
  CHECK_EQ_U64(copies_big, 2);
  CHECK_EQ_U64(copies_env, 5);
  cube_client_release(cs);
  cube_client_release(cb);
  cube_client_release(ce);
  cube_shutdown();
}

CUBE_TEST(params_wrong_are_refused) {
  MOCK_SETUP("0");
  cube_cuda_params_t prm;
  cube_cuda_params_initialize(&prm);
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.backend_params = &prm;
  cube_client_t* c = NULL;
  prm.staging_chunk = 3;
  CHECK_STATUS(cube_client_init(cuda0, &o, &c), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_init",
               "cuda:0", "staging_chunk is 3", "64 KiB to 64 MiB", "multiple of 4 KiB",
               "CUBE_CUDA_STAGING_CHUNK");
  prm.staging_chunk = (64u << 20) + 4096;
  CHECK_STATUS(cube_client_init(cuda0, &o, &c), CUBE_STATUS_INVALID_ARGUMENT,
               "staging_chunk is 67112960");
  prm.staging_chunk = 1u << 20;
  prm.copy_threads = 300;
  CHECK_STATUS(cube_client_init(cuda0, &o, &c), CUBE_STATUS_INVALID_ARGUMENT,
               "copy_threads is 300", "[1, 256]");
  prm.copy_threads = 0;
  prm.stream_copy = (cube_cuda_stream_copy_t)7;
  CHECK_STATUS(cube_client_init(cuda0, &o, &c), CUBE_STATUS_INVALID_ARGUMENT, "stream_copy is 7",
               "0 to 3");
  prm.stream_copy = CUBE_CUDA_STREAM_COPY_UP;
  prm.struct_size = 12;
  CHECK_STATUS(cube_client_init(cuda0, &o, &c), CUBE_STATUS_INVALID_ARGUMENT,
               "struct_size is 12", "cube_cuda_params_initialize");
  prm.struct_size = (uint32_t)sizeof(prm);
  /* Another backend's parameters (a CPU struct) on a CUDA device. */
  cube_backend_params_header_t cpu_header = {(uint32_t)sizeof(cpu_header) + 4, CUBE_BACKEND_CPU};
  o.backend_params = &cpu_header;
  CHECK_STATUS(cube_client_init(cuda0, &o, &c), CUBE_STATUS_INVALID_ARGUMENT,
               "backend_params are for backend cpu", "cuda:0");
  CHECK(c == NULL);
  /* Corrected, the same device is created (nothing was left half made). */
  o.backend_params = &prm;
  REQUIRE_OK(cube_client_init(cuda0, &o, &c));
  bool ok = false;
  CHECK_EQ_U64(staged_upload_copies(c, (3u << 20) + 1, 21, &ok), 4);
  CHECK(ok);
  cube_client_release(c);
  cube_shutdown();
}

/* A malformed tunable in the environment no longer goes unnoticed until a
 * CUDA device is opened: every entry point names it. */
CUBE_TEST(env_tunable_malformed_is_named) {
  MOCK_SETUP("0");
  setenv("CUBE_CUDA_STREAM_COPY", "sideways", 1);
  cube_client_t* c = NULL;
  CHECK_STATUS(cube_client_load(cuda0, &c), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_load",
               "CUBE_CUDA_STREAM_COPY", "'sideways'", "down, up, 1, 0");
  CHECK_STATUS(cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &c),
               CUBE_STATUS_INVALID_ARGUMENT, "CUBE_CUDA_STREAM_COPY");
  unsetenv("CUBE_CUDA_STREAM_COPY");
  cube_shutdown();
  REQUIRE_OK(cube_client_load(cuda0, &c));
  cube_client_release(c);
  cube_shutdown();
}
