/* cube/bytes.h: host byte buffers that know how they were allocated
 * (CubeCL's Bytes and AllocationProperty; docs/cubecl.md, "Bytes and allocation properties").
 *
 *   NATIVE  ordinary heap memory (64-byte aligned)
 *   PINNED  page-locked staging memory handed out by a device (cube_client_
 *           reserve_staging, cube_client_staging, reads); releasing it returns
 *           the slice to that device's staging pool
 *   FILE    a region of a file, mapped private (copy-on-write); uploads
 *           copy it out of the file first (see cube_bytes_map_file)
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

/* "native", "pinned", "file", "other": a static string; "unknown" for an
 * invalid value. */
const char* cube_bytes_property_name(cube_bytes_property_t property);

/* A zeroed NATIVE buffer of |size| bytes (0 allowed), owned by the caller.
 * Fails with INVALID_ARGUMENT for a NULL |out_bytes|, OUT_OF_MEMORY. */
CUBE_MUST_USE_RESULT cube_status_t cube_bytes_allocate(size_t size, cube_bytes_t** out_bytes);

/* A NATIVE buffer holding a copy of |data| (|size| bytes; |data| may be NULL
 * when |size| is 0), owned by the caller. Fails with INVALID_ARGUMENT for a
 * NULL |out_bytes| or NULL data with size > 0, OUT_OF_MEMORY. */
CUBE_MUST_USE_RESULT cube_status_t cube_bytes_from_copy(const void* data, size_t size,
                                                        cube_bytes_t** out_bytes);

/* A FILE buffer viewing |size| bytes of |path| from |offset| (mapped
 * private, copy-on-write: writes through cube_bytes_data stay in this
 * process). |size| 0 means "to the end of the file". Fails with NOT_FOUND /
 * OUT_OF_RANGE naming the path and the numbers.
 *
 * What a FILE buffer guarantees:
 *   - It keeps the file open (one descriptor per buffer of size > 0, closed
 *     when the last reference goes), so the region stays readable when the
 *     path is renamed or unlinked.
 *   - The library never reads the mapping blindly. Uploads (cube_client_
 *     create*, cube_client_staging) read the region with pread into pinned
 *     staging or host memory first; a file that was truncated below the end
 *     of the region is an OUT_OF_RANGE status naming the path, the region
 *     and the file's size now, never a crash. What they upload is the file's
 *     content at the time of the call, unless the holder took cube_bytes_
 *     data: from then on the mapping (with the holder's writes) is uploaded,
 *     after a check that the file still covers the region.
 *   - Reading through cube_bytes_const_data / cube_bytes_data yourself is a
 *     plain memory access: if another process truncates the file under it,
 *     the access raises SIGBUS (POSIX mmap semantics); the library cannot
 *     guard it. Do not shrink a file while its region is read, or after
 *     writing into the mapping (a truncation between the size check and the
 *     copy cannot be seen). Content changed in place by others shows through
 *     pages not written to (Linux MAP_PRIVATE). */
CUBE_MUST_USE_RESULT cube_status_t cube_bytes_map_file(const char* path, uint64_t offset,
                                                       size_t size, cube_bytes_t** out_bytes);

typedef void (*cube_bytes_release_fn)(void* user, void* data, size_t size);

/* An OTHER buffer over |data|; |release| (may be NULL) runs once when the
 * last reference is gone, on whichever thread releases it. On failure
 * (out_bytes NULL, data NULL with size > 0, no memory for the header)
 * |release| is NOT called: |data| is still the caller's to free. */
CUBE_MUST_USE_RESULT cube_status_t cube_bytes_wrap(void* data, size_t size,
                                                   cube_bytes_release_fn release, void* user,
                                                   cube_bytes_t** out_bytes);

/* Adds a reference and returns |bytes| (NULL returns NULL). */
cube_bytes_t* cube_bytes_retain(cube_bytes_t* bytes);
/* Drops a reference; the last frees the memory (PINNED: back to its device's
 * staging pool; FILE: unmapped and closed; OTHER: its release callback).
 * NULL accepted. */
void cube_bytes_release(cube_bytes_t* bytes);

/* The contents, writable, valid while the caller holds a reference; never
 * NULL for a buffer (also of size 0), NULL for NULL. For a FILE buffer, taking the writable
 * pointer makes later uploads use the mapping (see cube_bytes_map_file). */
void* cube_bytes_data(cube_bytes_t* bytes);
/* The contents, read-only, valid while the caller holds a reference. */
const void* cube_bytes_const_data(const cube_bytes_t* bytes);
/* Size in bytes; 0 for NULL. */
size_t cube_bytes_size(const cube_bytes_t* bytes);
/* How the memory was allocated; CUBE_BYTES_NATIVE for NULL. */
cube_bytes_property_t cube_bytes_property(const cube_bytes_t* bytes);

/* Releases |count| buffers of an array and sets each entry to NULL (entries
 * and the array may be NULL). */
void cube_bytes_release_array(cube_bytes_t** bytes, size_t count);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_BYTES_H_ */
