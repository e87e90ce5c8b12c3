/* all_reduce bus bandwidth between the CUDA devices of this process: cube's
 * collectives (the nccl transport when NCCL loads) beside raw NCCL called
 * directly in the same process, on the same GPUs, same sizes, fp32 sum, in
 * place.
 *
 * One round = the operation issued on every device, then waited for:
 *  - cube: cube_client_all_reduce on each client, cube_client_sync_collective
 *    on each, cube_client_sync on each (the host sees the result);
 *  - raw:  ncclGroupStart, ncclAllReduce per device on its own stream,
 *    ncclGroupEnd, cuStreamSynchronize per device.
 * The median round over 5 trials gives algbw = bytes / time and busbw =
 * algbw x 2(n-1)/n (NCCL's convention); "cube (record)" is the transport's
 * own timing (CUDA events around the NCCL call on the comm stream).
 *
 *   BENCH_MIN_MIB / BENCH_MAX_MIB   the sweep, doubling (default 1 .. 4096)
 *   CUBE_NCCL_LIBRARY, CUBE_CUDA_DRIVER   as for cube (the raw side uses the same)
 * With one GPU it still runs (n = 1: NCCL copies locally) and says that bus
 * bandwidth needs 2 or more. Exits 0 with a note when there is no CUDA. */
#define BENCH_NAME "bench_nccl"
#include <dlfcn.h>

#include "bench_common.h"
#include "cube/cube.h"

#ifdef CUBE_HAVE_CUDA
#include <cuda.h>

#define MAXDEV 16

/* Raw NCCL and the driver, through dlopen as cube does (no link-time
 * dependency); NCCL's ABI values. */
typedef int nccl_result_t;
typedef struct nccl_comm* nccl_comm_t;
typedef struct {
  char internal[128];
} nccl_uid_t;
enum { NCCL_FLOAT32 = 7, NCCL_SUM = 0 };

typedef struct raw {
  nccl_result_t (*GetUniqueId)(nccl_uid_t*);
  nccl_result_t (*CommInitRank)(nccl_comm_t*, int, nccl_uid_t, int);
  nccl_result_t (*GroupStart)(void);
  nccl_result_t (*GroupEnd)(void);
  nccl_result_t (*AllReduce)(const void*, void*, size_t, int, int, nccl_comm_t, CUstream);
  nccl_result_t (*CommDestroy)(nccl_comm_t);
  const char* (*GetErrorString)(nccl_result_t);
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*PrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemsetD32)(CUdeviceptr, unsigned, size_t, CUstream);
  CUresult (*StreamCreate)(CUstream*, unsigned);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*StreamDestroy)(CUstream);
  int n;
  CUcontext ctx[MAXDEV];
  CUstream stream[MAXDEV];
  nccl_comm_t comm[MAXDEV];
  CUdeviceptr buf[MAXDEV];
  char why[256]; /* empty when usable */
} raw_t;

static bool raw_load(raw_t* r, int n) {
  memset(r, 0, sizeof(*r));
  r->n = n;
  const char* np = getenv("CUBE_NCCL_LIBRARY");
  if (!np || !*np) np = "libnccl.so.2";
  const char* dp = getenv("CUBE_CUDA_DRIVER");
  if (!dp || !*dp) dp = "libcuda.so.1";
  void* nl = dlopen(np, RTLD_NOW | RTLD_LOCAL);
  void* dl = dlopen(dp, RTLD_NOW | RTLD_LOCAL);
  if (!nl || !dl) {
    snprintf(r->why, sizeof(r->why), "%s", dlerror());
    return false;
  }
#define NSYM(f, s)                                                       \
  do {                                                                   \
    void* p_ = dlsym(nl, s);                                             \
    if (!p_) {                                                           \
      snprintf(r->why, sizeof(r->why), "%s has no %s", np, s);           \
      return false;                                                      \
    }                                                                    \
    memcpy(&r->f, &p_, sizeof(p_));                                      \
  } while (0)
  NSYM(GetUniqueId, "ncclGetUniqueId");
  NSYM(CommInitRank, "ncclCommInitRank");
  NSYM(GroupStart, "ncclGroupStart");
  NSYM(GroupEnd, "ncclGroupEnd");
  NSYM(AllReduce, "ncclAllReduce");
  NSYM(CommDestroy, "ncclCommDestroy");
  NSYM(GetErrorString, "ncclGetErrorString");
#undef NSYM
  CUresult (*get)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*) = NULL;
  void* gp = dlsym(dl, "cuGetProcAddress_v2");
  memcpy(&get, &gp, sizeof(gp));
  if (!get) {
    snprintf(r->why, sizeof(r->why), "%s has no cuGetProcAddress_v2", dp);
    return false;
  }
#define DSYM(f, s)                                                               \
  do {                                                                           \
    void* p_ = NULL;                                                             \
    if (get(s, &p_, 12000, 0, NULL) != CUDA_SUCCESS || !p_) {                    \
      snprintf(r->why, sizeof(r->why), "%s has no %s", dp, s);                   \
      return false;                                                              \
    }                                                                            \
    memcpy(&r->f, &p_, sizeof(p_));                                              \
  } while (0)
  DSYM(Init, "cuInit");
  DSYM(DeviceGet, "cuDeviceGet");
  DSYM(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  DSYM(CtxSetCurrent, "cuCtxSetCurrent");
  DSYM(MemAlloc, "cuMemAlloc");
  DSYM(MemFree, "cuMemFree");
  DSYM(MemsetD32, "cuMemsetD32Async");
  DSYM(StreamCreate, "cuStreamCreate");
  DSYM(StreamSynchronize, "cuStreamSynchronize");
  DSYM(StreamDestroy, "cuStreamDestroy");
#undef DSYM
  if (r->Init(0) != CUDA_SUCCESS) {
    snprintf(r->why, sizeof(r->why), "cuInit failed");
    return false;
  }
  nccl_uid_t id;
  nccl_result_t e = r->GetUniqueId(&id);
  for (int i = 0; i < n && !e; ++i) {
    CUdevice d;
    if (r->DeviceGet(&d, i) || r->PrimaryCtxRetain(&r->ctx[i], d) ||
        r->CtxSetCurrent(r->ctx[i]) || r->StreamCreate(&r->stream[i], CU_STREAM_NON_BLOCKING)) {
      snprintf(r->why, sizeof(r->why), "device %d: context or stream failed", i);
      return false;
    }
  }
  /* One thread, several ranks: the inits in one group (NCCL's rule). */
  if (!e) e = r->GroupStart();
  for (int i = 0; i < n && !e; ++i) {
    r->CtxSetCurrent(r->ctx[i]);
    e = r->CommInitRank(&r->comm[i], n, id, i);
  }
  nccl_result_t e2 = r->GroupEnd();
  if (!e) e = e2;
  if (e) {
    snprintf(r->why, sizeof(r->why), "ncclCommInitRank: %s", r->GetErrorString(e));
    return false;
  }
  return true;
}

static bool raw_alloc(raw_t* r, size_t bytes) {
  for (int i = 0; i < r->n; ++i) {
    r->CtxSetCurrent(r->ctx[i]);
    if (r->MemAlloc(&r->buf[i], bytes) != CUDA_SUCCESS) {
      r->buf[i] = 0;
      return false;
    }
    r->MemsetD32(r->buf[i], 0, bytes / 4, r->stream[i]);
    r->StreamSynchronize(r->stream[i]);
  }
  return true;
}

static void raw_free(raw_t* r) {
  for (int i = 0; i < r->n; ++i) {
    if (!r->buf[i]) continue;
    r->CtxSetCurrent(r->ctx[i]);
    r->MemFree(r->buf[i]);
    r->buf[i] = 0;
  }
}

typedef struct {
  raw_t* r;
  size_t bytes;
  int errors;
} raw_ctx_t;

static uint64_t raw_trial(void* p, uint64_t iters) {
  raw_ctx_t* x = p;
  raw_t* r = x->r;
  uint64_t t0 = now_ns();
  for (uint64_t it = 0; it < iters; ++it) {
    nccl_result_t e = r->GroupStart();
    for (int i = 0; i < r->n && !e; ++i)
      e = r->AllReduce((void*)(uintptr_t)r->buf[i], (void*)(uintptr_t)r->buf[i], x->bytes / 4,
                       NCCL_FLOAT32, NCCL_SUM, r->comm[i], r->stream[i]);
    nccl_result_t e2 = r->GroupEnd();
    if (e || e2) x->errors++;
    for (int i = 0; i < r->n; ++i) r->StreamSynchronize(r->stream[i]);
  }
  return now_ns() - t0;
}

typedef struct {
  uint32_t n;
  cube_client_t* c[MAXDEV];
  cube_handle_t h[MAXDEV];
  cube_device_id_t ids[MAXDEV];
} cube_ctx_t;

static uint64_t cube_trial(void* p, uint64_t iters) {
  cube_ctx_t* x = p;
  uint64_t t0 = now_ns();
  for (uint64_t it = 0; it < iters; ++it) {
    for (uint32_t i = 0; i < x->n; ++i)
      TRY("all_reduce", cube_client_all_reduce(x->c[i], x->h[i], x->h[i], CUBE_DTYPE_F32, x->n,
                                               x->ids, CUBE_REDUCE_SUM));
    for (uint32_t i = 0; i < x->n; ++i)
      TRY("sync_collective", cube_client_sync_collective(x->c[i]));
    for (uint32_t i = 0; i < x->n; ++i) TRY("sync", cube_client_sync(x->c[i]));
  }
  return now_ns() - t0;
}

static const char* fmt_size(uint64_t b, char* buf, size_t n) {
  if (b >= (1ull << 30))
    snprintf(buf, n, "%llu GiB", (unsigned long long)(b >> 30));
  else
    snprintf(buf, n, "%llu MiB", (unsigned long long)(b >> 20));
  return buf;
}

int main(void) {
  print_machine(BENCH_NAME, cube_version());
  setenv("NCCL_NVLS_ENABLE", "0", 0); /* NVLink multicast stays off on shared hosts */
  size_t ndev = 0;
  cube_status_free(cube_enumerate_devices(CUBE_BACKEND_CUDA, NULL, 0, &ndev));
  cube_status_t avail = cube_backend_status(CUBE_BACKEND_CUDA);
  if (avail || ndev == 0) {
    printf("cuda unavailable: %s\n", avail ? cube_status_message(avail) : "no GPU");
    cube_status_free(avail);
    return 0;
  }
  uint32_t n = ndev > MAXDEV ? MAXDEV : (uint32_t)ndev;
  uint64_t min_mib = 1, max_mib = 4096;
  const char* v = getenv("BENCH_MIN_MIB");
  if (v && atoi(v) > 0) min_mib = (uint64_t)atoi(v);
  v = getenv("BENCH_MAX_MIB");
  if (v && atoi(v) > 0) max_mib = (uint64_t)atoi(v);
  const char* detail = NULL;
  const char* transport = cube_collective_transport(CUBE_BACKEND_CUDA, &detail);
  printf("gpus: %u; cube transport: %s (%s); NCCL_NVLS_ENABLE=%s\n", n,
         transport ? transport : "none", detail ? detail : "", getenv("NCCL_NVLS_ENABLE"));
  if (n < 2)
    printf("note: one GPU: n = 1, NCCL copies within the device; bus bandwidth needs 2+ GPUs "
           "(busbw = algbw x 2(n-1)/n is 0 here), so the table compares algbw only\n");
  raw_t raw;
  bool have_raw = raw_load(&raw, (int)n);
  if (!have_raw) printf("raw NCCL unavailable: %s (cube side only)\n", raw.why);

  cube_ctx_t x;
  memset(&x, 0, sizeof(x));
  x.n = n;
  for (uint32_t i = 0; i < n; ++i) {
    x.ids[i] = (cube_device_id_t){CUBE_BACKEND_CUDA, i};
    TRY("load", cube_client_load(x.ids[i], &x.c[i]));
  }
  if (g_failures) return 1;
  printf("\n| n | size | cube round | cube algbw | cube busbw | cube busbw (record) | raw round "
         "| raw algbw | raw busbw | cube / raw |\n");
  printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  double busf = n > 1 ? 2.0 * (n - 1) / n : 0.0;
  for (uint64_t bytes = min_mib << 20; bytes <= (max_mib << 20); bytes *= 2) {
    bool ok = true;
    for (uint32_t i = 0; i < n && ok; ++i) {
      cube_status_t s = cube_client_empty(x.c[i], (size_t)bytes, &x.h[i]);
      if (s) {
        printf("| %u | %llu MiB | cube: %s |\n", n, (unsigned long long)(bytes >> 20),
               cube_status_message(s));
        cube_status_free(s);
        ok = false;
        for (uint32_t k = 0; k < i; ++k) cube_handle_release(x.h[k]);
      }
    }
    if (!ok) break;
    uint64_t iters = bytes >= (1ull << 30) ? 2 : bytes >= (64ull << 20) ? 5 : 20;
    stats_t cs = measure(cube_trial, &x, iters, 1, 5);
    cube_collective_record_t rec = {0};
    memset(&rec, 0, sizeof(rec));
    TRY("last_collective", cube_client_last_collective(x.c[0], &rec));
    for (uint32_t i = 0; i < n; ++i) cube_handle_release(x.h[i]);
    for (uint32_t i = 0; i < n; ++i) TRY("cleanup", cube_client_memory_cleanup(x.c[i]));
    double c_alg = (double)bytes / (cs.median_us * 1000.0);
    stats_t rs = {0, 0, 0, false};
    double r_alg = 0;
    if (have_raw && raw_alloc(&raw, (size_t)bytes)) {
      raw_ctx_t rc = {&raw, (size_t)bytes, 0};
      rs = measure(raw_trial, &rc, iters, 1, 5);
      if (rc.errors) rs.valid = false;
      r_alg = (double)bytes / (rs.median_us * 1000.0);
    }
    if (have_raw) raw_free(&raw);
    char sz[32];
    if (rs.valid)
      printf("| %u | %s | %.1f us | %.2f GB/s | %.2f GB/s | %.2f GB/s | %.1f us | %.2f GB/s | "
             "%.2f GB/s | %.3f |\n",
             n, fmt_size(bytes, sz, sizeof(sz)), cs.median_us, c_alg, c_alg * busf,
             rec.busbw_gbps * (n > 1 ? 1.0 : 0.0), rs.median_us, r_alg, r_alg * busf,
             c_alg / r_alg);
    else
      printf("| %u | %s | %.1f us | %.2f GB/s | %.2f GB/s | %.2f GB/s | - | - | - | - |\n", n,
             fmt_size(bytes, sz, sizeof(sz)), cs.median_us, c_alg, c_alg * busf,
             rec.busbw_gbps * (n > 1 ? 1.0 : 0.0));
    fflush(stdout);
  }
  /* Where a small round's time goes on cube's side: the three calls timed
   * apart (medians over 200 rounds of 1 MiB after 20 warm-up rounds). */
  {
    enum { ROUNDS = 200, WARM = 20 };
    static double ph[3][ROUNDS];
    bool ok = true;
    for (uint32_t i = 0; i < n && ok; ++i) {
      cube_status_t s = cube_client_empty(x.c[i], 1u << 20, &x.h[i]);
      if (s) {
        cube_status_free(s);
        ok = false;
        for (uint32_t k = 0; k < i; ++k) cube_handle_release(x.h[k]);
      }
    }
    for (int r = -WARM; ok && r < ROUNDS; ++r) {
      uint64_t t0 = now_ns();
      for (uint32_t i = 0; i < x.n; ++i)
        TRY("all_reduce", cube_client_all_reduce(x.c[i], x.h[i], x.h[i], CUBE_DTYPE_F32, x.n, x.ids,
                                                 CUBE_REDUCE_SUM));
      uint64_t t1 = now_ns();
      for (uint32_t i = 0; i < x.n; ++i) TRY("sync_collective", cube_client_sync_collective(x.c[i]));
      uint64_t t2 = now_ns();
      for (uint32_t i = 0; i < x.n; ++i) TRY("sync", cube_client_sync(x.c[i]));
      uint64_t t3 = now_ns();
      if (r >= 0) {
        ph[0][r] = (double)(t1 - t0) / 1e3;
        ph[1][r] = (double)(t2 - t1) / 1e3;
        ph[2][r] = (double)(t3 - t2) / 1e3;
      }
    }
    if (ok) {
      for (int k = 0; k < 3; ++k) qsort(ph[k], ROUNDS, sizeof(double), cmp_double);
      printf("\ncube round of 1 MiB, the calls apart (median of %d): all_reduce %.1f us, "
             "sync_collective %.1f us, sync %.1f us\n",
             ROUNDS, ph[0][ROUNDS / 2], ph[1][ROUNDS / 2], ph[2][ROUNDS / 2]);
      for (uint32_t i = 0; i < n; ++i) cube_handle_release(x.h[i]);
    }
  }
  for (uint32_t i = 0; i < n; ++i) cube_client_release(x.c[i]);
  cube_shutdown();
  if (have_raw) {
    for (uint32_t i = 0; i < n; ++i) {
      raw.CtxSetCurrent(raw.ctx[i]);
      raw.CommDestroy(raw.comm[i]);
      raw.StreamDestroy(raw.stream[i]);
    }
  }
  return g_failures ? 1 : 0;
}

#else
int main(void) {
  print_machine(BENCH_NAME, cube_version());
  printf("cuda unavailable: cube was built without the CUDA backend\n");
  return 0;
}
#endif
