/* Kernel activity records: the backend's activity slots (backend.h,
 * version 5; docs/observability.md, "How kernels are timed"). Two sources,
 * CUBE_CUDA_KERNEL_TIMER choosing (once per process):
 *
 *  - self (the default): every kernel times itself. Each generated CUDA
 *    kernel takes a timing slot as its last parameter (preludes/cuda.h): the
 *    first unit of cube 0 writes the GPU's global timer into the slot's start
 *    at entry, the first unit of every cube raises its end at exit (an atomic
 *    max on the global address, which nobody waits for). The launching
 *    thread notes the launch in the stream's ring and passes the slot; every
 *    CUBE__ACT_BATCH launches, and before a wait for the stream, the stream
 *    is given a copy of the slots into pinned host memory (cuda_timer.c). A poller thread reads copied
 *    slots in launch order every millisecond (a trace's stop copies and
 *    waits). The global timer is put on cube's clock by a clock kernel that
 *    writes it into mapped memory while the host reads its own clock around
 *    the launch (16 tries, the tightest bound kept; measured again when
 *    records come on after a second and after a recovery).
 *  - cupti: CUPTI's activity API records each kernel's start and end in the
 *    background and hands the records over in buffers. The library is
 *    loaded with dlopen on the first activity_begin (CUBE_CUPTI; not with a
 *    substitute driver unless CUBE_CUPTI names the library), and only a
 *    CUPTI whose kernel record layout this file knows is used (API version
 *    13 and later: CUpti_ActivityKernel10's first fields). CUPTI's buffers
 *    come back on its own thread (or in a flush): each kernel record of a
 *    stream cube knows (by CUPTI's context and stream ids) is matched to its
 *    launch and named from it, or from the module whose entry function ran
 *    (each unit's entry has its own name: cuda_kernel.c).
 *  - events: neither; activity_begin says no and launches are timed by
 *    events around them.
 *
 * Either way records are on while a trace records, or while a device whose
 * profile summary wants them lives (activity_begin's |keep|); a trace's stop
 * turns them off when no such device is left. Each record goes into the
 * trace while one records, and into the stream's queue where the device's
 * profile summary keeps records (the stream's owner takes them:
 * activity_take). Nothing waits for records: a sync reads them only for a
 * profile summary (which is printed there), a trace's stop always does.
 * Kernels of CUDA graphs are left out (a replay is timed as one record), as
 * are kernels of streams that are not cube's.
 *
 * Thread-safety: one mutex guards the registry of streams and their queues
 * (the buffer callback and the poller take it); another, taken first,
 * turning records on and off. CUPTI's flush is called holding neither of
 * them (it calls the buffer callback inside).
 */
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_activity_internal.h"
#include "backends/cuda/cuda_backend_internal.h"
#include "base/options.h"
#include "platform/platform.h"
#include "trace/trace.h"

/* The part of CUPTI's C API used here (cupti_activity.h, cupti_result.h). */
#define CUBE__CUPTI_KIND_CONCURRENT_KERNEL 10
#define CUBE__CUPTI_ERROR_MAX_LIMIT_REACHED 12
/* CUpti_ActivityKernel10 (CUPTI 13): the offsets of the fields read. */
#define CUBE__CUPTI_K_START 16
#define CUBE__CUPTI_K_END 24
#define CUBE__CUPTI_K_CONTEXT 44
#define CUBE__CUPTI_K_STREAM 48
#define CUBE__CUPTI_K_GRID 52
#define CUBE__CUPTI_K_NAME 104
#define CUBE__CUPTI_K_GRAPH 156
#define CUBE__CUPTI_K_SIZE 160 /* the fields read lie below this */
#define CUBE__CUPTI_MIN_VERSION 130000u

typedef void (*cube__cupti_request_fn)(uint8_t** buffer, size_t* size, size_t* max_records);
typedef void (*cube__cupti_complete_fn)(CUcontext ctx, uint32_t stream_id, uint8_t* buffer,
                                        size_t size, size_t valid);

/* Records a stream keeps untaken at most; past it the oldest are dropped. */
#define CUBE__ACTIVITY_QUEUE_MAX (1u << 20)
/* CUPTI's buffers: 256 KiB, about 1,200 kernel records. CUPTI hands a buffer
 * back when it is full: the smaller it is, the sooner the collector matches
 * records to the launches waiting in their streams' rings. */
#define CUBE__ACTIVITY_BUFFER (256u << 10)

typedef enum { CUBE__ACT_SELF = 0, CUBE__ACT_CUPTI = 1, CUBE__ACT_EVENTS = 2 } cube__act_mode_t;

static struct {
  pthread_once_t once;
  cube__act_mode_t mode;
  bool usable;
  char reason[256];
  int (*reg)(cube__cupti_request_fn, cube__cupti_complete_fn);
  int (*enable)(int kind);
  int (*disable)(int kind);
  int (*flush)(uint32_t flag);
  int (*next)(uint8_t* buffer, size_t valid, void** record);
  int (*timestamp)(uint64_t* ns);
  int (*stream_id)(CUcontext ctx, CUstream stream, uint8_t per_thread, uint32_t* id);
  int (*context_id)(CUcontext ctx, uint32_t* id);
  int (*version)(uint32_t* v);

  pthread_mutex_t lock;   /* the registry, the queues, |offset| */
  pthread_mutex_t onoff;  /* turning records on and off, |keepers| (taken before |lock|) */
  atomic_bool enabled;
  int64_t offset; /* cube__now_ns() - CUPTI's clock */
  uint32_t keepers;
  bool hooked;    /* the trace's stop hooks and the exit handler are set */
  bool finished;  /* the process is exiting: no more calls into CUPTI */
  cube__cuda_stream_t** streams;
  size_t stream_count, stream_cap;
  pthread_cond_t poll_cond; /* self: the poller waits on it (with |lock|) while records are off */
} g_act = {.once = PTHREAD_ONCE_INIT,
           .poll_cond = PTHREAD_COND_INITIALIZER,
           .lock = PTHREAD_MUTEX_INITIALIZER,
           .onoff = PTHREAD_MUTEX_INITIALIZER};

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

/* Buffers: handed to CUPTI, filled, handed back (|full|, in order), read by
 * the collector thread or a flush's caller, then kept for reuse (|spare|). */
typedef struct cube__act_buffer {
  struct cube__act_buffer* next;
  size_t valid;
} cube__act_buffer_t;
#define CUBE__ACT_HEADER 64 /* the buffer's bytes start after this (CUPTI wants 8-aligned) */
#define CUBE__ACT_SPARE_MAX 8

static struct {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  pthread_mutex_t reading; /* one reader of buffers at a time: records stay in order */
  cube__act_buffer_t *head, *tail; /* full buffers, oldest first */
  cube__act_buffer_t* spare;
  unsigned spare_count;
  bool collector; /* the thread is running */
} g_buf = {.lock = PTHREAD_MUTEX_INITIALIZER,
           .cond = PTHREAD_COND_INITIALIZER,
           .reading = PTHREAD_MUTEX_INITIALIZER};

static void cube__act_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  pthread_mutex_lock(&g_buf.lock);
  cube__act_buffer_t* b = g_buf.spare;
  if (b) {
    g_buf.spare = b->next;
    g_buf.spare_count--;
  }
  pthread_mutex_unlock(&g_buf.lock);
  if (!b) b = aligned_alloc(CUBE__ACT_HEADER, CUBE__ACT_HEADER + CUBE__ACTIVITY_BUFFER);
  *buffer = b ? (uint8_t*)b + CUBE__ACT_HEADER : NULL;
  *size = b ? CUBE__ACTIVITY_BUFFER : 0;
  *max_records = 0;
}

static void cube__act_buffer_read(const uint8_t* buffer, size_t valid);

/* Reads every full buffer handed back so far, oldest first. */
static void cube__act_read_full(void) {
  pthread_mutex_lock(&g_buf.reading);
  for (;;) {
    pthread_mutex_lock(&g_buf.lock);
    cube__act_buffer_t* b = g_buf.head;
    if (b) {
      g_buf.head = b->next;
      if (!g_buf.head) g_buf.tail = NULL;
    }
    pthread_mutex_unlock(&g_buf.lock);
    if (!b) break;
    cube__act_buffer_read((uint8_t*)b + CUBE__ACT_HEADER, b->valid);
    pthread_mutex_lock(&g_buf.lock);
    if (g_buf.spare_count < CUBE__ACT_SPARE_MAX) {
      b->next = g_buf.spare;
      g_buf.spare = b;
      g_buf.spare_count++;
      b = NULL;
    }
    pthread_mutex_unlock(&g_buf.lock);
    free(b);
  }
  pthread_mutex_unlock(&g_buf.reading);
}

/* The collector: reads buffers as CUPTI hands them back, off the threads
 * that launch (CUPTI may hand one back on a launching thread). */
static void* cube__act_collector(void* arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&g_buf.lock);
    while (!g_buf.head) pthread_cond_wait(&g_buf.cond, &g_buf.lock);
    pthread_mutex_unlock(&g_buf.lock);
    cube__act_read_full();
  }
  return NULL;
}

/* A buffer back from CUPTI: queued for the collector (read here when there
 * is no collector). */
static void cube__act_buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer,
                                       size_t size, size_t valid) {
  (void)ctx;
  (void)stream_id;
  (void)size;
  if (!buffer) return;
  cube__act_buffer_t* b = (cube__act_buffer_t*)(buffer - CUBE__ACT_HEADER);
  b->valid = valid;
  b->next = NULL;
  pthread_mutex_lock(&g_buf.lock);
  if (g_buf.tail) g_buf.tail->next = b;
  else g_buf.head = b;
  g_buf.tail = b;
  bool collector = g_buf.collector;
  pthread_cond_signal(&g_buf.cond);
  pthread_mutex_unlock(&g_buf.lock);
  if (!collector) cube__act_read_full();
}

/* CUPTI's buffers emptied, and every record in them read, on return. */
static void cube__act_flush(void) {
  g_act.flush(1 /* CUPTI_ACTIVITY_FLAG_FLUSH_FORCED: the buffer being filled too */);
  cube__act_read_full();
}

static void cube__act_load_cupti(void);

static void cube__act_load(void) {
  g_act.mode = (cube__act_mode_t)cube__option_enum(CUBE__OPT_CUDA_KERNEL_TIMER);
  if (g_act.mode == CUBE__ACT_SELF) {
    g_act.usable = true; /* each device says for itself (its clock kernel) */
    return;
  }
  if (g_act.mode == CUBE__ACT_EVENTS) {
    snprintf(g_act.reason, sizeof(g_act.reason), "CUBE_CUDA_KERNEL_TIMER=events");
    return;
  }
  cube__act_load_cupti();
}

static void cube__act_load_cupti(void) {
  const char* opt = cube__option_str(CUBE__OPT_CUPTI);
  void* lib = NULL;
  const char* tried = "";
  if (opt && (strcmp(opt, "0") == 0 || strcmp(opt, "off") == 0)) {
    snprintf(g_act.reason, sizeof(g_act.reason), "CUBE_CUPTI=%s", opt);
    return;
  }
  if (opt && opt[0]) {
    tried = opt;
    lib = dlopen(opt, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  } else {
    /* CUPTI works with the driver it finds itself: never beside another. */
    const char* drv = cube__option_str(CUBE__OPT_CUDA_DRIVER);
    if (drv && drv[0] && strcmp(drv, "libcuda.so.1") != 0) {
      snprintf(g_act.reason, sizeof(g_act.reason),
               "CUBE_CUDA_DRIVER names another driver and CUBE_CUPTI no CUPTI");
      return;
    }
    static const char* const names[] = {"libcupti.so.13", "libcupti.so",
                                        "/usr/local/cuda/lib64/libcupti.so", NULL};
    for (int i = 0; names[i] && !lib; ++i) {
      tried = names[i];
      lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    }
  }
  if (!lib) {
    const char* e = dlerror();
    snprintf(g_act.reason, sizeof(g_act.reason), "CUPTI could not be loaded (%s: %s)", tried,
             e ? e : "?");
    return;
  }
#define CUBE__ACT_SYM(field, name)                                                         \
  do {                                                                                     \
    void* p_ = dlsym(lib, name);                                                           \
    if (!p_) {                                                                             \
      snprintf(g_act.reason, sizeof(g_act.reason), "CUPTI (%s) has no %s", tried, name);   \
      return;                                                                              \
    }                                                                                      \
    memcpy(&g_act.field, &p_, sizeof(p_));                                                 \
  } while (0)
  CUBE__ACT_SYM(reg, "cuptiActivityRegisterCallbacks");
  CUBE__ACT_SYM(enable, "cuptiActivityEnable");
  CUBE__ACT_SYM(disable, "cuptiActivityDisable");
  CUBE__ACT_SYM(flush, "cuptiActivityFlushAll");
  CUBE__ACT_SYM(next, "cuptiActivityGetNextRecord");
  CUBE__ACT_SYM(timestamp, "cuptiGetTimestamp");
  CUBE__ACT_SYM(stream_id, "cuptiGetStreamIdEx");
  CUBE__ACT_SYM(context_id, "cuptiGetContextId");
  CUBE__ACT_SYM(version, "cuptiGetVersion");
#undef CUBE__ACT_SYM
  uint32_t v = 0;
  if (g_act.version(&v) != 0 || v < CUBE__CUPTI_MIN_VERSION) {
    snprintf(g_act.reason, sizeof(g_act.reason),
             "CUPTI (%s) has API version %u; its kernel records are read from version %u on",
             tried, v, CUBE__CUPTI_MIN_VERSION);
    return;
  }
  int r = g_act.reg(cube__act_buffer_requested, cube__act_buffer_completed);
  if (r != 0) {
    snprintf(g_act.reason, sizeof(g_act.reason),
             "cuptiActivityRegisterCallbacks failed (%d): another tool may hold CUPTI", r);
    return;
  }
  g_act.usable = true;
}

//===----------------------------------------------------------------------===//
// Records in
//===----------------------------------------------------------------------===//

static inline uint32_t cube__act_u32(const uint8_t* r, size_t at) {
  uint32_t v;
  memcpy(&v, r + at, sizeof(v));
  return v;
}
static inline uint64_t cube__act_u64(const uint8_t* r, size_t at) {
  uint64_t v;
  memcpy(&v, r + at, sizeof(v));
  return v;
}

/* The hash in "cube_k_<16 hex>", or 0. */
static uint64_t cube__act_name_hash(const char* name) {
  const size_t p = sizeof(CUBE__CUDA_FN_PREFIX) - 1;
  if (!name || strncmp(name, CUBE__CUDA_FN_PREFIX, p) != 0) return 0;
  uint64_t h = 0;
  for (size_t i = p; i < p + 16; ++i) {
    char c = name[i];
    unsigned d;
    if (c >= '0' && c <= '9') d = (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') d = (unsigned)(c - 'a' + 10);
    else return 0;
    h = (h << 4) | d;
  }
  return name[p + 16] == '\0' ? h : 0;
}

static cube__cuda_stream_t* cube__act_find(uint32_t ctx_id, uint32_t sid) {
  for (size_t i = 0; i < g_act.stream_count; ++i) {
    cube__cuda_stream_t* s = g_act.streams[i];
    if (s->act->sid == sid && s->act->ctx_id == ctx_id) return s;
  }
  return NULL;
}

static void cube__act_push(struct cube__cuda_activity* a, const cube__act_entry_t* e) {
  if (a->count == a->cap) {
    if (a->cap >= CUBE__ACTIVITY_QUEUE_MAX) {
      a->head = (a->head + 1) % a->cap; /* the oldest goes */
      a->count--;
      a->dropped++;
    } else {
      size_t cap = a->cap ? a->cap * 2 : 1024;
      cube__act_entry_t* q = malloc(cap * sizeof(*q));
      if (!q) {
        a->dropped++;
        return;
      }
      for (size_t i = 0; i < a->count; ++i) q[i] = a->q[(a->head + i) % a->cap];
      free(a->q);
      a->q = q;
      a->cap = cap;
      a->head = 0;
    }
  }
  a->q[(a->head + a->count) % a->cap] = *e;
  a->count++;
}

/* Under the registry's lock: the name the launch of |hash| that this record
 * is of was given; NULL where no launch in the next CUBE__ACT_SEARCH
 * matches (one before records were on). The launches before the match had
 * no record (made as records came on): they are passed. */
static const char* cube__act_launch_name(struct cube__cuda_activity* a, uint64_t hash,
                                         char* out, size_t size, uint64_t* order) {
  uint64_t got = atomic_load_explicit(&a->got, memory_order_relaxed);
  uint64_t put = atomic_load_explicit(&a->put, memory_order_acquire);
  for (uint64_t i = got; i < put && i - got < CUBE__ACT_SEARCH; ++i) {
    const cube__act_launch_t* l = &a->launches[i % CUBE__ACT_LAUNCHES];
    if (l->hash != hash) continue;
    cube__trace_copy_name(out, size, a->names[i % CUBE__ACT_LAUNCHES]);
    *order = l->order;
    atomic_store_explicit(&a->got, i + 1, memory_order_release);
    return out;
  }
  return NULL;
}

/* A launching thread whose stream's ring is full of launches not read yet:
 * the stream copies their slots, this thread waits for the copy and reads
 * them (as a trace's stop does, for one stream). The lock order is the
 * poller's: the registry's, then the stream's copy lock. */
static void cube__act_self_catch_up(cube__cuda_stream_t* s) {
  cube__backend_device_t* d = s->act->device;
  pthread_mutex_lock(&g_act.lock);
  if (!atomic_load(&d->lost)) {
    cube__ktimer_copy(d, s, 1, true);
    cube__ktimer_drain(s);
  }
  pthread_mutex_unlock(&g_act.lock);
}

CUdeviceptr cube__cuda_activity_launched(cube__cuda_stream_t* s, uint64_t hash, const char* name,
                                         uint64_t kernel, uint64_t order,
                                         const uint32_t count[3]) {
  struct cube__cuda_activity* a = s->act;
  a->noted = 0;
  if (!atomic_load_explicit(&g_act.enabled, memory_order_relaxed)) return 0;
  const bool self = a->slots != 0;
  if (g_act.mode == CUBE__ACT_SELF && !self) return 0; /* not set up: untimed */
  uint64_t put = atomic_load_explicit(&a->put, memory_order_relaxed);
  uint64_t got = atomic_load_explicit(&a->got, memory_order_acquire);
  /* Full: CUPTI's record gets the module's name. Self-timed, the reader is a
   * whole ring behind the launches (the poller was not scheduled: a loaded
   * host): this thread reads what the stream completed itself, waiting for
   * it, rather than leave launches untimed; should that free nothing (a lost
   * device), the launch goes untimed (counted as dropped when read). */
  if (put - got >= CUBE__ACT_LAUNCHES) {
    if (!self) return 0;
    cube__act_self_catch_up(s);
    got = atomic_load_explicit(&a->got, memory_order_acquire);
    if (put - got >= CUBE__ACT_LAUNCHES) {
      atomic_fetch_add_explicit(&a->untimed, 1, memory_order_relaxed);
      return 0;
    }
  }
  const uint64_t i = put % CUBE__ACT_LAUNCHES;
  cube__act_launch_t* l = &a->launches[i];
  l->hash = hash;
  l->order = order;
  memcpy(l->count, count, sizeof(l->count));
  /* The name once per run of launches of one kernel, self-timed (CUPTI's
   * records are matched out of order: each launch carries its own). */
  l->named = !self || !kernel || kernel != a->named_kernel;
  if (l->named) {
    cube__trace_copy_name(a->names[i], sizeof(a->names[i]), name);
    a->named_kernel = self ? kernel : 0;
  }
  atomic_store_explicit(&a->put, put + 1, memory_order_release);
  a->noted = put + 1;
  return self ? a->slots + cube__act_slot_offset(i) : 0;
}

void cube__cuda_activity_submitted(cube__backend_device_t* d, cube__cuda_stream_t* s, bool ok) {
  struct cube__cuda_activity* a = s->act;
  if (!a || !a->noted) return;
  if (!ok && a->slots) {
    /* Self-timed: a refused launch's slot is never written; the note is
     * taken back (this thread alone notes, and the reader waits at a slot
     * not yet copied), so that the next launch takes its place. */
    atomic_store_explicit(&a->put, a->noted - 1, memory_order_release);
    a->noted = 0;
    a->named_kernel = 0; /* the next launch names itself: this one's name is not read */
    return;
  }
  if (a->slots) {
    atomic_store_explicit(&a->submitted, a->noted, memory_order_release);
    if (a->noted - atomic_load_explicit(&a->copied, memory_order_relaxed) >= CUBE__ACT_BATCH)
      cube__ktimer_copy(d, s, CUBE__ACT_BATCH, false);
  }
  a->noted = 0;
}

void cube__cuda_activity_before_wait(cube__backend_device_t* d, cube__cuda_stream_t* s) {
  if (s && s->act && s->act->slots && !atomic_load(&d->lost)) cube__ktimer_copy(d, s, 1, false);
}

/* The kernel's name: the module whose entry ran, or the function's own. */
static void cube__act_name(cube__backend_device_t* d, const cube__act_entry_t* e, char* out,
                           size_t size) {
  if (!e->hash) { /* named already: no lock that the launching threads take */
    cube__trace_copy_name(out, size, e->foreign);
    return;
  }
  const char* name = NULL;
  pthread_mutex_lock(&d->fn_lock);
  for (size_t m = 0; !name && m < d->module_count; ++m)
    if (d->modules[m].name_hash == e->hash) name = d->modules[m].kernel_name;
  cube__trace_copy_name(out, size, name ? name : "kernel");
  pthread_mutex_unlock(&d->fn_lock);
}

/* Under the registry's lock: kernel |e| of stream |s| into the trace (while
 * one records) and, where the device's profile summary keeps records, into
 * the stream's queue. */
void cube__act_deliver(cube__cuda_stream_t* s, cube__act_entry_t* e) {
  cube__backend_device_t* d = s->act->device;
  if (cube__trace_on()) {
    cube__trace_record_t t;
    memset(&t, 0, sizeof(t));
    t.ts_ns = e->start_ns;
    t.dur_ns = e->end_ns - e->start_ns;
    t.pid = cube__trace_device_pid((cube_device_id_t){CUBE_BACKEND_CUDA, d->index});
    t.tid = s->id;
    t.kind = CUBE__TRACE_KERNEL;
    t.order = e->order;
    for (int i = 0; i < 3; ++i) t.a[i] = e->count[i];
    cube__act_name(d, e, t.name, sizeof(t.name));
    cube__trace_copy_name(t.detail, sizeof(t.detail),
                          g_act.mode == CUBE__ACT_SELF ? "device timer" : "device activity");
    cube__trace_emit(&t);
  }
  if (atomic_load_explicit(&d->act_keep, memory_order_relaxed)) cube__act_push(s->act, e);
}

/* A buffer of records, on the collector or a flush's caller: each kernel of
 * a stream cube knows goes to the trace (while one records) and, where its
 * device's profile summary keeps records, to the stream's queue. */
static void cube__act_buffer_read(const uint8_t* buffer, size_t valid) {
  pthread_mutex_lock(&g_act.lock);
  void* rec = NULL;
  unsigned held = 0;
  /* The module name of the last record that matched no launch: looking it up
   * takes the device's function lock, which the launching thread takes at
   * every launch, so it is looked up once per run of such records. */
  const cube__backend_device_t* named_dev = NULL;
  uint64_t named_hash = 0;
  char named[80] = "";
  while (valid && g_act.next((uint8_t*)buffer, valid, &rec) == 0) {
    /* A buffer holds thousands of records: the lock is let go now and then,
     * so that a launching thread taking records waits for 64 at most. */
    if (++held == 64) {
      held = 0;
      pthread_mutex_unlock(&g_act.lock);
      pthread_mutex_lock(&g_act.lock);
      named_dev = NULL; /* a device may have gone meanwhile */
    }
    const uint8_t* r = rec;
    if (cube__act_u32(r, 0) != CUBE__CUPTI_KIND_CONCURRENT_KERNEL) continue;
    if (cube__act_u32(r, CUBE__CUPTI_K_GRAPH) != 0) continue; /* a node of a CUDA graph */
    cube__cuda_stream_t* s =
        cube__act_find(cube__act_u32(r, CUBE__CUPTI_K_CONTEXT), cube__act_u32(r, CUBE__CUPTI_K_STREAM));
    if (!s) continue;
    uint64_t start = cube__act_u64(r, CUBE__CUPTI_K_START);
    uint64_t end = cube__act_u64(r, CUBE__CUPTI_K_END);
    if (!start || end < start) continue; /* not completed */
    cube__act_entry_t e;
    memset(&e, 0, sizeof(e));
    e.start_ns = (uint64_t)((int64_t)start + g_act.offset);
    e.end_ns = (uint64_t)((int64_t)end + g_act.offset);
    for (int i = 0; i < 3; ++i) e.count[i] = cube__act_u32(r, CUBE__CUPTI_K_GRID + 4u * (size_t)i);
    const char* name = NULL;
    memcpy(&name, r + CUBE__CUPTI_K_NAME, sizeof(name));
    e.hash = cube__act_name_hash(name);
    if (!e.hash) cube__trace_copy_name(e.foreign, sizeof(e.foreign), name ? name : "kernel");
    char launched[80];
    const char* as =
        e.hash ? cube__act_launch_name(s->act, e.hash, launched, sizeof(launched), &e.order)
               : NULL;
    if (as) {
      /* The launch's own name: kept in the entry as a function's is. */
      cube__trace_copy_name(e.foreign, sizeof(e.foreign), as);
      e.hash = 0;
    } else if (e.hash) {
      /* No launch noted for it (its stream's ring was full, or records came
       * on after it): the module's kernel name. */
      if (named_dev != s->act->device || named_hash != e.hash) {
        cube__act_name(s->act->device, &e, named, sizeof(named));
        named_dev = s->act->device;
        named_hash = e.hash;
      }
      cube__trace_copy_name(e.foreign, sizeof(e.foreign), named);
      e.hash = 0;
    }
    cube__act_deliver(s, &e);
  }
  pthread_mutex_unlock(&g_act.lock);
}

/* Under the registry's lock. */
static void cube__act_self_drain_all(void) {
  for (size_t i = 0; i < g_act.stream_count; ++i) cube__ktimer_drain(g_act.streams[i]);
}

/* The poller: every millisecond while records are on, the completed slots
 * of every stream. */
static void* cube__act_poller(void* arg) {
  (void)arg;
  pthread_mutex_lock(&g_act.lock);
  for (;;) {
    while (!atomic_load(&g_act.enabled) && !g_act.finished)
      pthread_cond_wait(&g_act.poll_cond, &g_act.lock);
    if (g_act.finished) break;
    cube__act_self_drain_all();
    pthread_mutex_unlock(&g_act.lock);
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
    pthread_mutex_lock(&g_act.lock);
  }
  pthread_mutex_unlock(&g_act.lock);
  return NULL;
}

//===----------------------------------------------------------------------===//
// On and off
//===----------------------------------------------------------------------===//

/* Under |onoff|: records off when nothing wants them any more. */
static void cube__act_maybe_off_locked(void) {
  if (g_act.keepers == 0 && !cube__trace_on() && atomic_load(&g_act.enabled) &&
      !g_act.finished) {
    if (g_act.mode == CUBE__ACT_CUPTI) g_act.disable(CUBE__CUPTI_KIND_CONCURRENT_KERNEL);
    atomic_store(&g_act.enabled, false);
    cube__activity_epoch_bump(); /* servers ask again (backends/backend.h) */
  }
}

/* Every record of what completed, read now. Self-timed, each stream copies
 * the slots of what it was given and is waited for (a trace's stop, an
 * explicit summary: the end of a measurement). */
static void cube__act_read_now(void) {
  if (g_act.mode == CUBE__ACT_CUPTI) {
    cube__act_flush();
    return;
  }
  pthread_mutex_lock(&g_act.lock);
  for (size_t i = 0; i < g_act.stream_count; ++i) {
    cube__cuda_stream_t* s = g_act.streams[i];
    cube__backend_device_t* d = s->act->device;
    if (!s->act->slots || atomic_load(&d->lost)) continue;
    CUBE__CUDA_SCOPE(d->ctx);
    cube__ktimer_copy(d, s, 1, true);
  }
  cube__act_self_drain_all();
  pthread_mutex_unlock(&g_act.lock);
}

/* A trace stops: the records of what completed go into it first. */
static void cube__act_trace_stopping(void) {
  pthread_mutex_lock(&g_act.onoff);
  if (atomic_load(&g_act.enabled) && !g_act.finished) cube__act_read_now();
  pthread_mutex_unlock(&g_act.onoff);
}

/* It stopped: records go off unless a profiling device keeps them. */
static void cube__act_trace_stopped(void) {
  pthread_mutex_lock(&g_act.onoff);
  cube__act_maybe_off_locked();
  pthread_mutex_unlock(&g_act.onoff);
}

/* At exit, before CUPTI's own handler (registered before this one) and
 * before CUBE_TRACE's writes the file (also registered earlier): the last
 * records into the trace, then no more calls into CUPTI. */
static void cube__act_at_exit(void) {
  pthread_mutex_lock(&g_act.onoff);
  if (atomic_load(&g_act.enabled) && !g_act.finished) {
    cube__act_read_now();
    if (g_act.mode == CUBE__ACT_CUPTI) g_act.disable(CUBE__CUPTI_KIND_CONCURRENT_KERNEL);
    atomic_store(&g_act.enabled, false);
  }
  cube__activity_epoch_bump();
  pthread_mutex_lock(&g_act.lock);
  g_act.finished = true;
  pthread_cond_broadcast(&g_act.poll_cond);
  pthread_mutex_unlock(&g_act.lock);
  pthread_mutex_unlock(&g_act.onoff);
}

/* Under |onoff|. */
static bool cube__act_enable_locked(void) {
  if (atomic_load(&g_act.enabled)) return true;
  if (g_act.finished) return false;
  if (g_act.mode == CUBE__ACT_SELF) {
    if (!g_act.hooked) {
      pthread_t t;
      cube_status_t st = cube__thread_create(&t, cube__act_poller, NULL, "cube-ktimer", 0);
      if (st) {
        cube_status_free(st);
        return false;
      }
      pthread_detach(t);
      cube__trace_on_stop(cube__act_trace_stopping, cube__act_trace_stopped);
      atexit(cube__act_at_exit);
      g_act.hooked = true;
    }
    /* Kernels launched while records were on before and not read then are
     * read but not delivered (a trace gets none of an earlier one's). A
     * clock measured more than a second ago is measured again by the
     * reader before it converts the next record (cube__ktimer_drain), not
     * by a launching thread: the launches time as they would. */
    pthread_mutex_lock(&g_act.lock);
    const uint64_t now = cube__now_ns();
    for (size_t i = 0; i < g_act.stream_count; ++i) {
      struct cube__cuda_activity* a = g_act.streams[i]->act;
      a->quiet_below = atomic_load(&a->put);
      if (now - a->device->act_calibrated_at > 1000000000ull) a->device->act_stale = true;
    }
    atomic_store(&g_act.enabled, true);
    pthread_cond_broadcast(&g_act.poll_cond);
    pthread_mutex_unlock(&g_act.lock);
    return true;
  }
  if (g_act.enable(CUBE__CUPTI_KIND_CONCURRENT_KERNEL) != 0) return false;
  /* CUPTI's clock against cube's: the middle of two reads of ours. */
  uint64_t t0 = cube__now_ns(), c = 0;
  g_act.timestamp(&c);
  uint64_t t1 = cube__now_ns();
  pthread_mutex_lock(&g_act.lock);
  g_act.offset = (int64_t)(t0 + (t1 - t0) / 2) - (int64_t)c;
  pthread_mutex_unlock(&g_act.lock);
  if (!g_act.hooked) {
    cube__trace_on_stop(cube__act_trace_stopping, cube__act_trace_stopped);
    atexit(cube__act_at_exit);
    g_act.hooked = true;
    /* The collector lives as long as the process (it waits for buffers). */
    pthread_t t;
    cube_status_t st = cube__thread_create(&t, cube__act_collector, NULL, "cube-cupti", 0);
    if (!st) {
      pthread_detach(t);
      pthread_mutex_lock(&g_buf.lock);
      g_buf.collector = true;
      pthread_mutex_unlock(&g_buf.lock);
    }
    cube_status_free(st);
  }
  atomic_store(&g_act.enabled, true);
  return true;
}

/* Under the lock: |s| in the registry; with CUPTI its ids, self-timed its
 * slots (and its device's clock measured). */
static bool cube__act_register_locked(cube__backend_device_t* d, cube__cuda_stream_t* s) {
  if (!s->act) {
    s->act = calloc(1, sizeof(*s->act));
    if (!s->act) return false;
  }
  uint32_t ctx_id = 0, sid = 0;
  if (g_act.mode == CUBE__ACT_SELF) {
    if (atomic_load(&d->lost)) return false;
    CUBE__CUDA_SCOPE(d->ctx);
    if (!cube__ktimer_setup(d, s)) return false;
    if (s->act->known) return true;
  } else {
    if (s->act->known) return true;
    if (g_act.context_id(d->ctx, &ctx_id) != 0 ||
        g_act.stream_id(d->ctx, s->stream, 0, &sid) != 0)
      return false;
  }
  if (g_act.stream_count == g_act.stream_cap) {
    size_t cap = g_act.stream_cap ? g_act.stream_cap * 2 : 16;
    void* grown = realloc(g_act.streams, cap * sizeof(*g_act.streams));
    if (!grown) return false;
    g_act.streams = grown;
    g_act.stream_cap = cap;
  }
  g_act.streams[g_act.stream_count++] = s;
  s->act->device = d;
  s->act->ctx_id = ctx_id;
  s->act->sid = sid;
  s->act->known = true;
  return true;
}

bool cube__cuda_activity_begin(cube__backend_device_t* d, void* stream, uint32_t kind, bool keep) {
  cube__cuda_stream_t* s = stream;
  /* Kernels only: copies keep their events (a copy timed by CUPTI's memcpy
   * record would run on the device clock while the download after it is
   * timed on the host clock from its call, which may come first). */
  if (!s || kind != CUBE__ACTIVITY_KERNEL) return false;
  /* The common case: on, the stream known (self-timed: its device's clock
   * measured since records came on), nothing to keep. */
  if (s->act && s->act->known && (!keep || atomic_load_explicit(&d->act_keep, memory_order_relaxed)) &&
      atomic_load_explicit(&g_act.enabled, memory_order_relaxed) &&
      (g_act.mode != CUBE__ACT_SELF || atomic_load_explicit(&d->act_calibrated, memory_order_relaxed)))
    return true;
  pthread_once(&g_act.once, cube__act_load);
  if (!g_act.usable) return false;
  if (g_act.mode == CUBE__ACT_SELF &&
      atomic_load_explicit(&d->act_refused, memory_order_relaxed) == atomic_load(&d->epoch) + 1)
    return false;
  pthread_mutex_lock(&g_act.onoff);
  bool ok = cube__act_enable_locked();
  if (ok) {
    pthread_mutex_lock(&g_act.lock);
    ok = cube__act_register_locked(d, s);
    pthread_mutex_unlock(&g_act.lock);
  }
  if (ok && keep && !atomic_load(&d->act_keep)) {
    atomic_store(&d->act_keep, true);
    g_act.keepers++;
  }
  pthread_mutex_unlock(&g_act.onoff);
  return ok;
}

size_t cube__cuda_activity_take(cube__backend_device_t* d, void* stream, bool flush,
                                cube__activity_record_t* out, size_t max) {
  cube__cuda_stream_t* s = stream;
  if (!s || !s->act || !max) return 0;
  if (flush) {
    pthread_mutex_lock(&g_act.onoff);
    if (atomic_load(&g_act.enabled) && !g_act.finished) cube__act_read_now();
    pthread_mutex_unlock(&g_act.onoff);
  }
  /* Records are queued here only for a device whose profile summary keeps
   * them (the trace gets them from the collector): otherwise there is
   * nothing to take, and the launching thread must not wait for the lock
   * that the collector holds while it reads a buffer. */
  if (!atomic_load_explicit(&d->act_keep, memory_order_relaxed)) return 0;
  cube__act_entry_t e[64];
  size_t n = 0;
  pthread_mutex_lock(&g_act.lock);
  struct cube__cuda_activity* a = s->act;
  while (n < max && n < sizeof(e) / sizeof(e[0]) && a->count) {
    e[n++] = a->q[a->head];
    a->head = (a->head + 1) % a->cap;
    a->count--;
  }
  pthread_mutex_unlock(&g_act.lock);
  if (!n) return 0;
  for (size_t i = 0; i < n; ++i) {
    cube__activity_record_t* o = &out[i];
    o->kind = CUBE__ACTIVITY_KERNEL;
    o->traced = true; /* the collector put it into the trace */
    o->start_ns = e[i].start_ns;
    o->end_ns = e[i].end_ns;
    memcpy(o->count, e[i].count, sizeof(o->count));
    cube__act_name(d, &e[i], o->name, sizeof(o->name));
  }
  return n;
}

void cube__cuda_activity_stream_gone(cube__cuda_stream_t* s) {
  if (!s->act) return;
  pthread_mutex_lock(&g_act.lock);
  for (size_t i = 0; i < g_act.stream_count; ++i)
    if (g_act.streams[i] == s) {
      g_act.streams[i] = g_act.streams[--g_act.stream_count];
      break;
    }
  struct cube__cuda_activity* a = s->act;
  if (a->slots) {
    /* The stream was waited for (a lost device's kernels run no more). */
    cube__ktimer_drain(s);
    cube__backend_device_t* d = a->device;
    atomic_fetch_sub(&d->act_bytes, (uint64_t)CUBE__ACT_DEVICE_BYTES);
    if (!atomic_load(&d->lost) && a->device->act_epoch == atomic_load(&d->epoch)) {
      CUBE__CUDA_SCOPE(d->ctx);
      d->cu->MemFree(a->slots);
      d->cu->MemFreeHost((void*)a->host);
    }
    pthread_mutex_destroy(&a->copy_lock);
  }
  free(a->q);
  free(a);
  s->act = NULL;
  pthread_mutex_unlock(&g_act.lock);
  cube__activity_epoch_bump();
}

void cube__cuda_activity_device_gone(cube__backend_device_t* d) {
  if (d->act_clock_module) {
    pthread_mutex_lock(&g_act.lock);
    if (!atomic_load(&d->lost) && d->act_epoch == atomic_load(&d->epoch)) {
      CUBE__CUDA_SCOPE(d->ctx);
      d->cu->ModuleUnload(d->act_clock_module);
    }
    d->act_clock_module = NULL;
    d->act_clock_fn = NULL;
    pthread_mutex_unlock(&g_act.lock);
  }
  if (!atomic_load(&d->act_keep)) return;
  pthread_mutex_lock(&g_act.onoff);
  atomic_store(&d->act_keep, false);
  cube__activity_epoch_bump();
  if (g_act.keepers) g_act.keepers--;
  cube__act_maybe_off_locked();
  pthread_mutex_unlock(&g_act.onoff);
}
