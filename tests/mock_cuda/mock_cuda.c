/* A stand-in for the CUDA driver (libcuda.so.1) that runs on the CPU, so that
 * the CUDA backend's memory, staging, stream and event paths run in CI with no
 * GPU. Loaded by cube through CUBE_CUDA_DRIVER=<path of this library>.
 *
 * What it models, on purpose close to the real driver where cube depends on it:
 *  - device memory is host memory (a CUdeviceptr is an address), counted
 *    against CUBE_MOCK_CUDA_MEMORY bytes (default 1 GiB): over it,
 *    CUDA_ERROR_OUT_OF_MEMORY;
 *  - every stream is a thread running its operations in order, each after an
 *    optional delay (CUBE_MOCK_CUDA_DELAY_US), so work really is asynchronous:
 *    host-to-device copies wait CUBE_MOCK_CUDA_H2D_DELAY_US more (uploads
 *    land late, deterministically); a pinned source is read when the copy runs (reusing it early corrupts the
 *    copy, as on a GPU); a pageable source is staged at the call; a copy into
 *    pageable memory returns when done; events complete when the stream
 *    reaches them; cuStreamWaitEvent blocks the stream until the event's
 *    record it names (the last one when it was called) completed;
 *  - cuMemFreeAsync frees when the stream reaches it;
 *  - modules load anything; cuLaunchKernel runs nothing and returns
 *    CUDA_ERROR_NOT_SUPPORTED (kernels need a GPU);
 *  - graphs of kernel, empty, host-to-device copy and 1-D device-to-device
 *    copy nodes in a chain; a launch queues the copies in order and counts
 *    the kernels as launches;
 *  - cuLaunchHostFunc runs its function on the stream's thread, in order
 *    (how the mock NCCL of tests/mock_nccl queues its work);
 *  - CUBE_MOCK_CUDA_DEVICES (default 1) devices; CUBE_MOCK_CUDA_FUNC_MAX_THREADS
 *    threads per block for every function (default the device's 1024).
 * Counters for tests: cube_mock_cuda_stats(); fault injection:
 * cube_mock_cuda_fail(), and faults that poison a device's context as a GPU's
 * do: cube_mock_cuda_fail_sticky().
 *
 * The same library stands in for NVRTC (a "compile" keeps the source as the
 * cubin: loaded through CUBE_NVRTC=<this library>) and for CUPTI's activity
 * API (kernel records of launches on streams, through CUBE_CUPTI=<this
 * library>): see the end of the file.
 */
#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../src/backends/cuda/cuda_timing_layout.h"

#define MOCK_API __attribute__((visibility("default")))
#define MOCK_MAX_DEVICES 8

typedef struct mock_op mock_op_t;
/* One record of an event: a wait names the record that was the event's last
 * when the wait was queued, as the driver's does, so recording the event
 * again (on another stream, which may reach it first) does not release it.
 * Guarded by its event's lock. */
typedef struct mock_mark {
  bool done;
  int refs; /* the event's (while it is its last record) + queued operations */
} mock_mark_t;

static void mock_mark_unref(mock_mark_t* m) {
  if (m && --m->refs == 0) free(m);
}

typedef struct mock_event {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  mock_mark_t* last; /* the last record (NULL: never recorded) */
  uint64_t recorded; /* generation asked for by the last record */
  uint64_t reached;  /* generation the stream reached */
  uint64_t ns;       /* when it was reached */
  int refs;          /* the user's + queued operations naming it */
  struct mock_event *prev_all, *next_all; /* every live event (mock_events_lock) */
} mock_event_t;
/* Every live event, so that events a program never destroys (those of a lost
 * device) are still reachable, as the driver's are until exit. */
static pthread_mutex_t mock_events_lock = PTHREAD_MUTEX_INITIALIZER;
static mock_event_t* mock_events;

typedef enum { OP_COPY, OP_COPY2D, OP_MEMSET32, OP_EVENT, OP_WAIT, OP_FREE, OP_HOST } mock_kind_t;

struct mock_op {
  mock_op_t* next;
  mock_kind_t kind;
  void* dst;
  const void* src;
  size_t n;
  size_t dpitch, spitch, width, height;
  uint32_t value;
  void* owned; /* staged source, freed after the op */
  mock_event_t* event;
  mock_mark_t* mark; /* OP_EVENT: the record; OP_WAIT: the record it waits for */
  uint64_t generation;
  atomic_bool* done; /* set after the op, for synchronous calls */
  CUhostFn fn;       /* OP_HOST: runs on the stream's thread (cuLaunchHostFunc) */
  void* user;
  bool h2d;          /* a host-to-device copy (CUBE_MOCK_CUDA_H2D_DELAY_US) */
};

typedef struct mock_stream {
  int device;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond, idle;
  mock_op_t *head, *tail;
  bool busy, stop;
  uint32_t cupti_id; /* the stream's id in the mock CUPTI's records */
  struct mock_stream* next_all;
} mock_stream_t;

static atomic_uint mock_stream_ids;
/* The mock CUPTI (end of the file): a launch queues its kernel record. */
static void mock_cupti_launch(mock_stream_t* s, CUfunction f, unsigned gx, unsigned gy,
                              unsigned gz);

static struct {
  pthread_mutex_t lock;
  int devices;
  uint64_t memory;
  uint64_t used[MOCK_MAX_DEVICES];
  unsigned delay_us, h2d_delay_us;
  mock_stream_t* streams;
  int ctx_tag[MOCK_MAX_DEVICES];
  /* What cuMemGetInfo counts besides |used| (as a driver does): the primary
   * context once retained (CUBE_MOCK_CUDA_CONTEXT_BYTES, default 8 MiB) and
   * MOCK_MODULE_BYTES per loaded module. */
  bool ctx_retained[MOCK_MAX_DEVICES];
  uint64_t ctx_bytes;
  uint64_t modules[MOCK_MAX_DEVICES];
  /* pinned allocations: a small table */
  struct { char* p; size_t n; int device; } pinned[4096];
  int pinned_count;
  atomic_uint_fast64_t copies, bytes_h2d, bytes_d2h, async_allocs, async_frees, launches;
} mock = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local int mock_current = -1;      /* device of the current context, -1: none or foreign */
static _Thread_local CUcontext mock_current_ctx; /* as set, foreign ones included */

#define MOCK_MODULE_BYTES (64ull << 10)

/* Device allocations: size kept in a header before the block. */
typedef struct mock_hdr { struct mock_hdr *prev, *next; uint64_t size; int device; int magic; } mock_hdr_t;
/* Every live block (mock.lock), so that blocks a program never frees (those of
 * a lost device) are still reachable, as the driver's are until exit. */
static mock_hdr_t mock_blocks = {&mock_blocks, &mock_blocks, 0, 0, 0};
#define MOCK_MAGIC 0x6d6f636b

static uint64_t mock_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static bool mock_is_pinned(const void* p) {
  pthread_mutex_lock(&mock.lock);
  bool found = false;
  for (int i = 0; i < mock.pinned_count && !found; ++i)
    found = (const char*)p >= mock.pinned[i].p && (const char*)p < mock.pinned[i].p + mock.pinned[i].n;
  pthread_mutex_unlock(&mock.lock);
  return found;
}

static void mock_free_now(void* block) {
  mock_hdr_t* hdr = (mock_hdr_t*)block - 1;
  pthread_mutex_lock(&mock.lock);
  mock.used[hdr->device] -= hdr->size;
  hdr->prev->next = hdr->next;
  hdr->next->prev = hdr->prev;
  pthread_mutex_unlock(&mock.lock);
  hdr->magic = 0;
  free((char*)block - 512);
}
static void mock_event_unref(mock_event_t* ev) {
  pthread_mutex_lock(&ev->lock);
  int left = --ev->refs;
  pthread_mutex_unlock(&ev->lock);
  if (left) return;
  pthread_mutex_lock(&mock_events_lock);
  if (ev->prev_all) ev->prev_all->next_all = ev->next_all;
  else mock_events = ev->next_all;
  if (ev->next_all) ev->next_all->prev_all = ev->prev_all;
  pthread_mutex_unlock(&mock_events_lock);
  mock_mark_unref(ev->last);
  pthread_mutex_destroy(&ev->lock);
  pthread_cond_destroy(&ev->cond);
  free(ev);
}

static bool mock_trace;
static bool mock_launch_ok;

static void mock_run(mock_op_t* op) {
  if (mock.delay_us) usleep(mock.delay_us);
  if (op->h2d && mock.h2d_delay_us) usleep(mock.h2d_delay_us);
  if (mock_trace)
    fprintf(stderr, "mock: %llu us: op %d dst %p src %p n %zu\n",
            (unsigned long long)(mock_now_ns() / 1000 % 100000000), (int)op->kind, op->dst, op->src,
            op->n ? op->n : op->width * op->height);
  switch (op->kind) {
    case OP_COPY:
      if ((uintptr_t)op->dst % 8 == 0 && (uintptr_t)op->src % 8 == 0 && op->n % 8 == 0 &&
          op->n <= (1u << 20)) { /* a batch of slots is 264 KiB */
        /* In whole words, as a copy engine writes them: a host thread that
         * polls the destination with atomic loads (cube's reader of
         * self-timed kernels' slots) sees each word written once. */
        uint64_t* d = op->dst;
        const uint64_t* src = op->src;
        for (size_t i = 0; i < op->n / 8; ++i)
          __atomic_store_n(&d[i], src[i], __ATOMIC_RELAXED);
      } else {
        memcpy(op->dst, op->src, op->n);
      }
      atomic_fetch_add(&mock.copies, 1);
      break;
    case OP_COPY2D:
      for (size_t r = 0; r < op->height; ++r)
        memcpy((char*)op->dst + r * op->dpitch, (const char*)op->src + r * op->spitch, op->width);
      atomic_fetch_add(&mock.copies, 1);
      break;
    case OP_MEMSET32:
      for (size_t i = 0; i < op->n; ++i) ((uint32_t*)op->dst)[i] = op->value;
      break;
    case OP_EVENT:
      pthread_mutex_lock(&op->event->lock);
      if (op->generation > op->event->reached) {
        op->event->reached = op->generation;
        op->event->ns = mock_now_ns();
      }
      op->mark->done = true;
      mock_mark_unref(op->mark);
      pthread_cond_broadcast(&op->event->cond);
      pthread_mutex_unlock(&op->event->lock);
      break;
    case OP_WAIT:
      pthread_mutex_lock(&op->event->lock);
      while (op->mark && !op->mark->done) pthread_cond_wait(&op->event->cond, &op->event->lock);
      mock_mark_unref(op->mark);
      pthread_mutex_unlock(&op->event->lock);
      break;
    case OP_FREE:
      mock_free_now(op->dst);
      atomic_fetch_add(&mock.async_frees, 1);
      break;
    case OP_HOST:
      op->fn(op->user);
      break;
  }
  free(op->owned);
  if (op->event) mock_event_unref(op->event);
  if (op->done) atomic_store(op->done, true);
}

static void* mock_stream_main(void* p) {
  mock_stream_t* s = p;
  pthread_mutex_lock(&s->lock);
  for (;;) {
    while (!s->head && !s->stop) pthread_cond_wait(&s->cond, &s->lock);
    if (!s->head && s->stop) break;
    mock_op_t* op = s->head;
    s->head = op->next;
    if (!s->head) s->tail = NULL;
    s->busy = true;
    pthread_mutex_unlock(&s->lock);
    mock_run(op);
    free(op);
    pthread_mutex_lock(&s->lock);
    s->busy = false;
    if (!s->head) pthread_cond_broadcast(&s->idle);
  }
  pthread_mutex_unlock(&s->lock);
  return NULL;
}

static mock_op_t* mock_op(mock_kind_t kind) {
  mock_op_t* op = calloc(1, sizeof(*op));
  if (op) op->kind = kind;
  return op;
}

static CUresult mock_push(CUstream hs, mock_op_t* op) {
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  mock_stream_t* s = (mock_stream_t*)hs;
  if (!s) { /* the legacy stream: run at once */
    mock_run(op);
    free(op);
    return CUDA_SUCCESS;
  }
  pthread_mutex_lock(&s->lock);
  if (s->tail) s->tail->next = op; else s->head = op;
  s->tail = op;
  pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&s->lock);
  return CUDA_SUCCESS;
}

static void mock_stream_drain(mock_stream_t* s) {
  pthread_mutex_lock(&s->lock);
  while (s->head || s->busy) pthread_cond_wait(&s->idle, &s->lock);
  pthread_mutex_unlock(&s->lock);
}

/* Pushes |op| and waits until it ran (synchronous copies into pageable memory). */
static CUresult mock_push_wait(CUstream hs, mock_op_t* op) {
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  atomic_bool done = false;
  op->done = &done;
  CUresult r = mock_push(hs, op);
  if (r) return r;
  while (!atomic_load(&done)) usleep(20);
  return CUDA_SUCCESS;
}

/* Fault injection: cube_mock_cuda_fail(name, n) makes the n-th call (from
 * now) of entry point |name| fail (OUT_OF_MEMORY for allocations, else
 * CUDA_ERROR_UNKNOWN); n = 0 turns it off. */
static pthread_mutex_t mock_fault_lock = PTHREAD_MUTEX_INITIALIZER;
static char mock_fault_name[64];
static _Atomic long mock_fault_left; /* read without the lock on the fast path */
static atomic_int mock_faults_fired;

static bool mock_fault(const char* name) {
  if (!mock_fault_left) return false;
  pthread_mutex_lock(&mock_fault_lock);
  bool fire = false;
  if (mock_fault_left > 0 && strcmp(name, mock_fault_name) == 0 && --mock_fault_left == 0) {
    fire = true;
    atomic_fetch_add(&mock_faults_fired, 1);
  }
  pthread_mutex_unlock(&mock_fault_lock);
  return fire;
}
static _Atomic int mock_fault_code; /* 0: the site's own code */
#define MOCK_FAULT(name, code) \
  do {                         \
    if (mock_fault(name)) return mock_fault_code ? (CUresult)mock_fault_code : (code); \
  } while (0)

MOCK_API void cube_mock_cuda_fail(const char* name, long n) {
  pthread_mutex_lock(&mock_fault_lock);
  snprintf(mock_fault_name, sizeof(mock_fault_name), "%s", name ? name : "");
  mock_fault_left = n;
  mock_fault_code = 0;
  pthread_mutex_unlock(&mock_fault_lock);
}
/* cube_mock_cuda_fail with the error |code| instead of the site's own (the
 * call fails once; the device stays as it was). */
MOCK_API void cube_mock_cuda_fail_with(const char* name, long n, int code) {
  cube_mock_cuda_fail(name, n);
  mock_fault_code = code;
}

MOCK_API int cube_mock_cuda_faults_fired(void) { return atomic_load(&mock_faults_fired); }

/* Sticky faults, as a GPU's context after an illegal address:
 * cube_mock_cuda_fail_sticky(name, n, code) makes the n-th call (from now) of
 * entry point |name| fail with |code| and loses the device it was made on
 * (the stream's, else the current context's): from then on every call on
 * that device returns |code| and does nothing (the context-free calls, such
 * as cuCtxGetCurrent or cuGetErrorName, still answer).
 * cube_mock_cuda_lost_calls() counts the calls refused so (the first, failing
 * one included); cube_mock_cuda_fail_sticky_on(device, ...) counts only the
 * calls made on |device|; cube_mock_cuda_lost(device) says whether a device is lost;
 * cube_mock_cuda_restore(device) gives it back (what a test does between two
 * cases; on a GPU a context reset does that). */
static pthread_mutex_t mock_sticky_lock = PTHREAD_MUTEX_INITIALIZER;
static char mock_sticky_name[64];
static _Atomic long mock_sticky_left;
static int mock_sticky_code;
static int mock_sticky_device = -1; /* -1: a call on any device */
static atomic_int mock_lost[MOCK_MAX_DEVICES]; /* 0, or the device's sticky error */
static atomic_long mock_lost_calls;
static atomic_long mock_resets; /* cuDevicePrimaryCtxReset calls */
/* CUBE_MOCK_CUDA_STICKY_PROCESS: a sticky fault poisons the device for the
 * process, as the H200's driver 580 does (docs/failures.md, "Recovery on a
 * real GPU"): the reset succeeds and frees what the context held, but the
 * device stays lost and retaining its primary context returns the fault. */
static bool mock_sticky_process(void) {
  return getenv("CUBE_MOCK_CUDA_STICKY_PROCESS") != NULL; /* read at each reset and retain */
}

static CUresult mock_sticky(const char* name, int dev) {
  if (dev < 0 || dev >= MOCK_MAX_DEVICES) return CUDA_SUCCESS;
  int lost = atomic_load(&mock_lost[dev]);
  if (lost) {
    atomic_fetch_add(&mock_lost_calls, 1);
    return (CUresult)lost;
  }
  if (!atomic_load(&mock_sticky_left)) return CUDA_SUCCESS;
  CUresult r = CUDA_SUCCESS;
  pthread_mutex_lock(&mock_sticky_lock);
  if (mock_sticky_left > 0 && (mock_sticky_device < 0 || mock_sticky_device == dev) &&
      strcmp(name, mock_sticky_name) == 0 && --mock_sticky_left == 0) {
    r = (CUresult)mock_sticky_code;
    atomic_store(&mock_lost[dev], mock_sticky_code);
    atomic_fetch_add(&mock_lost_calls, 1);
  }
  pthread_mutex_unlock(&mock_sticky_lock);
  return r;
}
/* The device a call on stream |hs| is made on. */
#define MOCK_DEV_OF(hs) ((hs) ? ((mock_stream_t*)(hs))->device : mock_current)
#define MOCK_STICKY(name, dev)                 \
  do {                                         \
    CUresult mock_r_ = mock_sticky((name), (dev)); \
    if (mock_r_ != CUDA_SUCCESS) return mock_r_; \
  } while (0)

static void mock_arm_sticky(int device, const char* name, long n, int code) {
  pthread_mutex_lock(&mock_sticky_lock);
  snprintf(mock_sticky_name, sizeof(mock_sticky_name), "%s", name ? name : "");
  mock_sticky_code = code;
  mock_sticky_device = device;
  atomic_store(&mock_sticky_left, n);
  pthread_mutex_unlock(&mock_sticky_lock);
}
MOCK_API void cube_mock_cuda_fail_sticky(const char* name, long n, int code) {
  mock_arm_sticky(-1, name, n, code);
}
/* cube_mock_cuda_fail_sticky counting only the calls made on |device|. */
MOCK_API void cube_mock_cuda_fail_sticky_on(int device, const char* name, long n, int code) {
  mock_arm_sticky(device, name, n, code);
}
MOCK_API long cube_mock_cuda_lost_calls(void) { return atomic_load(&mock_lost_calls); }
MOCK_API int cube_mock_cuda_lost(int device) {
  return device >= 0 && device < MOCK_MAX_DEVICES ? atomic_load(&mock_lost[device]) : 0;
}
MOCK_API void cube_mock_cuda_restore(int device) {
  if (device >= 0 && device < MOCK_MAX_DEVICES) atomic_store(&mock_lost[device], 0);
}

/* Driver entry points ------------------------------------------------------ */

static CUresult m_cuInit(unsigned int flags) {
  (void)flags;
  const char* v = getenv("CUBE_MOCK_CUDA_DEVICES");
  mock.devices = v ? atoi(v) : 1;
  if (mock.devices < 0) mock.devices = 0;
  if (mock.devices > MOCK_MAX_DEVICES) mock.devices = MOCK_MAX_DEVICES;
  v = getenv("CUBE_MOCK_CUDA_MEMORY");
  mock.memory = v ? strtoull(v, NULL, 10) : (1ull << 30);
  v = getenv("CUBE_MOCK_CUDA_CONTEXT_BYTES");
  mock.ctx_bytes = v ? strtoull(v, NULL, 10) : (8ull << 20);
  v = getenv("CUBE_MOCK_CUDA_DELAY_US");
  mock.delay_us = v ? (unsigned)atoi(v) : 0;
  mock_trace = getenv("CUBE_MOCK_CUDA_TRACE") != NULL;
  mock_launch_ok = getenv("CUBE_MOCK_CUDA_LAUNCH_OK") != NULL;
  v = getenv("CUBE_MOCK_CUDA_H2D_DELAY_US");
  mock.h2d_delay_us = v ? (unsigned)atoi(v) : 0;
  return mock.devices ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}
static CUresult m_cuDriverGetVersion(int* v) { *v = 13000; return CUDA_SUCCESS; }
static CUresult m_cuDeviceGetCount(int* n) { *n = mock.devices; return CUDA_SUCCESS; }
static CUresult m_cuDeviceGet(CUdevice* d, int i) {
  if (i < 0 || i >= mock.devices) return CUDA_ERROR_INVALID_DEVICE;
  *d = i;
  return CUDA_SUCCESS;
}
static CUresult m_cuDeviceGetName(char* name, int len, CUdevice d) {
  snprintf(name, (size_t)len, "cube mock GPU %d", (int)d);
  return CUDA_SUCCESS;
}
static CUresult m_cuDeviceTotalMem(size_t* b, CUdevice d) { (void)d; *b = (size_t)mock.memory; return CUDA_SUCCESS; }
static CUresult m_cuDeviceGetAttribute(int* v, CUdevice_attribute a, CUdevice d) {
  (void)d;
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 4; break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: *v = 3 << 20; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 2147483647; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 48 * 1024; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: *v = getenv("CUBE_MOCK_CUDA_NO_POOLS") ? 0 : 1; break;
    default: *v = 0;
  }
  return CUDA_SUCCESS;
}
static CUresult m_cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) {
  if (mock_sticky_process() && d >= 0 && d < MOCK_MAX_DEVICES && atomic_load(&mock_lost[d]))
    return (CUresult)atomic_load(&mock_lost[d]);
  *c = (CUcontext)&mock.ctx_tag[d];
  pthread_mutex_lock(&mock.lock);
  mock.ctx_retained[d] = true;
  pthread_mutex_unlock(&mock.lock);
  return CUDA_SUCCESS;
}
/* As the driver's reset of a primary context: every stream of the device is
 * stopped, its device blocks and pinned allocations are freed (a program that
 * still reads pinned memory of the context reads freed memory: ASan says
 * so), its modules are unloaded, and a lost device works again (the
 * context is retained still: the handle stays the same). */
static void mock_graphs_reset(int d);
static CUresult m_cuDevicePrimaryCtxReset(CUdevice d) {
  if (d < 0 || d >= mock.devices) return CUDA_ERROR_INVALID_DEVICE;
  for (;;) {
    pthread_mutex_lock(&mock.lock);
    mock_stream_t* s = NULL;
    for (mock_stream_t** p = &mock.streams; *p; p = &(*p)->next_all)
      if ((*p)->device == d) {
        s = *p;
        *p = s->next_all;
        break;
      }
    pthread_mutex_unlock(&mock.lock);
    if (!s) break;
    mock_stream_drain(s);
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    pthread_cond_destroy(&s->idle);
    free(s);
  }
  for (;;) {
    pthread_mutex_lock(&mock.lock);
    mock_hdr_t* h = mock_blocks.next;
    while (h != &mock_blocks && h->device != d) h = h->next;
    pthread_mutex_unlock(&mock.lock);
    if (h == &mock_blocks) break;
    mock_free_now(h + 1);
  }
  pthread_mutex_lock(&mock.lock);
  for (int i = 0; i < mock.pinned_count;) {
    if (mock.pinned[i].device != d) {
      ++i;
      continue;
    }
    free(mock.pinned[i].p);
    mock.pinned[i] = mock.pinned[--mock.pinned_count];
  }
  mock.modules[d] = 0;
  pthread_mutex_unlock(&mock.lock);
  mock_graphs_reset(d);
  atomic_fetch_add(&mock_resets, 1);
  if (!mock_sticky_process()) atomic_store(&mock_lost[d], 0);
  return CUDA_SUCCESS;
}
MOCK_API long cube_mock_cuda_resets(void) { return atomic_load(&mock_resets); }
static CUresult m_cuCtxSetCurrent(CUcontext c) {
  mock_current_ctx = c;
  mock_current = -1;
  for (int i = 0; i < MOCK_MAX_DEVICES; ++i)
    if (c == (CUcontext)&mock.ctx_tag[i]) mock_current = i;
  return CUDA_SUCCESS;
}
/* The context stack of a thread (pushed contexts, the current one not included). */
static _Thread_local CUcontext mock_stack[16];
static _Thread_local int mock_depth;
static _Atomic int mock_pushes; /* pushes minus pops, over all threads */

static CUresult m_cuCtxGetCurrent(CUcontext* c) {
  *c = mock_current_ctx;
  return CUDA_SUCCESS;
}
static CUresult m_cuCtxPushCurrent(CUcontext c) {
  if (mock_depth == 16) return CUDA_ERROR_INVALID_VALUE;
  mock_stack[mock_depth++] = mock_current_ctx;
  atomic_fetch_add(&mock_pushes, 1);
  return m_cuCtxSetCurrent(c);
}
static CUresult m_cuCtxPopCurrent(CUcontext* c) {
  if (mock_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  m_cuCtxGetCurrent(c);
  m_cuCtxSetCurrent(mock_stack[--mock_depth]);
  atomic_fetch_sub(&mock_pushes, 1);
  return CUDA_SUCCESS;
}
static CUresult m_cuCtxSynchronize(void) {
  MOCK_STICKY("cuCtxSynchronize", mock_current);
  pthread_mutex_lock(&mock.lock);
  mock_stream_t* list = mock.streams;
  pthread_mutex_unlock(&mock.lock);
  for (mock_stream_t* s = list; s; s = s->next_all)
    if (s->device == mock_current) mock_stream_drain(s);
  return CUDA_SUCCESS;
}
static CUresult m_cuStreamCreate(CUstream* out, unsigned int flags) {
  (void)flags;
  MOCK_FAULT("cuStreamCreate", CUDA_ERROR_OUT_OF_MEMORY);
  MOCK_STICKY("cuStreamCreate", mock_current);
  if (mock_current < 0) return CUDA_ERROR_INVALID_CONTEXT;
  mock_stream_t* s = calloc(1, sizeof(*s));
  if (!s) return CUDA_ERROR_OUT_OF_MEMORY;
  s->device = mock_current;
  s->cupti_id = atomic_fetch_add(&mock_stream_ids, 1) + 7;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->cond, NULL);
  pthread_cond_init(&s->idle, NULL);
  if (pthread_create(&s->thread, NULL, mock_stream_main, s) != 0) { free(s); return CUDA_ERROR_OUT_OF_MEMORY; }
  pthread_mutex_lock(&mock.lock);
  s->next_all = mock.streams;
  mock.streams = s;
  pthread_mutex_unlock(&mock.lock);
  *out = (CUstream)s;
  return CUDA_SUCCESS;
}
static CUresult m_cuStreamDestroy(CUstream hs) {
  mock_stream_t* s = (mock_stream_t*)hs;
  MOCK_STICKY("cuStreamDestroy", s->device);
  mock_stream_drain(s);
  pthread_mutex_lock(&s->lock);
  s->stop = true;
  pthread_cond_signal(&s->cond);
  pthread_mutex_unlock(&s->lock);
  pthread_join(s->thread, NULL);
  pthread_mutex_lock(&mock.lock);
  for (mock_stream_t** p = &mock.streams; *p; p = &(*p)->next_all)
    if (*p == s) { *p = s->next_all; break; }
  pthread_mutex_unlock(&mock.lock);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->cond);
  pthread_cond_destroy(&s->idle);
  free(s);
  return CUDA_SUCCESS;
}
static CUresult m_cuStreamSynchronize(CUstream hs) {
  MOCK_FAULT("cuStreamSynchronize", CUDA_ERROR_UNKNOWN);
  MOCK_STICKY("cuStreamSynchronize", MOCK_DEV_OF(hs));
  if (hs) mock_stream_drain((mock_stream_t*)hs);
  return CUDA_SUCCESS;
}
static CUresult m_cuEventCreate(CUevent* e, unsigned int flags) {
  (void)flags;
  MOCK_FAULT("cuEventCreate", CUDA_ERROR_OUT_OF_MEMORY);
  MOCK_STICKY("cuEventCreate", mock_current);
  mock_event_t* ev = calloc(1, sizeof(*ev));
  if (!ev) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_init(&ev->lock, NULL);
  pthread_cond_init(&ev->cond, NULL);
  ev->refs = 1;
  pthread_mutex_lock(&mock_events_lock);
  ev->next_all = mock_events;
  if (mock_events) mock_events->prev_all = ev;
  mock_events = ev;
  pthread_mutex_unlock(&mock_events_lock);
  *e = (CUevent)ev;
  return CUDA_SUCCESS;
}
static CUresult m_cuEventRecord(CUevent e, CUstream hs) {
  MOCK_FAULT("cuEventRecord", CUDA_ERROR_UNKNOWN);
  MOCK_STICKY("cuEventRecord", MOCK_DEV_OF(hs));
  mock_event_t* ev = (mock_event_t*)e;
  mock_op_t* op = mock_op(OP_EVENT);
  mock_mark_t* mark = calloc(1, sizeof(*mark));
  if (!op || !mark) {
    free(op);
    free(mark);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  mark->refs = 2;
  pthread_mutex_lock(&ev->lock);
  mock_mark_unref(ev->last);
  ev->last = mark;
  op->mark = mark;
  op->generation = ++ev->recorded;
  ev->refs++;
  pthread_mutex_unlock(&ev->lock);
  op->event = ev;
  return mock_push(hs, op);
}
static CUresult m_cuEventQuery(CUevent e) {
  MOCK_STICKY("cuEventQuery", mock_current);
  mock_event_t* ev = (mock_event_t*)e;
  pthread_mutex_lock(&ev->lock);
  bool done = ev->reached >= ev->recorded;
  pthread_mutex_unlock(&ev->lock);
  return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
static CUresult m_cuEventSynchronize(CUevent e) {
  MOCK_FAULT("cuEventSynchronize", CUDA_ERROR_UNKNOWN);
  MOCK_STICKY("cuEventSynchronize", mock_current);
  mock_event_t* ev = (mock_event_t*)e;
  pthread_mutex_lock(&ev->lock);
  uint64_t g = ev->recorded;
  while (ev->reached < g) pthread_cond_wait(&ev->cond, &ev->lock);
  pthread_mutex_unlock(&ev->lock);
  return CUDA_SUCCESS;
}
/* As the driver: an event destroyed before it completed is released once
 * the operations naming it ran. */
static CUresult m_cuEventDestroy(CUevent e) {
  MOCK_STICKY("cuEventDestroy", mock_current);
  mock_event_unref((mock_event_t*)e);
  return CUDA_SUCCESS;
}
static CUresult m_cuEventElapsedTime(float* ms, CUevent a, CUevent b) {
  MOCK_STICKY("cuEventElapsedTime", mock_current);
  mock_event_t *x = (mock_event_t*)a, *y = (mock_event_t*)b;
  if (m_cuEventQuery(a) || m_cuEventQuery(b)) return CUDA_ERROR_NOT_READY;
  *ms = (float)((double)(y->ns - x->ns) / 1e6);
  return CUDA_SUCCESS;
}
static CUresult m_cuStreamWaitEvent(CUstream hs, CUevent e, unsigned int flags) {
  (void)flags;
  MOCK_FAULT("cuStreamWaitEvent", CUDA_ERROR_UNKNOWN);
  MOCK_STICKY("cuStreamWaitEvent", MOCK_DEV_OF(hs));
  mock_event_t* ev = (mock_event_t*)e;
  mock_op_t* op = mock_op(OP_WAIT);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&ev->lock);
  op->generation = ev->recorded;
  op->mark = ev->last;
  if (op->mark) op->mark->refs++;
  ev->refs++;
  pthread_mutex_unlock(&ev->lock);
  op->event = ev;
  return mock_push(hs, op);
}

/* As the driver: |fn| runs on the stream, after the work queued before it,
 * and the work queued after it waits for it to return (the mock NCCL of
 * tests/mock_nccl runs its collectives this way). */
static CUresult m_cuLaunchHostFunc(CUstream hs, CUhostFn fn, void* user) {
  MOCK_FAULT("cuLaunchHostFunc", CUDA_ERROR_UNKNOWN);
  MOCK_STICKY("cuLaunchHostFunc", MOCK_DEV_OF(hs));
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  mock_op_t* op = mock_op(OP_HOST);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->fn = fn;
  op->user = user;
  return mock_push(hs, op);
}

static CUresult mock_alloc(CUdeviceptr* p, size_t n, bool async) {
  MOCK_FAULT(async ? "cuMemAllocAsync" : "cuMemAlloc", CUDA_ERROR_OUT_OF_MEMORY);
  MOCK_STICKY(async ? "cuMemAllocAsync" : "cuMemAlloc", mock_current);
  if (mock_current < 0) return CUDA_ERROR_INVALID_CONTEXT;
  pthread_mutex_lock(&mock.lock);
  if (mock.used[mock_current] + n > mock.memory) {
    pthread_mutex_unlock(&mock.lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  mock.used[mock_current] += n;
  pthread_mutex_unlock(&mock.lock);
  mock_hdr_t* h = aligned_alloc(512, 512 + ((n + 511) / 512) * 512);
  if (!h) {
    pthread_mutex_lock(&mock.lock);
    mock.used[mock_current] -= n;
    pthread_mutex_unlock(&mock.lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  /* The block starts 512 bytes in (aligned as the driver's); the header sits
   * right before it. Fresh device memory holds garbage, not zeros. */
  char* block = (char*)h + 512;
  mock_hdr_t* hdr = (mock_hdr_t*)block - 1;
  hdr->size = n;
  hdr->device = mock_current;
  hdr->magic = MOCK_MAGIC;
  pthread_mutex_lock(&mock.lock);
  hdr->next = &mock_blocks;
  hdr->prev = mock_blocks.prev;
  mock_blocks.prev->next = hdr;
  mock_blocks.prev = hdr;
  pthread_mutex_unlock(&mock.lock);
  memset(block, 0xA5, n);
  if (async) atomic_fetch_add(&mock.async_allocs, 1);
  *p = (CUdeviceptr)(uintptr_t)block;
  return CUDA_SUCCESS;
}
static CUresult m_cuMemAlloc(CUdeviceptr* p, size_t n) { return mock_alloc(p, n, false); }
static CUresult m_cuMemFree(CUdeviceptr p) {
  if (!p) return CUDA_SUCCESS;
  mock_hdr_t* hdr = (mock_hdr_t*)(uintptr_t)p - 1;
  if (hdr->magic != MOCK_MAGIC) return CUDA_ERROR_INVALID_VALUE;
  MOCK_STICKY("cuMemFree", hdr->device);
  m_cuCtxSynchronize(); /* as the driver, cuMemFree waits for the device */
  mock_free_now((void*)(uintptr_t)p);
  return CUDA_SUCCESS;
}
static CUresult m_cuMemAllocAsync(CUdeviceptr* p, size_t n, CUstream s) { (void)s; return mock_alloc(p, n, true); }
static CUresult m_cuMemFreeAsync(CUdeviceptr p, CUstream s) {
  MOCK_STICKY("cuMemFreeAsync", MOCK_DEV_OF(s));
  mock_hdr_t* hdr = (mock_hdr_t*)(uintptr_t)p - 1;
  if (hdr->magic != MOCK_MAGIC) return CUDA_ERROR_INVALID_VALUE;
  mock_op_t* op = mock_op(OP_FREE);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->dst = (void*)(uintptr_t)p;
  return mock_push(s, op);
}
static CUresult m_cuMemGetInfo(size_t* f, size_t* t) {
  MOCK_STICKY("cuMemGetInfo", mock_current);
  pthread_mutex_lock(&mock.lock);
  int d = mock_current < 0 ? 0 : mock_current;
  uint64_t used = mock.used[d] + (mock.ctx_retained[d] ? mock.ctx_bytes : 0) +
                  mock.modules[d] * MOCK_MODULE_BYTES;
  *t = (size_t)mock.memory;
  *f = (size_t)(used < mock.memory ? mock.memory - used : 0);
  pthread_mutex_unlock(&mock.lock);
  return CUDA_SUCCESS;
}
static CUresult m_cuDeviceGetDefaultMemPool(CUmemoryPool* p, CUdevice d) { *p = (CUmemoryPool)&mock.ctx_tag[d]; return CUDA_SUCCESS; }
static CUresult m_cuMemPoolTrimTo(CUmemoryPool p, size_t n) { (void)p; (void)n; return CUDA_SUCCESS; }
static CUresult m_cuMemPoolSetAttribute(CUmemoryPool p, CUmemPool_attribute a, void* v) { (void)p; (void)a; (void)v; return CUDA_SUCCESS; }

static CUresult m_cuMemHostAlloc(void** p, size_t n, unsigned int flags) {
  (void)flags;
  MOCK_FAULT("cuMemHostAlloc", CUDA_ERROR_OUT_OF_MEMORY);
  MOCK_STICKY("cuMemHostAlloc", mock_current);
  char* q = aligned_alloc(4096, ((n + 4095) / 4096) * 4096);
  if (!q) return CUDA_ERROR_OUT_OF_MEMORY;
  pthread_mutex_lock(&mock.lock);
  if (mock.pinned_count == (int)(sizeof(mock.pinned) / sizeof(mock.pinned[0]))) {
    pthread_mutex_unlock(&mock.lock);
    free(q);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  mock.pinned[mock.pinned_count].p = q;
  mock.pinned[mock.pinned_count].n = n;
  mock.pinned[mock.pinned_count].device = mock_current < 0 ? 0 : mock_current;
  mock.pinned_count++;
  pthread_mutex_unlock(&mock.lock);
  *p = q;
  return CUDA_SUCCESS;
}
static CUresult m_cuMemFreeHost(void* p) {
  MOCK_STICKY("cuMemFreeHost", mock_current);
  m_cuCtxSynchronize(); /* as the driver: freeing pinned memory waits for the device */
  pthread_mutex_lock(&mock.lock);
  for (int i = 0; i < mock.pinned_count; ++i)
    if (mock.pinned[i].p == p) {
      mock.pinned[i] = mock.pinned[--mock.pinned_count];
      pthread_mutex_unlock(&mock.lock);
      free(p);
      return CUDA_SUCCESS;
    }
  pthread_mutex_unlock(&mock.lock);
  return CUDA_ERROR_INVALID_VALUE;
}
static CUresult m_cuMemHostGetFlags(unsigned int* f, void* p) {
  *f = 0;
  return mock_is_pinned(p) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
/* As the driver: any address is answered (zeros for memory it does not know). */
static CUresult m_cuPointerGetAttributes(unsigned int n, CUpointer_attribute* attrs, void** data,
                                         CUdeviceptr ptr) {
  for (unsigned int i = 0; i < n; ++i) {
    if (attrs[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
      *(unsigned int*)data[i] = mock_is_pinned((void*)(uintptr_t)ptr) ? CU_MEMORYTYPE_HOST : 0;
    else
      return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

/* Host-to-device: a pageable source is staged now (the driver copies it
 * before returning), a pinned one is read when the copy runs. */
/* As the driver: a copy or a wait needs a current context, and the stream
 * must be one of that context's (the default stream NULL is any's). */
static CUresult mock_check_context(CUstream s) {
  if (mock_current < 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (s && ((mock_stream_t*)s)->device != mock_current) return CUDA_ERROR_INVALID_HANDLE;
  return CUDA_SUCCESS;
}
static CUresult mock_h2d(void* dst, const void* src, size_t n, size_t spitch, size_t dpitch,
                         size_t width, size_t height, CUstream s) {
  MOCK_FAULT("h2d", CUDA_ERROR_UNKNOWN);
  MOCK_STICKY("h2d", MOCK_DEV_OF(s));
  CUresult cr = mock_check_context(s);
  if (cr != CUDA_SUCCESS) return cr;
  mock_op_t* op = mock_op(height > 1 ? OP_COPY2D : OP_COPY);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  size_t span = height > 1 ? (height - 1) * spitch + width : n;
  if (!mock_is_pinned(src)) {
    op->owned = malloc(span ? span : 1);
    if (!op->owned) { free(op); return CUDA_ERROR_OUT_OF_MEMORY; }
    memcpy(op->owned, src, span);
    src = op->owned;
  }
  op->dst = dst; op->src = src; op->n = n;
  op->spitch = spitch; op->dpitch = dpitch; op->width = width; op->height = height;
  op->h2d = true;
  atomic_fetch_add(&mock.bytes_h2d, height > 1 ? width * height : n);
  return mock_push(s, op);
}
/* Device-to-host: into pinned memory it is asynchronous, into pageable memory
 * the call returns when the copy is done. */
static CUresult mock_d2h(void* dst, const void* src, size_t n, size_t spitch, size_t dpitch,
                         size_t width, size_t height, CUstream s) {
  MOCK_FAULT("d2h", CUDA_ERROR_UNKNOWN);
  MOCK_STICKY("d2h", MOCK_DEV_OF(s));
  CUresult cr = mock_check_context(s);
  if (cr != CUDA_SUCCESS) return cr;
  mock_op_t* op = mock_op(height > 1 ? OP_COPY2D : OP_COPY);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->dst = dst; op->src = src; op->n = n;
  op->spitch = spitch; op->dpitch = dpitch; op->width = width; op->height = height;
  atomic_fetch_add(&mock.bytes_d2h, height > 1 ? width * height : n);
  return mock_is_pinned(dst) ? mock_push(s, op) : mock_push_wait(s, op);
}
static CUresult m_cuMemcpyHtoDAsync(CUdeviceptr d, const void* h, size_t n, CUstream s) {
  return mock_h2d((void*)(uintptr_t)d, h, n, 0, 0, 0, 1, s);
}
static CUresult m_cuMemcpyDtoHAsync(void* h, CUdeviceptr d, size_t n, CUstream s) {
  return mock_d2h(h, (const void*)(uintptr_t)d, n, 0, 0, 0, 1, s);
}
static CUresult m_cuMemcpyDtoDAsync(CUdeviceptr d, CUdeviceptr src, size_t n, CUstream s) {
  MOCK_FAULT("cuMemcpyDtoDAsync", CUDA_ERROR_UNKNOWN);
  MOCK_STICKY("cuMemcpyDtoDAsync", MOCK_DEV_OF(s));
  mock_op_t* op = mock_op(OP_COPY);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->dst = (void*)(uintptr_t)d; op->src = (const void*)(uintptr_t)src; op->n = n;
  return mock_push(s, op);
}
static CUresult m_cuMemcpy2DAsync(const CUDA_MEMCPY2D* m, CUstream s) {
  if (m->srcXInBytes || m->srcY || m->dstXInBytes || m->dstY) return CUDA_ERROR_NOT_SUPPORTED;
  bool src_dev = m->srcMemoryType == CU_MEMORYTYPE_DEVICE;
  bool dst_dev = m->dstMemoryType == CU_MEMORYTYPE_DEVICE;
  const void* src = src_dev ? (const void*)(uintptr_t)m->srcDevice : m->srcHost;
  void* dst = dst_dev ? (void*)(uintptr_t)m->dstDevice : m->dstHost;
  if (m->srcPitch < m->WidthInBytes || m->dstPitch < m->WidthInBytes) return CUDA_ERROR_INVALID_VALUE;
  if (!src_dev && dst_dev)
    return mock_h2d(dst, src, 0, m->srcPitch, m->dstPitch, m->WidthInBytes, m->Height, s);
  if (src_dev && !dst_dev)
    return mock_d2h(dst, src, 0, m->srcPitch, m->dstPitch, m->WidthInBytes, m->Height, s);
  return CUDA_ERROR_NOT_SUPPORTED;
}
static CUresult m_cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) {
  MOCK_STICKY("cuMemsetD32Async", MOCK_DEV_OF(s));
  mock_op_t* op = mock_op(OP_MEMSET32);
  if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
  op->dst = (void*)(uintptr_t)d; op->n = n; op->value = v;
  return mock_push(s, op);
}
static int mock_module_tag, mock_function_tag;
static long mock_clock_launches;    /* under mock.lock */
static char mock_clock_thread[32]; /* under mock.lock */
/* Self-timed kernels (cube's CUDA prelude: every kernel's last parameter
 * is a timing slot, struct cube__timing): the "cubin" is the unit's text
 * (the mock NVRTC's), so a module load reads the entry function's name
 * ("#define cube_kernel_entry cube_k_..."), finds its CUBE_KERNEL and counts
 * its parameters as the launch passes them (a CUBE_ARRAY is two, Validate
 * mode adds the bounds record): the timing slot's index. A launch of such a
 * function with a slot writes start and end into the slot when the stream
 * runs it, on CLOCK_REALTIME (the mock's global timer). The clock kernel
 * ("cube_clock") writes that clock and a flag. */
typedef struct mock_timed { char name[64]; int index; } mock_timed_t;
static mock_timed_t mock_timed[1024];
static int mock_timed_count;
static uint64_t mock_realtime_ns(void);
static int mock_timed_index(const char* text) {
  const char* d = strstr(text, "\n#define cube__kernel_"); /* at a line's start */
  if (!d) return -1;
  d += strlen("\n#define cube__kernel_");
  size_t en = strcspn(d, " \n");
  if (en == 0 || en > 200 || strncmp(d + en, " cube_kernel_entry", 18) != 0) return -1;
  char want[256];
  snprintf(want, sizeof(want), "CUBE_KERNEL(%.*s,", (int)en, d);
  const char* k = strstr(d, want);
  if (!k) return -1;
  const char* p = k + strlen(want);
  int depth = 0, count = 0;
  const char* item = p;
  for (; *p; ++p) {
    if (*p == '(') depth++;
    else if (*p == ')' && depth > 0) depth--;
    else if ((*p == ',' && depth == 0) || (*p == ')' && depth == 0)) {
      while (*item == ' ' || *item == '\n' || *item == '\t') item++;
      count += strncmp(item, "CUBE_ARRAY", 10) == 0 ? 2 : 1;
      item = p + 1;
      if (*p == ')') break;
    }
  }
  if (*p != ')') return -1;
  if (strstr(text, "#define CUBE_MODE_VALIDATE 1")) count++;
  return count;
}
static CUresult m_cuModuleLoadData(CUmodule* m, const void* image) {
  MOCK_FAULT("cuModuleLoadData", CUDA_ERROR_INVALID_IMAGE);
  MOCK_STICKY("cuModuleLoadData", mock_current);
  const char* text = image;
  const char* e = text && strncmp(text, "#define cube_kernel_entry ", 26) == 0 ? text : NULL;
  if (e && strstr(text, "CUBE__ENTRY_TIMER")) {
    e += strlen("#define cube_kernel_entry ");
    int idx = mock_timed_index(text);
    pthread_mutex_lock(&mock.lock);
    if (idx >= 0 && mock_timed_count < (int)(sizeof(mock_timed) / sizeof(mock_timed[0]))) {
      mock_timed_t* t = &mock_timed[mock_timed_count++];
      snprintf(t->name, sizeof(t->name), "%.*s", (int)strcspn(e, " \n"), e);
      t->index = idx;
    }
    pthread_mutex_unlock(&mock.lock);
  }
  pthread_mutex_lock(&mock.lock);
  mock.modules[mock_current < 0 ? 0 : mock_current]++;
  pthread_mutex_unlock(&mock.lock);
  *m = (CUmodule)&mock_module_tag;
  return CUDA_SUCCESS;
}
static CUresult m_cuModuleUnload(CUmodule m) {
  (void)m;
  MOCK_STICKY("cuModuleUnload", mock_current);
  pthread_mutex_lock(&mock.lock);
  int d = mock_current < 0 ? 0 : mock_current;
  if (mock.modules[d]) mock.modules[d]--;
  pthread_mutex_unlock(&mock.lock);
  return CUDA_SUCCESS;
}
/* The clock kernel: the mock's global timer, then the flag. */
static void mock_clock_ran(void* p) {
  volatile uint64_t* out = p;
  out[0] = mock_realtime_ns();
  __atomic_store_n(&out[1], 1ull, __ATOMIC_RELEASE);
}
/* A self-timed kernel runs (CUBE_MOCK_CUDA_KERNEL_US) and writes its times
 * into its slot (struct cube__timing), device memory that cube has the
 * stream copy to the host, as its cubes would: cube 0 the start, and its end
 * (at once: a reader of that word alone gets a duration near 0) into the
 * first of the CUBE__ACT_PLANES end words (CUBE__ACT_LINE / 8 words on:
 * the prelude's CUBE__TIMING_PLANE_WORDS); the last cube, x index gx - 1,
 * the end into word (gx - 1) % CUBE__ACT_PLANES of them. The reader takes the latest. */
typedef struct mock_timed_run {
  volatile uint64_t* slot;
  uint32_t gx;
} mock_timed_run_t;
static atomic_uint mock_timed_runs;
static void mock_timed_ran(void* p) {
  const mock_timed_run_t* t = p;
  /* CUBE_MOCK_CUDA_TIMED_SILENT=N: the process's Nth self-timed kernel
   * writes nothing (as one that faulted before its timer ran). */
  const char* silent = getenv("CUBE_MOCK_CUDA_TIMED_SILENT");
  unsigned run = atomic_fetch_add(&mock_timed_runs, 1) + 1;
  if (silent && (unsigned)atoi(silent) == run) return;
  uint64_t start = mock_realtime_ns();
  const char* e = getenv("CUBE_MOCK_CUDA_KERNEL_US");
  if (e && atoi(e) > 0) usleep((useconds_t)atoi(e));
  uint64_t end = mock_realtime_ns();
  if (end == start) end++;
  volatile uint64_t* slot = t->slot;
  const uint64_t first = start + 1;
  const unsigned words = CUBE__ACT_LINE / 8u;
  volatile uint64_t* last = &slot[words * (1u + ((t->gx - 1u) % CUBE__ACT_PLANES))];
  slot[0] = start;
  if (slot[words] < first) slot[words] = first;
  if (*last < end) *last = end;
}

/* Functions by name (the mock CUPTI's records name them); past the table's
 * size, one shared stand-in. */
typedef struct mock_fn { char name[64]; } mock_fn_t;
static mock_fn_t mock_fns[1024];
static int mock_fn_count;
static CUresult m_cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  (void)m;
  MOCK_STICKY("cuModuleGetFunction", mock_current);
  pthread_mutex_lock(&mock.lock);
  mock_fn_t* found = NULL;
  for (int i = 0; i < mock_fn_count && !found; ++i)
    if (strncmp(mock_fns[i].name, name, sizeof(mock_fns[i].name) - 1) == 0) found = &mock_fns[i];
  if (!found && mock_fn_count < (int)(sizeof(mock_fns) / sizeof(mock_fns[0]))) {
    found = &mock_fns[mock_fn_count++];
    snprintf(found->name, sizeof(found->name), "%s", name);
  }
  pthread_mutex_unlock(&mock.lock);
  *f = found ? (CUfunction)found : (CUfunction)&mock_function_tag;
  return CUDA_SUCCESS;
}
/* CUBE_MOCK_CUDA_FUNC_MAX_THREADS: the threads per block a function allows
 * (a real one's register use can make it fewer than the device's 1024). */
static CUresult m_cuFuncGetAttribute(int* v, CUfunction_attribute a, CUfunction f) {
  (void)f;
  MOCK_STICKY("cuFuncGetAttribute", mock_current);
  const char* e = getenv("CUBE_MOCK_CUDA_FUNC_MAX_THREADS");
  *v = a == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? (e ? atoi(e) : 1024) : 0;
  return CUDA_SUCCESS;
}
static CUresult m_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned shm, CUstream s, void** params, void** extra) {
  (void)bx; (void)by; (void)bz; (void)shm; (void)params; (void)extra;
  MOCK_STICKY("cuLaunchKernel", MOCK_DEV_OF(s));
  MOCK_FAULT("cuLaunchKernel", CUDA_ERROR_INVALID_VALUE);
  atomic_fetch_add(&mock.launches, 1);
  /* CUBE_MOCK_CUDA_LAUNCH_OK: a launch succeeds and runs nothing (to measure
   * cube's own cost per launch with no driver behind it). */
  if (!mock_launch_ok) return CUDA_ERROR_NOT_SUPPORTED;
  if (s) mock_cupti_launch((mock_stream_t*)s, f, gx, gy, gz);
  const char* fname = f == (CUfunction)&mock_function_tag ? "" : ((mock_fn_t*)f)->name;
  if (strcmp(fname, "cube_clock") == 0) {
    /* Who measures the clock: counted, and the launching thread's name kept. */
    pthread_mutex_lock(&mock.lock);
    mock_clock_launches++;
    if (pthread_getname_np(pthread_self(), mock_clock_thread, sizeof(mock_clock_thread)) != 0)
      mock_clock_thread[0] = '\0';
    pthread_mutex_unlock(&mock.lock);
    mock_op_t* op = mock_op(OP_HOST);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    op->fn = mock_clock_ran;
    op->user = *(void**)params[0];
    return mock_push(s, op);
  }
  int idx = -1;
  pthread_mutex_lock(&mock.lock);
  for (int i = mock_timed_count - 1; i >= 0 && idx < 0; --i)
    if (strcmp(mock_timed[i].name, fname) == 0) idx = mock_timed[i].index;
  pthread_mutex_unlock(&mock.lock);
  void* slot = idx >= 0 && params ? *(void**)params[idx] : NULL;
  if (slot) {
    mock_op_t* op = mock_op(OP_HOST);
    if (!op) return CUDA_ERROR_OUT_OF_MEMORY;
    mock_timed_run_t* t = malloc(sizeof(*t));
    if (!t) {
      free(op);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *t = (mock_timed_run_t){slot, gx ? gx : 1u};
    op->fn = mock_timed_ran;
    op->user = op->owned = t;
    return mock_push(s, op);
  }
  return CUDA_SUCCESS;
}
static CUresult m_cuGetErrorName(CUresult r, const char** s) {
  switch (r) {
    case CUDA_SUCCESS: *s = "CUDA_SUCCESS"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *s = "CUDA_ERROR_NOT_SUPPORTED"; break;
    case CUDA_ERROR_NO_DEVICE: *s = "CUDA_ERROR_NO_DEVICE"; break;
    case CUDA_ERROR_INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; break;
    case CUDA_ERROR_UNKNOWN: *s = "CUDA_ERROR_UNKNOWN"; break;
    case CUDA_ERROR_INVALID_IMAGE: *s = "CUDA_ERROR_INVALID_IMAGE"; break;
    case CUDA_ERROR_ILLEGAL_ADDRESS: *s = "CUDA_ERROR_ILLEGAL_ADDRESS"; break;
    case CUDA_ERROR_LAUNCH_TIMEOUT: *s = "CUDA_ERROR_LAUNCH_TIMEOUT"; break;
    case CUDA_ERROR_ECC_UNCORRECTABLE: *s = "CUDA_ERROR_ECC_UNCORRECTABLE"; break;
    case CUDA_ERROR_LAUNCH_FAILED: *s = "CUDA_ERROR_LAUNCH_FAILED"; break;
    default: *s = "CUDA_ERROR_UNKNOWN";
  }
  return CUDA_SUCCESS;
}
static CUresult m_cuGetErrorString(CUresult r, const char** s) {
  *s = r == CUDA_ERROR_NOT_SUPPORTED     ? "the mock driver runs no kernels"
       : r == CUDA_ERROR_ILLEGAL_ADDRESS ? "an illegal memory access was encountered"
                                         : "mock driver error";
  return CUDA_SUCCESS;
}

/* Graphs: a graph is a list of nodes (a chain, in the order added); an
 * instantiated graph is a copy of it; a launch pushes its copies onto the
 * stream in order and counts its kernels as launches (which run nothing, and
 * fail as cuLaunchKernel does unless CUBE_MOCK_CUDA_LAUNCH_OK is set).
 * CUgraphNode values are the node's index + 1. */
typedef struct mock_gnode {
  int kind; /* 0 kernel, 1 copy (host-to-device, or device-to-device 1-D), 2 empty */
  CUDA_MEMCPY3D copy;
} mock_gnode_t;
/* Graphs and their executables, each of the device current at its
 * creation: kept in one list (under mock.lock) so that a reset of that
 * device frees them, as the driver's reset frees what the context held. */
typedef struct mock_graph {
  mock_gnode_t* nodes;
  size_t n, cap;
  int device;
  struct mock_graph *prev, *next;
} mock_graph_t;
static mock_graph_t mock_graph_list = {NULL, 0, 0, -1, &mock_graph_list, &mock_graph_list};

static void mock_graph_link(mock_graph_t* g) {
  g->device = mock_current;
  pthread_mutex_lock(&mock.lock);
  g->next = &mock_graph_list;
  g->prev = mock_graph_list.prev;
  g->prev->next = g;
  mock_graph_list.prev = g;
  pthread_mutex_unlock(&mock.lock);
}
static atomic_uint_fast64_t mock_graph_instantiates, mock_graph_launches, mock_graph_kernel_updates,
    mock_graph_copy_updates, mock_graphs_live;

static CUresult mock_graph_add(CUgraphNode* out, CUgraph hg, const CUgraphNode* deps, size_t ndeps,
                               int kind, const CUDA_MEMCPY3D* copy) {
  mock_graph_t* g = (mock_graph_t*)hg;
  /* cube builds chains: each node after the one before. */
  if (ndeps > 1 || (ndeps == 1 && (uintptr_t)deps[0] != g->n)) return CUDA_ERROR_INVALID_VALUE;
  if (g->n == g->cap) {
    size_t cap = g->cap ? 2 * g->cap : 16;
    mock_gnode_t* p = realloc(g->nodes, cap * sizeof(*p));
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    g->nodes = p;
    g->cap = cap;
  }
  memset(&g->nodes[g->n], 0, sizeof(g->nodes[0]));
  g->nodes[g->n].kind = kind;
  if (copy) g->nodes[g->n].copy = *copy;
  *out = (CUgraphNode)(uintptr_t)(++g->n);
  return CUDA_SUCCESS;
}
static CUresult m_cuGraphCreate(CUgraph* out, unsigned flags) {
  (void)flags;
  MOCK_FAULT("cuGraphCreate", CUDA_ERROR_OUT_OF_MEMORY);
  MOCK_STICKY("cuGraphCreate", mock_current);
  mock_graph_t* g = calloc(1, sizeof(*g));
  if (!g) return CUDA_ERROR_OUT_OF_MEMORY;
  mock_graph_link(g);
  atomic_fetch_add(&mock_graphs_live, 1);
  *out = (CUgraph)g;
  return CUDA_SUCCESS;
}
static CUresult m_cuGraphAddKernelNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                       size_t ndeps, const CUDA_KERNEL_NODE_PARAMS_v2* p) {
  if (!p || !p->func) return CUDA_ERROR_INVALID_VALUE;
  return mock_graph_add(out, g, deps, ndeps, 0, NULL);
}
static CUresult m_cuGraphAddEmptyNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t ndeps) {
  return mock_graph_add(out, g, deps, ndeps, 2, NULL);
}
/* The copies cube records: host to device (rows), and device to device in
 * one row. */
static bool mock_copy_ok(const CUDA_MEMCPY3D* m) {
  bool h2d = m->srcMemoryType == CU_MEMORYTYPE_HOST;
  bool d2d = m->srcMemoryType == CU_MEMORYTYPE_DEVICE && m->Height == 1;
  return (h2d || d2d) && m->dstMemoryType == CU_MEMORYTYPE_DEVICE && m->Depth == 1 &&
         m->srcPitch >= m->WidthInBytes && m->dstPitch >= m->WidthInBytes && !m->srcXInBytes &&
         !m->srcY && !m->dstXInBytes && !m->dstY && !m->srcZ && !m->dstZ;
}
static CUresult m_cuGraphAddMemcpyNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                       size_t ndeps, const CUDA_MEMCPY3D* m, CUcontext ctx) {
  (void)ctx;
  if (!m || !mock_copy_ok(m)) return CUDA_ERROR_NOT_SUPPORTED;
  return mock_graph_add(out, g, deps, ndeps, 1, m);
}
static CUresult m_cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph hg, unsigned long long flags) {
  (void)flags;
  MOCK_FAULT("cuGraphInstantiate", CUDA_ERROR_OUT_OF_MEMORY);
  MOCK_STICKY("cuGraphInstantiate", mock_current);
  mock_graph_t* g = (mock_graph_t*)hg;
  mock_graph_t* e = calloc(1, sizeof(*e));
  if (!e) return CUDA_ERROR_OUT_OF_MEMORY;
  e->nodes = malloc((g->n ? g->n : 1) * sizeof(*e->nodes));
  if (!e->nodes) { free(e); return CUDA_ERROR_OUT_OF_MEMORY; }
  if (g->n) memcpy(e->nodes, g->nodes, g->n * sizeof(*e->nodes));
  e->n = e->cap = g->n;
  mock_graph_link(e);
  atomic_fetch_add(&mock_graph_instantiates, 1);
  atomic_fetch_add(&mock_graphs_live, 1);
  *out = (CUgraphExec)e;
  return CUDA_SUCCESS;
}
static CUresult m_cuGraphExecKernelNodeSetParams(CUgraphExec he, CUgraphNode node,
                                                 const CUDA_KERNEL_NODE_PARAMS_v2* p) {
  mock_graph_t* e = (mock_graph_t*)he;
  uintptr_t i = (uintptr_t)node;
  if (!p || !p->func || i == 0 || i > e->n || e->nodes[i - 1].kind != 0) return CUDA_ERROR_INVALID_VALUE;
  atomic_fetch_add(&mock_graph_kernel_updates, 1);
  return CUDA_SUCCESS;
}
static CUresult m_cuGraphExecMemcpyNodeSetParams(CUgraphExec he, CUgraphNode node,
                                                 const CUDA_MEMCPY3D* m, CUcontext ctx) {
  (void)ctx;
  mock_graph_t* e = (mock_graph_t*)he;
  uintptr_t i = (uintptr_t)node;
  /* As the driver: 1-D copies only, and neither memory type may change. */
  if (!m || !mock_copy_ok(m) || i == 0 || i > e->n || e->nodes[i - 1].kind != 1 ||
      m->Height > 1 || e->nodes[i - 1].copy.Height > 1 ||
      m->srcMemoryType != e->nodes[i - 1].copy.srcMemoryType ||
      m->dstMemoryType != e->nodes[i - 1].copy.dstMemoryType)
    return CUDA_ERROR_INVALID_VALUE;
  e->nodes[i - 1].copy = *m;
  atomic_fetch_add(&mock_graph_copy_updates, 1);
  return CUDA_SUCCESS;
}
static CUresult m_cuGraphLaunch(CUgraphExec he, CUstream s) {
  MOCK_FAULT("cuGraphLaunch", CUDA_ERROR_UNKNOWN);
  MOCK_STICKY("cuGraphLaunch", MOCK_DEV_OF(s));
  mock_graph_t* e = (mock_graph_t*)he;
  for (size_t i = 0; i < e->n; ++i)
    if (e->nodes[i].kind == 0 && !mock_launch_ok) return CUDA_ERROR_NOT_SUPPORTED;
  atomic_fetch_add(&mock_graph_launches, 1);
  for (size_t i = 0; i < e->n; ++i) {
    const mock_gnode_t* n = &e->nodes[i];
    if (n->kind == 0) atomic_fetch_add(&mock.launches, 1);
    if (n->kind != 1) continue;
    const CUDA_MEMCPY3D* m = &n->copy;
    void* dst = (void*)(uintptr_t)m->dstDevice;
    CUresult r;
    if (m->srcMemoryType == CU_MEMORYTYPE_DEVICE)
      r = m_cuMemcpyDtoDAsync(m->dstDevice, m->srcDevice, m->WidthInBytes, s);
    else
      r = m->Height > 1 ? mock_h2d(dst, m->srcHost, 0, m->srcPitch, m->dstPitch, m->WidthInBytes,
                                   m->Height, s)
                        : mock_h2d(dst, m->srcHost, m->WidthInBytes, 0, 0, 0, 1, s);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}
static void mock_graph_free(mock_graph_t* g) {
  pthread_mutex_lock(&mock.lock);
  g->prev->next = g->next;
  g->next->prev = g->prev;
  pthread_mutex_unlock(&mock.lock);
  free(g->nodes);
  free(g);
  atomic_fetch_sub(&mock_graphs_live, 1);
}
static void mock_graphs_reset(int d) {
  for (;;) {
    pthread_mutex_lock(&mock.lock);
    mock_graph_t* g = mock_graph_list.next;
    while (g != &mock_graph_list && g->device != d) g = g->next;
    pthread_mutex_unlock(&mock.lock);
    if (g == &mock_graph_list) return;
    mock_graph_free(g);
  }
}
static CUresult m_cuGraphExecDestroy(CUgraphExec e) { mock_graph_free((mock_graph_t*)e); return CUDA_SUCCESS; }
static CUresult m_cuGraphDestroy(CUgraph g) { mock_graph_free((mock_graph_t*)g); return CUDA_SUCCESS; }

typedef struct cube_mock_cuda_graph_stats {
  uint64_t instantiates, launches, kernel_updates, copy_updates, live;
} cube_mock_cuda_graph_stats_t;

/* Counters of the graph calls (found with dlsym); |live| counts graphs and
 * instantiated graphs not yet destroyed. */
MOCK_API void cube_mock_cuda_graph_stats(cube_mock_cuda_graph_stats_t* out) {
  out->instantiates = atomic_load(&mock_graph_instantiates);
  out->launches = atomic_load(&mock_graph_launches);
  out->kernel_updates = atomic_load(&mock_graph_kernel_updates);
  out->copy_updates = atomic_load(&mock_graph_copy_updates);
  out->live = atomic_load(&mock_graphs_live);
}

/* cuGetProcAddress_v2: the only symbol cube looks up by name. */
MOCK_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult* status) {
  (void)version;
  (void)flags;
  static const struct { const char* name; void* fn; } table[] = {
#define E(n) {#n, (void*)(uintptr_t)m_##n}
      E(cuInit), E(cuDriverGetVersion), E(cuDeviceGetCount), E(cuDeviceGet), E(cuDeviceGetName),
      E(cuDeviceTotalMem), E(cuDeviceGetAttribute), E(cuDevicePrimaryCtxRetain), E(cuDevicePrimaryCtxReset), E(cuCtxSetCurrent), E(cuCtxGetCurrent), E(cuCtxPushCurrent), E(cuCtxPopCurrent),
      E(cuCtxSynchronize), E(cuStreamCreate), E(cuStreamDestroy), E(cuStreamSynchronize),
      E(cuStreamWaitEvent), E(cuEventCreate), E(cuEventRecord), E(cuEventQuery),
      E(cuEventSynchronize), E(cuEventDestroy), E(cuEventElapsedTime), E(cuMemAlloc), E(cuMemFree),
      E(cuMemGetInfo), E(cuMemHostAlloc), E(cuMemFreeHost), E(cuMemHostGetFlags), E(cuPointerGetAttributes),
      E(cuMemcpyHtoDAsync), E(cuMemcpyDtoHAsync), E(cuMemcpyDtoDAsync), E(cuMemcpy2DAsync),
      E(cuMemsetD32Async), E(cuModuleLoadData), E(cuModuleUnload), E(cuModuleGetFunction),
      E(cuFuncGetAttribute), E(cuLaunchKernel), E(cuGetErrorName), E(cuGetErrorString),
      E(cuMemAllocAsync), E(cuMemFreeAsync), E(cuDeviceGetDefaultMemPool), E(cuMemPoolTrimTo),
      E(cuMemPoolSetAttribute), E(cuLaunchHostFunc), E(cuGraphCreate), E(cuGraphAddKernelNode),
      E(cuGraphAddMemcpyNode), E(cuGraphAddEmptyNode), E(cuGraphInstantiateWithFlags),
      E(cuGraphExecKernelNodeSetParams), E(cuGraphExecMemcpyNodeSetParams), E(cuGraphLaunch),
      E(cuGraphExecDestroy), E(cuGraphDestroy),
#undef E
  };
  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); ++i)
    if (strcmp(table[i].name, symbol) == 0) {
      *pfn = table[i].fn;
      if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  *pfn = NULL;
  if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

/* Counters for tests (found with dlsym). */
typedef struct cube_mock_cuda_stats {
  uint64_t copies, bytes_h2d, bytes_d2h, async_allocs, async_frees, launches, device_bytes_used;
  int pinned_allocations, streams;
  int context_pushes_outstanding; /* pushes not popped yet, all threads */
} cube_mock_cuda_stats_t;

MOCK_API void cube_mock_cuda_stats(cube_mock_cuda_stats_t* out) {
  out->copies = atomic_load(&mock.copies);
  out->bytes_h2d = atomic_load(&mock.bytes_h2d);
  out->bytes_d2h = atomic_load(&mock.bytes_d2h);
  out->async_allocs = atomic_load(&mock.async_allocs);
  out->async_frees = atomic_load(&mock.async_frees);
  out->launches = atomic_load(&mock.launches);
  pthread_mutex_lock(&mock.lock);
  out->device_bytes_used = mock.used[0];
  out->pinned_allocations = mock.pinned_count;
  int n = 0;
  for (mock_stream_t* s = mock.streams; s; s = s->next_all) ++n;
  out->streams = n;
  pthread_mutex_unlock(&mock.lock);
  out->context_pushes_outstanding = atomic_load(&mock_pushes);
}

//===----------------------------------------------------------------------===//
// NVRTC (CUBE_NVRTC=<this library>): a compile keeps the source as the cubin
//===----------------------------------------------------------------------===//

typedef struct mock_prog { char* src; } mock_prog_t;
MOCK_API int nvrtcVersion(int* major, int* minor) {
  *major = 99; /* never a real NVRTC's: its cache entries are its own */
  *minor = 0;
  return 0;
}
MOCK_API int nvrtcCreateProgram(mock_prog_t** prog, const char* src, const char* name, int n,
                                const char* const* headers, const char* const* names) {
  (void)name; (void)n; (void)headers; (void)names;
  mock_prog_t* p = calloc(1, sizeof(*p));
  if (!p || !(p->src = strdup(src))) { free(p); return 1; }
  *prog = p;
  return 0;
}
MOCK_API int nvrtcCompileProgram(mock_prog_t* prog, int n, const char* const* opts) {
  (void)prog; (void)n; (void)opts;
  return 0;
}
MOCK_API int nvrtcGetProgramLogSize(mock_prog_t* prog, size_t* n) { (void)prog; *n = 1; return 0; }
MOCK_API int nvrtcGetProgramLog(mock_prog_t* prog, char* log) { (void)prog; log[0] = 0; return 0; }
MOCK_API int nvrtcGetCUBINSize(mock_prog_t* prog, size_t* n) { *n = strlen(prog->src) + 1; return 0; }
MOCK_API int nvrtcGetCUBIN(mock_prog_t* prog, char* out) { memcpy(out, prog->src, strlen(prog->src) + 1); return 0; }
MOCK_API int nvrtcDestroyProgram(mock_prog_t** prog) {
  if (prog && *prog) { free((*prog)->src); free(*prog); *prog = NULL; }
  return 0;
}
MOCK_API const char* nvrtcGetErrorString(int r) { return r ? "mock NVRTC error" : "NVRTC_SUCCESS"; }

//===----------------------------------------------------------------------===//
// CUPTI's activity API (CUBE_CUPTI=<this library>)
//===----------------------------------------------------------------------===//

/* Kernel records laid out as CUpti_ActivityKernel10's first fields (the
 * offsets cube reads), MOCK_CUPTI_RECORD bytes each. A launch on a stream
 * while kernel records are on queues a host operation on the stream; when
 * the stream reaches it the record gets its start and end (CLOCK_REALTIME,
 * as CUPTI's clock) and waits for a flush. */
#define MOCK_CUPTI_RECORD 216
typedef void (*mock_cupti_req_fn)(uint8_t**, size_t*, size_t*);
typedef void (*mock_cupti_done_fn)(CUcontext, uint32_t, uint8_t*, size_t, size_t);
typedef struct mock_krec {
  uint64_t start, end;
  uint32_t ctx_id, stream_id, grid[3];
  const char* name;
  struct mock_krec* next;
} mock_krec_t;
static struct {
  pthread_mutex_t lock;
  mock_cupti_req_fn req;
  mock_cupti_done_fn done;
  atomic_bool kernels;
  mock_krec_t *head, *tail;
  uint64_t delivered, enables, disables;
} mock_cupti = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The global timer's shift from CLOCK_REALTIME (cube_mock_cuda_timer_shift:
 * a drift of the device's clock from the host's, as a test makes it). */
static _Atomic int64_t mock_timer_shift_ns;
static uint64_t mock_realtime_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec +
         (uint64_t)atomic_load(&mock_timer_shift_ns);
}
MOCK_API void cube_mock_cuda_timer_shift(int64_t ns) { atomic_fetch_add(&mock_timer_shift_ns, ns); }
/* The clock kernel's launches so far, and the name of the thread that made
 * the last (empty if none or unnamed). */
MOCK_API long cube_mock_cuda_clock_launches(char* thread, size_t size) {
  pthread_mutex_lock(&mock.lock);
  long n = mock_clock_launches;
  if (thread && size) snprintf(thread, size, "%s", mock_clock_thread);
  pthread_mutex_unlock(&mock.lock);
  return n;
}

static void mock_cupti_ran(void* p) {
  mock_krec_t* r = p;
  r->start = mock_realtime_ns();
  /* CUBE_MOCK_CUDA_KERNEL_US: how long a kernel "runs". */
  const char* e = getenv("CUBE_MOCK_CUDA_KERNEL_US");
  if (e && atoi(e) > 0) usleep((useconds_t)atoi(e));
  r->end = mock_realtime_ns();
  if (r->end == r->start) r->end++;
  pthread_mutex_lock(&mock_cupti.lock);
  if (mock_cupti.tail) mock_cupti.tail->next = r; else mock_cupti.head = r;
  mock_cupti.tail = r;
  pthread_mutex_unlock(&mock_cupti.lock);
}

static void mock_cupti_launch(mock_stream_t* s, CUfunction f, unsigned gx, unsigned gy,
                              unsigned gz) {
  if (!atomic_load(&mock_cupti.kernels)) return;
  mock_krec_t* r = calloc(1, sizeof(*r));
  mock_op_t* op = mock_op(OP_HOST);
  if (!r || !op) { free(r); free(op); return; }
  r->ctx_id = (uint32_t)s->device + 1;
  r->stream_id = s->cupti_id;
  r->grid[0] = gx; r->grid[1] = gy; r->grid[2] = gz;
  r->name = f == (CUfunction)&mock_function_tag ? "mock_function" : ((mock_fn_t*)f)->name;
  op->fn = mock_cupti_ran;
  op->user = r;
  mock_push((CUstream)s, op);
}

MOCK_API int cuptiGetVersion(uint32_t* v) { *v = 130001; return 0; }
MOCK_API int cuptiActivityRegisterCallbacks(mock_cupti_req_fn req, mock_cupti_done_fn done) {
  pthread_mutex_lock(&mock_cupti.lock);
  mock_cupti.req = req;
  mock_cupti.done = done;
  pthread_mutex_unlock(&mock_cupti.lock);
  return 0;
}
MOCK_API int cuptiActivityEnable(int kind) {
  if (kind != 10) return 1;
  atomic_store(&mock_cupti.kernels, true);
  pthread_mutex_lock(&mock_cupti.lock);
  mock_cupti.enables++;
  pthread_mutex_unlock(&mock_cupti.lock);
  return 0;
}
MOCK_API int cuptiActivityDisable(int kind) {
  if (kind != 10) return 1;
  atomic_store(&mock_cupti.kernels, false);
  pthread_mutex_lock(&mock_cupti.lock);
  mock_cupti.disables++;
  pthread_mutex_unlock(&mock_cupti.lock);
  return 0;
}
MOCK_API int cuptiGetTimestamp(uint64_t* ns) { *ns = mock_realtime_ns(); return 0; }
MOCK_API int cuptiGetContextId(CUcontext ctx, uint32_t* id) {
  for (int i = 0; i < MOCK_MAX_DEVICES; ++i)
    if (ctx == (CUcontext)&mock.ctx_tag[i]) { *id = (uint32_t)i + 1; return 0; }
  return 1;
}
MOCK_API int cuptiGetStreamIdEx(CUcontext ctx, CUstream stream, uint8_t per_thread, uint32_t* id) {
  (void)ctx; (void)per_thread;
  if (!stream) return 1;
  *id = ((mock_stream_t*)stream)->cupti_id;
  return 0;
}
MOCK_API int cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid, void** record) {
  uint8_t* next = *record ? (uint8_t*)*record + MOCK_CUPTI_RECORD : buffer;
  if ((size_t)(next - buffer) + MOCK_CUPTI_RECORD > valid) return 12; /* MAX_LIMIT_REACHED */
  *record = next;
  return 0;
}
/* Hands every completed record over, in buffers the client gives. */
MOCK_API int cuptiActivityFlushAll(uint32_t flag) {
  (void)flag;
  for (;;) {
    pthread_mutex_lock(&mock_cupti.lock);
    mock_krec_t* list = mock_cupti.head;
    mock_cupti.head = mock_cupti.tail = NULL;
    mock_cupti_req_fn req = mock_cupti.req;
    mock_cupti_done_fn done = mock_cupti.done;
    pthread_mutex_unlock(&mock_cupti.lock);
    if (!list) return 0;
    if (!req || !done) {
      while (list) { mock_krec_t* n = list->next; free(list); list = n; }
      return 0;
    }
    while (list) {
      uint8_t* buf = NULL;
      size_t size = 0, max = 0;
      req(&buf, &size, &max);
      if (!buf) return 1;
      size_t valid = 0;
      while (list && valid + MOCK_CUPTI_RECORD <= size) {
        uint8_t* r = buf + valid;
        memset(r, 0, MOCK_CUPTI_RECORD);
        {
          uint32_t kind = 10;
          memcpy(r + 0, &kind, 4);
          memcpy(r + 16, &list->start, 8);
          memcpy(r + 24, &list->end, 8);
          memcpy(r + 44, &list->ctx_id, 4);
          memcpy(r + 48, &list->stream_id, 4);
          memcpy(r + 52, list->grid, 12);
          memcpy(r + 104, &list->name, sizeof(list->name));
        }
        valid += MOCK_CUPTI_RECORD;
        mock_krec_t* n = list->next;
        free(list);
        list = n;
        pthread_mutex_lock(&mock_cupti.lock);
        mock_cupti.delivered++;
        pthread_mutex_unlock(&mock_cupti.lock);
      }
      done(NULL, 0, buf, size, valid);
    }
  }
}

/* Counters for tests (found with dlsym). */
typedef struct cube_mock_cupti_stats {
  uint64_t delivered, enables, disables;
  int kernels_on;
} cube_mock_cupti_stats_t;
MOCK_API void cube_mock_cupti_stats(cube_mock_cupti_stats_t* out) {
  pthread_mutex_lock(&mock_cupti.lock);
  out->delivered = mock_cupti.delivered;
  out->enables = mock_cupti.enables;
  out->disables = mock_cupti.disables;
  pthread_mutex_unlock(&mock_cupti.lock);
  out->kernels_on = atomic_load(&mock_cupti.kernels) ? 1 : 0;
}
