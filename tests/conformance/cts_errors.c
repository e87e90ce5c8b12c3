/* Deferred (stream) errors (docs/cubecl.md, "Deferred errors"): a failing launch returns OK and
 * its failure comes back from the next flush, sync or read on the stream,
 * once. The buffer a failed launch should have written holds no valid
 * contents afterwards (taint: cts_taint.c has its cases), so a case that
 * fails launches on one buffer again and again writes it whole in between. */
#include <stdlib.h>
#include <string.h>

#include "cts.h"

#define CTS_FAIL_KERNEL(var, name)                                                         \
  CTS_KERNEL(var, name, cts_k_fail, 1, 0, CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_U32,     \
             CUBE_ARG_U32, CUBE_ARG_I32)

/* Launches |k| over (4, 3, 2) cubes failing at (x, y, z) with |code|
 * (cts_launch_fail: Validate mode, which the dialect twin needs). */
static cube_status_t cts_fail_at(cube_client_t* c, cube_kernel_t* k, cube_handle_t h, uint32_t x,
                                 uint32_t y, uint32_t z, int code) {
  cube_arg_t a[5] = {cube_arg_buffer(h), cube_arg_u32(x), cube_arg_u32(y), cube_arg_u32(z),
                     cube_arg_i32(code)};
  return cts_launch_fail(c, k, cube_count_static(4, 3, 2), 5, a);
}

/* The failing cube's position as the native kernel's message gives it
 * ("2, 1, 1"); "" without native kernels (the dialect twin's failure names
 * the kernel and an out-of-bounds index, not the cube). */
static const char* cts_pos(const char* native_text) { return cts_native_kernels() ? native_text : ""; }

typedef cube_status_t (*cts_report_fn)(cube_client_t* c);
static cube_status_t cts_report_flush(cube_client_t* c) { return cube_client_flush(c); }
static cube_status_t cts_report_sync(cube_client_t* c) { return cube_client_sync(c); }

static void cts_deferred_case(cts_report_fn report) {
  CTS_CLIENT(c);
  CTS_FAIL_KERNEL(k, "cts_failing_kernel");
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 64, &h));
  CHECK_OK(cts_fail_at(c, k, h, 2, 1, 1, 42)); /* the launch itself is fine */
  cube_status_t s = report(c);
  CHECK(cube_status_code(s) == CUBE_STATUS_LAUNCH_FAILED);
  CHECK(cts_contains(cube_status_message(s), "cts_failing_kernel", cts_pos("2, 1, 1"), (const char*)NULL));
  CHECK_EQ_U64(cube_status_count(s), 1);
  if (!cts_contains(cube_status_message(s), "cts_failing_kernel", cts_pos("2, 1, 1"), (const char*)NULL))
    fprintf(stderr, "message: %s\n", cube_status_message(s));
  cube_status_free(s);
  CHECK_OK(report(c)); /* cleared */
  CHECK_OK(cube_client_flush(c));
  CHECK_OK(cube_client_sync(c));
  /* A launch that does not fail leaves the stream clean. */
  CHECK_OK(cts_fail_at(c, k, h, 9, 9, 9, 42));
  CHECK_OK(report(c));
  cube_handle_release(h);
  cube_kernel_release(k);
  CTS_END(c);
}

CUBE_TEST(errors_deferred_to_flush) { cts_deferred_case(cts_report_flush); }
CUBE_TEST(errors_deferred_to_sync) { cts_deferred_case(cts_report_sync); }

CUBE_TEST(errors_deferred_to_read) {
  CTS_CLIENT(c);
  CTS_FAIL_KERNEL(k, "cts_failing_read");
  uint8_t data[33];
  cube_test_fill_random(data, sizeof(data), 6000);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  CHECK_OK(cts_fail_at(c, k, h, 0, 0, 0, -1));
  cube_bytes_t* b = NULL;
  CHECK_STATUS(cube_client_read_one(c, h, &b), CUBE_STATUS_LAUNCH_FAILED, "cts_failing_read");
  CHECK(b == NULL);
  /* The error was taken; the buffer says why it holds nothing valid until
   * it is written whole. */
  CHECK(cts_read_lost(c, h, "cts_failing_read", (const char*)NULL));
  CHECK_OK(cube_client_write(c, h, data, sizeof(data)));
  CHECK(cts_read_equals(c, h, data, sizeof(data))); /* the next read works */
  /* read_async: the future carries the error. */
  CHECK_OK(cts_fail_at(c, k, h, 3, 2, 1, 5));
  cube_future_t* f = NULL;
  REQUIRE_OK(cube_client_read_async(c, 1, &h, &f));
  CHECK_STATUS(cube_future_wait(f, UINT64_MAX, &b), CUBE_STATUS_LAUNCH_FAILED, "cts_failing_read",
               cts_pos("3, 2, 1"));
  CHECK(b == NULL);
  cube_future_release(f);
  CHECK_OK(cube_client_flush(c));
  CHECK_OK(cube_client_write(c, h, data, sizeof(data)));
  /* sync_async too. */
  CHECK_OK(cts_fail_at(c, k, h, 1, 0, 0, 5));
  REQUIRE_OK(cube_client_sync_async(c, &f));
  CHECK_STATUS(cube_future_wait(f, UINT64_MAX, NULL), CUBE_STATUS_LAUNCH_FAILED, "cts_failing_read");
  cube_future_release(f);
  CHECK_OK(cube_client_sync(c));
  CHECK_OK(cube_client_write(c, h, data, sizeof(data)));
  /* read_into: the error, and the caller's memory untouched. */
  CHECK_OK(cts_fail_at(c, k, h, 0, 0, 0, -1));
  uint8_t into[33];
  memset(into, CTS_POISON, sizeof(into));
  CHECK_STATUS(cube_client_read_into(c, h, into, sizeof(into)), CUBE_STATUS_LAUNCH_FAILED,
               "cts_failing_read");
  for (size_t i = 0; i < sizeof(into); ++i) CHECK(into[i] == CTS_POISON);
  CHECK_STATUS(cube_client_read_into(c, h, into, sizeof(into)), CUBE_STATUS_DATA_LOST,
               "cts_failing_read", "no valid contents");
  for (size_t i = 0; i < sizeof(into); ++i) CHECK(into[i] == CTS_POISON);
  CHECK_OK(cube_client_write(c, h, data, sizeof(data)));
  CHECK_OK(cube_client_read_into(c, h, into, sizeof(into)));
  CHECK(memcmp(into, data, sizeof(data)) == 0);
  /* read_tensor as well. */
  const uint64_t shape[1] = {33};
  cube_tensor_t t;
  REQUIRE_OK(cube_client_create_tensor_from_slice(c, data, sizeof(data), 1, shape, 1, &t));
  /* A failure on h: the stream's deferred error comes back from a read of
   * another buffer, which the failure did not spoil. */
  CHECK_OK(cts_fail_at(c, k, h, 0, 1, 0, 5));
  CHECK_STATUS(cube_client_read_tensor(c, 1, &t, &b), CUBE_STATUS_LAUNCH_FAILED, "cts_failing_read");
  CHECK(b == NULL);
  CHECK_OK(cube_client_read_tensor(c, 1, &t, &b));
  cube_bytes_release(b);
  cube_tensor_release(&t);
  cube_handle_release(h);
  cube_kernel_release(k);
  CTS_END(c);
}

CUBE_TEST(errors_two_failures_one_status) {
  CTS_CLIENT(c);
  CTS_FAIL_KERNEL(k1, "cts_fail_one");
  CTS_FAIL_KERNEL(k2, "cts_fail_two");
  cube_handle_t h, h2;
  REQUIRE_OK(cube_client_empty(c, 8, &h));
  REQUIRE_OK(cube_client_empty(c, 8, &h2));
  CHECK_OK(cts_fail_at(c, k1, h, 1, 1, 1, 1));
  CHECK_OK(cts_fail_at(c, k2, h2, 3, 2, 0, 2)); /* another buffer: h holds nothing valid */
  cube_status_t s = cube_client_sync(c);
  CHECK(cube_status_code(s) == CUBE_STATUS_LAUNCH_FAILED);
  CHECK_EQ_U64(cube_status_count(s), 2);
  CHECK(cts_contains(cube_status_message(s), "cts_fail_one", "cts_fail_two", (const char*)NULL));
  if (!cts_contains(cube_status_message(s), "cts_fail_one", "cts_fail_two", (const char*)NULL))
    fprintf(stderr, "message: %s\n", cube_status_message(s));
  cube_status_free(s);
  s = cube_client_sync(c);
  CHECK(s == CUBE_OK);
  CHECK_EQ_U64(cube_status_count(s), 0);
  cube_status_free(s);
  CHECK_EQ_U64(cube_status_count(CUBE_OK), 0);
  cube_handle_release(h);
  cube_handle_release(h2);
  cube_kernel_release(k1);
  cube_kernel_release(k2);
  CTS_END(c);
}

static cube_status_t cts_noop(void* p) {
  (void)p;
  return CUBE_OK;
}

CUBE_TEST(errors_memory_usage_while_pending) {
  CTS_CLIENT(c);
  CTS_FAIL_KERNEL(k, "cts_fail_usage");
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 8, &h));
  cube_memory_usage_t u;
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_OK(cts_fail_at(c, k, h, 0, 0, 0, 3));
  /* Everything queued before an exclusive call has run when it runs. */
  CHECK_OK(cube_client_exclusive(c, cts_noop, NULL));
  CHECK_STATUS(cube_client_memory_usage(c, &u), CUBE_STATUS_FAILED_PRECONDITION, "cube_client_memory_usage");
  /* The device-wide sum does not fail; the error is still there after. */
  CHECK_OK(cube_client_memory_usage_device(c, &u));
  CHECK_STATUS(cube_client_flush(c), CUBE_STATUS_LAUNCH_FAILED, "cts_fail_usage");
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.number_allocs, 1);
  cube_handle_release(h);
  cube_kernel_release(k);
  CTS_END(c);
}

/* memory_usage right after a failing launch, without waiting first: it is
 * ordered after the launch (as CubeCL's blocking memory_usage). In queued
 * mode a gate (cts_gate_hold) holds the device; another thread opens it a little
 * later, so a memory_usage that does not wait for the queue answers before
 * the failure happened. (A correct library passes whatever the timing.) */
static void* cts_open_gate_later(void* p) {
  (void)p;
  cts_sleep_ms(300);
  cts_gate_open();
  return NULL;
}

CUBE_TEST(errors_memory_usage_ordered_after_launch) {
  CTS_CLIENT(c);
  CTS_FAIL_KERNEL(k, "cts_fail_usage2");
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 8, &h));
  pthread_t opener;
  int queued = !cube_client_is_blocking(c);
  if (queued) REQUIRE(cts_gate_hold(c));
  CHECK_OK(cts_fail_at(c, k, h, 0, 0, 0, 3));
  if (queued) REQUIRE(pthread_create(&opener, NULL, cts_open_gate_later, NULL) == 0);
  cube_memory_usage_t u;
  CHECK_STATUS(cube_client_memory_usage(c, &u), CUBE_STATUS_FAILED_PRECONDITION, "cube_client_memory_usage");
  if (queued) pthread_join(opener, NULL);
  cube_status_free(cube_client_flush(c));
  CHECK_OK(cube_client_flush(c));
  cube_handle_release(h);
  cube_kernel_release(k);
  CTS_END(c);
}

CUBE_TEST(errors_dynamic_count_too_small) {
  CTS_CLIENT(c);
  CTS_FAIL_KERNEL(k, "cts_dyn_small");
  uint32_t xy[2] = {1, 1};
  cube_handle_t d8, h, v;
  REQUIRE_OK(cube_client_create_from_slice(c, xy, 8, &d8));
  REQUIRE_OK(cube_client_empty(c, 64, &h));
  cube_arg_t a[5] = {cube_arg_buffer(h), cube_arg_u32(0), cube_arg_u32(0), cube_arg_u32(0), cube_arg_i32(1)};
  CHECK_STATUS(cts_launch_fail(c, k, cube_count_dynamic(d8), 5, a), CUBE_STATUS_INVALID_ARGUMENT,
               "cts_dyn_small", "12");
  /* A view of 11 bytes of a larger buffer is too small as well. */
  REQUIRE_OK(cube_handle_offset_view(h, 0, 64 - 11, &v));
  CHECK_STATUS(cts_launch_fail(c, k, cube_count_dynamic(v), 5, a), CUBE_STATUS_INVALID_ARGUMENT,
               "dynamic");
  /* Nothing ran, nothing is pending. */
  CHECK_OK(cube_client_sync(c));
  /* A released count handle. */
  cube_handle_release(d8);
  CHECK_STATUS(cts_launch_fail(c, k, cube_count_dynamic(d8), 5, a), CUBE_STATUS_NOT_FOUND, "released");
  CHECK_STATUS(cts_launch_fail(c, k, cube_count_dynamic(CUBE_HANDLE_NULL), 5, a),
               CUBE_STATUS_INVALID_ARGUMENT, "null");
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(v);
  cube_handle_release(h);
  cube_kernel_release(k);
  CTS_END(c);
}

/* Work that does not use the failed launch's buffers still runs. */
CUBE_TEST(errors_work_after_failure_still_runs) {
  CTS_CLIENT(c);
  CTS_FAIL_KERNEL(k, "cts_fail_then_work");
  CTS_KERNEL(add, "add", cts_k_add_u32, 8, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_U32);
  uint32_t in[40];
  cube_test_fill_random(in, sizeof(in), 6100);
  cube_handle_t hi, ho, hf;
  REQUIRE_OK(cube_client_create_from_slice(c, in, sizeof(in), &hi));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &ho));
  REQUIRE_OK(cts_poisoned(c, sizeof(in), &hf));
  CHECK_OK(cts_fail_at(c, k, hf, 0, 0, 0, 9));
  cube_arg_t args[4] = {cube_arg_buffer(hi), cube_arg_buffer(ho), cube_arg_u32(2), cube_arg_u32(40)};
  CHECK_OK(cube_client_launch(c, add, cube_count_static(5, 1, 1), 4, args));
  CHECK_STATUS(cube_client_sync(c), CUBE_STATUS_LAUNCH_FAILED, "cts_fail_then_work");
  for (int i = 0; i < 40; ++i) in[i] += 2;
  CHECK(cts_read_equals(c, ho, in, sizeof(in)));
  CHECK(cts_read_lost(c, hf, "cts_fail_then_work", (const char*)NULL));
  cube_handle_release(hi);
  cube_handle_release(ho);
  cube_handle_release(hf);
  cube_kernel_release(k);
  cube_kernel_release(add);
  CTS_END(c);
}
