/* cube/options.h: options of a device's server (cube_client_init), the
 * parameters of its backend, and the process-wide option table
 * (cube_option_get/set).
 *
 * A server is created once per device, by the first cube_client_init or
 * cube_client_load of that device; its options are fixed from then on.
 * Every option left zero takes its value from the environment (CUBE_DEVICE_
 * QUEUE, CUBE_PROFILE, CUBE_CHECK_MODE, CUBE_MEMORY_LIMIT, CUBE_MAX_STREAMS,
 * CUBE_LOG_FILE, CUBE_GRAPHS, CUBE_GRAPHS_WARMUP), else the built-in
 * default, so a zeroed struct (or NULL) is "defaults".
 *
 * cube_server_options_t is an input struct (cube/cube.h, "Struct sizes"):
 * fill it with cube_server_options_initialize, or zero it (struct_size 0
 * means this header's layout).
 *
 * Thread safety: the functions here are thread-safe; an options struct is
 * the caller's and is only read during the call that takes it.
 */
#ifndef CUBE_OPTIONS_H_
#define CUBE_OPTIONS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube/device.h"
#include "cube/profile.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Server options ----------------------------------------------------------- */

typedef enum cube_queue_mode_e {
  CUBE_QUEUE_DEFAULT = 0,  /* CUBE_DEVICE_QUEUE, else threaded */
  CUBE_QUEUE_THREADED = 1, /* a runner thread fed by a lock-free queue */
  CUBE_QUEUE_INLINE = 2,   /* run on the caller's thread under the device lock */
} cube_queue_mode_t;

typedef enum cube_memory_config_e {
  /* The default: small requests in small sliced pages, larger ones each in
   * a buffer of their own size, free buffers given back when the pools
   * would grow past what is in use (docs/observability.md, "Memory that is
   * not wasted"). */
  CUBE_MEMORY_CONFIG_FITTED = 0,
  CUBE_MEMORY_CONFIG_EXCLUSIVE_PAGES = 1, /* CubeCL's (docs/cubecl.md, "Memory") */
  CUBE_MEMORY_CONFIG_SUBSLICES = 2,       /* CubeCL's page ladder (its default) */
} cube_memory_config_t;

typedef enum cube_check_mode_e {
  CUBE_CHECK_AUTO = 0,     /* launch_unchecked runs Unchecked */
  CUBE_CHECK_ENFORCE = 1,  /* launch_unchecked runs Checked */
  CUBE_CHECK_VALIDATE = 2, /* launch_unchecked runs Validate */
} cube_check_mode_t;

typedef enum cube_graphs_mode_e {
  CUBE_GRAPHS_DEFAULT = 0, /* CUBE_GRAPHS, else off */
  CUBE_GRAPHS_OFF = 1,     /* launches are queued as they come (eager) */
  CUBE_GRAPHS_AUTO = 2,    /* automatic capture: a step of launches that repeats is replayed as
                              a graph (cube/graph.h, docs/graphs.md "Automatic capture") */
} cube_graphs_mode_t;

typedef struct cube_server_options {
  size_t struct_size;                 /* 0 or sizeof(cube_server_options_t) */
  cube_queue_mode_t queue_mode;
  cube_profile_level_t profile_level; /* CUBE_PROFILE when left NONE */
  cube_memory_config_t memory_config;
  cube_check_mode_t check_mode;       /* CUBE_CHECK_MODE when left AUTO */
  uint64_t memory_limit;              /* bytes; 0 = CUBE_MEMORY_LIMIT or none */
  uint32_t max_streams;               /* 0 = CUBE_MAX_STREAMS or 128 */
  cube_log_fn log_fn;                 /* NULL = CUBE_LOG_FILE or stderr */
  void* log_user;                     /* passed to log_fn; the caller keeps it alive as long
                                         as the server lives (until cube_shutdown) */
  /* NULL, or the parameters of the device's backend: a cube_cuda_params_t
   * (cube/backends/cuda.h), cube_cpu_params_t (cube/backends/cpu.h)...,
   * beginning with a cube_backend_params_header_t (below: struct size and
   * backend tag, both checked). Borrowed for the call. NULL: the option
   * table's values (the environment unless set with cube_option_set). */
  const void* backend_params;
  cube_graphs_mode_t graphs;          /* CUBE_GRAPHS when left DEFAULT */
  uint32_t graphs_warmup;             /* auto: steps seen alike (run eagerly) before the next
                                         one is replayed; 0 = CUBE_GRAPHS_WARMUP or 2 */
} cube_server_options_t;

/* Fills |options| with the defaults (every option zero: take the environment)
 * and sets struct_size to sizeof(cube_server_options_t). NULL is ignored. */
void cube_server_options_initialize(cube_server_options_t* options);

/* Process-wide options (cube_option_get/set) */

/* Every CUBE_* environment variable is an option of one table (`cube info
 * --options` lists them with their values and sources; README.md has the
 * table). An option has a type, a default, the values it accepts, and a
 * scope:
 *  - process-wide options (CUBE_BACKEND, CUBE_CACHE_DIR, ...) are read and
 *    changed here;
 *  - per-device options (CUBE_MEMORY_LIMIT, CUBE_CUDA_STAGING_CHUNK, ...) are
 *    the defaults of devices created later; a device takes its own values
 *    from cube_server_options_t and its backend's parameters
 *    (cube_cuda_params_t, cube_cpu_params_t) given to cube_client_init. They
 *    can be read here, not set.
 *
 * Resolution. The table is read from the environment once, on the first
 * call that needs an option, and again after each cube_shutdown (which
 * forgets the values that came from the environment; values set here are
 * kept). Changing the environment in between has no effect: set the option
 * here instead, or call cube_shutdown. An empty variable counts as unset.
 *
 * Malformed values. A variable whose value is not accepted does not take
 * effect: the option keeps its default, and every status-returning entry
 * point below fails with CUBE_STATUS_INVALID_ARGUMENT naming the variable,
 * the value and what is accepted, until the option is set here or the
 * environment is fixed (and cube_shutdown called):
 *   cube_client_load, cube_client_init, cube_backend_status,
 *   cube_enumerate_devices, cube_enumerate_all_devices, cube_collective_world,
 *   cube_kernel_create, cube_kernel_cache_stats, cube_kernel_cache_dir_status,
 *   cube_kernel_cache_clear and cube_options_check; cube_trace_start for a
 *   refused CUBE_TRACE_RECORDS (the ring it would size).
 * Calls that return no status (cube_backend_default, cube_device_count,
 * cube_kernel_cache_dir) use the default meanwhile.
 *
 * When a value takes effect (cube_option_info_t.when):
 *  - CUBE_OPTION_AT_USE: read at each use (the default backend, the kernel
 *    cache directory, the C compiler, the collective timeout): a set takes
 *    effect at the next use.
 *  - CUBE_OPTION_AT_START: read when the runtime first needs it (device
 *    counts, the worker pool): set it before that, or after cube_shutdown;
 *    later sets fail with CUBE_STATUS_FAILED_PRECONDITION.
 *  - CUBE_OPTION_ONCE: read once per process (a library is loaded, fault
 *    injection armed, the collective world fixed): set it before the first
 *    use; later sets fail with CUBE_STATUS_FAILED_PRECONDITION, even after
 *    cube_shutdown.
 *  - CUBE_OPTION_AT_DEVICE_CREATION: per-device; read when a device's
 *    server is created, unless its options or parameters give the value.
 *
 * Threading. Every function here is thread-safe. A get concurrent with a set
 * of the same option sees the old or the new value. */

/* The options, in the order of the table. */
typedef enum cube_option_e {
  CUBE_OPTION_BACKEND = 0,
  CUBE_OPTION_CPU_DEVICES,
  CUBE_OPTION_CPU_THREADS,
  CUBE_OPTION_NULL_DEVICES,
  CUBE_OPTION_DEVICE_QUEUE,
  CUBE_OPTION_MEMORY_LIMIT,
  CUBE_OPTION_MAX_STREAMS,
  CUBE_OPTION_CHECK_MODE,
  CUBE_OPTION_PROFILE,
  CUBE_OPTION_LOG_FILE,
  CUBE_OPTION_CC,
  CUBE_OPTION_CACHE_DIR,
  CUBE_OPTION_COLLECTIVE_TIMEOUT,
  CUBE_OPTION_COLLECTIVE_MPI,
  CUBE_OPTION_COLLECTIVE_RANK,
  CUBE_OPTION_COLLECTIVE_RANKS,
  CUBE_OPTION_MPI_PLUGIN,
  CUBE_OPTION_FAULT,
  CUBE_OPTION_CUDA_DRIVER,
  CUBE_OPTION_NVRTC,
  CUBE_OPTION_CUDA_ASYNC_ALLOC,
  CUBE_OPTION_CUDA_COPY_THREADS,
  CUBE_OPTION_CUDA_STAGING_CHUNK,
  CUBE_OPTION_CUDA_STREAM_COPY,
  CUBE_OPTION_OPENCL_LIBRARY,
  CUBE_OPTION_NCCL_LIBRARY,
  CUBE_OPTION_NCCL_ID_FILE,
  CUBE_OPTION_NCCL_BLOCKING,
  CUBE_OPTION_GRAPHS_NATIVE,
  CUBE_OPTION_GRAPHS,
  CUBE_OPTION_GRAPHS_WARMUP,
  CUBE_OPTION_CALLER_RUNS,
  CUBE_OPTION_CACHE_MAX,
  CUBE_OPTION_COMPILE_TIMEOUT,
  CUBE_OPTION_TUNE,
  CUBE_OPTION_TUNE_BUDGET,
  CUBE_OPTION_CPU_HUGE_PAGES,
  CUBE_OPTION_CPU_FAULT_GUARD,
  CUBE_OPTION_TRACE,
  CUBE_OPTION_TRACE_RECORDS,
  CUBE_OPTION_COMPILE_NOTICE,
  CUBE_OPTION_CUPTI,
  CUBE_OPTION_DEVICE_RECOVER,
  CUBE_OPTION_CUDA_KERNEL_TIMER,
} cube_option_t;

typedef enum cube_option_type_e {
  CUBE_OPTION_TYPE_BOOL = 0, /* 1/0, true/false, yes/no, on/off */
  CUBE_OPTION_TYPE_U32,      /* decimal integer in a range */
  CUBE_OPTION_TYPE_SIZE,     /* bytes: 1048576, 512K, 64MiB, 2G, 1.5GiB */
  CUBE_OPTION_TYPE_SECONDS,  /* a decimal number of seconds (0.3, 60) */
  CUBE_OPTION_TYPE_ENUM,     /* one of a list of words (case-insensitive) */
  CUBE_OPTION_TYPE_STRING,
  CUBE_OPTION_TYPE_PATH,     /* a file or directory name */
} cube_option_type_t;

typedef enum cube_option_scope_e {
  CUBE_OPTION_SCOPE_PROCESS = 0,
  CUBE_OPTION_SCOPE_DEVICE = 1, /* the default of devices created later */
} cube_option_scope_t;

typedef enum cube_option_when_e {
  CUBE_OPTION_AT_USE = 0,
  CUBE_OPTION_AT_START = 1,
  CUBE_OPTION_ONCE = 2,
  CUBE_OPTION_AT_DEVICE_CREATION = 3,
} cube_option_when_t;

typedef enum cube_option_source_e {
  CUBE_OPTION_SOURCE_DEFAULT = 0,
  CUBE_OPTION_SOURCE_ENVIRONMENT = 1,
  CUBE_OPTION_SOURCE_API = 2, /* cube_option_set* */
} cube_option_source_t;

/* What an option is. Every string is static (valid for the process). */
typedef struct cube_option_info {
  cube_option_t option;
  const char* name;          /* the variable: "CUBE_BACKEND" */
  cube_option_type_t type;
  cube_option_scope_t scope;
  cube_option_when_t when;
  const char* default_value; /* the default as text; NULL when there is none */
  const char* default_doc;   /* what the default is, in words ("the cores this process may use") */
  const char* accepted;      /* "one of cpu, cuda, opencl, null", "an integer in [1, 64]" */
  const char* doc;           /* one line */
  cube_option_source_t source;
  bool rejected;             /* the environment's value was refused (cube_options_check says why) */
} cube_option_info_t;

/* The option named |name| (the variable name, case-insensitive, with or
 * without the CUBE_ prefix). INVALID_ARGUMENT for NULL, NOT_FOUND for a name
 * that is no option. */
CUBE_MUST_USE_RESULT cube_status_t cube_option_find(const char* name, cube_option_t* out_option);

/* The variable name of |option| ("CUBE_BACKEND"); NULL when out of range. */
const char* cube_option_name(cube_option_t option);

/* Describes |option| (resolving the table first). INVALID_ARGUMENT when out
 * of range or |out_info| is NULL. */
CUBE_MUST_USE_RESULT cube_status_t cube_option_describe(cube_option_t option,
                                                        cube_option_info_t* out_info);

/* The value of option |name| as text into |buf| (|size| bytes, NUL
 * terminated; "" when the option has no value: its default is computed
 * where it is used, see default_doc), and where it came from. Fails with
 * INVALID_ARGUMENT for NULL arguments, NOT_FOUND for an unknown name,
 * OUT_OF_RANGE when |buf| is too small (nothing written but the source). */
CUBE_MUST_USE_RESULT cube_status_t cube_option_get(const char* name, char* buf, size_t size,
                                                   cube_option_source_t* out_source);

/* Sets process-wide option |name| from |text|, parsed as the environment's
 * value would be; NULL |text| forgets a value set here (the option goes back
 * to the environment's value or its default). Fails, changing nothing, with
 *  - INVALID_ARGUMENT: NULL |name|, a value not accepted (the message says
 *    what is), or a per-device option (give it to cube_client_init);
 *  - NOT_FOUND: no option has that name;
 *  - FAILED_PRECONDITION: an AT_START option the runtime already read since
 *    the last cube_shutdown, or a ONCE option already read in this process. */
CUBE_MUST_USE_RESULT cube_status_t cube_option_set(const char* name, const char* text);

/* Typed access. _u64: BOOL (0 or 1), U32, SIZE (bytes) and ENUM (the word's
 * index) options; _double: SECONDS options. A get of an option without a
 * value fails with NOT_FOUND; an option of another type, or out of range,
 * with INVALID_ARGUMENT. Sets fail as cube_option_set does. */
CUBE_MUST_USE_RESULT cube_status_t cube_option_get_u64(cube_option_t option, uint64_t* out_value);
CUBE_MUST_USE_RESULT cube_status_t cube_option_set_u64(cube_option_t option, uint64_t value);
CUBE_MUST_USE_RESULT cube_status_t cube_option_get_double(cube_option_t option, double* out_value);
CUBE_MUST_USE_RESULT cube_status_t cube_option_set_double(cube_option_t option, double value);

/* CUBE_OK when every option's environment value was accepted, else the
 * INVALID_ARGUMENT status that the entry points above report (every refused
 * variable, its value and what is accepted). */
CUBE_MUST_USE_RESULT cube_status_t cube_options_check(void);

/* Backend parameters. cube_server_options_t.backend_params points to the
 * parameter struct of the device's backend (cube_cuda_params_t in
 * cube/backends/cuda.h, cube_cpu_params_t in cube/backends/cpu.h), which
 * begins with this header: struct_size is sizeof the struct as the caller
 * compiled it, backend the backend it is for. Fill it with the backend's
 * _params_initialize, then change fields. cube_client_init fails with
 * INVALID_ARGUMENT when the tag is not the device's backend, when
 * struct_size is not one the backend knows, or when a field is out of
 * range; the struct is read during the call only. */
typedef struct cube_backend_params_header {
  uint32_t struct_size;
  cube_backend_t backend;
} cube_backend_params_header_t;

#ifdef __cplusplus
}
#endif

#endif /* CUBE_OPTIONS_H_ */
