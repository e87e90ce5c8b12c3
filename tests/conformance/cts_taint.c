/* Failures that stay where they happen (docs/failures.md): a launch that
 * fails leaves the buffers it should have written without valid contents
 * (taint); work that uses such a buffer is not run and passes the taint on;
 * a read of one returns DATA_LOST naming the failure (kernel, stream, time)
 * and the work it spoiled; a whole write or copy makes a buffer valid again;
 * distinct failures are reported together. Chains and diamonds on several
 * streams and threads, graphs replayed natively and node by node.
 *
 * Launch failures are cts_k_fail (cts_launch_fail: the native kernel
 * returns an error, the dialect twin stores out of bounds in Validate mode);
 * writes and copies fail at the backend's own fault site (src/base/fault.h:
 * the one internal interface these cases use, so that the kernel-less
 * backends run them too). Every output starts poisoned, every input is
 * random, sizes are odd. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "base/fault.h"
#include "cts.h"
#include "cube/dlpack_types.h"

enum { TN = 1037 }; /* elements: not a multiple of any cube */

static cube_kernel_t* taint_fail_kernel(const char* name) {
  static const cube_arg_kind_t kinds[5] = {CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_U32,
                                           CUBE_ARG_U32, CUBE_ARG_I32};
  cube_kernel_t* k = NULL;
  if (cube_status_consume(
          cts_kernel_create(name, cts_k_fail, ((cube_dim_t){1, 1, 1}), 0, 5, kinds, &k)))
    return NULL;
  return k;
}

static cube_kernel_t* taint_add_kernel(const char* name) {
  static const cube_arg_kind_t kinds[4] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32,
                                           CUBE_ARG_U32};
  cube_kernel_t* k = NULL;
  if (cube_status_consume(
          cts_kernel_create(name, cts_k_add_u32, ((cube_dim_t){64, 1, 1}), 0, 4, kinds, &k)))
    return NULL;
  return k;
}

static cube_kernel_t* taint_saxpy_kernel(const char* name) {
  static const cube_arg_kind_t kinds[5] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER,
                                           CUBE_ARG_F32, CUBE_ARG_U32};
  cube_kernel_t* k = NULL;
  if (cube_status_consume(
          cts_kernel_create(name, cts_k_saxpy, ((cube_dim_t){64, 1, 1}), 0, 5, kinds, &k)))
    return NULL;
  return k;
}

/* A launch of |k| (cts_k_fail) on |h| that fails at cube (1, 0, 0). */
static cube_status_t taint_fail(cube_client_t* c, cube_kernel_t* k, cube_handle_t h, int code) {
  cube_arg_t a[5] = {cube_arg_buffer(h), cube_arg_u32(1), cube_arg_u32(0), cube_arg_u32(0),
                     cube_arg_i32(code)};
  return cts_launch_fail(c, k, cube_count_static(2, 1, 1), 5, a);
}

/* out = in + add over TN u32. */
static cube_status_t taint_add(cube_client_t* c, cube_kernel_t* k, cube_handle_t in,
                               cube_handle_t out, uint32_t add) {
  cube_arg_t a[4] = {cube_arg_buffer(in), cube_arg_buffer(out), cube_arg_u32(add),
                     cube_arg_u32(TN)};
  return cube_client_launch(c, k, cube_count_static((TN + 63) / 64, 1, 1), 4, a);
}

static void plus(const uint32_t* in, uint32_t add, uint32_t* out) {
  for (int i = 0; i < TN; ++i) out[i] = in[i] + add;
}

/* "stream <id>" of |c|'s stream. */
static const char* stream_words(cube_client_t* c, char* buf, size_t n) {
  snprintf(buf, n, "stream %llu", (unsigned long long)cube_client_stream(c));
  return buf;
}

/* How many times |word| occurs in |s|. */
static int occurrences(const char* s, const char* word) {
  int n = 0;
  for (const char* p = s; (p = strstr(p, word)) != NULL; p += strlen(word)) ++n;
  return n;
}

//===----------------------------------------------------------------------===//
// One stream
//===----------------------------------------------------------------------===//

/* fail -> X; X -> Y; Y -> Z: Y and Z are not computed, and say why; work on
 * other buffers runs; the sync reports the failure once. */
CUBE_TEST(taint_chain_names_the_root) {
  CTS_CLIENT(c);
  cube_kernel_t* f = taint_fail_kernel("taint_root");
  cube_kernel_t* add = taint_add_kernel("taint_add");
  REQUIRE(f && add);
  uint32_t in[TN], want[TN];
  cube_test_fill_random(in, sizeof(in), 31001);
  cube_handle_t hin, x, y, z, w;
  REQUIRE_OK(cube_client_create_from_slice(c, in, sizeof(in), &hin));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &x));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &y));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &z));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &w));
  CHECK_OK(taint_fail(c, f, x, 13));
  CHECK_OK(taint_add(c, add, x, y, 1));
  CHECK_OK(taint_add(c, add, y, z, 2));
  CHECK_OK(taint_add(c, add, hin, w, 5)); /* uses no spoiled buffer */
  cube_status_t s = cube_client_sync(c);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_LAUNCH_FAILED);
  CHECK_EQ_U64(cube_status_count(s), 1); /* the failure; the skipped work is no error */
  CHECK(cts_contains(cube_status_message(s), "taint_root", (const char*)NULL));
  cube_status_free(s);
  plus(in, 5, want);
  CHECK(cts_read_equals(c, w, want, sizeof(want)));
  CHECK(cts_read_equals(c, hin, in, sizeof(in))); /* only read: valid */
  char sw[48];
  stream_words(c, sw, sizeof(sw));
  /* The root: its kernel, its stream and the time it failed. */
  CHECK(cts_read_lost(c, x, "no valid contents", "launch of kernel 'taint_root' on ", sw,
                      " failed at 20", "Z: ", "(2 in all)", (const char*)NULL));
  /* Every buffer of the chain names the same root and the work it spoiled. */
  CHECK(cts_read_lost(c, z, "launch of kernel 'taint_root'", sw, "spoiled by it: ",
                      "launch of kernel 'taint_add' on", "(not run)", "(2 in all)",
                      (const char*)NULL));
  CHECK(cts_read_lost(c, y, "launch of kernel 'taint_root'", (const char*)NULL));
  /* A read of several handles: the failure once, naming the first spoiled one. */
  cube_handle_t both[3] = {w, y, z};
  cube_bytes_t* out[3] = {NULL, NULL, NULL};
  s = cube_client_read(c, 3, both, out);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_DATA_LOST);
  CHECK_EQ_U64(cube_status_count(s), 1);
  CHECK(cts_contains(cube_status_message(s), "handles[1]", "and 1 more of the 3 handles",
                     "taint_root", (const char*)NULL));
  CHECK(out[0] == NULL && out[1] == NULL && out[2] == NULL);
  cube_status_free(s);
  /* The skipped launches did not run: z still holds its poison. */
  CHECK_OK(cube_client_accept_contents(c, z));
  uint8_t poison[sizeof(in)];
  memset(poison, CTS_POISON, sizeof(poison));
  CHECK(cts_read_equals(c, z, poison, sizeof(poison)));
  /* Written whole, x is valid again; y, spoiled too, would stop a launch
   * that uses it (a kernel may read what it writes), so a retry of the
   * chain accepts it first (z was accepted above). Then the chain runs. */
  uint32_t fresh[TN];
  cube_test_fill_random(fresh, sizeof(fresh), 31002);
  CHECK_OK(cube_client_write(c, x, fresh, sizeof(fresh)));
  CHECK_OK(taint_add(c, add, x, y, 1));
  CHECK_OK(cube_client_sync(c));
  CHECK(cts_read_lost(c, y, "taint_root", (const char*)NULL)); /* not run: y was spoiled */
  CHECK_OK(cube_client_accept_contents(c, y));
  CHECK_OK(taint_add(c, add, x, y, 1));
  CHECK_OK(taint_add(c, add, y, z, 2));
  plus(fresh, 3, want);
  CHECK(cts_read_equals(c, z, want, sizeof(want)));
  CHECK_OK(cube_client_sync(c));
  cube_handle_t hs[] = {hin, x, y, z, w};
  for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); ++i) cube_handle_release(hs[i]);
  cube_kernel_release(f);
  cube_kernel_release(add);
  CTS_END(c);
}

/* Only a write or copy over the whole buffer clears a taint; a copy from a
 * spoiled buffer is not run and spoils its destination; accepting the
 * contents clears it as they are. */
CUBE_TEST(taint_cleared_by_whole_write_or_copy) {
  CTS_CLIENT(c);
  cube_kernel_t* f = taint_fail_kernel("taint_clear_root");
  REQUIRE(f);
  uint32_t data[TN], other[TN];
  cube_test_fill_random(data, sizeof(data), 32001);
  cube_test_fill_random(other, sizeof(other), 32002);
  cube_handle_t x, y, s, half;
  REQUIRE_OK(cts_poisoned(c, sizeof(data), &x));
  REQUIRE_OK(cts_poisoned(c, sizeof(data), &y));
  REQUIRE_OK(cube_client_create_from_slice(c, other, sizeof(other), &s));
  /* The first half of x (an odd number of bytes: 2074 of 4148). */
  REQUIRE_OK(cube_handle_offset_view(x, 0, sizeof(data) / 2, &half));
  CHECK_OK(taint_fail(c, f, x, 3));
  CHECK_STATUS(cube_client_sync(c), CUBE_STATUS_LAUNCH_FAILED, "taint_clear_root");
  /* A write of half: the other half is still spoiled. */
  CHECK_OK(cube_client_write(c, half, data, sizeof(data) / 2));
  CHECK(cts_read_lost(c, x, "taint_clear_root", (const char*)NULL));
  CHECK(cts_read_lost(c, half, "taint_clear_root", (const char*)NULL)); /* views share it */
  /* A copy out of x is not run: y takes x's taint, with the copy in the chain. */
  CHECK_OK(cube_client_copy(c, x, y));
  CHECK(cts_read_lost(c, y, "taint_clear_root", "copy of 4148 bytes", "(not run)",
                      (const char*)NULL));
  /* A write of all of x: valid. */
  CHECK_OK(cube_client_write(c, x, data, sizeof(data)));
  CHECK(cts_read_equals(c, x, data, sizeof(data)));
  /* Spoiled again, then a whole copy from a valid buffer: valid. */
  CHECK_OK(taint_fail(c, f, x, 4));
  CHECK_STATUS(cube_client_flush(c), CUBE_STATUS_LAUNCH_FAILED, "taint_clear_root");
  CHECK_OK(cube_client_copy(c, s, x));
  CHECK(cts_read_equals(c, x, other, sizeof(other)));
  /* y, spoiled by the copy above, is cleared by a whole copy too. */
  CHECK_OK(cube_client_copy(c, x, y));
  CHECK(cts_read_equals(c, y, other, sizeof(other)));
  /* Spoiled again, then accepted as it is (the failing kernel wrote nothing). */
  CHECK_OK(taint_fail(c, f, y, 5));
  CHECK_STATUS(cube_client_flush(c), CUBE_STATUS_LAUNCH_FAILED, "taint_clear_root");
  CHECK(cts_read_lost(c, y, "taint_clear_root", (const char*)NULL));
  CHECK_OK(cube_client_accept_contents(c, y));
  CHECK(cts_read_equals(c, y, other, sizeof(other)));
  CHECK_OK(cube_client_sync(c));
  cube_handle_t hs[] = {x, y, s, half};
  for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); ++i) cube_handle_release(hs[i]);
  cube_kernel_release(f);
  CTS_END(c);
}

/* A launch that fails on the runner (saxpy told of one element more than
 * its buffers hold: the native kernel refuses, the twin's Validate launch
 * reports the access) spoils what the kernel writes and not what it only
 * reads; a spoiled count buffer spoils the launch that reads its count. */
CUBE_TEST(taint_read_only_buffers_stay_valid) {
  CTS_CLIENT(c);
  if (!(cube_client_features(c)->bits & CUBE_FEATURE_DYNAMIC_COUNT)) {
    CTS_END(c);
    CUBE_SKIP("%s: no CUBE_FEATURE_DYNAMIC_COUNT", cts_backend()->name);
  }
  cube_kernel_t* saxpy = taint_saxpy_kernel("taint_saxpy");
  cube_kernel_t* f = taint_fail_kernel("taint_count_root");
  REQUIRE(saxpy && f);
  float xs[TN], ys[TN];
  uint32_t r[TN];
  cube_test_fill_random(r, sizeof(r), 33001);
  for (int i = 0; i < TN; ++i) {
    xs[i] = (float)(r[i] % 1000u) - 500.0f;
    ys[i] = (float)(i % 17);
  }
  cube_handle_t x, y, out, dyn;
  REQUIRE_OK(cube_client_create_from_slice(c, xs, sizeof(xs), &x));
  REQUIRE_OK(cube_client_create_from_slice(c, ys, sizeof(ys), &y));
  REQUIRE_OK(cts_poisoned(c, sizeof(xs), &out));
  const uint32_t fine[3] = {(TN + 63) / 64 + 1, 1, 1};
  REQUIRE_OK(cube_client_create_from_slice(c, fine, sizeof(fine), &dyn));
  cube_arg_t bad[5] = {cube_arg_buffer(x), cube_arg_buffer(y), cube_arg_buffer(out),
                       cube_arg_f32(2.0f), cube_arg_u32(TN + 1)};
  CHECK_OK(cts_launch_fail(c, saxpy, cube_count_dynamic(dyn), 5, bad));
  CHECK_STATUS(cube_client_sync(c), CUBE_STATUS_LAUNCH_FAILED, "taint_saxpy");
  CHECK(cts_read_equals(c, x, xs, sizeof(xs)));
  CHECK(cts_read_equals(c, y, ys, sizeof(ys)));
  CHECK(cts_read_equals(c, dyn, fine, sizeof(fine))); /* the count is read, not written */
  CHECK(cts_read_lost(c, out, "launch of kernel 'taint_saxpy'", (const char*)NULL));
  cube_arg_t a[5] = {cube_arg_buffer(x), cube_arg_buffer(y), cube_arg_buffer(out),
                     cube_arg_f32(2.0f), cube_arg_u32(TN)};
  /* A count buffer spoiled by a failure: the launch reading it is not run. */
  CHECK_OK(cube_client_write(c, out, xs, sizeof(xs))); /* valid again */
  CHECK_OK(taint_fail(c, f, dyn, 8));
  CHECK_OK(cube_client_launch(c, saxpy, cube_count_dynamic(dyn), 5, a));
  CHECK_STATUS(cube_client_sync(c), CUBE_STATUS_LAUNCH_FAILED, "taint_count_root");
  CHECK(cts_read_lost(c, out, "taint_count_root", "launch of kernel 'taint_saxpy'", "(not run)",
                      (const char*)NULL));
  cube_handle_t hs[] = {x, y, out, dyn};
  for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); ++i) cube_handle_release(hs[i]);
  cube_kernel_release(saxpy);
  cube_kernel_release(f);
  CTS_END(c);
}

/* Twenty launches spoiled by one failure: the first eight are named, all
 * are counted. */
CUBE_TEST(taint_chain_is_bounded) {
  CTS_CLIENT(c);
  cube_kernel_t* f = taint_fail_kernel("taint_bound_root");
  cube_kernel_t* add = taint_add_kernel("taint_bound_add");
  REQUIRE(f && add);
  cube_handle_t x, y;
  REQUIRE_OK(cts_poisoned(c, TN * 4, &x));
  REQUIRE_OK(cts_poisoned(c, TN * 4, &y));
  CHECK_OK(taint_fail(c, f, x, 2));
  for (uint32_t i = 0; i < 20; ++i) CHECK_OK(taint_add(c, add, x, y, i));
  cube_status_free(cube_client_sync(c));
  cube_bytes_t* b = NULL;
  cube_status_t s = cube_client_read_one(c, y, &b);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_DATA_LOST);
  const char* m = cube_status_message(s);
  CHECK(cts_contains(m, "taint_bound_root", ", ... (20 in all)", (const char*)NULL));
  CHECK_EQ_U64(occurrences(m, "launch of kernel 'taint_bound_add'"), 8);
  if (!cts_contains(m, ", ... (20 in all)", (const char*)NULL)) fprintf(stderr, "%s\n", m);
  cube_status_free(s);
  cube_handle_release(x);
  cube_handle_release(y);
  cube_kernel_release(f);
  cube_kernel_release(add);
  CTS_END(c);
}

/* Fails the next call of |slot| of the backend under test. */
static void taint_fault_next(cube__backend_slot_t slot) {
  cube__fault_reset();
  cube__fault_set(cube__fault_backend_site((unsigned)cts_backend()->backend, (unsigned)slot), 1,
                  1);
}

/* Spoils |h|: a write of |n| bytes from |data| into it that fails at the
 * backend's fault site (reported by the sync, which clears the stream). */
static void taint_spoil_by_write(cube_client_t* c, cube_handle_t h, const void* data, size_t n) {
  taint_fault_next(CUBE__SLOT_WRITE);
  CHECK_OK(cube_client_write(c, h, data, n));
  CHECK_STATUS(cube_client_sync(c), CUBE_STATUS_INTERNAL, "injected fault");
  cube__fault_reset();
}

/* Writes and copies without kernels (every backend, the null one too): a
 * write that fails spoils its buffer; a copy out of a spoiled buffer is not
 * run and spoils its destination; a copy that fails spoils its destination
 * and not its source; an upload that fails spoils the new buffer; a read of
 * several spoiled buffers reports their distinct failures together; a whole
 * write or copy makes a buffer valid again. */
CUBE_TEST(taint_failed_write_and_copy) {
  CTS_CLIENT(c);
  uint32_t a[TN], b[TN], d[TN];
  uint8_t poison[TN * 4];
  memset(poison, CTS_POISON, sizeof(poison));
  cube_test_fill_random(a, sizeof(a), 37001);
  cube_test_fill_random(b, sizeof(b), 37002);
  cube_test_fill_random(d, sizeof(d), 37003);
  cube_handle_t h, dst, half;
  REQUIRE_OK(cube_client_create_from_slice(c, a, sizeof(a), &h));
  REQUIRE_OK(cts_poisoned(c, sizeof(a), &dst));
  REQUIRE_OK(cube_handle_offset_view(h, 4, 0, &half)); /* all but the first element */
  CHECK_OK(cube_client_sync(c));
  char sw[48];
  stream_words(c, sw, sizeof(sw));
  /* A write that fails: the error once, then the buffer says why. */
  taint_spoil_by_write(c, h, b, sizeof(b));
  CHECK(cts_read_lost(c, h, "no valid contents", "write of 4148 bytes into memory", sw,
                      " failed at 20", "injected fault", (const char*)NULL));
  /* A copy out of it is not run; its destination takes the taint. */
  CHECK_OK(cube_client_copy(c, h, dst));
  CHECK_OK(cube_client_sync(c));
  CHECK(cts_read_lost(c, dst, "write of 4148 bytes into memory", "spoiled by it: ",
                      "copy of 4148 bytes from memory", "(not run)", "(1 in all)",
                      (const char*)NULL));
  CHECK_OK(cube_client_accept_contents(c, dst));
  CHECK(cts_read_equals(c, dst, poison, sizeof(poison))); /* it did not run */
  /* All but the first element: still spoiled. Then all of it: valid. */
  CHECK_OK(cube_client_write(c, half, b + 1, sizeof(b) - 4));
  CHECK(cts_read_lost(c, h, "write of 4148 bytes", (const char*)NULL));
  CHECK_OK(cube_client_write(c, h, b, sizeof(b)));
  CHECK(cts_read_equals(c, h, b, sizeof(b)));
  /* A copy that fails: the destination is spoiled, the source is not. */
  taint_fault_next(CUBE__SLOT_COPY);
  CHECK_OK(cube_client_copy(c, h, dst));
  CHECK_STATUS(cube_client_sync(c), CUBE_STATUS_INTERNAL, "injected fault");
  cube__fault_reset();
  CHECK(cts_read_equals(c, h, b, sizeof(b)));
  CHECK(cts_read_lost(c, dst, "copy of 4148 bytes from memory", "injected fault", sw,
                      (const char*)NULL));
  /* Retried, the copy makes it valid. */
  CHECK_OK(cube_client_copy(c, h, dst));
  CHECK(cts_read_equals(c, dst, b, sizeof(b)));
  /* An upload that fails: the new buffer holds nothing valid. */
  cube_handle_t up;
  taint_fault_next(CUBE__SLOT_WRITE);
  cube_status_t s = cube_client_create_from_slice(c, d, sizeof(d), &up);
  if (s) {
    /* Refused at once: nothing made. */
    CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_INTERNAL);
    cube_status_free(s);
    cube__fault_reset();
    REQUIRE_OK(cts_poisoned(c, sizeof(d), &up));
  } else {
    CHECK_STATUS(cube_client_sync(c), CUBE_STATUS_INTERNAL, "injected fault");
    cube__fault_reset();
    CHECK(cts_read_lost(c, up, "write of 4148 bytes into memory", "injected fault",
                        (const char*)NULL));
  }
  /* Two distinct failures, one read: both reported, in the order they
   * happened; the clean buffer between them is read by nobody. */
  taint_fault_next(CUBE__SLOT_WRITE);
  CHECK_OK(cube_client_write(c, h, a, sizeof(a)));
  CHECK_STATUS(cube_client_sync(c), CUBE_STATUS_INTERNAL, "injected fault");
  taint_fault_next(CUBE__SLOT_COPY);
  CHECK_OK(cube_client_copy(c, h, dst)); /* not run: h is spoiled */
  CHECK_OK(cube_client_sync(c));
  CHECK_OK(cube_client_write(c, dst, d, sizeof(d))); /* valid again */
  CHECK_OK(cube_client_accept_contents(c, up));
  CHECK_OK(cube_client_copy(c, dst, up)); /* this one fails */
  CHECK_STATUS(cube_client_sync(c), CUBE_STATUS_INTERNAL, "injected fault");
  cube__fault_reset();
  cube_handle_t three[3] = {dst, h, up};
  cube_bytes_t* out[3] = {NULL, NULL, NULL};
  s = cube_client_read(c, 3, three, out);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_DATA_LOST);
  CHECK_EQ_U64(cube_status_count(s), 2);
  const char* m = cube_status_message(s);
  CHECK(cts_contains(m, "handles[1]", "and 1 more of the 3 handles", "write of 4148 bytes",
                     "copy of 4148 bytes", "injected fault", (const char*)NULL));
  const char* w = strstr(m, "write of 4148 bytes");
  const char* cp = strstr(m, "copy of 4148 bytes from");
  CHECK(w && cp && w < cp);
  CHECK(out[0] == NULL && out[1] == NULL && out[2] == NULL);
  cube_status_free(s);
  CHECK(cts_read_equals(c, dst, d, sizeof(d)));
  /* Whole writes: every one valid. */
  CHECK_OK(cube_client_write(c, h, a, sizeof(a)));
  CHECK_OK(cube_client_write(c, up, b, sizeof(b)));
  CHECK(cts_read_equals(c, h, a, sizeof(a)));
  CHECK(cts_read_equals(c, up, b, sizeof(b)));
  CHECK_OK(cube_client_sync(c));
  cube_handle_t hs[] = {h, dst, half, up};
  for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); ++i) cube_handle_release(hs[i]);
  CTS_END(c);
}

/* A DLPack export hands the memory to a consumer that reads it as valid: an
 * ordered export (the stream waited for, or a native stream) of a spoiled
 * buffer, or of a view of one, is refused with DATA_LOST naming the failure,
 * and no tensor is made; an unordered one (CUBE_DLPACK_STREAM_NONE) is not
 * checked; written whole, the buffer exports again. */
CUBE_TEST(taint_dlpack_export_refused) {
  CTS_CLIENT(c);
  int32_t type = -1, id = -1;
  cube_status_t s = cube_client_dlpack_device(c, &type, &id);
  if (cube_status_code(s) == CUBE_STATUS_UNIMPLEMENTED) {
    cube_status_free(s);
    CTS_END(c);
    CUBE_SKIP("%s: no DLPack", cts_backend()->name);
  }
  CHECK_OK(s);
  uint32_t a[TN], b[TN];
  cube_test_fill_random(a, sizeof(a), 39001);
  cube_test_fill_random(b, sizeof(b), 39002);
  cube_handle_t h, view;
  REQUIRE_OK(cube_client_create_from_slice(c, a, sizeof(a), &h));
  REQUIRE_OK(cube_handle_offset_view(h, 4, 8, &view));
  CHECK_OK(cube_client_sync(c)); /* the upload is done: the fault hits the write */
  taint_spoil_by_write(c, h, b, sizeof(b));
  const int64_t shape[1] = {TN}, vshape[1] = {TN - 3};
  cube_dlpack_export_t e, ev;
  REQUIRE_OK(cube_dlpack_export_initialize(h, cube_dlpack_dtype(CUBE_DLPACK_UINT, 32), 1, shape,
                                           &e));
  REQUIRE_OK(cube_dlpack_export_initialize(view, cube_dlpack_dtype(CUBE_DLPACK_UINT, 32), 1,
                                           vshape, &ev));
  struct DLManagedTensorVersioned* t = NULL;
  struct DLManagedTensor* lt = NULL;
  CHECK_STATUS(cube_client_to_dlpack(c, &e, &t), CUBE_STATUS_DATA_LOST, "cube_client_to_dlpack",
               "export of memory", "no valid contents", "write of 4148 bytes", "injected fault");
  CHECK(t == NULL);
  CHECK_STATUS(cube_client_to_dlpack_legacy(c, &ev, &lt), CUBE_STATUS_DATA_LOST,
               "cube_client_to_dlpack_legacy", "no valid contents", "injected fault");
  CHECK(lt == NULL);
  /* Unordered: handed out as it is (docs/failures.md, "Limits"). */
  e.stream = CUBE_DLPACK_STREAM_NONE;
  CHECK_OK(cube_client_to_dlpack(c, &e, &t));
  if (t) t->deleter(t);
  t = NULL;
  /* Written whole: valid, exported, and the view too. */
  e.stream = CUBE_DLPACK_STREAM_WAIT;
  CHECK_OK(cube_client_write(c, h, b, sizeof(b)));
  CHECK_OK(cube_client_to_dlpack(c, &e, &t));
  CHECK_OK(cube_client_to_dlpack_legacy(c, &ev, &lt));
  if (t && type == 1) CHECK(memcmp(t->dl_tensor.data, b, sizeof(b)) == 0);
  if (t) t->deleter(t);
  if (lt) lt->deleter(lt);
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(view);
  cube_handle_release(h);
  CTS_END(c);
}

/* A collective runs on a spoiled input (the other participants wait for
 * it) and passes the taint to what it writes; one over a valid input makes
 * its output valid again. One device, no kernels. */
CUBE_TEST(taint_collective_follows_its_input) {
  CTS_CLIENT(c);
  if (!(cube_client_features(c)->bits & CUBE_FEATURE_COLLECTIVES)) {
    CTS_END(c);
    CUBE_SKIP("%s: no collectives", cts_backend()->name);
  }
  cube_device_id_t devs[1] = {cts_device(0)};
  CHECK_OK(cube_client_ensure_init_collective(c, 1, devs));
  float v[TN], w[TN];
  uint32_t r[TN];
  cube_test_fill_random(r, sizeof(r), 38001);
  for (int i = 0; i < TN; ++i) {
    v[i] = (float)(r[i] % 2000u) - 1000.0f;
    w[i] = (float)(r[i] % 77u);
  }
  cube_handle_t src, dst, copy;
  REQUIRE_OK(cube_client_create_from_slice(c, v, sizeof(v), &src));
  REQUIRE_OK(cts_poisoned(c, sizeof(v), &dst));
  REQUIRE_OK(cts_poisoned(c, sizeof(v), &copy));
  CHECK_OK(cube_client_sync(c));
  taint_spoil_by_write(c, src, w, sizeof(w));
  CHECK_OK(cube_client_all_reduce(c, src, dst, CUBE_DTYPE_F32, 1, devs, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_send(c, src, devs[0]));
  CHECK_OK(cube_client_recv(c, copy, devs[0]));
  CHECK_OK(cube_client_sync_collective(c));
  CHECK_OK(cube_client_sync(c));
  CHECK(cts_read_lost(c, dst, "write of 4148 bytes into memory", "injected fault",
                      "all_reduce of 4148 bytes", "(ran on invalid contents)", (const char*)NULL));
  /* The recv of a spoiled send takes the send's taint (in its stream's
   * order, at the sync_collective), not only the bytes. */
  CHECK(cts_read_lost(c, copy, "write of 4148 bytes into memory", "injected fault",
                      "recv of 4148 bytes", "(ran on invalid contents)", (const char*)NULL));
  CHECK_OK(cube_client_write(c, src, w, sizeof(w)));
  CHECK_OK(cube_client_all_reduce(c, src, dst, CUBE_DTYPE_F32, 1, devs, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_send(c, src, devs[0]));
  CHECK_OK(cube_client_recv(c, copy, devs[0]));
  CHECK_OK(cube_client_sync_collective(c));
  CHECK(cts_read_equals(c, dst, w, sizeof(w)));
  CHECK(cts_read_equals(c, copy, w, sizeof(w)));
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(src);
  cube_handle_release(dst);
  cube_handle_release(copy);
  CTS_END(c);
}

/* Two devices of one process: the taint of one participant's input reaches
 * every participant's output (an all_reduce's on both devices, a recv's on
 * the other device), named by the write that failed; with valid inputs
 * again, the outputs are the operation's and valid. A failure found after
 * the parts ran (participants that disagree on the size) spoils the
 * destinations it left unwritten. */
CUBE_TEST(taint_collective_crosses_participants) {
  CTS_REQUIRE_DEVICES(2);
  CTS_CLIENT(c0);
  cube_client_t* c1 = NULL;
  REQUIRE_OK(cube_client_load(cts_device(1), &c1));
  if (!(cube_client_features(c0)->bits & CUBE_FEATURE_COLLECTIVES)) {
    cube_client_release(c1);
    CTS_END(c0);
    CUBE_SKIP("%s: no collectives", cts_backend()->name);
  }
  const cube_device_id_t devs[2] = {cts_device(0), cts_device(1)};
  CHECK_OK(cube_client_ensure_init_collective(c0, 2, devs));
  CHECK_OK(cube_client_ensure_init_collective(c1, 2, devs));
  float v[TN], w[TN], x[TN], sum[TN];
  uint32_t r[TN];
  cube_test_fill_random(r, sizeof(r), 38002);
  for (int i = 0; i < TN; ++i) {
    v[i] = (float)(r[i] % 2000u) - 1000.0f;
    w[i] = (float)((r[i] >> 11) % 300u);
    x[i] = (float)((r[i] >> 20) % 50u) - 25.0f;
  }
  cube_handle_t s0, s1, d0, d1, got;
  REQUIRE_OK(cube_client_create_from_slice(c0, v, sizeof(v), &s0));
  REQUIRE_OK(cube_client_create_from_slice(c1, w, sizeof(w), &s1));
  REQUIRE_OK(cts_poisoned(c0, sizeof(v), &d0));
  REQUIRE_OK(cts_poisoned(c1, sizeof(v), &d1));
  REQUIRE_OK(cts_poisoned(c1, sizeof(v), &got));
  CHECK_OK(cube_client_sync(c0));
  CHECK_OK(cube_client_sync(c1));
  /* Device 0's input spoiled: the write of x into it fails. */
  taint_spoil_by_write(c0, s0, x, sizeof(x));
  CHECK_OK(cube_client_all_reduce(c0, s0, d0, CUBE_DTYPE_F32, 2, devs, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_all_reduce(c1, s1, d1, CUBE_DTYPE_F32, 2, devs, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_send(c0, s0, devs[1]));
  CHECK_OK(cube_client_recv(c1, got, devs[0]));
  CHECK_OK(cube_client_sync_collective(c0));
  CHECK_OK(cube_client_sync_collective(c1));
  CHECK(cts_read_lost(c0, d0, "write of 4148 bytes into memory", "injected fault",
                      "all_reduce of 4148 bytes", "(ran on invalid contents)", (const char*)NULL));
  CHECK(cts_read_lost(c1, d1, "write of 4148 bytes into memory", "injected fault",
                      "all_reduce of 4148 bytes", "(ran on invalid contents)", (const char*)NULL));
  CHECK(cts_read_lost(c1, got, "write of 4148 bytes into memory", "injected fault",
                      "recv of 4148 bytes", (const char*)NULL));
  /* Valid inputs again: valid outputs, the operation's. */
  CHECK_OK(cube_client_write(c0, s0, x, sizeof(x)));
  for (int i = 0; i < TN; ++i) sum[i] = x[i] + w[i];
  CHECK_OK(cube_client_all_reduce(c0, s0, d0, CUBE_DTYPE_F32, 2, devs, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_all_reduce(c1, s1, d1, CUBE_DTYPE_F32, 2, devs, CUBE_REDUCE_SUM));
  CHECK_OK(cube_client_send(c0, s0, devs[1]));
  CHECK_OK(cube_client_recv(c1, got, devs[0]));
  CHECK_OK(cube_client_sync_collective(c0));
  CHECK_OK(cube_client_sync_collective(c1));
  CHECK(cts_read_equals(c0, d0, sum, sizeof(sum)));
  CHECK(cts_read_equals(c1, d1, sum, sizeof(sum)));
  CHECK(cts_read_equals(c1, got, x, sizeof(x)));
  /* Device 1's input spoiled, and many operations before a sync_collective:
   * those the stream forgets as done (settled by the next part) pass the
   * taint too. */
  taint_spoil_by_write(c1, s1, v, sizeof(v));
  for (int k = 0; k < 5; ++k) {
    CHECK_OK(cube_client_all_reduce(c0, s0, d0, CUBE_DTYPE_F32, 2, devs, CUBE_REDUCE_MAX));
    CHECK_OK(cube_client_all_reduce(c1, s1, d1, CUBE_DTYPE_F32, 2, devs, CUBE_REDUCE_MAX));
    CHECK_OK(cube_client_sync(c0)); /* the part ran: the next one settles it */
  }
  CHECK_OK(cube_client_sync_collective(c0));
  CHECK_OK(cube_client_sync_collective(c1));
  CHECK(cts_read_lost(c0, d0, "injected fault", "all_reduce of 4148 bytes", (const char*)NULL));
  CHECK(cts_read_lost(c1, d1, "injected fault", "all_reduce of 4148 bytes", (const char*)NULL));
  CHECK(cts_read_equals(c1, got, x, sizeof(x))); /* not touched since */
  CHECK_OK(cube_client_sync(c0));
  CHECK_OK(cube_client_sync(c1));
  cube_handle_t hs[] = {s0, s1, d0, d1, got};
  for (size_t i = 0; i < 5; ++i) cube_handle_release(hs[i]);
  cube_client_release(c1);
  CTS_END(c0);
}

//===----------------------------------------------------------------------===//
// Several streams and threads
//===----------------------------------------------------------------------===//

/* Two failures on two streams, one launch reading both spoiled buffers: its
 * output reports both, together; each stream's sync reports its own. */
CUBE_TEST(taint_two_failures_reported_together) {
  CTS_CLIENT(c);
  cube_client_t* p = NULL;
  REQUIRE_OK(cube_client_clone(c, &p));
  cube_client_set_stream(p, cube_stream_id_new());
  cube_kernel_t* f1 = taint_fail_kernel("taint_first");
  cube_kernel_t* f2 = taint_fail_kernel("taint_second");
  cube_kernel_t* saxpy = taint_saxpy_kernel("taint_join");
  REQUIRE(f1 && f2 && saxpy);
  cube_handle_t x1, x2, w;
  REQUIRE_OK(cts_poisoned(c, TN * 4, &x1));
  REQUIRE_OK(cts_poisoned(c, TN * 4, &x2));
  REQUIRE_OK(cts_poisoned(c, TN * 4, &w));
  CHECK_OK(taint_fail(c, f1, x1, 21));
  CHECK_OK(taint_fail(p, f2, x2, 22));
  cube_arg_t a[5] = {cube_arg_buffer(x1), cube_arg_buffer(x2), cube_arg_buffer(w),
                     cube_arg_f32(1.0f), cube_arg_u32(TN)};
  CHECK_OK(cube_client_launch(c, saxpy, cube_count_static((TN + 63) / 64, 1, 1), 5, a));
  CHECK_STATUS(cube_client_sync(p), CUBE_STATUS_LAUNCH_FAILED, "taint_second");
  cube_bytes_t* b = NULL;
  cube_status_t s = cube_client_read_one(c, w, &b);
  /* c's own deferred failure first, then w's two roots. */
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_LAUNCH_FAILED);
  cube_status_free(s);
  s = cube_client_read_one(c, w, &b);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_DATA_LOST);
  CHECK_EQ_U64(cube_status_count(s), 2);
  char s1[48], s2[48];
  const char* m = cube_status_message(s);
  CHECK(cts_contains(m, "launch of kernel 'taint_first' on", stream_words(c, s1, sizeof(s1)),
                     "launch of kernel 'taint_second' on", stream_words(p, s2, sizeof(s2)),
                     "launch of kernel 'taint_join'", (const char*)NULL));
  /* In the order they failed. */
  const char* one = strstr(m, "taint_first");
  const char* two = strstr(m, "taint_second");
  CHECK(one && two && one < two);
  cube_status_free(s);
  CHECK(b == NULL);
  CHECK_OK(cube_client_sync(c));
  cube_handle_t hs[] = {x1, x2, w};
  for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); ++i) cube_handle_release(hs[i]);
  cube_kernel_release(f1);
  cube_kernel_release(f2);
  cube_kernel_release(saxpy);
  cube_client_release(p);
  CTS_END(c);
}

/* A diamond over three streams, two of them driven by threads of their own
 * that also run clean chains: root -> x on the main stream; y = x + 1 and
 * z = x + 2 on the two threads; w = y + z back on the main stream. w names
 * the one root and the three launches it spoiled; the clean chains are
 * exact. */
typedef struct taint_branch {
  cube_client_t* client;
  cube_kernel_t* add;
  cube_handle_t x, out;
  uint32_t add_value;
  uint64_t seed;
  int bad; /* clean-chain mismatches and failed calls */
} taint_branch_t;

static void* taint_branch_main(void* arg) {
  taint_branch_t* b = arg;
  cube_client_set_stream(b->client, cube_stream_id_new());
  if (taint_add(b->client, b->add, b->x, b->out, b->add_value)) b->bad++;
  /* A clean chain of this thread's own, random data, checked. */
  for (int round = 0; round < 4; ++round) {
    uint32_t in[TN], want[TN];
    cube_test_fill_random(in, sizeof(in), b->seed + (uint64_t)round);
    cube_handle_t hin, h1, h2;
    if (cube_status_consume(cube_client_create_from_slice(b->client, in, sizeof(in), &hin)) ||
        cube_status_consume(cts_poisoned(b->client, sizeof(in), &h1)) ||
        cube_status_consume(cts_poisoned(b->client, sizeof(in), &h2))) {
      b->bad++;
      continue;
    }
    if (taint_add(b->client, b->add, hin, h1, 7) || taint_add(b->client, b->add, h1, h2, 9))
      b->bad++;
    plus(in, 16, want);
    if (!cts_read_equals(b->client, h2, want, sizeof(want))) b->bad++;
    cube_handle_release(hin);
    cube_handle_release(h1);
    cube_handle_release(h2);
  }
  return NULL;
}

CUBE_TEST(taint_diamond_across_streams_and_threads) {
  CTS_CLIENT(c);
  cube_kernel_t* f = taint_fail_kernel("taint_diamond_root");
  cube_kernel_t* add = taint_add_kernel("taint_branch");
  cube_kernel_t* saxpy = taint_saxpy_kernel("taint_merge");
  REQUIRE(f && add && saxpy);
  cube_handle_t x, y, z, w;
  REQUIRE_OK(cts_poisoned(c, TN * 4, &x));
  REQUIRE_OK(cts_poisoned(c, TN * 4, &y));
  REQUIRE_OK(cts_poisoned(c, TN * 4, &z));
  REQUIRE_OK(cts_poisoned(c, TN * 4, &w));
  CHECK_OK(taint_fail(c, f, x, 31));
  CHECK_STATUS(cube_client_sync(c), CUBE_STATUS_LAUNCH_FAILED, "taint_diamond_root");
  taint_branch_t br[2] = {{NULL, add, x, y, 1, 34000, 0}, {NULL, add, x, z, 2, 35000, 0}};
  pthread_t th[2];
  for (int i = 0; i < 2; ++i) {
    REQUIRE_OK(cube_client_clone(c, &br[i].client));
    REQUIRE(pthread_create(&th[i], NULL, taint_branch_main, &br[i]) == 0);
  }
  for (int i = 0; i < 2; ++i) pthread_join(th[i], NULL);
  for (int i = 0; i < 2; ++i) {
    CHECK_EQ_U64(br[i].bad, 0);
    CHECK_OK(cube_client_sync(br[i].client)); /* a skipped launch is no error */
  }
  cube_arg_t a[5] = {cube_arg_buffer(y), cube_arg_buffer(z), cube_arg_buffer(w),
                     cube_arg_f32(1.0f), cube_arg_u32(TN)};
  CHECK_OK(cube_client_launch(c, saxpy, cube_count_static((TN + 63) / 64, 1, 1), 5, a));
  CHECK_OK(cube_client_sync(c));
  cube_bytes_t* b = NULL;
  cube_status_t s = cube_client_read_one(c, w, &b);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_DATA_LOST);
  CHECK_EQ_U64(cube_status_count(s), 1); /* one root, reached two ways */
  const char* m = cube_status_message(s);
  CHECK(cts_contains(m, "taint_diamond_root", "launch of kernel 'taint_merge'", "(3 in all)",
                     (const char*)NULL));
  CHECK_EQ_U64(occurrences(m, "launch of kernel 'taint_branch'"), 2);
  for (int i = 0; i < 2; ++i) {
    char sw[48];
    CHECK(strstr(m, stream_words(br[i].client, sw, sizeof(sw))) != NULL);
  }
  if (cube_status_count(s) != 1) fprintf(stderr, "%s\n", m);
  cube_status_free(s);
  for (int i = 0; i < 2; ++i) cube_client_release(br[i].client);
  cube_handle_t hs[] = {x, y, z, w};
  for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); ++i) cube_handle_release(hs[i]);
  cube_kernel_release(f);
  cube_kernel_release(add);
  cube_kernel_release(saxpy);
  CTS_END(c);
}

//===----------------------------------------------------------------------===//
// Graphs
//===----------------------------------------------------------------------===//

/* Backends whose graphs replay natively (with native kernels). */
static bool taint_native_graphs(void) {
  return cts_native_kernels() && (cts_backend()->backend == CUBE_BACKEND_CUDA ||
                                  cts_backend()->backend == CUBE_BACKEND_CPU);
}

/* A replayed node that fails taints as its eager launch does; the nodes
 * after it that use what it spoiled pass the taint on: not run when the
 * replay goes node by node, run on the poisoned contents (and said so) when
 * it is native. A graph replayed over a spoiled buffer skips the nodes that
 * use it and runs the others. */
static void taint_graph_round(cube_client_t* c, bool native) {
  cube_kernel_t* f = taint_fail_kernel("taint_graph_root");
  cube_kernel_t* add = taint_add_kernel("taint_graph_add");
  REQUIRE(f && add);
  uint32_t in[TN], want[TN];
  uint8_t poison[TN * 4];
  memset(poison, CTS_POISON, sizeof(poison));
  cube_handle_t hin, x, y, z, w;
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &hin));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &x));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &y));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &z));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &w));
  /* fail -> x; y = x + 1; w = copy of y; z = in + 2. The failing launch is
   * Checked with native kernels (a Validate launch keeps a graph off the
   * native path), the twin's Validate launch otherwise. */
  cube_arg_t fa[5] = {cube_arg_buffer(x), cube_arg_u32(1), cube_arg_u32(0), cube_arg_u32(0),
                      cube_arg_i32(41)};
  REQUIRE_OK(cube_client_capture_begin(c));
  CHECK_OK(cts_native_kernels() ? cube_client_launch(c, f, cube_count_static(2, 1, 1), 5, fa)
                                : taint_fail(c, f, x, 41));
  CHECK_OK(taint_add(c, add, x, y, 1));
  CHECK_OK(cube_client_copy(c, y, w));
  CHECK_OK(taint_add(c, add, hin, z, 2));
  cube_graph_t* g = NULL;
  REQUIRE_OK(cube_client_capture_end(c, &g));
  const char* how = native ? "(ran on invalid contents)" : "(not run)";
  for (int round = 0; round < 3; ++round) {
    cube_test_fill_random(in, sizeof(in), 36000 + (uint64_t)round);
    CHECK_OK(cube_client_write(c, hin, in, sizeof(in)));
    /* x, y, w valid before each replay (the last one spoiled them): the
     * replay may run natively. */
    CHECK_OK(cube_client_write(c, x, poison, sizeof(poison)));
    CHECK_OK(cube_client_write(c, y, poison, sizeof(poison)));
    CHECK_OK(cube_client_write(c, w, poison, sizeof(poison)));
    CHECK_OK(cube_client_replay(c, g, 0, NULL));
    cube_status_t s = cube_client_flush(c);
    CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_LAUNCH_FAILED);
    CHECK_EQ_U64(cube_status_count(s), 1);
    CHECK(cts_contains(cube_status_message(s), "taint_graph_root", (const char*)NULL));
    cube_status_free(s);
    CHECK(cts_read_lost(c, x, "launch of kernel 'taint_graph_root' (node 0 of a graph)",
                        " failed at 20", (const char*)NULL));
    CHECK(cts_read_lost(c, y, "launch of kernel 'taint_graph_root' (node 0 of a graph)",
                        "launch of kernel 'taint_graph_add' (node 1 of a graph)", how,
                        (const char*)NULL));
    CHECK(cts_read_lost(c, w, "launch of kernel 'taint_graph_root' (node 0 of a graph)",
                        "launch of kernel 'taint_graph_add' (node 1 of a graph)", "copy of 4148 bytes",
                        how, "(2 in all)", (const char*)NULL));
    plus(in, 2, want);
    CHECK(cts_read_equals(c, z, want, sizeof(want)));
    /* What the spoiled nodes left: poison + 1 where they ran, poison where not. */
    CHECK_OK(cube_client_accept_contents(c, w));
    uint32_t got[TN], p32[TN];
    memcpy(p32, poison, sizeof(p32));
    plus(p32, 1, want);
    CHECK_OK(cube_client_read_into(c, w, got, sizeof(got)));
    CHECK(memcmp(got, native ? (const void*)want : (const void*)poison, sizeof(got)) == 0);
  }
  CHECK(cube_graph_is_native(g) == native);
  /* A graph without the failing node, replayed over x spoiled eagerly. */
  REQUIRE_OK(cube_client_capture_begin(c));
  CHECK_OK(taint_add(c, add, x, y, 1));
  CHECK_OK(taint_add(c, add, hin, z, 3));
  cube_graph_t* g2 = NULL;
  REQUIRE_OK(cube_client_capture_end(c, &g2));
  /* x and y valid again, then x spoiled eagerly (a launch on a spoiled
   * buffer would not run, failing kernel or not). */
  CHECK_OK(cube_client_write(c, x, poison, sizeof(poison)));
  CHECK_OK(cube_client_write(c, y, poison, sizeof(poison)));
  CHECK_OK(taint_fail(c, f, x, 42));
  CHECK_STATUS(cube_client_flush(c), CUBE_STATUS_LAUNCH_FAILED, "taint_graph_root");
  CHECK_OK(cube_client_replay(c, g2, 0, NULL));
  CHECK_OK(cube_client_flush(c));
  char sw[48];
  CHECK(cts_read_lost(c, y, "launch of kernel 'taint_graph_root' on", stream_words(c, sw, sizeof(sw)),
                      "launch of kernel 'taint_graph_add' (node 0 of a graph)", "(not run)",
                      (const char*)NULL));
  plus(in, 3, want);
  CHECK(cts_read_equals(c, z, want, sizeof(want)));
  CHECK(cts_read_lost(c, y, "taint_graph_root", (const char*)NULL)); /* still */
  /* x written whole and y accepted: the same graph computes y. */
  CHECK_OK(cube_client_write(c, x, in, sizeof(in)));
  CHECK_OK(cube_client_accept_contents(c, y));
  CHECK_OK(cube_client_replay(c, g2, 0, NULL));
  plus(in, 1, want);
  CHECK(cts_read_equals(c, y, want, sizeof(want)));
  CHECK_OK(cube_client_sync(c));
  cube_graph_release(g);
  cube_graph_release(g2);
  cube_handle_t hs[] = {hin, x, y, z, w};
  for (size_t i = 0; i < sizeof(hs) / sizeof(hs[0]); ++i) cube_handle_release(hs[i]);
  cube_kernel_release(f);
  cube_kernel_release(add);
}

CUBE_TEST(taint_graph_replay_like_eager) {
  CTS_CLIENT(c);
  taint_graph_round(c, taint_native_graphs());
  REQUIRE_OK(cube_option_set_u64(CUBE_OPTION_GRAPHS_NATIVE, 0));
  taint_graph_round(c, false);
  REQUIRE_OK(cube_option_set_u64(CUBE_OPTION_GRAPHS_NATIVE, 1));
  CTS_END(c);
}
