/* Internal constructor of host byte buffers with any property. */
#ifndef CUBE_BASE_BYTES_H_
#define CUBE_BASE_BYTES_H_

#include "cube/bytes.h"

/* A buffer over |data| with |property|; |release|(user, data, size) runs once
 * when the last reference goes (may be NULL). Used for PINNED staging slices
 * (release returns the slice to its pool) and read results. */
cube_status_t cube__bytes_make(cube_bytes_property_t property, void* data, size_t size,
                               cube_bytes_release_fn release, void* user,
                               cube_bytes_t** out_bytes);

/* A NATIVE buffer of |size| bytes, 64-byte aligned, NOT zeroed (for reads
 * that overwrite it at once). */
cube_status_t cube__bytes_allocate_uninit(size_t size, cube_bytes_t** out_bytes);

#endif /* CUBE_BASE_BYTES_H_ */
