/* The null backend: the skeleton to copy for a new backend (README.md in
 * this folder is the recipe). Every slot of the table (backend.h) is here
 * with what the real one must do. It works as far as a backend without a
 * compiler can: its "device memory" is host memory that it does not let the
 * layers above touch (no CUBE__CAP_HOST_MEMORY: uploads are queued, reads
 * copy, collectives go through the staged transport), its streams and
 * events are synchronous, and launches are UNIMPLEMENTED.
 *
 * By default it has no devices, so that nobody meets it by accident;
 * CUBE_NULL_DEVICES=<n> (0 to 16) gives it n devices. The conformance suite
 * runs on it as the variant "null" (tests/CMakeLists.txt) with two devices,
 * the cases that run kernels skipping with their reason.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "base/options.h"
#include "base/status.h"
#include "cube/cube.h"
#include "kernel/cache.h"
#include "kernel/dialect.h"
#include "kernel/kernel.h"
#include "platform/platform.h"

#define CUBE__NULL_MAX_DEVICES 16u
_Static_assert(CUBE__NULL_MAX_DEVICES == CUBE__OPT_NULL_DEVICES_MAX,
               "CUBE_NULL_DEVICES accepts what the backend has");
#define CUBE__NULL_ALIGNMENT 64u

/* A device's state. A real backend keeps its driver's device, context and
 * whatever it caches per device (compiled modules, staging buffers). */
struct cube__backend_device {
  uint32_t index;
  atomic_uint_fast64_t next_storage_id;
};

/* A logical stream's state (a driver stream, a command queue). */
typedef struct cube__null_stream {
  uint64_t id;
} cube__null_stream_t;

/* An event: a point in a stream's work. Work here is done when its slot
 * returns, so an event is complete when recorded; it keeps the time. */
typedef struct cube__null_event {
  uint64_t ns;
} cube__null_event_t;

//===----------------------------------------------------------------------===//
// The backend and its devices
//===----------------------------------------------------------------------===//

/* CUBE_NULL_DEVICES (the option table accepts 0 to CUBE__NULL_MAX_DEVICES),
 * default 0; a malformed value counts as unset (the entry points report it,
 * base/options.h, and so does device creation). */
static cube_status_t cube__null_devices_wanted(uint32_t* out) {
  uint32_t v = cube__option_u32(CUBE__OPT_NULL_DEVICES);
  *out = v > CUBE__NULL_MAX_DEVICES ? CUBE__NULL_MAX_DEVICES : v;
  return cube__option_status(CUBE__OPT_NULL_DEVICES);
}

/* Required. CUBE_OK when the backend can be used in this process, else
 * UNAVAILABLE with the reason (a real backend dlopens its driver here, once,
 * and reports a missing library, a stub driver or no device). Thread-safe. */
static cube_status_t cube__null_availability(void) { return CUBE_OK; }

/* Required. Devices the backend has (0 when unavailable). Thread-safe. */
static uint32_t cube__null_device_count(void) {
  uint32_t n = 0;
  cube_status_free(cube__null_devices_wanted(&n));
  return n;
}

/* Required. Opens device |index| with the server's resolved |options| and
 * fills its properties (limits the client checks launches against), its
 * features and the backend's info. Called once per device per process run
 * (until cube_shutdown). */
static cube_status_t cube__null_device_create(uint32_t index, const cube_server_options_t* options,
                                              cube__backend_device_t** out_device,
                                              cube_device_properties_t* out_props,
                                              cube_features_t* out_features,
                                              cube_backend_info_t* out_info) {
  /* A backend with parameters takes them from options->backend_params with
   * cube__backend_params_take (backends/params.h); this one has none. */
  if (options && options->backend_params)
    return CUBE_INVALID("null:%u: the null backend takes no backend_params", index);
  uint32_t n;
  CUBE_RETURN_IF_ERROR(cube__null_devices_wanted(&n));
  if (index >= n)
    return cube__status_make(CUBE_STATUS_NOT_FOUND,
                             "null:%u does not exist (%u device%s, CUBE_NULL_DEVICES)", index, n,
                             n == 1 ? "" : "s");
  cube__backend_device_t* d = calloc(1, sizeof(*d));
  if (!d)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "null:%u: no host memory for the device",
                             index);
  d->index = index;
  atomic_init(&d->next_storage_id, 1);
  cube_device_properties_t* p = out_props;
  memset(p, 0, sizeof(*p));
  snprintf(p->name, sizeof(p->name), "null:%u (host memory, no kernels)", index);
  p->id = (cube_device_id_t){CUBE_BACKEND_NULL, index};
  p->memory.total_memory = cube__total_memory();
  p->memory.max_page_size = p->memory.total_memory / 4 / CUBE__NULL_ALIGNMENT * CUBE__NULL_ALIGNMENT;
  p->memory.alignment = CUBE__NULL_ALIGNMENT;
  p->hardware.load_width = 128;
  p->hardware.plane_size_min = 1;
  p->hardware.plane_size_max = 1;
  p->hardware.max_bindings = CUBE_MAX_KERNEL_ARGS;
  p->hardware.max_shared_memory_size = 0;
  for (int i = 0; i < 3; ++i) p->hardware.max_cube_count[i] = 65535;
  p->hardware.max_units_per_cube = 256;
  p->hardware.max_cube_dim[0] = 256;
  p->hardware.max_cube_dim[1] = 256;
  p->hardware.max_cube_dim[2] = 64;
  p->hardware.max_vector_size = 4;
  p->timing_method = CUBE_TIMING_DEVICE; /* event_elapsed */
  p->layout_policy = CUBE_LAYOUT_POLICY_CONTIGUOUS;
  /* Collectives: the staged transport; pinned staging: host_alloc. */
  out_features->bits =
      CUBE_FEATURE_DYNAMIC_COUNT | CUBE_FEATURE_COLLECTIVES | CUBE_FEATURE_PINNED_STAGING;
  memset(out_info, 0, sizeof(*out_info));
  out_info->backend = CUBE_BACKEND_NULL;
  snprintf(out_info->name, sizeof(out_info->name), "null");
  snprintf(out_info->version, sizeof(out_info->version), "cube %s null", CUBE_VERSION_STRING);
  out_info->device_count = n;
  *out_device = d;
  return CUBE_OK;
}

/* Required. Closes a device made by device_create; every stream, storage and
 * event of it was destroyed before. */
static void cube__null_device_destroy(cube__backend_device_t* d) { free(d); }

//===----------------------------------------------------------------------===//
// Storage
//===----------------------------------------------------------------------===//

/* Required. |size| bytes of device memory (the pools above slice it):
 * OUT_OF_MEMORY when the device has no room. Thread-safe. */
static cube_status_t cube__null_alloc(cube__backend_device_t* d, uint64_t size,
                                      cube__storage_t* out) {
  void* p = size <= SIZE_MAX - CUBE__NULL_ALIGNMENT
                ? cube__aligned_calloc(size ? (size_t)size : 1, CUBE__NULL_ALIGNMENT)
                : NULL;
  if (!p)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "null:%u: allocation of %" PRIu64 " bytes failed", d->index, size);
  out->id = atomic_fetch_add_explicit(&d->next_storage_id, 1, memory_order_relaxed);
  out->ptr = p; /* a device address on a real backend; never dereferenced above */
  out->size = size;
  out->backend_data = NULL;
  return CUBE_OK;
}

/* Required. Gives |storage| back. */
static void cube__null_dealloc(cube__backend_device_t* d, const cube__storage_t* storage) {
  (void)d;
  cube__aligned_free(storage->ptr);
}

/* Optional: stream-ordered allocation, used instead of alloc/dealloc when
 * set (CUDA's cuMemAllocAsync). dealloc_on gets the allocating stream. */
static cube_status_t cube__null_alloc_on(cube__backend_device_t* d, void* stream, uint64_t size,
                                         cube__storage_t* out) {
  (void)stream;
  return cube__null_alloc(d, size, out);
}

static void cube__null_dealloc_on(cube__backend_device_t* d, void* stream,
                                  const cube__storage_t* storage) {
  (void)stream;
  cube__null_dealloc(d, storage);
}

/* Optional: pinned host memory for staging (read results, reserve_staging);
 * NULL when there is none. host_dealloc is also called with d == NULL, after
 * device_destroy, for buffers the caller kept past cube_shutdown. */
static cube_status_t cube__null_host_alloc(cube__backend_device_t* d, uint64_t size,
                                           cube__storage_t* out) {
  void* p = size <= SIZE_MAX - CUBE__NULL_ALIGNMENT
                ? cube__aligned_calloc(size ? (size_t)size : 1, CUBE__NULL_ALIGNMENT)
                : NULL;
  if (!p)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "null:%u: pinned allocation of %" PRIu64 " bytes failed", d->index,
                             size);
  out->id = atomic_fetch_add_explicit(&d->next_storage_id, 1, memory_order_relaxed);
  out->ptr = p; /* host memory: the caller reads it */
  out->size = size;
  out->backend_data = NULL;
  return CUBE_OK;
}

static void cube__null_host_dealloc(cube__backend_device_t* d, const cube__storage_t* storage) {
  (void)d;
  cube__aligned_free(storage->ptr);
}

/* Optional: gives memory the driver caches back after a cleanup. */
static void cube__null_trim(cube__backend_device_t* d, void* stream) {
  (void)d;
  (void)stream;
}

//===----------------------------------------------------------------------===//
// Streams and copies
//===----------------------------------------------------------------------===//

/* Optional: per logical stream state (NULL slot: none). */
static cube_status_t cube__null_stream_create(cube__backend_device_t* d, uint64_t stream_id,
                                              void** out_stream) {
  cube__null_stream_t* s = calloc(1, sizeof(*s));
  if (!s)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "null:%u: no host memory for stream %" PRIu64,
                             d->index, stream_id);
  s->id = stream_id;
  *out_stream = s;
  return CUBE_OK;
}

static void cube__null_stream_destroy(cube__backend_device_t* d, void* stream) {
  (void)d;
  free(stream);
}

/* Required. |height| rows of |width| bytes from packed host memory into
 * |dst| at |dst_offset|, rows |pitch| bytes apart, ordered on |stream|. The
 * source may be reused when this returns. */
static cube_status_t cube__null_write(cube__backend_device_t* d, void* stream,
                                      const cube__storage_t* dst, uint64_t dst_offset,
                                      uint64_t pitch, const void* src, uint64_t width,
                                      uint64_t height) {
  (void)stream;
  if (height && (dst_offset > dst->size || (height - 1) * pitch + width > dst->size - dst_offset))
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "null:%u: write of %" PRIu64 " x %" PRIu64 " bytes at %" PRIu64
                             " overruns storage %" PRIu64 " (%" PRIu64 " bytes)",
                             d->index, height, width, dst_offset, dst->id, dst->size);
  for (uint64_t r = 0; r < height; ++r)
    memcpy((char*)dst->ptr + dst_offset + r * pitch, (const char*)src + r * width, (size_t)width);
  return CUBE_OK;
}

/* Required. The reverse: rows of |src| into packed host memory |dst|; the
 * bytes are there when it returns (the server hands them out at once). */
static cube_status_t cube__null_read(cube__backend_device_t* d, void* stream, void* dst,
                                     const cube__storage_t* src, uint64_t src_offset,
                                     uint64_t pitch, uint64_t width, uint64_t height) {
  (void)stream;
  if (height && (src_offset > src->size || (height - 1) * pitch + width > src->size - src_offset))
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "null:%u: read of %" PRIu64 " x %" PRIu64 " bytes at %" PRIu64
                             " overruns storage %" PRIu64 " (%" PRIu64 " bytes)",
                             d->index, height, width, src_offset, src->id, src->size);
  for (uint64_t r = 0; r < height; ++r)
    memcpy((char*)dst + r * width, (const char*)src->ptr + src_offset + r * pitch, (size_t)width);
  return CUBE_OK;
}

/* Optional: |bytes| from |src| at |src_offset| into |dst| at |dst_offset|,
 * both storage of this device, ordered on |stream| (a real backend queues
 * its driver's device-to-device copy and returns). The ranges never overlap
 * (the server refuses that). NULL slot: the wrapper reads the bytes into host
 * memory and writes them back, piece by piece. */
static cube_status_t cube__null_copy(cube__backend_device_t* d, void* stream,
                                     const cube__storage_t* dst, uint64_t dst_offset,
                                     const cube__storage_t* src, uint64_t src_offset,
                                     uint64_t bytes) {
  (void)stream;
  if (src_offset > src->size || bytes > src->size - src_offset || dst_offset > dst->size ||
      bytes > dst->size - dst_offset)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "null:%u: copy of %" PRIu64 " bytes from storage %" PRIu64
                             " (%" PRIu64 " bytes) at %" PRIu64 " to storage %" PRIu64 " (%" PRIu64
                             " bytes) at %" PRIu64 " overruns one of them",
                             d->index, bytes, src->id, src->size, src_offset, dst->id, dst->size,
                             dst_offset);
  if (bytes) memcpy((char*)dst->ptr + dst_offset, (const char*)src->ptr + src_offset, (size_t)bytes);
  return CUBE_OK;
}

/* Optional: waits for everything queued on |stream| (NULL slot: work is done
 * when the slot that queued it returns, as here). */
static cube_status_t cube__null_sync(cube__backend_device_t* d, void* stream) {
  (void)d;
  (void)stream;
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

/* Optional: compiles |kernel| for |mode| ahead of its first launch
 * (cube_client_precompile). A real backend generates the unit of its dialect
 * target, keys it, and compiles it through the kernel cache (memory, then
 * disk, then its compiler; src/kernel/cache.h), storing what it gets in
 * kernel->compiled[backend][mode]. This one generates and keys the unit, so
 * that a dialect error shows here as it would on any backend, and has no
 * compiler to give it to. */
static cube_status_t cube__null_prepare(cube__backend_device_t* d, const cube_kernel_t* kernel,
                                        cube_execution_mode_t mode) {
  (void)d;
  if (kernel->cpu_fn) return CUBE_OK; /* native kernels are the CPU backend's */
  if (!kernel->signature) return CUBE_OK;
  char* text = NULL;
  CUBE_RETURN_IF_ERROR(cube__dialect_generate(cube__backend_null.dialect_target,
                                              kernel->signature, kernel->source, kernel->defines,
                                              kernel->define_count, mode, &text));
  static const char* const modes[3] = {"checked", "validate", "unchecked"};
  const char* parts[] = {"cube", CUBE_VERSION_STRING, "null", modes[mode], text, NULL};
  cube__cache_key_t key = cube__cache_key(parts);
  (void)key; /* cube__cache_memory_get(key), cube__cache_disk_load(key, "<kind>", ...) */
  free(text);
  return CUBE_OK;
}

/* Required. Runs |l| on |stream|: l->args[i] as l->kinds[i] says (a buffer
 * is a storage, the view's offset in it and its length: build the driver's
 * argument from them), over l->count cubes of l->dim units. A failure of
 * the kernel itself is LAUNCH_FAILED; in Validate mode an out-of-bounds
 * access is cube__kernel_bounds_status. */
static cube_status_t cube__null_launch(cube__backend_device_t* d, void* stream,
                                       const cube__launch_t* l) {
  (void)stream;
  return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                           "launch of kernel '%s': the null backend (null:%u) runs no kernels",
                           l->name ? l->name : "?", d->index);
}

//===----------------------------------------------------------------------===//
// Events
//===----------------------------------------------------------------------===//

/* Optional, all or none: a point in |stream|'s work. With events the server
 * orders a buffer used on two streams (event_wait) and keeps it alive until
 * the other stream is done with it (event_done, event_sync). */
static cube_status_t cube__null_event_record(cube__backend_device_t* d, void* stream,
                                             void** out_event) {
  (void)stream;
  cube__null_event_t* e = malloc(sizeof(*e));
  if (!e) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "null:%u: no host memory for an event", d->index);
  e->ns = cube__now_ns();
  *out_event = e;
  return CUBE_OK;
}

static cube_status_t cube__null_event_wait(cube__backend_device_t* d, void* stream, void* event) {
  (void)d;
  (void)stream;
  (void)event;
  return CUBE_OK; /* the recorded work is complete already */
}

static bool cube__null_event_done(cube__backend_device_t* d, void* event) {
  (void)d;
  (void)event;
  return true;
}

static cube_status_t cube__null_event_sync(cube__backend_device_t* d, void* event) {
  (void)d;
  (void)event;
  return CUBE_OK;
}

static void cube__null_event_destroy(cube__backend_device_t* d, void* event) {
  (void)d;
  free(event);
}

/* Optional on its own: device time between two completed events (profiles
 * then report CUBE_TIMING_DEVICE). */
static cube_status_t cube__null_event_elapsed(cube__backend_device_t* d, void* start, void* end,
                                              uint64_t* out_ns) {
  (void)d;
  const cube__null_event_t* a = start;
  const cube__null_event_t* b = end;
  *out_ns = b->ns > a->ns ? b->ns - a->ns : 0;
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Control
//===----------------------------------------------------------------------===//

/* Optional: native handles for code that talks to the device's own API (the
 * NCCL transport asks CUDA for its context and streams). UNIMPLEMENTED for
 * what the backend does not have. */
static cube_status_t cube__null_ctl(cube__backend_device_t* d, void* stream, uint32_t op,
                                    void* arg) {
  (void)stream;
  if (op == CUBE__CTL_NATIVE_ORDINAL) {
    *(uint32_t*)arg = d->index;
    return CUBE_OK;
  }
  return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                           "null:%u has no native handle for control operation %u", d->index, op);
}

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

const cube__backend_vtable_t cube__backend_null = {
    .api_version = CUBE__BACKEND_API_VERSION,
    .backend = CUBE_BACKEND_NULL,
    .name = "null",
    /* Not CUBE__CAP_HOST_MEMORY: the layers above treat its memory as a
     * device's (queued uploads, staged collectives). */
    .caps = 0,
    /* The target whose units prepare generates; a new backend adds its own
     * to src/kernel/dialect.h (prelude + entry emitter) or reuses one. */
    .dialect_target = CUBE__TARGET_CPU,
    /* NULL: "staged" (the parts through host buffers, over read and write). */
    .collective_transports = NULL,
    .availability = cube__null_availability,
    .device_count = cube__null_device_count,
    .device_create = cube__null_device_create,
    .device_destroy = cube__null_device_destroy,
    .alloc = cube__null_alloc,
    .dealloc = cube__null_dealloc,
    .write = cube__null_write,
    .read = cube__null_read,
    .launch = cube__null_launch,
    .host_alloc = cube__null_host_alloc,
    .host_dealloc = cube__null_host_dealloc,
    .stream_create = cube__null_stream_create,
    .stream_destroy = cube__null_stream_destroy,
    .prepare = cube__null_prepare,
    /* Optional, NULL here: the limits only a compiled kernel knows (OpenCL's
     * work-group size, CUDA's threads per block of the function). A backend
     * whose driver reports them fills it, and cube_client_launch compiles on
     * the calling thread to refuse a launch beyond them (backend.h). */
    .kernel_limits = NULL,
    .sync = cube__null_sync,
    .alloc_on = cube__null_alloc_on,
    .dealloc_on = cube__null_dealloc_on,
    .trim = cube__null_trim,
    .event_record = cube__null_event_record,
    .event_wait = cube__null_event_wait,
    .event_done = cube__null_event_done,
    .event_sync = cube__null_event_sync,
    .event_destroy = cube__null_event_destroy,
    .event_elapsed = cube__null_event_elapsed,
    .ctl = cube__null_ctl,
    /* Optional, NULL here: native graphs (all four or none). A backend whose
     * driver records and replays a sequence of launches and copies as one
     * unit (CUDA graphs) fills them; without them the server replays a
     * graph's nodes one by one through launch and write (backend.h). */
    .graph_create = NULL,
    .graph_update = NULL,
    .graph_launch = NULL,
    .graph_destroy = NULL,
    .copy = cube__null_copy,
};
