/* The OpenCL backend: every available device of every platform of the
 * OpenCL library (loaded with dlopen, opencl_loader.h), PoCL in CI.
 *
 * - Device: one context per device, a command queue per logical stream (in
 *   order, profiling on) and one device queue for staging maps and the
 *   Validate-mode bounds record.
 * - Storage: cube's pools over clCreateBuffer pages. A storage's ptr is its
 *   cl_mem (an opaque, never dereferenced value); a launch passes each buffer
 *   argument as (cl_mem, view bytes, view offset) -- the OpenCL entry ABI of
 *   src/kernel/preludes/opencl.h -- so views at any offset work without
 *   sub-buffers (and their base-address alignment rule). Pages are still
 *   aligned to CL_DEVICE_MEM_BASE_ADDR_ALIGN (props.memory.alignment).
 * - Staging: CL_MEM_ALLOC_HOST_PTR buffers mapped once for their lifetime;
 *   a staging buffer keeps the context alive (refcounted) so that it may be
 *   freed after the device is gone (backend.h: host_dealloc with device NULL).
 * - Ordering: commands of one stream are ordered by its in-order queue; when a
 *   command goes to another queue than the device's previous one, it waits
 *   for a marker of that previous queue, so the device's work keeps the
 *   submission order of the runner across streams (the CPU backend's
 *   semantics). Writes and reads are blocking (the server frees a write's
 *   source once write returns; a read's bytes are handed out at once).
 * - Kernels: the dialect's OpenCL unit built with clBuildProgram; the program
 *   binary (CL_PROGRAM_BINARIES) is stored in the kernel cache on disk and
 *   loaded with clCreateProgramWithBinary, keyed by runtime version, platform,
 *   device name, driver and OpenCL versions, execution mode and unit text.
 *   Per device, a table maps (kernel object, mode) to its cl_kernel; units
 *   with the same key share one cl_program.
 * - Profiling: a profiled launch reports CL_PROFILING_COMMAND_START..END.
 *
 * Threading (backend.h): availability, device_count, device_create, alloc,
 * dealloc, host_alloc, host_dealloc and prepare are thread-safe; launch,
 * write, read and sync run on the device's runner (one at a time).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "backends/opencl/opencl_loader.h"
#include "base/status.h"
#include "cube/cube.h"
#include "kernel/cache.h"
#include "kernel/dialect.h"
#include "kernel/kernel.h"
#include "platform/platform.h"

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
} cube__ocl_entry_t;

typedef struct cube__ocl_stream {
  cl_command_queue queue;
  uint64_t id;
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
  cl_command_queue last_queue;   /* queue of the previous command (not owned) */
  /* Kernel table, guarded by |lock| (prepare may run on any thread). */
  pthread_mutex_t lock;
  cube__ocl_entry_t* entries;
  uint32_t entry_count, entry_cap;
};

static atomic_uint_fast64_t cube__ocl_next_storage_id = 1;

static cube_status_t cube__ocl_error(cube_status_code_t code, cl_int err, const char* fmt, ...)
    CUBE_PRINTF(3, 4);
static cube_status_t cube__ocl_error(cube_status_code_t code, cl_int err, const char* fmt, ...) {
  char what[512], eb[32];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  return cube__status_make(code, "%s: %s", what, cube__ocl_error_name(err, eb));
}

/* Out of memory for the error codes that mean it. */
static cube_status_code_t cube__ocl_alloc_code(cl_int err) {
  return err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
                 err == CL_OUT_OF_HOST_MEMORY || err == CL_INVALID_BUFFER_SIZE
             ? CUBE_STATUS_OUT_OF_MEMORY
             : CUBE_STATUS_INTERNAL;
}

//===----------------------------------------------------------------------===//
// Devices
//===----------------------------------------------------------------------===//

static cube_status_t cube__ocl_availability(void) { return cube__ocl_load(NULL); }

static uint32_t cube__ocl_device_count_fn(void) { return cube__ocl_device_count(); }

static void cube__ocl_host_unref(cube__ocl_host_t* h) {
  if (!h || atomic_fetch_sub(&h->refs, 1) != 1) return;
  if (h->queue) h->cl->ReleaseCommandQueue(h->queue);
  if (h->ctx) h->cl->ReleaseContext(h->ctx);
  free(h);
}

static void cube__ocl_info_str(const cube__ocl_api_t* cl, cl_device_id d, cl_device_info what,
                               char* out, size_t size) {
  out[0] = '\0';
  if (cl->GetDeviceInfo(d, what, size - 1, out, NULL) != CL_SUCCESS) out[0] = '\0';
  out[size - 1] = '\0';
}

static cube_status_t cube__ocl_device_create(uint32_t index, const cube_server_options_t* options,
                                             cube__backend_device_t** out_device,
                                             cube_device_properties_t* out_props,
                                             cube_features_t* out_features,
                                             cube_backend_info_t* out_info) {
  (void)options;
  const cube__ocl_api_t* cl;
  CUBE_RETURN_IF_ERROR(cube__ocl_load(&cl));
  uint32_t count = cube__ocl_device_count();
  if (index >= count)
    return cube__status_make(CUBE_STATUS_NOT_FOUND,
                             "opencl device %u does not exist (%u device%s)", index, count,
                             count == 1 ? "" : "s");
  cube__ocl_device_ref_t ref = cube__ocl_device_ref(index);
  cube__backend_device_t* dev = calloc(1, sizeof(*dev));
  cube__ocl_host_t* host = calloc(1, sizeof(*host));
  if (!dev || !host) {
    free(dev);
    free(host);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "opencl device %u: no host memory", index);
  }
  dev->index = index;
  dev->cl = cl;
  dev->platform = ref.platform;
  dev->device = ref.device;
  pthread_mutex_init(&dev->lock, NULL);
  atomic_init(&host->refs, 1);
  host->cl = cl;
  dev->host = host;

  char version[128], driver[128], cversion[128], vendor[128], extensions[4096];
  cube__ocl_info_str(cl, ref.device, CL_DEVICE_NAME, dev->name, sizeof(dev->name));
  cube__ocl_info_str(cl, ref.device, CL_DEVICE_VERSION, version, sizeof(version));
  cube__ocl_info_str(cl, ref.device, CL_DRIVER_VERSION, driver, sizeof(driver));
  cube__ocl_info_str(cl, ref.device, CL_DEVICE_OPENCL_C_VERSION, cversion, sizeof(cversion));
  cube__ocl_info_str(cl, ref.device, CL_DEVICE_VENDOR, vendor, sizeof(vendor));
  cube__ocl_info_str(cl, ref.device, CL_DEVICE_EXTENSIONS, extensions, sizeof(extensions));
  dev->platform_name[0] = '\0';
  if (cl->GetPlatformInfo(ref.platform, CL_PLATFORM_NAME, sizeof(dev->platform_name) - 1,
                          dev->platform_name, NULL) != CL_SUCCESS)
    dev->platform_name[0] = '\0';
  char pversion[128] = "";
  if (cl->GetPlatformInfo(ref.platform, CL_PLATFORM_VERSION, sizeof(pversion) - 1, pversion,
                          NULL) != CL_SUCCESS)
    pversion[0] = '\0';
  snprintf(dev->identity, sizeof(dev->identity), "%s | %s | %s | %s | %s | %s | %s",
           dev->platform_name, pversion, vendor, dev->name, version, driver, cversion);
  dev->fp64 = strstr(extensions, "cl_khr_fp64") != NULL;

  cl_ulong global_mem = 0, max_alloc = 0, local_mem = 0;
  cl_uint base_align_bits = 0, compute_units = 0, dims = 0;
  cl_device_type type = 0;
  size_t wg = 0, items[3] = {1, 1, 1};
  cl->GetDeviceInfo(ref.device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof(global_mem), &global_mem, NULL);
  cl->GetDeviceInfo(ref.device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof(max_alloc), &max_alloc, NULL);
  cl->GetDeviceInfo(ref.device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof(local_mem), &local_mem, NULL);
  cl->GetDeviceInfo(ref.device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof(base_align_bits),
                    &base_align_bits, NULL);
  cl->GetDeviceInfo(ref.device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof(compute_units),
                    &compute_units, NULL);
  cl->GetDeviceInfo(ref.device, CL_DEVICE_TYPE, sizeof(type), &type, NULL);
  cl->GetDeviceInfo(ref.device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof(wg), &wg, NULL);
  cl->GetDeviceInfo(ref.device, CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS, sizeof(dims), &dims, NULL);
  if (dims >= 3) {
    size_t all[16] = {0};
    if (dims > 16) dims = 16;
    if (cl->GetDeviceInfo(ref.device, CL_DEVICE_MAX_WORK_ITEM_SIZES, dims * sizeof(size_t), all,
                          NULL) == CL_SUCCESS)
      memcpy(items, all, sizeof(items));
  }
  if (wg == 0) wg = 1;
  dev->max_work_group = wg;
  memcpy(dev->max_item, items, sizeof(items));
  dev->local_mem = local_mem;


  cl_int err = CL_SUCCESS;
  cl_context_properties cprops[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ref.platform, 0};
  host->ctx = cl->CreateContext(cprops, 1, &ref.device, NULL, NULL, &err);
  cube_status_t st = CUBE_OK;
  if (!host->ctx)
    st = cube__ocl_error(CUBE_STATUS_UNAVAILABLE, err, "opencl device %u (%s): clCreateContext",
                         index, dev->name);
  if (!st) {
    dev->ctx = host->ctx;
    host->queue = cl->CreateCommandQueue(dev->ctx, ref.device, 0, &err);
    if (!host->queue)
      st = cube__ocl_error(CUBE_STATUS_UNAVAILABLE, err,
                           "opencl device %u (%s): clCreateCommandQueue", index, dev->name);
  }
  if (!st) {
    dev->bounds = cl->CreateBuffer(dev->ctx, CL_MEM_READ_WRITE, sizeof(cube_bounds_error_t), NULL,
                                   &err);
    if (!dev->bounds)
      st = cube__ocl_error(cube__ocl_alloc_code(err), err,
                           "opencl device %u (%s): clCreateBuffer of the %zu-byte bounds record",
                           index, dev->name, sizeof(cube_bounds_error_t));
  }
  if (st) {
    cube__ocl_host_unref(host);
    pthread_mutex_destroy(&dev->lock);
    free(dev);
    return st;
  }

  uint64_t align = base_align_bits / 8;
  if (align < CUBE__OCL_MIN_ALIGNMENT || (align & (align - 1))) align = CUBE__OCL_MIN_ALIGNMENT;
  if (out_props) {
    cube_device_properties_t* p = out_props;
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "opencl%u (%.100s)", index, dev->name);
    p->id.backend = CUBE_BACKEND_OPENCL;
    p->id.index = index;
    p->memory.total_memory = global_mem;
    uint64_t page = max_alloc;
    if (global_mem / 4 < page) page = global_mem / 4;
    p->memory.max_page_size = page / align * align;
    if (p->memory.max_page_size == 0) p->memory.max_page_size = align;
    p->memory.alignment = align;
    p->hardware.load_width = 128;
    p->hardware.plane_size_min = 1;
    p->hardware.plane_size_max = 1;
    p->hardware.max_bindings = CUBE_MAX_KERNEL_ARGS;
    p->hardware.max_shared_memory_size = local_mem;
    for (int i = 0; i < 3; ++i) {
      p->hardware.max_cube_count[i] = UINT32_MAX;
      p->hardware.max_cube_dim[i] = items[i] > UINT32_MAX ? UINT32_MAX : (uint32_t)items[i];
    }
    p->hardware.max_units_per_cube = wg > UINT32_MAX ? UINT32_MAX : (uint32_t)wg;
    if (type & CL_DEVICE_TYPE_CPU)
      p->hardware.num_cpu_cores = compute_units;
    else
      p->hardware.num_streaming_multiprocessors = compute_units;
    p->hardware.max_vector_size = 16;
    p->timing_method = CUBE_TIMING_DEVICE;
    p->layout_policy = CUBE_LAYOUT_POLICY_CONTIGUOUS;
  }
  if (out_features) {
    out_features->bits = CUBE_FEATURE_I64 | CUBE_FEATURE_ATOMIC_U32 | CUBE_FEATURE_ATOMIC_F32_ADD |
                         CUBE_FEATURE_SYNC_CUBE | CUBE_FEATURE_SHARED_MEMORY |
                         CUBE_FEATURE_DYNAMIC_COUNT | CUBE_FEATURE_PINNED_STAGING |
                         CUBE_FEATURE_COLLECTIVES; /* staged through host buffers */
    if (dev->fp64) out_features->bits |= CUBE_FEATURE_F64;
  }
  if (out_info) {
    memset(out_info, 0, sizeof(*out_info));
    out_info->backend = CUBE_BACKEND_OPENCL;
    snprintf(out_info->name, sizeof(out_info->name), "opencl");
    snprintf(out_info->version, sizeof(out_info->version), "%s", pversion);
    out_info->device_count = count;
  }
  *out_device = dev;
  return CUBE_OK;
}

static void cube__ocl_device_destroy(cube__backend_device_t* dev) {
  if (!dev) return;
  const cube__ocl_api_t* cl = dev->cl;
  if (dev->host->queue) cl->Finish(dev->host->queue);
  for (uint32_t i = 0; i < dev->entry_count; ++i) {
    cl->ReleaseKernel(dev->entries[i].kernel);
    cl->ReleaseProgram(dev->entries[i].program);
  }
  free(dev->entries);
  if (dev->bounds) cl->ReleaseMemObject(dev->bounds);
  cube__ocl_host_unref(dev->host); /* the context goes with the last staging buffer */
  pthread_mutex_destroy(&dev->lock);
  free(dev);
}

//===----------------------------------------------------------------------===//
// Storage
//===----------------------------------------------------------------------===//

static cube_status_t cube__ocl_alloc(cube__backend_device_t* dev, uint64_t size,
                                     cube__storage_t* out) {
  cl_int err = CL_SUCCESS;
  /* OpenCL refuses empty buffers; a 0-byte storage still gets a real one. */
  cl_mem mem = size > SIZE_MAX ? NULL
                               : dev->cl->CreateBuffer(dev->ctx, CL_MEM_READ_WRITE,
                                                       size ? (size_t)size : 1, NULL, &err);
  if (!mem) {
    char buf[32];
    if (size > SIZE_MAX) err = CL_INVALID_BUFFER_SIZE;
    return cube__ocl_error(cube__ocl_alloc_code(err), err,
                           "opencl device %u (%s): clCreateBuffer of %" PRIu64 " bytes (%s)",
                           dev->index, dev->name, size, cube__format_bytes(size, buf, sizeof(buf)));
  }
  out->id = atomic_fetch_add_explicit(&cube__ocl_next_storage_id, 1, memory_order_relaxed);
  out->ptr = (void*)mem; /* opaque: never dereferenced */
  out->size = size;
  out->backend_data = (void*)mem;
  return CUBE_OK;
}

static void cube__ocl_dealloc(cube__backend_device_t* dev, const cube__storage_t* storage) {
  /* Queued commands keep the object alive until they finish (OpenCL rule). */
  if (storage && storage->backend_data) dev->cl->ReleaseMemObject((cl_mem)storage->backend_data);
}

static cube_status_t cube__ocl_host_alloc(cube__backend_device_t* dev, uint64_t size,
                                          cube__storage_t* out) {
  const cube__ocl_api_t* cl = dev->cl;
  char buf[32];
  cube__ocl_staging_t* sg = calloc(1, sizeof(*sg));
  if (!sg || size > SIZE_MAX) {
    free(sg);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "opencl device %u: no host memory for a %s staging buffer",
                             dev->index, cube__format_bytes(size, buf, sizeof(buf)));
  }
  size_t n = size ? (size_t)size : 1;
  cl_int err = CL_SUCCESS;
  sg->mem = cl->CreateBuffer(dev->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, n, NULL, &err);
  if (!sg->mem) {
    free(sg);
    return cube__ocl_error(cube__ocl_alloc_code(err), err,
                           "opencl device %u (%s): clCreateBuffer(CL_MEM_ALLOC_HOST_PTR) of %s "
                           "staging memory",
                           dev->index, dev->name, cube__format_bytes(size, buf, sizeof(buf)));
  }
  void* p = cl->EnqueueMapBuffer(dev->host->queue, sg->mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE,
                                 0, n, 0, NULL, NULL, &err);
  if (!p) {
    cl->ReleaseMemObject(sg->mem);
    free(sg);
    return cube__ocl_error(cube__ocl_alloc_code(err), err,
                           "opencl device %u (%s): clEnqueueMapBuffer of %s staging memory",
                           dev->index, dev->name, cube__format_bytes(size, buf, sizeof(buf)));
  }
  atomic_fetch_add(&dev->host->refs, 1);
  sg->host = dev->host;
  out->id = atomic_fetch_add_explicit(&cube__ocl_next_storage_id, 1, memory_order_relaxed);
  out->ptr = p;
  out->size = size;
  out->backend_data = sg;
  return CUBE_OK;
}

/* |dev| may be NULL (after device_destroy): the buffer's host record has what
 * it needs. */
static void cube__ocl_host_dealloc(cube__backend_device_t* dev, const cube__storage_t* storage) {
  (void)dev;
  if (!storage || !storage->backend_data) return;
  cube__ocl_staging_t* sg = storage->backend_data;
  const cube__ocl_api_t* cl = sg->host->cl;
  cl_event ev = NULL;
  if (cl->EnqueueUnmapMemObject(sg->host->queue, sg->mem, storage->ptr, 0, NULL, &ev) ==
          CL_SUCCESS &&
      ev) {
    cl->WaitForEvents(1, &ev);
    cl->ReleaseEvent(ev);
  }
  cl->ReleaseMemObject(sg->mem);
  cube__ocl_host_unref(sg->host);
  free(sg);
}

//===----------------------------------------------------------------------===//
// Streams and ordering
//===----------------------------------------------------------------------===//

static cube_status_t cube__ocl_stream_create(cube__backend_device_t* dev, uint64_t stream_id,
                                             void** out_stream) {
  cube__ocl_stream_t* s = calloc(1, sizeof(*s));
  if (!s)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "opencl device %u: no host memory for stream %" PRIu64, dev->index,
                             stream_id);
  cl_int err = CL_SUCCESS;
  s->queue = dev->cl->CreateCommandQueue(dev->ctx, dev->device, CL_QUEUE_PROFILING_ENABLE, &err);
  if (!s->queue) {
    free(s);
    return cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                           "opencl device %u (%s): clCreateCommandQueue for stream %" PRIu64,
                           dev->index, dev->name, stream_id);
  }
  s->id = stream_id;
  *out_stream = s;
  return CUBE_OK;
}

static void cube__ocl_stream_destroy(cube__backend_device_t* dev, void* stream) {
  cube__ocl_stream_t* s = stream;
  if (!s) return;
  dev->cl->Finish(s->queue);
  if (dev->last_queue == s->queue) dev->last_queue = NULL;
  dev->cl->ReleaseCommandQueue(s->queue);
  free(s);
}

/* Before a command on |s|: when the device's previous command went to another
 * queue, a marker there that this command must wait for (*out_wait, to
 * release after the enqueue; NULL when none is needed). */
static cube_status_t cube__ocl_order(cube__backend_device_t* dev, cube__ocl_stream_t* s,
                                     cl_event* out_wait) {
  *out_wait = NULL;
  if (dev->last_queue && dev->last_queue != s->queue) {
    cl_int err = dev->cl->EnqueueMarkerWithWaitList(dev->last_queue, 0, NULL, out_wait);
    if (err != CL_SUCCESS)
      return cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                             "opencl device %u: clEnqueueMarkerWithWaitList ordering stream %" PRIu64
                             " after the previous stream",
                             dev->index, s->id);
    dev->cl->Flush(dev->last_queue);
  }
  dev->last_queue = s->queue;
  return CUBE_OK;
}

/* Checks that |height| rows of |width| bytes, |pitch| apart from |offset|,
 * lie inside |storage|. */
static cube_status_t cube__ocl_check_rows(const char* op, const cube__storage_t* storage,
                                          uint64_t offset, uint64_t pitch, uint64_t width,
                                          uint64_t height) {
  if (height > 1 && pitch < width)
    return CUBE_INVALID("opencl %s: pitch %" PRIu64 " is smaller than the row width %" PRIu64, op,
                        pitch, width);
  uint64_t span, last;
  if (cube__mul_overflow_u64(height - 1, pitch, &span) ||
      cube__add_overflow_u64(span, width, &span) || cube__add_overflow_u64(offset, span, &last) ||
      last > storage->size || last > SIZE_MAX)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "opencl %s: %" PRIu64 " rows of %" PRIu64 " bytes, pitch %" PRIu64
                             ", at offset %" PRIu64 " exceed storage %" PRIu64 " of %" PRIu64
                             " bytes",
                             op, height, width, pitch, offset, storage->id, storage->size);
  return CUBE_OK;
}

static cube_status_t cube__ocl_write(cube__backend_device_t* dev, void* stream,
                                     const cube__storage_t* dst, uint64_t dst_offset,
                                     uint64_t pitch, const void* src, uint64_t width,
                                     uint64_t height) {
  if (width == 0 || height == 0) return CUBE_OK;
  CUBE_RETURN_IF_ERROR(cube__ocl_check_rows("write", dst, dst_offset, pitch, width, height));
  cube__ocl_stream_t* s = stream;
  cl_event wait;
  CUBE_RETURN_IF_ERROR(cube__ocl_order(dev, s, &wait));
  cl_mem mem = (cl_mem)dst->backend_data;
  cl_int err;
  /* Blocking: the server releases |src| when this returns. */
  if (height == 1 || pitch == width) {
    err = dev->cl->EnqueueWriteBuffer(s->queue, mem, CL_TRUE, (size_t)dst_offset,
                                      (size_t)(width * height), src, wait ? 1 : 0,
                                      wait ? &wait : NULL, NULL);
  } else {
    size_t bo[3] = {(size_t)dst_offset, 0, 0}, ho[3] = {0, 0, 0};
    size_t region[3] = {(size_t)width, (size_t)height, 1};
    err = dev->cl->EnqueueWriteBufferRect(s->queue, mem, CL_TRUE, bo, ho, region, (size_t)pitch, 0,
                                          (size_t)width, 0, src, wait ? 1 : 0,
                                          wait ? &wait : NULL, NULL);
  }
  if (wait) dev->cl->ReleaseEvent(wait);
  if (err != CL_SUCCESS)
    return cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                           "opencl write of %" PRIu64 " rows of %" PRIu64 " bytes to storage %" PRIu64
                           " at offset %" PRIu64,
                           height, width, dst->id, dst_offset);
  return CUBE_OK;
}

static cube_status_t cube__ocl_read(cube__backend_device_t* dev, void* stream, void* dst,
                                    const cube__storage_t* src, uint64_t src_offset,
                                    uint64_t pitch, uint64_t width, uint64_t height) {
  if (width == 0 || height == 0) return CUBE_OK;
  CUBE_RETURN_IF_ERROR(cube__ocl_check_rows("read", src, src_offset, pitch, width, height));
  cube__ocl_stream_t* s = stream;
  cl_event wait;
  CUBE_RETURN_IF_ERROR(cube__ocl_order(dev, s, &wait));
  cl_mem mem = (cl_mem)src->backend_data;
  cl_int err;
  if (height == 1 || pitch == width) {
    err = dev->cl->EnqueueReadBuffer(s->queue, mem, CL_TRUE, (size_t)src_offset,
                                     (size_t)(width * height), dst, wait ? 1 : 0,
                                     wait ? &wait : NULL, NULL);
  } else {
    size_t bo[3] = {(size_t)src_offset, 0, 0}, ho[3] = {0, 0, 0};
    size_t region[3] = {(size_t)width, (size_t)height, 1};
    err = dev->cl->EnqueueReadBufferRect(s->queue, mem, CL_TRUE, bo, ho, region, (size_t)pitch, 0,
                                         (size_t)width, 0, dst, wait ? 1 : 0, wait ? &wait : NULL,
                                         NULL);
  }
  if (wait) dev->cl->ReleaseEvent(wait);
  if (err != CL_SUCCESS)
    return cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                           "opencl read of %" PRIu64 " rows of %" PRIu64 " bytes from storage %" PRIu64
                           " at offset %" PRIu64,
                           height, width, src->id, src_offset);
  return CUBE_OK;
}

static cube_status_t cube__ocl_sync(cube__backend_device_t* dev, void* stream) {
  cube__ocl_stream_t* s = stream;
  if (!s) return CUBE_OK;
  cl_int err = dev->cl->Finish(s->queue);
  if (err != CL_SUCCESS)
    return cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                           "opencl device %u (%s): clFinish of stream %" PRIu64, dev->index,
                           dev->name, s->id);
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

static const char* const cube__ocl_mode_names[3] = {"checked", "validate", "unchecked"};

/* The build log of |p| on |dev| (malloc'd; "" when there is none). */
static char* cube__ocl_build_log(cube__backend_device_t* dev, cl_program p) {
  size_t n = 0;
  if (dev->cl->GetProgramBuildInfo(p, dev->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) !=
          CL_SUCCESS ||
      n == 0)
    return calloc(1, 1);
  char* log = malloc(n + 1);
  if (!log) return NULL;
  if (dev->cl->GetProgramBuildInfo(p, dev->device, CL_PROGRAM_BUILD_LOG, n, log, NULL) !=
      CL_SUCCESS)
    n = 0;
  log[n] = '\0';
  while (n > 0 && (log[n - 1] == '\n' || log[n - 1] == ' ' || log[n - 1] == '\0')) log[--n] = '\0';
  return log;
}

/* Program from a cached binary; NULL when it is absent or does not build. */
static cl_program cube__ocl_program_from_disk(cube__backend_device_t* dev, cube__cache_key_t key) {
  void* data = NULL;
  size_t size = 0;
  cube_status_t st = cube__cache_disk_load(key, "clbin", &data, &size);
  if (st) {
    cube_status_free(st);
    return NULL;
  }
  const unsigned char* bin = data;
  cl_int bstatus = CL_SUCCESS, err = CL_SUCCESS;
  cl_program p =
      dev->cl->CreateProgramWithBinary(dev->ctx, 1, &dev->device, &size, &bin, &bstatus, &err);
  free(data);
  if (p && (bstatus != CL_SUCCESS ||
            dev->cl->BuildProgram(p, 1, &dev->device, "", NULL, NULL) != CL_SUCCESS)) {
    dev->cl->ReleaseProgram(p);
    p = NULL;
  }
  if (!p) cube__cache_disk_discard(key, "clbin");
  return p;
}

/* Stores the binary of |p| in the disk cache (failures ignored: the cache is
 * an optimisation). */
static void cube__ocl_program_to_disk(cube__backend_device_t* dev, cl_program p,
                                      cube__cache_key_t key) {
  size_t size = 0;
  if (dev->cl->GetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, NULL) !=
          CL_SUCCESS ||
      size == 0)
    return;
  unsigned char* bin = malloc(size);
  if (!bin) return;
  if (dev->cl->GetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof(bin), &bin, NULL) == CL_SUCCESS)
    cube_status_free(cube__cache_disk_store(key, "clbin", bin, size));
  free(bin);
}

/* Builds the unit |text| of kernel |k|: COMPILATION_FAILED with the build
 * log (its lines are the user's: the unit has #line directives). */
static cube_status_t cube__ocl_program_from_source(cube__backend_device_t* dev,
                                                  const cube_kernel_t* k, const char* text,
                                                  cube_execution_mode_t mode, cl_program* out) {
  cl_int err = CL_SUCCESS;
  cl_program p = dev->cl->CreateProgramWithSource(dev->ctx, 1, &text, NULL, &err);
  if (!p)
    return cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                           "kernel '%s': clCreateProgramWithSource on opencl device %u (%s)",
                           k->name, dev->index, dev->name);
  err = dev->cl->BuildProgram(p, 1, &dev->device, "", NULL, NULL);
  if (err != CL_SUCCESS) {
    char* log = cube__ocl_build_log(dev, p);
    char eb[32];
    cube_status_t st = cube__status_make(
        err == CL_BUILD_PROGRAM_FAILURE ? CUBE_STATUS_COMPILATION_FAILED : CUBE_STATUS_INTERNAL,
        "compiling kernel '%s' (%s mode) with clBuildProgram on opencl device %u (%s) failed "
        "(%s):\n%s",
        k->name, cube__ocl_mode_names[mode], dev->index, dev->name,
        cube__ocl_error_name(err, eb), log ? log : "(no memory for the build log)");
    free(log);
    dev->cl->ReleaseProgram(p);
    return st;
  }
  *out = p;
  return CUBE_OK;
}

/* The entry of (k, mode) on |dev|, compiled (or loaded) on first use. Copies
 * it into |out|; the cl_kernel stays owned by the device. Thread-safe. */
static cube_status_t cube__ocl_entry(cube__backend_device_t* dev, const cube_kernel_t* k,
                                     cube_execution_mode_t mode, cube__ocl_entry_t* out) {
  if (!k->source || !k->signature)
    return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                             "kernel '%s' is a native CPU kernel (no dialect source); the opencl "
                             "backend runs dialect kernels only",
                             k->name);
  if ((unsigned)mode > CUBE_EXEC_UNCHECKED)
    return CUBE_INVALID("kernel '%s': execution mode %d is invalid", k->name, (int)mode);
  pthread_mutex_lock(&dev->lock);
  for (uint32_t i = 0; i < dev->entry_count; ++i) {
    if (dev->entries[i].kernel_id == k->id && dev->entries[i].mode == (uint32_t)mode) {
      *out = dev->entries[i];
      pthread_mutex_unlock(&dev->lock);
      return CUBE_OK;
    }
  }
  cube_status_t st = CUBE_OK;
  char* text = NULL;
  cl_program program = NULL;
  cl_kernel kernel = NULL;
  if (dev->entry_count == dev->entry_cap) {
    uint32_t cap = dev->entry_cap ? dev->entry_cap * 2 : 16;
    cube__ocl_entry_t* e = realloc(dev->entries, cap * sizeof(*e));
    if (!e) {
      st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "kernel '%s': no host memory", k->name);
      goto done;
    }
    dev->entries = e;
    dev->entry_cap = cap;
  }
  st = cube__dialect_generate(CUBE__TARGET_OPENCL, k->signature, k->source, k->defines,
                              k->define_count, mode, &text);
  if (st) {
    st = cube__status_annotate(st, "kernel '%s'", k->name);
    goto done;
  }
  const char* parts[] = {"cube", CUBE_VERSION_STRING, "opencl", dev->identity,
                         cube__ocl_mode_names[mode], text, NULL};
  cube__cache_key_t key = cube__cache_key(parts);
  /* Another kernel object of the same unit: share its program. */
  for (uint32_t i = 0; i < dev->entry_count && !program; ++i) {
    if (dev->entries[i].key.hi == key.hi && dev->entries[i].key.lo == key.lo) {
      program = dev->entries[i].program;
      dev->cl->RetainProgram(program);
      cube__cache_count_memory_hit();
    }
  }
  if (!program) {
    uint64_t t0 = cube__now_ns();
    program = cube__ocl_program_from_disk(dev, key);
    if (program) {
      cube__cache_count_disk_hit(cube__now_ns() - t0);
    } else {
      st = cube__ocl_program_from_source(dev, k, text, mode, &program);
      cube__cache_count_miss(cube__now_ns() - t0, st != CUBE_OK);
      if (st) goto done;
      cube__ocl_program_to_disk(dev, program, key);
    }
  }
  cl_int err = CL_SUCCESS;
  kernel = dev->cl->CreateKernel(program, "cube_kernel_entry", &err);
  if (!kernel) {
    st = cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                         "kernel '%s': clCreateKernel(cube_kernel_entry) on opencl device %u (%s)",
                         k->name, dev->index, dev->name);
    dev->cl->ReleaseProgram(program);
    goto done;
  }
  size_t wg = 0;
  if (dev->cl->GetKernelWorkGroupInfo(kernel, dev->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof(wg),
                                      &wg, NULL) != CL_SUCCESS ||
      wg == 0)
    wg = dev->max_work_group;
  cube__ocl_entry_t* e = &dev->entries[dev->entry_count++];
  e->kernel_id = k->id;
  e->mode = (uint32_t)mode;
  e->key = key;
  e->program = program;
  e->kernel = kernel;
  e->max_work_group = wg;
  *out = *e;
done:
  free(text);
  pthread_mutex_unlock(&dev->lock);
  return st;
}

static cube_status_t cube__ocl_prepare(cube__backend_device_t* dev, const cube_kernel_t* k,
                                       cube_execution_mode_t mode) {
  /* A native kernel has nothing to compile (its launches are refused). */
  if (!k->source || !k->signature) return CUBE_OK;
  cube__ocl_entry_t e;
  return cube__ocl_entry(dev, k, mode, &e);
}

//===----------------------------------------------------------------------===//
// Launch
//===----------------------------------------------------------------------===//

static const uint32_t cube__ocl_zero_bounds[8];

static cube_status_t cube__ocl_launch(cube__backend_device_t* dev, void* stream,
                                      const cube__launch_t* l) {
  const cube_kernel_t* k = l->kernel;
  const char* name = l->name ? l->name : (k && k->name ? k->name : "?");
  if (!k) return CUBE_INVALID("launch of kernel '%s': no kernel object", name);
  const cube__ocl_api_t* cl = dev->cl;
  cube__ocl_stream_t* s = stream;
  cube__ocl_entry_t e;
  CUBE_RETURN_IF_ERROR(cube__ocl_entry(dev, k, l->mode, &e));
  if (l->arg_count != k->signature->count)
    return CUBE_INVALID("launch of kernel '%s': %u arguments, the kernel has %u parameters", name,
                        l->arg_count, k->signature->count);

  const uint32_t dim[3] = {l->dim.x, l->dim.y, l->dim.z};
  for (int i = 0; i < 3; ++i) {
    if (dim[i] == 0 || dim[i] > dev->max_item[i])
      return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                               "launch of kernel '%s': cube dim (%u, %u, %u): %c = %u is outside "
                               "[1, %zu] on opencl device %u (%s)",
                               name, dim[0], dim[1], dim[2], "xyz"[i], dim[i], dev->max_item[i],
                               dev->index, dev->name);
  }
  uint64_t units = (uint64_t)dim[0] * dim[1] * dim[2];
  if (units > e.max_work_group)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "launch of kernel '%s': cube dim (%u, %u, %u) has %" PRIu64
                             " units, more than the %zu opencl device %u (%s) runs in a cube of "
                             "this kernel",
                             name, dim[0], dim[1], dim[2], units, e.max_work_group, dev->index,
                             dev->name);
  size_t global[3], local[3] = {dim[0], dim[1], dim[2]};
  for (int i = 0; i < 3; ++i) {
    uint64_t g = (uint64_t)l->count[i] * dim[i];
    if (g > SIZE_MAX)
      return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                               "launch of kernel '%s': %u cubes of %u units on axis %c overflow "
                               "the global size",
                               name, l->count[i], dim[i], "xyz"[i]);
    global[i] = (size_t)g;
  }
  if (!global[0] || !global[1] || !global[2]) return CUBE_OK;

  /* Arguments: a buffer is (cl_mem, view bytes, view offset). The kernel
   * object is only touched here, on the device's runner. */
  cl_uint ai = 0;
  cl_int err = CL_SUCCESS;
  for (uint32_t i = 0; i < l->arg_count && err == CL_SUCCESS; ++i) {
    const cube_cpu_arg_t* a = &l->args[i];
    switch (l->kinds[i]) {
      case CUBE_ARG_BUFFER: {
        const cube__storage_t* storage = l->buffers ? l->buffers[i].storage : NULL;
        if (!storage)
          return CUBE_INVALID("launch of kernel '%s': argument %u has no storage", name, i);
        cl_mem mem = (cl_mem)storage->backend_data;
        cl_ulong bytes = a->buffer.len, offset = l->buffers[i].offset;
        err = cl->SetKernelArg(e.kernel, ai++, sizeof(mem), &mem);
        if (err == CL_SUCCESS) err = cl->SetKernelArg(e.kernel, ai++, sizeof(bytes), &bytes);
        if (err == CL_SUCCESS) err = cl->SetKernelArg(e.kernel, ai++, sizeof(offset), &offset);
        break;
      }
      case CUBE_ARG_U32: err = cl->SetKernelArg(e.kernel, ai++, sizeof(a->u32), &a->u32); break;
      case CUBE_ARG_I32: err = cl->SetKernelArg(e.kernel, ai++, sizeof(a->i32), &a->i32); break;
      case CUBE_ARG_U64: err = cl->SetKernelArg(e.kernel, ai++, sizeof(a->u64), &a->u64); break;
      case CUBE_ARG_I64: err = cl->SetKernelArg(e.kernel, ai++, sizeof(a->i64), &a->i64); break;
      case CUBE_ARG_F32: err = cl->SetKernelArg(e.kernel, ai++, sizeof(a->f32), &a->f32); break;
      case CUBE_ARG_F64: err = cl->SetKernelArg(e.kernel, ai++, sizeof(a->f64), &a->f64); break;
      default:
        return CUBE_INVALID("launch of kernel '%s': argument %u has kind %d", name, i,
                            (int)l->kinds[i]);
    }
    if (err != CL_SUCCESS) {
      char nb[16];
      return cube__ocl_error(CUBE_STATUS_LAUNCH_FAILED, err,
                             "launch of kernel '%s': clSetKernelArg(%u) for argument %u ('%s')",
                             name, ai - 1, i, cube__kernel_param_name(k, i, nb));
    }
  }
  if (l->mode == CUBE_EXEC_VALIDATE) {
    err = cl->SetKernelArg(e.kernel, ai++, sizeof(dev->bounds), &dev->bounds);
    if (err != CL_SUCCESS)
      return cube__ocl_error(CUBE_STATUS_LAUNCH_FAILED, err,
                             "launch of kernel '%s': clSetKernelArg of the bounds record", name);
  }

  cl_event wait;
  CUBE_RETURN_IF_ERROR(cube__ocl_order(dev, s, &wait));
  if (l->mode == CUBE_EXEC_VALIDATE) {
    err = cl->EnqueueWriteBuffer(s->queue, dev->bounds, CL_FALSE, 0, sizeof(cube__ocl_zero_bounds),
                                 cube__ocl_zero_bounds, wait ? 1 : 0, wait ? &wait : NULL, NULL);
    if (wait) cl->ReleaseEvent(wait);
    wait = NULL;
    if (err != CL_SUCCESS)
      return cube__ocl_error(CUBE_STATUS_LAUNCH_FAILED, err,
                             "launch of kernel '%s': clearing the bounds record", name);
  }
  cl_event done = NULL;
  err = cl->EnqueueNDRangeKernel(s->queue, e.kernel, 3, NULL, global, local, wait ? 1 : 0,
                                 wait ? &wait : NULL, l->device_ns ? &done : NULL);
  if (wait) cl->ReleaseEvent(wait);
  if (err != CL_SUCCESS)
    return cube__ocl_error(err == CL_OUT_OF_RESOURCES || err == CL_MEM_OBJECT_ALLOCATION_FAILURE
                               ? CUBE_STATUS_OUT_OF_MEMORY
                               : CUBE_STATUS_LAUNCH_FAILED,
                           err,
                           "launch of kernel '%s': clEnqueueNDRangeKernel of (%u, %u, %u) cubes "
                           "of (%u, %u, %u) units on opencl device %u (%s)",
                           name, l->count[0], l->count[1], l->count[2], dim[0], dim[1], dim[2],
                           dev->index, dev->name);
  cl->Flush(s->queue); /* start it now: the runner may not come back to this queue soon */
  cube_status_t st = CUBE_OK;
  if (done) {
    cl_ulong t0 = 0, t1 = 0;
    cl_int exec = CL_COMPLETE;
    err = cl->WaitForEvents(1, &done);
    cl->GetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(exec), &exec, NULL);
    if (err != CL_SUCCESS || exec < 0) {
      st = cube__ocl_error(CUBE_STATUS_LAUNCH_FAILED, exec < 0 ? exec : err,
                           "launch of kernel '%s' on opencl device %u (%s) failed", name,
                           dev->index, dev->name);
    } else if (cl->GetEventProfilingInfo(done, CL_PROFILING_COMMAND_START, sizeof(t0), &t0,
                                         NULL) == CL_SUCCESS &&
               cl->GetEventProfilingInfo(done, CL_PROFILING_COMMAND_END, sizeof(t1), &t1, NULL) ==
                   CL_SUCCESS &&
               t1 >= t0) {
      *l->device_ns = t1 - t0;
    }
    cl->ReleaseEvent(done);
    if (st) return st;
  }
  if (l->mode == CUBE_EXEC_VALIDATE) {
    cube_bounds_error_t b;
    err = cl->EnqueueReadBuffer(s->queue, dev->bounds, CL_TRUE, 0, sizeof(b), &b, 0, NULL, NULL);
    if (err != CL_SUCCESS)
      return cube__ocl_error(CUBE_STATUS_LAUNCH_FAILED, err,
                             "launch of kernel '%s' (Validate mode): reading the bounds record",
                             name);
    if (b.flag) return cube__kernel_bounds_status(k, name, &b);
  }
  return CUBE_OK;
}

const cube__backend_vtable_t cube__backend_opencl = {
    .backend = CUBE_BACKEND_OPENCL,
    .name = "opencl",
    .flags = 0,
    .availability = cube__ocl_availability,
    .device_count = cube__ocl_device_count_fn,
    .device_create = cube__ocl_device_create,
    .device_destroy = cube__ocl_device_destroy,
    .alloc = cube__ocl_alloc,
    .dealloc = cube__ocl_dealloc,
    .host_alloc = cube__ocl_host_alloc,
    .host_dealloc = cube__ocl_host_dealloc,
    .stream_create = cube__ocl_stream_create,
    .stream_destroy = cube__ocl_stream_destroy,
    .write = cube__ocl_write,
    .read = cube__ocl_read,
    .launch = cube__ocl_launch,
    .prepare = cube__ocl_prepare,
    .sync = cube__ocl_sync,
};
