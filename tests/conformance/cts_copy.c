/* Conformance: cube_client_copy (one buffer's view into another's, on the
 * device, ordered on the stream). Every case but copy_ordered_with_launches
 * uses writes and reads only, so that it runs on every backend, the mock
 * CUDA driver and the null backend included. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cts.h"

/* Random source, poisoned destination, at odd sizes and past the fallback's
 * bounce piece (4 MiB): the destination gets the source, the source keeps
 * it, and a second copy after a write of the source sees the new bytes. */
CUBE_TEST(copy_replaces_contents) {
  CTS_CLIENT(c);
  static const size_t sizes[] = {1, 3, 4096, 1031 * 4 + 1, (2u << 20) + 7, (5u << 20) + 3};
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
    size_t n = sizes[k];
    uint8_t* a = malloc(n);
    uint8_t* b = malloc(n);
    REQUIRE(a && b);
    cube_test_fill_random(a, n, 9100 + k);
    cube_test_fill_random(b, n, 9150 + k);
    cube_handle_t src, dst;
    REQUIRE_OK(cube_client_create_from_slice(c, a, n, &src));
    REQUIRE_OK(cts_poisoned(c, n, &dst));
    CHECK_OK(cube_client_copy(c, src, dst));
    CHECK(cts_read_equals(c, dst, a, n));
    CHECK(cts_read_equals(c, src, a, n));
    CHECK_OK(cube_client_write(c, src, b, n));
    CHECK_OK(cube_client_copy(c, src, dst));
    CHECK(cts_read_equals(c, dst, b, n));
    CHECK_OK(cube_client_sync(c));
    cube_handle_release(src);
    cube_handle_release(dst);
    free(a);
    free(b);
  }
  CTS_END(c);
}

/* Views at odd offsets of one buffer that do not overlap (touching ones
 * included), and packed tensors sharing one buffer: only the destination
 * view changes. The same view as source and destination changes nothing. */
CUBE_TEST(copy_views_of_one_buffer) {
  CTS_CLIENT(c);
  enum { N = 10007, V = 1000 };
  uint8_t whole[N], want[N];
  cube_test_fill_random(whole, sizeof(whole), 9200);
  cube_handle_t b;
  REQUIRE_OK(cube_client_create_from_slice(c, whole, sizeof(whole), &b));
  cube_handle_t v1, v2, v3, v1_again;
  REQUIRE_OK(cube_handle_offset_view(b, 3, N - 3 - V, &v1));         /* [3, 1003) */
  REQUIRE_OK(cube_handle_offset_view(b, 5001, N - 5001 - V, &v2));   /* [5001, 6001) */
  REQUIRE_OK(cube_handle_offset_view(b, 3 + V, N - 3 - 2 * V, &v3)); /* [1003, 2003): touches v1 */
  REQUIRE_OK(cube_handle_offset_view(b, 3, N - 3 - V, &v1_again));
  memcpy(want, whole, sizeof(want));
  CHECK_OK(cube_client_copy(c, v1, v2));
  memcpy(want + 5001, whole + 3, V);
  CHECK(cts_read_equals(c, b, want, sizeof(want)));
  CHECK_OK(cube_client_copy(c, v1, v3));
  memcpy(want + 3 + V, whole + 3, V);
  CHECK(cts_read_equals(c, b, want, sizeof(want)));
  CHECK_OK(cube_client_copy(c, v2, v1)); /* backwards in the buffer */
  CHECK(cts_read_equals(c, b, want, sizeof(want)));
  CHECK_OK(cube_client_copy(c, v1, v1));
  CHECK_OK(cube_client_copy(c, v1, v1_again));
  CHECK_OK(cube_client_copy(c, v1_again, v1));
  CHECK(cts_read_equals(c, b, want, sizeof(want)));
  CHECK(cts_read_equals(c, v3, whole + 3, V));
  CHECK_OK(cube_client_sync(c));

  /* Packed tensors: the first into the third, the second left alone. */
  uint32_t d0[1031], d2[1031];
  float d1[7 * 45];
  cube_test_fill_random(d0, sizeof(d0), 9201);
  cube_test_fill_random(d1, sizeof(d1), 9202);
  cube_test_fill_random(d2, sizeof(d2), 9203);
  const uint64_t s0[1] = {1031}, s1[2] = {7, 45};
  cube_layout_desc_t descs[3];
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 1, s0, 4, &descs[0]));
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 2, s1, 4, &descs[1]));
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 1, s0, 4, &descs[2]));
  const void* data[3] = {d0, d1, d2};
  const size_t sizes[3] = {sizeof(d0), sizeof(d1), sizeof(d2)};
  cube_tensor_t t[3];
  REQUIRE_OK(cube_client_create_tensors_from_slices(c, 3, descs, data, sizes, t));
  CHECK(cube_handle_offset(t[2].handle) > cube_handle_offset(t[0].handle)); /* one buffer */
  CHECK_OK(cube_client_copy(c, t[0].handle, t[2].handle));
  CHECK(cts_read_equals(c, t[2].handle, d0, sizeof(d0)));
  CHECK(cts_read_equals(c, t[0].handle, d0, sizeof(d0)));
  cube_bytes_t* r1 = NULL;
  CHECK_OK(cube_client_read_tensor(c, 1, &t[1], &r1));
  CHECK(r1 && cube_bytes_size(r1) == sizeof(d1) &&
        memcmp(cube_bytes_const_data(r1), d1, sizeof(d1)) == 0);
  cube_bytes_release(r1);
  cube_tensor_release_array(t, 3);
  cube_handle_t hs[5] = {b, v1, v2, v3, v1_again};
  for (int i = 0; i < 5; ++i) cube_handle_release(hs[i]);
  CTS_END(c);
}

/* What is refused at once, naming the call, the argument and the numbers;
 * a refused copy changes nothing and leaves nothing deferred. */
CUBE_TEST(copy_refusals) {
  CTS_CLIENT(c);
  uint8_t a[100], b[100];
  cube_test_fill_random(a, sizeof(a), 9300);
  cube_test_fill_random(b, sizeof(b), 9301);
  cube_handle_t ha, hb, small;
  REQUIRE_OK(cube_client_create_from_slice(c, a, sizeof(a), &ha));
  REQUIRE_OK(cube_client_create_from_slice(c, b, sizeof(b), &hb));
  REQUIRE_OK(cube_client_create_from_slice(c, b, 99, &small));
  CHECK_STATUS(cube_client_copy(c, ha, small), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_copy",
               "views 100 bytes", "views 99", "one size");
  CHECK_STATUS(cube_client_copy(c, small, ha), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_copy",
               "views 99 bytes", "views 100");
  CHECK_STATUS(cube_client_copy(NULL, ha, hb), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_copy");
  CHECK_STATUS(cube_client_copy(c, CUBE_HANDLE_NULL, hb), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_copy: src");
  CHECK_STATUS(cube_client_copy(c, ha, CUBE_HANDLE_NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_copy: dst");
  /* Overlapping views of one buffer: [0, 60) and [40, 100), both ways. */
  cube_handle_t lo, hi;
  REQUIRE_OK(cube_handle_offset_view(ha, 0, 40, &lo));
  REQUIRE_OK(cube_handle_offset_view(ha, 40, 0, &hi));
  CHECK_STATUS(cube_client_copy(c, lo, hi), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_copy",
               "[0, 60)", "[40, 100)", "overlap");
  CHECK_STATUS(cube_client_copy(c, hi, lo), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_copy",
               "[40, 100)", "[0, 60)", "overlap");
  cube_handle_t gone;
  REQUIRE_OK(cts_poisoned(c, sizeof(a), &gone));
  cube_handle_release(gone);
  CHECK_STATUS(cube_client_copy(c, gone, hb), CUBE_STATUS_NOT_FOUND, "cube_client_copy: src");
  CHECK_STATUS(cube_client_copy(c, ha, gone), CUBE_STATUS_NOT_FOUND, "cube_client_copy: dst");
  CHECK(cts_read_equals(c, ha, a, sizeof(a)));
  CHECK(cts_read_equals(c, hb, b, sizeof(b)));
  CHECK_OK(cube_client_sync(c));
  cube_handle_t hs[5] = {ha, hb, small, lo, hi};
  for (int i = 0; i < 5; ++i) cube_handle_release(hs[i]);
  CTS_END(c);
}

/* A handle of device 1, as source or as destination, through a client of
 * device 0. */
CUBE_TEST(copy_handle_of_another_device) {
  CTS_REQUIRE_DEVICES(2);
  CTS_CLIENT(c0);
  cube_client_t* c1 = NULL;
  REQUIRE_OK(cube_client_load(cts_device(1), &c1));
  uint8_t a[64], b[64];
  cube_test_fill_random(a, sizeof(a), 9400);
  cube_test_fill_random(b, sizeof(b), 9401);
  cube_handle_t h0, h1;
  REQUIRE_OK(cube_client_create_from_slice(c0, a, sizeof(a), &h0));
  REQUIRE_OK(cube_client_create_from_slice(c1, b, sizeof(b), &h1));
  CHECK_STATUS(cube_client_copy(c0, h1, h0), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_copy: src");
  CHECK_STATUS(cube_client_copy(c0, h0, h1), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_copy: dst");
  CHECK(cts_read_equals(c0, h0, a, sizeof(a)));
  CHECK(cts_read_equals(c1, h1, b, sizeof(b)));
  cube_handle_release(h0);
  cube_handle_release(h1);
  cube_client_release(c1);
  CTS_END(c0);
}

/* Writes and copies queued back to back behind a held device (nothing can
 * run before the last is queued): each copy sees the writes and copies
 * queued before it, and none of those after it. */
CUBE_TEST(copy_ordered_with_writes) {
  CTS_CLIENT(c);
  enum { N = 1031 * 4 + 1 };
  uint8_t a[N], b[N], d[N];
  cube_test_fill_random(a, sizeof(a), 9500);
  cube_test_fill_random(b, sizeof(b), 9501);
  cube_test_fill_random(d, sizeof(d), 9502);
  cube_handle_t h[5];
  for (int i = 0; i < 5; ++i) REQUIRE_OK(cts_poisoned(c, N, &h[i]));
  int queued = !cube_client_is_blocking(c);
  if (queued) REQUIRE(cts_gate_hold(c));
  CHECK_OK(cube_client_write(c, h[0], a, N)); /* h0 = a */
  CHECK_OK(cube_client_copy(c, h[0], h[1]));  /* h1 = a */
  CHECK_OK(cube_client_write(c, h[0], b, N)); /* h0 = b */
  CHECK_OK(cube_client_copy(c, h[0], h[2]));  /* h2 = b */
  CHECK_OK(cube_client_copy(c, h[1], h[0]));  /* h0 = a */
  CHECK_OK(cube_client_copy(c, h[2], h[3]));  /* h3 = b */
  CHECK_OK(cube_client_copy(c, h[3], h[4]));  /* h4 = b */
  CHECK_OK(cube_client_write(c, h[3], d, N)); /* h3 = d */
  if (queued) cts_gate_open();
  CHECK(cts_read_equals(c, h[0], a, N));
  CHECK(cts_read_equals(c, h[1], a, N));
  CHECK(cts_read_equals(c, h[2], b, N));
  CHECK(cts_read_equals(c, h[3], d, N));
  CHECK(cts_read_equals(c, h[4], b, N));
  CHECK_OK(cube_client_sync(c));
  for (int i = 0; i < 5; ++i) cube_handle_release(h[i]);
  CTS_END(c);
}

/* The queued copy holds both buffers: the source's handle released before
 * the copy ran, and an allocation of the same size written with other bytes
 * meanwhile, the destination still gets the source's bytes. */
CUBE_TEST(copy_keeps_buffers_alive) {
  CTS_CLIENT(c);
  enum { N = 20011 };
  uint8_t* a = malloc(N);
  uint8_t* junk = malloc(N);
  REQUIRE(a && junk);
  cube_test_fill_random(a, N, 9600);
  memset(junk, 0x3C, N);
  cube_handle_t src, dst, other;
  REQUIRE_OK(cube_client_create_from_slice(c, a, N, &src));
  REQUIRE_OK(cts_poisoned(c, N, &dst));
  int queued = !cube_client_is_blocking(c);
  if (queued) REQUIRE(cts_gate_hold(c));
  CHECK_OK(cube_client_copy(c, src, dst));
  cube_handle_release(src);
  REQUIRE_OK(cube_client_empty(c, N, &other));
  CHECK_OK(cube_client_write(c, other, junk, N));
  if (queued) cts_gate_open();
  CHECK(cts_read_equals(c, dst, a, N));
  CHECK(cts_read_equals(c, other, junk, N));
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(dst);
  cube_handle_release(other);
  free(a);
  free(junk);
  CTS_END(c);
}

/* Launches and copies queued back to back: a copy sees what the launch
 * before it wrote, a launch reads what the copy before it wrote, and a copy
 * into a buffer a launch read before does not change what it read. */
CUBE_TEST(copy_ordered_with_launches) {
  CTS_CLIENT(c);
  enum { N = 1031 };
  CTS_KERNEL(add, "add", cts_k_add_u32, 64, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32,
             CUBE_ARG_U32);
  uint32_t a[N], b[N], want[N];
  cube_test_fill_random(a, sizeof(a), 9700);
  cube_test_fill_random(b, sizeof(b), 9701);
  cube_handle_t in, out, x, y, z;
  REQUIRE_OK(cube_client_create_from_slice(c, a, sizeof(a), &in));
  REQUIRE_OK(cts_poisoned(c, sizeof(a), &out));
  REQUIRE_OK(cts_poisoned(c, sizeof(a), &x));
  REQUIRE_OK(cts_poisoned(c, sizeof(a), &y));
  REQUIRE_OK(cts_poisoned(c, sizeof(a), &z));
  cube_count_t count = cube_count_static((N + 63) / 64, 1, 1);
  cube_arg_t l1[4] = {cube_arg_buffer(in), cube_arg_buffer(out), cube_arg_u32(1), cube_arg_u32(N)};
  cube_arg_t l2[4] = {cube_arg_buffer(x), cube_arg_buffer(y), cube_arg_u32(2), cube_arg_u32(N)};
  cube_arg_t l3[4] = {cube_arg_buffer(in), cube_arg_buffer(z), cube_arg_u32(3), cube_arg_u32(N)};
  CHECK_OK(cube_client_launch(c, add, count, 4, l1)); /* out = a + 1 */
  CHECK_OK(cube_client_copy(c, out, x));             /* x = a + 1 */
  CHECK_OK(cube_client_launch(c, add, count, 4, l2)); /* y = a + 3 */
  CHECK_OK(cube_client_copy(c, in, out));            /* out = a */
  CHECK_OK(cube_client_write(c, in, b, sizeof(b)));  /* in = b */
  CHECK_OK(cube_client_launch(c, add, count, 4, l3)); /* z = b + 3 */
  CHECK_OK(cube_client_copy(c, z, in));              /* in = b + 3 */
  for (int i = 0; i < N; ++i) want[i] = a[i] + 1;
  CHECK(cts_read_equals(c, x, want, sizeof(want)));
  for (int i = 0; i < N; ++i) want[i] = a[i] + 3;
  CHECK(cts_read_equals(c, y, want, sizeof(want)));
  CHECK(cts_read_equals(c, out, a, sizeof(a)));
  for (int i = 0; i < N; ++i) want[i] = b[i] + 3;
  CHECK(cts_read_equals(c, z, want, sizeof(want)));
  CHECK(cts_read_equals(c, in, want, sizeof(want)));
  CHECK_OK(cube_client_sync(c));
  cube_handle_t hs[5] = {in, out, x, y, z};
  for (int i = 0; i < 5; ++i) cube_handle_release(hs[i]);
  cube_kernel_release(add);
  CTS_END(c);
}

typedef struct copy_thread {
  cube_device_id_t device;
  cube_handle_t shared; /* made on the main thread's stream */
  const uint8_t* shared_data;
  uint64_t seed;
  int failures;
} copy_thread_t;

enum { COPY_THREAD_N = 3001 };

/* Each thread is its own stream: it writes its own source, copies it into
 * its own destination and reads it back, and copies the buffer every thread
 * shares (made on another stream) into a second destination. */
static void* copy_thread_main(void* p) {
  copy_thread_t* w = p;
  cube_client_t* c = NULL;
  if (cube_status_consume(cube_client_load(w->device, &c))) {
    w->failures++;
    return NULL;
  }
  uint8_t data[COPY_THREAD_N];
  cube_handle_t src = CUBE_HANDLE_NULL, dst = CUBE_HANDLE_NULL, mine = CUBE_HANDLE_NULL;
  if (cube_status_consume(cube_client_empty(c, COPY_THREAD_N, &src)) ||
      cube_status_consume(cube_client_empty(c, COPY_THREAD_N, &dst)) ||
      cube_status_consume(cube_client_empty(c, COPY_THREAD_N, &mine)))
    w->failures++;
  for (int i = 0; i < 30 && !w->failures; ++i) {
    cube_test_fill_random(data, sizeof(data), w->seed * 1000 + (uint64_t)i);
    if (cube_status_consume(cube_client_write(c, src, data, sizeof(data))) ||
        cube_status_consume(cube_client_copy(c, src, dst)) ||
        cube_status_consume(cube_client_copy(c, w->shared, mine)))
      w->failures++;
    if (!cts_read_equals(c, dst, data, sizeof(data))) w->failures++;
    if (!cts_read_equals(c, mine, w->shared_data, COPY_THREAD_N)) w->failures++;
  }
  if (cube_status_consume(cube_client_sync(c))) w->failures++;
  cube_handle_release(src);
  cube_handle_release(dst);
  cube_handle_release(mine);
  cube_client_release(c);
  return NULL;
}

CUBE_TEST(copy_several_threads_own_streams) {
  CTS_CLIENT(c);
  uint8_t shared_data[COPY_THREAD_N];
  cube_test_fill_random(shared_data, sizeof(shared_data), 9800);
  cube_handle_t shared;
  REQUIRE_OK(cube_client_create_from_slice(c, shared_data, sizeof(shared_data), &shared));
  enum { T = 4 };
  pthread_t th[T];
  copy_thread_t w[T];
  for (int i = 0; i < T; ++i) {
    w[i] = (copy_thread_t){cts_device(0), shared, shared_data, 9810 + (uint64_t)i, 0};
    REQUIRE(pthread_create(&th[i], NULL, copy_thread_main, &w[i]) == 0);
  }
  for (int i = 0; i < T; ++i) {
    pthread_join(th[i], NULL);
    CHECK_EQ_U64(w[i].failures, 0);
  }
  CHECK(cts_read_equals(c, shared, shared_data, sizeof(shared_data)));
  cube_handle_release(shared);
  CTS_END(c);
}
