/* Platform layer: clocks, futex-backed events, threads, aligned memory,
 * machine facts and environment parsing. POSIX (Linux first). */
#ifndef CUBE_PLATFORM_H_
#define CUBE_PLATFORM_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/alloc.h"
#include "cube/status.h"

/* Monotonic clock in nanoseconds. */
uint64_t cube__now_ns(void);

static inline void cube__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* Futex on a 32-bit atomic: waits while *addr == expected, at most
 * timeout_ns (UINT64_MAX = forever). Spurious wake-ups are possible. */
void cube__futex_wait(atomic_uint* addr, unsigned expected, uint64_t timeout_ns);
void cube__futex_wake(atomic_uint* addr, int count); /* count < 0: all */

/* A one-shot event: set once, waited on by any number of threads. Waiters
 * spin briefly, then sleep on a futex. */
typedef struct cube__event {
  atomic_uint state; /* 0 unset, 1 set, 2 unset with sleepers */
} cube__event_t;

static inline void cube__event_init(cube__event_t* e) { atomic_init(&e->state, 0); }
void cube__event_set(cube__event_t* e);
bool cube__event_is_set(const cube__event_t* e);
/* Returns true when set, false on timeout. Polls a while (about 100 us on
 * current x86), then sleeps on a futex. */
bool cube__event_wait(cube__event_t* e, uint64_t timeout_ns);
/* The same with |polls| polls before sleeping (0: sleep at once). */
bool cube__event_wait_polls(cube__event_t* e, uint64_t timeout_ns, unsigned polls);
/* Rearm a set event; only when no thread waits on it. */
static inline void cube__event_reset(cube__event_t* e) { atomic_store(&e->state, 0); }

/* Threads. |name| is at most 15 characters (pthread limit). */
typedef void* (*cube__thread_fn)(void* arg);
/* True on threads that cube__thread_create started (runners, workers): a
 * backend may leave per-thread driver state (a current context) on them. */
bool cube__thread_is_cube(void);

cube_status_t cube__thread_create(pthread_t* out, cube__thread_fn fn, void* arg, const char* name,
                                  size_t stack_size);

/* Aligned heap memory lives in base/alloc.h (below this module). */

/* Machine facts. */
uint32_t cube__cpu_count(void);       /* cores this process may use (affinity) */
uint64_t cube__total_memory(void);    /* RAM, or the cgroup limit if smaller */

/* Environment variables that are not cube's (MPI launchers'); false when
 * unset or empty. cube's own CUBE_* variables are options: base/options.h. */
bool cube__env_str(const char* name, const char** out);

/* Overflow-checked arithmetic. */
static inline bool cube__mul_overflow_u64(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}
static inline bool cube__add_overflow_u64(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_add_overflow(a, b, out);
}
static inline uint64_t cube__round_up(uint64_t x, uint64_t a) {
  return a ? ((x + a - 1) / a) * a : x;
}

#endif /* CUBE_PLATFORM_H_ */
