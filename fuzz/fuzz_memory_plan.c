/* fuzz_memory_plan: memory planning on the CPU backend (include/cube/memory.h,
 * "Memory planning"): a pool configuration decoded from the input is
 * installed, a workload decoded from the rest runs while the device
 * measures, the plan (every pool capped at its peak) is installed, and the
 * same workload runs again.
 *
 * Input: the pool count (sometimes 0 or too many), per pool its kind
 * (sometimes no kind), page size, largest slice or request, alignment
 * (sometimes not a power of two), aging period, cap and name (sometimes
 * without its NUL); then up to 48 operations: make a buffer (1 B .. 6 MiB,
 * its bytes uploaded and known when at most 64 KiB), release one, read one
 * back, sync, cleanup.
 *
 * Checked: no crash, no sanitizer report, no leak; a refused install is
 * INVALID_ARGUMENT and changes nothing (cube_client_memory_pools reads the
 * same before and after); an accepted one reads back as given; every buffer
 * made reads back what was uploaded; a failed allocation is OUT_OF_MEMORY;
 * while the caps hold (installed, not measuring) no capped pool of the
 * memory snapshot holds more than its cap; measure_end's plan caps every
 * pool and installs once the buffers are released; under the plan every
 * allocation the measured run made succeeds again, with the same bytes. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cube/cube.h"
#include "fuzz_input.h"

#define CHECK(cond) FZ_CHECK(cond)
#define CHECK_OK(expr) FZ_CHECK_OK(expr)

#define MAX_OPS 48
#define MAX_LIVE 32
#define KNOWN_MAX (64u << 10)
#define MEMORY_LIMIT (96ull << 20)

static cube_client_t* g_client;
static uint8_t* g_pattern; /* KNOWN_MAX bytes */

static void at_exit(void) {
  cube_client_release(g_client);
  g_client = NULL;
  cube_shutdown();
  free(g_pattern);
}

static void init_once(void) {
  if (g_client) return;
  g_client = fz_cpu_client(0, MEMORY_LIMIT);
  g_pattern = malloc(KNOWN_MAX);
  if (!g_pattern) abort();
  for (uint32_t i = 0; i < KNOWN_MAX; ++i) g_pattern[i] = (uint8_t)(i * 2654435761u >> 13);
  atexit(at_exit);
}

static uint64_t pick_size(fz_t* in) {
  static const uint64_t sizes[] = {0,         4096,      65536,     1u << 20, 2u << 20,
                                   4u << 20,  16u << 20, 1ull << 40, 1000,    3u << 19};
  uint8_t s = fz_u8(in);
  return s < 240 ? sizes[s % 10] : fz_u32(in);
}

static void decode_pools(fz_t* in, cube_memory_pools_t* p) {
  memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  uint8_t n = fz_u8(in);
  p->pool_count = n < 250 ? 1 + n % 4 : (n == 250 ? 0 : CUBE_MAX_POOLS + 3u);
  for (uint32_t i = 0; i < CUBE_MAX_POOLS - 1 && i < p->pool_count; ++i) {
    cube_pool_config_t* q = &p->pools[i];
    uint8_t k = fz_u8(in);
    q->kind = k < 250 ? (cube_pool_kind_t)(k & 1) : (cube_pool_kind_t)k;
    q->page_size = pick_size(in);
    uint8_t m = fz_u8(in);
    /* Mostly a fraction of the page, a multiple of 64; sometimes any size. */
    q->max_alloc_size = m < 200 ? (q->page_size ? q->page_size / (1 + m % 8) / 64 * 64 : 0)
                                : pick_size(in);
    if (q->kind == CUBE_POOL_EXCLUSIVE && q->max_alloc_size == 0 && m < 200)
      q->max_alloc_size = (1 + m % 64) * 65536ull;
    static const uint64_t aligns[] = {0, 0, 0, 64, 128, 4096, 3, 32};
    q->alignment = aligns[fz_u8(in) % 8];
    q->dealloc_period = fz_u8(in) % 4;
    uint8_t c = fz_u8(in);
    q->capped = c & 1;
    q->cap = (c >> 1) < 100 ? pick_size(in) : (uint64_t)(c >> 1) << 16;
    uint8_t nm = fz_u8(in);
    if (nm == 255)
      memset(q->name, 'x', sizeof q->name); /* no NUL */
    else if (nm & 1)
      snprintf(q->name, sizeof q->name, "pool-%u", (unsigned)i);
  }
}

typedef struct live {
  cube_handle_t h;
  uint64_t size;
  bool known;
  uint32_t op; /* the operation that made it */
} live_t;

typedef struct run {
  live_t live[MAX_LIVE];
  uint32_t count;
  bool made[MAX_OPS]; /* operation i made a buffer */
} run_t;

static bool any_capped(const cube_memory_pools_t* p) {
  for (uint32_t i = 0; i < p->pool_count && i < CUBE_MAX_POOLS - 1; ++i)
    if (p->pools[i].capped) return true;
  return false;
}

/* No capped pool of the snapshot holds more than its cap. */
static void check_caps(void) {
  char* json = NULL;
  CHECK_OK(cube_client_memory_snapshot_json(g_client, &json));
  cJSON* doc = cJSON_Parse(json);
  free(json);
  CHECK(doc != NULL);
  const cJSON* pool;
  cJSON_ArrayForEach(pool, cJSON_GetObjectItemCaseSensitive(doc, "pools")) {
    const cJSON* cap = cJSON_GetObjectItemCaseSensitive(pool, "cap");
    if (!cJSON_IsNumber(cap)) continue;
    const cJSON* u = cJSON_GetObjectItemCaseSensitive(pool, "usage");
    const cJSON* r = cJSON_GetObjectItemCaseSensitive(u, "bytes_reserved");
    CHECK(cJSON_IsNumber(r));
    if (r->valuedouble > cap->valuedouble) {
      fprintf(stderr, "fuzz_memory_plan: pool '%s' holds %.0f bytes, capped at %.0f\n",
              cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(pool, "name")),
              r->valuedouble, cap->valuedouble);
      abort();
    }
  }
  cJSON_Delete(doc);
}

static void release_all(run_t* r) {
  for (uint32_t i = 0; i < r->count; ++i) cube_handle_release(r->live[i].h);
  r->count = 0;
}

static void verify(const live_t* l) {
  cube_bytes_t* out = NULL;
  CHECK_OK(cube_client_read(g_client, 1, &l->h, &out));
  CHECK(cube_bytes_size(out) == l->size);
  if (l->known) CHECK(memcmp(cube_bytes_const_data(out), g_pattern, l->size) == 0);
  cube_bytes_release(out);
}

/* Runs the operations; |must| (may be NULL): operations that must make
 * their buffer. |caps| says whether the caps hold now. */
static void run_ops(const uint8_t* ops, size_t n, run_t* r, const bool* must, bool caps) {
  memset(r, 0, sizeof *r);
  fz_t in = fz_make(ops, n);
  for (uint32_t op = 0; op < MAX_OPS && !fz_done(&in); ++op) {
    uint8_t kind = fz_u8(&in);
    switch (kind % 8) {
      case 0: case 1: case 2: case 3: { /* make */
        if (r->count == MAX_LIVE) break;
        uint8_t s = fz_u8(&in);
        uint64_t size = s < 128   ? 1 + (uint64_t)fz_u16(&in) % KNOWN_MAX
                        : s < 224 ? 1 + (uint64_t)fz_u16(&in) * 16
                                  : 1 + (uint64_t)fz_u16(&in) * 96;
        live_t* l = &r->live[r->count];
        l->size = size;
        l->known = size <= KNOWN_MAX;
        l->op = op;
        cube_status_t st = l->known
                               ? cube_client_create_from_slice(g_client, g_pattern, size, &l->h)
                               : cube_client_empty(g_client, size, &l->h);
        if (st) {
          if (must && must[op]) {
            fprintf(stderr, "fuzz_memory_plan: op %u (%llu bytes) failed under the plan: %s\n",
                    op, (unsigned long long)size, cube_status_message(st));
            abort();
          }
          CHECK(cube_status_code(st) == CUBE_STATUS_OUT_OF_MEMORY);
          cube_status_free(st);
          break;
        }
        r->made[op] = true;
        r->count++;
        if (caps) check_caps();
        break;
      }
      case 4: /* release */
        if (r->count) {
          uint32_t i = fz_u8(&in) % r->count;
          cube_handle_release(r->live[i].h);
          r->live[i] = r->live[--r->count];
        }
        break;
      case 5: /* read back */
        if (r->count) verify(&r->live[fz_u8(&in) % r->count]);
        break;
      case 6:
        CHECK_OK(cube_client_sync(g_client));
        break;
      default:
        CHECK_OK(cube_client_memory_cleanup(g_client));
        break;
    }
  }
  for (uint32_t i = 0; i < r->count; ++i) verify(&r->live[i]);
}

static bool same_pools(const cube_memory_pools_t* a, const cube_memory_pools_t* b) {
  if (a->pool_count != b->pool_count) return false;
  for (uint32_t i = 0; i < a->pool_count; ++i) {
    const cube_pool_config_t *x = &a->pools[i], *y = &b->pools[i];
    if (x->kind != y->kind || x->page_size != y->page_size ||
        x->max_alloc_size != y->max_alloc_size || x->alignment != y->alignment ||
        x->dealloc_period != y->dealloc_period || x->capped != y->capped ||
        (x->capped && x->cap != y->cap) || strcmp(x->name, y->name) != 0)
      return false;
  }
  return true;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  init_once();
  fz_t in = fz_make(data, size);
  cube_memory_pools_t config;
  decode_pools(&in, &config);

  cube_memory_pools_t before, after;
  memset(&before, 0, sizeof before);
  memset(&after, 0, sizeof after);
  CHECK_OK(cube_client_memory_pools(g_client, &before));
  cube_status_t st = cube_client_memory_install(g_client, &config);
  CHECK_OK(cube_client_memory_pools(g_client, &after));
  if (st) {
    CHECK(cube_status_code(st) == CUBE_STATUS_INVALID_ARGUMENT);
    cube_status_free(st);
    CHECK(same_pools(&before, &after));
    return 0;
  }
  if (!same_pools(&config, &after)) {
    for (uint32_t i = 0; i < config.pool_count || i < after.pool_count; ++i)
      fprintf(stderr,
              "pool %u: given kind %d page %llu max %llu align %llu period %llu cap %d/%llu '%s'\n"
              "        read  kind %d page %llu max %llu align %llu period %llu cap %d/%llu '%s'\n",
              i, config.pools[i].kind, (unsigned long long)config.pools[i].page_size,
              (unsigned long long)config.pools[i].max_alloc_size,
              (unsigned long long)config.pools[i].alignment,
              (unsigned long long)config.pools[i].dealloc_period, config.pools[i].capped,
              (unsigned long long)config.pools[i].cap, config.pools[i].name, after.pools[i].kind,
              (unsigned long long)after.pools[i].page_size,
              (unsigned long long)after.pools[i].max_alloc_size,
              (unsigned long long)after.pools[i].alignment,
              (unsigned long long)after.pools[i].dealloc_period, after.pools[i].capped,
              (unsigned long long)after.pools[i].cap, after.pools[i].name);
    CHECK(!"the installed pools read back as given");
  }

  /* The workload as installed, caps holding. */
  static run_t r;
  run_ops(in.p, in.n, &r, NULL, any_capped(&config));
  release_all(&r);

  /* Measured, then under the plan. */
  CHECK_OK(cube_client_memory_install(g_client, &config));
  CHECK_OK(cube_client_memory_measure_begin(g_client));
  run_ops(in.p, in.n, &r, NULL, false);
  bool made[MAX_OPS];
  memcpy(made, r.made, sizeof made);
  release_all(&r);
  CHECK_OK(cube_client_sync(g_client));
  cube_memory_pools_t plan;
  memset(&plan, 0, sizeof plan);
  CHECK_OK(cube_client_memory_measure_end(g_client, &plan));
  CHECK(plan.pool_count == config.pool_count);
  for (uint32_t i = 0; i < plan.pool_count; ++i) CHECK(plan.pools[i].capped);
  CHECK_OK(cube_client_memory_install(g_client, &plan));
  run_ops(in.p, in.n, &r, made, true);
  release_all(&r);
  CHECK_OK(cube_client_sync(g_client));
  CHECK_OK(cube_client_memory_install(g_client, NULL));
  return 0;
}
