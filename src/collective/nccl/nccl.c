/* The nccl transport: collectives between CUDA devices through NCCL
 * (docs/collectives.md, "Transports").
 *
 * Arrival. A participant's task (on its device's runner, or on the caller in
 * inline mode) orders its buffers on its stream (cube__stream_order), records
 * an event there (the "ready" event: its data is complete once the stream
 * reaches it) and deposits its part in the rendezvous shared with the host
 * transport (collective.c: sequence numbers, size/type checks, abandonment).
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

#include <cudaTypedefs.h>

#include "base/status.h"
#include "collective/coll_internal.h"
#include "collective/nccl/nccl_api.h"
#include "server/server.h"

#define CUBE__NCCL_MAX_DEVICES 64u

//===----------------------------------------------------------------------===//
// The CUDA driver, through the backend's ctl
//===----------------------------------------------------------------------===//

/* The driver entry points this transport uses, taken by name from the CUDA
 * backend (CUBE__CTL_DRIVER_PROC: cuGetProcAddress at the ABI version the
 * backend uses), so that nothing here includes the backend's internals. */
#define CUBE__NCCL_CU_FUNCTIONS(X)                                        \
  X(CtxGetCurrent, "cuCtxGetCurrent", PFN_cuCtxGetCurrent_v4000)          \
  X(CtxPushCurrent, "cuCtxPushCurrent", PFN_cuCtxPushCurrent_v4000)       \
  X(CtxPopCurrent, "cuCtxPopCurrent", PFN_cuCtxPopCurrent_v4000)          \
  X(StreamCreate, "cuStreamCreate", PFN_cuStreamCreate_v2000)             \
  X(StreamDestroy, "cuStreamDestroy", PFN_cuStreamDestroy_v4000)          \
  X(StreamWaitEvent, "cuStreamWaitEvent", PFN_cuStreamWaitEvent_v3020)    \
  X(EventCreate, "cuEventCreate", PFN_cuEventCreate_v2000)                \
  X(EventRecord, "cuEventRecord", PFN_cuEventRecord_v2000)                \
  X(EventQuery, "cuEventQuery", PFN_cuEventQuery_v2000)                   \
  X(EventSynchronize, "cuEventSynchronize", PFN_cuEventSynchronize_v2000) \
  X(EventDestroy, "cuEventDestroy", PFN_cuEventDestroy_v4000)             \
  X(EventElapsedTime, "cuEventElapsedTime", PFN_cuEventElapsedTime_v2000) \
  X(GetErrorName, "cuGetErrorName", PFN_cuGetErrorName_v6000)             \
  X(GetErrorString, "cuGetErrorString", PFN_cuGetErrorString_v6000)

typedef struct cube__nccl_cu {
#define CUBE__NCCL_CU_FIELD(field, sym, type) type field;
  CUBE__NCCL_CU_FUNCTIONS(CUBE__NCCL_CU_FIELD)
#undef CUBE__NCCL_CU_FIELD
} cube__nccl_cu_t;

static pthread_mutex_t g_cu_lock = PTHREAD_MUTEX_INITIALIZER;
static cube__nccl_cu_t g_cu;
static atomic_bool g_cu_ready;

/* The table, loaded from |be|'s ctl on first use. */
static cube_status_t cube__nccl_cu_from(const cube__backend_t* be, const cube__nccl_cu_t** out) {
  if (atomic_load_explicit(&g_cu_ready, memory_order_acquire)) {
    *out = &g_cu;
    return CUBE_OK;
  }
  cube__backend_proc_fn proc = NULL;
  CUBE_RETURN_IF_ERROR(cube__backend_ctl(be, NULL, CUBE__CTL_DRIVER_PROC, &proc));
  cube__nccl_cu_t t;
  memset(&t, 0, sizeof(t));
#define CUBE__NCCL_CU_GET(field, sym, type)                                                  \
  {                                                                                          \
    void* p = proc(sym);                                                                     \
    if (!p)                                                                                  \
      return cube__status_make(CUBE_STATUS_UNAVAILABLE,                                      \
                               "nccl: the CUDA driver has no %s for the nccl transport", sym); \
    t.field = (type)(uintptr_t)p;                                                            \
  }
  CUBE__NCCL_CU_FUNCTIONS(CUBE__NCCL_CU_GET)
#undef CUBE__NCCL_CU_GET
  pthread_mutex_lock(&g_cu_lock);
  if (!atomic_load_explicit(&g_cu_ready, memory_order_relaxed)) {
    g_cu = t;
    atomic_store_explicit(&g_cu_ready, true, memory_order_release);
  }
  pthread_mutex_unlock(&g_cu_lock);
  *out = &g_cu;
  return CUBE_OK;
}

/* The table where no device is at hand (teardown, releases): it was loaded
 * by the operation that made what is being released, else there is nothing
 * of CUDA's to release. */
static cube_status_t cube__nccl_cu_get(const cube__nccl_cu_t** out) {
  if (!atomic_load_explicit(&g_cu_ready, memory_order_acquire))
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "nccl: no CUDA device used NCCL yet");
  *out = &g_cu;
  return CUBE_OK;
}

/* A CUresult as a status (|code| OK: chosen from the result). */
static cube_status_t cube__nccl_cu_error(CUresult r, cube_status_code_t code, const char* fmt, ...)
    CUBE_PRINTF(3, 4);
static cube_status_t cube__nccl_cu_error(CUresult r, cube_status_code_t code, const char* fmt,
                                         ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  const char* name = NULL;
  const char* text = NULL;
  if (atomic_load_explicit(&g_cu_ready, memory_order_acquire)) {
    if (g_cu.GetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
    if (g_cu.GetErrorString(r, &text) != CUDA_SUCCESS) text = NULL;
  }
  if (code == CUBE_STATUS_OK)
    code = r == CUDA_ERROR_OUT_OF_MEMORY ? CUBE_STATUS_OUT_OF_MEMORY : CUBE_STATUS_INTERNAL;
  return cube__status_make(code, "%s: %s (%s, error %d)", what, name ? name : "CUDA error",
                           text ? text : "no description", (int)r);
}

/* The device's context and ordinal, a stream's CUstream (the backend's ctl;
 * a CUDA device answers these, and only CUDA devices reach this transport). */
static CUcontext cube__nccl_ctx(const cube__server_t* s) {
  void* ctx = NULL;
  cube_status_free(cube__backend_ctl(&s->be, NULL, CUBE__CTL_NATIVE_CONTEXT, &ctx));
  return (CUcontext)ctx;
}

static uint32_t cube__nccl_ordinal(const cube__server_t* s) {
  uint32_t o = UINT32_MAX;
  cube_status_free(cube__backend_ctl(&s->be, NULL, CUBE__CTL_NATIVE_ORDINAL, &o));
  return o;
}

static CUstream cube__nccl_native_stream(const cube__stream_t* st) {
  void* cs = NULL;
  cube_status_free(cube__backend_ctl(&st->server->be, st->backend_stream,
                                     CUBE__CTL_NATIVE_STREAM, &cs));
  return (CUstream)cs;
}

//===----------------------------------------------------------------------===//
// Devices: the comm stream of each GPU
//===----------------------------------------------------------------------===//

typedef struct cube__nccl_dev {
  CUcontext ctx;
  CUstream stream; /* NULL until first used */
} cube__nccl_dev_t;

static pthread_mutex_t g_dev_lock = PTHREAD_MUTEX_INITIALIZER;
static cube__nccl_dev_t g_devs[CUBE__NCCL_MAX_DEVICES];

/* The process-wide issue lock (see the top of the file). */
static pthread_mutex_t g_issue_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct cube__nccl_scope {
  const cube__nccl_cu_t* cu;
  bool pushed;
} cube__nccl_scope_t;

static cube__nccl_scope_t cube__nccl_enter(const cube__nccl_cu_t* cu, CUcontext ctx) {
  cube__nccl_scope_t s = {cu, false};
  CUcontext cur = NULL;
  if (cu->CtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx) return s;
  s.pushed = cu->CtxPushCurrent(ctx) == CUDA_SUCCESS;
  return s;
}

/* Around NCCL's group calls: NCCL sets devices with the runtime
 * (cudaSetDevice replaces the thread's current context); a context pushed
 * first and popped after takes the change with it, so the caller's thread
 * (in inline mode, the user's) finds its context as it was. */
static cube__nccl_scope_t cube__nccl_guard(const cube__nccl_cu_t* cu, CUcontext ctx) {
  cube__nccl_scope_t s = {cu, cu->CtxPushCurrent(ctx) == CUDA_SUCCESS};
  return s;
}

static void cube__nccl_leave(cube__nccl_scope_t* s) {
  if (!s->pushed) return;
  CUcontext popped = NULL;
  s->cu->CtxPopCurrent(&popped);
  s->pushed = false;
}

/* The comm stream of |s|'s device, created on first use. */
static cube_status_t cube__nccl_comm_stream(const cube__nccl_cu_t* cu, cube__server_t* s,
                                            CUstream* out, CUcontext* out_ctx) {
  uint32_t o = cube__nccl_ordinal(s);
  CUcontext ctx = cube__nccl_ctx(s);
  if (o >= CUBE__NCCL_MAX_DEVICES)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE, "nccl: cuda:%u: more than %u GPUs",
                             o, CUBE__NCCL_MAX_DEVICES);
  pthread_mutex_lock(&g_dev_lock);
  cube_status_t st = CUBE_OK;
  cube__nccl_dev_t* d = &g_devs[o];
  if (!d->stream) {
    cube__nccl_scope_t sc = cube__nccl_enter(cu, ctx);
    CUresult r = cu->StreamCreate(&d->stream, CU_STREAM_NON_BLOCKING);
    cube__nccl_leave(&sc);
    if (r != CUDA_SUCCESS) {
      d->stream = NULL;
      st = cube__nccl_cu_error(r, CUBE_STATUS_OK, "nccl: cuda:%u: creating its comm stream", o);
    } else {
      d->ctx = ctx;
    }
  }
  if (!st) {
    *out = d->stream;
    *out_ctx = ctx;
  }
  pthread_mutex_unlock(&g_dev_lock);
  return st;
}

//===----------------------------------------------------------------------===//
// Communicator state
//===----------------------------------------------------------------------===//

typedef struct cube__nccl_state {
  pthread_mutex_t lock;       /* every NCCL call on |comms| */
  uint32_t generation;        /* communicators created so far */
  bool ready;                 /* |comms| of this generation are usable */
  cube_status_t broken;       /* why they cannot be created again (across processes) */
  cube__nccl_comm_t* comms;   /* [n]; NULL for the ranks of other processes */
  CUcontext guard_ctx;        /* a local device's context (cube__nccl_guard) */
  char id_file[512];          /* the unique id file this process wrote ("" if none) */
} cube__nccl_state_t;

/* The state of |c|, created on first use (c->lock held). */
static cube__nccl_state_t* cube__nccl_state_locked(cube__comm_t* c) {
  if (c->tstate) return c->tstate;
  cube__nccl_state_t* ns = calloc(1, sizeof(*ns));
  if (!ns) return NULL;
  ns->comms = calloc(c->n, sizeof(*ns->comms));
  if (!ns->comms) {
    free(ns);
    return NULL;
  }
  pthread_mutex_init(&ns->lock, NULL);
  c->tstate = ns;
  return ns;
}

/* Naps between polls: spins for the first 200 us, then sleeps 20 us (a
 * yield on a loaded machine costs a whole time slice). */
static void cube__nccl_nap(uint64_t* idle_since) {
  uint64_t now = cube__now_ns();
  if (*idle_since == 0) *idle_since = now;
  if (now - *idle_since < 200000) {
    cube__cpu_relax();
    return;
  }
  struct timespec ts = {0, 20000};
  nanosleep(&ts, NULL);
}

/* Polls the communicators of |which| until none is in progress (nonblocking
 * communicators: a call returns ncclInProgress and the work goes on in
 * NCCL's threads), at most until |deadline|. */
static cube_status_t cube__nccl_settle(const cube__nccl_t* nc, cube__comm_t* c,
                                       cube__nccl_state_t* ns, const bool* which,
                                       uint64_t deadline, const char* what, bool* out_timeout) {
  uint64_t idle = 0;
  *out_timeout = false;
  for (;;) {
    bool busy = false;
    for (uint32_t i = 0; i < c->n; ++i) {
      if (!which[i] || !ns->comms[i]) continue;
      cube__nccl_result_t e = CUBE__NCCL_SUCCESS;
      cube__nccl_result_t r = nc->CommGetAsyncError(ns->comms[i], &e);
      if (r != CUBE__NCCL_SUCCESS)
        return cube__nccl_error(r, ns->comms[i], CUBE_STATUS_OK, "%s: ncclCommGetAsyncError (rank %u)",
                                what, i);
      if (e == CUBE__NCCL_IN_PROGRESS) {
        busy = true;
      } else if (e != CUBE__NCCL_SUCCESS) {
        char d[32];
        return cube__nccl_error(e, ns->comms[i], CUBE_STATUS_OK, "%s: NCCL failed on rank %u (%s)",
                                what, i, cube__dev_name(c->ids[i], d, sizeof(d)));
      }
    }
    if (!busy) return CUBE_OK;
    if (cube__now_ns() >= deadline) {
      *out_timeout = true;
      return CUBE_OK;
    }
    cube__nccl_nap(&idle);
  }
}

/* Aborts the communicators of this generation (ns->lock held). */
static void cube__nccl_abort_locked(const cube__nccl_t* nc, cube__comm_t* c,
                                    cube__nccl_state_t* ns) {
  const cube__nccl_cu_t* cu = NULL;
  cube_status_t e = cube__nccl_cu_get(&cu);
  cube__nccl_scope_t guard = {NULL, false};
  if (!e && ns->guard_ctx) guard = cube__nccl_guard(cu, ns->guard_ctx);
  cube_status_free(e);
  for (uint32_t i = 0; i < c->n; ++i) {
    if (!ns->comms[i]) continue;
    nc->CommAbort(ns->comms[i]);
    ns->comms[i] = NULL;
  }
  cube__nccl_leave(&guard);
  ns->ready = false;
}

/* "cuda:2, cuda:3 (process 1)": the devices of other processes. */
static void cube__nccl_remote_names(const cube__comm_t* c, char* buf, size_t size) {
  size_t o = 0;
  buf[0] = 0;
  for (uint32_t i = 0; i < c->n && o + 48 < size; ++i) {
    if (c->local[i]) continue;
    char d[32];
    o += (size_t)snprintf(buf + o, size - o, "%s%s (process %u)", o ? ", " : "",
                          cube__dev_name(c->ids[i], d, sizeof(d)), c->rank_of[i]);
  }
}

//===----------------------------------------------------------------------===//
// Unique ids across processes
//===----------------------------------------------------------------------===//

static void cube__nccl_sleep_ms(unsigned ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Through the file |base|.<hash>.<generation>. */
static cube_status_t cube__nccl_id_file(cube__comm_t* c, cube__nccl_state_t* ns,
                                        const char* base, bool root, cube__nccl_uid_t* id,
                                        uint64_t deadline, const char* what) {
  char path[512], tmp[560];
  snprintf(path, sizeof(path), "%s.%016" PRIx64 ".%u", base, c->hash, ns->generation);
  if (root) {
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ssize_t w = fd >= 0 ? write(fd, id, sizeof(*id)) : -1;
    int e = errno;
    if (fd >= 0 && close(fd) != 0 && w == (ssize_t)sizeof(*id)) w = -1;
    if (w != (ssize_t)sizeof(*id) || rename(tmp, path) != 0) {
      if (w == (ssize_t)sizeof(*id)) e = errno;
      unlink(tmp);
      return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                               "%s: writing the NCCL unique id to %s (CUBE_NCCL_ID_FILE) failed: %s",
                               what, path, strerror(e));
    }
    snprintf(ns->id_file, sizeof(ns->id_file), "%s", path);
    return CUBE_OK;
  }
  for (;;) {
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
      ssize_t r = read(fd, id, sizeof(*id));
      close(fd);
      if (r == (ssize_t)sizeof(*id)) return CUBE_OK;
    }
    if (cube__now_ns() >= deadline) {
      char remote[256];
      cube__nccl_remote_names(c, remote, sizeof(remote));
      return cube__status_make(CUBE_STATUS_DEADLINE_EXCEEDED,
                               "%s: the NCCL unique id did not appear in %s (CUBE_NCCL_ID_FILE) "
                               "within the deadline (CUBE_COLLECTIVE_TIMEOUT): process %u, which "
                               "writes it, did not join",
                               what, path, c->rank_of[0]);
    }
    cube__nccl_sleep_ms(5);
  }
}

/* The unique id of generation ns->generation of |c| (ns->lock held). */
static cube_status_t cube__nccl_unique_id(const cube__nccl_t* nc, cube__comm_t* c,
                                          cube__nccl_state_t* ns, cube__nccl_uid_t* id,
                                          uint64_t deadline, const char* what) {
  bool root = c->rank_of[0] == c->my_rank;
  if (root) {
    cube__nccl_result_t r = nc->GetUniqueId(id);
    if (r != CUBE__NCCL_SUCCESS)
      return cube__nccl_error(r, NULL, CUBE_STATUS_UNAVAILABLE, "%s: ncclGetUniqueId", what);
  }
  if (c->rank_count == 1) return CUBE_OK;
  cube__coll_world_t w;
  CUBE_RETURN_IF_ERROR(cube__coll_world(&w));
  if (w.mpi) {
    cube__mpi_header_t h = {c->hash, ns->generation, sizeof(*id), 3u, 0, 0, c->local_per_rank,
                            c->my_rank, 0};
    uint64_t tag = c->hash * 4u + 3u;
    if (!root) return cube__mpi_recv(tag, &h, id, c->rank_of[0], deadline, what);
    for (uint32_t k = 0; k < c->rank_count; ++k) {
      if (c->ranks[k] == c->my_rank) continue;
      CUBE_RETURN_IF_ERROR(cube__mpi_send(tag, &h, id, c->ranks[k], deadline, what));
    }
    return CUBE_OK;
  }
  const char* base;
  if (!cube__env_str("CUBE_NCCL_ID_FILE", &base))
    return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "%s: the communicator spans processes; without MPI they exchange "
                             "NCCL's unique id through a file: set CUBE_NCCL_ID_FILE to a path "
                             "every process can read (or start them with mpiexec)",
                             what);
  return cube__nccl_id_file(c, ns, base, root, id, deadline, what);
}

/* The communicators of the local ranks, created in one group when there are
 * none (ns->lock held). |ctx_of[i]|: the context of local rank i. */
static cube_status_t cube__nccl_ensure(const cube__nccl_t* nc, const cube__nccl_cu_t* cu,
                                       cube__comm_t* c, cube__nccl_state_t* ns,
                                       CUcontext* ctx_of, uint64_t deadline, const char* what) {
  if (ns->ready) return CUBE_OK;
  if (ns->broken) return cube__status_clone(ns->broken);
  for (uint32_t i = 0; i < c->n; ++i)
    if (c->local[i] && !ctx_of[i])
      return cube__status_make(CUBE_STATUS_INTERNAL, "%s: local rank %u has no device context",
                               what, i);
  cube__nccl_uid_t id;
  memset(&id, 0, sizeof(id));
  CUBE_RETURN_IF_ERROR(cube__nccl_unique_id(nc, c, ns, &id, deadline, what));
  cube__nccl_config_t cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.size = sizeof(cfg);
  cfg.magic = 0xcafebeefu;
  cfg.version = CUBE__NCCL_MIN_VERSION;
  /* Nonblocking, so that every wait has the deadline; CUBE_NCCL_BLOCKING=1
   * asks for blocking communicators (no deadline inside NCCL's calls). */
  const char* bv;
  cfg.blocking = cube__env_str("CUBE_NCCL_BLOCKING", &bv) && strcmp(bv, "1") == 0 ? 1 : 0;
  cube_status_t st = CUBE_OK;
  uint32_t first = 0;
  while (first < c->n && !c->local[first]) ++first;
  ns->guard_ctx = ctx_of[first];
  cube__nccl_scope_t guard = cube__nccl_guard(cu, ctx_of[first]);
  cube__nccl_result_t r = nc->GroupStart();
  if (r != CUBE__NCCL_SUCCESS) {
    cube__nccl_leave(&guard);
    return cube__nccl_error(r, NULL, CUBE_STATUS_OK, "%s: ncclGroupStart", what);
  }
  for (uint32_t i = 0; i < c->n && !st; ++i) {
    if (!c->local[i]) continue;
    cube__nccl_scope_t sc = cube__nccl_enter(cu, ctx_of[i]);
    r = nc->CommInitRankConfig(&ns->comms[i], (int)c->n, id, (int)i, (cube__nccl_config_ptr_t)&cfg);
    cube__nccl_leave(&sc);
    if (r != CUBE__NCCL_SUCCESS && r != CUBE__NCCL_IN_PROGRESS) {
      char d[32];
      st = cube__nccl_error(r, NULL, CUBE_STATUS_OK, "%s: ncclCommInitRankConfig for rank %u (%s)",
                            what, i, cube__dev_name(c->ids[i], d, sizeof(d)));
    }
  }
  r = nc->GroupEnd();
  if (!st && r != CUBE__NCCL_SUCCESS && r != CUBE__NCCL_IN_PROGRESS)
    st = cube__nccl_error(r, NULL, CUBE_STATUS_OK, "%s: ncclGroupEnd after ncclCommInitRankConfig",
                          what);
  bool timeout = false;
  if (!st) st = cube__nccl_settle(nc, c, ns, c->local, deadline, what, &timeout);
  cube__nccl_leave(&guard);
  if (!st && timeout) {
    char remote[256];
    cube__nccl_remote_names(c, remote, sizeof(remote));
    st = cube__status_make(CUBE_STATUS_DEADLINE_EXCEEDED,
                           "%s: creating the NCCL communicator did not finish within the deadline "
                           "(CUBE_COLLECTIVE_TIMEOUT)%s%s",
                           what, remote[0] ? ": these did not join: " : "", remote);
  }
  if (st) {
    cube__nccl_abort_locked(nc, c, ns);
    if (c->rank_count > 1) ns->broken = cube__status_clone(st);
    return st;
  }
  ns->generation++;
  ns->ready = true;
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Parts in flight
//===----------------------------------------------------------------------===//

/* What a participant's task leaves in its slot (slot->aux). */
typedef struct cube__nccl_ready {
  CUcontext ctx;
  CUevent event; /* on the compute stream, after the part's data */
} cube__nccl_ready_t;

static void cube__nccl_ready_free(void* p) {
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

/* An issued operation: what its participants' syncs share. */
typedef struct cube__nccl_flight {
  atomic_uint refs;
  cube__comm_t* comm;
  uint32_t generation;
  bool remote;                   /* ranks in other processes */
  _Atomic(cube_status_t) status; /* set once: the failure of the whole operation */
  cube_collective_record_t record;
  char what[320];
} cube__nccl_flight_t;

/* One local participant of a flight, until its stream's sync_collective. */
typedef struct cube__nccl_entry {
  struct cube__nccl_entry* next;
  cube__nccl_flight_t* flight;
  cube__server_t* server;
  uint64_t stream_id;
  cube_collective_kind_t kind; /* for the record: ALL_REDUCE, SEND or RECV */
  CUcontext ctx;
  CUevent start, done; /* on the comm stream */
  cube__memory_t* mem[2];
} cube__nccl_entry_t;

static pthread_mutex_t g_entries_lock = PTHREAD_MUTEX_INITIALIZER;
static cube__nccl_entry_t* g_entries;
static cube__nccl_entry_t** g_entries_tail = &g_entries;

static void cube__nccl_flight_unref(cube__nccl_flight_t* f) {
  if (!f || atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1) return;
  cube_status_free(atomic_load(&f->status));
  free(f);
}

/* Sets the flight's failure if it has none (consumes |st|). */
static void cube__nccl_flight_fail(cube__nccl_flight_t* f, cube_status_t st) {
  cube_status_t none = NULL;
  if (!atomic_compare_exchange_strong(&f->status, &none, st)) cube_status_free(st);
}

static void cube__nccl_entry_free(const cube__nccl_cu_t* cu, cube__nccl_entry_t* e,
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
  cube__server_t* server;
  uint64_t stream_id;
  CUcontext ctx;
  CUstream comm_stream;
  cube__nccl_ready_t* ready;
  CUevent start, done;
  const void* src;
  void* dst;
} cube__nccl_item_t;

/* Issues |op| (all its local parts arrived). On success the flight's entries
 * own the parts' memory references and events. */
static cube_status_t cube__nccl_issue(cube__comm_t* c, cube__coll_op_t* op, uint64_t timeout_ns,
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
    x->server = s->part.server;
    x->stream_id = s->part.stream_id;
    x->ready = s->aux;
    x->src = s->src;
    x->dst = s->dst;
    st = cube__nccl_comm_stream(cu, x->server, &x->comm_stream, &x->ctx);
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
    pthread_mutex_lock(&g_issue_lock);
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
    if (r != CUDA_SUCCESS) st = cube__nccl_cu_error(r, CUBE_STATUS_OK, "%s: ordering the comm streams", what);
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
                                x->rank, cube__dev_name(c->ids[x->rank], d, sizeof(d)));
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
    pthread_mutex_unlock(&g_issue_lock);
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
    cube__nccl_entry_t* list = NULL;
    cube__nccl_entry_t** tail = &list;
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
      e->server = x->server;
      e->stream_id = x->stream_id;
      e->kind = ar ? CUBE_COLLECTIVE_ALL_REDUCE : x->is_send ? CUBE_COLLECTIVE_SEND
                                                             : CUBE_COLLECTIVE_RECV;
      e->ctx = x->ctx;
      e->start = x->start;
      e->done = x->done;
      e->mem[0] = s->part.src_mem;
      e->mem[1] = s->part.dst_mem;
      s->part.src_mem = s->part.dst_mem = NULL;
      x->start = x->done = NULL;
      *tail = e;
      tail = &e->next;
    }
    cube__nccl_flight_unref(f); /* the entries hold it */
    pthread_mutex_lock(&g_entries_lock);
    if (list) {
      *g_entries_tail = list;
      g_entries_tail = tail;
    }
    pthread_mutex_unlock(&g_entries_lock);
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

//===----------------------------------------------------------------------===//
// Arrival
//===----------------------------------------------------------------------===//

/* Orders |part|'s buffers on its stream and records the ready event there. */
static cube_status_t cube__nccl_mark(cube__coll_part_t* part, cube__nccl_ready_t** out) {
  const cube__nccl_cu_t* cu = NULL;
  CUBE_RETURN_IF_ERROR(cube__nccl_cu_from(&part->server->be, &cu));
  cube__stream_t* st;
  CUBE_RETURN_IF_ERROR(cube__server_stream(part->server, part->stream_id, &st));
  if (part->src_mem) CUBE_RETURN_IF_ERROR(cube__stream_order(st, part->src_mem));
  if (part->dst_mem) CUBE_RETURN_IF_ERROR(cube__stream_order(st, part->dst_mem));
  cube__nccl_ready_t* rd = calloc(1, sizeof(*rd));
  if (!rd) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "no host memory");
  rd->ctx = cube__nccl_ctx(part->server);
  cube__nccl_scope_t sc = cube__nccl_enter(cu, rd->ctx);
  CUresult r = cu->EventCreate(&rd->event, CU_EVENT_DISABLE_TIMING);
  if (r == CUDA_SUCCESS) r = cu->EventRecord(rd->event, cube__nccl_native_stream(st));
  cube__nccl_leave(&sc);
  if (r != CUDA_SUCCESS) {
    cube__nccl_ready_free(rd);
    return cube__nccl_cu_error(r, CUBE_STATUS_OK, "cuda:%u: recording the part's event",
                            cube__nccl_ordinal(part->server));
  }
  *out = rd;
  return CUBE_OK;
}

static void cube__nccl_reap(const cube__nccl_cu_t* cu, cube__server_t* s, uint64_t sid);

/* The last participant of the process performs the operation. */
static void cube__nccl_perform(cube__comm_t* c, cube__coll_op_t* op, uint64_t timeout_ns) {
  pthread_mutex_lock(&c->lock);
  bool skip = op->complete;
  pthread_mutex_unlock(&c->lock);
  if (skip) return;
  cube__event_set(&op->started);
  char what[320];
  cube__op_name(op, what, sizeof(what));
  /* Every failure of the issue names the operation. */
  cube_status_t st = op->bytes ? cube__nccl_issue(c, op, timeout_ns, what) : CUBE_OK;
  pthread_mutex_lock(&c->lock);
  cube__op_complete_locked(op, st);
  pthread_mutex_unlock(&c->lock);
}

static cube_status_t cube__nccl_join(cube__comm_t* c, cube__coll_part_t* part,
                                     cube_collective_kind_t kind, cube__coll_op_t** out_op) {
  uint64_t timeout_ns = cube__coll_task_timeout_ns();
  const cube__nccl_cu_t* cu = NULL;
  cube_status_t drv = cube__nccl_cu_from(&part->server->be, &cu);
  if (!drv) cube__nccl_reap(cu, part->server, part->stream_id);
  cube_status_free(drv);
  void* src = NULL;
  void* dst = NULL;
  cube__nccl_ready_t* rd = NULL;
  cube_status_t rs = CUBE_OK;
  if (part->src_mem) rs = cube__resolve(part->src_mem, part->src_offset, &src);
  if (!rs && part->dst_mem) rs = cube__resolve(part->dst_mem, part->dst_offset, &dst);
  if (!rs) rs = cube__nccl_mark(part, &rd);
  bool is_send = kind == CUBE_COLLECTIVE_SEND;
  pthread_mutex_lock(&c->lock);
  cube__nccl_state_t* ns = cube__nccl_state_locked(c);
  cube__coll_op_t* op = NULL;
  uint32_t slot = 0;
  uint64_t seq = 0;
  if (ns && kind == CUBE_COLLECTIVE_ALL_REDUCE) {
    seq = c->ar_seq[part->rank]++;
    op = cube__op_find_locked(c, CUBE_COLLECTIVE_ALL_REDUCE, 0, 0, seq, c->local_n, c->n);
    slot = part->rank;
  } else if (ns) {
    uint32_t from = is_send ? part->rank : part->peer;
    uint32_t to = is_send ? part->peer : part->rank;
    seq = is_send ? c->send_seq[from * c->n + to]++ : c->recv_seq[from * c->n + to]++;
    uint32_t expected = from == to ? 2u : (uint32_t)c->local[from] + (uint32_t)c->local[to];
    op = cube__op_find_locked(c, CUBE_COLLECTIVE_SEND, from, to, seq, expected, 2);
    slot = is_send ? 0 : 1;
  }
  if (!op) {
    pthread_mutex_unlock(&c->lock);
    cube_status_free(rs);
    cube__nccl_ready_free(rd);
    cube__part_release(part);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s #%" PRIu64 ": no host memory",
                             kind == CUBE_COLLECTIVE_ALL_REDUCE ? "all_reduce" : "send/recv", seq);
  }
  atomic_fetch_add(&op->refs, 1); /* the caller's */
  op->aux_free = cube__nccl_ready_free;
  if (rs) {
    char what[320];
    cube__op_name(op, what, sizeof(what));
    cube__op_complete_locked(op, cube__status_annotate(rs, "%s", what));
  }
  bool had = op->slots[slot].has;
  bool last = cube__op_arrive_locked(op, slot, part, src, dst);
  if (!had && op->slots[slot].has) {
    op->slots[slot].aux = rd; /* the op's now */
    rd = NULL;
  }
  pthread_mutex_unlock(&c->lock);
  cube__nccl_ready_free(rd);
  if (last) {
    cube__nccl_perform(c, op, timeout_ns);
    cube__op_unref(op); /* the list's */
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
  pthread_mutex_lock(&g_entries_lock);
  for (cube__nccl_entry_t* x = g_entries; x; x = x->next) {
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
  pthread_mutex_unlock(&g_entries_lock);
  cube_status_free(st);
}

/* Waits for |e| (until |deadline|, then the timeout path); writes its record
 * and gives its memory back once NCCL is done with it. Returns its failure. */
static cube_status_t cube__nccl_finish(const cube__nccl_cu_t* cu, cube__nccl_entry_t* e,
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
        cube__nccl_flight_fail(f, cube__nccl_cu_error(r, CUBE_STATUS_OK, "%s: waiting for NCCL", f->what));
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
    cube__coll_record_store(e->server, &r);
  }
  /* A part whose kernels were never seen to end keeps its memory for good:
   * freeing it could hand NCCL's buffers to new data. */
  cube__nccl_entry_free(cu, e, done);
  return st;
}

/* Takes the entries of (s, sid) off the list: all of them, or (|finished|)
 * those at the head whose done event completed and whose flight did not fail. */
static cube__nccl_entry_t* cube__nccl_take(const cube__nccl_cu_t* cu, cube__server_t* s,
                                           uint64_t sid, bool finished) {
  cube__nccl_entry_t* mine = NULL;
  cube__nccl_entry_t** mine_tail = &mine;
  pthread_mutex_lock(&g_entries_lock);
  cube__nccl_entry_t** p = &g_entries;
  while (*p) {
    cube__nccl_entry_t* e = *p;
    bool ours = e->server == s && e->stream_id == sid;
    if (ours && finished) {
      bool ok = !atomic_load(&e->flight->status);
      if (ok) {
        cube__nccl_scope_t sc = cube__nccl_enter(cu, e->ctx);
        ok = cu->EventQuery(e->done) == CUDA_SUCCESS;
        cube__nccl_leave(&sc);
      }
      if (!ok) break; /* keep the stream's order: stop at the first running one */
    }
    if (!ours) {
      p = &e->next;
      continue;
    }
    *p = e->next;
    e->next = NULL;
    *mine_tail = e;
    mine_tail = &e->next;
  }
  /* The tail moved if the last entries were taken. */
  g_entries_tail = &g_entries;
  while (*g_entries_tail) g_entries_tail = &(*g_entries_tail)->next;
  pthread_mutex_unlock(&g_entries_lock);
  return mine;
}

/* At a new part: the finished parts of this stream are let go (a program
 * that never calls sync_collective does not keep every buffer alive). */
static void cube__nccl_reap(const cube__nccl_cu_t* cu, cube__server_t* s, uint64_t sid) {
  cube__nccl_entry_t* mine = cube__nccl_take(cu, s, sid, true);
  while (mine) {
    cube__nccl_entry_t* e = mine;
    mine = e->next;
    cube_status_free(cube__nccl_finish(cu, e, 0));
  }
}

/* sync_collective on (s, sid), after its rendezvous operations were issued:
 * the compute stream waits for its parts' done events, and this task waits
 * for them with the deadline. */
static cube_status_t cube__nccl_sync(cube__comm_t* comm, cube__server_t* s, uint64_t sid) {
  (void)comm;
  const cube__nccl_cu_t* cu = NULL;
  CUBE_RETURN_IF_ERROR(cube__nccl_cu_from(&s->be, &cu));
  uint64_t timeout_ns = cube__coll_task_timeout_ns();
  if (!timeout_ns) CUBE_RETURN_IF_ERROR(cube__coll_timeout_ns(&timeout_ns));
  cube__nccl_entry_t* mine = cube__nccl_take(cu, s, sid, false);
  if (!mine) return CUBE_OK;
  cube__stream_t* st = NULL;
  cube_status_t errors = cube__server_stream(s, sid, &st);
  CUstream compute = st ? cube__nccl_native_stream(st) : NULL;
  for (cube__nccl_entry_t* e = mine; e && st; e = e->next) {
    cube__nccl_scope_t sc = cube__nccl_enter(cu, e->ctx);
    CUresult r = cu->StreamWaitEvent(compute, e->done, 0);
    cube__nccl_leave(&sc);
    if (r != CUDA_SUCCESS)
      errors = cube__status_join(errors, cube__nccl_cu_error(r, CUBE_STATUS_OK,
                                                          "%s: ordering the stream after NCCL",
                                                          e->flight->what));
  }
  while (mine) {
    cube__nccl_entry_t* e = mine;
    mine = e->next;
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
  pthread_mutex_lock(&g_entries_lock);
  bool none = g_entries == NULL;
  pthread_mutex_unlock(&g_entries_lock);
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
    pthread_mutex_lock(&g_entries_lock);
    for (cube__nccl_entry_t* e = g_entries; e && !f; e = e->next) {
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
    pthread_mutex_unlock(&g_entries_lock);
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
  pthread_mutex_lock(&g_entries_lock);
  any = g_entries != NULL;
  pthread_mutex_unlock(&g_entries_lock);
  pthread_mutex_lock(&g_dev_lock);
  for (uint32_t i = 0; i < CUBE__NCCL_MAX_DEVICES && !any; ++i) any = g_devs[i].stream != NULL;
  pthread_mutex_unlock(&g_dev_lock);
  if (!any) return;
  const cube__nccl_cu_t* cu = NULL;
  cube_status_t st = cube__nccl_cu_get(&cu);
  if (st) {
    cube_status_free(st);
    cu = NULL;
  }
  pthread_mutex_lock(&g_entries_lock);
  cube__nccl_entry_t* e = g_entries;
  g_entries = NULL;
  g_entries_tail = &g_entries;
  pthread_mutex_unlock(&g_entries_lock);
  while (e) {
    cube__nccl_entry_t* x = e;
    e = x->next;
    bool finished = true;
    if (cu) {
      cube__nccl_scope_t sc = cube__nccl_enter(cu, x->ctx);
      finished = cu->EventQuery(x->done) != CUDA_ERROR_NOT_READY;
      cube__nccl_leave(&sc);
    }
    cube__nccl_entry_free(cu, x, finished);
  }
  if (!cu) return;
  pthread_mutex_lock(&g_dev_lock);
  for (uint32_t i = 0; i < CUBE__NCCL_MAX_DEVICES; ++i) {
    cube__nccl_dev_t* d = &g_devs[i];
    if (!d->stream) continue;
    cube__nccl_scope_t sc = cube__nccl_enter(cu, d->ctx);
    cu->StreamDestroy(d->stream);
    cube__nccl_leave(&sc);
    d->stream = NULL;
  }
  pthread_mutex_unlock(&g_dev_lock);
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
