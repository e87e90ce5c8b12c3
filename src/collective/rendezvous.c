/* The rendezvous: communicators, operation records and the records of
 * finished collectives, and the per-stream entry lists; the library that the
 * transports (host.c, staged.c, nccl/nccl.c) are built on (coll_internal.h).
 *
 * Rendezvous. A communicator counts, per participant, the operations it has
 * joined: the k-th all_reduce of every participant is one operation (the
 * k-th send from A to B and the k-th recv on B from A likewise). The first
 * participant to arrive creates the operation record, each one deposits its
 * resolved pointers, and the last one of this process performs it for all
 * (the host transport: reduction through a small staging block, so src == dst
 * works), then, when the communicator spans MPI ranks, exchanges the partial
 * result with the other ranks. Arrivals never wait: the waiting is done by
 * cube_client_sync_collective (cube__coll_pending_wait), which abandons an
 * operation whose participants did not all join in time. A late participant
 * then finds the abandoned record and gets its error, so every participant
 * fails the same operation and the sequence numbers stay aligned.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace/trace.h"
#include "platform/platform.h"
#include "base/status.h"
#include "collective/coll_internal.h"
#include "memory/memory.h"
#include "memory/taint.h"
#include "platform/platform.h"
#include "server/server.h"

typedef struct cube__coll_rec {
  struct cube__coll_rec* next;
  cube_device_id_t device;
  cube_collective_record_t record;
} cube__coll_rec_t;

static pthread_mutex_t g_coll_lock = PTHREAD_MUTEX_INITIALIZER; /* comms, records */
static cube__comm_t* g_comms;
static cube__coll_rec_t* g_records;

//===----------------------------------------------------------------------===//
// Communicators
//===----------------------------------------------------------------------===//

static int cube__coll_id_cmp(const void* a, const void* b) {
  const cube_device_id_t* x = a;
  const cube_device_id_t* y = b;
  if (x->backend != y->backend) return (int)x->backend < (int)y->backend ? -1 : 1;
  return x->index < y->index ? -1 : x->index > y->index;
}

const char* cube__coll_comm_name(const cube__comm_t* comm, char* buf, size_t size) {
  size_t o = 0;
  if (size == 0) return buf;
  buf[0] = 0;
  o += (size_t)snprintf(buf + o, size - o, "{");
  for (uint32_t i = 0; i < comm->n && o < size; ++i) {
    char d[32];
    o += (size_t)snprintf(buf + o, size - o, "%s%s", i ? ", " : "",
                          cube__coll_dev_name(comm->ids[i], d, sizeof(d)));
  }
  if (o < size) snprintf(buf + o, size - o, "}");
  return buf;
}

uint32_t cube__coll_comm_size(const cube__comm_t* comm) { return comm->n; }
cube_device_id_t cube__coll_comm_device(const cube__comm_t* comm, uint32_t rank) {
  return comm->ids[rank];
}

static void cube__coll_comm_free(cube__comm_t* c) {
  while (c->ops) {
    cube__coll_op_t* op = c->ops;
    c->ops = op->next;
    op->linked = false;
    cube__coll_op_unref(op);
  }
  if (c->transport && c->transport->comm_destroy) c->transport->comm_destroy(c);
  pthread_mutex_destroy(&c->lock);
  free(c->ids);
  free(c->rank_of);
  free(c->local);
  free(c->ranks);
  free(c->ar_seq);
  free(c->send_seq);
  free(c->recv_seq);
  free(c);
}

cube_status_t cube__coll_comm_find(const char* fn, size_t count, const cube_device_id_t* devices,
                                   cube_device_id_t self, cube__comm_t** out_comm,
                                   uint32_t* out_rank) {
  if (count == 0 || count > 4096)
    return CUBE_INVALID("%s: device_count %zu is out of range [1, 4096]", fn, count);
  cube__coll_world_t w;
  CUBE_RETURN_IF_ERROR(cube__coll_world(&w));
  cube_device_id_t* ids = malloc(count * sizeof(*ids));
  if (!ids) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
  memcpy(ids, devices, count * sizeof(*ids));
  qsort(ids, count, sizeof(*ids), cube__coll_id_cmp);
  char a[32], b[32];
  for (size_t i = 0; i < count; ++i) {
    if (ids[i].backend != self.backend) {
      cube_status_t st = CUBE_INVALID(
          "%s: devices holds %s but the client's device is %s: a communicator's devices share "
          "one backend",
          fn, cube__coll_dev_name(ids[i], a, sizeof(a)), cube__coll_dev_name(self, b, sizeof(b)));
      free(ids);
      return st;
    }
    if (i && ids[i].index == ids[i - 1].index) {
      cube_status_t st =
          CUBE_INVALID("%s: devices lists %s twice", fn, cube__coll_dev_name(ids[i], a, sizeof(a)));
      free(ids);
      return st;
    }
  }
  uint32_t rank = UINT32_MAX;
  for (size_t i = 0; i < count; ++i)
    if (ids[i].index == self.index) rank = (uint32_t)i;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < count; ++i) {
    uint64_t v = ((uint64_t)ids[i].backend << 32) | ids[i].index;
    for (int k = 0; k < 8; ++k) {
      h ^= (v >> (8 * k)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  if (rank == UINT32_MAX) {
    char set[256];
    size_t o = 0;
    for (size_t i = 0; i < count && o + 40 < sizeof(set); ++i)
      o += (size_t)snprintf(set + o, sizeof(set) - o, "%s%s", i ? ", " : "",
                            cube__coll_dev_name(ids[i], a, sizeof(a)));
    free(ids);
    return CUBE_INVALID("%s: the client's device %s%s is not among devices {%s}", fn,
                        cube__coll_dev_name(self, b, sizeof(b)),
                        cube__coll_per_rank(&w, self.backend) ? " (global id)" : "", set);
  }
  pthread_mutex_lock(&g_coll_lock);
  for (cube__comm_t* c = g_comms; c; c = c->next) {
    if (c->hash == h && c->n == count && memcmp(c->ids, ids, count * sizeof(*ids)) == 0) {
      pthread_mutex_unlock(&g_coll_lock);
      free(ids);
      *out_comm = c;
      *out_rank = rank;
      return CUBE_OK;
    }
  }
  cube__comm_t* c = calloc(1, sizeof(*c));
  size_t n = count;
  if (c) {
    c->ids = ids;
    c->rank_of = calloc(n, sizeof(uint32_t));
    c->local = calloc(n, sizeof(bool));
    c->ranks = calloc(n, sizeof(uint32_t));
    c->ar_seq = calloc(n, sizeof(uint64_t));
    c->send_seq = calloc(n * n, sizeof(uint64_t));
    c->recv_seq = calloc(n * n, sizeof(uint64_t));
  }
  if (!c || !c->rank_of || !c->local || !c->ranks || !c->ar_seq || !c->send_seq || !c->recv_seq) {
    pthread_mutex_unlock(&g_coll_lock);
    if (c) {
      pthread_mutex_init(&c->lock, NULL);
      cube__coll_comm_free(c);
    } else {
      free(ids);
    }
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory for a communicator",
                             fn);
  }
  c->hash = h;
  c->n = (uint32_t)n;
  c->my_rank = w.rank;
  c->local_per_rank = cube__coll_per_rank(&w, self.backend);
  c->transport = cube__coll_transport_for(self.backend);
  pthread_mutex_init(&c->lock, NULL);
  for (size_t i = 0; i < n; ++i) {
    uint32_t per = c->local_per_rank;
    c->rank_of[i] = per ? ids[i].index / per : w.rank;
    c->local[i] = c->rank_of[i] == w.rank;
    if (c->local[i]) c->local_n++;
    bool seen = false;
    for (uint32_t k = 0; k < c->rank_count; ++k) seen |= c->ranks[k] == c->rank_of[i];
    if (!seen) c->ranks[c->rank_count++] = c->rank_of[i]; /* ascending: ids are sorted */
  }
  bool alone = c->transport && c->transport->spans_processes_without_mpi;
  if (c->rank_count > 1 && !w.mpi && !alone) {
    /* Processes that know their place from CUBE_COLLECTIVE_RANK(S) only: the
     * host and staged transports exchange through MPI. */
    pthread_mutex_unlock(&g_coll_lock);
    char set[256];
    cube__coll_comm_name(c, set, sizeof(set));
    const char* tname = c->transport ? c->transport->id : "?";
    cube__coll_comm_free(c);
    return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "%s: %s spans processes, which the %s transport does through MPI, "
                             "and MPI is not in use (start the processes with mpiexec)",
                             fn, set, tname);
  }
  c->next = g_comms;
  g_comms = c;
  pthread_mutex_unlock(&g_coll_lock);
  *out_comm = c;
  *out_rank = rank;
  return CUBE_OK;
}

cube_status_t cube__coll_comm_get(const char* fn, size_t count, const cube_device_id_t* devices,
                                  cube_device_id_t self, cube__comm_t** out_comm,
                                  uint32_t* out_rank) {
  cube__comm_t* c;
  uint32_t rank;
  CUBE_RETURN_IF_ERROR(cube__coll_comm_find(fn, count, devices, self, &c, &rank));
  CUBE_RETURN_IF_ERROR(cube__coll_lost_check(c, fn));
  *out_comm = c;
  *out_rank = rank;
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Operations
//===----------------------------------------------------------------------===//

void cube__coll_part_release(cube__coll_part_t* p) {
  if (p->src_mem) cube__memory_unref(p->src_mem);
  if (p->dst_mem) cube__memory_unref(p->dst_mem);
  p->src_mem = p->dst_mem = NULL;
}

void cube__coll_op_unref(cube__coll_op_t* op) {
  if (!op || atomic_fetch_sub_explicit(&op->refs, 1, memory_order_acq_rel) != 1) return;
  for (uint32_t i = 0; i < op->nslots; ++i) {
    cube__coll_part_release(&op->slots[i].part);
    if (op->slots[i].aux && op->aux_free) op->aux_free(op->slots[i].aux);
  }
  cube_status_free(op->status);
  cube__taint_unref(op->spoiled);
  free(op->slots);
  free(op);
}

/* "all_reduce #3 (f32 sum, 1024 bytes) over {cpu:0, cpu:1}" */
const char* cube__coll_op_name(const cube__coll_op_t* op, char* buf, size_t size) {
  char set[256];
  cube__coll_comm_name(op->comm, set, sizeof(set));
  if (op->kind == CUBE_COLLECTIVE_ALL_REDUCE) {
    snprintf(buf, size, "all_reduce #%" PRIu64 " (%s %s, %" PRIu64 " bytes) over %s", op->seq,
             cube_dtype_name(op->dtype), cube_reduce_op_name(op->op), op->bytes, set);
  } else {
    char a[32], b[32];
    snprintf(buf, size, "send/recv #%" PRIu64 " %s -> %s (%" PRIu64 " bytes)", op->seq,
             cube__coll_dev_name(op->comm->ids[op->from], a, sizeof(a)),
             cube__coll_dev_name(op->comm->ids[op->to], b, sizeof(b)), op->bytes);
  }
  return buf;
}

/* Completes |op| with |status| (consumed) if it is not yet. comm->lock held. */
void cube__coll_op_complete_locked(cube__coll_op_t* op, cube_status_t status) {
  if (op->complete) {
    cube_status_free(status);
    return;
  }
  op->status = status;
  op->complete = true;
  for (uint32_t i = 0; i < op->nslots; ++i) {
    cube__coll_part_release(&op->slots[i].part);
    if (op->slots[i].aux && op->aux_free) op->aux_free(op->slots[i].aux);
    op->slots[i].aux = NULL;
  }
  cube__event_set(&op->started);
  cube__event_set(&op->done);
}

static void cube__coll_op_unlink_locked(cube__comm_t* c, cube__coll_op_t* op) {
  for (cube__coll_op_t** p = &c->ops; *p; p = &(*p)->next) {
    if (*p == op) {
      *p = op->next;
      op->linked = false;
      return;
    }
  }
}

/* Finds or creates the operation (kind, from, to, seq). comm->lock held. The
 * list's reference is the creation's; NULL when out of memory. */
cube__coll_op_t* cube__coll_op_find_locked(cube__comm_t* c, cube_collective_kind_t kind,
                                           uint32_t from, uint32_t to, uint64_t seq,
                                           uint32_t expected, uint32_t nslots) {
  for (cube__coll_op_t* op = c->ops; op; op = op->next)
    if (op->kind == kind && op->from == from && op->to == to && op->seq == seq) return op;
  cube__coll_op_t* op = calloc(1, sizeof(*op));
  if (!op) return NULL;
  op->slots = calloc(nslots, sizeof(*op->slots));
  if (!op->slots) {
    free(op);
    return NULL;
  }
  atomic_init(&op->refs, 1);
  cube__event_init(&op->done);
  cube__event_init(&op->started);
  atomic_init(&op->next_block, 0);
  atomic_init(&op->blocks_done, 0);
  op->comm = c;
  op->kind = kind;
  op->from = from;
  op->to = to;
  op->seq = seq;
  op->expected = expected;
  op->nslots = nslots;
  op->linked = true;
  op->next = c->ops;
  c->ops = op;
  return op;
}

/* A completed operation that no one else shares (MPI point to point). */
cube__coll_op_t* cube__coll_op_solo(cube__comm_t* c, cube_collective_kind_t kind, uint32_t from,
                                    uint32_t to, uint64_t seq, uint64_t bytes,
                                    cube_status_t status) {
  cube__coll_op_t* op = calloc(1, sizeof(*op));
  if (!op) {
    cube_status_free(status);
    return NULL;
  }
  atomic_init(&op->refs, 1);
  cube__event_init(&op->done);
  op->comm = c;
  op->kind = kind;
  op->from = from;
  op->to = to;
  op->seq = seq;
  op->bytes = bytes;
  op->expected = 1;
  op->arrived = 1;
  op->complete = true;
  op->status = status;
  cube__event_init(&op->started);
  cube__event_set(&op->started);
  cube__event_set(&op->done);
  return op;
}

cube_status_t cube__coll_resolve(cube__memory_t* mem, uint64_t offset, void** out) {
  const cube__storage_t* storage;
  uint64_t off, sz;
  if (!mem || !cube__memory_resolve(mem, &storage, &off, &sz))
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "memory %" PRIu64 " is not bound",
                             mem ? mem->id : 0);
  *out = (char*)storage->ptr + off + offset;
  return CUBE_OK;
}

/* The part of participant |slot| arrives at |op| (comm->lock held): checks
 * it against the first, stores it. Returns true if it is the last. */
bool cube__coll_op_arrive_locked(cube__coll_op_t* op, uint32_t slot, cube__coll_part_t* part,
                                 void* src, void* dst) {
  uint64_t t = cube__now_ns();
  cube__comm_t* c = op->comm;
  if (op->arrived == 0) {
    op->t_first = t;
    op->bytes = part->bytes;
    op->dtype = part->dtype;
    op->op = part->op;
  }
  op->t_last = t;
  op->arrived++;
  bool last = op->arrived == op->expected;
  if (last && op->linked) cube__coll_op_unlink_locked(c, op);
  if (op->complete) return last; /* abandoned or failed: the part stays with the caller */
  bool mismatch = op->arrived > 1 && (part->bytes != op->bytes ||
                                      (op->kind == CUBE_COLLECTIVE_ALL_REDUCE &&
                                       (part->dtype != op->dtype || part->op != op->op)));
  if (mismatch) {
    char what[320], me[32], other[32];
    cube__coll_op_name(op, what, sizeof(what));
    uint32_t other_slot = 0;
    for (uint32_t i = 0; i < op->nslots; ++i)
      if (op->slots[i].has) other_slot = i;
    cube_device_id_t od = op->slots[other_slot].part.stream->server->id;
    cube_device_id_t md = part->stream->server->id;
    cube_status_t st;
    if (op->kind == CUBE_COLLECTIVE_ALL_REDUCE) {
      /* In device order, whoever came first. */
      bool me_first = slot < other_slot;
      cube_device_id_t d1 = cube__coll_global_id(me_first ? md : od);
      cube_device_id_t d2 = cube__coll_global_id(me_first ? od : md);
      uint64_t b1 = me_first ? part->bytes : op->bytes, b2 = me_first ? op->bytes : part->bytes;
      cube_dtype_t t1 = me_first ? part->dtype : op->dtype, t2 = me_first ? op->dtype : part->dtype;
      cube_reduce_op_t o1 = me_first ? part->op : op->op, o2 = me_first ? op->op : part->op;
      st = CUBE_INVALID("%s: participants disagree: %s has %" PRIu64 " bytes of %s %s, "
                        "%s has %" PRIu64 " bytes of %s %s",
                        what, cube__coll_dev_name(d1, me, sizeof(me)), b1, cube_dtype_name(t1),
                        cube_reduce_op_name(o1), cube__coll_dev_name(d2, other, sizeof(other)), b2,
                        cube_dtype_name(t2), cube_reduce_op_name(o2));
    } else {
      uint64_t sb = slot == 0 ? part->bytes : op->bytes, rb = slot == 0 ? op->bytes : part->bytes;
      st = CUBE_INVALID("%s: the sender has %" PRIu64 " bytes, the receiver %" PRIu64, what, sb,
                        rb);
    }
    cube__coll_op_complete_locked(op, st);
    return last;
  }
  cube__taint_t* in = part->src_mem ? cube__memory_taint(part->src_mem) : NULL;
  if (__builtin_expect(in != NULL, 0)) {
    cube__taint_t* u = cube__taint_union(op->spoiled, in);
    cube__taint_unref(op->spoiled);
    op->spoiled = u;
  }
  cube__coll_slot_t* s = &op->slots[slot];
  s->has = true;
  s->part = *part;
  s->src = src;
  s->dst = dst;
  part->src_mem = part->dst_mem = NULL; /* the op's now */
  return last;
}

//===----------------------------------------------------------------------===//
// Records and profiling
//===----------------------------------------------------------------------===//

void cube__coll_record_of(const cube__coll_op_t* op, uint64_t time_ns,
                          cube_collective_record_t* r) {
  memset(r, 0, sizeof(*r));
  cube__comm_t* c = op->comm;
  r->kind = op->kind;
  r->dtype = op->dtype;
  r->op = op->op;
  r->bytes = op->bytes;
  r->participants = op->kind == CUBE_COLLECTIVE_ALL_REDUCE ? c->n : 2;
  bool same_rank = c->rank_of[op->from] == c->rank_of[op->to];
  r->ranks = op->kind == CUBE_COLLECTIVE_ALL_REDUCE ? c->rank_count : (same_rank ? 1 : 2);
  r->sequence = op->seq;
  r->time_ns = time_ns ? time_ns : 1;
  r->wait_ns = op->t_last - op->t_first;
  r->algbw_gbps = (double)r->bytes / (double)r->time_ns;
  double n = r->participants;
  r->busbw_gbps = op->kind == CUBE_COLLECTIVE_ALL_REDUCE && n > 1
                      ? r->algbw_gbps * 2.0 * (n - 1) / n
                      : r->algbw_gbps;
  r->transport = c->transport ? c->transport->id : "";
}

void cube__coll_record_store(cube__server_t* server, const cube_collective_record_t* r) {
  cube_device_id_t dev = server->id;
  char name[160];
  if (r->kind == CUBE_COLLECTIVE_ALL_REDUCE)
    snprintf(name, sizeof(name), "all_reduce %s %s x%u", cube_dtype_name(r->dtype),
             cube_reduce_op_name(r->op), r->participants);
  else
    snprintf(name, sizeof(name), "send/recv");
  pthread_mutex_lock(&g_coll_lock);
  cube__coll_rec_t* e = g_records;
  while (e && !(e->device.backend == dev.backend && e->device.index == dev.index)) e = e->next;
  if (!e && (e = calloc(1, sizeof(*e))) != NULL) {
    e->device = dev;
    e->next = g_records;
    g_records = e;
  }
  if (e) e->record = *r;
  pthread_mutex_unlock(&g_coll_lock);
  cube__profiler_t* p = &server->profiler;
  if (p->level >= CUBE_PROFILE_BASIC)
    cube__profiler_record(p, CUBE_PROFILE_ROW_COLLECTIVE, name, r->time_ns);
  if (cube__trace_on()) {
    /* On the device's collectives track, ending now (the record is stored
     * when the operation completed). */
    cube__trace_record_t t;
    memset(&t, 0, sizeof(t));
    uint64_t now = cube__now_ns();
    t.ts_ns = now > r->time_ns ? now - r->time_ns : 0;
    t.dur_ns = r->time_ns;
    t.pid = cube__trace_device_pid(dev);
    t.tid = CUBE__TRACE_COLLECTIVE_TID;
    t.kind = CUBE__TRACE_COLLECTIVE;
    t.a[0] = r->bytes;
    t.a[1] = r->participants;
    t.a[2] = r->ranks;
    t.f[0] = r->algbw_gbps;
    t.f[1] = r->busbw_gbps;
    snprintf(t.name, sizeof(t.name), "%.*s", (int)sizeof(t.name) - 1, name);
    snprintf(t.detail, sizeof(t.detail), "%s", r->transport ? r->transport : "");
    cube__trace_emit(&t);
  }
  if (p->level >= CUBE_PROFILE_MEDIUM) {
    char d[32], by[32];
    cube__profiler_log(p, "| %s | %s: %s, %u participants, algbw %.2f GB/s, busbw %.2f GB/s (%s)",
                       cube__format_duration(r->time_ns, d, sizeof(d)), name,
                       cube__format_bytes(r->bytes, by, sizeof(by)), r->participants,
                       r->algbw_gbps, r->busbw_gbps, r->transport);
  }
}

void cube__coll_op_record(const cube__coll_op_t* op, uint64_t t_end) {
  cube_collective_record_t r;
  cube__coll_record_of(op, t_end > op->t_last ? t_end - op->t_last : 1, &r);
  for (uint32_t i = 0; i < op->nslots; ++i) {
    const cube__coll_slot_t* s = &op->slots[i];
    if (!s->has) continue;
    r.kind = op->kind == CUBE_COLLECTIVE_ALL_REDUCE ? op->kind
             : i == 0                               ? CUBE_COLLECTIVE_SEND
                                                    : CUBE_COLLECTIVE_RECV;
    cube__coll_record_store(s->part.stream->server, &r);
  }
}

void cube__coll_part_record(cube__coll_part_t* part, cube_collective_kind_t kind,
                            const cube__comm_t* c, uint64_t seq, uint64_t t0, uint64_t t1) {
  cube__coll_op_t tmp;
  memset(&tmp, 0, sizeof(tmp));
  cube__coll_slot_t slots[2];
  memset(slots, 0, sizeof(slots));
  uint32_t i = kind == CUBE_COLLECTIVE_SEND ? 0 : 1;
  slots[i].has = true;
  slots[i].part = *part;
  tmp.comm = (cube__comm_t*)c;
  tmp.kind = CUBE_COLLECTIVE_SEND;
  tmp.from = kind == CUBE_COLLECTIVE_SEND ? part->rank : part->peer;
  tmp.to = kind == CUBE_COLLECTIVE_SEND ? part->peer : part->rank;
  tmp.seq = seq;
  tmp.bytes = part->bytes;
  tmp.dtype = CUBE_DTYPE_U8;
  tmp.t_first = tmp.t_last = t0;
  tmp.nslots = 2;
  tmp.slots = slots;
  cube__coll_op_record(&tmp, t1);
}

bool cube__coll_last_record(cube_device_id_t dev, cube_collective_record_t* out) {
  bool found = false;
  pthread_mutex_lock(&g_coll_lock);
  for (cube__coll_rec_t* e = g_records; e; e = e->next) {
    if (e->device.backend == dev.backend && e->device.index == dev.index) {
      *out = e->record;
      found = true;
      break;
    }
  }
  pthread_mutex_unlock(&g_coll_lock);
  return found;
}

//===----------------------------------------------------------------------===//
// Entries of streams
//===----------------------------------------------------------------------===//

void cube__coll_list_append(cube__coll_list_t* l, cube__coll_entry_t* chain) {
  if (!chain) return;
  cube__coll_entry_t** last = &chain->next;
  while (*last) last = &(*last)->next;
  pthread_mutex_lock(&l->lock);
  *l->tail = chain;
  l->tail = last;
  pthread_mutex_unlock(&l->lock);
}

cube__coll_entry_t* cube__coll_list_take(cube__coll_list_t* l, const cube__stream_t* stream,
                                         bool (*ready)(const cube__coll_entry_t* e,
                                                       const void* arg),
                                         const void* arg) {
  cube__coll_entry_t* mine = NULL;
  cube__coll_entry_t** mine_tail = &mine;
  pthread_mutex_lock(&l->lock);
  cube__coll_entry_t** p = &l->head;
  while (*p) {
    cube__coll_entry_t* e = *p;
    if (e->stream != stream) {
      p = &e->next;
      continue;
    }
    if (ready && !ready(e, arg)) break; /* keep the stream's order: stop at the first not ready */
    *p = e->next;
    e->next = NULL;
    *mine_tail = e;
    mine_tail = &e->next;
  }
  /* Walked to the end: |p| is the last link (the tail moved if the last
   * entries were taken). Stopped early: the tail entry is still there. */
  if (!*p) l->tail = p;
  pthread_mutex_unlock(&l->lock);
  return mine;
}

cube__coll_entry_t* cube__coll_list_take_all(cube__coll_list_t* l) {
  pthread_mutex_lock(&l->lock);
  cube__coll_entry_t* e = l->head;
  l->head = NULL;
  l->tail = &l->head;
  pthread_mutex_unlock(&l->lock);
  return e;
}

//===----------------------------------------------------------------------===//
// Shutdown
//===----------------------------------------------------------------------===//

void cube__coll_rendezvous_shutdown(void) {
  pthread_mutex_lock(&g_coll_lock);
  cube__comm_t* c = g_comms;
  g_comms = NULL;
  cube__coll_rec_t* r = g_records;
  g_records = NULL;
  pthread_mutex_unlock(&g_coll_lock);
  while (c) {
    cube__comm_t* x = c;
    c = x->next;
    cube__coll_comm_free(x);
  }
  while (r) {
    cube__coll_rec_t* x = r;
    r = x->next;
    free(x);
  }
}
