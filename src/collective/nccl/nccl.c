/* The nccl transport: collectives between CUDA devices through NCCL
 * (docs/collectives.md, "Transports").
 *
 * Arrival. A participant's task (on its device's runner, or on the caller in
 * inline mode) orders its buffers on its stream (cube__stream_order), records
 * an event there (the "ready" event: its data is complete once the stream
 * reaches it) and deposits its part in the rendezvous shared with the host
 * transport (rendezvous.c: sequence numbers, size/type checks, abandonment).
 * It never waits for a peer.
 *
 * Issue. The last participant of this process to arrive issues the NCCL
 * calls of every local rank in one ncclGroupStart/End, from its own thread:
 * for each rank, the device's comm stream (one per device, created once)
 * waits for the rank's ready event, a "start" event is recorded, the NCCL
 * call is queued on the comm stream and a "done" event follows. NCCL requires
 * the calls of several ranks made from one thread to be grouped; one group
 * per operation also keeps the order of operations the same on every comm
 * stream of the process (a global issue lock), so operations of different
 * communicators that share devices cannot deadlock each other in-process.
 * The communicators are created the same way on first use: one group of
 * ncclCommInitRankConfig, one per local rank, nonblocking (blocking = 0), so
 * that every wait for NCCL (creation, connection, and across processes the
 * other processes) is a poll with the deadline CUBE_COLLECTIVE_TIMEOUT.
 *
 * Completion. sync_collective (this transport's sync entry, after the
 * rendezvous waits) makes the compute stream wait for each of its parts'
 * done events, then polls them with the deadline; a part that does not
 * finish in time gets DEADLINE_EXCEEDED naming the processes whose devices
 * never came, and the communicator is aborted (ncclCommAbort): the operations
 * queued behind it fail with the same error. An in-process communicator is
 * created again by its next operation; one that spans processes stays broken
 * (its other processes would have to agree on a new unique id). The memory
 * references of a part are kept until its done event completed (NCCL reads
 * src and writes dst on the comm stream, after the participant's task has
 * returned), and its record (cube_client_last_collective) is written then,
 * timed with the start and done events.
 *
 * Unique ids. In one process: ncclGetUniqueId. Across processes the process
 * of the lowest device generates it and sends it to the others: through MPI
 * (point to point, src/collective/mpi.c) when MPI is in use, else through
 * the file CUBE_NCCL_ID_FILE.<communicator hash>.<generation>, written
 * atomically (a temporary file renamed) and polled for by the others.
 *
 * Threading: the rendezvous under the communicator's lock; NCCL calls on a
 * communicator under its state's lock (issue, abort, destroy); the issue of
 * an operation also under the process-wide issue lock. Lock order: state
 * lock, then issue lock; the communicator's lock is never held across NCCL.
 *
 * Files: nccl_cuda.c (the driver through the backend's ctl, comm streams),
 * nccl_comm.c (communicators, unique ids), nccl_issue.c (the NCCL calls),
 * this file (arrival, completion, teardown, the transport's table),
 * nccl_api.c (the library, loaded with dlopen).
 */
#ifdef CUBE_HAVE_NCCL_TRANSPORT

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/options.h"
#include "base/status.h"
#include "collective/nccl/nccl_internal.h"

//===----------------------------------------------------------------------===//
// Arrival
//===----------------------------------------------------------------------===//

/* Orders |part|'s buffers on its stream and records the ready event there. */
static cube_status_t cube__nccl_mark(cube__coll_part_t* part, cube__nccl_ready_t** out) {
  const cube__nccl_cu_t* cu = NULL;
  cube__stream_t* st = part->stream;
  CUBE_RETURN_IF_ERROR(cube__nccl_cu_from(&st->server->be, &cu));
  if (part->src_mem) CUBE_RETURN_IF_ERROR(cube__stream_order(st, part->src_mem));
  if (part->dst_mem) CUBE_RETURN_IF_ERROR(cube__stream_order(st, part->dst_mem));
  cube__nccl_ready_t* rd = calloc(1, sizeof(*rd));
  if (!rd) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "no host memory");
  rd->ctx = cube__nccl_ctx(st->server);
  cube__nccl_scope_t sc = cube__nccl_enter(cu, rd->ctx);
  CUresult r = cu->EventCreate(&rd->event, CU_EVENT_DISABLE_TIMING);
  if (r == CUDA_SUCCESS) r = cu->EventRecord(rd->event, cube__nccl_native_stream(st));
  cube__nccl_leave(&sc);
  if (r != CUDA_SUCCESS) {
    cube__nccl_ready_free(rd);
    return cube__nccl_cu_error(r, CUBE_STATUS_OK, "cuda:%u: recording the part's event",
                               cube__nccl_ordinal(st->server));
  }
  *out = rd;
  return CUBE_OK;
}

static void cube__nccl_reap(const cube__nccl_cu_t* cu, const cube__stream_t* stream);

/* The last participant of the process performs the operation. */
static void cube__nccl_perform(cube__comm_t* c, cube__coll_op_t* op, uint64_t timeout_ns) {
  pthread_mutex_lock(&c->lock);
  bool skip = op->complete;
  pthread_mutex_unlock(&c->lock);
  if (skip) return;
  cube__event_set(&op->started);
  char what[320];
  cube__coll_op_name(op, what, sizeof(what));
  /* Every failure of the issue names the operation. */
  cube_status_t st = op->bytes ? cube__nccl_issue(c, op, timeout_ns, what) : CUBE_OK;
  pthread_mutex_lock(&c->lock);
  cube__coll_op_complete_locked(op, st);
  pthread_mutex_unlock(&c->lock);
}

static cube_status_t cube__nccl_join(cube__comm_t* c, cube__coll_part_t* part,
                                     cube_collective_kind_t kind, cube__coll_op_t** out_op) {
  uint64_t timeout_ns = cube__coll_task_timeout_ns();
  const cube__nccl_cu_t* cu = NULL;
  cube_status_t drv = cube__nccl_cu_from(&part->stream->server->be, &cu);
  if (!drv) cube__nccl_reap(cu, part->stream);
  cube_status_free(drv);
  void* src = NULL;
  void* dst = NULL;
  cube__nccl_ready_t* rd = NULL;
  cube_status_t rs = CUBE_OK;
  if (part->src_mem) rs = cube__coll_resolve(part->src_mem, part->src_offset, &src);
  if (!rs && part->dst_mem) rs = cube__coll_resolve(part->dst_mem, part->dst_offset, &dst);
  if (!rs) rs = cube__nccl_mark(part, &rd);
  bool is_send = kind == CUBE_COLLECTIVE_SEND;
  pthread_mutex_lock(&c->lock);
  cube__nccl_state_t* ns = cube__nccl_state_locked(c);
  cube__coll_op_t* op = NULL;
  uint32_t slot = 0;
  uint64_t seq = 0;
  if (ns && kind == CUBE_COLLECTIVE_ALL_REDUCE) {
    seq = c->ar_seq[part->rank]++;
    op = cube__coll_op_find_locked(c, CUBE_COLLECTIVE_ALL_REDUCE, 0, 0, seq, c->local_n, c->n);
    slot = part->rank;
  } else if (ns) {
    uint32_t from = is_send ? part->rank : part->peer;
    uint32_t to = is_send ? part->peer : part->rank;
    seq = is_send ? c->send_seq[from * c->n + to]++ : c->recv_seq[from * c->n + to]++;
    uint32_t expected = from == to ? 2u : (uint32_t)c->local[from] + (uint32_t)c->local[to];
    op = cube__coll_op_find_locked(c, CUBE_COLLECTIVE_SEND, from, to, seq, expected, 2);
    slot = is_send ? 0 : 1;
  }
  if (!op) {
    pthread_mutex_unlock(&c->lock);
    cube_status_free(rs);
    cube__nccl_ready_free(rd);
    cube__coll_part_release(part);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s #%" PRIu64 ": no host memory",
                             kind == CUBE_COLLECTIVE_ALL_REDUCE ? "all_reduce" : "send/recv", seq);
  }
  atomic_fetch_add(&op->refs, 1); /* the caller's */
  op->aux_free = cube__nccl_ready_free;
  if (rs) {
    char what[320];
    cube__coll_op_name(op, what, sizeof(what));
    cube__coll_op_complete_locked(op, cube__status_annotate(rs, "%s", what));
  }
  bool had = op->slots[slot].has;
  bool last = cube__coll_op_arrive_locked(op, slot, part, src, dst);
  if (!had && op->slots[slot].has) {
    op->slots[slot].aux = rd; /* the op's now */
    rd = NULL;
  }
  pthread_mutex_unlock(&c->lock);
  cube__nccl_ready_free(rd);
  if (last) {
    cube__nccl_perform(c, op, timeout_ns);
    cube__coll_op_unref(op); /* the list's */
  }
  *out_op = op;
  return CUBE_OK;
}

static cube_status_t cube__nccl_all_reduce(cube__comm_t* c, cube__coll_part_t* part,
                                           cube__coll_op_t** out_op) {
  return cube__nccl_join(c, part, CUBE_COLLECTIVE_ALL_REDUCE, out_op);
}

static cube_status_t cube__nccl_send(cube__comm_t* c, cube__coll_part_t* part,
                                     cube__coll_op_t** out_op) {
  return cube__nccl_join(c, part, CUBE_COLLECTIVE_SEND, out_op);
}

static cube_status_t cube__nccl_recv(cube__comm_t* c, cube__coll_part_t* part,
                                     cube__coll_op_t** out_op) {
  return cube__nccl_join(c, part, CUBE_COLLECTIVE_RECV, out_op);
}

//===----------------------------------------------------------------------===//
// Completion
//===----------------------------------------------------------------------===//

/* The failure of |f| after its part on this process did not finish within
 * |timeout_ns|: aborts the communicator (if it is still the flight's
 * generation) and fails every flight of that generation still running. */
static void cube__nccl_timeout(const cube__nccl_cu_t* cu, cube__nccl_flight_t* f,
                               uint64_t timeout_ns) {
  cube__comm_t* c = f->comm;
  cube__nccl_state_t* ns = c->tstate;
  const cube__nccl_t* nc = NULL;
  cube_status_t e = cube__nccl_get(&nc);
  if (e) {
    cube__nccl_flight_fail(f, e);
    return;
  }
  char remote[256];
  cube__nccl_remote_names(c, remote, sizeof(remote));
  cube_status_t st;
  if (remote[0])
    st = cube__status_make(CUBE_STATUS_DEADLINE_EXCEEDED,
                           "%s: not complete within %.3g s (CUBE_COLLECTIVE_TIMEOUT): %s did not "
                           "join; the NCCL communicator is aborted",
                           f->what, (double)timeout_ns / 1e9, remote);
  else
    st = cube__status_make(CUBE_STATUS_DEADLINE_EXCEEDED,
                           "%s: NCCL did not complete within %.3g s (CUBE_COLLECTIVE_TIMEOUT) "
                           "although every participant joined; the NCCL communicator is aborted",
                           f->what, (double)timeout_ns / 1e9);
  pthread_mutex_lock(&ns->lock);
  cube__nccl_flight_fail(f, cube__status_clone(st));
  if (ns->ready && ns->generation == f->generation) {
    cube__nccl_abort_locked(nc, c, ns);
    if (c->rank_count > 1 && !ns->broken)
      ns->broken = cube__status_annotate(cube__status_clone(st),
                                         "the NCCL communicator was aborted after");
  }
  pthread_mutex_unlock(&ns->lock);
  /* The operations queued behind it on the aborted communicator. */
  pthread_mutex_lock(&cube__nccl_entries.lock);
  for (cube__coll_entry_t* l = cube__nccl_entries.head; l; l = l->next) {
    cube__nccl_entry_t* x = (cube__nccl_entry_t*)l;
    cube__nccl_flight_t* g = x->flight;
    if (g == f || g->comm != c || g->generation != f->generation) continue;
    if (atomic_load(&g->status)) continue;
    cube__nccl_scope_t sc = cube__nccl_enter(cu, x->ctx);
    bool finished = cu->EventQuery(x->done) == CUDA_SUCCESS;
    cube__nccl_leave(&sc);
    if (!finished)
      cube__nccl_flight_fail(g, cube__status_annotate(cube__status_clone(st),
                                                      "%s: aborted with its communicator after",
                                                      g->what));
  }
  pthread_mutex_unlock(&cube__nccl_entries.lock);
  cube_status_free(st);
}

/* Waits for |e| (until |deadline|, then the timeout path); writes its record
 * and gives its memory back once NCCL is done with it. Returns its failure. */
cube_status_t cube__nccl_finish(const cube__nccl_cu_t* cu, cube__nccl_entry_t* e,
                                       uint64_t timeout_ns) {
  cube__nccl_flight_t* f = e->flight;
  uint64_t deadline = cube__now_ns() + timeout_ns;
  uint64_t idle = 0;
  bool done = false, after_abort = false;
  for (;;) {
    cube__nccl_scope_t sc = cube__nccl_enter(cu, e->ctx);
    CUresult r = cu->EventQuery(e->done);
    cube__nccl_leave(&sc);
    if (r != CUDA_ERROR_NOT_READY) {
      done = true;
      if (r != CUDA_SUCCESS && !atomic_load(&f->status))
        cube__nccl_flight_fail(
            f, cube__nccl_cu_error(r, CUBE_STATUS_OK, "%s: waiting for NCCL", f->what));
      break;
    }
    uint64_t now = cube__now_ns();
    if (!after_abort && (atomic_load(&f->status) || now >= deadline)) {
      /* Failed (here or by another participant): the abort ends NCCL's
       * kernels; give them one more timeout to leave. */
      if (!atomic_load(&f->status)) cube__nccl_timeout(cu, f, timeout_ns);
      after_abort = true;
      deadline = now + timeout_ns;
    } else if (after_abort && now >= deadline) {
      break;
    }
    cube__nccl_nap(&idle);
  }
  cube_status_t st = cube__status_clone(atomic_load(&f->status));
  if (!st && done) {
    cube_collective_record_t r = f->record;
    float ms = 0;
    cube__nccl_scope_t sc = cube__nccl_enter(cu, e->ctx);
    if (cu->EventElapsedTime(&ms, e->start, e->done) != CUDA_SUCCESS) ms = 0;
    cube__nccl_leave(&sc);
    r.kind = e->kind;
    r.time_ns = ms > 0 ? (uint64_t)((double)ms * 1e6) : 1;
    r.algbw_gbps = (double)r.bytes / (double)r.time_ns;
    double n = r.participants;
    r.busbw_gbps = r.kind == CUBE_COLLECTIVE_ALL_REDUCE && n > 1 ? r.algbw_gbps * 2.0 * (n - 1) / n
                                                                 : r.algbw_gbps;
    cube__coll_record_store(e->link.stream->server, &r);
  }
  /* A part whose kernels were never seen to end keeps its memory for good:
   * freeing it could hand NCCL's buffers to new data. */
  cube__nccl_entry_free(cu, e, done);
  return st;
}

/* An entry whose done event completed and whose flight did not fail (under
 * the list's lock; |arg| is the driver). */
static bool cube__nccl_entry_finished(const cube__coll_entry_t* l, const void* arg) {
  const cube__nccl_cu_t* cu = arg;
  const cube__nccl_entry_t* e = (const cube__nccl_entry_t*)l;
  bool ok = !atomic_load(&e->flight->status);
  if (ok) {
    cube__nccl_scope_t sc = cube__nccl_enter(cu, e->ctx);
    ok = cu->EventQuery(e->done) == CUDA_SUCCESS;
    cube__nccl_leave(&sc);
  }
  return ok;
}

/* At a new part: the finished parts of this stream are let go (a program
 * that never calls sync_collective does not keep every buffer alive). */
static void cube__nccl_reap(const cube__nccl_cu_t* cu, const cube__stream_t* stream) {
  cube__coll_entry_t* mine =
      cube__coll_list_take(&cube__nccl_entries, stream, cube__nccl_entry_finished, cu);
  while (mine) {
    cube__nccl_entry_t* e = (cube__nccl_entry_t*)mine;
    mine = mine->next;
    cube_status_free(cube__nccl_finish(cu, e, 0));
  }
}

/* sync_collective on |stream|, after its rendezvous operations were issued:
 * the compute stream waits for its parts' done events, and this task waits
 * for them with the deadline. */
static cube_status_t cube__nccl_sync(cube__comm_t* comm, cube__stream_t* stream) {
  (void)comm;
  const cube__nccl_cu_t* cu = NULL;
  CUBE_RETURN_IF_ERROR(cube__nccl_cu_from(&stream->server->be, &cu));
  uint64_t timeout_ns = cube__coll_task_timeout_ns();
  if (!timeout_ns) CUBE_RETURN_IF_ERROR(cube__coll_timeout_ns(&timeout_ns));
  cube__coll_entry_t* mine = cube__coll_list_take(&cube__nccl_entries, stream, NULL, NULL);
  if (!mine) return CUBE_OK;
  cube_status_t errors = CUBE_OK;
  CUstream compute = cube__nccl_native_stream(stream);
  for (cube__coll_entry_t* l = mine; l; l = l->next) {
    cube__nccl_entry_t* e = (cube__nccl_entry_t*)l;
    cube__nccl_scope_t sc = cube__nccl_enter(cu, e->ctx);
    CUresult r = cu->StreamWaitEvent(compute, e->done, 0);
    cube__nccl_leave(&sc);
    if (r != CUDA_SUCCESS)
      errors = cube__status_join(errors, cube__nccl_cu_error(r, CUBE_STATUS_OK,
                                                          "%s: ordering the stream after NCCL",
                                                          e->flight->what));
  }
  while (mine) {
    cube__nccl_entry_t* e = (cube__nccl_entry_t*)mine;
    mine = mine->next;
    cube_status_t x = cube__nccl_finish(cu, e, timeout_ns);
    if (x) errors = cube__status_join(errors, x);
  }
  return errors;
}

//===----------------------------------------------------------------------===//
// Teardown
//===----------------------------------------------------------------------===//

static void cube__nccl_comm_destroy(cube__comm_t* c) {
  cube__nccl_state_t* ns = c->tstate;
  if (!ns) return;
  const cube__nccl_t* nc = NULL;
  cube_status_t st = cube__nccl_get(&nc);
  if (!st) {
    pthread_mutex_lock(&ns->lock);
    const cube__nccl_cu_t* cu = NULL;
    cube_status_t e0 = cube__nccl_cu_get(&cu);
    cube__nccl_scope_t guard = {NULL, false};
    if (!e0 && ns->ready && ns->guard_ctx) guard = cube__nccl_guard(cu, ns->guard_ctx);
    cube_status_free(e0);
    if (ns->ready) {
      /* Finalize (nonblocking: polled), then destroy; abort what does not
       * finalize in time. */
      bool grouped = nc->GroupStart() == CUBE__NCCL_SUCCESS; /* several local ranks, one thread */
      bool ok = grouped;
      for (uint32_t i = 0; i < c->n && ok; ++i) {
        if (!ns->comms[i]) continue;
        cube__nccl_result_t r = nc->CommFinalize(ns->comms[i]);
        if (r != CUBE__NCCL_SUCCESS && r != CUBE__NCCL_IN_PROGRESS) ok = false;
      }
      if (grouped) {
        cube__nccl_result_t r = nc->GroupEnd();
        if (r != CUBE__NCCL_SUCCESS && r != CUBE__NCCL_IN_PROGRESS) ok = false;
      }
      bool timeout = false;
      uint64_t timeout_ns = 0;
      cube_status_t t = cube__coll_timeout_ns(&timeout_ns);
      if (t) {
        cube_status_free(t);
        timeout_ns = 60000000000ull;
      }
      if (ok) {
        cube_status_t e = cube__nccl_settle(nc, c, ns, c->local, cube__now_ns() + timeout_ns,
                                            "destroying the NCCL communicator", &timeout);
        if (e || timeout) ok = false;
        cube_status_free(e);
      }
      for (uint32_t i = 0; i < c->n; ++i) {
        if (!ns->comms[i]) continue;
        if (ok)
          nc->CommDestroy(ns->comms[i]);
        else
          nc->CommAbort(ns->comms[i]);
        ns->comms[i] = NULL;
      }
      ns->ready = false;
    }
    cube__nccl_leave(&guard);
    pthread_mutex_unlock(&ns->lock);
  }
  cube_status_free(st);
  if (ns->id_file[0]) unlink(ns->id_file);
  cube_status_free(ns->broken);
  pthread_mutex_destroy(&ns->lock);
  free(ns->comms);
  free(ns);
  c->tstate = NULL;
}

static void cube__nccl_quiesce(void) {
  pthread_mutex_lock(&cube__nccl_entries.lock);
  bool none = cube__nccl_entries.head == NULL;
  pthread_mutex_unlock(&cube__nccl_entries.lock);
  if (none) return; /* (and the driver is not loaded for nothing) */
  const cube__nccl_cu_t* cu = NULL;
  cube_status_t st = cube__nccl_cu_get(&cu);
  if (st) {
    cube_status_free(st);
    return;
  }
  uint64_t timeout_ns = 0;
  st = cube__coll_timeout_ns(&timeout_ns);
  if (st) {
    cube_status_free(st);
    timeout_ns = 60000000000ull;
  }
  /* Each running part gets the deadline; one that does not finish aborts its
   * communicator (and so the parts behind it). The entries stay listed. */
  for (;;) {
    cube__nccl_flight_t* f = NULL;
    CUcontext ctx = NULL;
    CUevent done = NULL;
    pthread_mutex_lock(&cube__nccl_entries.lock);
    for (cube__coll_entry_t* l = cube__nccl_entries.head; l && !f; l = l->next) {
      cube__nccl_entry_t* e = (cube__nccl_entry_t*)l;
      if (atomic_load(&e->flight->status)) continue;
      cube__nccl_scope_t sc = cube__nccl_enter(cu, e->ctx);
      bool running = cu->EventQuery(e->done) == CUDA_ERROR_NOT_READY;
      cube__nccl_leave(&sc);
      if (!running) continue;
      f = e->flight;
      atomic_fetch_add(&f->refs, 1);
      ctx = e->ctx;
      done = e->done;
    }
    /* |done| stays alive: it is destroyed with its entry, which only a sync
     * takes off the list, and no sync runs during shutdown. */
    pthread_mutex_unlock(&cube__nccl_entries.lock);
    if (!f) return;
    uint64_t deadline = cube__now_ns() + timeout_ns;
    uint64_t idle = 0;
    bool finished = false;
    while (!finished && cube__now_ns() < deadline && !atomic_load(&f->status)) {
      cube__nccl_scope_t sc = cube__nccl_enter(cu, ctx);
      finished = cu->EventQuery(done) != CUDA_ERROR_NOT_READY;
      cube__nccl_leave(&sc);
      if (!finished) cube__nccl_nap(&idle);
    }
    if (!finished && !atomic_load(&f->status)) cube__nccl_timeout(cu, f, timeout_ns);
    cube__nccl_flight_unref(f);
  }
}

/* After the devices are gone (cube__coll_shutdown): the entries left (their
 * work ended with the devices' synchronisation), then the comm streams. */
static void cube__nccl_shutdown(void) {
  bool any = false;
  pthread_mutex_lock(&cube__nccl_entries.lock);
  any = cube__nccl_entries.head != NULL;
  pthread_mutex_unlock(&cube__nccl_entries.lock);
  pthread_mutex_lock(&cube__nccl_dev_lock);
  for (uint32_t i = 0; i < CUBE__NCCL_MAX_DEVICES && !any; ++i)
    any = cube__nccl_devs[i].stream != NULL;
  pthread_mutex_unlock(&cube__nccl_dev_lock);
  if (!any) return;
  const cube__nccl_cu_t* cu = NULL;
  cube_status_t st = cube__nccl_cu_get(&cu);
  if (st) {
    cube_status_free(st);
    cu = NULL;
  }
  cube__coll_entry_t* e = cube__coll_list_take_all(&cube__nccl_entries);
  while (e) {
    cube__nccl_entry_t* x = (cube__nccl_entry_t*)e;
    e = e->next;
    bool finished = true;
    if (cu) {
      cube__nccl_scope_t sc = cube__nccl_enter(cu, x->ctx);
      finished = cu->EventQuery(x->done) != CUDA_ERROR_NOT_READY;
      cube__nccl_leave(&sc);
    }
    cube__nccl_entry_free(cu, x, finished);
  }
  if (!cu) return;
  pthread_mutex_lock(&cube__nccl_dev_lock);
  for (uint32_t i = 0; i < CUBE__NCCL_MAX_DEVICES; ++i) {
    cube__nccl_dev_t* d = &cube__nccl_devs[i];
    if (!d->stream) continue;
    cube__nccl_scope_t sc = cube__nccl_enter(cu, d->ctx);
    cu->StreamDestroy(d->stream);
    cube__nccl_leave(&sc);
    d->stream = NULL;
  }
  pthread_mutex_unlock(&cube__nccl_dev_lock);
}

static cube_status_t cube__nccl_available(void) {
  const cube__nccl_t* nc = NULL;
  return cube__nccl_get(&nc);
}

const cube__coll_transport_t cube__coll_nccl_transport = {
    .id = "nccl",
    .name = "NCCL on each device's comm stream",
    .available = cube__nccl_available,
    .describe = cube__nccl_describe,
    .spans_processes_without_mpi = true,
    .quiesce = cube__nccl_quiesce,
    .shutdown = cube__nccl_shutdown,
    .all_reduce = cube__nccl_all_reduce,
    .send = cube__nccl_send,
    .recv = cube__nccl_recv,
    .sync = cube__nccl_sync,
    .comm_destroy = cube__nccl_comm_destroy,
};

#endif /* CUBE_HAVE_NCCL_TRANSPORT */
