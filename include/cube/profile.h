/* cube/profile.h: profiling levels and durations (docs/cubecl.md, "Profiling levels").
 *
 * Levels (CUBE_PROFILE=exec|basic|medium|full, or the server option):
 *   none    nothing is recorded (default)
 *   exec    every launch is logged: "Executing <kernel>"
 *   basic   every launch, transfer, replay and collective is timed where it
 *           runs, without waiting for it (device timestamps resolved after
 *           the work completed: docs/observability.md); cube_client_sync
 *           prints the summary table (cube_profile_summary_t: name, kind,
 *           total duration, count, share of the device total), compiles,
 *           cache loads and named regions in rows of their own, outside the
 *           total
 *   medium  as basic, and every timed operation logs "| <duration> | <name>"
 *           once its time is known
 *   full    as medium, and logs "<kernel>: <id> CubeCount (x, y, z)"
 * Log lines go to the server's log callback, else to the file named by
 * CUBE_LOG_FILE, else to stderr.
 */
/* The functions in this header are thread-safe. */
#ifndef CUBE_PROFILE_H_
#define CUBE_PROFILE_H_

#include <stdint.h>

#include "cube/device.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cube_profile_level_e {
  CUBE_PROFILE_NONE = 0,
  CUBE_PROFILE_EXEC = 1,
  CUBE_PROFILE_BASIC = 2,
  CUBE_PROFILE_MEDIUM = 3,
  CUBE_PROFILE_FULL = 4,
} cube_profile_level_t;

/* "none", "exec", "basic", "medium", "full": a static string; "unknown" for
 * an invalid value. */
const char* cube_profile_level_name(cube_profile_level_t level);

/* Parses a level name (as above, or CubeCL's "disabled" and "minimal";
 * case-insensitive) into |out_level|. Fails with INVALID_ARGUMENT for NULL
 * arguments or an unknown name (the message lists the valid ones). */
CUBE_MUST_USE_RESULT cube_status_t cube_profile_level_parse(const char* text,
                                                            cube_profile_level_t* out_level);

/* A measured duration (CubeCL's ProfileDuration once resolved); a plain
 * value written by cube_client_profile. */
typedef struct cube_profile_duration {
  uint64_t start_ns; /* on the host monotonic clock */
  uint64_t end_ns;
  cube_timing_method_t method;
} cube_profile_duration_t;

/* end_ns - start_ns of |d| (which must not be NULL). */
static inline uint64_t cube_profile_duration_ns(const cube_profile_duration_t* d) {
  return d->end_ns - d->start_ns;
}

/* The profile summary as data ------------------------------------------- */

/* What a row of the summary measures. Kernel, transfer, graph and collective
 * rows are device work: each operation is counted once, in one row, and
 * their sum is the summary's total. Compile, cache-load and region rows are
 * apart: a compile is not a slow kernel, and a region (a named
 * cube_client_profile bracket) holds work that has rows of its own. */
typedef enum cube_profile_row_kind_e {
  CUBE_PROFILE_ROW_KERNEL = 0,     /* launches of one kernel */
  CUBE_PROFILE_ROW_TRANSFER = 1,   /* uploads, downloads, copies between buffers */
  CUBE_PROFILE_ROW_GRAPH = 2,      /* replays of graphs of one size ("graph (N nodes)") */
  CUBE_PROFILE_ROW_COLLECTIVE = 3, /* collectives of one kind */
  CUBE_PROFILE_ROW_COMPILE = 4,    /* a kernel compiled at its first launch */
  CUBE_PROFILE_ROW_CACHE_LOAD = 5, /* a compiled kernel loaded from the kernel cache */
  CUBE_PROFILE_ROW_REGION = 6,     /* a named cube_client_profile bracket */
} cube_profile_row_kind_t;

/* "kernel", "transfer", "graph", "collective", "compile", "cache load",
 * "region"; "unknown" for another value. A static string. */
const char* cube_profile_row_kind_name(cube_profile_row_kind_t kind);

/* One row (a plain value). */
typedef struct cube_profile_row {
  char name[128];
  cube_profile_row_kind_t kind;
  uint64_t count;    /* operations */
  uint64_t total_ns; /* their summed duration (device time where the device gives it) */
  uint64_t min_ns, max_ns;
} cube_profile_row_t;

/* The summary of a device's profile since it was last printed or reset
 * (cube_client_profile_summary): an output struct (include/cube/cube.h,
 * "Struct sizes"), zero-initialise it. Filled only at profile level basic
 * and above. */
typedef struct cube_profile_summary {
  size_t struct_size;
  size_t row_count;
  cube_profile_row_t* rows; /* row_count rows, by kind then total descending; owned by the
                               struct: cube_profile_summary_deinitialize frees them */
  uint64_t device_ns;       /* total of the device-work rows (kernel, transfer, graph,
                               collective): what the table's Total row shows */
  uint64_t device_count;
  uint64_t compile_ns;      /* compile and cache-load rows */
  uint64_t compile_count;
  uint64_t region_ns;       /* region rows (not in device_ns: their work is there already) */
  uint64_t region_count;
} cube_profile_summary_t;

/* Frees |summary|'s rows and zeroes its counts (NULL, or a summary with no
 * rows: nothing). */
void cube_profile_summary_deinitialize(cube_profile_summary_t* summary);

/* Receives each log line (without newline; |line| is valid for the call
 * only). Called on a thread that has a line for the server (its device
 * runner, a calling thread, the compile watcher), possibly from several
 * threads at once for different devices; for one device one line at a time,
 * each thread's lines in order: a line that comes while the callback runs
 * waits (up to 4096 lines; more are counted in a line of their own) and is
 * delivered by the thread in the callback once its call returns. Never
 * called under a lock that a cube call could need: the callback may call
 * cube functions; from inside a device's task (level exec's "Executing")
 * those that must queue work behind that task are refused with
 * FAILED_PRECONDITION naming the call (docs/observability.md, "Log lines"). */
typedef void (*cube_log_fn)(void* user, const char* line);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_PROFILE_H_ */
