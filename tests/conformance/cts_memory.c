/* Memory accounting, cleanup, persistent allocation, out of memory
 * (the "Memory:" sections of docs/cubecl.md). Every case runs in a fresh process, so the calling
 * thread's stream starts empty. */
#include <stdlib.h>
#include <string.h>

#include "cts.h"

CUBE_TEST(memory_usage_empty_release_cleanup) {
  CTS_CLIENT(c);
  cube_memory_usage_t u0, u;
  REQUIRE_OK(cube_client_memory_usage(c, &u0));
  CHECK_EQ_U64(u0.number_allocs, 0);
  CHECK_EQ_U64(u0.bytes_in_use, 0);
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 1000, &h));
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.number_allocs, 1);
  CHECK_EQ_U64(u.bytes_in_use, 1000);
  CHECK(u.bytes_reserved >= 1000 + u.bytes_padding);
  CHECK(u.bytes_padding < cube_client_properties(c)->memory.alignment);
  CHECK_EQ_U64((u.bytes_in_use + u.bytes_padding) % cube_client_properties(c)->memory.alignment, 0);
  char line[256];
  CHECK(strlen(cube_memory_usage_format(&u, line, sizeof(line))) > 0);
  /* Usage of the device includes it. */
  cube_memory_usage_t d;
  CHECK_OK(cube_client_memory_usage_device(c, &d));
  CHECK(d.number_allocs >= 1 && d.bytes_in_use >= 1000);
  uint64_t reserved = u.bytes_reserved;
  cube_handle_release(h);
  CHECK_OK(cube_client_sync(c));
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.number_allocs, 0);
  CHECK_EQ_U64(u.bytes_in_use, 0);
  CHECK_EQ_U64(u.bytes_padding, 0);
  CHECK(u.bytes_reserved > 0);
  CHECK_EQ_U64(u.bytes_reserved, reserved); /* pools keep their pages */
  /* The same size again reuses the slice. */
  REQUIRE_OK(cube_client_empty(c, 1000, &h));
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.number_allocs, 1);
  CHECK_EQ_U64(u.bytes_reserved, reserved);
  cube_handle_release(h);
  CHECK_OK(cube_client_memory_cleanup(c));
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.bytes_reserved, u0.bytes_reserved);
  CHECK_EQ_U64(u.number_allocs, 0);
  CTS_END(c);
}

/* cube_client_empty computes a 1-D buffer's layout itself (the pool-hit
 * path): the same view and buffer size as cube_layout_compute gives for it
 * under the device's policy and alignment, and the same pool slice again and
 * again (the descriptor and handle slot recycled, a new id every time). */
CUBE_TEST(memory_empty_layout_and_reuse) {
  CTS_CLIENT(c);
  const cube_device_properties_t* p = cube_client_properties(c);
  const size_t sizes[] = {1, 7, 511, 512, 513, 1000, 4096, (1u << 20) + 3};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); ++i) {
    cube_layout_desc_t d;
    REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 1,
                                           (const uint64_t[]){sizes[i]}, 1, &d));
    uint64_t offset = 1, size = 0, total = 0;
    REQUIRE_OK(cube_layout_compute(p->layout_policy, p->memory.alignment, 1, &d, NULL, &offset,
                                   &size, &total));
    cube_handle_t h, prev = CUBE_HANDLE_NULL;
    uint64_t storage_offset = 0;
    for (int round = 0; round < 3; ++round) {
      REQUIRE_OK(cube_client_empty(c, sizes[i], &h));
      CHECK(h.id != prev.id);
      CHECK_EQ_U64(cube_handle_size(h), size);
      CHECK_EQ_U64(cube_handle_offset(h), offset);
      CHECK_EQ_U64(cube_handle_buffer_size(h), total);
      cube_memory_usage_t u;
      CHECK_OK(cube_client_memory_usage(c, &u));
      CHECK_EQ_U64(u.number_allocs, 1);
      CHECK_EQ_U64(u.bytes_in_use, sizes[i]);
      /* The same slice every round (the resource's address: host or device). */
      cube_resource_t* r = NULL;
      CHECK_OK(cube_client_get_resource(c, h, &r));
      if (r) {
        uint64_t at = (uint64_t)(uintptr_t)cube_resource_ptr(r);
        if (round > 0) CHECK_EQ_U64(at, storage_offset);
        storage_offset = at;
        cube_resource_release(r);
      }
      cube_handle_release(h);
      CHECK_STATUS(cube_handle_release_checked(h), CUBE_STATUS_NOT_FOUND, "released");
      prev = h;
    }
  }
  CTS_END(c);
}

CUBE_TEST(memory_cleanup_keeps_live_memory) {
  CTS_CLIENT(c);
  uint8_t data[3000];
  cube_test_fill_random(data, sizeof(data), 7000);
  cube_handle_t live, dead;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &live));
  REQUIRE_OK(cube_client_empty(c, 5 << 20, &dead)); /* another pool */
  cube_memory_usage_t before, after;
  REQUIRE_OK(cube_client_memory_usage(c, &before));
  cube_handle_release(dead);
  CHECK_OK(cube_client_memory_cleanup(c));
  CHECK_OK(cube_client_memory_usage(c, &after));
  CHECK(after.bytes_reserved < before.bytes_reserved);
  CHECK(after.bytes_reserved >= sizeof(data));
  CHECK_EQ_U64(after.number_allocs, 1);
  CHECK_EQ_U64(after.bytes_in_use, sizeof(data));
  CHECK(cts_read_equals(c, live, data, sizeof(data)));
  cube_handle_release(live);
  CHECK_OK(cube_client_memory_cleanup(c));
  CHECK_OK(cube_client_memory_usage(c, &after));
  CHECK_EQ_U64(after.bytes_reserved, 0);
  CTS_END(c);
}

CUBE_TEST(memory_usage_device_sums_streams) {
  CTS_CLIENT(c);
  cube_client_t* p = NULL;
  REQUIRE_OK(cube_client_clone(c, &p));
  cube_client_set_stream(p, cube_stream_id_new());
  cube_memory_usage_t d0;
  REQUIRE_OK(cube_client_memory_usage_device(c, &d0));
  cube_handle_t h1, h2, h3;
  REQUIRE_OK(cube_client_empty(c, 1000, &h1));
  REQUIRE_OK(cube_client_empty(p, 3000, &h2));
  REQUIRE_OK(cube_client_empty(p, 77, &h3));
  cube_memory_usage_t uc, up, d, dp;
  REQUIRE_OK(cube_client_memory_usage(c, &uc));
  REQUIRE_OK(cube_client_memory_usage(p, &up));
  REQUIRE_OK(cube_client_memory_usage_device(c, &d));
  REQUIRE_OK(cube_client_memory_usage_device(p, &dp));
  CHECK_EQ_U64(uc.number_allocs, 1);
  CHECK_EQ_U64(uc.bytes_in_use, 1000);
  CHECK_EQ_U64(up.number_allocs, 2);
  CHECK_EQ_U64(up.bytes_in_use, 3077);
  CHECK_EQ_U64(d.number_allocs, d0.number_allocs + 3);
  CHECK_EQ_U64(d.bytes_in_use, d0.bytes_in_use + 4077);
  CHECK_EQ_U64(d.bytes_reserved, uc.bytes_reserved + up.bytes_reserved);
  CHECK_EQ_U64(d.bytes_padding, uc.bytes_padding + up.bytes_padding);
  CHECK(memcmp(&d, &dp, sizeof(d)) == 0); /* the same from either client */
  /* Cleanup of the device cleans every stream. */
  cube_handle_release(h1);
  cube_handle_release(h2);
  cube_handle_release(h3);
  CHECK_OK(cube_client_memory_cleanup(c)); /* only the thread's stream */
  CHECK_OK(cube_client_memory_usage(p, &up));
  CHECK(up.bytes_reserved > 0);
  CHECK_OK(cube_client_memory_cleanup_device(c));
  CHECK_OK(cube_client_memory_usage_device(c, &d));
  CHECK_EQ_U64(d.number_allocs, 0);
  CHECK_EQ_U64(d.bytes_reserved, d0.bytes_reserved);
  cube_memory_report_t r = {0};
  CHECK_OK(cube_client_memory_report(c, &r));
  CHECK_EQ_U64(r.device_reserved, d.bytes_reserved);
  cube_client_release(p);
  CTS_END(c);
}

static const cube_pool_report_t* cts_pool(const cube_memory_report_t* r, cube_pool_kind_t kind) {
  for (uint32_t i = 0; i < r->pool_count && i < CUBE_MAX_POOLS; ++i)
    if (r->pools[i].kind == kind) return &r->pools[i];
  return NULL;
}

static void cts_check_report_totals(const cube_memory_report_t* r, const cube_memory_usage_t* u) {
  cube_memory_usage_t s = {0, 0, 0, 0};
  CHECK(r->pool_count >= 1 && r->pool_count <= CUBE_MAX_POOLS);
  for (uint32_t i = 0; i < r->pool_count && i < CUBE_MAX_POOLS; ++i) {
    s.number_allocs += r->pools[i].usage.number_allocs;
    s.bytes_in_use += r->pools[i].usage.bytes_in_use;
    s.bytes_padding += r->pools[i].usage.bytes_padding;
    s.bytes_reserved += r->pools[i].usage.bytes_reserved;
    CHECK(r->pools[i].pages_peak >= r->pools[i].pages);
  }
  CHECK(memcmp(&s, &r->total, sizeof(s)) == 0);
  CHECK(memcmp(u, &r->total, sizeof(s)) == 0);
}

typedef struct cts_persist {
  cube_client_t* c;
  cube_handle_t h;
  size_t size;
} cts_persist_t;

static cube_status_t cts_alloc_in_fn(void* p) {
  cts_persist_t* x = p;
  return cube_client_empty(x->c, x->size, &x->h);
}

static cube_status_t cts_alloc_then_fail(void* p) {
  cts_persist_t* x = p;
  cube_status_t s = cube_client_empty(x->c, x->size, &x->h);
  if (s) return s;
  cube_handle_t dummy;
  return cube_client_empty(x->c, 0, &dummy); /* INVALID_ARGUMENT */
}

CUBE_TEST(memory_persistent_allocation_report) {
  CTS_CLIENT(c);
  cts_persist_t x = {c, CUBE_HANDLE_NULL, 5000};
  REQUIRE_OK(cube_client_memory_persistent_allocation(c, cts_alloc_in_fn, &x));
  REQUIRE(!cube_handle_is_null(x.h));
  cube_memory_report_t r = {0};
  cube_memory_usage_t u;
  REQUIRE_OK(cube_client_memory_report(c, &r));
  REQUIRE_OK(cube_client_memory_usage(c, &u));
  cts_check_report_totals(&r, &u);
  const cube_pool_report_t* pp = cts_pool(&r, CUBE_POOL_PERSISTENT);
  REQUIRE(pp != NULL);
  CHECK_EQ_U64(pp->usage.number_allocs, 1);
  CHECK_EQ_U64(pp->usage.bytes_in_use, 5000);
  CHECK(pp->usage.bytes_reserved >= 5000);
  CHECK(pp->pages >= 1);
  CHECK_EQ_U64(u.number_allocs, 1);
  /* Back to Auto afterwards: another size goes to a dynamic pool. */
  cube_handle_t h2;
  REQUIRE_OK(cube_client_empty(c, 777, &h2));
  REQUIRE_OK(cube_client_memory_report(c, &r));
  pp = cts_pool(&r, CUBE_POOL_PERSISTENT);
  REQUIRE(pp != NULL);
  CHECK_EQ_U64(pp->usage.number_allocs, 1);
  CHECK_EQ_U64(pp->usage.bytes_in_use, 5000);
  CHECK_EQ_U64(r.total.number_allocs, 2);
  /* A failing fn: its status comes back and the mode is restored. */
  cts_persist_t y = {c, CUBE_HANDLE_NULL, 6000};
  CHECK_STATUS(cube_client_memory_persistent_allocation(c, cts_alloc_then_fail, &y),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_client_empty");
  cube_handle_t h3;
  REQUIRE_OK(cube_client_empty(c, 888, &h3));
  REQUIRE_OK(cube_client_memory_report(c, &r));
  pp = cts_pool(&r, CUBE_POOL_PERSISTENT);
  REQUIRE(pp != NULL);
  CHECK_EQ_U64(pp->usage.number_allocs, 2); /* 5000 and 6000 */
  CHECK_EQ_U64(pp->usage.bytes_in_use, 11000);
  CHECK_EQ_U64(r.total.number_allocs, 4);
  /* Freed persistent buffers go on cleanup. */
  cube_handle_release(x.h);
  cube_handle_release(y.h);
  cube_handle_release(h2);
  cube_handle_release(h3);
  CHECK_OK(cube_client_memory_cleanup(c));
  REQUIRE_OK(cube_client_memory_report(c, &r));
  pp = cts_pool(&r, CUBE_POOL_PERSISTENT);
  if (pp) {
    CHECK_EQ_U64(pp->usage.bytes_reserved, 0);
    CHECK_EQ_U64(pp->pages, 0);
  }
  CTS_END(c);
}

typedef struct cts_two_clients {
  cube_client_t* thread_client;
  cube_client_t* pinned_client;
  cube_handle_t a, b;
} cts_two_clients_t;

static cube_status_t cts_alloc_on_both(void* p) {
  cts_two_clients_t* t = p;
  cube_status_t s = cube_client_empty(t->thread_client, 3333, &t->a);
  if (!s) s = cube_client_empty(t->pinned_client, 4444, &t->b);
  return s;
}

/* memory_persistent_allocation switches the calling thread's stream, not
 * the client's pinned one (as CubeCL). */
CUBE_TEST(memory_persistent_allocation_uses_thread_stream) {
  CTS_CLIENT(c);
  cube_client_t* p = NULL;
  REQUIRE_OK(cube_client_clone(c, &p));
  cube_client_set_stream(p, cube_stream_id_new());
  cts_two_clients_t t = {c, p, CUBE_HANDLE_NULL, CUBE_HANDLE_NULL};
  REQUIRE_OK(cube_client_memory_persistent_allocation(p, cts_alloc_on_both, &t));
  cube_memory_report_t rc = {0}, rp = {0};
  REQUIRE_OK(cube_client_memory_report(c, &rc));
  REQUIRE_OK(cube_client_memory_report(p, &rp));
  const cube_pool_report_t* pc = cts_pool(&rc, CUBE_POOL_PERSISTENT);
  const cube_pool_report_t* pp = cts_pool(&rp, CUBE_POOL_PERSISTENT);
  REQUIRE(pc != NULL);
  CHECK_EQ_U64(pc->usage.number_allocs, 1); /* the thread stream's 3333 */
  CHECK_EQ_U64(rc.total.number_allocs, 1);
  CHECK(pp == NULL || pp->usage.number_allocs == 0); /* the pinned stream's 4444 is dynamic */
  CHECK_EQ_U64(rp.total.number_allocs, 1);
  cube_handle_release(t.a);
  cube_handle_release(t.b);
  cube_client_release(p);
  CTS_END(c);
}

CUBE_TEST(memory_allocation_mode_persistent_then_auto) {
  CTS_CLIENT(c);
  CHECK_OK(cube_client_allocation_mode(c, CUBE_ALLOCATION_PERSISTENT));
  cube_handle_t a, b;
  REQUIRE_OK(cube_client_empty(c, 4096 + 13, &a));
  CHECK_OK(cube_client_allocation_mode(c, CUBE_ALLOCATION_AUTO));
  REQUIRE_OK(cube_client_empty(c, 999, &b));
  cube_memory_report_t r = {0};
  REQUIRE_OK(cube_client_memory_report(c, &r));
  const cube_pool_report_t* pp = cts_pool(&r, CUBE_POOL_PERSISTENT);
  REQUIRE(pp != NULL);
  CHECK_EQ_U64(pp->usage.number_allocs, 1);
  CHECK_EQ_U64(pp->usage.bytes_in_use, 4096 + 13);
  CHECK_EQ_U64(r.total.number_allocs, 2);
  CHECK_EQ_U64(r.total.bytes_in_use, 4096 + 13 + 999);
  /* As CubeCL (docs/cubecl.md, "Memory: persistent memory"): in Auto mode a size the persistent pool already has goes there. */
  cube_handle_t c2;
  REQUIRE_OK(cube_client_empty(c, 4096 + 13, &c2));
  REQUIRE_OK(cube_client_memory_report(c, &r));
  pp = cts_pool(&r, CUBE_POOL_PERSISTENT);
  REQUIRE(pp != NULL);
  CHECK_EQ_U64(pp->usage.number_allocs, 2);
  /* A bad mode is refused. */
  CHECK_STATUS(cube_client_allocation_mode(c, (cube_allocation_mode_t)7), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_allocation_mode", "7");
  cube_handle_release(a);
  cube_handle_release(b);
  cube_handle_release(c2);
  CTS_END(c);
}

CUBE_TEST(memory_out_of_memory_with_limit) {
  setenv("CUBE_MEMORY_LIMIT", "64M", 1);
  CTS_CLIENT(c);
  /* Some memory in use first, so the report has pages. */
  uint8_t data[1000];
  cube_test_fill_random(data, sizeof(data), 7100);
  cube_handle_t small;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &small));
  const size_t big = (size_t)100 << 20;
  cube_handle_t h = CUBE_HANDLE_NULL;
  cube_status_t s = cube_client_empty(c, big, &h);
  CHECK(cube_status_code(s) == CUBE_STATUS_OUT_OF_MEMORY);
  CHECK(cube_handle_is_null(h));
  CHECK(cts_contains(cube_status_message(s), "cube_client_empty", (const char*)NULL));
  uint64_t requested = 0;
  cube_memory_report_t r = {0};
  memset(&r, 0, sizeof(r));
  CHECK(cube_status_oom_report(s, &requested, &r));
  CHECK(cube_status_oom_report(s, &requested, NULL));
  CHECK_EQ_U64(requested, big);
  CHECK(r.memory_limit == (64ull << 20) || r.memory_limit == 64000000ull);
  CHECK(r.pool_count >= 1 && r.pool_count <= CUBE_MAX_POOLS);
  int pages = 0, free_block = 0;
  for (uint32_t i = 0; i < r.pool_count && i < CUBE_MAX_POOLS; ++i) {
    pages += r.pools[i].pages > 0;
    if (r.pools[i].pages > 0 && r.pools[i].largest_free_block > 0) free_block = 1;
    CHECK(r.pools[i].largest_free_block <= (r.pools[i].page_size ? r.pools[i].page_size : UINT64_MAX));
  }
  CHECK(pages >= 1);
  CHECK(free_block); /* the page of |small| has room left */
  CHECK(r.total.number_allocs >= 1);
  CHECK(r.device_reserved <= r.memory_limit);
  cube_status_free(s);
  /* Other errors carry no report. */
  s = cube_client_empty(c, 0, &h);
  CHECK(!cube_status_oom_report(s, &requested, &r));
  cube_status_free(s);
  CHECK(!cube_status_oom_report(CUBE_OK, &requested, &r));
  /* The client stays usable. */
  CHECK_OK(cube_client_flush(c));
  CHECK(cts_read_equals(c, small, data, sizeof(data)));
  cube_handle_t more[8];
  for (int i = 0; i < 8; ++i) {
    REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data) - (size_t)i, &more[i]));
    CHECK(cts_read_equals(c, more[i], data, sizeof(data) - (size_t)i));
  }
  cube_handle_release_array(more, 8);
  CHECK_OK(cube_client_sync(c));
  cube_memory_usage_t u;
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.number_allocs, 1);
  CHECK(u.bytes_reserved <= (64ull << 20));
  /* The memory limit is reported. */
  CHECK_OK(cube_client_memory_report(c, &r));
  CHECK(r.memory_limit == (64ull << 20) || r.memory_limit == 64000000ull);
  cube_handle_release(small);
  CTS_END(c);
}

CUBE_TEST(memory_size_above_max_page_size) {
  CTS_CLIENT(c);
  uint64_t max_page = cube_client_properties(c)->memory.max_page_size;
  REQUIRE(max_page > 0 && max_page < SIZE_MAX);
  cube_handle_t h = CUBE_HANDLE_NULL;
  CHECK_STATUS(cube_client_empty(c, (size_t)max_page + 1, &h), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_empty");
  CHECK(cube_handle_is_null(h));
  const uint64_t shape[2] = {max_page / 4 + 1, 1};
  cube_tensor_t t;
  CHECK_STATUS(cube_client_empty_tensor(c, 2, shape, 4, &t), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_empty_tensor");
  /* Nothing was reserved for it. */
  cube_memory_usage_t u;
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.number_allocs, 0);
  CHECK_EQ_U64(u.bytes_reserved, 0);
  CTS_END(c);
}

CUBE_TEST(memory_handle_can_mut_and_accessors) {
  CTS_CLIENT(c);
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 300, &h));
  CHECK(cube_handle_can_mut(h));
  cube_handle_t h2 = cube_handle_retain(h);
  CHECK(h2.id == h.id);
  CHECK(!cube_handle_can_mut(h));
  cube_handle_release(h2);
  CHECK(cube_handle_can_mut(h));
  cube_handle_t v;
  REQUIRE_OK(cube_handle_offset_view(h, 10, 20, &v));
  CHECK(!cube_handle_can_mut(h));
  CHECK(!cube_handle_can_mut(v));
  CHECK_EQ_U64(cube_handle_size(v), 270);
  CHECK_EQ_U64(cube_handle_offset(v), cube_handle_offset(h) + 10);
  cube_handle_release(v);
  CHECK(cube_handle_can_mut(h));
  /* Queued work does not count (bindings are not handles). */
  CTS_KERNEL(k, "copy", cts_k_copy, 1, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER);
  cube_arg_t a[2] = {cube_arg_buffer(h), cube_arg_buffer(h)};
  CHECK_OK(cube_client_launch(c, k, cube_count_static(1, 1, 1), 2, a));
  CHECK(cube_handle_can_mut(h));
  CHECK_EQ_U64(cube_handle_size(h), 300);
  /* The buffer may be rounded up to the alignment, never more. */
  CHECK(cube_handle_buffer_size(h) >= 300);
  CHECK(cube_handle_buffer_size(h) < 300 + cube_client_properties(c)->memory.alignment);
  CHECK_EQ_U64(cube_handle_offset(h), 0);
  cube_device_id_t dev = {CUBE_BACKEND_NONE, 77};
  CHECK_OK(cube_handle_device(h, &dev));
  CHECK(dev.backend == cts_device(0).backend && dev.index == 0);
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(h);
  /* Released: false / 0, and the checked release says so. */
  CHECK(!cube_handle_can_mut(h));
  CHECK_EQ_U64(cube_handle_size(h), 0);
  CHECK_STATUS(cube_handle_release_checked(h), CUBE_STATUS_NOT_FOUND, "released");
  CHECK_STATUS(cube_handle_device(h, &dev), CUBE_STATUS_NOT_FOUND, "released");
  cube_handle_release(h); /* harmless */
  cube_handle_release(CUBE_HANDLE_NULL);
  cube_kernel_release(k);
  CTS_END(c);
}

CUBE_TEST(memory_report_matches_usage) {
  CTS_CLIENT(c);
  cube_handle_t h[6];
  const size_t sizes[6] = {1, 3, 1000, 70000, 1000003, 9 << 20};
  for (int i = 0; i < 6; ++i) REQUIRE_OK(cube_client_empty(c, sizes[i], &h[i]));
  cube_memory_report_t r = {0};
  cube_memory_usage_t u;
  REQUIRE_OK(cube_client_memory_report(c, &r));
  REQUIRE_OK(cube_client_memory_usage(c, &u));
  cts_check_report_totals(&r, &u);
  CHECK_EQ_U64(u.number_allocs, 6);
  CHECK_EQ_U64(u.bytes_in_use, 1 + 3 + 1000 + 70000 + 1000003 + (9 << 20));
  for (uint32_t i = 0; i < r.pool_count && i < CUBE_MAX_POOLS; ++i) {
    const cube_pool_report_t* p = &r.pools[i];
    if (p->kind == CUBE_POOL_SLICED && p->pages) {
      CHECK_EQ_U64(p->usage.bytes_reserved, p->pages * p->page_size);
      CHECK(p->largest_free_block <= p->page_size);
      CHECK(p->usage.bytes_in_use + p->usage.bytes_padding + p->largest_free_block <= p->usage.bytes_reserved);
    }
  }
  CHECK(r.device_reserved >= u.bytes_reserved);
  if (!getenv("CUBE_MEMORY_LIMIT")) CHECK_EQ_U64(r.memory_limit, 0);
  cube_handle_release_array(h, 6);
  CTS_END(c);
}

CUBE_TEST(memory_limit_server_option) {
  CTS_REQUIRE_BACKEND();
  if (getenv("CUBE_MEMORY_LIMIT")) unsetenv("CUBE_MEMORY_LIMIT");
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.memory_limit = 48ull << 20;
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_init(cts_device(0), &o, &c));
  cube_handle_t h = CUBE_HANDLE_NULL;
  cube_status_t s = cube_client_empty(c, (size_t)60 << 20, &h);
  CHECK(cube_status_code(s) == CUBE_STATUS_OUT_OF_MEMORY);
  uint64_t requested = 0;
  cube_memory_report_t r = {0};
  CHECK(cube_status_oom_report(s, &requested, &r));
  CHECK_EQ_U64(requested, (uint64_t)60 << 20);
  CHECK_EQ_U64(r.memory_limit, 48ull << 20);
  cube_status_free(s);
  /* Below the limit works, and reserved memory stays under it. */
  REQUIRE_OK(cube_client_empty(c, (size_t)1 << 20, &h));
  cube_memory_report_t r2 = {0};
  CHECK_OK(cube_client_memory_report(c, &r2));
  CHECK_EQ_U64(r2.memory_limit, 48ull << 20);
  CHECK(r2.device_reserved <= (48ull << 20));
  cube_handle_release(h);
  CTS_END(c);
}

CUBE_TEST(memory_exclusive_pages_config) {
  CTS_REQUIRE_BACKEND();
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.memory_config = CUBE_MEMORY_CONFIG_EXCLUSIVE_PAGES;
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_init(cts_device(0), &o, &c));
  uint8_t data[1000];
  cube_test_fill_random(data, sizeof(data), 7200);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  CHECK(cts_read_equals(c, h, data, sizeof(data)));
  CHECK_OK(cube_client_sync(c));
  cube_memory_report_t r = {0};
  REQUIRE_OK(cube_client_memory_report(c, &r));
  int exclusive_used = 0;
  for (uint32_t i = 0; i < r.pool_count && i < CUBE_MAX_POOLS; ++i) {
    CHECK(r.pools[i].kind != CUBE_POOL_SLICED);
    if (r.pools[i].kind == CUBE_POOL_EXCLUSIVE && r.pools[i].usage.number_allocs == 1) exclusive_used = 1;
  }
  CHECK(exclusive_used);
  CHECK_EQ_U64(r.total.number_allocs, 1);
  cube_handle_release(h);
  CHECK_OK(cube_client_memory_cleanup(c));
  cube_memory_usage_t u;
  CHECK_OK(cube_client_memory_usage(c, &u));
  CHECK_EQ_U64(u.number_allocs, 0);
  CHECK_EQ_U64(u.bytes_reserved, 0);
  CTS_END(c);
}

/* Nested persistent windows (CubeCL's current behaviour): closing the inner
 * window restores the outer one's Persistent mode, not Auto; closing the
 * outer restores what was set before it (here Auto, then Persistent set by
 * allocation_mode). */
typedef struct cts_nest {
  cube_client_t* c;
  cube_handle_t inner, after_inner;
  size_t inner_size, after_size;
} cts_nest_t;

static cube_status_t cts_nest_inner(void* p) {
  cts_nest_t* n = p;
  return cube_client_empty(n->c, n->inner_size, &n->inner);
}

static cube_status_t cts_nest_outer(void* p) {
  cts_nest_t* n = p;
  cube_status_t s = cube_client_memory_persistent_allocation(n->c, cts_nest_inner, n);
  if (s) return s;
  /* Still inside the outer window: this size must be persistent too. */
  return cube_client_empty(n->c, n->after_size, &n->after_inner);
}

CUBE_TEST(memory_persistent_windows_nest) {
  CTS_CLIENT(c);
  cts_nest_t n = {c, CUBE_HANDLE_NULL, CUBE_HANDLE_NULL, 3000 + 17, 5000 + 29};
  REQUIRE_OK(cube_client_memory_persistent_allocation(c, cts_nest_outer, &n));
  cube_handle_t auto_h;
  REQUIRE_OK(cube_client_empty(c, 7001, &auto_h)); /* outside both: Auto */
  cube_memory_report_t r = {0};
  REQUIRE_OK(cube_client_memory_report(c, &r));
  const cube_pool_report_t* pp = cts_pool(&r, CUBE_POOL_PERSISTENT);
  REQUIRE(pp != NULL);
  CHECK_EQ_U64(pp->usage.number_allocs, 2);
  CHECK_EQ_U64(pp->usage.bytes_in_use, 3000 + 17 + 5000 + 29);
  CHECK_EQ_U64(r.total.number_allocs, 3);
  /* A window opened while allocation_mode(PERSISTENT) is in force gives it
   * back when it closes. */
  CHECK_OK(cube_client_allocation_mode(c, CUBE_ALLOCATION_PERSISTENT));
  cts_nest_t m = {c, CUBE_HANDLE_NULL, CUBE_HANDLE_NULL, 1111, 0};
  REQUIRE_OK(cube_client_memory_persistent_allocation(c, cts_nest_inner, &m));
  cube_handle_t still;
  REQUIRE_OK(cube_client_empty(c, 2223, &still));
  REQUIRE_OK(cube_client_memory_report(c, &r));
  pp = cts_pool(&r, CUBE_POOL_PERSISTENT);
  REQUIRE(pp != NULL);
  CHECK_EQ_U64(pp->usage.number_allocs, 4);
  CHECK_OK(cube_client_allocation_mode(c, CUBE_ALLOCATION_AUTO));
  cube_handle_release(n.inner);
  cube_handle_release(n.after_inner);
  cube_handle_release(auto_h);
  cube_handle_release(m.inner);
  cube_handle_release(still);
  CTS_END(c);
}
