/* cube/profile.h: profiling levels and durations (docs/cubecl.md, "Profiling levels").
 *
 * Levels (CUBE_PROFILE=exec|basic|medium|full, or the server option):
 *   none    nothing is recorded (default)
 *   exec    every launch is logged: "Executing <kernel>"
 *   basic   every launch is timed; cube_client_sync prints the summary table
 *           (kernel, total duration, count, share), sorted by total time
 *   medium  as basic, and every launch logs "| <duration> | <kernel>"
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

/* Receives each log line (without newline; |line| is valid for the call
 * only). Called on the device runner or the calling thread, possibly from
 * several threads at once for different devices, never under a lock that a
 * cube call could need. */
typedef void (*cube_log_fn)(void* user, const char* line);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_PROFILE_H_ */
