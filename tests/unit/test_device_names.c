// cube-test-libs: cube_static
/* Devices are named "<backend>:<index>" ("cpu:0") in every message, never
 * by two numbers ("0:0"): the device queue (whose key type is a backend
 * number for the compute server, and a test's own number otherwise), the
 * backend wrappers, the device properties' name and the client's checks. */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "check.h"
#include "cube/cube.h"
#include "queue/device_queue.h"

/* True when |msg| holds "<digits>:<digits>" not preceded by a letter or a
 * digit: a device named by numbers alone. */
static bool has_bare_pair(const char* msg) {
  for (const char* p = msg; *p; ++p) {
    if (!isdigit((unsigned char)*p)) continue;
    if (p > msg && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) continue;
    const char* q = p;
    while (isdigit((unsigned char)*q)) ++q;
    if (*q == ':' && isdigit((unsigned char)q[1])) return true;
    p = q - 1;
  }
  return false;
}

/* Consumes |s|: an error whose message names |name| and no device by numbers. */
static void check_named(cube_status_t s, const char* name) {
  CHECK(s != CUBE_OK);
  const char* m = cube_status_message(s);
  fprintf(stderr, "%s\n", m);
  if (!strstr(m, name) || has_bare_pair(m)) {
    fprintf(stderr, "message: %s\n(wanted '%s', no bare n:m)\n", m, name);
    CHECK(!"names the device as <backend>:<index>");
  }
  cube_status_free(s);
}

CUBE_TEST(bare_pair_detector) {
  CHECK(has_bare_pair("device 0:0 is busy"));
  CHECK(has_bare_pair("(1000:3)"));
  CHECK(!has_bare_pair("device cpu:0 is busy"));
  CHECK(!has_bare_pair("device type1000:3"));
  CHECK(!has_bare_pair("cuda:12 stream 4"));
}

static cube_status_t nop_create(cube__device_key_t key, void* arg, void** out) {
  (void)key;
  (void)arg;
  *out = calloc(1, 16);
  return *out ? CUBE_OK : cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "no memory");
}
static const cube__service_vtable_t names_vt = {"names", nop_create, free, NULL};
static const cube__service_vtable_t no_create_vt = {"no-create", NULL, free, NULL};

typedef struct {
  cube__service_t* self;
} reenter_t;

static cube_status_t task_noop(void* state, void* payload) {
  (void)state;
  (void)payload;
  return CUBE_OK;
}
static cube_status_t task_reenter(void* state, void* payload) {
  (void)state;
  reenter_t* r = payload;
  return cube__submit_blocking(r->self, 0, task_noop, NULL);
}

/* The queue names a backend's key by the backend, and another type's key
 * "type<n>:<index>". */
static void queue_messages(cube__device_key_t key, const char* name) {
  cube__service_t* s = NULL;
  REQUIRE_OK(cube__service_create(key, CUBE_QUEUE_THREADED, &names_vt, NULL, &s));
  cube__service_t* again = NULL;
  check_named(cube__service_create(key, CUBE_QUEUE_THREADED, &names_vt, NULL, &again), name);
  check_named(cube__service_get(key, CUBE_QUEUE_THREADED, &no_create_vt, NULL, &again), name);
  reenter_t r = {s};
  check_named(cube__submit_blocking(s, 0, task_reenter, &r), name);
  cube__queue_shutdown(key);
}

CUBE_TEST(queue_names_backend_keys) {
  /* An index no server of this process uses: only this test's service. */
  cube__device_key_t key = {CUBE_BACKEND_CPU, 77};
  queue_messages(key, "device cpu:77");
  cube__device_key_t cuda = {CUBE_BACKEND_CUDA, 5};
  queue_messages(cuda, "device cuda:5");
}

CUBE_TEST(queue_names_other_service_types) {
  cube__device_key_t key = {1000, 3};
  queue_messages(key, "device type1000:3");
}

/* What a user of the CPU backend meets: the server, the properties, the
 * launch limits, the memory limit and the backend wrappers. */
CUBE_TEST(client_messages_name_cpu_0) {
  cube_device_id_t cpu0 = {CUBE_BACKEND_CPU, 0};
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.memory_limit = 8u << 20;
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_init(cpu0, &o, &c));
  const cube_device_properties_t* p = cube_client_properties(c);
  CHECK(strncmp(p->name, "cpu:0 (", 7) == 0);

  cube_client_t* c2 = NULL;
  check_named(cube_client_init(cpu0, &o, &c2), "device cpu:0");
  cube_device_id_t far = {CUBE_BACKEND_CPU, 99};
  check_named(cube_client_load(far, &c2), "cpu:99");

  cube_handle_t h = CUBE_HANDLE_NULL;
  check_named(cube_client_empty(c, 9u << 20, &h), "on cpu:0 stream ");
  check_named(cube_client_empty(c, (size_t)p->memory.max_page_size + 1, &h), "cpu:0 (");

  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = "k_big";
  d.source = "CUBE_KERNEL(k_big, CUBE_ARRAY(float, y)) { y[0] = 1.0f; }\n";
  d.entry = "k_big";
  d.cube_dim = (cube_dim_t){p->hardware.max_cube_dim[0], 2, 1};
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cube_kernel_create(&d, &k));
  cube_handle_t y;
  REQUIRE_OK(cube_client_empty(c, 64, &y));
  cube_arg_t a[1] = {cube_arg_buffer(y)};
  check_named(cube_client_launch(c, k, cube_count_static(1, 1, 1), 1, a), "cpu:0 (");

  /* The backend wrappers' own messages (an injected allocation failure). */
  cube__fault_set(CUBE__FAULT_CPU_ALLOC, 1, 3);
  /* 3 MiB: a storage of its own (4096 bytes would fit the small page y is in). */
  check_named(cube_client_empty(c, 3u << 20, &h), "cpu:0: allocation of");
  cube__fault_reset();

  cube_handle_release(y);
  cube_kernel_release(k);
  CHECK_OK(cube_client_sync(c));
  cube_client_release(c);
  cube_shutdown();
}
