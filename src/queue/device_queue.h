/* Device queues (docs/cubecl.md, "Servers and the device queue"): one runner per device
 * key that executes tasks for the services registered on that device, in
 * submission order.
 *
 * A service is a type of state living on a device (the compute server is one;
 * tests register others), identified by its vtable pointer. Its state is
 * created exactly once per (device, service), even under contention, and is
 * only touched by tasks, which never run concurrently on one device.
 *
 * Modes:
 *  - THREADED (default): a runner thread per device, fed by a bounded
 *    lock-free multi-producer queue of fixed-size cells (payloads up to
 *    CUBE__TASK_INLINE_BYTES are copied into the cell, larger ones go to the
 *    heap). submit() returns at once and wakes the runner only if it sleeps;
 *    the runner spins briefly before sleeping on a futex. Work submitted with
 *    cube__submit_here may run on the submitting thread instead, when nothing
 *    is ahead of it: that thread then holds its (unpublished) cell, so the
 *    runner starts nothing behind it until it is done, and tasks still never
 *    run concurrently on one device.
 *  - INLINE: tasks run on the calling thread under the device lock.
 *
 * Re-entrancy: a call made from inside a task or an exclusive function
 * running on this device (the runner thread, or in inline mode the thread
 * holding the device lock) executes immediately on that thread. A call into
 * the *same* service from inside one of its own tasks is refused with
 * CUBE_STATUS_FAILED_PRECONDITION ("re-entrant use of service ..."): CubeCL
 * panics there; we return an error. Calls into other services of the same
 * device work, as in CubeCL (docs/cubecl.md, "Client: exclusive").
 *
 * Every task runs with the submitter's stream id set as the runner thread's
 * current stream (cube__stream_current_id), as CubeCL's StreamId::executes.
 *
 * All functions are thread-safe.
 */
#ifndef CUBE_QUEUE_DEVICE_QUEUE_H_
#define CUBE_QUEUE_DEVICE_QUEUE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube/options.h"
#include "cube/status.h"
#include "platform/platform.h"

/* Bytes of payload stored in a queue cell without a heap allocation. */
#define CUBE__TASK_INLINE_BYTES 192

typedef struct cube__device_key {
  uint32_t type;  /* backend (or a test's own type number) */
  uint32_t index;
} cube__device_key_t;

typedef struct cube__service_vtable {
  const char* name;
  /* Creates the state; runs once per (device, service). */
  cube_status_t (*create)(cube__device_key_t key, void* create_arg, void** out_state);
  /* Destroys it (cube__queue_shutdown_all / cube__queue_shutdown). */
  void (*destroy)(void* state);
  /* Receives the failure of a fire-and-forget task (consumes |status|); may
   * be NULL (the status is then logged to stderr and freed). */
  void (*task_failed)(void* state, uint64_t stream_id, cube_status_t status);
} cube__service_vtable_t;

typedef struct cube__device cube__device_t;   /* one per key: runner + lock */
typedef struct cube__service cube__service_t; /* one per (device, service) */

/* Task functions. |payload| is the copy made at submit (fire-and-forget) or
 * the caller's pointer (blocking). */
typedef cube_status_t (*cube__task_fn)(void* state, void* payload);
/* Optional destructor of a submitted payload, run exactly once after the task
 * ran (or when the queue is shut down without running it). */
typedef void (*cube__payload_drop_fn)(void* payload);

/* Returns the service |vt| of device |key|, creating the device (with |mode|;
 * CUBE_QUEUE_DEFAULT reads CUBE_DEVICE_QUEUE, "inline" or "threaded") and the
 * state (vt->create(key, create_arg)) on first use. Later calls return the
 * same service whatever |mode| says. */
cube_status_t cube__service_get(cube__device_key_t key, cube_queue_mode_t mode,
                                const cube__service_vtable_t* vt, void* create_arg,
                                cube__service_t** out_service);

/* As cube__service_get, but this call must create the state (CubeCL's init):
 * ALREADY_EXISTS when the service exists or another thread created it first.
 * Of several threads calling it at once for one (key, vt), exactly one
 * succeeds. */
cube_status_t cube__service_create(cube__device_key_t key, cube_queue_mode_t mode,
                                   const cube__service_vtable_t* vt, void* create_arg,
                                   cube__service_t** out_service);

/* Registers an already-created |state| for (key, vt) (CubeCL's insert).
 * ALREADY_EXISTS if the service exists; the state is then not taken. */
cube_status_t cube__service_insert(cube__device_key_t key, cube_queue_mode_t mode,
                                   const cube__service_vtable_t* vt, void* state,
                                   cube__service_t** out_service);

/* True if the service exists already (no creation). */
bool cube__service_exists(cube__device_key_t key, const cube__service_vtable_t* vt);

cube__device_t* cube__service_device(cube__service_t* s);
void* cube__service_state_unsafe(cube__service_t* s); /* for read-only immutable parts */
bool cube__device_is_blocking(const cube__device_t* d); /* inline mode */
cube__device_key_t cube__device_key(const cube__device_t* d);

/* |st| prefixed with |fn| when it is the refusal of a call into a service
 * from inside one of its own tasks (above, "Re-entrancy"): client calls
 * whose other failures do not start with their name (a launch, a read) name
 * themselves there. Any other status (or CUBE_OK) is returned as it is. */
cube_status_t cube__queue_name_refusal(cube_status_t st, const char* fn);

/* True when |st| is that refusal. */
bool cube__queue_refused_reentry(cube_status_t st);

/* Fire and forget: copies |size| bytes of |payload| and queues |fn|. A
 * non-OK return of |fn| goes to vt->task_failed. Returns an error only if
 * the task could not be queued (re-entrant use of the same service, or out
 * of host memory for a large payload); then |drop| has run. */
cube_status_t cube__submit(cube__service_t* s, uint64_t stream_id, cube__task_fn fn,
                           const void* payload, size_t size, cube__payload_drop_fn drop);

/* Builds a payload in place: writes the task's record (|size| bytes at most)
 * into |payload| (64-byte aligned) from |arg|. Must not fail; it is where
 * the payload takes the references its drop releases. */
typedef void (*cube__payload_fill_fn)(void* payload, const void* arg);

/* As cube__submit, but the record is built directly where it is queued (the
 * ring cell, or the heap for a payload over CUBE__TASK_INLINE_BYTES) by
 * |fill|, instead of being copied there from a record built elsewhere. When
 * the task cannot be queued, |fill| has not run and nothing is dropped. */
cube_status_t cube__submit_fill(cube__service_t* s, uint64_t stream_id, cube__task_fn fn,
                                size_t size, cube__payload_fill_fn fill, const void* arg,
                                cube__payload_drop_fn drop);

/* Runs |fn|(state, payload) on the device and waits for it; returns its
 * status. |payload| stays on the caller's side (borrowed). */
cube_status_t cube__submit_blocking(cube__service_t* s, uint64_t stream_id, cube__task_fn fn,
                                    void* payload);

/* Work that runs on the submitting thread when the device has nothing else
 * to run (cube__submit_here), or else is queued as a task. */
typedef struct cube__here_task {
  /* The work, run on the calling thread: here(state, here_arg). */
  cube__task_fn here;
  void* here_arg;
  /* The same work as a queued task: fn(state, payload), where |prepare|
   * wrote the payload (|size| bytes at most, CUBE__TASK_INLINE_BYTES at
   * most, 64-byte aligned) into the queue's cell from |prepare_arg|. A
   * failing |prepare| must have taken nothing: the status is returned and
   * nothing is queued. |drop| (may be NULL) as for cube__submit. */
  cube__task_fn fn;
  size_t size;
  cube_status_t (*prepare)(void* payload, void* prepare_arg);
  void* prepare_arg;
  cube__payload_drop_fn drop;
  /* How long to poll for the tasks queued before to finish before queueing
   * instead (0: run here only if they have finished already). */
  uint64_t wait_ns;
  /* false: a blocking call (a read, a sync), which runs here when the work
   * ahead of it has run (after polling |wait_ns|); the calling thread's next
   * submission to the device then "follows a blocking call".
   * true: work the caller does not wait for (a launch, a replay), which runs
   * here only when it follows a blocking call that ran here and the work
   * ahead has run (no poll, |wait_ns| is ignored): a thread that alternates
   * work and waits (launch, read; replay, sync) then issues both from its
   * own thread, as the driver runs them fastest, while a burst of work after
   * a wait goes to the runner from its second submission on. */
  bool after_blocking;
} cube__here_task_t;

/* The device of the blocking call this thread ran on its own thread as its
 * last submission (see above), or NULL. For a quick test before building a
 * cube__here_task_t on a hot path; not for use across threads. */
extern _Thread_local cube__device_t* cube__tl_after_blocking;
static inline bool cube__follows_blocking_any(void) { return cube__tl_after_blocking != NULL; }
static inline bool cube__follows_blocking(const cube__device_t* d) {
  return cube__tl_after_blocking == d;
}

/* Runs |t|'s work on the calling thread when it can run there at once, else
 * queues it; either way in submission order, as cube__submit.
 *
 * THREADED mode: the call takes the next place in the device's queue, as a
 * submission does. When every task queued before it has run (at once, or
 * within t->wait_ns of polling), the calling thread is not a runner, the
 * task is a blocking call or follows one (t->after_blocking) and
 * CUBE_CALLER_RUNS is on,
 * t->here runs on the calling thread with the device to itself: the runner
 * starts nothing queued after it (by any thread, for any stream or service)
 * until it returned, and calls into the device from inside it run at once,
 * as on the runner; |s| is borrowed and |stream_id| current as for a task.
 * Its status is returned and *out_here is true. Otherwise the task is
 * queued in that place (t->prepare fills it), the call returns OK at once
 * and *out_here is false.
 * INLINE mode, or a call from inside a task of the device: t->here runs at
 * once on this thread (under the device lock), as cube__submit would run the
 * task; *out_here is true.
 *
 * Fails without running or queueing anything (*out_here false) as cube__submit
 * (re-entrant use of |s|, destroyed service), with INVALID_ARGUMENT for a
 * NULL argument or function or a payload over CUBE__TASK_INLINE_BYTES, or
 * with t->prepare's status. Thread-safe. */
cube_status_t cube__submit_here(cube__service_t* s, uint64_t stream_id, const cube__here_task_t* t,
                                bool* out_here);

/* Runs |fn|(user) with the device to itself (no service state borrowed); calls
 * into any service of this device from inside run at once. Returns |fn|'s
 * status. */
cube_status_t cube__exclusive(cube__device_t* d, uint64_t stream_id, cube_status_t (*fn)(void*),
                              void* user);

/* Says that the callers of |d| issue their own work after a blocking call
 * (cube__here_task_t.after_blocking: launches and replays of a device backend
 * run on the calling thread right after a read or sync that ran there). The
 * runner then does not spin after it stepped over a cell its caller ran: the
 * next work of that caller most likely runs on the caller too, and a
 * spinning runner would only pull the ring's lines away from it; the next
 * queued submission wakes it. Without it the runner spins as after any
 * cell, so that a device whose launches are always queued (the CPU) finds it
 * awake. Thread-safe. */
void cube__device_set_caller_issues(cube__device_t* d, bool on);

/* How long a caller that waits for its call to run on the runner (a sync, a
 * read, a blocking submission) polls before it sleeps: |polls| polls (0: the
 * platform's default, cube__event_wait). A device whose work runs on the
 * host's cores (the CPU backend: the runner and every worker of the pool)
 * wants a short poll, so that the waiting caller does not take a core from
 * the kernel it waits for. Thread-safe. */
void cube__device_set_caller_polls(cube__device_t* d, unsigned polls);

/* Waits, without a timeout, for |e|, which work queued on |d| sets: polls as
 * cube__device_set_caller_polls says, then sleeps. Thread-safe. */
void cube__device_wait(cube__device_t* d, cube__event_t* e);

/* Makes sure everything queued so far will run without further submissions
 * (our runner never waits for a batch to fill, so this only wakes it). */
void cube__device_flush(cube__device_t* d);

/* True on the thread currently executing tasks of |d| (runner thread, or
 * the inline lock holder). */
bool cube__device_is_current(const cube__device_t* d);

/* The calling thread's stream id: the id of the task being run on a runner,
 * else the thread's own id (0, 1, 2 ... in order of first use). */
uint64_t cube__stream_current_id(void);
/* As cube__stream_current_id, without giving the thread an id when it has
 * none yet: false then. */
bool cube__stream_current_id_peek(uint64_t* out_id);
/* A fresh id never handed to a thread. */
uint64_t cube__stream_new_id(void);

/* Stops the device's runner after the queued tasks ran and destroys its
 * services (creation order reversed). Not safe concurrently with use of the
 * device. */
void cube__queue_shutdown(cube__device_key_t key);
void cube__queue_shutdown_all(void);
/* Waits until every threaded device ran the tasks queued so far (a device's
 * cells run in order: an exclusive no-op queued behind them). cube_shutdown
 * calls it first, so that no device is destroyed while another still runs a
 * task that uses its memory (the last participant of a collective). */
void cube__queue_drain_all(void);

#endif /* CUBE_QUEUE_DEVICE_QUEUE_H_ */
