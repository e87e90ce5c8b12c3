/* Execution overrides (cube/execution.h, client/policy.h): the override
 * objects, their statistics, and what a launch does under one. */
#include "client/policy.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "client/client_internal.h"
#include "kernel/cache.h"
#include "kernel/kernel.h"

/* A set of 64-bit keys (open addressing; 0 stands for itself in a flag). */
typedef struct cube__keyset {
  uint64_t* slots;
  size_t cap, count;
  bool has_zero;
} cube__keyset_t;

/* Inserts |k|: true when it was not there. False also without memory (the
 * key then counts as seen: statistics undercount rather than fail). */
static bool cube__keyset_add(cube__keyset_t* s, uint64_t k) {
  if (k == 0) {
    bool fresh = !s->has_zero;
    s->has_zero = true;
    return fresh;
  }
  if ((s->count + 1) * 2 > s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    uint64_t* slots = calloc(cap, sizeof(*slots));
    if (!slots) return false;
    for (size_t i = 0; i < s->cap; ++i) {
      if (!s->slots[i]) continue;
      size_t j = (size_t)(s->slots[i] * 0x9E3779B97F4A7C15ull) & (cap - 1);
      while (slots[j]) j = (j + 1) & (cap - 1);
      slots[j] = s->slots[i];
    }
    free(s->slots);
    s->slots = slots;
    s->cap = cap;
  }
  size_t j = (size_t)(k * 0x9E3779B97F4A7C15ull) & (s->cap - 1);
  while (s->slots[j]) {
    if (s->slots[j] == k) return false;
    j = (j + 1) & (s->cap - 1);
  }
  s->slots[j] = k;
  s->count++;
  return true;
}

struct cube_execution_override_s {
  atomic_uint refs; /* the caller's, and the client's until the client is freed */
  cube_execution_policy_t policy;
  /* Guarded by cube__policy_lock: */
  cube_client_t* client;                   /* NULL once ended */
  cube_execution_override_t* previous;     /* what this one hides */
  cube_execution_override_t* next_of_client; /* the client's list of every override */
  /* Guarded by |lock|: */
  pthread_mutex_t lock;
  cube__keyset_t kernels, keys;
  /* Counters (relaxed atomics: readable from any thread). */
  atomic_uint_fast64_t kernels_registered, kernels_compiled, kernels_loaded, kernels_failed;
  atomic_uint_fast64_t launches_skipped, reads_skipped;
  atomic_uint_fast64_t keys_registered, keys_tuned, keys_loaded, keys_persisted, keys_failed;
};

/* Begin, end and a client's release change the chains under this lock. */
static pthread_mutex_t cube__policy_lock = PTHREAD_MUTEX_INITIALIZER;

static void cube__add(atomic_uint_fast64_t* c) { atomic_fetch_add_explicit(c, 1, memory_order_relaxed); }
static uint64_t cube__get(const atomic_uint_fast64_t* c) {
  return atomic_load_explicit((atomic_uint_fast64_t*)c, memory_order_relaxed);
}

const char* cube_execution_policy_name(cube_execution_policy_t p) {
  switch (p) {
    case CUBE_EXECUTION_RUN: return "run";
    case CUBE_EXECUTION_COMPILE_ONLY: return "compile-only";
    case CUBE_EXECUTION_COMPILE_AND_TUNE: return "compile-and-tune";
  }
  return "unknown";
}

cube_status_t cube_client_execution_begin(cube_client_t* c, cube_execution_policy_t policy,
                                          cube_execution_override_t** out_override) {
  static const char fn[] = "cube_client_execution_begin";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_override, fn, "out_override");
  if ((unsigned)policy > CUBE_EXECUTION_COMPILE_AND_TUNE)
    return CUBE_INVALID("%s: policy %d is not a cube_execution_policy_t (0 run, 1 compile-only, "
                        "2 compile-and-tune)",
                        fn, (int)policy);
  cube_execution_override_t* o = calloc(1, sizeof(*o));
  if (!o) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
  atomic_init(&o->refs, 2);
  o->policy = policy;
  pthread_mutex_init(&o->lock, NULL);
  pthread_mutex_lock(&cube__policy_lock);
  o->client = c;
  o->previous = atomic_load_explicit(&c->policy, memory_order_relaxed);
  o->next_of_client = c->overrides;
  c->overrides = o;
  atomic_store_explicit(&c->policy, o, memory_order_release);
  pthread_mutex_unlock(&cube__policy_lock);
  *out_override = o;
  return CUBE_OK;
}

cube_status_t cube_execution_override_end(cube_execution_override_t* o) {
  static const char fn[] = "cube_execution_override_end";
  if (!o) return CUBE_INVALID("%s: override is NULL", fn);
  cube_status_t st = CUBE_OK;
  pthread_mutex_lock(&cube__policy_lock);
  cube_client_t* c = o->client;
  if (!c) {
    st = cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                           "%s: the %s override has ended already (or its client was released)",
                           fn, cube_execution_policy_name(o->policy));
  } else if (atomic_load_explicit(&c->policy, memory_order_relaxed) != o) {
    cube_execution_override_t* top = atomic_load_explicit(&c->policy, memory_order_relaxed);
    st = cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                           "%s: a %s override begun later on the same client is still in force; "
                           "overrides end in the reverse order of their begin",
                           fn, cube_execution_policy_name(top ? top->policy : CUBE_EXECUTION_RUN));
  } else {
    atomic_store_explicit(&c->policy, o->previous, memory_order_release);
    o->client = NULL;
  }
  pthread_mutex_unlock(&cube__policy_lock);
  return st;
}

void cube__client_overrides_free(cube_client_t* c) {
  pthread_mutex_lock(&cube__policy_lock);
  cube_execution_override_t* o = c->overrides;
  c->overrides = NULL;
  atomic_store_explicit(&c->policy, NULL, memory_order_relaxed);
  for (cube_execution_override_t* i = o; i; i = i->next_of_client) i->client = NULL;
  pthread_mutex_unlock(&cube__policy_lock);
  while (o) {
    cube_execution_override_t* next = o->next_of_client;
    cube_execution_override_release(o);
    o = next;
  }
}

cube_status_t cube_execution_override_stats(const cube_execution_override_t* o,
                                            cube_execution_stats_t* out_stats) {
  static const char fn[] = "cube_execution_override_stats";
  if (!o) return CUBE_INVALID("%s: override is NULL", fn);
  CUBE__CHECK_OUT(out_stats, fn, "out_stats");
  cube_execution_stats_t s;
  memset(&s, 0, sizeof(s));
  s.struct_size = sizeof(s);
  s.kernels_registered = cube__get(&o->kernels_registered);
  s.kernels_compiled = cube__get(&o->kernels_compiled);
  s.kernels_loaded = cube__get(&o->kernels_loaded);
  s.kernels_failed = cube__get(&o->kernels_failed);
  s.launches_skipped = cube__get(&o->launches_skipped);
  s.reads_skipped = cube__get(&o->reads_skipped);
  s.keys_registered = cube__get(&o->keys_registered);
  s.keys_tuned = cube__get(&o->keys_tuned);
  s.keys_loaded = cube__get(&o->keys_loaded);
  s.keys_persisted = cube__get(&o->keys_persisted);
  s.keys_failed = cube__get(&o->keys_failed);
  return cube__struct_write(fn, "out_stats->struct_size", &cube__struct_execution_stats,
                            out_stats, &s);
}

cube_execution_policy_t cube_execution_override_policy(const cube_execution_override_t* o) {
  return o ? o->policy : CUBE_EXECUTION_RUN;
}

cube_execution_policy_t cube_client_execution_policy(const cube_client_t* c) {
  if (!cube__client_live(c)) return CUBE_EXECUTION_RUN;
  cube_execution_override_t* o = atomic_load_explicit(&c->policy, memory_order_acquire);
  return o ? o->policy : CUBE_EXECUTION_RUN;
}

cube_execution_override_t* cube_execution_override_retain(cube_execution_override_t* o) {
  if (o) atomic_fetch_add_explicit(&o->refs, 1, memory_order_relaxed);
  return o;
}

void cube_execution_override_release(cube_execution_override_t* o) {
  if (!o || atomic_fetch_sub_explicit(&o->refs, 1, memory_order_acq_rel) != 1) return;
  free(o->kernels.slots);
  free(o->keys.slots);
  pthread_mutex_destroy(&o->lock);
  free(o);
}

/* Internal ------------------------------------------------------------------ */

cube_execution_override_t* cube__client_override(const cube_client_t* c) {
  return atomic_load_explicit(&((cube_client_t*)c)->policy, memory_order_acquire);
}

cube_execution_policy_t cube__override_policy(const cube_execution_override_t* o) {
  return o->policy;
}

bool cube__override_skips_work(const cube_execution_override_t* o) {
  return o && o->policy != CUBE_EXECUTION_RUN;
}

void cube__override_count(cube_execution_override_t* o, cube__exec_count_t what) {
  switch (what) {
    case CUBE__EXEC_LAUNCH_SKIPPED: cube__add(&o->launches_skipped); break;
    case CUBE__EXEC_READ_SKIPPED: cube__add(&o->reads_skipped); break;
    case CUBE__EXEC_KEY_TUNED: cube__add(&o->keys_tuned); break;
    case CUBE__EXEC_KEY_LOADED: cube__add(&o->keys_loaded); break;
    case CUBE__EXEC_KEY_PERSISTED: cube__add(&o->keys_persisted); break;
    case CUBE__EXEC_KEY_FAILED: cube__add(&o->keys_failed); break;
  }
}

bool cube__override_key(cube_execution_override_t* o, uint64_t hash) {
  pthread_mutex_lock(&o->lock);
  bool fresh = cube__keyset_add(&o->keys, hash);
  pthread_mutex_unlock(&o->lock);
  if (fresh) cube__add(&o->keys_registered);
  return fresh;
}

cube_status_t cube__override_compile(cube_execution_override_t* o, cube_client_t* c,
                                     cube_kernel_t* kernel, cube_execution_mode_t mode,
                                     cube__cache_outcome_t* open_record) {
  cube__cache_outcome_t own;
  cube__cache_outcome_t* rec = open_record;
  if (!rec) {
    rec = &own;
    cube__cache_outcome_begin(rec);
  }
  cube_status_t st = cube__server_prepare(c->server, kernel, mode);
  cube__cache_outcome_end();
  /* Once per (kernel, mode, device). */
  uint64_t k = kernel->id * 0x9E3779B97F4A7C15ull ^ ((uint64_t)mode << 60) ^
               ((uint64_t)(uintptr_t)c->server * 0xC2B2AE3D27D4EB4Full);
  pthread_mutex_lock(&o->lock);
  bool fresh = cube__keyset_add(&o->kernels, k);
  pthread_mutex_unlock(&o->lock);
  if (!fresh) return st;
  cube__add(&o->kernels_registered);
  if (st || rec->failures)
    cube__add(&o->kernels_failed);
  else if (rec->misses)
    cube__add(&o->kernels_compiled);
  else
    cube__add(&o->kernels_loaded); /* a disk or memory hit, or compiled before in this process */
  return st;
}
