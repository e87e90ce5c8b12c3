/* The kernel cache's memory map: a process-wide key -> artifact table
 * (open addressing, at most half full) under one lock, and its generation.
 * See cache.h. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#include "kernel/cache.h"

/* Memory ------------------------------------------------------------------ */

typedef struct cube__kc_slot {
  cube__cache_key_t key;
  void* artifact; /* NULL: empty slot */
  void (*destroy)(void*);
} cube__kc_slot_t;

static pthread_mutex_t cube__kc_mem_lock = PTHREAD_MUTEX_INITIALIZER;
static cube__kc_slot_t* cube__kc_slots;
static size_t cube__kc_cap; /* a power of two, or 0 */
static size_t cube__kc_count;

static size_t cube__kc_hash(cube__cache_key_t key) {
  /* The key is a hash already: mix the halves. */
  return (size_t)(key.lo ^ (key.hi * 0x9E3779B97F4A7C15ull));
}

static cube__kc_slot_t* cube__kc_find(cube__kc_slot_t* slots, size_t cap, cube__cache_key_t key) {
  if (!cap) return NULL;
  size_t i = cube__kc_hash(key) & (cap - 1);
  for (;;) {
    cube__kc_slot_t* s = &slots[i];
    if (!s->artifact || (s->key.hi == key.hi && s->key.lo == key.lo)) return s;
    i = (i + 1) & (cap - 1);
  }
}

static bool cube__kc_grow(void) {
  size_t cap = cube__kc_cap ? cube__kc_cap * 2 : 64;
  cube__kc_slot_t* slots = calloc(cap, sizeof(*slots));
  if (!slots) return false;
  for (size_t i = 0; i < cube__kc_cap; ++i) {
    if (!cube__kc_slots[i].artifact) continue;
    *cube__kc_find(slots, cap, cube__kc_slots[i].key) = cube__kc_slots[i];
  }
  free(cube__kc_slots);
  cube__kc_slots = slots;
  cube__kc_cap = cap;
  return true;
}

void* cube__cache_memory_get(cube__cache_key_t key) {
  pthread_mutex_lock(&cube__kc_mem_lock);
  cube__kc_slot_t* s = cube__kc_find(cube__kc_slots, cube__kc_cap, key);
  void* a = s ? s->artifact : NULL;
  pthread_mutex_unlock(&cube__kc_mem_lock);
  return a;
}

void* cube__cache_memory_put(cube__cache_key_t key, void* artifact, void (*destroy)(void*)) {
  if (!artifact) return cube__cache_memory_get(key);
  pthread_mutex_lock(&cube__kc_mem_lock);
  cube__kc_slot_t* s = cube__kc_find(cube__kc_slots, cube__kc_cap, key);
  if (s && s->artifact) {
    void* winner = s->artifact;
    pthread_mutex_unlock(&cube__kc_mem_lock);
    if (destroy && winner != artifact) destroy(artifact);
    return winner;
  }
  /* Keep the load at most one half. */
  if (!cube__kc_cap || (cube__kc_count + 1) * 2 > cube__kc_cap) {
    if (!cube__kc_grow()) {
      /* Without memory the artifact stays alive, unowned: it is a loaded
       * module the caller keeps using for the process. */
      pthread_mutex_unlock(&cube__kc_mem_lock);
      return artifact;
    }
  }
  s = cube__kc_find(cube__kc_slots, cube__kc_cap, key);
  s->key = key;
  s->artifact = artifact;
  s->destroy = destroy;
  cube__kc_count++;
  pthread_mutex_unlock(&cube__kc_mem_lock);
  return artifact;
}

static atomic_uint_fast64_t cube__kc_generation;

uint64_t cube__cache_generation(void) {
  return atomic_load_explicit(&cube__kc_generation, memory_order_acquire);
}

void cube__cache_memory_clear(void) {
  pthread_mutex_lock(&cube__kc_mem_lock);
  cube__kc_slot_t* slots = cube__kc_slots;
  size_t cap = cube__kc_cap;
  cube__kc_slots = NULL;
  cube__kc_cap = 0;
  cube__kc_count = 0;
  atomic_fetch_add_explicit(&cube__kc_generation, 1, memory_order_acq_rel);
  pthread_mutex_unlock(&cube__kc_mem_lock);
  for (size_t i = 0; i < cap; ++i) {
    if (slots[i].artifact && slots[i].destroy) slots[i].destroy(slots[i].artifact);
  }
  free(slots);
}
