/* Conformance: cube_client_write and cube_client_write_tensor (new contents
 * for existing buffers, ordered on the stream). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cts.h"

/* Random contents, then two writes of other random contents: each read sees
 * the last write, at sizes around the staging and page boundaries. */
CUBE_TEST(write_replaces_contents) {
  CTS_CLIENT(c);
  static const size_t sizes[] = {1, 3, 4096, 4097, (2u << 20) + 7};
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
    size_t n = sizes[k];
    uint8_t* a = malloc(n);
    uint8_t* b = malloc(n);
    REQUIRE(a && b);
    cube_test_fill_random(a, n, 7100 + k);
    cube_handle_t h;
    REQUIRE_OK(cube_client_create_from_slice(c, a, n, &h));
    for (int round = 0; round < 2; ++round) {
      cube_test_fill_random(b, n, 7200 + 10 * k + (uint64_t)round);
      CHECK_OK(cube_client_write(c, h, b, n));
      CHECK(cts_read_equals(c, h, b, n));
    }
    cube_handle_release(h);
    free(a);
    free(b);
  }
  CTS_END(c);
}

/* The source is copied before the call returns: with the device held (so
 * the write cannot have run yet), the caller scribbles over its buffer, and
 * the read still sees what was written. */
CUBE_TEST(write_source_reusable_at_once) {
  CTS_CLIENT(c);
  const size_t n = 10007;
  uint8_t* a = malloc(n);
  uint8_t* b = malloc(n);
  uint8_t* keep = malloc(n);
  REQUIRE(a && b && keep);
  cube_test_fill_random(a, n, 7300);
  cube_test_fill_random(b, n, 7301);
  memcpy(keep, b, n);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, a, n, &h));
  int queued = !cube_client_is_blocking(c);
  if (queued) REQUIRE(cts_gate_hold(c));
  CHECK_OK(cube_client_write(c, h, b, n));
  memset(b, 0x5A, n);
  if (queued) cts_gate_open();
  CHECK(cts_read_equals(c, h, keep, n));
  cube_handle_release(h);
  free(a);
  free(b);
  free(keep);
  CTS_END(c);
}

/* Writes and launches queued back to back, nothing synchronised in between:
 * each launch sees the contents written before it, a write after a launch
 * that writes the same buffer wins, and a launch after that write reads it. */
CUBE_TEST(write_ordered_with_launches) {
  CTS_CLIENT(c);
  enum { N = 1031 };
  CTS_KERNEL(add, "add", cts_k_add_u32, 64, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32,
             CUBE_ARG_U32);
  uint32_t a[N], b[N], d[N], want[N];
  cube_test_fill_random(a, sizeof(a), 7400);
  cube_test_fill_random(b, sizeof(b), 7401);
  cube_test_fill_random(d, sizeof(d), 7402);
  cube_handle_t in, out1, out2, x, y;
  REQUIRE_OK(cube_client_create_from_slice(c, a, sizeof(a), &in));
  REQUIRE_OK(cts_poisoned(c, sizeof(a), &out1));
  REQUIRE_OK(cts_poisoned(c, sizeof(a), &out2));
  REQUIRE_OK(cts_poisoned(c, sizeof(a), &x));
  REQUIRE_OK(cts_poisoned(c, sizeof(a), &y));
  cube_count_t count = cube_count_static((N + 63) / 64, 1, 1);
  cube_arg_t l1[4] = {cube_arg_buffer(in), cube_arg_buffer(out1), cube_arg_u32(1), cube_arg_u32(N)};
  cube_arg_t l2[4] = {cube_arg_buffer(in), cube_arg_buffer(out2), cube_arg_u32(2), cube_arg_u32(N)};
  cube_arg_t l3[4] = {cube_arg_buffer(in), cube_arg_buffer(x), cube_arg_u32(5), cube_arg_u32(N)};
  cube_arg_t l4[4] = {cube_arg_buffer(x), cube_arg_buffer(y), cube_arg_u32(1), cube_arg_u32(N)};
  CHECK_OK(cube_client_launch(c, add, count, 4, l1)); /* out1 = a + 1 */
  CHECK_OK(cube_client_write(c, in, b, sizeof(b)));  /* in = b */
  CHECK_OK(cube_client_launch(c, add, count, 4, l2)); /* out2 = b + 2 */
  CHECK_OK(cube_client_launch(c, add, count, 4, l3)); /* x = b + 5 */
  CHECK_OK(cube_client_write(c, x, d, sizeof(d)));   /* x = d */
  CHECK_OK(cube_client_launch(c, add, count, 4, l4)); /* y = d + 1 */
  for (int i = 0; i < N; ++i) want[i] = a[i] + 1;
  CHECK(cts_read_equals(c, out1, want, sizeof(want)));
  for (int i = 0; i < N; ++i) want[i] = b[i] + 2;
  CHECK(cts_read_equals(c, out2, want, sizeof(want)));
  CHECK(cts_read_equals(c, x, d, sizeof(d)));
  for (int i = 0; i < N; ++i) want[i] = d[i] + 1;
  CHECK(cts_read_equals(c, y, want, sizeof(want)));
  CHECK(cts_read_equals(c, in, b, sizeof(b)));
  CHECK_OK(cube_client_sync(c));
  cube_handle_t hs[5] = {in, out1, out2, x, y};
  for (int i = 0; i < 5; ++i) cube_handle_release(hs[i]);
  cube_kernel_release(add);
  CTS_END(c);
}

/* A tensor of an odd shape (pitched on a pitched device): dense data goes
 * into its layout, and reading the tensor gives the dense data back. */
CUBE_TEST(write_tensor_into_layout) {
  CTS_CLIENT(c);
  const uint64_t shape[2] = {5, 37};
  float dense[5 * 37], first[5 * 37];
  cube_test_fill_random(first, sizeof(first), 7500);
  cube_test_fill_random(dense, sizeof(dense), 7501);
  cube_tensor_t t;
  REQUIRE_OK(cube_client_create_tensor_from_slice(c, first, sizeof(first), 2, shape, 4, &t));
  CHECK_OK(cube_client_write_tensor(c, &t, dense, sizeof(dense)));
  cube_bytes_t* b = NULL;
  CHECK_OK(cube_client_read_tensor(c, 1, &t, &b));
  CHECK(b && cube_bytes_size(b) == sizeof(dense) &&
        memcmp(cube_bytes_const_data(b), dense, sizeof(dense)) == 0);
  cube_bytes_release(b);
  CHECK_STATUS(cube_client_write_tensor(c, &t, dense, sizeof(dense) - 4),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_client_write_tensor", "185 elements",
               "740 bytes, size is 736");
  CHECK_STATUS(cube_client_write_tensor(c, NULL, dense, sizeof(dense)),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_client_write_tensor", "tensor is NULL");
  cube_handle_release(t.handle);
  CTS_END(c);
}

/* What is refused at once, and that a refused write changes nothing. */
CUBE_TEST(write_refusals) {
  CTS_CLIENT(c);
  uint8_t a[100], b[100];
  cube_test_fill_random(a, sizeof(a), 7600);
  cube_test_fill_random(b, sizeof(b), 7601);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, a, sizeof(a), &h));
  CHECK_STATUS(cube_client_write(c, h, b, 99), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_write",
               "views 100 bytes, size is 99");
  CHECK_STATUS(cube_client_write(c, h, b, 101), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_write",
               "size is 101");
  CHECK_STATUS(cube_client_write(c, h, NULL, 100), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_write", "data is NULL");
  CHECK_STATUS(cube_client_write(NULL, h, b, 100), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_write");
  CHECK_STATUS(cube_client_write(c, CUBE_HANDLE_NULL, b, 100), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_write");
  CHECK(cts_read_equals(c, h, a, sizeof(a)));
  cube_handle_t gone = h;
  cube_handle_release(h);
  CHECK_STATUS(cube_client_write(c, gone, b, 100), CUBE_STATUS_NOT_FOUND, "cube_client_write");
  CHECK_OK(cube_client_sync(c));
  CTS_END(c);
}

/* A handle of device 1 written through a client of device 0 is refused. */
CUBE_TEST(write_handle_of_another_device) {
  CTS_REQUIRE_DEVICES(2);
  CTS_CLIENT(c0);
  cube_client_t* c1 = NULL;
  REQUIRE_OK(cube_client_load(cts_device(1), &c1));
  uint8_t a[64] = {1, 2, 3};
  cube_handle_t h1;
  REQUIRE_OK(cube_client_create_from_slice(c1, a, sizeof(a), &h1));
  CHECK_STATUS(cube_client_write(c0, h1, a, sizeof(a)), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_write");
  cube_handle_release(h1);
  cube_client_release(c1);
  CTS_END(c0);
}

typedef struct write_thread {
  cube_device_id_t device;
  uint64_t seed;
  int failures;
} write_thread_t;

/* Each thread is its own stream: its writes and reads of its own buffer are
 * ordered among themselves whatever the other threads do. */
static void* write_thread_main(void* p) {
  write_thread_t* w = p;
  cube_client_t* c = NULL;
  if (cube_status_consume(cube_client_load(w->device, &c))) {
    w->failures++;
    return NULL;
  }
  enum { N = 3001 };
  uint8_t data[N];
  cube_test_fill_random(data, N, w->seed);
  cube_handle_t h;
  if (cube_status_consume(cube_client_create_from_slice(c, data, N, &h))) {
    w->failures++;
    cube_client_release(c);
    return NULL;
  }
  for (int i = 0; i < 40 && !w->failures; ++i) {
    cube_test_fill_random(data, N, w->seed * 1000 + (uint64_t)i);
    if (cube_status_consume(cube_client_write(c, h, data, N))) w->failures++;
    if (!cts_read_equals(c, h, data, N)) w->failures++;
  }
  cube_handle_release(h);
  cube_client_release(c);
  return NULL;
}

CUBE_TEST(write_several_threads_own_streams) {
  CTS_CLIENT(c);
  enum { T = 4 };
  pthread_t th[T];
  write_thread_t w[T];
  for (int i = 0; i < T; ++i) {
    w[i] = (write_thread_t){cts_device(0), 7700 + (uint64_t)i, 0};
    REQUIRE(pthread_create(&th[i], NULL, write_thread_main, &w[i]) == 0);
  }
  for (int i = 0; i < T; ++i) {
    pthread_join(th[i], NULL);
    CHECK_EQ_U64(w[i].failures, 0);
  }
  CTS_END(c);
}
