/* The nccl transport's issue: the parts in flight and the NCCL calls of
 * every local rank of an operation in one group on the comm streams. */
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
// Parts in flight
//===----------------------------------------------------------------------===//


void cube__nccl_ready_free(void* p) {
  cube__nccl_ready_t* rd = p;
  if (!rd) return;
  const cube__nccl_cu_t* cu = NULL;
  cube_status_t st = cube__nccl_cu_get(&cu);
  if (!st && rd->event) {
    cube__nccl_scope_t sc = cube__nccl_enter(cu, rd->ctx);
    cu->EventDestroy(rd->event);
    cube__nccl_leave(&sc);
  }
  cube_status_free(st);
  free(rd);
}



cube__coll_list_t cube__nccl_entries = CUBE__COLL_LIST_INIT(cube__nccl_entries);

void cube__nccl_flight_unref(cube__nccl_flight_t* f) {
  if (!f || atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1) return;
  cube_status_free(atomic_load(&f->status));
  free(f);
}

/* Sets the flight's failure if it has none (consumes |st|). */
void cube__nccl_flight_fail(cube__nccl_flight_t* f, cube_status_t st) {
  cube_status_t none = NULL;
  if (!atomic_compare_exchange_strong(&f->status, &none, st)) cube_status_free(st);
}

void cube__nccl_entry_free(const cube__nccl_cu_t* cu, cube__nccl_entry_t* e,
                                  bool release_memory) {
  if (cu) {
    cube__nccl_scope_t sc = cube__nccl_enter(cu, e->ctx);
    if (e->start) cu->EventDestroy(e->start);
    if (e->done) cu->EventDestroy(e->done);
    cube__nccl_leave(&sc);
  }
  /* Memory NCCL may still use is never given back (see cube__nccl_finish). */
  for (int i = 0; i < 2; ++i)
    if (e->mem[i] && release_memory) cube__memory_unref(e->mem[i]);
  cube__nccl_flight_unref(e->flight);
  free(e);
}

//===----------------------------------------------------------------------===//
// Issue
//===----------------------------------------------------------------------===//

static cube__nccl_type_t cube__nccl_type(cube_dtype_t t) {
  switch (t) {
    case CUBE_DTYPE_U8: return ncclUint8;
    case CUBE_DTYPE_I8: return ncclInt8;
    case CUBE_DTYPE_U32: return ncclUint32;
    case CUBE_DTYPE_I32: return ncclInt32;
    case CUBE_DTYPE_U64: return ncclUint64;
    case CUBE_DTYPE_I64: return ncclInt64;
    case CUBE_DTYPE_F16: return ncclFloat16;
    case CUBE_DTYPE_BF16: return ncclBfloat16;
    case CUBE_DTYPE_F32: return ncclFloat32;
    default: return ncclFloat64;
  }
}

/* Mean is ncclAvg: for integers NCCL divides the wrapped sum toward zero, as
 * the host transport does; for floats it multiplies the sum by 1/n (equal to
 * sum / n when n is a power of two). */
static cube__nccl_op_t cube__nccl_red(cube_reduce_op_t op) {
  switch (op) {
    case CUBE_REDUCE_SUM: return ncclSum;
    case CUBE_REDUCE_MEAN: return ncclAvg;
    case CUBE_REDUCE_MAX: return ncclMax;
    case CUBE_REDUCE_MIN: return ncclMin;
    default: return ncclProd;
  }
}

/* One local rank's call in an operation. */
typedef struct cube__nccl_item {
  uint32_t slot, rank;
  int peer;      /* send/recv */
  bool is_send;  /* send/recv */
  cube__stream_t* stream;
  CUcontext ctx;
  CUstream comm_stream;
  cube__nccl_ready_t* ready;
  CUevent start, done;
  const void* src;
  void* dst;
} cube__nccl_item_t;

/* Issues |op| (all its local parts arrived). On success the flight's entries
 * own the parts' memory references and events. */
cube_status_t cube__nccl_issue(cube__comm_t* c, cube__coll_op_t* op, uint64_t timeout_ns,
                                      const char* what) {
  const cube__nccl_t* nc = NULL;
  const cube__nccl_cu_t* cu = NULL;
  cube_status_t ld = cube__nccl_get(&nc);
  if (!ld) ld = cube__nccl_cu_get(&cu);
  if (ld) return cube__status_annotate(ld, "%s", what);
  cube__nccl_state_t* ns = c->tstate; /* created by the first arrival */
  bool ar = op->kind == CUBE_COLLECTIVE_ALL_REDUCE;
  cube__nccl_item_t items[2];
  cube__nccl_item_t* it = items;
  cube__nccl_item_t* heap = NULL;
  uint32_t count = 0;
  if (ar && op->nslots > 2) {
    heap = calloc(op->nslots, sizeof(*heap));
    if (!heap) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", what);
    it = heap;
  }
  memset(items, 0, sizeof(items));
  CUcontext* ctx_of = calloc(c->n, sizeof(CUcontext));
  if (!ctx_of) {
    free(heap);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", what);
  }
  cube_status_t st = CUBE_OK;
  for (uint32_t i = 0; i < op->nslots && !st; ++i) {
    cube__coll_slot_t* s = &op->slots[i];
    if (!s->has) continue;
    cube__nccl_item_t* x = &it[count++];
    x->slot = i;
    x->rank = ar ? i : (i == 0 ? op->from : op->to);
    x->is_send = !ar && i == 0;
    x->peer = ar ? -1 : (int)(i == 0 ? op->to : op->from);
    x->stream = s->part.stream;
    x->ready = s->aux;
    x->src = s->src;
    x->dst = s->dst;
    st = cube__nccl_comm_stream(cu, x->stream->server, &x->comm_stream, &x->ctx);
    if (st) st = cube__status_annotate(st, "%s", what);
    else ctx_of[x->rank] = x->ctx;
  }
  uint64_t deadline = cube__now_ns() + timeout_ns;
  uint32_t generation = 0;
  pthread_mutex_lock(&ns->lock);
  if (!st) st = cube__nccl_ensure(nc, cu, c, ns, ctx_of, deadline, what);
  generation = ns->generation;
  bool issued = false;
  if (!st) {
    pthread_mutex_lock(&cube__nccl_issue_lock);
    CUresult r = CUDA_SUCCESS;
    /* The comm streams wait for the parts' data; the start events follow. */
    for (uint32_t k = 0; k < count && r == CUDA_SUCCESS; ++k) {
      cube__nccl_item_t* x = &it[k];
      cube__nccl_scope_t sc = cube__nccl_enter(cu, x->ctx);
      r = cu->StreamWaitEvent(x->comm_stream, x->ready->event, 0);
      if (r == CUDA_SUCCESS) r = cu->EventCreate(&x->start, CU_EVENT_DEFAULT);
      if (r == CUDA_SUCCESS) r = cu->EventCreate(&x->done, CU_EVENT_DEFAULT);
      if (r == CUDA_SUCCESS) r = cu->EventRecord(x->start, x->comm_stream);
      cube__nccl_leave(&sc);
    }
    if (r != CUDA_SUCCESS)
      st = cube__nccl_cu_error(r, CUBE_STATUS_OK, "%s: ordering the comm streams", what);
    if (!st) {
      cube__nccl_type_t type = ar ? cube__nccl_type(op->dtype) : ncclUint8;
      size_t n = (size_t)(ar ? op->bytes / cube_dtype_size(op->dtype) : op->bytes);
      cube__nccl_scope_t guard = cube__nccl_guard(cu, it[0].ctx);
      cube__nccl_result_t nr = nc->GroupStart();
      if (nr != CUBE__NCCL_SUCCESS)
        st = cube__nccl_error(nr, NULL, CUBE_STATUS_OK, "%s: ncclGroupStart", what);
      issued = !st;
      for (uint32_t k = 0; k < count && !st; ++k) {
        cube__nccl_item_t* x = &it[k];
        cube__nccl_comm_t comm = ns->comms[x->rank];
        cube__nccl_scope_t sc = cube__nccl_enter(cu, x->ctx);
        const char* call = ar ? "ncclAllReduce" : x->is_send ? "ncclSend" : "ncclRecv";
        if (ar)
          nr = nc->AllReduce(x->src, x->dst, n, type, cube__nccl_red(op->op), comm, x->comm_stream);
        else if (x->is_send)
          nr = nc->Send(x->src, n, type, x->peer, comm, x->comm_stream);
        else
          nr = nc->Recv(x->dst, n, type, x->peer, comm, x->comm_stream);
        cube__nccl_leave(&sc);
        if (nr != CUBE__NCCL_SUCCESS && nr != CUBE__NCCL_IN_PROGRESS) {
          char d[32];
          st = cube__nccl_error(nr, comm, CUBE_STATUS_OK, "%s: %s for rank %u (%s)", what, call,
                                x->rank, cube__coll_dev_name(c->ids[x->rank], d, sizeof(d)));
        }
      }
      if (issued) {
        nr = nc->GroupEnd();
        if (!st && nr != CUBE__NCCL_SUCCESS && nr != CUBE__NCCL_IN_PROGRESS)
          st = cube__nccl_error(nr, NULL, CUBE_STATUS_OK, "%s: ncclGroupEnd", what);
      }
      bool timeout = false;
      if (!st) {
        bool* which = calloc(c->n, sizeof(bool));
        if (!which) {
          st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", what);
        } else {
          for (uint32_t k = 0; k < count; ++k) which[it[k].rank] = true;
          st = cube__nccl_settle(nc, c, ns, which, deadline, what, &timeout);
          free(which);
        }
      }
      cube__nccl_leave(&guard);
      if (!st && timeout) {
        char remote[256];
        cube__nccl_remote_names(c, remote, sizeof(remote));
        st = cube__status_make(CUBE_STATUS_DEADLINE_EXCEEDED,
                               "%s: NCCL did not take the operation within the deadline "
                               "(CUBE_COLLECTIVE_TIMEOUT)%s%s",
                               what, remote[0] ? "; these did not join: " : "", remote);
      }
      for (uint32_t k = 0; k < count && !st; ++k) {
        cube__nccl_item_t* x = &it[k];
        cube__nccl_scope_t sc = cube__nccl_enter(cu, x->ctx);
        CUresult rr = cu->EventRecord(x->done, x->comm_stream);
        cube__nccl_leave(&sc);
        if (rr != CUDA_SUCCESS)
          st = cube__nccl_cu_error(rr, CUBE_STATUS_OK, "%s: recording the done event", what);
      }
    }
    pthread_mutex_unlock(&cube__nccl_issue_lock);
    if (st && issued) {
      /* Work may be queued on some comm streams but not others: nothing of
       * this generation can be trusted any more. */
      cube__nccl_abort_locked(nc, c, ns);
      if (c->rank_count > 1 && !ns->broken)
        ns->broken = cube__status_annotate(cube__status_clone(st),
                                           "the NCCL communicator was aborted after");
    }
  }
  pthread_mutex_unlock(&ns->lock);
  free(ctx_of);

  cube__nccl_flight_t* f = NULL;
  if (!st) {
    f = calloc(1, sizeof(*f));
    if (!f) st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", what);
  }
  if (!st) {
    atomic_init(&f->refs, 1);
    atomic_init(&f->status, NULL);
    f->comm = c;
    f->generation = generation;
    f->remote = c->rank_count > 1;
    cube__coll_record_of(op, 1, &f->record);
    snprintf(f->what, sizeof(f->what), "%s", what);
    /* The entries: each takes its part's memory references and events. */
    cube__coll_entry_t* list = NULL;
    cube__coll_entry_t** tail = &list;
    for (uint32_t k = 0; k < count; ++k) {
      cube__nccl_item_t* x = &it[k];
      cube__nccl_entry_t* e = calloc(1, sizeof(*e));
      if (!e) {
        /* No record to wait on: wait here (the done event is queued). */
        cube__nccl_scope_t sc = cube__nccl_enter(cu, x->ctx);
        cu->EventSynchronize(x->done);
        cu->EventDestroy(x->start);
        cu->EventDestroy(x->done);
        cube__nccl_leave(&sc);
        continue;
      }
      cube__coll_slot_t* s = &op->slots[x->slot];
      atomic_fetch_add(&f->refs, 1);
      e->flight = f;
      e->link.stream = x->stream;
      e->kind = ar ? CUBE_COLLECTIVE_ALL_REDUCE : x->is_send ? CUBE_COLLECTIVE_SEND
                                                             : CUBE_COLLECTIVE_RECV;
      e->ctx = x->ctx;
      e->start = x->start;
      e->done = x->done;
      e->mem[0] = s->part.src_mem;
      e->mem[1] = s->part.dst_mem;
      s->part.src_mem = s->part.dst_mem = NULL;
      x->start = x->done = NULL;
      *tail = &e->link;
      tail = &e->link.next;
    }
    cube__nccl_flight_unref(f); /* the entries hold it */
    cube__coll_list_append(&cube__nccl_entries, list);
  }
  /* Events not handed to an entry (failure). The ready events are done with
   * once the comm streams' waits were queued. */
  for (uint32_t k = 0; k < count; ++k) {
    cube__nccl_item_t* x = &it[k];
    if (st && issued) {
      /* Some NCCL work of this group may be queued and is never waited for:
       * its buffers are never given back (rather than reused under it). */
      cube__coll_slot_t* s = &op->slots[x->slot];
      s->part.src_mem = s->part.dst_mem = NULL;
    }
    if (x->start || x->done) {
      cube__nccl_scope_t sc = cube__nccl_enter(cu, x->ctx);
      if (x->start) cu->EventDestroy(x->start);
      if (x->done) cu->EventDestroy(x->done);
      cube__nccl_leave(&sc);
    }
    cube__nccl_ready_free(op->slots[x->slot].aux);
    op->slots[x->slot].aux = NULL;
  }
  free(heap);
  return st;
}

#endif /* CUBE_HAVE_NCCL_TRANSPORT */
