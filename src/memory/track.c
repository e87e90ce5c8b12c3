/* Allocation tracking: tags and the event ring (see track.h). */
#include "memory/track.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

atomic_bool cube__mem_track_on;

void cube__mem_track_enable(void) {
  atomic_store_explicit(&cube__mem_track_on, true, memory_order_relaxed);
}

//===----------------------------------------------------------------------===//
// Interned tags: a list that only grows, searched under a lock (interning is
// a tag push or a set, never the allocation path).
//===----------------------------------------------------------------------===//

typedef struct cube__tag_node {
  struct cube__tag_node* next;
  char text[];
} cube__tag_node_t;

static pthread_mutex_t cube__tags_lock = PTHREAD_MUTEX_INITIALIZER;
static cube__tag_node_t* cube__tags;
static uint32_t cube__tag_count;

cube_status_t cube__tag_intern(const char* fn, const char* tag, const char** out) {
  *out = NULL;
  if (!tag) return CUBE_OK;
  size_t n = strnlen(tag, CUBE__TAG_MAX_LEN + 1);
  if (n == 0) return CUBE_INVALID("%s: the tag is empty", fn);
  if (n > CUBE__TAG_MAX_LEN)
    return CUBE_INVALID("%s: the tag \"%.16s...\" is longer than %u bytes", fn, tag,
                        CUBE__TAG_MAX_LEN);
  pthread_mutex_lock(&cube__tags_lock);
  for (cube__tag_node_t* t = cube__tags; t; t = t->next)
    if (strcmp(t->text, tag) == 0) {
      pthread_mutex_unlock(&cube__tags_lock);
      *out = t->text;
      return CUBE_OK;
    }
  if (cube__tag_count >= CUBE__TAG_MAX_COUNT) {
    pthread_mutex_unlock(&cube__tags_lock);
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "%s: tag \"%s\" would be distinct tag %u of this process, past "
                             "the %u it keeps", fn, tag, cube__tag_count + 1, CUBE__TAG_MAX_COUNT);
  }
  cube__tag_node_t* t = malloc(sizeof(*t) + n + 1);
  if (!t) {
    pthread_mutex_unlock(&cube__tags_lock);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory for tag \"%s\"", fn,
                             tag);
  }
  memcpy(t->text, tag, n + 1);
  t->next = cube__tags;
  cube__tags = t;
  cube__tag_count++;
  pthread_mutex_unlock(&cube__tags_lock);
  *out = t->text;
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Scope stacks, one per thread
//===----------------------------------------------------------------------===//

typedef struct cube__tag_scope {
  const void* owner;
  const char* tag;
} cube__tag_scope_t;

static _Thread_local cube__tag_scope_t cube__tag_stack[CUBE__TAG_MAX_DEPTH];
static _Thread_local uint32_t cube__tag_depth;

const char* cube__tag_current(void) {
  return cube__tag_depth ? cube__tag_stack[cube__tag_depth - 1].tag : NULL;
}

cube_status_t cube__tag_push(const char* fn, const void* owner, const char* tag) {
  if (cube__tag_depth >= CUBE__TAG_MAX_DEPTH)
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "%s: \"%s\" would be tag scope %u open on this thread, past the "
                             "%u that may be open at once", fn, tag, cube__tag_depth + 1,
                             CUBE__TAG_MAX_DEPTH);
  cube__tag_stack[cube__tag_depth++] = (cube__tag_scope_t){owner, tag};
  cube__mem_track_enable();
  return CUBE_OK;
}

cube_status_t cube__tag_pop(const char* fn, const void* owner) {
  if (cube__tag_depth == 0)
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "%s: no tag scope is open on this thread", fn);
  const cube__tag_scope_t* top = &cube__tag_stack[cube__tag_depth - 1];
  if (top->owner != owner)
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "%s: the innermost tag scope (\"%s\") was opened with another client",
                             fn, top->tag);
  cube__tag_depth--;
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// The event ring
//===----------------------------------------------------------------------===//

void cube__mem_ring_init(cube__mem_ring_t* ring) {
  pthread_mutex_init(&ring->lock, NULL);
  ring->events = NULL;
  ring->next = 0;
}

void cube__mem_ring_deinit(cube__mem_ring_t* ring) {
  free(ring->events);
  ring->events = NULL;
  pthread_mutex_destroy(&ring->lock);
}

void cube__mem_ring_push(cube__mem_ring_t* ring, cube__mem_event_t* ev) {
  pthread_mutex_lock(&ring->lock);
  if (!ring->events) ring->events = calloc(CUBE__MEM_RING_CAP, sizeof(*ring->events));
  if (ring->events) {
    ev->seq = ring->next++;
    ring->events[ev->seq % CUBE__MEM_RING_CAP] = *ev;
  }
  pthread_mutex_unlock(&ring->lock);
}

uint32_t cube__mem_ring_copy(cube__mem_ring_t* ring, cube__mem_event_t** out,
                             uint64_t* out_total) {
  *out = NULL;
  pthread_mutex_lock(&ring->lock);
  uint64_t total = ring->next;
  uint32_t kept = total < CUBE__MEM_RING_CAP ? (uint32_t)total : CUBE__MEM_RING_CAP;
  cube__mem_event_t* copy = kept && ring->events ? malloc(kept * sizeof(*copy)) : NULL;
  if (copy)
    for (uint32_t i = 0; i < kept; ++i)
      copy[i] = ring->events[(total - kept + i) % CUBE__MEM_RING_CAP];
  pthread_mutex_unlock(&ring->lock);
  *out_total = total;
  *out = copy;
  return copy ? kept : 0;
}
