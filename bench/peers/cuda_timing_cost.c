// What per-launch device timing costs with raw CUDA: 10,000 empty launches on one
// stream, then a sync, with nothing recorded, with timing events around or after
// each launch, and with CUPTI's kernel activity records (when libcupti is found).
// Rounds alternate the variants; medians with min-max are printed.
// CUDA_TIMING_KERNEL=saxpy: saxpy over 2^20 floats (12 MiB moved) instead of the
// empty kernel. CUDA_TIMING_THREADED=1: a second thread makes the launches, fed
// one launch at a time through a bounded ring by the timing thread (the
// arrangement of a runtime whose caller queues and whose runner launches).
// Mode "globaltimer": the kernel times itself: block 0's first unit writes the
// GPU's %globaltimer into its launch's device slot at entry, the first unit of
// each block raises the slot's end to the timer at exit (an atomic max nobody
// waits for), and every 256 launches the stream copies their slots into a
// pinned host ring:
// nothing on the stream, no profiler. Mode "globaltimer, 8 ends": the same with
// eight end words per slot, each block raising the one of its index modulo 8
// (the host takes their maximum), so that the blocks' reductions at the end of
// a kernel of many blocks do not all meet at one address. Modes "gt, 32 lines" (a launch's
// 32 ends 128 bytes apart, a slot of its own), "gt, 32 x 2 KiB" (cube's batches of 256
// slots as planes: the 32 ends of a launch 2 KiB apart) and "gt, 16 a line" (batches of
// 256 slots in groups of 16 launches side by side in each 128-byte line: a launch's 32 ends
// 128 bytes apart, as in the first): the slots are not copied, the cost is the device's
// alone. "gt, 16 + copies": the last, with cube's copies (every 256 launches the stream
// copies the batch's 67,584 bytes of slots, then 8 bytes a launch of marks, into pinned
// host memory). "gt, 16 generic": the last's layout, the end raised by `red.max.u64` on the
// generic address (inline PTX, as cube's prelude had it) instead of atomicMax, which the
// compiler issues on the global address. "gt, 16 start only" and "gt, 16 end only": the
// form of "gt, 16 a line" with only its start written, or only its ends raised. "gt, 16
// late start": that form with the start read at cube 0's entry and stored at its end (the
// timer's read then waits for nobody). "gt, 16 start const", "gt, 16 end const": the
// start, or the ends, without the timer (a constant written: the store or reduction alone);
// "gt, 16 tests only": the form's tests of the unit's and cube's indices, nothing written.
// "gt, 16 start by max", "gt, 16 start .cs": the start written by atomicMax, or by a store
// with the streaming hint (st.global.cs), instead of a plain store. "gt, 64 lines" and
// "gt, 128 lines": the form of "gt, 16 a line" with 64 or 128 planes of ends instead of 32
// (cube `i` raises plane `i mod 64` or `i mod 128`; groups of 16 launches a line; not copied),
// so that fewer cubes meet at each word.
// "gt, 16 nested tests": "gt, 16 a line" whose tests read only the unit's and cube's x
// index in every unit (which the kernel's body reads anyway), the other four indices only
// where those are 0; "gt, 16 nested, asm": the same with those four read by inline PTX
// (not moved out of the branch by the compiler); "gt, 16 x tests (1-D)": only the x
// indices tested (right for 1-D launches only), what reading the others costs.
// CUDA_TIMING_MODES=9,12,23: only those modes (their numbers in the order printed, "none"
// being 0 and always run), for more runs of a few forms in one call.
// The program also prints the timer's
// step (the smallest change seen by a unit spinning on it, without and with
// CUPTI's records on) and the mean kernel duration each source reports.
// Build (on a CUDA machine), one line:
//   gcc -O2 -pthread cuda_timing_cost.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcuda -lnvrtc -ldl
#include <cuda.h>
#include <dlfcn.h>
#include <nvrtc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if __has_include(<cupti_activity.h>)
#include <cupti_activity.h>
#define KIND_KERNEL CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
#define KIND_CORRELATION CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION
#define CORRELATION_CUSTOM0 CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0
#else
#define KIND_KERNEL 10
#define KIND_CORRELATION 39
#define CORRELATION_CUSTOM0 1
#endif

#define CK(x)                                                                    \
  do {                                                                           \
    CUresult r_ = (x);                                                           \
    if (r_) {                                                                    \
      const char* s_;                                                            \
      cuGetErrorString(r_, &s_);                                                 \
      fprintf(stderr, "%s:%d %s -> %s\n", __FILE__, __LINE__, #x, s_);           \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

enum { N = 10000, ROUNDS = 11 };
static CUfunction fe, fe_t, fe_t8, fe_tL, fe_tT, fe_tP, fe_tG, fe_tR, fe_tS, fe_tE, fe_tD, fe_tC, fe_tF, fe_tN, fe_tM, fe_tW, fe_t64, fe_t128, fe_tQ1, fe_tQ2, fe_tQ3, fres;
static CUdeviceptr slotsB_dev; /* batches of 256 slots, 67,584 bytes each (copied by "gt, 16 + copies" only) */
static CUdeviceptr slotsX_dev; /* groups of 16 launches, (1 + planes) lines each ("gt, 64 lines", "gt, 128 lines"; not copied) */
static CUdeviceptr slotsL_dev; /* N slots of 4224 bytes: start, 32 ends 128 bytes apart (not copied) */
static CUdeviceptr slots_dev; /* N slots of 16 bytes: start, blocks done */
static unsigned long long* slots_host; /* N x {start, end}, mapped */
static CUdeviceptr slots_host_dev;
static CUdeviceptr slots8_dev;          /* N slots of 72 bytes: start, 8 ends */
static unsigned long long* slots8_host; /* N x {start, end[8]} */
static CUdeviceptr counters; /* 65 counters 128 bytes apart, shared by the launches */
static unsigned char* slotsB_host;
static unsigned long long* marks_host;
static CUdeviceptr ones_dev;
static int timed_launch; /* launch() takes the timed kernel: 1 one end, 2 eight ends */
static unsigned timed_i;
static CUstream s;
static CUdeviceptr p, px, py;
static int saxpy; /* CUDA_TIMING_KERNEL=saxpy */
static int threaded; /* CUDA_TIMING_THREADED=1 */
static CUcontext g_ctx;
static CUevent evs[2 * N];

/* CUPTI, loaded at run time, declared here (a few calls of its C API). */
typedef int (*cupti_reg_t)(void (*)(uint8_t**, size_t*, size_t*),
                           void (*)(CUcontext, uint32_t, uint8_t*, size_t, size_t));
typedef int (*cupti_kind_t)(int);
typedef int (*cupti_flush_t)(uint32_t);
typedef int (*cupti_next_t)(uint8_t*, size_t, void**);
static cupti_reg_t cupti_reg;
static cupti_kind_t cupti_enable, cupti_disable;
static cupti_flush_t cupti_flush;
static cupti_next_t cupti_next;
typedef int (*cupti_push_t)(int, uint64_t);
typedef int (*cupti_pop_t)(int, uint64_t*);
static cupti_push_t cupti_push;
static cupti_pop_t cupti_pop;
static long cupti_records;
static double cupti_ns_sum;
static long cupti_ns_count;
static void buf_req(uint8_t** b, size_t* size, size_t* max) {
  *size = 8 << 20;
  *b = aligned_alloc(8, *size);
  *max = 0;
}
static void buf_done(CUcontext c, uint32_t sid, uint8_t* b, size_t size, size_t valid) {
  (void)c; (void)sid; (void)size;
  void* rec = NULL;
  while (cupti_next(b, valid, &rec) == 0) {
    cupti_records++;
    if (*(uint32_t*)rec == KIND_KERNEL) {
      uint64_t st, en;
      memcpy(&st, (char*)rec + 16, 8);
      memcpy(&en, (char*)rec + 24, 8);
      cupti_ns_sum += (double)(en - st);
      cupti_ns_count++;
    }
  }
  free(b);
}

/* The kernel of the form being measured (timed_launch; 0: untimed). */
static CUfunction timed_fn(void) {
  switch (timed_launch) {
    case 0: return fe;
    case 1: return fe_t;
    case 2: return fe_t8;
    case 3: return fe_tL;
    case 4: return fe_tT;
    case 5: return fe_tP;
    case 8: return fe_tR;
    case 9: return fe_tS;
    case 10: return fe_tE;
    case 11: return fe_tD;
    case 12: return fe_tC;
    case 13: return fe_tF;
    case 14: return fe_tN;
    case 15: return fe_tM;
    case 16: return fe_tW;
    case 17: return fe_t64;
    case 18: return fe_t128;
    case 19: return fe_tQ1;
    case 20: return fe_tQ2;
    case 21: return fe_tQ3;
    default: return fe_tG; /* 6, 7: "gt, 16 a line", "+ copies" */
  }
}

static void launch(void) {
  CUdeviceptr sd = 0, sh = 0;
  unsigned copy_from = 0, copy_n = 0;
  const unsigned long long slot_bytes = timed_launch == 2 ? 72 : timed_launch == 3 ? 4224 : 16;
  if (timed_launch) {
    unsigned i = timed_i++ % N;
    sd = (timed_launch == 2 ? slots8_dev : timed_launch == 3 ? slotsL_dev : slots_dev) + slot_bytes * i;
    if (timed_launch == 5) /* planes: starts, then 32 planes of ends, 2 KiB each */
      sd = slotsB_dev + 67584ull * (i / 256) + 8ull * (i % 256);
    if (timed_launch >= 6) /* groups of 16: a line of starts, 32 lines of ends */
      sd = slotsB_dev + 67584ull * (i / 256) + 4224ull * ((i % 256) / 16) + 8ull * (i % 16);
    if (timed_launch == 17 || timed_launch == 18) /* groups of 16: a line of starts, 64 or 128 lines of ends */
      sd = slotsX_dev + (timed_launch == 17 ? 8320ull : 16512ull) * (i / 16) + 8ull * (i % 16);
    /* Every 256 launches the stream copies their slots to the host ring. */
    if ((i + 1) % 256 == 0 || i + 1 == N) {
      copy_from = (i / 256) * 256;
      copy_n = i + 1 - copy_from;
    }
  }
  if (saxpy) {
    float a = 0.5f;
    int n = 1 << 20;
    void* args[] = {&px, &py, &a, &n, &sd, &sh, &counters};
    CK(cuLaunchKernel(timed_fn(), (1 << 20) / 256, 1, 1,
                      256, 1, 1, 0, s, args, 0));
  } else {
    void* args[] = {&p, &sd, &sh, &counters};
    CK(cuLaunchKernel(timed_fn(), 1, 1, 1, 32, 1, 1, 0,
                      s, args, 0));
  }
  if (copy_n && timed_launch == 7) {
    CK(cuMemcpyDtoHAsync(slotsB_host + 67584ull * (copy_from / 256), slotsB_dev + 67584ull * (copy_from / 256), 67584ull, s));
    CK(cuMemcpyDtoHAsync(marks_host + copy_from, ones_dev, 8ull * copy_n, s));
  }
  if (timed_launch == 3 || timed_launch >= 5) copy_n = 0; /* not copied (cost on the device only) */
  if (copy_n && timed_launch == 2)
    CK(cuMemcpyDtoHAsync(slots8_host + 9ull * copy_from, slots8_dev + 72ull * copy_from,
                         72ull * copy_n, s));
  else if (copy_n)
    CK(cuMemcpyDtoHAsync(slots_host + 2ull * copy_from, slots_dev + 16ull * copy_from,
                         16ull * copy_n, s));
}

/* The timer's step: one unit spinning on %globaltimer. */
static void timer_step(const char* when) {
  CUdeviceptr o;
  CK(cuMemAlloc(&o, 32));
  void* args[] = {&o};
  CK(cuLaunchKernel(fres, 1, 1, 1, 1, 1, 1, 0, s, args, 0));
  CK(cuStreamSynchronize(s));
  unsigned long long r[3];
  CK(cuMemcpyDtoH(r, o, sizeof(r)));
  CK(cuMemFree(o));
  printf("globaltimer %s: smallest step %llu ns, %llu changes in %llu ns of spinning\n", when, r[0],
         r[1], r[2]);
}

/* The threaded arrangement: the timing thread puts launch requests into a
 * ring of 1,024 (waiting while it is full), the launcher takes them in
 * order, makes the context current once and launches. */
enum { RING = 1024 };
static atomic_ulong ring_put, ring_got;
static atomic_int ring_mode = -1;
static void* launcher(void* arg) {
  (void)arg;
  CK(cuCtxSetCurrent(g_ctx));
  for (;;) {
    unsigned long got = atomic_load(&ring_got);
    while (atomic_load_explicit(&ring_put, memory_order_acquire) == got) {
      if (atomic_load(&ring_mode) == -2) return NULL;
      sched_yield();
    }
    CUcontext cur;
    CK(cuCtxGetCurrent(&cur));
    launch();
    atomic_store_explicit(&ring_got, got + 1, memory_order_release);
  }
}

/* mode 0: nothing; 1: one timing event after each launch; 2: a timing event
 * before and after each; 3: two events without timing; 4: CUPTI kernel records;
 * 5: CUPTI kernel records and an external correlation id pushed and popped
 * around each launch; 6: CUPTI kernel records and a cuCtxGetCurrent before
 * each launch (as cube's launch path makes); 7: the kernel times itself
 * (globaltimer, above); 8: the same with eight end words per slot. */
static double run(int mode) {
  double t0 = now();
  timed_launch = mode >= 7 ? mode - 6 : 0;
  if (threaded && (mode == 0 || mode == 4 || mode >= 7)) {
    for (int i = 0; i < N; i++) {
      while (atomic_load(&ring_put) - atomic_load_explicit(&ring_got, memory_order_acquire) >= RING)
        sched_yield();
      atomic_fetch_add_explicit(&ring_put, 1, memory_order_release);
    }
    while (atomic_load_explicit(&ring_got, memory_order_acquire) != atomic_load(&ring_put))
      sched_yield();
    CK(cuStreamSynchronize(s));
    double t = now() - t0;
    if (mode >= 4 && mode <= 6) cupti_flush(1);
    timed_launch = 0;
    return t;
  }
  for (int i = 0; i < N; i++) {
    if (mode == 2 || mode == 3) CK(cuEventRecord(evs[2 * i], s));
    if (mode == 5) cupti_push(CORRELATION_CUSTOM0, (uint64_t)i + 1);
    if (mode == 6) {
      CUcontext cur;
      CK(cuCtxGetCurrent(&cur));
    }
    launch();
    if (mode == 5) {
      uint64_t id;
      cupti_pop(CORRELATION_CUSTOM0, &id);
    }
    if (mode >= 1 && mode <= 3) CK(cuEventRecord(evs[2 * i + 1], s));
  }
  CK(cuStreamSynchronize(s));
  double t = now() - t0;
  if (mode >= 4 && mode <= 6) cupti_flush(1);
  timed_launch = 0;
  return t;
}

/* CUDA_TIMING_MODES: the modes to run, a comma list of their numbers (0,
 * none, always runs); unset, all. */
static int mode_wanted(int mode) {
  const char* e = getenv("CUDA_TIMING_MODES");
  if (!e || !*e || mode == 0) return 1;
  for (const char* q = e; *q;) {
    char* end;
    long v = strtol(q, &end, 10);
    if (end == q) break;
    if (v == mode) return 1;
    q = *end == ',' ? end + 1 : end;
  }
  return 0;
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(void) {
  CK(cuInit(0));
  CUdevice d;
  CK(cuDeviceGet(&d, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, d));
  CK(cuCtxSetCurrent(ctx));
  g_ctx = ctx;
  const char* ks = getenv("CUDA_TIMING_KERNEL");
  saxpy = ks && strcmp(ks, "saxpy") == 0;
  const char* th = getenv("CUDA_TIMING_THREADED");
  threaded = th && th[0] == '1';
  const char* timer_src =
      "static __device__ __forceinline__ unsigned long long gt(void) {\n"
      "  unsigned long long t; asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t)); return t; }\n"
      "struct slot { unsigned long long start, end; };\n"
      "struct timer {\n"
      "  slot* d;\n"
      "  __device__ timer(slot* d_) : d(d_) {\n"
      "    if (d && (threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x | blockIdx.y | blockIdx.z) == 0)\n"
      "      d->start = gt(); }\n"
      "  __device__ ~timer() {\n"
      "    if (d && (threadIdx.x | threadIdx.y | threadIdx.z) == 0) atomicMax(&d->end, gt()); } };\n"
      "struct slot8 { unsigned long long start, end[8]; };\n"
      "struct timer8 {\n"
      "  slot8* d;\n"
      "  __device__ timer8(slot8* d_) : d(d_) {\n"
      "    if (d && (threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x | blockIdx.y | blockIdx.z) == 0)\n"
      "      d->start = gt(); }\n"
      "  __device__ ~timer8() {\n"
      "    if (d && (threadIdx.x | threadIdx.y | threadIdx.z) == 0) atomicMax(&d->end[blockIdx.x & 7], gt()); } };\n"
      "struct slotL { unsigned long long start, pad[15], end[32][16]; };\n"
      "struct timerL {\n"
      "  slotL* d;\n"
      "  __device__ timerL(slotL* d_) : d(d_) {\n"
      "    if (d && (threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x | blockIdx.y | blockIdx.z) == 0)\n"
      "      d->start = gt(); }\n"
      "  __device__ ~timerL() {\n"
      "    if (d && (threadIdx.x | threadIdx.y | threadIdx.z) == 0) atomicMax(&d->end[blockIdx.x & 31][0], gt()); } };\n"
      "struct timerT {\n"
      "  slot* d;\n"
      "  __device__ timerT(slot* d_) : d(d_) {\n"
      "    if (d && (threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x | blockIdx.y | blockIdx.z) == 0)\n"
      "      d->start = gt(); }\n"
      "  __device__ ~timerT() {\n"
      "    if (d && (threadIdx.x | threadIdx.y | threadIdx.z) == 0 && blockIdx.x + 256 >= gridDim.x)\n"
      "      atomicMax(&d->end, gt()); } };\n"
      "template <unsigned STRIDE, int START = 1, int END = 1, unsigned PLANES = 32> struct timerS {\n"
      "  unsigned long long* d; unsigned long long t0;\n"
      "  __device__ timerS(unsigned long long* d_) : d(d_), t0(0) {\n"
      "    if (START && d && (threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x | blockIdx.y | blockIdx.z) == 0) {\n"
      "      if (START == 2) t0 = gt(); else if (START == 3) d[0] = 1ull; else if (START == 4) asm volatile(\"\");\n"
      "      else if (START == 5) atomicMax(d, gt());\n"
      "      else if (START == 6) asm volatile(\"st.global.cs.u64 [%0], %1;\" :: \"l\"(d), \"l\"(gt()) : \"memory\");\n"
      "      else d[0] = gt(); } }\n"
      "  __device__ ~timerS() {\n"
      "    if (START == 2 && d && (threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x | blockIdx.y | blockIdx.z) == 0)\n"
      "      d[0] = t0;\n"
      "    if (END && d && (threadIdx.x | threadIdx.y | threadIdx.z) == 0) {\n"
      "      if (END == 2) atomicMax(d + STRIDE * (1u + (blockIdx.x & 31u)), 1ull);\n"
      "      else if (END == 3) asm volatile(\"\");\n"
      "      else atomicMax(d + STRIDE * (1u + (blockIdx.x & (PLANES - 1u))), gt()); } } };\n"
      "static __device__ __forceinline__ unsigned s_yz(void) { unsigned y, z;\n"
      "  asm volatile(\"mov.u32 %0, %%tid.y;\" : \"=r\"(y)); asm volatile(\"mov.u32 %0, %%tid.z;\" : \"=r\"(z)); return y | z; }\n"
      "static __device__ __forceinline__ unsigned c_yz(void) { unsigned y, z;\n"
      "  asm volatile(\"mov.u32 %0, %%ctaid.y;\" : \"=r\"(y)); asm volatile(\"mov.u32 %0, %%ctaid.z;\" : \"=r\"(z)); return y | z; }\n"
      "template <int TESTS> struct timerQ {\n"
      "  unsigned long long* d;\n"
      "  __device__ timerQ(unsigned long long* d_) : d(d_) {\n"
      "    if (!d || (threadIdx.x | blockIdx.x) != 0) return;\n"
      "    if (TESTS == 1 && (threadIdx.y | threadIdx.z | blockIdx.y | blockIdx.z) != 0) return;\n"
      "    if (TESTS == 2 && (s_yz() | c_yz()) != 0) return;\n"
      "    d[0] = gt(); }\n"
      "  __device__ ~timerQ() {\n"
      "    if (!d || threadIdx.x != 0) return;\n"
      "    if (TESTS == 1 && (threadIdx.y | threadIdx.z) != 0) return;\n"
      "    if (TESTS == 2 && s_yz() != 0) return;\n"
      "    atomicMax(d + 16u * (1u + (blockIdx.x & 31u)), gt()); } };\n"
      "struct timerR {\n"
      "  unsigned long long* d;\n"
      "  __device__ timerR(unsigned long long* d_) : d(d_) {\n"
      "    if (d && (threadIdx.x | threadIdx.y | threadIdx.z | blockIdx.x | blockIdx.y | blockIdx.z) == 0)\n"
      "      d[0] = gt(); }\n"
      "  __device__ ~timerR() {\n"
      "    if (d && (threadIdx.x | threadIdx.y | threadIdx.z) == 0)\n"
      "      asm volatile(\"red.max.u64 [%0], %1;\" :: \"l\"(d + 16u * (1u + (blockIdx.x & 31u))), \"l\"(gt()) : \"memory\"); } };\n"
      "extern \"C\" __global__ void res(unsigned long long* out) {\n"
      "  unsigned long long first = gt(), last = first, mind = ~0ull, ch = 0;\n"
      "  for (int i = 0; i < 200000; i++) { unsigned long long t = gt();\n"
      "    if (t != last) { if (t - last < mind) mind = t - last; ch++; last = t; } }\n"
      "  out[0] = mind; out[1] = ch; out[2] = last - first; }\n";
  const char* ksrc = saxpy ? "extern \"C\" __global__ void empty(const float* x, float* y, float a, int n, slot* d, unsigned long long* h, unsigned* c)"
                             "{int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_t(const float* x, float* y, float a, int n, slot* d, unsigned long long* h, unsigned* c)"
                             "{timer t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_t8(const float* x, float* y, float a, int n, slot8* d, unsigned long long* h, unsigned* c)"
                             "{timer8 t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_tL(const float* x, float* y, float a, int n, slotL* d, unsigned long long* h, unsigned* c)"
                             "{timerL t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_tT(const float* x, float* y, float a, int n, slot* d, unsigned long long* h, unsigned* c)"
                             "{timerT t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_tP(const float* x, float* y, float a, int n, unsigned long long* d, unsigned long long* h, unsigned* c)"
                             "{timerS<256> t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_tG(const float* x, float* y, float a, int n, unsigned long long* d, unsigned long long* h, unsigned* c)"
                             "{timerS<16> t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_tR(const float* x, float* y, float a, int n, unsigned long long* d, unsigned long long* h, unsigned* c)"
                             "{timerR t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_tS(const float* x, float* y, float a, int n, unsigned long long* d, unsigned long long* h, unsigned* c)"
                             "{timerS<16, 1, 0> t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_tE(const float* x, float* y, float a, int n, unsigned long long* d, unsigned long long* h, unsigned* c)"
                             "{timerS<16, 0, 1> t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_tD(const float* x, float* y, float a, int n, unsigned long long* d, unsigned long long* h, unsigned* c)"
                             "{timerS<16, 2, 1> t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_tN(const float* x, float* y, float a, int n, unsigned long long* d, unsigned long long* h, unsigned* c)"
                             "{timerS<16, 4, 3> t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_tW(const float* x, float* y, float a, int n, unsigned long long* d, unsigned long long* h, unsigned* c)"
                             "{timerS<16, 6, 1> t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_t64(const float* x, float* y, float a, int n, unsigned long long* d, unsigned long long* h, unsigned* c)"
                             "{timerS<16, 1, 1, 64> t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_t128(const float* x, float* y, float a, int n, unsigned long long* d, unsigned long long* h, unsigned* c)"
                             "{timerS<16, 1, 1, 128> t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_tM(const float* x, float* y, float a, int n, unsigned long long* d, unsigned long long* h, unsigned* c)"
                             "{timerS<16, 5, 1> t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_tF(const float* x, float* y, float a, int n, unsigned long long* d, unsigned long long* h, unsigned* c)"
                             "{timerS<16, 0, 2> t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_tQ1(const float* x, float* y, float a, int n, unsigned long long* d, unsigned long long* h, unsigned* c)"
                             "{timerQ<1> t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_tQ2(const float* x, float* y, float a, int n, unsigned long long* d, unsigned long long* h, unsigned* c)"
                             "{timerQ<2> t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_tQ3(const float* x, float* y, float a, int n, unsigned long long* d, unsigned long long* h, unsigned* c)"
                             "{timerQ<3> t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                             "extern \"C\" __global__ void empty_tC(const float* x, float* y, float a, int n, unsigned long long* d, unsigned long long* h, unsigned* c)"
                             "{timerS<16, 3, 0> t_(d); int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = a * x[i] + y[i];}\n"
                           : "extern \"C\" __global__ void empty(float* p, slot* d, unsigned long long* h, unsigned* c){}\n"
                             "extern \"C\" __global__ void empty_t(float* p, slot* d, unsigned long long* h, unsigned* c){timer t_(d);}\n"
                             "extern \"C\" __global__ void empty_t8(float* p, slot8* d, unsigned long long* h, unsigned* c){timer8 t_(d);}\n"
                             "extern \"C\" __global__ void empty_tL(float* p, slotL* d, unsigned long long* h, unsigned* c){timerL t_(d);}\n"
                             "extern \"C\" __global__ void empty_tT(float* p, slot* d, unsigned long long* h, unsigned* c){timerT t_(d);}\n"
                             "extern \"C\" __global__ void empty_tP(float* p, unsigned long long* d, unsigned long long* h, unsigned* c){timerS<256> t_(d);}\n"
                             "extern \"C\" __global__ void empty_tG(float* p, unsigned long long* d, unsigned long long* h, unsigned* c){timerS<16> t_(d);}\n"
                             "extern \"C\" __global__ void empty_tR(float* p, unsigned long long* d, unsigned long long* h, unsigned* c){timerR t_(d);}\n"
                             "extern \"C\" __global__ void empty_tS(float* p, unsigned long long* d, unsigned long long* h, unsigned* c){timerS<16, 1, 0> t_(d);}\n"
                             "extern \"C\" __global__ void empty_tE(float* p, unsigned long long* d, unsigned long long* h, unsigned* c){timerS<16, 0, 1> t_(d);}\n"
                             "extern \"C\" __global__ void empty_tD(float* p, unsigned long long* d, unsigned long long* h, unsigned* c){timerS<16, 2, 1> t_(d);}\n"
                             "extern \"C\" __global__ void empty_tN(float* p, unsigned long long* d, unsigned long long* h, unsigned* c){timerS<16, 4, 3> t_(d);}\n"
                             "extern \"C\" __global__ void empty_tW(float* p, unsigned long long* d, unsigned long long* h, unsigned* c){timerS<16, 6, 1> t_(d);}\n"
                             "extern \"C\" __global__ void empty_t64(float* p, unsigned long long* d, unsigned long long* h, unsigned* c){timerS<16, 1, 1, 64> t_(d);}\n"
                             "extern \"C\" __global__ void empty_t128(float* p, unsigned long long* d, unsigned long long* h, unsigned* c){timerS<16, 1, 1, 128> t_(d);}\n"
                             "extern \"C\" __global__ void empty_tM(float* p, unsigned long long* d, unsigned long long* h, unsigned* c){timerS<16, 5, 1> t_(d);}\n"
                             "extern \"C\" __global__ void empty_tF(float* p, unsigned long long* d, unsigned long long* h, unsigned* c){timerS<16, 0, 2> t_(d);}\n"
                             "extern \"C\" __global__ void empty_tQ1(float* p, unsigned long long* d, unsigned long long* h, unsigned* c){timerQ<1> t_(d);}\n"
                             "extern \"C\" __global__ void empty_tQ2(float* p, unsigned long long* d, unsigned long long* h, unsigned* c){timerQ<2> t_(d);}\n"
                             "extern \"C\" __global__ void empty_tQ3(float* p, unsigned long long* d, unsigned long long* h, unsigned* c){timerQ<3> t_(d);}\n"
                             "extern \"C\" __global__ void empty_tC(float* p, unsigned long long* d, unsigned long long* h, unsigned* c){timerS<16, 3, 0> t_(d);}\n";
  char* src = malloc(strlen(timer_src) + strlen(ksrc) + 1);
  strcpy(src, timer_src);
  strcat(src, ksrc);
  nvrtcProgram prog;
  nvrtcCreateProgram(&prog, src, "k.cu", 0, 0, 0);
  const char* opts[] = {"--gpu-architecture=sm_90"};
  if (nvrtcCompileProgram(prog, 1, opts)) {
    size_t ls;
    nvrtcGetProgramLogSize(prog, &ls);
    char* lg = malloc(ls + 1);
    nvrtcGetProgramLog(prog, lg);
    fprintf(stderr, "nvrtc: %s\n", lg);
    return 1;
  }
  size_t sz;
  nvrtcGetCUBINSize(prog, &sz);
  char* cubin = malloc(sz);
  nvrtcGetCUBIN(prog, cubin);
  CUmodule m;
  CK(cuModuleLoadData(&m, cubin));
  CK(cuModuleGetFunction(&fe, m, "empty"));
  CK(cuModuleGetFunction(&fe_t, m, "empty_t"));
  CK(cuModuleGetFunction(&fe_t8, m, "empty_t8"));
  CK(cuModuleGetFunction(&fe_tL, m, "empty_tL"));
  CK(cuModuleGetFunction(&fe_tT, m, "empty_tT"));
  CK(cuModuleGetFunction(&fe_tP, m, "empty_tP"));
  CK(cuModuleGetFunction(&fe_tG, m, "empty_tG"));
  CK(cuModuleGetFunction(&fe_tR, m, "empty_tR"));
  CK(cuModuleGetFunction(&fe_tS, m, "empty_tS"));
  CK(cuModuleGetFunction(&fe_tE, m, "empty_tE"));
  CK(cuModuleGetFunction(&fe_tD, m, "empty_tD"));
  CK(cuModuleGetFunction(&fe_tC, m, "empty_tC"));
  CK(cuModuleGetFunction(&fe_tF, m, "empty_tF"));
  CK(cuModuleGetFunction(&fe_tN, m, "empty_tN"));
  CK(cuModuleGetFunction(&fe_tM, m, "empty_tM"));
  CK(cuModuleGetFunction(&fe_tW, m, "empty_tW"));
  CK(cuModuleGetFunction(&fe_t64, m, "empty_t64"));
  CK(cuModuleGetFunction(&fe_t128, m, "empty_t128"));
  CK(cuModuleGetFunction(&fe_tQ1, m, "empty_tQ1"));
  CK(cuModuleGetFunction(&fe_tQ2, m, "empty_tQ2"));
  CK(cuModuleGetFunction(&fe_tQ3, m, "empty_tQ3"));
  CK(cuMemAlloc(&slotsB_dev, 67584ull * ((N + 255) / 256)));
  CK(cuMemsetD32(slotsB_dev, 0, 16896ull * ((N + 255) / 256)));
  CK(cuMemHostAlloc((void**)&slotsB_host, 67584ull * ((N + 255) / 256), 0));
  CK(cuMemHostAlloc((void**)&marks_host, 8ull * N, 0));
  CK(cuMemAlloc(&ones_dev, 8 * 256));
  CK(cuMemsetD32(ones_dev, 1, 2 * 256));
  CK(cuMemAlloc(&slotsX_dev, 16512ull * (N / 16 + 1)));
  CK(cuMemsetD32(slotsX_dev, 0, 4128ull * (N / 16 + 1)));
  CK(cuMemAlloc(&slotsL_dev, 4224ull * N));
  CK(cuMemsetD32(slotsL_dev, 0, 1056ull * N));
  CK(cuModuleGetFunction(&fres, m, "res"));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuMemAlloc(&p, 1 << 20));
  CK(cuMemAlloc(&px, 4 << 20));
  CK(cuMemAlloc(&py, 4 << 20));
  CK(cuMemsetD32(px, 0, 1 << 20));
  CK(cuMemsetD32(py, 0, 1 << 20));
  CK(cuMemAlloc(&counters, 65 * 128));
  CK(cuMemsetD32(counters, 0, 65 * 32));
  CK(cuMemAlloc(&slots_dev, 16ull * N));
  CK(cuMemsetD32(slots_dev, 0, 4 * N));
  CK(cuMemHostAlloc((void**)&slots_host, 16ull * N, CU_MEMHOSTALLOC_DEVICEMAP));
  memset(slots_host, 0, 16ull * N);
  CK(cuMemHostGetDevicePointer(&slots_host_dev, slots_host, 0));
  CK(cuMemAlloc(&slots8_dev, 72ull * N));
  CK(cuMemsetD32(slots8_dev, 0, 18 * N));
  CK(cuMemHostAlloc((void**)&slots8_host, 72ull * N, 0));
  memset(slots8_host, 0, 72ull * N);
  timer_step("alone");
  pthread_t lt;
  if (threaded) pthread_create(&lt, NULL, launcher, NULL);
  const char* names[] = {"none", "event after", "events around", "events no timing", "cupti",
                         "cupti + correlation", "cupti + ctx query", "globaltimer",
                         "globaltimer, 8 ends", "gt, 32 lines", "gt, last 256",
                         "gt, 32 x 2 KiB", "gt, 16 a line", "gt, 16 + copies", "gt, 16 generic",
                         "gt, 16 start only", "gt, 16 end only", "gt, 16 late start",
                         "gt, 16 start const", "gt, 16 end const", "gt, 16 tests only",
                         "gt, 16 start by max", "gt, 16 start .cs", "gt, 64 lines",
                         "gt, 128 lines", "gt, 16 nested tests", "gt, 16 nested, asm",
                         "gt, 16 x tests (1-D)"};
  int modes = 4;
  int timer_mode = 21; /* modes 7 to 27 are run (CUDA_TIMING_MODES: a comma list of them, none always) */
  const char* libs[] = {"libcupti.so", "libcupti.so.13", "libcupti.so.12",
                        "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
                        "/usr/local/cuda/lib64/libcupti.so"};
  void* h = NULL;
  for (unsigned i = 0; i < sizeof(libs) / sizeof(libs[0]) && !h; i++) h = dlopen(libs[i], RTLD_NOW);
  if (h) {
    cupti_reg = (cupti_reg_t)dlsym(h, "cuptiActivityRegisterCallbacks");
    cupti_enable = (cupti_kind_t)dlsym(h, "cuptiActivityEnable");
    cupti_disable = (cupti_kind_t)dlsym(h, "cuptiActivityDisable");
    cupti_flush = (cupti_flush_t)dlsym(h, "cuptiActivityFlushAll");
    cupti_next = (cupti_next_t)dlsym(h, "cuptiActivityGetNextRecord");
    cupti_push = (cupti_push_t)dlsym(h, "cuptiActivityPushExternalCorrelationId");
    cupti_pop = (cupti_pop_t)dlsym(h, "cuptiActivityPopExternalCorrelationId");
    /* CUDA_TIMING_HW_TRACE=1: CUPTI's hardware trace asked for first. */
    const char* hw = getenv("CUDA_TIMING_HW_TRACE");
    int (*hw_trace)(uint8_t) = NULL;
    *(void**)&hw_trace = dlsym(h, "cuptiActivityEnableHWTrace");
    if (hw && hw[0] == '1') {
      if (hw_trace) printf("cuptiActivityEnableHWTrace(1): %d\n", hw_trace(1));
      else printf("cuptiActivityEnableHWTrace: absent\n");
    }
    if (cupti_reg && cupti_enable && cupti_flush && cupti_next && cupti_disable &&
        cupti_push && cupti_pop && cupti_reg(buf_req, buf_done) == 0)
      modes = 7;
    else
      printf("cupti: found but not usable\n");
  } else {
    printf("cupti: not found (%s)\n", dlerror());
  }
  for (int i = 0; i < 2 * N; i++) CK(cuEventCreate(&evs[i], CU_EVENT_DEFAULT));
  for (int i = 0; i < 1000; i++) launch();
  CK(cuStreamSynchronize(s));
  if (modes == 7) {
    cupti_enable(KIND_KERNEL);
    timer_step("with CUPTI's kernel records on");
    cupti_disable(KIND_KERNEL);
    cupti_flush(1);
    cupti_records = 0;
    cupti_ns_sum = 0;
    cupti_ns_count = 0;
  }
  double t[28][ROUNDS];
  double timerT_ns_sum = 0;
  long timerT_ns_count = 0, timerT_bad = 0;
  double timer_ns_sum = 0, timer8_ns_sum = 0;
  long timer_ns_count = 0, timer_bad = 0, timer8_ns_count = 0, timer8_bad = 0;
  int all = modes + timer_mode;
  for (int r = 0; r < ROUNDS; r++) {
    for (int k = 0; k < all; k++) {
      int idx = (r % 2) ? all - 1 - k : k;
      int mode = idx < modes ? idx : 7 + (idx - modes);
      if (threaded && mode != 0 && mode != 4 && mode < 7) continue;
      if (!mode_wanted(mode)) continue;
      if (mode == 3 && r == 0) {
        for (int i = 0; i < 2 * N; i++) {
          CK(cuEventDestroy(evs[i]));
          CK(cuEventCreate(&evs[i], CU_EVENT_DEFAULT));
        }
      }
      if (mode >= 4 && mode <= 6) cupti_enable(KIND_KERNEL);
      if (mode == 5) cupti_enable(KIND_CORRELATION);
      CUevent* keep = NULL;
      if (mode == 3) {
        /* events without timing: a second set */
        static CUevent nt[2 * N];
        static int made;
        if (!made) {
          for (int i = 0; i < 2 * N; i++) CK(cuEventCreate(&nt[i], CU_EVENT_DISABLE_TIMING));
          made = 1;
        }
        keep = malloc(sizeof(evs));
        memcpy(keep, evs, sizeof(evs));
        memcpy(evs, nt, sizeof(evs));
      }
      t[mode][r] = run(mode);
      if (mode == 7) {
        for (int i = 0; i < N; i++) {
          unsigned long long st = slots_host[2 * i], en = slots_host[2 * i + 1];
          if (en == 0 || st == 0 || en < st) {
            timer_bad++;
          } else {
            timer_ns_sum += (double)(en - st);
            timer_ns_count++;
          }
        }
        memset(slots_host, 0, 16ull * N);
      }
      if (mode == 10) {
        for (int i = 0; i < N; i++) {
          unsigned long long st = slots_host[2 * i], en = slots_host[2 * i + 1];
          if (en == 0 || st == 0 || en < st) {
            timerT_bad++;
          } else {
            timerT_ns_sum += (double)(en - st);
            timerT_ns_count++;
          }
        }
        memset(slots_host, 0, 16ull * N);
      }
      if (mode == 8) {
        for (int i = 0; i < N; i++) {
          unsigned long long st = slots8_host[9 * i], en = 0;
          for (int e = 0; e < 8; e++)
            if (slots8_host[9 * i + 1 + e] > en) en = slots8_host[9 * i + 1 + e];
          if (en == 0 || st == 0 || en < st) {
            timer8_bad++;
          } else {
            timer8_ns_sum += (double)(en - st);
            timer8_ns_count++;
          }
        }
        memset(slots8_host, 0, 72ull * N);
      }
      if (keep) {
        memcpy(evs, keep, sizeof(evs));
        free(keep);
      }
      if (mode >= 4 && mode <= 6) cupti_disable(KIND_KERNEL);
      if (mode == 5) cupti_disable(KIND_CORRELATION);
    }
  }
  if (threaded) {
    atomic_store(&ring_mode, -2);
    pthread_join(lt, NULL);
  }
  printf("10,000 %s launches + sync%s, %d alternating rounds: us per launch, median (min-max), ratio to none\n",
         saxpy ? "saxpy (2^20 floats)" : "empty", threaded ? " (a launcher thread fed through a ring; none, cupti and globaltimer only)" : "", ROUNDS);
  double base = 0;
  for (int k = 0; k < 28; k++) {
    if (k >= modes && k < 7) continue;
    if (threaded && k != 0 && k != 4 && k < 7) continue;
    if (!mode_wanted(k)) continue;
    double v[ROUNDS];
    memcpy(v, t[k], sizeof(v));
    qsort(v, ROUNDS, sizeof(double), cmp);
    double med = v[ROUNDS / 2];
    if (k == 0) base = med;
    printf("  %-22s %.3f (%.3f-%.3f)  %.3fx\n", names[k], med / N * 1e6, v[0] / N * 1e6,
           v[ROUNDS - 1] / N * 1e6, med / base);
  }
  printf("  kernel duration, mean: globaltimer %.0f ns over %ld launches (%ld slots not written)",
         timer_ns_count ? timer_ns_sum / timer_ns_count : 0.0, timer_ns_count, timer_bad);
  printf("; globaltimer, 8 ends %.0f ns over %ld launches (%ld not written)",
         timer8_ns_count ? timer8_ns_sum / timer8_ns_count : 0.0, timer8_ns_count, timer8_bad);
  printf("; last 256 %.0f ns over %ld (%ld not written)",
         timerT_ns_count ? timerT_ns_sum / timerT_ns_count : 0.0, timerT_ns_count, timerT_bad);
  if (modes == 7)
    printf(", CUPTI %.0f ns over %ld records", cupti_ns_count ? cupti_ns_sum / cupti_ns_count : 0.0,
           cupti_ns_count);
  printf("\n");
  if (modes == 7) printf("  cupti records delivered: %ld (expected %d: a kernel record per launch, a correlation record per launch of mode 5)\n", cupti_records, (threaded ? 1 : 4) * ROUNDS * N);
  return 0;
}
