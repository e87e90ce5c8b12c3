/* A stand-in for NCCL (libnccl.so.2) over the mock CUDA driver
 * (tests/mock_cuda), so that cube's nccl transport runs in CI with no GPU.
 * Loaded by cube through CUBE_NCCL_LIBRARY=<path of this library>, with
 * CUBE_CUDA_DRIVER pointing at the mock driver (its device memory is host
 * memory, its streams are threads).
 *
 * What it models, on purpose close to NCCL where cube depends on it:
 *  - communicators of a unique id (ncclGetUniqueId); ncclCommInitRankConfig
 *    blocking or not (blocking = 0: the communicator is "in progress" until
 *    every rank joined, ncclCommGetAsyncError tells); inside a group the
 *    ranks join at ncclGroupEnd, outside a blocking init waits for all ranks
 *    (a process driving two ranks from one thread without a group would hang
 *    there, as with NCCL: the mock gives up after 30 s with ncclSystemError);
 *  - ncclAllReduce, ncclSend, ncclRecv queue their work on the stream given
 *    (cuLaunchHostFunc of the mock driver): the work of one stream in one
 *    group is one host function that posts all its parts, then waits until
 *    every rank posted (so a group may hold a send and a recv of the same
 *    rank, as in NCCL); a rank's stream is blocked meanwhile, as a GPU is by
 *    NCCL's kernel. The reduction runs in rank order; max/min of floats are
 *    fmax/fmin (NaN loses, as NCCL), ncclAvg multiplies the float sum by 1/n
 *    and divides the wrapped integer sum toward zero (NCCL's FuncSumPostDiv);
 *  - for nonblocking communicators ncclGroupEnd of operations returns
 *    ncclInProgress and the next ncclCommGetAsyncError ncclSuccess;
 *  - participants that disagree (count, type, op) fail the communicator
 *    (ncclCommGetAsyncError: ncclInvalidUsage) and nothing is written;
 *  - ncclCommAbort releases the work waiting on the communicator's unique id
 *    (its streams run on, nothing written);
 *  - across processes (CUBE_MOCK_NCCL_DIR set): ranks of other processes
 *    join, and their parts arrive, through files in that directory (each
 *    rank computes the reduction itself from every rank's part).
 * Test hooks (found with dlsym): cube_mock_nccl_hang(n) makes the next n
 * operations never complete (until an abort); cube_mock_nccl_stats();
 * CUBE_MOCK_NCCL_VERSION overrides the version reported (22809).
 */
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MOCK_API __attribute__((visibility("default")))

/* NCCL's ABI values. */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;
typedef enum {
  ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
  ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9, mockNumTypes = 10
} ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
} mock_config_t;

typedef struct mock_clique mock_clique_t;
typedef struct mock_comm {
  mock_clique_t* cl;
  int rank, nranks;
  bool blocking;
  _Atomic int state; /* ncclSuccess, ncclInProgress, or an error */
  uint64_t coll_seq;
  uint64_t* send_seq; /* [nranks] */
  uint64_t* recv_seq;
} mock_comm_t;
typedef mock_comm_t* ncclComm_t;

/* One operation's meeting point (in-process ranks). */
typedef struct mock_meet {
  struct mock_meet* next;
  int kind; /* 0 all_reduce, 1 send/recv */
  uint64_t seq;
  int from, to;
  int expected, posted;
  bool done, failed, hang;
  int refs; /* the parts still to leave */
  struct {
    bool has;
    const void* src;
    void* dst;
    size_t count;
    ncclDataType_t type;
    ncclRedOp_t op;
  } part[64];
} mock_meet_t;

struct mock_clique {
  mock_clique_t* next;
  char id[128];
  int nranks;
  int refs;
  int joined; /* local ranks joined */
  bool joined_mask[64];
  bool aborted;
  _Atomic int error; /* async error of the whole communicator */
  mock_meet_t* meets;
  char dir[512]; /* cross-process exchange directory; "" in-process */
  bool dir_checked;
  bool all_joined;
};

#define MOCK_MAX_RANKS 64

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static mock_clique_t* g_cliques;
static atomic_long g_hang;
static _Thread_local char g_last_error[256];

static struct {
  atomic_long inits, groups, all_reduces, sends, recvs, aborts, destroys, finalizes, comms_live;
  atomic_long in_progress_returns, max_group_calls;
} g_stats;

/* The mock driver's cuLaunchHostFunc. */
typedef CUresult (*launch_host_fn_t)(CUstream, CUhostFn, void*);
static launch_host_fn_t g_launch;
static pthread_once_t g_driver_once = PTHREAD_ONCE_INIT;

static void mock_driver_load(void) {
  const char* path = getenv("CUBE_CUDA_DRIVER");
  if (!path || !*path) path = "libcuda.so.1";
  void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (!h) h = dlopen(path, RTLD_NOW);
  if (!h) return;
  CUresult (*get)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*) =
      (CUresult(*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*))(
          uintptr_t)dlsym(h, "cuGetProcAddress_v2");
  void* p = NULL;
  if (get && get("cuLaunchHostFunc", &p, 12000, 0, NULL) == CUDA_SUCCESS) memcpy(&g_launch, &p, sizeof(p));
}

static ncclResult_t mock_fail(ncclResult_t r, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static ncclResult_t mock_fail(ncclResult_t r, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_last_error, sizeof(g_last_error), fmt, ap);
  va_end(ap);
  return r;
}

static uint64_t mock_now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

static void mock_sleep_ms(unsigned ms) {
  struct timespec ts = {0, (long)ms * 1000000L};
  nanosleep(&ts, NULL);
}

/* Cross-process files ------------------------------------------------------ */

/* The clique's directory when CUBE_MOCK_NCCL_DIR is set (g_lock held). */
static const char* mock_dir_locked(mock_clique_t* cl) {
  if (!cl->dir_checked) {
    cl->dir_checked = true;
    const char* base = getenv("CUBE_MOCK_NCCL_DIR");
    if (base && *base) {
      /* The whole id ncclGetUniqueId fills (32 bytes: its counter and time
       * too), so that two communicators whose ids one process made do not
       * share a directory. */
      char hex[65];
      for (int i = 0; i < 32; ++i) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)cl->id[i]);
      snprintf(cl->dir, sizeof(cl->dir), "%s/mock-nccl-%s", base, hex);
      mkdir(cl->dir, 0700);
    }
  }
  return cl->dir;
}

static bool mock_write_file(const char* path, const void* a, size_t na, const void* b, size_t nb) {
  char tmp[600];
  snprintf(tmp, sizeof(tmp), "%s.tmp%ld", path, (long)getpid());
  FILE* f = fopen(tmp, "wb");
  if (!f) return false;
  bool ok = fwrite(a, 1, na, f) == na && (nb == 0 || fwrite(b, 1, nb, f) == nb);
  ok = fclose(f) == 0 && ok;
  if (ok) ok = rename(tmp, path) == 0;
  if (!ok) unlink(tmp);
  return ok;
}

/* Reads |path| whole into a malloc'd buffer; NULL while it is not there. */
static void* mock_read_file(const char* path, size_t* out_n) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  void* p = malloc(n > 0 ? (size_t)n : 1);
  if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
    free(p);
    p = NULL;
  }
  fclose(f);
  if (p) *out_n = (size_t)n;
  return p;
}

/* Every rank joined (g_lock held): locally, or through the join files. */
static bool mock_all_joined_locked(mock_clique_t* cl) {
  if (cl->joined == cl->nranks || cl->all_joined) return true;
  const char* dir = mock_dir_locked(cl);
  if (!dir[0]) return false;
  for (int r = 0; r < cl->nranks; ++r) {
    if (cl->joined_mask[r]) continue;
    char p[600];
    snprintf(p, sizeof(p), "%s/join.%d", dir, r);
    if (access(p, F_OK) != 0) return false;
  }
  cl->all_joined = true; /* for good: the others remove their files when they leave */
  return true;
}

/* Reductions ---------------------------------------------------------------- */

static size_t mock_type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

static float mock_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
  if (e == 0) {
    if (m == 0) {
      bits = sign;
    } else {
      e = 113;
      while (!(m & 0x400)) { m <<= 1; --e; }
      bits = sign | (e << 23) | ((m & 0x3ff) << 13);
    }
  } else if (e == 31) {
    bits = sign | 0x7f800000u | (m << 13);
  } else {
    bits = sign | ((e + 112) << 23) | (m << 13);
  }
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static uint16_t mock_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (ax < 0x38800000u) { /* subnormal or zero */
    if (ax < 0x33000000u) return (uint16_t)sign;
    uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t h = m >> shift, rem = m & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (h & 1))) ++h;
    return (uint16_t)(sign | h);
  }
  uint32_t h = (ax >> 13) - (112u << 10), rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return (uint16_t)(sign | h);
}

static float mock_bf16_to_f32(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static uint16_t mock_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

#define MOCK_INT(T, U)                                                              \
  static void mock_red_##T(ncclRedOp_t op, T* a, const T* b, size_t n) {          \
    for (size_t i = 0; i < n; ++i) {                                               \
      switch (op) {                                                                \
        case ncclSum: case ncclAvg: a[i] = (T)((U)a[i] + (U)b[i]); break;          \
        case ncclProd: a[i] = (T)((U)a[i] * (U)b[i]); break;                       \
        case ncclMax: a[i] = b[i] > a[i] ? b[i] : a[i]; break;                     \
        case ncclMin: a[i] = b[i] < a[i] ? b[i] : a[i]; break;                     \
      }                                                                            \
    }                                                                              \
  }                                                                                \
  static void mock_avg_##T(T* a, size_t n, int ranks) {                            \
    for (size_t i = 0; i < n; ++i) a[i] = (T)(a[i] / (T)ranks);                    \
  }
MOCK_INT(int8_t, uint8_t)
MOCK_INT(uint8_t, uint8_t)
MOCK_INT(int32_t, uint32_t)
MOCK_INT(uint32_t, uint32_t)
MOCK_INT(int64_t, uint64_t)
MOCK_INT(uint64_t, uint64_t)

#define MOCK_FLOAT(T, MAXF, MINF)                                                   \
  static void mock_red_##T(ncclRedOp_t op, T* a, const T* b, size_t n) {          \
    for (size_t i = 0; i < n; ++i) {                                               \
      switch (op) {                                                                \
        case ncclSum: case ncclAvg: a[i] += b[i]; break;                           \
        case ncclProd: a[i] *= b[i]; break;                                        \
        case ncclMax: a[i] = MAXF(a[i], b[i]); break;                              \
        case ncclMin: a[i] = MINF(a[i], b[i]); break;                             \
      }                                                                            \
    }                                                                              \
  }
typedef float float_t_;
typedef double double_t_;
MOCK_FLOAT(float_t_, fmaxf, fminf)
MOCK_FLOAT(double_t_, fmax, fmin)

static void mock_red_half(ncclRedOp_t op, uint16_t* a, const uint16_t* b, size_t n, bool bf) {
  for (size_t i = 0; i < n; ++i) {
    float x = bf ? mock_bf16_to_f32(a[i]) : mock_f16_to_f32(a[i]);
    float y = bf ? mock_bf16_to_f32(b[i]) : mock_f16_to_f32(b[i]);
    float_t_ r = x;
    mock_red_float_t_(op, &r, &y, 1);
    a[i] = bf ? mock_f32_to_bf16(r) : mock_f32_to_f16(r);
  }
}

/* acc = op(acc, in) */
static void mock_combine(ncclDataType_t t, ncclRedOp_t op, void* acc, const void* in, size_t n) {
  switch (t) {
    case ncclInt8: mock_red_int8_t(op, acc, in, n); break;
    case ncclUint8: mock_red_uint8_t(op, acc, in, n); break;
    case ncclInt32: mock_red_int32_t(op, acc, in, n); break;
    case ncclUint32: mock_red_uint32_t(op, acc, in, n); break;
    case ncclInt64: mock_red_int64_t(op, acc, in, n); break;
    case ncclUint64: mock_red_uint64_t(op, acc, in, n); break;
    case ncclFloat32: mock_red_float_t_(op, acc, in, n); break;
    case ncclFloat64: mock_red_double_t_(op, acc, in, n); break;
    case ncclFloat16: mock_red_half(op, acc, in, n, false); break;
    case ncclBfloat16: mock_red_half(op, acc, in, n, true); break;
    default: break;
  }
}

static void mock_finish_avg(ncclDataType_t t, void* acc, size_t n, int ranks) {
  switch (t) {
    case ncclInt8: mock_avg_int8_t(acc, n, ranks); break;
    case ncclUint8: mock_avg_uint8_t(acc, n, ranks); break;
    case ncclInt32: mock_avg_int32_t(acc, n, ranks); break;
    case ncclUint32: mock_avg_uint32_t(acc, n, ranks); break;
    case ncclInt64: mock_avg_int64_t(acc, n, ranks); break;
    case ncclUint64: mock_avg_uint64_t(acc, n, ranks); break;
    case ncclFloat32: {
      float* v = acc;
      float s = (float)(1.0 / ranks);
      for (size_t i = 0; i < n; ++i) v[i] *= s;
      break;
    }
    case ncclFloat64: {
      double* v = acc;
      for (size_t i = 0; i < n; ++i) v[i] *= 1.0 / ranks;
      break;
    }
    case ncclFloat16:
    case ncclBfloat16: {
      uint16_t* v = acc;
      bool bf = t == ncclBfloat16;
      float s = (float)(1.0 / ranks);
      for (size_t i = 0; i < n; ++i) {
        float x = (bf ? mock_bf16_to_f32(v[i]) : mock_f16_to_f32(v[i])) * s;
        v[i] = bf ? mock_f32_to_bf16(x) : mock_f32_to_f16(x);
      }
      break;
    }
    default: break;
  }
}

/* Work on a stream ------------------------------------------------------------ */

typedef struct mock_call {
  int kind; /* 0 all_reduce, 1 send, 2 recv, 3 init */
  mock_comm_t* comm;
  mock_clique_t* cl;
  int rank, nranks, peer;
  uint64_t seq;
  const void* src;
  void* dst;
  size_t count;
  ncclDataType_t type;
  ncclRedOp_t op;
  CUstream stream;
  mock_meet_t* meet;
} mock_call_t;

typedef struct mock_batch {
  int n;
  mock_call_t* calls;
} mock_batch_t;

/* The meeting of |c| (g_lock held), created on first use. */
static mock_meet_t* mock_meet_locked(mock_call_t* c) {
  mock_clique_t* cl = c->cl;
  int kind = c->kind == 0 ? 0 : 1;
  int from = c->kind == 1 ? c->rank : c->kind == 2 ? c->peer : 0;
  int to = c->kind == 1 ? c->peer : c->kind == 2 ? c->rank : 0;
  for (mock_meet_t* m = cl->meets; m; m = m->next)
    if (m->kind == kind && m->seq == c->seq && m->from == from && m->to == to) return m;
  mock_meet_t* m = calloc(1, sizeof(*m));
  if (!m) return NULL;
  m->kind = kind;
  m->seq = c->seq;
  m->from = from;
  m->to = to;
  m->expected = kind == 0 ? cl->nranks : 2;
  m->refs = m->expected;
  if (atomic_load(&g_hang) > 0) {
    atomic_fetch_sub(&g_hang, 1);
    m->hang = true;
  }
  m->next = cl->meets;
  cl->meets = m;
  return m;
}

static void mock_meet_leave_locked(mock_clique_t* cl, mock_meet_t* m) {
  if (--m->refs > 0) return;
  for (mock_meet_t** p = &cl->meets; *p; p = &(*p)->next)
    if (*p == m) {
      *p = m->next;
      break;
    }
  free(m);
}

/* Performs |m| (g_lock held; every part posted). */
static void mock_perform_locked(mock_clique_t* cl, mock_meet_t* m) {
  if (m->kind == 1) {
    if (m->part[0].count != m->part[1].count) {
      m->failed = true;
      atomic_store(&cl->error, ncclInvalidUsage);
      return;
    }
    memmove(m->part[1].dst, m->part[0].src, m->part[0].count);
    return;
  }
  for (int r = 1; r < cl->nranks; ++r)
    if (m->part[r].count != m->part[0].count || m->part[r].type != m->part[0].type ||
        m->part[r].op != m->part[0].op) {
      m->failed = true;
      atomic_store(&cl->error, ncclInvalidUsage);
      return;
    }
  size_t bytes = m->part[0].count * mock_type_size(m->part[0].type);
  void* acc = malloc(bytes ? bytes : 1);
  if (!acc) {
    m->failed = true;
    atomic_store(&cl->error, ncclSystemError);
    return;
  }
  memcpy(acc, m->part[0].src, bytes);
  for (int r = 1; r < cl->nranks; ++r)
    mock_combine(m->part[0].type, m->part[0].op, acc, m->part[r].src, m->part[0].count);
  if (m->part[0].op == ncclAvg) mock_finish_avg(m->part[0].type, acc, m->part[0].count, cl->nranks);
  for (int r = 0; r < cl->nranks; ++r) memcpy(m->part[r].dst, acc, bytes);
  free(acc);
}

/* Across processes: every part through files; each local rank computes its
 * own result. Returns false when aborted. */
static bool mock_run_remote(mock_call_t* c, const char* dir) {
  char path[640];
  size_t esz = c->kind == 0 ? mock_type_size(c->type) : 1;
  size_t bytes = c->count * esz;
  uint64_t hdr[3] = {c->count, (uint64_t)c->type, (uint64_t)c->op};
  if (c->kind == 0 || c->kind == 1) {
    if (c->kind == 0)
      snprintf(path, sizeof(path), "%s/ar.%llu.%d", dir, (unsigned long long)c->seq, c->rank);
    else
      snprintf(path, sizeof(path), "%s/p2p.%d.%d.%llu", dir, c->rank, c->peer,
               (unsigned long long)c->seq);
    if (!mock_write_file(path, hdr, sizeof(hdr), c->src, bytes)) {
      atomic_store(&c->cl->error, ncclSystemError);
      return false;
    }
    if (c->kind == 1) return true; /* an eager send */
  }
  /* Wait for the others' files. */
  void* acc = NULL;
  for (int r = 0; r < (c->kind == 0 ? c->nranks : 1); ++r) {
    int who = c->kind == 0 ? r : c->peer;
    if (c->kind == 0)
      snprintf(path, sizeof(path), "%s/ar.%llu.%d", dir, (unsigned long long)c->seq, who);
    else
      snprintf(path, sizeof(path), "%s/p2p.%d.%d.%llu", dir, who, c->rank,
               (unsigned long long)c->seq);
    size_t n = 0;
    void* data = NULL;
    for (;;) {
      pthread_mutex_lock(&g_lock);
      bool aborted = c->cl->aborted;
      pthread_mutex_unlock(&g_lock);
      if (aborted) {
        free(acc);
        return false;
      }
      data = mock_read_file(path, &n);
      if (data) break;
      mock_sleep_ms(1);
    }
    uint64_t h[3];
    memcpy(h, data, sizeof(h));
    if (n != sizeof(h) + bytes || h[0] != c->count || (c->kind == 0 && (h[1] != (uint64_t)c->type || h[2] != (uint64_t)c->op))) {
      free(data);
      free(acc);
      atomic_store(&c->cl->error, ncclInvalidUsage);
      return false;
    }
    const char* payload = (const char*)data + sizeof(h);
    if (c->kind == 2) {
      memcpy(c->dst, payload, bytes);
    } else if (!acc) {
      acc = malloc(bytes ? bytes : 1);
      if (acc) memcpy(acc, payload, bytes);
    } else {
      mock_combine(c->type, c->op, acc, payload, c->count);
    }
    free(data);
  }
  if (c->kind == 0 && acc) {
    if (c->op == ncclAvg) mock_finish_avg(c->type, acc, c->count, c->nranks);
    memcpy(c->dst, acc, bytes);
  }
  free(acc);
  return true;
}

static void mock_clique_unref_locked(mock_clique_t* cl);

/* On the stream's thread: posts every part of the batch, then waits for
 * their meetings (a group's send and recv of one rank progress together). */
static void mock_batch_run(void* p) {
  mock_batch_t* b = p;
  pthread_mutex_lock(&g_lock);
  const char* dir = b->n ? mock_dir_locked(b->calls[0].cl) : "";
  bool remote = dir[0] && b->n && b->calls[0].cl->joined < b->calls[0].cl->nranks;
  pthread_mutex_unlock(&g_lock);
  if (remote) {
    for (int i = 0; i < b->n; ++i) mock_run_remote(&b->calls[i], dir);
  } else {
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < b->n; ++i) {
      mock_call_t* c = &b->calls[i];
      if (c->cl->aborted) continue; /* an aborted communicator's kernels do nothing */
      mock_meet_t* m = mock_meet_locked(c);
      c->meet = m;
      if (!m) {
        atomic_store(&c->cl->error, ncclSystemError);
        continue;
      }
      int slot = m->kind == 0 ? c->rank : (c->kind == 1 ? 0 : 1);
      m->part[slot].has = true;
      m->part[slot].src = c->src;
      m->part[slot].dst = c->dst;
      m->part[slot].count = c->count;
      m->part[slot].type = c->type;
      m->part[slot].op = c->op;
      if (++m->posted == m->expected && !m->hang) {
        mock_perform_locked(c->cl, m);
        m->done = true;
        pthread_cond_broadcast(&g_cond);
      }
    }
    for (int i = 0; i < b->n; ++i) {
      mock_call_t* c = &b->calls[i];
      mock_meet_t* m = c->meet;
      if (!m) continue;
      while (!m->done && !c->cl->aborted) pthread_cond_wait(&g_cond, &g_lock);
      mock_meet_leave_locked(c->cl, m);
    }
    pthread_mutex_unlock(&g_lock);
  }
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < b->n; ++i) mock_clique_unref_locked(b->calls[i].cl);
  pthread_mutex_unlock(&g_lock);
  free(b->calls);
  free(b);
}

/* Groups ---------------------------------------------------------------------- */

static _Thread_local int g_depth;
static _Thread_local mock_call_t* g_calls;
static _Thread_local int g_ncalls, g_capcalls;

static ncclResult_t mock_push_call(const mock_call_t* c) {
  if (g_ncalls == g_capcalls) {
    int cap = g_capcalls ? g_capcalls * 2 : 8;
    mock_call_t* n = realloc(g_calls, (size_t)cap * sizeof(*n));
    if (!n) return mock_fail(ncclSystemError, "out of memory");
    g_calls = n;
    g_capcalls = cap;
  }
  g_calls[g_ncalls++] = *c;
  return ncclSuccess;
}

static mock_clique_t* mock_clique_get_locked(const ncclUniqueId* id, int nranks) {
  for (mock_clique_t* cl = g_cliques; cl; cl = cl->next)
    if (memcmp(cl->id, id->internal, sizeof(cl->id)) == 0) return cl;
  mock_clique_t* cl = calloc(1, sizeof(*cl));
  if (!cl) return NULL;
  memcpy(cl->id, id->internal, sizeof(cl->id));
  cl->nranks = nranks;
  cl->next = g_cliques;
  g_cliques = cl;
  return cl;
}

static void mock_clique_unref_locked(mock_clique_t* cl) {
  if (--cl->refs > 0) return;
  for (mock_clique_t** p = &g_cliques; *p; p = &(*p)->next)
    if (*p == cl) {
      *p = cl->next;
      break;
    }
  while (cl->meets) {
    mock_meet_t* m = cl->meets;
    cl->meets = m->next;
    free(m);
  }
  free(cl);
}

/* Ends the outermost group: joins the inits, queues the work. */
static ncclResult_t mock_flush(void) {
  ncclResult_t ret = ncclSuccess;
  int n = g_ncalls;
  mock_call_t* calls = g_calls;
  g_calls = NULL;
  g_ncalls = g_capcalls = 0;
  if (n > atomic_load(&g_stats.max_group_calls)) atomic_store(&g_stats.max_group_calls, n);
  atomic_fetch_add(&g_stats.groups, 1);
  bool any_blocking_init = false, any_nonblocking = false;
  pthread_mutex_lock(&g_lock);
  for (int i = 0; i < n; ++i) {
    mock_call_t* c = &calls[i];
    if (c->kind != 3) continue;
    mock_clique_t* cl = c->cl;
    cl->joined++;
    cl->joined_mask[c->rank] = true;
    const char* dir = mock_dir_locked(cl);
    if (dir[0]) {
      char p[600];
      snprintf(p, sizeof(p), "%s/join.%d", dir, c->rank);
      int one = 1;
      mock_write_file(p, &one, sizeof(one), NULL, 0);
    }
    if (c->comm->blocking) any_blocking_init = true;
  }
  pthread_cond_broadcast(&g_cond);
  if (any_blocking_init) {
    uint64_t t0 = mock_now_ms();
    for (int i = 0; i < n; ++i) {
      mock_call_t* c = &calls[i];
      if (c->kind != 3 || !c->comm->blocking) continue;
      while (!mock_all_joined_locked(c->cl)) {
        if (mock_now_ms() - t0 > 30000) {
          pthread_mutex_unlock(&g_lock);
          free(calls);
          return mock_fail(ncclSystemError, "mock nccl: ranks of a blocking init never joined");
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 2000000;
        if (ts.tv_nsec >= 1000000000) {
          ts.tv_sec++;
          ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&g_cond, &g_lock, &ts);
      }
      atomic_store(&c->comm->state, ncclSuccess);
    }
  }
  for (int i = 0; i < n; ++i) {
    mock_call_t* c = &calls[i];
    if (c->kind == 3 && !c->comm->blocking) {
      if (mock_all_joined_locked(c->cl))
        atomic_store(&c->comm->state, ncclSuccess);
      else
        ret = ncclInProgress;
    }
  }
  pthread_mutex_unlock(&g_lock);
  /* The work: one batch per stream, in call order. */
  for (int i = 0; i < n; ++i) {
    mock_call_t* c = &calls[i];
    if (c->kind == 3 || !c->stream) continue;
    CUstream s = c->stream;
    int m = 0;
    for (int j = i; j < n; ++j)
      if (calls[j].kind != 3 && calls[j].stream == s) ++m;
    mock_batch_t* b = calloc(1, sizeof(*b));
    mock_call_t* bc = calloc((size_t)m, sizeof(*bc));
    if (!b || !bc) {
      free(b);
      free(bc);
      free(calls);
      return mock_fail(ncclSystemError, "out of memory");
    }
    for (int j = i; j < n; ++j)
      if (calls[j].kind != 3 && calls[j].stream == s) {
        bc[b->n++] = calls[j];
        calls[j].stream = NULL; /* taken */
      }
    b->calls = bc;
    for (int k = 0; k < b->n; ++k)
      if (!bc[k].comm->blocking) any_nonblocking = true;
    pthread_once(&g_driver_once, mock_driver_load);
    if (!g_launch || g_launch(s, mock_batch_run, b) != CUDA_SUCCESS) {
      pthread_mutex_lock(&g_lock);
      for (int k = 0; k < b->n; ++k) mock_clique_unref_locked(bc[k].cl);
      pthread_mutex_unlock(&g_lock);
      free(bc);
      free(b);
      free(calls);
      return mock_fail(ncclUnhandledCudaError,
                       "mock nccl: cuLaunchHostFunc of the mock driver failed (CUBE_CUDA_DRIVER "
                       "must name tests/mock_cuda)");
    }
    /* |b| belongs to the stream now (it may have run already). */
  }
  for (int i = 0; i < n; ++i)
    if (calls[i].kind != 3 && calls[i].comm && !calls[i].comm->blocking) {
      /* As NCCL's nonblocking communicators: "in progress" once. */
      atomic_store(&calls[i].comm->state, ncclInProgress);
    }
  free(calls);
  if (any_nonblocking && ret == ncclSuccess) {
    atomic_fetch_add(&g_stats.in_progress_returns, 1);
    ret = ncclInProgress;
  }
  return ret;
}

/* API -------------------------------------------------------------------------- */

MOCK_API ncclResult_t ncclGetVersion(int* v) {
  const char* e = getenv("CUBE_MOCK_NCCL_VERSION");
  *v = e && *e ? atoi(e) : 22809;
  return ncclSuccess;
}

MOCK_API ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static atomic_uint counter;
  memset(id, 0, sizeof(*id));
  uint64_t x[4] = {0x6b636f6d65627563ull /* "cubemock" */, (uint64_t)getpid(),
                   atomic_fetch_add(&counter, 1), (uint64_t)time(NULL) ^ (uint64_t)clock()};
  memcpy(id->internal, x, sizeof(x));
  return ncclSuccess;
}

MOCK_API ncclResult_t ncclGroupStart(void) {
  g_depth++;
  return ncclSuccess;
}

MOCK_API ncclResult_t ncclGroupEnd(void) {
  if (g_depth <= 0) return mock_fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--g_depth > 0) return ncclSuccess;
  return mock_flush();
}

MOCK_API ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId id, int rank,
                                             mock_config_t* config) {
  if (nranks < 1 || nranks > MOCK_MAX_RANKS || rank < 0 || rank >= nranks)
    return mock_fail(ncclInvalidArgument, "rank %d of %d", rank, nranks);
  if (config && config->magic != 0xcafebeefu)
    return mock_fail(ncclInvalidArgument, "ncclConfig_t not initialised");
  mock_comm_t* c = calloc(1, sizeof(*c));
  uint64_t* ss = calloc((size_t)nranks, sizeof(uint64_t));
  uint64_t* rs = calloc((size_t)nranks, sizeof(uint64_t));
  if (!c || !ss || !rs) {
    free(c);
    free(ss);
    free(rs);
    return mock_fail(ncclSystemError, "out of memory");
  }
  pthread_mutex_lock(&g_lock);
  mock_clique_t* cl = mock_clique_get_locked(&id, nranks);
  if (cl) cl->refs++;
  pthread_mutex_unlock(&g_lock);
  if (!cl) {
    free(c);
    free(ss);
    free(rs);
    return mock_fail(ncclSystemError, "out of memory");
  }
  c->cl = cl;
  c->rank = rank;
  c->nranks = nranks;
  c->send_seq = ss;
  c->recv_seq = rs;
  c->blocking = !config || config->version < 21400 || config->blocking != 0;
  atomic_init(&c->state, ncclInProgress);
  atomic_fetch_add(&g_stats.inits, 1);
  atomic_fetch_add(&g_stats.comms_live, 1);
  *out = c;
  mock_call_t call = {.kind = 3, .comm = c, .cl = cl, .rank = rank, .nranks = nranks};
  ncclGroupStart();
  ncclResult_t r = mock_push_call(&call);
  ncclResult_t e = ncclGroupEnd();
  return r != ncclSuccess ? r : e;
}

MOCK_API ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(out, nranks, id, rank, NULL);
}

static ncclResult_t mock_check_comm(mock_comm_t* c) {
  if (!c) return mock_fail(ncclInvalidArgument, "comm is NULL");
  int s = atomic_load(&c->state);
  if (s == ncclInProgress) {
    pthread_mutex_lock(&g_lock);
    bool joined = mock_all_joined_locked(c->cl);
    pthread_mutex_unlock(&g_lock);
    if (!joined) return mock_fail(ncclInvalidUsage, "the communicator is still being created");
  }
  return ncclSuccess;
}

static ncclResult_t mock_op(int kind, mock_comm_t* c, const void* src, void* dst, size_t count,
                            ncclDataType_t type, ncclRedOp_t op, int peer, CUstream s) {
  ncclResult_t r = mock_check_comm(c);
  if (r) return r;
  if ((unsigned)type >= mockNumTypes) return mock_fail(ncclInvalidArgument, "datatype %d", (int)type);
  if ((unsigned)op > ncclAvg) return mock_fail(ncclInvalidArgument, "op %d", (int)op);
  if (kind != 0 && (peer < 0 || peer >= c->nranks))
    return mock_fail(ncclInvalidArgument, "peer %d of %d", peer, c->nranks);
  mock_call_t call = {.kind = kind, .comm = c, .cl = c->cl, .rank = c->rank, .nranks = c->nranks,
                      .peer = peer, .src = src, .dst = dst, .count = count, .type = type,
                      .op = op, .stream = s};
  call.seq = kind == 0 ? c->coll_seq++ : kind == 1 ? c->send_seq[peer]++ : c->recv_seq[peer]++;
  if (kind != 0) call.count = count * mock_type_size(type); /* bytes */
  pthread_mutex_lock(&g_lock);
  c->cl->refs++; /* the batch's */
  pthread_mutex_unlock(&g_lock);
  atomic_fetch_add(kind == 0 ? &g_stats.all_reduces : kind == 1 ? &g_stats.sends : &g_stats.recvs, 1);
  ncclGroupStart();
  r = mock_push_call(&call);
  if (r) {
    pthread_mutex_lock(&g_lock);
    mock_clique_unref_locked(c->cl);
    pthread_mutex_unlock(&g_lock);
  }
  ncclResult_t e = ncclGroupEnd();
  return r != ncclSuccess ? r : e;
}

MOCK_API ncclResult_t ncclAllReduce(const void* src, void* dst, size_t count, ncclDataType_t type,
                                    ncclRedOp_t op, ncclComm_t comm, CUstream s) {
  return mock_op(0, comm, src, dst, count, type, op, 0, s);
}

MOCK_API ncclResult_t ncclSend(const void* src, size_t count, ncclDataType_t type, int peer,
                               ncclComm_t comm, CUstream s) {
  return mock_op(1, comm, src, NULL, count, type, ncclSum, peer, s);
}

MOCK_API ncclResult_t ncclRecv(void* dst, size_t count, ncclDataType_t type, int peer,
                               ncclComm_t comm, CUstream s) {
  return mock_op(2, comm, NULL, dst, count, type, ncclSum, peer, s);
}

MOCK_API ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* out) {
  if (!c) return mock_fail(ncclInvalidArgument, "comm is NULL");
  int e = atomic_load(&c->cl->error);
  if (e) {
    *out = (ncclResult_t)e;
    return ncclSuccess;
  }
  int s = atomic_load(&c->state);
  if (s == ncclInProgress) {
    /* Creation: in progress until every rank joined; operations and
     * finalize: in progress for one more query. */
    pthread_mutex_lock(&g_lock);
    bool joined = mock_all_joined_locked(c->cl);
    pthread_mutex_unlock(&g_lock);
    int expect = ncclInProgress;
    if (joined) atomic_compare_exchange_strong(&c->state, &expect, ncclSuccess);
    *out = ncclInProgress;
    return ncclSuccess;
  }
  *out = (ncclResult_t)s;
  return ncclSuccess;
}

static void mock_comm_free(mock_comm_t* c) {
  pthread_mutex_lock(&g_lock);
  const char* dir = mock_dir_locked(c->cl);
  if (dir[0]) {
    char p[600];
    snprintf(p, sizeof(p), "%s/join.%d", dir, c->rank);
    unlink(p);
  }
  mock_clique_unref_locked(c->cl);
  pthread_mutex_unlock(&g_lock);
  atomic_fetch_sub(&g_stats.comms_live, 1);
  free(c->send_seq);
  free(c->recv_seq);
  free(c);
}

MOCK_API ncclResult_t ncclCommFinalize(ncclComm_t c) {
  if (!c) return mock_fail(ncclInvalidArgument, "comm is NULL");
  atomic_fetch_add(&g_stats.finalizes, 1);
  if (!c->blocking) {
    atomic_store(&c->state, ncclInProgress); /* settles at the next query */
    return ncclInProgress;
  }
  return ncclSuccess;
}

MOCK_API ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (!c) return ncclSuccess;
  atomic_fetch_add(&g_stats.destroys, 1);
  mock_comm_free(c);
  return ncclSuccess;
}

MOCK_API ncclResult_t ncclCommAbort(ncclComm_t c) {
  if (!c) return ncclSuccess;
  atomic_fetch_add(&g_stats.aborts, 1);
  pthread_mutex_lock(&g_lock);
  c->cl->aborted = true;
  pthread_cond_broadcast(&g_cond);
  pthread_mutex_unlock(&g_lock);
  mock_comm_free(c);
  return ncclSuccess;
}

MOCK_API const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument (mock)";
    case ncclInvalidUsage: return "invalid usage (mock)";
    case ncclInProgress: return "in progress (mock)";
    case ncclSystemError: return "system error (mock)";
    default: return "mock nccl error";
  }
}

MOCK_API const char* ncclGetLastError(ncclComm_t c) {
  (void)c;
  return g_last_error;
}

MOCK_API ncclResult_t ncclCommCount(const ncclComm_t c, int* n) {
  *n = c->nranks;
  return ncclSuccess;
}

MOCK_API ncclResult_t ncclCommUserRank(const ncclComm_t c, int* r) {
  *r = c->rank;
  return ncclSuccess;
}

/* Test hooks ----------------------------------------------------------------- */

MOCK_API void cube_mock_nccl_hang(long n) { atomic_store(&g_hang, n); }

typedef struct cube_mock_nccl_stats {
  long inits, groups, all_reduces, sends, recvs, aborts, destroys, finalizes, comms_live;
  long in_progress_returns, max_group_calls;
} cube_mock_nccl_stats_t;

MOCK_API void cube_mock_nccl_stats(cube_mock_nccl_stats_t* s) {
  s->inits = atomic_load(&g_stats.inits);
  s->groups = atomic_load(&g_stats.groups);
  s->all_reduces = atomic_load(&g_stats.all_reduces);
  s->sends = atomic_load(&g_stats.sends);
  s->recvs = atomic_load(&g_stats.recvs);
  s->aborts = atomic_load(&g_stats.aborts);
  s->destroys = atomic_load(&g_stats.destroys);
  s->finalizes = atomic_load(&g_stats.finalizes);
  s->comms_live = atomic_load(&g_stats.comms_live);
  s->in_progress_returns = atomic_load(&g_stats.in_progress_returns);
  s->max_group_calls = atomic_load(&g_stats.max_group_calls);
}
