/* Profiling and logging of one server (docs/cubecl.md, "Profiling levels"): the profile level,
 * the log sink, and the per-kernel summary that sync prints.
 *
 * Thread-safe (a mutex guards the table and the sink).
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

typedef struct cube__profiler {
  cube_profile_level_t level;
  cube_log_fn log_fn;
  void* log_user;
  FILE* file;       /* CUBE_LOG_FILE, owned; NULL = stderr */
  pthread_mutex_t lock;
  cube__profile_entry_t* entries;
  size_t count, capacity;
} cube__profiler_t;

/* |level| NONE and |log_fn| NULL take CUBE_PROFILE and CUBE_LOG_FILE. */
cube_status_t cube__profiler_init(cube__profiler_t* p, cube_profile_level_t level,
                                  cube_log_fn log_fn, void* log_user);
void cube__profiler_deinit(cube__profiler_t* p);

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
