/* Collectives: the transport registry (which transport a backend uses), the
 * pending operations of each stream and their wait (with the abandonment of
 * an operation whose participants did not all join), the tasks that the
 * client queues on a participant's stream, and quiesce / shutdown (see
 * collective.h and docs/collectives.md).
 *
 * Files: world.c (this process's place, global ids, the timeout),
 * rendezvous.c (communicators, operations, records: what the transports are
 * built on, coll_internal.h), host.c and staged.c (the host and staged
 * transports), nccl/ (the nccl transport), scratch.c (host buffers kept for
 * reuse), reduce.c (reductions), mpi.c (MPI messages).
 */
#include "collective/collective.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "base/status.h"
#include "collective/coll_internal.h"
#include "platform/platform.h"
#include "server/server.h"
#include "server/tasks_internal.h"

/* An operation that a stream's next sync_collective waits for, and the
 * part's destination, which takes the taint of the operation's other inputs
 * (or its failure) when the record is settled. */
typedef struct cube__coll_pending {
  struct cube__coll_pending* next;
  cube__stream_t* stream;
  cube__coll_op_t* op;
  cube__memory_t* dst; /* a reference, or NULL (a send) */
  uint64_t dst_offset, bytes;
  cube__taint_t* own; /* the taint of the part's own input (a reference), or NULL */
} cube__coll_pending_t;

/* "all_reduce of 4096 bytes into memory 7": what a part's destination is
 * spoiled by. */
static const char* cube__coll_dst_what(char* buf, size_t size, bool all_reduce, uint64_t bytes,
                                       const cube__memory_t* dst) {
  snprintf(buf, size, "%s of %" PRIu64 " bytes into memory %" PRIu64,
           all_reduce ? "all_reduce" : "recv", bytes, dst->id);
  return buf;
}

/* On |x->stream|'s runner, |x->op| done: the destination takes the taint of
 * the inputs of the operation's other parts of this process (its own input's
 * was given when the part ran), or a root for the operation's failure, found
 * after the part ran (a participant that never came): its contents are not
 * the operation's. Drops |x|'s references; frees |x| when |owned|. (Inputs
 * of other processes count through the flag of their MPI messages, host.c;
 * through NCCL they do not: docs/failures.md, "Limits".) */
static void cube__coll_pending_settle(cube__coll_pending_t* x, bool owned) {
  cube__coll_op_t* op = x->op;
  if (x->dst) {
    pthread_mutex_lock(&op->comm->lock);
    cube__taint_t* spoiled = cube__taint_ref(op->spoiled);
    pthread_mutex_unlock(&op->comm->lock);
    if (op->status || (spoiled && !(x->own && cube__taint_contains(x->own, spoiled)))) {
      char what[96];
      cube__taint_collective(x->stream, x->dst, x->dst_offset, x->bytes, spoiled,
                             cube__coll_dst_what(what, sizeof(what),
                                                 op->kind == CUBE_COLLECTIVE_ALL_REDUCE,
                                                 x->bytes, x->dst),
                             op->status);
    }
    cube__taint_unref(spoiled);
    cube__memory_unref(x->dst);
  }
  cube__taint_unref(x->own);
  cube__coll_op_unref(op);
  if (owned) free(x);
}

static pthread_mutex_t g_pending_lock = PTHREAD_MUTEX_INITIALIZER;
static cube__coll_pending_t* g_pending;

//===----------------------------------------------------------------------===//
// Transports
//===----------------------------------------------------------------------===//

/* The transports this library has; backend tables name them by id. */
static const cube__coll_transport_t* const g_transports[] = {
    &cube__coll_host_transport,
    &cube__coll_staged_transport,
#ifdef CUBE_HAVE_NCCL_TRANSPORT
    &cube__coll_nccl_transport,
#endif
};
#define CUBE__TRANSPORTS (sizeof(g_transports) / sizeof(g_transports[0]))

static const cube__coll_transport_t* cube__coll_transport_find(const char* id) {
  for (size_t i = 0; i < CUBE__TRANSPORTS; ++i)
    if (strcmp(g_transports[i]->id, id) == 0) return g_transports[i];
  return NULL;
}

/* What |backend| prefers: its table's list, else host memory's "host" or a
 * device's "staged". */
static const char* const* cube__coll_preferences(const cube__backend_vtable_t* vt) {
  static const char* const host[] = {"host", NULL};
  static const char* const staged[] = {"staged", NULL};
  if (vt->collective_transports) return vt->collective_transports;
  return (vt->caps & CUBE__CAP_HOST_MEMORY) ? host : staged;
}

/* The transport, and the first preferred one skipped with why (once a
 * transport was found unavailable it stays so: its reason is kept). */
static const cube__coll_transport_t* cube__coll_choose(cube_backend_t backend,
                                                       const cube__coll_transport_t** out_skipped) {
  const cube__backend_vtable_t* vt = cube__backend_get(backend);
  if (out_skipped) *out_skipped = NULL;
  if (!vt) return NULL;
  for (const char* const* id = cube__coll_preferences(vt); *id; ++id) {
    const cube__coll_transport_t* t = cube__coll_transport_find(*id);
    if (!t) continue; /* not built into this library */
    cube_status_t st = t->available ? t->available() : CUBE_OK;
    if (!st) return t;
    cube_status_free(st);
    if (out_skipped && !*out_skipped) *out_skipped = t;
  }
  return NULL;
}

const cube__coll_transport_t* cube__coll_transport_for(cube_backend_t backend) {
  return cube__coll_choose(backend, NULL);
}

const char* cube_collective_transport(cube_backend_t backend, const char** out_detail) {
  const cube__coll_transport_t* skipped = NULL;
  const cube__coll_transport_t* t = cube__coll_choose(backend, &skipped);
  const char* detail = t ? (t->describe ? t->describe() : t->name)
                         : "the backend has no collective transport";
  if (t && skipped && (unsigned)backend < CUBE__BACKEND_COUNT) {
    /* The fallback, and why the preferred one is not used (the reason does
     * not change once it was tried). */
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static char lines[CUBE__BACKEND_COUNT][640];
    pthread_mutex_lock(&lock);
    if (!lines[backend][0])
      snprintf(lines[backend], sizeof(lines[backend]), "%s; %s not used: %s", t->name,
               skipped->id, skipped->describe ? skipped->describe() : skipped->name);
    pthread_mutex_unlock(&lock);
    detail = lines[backend];
  }
  if (out_detail) *out_detail = detail;
  return t ? t->id : NULL;
}

//===----------------------------------------------------------------------===//
// Pending operations and their wait
//===----------------------------------------------------------------------===//

void cube__coll_pending_settle_done(cube__stream_t* stream) {
  cube__coll_pending_t* drop = NULL;
  pthread_mutex_lock(&g_pending_lock);
  /* Completed successes of this stream need no wait: settled and forgotten
   * here (on the stream's runner, after them in its order, before its next
   * part), so that a program that never calls sync_collective does not grow
   * the list. The list is newest first: |drop| comes out oldest first. */
  for (cube__coll_pending_t** p = &g_pending; *p;) {
    cube__coll_pending_t* x = *p;
    if (x->stream == stream && cube__event_is_set(&x->op->done) && !x->op->status) {
      *p = x->next;
      x->next = drop;
      drop = x;
    } else {
      p = &x->next;
    }
  }
  pthread_mutex_unlock(&g_pending_lock);
  while (drop) {
    cube__coll_pending_t* x = drop;
    drop = x->next;
    cube__coll_pending_settle(x, true);
  }
}

void cube__coll_pending_add(cube__stream_t* stream, cube__comm_t* comm, cube__coll_op_t* op,
                            cube__memory_t* dst, uint64_t dst_offset, uint64_t bytes,
                            cube__taint_t* own) {
  (void)comm;
  cube__coll_pending_t* e = calloc(1, sizeof(*e));
  cube__coll_pending_t local;
  cube__coll_pending_t* x = e ? e : &local;
  memset(x, 0, sizeof(*x));
  x->stream = stream;
  x->op = op;
  x->dst = dst;
  if (dst) cube__memory_ref(dst);
  x->dst_offset = dst_offset;
  x->bytes = bytes;
  x->own = cube__taint_ref(own);
  if (!e) {
    /* Out of host memory: wait now rather than lose the ordering (and the
     * taint of the other inputs). */
    cube__event_wait(&op->done, UINT64_MAX);
    cube__coll_pending_settle(x, false);
    return;
  }
  pthread_mutex_lock(&g_pending_lock);
  e->next = g_pending;
  g_pending = e;
  pthread_mutex_unlock(&g_pending_lock);
}

/* Abandons |op| (its participants did not all join): the error names those
 * that are missing. */
static void cube__coll_op_abandon(cube__coll_op_t* op, uint64_t timeout_ns) {
  cube__comm_t* c = op->comm;
  pthread_mutex_lock(&c->lock);
  if (op->complete || op->arrived >= op->expected) {
    pthread_mutex_unlock(&c->lock);
    return;
  }
  char missing[512];
  size_t o = 0;
  uint32_t nmiss = 0;
  missing[0] = 0;
  for (uint32_t i = 0; i < op->nslots; ++i) {
    if (op->slots[i].has) continue;
    cube_device_id_t d;
    if (op->kind == CUBE_COLLECTIVE_ALL_REDUCE) {
      if (!c->local[i]) continue;
      d = c->ids[i];
    } else {
      if (!c->local[i == 0 ? op->from : op->to]) continue; /* the other process's side */
      d = c->ids[i == 0 ? op->from : op->to];
    }
    char nm[32];
    bool ar = op->kind == CUBE_COLLECTIVE_ALL_REDUCE;
    const char* role = ar ? "" : (i == 0 ? "sender " : "receiver ");
    uint32_t place = ar ? i : (i == 0 ? op->from : op->to);
    if (o + 48 < sizeof(missing))
      o += (size_t)snprintf(missing + o, sizeof(missing) - o, "%s%s%s", nmiss ? ", " : "", role,
                            cube__coll_dev_name(d, nm, sizeof(nm)));
    if (c->rank_count > 1 && o + 24 < sizeof(missing))
      o += (size_t)snprintf(missing + o, sizeof(missing) - o, " (rank %u)", c->rank_of[place]);
    ++nmiss;
  }
  char what[320];
  cube__coll_op_name(op, what, sizeof(what));
  cube_status_t st = cube__status_make(
      CUBE_STATUS_DEADLINE_EXCEEDED,
      "%s: %s did not join within %.3g s (CUBE_COLLECTIVE_TIMEOUT); the operation is abandoned "
      "on every participant",
      what, missing, (double)timeout_ns / 1e9);
  cube__coll_op_complete_locked(op, st);
  pthread_mutex_unlock(&c->lock);
}

cube_status_t cube__coll_pending_wait(cube__stream_t* stream, uint64_t timeout_ns) {
  cube__coll_pending_t* mine = NULL;
  pthread_mutex_lock(&g_pending_lock);
  for (cube__coll_pending_t** p = &g_pending; *p;) {
    cube__coll_pending_t* x = *p;
    if (x->stream == stream) {
      *p = x->next;
      x->next = mine; /* the list is newest first: this reverses it */
      mine = x;
    } else {
      p = &x->next;
    }
  }
  pthread_mutex_unlock(&g_pending_lock);
  cube_status_t errors = NULL;
  while (mine) {
    cube__coll_pending_t* x = mine;
    mine = x->next;
    cube__coll_op_t* op = x->op;
    if (!cube__event_wait(&op->started, timeout_ns)) {
      cube__coll_op_abandon(op, timeout_ns);
      cube__event_wait(&op->started, UINT64_MAX); /* all joined: starting */
    }
    cube__coll_op_help(op);
    cube__event_wait(&op->done, UINT64_MAX);
    if (op->status) errors = cube__status_join(errors, cube__status_clone(op->status));
    cube__coll_pending_settle(x, true);
  }
  return errors;
}

//===----------------------------------------------------------------------===//
// Tasks (queued by the client on the participant's stream)
//===----------------------------------------------------------------------===//

/* The timeout of the task running on this thread (set by the tasks below). */
static _Thread_local uint64_t g_perform_timeout_ns;

uint64_t cube__coll_task_timeout_ns(void) { return g_perform_timeout_ns; }

/* Queued by cube__coll_submit below; |part| carries the participant's stream. */
typedef struct cube__coll_task {
  const cube__coll_transport_t* transport;
  cube__comm_t* comm;
  cube_collective_kind_t kind;
  uint64_t timeout_ns;
  cube__coll_part_t part;
} cube__coll_task_t;

static cube_status_t cube__coll_task_run(void* state, void* payload) {
  (void)state;
  cube__coll_task_t* t = payload;
  cube__coll_op_t* op = NULL;
  g_perform_timeout_ns = t->timeout_ns;
  /* The stream's earlier operations that are done pass their taint on
   * before this part's (which may write the same buffer) is given. */
  cube__coll_pending_settle_done(t->part.stream);
  /* Taint (server/taint.c): what the part writes follows its own input; the
   * transport may take the references over, so these are the task's own. */
  cube__memory_t* dst = t->part.dst_mem;
  cube__stream_t* stream = t->part.stream;
  uint64_t dst_offset = t->part.dst_offset, bytes = t->part.bytes;
  cube__taint_t* in =
      t->part.src_mem ? cube__taint_ref(cube__memory_taint(t->part.src_mem)) : NULL;
  if (dst) cube__memory_ref(dst);
  cube_status_t st;
  switch (t->kind) {
    case CUBE_COLLECTIVE_ALL_REDUCE: st = t->transport->all_reduce(t->comm, &t->part, &op); break;
    case CUBE_COLLECTIVE_SEND: st = t->transport->send(t->comm, &t->part, &op); break;
    default: st = t->transport->recv(t->comm, &t->part, &op); break;
  }
  if (dst) {
    if (__builtin_expect(st != NULL || in != NULL || cube__memory_taint(dst) != NULL, 0)) {
      char what[96];
      cube__taint_collective(stream, dst, dst_offset, bytes, in,
                             cube__coll_dst_what(what, sizeof(what),
                                                 t->kind == CUBE_COLLECTIVE_ALL_REDUCE, bytes,
                                                 dst),
                             st);
    }
  }
  /* Recorded while this task still holds |dst|. */
  if (op) cube__coll_pending_add(stream, t->comm, op, dst, dst_offset, bytes, in);
  if (dst) cube__memory_unref(dst);
  cube__taint_unref(in);
  if (st) cube__stream_push_error(stream, st);
  return CUBE_OK;
}

static void cube__coll_task_drop(void* payload) {
  cube__coll_task_t* t = payload;
  cube__coll_part_release(&t->part);
}

cube_status_t cube__coll_submit(cube__stream_t* stream, cube__comm_t* comm,
                                cube_collective_kind_t kind, const cube__coll_part_t* part,
                                uint64_t timeout_ns) {
  cube__coll_task_t t;
  memset(&t, 0, sizeof(t));
  t.transport = comm->transport;
  t.comm = comm;
  t.kind = kind;
  t.timeout_ns = timeout_ns;
  t.part = *part;
  t.part.stream = stream;
  _Static_assert(sizeof(cube__coll_task_t) <= CUBE__TASK_INLINE_BYTES, "task fits a queue cell");
  /* Queued, or recorded as a task node when the stream captures: a replay
   * runs this task again on a copy, with the replay's stream and the slots
   * of src and dst (substitutes applied). */
  cube__graph_task_view_t views[2];
  uint32_t nv = 0;
  if (t.part.src_mem)
    views[nv++] = (cube__graph_task_view_t){offsetof(cube__coll_task_t, part.src_mem),
                                            offsetof(cube__coll_task_t, part.src_offset),
                                            t.part.bytes};
  if (t.part.dst_mem)
    views[nv++] = (cube__graph_task_view_t){offsetof(cube__coll_task_t, part.dst_mem),
                                            offsetof(cube__coll_task_t, part.dst_offset),
                                            t.part.bytes};
  const char* what = kind == CUBE_COLLECTIVE_ALL_REDUCE ? "cube_client_all_reduce"
                     : kind == CUBE_COLLECTIVE_SEND     ? "cube_client_send"
                                                        : "cube_client_recv";
  return cube__graph_record_task(stream, cube__coll_task_run, &t, sizeof(t), cube__coll_task_drop,
                                 offsetof(cube__coll_task_t, part.stream), nv, views, what);
}

typedef struct cube__coll_sync_task {
  cube__stream_t* stream;
  uint64_t timeout_ns;
} cube__coll_sync_task_t;

static cube_status_t cube__coll_sync_run(void* state, void* payload) {
  (void)state;
  cube__coll_sync_task_t* t = payload;
  cube__stream_t* stream = t->stream;
  g_perform_timeout_ns = t->timeout_ns;
  cube_status_t st = cube__coll_pending_wait(stream, t->timeout_ns);
  const cube__coll_transport_t* tr = cube__coll_transport_for(stream->server->id.backend);
  if (tr && tr->sync) st = cube__status_join(st, tr->sync(NULL, stream));
  if (st) cube__stream_push_error(stream, cube__status_annotate(st, "cube_client_sync_collective"));
  return CUBE_OK;
}

cube_status_t cube__coll_submit_sync(cube__stream_t* stream, uint64_t timeout_ns) {
  cube__coll_sync_task_t t = {stream, timeout_ns};
  /* In a capture, a node: a replay waits there for what its stream has
   * pending (the graph's collectives before it, and any queued before the
   * replay), as this call would. */
  return cube__graph_record_task(stream, cube__coll_sync_run, &t, sizeof(t), NULL,
                                 offsetof(cube__coll_sync_task_t, stream), 0, NULL,
                                 "cube_client_sync_collective");
}

//===----------------------------------------------------------------------===//
// Shutdown
//===----------------------------------------------------------------------===//

void cube__coll_quiesce(void) {
  for (size_t i = 0; i < CUBE__TRANSPORTS; ++i)
    if (g_transports[i]->quiesce) g_transports[i]->quiesce();
}

void cube__coll_shutdown(void) {
  pthread_mutex_lock(&g_pending_lock);
  cube__coll_pending_t* p = g_pending;
  g_pending = NULL;
  pthread_mutex_unlock(&g_pending_lock);
  while (p) {
    cube__coll_pending_t* x = p;
    p = x->next;
    if (x->dst) cube__memory_unref(x->dst);
    cube__taint_unref(x->own);
    cube__coll_op_unref(x->op);
    free(x);
  }
  cube__coll_rendezvous_shutdown();
  for (size_t i = 0; i < CUBE__TRANSPORTS; ++i)
    if (g_transports[i]->shutdown) g_transports[i]->shutdown();
  cube__coll_scratch_shutdown();
  /* The world (MPI) stays: MPI cannot be started twice in a process. */
}
