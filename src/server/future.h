/* Futures: the result of an asynchronous read or sync (cube_future_t, public
 * in cube/client.h). A future has two owners: the caller and the task that
 * completes it on the device runner; whichever lets go last frees it.
 *
 * Threading: every function here is thread-safe; results are handed over
 * through the completion event (written before it is set, read after it).
 */
#ifndef CUBE_SERVER_FUTURE_H_
#define CUBE_SERVER_FUTURE_H_

#include <stddef.h>

#include "cube/bytes.h"
#include "cube/future.h"

/* A future of |count| results with two references (the caller's and the
 * task's). NULL when out of host memory. */
cube_future_t* cube__future_create(size_t count);

/* The result slots the task fills (count entries). */
cube_bytes_t** cube__future_results(cube_future_t* future);

/* Drops one reference; the last frees the future and any result nobody took. */
void cube__future_unref(cube_future_t* future);

/* Frees a future that was never handed out (both references at once). */
void cube__future_discard(cube_future_t* future);

/* The task's side: stores |status| (consumed; on failure the results are
 * released), wakes the waiters and drops the task's reference. */
void cube__future_complete(cube_future_t* future, cube_status_t status);

#endif /* CUBE_SERVER_FUTURE_H_ */
