/* Device timing without draining (server/timing.h). */
#include "server/timing.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "platform/platform.h"

typedef struct cube__timed_entry {
  cube__trace_kind_t kind;
  uint64_t a[3];
  uint64_t submit_ns; /* host clock when the start event was recorded */
  uint64_t order;     /* its place in the stream's order */
  void* ev0;
  void* ev1;
  char name[80];
} cube__timed_entry_t;

struct cube__timing {
  bool activity;        /* kernels were timed by the backend's activity records */
  uint32_t untaken;     /* kernels timed so since the last take */
  uint64_t last_end;    /* the latest end of device-timed work delivered (owner thread) */
  void* anchor;         /* an event of this stream: device time 0, or NULL */
  uint64_t anchor_host; /* host clock just before it was recorded (a lower bound) */
  uint64_t offset;      /* how much later the anchor ran at least (see below) */
  uint32_t head, count;
  cube__timed_entry_t q[CUBE__TIMING_PENDING];
};

/* Kernels timed by activity records between two takes at most. */
#define CUBE__TIMING_TAKE_EVERY 1024u

/* Re-anchors after this much device time: CUDA's elapsed times are floats
 * of milliseconds, exact to about a microsecond over a second. */
#define CUBE__TIMING_REANCHOR_NS 1000000000ull

static cube_profile_row_kind_t cube__row_kind(cube__trace_kind_t k) {
  switch (k) {
    case CUBE__TRACE_KERNEL: return CUBE_PROFILE_ROW_KERNEL;
    case CUBE__TRACE_UPLOAD:
    case CUBE__TRACE_DOWNLOAD:
    case CUBE__TRACE_COPY: return CUBE_PROFILE_ROW_TRANSFER;
    case CUBE__TRACE_GRAPH: return CUBE_PROFILE_ROW_GRAPH;
    case CUBE__TRACE_COLLECTIVE: return CUBE_PROFILE_ROW_COLLECTIVE;
    case CUBE__TRACE_CACHE_LOAD: return CUBE_PROFILE_ROW_CACHE_LOAD;
    default: return CUBE_PROFILE_ROW_COMPILE;
  }
}

/* One resolved record to the summary (at level basic and above). */
static void cube__timing_profile(cube__server_t* s, cube__trace_kind_t kind, const char* name,
                                 const uint32_t count[3], uint64_t ns) {
  cube__profiler_t* p = &s->profiler;
  if (p->level < CUBE_PROFILE_BASIC) return;
  cube__profiler_record(p, cube__row_kind(kind), name, ns);
  if (p->level >= CUBE_PROFILE_MEDIUM) {
    char d[32];
    cube__profiler_log(p, "| %s | %s", cube__format_duration(ns, d, sizeof(d)), name);
  }
  if (p->level >= CUBE_PROFILE_FULL && kind == CUBE__TRACE_KERNEL)
    cube__profiler_log(p, "%s: CubeCount (%" PRIu32 ", %" PRIu32 ", %" PRIu32 ")", name,
                       count[0], count[1], count[2]);
}

/* One resolved record: to the summary and the trace. */
static void cube__timing_deliver(cube__stream_t* st, cube__trace_kind_t kind, const char* name,
                                 const uint64_t a[3], uint64_t ts, uint64_t ns,
                                 const char* clock, uint64_t order) {
  cube__server_t* s = st->server;
  const uint32_t count[3] = {(uint32_t)a[0], (uint32_t)a[1], (uint32_t)a[2]};
  cube__timing_profile(s, kind, name, count, ns);
  if (cube__trace_on()) {
    cube__trace_record_t r;
    r.ts_ns = ts;
    r.dur_ns = ns;
    r.pid = cube__trace_device_pid(s->id);
    r.tid = st->id;
    r.kind = (uint32_t)kind;
    r.order = order;
    memcpy(r.a, a, sizeof(r.a));
    r.f[0] = r.f[1] = 0.0;
    cube__trace_copy_name(r.name, sizeof(r.name), name);
    cube__trace_copy_name(r.detail, sizeof(r.detail), clock);
    cube__trace_emit(&r);
  }
}

void cube__timing_host(cube__stream_t* st, const cube__timed_desc_t* d, uint64_t t0, uint64_t ns) {
  cube__timing_deliver(st, d->kind, d->name, d->a, t0, ns, "host clock",
                       cube__timing_next_order(st));
}

static void cube__timing_take(cube__stream_t* st, struct cube__timing* t, bool flush);

void cube__timing_host_after(cube__stream_t* st, const cube__timed_desc_t* d, uint64_t t0,
                             uint64_t ns) {
  struct cube__timing* t = st->timing;
  if (t) {
    /* What completed before it, known first; then it starts no earlier
     * than the end of that. */
    if (t->activity) cube__timing_take(st, t, false);
    if (t->last_end > t0) {
      uint64_t end = t0 + ns;
      t0 = t->last_end;
      ns = end > t0 ? end - t0 : 0;
    }
  }
  cube__timing_deliver(st, d->kind, d->name, d->a, t0, ns, "host clock",
                       cube__timing_next_order(st));
}

/* The stream's state; |anchor|: with the anchor event (recorded now if it
 * was not). */
static struct cube__timing* cube__timing_state(cube__stream_t* st, bool anchor) {
  struct cube__timing* t = st->timing;
  if (!t) {
    t = calloc(1, sizeof(*t));
    if (!t) return NULL;
    st->timing = t;
  }
  if (anchor && !t->anchor) {
    t->anchor_host = cube__now_ns();
    t->offset = 0;
    cube_status_t e = cube__backend_event_record(&st->server->be, st->backend_stream, &t->anchor);
    if (e) {
      cube_status_free(e);
      t->anchor = NULL;
      return NULL;
    }
  }
  return t;
}

/* cube__timing_begin_device past its common case: the backend asked. */
__attribute__((noinline)) static void cube__timing_begin_asked(cube__stream_t* st,
                                                               cube__timing_mark_t* m, bool copy,
                                                               bool keep) {
  cube__server_t* s = st->server;
  if (!cube__backend_has_activity(&s->be) || !cube__timing_wanted(s)) {
    cube__timing_begin(st, m);
    return;
  }
  struct cube__timing* t = st->timing ? st->timing : cube__timing_state(st, false);
  /* Read before the backend is asked: a change while it answers is seen at
   * the next launch. */
  const uint64_t epoch = atomic_load_explicit(&cube__activity_epoch, memory_order_acquire);
  if (t && cube__backend_activity_begin(&s->be, st->backend_stream,
                                        copy ? CUBE__ACTIVITY_COPY : CUBE__ACTIVITY_KERNEL,
                                        keep)) {
    if (!copy) {
      st->act_epoch = epoch + 1;
      st->act_kept = keep;
    }
    t->activity = true;
    cube__timing_mark_activity(st, m);
    return;
  }
  if (!copy) st->act_epoch = 0;
  cube__timing_begin(st, m);
}

void cube__timing_begin_device(cube__stream_t* st, cube__timing_mark_t* m, bool copy) {
  const cube__server_t* s = st->server;
  const bool keep = s->profiler.level >= CUBE_PROFILE_BASIC;
  /* The common case, a kernel of a stream whose kernels the backend said it
   * records, nothing changed since: not asked again. */
  if (__builtin_expect(!copy && cube__timing_activity_known(st, keep) && cube__timing_wanted(s),
                       1)) {
    cube__timing_mark_activity(st, m);
    return;
  }
  cube__timing_begin_asked(st, m, copy, keep);
}

/* Takes the backend's activity records of |st| (|flush|: after emptying
 * the driver's buffers) and delivers them: to the summary, and to the trace
 * unless the backend put them there itself. */
static void cube__timing_take(cube__stream_t* st, struct cube__timing* t, bool flush) {
  cube__server_t* s = st->server;
  t->untaken = 0;
  bool profiled = s->profiler.level >= CUBE_PROFILE_BASIC;
  if (!profiled && !cube__trace_on()) return;
  cube__activity_record_t r[64];
  size_t n;
  do {
    n = cube__backend_activity_take(&s->be, st->backend_stream, flush && profiled, r,
                                    sizeof(r) / sizeof(r[0]));
    flush = false;
    for (size_t i = 0; i < n; ++i) {
      cube__trace_kind_t kind =
          r[i].kind == CUBE__ACTIVITY_COPY ? CUBE__TRACE_COPY : CUBE__TRACE_KERNEL;
      uint64_t ns = r[i].end_ns - r[i].start_ns;
      if (r[i].traced) {
        cube__timing_profile(s, kind, r[i].name, r[i].count, ns);
      } else {
        const uint64_t a[3] = {kind == CUBE__TRACE_COPY ? r[i].bytes : r[i].count[0],
                               kind == CUBE__TRACE_COPY ? 0 : r[i].count[1],
                               kind == CUBE__TRACE_COPY ? 0 : r[i].count[2]};
        cube__timing_deliver(st, kind, r[i].name, a, r[i].start_ns, ns, "device clock", 0);
        if (r[i].end_ns > t->last_end) t->last_end = r[i].end_ns;
      }
    }
  } while (n == sizeof(r) / sizeof(r[0]));
}

void cube__timing_begin(cube__stream_t* st, cube__timing_mark_t* m) {
  m->on = cube__timing_wanted(st->server);
  m->ev0 = NULL;
  m->activity = false;
  m->order = 0;
  if (!m->on) return;
  m->order = cube__timing_next_order(st);
  const cube__backend_t* be = &st->server->be;
  if (cube__backend_has_event_timing(be) && cube__timing_state(st, true)) {
    m->t0 = cube__now_ns();
    cube_status_t e = cube__backend_event_record(be, st->backend_stream, &m->ev0);
    if (e) {
      cube_status_free(e);
      m->ev0 = NULL;
    }
    return;
  }
  m->t0 = cube__now_ns();
}

/* The oldest pair, resolved (its events completed, or |wait|). */
static void cube__timing_resolve_front(cube__stream_t* st, struct cube__timing* t) {
  const cube__backend_t* be = &st->server->be;
  cube__timed_entry_t* e = &t->q[t->head];
  uint64_t rel0 = 0, rel1 = 0;
  cube_status_t s = cube__backend_event_elapsed(be, t->anchor, e->ev0, &rel0);
  if (!s) s = cube__backend_event_elapsed(be, t->anchor, e->ev1, &rel1);
  bool ok = s == CUBE_OK;
  cube_status_free(s);
  if (ok) {
    /* The anchor ran no earlier than anchor_host, and no work starts before
     * it was issued: the smallest offset that satisfies both for every
     * record so far places the work on the host clock. */
    if (e->submit_ns > t->anchor_host + rel0 &&
        e->submit_ns - (t->anchor_host + rel0) > t->offset)
      t->offset = e->submit_ns - (t->anchor_host + rel0);
    uint64_t start = t->anchor_host + t->offset + rel0;
    uint64_t ns = rel1 > rel0 ? rel1 - rel0 : 0;
    cube__timing_deliver(st, e->kind, e->name, e->a, start, ns, "device clock", e->order);
    if (start + ns > t->last_end) t->last_end = start + ns;
  }
  cube__backend_event_destroy(be, e->ev0);
  t->head = (t->head + 1) % CUBE__TIMING_PENDING;
  t->count--;
  /* Nothing else pending: a later anchor keeps the elapsed times short. */
  if (ok && t->count == 0 && rel1 >= CUBE__TIMING_REANCHOR_NS) {
    cube__backend_event_destroy(be, t->anchor);
    t->anchor = e->ev1;
    t->anchor_host = t->anchor_host + t->offset + rel1;
    t->offset = 0;
  } else {
    cube__backend_event_destroy(be, e->ev1);
  }
}

void cube__timing_poll(cube__stream_t* st, bool wait) {
  struct cube__timing* t = st->timing;
  if (!t) return;
  if (t->activity) cube__timing_take(st, t, wait);
  const cube__backend_t* be = &st->server->be;
  while (t->count) {
    cube__timed_entry_t* e = &t->q[t->head];
    if (!cube__backend_event_done(be, e->ev1)) {
      if (!wait) break;
      cube_status_free(cube__backend_event_sync(be, e->ev1));
    }
    cube__timing_resolve_front(st, t);
  }
}

void cube__timing_collect(cube__stream_t* st) {
  struct cube__timing* t = st->timing;
  if (!t) return;
  if (t->activity) cube__timing_take(st, t, true);
  cube__timing_poll(st, false);
}

void cube__timing_end_activity(cube__stream_t* st) {
  /* The record comes later; the summary takes what completed now and then. */
  struct cube__timing* t = st->timing;
  if (++t->untaken >= CUBE__TIMING_TAKE_EVERY) cube__timing_take(st, t, false);
}

void cube__timing_end(cube__stream_t* st, cube__timing_mark_t* m, const cube__timed_desc_t* d,
                      uint64_t device_ns) {
  if (!m->on) return;
  if (m->activity) {
    cube__timing_end_activity(st);
    return;
  }
  if (!m->ev0) {
    uint64_t ns = device_ns != UINT64_MAX ? device_ns : cube__now_ns() - m->t0;
    cube__timing_deliver(st, d->kind, d->name, d->a, m->t0, ns,
                         device_ns != UINT64_MAX ? "device clock" : "runner clock", m->order);
    return;
  }
  const cube__backend_t* be = &st->server->be;
  struct cube__timing* t = st->timing;
  void* ev1 = NULL;
  cube_status_t s = cube__backend_event_record(be, st->backend_stream, &ev1);
  if (s) {
    cube_status_free(s);
    cube__backend_event_destroy(be, m->ev0);
    return;
  }
  if (t->count == CUBE__TIMING_PENDING) {
    /* Full: the oldest, that many operations back, is waited for. */
    cube__timed_entry_t* old = &t->q[t->head];
    cube_status_free(cube__backend_event_sync(be, old->ev1));
    cube__timing_resolve_front(st, t);
  }
  cube__timed_entry_t* e = &t->q[(t->head + t->count) % CUBE__TIMING_PENDING];
  e->kind = d->kind;
  memcpy(e->a, d->a, sizeof(e->a));
  e->submit_ns = m->t0;
  e->order = m->order;
  e->ev0 = m->ev0;
  e->ev1 = ev1;
  snprintf(e->name, sizeof(e->name), "%s", d->name);
  t->count++;
  /* Resolve what completed now and then, not after every launch: a query
   * per launch would cost the launch path more than the records do. */
  if (t->count >= 64) cube__timing_poll(st, false);
}

void cube__timing_destroy(cube__stream_t* st) {
  struct cube__timing* t = st->timing;
  if (!t) return;
  cube__timing_poll(st, true);
  if (t->anchor) cube__backend_event_destroy(&st->server->be, t->anchor);
  free(t);
  st->timing = NULL;
  st->act_epoch = 0; /* asked again, with the next timing */
}
