/* cube/status.h: the one error type of the library.
 *
 * Every fallible function returns a cube_status_t. NULL (CUBE_OK) is success;
 * anything else is an owned object the caller must pass to cube_status_free.
 * A failed call writes nothing to its out_ parameters that the caller must free.
 *
 * Messages name the operation, the object and the numbers involved, e.g.
 *   "cube_client_empty: size 0 is invalid (must be > 0)".
 *
 * All functions here are thread-safe; a status object itself is owned by one
 * thread at a time.
 */
#ifndef CUBE_STATUS_H_
#define CUBE_STATUS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) || defined(__clang__)
#define CUBE_MUST_USE_RESULT __attribute__((warn_unused_result))
#define CUBE_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define CUBE_MUST_USE_RESULT
#define CUBE_PRINTF(fmt, args)
#endif

typedef struct cube_status_s* cube_status_t;

#define CUBE_OK ((cube_status_t)0)

typedef enum cube_status_code_e {
  CUBE_STATUS_OK = 0,
  CUBE_STATUS_INVALID_ARGUMENT = 1,    /* bad input: NULL, zero or oversized size, shapes... */
  CUBE_STATUS_NOT_FOUND = 2,           /* device index out of range, released handle */
  CUBE_STATUS_ALREADY_EXISTS = 3,      /* cube_client_init on a device that has a server */
  CUBE_STATUS_OUT_OF_MEMORY = 4,       /* carries a memory report: cube_status_oom_report */
  CUBE_STATUS_FAILED_PRECONDITION = 5, /* e.g. re-entrant use of a service, stream in error */
  CUBE_STATUS_UNAVAILABLE = 6,         /* backend or driver absent */
  CUBE_STATUS_UNIMPLEMENTED = 7,       /* operation not provided by this backend (yet) */
  CUBE_STATUS_COMPILATION_FAILED = 8,
  CUBE_STATUS_LAUNCH_FAILED = 9,       /* a kernel reported failure or could not run */
  CUBE_STATUS_DEADLINE_EXCEEDED = 10,  /* a wait timed out */
  CUBE_STATUS_OUT_OF_RANGE = 11,       /* index or size past a limit of the device */
  CUBE_STATUS_UNSUPPORTED = 12,        /* e.g. strides the runtime did not produce */
  CUBE_STATUS_ABORTED = 13,            /* a task failed on the device runner */
  CUBE_STATUS_INTERNAL = 14,
  CUBE_STATUS_CODE_COUNT
} cube_status_code_t;

/* The code of |status|; CUBE_STATUS_OK for NULL. Thread-safe. */
cube_status_code_t cube_status_code(cube_status_t status);

/* The message of |status| ("" for NULL). Valid until the status is freed. */
const char* cube_status_message(cube_status_t status);

/* A static name for |code| ("OUT_OF_MEMORY"). */
const char* cube_status_code_name(cube_status_code_t code);

/* Frees |status|; NULL is accepted. */
void cube_status_free(cube_status_t status);

/* Frees |status| and returns its code: `if (cube_status_consume(s)) ...`. */
cube_status_code_t cube_status_consume(cube_status_t status);

/* Number of errors a status joins: 1 for an ordinary error, N for the deferred
 * errors of a stream reported together by flush/sync/read, 0 for NULL. */
size_t cube_status_count(cube_status_t status);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_STATUS_H_ */
