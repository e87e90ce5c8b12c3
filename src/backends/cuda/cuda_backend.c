/* The CUDA backend: every GPU the driver reports, one client each. This file
 * holds the backend's table of functions; cuda_backend_internal.h lists the
 * files behind it and what they share.
 *
 * - Driver and NVRTC through dlopen (cuda_api.c); no driver -> UNAVAILABLE.
 * - Devices (cuda_device.c): one primary context per GPU, retained for the
 *   life of the process (pinned read results may outlive cube_shutdown; they
 *   belong to that context).
 * - Storage (cuda_memory.c): stream-ordered cuMemAllocAsync/cuMemFreeAsync on
 *   the allocating stream's CUDA stream (plain cuMemAlloc where memory pools
 *   are not supported), under cube's pools. Pinned staging: cuMemHostAlloc.
 * - Copies (cuda_staging.c) between device memory and ordinary host memory go
 *   through a device-wide ring of pinned chunks (CUBE__CUDA_CHUNK each): the
 *   host copy of one chunk overlaps the DMA of the others, and large
 *   transfers are split over the process's worker pool so that several
 *   threads do the host copies. A chunk is reused once the event recorded
 *   after its DMA has completed. A copy between two device buffers is one
 *   cuMemcpyDtoDAsync on the stream.
 * - Kernels (cuda_kernel.c): the dialect's CUDA unit compiled by NVRTC to a
 *   cubin for the device's architecture (sm_90 on an H200), through the
 *   kernel cache (memory and disk, kind "cubin"); the module is loaded once
 *   per device and the function found through a per-device map keyed by
 *   (kernel id, mode). Launches: cuda_launch.c.
 *
 * Threading: every entry sets the device's context current on the calling
 * thread first. The ring and the function map have their own locks; the rest
 * of the device is read-only after device_create. Writes into fresh buffers run
 * on the caller's thread (CUBE__CAP_CALLER_WRITES) on the stream's CUDA
 * stream, ordered after what the runner put there before.
 */
#include "backends/backend.h"
#include "backends/cuda/cuda_backend_internal.h"

/* NCCL when it loads, else the parts through host buffers. */
static const char* const cube__cuda_transports[] = {"nccl", "staged", NULL};

const cube__backend_vtable_t cube__backend_cuda = {
    .api_version = CUBE__BACKEND_API_VERSION,
    .backend = CUBE_BACKEND_CUDA,
    .name = "cuda",
    .caps = CUBE__CAP_CALLER_WRITES | CUBE__CAP_GLOBAL_IDS_MULTIPROCESS,
    .dialect_target = CUBE__TARGET_CUDA,
    .collective_transports = cube__cuda_transports,
    .availability = cube__cuda_availability,
    .device_count = cube__cuda_device_count,
    .device_create = cube__cuda_device_create,
    .device_destroy = cube__cuda_device_destroy,
    .alloc = cube__cuda_alloc,
    .dealloc = cube__cuda_dealloc,
    .host_alloc = cube__cuda_host_alloc,
    .host_dealloc = cube__cuda_host_dealloc,
    .stream_create = cube__cuda_stream_create,
    .stream_destroy = cube__cuda_stream_destroy,
    .write = cube__cuda_write,
    .read = cube__cuda_read,
    .launch = cube__cuda_launch,
    .prepare = cube__cuda_prepare,
    .kernel_limits = cube__cuda_kernel_limits,
    .sync = cube__cuda_sync,
    .alloc_on = cube__cuda_alloc_on,
    .dealloc_on = cube__cuda_dealloc_on,
    .trim = cube__cuda_trim,
    .event_record = cube__cuda_event_record,
    .event_wait = cube__cuda_event_wait,
    .event_done = cube__cuda_event_done,
    .event_sync = cube__cuda_event_sync,
    .event_destroy = cube__cuda_event_destroy,
    .event_elapsed = cube__cuda_event_elapsed,
    .ctl = cube__cuda_ctl,
    .graph_create = cube__cuda_graph_create,
    .graph_update = cube__cuda_graph_update,
    .graph_launch = cube__cuda_graph_launch,
    .graph_destroy = cube__cuda_graph_destroy,
    .copy = cube__cuda_device_copy,
    .activity_begin = cube__cuda_activity_begin,
    .activity_take = cube__cuda_activity_take,
};
