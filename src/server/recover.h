/* Recovery of a lost device and the host copies of restorable buffers
 * (src/server/recover.c; docs/failures.md, "Recovery"). */
#ifndef CUBE_SERVER_RECOVER_H_
#define CUBE_SERVER_RECOVER_H_

#include <stdint.h>

#include "cube/status.h"
#include "memory/memory.h"
#include "server/stream.h"

/* Recovers |s|'s device if it is lost (CUBE_OK at once when it is not):
 * with the device to itself, after the work queued before (which fails
 * with DEVICE_LOST), resets the backend's device and gives every buffer of
 * it new memory, restoring the restorable ones and tainting the others with
 * the loss; then the device works again. |fn| names the caller in messages.
 * Fails, the device staying lost, with FAILED_PRECONDITION while the
 * program holds pinned memory of the device (read results, staging
 * buffers), UNIMPLEMENTED where the backend cannot reset a device, or the
 * backend's failure; a restorable buffer that could not be written back
 * makes the call fail with that failure after the device recovered (the
 * buffer then reads as DATA_LOST). Thread-safe. */
cube_status_t cube__server_recover(cube__server_t* s, const char* fn);

/* Keeps a host copy of |mem|'s contents as they are after the work queued
 * before on |stream| (with the device to itself): the buffer becomes
 * restorable. Fails with the read's failure (DATA_LOST for a tainted
 * buffer) or OUT_OF_MEMORY; the previous copy then stays. */
cube_status_t cube__server_checkpoint(cube__stream_t* stream, cube__memory_t* mem);

/* Keeps a copy of |size| bytes at |data| as |mem|'s restorable contents
 * (the upload that created it). OUT_OF_MEMORY: nothing kept. */
cube_status_t cube__server_keep(cube__memory_t* mem, const void* data, uint64_t size);

#endif /* CUBE_SERVER_RECOVER_H_ */
