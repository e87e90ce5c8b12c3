/* Futures (see future.h); the public cube_future_* functions. */
#include "server/future.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/status.h"
#include "platform/platform.h"

struct cube_future_s {
  atomic_uint refs;       /* the caller's and the task's */
  cube__event_t done;
  cube_status_t status;   /* set before done */
  size_t count;
  cube_bytes_t** results; /* count entries, set before done */
  atomic_bool consumed;
};

cube_future_t* cube__future_create(size_t count) {
  cube_future_t* f = calloc(1, sizeof(*f));
  if (!f) return NULL;
  atomic_init(&f->refs, 2);
  cube__event_init(&f->done);
  f->count = count;
  if (count) {
    f->results = calloc(count, sizeof(cube_bytes_t*));
    if (!f->results) {
      free(f);
      return NULL;
    }
  }
  return f;
}

cube_bytes_t** cube__future_results(cube_future_t* f) { return f->results; }

void cube__future_unref(cube_future_t* f) {
  if (atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1) return;
  if (!atomic_load(&f->consumed)) {
    cube_bytes_release_array(f->results, f->count);
    cube_status_free(f->status);
  }
  free(f->results);
  free(f);
}

void cube__future_discard(cube_future_t* f) {
  if (!f) return;
  free(f->results);
  free(f);
}

void cube__future_complete(cube_future_t* f, cube_status_t status) {
  f->status = status;
  if (status) {
    cube_bytes_release_array(f->results, f->count);
    for (size_t i = 0; i < f->count; ++i) f->results[i] = NULL;
  }
  cube__event_set(&f->done);
  cube__future_unref(f);
}

cube_status_t cube_future_wait(cube_future_t* f, uint64_t timeout_ns, cube_bytes_t** out_bytes) {
  if (!f) return CUBE_INVALID("cube_future_wait: future is NULL");
  if (f->count && !out_bytes)
    return CUBE_INVALID("cube_future_wait: out_bytes is NULL for a future of %zu results",
                        f->count);
  if (!cube__event_wait(&f->done, timeout_ns))
    return cube__status_make(CUBE_STATUS_DEADLINE_EXCEEDED,
                             "cube_future_wait: not ready after %" PRIu64 " ns", timeout_ns);
  bool expected = false;
  if (!atomic_compare_exchange_strong(&f->consumed, &expected, true))
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "cube_future_wait: the result was already taken by an earlier wait");
  if (f->status) {
    cube_status_t s = f->status;
    f->status = NULL;
    return s;
  }
  for (size_t i = 0; i < f->count; ++i) {
    out_bytes[i] = f->results[i];
    f->results[i] = NULL;
  }
  return CUBE_OK;
}

bool cube_future_is_ready(const cube_future_t* f) {
  return f && cube__event_is_set((cube__event_t*)&f->done);
}

size_t cube_future_count(const cube_future_t* f) { return f ? f->count : 0; }

void cube_future_release(cube_future_t* f) {
  if (f) cube__future_unref(f);
}
