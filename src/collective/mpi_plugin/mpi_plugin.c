/* The MPI transport of collectives, as a plugin (libcube_mpi.so) that libcube
 * loads only in processes that want MPI (src/collective/mpi.c), so that
 * libcube itself never links MPI. Its interface, and why it calls nothing of
 * libcube but the host table it is given: src/collective/mpi_abi.h.
 *
 * One rank per process, point-to-point messages on MPI_COMM_WORLD (no
 * sub-communicator, whose creation would block without a deadline), polled so
 * that every wait has one.
 *
 * Every message is a cube__mpi_header_t followed by the payload. The tag is
 * derived from the communicator (and, for send/recv, the direction), so
 * operations of different communicators never match each other; within one,
 * MPI's non-overtaking order and the header's sequence number keep them
 * apart: a message left over from an operation that timed out here (older
 * sequence) is received and dropped.
 *
 * Every MPI call is made under one mutex, so MPI_THREAD_SERIALIZED is enough
 * (cube asks for MPI_THREAD_MULTIPLE when it starts MPI itself).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mpi.h>

#include "collective/mpi_abi.h"

//===----------------------------------------------------------------------===//
// What the host lends
//===----------------------------------------------------------------------===//

static const cube__mpi_host_t* g_host;

static cube_status_t cube__mpi_status(cube_status_code_t code, const char* fmt, ...)
    CUBE_PRINTF(2, 3);
static cube_status_t cube__mpi_status(cube_status_code_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cube_status_t st = g_host->status_makev(code, fmt, ap);
  va_end(ap);
  return st;
}
#define CUBE__MPI_INVALID(...) cube__mpi_status(CUBE_STATUS_INVALID_ARGUMENT, __VA_ARGS__)

static void* cube__mpi_scratch_get(size_t size) { return g_host->scratch_get(size); }
static void cube__mpi_scratch_put(void* p) { g_host->scratch_put(p); }
static uint64_t cube__mpi_now_ns(void) { return g_host->now_ns(); }

static inline void cube__mpi_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

//===----------------------------------------------------------------------===//
// State
//===----------------------------------------------------------------------===//

static pthread_mutex_t g_mpi_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_tag_ub = 32767;

/* Sends that did not complete by their deadline, and receives that could not
 * be cancelled (matched by a message whose sender died in the middle of it:
 * MPI_Wait on them never returns): their buffers stay alive until MPI is
 * done with them. */
typedef struct cube__mpi_zombie {
  struct cube__mpi_zombie* next;
  MPI_Request* reqs;
  int count;
  void* msg;
  bool recv; /* at exit its buffer is not freed: MPI may still write into it */
} cube__mpi_zombie_t;
static cube__mpi_zombie_t* g_zombies;
/* Set by peer_lost (under g_mpi_lock): no MPI_Finalize at exit. */
static bool g_peer_lost;

/* Between two polls that found nothing. MPI progresses only inside our calls
 * and a large message needs many, so poll without giving the core away for
 * the first 500 us of idleness (a yield on a loaded machine costs a whole
 * time slice), then sleep 20 us between polls. |idle_since| is 0 after
 * progress. */
static void cube__mpi_nap(uint64_t* idle_since) {
  uint64_t now = cube__mpi_now_ns();
  if (*idle_since == 0) *idle_since = now;
  if (now - *idle_since < 500000) {
    cube__mpi_cpu_relax();
    return;
  }
  struct timespec ts = {0, 20000};
  nanosleep(&ts, NULL);
}

/* g_mpi_lock held. */
static void cube__mpi_reap_locked(bool force) {
  for (cube__mpi_zombie_t** p = &g_zombies; *p;) {
    cube__mpi_zombie_t* z = *p;
    int done = 0;
    MPI_Testall(z->count, z->reqs, &done, MPI_STATUSES_IGNORE);
    if (!done && force) {
      for (int i = 0; i < z->count; ++i)
        if (z->reqs[i] != MPI_REQUEST_NULL) MPI_Request_free(&z->reqs[i]);
      done = 1;
    }
    if (done) {
      *p = z->next;
      free(z->reqs);
      if (force && z->recv)
        ; /* left to the process's end: a dead sender's transfer may be half done */
      else if (force)
        g_host->scratch_free(z->msg);
      else
        cube__mpi_scratch_put(z->msg);
      free(z);
    } else {
      p = &z->next;
    }
  }
}

/* The buffers of operations still in flight at exit (a send to a rank that
 * never took it), taken off their zombies before the reap frees the
 * requests: MPI goes on with them inside MPI_Finalize (over TCP it sends from
 * them there; found across two hosts by ASan,
 * mpi_2hosts.timeout_names_missing_rank), so they are freed only once it has
 * returned. g_mpi_lock held. Without room for the list they are left to the
 * process's end. */
static void** cube__mpi_take_buffers_locked(size_t* out_n) {
  size_t n = 0, k = 0;
  for (cube__mpi_zombie_t* z = g_zombies; z; z = z->next) ++n;
  void** taken = n ? calloc(n, sizeof(*taken)) : NULL;
  for (cube__mpi_zombie_t* z = g_zombies; z; z = z->next) {
    if (taken) taken[k++] = z->msg;
    z->msg = NULL;
  }
  *out_n = k;
  return taken;
}

/* Frees what cube__mpi_take_buffers_locked took once MPI is finalized; a
 * process that exits without MPI_Finalize leaves them to its end. */
static void cube__mpi_free_taken(void** taken, size_t n) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin)
    for (size_t i = 0; i < n; ++i) g_host->scratch_free(taken[i]);
  free(taken);
}

/* Registered from the plugin, which is loaded RTLD_NODELETE: it runs at exit,
 * after the program's own atexit handlers registered later. */
static void cube__mpi_atexit(void) {
  pthread_mutex_lock(&g_mpi_lock);
  size_t taken_n = 0;
  void** taken = cube__mpi_take_buffers_locked(&taken_n);
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) {
    cube__mpi_reap_locked(true);
    /* After a rank died, Open MPI 4.1's MPI_Finalize fences with every
     * process of the job, the dead one included, and can wait forever (seen
     * in mpi.rank_killed_mid_all_reduce about once in ten runs): the process
     * exits without it, which a job launched with --enable-recovery
     * accepts. */
    if (!g_peer_lost) MPI_Finalize();
  }
  pthread_mutex_unlock(&g_mpi_lock);
  cube__mpi_free_taken(taken, taken_n);
}

static void cube__mpi_peer_lost(void) {
  pthread_mutex_lock(&g_mpi_lock);
  g_peer_lost = true;
  pthread_mutex_unlock(&g_mpi_lock);
}

//===----------------------------------------------------------------------===//
// Start
//===----------------------------------------------------------------------===//

static cube_status_t cube__mpi_start(uint32_t* out_rank, uint32_t* out_ranks) {
  *out_rank = 0;
  *out_ranks = 1;
  pthread_mutex_lock(&g_mpi_lock);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (fin) {
    pthread_mutex_unlock(&g_mpi_lock);
    return cube__mpi_status(CUBE_STATUS_FAILED_PRECONDITION,
                            "collectives: MPI was already finalized in this process");
  }
  if (!init) {
    int provided = 0;
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) {
      pthread_mutex_unlock(&g_mpi_lock);
      return cube__mpi_status(CUBE_STATUS_UNAVAILABLE,
                              "collectives: MPI_Init_thread failed (error %d)", rc);
    }
    atexit(cube__mpi_atexit);
  }
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_SERIALIZED) {
    pthread_mutex_unlock(&g_mpi_lock);
    return cube__mpi_status(CUBE_STATUS_FAILED_PRECONDITION,
                            "collectives: MPI runs at thread level %d; cube calls MPI from its "
                            "device runners and needs MPI_THREAD_SERIALIZED (%d) or more",
                            level, MPI_THREAD_SERIALIZED);
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1, flag = 0;
  int* ub = NULL;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  if (flag && ub && *ub > 1000) g_tag_ub = *ub;
  pthread_mutex_unlock(&g_mpi_lock);
  *out_rank = (uint32_t)rank;
  *out_ranks = (uint32_t)size;
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Messages
//===----------------------------------------------------------------------===//

static int cube__mpi_tag(uint64_t key) { return 1 + (int)(key % (uint64_t)(g_tag_ub - 1)); }

static void* cube__mpi_message(const cube__mpi_header_t* h, const void* payload, size_t* out_size) {
  size_t n = sizeof(*h) + h->bytes;
  char* m = cube__mpi_scratch_get(n);
  if (!m) return NULL;
  memcpy(m, h, sizeof(*h));
  if (h->bytes) memcpy(m + sizeof(*h), payload, h->bytes);
  *out_size = n;
  return m;
}

/* A receive posted before the matching send can arrive (so the data lands in
 * its buffer directly, not in MPI's unexpected-message queue), sized for the
 * message this rank expects: header + bytes. */
typedef struct cube__mpi_rx {
  MPI_Request req;
  char* buf;
  size_t cap;
  int rank, tag;
  bool active;
} cube__mpi_rx_t;

static cube_status_t cube__mpi_rx_post(cube__mpi_rx_t* rx, int rank, int tag, size_t cap,
                                       const char* what) {
  if (!rx->buf) {
    rx->buf = cube__mpi_scratch_get(cap);
    if (!rx->buf)
      return cube__mpi_status(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory for %zu bytes", what,
                              cap);
  }
  rx->cap = cap;
  rx->rank = rank;
  rx->tag = tag;
  pthread_mutex_lock(&g_mpi_lock);
  int rc = MPI_Irecv(rx->buf, (int)cap, MPI_BYTE, rank, tag, MPI_COMM_WORLD, &rx->req);
  pthread_mutex_unlock(&g_mpi_lock);
  if (rc != MPI_SUCCESS)
    return cube__mpi_status(CUBE_STATUS_INTERNAL, "%s: MPI_Irecv from rank %d failed (%d)", what,
                            rank, rc);
  rx->active = true;
  return CUBE_OK;
}

/* Tests |rx|: *out_ready when it holds a message of the current operation
 * (*out_size bytes); a message of an older operation is dropped and the
 * receive posted again. */
static cube_status_t cube__mpi_rx_poll(cube__mpi_rx_t* rx, const cube__mpi_header_t* want,
                                       bool* out_ready, size_t* out_size, const char* what) {
  *out_ready = false;
  if (!rx->active) return CUBE_OK;
  pthread_mutex_lock(&g_mpi_lock);
  int flag = 0, n = 0;
  MPI_Status status;
  int rc = MPI_Test(&rx->req, &flag, &status);
  if (rc == MPI_SUCCESS && flag) MPI_Get_count(&status, MPI_BYTE, &n);
  pthread_mutex_unlock(&g_mpi_lock);
  if (rc != MPI_SUCCESS) {
    rx->active = false;
    int cls = rc;
    MPI_Error_class(rc, &cls);
    if (cls == MPI_ERR_TRUNCATE)
      return CUBE__MPI_INVALID("%s: participants disagree: rank %d sent more than the %zu bytes "
                               "this rank (%u) expects",
                               what, rx->rank, rx->cap - sizeof(cube__mpi_header_t),
                               want->sender_rank);
    return cube__mpi_status(CUBE_STATUS_INTERNAL,
                            "%s: receiving from rank %d failed (MPI error %d)", what, rx->rank,
                            rc);
  }
  if (!flag) return CUBE_OK;
  rx->active = false;
  cube__mpi_header_t h;
  if ((size_t)n < sizeof(h))
    return cube__mpi_status(CUBE_STATUS_INTERNAL, "%s: rank %d sent a %d-byte message", what,
                            rx->rank, n);
  memcpy(&h, rx->buf, sizeof(h));
  if (h.comm_hash == want->comm_hash && h.sequence < want->sequence)
    /* Left over from an operation that timed out here. */
    return cube__mpi_rx_post(rx, rx->rank, rx->tag, rx->cap, what);
  *out_ready = true;
  *out_size = (size_t)n;
  return CUBE_OK;
}

/* Lets go of |rx|: cancelled if it is still posted. A receive that the
 * cancel cannot end (already matched by a message in transit, whose sender
 * may be dead: MPI_Wait would never return) becomes a zombie with its
 * buffer, reaped once MPI completes it. */
static void cube__mpi_rx_release(cube__mpi_rx_t* rx) {
  if (rx->active) {
    pthread_mutex_lock(&g_mpi_lock);
    MPI_Cancel(&rx->req);
    int done = 0;
    MPI_Test(&rx->req, &done, MPI_STATUS_IGNORE);
    if (!done) {
      cube__mpi_zombie_t* z = calloc(1, sizeof(*z));
      MPI_Request* copy = malloc(sizeof(*copy));
      if (z && copy) {
        copy[0] = rx->req;
        z->reqs = copy;
        z->count = 1;
        z->msg = rx->buf;
        z->recv = true;
        z->next = g_zombies;
        g_zombies = z;
      } else {
        free(z);
        free(copy);
        MPI_Request_free(&rx->req); /* the buffer is leaked on purpose: MPI may write it */
      }
      rx->buf = NULL;
    }
    pthread_mutex_unlock(&g_mpi_lock);
    rx->active = false;
  }
  cube__mpi_scratch_put(rx->buf);
  rx->buf = NULL;
}

static const char* cube__mpi_what_of(const cube__mpi_header_t* h) {
  return h->kind ? "data" : g_host->reduce_op_name(h->op);
}

/* Compares a received header with ours. */
static cube_status_t cube__mpi_check(const cube__mpi_header_t* mine, const cube__mpi_header_t* h,
                                     size_t size, uint32_t rank, const char* what) {
  if (h->comm_hash != mine->comm_hash || h->sequence != mine->sequence || h->kind != mine->kind)
    return cube__mpi_status(CUBE_STATUS_INTERNAL,
                            "%s: rank %u sent operation #%" PRIu64 " of another communicator or "
                            "kind (the ranks do not call the same operations in the same order)",
                            what, rank, h->sequence);
  if (h->bytes != mine->bytes || h->dtype != mine->dtype || h->op != mine->op)
    return CUBE__MPI_INVALID("%s: participants disagree: rank %u gives %" PRIu64 " bytes of %s "
                             "%s, this rank (%u) %" PRIu64 " bytes of %s %s",
                             what, rank, h->bytes, g_host->dtype_name(h->dtype),
                             cube__mpi_what_of(h), mine->sender_rank, mine->bytes,
                             g_host->dtype_name(mine->dtype), cube__mpi_what_of(mine));
  if (h->local_cpu != mine->local_cpu)
    return CUBE__MPI_INVALID("%s: rank %u has %u devices per rank, this rank %u (give every rank "
                             "the same number: CUBE_CPU_DEVICES, or the GPUs it sees; global ids "
                             "depend on it)",
                             what, rank, h->local_cpu, mine->local_cpu);
  if (size != sizeof(*h) + h->bytes)
    return cube__mpi_status(CUBE_STATUS_INTERNAL, "%s: rank %u sent %zu bytes for %" PRIu64, what,
                            rank, size, h->bytes);
  return CUBE_OK;
}

/* Waits for |reqs| until |deadline_ns|; on timeout they become zombies with
 * |msg| (then owned by the zombie list). True if they completed. */
static bool cube__mpi_wait_sends(MPI_Request* reqs, int count, void* msg, uint64_t deadline_ns) {
  uint64_t idle = 0;
  for (;;) {
    pthread_mutex_lock(&g_mpi_lock);
    int done = 0;
    MPI_Testall(count, reqs, &done, MPI_STATUSES_IGNORE);
    if (done || cube__mpi_now_ns() >= deadline_ns) {
      if (!done) {
        cube__mpi_zombie_t* z = calloc(1, sizeof(*z));
        MPI_Request* copy = malloc((size_t)count * sizeof(*copy));
        if (z && copy) {
          memcpy(copy, reqs, (size_t)count * sizeof(*copy));
          z->reqs = copy;
          z->count = count;
          z->msg = msg;
          z->next = g_zombies;
          g_zombies = z;
        } else {
          for (int i = 0; i < count; ++i)
            if (reqs[i] != MPI_REQUEST_NULL) MPI_Request_free(&reqs[i]);
          free(z);
          free(copy);
          msg = NULL; /* leaked on purpose: MPI may still read it */
        }
      } else {
        cube__mpi_scratch_put(msg);
      }
      cube__mpi_reap_locked(false);
      pthread_mutex_unlock(&g_mpi_lock);
      return done != 0;
    }
    pthread_mutex_unlock(&g_mpi_lock);
    cube__mpi_nap(&idle);
  }
}

/* exchange and gather: |partial| (gather) leaves the ranks that did not
 * answer by the deadline with a NULL entry instead of failing. */
static cube_status_t cube__mpi_exchange_some(uint64_t tag_key, const cube__mpi_header_t* header,
                                             const void* partial, uint32_t count,
                                             const uint32_t* ranks, void** out_received,
                                             uint32_t* out_flags, uint64_t deadline_ns,
                                             const char* what, bool some) {
  int tag = cube__mpi_tag(tag_key);
  size_t msg_size = 0;
  void* msg = cube__mpi_message(header, partial, &msg_size);
  MPI_Request* reqs = calloc(count ? count : 1, sizeof(*reqs));
  bool* got = calloc(count ? count : 1, sizeof(bool));
  cube__mpi_rx_t* rx = calloc(count ? count : 1, sizeof(*rx));
  if (!msg || !reqs || !got || !rx) {
    cube__mpi_scratch_put(msg);
    free(reqs);
    free(got);
    free(rx);
    return cube__mpi_status(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", what);
  }
  cube_status_t st = CUBE_OK;
  for (uint32_t i = 0; i < count; ++i) {
    out_received[i] = NULL;
    if (out_flags) out_flags[i] = 0;
  }
  for (uint32_t i = 0; !st && i < count; ++i)
    st = cube__mpi_rx_post(&rx[i], (int)ranks[i], tag, msg_size, what);
  pthread_mutex_lock(&g_mpi_lock);
  for (uint32_t i = 0; i < count; ++i) {
    reqs[i] = MPI_REQUEST_NULL;
    if (st) continue;
    int rc = MPI_Isend(msg, (int)msg_size, MPI_BYTE, (int)ranks[i], tag, MPI_COMM_WORLD, &reqs[i]);
    if (rc != MPI_SUCCESS)
      st = cube__mpi_status(CUBE_STATUS_INTERNAL, "%s: MPI_Isend to rank %u failed (%d)", what,
                            ranks[i], rc);
  }
  pthread_mutex_unlock(&g_mpi_lock);
  uint32_t have = 0;
  uint64_t idle = 0;
  while (!st && have < count) {
    bool progress = false;
    for (uint32_t i = 0; !st && i < count; ++i) {
      if (got[i]) continue;
      bool ready = false;
      size_t n = 0;
      st = cube__mpi_rx_poll(&rx[i], header, &ready, &n, what);
      if (st || !ready) continue;
      cube__mpi_header_t h;
      memcpy(&h, rx[i].buf, sizeof(h));
      st = cube__mpi_check(header, &h, n, ranks[i], what);
      if (!st) {
        out_received[i] = cube__mpi_scratch_get(h.bytes);
        if (!out_received[i])
          st = cube__mpi_status(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", what);
        else
          memcpy(out_received[i], rx[i].buf + sizeof(h), h.bytes);
        if (out_flags) out_flags[i] = h.flags;
      }
      got[i] = true;
      ++have;
      progress = true;
    }
    if (st || have == count) break;
    if (cube__mpi_now_ns() >= deadline_ns) {
      if (some) break;
      char missing[256];
      size_t o = 0;
      uint32_t k = 0;
      for (uint32_t i = 0; i < count && o + 16 < sizeof(missing); ++i)
        if (!got[i])
          o += (size_t)snprintf(missing + o, sizeof(missing) - o, "%s%u", k++ ? ", " : "",
                                ranks[i]);
      st = cube__mpi_status(CUBE_STATUS_DEADLINE_EXCEEDED,
                            "%s: rank%s %s did not join within the deadline "
                            "(CUBE_COLLECTIVE_TIMEOUT); the operation is abandoned on this rank",
                            what, k == 1 ? "" : "s", missing);
      break;
    }
    if (progress)
      idle = 0;
    else
      cube__mpi_nap(&idle);
  }
  for (uint32_t i = 0; i < count; ++i) cube__mpi_rx_release(&rx[i]);
  free(rx);
  /* Our sends: wait for them until the deadline, then let them go. */
  uint64_t now = cube__mpi_now_ns();
  cube__mpi_wait_sends(reqs, (int)count, msg, st ? now : (deadline_ns > now ? deadline_ns : now));
  free(reqs);
  free(got);
  if (st)
    for (uint32_t i = 0; i < count; ++i) {
      cube__mpi_scratch_put(out_received[i]);
      out_received[i] = NULL;
    }
  return st;
}

static cube_status_t cube__mpi_exchange(uint64_t tag_key, const cube__mpi_header_t* header,
                                        const void* partial, uint32_t count,
                                        const uint32_t* ranks, void** out_received,
                                        uint32_t* out_flags, uint64_t deadline_ns,
                                        const char* what) {
  return cube__mpi_exchange_some(tag_key, header, partial, count, ranks, out_received, out_flags,
                                 deadline_ns, what, false);
}

static cube_status_t cube__mpi_gather(uint64_t tag_key, const cube__mpi_header_t* header,
                                      const void* partial, uint32_t count, const uint32_t* ranks,
                                      void** out_received, uint32_t* out_flags,
                                      uint64_t deadline_ns, const char* what) {
  return cube__mpi_exchange_some(tag_key, header, partial, count, ranks, out_received, out_flags,
                                 deadline_ns, what, true);
}

static cube_status_t cube__mpi_send(uint64_t tag_key, const cube__mpi_header_t* header,
                                    const void* src, uint32_t rank, uint64_t deadline_ns,
                                    const char* what) {
  int tag = cube__mpi_tag(tag_key);
  size_t n = 0;
  void* msg = cube__mpi_message(header, src, &n);
  if (!msg) return cube__mpi_status(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", what);
  MPI_Request req = MPI_REQUEST_NULL;
  pthread_mutex_lock(&g_mpi_lock);
  int rc = MPI_Isend(msg, (int)n, MPI_BYTE, (int)rank, tag, MPI_COMM_WORLD, &req);
  pthread_mutex_unlock(&g_mpi_lock);
  if (rc != MPI_SUCCESS) {
    cube__mpi_scratch_put(msg);
    return cube__mpi_status(CUBE_STATUS_INTERNAL, "%s: MPI_Isend to rank %u failed (%d)", what,
                            rank, rc);
  }
  if (!cube__mpi_wait_sends(&req, 1, msg, deadline_ns))
    return cube__mpi_status(CUBE_STATUS_DEADLINE_EXCEEDED,
                            "%s: the receiver (rank %u) did not join within the deadline "
                            "(CUBE_COLLECTIVE_TIMEOUT)",
                            what, rank);
  return CUBE_OK;
}

static cube_status_t cube__mpi_recv(uint64_t tag_key, const cube__mpi_header_t* header,
                                    void* dst, uint32_t* out_flags, uint32_t rank,
                                    uint64_t deadline_ns, const char* what) {
  if (out_flags) *out_flags = 0;
  int tag = cube__mpi_tag(tag_key);
  cube__mpi_rx_t rx;
  memset(&rx, 0, sizeof(rx));
  cube_status_t st = cube__mpi_rx_post(&rx, (int)rank, tag, sizeof(*header) + header->bytes, what);
  uint64_t idle = 0;
  while (!st) {
    bool ready = false;
    size_t n = 0;
    st = cube__mpi_rx_poll(&rx, header, &ready, &n, what);
    if (st) break;
    if (ready) {
      cube__mpi_header_t h;
      memcpy(&h, rx.buf, sizeof(h));
      st = cube__mpi_check(header, &h, n, rank, what);
      if (!st && h.bytes) memcpy(dst, rx.buf + sizeof(h), h.bytes);
      if (!st && out_flags) *out_flags = h.flags;
      break;
    }
    if (cube__mpi_now_ns() >= deadline_ns) {
      st = cube__mpi_status(CUBE_STATUS_DEADLINE_EXCEEDED,
                            "%s: the sender (rank %u) did not join within the deadline "
                            "(CUBE_COLLECTIVE_TIMEOUT)",
                            what, rank);
      break;
    }
    cube__mpi_nap(&idle);
  }
  cube__mpi_rx_release(&rx);
  return st;
}

//===----------------------------------------------------------------------===//
// Entry point
//===----------------------------------------------------------------------===//

static const cube__mpi_plugin_t g_plugin = {
    .abi = CUBE__MPI_PLUGIN_ABI,
    .size = sizeof(cube__mpi_plugin_t),
    .start = cube__mpi_start,
    .exchange = cube__mpi_exchange,
    .gather = cube__mpi_gather,
    .send = cube__mpi_send,
    .recv = cube__mpi_recv,
    .peer_lost = cube__mpi_peer_lost,
};

/* The one symbol the plugin exports (the build hides every other). Its type
 * is cube__mpi_plugin_open_fn. */
__attribute__((visibility("default"))) const cube__mpi_plugin_t* cube_mpi_plugin_open(
    uint32_t abi, const cube__mpi_host_t* host, char* why, size_t why_size);

const cube__mpi_plugin_t* cube_mpi_plugin_open(uint32_t abi, const cube__mpi_host_t* host,
                                               char* why, size_t why_size) {
  if (abi != CUBE__MPI_PLUGIN_ABI || !host || host->abi != abi ||
      host->size < sizeof(cube__mpi_host_t)) {
    snprintf(why, why_size,
             "the plugin speaks interface version %u, the library %u (host table of %u bytes, "
             "%zu expected): install libcube and libcube_mpi.so from the same build",
             CUBE__MPI_PLUGIN_ABI, abi, host ? host->size : 0u, sizeof(cube__mpi_host_t));
    return NULL;
  }
  /* Set once, before any use: the loader opens the plugin under its own
   * once-guard. */
  g_host = host;
  return &g_plugin;
}
