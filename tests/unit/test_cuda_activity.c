// cube-test-libs: cube_static PkgConfig::CJSON
/* Traced and profiled CUDA kernels timed without events on the stream
 * (docs/observability.md, "How kernels are timed"): by the kernels themselves
 * (CUBE_CUDA_KERNEL_TIMER=self: each writes its global-timer
 * start and end into a slot of mapped host memory) and by the driver's
 * activity records (=cupti), against the mock driver, whose library also
 * stands in for NVRTC (a compile keeps the source), runs a self-timed
 * kernel's slot writes in stream order on CLOCK_REALTIME (its global timer),
 * and stands in for CUPTI (a launch on a stream queues a kernel record that
 * the stream completes in order). Each case runs with each timer. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "cube/cube.h"
#include "check.h"
#include "json_file.h"
#include "mock_cuda_faults.h"

#ifdef CUBE_MOCK_CUDA_PATH
typedef struct cube_mock_cupti_stats {
  uint64_t delivered, enables, disables;
  int kernels_on;
} cube_mock_cupti_stats_t;

static cube_mock_cupti_stats_t cupti_stats(void) {
  cube_mock_cupti_stats_t s;
  memset(&s, 0, sizeof(s));
  void* lib = dlopen(CUBE_MOCK_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  void (*fn)(cube_mock_cupti_stats_t*) = NULL;
  if (lib) *(void**)&fn = dlsym(lib, "cube_mock_cupti_stats");
  if (fn) fn(&s);
  if (lib) dlclose(lib);
  return s;
}

/* The mock for the driver, NVRTC and (unless |cupti| is NULL) CUPTI; kernel
 * launches succeed and each "runs" |kernel_us|. */
static void setup(const char* cupti, const char* kernel_us, const char* timer) {
  if (timer)
    setenv("CUBE_CUDA_KERNEL_TIMER", timer, 1);
  else
    unsetenv("CUBE_CUDA_KERNEL_TIMER"); /* the default */
  setenv("CUBE_CUDA_DRIVER", CUBE_MOCK_CUDA_PATH, 1);
  setenv("CUBE_NVRTC", CUBE_MOCK_CUDA_PATH, 1);
  if (cupti) setenv("CUBE_CUPTI", cupti, 1);
  setenv("CUBE_MOCK_CUDA_DELAY_US", "0", 1);
  setenv("CUBE_MOCK_CUDA_LAUNCH_OK", "1", 1);
  setenv("CUBE_MOCK_CUDA_KERNEL_US", kernel_us, 1);
}
#endif

static const char* scale_src =
    "CUBE_KERNEL(scale, CUBE_ARRAY(float, y), float a) {\n"
    "  uint32_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(y)) CUBE_STORE(y, i, a * CUBE_LOAD(y, i));\n"
    "}\n";

static cube_kernel_t* make_kernel(const char* name, const char* src, const char* entry) {
  cube_kernel_desc_t d;
  cube_kernel_desc_initialize(&d);
  d.name = name;
  d.source = src;
  d.entry = entry;
  d.cube_dim = (cube_dim_t){64, 1, 1};
  cube_kernel_t* k = NULL;
  cube_status_t s = cube_kernel_create(&d, &k);
  cube_status_free(s);
  return k;
}

/* A new trace file's path under the tests' temporary directory: |tag| and
 * this process's id in its name; any older file of that name removed. */
static void trace_path(char* out, size_t size, const char* tag) {
  const char* dir = getenv("CUBE_TEST_TMPDIR");
  snprintf(out, size, "%s/cuda_activity%s%s_%ld.json", dir ? dir : "/tmp", *tag ? "_" : "", tag,
           (long)getpid());
  unlink(out);
}

static cJSON* load_json(const char* path) { return cube_test_json_load(path); }
static double num(const cJSON* o, const char* key) { return cube_test_json_num(o, key); }
static const char* str(const cJSON* o, const char* key) { return cube_test_json_str(o, key); }

#ifdef CUBE_MOCK_CUDA_PATH
/* A client of the mock's cuda:0 and two kernel objects of scale_src named
 * |n1| and |n2| (one unit: one module, one entry function), compiled. */
static bool client_and_twins(const char* n1, const char* n2, cube_client_t** c,
                             cube_kernel_t** k1, cube_kernel_t** k2) {
  if (cube_client_load((cube_device_id_t){CUBE_BACKEND_CUDA, 0}, c)) return false;
  *k1 = make_kernel(n1, scale_src, "scale");
  *k2 = make_kernel(n2, scale_src, "scale");
  if (!*k1 || !*k2) return false;
  cube_kernel_t* both[2] = {*k1, *k2};
  cube_status_t st = cube_client_precompile(*c, 2, both, CUBE_EXEC_CHECKED);
  bool ok = st == CUBE_OK;
  cube_status_free(st);
  return ok;
}
#endif

typedef struct worker {
  cube_client_t* c;
  cube_kernel_t* k;
  int launches;
  uint32_t count_x;
  uint64_t stream;
  int ok;
  bool copy; /* then a copy of the buffer, after the launches */
} worker_t;

/* |launches| launches of |k| over one buffer on this thread's stream, then a
 * sync; the stream's id. */
static void* worker_main(void* p) {
  worker_t* w = p;
  w->stream = cube_stream_current();
  float ys[640];
  for (int i = 0; i < 640; ++i) ys[i] = (float)(i % 7);
  cube_handle_t y;
  if (cube_client_create_from_slice(w->c, ys, sizeof(ys), &y)) return NULL;
  cube_arg_t args[2] = {cube_arg_buffer(y), cube_arg_f32(1.5f)};
  int ok = 1;
  for (int i = 0; i < w->launches; ++i) {
    cube_status_t s =
        cube_client_launch(w->c, w->k, cube_count_static(w->count_x, 1, 1), 2, args);
    ok &= s == CUBE_OK;
    cube_status_free(s);
  }
  if (w->copy) {
    cube_handle_t z;
    cube_status_t e = cube_client_empty(w->c, sizeof(ys), &z);
    ok &= e == CUBE_OK;
    cube_status_free(e);
    if (ok) {
      e = cube_client_copy(w->c, y, z);
      ok &= e == CUBE_OK;
      cube_status_free(e);
      cube_handle_release(z);
    }
  }
  cube_status_t s = cube_client_sync(w->c);
  ok &= s == CUBE_OK;
  cube_status_free(s);
  cube_handle_release(y);
  w->ok = ok;
  return NULL;
}

#ifdef CUBE_MOCK_CUDA_PATH
/* Two streams' kernels in a trace: each kernel from a record of the driver's
 * (its clock "device activity") or its own timer's ("device timer"), named as
 * the program named it, on its stream's track, with its cube count, in launch
 * order and never before it was launched; records go off when the trace
 * stops. Self-timed, CUPTI is never turned on. */
static void traced_kernels(const char* timer) {
  /* NULL: the default, which is self (CUPTI, the mock's, is there to be
   * taken: a default of cupti would give "device activity" records). */
  const bool self = !timer || strcmp(timer, "self") == 0;
  setup(CUBE_MOCK_CUDA_PATH, "20", timer);
  cube_client_t* c = NULL;
  cube_kernel_t *ks = NULL, *kh = NULL; /* the same unit under two names */
  REQUIRE(client_and_twins("scale by a", "scale twin", &c, &ks, &kh));

  char path[512];
  trace_path(path, sizeof(path), "");
  cube_mock_cupti_stats_t before = cupti_stats();
  CHECK(!before.kernels_on);
  REQUIRE_OK(cube_trace_start(path));
  worker_t a = {c, ks, 37, 10, 0, 0, true};
  worker_t b = {c, kh, 23, 3, 0, 0, false};
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, worker_main, &b) == 0);
  worker_main(&a);
  pthread_join(t, NULL);
  CHECK(a.ok && b.ok);
  CHECK(a.stream != b.stream);
  CHECK(cupti_stats().kernels_on == !self);
  REQUIRE_OK(cube_trace_stop());
  cube_mock_cupti_stats_t after = cupti_stats();
  CHECK(!after.kernels_on); /* off once the trace stopped */
  if (self) {
    CHECK_EQ_U64(after.enables, 0);
    CHECK_EQ_U64(after.delivered, 0);
  } else {
    CHECK(after.delivered - before.delivered == 60); /* one record per launch */
    CHECK(after.disables > before.disables);
  }

  cJSON* doc = load_json(path);
  REQUIRE(doc != NULL);
  const cJSON* events = cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
  REQUIRE(cJSON_IsArray(events));
  worker_t* ws[2] = {&a, &b};
  for (int w = 0; w < 2; ++w) {
    int n = 0;
    double prev_end = 0;
    const cJSON* e;
    cJSON_ArrayForEach(e, events) {
      if (strcmp(str(e, "cat"), "kernel") != 0 || num(e, "tid") != (double)ws[w]->stream) continue;
      n++;
      CHECK(strcmp(str(e, "name"), w == 0 ? "scale by a" : "scale twin") == 0);
      const cJSON* args = cJSON_GetObjectItemCaseSensitive(e, "args");
      const cJSON* cc = cJSON_GetObjectItemCaseSensitive(args, "cube_count");
      CHECK(cJSON_GetArraySize(cc) == 3 &&
            cJSON_GetArrayItem(cc, 0)->valuedouble == (double)ws[w]->count_x &&
            cJSON_GetArrayItem(cc, 1)->valuedouble == 1.0);
      CHECK(strcmp(str(args, "detail"), self ? "device timer" : "device activity") == 0);
      /* Each "ran" 20 us (the mock sleeps); in the trace's microseconds. */
      CHECK(num(e, "dur") >= 15.0);
      CHECK(num(e, "dur") < 1e6);
      /* One after the other on the stream. */
      double ts = num(e, "ts");
      CHECK(ts >= 0.0);
      CHECK(ts >= prev_end - 1.0);
      prev_end = ts + num(e, "dur");
    }
    CHECK_EQ_U64((uint64_t)n, (uint64_t)ws[w]->launches);
    /* The copy after the launches: timed by its events (CUDA copies are). */
    int copies = 0;
    cJSON_ArrayForEach(e, events) {
      if (strcmp(str(e, "cat"), "copy") != 0 || num(e, "tid") != (double)ws[w]->stream) continue;
      copies++;
      const cJSON* args = cJSON_GetObjectItemCaseSensitive(e, "args");
      CHECK(strcmp(str(args, "detail"), "device clock") == 0);
      CHECK(num(args, "bytes") == 640.0 * 4.0);
    }
    CHECK_EQ_U64((uint64_t)copies, ws[w]->copy ? 1u : 0u);
  }
  cJSON_Delete(doc);
  unlink(path);

  /* After the stop: launches make no records. */
  worker_t again = {c, ks, 5, 1, 0, 0, false};
  worker_main(&again);
  CHECK(again.ok);
  CHECK(cupti_stats().delivered == after.delivered);
  cube_kernel_release(ks);
  cube_kernel_release(kh);
  cube_client_release(c);
  cube_shutdown();
}
#endif

CUBE_TEST(traced_kernels_come_from_activity_records) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  traced_kernels("cupti");
#endif
}

CUBE_TEST(traced_kernels_time_themselves) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  traced_kernels("self");
#endif
}

CUBE_TEST(traced_kernels_time_themselves_by_default) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  traced_kernels(NULL);
#endif
}

#ifdef CUBE_MOCK_CUDA_PATH
/* At profile level basic the summary's kernel rows come from the records
 * (one per launch, each at least the time the kernel ran), records stay on
 * while the device lives, and go off with it. */
static void profiled_kernels(const char* timer) {
  const bool self = strcmp(timer, "self") == 0;
  setup(CUBE_MOCK_CUDA_PATH, "50", timer);
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.profile_level = CUBE_PROFILE_BASIC;
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_init((cube_device_id_t){CUBE_BACKEND_CUDA, 0}, &o, &c));
  cube_kernel_t* ks = make_kernel("scale profiled", scale_src, "scale");
  REQUIRE(ks);
  cube_mock_cupti_stats_t before = cupti_stats();
  worker_t a = {c, ks, 9, 2, 0, 0, false};
  worker_main(&a); /* syncs: the summary is printed and emptied */
  CHECK(a.ok);
  CHECK(cupti_stats().kernels_on == !self);
  CHECK(cupti_stats().delivered - before.delivered == (self ? 0u : 9u));
  /* Again, read before a sync: the reader's collect empties the driver's
   * buffers (the launches completed: a read waited for them). */
  float ys[64] = {0};
  cube_handle_t y;
  REQUIRE_OK(cube_client_create_from_slice(c, ys, sizeof(ys), &y));
  cube_arg_t args[2] = {cube_arg_buffer(y), cube_arg_f32(2.0f)};
  /* Interleaved with a twin (the same unit, another name): each launch's
   * record has its own launch's name. */
  cube_kernel_t* twin = make_kernel("scale profiled twin", scale_src, "scale");
  REQUIRE(twin);
  for (int i = 0; i < 4; ++i) {
    REQUIRE_OK(cube_client_launch(c, ks, cube_count_static(1, 1, 1), 2, args));
    if (i % 2) REQUIRE_OK(cube_client_launch(c, twin, cube_count_static(1, 1, 1), 2, args));
  }
  cube_bytes_t* bytes = NULL;
  REQUIRE_OK(cube_client_read_one(c, y, &bytes));
  cube_bytes_release(bytes);
  cube_profile_summary_t sum = {0};
  REQUIRE_OK(cube_client_profile_summary(c, 0, &sum));
  uint64_t kernels = 0, twins = 0;
  for (size_t i = 0; i < sum.row_count; ++i) {
    if (sum.rows[i].kind != CUBE_PROFILE_ROW_KERNEL) continue;
    if (strcmp(sum.rows[i].name, "scale profiled") == 0) kernels += sum.rows[i].count;
    else if (strcmp(sum.rows[i].name, "scale profiled twin") == 0) twins += sum.rows[i].count;
    else CHECK(!"a kernel row of another name");
    CHECK(sum.rows[i].min_ns >= 40000u); /* each "ran" 50 us */
  }
  CHECK_EQ_U64(kernels, 4);
  CHECK_EQ_U64(twins, 2);
  cube_kernel_release(twin);
  cube_profile_summary_deinitialize(&sum);
  cube_handle_release(y);
  cube_kernel_release(ks);
  cube_client_release(c);
  cube_shutdown();
  CHECK(!cupti_stats().kernels_on); /* the device is gone: nothing keeps them on */
}
#endif

CUBE_TEST(profiled_kernels_come_from_activity_records) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  profiled_kernels("cupti");
#endif
}

CUBE_TEST(profiled_kernels_time_themselves) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  profiled_kernels("self");
#endif
}

/* A burst longer than CUPTI's buffers and the old launch ring (4,096), of a
 * kernel whose unit another kernel object compiled first: every record still
 * has its own launch's name (a record with no launch noted would take the
 * first object's), and the track keeps the launch order. The mock hands the
 * records over at the trace's stop, all at once: the worst case for the
 * ring. */
#ifdef CUBE_MOCK_CUDA_PATH
/* Holding a thread of this process: a signal whose handler waits until
 * released (or 20 s pass, so that a thread stopped while it held a lock the
 * test needs cannot hang it). */
static atomic_int g_hold_state; /* 1: in the handler, 2: released */

static void hold_handler(int sig) {
  (void)sig;
  atomic_store(&g_hold_state, 1);
  struct timespec ms = {0, 1000000};
  for (int i = 0; i < 20000 && atomic_load(&g_hold_state) != 2; ++i) nanosleep(&ms, NULL);
}

/* The id of this process's thread named |name|, or 0. */
static pid_t thread_named(const char* name) {
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return 0;
  pid_t found = 0;
  for (struct dirent* e; !found && (e = readdir(dir)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    char path[300], comm[64] = "";
    snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
    FILE* f = fopen(path, "r");
    if (!f) continue;
    if (fgets(comm, sizeof(comm), f)) comm[strcspn(comm, "\n")] = 0;
    fclose(f);
    if (strcmp(comm, name) == 0) found = (pid_t)atol(e->d_name);
  }
  closedir(dir);
  return found;
}

/* Stops the thread |tid| in hold_handler; false when it did not get there. */
static bool hold_thread(pid_t tid) {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = hold_handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGUSR2, &sa, NULL) != 0) return false;
  atomic_store(&g_hold_state, 0);
  if (syscall(SYS_tgkill, getpid(), tid, SIGUSR2) != 0) return false;
  struct timespec ms = {0, 1000000};
  for (int i = 0; i < 5000 && atomic_load(&g_hold_state) != 1; ++i) nanosleep(&ms, NULL);
  return atomic_load(&g_hold_state) == 1;
}

static void traced_burst(const char* timer, bool poller_stopped) {
  setup(CUBE_MOCK_CUDA_PATH, "0", timer);
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CUDA, 0}, &c));
  cube_kernel_t* first = make_kernel("scale first", scale_src, "scale");
  cube_kernel_t* burst = make_kernel("scale burst", scale_src, "scale");
  REQUIRE(first && burst);
  REQUIRE_OK(cube_client_precompile(c, 1, &first, CUBE_EXEC_CHECKED));
  char path[512];
  trace_path(path, sizeof(path), "burst");
  REQUIRE_OK(cube_trace_start(path));
  if (poller_stopped) {
    /* Records on (the poller runs from then on); then the poller is held. */
    worker_t one = {c, first, 1, 1, 0, 0, false};
    worker_main(&one);
    CHECK(one.ok);
    pid_t poller = thread_named("cube-ktimer");
    REQUIRE(poller != 0);
    REQUIRE(hold_thread(poller));
  }
  const uint64_t LAUNCHES = strcmp(timer, "self") == 0 ? 20000 : 6000;
  worker_t a = {c, burst, (int)LAUNCHES, 1, 0, 0, false};
  worker_main(&a);
  CHECK(a.ok);
  if (poller_stopped) atomic_store(&g_hold_state, 2);
  REQUIRE_OK(cube_trace_stop());
  cJSON* doc = load_json(path);
  REQUIRE(doc != NULL);
  int n = 0, misnamed = 0, backwards = 0;
  double prev = -1.0;
  const cJSON* e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "traceEvents")) {
    if (strcmp(str(e, "cat"), "kernel") != 0 || num(e, "tid") != (double)a.stream) continue;
    n++;
    misnamed += strcmp(str(e, "name"), "scale burst") != 0;
    backwards += num(e, "ts") < prev;
    prev = num(e, "ts");
  }
  const uint64_t firsts = poller_stopped ? 1 : 0; /* "scale first", before the burst */
  CHECK_EQ_U64((uint64_t)n, LAUNCHES + firsts);
  CHECK_EQ_U64((uint64_t)misnamed, firsts);
  CHECK_EQ_U64((uint64_t)backwards, 0);
  cJSON_Delete(doc);
  unlink(path);
  cube_kernel_release(first);
  cube_kernel_release(burst);
  cube_client_release(c);
  cube_shutdown();
}
#endif

CUBE_TEST(traced_burst_keeps_each_launch_name) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  traced_burst("cupti", false);
#endif
}

/* Self-timed, a burst past the ring of 16,384 slots: the poller frees slots
 * as kernels complete, so that none goes untimed. */
CUBE_TEST(self_timed_burst_keeps_each_launch_name) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  traced_burst("self", false);
#endif
}

/* The same burst with the poller stopped throughout (a loaded host that
 * does not schedule it): once the ring is full of launches not read, the
 * launching thread reads the completed ones itself, so that none goes
 * untimed. Before, the 3,616 launches past the ring went untimed (seen
 * under a loaded make check: 16384 vs 20000). */
CUBE_TEST(self_timed_burst_with_the_poller_stopped) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  traced_burst("self", true);
#endif
}

#ifdef CUBE_MOCK_CUDA_PATH
/* CUBE_CUPTI=0 with CUBE_CUDA_KERNEL_TIMER=cupti, or the timer "events":
 * traced kernels are timed by events as before, and no record is ever asked
 * for. */
static void evented_kernels(const char* cupti, const char* timer) {
  setup(cupti, "10", timer);
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CUDA, 0}, &c));
  cube_kernel_t* ks = make_kernel("scale evented", scale_src, "scale");
  REQUIRE(ks);
  char path[512];
  trace_path(path, sizeof(path), "off");
  REQUIRE_OK(cube_trace_start(path));
  worker_t a = {c, ks, 6, 4, 0, 0, false};
  worker_main(&a);
  CHECK(a.ok);
  REQUIRE_OK(cube_trace_stop());
  CHECK(cupti_stats().enables == 0);
  cJSON* doc = load_json(path);
  REQUIRE(doc != NULL);
  int n = 0;
  const cJSON* e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "traceEvents")) {
    if (strcmp(str(e, "cat"), "kernel") != 0) continue;
    n++;
    CHECK(strcmp(str(cJSON_GetObjectItemCaseSensitive(e, "args"), "detail"), "device clock") == 0);
  }
  CHECK_EQ_U64((uint64_t)n, 6);
  cJSON_Delete(doc);
  unlink(path);
  cube_kernel_release(ks);
  cube_client_release(c);
  cube_shutdown();
}
#endif

CUBE_TEST(without_cupti_events_time_kernels) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  evented_kernels("0", "cupti");
#endif
}

CUBE_TEST(timer_events_times_kernels_by_events) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  evented_kernels(CUBE_MOCK_CUDA_PATH, "events");
#endif
}

#ifdef CUBE_MOCK_CUDA_PATH
/* The self-timed kernels named |name| in the trace at |path|: how many, the
 * earliest start and the latest end (us); each must say "device timer" and
 * have lasted at least |min_us| (its own run, not a neighbour's slot). */
typedef struct {
  int n;
  double first, last_end;
} named_kernels_t;
static named_kernels_t trace_kernels(const char* path, const char* name, double min_us) {
  named_kernels_t k = {0, 1e300, 0};
  cJSON* doc = load_json(path);
  CHECK(doc != NULL);
  const cJSON* e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "traceEvents")) {
    if (strcmp(str(e, "cat"), "kernel") != 0 || strcmp(str(e, "name"), name) != 0) continue;
    CHECK(strcmp(str(cJSON_GetObjectItemCaseSensitive(e, "args"), "detail"), "device timer") == 0);
    CHECK(num(e, "dur") >= min_us);
    k.n++;
    if (num(e, "ts") < k.first) k.first = num(e, "ts");
    if (num(e, "ts") + num(e, "dur") > k.last_end) k.last_end = num(e, "ts") + num(e, "dur");
  }
  cJSON_Delete(doc);
  return k;
}

/* |n| launches of |k| with |args| (one buffer, one float) on one cube. */
static void launch_n(cube_client_t* c, cube_kernel_t* k, int n, cube_arg_t* args) {
  for (int i = 0; i < n; ++i) CHECK_OK(cube_client_launch(c, k, cube_count_static(1, 1, 1), 2, args));
}

/* A self-timed case over the mock: its client, the kernels "scale before"
 * and "scale after" (one unit), the mock's fault switches and a trace path
 * (|tag| in its name); each kernel "runs" |kernel_us|. */
typedef struct self_case {
  cube_client_t* c;
  cube_kernel_t *before, *after;
  mock_t m;
  char path[512];
} self_case_t;

static bool timer_case_open(self_case_t* t, const char* kernel_us, const char* timer,
                            const char* tag) {
  memset(t, 0, sizeof(*t));
  setup(CUBE_MOCK_CUDA_PATH, kernel_us, timer);
  trace_path(t->path, sizeof(t->path), tag);
  return client_and_twins("scale before", "scale after", &t->c, &t->before, &t->after) &&
         mock_get(&t->m);
}

static bool self_case_open(self_case_t* t, const char* kernel_us, const char* tag) {
  return timer_case_open(t, kernel_us, "self", tag);
}

/* A buffer of 64 floats on |t|'s client, synced, and the kernels'
 * arguments over it (|y| released by the caller). */
static bool self_case_buffer(self_case_t* t, cube_handle_t* y, cube_arg_t args[2]) {
  static const float ys[64] = {0};
  cube_status_t st = cube_client_create_from_slice(t->c, ys, sizeof(ys), y);
  if (!st) st = cube_client_sync(t->c);
  CHECK(st == NULL);
  if (st) {
    fprintf(stderr, "%s\n", cube_status_message(st));
    cube_status_free(st);
    return false;
  }
  args[0] = cube_arg_buffer(*y);
  args[1] = cube_arg_f32(2.0f);
  return true;
}

static void self_case_close(self_case_t* t) {
  unlink(t->path);
  cube_kernel_release(t->before);
  cube_kernel_release(t->after);
  cube_client_release(t->c);
  cube_shutdown();
}
#endif

/* Self-timed: kernels launched while an earlier trace recorded and still
 * running when it stopped (its stop waits for what the stream was given) go
 * into that trace or none, never twice and never into the next trace as
 * another launch's record: the next trace has its own launches, each once,
 * with its own durations (a slot read out of turn would show another's). */
CUBE_TEST(self_timed_kernels_of_an_earlier_trace_stay_out) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  setup(CUBE_MOCK_CUDA_PATH, "30000", "self"); /* each kernel "runs" 30 ms */
  cube_client_t* c = NULL;
  cube_kernel_t *early = NULL, *late = NULL;
  REQUIRE(client_and_twins("scale early", "scale late", &c, &early, &late));
  float ys[64] = {0};
  cube_handle_t y;
  REQUIRE_OK(cube_client_create_from_slice(c, ys, sizeof(ys), &y));
  REQUIRE_OK(cube_client_sync(c));
  cube_arg_t args[2] = {cube_arg_buffer(y), cube_arg_f32(2.0f)};
  char p1[512], p2[512];
  trace_path(p1, sizeof(p1), "early");
  trace_path(p2, sizeof(p2), "late");
  REQUIRE_OK(cube_trace_start(p1));
  launch_n(c, early, 3, args);
  REQUIRE_OK(cube_trace_stop()); /* the first is running, two are queued */
  REQUIRE_OK(cube_trace_start(p2));
  launch_n(c, late, 2, args);
  REQUIRE_OK(cube_client_sync(c));
  REQUIRE_OK(cube_trace_stop());
  named_kernels_t early1 = trace_kernels(p1, "scale early", 25000.0);
  named_kernels_t early2 = trace_kernels(p2, "scale early", 25000.0);
  CHECK_EQ_U64((uint64_t)trace_kernels(p2, "scale late", 25000.0).n, 2);
  CHECK_EQ_U64((uint64_t)trace_kernels(p1, "scale late", 0.0).n, 0);
  CHECK(early1.n + early2.n <= 3); /* none twice */
  unlink(p1);
  unlink(p2);
  cube_handle_release(y);
  cube_kernel_release(early);
  cube_kernel_release(late);
  cube_client_release(c);
  cube_shutdown();
#endif
}

/* Self-timed across a recovery: the lost context took the streams' slots and
 * the clock kernel with it; the renewed streams get new slots, the clock is
 * measured again in the new context, and kernels launched after the
 * recovery are in the trace, each once, after those before it. */
CUBE_TEST(self_timed_kernels_after_a_recovery) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  self_case_t t;
  REQUIRE(self_case_open(&t, "100", "recover"));
  REQUIRE_OK(cube_trace_start(t.path));
  float ys[64] = {0};
  cube_handle_t y;
  REQUIRE_OK(cube_client_create_from_slice(t.c, ys, sizeof(ys), &y));
  cube_arg_t args[2] = {cube_arg_buffer(y), cube_arg_f32(2.0f)};
  launch_n(t.c, t.before, 3, args);
  REQUIRE_OK(cube_client_sync(t.c));
  /* Lost at the next device-to-host copy (an illegal address). */
  t.m.fail_sticky_on(0, "d2h", 1, 700);
  cube_bytes_t* b = NULL;
  cube_status_t st = cube_client_read_one(t.c, y, &b);
  CHECK_EQ_U64(cube_status_code(st), CUBE_STATUS_DEVICE_LOST);
  cube_status_free(st);
  cube_handle_release(y);
  REQUIRE_OK(cube_device_recover((cube_device_id_t){CUBE_BACKEND_CUDA, 0}));
  cube_handle_t z;
  REQUIRE_OK(cube_client_create_from_slice(t.c, ys, sizeof(ys), &z));
  cube_arg_t args2[2] = {cube_arg_buffer(z), cube_arg_f32(2.0f)};
  launch_n(t.c, t.after, 4, args2);
  REQUIRE_OK(cube_client_sync(t.c));
  REQUIRE_OK(cube_trace_stop());
  named_kernels_t kb = trace_kernels(t.path, "scale before", 80.0);
  named_kernels_t ka = trace_kernels(t.path, "scale after", 80.0);
  /* The clock measured again in the new context: the kernels after the
   * recovery come after those before it. */
  CHECK(ka.first >= kb.last_end);
  CHECK_EQ_U64((uint64_t)kb.n, 3);
  CHECK_EQ_U64((uint64_t)ka.n, 4);
  cube_handle_release(z);
  self_case_close(&t);
#endif
}

/* Self-timed: a launch the driver refuses takes no slot (its note is taken
 * back and the next launch takes its place): the reader does not wait at it,
 * and the launches after it, of the refused one's kernel on another buffer
 * (the refused one's output is tainted), are in the trace with their own
 * names and durations. */
CUBE_TEST(self_timed_refused_launch_takes_no_slot) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  self_case_t t;
  REQUIRE(self_case_open(&t, "200", "refused"));
  float ys[64] = {0};
  cube_handle_t y, z;
  REQUIRE_OK(cube_client_create_from_slice(t.c, ys, sizeof(ys), &y));
  REQUIRE_OK(cube_client_create_from_slice(t.c, ys, sizeof(ys), &z));
  REQUIRE_OK(cube_client_sync(t.c));
  cube_arg_t args_y[2] = {cube_arg_buffer(y), cube_arg_f32(2.0f)};
  cube_arg_t args_z[2] = {cube_arg_buffer(z), cube_arg_f32(2.0f)};
  REQUIRE_OK(cube_trace_start(t.path));
  launch_n(t.c, t.before, 2, args_y);
  REQUIRE_OK(cube_client_sync(t.c)); /* both submitted: the next one is refused */
  t.m.fail_with("cuLaunchKernel", 1, 1 /* CUDA_ERROR_INVALID_VALUE: not sticky */);
  /* A launch of the next kernel refused: its note named it (the first of a
   * run), and is taken back; the next launch of that kernel names itself. */
  cube_status_t st = cube_client_launch(t.c, t.after, cube_count_static(1, 1, 1), 2, args_y);
  cube_status_free(st); /* refused now or at the sync: either way not run */
  launch_n(t.c, t.after, 3, args_z);
  st = cube_client_sync(t.c);
  cube_status_free(st);
  REQUIRE_OK(cube_trace_stop());
  CHECK_EQ_U64((uint64_t)trace_kernels(t.path, "scale before", 150.0).n, 2);
  CHECK_EQ_U64((uint64_t)trace_kernels(t.path, "scale after", 150.0).n, 3);
  cube_handle_release(y);
  cube_handle_release(z);
  self_case_close(&t);
#endif
}

/* Self-timed: a launch whose slot was copied but never written (a kernel
 * that did not run to its timer: the mock's CUBE_MOCK_CUDA_TIMED_SILENT) has
 * no record, and the reader goes on past it: the launches after it are in
 * the trace (it waited at such a slot for good before). */
CUBE_TEST(self_timed_unwritten_slot_is_passed) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  /* Before the client's threads start (the mock reads it on the stream's). */
  setenv("CUBE_MOCK_CUDA_TIMED_SILENT", "3", 1);
  self_case_t t;
  REQUIRE(self_case_open(&t, "200", "silent"));
  cube_handle_t y;
  cube_arg_t args[2];
  REQUIRE(self_case_buffer(&t, &y, args));
  REQUIRE_OK(cube_trace_start(t.path));
  launch_n(t.c, t.before, 3, args); /* the third writes nothing */
  launch_n(t.c, t.after, 4, args);
  REQUIRE_OK(cube_client_sync(t.c));
  REQUIRE_OK(cube_trace_stop());
  CHECK_EQ_U64((uint64_t)trace_kernels(t.path, "scale before", 150.0).n, 2);
  CHECK_EQ_U64((uint64_t)trace_kernels(t.path, "scale after", 150.0).n, 4);
  cube_handle_release(y);
  self_case_close(&t);
  unsetenv("CUBE_MOCK_CUDA_TIMED_SILENT");
#endif
}

#ifdef CUBE_MOCK_CUDA_PATH
static atomic_int g_begins; /* the server asked the backend whether records time a launch */
static void count_begins(void* user, const cube__backend_call_t* call) {
  (void)user;
  if (call->slot == CUBE__SLOT_ACTIVITY_BEGIN && call->status < 0) atomic_fetch_add(&g_begins, 1);
}

/* The kernels of |name| in the trace at |path| whose detail is |detail|. */
static int trace_count(const char* path, const char* name, const char* detail) {
  int n = 0;
  cJSON* doc = load_json(path);
  CHECK(doc != NULL);
  const cJSON* e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "traceEvents")) {
    if (strcmp(str(e, "cat"), "kernel") != 0 || strcmp(str(e, "name"), name) != 0) continue;
    n += strcmp(str(cJSON_GetObjectItemCaseSensitive(e, "args"), "detail"), detail) == 0;
  }
  cJSON_Delete(doc);
  return n;
}

/* A stream's traced launches ask the backend whether its records time them
 * once (twice at most: an answer that changed the epoch is asked again),
 * not before each launch (backends/backend.h, cube__activity_epoch), and
 * again after the records went off (a trace's stop): the second trace's
 * launches are recorded too, each once. */
static void asks_once(const char* timer) {
  const char* detail = strcmp(timer, "self") == 0 ? "device timer" : "device activity";
  self_case_t t;
  REQUIRE(timer_case_open(&t, "20", timer, "asked"));
  cube_handle_t y;
  cube_arg_t args[2];
  REQUIRE(self_case_buffer(&t, &y, args));
  char again[512];
  trace_path(again, sizeof(again), "asked_again");
  atomic_store(&g_begins, 0);
  cube__backend_set_trace(count_begins, NULL);
  REQUIRE_OK(cube_trace_start(t.path));
  launch_n(t.c, t.before, 40, args);
  REQUIRE_OK(cube_client_sync(t.c));
  REQUIRE_OK(cube_trace_stop());
  const int first = atomic_load(&g_begins);
  REQUIRE_OK(cube_trace_start(again));
  launch_n(t.c, t.after, 30, args);
  REQUIRE_OK(cube_client_sync(t.c));
  REQUIRE_OK(cube_trace_stop());
  const int second = atomic_load(&g_begins) - first;
  cube__backend_set_trace(NULL, NULL);
  /* The first trace: the first launch, and self-timed the next one too
   * (the device's clock measured during the first answer changed the
   * epoch). */
  CHECK(first >= 1 && first <= 2);
  CHECK_EQ_U64((uint64_t)second, 1);
  CHECK_EQ_U64((uint64_t)trace_count(t.path, "scale before", detail), 40);
  CHECK_EQ_U64((uint64_t)trace_count(again, "scale after", detail), 30);
  CHECK_EQ_U64((uint64_t)trace_count(again, "scale before", detail), 0);
  unlink(again);
  cube_handle_release(y);
  self_case_close(&t);
}
#endif

CUBE_TEST(traced_launches_ask_for_records_once_self_timed) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  asks_once("self");
#endif
}

CUBE_TEST(traced_launches_ask_for_records_once_with_cupti) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  asks_once("cupti");
#endif
}

/* Self-timed: a device clock measured more than a second before a trace
 * starts is measured again before that trace's records are converted, by
 * the reader (the poller thread, "cube-ktimer"), not on a launching thread
 * (where it would stall the launches being measured). The mock's global
 * timer is moved 3 s from the host's clock meanwhile (a drift): the second
 * trace's kernels must still lie inside the host's range around their
 * launches and the sync. */
CUBE_TEST(self_timed_stale_clock_is_measured_again_by_the_reader) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  self_case_t t;
  REQUIRE(self_case_open(&t, "200", "stale"));
  void* lib = dlopen(CUBE_MOCK_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(lib != NULL);
  long (*clock_launches)(char*, size_t) = NULL;
  void (*timer_shift)(int64_t) = NULL;
  *(void**)&clock_launches = dlsym(lib, "cube_mock_cuda_clock_launches");
  *(void**)&timer_shift = dlsym(lib, "cube_mock_cuda_timer_shift");
  dlclose(lib); /* still loaded: cube holds it */
  REQUIRE(clock_launches != NULL && timer_shift != NULL);
  cube_handle_t y;
  cube_arg_t args[2];
  REQUIRE(self_case_buffer(&t, &y, args));
  REQUIRE_OK(cube_trace_start(t.path));
  launch_n(t.c, t.before, 2, args);
  REQUIRE_OK(cube_client_sync(t.c));
  REQUIRE_OK(cube_trace_stop());
  CHECK_EQ_U64((uint64_t)trace_kernels(t.path, "scale before", 150.0).n, 2);
  char who[32] = "";
  const long first = clock_launches(who, sizeof(who));
  CHECK(first > 0); /* measured once, before the first timed launch */
  timer_shift(3000000000ll);
  usleep(1100 * 1000); /* the measure is over a second old */
  char path2[512];
  trace_path(path2, sizeof(path2), "stale2");
  REQUIRE_OK(cube_trace_start(path2));
  cube_trace_range_push("launches");
  launch_n(t.c, t.after, 3, args);
  REQUIRE_OK(cube_client_sync(t.c));
  cube_trace_range_pop();
  /* The poller measures it again (within 5 s, at most). */
  for (int i = 0; i < 500 && clock_launches(who, sizeof(who)) == first; ++i) usleep(10 * 1000);
  CHECK(clock_launches(who, sizeof(who)) > first);
  CHECK(strcmp(who, "cube-ktimer") == 0);
  REQUIRE_OK(cube_trace_stop());
  named_kernels_t k = trace_kernels(path2, "scale after", 150.0);
  CHECK_EQ_U64((uint64_t)k.n, 3);
  double range_ts = -1, range_end = -1;
  cJSON* doc = load_json(path2);
  REQUIRE(doc != NULL);
  const cJSON* e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "traceEvents")) {
    if (strcmp(str(e, "name"), "launches") != 0) continue;
    range_ts = num(e, "ts");
    range_end = range_ts + num(e, "dur");
  }
  cJSON_Delete(doc);
  CHECK(range_ts >= 0);
  /* Device times are never earlier than they were; late by the clock
   * kernel's flag's trip at most (50 ms allowed: a loaded sanitized run). */
  CHECK(k.first >= range_ts - 1.0);
  CHECK(k.last_end <= range_end + 50000.0);
  unlink(path2);
  cube_handle_release(y);
  self_case_close(&t);
#endif
}

#ifdef CUBE_MOCK_CUDA_PATH
typedef struct summary_from_log {
  cube_client_t* c;
  int lines;
  cube_status_t first; /* the summary's status, read from the first line */
  uint64_t rows;
} summary_from_log_t;

static void summary_log_fn(void* user, const char* line) {
  (void)line;
  summary_from_log_t* s = user;
  if (s->lines++ != 1) return; /* the second launch's line: the first is timed by then */
  cube_profile_summary_t sum = {0};
  s->first = cube_client_profile_summary(s->c, 0, &sum);
  if (!s->first) s->rows = sum.row_count;
  cube_profile_summary_deinitialize(&sum);
}
#endif

/* The profile summary read from the log callback, inside the device's task,
 * on a device that times its work with events (the stream's timed work is
 * polled first, and that poll is a task of the device): the poll is left
 * out there and the summary has the rows made so far. It used to fail
 * with the queue's refusal, which named no call. */
CUBE_TEST(summary_from_a_log_callback_inside_a_task) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  setup(NULL, "10", "events");
  summary_from_log_t s = {NULL, 0, NULL, 0};
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.profile_level = CUBE_PROFILE_EXEC; /* "Executing <kernel>", inside the launch's task */
  o.log_fn = summary_log_fn;
  o.log_user = &s;
  REQUIRE_OK(cube_client_init((cube_device_id_t){CUBE_BACKEND_CUDA, 0}, &o, &s.c));
  cube_kernel_t* k = make_kernel("scale logged", scale_src, "scale");
  REQUIRE(k);
  char path[512];
  trace_path(path, sizeof(path), "summary_from_log");
  REQUIRE_OK(cube_trace_start(path)); /* launches timed by events: the stream has timed work */
  worker_t a = {s.c, k, 3, 1, 0, 0, false};
  worker_main(&a); /* the first launch timed, the second logs while it is pending */
  CHECK(a.ok);
  REQUIRE_OK(cube_trace_stop());
  unlink(path);
  CHECK(s.lines >= 3);
  CHECK(s.first == CUBE_OK);
  if (s.first) fprintf(stderr, "summary from the log callback: %s\n", cube_status_message(s.first));
  cube_status_free(s.first);
  cube_kernel_release(k);
  cube_client_release(s.c);
  cube_shutdown();
#endif
}
