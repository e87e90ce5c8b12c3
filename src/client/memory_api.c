/* The client API of memory observability and planning (cube/memory.h):
 * tags, snapshots, the ledger, pool installation and measuring mode. The
 * work is the server's (server/memory_plan.c). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/abi.h"
#include "client/client_internal.h"
#include "memory/track.h"
#include "platform/private_file.h"

void cube_memory_tracking_enable(void) { cube__mem_track_enable(); }

cube_status_t cube_memory_tag_push(cube_client_t* c, const char* tag) {
  const char* fn = "cube_memory_tag_push";
  CUBE__CHECK_CLIENT(c, fn);
  if (!tag) return CUBE_INVALID("%s: tag is NULL", fn);
  const char* interned = NULL;
  CUBE_RETURN_IF_ERROR(cube__tag_intern(fn, tag, &interned));
  return cube__tag_push(fn, c, interned);
}

cube_status_t cube_memory_tag_pop(cube_client_t* c) {
  const char* fn = "cube_memory_tag_pop";
  CUBE__CHECK_CLIENT(c, fn);
  return cube__tag_pop(fn, c);
}

cube_status_t cube_handle_set_tag(cube_handle_t h, const char* tag) {
  const char* fn = "cube_handle_set_tag";
  if (h.id == 0) return CUBE_INVALID("%s: h is the null handle", fn);
  if (tag && !tag[0])
    return CUBE_INVALID("%s: the tag is empty (NULL takes the buffer's tag away)", fn);
  /* The handle first: a released one neither takes one of the process's
   * tags nor hears that the tags ran out. */
  cube__handle_info_t info;
  CUBE_RETURN_IF_ERROR(cube__handle_get(h, fn, &info));
  const char* interned = NULL;
  CUBE_RETURN_IF_ERROR(cube__tag_intern(fn, tag, &interned));
  cube__mem_track_enable();
  atomic_store_explicit(&info.mem->tag, interned, memory_order_release);
  return CUBE_OK;
}

/* The calling stream's queued work first (as cube_client_memory_usage), so
 * that buffers it was using are back in their pools and its failure is
 * seen. */
static cube_status_t cube__memory_settle(cube_client_t* c, const char* fn) {
  cube__stream_t* st;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &st));
  if (cube__stream_auto(st)) cube__auto_step_end(st, "a memory snapshot");
  cube_status_t barrier = cube__server_barrier(st);
  if (barrier) return cube__status_annotate(barrier, "%s", fn); /* e.g. from a log callback */
  cube_memory_usage_t u;
  return cube__stream_usage(st, fn, true, &u); /* refuses a stream with deferred errors */
}

cube_status_t cube_client_memory_snapshot_json(cube_client_t* c, char** out_json) {
  const char* fn = "cube_client_memory_snapshot_json";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_json, fn, "out_json");
  *out_json = NULL;
  CUBE_RETURN_IF_ERROR(cube__memory_settle(c, fn));
  return cube__server_snapshot(c->server, fn, out_json);
}

cube_status_t cube_client_memory_snapshot(cube_client_t* c, const char* path) {
  const char* fn = "cube_client_memory_snapshot";
  CUBE__CHECK_CLIENT(c, fn);
  if (!path) return CUBE_INVALID("%s: path is NULL", fn);
  if (!path[0]) return CUBE_INVALID("%s: path is empty", fn);
  CUBE_RETURN_IF_ERROR(cube__memory_settle(c, fn));
  char* text = NULL;
  CUBE_RETURN_IF_ERROR(cube__server_snapshot(c->server, fn, &text));
  int fd = cube__file_create_private(path);
  if (fd < 0) {
    int e = errno;
    free(text);
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "%s: cannot create '%s': %s%s", fn, path,
                             strerror(e), e == EEXIST ? " (an existing file is never replaced)" : "");
  }
  size_t n = strlen(text), done = 0;
  int e = 0;
  while (done < n) {
    ssize_t w = write(fd, text + done, n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      e = w < 0 ? errno : EIO;
      break;
    }
    done += (size_t)w;
  }
  free(text);
  if (close(fd) != 0 && !e) e = errno;
  if (e) {
    unlink(path);
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "%s: writing '%s' (%zu of %zu bytes): %s",
                             fn, path, done, n, strerror(e));
  }
  return CUBE_OK;
}

cube_status_t cube_client_memory_ledger(cube_client_t* c, cube_memory_ledger_t* out_ledger) {
  const char* fn = "cube_client_memory_ledger";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_ledger, fn, "out_ledger");
  cube_memory_ledger_t l;
  cube_status_t status = cube__server_ledger(c->server, &l);
  if (status) return cube__status_annotate(status, "%s", fn);
  return cube__struct_write(fn, "out_ledger->struct_size", &cube__struct_memory_ledger, out_ledger,
                            &l);
}

//===----------------------------------------------------------------------===//
// Planning
//===----------------------------------------------------------------------===//

static void cube__pool_to_public(const cube__pool_options_t* in, cube_pool_config_t* out) {
  memset(out, 0, sizeof(*out));
  out->kind = in->kind;
  out->page_size = in->page_size;
  out->max_alloc_size = in->max_alloc_size;
  out->alignment = in->alignment;
  out->dealloc_period = in->dealloc_period;
  out->capped = in->capped;
  out->cap = in->cap;
  memcpy(out->name, in->name, sizeof(out->name));
}

static cube_status_t cube__pools_write(const char* fn, const char* field,
                                       const cube__pool_options_t* pools, uint32_t n,
                                       cube_memory_pools_t* out) {
  cube_memory_pools_t full;
  memset(&full, 0, sizeof(full));
  full.struct_size = sizeof(full);
  full.pool_count = n;
  for (uint32_t i = 0; i < n; ++i) cube__pool_to_public(&pools[i], &full.pools[i]);
  return cube__struct_write(fn, field, &cube__struct_memory_pools, out, &full);
}

cube_status_t cube_client_memory_install(cube_client_t* c, const cube_memory_pools_t* in) {
  const char* fn = "cube_client_memory_install";
  CUBE__CHECK_CLIENT(c, fn);
  if (!in) return cube__server_install(c->server, fn, NULL, 0);
  cube_memory_pools_t p;
  memset(&p, 0, sizeof(p));
  CUBE_RETURN_IF_ERROR(
      cube__struct_read(fn, "pools->struct_size", &cube__struct_memory_pools, in, &p));
  if (p.pool_count == 0 || p.pool_count > CUBE_MAX_POOLS - 1)
    return CUBE_INVALID("%s: pool_count %u is outside 1..%d", fn, p.pool_count,
                        CUBE_MAX_POOLS - 1);
  cube__pool_options_t opts[CUBE_MAX_POOLS - 1];
  const cube_device_properties_t* props = &c->server->props;
  for (uint32_t i = 0; i < p.pool_count; ++i) {
    const cube_pool_config_t* q = &p.pools[i];
    if (q->kind != CUBE_POOL_SLICED && q->kind != CUBE_POOL_EXCLUSIVE)
      return CUBE_INVALID("%s: pools[%u].kind %d is not CUBE_POOL_SLICED (0) or "
                          "CUBE_POOL_EXCLUSIVE (1)", fn, i, (int)q->kind);
    if ((q->kind == CUBE_POOL_SLICED && q->page_size == 0) ||
        q->page_size > props->memory.max_page_size) /* exclusive: a fitted pool's granule */
      return CUBE_INVALID("%s: pools[%u].page_size %" PRIu64 " is outside 1..%" PRIu64
                          " (the device's max_page_size)", fn, i, q->page_size,
                          props->memory.max_page_size);
    if (q->kind == CUBE_POOL_SLICED && q->max_alloc_size > q->page_size)
      return CUBE_INVALID("%s: pools[%u].max_alloc_size %" PRIu64 " exceeds its page_size %" PRIu64,
                          fn, i, q->max_alloc_size, q->page_size);
    /* A page is what a pool takes at a time: a cap above 0 but below one
     * would let it take none, as a cap of 0 says plainly (what a plan gives
     * a pool the workload never used). */
    if (q->capped && q->cap && q->page_size && q->cap < q->page_size)
      return CUBE_INVALID("%s: pools[%u].cap %" PRIu64 " is below one page of that pool (%" PRIu64
                          " bytes), so the pool could take no page; give at least a page, or 0 "
                          "for a pool that takes nothing", fn, i, q->cap, q->page_size);
    if (memchr(q->name, '\0', sizeof(q->name)) == NULL)
      return CUBE_INVALID("%s: pools[%u].name is not NUL-terminated within %zu bytes", fn, i,
                          sizeof(q->name));
    memset(&opts[i], 0, sizeof(opts[i]));
    opts[i].kind = q->kind;
    opts[i].page_size = q->page_size;
    opts[i].max_alloc_size = q->max_alloc_size;
    opts[i].dealloc_period = q->dealloc_period;
    opts[i].alignment = q->alignment;
    opts[i].capped = q->capped;
    opts[i].cap = q->cap;
    memcpy(opts[i].name, q->name, sizeof(opts[i].name));
  }
  return cube__server_install(c->server, fn, opts, p.pool_count);
}

cube_status_t cube_client_memory_pools(cube_client_t* c, cube_memory_pools_t* out_pools) {
  const char* fn = "cube_client_memory_pools";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_pools, fn, "out_pools");
  cube__pool_options_t pools[CUBE_MAX_POOLS];
  uint32_t n = cube__server_pools(c->server, pools);
  return cube__pools_write(fn, "out_pools->struct_size", pools, n, out_pools);
}

cube_status_t cube_client_memory_measure_begin(cube_client_t* c) {
  const char* fn = "cube_client_memory_measure_begin";
  CUBE__CHECK_CLIENT(c, fn);
  return cube__server_measure(c->server, fn, true, NULL, NULL);
}

cube_status_t cube_client_memory_measure_end(cube_client_t* c, cube_memory_pools_t* out_plan) {
  const char* fn = "cube_client_memory_measure_end";
  CUBE__CHECK_CLIENT(c, fn);
  if (out_plan && cube__struct_size_of(out_plan) && cube__struct_size_of(out_plan) < sizeof(size_t))
    return cube__struct_write(fn, "out_plan->struct_size", &cube__struct_memory_pools, out_plan,
                              out_plan); /* the refusal, nothing written */
  cube__pool_options_t pools[CUBE_MAX_POOLS];
  uint32_t n = 0;
  CUBE_RETURN_IF_ERROR(cube__server_measure(c->server, fn, false, pools, &n));
  if (!out_plan) return CUBE_OK;
  return cube__pools_write(fn, "out_plan->struct_size", pools, n, out_plan);
}
