/* The backend interface, version 2: one table per backend (cpu, cuda,
 * opencl, null), and the wrappers through which the rest of the library
 * calls it (src/backends/backend.c). Nothing outside src/backends/ calls a
 * table slot directly: the wrappers own the NULL fallbacks of the optional
 * slots, one fault-injection site per (backend, slot) and a trace point per
 * call. Nothing in src/backends/ calls up into the server, the client or the
 * collectives.
 *
 * Adding a backend: src/backends/null/README.md.
 *
 * Threading: availability, device_count, device_create, the storage slots
 * (alloc, dealloc, host_alloc, host_dealloc), prepare and ctl without a
 * stream are thread-safe. Everything taking a stream runs on the device's
 * runner (or under its inline lock) and is ordered on that stream, except
 * where a slot says otherwise (write with CUBE__CAP_CALLER_WRITES).
 */
#ifndef CUBE_BACKENDS_BACKEND_H_
#define CUBE_BACKENDS_BACKEND_H_

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/fault.h"
#include "cube/bytes.h"
#include "cube/device.h"
#include "cube/kernel.h"
#include "cube/options.h"
#include "kernel/dialect.h"
#include "memory/memory.h"

/* The version of the table below; a table with another version is refused by
 * the registry (the backend is then UNAVAILABLE, naming both versions). New
 * slots are appended and bump the version. */
#define CUBE__BACKEND_API_VERSION 6u

typedef struct cube__backend_device cube__backend_device_t;

//===----------------------------------------------------------------------===//
// Launch records
//===----------------------------------------------------------------------===//

/* One launch argument as the backend receives it, resolved once by the
 * server; its kind is the kernel's (cube__launch_t.kinds). A buffer is its
 * storage, the byte offset of the view in that storage and the view's size:
 * each backend builds its own ABI from it (the CPU backend storage->ptr +
 * offset, CUDA the device address + offset, OpenCL the cl_mem and the
 * offset). 24 bytes, so that a launch of four arguments fits a queue cell. */
typedef union cube__launch_arg {
  struct {
    const cube__storage_t* storage;
    uint64_t offset; /* bytes from storage->ptr to the view */
    uint64_t len;    /* bytes in the view */
  } buffer;
  uint32_t u32;
  int32_t i32;
  uint64_t u64;
  int64_t i64;
  float f32;
  double f64;
} cube__launch_arg_t;

/* The host address of a buffer argument on a backend with
 * CUBE__CAP_HOST_MEMORY. */
static inline void* cube__launch_arg_host_ptr(const cube__launch_arg_t* a) {
  return (char*)a->buffer.storage->ptr + a->buffer.offset;
}

/* A compiled kernel's own limits on a device (the kernel_limits slot). */
typedef struct cube__kernel_limits {
  uint32_t max_units;        /* units per cube it can run; 0: the device's max_units_per_cube */
  uint64_t local_memory;     /* cube-local (shared) bytes it uses */
  uint64_t max_local_memory; /* cube-local bytes the device gives a cube; 0: not known */
} cube__kernel_limits_t;

/* One launch. */
typedef struct cube__launch {
  const cube_kernel_t* kernel;
  const char* name;
  uint32_t count[3]; /* static, or read from the dynamic buffer; no zero component */
  cube_dim_t dim;
  cube_execution_mode_t mode;
  uint32_t arg_count;
  const cube_arg_kind_t* kinds;   /* arg_count entries: the kernel's signature */
  const cube__launch_arg_t* args; /* arg_count entries */
  /* Non-NULL when the launch is profiled: a backend that can time the kernel
   * where it runs (device timestamps) stores its duration here, once the
   * kernel finished; left at UINT64_MAX, the server's host clock is used. */
  uint64_t* device_ns;
  /* The launch is timed by the backend's activity records (activity_begin
   * said yes for kernels on this stream): a record of it is to come. */
  bool activity;
  /* Its place in the stream's order of timed work (trace.h), 0: none; a
   * backend whose activity records go into the trace gives it to them. */
  uint64_t trace_order;
} cube__launch_t;

/* Native graphs (the graph_* slots): a recorded sequence the backend runs as
 * one unit of its own (CUDA: a CUgraphExec). Nodes run in order, each after
 * the one before. */
typedef enum cube__graph_node_kind {
  CUBE__GRAPH_NODE_KERNEL = 0, /* launch: a static count, not Validate mode */
  CUBE__GRAPH_NODE_WRITE = 1,  /* write: host bytes into device storage */
  CUBE__GRAPH_NODE_COPY = 2,   /* copy: device storage into device storage, 1-D */
} cube__graph_node_kind_t;

/* A node of a native graph that failed while graph_launch ran it: |status|
 * (owned by the callee) as its launch, write or copy would have failed. */
typedef void (*cube__graph_node_failed_fn)(void* user, size_t node, cube_status_t status);

typedef struct cube__graph_node_desc {
  cube__graph_node_kind_t kind;
  /* KERNEL: as for the launch slot (device_ns NULL); its arguments' values
   * are copied by graph_create and graph_update. */
  cube__launch_t launch;
  /* WRITE: |height| rows of |width| bytes from |src| (packed) into |dst| at
   * |dst_offset|, |pitch| bytes apart. |src| stays valid and unchanged for
   * the graph's life (the server's graph owns the bytes). */
  const cube__storage_t* dst;
  uint64_t dst_offset, pitch, width, height;
  const void* src;
  /* COPY: |width| bytes (|height| 1, |pitch| |width|) from |src_storage| at
   * |src_offset| into |dst| at |dst_offset|, both of this device. The two
   * ranges never overlap (the server refuses such copies, and never hands
   * the backend a copy of a view onto itself). */
  const cube__storage_t* src_storage;
  uint64_t src_offset;
} cube__graph_node_desc_t;

/* One kernel or copy as the driver recorded it (activity_take): start and
 * end on the host clock (cube__now_ns), the cube count or bytes, a name. */
typedef enum cube__activity_kind {
  CUBE__ACTIVITY_KERNEL = 0,
  CUBE__ACTIVITY_COPY = 1, /* a copy between two buffers of the device (the copy slot) */
} cube__activity_kind_t;

typedef struct cube__activity_record {
  uint32_t kind; /* cube__activity_kind_t */
  bool traced;   /* the backend put it into the trace already */
  uint64_t bytes; /* a copy's */
  uint64_t start_ns;
  uint64_t end_ns;
  uint32_t count[3]; /* a kernel's cube count */
  char name[80];
} cube__activity_record_t;

//===----------------------------------------------------------------------===//
// Capabilities and control operations
//===----------------------------------------------------------------------===//

/* What the layers above test about a backend (never its identity). */
enum {
  /* Storage pointers are host memory that any thread may read and write. */
  CUBE__CAP_HOST_MEMORY = 1u << 0,
  /* Uploads into a fresh buffer may run on the calling thread: |write| is
   * thread-safe against the runner using the same stream, and orders the copy
   * after the work that stream was given before (a device stream). */
  CUBE__CAP_CALLER_WRITES = 1u << 1,
  /* Runs native kernels (cube_cpu_kernel_fn); reported to users as
   * CUBE_FEATURE_NATIVE_KERNELS. */
  CUBE__CAP_NATIVE_KERNELS = 1u << 2,
  /* Device ids are global across MPI ranks (index = rank * local devices +
   * local index), so one communicator spans processes (the host transport). */
  CUBE__CAP_GLOBAL_IDS_UNDER_MPI = 1u << 3,
  /* Device ids are global whenever the job has several processes, with or
   * without MPI (the transport reaches other processes itself: NCCL). */
  CUBE__CAP_GLOBAL_IDS_MULTIPROCESS = 1u << 4,
};

/* Operations of the ctl slot: native handles for code that must talk to the
 * device's own API (the NCCL transport), without including the backend's
 * internal headers. A backend answers the operations it has and returns
 * UNIMPLEMENTED for the others. */
typedef enum cube__backend_ctl_op {
  /* arg: void** <- the device's native context (CUDA: its primary CUcontext). */
  CUBE__CTL_NATIVE_CONTEXT = 1,
  /* arg: uint32_t* <- the device's ordinal in its driver (CUDA: the CUdevice). */
  CUBE__CTL_NATIVE_ORDINAL = 2,
  /* |stream| given; arg: void** <- its native stream (CUDA: the CUstream). */
  CUBE__CTL_NATIVE_STREAM = 3,
  /* arg: cube__backend_proc_fn* <- a function resolving the driver's entry
   * points by name at the ABI the backend uses (CUDA: cuGetProcAddress at
   * version 12000); NULL answers mean "absent". */
  CUBE__CTL_DRIVER_PROC = 4,
  /* DLPack (src/client/dlpack.c). arg: int32_t[3] <- the device as DLPack
   * names it: its DLDeviceType (kDLCPU 1, kDLCUDA 2, kDLOpenCL 4), device_id,
   * and 1 when storage pointers are handles rather than addresses (OpenCL's
   * cl_mem: a DLPack tensor then carries the handle and a byte offset), else
   * 0. UNIMPLEMENTED: the backend's memory cannot be exchanged. */
  CUBE__CTL_DLPACK_DEVICE = 5,
  /* |stream| given; arg: void** -> a native stream of the device's own API
   * (CUDA: a CUstream, 0x1 and 0x2 the legacy and per-thread default
   * streams): makes it wait for the work given to |stream| so far, without
   * waiting on the host (CUDA: an event recorded on |stream| and
   * cuStreamWaitEvent). UNIMPLEMENTED where the backend has no native
   * streams: the caller then syncs |stream|. */
  CUBE__CTL_ORDER_NATIVE_STREAM = 6,
  /* arg: cube__backend_external_t* -> whether memory someone else allocated
   * (a DLPack tensor) can be storage of this device: CUBE_OK, filling in
   * |storage| (ptr, size, backend_data; the id is the caller's), or a status
   * naming why not (another device, memory the device cannot address).
   * Thread-safe. UNIMPLEMENTED: the backend imports nothing. */
  CUBE__CTL_EXTERNAL_STORAGE = 7,
  /* arg: cube__backend_text_t* <- the device's identity, "<name> | <architecture> |
   * <driver>" in the backend's words: what keys tuning results and what a
   * bundle must match (CPU: the processor, its features and the C compiler;
   * OpenCL: platform, device, driver and versions; CUDA: the GPU, sm_XY, the
   * driver and NVRTC versions). Thread-safe. UNIMPLEMENTED: the server uses
   * the device's name and the backend's version. */
  CUBE__CTL_DEVICE_IDENTITY = 8,
  /* arg: cube__backend_memory_info_t* <- the device memory the driver
   * reports as used, and what the backend knows it holds outside the pools
   * (the memory ledger, cube_client_memory_ledger). Thread-safe.
   * UNIMPLEMENTED: the driver reports nothing (CPU, OpenCL). */
  CUBE__CTL_MEMORY_INFO = 9,
  /* arg: uint64_t* <- the granule in which the device maps memory, to which
   * fitted pools round their storage (docs/observability.md, "Memory that
   * is not wasted"). Thread-safe. UNIMPLEMENTED: the server's default
   * (64 KiB). */
  CUBE__CTL_MEMORY_GRANULE = 10,
  /* arg: NULL. The device is lost (a slot returned CUBE_STATUS_DEVICE_LOST):
   * the wrappers call no other slot of it from now on except device_destroy,
   * stream_destroy and graph_destroy, which must then free the backend's
   * host-side state without calling its driver about the device (that would
   * hang or fail again); device memory, pinned memory and events are left to
   * the driver. Sent once, by the wrapper that saw the status,
   * on that thread. UNIMPLEMENTED: nothing to do. */
  CUBE__CTL_DEVICE_LOST = 11,
  /* arg: NULL. Recovery of a lost device (cube_device_recover): the
   * server has destroyed every stream and graph of it (host side only) and
   * dropped the bookkeeping of its storage; the backend now resets the
   * driver's state of the device (CUDA: cuDevicePrimaryCtxReset, which
   * frees every allocation of the context, pinned ones included), forgets
   * what it held in it (staging ring, modules and functions: kernels load
   * again on next use) and makes the device usable again, on the same
   * device object. Sent by cube__backend_reset only, with the device to
   * the caller (nothing else calls the backend about it meanwhile).
   * UNIMPLEMENTED: the backend cannot recover a device. */
  CUBE__CTL_DEVICE_RESET = 12,
} cube__backend_ctl_op_t;

/* The argument of CUBE__CTL_MEMORY_INFO. */
typedef struct cube__backend_memory_info {
  uint64_t used;    /* the driver's figure for the whole device (CUDA: total - free) */
  uint64_t total;
  uint64_t context; /* used when the device was opened (the context, and whatever else was
                       there then), plus the backend's own device buffers */
  uint64_t modules; /* bytes of the module images loaded now */
} cube__backend_memory_info_t;

/* A text answer of ctl: the backend writes at most |size| bytes (with the
 * NUL) into |buf|. */
typedef struct cube__backend_text {
  char* buf;
  size_t size;
} cube__backend_text_t;

/* The argument of CUBE__CTL_EXTERNAL_STORAGE. */
typedef struct cube__backend_external {
  int32_t dl_device_type; /* the tensor's DLDeviceType */
  int32_t dl_device_id;
  void* ptr;              /* the first byte of the range (data + byte_offset + lowest element) */
  uint64_t size;          /* bytes of the range */
  cube__storage_t storage; /* out */
} cube__backend_external_t;

typedef void* (*cube__backend_proc_fn)(const char* name);

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

typedef struct cube__backend_vtable {
  uint32_t api_version; /* CUBE__BACKEND_API_VERSION */
  cube_backend_t backend;
  const char* name;     /* "cpu": messages, fault-site names, traces */
  uint32_t caps;        /* CUBE__CAP_* */
  /* The dialect target whose units this backend compiles (its prelude and
   * entry emitter, src/kernel/dialect.h). */
  cube__target_t dialect_target;
  /* Collective transports in order of preference, NULL-terminated ids of
   * src/collective's transports ("host", "staged", "nccl"); the first that
   * is available in this process is used. NULL: "host" with
   * CUBE__CAP_HOST_MEMORY, else "staged" (device memory through host
   * buffers, over read and write). */
  const char* const* collective_transports;

  /* Required -------------------------------------------------------------- */

  /* CUBE_OK or UNAVAILABLE with the reason (driver absent...). */
  cube_status_t (*availability)(void);
  /* Devices the backend has (0 when unavailable). */
  uint32_t (*device_count)(void);

  /* Opens device |index| with the server's resolved |options|; fills its
   * properties, features and info. */
  cube_status_t (*device_create)(uint32_t index, const cube_server_options_t* options,
                                 cube__backend_device_t** out_device,
                                 cube_device_properties_t* out_props,
                                 cube_features_t* out_features, cube_backend_info_t* out_info);
  void (*device_destroy)(cube__backend_device_t* device);

  /* Device storage. Thread-safe. No room -> CUBE_STATUS_OUT_OF_MEMORY.
   * dealloc (and dealloc_on, with stream NULL) must accept device NULL: it is
   * called so, after device_destroy, for device memory that views lent out
   * (DLPack exports) kept past cube_shutdown. */
  cube_status_t (*alloc)(cube__backend_device_t* device, uint64_t size, cube__storage_t* out);
  void (*dealloc)(cube__backend_device_t* device, const cube__storage_t* storage);

  /* Copies between host memory and device storage, rows of |width| bytes:
   * |height| rows, |pitch| bytes apart on the device, packed on the host. */
  cube_status_t (*write)(cube__backend_device_t* device, void* stream, const cube__storage_t* dst,
                         uint64_t dst_offset, uint64_t pitch, const void* src, uint64_t width,
                         uint64_t height);
  cube_status_t (*read)(cube__backend_device_t* device, void* stream, void* dst,
                        const cube__storage_t* src, uint64_t src_offset, uint64_t pitch,
                        uint64_t width, uint64_t height);

  /* Runs a kernel (compiling it on first use). A failure of the kernel
   * itself is LAUNCH_FAILED (now, or at the next sync). */
  cube_status_t (*launch)(cube__backend_device_t* device, void* stream, const cube__launch_t* l);

  /* Optional (NULL when the backend has no such thing; backend.c says what
   * the wrapper does then) ------------------------------------------------ */

  /* Pinned host staging storage (NULL: none; the server then has no pinned
   * pools). host_dealloc must accept device NULL: it is called so, after
   * device_destroy, for staging buffers (read results) the caller kept past
   * cube_shutdown. */
  cube_status_t (*host_alloc)(cube__backend_device_t* device, uint64_t size,
                              cube__storage_t* out);
  void (*host_dealloc)(cube__backend_device_t* device, const cube__storage_t* storage);

  /* Per logical stream state (NULL: the stream has none, *out NULL). */
  cube_status_t (*stream_create)(cube__backend_device_t* device, uint64_t stream_id,
                                 void** out_stream);
  void (*stream_destroy)(cube__backend_device_t* device, void* stream);

  /* Compiles |kernel| for |mode| if it is not yet (dialect kernels; a no-op
   * for native ones). Thread-safe; used by cube_client_precompile and,
   * implicitly, by the first launch. NULL: nothing to compile ahead. */
  cube_status_t (*prepare)(cube__backend_device_t* device, const cube_kernel_t* kernel,
                           cube_execution_mode_t mode);
  /* Compiles |kernel| for |mode| as prepare does and fills |out| with what
   * only the compiled kernel tells (OpenCL's CL_KERNEL_WORK_GROUP_SIZE and
   * CL_KERNEL_LOCAL_MEM_SIZE, CUDA's CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
   * so that the launching call refuses a launch beyond them instead of the
   * stream failing later. Thread-safe; called on the launching thread for
   * every launch of a dialect kernel (after the first, a lookup). NULL: the
   * device's properties are all the limits (nothing is compiled at launch). */
  cube_status_t (*kernel_limits)(cube__backend_device_t* device, const cube_kernel_t* kernel,
                                 cube_execution_mode_t mode, cube__kernel_limits_t* out);

  /* Waits for everything queued on |stream|. NULL: work is done when the
   * slot that queued it returns. */
  cube_status_t (*sync)(cube__backend_device_t* device, void* stream);

  /* Stream-ordered device storage: used instead of alloc/dealloc when set.
   * dealloc_on is called with the stream that allocated the storage; the
   * work of other streams on it has completed by then (the server holds
   * cross-stream uses until their events completed). */
  cube_status_t (*alloc_on)(cube__backend_device_t* device, void* stream, uint64_t size,
                            cube__storage_t* out);
  void (*dealloc_on)(cube__backend_device_t* device, void* stream, const cube__storage_t* storage);
  /* Gives cached driver memory back after a cleanup (runs on the caller of
   * memory_cleanup). */
  void (*trim)(cube__backend_device_t* device, void* stream);

  /* Events: a point in a stream's work. With them the server orders a buffer
   * that crosses streams (wait) and keeps it alive until the other stream's
   * work on it has completed (query/synchronize). A backend has all of
   * event_record, event_wait, event_done, event_sync and event_destroy, or
   * none; event_elapsed is optional on its own. */
  cube_status_t (*event_record)(cube__backend_device_t* device, void* stream, void** out_event);
  /* Makes |stream| wait for |event| (recorded on another stream). */
  cube_status_t (*event_wait)(cube__backend_device_t* device, void* stream, void* event);
  /* True once |event| completed (or failed: the failure surfaces at sync). */
  bool (*event_done)(cube__backend_device_t* device, void* event);
  /* Blocks until |event| completed. */
  cube_status_t (*event_sync)(cube__backend_device_t* device, void* event);
  void (*event_destroy)(cube__backend_device_t* device, void* event);
  /* Device time between two completed events, in nanoseconds. */
  cube_status_t (*event_elapsed)(cube__backend_device_t* device, void* start, void* end,
                                 uint64_t* out_ns);

  /* Native graphs: all four or none (the server then replays a graph's
   * nodes through launch and write). graph_create builds and instantiates
   * |count| nodes into *out_graph (UNIMPLEMENTED: this graph cannot be native,
   * e.g. a node kind the device cannot record; the server then replays the
   * list). graph_update replaces node |index|'s parameters (the same kind and
   * kernel; arguments, storage and offsets may change) for the launches after
   * the call; launches already queued keep theirs (UNIMPLEMENTED: this node
   * cannot be updated in place; the server then destroys the graph and
   * creates it again with the new parameters). graph_launch queues the
   * whole graph on |stream|; a backend that runs the nodes before it returns
   * (the CPU) gives each node that fails to |node_failed| (the status is the
   * callee's) and runs on with the next node, as separate launches would,
   * then returns OK; its own failure to launch at all is returned. Not
   * thread-safe on one graph: the server holds the graph's lock around
   * update + launch. */
  cube_status_t (*graph_create)(cube__backend_device_t* device,
                                const cube__graph_node_desc_t* nodes, size_t count,
                                void** out_graph);
  cube_status_t (*graph_update)(cube__backend_device_t* device, void* graph, size_t index,
                                const cube__graph_node_desc_t* node);
  cube_status_t (*graph_launch)(cube__backend_device_t* device, void* stream, void* graph,
                                cube__graph_node_failed_fn node_failed, void* user);
  void (*graph_destroy)(cube__backend_device_t* device, void* graph);

  /* The escape hatch: answers |op| (cube__backend_ctl_op_t) with |arg|;
   * |stream| is NULL for device-level operations. UNIMPLEMENTED for an
   * operation the backend does not know. */
  cube_status_t (*ctl)(cube__backend_device_t* device, void* stream, uint32_t op, void* arg);

  /* Version 3 ------------------------------------------------------------ */

  /* Copies |bytes| from |src| at |src_offset| into |dst| at |dst_offset|,
   * both storage of this device, ordered on |stream| after the work it was
   * given before (asynchronous where the device is: the copy may still run
   * when the slot returns). The two ranges never overlap: the server refuses
   * overlapping views and runs nothing for a view copied onto itself. NULL:
   * the wrapper reads the bytes into a host buffer and writes them from it,
   * in pieces (correct, and slower: every byte crosses to the host and back). */
  cube_status_t (*copy)(cube__backend_device_t* device, void* stream, const cube__storage_t* dst,
                        uint64_t dst_offset, const cube__storage_t* src, uint64_t src_offset,
                        uint64_t bytes);

  /* Version 5 ------------------------------------------------------------ */

  /* Activity records: the driver's own record of each kernel's (and each
   * copy's, the copy slot's) start and end on the device (CUDA: CUPTI), kept
   * in the background with nothing
   * put on the stream, so that timing every launch costs the launch next to
   * nothing (docs/observability.md). Both or neither.
   *
   * activity_begin: true when every kernel launched (|kind|
   * CUBE__ACTIVITY_KERNEL) or every copy made (CUBE__ACTIVITY_COPY) on
   * |stream| from now on will have a record (for copies a backend may arm
   * only the next one: the server asks before each; for kernels the answer
   * holds until the backend changes cube__activity_epoch, below, and the
   * server does not ask again before then) (the backend starts recording if it was not, and
   * learns the stream); false when the backend cannot (the driver's tool
   * library absent or taken by another tool): the server then brackets the
   * launch with events. |keep|: the device's profile summary wants records
   * for as long as the device lives (else only while a trace records).
   * Owner thread of |stream|.
   *
   * A backend may put each record into the trace itself, as the records
   * come (CUDA: cube__trace_emit from its collector), and say so in the
   * record (|traced|); the server then takes it for the summary only.
   *
   * activity_take: moves up to |max| completed records of |stream| into
   * |out|, oldest first, and returns how many; |flush|: the driver's
   * buffers are emptied first (after a sync: every kernel before it is
   * there). Owner thread of |stream|. */
  bool (*activity_begin)(cube__backend_device_t* device, void* stream, uint32_t kind, bool keep);
  size_t (*activity_take)(cube__backend_device_t* device, void* stream, bool flush,
                          cube__activity_record_t* out, size_t max);

  /* Version 6 ------------------------------------------------------------ */

  /* A write (as the write slot) whose source is held by |owner|: |src| lies
   * in |owner|'s data, which stays valid while |owner| is referenced, and
   * nobody changes those bytes (the server's own copy, or bytes handed to it
   * with cube_client_create). The backend may take a reference
   * (cube_bytes_retain) and return before the device has read the source,
   * without copying it; it releases that reference once the write completed
   * (or failed), on the thread where it learns so (the runner, or its
   * stream_destroy). The caller's own reference is released by the caller
   * after the call. Ordering, checks and statuses are write's; a failure the
   * driver reports after the slot returned is returned by the next sync of
   * |stream| (the server's taint of the buffer then follows from the sync's
   * status, as for a launch). NULL: the wrapper calls write (which reads the
   * source before it returns, or copies it). Fault site and trace: write's. */
  cube_status_t (*write_held)(cube__backend_device_t* device, void* stream,
                              const cube__storage_t* dst, uint64_t dst_offset, uint64_t pitch,
                              const void* src, uint64_t width, uint64_t height,
                              cube_bytes_t* owner);
} cube__backend_vtable_t;

//===----------------------------------------------------------------------===//
// The registry (src/backends/registry.c)
//===----------------------------------------------------------------------===//

/* The table of |backend|, or NULL if it is not compiled in (or out of range).
 * Thread-safe. */
const cube__backend_vtable_t* cube__backend_get(cube_backend_t backend);

/* CUBE_OK when |vt| is a table this library can use: the API version it was
 * built for and every required slot present; else UNAVAILABLE naming the
 * backend and what is wrong. */
cube_status_t cube__backend_validate(const cube__backend_vtable_t* vt);

/* The first compiled-in backend with all of |caps| (CUBE_BACKEND_NONE if
 * none), for code that needs "the backend whose devices do X". */
cube_backend_t cube__backend_with_caps(uint32_t caps);

/* The process-wide device count of |backend| (0 when unavailable). */
uint32_t cube__backend_device_count(cube_backend_t backend);

//===----------------------------------------------------------------------===//
// Calling a backend: the only callers of the table (src/backends/backend.c)
//===----------------------------------------------------------------------===//

/* What made a device lost: the first status of code CUBE_STATUS_DEVICE_LOST
 * that one of its slots returned (a backend returns that code for a fault
 * that poisons the device: CUDA's context-fatal errors, docs/failures.md
 * "Lost devices"). Made once, read-only afterwards, freed with the device. */
typedef struct cube__backend_loss {
  cube_status_t root;      /* the slot's own status (NULL in the orphans' marker) */
  int slot;                /* the cube__backend_slot_t that returned it */
  char when[32];           /* UTC, microseconds */
  struct cube__backend_loss* next; /* the losses of the device that a recovery ended */
} cube__backend_loss_t;

/* A backend device as the layers above hold it. */
typedef struct cube__backend {
  const cube__backend_vtable_t* vt;
  cube__backend_device_t* device; /* NULL before device_create, and for host_dealloc of orphans */
  uint32_t index;                 /* the device's index in its backend */
  /* NULL while the device works; set once, by the wrapper that first sees a
   * DEVICE_LOST status, and never cleared while the device lives. */
  _Atomic(cube__backend_loss_t*) loss;
  /* The records of losses that recoveries ended (cube__backend_found): kept
   * until the device is destroyed, so that a thread still formatting a
   * status from one never reads freed memory. Written by the recovery only. */
  cube__backend_loss_t* ended;
} cube__backend_t;

/* True once the device is lost: one relaxed load (the layers above test it
 * at their entries; every wrapper tests it before calling its slot). */
static inline bool cube__backend_lost(const cube__backend_t* be) {
  return atomic_load_explicit(&be->loss, memory_order_relaxed) != NULL;
}

/* The DEVICE_LOST status of a call on a lost device: "<what>: <backend>:<index>
 * is lost: its <slot> failed at <time>: <the root's message>; ...". |what|
 * NULL: no prefix. Thread-safe. */
cube_status_t cube__backend_lost_status(const cube__backend_t* be, const char* what);

/* The table-only copy of |be| that frees memory kept past the device's
 * destruction (device NULL): marked lost when |be| is, so that memory of a
 * lost device is never handed to its driver. */
cube__backend_t cube__backend_orphan(const cube__backend_t* be);

/* Recovery of a lost device (src/server/recover.c), with the device to the
 * caller: these call the backend's slots although the device is lost (every
 * other wrapper refuses then), untraced and without fault sites.
 *
 * cube__backend_reset: CUBE__CTL_DEVICE_RESET (backend.h); UNIMPLEMENTED
 * naming the backend when it cannot recover a device.
 * cube__backend_renew: new storage of |storage->size| bytes (on |stream|
 * where the backend allocates on streams) replaces |storage|'s ptr and
 * backend_data; its id and size stay.
 * cube__backend_restore: writes |bytes| from |src| at |offset| of |dst| and
 * waits for |stream|.
 * cube__backend_stream_renew: a new backend stream for stream |id|.
 * cube__backend_found: the device works again: its loss record is ended
 * (kept until the device is destroyed) and the wrappers call it again. */
cube_status_t cube__backend_reset(cube__backend_t* be);
cube_status_t cube__backend_renew(const cube__backend_t* be, void* stream,
                                  cube__storage_t* storage);
cube_status_t cube__backend_restore(const cube__backend_t* be, void* stream,
                                    const cube__storage_t* dst, uint64_t offset, const void* src,
                                    uint64_t bytes);
cube_status_t cube__backend_stream_renew(const cube__backend_t* be, uint64_t id, void** out);
void cube__backend_found(cube__backend_t* be);

/* The slots, for fault sites and traces: the fallible ones first, in the
 * order of their fault sites (base/fault.h: "<backend>_<slot>"), then those
 * that cannot fail. */
#define CUBE__BACKEND_INFALLIBLE_SLOTS(X) \
  X(DEALLOC, dealloc)                     \
  X(HOST_DEALLOC, host_dealloc)           \
  X(STREAM_DESTROY, stream_destroy)       \
  X(TRIM, trim)                           \
  X(EVENT_DONE, event_done)               \
  X(EVENT_DESTROY, event_destroy)         \
  X(GRAPH_DESTROY, graph_destroy)         \
  X(DEVICE_DESTROY, device_destroy)       \
  X(ACTIVITY_BEGIN, activity_begin)       \
  X(ACTIVITY_TAKE, activity_take)

typedef enum cube__backend_slot {
#define CUBE__SLOT_ENUM(id, name) CUBE__SLOT_##id,
  CUBE__FAULT_BACKEND_SLOTS(CUBE__SLOT_ENUM)
  CUBE__BACKEND_INFALLIBLE_SLOTS(CUBE__SLOT_ENUM)
#undef CUBE__SLOT_ENUM
  CUBE__SLOT_COUNT
} cube__backend_slot_t;

/* The slots below this one return a status and have a fault site. */
#define CUBE__SLOT_FALLIBLE CUBE__FAULT_SLOT_COUNT

/* "alloc", "write" ... */
const char* cube__backend_slot_name(cube__backend_slot_t slot);

/* Trace points: when a hook is set, every wrapper calls it before the slot
 * (status -1) and after it (the status code). One relaxed load when unset. */
typedef struct cube__backend_call {
  const char* backend;     /* "cpu" */
  uint32_t device;         /* the device's index */
  cube__backend_slot_t slot;
  int status;              /* -1 before the call; the cube_status_code_t after */
} cube__backend_call_t;
typedef void (*cube__backend_trace_fn)(void* user, const cube__backend_call_t* call);
/* Sets (or clears, with NULL) the hook. Not for concurrent use with calls. */
void cube__backend_set_trace(cube__backend_trace_fn fn, void* user);

cube_status_t cube__backend_device_create(cube__backend_t* be, cube_backend_t backend,
                                          uint32_t index, const cube_server_options_t* options,
                                          cube_device_properties_t* out_props,
                                          cube_features_t* out_features,
                                          cube_backend_info_t* out_info);
void cube__backend_device_destroy(cube__backend_t* be);

/* Device storage: alloc_on/dealloc_on on |stream| where the backend has them. */
cube_status_t cube__backend_alloc(const cube__backend_t* be, void* stream, uint64_t size,
                                  cube__storage_t* out);
void cube__backend_dealloc(const cube__backend_t* be, void* stream,
                           const cube__storage_t* storage);
/* Pinned host storage: UNIMPLEMENTED without it. */
static inline bool cube__backend_has_host_storage(const cube__backend_t* be) {
  return be->vt->host_alloc != NULL && be->vt->host_dealloc != NULL;
}
cube_status_t cube__backend_host_alloc(const cube__backend_t* be, uint64_t size,
                                       cube__storage_t* out);
void cube__backend_host_dealloc(const cube__backend_t* be, const cube__storage_t* storage);

cube_status_t cube__backend_stream_create(const cube__backend_t* be, uint64_t stream_id,
                                          void** out_stream);
void cube__backend_stream_destroy(const cube__backend_t* be, void* stream);

cube_status_t cube__backend_write(const cube__backend_t* be, void* stream,
                                  const cube__storage_t* dst, uint64_t dst_offset, uint64_t pitch,
                                  const void* src, uint64_t width, uint64_t height);
/* A write whose source |owner| holds (the write_held slot, backend.h); with
 * |owner| NULL or without the slot, cube__backend_write. |owner| stays the
 * caller's: the backend takes its own reference if it keeps the source. */
cube_status_t cube__backend_write_held(const cube__backend_t* be, void* stream,
                                       const cube__storage_t* dst, uint64_t dst_offset,
                                       uint64_t pitch, const void* src, uint64_t width,
                                       uint64_t height, cube_bytes_t* owner);
static inline bool cube__backend_has_write_held(const cube__backend_t* be) {
  return be->vt->write_held != NULL;
}
cube_status_t cube__backend_read(const cube__backend_t* be, void* stream, void* dst,
                                 const cube__storage_t* src, uint64_t src_offset, uint64_t pitch,
                                 uint64_t width, uint64_t height);
cube_status_t cube__backend_launch(const cube__backend_t* be, void* stream,
                                   const cube__launch_t* launch);
/* A copy between two storages of the device on |stream| (the copy slot); without
 * the slot, through a host buffer of at most CUBE__BACKEND_COPY_BOUNCE bytes
 * (a read, then a write, per piece: their own fault sites and traces are hit
 * too). Overlapping ranges are the caller's to refuse. */
#define CUBE__BACKEND_COPY_BOUNCE ((uint64_t)4 << 20)
cube_status_t cube__backend_copy(const cube__backend_t* be, void* stream,
                                 const cube__storage_t* dst, uint64_t dst_offset,
                                 const cube__storage_t* src, uint64_t src_offset, uint64_t bytes);
static inline bool cube__backend_has_copy(const cube__backend_t* be) {
  return be->vt->copy != NULL;
}
/* CUBE_OK without a prepare slot. */
cube_status_t cube__backend_prepare(const cube__backend_t* be, const cube_kernel_t* kernel,
                                    cube_execution_mode_t mode);
static inline bool cube__backend_has_prepare(const cube__backend_t* be) {
  return be->vt->prepare != NULL;
}
/* The compiled kernel's limits (the fault site is prepare's: it compiles).
 * Without the slot, *out is all zero and nothing is compiled. */
cube_status_t cube__backend_kernel_limits(const cube__backend_t* be, const cube_kernel_t* kernel,
                                          cube_execution_mode_t mode, cube__kernel_limits_t* out);
static inline bool cube__backend_has_kernel_limits(const cube__backend_t* be) {
  return be->vt->kernel_limits != NULL;
}
/* CUBE_OK without a sync slot. */
cube_status_t cube__backend_sync(const cube__backend_t* be, void* stream);
/* Nothing without a trim slot. */
void cube__backend_trim(const cube__backend_t* be, void* stream);

/* Events: cube__backend_has_events is false without them, and then the
 * server never calls the others (which return UNIMPLEMENTED / true). */
static inline bool cube__backend_has_events(const cube__backend_t* be) {
  return be->vt->event_record != NULL;
}
static inline bool cube__backend_has_event_timing(const cube__backend_t* be) {
  return be->vt->event_record != NULL && be->vt->event_elapsed != NULL;
}
cube_status_t cube__backend_event_record(const cube__backend_t* be, void* stream,
                                         void** out_event);
cube_status_t cube__backend_event_wait(const cube__backend_t* be, void* stream, void* event);
bool cube__backend_event_done(const cube__backend_t* be, void* event);
cube_status_t cube__backend_event_sync(const cube__backend_t* be, void* event);
void cube__backend_event_destroy(const cube__backend_t* be, void* event);
cube_status_t cube__backend_event_elapsed(const cube__backend_t* be, void* start, void* end,
                                          uint64_t* out_ns);

/* Native graphs: cube__backend_has_graphs is false without the slots, and
 * then the server never calls the others (UNIMPLEMENTED / nothing). */
static inline bool cube__backend_has_graphs(const cube__backend_t* be) {
  return be->vt->graph_create != NULL;
}
cube_status_t cube__backend_graph_create(const cube__backend_t* be,
                                         const cube__graph_node_desc_t* nodes, size_t count,
                                         void** out_graph);
cube_status_t cube__backend_graph_update(const cube__backend_t* be, void* graph, size_t index,
                                         const cube__graph_node_desc_t* node);
cube_status_t cube__backend_graph_launch(const cube__backend_t* be, void* stream, void* graph,
                                         cube__graph_node_failed_fn node_failed, void* user);
void cube__backend_graph_destroy(const cube__backend_t* be, void* graph);

/* Kernel activity records: false / 0 without the slots. */
static inline bool cube__backend_has_activity(const cube__backend_t* be) {
  return be->vt->activity_begin != NULL && be->vt->activity_take != NULL;
}
bool cube__backend_activity_begin(const cube__backend_t* be, void* stream, uint32_t kind,
                                  bool keep);
size_t cube__backend_activity_take(const cube__backend_t* be, void* stream, bool flush,
                                   cube__activity_record_t* out, size_t max);

/* Changed (cube__activity_epoch_bump) by a backend whenever an
 * activity_begin for kernels that said true may say otherwise now: its
 * records went off, a stream or device of it went away, a device's clock is
 * to be measured again. Until it changes, the server takes a stream's
 * earlier true (with the same or a weaker |keep|) as still true and does not
 * ask before each timed launch (server/timing.c): the backend's launch then
 * finds its records on, or leaves the launch untimed as it would have done
 * anyway. Any thread; one word for the process. */
extern atomic_uint_fast64_t cube__activity_epoch;
static inline void cube__activity_epoch_bump(void) {
  atomic_fetch_add_explicit(&cube__activity_epoch, 1, memory_order_acq_rel);
}

/* UNIMPLEMENTED (naming the backend and the operation) without a ctl slot or
 * for an operation the backend does not answer. */
cube_status_t cube__backend_ctl(const cube__backend_t* be, void* stream, uint32_t op, void* arg);

//===----------------------------------------------------------------------===//
// The tables compiled in (each backend's folder)
//===----------------------------------------------------------------------===//

/* Set (on the calling thread) by cube_device_recover around the opening of
 * a device it has no server of: a device that fails to open with
 * DEVICE_LOST (its context was poisoned before a cube_shutdown) may then be
 * reset by its backend and opened again (CUDA: cuDevicePrimaryCtxReset, as
 * CUBE__CTL_DEVICE_RESET does). Never set otherwise: opening a device does
 * not reset a context behind the program's back. */
extern _Thread_local bool cube__backend_open_may_reset;

extern const cube__backend_vtable_t cube__backend_cpu;
extern const cube__backend_vtable_t cube__backend_null;
extern const cube__backend_vtable_t cube__backend_cuda;
extern const cube__backend_vtable_t cube__backend_opencl;

#endif /* CUBE_BACKENDS_BACKEND_H_ */
