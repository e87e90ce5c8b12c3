/* The backend-neutral server of one device: its streams (src/server/stream.h),
 * the memory limit, profiling, and the tasks that run on the device queue.
 *
 * Files: server.c (the server as a device-queue service: creation, options,
 * destruction), stream.c (streams, pools, errors, holds), tasks.c (what is
 * queued and what runs on the runner: writes, reads, launches, flush, sync,
 * profile), future.c (futures).
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
 *    submission order; their failures go to the stream's error list. A task
 *    carries its stream: the runner does not look it up again.
 *  - A read takes its place in that order too, but runs on the calling
 *    thread when everything queued before it on the device has run (the
 *    device's runner is idle and cannot start later work meanwhile:
 *    cube__submit_here), so that a read after finished work costs no hand-off
 *    to the runner and back.
 *
 * Every entry point takes the stream object the client found
 * (cube__server_stream) and is thread-safe.
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
#include "server/stream.h"

struct cube__server {
  cube_device_id_t id;
  cube__backend_t be; /* the backend's table and device: called through backend.h's wrappers */
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

/* The server of |device|: created on first use. With |insert| (CubeCL's init)
 * the server must not exist yet: exactly one of several concurrent inserts
 * succeeds, the others get ALREADY_EXISTS. */
cube_status_t cube__server_get(cube_device_id_t device, const cube_server_options_t* options,
                               bool insert, cube__server_t** out_server);

/* Writes |height| rows of |width| bytes from |src| into |mem| at |offset|,
 * rows |pitch| bytes apart on the device. |owner| (may be NULL) owns |src| and
 * is consumed. Failures are deferred to |stream|. */
void cube__server_write(cube__stream_t* stream, cube__memory_t* mem, uint64_t offset,
                        uint64_t pitch, const void* src, uint64_t width, uint64_t height,
                        cube_bytes_t* owner);

/* Writes |height| rows of |width| bytes from |src| into |mem| (a buffer that
 * queued work may read or write) at |offset|, rows |pitch| bytes apart: a
 * task on |stream|, ordered after everything queued on it before and, on
 * backends with events, after the buffer's last use on another stream.
 * |src| is copied before the call returns. Takes its own binding reference on
 * |mem|. Returns OUT_OF_MEMORY (no host memory for the copy) or the queue's
 * refusal at once; a failure of the write itself is deferred to |stream|. */
cube_status_t cube__server_write_ordered(cube__stream_t* stream, cube__memory_t* mem,
                                         uint64_t offset, uint64_t pitch, const void* src,
                                         uint64_t width, uint64_t height);

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

/* Reads |count| regions after all work queued before on |stream| and
 * returns the future of the result. The read takes over the regions' binding
 * references (also on failure) and may change |regions| (the caller frees the
 * array after the call). When the device's queue has nothing to run before
 * it, the read runs during the call on the calling thread (cube__submit_here;
 * the future is complete when this returns), else it is queued as a task.
 * Fails at once with OUT_OF_MEMORY or the queue's refusal; the read's own
 * failure (the stream's deferred errors, a backend error) is the future's. */
cube_status_t cube__server_read(cube__stream_t* stream, size_t count,
                                cube__read_region_t* regions, cube_future_t** out_future);

/* As cube__server_read, but waits: on success out_bytes[i] is the result of
 * region i (NULL for a region read into the caller's memory); on failure the
 * status is the read's (deferred errors included) and nothing is written.
 * It runs on the calling thread when the work queued before it on the device
 * has finished, at once or after a short poll (about 20 us), else it waits on
 * the queued task. */
cube_status_t cube__server_read_wait(cube__stream_t* stream, size_t count,
                                     cube__read_region_t* regions, cube_bytes_t** out_bytes);

/* A launch argument as the client checked it. */
typedef struct cube__task_arg {
  cube__memory_t* mem;      /* buffers: the buffer; NULL for scalars */
  cube__launch_arg_t value; /* buffers: .buffer.offset = the view's start in the buffer and
                               .buffer.len its size (the storage is found on the runner);
                               scalars: the value */
} cube__task_arg_t;

/* Queues a launch of |kernel| over |count| cubes, or over the three u32 at
 * |dyn_offset| of |dyn_mem| when that is not NULL (read when it runs). The
 * record is built in the queue's cell; it takes a kernel reference and a
 * binding reference on every buffer (released once it ran). */
cube_status_t cube__server_launch(cube__stream_t* stream, cube_kernel_t* kernel,
                                  const uint32_t count[3], cube__memory_t* dyn_mem,
                                  uint64_t dyn_offset, cube_execution_mode_t mode,
                                  uint32_t arg_count, const cube__task_arg_t* args);

/* Graphs (src/server/graph.c) --------------------------------------------- */

/* A substitute for one slot of a replay: a binding reference on |mem| held by
 * the replay until it ran. */
typedef struct cube__graph_sub {
  cube__memory_t* mem; /* NULL: the slot as captured */
  uint64_t offset;     /* the substitute view's start in |mem| */
} cube__graph_sub_t;

/* Starts / ends the capture of |stream| (FAILED_PRECONDITION when it is
 * capturing already / not capturing; end returns the first failure that was
 * recorded, and then no graph). */
cube_status_t cube__stream_capture_begin(cube__stream_t* stream);
cube_status_t cube__stream_capture_end(cube__stream_t* stream, struct cube_graph_s** out_graph);
static inline bool cube__stream_capturing(cube__stream_t* stream) {
  return atomic_load_explicit(&stream->capture, memory_order_relaxed) != NULL;
}
/* FAILED_PRECONDITION naming |fn| and |what| ("a read") for a call that a
 * capture does not record. */
cube_status_t cube__stream_capture_refusal(const cube__stream_t* stream, const char* fn,
                                           const char* what);

/* As cube__server_launch / cube__server_write_ordered, recorded into the
 * stream's graph instead when it is capturing (the graph takes the same
 * references a queued record would, and keeps them while it lives). A write
 * names the view it writes (|view_offset|, |view_len|): its slot. */
cube_status_t cube__graph_record_launch(cube__stream_t* stream, cube_kernel_t* kernel,
                                        const uint32_t count[3], cube__memory_t* dyn_mem,
                                        uint64_t dyn_offset, cube_execution_mode_t mode,
                                        uint32_t arg_count, const cube__task_arg_t* args);
cube_status_t cube__graph_record_write(cube__stream_t* stream, cube__memory_t* mem,
                                       uint64_t view_offset, uint64_t view_len, uint64_t pitch,
                                       const void* src, uint64_t width, uint64_t height);

/* Queues |graph| on |stream| as one task; |subs| (slot_count entries, or
 * NULL) is taken over with its references. */
cube_status_t cube__server_replay(cube__stream_t* stream, struct cube_graph_s* graph,
                                  cube__graph_sub_t* subs);
void cube__graph_ref(struct cube_graph_s* graph);
void cube__graph_unref(struct cube_graph_s* graph);
cube__server_t* cube__graph_server(const struct cube_graph_s* graph);
size_t cube__graph_node_count(const struct cube_graph_s* graph);
size_t cube__graph_slot_count(const struct cube_graph_s* graph);
uint64_t cube__graph_slot_len(const struct cube_graph_s* graph, uint32_t slot);
bool cube__graph_slot_find(const struct cube_graph_s* graph, const cube__memory_t* mem,
                           uint64_t offset, uint64_t len, uint32_t* out_slot);

/* Compiles |kernel| for |mode| on the server's device now (a no-op where the
 * backend compiles nothing). */
cube_status_t cube__server_prepare(cube__server_t* s, const cube_kernel_t* kernel,
                                   cube_execution_mode_t mode);

/* True where compiled kernels have limits of their own beyond the device's
 * properties (cube__backend_kernel_limits): a launch then asks for them. */
bool cube__server_has_kernel_limits(const cube__server_t* s);
/* Compiles |kernel| for |mode| now if it is not yet and gives the compiled
 * kernel's limits on the server's device (all zero where there are none). */
cube_status_t cube__server_kernel_limits(cube__server_t* s, const cube_kernel_t* kernel,
                                         cube_execution_mode_t mode, cube__kernel_limits_t* out);

/* Waits until the work queued before on the stream has run (no error taken). */
cube_status_t cube__server_barrier(cube__stream_t* stream);
/* Pushes queued work and returns (and clears) the stream's deferred errors. */
cube_status_t cube__server_flush(cube__stream_t* stream);
/* Waits for the stream's work on the device and returns its deferred errors. */
cube_status_t cube__server_sync(cube__stream_t* stream);
cube_status_t cube__server_sync_async(cube__stream_t* stream, cube_future_t** out_future);

/* Runs |fn| with the device to itself; calls made inside use |stream_id| as
 * their default stream. */
cube_status_t cube__server_exclusive(cube__server_t* s, uint64_t stream_id, cube_task_fn fn,
                                     void* user);

/* Profile bracket, on the device (inside exclusive). */
cube_status_t cube__server_profile(cube__stream_t* stream, uint64_t stream_id, cube_task_fn fn,
                                   void* user, const char* name,
                                   cube_profile_duration_t* out_duration);

/* The server's service vtable (exposed for cube_shutdown). */
extern const cube__service_vtable_t cube__server_service;

#endif /* CUBE_SERVER_SERVER_H_ */
