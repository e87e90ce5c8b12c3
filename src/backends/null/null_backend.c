/* The null backend: no devices, and every operation UNIMPLEMENTED.
 *
 * It is the template for a new backend. To add one:
 *  1. copy this folder to src/backends/<name>/ and rename the functions;
 *  2. define struct cube__backend_device with the device's state;
 *  3. fill the entries one by one (availability first: return
 *     CUBE_STATUS_UNAVAILABLE with the reason when the driver is absent);
 *  4. add the table to src/backends/registry.c and the module folder to
 *     CUBE_MODULES in CMakeLists.txt.
 * Each entry below says what the real one must do; backend.h is the
 * contract.
 */
#include "backends/backend.h"
#include "base/status.h"

#define CUBE__NULL_UNIMPLEMENTED(op) \
  cube__status_make(CUBE_STATUS_UNIMPLEMENTED, "null backend: %s is not implemented", op)

/* CUBE_OK when the backend can be used, else UNAVAILABLE and why. */
static cube_status_t cube__null_availability(void) { return CUBE_OK; }

/* Devices the backend has (0 when unavailable). */
static uint32_t cube__null_device_count(void) { return 0; }

/* Opens device |index|; fills its properties, features and info. */
static cube_status_t cube__null_device_create(uint32_t index, const cube_server_options_t* options,
                                              cube__backend_device_t** out_device,
                                              cube_device_properties_t* out_props,
                                              cube_features_t* out_features,
                                              cube_backend_info_t* out_info) {
  (void)index;
  (void)options;
  (void)out_device;
  (void)out_props;
  (void)out_features;
  (void)out_info;
  return CUBE__NULL_UNIMPLEMENTED("device_create");
}

/* Closes a device made by device_create. */
static void cube__null_device_destroy(cube__backend_device_t* device) { (void)device; }

/* Device storage of |size| bytes (OUT_OF_MEMORY when the device is full). */
static cube_status_t cube__null_alloc(cube__backend_device_t* device, uint64_t size,
                                      cube__storage_t* out) {
  (void)device;
  (void)size;
  (void)out;
  return CUBE__NULL_UNIMPLEMENTED("alloc");
}

static void cube__null_dealloc(cube__backend_device_t* device, const cube__storage_t* storage) {
  (void)device;
  (void)storage;
}

/* Pinned host staging memory (set the entry to NULL when there is none). */
static cube_status_t cube__null_host_alloc(cube__backend_device_t* device, uint64_t size,
                                           cube__storage_t* out) {
  (void)device;
  (void)size;
  (void)out;
  return CUBE__NULL_UNIMPLEMENTED("host_alloc");
}

static void cube__null_host_dealloc(cube__backend_device_t* device,
                                    const cube__storage_t* storage) {
  (void)device;
  (void)storage;
}

/* Per-stream state (a device stream, a command queue). */
static cube_status_t cube__null_stream_create(cube__backend_device_t* device, uint64_t stream_id,
                                              void** out_stream) {
  (void)device;
  (void)stream_id;
  (void)out_stream;
  return CUBE__NULL_UNIMPLEMENTED("stream_create");
}

static void cube__null_stream_destroy(cube__backend_device_t* device, void* stream) {
  (void)device;
  (void)stream;
}

/* Host -> device rows, ordered on |stream|. */
static cube_status_t cube__null_write(cube__backend_device_t* device, void* stream,
                                      const cube__storage_t* dst, uint64_t dst_offset,
                                      uint64_t pitch, const void* src, uint64_t width,
                                      uint64_t height) {
  (void)device;
  (void)stream;
  (void)dst;
  (void)dst_offset;
  (void)pitch;
  (void)src;
  (void)width;
  (void)height;
  return CUBE__NULL_UNIMPLEMENTED("write");
}

/* Device -> host rows, ordered on |stream|. */
static cube_status_t cube__null_read(cube__backend_device_t* device, void* stream, void* dst,
                                     const cube__storage_t* src, uint64_t src_offset,
                                     uint64_t pitch, uint64_t width, uint64_t height) {
  (void)device;
  (void)stream;
  (void)dst;
  (void)src;
  (void)src_offset;
  (void)pitch;
  (void)width;
  (void)height;
  return CUBE__NULL_UNIMPLEMENTED("read");
}

/* Runs a kernel (compiling it on first use). */
static cube_status_t cube__null_launch(cube__backend_device_t* device, void* stream,
                                       const cube__launch_t* launch) {
  (void)device;
  (void)stream;
  (void)launch;
  return CUBE__NULL_UNIMPLEMENTED("launch");
}

/* Waits for everything queued on |stream|. */
static cube_status_t cube__null_sync(cube__backend_device_t* device, void* stream) {
  (void)device;
  (void)stream;
  return CUBE__NULL_UNIMPLEMENTED("sync");
}

const cube__backend_vtable_t cube__backend_null = {
    .backend = CUBE_BACKEND_NULL,
    .name = "null",
    .flags = 0,
    .availability = cube__null_availability,
    .device_count = cube__null_device_count,
    .device_create = cube__null_device_create,
    .device_destroy = cube__null_device_destroy,
    .alloc = cube__null_alloc,
    .dealloc = cube__null_dealloc,
    .host_alloc = cube__null_host_alloc,
    .host_dealloc = cube__null_host_dealloc,
    .stream_create = cube__null_stream_create,
    .stream_destroy = cube__null_stream_destroy,
    .write = cube__null_write,
    .read = cube__null_read,
    .launch = cube__null_launch,
    .sync = cube__null_sync,
};
