/* cube/cache.h: the kernel cache. Compiled dialect kernels are kept in memory
 * (per process) and on disk (CUBE_CACHE_DIR, default $XDG_CACHE_HOME/cube or
 * ~/.cache/cube), keyed by a hash of everything that changes the binary:
 * source, defines, entry, execution mode, backend, device architecture,
 * compiler identity and the runtime version. Disk writes are atomic (several
 * processes may compile the same kernel at once); a corrupt or truncated entry
 * is detected and rebuilt. The tuning results of tunable operations
 * (cube/tune.h) live in the same directory, as entries of kind "tune".
 *
 * The directory as users manage it: CUBE_CACHE_MAX caps its size (after each
 * store, the least recently used entries are deleted until the entries fit;
 * a load marks an entry used), cube_kernel_cache_list names each entry,
 * cube_kernel_cache_prune removes what can never be used again. Bundles
 * (cube/bundle.h) carry a directory's entries of one device to another
 * machine.
 *
 * All functions are thread-safe.
 */
#ifndef CUBE_CACHE_H_
#define CUBE_CACHE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Counters of the kernel cache (an output struct, see cube/cube.h, "Struct
 * sizes": set struct_size, 0 = this header's layout, before the call). */
typedef struct cube_kernel_cache_stats {
  size_t struct_size;
  uint64_t memory_hits;      /* compiled kernel found in this process */
  uint64_t disk_hits;        /* loaded from the disk cache */
  uint64_t misses;           /* had to compile */
  uint64_t compile_failures; /* compilations that failed */
  uint64_t corrupt_entries;  /* disk entries found damaged and rebuilt */
  uint64_t compile_ns;       /* time spent compiling */
  uint64_t load_ns;          /* time spent loading disk hits */
  uint64_t disk_entries;     /* entries on disk now */
  uint64_t disk_bytes;       /* their size */
} cube_kernel_cache_stats_t;

/* Writes the counters of this process, plus the disk entries now, into
 * |out_stats| under the output-struct rules. Fails with INVALID_ARGUMENT for
 * a NULL |out_stats| or a struct_size smaller than the struct_size field, or
 * with the status of a disk cache directory that cannot be read (then the
 * struct is left as it was). */
CUBE_MUST_USE_RESULT cube_status_t cube_kernel_cache_stats(cube_kernel_cache_stats_t* out_stats);

/* The cache directory in use ("" when the disk cache is off:
 * CUBE_CACHE_DIR=off), resolved from the environment on each call. The
 * string belongs to the library and stays valid until cube_shutdown. */
const char* cube_kernel_cache_dir(void);

/* Whether the disk cache can use its directory: CUBE_OK when it can (or when
 * the disk cache is off), else an UNAVAILABLE status (the caller frees it)
 * whose message names the directory and the reason (a file where a
 * directory should be, a directory this process may not write into, a parent
 * that cannot be created, or else the directory-level failure of a store in
 * this process, until a store there succeeds) and
 * says that compiled kernels are then kept in memory only. Creates nothing.
 *
 * An unusable directory never fails a compile: kernels compile, run and stay
 * in the memory cache. The first store that fails there prints one line on
 * stderr ("cube: kernel cache directory '<dir>' is unusable: <reason>; ..."),
 * once per directory and process. */
CUBE_MUST_USE_RESULT cube_status_t cube_kernel_cache_dir_status(void);

/* Removes every disk entry (and resets the counters). Compiled kernels in use
 * stay loaded. Fails with the first entry that could not be deleted (the
 * others are deleted still), naming it and the reason. */
CUBE_MUST_USE_RESULT cube_status_t cube_kernel_cache_clear(void);

/* One entry on disk, as cube_kernel_cache_list describes it (a plain
 * value). */
typedef struct cube_kernel_cache_entry {
  char file[56];     /* "<32 hex digits>.<kind>" in "<dir>/v2" */
  char kind[16];     /* "so" (CPU), "clbin" (OpenCL), "cubin" (CUDA), "tune" */
  char name[128];    /* the kernel, or the tuned operation; "" when not recorded */
  char backend[16];  /* "cpu", "opencl", "cuda"; "" when not recorded */
  char device[512];  /* the device identity it was made for */
  char version[32];  /* the cube version that wrote it */
  uint64_t size;     /* bytes on disk */
  int64_t last_use;  /* seconds since the epoch: its last store or load */
  bool readable;     /* header and metadata well-formed (a load checks the rest) */
  char why[128];     /* when not readable: why */
} cube_kernel_cache_entry_t;

/* Lists the disk entries, most recently used first, into a new array
 * (*out_entries, *out_count entries; free it with
 * cube_kernel_cache_list_free; NULL and 0 when there are none or the disk
 * cache is off). Reads each entry's header and metadata only. Fails with
 * INVALID_ARGUMENT for NULL outputs, UNAVAILABLE when the directory cannot be
 * read, OUT_OF_MEMORY. */
CUBE_MUST_USE_RESULT cube_status_t cube_kernel_cache_list(cube_kernel_cache_entry_t** out_entries,
                                                          size_t* out_count);
void cube_kernel_cache_list_free(cube_kernel_cache_entry_t* entries);

/* What cube_kernel_cache_prune removed and kept (an output struct). */
typedef struct cube_kernel_cache_prune_report {
  size_t struct_size;
  uint64_t corrupt;         /* entries whose checksum, header or metadata is wrong */
  uint64_t other_version;   /* entries of another cube version (never used by this one) */
  uint64_t temporary;       /* temporary files of stores that never finished (older than 1 h) */
  uint64_t evicted;         /* entries removed, least recently used first, to fit max_bytes */
  uint64_t removed_bytes;   /* bytes of all removed files */
  uint64_t kept;            /* entries left */
  uint64_t kept_bytes;      /* their bytes */
} cube_kernel_cache_prune_report_t;

/* Removes from the disk cache what can never be used again (corrupt
 * entries, entries another cube version wrote, temporary files older than an
 * hour), then the least recently used entries until the rest take at most
 * |max_bytes| (0: CUBE_CACHE_MAX; when that is 0 too, nothing is evicted).
 * Reads every entry whole (checksums). |out_report| may be NULL. Fails with
 * UNAVAILABLE when the directory cannot be read, or with the first file that
 * could not be deleted (the others are handled still). */
CUBE_MUST_USE_RESULT cube_status_t cube_kernel_cache_prune(
    uint64_t max_bytes, cube_kernel_cache_prune_report_t* out_report);

/* The C compiler the CPU backend compiles dialect kernels with, and what it
 * does with a unit loop (an output struct, see cube/cube.h, "Struct sizes").
 * The strings are NUL-terminated and cut to fit. */
typedef struct cube_cpu_compiler_info {
  size_t struct_size;
  char command[256]; /* the program run: CUBE_CC, else clang, else cc, resolved on PATH */
  char version[256]; /* the first line of its --version */
  char flags[256];   /* the flags of every compile, space-separated */
  /* 1 when the compiler vectorised the unit loop of a probe kernel (a guarded
   * saxpy in Checked mode, generated as any dialect kernel is), by its own
   * vectorisation report (gcc: -fopt-info-vec-optimized; clang:
   * -Rpass=loop-vectorize); 0 when it did not, or gives no such report. */
  int32_t unit_loop_vectorised;
  char report[512]; /* the report's line about that loop, or why there is none */
} cube_cpu_compiler_info_t;

/* Fills |out_info| for the compiler CUBE_CC (or the default) names now. The
 * first call for a compiler runs it twice (its --version, and the probe's
 * compile: about 0.1-0.5 s); later calls return what the first found.
 * Thread-safe. Fails with INVALID_ARGUMENT for a NULL |out_info| or a
 * struct_size smaller than the struct_size field, with UNAVAILABLE when no
 * compiler can be found or started (the struct is then left as it was). A
 * probe that does not compile is not a failure: unit_loop_vectorised is 0 and
 * |report| holds the first line of the compiler's messages. */
CUBE_MUST_USE_RESULT cube_status_t cube_cpu_compiler_info(cube_cpu_compiler_info_t* out_info);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_CACHE_H_ */
