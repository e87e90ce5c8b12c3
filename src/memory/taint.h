/* Taint: why a buffer holds no valid contents (docs/failures.md).
 *
 * A root is one failure: the launch, write or copy that did not produce the
 * contents of the buffers it should have written, with its status, what it
 * was and when it failed, and the work that was not run (or ran on invalid
 * contents) because of it: the chain, of which the first CUBE__TAINT_CHAIN
 * descriptions are kept and the rest counted.
 *
 * A taint is the set of roots a buffer's contents depend on: distinct roots
 * (sorted by when they failed), at most CUBE__TAINT_ROOTS of them, the
 * others counted. A taint never changes once it is made; buffers share one
 * by reference, and a buffer's taint is replaced as a whole
 * (cube__memory_set_taint). A descriptor with no taint has a NULL pointer,
 * and the process counts the descriptors with one (cube__tainted_buffers):
 * while none has, a launch pays one load of that counter.
 *
 * Thread safety: roots and taints are reference counted (atomically) and
 * may be released from any thread; a root's chain has a lock of its own.
 * Which thread may set a descriptor's taint is the server's rule (the
 * device's runner, or a caller with the device to itself). */
#ifndef CUBE_MEMORY_TAINT_H_
#define CUBE_MEMORY_TAINT_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cube/status.h"
#include "memory/memory.h"

#define CUBE__TAINT_CHAIN 8 /* descriptions of spoiled work kept per root */
#define CUBE__TAINT_ROOTS 8 /* distinct roots kept per taint */
#define CUBE__TAINT_DROPS 56 /* serials of the dropped roots known per taint */

typedef struct cube__taint_root {
  atomic_uint refs;
  uint64_t serial;         /* process-unique, in the order the failures happened */
  cube_status_t status;    /* the failure (owned) */
  char* what;              /* "launch of kernel 'k' on stream 3 of cpu:0" */
  char when[64];           /* UTC, "2026-12-20T17:06:43.123456Z" */
  pthread_mutex_t lock;    /* guards the chain */
  uint64_t spoiled;        /* work not run (or run on its buffers) because of it */
  char* chain[CUBE__TAINT_CHAIN];
} cube__taint_root_t;

typedef struct cube__taint {
  atomic_uint refs;
  uint32_t count;   /* roots kept */
  uint64_t dropped; /* distinct roots past CUBE__TAINT_ROOTS, not kept: their number, or
                       a lower bound of it when |inexact| */
  bool inexact;     /* more were dropped than |drops| names, and two such taints met:
                       which of their dropped roots were the same is not known */
  uint32_t ndrops;  /* serials in |drops| */
  uint64_t last_serial; /* the latest serial of its roots, kept or dropped */
  uint64_t drops[CUBE__TAINT_DROPS]; /* the earliest dropped roots' serials, ascending: so
                                        that a union counts each failure once */
  cube__taint_root_t* roots[CUBE__TAINT_ROOTS];
} cube__taint_t;

/* A taint of one new root: |failure| (cloned; the caller keeps its own) that
 * happened now, in |what|. NULL when there is no host memory for it (the
 * buffers then stay as they are: nothing is known to be wrong with them). */
cube__taint_t* cube__taint_create(cube_status_t failure, const char* what);

/* References. Both accept NULL. */
cube__taint_t* cube__taint_ref(cube__taint_t* t);
void cube__taint_unref(cube__taint_t* t);

/* The union of |a| and |b| (either may be NULL): a new reference, which is
 * |a| or |b| itself when one holds every root of the other. NULL when both
 * are NULL, or when there is no host memory (then a reference to the larger
 * one: a taint loses roots, never a buffer its taint). */
cube__taint_t* cube__taint_union(cube__taint_t* a, cube__taint_t* b);

/* Adds |what| ("launch of kernel 'b' on stream 2 (not run)") to the chain of
 * every root of |t|. */
void cube__taint_note(cube__taint_t* t, const char* what);

/* True when |a| holds every failure |b| holds (so a union of the two is
 * |a|); false when |b| is not exactly known. */
bool cube__taint_contains(const cube__taint_t* a, const cube__taint_t* b);

/* True when |t| holds the root |r|. */
bool cube__taint_has(const cube__taint_t* t, const cube__taint_root_t* r);

/* The DATA_LOST status of reading a buffer whose taint is |t|: one status per
 * root, joined (cube__status_join), each
 *   "<where>: no valid contents: <what> failed at <when>: <root message>;
 *    spoiled by it: <chain> (<n> in all)"
 * and, past the roots kept, "and <k> more failures". Never NULL. */
cube_status_t cube__taint_status(const cube__taint_t* t, const char* where);

/* How many descriptors of the process have a taint: while it is 0 (nothing
 * failed, or every failure was cleared), the launch path tests only this. */
extern atomic_uint_fast64_t cube__tainted_buffers;

static inline bool cube__taint_any(void) {
  return atomic_load_explicit(&cube__tainted_buffers, memory_order_acquire) != 0;
}

/* A descriptor's taint (NULL: its contents are valid). */
static inline cube__taint_t* cube__memory_taint(const cube__memory_t* m) {
  return atomic_load_explicit(&((cube__memory_t*)m)->taint, memory_order_acquire);
}

/* Replaces |m|'s taint by |t| (a reference the call takes over; NULL
 * clears it) and releases the old one. */
void cube__memory_set_taint(cube__memory_t* m, cube__taint_t* t);

#endif /* CUBE_MEMORY_TAINT_H_ */
