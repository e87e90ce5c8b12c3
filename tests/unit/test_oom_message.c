// cube-test-libs: cube_static
/* The out-of-memory status as a user meets it (docs/errors.md, "Out of
 * memory"), on the CPU backend under a memory limit: the first line names
 * the bytes the caller asked for (never a pool's page), the device as
 * <backend>:<index> and the stream, and why; then one line per pool; every
 * size in binary units; cube_status_oom_report gives the same bytes. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "cube/cube.h"

static const cube_device_id_t cpu0 = {CUBE_BACKEND_CPU, 0};

/* The first line of |msg| (at most |n| - 1 bytes) into |out|. */
static void first_line(const char* msg, char* out, size_t n) {
  size_t len = strcspn(msg, "\n");
  if (len >= n) len = n - 1;
  memcpy(out, msg, len);
  out[len] = '\0';
}

static size_t count_lines(const char* msg) {
  size_t n = 1;
  for (const char* p = msg; *p; ++p) n += *p == '\n';
  return n;
}

/* Decimal size units or a pool page in |line|: the defects this file is about. */
static bool has_decimal_units(const char* s) {
  return strstr(s, " KB") || strstr(s, " MB") || strstr(s, " GB") || strstr(s, " TB");
}

/* Checks an OOM status of a request of |requested| bytes made by |fn| on
 * stream |stream| under a limit of |limit| bytes; consumes |s|. */
static void check_oom(cube_status_t s, const char* fn, uint64_t requested, uint64_t stream,
                      uint64_t limit) {
  CHECK(cube_status_code(s) == CUBE_STATUS_OUT_OF_MEMORY);
  const char* msg = cube_status_message(s);
  char line[1024];
  first_line(msg, line, sizeof(line));
  fprintf(stderr, "%s\n", msg);

  /* What was asked: the caller's bytes, exactly. */
  char want[256];
  snprintf(want, sizeof(want), "%s: out of memory: ", fn);
  CHECK(strncmp(line, want, strlen(want)) == 0);
  snprintf(want, sizeof(want), "(%llu bytes) of device memory requested on cpu:0 stream %llu: ",
           (unsigned long long)requested, (unsigned long long)stream);
  CHECK(strstr(line, want) != NULL);
  /* Why: the limit, in the same units as the rest. */
  char lim[64];
  snprintf(lim, sizeof(lim), "memory limit of %.2f MiB", (double)limit / (1024.0 * 1024.0));
  CHECK(strstr(line, lim) != NULL);
  /* The first line names no page of any pool and no internal device number. */
  CHECK(strstr(line, "page") == NULL);
  CHECK(strstr(line, "0:0") == NULL);
  CHECK(strstr(line, "cpu0") == NULL);
  CHECK(!has_decimal_units(msg));

  uint64_t got = 0;
  cube_memory_report_t r;
  r.struct_size = sizeof(r); /* an output struct: its size first (cube/cube.h) */
  CHECK(cube_status_oom_report(s, &got, &r));
  CHECK_EQ_U64(got, requested);
  CHECK_EQ_U64(r.memory_limit, limit);
  REQUIRE(r.pool_count > 1 && r.pool_count <= CUBE_MAX_POOLS);
  /* Then exactly one line per pool, in order, and while buffers are live a
   * last line naming the largest holders by tag. */
  const char* holders = strstr(msg, "\n  largest holders by tag: ");
  CHECK_EQ_U64(count_lines(msg), 1 + r.pool_count + (holders ? 1 : 0));
  if (holders) CHECK(strchr(holders + 1, '\n') == NULL); /* the last line */
  const char* p = strchr(msg, '\n');
  for (uint32_t i = 0; i < r.pool_count && p; ++i) {
    char head[32];
    snprintf(head, sizeof(head), "\n  pool %u ", i);
    CHECK(strncmp(p, head, strlen(head)) == 0);
    p = strchr(p + 1, '\n');
  }
  cube_status_free(s);
}

static uint64_t seed_now(void) { return (uint64_t)time(NULL) * 2654435761u; }

/* The server option: a request above the limit but far below a ladder page
 * of this machine names its own bytes; the client keeps working. */
CUBE_TEST(memory_limit_option_names_the_request) {
  uint64_t seed = seed_now();
  const uint64_t limit = 50ull << 20;
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.memory_limit = limit;
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_init(cpu0, &o, &c));
  /* 100 MB and an odd size near it (the message must follow the input). */
  uint64_t sizes[2] = {100000000ull, 60000000ull + cube_test_rand(&seed) % 40000000ull};
  for (int i = 0; i < 2; ++i) {
    cube_handle_t h = CUBE_HANDLE_NULL;
    check_oom(cube_client_empty(c, (size_t)sizes[i], &h), "cube_client_empty", sizes[i],
              cube_client_stream(c), limit);
    CHECK(cube_handle_is_null(h));
  }
  /* Still usable under the limit. */
  cube_handle_t small;
  REQUIRE_OK(cube_client_empty(c, 1000, &small));
  cube_handle_release(small);
  CHECK_OK(cube_client_sync(c));
  cube_client_release(c);
  cube_shutdown();
}

/* CUBE_MEMORY_LIMIT, another stream, and a batch: the bytes asked for are
 * the batch's, on the stream the client is pinned to. */
CUBE_TEST(memory_limit_env_names_stream_and_batch) {
  setenv("CUBE_MEMORY_LIMIT", "24M", 1);
  const uint64_t limit = 24ull << 20;
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cpu0, &c));
  cube_stream_id_t sid = cube_stream_id_new();
  cube_client_set_stream(c, sid);
  cube_handle_t keep;
  REQUIRE_OK(cube_client_empty(c, 20u << 20, &keep)); /* most of the limit is taken */
  cube_handle_t h = CUBE_HANDLE_NULL;
  check_oom(cube_client_empty(c, 5u << 20, &h), "cube_client_empty", 5u << 20, sid, limit);
  /* Two tensors of 3 MiB and 2 MiB + 8 bytes: one request of their sum. */
  cube_layout_desc_t descs[2];
  const uint64_t shape0[1] = {3u << 18}, shape1[1] = {(2u << 18) + 2};
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 1, shape0, 4, &descs[0]));
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 1, shape1, 4, &descs[1]));
  cube_tensor_t ts[2];
  cube_status_t s = cube_client_empty_tensors(c, 2, descs, ts);
  uint64_t got = 0;
  CHECK(cube_status_oom_report(s, &got, NULL));
  CHECK(got >= (5u << 20) + 8);
  char line[512];
  first_line(cube_status_message(s), line, sizeof(line));
  char want[64];
  snprintf(want, sizeof(want), "(%llu bytes) of device memory", (unsigned long long)got);
  CHECK(strstr(line, want) != NULL);
  check_oom(s, "cube_client_empty_tensors", got, sid, limit);
  cube_handle_release(keep);
  CHECK_OK(cube_client_sync(c));
  cube_client_release(c);
  cube_shutdown();
  unsetenv("CUBE_MEMORY_LIMIT");
}

/* Memory usage lines use the same units as the OOM message. */
CUBE_TEST(usage_format_uses_binary_units) {
  cube_memory_usage_t u = {2, 3u << 20, 100, 5u << 20};
  char buf[256];
  cube_memory_usage_format(&u, buf, sizeof(buf));
  CHECK(strstr(buf, "3.00 MiB in use") != NULL);
  CHECK(strstr(buf, "5.00 MiB reserved") != NULL);
  CHECK(!has_decimal_units(buf));
  if (!strstr(buf, "3.00 MiB in use")) fprintf(stderr, "usage: %s\n", buf);
}
