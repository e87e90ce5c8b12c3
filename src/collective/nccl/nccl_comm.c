/* The nccl transport's communicators: their state, creation in one group
 * (nonblocking, settled with a deadline), abort, and the unique id across
 * processes (MPI or a file). */
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
#include "platform/private_file.h"

//===----------------------------------------------------------------------===//
// Communicator state
//===----------------------------------------------------------------------===//


/* The state of |c|, created on first use (c->lock held). */
cube__nccl_state_t* cube__nccl_state_locked(cube__comm_t* c) {
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
void cube__nccl_nap(uint64_t* idle_since) {
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
cube_status_t cube__nccl_settle(const cube__nccl_t* nc, cube__comm_t* c,
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
        return cube__nccl_error(r, ns->comms[i], CUBE_STATUS_OK,
                                "%s: ncclCommGetAsyncError (rank %u)", what, i);
      if (e == CUBE__NCCL_IN_PROGRESS) {
        busy = true;
      } else if (e != CUBE__NCCL_SUCCESS) {
        char d[32];
        return cube__nccl_error(e, ns->comms[i], CUBE_STATUS_OK, "%s: NCCL failed on rank %u (%s)",
                                what, i, cube__coll_dev_name(c->ids[i], d, sizeof(d)));
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
void cube__nccl_abort_locked(const cube__nccl_t* nc, cube__comm_t* c,
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
void cube__nccl_remote_names(const cube__comm_t* c, char* buf, size_t size) {
  size_t o = 0;
  buf[0] = 0;
  for (uint32_t i = 0; i < c->n && o + 48 < size; ++i) {
    if (c->local[i]) continue;
    char d[32];
    o += (size_t)snprintf(buf + o, size - o, "%s%s (process %u)", o ? ", " : "",
                          cube__coll_dev_name(c->ids[i], d, sizeof(d)), c->rank_of[i]);
  }
}

//===----------------------------------------------------------------------===//
// Unique ids across processes
//===----------------------------------------------------------------------===//

static void cube__nccl_sleep_ms(unsigned ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Through the file |base|.<hash>.<generation>. The root writes it as a new
 * private temporary file (a fresh name, O_EXCL: nothing that is there is
 * followed or overwritten) renamed into place; the others read it only when
 * it is a regular file of their own user that nobody else may write
 * (platform/private_file.h): the id decides whom the ranks connect to. */
static cube_status_t cube__nccl_id_file(cube__comm_t* c, cube__nccl_state_t* ns,
                                        const char* base, bool root, cube__nccl_uid_t* id,
                                        uint64_t deadline, const char* what) {
  char path[512], tmp[560];
  snprintf(path, sizeof(path), "%s.%016" PRIx64 ".%u", base, c->hash, ns->generation);
  if (root) {
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld.XXXXXX", path, (long)getpid());
    int fd = cube__file_create_private_temp(tmp);
    ssize_t w = fd >= 0 ? write(fd, id, sizeof(*id)) : -1;
    int e = errno;
    if (fd >= 0 && close(fd) != 0 && w == (ssize_t)sizeof(*id)) w = -1;
    if (w != (ssize_t)sizeof(*id) || rename(tmp, path) != 0) {
      if (w == (ssize_t)sizeof(*id)) e = errno;
      if (fd >= 0) unlink(tmp);
      return cube__status_make(
          CUBE_STATUS_UNAVAILABLE,
          "%s: writing the NCCL unique id to %s (CUBE_NCCL_ID_FILE) failed: %s", what, path,
          strerror(e));
    }
    snprintf(ns->id_file, sizeof(ns->id_file), "%s", path);
    return CUBE_OK;
  }
  for (;;) {
    cube__file_refusal_t refusal;
    char why[160];
    int fd = cube__file_open_trusted(path, &refusal, why, sizeof(why));
    if (fd >= 0) {
      ssize_t r = read(fd, id, sizeof(*id));
      close(fd);
      if (r == (ssize_t)sizeof(*id)) return CUBE_OK;
    } else if (refusal != CUBE__FILE_ABSENT) {
      return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                               "%s: the NCCL unique id file %s (CUBE_NCCL_ID_FILE) is refused: "
                               "%s; only a regular file of this user that nobody else may write "
                               "is read (process %u writes it)",
                               what, path, why, c->rank_of[0]);
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
    if (!root) return cube__mpi_recv(tag, &h, id, NULL, c->rank_of[0], deadline, what);
    for (uint32_t k = 0; k < c->rank_count; ++k) {
      if (c->ranks[k] == c->my_rank) continue;
      CUBE_RETURN_IF_ERROR(cube__mpi_send(tag, &h, id, c->ranks[k], deadline, what));
    }
    return CUBE_OK;
  }
  const char* base = cube__option_str(CUBE__OPT_NCCL_ID_FILE);
  if (!base)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "%s: the communicator spans processes; without MPI they exchange "
                             "NCCL's unique id through a file: set CUBE_NCCL_ID_FILE to a path "
                             "every process can read (or start them with mpiexec)",
                             what);
  return cube__nccl_id_file(c, ns, base, root, id, deadline, what);
}

/* The communicators of the local ranks, created in one group when there are
 * none (ns->lock held). |ctx_of[i]|: the context of local rank i. */
cube_status_t cube__nccl_ensure(const cube__nccl_t* nc, const cube__nccl_cu_t* cu,
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
  cfg.blocking = cube__option_bool(CUBE__OPT_NCCL_BLOCKING) ? 1 : 0;
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
                            what, i, cube__coll_dev_name(c->ids[i], d, sizeof(d)));
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

#endif /* CUBE_HAVE_NCCL_TRANSPORT */
