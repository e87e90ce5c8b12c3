/* Device timing of profiled and traced work (docs/observability.md): every
 * launch, copy and replay that the profile summary or the trace wants is
 * timed where it runs, without waiting for it.
 *
 *  - A kernel on a backend with activity records (CUDA with CUPTI): the
 *    driver records its start and end with nothing put on the stream; the
 *    records are taken from the backend as more work is timed and at every
 *    sync (which first empties the driver's buffers).
 *  - On a backend with timed events (CUDA; null), an event is recorded
 *    before and after the work and the pair is queued on the stream; the
 *    pairs are resolved in order once the second event completed (polled as
 *    more work is timed, and at every sync), placed on the host clock
 *    through an anchor event recorded at the stream's first timed work.
 *  - Elsewhere the runner's clock brackets the backend's call: on the CPU
 *    the launch runs to its end inside it; OpenCL gives the kernel's own
 *    duration (CL_PROFILING_COMMAND_START/END).
 *
 * Then the record goes to the profile summary (level basic and above) and
 * to the trace (when one records).
 *
 * Owner thread only: whoever runs the device's work (the runner, or a
 * caller that has the device to itself), as every backend stream call.
 */
#ifndef CUBE_SERVER_TIMING_H_
#define CUBE_SERVER_TIMING_H_

#include <stdbool.h>
#include <stdint.h>

#include "server/server.h"
#include "server/stream.h"
#include "trace/trace.h"

/* Pairs of events a stream keeps unresolved at most; with more, the oldest
 * is waited for (work that many operations back: the device is not
 * drained). */
#define CUBE__TIMING_PENDING 256u

typedef struct cube__timing_mark {
  uint64_t t0;   /* host clock at the start */
  uint64_t order; /* its place in the stream's order (trace.h) */
  void* ev0;     /* the start event, or NULL */
  bool on;       /* timing was wanted when the work began */
  bool activity; /* the backend's kernel activity records time it */
} cube__timing_mark_t;

/* What is timed: a trace kind, a name, up to three numbers. */
typedef struct cube__timed_desc {
  cube__trace_kind_t kind;
  const char* name;
  uint64_t a[3];
} cube__timed_desc_t;

/* The next place in |st|'s order of timed work. */
static inline uint64_t cube__timing_next_order(cube__stream_t* st) {
  return atomic_fetch_add_explicit(&st->timed_order, 1, memory_order_relaxed) + 1;
}

static inline bool cube__timing_wanted(const cube__server_t* s) {
  return s->profiler.level >= CUBE_PROFILE_BASIC || cube__trace_on();
}

/* True when the backend said its activity records time |st|'s kernels
 * (asked to keep them, or |keep| not wanted) and nothing changed since
 * (backends/backend.h, cube__activity_epoch): a timed launch of a kernel
 * needs no mark then, only cube__timing_next_order and, after it,
 * cube__timing_end_activity. Owner thread of |st|. */
static inline bool cube__timing_activity_known(const cube__stream_t* st, bool keep) {
  return st->act_epoch ==
             atomic_load_explicit(&cube__activity_epoch, memory_order_acquire) + 1 &&
         (st->act_kept || !keep);
}

/* |m| for a kernel that the backend's records time (as
 * cube__timing_activity_known says): no event, its place in the order. */
static inline void cube__timing_mark_activity(cube__stream_t* st, cube__timing_mark_t* m) {
  m->on = true;
  m->activity = true;
  m->ev0 = NULL;
  m->order = cube__timing_next_order(st);
}

/* Starts timing work about to be issued on |st| (m->on false: nothing). */
void cube__timing_begin(cube__stream_t* st, cube__timing_mark_t* m);

/* The same for a kernel launch, or (|copy|) a copy between two buffers: where the
 * backend keeps activity records (CUDA with CUPTI), nothing is put on the
 * stream and the record comes from the backend (into the trace itself, to
 * the summary at a later take); else as cube__timing_begin. A stream whose
 * kernels the backend said it records is not asked again for each launch
 * while cube__activity_epoch stays (backends/backend.h). */
void cube__timing_begin_device(cube__stream_t* st, cube__timing_mark_t* m, bool copy);

/* cube__timing_end of a mark whose work the backend's records time
 * (m->activity): the summary takes what completed now and then. */
void cube__timing_end_activity(cube__stream_t* st);

/* Ends it: |device_ns| is the backend's own duration (UINT64_MAX: none). */
void cube__timing_end(cube__stream_t* st, cube__timing_mark_t* m, const cube__timed_desc_t* d,
                      uint64_t device_ns);

/* Resolves the stream's completed pairs (|wait|: all of them, waiting). */
void cube__timing_poll(cube__stream_t* st, bool wait);

/* What completed, for a reader of the summary: the backend's activity
 * records after emptying the driver's buffers, and the completed pairs (no
 * waiting). */
void cube__timing_collect(cube__stream_t* st);

/* A record of work the host clock timed (uploads and downloads, which the
 * backend finished before returning): to the summary and the trace at once.
 * Thread-safe. */
void cube__timing_host(cube__stream_t* st, const cube__timed_desc_t* d, uint64_t t0,
                       uint64_t ns);

/* As cube__timing_host, for a transfer that ran after the stream's earlier
 * work had completed (a read): what the backend's records say completed
 * before it is taken first, and its start is placed no earlier than the end
 * of that work (a host clock's start would put it before work the device
 * ran after the call began). Owner thread only. */
void cube__timing_host_after(cube__stream_t* st, const cube__timed_desc_t* d, uint64_t t0,
                             uint64_t ns);

/* Resolves what it can (waiting) and frees the stream's timing state. */
void cube__timing_destroy(cube__stream_t* st);

#endif /* CUBE_SERVER_TIMING_H_ */
