// cube-test-libs: cube_static
/* Recovery of a lost device (docs/failures.md, "Recovery"): the CUDA backend
 * over the mock driver (tests/mock_cuda), whose cube_mock_cuda_fail_sticky()
 * poisons a device's context as a GPU's illegal address does, and whose
 * cuDevicePrimaryCtxReset frees everything the context held (device
 * blocks, pinned memory, streams) as the driver's does. After
 * cube_device_recover the same process works on the device again: buffers
 * the program marked restorable hold their host copy bit for bit, the others
 * read as DATA_LOST naming the fault, and new work computes right answers. */
#include <dlfcn.h>
#include <pthread.h>
#include <time.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "client/handles.h"
#include "cube/cube.h"
#include "memory/memory.h"
#include "memory/taint.h"
#include "mock_cuda_faults.h"
#include "read_check.h"


/* NVRTC keeps allocations until exit; not ours to report. */
const char* __lsan_default_suppressions(void);
const char* __lsan_default_suppressions(void) { return "leak:libnvrtc\n"; }

#define ERR_ILLEGAL_ADDRESS 700

static const cube_device_id_t cuda0 = {CUBE_BACKEND_CUDA, 0};
static const cube_device_id_t cpu0 = {CUBE_BACKEND_CPU, 0};


/* Uploads |n| random bytes, copies them on the device, reads both back:
 * 1 when every byte is right; 0 with |*st| the first failure otherwise. */
static int roundtrip_st(cube_client_t* c, size_t n, unsigned seed, cube_status_t* out) {
  unsigned char* data = malloc(n);
  unsigned char* back = malloc(n);
  *out = CUBE_OK;
  if (!data || !back) {
    free(data);
    free(back);
    return 0;
  }
  fill_random(data, n, seed);
  cube_handle_t h, h2;
  int ok = 0;
  cube_status_t st = cube_client_create_from_slice(c, data, n, &h);
  if (!st) {
    st = cube_client_empty(c, n, &h2);
    if (!st) {
      st = cube_client_copy(c, h, h2);
      if (!st) st = cube_client_read_into(c, h2, back, n);
      if (!st) ok = memcmp(back, data, n) == 0;
      if (!st && ok) st = cube_client_read_into(c, h, back, n);
      if (!st && ok) ok = memcmp(back, data, n) == 0;
      cube_handle_release(h2);
    }
    cube_handle_release(h);
  }
  *out = st;
  free(data);
  free(back);
  return ok;
}

static int roundtrip(cube_client_t* c, size_t n, unsigned seed) {
  cube_status_t st;
  int ok = roundtrip_st(c, n, seed, &st);
  if (st) fprintf(stderr, "roundtrip: %s\n", cube_status_message(st));
  cube_status_free(st);
  return ok;
}

/* Makes cuda:0 lost: the next device-to-host copy faults. */
static void lose(const mock_t* m, cube_client_t* c, cube_handle_t h) {
  m->fail_sticky_on(0, "d2h", 1, ERR_ILLEGAL_ADDRESS);
  cube_bytes_t* b = NULL;
  cube_status_t s = cube_client_read_one(c, h, &b);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_DEVICE_LOST);
  cube_status_free(s);
  CHECK(b == NULL);
  CHECK(m->lost(0) != 0);
}

/* 1 when reading |h| returns DATA_LOST naming the fault and the device. */
static int reads_lost(cube_client_t* c, cube_handle_t h) {
  cube_bytes_t* b = NULL;
  cube_status_t s = cube_client_read_one(c, h, &b);
  static const char call[] = "cube_client_read_one: read of handles[0] (memory ";
  int ok = cube_status_code(s) == CUBE_STATUS_DATA_LOST &&
           strncmp(cube_status_message(s), call, sizeof(call) - 1) == 0 &&
           strstr(cube_status_message(s), "CUDA_ERROR_ILLEGAL_ADDRESS") != NULL &&
           strstr(cube_status_message(s), "not restorable") != NULL &&
           strstr(cube_status_message(s), "cuda:0 was lost: its read failed at") != NULL &&
           /* the refusal's words are not true of a recovered device */
           strstr(cube_status_message(s), "fails from then on") == NULL && b == NULL;
  if (!ok)
    fprintf(stderr, "expected DATA_LOST, got [%s] %s\n",
            cube_status_code_name(cube_status_code(s)), cube_status_message(s));
  cube_status_free(s);
  cube_bytes_release(b);
  return ok;
}

//===----------------------------------------------------------------------===//
// What a recovery restores, what it loses
//===----------------------------------------------------------------------===//

/* A restorable buffer (from its upload) and a checkpointed one (after a
 * later write; a write after the checkpoint is not kept) read back their
 * host copies after the recovery, a plain one reads DATA_LOST naming the
 * fault; new uploads, copies and reads round-trip; a second loss recovers
 * too; handles made before the loss are released after it. */
CUBE_TEST(recover_restores_restorable_buffers) {
  MOCK_SETUP("1");
  mock_t m;
  REQUIRE(mock_get(&m));
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  long resets = m.resets();
  /* Not lost: nothing to do. */
  CHECK_OK(cube_device_recover(cuda0));
  CHECK_EQ_U64(m.resets(), resets);

  static unsigned char a[3001], b[5003], c1[777], c2[777], c3[777];
  fill_random(a, sizeof(a), 1);
  fill_random(b, sizeof(b), 2);
  fill_random(c1, sizeof(c1), 3);
  fill_random(c2, sizeof(c2), 4);
  fill_random(c3, sizeof(c3), 5);
  cube_handle_t ha, hb, hc, hv;
  REQUIRE_OK(cube_client_create_restorable(c, a, sizeof(a), &ha));
  REQUIRE_OK(cube_client_create_from_slice(c, b, sizeof(b), &hb));
  REQUIRE_OK(cube_client_create_from_slice(c, c1, sizeof(c1), &hc));
  REQUIRE_OK(cube_handle_offset_view(hc, 100, 77, &hv)); /* a view of c: shares its buffer */
  CHECK_OK(cube_client_write(c, hc, c2, sizeof(c2)));
  CHECK_OK(cube_client_checkpoint(c, hv)); /* the whole buffer, through a view of it */
  CHECK_OK(cube_client_write(c, hc, c3, sizeof(c3)));
  CHECK(cube_test_read_equals(c, hc, c3, sizeof(c3)));

  lose(&m, c, hb);
  CHECK_OK(cube_device_recover(cuda0));
  CHECK_EQ_U64(m.resets(), resets + 1);
  CHECK(m.lost(0) == 0);
  CHECK_OK(cube_device_recover(cuda0)); /* recovered already: nothing to do */
  CHECK_EQ_U64(m.resets(), resets + 1);

  CHECK(cube_test_read_equals(c, ha, a, sizeof(a)));
  CHECK(cube_test_read_equals(c, hc, c2, sizeof(c2)));
  CHECK(cube_test_read_equals(c, hv, c2 + 100, sizeof(c2) - 177));
  CHECK(reads_lost(c, hb));
  CHECK_OK(cube_client_sync(c));
  for (unsigned i = 0; i < 4; ++i) CHECK(roundtrip(c, 1000 + 4099 * i, 10 + i));
  /* A full write makes the lost buffer valid again. */
  CHECK_OK(cube_client_write(c, hb, b, sizeof(b)));
  CHECK(cube_test_read_equals(c, hb, b, sizeof(b)));

  /* A second loss: the checkpoint and the upload's copy hold still. */
  lose(&m, c, hb);
  CHECK_OK(cube_device_recover(cuda0));
  CHECK_EQ_U64(m.resets(), resets + 2);
  CHECK(cube_test_read_equals(c, ha, a, sizeof(a)));
  CHECK(cube_test_read_equals(c, hc, c2, sizeof(c2)));
  CHECK(reads_lost(c, hb));
  CHECK(roundtrip(c, 65537 * 3 + 1, 99));
  /* A checkpoint of a buffer with no valid contents is refused, naming why. */
  cube_status_t s = cube_client_checkpoint(c, hb);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_DATA_LOST);
  cube_status_free(s);

  cube_handle_release(hv);
  cube_handle_release(ha);
  cube_handle_release(hb);
  cube_handle_release(hc);
  CHECK(roundtrip(c, 12345, 7));
  cube_client_release(c);
  cube_shutdown();
  m.restore(0);
}

/* A driver that gives a poisoned process no new context (the H200's, driver
 * 580: CUBE_MOCK_CUDA_STICKY_PROCESS makes the mock do the same): the
 * recovery fails with DEVICE_LOST saying so, again on a second try, and the
 * device refuses work; the host copies of restorable buffers still read back
 * bit for bit without the device (cube_client_read_restorable), views their
 * part; another GPU and the CPU keep working. */
CUBE_TEST(recovery_refused_keeps_restorable_copies) {
  setenv("CUBE_MOCK_CUDA_STICKY_PROCESS", "1", 1);
  MOCK_SETUP("2");
  mock_t m;
  REQUIRE(mock_get(&m));
  cube_client_t *c = NULL, *c1 = NULL, *cc = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CUDA, 1}, &c1));
  REQUIRE_OK(cube_client_load(cpu0, &cc));
  static unsigned char a[4099], b[2003], w[4099];
  fill_random(a, sizeof(a), 31);
  fill_random(b, sizeof(b), 32);
  fill_random(w, sizeof(w), 33);
  cube_handle_t ha, hb, hv;
  REQUIRE_OK(cube_client_create_restorable(c, a, sizeof(a), &ha));
  REQUIRE_OK(cube_client_create_from_slice(c, b, sizeof(b), &hb));
  REQUIRE_OK(cube_handle_offset_view(ha, 9, 1000, &hv));
  CHECK_OK(cube_client_write(c, ha, w, sizeof(w)));
  CHECK_OK(cube_client_checkpoint(c, ha)); /* the copy is now |w| */

  lose(&m, c, hb);
  long resets = m.resets();
  for (int attempt = 0; attempt < 2; ++attempt) {
    cube_status_t s = cube_device_recover(cuda0);
    CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_DEVICE_LOST);
    CHECK(s && strstr(cube_status_message(s), "refuses this process a new context") != NULL);
    CHECK(s && strstr(cube_status_message(s), "cube_device_recover") != NULL);
    cube_status_free(s);
  }
  CHECK(m.resets() > resets);
  CHECK(m.lost(0) != 0);
  /* The device refuses work at once. */
  cube_bytes_t* out = NULL;
  cube_status_t s = cube_client_read_one(c, ha, &out);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_DEVICE_LOST);
  cube_status_free(s);
  CHECK(out == NULL);
  /* What was marked restorable is still the program's. */
  REQUIRE_OK(cube_client_read_restorable(c, ha, &out));
  CHECK(cube_bytes_size(out) == sizeof(w) && memcmp(cube_bytes_const_data(out), w, sizeof(w)) == 0);
  cube_bytes_release(out);
  REQUIRE_OK(cube_client_read_restorable(c, hv, &out));
  CHECK(cube_bytes_size(out) == sizeof(w) - 1009 &&
        memcmp(cube_bytes_const_data(out), w + 9, sizeof(w) - 1009) == 0);
  cube_bytes_release(out);
  out = NULL;
  s = cube_client_read_restorable(c, hb, &out);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_FAILED_PRECONDITION);
  cube_status_free(s);
  CHECK(out == NULL);
  /* Elsewhere, work goes on. */
  for (unsigned i = 0; i < 3; ++i) {
    CHECK(roundtrip(c1, 1000 + 7919 * i, 40 + i));
    CHECK(roundtrip(cc, 1001 + 7919 * i, 50 + i));
  }
  cube_handle_release(hv);
  cube_handle_release(ha);
  cube_handle_release(hb);
  cube_client_release(c);
  cube_client_release(c1);
  cube_client_release(cc);
  cube_shutdown();
  m.restore(0);
  unsetenv("CUBE_MOCK_CUDA_STICKY_PROCESS");
}

/* Captures o = a, x = b, o = x (o written by two nodes) as |*g|, replays
 * it once and syncs; false when any of that fails or the graph is not
 * native. */
static bool capture_copies(cube_client_t* c, cube_handle_t ha, cube_handle_t hb,
                           cube_handle_t hx, cube_handle_t ho, cube_graph_t** g) {
  cube_status_t s = cube_client_capture_begin(c);
  if (!s) s = cube_client_copy(c, ha, ho);
  if (!s) s = cube_client_copy(c, hb, hx);
  if (!s) s = cube_client_copy(c, hx, ho);
  cube_status_t e = cube_client_capture_end(c, g);
  if (!s) s = e;
  else cube_status_free(e);
  if (!s) s = cube_client_replay(c, *g, 0, NULL);
  if (!s) s = cube_client_sync(c);
  bool ok = !s && cube_graph_is_native(*g);
  cube_status_free(s);
  return ok;
}

/* A native graph captured before a recovery holds driver objects of the old
 * context: its replay after the recovery fails (deferred, FAILED_PRECONDITION
 * saying to capture it again) and spoils what its nodes write with that one
 * failure, reported once however many nodes write a buffer; the graph
 * captured again replays right. (Copies only: the mock runs no kernels.) */
CUBE_TEST(graph_made_before_recovery_is_refused) {
  MOCK_SETUP("1");
  mock_t m;
  REQUIRE(mock_get(&m));
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  static unsigned char a[2053], b[2053], poison[2053];
  fill_random(a, sizeof(a), 61);
  fill_random(b, sizeof(b), 62);
  memset(poison, 0xA5, sizeof(poison));
  cube_handle_t ha, hb, hx, ho;
  REQUIRE_OK(cube_client_create_restorable(c, a, sizeof(a), &ha));
  REQUIRE_OK(cube_client_create_restorable(c, b, sizeof(b), &hb));
  REQUIRE_OK(cube_client_create_from_slice(c, poison, sizeof(poison), &hx));
  REQUIRE_OK(cube_client_create_from_slice(c, poison, sizeof(poison), &ho));
  cube_graph_t* g = NULL;
  REQUIRE(capture_copies(c, ha, hb, hx, ho, &g));
  CHECK(cube_test_read_equals(c, ho, b, sizeof(b)));

  lose(&m, c, hx);
  CHECK_OK(cube_device_recover(cuda0));
  /* Every buffer valid again, so that the replay is native. */
  CHECK_OK(cube_client_write(c, hx, poison, sizeof(poison)));
  CHECK_OK(cube_client_write(c, ho, poison, sizeof(poison)));
  CHECK_OK(cube_client_replay(c, g, 0, NULL));
  CHECK_STATUS(cube_client_sync(c), CUBE_STATUS_FAILED_PRECONDITION,
               "made before the device was recovered", "capture it again");
  cube_bytes_t* out = NULL;
  cube_status_t s = cube_client_read_one(c, ho, &out);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_DATA_LOST);
  CHECK_EQ_U64(cube_status_count(s), 1);
  CHECK(strstr(cube_status_message(s), "replay of a graph of 3 nodes") != NULL);
  CHECK(strstr(cube_status_message(s), "capture it again") != NULL);
  cube_status_free(s);
  CHECK(out == NULL);
  cube_graph_release(g);
  /* Captured again: it replays right. */
  CHECK_OK(cube_client_write(c, hx, poison, sizeof(poison)));
  CHECK_OK(cube_client_write(c, ho, poison, sizeof(poison)));
  REQUIRE(capture_copies(c, ha, hb, hx, ho, &g));
  CHECK(cube_test_read_equals(c, ho, b, sizeof(b)));
  CHECK(cube_test_read_equals(c, hx, b, sizeof(b)));
  cube_graph_release(g);
  cube_handle_t hs[] = {ha, hb, hx, ho};
  for (size_t i = 0; i < 4; ++i) cube_handle_release(hs[i]);
  cube_client_release(c);
  cube_shutdown();
  m.restore(0);
}

/* log_fn of the client below: keeps the lines that say a device recovered. */
static char g_log[1024];
static void keep_recovered_lines(void* user, const char* line) {
  (void)user;
  if (strstr(line, "recovered") && strlen(g_log) + strlen(line) + 2 < sizeof(g_log)) {
    strcat(g_log, line);
    strcat(g_log, "\n");
  }
}

/* A recovery that works says so once in the device's log (stderr,
 * CUBE_LOG_FILE or the log function), counting what it lost and restored. */
CUBE_TEST(recovery_is_logged_once) {
  MOCK_SETUP("1");
  mock_t m;
  REQUIRE(mock_get(&m));
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.log_fn = keep_recovered_lines;
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_init(cuda0, &o, &c));
  static unsigned char a[3001], b[1003];
  fill_random(a, sizeof(a), 71);
  fill_random(b, sizeof(b), 72);
  cube_handle_t ha, hb;
  REQUIRE_OK(cube_client_create_restorable(c, a, sizeof(a), &ha));
  REQUIRE_OK(cube_client_create_from_slice(c, b, sizeof(b), &hb));
  g_log[0] = '\0';
  lose(&m, c, hb);
  CHECK_OK(cube_device_recover(cuda0));
  CHECK_OK(cube_device_recover(cuda0)); /* nothing to do: nothing logged */
  CHECK(strcmp(g_log, "cube: cuda:0 recovered: 1 buffer lost, 1 restored (3001 bytes)\n") == 0);
  if (strcmp(g_log, "cube: cuda:0 recovered: 1 buffer lost, 1 restored (3001 bytes)\n") != 0)
    fprintf(stderr, "logged: [%s]\n", g_log);
  CHECK(cube_test_read_equals(c, ha, a, sizeof(a)));
  cube_handle_release(ha);
  cube_handle_release(hb);
  cube_client_release(c);
  cube_shutdown();
  m.restore(0);
}

/* Read results the program holds in the device's pinned memory: the reset
 * would free them, so the recovery is refused (the device stays lost) until
 * they are released. The CPU device is not lost: recovering it does nothing. */
CUBE_TEST(recover_waits_for_pinned_results) {
  MOCK_SETUP("1");
  mock_t m;
  REQUIRE(mock_get(&m));
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  static unsigned char a[40003];
  fill_random(a, sizeof(a), 8);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_restorable(c, a, sizeof(a), &h));
  cube_bytes_t* held = NULL;
  REQUIRE_OK(cube_client_read_one(c, h, &held));
  CHECK_EQ_U64(cube_bytes_property(held), CUBE_BYTES_PINNED);
  lose(&m, c, h);
  cube_status_t s = cube_device_recover(cuda0);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_FAILED_PRECONDITION);
  CHECK(strstr(cube_status_message(s), "cube_device_recover: cuda:0: 1 read result") != NULL);
  CHECK(strstr(cube_status_message(s), "still held") != NULL);
  cube_status_free(s);
  CHECK(m.lost(0) != 0);
  /* The held result is intact, and the device still refuses calls. */
  CHECK(memcmp(cube_bytes_data(held), a, sizeof(a)) == 0);
  s = cube_client_sync(c);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_DEVICE_LOST);
  cube_status_free(s);
  cube_bytes_release(held);
  CHECK_OK(cube_device_recover(cuda0));
  CHECK(cube_test_read_equals(c, h, a, sizeof(a)));
  CHECK_OK(cube_device_recover(cpu0));
  cube_handle_release(h);
  cube_client_release(c);
  cube_shutdown();
  m.restore(0);
}

//===----------------------------------------------------------------------===//
// Automatic mode, and threads calling in during a recovery
//===----------------------------------------------------------------------===//

/* CUBE_DEVICE_RECOVER=auto: the first call that finds the device lost
 * recovers it and still returns DEVICE_LOST, saying so; the calls after it
 * work, and the restorable buffer holds its contents. */
CUBE_TEST(auto_mode_recovers_at_the_next_call) {
  MOCK_SETUP("1");
  setenv("CUBE_DEVICE_RECOVER", "auto", 1);
  mock_t m;
  REQUIRE(mock_get(&m));
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  long resets = m.resets();
  static unsigned char a[2049], b[999];
  fill_random(a, sizeof(a), 31);
  fill_random(b, sizeof(b), 32);
  cube_handle_t ha, hb;
  REQUIRE_OK(cube_client_create_restorable(c, a, sizeof(a), &ha));
  REQUIRE_OK(cube_client_create_from_slice(c, b, sizeof(b), &hb));
  lose(&m, c, hb);
  CHECK_EQ_U64(m.resets(), resets); /* the faulting call itself does not recover */
  cube_status_t s = cube_client_sync(c);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_DEVICE_LOST);
  CHECK(strstr(cube_status_message(s), "cube_client_sync: cuda:0 is lost") != NULL);
  CHECK(strstr(cube_status_message(s), "recovered (CUBE_DEVICE_RECOVER=auto)") != NULL);
  cube_status_free(s);
  CHECK_EQ_U64(m.resets(), resets + 1);
  CHECK(cube_test_read_equals(c, ha, a, sizeof(a)));
  CHECK(reads_lost(c, hb));
  CHECK(roundtrip(c, 30001, 33));
  cube_handle_release(ha);
  cube_handle_release(hb);
  cube_client_release(c);
  cube_shutdown();
  unsetenv("CUBE_DEVICE_RECOVER");
  m.restore(0);
}

/* An upload on the caller's thread that meets the loss after its call's own
 * check, at the stream's gate: a file-backed buffer is first staged into
 * pinned memory, whose new page's cuMemHostAlloc faults (the staging falls
 * back to the heap), and the device pool still has room, so the upload
 * reaches the gate with the device lost. It is not made, as a write the
 * driver refused: the call succeeds (an upload's failure is deferred), the
 * buffer is tainted naming the write and the loss; after the recovery it
 * reads DATA_LOST, a whole write makes it valid, new work round-trips. */
CUBE_TEST(upload_meets_the_loss_at_the_gate) {
  MOCK_SETUP("1");
  mock_t m;
  REQUIRE(mock_get(&m));
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  cube_handle_t h0;
  REQUIRE_OK(cube_client_empty(c, 1000, &h0)); /* a device page with room */
  CHECK_OK(cube_client_sync(c));
  enum { N = 20011 };
  static unsigned char data[N];
  fill_random(data, sizeof(data), 51);
  const char* dir = getenv("CUBE_TEST_TMPDIR");
  char path[512];
  snprintf(path, sizeof(path), "%s/cube_gate_XXXXXX", dir && *dir ? dir : "/tmp");
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, data, sizeof(data)) == (ssize_t)sizeof(data));
  close(fd);
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_bytes_map_file(path, 0, sizeof(data), &b));
  m.fail_sticky_on(0, "cuMemHostAlloc", 1, ERR_ILLEGAL_ADDRESS);
  cube_handle_t h;
  CHECK_OK(cube_client_create(c, b, &h));
  m.fail_sticky("", 0, 0);
  unlink(path);
  CHECK(m.lost(0) != 0);
  /* The buffer holds nothing valid: its taint names the write and the loss
   * (client calls say DEVICE_LOST at their entry until the recovery). */
  cube__handle_info_t info;
  REQUIRE_OK(cube__handle_get(h, "h", &info));
  cube__taint_t* taint = atomic_load(&info.mem->taint);
  CHECK(taint != NULL);
  if (taint) {
    cube_status_t ts = cube__taint_status(taint, "read of h");
    CHECK_EQ_U64(cube_status_code(ts), CUBE_STATUS_DATA_LOST);
    CHECK(strstr(cube_status_message(ts), "write of 20011 bytes into memory") != NULL);
    CHECK(strstr(cube_status_message(ts), "cuda:0 is lost") != NULL);
    cube_status_free(ts);
  }
  cube_status_t s = cube_client_sync(c);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_DEVICE_LOST);
  cube_status_free(s);
  CHECK_OK(cube_device_recover(cuda0));
  cube_bytes_t* out = NULL;
  s = cube_client_read_one(c, h, &out);
  CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_DATA_LOST);
  cube_status_free(s);
  CHECK(out == NULL);
  CHECK(roundtrip(c, 20011, 52));
  /* A whole write makes it valid. */
  CHECK_OK(cube_client_write(c, h, data, sizeof(data)));
  CHECK(cube_test_read_equals(c, h, data, sizeof(data)));
  cube_handle_release(h);
  cube_handle_release(h0);
  cube_client_release(c);
  cube_shutdown();
  m.restore(0);
}

typedef struct {
  cube_client_t* c;
  unsigned seed;
  atomic_int* stop;
  int wrong, ok, lost, other;
} worker_t;

/* Round trips until told to stop: each is right, or fails with DEVICE_LOST
 * (the device was lost or recovering) or DATA_LOST (a buffer made before a
 * recovery read after it); never wrong bytes, never another failure. */
static void* worker(void* p) {
  worker_t* w = p;
  for (unsigned i = 0; !atomic_load(w->stop) || i < 4; ++i) {
    cube_status_t st;
    int ok = roundtrip_st(w->c, 1000 + 97 * (i % 50), w->seed + i, &st);
    cube_status_code_t code = cube_status_code(st);
    if (!st) {
      if (ok)
        w->ok++;
      else
        w->wrong++;
    } else if (code == CUBE_STATUS_DEVICE_LOST || code == CUBE_STATUS_DATA_LOST) {
      w->lost++;
    } else {
      fprintf(stderr, "worker: [%s] %s\n", cube_status_code_name(code), cube_status_message(st));
      w->other++;
    }
    cube_status_free(st);
    if (i > 100000) break;
  }
  return NULL;
}

/* While other threads work on cuda:0: waits until the mock has lost it and
 * cube has seen the loss (a sync of this thread's stream meets it: a
 * recovery of a device cube does not know lost does nothing), then recovers
 * it, again while it is refused because a worker holds a read result (for
 * up to 20 s: on a loaded machine one may be held for long). True when the
 * recovery worked and the mock's device works again. */
static bool await_loss_and_recover(mock_t* m, cube_client_t* c) {
  while (!m->lost(0)) sched_yield();
  for (;;) {
    cube_status_t s = cube_client_sync(c);
    cube_status_code_t code = cube_status_code(s);
    cube_status_free(s);
    if (code == CUBE_STATUS_DEVICE_LOST) break;
    sched_yield();
  }
  struct timespec t0, tn;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &tn);
    if (tn.tv_sec - t0.tv_sec > 20) return false;
    cube_status_t s = cube_device_recover(cuda0);
    cube_status_code_t code = cube_status_code(s);
    cube_status_free(s);
    if (code == CUBE_STATUS_OK) break;
    CHECK_EQ_U64(code, CUBE_STATUS_FAILED_PRECONDITION);
    sched_yield();
  }
  return m->lost(0) == 0;
}

enum { MAKER_RING = 64 };
typedef struct {
  cube_client_t* c;
  atomic_int* stop;
  int made, refused, other, checked, lost, wrong;
  bool full[MAKER_RING];
  cube_handle_t h[MAKER_RING];
  size_t size[MAKER_RING];
  unsigned seed[MAKER_RING];
} maker_t;

/* Reads back buffer |k| of the maker's ring (its bytes regenerated) and
 * releases it: right, or refused while the device is lost; a restorable
 * buffer is never DATA_LOST and never wrong. */
static void maker_check(maker_t* mk, int k, unsigned char* want) {
  fill_random(want, mk->size[k], mk->seed[k]);
  unsigned char* back = malloc(mk->size[k]);
  cube_status_t st = back ? cube_client_read_into(mk->c, mk->h[k], back, mk->size[k])
                          : cube_status_make(CUBE_STATUS_OUT_OF_MEMORY, "test");
  cube_status_code_t code = cube_status_code(st);
  if (!st) {
    mk->checked++;
    if (memcmp(back, want, mk->size[k]) != 0) mk->wrong++;
  } else if (code == CUBE_STATUS_DEVICE_LOST) {
    mk->refused++;
  } else {
    fprintf(stderr, "maker: buffer %d of %zu bytes: [%s] %s\n", mk->made, mk->size[k],
            cube_status_code_name(code), cube_status_message(st));
    if (code == CUBE_STATUS_DATA_LOST) mk->lost++;
    else mk->other++;
  }
  cube_status_free(st);
  free(back);
  cube_handle_release(mk->h[k]);
  mk->full[k] = false;
}

/* Creates restorable buffers of random sizes and contents until told to
 * stop, in a ring: the oldest is read back (maker_check) before its place
 * is taken. A creation may be refused while the device is lost; never with
 * another failure. The buffers left are checked by the caller. */
static void* maker(void* p) {
  maker_t* mk = p;
  unsigned char* data = malloc(9000);
  unsigned char* want = malloc(9000);
  for (unsigned i = 0; data && want && !atomic_load(mk->stop); ++i) {
    size_t n = 1 + (size_t)((i * 2654435761u) % 9000);
    unsigned seed = 7001 + i;
    fill_random(data, n, seed);
    int k = mk->made % MAKER_RING;
    if (mk->full[k]) maker_check(mk, k, want);
    cube_handle_t h;
    cube_status_t st = cube_client_create_restorable(mk->c, data, n, &h);
    cube_status_code_t code = cube_status_code(st);
    if (!st) {
      mk->h[k] = h;
      mk->size[k] = n;
      mk->seed[k] = seed;
      mk->full[k] = true;
      mk->made++;
    } else if (code == CUBE_STATUS_DEVICE_LOST) {
      mk->refused++; /* its place stays empty: the next creation takes it */
    } else {
      fprintf(stderr, "maker: [%s] %s\n", cube_status_code_name(code), cube_status_message(st));
      mk->other++;
    }
    cube_status_free(st);
  }
  free(data);
  free(want);
  return NULL;
}

/* Restorable buffers are made (and read back) on one thread while another
 * makes cuda:0 lost (an upload faults) and recovers it, many times: every
 * buffer whose creation succeeded reads back its bytes whenever the device
 * works, wherever the losses and recoveries fell (before its upload,
 * between the upload and its host copy, after both). */
CUBE_TEST(restorable_buffers_made_while_the_device_recovers) {
  MOCK_SETUP("1");
  mock_t m;
  REQUIRE(mock_get(&m));
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  atomic_int stop = 0;
  static maker_t mk;
  memset(&mk, 0, sizeof(mk));
  mk.c = c;
  mk.stop = &stop;
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, maker, &mk) == 0);
  long resets = m.resets();
  enum { ROUNDS = 40 };
  int recovered = 0;
  for (int round = 0; round < ROUNDS; ++round) {
    m.fail_sticky_on(0, "h2d", 1 + round % 7, ERR_ILLEGAL_ADDRESS);
    if (await_loss_and_recover(&m, c)) recovered++;
  }
  atomic_store(&stop, 1);
  pthread_join(t, NULL);
  CHECK_EQ_U64(recovered, ROUNDS);
  CHECK_EQ_U64(m.resets(), resets + ROUNDS);
  CHECK(mk.made > ROUNDS);
  /* The buffers left, on the device that works now. */
  static unsigned char want[9000];
  for (int k = 0; k < MAKER_RING; ++k)
    if (mk.full[k]) maker_check(&mk, k, want);
  CHECK(mk.checked > 0);
  CHECK_EQ_U64(mk.lost, 0);
  CHECK_EQ_U64(mk.wrong, 0);
  CHECK_EQ_U64(mk.other, 0);
  cube_client_release(c);
  cube_shutdown();
  m.restore(0);
}

/* Four threads work on cuda:0 while a fifth makes it lost and recovers it,
 * three times (TSan: no race; ASan: nothing leaks or is read after free). */
CUBE_TEST(recover_while_threads_call_in) {
  MOCK_SETUP("1");
  mock_t m;
  REQUIRE(mock_get(&m));
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cuda0, &c));
  static unsigned char a[4097];
  fill_random(a, sizeof(a), 41);
  cube_handle_t ha;
  REQUIRE_OK(cube_client_create_restorable(c, a, sizeof(a), &ha));
  atomic_int stop = 0;
  worker_t w[4];
  pthread_t t[4];
  for (int i = 0; i < 4; ++i) {
    w[i] = (worker_t){c, 1000u * (unsigned)i, &stop, 0, 0, 0, 0};
    REQUIRE(pthread_create(&t[i], NULL, worker, &w[i]) == 0);
  }
  long resets = m.resets();
  for (int round = 0; round < 3; ++round) {
    m.fail_sticky_on(0, "d2h", 3, ERR_ILLEGAL_ADDRESS);
    CHECK(await_loss_and_recover(&m, c));
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < 4; ++i) pthread_join(t[i], NULL);
  CHECK_EQ_U64(m.resets(), resets + 3);
  for (int i = 0; i < 4; ++i) {
    CHECK_EQ_U64(w[i].wrong, 0);
    CHECK_EQ_U64(w[i].other, 0);
  }
  CHECK(cube_test_read_equals(c, ha, a, sizeof(a)));
  CHECK(roundtrip(c, 7001, 43));
  cube_handle_release(ha);
  cube_client_release(c);
  cube_shutdown();
  m.restore(0);
}
