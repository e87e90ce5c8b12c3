#include "client/handles.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/status.h"
#include "server/server.h"

#define CUBE__CHUNK_BITS 12
#define CUBE__CHUNK_SLOTS (1u << CUBE__CHUNK_BITS)
#define CUBE__MAX_CHUNKS (1u << 16) /* 268M handles */

typedef struct cube__slot {
  atomic_uint gen;  /* current generation; odd = live, even = free */
  atomic_uint refs; /* handle references of this slot */
  cube__handle_info_t info;
  atomic_uint next_free; /* while free: index + 1 of the next free slot, 0 = none */
} cube__slot_t;

/* Free slots form a lock-free stack (Treiber) whose head is one 64-bit word:
 * (tag << 32) | (index + 1). The tag changes with every push and pop, so a
 * pop that read a slot's next_free before another thread popped and pushed
 * that slot again fails its compare-and-swap instead of installing a stale
 * next (ABA). Slots are never freed, so reading next_free of a slot another
 * thread just took is harmless (and atomic: no data race). Creating and
 * releasing a handle is then one compare-and-swap each on the table; the
 * mutex guards only the growth of the table (new slots, new chunks). */
static _Atomic(cube__slot_t*) cube__chunks[CUBE__MAX_CHUNKS];
static atomic_uint_fast64_t cube__free_head;
static pthread_mutex_t cube__grow_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint cube__next_index; /* slots handed out so far; written under the lock */

static cube__slot_t* cube__slot_at(uint32_t index) {
  uint32_t c = index >> CUBE__CHUNK_BITS;
  if (c >= CUBE__MAX_CHUNKS) return NULL;
  cube__slot_t* chunk = atomic_load_explicit(&cube__chunks[c], memory_order_acquire);
  return chunk ? &chunk[index & (CUBE__CHUNK_SLOTS - 1)] : NULL;
}

static inline uint64_t cube__head(uint64_t old_head, uint32_t index1) {
  return (((old_head >> 32) + 1) << 32) | index1;
}

/* Pushes the (dead) slot |index1| - 1 on the free stack. */
static void cube__free_push(cube__slot_t* s, uint32_t index1) {
  uint64_t head = atomic_load_explicit(&cube__free_head, memory_order_relaxed);
  do {
    atomic_store_explicit(&s->next_free, (uint32_t)head, memory_order_relaxed);
  } while (!atomic_compare_exchange_weak_explicit(&cube__free_head, &head,
                                                  cube__head(head, index1),
                                                  memory_order_release, memory_order_relaxed));
}

/* Pops a free slot: its index + 1, or 0 when the stack is empty. */
static uint32_t cube__free_pop(void) {
  uint64_t head = atomic_load_explicit(&cube__free_head, memory_order_acquire);
  for (;;) {
    uint32_t index1 = (uint32_t)head;
    if (!index1) return 0;
    uint32_t next = atomic_load_explicit(&cube__slot_at(index1 - 1)->next_free,
                                         memory_order_relaxed);
    if (atomic_compare_exchange_weak_explicit(&cube__free_head, &head, cube__head(head, next),
                                              memory_order_acquire, memory_order_acquire))
      return index1;
  }
}

/* A slot never used before: index + 1, or 0 with *out_status set. */
static uint32_t cube__fresh_slot(cube_status_t* out_status) {
  pthread_mutex_lock(&cube__grow_lock);
  uint32_t index = atomic_load_explicit(&cube__next_index, memory_order_relaxed);
  uint32_t c = index >> CUBE__CHUNK_BITS;
  if (c >= CUBE__MAX_CHUNKS) {
    pthread_mutex_unlock(&cube__grow_lock);
    *out_status = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                                    "handle table: %u handles are live, the most the table holds",
                                    index);
    return 0;
  }
  if (!atomic_load_explicit(&cube__chunks[c], memory_order_relaxed)) {
    cube__slot_t* chunk = calloc(CUBE__CHUNK_SLOTS, sizeof(cube__slot_t));
    if (!chunk) {
      pthread_mutex_unlock(&cube__grow_lock);
      *out_status = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "handle table: no host memory");
      return 0;
    }
    atomic_store_explicit(&cube__chunks[c], chunk, memory_order_release);
  }
  atomic_store_explicit(&cube__next_index, index + 1, memory_order_release);
  pthread_mutex_unlock(&cube__grow_lock);
  return index + 1;
}

cube_status_t cube__handle_create(const cube__handle_info_t* info, cube_handle_t* out) {
  uint32_t index1 = cube__free_pop();
  if (!index1) {
    cube_status_t st = CUBE_OK;
    index1 = cube__fresh_slot(&st);
    if (!index1) return st;
  }
  cube__slot_t* s = cube__slot_at(index1 - 1);
  s->info = *info;
  atomic_store_explicit(&s->refs, 1, memory_order_relaxed);
  unsigned gen = atomic_load_explicit(&s->gen, memory_order_relaxed) + 1; /* even -> odd */
  atomic_store_explicit(&s->gen, gen, memory_order_release);
  out->id = ((uint64_t)gen << 32) | (uint64_t)index1;
  return CUBE_OK;
}

/* The live slot of |h|, or NULL. */
static cube__slot_t* cube__lookup(cube_handle_t h) {
  uint32_t index1 = (uint32_t)(h.id & 0xffffffffu);
  unsigned gen = (unsigned)(h.id >> 32);
  if (!index1 || !(gen & 1u)) return NULL;
  cube__slot_t* s = cube__slot_at(index1 - 1);
  if (!s) return NULL;
  if (atomic_load_explicit(&s->gen, memory_order_acquire) != gen) return NULL;
  return s;
}

cube_status_t cube__handle_get(cube_handle_t h, const char* what, cube__handle_info_t* out) {
  if (h.id == 0) return CUBE_INVALID("%s is the null handle", what);
  cube__slot_t* s = cube__lookup(h);
  if (!s || atomic_load_explicit(&s->refs, memory_order_acquire) == 0)
    return cube__status_make(CUBE_STATUS_NOT_FOUND,
                             "%s: handle 0x%" PRIx64 " was released (or never existed)", what,
                             h.id);
  *out = s->info;
  /* A stale id racing with the slot's reuse would have copied another
   * handle's view: check the generation again. */
  if (atomic_load_explicit(&s->gen, memory_order_acquire) != (unsigned)(h.id >> 32))
    return cube__status_make(CUBE_STATUS_NOT_FOUND,
                             "%s: handle 0x%" PRIx64 " was released (or never existed)", what,
                             h.id);
  return CUBE_OK;
}

cube_handle_t cube_handle_retain(cube_handle_t h) {
  cube__slot_t* s = cube__lookup(h);
  if (!s) return h;
  /* Never revive a slot whose last reference is being dropped. */
  unsigned r = atomic_load_explicit(&s->refs, memory_order_relaxed);
  do {
    if (r == 0) return h;
  } while (!atomic_compare_exchange_weak_explicit(&s->refs, &r, r + 1, memory_order_acq_rel,
                                                  memory_order_relaxed));
  cube__memory_handle_ref(s->info.mem);
  return h;
}

/* Drops one reference of live handle |h|: NULL, or NOT_FOUND. */
static inline cube_status_t cube__handle_release(cube_handle_t h) {
  cube__slot_t* s = cube__lookup(h);
  if (!s)
    return cube__status_make(CUBE_STATUS_NOT_FOUND,
                             "cube_handle_release_checked: handle 0x%" PRIx64
                             " was already released (or never existed)",
                             h.id);
  /* Read the slot before dropping our reference: once it is dropped, another
   * thread may free the slot and reuse it for a new handle. */
  cube__memory_t* mem = s->info.mem;
  unsigned r = atomic_load_explicit(&s->refs, memory_order_relaxed);
  do {
    if (r == 0)
      return cube__status_make(CUBE_STATUS_NOT_FOUND,
                               "cube_handle_release_checked: handle 0x%" PRIx64
                               " was already released",
                               h.id);
  } while (!atomic_compare_exchange_weak_explicit(&s->refs, &r, r - 1, memory_order_acq_rel,
                                                  memory_order_relaxed));
  if (r == 1) {
    /* Ours was the last reference: nobody else writes the generation now. */
    atomic_store_explicit(&s->gen, (unsigned)(h.id >> 32) + 1, memory_order_release); /* dead */
    cube__free_push(s, (uint32_t)(h.id & 0xffffffffu));
  }
  cube__memory_handle_unref(mem);
  return CUBE_OK;
}

cube_status_t cube_handle_release_checked(cube_handle_t h) {
  if (h.id == 0) return CUBE_INVALID("cube_handle_release_checked: h is the null handle");
  return cube__handle_release(h);
}

void cube_handle_release(cube_handle_t h) {
  if (h.id == 0) return;
  cube_status_t st = cube__handle_release(h);
  if (st) cube_status_free(st);
}

void cube_handle_release_array(const cube_handle_t* handles, size_t count) {
  if (!handles) return;
  for (size_t i = 0; i < count; ++i) cube_handle_release(handles[i]);
}

bool cube_handle_can_mut(cube_handle_t h) {
  cube__slot_t* s = cube__lookup(h);
  if (!s || atomic_load(&s->refs) == 0) return false;
  return cube__memory_can_mut(s->info.mem);
}

uint64_t cube_handle_size(cube_handle_t h) {
  cube__handle_info_t i;
  cube_status_t st = cube__handle_get(h, "cube_handle_size", &i);
  if (st) {
    cube_status_free(st);
    return 0;
  }
  return cube__handle_view_size(&i);
}

uint64_t cube_handle_buffer_size(cube_handle_t h) {
  cube__handle_info_t i;
  cube_status_t st = cube__handle_get(h, "cube_handle_buffer_size", &i);
  if (st) {
    cube_status_free(st);
    return 0;
  }
  return i.buffer_size;
}

uint64_t cube_handle_offset(cube_handle_t h) {
  cube__handle_info_t i;
  cube_status_t st = cube__handle_get(h, "cube_handle_offset", &i);
  if (st) {
    cube_status_free(st);
    return 0;
  }
  return i.offset_start;
}

cube_status_t cube_handle_offset_view(cube_handle_t h, uint64_t offset_start, uint64_t offset_end,
                                      cube_handle_t* out_handle) {
  if (!out_handle) return CUBE_INVALID("cube_handle_offset_view: out_handle is NULL");
  cube__handle_info_t i;
  CUBE_RETURN_IF_ERROR(cube__handle_get(h, "cube_handle_offset_view: h", &i));
  uint64_t view = cube__handle_view_size(&i);
  uint64_t cut;
  if (__builtin_add_overflow(offset_start, offset_end, &cut) || cut >= view)
    return CUBE_INVALID("cube_handle_offset_view: offsets %llu + %llu leave nothing of a view of "
                        "%llu bytes",
                        (unsigned long long)offset_start, (unsigned long long)offset_end,
                        (unsigned long long)view);
  i.offset_start += offset_start;
  i.offset_end += offset_end;
  cube__memory_handle_ref(i.mem);
  cube_status_t st = cube__handle_create(&i, out_handle);
  if (st) cube__memory_handle_unref(i.mem);
  return st;
}

uint64_t cube__handle_live_count(void) {
  uint32_t n = atomic_load_explicit(&cube__next_index, memory_order_acquire);
  uint64_t live = 0;
  for (uint32_t i = 0; i < n; ++i) {
    cube__slot_t* s = cube__slot_at(i);
    if (s && (atomic_load_explicit(&s->gen, memory_order_acquire) & 1u) &&
        atomic_load_explicit(&s->refs, memory_order_relaxed) > 0)
      ++live;
  }
  return live;
}

cube_status_t cube_handle_device(cube_handle_t h, cube_device_id_t* out_device) {
  if (!out_device) return CUBE_INVALID("cube_handle_device: out_device is NULL");
  cube__handle_info_t i;
  CUBE_RETURN_IF_ERROR(cube__handle_get(h, "cube_handle_device: h", &i));
  *out_device = i.server->id;
  return CUBE_OK;
}

void cube__handle_invalidate_all(void) {
  uint32_t n = atomic_load_explicit(&cube__next_index, memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i) {
    cube__slot_t* s = cube__slot_at(i);
    if (!s || !(atomic_load(&s->gen) & 1u)) continue;
    unsigned refs = atomic_exchange(&s->refs, 0);
    if (refs == 0) continue;
    cube__memory_t* mem = s->info.mem;
    atomic_fetch_add(&s->gen, 1); /* dead */
    cube__free_push(s, i + 1);
    while (refs--) cube__memory_handle_unref(mem);
  }
}
