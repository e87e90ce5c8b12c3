/* Scratch buffers: the host buffers collectives use for large temporaries
 * (staging blocks, partial results, MPI messages), kept for reuse (see
 * cube__coll_scratch_get in collective.h). */
#include <stdint.h>
#include <string.h>

#include "collective/coll_internal.h"
#include "platform/platform.h"

//===----------------------------------------------------------------------===//
// Scratch buffers
//===----------------------------------------------------------------------===//

#define CUBE__SCRATCH_KEEP 16
#define CUBE__SCRATCH_HEAD 64

static pthread_mutex_t g_scratch_lock = PTHREAD_MUTEX_INITIALIZER;
static void* g_scratch[CUBE__SCRATCH_KEEP];
static size_t g_scratch_n;

static size_t cube__coll_scratch_cap(const void* p) {
  size_t cap;
  memcpy(&cap, (const char*)p - CUBE__SCRATCH_HEAD, sizeof(cap));
  return cap;
}

void* cube__coll_scratch_get(size_t size) {
  pthread_mutex_lock(&g_scratch_lock);
  size_t best = SIZE_MAX;
  for (size_t i = 0; i < g_scratch_n; ++i)
    if (cube__coll_scratch_cap(g_scratch[i]) >= size &&
        (best == SIZE_MAX ||
         cube__coll_scratch_cap(g_scratch[i]) < cube__coll_scratch_cap(g_scratch[best])))
      best = i;
  void* p = NULL;
  if (best != SIZE_MAX) {
    p = g_scratch[best];
    g_scratch[best] = g_scratch[--g_scratch_n];
  }
  pthread_mutex_unlock(&g_scratch_lock);
  if (p) return p;
  size_t cap = size < 4096 ? 4096 : (size + 65535) & ~(size_t)65535;
  char* base = cube__aligned_alloc(cap + CUBE__SCRATCH_HEAD, 64);
  if (!base) return NULL;
  memcpy(base, &cap, sizeof(cap));
  return base + CUBE__SCRATCH_HEAD;
}

void cube__coll_scratch_free(void* p) {
  if (p) cube__aligned_free((char*)p - CUBE__SCRATCH_HEAD);
}

void cube__coll_scratch_put(void* p) {
  if (!p) return;
  pthread_mutex_lock(&g_scratch_lock);
  if (g_scratch_n < CUBE__SCRATCH_KEEP) {
    g_scratch[g_scratch_n++] = p;
    p = NULL;
  } else {
    /* Full: keep the larger of this one and the smallest kept. */
    size_t small = 0;
    for (size_t i = 1; i < g_scratch_n; ++i)
      if (cube__coll_scratch_cap(g_scratch[i]) < cube__coll_scratch_cap(g_scratch[small]))
        small = i;
    if (cube__coll_scratch_cap(g_scratch[small]) < cube__coll_scratch_cap(p)) {
      void* x = g_scratch[small];
      g_scratch[small] = p;
      p = x;
    }
  }
  pthread_mutex_unlock(&g_scratch_lock);
  cube__coll_scratch_free(p);
}

void cube__coll_scratch_shutdown(void) {
  pthread_mutex_lock(&g_scratch_lock);
  size_t n = g_scratch_n;
  void* keep[CUBE__SCRATCH_KEEP];
  memcpy(keep, g_scratch, n * sizeof(void*));
  g_scratch_n = 0;
  pthread_mutex_unlock(&g_scratch_lock);
  for (size_t i = 0; i < n; ++i) cube__coll_scratch_free(keep[i]);
}
