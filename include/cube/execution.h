/* cube/execution.h: execution policies, a scoped override on a client that
 * warms caches instead of computing (docs/autotune.md, "Warming a cache").
 *
 *   CUBE_EXECUTION_RUN              launches run (what a client does without
 *                                   an override)
 *   CUBE_EXECUTION_COMPILE_ONLY     every launch checks its arguments,
 *                                   compiles its kernel (through the kernel
 *                                   cache: memory, disk, compiler) and runs
 *                                   nothing; a tunable operation's launch
 *                                   compiles every candidate and tunes
 *                                   nothing; reads read nothing back
 *   CUBE_EXECUTION_COMPILE_AND_TUNE as compile-only, and a tunable
 *                                   operation's launch tunes its key (the
 *                                   candidates run on scratch copies of the
 *                                   outputs, as every tuning does) and
 *                                   persists the result; the launch itself
 *                                   still runs nothing
 *
 * What a read returns under an override: the read takes the usual checks
 * (handles live, on the device; sizes), then gives bytes of the right size
 * filled with zeros without touching the device (cube_client_read_into
 * fills the caller's memory with zeros); nothing the skipped launches would
 * have computed exists, and a program that branches on what it reads warms
 * the path that zeros take. Allocations, writes and copies still happen (the
 * handles a program holds stay real), and so do syncs and flushes. Deferred
 * errors of work queued before the override are still returned by syncs and
 * flushes; reads under an override do not return them.
 *
 * Scope. An override applies to every call made through the client object it
 * was begun on (all threads using that object, and its retained
 * references), not to its clones or to other clients of the device. It lasts
 * from cube_client_execution_begin to cube_execution_override_end (or to the
 * release of the client's last reference). Overrides nest: a new one begun
 * on a client with one in force hides it until it ends, and they end in the
 * reverse order. There is deliberately no environment variable: an override
 * is always something a program chose.
 *
 * Statistics. Each override counts what happened under it; a thread may read
 * the counts at any time while another runs the workload
 * (cube_execution_override_stats), to show progress.
 *
 * Ownership: cube_client_execution_begin returns an override owned by the
 * caller (one reference, cube_execution_override_retain / _release); while in
 * force the client holds one of its own. Thread safety: every function here
 * is thread-safe.
 */
#ifndef CUBE_EXECUTION_H_
#define CUBE_EXECUTION_H_

#include <stdint.h>

#include "cube/client.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cube_execution_policy_e {
  CUBE_EXECUTION_RUN = 0,
  CUBE_EXECUTION_COMPILE_ONLY = 1,
  CUBE_EXECUTION_COMPILE_AND_TUNE = 2,
} cube_execution_policy_t;

/* "run", "compile-only", "compile-and-tune"; "unknown" past the last. */
const char* cube_execution_policy_name(cube_execution_policy_t policy);

/* What happened under an override (an output struct, cube/cube.h "Struct
 * sizes"). Kernels are counted once per (kernel, execution mode, device). */
typedef struct cube_execution_stats {
  size_t struct_size;
  uint64_t kernels_registered; /* kernels launched under the override */
  uint64_t kernels_compiled;   /* of those, compiled now (the compiler ran) */
  uint64_t kernels_loaded;     /* found compiled: on disk, or in this process */
  uint64_t kernels_failed;     /* whose compile failed (or passed the time limit) */
  uint64_t launches_skipped;   /* launches that ran nothing */
  uint64_t reads_skipped;      /* reads answered with zeros */
  uint64_t keys_registered;    /* tuning keys met, once per (operation, device, key) */
  uint64_t keys_tuned;         /* of those, measured now */
  uint64_t keys_loaded;        /* found tuned: on disk, or in this process */
  uint64_t keys_persisted;     /* tuning results written to the cache directory */
  uint64_t keys_failed;        /* whose tuning found no candidate that ran */
} cube_execution_stats_t;

typedef struct cube_execution_override_s cube_execution_override_t;

/* Puts |client| under |policy| until cube_execution_override_end, and
 * returns the override (the caller's reference) in |out_override|.
 * CUBE_EXECUTION_RUN is accepted too (an override that counts what runs: its
 * kernels and tuning keys). Fails with INVALID_ARGUMENT (NULL client or
 * out_override, a policy that is not one) or FAILED_PRECONDITION (a client
 * from before cube_shutdown). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_execution_begin(
    cube_client_t* client, cube_execution_policy_t policy,
    cube_execution_override_t** out_override);

/* Ends |override|: the client's previous override (or none) is in force
 * again. Launches that started before the end finish under it. The
 * statistics stay readable until the last reference goes. Fails with
 * INVALID_ARGUMENT (NULL), FAILED_PRECONDITION (ended already, or another
 * override begun later on the same client is still in force: end that one
 * first). */
CUBE_MUST_USE_RESULT cube_status_t cube_execution_override_end(cube_execution_override_t* override);

/* The counts so far into |out_stats| (output-struct rules). Any thread, any
 * time, also after the end. INVALID_ARGUMENT for NULL arguments or a
 * struct_size smaller than the struct_size field. */
CUBE_MUST_USE_RESULT cube_status_t cube_execution_override_stats(
    const cube_execution_override_t* override, cube_execution_stats_t* out_stats);

/* The override's policy; CUBE_EXECUTION_RUN for NULL. */
cube_execution_policy_t cube_execution_override_policy(const cube_execution_override_t* override);

/* The policy in force on |client| now (CUBE_EXECUTION_RUN without an
 * override, and for NULL or a dead client). */
cube_execution_policy_t cube_client_execution_policy(const cube_client_t* client);

cube_execution_override_t* cube_execution_override_retain(cube_execution_override_t* override);
/* Drops a reference; NULL is accepted. Releasing the caller's reference does
 * not end the override. */
void cube_execution_override_release(cube_execution_override_t* override);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_EXECUTION_H_ */
