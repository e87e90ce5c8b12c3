/* The backend interface: a table of functions per backend (cpu, cuda, opencl,
 * null). Only src/server calls it; nothing here calls back up.
 *
 * Threading: availability, device_count, device_create and the storage
 * functions are thread-safe. Everything taking a stream runs on the device's
 * runner (or under its inline lock) and is ordered on that stream.
 */
#ifndef CUBE_BACKENDS_BACKEND_H_
#define CUBE_BACKENDS_BACKEND_H_

#include <stdint.h>

#include "cube/client.h"
#include "cube/device.h"
#include "cube/kernel.h"
#include "memory/memory.h"

typedef struct cube__backend_device cube__backend_device_t;

/* Where a buffer argument's view lives: its storage and the byte offset of
 * the view in it. For backends whose storage pointer is not an address (an
 * OpenCL cl_mem): they pass the storage's own object plus the offset. */
typedef struct cube__launch_buffer {
  const cube__storage_t* storage; /* NULL for scalar arguments */
  uint64_t offset;
} cube__launch_buffer_t;

/* One launch, arguments resolved for the backend. */
typedef struct cube__launch {
  const cube_kernel_t* kernel;
  const char* name;
  uint32_t count[3];                /* static, or read from the dynamic buffer */
  cube_dim_t dim;
  cube_execution_mode_t mode;
  uint32_t arg_count;
  const cube_arg_kind_t* kinds;     /* arg_count entries */
  const cube_cpu_arg_t* args;       /* buffers resolved to addresses + lengths */
  const cube__launch_buffer_t* buffers; /* arg_count entries: each buffer's storage + offset */
  /* Non-NULL when the launch is profiled: a backend that can time the kernel
   * where it runs (device timestamps) stores its duration here, once the
   * kernel finished; left at UINT64_MAX, the server's host clock is used. */
  uint64_t* device_ns;
} cube__launch_t;

/* Backend flags. */
enum {
  /* Storage pointers are host memory that any thread may read and write. */
  CUBE__BACKEND_HOST_MEMORY = 1u << 0,
  /* Uploads into a fresh buffer may run on the calling thread: |write| is
   * thread-safe against the runner using the same stream, and orders the copy
   * after the work that stream was given before (a device stream). */
  CUBE__BACKEND_CALLER_WRITES = 1u << 1,
};

typedef struct cube__backend_vtable {
  cube_backend_t backend;
  const char* name;
  uint32_t flags;

  /* CUBE_OK or UNAVAILABLE with the reason (driver absent...). */
  cube_status_t (*availability)(void);
  uint32_t (*device_count)(void);

  cube_status_t (*device_create)(uint32_t index, const cube_server_options_t* options,
                                 cube__backend_device_t** out_device,
                                 cube_device_properties_t* out_props,
                                 cube_features_t* out_features, cube_backend_info_t* out_info);
  void (*device_destroy)(cube__backend_device_t* device);

  /* Device storage. Thread-safe. OOM -> CUBE_STATUS_OUT_OF_MEMORY. */
  cube_status_t (*alloc)(cube__backend_device_t* device, uint64_t size, cube__storage_t* out);
  void (*dealloc)(cube__backend_device_t* device, const cube__storage_t* storage);

  /* Pinned host staging storage; NULL when the backend has none. host_dealloc
   * must accept device NULL: it is called so, after device_destroy, for staging
   * buffers (read results) the caller kept past cube_shutdown. */
  cube_status_t (*host_alloc)(cube__backend_device_t* device, uint64_t size,
                              cube__storage_t* out);
  void (*host_dealloc)(cube__backend_device_t* device, const cube__storage_t* storage);

  /* Per logical stream state (may be NULL: no state). */
  cube_status_t (*stream_create)(cube__backend_device_t* device, uint64_t stream_id,
                                 void** out_stream);
  void (*stream_destroy)(cube__backend_device_t* device, void* stream);

  /* Copies between host memory and device storage, rows of |width| bytes:
   * |height| rows, |pitch| bytes apart on the device, packed on the host. */
  cube_status_t (*write)(cube__backend_device_t* device, void* stream, const cube__storage_t* dst,
                         uint64_t dst_offset, uint64_t pitch, const void* src, uint64_t width,
                         uint64_t height);
  cube_status_t (*read)(cube__backend_device_t* device, void* stream, void* dst,
                        const cube__storage_t* src, uint64_t src_offset, uint64_t pitch,
                        uint64_t width, uint64_t height);

  cube_status_t (*launch)(cube__backend_device_t* device, void* stream, const cube__launch_t* l);

  /* Compiles |kernel| for |mode| if it is not yet (dialect kernels; a no-op for
   * native ones). Thread-safe; used by cube_kernel_precompile and, implicitly,
   * by the first launch. */
  cube_status_t (*prepare)(cube__backend_device_t* device, const cube_kernel_t* kernel,
                           cube_execution_mode_t mode);

  /* Waits for everything queued on |stream|. */
  cube_status_t (*sync)(cube__backend_device_t* device, void* stream);

  /* Optional entries (NULL when the backend has no such thing) ------------- */

  /* Stream-ordered device storage: used instead of alloc/dealloc when set.
   * dealloc_on is called with the stream that allocated the storage; the
   * work of other streams on it has completed by then (the server holds
   * cross-stream uses until their events completed). */
  cube_status_t (*alloc_on)(cube__backend_device_t* device, void* stream, uint64_t size,
                            cube__storage_t* out);
  void (*dealloc_on)(cube__backend_device_t* device, void* stream, const cube__storage_t* storage);
  /* Gives cached driver memory back after a cleanup (runs on the caller of
   * memory_cleanup). */
  void (*trim)(cube__backend_device_t* device, void* stream);

  /* Events: a point in a stream's work. With them the server orders a buffer
   * that crosses streams (wait) and keeps it alive until the other stream's
   * work on it has completed (query/synchronize). */
  cube_status_t (*event_record)(cube__backend_device_t* device, void* stream, void** out_event);
  /* Makes |stream| wait for |event| (recorded on another stream). */
  cube_status_t (*event_wait)(cube__backend_device_t* device, void* stream, void* event);
  /* True once |event| completed (or failed: the failure surfaces at sync). */
  bool (*event_done)(cube__backend_device_t* device, void* event);
  /* Blocks until |event| completed. */
  cube_status_t (*event_sync)(cube__backend_device_t* device, void* event);
  void (*event_destroy)(cube__backend_device_t* device, void* event);
  /* Device time between two completed events, in nanoseconds. */
  cube_status_t (*event_elapsed)(cube__backend_device_t* device, void* start, void* end,
                                 uint64_t* out_ns);
} cube__backend_vtable_t;

/* The registry: the table of |backend|, or NULL if not compiled in. */
const cube__backend_vtable_t* cube__backend_get(cube_backend_t backend);

extern const cube__backend_vtable_t cube__backend_cpu;
extern const cube__backend_vtable_t cube__backend_null;
#ifdef CUBE_HAVE_CUDA
extern const cube__backend_vtable_t cube__backend_cuda;
#endif
#ifdef CUBE_HAVE_OPENCL
extern const cube__backend_vtable_t cube__backend_opencl;
#endif

#endif /* CUBE_BACKENDS_BACKEND_H_ */
