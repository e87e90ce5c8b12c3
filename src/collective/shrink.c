/* Ranks that die: the lost-rank registry and the shrink of a communicator
 * among the ranks still alive (cube_client_shrink_collective; the design is
 * in docs/collectives.md, "A rank that dies").
 *
 * Without a failure detector in MPI (Open MPI 4 has none outside ULFM), a
 * dead rank looks like a late one: the collective that waits for it fails by
 * its deadline (DEADLINE_EXCEEDED naming the rank, mpi_plugin.c). The
 * survivors then shrink: they agree, over point-to-point messages with the
 * same deadline, on who is alive, and never call MPI on the dead ranks in a
 * way that could block (every send and receive is polled against the
 * deadline; a send that never completes is kept by the plugin until exit).
 *
 * Agreement, in rounds. Each rank proposes P, the ranks of the communicator
 * it holds alive (at first: all but those the registry holds lost), sends P
 * to every other member of P and gathers theirs until the deadline. Its next
 * proposal is P intersected with the ranks it heard from and with every
 * proposal it received. It decides when it heard from every other member of
 * P and every proposal equals P. A dead rank costs the round in which it is
 * missed its deadline, the next round agrees at once. Every round waits
 * twice the collective timeout: a survivor whose own collective failed one
 * operation later (the dead rank had answered it) enters the shrink up to one
 * timeout after the others, and each of its rounds ends that much later, so a
 * round of the earlier ranks must outlast the offset (with one timeout a round
 * of the earlier rank could end just before the later rank's proposal for it
 * was sent, leaving the two with different sets). A round ends as soon as
 * every rank it waits for answered, so the longer deadline costs time only
 * when a rank does not answer. A rank that dies during the shrink can leave the
 * survivors with different sets (no agreement protocol tolerates every
 * failure); their next collective then times out and they shrink again.
 *
 * The ranks left out are written to the process-wide registry: from then on a
 * communicator holding one of their devices fails at once with PEER_LOST
 * (cube__coll_lost_check), instead of waiting out the timeout again.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "collective/coll_internal.h"
#include "platform/platform.h"

//===----------------------------------------------------------------------===//
// The registry
//===----------------------------------------------------------------------===//

static pthread_mutex_t g_lost_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool g_any_lost;
static uint8_t* g_lost;        /* [g_lost_n], 1 for a lost rank */
static uint32_t g_lost_n;
static char g_lost_why[320];   /* the shrink that found the first lost ranks */

/* Serialises the shrinks of this process (their messages share tags). */
static pthread_mutex_t g_shrink_lock = PTHREAD_MUTEX_INITIALIZER;

static bool cube__coll_lost_has_locked(uint32_t rank) { return rank < g_lost_n && g_lost[rank]; }

cube_status_t cube__coll_lost_check(const cube__comm_t* c, const char* what) {
  if (!atomic_load_explicit(&g_any_lost, memory_order_acquire)) return CUBE_OK;
  char list[200];
  size_t o = 0;
  uint32_t k = 0;
  list[0] = 0;
  pthread_mutex_lock(&g_lost_lock);
  for (uint32_t i = 0; i < c->rank_count; ++i) {
    if (!cube__coll_lost_has_locked(c->ranks[i])) continue;
    if (o + 16 < sizeof(list))
      o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%u", k ? ", " : "", c->ranks[i]);
    ++k;
  }
  char why[sizeof(g_lost_why)];
  snprintf(why, sizeof(why), "%s", g_lost_why);
  pthread_mutex_unlock(&g_lost_lock);
  if (!k) return CUBE_OK;
  char set[256];
  cube__coll_comm_name(c, set, sizeof(set));
  return cube__status_make(CUBE_STATUS_PEER_LOST,
                           "%s: %s holds devices of rank%s %s, found lost by %s; collectives go "
                           "on among the survivors (the devices cube_client_shrink_collective "
                           "returned)",
                           what, set, k == 1 ? "" : "s", list, why);
}

/* Records the ranks of |c| that |alive| leaves out as lost. */
static void cube__coll_lost_mark(const cube__comm_t* c, const uint8_t* alive, const char* set) {
  pthread_mutex_lock(&g_lost_lock);
  uint32_t need = 0;
  for (uint32_t i = 0; i < c->rank_count; ++i)
    if (!alive[i] && c->ranks[i] + 1 > need) need = c->ranks[i] + 1;
  if (need > g_lost_n) {
    uint8_t* grown = realloc(g_lost, need);
    if (!grown) { /* the registry only speeds failures up: leave it as it is */
      pthread_mutex_unlock(&g_lost_lock);
      return;
    }
    memset(grown + g_lost_n, 0, need - g_lost_n);
    g_lost = grown;
    g_lost_n = need;
  }
  bool any = false;
  for (uint32_t i = 0; i < c->rank_count; ++i)
    if (!alive[i]) {
      g_lost[c->ranks[i]] = 1;
      any = true;
    }
  if (any && !g_lost_why[0])
    snprintf(g_lost_why, sizeof(g_lost_why), "the shrink of %s", set);
  if (any) atomic_store_explicit(&g_any_lost, true, memory_order_release);
  pthread_mutex_unlock(&g_lost_lock);
  if (any) cube__mpi_peer_lost();
}

//===----------------------------------------------------------------------===//
// The shrink
//===----------------------------------------------------------------------===//

/* "0, 1" for the members of |p| (indices into c->ranks, as MPI ranks). */
static const char* cube__coll_rank_list(const cube__comm_t* c, const uint8_t* p, char* buf,
                                        size_t size) {
  size_t o = 0;
  uint32_t k = 0;
  buf[0] = 0;
  for (uint32_t i = 0; i < c->rank_count && o + 16 < size; ++i)
    if (p[i]) o += (size_t)snprintf(buf + o, size - o, "%s%u", k++ ? ", " : "", c->ranks[i]);
  if (!k) snprintf(buf, size, "none");
  return buf;
}

/* The agreement (see the top of the file) over the ranks of |c|; |alive|
 * (rank_count entries) holds the decision. */
static cube_status_t cube__coll_agree(cube__comm_t* c, uint8_t* alive, uint64_t timeout_ns,
                                      const char* what) {
  uint32_t n = c->rank_count;
  uint32_t me = UINT32_MAX;
  for (uint32_t i = 0; i < n; ++i)
    if (c->ranks[i] == c->my_rank) me = i;
  if (me == UINT32_MAX)
    return cube__status_make(CUBE_STATUS_INTERNAL, "%s: this rank (%u) is not in the set", what,
                             c->my_rank);
  pthread_mutex_lock(&g_lost_lock);
  for (uint32_t i = 0; i < n; ++i) alive[i] = !cube__coll_lost_has_locked(c->ranks[i]);
  pthread_mutex_unlock(&g_lost_lock);
  alive[me] = 1;
  pthread_mutex_lock(&c->lock);
  uint64_t epoch = c->shrinks++;
  pthread_mutex_unlock(&c->lock);
  uint32_t* others = calloc(n, sizeof(*others));
  uint32_t* other_at = calloc(n, sizeof(*other_at));
  void** got = calloc(n, sizeof(*got));
  uint8_t* next = calloc(n, 1);
  cube_status_t st = CUBE_OK;
  if (!others || !other_at || !got || !next) {
    st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", what);
    goto done;
  }
  /* A round at most per rank left out, and one to agree; more means ranks
   * that keep proposing larger sets, which cannot happen among ranks that
   * follow these rules. */
  for (uint32_t round = 0;; ++round) {
    if (round > 2 * n + 1) {
      char mine[160];
      st = cube__status_make(CUBE_STATUS_ABORTED,
                             "%s: no agreement after %u rounds (this rank proposes ranks %s)",
                             what, round, cube__coll_rank_list(c, alive, mine, sizeof(mine)));
      goto done;
    }
    uint32_t no = 0;
    for (uint32_t i = 0; i < n; ++i)
      if (alive[i] && i != me) {
        other_at[no] = i;
        others[no++] = c->ranks[i];
      }
    if (no == 0) break; /* alone: nothing to agree on */
    cube__mpi_header_t h = {c->hash,          (epoch << 20) | round, n, CUBE__MPI_KIND_SHRINK, 0, 0,
                            c->local_per_rank, c->my_rank,          0};
    uint64_t wait = 2 * timeout_ns;
    st = cube__mpi_gather((c->hash ^ 0x736872696e6bull) * 4u + 3u, &h, alive, no, others, got,
                          NULL, cube__now_ns() + wait, what);
    if (st) goto done;
    memcpy(next, alive, n);
    bool agreed = true;
    uint32_t excluded_by = UINT32_MAX;
    for (uint32_t j = 0; j < no; ++j) {
      const uint8_t* q = got[j];
      if (!q) {
        next[other_at[j]] = 0; /* did not answer */
        agreed = false;
        continue;
      }
      for (uint32_t i = 0; i < n; ++i) {
        if (!q[i]) next[i] = 0;
        if ((q[i] != 0) != (alive[i] != 0)) agreed = false;
      }
      if (!q[me] && excluded_by == UINT32_MAX) excluded_by = others[j];
    }
    for (uint32_t j = 0; j < no; ++j) {
      cube__coll_scratch_put(got[j]);
      got[j] = NULL;
    }
    if (excluded_by != UINT32_MAX) {
      st = cube__status_make(CUBE_STATUS_ABORTED,
                             "%s: rank %u holds this rank (%u) lost (it did not hear from it "
                             "within CUBE_COLLECTIVE_TIMEOUT); this process is not among the "
                             "survivors",
                             what, excluded_by, c->my_rank);
      goto done;
    }
    memcpy(alive, next, n);
    if (agreed) break;
  }
done:
  if (got)
    for (uint32_t j = 0; j < n; ++j) cube__coll_scratch_put(got[j]);
  free(got);
  free(others);
  free(other_at);
  free(next);
  return st;
}

cube_status_t cube__coll_shrink(const char* fn, size_t count, const cube_device_id_t* devices,
                                cube_device_id_t self, size_t* out_count,
                                cube_device_id_t* out_devices) {
  cube__comm_t* c;
  uint32_t rank;
  CUBE_RETURN_IF_ERROR(cube__coll_comm_find(fn, count, devices, self, &c, &rank));
  char set[256], what[320];
  cube__coll_comm_name(c, set, sizeof(set));
  snprintf(what, sizeof(what), "%s: shrinking %s", fn, set);
  uint8_t* alive = calloc(c->rank_count, 1);
  if (!alive) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", what);
  cube_status_t st = CUBE_OK;
  if (c->rank_count > 1) {
    cube__coll_world_t w;
    st = cube__coll_world(&w);
    if (!st && !w.mpi)
      st = cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "%s: the set spans processes and MPI is not in use: the survivors "
                             "agree through MPI messages (start the processes with mpiexec)",
                             what);
    uint64_t timeout_ns = 0;
    if (!st) st = cube__coll_timeout_ns(&timeout_ns);
    if (!st) {
      pthread_mutex_lock(&g_shrink_lock);
      st = cube__coll_agree(c, alive, timeout_ns, what);
      pthread_mutex_unlock(&g_shrink_lock);
    }
  } else {
    alive[0] = 1;
  }
  if (st) {
    free(alive);
    return st;
  }
  cube__coll_lost_mark(c, alive, set);
  size_t m = 0;
  for (uint32_t i = 0; i < c->n; ++i) {
    uint32_t k = 0;
    while (c->ranks[k] != c->rank_of[i]) ++k; /* c->ranks holds every rank_of */
    if (alive[k]) out_devices[m++] = c->ids[i];
  }
  free(alive);
  cube__comm_t* s;
  st = cube__coll_comm_get(fn, m, out_devices, self, &s, &rank);
  if (st) return st;
  *out_count = m;
  return CUBE_OK;
}
