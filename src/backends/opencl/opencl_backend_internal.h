/* What the files of the OpenCL backend share, and nothing else includes: the
 * device, stream, staging and kernel-entry objects, and the functions one
 * file calls in another.
 *
 *   opencl_device.c   devices (discovery, properties, teardown) and storage
 *                     (device buffers, mapped staging buffers)
 *   opencl_stream.c   streams, their events (the order across queues),
 *                     writes, reads and sync
 *   opencl_kernel.c   programs (built, cached on disk), the kernel table and
 *                     the launch path
 *   opencl_backend.c  the backend's table of functions
 *   opencl_loader.c   the OpenCL library, loaded with dlopen
 *
 * The rest of the library reaches the backend through its table
 * (cube__backend_opencl) only.
 */
#ifndef CUBE_BACKENDS_OPENCL_OPENCL_BACKEND_INTERNAL_H_
#define CUBE_BACKENDS_OPENCL_OPENCL_BACKEND_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"
#include "backends/opencl/opencl_loader.h"
#include "base/status.h"
#include "kernel/cache.h"

//===----------------------------------------------------------------------===//
// Objects
//===----------------------------------------------------------------------===//

#define CUBE__OCL_MIN_ALIGNMENT 64u

/* A staging buffer's bookkeeping (storage backend_data). */
typedef struct cube__ocl_host {
  atomic_uint refs; /* the device's and one per staging buffer */
  const cube__ocl_api_t* cl;
  cl_context ctx;
  cl_command_queue queue;
} cube__ocl_host_t;

typedef struct cube__ocl_staging {
  cl_mem mem;
  cube__ocl_host_t* host;
} cube__ocl_staging_t;

/* A compiled kernel of one (kernel object, mode) on this device. */
typedef struct cube__ocl_entry {
  uint64_t kernel_id;
  uint32_t mode;
  cube__cache_key_t key; /* of the unit */
  cl_program program;    /* retained per entry */
  cl_kernel kernel;
  size_t max_work_group;  /* CL_KERNEL_WORK_GROUP_SIZE */
  uint64_t local_mem;     /* CL_KERNEL_LOCAL_MEM_SIZE: its __local arrays */
} cube__ocl_entry_t;

/* A kernel timed by its profiling info, not read yet (activity slots). */
typedef struct cube__ocl_timed {
  cl_event done;
  uint32_t kind; /* cube__activity_kind_t */
  uint64_t bytes; /* a copy's */
  uint32_t count[3];
  char name[80];
} cube__ocl_timed_t;

/* Timed kernels a stream keeps unread at most; past it the oldest is dropped. */
#define CUBE__OCL_TIMED_MAX 65536u

/* A write that did not wait (opencl_stream.c): the backend's copy of the
 * source (|copy|, freed) or a reference to the bytes that hold it (|held|,
 * released), once |done| completed. */
typedef struct cube__ocl_pending {
  cl_event done;
  void* copy;
  cube_bytes_t* held;
  bool copied; /* |copy| was made (it stays counted in copied_bytes until reaped) */
  uint64_t size;
  uint64_t storage_id, offset; /* for the message of a failure */
} cube__ocl_pending_t;

/* Writes through the write slot (a source valid only during the call) of up
 * to this many bytes are copied and do not wait; larger ones block (a second
 * copy of a large source costs more than the wait saves). Writes through
 * write_held (the server's: a source held by a cube_bytes_t) never copy and
 * never wait, whatever their size. */
#define CUBE__OCL_WRITE_COPY_MAX (256u << 10)
/* Bytes a stream keeps in flight at most: of its copies (memory the backend
 * allocated), CUBE__OCL_COPIED_BYTES_MAX; of all its writes, copied or held,
 * CUBE__OCL_PENDING_BYTES_MAX. Past either a write first waits for the
 * oldest ones (a single larger write waits for all of them, then goes
 * alone). Held bytes cost no memory beyond what the server holds for the
 * queued writes anyway (a write task keeps its bytes until it ran): their
 * bound is larger, so that the runner, which serves every stream of the
 * device, seldom waits for a write; it keeps what a stream holds past the
 * server's tasks finite. */
#define CUBE__OCL_COPIED_BYTES_MAX (32u << 20)
#define CUBE__OCL_PENDING_BYTES_MAX (256u << 20)

typedef struct cube__ocl_stream {
  cl_command_queue queue;
  uint64_t id;
  /* Kernels timed by their events, in launch order (opencl_stream.c): a ring
   * of |timed_cap| (grown to CUBE__OCL_TIMED_MAX), owner thread only. */
  cube__ocl_timed_t* timed;
  uint32_t timed_head, timed_count, timed_cap;
  uint64_t timed_dropped;
  bool clock_known;
  bool time_copy;       /* the next copy is timed (activity_begin for a copy armed it) */
  int64_t clock_offset; /* cube__now_ns() - the device's profiling clock */
  /* Writes that did not wait, oldest first: a ring of |pending_cap|, owner
   * thread only; their failures, returned by the next sync. */
  cube__ocl_pending_t* pending;
  uint32_t pending_head, pending_count, pending_cap;
  uint64_t pending_bytes; /* of every pending write */
  uint64_t copied_bytes;  /* of those the backend copied */
  cube_status_t write_errors;
} cube__ocl_stream_t;

struct cube__backend_device {
  uint32_t index;
  const cube__ocl_api_t* cl;
  cl_platform_id platform;
  cl_device_id device;
  cl_context ctx;
  cube__ocl_host_t* host; /* device queue + context, shared with staging buffers */
  char name[128];
  char platform_name[128];
  char identity[512]; /* for cache keys: platform | device | driver | versions */
  size_t max_work_group;
  size_t max_item[3];
  uint64_t local_mem;
  bool fp64;
  /* Runner-only state. */
  cl_mem bounds;                 /* Validate record, 32 bytes */
  /* Kernel table, guarded by |lock| (prepare may run on any thread). */
  pthread_mutex_t lock;
  cube__ocl_entry_t* entries;
  uint32_t entry_count, entry_cap;
};


//===----------------------------------------------------------------------===//
// Errors (opencl_device.c)
//===----------------------------------------------------------------------===//

/* A status of |code|: the formatted text, then the name of |err|. */
cube_status_t cube__ocl_error(cube_status_code_t code, cl_int err, const char* fmt, ...)
    CUBE_PRINTF(3, 4);

//===----------------------------------------------------------------------===//
// Devices and storage (opencl_device.c)
//===----------------------------------------------------------------------===//

cube_status_t cube__ocl_availability(void);
uint32_t cube__ocl_device_count_fn(void);
cube_status_t cube__ocl_device_create(uint32_t index, const cube_server_options_t* options,
                                      cube__backend_device_t** out_device,
                                      cube_device_properties_t* out_props,
                                      cube_features_t* out_features,
                                      cube_backend_info_t* out_info);
void cube__ocl_device_destroy(cube__backend_device_t* dev);
cube_status_t cube__ocl_alloc(cube__backend_device_t* dev, uint64_t size, cube__storage_t* out);
void cube__ocl_dealloc(cube__backend_device_t* dev, const cube__storage_t* storage);
cube_status_t cube__ocl_ctl(cube__backend_device_t* dev, void* stream, uint32_t op, void* arg);
cube_status_t cube__ocl_host_alloc(cube__backend_device_t* dev, uint64_t size,
                                   cube__storage_t* out);
void cube__ocl_host_dealloc(cube__backend_device_t* dev, const cube__storage_t* storage);

//===----------------------------------------------------------------------===//
// Streams and copies (opencl_stream.c)
//===----------------------------------------------------------------------===//

cube_status_t cube__ocl_stream_create(cube__backend_device_t* dev, uint64_t stream_id,
                                      void** out_stream);
void cube__ocl_stream_destroy(cube__backend_device_t* dev, void* stream);
/* The activity slots (backend.h): kernels timed by their events' profiling
 * info, read once they completed, so that a timed launch does not wait. */
bool cube__ocl_activity_begin(cube__backend_device_t* dev, void* stream, uint32_t kind,
                              bool keep);
size_t cube__ocl_activity_take(cube__backend_device_t* dev, void* stream, bool flush,
                               cube__activity_record_t* out, size_t max);
/* Notes kernel |name| of |count| cubes whose completion is |done| (owned now). */
void cube__ocl_timed_push(cube__backend_device_t* dev, cube__ocl_stream_t* s, cl_event done,
                          uint32_t kind, const char* name, const uint32_t count[3],
                          uint64_t bytes);
/* The event slots: a marker's cl_event on the stream's queue, waited for by
 * a barrier on another queue. The server orders a buffer that crosses
 * streams with them (src/server/stream.c); nothing else orders queues. */
cube_status_t cube__ocl_event_record(cube__backend_device_t* dev, void* stream, void** out_event);
cube_status_t cube__ocl_event_wait(cube__backend_device_t* dev, void* stream, void* event);
bool cube__ocl_event_done(cube__backend_device_t* dev, void* event);
cube_status_t cube__ocl_event_sync(cube__backend_device_t* dev, void* event);
void cube__ocl_event_destroy(cube__backend_device_t* dev, void* event);
/* Device time from |start|'s end to |end|'s end (CL_PROFILING_COMMAND_END
 * of the two markers; the queues profile). FAILED_PRECONDITION while either
 * has not completed (nothing waits), INTERNAL when one failed or the driver
 * gives no profiling info, OUT_OF_RANGE when |end| ended before |start|. */
cube_status_t cube__ocl_event_elapsed(cube__backend_device_t* dev, void* start, void* end,
                                      uint64_t* out_ns);
cube_status_t cube__ocl_write(cube__backend_device_t* dev, void* stream,
                              const cube__storage_t* dst, uint64_t dst_offset, uint64_t pitch,
                              const void* src, uint64_t width, uint64_t height);
/* The write_held slot: a write of any size that neither copies nor waits;
 * |owner| is referenced until the write completed. */
cube_status_t cube__ocl_write_held(cube__backend_device_t* dev, void* stream,
                                   const cube__storage_t* dst, uint64_t dst_offset,
                                   uint64_t pitch, const void* src, uint64_t width,
                                   uint64_t height, cube_bytes_t* owner);
/* Frees the copies (releases the held bytes) of |s|'s writes that completed;
 * waits for nothing. Owner thread of |s|. */
void cube__ocl_reap_done(cube__backend_device_t* dev, cube__ocl_stream_t* s);
cube_status_t cube__ocl_read(cube__backend_device_t* dev, void* stream, void* dst,
                             const cube__storage_t* src, uint64_t src_offset, uint64_t pitch,
                             uint64_t width, uint64_t height);
/* A copy between two buffers of the device, enqueued on the stream's queue. */
cube_status_t cube__ocl_copy(cube__backend_device_t* dev, void* stream,
                             const cube__storage_t* dst, uint64_t dst_offset,
                             const cube__storage_t* src, uint64_t src_offset, uint64_t bytes);
cube_status_t cube__ocl_sync(cube__backend_device_t* dev, void* stream);

//===----------------------------------------------------------------------===//
// Kernels and launches (opencl_kernel.c)
//===----------------------------------------------------------------------===//

cube_status_t cube__ocl_prepare(cube__backend_device_t* dev, const cube_kernel_t* k,
                                cube_execution_mode_t mode);
/* The compiled entry's limits (the kernel_limits slot), compiling it first. */
cube_status_t cube__ocl_kernel_limits(cube__backend_device_t* dev, const cube_kernel_t* k,
                                      cube_execution_mode_t mode, cube__kernel_limits_t* out);
cube_status_t cube__ocl_launch(cube__backend_device_t* dev, void* stream,
                               const cube__launch_t* l);
/* Whether |data| is usable as a program binary as far as PoCL's own format
 * goes: true for another platform's binary; false (with the reason in |why|)
 * for a PoCL binary whose header or root entries are cut short, with a root
 * entry that holds nothing (PoCL 3.1's form of a file missing when it
 * packed the binary: its loader aborts on it) or with no root entries at all
 * (PoCL 5's form: no program.bc). Pure. */
bool cube__ocl_pocl_binary_sound(const void* data, size_t size, char* why, size_t why_size);

#endif /* CUBE_BACKENDS_OPENCL_OPENCL_BACKEND_INTERNAL_H_ */
