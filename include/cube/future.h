/* cube/future.h: the result of an asynchronous read or sync.
 *
 * cube_client_read_async, cube_client_read_tensor_async and
 * cube_client_sync_async queue their work and return a future at once. The
 * work runs in stream order like any other; the future becomes ready when it
 * has run, and cube_future_wait hands over its results (the bytes read, or
 * nothing for a sync) or its failure (the stream's deferred errors, returned
 * and cleared as cube_client_sync would).
 *
 * Ownership: the caller owns the future and releases it with
 * cube_future_release, waited on or not. A future keeps no client alive and
 * may outlive the client that made it; it must be released before
 * cube_shutdown.
 *
 * Thread safety: every function here is thread-safe; several threads may
 * wait on one future (one of them gets the result, see cube_future_wait).
 */
#ifndef CUBE_FUTURE_H_
#define CUBE_FUTURE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube/bytes.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cube_future_s cube_future_t;

/* Waits at most |timeout_ns| (UINT64_MAX = forever, 0 = poll) for |future|.
 * On success moves the results into |out_bytes| (cube_future_count entries,
 * each then owned by the caller; may be NULL for a sync future, which has
 * none). Fails with
 *   DEADLINE_EXCEEDED  not ready in time; the future stays usable,
 *   INVALID_ARGUMENT   NULL |future|, or NULL |out_bytes| for a read future,
 *   FAILED_PRECONDITION the outcome was already taken by an earlier wait,
 *   or the failure of the work itself (its stream's deferred errors, which
 *   the wait returns once). Writes nothing to |out_bytes| on failure. */
CUBE_MUST_USE_RESULT cube_status_t cube_future_wait(cube_future_t* future, uint64_t timeout_ns,
                                                    cube_bytes_t** out_bytes);

/* True once the outcome is known (cube_future_wait will not block); false for
 * NULL. */
bool cube_future_is_ready(const cube_future_t* future);

/* Number of results the future carries (handles read; 0 for a sync future
 * and for NULL). */
size_t cube_future_count(const cube_future_t* future);

/* Releases the caller's reference; NULL is accepted. Pending work still runs;
 * its results are discarded when they arrive. */
void cube_future_release(cube_future_t* future);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_FUTURE_H_ */
