/* cube/trace.h: a timeline trace of what the runtime does, in the Chrome
 * trace-event JSON format that Perfetto's UI (ui.perfetto.dev) and
 * chrome://tracing open (docs/observability.md).
 *
 * One trace at a time per process. While it records, every launch, upload,
 * download, copy, compile and kernel-cache load, graph replay, collective,
 * out-of-memory failure, wait of a host thread (sync, read) and user range
 * becomes a record: device work on a track per device stream (pid = the
 * device, tid = the stream), host work on a track per host thread. Device
 * records carry device timestamps (CUDA events, the CPU runner's clock),
 * resolved after the work completed, so recording drains no stream.
 *
 * Records go into a ring of CUBE_TRACE_RECORDS entries (65536 by default):
 * when it is full the oldest records are overwritten and counted; the file
 * says how many were dropped ("otherData": "dropped_events").
 *
 * CUBE_TRACE=<file> starts a trace when the first device is created and
 * writes it when the process exits ("%p" in the name is replaced by the
 * process id).
 *
 * Thread-safe, every function.
 */
#ifndef CUBE_TRACE_H_
#define CUBE_TRACE_H_

#include <stdbool.h>

#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Starts recording a trace that cube_trace_stop writes to |path|. The file
 * is created now, without following a link and without replacing anything
 * (mode 0600): ALREADY_EXISTS when something is there, INVALID_ARGUMENT
 * when it cannot be created (the message names the path and the reason) or
 * when the environment's CUBE_TRACE_RECORDS was refused (named, with its
 * value and what is accepted),
 * FAILED_PRECONDITION when a trace is already recording (its path named),
 * OUT_OF_MEMORY when the ring cannot be allocated. */
CUBE_MUST_USE_RESULT cube_status_t cube_trace_start(const char* path);

/* Stops the trace and writes it to its file. Records of device work that
 * has not completed yet (no sync waited for it) are not in the file: sync
 * the streams first. FAILED_PRECONDITION when no trace is recording;
 * UNAVAILABLE when writing the file failed (the path, the bytes written of
 * the document's and the reason named; the partial file is removed and the
 * trace is stopped all the same). */
CUBE_MUST_USE_RESULT cube_status_t cube_trace_stop(void);

/* Whether a trace is recording. */
bool cube_trace_active(void);

/* Opens a user range named |name| (copied; NULL reads as "range") on the
 * calling thread's track, as NVTX's push does; ranges nest, up to 64 deep
 * per thread (deeper pushes are counted and their pops ignored). Does
 * nothing while no trace records. */
void cube_trace_range_push(const char* name);

/* Closes the calling thread's innermost open range; it is recorded with its
 * start, duration and depth (the ranges of the same trace open around it).
 * A range is recorded only into the trace that was recording when it was
 * pushed: one still open when that trace stops is in neither its file nor a
 * later trace's (pop it before cube_trace_stop). Does nothing when the
 * thread has no open range. */
void cube_trace_range_pop(void);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_TRACE_H_ */
