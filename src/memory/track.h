/* Allocation tracking: tags, allocation times and a ring of recent
 * allocation and release events (docs/observability.md, "Memory snapshots").
 *
 * Off until something asks for it (a tag, cube_memory_tracking_enable),
 * then on for the rest of the process: the pool-hit
 * path pays one relaxed load and a branch while it is off. Sticky on purpose:
 * descriptors are stamped (tag, time) only while tracking is on and nothing
 * ever clears those fields, so a tracking that could be switched off would
 * leave a recycled descriptor with its previous life's tag.
 *
 * Tags are interned: cube__tag_intern returns the same pointer for equal
 * strings, valid until the process exits, so descriptors, events and
 * snapshots hold plain pointers and compare them.
 *
 * Thread-safe throughout (the scope stack is per thread).
 */
#ifndef CUBE_MEMORY_TRACK_H_
#define CUBE_MEMORY_TRACK_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cube/status.h"

extern atomic_bool cube__mem_track_on;

static inline bool cube__mem_tracking(void) {
  return atomic_load_explicit(&cube__mem_track_on, memory_order_relaxed);
}

/* Turns tracking on (for good). */
void cube__mem_track_enable(void);

/* Longest tag accepted, in bytes without the NUL, and the most distinct tags
 * a process may intern. */
#define CUBE__TAG_MAX_LEN 63u
#define CUBE__TAG_MAX_COUNT 4096u
/* Deepest scope stack per thread. */
#define CUBE__TAG_MAX_DEPTH 32u

/* The interned copy of |tag|; *out NULL for a NULL tag. INVALID_ARGUMENT for
 * an empty or too long tag, RESOURCE_EXHAUSTED past CUBE__TAG_MAX_COUNT,
 * OUT_OF_MEMORY; |fn| starts the message. */
cube_status_t cube__tag_intern(const char* fn, const char* tag, const char** out);

/* The calling thread's innermost scope tag, NULL when none. */
const char* cube__tag_current(void);
/* Pushes |tag| (interned) for |owner| (the client); FAILED_PRECONDITION when
 * the stack is full. */
cube_status_t cube__tag_push(const char* fn, const void* owner, const char* tag);
/* Pops the innermost tag, which |owner| must have pushed. */
cube_status_t cube__tag_pop(const char* fn, const void* owner);

/* One allocation or release. */
typedef enum cube__mem_event_kind_e {
  CUBE__MEM_EVENT_ALLOC = 0,
  CUBE__MEM_EVENT_RELEASE = 1,
  CUBE__MEM_EVENT_OOM = 2,
} cube__mem_event_kind_t;

typedef struct cube__mem_event {
  uint64_t seq;   /* 0, 1, 2 ... per ring */
  uint64_t t_ns;  /* cube__now_ns */
  uint64_t id;    /* descriptor id (0 for an out-of-memory event) */
  uint64_t size;  /* requested bytes */
  uint64_t stream;
  const char* tag; /* interned, NULL: untagged */
  const char* memory; /* "device memory", "pinned host memory" (static) */
  uint32_t pool;  /* index in its manager's report (persistent: the last) */
  uint32_t kind;  /* cube__mem_event_kind_t */
} cube__mem_event_t;

/* Events a ring keeps: the most recent CUBE__MEM_RING_CAP, older ones are
 * overwritten (counted as dropped). 4096 x 64 bytes = 256 KiB per device,
 * allocated at the first event. */
#define CUBE__MEM_RING_CAP 4096u

typedef struct cube__mem_ring {
  pthread_mutex_t lock;
  cube__mem_event_t* events; /* CUBE__MEM_RING_CAP, NULL until the first event */
  uint64_t next;             /* seq of the next event */
} cube__mem_ring_t;

void cube__mem_ring_init(cube__mem_ring_t* ring);
void cube__mem_ring_deinit(cube__mem_ring_t* ring);
/* Appends |ev| (its seq is set here). Drops it silently when host memory
 * for the ring runs out. */
void cube__mem_ring_push(cube__mem_ring_t* ring, cube__mem_event_t* ev);
/* Copies the events kept, oldest first, into a malloc'd array (*out, NULL
 * when none) and returns their count; *out_total is every event ever
 * pushed. */
uint32_t cube__mem_ring_copy(cube__mem_ring_t* ring, cube__mem_event_t** out,
                             uint64_t* out_total);

#endif /* CUBE_MEMORY_TRACK_H_ */
