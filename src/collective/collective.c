/* Communicators, the rendezvous of participants and the host transport
 * (see collective.h and docs/collectives.md).
 *
 * Rendezvous. A communicator counts, per participant, the operations it has
 * joined: the k-th all_reduce of every participant is one operation (the
 * k-th send from A to B and the k-th recv on B from A likewise). The first
 * participant to arrive creates the operation record, each one deposits its
 * resolved pointers, and the last one of this process performs it for all
 * (reduction through a small staging block, so src == dst works), then, when
 * the communicator spans MPI ranks, exchanges the partial result with the
 * other ranks. Arrivals never wait: the waiting is done by
 * cube_client_sync_collective (cube__coll_pending_wait), which abandons an
 * operation whose participants did not all join in time. A late participant
 * then finds the abandoned record and gets its error, so every participant
 * fails the same operation and the sequence numbers stay aligned.
 */
#include "collective/collective.h"

#include "collective/coll_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "base/status.h"
#include "platform/platform.h"
#include "server/server.h"

#define CUBE__COLL_BLOCK (256u * 1024u) /* bytes reduced per pass over the parts */

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

typedef struct cube__coll_pending {
  struct cube__coll_pending* next;
  cube__server_t* server;
  uint64_t stream_id;
  cube__coll_op_t* op;
} cube__coll_pending_t;

typedef struct cube__coll_rec {
  struct cube__coll_rec* next;
  cube_device_id_t device;
  cube_collective_record_t record;
} cube__coll_rec_t;

static pthread_mutex_t g_coll_lock = PTHREAD_MUTEX_INITIALIZER; /* comms, records */
static cube__comm_t* g_comms;
static cube__coll_rec_t* g_records;
static pthread_mutex_t g_pending_lock = PTHREAD_MUTEX_INITIALIZER;
static cube__coll_pending_t* g_pending;

static pthread_mutex_t g_world_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_world_ready;
static cube__coll_world_t g_world;

//===----------------------------------------------------------------------===//
// Scratch buffers
//===----------------------------------------------------------------------===//

#define CUBE__SCRATCH_KEEP 16
#define CUBE__SCRATCH_HEAD 64

static pthread_mutex_t g_scratch_lock = PTHREAD_MUTEX_INITIALIZER;
static void* g_scratch[CUBE__SCRATCH_KEEP];
static size_t g_scratch_n;

static size_t cube__scratch_cap(const void* p) {
  size_t cap;
  memcpy(&cap, (const char*)p - CUBE__SCRATCH_HEAD, sizeof(cap));
  return cap;
}

void* cube__coll_scratch_get(size_t size) {
  pthread_mutex_lock(&g_scratch_lock);
  size_t best = SIZE_MAX;
  for (size_t i = 0; i < g_scratch_n; ++i)
    if (cube__scratch_cap(g_scratch[i]) >= size &&
        (best == SIZE_MAX || cube__scratch_cap(g_scratch[i]) < cube__scratch_cap(g_scratch[best])))
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
      if (cube__scratch_cap(g_scratch[i]) < cube__scratch_cap(g_scratch[small])) small = i;
    if (cube__scratch_cap(g_scratch[small]) < cube__scratch_cap(p)) {
      void* x = g_scratch[small];
      g_scratch[small] = p;
      p = x;
    }
  }
  pthread_mutex_unlock(&g_scratch_lock);
  cube__coll_scratch_free(p);
}

static void cube__scratch_shutdown(void) {
  pthread_mutex_lock(&g_scratch_lock);
  size_t n = g_scratch_n;
  void* keep[CUBE__SCRATCH_KEEP];
  memcpy(keep, g_scratch, n * sizeof(void*));
  g_scratch_n = 0;
  pthread_mutex_unlock(&g_scratch_lock);
  for (size_t i = 0; i < n; ++i) cube__coll_scratch_free(keep[i]);
}

//===----------------------------------------------------------------------===//
// World and ids
//===----------------------------------------------------------------------===//

/* Without MPI, a process may still be one of several (the nccl transport
 * across processes, ids through CUBE_NCCL_ID_FILE): CUBE_COLLECTIVE_RANK and
 * CUBE_COLLECTIVE_RANKS. */
static cube_status_t cube__env_world(cube__coll_world_t* w) {
  CUBE_RETURN_IF_ERROR(cube__option_status(CUBE__OPT_COLLECTIVE_RANK));
  CUBE_RETURN_IF_ERROR(cube__option_status(CUBE__OPT_COLLECTIVE_RANKS));
  bool has_r = cube__option_has_value(CUBE__OPT_COLLECTIVE_RANK);
  bool has_n = cube__option_has_value(CUBE__OPT_COLLECTIVE_RANKS);
  if (!has_r && !has_n) return CUBE_OK;
  unsigned long r = has_r ? cube__option_u32(CUBE__OPT_COLLECTIVE_RANK) : 0;
  unsigned long n = has_n ? cube__option_u32(CUBE__OPT_COLLECTIVE_RANKS) : 1;
  if (r >= n)
    return CUBE_INVALID("collectives: CUBE_COLLECTIVE_RANK=%lu / CUBE_COLLECTIVE_RANKS=%lu%s: "
                        "expected 0 <= rank < ranks <= 65536",
                        r, n, has_n ? "" : " (unset)");
  w->rank = (uint32_t)r;
  w->ranks = (uint32_t)n;
  return CUBE_OK;
}

cube_status_t cube__coll_world(cube__coll_world_t* out) {
  pthread_mutex_lock(&g_world_lock);
  cube_status_t st = CUBE_OK;
  if (!g_world_ready) {
    cube__coll_world_t w;
    memset(&w, 0, sizeof(w));
    w.ranks = 1;
    st = cube__mpi_start(&w.mpi, &w.rank, &w.ranks);
    if (!st && !w.mpi) st = cube__env_world(&w);
    if (!st) {
      /* The devices per rank of the backend whose ids span MPI ranks (the
       * CPU's, CUBE_CPU_DEVICES). */
      cube_backend_t b = cube__backend_with_caps(CUBE__CAP_GLOBAL_IDS_UNDER_MPI);
      w.local_cpu = b == CUBE_BACKEND_COUNT ? 0 : cube__backend_device_count(b);
      g_world = w;
      g_world_ready = true;
    }
  }
  if (!st) *out = g_world;
  pthread_mutex_unlock(&g_world_lock);
  return st;
}

/* The devices of each backend, counted once per process and only when they
 * are needed (a CPU-only MPI program does not load the CUDA driver). */
static pthread_mutex_t g_count_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t g_counts[CUBE_BACKEND_COUNT];
static bool g_counted[CUBE_BACKEND_COUNT];

static uint32_t cube__coll_local_count(cube_backend_t backend) {
  pthread_mutex_lock(&g_count_lock);
  if (!g_counted[backend]) {
    g_counts[backend] = cube__backend_device_count(backend);
    g_counted[backend] = true;
  }
  uint32_t n = g_counts[backend];
  pthread_mutex_unlock(&g_count_lock);
  return n;
}

uint32_t cube__coll_per_rank(const cube__coll_world_t* w, cube_backend_t backend) {
  const cube__backend_vtable_t* vt = cube__backend_get(backend);
  if (!vt) return 0;
  if (vt->caps & CUBE__CAP_GLOBAL_IDS_UNDER_MPI) return w->mpi ? w->local_cpu : 0;
  if ((vt->caps & CUBE__CAP_GLOBAL_IDS_MULTIPROCESS) && w->ranks > 1)
    return cube__coll_local_count(backend);
  return 0;
}

cube_status_t cube_collective_world(uint32_t* out_rank, uint32_t* out_ranks,
                                    uint32_t* out_local_devices) {
  cube__coll_world_t w;
  CUBE_RETURN_IF_ERROR(cube__options_check("cube_collective_world"));
  CUBE_RETURN_IF_ERROR(cube__coll_world(&w));
  if (out_rank) *out_rank = w.rank;
  if (out_ranks) *out_ranks = w.ranks;
  if (out_local_devices) *out_local_devices = w.local_cpu;
  return CUBE_OK;
}

cube_device_id_t cube__coll_global_id(cube_device_id_t local) {
  cube__coll_world_t w;
  cube_status_t st = cube__coll_world(&w);
  if (st) {
    cube_status_free(st);
    return local;
  }
  local.index += w.rank * cube__coll_per_rank(&w, local.backend);
  return local;
}

uint32_t cube__coll_global_count(cube_backend_t backend) {
  uint32_t n = (uint32_t)cube_device_count(backend);
  cube__coll_world_t w;
  cube_status_t st = cube__coll_world(&w);
  if (st) {
    cube_status_free(st);
    return n;
  }
  return cube__coll_per_rank(&w, backend) ? n * w.ranks : n;
}

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
  if (t && skipped && (unsigned)backend < CUBE_BACKEND_COUNT) {
    /* The fallback, and why the preferred one is not used (the reason does
     * not change once it was tried). */
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static char lines[CUBE_BACKEND_COUNT][640];
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

cube_status_t cube__coll_timeout_ns(uint64_t* out_ns) {
  double s = cube__option_seconds(CUBE__OPT_COLLECTIVE_TIMEOUT); /* default 60 */
  CUBE_RETURN_IF_ERROR(cube__option_status(CUBE__OPT_COLLECTIVE_TIMEOUT));
  *out_ns = (uint64_t)(s * 1e9);
  return CUBE_OK;
}

const char* cube__dev_name(cube_device_id_t d, char* buf, size_t size) {
  const char* b = cube_backend_name(d.backend);
  snprintf(buf, size, "%s:%u", b ? b : "?", d.index);
  return buf;
}

//===----------------------------------------------------------------------===//
// Communicators
//===----------------------------------------------------------------------===//

static int cube__id_cmp(const void* a, const void* b) {
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
                          cube__dev_name(comm->ids[i], d, sizeof(d)));
  }
  if (o < size) snprintf(buf + o, size - o, "}");
  return buf;
}

uint32_t cube__coll_comm_size(const cube__comm_t* comm) { return comm->n; }
cube_device_id_t cube__coll_comm_device(const cube__comm_t* comm, uint32_t rank) {
  return comm->ids[rank];
}


static void cube__comm_free(cube__comm_t* c) {
  while (c->ops) {
    cube__coll_op_t* op = c->ops;
    c->ops = op->next;
    op->linked = false;
    cube__op_unref(op);
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

cube_status_t cube__coll_comm_get(const char* fn, size_t count, const cube_device_id_t* devices,
                                  cube_device_id_t self, cube__comm_t** out_comm,
                                  uint32_t* out_rank) {
  if (count == 0 || count > 4096)
    return CUBE_INVALID("%s: device_count %zu is out of range [1, 4096]", fn, count);
  cube__coll_world_t w;
  CUBE_RETURN_IF_ERROR(cube__coll_world(&w));
  cube_device_id_t* ids = malloc(count * sizeof(*ids));
  if (!ids) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
  memcpy(ids, devices, count * sizeof(*ids));
  qsort(ids, count, sizeof(*ids), cube__id_cmp);
  char a[32], b[32];
  for (size_t i = 0; i < count; ++i) {
    if (ids[i].backend != self.backend) {
      cube_status_t st = CUBE_INVALID(
          "%s: devices holds %s but the client's device is %s: a communicator's devices share "
          "one backend",
          fn, cube__dev_name(ids[i], a, sizeof(a)), cube__dev_name(self, b, sizeof(b)));
      free(ids);
      return st;
    }
    if (i && ids[i].index == ids[i - 1].index) {
      cube_status_t st =
          CUBE_INVALID("%s: devices lists %s twice", fn, cube__dev_name(ids[i], a, sizeof(a)));
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
                            cube__dev_name(ids[i], a, sizeof(a)));
    free(ids);
    return CUBE_INVALID("%s: the client's device %s%s is not among devices {%s}", fn,
                        cube__dev_name(self, b, sizeof(b)),
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
      cube__comm_free(c);
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
    cube__comm_free(c);
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

//===----------------------------------------------------------------------===//
// Operations
//===----------------------------------------------------------------------===//

void cube__part_release(cube__coll_part_t* p) {
  if (p->src_mem) cube__memory_unref(p->src_mem);
  if (p->dst_mem) cube__memory_unref(p->dst_mem);
  p->src_mem = p->dst_mem = NULL;
}

void cube__op_unref(cube__coll_op_t* op) {
  if (!op || atomic_fetch_sub_explicit(&op->refs, 1, memory_order_acq_rel) != 1) return;
  for (uint32_t i = 0; i < op->nslots; ++i) {
    cube__part_release(&op->slots[i].part);
    if (op->slots[i].aux && op->aux_free) op->aux_free(op->slots[i].aux);
  }
  cube_status_free(op->status);
  free(op->slots);
  free(op);
}

/* "all_reduce #3 (f32 sum, 1024 bytes) over {cpu:0, cpu:1}" */
const char* cube__op_name(const cube__coll_op_t* op, char* buf, size_t size) {
  char set[256];
  cube__coll_comm_name(op->comm, set, sizeof(set));
  if (op->kind == CUBE_COLLECTIVE_ALL_REDUCE) {
    snprintf(buf, size, "all_reduce #%" PRIu64 " (%s %s, %" PRIu64 " bytes) over %s", op->seq,
             cube_dtype_name(op->dtype), cube_reduce_op_name(op->op), op->bytes, set);
  } else {
    char a[32], b[32];
    snprintf(buf, size, "send/recv #%" PRIu64 " %s -> %s (%" PRIu64 " bytes)", op->seq,
             cube__dev_name(op->comm->ids[op->from], a, sizeof(a)),
             cube__dev_name(op->comm->ids[op->to], b, sizeof(b)), op->bytes);
  }
  return buf;
}

/* Completes |op| with |status| (consumed) if it is not yet. comm->lock held. */
void cube__op_complete_locked(cube__coll_op_t* op, cube_status_t status) {
  if (op->complete) {
    cube_status_free(status);
    return;
  }
  op->status = status;
  op->complete = true;
  for (uint32_t i = 0; i < op->nslots; ++i) {
    cube__part_release(&op->slots[i].part);
    if (op->slots[i].aux && op->aux_free) op->aux_free(op->slots[i].aux);
    op->slots[i].aux = NULL;
  }
  cube__event_set(&op->started);
  cube__event_set(&op->done);
}

static void cube__op_unlink_locked(cube__comm_t* c, cube__coll_op_t* op) {
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
cube__coll_op_t* cube__op_find_locked(cube__comm_t* c, cube_collective_kind_t kind,
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
static cube__coll_op_t* cube__op_solo(cube__comm_t* c, cube_collective_kind_t kind, uint32_t from,
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

cube_status_t cube__resolve(cube__memory_t* mem, uint64_t offset, void** out) {
  const cube__storage_t* storage;
  uint64_t off, sz;
  if (!mem || !cube__memory_resolve(mem, &storage, &off, &sz))
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "memory %" PRIu64 " is not bound",
                             mem ? mem->id : 0);
  *out = (char*)storage->ptr + off + offset;
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Records and profiling
//===----------------------------------------------------------------------===//

void cube__coll_record_of(const cube__coll_op_t* op, uint64_t time_ns, cube_collective_record_t* r) {
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
  if (p->level >= CUBE_PROFILE_BASIC) cube__profiler_record(p, name, r->time_ns);
  if (p->level >= CUBE_PROFILE_MEDIUM) {
    char d[32], by[32];
    cube__profiler_log(p, "| %s | %s: %s, %u participants, algbw %.2f GB/s, busbw %.2f GB/s (%s)",
                       cube__format_duration(r->time_ns, d, sizeof(d)), name,
                       cube__format_bytes(r->bytes, by, sizeof(by)), r->participants,
                       r->algbw_gbps, r->busbw_gbps, r->transport);
  }
}

static void cube__op_record(const cube__coll_op_t* op, uint64_t t_end) {
  cube_collective_record_t r;
  cube__coll_record_of(op, t_end > op->t_last ? t_end - op->t_last : 1, &r);
  for (uint32_t i = 0; i < op->nslots; ++i) {
    const cube__coll_slot_t* s = &op->slots[i];
    if (!s->has) continue;
    r.kind = op->kind == CUBE_COLLECTIVE_ALL_REDUCE ? op->kind
             : i == 0                               ? CUBE_COLLECTIVE_SEND
                                                    : CUBE_COLLECTIVE_RECV;
    cube__coll_record_store(s->part.server, &r);
  }
}

static void cube__solo_record(cube__coll_part_t* part, cube_collective_kind_t kind,
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
  cube__op_record(&tmp, t1);
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
// Performing
//===----------------------------------------------------------------------===//

/* Reduces the local parts of |op| into every local dst, exchanging with the
 * other ranks when the communicator spans several. */
static cube_status_t cube__perform_all_reduce(cube__coll_op_t* op, uint64_t timeout_ns) {
  cube__comm_t* c = op->comm;
  uint32_t esize = cube_dtype_size(op->dtype);
  uint64_t count = op->bytes / esize;
  uint32_t first = UINT32_MAX;
  for (uint32_t i = 0; i < op->nslots; ++i)
    if (op->slots[i].has && first == UINT32_MAX) first = i;
  if (first == UINT32_MAX) return CUBE_OK;
  /* Across ranks: this rank's partial, then every rank's partial in rank
   * order, so that each rank computes the same result. */
  void* partial = cube__coll_scratch_get(op->bytes);
  void** received = calloc(c->rank_count, sizeof(void*));
  uint32_t* others = calloc(c->rank_count, sizeof(uint32_t));
  cube_status_t st = CUBE_OK;
  if (!partial || !received || !others) {
    st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "no host memory for the partial result");
    goto done;
  }
  memcpy(partial, op->slots[first].src, op->bytes);
  for (uint32_t i = first + 1; i < op->nslots; ++i)
    if (op->slots[i].has) cube__reduce_combine(op->dtype, op->op, partial, op->slots[i].src, count);
  uint32_t no = 0;
  for (uint32_t k = 0; k < c->rank_count; ++k)
    if (c->ranks[k] != c->my_rank) others[no++] = c->ranks[k];
  cube__mpi_header_t h = {c->hash, op->seq, op->bytes, (uint32_t)op->kind, (uint32_t)op->dtype,
                          (uint32_t)op->op, c->local_per_rank, c->my_rank, 0};
  char what[320];
  cube__op_name(op, what, sizeof(what));
  st = cube__mpi_exchange(c->hash * 4u + 1u, &h, partial, no, others, received,
                          cube__now_ns() + timeout_ns, what);
  if (st) goto done;
  /* received[j] belongs to others[j]; combine in rank order into |acc|. */
  void* acc = NULL;
  uint32_t j = 0;
  for (uint32_t k = 0; k < c->rank_count; ++k) {
    const void* p = c->ranks[k] == c->my_rank ? partial : received[j++];
    if (!acc) {
      acc = cube__coll_scratch_get(op->bytes);
      if (!acc) {
        st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "no host memory for the result");
        goto done;
      }
      memcpy(acc, p, op->bytes);
    } else {
      cube__reduce_combine(op->dtype, op->op, acc, p, count);
    }
  }
  cube__reduce_finish(op->dtype, op->op, acc, count, c->n);
  for (uint32_t i = 0; i < op->nslots; ++i)
    if (op->slots[i].has) memcpy(op->slots[i].dst, acc, op->bytes);
  cube__coll_scratch_put(acc);
done:
  if (received)
    for (uint32_t k = 0; k < c->rank_count; ++k) cube__coll_scratch_put(received[k]);
  free(received);
  free(others);
  cube__coll_scratch_put(partial);
  return st;
}

/* The timeout of the task running on this thread (set by cube__coll_task_run). */
static _Thread_local uint64_t g_perform_timeout_ns;

uint64_t cube__coll_task_timeout_ns(void) { return g_perform_timeout_ns; }

/* The part of participant |slot| arrives at |op| (comm->lock held): checks
 * it against the first, stores it. Returns true if it is the last. */
bool cube__op_arrive_locked(cube__coll_op_t* op, uint32_t slot, cube__coll_part_t* part,
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
  if (last && op->linked) cube__op_unlink_locked(c, op);
  if (op->complete) return last; /* abandoned or failed: the part stays with the caller */
  bool mismatch = op->arrived > 1 && (part->bytes != op->bytes ||
                                      (op->kind == CUBE_COLLECTIVE_ALL_REDUCE &&
                                       (part->dtype != op->dtype || part->op != op->op)));
  if (mismatch) {
    char what[320], me[32], other[32];
    cube__op_name(op, what, sizeof(what));
    uint32_t other_slot = 0;
    for (uint32_t i = 0; i < op->nslots; ++i)
      if (op->slots[i].has) other_slot = i;
    cube_device_id_t od = op->slots[other_slot].part.server->id;
    cube_device_id_t md = part->server->id;
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
                        what, cube__dev_name(d1, me, sizeof(me)), b1, cube_dtype_name(t1),
                        cube_reduce_op_name(o1), cube__dev_name(d2, other, sizeof(other)), b2,
                        cube_dtype_name(t2), cube_reduce_op_name(o2));
    } else {
      uint64_t sb = slot == 0 ? part->bytes : op->bytes, rb = slot == 0 ? op->bytes : part->bytes;
      st = CUBE_INVALID("%s: the sender has %" PRIu64 " bytes, the receiver %" PRIu64, what, sb,
                        rb);
    }
    cube__op_complete_locked(op, st);
    return last;
  }
  cube__coll_slot_t* s = &op->slots[slot];
  s->has = true;
  s->part = *part;
  s->src = src;
  s->dst = dst;
  part->src_mem = part->dst_mem = NULL; /* the op's now */
  return last;
}

/* Block |b| of a shared operation: reduce (through |tmp|, CUBE__COLL_BLOCK
 * bytes) or copy. */
static void cube__op_block(cube__coll_op_t* op, uint64_t b, void* tmp) {
  if (op->kind != CUBE_COLLECTIVE_ALL_REDUCE) {
    uint64_t off = b * CUBE__COLL_BLOCK;
    uint64_t len = op->nblocks == 1 ? op->bytes
                   : op->bytes - off < CUBE__COLL_BLOCK ? op->bytes - off : CUBE__COLL_BLOCK;
    memmove((char*)op->slots[1].dst + off, (const char*)op->slots[0].src + off, len);
    return;
  }
  uint32_t esize = cube_dtype_size(op->dtype);
  uint64_t block_elems = CUBE__COLL_BLOCK / esize, count = op->bytes / esize;
  uint64_t e0 = b * block_elems;
  uint64_t m = count - e0 < block_elems ? count - e0 : block_elems;
  uint64_t off = e0 * esize, len = m * esize;
  uint32_t first = 0;
  while (!op->slots[first].has) ++first;
  memcpy(tmp, (const char*)op->slots[first].src + off, len);
  for (uint32_t i = first + 1; i < op->nslots; ++i)
    if (op->slots[i].has)
      cube__reduce_combine(op->dtype, op->op, tmp, (const char*)op->slots[i].src + off, m);
  cube__reduce_finish(op->dtype, op->op, tmp, m, op->comm->n);
  for (uint32_t i = 0; i < op->nslots; ++i)
    if (op->slots[i].has) memcpy((char*)op->slots[i].dst + off, tmp, len);
}

/* Takes blocks of a started shared operation until none is left; the one who
 * finishes the last block completes it. A helper without memory for its
 * staging block just does not help. */
static void cube__op_help(cube__coll_op_t* op) {
  if (!op->shared) return;
  if (atomic_load_explicit(&op->next_block, memory_order_relaxed) >= op->nblocks) return;
  void* tmp = NULL;
  if (op->kind == CUBE_COLLECTIVE_ALL_REDUCE) {
    tmp = cube__coll_scratch_get(CUBE__COLL_BLOCK);
    if (!tmp) return;
  }
  for (;;) {
    uint64_t b = atomic_fetch_add_explicit(&op->next_block, 1, memory_order_relaxed);
    if (b >= op->nblocks) break;
    cube__op_block(op, b, tmp);
    if (atomic_fetch_add_explicit(&op->blocks_done, 1, memory_order_acq_rel) + 1 == op->nblocks) {
      cube__op_record(op, cube__now_ns());
      pthread_mutex_lock(&op->comm->lock);
      cube__op_complete_locked(op, CUBE_OK);
      pthread_mutex_unlock(&op->comm->lock);
    }
  }
  cube__coll_scratch_put(tmp);
}

/* The last participant of this process performs |op|: in blocks that the
 * waiting participants help with (in-process), or alone (across ranks). */
static void cube__op_perform(cube__coll_op_t* op, uint64_t timeout_ns) {
  cube__comm_t* c = op->comm;
  pthread_mutex_lock(&c->lock);
  bool skip = op->complete;
  pthread_mutex_unlock(&c->lock);
  if (skip) return;
  bool p2p = op->kind != CUBE_COLLECTIVE_ALL_REDUCE;
  if (p2p || c->rank_count <= 1) {
    /* The performer needs its staging block before it may start. */
    void* probe = p2p ? NULL : cube__coll_scratch_get(CUBE__COLL_BLOCK);
    if (!p2p && !probe) {
      char what[320];
      pthread_mutex_lock(&c->lock);
      cube__op_complete_locked(op, cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                                                     "%s: no host memory for a staging block",
                                                     cube__op_name(op, what, sizeof(what))));
      pthread_mutex_unlock(&c->lock);
      return;
    }
    cube__coll_scratch_put(probe);
    uint64_t nb = (op->bytes + CUBE__COLL_BLOCK - 1) / CUBE__COLL_BLOCK;
    if (!p2p) {
      uint64_t be = CUBE__COLL_BLOCK / cube_dtype_size(op->dtype);
      uint64_t count = op->bytes / cube_dtype_size(op->dtype);
      nb = (count + be - 1) / be;
    } else {
      /* Overlapping views of one buffer: one block, in order. */
      const char* a = op->slots[0].src;
      const char* d = op->slots[1].dst;
      if (a < d + op->bytes && d < a + op->bytes) nb = 1;
    }
    if (nb == 0) {
      cube__op_record(op, cube__now_ns());
      pthread_mutex_lock(&c->lock);
      cube__op_complete_locked(op, CUBE_OK);
      pthread_mutex_unlock(&c->lock);
      return;
    }
    op->nblocks = nb;
    op->shared = true;
    cube__event_set(&op->started);
    cube__op_help(op);
    return;
  }
  cube__event_set(&op->started);
  cube_status_t st = cube__perform_all_reduce(op, timeout_ns);
  uint64_t t_end = cube__now_ns();
  if (st) {
    char what[320];
    st = cube__status_annotate(st, "%s", cube__op_name(op, what, sizeof(what)));
  } else {
    cube__op_record(op, t_end);
  }
  pthread_mutex_lock(&c->lock);
  cube__op_complete_locked(op, st);
  pthread_mutex_unlock(&c->lock);
}

//===----------------------------------------------------------------------===//
// The host transport
//===----------------------------------------------------------------------===//

static void cube__staged_add(cube__coll_part_t* part, cube__coll_op_t* op, void* src_host,
                             void* dst_host, bool write_back);

/* The rendezvous of an all_reduce part whose data is at |src| and goes to
 * |dst| (host memory); |rs| a failure to get there (consumed). |staged|: the
 * part's host copies (src, dst) are kept until its sync writes dst back. */
static cube_status_t cube__all_reduce_at(cube__comm_t* c, cube__coll_part_t* part, void* src,
                                         void* dst, cube_status_t rs, bool staged,
                                         cube__coll_op_t** out_op) {
  pthread_mutex_lock(&c->lock);
  uint64_t seq = c->ar_seq[part->rank]++;
  cube__coll_op_t* op = cube__op_find_locked(c, CUBE_COLLECTIVE_ALL_REDUCE, 0, 0, seq, c->local_n,
                                             c->n);
  if (!op) {
    pthread_mutex_unlock(&c->lock);
    cube_status_free(rs);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "all_reduce #%" PRIu64 ": no host memory",
                             seq);
  }
  atomic_fetch_add(&op->refs, 1); /* the caller's */
  if (rs) {
    char what[320];
    cube__op_name(op, what, sizeof(what));
    cube__op_complete_locked(op, cube__status_annotate(rs, "%s", what));
  }
  if (staged) cube__staged_add(part, op, src, dst, true);
  bool last = cube__op_arrive_locked(op, part->rank, part, src, dst);
  pthread_mutex_unlock(&c->lock);
  if (last) {
    cube__op_perform(op, g_perform_timeout_ns);
    cube__op_unref(op); /* the list's */
  }
  *out_op = op;
  return CUBE_OK;
}

static cube_status_t cube__host_all_reduce(cube__comm_t* c, cube__coll_part_t* part,
                                           cube__coll_op_t** out_op) {
  void* src = NULL;
  void* dst = NULL;
  cube_status_t rs = cube__resolve(part->src_mem, part->src_offset, &src);
  if (!rs) rs = cube__resolve(part->dst_mem, part->dst_offset, &dst);
  return cube__all_reduce_at(c, part, src, dst, rs, false, out_op);
}

/* A send or receive part whose data is at (or goes to) |p| in host memory;
 * |rs| a failure to get there (consumed). |staged|: |p| is the part's host
 * copy, kept until its sync (a receive writes it back then). */
static cube_status_t cube__p2p_at(cube__comm_t* c, cube__coll_part_t* part, bool is_send, void* p,
                                  cube_status_t rs, bool staged, cube__coll_op_t** out_op) {
  uint32_t from = is_send ? part->rank : part->peer;
  uint32_t to = is_send ? part->peer : part->rank;
  uint32_t other = is_send ? to : from;
  if (!c->local[other]) {
    /* Across processes: the message itself, on this runner, until the
     * deadline. */
    pthread_mutex_lock(&c->lock);
    uint64_t seq = is_send ? c->send_seq[from * c->n + to]++ : c->recv_seq[from * c->n + to]++;
    pthread_mutex_unlock(&c->lock);
    cube__mpi_header_t h = {c->hash, seq, part->bytes, (uint32_t)CUBE_COLLECTIVE_SEND, 0, 0,
                            c->local_per_rank, c->my_rank, 0};
    char what[200], a[32], b[32];
    snprintf(what, sizeof(what), "send/recv #%" PRIu64 " %s -> %s (%" PRIu64 " bytes)", seq,
             cube__dev_name(c->ids[from], a, sizeof(a)), cube__dev_name(c->ids[to], b, sizeof(b)),
             part->bytes);
    uint64_t t0 = cube__now_ns();
    cube_status_t st = rs;
    uint64_t tag = c->hash * 4u + 2u + (uint64_t)from * 8191u + to;
    if (!st)
      st = is_send ? cube__mpi_send(tag, &h, p, c->rank_of[to], t0 + g_perform_timeout_ns, what)
                   : cube__mpi_recv(tag, &h, p, c->rank_of[from], t0 + g_perform_timeout_ns, what);
    if (!st) cube__solo_record(part, is_send ? CUBE_COLLECTIVE_SEND : CUBE_COLLECTIVE_RECV, c, seq,
                               t0, cube__now_ns());
    cube__coll_op_t* op = cube__op_solo(c, CUBE_COLLECTIVE_SEND, from, to, seq, part->bytes, st);
    if (!op) {
      if (staged) cube__coll_scratch_put(p);
      return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", what);
    }
    if (staged) {
      /* The host copy is the part's until its sync, which writes a received
       * one back to the device (and gives the buffer back either way). */
      pthread_mutex_lock(&c->lock);
      cube__staged_add(part, op, is_send ? p : NULL, is_send ? NULL : p, !is_send);
      pthread_mutex_unlock(&c->lock);
    }
    *out_op = op;
    return CUBE_OK;
  }
  pthread_mutex_lock(&c->lock);
  uint64_t seq = is_send ? c->send_seq[from * c->n + to]++ : c->recv_seq[from * c->n + to]++;
  cube__coll_op_t* op = cube__op_find_locked(c, CUBE_COLLECTIVE_SEND, from, to, seq, 2, 2);
  if (!op) {
    pthread_mutex_unlock(&c->lock);
    cube_status_free(rs);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "send/recv #%" PRIu64 ": no host memory",
                             seq);
  }
  atomic_fetch_add(&op->refs, 1);
  if (rs) {
    char what[320];
    cube__op_name(op, what, sizeof(what));
    cube__op_complete_locked(op, cube__status_annotate(rs, "%s", what));
  }
  if (staged) cube__staged_add(part, op, is_send ? p : NULL, is_send ? NULL : p, !is_send);
  bool last = cube__op_arrive_locked(op, is_send ? 0 : 1, part, is_send ? p : NULL,
                                     is_send ? NULL : p);
  pthread_mutex_unlock(&c->lock);
  if (last) {
    cube__op_perform(op, g_perform_timeout_ns);
    cube__op_unref(op);
  }
  *out_op = op;
  return CUBE_OK;
}

static cube_status_t cube__host_p2p(cube__comm_t* c, cube__coll_part_t* part, bool is_send,
                                    cube__coll_op_t** out_op) {
  void* p = NULL;
  cube_status_t rs = is_send ? cube__resolve(part->src_mem, part->src_offset, &p)
                             : cube__resolve(part->dst_mem, part->dst_offset, &p);
  return cube__p2p_at(c, part, is_send, p, rs, false, out_op);
}

static cube_status_t cube__host_send(cube__comm_t* c, cube__coll_part_t* part,
                                     cube__coll_op_t** out_op) {
  return cube__host_p2p(c, part, true, out_op);
}

static cube_status_t cube__host_recv(cube__comm_t* c, cube__coll_part_t* part,
                                     cube__coll_op_t** out_op) {
  return cube__host_p2p(c, part, false, out_op);
}

const cube__coll_transport_t cube__coll_host_transport = {
    .id = "host",
    .name = "shared memory in-process, MPI across processes",
    .all_reduce = cube__host_all_reduce,
    .send = cube__host_send,
    .recv = cube__host_recv,
};

//===----------------------------------------------------------------------===//
// The staged transport: devices whose memory is not host memory
//===----------------------------------------------------------------------===//

/* For backends without a collective engine of their own (OpenCL; CUDA until
 * NCCL is wired in): a part copies its source to host memory on its own
 * stream (a blocking read, ordered after the work queued before it), joins
 * the same rendezvous as the host transport, and its result lands in a host
 * buffer; the participant's next sync_collective writes that buffer to its
 * device on its own stream. So, as with CubeCL's NCCL path, the destination
 * holds the result once sync_collective has returned, not before. */
typedef struct cube__staged {
  struct cube__staged* next;
  cube__server_t* server;
  uint64_t stream_id;
  cube__coll_op_t* op;     /* a reference */
  cube__memory_t* dst_mem; /* a binding reference; NULL when nothing is written back */
  uint64_t dst_offset;
  uint64_t bytes;
  void* src_host; /* scratch buffers (NULL when unused) */
  void* dst_host;
} cube__staged_t;

static pthread_mutex_t g_staged_lock = PTHREAD_MUTEX_INITIALIZER;
static cube__staged_t* g_staged_head;
static cube__staged_t** g_staged_tail = &g_staged_head;

static void cube__staged_free(cube__staged_t* e) {
  if (e->dst_mem) cube__memory_unref(e->dst_mem);
  cube__coll_scratch_put(e->src_host);
  cube__coll_scratch_put(e->dst_host);
  cube__op_unref(e->op);
  free(e);
}

/* Keeps |part|'s host copies until its stream's next sync_collective (called
 * with the op found and the comm's lock held, before the part arrives). */
static void cube__staged_add(cube__coll_part_t* part, cube__coll_op_t* op, void* src_host,
                             void* dst_host, bool write_back) {
  cube__staged_t* e = calloc(1, sizeof(*e));
  if (!e) {
    /* Without the record the result cannot be written back: fail the op
     * rather than lose it silently. */
    cube__op_complete_locked(op, cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                                                   "collective: no host memory to stage a part"));
    return;
  }
  e->server = part->server;
  e->stream_id = part->stream_id;
  e->op = op;
  atomic_fetch_add(&op->refs, 1);
  if (write_back && part->dst_mem) {
    e->dst_mem = part->dst_mem;
    cube__memory_ref(e->dst_mem);
  }
  e->dst_offset = part->dst_offset;
  e->bytes = part->bytes;
  e->src_host = src_host;
  e->dst_host = dst_host;
  pthread_mutex_lock(&g_staged_lock);
  *g_staged_tail = e;
  g_staged_tail = &e->next;
  pthread_mutex_unlock(&g_staged_lock);
}

/* Copies |bytes| of |mem| (+ |offset|) into |host| on (s, stream_id). */
static cube_status_t cube__staged_copy(cube__server_t* s, uint64_t stream_id, cube__memory_t* mem,
                                       uint64_t offset, uint64_t bytes, void* host, bool to_device) {
  cube__stream_t* st;
  CUBE_RETURN_IF_ERROR(cube__server_stream(s, stream_id, &st));
  const cube__storage_t* storage;
  uint64_t off, sz;
  if (!mem || !cube__memory_resolve(mem, &storage, &off, &sz))
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "memory %" PRIu64 " is not bound",
                             mem ? mem->id : 0);
  if (bytes == 0) return CUBE_OK;
  CUBE_RETURN_IF_ERROR(cube__stream_order(st, mem));
  return to_device ? cube__backend_write(&s->be, st->backend_stream, storage, off + offset, bytes,
                                         host, bytes, 1)
                   : cube__backend_read(&s->be, st->backend_stream, host, storage, off + offset,
                                        bytes, bytes, 1);
}

static cube_status_t cube__staged_all_reduce(cube__comm_t* c, cube__coll_part_t* part,
                                             cube__coll_op_t** out_op) {
  size_t n = (size_t)part->bytes;
  void* src = cube__coll_scratch_get(n ? n : 1);
  void* dst = cube__coll_scratch_get(n ? n : 1);
  cube_status_t rs = src && dst ? CUBE_OK
                                : cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                                                    "no host memory to stage %zu bytes", n);
  if (!rs)
    rs = cube__staged_copy(part->server, part->stream_id, part->src_mem, part->src_offset,
                           part->bytes, src, false);
  if (rs || !src || !dst) {
    /* The op records the failure; the buffers are not kept. */
    cube__coll_scratch_put(src);
    cube__coll_scratch_put(dst);
    return cube__all_reduce_at(c, part, NULL, NULL, rs, false, out_op);
  }
  return cube__all_reduce_at(c, part, src, dst, CUBE_OK, true, out_op);
}

static cube_status_t cube__staged_p2p(cube__comm_t* c, cube__coll_part_t* part, bool is_send,
                                      cube__coll_op_t** out_op) {
  size_t n = (size_t)part->bytes;
  void* p = cube__coll_scratch_get(n ? n : 1);
  cube_status_t rs =
      p ? CUBE_OK
        : cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "no host memory to stage %zu bytes", n);
  if (!rs && is_send)
    rs = cube__staged_copy(part->server, part->stream_id, part->src_mem, part->src_offset,
                           part->bytes, p, false);
  if (rs) {
    cube__coll_scratch_put(p);
    return cube__p2p_at(c, part, is_send, NULL, rs, false, out_op);
  }
  return cube__p2p_at(c, part, is_send, p, CUBE_OK, true, out_op);
}

static cube_status_t cube__staged_send(cube__comm_t* c, cube__coll_part_t* part,
                                       cube__coll_op_t** out_op) {
  return cube__staged_p2p(c, part, true, out_op);
}

static cube_status_t cube__staged_recv(cube__comm_t* c, cube__coll_part_t* part,
                                       cube__coll_op_t** out_op) {
  return cube__staged_p2p(c, part, false, out_op);
}

/* On (s, stream_id)'s runner, after its pending operations completed: writes
 * back the results of its staged parts, in the order they were queued. */
static cube_status_t cube__staged_sync(cube__comm_t* comm, cube__server_t* s, uint64_t stream_id) {
  (void)comm;
  cube__staged_t* mine = NULL;
  cube__staged_t** mine_tail = &mine;
  pthread_mutex_lock(&g_staged_lock);
  cube__staged_t** p = &g_staged_head;
  while (*p) {
    cube__staged_t* e = *p;
    /* Every part queued on this stream before this sync is complete: the
     * wait before this call waited for (or abandoned) its operation. */
    bool ours = e->server == s && e->stream_id == stream_id;
    if (!ours) {
      p = &e->next;
      continue;
    }
    *p = e->next;
    e->next = NULL;
    *mine_tail = e;
    mine_tail = &e->next;
  }
  g_staged_tail = p;
  pthread_mutex_unlock(&g_staged_lock);
  cube_status_t errors = CUBE_OK;
  while (mine) {
    cube__staged_t* e = mine;
    mine = e->next;
    cube__event_wait(&e->op->done, UINT64_MAX); /* done already; orders the reads below */
    /* A failed operation's error was already returned by the wait. */
    if (!e->op->status && e->dst_mem) {
      cube_status_t st = cube__staged_copy(s, stream_id, e->dst_mem, e->dst_offset, e->bytes,
                                           e->dst_host, true);
      if (st) errors = cube__status_join(errors, cube__status_annotate(st, "writing a collective's "
                                                                            "result back"));
    }
    cube__staged_free(e);
  }
  return errors;
}

const cube__coll_transport_t cube__coll_staged_transport = {
    .id = "staged",
    .name = "device memory through host buffers",
    .all_reduce = cube__staged_all_reduce,
    .send = cube__staged_send,
    .recv = cube__staged_recv,
    .sync = cube__staged_sync,
};

static void cube__staged_shutdown(void) {
  pthread_mutex_lock(&g_staged_lock);
  cube__staged_t* e = g_staged_head;
  g_staged_head = NULL;
  g_staged_tail = &g_staged_head;
  pthread_mutex_unlock(&g_staged_lock);
  while (e) {
    cube__staged_t* x = e;
    e = x->next;
    cube__staged_free(x);
  }
}

//===----------------------------------------------------------------------===//
// Pending operations and their wait
//===----------------------------------------------------------------------===//

void cube__coll_pending_add(cube__server_t* server, uint64_t stream_id, cube__comm_t* comm,
                            cube__coll_op_t* op) {
  (void)comm;
  cube__coll_pending_t* e = calloc(1, sizeof(*e));
  cube__coll_pending_t* drop = NULL;
  pthread_mutex_lock(&g_pending_lock);
  /* Completed successes of this stream need no wait: forget them, so that a
   * program that never calls sync_collective does not grow the list. */
  for (cube__coll_pending_t** p = &g_pending; *p;) {
    cube__coll_pending_t* x = *p;
    if (x->server == server && x->stream_id == stream_id && cube__event_is_set(&x->op->done) &&
        !x->op->status) {
      *p = x->next;
      x->next = drop;
      drop = x;
    } else {
      p = &x->next;
    }
  }
  if (e) {
    e->server = server;
    e->stream_id = stream_id;
    e->op = op;
    e->next = g_pending;
    g_pending = e;
  }
  pthread_mutex_unlock(&g_pending_lock);
  if (!e) {
    /* Out of host memory: wait now rather than lose the ordering. */
    cube__event_wait(&op->done, UINT64_MAX);
    cube__op_unref(op);
  }
  while (drop) {
    cube__coll_pending_t* x = drop;
    drop = x->next;
    cube__op_unref(x->op);
    free(x);
  }
}

/* Abandons |op| (its participants did not all join): the error names those
 * that are missing. */
static void cube__op_abandon(cube__coll_op_t* op, uint64_t timeout_ns) {
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
                            cube__dev_name(d, nm, sizeof(nm)));
    if (c->rank_count > 1 && o + 24 < sizeof(missing))
      o += (size_t)snprintf(missing + o, sizeof(missing) - o, " (rank %u)", c->rank_of[place]);
    ++nmiss;
  }
  char what[320];
  cube__op_name(op, what, sizeof(what));
  cube_status_t st = cube__status_make(
      CUBE_STATUS_DEADLINE_EXCEEDED,
      "%s: %s did not join within %.3g s (CUBE_COLLECTIVE_TIMEOUT); the operation is abandoned "
      "on every participant",
      what, missing, (double)timeout_ns / 1e9);
  cube__op_complete_locked(op, st);
  pthread_mutex_unlock(&c->lock);
}

cube_status_t cube__coll_pending_wait(cube__server_t* server, uint64_t stream_id,
                                      uint64_t timeout_ns) {
  cube__coll_pending_t* mine = NULL;
  pthread_mutex_lock(&g_pending_lock);
  for (cube__coll_pending_t** p = &g_pending; *p;) {
    cube__coll_pending_t* x = *p;
    if (x->server == server && x->stream_id == stream_id) {
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
      cube__op_abandon(op, timeout_ns);
      cube__event_wait(&op->started, UINT64_MAX); /* all joined: starting */
    }
    cube__op_help(op);
    cube__event_wait(&op->done, UINT64_MAX);
    if (op->status) errors = cube__status_join(errors, cube__status_clone(op->status));
    cube__op_unref(op);
    free(x);
  }
  return errors;
}

//===----------------------------------------------------------------------===//
// Tasks (queued by the client on the participant's stream)
//===----------------------------------------------------------------------===//

/* Exposed to client.c through cube__coll_submit below. */
typedef struct cube__coll_task {
  const cube__coll_transport_t* transport;
  cube__comm_t* comm;
  cube_collective_kind_t kind;
  uint64_t timeout_ns;
  cube__coll_part_t part;
} cube__coll_task_t;

static cube_status_t cube__coll_task_run(void* state, void* payload) {
  cube__server_t* s = state;
  cube__coll_task_t* t = payload;
  cube__coll_op_t* op = NULL;
  t->part.server = s;
  t->part.stream_id = cube__stream_current_id();
  g_perform_timeout_ns = t->timeout_ns;
  cube_status_t st;
  switch (t->kind) {
    case CUBE_COLLECTIVE_ALL_REDUCE: st = t->transport->all_reduce(t->comm, &t->part, &op); break;
    case CUBE_COLLECTIVE_SEND: st = t->transport->send(t->comm, &t->part, &op); break;
    default: st = t->transport->recv(t->comm, &t->part, &op); break;
  }
  if (op) cube__coll_pending_add(s, t->part.stream_id, t->comm, op);
  if (st) {
    cube__stream_t* stream;
    cube_status_t e = cube__server_stream(s, t->part.stream_id, &stream);
    if (e) return cube__status_join(e, st);
    cube__stream_push_error(stream, st);
  }
  return CUBE_OK;
}

static void cube__coll_task_drop(void* payload) {
  cube__coll_task_t* t = payload;
  cube__part_release(&t->part);
}

cube_status_t cube__coll_submit(cube__server_t* s, uint64_t stream_id, cube__comm_t* comm,
                                cube_collective_kind_t kind, const cube__coll_part_t* part,
                                uint64_t timeout_ns) {
  cube__coll_task_t t;
  memset(&t, 0, sizeof(t));
  t.transport = comm->transport;
  t.comm = comm;
  t.kind = kind;
  t.timeout_ns = timeout_ns;
  t.part = *part;
  _Static_assert(sizeof(cube__coll_task_t) <= CUBE__TASK_INLINE_BYTES, "task fits a queue cell");
  return cube__submit(s->service, stream_id, cube__coll_task_run, &t, sizeof(t),
                      cube__coll_task_drop);
}

typedef struct cube__coll_sync_task {
  uint64_t timeout_ns;
} cube__coll_sync_task_t;

static cube_status_t cube__coll_sync_run(void* state, void* payload) {
  cube__server_t* s = state;
  cube__coll_sync_task_t* t = payload;
  uint64_t sid = cube__stream_current_id();
  g_perform_timeout_ns = t->timeout_ns;
  cube_status_t st = cube__coll_pending_wait(s, sid, t->timeout_ns);
  const cube__coll_transport_t* tr = cube__coll_transport_for(s->id.backend);
  if (tr && tr->sync) st = cube__status_join(st, tr->sync(NULL, s, sid));
  if (st) {
    cube__stream_t* stream;
    cube_status_t e = cube__server_stream(s, sid, &stream);
    if (e) return cube__status_join(e, st);
    cube__stream_push_error(stream, cube__status_annotate(st, "cube_client_sync_collective"));
  }
  return CUBE_OK;
}

cube_status_t cube__coll_submit_sync(cube__server_t* s, uint64_t stream_id, uint64_t timeout_ns) {
  cube__coll_sync_task_t t = {timeout_ns};
  return cube__submit(s->service, stream_id, cube__coll_sync_run, &t, sizeof(t), NULL);
}

//===----------------------------------------------------------------------===//
// Shutdown
//===----------------------------------------------------------------------===//

void cube__coll_quiesce(void) {
  for (size_t i = 0; i < CUBE__TRANSPORTS; ++i)
    if (g_transports[i]->quiesce) g_transports[i]->quiesce();
}

void cube__coll_shutdown(void) {
  cube__staged_shutdown();
  pthread_mutex_lock(&g_pending_lock);
  cube__coll_pending_t* p = g_pending;
  g_pending = NULL;
  pthread_mutex_unlock(&g_pending_lock);
  while (p) {
    cube__coll_pending_t* x = p;
    p = x->next;
    cube__op_unref(x->op);
    free(x);
  }
  pthread_mutex_lock(&g_coll_lock);
  cube__comm_t* c = g_comms;
  g_comms = NULL;
  cube__coll_rec_t* r = g_records;
  g_records = NULL;
  pthread_mutex_unlock(&g_coll_lock);
  while (c) {
    cube__comm_t* x = c;
    c = x->next;
    cube__comm_free(x);
  }
  for (size_t i = 0; i < CUBE__TRANSPORTS; ++i)
    if (g_transports[i]->shutdown) g_transports[i]->shutdown();
  while (r) {
    cube__coll_rec_t* x = r;
    r = x->next;
    free(x);
  }
  cube__scratch_shutdown();
  /* The world (MPI) stays: MPI cannot be started twice in a process. */
}
