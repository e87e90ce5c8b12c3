/* Reading memory: read, read_async and futures, read_tensor, resources,
 * to_client. */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cts.h"

CUBE_TEST(read_many_handles) {
  CTS_CLIENT(c);
  const size_t sizes[3] = {1, 3, 1000003};
  uint8_t* data[3];
  cube_handle_t h[3];
  for (int i = 0; i < 3; ++i) {
    data[i] = malloc(sizes[i]);
    REQUIRE(data[i]);
    cube_test_fill_random(data[i], sizes[i], 2000 + i);
    REQUIRE_OK(cube_client_create_from_slice(c, data[i], sizes[i], &h[i]));
  }
  cube_bytes_t* out[3] = {NULL, NULL, NULL};
  REQUIRE_OK(cube_client_read(c, 3, h, out));
  for (int i = 0; i < 3; ++i) {
    CHECK(out[i] && cube_bytes_size(out[i]) == sizes[i] &&
          memcmp(cube_bytes_const_data(out[i]), data[i], sizes[i]) == 0);
  }
  /* The result is the caller's: writing it does not change the device copy. */
  if (out[2]) memset(cube_bytes_data(out[2]), 0, sizes[2]);
  CHECK(cts_read_equals(c, h[2], data[2], sizes[2]));
  cube_bytes_release_array(out, 3);
  /* The same handle twice in one read. */
  cube_handle_t twice[2] = {h[1], h[1]};
  cube_bytes_t* out2[2] = {NULL, NULL};
  CHECK_OK(cube_client_read(c, 2, twice, out2));
  for (int i = 0; i < 2; ++i)
    CHECK(out2[i] && cube_bytes_size(out2[i]) == 3 &&
          memcmp(cube_bytes_const_data(out2[i]), data[1], 3) == 0);
  cube_bytes_release_array(out2, 2);
  for (int i = 0; i < 3; ++i) {
    cube_handle_release(h[i]);
    free(data[i]);
  }
  CTS_END(c);
}

CUBE_TEST(read_offset_view) {
  CTS_CLIENT(c);
  uint8_t data[1001];
  cube_test_fill_random(data, sizeof(data), 2100);
  cube_handle_t h, v, v2;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  REQUIRE_OK(cube_handle_offset_view(h, 5, 7, &v));
  CHECK_EQ_U64(cube_handle_size(v), 1001 - 12);
  CHECK_EQ_U64(cube_handle_offset(v), cube_handle_offset(h) + 5);
  CHECK_EQ_U64(cube_handle_buffer_size(v), cube_handle_buffer_size(h));
  CHECK(cts_read_equals(c, v, data + 5, 1001 - 12));
  /* Offsets add up. */
  REQUIRE_OK(cube_handle_offset_view(v, 10, 1, &v2));
  CHECK_EQ_U64(cube_handle_size(v2), 1001 - 23);
  CHECK(cts_read_equals(c, v2, data + 15, 1001 - 23));
  /* A view that would be empty is refused. */
  cube_handle_t bad = CUBE_HANDLE_NULL;
  CHECK_STATUS(cube_handle_offset_view(h, 500, 501, &bad), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_handle_offset_view", "500", "501");
  CHECK_STATUS(cube_handle_offset_view(v, 989, 0, &bad), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_handle_offset_view");
  CHECK_STATUS(cube_handle_offset_view(h, UINT64_MAX, 2, &bad), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_handle_offset_view");
  CHECK(cube_handle_is_null(bad));
  /* The view keeps the buffer alive without the original handle. */
  cube_handle_release(h);
  CHECK(cts_read_equals(c, v2, data + 15, 1001 - 23));
  cube_handle_release(v);
  cube_handle_release(v2);
  CTS_END(c);
}

/* read_into: the caller's memory, sizes around the GPU ring's direct limit
 * (64 KiB) and its chunk (2 MiB), several chunks (spread over threads), an
 * offset view; guard bytes around the destination stay poisoned. */
CUBE_TEST(read_into_caller_memory) {
  CTS_CLIENT(c);
  const size_t sizes[] = {1, 7, 65536, 65537, (2u << 20) - 1, (2u << 20) + 3, (9u << 20) + 5};
  const size_t guard = 64;
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
    size_t n = sizes[k];
    uint8_t* data = malloc(n);
    uint8_t* out = malloc(n + 2 * guard);
    REQUIRE(data && out);
    cube_test_fill_random(data, n, 2150 + k);
    memset(out, CTS_POISON, n + 2 * guard);
    cube_handle_t h;
    REQUIRE_OK(cube_client_create_from_slice(c, data, n, &h));
    CHECK_OK(cube_client_read_into(c, h, out + guard, n));
    if (memcmp(out + guard, data, n) != 0) {
      fprintf(stderr, "read_into of %zu bytes: content differs\n", n);
      CHECK(!"read_into content");
    }
    for (size_t i = 0; i < guard; ++i) CHECK(out[i] == CTS_POISON && out[guard + n + i] == CTS_POISON);
    /* A view: its bytes only. */
    if (n > 12) {
      cube_handle_t v;
      REQUIRE_OK(cube_handle_offset_view(h, 5, 7, &v));
      memset(out, CTS_POISON, n + 2 * guard);
      CHECK_OK(cube_client_read_into(c, v, out + guard, n - 12));
      CHECK(memcmp(out + guard, data + 5, n - 12) == 0);
      CHECK(out[guard + n - 12] == CTS_POISON && out[guard - 1] == CTS_POISON);
      cube_handle_release(v);
    }
    cube_handle_release(h);
    free(data);
    free(out);
  }
  /* Bad input: the size must be the view's, dst present, the handle live. */
  uint8_t small[16];
  cube_test_fill_random(small, sizeof(small), 2160);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, small, sizeof(small), &h));
  uint8_t buf[32];
  CHECK_STATUS(cube_client_read_into(c, h, buf, 15), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_read_into", "16", "15");
  CHECK_STATUS(cube_client_read_into(c, h, buf, 32), CUBE_STATUS_INVALID_ARGUMENT, "16", "32");
  CHECK_STATUS(cube_client_read_into(c, h, NULL, 16), CUBE_STATUS_INVALID_ARGUMENT, "dst");
  CHECK_STATUS(cube_client_read_into(NULL, h, buf, 16), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_read_into");
  cube_handle_release(h);
  CHECK_STATUS(cube_client_read_into(c, h, buf, 16), CUBE_STATUS_NOT_FOUND,
               "cube_client_read_into", "released");
  CHECK_STATUS(cube_client_read_into(c, CUBE_HANDLE_NULL, buf, 16), CUBE_STATUS_INVALID_ARGUMENT,
               "null handle");
  CTS_END(c);
}

/* Several threads read into their own memory from one client at once. */
typedef struct {
  cube_client_t* c;
  cube_handle_t h;
  const uint8_t* expect;
  size_t n;
  int bad;
} cts_read_into_arg_t;

static void* cts_read_into_thread(void* p) {
  cts_read_into_arg_t* a = p;
  uint8_t* out = malloc(a->n);
  if (!out) {
    a->bad = 1;
    return NULL;
  }
  for (int r = 0; r < 4; ++r) {
    memset(out, CTS_POISON, a->n);
    cube_status_t s = cube_client_read_into(a->c, a->h, out, a->n);
    if (s || memcmp(out, a->expect, a->n) != 0) a->bad++;
    cube_status_free(s);
  }
  free(out);
  return NULL;
}

CUBE_TEST(read_into_threads) {
  CTS_CLIENT(c);
  enum { T = 4 };
  const size_t n = (5u << 20) + 17;
  uint8_t* data[T];
  cube_handle_t h[T];
  pthread_t th[T];
  cts_read_into_arg_t args[T];
  for (int i = 0; i < T; ++i) {
    data[i] = malloc(n);
    REQUIRE(data[i]);
    cube_test_fill_random(data[i], n, 2170 + i);
    REQUIRE_OK(cube_client_create_from_slice(c, data[i], n, &h[i]));
    args[i] = (cts_read_into_arg_t){c, h[i], data[i], n, 0};
  }
  for (int i = 0; i < T; ++i) REQUIRE(pthread_create(&th[i], NULL, cts_read_into_thread, &args[i]) == 0);
  for (int i = 0; i < T; ++i) {
    pthread_join(th[i], NULL);
    CHECK_EQ_U64(args[i].bad, 0);
  }
  for (int i = 0; i < T; ++i) {
    cube_handle_release(h[i]);
    free(data[i]);
  }
  CTS_END(c);
}

CUBE_TEST(read_async_poll_then_wait) {
  CTS_CLIENT(c);
  const size_t n = 1000003;
  uint8_t* data = malloc(n);
  REQUIRE(data);
  cube_test_fill_random(data, n, 2200);
  cube_handle_t h[2];
  REQUIRE_OK(cube_client_create_from_slice(c, data, n, &h[0]));
  REQUIRE_OK(cube_client_create_from_slice(c, data + 10, 17, &h[1]));
  cube_future_t* f = NULL;
  REQUIRE_OK(cube_client_read_async(c, 2, h, &f));
  CHECK_EQ_U64(cube_future_count(f), 2);
  while (!cube_future_is_ready(f)) sched_yield();
  cube_bytes_t* out[2] = {NULL, NULL};
  CHECK_OK(cube_future_wait(f, 0, out)); /* ready: a zero timeout suffices */
  CHECK(out[0] && cube_bytes_size(out[0]) == n && memcmp(cube_bytes_const_data(out[0]), data, n) == 0);
  CHECK(out[1] && cube_bytes_size(out[1]) == 17 &&
        memcmp(cube_bytes_const_data(out[1]), data + 10, 17) == 0);
  cube_bytes_t* again[2] = {NULL, NULL};
  CHECK_STATUS(cube_future_wait(f, UINT64_MAX, again), CUBE_STATUS_FAILED_PRECONDITION, "cube_future_wait");
  CHECK(again[0] == NULL && again[1] == NULL);
  cube_future_release(f);
  cube_bytes_release_array(out, 2);
  cube_handle_release_array(h, 2);
  free(data);
  CTS_END(c);
}

CUBE_TEST(read_async_deadline_behind_slow_kernel) {
  CTS_CLIENT(c);
  uint32_t data[64];
  cube_test_fill_random(data, sizeof(data), 2300);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  cube_future_t* f = NULL;
  if (!cube_client_is_blocking(c)) {
    REQUIRE(cts_gate_hold(c));
    CHECK_OK(cube_client_read_async(c, 1, &h, &f));
    if (f) {
      /* The gate cannot open on its own: the read waits behind it. */
      CHECK(!cube_future_is_ready(f));
      cube_bytes_t* out = NULL;
      CHECK_STATUS(cube_future_wait(f, 0, &out), CUBE_STATUS_DEADLINE_EXCEEDED, "cube_future_wait");
      CHECK(out == NULL);
      CHECK_STATUS(cube_future_wait(f, 1000000, &out), CUBE_STATUS_DEADLINE_EXCEEDED, "cube_future_wait");
    }
    cts_gate_open();
  } else {
    /* Inline queue: the read ran during the call. */
    CHECK_OK(cube_client_read_async(c, 1, &h, &f));
    CHECK(f && cube_future_is_ready(f));
  }
  if (f) {
    cube_bytes_t* out = NULL;
    CHECK_OK(cube_future_wait(f, UINT64_MAX, &out)); /* still usable after a timeout */
    CHECK(out && cube_bytes_size(out) == sizeof(data) &&
          memcmp(cube_bytes_const_data(out), data, sizeof(data)) == 0);
    CHECK(cube_future_is_ready(f));
    cube_bytes_release(out);
    cube_future_release(f);
  }
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(h);
  CTS_END(c);
}

CUBE_TEST(read_async_release_unwaited) {
  /* A future released before its result arrives discards the result. */
  CTS_CLIENT(c);
  uint8_t data[4096];
  cube_test_fill_random(data, sizeof(data), 2350);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  for (int i = 0; i < 20; ++i) {
    cube_future_t* f = NULL;
    CHECK_OK(cube_client_read_async(c, 1, &h, &f));
    cube_future_release(f);
  }
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(h);
  /* The memory went back to the pool: nothing in use on the stream. */
  cube_memory_usage_t u;
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.number_allocs, 0);
  CHECK_EQ_U64(u.bytes_in_use, 0);
  CTS_END(c);
}

/* A read that returned holds nothing any more: releasing the last handle
 * right after it frees the slice (header: memory returns to its pool when
 * the last handle and the last in-flight use are gone). Repeated, because a
 * library that drops the read's binding after completing the future shows it
 * only now and then. */
CUBE_TEST(read_returned_holds_no_binding) {
  CTS_CLIENT(c);
  uint8_t data[256];
  cube_test_fill_random(data, sizeof(data), 2360);
  int late = 0;
  for (int i = 0; i < 300; ++i) {
    cube_handle_t h;
    REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
    cube_bytes_t* b = NULL;
    REQUIRE_OK(cube_client_read_one(c, h, &b));
    cube_bytes_release(b);
    cube_handle_release(h);
    cube_memory_usage_t u;
    REQUIRE_OK(cube_client_memory_usage(c, &u));
    late += u.number_allocs != 0;
  }
  if (late) fprintf(stderr, "%d of 300 reads still held their memory after returning\n", late);
  CHECK(late == 0);
  CTS_END(c);
}

CUBE_TEST(read_one_and_sync_async) {
  CTS_CLIENT(c);
  uint8_t data[3] = {0, 1, 2};
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, data, 3, &h));
  cube_bytes_t* b = NULL;
  CHECK_OK(cube_client_read_one(c, h, &b));
  CHECK(b && cube_bytes_size(b) == 3 && memcmp(cube_bytes_const_data(b), data, 3) == 0);
  cube_bytes_release(b);
  cube_future_t* f = NULL;
  REQUIRE_OK(cube_client_sync_async(c, &f));
  CHECK_EQ_U64(cube_future_count(f), 0);
  CHECK_OK(cube_future_wait(f, UINT64_MAX, NULL));
  CHECK(cube_future_is_ready(f));
  CHECK_STATUS(cube_future_wait(f, UINT64_MAX, NULL), CUBE_STATUS_FAILED_PRECONDITION, "cube_future_wait");
  cube_future_release(f);
  cube_handle_release(h);
  CTS_END(c);
}

/* CubeCL's example shapes (docs/cubecl.md, "Layouts"): f32 [3,5], f32 [5], and 100 + 600
 * bytes packed. */
CUBE_TEST(read_tensor_reference_shapes) {
  CTS_CLIENT(c);
  float a[15], b[5];
  cube_test_fill_random(a, sizeof(a), 2400);
  cube_test_fill_random(b, sizeof(b), 2401);
  const uint64_t sa[2] = {3, 5}, sb[1] = {5};
  cube_tensor_t t[2];
  REQUIRE_OK(cube_client_create_tensor_from_slice(c, a, sizeof(a), 2, sa, 4, &t[0]));
  REQUIRE_OK(cube_client_create_tensor_from_slice(c, b, sizeof(b), 1, sb, 4, &t[1]));
  /* Contiguous: 5; pitched (CUDA): the 20-byte row padded to 32 bytes. */
  const cube_device_properties_t* props = cube_client_properties(c);
  CHECK_EQ_U64(t[0].strides[0], props->layout_policy == CUBE_LAYOUT_POLICY_PITCHED ? 8 : 5);
  CHECK_EQ_U64(t[0].strides[1], 1);
  CHECK_EQ_U64(t[1].strides[0], 1);
  cube_bytes_t* out[2] = {NULL, NULL};
  CHECK_OK(cube_client_read_tensor(c, 2, t, out));
  CHECK(out[0] && cube_bytes_size(out[0]) == sizeof(a) &&
        memcmp(cube_bytes_const_data(out[0]), a, sizeof(a)) == 0);
  CHECK(out[1] && cube_bytes_size(out[1]) == sizeof(b) &&
        memcmp(cube_bytes_const_data(out[1]), b, sizeof(b)) == 0);
  cube_bytes_release_array(out, 2);
  cube_tensor_release_array(t, 2);

  uint8_t d100[100], d600[600];
  cube_test_fill_random(d100, 100, 2402);
  cube_test_fill_random(d600, 600, 2403);
  cube_layout_desc_t d[2];
  const uint64_t s100[1] = {100}, s600[1] = {600};
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 1, s100, 1, &d[0]));
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 1, s600, 1, &d[1]));
  const void* data[2] = {d100, d600};
  const size_t sizes[2] = {100, 600};
  cube_tensor_t p[2];
  REQUIRE_OK(cube_client_create_tensors_from_slices(c, 2, d, data, sizes, p));
  uint64_t align = cube_client_properties(c)->memory.alignment;
  uint64_t second = (100 + align - 1) / align * align;
  CHECK_EQ_U64(cube_handle_offset(p[1].handle) - cube_handle_offset(p[0].handle), second);
  CHECK_EQ_U64(cube_handle_buffer_size(p[0].handle), second + (600 + align - 1) / align * align);
  out[0] = out[1] = NULL;
  CHECK_OK(cube_client_read_tensor(c, 2, p, out));
  CHECK(out[0] && cube_bytes_size(out[0]) == 100 && memcmp(cube_bytes_const_data(out[0]), d100, 100) == 0);
  CHECK(out[1] && cube_bytes_size(out[1]) == 600 && memcmp(cube_bytes_const_data(out[1]), d600, 600) == 0);
  cube_bytes_release_array(out, 2);
  cube_tensor_release_array(p, 2);
  CTS_END(c);
}

CUBE_TEST(read_tensor_async_batch) {
  CTS_CLIENT(c);
  const uint64_t s0[3] = {4, 1, 9}, s1[2] = {1000, 3};
  uint16_t a[36];
  uint64_t b[3000];
  cube_test_fill_random(a, sizeof(a), 2500);
  cube_test_fill_random(b, sizeof(b), 2501);
  cube_tensor_t t[2];
  REQUIRE_OK(cube_client_create_tensor_from_slice(c, a, sizeof(a), 3, s0, 2, &t[0]));
  REQUIRE_OK(cube_client_create_tensor_from_slice(c, b, sizeof(b), 2, s1, 8, &t[1]));
  cube_future_t* f = NULL;
  REQUIRE_OK(cube_client_read_tensor_async(c, 2, t, &f));
  CHECK_EQ_U64(cube_future_count(f), 2);
  cube_bytes_t* out[2] = {NULL, NULL};
  CHECK_OK(cube_future_wait(f, UINT64_MAX, out));
  CHECK(out[0] && cube_bytes_size(out[0]) == sizeof(a) &&
        memcmp(cube_bytes_const_data(out[0]), a, sizeof(a)) == 0);
  CHECK(out[1] && cube_bytes_size(out[1]) == sizeof(b) &&
        memcmp(cube_bytes_const_data(out[1]), b, sizeof(b)) == 0);
  cube_future_release(f);
  cube_bytes_release_array(out, 2);
  cube_tensor_release_array(t, 2);
  CTS_END(c);
}

CUBE_TEST(get_resource_pointer_and_lifetime) {
  CTS_CLIENT(c);
  if (cts_backend()->backend != CUBE_BACKEND_CPU) {
    CTS_END(c); /* nothing left behind for LSan */
    CUBE_SKIP("host pointers are a CPU property");
  }
  uint8_t data[5000];
  cube_test_fill_random(data, sizeof(data), 2600);
  cube_handle_t h, v;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  REQUIRE_OK(cube_handle_offset_view(h, 100, 0, &v));
  CHECK_OK(cube_client_sync(c));
  cube_resource_t* r = NULL;
  cube_resource_t* rv = NULL;
  REQUIRE_OK(cube_client_get_resource(c, h, &r));
  REQUIRE_OK(cube_client_get_resource(c, v, &rv));
  CHECK_EQ_U64(cube_resource_size(r), sizeof(data));
  CHECK_EQ_U64(cube_resource_size(rv), sizeof(data) - 100);
  CHECK(cube_resource_ptr(r) != NULL);
  CHECK((uint8_t*)cube_resource_ptr(rv) == (uint8_t*)cube_resource_ptr(r) + 100);
  CHECK(memcmp(cube_resource_ptr(r), data, sizeof(data)) == 0);
  /* Writes through the pointer are what the device holds. */
  ((uint8_t*)cube_resource_ptr(r))[7] ^= 0xFF;
  data[7] ^= 0xFF;
  CHECK(cts_read_equals(c, h, data, sizeof(data)));
  /* The resource keeps the memory alive: the slice must not be handed out
   * again while it lives. */
  cube_handle_release(h);
  cube_handle_release(v);
  cube_resource_release(rv);
  uint8_t other[5000];
  memset(other, 0x5A, sizeof(other));
  cube_handle_t h2[4];
  for (int i = 0; i < 4; ++i) REQUIRE_OK(cube_client_create_from_slice(c, other, sizeof(other), &h2[i]));
  CHECK_OK(cube_client_sync(c));
  CHECK(memcmp(cube_resource_ptr(r), data, sizeof(data)) == 0);
  for (int i = 0; i < 4; ++i) CHECK(cts_read_equals(c, h2[i], other, sizeof(other)));
  cube_memory_usage_t u;
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.number_allocs, 5); /* four handles + the resource's slice */
  cube_resource_release(r);
  cube_handle_release_array(h2, 4);
  CHECK_OK(cube_client_sync(c));
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.number_allocs, 0);
  CTS_END(c);
}

static void cts_to_client_case(cube_client_t* src, cube_client_t* dst) {
  const size_t n = 1000003;
  uint8_t* data = malloc(n);
  REQUIRE(data);
  cube_test_fill_random(data, n, 2700);
  cube_handle_t h, out = CUBE_HANDLE_NULL;
  REQUIRE_OK(cube_client_create_from_slice(src, data, n, &h));
  CHECK_OK(cube_client_to_client(src, h, dst, &out));
  CHECK(out.id != h.id);
  CHECK_EQ_U64(cube_handle_size(out), n);
  cube_device_id_t dev = {CUBE_BACKEND_NONE, 99};
  CHECK_OK(cube_handle_device(out, &dev));
  CHECK(dev.backend == cube_client_device(dst).backend && dev.index == cube_client_device(dst).index);
  CHECK(cts_read_equals(dst, out, data, n));
  /* Independent copies. */
  cube_handle_release(h);
  CHECK(cts_read_equals(dst, out, data, n));
  cube_handle_release(out);

  float t[6 * 7];
  cube_test_fill_random(t, sizeof(t), 2701);
  const uint64_t shape[2] = {6, 7};
  cube_tensor_t ts, td;
  REQUIRE_OK(cube_client_create_tensor_from_slice(src, t, sizeof(t), 2, shape, 4, &ts));
  memset(&td, 0, sizeof(td));
  CHECK_OK(cube_client_to_client_tensor(src, &ts, dst, &td));
  CHECK_EQ_U64(td.rank, 2);
  CHECK_EQ_U64(td.shape[0], 6);
  CHECK_EQ_U64(td.shape[1], 7);
  CHECK_EQ_U64(td.elem_size, 4);
  CHECK_OK(cube_handle_device(td.handle, &dev));
  CHECK(dev.index == cube_client_device(dst).index);
  cube_bytes_t* b = NULL;
  CHECK_OK(cube_client_read_tensor(dst, 1, &td, &b));
  CHECK(b && cube_bytes_size(b) == sizeof(t) && memcmp(cube_bytes_const_data(b), t, sizeof(t)) == 0);
  cube_bytes_release(b);
  cube_tensor_release(&ts);
  cube_tensor_release(&td);
  free(data);
}

CUBE_TEST(to_client_same_device) {
  CTS_CLIENT(c);
  cube_client_t* c2 = NULL;
  REQUIRE_OK(cube_client_load(cts_device(0), &c2));
  cts_to_client_case(c, c2);
  cts_to_client_case(c, c);
  cube_client_release(c2);
  CTS_END(c);
}

CUBE_TEST(to_client_two_devices) {
  setenv("CUBE_CPU_DEVICES", "2", 1);
  CTS_REQUIRE_DEVICES(2);
  CTS_CLIENT(c);
  cube_client_t* c1 = NULL;
  REQUIRE_OK(cube_client_load(cts_device(1), &c1));
  CHECK(cube_client_device(c1).index == 1);
  cts_to_client_case(c, c1);
  cts_to_client_case(c1, c);
  cube_client_release(c1);
  CTS_END(c);
}
