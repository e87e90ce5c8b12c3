/* Creating memory: every create/empty/staging variant, read back. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cts.h"

static const size_t cts_odd_sizes[] = {1, 3, 1000003};


/* Writes |n| random bytes (seed) to a new file; returns 0 on failure. */
static int cts_write_file(const char* path, void* data, size_t n, uint64_t seed) {
  cube_test_fill_random(data, n, seed);
  int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
  if (fd < 0) return 0;
  size_t done = 0;
  while (done < n) {
    ssize_t w = write(fd, (char*)data + done, n - done);
    if (w <= 0) {
      close(fd);
      return 0;
    }
    done += (size_t)w;
  }
  return close(fd) == 0;
}

CUBE_TEST(create_from_slice_odd_sizes) {
  CTS_CLIENT(c);
  for (size_t k = 0; k < 3; ++k) {
    size_t n = cts_odd_sizes[k];
    uint8_t* data = malloc(n);
    uint8_t* expect = malloc(n);
    REQUIRE(data && expect);
    cube_test_fill_random(data, n, 100 + k);
    memcpy(expect, data, n);
    cube_handle_t h = CUBE_HANDLE_NULL;
    CHECK_OK(cube_client_create_from_slice(c, data, n, &h));
    CHECK(!cube_handle_is_null(h));
    CHECK_EQ_U64(cube_handle_size(h), n);
    memset(data, 0xEE, n); /* the copy must have been taken during the call */
    CHECK(cts_read_equals(c, h, expect, n));
    cube_handle_release(h);
    free(data);
    free(expect);
  }
  CTS_END(c);
}

CUBE_TEST(create_native_bytes) {
  CTS_CLIENT(c);
  for (size_t k = 0; k < 3; ++k) {
    size_t n = cts_odd_sizes[k];
    uint8_t* data = malloc(n);
    REQUIRE(data);
    cube_test_fill_random(data, n, 200 + k);
    cube_bytes_t* b = NULL;
    REQUIRE_OK(cube_bytes_from_copy(data, n, &b));
    CHECK(cube_bytes_property(b) == CUBE_BYTES_NATIVE);
    cube_handle_t h = CUBE_HANDLE_NULL;
    CHECK_OK(cube_client_create(c, b, &h)); /* consumes b */
    CHECK_EQ_U64(cube_handle_size(h), n);
    CHECK(cts_read_equals(c, h, data, n));
    cube_handle_release(h);
    free(data);
  }
  CTS_END(c);
}

CUBE_TEST(create_file_mapped) {
  CTS_CLIENT(c);
  char path[512];
  cts_tmp_path(path, sizeof(path), "cts_create_file_mapped");
  const size_t file_size = 3 * 4096 + 777, offset = 4096 + 123, size = 5000;
  uint8_t* content = malloc(file_size);
  REQUIRE(content);
  REQUIRE(cts_write_file(path, content, file_size, 301));
  /* A window at a non-page-aligned offset. */
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_bytes_map_file(path, offset, size, &b));
  CHECK(cube_bytes_property(b) == CUBE_BYTES_FILE);
  CHECK_EQ_U64(cube_bytes_size(b), size);
  CHECK(memcmp(cube_bytes_const_data(b), content + offset, size) == 0);
  cube_handle_t h = CUBE_HANDLE_NULL;
  CHECK_OK(cube_client_create(c, b, &h));
  CHECK_EQ_U64(cube_handle_size(h), size);
  CHECK(cts_read_equals(c, h, content + offset, size));
  cube_handle_release(h);
  /* Size 0 maps to the end of the file. */
  b = NULL;
  REQUIRE_OK(cube_bytes_map_file(path, offset + 1, 0, &b));
  CHECK_EQ_U64(cube_bytes_size(b), file_size - offset - 1);
  h = CUBE_HANDLE_NULL;
  CHECK_OK(cube_client_create(c, b, &h));
  CHECK(cts_read_equals(c, h, content + offset + 1, file_size - offset - 1));
  cube_handle_release(h);
  unlink(path);
  free(content);
  CTS_END(c);
}

CUBE_TEST(create_tensor_from_slice_shapes) {
  CTS_CLIENT(c);
  struct {
    uint32_t rank;
    uint64_t shape[4];
    uint32_t elem;
  } cases[] = {
      {2, {3, 5}, 4}, {1, {5}, 4}, {3, {2, 3, 4}, 2}, {1, {1}, 8}, {1, {1000003}, 1}, {4, {3, 1, 7, 5}, 8},
  };
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); ++k) {
    size_t n = cases[k].elem;
    for (uint32_t i = 0; i < cases[k].rank; ++i) n *= cases[k].shape[i];
    uint8_t* data = malloc(n);
    REQUIRE(data);
    cube_test_fill_random(data, n, 400 + k);
    cube_tensor_t t;
    memset(&t, 0xAB, sizeof(t));
    CHECK_OK(cube_client_create_tensor_from_slice(c, data, n, cases[k].rank, cases[k].shape,
                                                  cases[k].elem, &t));
    CHECK_EQ_U64(t.rank, cases[k].rank);
    CHECK_EQ_U64(t.elem_size, cases[k].elem);
    for (uint32_t i = 0; i < cases[k].rank; ++i) CHECK_EQ_U64(t.shape[i], cases[k].shape[i]);
    CHECK(cts_tensor_layout_ok(c, &t, CUBE_LAYOUT_OPTIMIZED, NULL));
    cube_bytes_t* out = NULL;
    CHECK_OK(cube_client_read_tensor(c, 1, &t, &out));
    CHECK(out && cube_bytes_size(out) == n && memcmp(cube_bytes_const_data(out), data, n) == 0);
    cube_bytes_release(out);
    /* Dense (not pitched): the raw view is the data. */
    if (cts_tensor_dense(&t)) CHECK(cts_read_equals(c, t.handle, data, n));
    cube_tensor_release(&t);
    CHECK(cube_handle_is_null(t.handle));
    free(data);
  }
  CTS_END(c);
}

CUBE_TEST(create_tensor_from_bytes) {
  CTS_CLIENT(c);
  const uint64_t shape[2] = {7, 11};
  double data[77];
  cube_test_fill_random(data, sizeof(data), 501);
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_bytes_from_copy(data, sizeof(data), &b));
  cube_tensor_t t;
  CHECK_OK(cube_client_create_tensor(c, b, 2, shape, 8, &t));
  CHECK(cts_tensor_layout_ok(c, &t, CUBE_LAYOUT_OPTIMIZED, NULL));
  if (cube_client_properties(c)->layout_policy == CUBE_LAYOUT_POLICY_CONTIGUOUS) {
    CHECK_EQ_U64(t.strides[0], 11);
    CHECK_EQ_U64(t.strides[1], 1);
  }
  cube_bytes_t* out = NULL;
  CHECK_OK(cube_client_read_tensor(c, 1, &t, &out));
  CHECK(out && cube_bytes_size(out) == sizeof(data) &&
        memcmp(cube_bytes_const_data(out), data, sizeof(data)) == 0);
  cube_bytes_release(out);
  cube_tensor_release(&t);
  CTS_END(c);
}

/* Three tensors of different ranks and element sizes packed in one buffer. */
static void cts_check_packed(cube_client_t* c, cube_tensor_t* t, const cube_layout_desc_t* descs,
                             uint8_t* const* data, const size_t* sizes) {
  const cube_device_properties_t* p = cube_client_properties(c);
  uint64_t align = p->memory.alignment;
  /* The device's packing: strides, offsets and view sizes (padded rows on a
   * pitched device; |sizes| are the dense contents). */
  uint64_t lstrides[3][CUBE_MAX_RANK], loffsets[3], lsizes[3], ltotal = 0;
  REQUIRE_OK(cube_layout_compute(p->layout_policy, align, 3, descs, lstrides, loffsets, lsizes, &ltotal));
  for (int i = 0; i < 3; ++i) {
    CHECK_EQ_U64(t[i].rank, descs[i].rank);
    CHECK_EQ_U64(t[i].elem_size, descs[i].elem_size);
    CHECK(cts_tensor_layout_ok(c, &t[i], descs[i].strategy, NULL));
    CHECK_EQ_U64(cube_handle_offset(t[i].handle) % align, 0);
    CHECK_EQ_U64(cube_handle_offset(t[i].handle) - cube_handle_offset(t[0].handle), loffsets[i]);
    CHECK_EQ_U64(cube_handle_size(t[i].handle), lsizes[i]);
    CHECK(lsizes[i] >= sizes[i]);
    CHECK_EQ_U64(cube_handle_buffer_size(t[i].handle), cube_handle_buffer_size(t[0].handle));
    CHECK(!cube_handle_can_mut(t[i].handle)); /* siblings live */
    if (cts_tensor_dense(&t[i])) CHECK(cts_read_equals(c, t[i].handle, data[i], sizes[i]));
  }
  /* Views are disjoint and in the buffer. */
  for (int i = 0; i < 3; ++i) {
    uint64_t oi = cube_handle_offset(t[i].handle);
    CHECK(oi + lsizes[i] <= cube_handle_buffer_size(t[i].handle));
    for (int j = 0; j < 3; ++j) {
      if (i == j) continue;
      uint64_t oj = cube_handle_offset(t[j].handle);
      CHECK(oi + lsizes[i] <= oj || oj + lsizes[j] <= oi);
    }
  }
  cube_bytes_t* out[3] = {NULL, NULL, NULL};
  CHECK_OK(cube_client_read_tensor(c, 3, t, out));
  for (int i = 0; i < 3; ++i) {
    CHECK(out[i] && cube_bytes_size(out[i]) == sizes[i] &&
          memcmp(cube_bytes_const_data(out[i]), data[i], sizes[i]) == 0);
  }
  cube_bytes_release_array(out, 3);
  /* Once the siblings are gone, the last one may be written in place. */
  cube_tensor_release(&t[0]);
  CHECK(!cube_handle_can_mut(t[1].handle));
  cube_tensor_release(&t[2]);
  CHECK(cube_handle_can_mut(t[1].handle));
  CHECK_OK(cube_client_read_tensor(c, 1, &t[1], out));
  CHECK(out[0] && cube_bytes_size(out[0]) == sizes[1] &&
        memcmp(cube_bytes_const_data(out[0]), data[1], sizes[1]) == 0);
  cube_bytes_release(out[0]);
  cube_tensor_release(&t[1]);
}

static void cts_packed_descs(cube_layout_desc_t* d, size_t* sizes) {
  const uint64_t s0[2] = {3, 5}, s1[1] = {7}, s2[3] = {2, 3, 4};
  cube_status_free(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 2, s0, 4, &d[0]));
  cube_status_free(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 1, s1, 1, &d[1]));
  cube_status_free(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 3, s2, 8, &d[2]));
  sizes[0] = 60;
  sizes[1] = 7;
  sizes[2] = 192;
}

CUBE_TEST(create_tensors_from_slices_packed) {
  CTS_CLIENT(c);
  cube_layout_desc_t d[3];
  size_t sizes[3];
  cts_packed_descs(d, sizes);
  uint8_t buf0[60], buf1[7], buf2[192];
  uint8_t* data[3] = {buf0, buf1, buf2};
  for (int i = 0; i < 3; ++i) cube_test_fill_random(data[i], sizes[i], 600 + i);
  const void* cdata[3] = {buf0, buf1, buf2};
  cube_tensor_t t[3];
  REQUIRE_OK(cube_client_create_tensors_from_slices(c, 3, d, cdata, sizes, t));
  cts_check_packed(c, t, d, data, sizes);
  CTS_END(c);
}

CUBE_TEST(create_tensors_from_bytes) {
  CTS_CLIENT(c);
  cube_layout_desc_t d[3];
  size_t sizes[3];
  cts_packed_descs(d, sizes);
  uint8_t buf0[60], buf1[7], buf2[192];
  uint8_t* data[3] = {buf0, buf1, buf2};
  for (int i = 0; i < 3; ++i) cube_test_fill_random(data[i], sizes[i], 700 + i);
  /* One NATIVE, one OTHER, one FILE buffer. */
  cube_bytes_t* b[3] = {NULL, NULL, NULL};
  REQUIRE_OK(cube_bytes_from_copy(buf0, sizes[0], &b[0]));
  uint8_t* other = malloc(sizes[1]);
  REQUIRE(other);
  memcpy(other, buf1, sizes[1]);
  REQUIRE_OK(cube_bytes_wrap(other, sizes[1], NULL, NULL, &b[1]));
  char path[512];
  cts_tmp_path(path, sizeof(path), "cts_create_tensors_from_bytes");
  uint8_t file[1000];
  REQUIRE(cts_write_file(path, file, sizeof(file), 702));
  memcpy(buf2, file + 33, sizes[2]);
  REQUIRE_OK(cube_bytes_map_file(path, 33, sizes[2], &b[2]));
  cube_tensor_t t[3];
  REQUIRE_OK(cube_client_create_tensors(c, 3, d, b, t)); /* consumes b */
  free(other); /* OTHER without a release callback: still ours, no longer used */
  cts_check_packed(c, t, d, data, sizes);
  unlink(path);
  CTS_END(c);
}

CUBE_TEST(reserve_staging_pinned) {
  CTS_CLIENT(c);
  const size_t sizes[4] = {1, 3, 4096, 1000003};
  cube_bytes_t* b[4] = {NULL, NULL, NULL, NULL};
  REQUIRE_OK(cube_client_reserve_staging(c, 4, sizes, b));
  int pinned = (cube_client_features(c)->bits & CUBE_FEATURE_PINNED_STAGING) != 0;
  for (int i = 0; i < 4; ++i) {
    REQUIRE(b[i]);
    CHECK_EQ_U64(cube_bytes_size(b[i]), sizes[i]);
    if (pinned) CHECK(cube_bytes_property(b[i]) == CUBE_BYTES_PINNED);
    CHECK(cube_bytes_data(b[i]) != NULL);
  }
  /* Distinct, non-overlapping buffers. */
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      if (i == j) continue;
      const uint8_t* pi = cube_bytes_const_data(b[i]);
      const uint8_t* pj = cube_bytes_const_data(b[j]);
      CHECK(pi + sizes[i] <= pj || pj + sizes[j] <= pi);
    }
  /* Write and upload. */
  uint8_t* expect[4];
  for (int i = 0; i < 4; ++i) {
    expect[i] = malloc(sizes[i]);
    REQUIRE(expect[i]);
    cube_test_fill_random(expect[i], sizes[i], 800 + i);
    memcpy(cube_bytes_data(b[i]), expect[i], sizes[i]);
  }
  cube_handle_t h[4];
  for (int i = 0; i < 4; ++i) {
    h[i] = CUBE_HANDLE_NULL;
    CHECK_OK(cube_client_create(c, b[i], &h[i])); /* consumes */
  }
  for (int i = 0; i < 4; ++i) {
    CHECK(cts_read_equals(c, h[i], expect[i], sizes[i]));
    cube_handle_release(h[i]);
    free(expect[i]);
  }
  /* count 0 is fine and writes nothing. */
  CHECK_OK(cube_client_reserve_staging(c, 0, sizes, b));
  CTS_END(c);
}

CUBE_TEST(create_from_slice_pinned) {
  CTS_CLIENT(c);
  for (size_t k = 0; k < 3; ++k) {
    size_t n = cts_odd_sizes[k];
    uint8_t* data = malloc(n);
    REQUIRE(data);
    cube_test_fill_random(data, n, 900 + k);
    cube_handle_t h = CUBE_HANDLE_NULL;
    CHECK_OK(cube_client_create_from_slice_pinned(c, data, n, &h));
    CHECK_EQ_U64(cube_handle_size(h), n);
    CHECK(cts_read_equals(c, h, data, n));
    cube_handle_release(h);
    free(data);
  }
  CTS_END(c);
}

CUBE_TEST(create_tensors_from_slices_pinned) {
  CTS_CLIENT(c);
  cube_layout_desc_t d[3];
  size_t sizes[3];
  cts_packed_descs(d, sizes);
  uint8_t buf0[60], buf1[7], buf2[192];
  uint8_t* data[3] = {buf0, buf1, buf2};
  for (int i = 0; i < 3; ++i) cube_test_fill_random(data[i], sizes[i], 1000 + i);
  const void* cdata[3] = {buf0, buf1, buf2};
  cube_tensor_t t[3];
  REQUIRE_OK(cube_client_create_tensors_from_slices_pinned(c, 3, d, cdata, sizes, t));
  cts_check_packed(c, t, d, data, sizes);
  CTS_END(c);
}

static atomic_int cts_other_released = 0;
static atomic_int cts_other_mismatch = 0;
static void cts_other_release(void* user, void* data, size_t size) {
  (void)size;
  atomic_fetch_add(&cts_other_released, 1);
  if (user != data) atomic_store(&cts_other_mismatch, 1);
  free(user);
}

/* staging(): FILE -> PINNED always; NATIVE/OTHER only when !file_only;
 * PINNED never. */
static void cts_staging_case(int file_only) {
  CTS_CLIENT(c);
  int has_pinned = (cube_client_features(c)->bits & CUBE_FEATURE_PINNED_STAGING) != 0;
  char path[512];
  cts_tmp_path(path, sizeof(path), file_only ? "cts_staging_file_only" : "cts_staging_all");
  uint8_t file[10000];
  REQUIRE(cts_write_file(path, file, sizeof(file), 1100));
  uint8_t native[777], other_copy[55];
  cube_test_fill_random(native, sizeof(native), 1101);
  cube_test_fill_random(other_copy, sizeof(other_copy), 1102);
  cube_bytes_t* b[4] = {NULL, NULL, NULL, NULL};
  REQUIRE_OK(cube_bytes_map_file(path, 1001, 4321, &b[0]));
  REQUIRE_OK(cube_bytes_from_copy(native, sizeof(native), &b[1]));
  size_t psize = 99;
  REQUIRE_OK(cube_client_reserve_staging(c, 1, &psize, &b[2]));
  cube_test_fill_random(cube_bytes_data(b[2]), psize, 1103);
  uint8_t pinned_copy[99];
  memcpy(pinned_copy, cube_bytes_const_data(b[2]), psize);
  uint8_t* other = malloc(sizeof(other_copy));
  REQUIRE(other);
  memcpy(other, other_copy, sizeof(other_copy));
  atomic_store(&cts_other_released, 0);
  REQUIRE_OK(cube_bytes_wrap(other, sizeof(other_copy), cts_other_release, other, &b[3]));
  cube_bytes_t* before[4] = {b[0], b[1], b[2], b[3]};
  cube_bytes_property_t pinned_prop = cube_bytes_property(b[2]);

  CHECK_OK(cube_client_staging(c, 4, b, file_only != 0));

  const uint8_t* expect[4] = {file + 1001, native, pinned_copy, other_copy};
  const size_t sizes[4] = {4321, sizeof(native), psize, sizeof(other_copy)};
  for (int i = 0; i < 4; ++i) {
    REQUIRE(b[i]);
    CHECK_EQ_U64(cube_bytes_size(b[i]), sizes[i]);
    CHECK(memcmp(cube_bytes_const_data(b[i]), expect[i], sizes[i]) == 0);
  }
  if (has_pinned) {
    CHECK(b[0] != before[0]);
    CHECK(cube_bytes_property(b[0]) == CUBE_BYTES_PINNED);
    if (file_only) {
      CHECK(b[1] == before[1]);
      CHECK(cube_bytes_property(b[1]) == CUBE_BYTES_NATIVE);
      CHECK(b[3] == before[3]);
      CHECK(cube_bytes_property(b[3]) == CUBE_BYTES_OTHER);
      CHECK(atomic_load(&cts_other_released) == 0);
    } else {
      CHECK(b[1] != before[1]);
      CHECK(cube_bytes_property(b[1]) == CUBE_BYTES_PINNED);
      CHECK(b[3] != before[3]);
      CHECK(cube_bytes_property(b[3]) == CUBE_BYTES_PINNED);
      CHECK(atomic_load(&cts_other_released) == 1); /* the old buffer was released */
    }
  }
  CHECK(b[2] == before[2]); /* PINNED is never restaged */
  CHECK(cube_bytes_property(b[2]) == pinned_prop);
  /* The staged buffers upload right. */
  for (int i = 0; i < 4; ++i) {
    cube_handle_t h = CUBE_HANDLE_NULL;
    CHECK_OK(cube_client_create(c, b[i], &h));
    CHECK(cts_read_equals(c, h, expect[i], sizes[i]));
    cube_handle_release(h);
  }
  CHECK(atomic_load(&cts_other_released) == 1);
  CHECK(!atomic_load(&cts_other_mismatch));
  unlink(path);
  CTS_END(c);
}

CUBE_TEST(staging_file_only) { cts_staging_case(1); }
CUBE_TEST(staging_all_eligible) { cts_staging_case(0); }

//===----------------------------------------------------------------------===//
// FILE buffers whose file changed after the mapping
//===----------------------------------------------------------------------===//

/* Shrinks |path| to |len| bytes. */
static int cts_truncate(const char* path, off_t len) { return truncate(path, len) == 0; }

/* A client still works after a failed create: a fresh upload reads back. */
static void cts_check_client_usable(cube_client_t* c) {
  uint8_t data[333];
  cube_test_fill_random(data, sizeof(data), 1300);
  cube_handle_t h = CUBE_HANDLE_NULL;
  CHECK_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  CHECK(cts_read_equals(c, h, data, sizeof(data)));
  cube_handle_release(h);
  CHECK_OK(cube_client_sync(c));
}

/* The file shrinks below the mapped region before the upload: an error
 * naming the path and both sizes, never SIGBUS; every entry point. */
CUBE_TEST(create_file_shrunk_before_upload) {
  CTS_CLIENT(c);
  char path[512], size_text[32], now_text[32];
  cts_tmp_path(path, sizeof(path), "cts_create_file_shrunk");
  const size_t file_size = 5 * 4096 + 321, offset = 4096 + 17;
  uint8_t* content = malloc(file_size);
  REQUIRE(content);
  REQUIRE(cts_write_file(path, content, file_size, 1301));
  /* Shrunk below the region's start, and into its middle. */
  const off_t shrink_to[2] = {1000, (off_t)(offset + 4096 + 5)};
  for (int k = 0; k < 2; ++k) {
    REQUIRE(cts_write_file(path, content, file_size, 1301));
    cube_bytes_t* b = NULL;
    REQUIRE_OK(cube_bytes_map_file(path, offset, 0, &b));
    REQUIRE(cts_truncate(path, shrink_to[k]));
    snprintf(size_text, sizeof(size_text), "%zu bytes", file_size - offset);
    snprintf(now_text, sizeof(now_text), "now holds %lld", (long long)shrink_to[k]);
    cube_handle_t h = CUBE_HANDLE_NULL;
    CHECK_STATUS(cube_client_create(c, b, &h), CUBE_STATUS_OUT_OF_RANGE, "cube_client_create",
                 path, size_text, now_text);
    CHECK(cube_handle_is_null(h));
  }
  /* create_tensor: the same. */
  REQUIRE(cts_write_file(path, content, file_size, 1301));
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_bytes_map_file(path, 0, 4 * 1000, &b));
  REQUIRE(cts_truncate(path, 3999));
  const uint64_t shape[2] = {10, 100};
  cube_tensor_t t;
  CHECK_STATUS(cube_client_create_tensor(c, b, 2, shape, 4, &t), CUBE_STATUS_OUT_OF_RANGE,
               "cube_client_create_tensor", path, "4000 bytes", "now holds 3999");
  /* create_tensors: one FILE buffer of three shrank; all three are consumed
   * (the OTHER buffer's release runs once). */
  REQUIRE(cts_write_file(path, content, file_size, 1301));
  cube_layout_desc_t d[3];
  size_t sizes[3];
  cts_packed_descs(d, sizes);
  cube_bytes_t* bs[3] = {NULL, NULL, NULL};
  REQUIRE_OK(cube_bytes_from_copy(content, sizes[0], &bs[0]));
  uint8_t* other = malloc(sizes[1]);
  REQUIRE(other);
  memcpy(other, content, sizes[1]);
  atomic_store(&cts_other_released, 0);
  atomic_store(&cts_other_mismatch, 0);
  REQUIRE_OK(cube_bytes_wrap(other, sizes[1], cts_other_release, other, &bs[1]));
  REQUIRE_OK(cube_bytes_map_file(path, 9, sizes[2], &bs[2]));
  REQUIRE(cts_truncate(path, 100));
  cube_tensor_t ts[3];
  CHECK_STATUS(cube_client_create_tensors(c, 3, d, bs, ts), CUBE_STATUS_OUT_OF_RANGE,
               "cube_client_create_tensors", "bytes[2]", path, "now holds 100");
  CHECK(atomic_load(&cts_other_released) == 1);
  CHECK(!atomic_load(&cts_other_mismatch));
  cts_check_client_usable(c);
  unlink(path);
  free(content);
  CTS_END(c);
}

/* staging(): a FILE entry whose file shrank is an error naming the entry;
 * the entries before it are staged, it and those after are untouched. */
CUBE_TEST(staging_file_shrunk) {
  CTS_CLIENT(c);
  int has_pinned = (cube_client_features(c)->bits & CUBE_FEATURE_PINNED_STAGING) != 0;
  char path[512];
  cts_tmp_path(path, sizeof(path), "cts_staging_file_shrunk");
  uint8_t file[20011], native[501];
  REQUIRE(cts_write_file(path, file, sizeof(file), 1310));
  cube_test_fill_random(native, sizeof(native), 1311);
  cube_bytes_t* b[3] = {NULL, NULL, NULL};
  REQUIRE_OK(cube_bytes_from_copy(native, sizeof(native), &b[0]));
  REQUIRE_OK(cube_bytes_map_file(path, 7, 0, &b[1]));
  REQUIRE_OK(cube_bytes_from_copy(native, sizeof(native), &b[2]));
  cube_bytes_t* before[3] = {b[0], b[1], b[2]};
  REQUIRE(cts_truncate(path, 4096));
  if (has_pinned) {
    CHECK_STATUS(cube_client_staging(c, 3, b, false), CUBE_STATUS_OUT_OF_RANGE,
                 "cube_client_staging", "inout_bytes[1]", path, "20004 bytes", "now holds 4096");
    CHECK(b[0] != before[0] && cube_bytes_property(b[0]) == CUBE_BYTES_PINNED);
    CHECK(memcmp(cube_bytes_const_data(b[0]), native, sizeof(native)) == 0);
    CHECK(b[1] == before[1] && cube_bytes_property(b[1]) == CUBE_BYTES_FILE);
    CHECK(b[2] == before[2] && cube_bytes_property(b[2]) == CUBE_BYTES_NATIVE);
  } else {
    /* No staging memory: staging does nothing; the create reports it. */
    CHECK_OK(cube_client_staging(c, 3, b, false));
    CHECK(b[0] == before[0] && b[1] == before[1] && b[2] == before[2]);
  }
  cube_handle_t h = CUBE_HANDLE_NULL;
  CHECK_STATUS(cube_client_create(c, b[1], &h), CUBE_STATUS_OUT_OF_RANGE, path,
               "now holds 4096");
  cube_bytes_release(b[0]);
  cube_bytes_release(b[2]);
  cts_check_client_usable(c);
  unlink(path);
  CTS_END(c);
}

/* An unchanged file uploads its bytes: random content, odd sizes at odd
 * offsets, also after the path was unlinked (the buffer holds the file). */
CUBE_TEST(create_file_unchanged_odd_sizes) {
  CTS_CLIENT(c);
  char path[512];
  cts_tmp_path(path, sizeof(path), "cts_create_file_odd");
  const size_t file_size = 1000003 + 8191;
  uint8_t* content = malloc(file_size);
  REQUIRE(content);
  REQUIRE(cts_write_file(path, content, file_size, 1320));
  const size_t offsets[3] = {0, 4095, 8191};
  for (size_t k = 0; k < 3; ++k) {
    size_t n = cts_odd_sizes[k];
    cube_bytes_t* b = NULL;
    REQUIRE_OK(cube_bytes_map_file(path, offsets[k], n, &b));
    if (k == 2) unlink(path); /* still readable through the open file */
    cube_handle_t h = CUBE_HANDLE_NULL;
    CHECK_OK(cube_client_create(c, b, &h));
    CHECK_EQ_U64(cube_handle_size(h), n);
    CHECK(cts_read_equals(c, h, content + offsets[k], n));
    cube_handle_release(h);
  }
  free(content);
  CTS_END(c);
}

/* Bytes written into the mapping (cube_bytes_data) are what is uploaded,
 * not the file's; the file keeps its content. A shrink after the write is
 * still an error. */
CUBE_TEST(create_file_written_mapping) {
  CTS_CLIENT(c);
  char path[512];
  cts_tmp_path(path, sizeof(path), "cts_create_file_written");
  const size_t file_size = 3 * 4096 + 999, offset = 123, n = 2 * 4096 + 555;
  uint8_t* content = malloc(file_size);
  uint8_t* expect = malloc(n);
  REQUIRE(content && expect);
  REQUIRE(cts_write_file(path, content, file_size, 1330));
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_bytes_map_file(path, offset, n, &b));
  /* Write the first 100 bytes and 77 bytes in the last page; the page
   * between stays the file's. */
  uint8_t* w = cube_bytes_data(b);
  cube_test_fill_random(w, 100, 1331);
  cube_test_fill_random(w + n - 77, 77, 1332);
  memcpy(expect, content + offset, n);
  memcpy(expect, w, 100);
  memcpy(expect + n - 77, w + n - 77, 77);
  CHECK(memcmp(expect, content + offset, n) != 0);
  cube_handle_t h = CUBE_HANDLE_NULL;
  CHECK_OK(cube_client_create(c, b, &h));
  CHECK(cts_read_equals(c, h, expect, n));
  cube_handle_release(h);
  /* The file was not written. */
  b = NULL;
  REQUIRE_OK(cube_bytes_map_file(path, 0, 0, &b));
  CHECK(cube_bytes_size(b) == file_size &&
        memcmp(cube_bytes_const_data(b), content, file_size) == 0);
  cube_bytes_release(b);
  /* Written into, then shrunk: an error, not a read of a page past the end. */
  b = NULL;
  REQUIRE_OK(cube_bytes_map_file(path, offset, n, &b));
  memset(cube_bytes_data(b), 0x5A, 10);
  REQUIRE(cts_truncate(path, 4096));
  char need[48];
  snprintf(need, sizeof(need), "needs a file of %zu bytes", offset + n);
  CHECK_STATUS(cube_client_create(c, b, &h), CUBE_STATUS_OUT_OF_RANGE, path, need,
               "now holds 4096");
  cts_check_client_usable(c);
  unlink(path);
  free(content);
  free(expect);
  CTS_END(c);
}

static int cts_all_zero(cube_client_t* c, cube_handle_t h, size_t n) {
  void* p = NULL;
  size_t got = 0;
  cube_status_t s = cts_read_alloc(c, h, &p, &got);
  if (s) {
    fprintf(stderr, "read failed: %s\n", cube_status_message(s));
    cube_status_free(s);
    return 0;
  }
  int ok = got == n;
  for (size_t i = 0; ok && i < n; ++i)
    if (((uint8_t*)p)[i]) ok = 0;
  free(p);
  return ok;
}

CUBE_TEST(empty_fresh_reads_zero) {
  CTS_CLIENT(c);
  for (size_t k = 0; k < 3; ++k) {
    size_t n = cts_odd_sizes[k];
    cube_handle_t h = CUBE_HANDLE_NULL;
    REQUIRE_OK(cube_client_empty(c, n, &h));
    CHECK_EQ_U64(cube_handle_size(h), n);
    CHECK(cube_handle_can_mut(h));
    if (cts_backend()->backend == CUBE_BACKEND_CPU) CHECK(cts_all_zero(c, h, n));
    cube_handle_release(h);
  }
  CTS_END(c);
}

CUBE_TEST(empty_tensor_and_tensors) {
  CTS_CLIENT(c);
  const uint64_t shape[3] = {3, 5, 7};
  cube_tensor_t t;
  REQUIRE_OK(cube_client_empty_tensor(c, 3, shape, 4, &t));
  CHECK_EQ_U64(t.rank, 3);
  CHECK_EQ_U64(t.elem_size, 4);
  CHECK(cts_tensor_layout_ok(c, &t, CUBE_LAYOUT_OPTIMIZED, NULL));
  cube_bytes_t* out = NULL;
  CHECK_OK(cube_client_read_tensor(c, 1, &t, &out));
  CHECK(out && cube_bytes_size(out) == 420);
  if (out && cts_backend()->backend == CUBE_BACKEND_CPU) {
    const uint8_t* p = cube_bytes_const_data(out);
    int zero = 1;
    for (size_t i = 0; i < 420; ++i) zero &= p[i] == 0;
    CHECK(zero);
  }
  cube_bytes_release(out);
  cube_tensor_release(&t);

  cube_layout_desc_t d[3];
  size_t sizes[3];
  cts_packed_descs(d, sizes);
  cube_tensor_t ts[3];
  REQUIRE_OK(cube_client_empty_tensors(c, 3, d, ts));
  uint64_t align = cube_client_properties(c)->memory.alignment;
  for (int i = 0; i < 3; ++i) {
    uint64_t size = 0;
    CHECK(cts_tensor_layout_ok(c, &ts[i], CUBE_LAYOUT_OPTIMIZED, &size));
    CHECK(size >= sizes[i]);
    CHECK_EQ_U64(cube_handle_offset(ts[i].handle) % align, 0);
    CHECK(!cube_handle_can_mut(ts[i].handle));
    if (cts_backend()->backend == CUBE_BACKEND_CPU) CHECK(cts_all_zero(c, ts[i].handle, sizes[i]));
  }
  cube_tensor_release_array(ts, 3);
  CTS_END(c);
}
