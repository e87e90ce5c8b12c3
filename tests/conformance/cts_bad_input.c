/* Bad input: every call returns an error naming the function, the argument
 * and the value; nothing aborts, nothing leaks, the client stays usable. */
#include <stdlib.h>
#include <string.h>

#include "cts.h"

#define NOWORD (const char*)NULL

CUBE_TEST(bad_input_null_client) {
  uint8_t d[4] = {1, 2, 3, 4};
  cube_handle_t h = CUBE_HANDLE_NULL;
  cube_bytes_t* b = NULL;
  cube_memory_usage_t u;
  CHECK_STATUS(cube_client_create_from_slice(NULL, d, 4, &h), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_create_from_slice", "client");
  CHECK_STATUS(cube_client_empty(NULL, 4, &h), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_empty", "client");
  CHECK_STATUS(cube_client_read_one(NULL, h, &b), CUBE_STATUS_INVALID_ARGUMENT, "client");
  CHECK_STATUS(cube_client_flush(NULL), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_flush", "client");
  CHECK_STATUS(cube_client_sync(NULL), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_sync", "client");
  CHECK_STATUS(cube_client_memory_usage(NULL, &u), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_memory_usage", "client");
  CHECK_STATUS(cube_client_launch(NULL, NULL, cube_count_static(1, 1, 1), 0, NULL),
               CUBE_STATUS_INVALID_ARGUMENT, "client");
  cube_bytes_t* owned = NULL;
  REQUIRE_OK(cube_bytes_from_copy(d, 4, &owned));
  CHECK_STATUS(cube_client_create(NULL, owned, &h), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_create",
               "client"); /* consumed also on failure (LSan checks) */
  CHECK(cube_handle_is_null(h));
  CHECK(b == NULL);
  cube_client_t* cl = NULL;
  CHECK_STATUS(cube_client_clone(NULL, &cl), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_clone", "client");
  CHECK(cl == NULL);
  CHECK_STATUS(cube_client_to_client(NULL, h, NULL, &h), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_to_client");
  CHECK_STATUS(cube_client_memory_cleanup(NULL), CUBE_STATUS_INVALID_ARGUMENT, "client");
  cube_client_release(NULL);
  CHECK(cube_client_retain(NULL) == NULL);
  CHECK(cube_client_properties(NULL) == NULL);
  CTS_END(NULL);
}

CUBE_TEST(bad_input_null_out_pointers) {
  CTS_CLIENT(c);
  uint8_t d[4] = {1, 2, 3, 4};
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, d, 4, &h));
  CHECK_STATUS(cube_client_load(cts_device(0), NULL), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_load",
               "out_client");
  CHECK_STATUS(cube_client_create_from_slice(c, d, 4, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_create_from_slice", "out_handle");
  CHECK_STATUS(cube_client_create_from_slice(c, NULL, 4, &h), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_create_from_slice", "data");
  CHECK_STATUS(cube_client_empty(c, 4, NULL), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_empty", "out_handle");
  CHECK_STATUS(cube_client_read_one(c, h, NULL), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_read_one",
               "out_bytes");
  CHECK_STATUS(cube_client_read(c, 1, &h, NULL), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_read", "out_bytes");
  CHECK_STATUS(cube_client_read_async(c, 1, &h, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_read_async", "out_future");
  CHECK_STATUS(cube_client_memory_usage(c, NULL), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_memory_usage",
               "out_usage");
  CHECK_STATUS(cube_client_memory_report(c, NULL), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_memory_report");
  CHECK_STATUS(cube_client_get_resource(c, h, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_get_resource", "out_resource");
  CHECK_STATUS(cube_client_sync_async(c, NULL), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_sync_async");
  CHECK_STATUS(cube_client_profile(c, NULL, NULL, "x", NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_profile");
  CHECK_STATUS(cube_client_exclusive(c, NULL, NULL), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_exclusive", "fn");
  size_t count = 0;
  CHECK_STATUS(cube_enumerate_devices(CUBE_BACKEND_CPU, NULL, 0, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_enumerate_devices", "out_count");
  CHECK_STATUS(cube_client_io_optimized_vector_sizes(c, 4, NULL, 0, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "out_count");
  CHECK_STATUS(cube_client_io_optimized_vector_sizes(c, 0, NULL, 0, &count), CUBE_STATUS_INVALID_ARGUMENT,
               "elem_size");
  CHECK_STATUS(cube_future_wait(NULL, 0, NULL), CUBE_STATUS_INVALID_ARGUMENT, "cube_future_wait");
  cube_future_t* f = NULL;
  REQUIRE_OK(cube_client_read_async(c, 1, &h, &f));
  CHECK_STATUS(cube_future_wait(f, UINT64_MAX, NULL), CUBE_STATUS_INVALID_ARGUMENT, "cube_future_wait",
               "out_bytes");
  cube_bytes_t* b = NULL;
  CHECK_OK(cube_future_wait(f, UINT64_MAX, &b)); /* still usable */
  CHECK(b && cube_bytes_size(b) == 4);
  cube_bytes_release(b);
  cube_future_release(f);
  CHECK(cts_read_equals(c, h, d, 4));
  cube_handle_release(h);
  CTS_END(c);
}

CUBE_TEST(bad_input_size_zero) {
  CTS_CLIENT(c);
  uint8_t d[4] = {0};
  cube_handle_t h = CUBE_HANDLE_NULL;
  CHECK_STATUS(cube_client_create_from_slice(c, d, 0, &h), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_create_from_slice", "size 0");
  CHECK_STATUS(cube_client_empty(c, 0, &h), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_empty", "0");
  CHECK_STATUS(cube_client_create_from_slice_pinned(c, d, 0, &h), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_create_from_slice_pinned", "0");
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_bytes_allocate(0, &b));
  CHECK_EQ_U64(cube_bytes_size(b), 0);
  CHECK_STATUS(cube_client_create(c, b, &h), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_create", "0");
  const uint64_t shape[2] = {3, 0};
  cube_tensor_t t;
  CHECK_STATUS(cube_client_empty_tensor(c, 2, shape, 4, &t), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_empty_tensor");
  CHECK(cube_handle_is_null(h));
  cube_handle_t hs[1] = {CUBE_HANDLE_NULL};
  cube_bytes_t* out[1] = {NULL};
  CHECK_STATUS(cube_client_read(c, 0, hs, out), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_read", "0");
  /* Nothing was allocated. */
  cube_memory_usage_t u;
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.number_allocs, 0);
  CHECK_OK(cube_client_flush(c));
  CTS_END(c);
}

CUBE_TEST(bad_input_released_handle) {
  CTS_CLIENT(c);
  uint8_t d[16] = {9};
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, d, sizeof(d), &h));
  cube_handle_release(h);
  cube_bytes_t* b = NULL;
  CHECK_STATUS(cube_client_read_one(c, h, &b), CUBE_STATUS_NOT_FOUND, "cube_client_read_one", "released");
  CHECK(b == NULL);
  cube_future_t* f = NULL;
  CHECK_STATUS(cube_client_read_async(c, 1, &h, &f), CUBE_STATUS_NOT_FOUND, "released");
  CHECK(f == NULL);
  cube_resource_t* r = NULL;
  CHECK_STATUS(cube_client_get_resource(c, h, &r), CUBE_STATUS_NOT_FOUND, "cube_client_get_resource", "released");
  CHECK(r == NULL);
  CTS_KERNEL(k, "copy_bad", cts_k_copy, 1, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER);
  cube_handle_t live;
  REQUIRE_OK(cube_client_create_from_slice(c, d, sizeof(d), &live));
  /* A new handle may take the released slot: the old id must still be dead. */
  CHECK(live.id != h.id);
  CHECK_STATUS(cube_client_read_one(c, h, &b), CUBE_STATUS_NOT_FOUND, "released");
  cube_arg_t a[2] = {cube_arg_buffer(live), cube_arg_buffer(h)};
  CHECK_STATUS(cube_client_launch(c, k, cube_count_static(1, 1, 1), 2, a), CUBE_STATUS_NOT_FOUND,
               "copy_bad", "argument 1", "released");
  cube_handle_t v;
  CHECK_STATUS(cube_handle_offset_view(h, 1, 1, &v), CUBE_STATUS_NOT_FOUND, "released");
  cube_client_t* c2 = NULL;
  REQUIRE_OK(cube_client_load(cts_device(0), &c2));
  cube_handle_t moved;
  CHECK_STATUS(cube_client_to_client(c, h, c2, &moved), CUBE_STATUS_NOT_FOUND, "released");
  CHECK_STATUS(cube_handle_release_checked(h), CUBE_STATUS_NOT_FOUND, "released");
  /* Retaining a dead handle does not revive it. */
  cube_handle_t again = cube_handle_retain(h);
  CHECK(again.id == h.id);
  CHECK_STATUS(cube_client_read_one(c, again, &b), CUBE_STATUS_NOT_FOUND, "released");
  /* A handle id that never existed. */
  cube_handle_t bogus = {0x123456789ull};
  cube_status_code_t bc = cube_status_consume(cube_client_read_one(c, bogus, &b));
  CHECK(bc == CUBE_STATUS_NOT_FOUND || bc == CUBE_STATUS_INVALID_ARGUMENT);
  CHECK(b == NULL);
  CHECK_EQ_U64(cube_handle_size(bogus), 0);
  CHECK_OK(cube_client_sync(c)); /* nothing was queued */
  CHECK(cts_read_equals(c, live, d, sizeof(d)));
  cube_handle_release(live);
  cube_kernel_release(k);
  cube_client_release(c2);
  CTS_END(c);
}

CUBE_TEST(bad_input_null_handle) {
  CTS_CLIENT(c);
  cube_bytes_t* b = NULL;
  CHECK_STATUS(cube_client_read_one(c, CUBE_HANDLE_NULL, &b), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_read_one", "null");
  cube_resource_t* r = NULL;
  CHECK_STATUS(cube_client_get_resource(c, CUBE_HANDLE_NULL, &r), CUBE_STATUS_INVALID_ARGUMENT, "null");
  CTS_KERNEL(k, "copy_null", cts_k_copy, 1, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER);
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 8, &h));
  cube_arg_t a[2] = {cube_arg_buffer(CUBE_HANDLE_NULL), cube_arg_buffer(h)};
  CHECK_STATUS(cube_client_launch(c, k, cube_count_static(1, 1, 1), 2, a), CUBE_STATUS_INVALID_ARGUMENT,
               "copy_null", "argument 0", "null");
  cube_tensor_t t;
  memset(&t, 0, sizeof(t));
  t.rank = 1;
  t.shape[0] = 8;
  t.strides[0] = 1;
  t.elem_size = 1;
  CHECK_STATUS(cube_client_read_tensor(c, 1, &t, &b), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_read_tensor",
               "null");
  CHECK_STATUS(cube_handle_release_checked(CUBE_HANDLE_NULL), CUBE_STATUS_INVALID_ARGUMENT, "null");
  CHECK(!cube_handle_can_mut(CUBE_HANDLE_NULL));
  cube_handle_release(h);
  cube_kernel_release(k);
  CTS_END(c);
}

CUBE_TEST(bad_input_kernel_args) {
  CTS_CLIENT(c);
  CTS_KERNEL(k, "two_args", cts_k_copy, 1, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER);
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 8, &h));
  cube_arg_t a3[3] = {cube_arg_buffer(h), cube_arg_buffer(h), cube_arg_u32(1)};
  CHECK_STATUS(cube_client_launch(c, k, cube_count_static(1, 1, 1), 3, a3), CUBE_STATUS_INVALID_ARGUMENT,
               "two_args", "takes 2 arguments, got 3");
  CHECK_STATUS(cube_client_launch(c, k, cube_count_static(1, 1, 1), 1, a3), CUBE_STATUS_INVALID_ARGUMENT,
               "takes 2 arguments, got 1");
  CHECK_STATUS(cube_client_launch_unchecked(c, k, cube_count_static(1, 1, 1), 3, a3),
               CUBE_STATUS_INVALID_ARGUMENT, "takes 2 arguments, got 3");
  cube_arg_t wrong[2] = {cube_arg_buffer(h), cube_arg_u32(5)};
  CHECK_STATUS(cube_client_launch(c, k, cube_count_static(1, 1, 1), 2, wrong), CUBE_STATUS_INVALID_ARGUMENT,
               "two_args", "argument 1", cube_arg_kind_name(CUBE_ARG_U32), cube_arg_kind_name(CUBE_ARG_BUFFER));
  CHECK_STATUS(cube_client_launch(c, k, cube_count_static(1, 1, 1), 2, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "args");
  CHECK_STATUS(cube_client_launch(c, NULL, cube_count_static(1, 1, 1), 0, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "kernel");
  cube_arg_t ok[2] = {cube_arg_buffer(h), cube_arg_buffer(h)};
  CHECK_STATUS(cube_client_launch_mode(c, k, cube_count_static(1, 1, 1), 2, ok, (cube_execution_mode_t)9),
               CUBE_STATUS_INVALID_ARGUMENT, "9");
  cube_count_t bad_kind = cube_count_static(1, 1, 1);
  bad_kind.kind = (cube_count_kind_t)5;
  CHECK_STATUS(cube_client_launch(c, k, bad_kind, 2, ok), CUBE_STATUS_INVALID_ARGUMENT, "5");
  /* Nothing of the above ran. */
  CHECK_OK(cube_client_sync(c));
  CHECK_OK(cube_client_launch(c, k, cube_count_static(1, 1, 1), 2, ok));
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(h);
  cube_kernel_release(k);
  CTS_END(c);
}

CUBE_TEST(bad_input_kernel_create) {
  const cube_arg_kind_t kinds[2] = {CUBE_ARG_BUFFER, CUBE_ARG_U32};
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = "kc";
  d.cube_dim = (cube_dim_t){0, 0, 0}; /* means {1,1,1} */
  d.arg_kinds = kinds;
  d.arg_count = 2;
  d.cpu_fn = cts_k_copy;
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cube_kernel_create(&d, &k));
  cube_dim_t dim = cube_kernel_cube_dim(k);
  CHECK(dim.x == 1 && dim.y == 1 && dim.z == 1);
  CHECK(cube_kernel_retain(k) == k);
  cube_kernel_release(k);
  cube_kernel_release(k);
  k = NULL;
  CHECK_STATUS(cube_kernel_create(NULL, &k), CUBE_STATUS_INVALID_ARGUMENT, "cube_kernel_create", "desc");
  CHECK_STATUS(cube_kernel_create(&d, NULL), CUBE_STATUS_INVALID_ARGUMENT, "out_kernel");
  d.name = NULL;
  CHECK_STATUS(cube_kernel_create(&d, &k), CUBE_STATUS_INVALID_ARGUMENT, "name");
  d.name = "kc";
  d.cpu_fn = NULL;
  CHECK_STATUS(cube_kernel_create(&d, &k), CUBE_STATUS_INVALID_ARGUMENT, "kc", "cpu_fn");
  d.cpu_fn = cts_k_copy;
  d.cube_dim = (cube_dim_t){4, 0, 1};
  CHECK_STATUS(cube_kernel_create(&d, &k), CUBE_STATUS_INVALID_ARGUMENT, "kc", "cube_dim");
  d.cube_dim = (cube_dim_t){1, 1, 1};
  d.arg_count = CUBE_MAX_KERNEL_ARGS + 1;
  CHECK_STATUS(cube_kernel_create(&d, &k), CUBE_STATUS_INVALID_ARGUMENT, "kc", "arg_count", "65");
  const cube_arg_kind_t bad[2] = {CUBE_ARG_BUFFER, (cube_arg_kind_t)42};
  d.arg_kinds = bad;
  d.arg_count = 2;
  CHECK_STATUS(cube_kernel_create(&d, &k), CUBE_STATUS_INVALID_ARGUMENT, "kc", "42");
  d.arg_kinds = NULL;
  CHECK_STATUS(cube_kernel_create(&d, &k), CUBE_STATUS_INVALID_ARGUMENT, "arg_kinds");
  CHECK(k == NULL);
}

CUBE_TEST(bad_input_device_index_out_of_range) {
  CTS_REQUIRE_BACKEND();
  cube_client_t* c = NULL;
  cube_device_id_t dev = cts_device(7);
  CHECK_STATUS(cube_client_load(dev, &c), CUBE_STATUS_NOT_FOUND, "7");
  CHECK(c == NULL);
  CHECK_STATUS(cube_client_init(dev, NULL, &c), CUBE_STATUS_NOT_FOUND, "7");
  cube_device_id_t bad = {(cube_backend_t)99, 0};
  CHECK_STATUS(cube_client_load(bad, &c), CUBE_STATUS_INVALID_ARGUMENT, "99");
  CHECK(c == NULL);
  CTS_END(NULL);
}

CUBE_TEST(bad_input_shapes) {
  CTS_CLIENT(c);
  float data[15];
  memset(data, 0, sizeof(data));
  const uint64_t s35[2] = {3, 5};
  cube_tensor_t t;
  memset(&t, 0, sizeof(t));
  /* size does not match prod(shape) * elem_size */
  CHECK_STATUS(cube_client_create_tensor_from_slice(c, data, 10, 2, s35, 4, &t), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_create_tensor_from_slice", "10", "60");
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_bytes_from_copy(data, 56, &b));
  CHECK_STATUS(cube_client_create_tensor(c, b, 2, s35, 4, &t), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_create_tensor", "56", "60");
  /* rank > CUBE_MAX_RANK */
  uint64_t big[CUBE_MAX_RANK + 1];
  for (int i = 0; i <= CUBE_MAX_RANK; ++i) big[i] = 1;
  CHECK_STATUS(cube_client_create_tensor_from_slice(c, data, 4, CUBE_MAX_RANK + 1, big, 4, &t),
               CUBE_STATUS_INVALID_ARGUMENT, "13");
  CHECK_STATUS(cube_client_empty_tensor(c, CUBE_MAX_RANK + 1, big, 4, &t), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_empty_tensor", "13");
  cube_layout_desc_t d;
  CHECK_STATUS(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, CUBE_MAX_RANK + 1, big, 4, &d),
               CUBE_STATUS_INVALID_ARGUMENT, "13");
  /* elem_size 0 */
  CHECK_STATUS(cube_client_empty_tensor(c, 2, s35, 0, &t), CUBE_STATUS_INVALID_ARGUMENT, "elem_size");
  CHECK_STATUS(cube_client_create_tensor_from_slice(c, data, 60, 2, s35, 0, &t), CUBE_STATUS_INVALID_ARGUMENT,
               "elem_size");
  CHECK_STATUS(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 2, s35, 0, &d),
               CUBE_STATUS_INVALID_ARGUMENT, "elem_size");
  CHECK_STATUS(cube_client_empty_tensor(c, 2, NULL, 4, &t), CUBE_STATUS_INVALID_ARGUMENT, "shape");
  /* A bad descriptor in a batch fails the batch and leaks nothing. */
  cube_layout_desc_t ds[2];
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 2, s35, 4, &ds[0]));
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 2, s35, 4, &ds[1]));
  const void* dd[2] = {data, data};
  const size_t sz[2] = {60, 59};
  cube_tensor_t ts[2];
  memset(ts, 0, sizeof(ts));
  CHECK_STATUS(cube_client_create_tensors_from_slices(c, 2, ds, dd, sz, ts), CUBE_STATUS_INVALID_ARGUMENT,
               "59", "60");
  CHECK(cube_handle_is_null(ts[0].handle) && cube_handle_is_null(ts[1].handle));
  cube_bytes_t* bs[2] = {NULL, NULL};
  REQUIRE_OK(cube_bytes_from_copy(data, 60, &bs[0]));
  REQUIRE_OK(cube_bytes_from_copy(data, 4, &bs[1]));
  CHECK_STATUS(cube_client_create_tensors(c, 2, ds, bs, ts), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_create_tensors"); /* both consumed */
  CHECK_STATUS(cube_client_empty_tensors(c, 2, NULL, ts), CUBE_STATUS_INVALID_ARGUMENT, "descs");
  /* read_tensor with a shape bigger than the handle */
  cube_tensor_t ok;
  REQUIRE_OK(cube_client_create_tensor_from_slice(c, data, 60, 2, s35, 4, &ok));
  cube_tensor_t grown = ok; /* one row more than the view holds (rows may be pitched) */
  uint64_t row_bytes = ok.strides[0] * ok.elem_size, have = cube_handle_size(ok.handle);
  grown.shape[0] = have / row_bytes + 1;
  char have_text[32];
  snprintf(have_text, sizeof(have_text), "%llu", (unsigned long long)have);
  cube_bytes_t* out = NULL;
  CHECK_STATUS(cube_client_read_tensor(c, 1, &grown, &out), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_read_tensor", have_text,
               cube_client_properties(c)->layout_policy == CUBE_LAYOUT_POLICY_CONTIGUOUS ? "80" : "");
  CHECK(out == NULL);
  cube_tensor_release(&ok);
  cube_memory_usage_t u;
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.number_allocs, 0);
  CTS_END(c);
}

/* A tensor whose shape and strides are readable row-major but describe more
 * than 2^64 bytes: refused by read_tensor and write_tensor, never read or
 * written as the few bytes its wrapped-around size would be (found by
 * fuzz_client: shape [6, 2^63, 1] of 8-byte elements read 0 bytes and
 * succeeded). */
CUBE_TEST(bad_input_tensor_spans_more_than_2_64_bytes) {
  CTS_CLIENT(c);
  float data[16];
  for (int i = 0; i < 16; ++i) data[i] = (float)i + 0.5f;
  const uint64_t s44[2] = {4, 4};
  cube_tensor_t ok;
  REQUIRE_OK(cube_client_create_tensor_from_slice(c, data, sizeof(data), 2, s44, 4, &ok));
  struct {
    uint32_t rank, elem;
    uint64_t shape[3], strides[3];
  } cases[] = {
      {3, 8, {6, 1ull << 63, 1}, {1ull << 63, 1, 1}}, /* rows: 6 * 2^63 wraps to 0 */
      {1, 8, {1ull << 62}, {1}},                      /* a row of 2^65 bytes wraps to 0 */
      {2, 4, {1ull << 33, 1ull << 31}, {1ull << 31, 1}}, /* 2^33 rows of 2^33 bytes */
      {2, 2, {3, 1ull << 63}, {1ull << 63, 1}},           /* 3 rows of 2^64 bytes */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    cube_tensor_t t = ok;
    t.rank = cases[i].rank;
    t.elem_size = cases[i].elem;
    memset(t.shape, 0, sizeof(t.shape));
    memset(t.strides, 0, sizeof(t.strides));
    for (uint32_t k = 0; k < t.rank; ++k) {
      t.shape[k] = cases[i].shape[k];
      t.strides[k] = cases[i].strides[k];
    }
    cube_bytes_t* out = NULL;
    CHECK_STATUS(cube_client_read_tensor(c, 1, &t, &out), CUBE_STATUS_INVALID_ARGUMENT,
                 "cube_client_read_tensor", "tensors[0]", "2^64");
    CHECK(out == NULL);
    cube_bytes_release(out);
    CHECK_STATUS(cube_client_write_tensor(c, &t, data, sizeof(data)), CUBE_STATUS_INVALID_ARGUMENT,
                 "cube_client_write_tensor", "2^64");
  }
  /* The handle kept its contents. */
  cube_bytes_t* back = NULL;
  REQUIRE_OK(cube_client_read_tensor(c, 1, &ok, &back));
  REQUIRE(back && cube_bytes_size(back) == sizeof(data));
  CHECK(memcmp(cube_bytes_const_data(back), data, sizeof(data)) == 0);
  cube_bytes_release(back);
  cube_tensor_release(&ok);
  CTS_END(c);
}

CUBE_TEST(bad_input_init_already_loaded) {
  CTS_CLIENT(c);
  cube_client_t* c2 = NULL;
  CHECK_STATUS(cube_client_init(cts_device(0), NULL, &c2), CUBE_STATUS_ALREADY_EXISTS, "cube_client_init");
  CHECK(c2 == NULL);
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.profile_level = CUBE_PROFILE_BASIC;
  CHECK_STATUS(cube_client_init(cts_device(0), &o, &c2), CUBE_STATUS_ALREADY_EXISTS, "cube_client_init");
  CHECK(cube_client_profile_level(c) != CUBE_PROFILE_BASIC || getenv("CUBE_PROFILE"));
  /* Bad option values are refused, not used. */
  o.queue_mode = (cube_queue_mode_t)9;
  CHECK_STATUS(cube_client_init(cts_device(0), &o, &c2), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_init", "9");
  /* After shutdown the device can be initialised with options. */
  cube_client_release(c);
  cube_shutdown();
  cube_server_options_initialize(&o);
  REQUIRE_OK(cube_client_init(cts_device(0), &o, &c2));
  uint8_t d[5] = {5, 4, 3, 2, 1};
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c2, d, 5, &h));
  CHECK(cts_read_equals(c2, h, d, 5));
  cube_handle_release(h);
  CTS_END(c2);
}

CUBE_TEST(bad_input_cube_dim_beyond_limits) {
  CTS_CLIENT(c);
  const cube_device_properties_t* p = cube_client_properties(c);
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 8, &h));
  const cube_arg_kind_t kinds[1] = {CUBE_ARG_BUFFER};
  cube_arg_t a = cube_arg_buffer(h);
  cube_dim_t dims[3] = {{p->hardware.max_cube_dim[0] + 1, 1, 1},
                        {1, 1, p->hardware.max_cube_dim[2] + 1},
                        {32, 32, 2}}; /* 2048 units */
  for (int i = 0; i < 3; ++i) {
    if ((uint64_t)dims[i].x * dims[i].y * dims[i].z <= p->hardware.max_units_per_cube &&
        dims[i].x <= p->hardware.max_cube_dim[0] && dims[i].z <= p->hardware.max_cube_dim[2])
      continue; /* within this device's limits */
    cube_kernel_t* k = NULL;
    REQUIRE_OK(cts_kernel_create("too_big", cts_k_nop, dims[i], 0, 1, kinds, &k));
    char num[32];
    snprintf(num, sizeof(num), "%u", i == 0 ? dims[i].x : i == 1 ? dims[i].z : 2048u);
    CHECK_STATUS(cube_client_launch(c, k, cube_count_static(1, 1, 1), 1, &a), CUBE_STATUS_OUT_OF_RANGE,
                 "too_big", num);
    cube_kernel_release(k);
  }
  /* Shared memory beyond the device's: the shared_memory_size of a native
   * kernel (a dialect kernel declares its CUBE_SHARED in the source). */
  if (!cts_native_kernels()) {
    CHECK_OK(cube_client_sync(c));
    cube_handle_release(h);
    CTS_END(c);
    return;
  }
  cube_kernel_t* ks = NULL;
  cube_dim_t one = {1, 1, 1};
  REQUIRE_OK(cts_kernel_create("too_much_shared", cts_k_nop, one, p->hardware.max_shared_memory_size + 1, 1,
                               kinds, &ks));
  cube_status_t s = cube_client_launch(c, ks, cube_count_static(1, 1, 1), 1, &a);
  if (s) {
    CHECK(cube_status_code(s) == CUBE_STATUS_OUT_OF_RANGE);
    cube_status_free(s);
    CHECK_OK(cube_client_sync(c));
  } else {
    /* Deferred: then it must come back from the stream. */
    s = cube_client_sync(c);
    CHECK(cube_status_code(s) == CUBE_STATUS_OUT_OF_RANGE);
    CHECK(cts_contains(cube_status_message(s), "too_much_shared", (const char*)NULL));
    cube_status_free(s);
  }
  cube_kernel_release(ks);
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(h);
  CTS_END(c);
}

CUBE_TEST(bad_input_handle_of_another_device) {
  setenv("CUBE_CPU_DEVICES", "2", 1);
  CTS_REQUIRE_DEVICES(2);
  CTS_CLIENT(c);
  cube_client_t* c1 = NULL;
  REQUIRE_OK(cube_client_load(cts_device(1), &c1));
  uint8_t d[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  cube_handle_t h1;
  REQUIRE_OK(cube_client_create_from_slice(c1, d, sizeof(d), &h1));
  cube_bytes_t* b = NULL;
  cube_status_t s = cube_client_read_one(c, h1, &b);
  CHECK(s != CUBE_OK);
  CHECK(cube_status_code(s) == CUBE_STATUS_INVALID_ARGUMENT || cube_status_code(s) == CUBE_STATUS_NOT_FOUND);
  CHECK(cts_contains(cube_status_message(s), "cube_client_read_one", "handle", (const char*)NULL));
  cube_status_free(s);
  CHECK(b == NULL);
  CTS_KERNEL(k, "copy_devices", cts_k_copy, 1, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER);
  cube_handle_t h0;
  REQUIRE_OK(cube_client_empty(c, sizeof(d), &h0));
  cube_arg_t a[2] = {cube_arg_buffer(h1), cube_arg_buffer(h0)};
  s = cube_client_launch(c, k, cube_count_static(1, 1, 1), 2, a);
  CHECK(cube_status_code(s) == CUBE_STATUS_INVALID_ARGUMENT || cube_status_code(s) == CUBE_STATUS_NOT_FOUND);
  CHECK(cts_contains(cube_status_message(s), "copy_devices", "argument 0", (const char*)NULL));
  cube_status_free(s);
  cube_resource_t* r = NULL;
  s = cube_client_get_resource(c, h1, &r);
  CHECK(s != CUBE_OK && r == NULL);
  cube_status_free(s);
  cube_device_id_t dev;
  CHECK_OK(cube_handle_device(h1, &dev));
  CHECK(dev.index == 1);
  /* Each device reads its own. */
  CHECK(cts_read_equals(c1, h1, d, sizeof(d)));
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(h0);
  cube_handle_release(h1);
  cube_kernel_release(k);
  cube_client_release(c1);
  CTS_END(c);
}

CUBE_TEST(bad_input_files_and_bytes) {
  cube_bytes_t* b = NULL;
  CHECK_STATUS(cube_bytes_map_file("/nonexistent/cts/file.bin", 0, 0, &b), CUBE_STATUS_NOT_FOUND,
               "/nonexistent/cts/file.bin");
  char path[512];
  cts_tmp_path(path, sizeof(path), "cts_bad_input_file");
  FILE* f = fopen(path, "wb");
  REQUIRE(f);
  fwrite("0123456789", 1, 10, f);
  fclose(f);
  CHECK_STATUS(cube_bytes_map_file(path, 11, 0, &b), CUBE_STATUS_OUT_OF_RANGE, "11");
  CHECK_STATUS(cube_bytes_map_file(path, 4, 7, &b), CUBE_STATUS_OUT_OF_RANGE, "7");
  CHECK(b == NULL);
  REQUIRE_OK(cube_bytes_map_file(path, 3, 7, &b));
  CHECK(memcmp(cube_bytes_const_data(b), "3456789", 7) == 0);
  /* Copy-on-write: writes stay private. */
  ((char*)cube_bytes_data(b))[0] = 'X';
  cube_bytes_release(b);
  b = NULL;
  REQUIRE_OK(cube_bytes_map_file(path, 0, 0, &b));
  CHECK(cube_bytes_size(b) == 10 && memcmp(cube_bytes_const_data(b), "0123456789", 10) == 0);
  cube_bytes_release(b);
  remove(path);
  CHECK(strcmp(cube_bytes_property_name(CUBE_BYTES_PINNED), "pinned") == 0);
  CHECK(strcmp(cube_bytes_property_name(CUBE_BYTES_FILE), "file") == 0);
  cube_bytes_release(NULL);
  cube_bytes_release_array(NULL, 0);
}

CUBE_TEST(bad_input_staging_and_collections) {
  CTS_CLIENT(c);
  cube_bytes_t* bs[2] = {NULL, NULL};
  REQUIRE_OK(cube_bytes_allocate(10, &bs[0]));
  CHECK_STATUS(cube_client_staging(c, 2, bs, false), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_staging",
               "inout_bytes[1]");
  CHECK_STATUS(cube_client_staging(c, 1, NULL, false), CUBE_STATUS_INVALID_ARGUMENT, "inout_bytes");
  CHECK(bs[0] != NULL);
  cube_bytes_release(bs[0]);
  CHECK_STATUS(cube_client_reserve_staging(c, 2, NULL, bs), CUBE_STATUS_INVALID_ARGUMENT, "sizes");
  cube_handle_t h[2] = {CUBE_HANDLE_NULL, CUBE_HANDLE_NULL};
  CHECK_STATUS(cube_client_read(c, 2, NULL, bs), CUBE_STATUS_INVALID_ARGUMENT, "handles");
  CHECK_STATUS(cube_client_read(c, 2, h, bs), CUBE_STATUS_INVALID_ARGUMENT, "handles[0]", "null");
  uint8_t d[3] = {1, 2, 3};
  REQUIRE_OK(cube_client_create_from_slice(c, d, 3, &h[0]));
  CHECK_STATUS(cube_client_read(c, 2, h, bs), CUBE_STATUS_INVALID_ARGUMENT, "handles[1]", "null");
  CHECK_STATUS(cube_client_allocation_mode(NULL, CUBE_ALLOCATION_AUTO), CUBE_STATUS_INVALID_ARGUMENT, "client");
  cube_backend_t be;
  CHECK_STATUS(cube_backend_parse("no-such-backend", &be), CUBE_STATUS_INVALID_ARGUMENT, "no-such-backend");
  cube_profile_level_t lv;
  CHECK_STATUS(cube_profile_level_parse("loud", &lv), CUBE_STATUS_INVALID_ARGUMENT, "loud");
  CHECK(cts_read_equals(c, h[0], d, 3));
  cube_handle_release(h[0]);
  CTS_END(c);
}

/* Found by fuzz_client: a launch with an empty count still checks its
 * arguments at once (it used to return OK before looking at them). */
CUBE_TEST(bad_input_empty_launch_checks_arguments) {
  CTS_CLIENT(c);
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 64, &h));
  cube_handle_release(h); /* now a released id */
  cube_arg_kind_t kinds[1] = {CUBE_ARG_BUFFER};
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cts_kernel_create("empty_count", cts_k_nop, ((cube_dim_t){1, 1, 1}), 0, 1, kinds, &k));
  cube_arg_t a[1] = {cube_arg_buffer(h)};
  CHECK_STATUS(cube_client_launch(c, k, cube_count_static(0, 1, 1), 1, a), CUBE_STATUS_NOT_FOUND,
               "released");
  cube_arg_t wrong[1] = {cube_arg_f32(1.0f)};
  CHECK_STATUS(cube_client_launch(c, k, cube_count_static(4, 0, 1), 1, wrong),
               CUBE_STATUS_INVALID_ARGUMENT, "argument 0 is f32, expected buffer");
  cube_kernel_release(k);
  cube_client_release(c);
  cube_shutdown();
}
