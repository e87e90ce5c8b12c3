/* Execution overrides (cube/execution.h) as the rest of the client layer and
 * the tuner (src/tune/) see them. An override lives as long as the client it
 * was begun on (the client keeps every override begun on it until it is
 * freed), so that a launch that read the client's override pointer may use it
 * for the whole call without a reference of its own. */
#ifndef CUBE_CLIENT_POLICY_H_
#define CUBE_CLIENT_POLICY_H_

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cube/execution.h"
#include "cube/kernel.h"
#include "kernel/cache.h"

typedef enum cube__exec_count {
  CUBE__EXEC_LAUNCH_SKIPPED,
  CUBE__EXEC_READ_SKIPPED,
  CUBE__EXEC_KEY_TUNED,
  CUBE__EXEC_KEY_LOADED,
  CUBE__EXEC_KEY_PERSISTED,
  CUBE__EXEC_KEY_FAILED,
} cube__exec_count_t;

/* The override in force on |c| (NULL: none; the caller checked the client).
 * One atomic load. */
cube_execution_override_t* cube__client_override(const cube_client_t* c);

cube_execution_policy_t cube__override_policy(const cube_execution_override_t* o);

/* Adds one to a counter of |o|. */
void cube__override_count(cube_execution_override_t* o, cube__exec_count_t what);

/* Registers a tuning key met under |o| (|hash| identifies operation, device
 * and key): true the first time (keys_registered counts it). */
bool cube__override_key(cube_execution_override_t* o, uint64_t hash);

/* Compiles |kernel| in |mode| for |c|'s device now (through the kernel
 * cache) and counts it under |o|: registered once per (kernel, mode,
 * device), compiled / loaded / failed by what the cache did on this thread
 * since |open_record| was begun (cube__cache_outcome_begin; NULL: since this
 * call), which it ends. Returns the compile's status. */
cube_status_t cube__override_compile(cube_execution_override_t* o, cube_client_t* c,
                                     cube_kernel_t* kernel, cube_execution_mode_t mode,
                                     cube__cache_outcome_t* open_record);

/* A launch through |c| that bypasses the override (the tuner's candidates
 * run for real under compile-and-tune). Same checks as cube_client_launch_mode. */
cube_status_t cube__client_launch_direct(cube_client_t* c, cube_kernel_t* kernel,
                                         cube_count_t count, size_t arg_count,
                                         const cube_arg_t* args, cube_execution_mode_t mode);

/* cube_client_read_one that reads even under an override that reads nothing
 * back (the tuner compares its candidates' outputs under compile-and-tune). */
cube_status_t cube__client_read_direct(cube_client_t* c, cube_handle_t handle,
                                       cube_bytes_t** out_bytes);

/* Reads under an override that reads nothing back (launch.c, read.c). */
bool cube__override_skips_work(const cube_execution_override_t* o);

#endif /* CUBE_CLIENT_POLICY_H_ */
