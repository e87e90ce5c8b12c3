/* cube/handle.h: handles to device memory, tensors and layouts.
 *
 * A cube_handle_t is a 64-bit id of a reference-counted view of device
 * memory (docs/cubecl.md, "Handles and bindings"): a buffer plus a byte range inside it. Ids
 * carry a generation, so a released handle is detected and reported
 * (CUBE_STATUS_NOT_FOUND) instead of touching freed memory.
 *
 * Memory returns to its pool when the last handle and the last in-flight use
 * (queued launch, pending read, resource) are gone. Sub-handles of a packed
 * buffer (cube_client_create_tensors_*) share the buffer: it is freed when all
 * of them are released, and none can_mut while a sibling lives.
 *
 * All functions here are thread-safe.
 */
#ifndef CUBE_HANDLE_H_
#define CUBE_HANDLE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube/device.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cube_handle {
  uint64_t id; /* 0 = no handle */
} cube_handle_t;

#define CUBE_HANDLE_NULL ((cube_handle_t){0})

/* True for the null handle (id 0); says nothing about whether a non-null
 * handle is still live (cube_handle_size is 0 for a released one). */
static inline bool cube_handle_is_null(cube_handle_t h) { return h.id == 0; }

/* Adds a reference; returns |h|. A released or NULL handle is returned
 * unchanged (and reported by the next call that uses it). */
cube_handle_t cube_handle_retain(cube_handle_t h);

/* Drops a reference; the last one (with no queued work or resource using the
 * memory) returns the memory to its pool. Releasing a NULL or already
 * released handle does nothing (use cube_handle_release_checked to see it). */
void cube_handle_release(cube_handle_t h);

/* As cube_handle_release, reporting misuse: INVALID_ARGUMENT for the NULL
 * handle, NOT_FOUND for a handle already released (or from before
 * cube_shutdown). */
CUBE_MUST_USE_RESULT cube_status_t cube_handle_release_checked(cube_handle_t h);

/* Releases |count| handles of an array (cube_handle_release on each; NULL
 * entries and a NULL array are accepted). */
void cube_handle_release_array(const cube_handle_t* handles, size_t count);

/* True if no other handle (clone, retain or sibling sub-handle) refers to
 * the buffer, so the caller may write it in place (CubeCL's can_mut).
 * Bindings held by queued work do not count. False for a released handle.
 * The answer may change as soon as another thread retains the handle. */
bool cube_handle_can_mut(cube_handle_t h);

/* Bytes the handle views (CubeCL's size_in_used); 0 for a released or NULL
 * handle (a live handle never views 0 bytes). */
uint64_t cube_handle_size(cube_handle_t h);

/* Size of the whole underlying buffer, ignoring offsets; 0 for a released
 * handle. */
uint64_t cube_handle_buffer_size(cube_handle_t h);

/* Offset of the view inside the buffer; 0 for a released handle (and for a
 * live handle at the start of its buffer: check cube_handle_size). */
uint64_t cube_handle_offset(cube_handle_t h);

/* Tags the memory |h| views (every handle of its buffer: the tag is the
 * buffer's) with |tag| (copied; NULL: untagged), as memory snapshots and
 * out-of-memory messages show it (cube/memory.h, cube_memory_tag_push).
 * Turns allocation tracking on. INVALID_ARGUMENT for the NULL handle or an
 * empty or too long tag, NOT_FOUND for a released one (which takes none of
 * the process's tags), FAILED_PRECONDITION for a new tag once the process
 * holds its 4096 (CUBE_MEMORY_TAG_MAX bytes each), OUT_OF_MEMORY. */
CUBE_MUST_USE_RESULT cube_status_t cube_handle_set_tag(cube_handle_t h, const char* tag);

/* Writes the device the memory lives on into |out_device|. Fails with
 * INVALID_ARGUMENT for a NULL |out_device| or the NULL handle, NOT_FOUND for
 * a released handle; writes nothing then. */
CUBE_MUST_USE_RESULT cube_status_t cube_handle_device(cube_handle_t h,
                                                      cube_device_id_t* out_device);

/* A new handle on the same buffer, shrunk by |offset_start| bytes at the
 * front and |offset_end| at the back (offsets add to the existing ones, as
 * CubeCL's offset_start/offset_end); the caller owns it. Fails with
 * INVALID_ARGUMENT if the view would be empty or |out_handle| is NULL,
 * NOT_FOUND for a released handle. */
CUBE_MUST_USE_RESULT cube_status_t cube_handle_offset_view(cube_handle_t h, uint64_t offset_start,
                                                           uint64_t offset_end,
                                                           cube_handle_t* out_handle);

/* Tensors -------------------------------------------------------------- */

#define CUBE_MAX_RANK 12

typedef enum cube_layout_strategy_e {
  CUBE_LAYOUT_CONTIGUOUS = 0, /* row-major, no padding */
  CUBE_LAYOUT_OPTIMIZED = 1,  /* what the device prefers (pitched rows on CUDA) */
} cube_layout_strategy_t;

/* CubeCL's MemoryLayoutDescriptor: what a tensor is to be (an input struct,
 * see cube/cube.h, "Struct sizes"; fill it with cube_layout_desc_initialize).
 * In an array (descs of cube_client_create_tensors and cube_layout_compute)
 * descs[0].struct_size sets the stride: every element must carry the same
 * struct_size, or 0 when the array uses this header's layout. */
typedef struct cube_layout_desc {
  size_t struct_size; /* 0 or sizeof(cube_layout_desc_t) */
  cube_layout_strategy_t strategy;
  uint32_t rank;
  uint64_t shape[CUBE_MAX_RANK];
  uint32_t elem_size; /* bytes */
} cube_layout_desc_t;

/* A tensor: a handle plus the strides (in elements) the runtime chose
 * (CubeCL's MemoryLayout, with the shape kept beside it). The tensor owns
 * one reference on |handle|: release it with cube_tensor_release. */
typedef struct cube_tensor {
  cube_handle_t handle;
  uint32_t rank;
  uint64_t shape[CUBE_MAX_RANK];
  uint64_t strides[CUBE_MAX_RANK];
  uint32_t elem_size;
} cube_tensor_t;

/* Fills |out_desc| (every field, struct_size = sizeof(cube_layout_desc_t));
 * |shape| (rank entries) is copied. Fails with INVALID_ARGUMENT for a NULL
 * |out_desc|, an unknown strategy, rank > CUBE_MAX_RANK, a NULL shape with
 * rank > 0, elem_size 0 or a zero dimension; writes nothing then. */
CUBE_MUST_USE_RESULT cube_status_t cube_layout_desc_initialize(cube_layout_strategy_t strategy,
                                                               uint32_t rank,
                                                               const uint64_t* shape,
                                                               uint32_t elem_size,
                                                               cube_layout_desc_t* out_desc);

/* Deprecated spelling of cube_layout_desc_initialize (its messages name the
 * new function). */
CUBE_DEPRECATED("use cube_layout_desc_initialize")
CUBE_MUST_USE_RESULT cube_status_t cube_layout_desc_init(cube_layout_strategy_t strategy,
                                                         uint32_t rank, const uint64_t* shape,
                                                         uint32_t elem_size,
                                                         cube_layout_desc_t* out_desc);

/* Releases the tensor's handle and clears the tensor (NULL accepted). */
void cube_tensor_release(cube_tensor_t* tensor);
/* cube_tensor_release on each of |count| tensors (NULL array accepted). */
void cube_tensor_release_array(cube_tensor_t* tensors, size_t count);

/* Layout policies (docs/cubecl.md, "Layouts"), exposed for tests and tools ---- */

/* Computes sizes, strides and packing of |count| descriptors under |policy|
 * with buffer alignment |alignment|: writes per-tensor strides, the byte
 * offset of each tensor in the packed buffer, its size (size_i) and the total
 * size. No memory is touched. Any out_ pointer may be NULL; |alignment| must
 * be a power of two. Fails with INVALID_ARGUMENT (an unknown policy, an
 * alignment that is not a power of two, NULL descs with count > 0, an
 * invalid descriptor, a size that overflows 64 bits; naming descs[i]) or
 * UNSUPPORTED (struct_size, see cube_layout_desc_t); writes nothing then.
 * Pure arithmetic. */
CUBE_MUST_USE_RESULT cube_status_t cube_layout_compute(cube_layout_policy_t policy,
                                                       uint64_t alignment, size_t count,
                                                       const cube_layout_desc_t* descs,
                                                       uint64_t (*out_strides)[CUBE_MAX_RANK],
                                                       uint64_t* out_offsets, uint64_t* out_sizes,
                                                       uint64_t* out_total);

/* True if |strides| are readable under |policy| (CPU: fully contiguous;
 * pitched: innermost 1, each outer = inner x shape except the second-to-last
 * which may be larger). False for an unknown policy, rank > CUBE_MAX_RANK or
 * NULL arrays with rank > 0. */
bool cube_layout_strides_readable(cube_layout_policy_t policy, uint32_t rank,
                                  const uint64_t* shape, const uint64_t* strides);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_HANDLE_H_ */
