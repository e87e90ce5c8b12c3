/* The CPU backend: CUBE_CPU_DEVICES logical devices (default 1) over the one
 * process-wide worker pool. Storage is plain host memory; launches run native
 * kernels (cube_cpu_kernel_fn) once per cube, synchronously on the calling
 * runner thread with the pool's threads helping.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_compiler.h"
#include "backends/cpu/cpu_fault_guard.h"
#include "backends/cpu/cpu_internal.h"
#include "backends/params.h"
#include "platform/worker_pool.h"
#include "base/options.h"
#include "base/status.h"
#include "cube/backends/cpu.h"
#include "cube/cube.h"
#include "kernel/cache.h"
#include "kernel/dialect.h"
#include "kernel/kernel.h"
#include "platform/platform.h"

#define CUBE__CPU_MAX_DEVICES 64u
#define CUBE__CPU_MAX_THREADS 1024u /* the worker pool's limit */
_Static_assert(CUBE__CPU_MAX_DEVICES == CUBE__OPT_CPU_DEVICES_MAX &&
                   CUBE__CPU_MAX_THREADS == CUBE__OPT_CPU_THREADS_MAX,
               "the option table accepts what the CPU backend can do");
#define CUBE__CPU_ALIGNMENT 64u
/* Allocations of at least this size come from anonymous mmap: zero pages
 * that the kernel maps lazily, so a big buffer costs nothing until used. */
#define CUBE__CPU_MMAP_THRESHOLD (256u * 1024u)
#define CUBE__CPU_HUGE_THRESHOLD (4u * 1024u * 1024u)
#define CUBE__CPU_HUGE_ALIGN (2u * 1024u * 1024u)
/* Units a chunk of cubes should hold at least before another worker is
 * asked to help: below this a wake-up costs more than the work. A launch of
 * one cube always runs on the caller. */
#define CUBE__CPU_MIN_CHUNK_UNITS 1024u

/* How a storage buffer was obtained (kept in backend_data). */
enum {
  CUBE__CPU_STORAGE_HEAP = 1, /* cube__aligned_calloc */
  CUBE__CPU_STORAGE_MMAP = 2, /* anonymous mmap */
};

/* Cube-local scratch of one participant; grown on demand. */
typedef struct cube__cpu_scratch {
  void* ptr;
  uint64_t size;
} cube__cpu_scratch_t;

struct cube__backend_device {
  uint32_t index;
  cube__worker_pool_t* pool;
  uint32_t workers; /* pool size: participant numbers are < workers */
  uint32_t threads; /* most participants of one launch (cube_cpu_params_t.threads) */
  /* One per participant. A device's launches never overlap (they run on its
   * runner), and participant numbers are unique within a launch, so entry p
   * is touched by one thread at a time. */
  cube__cpu_scratch_t* scratch;
  cube_device_properties_t props; /* the limits launches are checked against */
};

static atomic_uint_fast64_t cube__cpu_next_storage_id = 1;

//===----------------------------------------------------------------------===//
// Devices
//===----------------------------------------------------------------------===//

/* CUBE_CPU_DEVICES (the option table accepts 1 to CUBE__CPU_MAX_DEVICES;
 * default 1). A malformed value counts as unset (one device): the entry
 * points report it (base/options.h), and so does device creation. */
static cube_status_t cube__cpu_devices_wanted(uint32_t* out_count) {
  uint32_t v = cube__option_u32(CUBE__OPT_CPU_DEVICES);
  *out_count = v < 1 ? 1 : v > CUBE__CPU_MAX_DEVICES ? CUBE__CPU_MAX_DEVICES : v;
  return cube__option_status(CUBE__OPT_CPU_DEVICES);
}

/* The CPU is always there. */
static cube_status_t cube__cpu_availability(void) { return CUBE_OK; }

static uint32_t cube__cpu_device_count(void) {
  uint32_t count;
  cube_status_free(cube__cpu_devices_wanted(&count));
  return count;
}

static pthread_once_t cube__cpu_model_once = PTHREAD_ONCE_INIT;
static char cube__cpu_model[96] = "cpu";

/* The "model name" line of /proc/cpuinfo, if any. */
static void cube__cpu_model_read(void) {
  FILE* f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[256];
  while (fgets(line, sizeof(line), f)) {
    if (strncmp(line, "model name", 10) != 0) continue;
    const char* v = strchr(line, ':');
    if (!v) continue;
    ++v;
    while (*v == ' ' || *v == '\t') ++v;
    size_t len = strcspn(v, "\r\n");
    while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t')) --len;
    if (len == 0) continue;
    if (len >= sizeof(cube__cpu_model)) len = sizeof(cube__cpu_model) - 1;
    memcpy(cube__cpu_model, v, len);
    cube__cpu_model[len] = '\0';
    break;
  }
  fclose(f);
}

static void cube__cpu_fill_properties(uint32_t index, uint32_t workers,
                                      cube_device_properties_t* p) {
  memset(p, 0, sizeof(*p));
  pthread_once(&cube__cpu_model_once, cube__cpu_model_read);
  snprintf(p->name, sizeof(p->name), "cpu:%u (%.96s)", index, cube__cpu_model);
  p->id.backend = CUBE_BACKEND_CPU;
  p->id.index = index;
  p->memory.total_memory = cube__total_memory();
  /* CubeCL's CPU backend uses all of RAM as the max page size, which makes
   * the top pages of the SubSlices ladder huge (a quarter of RAM, then a
   * sixteenth...). A quarter of RAM matches CUDA's rule. */
  p->memory.max_page_size =
      (p->memory.total_memory / 4) / CUBE__CPU_ALIGNMENT * CUBE__CPU_ALIGNMENT;
  p->memory.alignment = CUBE__CPU_ALIGNMENT;
  p->hardware.load_width = 512;
  p->hardware.plane_size_min = 1;
  p->hardware.plane_size_max = 1;
  p->hardware.max_bindings = 1024;
  p->hardware.max_shared_memory_size = 1u << 20;
  p->hardware.max_cube_count[0] = UINT32_MAX;
  p->hardware.max_cube_count[1] = UINT32_MAX;
  p->hardware.max_cube_count[2] = UINT32_MAX;
  p->hardware.max_units_per_cube = 1024;
  p->hardware.max_cube_dim[0] = 1024;
  p->hardware.max_cube_dim[1] = 1024;
  p->hardware.max_cube_dim[2] = 64;
  p->hardware.num_streaming_multiprocessors = 0;
  p->hardware.num_tensor_cores = 0;
  p->hardware.min_tensor_cores_dim = 0;
  p->hardware.num_cpu_cores = workers;
  {
    long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE); /* per core; 0 or -1 where unknown */
    p->hardware.l2_cache_size = l2 > 0 ? (uint64_t)l2 : 0;
  }
  p->hardware.max_vector_size = 16;
  p->timing_method = CUBE_TIMING_DEVICE;
  p->layout_policy = CUBE_LAYOUT_POLICY_CONTIGUOUS;
}

static cube_status_t cube__cpu_device_create(uint32_t index, const cube_server_options_t* options,
                                             cube__backend_device_t** out_device,
                                             cube_device_properties_t* out_props,
                                             cube_features_t* out_features,
                                             cube_backend_info_t* out_info) {
  cube_cpu_params_t prm;
  cube_cpu_params_initialize(&prm);
  char what[32];
  snprintf(what, sizeof(what), "cpu:%u", index);
  CUBE_RETURN_IF_ERROR(cube__backend_params_take(options, CUBE_BACKEND_CPU, what, sizeof(prm),
                                                 sizeof(prm), &prm));
  if (prm.threads > CUBE__CPU_MAX_THREADS)
    return CUBE_INVALID("cpu:%u: backend_params.threads is %u, not 0 (the whole pool) or "
                        "a thread count from 1 to %u",
                        index, prm.threads, CUBE__CPU_MAX_THREADS);
  uint32_t count;
  CUBE_RETURN_IF_ERROR(cube__cpu_devices_wanted(&count));
  if (index >= count)
    return cube__status_make(CUBE_STATUS_NOT_FOUND,
                             "cpu:%u does not exist (%u device%s, CUBE_CPU_DEVICES)", index,
                             count, count == 1 ? "" : "s");
  cube__backend_device_t* dev = calloc(1, sizeof(*dev));
  if (!dev)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "cpu:%u: no memory for the device",
                             index);
  cube_status_t s = cube__worker_pool_acquire(&dev->pool);
  if (s != CUBE_OK) {
    free(dev);
    return cube__status_annotate(s, "cpu:%u", index);
  }
  dev->index = index;
  dev->workers = cube__worker_pool_size(dev->pool);
  dev->threads = prm.threads && prm.threads < dev->workers ? prm.threads : dev->workers;
  dev->scratch = calloc(dev->workers, sizeof(*dev->scratch));
  if (!dev->scratch) {
    uint32_t workers = dev->workers;
    cube__worker_pool_release(dev->pool);
    free(dev);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "cpu:%u: no memory for %u scratch slots", index, workers);
  }

  cube__cpu_fill_properties(index, dev->threads, &dev->props);
  if (out_props) *out_props = dev->props;
  if (out_features) {
    out_features->bits = CUBE_FEATURE_NATIVE_KERNELS | CUBE_FEATURE_DYNAMIC_COUNT |
                         CUBE_FEATURE_COLLECTIVES | /* src/collective: host transport */
                         CUBE_FEATURE_F64 | CUBE_FEATURE_I64 | CUBE_FEATURE_ATOMIC_U32 |
                         CUBE_FEATURE_ATOMIC_F32_ADD | CUBE_FEATURE_SHARED_MEMORY |
                         CUBE_FEATURE_PINNED_STAGING;
  }
  if (out_info) {
    memset(out_info, 0, sizeof(*out_info));
    out_info->backend = CUBE_BACKEND_CPU;
    snprintf(out_info->name, sizeof(out_info->name), "cpu");
    snprintf(out_info->version, sizeof(out_info->version), "cube %s cpu, %u threads",
             CUBE_VERSION_STRING, dev->threads);
    out_info->device_count = count;
  }
  *out_device = dev;
  return CUBE_OK;
}

static void cube__cpu_device_destroy(cube__backend_device_t* dev) {
  if (!dev) return;
  for (uint32_t i = 0; i < dev->workers; ++i) cube__aligned_free(dev->scratch[i].ptr);
  free(dev->scratch);
  cube__worker_pool_release(dev->pool);
  free(dev);
}

//===----------------------------------------------------------------------===//
// Storage
//===----------------------------------------------------------------------===//

/* Anonymous memory of |size| bytes (NULL on failure). |huge|: advised to use
 * transparent huge pages where the system has them (advice only: a failure
 * changes nothing), and placed on a 2 MiB boundary (a larger mapping
 * trimmed), so that every 2 MiB of it can be one huge page: the first write
 * into a fresh pool page (an upload) then faults 2 MiB at a time instead of
 * 4 KiB. Unmapped with munmap(ptr, size) either way. */
static void* cube__cpu_map(size_t size, bool huge) {
  const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
#ifdef MADV_HUGEPAGE
  const size_t align = CUBE__CPU_HUGE_ALIGN;
  long ps = sysconf(_SC_PAGESIZE);
  size_t page = ps > 0 ? (size_t)ps : 4096u;
  size_t len = (size + page - 1) / page * page;
  if (huge && len >= size && len <= SIZE_MAX - align) {
    uint8_t* raw = mmap(NULL, len + align, prot, flags, -1, 0);
    if (raw != MAP_FAILED) {
      uintptr_t at = ((uintptr_t)raw + align - 1) & ~(uintptr_t)(align - 1);
      size_t head = (size_t)(at - (uintptr_t)raw);
      size_t tail = align - head;
      if (head) munmap(raw, head);
      if (tail) munmap((uint8_t*)at + len, tail);
      (void)madvise((void*)at, len, MADV_HUGEPAGE);
      return (void*)at;
    }
  }
#else
  (void)huge;
#endif
  void* ptr = mmap(NULL, size, prot, flags, -1, 0);
  return ptr == MAP_FAILED ? NULL : ptr;
}

static cube_status_t cube__cpu_alloc_storage(cube__backend_device_t* dev, uint64_t size,
                                             cube__storage_t* out) {
  void* ptr = NULL;
  uintptr_t kind;
  if (size > (uint64_t)SIZE_MAX / 2) {
    ptr = NULL;
    kind = CUBE__CPU_STORAGE_MMAP;
  } else if (size >= CUBE__CPU_MMAP_THRESHOLD) {
    /* Page aligned (>= 64) and zero; nothing is touched until used. */
    bool huge = size >= CUBE__CPU_HUGE_THRESHOLD && cube__option_bool(CUBE__OPT_CPU_HUGE_PAGES);
    ptr = cube__cpu_map((size_t)size, huge);
    kind = CUBE__CPU_STORAGE_MMAP;
  } else {
    /* Size 0 still gets a distinct, valid pointer. */
    ptr = cube__aligned_calloc(size ? (size_t)size : 1, CUBE__CPU_ALIGNMENT);
    kind = CUBE__CPU_STORAGE_HEAP;
  }
  if (!ptr) {
    char buf[32];
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "cpu:%u: allocation of %llu bytes (%s) failed",
                             dev ? dev->index : 0u, (unsigned long long)size,
                             cube__format_bytes(size, buf, sizeof(buf)));
  }
  out->id = atomic_fetch_add_explicit(&cube__cpu_next_storage_id, 1, memory_order_relaxed);
  out->ptr = ptr;
  out->size = size;
  out->backend_data = (void*)kind;
  return CUBE_OK;
}

static cube_status_t cube__cpu_alloc(cube__backend_device_t* dev, uint64_t size,
                                     cube__storage_t* out) {
  return cube__cpu_alloc_storage(dev, size, out);
}

/* On the CPU "pinned" staging memory is plain memory. */
static cube_status_t cube__cpu_host_alloc(cube__backend_device_t* dev, uint64_t size,
                                          cube__storage_t* out) {
  return cube__cpu_alloc_storage(dev, size, out);
}

static void cube__cpu_dealloc(cube__backend_device_t* dev, const cube__storage_t* storage) {
  (void)dev;
  if (!storage || !storage->ptr) return;
  if ((uintptr_t)storage->backend_data == CUBE__CPU_STORAGE_MMAP)
    munmap(storage->ptr, (size_t)storage->size);
  else
    cube__aligned_free(storage->ptr);
}

static cube_status_t cube__cpu_stream_create(cube__backend_device_t* dev, uint64_t stream_id,
                                             void** out_stream) {
  (void)dev;
  (void)stream_id;
  *out_stream = NULL; /* no per-stream state */
  return CUBE_OK;
}

static void cube__cpu_stream_destroy(cube__backend_device_t* dev, void* stream) {
  (void)dev;
  (void)stream;
}

/* Checks that |height| rows of |width| bytes, |pitch| apart from |offset|,
 * lie inside |storage|. */
static cube_status_t cube__cpu_check_rows(const char* op, const cube__storage_t* storage,
                                          uint64_t offset, uint64_t pitch, uint64_t width,
                                          uint64_t height) {
  if (height > 1 && pitch < width)
    return CUBE_INVALID("cpu %s: pitch %llu is smaller than the row width %llu", op,
                        (unsigned long long)pitch, (unsigned long long)width);
  uint64_t span, last;
  if (cube__mul_overflow_u64(height - 1, pitch, &span) ||
      cube__add_overflow_u64(span, width, &span) || cube__add_overflow_u64(offset, span, &last) ||
      last > storage->size)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "cpu %s: %llu rows of %llu bytes, pitch %llu, at offset %llu exceed "
                             "storage %llu of %llu bytes",
                             op, (unsigned long long)height, (unsigned long long)width,
                             (unsigned long long)pitch, (unsigned long long)offset,
                             (unsigned long long)storage->id, (unsigned long long)storage->size);
  return CUBE_OK;
}

/* A contiguous copy of this size or more is shared by the device's workers:
 * one thread's memcpy does not reach the memory's bandwidth (nor fault in
 * fresh pages as fast). Pieces of CUBE__CPU_COPY_PIECE bytes, at least
 * CUBE__CPU_COPY_MIN_PIECES to a thread. */
#define CUBE__CPU_COPY_PARALLEL (2u * 1024u * 1024u)
#define CUBE__CPU_COPY_PIECE (256u * 1024u)
#define CUBE__CPU_COPY_MIN_PIECES 4u

typedef struct cube__cpu_copy_job {
  uint8_t* dst;
  const uint8_t* src;
  uint64_t bytes;
} cube__cpu_copy_job_t;

static int cube__cpu_copy_range(void* ctx, uint64_t begin, uint64_t end, uint32_t participant) {
  (void)participant;
  const cube__cpu_copy_job_t* j = ctx;
  uint64_t from = begin * CUBE__CPU_COPY_PIECE;
  uint64_t to = end * CUBE__CPU_COPY_PIECE < j->bytes ? end * CUBE__CPU_COPY_PIECE : j->bytes;
  memcpy(j->dst + from, j->src + from, (size_t)(to - from));
  return 0;
}

/* memcpy, on several of the device's workers when |bytes| is large. */
static void cube__cpu_memcpy(cube__backend_device_t* dev, void* dst, const void* src,
                             uint64_t bytes) {
  if (!dev || bytes < CUBE__CPU_COPY_PARALLEL || dev->threads < 2) {
    memcpy(dst, src, (size_t)bytes);
    return;
  }
  cube__cpu_copy_job_t j = {dst, src, bytes};
  uint64_t pieces = (bytes + CUBE__CPU_COPY_PIECE - 1) / CUBE__CPU_COPY_PIECE;
  (void)cube__worker_pool_run_at_most(dev->pool, pieces, CUBE__CPU_COPY_MIN_PIECES, dev->threads,
                                      cube__cpu_copy_range, &j);
}

cube_status_t cube__cpu_write(cube__backend_device_t* dev, void* stream,
                              const cube__storage_t* dst, uint64_t dst_offset, uint64_t pitch,
                              const void* src, uint64_t width, uint64_t height) {
  (void)stream;
  if (width == 0 || height == 0) return CUBE_OK;
  CUBE_RETURN_IF_ERROR(cube__cpu_check_rows("write", dst, dst_offset, pitch, width, height));
  uint8_t* d = (uint8_t*)dst->ptr + dst_offset;
  const uint8_t* s = src;
  if (height == 1 || pitch == width) {
    cube__cpu_memcpy(dev, d, s, width * height);
    return CUBE_OK;
  }
  for (uint64_t r = 0; r < height; ++r) memcpy(d + r * pitch, s + r * width, (size_t)width);
  return CUBE_OK;
}

static cube_status_t cube__cpu_read(cube__backend_device_t* dev, void* stream, void* dst,
                                    const cube__storage_t* src, uint64_t src_offset,
                                    uint64_t pitch, uint64_t width, uint64_t height) {
  (void)stream;
  if (width == 0 || height == 0) return CUBE_OK;
  CUBE_RETURN_IF_ERROR(cube__cpu_check_rows("read", src, src_offset, pitch, width, height));
  const uint8_t* s = (const uint8_t*)src->ptr + src_offset;
  uint8_t* d = dst;
  if (height == 1 || pitch == width) {
    cube__cpu_memcpy(dev, d, s, width * height);
    return CUBE_OK;
  }
  for (uint64_t r = 0; r < height; ++r) memcpy(d + r * width, s + r * pitch, (size_t)width);
  return CUBE_OK;
}

/* On the runner, in stream order, like every slot taking a stream; the
 * server never hands it overlapping ranges. */
cube_status_t cube__cpu_copy(cube__backend_device_t* dev, void* stream, const cube__storage_t* dst,
                             uint64_t dst_offset, const cube__storage_t* src, uint64_t src_offset,
                             uint64_t bytes) {
  (void)stream;
  if (bytes == 0) return CUBE_OK;
  CUBE_RETURN_IF_ERROR(cube__cpu_check_rows("copy from", src, src_offset, bytes, bytes, 1));
  CUBE_RETURN_IF_ERROR(cube__cpu_check_rows("copy to", dst, dst_offset, bytes, bytes, 1));
  cube__cpu_memcpy(dev, (uint8_t*)dst->ptr + dst_offset, (const uint8_t*)src->ptr + src_offset,
                   bytes);
  return CUBE_OK;
}

static cube_status_t cube__cpu_sync(cube__backend_device_t* dev, void* stream) {
  (void)dev;
  (void)stream;
  return CUBE_OK; /* launches and copies ran synchronously on the runner */
}

//===----------------------------------------------------------------------===//
// Launch
//===----------------------------------------------------------------------===//

enum {
  CUBE__CPU_RANGE_KERNEL_FAILED = 1,
  CUBE__CPU_RANGE_NO_SCRATCH = 2,
  CUBE__CPU_RANGE_FAULT = 3,    /* the fault guard caught a fault */
  CUBE__CPU_RANGE_NO_GUARD = 4, /* the fault guard could not be set up */
};

/* The function that runs one cube of |k| in |mode|: the native one, or the
 * dialect source compiled by the system C compiler (cached per kernel object
 * here, per process and on disk in the kernel cache). */
static cube_status_t cube__cpu_kernel_function(const cube_kernel_t* k, cube_execution_mode_t mode,
                                               cube_cpu_kernel_fn* out) {
  if (k->cpu_fn) {
    *out = k->cpu_fn;
    return CUBE_OK;
  }
  if (!k->source || !k->signature)
    return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                             "kernel '%s' has no native CPU function and no dialect source", k->name);
  if ((unsigned)mode > CUBE_EXEC_UNCHECKED)
    return CUBE_INVALID("kernel '%s': execution mode %d is invalid", k->name, (int)mode);
  _Atomic(void*)* slot = (_Atomic(void*)*)&k->compiled[CUBE_BACKEND_CPU][mode];
  void* fn = atomic_load_explicit(slot, memory_order_acquire);
  if (fn) {
    *out = (cube_cpu_kernel_fn)fn;
    return CUBE_OK;
  }
  char* text = NULL;
  cube_status_t st = cube__dialect_generate(CUBE__TARGET_CPU, k->signature, k->source, k->defines,
                                            k->define_count, mode, &text);
  if (st) return cube__status_annotate(st, "kernel '%s'", k->name);
  const char* cc = NULL;
  const char* identity = NULL;
  st = cube__cpu_compiler(&cc, &identity);
  if (!st) {
    static const char* const mode_names[3] = {"checked", "validate", "unchecked"};
    const char* parts[] = {"cube", CUBE_VERSION_STRING, "cpu", cube__cpu_machine_id(), identity,
                           mode_names[mode], text, NULL};
    cube__cache_key_t key = cube__cache_key(parts);
    cube_cpu_kernel_fn f = NULL;
    st = cube__cpu_compile_kernel(text, key, "cube_kernel_entry", k->name, k->entry, k->source,
                                  &f);
    if (!st) {
      atomic_store_explicit(slot, (void*)f, memory_order_release);
      *out = f;
    }
  }
  free(text);
  return st;
}

static cube_status_t cube__cpu_prepare(cube__backend_device_t* dev, const cube_kernel_t* k,
                                       cube_execution_mode_t mode) {
  (void)dev;
  cube_cpu_kernel_fn fn;
  return cube__cpu_kernel_function(k, mode, &fn);
}

typedef struct cube__cpu_launch_ctx {
  cube__backend_device_t* dev;
  const cube__cpu_prepared_t* p; /* the launch */
  cube_bounds_error_t* bounds;
  /* The first failure: claimed by CAS, its details written by the winner
   * and read after the pool run returned (which orders them). */
  atomic_int failed;
  int fail_kind;
  int fail_code;
  uint32_t fail_pos[3];
  void* fail_addr;           /* CUBE__CPU_RANGE_FAULT: the faulting address */
  cube_status_t fail_status; /* CUBE__CPU_RANGE_NO_GUARD: why */
  bool guarded;              /* CUBE_CPU_FAULT_GUARD at the launch */
} cube__cpu_launch_ctx_t;

static void cube__cpu_launch_fail(cube__cpu_launch_ctx_t* ctx, int kind, int code,
                                  const uint32_t pos[3]) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&ctx->failed, &expected, 1)) return;
  ctx->fail_kind = kind;
  ctx->fail_code = code;
  memcpy(ctx->fail_pos, pos, sizeof(ctx->fail_pos));
}

/* Runs cubes [begin, end) (linear indices, x fastest) as |participant|;
 * under the fault guard |g| each cube's position is written into it first. */
static inline __attribute__((always_inline)) int cube__cpu_run_cubes_in(
    cube__cpu_launch_ctx_t* ctx, uint64_t begin, uint64_t end, uint32_t participant,
    cube__cpu_guard_t* g) {
  cube_cpu_cube_t cube;
  memset(&cube, 0, sizeof(cube));
  const cube__cpu_prepared_t* pl = ctx->p;
  memcpy(cube.cube_count, pl->count, sizeof(cube.cube_count));
  memcpy(cube.cube_dim, pl->dim, sizeof(cube.cube_dim));
  cube.mode = pl->mode;
  cube.worker = participant;
  cube.bounds = ctx->bounds;

  const uint64_t cx = pl->count[0], cy = pl->count[1], cxy = cx * cy;
  uint32_t x = 0, y = 0, z = 0;
  if (begin) { /* a chunk after the first: three divisions (64-bit, slow) */
    x = (uint32_t)(begin % cx);
    y = (uint32_t)((begin / cx) % cy);
    z = (uint32_t)(begin / cxy);
  }

  const uint64_t shared_part = cube__round_up(pl->shared_size, CUBE__CPU_ALIGNMENT);
  const uint64_t need = shared_part + pl->scratch_size;
  if (need) {
    cube__cpu_scratch_t* scratch = &ctx->dev->scratch[participant];
    if (scratch->size < need) {
      uint64_t size = cube__round_up(need, CUBE__CPU_ALIGNMENT);
      void* mem = cube__aligned_alloc((size_t)size, CUBE__CPU_ALIGNMENT);
      if (!mem) {
        uint32_t pos[3] = {x, y, z};
        cube__cpu_launch_fail(ctx, CUBE__CPU_RANGE_NO_SCRATCH, 0, pos);
        return CUBE__CPU_RANGE_NO_SCRATCH;
      }
      cube__aligned_free(scratch->ptr);
      scratch->ptr = mem;
      scratch->size = size;
    }
    if (pl->shared_size) {
      cube.shared = scratch->ptr;
      cube.shared_size = pl->shared_size;
    }
    if (pl->scratch_size) {
      cube.scratch = (char*)scratch->ptr + shared_part;
      cube.scratch_size = pl->scratch_size;
    }
  }

  const cube_cpu_kernel_fn fn = pl->fn;
  for (uint64_t i = begin; i < end; ++i) {
    cube.cube_pos[0] = x;
    cube.cube_pos[1] = y;
    cube.cube_pos[2] = z;
    if (g) {
      g->pos[0] = x;
      g->pos[1] = y;
      g->pos[2] = z;
    }
    int rc = fn(&cube, pl->args, pl->arg_count);
    if (rc != 0) {
      cube__cpu_launch_fail(ctx, CUBE__CPU_RANGE_KERNEL_FAILED, rc, cube.cube_pos);
      return CUBE__CPU_RANGE_KERNEL_FAILED;
    }
    /* Another participant failed: stop early, its error is the one kept. */
    if (atomic_load_explicit(&ctx->failed, memory_order_relaxed)) return CUBE__CPU_RANGE_KERNEL_FAILED;
    if (++x == cx) {
      x = 0;
      if (++y == cy) {
        y = 0;
        ++z;
      }
    }
  }
  return 0;
}

static int cube__cpu_run_cubes(void* p, uint64_t begin, uint64_t end, uint32_t participant) {
  return cube__cpu_run_cubes_in(p, begin, end, participant, NULL);
}

/* cube__cpu_run_cubes under the fault guard: a fault in a cube jumps back
 * here and fails the launch (the other participants stop at their next cube,
 * as after a kernel's error). */
static int cube__cpu_run_cubes_guarded(void* p, uint64_t begin, uint64_t end,
                                       uint32_t participant) {
  cube__cpu_launch_ctx_t* ctx = p;
  cube__cpu_guard_t* g = NULL;
  cube_status_t st = cube__cpu_guard_thread(&g);
  if (st) {
    int expected = 0;
    if (atomic_compare_exchange_strong(&ctx->failed, &expected, 1)) {
      ctx->fail_kind = CUBE__CPU_RANGE_NO_GUARD;
      ctx->fail_status = st;
    } else {
      cube_status_free(st);
    }
    return CUBE__CPU_RANGE_NO_GUARD;
  }
  if (sigsetjmp(g->jump, 0) != 0) {
    /* Back from the handler: the kernel faulted in cube g->pos. */
    uint32_t pos[3] = {g->pos[0], g->pos[1], g->pos[2]};
    int expected = 0;
    if (atomic_compare_exchange_strong(&ctx->failed, &expected, 1)) {
      ctx->fail_kind = CUBE__CPU_RANGE_FAULT;
      ctx->fail_code = g->signo;
      ctx->fail_addr = g->addr;
      memcpy(ctx->fail_pos, pos, sizeof(pos));
    }
    return CUBE__CPU_RANGE_FAULT;
  }
  g->armed = 1;
  int rc = cube__cpu_run_cubes_in(ctx, begin, end, participant, g);
  g->armed = 0;
  return rc;
}

/* The launch slot calls these two inlined (one launch, one call: the eager
 * path's cost), cpu_graph.c through the functions of cpu_internal.h. */
static inline __attribute__((always_inline)) cube_status_t cube__cpu_launch_prepare(
    cube__backend_device_t* dev, const cube__launch_t* l, cube_cpu_arg_t* args,
    cube__cpu_prepared_t* out);
static inline __attribute__((always_inline)) cube_status_t cube__cpu_launch_run(
    cube__backend_device_t* dev, const cube__cpu_prepared_t* p);

cube_status_t cube__cpu_prepare_launch(cube__backend_device_t* dev, const cube__launch_t* l,
                                       cube_cpu_arg_t* args, cube__cpu_prepared_t* out) {
  return cube__cpu_launch_prepare(dev, l, args, out);
}

cube_status_t cube__cpu_run_prepared(cube__backend_device_t* dev, const cube__cpu_prepared_t* p) {
  return cube__cpu_launch_run(dev, p);
}

static inline __attribute__((always_inline)) cube_status_t cube__cpu_launch_prepare(
    cube__backend_device_t* dev, const cube__launch_t* l, cube_cpu_arg_t* args,
    cube__cpu_prepared_t* out) {
  const cube_kernel_t* k = l->kernel;
  const char* name = l->name ? l->name : (k && k->name ? k->name : "?");
  if (!k) return CUBE_INVALID("launch of kernel '%s': no kernel object", name);
  cube_cpu_kernel_fn kernel_fn = NULL;
  CUBE_RETURN_IF_ERROR(cube__cpu_kernel_function(k, l->mode, &kernel_fn));

  /* The server checked these against the same properties; a launch record
   * from elsewhere (a test, a graph) gets the same answer here. */
  const uint32_t* max_dim = dev->props.hardware.max_cube_dim;
  const uint32_t max_units = dev->props.hardware.max_units_per_cube;
  const uint64_t max_shared = dev->props.hardware.max_shared_memory_size;
  const uint32_t max_bindings = dev->props.hardware.max_bindings;
  const uint32_t dim[3] = {l->dim.x, l->dim.y, l->dim.z};
  for (int i = 0; i < 3; ++i) {
    if (dim[i] == 0 || dim[i] > max_dim[i])
      return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                               "launch of kernel '%s': cube dim (%u, %u, %u): %c = %u is outside "
                               "[1, %u]",
                               name, dim[0], dim[1], dim[2], "xyz"[i], dim[i], max_dim[i]);
  }
  uint64_t units = (uint64_t)dim[0] * dim[1] * dim[2];
  if (units > max_units)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "launch of kernel '%s': cube dim (%u, %u, %u) has %llu units, more "
                             "than the %u a cube may have",
                             name, dim[0], dim[1], dim[2], (unsigned long long)units, max_units);
  if (k->shared_memory_size > max_shared)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "launch of kernel '%s': %llu bytes of cube-local memory, more than "
                             "the %llu bytes a cube may have",
                             name, (unsigned long long)k->shared_memory_size,
                             (unsigned long long)max_shared);
  if (l->arg_count > max_bindings || l->arg_count > CUBE_MAX_KERNEL_ARGS)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "launch of kernel '%s': %u arguments, more than the %u bindings",
                             name, l->arg_count,
                             max_bindings < CUBE_MAX_KERNEL_ARGS ? max_bindings
                                                                 : CUBE_MAX_KERNEL_ARGS);

  /* max_cube_count is UINT32_MAX per axis, which a uint32_t always meets;
   * the product may still not fit in 64 bits. */
  uint64_t total;
  if (cube__mul_overflow_u64((uint64_t)l->count[0] * l->count[1], l->count[2], &total))
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "launch of kernel '%s': cube count (%u, %u, %u) is more than 2^64 "
                             "cubes",
                             name, l->count[0], l->count[1], l->count[2]);

  /* The native kernel ABI: a buffer is its host address and length. */
  for (uint32_t i = 0; i < l->arg_count; ++i) {
    if (l->kinds[i] == CUBE_ARG_BUFFER) {
      args[i].buffer.data = cube__launch_arg_host_ptr(&l->args[i]);
      args[i].buffer.len = l->args[i].buffer.len;
    } else {
      memcpy(&args[i], &l->args[i], sizeof(uint64_t)); /* scalars sit at offset 0 of both */
    }
  }
  out->kernel = k;
  out->name = name;
  out->fn = kernel_fn;
  out->args = args;
  out->arg_count = l->arg_count;
  memcpy(out->count, l->count, sizeof(out->count));
  memcpy(out->dim, dim, sizeof(out->dim));
  out->mode = l->mode;
  out->shared_size = k->shared_memory_size;
  out->scratch_size = total && k->signature
                          ? cube__dialect_cpu_scratch_size(k->signature, units, k->defines,
                                                           k->define_count)
                          : 0;
  out->total = total;
  uint64_t min_chunk = CUBE__CPU_MIN_CHUNK_UNITS / units;
  out->min_chunk = min_chunk < 1 ? 1 : min_chunk;
  return CUBE_OK;
}

static inline __attribute__((always_inline)) cube_status_t cube__cpu_launch_run(
    cube__backend_device_t* dev, const cube__cpu_prepared_t* p) {
  if (p->total == 0) return CUBE_OK;
  cube__cpu_launch_ctx_t ctx;
  ctx.dev = dev;
  ctx.p = p;
  ctx.bounds = NULL;
  ctx.fail_kind = 0;
  ctx.fail_code = 0;
  ctx.fail_addr = NULL;
  ctx.fail_status = NULL;
  ctx.guarded = cube__cpu_guard_wanted();
  cube_bounds_error_t bounds;
  if (p->mode == CUBE_EXEC_VALIDATE) {
    memset(&bounds, 0, sizeof(bounds));
    ctx.bounds = &bounds;
  }
  atomic_init(&ctx.failed, 0);

  /* A launch of one chunk runs here (as the pool would run it), without
   * the call. */
  cube__range_fn run = ctx.guarded ? cube__cpu_run_cubes_guarded : cube__cpu_run_cubes;
  int rc = p->total <= p->min_chunk
               ? run(&ctx, 0, p->total, 0)
               : cube__worker_pool_run_at_most(dev->pool, p->total, p->min_chunk, dev->threads,
                                               run, &ctx);
  if (rc == 0 && !atomic_load(&ctx.failed)) {
    if (ctx.bounds && bounds.flag) return cube__kernel_bounds_status(p->kernel, p->name, &bounds);
    return CUBE_OK;
  }
  if (ctx.fail_kind == CUBE__CPU_RANGE_NO_GUARD)
    return cube__status_annotate(ctx.fail_status, "launch of kernel '%s'", p->name);
  if (ctx.fail_kind == CUBE__CPU_RANGE_FAULT)
    return cube__status_make(CUBE_STATUS_LAUNCH_FAILED,
                             "launch of kernel '%s': cube (%u, %u, %u) faulted (%s at address "
                             "%p); the CPU fault guard (CUBE_CPU_FAULT_GUARD) stopped the launch: "
                             "its outputs are lost, and memory the kernel wrote before the fault "
                             "may be corrupted",
                             p->name, ctx.fail_pos[0], ctx.fail_pos[1], ctx.fail_pos[2],
                             cube__cpu_guard_signal_name(ctx.fail_code), ctx.fail_addr);
  if (ctx.fail_kind == CUBE__CPU_RANGE_NO_SCRATCH) {
    char buf[32];
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "launch of kernel '%s': no memory for %s of cube-local scratch",
                             p->name, cube__format_bytes(p->shared_size, buf, sizeof(buf)));
  }
  return cube__cpu_kernel_failed(p, ctx.fail_pos, ctx.fail_code);
}

cube_status_t cube__cpu_kernel_failed(const cube__cpu_prepared_t* p, const uint32_t pos[3],
                                      int code) {
  if (p->kernel->signature)
    return cube__status_make(CUBE_STATUS_LAUNCH_FAILED,
                             "launch of kernel '%s': cube (%u, %u, %u): %s (code %d)", p->name,
                             pos[0], pos[1], pos[2], cube__dialect_cpu_entry_error(code), code);
  return cube__status_make(CUBE_STATUS_LAUNCH_FAILED,
                           "launch of kernel '%s': cube (%u, %u, %u) returned error %d", p->name,
                           pos[0], pos[1], pos[2], code);
}

static cube_status_t cube__cpu_launch(cube__backend_device_t* dev, void* stream,
                                      const cube__launch_t* l) {
  (void)stream;
  cube_cpu_arg_t args[CUBE_MAX_KERNEL_ARGS];
  cube__cpu_prepared_t p;
  CUBE_RETURN_IF_ERROR(cube__cpu_launch_prepare(dev, l, args, &p));
  return cube__cpu_launch_run(dev, &p);
}

/* ctl: what DLPack needs (src/client/dlpack.c). Every CPU device is the
 * host's memory: DLPack's kDLCPU, device 0. Memory of another library is
 * storage here when the host can address it: CPU memory, or pinned host
 * memory of a GPU driver (kDLCUDAHost, kDLROCMHost). */
static cube_status_t cube__cpu_ctl(cube__backend_device_t* dev, void* stream, uint32_t op,
                                   void* arg) {
  (void)stream;
  if (!arg) return CUBE_INVALID("cpu:%u: control operation %u without an argument", dev->index, op);
  if (op == CUBE__CTL_DLPACK_DEVICE) {
    ((int32_t*)arg)[0] = 1; /* kDLCPU */
    ((int32_t*)arg)[1] = 0;
    ((int32_t*)arg)[2] = 0; /* addresses */
    return CUBE_OK;
  }
  if (op == CUBE__CTL_EXTERNAL_STORAGE) {
    cube__backend_external_t* x = arg;
    if (x->dl_device_type != 1 && x->dl_device_type != 3 && x->dl_device_type != 11)
      return CUBE_INVALID("cpu:%u takes host memory (DLPack device types 1 CPU, 3 CUDA host, "
                          "11 ROCm host), not device type %d",
                          dev->index, (int)x->dl_device_type);
    if (x->dl_device_type == 1 && x->dl_device_id != 0)
      return CUBE_INVALID("cpu:%u: DLPack CPU memory has device id 0, not %d", dev->index,
                          (int)x->dl_device_id);
    x->storage.ptr = x->ptr;
    x->storage.size = x->size;
    x->storage.backend_data = NULL; /* never deallocated by cube */
    return CUBE_OK;
  }
  if (op == CUBE__CTL_DEVICE_IDENTITY) {
    cube__backend_text_t* t = arg;
    cube__cpu_identity(t->buf, t->size);
    return CUBE_OK;
  }
  return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                           "cpu:%u: control operation %u is not implemented", dev->index, op);
}

static const char* const cube__cpu_transports[] = {"host", NULL};

const cube__backend_vtable_t cube__backend_cpu = {
    .api_version = CUBE__BACKEND_API_VERSION,
    .backend = CUBE_BACKEND_CPU,
    .name = "cpu",
    .caps = CUBE__CAP_HOST_MEMORY | CUBE__CAP_NATIVE_KERNELS | CUBE__CAP_GLOBAL_IDS_UNDER_MPI,
    .dialect_target = CUBE__TARGET_CPU,
    .collective_transports = cube__cpu_transports,
    .availability = cube__cpu_availability,
    .device_count = cube__cpu_device_count,
    .device_create = cube__cpu_device_create,
    .device_destroy = cube__cpu_device_destroy,
    .alloc = cube__cpu_alloc,
    .dealloc = cube__cpu_dealloc,
    .host_alloc = cube__cpu_host_alloc,
    .host_dealloc = cube__cpu_dealloc,
    .stream_create = cube__cpu_stream_create,
    .stream_destroy = cube__cpu_stream_destroy,
    .write = cube__cpu_write,
    .read = cube__cpu_read,
    .launch = cube__cpu_launch,
    .prepare = cube__cpu_prepare,
    .sync = cube__cpu_sync,
    .copy = cube__cpu_copy,
    .graph_create = cube__cpu_graph_create,
    .graph_update = cube__cpu_graph_update,
    .graph_launch = cube__cpu_graph_launch,
    .graph_destroy = cube__cpu_graph_destroy,
    .ctl = cube__cpu_ctl,
};
