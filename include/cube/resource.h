/* cube/resource.h: the backend memory behind a handle (CubeCL's
 * get_resource).
 *
 * A resource is the address and size of a handle's view in the backend's
 * terms: a host pointer on the CPU and null backends, a device pointer
 * (a CUdeviceptr) on CUDA, an opaque value on OpenCL (the buffer's cl_mem
 * advanced by the view's byte offset: not an address). It keeps the
 * memory alive (the buffer does not return to its pool) until the resource
 * is released, even when every handle to it is gone. Getting a resource
 * implies no synchronisation: work queued before may still be writing the
 * memory; call cube_client_sync first to see its results.
 *
 * Ownership: the caller owns the resource and releases it with
 * cube_resource_release before cube_shutdown.
 *
 * Thread safety: every function here is thread-safe; reading or writing the
 * memory itself is the caller's to order with the device's work.
 */
#ifndef CUBE_RESOURCE_H_
#define CUBE_RESOURCE_H_

#include <stdint.h>

#include "cube/client.h"
#include "cube/handle.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cube_resource_s cube_resource_t;

/* The resource behind |handle|, which must live on |client|'s device. Fails
 * with INVALID_ARGUMENT (NULL client or out_resource, a handle of another
 * device), FAILED_PRECONDITION (a client from before cube_shutdown),
 * NOT_FOUND (a released handle, or memory not bound), OUT_OF_MEMORY (host
 * memory for the resource object). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_get_resource(cube_client_t* client,
                                                            cube_handle_t handle,
                                                            cube_resource_t** out_resource);

/* The address of the view (host or device, see above); NULL for NULL. Valid
 * until the resource is released. */
void* cube_resource_ptr(const cube_resource_t* resource);

/* Bytes of the view (cube_handle_size at the time of the call); 0 for NULL. */
uint64_t cube_resource_size(const cube_resource_t* resource);

/* Releases the resource and its hold on the memory; NULL is accepted. */
void cube_resource_release(cube_resource_t* resource);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_RESOURCE_H_ */
