/* Memory snapshots, tags, the ledger and pool planning (docs/observability.md;
 * cube/memory.h). Every case runs in a fresh process. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cts.h"
#include "json_file.h"

static uint64_t seed_now(void) { return (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid(); }

static uint64_t json_u64(const cJSON* o, const char* key) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? (uint64_t)v->valuedouble : UINT64_MAX;
}

/* Validates the file |path| against docs/schemas/memory-snapshot.schema.json
 * with python3's jsonschema (Debian python3-jsonschema, `make deps`): 1 when
 * it is valid. A missing validator fails the case: a snapshot is never
 * taken as valid unchecked. */
static int schema_valid(const char* path) {
  const char* src = getenv("CUBE_SOURCE_DIR");
  if (!src) {
    fprintf(stderr, "CUBE_SOURCE_DIR is not set (ctest sets it)\n");
    return 0;
  }
  char cmd[2048];
  snprintf(cmd, sizeof(cmd),
           "python3 '%s/tests/tools/validate_json_schema.py' "
           "'%s/docs/schemas/memory-snapshot.schema.json' '%s'",
           src, src, path);
  int rc = system(cmd);
  if (rc != 0) fprintf(stderr, "schema validation of %s failed (rc %d): %s\n", path, rc, cmd);
  return rc == 0;
}

static void tmp_path(char* buf, size_t n, const char* what) {
  const char* dir = getenv("CUBE_TEST_TMPDIR");
  snprintf(buf, n, "%s/%s-%s-%d.json", dir ? dir : "/tmp", what, cts_backend()->name,
           (int)getpid());
  unlink(buf);
}

#define NBUF 24
typedef struct live {
  cube_handle_t h;
  uint64_t size;
  uint64_t stream;
  const char* tag; /* expected; NULL: untagged */
} live_t;

/* Buffers of random distinct sizes on two streams, tagged by scope, by
 * nested scope, by handle, or not at all. The snapshot's totals equal the
 * usage figures; each allocation shows its size, stream and tag. */
CUBE_TEST(memory_snapshot_schema_totals_and_tags) {
  CTS_CLIENT(c);
  cube_memory_tracking_enable(); /* times and events from the first allocation on */
  cube_client_t* c2 = NULL;
  REQUIRE_OK(cube_client_load(cts_device(0), &c2));
  cube_stream_id_t s1 = cube_stream_id_new(), s2 = cube_stream_id_new();
  cube_client_set_stream(c, s1);
  cube_client_set_stream(c2, s2);
  uint64_t seed = seed_now();
  static const char* const tags[] = {"weights", "activations", "kv-cache", NULL};
  live_t b[NBUF];
  for (int i = 0; i < NBUF; ++i) {
    cube_client_t* cc = (i % 3 == 0) ? c2 : c;
    /* Distinct sizes: 1 .. 3 MiB, odd. */
    b[i].size = 1 + (uint64_t)i * 131071u + cube_test_rand(&seed) % 65536u;
    b[i].stream = cube_client_stream(cc);
    b[i].tag = tags[cube_test_rand(&seed) % 4];
    int how = (int)(cube_test_rand(&seed) % 3);
    if (b[i].tag && how == 0) {
      REQUIRE_OK(cube_memory_tag_push(cc, "outer"));
      REQUIRE_OK(cube_memory_tag_push(cc, b[i].tag)); /* the innermost wins */
      REQUIRE_OK(cube_client_empty(cc, (size_t)b[i].size, &b[i].h));
      REQUIRE_OK(cube_memory_tag_pop(cc));
      REQUIRE_OK(cube_memory_tag_pop(cc));
    } else if (b[i].tag && how == 1) {
      REQUIRE_OK(cube_client_empty(cc, (size_t)b[i].size, &b[i].h));
      REQUIRE_OK(cube_handle_set_tag(b[i].h, b[i].tag));
    } else if (b[i].tag) {
      REQUIRE_OK(cube_memory_tag_push(cc, "wrong"));
      REQUIRE_OK(cube_client_empty(cc, (size_t)b[i].size, &b[i].h));
      REQUIRE_OK(cube_memory_tag_pop(cc));
      REQUIRE_OK(cube_handle_set_tag(b[i].h, b[i].tag)); /* overrides the scope's */
    } else {
      REQUIRE_OK(cube_client_empty(cc, (size_t)b[i].size, &b[i].h));
    }
  }
  /* A few released again: gone from the snapshot, in its events. */
  for (int i = 0; i < 4; ++i) {
    cube_handle_release(b[i].h);
    b[i].h = CUBE_HANDLE_NULL;
  }
  CHECK_OK(cube_client_sync(c));
  CHECK_OK(cube_client_sync(c2));
  /* Scopes are checked: a pop with no scope, with another client. */
  CHECK_STATUS(cube_memory_tag_pop(c), CUBE_STATUS_FAILED_PRECONDITION, "no tag scope");
  REQUIRE_OK(cube_memory_tag_push(c, "x"));
  CHECK_STATUS(cube_memory_tag_pop(c2), CUBE_STATUS_FAILED_PRECONDITION, "another client");
  CHECK_OK(cube_memory_tag_pop(c));

  char* text = NULL;
  REQUIRE_OK(cube_client_memory_snapshot_json(c, &text));
  cJSON* doc = cJSON_Parse(text);
  REQUIRE(doc != NULL);
  cube_memory_usage_t dev, u1, u2;
  CHECK_OK(cube_client_memory_usage_device(c, &dev));
  CHECK_OK(cube_client_memory_usage(c, &u1));
  CHECK_OK(cube_client_memory_usage(c2, &u2));
  const cJSON* total = cJSON_GetObjectItemCaseSensitive(doc, "total");
  CHECK_EQ_U64(json_u64(total, "number_allocs"), dev.number_allocs);
  CHECK_EQ_U64(json_u64(total, "bytes_in_use"), dev.bytes_in_use);
  CHECK_EQ_U64(json_u64(total, "bytes_padding"), dev.bytes_padding);
  CHECK_EQ_U64(json_u64(total, "bytes_reserved"), dev.bytes_reserved);
  /* Per stream, and the pools of each stream add up to it. */
  const cJSON* st;
  int seen_streams = 0;
  cJSON_ArrayForEach(st, cJSON_GetObjectItemCaseSensitive(doc, "streams")) {
    uint64_t id = json_u64(st, "id");
    const cJSON* u = cJSON_GetObjectItemCaseSensitive(st, "usage");
    const cube_memory_usage_t* want = id == s1 ? &u1 : id == s2 ? &u2 : NULL;
    if (!want) continue;
    ++seen_streams;
    CHECK_EQ_U64(json_u64(u, "number_allocs"), want->number_allocs);
    CHECK_EQ_U64(json_u64(u, "bytes_in_use"), want->bytes_in_use);
    CHECK_EQ_U64(json_u64(u, "bytes_reserved"), want->bytes_reserved);
    uint64_t in_use = 0, reserved = 0;
    const cJSON* p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(doc, "pools")) {
      if (json_u64(p, "stream") != id ||
          strcmp(cJSON_GetObjectItemCaseSensitive(p, "memory")->valuestring, "device memory"))
        continue;
      const cJSON* pu = cJSON_GetObjectItemCaseSensitive(p, "usage");
      in_use += json_u64(pu, "bytes_in_use");
      reserved += json_u64(pu, "bytes_reserved");
      /* Pages' sizes add up to the pool's reserved bytes. */
      uint64_t pages = 0;
      const cJSON* pg;
      cJSON_ArrayForEach(pg, cJSON_GetObjectItemCaseSensitive(p, "pages")) pages += json_u64(pg, "size");
      CHECK_EQ_U64(pages, json_u64(pu, "bytes_reserved"));
    }
    CHECK_EQ_U64(in_use, want->bytes_in_use);
    CHECK_EQ_U64(reserved, want->bytes_reserved);
  }
  CHECK_EQ_U64(seen_streams, 2);
  /* Every live buffer once, with its stream and tag; no released one. */
  int found[NBUF] = {0};
  uint64_t tagged_bytes[4] = {0};
  const cJSON* a;
  cJSON_ArrayForEach(a, cJSON_GetObjectItemCaseSensitive(doc, "allocations")) {
    if (strcmp(cJSON_GetObjectItemCaseSensitive(a, "memory")->valuestring, "device memory"))
      continue;
    uint64_t size = json_u64(a, "size");
    const cJSON* tag = cJSON_GetObjectItemCaseSensitive(a, "tag");
    for (int i = 0; i < NBUF; ++i) {
      if (b[i].size != size) continue;
      CHECK(i >= 4);
      found[i]++;
      CHECK_EQ_U64(json_u64(a, "stream"), b[i].stream);
      if (b[i].tag) {
        REQUIRE(cJSON_IsString(tag));
        CHECK(strcmp(tag->valuestring, b[i].tag) == 0);
      } else {
        CHECK(cJSON_IsNull(tag));
      }
      CHECK(json_u64(a, "age_ns") != UINT64_MAX); /* tracked: an age, not null */
    }
  }
  for (int i = 4; i < NBUF; ++i) {
    CHECK_EQ_U64(found[i], 1);
    for (int k = 0; k < 4; ++k)
      if (b[i].tag == tags[k]) tagged_bytes[k] += b[i].size;
  }
  /* by_tag agrees, largest first. */
  uint64_t prev = UINT64_MAX;
  const cJSON* t;
  cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(doc, "by_tag")) {
    uint64_t bytes = json_u64(t, "bytes");
    CHECK(bytes <= prev);
    prev = bytes;
    const cJSON* name = cJSON_GetObjectItemCaseSensitive(t, "tag");
    for (int k = 0; k < 3; ++k)
      if (cJSON_IsString(name) && strcmp(name->valuestring, tags[k]) == 0)
        CHECK_EQ_U64(bytes, tagged_bytes[k]);
  }
  /* The ring holds allocations and the releases the pools took back. */
  const cJSON* ev = cJSON_GetObjectItemCaseSensitive(doc, "events");
  CHECK_EQ_U64(json_u64(ev, "capacity"), CUBE_MEMORY_EVENT_RING);
  int allocs = 0;
  const cJSON* e;
  cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(ev, "list")) {
    if (strcmp(cJSON_GetObjectItemCaseSensitive(e, "kind")->valuestring, "alloc") == 0) allocs++;
  }
  CHECK(allocs >= NBUF);
  cJSON_Delete(doc);
  free(text);

  char path[512];
  tmp_path(path, sizeof(path), "snapshot");
  REQUIRE_OK(cube_client_memory_snapshot(c, path));
  CHECK(schema_valid(path));
  /* Never over an existing file. */
  CHECK_STATUS(cube_client_memory_snapshot(c, path), CUBE_STATUS_UNAVAILABLE, "cannot create");
  unlink(path);
  for (int i = 4; i < NBUF; ++i) cube_handle_release(b[i].h);
  cube_client_release(c2);
  CTS_END(c);
}

/* A client of the backend's device 0 whose memory is limited to |limit|. */
static cube_status_t limited_client(uint64_t limit, cube_client_t** out) {
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.memory_limit = limit;
  return cube_client_init(cts_device(0), &o, out);
}

/* Out of memory under a memory limit names the largest holder by tag. */
CUBE_TEST(memory_oom_names_the_top_tag) {
  CTS_REQUIRE_BACKEND();
  cube_client_t* c = NULL;
  REQUIRE_OK(limited_client(64ull << 20, &c));
  /* One page big enough for everything, so that only the limit stops us. */
  cube_memory_pools_t pools = {0};
  pools.pool_count = 1;
  pools.pools[0].kind = CUBE_POOL_EXCLUSIVE;
  pools.pools[0].max_alloc_size = 64ull << 20;
  REQUIRE_OK(cube_client_memory_install(c, &pools));
  uint64_t seed = seed_now();
  static const char* const tags[] = {"weights", "grads", "optimizer"};
  uint64_t bytes[3] = {0};
  cube_handle_t h[12];
  int n = 0;
  for (; n < 12; ++n) {
    int k = (int)(cube_test_rand(&seed) % 3);
    uint64_t size = (1ull << 20) + cube_test_rand(&seed) % (3ull << 20);
    size = (size + 4095) & ~4095ull; /* whole pages of the exclusive pool: no rounding slack */
    REQUIRE_OK(cube_memory_tag_push(c, tags[k]));
    cube_status_t s = cube_client_empty(c, (size_t)size, &h[n]);
    REQUIRE_OK(cube_memory_tag_pop(c));
    if (s) {
      cube_status_free(s);
      break;
    }
    bytes[k] += size;
  }
  int top = bytes[0] >= bytes[1] && bytes[0] >= bytes[2] ? 0 : bytes[1] >= bytes[2] ? 1 : 2;
  cube_handle_t big;
  cube_status_t s = cube_client_empty(c, 60ull << 20, &big);
  REQUIRE(cube_status_code(s) == CUBE_STATUS_OUT_OF_MEMORY);
  const char* msg = cube_status_message(s);
  const char* line = strstr(msg, "largest holders by tag: ");
  REQUIRE(line != NULL);
  line += strlen("largest holders by tag: ");
  CHECK(strncmp(line, tags[top], strlen(tags[top])) == 0);
  cube_status_free(s);
  for (int i = 0; i < n; ++i) cube_handle_release(h[i]);
  CTS_END(c);
}

static void release_all(cube_handle_t* h, int n) {
  for (int i = 0; i < n; ++i) cube_handle_release(h[i]);
}

/* The workload: random sizes into two pools (small ones and large ones),
 * all live at once. */
static cube_status_t plan_workload(cube_client_t* c, const uint64_t* sizes, int n,
                                   cube_handle_t* h) {
  for (int i = 0; i < n; ++i) {
    cube_status_t s = cube_client_empty(c, (size_t)sizes[i], &h[i]);
    if (s) {
      release_all(h, i);
      return s;
    }
  }
  return CUBE_OK;
}

/* Install, measure, cap at the peaks, run again, then one allocation more
 * fails naming the pool and its cap; installing with live buffers is
 * refused. */
CUBE_TEST(memory_plan_install_measure_cap) {
  CTS_CLIENT(c);
  const uint64_t small_page = 1ull << 20, big_max = 8ull << 20;
  cube_memory_pools_t pools = {0};
  pools.pool_count = 2;
  pools.pools[0].kind = CUBE_POOL_SLICED;
  pools.pools[0].page_size = small_page;
  pools.pools[0].max_alloc_size = 256u << 10;
  snprintf(pools.pools[0].name, sizeof(pools.pools[0].name), "small tensors");
  pools.pools[1].kind = CUBE_POOL_EXCLUSIVE;
  pools.pools[1].max_alloc_size = big_max;
  snprintf(pools.pools[1].name, sizeof(pools.pools[1].name), "large tensors");
  REQUIRE_OK(cube_client_memory_install(c, &pools));
  cube_memory_pools_t got = {0};
  REQUIRE_OK(cube_client_memory_pools(c, &got));
  CHECK_EQ_U64(got.pool_count, 2);
  CHECK(strcmp(got.pools[1].name, "large tensors") == 0);

  uint64_t seed = seed_now();
  enum { N = 40 };
  uint64_t sizes[N];
  for (int i = 0; i < N; ++i)
    sizes[i] = (i % 4 == 0) ? (300u << 10) + cube_test_rand(&seed) % (big_max - (300u << 10))
                            : 1 + cube_test_rand(&seed) % (256u << 10);
  cube_handle_t h[N];
  REQUIRE_OK(cube_client_memory_measure_begin(c));
  REQUIRE_OK(plan_workload(c, sizes, N, h));
  /* Installing now is refused: buffers are live. */
  CHECK_STATUS(cube_client_memory_install(c, &pools), CUBE_STATUS_FAILED_PRECONDITION,
               "live buffer", "before installing pools");
  release_all(h, N);
  cube_memory_pools_t plan = {0};
  REQUIRE_OK(cube_client_memory_measure_end(c, &plan));
  CHECK_STATUS(cube_client_memory_measure_end(c, NULL), CUBE_STATUS_FAILED_PRECONDITION,
               "not measuring");
  REQUIRE(plan.pool_count == 2);
  CHECK(plan.pools[0].capped && plan.pools[1].capped);
  CHECK(plan.pools[0].cap > 0 && plan.pools[0].cap % small_page == 0);
  CHECK(plan.pools[1].cap > 0);
  REQUIRE_OK(cube_client_sync(c));
  REQUIRE_OK(cube_client_memory_install(c, &plan));
  /* The same workload again fits exactly... */
  REQUIRE_OK(plan_workload(c, sizes, N, h));
  /* ... and one more page of the small pool does not: the status names the
   * pool and its cap. */
  cube_handle_t extra;
  cube_status_t s = cube_client_empty(c, 200u << 10, &extra);
  cube_memory_usage_t u;
  CHECK_OK(cube_client_memory_usage(c, &u));
  if (s == CUBE_OK) {
    /* It fitted in the small pool's free space: fill it until it cannot. */
    cube_handle_t more[64];
    int m = 0;
    while (m < 64 && (s = cube_client_empty(c, 200u << 10, &more[m])) == CUBE_OK) ++m;
    release_all(more, m);
    cube_handle_release(extra);
  }
  REQUIRE(cube_status_code(s) == CUBE_STATUS_OUT_OF_MEMORY);
  char cap[64];
  snprintf(cap, sizeof(cap), "small tensors is capped at ");
  CHECK(strstr(cube_status_message(s), cap) != NULL);
  snprintf(cap, sizeof(cap), "(%" PRIu64 " bytes)", plan.pools[0].cap);
  CHECK(strstr(cube_status_message(s), cap) != NULL);
  cube_status_free(s);
  /* A large one past the large pool's cap names that pool. */
  s = cube_client_empty(c, (size_t)big_max, &extra);
  REQUIRE(cube_status_code(s) == CUBE_STATUS_OUT_OF_MEMORY);
  CHECK(strstr(cube_status_message(s), "large tensors is capped at ") != NULL);
  cube_status_free(s);
  release_all(h, N);
  /* Bad configurations name the pool and the field. */
  cube_memory_pools_t bad = pools;
  bad.pools[0].max_alloc_size = 2 * small_page;
  CHECK_STATUS(cube_client_memory_install(c, &bad), CUBE_STATUS_INVALID_ARGUMENT, "pools[0]",
               "max_alloc_size");
  bad = pools;
  bad.pools[1].alignment = 3;
  CHECK_STATUS(cube_client_memory_install(c, &bad), CUBE_STATUS_INVALID_ARGUMENT, "alignment");
  /* Back to the ladder. */
  CHECK_OK(cube_client_memory_install(c, NULL));
  CTS_END(c);
}

/* A configuration that cannot be is refused before the device has made any
 * stream (no buffer yet), as after: it was once kept then, and every later
 * allocation failed creating the stream's pools. */
CUBE_TEST(memory_plan_bad_install_on_a_fresh_device) {
  CTS_CLIENT(c);
  cube_memory_pools_t before = {0};
  REQUIRE_OK(cube_client_memory_pools(c, &before));
  cube_memory_pools_t bad = {0};
  bad.pool_count = 1;
  bad.pools[0].kind = CUBE_POOL_SLICED;
  bad.pools[0].page_size = 1u << 20;
  bad.pools[0].max_alloc_size = 1u << 20;
  bad.pools[0].alignment = 3;
  snprintf(bad.pools[0].name, sizeof(bad.pools[0].name), "odd");
  CHECK_STATUS(cube_client_memory_install(c, &bad), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_memory_install", "pool 0", "alignment 3");
  bad.pools[0].alignment = 0;
  bad.pools[0].kind = CUBE_POOL_EXCLUSIVE;
  bad.pools[0].page_size = 0;
  bad.pools[0].max_alloc_size = 1000; /* not a multiple of the device's alignment */
  if (1000 % cube_client_properties(c)->memory.alignment != 0)
    CHECK_STATUS(cube_client_memory_install(c, &bad), CUBE_STATUS_INVALID_ARGUMENT,
                 "cube_client_memory_install", "max_alloc_size 1000");
  /* Nothing changed: the ladder is still there and buffers are made. */
  cube_memory_pools_t after = {0};
  REQUIRE_OK(cube_client_memory_pools(c, &after));
  CHECK_EQ_U64(after.pool_count, before.pool_count);
  CHECK(memcmp(&after.pools, &before.pools, sizeof(after.pools)) == 0);
  uint8_t data[100];
  cube_test_fill_random(data, sizeof(data), 8100);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  CHECK(cts_read_equals(c, h, data, sizeof(data)));
  cube_handle_release(h);
  CTS_END(c);
}

/* A cap below one page of its pool (and above 0) is refused at install:
 * the pool could never take a page, and every request it would take failed
 * later with an out-of-memory status. A cap of 0 (a plan's cap for an unused
 * pool) and a cap of one page are taken, and hold. */
CUBE_TEST(memory_plan_cap_below_a_page_is_refused) {
  CTS_CLIENT(c);
  uint64_t seed = seed_now();
  uint64_t page = (uint64_t)1 << (16 + cube_test_rand(&seed) % 5); /* 64 KiB .. 1 MiB */
  uint64_t cap = 1 + cube_test_rand(&seed) % (page - 1);
  cube_memory_pools_t pools = {0};
  pools.pool_count = 1;
  pools.pools[0] = (cube_pool_config_t){.kind = CUBE_POOL_SLICED, .page_size = page,
                                        .max_alloc_size = page, .capped = true, .cap = cap};
  snprintf(pools.pools[0].name, sizeof(pools.pools[0].name), "tiny");
  cube_memory_pools_t before = {0};
  REQUIRE_OK(cube_client_memory_pools(c, &before));
  char cap_text[64], page_text[64];
  snprintf(cap_text, sizeof(cap_text), "cap %" PRIu64 " is below one page", cap);
  snprintf(page_text, sizeof(page_text), "(%" PRIu64 " bytes)", page);
  CHECK_STATUS(cube_client_memory_install(c, &pools), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_memory_install", "pools[0]", cap_text, page_text);
  cube_memory_pools_t after = {0};
  REQUIRE_OK(cube_client_memory_pools(c, &after)); /* nothing changed */
  CHECK(memcmp(&after.pools, &before.pools, sizeof(after.pools)) == 0);
  /* A fitted exclusive pool's granule is its page. */
  pools.pools[0] = (cube_pool_config_t){.kind = CUBE_POOL_EXCLUSIVE, .page_size = page,
                                        .max_alloc_size = 8 * page, .capped = true, .cap = cap};
  CHECK_STATUS(cube_client_memory_install(c, &pools), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_memory_install", "pools[0]", cap_text);
  /* One page: taken, and one page of requests fits, not more. */
  pools.pools[0] = (cube_pool_config_t){.kind = CUBE_POOL_SLICED, .page_size = page,
                                        .max_alloc_size = page, .capped = true, .cap = page};
  REQUIRE_OK(cube_client_memory_install(c, &pools));
  cube_handle_t h, h2;
  REQUIRE_OK(cube_client_empty(c, page / 2, &h));
  CHECK_STATUS(cube_client_empty(c, page, &h2), CUBE_STATUS_OUT_OF_MEMORY, "capped at");
  cube_handle_release(h);
  REQUIRE_OK(cube_client_sync(c));
  /* 0: the pool takes nothing. */
  pools.pools[0].cap = 0;
  REQUIRE_OK(cube_client_memory_install(c, &pools));
  CHECK_STATUS(cube_client_empty(c, 100, &h), CUBE_STATUS_OUT_OF_MEMORY, "capped at 0 B");
  REQUIRE_OK(cube_client_memory_install(c, NULL));
  CTS_END(c);
}

/* A pool the device refused a page while measuring (its page is larger
 * than the memory limit): its request took an exact-size buffer, and under
 * the plan it must again, rather than stop at a cap of the nothing it held
 * (fuzz_memory_plan found the plan failing the workload it was made from). */
CUBE_TEST(memory_plan_after_a_refused_page) {
  CTS_REQUIRE_BACKEND();
  cube_client_t* c = NULL;
  REQUIRE_OK(limited_client(4u << 20, &c));
  const uint64_t page = 16u << 20;
  const uint64_t max_page = cube_client_properties(c)->memory.max_page_size;
  if (max_page < page) {
    cube_client_release(c);
    CUBE_SKIP("pages of at most %llu bytes here", (unsigned long long)max_page);
  }
  cube_memory_pools_t pools = {0};
  pools.pool_count = 1;
  pools.pools[0].kind = CUBE_POOL_SLICED;
  pools.pools[0].page_size = page;
  pools.pools[0].max_alloc_size = page;
  snprintf(pools.pools[0].name, sizeof(pools.pools[0].name), "big pages");
  REQUIRE_OK(cube_client_memory_install(c, &pools));
  uint8_t data[1000];
  cube_test_fill_random(data, sizeof(data), 8200);
  REQUIRE_OK(cube_client_memory_measure_begin(c));
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  CHECK(cts_read_equals(c, h, data, sizeof(data)));
  cube_handle_release(h);
  REQUIRE_OK(cube_client_sync(c));
  cube_memory_pools_t plan = {0};
  REQUIRE_OK(cube_client_memory_measure_end(c, &plan));
  REQUIRE(plan.pool_count == 1);
  CHECK(plan.pools[0].capped);
  CHECK(plan.pools[0].cap >= page); /* the page it asked for */
  REQUIRE_OK(cube_client_memory_install(c, &plan));
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  CHECK(cts_read_equals(c, h, data, sizeof(data)));
  cube_handle_release(h);
  CTS_END(c);
}

/* Checks every pool of the snapshot |doc|: free_bytes is what its free
 * slices add up to, fragmentation is 1 - largest_free_block / free_bytes
 * (0 when nothing is free), and an exclusive pool whose pages all hold a
 * live buffer has nothing free. Returns the exclusive pools' free bytes. */
static uint64_t check_free_bytes(const cJSON* doc) {
  uint64_t exclusive_free = 0;
  const cJSON* p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(doc, "pools")) {
    uint64_t sum = 0, largest = 0;
    const cJSON* pg;
    cJSON_ArrayForEach(pg, cJSON_GetObjectItemCaseSensitive(p, "pages")) {
      const cJSON* sl;
      cJSON_ArrayForEach(sl, cJSON_GetObjectItemCaseSensitive(pg, "slices")) {
        if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(sl, "free"))) continue;
        sum += json_u64(sl, "length");
        if (json_u64(sl, "length") > largest) largest = json_u64(sl, "length");
      }
    }
    uint64_t free_bytes = json_u64(p, "free_bytes");
    CHECK_EQ_U64(free_bytes, sum);
    CHECK(json_u64(p, "largest_free_block") <= free_bytes);
    CHECK(json_u64(p, "largest_free_block") >= largest);
    double frag = cJSON_GetObjectItemCaseSensitive(p, "fragmentation")->valuedouble;
    double want = free_bytes ? 1.0 - (double)json_u64(p, "largest_free_block") / (double)free_bytes
                             : 0.0;
    CHECK(frag > want - 1e-9 && frag < want + 1e-9);
    const char* kind = cJSON_GetObjectItemCaseSensitive(p, "kind")->valuestring;
    if (strcmp(kind, "exclusive") == 0) exclusive_free += free_bytes;
  }
  return exclusive_free;
}

/* Free bytes and fragmentation count free blocks only. An exclusive page
 * holds one buffer rounded up to the pool's granule; that rounding was
 * counted as free (reserved - in use - padding) with no free block, so a
 * pool of live buffers only read as fragmented to the full, 1.0, in every
 * snapshot and in `cube memory`. */
CUBE_TEST(memory_snapshot_free_bytes_are_free_blocks) {
  CTS_CLIENT(c);
  uint64_t seed = seed_now();
  enum { N = 6 };
  cube_handle_t h[N];
  for (int i = 0; i < N; ++i) {
    /* 3 to 9 MiB and an odd number of bytes: past any granule's multiple. */
    size_t size = (3u << 20) + (size_t)(cube_test_rand(&seed) % (6u << 20)) * 2 + 1;
    REQUIRE_OK(cube_client_empty(c, size, &h[i]));
  }
  char* text = NULL;
  REQUIRE_OK(cube_client_memory_snapshot_json(c, &text));
  cJSON* doc = cJSON_Parse(text);
  free(text);
  REQUIRE(doc != NULL);
  CHECK_EQ_U64(check_free_bytes(doc), 0); /* every exclusive page holds a live buffer */
  cJSON_Delete(doc);
  /* Released buffers whose pages the pools keep: free blocks now. */
  for (int i = 0; i < N; i += 2) cube_handle_release(h[i]);
  REQUIRE_OK(cube_client_sync(c));
  REQUIRE_OK(cube_client_memory_snapshot_json(c, &text));
  doc = cJSON_Parse(text);
  free(text);
  REQUIRE(doc != NULL);
  check_free_bytes(doc);
  cJSON_Delete(doc);
  for (int i = 1; i < N; i += 2) cube_handle_release(h[i]);
  cube_client_release(c);
}

typedef struct snap_from_log {
  cube_client_t* c;
  int calls;
  cube_status_t first; /* the first snapshot's status */
  cube_status_t usage; /* cube_client_memory_usage's, from the same place */
} snap_from_log_t;

static void snap_log_fn(void* user, const char* line) {
  (void)line;
  snap_from_log_t* s = user;
  if (s->calls++) return;
  char* text = NULL;
  s->first = cube_client_memory_snapshot_json(s->c, &text);
  free(text);
  cube_memory_usage_t u;
  s->usage = cube_client_memory_usage(s->c, &u);
}

/* A snapshot (or a memory usage) asked for from the server's log callback
 * (which runs inside the device's own task) is refused, as any call that
 * waits for the device there is: the message now names the call, not only
 * "re-entrant use of service ...". */
CUBE_TEST(memory_snapshot_from_a_log_callback_names_the_call) {
  CTS_REQUIRE_KERNEL_LOGS();
  snap_from_log_t s = {NULL, 0, NULL, NULL};
  /* "Executing <kernel>" at every launch */
  CTS_CLIENT_LOGGING(s.c, CUBE_PROFILE_EXEC, snap_log_fn, &s);
  CTS_KERNEL(k, "nop_logged", cts_k_nop, 1, 0, CUBE_ARG_BUFFER);
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(s.c, 64, &h));
  cube_arg_t a = cube_arg_buffer(h);
  REQUIRE_OK(cube_client_launch(s.c, k, cube_count_static(1, 1, 1), 1, &a));
  REQUIRE_OK(cube_client_sync(s.c));
  REQUIRE(s.calls > 0);
  CHECK_STATUS(s.first, CUBE_STATUS_FAILED_PRECONDITION, "cube_client_memory_snapshot_json",
               "re-entrant");
  CHECK_STATUS(s.usage, CUBE_STATUS_FAILED_PRECONDITION, "cube_client_memory_usage",
               "re-entrant");
  cube_handle_release(h);
  cube_kernel_release(k);
  cube_client_release(s.c);
}

/* The process keeps at most 4096 distinct tags. cube_handle_set_tag of a
 * released handle is NOT_FOUND and takes none of them: it interned the tag
 * before it looked at the handle, so such a call used up a tag (and, with
 * the tags gone, reported that instead of the released handle). An empty
 * tag is refused by both calls, naming what NULL does. */
CUBE_TEST(memory_tag_of_a_released_handle_takes_no_tag) {
  CTS_CLIENT(c);
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 64, &h));
  REQUIRE_OK(cube_handle_set_tag(h, "first"));
  cube_handle_release(h);
  CHECK_STATUS(cube_handle_set_tag(h, "never-kept"), CUBE_STATUS_NOT_FOUND, "cube_handle_set_tag");
  CHECK_STATUS(cube_handle_set_tag(h, ""), CUBE_STATUS_INVALID_ARGUMENT, "cube_handle_set_tag",
               "empty", "NULL takes");
  CHECK_STATUS(cube_memory_tag_push(c, ""), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_memory_tag_push", "empty");
  /* "first" and 4094 more: one tag is left, which the failed call above did
   * not take. A random order of the names: the table is searched whole. */
  uint64_t seed = seed_now();
  uint32_t base = (uint32_t)(cube_test_rand(&seed) % 100000u);
  for (uint32_t i = 0; i < 4094; ++i) {
    char tag[32];
    snprintf(tag, sizeof(tag), "t%u", base + i);
    REQUIRE_OK(cube_memory_tag_push(c, tag));
    REQUIRE_OK(cube_memory_tag_pop(c));
  }
  REQUIRE_OK(cube_client_empty(c, 64, &h));
  REQUIRE_OK(cube_handle_set_tag(h, "the-last-one"));
  REQUIRE_OK(cube_handle_set_tag(h, "first")); /* known: no new tag */
  CHECK_STATUS(cube_handle_set_tag(h, "one-too-many"), CUBE_STATUS_FAILED_PRECONDITION,
               "cube_handle_set_tag", "\"one-too-many\"", "4097", "4096");
  cube_handle_release(h);
  /* Released: NOT_FOUND, not the full table. */
  CHECK_STATUS(cube_handle_set_tag(h, "one-too-many"), CUBE_STATUS_NOT_FOUND,
               "cube_handle_set_tag");
  cube_client_release(c);
}

/* Tags and pool names are the program's bytes; the snapshot is UTF-8 JSON
 * all the same (a byte that is not UTF-8 reads as U+FFFD; UTF-8 is kept). */
CUBE_TEST(memory_snapshot_text_is_utf8) {
  CTS_CLIENT(c);
  cube_memory_pools_t pools = {0};
  REQUIRE_OK(cube_client_memory_pools(c, &pools));
  snprintf(pools.pools[0].name, sizeof(pools.pools[0].name), "\xE6\xB1\xA0 pool");
  snprintf(pools.pools[1].name, sizeof(pools.pools[1].name), "odd \xC0\xAF");
  REQUIRE_OK(cube_client_memory_install(c, &pools));
  cube_handle_t h[2];
  REQUIRE_OK(cube_memory_tag_push(c, "weights \xFF\xFE"));
  REQUIRE_OK(cube_client_empty(c, 1000, &h[0]));
  REQUIRE_OK(cube_memory_tag_pop(c));
  REQUIRE_OK(cube_memory_tag_push(c, "\xE6\xB8\xA9\xE5\xBA\xA6"));
  REQUIRE_OK(cube_client_empty(c, 3000, &h[1]));
  REQUIRE_OK(cube_memory_tag_pop(c));
  char* text = NULL;
  REQUIRE_OK(cube_client_memory_snapshot_json(c, &text));
  size_t bad = 0;
  CHECK(cube_test_utf8_ok((const unsigned char*)text, strlen(text), &bad));
  cJSON* doc = cJSON_Parse(text);
  free(text);
  REQUIRE(doc != NULL);
  bool weights = false, cjk = false, pool_cjk = false, pool_odd = false;
  const cJSON* t;
  cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(doc, "by_tag")) {
    const char* tag = cube_test_json_str(t, "tag");
    weights |= strcmp(tag, "weights \xEF\xBF\xBD\xEF\xBF\xBD") == 0;
    cjk |= strcmp(tag, "\xE6\xB8\xA9\xE5\xBA\xA6") == 0;
  }
  cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(doc, "pools")) {
    const char* name = cube_test_json_str(t, "name");
    pool_cjk |= strcmp(name, "\xE6\xB1\xA0 pool") == 0;
    pool_odd |= strcmp(name, "odd \xEF\xBF\xBD\xEF\xBF\xBD") == 0;
  }
  CHECK(weights && cjk);
  CHECK(pool_cjk && pool_odd);
  cJSON_Delete(doc);
  cube_handle_release_array(h, 2);
  REQUIRE_OK(cube_client_sync(c));
  CHECK_OK(cube_client_memory_install(c, NULL));
  CTS_END(c);
}

/* A tag set on one thread, read by a snapshot on another: the snapshot sees
 * the tag's text whole (the tag was published with a relaxed store, and a
 * snapshot read the text without an order to the thread that wrote it: TSan
 * saw it in the trace stress case). The worker tags each buffer with a tag
 * new to the process; the last eight stay live and are in the last
 * snapshot, each with its buffer's bytes. */
typedef struct cts_tagger {
  cube_client_t* c;
  atomic_int made, bad;
  atomic_bool done, release;
  cube_handle_t live[8];
  uint32_t base;
} cts_tagger_t;

static void* cts_tagger_main(void* p) {
  cts_tagger_t* t = p;
  for (int r = 0; r < 160; ++r) {
    cube_handle_t* slot = &t->live[r % 8];
    if (slot->id) cube_handle_release(*slot);
    char tag[32];
    snprintf(tag, sizeof(tag), "w%u", t->base + (uint32_t)r);
    if (cube_client_empty(t->c, 256u + 8u * (uint32_t)r, slot) || cube_handle_set_tag(*slot, tag)) {
      atomic_fetch_add(&t->bad, 1);
      break;
    }
    atomic_store(&t->made, r + 1);
  }
  cube_status_t st = cube_client_sync(t->c); /* its stream's work done before the last snapshot */
  if (st) atomic_fetch_add(&t->bad, 1);
  cube_status_free(st);
  atomic_store(&t->done, true);
  while (!atomic_load(&t->release)) cts_sleep_ms(1);
  for (int i = 0; i < 8; ++i)
    if (t->live[i].id) cube_handle_release(t->live[i]);
  return NULL;
}

static bool cts_tag_is_workers(const char* tag, uint32_t base, uint32_t* out) {
  char* end = NULL;
  if (tag[0] != 'w') return false;
  unsigned long v = strtoul(tag + 1, &end, 10);
  if (!end || *end || v < base || v >= base + 160u) return false;
  *out = (uint32_t)v - base;
  return true;
}

CUBE_TEST(memory_tags_set_on_another_thread) {
  CTS_CLIENT(c);
  uint64_t seed = seed_now();
  cts_tagger_t t = {.c = c, .base = (uint32_t)(cube_test_rand(&seed) % 100000u)};
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, cts_tagger_main, &t) == 0);
  int snaps = 0;
  for (bool last = false; !last; ++snaps) {
    last = atomic_load(&t.done) || atomic_load(&t.bad);
    char* text = NULL;
    CHECK_OK(cube_client_memory_snapshot_json(c, &text));
    cJSON* doc = text ? cJSON_Parse(text) : NULL;
    free(text);
    CHECK(doc != NULL);
    if (!doc) break;
    bool seen[8] = {false};
    const cJSON* e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "by_tag")) {
      const cJSON* tag = cJSON_GetObjectItemCaseSensitive(e, "tag");
      if (!cJSON_IsString(tag)) continue; /* untagged */
      uint32_t r = 0;
      CHECK(cts_tag_is_workers(tag->valuestring, t.base, &r));
      if (!last || r + 8u < 160u) continue;
      seen[r % 8] = true;
      CHECK(cube_test_json_num(e, "bytes") >= 256.0 + 8.0 * r);
    }
    if (last) {
      CHECK_EQ_U64((uint64_t)atomic_load(&t.made), 160);
      for (int i = 0; i < 8; ++i) CHECK(seen[i]);
    }
    cJSON_Delete(doc);
  }
  atomic_store(&t.release, true);
  pthread_join(th, NULL);
  CHECK_EQ_U64((uint64_t)atomic_load(&t.bad), 0);
  CHECK(snaps >= 1);
  CTS_END(c);
}

/* The ledger's device fields add up to what the driver reports used; where
 * the driver reports nothing, cube's own sum stands for it. */
CUBE_TEST(memory_ledger_adds_up) {
  CTS_CLIENT(c);
  uint64_t seed = seed_now();
  cube_handle_t h[8];
  for (int i = 0; i < 8; ++i)
    REQUIRE_OK(cube_client_empty(c, 1 + cube_test_rand(&seed) % (4u << 20), &h[i]));
  CHECK_OK(cube_client_sync(c));
  cube_memory_ledger_t l = {.struct_size = sizeof(l)};
  REQUIRE_OK(cube_client_memory_ledger(c, &l));
  cube_memory_report_t r = {.struct_size = sizeof(r)};
  REQUIRE_OK(cube_client_memory_report(c, &r));
  CHECK_EQ_U64(l.pools, r.device_reserved);
  CHECK((int64_t)(l.pools + l.modules + l.collectives + l.context) + l.unaccounted ==
        (int64_t)l.driver_used);
  if (getenv("CUBE_CUDA_DRIVER") && cts_backend()->backend == CUBE_BACKEND_CUDA &&
      strstr(getenv("CUBE_CUDA_DRIVER"), "mock")) {
    /* The mock driver: a context of 8 MiB, 64 KiB per module, and exactly
     * the device allocations it was asked for. */
    CHECK(l.driver_reports);
    CHECK(l.context >= (8ull << 20));
    CHECK(l.driver_total > l.driver_used);
    CHECK(l.unaccounted >= 0);
  }
  if (!l.driver_reports) {
    CHECK_EQ_U64(l.driver_used, l.pools);
    CHECK(l.unaccounted == 0);
  }
  release_all(h, 8);
  /* Too small a struct_size is refused; NULL too. */
  cube_memory_ledger_t tiny = {.struct_size = 4};
  CHECK_STATUS(cube_client_memory_ledger(c, &tiny), CUBE_STATUS_INVALID_ARGUMENT, "struct_size");
  CHECK_STATUS(cube_client_memory_ledger(c, NULL), CUBE_STATUS_INVALID_ARGUMENT, "out_ledger");
  CTS_END(c);
}
