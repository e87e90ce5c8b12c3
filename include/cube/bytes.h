/* cube/bytes.h: host byte buffers that know how they were allocated
 * (reference §5.3: CubeCL's Bytes and AllocationProperty).
 *
 *   NATIVE  ordinary heap memory (64-byte aligned)
 *   PINNED  page-locked staging memory handed out by a device (cube_client_
 *           reserve_staging, cube_client_staging, reads); releasing it returns
 *           the slice to that device's staging pool
 *   FILE    a region of a file, mapped read-only; uploads stage it first
 *   OTHER   memory owned by someone else, released through a callback
 *
 * A cube_bytes_t is reference counted. Its contents may be written by the
 * holder; it is not synchronised: one thread writes at a time. The counting
 * functions are thread-safe.
 */
#ifndef CUBE_BYTES_H_
#define CUBE_BYTES_H_

#include <stddef.h>
#include <stdint.h>

#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cube_bytes_s cube_bytes_t;

typedef enum cube_bytes_property_e {
  CUBE_BYTES_NATIVE = 0,
  CUBE_BYTES_PINNED = 1,
  CUBE_BYTES_FILE = 2,
  CUBE_BYTES_OTHER = 3,
} cube_bytes_property_t;

/* "native", "pinned", "file", "other". */
const char* cube_bytes_property_name(cube_bytes_property_t property);

/* A zeroed NATIVE buffer of |size| bytes (0 allowed). Thread-safe. */
CUBE_MUST_USE_RESULT cube_status_t cube_bytes_allocate(size_t size, cube_bytes_t** out_bytes);

/* A NATIVE buffer holding a copy of |data| (|size| bytes). */
CUBE_MUST_USE_RESULT cube_status_t cube_bytes_from_copy(const void* data, size_t size,
                                                        cube_bytes_t** out_bytes);

/* A FILE buffer viewing |size| bytes of |path| from |offset| (mapped
 * read-only, copy-on-write: writes stay private). |size| 0 means "to the end
 * of the file". Fails with NOT_FOUND / OUT_OF_RANGE naming the path and the
 * numbers. */
CUBE_MUST_USE_RESULT cube_status_t cube_bytes_map_file(const char* path, uint64_t offset,
                                                       size_t size, cube_bytes_t** out_bytes);

typedef void (*cube_bytes_release_fn)(void* user, void* data, size_t size);

/* An OTHER buffer over |data|; |release| (may be NULL) runs once when the
 * last reference is gone, on whichever thread releases it. */
CUBE_MUST_USE_RESULT cube_status_t cube_bytes_wrap(void* data, size_t size,
                                                   cube_bytes_release_fn release, void* user,
                                                   cube_bytes_t** out_bytes);

cube_bytes_t* cube_bytes_retain(cube_bytes_t* bytes);
void cube_bytes_release(cube_bytes_t* bytes); /* NULL accepted */

void* cube_bytes_data(cube_bytes_t* bytes);
const void* cube_bytes_const_data(const cube_bytes_t* bytes);
size_t cube_bytes_size(const cube_bytes_t* bytes);
cube_bytes_property_t cube_bytes_property(const cube_bytes_t* bytes);

/* Releases |count| buffers of an array (entries may be NULL). */
void cube_bytes_release_array(cube_bytes_t** bytes, size_t count);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_BYTES_H_ */
