/* Devices: enumeration, properties, features, info, vector sizes,
 * collectives, queue variants, shutdown. */
#include <stdlib.h>
#include <string.h>

#include "cts.h"

CUBE_TEST(devices_enumeration_agrees) {
  cube_backend_t be = cts_backend()->backend;
  size_t n = cube_test_device_count(be);
  if (n == 0) CUBE_SKIP("backend %s has no devices", cts_backend()->name);
  size_t count = 0;
  REQUIRE_OK(cube_enumerate_devices(be, NULL, 0, &count));
  CHECK_EQ_U64(count, n);
  cube_device_id_t ids[70];
  for (int i = 0; i < 70; ++i) ids[i] = (cube_device_id_t){CUBE_BACKEND_NONE, 0xFFFFFFFFu};
  REQUIRE_OK(cube_enumerate_devices(be, ids, 64, &count));
  CHECK_EQ_U64(count, n);
  for (size_t i = 0; i < n && i < 64; ++i) CHECK(ids[i].backend == be && ids[i].index == i);
  CHECK(ids[n < 64 ? n : 64].index == 0xFFFFFFFFu);
  /* A small capacity writes only that many but counts all. */
  ids[0] = ids[1] = (cube_device_id_t){CUBE_BACKEND_NONE, 0xFFFFFFFFu};
  count = 0;
  REQUIRE_OK(cube_enumerate_devices(be, ids, 0, &count));
  CHECK_EQ_U64(count, n);
  CHECK(ids[0].index == 0xFFFFFFFFu);
  /* All backends. */
  size_t total = 0;
  REQUIRE_OK(cube_enumerate_all_devices(NULL, 0, &total));
  CHECK(total >= n);
  size_t all = 0;
  cube_device_id_t* every = calloc(total + 1, sizeof(*every));
  REQUIRE(every);
  REQUIRE_OK(cube_enumerate_all_devices(every, total, &all));
  CHECK_EQ_U64(all, total);
  size_t mine = 0;
  for (size_t i = 0; i < total; ++i) {
    if (every[i].backend == be) mine++;
    if (i > 0)
      CHECK(every[i - 1].backend < every[i].backend ||
            (every[i - 1].backend == every[i].backend && every[i - 1].index < every[i].index));
  }
  CHECK_EQ_U64(mine, n);
  /* Every backend, visited as a program without a backend count does: until
   * cube_backend_name says there are no more. */
  size_t sum = 0;
  int backends = 0;
  for (int b = 0; cube_backend_name((cube_backend_t)b); ++b, ++backends)
    sum += cube_test_device_count((cube_backend_t)b);
  CHECK_EQ_U64(sum, total);
  CHECK(backends >= 4);
  CHECK(cube_backend_name(CUBE_BACKEND_NONE) == NULL);
  free(every);
  CHECK_OK(cube_backend_status(be));
  /* The null backend is hidden unless CUBE_NULL_DEVICES asks for devices. */
  const char* nd = getenv("CUBE_NULL_DEVICES");
  CHECK_EQ_U64(cube_test_device_count(CUBE_BACKEND_NULL), nd ? strtoull(nd, NULL, 10) : 0);
  CHECK_STATUS(cube_enumerate_devices((cube_backend_t)99, NULL, 0, &count), CUBE_STATUS_INVALID_ARGUMENT, "99");
}

CUBE_TEST(devices_cpu_device_count_env) {
  if (cts_backend()->backend != CUBE_BACKEND_CPU) CUBE_SKIP("CPU only");
  setenv("CUBE_CPU_DEVICES", "3", 1);
  CHECK_EQ_U64(cube_test_device_count(CUBE_BACKEND_CPU), 3);
  cube_client_t* c2 = NULL;
  REQUIRE_OK(cube_client_load(cts_device(2), &c2));
  CHECK(cube_client_device(c2).index == 2);
  CHECK(cube_client_properties(c2)->id.index == 2);
  CHECK(cube_client_info(c2)->device_count == 3);
  cube_client_t* c3 = NULL;
  CHECK_STATUS(cube_client_load(cts_device(3), &c3), CUBE_STATUS_NOT_FOUND, "3");
  CTS_END(c2);
}

static int cts_pow2(uint64_t v) { return v && !(v & (v - 1)); }

CUBE_TEST(devices_properties_sane) {
  CTS_CLIENT(c);
  const cube_device_properties_t* p = cube_client_properties(c);
  REQUIRE(p != NULL);
  CHECK(p->name[0] != 0);
  CHECK(memchr(p->name, 0, sizeof(p->name)) != NULL);
  CHECK(p->id.backend == cts_backend()->backend && p->id.index == 0);
  CHECK(cts_pow2(p->memory.alignment));
  CHECK(p->memory.max_page_size > 0);
  CHECK(p->memory.max_page_size <= p->memory.total_memory);
  CHECK_EQ_U64(p->memory.max_page_size % p->memory.alignment, 0);
  CHECK(p->hardware.load_width > 0);
  CHECK(p->hardware.plane_size_min >= 1 && p->hardware.plane_size_min <= p->hardware.plane_size_max);
  CHECK(p->hardware.max_units_per_cube >= 1);
  for (int i = 0; i < 3; ++i) {
    CHECK(p->hardware.max_cube_dim[i] >= 1);
    CHECK(p->hardware.max_cube_count[i] >= 1);
  }
  CHECK(p->hardware.max_vector_size >= 1);
  CHECK(p->hardware.max_bindings >= 1);
  if (cts_backend()->backend == CUBE_BACKEND_CPU) {
    CHECK(p->layout_policy == CUBE_LAYOUT_POLICY_CONTIGUOUS);
    CHECK(p->timing_method == CUBE_TIMING_DEVICE);
    CHECK(p->hardware.num_cpu_cores >= 1);
  }
  CHECK(cube_client_device(c).backend == p->id.backend && cube_client_device(c).index == 0);
  CTS_END(c);
}

CUBE_TEST(devices_features_and_info) {
  CTS_CLIENT(c);
  const cube_features_t* f = cube_client_features(c);
  REQUIRE(f != NULL);
  if (cts_backend()->backend == CUBE_BACKEND_CPU) {
    CHECK(f->bits & CUBE_FEATURE_NATIVE_KERNELS);
    CHECK(f->bits & CUBE_FEATURE_COLLECTIVES); /* the host transport (src/collective) */
  }
  const cube_backend_info_t* info = cube_client_info(c);
  REQUIRE(info != NULL);
  CHECK(info->backend == cts_backend()->backend);
  CHECK(strcmp(info->name, cube_backend_name(cts_backend()->backend)) == 0);
  if (cts_backend()->backend == CUBE_BACKEND_CPU) CHECK(strcmp(info->name, "cpu") == 0);
  CHECK(info->version[0] != 0);
  CHECK_EQ_U64(info->device_count, cube_test_device_count(cts_backend()->backend));
  cube_backend_t parsed = CUBE_BACKEND_NONE;
  CHECK_OK(cube_backend_parse("CPU", &parsed));
  CHECK(parsed == CUBE_BACKEND_CPU);
  CHECK(cube_backend_name((cube_backend_t)99) == NULL);
  CHECK(strcmp(cube_version(), CUBE_VERSION_STRING) == 0);
  /* Every client of a device shares its server. */
  cube_client_t* c2 = NULL;
  REQUIRE_OK(cube_client_load(cts_device(0), &c2));
  CHECK(cube_client_properties(c2) == cube_client_properties(c) ||
        memcmp(cube_client_properties(c2), cube_client_properties(c), sizeof(cube_device_properties_t)) == 0);
  uint8_t d[7] = {7, 6, 5, 4, 3, 2, 1};
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, d, 7, &h));
  CHECK(cts_read_equals(c2, h, d, 7));
  cube_client_t* c3 = cube_client_retain(c2);
  CHECK(c3 == c2);
  cube_client_release(c3);
  cube_handle_release(h);
  cube_client_release(c2);
  CTS_END(c);
}

CUBE_TEST(devices_io_optimized_vector_sizes) {
  CTS_CLIENT(c);
  const cube_device_properties_t* p = cube_client_properties(c);
  const uint32_t elems[4] = {1, 2, 4, 8};
  for (int e = 0; e < 4; ++e) {
    uint64_t max = p->hardware.load_width / (elems[e] * 8u);
    if (p->hardware.max_vector_size < max) max = p->hardware.max_vector_size;
    uint64_t top = 1;
    while (top * 2 <= max) top *= 2;
    uint32_t sizes[64];
    size_t n = 0;
    REQUIRE_OK(cube_client_io_optimized_vector_sizes(c, elems[e], sizes, 64, &n));
    REQUIRE(n >= 1 && n <= 64);
    CHECK_EQ_U64(sizes[0], top);
    CHECK_EQ_U64(sizes[n - 1], 1);
    for (size_t i = 1; i < n; ++i) CHECK(sizes[i] * 2 == sizes[i - 1]);
    size_t counted = 0;
    CHECK_OK(cube_client_io_optimized_vector_sizes(c, elems[e], NULL, 0, &counted));
    CHECK_EQ_U64(counted, n);
  }
  /* The reference's example: f32 on the CPU (load width 512, max 16) -> 16..1. */
  if (cts_backend()->backend == CUBE_BACKEND_CPU && p->hardware.load_width == 512 &&
      p->hardware.max_vector_size >= 16) {
    uint32_t sizes[8];
    size_t n = 0;
    CHECK_OK(cube_client_io_optimized_vector_sizes(c, 4, sizes, 8, &n));
    CHECK(n == 5 && sizes[0] == 16 && sizes[4] == 1);
  }
  CTS_END(c);
}

/* Backends with a transport: the smallest collectives, over the first device
 * alone (tests/unit/test_collective.c covers 1..4 CPU devices). */
CUBE_TEST(devices_collectives_single_device) {
  CTS_CLIENT(c);
  if (!(cube_client_features(c)->bits & CUBE_FEATURE_COLLECTIVES)) {
    CTS_END(c);
    CUBE_SKIP("no collectives (devices_collectives_unimplemented tests that)");
  }
  cube_device_id_t devs[1] = {cts_device(0)};
  CHECK_OK(cube_client_ensure_init_collective(c, 1, devs));
  float v[5] = {1, -2, 3.5f, 4, 5}, poison[5] = {-9, -9, -9, -9, -9};
  cube_handle_t src, dst, copy;
  REQUIRE_OK(cube_client_create_from_slice(c, v, sizeof(v), &src));
  REQUIRE_OK(cube_client_create_from_slice(c, poison, sizeof(poison), &dst));
  REQUIRE_OK(cube_client_create_from_slice(c, poison, sizeof(poison), &copy));
  CHECK_OK(cube_client_all_reduce(c, src, dst, CUBE_DTYPE_F32, 1, devs, CUBE_REDUCE_MEAN));
  CHECK_OK(cube_client_send(c, src, devs[0]));
  CHECK_OK(cube_client_recv(c, copy, devs[0]));
  CHECK_OK(cube_client_sync_collective(c));
  CHECK_OK(cube_client_sync(c));
  CHECK(cts_read_equals(c, dst, v, sizeof(v)));
  CHECK(cts_read_equals(c, copy, v, sizeof(v)));
  cube_collective_record_t r = {0};
  CHECK_OK(cube_client_last_collective(c, &r));
  CHECK(r.bytes == sizeof(v) && r.participants == 2 && r.kind == CUBE_COLLECTIVE_RECV);
  cube_handle_release(src);
  cube_handle_release(dst);
  cube_handle_release(copy);
  CTS_END(c);
}

CUBE_TEST(devices_collectives_unimplemented) {
  CTS_CLIENT(c);
  if (cube_client_features(c)->bits & CUBE_FEATURE_COLLECTIVES) {
    CTS_END(c);
    CUBE_SKIP("backend has collectives (devices_collectives_single_device tests them)");
  }
  cube_device_id_t devs[1] = {cts_device(0)};
  CHECK_STATUS(cube_client_ensure_init_collective(c, 1, devs), CUBE_STATUS_UNIMPLEMENTED,
               "cube_client_ensure_init_collective");
  CHECK_STATUS(cube_client_sync_collective(c), CUBE_STATUS_UNIMPLEMENTED, "cube_client_sync_collective");
  float v[4] = {1, 2, 3, 4};
  cube_handle_t src, dst;
  REQUIRE_OK(cube_client_create_from_slice(c, v, sizeof(v), &src));
  REQUIRE_OK(cube_client_empty(c, sizeof(v), &dst));
  CHECK_STATUS(cube_client_all_reduce(c, src, dst, CUBE_DTYPE_F32, 1, devs, CUBE_REDUCE_SUM),
               CUBE_STATUS_UNIMPLEMENTED, "cube_client_all_reduce");
  /* Bad inputs are reported as such first. */
  CHECK_STATUS(cube_client_ensure_init_collective(c, 0, devs), CUBE_STATUS_INVALID_ARGUMENT, "device_count");
  CHECK_STATUS(cube_client_ensure_init_collective(c, 1, NULL), CUBE_STATUS_INVALID_ARGUMENT, "devices");
  CHECK_STATUS(cube_client_ensure_init_collective(NULL, 1, devs), CUBE_STATUS_INVALID_ARGUMENT, "client");
  CHECK_STATUS(cube_client_all_reduce(c, src, dst, (cube_dtype_t)99, 1, devs, CUBE_REDUCE_SUM),
               CUBE_STATUS_INVALID_ARGUMENT, "99");
  CHECK_STATUS(cube_client_all_reduce(c, src, dst, CUBE_DTYPE_F32, 1, devs, (cube_reduce_op_t)5),
               CUBE_STATUS_INVALID_ARGUMENT, "5");
  CHECK_STATUS(cube_client_all_reduce(c, CUBE_HANDLE_NULL, dst, CUBE_DTYPE_F32, 1, devs, CUBE_REDUCE_SUM),
               CUBE_STATUS_INVALID_ARGUMENT, "src");
  CHECK_STATUS(cube_client_all_reduce(c, src, dst, CUBE_DTYPE_F32, 0, devs, CUBE_REDUCE_MEAN),
               CUBE_STATUS_INVALID_ARGUMENT, "device_count");
  CHECK_STATUS(cube_client_sync_collective(NULL), CUBE_STATUS_INVALID_ARGUMENT, "client");
  CHECK(cube_dtype_size(CUBE_DTYPE_F32) == 4 && cube_dtype_size(CUBE_DTYPE_BF16) == 2 &&
        cube_dtype_size(CUBE_DTYPE_U8) == 1 && cube_dtype_size((cube_dtype_t)99) == 0);
  /* Nothing happened to the data or the stream. */
  CHECK_OK(cube_client_sync(c));
  CHECK(cts_read_equals(c, src, v, sizeof(v)));
  cube_handle_release(src);
  cube_handle_release(dst);
  CTS_END(c);
}

CUBE_TEST(devices_queue_variant) {
  CTS_CLIENT(c);
  const char* mode = cts_backend()->queue_mode;
  if (mode && strcmp(mode, "inline") == 0) CHECK(cube_client_is_blocking(c));
  if (mode && strcmp(mode, "threaded") == 0) CHECK(!cube_client_is_blocking(c));
  /* An explicit option wins over the environment -- for a new server. */
  cube_client_release(c);
  cube_shutdown();
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.queue_mode = (mode && strcmp(mode, "inline") == 0) ? CUBE_QUEUE_THREADED : CUBE_QUEUE_INLINE;
  cube_client_t* c2 = NULL;
  REQUIRE_OK(cube_client_init(cts_device(0), &o, &c2));
  CHECK(cube_client_is_blocking(c2) == (o.queue_mode == CUBE_QUEUE_INLINE));
  uint8_t d[9] = {1, 1, 2, 3, 5, 8, 13, 21, 34};
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c2, d, 9, &h));
  CHECK(cts_read_equals(c2, h, d, 9));
  cube_handle_release(h);
  CTS_END(c2);
}

CUBE_TEST(devices_shutdown_and_reuse) {
  for (int round = 0; round < 3; ++round) {
    CTS_CLIENT(c);
    CTS_KERNEL(k, "add", cts_k_add_u32, 4, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_U32);
    uint32_t in[16];
    cube_test_fill_random(in, sizeof(in), 9000 + round);
    cube_handle_t hi, ho;
    REQUIRE_OK(cube_client_create_from_slice(c, in, sizeof(in), &hi));
    REQUIRE_OK(cube_client_empty(c, sizeof(in), &ho));
    cube_arg_t a[4] = {cube_arg_buffer(hi), cube_arg_buffer(ho), cube_arg_u32(3), cube_arg_u32(16)};
    CHECK_OK(cube_client_launch(c, k, cube_count_static(4, 1, 1), 4, a));
    for (int i = 0; i < 16; ++i) in[i] += 3;
    CHECK(cts_read_equals(c, ho, in, sizeof(in)));
    cube_memory_usage_t u;
    CHECK_OK(cube_client_memory_usage(c, &u));
    CHECK_EQ_U64(u.number_allocs, 2); /* a fresh server after each shutdown */
    cube_handle_release(hi);
    cube_handle_release(ho);
    cube_kernel_release(k);
    CTS_END(c);
  }
}

/* cube_shutdown releases everything: read results kept by the caller stay
 * valid, handles and clients from before it are refused (not dereferenced),
 * and the library works again afterwards. */
CUBE_TEST(shutdown_refuses_stale_objects_keeps_read_results) {
  CTS_CLIENT(c);
  uint8_t data[3001];
  cube_test_fill_random(data, sizeof(data), 77);
  cube_handle_t h, kept;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  REQUIRE_OK(cube_client_empty(c, 64, &kept)); /* never released by the caller */
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_client_read_one(c, h, &b));
  cube_shutdown();
  /* The read result is the caller's: still valid and intact. */
  CHECK(cube_bytes_size(b) == sizeof(data));
  CHECK(memcmp(cube_bytes_const_data(b), data, sizeof(data)) == 0);
  cube_bytes_release(b);
  /* Old handles and clients are refused with a clear status. */
  cube_bytes_t* b2 = NULL;
  cube_client_t* fresh = NULL;
  REQUIRE_OK(cube_client_load(cts_device(0), &fresh));
  CHECK_STATUS(cube_client_read_one(fresh, h, &b2), CUBE_STATUS_NOT_FOUND, "released");
  CHECK_STATUS(cube_client_read_one(fresh, kept, &b2), CUBE_STATUS_NOT_FOUND, "released");
  CHECK(cube_handle_size(kept) == 0);
  CHECK_STATUS(cube_handle_release_checked(h), CUBE_STATUS_NOT_FOUND, "already released");
  cube_handle_t h2;
  CHECK_STATUS(cube_client_empty(c, 16, &h2), CUBE_STATUS_FAILED_PRECONDITION, "cube_shutdown");
  CHECK(cube_client_properties(c) == NULL);
  cube_client_release(c);
  /* The library works again. */
  REQUIRE_OK(cube_client_create_from_slice(fresh, data, 100, &h2));
  CHECK(cts_read_equals(fresh, h2, data, 100));
  cube_handle_release(h2);
  cube_client_release(fresh);
  cube_shutdown();
}

/* Collectives across two devices of the backend, one thread driving both:
 * every element type and op against a host reference (small integers: exact
 * in every type), send/recv, and a size mismatch named in the error. */
static double cts_coll_get(cube_dtype_t t, const void* p, size_t i) {
  switch (t) {
    case CUBE_DTYPE_F32: return ((const float*)p)[i];
    case CUBE_DTYPE_F64: return ((const double*)p)[i];
    case CUBE_DTYPE_I32: return ((const int32_t*)p)[i];
    case CUBE_DTYPE_I64: return (double)((const int64_t*)p)[i];
    case CUBE_DTYPE_U32: return ((const uint32_t*)p)[i];
    default: return (double)((const uint64_t*)p)[i];
  }
}

static void cts_coll_set(cube_dtype_t t, void* p, size_t i, double v) {
  switch (t) {
    case CUBE_DTYPE_F32: ((float*)p)[i] = (float)v; break;
    case CUBE_DTYPE_F64: ((double*)p)[i] = v; break;
    case CUBE_DTYPE_I32: ((int32_t*)p)[i] = (int32_t)v; break;
    case CUBE_DTYPE_I64: ((int64_t*)p)[i] = (int64_t)v; break;
    case CUBE_DTYPE_U32: ((uint32_t*)p)[i] = (uint32_t)v; break;
    default: ((uint64_t*)p)[i] = (uint64_t)v; break;
  }
}

CUBE_TEST(devices_collectives_two_devices) {
  CTS_REQUIRE_DEVICES(2);
  CTS_CLIENT(c0);
  cube_client_t* c1 = NULL;
  REQUIRE_OK(cube_client_load(cts_device(1), &c1));
  if (!(cube_client_features(c0)->bits & CUBE_FEATURE_COLLECTIVES)) {
    cube_client_release(c1);
    CTS_END(c0);
    CUBE_SKIP("no collectives");
  }
  const cube_device_id_t devs[2] = {cts_device(1), cts_device(0)}; /* any order */
  CHECK_OK(cube_client_ensure_init_collective(c0, 2, devs));
  CHECK_OK(cube_client_ensure_init_collective(c1, 2, devs));
  const cube_dtype_t types[] = {CUBE_DTYPE_F32, CUBE_DTYPE_F64, CUBE_DTYPE_I32,
                                CUBE_DTYPE_I64, CUBE_DTYPE_U32, CUBE_DTYPE_U64};
  const cube_reduce_op_t ops[] = {CUBE_REDUCE_SUM, CUBE_REDUCE_MAX, CUBE_REDUCE_MIN,
                                  CUBE_REDUCE_PROD, CUBE_REDUCE_MEAN};
  const size_t n = 1001;
  uint64_t rng = 0x5eed0c0111ull;
  int cases = 0;
  for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ++ti) {
    cube_dtype_t t = types[ti];
    bool is_float = t == CUBE_DTYPE_F32 || t == CUBE_DTYPE_F64;
    bool is_unsigned = t == CUBE_DTYPE_U32 || t == CUBE_DTYPE_U64;
    size_t bytes = n * cube_dtype_size(t);
    for (size_t oi = 0; oi < sizeof(ops) / sizeof(ops[0]); ++oi) {
      cube_reduce_op_t op = ops[oi];
      if (op == CUBE_REDUCE_MEAN && !is_float) continue; /* integer means round: not exact here */
      void* a = malloc(bytes);
      void* b = malloc(bytes);
      void* expect = malloc(bytes);
      void* poison = malloc(bytes);
      REQUIRE(a && b && expect && poison);
      memset(poison, CTS_POISON, bytes);
      for (size_t i = 0; i < n; ++i) {
        int span = op == CUBE_REDUCE_PROD ? 4 : 200;
        double x = (double)(cube_test_rand(&rng) % (uint64_t)span);
        double y = (double)(cube_test_rand(&rng) % (uint64_t)span);
        if (!is_unsigned) {
          x -= span / 2;
          y -= span / 2;
        }
        if (op == CUBE_REDUCE_MEAN) {
          x *= 2; /* sums of two even numbers halve exactly */
          y *= 2;
        }
        cts_coll_set(t, a, i, x);
        cts_coll_set(t, b, i, y);
        double r = op == CUBE_REDUCE_SUM ? x + y
                   : op == CUBE_REDUCE_MAX ? (x > y ? x : y)
                   : op == CUBE_REDUCE_MIN ? (x < y ? x : y)
                   : op == CUBE_REDUCE_PROD ? x * y
                                            : (x + y) / 2;
        cts_coll_set(t, expect, i, r);
      }
      cube_handle_t s0, s1, d0, d1;
      REQUIRE_OK(cube_client_create_from_slice(c0, a, bytes, &s0));
      REQUIRE_OK(cube_client_create_from_slice(c1, b, bytes, &s1));
      REQUIRE_OK(cube_client_create_from_slice(c0, poison, bytes, &d0));
      REQUIRE_OK(cube_client_create_from_slice(c1, poison, bytes, &d1));
      CHECK_OK(cube_client_all_reduce(c0, s0, d0, t, 2, devs, op));
      CHECK_OK(cube_client_all_reduce(c1, s1, d1, t, 2, devs, op));
      CHECK_OK(cube_client_sync_collective(c0));
      CHECK_OK(cube_client_sync_collective(c1));
      for (int side = 0; side < 2; ++side) {
        cube_bytes_t* got = NULL;
        CHECK_OK(cube_client_read_one(side ? c1 : c0, side ? d1 : d0, &got));
        bool ok = got && cube_bytes_size(got) == bytes &&
                  memcmp(cube_bytes_const_data(got), expect, bytes) == 0;
        if (!ok && got && cube_bytes_size(got) == bytes)
          for (size_t i = 0; i < n; ++i)
            if (cts_coll_get(t, cube_bytes_const_data(got), i) != cts_coll_get(t, expect, i)) {
              fprintf(stderr, "%s %s device %d: [%zu] = %g, expected %g\n", cube_dtype_name(t),
                      cube_reduce_op_name(op), side, i,
                      cts_coll_get(t, cube_bytes_const_data(got), i), cts_coll_get(t, expect, i));
              break;
            }
        CHECK(ok);
        cube_bytes_release(got);
      }
      cases++;
      cube_handle_release(s0);
      cube_handle_release(s1);
      cube_handle_release(d0);
      cube_handle_release(d1);
      free(a);
      free(b);
      free(expect);
      free(poison);
    }
  }
  CHECK_EQ_U64(cases, 26);
  /* send/recv: device 0's bytes land on device 1. */
  unsigned char msg[777], poison[777];
  cube_test_fill_random(msg, sizeof(msg), 8100);
  memset(poison, CTS_POISON, sizeof(poison));
  cube_handle_t hs, hr;
  REQUIRE_OK(cube_client_create_from_slice(c0, msg, sizeof(msg), &hs));
  REQUIRE_OK(cube_client_create_from_slice(c1, poison, sizeof(poison), &hr));
  CHECK_OK(cube_client_send(c0, hs, cts_device(1)));
  CHECK_OK(cube_client_recv(c1, hr, cts_device(0)));
  CHECK_OK(cube_client_sync_collective(c1));
  CHECK_OK(cube_client_sync_collective(c0));
  CHECK(cts_read_equals(c1, hr, msg, sizeof(msg)));
  /* Participants that disagree on the size get an error naming both. */
  cube_handle_t m0, m1, o0, o1;
  REQUIRE_OK(cube_client_create_from_slice(c0, msg, 400, &m0));
  REQUIRE_OK(cube_client_create_from_slice(c1, msg, 600, &m1));
  REQUIRE_OK(cube_client_create_from_slice(c0, poison, 400, &o0));
  REQUIRE_OK(cube_client_create_from_slice(c1, poison, 600, &o1));
  CHECK_OK(cube_client_all_reduce(c0, m0, o0, CUBE_DTYPE_F32, 2, devs, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_all_reduce(c1, m1, o1, CUBE_DTYPE_F32, 2, devs, CUBE_REDUCE_SUM));
  cube_status_t e0 = cube_client_sync_collective(c0);
  if (!e0) e0 = cube_client_sync(c0);
  cube_status_t e1 = cube_client_sync_collective(c1);
  if (!e1) e1 = cube_client_sync(c1);
  CHECK(cube_status_code(e0) == CUBE_STATUS_INVALID_ARGUMENT || cube_status_code(e1) == CUBE_STATUS_INVALID_ARGUMENT);
  const char* msg0 = e0 ? cube_status_message(e0) : cube_status_message(e1);
  CHECK(msg0 && strstr(msg0, "400") && strstr(msg0, "600"));
  cube_status_free(e0);
  cube_status_free(e1);
  /* Nothing was written: the destination's contents are not the
   * operation's, and a read says why (docs/failures.md). */
  CHECK(cts_read_lost(c0, o0, "all_reduce of 400 bytes into memory", "participants disagree",
                      (const char*)NULL));
  cube_handle_t hl[] = {hs, hr, m0, m1, o0, o1};
  for (size_t i = 0; i < 6; ++i) cube_handle_release(hl[i]);
  cube_client_release(c1);
  CTS_END(c0);
}

/* Several threads call cube_client_init for one device at once, each with
 * its own options: exactly one creates the server (and its options are the
 * ones in force), the others get ALREADY_EXISTS. */
#define CTS_INIT_RACERS 8

typedef struct cts_init_racer {
  atomic_int* go;
  uint64_t limit;
  cube_client_t* client;
  cube_status_code_t code;
} cts_init_racer_t;

static void* cts_init_race(void* p) {
  cts_init_racer_t* r = p;
  while (!atomic_load(r->go)) {
  }
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.memory_limit = r->limit;
  cube_status_t s = cube_client_init(cts_device(0), &o, &r->client);
  r->code = cube_status_code(s);
  cube_status_free(s);
  return NULL;
}

CUBE_TEST(devices_init_concurrent_exactly_one) {
  CTS_REQUIRE_BACKEND();
  if (getenv("CUBE_MEMORY_LIMIT")) unsetenv("CUBE_MEMORY_LIMIT");
  atomic_int go = 0;
  cts_init_racer_t r[CTS_INIT_RACERS];
  pthread_t th[CTS_INIT_RACERS];
  for (int i = 0; i < CTS_INIT_RACERS; ++i) {
    r[i] = (cts_init_racer_t){&go, (uint64_t)(64 + i) << 20, NULL, CUBE_STATUS_INTERNAL};
    REQUIRE(pthread_create(&th[i], NULL, cts_init_race, &r[i]) == 0);
  }
  atomic_store(&go, 1);
  for (int i = 0; i < CTS_INIT_RACERS; ++i) pthread_join(th[i], NULL);
  int ok = -1, winners = 0, exists = 0;
  for (int i = 0; i < CTS_INIT_RACERS; ++i) {
    if (r[i].code == CUBE_STATUS_OK) {
      ++winners;
      ok = i;
    } else if (r[i].code == CUBE_STATUS_ALREADY_EXISTS) {
      ++exists;
      CHECK(r[i].client == NULL);
    }
  }
  CHECK_EQ_U64(winners, 1);
  CHECK_EQ_U64(exists, CTS_INIT_RACERS - 1);
  REQUIRE(ok >= 0);
  cube_memory_report_t rep = {0};
  REQUIRE_OK(cube_client_memory_report(r[ok].client, &rep));
  CHECK_EQ_U64(rep.memory_limit, r[ok].limit); /* the winner's options */
  /* A later init is refused the same way; load shares the server. */
  cube_client_t* late = NULL;
  CHECK_STATUS(cube_client_init(cts_device(0), NULL, &late), CUBE_STATUS_ALREADY_EXISTS,
               "already has a server");
  cube_client_t* loaded = NULL;
  REQUIRE_OK(cube_client_load(cts_device(0), &loaded));
  REQUIRE_OK(cube_client_memory_report(loaded, &rep));
  CHECK_EQ_U64(rep.memory_limit, r[ok].limit);
  cube_client_release(loaded);
  CTS_END(r[ok].client);
}
