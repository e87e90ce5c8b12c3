/* Collectives across processes: run by `mpiexec -np 2` (tests/CMakeLists.txt),
 * one rank per process, the same case on every rank. Global device ids: cpu:g
 * is local CPU device g % L of rank g / L (L = CUBE_CPU_DEVICES, 1 unless a
 * case sets 2). Every rank computes the reference from every rank's data,
 * which it can generate (the seed names the rank and the operation).
 * Without MPI (not built in, or not launched by mpiexec) every case exits 77. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/abi.h"
#include "check.h"
#include "cube/cube.h"
#include "spoil_kernel.h"

static uint32_t g_rank, g_ranks, g_local;

#ifdef CUBE_TEST_MPI_PLUGIN
/* The MPI transport is a plugin: this build's, unless CUBE_MPI_PLUGIN says
 * otherwise (CTest sets it too; this covers a run by hand under mpiexec). */
__attribute__((constructor)) static void default_mpi_plugin(void) {
  setenv("CUBE_MPI_PLUGIN", CUBE_TEST_MPI_PLUGIN, 0);
}
#endif

static cube_device_id_t cpu(uint32_t i) {
  cube_device_id_t d = {CUBE_BACKEND_CPU, i};
  return d;
}

/* Sets the environment (the same on every rank), then finds the world.
 * False (and the case skips) without MPI. */
static bool setup(const char* devices, const char* mode) {
  setenv("CUBE_CPU_DEVICES", devices, 1);
  setenv("CUBE_DEVICE_QUEUE", mode, 1);
  cube_status_t s = cube_collective_world(&g_rank, &g_ranks, &g_local);
  if (s) {
    fprintf(stderr, "%s\n", cube_status_message(s));
    cube_status_free(s);
    return false;
  }
  return g_ranks == 2;
}

static cube_client_t* load(uint32_t i) {
  cube_client_t* c = NULL;
  cube_status_t s = cube_client_load(cpu(i), &c);
  if (s) {
    fprintf(stderr, "rank %u: load cpu:%u: %s\n", g_rank, i, cube_status_message(s));
    cube_status_free(s);
  }
  return c;
}

#define SKIP_WITHOUT_MPI(devices, mode)                                                   \
  do {                                                                                    \
    if (!setup(devices, mode))                                                            \
      CUBE_SKIP("not 2 MPI ranks (ranks %u; built with MPI and launched by mpiexec -np 2?)", \
                g_ranks);                                                                 \
  } while (0)

//===----------------------------------------------------------------------===//
// Data and reference (integers, and floats holding small integers: exact)
//===----------------------------------------------------------------------===//

static void gen(cube_dtype_t t, cube_reduce_op_t op, void* p, size_t n, uint64_t seed) {
  uint64_t s = seed;
  for (size_t i = 0; i < n; ++i) {
    uint64_t r = cube_test_rand(&s);
    int v = op == CUBE_REDUCE_PROD ? (int)(r % 3) + 1 : (int)(r % 17) - 8;
    switch (t) {
      case CUBE_DTYPE_U8: ((uint8_t*)p)[i] = (uint8_t)v; break;
      case CUBE_DTYPE_I8: ((int8_t*)p)[i] = (int8_t)v; break;
      case CUBE_DTYPE_U32: ((uint32_t*)p)[i] = (uint32_t)r; break;
      case CUBE_DTYPE_I32:
        ((int32_t*)p)[i] = op == CUBE_REDUCE_PROD ? v : (int32_t)(r >> 33) - (1 << 29);
        break;
      case CUBE_DTYPE_U64: ((uint64_t*)p)[i] = r; break;
      case CUBE_DTYPE_I64: ((int64_t*)p)[i] = (int64_t)(r >> 2) - (int64_t)(r >> 3); break;
      case CUBE_DTYPE_F16: { /* small integers: sign, exponent, mantissa */
        int a = v < 0 ? -v : v, e = 0;
        uint16_t h = 0;
        if (a) {
          while ((a >> (e + 1)) != 0) ++e;
          h = (uint16_t)(((unsigned)(e + 15) << 10) | ((((unsigned)a << 10) >> e) & 0x3ff));
        }
        ((uint16_t*)p)[i] = (uint16_t)(h | (v < 0 ? 0x8000 : 0));
        break;
      }
      case CUBE_DTYPE_BF16: {
        float f = (float)v;
        uint32_t b;
        memcpy(&b, &f, 4);
        ((uint16_t*)p)[i] = (uint16_t)(b >> 16);
        break;
      }
      case CUBE_DTYPE_F32: ((float*)p)[i] = (float)v; break;
      default: ((double*)p)[i] = v; break;
    }
  }
}

/* Element i as double (floats) or integer bits. */
static double as_f(cube_dtype_t t, const void* p, size_t i) {
  if (t == CUBE_DTYPE_F32) return ((const float*)p)[i];
  if (t == CUBE_DTYPE_F64) return ((const double*)p)[i];
  uint16_t h = ((const uint16_t*)p)[i];
  if (t == CUBE_DTYPE_BF16) {
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
  }
  int e = (h >> 10) & 0x1f;
  double v = e == 0 ? (h & 0x3ff) / 16777216.0
                     : (1.0 + (h & 0x3ff) / 1024.0) * (double)(1u << e) / 32768.0;
  return (h & 0x8000) ? -v : v;
}

static bool is_float(cube_dtype_t t) {
  return t == CUBE_DTYPE_F16 || t == CUBE_DTYPE_BF16 || t == CUBE_DTYPE_F32 || t == CUBE_DTYPE_F64;
}

/* The expected element i of op over k inputs, written at |out| (element size). */
static void expect(cube_dtype_t t, cube_reduce_op_t op, void* const* in, uint32_t k, size_t i,
                   double* out_f, uint64_t* out_bits) {
  if (is_float(t)) {
    double a = as_f(t, in[0], i);
    for (uint32_t j = 1; j < k; ++j) {
      double v = as_f(t, in[j], i);
      a = op == CUBE_REDUCE_PROD ? a * v
          : op == CUBE_REDUCE_MAX ? (v > a ? v : a)
          : op == CUBE_REDUCE_MIN ? (v < a ? v : a)
                                  : a + v;
    }
    if (op == CUBE_REDUCE_MEAN) a = t == CUBE_DTYPE_F32 ? (double)((float)a / (float)k) : a / k;
    *out_f = a;
    return;
  }
  uint32_t es = cube_dtype_size(t);
  bool sgn = t == CUBE_DTYPE_I8 || t == CUBE_DTYPE_I32 || t == CUBE_DTYPE_I64;
  uint64_t mask = es == 8 ? ~0ull : ((1ull << (es * 8)) - 1);
  int sh = 64 - (int)es * 8;
  uint64_t a = 0;
  for (uint32_t j = 0; j < k; ++j) {
    uint64_t v = 0;
    memcpy(&v, (const char*)in[j] + i * es, es);
    if (j == 0) {
      a = v;
      continue;
    }
    int64_t sa = (int64_t)(a << sh) >> sh, sv = (int64_t)(v << sh) >> sh;
    switch (op) {
      case CUBE_REDUCE_PROD: a = (a * v) & mask; break;
      case CUBE_REDUCE_MAX: a = sgn ? (sv > sa ? v : a) : (v > a ? v : a); break;
      case CUBE_REDUCE_MIN: a = sgn ? (sv < sa ? v : a) : (v < a ? v : a); break;
      default: a = (a + v) & mask; break;
    }
  }
  if (op == CUBE_REDUCE_MEAN) {
    if (sgn) a = (uint64_t)(((int64_t)(a << sh) >> sh) / (int64_t)k) & mask;
    else a = a / k;
  }
  *out_bits = a & mask;
}

static size_t compare(cube_dtype_t t, cube_reduce_op_t op, void* const* in, uint32_t k,
                      const void* got, size_t n, const char* what) {
  size_t bad = 0;
  uint32_t es = cube_dtype_size(t);
  for (size_t i = 0; i < n; ++i) {
    double f = 0;
    uint64_t bits = 0, g = 0;
    expect(t, op, in, k, i, &f, &bits);
    bool ok;
    if (is_float(t)) {
      double gv = as_f(t, got, i);
      double tol = op == CUBE_REDUCE_MEAN && es == 2 ? (f < 0 ? -f : f) / 100.0 : 0;
      ok = gv - f <= tol && f - gv <= tol;
      if (!ok && bad < 3) fprintf(stderr, "%s: [%zu] got %g want %g\n", what, i, gv, f);
    } else {
      memcpy(&g, (const char*)got + i * es, es);
      ok = g == bits;
      if (!ok && bad < 3)
        fprintf(stderr, "%s: [%zu] got %llu want %llu\n", what, i, (unsigned long long)g,
                (unsigned long long)bits);
    }
    bad += !ok;
  }
  return bad;
}

//===----------------------------------------------------------------------===//
// Cases
//===----------------------------------------------------------------------===//

/* Reads |h| (the all_reduce of the two ranks' |in|) and compares it with the
 * host reference; a difference is a failure. Returns 1 when it was read. */
static size_t read_and_compare(cube_client_t* c, cube_handle_t h, cube_dtype_t dt,
                               cube_reduce_op_t op, void* const* in, size_t count,
                               const char* tag) {
  cube_bytes_t* b = NULL;
  CHECK_OK(cube_client_read_one(c, h, &b));
  if (!b) return 0;
  char what[128];
  snprintf(what, sizeof(what), "rank %u: %s%s%s %s, %zu elements", g_rank, tag, tag[0] ? " " : "",
           cube_dtype_name(dt), cube_reduce_op_name(op), count);
  size_t bad = compare(dt, op, in, 2, cube_bytes_const_data(b), count, what);
  if (bad) {
    fprintf(stderr, "%s: %zu elements differ\n", what, bad);
    cube_test_failures++;
  }
  cube_bytes_release(b);
  return 1;
}

CUBE_TEST(world) {
  SKIP_WITHOUT_MPI("1", "threaded");
  CHECK(g_rank < 2 && g_local == 1);
  cube_client_t* c = load(0);
  REQUIRE(c != NULL);
  /* The other rank's device exists as a global id. */
  const cube_device_id_t both[2] = {cpu(1), cpu(0)};
  CHECK_OK(cube_client_ensure_init_collective(c, 2, both));
  const cube_device_id_t other[1] = {cpu(1 - g_rank)};
  CHECK_STATUS(cube_client_ensure_init_collective(c, 1, other), CUBE_STATUS_INVALID_ARGUMENT,
               "is not among devices", "global id");
  const cube_device_id_t none[1] = {cpu(2)};
  CHECK_STATUS(cube_client_ensure_init_collective(c, 1, none), CUBE_STATUS_NOT_FOUND, "cpu:2");
  cube_client_release(c);
  cube_shutdown();
}

/* One device per rank: every element type and op over {cpu:0, cpu:1}. */
static void types_ops(const char* mode) {
  SKIP_WITHOUT_MPI("1", mode);
  cube_client_t* c = load(0);
  REQUIRE(c != NULL);
  const cube_device_id_t ids[2] = {cpu(1 - g_rank), cpu(g_rank)};
  size_t checked = 0;
  for (int t = 0; t < CUBE__DTYPE_COUNT; ++t) {
    for (int o = 0; o < CUBE__REDUCE_OP_COUNT; ++o) {
      cube_dtype_t dt = (cube_dtype_t)t;
      cube_reduce_op_t op = (cube_reduce_op_t)o;
      size_t count = (t + o) % 6 == 0 ? 100003 : (size_t)(1 + ((t * 131 + o * 17) % 2000));
      size_t bytes = count * cube_dtype_size(dt);
      void* in[2] = {malloc(bytes), malloc(bytes)};
      for (uint32_t r = 0; r < 2; ++r) gen(dt, op, in[r], count, 1000u * r + 10u * t + o + 1);
      cube_handle_t src, dst;
      REQUIRE_OK(cube_client_create_from_slice(c, in[g_rank], bytes, &src));
      void* poison = malloc(bytes);
      memset(poison, 0xEE, bytes);
      REQUIRE_OK(cube_client_create_from_slice(c, poison, bytes, &dst));
      free(poison);
      CHECK_OK(cube_client_all_reduce(c, src, dst, dt, 2, ids, op));
      CHECK_OK(cube_client_sync_collective(c));
      checked += read_and_compare(c, dst, dt, op, in, count, "");
      cube_handle_release(src);
      cube_handle_release(dst);
      free(in[0]);
      free(in[1]);
    }
  }
  CHECK_EQ_U64(checked, CUBE__DTYPE_COUNT * CUBE__REDUCE_OP_COUNT);
  cube_collective_record_t r = {0};
  CHECK_OK(cube_client_last_collective(c, &r));
  CHECK(r.participants == 2 && r.ranks == 2 &&
        r.sequence == CUBE__DTYPE_COUNT * CUBE__REDUCE_OP_COUNT - 1);
  cube_client_release(c);
  cube_shutdown();
}

CUBE_TEST(all_reduce_types_ops_threaded) { types_ops("threaded"); }
CUBE_TEST(all_reduce_types_ops_inline) { types_ops("inline"); }

/* Two devices per rank (global cpu:0..3), all driven from one thread: the
 * four together, a pair across ranks, a pair inside each rank. */
static void mixed(const char* mode) {
  SKIP_WITHOUT_MPI("2", mode);
  CHECK(g_local == 2);
  cube_client_t* c[2] = {load(0), load(1)};
  REQUIRE(c[0] && c[1]);
  const uint32_t mine[2] = {2 * g_rank, 2 * g_rank + 1};
  for (int it = 0; it < 6; ++it) {
    /* it % 3: 0 = {0,1,2,3}, 1 = {1,2} (one device of each rank), 2 = the local pair */
    int kind = it % 3;
    cube_device_id_t ids[4];
    uint32_t n = 0;
    if (kind == 0) for (uint32_t g = 0; g < 4; ++g) ids[n++] = cpu(3 - g);
    else if (kind == 1) { ids[n++] = cpu(2); ids[n++] = cpu(1); }
    else { ids[n++] = cpu(mine[1]); ids[n++] = cpu(mine[0]); }
    size_t count = 3001 + (size_t)it * 999;
    cube_reduce_op_t op = it < 3 ? CUBE_REDUCE_SUM : CUBE_REDUCE_MEAN;
    void* in[4] = {0};
    for (uint32_t g = 0; g < 4; ++g) {
      in[g] = malloc(count * 8);
      gen(CUBE_DTYPE_F64, op, in[g], count, 77u * g + (uint64_t)it);
    }
    cube_handle_t h[2] = {CUBE_HANDLE_NULL, CUBE_HANDLE_NULL};
    bool part[2];
    for (int l = 0; l < 2; ++l) {
      part[l] = false;
      for (uint32_t k = 0; k < n; ++k) part[l] |= ids[k].index == mine[l];
      if (!part[l]) continue;
      REQUIRE_OK(cube_client_create_from_slice(c[l], in[mine[l]], count * 8, &h[l]));
      CHECK_OK(cube_client_all_reduce(c[l], h[l], h[l], CUBE_DTYPE_F64, n, ids, op));
    }
    for (int l = 0; l < 2; ++l)
      if (part[l]) CHECK_OK(cube_client_sync_collective(c[l]));
    void* sorted[4];
    uint32_t k = 0;
    for (uint32_t g = 0; g < 4; ++g)
      for (uint32_t j = 0; j < n; ++j)
        if (ids[j].index == g) sorted[k++] = in[g];
    for (int l = 0; l < 2; ++l) {
      if (!part[l]) continue;
      cube_bytes_t* b = NULL;
      CHECK_OK(cube_client_read_one(c[l], h[l], &b));
      if (b) {
        char what[96];
        snprintf(what, sizeof(what), "rank %u cpu:%u iteration %d", g_rank, mine[l], it);
        CHECK(compare(CUBE_DTYPE_F64, op, sorted, n, cube_bytes_const_data(b), count, what) == 0);
      }
      cube_bytes_release(b);
      cube_handle_release(h[l]);
    }
    for (uint32_t g = 0; g < 4; ++g) free(in[g]);
  }
  cube_client_release(c[0]);
  cube_client_release(c[1]);
  cube_shutdown();
}

CUBE_TEST(all_reduce_mixed_threaded) { mixed("threaded"); }
CUBE_TEST(all_reduce_mixed_inline) { mixed("inline"); }

CUBE_TEST(send_recv) {
  SKIP_WITHOUT_MPI("1", "threaded");
  cube_client_t* c = load(0);
  REQUIRE(c != NULL);
  const size_t sizes[3] = {1, 70001, 3 << 20};
  for (int m = 0; m < 3; ++m) {
    /* rank 0 -> rank 1, then back */
    unsigned char* data = malloc(sizes[m]);
    cube_test_fill_random(data, sizes[m], 99u + (uint64_t)m);
    cube_handle_t h;
    if (g_rank == 0) {
      REQUIRE_OK(cube_client_create_from_slice(c, data, sizes[m], &h));
      CHECK_OK(cube_client_send(c, h, cpu(1)));
      CHECK_OK(cube_client_recv(c, h, cpu(1)));
    } else {
      REQUIRE_OK(cube_client_empty(c, sizes[m], &h));
      CHECK_OK(cube_client_recv(c, h, cpu(0)));
      CHECK_OK(cube_client_send(c, h, cpu(0)));
    }
    CHECK_OK(cube_client_sync_collective(c));
    cube_bytes_t* b = NULL;
    CHECK_OK(cube_client_read_one(c, h, &b));
    CHECK(b && cube_bytes_size(b) == sizes[m] &&
          memcmp(cube_bytes_const_data(b), data, sizes[m]) == 0);
    cube_bytes_release(b);
    cube_handle_release(h);
    free(data);
  }
  cube_collective_record_t r = {0};
  CHECK_OK(cube_client_last_collective(c, &r));
  CHECK(r.bytes == sizes[2] && r.ranks == 2 && r.participants == 2);
  cube_client_release(c);
  cube_shutdown();
}

CUBE_TEST(mismatch) {
  SKIP_WITHOUT_MPI("1", "threaded");
  cube_client_t* c = load(0);
  REQUIRE(c != NULL);
  const cube_device_id_t ids[2] = {cpu(0), cpu(1)};
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, g_rank ? 128 : 64, &h));
  CHECK_OK(cube_client_all_reduce(c, h, h, CUBE_DTYPE_F32, 2, ids, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_sync_collective(c));
  /* Rank 0 gets a message larger than it expects, rank 1 a smaller one. */
  CHECK_STATUS(cube_client_flush(c), CUBE_STATUS_INVALID_ARGUMENT, "participants disagree",
               g_rank ? "rank 0 gives 64 bytes of f32 sum, this rank (1) 128 bytes"
                      : "rank 1 sent more than the 64 bytes this rank (0) expects");
  cube_handle_release(h);
  cube_client_release(c);
  cube_shutdown();
}

/* A read of |h| that fails with DATA_LOST naming |why|. */
static bool read_lost(cube_client_t* c, cube_handle_t h, const char* why) {
  cube_bytes_t* b = NULL;
  cube_status_t s = cube_client_read_one(c, h, &b);
  bool ok = s && cube_status_code(s) == CUBE_STATUS_DATA_LOST &&
            strstr(cube_status_message(s), why) != NULL;
  if (!ok)
    fprintf(stderr, "rank %u: read: %s (expected DATA_LOST naming \"%s\")\n", g_rank,
            s ? cube_status_message(s) : "valid", why);
  cube_status_free(s);
  cube_bytes_release(b);
  return ok;
}

/* Rank 1's input is spoiled (a launch over it failed): the all_reduce's
 * output on rank 0 and the recv on rank 0 of rank 1's send read DATA_LOST
 * naming rank 1 (the header's flag), rank 1's own output its own failure;
 * with the input written whole again, both ranks read the sum, and the
 * recv the bytes sent. */
CUBE_TEST(spoiled_input_crosses_ranks) {
  SKIP_WITHOUT_MPI("1", "threaded");
  cube_client_t* c = load(0);
  REQUIRE(c != NULL);
  const cube_device_id_t ids[2] = {cpu(0), cpu(1)};
  enum { N = 1031 };
  float v[N], w[N], sum[N];
  for (int i = 0; i < N; ++i) {
    v[i] = (float)((i * 7) % 101) - 50.0f;   /* rank 0 */
    w[i] = (float)((i * 13) % 61);           /* rank 1 */
    sum[i] = v[i] + w[i];
  }
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cube_test_spoil_kernel(&k));
  cube_handle_t src, dst, got;
  REQUIRE_OK(cube_client_create_from_slice(c, g_rank ? w : v, sizeof(v), &src));
  REQUIRE_OK(cube_client_empty(c, sizeof(v), &dst));
  REQUIRE_OK(cube_client_empty(c, sizeof(v), &got));
  if (g_rank == 1) {
    cube_arg_t a = cube_arg_buffer(src);
    CHECK_OK(cube_client_launch(c, k, cube_count_static(1, 1, 1), 1, &a));
    CHECK_STATUS(cube_client_sync(c), CUBE_STATUS_LAUNCH_FAILED, "'spoil'");
  }
  for (int round = 0; round < 2; ++round) {
    CHECK_OK(cube_client_all_reduce(c, src, dst, CUBE_DTYPE_F32, 2, ids, CUBE_REDUCE_SUM));
    if (g_rank == 1)
      CHECK_OK(cube_client_send(c, src, cpu(0)));
    else
      CHECK_OK(cube_client_recv(c, got, cpu(1)));
    CHECK_OK(cube_client_sync_collective(c));
    CHECK_OK(cube_client_flush(c)); /* a spoiled input is no error of the operation */
    if (round == 0) {
      if (g_rank == 0) {
        CHECK(read_lost(c, dst, "rank 1 sent was made from memory that held no valid contents"));
        CHECK(read_lost(c, dst, "all_reduce #0"));
        CHECK(read_lost(c, got, "rank 1 sent was made from memory that held no valid contents"));
        CHECK(read_lost(c, got, "send/recv #0 cpu:1 -> cpu:0"));
      } else {
        CHECK(read_lost(c, dst, "'spoil'"));
      }
      /* Written whole: valid again on rank 1, and so what it sends. */
      if (g_rank == 1) CHECK_OK(cube_client_write(c, src, w, sizeof(w)));
    } else {
      cube_bytes_t* b = NULL;
      CHECK_OK(cube_client_read_one(c, dst, &b));
      CHECK(b && cube_bytes_size(b) == sizeof(sum) &&
            memcmp(cube_bytes_const_data(b), sum, sizeof(sum)) == 0);
      cube_bytes_release(b);
      if (g_rank == 0) {
        b = NULL;
        CHECK_OK(cube_client_read_one(c, got, &b));
        CHECK(b && cube_bytes_size(b) == sizeof(w) &&
              memcmp(cube_bytes_const_data(b), w, sizeof(w)) == 0);
        cube_bytes_release(b);
      }
    }
  }
  cube_handle_release(src);
  cube_handle_release(dst);
  cube_handle_release(got);
  cube_kernel_release(k);
  cube_client_release(c);
  cube_shutdown();
}

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Rank 1 is late (by more than the timeout): rank 0 fails naming it and
 * stays usable; rank 1's late call returns within the timeout (with the data
 * rank 0 left behind, or a timeout of its own), never hangs. */
CUBE_TEST(timeout_names_missing_rank) {
  SKIP_WITHOUT_MPI("1", "threaded");
  /* The environment was read by setup(): the timeout is an option to set. */
  REQUIRE_OK(cube_option_set("CUBE_COLLECTIVE_TIMEOUT", "1"));
  cube_client_t* c = load(0);
  REQUIRE(c != NULL);
  const cube_device_id_t ids[2] = {cpu(0), cpu(1)};
  cube_handle_t h;
  float v[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  REQUIRE_OK(cube_client_create_from_slice(c, v, sizeof(v), &h));
  if (g_rank == 1) {
    struct timespec ts = {2, 0};
    nanosleep(&ts, NULL);
  }
  uint64_t t0 = now_ms();
  CHECK_OK(cube_client_all_reduce(c, h, h, CUBE_DTYPE_F32, 2, ids, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_sync_collective(c));
  cube_status_t s = cube_client_flush(c);
  uint64_t ms = now_ms() - t0;
  if (g_rank == 0) {
    CHECK_STATUS(s, CUBE_STATUS_DEADLINE_EXCEEDED, "all_reduce #0", "rank 1 did not join",
                 "CUBE_COLLECTIVE_TIMEOUT");
    CHECK(ms >= 900 && ms < 10000); /* waited for the timeout, not forever */
    /* The destination was not the operation's: a copy of it is refused,
     * naming the timeout (docs/failures.md). */
    cube_handle_t out;
    CHECK_STATUS(cube_client_to_client(c, h, c, &out), CUBE_STATUS_DATA_LOST,
                 "cube_client_to_client", "all_reduce #0", "rank 1 did not join");
    /* Still usable: written whole again, copied onto itself. */
    CHECK_OK(cube_client_write(c, h, v, sizeof(v)));
    CHECK_OK(cube_client_to_client(c, h, c, &out));
    CHECK_OK(cube_client_flush(c));
    cube_bytes_t* back = NULL;
    CHECK_OK(cube_client_read_one(c, out, &back));
    CHECK(back && cube_bytes_size(back) == sizeof(v) &&
          memcmp(cube_bytes_data(back), v, sizeof(v)) == 0);
    cube_bytes_release(back);
    cube_handle_release(out);
  } else {
    CHECK(cube_status_code(s) == CUBE_STATUS_OK ||
          cube_status_code(s) == CUBE_STATUS_DEADLINE_EXCEEDED);
    CHECK(ms < 10000);
    cube_status_free(s);
  }
  cube_handle_release(h);
  cube_client_release(c);
  cube_shutdown();
  CHECK_OK(cube_option_set("CUBE_COLLECTIVE_TIMEOUT", NULL));
}

/* A shrink when every rank is alive: one round of proposals, both ranks
 * agree on the whole set (in order), and an all_reduce over it is right.
 * (A rank that dies: tests/mpi/test_rank_lost.c.) */
CUBE_TEST(shrink_with_every_rank_alive) {
  SKIP_WITHOUT_MPI("2", "threaded");
  cube_client_t* c0 = load(0);
  cube_client_t* c1 = load(1);
  REQUIRE(c0 && c1);
  cube_device_id_t set[4] = {cpu(3), cpu(1), cpu(0), cpu(2)};
  cube_device_id_t out[4];
  size_t n = 0;
  uint64_t t0 = now_ms();
  /* One call per process, through either of its clients. */
  REQUIRE_OK(cube_client_shrink_collective(g_rank == 0 ? c1 : c0, 4, set, &n, out));
  CHECK(now_ms() - t0 < 10000);
  REQUIRE(n == 4);
  for (uint32_t i = 0; i < 4; ++i) CHECK(out[i].index == i);
  enum { N = 777 };
  int64_t v[2][N];
  cube_handle_t h[2];
  cube_client_t* cl[2] = {c0, c1};
  for (uint32_t d = 0; d < 2; ++d) {
    for (uint32_t i = 0; i < N; ++i) v[d][i] = (int64_t)(i * 7 + d + 3 * g_rank);
    REQUIRE_OK(cube_client_create_from_slice(cl[d], v[d], sizeof(v[d]), &h[d]));
    CHECK_OK(cube_client_all_reduce(cl[d], h[d], h[d], CUBE_DTYPE_I64, n, out, CUBE_REDUCE_SUM));
  }
  for (uint32_t d = 0; d < 2; ++d) CHECK_OK(cube_client_sync_collective(cl[d]));
  for (uint32_t d = 0; d < 2; ++d) {
    cube_bytes_t* b = NULL;
    CHECK_OK(cube_client_read_one(cl[d], h[d], &b));
    if (b) {
      const int64_t* g = cube_bytes_const_data(b);
      size_t bad = 0;
      /* sum over ranks r and local devices d of i*7 + d + 3r = 4*7i + 2 + 6 */
      for (uint32_t i = 0; i < N; ++i) bad += g[i] != (int64_t)(28 * i + 8);
      CHECK(bad == 0);
    }
    cube_bytes_release(b);
    cube_handle_release(h[d]);
  }
  cube_client_release(c0);
  cube_client_release(c1);
  cube_shutdown();
}

/* CUDA across processes through the nccl transport, in CI: each rank sees
 * one GPU of the mock driver (tests/mock_cuda), NCCL is the mock of
 * tests/mock_nccl (parts between processes through files in
 * CUBE_MOCK_NCCL_DIR). cuda:g is rank g's GPU; the unique id goes from rank 0
 * to rank 1 over MPI. */
static void cuda_two_processes(bool staged, bool real) {
#if defined(CUBE_MOCK_CUDA_PATH) && defined(CUBE_MOCK_NCCL_PATH)
  if (real) {
    /* The real driver and NCCL: one GPU per process (CUDA_VISIBLE_DEVICES set
     * per rank by the launcher, scripts/gpu-check.sh). */
    if (!getenv("CUBE_TEST_REAL_GPUS")) CUBE_SKIP("CUBE_TEST_REAL_GPUS is not set");
  } else {
    setenv("CUBE_CUDA_DRIVER", CUBE_MOCK_CUDA_PATH, 1);
    setenv("CUBE_NCCL_LIBRARY", staged ? "/nonexistent/libnccl.so.2" : CUBE_MOCK_NCCL_PATH, 1);
    setenv("CUBE_MOCK_CUDA_DEVICES", "1", 1);
    const char* tmp = getenv("CUBE_TEST_TMPDIR");
    setenv("CUBE_MOCK_NCCL_DIR", tmp && *tmp ? tmp : "/tmp", 1);
  }
  SKIP_WITHOUT_MPI("1", "threaded");
  const char* want = staged ? "staged" : "nccl";
  const char* transport = cube_collective_transport(CUBE_BACKEND_CUDA, NULL);
  REQUIRE(transport && strcmp(transport, want) == 0);
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CUDA, 0}, &c));
  const cube_device_id_t ids[2] = {{CUBE_BACKEND_CUDA, 1}, {CUBE_BACKEND_CUDA, 0}};
  const cube_dtype_t types[] = {CUBE_DTYPE_F32, CUBE_DTYPE_I64, CUBE_DTYPE_U8, CUBE_DTYPE_BF16};
  size_t checked = 0;
  for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); ++t) {
    for (int o = 0; o < CUBE__REDUCE_OP_COUNT; ++o) {
      cube_dtype_t dt = types[t];
      cube_reduce_op_t op = (cube_reduce_op_t)o;
      if (op == CUBE_REDUCE_MEAN && dt == CUBE_DTYPE_BF16) continue; /* the reference rounds */
      size_t count = 1 + (t * 313 + (size_t)o * 71) % 3000;
      size_t bytes = count * cube_dtype_size(dt);
      void* in[2] = {malloc(bytes), malloc(bytes)};
      for (uint32_t r = 0; r < 2; ++r) gen(dt, op, in[r], count, 5000u * r + 10u * t + o + 1);
      cube_handle_t h;
      REQUIRE_OK(cube_client_create_from_slice(c, in[g_rank], bytes, &h));
      CHECK_OK(cube_client_all_reduce(c, h, h, dt, 2, ids, op));
      CHECK_OK(cube_client_sync_collective(c));
      checked += read_and_compare(c, h, dt, op, in, count, want);
      cube_handle_release(h);
      free(in[0]);
      free(in[1]);
    }
  }
  CHECK_EQ_U64(checked, 4 * CUBE__REDUCE_OP_COUNT - 1);
  cube_collective_record_t r = {0};
  CHECK_OK(cube_client_last_collective(c, &r));
  CHECK(r.participants == 2 && r.ranks == 2 && r.transport && strcmp(r.transport, want) == 0);
  /* send/recv: rank 0's bytes land on rank 1. */
  unsigned char msg[4099];
  cube_test_fill_random(msg, sizeof(msg), 99);
  cube_handle_t m;
  if (g_rank == 0) {
    REQUIRE_OK(cube_client_create_from_slice(c, msg, sizeof(msg), &m));
    CHECK_OK(cube_client_send(c, m, (cube_device_id_t){CUBE_BACKEND_CUDA, 1}));
  } else {
    REQUIRE_OK(cube_client_empty(c, sizeof(msg), &m));
    CHECK_OK(cube_client_recv(c, m, (cube_device_id_t){CUBE_BACKEND_CUDA, 0}));
  }
  CHECK_OK(cube_client_sync_collective(c));
  CHECK_OK(cube_client_sync(c));
  if (g_rank == 1) {
    cube_bytes_t* b = NULL;
    CHECK_OK(cube_client_read_one(c, m, &b));
    CHECK(b && cube_bytes_size(b) == sizeof(msg) && memcmp(cube_bytes_const_data(b), msg, sizeof(msg)) == 0);
    cube_bytes_release(b);
  }
  cube_handle_release(m);
  cube_client_release(c);
  cube_shutdown();
#else
  (void)staged;
  (void)real;
  CUBE_SKIP("the CUDA backend (and its mocks) is not built");
#endif
}

CUBE_TEST(nccl_mock_two_processes) { cuda_two_processes(false, false); }

/* The same without NCCL: the staged transport, partial results over MPI. */
CUBE_TEST(cuda_staged_two_processes) { cuda_two_processes(true, false); }

/* On a host with two GPUs, one process each (skips unless CUBE_TEST_REAL_GPUS
 * is set: run by scripts/gpu-check.sh nccl). */
CUBE_TEST(nccl_real_two_processes) { cuda_two_processes(false, true); }
