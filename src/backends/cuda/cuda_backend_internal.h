/* What the files of the CUDA backend share, and nothing else includes: the
 * device and stream objects, the context scope every entry opens, and the
 * functions one file calls in another.
 *
 *   cuda_device.c   devices: discovery, properties, the tunables, teardown
 *   cuda_memory.c   storage (device and pinned), streams and events
 *   cuda_staging.c  the staging ring and the copies between host and device,
 *                   and between two device buffers
 *   cuda_kernel.c   NVRTC, the kernel cache, modules and the function map
 *   cuda_launch.c   the launch path
 *   cuda_graph.c    native graphs (the driver's graph API)
 *   cuda_backend.c  the backend's table of functions
 *   cuda_api.c      the driver and NVRTC, loaded with dlopen
 *
 * The rest of the library reaches the backend through its table
 * (cube__backend_cuda) only; the nccl transport asks for native handles
 * through the table's ctl (cube__cuda_ctl).
 */
#ifndef CUBE_BACKENDS_CUDA_CUDA_BACKEND_INTERNAL_H_
#define CUBE_BACKENDS_CUDA_CUDA_BACKEND_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"
#include "backends/cuda/cuda_api.h"
#include "base/status.h"
#include "kernel/cache.h"
#include "platform/platform.h"
#include "platform/worker_pool.h"

#define CUBE__CUDA_MAX_DEVICES 64u
#define CUBE__CUDA_ALIGNMENT 512u
#define CUBE__CUDA_CHUNK (4ull << 20)        /* default bytes per staging chunk */
#define CUBE__CUDA_RING_BYTES (128ull << 20) /* pinned bytes the ring may hold */
#define CUBE__CUDA_MAX_SLOTS 64u             /* chunks in the ring at most */
#define CUBE__CUDA_MAX_COPY_THREADS 16u      /* default host copies of one transfer */
#define CUBE__CUDA_DIRECT_MAX (64u << 10)    /* transfers up to this skip the ring */

#define CUBE__CUDA_SPARE_EVENTS 64u

//===----------------------------------------------------------------------===//
// Objects
//===----------------------------------------------------------------------===//

typedef struct cube__cuda_slot {
  void* host; /* pinned, chunk bytes */
  CUevent done;
  bool pending; /* |done| recorded and not yet waited for */
} cube__cuda_slot_t;

typedef struct cube__cuda_fn {
  uint64_t kernel_id;
  uint32_t mode; /* the variant: the execution mode, bit 2 the 1-D form */
  CUfunction fn;
  int max_threads;
  uint64_t name_hash; /* its module's entry name (cube__cuda_module_t) */
} cube__cuda_fn_t;

/* Entry functions are named CUBE__CUDA_FN_PREFIX and 16 hex digits of a hash
 * of their unit (cuda_kernel.c). */
#define CUBE__CUDA_FN_PREFIX "cube_k_"
#define CUBE__CUDA_FN_NAME_LEN (sizeof(CUBE__CUDA_FN_PREFIX) - 1 + 16)

typedef struct cube__cuda_module {
  cube__cache_key_t key;
  CUmodule module;
  CUfunction fn;
  int max_threads;
  uint64_t name_hash;    /* the entry function's name: CUBE__CUDA_FN_PREFIX + this in hex */
  char kernel_name[80];  /* the kernel that loaded it first (activity records show it) */
} cube__cuda_module_t;

struct cube__backend_device {
  uint32_t index;
  /* Set by CUBE__CTL_DEVICE_LOST: the context is poisoned, and destroying
   * the device calls the driver about it no more. */
  atomic_bool lost;
  /* How many times the device was recovered (CUBE__CTL_DEVICE_RESET): what
   * was made in the context before (a native graph) carries the epoch it
   * was made in, and is the driver's no more once it is older. */
  atomic_uint epoch;
  /* The memory ledger (CUBE__CTL_MEMORY_INFO): what the driver reported used
   * right after the context was retained, and the bytes of the module images
   * loaded now. */
  uint64_t used_at_open;
  atomic_uint_fast64_t module_bytes;
  const cube__cuda_driver_t* cu;
  CUdevice dev;
  CUcontext ctx;
  int cc_major, cc_minor;
  char arch[16]; /* "sm_90" */
  char name[96];
  bool async_alloc;
  CUmemoryPool mempool;
  cube__worker_pool_t* workers;
  uint32_t copy_threads;
  uint64_t chunk;      /* bytes per staging chunk */
  uint32_t max_slots;  /* chunks in the ring at most (<= CUBE__CUDA_MAX_SLOTS) */
  bool stream_up, stream_down; /* host copies with non-temporal stores, per direction */
  uint32_t max_grid[3];
  uint32_t max_block[3];
  uint32_t max_threads_per_block;

  /* Staging ring. */
  pthread_mutex_t ring_lock;
  pthread_cond_t ring_cond;
  cube__cuda_slot_t slots[CUBE__CUDA_MAX_SLOTS];
  uint32_t slot_count;
  uint32_t free_slots[CUBE__CUDA_MAX_SLOTS]; /* FIFO of free chunk indices */
  uint32_t free_head, free_tail, free_count;
  CUevent spare_events[CUBE__CUDA_SPARE_EVENTS]; /* recycled events (ring_lock) */
  uint32_t spare_event_count;

  /* Functions and modules. */
  pthread_mutex_t fn_lock;
  cube__cuda_fn_t* fns;
  size_t fn_count, fn_cap;
  cube__cuda_module_t* modules;
  size_t module_count, module_cap;

  /* Validate mode: the bounds record (8 words) on the device and its pinned
   * mirror. Launches of one device run on its runner, one at a time. */
  CUdeviceptr bounds_dev;
  uint32_t* bounds_host;

  /* The profile summary keeps kernel activity records on (cuda_activity.c). */
  atomic_bool act_keep;
  /* Self-timed kernels (cuda_activity.c, under its registry lock): the global
   * timer's offset to cube's clock, measured in the context of |act_epoch|
   * (a recovery resets the context: measured again), and the clock kernel. */
  int64_t act_offset;
  uint64_t act_calibrated_at; /* cube's clock when |act_offset| was measured */
  bool act_stale; /* measured over a second before records came on: measured again by the reader */
  unsigned act_epoch;
  atomic_bool act_calibrated; /* read without the lock by activity_begin */
  atomic_uint act_refused;    /* epoch + 1 in which the clock kernel failed: events then */
  CUmodule act_clock_module;
  CUfunction act_clock_fn;
  atomic_uint_fast64_t act_bytes; /* device memory of the streams' timing slots */
};

typedef struct cube__cuda_stream {
  CUstream stream;
  uint64_t id;                     /* cube's id of the stream (a trace's track) */
  struct cube__cuda_activity* act; /* kernel activity records (cuda_activity.c), or NULL */
} cube__cuda_stream_t;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

#define CUBE__CU_TRY(dev, call, ...)                                                \
  do {                                                                              \
    CUresult cube__r_ = (call);                                                     \
    if (cube__r_ != CUDA_SUCCESS)                                                   \
      return cube__cuda_error(cube__r_, CUBE_STATUS_OK, __VA_ARGS__);               \
  } while (0)

/* Every entry makes the device's context current for its duration and puts
 * back whatever the calling thread had: cube runs on the user's threads too
 * (uploads, allocation), and a program's own CUDA code on that thread must
 * find its context unchanged. Nothing is pushed when it is current already,
 * and on cube's own threads the context is set and left current. */
typedef struct cube__cuda_scope {
  const cube__cuda_driver_t* cu;
  bool pushed;
} cube__cuda_scope_t;

static inline cube__cuda_scope_t cube__cuda_enter(CUcontext ctx) {
  const cube__cuda_driver_t* cu = NULL;
  cube__cuda_scope_t s = {NULL, false};
  cube_status_t st = cube__cuda_driver(&cu);
  if (st) {
    cube_status_free(st);
    return s;
  }
  s.cu = cu;
  CUcontext cur = NULL;
  if (cu->CtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx) return s;
  /* cube's own threads (runners, copy workers) keep the context current:
   * a push and a pop per launch cost a tenth of the launch. */
  if (cube__thread_is_cube() && cu->CtxSetCurrent(ctx) == CUDA_SUCCESS) return s;
  s.pushed = cu->CtxPushCurrent(ctx) == CUDA_SUCCESS;
  return s;
}

static inline void cube__cuda_leave(cube__cuda_scope_t* s) {
  if (!s->pushed) return;
  CUcontext popped = NULL;
  s->cu->CtxPopCurrent(&popped);
}

#define CUBE__CUDA_SCOPE(ctx)                                                       \
  __attribute__((cleanup(cube__cuda_leave), unused)) cube__cuda_scope_t cube__scope_ = \
      cube__cuda_enter(ctx)

static inline CUstream cube__cuda_s(void* stream) {
  return stream ? ((cube__cuda_stream_t*)stream)->stream : NULL;
}

//===----------------------------------------------------------------------===//
// Devices (cuda_device.c)
//===----------------------------------------------------------------------===//

cube_status_t cube__cuda_availability(void);
uint32_t cube__cuda_device_count(void);
cube_status_t cube__cuda_device_create(uint32_t index, const cube_server_options_t* options,
                                       cube__backend_device_t** out_device,
                                       cube_device_properties_t* p,
                                       cube_features_t* out_features,
                                       cube_backend_info_t* out_info);
void cube__cuda_device_destroy(cube__backend_device_t* d);
/* CUBE__CTL_DEVICE_RESET of a lost device (backend.h): resets its primary
 * context, forgets the staging ring, modules, functions and bounds record
 * made in the old one (the reset freed them), makes the bounds record again
 * and clears |lost|; the epoch goes up. Fails (the device stays lost) with
 * the driver's error; FAILED_PRECONDITION for a device that is not lost. */
cube_status_t cube__cuda_device_reset(cube__backend_device_t* d);
/* The primary context of device |index| once a device of it was created
 * (retained for the process), else NULL. Thread-safe. */
CUcontext cube__cuda_primary_context(uint32_t index);

//===----------------------------------------------------------------------===//
// Storage, streams and events (cuda_memory.c)
//===----------------------------------------------------------------------===//

/* Waits for |s| (NULL: the whole context); on failure the whole context too. */
CUresult cube__cuda_wait(cube__backend_device_t* d, CUstream s);
/* The error of a failed allocation of |size| bytes by |how|, with the
 * device's free memory. */
cube_status_t cube__cuda_oom(cube__backend_device_t* d, CUresult r, uint64_t size,
                             const char* how);

cube_status_t cube__cuda_alloc_on(cube__backend_device_t* d, void* stream, uint64_t size,
                                  cube__storage_t* out);
void cube__cuda_dealloc_on(cube__backend_device_t* d, void* stream, const cube__storage_t* s);
cube_status_t cube__cuda_alloc(cube__backend_device_t* d, uint64_t size, cube__storage_t* out);
void cube__cuda_dealloc(cube__backend_device_t* d, const cube__storage_t* s);
void cube__cuda_trim(cube__backend_device_t* d, void* stream);
cube_status_t cube__cuda_host_alloc(cube__backend_device_t* d, uint64_t size,
                                    cube__storage_t* out);
void cube__cuda_host_dealloc(cube__backend_device_t* d, const cube__storage_t* s);

cube_status_t cube__cuda_stream_create(cube__backend_device_t* d, uint64_t stream_id,
                                       void** out_stream);
void cube__cuda_stream_destroy(cube__backend_device_t* d, void* stream);
cube_status_t cube__cuda_sync(cube__backend_device_t* d, void* stream);
cube_status_t cube__cuda_event_record(cube__backend_device_t* d, void* stream, void** out);
cube_status_t cube__cuda_event_wait(cube__backend_device_t* d, void* stream, void* event);
bool cube__cuda_event_done(cube__backend_device_t* d, void* event);
cube_status_t cube__cuda_event_sync(cube__backend_device_t* d, void* event);
void cube__cuda_event_destroy(cube__backend_device_t* d, void* event);
cube_status_t cube__cuda_event_elapsed(cube__backend_device_t* d, void* start, void* end,
                                       uint64_t* out_ns);

//===----------------------------------------------------------------------===//
// Copies through the staging ring (cuda_staging.c)
//===----------------------------------------------------------------------===//

cube_status_t cube__cuda_write(cube__backend_device_t* d, void* stream,
                               const cube__storage_t* dst, uint64_t dst_offset, uint64_t pitch,
                               const void* src, uint64_t width, uint64_t height);
cube_status_t cube__cuda_read(cube__backend_device_t* d, void* stream, void* dst,
                              const cube__storage_t* src, uint64_t src_offset, uint64_t pitch,
                              uint64_t width, uint64_t height);
/* Device to device on the stream (cuMemcpyDtoDAsync): no staging, no wait. */
cube_status_t cube__cuda_device_copy(cube__backend_device_t* d, void* stream,
                                     const cube__storage_t* dst, uint64_t dst_offset,
                                     const cube__storage_t* src, uint64_t src_offset,
                                     uint64_t bytes);

//===----------------------------------------------------------------------===//
// Kernels (cuda_kernel.c) and launches (cuda_launch.c)
//===----------------------------------------------------------------------===//

/* The function of (|k|, |mode|) on |d|, compiled and loaded on first use;
 * |one_d| picks the form compiled for launches that are 1 in y and z. */
cube_status_t cube__cuda_function(cube__backend_device_t* d, const cube_kernel_t* k,
                                  cube_execution_mode_t mode, bool one_d, cube__cuda_fn_t* out);
cube_status_t cube__cuda_prepare(cube__backend_device_t* d, const cube_kernel_t* k,
                                 cube_execution_mode_t mode);
/* The compiled function's limits (the kernel_limits slot), compiling it first. */
cube_status_t cube__cuda_kernel_limits(cube__backend_device_t* d, const cube_kernel_t* k,
                                       cube_execution_mode_t mode, cube__kernel_limits_t* out);
cube_status_t cube__cuda_ctl(cube__backend_device_t* d, void* stream, uint32_t op, void* arg);
/* "cuda | <GPU name> | sm_XY | driver <version> | nvrtc <major.minor>"
 * (CUBE__CTL_DEVICE_IDENTITY, and the device of "cubin" entries). */
void cube__cuda_identity(const cube__backend_device_t* d, char* out, size_t size);
cube_status_t cube__cuda_launch(cube__backend_device_t* d, void* stream,
                                const cube__launch_t* l);
/* The checks of a launch (the function, compiled on first use, and the
 * device's and function's limits); *out_empty: a count component is 0 and
 * nothing runs. */
cube_status_t cube__cuda_launch_check(cube__backend_device_t* d, const cube__launch_t* l,
                                      cube__cuda_fn_t* out_fn, bool* out_empty);
/* The kernel parameters of |l| as cuLaunchKernel takes them: params[0..n)
 * point into |p| (buffers: the address and the view's size) and into l->args
 * (scalars). Validate mode's bounds record and then the timing slot (every
 * kernel's last parameter, preludes/cuda.h) are the caller's to append. */
typedef struct cube__cuda_params {
  void* params[2 * CUBE_MAX_KERNEL_ARGS + 2];
  CUdeviceptr timing; /* the last parameter: the timing slot, or 0 */
  CUdeviceptr ptrs[CUBE_MAX_KERNEL_ARGS];
  uint64_t lens[CUBE_MAX_KERNEL_ARGS];
  uint32_t n;
} cube__cuda_params_t;
void cube__cuda_marshal(const cube__launch_t* l, cube__cuda_params_t* p);

//===----------------------------------------------------------------------===//
// Native graphs (cuda_graph.c)
//===----------------------------------------------------------------------===//

cube_status_t cube__cuda_graph_create(cube__backend_device_t* d,
                                      const cube__graph_node_desc_t* nodes, size_t count,
                                      void** out_graph);
cube_status_t cube__cuda_graph_update(cube__backend_device_t* d, void* graph, size_t index,
                                      const cube__graph_node_desc_t* node);
cube_status_t cube__cuda_graph_launch(cube__backend_device_t* d, void* stream, void* graph,
                                      cube__graph_node_failed_fn node_failed, void* user);
void cube__cuda_graph_destroy(cube__backend_device_t* d, void* graph);

//===----------------------------------------------------------------------===//
// Kernel activity records through CUPTI (cuda_activity.c)
//===----------------------------------------------------------------------===//

/* The activity slots (backend.h). */
bool cube__cuda_activity_begin(cube__backend_device_t* d, void* stream, uint32_t kind, bool keep);
size_t cube__cuda_activity_take(cube__backend_device_t* d, void* stream, bool flush,
                                cube__activity_record_t* out, size_t max);
/* A kernel of |hash| (its entry's name) about to be launched on |s| as
 * |name| (of the kernel whose id is |kernel|, 0 if none: self-timed, a run
 * of launches of one kernel notes its name once) with cube count |count|:
 * noted while records are on, so that its
 * record gets the launch's name (kernels of one unit share an entry) and its
 * place in the stream's order (|order|, trace.h). Returns the timing slot to
 * pass as the kernel's last parameter (self-timed kernels), or 0: untimed.
 * activity_submitted follows. The launching thread; one relaxed load when
 * records are off. */
CUdeviceptr cube__cuda_activity_launched(cube__cuda_stream_t* s, uint64_t hash, const char* name,
                                         uint64_t kernel, uint64_t order,
                                         const uint32_t count[3]);
/* After the driver took (|ok|) or refused the launch just noted: a refused
 * one is passed over; self-timed, every CUBE__ACT_BATCH launches the stream
 * is told to copy their slots. The launching thread, |d|'s context current. */
void cube__cuda_activity_submitted(cube__backend_device_t* d, cube__cuda_stream_t* s, bool ok);
/* Before a wait for the whole stream (sync, destroy): self-timed, the stream
 * is told to copy the slots of what it was given, so that the wait covers
 * the copy. |d|'s context current. */
void cube__cuda_activity_before_wait(cube__backend_device_t* d, cube__cuda_stream_t* s);
/* Forgets |s| (before it is freed) and its untaken records. */
void cube__cuda_activity_stream_gone(cube__cuda_stream_t* s);
/* |d| no longer keeps records on (before it is freed). */
void cube__cuda_activity_device_gone(cube__backend_device_t* d);

#endif /* CUBE_BACKENDS_CUDA_CUDA_BACKEND_INTERNAL_H_ */
