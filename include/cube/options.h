/* cube/options.h: options of a device's server (cube_client_init).
 *
 * A server is created once per device, by the first cube_client_init or
 * cube_client_load of that device; its options are fixed from then on.
 * Every option left zero takes its value from the environment (CUBE_DEVICE_
 * QUEUE, CUBE_PROFILE, CUBE_CHECK_MODE, CUBE_MEMORY_LIMIT, CUBE_MAX_STREAMS,
 * CUBE_LOG_FILE), else the built-in default, so a zeroed struct (or NULL) is
 * "defaults".
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

#include <stddef.h>
#include <stdint.h>

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
  CUBE_MEMORY_CONFIG_SUBSLICES = 0, /* the default page ladder (docs/cubecl.md, "Memory") */
  CUBE_MEMORY_CONFIG_EXCLUSIVE_PAGES = 1,
} cube_memory_config_t;

typedef enum cube_check_mode_e {
  CUBE_CHECK_AUTO = 0,     /* launch_unchecked runs Unchecked */
  CUBE_CHECK_ENFORCE = 1,  /* launch_unchecked runs Checked */
  CUBE_CHECK_VALIDATE = 2, /* launch_unchecked runs Validate */
} cube_check_mode_t;

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
} cube_server_options_t;

/* Fills |options| with the defaults (every option zero: take the environment)
 * and sets struct_size to sizeof(cube_server_options_t). NULL is ignored. */
void cube_server_options_initialize(cube_server_options_t* options);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_OPTIONS_H_ */
