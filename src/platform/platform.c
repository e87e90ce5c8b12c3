#include "platform/platform.h"

#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/status.h"

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

uint64_t cube__now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#ifdef __linux__
void cube__futex_wait(atomic_uint* addr, unsigned expected, uint64_t timeout_ns) {
  struct timespec ts, *tsp = NULL;
  if (timeout_ns != UINT64_MAX) {
    ts.tv_sec = (time_t)(timeout_ns / 1000000000ull);
    ts.tv_nsec = (long)(timeout_ns % 1000000000ull);
    tsp = &ts;
  }
  syscall(SYS_futex, (unsigned*)addr, FUTEX_WAIT_PRIVATE, expected, tsp, NULL, 0);
}
void cube__futex_wake(atomic_uint* addr, int count) {
  syscall(SYS_futex, (unsigned*)addr, FUTEX_WAKE_PRIVATE, count < 0 ? 0x7fffffff : count, NULL,
          NULL, 0);
}
#else
/* Portable fallback: short sleeps. Correct, slower. */
void cube__futex_wait(atomic_uint* addr, unsigned expected, uint64_t timeout_ns) {
  if (atomic_load(addr) != expected) return;
  struct timespec ts = {0, timeout_ns < 50000 ? (long)timeout_ns : 50000};
  nanosleep(&ts, NULL);
}
void cube__futex_wake(atomic_uint* addr, int count) {
  (void)addr;
  (void)count;
}
#endif

void cube__event_set(cube__event_t* e) {
  unsigned prev = atomic_exchange_explicit(&e->state, 1, memory_order_acq_rel);
  if (prev == 2) cube__futex_wake(&e->state, -1);
}

bool cube__event_is_set(const cube__event_t* e) {
  return atomic_load_explicit((atomic_uint*)&e->state, memory_order_acquire) == 1;
}

/* Polls of an event before its waiter sleeps (a build may set another). */
#ifndef CUBE__EVENT_SPINS
#define CUBE__EVENT_SPINS 2000
#endif

bool cube__event_wait(cube__event_t* e, uint64_t timeout_ns) {
  return cube__event_wait_polls(e, timeout_ns, CUBE__EVENT_SPINS);
}

bool cube__event_wait_polls(cube__event_t* e, uint64_t timeout_ns, unsigned polls) {
  for (unsigned i = 0; i < polls; ++i) {
    if (atomic_load_explicit(&e->state, memory_order_acquire) == 1) return true;
    cube__cpu_relax();
  }
  uint64_t deadline = timeout_ns == UINT64_MAX ? UINT64_MAX : cube__now_ns() + timeout_ns;
  for (;;) {
    unsigned s = atomic_load_explicit(&e->state, memory_order_acquire);
    if (s == 1) return true;
    if (s == 0 && !atomic_compare_exchange_weak(&e->state, &s, 2)) continue;
    uint64_t wait = UINT64_MAX;
    if (deadline != UINT64_MAX) {
      uint64_t now = cube__now_ns();
      if (now >= deadline) return atomic_load(&e->state) == 1;
      wait = deadline - now;
    }
    cube__futex_wait(&e->state, 2, wait);
  }
}

typedef struct {
  cube__thread_fn fn;
  void* arg;
  char name[16];
} cube__thread_start_t;

static _Thread_local bool tl_cube_thread;

bool cube__thread_is_cube(void) { return tl_cube_thread; }

static void* cube__thread_trampoline(void* p) {
  cube__thread_start_t st = *(cube__thread_start_t*)p;
  free(p);
  tl_cube_thread = true;
#ifdef __linux__
  if (st.name[0]) pthread_setname_np(pthread_self(), st.name);
#endif
  return st.fn(st.arg);
}

cube_status_t cube__thread_create(pthread_t* out, cube__thread_fn fn, void* arg, const char* name,
                                  size_t stack_size) {
  cube__thread_start_t* st = calloc(1, sizeof(*st));
  if (!st) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "thread '%s': no memory", name);
  st->fn = fn;
  st->arg = arg;
  if (name) snprintf(st->name, sizeof(st->name), "%s", name);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  if (stack_size) pthread_attr_setstacksize(&attr, stack_size);
  int rc = pthread_create(out, &attr, cube__thread_trampoline, st);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    free(st);
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "thread '%s': pthread_create failed: %s",
                             name ? name : "", strerror(rc));
  }
  return CUBE_OK;
}


uint32_t cube__cpu_count(void) {
#ifdef __linux__
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return (uint32_t)n;
  }
#endif
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (uint32_t)n : 1;
}

static uint64_t cube__read_u64_file(const char* path) {
  FILE* f = fopen(path, "r");
  if (!f) return 0;
  char buf[64] = {0};
  uint64_t v = 0;
  if (fgets(buf, sizeof(buf), f) && isdigit((unsigned char)buf[0])) v = strtoull(buf, NULL, 10);
  fclose(f);
  return v;
}

uint64_t cube__total_memory(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  uint64_t total = (pages > 0 && page > 0) ? (uint64_t)pages * (uint64_t)page : (1ull << 32);
  uint64_t cg = cube__read_u64_file("/sys/fs/cgroup/memory.max");
  if (!cg) cg = cube__read_u64_file("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  if (cg && cg < total) total = cg;
  return total;
}

bool cube__env_str(const char* name, const char** out) {
  const char* v = getenv(name);
  if (!v || !*v) return false;
  *out = v;
  return true;
}
