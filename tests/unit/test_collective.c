// cube-test-libs: cube_static
/* Collectives between CPU devices of one process (issue 5): all_reduce over
 * 1..4 devices for every element type and op against a host reference,
 * send/recv, to_client, ordering with kernels, several threads, mismatches,
 * the timeout naming the missing device, two stream ids of one stream,
 * profile records.
 *
 * Every case sets CUBE_CPU_DEVICES=4 and its queue mode (the _inline cases
 * CUBE_DEVICE_QUEUE=inline) before touching cube, and ends with cube_shutdown,
 * so the whole program may also run every case in one process. */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/abi.h"
#include "check.h"
#include "cube/cube.h"
#include "spoil_kernel.h"

#define MAXDEV 4

static void setup(const char* mode) {
  setenv("CUBE_CPU_DEVICES", "4", 1);
  setenv("CUBE_DEVICE_QUEUE", mode, 1);
  unsetenv("CUBE_COLLECTIVE_TIMEOUT");
}

static cube_device_id_t cpu(uint32_t i) {
  cube_device_id_t d = {CUBE_BACKEND_CPU, i};
  return d;
}

static cube_client_t* load(uint32_t i) {
  cube_client_t* c = NULL;
  cube_status_t s = cube_client_load(cpu(i), &c);
  if (s) {
    fprintf(stderr, "load cpu:%u: %s\n", i, cube_status_message(s));
    cube_status_free(s);
    return NULL;
  }
  return c;
}

//===----------------------------------------------------------------------===//
// Host reference
//===----------------------------------------------------------------------===//

static bool is_float(cube_dtype_t t) {
  return t == CUBE_DTYPE_F16 || t == CUBE_DTYPE_BF16 || t == CUBE_DTYPE_F32 || t == CUBE_DTYPE_F64;
}
static bool is_signed(cube_dtype_t t) {
  return t == CUBE_DTYPE_I8 || t == CUBE_DTYPE_I32 || t == CUBE_DTYPE_I64;
}

/* Small integers in 16-bit float encodings (exact for |v| <= 2048). */
static uint16_t f16_from_int(int v) {
  if (v == 0) return 0;
  uint16_t sign = v < 0 ? 0x8000 : 0;
  unsigned a = (unsigned)(v < 0 ? -v : v);
  int e = 0;
  while ((a >> (e + 1)) != 0) ++e;
  unsigned man = ((a << 10) >> e) & 0x3ff;
  return (uint16_t)(sign | ((unsigned)(e + 15) << 10) | man);
}
static double f16_to_double(uint16_t h) {
  int e = (h >> 10) & 0x1f;
  double m = h & 0x3ff;
  double v = e == 0 ? m / 1024.0 / 16384.0 : (1.0 + m / 1024.0) * (double)(1u << e) / 32768.0;
  return (h & 0x8000) ? -v : v;
}
static uint16_t bf16_from_int(int v) {
  float f = (float)v;
  uint32_t b;
  memcpy(&b, &f, 4);
  return (uint16_t)(b >> 16);
}
static double bf16_to_double(uint16_t h) {
  uint32_t b = (uint32_t)h << 16;
  float f;
  memcpy(&f, &b, 4);
  return f;
}

/* Element |i| of |p| as a double (floats) or as wrapped 64-bit integer bits. */
static double get_f(cube_dtype_t t, const void* p, size_t i) {
  switch (t) {
    case CUBE_DTYPE_F16: return f16_to_double(((const uint16_t*)p)[i]);
    case CUBE_DTYPE_BF16: return bf16_to_double(((const uint16_t*)p)[i]);
    case CUBE_DTYPE_F32: return ((const float*)p)[i];
    default: return ((const double*)p)[i];
  }
}
static int64_t get_i(cube_dtype_t t, const void* p, size_t i) {
  switch (t) {
    case CUBE_DTYPE_U8: return ((const uint8_t*)p)[i];
    case CUBE_DTYPE_I8: return ((const int8_t*)p)[i];
    case CUBE_DTYPE_U32: return ((const uint32_t*)p)[i];
    case CUBE_DTYPE_I32: return ((const int32_t*)p)[i];
    case CUBE_DTYPE_U64: return (int64_t)((const uint64_t*)p)[i];
    default: return ((const int64_t*)p)[i];
  }
}
/* Truncates to the type's width (two's complement), sign-extending signed types. */
static int64_t wrap_i(cube_dtype_t t, uint64_t v) {
  switch (t) {
    case CUBE_DTYPE_U8: return (uint8_t)v;
    case CUBE_DTYPE_I8: return (int8_t)(uint8_t)v;
    case CUBE_DTYPE_U32: return (uint32_t)v;
    case CUBE_DTYPE_I32: return (int32_t)(uint32_t)v;
    default: return (int64_t)v;
  }
}

/* Random contents: small integers (so float sums and products are exact). */
static void fill(cube_dtype_t t, cube_reduce_op_t op, void* p, size_t n, uint64_t* rng) {
  for (size_t i = 0; i < n; ++i) {
    uint64_t r = cube_test_rand(rng);
    int v;
    if (op == CUBE_REDUCE_PROD) {
      static const int s[4] = {-2, -1, 1, 2}, u[4] = {1, 2, 3, 1};
      v = is_signed(t) || is_float(t) ? s[r % 4] : u[r % 4];
    } else {
      v = is_signed(t) || is_float(t) ? (int)(r % 17) - 8 : (int)(r % 16);
    }
    if (t == CUBE_DTYPE_U64 || t == CUBE_DTYPE_I64 || t == CUBE_DTYPE_U32 || t == CUBE_DTYPE_I32) {
      if (op != CUBE_REDUCE_PROD && (r >> 60) == 0) v = (int)(r >> 32); /* large: wraps */
    }
    switch (t) {
      case CUBE_DTYPE_U8: ((uint8_t*)p)[i] = (uint8_t)v; break;
      case CUBE_DTYPE_I8: ((int8_t*)p)[i] = (int8_t)v; break;
      case CUBE_DTYPE_U32: ((uint32_t*)p)[i] = (uint32_t)v; break;
      case CUBE_DTYPE_I32: ((int32_t*)p)[i] = (int32_t)v; break;
      case CUBE_DTYPE_U64: ((uint64_t*)p)[i] = (uint64_t)(int64_t)v * 0x100000001ull; break;
      case CUBE_DTYPE_I64: ((int64_t*)p)[i] = (int64_t)v * 0x100000001ll; break;
      case CUBE_DTYPE_F16: ((uint16_t*)p)[i] = f16_from_int(v); break;
      case CUBE_DTYPE_BF16: ((uint16_t*)p)[i] = bf16_from_int(v); break;
      case CUBE_DTYPE_F32: ((float*)p)[i] = (float)v; break;
      default: ((double*)p)[i] = v; break;
    }
  }
}

/* Checks |got| (n elements) against op over inputs[0..k). Returns mismatches. */
static size_t check_reduce(cube_dtype_t t, cube_reduce_op_t op, void* const* inputs, uint32_t k,
                           const void* got, size_t n, const char* what) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    bool ok;
    char want_s[64], got_s[64];
    if (is_float(t)) {
      double acc = get_f(t, inputs[0], i);
      for (uint32_t j = 1; j < k; ++j) {
        double v = get_f(t, inputs[j], i);
        switch (op) {
          case CUBE_REDUCE_SUM:
          case CUBE_REDUCE_MEAN: acc += v; break;
          case CUBE_REDUCE_PROD: acc *= v; break;
          case CUBE_REDUCE_MAX: acc = v > acc ? v : acc; break;
          default: acc = v < acc ? v : acc; break;
        }
      }
      double g = get_f(t, got, i);
      if (op == CUBE_REDUCE_MEAN) {
        if (t == CUBE_DTYPE_F32) acc = (float)acc / (float)k;
        else acc = acc / k;
      }
      double tol = 0;
      if (op == CUBE_REDUCE_MEAN && t == CUBE_DTYPE_F16) tol = (acc < 0 ? -acc : acc) / 1024.0;
      if (op == CUBE_REDUCE_MEAN && t == CUBE_DTYPE_BF16) tol = (acc < 0 ? -acc : acc) / 128.0;
      ok = (g - acc <= tol && acc - g <= tol);
      snprintf(want_s, sizeof(want_s), "%g", acc);
      snprintf(got_s, sizeof(got_s), "%g", g);
    } else {
      uint64_t acc = (uint64_t)get_i(t, inputs[0], i);
      for (uint32_t j = 1; j < k; ++j) {
        int64_t v = get_i(t, inputs[j], i);
        int64_t a = wrap_i(t, acc);
        switch (op) {
          case CUBE_REDUCE_SUM:
          case CUBE_REDUCE_MEAN: acc += (uint64_t)v; break;
          case CUBE_REDUCE_PROD: acc *= (uint64_t)v; break;
          case CUBE_REDUCE_MAX:
            acc = is_signed(t) ? (uint64_t)(v > a ? v : a)
                               : ((uint64_t)v > (uint64_t)a ? (uint64_t)v : (uint64_t)a);
            break;
          default:
            acc = is_signed(t) ? (uint64_t)(v < a ? v : a)
                               : ((uint64_t)v < (uint64_t)a ? (uint64_t)v : (uint64_t)a);
            break;
        }
      }
      int64_t want = wrap_i(t, acc);
      if (op == CUBE_REDUCE_MEAN)
        want = is_signed(t) ? want / (int64_t)k : (int64_t)((uint64_t)want / k);
      want = wrap_i(t, (uint64_t)want);
      int64_t g = get_i(t, got, i);
      ok = g == want;
      snprintf(want_s, sizeof(want_s), "%lld", (long long)want);
      snprintf(got_s, sizeof(got_s), "%lld", (long long)g);
    }
    if (!ok && bad++ < 3)
      fprintf(stderr, "%s: element %zu: got %s, want %s\n", what, i, got_s, want_s);
  }
  return bad;
}

//===----------------------------------------------------------------------===//
// all_reduce over 1..4 devices, every type and op, one thread
//===----------------------------------------------------------------------===//

static void all_types_and_ops(const char* mode) {
  setup(mode);
  cube_client_t* c[MAXDEV];
  for (uint32_t i = 0; i < MAXDEV; ++i) {
    c[i] = load(i);
    REQUIRE(c[i] != NULL);
  }
  uint64_t rng = 0x5eed0001;
  size_t checked = 0;
  for (uint32_t n = 1; n <= MAXDEV; ++n) {
    for (int t = 0; t < CUBE__DTYPE_COUNT; ++t) {
      cube_dtype_t dt = (cube_dtype_t)t;
      uint32_t es = cube_dtype_size(dt);
      for (int o = 0; o < CUBE__REDUCE_OP_COUNT; ++o) {
        cube_reduce_op_t op = (cube_reduce_op_t)o;
        /* odd sizes; every 7th combination large enough to span several
         * staging blocks (256 KiB) */
        size_t count = ((t * 5 + o + n) % 7 == 0) ? 70001
                                                  : 1 + (size_t)(cube_test_rand(&rng) % 3001);
        size_t bytes = count * es;
        /* The participants: n devices picked from 4, listed in a shuffled
         * order that differs for each participant. */
        uint32_t pick[MAXDEV] = {0, 1, 2, 3};
        for (uint32_t i = MAXDEV - 1; i > 0; --i) {
          uint32_t j = (uint32_t)(cube_test_rand(&rng) % (i + 1));
          uint32_t x = pick[i];
          pick[i] = pick[j];
          pick[j] = x;
        }
        void* in[MAXDEV];
        cube_handle_t src[MAXDEV], dst[MAXDEV];
        bool in_place = (o + t) % 3 == 0;
        for (uint32_t i = 0; i < n; ++i) {
          in[i] = malloc(bytes);
          fill(dt, op, in[i], count, &rng);
          REQUIRE_OK(cube_client_create_from_slice(c[pick[i]], in[i], bytes, &src[i]));
          if (in_place) {
            dst[i] = src[i];
          } else {
            void* poison = malloc(bytes);
            memset(poison, 0xAB, bytes);
            REQUIRE_OK(cube_client_create_from_slice(c[pick[i]], poison, bytes, &dst[i]));
            free(poison);
          }
        }
        for (uint32_t i = 0; i < n; ++i) {
          cube_device_id_t ids[MAXDEV];
          for (uint32_t j = 0; j < n; ++j) ids[j] = cpu(pick[(i + j) % n]);
          CHECK_OK(cube_client_all_reduce(c[pick[i]], src[i], dst[i], dt, n, ids, op));
        }
        for (uint32_t i = 0; i < n; ++i) CHECK_OK(cube_client_sync_collective(c[pick[i]]));
        /* The reference combines in device order (the communicator's). */
        void* sorted[MAXDEV];
        uint32_t k = 0;
        for (uint32_t d = 0; d < MAXDEV; ++d)
          for (uint32_t i = 0; i < n; ++i)
            if (pick[i] == d) sorted[k++] = in[i];
        for (uint32_t i = 0; i < n; ++i) {
          cube_bytes_t* b = NULL;
          CHECK_OK(cube_client_read_one(c[pick[i]], dst[i], &b));
          if (!b) continue;
          CHECK_EQ_U64(cube_bytes_size(b), bytes);
          char what[128];
          snprintf(what, sizeof(what), "%s %s over %u devices (%zu elements, %s) on cpu:%u",
                   cube_dtype_name(dt), cube_reduce_op_name(op), n, count,
                   in_place ? "in place" : "src != dst", pick[i]);
          size_t bad = check_reduce(dt, op, sorted, n, cube_bytes_const_data(b), count, what);
          if (bad) {
            fprintf(stderr, "%s: %zu elements differ\n", what, bad);
            cube_test_failures++;
          }
          checked++;
          cube_bytes_release(b);
        }
        for (uint32_t i = 0; i < n; ++i) {
          if (!in_place) cube_handle_release(dst[i]);
          cube_handle_release(src[i]);
          free(in[i]);
        }
      }
    }
  }
  CHECK_EQ_U64(checked, (1 + 2 + 3 + 4) * CUBE__DTYPE_COUNT * CUBE__REDUCE_OP_COUNT);
  for (uint32_t i = 0; i < MAXDEV; ++i) {
    CHECK_OK(cube_client_sync(c[i]));
    cube_client_release(c[i]);
  }
  cube_shutdown();
}

CUBE_TEST(all_reduce_types_ops_threaded) { all_types_and_ops("threaded"); }
CUBE_TEST(all_reduce_types_ops_inline) { all_types_and_ops("inline"); }

//===----------------------------------------------------------------------===//
// Ordering with kernels, one device per thread
//===----------------------------------------------------------------------===//

/* args: buffer of f32, value: x[i] = x[i] * a + b (a, b f32). One cube does all. */
static int k_affine(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube, (void)n;
  float* x = args[0].buffer.data;
  size_t len = (size_t)(args[0].buffer.len / sizeof(float));
  for (size_t i = 0; i < len; ++i) x[i] = x[i] * args[1].f32 + args[2].f32;
  return 0;
}

static cube_kernel_t* affine_kernel(void) {
  static const cube_arg_kind_t kinds[3] = {CUBE_ARG_BUFFER, CUBE_ARG_F32, CUBE_ARG_F32};
  cube_kernel_desc_t d = {.name = "affine", .cube_dim = {1, 1, 1}, .arg_kinds = kinds,
                          .arg_count = 3, .cpu_fn = k_affine};
  cube_kernel_t* k = NULL;
  cube_status_t s = cube_kernel_create(&d, &k);
  if (s) {
    fprintf(stderr, "%s\n", cube_status_message(s));
    cube_status_free(s);
  }
  return k;
}

typedef struct {
  uint32_t dev, ndev, iters;
  cube_kernel_t* k;
  int failures;
} worker_t;

/* Per iteration: src = 0*x + (dev+1+it) by a kernel, all_reduce sum into dst,
 * sync_collective, dst = 2*dst + 1 by a kernel, read: 2*sum + 1. */
static void* worker(void* p) {
  worker_t* w = p;
  cube_client_t* c = load(w->dev);
  if (!c) {
    w->failures++;
    return NULL;
  }
  cube_device_id_t ids[MAXDEV];
  for (uint32_t j = 0; j < w->ndev; ++j) ids[j] = cpu(w->ndev - 1 - j);
  size_t count = 1031 + w->iters;
  for (uint32_t it = 0; it < w->iters; ++it) {
    cube_handle_t src = CUBE_HANDLE_NULL, dst = CUBE_HANDLE_NULL;
    cube_status_t s = cube_client_empty(c, count * 4, &src);
    if (!s) s = cube_client_empty(c, count * 4, &dst);
    float val = (float)(w->dev + 1 + it);
    cube_arg_t a1[3] = {cube_arg_buffer(src), cube_arg_f32(0.0f), cube_arg_f32(val)};
    if (!s) s = cube_client_launch(c, w->k, cube_count_static(1, 1, 1), 3, a1);
    if (!s) s = cube_client_all_reduce(c, src, dst, CUBE_DTYPE_F32, w->ndev, ids, CUBE_REDUCE_SUM);
    if (!s) s = cube_client_sync_collective(c);
    cube_arg_t a2[3] = {cube_arg_buffer(dst), cube_arg_f32(2.0f), cube_arg_f32(1.0f)};
    if (!s) s = cube_client_launch(c, w->k, cube_count_static(1, 1, 1), 3, a2);
    cube_bytes_t* b = NULL;
    if (!s) s = cube_client_read_one(c, dst, &b);
    if (s) {
      fprintf(stderr, "cpu:%u iteration %u: %s\n", w->dev, it, cube_status_message(s));
      cube_status_free(s);
      w->failures++;
    } else {
      float sum = 0;
      for (uint32_t d = 0; d < w->ndev; ++d) sum += (float)(d + 1 + it);
      const float* r = cube_bytes_const_data(b);
      for (size_t i = 0; i < count; ++i) {
        if (r[i] != 2 * sum + 1) {
          fprintf(stderr, "cpu:%u iteration %u element %zu: %g, want %g\n", w->dev, it, i, r[i],
                  2 * sum + 1);
          w->failures++;
          break;
        }
      }
    }
    cube_bytes_release(b);
    cube_handle_release(src);
    cube_handle_release(dst);
  }
  cube_client_release(c);
  return NULL;
}

static void threads_case(const char* mode) {
  setup(mode);
  cube_kernel_t* k = affine_kernel();
  REQUIRE(k != NULL);
  for (uint32_t ndev = 2; ndev <= MAXDEV; ++ndev) {
    pthread_t th[MAXDEV];
    worker_t w[MAXDEV];
    for (uint32_t i = 0; i < ndev; ++i) {
      w[i] = (worker_t){i, ndev, 25, k, 0};
      REQUIRE(pthread_create(&th[i], NULL, worker, &w[i]) == 0);
    }
    for (uint32_t i = 0; i < ndev; ++i) {
      pthread_join(th[i], NULL);
      cube_test_failures += w[i].failures;
    }
  }
  cube_kernel_release(k);
  cube_shutdown();
}

CUBE_TEST(all_reduce_threads_threaded) { threads_case("threaded"); }
CUBE_TEST(all_reduce_threads_inline) { threads_case("inline"); }

/* All four devices from one thread, with kernels before and after. */
static void one_thread_kernels(const char* mode) {
  setup(mode);
  cube_kernel_t* k = affine_kernel();
  REQUIRE(k != NULL);
  cube_client_t* c[MAXDEV];
  for (uint32_t i = 0; i < MAXDEV; ++i) {
    c[i] = load(i);
    REQUIRE(c[i] != NULL);
  }
  const cube_device_id_t ids[MAXDEV] = {cpu(2), cpu(0), cpu(3), cpu(1)};
  size_t count = 5000;
  for (int it = 0; it < 10; ++it) {
    cube_handle_t h[MAXDEV];
    for (uint32_t i = 0; i < MAXDEV; ++i) {
      REQUIRE_OK(cube_client_empty(c[i], count * 4, &h[i]));
      cube_arg_t a[3] = {cube_arg_buffer(h[i]), cube_arg_f32(0),
                         cube_arg_f32((float)(i * 10 + it))};
      CHECK_OK(cube_client_launch(c[i], k, cube_count_static(1, 1, 1), 3, a));
    }
    for (uint32_t i = 0; i < MAXDEV; ++i)
      CHECK_OK(cube_client_all_reduce(c[i], h[i], h[i], CUBE_DTYPE_F32, MAXDEV, ids,
                                      it % 2 ? CUBE_REDUCE_MAX : CUBE_REDUCE_SUM));
    for (uint32_t i = 0; i < MAXDEV; ++i) {
      CHECK_OK(cube_client_sync_collective(c[i]));
      cube_arg_t a[3] = {cube_arg_buffer(h[i]), cube_arg_f32(1), cube_arg_f32((float)i)};
      CHECK_OK(cube_client_launch(c[i], k, cube_count_static(1, 1, 1), 3, a));
    }
    float r = it % 2 ? (float)(30 + it) : (float)(60 + 4 * it);
    for (uint32_t i = 0; i < MAXDEV; ++i) {
      cube_bytes_t* b = NULL;
      CHECK_OK(cube_client_read_one(c[i], h[i], &b));
      if (b) {
        const float* v = cube_bytes_const_data(b);
        CHECK(v[0] == r + (float)i && v[count - 1] == r + (float)i);
      }
      cube_bytes_release(b);
      cube_handle_release(h[i]);
    }
  }
  for (uint32_t i = 0; i < MAXDEV; ++i) cube_client_release(c[i]);
  cube_kernel_release(k);
  cube_shutdown();
}

CUBE_TEST(all_reduce_one_thread_kernels_threaded) { one_thread_kernels("threaded"); }
CUBE_TEST(all_reduce_one_thread_kernels_inline) { one_thread_kernels("inline"); }

//===----------------------------------------------------------------------===//
// send / recv and to_client
//===----------------------------------------------------------------------===//

static void send_recv_case(const char* mode) {
  setup(mode);
  cube_client_t* c[3];
  for (uint32_t i = 0; i < 3; ++i) {
    c[i] = load(i);
    REQUIRE(c[i] != NULL);
  }
  uint64_t rng = 77;
  /* Three messages 0 -> 1 in a row (the k-th send meets the k-th recv, recvs
   * posted first), one 2 -> 0 (send first) and one to itself on 1. */
  enum { M = 5 };
  const uint32_t from[M] = {0, 0, 0, 2, 1}, to[M] = {1, 1, 1, 0, 1};
  const size_t size[M] = {1, 4099, 300000, 77, 1000};
  unsigned char* data[M];
  cube_handle_t s[M], r[M];
  for (int m = 0; m < M; ++m) {
    data[m] = malloc(size[m]);
    cube_test_fill_random(data[m], size[m], cube_test_rand(&rng));
    REQUIRE_OK(cube_client_create_from_slice(c[from[m]], data[m], size[m], &s[m]));
    unsigned char* poison = malloc(size[m]);
    memset(poison, 0xCD, size[m]);
    REQUIRE_OK(cube_client_create_from_slice(c[to[m]], poison, size[m], &r[m]));
    free(poison);
  }
  for (int m = 0; m < 3; ++m) CHECK_OK(cube_client_recv(c[1], r[m], cpu(0)));
  for (int m = 0; m < 3; ++m) CHECK_OK(cube_client_send(c[0], s[m], cpu(1)));
  CHECK_OK(cube_client_send(c[2], s[3], cpu(0)));
  CHECK_OK(cube_client_recv(c[0], r[3], cpu(2)));
  CHECK_OK(cube_client_send(c[1], s[4], cpu(1)));
  CHECK_OK(cube_client_recv(c[1], r[4], cpu(1)));
  for (uint32_t i = 0; i < 3; ++i) CHECK_OK(cube_client_sync_collective(c[i]));
  for (int m = 0; m < M; ++m) {
    cube_bytes_t* b = NULL;
    CHECK_OK(cube_client_read_one(c[to[m]], r[m], &b));
    if (b) {
      CHECK_EQ_U64(cube_bytes_size(b), size[m]);
      if (memcmp(cube_bytes_const_data(b), data[m], size[m]) != 0) {
        fprintf(stderr, "message %d (cpu:%u -> cpu:%u, %zu bytes) differs\n", m, from[m], to[m],
                size[m]);
        cube_test_failures++;
      }
    }
    cube_bytes_release(b);
  }
  /* cpu:2 took part in one operation only; flush orders after its sync. */
  cube_collective_record_t rec = {0};
  CHECK_OK(cube_client_flush(c[2]));
  CHECK_OK(cube_client_last_collective(c[2], &rec));
  CHECK(rec.kind == CUBE_COLLECTIVE_SEND && rec.bytes == 77 && rec.participants == 2 &&
        rec.ranks == 1 && rec.sequence == 0 && rec.busbw_gbps == rec.algbw_gbps);
  /* to_client and to_client_tensor between devices, and onto the same one
   * (s[1] lives on cpu:0). */
  for (uint32_t d = 0; d < 3; ++d) {
    cube_handle_t out;
    CHECK_OK(cube_client_to_client(c[0], s[1], c[d], &out));
    cube_bytes_t* b = NULL;
    CHECK_OK(cube_client_read_one(c[d], out, &b));
    CHECK(b && cube_bytes_size(b) == size[1] &&
          memcmp(cube_bytes_const_data(b), data[1], size[1]) == 0);
    cube_bytes_release(b);
    cube_handle_release(out);
  }
  const uint64_t shape[2] = {37, 41};
  float* td = malloc(37 * 41 * 4);
  for (int i = 0; i < 37 * 41; ++i) td[i] = (float)i * 0.5f;
  cube_tensor_t t0, t1;
  REQUIRE_OK(cube_client_create_tensor_from_slice(c[2], td, 37 * 41 * 4, 2, shape, 4, &t0));
  CHECK_OK(cube_client_to_client_tensor(c[2], &t0, c[1], &t1));
  cube_bytes_t* tb = NULL;
  CHECK_OK(cube_client_read_tensor(c[1], 1, &t1, &tb));
  CHECK(tb && memcmp(cube_bytes_const_data(tb), td, 37 * 41 * 4) == 0);
  cube_bytes_release(tb);
  cube_tensor_release(&t0);
  cube_tensor_release(&t1);
  free(td);
  for (int m = 0; m < M; ++m) {
    cube_handle_release(s[m]);
    cube_handle_release(r[m]);
    free(data[m]);
  }
  for (uint32_t i = 0; i < 3; ++i) {
    CHECK_OK(cube_client_sync(c[i]));
    cube_client_release(c[i]);
  }
  cube_shutdown();
}

CUBE_TEST(send_recv_threaded) { send_recv_case("threaded"); }
CUBE_TEST(send_recv_inline) { send_recv_case("inline"); }

/* to_client of a buffer a failed launch spoiled goes through the transport
 * between CPU devices, which carries bytes and not taint: it must refuse as
 * a read does (DATA_LOST naming the failure), not hand out a valid handle of
 * the invalid bytes; a whole write makes the buffer movable again. */
static void to_client_spoiled_case(const char* mode) {
  setup(mode);
  cube_client_t* c[2];
  for (uint32_t i = 0; i < 2; ++i) {
    c[i] = load(i);
    REQUIRE(c[i] != NULL);
  }
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cube_test_spoil_kernel(&k));
  enum { R = 13, C = 29 };
  const uint64_t shape[2] = {R, C};
  float data[R * C];
  cube_test_fill_random(data, sizeof(data), 4242);
  cube_tensor_t t;
  REQUIRE_OK(cube_client_create_tensor_from_slice(c[0], data, sizeof(data), 2, shape, 4, &t));
  cube_arg_t a = cube_arg_buffer(t.handle);
  CHECK_OK(cube_client_launch(c[0], k, cube_count_static(1, 1, 1), 1, &a));
  CHECK_STATUS(cube_client_sync(c[0]), CUBE_STATUS_LAUNCH_FAILED, "'spoil'");
  for (uint32_t dst = 0; dst < 2; ++dst) {
    cube_handle_t out = CUBE_HANDLE_NULL;
    CHECK_STATUS(cube_client_to_client(c[0], t.handle, c[dst], &out), CUBE_STATUS_DATA_LOST,
                 "cube_client_to_client", "no valid contents", "'spoil'", "returned error 9");
    CHECK(out.id == CUBE_HANDLE_NULL.id);
    cube_tensor_t t1;
    memset(&t1, 0, sizeof(t1));
    CHECK_STATUS(cube_client_to_client_tensor(c[0], &t, c[dst], &t1), CUBE_STATUS_DATA_LOST,
                 "cube_client_to_client_tensor", "no valid contents", "'spoil'");
  }
  /* Written whole, it moves again, bit for bit. */
  cube_test_fill_random(data, sizeof(data), 4343);
  CHECK_OK(cube_client_write_tensor(c[0], &t, data, sizeof(data)));
  cube_handle_t out;
  CHECK_OK(cube_client_to_client(c[0], t.handle, c[1], &out));
  float back[R * C];
  CHECK_OK(cube_client_read_into(c[1], out, back, sizeof(back)));
  CHECK(memcmp(back, data, sizeof(data)) == 0);
  cube_handle_release(out);
  cube_tensor_t t1;
  CHECK_OK(cube_client_to_client_tensor(c[0], &t, c[1], &t1));
  cube_bytes_t* tb = NULL;
  CHECK_OK(cube_client_read_tensor(c[1], 1, &t1, &tb));
  CHECK(tb && memcmp(cube_bytes_const_data(tb), data, sizeof(data)) == 0);
  cube_bytes_release(tb);
  cube_tensor_release(&t1);
  cube_tensor_release(&t);
  cube_kernel_release(k);
  for (uint32_t i = 0; i < 2; ++i) {
    CHECK_OK(cube_client_sync(c[i]));
    cube_client_release(c[i]);
  }
  cube_shutdown();
}

CUBE_TEST(to_client_refuses_spoiled_contents_threaded) { to_client_spoiled_case("threaded"); }
CUBE_TEST(to_client_refuses_spoiled_contents_inline) { to_client_spoiled_case("inline"); }

//===----------------------------------------------------------------------===//
// Failures
//===----------------------------------------------------------------------===//

/* A good all_reduce over |n| devices (the clients stay usable). */
static void good_all_reduce(cube_client_t** c, uint32_t n) {
  cube_device_id_t ids[MAXDEV];
  cube_handle_t h[MAXDEV];
  for (uint32_t i = 0; i < n; ++i) {
    ids[i] = cpu(i);
    int32_t v[3] = {(int32_t)i, 1, -2};
    REQUIRE_OK(cube_client_create_from_slice(c[i], v, sizeof(v), &h[i]));
  }
  for (uint32_t i = 0; i < n; ++i)
    CHECK_OK(cube_client_all_reduce(c[i], h[i], h[i], CUBE_DTYPE_I32, n, ids, CUBE_REDUCE_SUM));
  for (uint32_t i = 0; i < n; ++i) CHECK_OK(cube_client_sync_collective(c[i]));
  for (uint32_t i = 0; i < n; ++i) {
    cube_bytes_t* b = NULL;
    CHECK_OK(cube_client_read_one(c[i], h[i], &b));
    if (b) {
      const int32_t* v = cube_bytes_const_data(b);
      CHECK(v[0] == (int32_t)(n * (n - 1) / 2) && v[1] == (int32_t)n && v[2] == -2 * (int32_t)n);
    }
    cube_bytes_release(b);
    cube_handle_release(h[i]);
  }
}

static void mismatch_case(const char* mode) {
  setup(mode);
  cube_client_t* c[2] = {load(0), load(1)};
  REQUIRE(c[0] && c[1]);
  const cube_device_id_t ids[2] = {cpu(0), cpu(1)};
  cube_handle_t a, b, a2;
  REQUIRE_OK(cube_client_empty(c[0], 64, &a));
  REQUIRE_OK(cube_client_empty(c[1], 128, &b));
  REQUIRE_OK(cube_client_empty(c[0], 128, &a2));
  /* sizes differ */
  CHECK_OK(cube_client_all_reduce(c[0], a, a, CUBE_DTYPE_F32, 2, ids, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_all_reduce(c[1], b, b, CUBE_DTYPE_F32, 2, ids, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_sync_collective(c[0]));
  CHECK_OK(cube_client_sync_collective(c[1]));
  for (int i = 0; i < 2; ++i)
    CHECK_STATUS(cube_client_flush(c[i]), CUBE_STATUS_INVALID_ARGUMENT, "all_reduce #0",
                 "participants disagree", "cpu:0 has 64 bytes of f32 sum",
                 "cpu:1 has 128 bytes of f32 sum",
                 "cube_client_sync_collective");
  /* element types differ (same size) */
  CHECK_OK(cube_client_all_reduce(c[0], a2, a2, CUBE_DTYPE_F32, 2, ids, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_all_reduce(c[1], b, b, CUBE_DTYPE_I32, 2, ids, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_sync_collective(c[0]));
  CHECK_OK(cube_client_sync_collective(c[1]));
  for (int i = 0; i < 2; ++i)
    CHECK_STATUS(cube_client_flush(c[i]), CUBE_STATUS_INVALID_ARGUMENT, "all_reduce #1",
                 "disagree", "i32 sum", "f32 sum");
  /* send/recv sizes differ */
  CHECK_OK(cube_client_send(c[0], a, cpu(1)));
  CHECK_OK(cube_client_recv(c[1], b, cpu(0)));
  CHECK_OK(cube_client_sync_collective(c[0]));
  CHECK_OK(cube_client_sync_collective(c[1]));
  for (int i = 0; i < 2; ++i)
    CHECK_STATUS(cube_client_flush(c[i]), CUBE_STATUS_INVALID_ARGUMENT, "send/recv #0",
                 "cpu:0 -> cpu:1", "sender has 64 bytes, the receiver 128");
  good_all_reduce(c, 2);
  cube_handle_release(a);
  cube_handle_release(b);
  cube_handle_release(a2);
  cube_client_release(c[0]);
  cube_client_release(c[1]);
  cube_shutdown();
}

CUBE_TEST(mismatch_threaded) { mismatch_case("threaded"); }
CUBE_TEST(mismatch_inline) { mismatch_case("inline"); }

static void timeout_case(const char* mode) {
  setup(mode);
  setenv("CUBE_COLLECTIVE_TIMEOUT", "0.3", 1);
  cube_client_t* c[3] = {load(0), load(1), load(2)};
  REQUIRE(c[0] && c[1] && c[2]);
  const cube_device_id_t ids[3] = {cpu(2), cpu(1), cpu(0)};
  cube_handle_t h[3];
  for (int i = 0; i < 3; ++i) REQUIRE_OK(cube_client_empty(c[i], 1024, &h[i]));
  /* cpu:1 does not join */
  CHECK_OK(cube_client_all_reduce(c[0], h[0], h[0], CUBE_DTYPE_F32, 3, ids, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_all_reduce(c[2], h[2], h[2], CUBE_DTYPE_F32, 3, ids, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_sync_collective(c[0]));
  CHECK_OK(cube_client_sync_collective(c[2]));
  for (int i = 0; i < 3; i += 2)
    CHECK_STATUS(cube_client_flush(c[i]), CUBE_STATUS_DEADLINE_EXCEEDED, "all_reduce #0",
                 "{cpu:0, cpu:1, cpu:2}", "cpu:1 did not join", "CUBE_COLLECTIVE_TIMEOUT");
  /* It comes late: it gets the same error at once, and the next operation
   * of all three works. */
  CHECK_OK(cube_client_all_reduce(c[1], h[1], h[1], CUBE_DTYPE_F32, 3, ids, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_sync_collective(c[1]));
  CHECK_STATUS(cube_client_flush(c[1]), CUBE_STATUS_DEADLINE_EXCEEDED, "all_reduce #0",
               "cpu:1 did not join");
  good_all_reduce(c, 3);
  /* A send whose receiver never comes. */
  CHECK_OK(cube_client_send(c[0], h[0], cpu(2)));
  CHECK_OK(cube_client_sync_collective(c[0]));
  CHECK_STATUS(cube_client_flush(c[0]), CUBE_STATUS_DEADLINE_EXCEEDED, "send/recv #0",
               "receiver cpu:2 did not join");
  for (int i = 0; i < 3; ++i) cube_handle_release(h[i]);
  for (int i = 0; i < 3; ++i) cube_client_release(c[i]);
  cube_shutdown();
  unsetenv("CUBE_COLLECTIVE_TIMEOUT");
}

CUBE_TEST(timeout_names_missing_threaded) { timeout_case("threaded"); }
CUBE_TEST(timeout_names_missing_inline) { timeout_case("inline"); }

/* cpu:1's part of an all_reduce, late (after c0's sync_collective is queued). */
typedef struct {
  cube_client_t* c;
  cube_handle_t h;
  const cube_device_id_t* ids;
  int failures;
} late_t;

static void* late_join(void* p) {
  late_t* l = p;
  usleep(100 * 1000);
  cube_status_t s = cube_client_all_reduce(l->c, l->h, l->h, CUBE_DTYPE_I32, 2, l->ids,
                                           CUBE_REDUCE_SUM);
  if (!s) s = cube_client_sync_collective(l->c);
  if (!s) s = cube_client_flush(l->c);
  if (s) {
    fprintf(stderr, "late cpu:1: %s\n", cube_status_message(s));
    cube_status_free(s);
    l->failures++;
  }
  return NULL;
}

/* Two stream ids that map to one stream slot (id % max_streams) are one
 * stream: a sync_collective under either waits for the parts queued under the
 * other and reports their failures. */
static void stream_alias_case(const char* mode) {
  setup(mode);
  setenv("CUBE_MAX_STREAMS", "4", 1);
  setenv("CUBE_COLLECTIVE_TIMEOUT", "20", 1);
  cube_client_t* c[2] = {load(0), load(1)};
  REQUIRE(c[0] && c[1]);
  const cube_device_id_t ids[2] = {cpu(1), cpu(0)};
  cube_stream_id_t a = cube_stream_id_new(), b = a + 4;
  enum { N = 4099 };
  int32_t* x = malloc(N * sizeof(int32_t));
  int32_t* y = malloc(N * sizeof(int32_t));
  REQUIRE(x && y);
  uint64_t rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)a;
  for (size_t i = 0; i < N; ++i) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    x[i] = (int32_t)(rng >> 40) - (1 << 23);
    y[i] = (int32_t)(rng >> 17) % 100000;
  }
  cube_client_set_stream(c[0], a);
  cube_handle_t h0, h1;
  REQUIRE_OK(cube_client_create_from_slice(c[0], x, N * sizeof(int32_t), &h0));
  REQUIRE_OK(cube_client_create_from_slice(c[1], y, N * sizeof(int32_t), &h1));
  /* Queued under a, synced and read under b while cpu:1 is still to come. */
  CHECK_OK(cube_client_all_reduce(c[0], h0, h0, CUBE_DTYPE_I32, 2, ids, CUBE_REDUCE_SUM));
  late_t late = {c[1], h1, ids, 0};
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, late_join, &late) == 0);
  cube_client_set_stream(c[0], b);
  CHECK_OK(cube_client_sync_collective(c[0]));
  cube_bytes_t* r = NULL;
  CHECK_OK(cube_client_read_one(c[0], h0, &r));
  if (r) {
    /* Checked before cpu:1's thread is joined: the sync alone made it so. */
    const int32_t* v = cube_bytes_const_data(r);
    size_t bad = 0;
    for (size_t i = 0; i < N; ++i) bad += v[i] != x[i] + y[i];
    CHECK(bad == 0);
  }
  cube_bytes_release(r);
  pthread_join(th, NULL);
  cube_test_failures += late.failures;
  /* A part under b that cpu:1 never joins: the sync under a abandons it. */
  setenv("CUBE_COLLECTIVE_TIMEOUT", "0.3", 1);
  CHECK_OK(cube_client_all_reduce(c[0], h0, h0, CUBE_DTYPE_I32, 2, ids, CUBE_REDUCE_SUM));
  cube_client_set_stream(c[0], a);
  CHECK_OK(cube_client_sync_collective(c[0]));
  CHECK_STATUS(cube_client_flush(c[0]), CUBE_STATUS_DEADLINE_EXCEEDED, "all_reduce #1",
               "cpu:1 did not join");
  cube_handle_release(h0);
  cube_handle_release(h1);
  free(x);
  free(y);
  for (int i = 0; i < 2; ++i) cube_client_release(c[i]);
  cube_shutdown();
  unsetenv("CUBE_COLLECTIVE_TIMEOUT");
  unsetenv("CUBE_MAX_STREAMS");
}

CUBE_TEST(stream_alias_threaded) { stream_alias_case("threaded"); }
CUBE_TEST(stream_alias_inline) { stream_alias_case("inline"); }

CUBE_TEST(bad_input) {
  setup("threaded");
  cube_client_t* c = load(0);
  cube_client_t* c1 = load(1);
  REQUIRE(c && c1);
  cube_handle_t a, b, odd, other;
  REQUIRE_OK(cube_client_empty(c, 64, &a));
  REQUIRE_OK(cube_client_empty(c, 32, &b));
  REQUIRE_OK(cube_client_empty(c, 6, &odd));
  REQUIRE_OK(cube_client_empty(c1, 64, &other));
  const cube_device_id_t two[2] = {cpu(0), cpu(1)};
  const cube_device_id_t not_me[2] = {cpu(1), cpu(2)};
  const cube_device_id_t dup[3] = {cpu(0), cpu(1), cpu(0)};
  const cube_device_id_t mixed[2] = {cpu(0), {CUBE_BACKEND_NULL, 0}};
  CHECK_STATUS(cube_client_all_reduce(c, a, b, CUBE_DTYPE_F32, 2, two, CUBE_REDUCE_SUM),
               CUBE_STATUS_INVALID_ARGUMENT, "src views 64 bytes but dst 32");
  CHECK_STATUS(cube_client_all_reduce(c, odd, odd, CUBE_DTYPE_F32, 2, two, CUBE_REDUCE_SUM),
               CUBE_STATUS_INVALID_ARGUMENT, "6 bytes", "f32");
  CHECK_STATUS(cube_client_all_reduce(c, a, a, CUBE_DTYPE_F32, 2, two, CUBE__REDUCE_OP_COUNT),
               CUBE_STATUS_INVALID_ARGUMENT, "reduce op 5");
  CHECK_STATUS(cube_client_all_reduce(c, a, a, CUBE_DTYPE_F32, 2, not_me, CUBE_REDUCE_SUM),
               CUBE_STATUS_INVALID_ARGUMENT, "cpu:0", "is not among devices {cpu:1, cpu:2}");
  CHECK_STATUS(cube_client_all_reduce(c, a, a, CUBE_DTYPE_F32, 3, dup, CUBE_REDUCE_SUM),
               CUBE_STATUS_INVALID_ARGUMENT, "lists cpu:0 twice");
  cube_status_t ms = cube_client_ensure_init_collective(c, 2, mixed);
  CHECK(cube_status_code(ms) == CUBE_STATUS_INVALID_ARGUMENT ||
        cube_status_code(ms) == CUBE_STATUS_NOT_FOUND);
  cube_status_free(ms);
  CHECK_STATUS(cube_client_all_reduce(c, other, a, CUBE_DTYPE_F32, 2, two, CUBE_REDUCE_SUM),
               CUBE_STATUS_INVALID_ARGUMENT, "src", "lives on");
  CHECK_STATUS(cube_client_send(c, a, cpu(9)), CUBE_STATUS_NOT_FOUND, "cpu:9", "does not exist");
  CHECK_STATUS(cube_client_recv(NULL, a, cpu(1)), CUBE_STATUS_INVALID_ARGUMENT, "client is NULL");
  CHECK_STATUS(cube_client_recv(c, CUBE_HANDLE_NULL, cpu(1)), CUBE_STATUS_INVALID_ARGUMENT, "dst");
  cube_collective_record_t rec = {0};
  CHECK_STATUS(cube_client_last_collective(c, &rec), CUBE_STATUS_NOT_FOUND, "no collective yet");
  CHECK_STATUS(cube_client_last_collective(c, NULL), CUBE_STATUS_INVALID_ARGUMENT, "out_record");
  /* The environment is read once (and after cube_shutdown): a malformed
   * timeout reaches live clients only through cube_option_set, which refuses
   * it and keeps the timeout the collectives had (the environment's case:
   * tests/unit/test_options.c). */
  CHECK_STATUS(cube_option_set("CUBE_COLLECTIVE_TIMEOUT", "soon"), CUBE_STATUS_INVALID_ARGUMENT,
               "CUBE_COLLECTIVE_TIMEOUT", "'soon'", "seconds");
  double timeout = 0;
  CHECK_OK(cube_option_get_double(CUBE_OPTION_COLLECTIVE_TIMEOUT, &timeout));
  CHECK(timeout == 60.0);
  CHECK_OK(cube_client_ensure_init_collective(c, 2, two));
  CHECK(cube_client_features(c)->bits & CUBE_FEATURE_COLLECTIVES);
  CHECK(strcmp(cube_reduce_op_name(CUBE_REDUCE_PROD), "prod") == 0);
  CHECK(cube_reduce_op_name(CUBE__REDUCE_OP_COUNT) == NULL);
  uint32_t rank = 9, ranks = 9, local = 0;
  CHECK_OK(cube_collective_world(&rank, &ranks, &local));
  CHECK(rank == 0 && ranks == 1 && local == 4);
  CHECK_OK(cube_client_flush(c));
  cube_handle_release(a);
  cube_handle_release(b);
  cube_handle_release(odd);
  cube_handle_release(other);
  cube_client_release(c);
  cube_client_release(c1);
  cube_shutdown();
}

/* One process: a shrink has nobody to lose. It returns the set sorted (in
 * place too), the all_reduce over it still works, and its bad inputs fail
 * as ensure_init's do. */
CUBE_TEST(shrink_in_one_process_keeps_every_device) {
  setup("threaded");
  cube_client_t* c[3] = {load(0), load(1), load(2)};
  REQUIRE(c[0] && c[1] && c[2]);
  cube_device_id_t set[3] = {cpu(2), cpu(0), cpu(1)};
  cube_device_id_t out[3];
  size_t n = 0;
  REQUIRE_OK(cube_client_shrink_collective(c[1], 3, set, &n, out));
  REQUIRE(n == 3);
  for (uint32_t i = 0; i < 3; ++i) CHECK(out[i].backend == CUBE_BACKEND_CPU && out[i].index == i);
  n = 0;
  REQUIRE_OK(cube_client_shrink_collective(c[0], 3, set, &n, set)); /* in place */
  CHECK(n == 3 && set[0].index == 0 && set[1].index == 1 && set[2].index == 2);
  const cube_device_id_t not_me[2] = {cpu(1), cpu(2)};
  CHECK_STATUS(cube_client_shrink_collective(c[0], 2, not_me, &n, out),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_client_shrink_collective", "cpu:0",
               "is not among devices {cpu:1, cpu:2}");
  /* Random data of an odd length, summed over the three. */
  enum { N = 1001 };
  int32_t v[3][N], want[N];
  uint64_t seed = (uint64_t)time(NULL);
  for (uint32_t i = 0; i < N; ++i) want[i] = 0;
  cube_handle_t h[3];
  for (uint32_t d = 0; d < 3; ++d) {
    cube_test_fill_random(v[d], sizeof(v[d]), seed + d);
    for (uint32_t i = 0; i < N; ++i)
      want[i] = (int32_t)((uint32_t)want[i] + (uint32_t)v[d][i]);
    REQUIRE_OK(cube_client_create_from_slice(c[d], v[d], sizeof(v[d]), &h[d]));
  }
  for (uint32_t d = 0; d < 3; ++d)
    CHECK_OK(cube_client_all_reduce(c[d], h[d], h[d], CUBE_DTYPE_I32, n, out, CUBE_REDUCE_SUM));
  for (uint32_t d = 0; d < 3; ++d) CHECK_OK(cube_client_sync_collective(c[d]));
  for (uint32_t d = 0; d < 3; ++d) {
    cube_bytes_t* b = NULL;
    CHECK_OK(cube_client_read_one(c[d], h[d], &b));
    if (b) CHECK(memcmp(cube_bytes_const_data(b), want, sizeof(want)) == 0);
    cube_bytes_release(b);
    cube_handle_release(h[d]);
  }
  for (uint32_t d = 0; d < 3; ++d) cube_client_release(c[d]);
  cube_shutdown();
}

CUBE_TEST(profile_record) {
  setup("threaded");
  setenv("CUBE_PROFILE", "medium", 1);
  char logpath[512];
  const char* tmp = getenv("CUBE_TEST_TMPDIR");
  snprintf(logpath, sizeof(logpath), "%s/collective_profile_%d.log", tmp ? tmp : "/tmp",
           (int)getpid());
  setenv("CUBE_LOG_FILE", logpath, 1);
  cube_client_t* c[MAXDEV];
  cube_handle_t h[MAXDEV];
  const cube_device_id_t ids[MAXDEV] = {cpu(0), cpu(1), cpu(2), cpu(3)};
  size_t bytes = 1 << 20;
  void* zero = calloc(1, bytes);
  for (uint32_t i = 0; i < MAXDEV; ++i) {
    c[i] = load(i);
    REQUIRE(c[i] != NULL);
    REQUIRE_OK(cube_client_create_from_slice(c[i], zero, bytes, &h[i]));
  }
  for (uint32_t i = 0; i < MAXDEV; ++i)
    CHECK_OK(
        cube_client_all_reduce(c[i], h[i], h[i], CUBE_DTYPE_F32, MAXDEV, ids, CUBE_REDUCE_SUM));
  for (uint32_t i = 0; i < MAXDEV; ++i) {
    CHECK_OK(cube_client_sync_collective(c[i]));
    CHECK_OK(cube_client_sync(c[i]));
  }
  for (uint32_t i = 0; i < MAXDEV; ++i) {
    cube_collective_record_t r = {0};
    CHECK_OK(cube_client_last_collective(c[i], &r));
    CHECK(r.kind == CUBE_COLLECTIVE_ALL_REDUCE && r.dtype == CUBE_DTYPE_F32 &&
          r.op == CUBE_REDUCE_SUM);
    CHECK_EQ_U64(r.bytes, bytes);
    CHECK_EQ_U64(r.participants, MAXDEV);
    CHECK_EQ_U64(r.ranks, 1);
    CHECK_EQ_U64(r.sequence, 0);
    CHECK(r.time_ns > 0);
    double alg = (double)r.bytes / (double)r.time_ns;
    CHECK(r.algbw_gbps > 0 && r.algbw_gbps <= alg * 1.0001 && r.algbw_gbps >= alg * 0.9999);
    CHECK(r.busbw_gbps > r.algbw_gbps * 1.4999 && r.busbw_gbps < r.algbw_gbps * 1.5001);
    cube_handle_release(h[i]);
    cube_client_release(c[i]);
  }
  cube_shutdown();
  unsetenv("CUBE_PROFILE");
  unsetenv("CUBE_LOG_FILE");
  free(zero);
  FILE* f = fopen(logpath, "r");
  REQUIRE(f != NULL);
  char line[512];
  int found = 0;
  while (fgets(line, sizeof(line), f))
    if (strstr(line, "all_reduce f32 sum x4") && strstr(line, "busbw") &&
        strstr(line, "4 participants"))
      found++;
  fclose(f);
  remove(logpath);
  CHECK(found == MAXDEV);
}
