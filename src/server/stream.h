/* Logical streams of one device (CubeCL's StreamId with its own memory):
 * each owns the device memory pools, the pinned staging pools, the deferred
 * error lists and, on backends with events, the holds of buffers borrowed
 * from other streams. One mutex per stream guards all of it; streams are per
 * thread by default, so it is uncontended.
 *
 * Everything that touches a stream's pools or locks lives here: the client
 * asks (alloc, staging, mode, cleanup, usage, report) and never takes the
 * lock itself.
 *
 * Threading: every function here is thread-safe unless it says otherwise.
 */
#ifndef CUBE_SERVER_STREAM_H_
#define CUBE_SERVER_STREAM_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube/bytes.h"
#include "cube/memory.h"
#include "cube/status.h"
#include "memory/memory.h"

typedef struct cube__server cube__server_t;

typedef struct cube__stream {
  /* Read-mostly, by the calling threads and the runner alike: set at
   * creation (mm and pinned until destruction). */
  cube__server_t* server;
  uint64_t id;          /* the first stream id mapped to this slot */
  uint32_t slot;
  cube__mm_t* mm;       /* device memory pools (guarded by |lock|) */
  cube__mm_t* pinned;   /* pinned host staging pools; NULL without host storage */
  void* backend_stream;
  cube__storage_ops_t device_ops; /* self = this stream; counts the memory limit */
  cube__storage_ops_t host_ops;
  /* The graph being captured on this stream (cube/graph.h), NULL when none:
   * set and cleared by capture begin/end, read by every launch and write. */
  _Atomic(struct cube_graph_s*) capture;
  /* Automatic capture (CUBE_GRAPHS=auto, graph_auto.c): NULL when off. Set
   * at creation; the state has its own lock. */
  struct cube__auto* auto_state;
  /* Written on every sync and error: a cache line of their own, so that the
   * runner taking |lock| does not evict the fields above from the caller's
   * cache (every launch and sync reads them). */
  _Alignas(64) pthread_mutex_t lock; /* guards the pools and every field below */
  cube_status_t errors; /* deferred errors, joined */
  /* |errors| != NULL, also readable without the lock: a read or sync that
   * finds it false takes no lock (set and cleared under |lock|). */
  atomic_bool errors_pending;
  cube_status_t profile_errors; /* launch failures while a profile is active */
  uint32_t profile_depth;
  /* Buffers of other streams used by this one, held until the event recorded
   * after that use completed (then their owner may reuse the memory). FIFO;
   * guarded by |lock|. Only on backends with events. */
  struct cube__hold* holds_head;
  struct cube__hold* holds_tail;
  atomic_size_t hold_count; /* read without the lock: 0 = nothing to release */
  /* A slice of the pinned pool that small reads land in before they are
   * copied into a heap buffer (cube__stream_small_read): reserved on first
   * use, kept until the stream is destroyed. Used only by a read, which has
   * the device to itself. */
  cube__memory_t* small_read;
  void* small_read_ptr;
  /* Device timing of profiled and traced work (server/timing.c): NULL until
   * the stream's first timed work; used only by whoever runs its work. */
  struct cube__timing* timing;
  /* The kernel (id) and mode that this stream's last timed launch prepared
   * (server/tasks.c): the next timed launch of the same one skips the
   * backend's prepare. Owner thread only, as |timing|. */
  uint64_t prepared_kernel;
  int prepared_mode;
  /* The backend said its activity records time this stream's kernels when
   * cube__activity_epoch was act_epoch - 1 (0: not known; reset with
   * |timing|), asked to keep them if act_kept: while the epoch is that, it
   * is not asked again (server/timing.h). Owner thread only, as |timing|. */
  uint64_t act_epoch;
  bool act_kept;
  /* The place in the stream's order of its next timed work (trace records
   * carry it: server/timing.h); any thread that issues work on it. */
  atomic_uint_fast64_t timed_order;
  /* Threads inside work that touches this stream's backend stream or pools
   * outside the device queue (an upload on the caller's thread, a cleanup,
   * staging): a recovery waits until none is, and none enters while the
   * device is lost (cube__stream_enter, server.h). Written by those callers
   * only: a line of its own. */
  _Alignas(64) atomic_uint callers;
} cube__stream_t;

/* The stream that |stream_id| maps to (slot id % max_streams), created on
 * first use. The stream lives as long as its server. */
cube_status_t cube__server_stream(cube__server_t* s, uint64_t stream_id,
                                  cube__stream_t** out_stream);

/* The bytes of read results up to this size are read into the stream's
 * small-read slice and copied into a buffer of the heap: a few bytes cost
 * less to copy than a slice of the pinned pool costs to reserve and give
 * back. */
#define CUBE__SMALL_READ_BYTES 256u

/* The pinned slice of CUBE__SMALL_READ_BYTES for small reads (see above), or
 * NULL when the stream has no pinned pool or none is left (the read then
 * takes the usual path). Only from a read running with the device to itself. */
void* cube__stream_small_read(cube__stream_t* stream);

/* "cpu:0 stream 3" into |buf| (|n| bytes); returns |buf|. */
const char* cube__stream_where(const cube__stream_t* stream, char* buf, size_t n);

/* Destroys a stream (its server's destruction only). */
void cube__stream_destroy(cube__stream_t* stream);

/* Memory ------------------------------------------------------------------- */

/* Reserves |size| bytes on |stream| and returns a new bound descriptor
 * (refs 2: caller + pool; handle_refs 1). |what| prefixes error messages; an
 * out-of-memory status carries the stream's pool report and |size| as the
 * bytes requested. */
cube_status_t cube__stream_alloc(cube__stream_t* stream, uint64_t size, const char* what,
                                 cube__memory_t** out_mem);

/* True when the device has pinned host staging memory. */
bool cube__stream_has_staging(const cube__stream_t* stream);

/* Pinned staging buffer of |size| bytes from |stream|'s host pools, or an
 * error (UNIMPLEMENTED when the backend has no host storage). */
cube_status_t cube__stream_staging(cube__stream_t* stream, size_t size, cube_bytes_t** out);

/* Replaces a FILE buffer *|inout| by a copy safe to upload from: pinned
 * staging from |stream| where there is some, else a NATIVE buffer (the FILE
 * buffer is released). Other buffers are left as they are. The copy reads
 * the file (cube__bytes_copy_out): a file that shrank since it was mapped is
 * an OUT_OF_RANGE status naming the path and the sizes, *|inout| untouched. */
cube_status_t cube__stream_stage_file(cube__stream_t* stream, cube_bytes_t** inout);

/* Sets the allocation mode of |stream|'s device pools; returns the mode it
 * replaced (so that nested windows restore the outer one). */
cube_allocation_mode_t cube__stream_set_mode(cube__stream_t* stream, cube_allocation_mode_t mode);

/* Gives the stream's free pages (device and pinned) back to the backend, and
 * cached driver memory after them (the backend's trim). */
void cube__stream_cleanup(cube__stream_t* stream);

/* At a sync: gives back the pages of the stream's fitted pools that stayed
 * free and unused since the previous sync (cube__mm_release_idle). */
void cube__stream_release_idle(cube__stream_t* stream);

/* The granule to which fitted pools round storage sizes on |s|'s device:
 * the backend's CUBE__CTL_MEMORY_GRANULE (CUDA: 2 MiB), else 64 KiB. */
uint64_t cube__server_memory_granule(cube__server_t* s);

/* The usage of |stream|'s device pools. With |fail_on_errors|, a stream with
 * deferred errors gives FAILED_PRECONDITION (|fn| names the call). */
cube_status_t cube__stream_usage(cube__stream_t* stream, const char* fn, bool fail_on_errors,
                                 cube_memory_usage_t* out_usage);

/* The per-pool report of |stream|, with the device-wide reserve and limit. */
void cube__stream_report(cube__stream_t* stream, cube_memory_report_t* out_report);

/* Usage summed over every stream of |s|, and cleanup of every stream. */
void cube__server_usage_device(cube__server_t* s, cube_memory_usage_t* out_usage);
void cube__server_cleanup_device(cube__server_t* s);

/* Errors ------------------------------------------------------------------- */

/* Appends a deferred error to |stream| (consumes |status|). */
void cube__stream_push_error(cube__stream_t* stream, cube_status_t status);
/* Takes (and clears) the deferred errors; NULL if none. */
cube_status_t cube__stream_take_errors(cube__stream_t* stream);

/* Profile brackets: launch failures inside one go to the bracket, not to the
 * stream's error list. end returns the failures of the outermost bracket. */
void cube__stream_profile_begin(cube__stream_t* stream);
cube_status_t cube__stream_profile_end(cube__stream_t* stream);

/* Cross-stream use (backends with events) --------------------------------- */

/* Orders |stream|'s next use of |m| after the stream that used it last (an
 * event where it last was; a no-op on backends without events). For code that
 * touches device memory outside the server's own tasks (collectives). */
cube_status_t cube__stream_order(cube__stream_t* stream, cube__memory_t* m);

/* Holds the buffers of |mems| that belong to other streams until the work
 * |stream| was given so far completed. Runner only. */
void cube__stream_hold(cube__stream_t* stream, cube__memory_t* const* mems, uint32_t n);

/* Releases the holds whose events completed (|wait|: waits for all first). */
void cube__stream_release_holds(cube__stream_t* stream, bool wait);

/* Pools kept past a shutdown ----------------------------------------------- */

/* Destroys the pools kept past a shutdown (pinned pools holding read results,
 * device pools holding lent views) once their buffers are all released; true
 * if none is left. Thread-safe. */
bool cube__server_sweep_orphans(void);

/* Counts a view of device memory lent outside the runtime that may outlive
 * cube_shutdown (a DLPack export holding a binding reference). While any is
 * out, a stream destroyed by cube_shutdown keeps its device pools that still
 * hold buffers (as orphans, freed through the backend with no device) instead
 * of freeing memory under the borrower. Thread-safe. */
void cube__server_lend(void);
/* Ends one lend, after its binding reference was dropped; |after_shutdown|
 * (the runtime was shut down since the lend) sweeps the orphans, so that the
 * last borrower frees the memory. Thread-safe. */
void cube__server_unlend(bool after_shutdown);

#endif /* CUBE_SERVER_STREAM_H_ */
