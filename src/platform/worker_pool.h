/* The process's worker pool: one per process, shared by every logical CPU
 * device (kernels) and every CUDA device (the staging ring's host copies),
 * sized to the cores this process may use (the CUBE_CPU_THREADS option
 * overrides). It
 * needs only base/ and platform/, so it lives in the platform layer.
 *
 * Jobs split a range [0, n) into contiguous chunks (never
 * round-robin single items: that ruins bandwidth, see design/cpu-notes.md);
 * the thread that submits a job works on it too, so a pool of size P has
 * P - 1 threads of its own. Several jobs (from several device runners) may
 * be in flight at once; idle workers help the oldest one first.
 *
 * Thread-safe.
 */
#ifndef CUBE_PLATFORM_WORKER_POOL_H_
#define CUBE_PLATFORM_WORKER_POOL_H_

#include <stdint.h>

#include "cube/status.h"

typedef struct cube__worker_pool cube__worker_pool_t;

/* Runs items [begin, end) of a job. |participant| is unique among the threads
 * working on this job at once and < cube__worker_pool_size(). Returns 0, or a
 * non-zero value that stops the job (no further chunks are handed out). */
typedef int (*cube__range_fn)(void* ctx, uint64_t begin, uint64_t end, uint32_t participant);

/* The process-wide pool, created on first use; each get is paired with a put.
 * The last put stops the threads. */
cube_status_t cube__worker_pool_acquire(cube__worker_pool_t** out_pool);
void cube__worker_pool_release(cube__worker_pool_t* pool);

/* Most threads that can work on one job (own threads + the caller). */
uint32_t cube__worker_pool_size(const cube__worker_pool_t* pool);

/* Runs |fn| over [0, n) and returns when every item ran or the job stopped:
 * the first non-zero value returned by |fn|, else 0. Items are handed out in
 * contiguous chunks of at least |min_chunk| items; n <= min_chunk runs on the
 * caller alone. The caller participates (as participant 0). */
int cube__worker_pool_run(cube__worker_pool_t* pool, uint64_t n, uint64_t min_chunk,
                          cube__range_fn fn, void* ctx);

/* The same with at most |max_participants| threads on the job (the caller
 * included; participant numbers are then < max_participants): a device
 * that uses part of the pool (cube_cpu_params_t.threads). */
int cube__worker_pool_run_at_most(cube__worker_pool_t* pool, uint64_t n, uint64_t min_chunk,
                                  uint32_t max_participants, cube__range_fn fn, void* ctx);

#endif /* CUBE_PLATFORM_WORKER_POOL_H_ */
