/* Run-time compilation of C translation units for the CPU backend: the system
 * C compiler runs as a child process (no shell), the shared object it writes
 * is kept in the kernel cache (memory and disk) and loaded with dlopen from an
 * anonymous memory file.
 *
 * Loaded modules stay loaded for the process, also across
 * cube__cache_shutdown (which only makes the cache forget them): functions
 * handed out stay callable. Each keeps one close-on-exec file descriptor open
 * (its memfd): dlopen knows objects by path, and "/proc/self/fd/<n>" must not
 * name two modules.
 *
 * Thread-safe; concurrent compiles of one key in a process are serialised
 * (the second waits and gets a memory hit), across processes both compile and
 * the disk store is atomic.
 */
#ifndef CUBE_BACKENDS_CPU_CPU_COMPILER_H_
#define CUBE_BACKENDS_CPU_CPU_COMPILER_H_

#include <stdbool.h>

#include "cube/backends/cpu.h"
#include "cube/kernel.h"
#include "cube/status.h"
#include "kernel/cache.h"

/* The C compiler the CPU backend uses: CUBE_CC if set (a program name looked
 * up on PATH, or a path), else clang if on PATH, else cc; its identity
 * ("<path> | <first line of --version> | <flags>") for cache keys. Every
 * compile runs "<cc> <cube__cpu_cc_flags()> -x c - -o <tmp>.so" with the unit
 * on stdin. The strings
 * stay valid for the process. Fails with UNAVAILABLE naming the program when
 * it cannot be found or run. */
cube_status_t cube__cpu_compiler(const char** out_command, const char** out_identity);

/* The flags of every compile ("-O3", "-march=native", ...), NULL-terminated;
 * static. */
const char* const* cube__cpu_cc_flags(void);

/* Runs the compiler of cube__cpu_compiler with |args| (NULL-terminated; the
 * flags of every compile ahead of them when |with_flags|) and |text| on its
 * standard input (NULL: none). *out_log: its output, stdout and stderr
 * (malloc'd, the caller frees it); *out_ok: it exited with 0. Fails with
 * UNAVAILABLE when no compiler can be found or started. Thread-safe. */
cube_status_t cube__cpu_cc_capture(bool with_flags, const char* const* args, const char* text,
                                   char** out_log, bool* out_ok);

typedef struct cube__cpu_module cube__cpu_module_t; /* a loaded shared object */

/* Compiles the C translation unit |text| (memory hit -> disk hit -> compile),
 * loads it and returns the exported function |symbol| as a native kernel.
 * |key| identifies the unit (the caller hashes text, compiler identity,
 * machine, runtime version). |display_name| ("saxpy") names it in messages.
 * The module stays loaded for the process.
 *
 * Errors: COMPILATION_FAILED with the compiler's messages ("compiling kernel
 * 'saxpy' with /usr/bin/clang failed:\n saxpy.cube:12:5: error: ..."),
 * UNAVAILABLE when the compiler cannot be found or started, NOT_FOUND when
 * the module lacks |symbol|, INTERNAL when a freshly compiled module cannot be
 * loaded. A disk entry that does not load counts as corrupt and is rebuilt. */
cube_status_t cube__cpu_compile(const char* text, cube__cache_key_t key, const char* symbol,
                                const char* display_name, cube_cpu_kernel_fn* out_fn);

/* As cube__cpu_compile for the unit of the dialect kernel |entry| of
 * |source| (cube__dialect_generate): the compiler's messages are filtered to
 * the user's file (cube__dialect_log_filter), with no temporary path. */
cube_status_t cube__cpu_compile_kernel(const char* text, cube__cache_key_t key, const char* symbol,
                                       const char* display_name, const char* entry,
                                       const char* source, cube_cpu_kernel_fn* out_fn);

/* The host CPU for cache keys (-march=native binaries must not move between
 * CPU models): "<model name> | <arch> | avx2=<0|1> avx512f=<0|1> | flags=<hash>".
 * Static string. */
const char* cube__cpu_machine_id(void);

/* The CPU device identity (CUBE__CTL_DEVICE_IDENTITY, and the device of the
 * kernel cache's "so" entries): "cpu | <machine id> | cc: <compiler
 * identity>", the compiler as CUBE_CC says now. */
void cube__cpu_identity(char* out, size_t size);

#endif /* CUBE_BACKENDS_CPU_CPU_COMPILER_H_ */
