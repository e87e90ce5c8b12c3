/* cube/client.h: the compute client, one C function per method of CubeCL's
 * ComputeClient (docs/cubecl.md, the "Client:" sections). docs/api-map.md maps each CubeCL
 * method to its function here. The client's collective operations are in
 * cube/collective.h, its resources in cube/resource.h, the futures its
 * asynchronous calls return in cube/future.h and its server options in
 * cube/options.h; cube/cube.h includes them all.
 *
 * Model. One server per device, created on first use and shared by every
 * client of that device. A client is a cheap reference-counted facade: the
 * server plus an optional pinned stream. Work is submitted to the device's
 * queue (a runner thread by default; "inline" runs it on the calling thread
 * under the device lock) and runs in submission order per stream.
 *
 * Streams. By default every calling thread is its own logical stream, with
 * its own memory pools and error list (docs/cubecl.md, "Streams"). cube_client_set_stream
 * pins a client to a stream. A handle may be used on any stream of its device.
 *
 * Errors. Bad input is reported at once by the call. Failures of work that
 * already left the caller (a launch, a write, a copy) are deferred to the
 * stream and returned together by the next cube_client_flush,
 * cube_client_sync or read on that stream, which then clears them
 * (docs/cubecl.md, "Deferred errors").
 *
 * Failures every client call shares, not repeated below: INVALID_ARGUMENT
 * for a NULL client or a NULL out_ parameter (named in the message),
 * FAILED_PRECONDITION for a client made before cube_shutdown (load a new
 * one), OUT_OF_MEMORY when host memory for the call's own bookkeeping runs
 * out, INVALID_ARGUMENT for a handle of another device and NOT_FOUND for a
 * released handle (naming the argument), and the backend's failure to
 * create the calling stream on its first use ("creating stream N: ...").
 * Device memory that runs out is OUT_OF_MEMORY with a memory report
 * (cube_status_oom_report). DEVICE_LOST once the client's device hit a fault
 * that poisons it (a CUDA kernel's illegal address, a launch timeout, an
 * uncorrectable ECC error): from then on every call here that returns a
 * status fails at once with it, naming the call, the device and the first
 * fault, without reaching the driver; work queued before fails with it too
 * (its futures complete; the buffers it would have written are spoiled).
 * What still works on such a device: releasing handles, tensors, futures,
 * byte buffers and clients, the accessors that return no status, and
 * cube_shutdown; other devices are not affected (docs/failures.md, "Lost
 * devices").
 *
 * Ownership. What a call creates (clients, handles, tensors, futures, byte
 * buffers) is the caller's, released with its _release. Arguments are
 * borrowed for the call; "consumed" says where ownership moves (also on
 * failure). A handle passed to queued work is kept alive by that work.
 *
 * Threading. Every function here is thread-safe unless it says otherwise, and
 * a client may be used from several threads at once (each then works on its
 * own stream unless the client is pinned).
 */
#ifndef CUBE_CLIENT_H_
#define CUBE_CLIENT_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube/bytes.h"
#include "cube/device.h"
#include "cube/future.h"
#include "cube/handle.h"
#include "cube/kernel.h"
#include "cube/memory.h"
#include "cube/options.h"
#include "cube/profile.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cube_client_s cube_client_t;

typedef uint64_t cube_stream_id_t;

/* Clients ------------------------------------------------------------------- */

/* CubeCL's load: a client of |device| (owned by the caller), creating its
 * server on first use (exactly once, even under contention) with default
 * options. Fails with INVALID_ARGUMENT for a backend value that is not one,
 * NOT_FOUND for a device index out of range, UNAVAILABLE for an absent
 * backend or driver, or the failure of creating the server (the device's
 * own error, a malformed environment variable: INVALID_ARGUMENT). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_load(cube_device_id_t device,
                                                    cube_client_t** out_client);

/* CubeCL's init: creates the server of |device| with |options| (NULL =
 * defaults; an input struct, see cube/options.h) and returns a client.
 * Fails as cube_client_load, and with ALREADY_EXISTS if the device already
 * has a server, INVALID_ARGUMENT for an option enum out of range,
 * UNSUPPORTED for an options->struct_size this library does not know. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_init(cube_device_id_t device,
                                                    const cube_server_options_t* options,
                                                    cube_client_t** out_client);

/* A new client (owned by the caller) of the same server with the same pinned
 * stream (Clone); later set_stream calls on either do not affect the other. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_clone(cube_client_t* client,
                                                     cube_client_t** out_client);

/* Adds a reference to the same client object (pinned stream shared) and
 * returns |client| (NULL returns NULL). */
cube_client_t* cube_client_retain(cube_client_t* client);

/* Drops a reference; the last frees the client object (the server stays
 * until cube_shutdown). NULL accepted. */
void cube_client_release(cube_client_t* client);

/* The client's device; {CUBE_BACKEND_NONE, 0} for NULL and for a client from
 * before cube_shutdown. */
cube_device_id_t cube_client_device(const cube_client_t* client);

/* The server's backend information, device properties and features. The
 * pointers are into the server, shared by every client of the device, and
 * valid until the server is destroyed by cube_shutdown (not by releasing the
 * client); the structs never change. NULL for NULL and for a client from
 * before cube_shutdown. Their struct_size is the library's (a program built
 * against a newer header checks it before reading newer fields). */
const cube_backend_info_t* cube_client_info(const cube_client_t* client);
const cube_device_properties_t* cube_client_properties(const cube_client_t* client);
const cube_features_t* cube_client_features(const cube_client_t* client);

/* True if the device queue runs work on the calling thread (inline mode);
 * false for NULL and a dead client. */
bool cube_client_is_blocking(const cube_client_t* client);

/* The identity of the client's device, "<backend> | <name> | <architecture> |
 * <driver>" in the backend's words (CPU: the processor model, its features
 * and the C compiler kernels are built with; OpenCL: platform, device, driver
 * and OpenCL versions; CUDA: the GPU, sm_XY, the driver and NVRTC versions),
 * into |out| (at most |size| bytes with the NUL; a longer identity is cut).
 * Tuning results and bundles are keyed by it: two machines whose devices
 * give the same string share them. Fails with INVALID_ARGUMENT for a NULL
 * |out| or a |size| of 0. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_device_identity(cube_client_t* client, char* out,
                                                               size_t size);

/* Streams ------------------------------------------------------------------- */

/* The calling thread's stream id (assigned on first use, 0, 1, 2 ...); it
 * stays the thread's for the thread's life. */
cube_stream_id_t cube_stream_current(void);

/* A stream id that no thread has by default, drawn from the same counter as
 * the threads' ids, for cube_client_set_stream. Nothing is created: the
 * stream comes into being on each device when a client pinned to it is
 * first used there. */
cube_stream_id_t cube_stream_id_new(void);

/* Deprecated: cube_stream_id_new (the old name claimed to create a stream). */
CUBE_DEPRECATED("use cube_stream_id_new")
cube_stream_id_t cube_stream_create_id(void);

/* Pins this client (not its clones made earlier) to |stream|. NULL is
 * ignored. Not thread-safe for this client object: do not call while
 * another thread uses the same client (clone it for that thread first). */
void cube_client_set_stream(cube_client_t* client, cube_stream_id_t stream);

/* Back to "the calling thread's stream". Same restriction as set_stream. */
void cube_client_unset_stream(cube_client_t* client);

/* The stream a call on this client would use now (0 for NULL). */
cube_stream_id_t cube_client_stream(const cube_client_t* client);

/* Creating memory ------------------------------------------------------------ */

/* Creating memory queues the upload and returns: the data has been copied
 * out of the caller's memory when the call returns (the caller may reuse
 * it), and a failure of the upload on the device is deferred to the stream.
 * Sizes past the device's largest single allocation (properties
 * memory.max_page_size) are INVALID_ARGUMENT; device memory that runs out is
 * OUT_OF_MEMORY with a report. The handles and tensors made are the
 * caller's. */

/* A 1-D buffer holding a copy of |data| (|size| > 0 bytes). Fails with
 * INVALID_ARGUMENT for NULL data or size 0. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_create_from_slice(cube_client_t* client,
                                                                 const void* data, size_t size,
                                                                 cube_handle_t* out_handle);

/* A 1-D buffer from |bytes| (consumed, also on failure; INVALID_ARGUMENT for
 * NULL or empty bytes). FILE buffers are
 * copied out of their file (into pinned staging memory where the device has
 * some, else host memory) before upload; a file that shrank since it was
 * mapped fails the call with OUT_OF_RANGE naming the path and the sizes
 * (cube/bytes.h). The same holds for every create from cube_bytes_t. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_create(cube_client_t* client, cube_bytes_t* bytes,
                                                      cube_handle_t* out_handle);

/* A tensor with the Optimized strategy; |size| must equal
 * prod(shape) * elem_size (the data is contiguous row-major). Fails with
 * INVALID_ARGUMENT for NULL data, a NULL shape with rank > 0, a rank, shape
 * or elem_size that cube_layout_desc_initialize refuses, or a size that
 * differs from what the shape needs. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_create_tensor_from_slice(
    cube_client_t* client, const void* data, size_t size, uint32_t rank, const uint64_t* shape,
    uint32_t elem_size, cube_tensor_t* out_tensor);

/* As above from |bytes| (consumed, also on failure). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_create_tensor(cube_client_t* client,
                                                             cube_bytes_t* bytes, uint32_t rank,
                                                             const uint64_t* shape,
                                                             uint32_t elem_size,
                                                             cube_tensor_t* out_tensor);

/* |count| tensors packed into one buffer (each at an aligned offset); they
 * share the buffer (cube/handle.h). data[i] holds sizes[i] ==
 * prod(shape_i) * elem_size_i contiguous bytes. |descs| is an array of input
 * structs (cube_layout_desc_t: one struct_size for all). Fails with
 * INVALID_ARGUMENT for NULL arrays or entries, a refused descriptor (naming
 * descs[i]) or a size mismatch (naming data[i]); UNSUPPORTED for a
 * struct_size this library does not know; out_tensors is written only on
 * success. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_create_tensors_from_slices(
    cube_client_t* client, size_t count, const cube_layout_desc_t* descs,
    const void* const* data, const size_t* sizes, cube_tensor_t* out_tensors);

/* As above from |bytes| (every entry consumed, also on failure). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_create_tensors(cube_client_t* client, size_t count,
                                                              const cube_layout_desc_t* descs,
                                                              cube_bytes_t* const* bytes,
                                                              cube_tensor_t* out_tensors);

/* |count| pinned staging buffers of |sizes| written to out_bytes[0..count)
 * (CubeCL's reserve_staging), owned by the caller: never fails for want of
 * pinned memory; falls back to zeroed NATIVE buffers. count 0 does nothing.
 * Fails with INVALID_ARGUMENT for NULL sizes or out_bytes, OUT_OF_MEMORY when
 * not even host memory is left (the buffers made before are released). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_reserve_staging(cube_client_t* client,
                                                               size_t count, const size_t* sizes,
                                                               cube_bytes_t** out_bytes);

/* create_from_slice through a pinned staging buffer (faster uploads on GPUs);
 * fails as cube_client_create_from_slice. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_create_from_slice_pinned(
    cube_client_t* client, const void* data, size_t size, cube_handle_t* out_handle);

/* create_tensors_from_slices through pinned staging buffers; fails as
 * cube_client_create_tensors_from_slices. */
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
 * on GPUs (as CubeCL: no memset is paid for). Fails with INVALID_ARGUMENT for
 * size 0 or beyond max_page_size, OUT_OF_MEMORY with a report. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_empty(cube_client_t* client, size_t size,
                                                     cube_handle_t* out_handle);

/* An uninitialised tensor (Optimized strategy) of |shape|; fails as
 * cube_client_create_tensor_from_slice for the shape, as cube_client_empty
 * for the size. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_empty_tensor(cube_client_t* client, uint32_t rank,
                                                            const uint64_t* shape,
                                                            uint32_t elem_size,
                                                            cube_tensor_t* out_tensor);

/* |count| uninitialised tensors packed into one buffer; |descs| and the
 * failures as cube_client_create_tensors_from_slices. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_empty_tensors(cube_client_t* client, size_t count,
                                                             const cube_layout_desc_t* descs,
                                                             cube_tensor_t* out_tensors);

/* Writing memory ------------------------------------------------------------- */

/* Writes |size| bytes from |data| into the buffer of |handle| (its whole
 * view), ordered on the client's stream as CubeCL's write is: work queued on
 * the stream before the call sees the old contents, work queued after it the
 * new ones, so a buffer's inputs can be refreshed between launches without a
 * new allocation. On a backend with events (CUDA, OpenCL) the write also
 * waits for the buffer's last use on another stream. |data| is copied before
 * the call returns: the caller may reuse it at once. Thread-safe. A view of 0 bytes
 * with |size| 0 writes nothing. Fails at once with INVALID_ARGUMENT (a NULL
 * client, a |size| that is not the view's size, NULL |data| with a non-zero
 * size, a handle of another device), NOT_FOUND (a released handle),
 * OUT_OF_MEMORY (no host memory for the copy); a failure of the write itself
 * (a device fault) is deferred to the stream, as a launch's is. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_write(cube_client_t* client, cube_handle_t handle,
                                                     const void* data, size_t size);

/* As cube_client_write for a tensor: |data| holds its elements densely packed
 * in row-major order (the product of the shape times elem_size bytes, which
 * |size| must be), written into the tensor's layout (rows at its pitch on a
 * pitched layout, as cube_client_create_tensor_from_slice lays them out).
 * Also INVALID_ARGUMENT for a NULL |tensor|, a rank, shape or element size
 * that cube_layout_desc_initialize refuses, or a shape its handle's view is
 * too small for; UNSUPPORTED for strides the device does not produce. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_write_tensor(cube_client_t* client,
                                                            const cube_tensor_t* tensor,
                                                            const void* data, size_t size);

/* Copies the whole view of |src| into the whole view of |dst| on the
 * device, both handles of the client's device and views of one size. The
 * copy is ordered on the client's stream as a write is: work queued before
 * the call sees dst's old contents and src's contents as that work leaves
 * them, work queued after it sees the copy; on a backend with events (CUDA,
 * OpenCL) it also waits for each buffer's last use on another stream. It returns
 * once the copy is queued (the bytes never reach the host where the device
 * copies them itself: CUDA, OpenCL), and a failure of the copy on the device
 * is deferred to the stream, as a launch's is. The handles stay the
 * caller's (the queued copy keeps both buffers alive: they may be released
 * at once). On a capturing stream the copy is recorded (cube/graph.h).
 * Thread-safe.
 *
 * Views of one buffer (cube_handle_offset_view, packed tensors) may be
 * copied into each other when they do not overlap. The same view as src
 * and dst (one handle twice, or two handles of one view) is a copy that
 * changes nothing: nothing is queued or captured. Views of 0 bytes copy
 * nothing.
 *
 * Fails at once with INVALID_ARGUMENT (a NULL client, a null handle, a
 * handle of another device, views whose sizes differ (both sizes named),
 * views of one buffer that overlap without being the same), NOT_FOUND (a
 * released handle, named "src" or "dst"), OUT_OF_MEMORY (no host memory for
 * the queued record). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_copy(cube_client_t* client, cube_handle_t src,
                                                    cube_handle_t dst);

/* Buffers whose contents a failure spoiled ------------------------------------
 *
 * A launch, write or copy that fails leaves the buffers it should have
 * written without valid contents: they are tainted (docs/failures.md).
 * Later work that uses a tainted buffer is not run and taints what it would
 * have written; a read of a tainted buffer returns CUBE_STATUS_DATA_LOST
 * naming the failure (its work, stream and time) and the work not run
 * because of it (the first 8 named, all counted); the distinct failures
 * behind one read are joined in one status (cube_status_count). A write or
 * copy that succeeds over the whole buffer makes it valid again. Taint is
 * per buffer: the views of one buffer (cube_handle_offset_view, packed
 * tensors) share it. A launch's buffers are all taken as written except
 * those marked read-only (cube_kernel_desc_t.read_only_args, the dialect's
 * CUBE_ARRAY(const T, x)). cube_client_get_resource hands out the memory as
 * it is, without this check; a DLPack export refuses a spoiled buffer as a
 * read does where it is ordered (cube/dlpack.h). */

/* Declares the contents of the buffer of |handle| valid as they are: the
 * taint a failure left on it is dropped, so that reads return its bytes
 * again (what a failed kernel left there: for a program that inspects or
 * repairs them itself). Ordered on the client's stream as a write is: work
 * queued before the call still sees the taint. Thread-safe. Fails at once
 * with INVALID_ARGUMENT (a NULL client, a handle of another device),
 * NOT_FOUND (a released handle), FAILED_PRECONDITION on a capturing stream
 * (a capture does not record it). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_accept_contents(cube_client_t* client,
                                                               cube_handle_t handle);

/* Recovery (docs/failures.md, "Recovery") ------------------------------------ */

/* Recovers |device| after it was lost (calls on it returned DEVICE_LOST):
 * once the work queued before has run (it fails with DEVICE_LOST), the
 * device's context is reset and made again (CUDA: cuDevicePrimaryCtxReset),
 * with its streams, pools and staging; kernels load again on their next
 * launch. Every handle of the device stays valid and gets new device memory
 * at once: a restorable buffer (cube_client_checkpoint,
 * cube_client_create_restorable) holds its host copy again, bit for bit;
 * every other one holds nothing valid, and a read of it returns DATA_LOST
 * naming the device's first fault (a full write or copy into it makes it
 * valid again, as after any failure). The deferred errors of the device's
 * streams from before are dropped. A graph captured before holds objects of
 * the old context: its native replay fails on the device (the replay call
 * queues it; the stream then reports FAILED_PRECONDITION, capture it again,
 * and what its nodes write is spoiled by that one failure), while a replay
 * that goes node by node (a graph over a spoiled buffer, cube/graph.h) runs
 * as eager work would. Then the same
 * process runs new work on the device as before. A device that is not lost
 * (also one recovered meanwhile by another thread, and a device of a
 * backend that never loses one) returns CUBE_OK at once, doing nothing.
 * Thread-safe: calls of other threads on the device during the recovery
 * return DEVICE_LOST (an upload that met the loss after its call's own
 * check: deferred to its stream, its buffer DATA_LOST), or wait and run
 * after it; the recovery first waits for uploads and cleanups that other
 * threads began before the loss. Fails, the device staying
 * lost, with FAILED_PRECONDITION while the program still holds pinned
 * memory of the device (read results, staging buffers: the reset would
 * free it under the program; release them and call again), UNIMPLEMENTED
 * naming the backend where it cannot reset a device, and the driver's
 * failure to reset (DEVICE_LOST again when the GPU itself is gone: then
 * only a new process, or a reset of the GPU, helps), or DEVICE_LOST when
 * the new context faults during the recovery (call again); a restorable buffer
 * that could not be written back fails the call with that failure after
 * the device recovered (that buffer reads as DATA_LOST). Fails as
 * cube_client_load for a device that does not exist. After cube_shutdown a
 * device lost before it fails to load (DEVICE_LOST); this call then opens
 * it, resetting its context when the open meets the old fault, and it loads
 * again. With
 * CUBE_DEVICE_RECOVER=auto (cube/options.h) the first call that finds a
 * device lost recovers it itself. */
CUBE_MUST_USE_RESULT cube_status_t cube_device_recover(cube_device_id_t device);

/* Makes the buffer of |handle| restorable: a host copy of its contents (the
 * whole buffer, whatever part of it |handle| views) is taken now, after the
 * work queued before on the stream, and a recovery of the device writes it
 * back (cube_device_recover). A later call replaces the copy; the copy goes
 * with the buffer. Costs a read of the buffer (with the device to itself)
 * and host memory of its size. Thread-safe. Fails with the read's failure
 * (DATA_LOST for a buffer with no valid contents: the copy before, if any,
 * stays), OUT_OF_MEMORY for the host copy, and at once as every call here. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_checkpoint(cube_client_t* client,
                                                          cube_handle_t handle);

/* As cube_client_create_from_slice, and the buffer is restorable from
 * |data| (copied: the caller keeps |data|), its contents until a
 * cube_client_checkpoint replaces them. The host copy is kept before the
 * upload, so a recovery of the device by another thread at any moment of
 * the call leaves a buffer whose creation succeeded with |data|. Fails as
 * cube_client_create_from_slice, and with OUT_OF_MEMORY for the host copy
 * (then no handle is made). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_create_restorable(cube_client_t* client,
                                                                 const void* data, size_t size,
                                                                 cube_handle_t* out_handle);

/* Copies the host copy of a restorable buffer (what a recovery would write
 * back: the upload of cube_client_create_restorable or the last
 * cube_client_checkpoint), the part |handle| views, into new host memory
 * owned by the caller (NATIVE bytes), without the device: it works while
 * the device is lost, also where the device cannot be recovered in this
 * process (a CUDA GPU after a sticky fault: docs/failures.md), so the
 * program keeps what it marked restorable and can go on elsewhere.
 * Thread-safe (a concurrent checkpoint gives the copy before or after it).
 * Fails with INVALID_ARGUMENT (NULL out_bytes, the null handle, a handle of
 * another client's device), NOT_FOUND (a released handle),
 * FAILED_PRECONDITION for a buffer that is not restorable, OUT_OF_RANGE
 * where the view passes the copy, OUT_OF_MEMORY; on failure *out_bytes is
 * NULL. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_read_restorable(cube_client_t* client,
                                                               cube_handle_t handle,
                                                               cube_bytes_t** out_bytes);

/* Reading memory ------------------------------------------------------------- */

/* Reads every handle (its whole view) into new host buffers, after all work
 * queued before on the stream, and waits for them. The copy runs on the
 * calling thread when the device's queue has nothing left before it (at once,
 * or after a short wait of at most about 20 us for the work ahead), else on
 * the device's runner. out_bytes[i] is owned by
 * the caller (PINNED buffers where the device has staging memory, except
 * results of at most 256 bytes: those are read through the stream's own
 * pinned slice and copied into NATIVE heap buffers). Returns
 * the stream's deferred errors if any (and clears them; writes nothing
 * then). Fails at once with INVALID_ARGUMENT for count 0, NULL handles or a
 * null handle entry (naming handles[i]). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_read(cube_client_t* client, size_t count,
                                                    const cube_handle_t* handles,
                                                    cube_bytes_t** out_bytes);

/* As cube_client_read but returns at once with a future (the caller's; see
 * cube/future.h) whose wait hands over the buffers or the deferred errors.
 * When the device has no work queued or running before it (right after a
 * sync, say), the read runs during the call on the calling thread and the
 * future is ready when it returns; otherwise it runs in its turn on the
 * device's queue. Bad input fails here, as for cube_client_read. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_read_async(cube_client_t* client, size_t count,
                                                          const cube_handle_t* handles,
                                                          cube_future_t** out_future);

/* cube_client_read of one handle. */
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
 * is the dense row-major content, prod(shape)*elem_size bytes, one buffer per
 * tensor, owned by the caller. Fails as cube_client_read, and with
 * INVALID_ARGUMENT for a tensor whose shape the layout refuses or that needs
 * more bytes than its handle views, UNSUPPORTED for strides the device does
 * not produce (naming tensors[i]). The _async form returns a future. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_read_tensor(cube_client_t* client, size_t count,
                                                           const cube_tensor_t* tensors,
                                                           cube_bytes_t** out_bytes);
CUBE_MUST_USE_RESULT cube_status_t cube_client_read_tensor_async(cube_client_t* client,
                                                                 size_t count,
                                                                 const cube_tensor_t* tensors,
                                                                 cube_future_t** out_future);

/* Exclusive access and allocation modes -------------------------------------- */

typedef cube_status_t (*cube_task_fn)(void* user);

/* A task the caller hands to cube_client_exclusive, cube_client_profile or
 * cube_client_memory_persistent_allocation. It returns CUBE_OK or a status it
 * owns and hands over, typically made with cube_status_make: the library
 * returns that status to the caller as it is (same object, code and
 * message). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_exclusive(cube_client_t* client, cube_task_fn fn,
                                                         void* user);

/* Sets the allocation mode of the client's stream (AUTO: the dynamic pools;
 * PERSISTENT: exact-size buffers that are kept). Fails with INVALID_ARGUMENT
 * for a mode that is not one. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_allocation_mode(cube_client_t* client,
                                                               cube_allocation_mode_t mode);

/* Runs |fn| on the calling thread with the calling thread's stream in
 * Persistent mode, then restores the mode that was in force before (also
 * when |fn| fails; windows nest). Returns |fn|'s status unchanged;
 * INVALID_ARGUMENT for a NULL |fn|. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_persistent_allocation(cube_client_t* client,
                                                                            cube_task_fn fn,
                                                                            void* user);

/* Memory accounting ------------------------------------------------------ */

/* Frees the client's stream's fully free pages, free exclusive pages and free
 * persistent buffers back to the backend. Memory in use is not touched. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_cleanup(cube_client_t* client);

/* Writes the usage of the client's stream's pools into |out_usage|, after
 * the work queued before on the stream. FAILED_PRECONDITION while the stream
 * has deferred errors (as CubeCL: flush or sync first). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_usage(cube_client_t* client,
                                                            cube_memory_usage_t* out_usage);

/* Writes the per-pool report of the client's stream (pages, largest free
 * block, peak) into |out_report|, under the output-struct rules (set
 * out_report->struct_size first, 0 = this header's layout). Does not wait
 * for queued work. INVALID_ARGUMENT for a struct_size smaller than the
 * struct_size field. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_report(cube_client_t* client,
                                                             cube_memory_report_t* out_report);

/* Usage summed over every stream of the device (without waiting for queued
 * work), and cleanup of every stream. (CubeCL after the version cube follows
 * aggregates this way.) */
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_usage_device(cube_client_t* client,
                                                                   cube_memory_usage_t* out_usage);
CUBE_MUST_USE_RESULT cube_status_t cube_client_memory_cleanup_device(cube_client_t* client);

/* Launch ----------------------------------------------------------------- */

/* Queues |kernel| over |count| cubes with |args| in Checked mode and returns.
 * The launch holds a reference on the kernel and on every buffer argument
 * (and a dynamic count's handle) until it ran, so they may be released at
 * once. A dialect kernel is compiled on its first launch for the device and
 * mode (see cube_client_precompile). On OpenCL and CUDA the compile happens
 * in this call, on the calling thread, because the compiled kernel's own
 * limits are checked here: a compile error is this call's status. On the CPU
 * it happens on the stream and a compile error is deferred to the stream.
 * Failures while the kernel runs are deferred to the stream. A static count
 * with a zero component launches nothing (after the checks). Fails at once
 * with INVALID_ARGUMENT (a NULL kernel, an argument count or kind that
 * differs from the kernel's, NULL args, a null handle, a buffer smaller than
 * one element of its CUBE_ARRAY's type, an invalid count kind, a dynamic
 * count handle of fewer than 12 bytes), NOT_FOUND (a released handle),
 * OUT_OF_RANGE (a cube dim, static count or cube-local memory beyond the
 * device's or the compiled kernel's limits), UNIMPLEMENTED (a native kernel
 * on a device that runs dialect kernels only). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_launch(cube_client_t* client, cube_kernel_t* kernel,
                                                      cube_count_t count, size_t arg_count,
                                                      const cube_arg_t* args);

/* As cube_client_launch, in the mode of the server's check mode (AUTO:
 * Unchecked, ENFORCE: Checked, VALIDATE: Validate). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_launch_unchecked(cube_client_t* client,
                                                                cube_kernel_t* kernel,
                                                                cube_count_t count,
                                                                size_t arg_count,
                                                                const cube_arg_t* args);

/* As cube_client_launch, in an explicit mode (INVALID_ARGUMENT for a mode
 * that is not one). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_launch_mode(cube_client_t* client,
                                                           cube_kernel_t* kernel,
                                                           cube_count_t count, size_t arg_count,
                                                           const cube_arg_t* args,
                                                           cube_execution_mode_t mode);

/* Compiles dialect |kernels| for the client's device in |mode| now (the kernel
 * cache keeps them, in memory and on disk), so that their first launch does
 * not pay for it. Native kernels need nothing. Fails with INVALID_ARGUMENT
 * (NULL kernels with count > 0, a NULL entry, an invalid mode) or with the
 * first compile error (COMPILATION_FAILED, naming kernels[i]); the kernels
 * before it stay compiled. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_precompile(cube_client_t* client, size_t count,
                                                          cube_kernel_t* const* kernels,
                                                          cube_execution_mode_t mode);

/* Deprecated spelling of cube_client_precompile (its messages name the new
 * function). */
CUBE_DEPRECATED("use cube_client_precompile")
CUBE_MUST_USE_RESULT cube_status_t cube_kernel_precompile(cube_client_t* client, size_t count,
                                                          cube_kernel_t* const* kernels,
                                                          cube_execution_mode_t mode);

/* Synchronisation -------------------------------------------------------- */

/* Pushes the work queued on the client's stream to the device (without
 * waiting for it) and returns the stream's deferred errors, joined into one
 * status (cube_status_count says how many), which the call clears. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_flush(cube_client_t* client);

/* Waits for every piece of work queued on the client's stream, returns (and
 * clears) its deferred errors as cube_client_flush does, and prints the
 * profile summary when a profile level >= basic is set. Work other streams
 * queued is not waited for. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_sync(cube_client_t* client);

/* As cube_client_sync, returning at once a future (the caller's) whose wait
 * returns what the sync would. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_sync_async(cube_client_t* client,
                                                          cube_future_t** out_future);

/* Profiling ---------------------------------------------------------------- */

/* Runs |fn| with the device to itself (as cube_client_exclusive) and writes
 * how long its work took into |out_duration|: on a device with events (CUDA)
 * the device time between an event recorded before |fn| and one after it,
 * waited for (work queued before is not drained first); elsewhere the
 * runner's clock between a synchronisation of the stream before |fn| and
 * one after. |name| labels the measurement in the profile log (may be
 * NULL; borrowed for the call). When only |fn| fails, its status is returned
 * unchanged. A launch that fails inside |fn| is reported here (LAUNCH_FAILED)
 * instead of on the stream; such failures, a failed synchronisation and
 * |fn|'s own status are then joined into one status prefixed
 * "cube_client_profile '<name>'". |out_duration| is written only on success.
 * INVALID_ARGUMENT for a NULL |fn|. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_profile(cube_client_t* client, cube_task_fn fn,
                                                       void* user, const char* name,
                                                       cube_profile_duration_t* out_duration);

/* Flags of cube_client_profile_summary. */
typedef uint32_t cube_profile_summary_flags_t;
enum cube_profile_summary_flag_bits_e {
  CUBE_PROFILE_SUMMARY_NONE = 0u,
  CUBE_PROFILE_SUMMARY_RESET = 1u << 0, /* empty the summary after reading it */
};

/* Writes the device's profile summary (cube/profile.h: every row since it
 * was last printed by a sync or reset) into |out_summary|, whose rows the
 * caller then owns (cube_profile_summary_deinitialize). The call resolves
 * the device times of work that has completed; work still running is not
 * in it. To wait for work without losing its rows, read a buffer it wrote
 * (cube_client_read): cube_client_sync waits too, but at profile level
 * basic and above it prints the summary and empties it, so a summary read
 * after a sync holds only what ran since. Empty below profile level basic. INVALID_ARGUMENT for NULL arguments, a struct_size smaller
 * than the struct_size field or unknown flags; OUT_OF_MEMORY when the rows
 * cannot be allocated (nothing is written). Thread-safe. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_profile_summary(
    cube_client_t* client, cube_profile_summary_flags_t flags, cube_profile_summary_t* out_summary);

/* The server's profile level (after the environment); CUBE_PROFILE_NONE for
 * NULL and a dead client. */
cube_profile_level_t cube_client_profile_level(const cube_client_t* client);

/* Vector sizes ----------------------------------------------------------- */

/* Powers of two from max = min(max_vector_size, load_width / (elem_size*8))
 * down to 1, written to |out_sizes| (at most |capacity|; may be NULL to count
 * only), their number to |out_count|. Fails with INVALID_ARGUMENT for
 * elem_size 0 and when out_sizes is given but too small (out_count is set
 * then, as is the part that fits). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_io_optimized_vector_sizes(
    const cube_client_t* client, uint32_t elem_size, uint32_t* out_sizes, size_t capacity,
    size_t* out_count);

/* Moving data between devices -------------------------------------------- */

/* Copies |handle|'s content (on |src|'s device) into a new handle on |dst|'s
 * device, owned by the caller, after the work queued before on src's
 * stream. Between CPU devices it goes through the collective transport
 * (send/recv); other pairs read on src and write on dst (the read returns
 * src's deferred errors). Contents a failure spoiled (taint, above) are not
 * moved: both ways fail with DATA_LOST naming the failure, as a read does,
 * and no handle is made. Fails with INVALID_ARGUMENT for a NULL client
 * (named "src" or "dst") or a handle that is not on src's device, NOT_FOUND
 * for a released handle. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_to_client(cube_client_t* src, cube_handle_t handle,
                                                         cube_client_t* dst,
                                                         cube_handle_t* out_handle);

/* Same for a tensor (borrowed): the result, owned by the caller, has the
 * layout |dst| prefers. INVALID_ARGUMENT for a NULL tensor. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_to_client_tensor(cube_client_t* src,
                                                                const cube_tensor_t* tensor,
                                                                cube_client_t* dst,
                                                                cube_tensor_t* out_tensor);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_CLIENT_H_ */
