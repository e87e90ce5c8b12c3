/* The trace as Chrome trace-event JSON (the "JSON Object Format": an object
 * with "traceEvents"), built with cJSON. Perfetto's UI and chrome://tracing
 * open it. Times are microseconds from the first record. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cube/cube.h"
#include "trace/trace.h"

static const char* const cube__trace_cat[CUBE__TRACE_KIND_COUNT] = {
    "kernel", "upload", "download", "copy",  "compile", "cache_load",
    "wait",   "collective", "graph", "oom", "range"};

typedef struct cube__trace_order {
  const cube__trace_record_t* r;
  uint64_t seq;
  uint64_t ts_ns; /* the start written: the record's, or later (below) */
} cube__trace_order_t;

static int cube__trace_cmp(const void* a, const void* b) {
  const cube__trace_order_t* x = a;
  const cube__trace_order_t* y = b;
  if (x->r->pid != y->r->pid) return x->r->pid < y->r->pid ? -1 : 1;
  if (x->r->tid != y->r->tid) return x->r->tid < y->r->tid ? -1 : 1;
  if (x->ts_ns != y->ts_ns) return x->ts_ns < y->ts_ns ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* A track's records in the stream's order (records without one last). */
static int cube__trace_cmp_order(const void* a, const void* b) {
  const cube__trace_order_t* x = a;
  const cube__trace_order_t* y = b;
  if (x->r->pid != y->r->pid) return x->r->pid < y->r->pid ? -1 : 1;
  if (x->r->tid != y->r->tid) return x->r->tid < y->r->tid ? -1 : 1;
  uint64_t xo = x->r->order ? x->r->order : UINT64_MAX, yo = y->r->order ? y->r->order : UINT64_MAX;
  if (xo != yo) return xo < yo ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* A device stream runs its work one after another, in its order. Starts
 * come from different clocks (CUPTI's records; an event's elapsed time from
 * an anchor, placed no later than it ran; the host clock around a transfer),
 * so two neighbours may overlap or swap by the clocks' error: each record
 * whose place is known starts no earlier than the end of the one before it
 * (the start moves later, its duration stays). */
static void cube__trace_stream_order(cube__trace_order_t* order, uint64_t count) {
  qsort(order, count, sizeof(*order), cube__trace_cmp_order);
  uint64_t end = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const cube__trace_record_t* r = order[i].r;
    bool same = i > 0 && order[i - 1].r->pid == r->pid && order[i - 1].r->tid == r->tid &&
                order[i - 1].r->order != 0;
    if (!r->order || r->pid == CUBE__TRACE_HOST_PID) continue;
    if (same && order[i].ts_ns < end) order[i].ts_ns = end;
    end = order[i].ts_ns + r->dur_ns;
  }
}

static double cube__us(uint64_t ns) { return (double)ns / 1000.0; }

static void cube__trace_meta(cJSON* events, const char* what, uint32_t pid, uint64_t tid,
                             const char* name) {
  cJSON* m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "name", what);
  cJSON_AddStringToObject(m, "ph", "M");
  cJSON_AddNumberToObject(m, "pid", pid);
  cJSON_AddNumberToObject(m, "tid", (double)tid);
  char text[3 * 64 + 1];
  cJSON_AddItemToObject(cJSON_AddObjectToObject(m, "args"), "name",
                        cJSON_CreateString(cube__utf8_text(name, text, sizeof(text))));
  cJSON_AddItemToArray(events, m);
}

static void cube__trace_args(cJSON* args, const cube__trace_record_t* r) {
  switch ((cube__trace_kind_t)r->kind) {
    case CUBE__TRACE_KERNEL: {
      cJSON* c = cJSON_AddArrayToObject(args, "cube_count");
      for (int i = 0; i < 3; ++i) cJSON_AddItemToArray(c, cJSON_CreateNumber((double)r->a[i]));
      cJSON_AddNumberToObject(args, "device_us", cube__us(r->dur_ns));
      break;
    }
    case CUBE__TRACE_UPLOAD:
    case CUBE__TRACE_DOWNLOAD:
    case CUBE__TRACE_COPY:
      cJSON_AddNumberToObject(args, "bytes", (double)r->a[0]);
      cJSON_AddNumberToObject(args, "GB/s", r->dur_ns ? (double)r->a[0] / (double)r->dur_ns : 0.0);
      break;
    case CUBE__TRACE_COMPILE:
      cJSON_AddBoolToObject(args, "failed", r->a[0] != 0);
      break;
    case CUBE__TRACE_COLLECTIVE:
      cJSON_AddNumberToObject(args, "bytes", (double)r->a[0]);
      cJSON_AddNumberToObject(args, "participants", (double)r->a[1]);
      cJSON_AddNumberToObject(args, "ranks", (double)r->a[2]);
      cJSON_AddNumberToObject(args, "algbw_GB/s", r->f[0]);
      cJSON_AddNumberToObject(args, "busbw_GB/s", r->f[1]);
      break;
    case CUBE__TRACE_GRAPH:
      cJSON_AddNumberToObject(args, "nodes", (double)r->a[0]);
      break;
    case CUBE__TRACE_OOM:
      cJSON_AddNumberToObject(args, "bytes", (double)r->a[0]);
      break;
    case CUBE__TRACE_RANGE:
      cJSON_AddNumberToObject(args, "depth", (double)r->a[0]);
      break;
    default:
      break;
  }
  char text[3 * sizeof(r->detail) + 1];
  if (r->detail[0])
    cJSON_AddStringToObject(args, "detail", cube__utf8_text(r->detail, text, sizeof(text)));
}

static cJSON* cube__trace_doc(const cube__trace_record_t* records, uint64_t count,
                              uint64_t dropped, uint64_t capacity) {
  cube__trace_order_t* order = malloc((count ? count : 1) * sizeof(*order));
  cJSON* doc = cJSON_CreateObject();
  cJSON* events = cJSON_AddArrayToObject(doc, "traceEvents");
  if (!order || !doc || !events) {
    free(order);
    cJSON_Delete(doc);
    return NULL;
  }
  uint64_t base = UINT64_MAX;
  for (uint64_t i = 0; i < count; ++i) {
    order[i].r = &records[i];
    order[i].seq = i;
    order[i].ts_ns = records[i].ts_ns;
    if (records[i].ts_ns < base) base = records[i].ts_ns;
  }
  if (base == UINT64_MAX) base = 0;
  cube__trace_stream_order(order, count);
  qsort(order, count, sizeof(*order), cube__trace_cmp);
  /* Names of the tracks: one process per device (and "host"), one thread per
   * stream (and per host thread). */
  for (uint64_t i = 0; i < count; ++i) {
    const cube__trace_record_t* r = order[i].r;
    char name[64];
    if (i == 0 || order[i - 1].r->pid != r->pid) {
      if (r->pid == CUBE__TRACE_HOST_PID) {
        snprintf(name, sizeof(name), "host");
      } else {
        const char* b = cube_backend_name((cube_backend_t)((r->pid - 1) / 256));
        snprintf(name, sizeof(name), "%s:%u", b ? b : "?", (r->pid - 1) % 256);
      }
      cube__trace_meta(events, "process_name", r->pid, 0, name);
    }
    if (i == 0 || order[i - 1].r->pid != r->pid || order[i - 1].r->tid != r->tid) {
      if (r->pid == CUBE__TRACE_HOST_PID)
        snprintf(name, sizeof(name), "thread %llu", (unsigned long long)r->tid);
      else if (r->tid == CUBE__TRACE_COLLECTIVE_TID)
        snprintf(name, sizeof(name), "collectives");
      else
        snprintf(name, sizeof(name), "stream %llu", (unsigned long long)r->tid);
      cube__trace_meta(events, "thread_name", r->pid, r->tid, name);
    }
  }
  for (uint64_t i = 0; i < count; ++i) {
    const cube__trace_record_t* r = order[i].r;
    cJSON* e = cJSON_CreateObject();
    /* Names are the program's bytes, maybe cut: the file is UTF-8 all the same. */
    char text[3 * sizeof(r->name) + 1];
    cJSON_AddStringToObject(e, "name", cube__utf8_text(r->name, text, sizeof(text)));
    cJSON_AddStringToObject(e, "cat",
                            r->kind < CUBE__TRACE_KIND_COUNT ? cube__trace_cat[r->kind] : "?");
    bool instant = r->kind == CUBE__TRACE_OOM;
    cJSON_AddStringToObject(e, "ph", instant ? "i" : "X");
    if (instant) cJSON_AddStringToObject(e, "s", "t");
    cJSON_AddNumberToObject(e, "ts", cube__us(order[i].ts_ns - base));
    if (!instant) cJSON_AddNumberToObject(e, "dur", cube__us(r->dur_ns));
    cJSON_AddNumberToObject(e, "pid", r->pid);
    cJSON_AddNumberToObject(e, "tid", (double)r->tid);
    cube__trace_args(cJSON_AddObjectToObject(e, "args"), r);
    cJSON_AddItemToArray(events, e);
  }
  if (dropped) {
    /* Where the kept records begin: everything before it was overwritten. */
    cJSON* e = cJSON_CreateObject();
    char name[96];
    snprintf(name, sizeof(name), "%llu earlier records dropped (ring of %llu)",
             (unsigned long long)dropped, (unsigned long long)capacity);
    cJSON_AddStringToObject(e, "name", name);
    cJSON_AddStringToObject(e, "cat", "dropped");
    cJSON_AddStringToObject(e, "ph", "i");
    cJSON_AddStringToObject(e, "s", "g");
    cJSON_AddNumberToObject(e, "ts", 0);
    cJSON_AddNumberToObject(e, "pid", CUBE__TRACE_HOST_PID);
    cJSON_AddNumberToObject(e, "tid", 0);
    cJSON_AddItemToArray(events, e);
  }
  free(order);
  cJSON_AddStringToObject(doc, "displayTimeUnit", "ns");
  cJSON* other = cJSON_AddObjectToObject(doc, "otherData");
  cJSON_AddStringToObject(other, "producer", "cube " CUBE_VERSION_STRING);
  cJSON_AddNumberToObject(other, "records", (double)count);
  cJSON_AddNumberToObject(other, "dropped_events", (double)dropped);
  cJSON_AddNumberToObject(other, "ring_capacity", (double)capacity);
  return doc;
}

bool cube__trace_write_json(int fd, const cube__trace_record_t* records, uint64_t count,
                            uint64_t dropped, uint64_t capacity, size_t* out_written,
                            size_t* out_total) {
  if (out_written) *out_written = 0;
  if (out_total) *out_total = 0;
  cJSON* doc = cube__trace_doc(records, count, dropped, capacity);
  char* text = doc ? cJSON_PrintUnformatted(doc) : NULL;
  cJSON_Delete(doc);
  if (!text) {
    errno = ENOMEM;
    return false;
  }
  size_t len = strlen(text), done = 0;
  text[len] = '\n'; /* written with the document: one write call less */
  len += 1;
  if (out_total) *out_total = len;
  bool ok = true;
  while (done < len) {
    ssize_t n = write(fd, text + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      ok = false;
      break;
    }
    done += (size_t)n;
  }
  if (out_written) *out_written = done;
  cJSON_free(text);
  return ok;
}
