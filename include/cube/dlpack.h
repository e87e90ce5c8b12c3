/* cube/dlpack.h: memory exchanged with other libraries (NumPy, PyTorch, CuPy,
 * ...) through DLPack, without a copy (docs/dlpack.md).
 *
 * Export: a view of a handle becomes a DLPack managed tensor, the versioned
 * form of DLPack 1.x (DLManagedTensorVersioned, with its flags) or the legacy
 * form older consumers take (DLManagedTensor). The tensor points at cube's
 * memory and keeps it alive (a binding reference, as a resource does) until
 * the consumer calls its deleter, which it must do exactly once, from any
 * thread, also after the client was released or cube_shutdown ran: memory
 * lent out at a shutdown is kept (its pool is freed once the last such
 * tensor is deleted), and the deleter touches no state the shutdown freed.
 *
 * Import: a DLPack tensor of another library becomes a cube handle on the
 * same memory (host memory on the CPU backend, a device pointer of the same
 * GPU on CUDA). cube calls the producer's deleter exactly once, on the
 * thread that drops the last reference (a handle, a binding of queued work,
 * a resource, a graph, an export of it), also after cube_shutdown.
 *
 * The structs of DLPack are only named here (pointers to incomplete types),
 * so this header needs no DLPack header; a program that reads or fills them
 * includes cube/dlpack_types.h (the system's <dlpack/dlpack.h> plus the
 * versioned structs where that header predates DLPack 1.0).
 *
 * Thread safety: every function here is thread-safe. A deleter may run on
 * any thread, concurrently with anything.
 */
#ifndef CUBE_DLPACK_H_
#define CUBE_DLPACK_H_

#include <stddef.h>
#include <stdint.h>

#include "cube/client.h"
#include "cube/handle.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct DLManagedTensor;
struct DLManagedTensorVersioned;

/* The DLPack version that versioned exports carry; imports take any 1.x. */
#define CUBE_DLPACK_MAJOR_VERSION 1
#define CUBE_DLPACK_MINOR_VERSION 0

/* DLDeviceType values (the same numbers as DLPack's). */
typedef enum cube_dlpack_device_type_e {
  CUBE_DLPACK_DEVICE_CPU = 1,
  CUBE_DLPACK_DEVICE_CUDA = 2,
  CUBE_DLPACK_DEVICE_CUDA_HOST = 3,
  CUBE_DLPACK_DEVICE_OPENCL = 4,
  CUBE_DLPACK_DEVICE_VULKAN = 7,
  CUBE_DLPACK_DEVICE_METAL = 8,
  CUBE_DLPACK_DEVICE_VPI = 9,
  CUBE_DLPACK_DEVICE_ROCM = 10,
  CUBE_DLPACK_DEVICE_ROCM_HOST = 11,
  CUBE_DLPACK_DEVICE_EXT_DEV = 12,
  CUBE_DLPACK_DEVICE_CUDA_MANAGED = 13,
} cube_dlpack_device_type_t;

/* DLDataTypeCode values (the same numbers as DLPack's). */
typedef enum cube_dlpack_code_e {
  CUBE_DLPACK_INT = 0,
  CUBE_DLPACK_UINT = 1,
  CUBE_DLPACK_FLOAT = 2,
  CUBE_DLPACK_OPAQUE_HANDLE = 3,
  CUBE_DLPACK_BFLOAT = 4,
  CUBE_DLPACK_COMPLEX = 5,
  CUBE_DLPACK_BOOL = 6,
} cube_dlpack_code_t;

/* An element type as DLDataType has it: |code| (cube_dlpack_code_t), |bits|
 * per lane, |lanes| (1 for scalars). The same layout as DLDataType. */
typedef struct cube_dlpack_dtype {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} cube_dlpack_dtype_t;

static inline cube_dlpack_dtype_t cube_dlpack_dtype(cube_dlpack_code_t code, uint8_t bits) {
  cube_dlpack_dtype_t t = {(uint8_t)code, bits, 1};
  return t;
}

/* Flags of a tensor (the bits of DLManagedTensorVersioned.flags). */
typedef uint64_t cube_dlpack_flags_t;
enum cube_dlpack_flag_bits_e {
  /* Export: the consumer must not write the memory (DLPack's read-only bit;
   * a legacy export cannot say so). Import: take a tensor marked read-only;
   * the caller promises that nothing writes through the handle (without
   * it, such a tensor is refused). */
  CUBE_DLPACK_READ_ONLY = 1u << 0,
  /* DLPack's is-copied bit: the producer copied the data for this tensor.
   * Never set on cube's exports; accepted on imports. */
  CUBE_DLPACK_IS_COPIED = 1u << 1,
};

/* Values of cube_dlpack_export_t.stream besides a native stream. */
#define CUBE_DLPACK_STREAM_WAIT INT64_C(0)  /* the call returns once the work is done */
#define CUBE_DLPACK_STREAM_NONE INT64_C(-1) /* no ordering: the consumer sees to it */

/* What to export: a tensor view of a handle (an input struct, cube/cube.h
 * "Struct sizes"; fill it with cube_dlpack_export_initialize). Element i
 * (a multi-index) is at byte byte_offset + sum(i[d] * strides[d]) *
 * bits/8 * lanes from the start of the handle's view; every element must lie
 * inside the view. */
typedef struct cube_dlpack_export {
  size_t struct_size;       /* 0 or sizeof(cube_dlpack_export_t) */
  cube_handle_t handle;     /* borrowed: the export takes its own reference on the memory */
  cube_dlpack_dtype_t dtype;
  uint32_t rank;            /* at most CUBE_MAX_RANK; 0: one element */
  int64_t shape[CUBE_MAX_RANK];
  int64_t strides[CUBE_MAX_RANK]; /* in elements, as DLPack; may be 0 or negative */
  uint64_t byte_offset;     /* of element 0 from the start of the handle's view */
  cube_dlpack_flags_t flags; /* CUBE_DLPACK_READ_ONLY */
  /* The stream protocol: how the consumer's use is ordered after the work
   * queued on the calling stream before the export (and after the buffer's
   * last use on another stream).
   *   CUBE_DLPACK_STREAM_WAIT (0): the call returns once that work completed.
   *   CUBE_DLPACK_STREAM_NONE (-1): nothing is ordered.
   *   anything else: a native stream of the device's API that is made to
   *     wait for that work without the host waiting (CUDA: a CUstream; 1 and
   *     2 are the legacy and per-thread default streams, as DLPack's
   *     __dlpack__(stream=...) passes them). On a device without native
   *     streams (CPU, OpenCL) it is INVALID_ARGUMENT. */
  int64_t stream;
} cube_dlpack_export_t;

/* Fills |out_export|: |handle|'s whole view as a compact row-major tensor of
 * |rank| dimensions |shape| (copied) of |dtype| (strides computed, offset 0,
 * no flags, stream CUBE_DLPACK_STREAM_WAIT, struct_size set). Nothing is
 * checked against the handle here: cube_client_to_dlpack does. Fails with
 * INVALID_ARGUMENT for a NULL |out_export|, rank > CUBE_MAX_RANK, NULL shape
 * with rank > 0 or a negative dimension; writes nothing then. */
CUBE_MUST_USE_RESULT cube_status_t cube_dlpack_export_initialize(cube_handle_t handle,
                                                                 cube_dlpack_dtype_t dtype,
                                                                 uint32_t rank,
                                                                 const int64_t* shape,
                                                                 cube_dlpack_export_t* out_export);

/* The device of |client| as DLPack names it: *out_device_type a
 * cube_dlpack_device_type_t (CPU 1 for every CPU device, CUDA 2, OpenCL 4),
 * *out_device_id its id (0 on the CPU, the CUDA ordinal, the OpenCL device's
 * index). Fails with UNIMPLEMENTED on a backend whose memory cannot be
 * exchanged (null), naming it. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_dlpack_device(cube_client_t* client,
                                                             int32_t* out_device_type,
                                                             int32_t* out_device_id);

/* The stream value cube passes as a consumer (the |stream| of a producer's
 * __dlpack__): the native stream of |client|'s calling stream (CUDA: its
 * CUstream, which cube's work on imported memory runs on), or 0 where the
 * device has none (CPU, OpenCL: a producer's work must then be complete,
 * DLPack's stream=None). Fails with UNIMPLEMENTED where the memory cannot
 * be exchanged at all (null). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_dlpack_stream(cube_client_t* client,
                                                             int64_t* out_stream);

/* Exports |desc| as a DLPack 1.x tensor (version CUBE_DLPACK_MAJOR_VERSION.
 * CUBE_DLPACK_MINOR_VERSION, flags from desc->flags), owned by the caller,
 * who hands it to a consumer or calls its deleter (exactly once, any
 * thread, also after cube_shutdown). The data pointer is element 0's
 * address and byte_offset 0 where memory has addresses (a host pointer on
 * the CPU, a CUdeviceptr on CUDA: what most consumers expect), the buffer's
 * cl_mem and element 0's bytes from its start on OpenCL; shape and strides
 * are never NULL. The export is ordered per desc->stream first (see
 * cube_dlpack_export_t); a failure of the work queued before is not taken
 * from the stream (the next sync reports it).
 * Fails with INVALID_ARGUMENT (NULL desc, rank, a dimension < 0, lanes 0,
 * bits not a multiple of 8, an element outside the handle's view, naming the
 * element and the numbers; a stream value the device has no use for; a
 * native stream the driver refuses), UNSUPPORTED (desc->struct_size),
 * UNIMPLEMENTED (a backend whose memory cannot be exchanged),
 * FAILED_PRECONDITION (a capturing stream), NOT_FOUND (a released handle),
 * DATA_LOST for an ordered export (stream not CUBE_DLPACK_STREAM_NONE) of a
 * buffer whose contents a failure spoiled, naming the failure as a read does
 * (docs/failures.md; an unordered export is not checked), or the device's
 * failure while ordering; nothing is exported then. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_to_dlpack(cube_client_t* client,
                                                         const cube_dlpack_export_t* desc,
                                                         struct DLManagedTensorVersioned** out_tensor);

/* As cube_client_to_dlpack, in the legacy form (DLManagedTensor, DLPack
 * before 1.0): no version and no flags (desc->flags may hold READ_ONLY; it is
 * not carried). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_to_dlpack_legacy(cube_client_t* client,
                                                                const cube_dlpack_export_t* desc,
                                                                struct DLManagedTensor** out_tensor);

/* Imports |tensor| (DLPack 1.x) as a new handle owned by the caller, viewing
 * the bytes its elements occupy: from its lowest to one past its highest
 * element's byte (the view starts at element 0 unless a stride is negative,
 * which is refused). Consumed on success: cube calls tensor->deleter exactly
 * once, when the last reference to the memory goes. On failure it is not
 * consumed (the caller still owns it and calls its deleter).
 *
 * A tensor cube exported itself (to_dlpack of any client of the same
 * device) comes back as a handle on the same buffer (its deleter runs at
 * once; the handle holds the buffer), viewing the bytes the tensor describes
 * now, which must lie inside the view of the handle it was exported from
 * (else INVALID_ARGUMENT); any other tensor becomes memory cube does not
 * own, in no pool (memory usage does not count it).
 *
 * Refused, with the reason: a NULL tensor or data with elements
 * (INVALID_ARGUMENT); a major version other than 1 (UNSUPPORTED, naming
 * it); a read-only tensor without CUBE_DLPACK_READ_ONLY in |flags|
 * (FAILED_PRECONDITION); a device that is not the client's, or memory the
 * backend cannot address (INVALID_ARGUMENT, naming both devices; on OpenCL
 * every tensor but cube's own); ndim > CUBE_MAX_RANK, a negative dimension,
 * no elements, a dtype cube does not handle (UNSUPPORTED, naming code, bits
 * and lanes: opaque handles, lanes other than 1, bits not a positive
 * multiple of 8, codes past bool), strides that are negative, or that do
 * not lay the elements out densely (each element its own bytes, no gaps:
 * a permutation of a compact layout, e.g. row- or column-major) (UNSUPPORTED,
 * naming the strides: cube's views are contiguous byte ranges), an address
 * not aligned to the element's size (INVALID_ARGUMENT). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_from_dlpack(cube_client_t* client,
                                                           struct DLManagedTensorVersioned* tensor,
                                                           cube_dlpack_flags_t flags,
                                                           cube_handle_t* out_handle);

/* As cube_client_from_dlpack for a legacy tensor (no version, no flags). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_from_dlpack_legacy(cube_client_t* client,
                                                                  struct DLManagedTensor* tensor,
                                                                  cube_dlpack_flags_t flags,
                                                                  cube_handle_t* out_handle);

/* For bindings that wrap exports in Python capsules without linking Python
 * (python/src/cube/_dlpack.py): a PyCapsule destructor (its type is
 * void(PyObject*)) that deletes the tensor of a capsule still named
 * "dltensor" or "dltensor_versioned" (a consumer that took the tensor over
 * renamed the capsule: then it does nothing). It reads the capsule as memory
 * (CPython's PyCapsule: the object header, then the pointer and the name)
 * and calls no Python function, so it is safe while the interpreter has an
 * exception pending, as when a consumer refused the tensor and drops the
 * capsule. |header_size| is the size of the object header
 * (object.__basicsize__: 16 on the usual 64-bit builds), set once with
 * cube_dlpack_capsule_layout before the first capsule goes. Thread-safe. */
void cube_dlpack_capsule_layout(size_t header_size);
void cube_dlpack_capsule_destructor(void* capsule);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_DLPACK_H_ */
