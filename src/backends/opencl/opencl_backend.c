/* The OpenCL backend: every available device of every platform of the
 * OpenCL library (loaded with dlopen, opencl_loader.h), PoCL in CI. This file
 * holds the backend's table of functions; opencl_backend_internal.h lists the
 * files behind it and what they share.
 *
 * - Device (opencl_device.c): one context per device, a command queue per logical stream (in
 *   order, profiling on) and one device queue for staging maps and the
 *   Validate-mode bounds record.
 * - Storage (opencl_device.c): cube's pools over clCreateBuffer pages. A storage's ptr is its
 *   cl_mem (an opaque, never dereferenced value); a launch passes each buffer
 *   argument as (cl_mem, view bytes, view offset) -- the OpenCL entry ABI of
 *   src/kernel/preludes/opencl.h -- so views at any offset work without
 *   sub-buffers (and their base-address alignment rule). Pages are still
 *   aligned to CL_DEVICE_MEM_BASE_ADDR_ALIGN (props.memory.alignment).
 * - Staging: CL_MEM_ALLOC_HOST_PTR buffers mapped once for their lifetime;
 *   a staging buffer keeps the context alive (refcounted) so that it may be
 *   freed after the device is gone (backend.h: host_dealloc with device NULL).
 * - Ordering (opencl_stream.c): commands of one stream are ordered by its in-order queue;
 *   queues are ordered only through the event slots (a marker's cl_event,
 *   waited for by a barrier on the other queue), which the server uses for
 *   a buffer that crosses streams, as on CUDA. The server's writes
 *   (write_held) keep a reference to the bytes that hold their source and
 *   do not wait, whatever their size; plain writes of up to
 *   CUBE__OCL_WRITE_COPY_MAX bytes are copied and do not wait, larger ones
 *   block; reads block (a read's bytes are handed out at once); copies
 *   between two buffers (clEnqueueCopyBuffer) are asynchronous.
 * - Kernels (opencl_kernel.c): the dialect's OpenCL unit built with clBuildProgram; the program
 *   binary (CL_PROGRAM_BINARIES) is stored in the kernel cache on disk and
 *   loaded with clCreateProgramWithBinary, keyed by runtime version, platform,
 *   device name, driver and OpenCL versions, execution mode and unit text.
 *   Per device, a table maps (kernel object, mode) to its cl_kernel; units
 *   with the same key share one cl_program.
 * - Profiling: a profiled launch reports CL_PROFILING_COMMAND_START..END;
 *   event_elapsed is the difference of two markers' CL_PROFILING_COMMAND_END.
 *
 * Threading (backend.h): availability, device_count, device_create, alloc,
 * dealloc, host_alloc, host_dealloc and prepare are thread-safe; launch,
 * write, read, copy and sync run on the device's runner (one at a time).
 */
#include "backends/backend.h"
#include "backends/opencl/opencl_backend_internal.h"

const cube__backend_vtable_t cube__backend_opencl = {
    .api_version = CUBE__BACKEND_API_VERSION,
    .backend = CUBE_BACKEND_OPENCL,
    .name = "opencl",
    .caps = 0,
    .dialect_target = CUBE__TARGET_OPENCL,
    .collective_transports = NULL, /* "staged": the parts through host buffers */
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
    .kernel_limits = cube__ocl_kernel_limits,
    .sync = cube__ocl_sync,
    .copy = cube__ocl_copy,
    .activity_begin = cube__ocl_activity_begin,
    .activity_take = cube__ocl_activity_take,
    .event_record = cube__ocl_event_record,
    .event_wait = cube__ocl_event_wait,
    .event_done = cube__ocl_event_done,
    .event_sync = cube__ocl_event_sync,
    .event_destroy = cube__ocl_event_destroy,
    .event_elapsed = cube__ocl_event_elapsed,
    .ctl = cube__ocl_ctl,
    .write_held = cube__ocl_write_held,
};
