/* Internal constructor of host byte buffers with any property. */
#ifndef CUBE_BASE_BYTES_H_
#define CUBE_BASE_BYTES_H_

#include <stdbool.h>

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

/* Whether |bytes| keeps its data alive for as long as it is referenced. An
 * OTHER buffer wrapped without a release callback does not: its memory is
 * the caller's again once the call that took it returns, so work queued
 * past the call must copy it. */
bool cube__bytes_owns_data(const cube_bytes_t* bytes);

/* Copies |n| bytes of |bytes| from |offset| into |dst|: the one way the
 * library reads a buffer's contents when it may be a FILE buffer. For those
 * it reads the file with pread, so that a file that shrank since it was
 * mapped is an OUT_OF_RANGE status naming the path, the region and the
 * file's size now, where a read of the mapping would raise SIGBUS. After
 * cube_bytes_data was called on it (the holder may have written into its
 * private pages) it checks the file's size with fstat, then copies from the
 * mapping. Other buffers: memcpy. Thread-safe as reads of |bytes| are. */
cube_status_t cube__bytes_copy_out(const cube_bytes_t* bytes, size_t offset, void* dst, size_t n);

/* Whether |bytes| is a FILE buffer from cube_bytes_map_file (its contents
 * must be read with cube__bytes_copy_out). */
bool cube__bytes_is_file(const cube_bytes_t* bytes);

#endif /* CUBE_BASE_BYTES_H_ */
