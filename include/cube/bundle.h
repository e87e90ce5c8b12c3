/* cube/bundle.h: bundles, a cache directory's compiled kernels and tuning
 * results for one device in one file (docs/autotune.md, "Bundles"), to make
 * a cold start warm on another machine or in a fresh container:
 *
 *   cube bundle export app.cubebundle      (after a run, or a compile-and-tune
 *                                           warm-up, cube/execution.h)
 *   cube bundle import app.cubebundle      (where the program will run)
 *
 * A bundle holds the entries of the kernel cache directory (CUBE_CACHE_DIR)
 * that this cube version made for one device identity
 * (cube_client_device_identity), with their metadata, and a checksum over
 * the whole file. Import checks the file (a regular file of this user that
 * neither its group nor others may write; the format; the checksum), refuses
 * a bundle of another cube version or another device identity with a status
 * saying which, then stores each entry into the cache directory as a compile
 * or a tuning would (atomically). A process that then launches the same
 * kernels and tunable operations on that device compiles nothing and tunes
 * nothing.
 *
 * Files are written through a temporary file in the same directory, created
 * O_EXCL with mode 0600, and renamed into place.
 *
 * Ownership: nothing is retained; |client| and |path| are borrowed for the
 * call, |out_info| is the caller's struct (output-struct rules, cube/cube.h
 * "Struct sizes").
 *
 * Thread safety: every function here is thread-safe (concurrent imports into
 * one directory are safe: each entry is an atomic store; an export while
 * another process stores leaves out, or fails on, an entry that changed
 * while it was written: nothing half-written reaches the file).
 */
#ifndef CUBE_BUNDLE_H_
#define CUBE_BUNDLE_H_

#include <stdint.h>

#include "cube/client.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a bundle holds (an output struct, cube/cube.h "Struct sizes"). */
typedef struct cube_bundle_info {
  size_t struct_size;
  char version[32];   /* the cube version that made it */
  char backend[16];   /* "cpu", "opencl", "cuda" */
  char device[512];   /* the device identity it was made for */
  uint64_t entries;   /* entries it carries */
  uint64_t kernels;   /* of which compiled kernels */
  uint64_t tunings;   /* of which tuning records */
  uint64_t bytes;     /* bytes of the file */
} cube_bundle_info_t;

/* Writes the entries of the cache directory made by this cube version for
 * |client|'s device into the bundle |path| (replaced when it exists), and
 * describes it in |out_info| (may be NULL). Fails with INVALID_ARGUMENT
 * (NULL client or path), UNAVAILABLE (the disk cache is off, or the
 * directory cannot be read), FAILED_PRECONDITION (no entry for this device:
 * nothing to bundle; the message names the device), or the file's own
 * failure (naming the path and the step). */
CUBE_MUST_USE_RESULT cube_status_t cube_bundle_export(cube_client_t* client, const char* path,
                                                      cube_bundle_info_t* out_info);

/* Reads and checks the bundle |path| (the file's owner and mode, the format,
 * the checksum; no device is needed) and describes it. Fails as
 * cube_bundle_import does for these checks: INVALID_ARGUMENT (NULL arguments,
 * not a bundle), NOT_FOUND (no such file), FAILED_PRECONDITION (a file this
 * user may not trust, a checksum that does not match). */
CUBE_MUST_USE_RESULT cube_status_t cube_bundle_describe(const char* path,
                                                        cube_bundle_info_t* out_info);

/* Checks the bundle |path| and stores its entries into the cache directory,
 * for |client|'s device. Refuses, storing nothing, with
 *  - INVALID_ARGUMENT: NULL client or path; a file that is not a bundle (bad
 *    magic, unknown format, malformed contents: what and where);
 *  - NOT_FOUND: no such file;
 *  - FAILED_PRECONDITION: a file this user may not trust (its owner or
 *    mode); a checksum that does not match (a damaged or altered bundle);
 *    another cube version ("made by cube X, this is cube Y"); another device
 *    ("made for device '<identity>', this client's device is '<identity>'");
 *  - UNAVAILABLE: the disk cache is off or its directory is unusable, or
 *    writing an entry failed (a full disk: the message names the entry, the
 *    path and the step);
 *  - OUT_OF_MEMORY.
 * Entries are stored all or none: each is written into a temporary file of
 * the cache directory first, and only when every one is written are they
 * renamed into place; a failure removes what this import wrote. Entries the
 * directory already holds are replaced by the bundle's (the same key: the
 * same contents). CUBE_CACHE_MAX applies after the import. |out_info| (may
 * be NULL) describes the bundle, also when the import is refused after the
 * file was read. */
CUBE_MUST_USE_RESULT cube_status_t cube_bundle_import(cube_client_t* client, const char* path,
                                                      cube_bundle_info_t* out_info);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_BUNDLE_H_ */
