/* The backend-neutral server of one device: its streams (src/server/stream.h),
 * the memory limit, profiling, and the tasks that run on the device queue.
 *
 * Files: server.c (the server as a device-queue service: creation, options,
 * destruction), stream.c (streams, pools, errors, holds), tasks.c (what is
 * queued and what runs on the runner: writes, copies, reads, launches, flush,
 * sync, profile), future.c (futures), graph.c (capture and replay).
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
#include "memory/track.h"
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
  cube__mem_ring_t mem_ring; /* allocation events of every stream (memory/track.h) */
  /* Memory planning (memory_plan.c), guarded by streams_lock: the pools
   * installed (NULL: the ladder) that new streams take, and measuring mode. */
  cube__pool_options_t* installed;
  uint32_t installed_count;
  bool measuring;
  atomic_uint_fast64_t recoveries; /* recoveries of the device (server/recover.c) */
};

/* Work outside the device queue ------------------------------------------ */

/* The gate between a recovery (server/recover.c) and the work that a
 * calling thread does on a stream's backend stream or pools outside the
 * device queue (an upload on the caller's thread, a cleanup, staging):
 * cube__stream_enter returns true when the device is not lost, and the
 * caller is then inside until cube__stream_leave; false (nothing to leave)
 * when it is lost: the caller must not touch the stream's backend state and
 * answers as for a lost device. A recovery runs while the device is lost
 * and first waits until no caller is inside any stream of the device
 * (recover.c), so that it never replaces a backend stream or a
 * page's storage under a caller, and a caller never meets them half
 * replaced. The store of the loss (backend.c) and these two loads are
 * sequentially consistent: a caller that the recovery did not see enter
 * sees the loss. Cost while nothing is lost: two atomic read-modify-writes
 * on the stream's own line and one load of a line every call reads. */
static inline bool cube__stream_enter(cube__stream_t* st) {
  atomic_fetch_add_explicit(&st->callers, 1, memory_order_seq_cst);
  if (__builtin_expect(
          atomic_load_explicit(&st->server->be.loss, memory_order_seq_cst) == NULL, 1))
    return true;
  atomic_fetch_sub_explicit(&st->callers, 1, memory_order_release);
  return false;
}

static inline void cube__stream_leave(cube__stream_t* st) {
  atomic_fetch_sub_explicit(&st->callers, 1, memory_order_release);
}

/* Memory snapshots, ledger and planning (server/memory_plan.c) ------------ */

/* The device's snapshot document (cube_client_memory_snapshot_json);
 * *out is malloc'd. */
cube_status_t cube__server_snapshot(cube__server_t* s, const char* fn, char** out);
/* Live bytes per tag over every stream's device pools, largest first. */
uint32_t cube__server_tag_totals(cube__server_t* s, cube__tag_total_t* totals, uint32_t cap);
/* The ledger (cube_memory_ledger_t). */
cube_status_t cube__server_ledger(cube__server_t* s, cube_memory_ledger_t* out);
/* cube_client_memory_install / _pools / _measure_begin / _measure_end. */
cube_status_t cube__server_install(cube__server_t* s, const char* fn,
                                   const cube__pool_options_t* pools, uint32_t count);
uint32_t cube__server_pools(cube__server_t* s, cube__pool_options_t* out);
cube_status_t cube__server_measure(cube__server_t* s, const char* fn, bool begin,
                                   cube__pool_options_t* out_plan, uint32_t* out_count);

/* The server of |device|: created on first use. With |insert| (CubeCL's init)
 * the server must not exist yet: exactly one of several concurrent inserts
 * succeeds, the others get ALREADY_EXISTS. */
cube_status_t cube__server_get(cube_device_id_t device, const cube_server_options_t* options,
                               bool insert, cube__server_t** out_server);

/* Whether the device runs work after the call that issued it returned (its
 * memory is not the host's: CUDA, OpenCL): issuing a launch or a replay
 * costs the caller only the driver's call, so after a blocking call it may
 * be issued from the caller's thread (cube__submit_here). The CPU backend
 * runs a launch to its end inside the call: never from the caller there. */
static inline bool cube__server_async(const cube__server_t* s) {
  return (s->be.vt->caps & CUBE__CAP_HOST_MEMORY) == 0;
}

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

/* Copies |bytes| from the view at |src_offset| of |src| into the view at
 * |dst_offset| of |dst| (both of this device; the client refused
 * overlapping views and made a view copied onto itself no call): a task on
 * |stream|, ordered after everything queued on it before and, on backends
 * with events, after each buffer's last use on another stream. Takes its own
 * binding references. Returns the queue's refusal at once; a failure of the
 * copy itself is deferred to |stream|. */
cube_status_t cube__server_copy(cube__stream_t* stream, cube__memory_t* src, uint64_t src_offset,
                                cube__memory_t* dst, uint64_t dst_offset, uint64_t bytes);

/* Drops the taint of |mem| (memory/taint.h) in |stream|'s order: a task
 * holding its own binding reference. Returns the queue's refusal at once. */
cube_status_t cube__server_accept(cube__stream_t* stream, cube__memory_t* mem);

/* DATA_LOST naming the failures behind |mem|'s contents (memory/taint.h),
 * each prefixed "<where>: no valid contents", in |stream|'s order on the
 * device, after the work queued before (a taint is only read in its
 * device's order); CUBE_OK when its contents are valid. For the callers that
 * move a buffer's bytes without a read (to_client through a collective
 * transport), so that spoiled contents are refused as a read refuses them. */
cube_status_t cube__server_taint_check(cube__stream_t* stream, cube__memory_t* mem,
                                       const char* where);

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
/* As cube__server_copy, recorded when the stream is capturing: two slots,
 * the source's first (the order of first use). */
cube_status_t cube__graph_record_copy(cube__stream_t* stream, cube__memory_t* src,
                                      uint64_t src_offset, cube__memory_t* dst,
                                      uint64_t dst_offset, uint64_t bytes);

/* A buffer view inside the payload of a task recorded with
 * cube__graph_record_task: where its memory pointer and its start are. */
typedef struct cube__graph_task_view {
  size_t mem_at;    /* offset in the payload of a cube__memory_t* (NULL there: no view) */
  size_t offset_at; /* offset in the payload of the uint64_t start of the view in it */
  uint64_t len;     /* the view's size */
} cube__graph_task_view_t;

/* As cube__submit(stream's service, stream id, |fn|, |payload|, |size|,
 * |drop|), recorded into the stream's graph instead when it is capturing: a
 * task of a layer above the server (a collective's part), which the server
 * runs without knowing what it is. The payload owns one binding reference on
 * the memory of each of its |view_count| |views| (|fn| may take them, setting
 * the pointer to NULL; |drop| releases what is left); the views are slots of
 * the graph like a launch's buffers. |stream_at| is the offset of the
 * payload's cube__stream_t* (SIZE_MAX: none). |what| (a static string) names
 * the node in messages ("cube_client_all_reduce").
 *
 * The graph keeps the payload until it is freed (then |drop| runs). A
 * replay runs |fn|(server, copy) at the node's place in the order, on a copy
 * of the payload whose stream is the replay's and whose views are the
 * replay's slots (substitutes applied), each with a binding reference of its
 * own, then |drop|(copy): exactly what the queue does with a submitted task.
 * A non-OK return of |fn| is deferred to the stream, naming the node. A graph
 * with such a node replays node by node (a native graph cannot hold it).
 * Fails as cube__submit does, or, capturing, with OUT_OF_MEMORY (no host
 * memory for the record: the capture keeps the failure for capture_end);
 * |drop| has then run on |payload|. */
cube_status_t cube__graph_record_task(cube__stream_t* stream, cube__task_fn fn, const void* payload,
                                      size_t size, cube__payload_drop_fn drop, size_t stream_at,
                                      uint32_t view_count, const cube__graph_task_view_t* views,
                                      const char* what);

/* A new value for scalar argument |arg| of launch node |node|, checked. */
typedef struct cube__graph_scalar_sub {
  uint32_t node, arg;
  cube__launch_arg_t value;
} cube__graph_scalar_sub_t;

/* Queues |graph| on |stream| as one task; |subs| (slot_count entries, or
 * NULL) is taken over with its references, |scalars| (sorted by node, or
 * NULL) with its memory; on failure both are released. */
cube_status_t cube__server_replay(cube__stream_t* stream, struct cube_graph_s* graph,
                                  cube__graph_sub_t* subs, cube__graph_scalar_sub_t* scalars,
                                  size_t scalar_count);
/* INVALID_ARGUMENT naming the first copy node whose source and destination
 * views overlap with the substitutes |subs| (slot_count entries); views
 * that are the same are accepted (that copy does nothing). */
cube_status_t cube__graph_check_copies(const struct cube_graph_s* graph,
                                       const cube__graph_sub_t* subs);
/* True once a replay ran as one native graph. */
bool cube__graph_is_native(const struct cube_graph_s* graph);
/* The kind of scalar argument |arg| of launch node |node| (INVALID_ARGUMENT
 * naming what is wrong: no such node, a write, a copy or a task, no such argument, a
 * buffer). */
cube_status_t cube__graph_scalar_kind(const struct cube_graph_s* graph, uint32_t node,
                                      uint32_t arg, cube_arg_kind_t* out_kind);
/* A graph of no nodes on |s|, made outside a capture (automatic capture,
 * graph_auto.c); NULL when out of host memory. */
struct cube_graph_s* cube__graph_create(cube__server_t* s);
/* Appends a launch to |graph| as a capture on |stream| records it (the same
 * references); a failure is also kept as the graph's recording failure. */
cube_status_t cube__graph_add_launch(struct cube_graph_s* graph, cube__stream_t* stream,
                                     cube_kernel_t* kernel, const uint32_t count[3],
                                     cube__memory_t* dyn_mem, uint64_t dyn_offset,
                                     cube_execution_mode_t mode, uint32_t arg_count,
                                     const cube__task_arg_t* args);
/* Marks a graph made by automatic capture: a failing node is deferred as the
 * eager launch's failure is, without the replay's annotation. */
void cube__graph_set_automatic(struct cube_graph_s* graph);
/* Lets go of the buffers |graph| recorded (kept: their view sizes): every
 * replay of it must then bind every slot. Automatic capture's graphs hold
 * no memory between steps this way. */
void cube__graph_forget_buffers(struct cube_graph_s* graph);
void cube__graph_ref(struct cube_graph_s* graph);
void cube__graph_unref(struct cube_graph_s* graph);
cube__server_t* cube__graph_server(const struct cube_graph_s* graph);
size_t cube__graph_node_count(const struct cube_graph_s* graph);
size_t cube__graph_slot_count(const struct cube_graph_s* graph);
uint64_t cube__graph_slot_len(const struct cube_graph_s* graph, uint32_t slot);
cube__memory_t* cube__graph_slot_mem(const struct cube_graph_s* graph, uint32_t slot);
bool cube__graph_slot_find(const struct cube_graph_s* graph, const cube__memory_t* mem,
                           uint64_t offset, uint64_t len, uint32_t* out_slot);

/* Automatic capture (CUBE_GRAPHS=auto: src/server/graph_auto.c) ---------- */

/* Whether |stream| is under automatic capture (its server's graphs option is
 * auto). One load of a field next to |capture|: the eager paths test it and
 * nothing else. */
static inline bool cube__stream_auto(const cube__stream_t* stream) {
  return stream->auto_state != NULL;
}
static inline bool cube__server_auto(const cube__server_t* s) {
  return s->options.graphs == CUBE_GRAPHS_AUTO;
}

/* An allocation of |stream| ran out of memory: what automatic capture keeps
 * (a held step, the graph and its buffers) is let go, and true is returned
 * when there was some (the caller waits for the queue and tries again). */
bool cube__auto_yield_memory(cube__stream_t* stream);

/* As cube__server_launch, on a stream under automatic capture: learned,
 * queued eagerly, or held as a launch of a step that is replayed. The same
 * references are taken and the same failures returned. */
cube_status_t cube__auto_launch(cube__stream_t* stream, cube_kernel_t* kernel,
                                const uint32_t count[3], cube__memory_t* dyn_mem,
                                uint64_t dyn_offset, cube_execution_mode_t mode,
                                uint32_t arg_count, const cube__task_arg_t* args);

/* A boundary of |stream|'s steps (|what|: "a read", "a sync"): the held step,
 * if any, is queued (as a replay when complete, eagerly otherwise) before the
 * caller queues its own work. Call it after the capture refusals. */
void cube__auto_step_end(cube__stream_t* stream, const char* what);

/* |stream| is about to use |mem| (a read, a write, a replay's buffer, a
 * collective's): a step of another stream that holds it is queued first,
 * eagerly, so that the order of the calls is the order on the device. */
void cube__auto_touch(cube__stream_t* stream, cube__memory_t* mem);

/* Ends the held steps of every stream of |s| (|what| names the call:
 * cube_client_exclusive, cube_client_profile), queued eagerly. */
void cube__auto_end_device(cube__server_t* s, const char* what);

/* Ends the held step of the stream |stream_id| maps to, if it exists. */
void cube__auto_end_stream_id(cube__server_t* s, uint64_t stream_id, const char* what);

/* cube_shutdown, first: every held step of the process is queued, and the
 * graphs automatic capture made are let go (their replays hold them). */
void cube__auto_shutdown(void);

/* The state of a stream under automatic capture: created with the stream
 * when its server's graphs option is auto, destroyed with it. */
cube_status_t cube__auto_create(cube__stream_t* stream, struct cube__auto** out);
void cube__auto_destroy(struct cube__auto* state);

/* The counts of cube_graph_auto_stats_t (graphs, steps replayed, launches
 * replayed, fallbacks, interruptions), summed over |s|'s streams. */
void cube__auto_stats(cube__server_t* s, uint64_t out[5]);

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

/* Orders the use of |mem| by code outside the runtime after the work queued
 * on |stream| before this call (the stream protocol of a DLPack export):
 * with |consumer| (a native stream of the backend's own API: a CUstream on
 * CUDA), that stream is made to wait for it where the backend can
 * (CUBE__CTL_ORDER_NATIVE_STREAM: an event, nobody waits on the host;
 * INVALID_ARGUMENT where the device has no native streams); with |consumer|
 * NULL, the call returns once that work completed on the device. |mem| is first ordered after its last use on
 * another stream. Runs on the device's queue in submission order and waits
 * for it; the stream's deferred errors are left in place. */
cube_status_t cube__server_lend_order(cube__stream_t* stream, cube__memory_t* mem, void* consumer);

/* The device as DLPack names it ({DLDeviceType, device_id, storage pointers
 * are handles}: the backend's CUBE__CTL_DLPACK_DEVICE); UNIMPLEMENTED where
 * its memory cannot be exchanged. Thread-safe. */
cube_status_t cube__server_dlpack_device(cube__server_t* s, int32_t out[3]);
/* Whether memory of another library can be storage of this device
 * (CUBE__CTL_EXTERNAL_STORAGE: fills x->storage, or says why not).
 * Thread-safe. */
cube_status_t cube__server_external_storage(cube__server_t* s, cube__backend_external_t* x);

/* The device's identity (CUBE__CTL_DEVICE_IDENTITY; where the backend has
 * none, "<device name> | <backend version>") into |out|. Thread-safe. */
void cube__server_device_identity(cube__server_t* s, char* out, size_t size);

/* The native stream of |stream| (CUBE__CTL_NATIVE_STREAM: a CUstream on
 * CUDA); UNIMPLEMENTED where the backend has none. Thread-safe. */
cube_status_t cube__server_native_stream(cube__stream_t* stream, void** out);

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
/* Resolves the device times of |stream|'s timed work that has completed
 * (server/timing.h), on the runner; waits for nothing else. */
cube_status_t cube__server_timing_poll(cube__stream_t* stream);

cube_status_t cube__server_profile(cube__stream_t* stream, uint64_t stream_id, cube_task_fn fn,
                                   void* user, const char* name,
                                   cube_profile_duration_t* out_duration);

/* The server's service vtable (exposed for cube_shutdown). */
extern const cube__service_vtable_t cube__server_service;

#endif /* CUBE_SERVER_SERVER_H_ */
