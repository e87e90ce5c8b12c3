/* The registry of devices and, per device, of its services: lookup,
 * creation (exactly one of concurrent creators succeeds), insertion. See
 * device_queue.h; the layout is described in device_queue.c. */
#include <stdio.h>
#include <stdlib.h>

#include "base/options.h"
#include "base/status.h"
#include "platform/platform.h"
#include "queue/queue_internal.h"

pthread_mutex_t cube__queue_registry_lock = PTHREAD_MUTEX_INITIALIZER;
cube__device_t* cube__queue_devices; /* newest first */

const char* cube__queue_key_name(cube__device_key_t key, char* buf, size_t n) {
  const char* b = cube_backend_name((cube_backend_t)key.type);
  if (b)
    snprintf(buf, n, "%s:%u", b, key.index);
  else
    snprintf(buf, n, "type%u:%u", key.type, key.index);
  return buf;
}

/* ---------------------------------------------------------------------------
 * Registry
 * ------------------------------------------------------------------------- */

cube__device_t* cube__queue_find_device_locked(cube__device_key_t key) {
  for (cube__device_t* d = cube__queue_devices; d; d = d->next)
    if (d->key.type == key.type && d->key.index == key.index) return d;
  return NULL;
}

static cube__service_t* cube__find_service_locked(cube__device_t* d,
                                                  const cube__service_vtable_t* vt) {
  for (cube__service_t* s = d->services; s; s = s->next)
    if (s->vt == vt) return s;
  return NULL;
}

void cube__queue_device_free(cube__device_t* d) {
  cube__service_t* s = d->services;
  while (s) {
    cube__service_t* next = s->next;
    free(s);
    s = next;
  }
  pthread_mutex_destroy(&d->services_lock);
  pthread_cond_destroy(&d->services_cv);
  pthread_mutex_destroy(&d->exec_mutex);
  cube__aligned_free(d->cells);
  cube__aligned_free(d);
}

/* Resolves |mode| (CUBE_QUEUE_DEFAULT takes the CUBE_DEVICE_QUEUE option). */
static cube_status_t cube__resolve_mode(cube_queue_mode_t mode, bool* out_inline) {
  switch (mode) {
    case CUBE_QUEUE_INLINE:
      *out_inline = true;
      return CUBE_OK;
    case CUBE_QUEUE_THREADED:
      *out_inline = false;
      return CUBE_OK;
    case CUBE_QUEUE_DEFAULT: {
      /* CUBE_DEVICE_QUEUE's words: threaded (0), inline (1). */
      *out_inline = cube__option_enum(CUBE__OPT_DEVICE_QUEUE) == 1;
      return cube__option_status(CUBE__OPT_DEVICE_QUEUE);
    }
  }
  return CUBE_INVALID("device queue: unknown queue mode %d", (int)mode);
}

static cube_status_t cube__device_new(cube__device_key_t key, bool is_inline,
                                      cube__device_t** out) {
  cube__device_t* d = (cube__device_t*)cube__aligned_calloc(sizeof(*d), 64);
  if (!d)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "device %s: no memory for its queue",
                             CUBE__KEY(key));
  atomic_init(&d->enqueue_pos, 0);
  atomic_init(&d->sleeping, 0);
  atomic_init(&d->wake_seq, 0);
  atomic_init(&d->stop, false);
  atomic_init(&d->caller_issues, false);
  atomic_init(&d->owner, 0);
  d->key = key;
  d->is_inline = is_inline;
  pthread_mutex_init(&d->services_lock, NULL);
  pthread_cond_init(&d->services_cv, NULL);
  pthread_mutex_init(&d->exec_mutex, NULL);
  if (!is_inline) {
    d->cells = (cube__cell_t*)cube__aligned_alloc(sizeof(cube__cell_t) * CUBE__RING_CELLS, 64);
    if (!d->cells) {
      cube__queue_device_free(d);
      return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                               "device %s: no memory for its queue (%zu bytes)", CUBE__KEY(key),
                               sizeof(cube__cell_t) * CUBE__RING_CELLS);
    }
    for (size_t i = 0; i < CUBE__RING_CELLS; ++i) atomic_init(&d->cells[i].seq, i);
    char name[16];
    snprintf(name, sizeof(name), "cube-dev-%u-%u", key.type, key.index);
    cube_status_t st = cube__thread_create(&d->thread, cube__queue_runner_main, d, name, 0);
    if (st != CUBE_OK) {
      cube__queue_device_free(d);
      return cube__status_annotate(st, "device %s: starting its runner", CUBE__KEY(key));
    }
    d->has_thread = true;
  }
  *out = d;
  return CUBE_OK;
}

/* Finds or creates the device of |key|. */
static cube_status_t cube__device_get(cube__device_key_t key, cube_queue_mode_t mode,
                                      cube__device_t** out) {
  pthread_mutex_lock(&cube__queue_registry_lock);
  cube__device_t* d = cube__queue_find_device_locked(key);
  if (d) {
    pthread_mutex_unlock(&cube__queue_registry_lock);
    *out = d;
    return CUBE_OK;
  }
  bool is_inline = false;
  cube_status_t st = cube__resolve_mode(mode, &is_inline);
  if (st == CUBE_OK) st = cube__device_new(key, is_inline, &d);
  if (st == CUBE_OK) {
    d->next = cube__queue_devices;
    cube__queue_devices = d;
    *out = d;
  }
  pthread_mutex_unlock(&cube__queue_registry_lock);
  return st;
}

static void cube__append_service_locked(cube__device_t* d, cube__service_t* s) {
  if (d->services_tail)
    d->services_tail->next = s;
  else
    d->services = s;
  d->services_tail = s;
}

static void cube__unlink_service_locked(cube__device_t* d, cube__service_t* s) {
  cube__service_t* prev = NULL;
  for (cube__service_t* it = d->services; it; prev = it, it = it->next) {
    if (it != s) continue;
    if (prev)
      prev->next = s->next;
    else
      d->services = s->next;
    if (d->services_tail == s) d->services_tail = prev;
    return;
  }
}

/* ---------------------------------------------------------------------------
 * Services
 * ------------------------------------------------------------------------- */

/* Makes |s| ready with |state| and wakes the threads waiting for it.
 * d->services_lock held. */
static void cube__service_publish_locked(cube__device_t* d, cube__service_t* s, void* state) {
  s->state = state;
  s->ready = true;
  s->creator = 0;
  s->ready_next = d->ready;
  d->ready = s;
  pthread_cond_broadcast(&d->services_cv);
}

/* get (|must_create| false) and create (true: ALREADY_EXISTS once the service
 * is ready, whoever made it; a creation in progress elsewhere is waited for,
 * so that exactly one of concurrent creators succeeds). */
static cube_status_t cube__service_obtain(cube__device_key_t key, cube_queue_mode_t mode,
                                          const cube__service_vtable_t* vt, void* create_arg,
                                          bool must_create, cube__service_t** out_service) {
  if (!out_service) return CUBE_INVALID("cube__service_get: out_service is NULL");
  *out_service = NULL;
  if (!vt) return CUBE_INVALID("cube__service_get: service vtable is NULL");
  cube__device_t* d = NULL;
  CUBE_RETURN_IF_ERROR(cube__device_get(key, mode, &d));

  uintptr_t me = cube__queue_self();
  pthread_mutex_lock(&d->services_lock);
  for (;;) {
    cube__service_t* s = cube__find_service_locked(d, vt);
    if (!s) break;
    if (s->ready) {
      pthread_mutex_unlock(&d->services_lock);
      if (must_create)
        return cube__status_make(CUBE_STATUS_ALREADY_EXISTS,
                                 "service '%s' already exists on device %s",
                                 vt->name ? vt->name : "?", CUBE__KEY(key));
      *out_service = s;
      return CUBE_OK;
    }
    if (s->creator == me) {
      pthread_mutex_unlock(&d->services_lock);
      return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                               "service '%s' on device %s requested from inside its own "
                               "create function",
                               vt->name ? vt->name : "?", CUBE__KEY(key));
    }
    /* Another thread is creating it: wait, then look again (a failed
     * creation removes the entry and the next caller retries). */
    pthread_cond_wait(&d->services_cv, &d->services_lock);
  }
  if (!vt->create) {
    pthread_mutex_unlock(&d->services_lock);
    return CUBE_INVALID("service '%s' on device %s has no create function (use insert)",
                        vt->name ? vt->name : "?", CUBE__KEY(key));
  }
  cube__service_t* s = (cube__service_t*)calloc(1, sizeof(*s));
  if (!s) {
    pthread_mutex_unlock(&d->services_lock);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "service '%s' on device %s: no memory",
                             vt->name ? vt->name : "?", CUBE__KEY(key));
  }
  s->vt = vt;
  s->device = d;
  s->creator = me;
  cube__append_service_locked(d, s);
  pthread_mutex_unlock(&d->services_lock);

  /* Create outside the lock: create may use other services of the device. */
  void* state = NULL;
  cube_status_t st = vt->create(key, create_arg, &state);

  pthread_mutex_lock(&d->services_lock);
  if (st != CUBE_OK) {
    cube__unlink_service_locked(d, s);
    pthread_cond_broadcast(&d->services_cv);
    pthread_mutex_unlock(&d->services_lock);
    free(s);
    return cube__status_annotate(st, "creating service '%s' on device %s",
                                 vt->name ? vt->name : "?", CUBE__KEY(key));
  }
  cube__service_publish_locked(d, s, state);
  pthread_mutex_unlock(&d->services_lock);
  *out_service = s;
  return CUBE_OK;
}

cube_status_t cube__service_get(cube__device_key_t key, cube_queue_mode_t mode,
                                const cube__service_vtable_t* vt, void* create_arg,
                                cube__service_t** out_service) {
  return cube__service_obtain(key, mode, vt, create_arg, false, out_service);
}

cube_status_t cube__service_create(cube__device_key_t key, cube_queue_mode_t mode,
                                   const cube__service_vtable_t* vt, void* create_arg,
                                   cube__service_t** out_service) {
  return cube__service_obtain(key, mode, vt, create_arg, true, out_service);
}

cube_status_t cube__service_insert(cube__device_key_t key, cube_queue_mode_t mode,
                                   const cube__service_vtable_t* vt, void* state,
                                   cube__service_t** out_service) {
  if (out_service) *out_service = NULL;
  if (!vt) return CUBE_INVALID("cube__service_insert: service vtable is NULL");
  cube__device_t* d = NULL;
  CUBE_RETURN_IF_ERROR(cube__device_get(key, mode, &d));
  pthread_mutex_lock(&d->services_lock);
  if (cube__find_service_locked(d, vt)) {
    pthread_mutex_unlock(&d->services_lock);
    return cube__status_make(CUBE_STATUS_ALREADY_EXISTS,
                             "service '%s' is already registered on device %s",
                             vt->name ? vt->name : "?", CUBE__KEY(key));
  }
  cube__service_t* s = (cube__service_t*)calloc(1, sizeof(*s));
  if (!s) {
    pthread_mutex_unlock(&d->services_lock);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "service '%s' on device %s: no memory",
                             vt->name ? vt->name : "?", CUBE__KEY(key));
  }
  s->vt = vt;
  s->device = d;
  cube__append_service_locked(d, s);
  cube__service_publish_locked(d, s, state);
  pthread_mutex_unlock(&d->services_lock);
  if (out_service) *out_service = s;
  return CUBE_OK;
}

bool cube__service_exists(cube__device_key_t key, const cube__service_vtable_t* vt) {
  pthread_mutex_lock(&cube__queue_registry_lock);
  cube__device_t* d = cube__queue_find_device_locked(key);
  pthread_mutex_unlock(&cube__queue_registry_lock);
  if (!d) return false;
  pthread_mutex_lock(&d->services_lock);
  cube__service_t* s = cube__find_service_locked(d, vt);
  bool exists = s && s->ready;
  pthread_mutex_unlock(&d->services_lock);
  return exists;
}

cube__device_t* cube__service_device(cube__service_t* s) { return s ? s->device : NULL; }

void* cube__service_state_unsafe(cube__service_t* s) { return s ? s->state : NULL; }

bool cube__device_is_blocking(const cube__device_t* d) { return d && d->is_inline; }

cube__device_key_t cube__device_key(const cube__device_t* d) {
  if (!d) return (cube__device_key_t){0, 0};
  return d->key;
}
