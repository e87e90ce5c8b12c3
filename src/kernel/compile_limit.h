/* The compile time limit (CUBE_COMPILE_TIMEOUT) for compilers that run in
 * this process and cannot be interrupted (OpenCL's clBuildProgram, NVRTC):
 * the compile runs on a thread of its own and the caller waits for it at most
 * the limit. Past it the caller goes on (its launch fails with
 * DEADLINE_EXCEEDED) and the compile is left to finish in the background:
 * then its |abandon| function runs on that thread (typically: store the
 * result in the disk cache, so that a later launch finds it, and free
 * everything). cube_shutdown waits for compiles left running
 * (cube__compile_limit_drain), so that no thread runs library code after it.
 *
 * The CPU backend's compiler is a child process: it is killed at the limit
 * instead (backends/cpu/cpu_compiler.c).
 *
 * Thread-safe.
 */
#ifndef CUBE_KERNEL_COMPILE_LIMIT_H_
#define CUBE_KERNEL_COMPILE_LIMIT_H_

#include <stdbool.h>

#include "cube/status.h"

/* The limit in seconds (CUBE_COMPILE_TIMEOUT), 0 when there is none. */
double cube__compile_limit_seconds(void);

/* Runs |run|(arg) and returns true once it returned, within |seconds| (0:
 * no limit; run on the calling thread). Returns false when |seconds| passed
 * first: |arg| then belongs to the compile, whose thread calls
 * |abandon|(arg) after |run| returns. Without a thread to spare (creation
 * fails) |run| runs on the calling thread, without a limit. */
bool cube__compile_limit_run(void (*run)(void* arg), void (*abandon)(void* arg), void* arg,
                             double seconds);

/* The DEADLINE_EXCEEDED status of a compile of |kernel| stopped or left
 * behind after |seconds| ("compiling kernel '<name>' with <how> was stopped
 * after the compile time limit of <s> s (CUBE_COMPILE_TIMEOUT)<detail>"). */
cube_status_t cube__compile_limit_status(const char* kernel, const char* how, double seconds,
                                         const char* detail);

/* Waits until every compile left running has finished (cube_shutdown). */
void cube__compile_limit_drain(void);

/* Compiles left running now (tests). */
unsigned cube__compile_limit_running(void);

#endif /* CUBE_KERNEL_COMPILE_LIMIT_H_ */
