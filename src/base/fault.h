/* Fault injection (SQLite-style "fail the Nth call") for tests.
 *
 * A site is a place in the library that can fail for reasons outside its
 * control (memory, a device, a compiler, a disk). Each site calls
 * cube__fault_hit(site) and fails as it would for real when it returns true:
 *
 *   CUBE__FAULT_RETURN(CUBE__FAULT_CACHE_STORE, CUBE_STATUS_INTERNAL,
 *                      "kernel cache: storing %s failed", ...);
 *
 * Configured by the environment, read once on the first hit:
 *   CUBE_FAULT=<site>:<n>[:<count>][,<site>:<n>[:<count>]...]
 * fails the nth call (1-based) of <site> and the count-1 calls after it
 * (count defaults to 1); <site> is a name below, case-insensitive
 * ("cpu_alloc", "cuda_write", "kernel_compile"), or by the test API
 * cube__fault_set / cube__fault_reset. CUBE_FAULT is an option of the table
 * (base/options.h): a malformed value arms nothing, and the entry points
 * report it.
 *
 * Per-site call counters are kept only once faults are in use (the
 * environment set one, or the test API was called); until then a hit is one
 * relaxed atomic load and a compare. Thread-safe.
 */
#ifndef CUBE_BASE_FAULT_H_
#define CUBE_BASE_FAULT_H_

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

/* The backends and their fallible slots (src/backends/backend.h): every
 * (backend, slot) pair is a site named "<backend>_<slot>" ("cpu_alloc",
 * "cuda_write"), hit by the slot's wrapper in src/backends/backend.c before
 * the backend is called, so each backend fails under its own name. The
 * backend order is cube_backend_t's. */
#define CUBE__FAULT_BACKENDS(X) X(CPU, cpu) X(CUDA, cuda) X(OPENCL, opencl) X(NULL, null)
#define CUBE__FAULT_BACKEND_SLOTS(X) \
  X(DEVICE_CREATE, device_create)    \
  X(ALLOC, alloc)                    \
  X(HOST_ALLOC, host_alloc)          \
  X(STREAM_CREATE, stream_create)    \
  X(WRITE, write)                    \
  X(READ, read)                      \
  X(LAUNCH, launch)                  \
  X(PREPARE, prepare)                \
  X(SYNC, sync)                      \
  X(EVENT_RECORD, event_record)      \
  X(EVENT_WAIT, event_wait)          \
  X(EVENT_SYNC, event_sync)          \
  X(EVENT_ELAPSED, event_elapsed)    \
  X(CTL, ctl)                        \
  X(GRAPH_CREATE, graph_create)      \
  X(GRAPH_UPDATE, graph_update)      \
  X(GRAPH_LAUNCH, graph_launch)      \
  X(COPY, copy)

#define CUBE__FAULT_COUNT_ONE(id, name) +1
enum {
  CUBE__FAULT_BACKEND_COUNT = 0 CUBE__FAULT_BACKENDS(CUBE__FAULT_COUNT_ONE),
  CUBE__FAULT_SLOT_COUNT = 0 CUBE__FAULT_BACKEND_SLOTS(CUBE__FAULT_COUNT_ONE),
};
#undef CUBE__FAULT_COUNT_ONE

#define CUBE__FAULT_S_CPU(id, name) CUBE__FAULT_CPU_##id,
#define CUBE__FAULT_S_CUDA(id, name) CUBE__FAULT_CUDA_##id,
#define CUBE__FAULT_S_OPENCL(id, name) CUBE__FAULT_OPENCL_##id,
#define CUBE__FAULT_S_NULL(id, name) CUBE__FAULT_NULL_##id,

typedef enum cube__fault_site {
  /* Sites that are not a backend slot. */
  CUBE__FAULT_KERNEL_COMPILE = 0, /* any backend's compiler, just before it runs (a cache miss) */
  CUBE__FAULT_CACHE_STORE,        /* kernel cache: a disk store fails like a full disk */
  /* CUBE__FAULT_<BACKEND>_<SLOT> (CUBE__FAULT_CPU_ALLOC ...), backend by
   * backend in the order above: see cube__fault_backend_site. */
  CUBE__FAULT_BACKEND_SLOTS(CUBE__FAULT_S_CPU)
  CUBE__FAULT_BACKEND_SLOTS(CUBE__FAULT_S_CUDA)
  CUBE__FAULT_BACKEND_SLOTS(CUBE__FAULT_S_OPENCL)
  CUBE__FAULT_BACKEND_SLOTS(CUBE__FAULT_S_NULL)
  CUBE__FAULT_SITE_COUNT
} cube__fault_site_t;

#define CUBE__FAULT_BACKEND_BASE CUBE__FAULT_CPU_DEVICE_CREATE
_Static_assert(CUBE__FAULT_SITE_COUNT ==
                   CUBE__FAULT_BACKEND_BASE + CUBE__FAULT_BACKEND_COUNT * CUBE__FAULT_SLOT_COUNT,
               "one site per (backend, slot)");

/* The site of |slot| (a CUBE__FAULT_BACKEND_SLOTS index) of |backend| (a
 * cube_backend_t); CUBE__FAULT_SITE_COUNT (never hit) when out of range. */
static inline cube__fault_site_t cube__fault_backend_site(unsigned backend, unsigned slot) {
  if (backend >= CUBE__FAULT_BACKEND_COUNT || slot >= CUBE__FAULT_SLOT_COUNT)
    return CUBE__FAULT_SITE_COUNT;
  return (cube__fault_site_t)(CUBE__FAULT_BACKEND_BASE + backend * CUBE__FAULT_SLOT_COUNT + slot);
}

/* 0: not yet initialised, 1: off (no counting), 2: on. */
extern atomic_uint cube__fault_mode;

bool cube__fault_hit_slow(cube__fault_site_t site);

/* True when this call of |site| should fail. */
static inline bool cube__fault_hit(cube__fault_site_t site) {
  if (__builtin_expect(atomic_load_explicit(&cube__fault_mode, memory_order_relaxed) == 1u, 1))
    return false;
  return cube__fault_hit_slow(site);
}

/* Returns a |code| status ("<message> (injected fault)") from the enclosing
 * function when this call of |site| should fail. */
#define CUBE__FAULT_RETURN(site, code, ...)                                         \
  do {                                                                              \
    if (cube__fault_hit(site)) return cube__fault_status((code), __VA_ARGS__);      \
  } while (0)

cube_status_t cube__fault_status(cube_status_code_t code, const char* fmt, ...) CUBE_PRINTF(2, 3);

/* Test API. Turns counting on. Fails calls nth .. nth+count-1 of |site|,
 * counted from now (the site's counter restarts at 0); nth 0 or count 0
 * fails none. */
void cube__fault_set(cube__fault_site_t site, uint64_t nth, uint64_t count);
/* No faults anywhere, every counter back to 0; counting stays on. */
void cube__fault_reset(void);
/* Calls of |site| counted since the last set (of that site) or reset. */
uint64_t cube__fault_calls(cube__fault_site_t site);
/* Faults injected at |site| since the last set (of that site) or reset. */
uint64_t cube__fault_injected(cube__fault_site_t site);

/* "cpu_alloc", ... ("?" out of range); and the reverse (case-insensitive;
 * false if unknown). Backend site names are "<backend>_<slot>". */
const char* cube__fault_site_name(cube__fault_site_t site);
bool cube__fault_site_parse(const char* name, size_t len, cube__fault_site_t* out);

#endif /* CUBE_BASE_FAULT_H_ */
