/* A device's memory as a whole: snapshots (the JSON document of
 * docs/schemas/memory-snapshot.schema.json), bytes by tag, the ledger, and
 * pool planning (install, measuring mode). docs/observability.md. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/utf8.h"
#include "server/server.h"

#define CUBE__SNAPSHOT_VERSION 1

//===----------------------------------------------------------------------===//
// Bytes by tag
//===----------------------------------------------------------------------===//

uint32_t cube__server_tag_totals(cube__server_t* s, cube__tag_total_t* totals, uint32_t cap) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < s->max_streams; ++i) {
    cube__stream_t* st = atomic_load(&s->streams[i]);
    if (!st) continue;
    pthread_mutex_lock(&st->lock);
    cube__mm_tag_totals(st->mm, totals, &n, cap);
    pthread_mutex_unlock(&st->lock);
  }
  cube__tag_totals_sort(totals, n);
  return n;
}

//===----------------------------------------------------------------------===//
// The ledger
//===----------------------------------------------------------------------===//

cube_status_t cube__server_ledger(cube__server_t* s, cube_memory_ledger_t* out) {
  memset(out, 0, sizeof(*out));
  out->struct_size = sizeof(*out);
  for (uint32_t i = 0; i < s->max_streams; ++i) {
    cube__stream_t* st = atomic_load(&s->streams[i]);
    if (!st || !st->pinned) continue;
    pthread_mutex_lock(&st->lock);
    out->staging += cube__mm_reserved_bytes(st->pinned);
    pthread_mutex_unlock(&st->lock);
  }
  out->pools = atomic_load(&s->device_reserved);
  cube__backend_memory_info_t mi = {0};
  cube_status_t status = cube__backend_ctl(&s->be, NULL, CUBE__CTL_MEMORY_INFO, &mi);
  if (status && cube_status_code(status) != CUBE_STATUS_UNIMPLEMENTED) return status;
  uint64_t own;
  if (status) {
    /* No driver figure: cube's own sum stands for it, nothing unaccounted. */
    cube_status_free(status);
    out->driver_reports = false;
    out->driver_used = out->pools;
    return CUBE_OK;
  }
  out->driver_reports = true;
  out->modules = mi.modules;
  out->context = mi.context;
  out->collectives = 0; /* collectives use pool buffers; a transport's own are unaccounted */
  out->driver_used = mi.used;
  out->driver_total = mi.total;
  own = out->pools + out->modules + out->collectives + out->context;
  out->unaccounted = (int64_t)(mi.used - own); /* two's complement: negative when own > used */
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Snapshots
//===----------------------------------------------------------------------===//

static const char* cube__event_kind(uint32_t kind) {
  switch (kind) {
    case CUBE__MEM_EVENT_ALLOC:
      return "alloc";
    case CUBE__MEM_EVENT_RELEASE:
      return "release";
    default:
      return "oom";
  }
}

static bool cube__snapshot_events(cube__server_t* s, cJSON* doc, uint64_t now) {
  char text[3 * 64 + 1]; /* tags are the program's bytes: the file is UTF-8 all the same */
  cube__mem_event_t* ev = NULL;
  uint64_t total = 0;
  uint32_t n = cube__mem_ring_copy(&s->mem_ring, &ev, &total);
  cJSON* o = cJSON_AddObjectToObject(doc, "events");
  cJSON* list = o ? cJSON_AddArrayToObject(o, "list") : NULL;
  bool ok = list && cJSON_AddNumberToObject(o, "capacity", CUBE__MEM_RING_CAP) &&
            cJSON_AddNumberToObject(o, "recorded", (double)total) &&
            cJSON_AddNumberToObject(o, "dropped", (double)(total - n));
  for (uint32_t i = 0; ok && i < n; ++i) {
    cJSON* e = cJSON_CreateObject();
    if (!e) {
      ok = false;
      break;
    }
    cJSON_AddItemToArray(list, e);
    ok = cJSON_AddNumberToObject(e, "seq", (double)ev[i].seq) &&
         cJSON_AddStringToObject(e, "kind", cube__event_kind(ev[i].kind)) &&
         cJSON_AddNumberToObject(e, "ago_ns", (double)(now >= ev[i].t_ns ? now - ev[i].t_ns : 0)) &&
         cJSON_AddNumberToObject(e, "id", (double)ev[i].id) &&
         cJSON_AddNumberToObject(e, "size", (double)ev[i].size) &&
         cJSON_AddNumberToObject(e, "stream", (double)ev[i].stream) &&
         cJSON_AddStringToObject(e, "memory", ev[i].memory ? ev[i].memory : "") &&
         cJSON_AddNumberToObject(e, "pool", ev[i].pool) &&
         (ev[i].tag ? cJSON_AddStringToObject(e, "tag", cube__utf8_text(ev[i].tag, text,
                                                                         sizeof(text)))
                    : cJSON_AddNullToObject(e, "tag")) != NULL;
  }
  free(ev);
  return ok;
}

static bool cube__snapshot_usage_obj(cJSON* parent, const char* key, const cube_memory_usage_t* u) {
  cJSON* o = cJSON_AddObjectToObject(parent, key);
  return o && cJSON_AddNumberToObject(o, "number_allocs", (double)u->number_allocs) &&
         cJSON_AddNumberToObject(o, "bytes_in_use", (double)u->bytes_in_use) &&
         cJSON_AddNumberToObject(o, "bytes_padding", (double)u->bytes_padding) &&
         cJSON_AddNumberToObject(o, "bytes_reserved", (double)u->bytes_reserved);
}

static bool cube__snapshot_ledger(cJSON* doc, const cube_memory_ledger_t* l) {
  cJSON* o = cJSON_AddObjectToObject(doc, "ledger");
  return o && cJSON_AddBoolToObject(o, "driver_reports", l->driver_reports) &&
         cJSON_AddNumberToObject(o, "pools", (double)l->pools) &&
         cJSON_AddNumberToObject(o, "staging", (double)l->staging) &&
         cJSON_AddNumberToObject(o, "modules", (double)l->modules) &&
         cJSON_AddNumberToObject(o, "collectives", (double)l->collectives) &&
         cJSON_AddNumberToObject(o, "context", (double)l->context) &&
         cJSON_AddNumberToObject(o, "unaccounted", (double)l->unaccounted) &&
         cJSON_AddNumberToObject(o, "driver_used", (double)l->driver_used) &&
         cJSON_AddNumberToObject(o, "driver_total", (double)l->driver_total);
}

/* The document; NULL when host memory ran out. */
static cJSON* cube__snapshot_build(cube__server_t* s, const cube_memory_ledger_t* ledger) {
  uint64_t now = cube__now_ns();
  char text[3 * 128 + 1]; /* names and tags as UTF-8 (base/utf8.h) */
  cJSON* doc = cJSON_CreateObject();
  if (!doc) return NULL;
  const char* backend = cube_backend_name(s->id.backend);
  cJSON* device = cJSON_AddObjectToObject(doc, "device");
  bool ok = cJSON_AddStringToObject(doc, "format", "cube-memory-snapshot") &&
            cJSON_AddNumberToObject(doc, "version", CUBE__SNAPSHOT_VERSION) &&
            cJSON_AddBoolToObject(doc, "tracking", cube__mem_tracking()) && device &&
            cJSON_AddStringToObject(device, "backend", backend ? backend : "?") &&
            cJSON_AddNumberToObject(device, "index", s->id.index) &&
            cJSON_AddStringToObject(device, "name",
                                    cube__utf8_text(s->props.name, text, sizeof(text))) &&
            cJSON_AddNumberToObject(doc, "memory_limit", (double)s->memory_limit);
  cJSON* streams = ok ? cJSON_AddArrayToObject(doc, "streams") : NULL;
  cJSON* pools = streams ? cJSON_AddArrayToObject(doc, "pools") : NULL;
  cJSON* allocations = pools ? cJSON_AddArrayToObject(doc, "allocations") : NULL;
  ok = allocations != NULL;
  cube_memory_usage_t total = {0};
  cube__tag_total_t tags[256];
  uint32_t tag_count = 0;
  for (uint32_t i = 0; ok && i < s->max_streams; ++i) {
    cube__stream_t* st = atomic_load(&s->streams[i]);
    if (!st) continue;
    cJSON* so = cJSON_CreateObject();
    if (!so) {
      ok = false;
      break;
    }
    cJSON_AddItemToArray(streams, so);
    pthread_mutex_lock(&st->lock);
    cube_memory_usage_t u;
    ok = cube__mm_snapshot(st->mm, st->id, now, pools, allocations) &&
         (!st->pinned || cube__mm_snapshot(st->pinned, st->id, now, pools, allocations));
    cube__mm_usage(st->mm, &u); /* the free slices were detached by the walk: no change */
    cube__mm_tag_totals(st->mm, tags, &tag_count, 256);
    cube_allocation_mode_t mode = cube__mm_mode(st->mm);
    pthread_mutex_unlock(&st->lock);
    total.number_allocs += u.number_allocs;
    total.bytes_in_use += u.bytes_in_use;
    total.bytes_padding += u.bytes_padding;
    total.bytes_reserved += u.bytes_reserved;
    ok = ok && cJSON_AddNumberToObject(so, "id", (double)st->id) &&
         cJSON_AddStringToObject(so, "mode",
                                 mode == CUBE_ALLOCATION_PERSISTENT ? "persistent" : "auto") &&
         cube__snapshot_usage_obj(so, "usage", &u);
  }
  ok = ok && cube__snapshot_usage_obj(doc, "total", &total) &&
       cJSON_AddNumberToObject(doc, "device_reserved", (double)atomic_load(&s->device_reserved));
  cube__tag_totals_sort(tags, tag_count);
  cJSON* by_tag = ok ? cJSON_AddArrayToObject(doc, "by_tag") : NULL;
  ok = by_tag != NULL;
  for (uint32_t i = 0; ok && i < tag_count; ++i) {
    cJSON* t = cJSON_CreateObject();
    if (!t) {
      ok = false;
      break;
    }
    cJSON_AddItemToArray(by_tag, t);
    ok = (tags[i].tag ? cJSON_AddStringToObject(t, "tag",
                                                cube__utf8_text(tags[i].tag, text, sizeof(text)))
                      : cJSON_AddNullToObject(t, "tag")) &&
         cJSON_AddNumberToObject(t, "bytes", (double)tags[i].bytes) &&
         cJSON_AddNumberToObject(t, "count", (double)tags[i].count);
  }
  ok = ok && cube__snapshot_ledger(doc, ledger) && cube__snapshot_events(s, doc, now);
  if (!ok) {
    cJSON_Delete(doc);
    return NULL;
  }
  return doc;
}

cube_status_t cube__server_snapshot(cube__server_t* s, const char* fn, char** out) {
  *out = NULL;
  cube_memory_ledger_t ledger;
  cube_status_t status = cube__server_ledger(s, &ledger);
  if (status) return cube__status_annotate(status, "%s: the ledger", fn);
  cJSON* doc = cube__snapshot_build(s, &ledger);
  char* text = doc ? cJSON_Print(doc) : NULL;
  cJSON_Delete(doc);
  if (!text)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory for the snapshot",
                             fn);
  /* cJSON allocates with malloc (its default hooks; cube installs none): the
   * caller frees with free(). */
  *out = text;
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Planning
//===----------------------------------------------------------------------===//

/* Locks every stream of |s| (slot order; the caller holds streams_lock). */
static void cube__streams_lock_all(cube__server_t* s, bool lock) {
  for (uint32_t i = 0; i < s->max_streams; ++i) {
    cube__stream_t* st = atomic_load(&s->streams[i]);
    if (!st) continue;
    if (lock)
      pthread_mutex_lock(&st->lock);
    else
      pthread_mutex_unlock(&st->lock);
  }
}

cube_status_t cube__server_install(cube__server_t* s, const char* fn,
                                   const cube__pool_options_t* pools, uint32_t count) {
  cube__pool_options_t* copy = NULL;
  if (pools) {
    /* Checked here too, as each stream's install checks it: a device with no
     * stream yet would otherwise keep a configuration that no stream can be
     * made with (every later allocation failing). The name is the one a
     * stream's manager gives. */
    cube_status_t bad =
        cube__mm_check_pools("device memory", pools, count, s->props.memory.alignment);
    if (bad) return cube__status_annotate(bad, "%s", fn);
    copy = malloc(count * sizeof(*copy));
    if (!copy) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
    memcpy(copy, pools, count * sizeof(*copy));
  }
  pthread_mutex_lock(&s->streams_lock);
  cube__streams_lock_all(s, true);
  cube_status_t status = CUBE_OK;
  /* All or nothing: every stream is seen free before any changes (with
   * every stream locked, none can allocate in between). */
  for (uint32_t i = 0; !status && i < s->max_streams; ++i) {
    cube__stream_t* st = atomic_load(&s->streams[i]);
    if (!st) continue;
    cube__mm_cleanup(st->mm, true);
    cube_memory_usage_t u;
    cube__mm_usage(st->mm, &u);
    if (u.number_allocs) {
      char b[32];
      status = cube__status_make(
          CUBE_STATUS_FAILED_PRECONDITION,
          "%s: stream %" PRIu64 " holds %" PRIu64 " live buffer%s (%s): release them (and wait "
          "for the work that uses them) before installing pools",
          fn, st->id, u.number_allocs, u.number_allocs == 1 ? "" : "s",
          cube__format_bytes(u.bytes_in_use, b, sizeof(b)));
    }
  }
  for (uint32_t i = 0; !status && i < s->max_streams; ++i) {
    cube__stream_t* st = atomic_load(&s->streams[i]);
    if (st) status = cube__mm_install(st->mm, copy, count);
  }
  if (!status) {
    free(s->installed);
    s->installed = copy;
    s->installed_count = copy ? count : 0;
    copy = NULL;
  }
  cube__streams_lock_all(s, false);
  pthread_mutex_unlock(&s->streams_lock);
  free(copy);
  if (status && cube_status_code(status) == CUBE_STATUS_INVALID_ARGUMENT)
    return cube__status_annotate(status, "%s", fn);
  return status;
}

uint32_t cube__server_pools(cube__server_t* s, cube__pool_options_t* out) {
  pthread_mutex_lock(&s->streams_lock);
  uint32_t n = 0;
  if (s->installed) {
    n = s->installed_count;
    memcpy(out, s->installed, n * sizeof(*out));
  } else {
    n = cube__pool_ladder(s->options.memory_config, s->props.memory.max_page_size,
                          s->props.memory.alignment, cube__server_memory_granule(s),
                          out);
    for (uint32_t i = 0; i < n; ++i) snprintf(out[i].name, sizeof(out[i].name), "pool %u", i);
  }
  pthread_mutex_unlock(&s->streams_lock);
  return n;
}

cube_status_t cube__server_measure(cube__server_t* s, const char* fn, bool begin,
                                   cube__pool_options_t* out_plan, uint32_t* out_count) {
  pthread_mutex_lock(&s->streams_lock);
  if (!begin && !s->measuring) {
    pthread_mutex_unlock(&s->streams_lock);
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "%s: the device is not measuring (call "
                             "cube_client_memory_measure_begin first)", fn);
  }
  s->measuring = begin;
  uint64_t peaks[CUBE_MAX_POOLS] = {0};
  uint32_t count = 0;
  for (uint32_t i = 0; i < s->max_streams; ++i) {
    cube__stream_t* st = atomic_load(&s->streams[i]);
    if (!st) continue;
    pthread_mutex_lock(&st->lock);
    if (!begin) {
      uint64_t p[CUBE_MAX_POOLS];
      count = cube__mm_pools(st->mm, out_plan, p);
      for (uint32_t k = 0; k < count; ++k)
        if (p[k] > peaks[k]) peaks[k] = p[k];
    }
    cube__mm_set_measuring(st->mm, begin);
    pthread_mutex_unlock(&st->lock);
  }
  pthread_mutex_unlock(&s->streams_lock);
  if (!begin) {
    if (count == 0) count = cube__server_pools(s, out_plan); /* no stream: nothing was used */
    for (uint32_t k = 0; k < count; ++k) {
      out_plan[k].capped = true;
      out_plan[k].cap = peaks[k];
    }
    *out_count = count;
  }
  return CUBE_OK;
}
