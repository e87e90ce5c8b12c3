/* The OpenCL backend's devices and storage.
 *
 * - Device: one context per device and one device queue (for staging maps);
 *   the Validate-mode bounds record. Properties and features read from the
 *   device; its identity string keys the kernel cache.
 * - Storage: cube's pools over clCreateBuffer pages. A storage's ptr is its
 *   cl_mem (an opaque, never dereferenced value).
 * - Staging: CL_MEM_ALLOC_HOST_PTR buffers mapped once for their lifetime;
 *   a staging buffer keeps the context alive (refcounted) so that it may be
 *   freed after the device is gone (backend.h: host_dealloc with device NULL).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/opencl/opencl_backend_internal.h"
#include "base/status.h"
#include "cube/cube.h"
#include "kernel/kernel.h"
#include "platform/platform.h"

static atomic_uint_fast64_t cube__ocl_next_storage_id = 1;

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

cube_status_t cube__ocl_error(cube_status_code_t code, cl_int err, const char* fmt, ...) {
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

cube_status_t cube__ocl_availability(void) { return cube__ocl_load(NULL); }

uint32_t cube__ocl_device_count_fn(void) { return cube__ocl_device_count(); }

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

cube_status_t cube__ocl_device_create(uint32_t index, const cube_server_options_t* options,
                                      cube__backend_device_t** out_device,
                                      cube_device_properties_t* out_props,
                                      cube_features_t* out_features,
                                      cube_backend_info_t* out_info) {
  /* OpenCL devices have no per-device knobs (CUBE_OPENCL_LIBRARY is the
   * process's): no parameter struct to take. */
  if (options && options->backend_params)
    return CUBE_INVALID("opencl:%u: the OpenCL backend takes no backend_params", index);
  const cube__ocl_api_t* cl;
  CUBE_RETURN_IF_ERROR(cube__ocl_load(&cl));
  uint32_t count = cube__ocl_device_count();
  if (index >= count)
    return cube__status_make(CUBE_STATUS_NOT_FOUND,
                             "opencl:%u does not exist (%u device%s)", index, count,
                             count == 1 ? "" : "s");
  cube__ocl_device_ref_t ref = cube__ocl_device_ref(index);
  cube__backend_device_t* dev = calloc(1, sizeof(*dev));
  cube__ocl_host_t* host = calloc(1, sizeof(*host));
  if (!dev || !host) {
    free(dev);
    free(host);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "opencl:%u: no host memory", index);
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
    st = cube__ocl_error(CUBE_STATUS_UNAVAILABLE, err, "opencl:%u (%s): clCreateContext",
                         index, dev->name);
  if (!st) {
    dev->ctx = host->ctx;
    host->queue = cl->CreateCommandQueue(dev->ctx, ref.device, 0, &err);
    if (!host->queue)
      st = cube__ocl_error(CUBE_STATUS_UNAVAILABLE, err,
                           "opencl:%u (%s): clCreateCommandQueue", index, dev->name);
  }
  if (!st) {
    dev->bounds = cl->CreateBuffer(dev->ctx, CL_MEM_READ_WRITE, sizeof(cube_bounds_error_t), NULL,
                                   &err);
    if (!dev->bounds)
      st = cube__ocl_error(cube__ocl_alloc_code(err), err,
                           "opencl:%u (%s): clCreateBuffer of the %zu-byte bounds record",
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
    snprintf(p->name, sizeof(p->name), "opencl:%u (%.100s)", index, dev->name);
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

void cube__ocl_device_destroy(cube__backend_device_t* dev) {
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

cube_status_t cube__ocl_alloc(cube__backend_device_t* dev, uint64_t size,
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
                           "opencl:%u (%s): clCreateBuffer of %" PRIu64 " bytes (%s)",
                           dev->index, dev->name, size, cube__format_bytes(size, buf, sizeof(buf)));
  }
  out->id = atomic_fetch_add_explicit(&cube__ocl_next_storage_id, 1, memory_order_relaxed);
  out->ptr = (void*)mem; /* opaque: never dereferenced */
  out->size = size;
  out->backend_data = (void*)mem;
  return CUBE_OK;
}

/* |dev| may be NULL (after device_destroy, for memory a DLPack export kept
 * past cube_shutdown): the buffer holds its context, the library is loaded. */
void cube__ocl_dealloc(cube__backend_device_t* dev, const cube__storage_t* storage) {
  if (!storage || !storage->backend_data) return;
  const cube__ocl_api_t* cl = dev ? dev->cl : NULL;
  if (!cl) {
    cube_status_t st = cube__ocl_load(&cl);
    if (st) {
      cube_status_free(st);
      return;
    }
  }
  /* Queued commands keep the object alive until they finish (OpenCL rule). */
  cl->ReleaseMemObject((cl_mem)storage->backend_data);
}

/* ctl: what DLPack needs (src/client/dlpack.c): the device as DLPack names
 * it (kDLOpenCL, its index). A cl_mem of another context cannot be a
 * buffer here: only cube's own exports come back (the client sees those
 * itself), so EXTERNAL_STORAGE is not answered. */
cube_status_t cube__ocl_ctl(cube__backend_device_t* dev, void* stream, uint32_t op, void* arg) {
  (void)stream;
  if (op == CUBE__CTL_DLPACK_DEVICE && arg) {
    ((int32_t*)arg)[0] = 4; /* kDLOpenCL */
    ((int32_t*)arg)[1] = (int32_t)dev->index;
    ((int32_t*)arg)[2] = 1; /* a cl_mem */
    return CUBE_OK;
  }
  if (op == CUBE__CTL_EXTERNAL_STORAGE && arg &&
      ((cube__backend_external_t*)arg)->dl_device_type != 4 /* kDLOpenCL */)
    return CUBE_INVALID("opencl:%u (%s) takes OpenCL memory (DLPack device type 4), not device "
                        "type %d", dev->index, dev->name,
                        (int)((cube__backend_external_t*)arg)->dl_device_type);
  if (op == CUBE__CTL_EXTERNAL_STORAGE)
    return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                             "opencl:%u (%s) cannot use a cl_mem of another OpenCL context; only "
                             "tensors cube exported come back without a copy",
                             dev->index, dev->name);
  if (op == CUBE__CTL_DEVICE_IDENTITY && arg) {
    cube__backend_text_t* t = arg;
    if (t->size) snprintf(t->buf, t->size, "opencl | %s", dev->identity);
    return CUBE_OK;
  }
  return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                           "opencl:%u: control operation %u is not implemented", dev->index, op);
}

cube_status_t cube__ocl_host_alloc(cube__backend_device_t* dev, uint64_t size,
                                   cube__storage_t* out) {
  const cube__ocl_api_t* cl = dev->cl;
  char buf[32];
  cube__ocl_staging_t* sg = calloc(1, sizeof(*sg));
  if (!sg || size > SIZE_MAX) {
    free(sg);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "opencl:%u: no host memory for a %s staging buffer",
                             dev->index, cube__format_bytes(size, buf, sizeof(buf)));
  }
  size_t n = size ? (size_t)size : 1;
  cl_int err = CL_SUCCESS;
  sg->mem = cl->CreateBuffer(dev->ctx, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, n, NULL, &err);
  if (!sg->mem) {
    free(sg);
    return cube__ocl_error(cube__ocl_alloc_code(err), err,
                           "opencl:%u (%s): clCreateBuffer(CL_MEM_ALLOC_HOST_PTR) of %s "
                           "staging memory",
                           dev->index, dev->name, cube__format_bytes(size, buf, sizeof(buf)));
  }
  void* p = cl->EnqueueMapBuffer(dev->host->queue, sg->mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE,
                                 0, n, 0, NULL, NULL, &err);
  if (!p) {
    cl->ReleaseMemObject(sg->mem);
    free(sg);
    return cube__ocl_error(cube__ocl_alloc_code(err), err,
                           "opencl:%u (%s): clEnqueueMapBuffer of %s staging memory",
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
void cube__ocl_host_dealloc(cube__backend_device_t* dev, const cube__storage_t* storage) {
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
