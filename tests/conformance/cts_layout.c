/* Layouts (docs/cubecl.md, "Layouts"): the strides the runtime returns, packing, and
 * reads with strides it did not produce. */
#include <stdlib.h>
#include <string.h>

#include "cts.h"

static int cts_contiguous(uint32_t rank, const uint64_t* shape, const uint64_t* strides) {
  uint64_t s = 1;
  for (uint32_t i = rank; i-- > 0;) {
    if (strides[i] != s) return 0;
    s *= shape[i];
  }
  return 1;
}

CUBE_TEST(layout_optimized_strides_contiguous) {
  CTS_CLIENT(c);
  const cube_device_properties_t* p = cube_client_properties(c);
  /* Contiguous devices: dense strides; a pitched one: its own layout (both
   * as cube_layout_compute says), read back dense either way. */
  int dense = p->layout_policy == CUBE_LAYOUT_POLICY_CONTIGUOUS;
  CHECK(dense || cts_backend()->backend != CUBE_BACKEND_CPU);
  /* Ranks 1..CUBE_MAX_RANK with odd extents, elem sizes 1..8. */
  for (uint32_t rank = 1; rank <= CUBE_MAX_RANK; ++rank) {
    uint64_t shape[CUBE_MAX_RANK];
    size_t n = 1;
    for (uint32_t i = 0; i < rank; ++i) {
      shape[i] = (i % 3 == 0) ? 3 : (i % 3 == 1 ? 1 : 2);
      n *= shape[i];
    }
    uint32_t elem = 1u << (rank % 4);
    n *= elem;
    uint8_t* data = malloc(n);
    REQUIRE(data);
    cube_test_fill_random(data, n, 3000 + rank);
    cube_tensor_t t, e;
    REQUIRE_OK(cube_client_create_tensor_from_slice(c, data, n, rank, shape, elem, &t));
    REQUIRE_OK(cube_client_empty_tensor(c, rank, shape, elem, &e));
    CHECK(!dense || cts_contiguous(rank, shape, t.strides));
    CHECK(!dense || cts_contiguous(rank, shape, e.strides));
    CHECK(cts_tensor_layout_ok(c, &t, CUBE_LAYOUT_OPTIMIZED, NULL));
    CHECK(cts_tensor_layout_ok(c, &e, CUBE_LAYOUT_OPTIMIZED, NULL));
    CHECK(cube_layout_strides_readable(p->layout_policy, rank, shape, t.strides));
    CHECK(!dense || cube_handle_size(t.handle) == n);
    cube_bytes_t* out = NULL;
    CHECK_OK(cube_client_read_tensor(c, 1, &t, &out));
    CHECK(out && cube_bytes_size(out) == n && memcmp(cube_bytes_const_data(out), data, n) == 0);
    cube_bytes_release(out);
    cube_tensor_release(&t);
    cube_tensor_release(&e);
    free(data);
  }
  CTS_END(c);
}

static int cts_names_strides(const char* msg, const char* a, const char* b) {
  char s1[32], s2[32], s3[32];
  snprintf(s1, sizeof(s1), "%s, %s", a, b);
  snprintf(s2, sizeof(s2), "%s,%s", a, b);
  snprintf(s3, sizeof(s3), "%s %s", a, b);
  return strstr(msg, "strides") && (strstr(msg, s1) || strstr(msg, s2) || strstr(msg, s3));
}

CUBE_TEST(layout_read_foreign_strides_unsupported) {
  CTS_CLIENT(c);
  float data[21 * 13];
  cube_test_fill_random(data, sizeof(data), 3100);
  const uint64_t shape[2] = {21, 13};
  cube_tensor_t t;
  REQUIRE_OK(cube_client_create_tensor_from_slice(c, data, sizeof(data), 2, shape, 4, &t));
  cube_tensor_t tr = t; /* transposed view of the same memory */
  tr.strides[0] = 1;
  tr.strides[1] = 21;
  cube_bytes_t* out = NULL;
  cube_status_t s = cube_client_read_tensor(c, 1, &tr, &out);
  CHECK(cube_status_code(s) == CUBE_STATUS_UNSUPPORTED);
  CHECK(cts_names_strides(cube_status_message(s), "1", "21"));
  if (cube_status_code(s) != CUBE_STATUS_UNSUPPORTED || !cts_names_strides(cube_status_message(s), "1", "21"))
    fprintf(stderr, "got [%s] %s\n", cube_status_code_name(cube_status_code(s)), cube_status_message(s));
  cube_status_free(s);
  CHECK(out == NULL);
  /* The async form refuses at once too. */
  cube_future_t* f = NULL;
  s = cube_client_read_tensor_async(c, 1, &tr, &f);
  CHECK(cube_status_code(s) == CUBE_STATUS_UNSUPPORTED);
  cube_status_free(s);
  CHECK(f == NULL);
  /* Padded rows are not something the CPU produces. */
  if (cube_client_properties(c)->layout_policy == CUBE_LAYOUT_POLICY_CONTIGUOUS) {
    cube_tensor_t pad = t;
    pad.shape[0] = 3;
    pad.shape[1] = 5;
    pad.strides[0] = 8;
    pad.strides[1] = 1;
    s = cube_client_read_tensor(c, 1, &pad, &out);
    CHECK(cube_status_code(s) == CUBE_STATUS_UNSUPPORTED);
    CHECK(cts_names_strides(cube_status_message(s), "8", "1"));
    cube_status_free(s);
    CHECK(out == NULL);
  }
  /* The stream is fine afterwards and the real strides read. */
  CHECK_OK(cube_client_flush(c));
  out = NULL;
  CHECK_OK(cube_client_read_tensor(c, 1, &t, &out));
  CHECK(out && cube_bytes_size(out) == sizeof(data) &&
        memcmp(cube_bytes_const_data(out), data, sizeof(data)) == 0);
  cube_bytes_release(out);
  /* A second tensor in the batch with bad strides fails the whole read. */
  cube_tensor_t two[2] = {t, tr};
  cube_bytes_t* outs[2] = {NULL, NULL};
  CHECK_STATUS(cube_client_read_tensor(c, 2, two, outs), CUBE_STATUS_UNSUPPORTED, "strides");
  CHECK(outs[0] == NULL && outs[1] == NULL);
  cube_tensor_release(&t);
  CTS_END(c);
}

CUBE_TEST(layout_packed_offsets_aligned) {
  CTS_CLIENT(c);
  uint64_t align = cube_client_properties(c)->memory.alignment;
  /* Sizes around the alignment. */
  const uint64_t lens[5] = {1, align - 1, align, align + 1, 3 * align + 5};
  cube_layout_desc_t d[5];
  const void* data[5];
  size_t sizes[5];
  uint8_t* bufs[5];
  for (int i = 0; i < 5; ++i) {
    REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 1, &lens[i], 1, &d[i]));
    bufs[i] = malloc(lens[i]);
    REQUIRE(bufs[i]);
    cube_test_fill_random(bufs[i], lens[i], 3200 + i);
    data[i] = bufs[i];
    sizes[i] = lens[i];
  }
  cube_tensor_t t[5];
  REQUIRE_OK(cube_client_create_tensors_from_slices(c, 5, d, data, sizes, t));
  uint64_t expect = 0;
  for (int i = 0; i < 5; ++i) {
    CHECK_EQ_U64(cube_handle_offset(t[i].handle) - cube_handle_offset(t[0].handle), expect);
    CHECK_EQ_U64(cube_handle_offset(t[i].handle) % align, 0);
    CHECK_EQ_U64(cube_handle_size(t[i].handle), lens[i]);
    CHECK(cts_read_equals(c, t[i].handle, bufs[i], lens[i]));
    expect += (lens[i] + align - 1) / align * align;
  }
  CHECK_EQ_U64(cube_handle_buffer_size(t[0].handle), expect);
  /* The public layout computation agrees. */
  uint64_t strides[5][CUBE_MAX_RANK], offsets[5], tsizes[5], total = 0;
  CHECK_OK(cube_layout_compute(cube_client_properties(c)->layout_policy, align, 5, d, strides,
                               offsets, tsizes, &total));
  CHECK_EQ_U64(total, expect);
  for (int i = 0; i < 5; ++i) {
    CHECK_EQ_U64(offsets[i], cube_handle_offset(t[i].handle) - cube_handle_offset(t[0].handle));
    CHECK_EQ_U64(tsizes[i], lens[i]);
    CHECK_EQ_U64(strides[i][0], 1);
  }
  cube_tensor_release_array(t, 5);
  for (int i = 0; i < 5; ++i) free(bufs[i]);
  CTS_END(c);
}

/* The worked example of docs/cubecl.md, "Layouts", and more (pure computation). */
CUBE_TEST(layout_compute_reference_examples) {
  cube_layout_desc_t d[2];
  uint64_t strides[2][CUBE_MAX_RANK], offsets[2], sizes[2], total = 0;
  const uint64_t s35[2] = {3, 5}, s5[1] = {5};
  /* CUDA, A = 512: f32 [3,5] Optimized -> pitch 32, strides [8,1], size 96, total 512. */
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 2, s35, 4, &d[0]));
  CHECK_OK(cube_layout_compute(CUBE_LAYOUT_POLICY_PITCHED, 512, 1, d, strides, offsets, sizes, &total));
  CHECK_EQ_U64(strides[0][0], 8);
  CHECK_EQ_U64(strides[0][1], 1);
  CHECK_EQ_U64(sizes[0], 96);
  CHECK_EQ_U64(total, 512);
  CHECK(cube_layout_strides_readable(CUBE_LAYOUT_POLICY_PITCHED, 2, s35, strides[0]));
  CHECK(!cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, 2, s35, strides[0]));
  /* f32 [5] Optimized -> size 32. */
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 1, s5, 4, &d[0]));
  CHECK_OK(cube_layout_compute(CUBE_LAYOUT_POLICY_PITCHED, 512, 1, d, strides, offsets, sizes, &total));
  CHECK_EQ_U64(sizes[0], 32);
  /* Contiguous strategy under the pitched policy: no padding. */
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 2, s35, 4, &d[0]));
  CHECK_OK(cube_layout_compute(CUBE_LAYOUT_POLICY_PITCHED, 512, 1, d, strides, offsets, sizes, &total));
  CHECK_EQ_U64(strides[0][0], 5);
  CHECK_EQ_U64(sizes[0], 60);
  /* Two contiguous tensors of 100 and 600 bytes -> offsets 0, 512; total 1536. */
  const uint64_t s100[1] = {100}, s600[1] = {600};
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 1, s100, 1, &d[0]));
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 1, s600, 1, &d[1]));
  CHECK_OK(cube_layout_compute(CUBE_LAYOUT_POLICY_PITCHED, 512, 2, d, strides, offsets, sizes, &total));
  CHECK_EQ_U64(offsets[0], 0);
  CHECK_EQ_U64(offsets[1], 512);
  CHECK_EQ_U64(total, 1536);
  CHECK_OK(cube_layout_compute(CUBE_LAYOUT_POLICY_CONTIGUOUS, 512, 2, d, strides, offsets, sizes, &total));
  CHECK_EQ_U64(offsets[1], 512);
  CHECK_EQ_U64(total, 1536);
  /* Contiguous policy, f32 [3,5] Optimized: row-major, 60 bytes. */
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 2, s35, 4, &d[0]));
  CHECK_OK(cube_layout_compute(CUBE_LAYOUT_POLICY_CONTIGUOUS, 64, 1, d, strides, offsets, sizes, &total));
  CHECK_EQ_U64(strides[0][0], 5);
  CHECK_EQ_U64(strides[0][1], 1);
  CHECK_EQ_U64(sizes[0], 60);
  CHECK_EQ_U64(total, 64);
  /* Readability: transposed never, pitched only under the pitched policy. */
  const uint64_t tr[2] = {1, 3}, pitched[2] = {8, 1}, dense[2] = {5, 1}, narrow[2] = {4, 1};
  CHECK(!cube_layout_strides_readable(CUBE_LAYOUT_POLICY_PITCHED, 2, s35, tr));
  CHECK(!cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, 2, s35, tr));
  CHECK(cube_layout_strides_readable(CUBE_LAYOUT_POLICY_PITCHED, 2, s35, pitched));
  CHECK(!cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, 2, s35, pitched));
  CHECK(cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, 2, s35, dense));
  CHECK(cube_layout_strides_readable(CUBE_LAYOUT_POLICY_PITCHED, 2, s35, dense));
  CHECK(!cube_layout_strides_readable(CUBE_LAYOUT_POLICY_PITCHED, 2, s35, narrow));
}

CUBE_TEST(layout_contiguous_strategy_descs) {
  CTS_CLIENT(c);
  const uint64_t s0[3] = {2, 9, 5}, s1[2] = {1, 1};
  cube_layout_desc_t d[2];
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 3, s0, 2, &d[0]));
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 2, s1, 8, &d[1]));
  CHECK_EQ_U64(d[0].rank, 3);
  CHECK_EQ_U64(d[0].shape[1], 9);
  CHECK_EQ_U64(d[0].elem_size, 2);
  CHECK(d[0].strategy == CUBE_LAYOUT_CONTIGUOUS);
  cube_tensor_t t[2];
  REQUIRE_OK(cube_client_empty_tensors(c, 2, d, t));
  CHECK(cts_contiguous(3, s0, t[0].strides));
  CHECK(cts_contiguous(2, s1, t[1].strides));
  CHECK_EQ_U64(cube_handle_size(t[0].handle), 180);
  CHECK_EQ_U64(cube_handle_size(t[1].handle), 8);
  cube_tensor_release_array(t, 2);
  CTS_END(c);
}
