/* Managed-memory descriptors (docs/cubecl.md, "Handles and bindings"). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "memory/memory.h"
#include "memory/pool_internal.h"
#include "memory/taint.h"

static atomic_uint_fast64_t cube__memory_next_id = 1;

uint64_t cube__memory_take_ids(uint64_t count) {
  return atomic_fetch_add_explicit(&cube__memory_next_id, count, memory_order_relaxed);
}

cube__memory_t* cube__memory_create(void) {
  cube__memory_t* m = calloc(1, sizeof(*m));
  if (!m) return NULL;
  atomic_init(&m->counts, CUBE__MEMORY_HANDLE_REF);
  m->id = cube__memory_take_ids(1);
  return m;
}

/* Increments are relaxed: the caller already holds a reference, so the
 * descriptor cannot go away meanwhile. Decrements are acq_rel so that the
 * thread that frees (or the pool that sees refs == 1) observes every write
 * made before the other references were dropped. */
void cube__memory_ref(cube__memory_t* m) {
  if (m) atomic_fetch_add_explicit(&m->counts, CUBE__MEMORY_REF, memory_order_relaxed);
}

static void cube__external_free(cube__memory_t* m);

/* Drops |what| from |m|'s counts. A drop on a descriptor bound in a sliced
 * pool that leaves only the pool's reference marks the count pending and
 * queues the descriptor on that pool (pool_internal.h, "Release queue").
 * |notify| is read after an acquire load of the count that the exchange then
 * confirms unchanged: the bind stores |notify| before its release increment
 * takes the pool's reference, so a count that holds the pool's reference is
 * always read together with its |notify| (no release goes unnoticed); the
 * unbinding clears |notify| before it drops the pool's reference. */
static void cube__memory_drop(cube__memory_t* m, uint64_t what) {
  uint64_t old = atomic_load_explicit(&m->counts, memory_order_acquire);
  uint64_t next;
  cube__pool_t* pool;
  do {
    pool = atomic_load_explicit(&m->notify, memory_order_relaxed);
    next = old - what;
    if (pool && (uint32_t)next == 1) next |= CUBE__MEMORY_PENDING;
  } while (!atomic_compare_exchange_weak_explicit(&m->counts, &old, next, memory_order_acq_rel,
                                                  memory_order_acquire));
  if (next & CUBE__MEMORY_PENDING) {
    cube__pool_notify(pool, m); /* the pool's owner takes it from here */
    return;
  }
  if ((uint32_t)next != 0) return;
  if (__builtin_expect(atomic_load_explicit(&m->taint, memory_order_relaxed) != NULL, 0))
    cube__memory_set_taint(m, NULL);
  if (__builtin_expect(atomic_load_explicit(&m->keep, memory_order_relaxed) != NULL, 0))
    cube__memory_set_keep(m, NULL);
  if (m->external)
    cube__external_free(m);
  else
    free(m);
}

/* Orders a replacement of a host copy against a reader of it
 * (cube__memory_copy_keep, on any thread): both rare, neither on a hot path. */
static pthread_mutex_t cube__keep_lock = PTHREAD_MUTEX_INITIALIZER;

void cube__memory_set_keep(cube__memory_t* m, cube__keep_t* k) {
  pthread_mutex_lock(&cube__keep_lock);
  cube__keep_t* old = atomic_exchange_explicit(&m->keep, k, memory_order_acq_rel);
  pthread_mutex_unlock(&cube__keep_lock);
  free(old);
}

int cube__memory_copy_keep(cube__memory_t* m, uint64_t offset, uint64_t len, void* out,
                           uint64_t* out_size) {
  pthread_mutex_lock(&cube__keep_lock);
  cube__keep_t* k = atomic_load_explicit(&m->keep, memory_order_acquire);
  int r = !k ? -1 : offset > k->size || len > k->size - offset ? 1 : 0;
  if (k) *out_size = k->size;
  if (r == 0) memcpy(out, k->data + offset, len);
  pthread_mutex_unlock(&cube__keep_lock);
  return r;
}

void cube__memory_unref(cube__memory_t* m) {
  if (m) cube__memory_drop(m, CUBE__MEMORY_REF);
}

void cube__memory_handle_ref(cube__memory_t* m) {
  if (m) atomic_fetch_add_explicit(&m->counts, CUBE__MEMORY_HANDLE_REF, memory_order_relaxed);
}

void cube__memory_handle_unref(cube__memory_t* m) {
  if (m) cube__memory_drop(m, CUBE__MEMORY_HANDLE_REF);
}

void cube__memory_handle_to_binding(cube__memory_t* m) {
  atomic_fetch_sub_explicit(&m->counts, CUBE__MEMORY_HANDLE_REF - CUBE__MEMORY_REF,
                            memory_order_acq_rel);
}

bool cube__memory_can_mut(const cube__memory_t* m) { return cube__memory_handle_refs(m) <= 1; }

bool cube__memory_is_free(const cube__memory_t* m) { return cube__memory_refs(m) <= 1; }

bool cube__memory_resolve(const cube__memory_t* m, const cube__storage_t** out_storage,
                          uint64_t* out_offset, uint64_t* out_size) {
  const cube__slice_t* s = m ? m->slice : NULL;
  if (!s) return false;
  if (out_storage) *out_storage = &s->page->storage;
  if (out_offset) *out_offset = s->offset;
  if (out_size) *out_size = s->size;
  return true;
}

//===----------------------------------------------------------------------===//
// External memory: one block holds the descriptor, a page of its own (no
// pool) and the slice that covers it.
//===----------------------------------------------------------------------===//

typedef struct cube__external {
  cube__memory_t mem; /* first: the block is freed through it */
  cube__page_t page;
  cube__slice_t slice;
  cube__external_release_fn release;
  void* user;
} cube__external_t;

/* Storage ids of external memory: apart from every backend's (which count
 * up from 1), so that a key made of a storage id never mixes the two. */
static atomic_uint_fast64_t cube__external_next_id = 1;

cube__memory_t* cube__memory_create_external(const cube__storage_t* storage,
                                             cube__external_release_fn release, void* user) {
  cube__external_t* e = calloc(1, sizeof(*e));
  if (!e) return NULL;
  e->page.storage = *storage;
  e->page.storage.id = (UINT64_C(1) << 63) |
                       atomic_fetch_add_explicit(&cube__external_next_id, 1, memory_order_relaxed);
  e->page.first = &e->slice;
  e->page.slice_count = 1;
  e->slice.page = &e->page;
  e->slice.length = storage->size;
  e->slice.size = storage->size;
  e->slice.memory = &e->mem;
  e->release = release;
  e->user = user;
  atomic_init(&e->mem.counts, CUBE__MEMORY_HANDLE_REF);
  e->mem.id = cube__memory_take_ids(1);
  e->mem.external = true;
  e->mem.slice = &e->slice;
  return &e->mem;
}

void cube__memory_external_forget(cube__memory_t* m) {
  if (m && m->external) ((cube__external_t*)m)->release = NULL;
}

static void cube__external_free(cube__memory_t* m) {
  cube__external_t* e = (cube__external_t*)m;
  if (e->release) e->release(e->user);
  free(e);
}
