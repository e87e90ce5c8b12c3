/* cube/status.h: the one error type of the library, and the attribute macros
 * every other header uses.
 *
 * Every fallible function returns a cube_status_t. NULL (CUBE_OK) is success;
 * anything else is an owned object the caller must pass to cube_status_free
 * (or cube_status_consume). A failed call writes nothing to its out_
 * parameters that the caller must free.
 *
 * Messages name the operation, the object and the numbers involved, e.g.
 *   "cube_client_empty: size 0 is invalid (must be > 0)".
 *
 * Programs make their own statuses with cube_status_make, so that a function
 * they hand to the library (cube_task_fn of cube_client_exclusive,
 * cube_client_profile, cube_client_memory_persistent_allocation) can fail
 * with its own code and message; the library returns such a status to the
 * caller as it was made.
 *
 * Thread safety: every function here may be called from any thread at any
 * time. A status object belongs to one thread at a time: do not free it while
 * another thread reads its message.
 */
#ifndef CUBE_STATUS_H_
#define CUBE_STATUS_H_

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CUBE_MUST_USE_RESULT: on every function that returns a cube_status_t (or
 * another object the caller owns). Dropping a status leaks it and hides the
 * error; with gcc even a (void) cast does not silence the warning, so pass an
 * unwanted status to cube_status_free.
 * CUBE_PRINTF(fmt, args): printf-style format checking.
 * CUBE_DEPRECATED(msg): on a name kept for one release after it was renamed;
 * |msg| says what to use instead ("use cube_client_precompile"). The old name
 * keeps working and stays exported until it is removed. */
#if defined(__GNUC__) || defined(__clang__)
#define CUBE_MUST_USE_RESULT __attribute__((warn_unused_result))
#define CUBE_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#define CUBE_DEPRECATED(msg) __attribute__((deprecated(msg)))
#else
#define CUBE_MUST_USE_RESULT
#define CUBE_PRINTF(fmt, args)
#define CUBE_DEPRECATED(msg)
#endif

typedef struct cube_status_s* cube_status_t;

#define CUBE_OK ((cube_status_t)0)

/* Status codes. The values are part of the ABI and never change; new codes
 * are added at the end. Code that switches over them must have a default
 * (a newer library may return a code this program does not know). */
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
  CUBE_STATUS_UNSUPPORTED = 12,        /* e.g. strides the runtime did not produce, a struct_size
                                          this library does not know */
  CUBE_STATUS_ABORTED = 13,            /* a task failed on the device runner */
  CUBE_STATUS_INTERNAL = 14,
  CUBE_STATUS_DATA_LOST = 15,          /* a buffer's contents are not valid: the work that should
                                          have written them failed or was not run (the message
                                          names the failure; docs/failures.md) */
  CUBE_STATUS_DEVICE_LOST = 16,        /* the device hit a fault that poisons its context (an
                                          illegal address, a launch timeout, an uncorrectable
                                          ECC error...): every call on it fails with this code,
                                          naming the device and the first fault, until the
                                          program releases its handles and shuts down (or
                                          recovers it); other devices go on (docs/failures.md,
                                          "Lost devices") */
  CUBE_STATUS_PEER_LOST = 17,          /* a collective's communicator holds a rank (process) that
                                          a shrink found lost: the operation fails at once, naming
                                          the rank; go on over the devices that
                                          cube_client_shrink_collective returned
                                          (docs/collectives.md, "A rank that dies") */
} cube_status_code_t;

/* A new status with |code| and the printf-style message |fmt| (NULL = "").
 * Returns CUBE_OK (NULL) for CUBE_STATUS_OK, and never NULL for any other
 * code: when no memory is left for the status it returns a static
 * OUT_OF_MEMORY status (which cube_status_free ignores). A |code| that is not
 * a cube_status_code_t gives an INTERNAL status whose message names the code
 * and holds the formatted message. The caller owns the result. */
CUBE_MUST_USE_RESULT cube_status_t cube_status_make(cube_status_code_t code, const char* fmt, ...)
    CUBE_PRINTF(2, 3);

/* cube_status_make with a va_list (|args| is consumed as vprintf does). */
CUBE_MUST_USE_RESULT cube_status_t cube_status_makev(cube_status_code_t code, const char* fmt,
                                                     va_list args) CUBE_PRINTF(2, 0);

/* The code of |status|; CUBE_STATUS_OK for NULL. */
cube_status_code_t cube_status_code(cube_status_t status);

/* The message of |status| ("" for NULL). The string belongs to the status and
 * is valid until the status is freed. */
const char* cube_status_message(cube_status_t status);

/* A static name for |code| ("OUT_OF_MEMORY"); "UNKNOWN" for a value that is
 * not a code. Never NULL. */
const char* cube_status_code_name(cube_status_code_t code);

/* Frees |status|; NULL is accepted. Freeing a status twice is undefined. */
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
