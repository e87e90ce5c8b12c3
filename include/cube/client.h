/* cube/client.h: the compute client, one C function per method of CubeCL's
 * ComputeClient (reference §1.3, §1.4). docs/api-map.md maps each CubeCL
 * method to its function here.
 *
 * Model. One server per device, created on first use and shared by every
 * client of that device. A client is a cheap reference-counted facade: the
 * server plus an optional pinned stream. Work is submitted to the device's
 * queue (a runner thread by default; "inline" runs it on the calling thread
 * under the device lock) and runs in submission order per stream.
 *
 * Streams. By default every calling thread is its own logical stream, with
 * its own memory pools and error list (reference §6.1). cube_client_set_stream
 * pins a client to a stream. A handle may be used on any stream of its device.
 *
 * Errors. Bad input is reported at once by the call. Failures of work that
 * already left the caller (a launch, a write) are deferred to the stream and
 * returned together by the next cube_client_flush, cube_client_sync or read on
 * that stream, which then clears them (reference §2.6).
 *
 * Threading. Every function here is thread-safe unless it says otherwise.
 * Arguments are borrowed for the call; "consumed" says where ownership moves.
 */
#ifndef CUBE_CLIENT_H_
#define CUBE_CLIENT_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube/bytes.h"
#include "cube/collective.h"
#include "cube/device.h"
#include "cube/handle.h"
#include "cube/kernel.h"
#include "cube/memory.h"
#include "cube/profile.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cube_client_s cube_client_t;
typedef struct cube_future_s cube_future_t;
typedef struct cube_resource_s cube_resource_t;

typedef uint64_t cube_stream_id_t;

/* Server options ----------------------------------------------------------- */

typedef enum cube_queue_mode_e {
  CUBE_QUEUE_DEFAULT = 0,  /* CUBE_DEVICE_QUEUE, else threaded */
  CUBE_QUEUE_THREADED = 1, /* a runner thread fed by a lock-free queue */
  CUBE_QUEUE_INLINE = 2,   /* run on the caller's thread under the device lock */
} cube_queue_mode_t;

typedef enum cube_memory_config_e {
  CUBE_MEMORY_CONFIG_SUBSLICES = 0,      /* reference §4.5 default ladder */
  CUBE_MEMORY_CONFIG_EXCLUSIVE_PAGES = 1,
} cube_memory_config_t;

typedef enum cube_check_mode_e {
  CUBE_CHECK_AUTO = 0,     /* launch_unchecked runs Unchecked */
  CUBE_CHECK_ENFORCE = 1,  /* launch_unchecked runs Checked */
  CUBE_CHECK_VALIDATE = 2, /* launch_unchecked runs Validate */
} cube_check_mode_t;

typedef struct cube_server_options {
  cube_queue_mode_t queue_mode;
  cube_profile_level_t profile_level; /* CUBE_PROFILE when left NONE */
  cube_memory_config_t memory_config;
  cube_check_mode_t check_mode;       /* CUBE_CHECK_MODE when left AUTO */
  uint64_t memory_limit;              /* bytes; 0 = CUBE_MEMORY_LIMIT or none */
  uint32_t max_streams;               /* 0 = CUBE_MAX_STREAMS or 128 */
  cube_log_fn log_fn;                 /* NULL = CUBE_LOG_FILE or stderr */
  void* log_user;
} cube_server_options_t;

/* Fills |options| with defaults (all zero: take the environment). */
void cube_server_options_initialize(cube_server_options_t* options);

/* Clients ------------------------------------------------------------------- */

/* CubeCL's load: a client of |device|, creating its server on first use
 * (exactly once, even under contention) with default options. Fails with
 * NOT_FOUND for a device index out of range, UNAVAILABLE for an absent
 * backend. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_load(cube_device_id_t device,
                                                    cube_client_t** out_client);

/* CubeCL's init: creates the server of |device| with |options| (NULL =
 * defaults) and returns a client. ALREADY_EXISTS if the device already has a
 * server. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_init(cube_device_id_t device,
                                                    const cube_server_options_t* options,
                                                    cube_client_t** out_client);

/* A new client of the same server with the same pinned stream (Clone). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_clone(cube_client_t* client,
                                                     cube_client_t** out_client);
cube_client_t* cube_client_retain(cube_client_t* client);
void cube_client_release(cube_client_t* client);

cube_device_id_t cube_client_device(const cube_client_t* client);
const cube_backend_info_t* cube_client_info(const cube_client_t* client);
const cube_device_properties_t* cube_client_properties(const cube_client_t* client);
const cube_features_t* cube_client_features(const cube_client_t* client);
/* True if the device queue runs work on the calling thread (inline mode). */
bool cube_client_is_blocking(const cube_client_t* client);

/* Streams ------------------------------------------------------------------- */

/* The calling thread's stream id (assigned on first use, 0, 1, 2 ...). */
cube_stream_id_t cube_stream_current(void);
/* A fresh stream id that no thread uses by default. */
cube_stream_id_t cube_stream_create_id(void);

/* Pins this client (not its clones made earlier) to |stream|. Owner thread
 * only: do not call while another thread uses the same client object. */
void cube_client_set_stream(cube_client_t* client, cube_stream_id_t stream);
/* Back to "the calling thread's stream". Owner thread only. */
void cube_client_unset_stream(cube_client_t* client);
/* The stream a call on this client would use now. */
cube_stream_id_t cube_client_stream(const cube_client_t* client);

/* Creating memory ------------------------------------------------------------ */

/* A 1-D buffer holding a copy of |data| (|size| > 0 bytes). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_create_from_slice(cube_client_t* client,
                                                                 const void* data, size_t size,
                                                                 cube_handle_t* out_handle);

/* A 1-D buffer from |bytes| (consumed, also on failure). FILE buffers are
 * copied out of their file (into pinned staging memory where the device has
 * some, else host memory) before upload; a file that shrank since it was
 * mapped fails the call with OUT_OF_RANGE naming the path and the sizes
 * (cube/bytes.h). The same holds for every create from cube_bytes_t. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_create(cube_client_t* client, cube_bytes_t* bytes,
                                                      cube_handle_t* out_handle);

/* A tensor with the Optimized strategy; |size| must equal
 * prod(shape) * elem_size (the data is contiguous row-major). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_create_tensor_from_slice(
    cube_client_t* client, const void* data, size_t size, uint32_t rank, const uint64_t* shape,
    uint32_t elem_size, cube_tensor_t* out_tensor);

/* As above from |bytes| (consumed). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_create_tensor(cube_client_t* client,
                                                             cube_bytes_t* bytes, uint32_t rank,
                                                             const uint64_t* shape,
                                                             uint32_t elem_size,
                                                             cube_tensor_t* out_tensor);

/* |count| tensors packed into one buffer (each at an aligned offset). data[i]
 * holds sizes[i] == prod(shape_i) * elem_size_i contiguous bytes. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_create_tensors_from_slices(
    cube_client_t* client, size_t count, const cube_layout_desc_t* descs,
    const void* const* data, const size_t* sizes, cube_tensor_t* out_tensors);

/* As above from |bytes| (all consumed). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_create_tensors(cube_client_t* client, size_t count,
                                                              const cube_layout_desc_t* descs,
                                                              cube_bytes_t* const* bytes,
                                                              cube_tensor_t* out_tensors);

/* |count| pinned staging buffers of |sizes| (CubeCL's reserve_staging): never
 * fails for want of pinned memory; falls back to zeroed NATIVE buffers. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_reserve_staging(cube_client_t* client,
                                                               size_t count, const size_t* sizes,
                                                               cube_bytes_t** out_bytes);

/* create_from_slice through a pinned staging buffer. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_create_from_slice_pinned(
    cube_client_t* client, const void* data, size_t size, cube_handle_t* out_handle);

/* create_tensors_from_slices through pinned staging buffers. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_create_tensors_from_slices_pinned(
    cube_client_t* client, size_t count, const cube_layout_desc_t* descs,
    const void* const* data, const size_t* sizes, cube_tensor_t* out_tensors);

/* Replaces eligible entries of |inout_bytes| in place with pinned buffers
 * holding the same content (the old buffer is released). Eligible: FILE
 * always; NATIVE and OTHER only if !file_only; PINNED never. If the device
 * has no staging memory, does nothing and returns CUBE_OK (as CubeCL). A FILE
 * buffer whose file shrank since it was mapped is an OUT_OF_RANGE error
 * naming the entry, the path and the sizes; the entries before it have been
 * replaced, it and those after are as they were (still the caller's). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_staging(cube_client_t* client, size_t count,
                                                       cube_bytes_t** inout_bytes,
                                                       bool file_only);

/* An uninitialised 1-D buffer of |size| > 0 bytes: reused slices keep old
 * data; fresh pages read as zero on the CPU and hold whatever the driver gave
 * on GPUs (as CubeCL: no memset is paid for). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_empty(cube_client_t* client, size_t size,
                                                     cube_handle_t* out_handle);

CUBE_MUST_USE_RESULT cube_status_t cube_client_empty_tensor(cube_client_t* client, uint32_t rank,
                                                            const uint64_t* shape,
                                                            uint32_t elem_size,
                                                            cube_tensor_t* out_tensor);

CUBE_MUST_USE_RESULT cube_status_t cube_client_empty_tensors(cube_client_t* client, size_t count,
                                                             const cube_layout_desc_t* descs,
                                                             cube_tensor_t* out_tensors);

/* Reading memory ------------------------------------------------------------- */

/* Reads every handle (its whole view) into new host buffers, after all work
 * queued before on the stream. Returns the stream's deferred errors if any
 * (and then writes nothing). out_bytes[i] is owned by the caller. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_read(cube_client_t* client, size_t count,
                                                    const cube_handle_t* handles,
                                                    cube_bytes_t** out_bytes);

/* As cube_client_read but returns at once with a future. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_read_async(cube_client_t* client, size_t count,
                                                          const cube_handle_t* handles,
                                                          cube_future_t** out_future);

CUBE_MUST_USE_RESULT cube_status_t cube_client_read_one(cube_client_t* client,
                                                        cube_handle_t handle,
                                                        cube_bytes_t** out_bytes);

/* Reads the whole view of |handle| into the caller's memory |dst| (|dst_size|
 * bytes, which must equal the view's size) after all work queued before on
 * the stream, and returns once the bytes are there. On a GPU, ordinary
 * (pageable) memory is filled through cube's pinned staging ring, the host
 * copies of a large read spread over several threads. Returns the stream's
 * deferred errors if any, and then writes nothing; a transfer that fails
 * midway may leave |dst| partly written. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_read_into(cube_client_t* client,
                                                         cube_handle_t handle, void* dst,
                                                         size_t dst_size);

/* Strided reads: each tensor's strides must be ones the runtime produces
 * (contiguous; pitched on the last dim where the device pitches); the result
 * is the dense row-major content, prod(shape)*elem_size bytes. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_read_tensor(cube_client_t* client, size_t count,
                                                           const cube_tensor_t* tensors,
                                                           cube_bytes_t** out_bytes);
CUBE_MUST_USE_RESULT cube_status_t cube_client_read_tensor_async(cube_client_t* client,
                                                                 size_t count,
                                                                 const cube_tensor_t* tensors,
                                                                 cube_future_t** out_future);

/* Futures: the result of an asynchronous read or sync. ---------------------- */

/* Waits at most |timeout_ns| (UINT64_MAX = forever) for |future|. On success
 * moves the results into |out_bytes| (future_count entries; NULL for a sync
 * future) -- a second wait after success returns FAILED_PRECONDITION. On
 * timeout returns DEADLINE_EXCEEDED and the future stays usable. Failures of
 * the work (deferred stream errors) are returned here. */
CUBE_MUST_USE_RESULT cube_status_t cube_future_wait(cube_future_t* future, uint64_t timeout_ns,
                                                    cube_bytes_t** out_bytes);
/* True once the result is ready (wait will not block). */
bool cube_future_is_ready(const cube_future_t* future);
size_t cube_future_count(const cube_future_t* future);
/* Releases the future; pending results are discarded when they arrive. */
void cube_future_release(cube_future_t* future);

/* Resources -------------------------------------------------------------- */

/* The backend resource behind |handle| (CPU: a host pointer). The resource
 * keeps the memory alive until released; no synchronisation is implied. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_get_resource(cube_client_t* client,
                                                            cube_handle_t handle,
                                                            cube_resource_t** out_resource);
void* cube_resource_ptr(const cube_resource_t* resource);     /* host or device address */
uint64_t cube_resource_size(const cube_resource_t* resource); /* bytes of the view */
void cube_resource_release(cube_resource_t* resource);

/* Exclusive access and allocation modes -------------------------------------- */

typedef cube_status_t (*cube_task_fn)(void* user);

/* Runs |fn| with the device to itself (on the runner thread in threaded
 * mode, under the device lock in inline mode): no other thread's work
 * interleaves, and cube calls on this device made inside |fn| run at once
 * (they do not deadlock). Returns |fn|'s status. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_exclusive(cube_client_t* client, cube_task_fn fn,
                                                         void* user);

/* Sets the calling stream's allocation mode. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_allocation_mode(cube_client_t* client,
                                                               cube_allocation_mode_t mode);

/* Runs |fn| on the calling thread with the calling thread's stream in
 * Persistent mode, then back to Auto (also when |fn| fails). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_persistent_allocation(cube_client_t* client,
                                                                            cube_task_fn fn,
                                                                            void* user);

/* Memory accounting ------------------------------------------------------ */

/* Frees the calling stream's fully free pages, free exclusive pages and free
 * persistent buffers back to the backend. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_cleanup(cube_client_t* client);

/* Usage of the calling stream's pools. FAILED_PRECONDITION while the stream
 * has deferred errors (as CubeCL). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_usage(cube_client_t* client,
                                                            cube_memory_usage_t* out_usage);

/* Per-pool report of the calling stream (pages, largest free block, peak). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_report(cube_client_t* client,
                                                             cube_memory_report_t* out_report);

/* Usage summed over every stream of the device, and cleanup of every stream.
 * (CubeCL after the reference commit aggregates this way.) */
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_usage_device(cube_client_t* client,
                                                                   cube_memory_usage_t* out_usage);
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_cleanup_device(cube_client_t* client);

/* Launch ----------------------------------------------------------------- */

/* Queues |kernel| over |count| cubes with |args| in Checked mode. Argument
 * count and kinds, buffers smaller than one element of their CUBE_ARRAY's
 * type, and the cube dim and cube-local memory against the device are
 * checked at once (on OpenCL and CUDA also against the compiled kernel's own
 * limits: the kernel is compiled here first, and a compile error is this
 * call's); failures while it runs are deferred to the stream. A static count
 * with a zero component launches nothing. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_launch(cube_client_t* client, cube_kernel_t* kernel,
                                                      cube_count_t count, size_t arg_count,
                                                      const cube_arg_t* args);

/* As launch, in the mode of the server's check mode (auto = Unchecked). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_launch_unchecked(cube_client_t* client,
                                                                cube_kernel_t* kernel,
                                                                cube_count_t count,
                                                                size_t arg_count,
                                                                const cube_arg_t* args);

/* As launch, in an explicit mode. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_launch_mode(cube_client_t* client,
                                                           cube_kernel_t* kernel,
                                                           cube_count_t count, size_t arg_count,
                                                           const cube_arg_t* args,
                                                           cube_execution_mode_t mode);

/* Compiles dialect |kernels| for the client's device in |mode| now (the kernel
 * cache keeps them, in memory and on disk), so that their first launch does
 * not pay for it; compile errors are returned here. Native kernels need
 * nothing. */
CUBE_MUST_USE_RESULT cube_status_t cube_kernel_precompile(cube_client_t* client, size_t count,
                                                          cube_kernel_t* const* kernels,
                                                          cube_execution_mode_t mode);

/* Synchronisation -------------------------------------------------------- */

/* Pushes queued work to the device and returns (and clears) the stream's
 * deferred errors. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_flush(cube_client_t* client);

/* Waits for every piece of work queued on the calling stream, returns (and
 * clears) its deferred errors, and prints the profile summary when a profile
 * level >= basic is set. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_sync(cube_client_t* client);

/* As sync, returning a future to wait on. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_sync_async(cube_client_t* client,
                                                          cube_future_t** out_future);

/* Profiling ---------------------------------------------------------------- */

/* Runs |fn| with the device to itself between two synchronisations of the
 * stream and returns how long it took in |out_duration|. A launch that fails
 * inside |fn| is reported here (LAUNCH_FAILED) instead of on the stream.
 * |name| labels the measurement in the profile log (may be NULL). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_profile(cube_client_t* client, cube_task_fn fn,
                                                       void* user, const char* name,
                                                       cube_profile_duration_t* out_duration);

/* The server's profile level. */
cube_profile_level_t cube_client_profile_level(const cube_client_t* client);

/* Vector sizes ----------------------------------------------------------- */

/* Powers of two from max = min(max_vector_size, load_width / (elem_size*8))
 * down to 1, written to |out_sizes| (capacity |capacity|). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_io_optimized_vector_sizes(
    const cube_client_t* client, uint32_t elem_size, uint32_t* out_sizes, size_t capacity,
    size_t* out_count);

/* Moving data between devices -------------------------------------------- */

/* Copies |handle|'s content (on |src|'s device) into a new handle on |dst|'s
 * device. Backends without a transport read on src and write on dst. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_to_client(cube_client_t* src, cube_handle_t handle,
                                                         cube_client_t* dst,
                                                         cube_handle_t* out_handle);

/* Same for a tensor: the result has the layout |dst| prefers. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_to_client_tensor(cube_client_t* src,
                                                                const cube_tensor_t* tensor,
                                                                cube_client_t* dst,
                                                                cube_tensor_t* out_tensor);

/* Collectives ------------------------------------------------------------ */
/*
 * Model (docs/collectives.md). A collective over a set of devices is called
 * once per participating device, each through a client of that device, from
 * any threads (one thread for all is fine). Each call only queues its part on
 * its device's stream, after the work queued before it, and returns: the
 * operation happens once every participant's part has run (on the CPU: the
 * last participant to arrive performs it for all). cube_client_sync_collective
 * then orders the stream's later work after the collectives it queued before.
 * Read dst only after it; src must not change until then.
 *
 * Devices. A communicator is keyed by the sorted set of device ids, so any
 * order of the same set is the same communicator. Every participant must list
 * the same set and call the operations of one communicator in the same order.
 * Under MPI (one process per rank, docs/collectives.md) device ids are
 * global: cpu:g is local CPU device g % L of rank g / L, L being
 * CUBE_CPU_DEVICES (the same on every rank); without MPI global = local.
 *
 * Errors. Bad input returns at once. What is found when the parts meet (sizes,
 * element types or ops that differ between participants) and timeouts are
 * deferred to each participant's stream, returned by its next flush, sync or
 * read after cube_client_sync_collective. A participant waits at most
 * CUBE_COLLECTIVE_TIMEOUT seconds (default 60) for the others; then the
 * operation fails with DEADLINE_EXCEEDED naming the devices (and ranks) that
 * did not join, on every participant, and the clients stay usable.
 *
 * Threading: every function here is thread-safe; in inline queue mode the
 * sync_collective wait runs on the calling thread, so queue every
 * participant's part before any sync_collective when one thread drives
 * several devices.
 */

/* Sets up the communicator of |devices| (idempotent; any order of the same set
 * is the same communicator). The client's device must be in the set.
 * UNIMPLEMENTED on backends without a collective transport. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_ensure_init_collective(
    cube_client_t* client, size_t device_count, const cube_device_id_t* devices);

/* Makes the calling stream's later work wait for the collectives this client's
 * stream queued before (their failures go to the stream's deferred errors).
 * Returns at once in threaded mode. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_sync_collective(cube_client_t* client);

/* Reduces |src| over |devices| into |dst| with |op|: every participant's dst
 * gets op(src of every participant). src and dst view the same number of
 * bytes, a multiple of dtype's size; dst may be src (in place). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_all_reduce(cube_client_t* client, cube_handle_t src,
                                                          cube_handle_t dst, cube_dtype_t dtype,
                                                          size_t device_count,
                                                          const cube_device_id_t* devices,
                                                          cube_reduce_op_t op);

/* Point to point (beyond the reference's server-only send/recv): the k-th
 * send from device A to device B meets the k-th recv on B from A, which
 * copies the whole view of |src| into the whole view of |dst| (same size, else
 * both fail). |peer| may be the client's own device. Ordered and synchronised
 * as the collectives above (cube_client_sync_collective). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_send(cube_client_t* client, cube_handle_t src,
                                                    cube_device_id_t peer);
CUBE_MUST_USE_RESULT cube_status_t cube_client_recv(cube_client_t* client, cube_handle_t dst,
                                                    cube_device_id_t peer);

/* The profile record of the last collective this client's device completed
 * (bytes, participants, time, algbw, busbw). NOT_FOUND before the first. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_last_collective(
    const cube_client_t* client, cube_collective_record_t* out_record);

/* This process's place under MPI: its rank and the number of ranks (0 and 1
 * without MPI), and L, the CPU devices per rank. Starts MPI when the process
 * was launched by mpirun and cube was built with MPI. */
CUBE_MUST_USE_RESULT cube_status_t cube_collective_world(uint32_t* out_rank, uint32_t* out_ranks,
                                                         uint32_t* out_local_devices);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_CLIENT_H_ */
