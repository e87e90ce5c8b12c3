/* cube/cube.h: the whole public API of cube, the CubeCL compute runtime in C.
 *
 * Rules that hold for every header below:
 *  - Every fallible function returns cube_status_t (NULL = success) and
 *    writes its results through out_ parameters, which come last. A failed
 *    call writes nothing the caller must free.
 *  - Ownership: what a _create/_load/_init/_allocate/read call returns is owned
 *    by the caller, who releases it with the matching _release (or _free for
 *    statuses). Arguments are borrowed for the duration of the call unless
 *    the documentation says "consumed".
 *  - Counted objects (client, kernel, bytes, future) have _retain/_release;
 *    handles are ids with the same pair.
 *  - Each function says whether it is thread-safe; client calls are.
 *  - The library never aborts the process on bad input or a device fault.
 */
#ifndef CUBE_CUBE_H_
#define CUBE_CUBE_H_

#define CUBE_VERSION_MAJOR 0
#define CUBE_VERSION_MINOR 1
#define CUBE_VERSION_PATCH 0
#define CUBE_VERSION_STRING "0.1.0"

#include "cube/bytes.h"
#include "cube/cache.h"
#include "cube/client.h"
#include "cube/collective.h"
#include "cube/device.h"
#include "cube/handle.h"
#include "cube/kernel.h"
#include "cube/memory.h"
#include "cube/options.h"
#include "cube/profile.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version string ("0.1.0"). Thread-safe. */
const char* cube_version(void);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_CUBE_H_ */
