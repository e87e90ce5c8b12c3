// cube-test-libs: cube_static
/* The nccl transport of CUDA collectives, in CI without a GPU: the CUDA
 * backend over the mock driver (tests/mock_cuda), NCCL replaced by the mock
 * of tests/mock_nccl (CUBE_NCCL_LIBRARY). What the real NCCL does on a GPU is
 * checked by scripts/gpu-check.sh (step "nccl").
 *
 * Covered here: the transport chosen and said (nccl; staged when NCCL does
 * not load or is too old), every element type and op against a host
 * reference on 2 and 3 devices, send/recv (both ways, to oneself) and
 * to_client, one thread driving every device (inline queues) and one thread
 * per device, a participant that never comes (the rendezvous names it), an
 * NCCL operation that never ends (the communicator is aborted, the next
 * operation works), buffers released before sync_collective (kept alive until
 * NCCL is done), the records, shutdown with work in flight, two stream ids
 * of one stream (nccl and staged), processes that exchange the unique id
 * through CUBE_NCCL_ID_FILE, and id files planted by someone else. */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/abi.h"
#include "check.h"
#include "read_check.h"
#include "cube/cube.h"

#if defined(CUBE_MOCK_CUDA_PATH) && defined(CUBE_MOCK_NCCL_PATH)
#define HAVE_MOCKS 1
#else
#define HAVE_MOCKS 0
#endif

/* Mock driver + mock NCCL with |devices| GPUs (before the first cube call). */
#define SETUP(devices)                                                     \
  do {                                                                     \
    if (!HAVE_MOCKS) CUBE_SKIP("the CUDA backend is not built (no CUDA headers)"); \
    setup_env(devices);                                                    \
  } while (0)

static void setup_env(const char* devices) {
#if HAVE_MOCKS
  setenv("CUBE_CUDA_DRIVER", CUBE_MOCK_CUDA_PATH, 1);
  setenv("CUBE_NCCL_LIBRARY", CUBE_MOCK_NCCL_PATH, 1);
  setenv("CUBE_MOCK_CUDA_DEVICES", devices, 1);
#else
  (void)devices;
#endif
}

typedef struct {
  long inits, groups, all_reduces, sends, recvs, aborts, destroys, finalizes, comms_live;
  long in_progress_returns, max_group_calls;
} nccl_stats_t;

static void nccl_stats(nccl_stats_t* out) {
  memset(out, 0, sizeof(*out));
#if HAVE_MOCKS
  void* h = dlopen(CUBE_MOCK_NCCL_PATH, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return;
  void (*fn)(nccl_stats_t*) = (void (*)(nccl_stats_t*))(uintptr_t)dlsym(h, "cube_mock_nccl_stats");
  if (fn) fn(out);
  dlclose(h);
#endif
}

static void nccl_hang(long n) {
#if HAVE_MOCKS
  void* h = dlopen(CUBE_MOCK_NCCL_PATH, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return;
  void (*fn)(long) = (void (*)(long))(uintptr_t)dlsym(h, "cube_mock_nccl_hang");
  if (fn) fn(n);
  dlclose(h);
#else
  (void)n;
#endif
}

/* Context pushes not popped yet, every thread (the mock driver's count). */
static int pushes_outstanding(void) {
#if HAVE_MOCKS
  struct {
    uint64_t copies, bytes_h2d, bytes_d2h, async_allocs, async_frees, launches, device_bytes_used;
    int pinned_allocations, streams;
    int context_pushes_outstanding;
  } st;
  memset(&st, 0, sizeof(st));
  void* h = dlopen(CUBE_MOCK_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return -1;
  void (*fn)(void*) = (void (*)(void*))(uintptr_t)dlsym(h, "cube_mock_cuda_stats");
  if (fn) fn(&st);
  dlclose(h);
  return st.context_pushes_outstanding;
#else
  return 0;
#endif
}

static cube_device_id_t cuda(uint32_t i) {
  cube_device_id_t d = {CUBE_BACKEND_CUDA, i};
  return d;
}

/* Host reference ------------------------------------------------------------ */

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
  if (e == 0 && m == 0) {
    bits = sign;
  } else if (e == 0) {
    e = 113;
    while (!(m & 0x400)) {
      m <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((m & 0x3ff) << 13);
  } else {
    bits = sign | ((e + 112) << 23) | (m << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Exact for the small integers used here. */
static uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax == 0) return (uint16_t)sign;
  return (uint16_t)(sign | ((ax >> 13) - (112u << 10)));
}

static uint16_t f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  return (uint16_t)(x >> 16);
}

static float bf16_to_f32(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static double get(cube_dtype_t t, const void* p, size_t i) {
  switch (t) {
    case CUBE_DTYPE_U8: return ((const uint8_t*)p)[i];
    case CUBE_DTYPE_I8: return ((const int8_t*)p)[i];
    case CUBE_DTYPE_U32: return ((const uint32_t*)p)[i];
    case CUBE_DTYPE_I32: return ((const int32_t*)p)[i];
    case CUBE_DTYPE_U64: return (double)((const uint64_t*)p)[i];
    case CUBE_DTYPE_I64: return (double)((const int64_t*)p)[i];
    case CUBE_DTYPE_F16: return f16_to_f32(((const uint16_t*)p)[i]);
    case CUBE_DTYPE_BF16: return bf16_to_f32(((const uint16_t*)p)[i]);
    case CUBE_DTYPE_F32: return ((const float*)p)[i];
    default: return ((const double*)p)[i];
  }
}

static void set(cube_dtype_t t, void* p, size_t i, double v) {
  switch (t) {
    case CUBE_DTYPE_U8: ((uint8_t*)p)[i] = (uint8_t)v; break;
    case CUBE_DTYPE_I8: ((int8_t*)p)[i] = (int8_t)v; break;
    case CUBE_DTYPE_U32: ((uint32_t*)p)[i] = (uint32_t)v; break;
    case CUBE_DTYPE_I32: ((int32_t*)p)[i] = (int32_t)v; break;
    case CUBE_DTYPE_U64: ((uint64_t*)p)[i] = (uint64_t)v; break;
    case CUBE_DTYPE_I64: ((int64_t*)p)[i] = (int64_t)v; break;
    case CUBE_DTYPE_F16: ((uint16_t*)p)[i] = f32_to_f16((float)v); break;
    case CUBE_DTYPE_BF16: ((uint16_t*)p)[i] = f32_to_bf16((float)v); break;
    case CUBE_DTYPE_F32: ((float*)p)[i] = (float)v; break;
    default: ((double*)p)[i] = v; break;
  }
}

static bool is_float(cube_dtype_t t) { return t >= CUBE_DTYPE_F16; }

/* REQUIRE_OK for a function returning bool. */
#define REQUIRE_OK_RET(expr)                                                       \
  do {                                                                             \
    cube_status_t s_ = (expr);                                                     \
    if (s_) {                                                                      \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr,         \
              cube_status_message(s_));                                            \
      cube_status_free(s_);                                                        \
      cube_test_failures++;                                                        \
      return false;                                                                \
    }                                                                              \
  } while (0)
static bool is_unsigned(cube_dtype_t t) {
  return t == CUBE_DTYPE_U8 || t == CUBE_DTYPE_U32 || t == CUBE_DTYPE_U64;
}

/* One all_reduce of |t| |op| over the first |n| devices (clients |c|), data
 * random small integers (exact in every type, 8-bit sums and products
 * included); checks every dst against the host. True if all matched. */
static bool one_all_reduce(cube_client_t** c, uint32_t n, cube_dtype_t t, cube_reduce_op_t op,
                           size_t count, uint64_t* rng) {
  size_t bytes = count * cube_dtype_size(t);
  cube_device_id_t ids[8];
  for (uint32_t i = 0; i < n; ++i) ids[i] = cuda(n - 1 - i); /* any order */
  void* in[8];
  void* expect = malloc(bytes);
  unsigned char* poison = malloc(bytes);
  memset(poison, 0x5a, bytes);
  for (uint32_t i = 0; i < n; ++i) in[i] = malloc(bytes);
  for (size_t k = 0; k < count; ++k) {
    double acc = 0;
    for (uint32_t i = 0; i < n; ++i) {
      int span = op == CUBE_REDUCE_PROD ? 3 : 20;
      double x = (double)(cube_test_rand(rng) % (uint64_t)span);
      if (!is_unsigned(t)) x -= span / 2;
      if (op == CUBE_REDUCE_MEAN && is_float(t)) x *= 2; /* n = 2: halves exactly */
      set(t, in[i], k, x);
      if (i == 0) {
        acc = x;
      } else if (op == CUBE_REDUCE_SUM || op == CUBE_REDUCE_MEAN) {
        acc += x;
      } else if (op == CUBE_REDUCE_PROD) {
        acc *= x;
      } else if (op == CUBE_REDUCE_MAX) {
        acc = x > acc ? x : acc;
      } else {
        acc = x < acc ? x : acc;
      }
    }
    if (op == CUBE_REDUCE_MEAN) {
      /* Toward zero for integers (the host transport, NCCL's ncclAvg). */
      acc = is_float(t) ? acc / n : (double)((long long)acc / (long long)n);
    }
    set(t, expect, k, acc);
  }
  cube_handle_t s[8], d[8];
  bool ok = true;
  for (uint32_t i = 0; i < n; ++i) {
    REQUIRE_OK_RET(cube_client_create_from_slice(c[i], in[i], bytes, &s[i]));
    REQUIRE_OK_RET(cube_client_create_from_slice(c[i], poison, bytes, &d[i]));
  }
  for (uint32_t i = 0; i < n; ++i) CHECK_OK(cube_client_all_reduce(c[i], s[i], d[i], t, n, ids, op));
  for (uint32_t i = 0; i < n; ++i) CHECK_OK(cube_client_sync_collective(c[i]));
  for (uint32_t i = 0; i < n; ++i) {
    cube_bytes_t* got = NULL;
    cube_status_t st = cube_client_read_one(c[i], d[i], &got);
    bool same = !st && cube_bytes_size(got) == bytes &&
                memcmp(cube_bytes_const_data(got), expect, bytes) == 0;
    if (!same) {
      ok = false;
      fprintf(stderr, "%s %s over %u devices: device %u differs%s%s\n", cube_dtype_name(t),
              cube_reduce_op_name(op), n, i, st ? ": " : "", st ? cube_status_message(st) : "");
      for (size_t k = 0; !st && k < count; ++k)
        if (get(t, cube_bytes_const_data(got), k) != get(t, expect, k)) {
          fprintf(stderr, "  [%zu] = %g, expected %g\n", k, get(t, cube_bytes_const_data(got), k),
                  get(t, expect, k));
          break;
        }
    }
    cube_status_free(st);
    cube_bytes_release(got);
  }
  for (uint32_t i = 0; i < n; ++i) {
    cube_handle_release(s[i]);
    cube_handle_release(d[i]);
    free(in[i]);
  }
  free(expect);
  free(poison);
  return ok;
}

CUBE_TEST(transport_is_nccl_and_said) {
  SETUP("2");
  const char* detail = NULL;
  const char* t = cube_collective_transport(CUBE_BACKEND_CUDA, &detail);
  REQUIRE(t != NULL);
  CHECK(strcmp(t, "nccl") == 0);
  CHECK(detail && strstr(detail, "NCCL 2.28.9") && strstr(detail, "mock_nccl"));
  CHECK(strcmp(cube_collective_transport(CUBE_BACKEND_CPU, NULL), "host") == 0);
  /* NVLink multicast stays off for NCCL, unless the user set it. */
  const char* nvls = getenv("NCCL_NVLS_ENABLE");
  CHECK(nvls && strcmp(nvls, "0") == 0);
  cube_shutdown();
}

/* Every element type and op, on 2 then 3 devices. */
CUBE_TEST(all_types_and_ops) {
  SETUP("3");
  cube_client_t* c[3];
  for (uint32_t i = 0; i < 3; ++i) REQUIRE_OK(cube_client_load(cuda(i), &c[i]));
  const cube_dtype_t types[] = {CUBE_DTYPE_U8,  CUBE_DTYPE_I8,  CUBE_DTYPE_U32, CUBE_DTYPE_I32,
                                CUBE_DTYPE_U64, CUBE_DTYPE_I64, CUBE_DTYPE_F16, CUBE_DTYPE_BF16,
                                CUBE_DTYPE_F32, CUBE_DTYPE_F64};
  uint64_t rng = 0xc0ffee;
  int cases = 0;
  for (uint32_t n = 2; n <= 3; ++n)
    for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ++ti)
      for (int op = 0; op < CUBE__REDUCE_OP_COUNT; ++op) {
        if (op == CUBE_REDUCE_MEAN && is_float(types[ti]) && n != 2) continue; /* 1/3 rounds */
        size_t count = 1 + (size_t)(cube_test_rand(&rng) % 3000);
        CHECK(one_all_reduce(c, n, types[ti], (cube_reduce_op_t)op, count, &rng));
        cases++;
      }
  CHECK_EQ_U64(cases, 2 * 10 * 5 - 4);
  nccl_stats_t s;
  nccl_stats(&s);
  CHECK(s.all_reduces >= cases * 2);
  CHECK(s.max_group_calls >= 3); /* every local rank of an operation in one group */
  CHECK(s.in_progress_returns > 0); /* nonblocking communicators were polled */
  for (uint32_t i = 0; i < 3; ++i) cube_client_release(c[i]);
  cube_shutdown();
  nccl_stats(&s);
  CHECK_EQ_U64(s.comms_live, 0); /* destroyed at shutdown */
}

/* One thread drives both devices through inline queues: every call runs on
 * the caller, and the last participant issues for both. No deadlock. */
CUBE_TEST(inline_one_thread_two_devices) {
  SETUP("2");
  setenv("CUBE_DEVICE_QUEUE", "inline", 1);
  cube_client_t* c[2];
  for (uint32_t i = 0; i < 2; ++i) REQUIRE_OK(cube_client_load(cuda(i), &c[i]));
  CHECK(cube_client_is_blocking(c[0]) && cube_client_is_blocking(c[1]));
  uint64_t rng = 77;
  for (int round = 0; round < 20; ++round)
    CHECK(one_all_reduce(c, 2, round % 2 ? CUBE_DTYPE_F32 : CUBE_DTYPE_I64, CUBE_REDUCE_SUM,
                         100 + (size_t)round * 37, &rng));
  /* Several operations queued before any sync_collective. */
  float a[64], b[64], sum[64];
  cube_test_fill_random(a, sizeof(a), 1);
  for (int i = 0; i < 64; ++i) {
    a[i] = (float)(i % 7);
    b[i] = (float)(i % 5);
    sum[i] = a[i] + b[i];
  }
  cube_device_id_t ids[2] = {cuda(0), cuda(1)};
  cube_handle_t h0, h1;
  REQUIRE_OK(cube_client_create_from_slice(c[0], a, sizeof(a), &h0));
  REQUIRE_OK(cube_client_create_from_slice(c[1], b, sizeof(b), &h1));
  for (int k = 0; k < 3; ++k) {
    CHECK_OK(cube_client_all_reduce(c[0], h0, h0, CUBE_DTYPE_F32, 2, ids, CUBE_REDUCE_MAX));
    CHECK_OK(cube_client_all_reduce(c[1], h1, h1, CUBE_DTYPE_F32, 2, ids, CUBE_REDUCE_MAX));
  }
  CHECK_OK(cube_client_all_reduce(c[0], h0, h0, CUBE_DTYPE_F32, 2, ids, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_all_reduce(c[1], h1, h1, CUBE_DTYPE_F32, 2, ids, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_sync_collective(c[0]));
  CHECK_OK(cube_client_sync_collective(c[1]));
  float expect[64];
  for (int i = 0; i < 64; ++i) expect[i] = 2 * (a[i] > b[i] ? a[i] : b[i]);
  CHECK(cube_test_read_equals(c[0], h0, expect, sizeof(expect)));
  CHECK(cube_test_read_equals(c[1], h1, expect, sizeof(expect)));
  (void)sum;
  /* to_client from one thread: send, recv and both syncs inline. */
  cube_handle_t moved;
  CHECK_OK(cube_client_to_client(c[0], h0, c[1], &moved));
  CHECK(cube_test_read_equals(c[1], moved, expect, sizeof(expect)));
  cube_collective_record_t r = {0};
  CHECK_OK(cube_client_last_collective(c[1], &r));
  CHECK(r.kind == CUBE_COLLECTIVE_RECV && r.transport && strcmp(r.transport, "nccl") == 0);
  /* Every context pushed on this (the user's) thread was popped. */
  CHECK_EQ_U64(pushes_outstanding(), 0);
  cube_handle_release(h0);
  cube_handle_release(h1);
  cube_handle_release(moved);
  for (uint32_t i = 0; i < 2; ++i) cube_client_release(c[i]);
  cube_shutdown();
}

/* CUBE_NCCL_BLOCKING=1: blocking communicators (created in one group all the
 * same), from one thread and from a thread per device. */
CUBE_TEST(blocking_communicators) {
  SETUP("2");
  setenv("CUBE_NCCL_BLOCKING", "1", 1);
  for (int inline_mode = 0; inline_mode < 2; ++inline_mode) {
    setenv("CUBE_DEVICE_QUEUE", inline_mode ? "inline" : "threaded", 1);
    cube_client_t* c[2];
    for (uint32_t i = 0; i < 2; ++i) REQUIRE_OK(cube_client_load(cuda(i), &c[i]));
    uint64_t rng = 21;
    for (int round = 0; round < 4; ++round)
      CHECK(one_all_reduce(c, 2, CUBE_DTYPE_U32, CUBE_REDUCE_PROD, 500, &rng));
    for (uint32_t i = 0; i < 2; ++i) cube_client_release(c[i]);
    cube_shutdown();
  }
  nccl_stats_t s;
  nccl_stats(&s);
  CHECK_EQ_U64(s.in_progress_returns, 0); /* blocking: nothing to poll */
  CHECK_EQ_U64(s.comms_live, 0);
}

typedef struct {
  cube_client_t* c;
  uint32_t self;
  int rounds;
  int failures;
} worker_t;

/* Each thread: its device's part of |rounds| all_reduces (values known to
 * every thread), then one sync_collective, then the checks. */
static void* worker_main(void* p) {
  worker_t* w = p;
  cube_device_id_t ids[2] = {cuda(0), cuda(1)};
  enum { N = 4096 };
  cube_handle_t h[8];
  int32_t* v = malloc(N * sizeof(int32_t));
  for (int r = 0; r < w->rounds; ++r) {
    for (int i = 0; i < N; ++i) v[i] = (int32_t)(i * (int)(w->self + 1) + r);
    if (cube_client_create_from_slice(w->c, v, N * sizeof(int32_t), &h[r])) w->failures++;
    if (cube_client_all_reduce(w->c, h[r], h[r], CUBE_DTYPE_I32, 2, ids, CUBE_REDUCE_SUM))
      w->failures++;
  }
  if (cube_client_sync_collective(w->c)) w->failures++;
  for (int r = 0; r < w->rounds; ++r) {
    for (int i = 0; i < N; ++i) v[i] = (int32_t)(i * 3 + 2 * r);
    if (!cube_test_read_equals(w->c, h[r], v, N * sizeof(int32_t))) w->failures++;
    cube_handle_release(h[r]);
  }
  free(v);
  return NULL;
}

CUBE_TEST(one_thread_per_device) {
  SETUP("2");
  setenv("CUBE_DEVICE_QUEUE", "threaded", 1);
  for (int repeat = 0; repeat < 5; ++repeat) {
    worker_t w[2];
    pthread_t t[2];
    for (uint32_t i = 0; i < 2; ++i) {
      w[i] = (worker_t){NULL, i, 8, 0};
      REQUIRE_OK(cube_client_load(cuda(i), &w[i].c));
    }
    for (int i = 0; i < 2; ++i) pthread_create(&t[i], NULL, worker_main, &w[i]);
    for (int i = 0; i < 2; ++i) pthread_join(t[i], NULL);
    CHECK(w[0].failures == 0 && w[1].failures == 0);
    for (int i = 0; i < 2; ++i) cube_client_release(w[i].c);
  }
  cube_shutdown();
}

CUBE_TEST(send_recv_both_ways_and_self) {
  SETUP("2");
  cube_client_t* c[2];
  for (uint32_t i = 0; i < 2; ++i) REQUIRE_OK(cube_client_load(cuda(i), &c[i]));
  unsigned char m0[5000], m1[5000], poison[5000];
  cube_test_fill_random(m0, sizeof(m0), 10);
  cube_test_fill_random(m1, sizeof(m1), 11);
  memset(poison, 0xee, sizeof(poison));
  cube_handle_t s0, s1, r0, r1, self;
  REQUIRE_OK(cube_client_create_from_slice(c[0], m0, sizeof(m0), &s0));
  REQUIRE_OK(cube_client_create_from_slice(c[1], m1, sizeof(m1), &s1));
  REQUIRE_OK(cube_client_create_from_slice(c[0], poison, sizeof(poison), &r0));
  REQUIRE_OK(cube_client_create_from_slice(c[1], poison, sizeof(poison), &r1));
  REQUIRE_OK(cube_client_create_from_slice(c[0], poison, sizeof(poison), &self));
  /* Both send first, then both receive: the pairs are separate operations. */
  CHECK_OK(cube_client_send(c[0], s0, cuda(1)));
  CHECK_OK(cube_client_send(c[1], s1, cuda(0)));
  CHECK_OK(cube_client_recv(c[0], r0, cuda(1)));
  CHECK_OK(cube_client_recv(c[1], r1, cuda(0)));
  CHECK_OK(cube_client_send(c[0], s0, cuda(0)));
  CHECK_OK(cube_client_recv(c[0], self, cuda(0)));
  CHECK_OK(cube_client_sync_collective(c[0]));
  CHECK_OK(cube_client_sync_collective(c[1]));
  CHECK(cube_test_read_equals(c[0], r0, m1, sizeof(m1)));
  CHECK(cube_test_read_equals(c[1], r1, m0, sizeof(m0)));
  CHECK(cube_test_read_equals(c[0], self, m0, sizeof(m0)));
  /* Sizes that differ: an error naming both, nothing written. */
  cube_handle_t small;
  REQUIRE_OK(cube_client_create_from_slice(c[1], poison, 100, &small));
  CHECK_OK(cube_client_send(c[0], s0, cuda(1)));
  CHECK_OK(cube_client_recv(c[1], small, cuda(0)));
  cube_status_t e0 = cube_client_sync_collective(c[0]);
  if (!e0) e0 = cube_client_sync(c[0]);
  CHECK_STATUS(e0, CUBE_STATUS_INVALID_ARGUMENT, "5000", "100", "send/recv");
  cube_status_t e1 = cube_client_sync_collective(c[1]);
  if (!e1) e1 = cube_client_sync(c[1]);
  CHECK_STATUS(e1, CUBE_STATUS_INVALID_ARGUMENT, "5000", "100");
  /* Not written: its contents are not the recv's (docs/failures.md). */
  CHECK(cube_test_read_lost(c[1], small, "the sender has 5000 bytes, the receiver 100"));
  cube_handle_t hl[] = {s0, s1, r0, r1, self, small};
  for (size_t i = 0; i < 6; ++i) cube_handle_release(hl[i]);
  for (uint32_t i = 0; i < 2; ++i) cube_client_release(c[i]);
  cube_shutdown();
}

/* A participant that never joins: the rendezvous abandons the operation
 * (no NCCL call is made), names the device, and the next operation works. */
CUBE_TEST(missing_participant_times_out) {
  SETUP("2");
  setenv("CUBE_COLLECTIVE_TIMEOUT", "0.3", 1);
  cube_client_t* c[2];
  for (uint32_t i = 0; i < 2; ++i) REQUIRE_OK(cube_client_load(cuda(i), &c[i]));
  cube_device_id_t ids[2] = {cuda(0), cuda(1)};
  float v[16] = {1}, poison[16];
  memset(poison, 0x7f, sizeof(poison));
  cube_handle_t a, d, b, e;
  REQUIRE_OK(cube_client_create_from_slice(c[0], v, sizeof(v), &a));
  REQUIRE_OK(cube_client_create_from_slice(c[0], poison, sizeof(poison), &d));
  CHECK_OK(cube_client_all_reduce(c[0], a, d, CUBE_DTYPE_F32, 2, ids, CUBE_REDUCE_SUM));
  cube_status_t st = cube_client_sync_collective(c[0]);
  if (!st) st = cube_client_sync(c[0]);
  CHECK_STATUS(st, CUBE_STATUS_DEADLINE_EXCEEDED, "cuda:1", "did not join", "all_reduce #0");
  CHECK(cube_test_read_lost(c[0], d, "cuda:1 did not join"));
  nccl_stats_t s;
  nccl_stats(&s);
  CHECK_EQ_U64(s.all_reduces, 0);
  /* The late participant gets the same error at once. */
  REQUIRE_OK(cube_client_create_from_slice(c[1], v, sizeof(v), &b));
  REQUIRE_OK(cube_client_create_from_slice(c[1], poison, sizeof(poison), &e));
  CHECK_OK(cube_client_all_reduce(c[1], b, e, CUBE_DTYPE_F32, 2, ids, CUBE_REDUCE_SUM));
  st = cube_client_sync_collective(c[1]);
  if (!st) st = cube_client_sync(c[1]);
  CHECK_STATUS(st, CUBE_STATUS_DEADLINE_EXCEEDED, "cuda:1", "all_reduce #0");
  /* The next operation works. */
  uint64_t rng = 5;
  CHECK(one_all_reduce(c, 2, CUBE_DTYPE_F32, CUBE_REDUCE_SUM, 333, &rng));
  cube_handle_t hl[] = {a, d, b, e};
  for (size_t i = 0; i < 4; ++i) cube_handle_release(hl[i]);
  for (uint32_t i = 0; i < 2; ++i) cube_client_release(c[i]);
  cube_shutdown();
}

/* Every participant joined but NCCL never finishes (a peer process gone, a
 * hung link: the mock's hang): sync_collective waits the timeout, aborts the
 * communicator and fails; nothing is written; the next operation builds a
 * new communicator and works. */
CUBE_TEST(nccl_that_never_finishes_is_aborted) {
  SETUP("2");
  setenv("CUBE_COLLECTIVE_TIMEOUT", "0.3", 1);
  cube_client_t* c[2];
  for (uint32_t i = 0; i < 2; ++i) REQUIRE_OK(cube_client_load(cuda(i), &c[i]));
  uint64_t rng = 9;
  CHECK(one_all_reduce(c, 2, CUBE_DTYPE_I32, CUBE_REDUCE_SUM, 10, &rng)); /* creates the comm */
  nccl_stats_t before, after;
  nccl_stats(&before);
  cube_device_id_t ids[2] = {cuda(0), cuda(1)};
  float v[32], poison[32];
  for (int i = 0; i < 32; ++i) v[i] = (float)i;
  memset(poison, 0x7f, sizeof(poison));
  cube_handle_t s[2], d[2], s2[2], d2[2];
  for (int i = 0; i < 2; ++i) {
    REQUIRE_OK(cube_client_create_from_slice(c[i], v, sizeof(v), &s[i]));
    REQUIRE_OK(cube_client_create_from_slice(c[i], poison, sizeof(poison), &d[i]));
    REQUIRE_OK(cube_client_create_from_slice(c[i], v, sizeof(v), &s2[i]));
    REQUIRE_OK(cube_client_create_from_slice(c[i], poison, sizeof(poison), &d2[i]));
  }
  nccl_hang(1);
  /* The hung one, and one queued behind it on the same communicator. */
  for (int i = 0; i < 2; ++i)
    CHECK_OK(cube_client_all_reduce(c[i], s[i], d[i], CUBE_DTYPE_F32, 2, ids, CUBE_REDUCE_SUM));
  for (int i = 0; i < 2; ++i)
    CHECK_OK(cube_client_all_reduce(c[i], s2[i], d2[i], CUBE_DTYPE_F32, 2, ids, CUBE_REDUCE_SUM));
  for (int i = 0; i < 2; ++i) {
    cube_status_t st = cube_client_sync_collective(c[i]);
    if (!st) st = cube_client_sync(c[i]);
    CHECK_STATUS(st, CUBE_STATUS_DEADLINE_EXCEEDED, "all_reduce #1", "NCCL did not complete",
                 "aborted");
    cube_status_free(cube_client_sync(c[i]));
    CHECK(cube_test_read_equals(c[i], d[i], poison, sizeof(poison)));
    CHECK(cube_test_read_equals(c[i], d2[i], poison, sizeof(poison)));
  }
  nccl_stats(&after);
  CHECK_EQ_U64(after.aborts - before.aborts, 2);
  /* A new communicator for the next operation. */
  CHECK(one_all_reduce(c, 2, CUBE_DTYPE_F32, CUBE_REDUCE_SUM, 77, &rng));
  nccl_stats(&after);
  CHECK_EQ_U64(after.inits - before.inits, 2);
  for (int i = 0; i < 2; ++i) {
    cube_handle_release(s[i]);
    cube_handle_release(d[i]);
    cube_handle_release(s2[i]);
    cube_handle_release(d2[i]);
  }
  for (uint32_t i = 0; i < 2; ++i) cube_client_release(c[i]);
  cube_shutdown();
}

/* NCCL reads src and writes dst after the participant's task returned: the
 * buffers stay referenced until its done event, even when every handle is
 * released at once and new buffers are made meanwhile (ASan would see a
 * freed mock allocation being used). Uploads land late on purpose. */
CUBE_TEST(buffers_released_before_sync_stay_alive) {
  SETUP("2");
  setenv("CUBE_MOCK_CUDA_DELAY_US", "200", 1);
  cube_client_t* c[2];
  for (uint32_t i = 0; i < 2; ++i) REQUIRE_OK(cube_client_load(cuda(i), &c[i]));
  cube_device_id_t ids[2] = {cuda(0), cuda(1)};
  enum { N = 1 << 16 };
  float* v = malloc(N * sizeof(float));
  for (int i = 0; i < N; ++i) v[i] = (float)(i % 100);
  cube_handle_t keep[2];
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i < 2; ++i) {
      cube_handle_t s, d;
      REQUIRE_OK(cube_client_create_from_slice(c[i], v, N * sizeof(float), &s));
      REQUIRE_OK(cube_client_empty(c[i], N * sizeof(float), &d));
      CHECK_OK(cube_client_all_reduce(c[i], s, d, CUBE_DTYPE_F32, 2, ids, CUBE_REDUCE_SUM));
      cube_handle_release(s);
      cube_handle_release(d);
      CHECK_OK(cube_client_memory_cleanup(c[i]));
    }
  }
  for (int i = 0; i < 2; ++i) {
    REQUIRE_OK(cube_client_create_from_slice(c[i], v, N * sizeof(float), &keep[i]));
    CHECK_OK(cube_client_all_reduce(c[i], keep[i], keep[i], CUBE_DTYPE_F32, 2, ids,
                                    CUBE_REDUCE_SUM));
  }
  for (int i = 0; i < 2; ++i) CHECK_OK(cube_client_sync_collective(c[i]));
  for (int i = 0; i < N; ++i) v[i] *= 2;
  for (int i = 0; i < 2; ++i) {
    CHECK(cube_test_read_equals(c[i], keep[i], v, N * sizeof(float)));
    cube_handle_release(keep[i]);
  }
  free(v);
  for (uint32_t i = 0; i < 2; ++i) cube_client_release(c[i]);
  cube_shutdown();
}

CUBE_TEST(records_time_and_bandwidth) {
  SETUP("3");
  cube_client_t* c[3];
  for (uint32_t i = 0; i < 3; ++i) REQUIRE_OK(cube_client_load(cuda(i), &c[i]));
  uint64_t rng = 3;
  CHECK(one_all_reduce(c, 3, CUBE_DTYPE_F64, CUBE_REDUCE_SUM, 4096, &rng));
  for (uint32_t i = 0; i < 3; ++i) {
    cube_collective_record_t r = {0};
    REQUIRE_OK(cube_client_last_collective(c[i], &r));
    CHECK(r.kind == CUBE_COLLECTIVE_ALL_REDUCE && r.dtype == CUBE_DTYPE_F64);
    CHECK(r.bytes == 4096 * 8 && r.participants == 3 && r.ranks == 1 && r.sequence == 0);
    CHECK(r.transport && strcmp(r.transport, "nccl") == 0);
    CHECK(r.time_ns > 0);
    double algbw = (double)r.bytes / (double)r.time_ns;
    CHECK(r.algbw_gbps > 0.999 * algbw && r.algbw_gbps < 1.001 * algbw);
    CHECK(r.busbw_gbps > 0.999 * algbw * 4.0 / 3.0 && r.busbw_gbps < 1.001 * algbw * 4.0 / 3.0);
  }
  for (uint32_t i = 0; i < 3; ++i) cube_client_release(c[i]);
  cube_shutdown();
}

/* Work in flight (no sync_collective) at shutdown: it finishes (or is
 * aborted), the buffers are given back, nothing hangs; cube works again. */
CUBE_TEST(shutdown_with_work_in_flight) {
  SETUP("2");
  setenv("CUBE_MOCK_CUDA_DELAY_US", "100", 1);
  for (int round = 0; round < 2; ++round) {
    cube_client_t* c[2];
    for (uint32_t i = 0; i < 2; ++i) REQUIRE_OK(cube_client_load(cuda(i), &c[i]));
    cube_device_id_t ids[2] = {cuda(0), cuda(1)};
    float v[1000] = {0};
    for (int k = 0; k < 5; ++k)
      for (int i = 0; i < 2; ++i) {
        cube_handle_t h;
        REQUIRE_OK(cube_client_create_from_slice(c[i], v, sizeof(v), &h));
        CHECK_OK(cube_client_all_reduce(c[i], h, h, CUBE_DTYPE_F32, 2, ids, CUBE_REDUCE_SUM));
        cube_handle_release(h);
      }
    for (uint32_t i = 0; i < 2; ++i) cube_client_release(c[i]);
    cube_shutdown();
  }
  nccl_stats_t s;
  nccl_stats(&s);
  CHECK_EQ_U64(s.comms_live, 0);
}

/* Without NCCL: the staged transport, and it says so. */
CUBE_TEST(fallback_to_staged_without_nccl) {
  SETUP("2");
  setenv("CUBE_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
  const char* detail = NULL;
  const char* t = cube_collective_transport(CUBE_BACKEND_CUDA, &detail);
  REQUIRE(t != NULL);
  CHECK(strcmp(t, "staged") == 0);
  CHECK(detail && strstr(detail, "/nonexistent/libnccl.so.2") && strstr(detail, "could not be loaded"));
  cube_client_t* c[2];
  for (uint32_t i = 0; i < 2; ++i) REQUIRE_OK(cube_client_load(cuda(i), &c[i]));
  CHECK(cube_client_features(c[0])->bits & CUBE_FEATURE_COLLECTIVES);
  uint64_t rng = 4;
  CHECK(one_all_reduce(c, 2, CUBE_DTYPE_I32, CUBE_REDUCE_MEAN, 999, &rng));
  CHECK(one_all_reduce(c, 2, CUBE_DTYPE_BF16, CUBE_REDUCE_MAX, 99, &rng));
  cube_collective_record_t r = {0};
  CHECK_OK(cube_client_last_collective(c[1], &r));
  CHECK(r.transport && strcmp(r.transport, "staged") == 0);
  for (uint32_t i = 0; i < 2; ++i) cube_client_release(c[i]);
  cube_shutdown();
}

/* An NCCL older than 2.14 (no nonblocking communicators): staged, and why. */
CUBE_TEST(fallback_to_staged_with_old_nccl) {
  SETUP("2");
  setenv("CUBE_MOCK_NCCL_VERSION", "21304", 1);
  const char* detail = NULL;
  const char* t = cube_collective_transport(CUBE_BACKEND_CUDA, &detail);
  REQUIRE(t != NULL);
  CHECK(strcmp(t, "staged") == 0);
  CHECK(detail && strstr(detail, "2.13.4") && strstr(detail, "2.14"));
  cube_shutdown();
}

/* Two stream ids that map to one stream slot (id % max_streams) are one
 * stream: a sync_collective under the other id finishes the parts queued
 * under the first (nccl: the part is waited for and its record written then;
 * staged: the result is written back then). */
static void stream_alias(bool staged) {
  SETUP("2");
  if (staged) setenv("CUBE_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
  setenv("CUBE_MAX_STREAMS", "4", 1);
  setenv("CUBE_MOCK_CUDA_DELAY_US", "100", 1);
  const char* t = cube_collective_transport(CUBE_BACKEND_CUDA, NULL);
  REQUIRE(t && strcmp(t, staged ? "staged" : "nccl") == 0);
  cube_client_t* c[2];
  for (uint32_t i = 0; i < 2; ++i) REQUIRE_OK(cube_client_load(cuda(i), &c[i]));
  cube_stream_id_t a = cube_stream_id_new(), b = a + 4;
  cube_client_set_stream(c[0], a);
  cube_device_id_t ids[2] = {cuda(1), cuda(0)};
  enum { N = 3001 };
  int32_t* x = malloc(N * sizeof(int32_t));
  int32_t* y = malloc(N * sizeof(int32_t));
  int32_t* sum = malloc(N * sizeof(int32_t));
  REQUIRE(x && y && sum);
  uint64_t rng = 0x5eed ^ (uint64_t)a;
  for (size_t i = 0; i < N; ++i) {
    x[i] = (int32_t)(cube_test_rand(&rng) % 200001) - 100000;
    y[i] = (int32_t)(cube_test_rand(&rng) % 200001) - 100000;
    sum[i] = x[i] + y[i];
  }
  cube_handle_t h0, h1;
  REQUIRE_OK(cube_client_create_from_slice(c[0], x, N * sizeof(int32_t), &h0));
  REQUIRE_OK(cube_client_create_from_slice(c[1], y, N * sizeof(int32_t), &h1));
  CHECK_OK(cube_client_all_reduce(c[0], h0, h0, CUBE_DTYPE_I32, 2, ids, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_all_reduce(c[1], h1, h1, CUBE_DTYPE_I32, 2, ids, CUBE_REDUCE_SUM));
  cube_client_set_stream(c[0], b);
  CHECK_OK(cube_client_sync_collective(c[0]));
  CHECK_OK(cube_client_sync_collective(c[1]));
  CHECK(cube_test_read_equals(c[0], h0, sum, N * sizeof(int32_t)));
  CHECK(cube_test_read_equals(c[1], h1, sum, N * sizeof(int32_t)));
  CHECK_OK(cube_client_flush(c[0]));
  cube_collective_record_t r; /* the reads ran after the syncs */
  CHECK_OK(cube_client_last_collective(c[0], &r));
  CHECK(r.transport && strcmp(r.transport, t) == 0 && r.bytes == N * sizeof(int32_t));
  cube_handle_release(h0);
  cube_handle_release(h1);
  free(x);
  free(y);
  free(sum);
  for (uint32_t i = 0; i < 2; ++i) cube_client_release(c[i]);
  cube_shutdown();
  unsetenv("CUBE_MAX_STREAMS");
  unsetenv("CUBE_MOCK_CUDA_DELAY_US");
}

CUBE_TEST(stream_alias_is_one_stream) { stream_alias(false); }
CUBE_TEST(stream_alias_is_one_stream_staged) { stream_alias(true); }

/* Processes ------------------------------------------------------------------ */

/* Runs |fn|(i) in |n| child processes (forked before any cube call of the
 * parent's), each with at most |seconds|; returns the number that failed. */
static int run_children(int n, int (*fn)(int), int seconds) {
  pid_t pid[8];
  for (int i = 0; i < n; ++i) {
    pid[i] = fork();
    if (pid[i] == 0) {
      alarm((unsigned)seconds);
      _exit(fn(i));
    }
  }
  int failed = 0;
  for (int i = 0; i < n; ++i) {
    int status = 0;
    if (pid[i] < 0 || waitpid(pid[i], &status, 0) != pid[i] || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
      fprintf(stderr, "process %d: %s %d\n", i,
              pid[i] > 0 && WIFSIGNALED(status) ? "signal" : "exit",
              pid[i] > 0 && WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
      failed++;
    }
  }
  return failed;
}

static char g_dir[512];

static int make_dir(void) {
  const char* base = getenv("CUBE_TEST_TMPDIR");
  snprintf(g_dir, sizeof(g_dir), "%s/nccl-%ld-%ld", base && *base ? base : "/tmp", (long)getpid(),
           (long)time(NULL));
  return mkdir(g_dir, 0700);
}

/* One process per GPU (each sees one mock GPU): global ids cuda:0, cuda:1;
 * the unique id goes through CUBE_NCCL_ID_FILE, the mock's parts through
 * files too. */
static int id_file_child(int rank) {
  char v[16], path[600];
  snprintf(v, sizeof(v), "%d", rank);
  setenv("CUBE_COLLECTIVE_RANK", v, 1);
  setenv("CUBE_COLLECTIVE_RANKS", "2", 1);
  snprintf(path, sizeof(path), "%s/id", g_dir);
  setenv("CUBE_NCCL_ID_FILE", path, 1);
  setenv("CUBE_MOCK_NCCL_DIR", g_dir, 1);
  setenv("CUBE_COLLECTIVE_TIMEOUT", "20", 1);
  cube_client_t* c = NULL;
  cube_status_t st = cube_client_load(cuda(0), &c);
  if (st) {
    fprintf(stderr, "rank %d: %s\n", rank, cube_status_message(st));
    return 2;
  }
  cube_device_id_t ids[2] = {cuda(0), cuda(1)};
  enum { N = 3000 };
  int64_t* x = malloc(N * sizeof(int64_t));
  int bad = 0;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < N; ++i) x[i] = (int64_t)i * (rank + 1) - round;
    cube_handle_t h;
    if (cube_client_create_from_slice(c, x, N * sizeof(int64_t), &h)) return 3;
    st = cube_client_all_reduce(c, h, h, CUBE_DTYPE_I64, 2, ids, CUBE_REDUCE_SUM);
    if (!st) st = cube_client_sync_collective(c);
    if (!st) st = cube_client_sync(c);
    if (st) {
      fprintf(stderr, "rank %d: %s\n", rank, cube_status_message(st));
      return 4;
    }
    for (int i = 0; i < N; ++i) x[i] = (int64_t)i * 3 - 2 * round;
    bad += !cube_test_read_equals(c, h, x, N * sizeof(int64_t));
    cube_collective_record_t r = {0};
    if (cube_client_last_collective(c, &r) || r.ranks != 2 || r.participants != 2) bad++;
    cube_handle_release(h);
  }
  /* send/recv across the processes: rank 0 -> rank 1. */
  unsigned char msg[777];
  cube_test_fill_random(msg, sizeof(msg), 42);
  cube_handle_t m;
  if (rank == 0) {
    if (cube_client_create_from_slice(c, msg, sizeof(msg), &m)) return 5;
    st = cube_client_send(c, m, cuda(1));
  } else {
    if (cube_client_empty(c, sizeof(msg), &m)) return 5;
    st = cube_client_recv(c, m, cuda(0));
  }
  if (!st) st = cube_client_sync_collective(c);
  if (!st) st = cube_client_sync(c);
  if (st) {
    fprintf(stderr, "rank %d send/recv: %s\n", rank, cube_status_message(st));
    return 6;
  }
  if (rank == 1) bad += !cube_test_read_equals(c, m, msg, sizeof(msg));
  cube_handle_release(m);
  free(x);
  cube_client_release(c);
  cube_shutdown();
  return bad ? 7 : 0;
}

CUBE_TEST(processes_share_the_id_through_a_file) {
  SETUP("1");
  REQUIRE(make_dir() == 0);
  CHECK_EQ_U64(run_children(2, id_file_child, 60), 0);
}

/* In a child process: one all_reduce over cuda:0 and cuda:1 (this process
 * has only the first) must fail with |code| and a message naming |a| and |b|.
 * Returns 0 when it does. */
static int one_all_reduce_fails(cube_status_code_t code, const char* a, const char* b) {
  cube_client_t* c = NULL;
  if (cube_client_load(cuda(0), &c)) return 2;
  cube_device_id_t ids[2] = {cuda(0), cuda(1)};
  cube_handle_t h;
  float v[4] = {1, 2, 3, 4};
  if (cube_client_create_from_slice(c, v, sizeof(v), &h)) return 3;
  cube_status_t st = cube_client_all_reduce(c, h, h, CUBE_DTYPE_F32, 2, ids, CUBE_REDUCE_SUM);
  if (!st) st = cube_client_sync_collective(c);
  if (!st) st = cube_client_sync(c);
  int ok = cube_status_code(st) == code && strstr(cube_status_message(st), a) &&
           strstr(cube_status_message(st), b);
  if (!ok) fprintf(stderr, "got: %s\n", st ? cube_status_message(st) : "OK");
  cube_status_free(st);
  cube_handle_release(h);
  cube_client_release(c);
  cube_shutdown();
  return ok ? 0 : 4;
}

/* The process that writes the id never comes: the other one says so. */
static int id_file_alone_child(int rank) {
  (void)rank;
  char path[600];
  setenv("CUBE_COLLECTIVE_RANK", "1", 1);
  setenv("CUBE_COLLECTIVE_RANKS", "2", 1);
  snprintf(path, sizeof(path), "%s/lonely", g_dir);
  setenv("CUBE_NCCL_ID_FILE", path, 1);
  setenv("CUBE_COLLECTIVE_TIMEOUT", "0.3", 1);
  return one_all_reduce_fails(CUBE_STATUS_DEADLINE_EXCEEDED, "CUBE_NCCL_ID_FILE", "process 0");
}

/* Several processes, no MPI and no CUBE_NCCL_ID_FILE: said at once. */
static int no_id_file_child(int rank) {
  (void)rank;
  setenv("CUBE_COLLECTIVE_RANK", "0", 1);
  setenv("CUBE_COLLECTIVE_RANKS", "2", 1);
  unsetenv("CUBE_NCCL_ID_FILE");
  return one_all_reduce_fails(CUBE_STATUS_UNAVAILABLE, "CUBE_NCCL_ID_FILE", "mpiexec");
}

CUBE_TEST(processes_without_mpi_need_an_id_file) {
  SETUP("1");
  CHECK_EQ_U64(run_children(1, no_id_file_child, 30), 0);
}

CUBE_TEST(id_file_that_never_appears_times_out) {
  SETUP("1");
  REQUIRE(make_dir() == 0);
  CHECK_EQ_U64(run_children(1, id_file_alone_child, 30), 0);
}

/* Files others can touch (docs/reliability.md): the id decides whom the
 * ranks connect to, so a reader takes it only from a regular file of its
 * own user that nobody else may write, and the writer's temporary file
 * follows no link and replaces nothing. */

/* The id file's full path (<base>.<hash>.<generation>), learned from the
 * message of a process that waits for it alone: the hash is the
 * communicator's, the same in every process for cuda:0 + cuda:1. */
static char g_id_path[700];

static int learn_id_path_child(int rank) {
  (void)rank;
  char base[600];
  setenv("CUBE_COLLECTIVE_RANK", "1", 1);
  setenv("CUBE_COLLECTIVE_RANKS", "2", 1);
  snprintf(base, sizeof(base), "%s/id", g_dir);
  setenv("CUBE_NCCL_ID_FILE", base, 1);
  setenv("CUBE_COLLECTIVE_TIMEOUT", "0.2", 1);
  cube_client_t* c = NULL;
  if (cube_client_load(cuda(0), &c)) return 2;
  cube_device_id_t ids[2] = {cuda(0), cuda(1)};
  cube_handle_t h;
  float v[4] = {1, 2, 3, 4};
  if (cube_client_create_from_slice(c, v, sizeof(v), &h)) return 3;
  cube_status_t st = cube_client_all_reduce(c, h, h, CUBE_DTYPE_F32, 2, ids, CUBE_REDUCE_SUM);
  if (!st) st = cube_client_sync_collective(c);
  if (!st) st = cube_client_sync(c);
  const char* m = cube_status_message(st);
  const char* a = strstr(m, " appear in ");
  const char* b = a ? strstr(a, " (CUBE_NCCL_ID_FILE)") : NULL;
  int rc = 4;
  if (a && b) {
    a += strlen(" appear in ");
    char path[700];
    snprintf(path, sizeof(path), "%.*s", (int)(b - a), a);
    FILE* f = fopen(getenv("ID_PATH_OUT"), "w");
    if (f) {
      fputs(path, f);
      fclose(f);
      rc = 0;
    }
  } else {
    fprintf(stderr, "learn: %s\n", m);
  }
  cube_status_free(st);
  cube_handle_release(h);
  cube_client_release(c);
  cube_shutdown();
  return rc;
}

static bool learn_id_path(void) {
  char out[600];
  snprintf(out, sizeof(out), "%s/id-path", g_dir);
  setenv("ID_PATH_OUT", out, 1);
  if (run_children(1, learn_id_path_child, 30) != 0) return false;
  FILE* f = fopen(out, "r");
  if (!f) return false;
  size_t n = fread(g_id_path, 1, sizeof(g_id_path) - 1, f);
  fclose(f);
  g_id_path[n] = '\0';
  unlink(out);
  return n > 0;
}

/* A reader (process 1) finds a planted id file: refused at once (well before
 * the 20 s deadline), naming the path and why. */
static const char* g_refusal;

static int planted_id_reader_child(int rank) {
  (void)rank;
  char base[600];
  setenv("CUBE_COLLECTIVE_RANK", "1", 1);
  setenv("CUBE_COLLECTIVE_RANKS", "2", 1);
  snprintf(base, sizeof(base), "%s/id", g_dir);
  setenv("CUBE_NCCL_ID_FILE", base, 1);
  setenv("CUBE_COLLECTIVE_TIMEOUT", "20", 1);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int rc = one_all_reduce_fails(CUBE_STATUS_FAILED_PRECONDITION, g_id_path, g_refusal);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (t1.tv_sec - t0.tv_sec > 10) rc = 5;
  return rc;
}

/* An id file of the right size that another user could have written. */
static void plant_id(const char* path, mode_t mode) {
  unsigned char id[128];
  cube_test_fill_random(id, sizeof(id), 7);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || write(fd, id, sizeof(id)) != (ssize_t)sizeof(id) || fchmod(fd, mode) != 0)
    perror(path);
  if (fd >= 0) close(fd);
}

CUBE_TEST(id_file_through_a_link_is_refused) {
  SETUP("1");
  REQUIRE(make_dir() == 0);
  REQUIRE(learn_id_path());
  char target[800];
  snprintf(target, sizeof(target), "%s/elsewhere", g_dir);
  plant_id(target, 0600);
  REQUIRE(symlink(target, g_id_path) == 0);
  g_refusal = "symbolic link";
  CHECK_EQ_U64(run_children(1, planted_id_reader_child, 30), 0);
}

CUBE_TEST(id_file_of_another_user_is_refused) {
  SETUP("1");
  if (geteuid() != 0) CUBE_SKIP("giving a file to another user needs root");
  REQUIRE(make_dir() == 0);
  REQUIRE(learn_id_path());
  plant_id(g_id_path, 0644);
  REQUIRE(chown(g_id_path, 65534, 65534) == 0);
  g_refusal = "belongs to uid 65534";
  CHECK_EQ_U64(run_children(1, planted_id_reader_child, 30), 0);
}

CUBE_TEST(id_file_writable_by_others_is_refused) {
  SETUP("1");
  REQUIRE(make_dir() == 0);
  REQUIRE(learn_id_path());
  plant_id(g_id_path, 0666);
  g_refusal = "writable by others (mode 0666)";
  CHECK_EQ_U64(run_children(1, planted_id_reader_child, 30), 0);
}

/* The writer (process 0) finds a link, then a file, where its temporary file
 * used to be named (<path>.tmp.<pid>): neither is followed or replaced, and
 * the id is still published (the process then waits for process 1, which
 * never comes: the deadline, not a failed write). */
static int g_plant_file;

static int planted_tmp_writer_child(int rank) {
  (void)rank;
  char base[600], tmp[800], victim[800];
  snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", g_id_path, (long)getpid());
  snprintf(victim, sizeof(victim), "%s/victim", g_dir);
  if (g_plant_file) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, "planted", 7) != 7) return 10;
    close(fd);
  } else if (symlink(victim, tmp) != 0) {
    return 11;
  }
  setenv("CUBE_COLLECTIVE_RANK", "0", 1);
  setenv("CUBE_COLLECTIVE_RANKS", "2", 1);
  snprintf(base, sizeof(base), "%s/id", g_dir);
  setenv("CUBE_NCCL_ID_FILE", base, 1);
  setenv("CUBE_COLLECTIVE_TIMEOUT", "0.3", 1);
  int rc = one_all_reduce_fails(CUBE_STATUS_DEADLINE_EXCEEDED, "deadline", "cuda:1");
  /* What was planted is still there, as it was. */
  struct stat st;
  if (lstat(tmp, &st) != 0) return 12;
  if (g_plant_file ? !S_ISREG(st.st_mode) || st.st_size != 7 : !S_ISLNK(st.st_mode)) return 13;
  char text[64] = "";
  FILE* f = fopen(g_plant_file ? tmp : victim, "r");
  size_t n = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
  if (f) fclose(f);
  text[n] = '\0';
  if (strcmp(text, g_plant_file ? "planted" : "victim") != 0) return 14;
  unlink(tmp);
  return rc;
}

CUBE_TEST(id_file_temporary_clobbers_nothing) {
  SETUP("1");
  REQUIRE(make_dir() == 0);
  REQUIRE(learn_id_path());
  char victim[800];
  snprintf(victim, sizeof(victim), "%s/victim", g_dir);
  FILE* f = fopen(victim, "w");
  REQUIRE(f);
  fputs("victim", f);
  fclose(f);
  g_plant_file = 0;
  CHECK_EQ_U64(run_children(1, planted_tmp_writer_child, 30), 0);
  g_plant_file = 1;
  CHECK_EQ_U64(run_children(1, planted_tmp_writer_child, 30), 0);
  /* No temporary file of the writer is left behind. */
  char cmd[1000];
  snprintf(cmd, sizeof(cmd), "ls '%s' | grep -q '\\.tmp\\.'", g_dir);
  CHECK(system(cmd) != 0);
}
