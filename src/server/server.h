/* The backend-neutral server of one device: its streams (pools, error lists),
 * the memory limit, profiling, and the tasks that run on the device queue.
 *
 * Where work runs:
 *  - Allocation (reserve + bind) runs on the calling thread under the
 *    stream's lock: streams are per thread by default, so the lock is
 *    uncontended, and an out-of-memory error is returned by the call that
 *    asked, with a report (CubeCL binds lazily on the runner and panics).
 *  - On backends whose memory is host memory (CPU), an upload into a fresh
 *    buffer is a copy on the calling thread: nothing queued can touch memory
 *    that was free an instant ago. Other backends queue the write.
 *  - Launches, reads, flush and sync are tasks on the device queue, in
 *    submission order; their failures go to the stream's error list.
 */
#ifndef CUBE_SERVER_SERVER_H_
#define CUBE_SERVER_SERVER_H_

#include <pthread.h>
#include <stdatomic.h>

#include "backends/backend.h"
#include "cube/client.h"
#include "memory/memory.h"
#include "platform/platform.h"
#include "profile/profiler.h"
#include "queue/device_queue.h"

typedef struct cube__server cube__server_t;

typedef struct cube__stream {
  cube__server_t* server;
  uint64_t id;          /* the first stream id mapped to this slot */
  uint32_t slot;
  pthread_mutex_t lock; /* guards every field below */
  cube__mm_t* mm;       /* device memory pools */
  cube__mm_t* pinned;   /* pinned host staging pools; NULL without host storage */
  cube_status_t errors; /* deferred errors, joined */
  cube_status_t profile_errors; /* launch failures while a profile is active */
  uint32_t profile_depth;
  void* backend_stream;
  /* Buffers of other streams used by this one, held until the event recorded
   * after that use completed (then their owner may reuse the memory). FIFO;
   * guarded by |lock|. Only on backends with events. */
  struct cube__hold* holds_head;
  struct cube__hold* holds_tail;
  atomic_size_t hold_count; /* read without the lock: 0 = nothing to release */
  cube__storage_ops_t device_ops; /* self = this stream; counts the memory limit */
  cube__storage_ops_t host_ops;
} cube__stream_t;

struct cube__server {
  cube_device_id_t id;
  const cube__backend_vtable_t* backend;
  cube__backend_device_t* bdev;
  cube_device_properties_t props;
  cube_features_t features;
  cube_backend_info_t info;
  cube_server_options_t options; /* resolved: no DEFAULT/0 left except log_fn */
  _Atomic(cube__service_t*) service; /* set by cube__server_get (same value every time) */
  _Atomic(cube__device_t*) device;
  uint32_t max_streams;
  _Atomic(cube__stream_t*)* streams; /* max_streams slots, created lazily */
  pthread_mutex_t streams_lock;
  atomic_uint_fast64_t device_reserved; /* storage bytes held by every stream */
  uint64_t memory_limit;                /* 0 = none */
  cube__profiler_t profiler;
};

/* The server of |device|: created on first use (insert = true: must not exist
 * yet, CubeCL's init). */
cube_status_t cube__server_get(cube_device_id_t device, const cube_server_options_t* options,
                               bool insert, cube__server_t** out_server);

/* The stream that |stream_id| maps to (slot id % max_streams), created on
 * first use. */
cube_status_t cube__server_stream(cube__server_t* s, uint64_t stream_id,
                                  cube__stream_t** out_stream);

/* Orders |stream|'s next use of |m| after the stream that used it last (an
 * event where it last was; a no-op on backends without events). For code that
 * touches device memory outside the server's own tasks (collectives). */
cube_status_t cube__stream_order(cube__stream_t* stream, cube__memory_t* m);

/* Releases the holds whose events completed (|wait|: waits for all first). */
void cube__stream_release_holds(cube__stream_t* stream, bool wait);

/* Appends a deferred error to |stream| (consumes |status|). */
void cube__stream_push_error(cube__stream_t* stream, cube_status_t status);
/* Takes (and clears) the deferred errors; NULL if none. */
cube_status_t cube__stream_take_errors(cube__stream_t* stream);

/* Reserves |size| bytes on |stream| and returns a new bound descriptor
 * (refs 2: caller + pool; handle_refs 1). |what| prefixes error messages. */
cube_status_t cube__server_alloc(cube__stream_t* stream, uint64_t size, const char* what,
                                 cube__memory_t** out_mem);

/* Writes |height| rows of |width| bytes from |src| into |mem| at |offset|,
 * rows |pitch| bytes apart on the device. |owner| (may be NULL) owns |src| and
 * is consumed. Failures are deferred to |stream|. */
void cube__server_write(cube__stream_t* stream, cube__memory_t* mem, uint64_t offset,
                        uint64_t pitch, const void* src, uint64_t width, uint64_t height,
                        cube_bytes_t* owner);

/* Pinned staging buffer of |size| bytes from |stream|'s host pools, or an
 * error (UNIMPLEMENTED when the backend has no host storage). */
cube_status_t cube__server_staging(cube__stream_t* stream, size_t size, cube_bytes_t** out);

/* Replaces a FILE buffer *|inout| by a copy safe to upload from: pinned
 * staging from |stream| where there is some, else a NATIVE buffer (the FILE
 * buffer is released). Other buffers are left as they are. The copy reads
 * the file (cube__bytes_copy_out): a file that shrank since it was mapped is
 * an OUT_OF_RANGE status naming the path and the sizes, *|inout| untouched. */
cube_status_t cube__server_stage_file(cube__stream_t* stream, cube_bytes_t** inout);

/* One region to read. */
typedef struct cube__read_region {
  cube__memory_t* mem; /* a binding reference owned by the request */
  uint64_t offset;     /* from the start of the buffer */
  uint64_t width;      /* bytes per row */
  uint64_t height;     /* rows */
  uint64_t pitch;      /* bytes between rows on the device */
  void* into;          /* the caller's memory (width * height bytes), or NULL:
                          a staging buffer, returned through the future */
} cube__read_region_t;

/* Queues a read of |count| regions (the future takes over their binding
 * references) and returns the future. */
cube_status_t cube__server_read(cube__server_t* s, uint64_t stream_id, size_t count,
                                cube__read_region_t* regions, cube_future_t** out_future);

/* A launch argument as queued. */
typedef struct cube__task_arg {
  cube__memory_t* mem; /* buffers: a binding reference; NULL for scalars */
  uint64_t offset;     /* buffers: start of the view in the buffer */
  cube_cpu_arg_t value;/* buffers: .buffer.len = view size; scalars: the value */
} cube__task_arg_t;

/* Queues a launch. Takes a kernel reference and the binding references in
 * |args| and |dyn| (released once it ran). */
cube_status_t cube__server_launch(cube__server_t* s, uint64_t stream_id, cube_kernel_t* kernel,
                                  const uint32_t count[3], const cube__task_arg_t* dyn,
                                  cube_execution_mode_t mode, uint32_t arg_count,
                                  const cube__task_arg_t* args);

/* Waits until the work queued before on the stream has run (no error taken). */
cube_status_t cube__server_barrier(cube__server_t* s, uint64_t stream_id);
cube_status_t cube__server_flush(cube__server_t* s, uint64_t stream_id);
cube_status_t cube__server_sync(cube__server_t* s, uint64_t stream_id);
cube_status_t cube__server_sync_async(cube__server_t* s, uint64_t stream_id,
                                      cube_future_t** out_future);

/* Profile bracket, on the device (inside exclusive). */
cube_status_t cube__server_profile(cube__server_t* s, uint64_t stream_id, cube_task_fn fn,
                                   void* user, const char* name,
                                   cube_profile_duration_t* out_duration);

/* Destroys pinned pools kept past a shutdown once their buffers are all
 * released; true if none is left. */
bool cube__server_sweep_orphans(void);

/* The server's service vtable (exposed for cube_shutdown). */
extern const cube__service_vtable_t cube__server_service;

#endif /* CUBE_SERVER_SERVER_H_ */
