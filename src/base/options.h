/* The option table: every CUBE_* environment variable, in one X-macro list,
 * parsed and checked in one place (options.c). The public side is
 * include/cube/options.h (cube_option_get/set, cube_options_check); this
 * header is what the rest of the library reads options with.
 *
 * Reads are lock-free (one atomic load) and never fail: an option whose
 * environment value was refused reads as its default, and
 * cube__options_check reports it at the entry points listed in
 * include/cube/options.h. The table is resolved on the first read and again
 * after cube_shutdown (cube__options_reset).
 */
#ifndef CUBE_BASE_OPTIONS_H_
#define CUBE_BASE_OPTIONS_H_

#include <stdbool.h>
#include <stdint.h>

#include "cube/options.h"
#include "cube/status.h"

/* Limits the table shares with the code that uses the values (each consumer
 * asserts it at compile time): the worker pool's threads, the CPU backend's
 * and the null backend's devices. */
#define CUBE__OPT_CPU_THREADS_MAX 1024
#define CUBE__OPT_CPU_DEVICES_MAX 64
#define CUBE__OPT_NULL_DEVICES_MAX 16

/* X(ID, TYPE, SCOPE, WHEN, DEFAULT, DEFAULT_DOC, MIN, MAX, STEP, WORDS, CHECK, DOC)
 *   ID           the variable is CUBE_<ID>; the public id CUBE_OPTION_<ID>
 *   TYPE         BOOL, U32, SIZE, SECONDS, ENUM, STRING, PATH
 *   SCOPE        PROCESS or DEVICE
 *   WHEN         AT_USE, AT_START, ONCE, AT_DEVICE_CREATION (see cube/options.h)
 *   DEFAULT      the default as the environment would spell it; NULL: none
 *                (the reader computes it: DEFAULT_DOC says what it is)
 *   DEFAULT_DOC  the default in words (README.md's table shows it)
 *   MIN, MAX     U32/SIZE: the accepted range; SECONDS: (MIN, MAX], MIN
 *                excluded; STRING/PATH: MAX is the longest value in bytes
 *   STEP         SIZE: values must be a multiple of it (0: any)
 *   WORDS        ENUM: "a|b|c" (value = index), "alias=b" maps a word onto
 *                another; the canonical words come first. STRING/PATH: what
 *                is accepted, in words (NULL: any text up to MAX bytes)
 *   CHECK        STRING: a syntax check, cube_status_t (*)(const char* text)
 *                returning INVALID_ARGUMENT with what is wrong; NULL: none
 *   DOC          one line */
#define CUBE__OPTION_TABLE(X)                                                                    \
  X(BACKEND, ENUM, PROCESS, AT_USE, "cpu", "cpu", 0, 0, 0, "cpu|cuda|opencl|null", NULL,          \
    "the default backend (cube_backend_default; cube demo)")                                     \
  X(CPU_DEVICES, U32, PROCESS, AT_START, "1", "1", 1, CUBE__OPT_CPU_DEVICES_MAX, 0, NULL, NULL,   \
    "logical CPU devices, sharing one worker pool")                                               \
  X(CPU_THREADS, U32, PROCESS, AT_START, NULL, "the cores this process may use, at most 1024",    \
    1, CUBE__OPT_CPU_THREADS_MAX, 0, NULL, NULL,                                                 \
    "threads of the process's worker pool (CPU kernels and the CUDA staging copies)")            \
  X(NULL_DEVICES, U32, PROCESS, AT_START, "0", "0", 0, CUBE__OPT_NULL_DEVICES_MAX, 0, NULL, NULL, \
    "devices of the null backend (a skeleton that keeps host memory, for tests)")               \
  X(DEVICE_QUEUE, ENUM, DEVICE, AT_DEVICE_CREATION, "threaded", "threaded", 0, 0, 0,              \
    "threaded|inline", NULL,                                                                     \
    "threaded: a runner thread per device; inline: the caller's thread (queue_mode)")            \
  X(MEMORY_LIMIT, SIZE, DEVICE, AT_DEVICE_CREATION, "0", "0 (none)", 0, 18446744073709551615.0, \
    0, NULL, NULL, "cap on device memory a device's pools may hold, e.g. 512M, 2G (memory_limit)")\
  X(MAX_STREAMS, U32, DEVICE, AT_DEVICE_CREATION, "128", "128", 1, 65536, 0, NULL, NULL,          \
    "logical streams per device; a stream id is taken modulo this (max_streams)")               \
  X(CHECK_MODE, ENUM, DEVICE, AT_DEVICE_CREATION, "auto", "auto", 0, 0, 0,                        \
    "auto|enforce|validate", NULL,                                                               \
    "mode of launch_unchecked: auto (unchecked), enforce, validate (check_mode)")                \
  X(PROFILE, ENUM, DEVICE, AT_DEVICE_CREATION, "none", "none", 0, 0, 0,                           \
    "none|exec|basic|medium|full|disabled=none|minimal=exec", NULL,                              \
    "profile level, see include/cube/profile.h (profile_level)")                                 \
  X(LOG_FILE, PATH, DEVICE, AT_DEVICE_CREATION, NULL, "stderr", 0, 4095, 0, NULL, NULL,           \
    "the file profile lines are appended to (log_fn)")                                          \
  X(CC, STRING, PROCESS, AT_USE, NULL, "clang if on PATH, else cc", 0, 4095, 0, NULL, NULL,       \
    "the C compiler for CPU dialect kernels")                                                    \
  X(CACHE_DIR, PATH, PROCESS, AT_USE, NULL, "$XDG_CACHE_HOME/cube or ~/.cache/cube", 0, 4095, 0,  \
    "a directory (at most 4095 bytes) or off", NULL,                                            \
    "the kernel cache directory; off: no disk cache")                                           \
  X(COLLECTIVE_TIMEOUT, SECONDS, PROCESS, AT_USE, "60", "60", 0, 1e9, 0, NULL, NULL,              \
    "seconds a collective waits for its participants before failing with the missing ones "     \
    "named")                                                                                     \
  X(COLLECTIVE_MPI, ENUM, PROCESS, ONCE, "auto", "auto", 0, 0, 0, "auto|1|0", NULL,               \
    "MPI for collectives across processes: 1, 0, or auto (when started by mpiexec)")             \
  X(COLLECTIVE_RANK, U32, PROCESS, ONCE, NULL, "0", 0, 65535, 0, NULL, NULL,                      \
    "without MPI: this process's place among the processes of a job (< CUBE_COLLECTIVE_RANKS)") \
  X(COLLECTIVE_RANKS, U32, PROCESS, ONCE, NULL, "1", 1, 65536, 0, NULL, NULL,                     \
    "without MPI: the number of processes of the job")                                           \
  X(MPI_PLUGIN, PATH, PROCESS, ONCE, NULL,                                                       \
    "next to libcube, then its cube/ folder, then <libdir>/cube/, then the loader's path", 0,   \
    4095, 0, NULL, NULL, "the MPI transport plugin (libcube_mpi.so) to load when MPI is wanted")\
  X(FAULT, STRING, PROCESS, ONCE, NULL, "no faults", 0, 4095, 0,                                 \
    "<site>:<n>[:<count>] items (n >= 1), comma-separated", cube__fault_spec_check,             \
    "fault injection: <site>:<n>[:<count>],... fails calls n.. of a site (src/base/fault.h)")    \
  X(CUDA_DRIVER, PATH, PROCESS, ONCE, "libcuda.so.1", "libcuda.so.1", 0, 4095, 0, NULL, NULL,     \
    "the CUDA driver library to load")                                                           \
  X(NVRTC, PATH, PROCESS, ONCE, NULL, "libnvrtc.so.13, then .12, then libnvrtc.so", 0, 4095, 0,   \
    NULL, NULL, "the NVRTC library to load")                                                     \
  X(CUDA_ASYNC_ALLOC, BOOL, DEVICE, AT_DEVICE_CREATION, "1", "1", 0, 0, 0, NULL, NULL,            \
    "stream-ordered cuMemAllocAsync where the GPU has memory pools; 0: plain cuMemAlloc pages")  \
  X(CUDA_COPY_THREADS, U32, DEVICE, AT_DEVICE_CREATION, NULL,                                     \
    "up to 16, at most the worker pool's threads", 1, 256, 0, NULL, NULL,                        \
    "threads that share the host copies of one large transfer (at most the pool's threads)")    \
  X(CUDA_STAGING_CHUNK, SIZE, DEVICE, AT_DEVICE_CREATION, "4M", "4M", 65536, 67108864, 4096,      \
    NULL, NULL, "bytes per pinned staging chunk (the ring holds at most 128 MiB)")              \
  X(CUDA_STREAM_COPY, ENUM, DEVICE, AT_DEVICE_CREATION, "down", "down", 0, 0, 0,                  \
    "down|up|1|0|both=1|none=0", NULL,                                                           \
    "non-temporal stores for the staging copies: down (downloads), up, 1 (both) or 0 (none)")   \
  X(OPENCL_LIBRARY, PATH, PROCESS, ONCE, "libOpenCL.so.1", "libOpenCL.so.1", 0, 255, 0, NULL,     \
    NULL, "the OpenCL library to load (the ICD loader)")                                         \
  X(NCCL_LIBRARY, PATH, PROCESS, ONCE, "libnccl.so.2", "libnccl.so.2", 0, 4095, 0, NULL, NULL,    \
    "the NCCL library for CUDA collectives (older than 2.14 or absent: through host buffers)")   \
  X(NCCL_ID_FILE, PATH, PROCESS, AT_USE, NULL, "none", 0, 480, 0, NULL, NULL,                     \
    "without MPI, processes sharing a communicator exchange NCCL's id through <path>.<hash>.<n>")\
  X(NCCL_BLOCKING, BOOL, PROCESS, AT_USE, "0", "0", 0, 0, 0, NULL, NULL,                          \
    "1: blocking NCCL communicators (0: nonblocking, every wait has the collective timeout)")     \
  X(GRAPHS_NATIVE, BOOL, PROCESS, AT_USE, "1", "1", 0, 0, 0, NULL, NULL,                         \
    "0: replay graphs node by node even where the driver has graphs of its own (CUDA)")     \
  X(GRAPHS, ENUM, DEVICE, AT_DEVICE_CREATION, "off", "off", 0, 0, 0, "off|auto", NULL,            \
    "auto: a stream's repeated steps of launches are captured and replayed (graphs)")             \
  X(GRAPHS_WARMUP, U32, DEVICE, AT_DEVICE_CREATION, "2", "2", 1, 1000, 0, NULL, NULL,             \
    "auto graphs: eager steps alike before the next is replayed (graphs_warmup)")                \
  X(CALLER_RUNS, BOOL, PROCESS, AT_USE, "1", "1", 0, 0, 0, NULL, NULL,                           \
    "0: reads, syncs and the launch or replay after one always run on the device's runner")     \
  X(CACHE_MAX, SIZE, PROCESS, AT_USE, "0", "0 (no limit)", 0, 18446744073709551615.0, 0, NULL,    \
    NULL, "the kernel cache directory's size limit; least recently used entries go first")     \
  X(COMPILE_TIMEOUT, SECONDS, PROCESS, AT_USE, NULL, "none", 0, 1e6, 0, NULL, NULL,                \
    "seconds a kernel compile may take; past it the compile is stopped and its launch fails")   \
  X(TUNE, ENUM, PROCESS, AT_USE, "on", "on", 0, 0, 0, "on|off|1=on|0=off", NULL,                  \
    "off: tunable operations launch their default candidate and tune nothing")                  \
  X(TUNE_BUDGET, SECONDS, PROCESS, AT_USE, "10", "10", 0, 1e6, 0, NULL, NULL,                     \
    "seconds the tuning of one key may spend measuring candidates (an operation may set less)")  \
  X(CPU_HUGE_PAGES, BOOL, PROCESS, AT_USE, "1", "1", 0, 0, 0, NULL, NULL,                         \
    "0: CPU device buffers of 4 MiB and more are not advised to use transparent huge pages")    \
  X(CPU_FAULT_GUARD, BOOL, PROCESS, AT_USE, "0", "0", 0, 0, 0, NULL, NULL,                        \
    "1: a CPU kernel that faults (SIGSEGV, SIGBUS) fails its launch instead of ending the process")\
  X(TRACE, PATH, PROCESS, ONCE, NULL, "none", 0, 4095, 0, NULL, NULL,                             \
    "record a trace (Chrome trace-event JSON) written to this file at exit; %p: the process id")\
  X(TRACE_RECORDS, U32, PROCESS, AT_USE, "65536", "65536", 16, 16777216, 0, NULL, NULL,          \
    "records a trace keeps (a ring: the oldest are dropped and counted when it is full)")         \
  X(COMPILE_NOTICE, SECONDS, PROCESS, AT_USE, "1", "1", 0, 1e6, 0, NULL, NULL,                    \
    "seconds a kernel compile runs before it is logged (when it passes them and when it ends)")   \
  X(CUPTI, PATH, PROCESS, ONCE, NULL,                                                             \
    "libcupti.so.13, then libcupti.so, then /usr/local/cuda/lib64/libcupti.so", 0, 4095, 0, NULL, \
    NULL, "the CUPTI library of CUBE_CUDA_KERNEL_TIMER=cupti; 0: none (events)")                   \
  X(DEVICE_RECOVER, ENUM, PROCESS, AT_USE, "off", "off", 0, 0, 0, "off|auto", NULL,               \
    "auto: the first call that finds a device lost recovers it (cube_device_recover)")       \
  X(CUDA_KERNEL_TIMER, ENUM, PROCESS, ONCE, "self", "self", 0, 0, 0, "self|cupti|events",          \
    NULL, "how traced and profiled CUDA kernels are timed: self (each times itself), cupti, events")

/* CUBE__OPT_<ID>: the same numbers as the public CUBE_OPTION_<ID>. */
typedef enum cube__option_id {
#define CUBE__OPTION_ID(ID, ...) CUBE__OPT_##ID,
  CUBE__OPTION_TABLE(CUBE__OPTION_ID)
#undef CUBE__OPTION_ID
  CUBE__OPT_COUNT
} cube__option_id_t;

/* The syntax check of CUBE_FAULT (base/fault.c). */
cube_status_t cube__fault_spec_check(const char* text);

/* Typed reads; each marks the option as read (an AT_START or ONCE option
 * can then no longer be set). A read of another type than the option's
 * gives 0 (NULL). */
bool cube__option_bool(cube__option_id_t id);
uint32_t cube__option_u32(cube__option_id_t id);
uint64_t cube__option_size(cube__option_id_t id);
double cube__option_seconds(cube__option_id_t id);
uint32_t cube__option_enum(cube__option_id_t id); /* the word's index */
const char* cube__option_str(cube__option_id_t id); /* NULL when unset */

/* Whether the option has a value (from the environment, the API or its
 * default); false for an unset option without a default. */
bool cube__option_has_value(cube__option_id_t id);

/* NULL, or a new INVALID_ARGUMENT status saying why the environment's value
 * of |id| was refused. */
cube_status_t cube__option_status(cube__option_id_t id);

/* NULL, or a new INVALID_ARGUMENT status "<fn>: <every refused variable>".
 * The entry points of include/cube/options.h call it first. Lock-free when
 * every value was accepted. */
cube_status_t cube__options_check(const char* fn);

/* Forgets the values that came from the environment, so that the next read
 * resolves them again; values set through the API stay, and so do ONCE
 * options already read. cube_shutdown calls it last (no other call runs). */
void cube__options_reset(void);

/* Parses |text| as a value of option |id| (what the environment and
 * cube_option_set accept), without storing it: CUBE_OK and the value's
 * bits (a u32, size, bool or enum index; a double's bits for SECONDS), or
 * INVALID_ARGUMENT naming the variable, the text and what is accepted. */
cube_status_t cube__option_parse(cube__option_id_t id, const char* text, uint64_t* out_bits);

/* Checks |value| against the values option |id| accepts (an ENUM: a word's
 * index), for parameters that mirror an option: CUBE_OK, or
 * INVALID_ARGUMENT "<what> is <value>, not <what is accepted> (as <name>)". */
cube_status_t cube__option_check_value(cube__option_id_t id, uint64_t value, const char* what);

#endif /* CUBE_BASE_OPTIONS_H_ */
