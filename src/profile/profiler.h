/* Profiling and logging of one server (docs/cubecl.md, "Profiling levels"): the profile level,
 * the log sink, and the per-kernel summary that sync prints.
 *
 * Thread-safe: a mutex guards the table, another the sink. A program's log
 * callback is never called under either: a thread that has a line while
 * another thread (or itself, from inside the callback) is delivering one
 * leaves it in a queue that the delivering thread empties before it returns,
 * so the callback sees one line at a time, in each thread's order, and may
 * call any cube function (docs/observability.md, "Log lines").
 */
#ifndef CUBE_PROFILE_PROFILER_H_
#define CUBE_PROFILE_PROFILER_H_

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#include "cube/profile.h"

typedef struct cube__profile_entry {
  char* name;
  cube_profile_row_kind_t kind;
  uint64_t total_ns;
  uint64_t count;
  uint64_t min_ns, max_ns;
} cube__profile_entry_t;

/* A line waiting for the thread that is in the callback. */
typedef struct cube__log_line {
  struct cube__log_line* next;
  char text[];
} cube__log_line_t;

typedef struct cube__profiler {
  cube_profile_level_t level;
  cube_log_fn log_fn;
  void* log_user;
  FILE* file;       /* CUBE_LOG_FILE, owned; NULL = stderr */
  pthread_mutex_t lock;     /* the table */
  pthread_mutex_t log_lock; /* the sink: the file, or the fields below */
  bool delivering;          /* a thread is in log_fn (or emptying the queue) */
  cube__log_line_t *queued, *queued_tail;
  size_t queued_count;
  uint64_t dropped;         /* lines not queued: CUBE__LOG_QUEUE_MAX were waiting */
  cube__profile_entry_t* entries;
  size_t count, capacity;
} cube__profiler_t;

/* |level| NONE and |log_fn| NULL take CUBE_PROFILE and CUBE_LOG_FILE. */
cube_status_t cube__profiler_init(cube__profiler_t* p, cube_profile_level_t level,
                                  cube_log_fn log_fn, void* log_user);
void cube__profiler_deinit(cube__profiler_t* p);

/* At most this many lines wait for a thread in the callback; more are
 * counted, and the count is delivered as a line of its own. */
#define CUBE__LOG_QUEUE_MAX 4096

/* Writes one line to the sink. */
void cube__profiler_log(cube__profiler_t* p, const char* fmt, ...) CUBE_PRINTF(2, 3);

/* Adds a measurement of |name| (a row of |kind|) to the summary. */
void cube__profiler_record(cube__profiler_t* p, cube_profile_row_kind_t kind, const char* name,
                           uint64_t ns);

/* Copies the summary into |out| (rows on the heap, the caller's), and
 * empties it when |reset|. False when the rows cannot be allocated. */
bool cube__profiler_snapshot(cube__profiler_t* p, bool reset, cube_profile_summary_t* out);

/* Logs the summary table, printed from cube__profiler_snapshot's data: the
 * device-work rows (by total, descending) and their Total row, then the
 * compile, cache-load and region rows, which the total does not include;
 * and resets it. Nothing when empty. */
void cube__profiler_summary(cube__profiler_t* p);

/* "1.234 ms" style. */
const char* cube__format_duration(uint64_t ns, char* buf, size_t size);

#endif /* CUBE_PROFILE_PROFILER_H_ */
