/* Internal status helpers. */
#ifndef CUBE_BASE_STATUS_H_
#define CUBE_BASE_STATUS_H_

#include <stdarg.h>

#include "cube/memory.h"
#include "cube/status.h"

/* A new status with |code| and a printf-style message. Never returns NULL for
 * a non-OK code (falls back to a static out-of-memory status). */
cube_status_t cube__status_make(cube_status_code_t code, const char* fmt, ...) CUBE_PRINTF(2, 3);
cube_status_t cube__status_makev(cube_status_code_t code, const char* fmt, va_list ap);

/* An OUT_OF_MEMORY status carrying |requested| and a copy of |report|. */
cube_status_t cube__status_oom(uint64_t requested, const cube_memory_report_t* report,
                               const char* fmt, ...) CUBE_PRINTF(3, 4);

/* The report inside an OOM status, for the server to complete; NULL if none. */
cube_memory_report_t* cube__status_oom_report_mut(cube_status_t status);

/* Prefixes the message of |status| with "<prefix>: "; returns |status|. */
cube_status_t cube__status_annotate(cube_status_t status, const char* fmt, ...) CUBE_PRINTF(2, 3);

/* Joins deferred errors: returns one status whose code is |first|'s, whose
 * count is the sum, and whose message lists every error ("2 errors: [1] ...;
 * [2] ..."). Consumes both; either may be NULL. */
cube_status_t cube__status_join(cube_status_t first, cube_status_t second);

/* A deep copy (NULL for NULL). */
cube_status_t cube__status_clone(cube_status_t status);

#define CUBE_RETURN_IF_ERROR(expr)        \
  do {                                    \
    cube_status_t cube__s_ = (expr);      \
    if (cube__s_ != CUBE_OK) return cube__s_; \
  } while (0)

#define CUBE_INVALID(...) cube__status_make(CUBE_STATUS_INVALID_ARGUMENT, __VA_ARGS__)

/* Returns INVALID_ARGUMENT "<fn>: <name> is NULL" when the out parameter |p|
 * is NULL. */
#define CUBE__CHECK_OUT(p, fn, name)                             \
  do {                                                           \
    if (!(p)) return CUBE_INVALID("%s: %s is NULL", fn, name); \
  } while (0)

/* Formats |bytes| with binary units into |buf| of |size| bytes ("1.50 MiB",
 * "512 B"), the units of every size a status message names. Returns buf.
 * Thread-safe (src/base/names.c). */
const char* cube__format_bytes(uint64_t bytes, char* buf, size_t size);

/* Now, in UTC with microseconds ("2026-12-20T17:06:43.123456Z", 28 bytes with
 * the NUL), into |buf| of |n| bytes: the time a message gives for a failure.
 * Thread-safe, takes no lock (src/base/names.c). */
void cube__utc_now(char* buf, size_t n);

#endif /* CUBE_BASE_STATUS_H_ */
