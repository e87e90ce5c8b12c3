/* cube/cube.h: the whole public API of cube, the CubeCL compute runtime in C.
 *
 * Headers, by concern (each compiles on its own, in C and C++):
 *   status.h      the error type; CUBE_MUST_USE_RESULT, CUBE_DEPRECATED
 *   device.h      backends, device ids, properties, enumeration, shutdown
 *   options.h     server options (cube_client_init)
 *   client.h      the compute client: create, read, launch, sync, profile
 *   future.h      results of asynchronous reads and syncs
 *   resource.h    the backend memory behind a handle
 *   dlpack.h      DLPack export and import (dlpack_types.h: the structs)
 *   collective.h  all_reduce, send/recv and their records
 *   handle.h      handles, tensors, layouts
 *   kernel.h      kernels, arguments, counts and dimensions
 *   backends/cpu.h  the CPU backend's native-kernel ABI
 *   memory.h, profile.h, cache.h, bytes.h
 *
 * Rules that hold for every header:
 *  - Every fallible function returns cube_status_t (NULL = success), is
 *    marked CUBE_MUST_USE_RESULT, and writes its results through out_
 *    parameters, which come last. A failed call writes nothing the caller
 *    must free.
 *  - Ownership: what a _create/_load/_init/_allocate/read call returns is owned
 *    by the caller, who releases it with the matching _release (or _free for
 *    statuses). Arguments are borrowed for the duration of the call unless
 *    the documentation says "consumed".
 *  - Counted objects (client, kernel, bytes, future) have _retain/_release;
 *    handles are ids with the same pair.
 *  - _initialize fills a caller's struct in place (defaults and struct_size).
 *  - Each function says whether it is thread-safe; client calls are.
 *  - The library never aborts the process on bad input or a device fault.
 *  - Enumerations have stable values and grow at the end; none has a
 *    public _COUNT (a count would change with every addition). Functions
 *    that name a value return NULL or "unknown" past the last one.
 *  - A renamed function keeps its old name for one release, declared
 *    CUBE_DEPRECATED("use <new name>") and still exported.
 *
 * Struct sizes. The options, descriptor and report structs start with a
 * `size_t struct_size`, so that a struct can grow (fields are only ever
 * appended) without breaking programs built against an older or newer
 * header.
 *
 *   Input structs (the caller fills them, the library reads them):
 *   cube_server_options_t, cube_kernel_desc_t, cube_layout_desc_t,
 *   cube_dlpack_export_t.
 *    - struct_size 0 means "this header's layout", so zero-initialised and
 *      designated-initialised structs keep working. Each has a
 *      <type>_initialize() that fills the defaults and sets struct_size to
 *      sizeof(<type>).
 *    - A smaller size that is the size of an earlier released layout of the
 *      struct is read as that layout: only the bytes it holds, the fields
 *      after them take their defaults (zero). cube_kernel_desc_t is in its
 *      second layout (read_only_args appended; its first was 96 bytes on
 *      LP64), every other struct here still in its first.
 *    - A larger size (a program built against a newer header) is accepted
 *      when every byte past what this library knows is zero, i.e. the newer
 *      fields are left at their defaults; those bytes are read.
 *    - Any other size fails with CUBE_STATUS_UNSUPPORTED, naming the struct,
 *      its struct_size and the sizes this library knows.
 *    - In an array of input structs, descs[0].struct_size gives the stride;
 *      every element must have that struct_size (or 0 when it is sizeof).
 *
 *   Output structs (the library writes them):
 *   cube_memory_report_t, cube_kernel_cache_stats_t,
 *   cube_collective_record_t, cube_graph_auto_stats_t,
 *   cube_profile_summary_t (whose struct_size must reach past |rows|: the
 *   rows it owns are never left unwritten).
 *    - The caller sets struct_size before the call (0 = this header's
 *      layout): zero-initialise the struct (`cube_memory_report_t r = {0};`),
 *      never pass one with an indeterminate struct_size.
 *    - The library writes min(struct_size, its sizeof) bytes and sets
 *      struct_size to the number it wrote, so a newer program sees which of
 *      its fields were filled and an older one gets only what it has room
 *      for. A struct_size smaller than the struct_size field itself is
 *      INVALID_ARGUMENT (nothing is written).
 *
 *   Structs in library memory: cube_device_properties_t and
 *   cube_backend_info_t are returned by pointer (cube_client_properties,
 *   cube_client_info) and keep the library's layout; their struct_size is
 *   the library's sizeof, which a program built against a newer header
 *   checks before reading a field past it. Where a program passes one back
 *   (cube_dim_for_units), struct_size 0 means this header's layout.
 *
 *   Plain values (handles, ids, counts, dims, arguments, tensors, durations,
 *   cube_memory_usage_t, cube_pool_report_t, cube_features_t) have no
 *   struct_size and are frozen.
 *
 * Thread safety of this header: cube_version is thread-safe.
 */
#ifndef CUBE_CUBE_H_
#define CUBE_CUBE_H_

#define CUBE_VERSION_MAJOR 0
#define CUBE_VERSION_MINOR 1
#define CUBE_VERSION_PATCH 0
#define CUBE_VERSION_STRING "0.1.0"

#include "cube/backends/cpu.h"
#include "cube/bundle.h"
#include "cube/bytes.h"
#include "cube/cache.h"
#include "cube/client.h"
#include "cube/collective.h"
#include "cube/device.h"
#include "cube/dlpack.h"
#include "cube/execution.h"
#include "cube/future.h"
#include "cube/graph.h"
#include "cube/handle.h"
#include "cube/kernel.h"
#include "cube/memory.h"
#include "cube/options.h"
#include "cube/profile.h"
#include "cube/trace.h"
#include "cube/resource.h"
#include "cube/status.h"
#include "cube/tune.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The library's version string ("0.1.0"): static, the version of the library
 * that runs (which may differ from CUBE_VERSION_STRING of the header a
 * program was built with). */
const char* cube_version(void);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_CUBE_H_ */
