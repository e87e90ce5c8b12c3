// cube-test-libs: cube_static
/* The backend boundary: the registry's validation of tables, the wrappers
 * (NULL fallbacks, one fault site per backend and slot, the trace hook) and
 * the null backend, the skeleton a new backend is copied from. */
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "base/fault.h"
#include "check.h"
#include "cube/cube.h"

//===----------------------------------------------------------------------===//
// Validation of tables
//===----------------------------------------------------------------------===//

CUBE_TEST(validate_refuses_other_versions_and_missing_slots) {
  cube__backend_vtable_t t = cube__backend_null;
  CHECK_OK(cube__backend_validate(&t));
  t.api_version = 1;
  CHECK_STATUS(cube__backend_validate(&t), CUBE_STATUS_UNAVAILABLE, "backend null",
               "API version 1", "uses 6");
  t = cube__backend_null;
  t.launch = NULL;
  CHECK_STATUS(cube__backend_validate(&t), CUBE_STATUS_UNAVAILABLE, "backend null", "lacks launch");
  t = cube__backend_null;
  t.event_sync = NULL; /* events come as a set */
  CHECK_STATUS(cube__backend_validate(&t), CUBE_STATUS_UNAVAILABLE, "event slots");
  t = cube__backend_null;
  t.dealloc_on = NULL;
  CHECK_STATUS(cube__backend_validate(&t), CUBE_STATUS_UNAVAILABLE, "alloc_on or dealloc_on");
  t = cube__backend_null;
  t.host_dealloc = NULL;
  CHECK_STATUS(cube__backend_validate(&t), CUBE_STATUS_UNAVAILABLE, "host_alloc or host_dealloc");
  CHECK_STATUS(cube__backend_validate(NULL), CUBE_STATUS_UNAVAILABLE, "no backend table");
  /* A table with only the required slots is valid, and the wrappers give the
   * fallbacks of the optional ones. */
  t = cube__backend_null;
  t.host_alloc = NULL;
  t.host_dealloc = NULL;
  t.stream_create = NULL;
  t.stream_destroy = NULL;
  t.prepare = NULL;
  t.sync = NULL;
  t.alloc_on = NULL;
  t.dealloc_on = NULL;
  t.trim = NULL;
  t.event_record = NULL;
  t.event_wait = NULL;
  t.event_done = NULL;
  t.event_sync = NULL;
  t.event_destroy = NULL;
  t.event_elapsed = NULL;
  t.ctl = NULL;
  t.copy = NULL;
  CHECK_OK(cube__backend_validate(&t));
  setenv("CUBE_NULL_DEVICES", "1", 1);
  cube__backend_t be = {&t, NULL, 0, NULL, NULL};
  cube_device_properties_t p;
  cube_features_t f;
  cube_backend_info_t info;
  REQUIRE_OK(t.device_create(0, NULL, &be.device, &p, &f, &info));
  void* stream = (void*)1;
  CHECK_OK(cube__backend_stream_create(&be, 3, &stream));
  CHECK(stream == NULL);
  CHECK(!cube__backend_has_host_storage(&be));
  cube__storage_t st;
  CHECK_STATUS(cube__backend_host_alloc(&be, 64, &st), CUBE_STATUS_UNIMPLEMENTED,
               "null:0 has no pinned host memory");
  CHECK(!cube__backend_has_prepare(&be));
  CHECK_OK(cube__backend_sync(&be, NULL));
  cube__backend_trim(&be, NULL);
  CHECK(!cube__backend_has_events(&be));
  void* ev = (void*)1;
  CHECK_STATUS(cube__backend_event_record(&be, NULL, &ev), CUBE_STATUS_UNIMPLEMENTED,
               "no events");
  CHECK(ev == NULL);
  CHECK(cube__backend_event_done(&be, NULL));
  uint32_t ordinal;
  CHECK_STATUS(cube__backend_ctl(&be, NULL, CUBE__CTL_NATIVE_ORDINAL, &ordinal),
               CUBE_STATUS_UNIMPLEMENTED, "null:0", "control operation 2");
  /* alloc without alloc_on. */
  REQUIRE_OK(cube__backend_alloc(&be, NULL, 100, &st));
  CHECK_EQ_U64(st.size, 100);
  cube__backend_dealloc(&be, NULL, &st);
  /* copy without the slot: through host memory, in pieces of the bounce
   * size (three here, the last short), each a read and a write. */
  CHECK(!cube__backend_has_copy(&be));
  uint64_t n = 2 * CUBE__BACKEND_COPY_BOUNCE + 12345;
  cube__storage_t from, to;
  REQUIRE_OK(cube__backend_alloc(&be, NULL, n + 7, &from));
  REQUIRE_OK(cube__backend_alloc(&be, NULL, n + 9, &to));
  uint8_t* data = malloc((size_t)n);
  uint8_t* back = malloc((size_t)n);
  REQUIRE(data && back);
  cube_test_fill_random(data, (size_t)n, 4712);
  REQUIRE_OK(cube__backend_write(&be, NULL, &from, 7, n, data, n, 1));
  cube__fault_reset();
  cube__fault_site_t read_site = cube__fault_backend_site(CUBE_BACKEND_NULL, CUBE__SLOT_READ);
  cube__fault_site_t write_site = cube__fault_backend_site(CUBE_BACKEND_NULL, CUBE__SLOT_WRITE);
  CHECK_OK(cube__backend_copy(&be, NULL, &to, 9, &from, 7, n));
  CHECK_EQ_U64(cube__fault_calls(read_site), 3);
  CHECK_EQ_U64(cube__fault_calls(write_site), 3);
  memset(back, 0, (size_t)n);
  REQUIRE_OK(cube__backend_read(&be, NULL, back, &to, 9, n, n, 1));
  CHECK(memcmp(back, data, (size_t)n) == 0);
  /* A failed piece names the copy, the piece and the failure. */
  cube__fault_set(write_site, 2, 1);
  CHECK_STATUS(cube__backend_copy(&be, NULL, &to, 9, &from, 7, n), CUBE_STATUS_INTERNAL,
               "null:0: copy through host memory", "bytes [4194304, 8388608)",
               "null write of 4194304 bytes", "injected fault");
  cube__fault_reset();
  CHECK_OK(cube__backend_copy(&be, NULL, &to, 0, &from, 0, 0));
  cube__backend_dealloc(&be, NULL, &from);
  cube__backend_dealloc(&be, NULL, &to);
  free(data);
  free(back);
  t.device_destroy(be.device);
}

//===----------------------------------------------------------------------===//
// The null backend
//===----------------------------------------------------------------------===//

CUBE_TEST(null_has_no_devices_by_default) {
  unsetenv("CUBE_NULL_DEVICES");
  const cube__backend_vtable_t* n = &cube__backend_null;
  CHECK_OK(n->availability());
  CHECK_EQ_U64(n->device_count(), 0);
  CHECK_EQ_U64(cube_test_device_count(CUBE_BACKEND_NULL), 0);
  cube_client_t* c = NULL;
  CHECK_STATUS(cube_client_load((cube_device_id_t){CUBE_BACKEND_NULL, 0}, &c),
               CUBE_STATUS_NOT_FOUND, "null:0 does not exist", "0 devices");
  /* The environment is read again after cube_shutdown. */
  setenv("CUBE_NULL_DEVICES", "17", 1);
  cube_shutdown();
  /* Malformed: counted as unset, refused by device creation and by every
   * entry point. */
  CHECK_OK(n->availability());
  CHECK_EQ_U64(n->device_count(), 0);
  cube_device_properties_t p;
  cube_features_t f;
  cube_backend_info_t info;
  cube__backend_device_t* dev = NULL;
  CHECK_STATUS(n->device_create(0, NULL, &dev, &p, &f, &info), CUBE_STATUS_INVALID_ARGUMENT,
               "CUBE_NULL_DEVICES", "'17'", "[0, 16]");
  CHECK_STATUS(cube_backend_status(CUBE_BACKEND_NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "CUBE_NULL_DEVICES", "'17'", "[0, 16]");
  setenv("CUBE_NULL_DEVICES", "3", 1);
  cube_shutdown();
  CHECK_EQ_U64(n->device_count(), 3);
  unsetenv("CUBE_NULL_DEVICES");
  cube_shutdown();
}

CUBE_TEST(null_device_copies_rows_and_refuses_launches) {
  setenv("CUBE_NULL_DEVICES", "2", 1);
  const cube__backend_vtable_t* n = &cube__backend_null;
  cube__backend_t be = {n, NULL, 1, NULL, NULL};
  cube_device_properties_t p;
  cube_features_t f;
  cube_backend_info_t info;
  REQUIRE_OK(cube__backend_device_create(&be, CUBE_BACKEND_NULL, 1, NULL, &p, &f, &info));
  CHECK(strncmp(p.name, "null:1", 6) == 0);
  CHECK(p.id.backend == CUBE_BACKEND_NULL && p.id.index == 1);
  CHECK(!(f.bits & CUBE_FEATURE_NATIVE_KERNELS));
  CHECK_EQ_U64(info.device_count, 2);
  CHECK(strcmp(info.name, "null") == 0);
  /* Rows with a pitch: 7 rows of 13 bytes, 32 bytes apart, random data. */
  cube__storage_t st;
  REQUIRE_OK(cube__backend_alloc(&be, NULL, 7 * 32 + 5, &st));
  uint8_t src[7 * 13], back[7 * 13];
  cube_test_fill_random(src, sizeof(src), 4711);
  memset(back, 0xCD, sizeof(back));
  void* stream = NULL;
  REQUIRE_OK(cube__backend_stream_create(&be, 9, &stream));
  CHECK(stream != NULL);
  CHECK_OK(cube__backend_write(&be, stream, &st, 5, 32, src, 13, 7));
  CHECK_OK(cube__backend_read(&be, stream, back, &st, 5, 32, 13, 7));
  CHECK(memcmp(src, back, sizeof(src)) == 0);
  /* Past the end of the storage: OUT_OF_RANGE naming the numbers. */
  CHECK_STATUS(cube__backend_write(&be, stream, &st, 5, 32, src, 13, 8), CUBE_STATUS_OUT_OF_RANGE,
               "null:1", "overruns storage");
  /* The copy slot: 91 bytes from one storage into another, then within one
   * storage into a range apart from the source; past the end refused. */
  CHECK(cube__backend_has_copy(&be));
  cube__storage_t st2;
  REQUIRE_OK(cube__backend_alloc(&be, NULL, 300, &st2));
  uint8_t flat[91], got[91];
  cube_test_fill_random(flat, sizeof(flat), 4713);
  CHECK_OK(cube__backend_write(&be, stream, &st, 3, 91, flat, 91, 1));
  CHECK_OK(cube__backend_copy(&be, stream, &st2, 201, &st, 3, 91));
  CHECK_OK(cube__backend_copy(&be, stream, &st2, 17, &st2, 201, 91));
  memset(got, 0, sizeof(got));
  CHECK_OK(cube__backend_read(&be, stream, got, &st2, 17, 91, 91, 1));
  CHECK(memcmp(got, flat, sizeof(flat)) == 0);
  CHECK_STATUS(cube__backend_copy(&be, stream, &st2, 210, &st, 3, 91), CUBE_STATUS_OUT_OF_RANGE,
               "null:1", "copy of 91 bytes", "overruns");
  cube__backend_dealloc(&be, NULL, &st2);
  /* Events: done when recorded; elapsed between two is >= 0. */
  void* e0 = NULL;
  void* e1 = NULL;
  REQUIRE_OK(cube__backend_event_record(&be, stream, &e0));
  REQUIRE_OK(cube__backend_event_record(&be, stream, &e1));
  CHECK(cube__backend_event_done(&be, e0));
  uint64_t ns = UINT64_MAX;
  CHECK_OK(cube__backend_event_elapsed(&be, e0, e1, &ns));
  CHECK(ns < 1000000000ull);
  cube__backend_event_destroy(&be, e0);
  cube__backend_event_destroy(&be, e1);
  /* ctl: the ordinal; anything else is UNIMPLEMENTED. */
  uint32_t ordinal = 99;
  CHECK_OK(cube__backend_ctl(&be, NULL, CUBE__CTL_NATIVE_ORDINAL, &ordinal));
  CHECK_EQ_U64(ordinal, 1);
  void* ctx = NULL;
  CHECK_STATUS(cube__backend_ctl(&be, NULL, CUBE__CTL_NATIVE_CONTEXT, &ctx),
               CUBE_STATUS_UNIMPLEMENTED, "null:1", "control operation 1");
  /* Launches are refused, naming the kernel. */
  cube__launch_t l;
  memset(&l, 0, sizeof(l));
  l.name = "some_kernel";
  CHECK_STATUS(cube__backend_launch(&be, stream, &l), CUBE_STATUS_UNIMPLEMENTED, "some_kernel",
               "runs no kernels");
  cube__backend_stream_destroy(&be, stream);
  cube__backend_dealloc(&be, NULL, &st);
  cube__backend_device_destroy(&be);
  CHECK(be.device == NULL);
  unsetenv("CUBE_NULL_DEVICES");
}

/* Through the public API: uploads are queued (no host memory cap), reads
 * copy, and two devices share a collective through the staged transport. */
CUBE_TEST(null_through_the_client) {
  setenv("CUBE_NULL_DEVICES", "2", 1);
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_NULL, 0}, &c));
  uint8_t data[1000];
  cube_test_fill_random(data, sizeof(data), 99);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_client_read_one(c, h, &b));
  CHECK_EQ_U64(cube_bytes_size(b), sizeof(data));
  CHECK(memcmp(cube_bytes_const_data(b), data, sizeof(data)) == 0);
  cube_bytes_release(b);
  const char* detail = NULL;
  const char* t = cube_collective_transport(CUBE_BACKEND_NULL, &detail);
  REQUIRE(t != NULL);
  CHECK(strcmp(t, "staged") == 0);
  cube_handle_release(h);
  cube_client_release(c);
  cube_shutdown();
  unsetenv("CUBE_NULL_DEVICES");
}

//===----------------------------------------------------------------------===//
// Wrappers: fault sites named after the backend, and the trace hook
//===----------------------------------------------------------------------===//

/* Device 0 of the null backend, through its wrappers (one device). */
static cube_status_t null_device_open(cube__backend_t* be) {
  setenv("CUBE_NULL_DEVICES", "1", 1);
  *be = (cube__backend_t){&cube__backend_null, NULL, 0, NULL, NULL};
  cube_device_properties_t p;
  cube_features_t f;
  cube_backend_info_t info;
  return cube__backend_device_create(be, CUBE_BACKEND_NULL, 0, NULL, &p, &f, &info);
}

CUBE_TEST(fault_sites_are_per_backend) {
  cube__fault_site_t s;
  REQUIRE(cube__fault_site_parse("null_write", 10, &s));
  CHECK(s == cube__fault_backend_site(CUBE_BACKEND_NULL, CUBE__SLOT_WRITE));
  CHECK(strcmp(cube__fault_site_name(s), "null_write") == 0);
  REQUIRE(cube__fault_site_parse("CUDA_LAUNCH", 11, &s)); /* case-insensitive */
  CHECK(s == CUBE__FAULT_CUDA_LAUNCH);
  CHECK(strcmp(cube__fault_site_name(CUBE__FAULT_CPU_ALLOC), "cpu_alloc") == 0);
  CHECK(strcmp(cube__fault_site_name(CUBE__FAULT_OPENCL_HOST_ALLOC), "opencl_host_alloc") == 0);
  CHECK(strcmp(cube__fault_site_name(CUBE__FAULT_KERNEL_COMPILE), "kernel_compile") == 0);
  CHECK(!cube__fault_site_parse("cpu_nothing", 11, &s));
  /* Every site has a distinct name. */
  for (unsigned i = 0; i < CUBE__FAULT_SITE_COUNT; ++i)
    for (unsigned j = i + 1; j < CUBE__FAULT_SITE_COUNT; ++j)
      CHECK(strcmp(cube__fault_site_name((cube__fault_site_t)i),
                   cube__fault_site_name((cube__fault_site_t)j)) != 0);

  cube__backend_t be;
  REQUIRE_OK(null_device_open(&be));
  cube__storage_t st;
  REQUIRE_OK(cube__backend_alloc(&be, NULL, 64, &st));
  uint8_t buf[64] = {1, 2, 3};
  /* The CPU's write site does not touch the null backend; null's does. */
  cube__fault_reset();
  cube__fault_set(CUBE__FAULT_CPU_WRITE, 1, 1);
  CHECK_OK(cube__backend_write(&be, NULL, &st, 0, 64, buf, 64, 1));
  cube__fault_set(cube__fault_backend_site(CUBE_BACKEND_NULL, CUBE__SLOT_WRITE), 2, 1);
  CHECK_OK(cube__backend_write(&be, NULL, &st, 0, 64, buf, 64, 1));
  CHECK_STATUS(cube__backend_write(&be, NULL, &st, 0, 64, buf, 64, 1), CUBE_STATUS_INTERNAL,
               "null write of 64 bytes", "injected fault");
  CHECK_OK(cube__backend_write(&be, NULL, &st, 0, 64, buf, 64, 1));
  CHECK_EQ_U64(cube__fault_calls(cube__fault_backend_site(CUBE_BACKEND_NULL, CUBE__SLOT_WRITE)),
               3);
  CHECK_EQ_U64(cube__fault_calls(CUBE__FAULT_CPU_WRITE), 0);
  cube__fault_set(cube__fault_backend_site(CUBE_BACKEND_NULL, CUBE__SLOT_ALLOC), 1, 1);
  cube__storage_t st2;
  CHECK_STATUS(cube__backend_alloc(&be, NULL, 64, &st2), CUBE_STATUS_OUT_OF_MEMORY,
               "null:0: allocation of 64 bytes failed", "injected fault");
  /* The copy site, last of the fallible slots. */
  REQUIRE(cube__fault_site_parse("null_copy", 9, &s));
  CHECK(s == cube__fault_backend_site(CUBE_BACKEND_NULL, CUBE__SLOT_COPY));
  CHECK(strcmp(cube__backend_slot_name(CUBE__SLOT_COPY), "copy") == 0);
  CHECK_EQ_U64(CUBE__SLOT_COPY, CUBE__SLOT_FALLIBLE - 1);
  REQUIRE_OK(cube__backend_alloc(&be, NULL, 64, &st2));
  cube__fault_set(s, 1, 1);
  CHECK_STATUS(cube__backend_copy(&be, NULL, &st2, 0, &st, 0, 64), CUBE_STATUS_INTERNAL,
               "null copy of 64 bytes from storage", "injected fault");
  CHECK_OK(cube__backend_copy(&be, NULL, &st2, 0, &st, 0, 64));
  cube__backend_dealloc(&be, NULL, &st2);
  cube__fault_reset();
  cube__backend_dealloc(&be, NULL, &st);
  cube__backend_device_destroy(&be);
  unsetenv("CUBE_NULL_DEVICES");
}

/* write_held without the slot (the null backend has none): the wrapper
 * calls write, through write's fault site, and takes no reference to the
 * owner (the caller's release is the last one). With the slot (OpenCL) the
 * same site fails it: tests/unit/test_opencl_backend.c. */
static int held_fallback_released;
static void held_fallback_release(void* user, void* data, size_t size) {
  (void)user;
  (void)size;
  free(data);
  held_fallback_released++;
}

CUBE_TEST(write_held_falls_back_to_write) {
  CHECK(cube__backend_null.write_held == NULL);
  cube__backend_t be;
  REQUIRE_OK(null_device_open(&be));
  CHECK(!cube__backend_has_write_held(&be));
  enum { N = 1000 };
  cube__storage_t st;
  REQUIRE_OK(cube__backend_alloc(&be, NULL, N + 24, &st));
  uint8_t* data = malloc(N);
  REQUIRE(data);
  cube_test_fill_random(data, N, 4242);
  uint8_t want[N];
  memcpy(want, data, N);
  cube_bytes_t* owner = NULL;
  REQUIRE_OK(cube_bytes_wrap(data, N, held_fallback_release, NULL, &owner));
  cube__fault_reset();
  cube__fault_site_t site = cube__fault_backend_site(CUBE_BACKEND_NULL, CUBE__SLOT_WRITE);
  cube__fault_set(site, 1, 1);
  CHECK_STATUS(cube__backend_write_held(&be, NULL, &st, 24, N, data, N, 1, owner),
               CUBE_STATUS_INTERNAL, "null write of 1000 bytes", "injected fault");
  CHECK_OK(cube__backend_write_held(&be, NULL, &st, 24, N, data, N, 1, owner));
  CHECK_EQ_U64(cube__fault_calls(site), 2);
  cube_bytes_release(owner); /* the last reference: nothing kept it */
  CHECK_EQ_U64(held_fallback_released, 1);
  uint8_t back[N];
  memset(back, 0x5A, N);
  REQUIRE_OK(cube__backend_read(&be, NULL, back, &st, 24, N, N, 1));
  CHECK(memcmp(back, want, N) == 0);
  /* No owner: write, as cube__backend_write. */
  CHECK_OK(cube__backend_write_held(&be, NULL, &st, 0, 24, want, 24, 1, NULL));
  cube__fault_reset();
  cube__backend_dealloc(&be, NULL, &st);
  cube__backend_device_destroy(&be);
  unsetenv("CUBE_NULL_DEVICES");
}

typedef struct trace_log {
  int calls;
  int before, after;
  int slots[CUBE__SLOT_COUNT];
  int last_status;
  char backend[16];
} trace_log_t;

static void trace_hook(void* user, const cube__backend_call_t* call) {
  trace_log_t* t = user;
  t->calls++;
  if (call->status < 0) {
    t->before++;
    t->slots[call->slot]++;
  } else {
    t->after++;
    t->last_status = call->status;
  }
  snprintf(t->backend, sizeof(t->backend), "%s", call->backend);
}

CUBE_TEST(trace_hook_sees_every_call) {
  setenv("CUBE_CPU_DEVICES", "1", 1);
  trace_log_t log;
  memset(&log, 0, sizeof(log));
  cube__backend_set_trace(trace_hook, &log);
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &c));
  uint8_t data[256];
  cube_test_fill_random(data, sizeof(data), 5);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_client_read_one(c, h, &b));
  CHECK(memcmp(cube_bytes_const_data(b), data, sizeof(data)) == 0);
  cube_bytes_release(b);
  cube__backend_set_trace(NULL, NULL);
  CHECK_EQ_U64(log.slots[CUBE__SLOT_DEVICE_CREATE], 1);
  CHECK(log.slots[CUBE__SLOT_ALLOC] >= 1);
  CHECK_EQ_U64(log.slots[CUBE__SLOT_WRITE], 1);
  CHECK_EQ_U64(log.slots[CUBE__SLOT_READ], 1);
  CHECK_EQ_U64(log.before, log.after); /* every call is seen twice */
  CHECK_EQ_U64(log.last_status, 0);
  CHECK(strcmp(log.backend, "cpu") == 0);
  /* With the hook cleared nothing more is counted. */
  int seen = log.calls;
  REQUIRE_OK(cube_client_read_one(c, h, &b));
  cube_bytes_release(b);
  CHECK_EQ_U64(log.calls, seen);
  CHECK(strcmp(cube__backend_slot_name(CUBE__SLOT_EVENT_ELAPSED), "event_elapsed") == 0);
  CHECK(strcmp(cube__backend_slot_name(CUBE__SLOT_DEVICE_DESTROY), "device_destroy") == 0);
  cube_handle_release(h);
  cube_client_release(c);
  cube_shutdown();
}
