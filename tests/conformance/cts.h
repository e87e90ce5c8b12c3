/* The conformance suite: written once against the public API, run for every
 * backend (and queue variant) listed in tests/CMakeLists.txt
 * (CUBE_CTS_BACKENDS). `cube_cts --backend <name> <case>` runs one case.
 *
 * Backend names: "cpu" (threaded queue), "cpu-inline" (inline queue). A new
 * backend adds one entry to cts_backends in cts_main.c and one word in
 * CUBE_CTS_BACKENDS. A backend that is unavailable here makes every case
 * skip (exit 77), never pass.
 */
#ifndef CUBE_CTS_H_
#define CUBE_CTS_H_

#include "check.h"
#include "cube/cube.h"

typedef struct cts_backend {
  const char* name;       /* as on the command line */
  cube_backend_t backend;
  const char* queue_mode; /* value for CUBE_DEVICE_QUEUE, NULL = default */
} cts_backend_t;

/* The backend this process runs the suite for. */
const cts_backend_t* cts_backend(void);

/* Device |index| of the backend under test. */
cube_device_id_t cts_device(uint32_t index);

/* A client of device 0 (REQUIREs success; skips the case when the backend is
 * absent, via CTS_CLIENT below). */
#define CTS_CLIENT(var)                                                        \
  cube_client_t* var = NULL;                                                   \
  do {                                                                         \
    cube_status_t cts_s_ = cube_client_load(cts_device(0), &var);              \
    if (cube_status_code(cts_s_) == CUBE_STATUS_UNAVAILABLE) {                 \
      cube_status_free(cts_s_);                                                \
      CUBE_SKIP("backend %s unavailable", cts_backend()->name);                \
    }                                                                          \
    REQUIRE_OK(cts_s_);                                                        \
  } while (0)

/* Skips the case unless the backend has at least |n| devices. */
#define CTS_REQUIRE_DEVICES(n)                                                 \
  do {                                                                         \
    if (cube_device_count(cts_backend()->backend) < (size_t)(n))               \
      CUBE_SKIP("needs %d devices of %s", (int)(n), cts_backend()->name);      \
  } while (0)

/* Reads |h| and compares it with |expect| (|n| bytes). */
int cts_read_equals(cube_client_t* c, cube_handle_t h, const void* expect, size_t n);

#endif /* CUBE_CTS_H_ */
