/* A rank killed in the middle of a sequence of all_reduces: run by
 * tests/mpi/rank_lost.sh under `mpiexec -np 3 --enable-recovery` (Open MPI
 * then lets the job go on when a process dies), one CPU device per rank.
 *
 * Every rank runs STEPS all_reduces (i64 sum of random data of an odd length
 * generated from the seed, the step and the rank, so every rank can compute
 * the reference). The victim (chosen by the seed) queues its all_reduce of
 * step KILL, waits a random few hundred microseconds and raises SIGKILL: it
 * dies before, during or after its messages. The survivors must get a status
 * naming it within the collective timeout (CUBE_TEST_RANK_LOST_TIMEOUT
 * seconds), shrink to the two of them, agree where to resume (an all_reduce
 * of MIN of their step: a survivor that the victim still answered is one
 * step ahead), and finish the steps with correct sums over the two. Each
 * survivor that did all of it without a failed check writes
 * $CUBE_TEST_RANK_LOST_DIR/survivor.<rank> ("victim <v> steps <n>"); the
 * script requires both. Without MPI, or not 3 ranks, the case skips (77).
 *
 * rank_killed_survivor_shrinks_late: the same, and the higher survivor
 * enters its shrink 1.6 timeouts after the other survivor entered its own,
 * as one whose collective the victim still answered (it failed one
 * operation later) can: the other survivor must still hear each of its
 * rounds (a round of one timeout did not, and the two decided different
 * sets). The offset is measured from the other's entry (it writes the time,
 * CLOCK_MONOTONIC, into $CUBE_TEST_RANK_LOST_DIR/shrink.<rank>; the ranks
 * share one host), not from the late one's own failure: a late survivor that
 * is also a step ahead would otherwise be up to 2.6 timeouts late, past the
 * two timeouts the shrink's rounds wait (seen once under TSan). */
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "cube/cube.h"

#ifdef CUBE_TEST_MPI_PLUGIN
__attribute__((constructor)) static void default_mpi_plugin(void) {
  setenv("CUBE_MPI_PLUGIN", CUBE_TEST_MPI_PLUGIN, 0);
}
#endif

enum { STEPS = 12 };

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The time (now_ms) a survivor entered its shrink, for the late case:
 * written to a temporary and renamed into place, so a reader sees all of it
 * or nothing. */
static void note_shrink_entry(const char* dir, uint32_t rank) {
  char path[4096], tmp[4200];
  snprintf(path, sizeof(path), "%s/shrink.%u", dir, rank);
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  FILE* f = fopen(tmp, "w");
  if (!f) return;
  fprintf(f, "%" PRIu64 "\n", now_ms());
  if (fclose(f) == 0) rename(tmp, path);
}

static bool read_shrink_entry(const char* dir, uint32_t rank, uint64_t* out) {
  char path[4096];
  snprintf(path, sizeof(path), "%s/shrink.%u", dir, rank);
  FILE* f = fopen(path, "r");
  if (!f) return false;
  unsigned long long v = 0;
  bool ok = fscanf(f, "%llu", &v) == 1 && v != 0;
  fclose(f);
  if (ok) *out = (uint64_t)v;
  return ok;
}

static cube_backend_t g_backend = CUBE_BACKEND_CPU;

/* Device |i| of the case's backend (one per rank: global id = rank). */
static cube_device_id_t dev(uint32_t i) {
  cube_device_id_t d = {g_backend, i};
  return d;
}

static void gen(int64_t* p, size_t n, uint64_t seed, uint32_t step, uint32_t rank) {
  uint64_t s = seed ^ ((uint64_t)step << 40) ^ ((uint64_t)rank << 56) ^ 0x51ed;
  for (size_t i = 0; i < n; ++i) p[i] = (int64_t)cube_test_rand(&s);
}

/* True when |msg| lists rank |r| among those that did not join / were lost:
 * "rank 2 did not join", "ranks 1, 2 did not join", "rank 2, found lost". */
static bool names_rank(const char* msg, uint32_t r) {
  char one[32];
  snprintf(one, sizeof(one), "rank %u ", r);
  if (strstr(msg, one)) return true;
  snprintf(one, sizeof(one), "rank %u,", r);
  if (strstr(msg, one)) return true;
  const char* p = strstr(msg, "ranks ");
  while (p) {
    p += 6;
    for (;;) {
      char* end;
      unsigned long v = strtoul(p, &end, 10);
      if (end == p) break;
      if (v == r) return true;
      if (end[0] != ',' || end[1] != ' ') break;
      p = end + 2;
    }
    p = strstr(p, "ranks ");
  }
  return false;
}

/* One all_reduce (i64 sum) of step |step| over |set|: queued, synced, read
 * into |out|. The status of the whole, *out_ms its time. */
/* The start of the last all_reduce_step (now_ms: CLOCK_MONOTONIC, the same
 * on every rank of one host), printed with each step after a shrink so that
 * a failure shows which survivor came late. */
static uint64_t g_step_t0;

static cube_status_t all_reduce_step(cube_client_t* c, const int64_t* data, size_t n,
                                     const cube_device_id_t* set, size_t set_n,
                                     cube_reduce_op_t op, int64_t* out, bool die,
                                     uint64_t seed, uint64_t* out_ms) {
  uint64_t t0 = now_ms();
  g_step_t0 = t0;
  cube_handle_t h = CUBE_HANDLE_NULL;
  cube_status_t s = cube_client_create_from_slice(c, data, n * sizeof(int64_t), &h);
  if (!s) s = cube_client_all_reduce(c, h, h, CUBE_DTYPE_I64, set_n, set, op);
  if (die) {
    /* In the middle of it: the runner may be sending, receiving, or not
     * have started. */
    struct timespec ts = {0, (long)(seed % 400) * 1000};
    nanosleep(&ts, NULL);
    raise(SIGKILL);
  }
  if (!s) s = cube_client_sync_collective(c);
  cube_bytes_t* b = NULL;
  if (!s) s = cube_client_read_one(c, h, &b);
  if (!s) memcpy(out, cube_bytes_const_data(b), n * sizeof(int64_t));
  cube_bytes_release(b);
  cube_handle_release(h);
  *out_ms = now_ms() - t0;
  return s;
}

static void rank_killed(bool nccl, bool late) {
  if (nccl) {
#if defined(CUBE_MOCK_CUDA_PATH) && defined(CUBE_MOCK_NCCL_PATH)
    /* One GPU of the mock driver per rank, NCCL the mock (parts between
     * processes through files in CUBE_MOCK_NCCL_DIR). */
    setenv("CUBE_CUDA_DRIVER", CUBE_MOCK_CUDA_PATH, 1);
    setenv("CUBE_NCCL_LIBRARY", CUBE_MOCK_NCCL_PATH, 1);
    setenv("CUBE_MOCK_CUDA_DEVICES", "1", 1);
    const char* d = getenv("CUBE_TEST_RANK_LOST_DIR");
    if (d) setenv("CUBE_MOCK_NCCL_DIR", d, 1);
    g_backend = CUBE_BACKEND_CUDA;
#else
    CUBE_SKIP("the mock CUDA driver and NCCL are not built");
#endif
  }
  setenv("CUBE_CPU_DEVICES", "1", 1);
  setenv("CUBE_DEVICE_QUEUE", "threaded", 1);
  uint32_t rank = 0, ranks = 1;
  cube_status_t ws = cube_collective_world(&rank, &ranks, NULL);
  if (ws) {
    fprintf(stderr, "%s\n", cube_status_message(ws));
    cube_status_free(ws);
    CUBE_SKIP("no MPI world");
  }
  if (ranks != 3) CUBE_SKIP("not 3 MPI ranks (%u; launched by rank_lost.sh?)", ranks);
  const char* dir = getenv("CUBE_TEST_RANK_LOST_DIR");
  const char* seed_s = getenv("CUBE_TEST_SEED");
  const char* tmo_s = getenv("CUBE_TEST_RANK_LOST_TIMEOUT");
  REQUIRE(dir && seed_s && tmo_s);
  uint64_t seed = strtoull(seed_s, NULL, 10);
  uint64_t timeout_ms = strtoull(tmo_s, NULL, 10) * 1000u;
  REQUIRE(timeout_ms > 0);
  REQUIRE_OK(cube_option_set("CUBE_COLLECTIVE_TIMEOUT", tmo_s));
  if (nccl) {
    const char* t = cube_collective_transport(CUBE_BACKEND_CUDA, NULL);
    REQUIRE(t && strcmp(t, "nccl") == 0);
  }
  uint32_t victim = (uint32_t)((seed >> 7) % 3);
  uint32_t kill_step = 2 + (uint32_t)((seed >> 11) % 6);
  size_t n = 1001 + (size_t)((seed >> 17) % 4000); /* odd sizes, a few KiB to 40 KiB */
  fprintf(stderr, "rank %u: seed %" PRIu64 ", victim %u at step %u, %zu elements, %s\n", rank,
          seed, victim, kill_step, n, nccl ? "cuda (mock) through nccl (mock)" : "cpu");

  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(dev(0), &c)); /* local id; <rank> globally */
  int64_t* data = malloc(n * sizeof(int64_t));
  int64_t* got = malloc(n * sizeof(int64_t));
  int64_t* other = malloc(n * sizeof(int64_t));
  REQUIRE(data && got && other);
  cube_device_id_t set[3] = {dev(0), dev(1), dev(2)};
  size_t set_n = 3;
  const cube_device_id_t full[3] = {dev(0), dev(1), dev(2)};
  bool shrunk = false;
  uint32_t done_steps = 0;
  for (uint32_t step = 0; step < STEPS;) {
    gen(data, n, seed, step, rank);
    uint64_t ms = 0;
    bool die = rank == victim && step == kill_step;
    cube_status_t s =
        all_reduce_step(c, data, n, set, set_n, CUBE_REDUCE_SUM, got, die, seed, &ms);
    if (!s) {
      /* The reference: the sum over the ranks of |set| (wrapping). */
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i) other[i] = 0;
      for (size_t k = 0; k < set_n; ++k) {
        int64_t* p = malloc(n * sizeof(int64_t));
        REQUIRE(p);
        gen(p, n, seed, step, set[k].index);
        for (size_t i = 0; i < n; ++i) other[i] = (int64_t)((uint64_t)other[i] + (uint64_t)p[i]);
        free(p);
      }
      for (size_t i = 0; i < n; ++i) bad += got[i] != other[i];
      if (shrunk)
        fprintf(stderr, "rank %u: step %u over %zu ranks started at %" PRIu64 " ms, took %" PRIu64
                " ms\n", rank, step, set_n, g_step_t0, ms);
      if (bad) {
        fprintf(stderr, "rank %u: step %u over %zu ranks: %zu of %zu sums differ\n", rank, step,
                set_n, bad, n);
        cube_test_failures++;
      }
      ++step;
      ++done_steps;
      continue;
    }
    /* The failure: the victim's death, named, within the timeout. */
    const char* msg = cube_status_message(s);
    cube_status_code_t code = cube_status_code(s);
    fprintf(stderr, "rank %u: step %u started at %" PRIu64 " ms failed after %" PRIu64
            " ms: [%s] %s\n", rank, step, g_step_t0, ms, cube_status_code_name(code), msg);
    CHECK(!shrunk);
    CHECK(code == CUBE_STATUS_DEADLINE_EXCEEDED || code == CUBE_STATUS_PEER_LOST);
    if (nccl) {
      /* NCCL does not say which peer is missing: the status names the other
       * processes, the victim among them; the shrink finds which. */
      char p[32];
      snprintf(p, sizeof(p), "(process %u)", victim);
      CHECK(strstr(msg, p) != NULL);
      CHECK(strstr(msg, "did not join") != NULL);
    } else {
      CHECK(names_rank(msg, victim));
    }
    CHECK(strstr(msg, "all_reduce #") != NULL);
    CHECK(ms >= timeout_ms - 100 && ms < timeout_ms + 5000);
    cube_status_free(s);
    if (shrunk) break;

    /* Shrink: the two survivors, agreed. */
    cube_device_id_t alive[3];
    size_t alive_n = 0;
    const uint32_t late_rank = victim == 2 ? 1u : 2u;
    if (late && rank != late_rank) note_shrink_entry(dir, rank);
    if (late && rank == late_rank) {
      /* 1.6 timeouts after the other survivor entered (waiting for its
       * note at most 4 timeouts: it fails its operation within about one). */
      uint32_t early = 3u - victim - late_rank;
      uint64_t entered = 0, t_wait = now_ms();
      while (!read_shrink_entry(dir, early, &entered) && now_ms() - t_wait < 4 * timeout_ms)
        nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
      CHECK(entered != 0);
      uint64_t target = (entered ? entered : now_ms()) + timeout_ms * 8 / 5, now = now_ms();
      uint64_t late_ms = target > now ? target - now : 0;
      fprintf(stderr, "rank %u: enters the shrink %" PRIu64 " ms from now, %" PRIu64
              " ms after rank %u entered its own\n",
              rank, late_ms, timeout_ms * 8 / 5, early);
      struct timespec ts = {(time_t)(late_ms / 1000), (long)(late_ms % 1000) * 1000000L};
      nanosleep(&ts, NULL);
    }
    uint64_t t0 = now_ms();
    REQUIRE_OK(cube_client_shrink_collective(c, 3, full, &alive_n, alive));
    fprintf(stderr, "rank %u: shrunk to %zu devices in %" PRIu64 " ms\n", rank, alive_n,
            now_ms() - t0);
    REQUIRE(alive_n == 2);
    for (size_t k = 0; k < alive_n; ++k) CHECK(alive[k].index != victim);
    CHECK(alive[0].index < alive[1].index);
    memcpy(set, alive, sizeof(alive));
    set_n = alive_n;
    shrunk = true;

    /* The old set now fails at once, naming the victim. */
    uint64_t t1 = now_ms();
    cube_status_t old = all_reduce_step(c, data, n, full, 3, CUBE_REDUCE_SUM, got, false, 0, &ms);
    CHECK(cube_status_code(old) == CUBE_STATUS_PEER_LOST);
    CHECK(names_rank(cube_status_message(old), victim));
    CHECK(now_ms() - t1 < timeout_ms);
    if (cube_status_code(old) != CUBE_STATUS_PEER_LOST)
      fprintf(stderr, "rank %u: the old set gave [%s] %s\n", rank,
              cube_status_code_name(cube_status_code(old)), cube_status_message(old));
    cube_status_free(old);

    /* Where to resume: the lowest step of the survivors. */
    int64_t mine = step;
    int64_t lowest = -1;
    REQUIRE_OK(all_reduce_step(c, &mine, 1, set, set_n, CUBE_REDUCE_MIN, &lowest, false, 0, &ms));
    REQUIRE(lowest >= 0 && lowest <= (int64_t)step);
    if ((uint32_t)lowest != step)
      fprintf(stderr, "rank %u: resumes at step %" PRId64 " (the other survivor's)\n", rank,
              lowest);
    step = (uint32_t)lowest;
  }
  CHECK(rank != victim); /* the victim never gets here */
  CHECK(shrunk);         /* the survivors found the death */
  free(data);
  free(got);
  free(other);
  cube_client_release(c);
  cube_shutdown();
  if (cube_test_failures == 0 && shrunk) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/survivor.%u", dir, rank);
    FILE* f = fopen(path, "w");
    REQUIRE(f != NULL);
    fprintf(f, "victim %u steps %u\n", victim, done_steps);
    fclose(f);
  }
}

CUBE_TEST(rank_killed_mid_all_reduce) { rank_killed(false, false); }
CUBE_TEST(rank_killed_mid_all_reduce_nccl) { rank_killed(true, false); }
CUBE_TEST(rank_killed_survivor_shrinks_late) { rank_killed(false, true); }
