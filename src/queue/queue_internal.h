/* The device queue's own types, shared by device_queue.c (the ring, the
 * runner, submission, shutdown) and services.c (the registry of devices and
 * their services). Nothing outside src/queue/ includes it. */
#ifndef CUBE_QUEUE_INTERNAL_H_
#define CUBE_QUEUE_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform/platform.h"
#include "queue/device_queue.h"

/* ---------------------------------------------------------------------------
 * Tunables
 * ------------------------------------------------------------------------- */

#define CUBE__RING_CELLS 1024u
#define CUBE__RING_MASK (CUBE__RING_CELLS - 1u)
#define CUBE__RUNNER_SPINS 4096       /* cpu_relax polls before yielding, */
#define CUBE__RUNNER_SPIN_NS 50000    /* ... or this long, whichever is first */
#define CUBE__RUNNER_YIELDS 8         /* sched_yield polls before sleeping */
#define CUBE__PRODUCER_SPINS 4096     /* ring full: cpu_relax retries */
#define CUBE__PRODUCER_YIELDS 64      /* then sched_yield retries */
#define CUBE__PRODUCER_SLEEP_NS 50000 /* then 50 us sleeps */
#define CUBE__RUNNER_CATCH_UP 256u    /* cells run where claimed before a sleeping
                                         runner is woken to step over them */

/* ---------------------------------------------------------------------------
 * Types
 * ------------------------------------------------------------------------- */

enum {
  CUBE__CELL_NORMAL = 0,    /* payload inside the cell */
  CUBE__CELL_HEAP = 1,      /* payload in a 64-aligned heap copy (ptr) */
  CUBE__CELL_BLOCKING = 2,  /* ptr: a cube__sync_call_t on the caller's stack */
  CUBE__CELL_EXCLUSIVE = 3, /* ptr: a cube__sync_call_t, no service */
};

typedef struct cube__cell {
  _Alignas(64) atomic_size_t seq;
  uint32_t kind;
  cube__task_fn fn;
  cube__payload_drop_fn drop;
  cube__service_t* service;
  uint64_t stream_id;
  void* ptr;
  _Alignas(64) unsigned char payload[CUBE__TASK_INLINE_BYTES];
} cube__cell_t;

_Static_assert(offsetof(cube__cell_t, payload) == 64, "cell header must fit in 64 bytes");
_Static_assert(sizeof(cube__cell_t) % 64 == 0, "cells must be 64-byte multiples");
_Static_assert((CUBE__RING_CELLS & CUBE__RING_MASK) == 0, "ring size must be a power of two");
_Static_assert((CUBE__RUNNER_CATCH_UP & (CUBE__RUNNER_CATCH_UP - 1)) == 0 &&
                   CUBE__RUNNER_CATCH_UP < CUBE__RING_CELLS,
               "the catch-up period is a power of two below the ring's size");

/* A blocking call or an exclusive call waiting on the caller's stack. */
typedef struct cube__sync_call {
  cube__task_fn fn;             /* blocking */
  cube_status_t (*xfn)(void*);  /* exclusive */
  void* arg;
  cube_status_t result;
  cube__event_t done;
} cube__sync_call_t;

struct cube__service {
  const cube__service_vtable_t* vt;
  cube__device_t* device;
  void* state;
  bool ready;                       /* under services_lock */
  bool destroyed;                   /* set by shutdown on the executing thread */
  uintptr_t creator;                /* thread token while being created */
  struct cube__service* next;       /* all services, insertion order */
  struct cube__service* ready_next; /* ready list, newest first */
};

struct cube__device {
  /* Producers' line. */
  _Alignas(64) atomic_size_t enqueue_pos;
  /* Wake-up line: read by producers after each publish, written rarely. */
  _Alignas(64) atomic_uint sleeping;
  atomic_uint wake_seq;
  /* Runner's line. */
  _Alignas(64) size_t dequeue_pos;
  atomic_bool stop;
  atomic_bool caller_issues; /* cube__device_set_caller_issues */
  atomic_uint caller_polls;  /* cube__device_set_caller_polls; 0: the default */
  /* Cold. */
  _Alignas(64) cube__device_key_t key;
  bool is_inline;
  bool has_thread;
  cube__cell_t* cells;
  pthread_t thread;

  pthread_mutex_t services_lock;
  pthread_cond_t services_cv;
  cube__service_t* services; /* all, insertion order */
  cube__service_t* services_tail;
  cube__service_t* ready; /* completed creations, newest first */

  /* INLINE mode execution lock, re-entrant for its owner. */
  pthread_mutex_t exec_mutex;
  atomic_uintptr_t owner;
  unsigned depth;

  struct cube__device* next; /* registry */
};

typedef struct cube__borrow {
  cube__service_t* service;
  struct cube__borrow* prev;
} cube__borrow_t;

/* ---------------------------------------------------------------------------
 * Between the two files
 * ------------------------------------------------------------------------- */

/* The registry of devices (services.c), newest first, under its lock. */
extern pthread_mutex_t cube__queue_registry_lock;
extern cube__device_t* cube__queue_devices;

/* A token of the calling thread (device_queue.c: the address of a
 * thread-local). */
uintptr_t cube__queue_self(void);

/* The runner thread's body (device_queue.c); |arg| is the device. */
void* cube__queue_runner_main(void* arg);

/* The device of |key| in the registry, or NULL. Registry lock held. */
cube__device_t* cube__queue_find_device_locked(cube__device_key_t key);

/* Frees |d| and its service entries (after its runner stopped). */
void cube__queue_device_free(cube__device_t* d);

/* A device in messages: "cpu:0" for a backend's key (the compute server's
 * type is its backend number), "type1000:3" for a key of another service
 * type (the tests' own numbers): never two bare numbers. */
const char* cube__queue_key_name(cube__device_key_t key, char* buf, size_t n);
/* The name in a buffer that lives to the end of the enclosing block. */
#define CUBE__KEY(key) cube__queue_key_name((key), (char[48]){0}, 48)

#endif /* CUBE_QUEUE_INTERNAL_H_ */
