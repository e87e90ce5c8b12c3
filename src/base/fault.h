/* Fault injection (SQLite-style "fail the Nth call") for tests.
 *
 * A site is a place in the library that can fail for reasons outside its
 * control (memory, a device, a compiler, a disk). Each site calls
 * cube__fault_hit(site) and fails as it would for real when it returns true:
 *
 *   CUBE__FAULT_RETURN(CUBE__FAULT_CPU_ALLOC, CUBE_STATUS_OUT_OF_MEMORY,
 *                      "cpu device %u: allocation of %llu bytes failed", ...);
 *
 * Configured by the environment, read once on the first hit:
 *   CUBE_FAULT=<site>:<n>[:<count>][,<site>:<n>[:<count>]...]
 * fails the nth call (1-based) of <site> and the count-1 calls after it
 * (count defaults to 1); <site> is a name below, case-insensitive
 * ("cpu_alloc"), or by the test API cube__fault_set / cube__fault_reset.
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

typedef enum cube__fault_site {
  CUBE__FAULT_CPU_ALLOC = 0,   /* CPU backend: device storage allocation */
  CUBE__FAULT_CPU_HOST_ALLOC,  /* CPU backend: pinned (staging) allocation */
  CUBE__FAULT_CPU_WRITE,       /* CPU backend: host -> device copy */
  CUBE__FAULT_CPU_READ,        /* CPU backend: device -> host copy */
  CUBE__FAULT_CPU_LAUNCH,      /* CPU backend: a kernel launch */
  CUBE__FAULT_KERNEL_COMPILE,  /* CPU compiler: before the compiler is spawned */
  CUBE__FAULT_CACHE_STORE,     /* kernel cache: a disk store fails like a full disk */
  CUBE__FAULT_SITE_COUNT
} cube__fault_site_t;

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
 * false if unknown). */
const char* cube__fault_site_name(cube__fault_site_t site);
bool cube__fault_site_parse(const char* name, size_t len, cube__fault_site_t* out);

#endif /* CUBE_BASE_FAULT_H_ */
