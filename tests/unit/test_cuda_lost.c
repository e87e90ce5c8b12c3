// cube-test-libs: cube_static
/* Lost devices (docs/failures.md, "Lost devices"): the CUDA backend over the
 * mock driver (tests/mock_cuda), whose cube_mock_cuda_fail_sticky() poisons a
 * device's context as a GPU's illegal address does: the failing call and
 * every later call on that device return the same error. cube must then
 * answer every call on the device with DEVICE_LOST at once, naming the device
 * and the first fault, without calling the driver about it again, complete
 * what waits on it, taint what queued work would have written, let the
 * program release everything, and keep the other devices (a second mock GPU,
 * the CPU) computing right answers. */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "client/handles.h"
#include "cube/cube.h"
#include "memory/memory.h"
#include "memory/taint.h"
#include "mock_cuda_faults.h"
#include "read_check.h"


/* NVRTC keeps allocations until exit; not ours to report. */
const char* __lsan_default_suppressions(void);
const char* __lsan_default_suppressions(void) { return "leak:libnvrtc\n"; }

enum {
  ERR_INVALID_VALUE = 1,
  ERR_OUT_OF_MEMORY = 2,
  ERR_INVALID_HANDLE = 400,
  ERR_LAUNCH_OUT_OF_RESOURCES = 701,
  ERR_UNKNOWN = 999,
  ERR_ILLEGAL_ADDRESS = 700,
};

static const cube_device_id_t cuda0 = {CUBE_BACKEND_CUDA, 0};
static const cube_device_id_t cuda1 = {CUBE_BACKEND_CUDA, 1};
static const cube_device_id_t cpu0 = {CUBE_BACKEND_CPU, 0};


/* Uploads |n| random bytes to |c|, copies them on the device, reads both
 * back and compares: 1 when every byte is right. */
static int roundtrip(cube_client_t* c, size_t n, unsigned seed) {
  unsigned char* data = malloc(n);
  if (!data) return 0;
  fill_random(data, n, seed);
  cube_handle_t h, h2;
  int ok = 0;
  cube_status_t st = cube_client_create_from_slice(c, data, n, &h);
  if (st) {
    fprintf(stderr, "roundtrip: %s\n", cube_status_message(st));
    cube_status_free(st);
    free(data);
    return 0;
  }
  st = cube_client_empty(c, n, &h2);
  if (!st) {
    st = cube_client_copy(c, h, h2);
    ok = !st && cube_test_read_equals(c, h, data, n) && cube_test_read_equals(c, h2, data, n);
    cube_handle_release(h2);
  }
  if (st) fprintf(stderr, "roundtrip: %s\n", cube_status_message(st));
  cube_status_free(st);
  cube_handle_release(h);
  free(data);
  return ok;
}

/* 1 when |s| is DEVICE_LOST naming cuda:0 and the root |root|; frees it. */
static int is_lost(cube_status_t s, const char* fn, const char* root) {
  int ok = cube_status_code(s) == CUBE_STATUS_DEVICE_LOST &&
           strstr(cube_status_message(s), "cuda:0 is lost") != NULL &&
           strstr(cube_status_message(s), root) != NULL &&
           (!fn || strncmp(cube_status_message(s), fn, strlen(fn)) == 0);
  if (!ok)
    fprintf(stderr, "expected DEVICE_LOST (%s, %s), got [%s] %s\n", fn ? fn : "-", root,
            cube_status_code_name(cube_status_code(s)), cube_status_message(s));
  cube_status_free(s);
  return ok;
}

static cube_status_t nothing(void* user) {
  (void)user;
  return CUBE_OK;
}

/* Every kind of call on a lost device's client: each returns DEVICE_LOST
 * naming its function, the device and |root|. Returns how many did not. */
static int every_call_refused(cube_client_t* c, cube_handle_t h, const char* root) {
  int bad = 0;
  unsigned char data[4096];
  fill_random(data, sizeof(data), 77);
  cube_handle_t out;
  cube_bytes_t* b = NULL;
  cube_future_t* f = NULL;
  cube_memory_usage_t usage;
  cube_memory_report_t report;
  memset(&report, 0, sizeof(report));
  cube_profile_duration_t dur;
  bad += !is_lost(cube_client_empty(c, 1000, &out), "cube_client_empty", root);
  bad += !is_lost(cube_client_create_from_slice(c, data, sizeof(data), &out),
                  "cube_client_create", root);
  bad += !is_lost(cube_client_write(c, h, data, sizeof(data)), "cube_client_write", root);
  bad += !is_lost(cube_client_read_one(c, h, &b), "cube_client_read", root);
  bad += !is_lost(cube_client_read_async(c, 1, &h, &f), "cube_client_read", root);
  bad += !is_lost(cube_client_copy(c, h, h), "cube_client_copy", root);
  bad += !is_lost(cube_client_sync(c), "cube_client_sync", root);
  bad += !is_lost(cube_client_sync_async(c, &f), "cube_client_sync_async", root);
  bad += !is_lost(cube_client_flush(c), "cube_client_flush", root);
  bad += !is_lost(cube_client_memory_usage(c, &usage), "cube_client_memory_usage", root);
  bad += !is_lost(cube_client_memory_report(c, &report), "cube_client_memory_report", root);
  bad += !is_lost(cube_client_memory_cleanup(c), "cube_client_memory_cleanup", root);
  bad += !is_lost(cube_client_profile(c, nothing, NULL, "x", &dur), "cube_client_profile", root);
  bad += !is_lost(cube_client_exclusive(c, nothing, NULL), "cube_client_exclusive", root);
  bad += !is_lost(cube_client_capture_begin(c), "cube_client_capture_begin", root);
  cube_device_id_t devs[2] = {cuda0, cuda1};
  bad += !is_lost(cube_client_all_reduce(c, h, h, CUBE_DTYPE_F32, 2, devs, CUBE_REDUCE_SUM),
                  "cube_client_all_reduce", root);
  return bad;
}

//===----------------------------------------------------------------------===//
// A fault in a stream operation
//===----------------------------------------------------------------------===//

/* A read's device-to-host copy hits an illegal address: the read returns it
 * as DEVICE_LOST, every later call on cuda:0 is refused at once without a
 * driver call, cuda:1 and the CPU keep computing, and everything is released
 * and shut down cleanly (ASan: nothing leaks). */
CUBE_TEST(read_fault_loses_only_its_device) {
  MOCK_SETUP("2");
  mock_t m;
  REQUIRE(mock_get(&m));
  cube_client_t *c0 = NULL, *c1 = NULL, *cpu = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c0));
  REQUIRE_OK(cube_client_load(cuda1, &c1));
  REQUIRE_OK(cube_client_load(cpu0, &cpu));
  CHECK(roundtrip(c0, 5003, 1));

  unsigned char data[3001];
  fill_random(data, sizeof(data), 2);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c0, data, sizeof(data), &h));
  CHECK_OK(cube_client_sync(c0));
  m.fail_sticky("d2h", 1, ERR_ILLEGAL_ADDRESS);
  cube_bytes_t* b = NULL;
  /* The failing call itself. */
  cube_status_t s = cube_client_read_one(c0, h, &b);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_DEVICE_LOST);
  CHECK(strstr(cube_status_message(s), "CUDA_ERROR_ILLEGAL_ADDRESS") != NULL);
  CHECK(strstr(cube_status_message(s), "cuda:0") != NULL);
  cube_status_free(s);
  CHECK(b == NULL);
  CHECK(m.lost(0) && !m.lost(1));

  /* Every later call: DEVICE_LOST at once, and the driver is not asked. */
  long calls = m.lost_calls();
  if (getenv("CUBE_TEST_VERBOSE")) {
    s = cube_client_sync(c0);
    fprintf(stderr, "%s\n", cube_status_message(s));
    cube_status_free(s);
  }
  CHECK_EQ_U64(every_call_refused(c0, h, "CUDA_ERROR_ILLEGAL_ADDRESS"), 0);
  CHECK_EQ_U64(every_call_refused(c0, h, "its read failed at 20"), 0);
  CHECK_EQ_U64(m.lost_calls(), calls);

  /* Other devices go on, with right answers. */
  for (unsigned i = 0; i < 4; ++i) {
    CHECK(roundtrip(c1, 1000 + 4097 * i, 10 + i));
    CHECK(roundtrip(cpu, 999 + 333 * i, 20 + i));
  }
  /* Releasing handles and clients of the lost device, and shutting down. */
  cube_handle_release(h);
  cube_client_release(c0);
  cube_client_release(c1);
  cube_client_release(cpu);
  cube_shutdown();
  CHECK_EQ_U64(m.lost_calls(), calls);
  m.restore(0);
}

//===----------------------------------------------------------------------===//
// Work queued when the device is lost
//===----------------------------------------------------------------------===//

typedef struct {
  cube_client_t* c;
  atomic_int entered, release;
  cube_status_t result;
} gate_t;

static cube_status_t gate_fn(void* user) {
  gate_t* g = user;
  atomic_store(&g->entered, 1);
  while (!atomic_load(&g->release)) sched_yield();
  return CUBE_OK;
}

static void* gate_thread(void* user) {
  gate_t* g = user;
  g->result = cube_client_exclusive(g->c, gate_fn, g);
  return NULL;
}

/* Work queued behind a held runner: a write (whose upload faults), then a
 * read and a sync whose futures are pending. When the runner goes on, the
 * write fails with the fault, the read and the sync find the device lost:
 * both futures complete with DEVICE_LOST, and the buffer the write should
 * have filled is tainted with the loss. */
/* A device lost before cube_shutdown: its context stays poisoned, so a new
 * client of it fails to load with DEVICE_LOST naming the fault (and the
 * loss record of the server that could not be made is freed: the ASan build
 * checks), and the other GPU loads and computes; cube_device_recover, which
 * has no server of it to reset, resets the context as it opens the device,
 * and then the device loads and round-trips new data. */
CUBE_TEST(device_lost_across_shutdown_is_recovered) {
  MOCK_SETUP("2");
  mock_t m;
  REQUIRE(mock_get(&m));
  cube_client_t* c0 = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c0));
  unsigned char data[1001];
  fill_random(data, sizeof(data), 44);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c0, data, sizeof(data), &h));
  m.fail_sticky("d2h", 1, ERR_ILLEGAL_ADDRESS);
  cube_bytes_t* b = NULL;
  CHECK_STATUS(cube_client_read_one(c0, h, &b), CUBE_STATUS_DEVICE_LOST,
               "CUDA_ERROR_ILLEGAL_ADDRESS");
  cube_handle_release(h);
  cube_client_release(c0);
  cube_shutdown();
  CHECK(m.lost(0) != 0);
  for (int i = 0; i < 3; ++i) {
    c0 = NULL;
    CHECK_STATUS(cube_client_load(cuda0, &c0), CUBE_STATUS_DEVICE_LOST, "cube_client_load",
                 "cuda:0", "CUDA_ERROR_ILLEGAL_ADDRESS");
    CHECK(c0 == NULL);
  }
  cube_client_t* c1 = NULL;
  REQUIRE_OK(cube_client_load(cuda1, &c1));
  CHECK(roundtrip(c1, 4099, 45));
  long resets = m.resets();
  CHECK_OK(cube_device_recover(cuda0));
  CHECK_EQ_U64(m.resets(), resets + 1);
  CHECK(m.lost(0) == 0);
  CHECK_OK(cube_device_recover(cuda0)); /* its server works now: nothing to do */
  CHECK_EQ_U64(m.resets(), resets + 1);
  c0 = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c0));
  CHECK(roundtrip(c0, 7001, 46));
  CHECK(roundtrip(c1, 999, 47));
  cube_client_release(c0);
  cube_client_release(c1);
  cube_shutdown();
  /* A device opened by the recovery that was never lost: not reset. */
  resets = m.resets();
  CHECK_OK(cube_device_recover(cuda1));
  CHECK_EQ_U64(m.resets(), resets);
  cube_shutdown();
  m.restore(0);
}

CUBE_TEST(queued_work_fails_and_futures_complete) {
  MOCK_SETUP("1");
  mock_t m;
  REQUIRE(mock_get(&m));
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  float first[777], second[777];
  fill_random(first, sizeof(first), 3);
  fill_random(second, sizeof(second), 4);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, first, sizeof(first), &h));
  CHECK(cube_test_read_equals(c, h, first, sizeof(first)));

  gate_t g = {c, 0, 0, CUBE_OK};
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, gate_thread, &g) == 0);
  while (!atomic_load(&g.entered)) sched_yield();
  CHECK_OK(cube_client_write(c, h, second, sizeof(second))); /* queued */
  cube_future_t *fr = NULL, *fs = NULL;
  CHECK_OK(cube_client_read_async(c, 1, &h, &fr));
  CHECK_OK(cube_client_sync_async(c, &fs));
  CHECK(!cube_future_is_ready(fr));
  m.fail_sticky("h2d", 1, ERR_ILLEGAL_ADDRESS);
  atomic_store(&g.release, 1);
  pthread_join(t, NULL);
  CHECK_OK(g.result);

  /* The read's future takes the stream's deferred error first (the write's
   * fault, itself DEVICE_LOST); the sync's finds the device lost. */
  cube_bytes_t* out = NULL;
  cube_status_t s = cube_future_wait(fr, 20ull * 1000000000ull, &out);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_DEVICE_LOST);
  CHECK(strstr(cube_status_message(s), "write of 3108 bytes") != NULL);
  CHECK(strstr(cube_status_message(s), "CUDA_ERROR_ILLEGAL_ADDRESS") != NULL);
  cube_status_free(s);
  CHECK(out == NULL);
  CHECK(is_lost(cube_future_wait(fs, 20ull * 1000000000ull, NULL), NULL,
                "CUDA_ERROR_ILLEGAL_ADDRESS"));
  cube_future_release(fr);
  cube_future_release(fs);

  /* The write's buffer holds no valid contents, and says why. */
  cube__handle_info_t info;
  REQUIRE_OK(cube__handle_get(h, "h", &info));
  cube__taint_t* taint = atomic_load(&info.mem->taint);
  CHECK(taint != NULL);
  if (taint) {
    cube_status_t ts = cube__taint_status(taint, "read of h");
    CHECK_EQ_U64(cube_status_code(ts), CUBE_STATUS_DATA_LOST);
    CHECK(strstr(cube_status_message(ts), "CUDA_ERROR_ILLEGAL_ADDRESS") != NULL);
    cube_status_free(ts);
  }
  CHECK(is_lost(cube_client_read_one(c, h, &out), "cube_client_read",
                "CUDA_ERROR_ILLEGAL_ADDRESS"));
  cube_handle_release(h);
  cube_client_release(c);
  cube_shutdown();
  m.restore(0);
}

//===----------------------------------------------------------------------===//
// A kernel that faults
//===----------------------------------------------------------------------===//

static const char* k_src =
    "CUBE_KERNEL(lost_scale, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a) {\n"
    "  uint32_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(y)) CUBE_STORE(y, i, a * CUBE_LOAD(x, i));\n"
    "}\n";

/* The kernel above (NULL if it cannot be made). */
static cube_kernel_t* scale_kernel(void) {
  cube_kernel_desc_t d;
  cube_kernel_desc_initialize(&d);
  d.name = "lost_scale";
  d.source = k_src;
  d.entry = "lost_scale";
  d.cube_dim = (cube_dim_t){256, 1, 1};
  cube_kernel_t* k = NULL;
  return cube_status_consume(cube_kernel_create(&d, &k)) == CUBE_STATUS_OK ? k : NULL;
}

/* The second of three launches faults (the mock's launches run nothing but
 * succeed, CUBE_MOCK_CUDA_LAUNCH_OK): the sync names the kernel and the
 * fault; the launch behind it is not run and its output is tainted with the
 * loss; later launches are refused at the call. Needs NVRTC (the kernel is
 * compiled at its first launch). */
CUBE_TEST(launch_fault_names_the_kernel) {
  MOCK_SETUP("2");
  setenv("CUBE_MOCK_CUDA_LAUNCH_OK", "1", 1);
  mock_t m;
  REQUIRE(mock_get(&m));
  cube_client_t *c = NULL, *c1 = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  REQUIRE_OK(cube_client_load(cuda1, &c1));
  cube_kernel_t* k = scale_kernel();
  REQUIRE(k != NULL);
  cube_status_t pre = cube_client_precompile(c, 1, &k, CUBE_EXEC_CHECKED);
  if (pre) {
    fprintf(stderr, "no NVRTC: %s\n", cube_status_message(pre));
    cube_status_free(pre);
    cube_kernel_release(k);
    cube_client_release(c);
    cube_client_release(c1);
    cube_shutdown();
    CUBE_SKIP("NVRTC is not installed: kernels cannot be compiled");
  }
  float xs[1000];
  fill_random(xs, sizeof(xs), 5);
  cube_handle_t x, y, z;
  REQUIRE_OK(cube_client_create_from_slice(c, xs, sizeof(xs), &x));
  REQUIRE_OK(cube_client_empty(c, sizeof(xs), &y));
  REQUIRE_OK(cube_client_empty(c, sizeof(xs), &z));
  cube_count_t count = cube_count_static(4, 1, 1);
  cube_arg_t a1[3] = {cube_arg_buffer(x), cube_arg_buffer(y), cube_arg_f32(2.0f)};
  cube_arg_t a2[3] = {cube_arg_buffer(y), cube_arg_buffer(z), cube_arg_f32(3.0f)};
  CHECK_OK(cube_client_launch(c, k, count, 3, a1));
  CHECK_OK(cube_client_sync(c));
  m.fail_sticky("cuLaunchKernel", 1, ERR_ILLEGAL_ADDRESS);
  /* The launch may run on this thread or on the runner: either way its
   * fault is the stream's (or, when it ran here, its own) status. */
  cube_status_t s1 = cube_client_launch(c, k, count, 3, a1);
  cube_status_t s2 = s1 ? CUBE_OK : cube_client_launch(c, k, count, 3, a2);
  cube_status_t s3 = cube_client_sync(c);
  cube_status_t first = s1 ? s1 : (s2 ? s2 : s3);
  CHECK_EQ_U64(cube_status_code(first), CUBE_STATUS_DEVICE_LOST);
  CHECK(strstr(cube_status_message(first), "lost_scale") != NULL);
  CHECK(strstr(cube_status_message(first), "CUDA_ERROR_ILLEGAL_ADDRESS") != NULL);
  if (first != s1) cube_status_free(s1);
  if (first != s2) cube_status_free(s2);
  if (first != s3) cube_status_free(s3);
  cube_status_free(first);
  long calls = m.lost_calls();
  CHECK(is_lost(cube_client_launch(c, k, count, 3, a1), "cube_client_launch", "lost_scale"));
  CHECK(is_lost(cube_client_precompile(c, 1, &k, CUBE_EXEC_CHECKED), "cube_client_precompile",
                "CUDA_ERROR_ILLEGAL_ADDRESS"));
  CHECK_EQ_U64(m.lost_calls(), calls);
  /* y was to be written by the launch that faulted: tainted. */
  cube__handle_info_t info;
  REQUIRE_OK(cube__handle_get(y, "y", &info));
  CHECK(atomic_load(&info.mem->taint) != NULL);
  CHECK(roundtrip(c1, 4099, 6));
  cube_handle_release(x);
  cube_handle_release(y);
  cube_handle_release(z);
  cube_kernel_release(k);
  cube_client_release(c);
  cube_client_release(c1);
  cube_shutdown();
  m.restore(0);
}

//===----------------------------------------------------------------------===//
// Which errors lose a device
//===----------------------------------------------------------------------===//

/* A failure that does not poison the context (a bad value, out of memory,
 * an invalid handle, too many resources for a launch, an unknown error)
 * fails its call and nothing else: the device goes on. Each error the
 * backend calls sticky loses the device instead. */
CUBE_TEST(only_sticky_errors_lose_the_device) {
  MOCK_SETUP("1");
  mock_t m;
  REQUIRE(mock_get(&m));
  static const int benign[] = {ERR_INVALID_VALUE, ERR_OUT_OF_MEMORY, ERR_INVALID_HANDLE,
                               ERR_LAUNCH_OUT_OF_RESOURCES, ERR_UNKNOWN, 46 /* unavailable */};
  static const int sticky[] = {214, 220, 226, 700, 702, 709, 710, 714,
                               715, 716, 717, 718, 719, 721, 911};
  for (size_t i = 0; i < sizeof(benign) / sizeof(benign[0]) + sizeof(sticky) / sizeof(sticky[0]);
       ++i) {
    bool is_sticky = i >= sizeof(benign) / sizeof(benign[0]);
    int code = is_sticky ? sticky[i - sizeof(benign) / sizeof(benign[0])] : benign[i];
    cube_client_t* c = NULL;
    REQUIRE_OK(cube_client_load(cuda0, &c));
    unsigned char data[2049];
    fill_random(data, sizeof(data), (unsigned)code);
    cube_handle_t h;
    REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
    CHECK_OK(cube_client_sync(c));
    if (is_sticky)
      m.fail_sticky("d2h", 1, code);
    else
      m.fail_with("d2h", 1, code);
    cube_bytes_t* b = NULL;
    cube_status_t s = cube_client_read_one(c, h, &b);
    char want[32];
    snprintf(want, sizeof(want), "error %d)", code);
    CHECK(s != CUBE_OK && strstr(cube_status_message(s), want) != NULL);
    if (is_sticky) {
      CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_DEVICE_LOST);
      CHECK(is_lost(cube_client_sync(c), "cube_client_sync", want));
    } else {
      CHECK(cube_status_code(s) != CUBE_STATUS_DEVICE_LOST);
      /* The device goes on: the same buffer reads right, new work too. */
      CHECK(cube_test_read_equals(c, h, data, sizeof(data)));
      CHECK(roundtrip(c, 3333, (unsigned)code));
    }
    if (cube_status_code(s) == CUBE_STATUS_DEVICE_LOST && !is_sticky)
      fprintf(stderr, "error %d lost the device: %s\n", code, cube_status_message(s));
    cube_status_free(s);
    cube_bytes_release(b);
    m.fail_with("", 0, 0);
    cube_handle_release(h);
    cube_client_release(c);
    cube_shutdown();
    m.restore(0);
  }
}

//===----------------------------------------------------------------------===//
// A sticky fault at every driver entry point
//===----------------------------------------------------------------------===//

/* A workload of uploads, device copies, reads, a second stream, cleanup and
 * syncs on cuda:0 while cuda:1 runs the same; each entry point's 1st, 2nd, ...
 * call (up to 6) is made to fault. Whatever it hits: no read returns wrong
 * bytes, cuda:0 ends lost (its next sync says so), cuda:1 computes right,
 * and everything shuts down (ASan: no leak). */
static void* other_stream(void* user) {
  cube_client_t* c = user;
  cube_client_t* mine = NULL;
  if (cube_status_consume(cube_client_clone(c, &mine)) == CUBE_STATUS_OK) {
    cube_status_free(cube_client_sync(mine));
    cube_client_release(mine);
  }
  return NULL;
}

static int lossy_workload(cube_client_t* c, unsigned seed) {
  int wrong = 0;
  for (size_t n = 100; n < 300000; n = n * 7 + 3) {
    unsigned char* data = malloc(n);
    if (!data) return wrong;
    fill_random(data, n, seed + (unsigned)n);
    cube_handle_t h, h2;
    if (cube_status_consume(cube_client_create_from_slice(c, data, n, &h)) == CUBE_STATUS_OK) {
      if (cube_status_consume(cube_client_empty(c, n, &h2)) == CUBE_STATUS_OK) {
        cube_status_free(cube_client_copy(c, h, h2));
        cube_bytes_t* b = NULL;
        if (!cube_status_consume(cube_client_read_one(c, h2, &b)) &&
            (cube_bytes_size(b) != n || memcmp(cube_bytes_const_data(b), data, n) != 0))
          wrong++;
        cube_bytes_release(b);
        cube_handle_release(h2);
      }
      pthread_t t;
      if (pthread_create(&t, NULL, other_stream, c) == 0) pthread_join(t, NULL);
      cube_handle_release(h);
    }
    free(data);
  }
  cube_status_free(cube_client_memory_cleanup(c));
  cube_status_free(cube_client_sync(c));
  return wrong;
}

CUBE_TEST(sticky_fault_at_every_entry_point) {
  MOCK_SETUP("2");
  mock_t m;
  REQUIRE(mock_get(&m));
  static const char* const sites[] = {
      "cuStreamCreate", "cuStreamSynchronize", "cuEventCreate", "cuEventRecord",
      "cuEventQuery", "cuEventSynchronize", "cuStreamWaitEvent", "cuMemAllocAsync",
      "cuMemFreeAsync", "cuMemHostAlloc", "h2d", "d2h", "cuMemcpyDtoDAsync",
      "cuCtxSynchronize", "cuMemGetInfo"};
  int lost = 0;
  for (size_t i = 0; i < sizeof(sites) / sizeof(sites[0]); ++i) {
    for (long n = 1; n <= 6; ++n) {
      cube_client_t *c = NULL, *c1 = NULL;
      REQUIRE_OK(cube_client_load(cuda0, &c));
      REQUIRE_OK(cube_client_load(cuda1, &c1));
      m.fail_sticky(sites[i], n, ERR_ILLEGAL_ADDRESS);
      CHECK_EQ_U64(lossy_workload(c, (unsigned)(i * 10 + (size_t)n)), 0);
      bool hit = m.lost(0) != 0;
      m.fail_sticky("", 0, 0);
      if (hit) {
        lost++;
        cube_status_t s = cube_client_sync(c);
        if (cube_status_code(s) != CUBE_STATUS_DEVICE_LOST)
          fprintf(stderr, "site %s call %ld: sync says [%s] %s\n", sites[i], n,
                  cube_status_code_name(cube_status_code(s)), cube_status_message(s));
        CHECK(is_lost(s, "cube_client_sync", "CUDA_ERROR_ILLEGAL_ADDRESS"));
      }
      CHECK(roundtrip(c1, 1000 + 77 * (size_t)n, (unsigned)i));
      cube_client_release(c);
      cube_client_release(c1);
      cube_shutdown();
      m.restore(0);
      if (!hit) break; /* the workload makes fewer such calls */
    }
  }
  fprintf(stderr, "%d sticky faults injected\n", lost);
  CHECK(lost >= 20);
}

//===----------------------------------------------------------------------===//
// The sweep again, recovering the device after each fault
//===----------------------------------------------------------------------===//

/* Every entry point of the mock driver that a sticky fault can hit (its
 * MOCK_STICKY sites). */
static const char* const every_site[] = {
    "cuCtxSynchronize", "cuStreamCreate", "cuStreamDestroy", "cuStreamSynchronize",
    "cuEventCreate", "cuEventRecord", "cuEventQuery", "cuEventSynchronize", "cuEventDestroy",
    "cuEventElapsedTime", "cuStreamWaitEvent", "cuLaunchHostFunc", "cuMemAlloc",
    "cuMemAllocAsync", "cuMemFree", "cuMemFreeAsync", "cuMemGetInfo", "cuMemHostAlloc",
    "cuMemFreeHost", "h2d", "d2h", "cuMemcpyDtoDAsync", "cuMemsetD32Async", "cuModuleLoadData",
    "cuModuleUnload", "cuModuleGetFunction", "cuFuncGetAttribute", "cuLaunchKernel",
    "cuGraphCreate", "cuGraphInstantiate", "cuGraphLaunch"};

/* A sweep that hangs fails, saying where, instead of waiting for the test
 * runner's timeout. */
static char g_sweep_where[128];
static void sweep_alarm(int sig) {
  (void)sig;
  static const char msg[] = "sticky_fault_sweep_recovers: hung at ";
  ssize_t r = write(2, msg, sizeof(msg) - 1);
  r = write(2, g_sweep_where, strlen(g_sweep_where));
  r = write(2, "\n", 1);
  (void)r;
  _exit(1);
}

static cube_status_t launch_one(void* user) {
  void** p = user;
  return cube_client_launch(p[0], p[1], cube_count_static(4, 1, 1), 3, p[2]);
}

/* Kernel work for the sweep (the mock's launches run nothing: only the
 * calls are exercised): launches, a profiled one, a captured graph replayed.
 * Statuses are ignored: the device may be lost at any of them. */
static void kernel_workload(cube_client_t* c, cube_kernel_t* k, cube_handle_t x, cube_handle_t y) {
  cube_arg_t args[3] = {cube_arg_buffer(x), cube_arg_buffer(y), cube_arg_f32(2.0f)};
  for (int i = 0; i < 3; ++i)
    cube_status_free(cube_client_launch(c, k, cube_count_static(4, 1, 1), 3, args));
  cube_status_free(
      cube_client_launch_mode(c, k, cube_count_static(4, 1, 1), 3, args, CUBE_EXEC_VALIDATE));
  void* p[3] = {c, k, args};
  cube_profile_duration_t d;
  cube_status_free(cube_client_profile(c, launch_one, p, "sweep", &d));
  if (cube_status_consume(cube_client_capture_begin(c)) == CUBE_STATUS_OK) {
    cube_status_free(cube_client_launch(c, k, cube_count_static(4, 1, 1), 3, args));
    cube_graph_t* g = NULL;
    if (cube_status_consume(cube_client_capture_end(c, &g)) == CUBE_STATUS_OK) {
      for (int i = 0; i < 2; ++i) cube_status_free(cube_client_replay(c, g, 0, NULL));
      cube_graph_release(g);
    }
  }
  cube_status_free(cube_client_sync(c));
}

/* For every entry point and its 1st, 2nd, ... call (up to 4) in a workload
 * of uploads, copies, reads, a second stream, cleanup, a memory ledger,
 * launches (the first loads the module; one in VALIDATE mode), a profiled
 * region and graph replays on cuda:0, a sticky fault; each one that hits is
 * recovered (cube_device_recover) and the device then: holds a restorable
 * buffer's contents bit for bit, reads a plain one as DATA_LOST, round-trips
 * new random data and runs a launch. The buffers made before the fault are
 * another stream's, so that the workload's stream starts with empty pools
 * (its allocations and frees reach the driver) and its launches wait for
 * that stream (events). Under a watchdog (no hang), and under ASan nothing
 * leaks. Kernels need NVRTC; without it the launches are left out and said
 * so. */
CUBE_TEST(sticky_fault_sweep_recovers) {
  MOCK_SETUP("1");
  setenv("CUBE_MOCK_CUDA_LAUNCH_OK", "1", 1);
  mock_t m;
  REQUIRE(mock_get(&m));
  signal(SIGALRM, sweep_alarm);
  int faults = 0, sites_hit = 0;
  bool kernels = false;
  {
    cube_client_t* c = NULL;
    REQUIRE_OK(cube_client_load(cuda0, &c));
    cube_kernel_t* k = scale_kernel();
    REQUIRE(k != NULL);
    cube_status_t pre = cube_client_precompile(c, 1, &k, CUBE_EXEC_CHECKED);
    kernels = pre == CUBE_OK;
    if (pre) fprintf(stderr, "no kernels (NVRTC): %s\n", cube_status_message(pre));
    cube_status_free(pre);
    cube_kernel_release(k);
    cube_client_release(c);
    cube_shutdown();
  }
  char missed[1024] = "";
  for (size_t i = 0; i < sizeof(every_site) / sizeof(every_site[0]); ++i) {
    bool site_hit = false;
    for (long n = 1; n <= 4; ++n) {
      snprintf(g_sweep_where, sizeof(g_sweep_where), "%s, call %ld", every_site[i], n);
      alarm(60);
      unsigned seed = (unsigned)(i * 16 + (size_t)n);
      cube_client_t *c = NULL, *cs = NULL;
      REQUIRE_OK(cube_client_load(cuda0, &c));
      REQUIRE_OK(cube_client_clone(c, &cs));
      cube_client_set_stream(cs, cube_stream_id_new());
      cube_kernel_t* k = kernels ? scale_kernel() : NULL;
      if (kernels) REQUIRE(k != NULL);
      /* On |cs|'s stream: a restorable buffer, a plain one, and a kernel's
       * operands. */
      size_t rn = 3001 + 7 * i, pn = 999 + 5 * (size_t)n;
      unsigned char* rdata = malloc(rn);
      unsigned char* pdata = malloc(pn);
      REQUIRE(rdata && pdata);
      fill_random(rdata, rn, seed);
      fill_random(pdata, pn, seed + 1);
      float xs[1000];
      fill_random(xs, sizeof(xs), seed + 2);
      cube_handle_t r, p, x, y;
      REQUIRE_OK(cube_client_create_restorable(cs, rdata, rn, &r));
      REQUIRE_OK(cube_client_create_from_slice(cs, pdata, pn, &p));
      REQUIRE_OK(cube_client_create_from_slice(cs, xs, sizeof(xs), &x));
      REQUIRE_OK(cube_client_empty(cs, sizeof(xs), &y));
      CHECK_OK(cube_client_sync(cs));

      m.fail_sticky_on(0, every_site[i], n, ERR_ILLEGAL_ADDRESS);
      cube_memory_ledger_t ledger;
      memset(&ledger, 0, sizeof(ledger));
      ledger.struct_size = sizeof(ledger);
      cube_status_free(cube_client_memory_ledger(c, &ledger));
      CHECK_EQ_U64(lossy_workload(c, seed), 0);
      if (k) kernel_workload(c, k, x, y);
      bool hit = m.lost(0) != 0;
      m.fail_sticky("", 0, 0);
      if (hit) {
        faults++;
        site_hit = true;
        /* cube learns of the loss at its next driver call at the latest. */
        CHECK(is_lost(cube_client_sync(c), "cube_client_sync", "CUDA_ERROR_ILLEGAL_ADDRESS"));
        cube_status_t s = cube_device_recover(cuda0);
        if (s)
          fprintf(stderr, "site %s call %ld: recovery says [%s] %s\n", every_site[i], n,
                  cube_status_code_name(cube_status_code(s)), cube_status_message(s));
        CHECK_OK(s);
        CHECK(m.lost(0) == 0);
        CHECK(cube_test_read_equals(c, r, rdata, rn));
        cube_bytes_t* b = NULL;
        s = cube_client_read_one(c, p, &b);
        CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_DATA_LOST);
        CHECK(b == NULL);
        cube_status_free(s);
        cube_bytes_release(b);
        CHECK(roundtrip(c, 4096 + 13 * (size_t)n, seed + 3));
        /* The plain buffer written whole again holds what was written. */
        CHECK_OK(cube_client_write(c, p, pdata, pn));
        CHECK(cube_test_read_equals(c, p, pdata, pn));
        if (k) {
          cube_arg_t args[3] = {cube_arg_buffer(x), cube_arg_buffer(y), cube_arg_f32(2.0f)};
          CHECK_OK(cube_client_write(c, x, xs, sizeof(xs)));
          CHECK_OK(cube_client_launch(c, k, cube_count_static(4, 1, 1), 3, args));
        }
        CHECK_OK(cube_client_sync(c));
      }
      cube_handle_release(r);
      cube_handle_release(p);
      cube_handle_release(x);
      cube_handle_release(y);
      if (k) cube_kernel_release(k);
      free(rdata);
      free(pdata);
      cube_client_release(cs);
      cube_client_release(c);
      cube_shutdown();
      m.restore(0);
      alarm(0);
      if (!hit) break; /* the workload makes fewer such calls */
    }
    if (site_hit) {
      sites_hit++;
    } else {
      size_t len = strlen(missed);
      snprintf(missed + len, sizeof(missed) - len, "%s%s", len ? ", " : "", every_site[i]);
    }
  }
  fprintf(stderr, "%d sticky faults at %d of %zu entry points, each recovered%s; not reached by "
          "the workload: %s\n",
          faults, sites_hit, sizeof(every_site) / sizeof(every_site[0]),
          kernels ? "" : " (no kernels: NVRTC is missing)", missed[0] ? missed : "none");
  CHECK(faults >= 30);
  CHECK(sites_hit >= (kernels ? 20 : 14));
  unsetenv("CUBE_MOCK_CUDA_LAUNCH_OK");
}

/* A second sticky fault inside the recovery itself (the reset's own
 * allocations, the new streams, the pools' new pages, the restores): at
 * every entry point, its 1st, 2nd, ... call (up to 4) after the recovery
 * began. The recovery that meets it fails and the device stays lost (its
 * calls say DEVICE_LOST); the next recovery works, and the device then
 * holds the restorable buffer bit for bit and round-trips new data. */
CUBE_TEST(sticky_fault_inside_the_recovery) {
  MOCK_SETUP("1");
  mock_t m;
  REQUIRE(mock_get(&m));
  signal(SIGALRM, sweep_alarm);
  int faults = 0;
  char hit_sites[1024] = "";
  for (size_t i = 0; i < sizeof(every_site) / sizeof(every_site[0]); ++i) {
    for (long n = 1; n <= 4; ++n) {
      snprintf(g_sweep_where, sizeof(g_sweep_where), "%s, call %ld of a recovery", every_site[i],
               n);
      alarm(60);
      unsigned seed = (unsigned)(i * 16 + (size_t)n) + 500;
      cube_client_t *c = NULL, *cs = NULL;
      REQUIRE_OK(cube_client_load(cuda0, &c));
      REQUIRE_OK(cube_client_clone(c, &cs));
      cube_client_set_stream(cs, cube_stream_id_new());
      size_t rn = 70001 + 3 * i;
      unsigned char* rdata = malloc(rn);
      REQUIRE(rdata != NULL);
      fill_random(rdata, rn, seed);
      cube_handle_t r, r2, p;
      REQUIRE_OK(cube_client_create_restorable(c, rdata, rn, &r));
      REQUIRE_OK(cube_client_create_restorable(cs, rdata, rn / 2, &r2));
      REQUIRE_OK(cube_client_create_from_slice(cs, rdata, 1000, &p));
      CHECK_OK(cube_client_sync(cs));
      /* The first fault: a read. */
      m.fail_sticky_on(0, "d2h", 1, ERR_ILLEGAL_ADDRESS);
      cube_bytes_t* b = NULL;
      CHECK_EQ_U64(cube_status_consume(cube_client_read_one(c, p, &b)), CUBE_STATUS_DEVICE_LOST);
      CHECK(b == NULL);
      /* The second, inside the recovery. */
      m.fail_sticky_on(0, every_site[i], n, ERR_ILLEGAL_ADDRESS);
      cube_status_t s = cube_device_recover(cuda0);
      bool hit = m.lost(0) != 0 || s != CUBE_OK;
      m.fail_sticky("", 0, 0);
      if (hit) {
        faults++;
        if (n == 1) {
          size_t len = strlen(hit_sites);
          snprintf(hit_sites + len, sizeof(hit_sites) - len, "%s%s", len ? ", " : "",
                   every_site[i]);
        }
        if (s == CUBE_OK) {
          /* The fault hit a call whose failure the recovery does not see
           * (a status the driver gave that changes nothing): the device
           * is lost again at its next call. */
          cube_status_free(cube_client_sync(c));
        } else {
          CHECK(cube_status_code(s) == CUBE_STATUS_DEVICE_LOST ||
                cube_status_code(s) == CUBE_STATUS_DATA_LOST);
          CHECK_EQ_U64(cube_status_consume(cube_client_sync(c)), CUBE_STATUS_DEVICE_LOST);
        }
        cube_status_free(s);
        s = cube_device_recover(cuda0);
        if (s)
          fprintf(stderr, "site %s call %ld: the second recovery says [%s] %s\n", every_site[i],
                  n, cube_status_code_name(cube_status_code(s)), cube_status_message(s));
      }
      CHECK_OK(s);
      CHECK(m.lost(0) == 0);
      CHECK(cube_test_read_equals(c, r, rdata, rn));
      CHECK(cube_test_read_equals(cs, r2, rdata, rn / 2));
      CHECK(roundtrip(c, 3000 + 11 * (size_t)n, seed + 1));
      CHECK(roundtrip(cs, 5000 + 11 * (size_t)n, seed + 2));
      cube_handle_release(r);
      cube_handle_release(r2);
      cube_handle_release(p);
      free(rdata);
      cube_client_release(cs);
      cube_client_release(c);
      cube_shutdown();
      m.restore(0);
      alarm(0);
      if (!hit) break;
    }
  }
  fprintf(stderr, "%d sticky faults inside a recovery, at: %s\n", faults, hit_sites);
  CHECK(faults >= 8);
}

//===----------------------------------------------------------------------===//
// Threads
//===----------------------------------------------------------------------===//

typedef struct {
  cube_client_t* c;
  unsigned seed;
  int wrong, lost_then_ok, lost_seen, other;
} worker_t;

/* Uploads and reads back in a loop: every answer is right or DEVICE_LOST,
 * and once a call said DEVICE_LOST every later one does. */
static void* worker(void* user) {
  worker_t* w = user;
  cube_client_t* c = w->c; /* each thread is its own stream */
  for (int i = 0; i < 60; ++i) {
    unsigned char data[1500];
    fill_random(data, sizeof(data), w->seed + (unsigned)i);
    cube_handle_t h;
    cube_status_t s = cube_client_create_from_slice(c, data, sizeof(data), &h);
    cube_bytes_t* b = NULL;
    if (!s) {
      s = cube_client_read_one(c, h, &b);
      if (!s && (cube_bytes_size(b) != sizeof(data) ||
                 memcmp(cube_bytes_const_data(b), data, sizeof(data)) != 0))
        w->wrong++;
      cube_bytes_release(b);
      cube_handle_release(h);
    }
    cube_status_code_t code = cube_status_code(s);
    if (code == CUBE_STATUS_DEVICE_LOST) w->lost_seen = 1;
    else if (code == CUBE_STATUS_OK && w->lost_seen) w->lost_then_ok++;
    else if (code != CUBE_STATUS_OK) w->other++;
    cube_status_free(s);
  }
  return NULL;
}

/* Eight threads on cuda:0 (each its own stream) and two on cuda:1 while a
 * read on cuda:0 faults: no wrong bytes, no call succeeds on cuda:0 after a
 * thread saw the loss, cuda:1's threads never fail. ThreadSanitizer: the
 * loss is published to every thread without a race. */
CUBE_TEST(threads_meet_the_loss) {
  MOCK_SETUP("2");
  mock_t m;
  REQUIRE(mock_get(&m));
  cube_client_t *c0 = NULL, *c1 = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c0));
  REQUIRE_OK(cube_client_load(cuda1, &c1));
  m.fail_sticky_on(0, "d2h", 40, ERR_ILLEGAL_ADDRESS);
  worker_t w[10];
  pthread_t t[10];
  for (int i = 0; i < 10; ++i) {
    w[i] = (worker_t){i < 8 ? c0 : c1, 1000u * (unsigned)i, 0, 0, 0, 0};
    REQUIRE(pthread_create(&t[i], NULL, worker, &w[i]) == 0);
  }
  for (int i = 0; i < 10; ++i) pthread_join(t[i], NULL);
  int seen = 0;
  for (int i = 0; i < 10; ++i) {
    CHECK_EQ_U64(w[i].wrong, 0);
    CHECK_EQ_U64(w[i].lost_then_ok, 0);
    CHECK_EQ_U64(w[i].other, 0);
    if (i < 8) seen += w[i].lost_seen;
    else CHECK_EQ_U64(w[i].lost_seen, 0);
  }
  CHECK(m.lost(0) && !m.lost(1));
  CHECK(seen >= 1);
  CHECK(is_lost(cube_client_sync(c0), "cube_client_sync", "CUDA_ERROR_ILLEGAL_ADDRESS"));
  /* After the loss, every thread gets the status at once. */
  for (int i = 0; i < 8; ++i) {
    w[i] = (worker_t){c0, 50u * (unsigned)i, 0, 0, 1, 0};
    REQUIRE(pthread_create(&t[i], NULL, worker, &w[i]) == 0);
  }
  for (int i = 0; i < 8; ++i) pthread_join(t[i], NULL);
  for (int i = 0; i < 8; ++i) {
    CHECK_EQ_U64(w[i].lost_then_ok, 0);
    CHECK_EQ_U64(w[i].other, 0);
  }
  CHECK(roundtrip(c1, 7777, 9));
  cube_client_release(c0);
  cube_client_release(c1);
  cube_shutdown();
  m.restore(0);
}
