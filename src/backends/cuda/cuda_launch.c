/* The CUDA backend's launch path: the function from the device's map, the
 * limits checked, the arguments marshalled in the caller's frame (no
 * allocation), cuLaunchKernel on the stream's CUDA stream; events around a
 * profiled launch, the bounds record read back in Validate mode.
 */
#include <inttypes.h>
#include <string.h>

#include "backends/cuda/cuda_backend_internal.h"
#include "base/status.h"
#include "kernel/kernel.h"

cube_status_t cube__cuda_launch_check(cube__backend_device_t* d, const cube__launch_t* l,
                                      cube__cuda_fn_t* out_fn, bool* out_empty) {
  const cube_kernel_t* k = l->kernel;
  const char* name = l->name ? l->name : (k && k->name ? k->name : "?");
  if (!k) return CUBE_INVALID("launch of kernel '%s': no kernel object", name);
  /* The 1-D form where y and z are 1 in both the cube dim and the count. */
  const bool one_d = l->dim.y == 1 && l->dim.z == 1 && l->count[1] == 1 && l->count[2] == 1;
  CUBE_RETURN_IF_ERROR(cube__cuda_function(d, k, l->mode, one_d, out_fn));
  const uint32_t dim[3] = {l->dim.x, l->dim.y, l->dim.z};
  for (int i = 0; i < 3; ++i) {
    if (dim[i] == 0 || dim[i] > d->max_block[i])
      return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                               "launch of kernel '%s': cube dim (%u, %u, %u): %c = %u is outside "
                               "[1, %u]",
                               name, dim[0], dim[1], dim[2], "xyz"[i], dim[i], d->max_block[i]);
    if (l->count[i] > d->max_grid[i])
      return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                               "launch of kernel '%s': cube count %c = %u exceeds the device's %u",
                               name, "xyz"[i], l->count[i], d->max_grid[i]);
  }
  uint64_t units = (uint64_t)dim[0] * dim[1] * dim[2];
  if (units > (uint64_t)out_fn->max_threads)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "launch of kernel '%s': cube dim (%u, %u, %u) has %" PRIu64
                             " units, more than the %d this kernel can run per cube on %s",
                             name, dim[0], dim[1], dim[2], units, out_fn->max_threads, d->arch);
  *out_empty = l->count[0] == 0 || l->count[1] == 0 || l->count[2] == 0;
  if (*out_empty) return CUBE_OK;
  if (l->arg_count > CUBE_MAX_KERNEL_ARGS)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "launch of kernel '%s': %u arguments, more than %u", name,
                             l->arg_count, CUBE_MAX_KERNEL_ARGS);
  return CUBE_OK;
}

void cube__cuda_marshal(const cube__launch_t* l, cube__cuda_params_t* p) {
  p->n = 0;
  for (uint32_t i = 0; i < l->arg_count; ++i) {
    if (l->kinds[i] == CUBE_ARG_BUFFER) {
      p->ptrs[i] = (CUdeviceptr)(uintptr_t)l->args[i].buffer.storage->ptr + l->args[i].buffer.offset;
      p->lens[i] = l->args[i].buffer.len;
      p->params[p->n++] = &p->ptrs[i];
      p->params[p->n++] = &p->lens[i];
    } else {
      p->params[p->n++] = (void*)(uintptr_t)&l->args[i];
    }
  }
}

cube_status_t cube__cuda_launch(cube__backend_device_t* d, void* stream,
                                const cube__launch_t* l) {
  const cube_kernel_t* k = l->kernel;
  const char* name = l->name ? l->name : (k && k->name ? k->name : "?");
  cube__cuda_fn_t f;
  bool empty = false;
  CUBE_RETURN_IF_ERROR(cube__cuda_launch_check(d, l, &f, &empty));
  if (empty) return CUBE_OK;
  const uint32_t dim[3] = {l->dim.x, l->dim.y, l->dim.z};
  CUBE__CUDA_SCOPE(d->ctx);

  /* Marshalling: pointers into this frame, no allocation. */
  cube__cuda_params_t p;
  cube__cuda_marshal(l, &p);
  void** params = p.params;
  uint32_t n = p.n;
  CUstream s = cube__cuda_s(stream);
  CUdeviceptr bounds = d->bounds_dev;
  CUresult r = CUDA_SUCCESS;
  if (l->mode == CUBE_EXEC_VALIDATE) {
    params[n++] = &bounds;
    r = d->cu->MemsetD32Async(bounds, 0, 8, s);
  }
  /* A profiled launch is timed where it runs: events around it. */
  void* ev0 = NULL;
  void* ev1 = NULL;
  if (r == CUDA_SUCCESS && l->device_ns) {
    cube_status_t e = cube__cuda_event_record(d, stream, &ev0);
    if (e) {
      cube_status_free(e);
      ev0 = NULL;
    }
  }
  p.timing = 0;
  params[n++] = &p.timing;
  if (r == CUDA_SUCCESS) {
    cube__cuda_stream_t* cs = stream;
    if (__builtin_expect(cs && cs->act != NULL, 0))
      p.timing = cube__cuda_activity_launched(cs, f.name_hash, name, k ? k->id : 0,
                                              l->trace_order, l->count);
    r = d->cu->LaunchKernel(f.fn, l->count[0], l->count[1], l->count[2], dim[0], dim[1], dim[2], 0,
                            s, params, NULL);
    if (__builtin_expect(cs && cs->act != NULL, 0))
      cube__cuda_activity_submitted(d, cs, r == CUDA_SUCCESS);
  }
  if (ev0) {
    if (r == CUDA_SUCCESS) {
      cube_status_t e = cube__cuda_event_record(d, stream, &ev1);
      uint64_t ns = 0;
      if (!e) e = cube__cuda_event_elapsed(d, ev0, ev1, &ns);
      if (!e) *l->device_ns = ns;
      cube_status_free(e);
    }
    cube__cuda_event_destroy(d, ev0);
    if (ev1) cube__cuda_event_destroy(d, ev1);
  }
  if (r != CUDA_SUCCESS)
    return cube__cuda_error(r, CUBE_STATUS_LAUNCH_FAILED,
                            "launch of kernel '%s' on cuda:%u, cube count (%u, %u, %u), "
                            "cube dim (%u, %u, %u)",
                            name, d->index, l->count[0], l->count[1], l->count[2], dim[0], dim[1],
                            dim[2]);
  if (l->mode == CUBE_EXEC_VALIDATE) {
    r = d->cu->MemcpyDtoHAsync(d->bounds_host, bounds, 32, s);
    if (r == CUDA_SUCCESS) r = cube__cuda_wait(d, s);
    if (r != CUDA_SUCCESS)
      return cube__cuda_error(r, CUBE_STATUS_LAUNCH_FAILED, "launch of kernel '%s' (Validate mode)",
                              name);
    cube_bounds_error_t b;
    memcpy(&b, d->bounds_host, sizeof(b)); /* the prelude's 8 words, the same layout */
    if (b.flag) return cube__kernel_bounds_status(k, name, &b);
  }
  return CUBE_OK;
}

/* The escape hatch: the device's native handles (the NCCL transport takes its
 * context, ordinal, streams and driver entry points here). */
cube_status_t cube__cuda_ctl(cube__backend_device_t* d, void* stream, uint32_t op, void* arg) {
  if (op == CUBE__CTL_DEVICE_LOST) { /* no argument */
    atomic_store(&d->lost, true);
    return CUBE_OK;
  }
  if (op == CUBE__CTL_DEVICE_RESET) return cube__cuda_device_reset(d);
  if (!arg) return CUBE_INVALID("cuda:%u: control operation %u without an argument", d->index, op);
  switch (op) {
    case CUBE__CTL_NATIVE_CONTEXT:
      *(void**)arg = (void*)d->ctx;
      return CUBE_OK;
    case CUBE__CTL_NATIVE_ORDINAL:
      *(uint32_t*)arg = d->index;
      return CUBE_OK;
    case CUBE__CTL_NATIVE_STREAM:
      *(void**)arg = (void*)cube__cuda_s(stream);
      return CUBE_OK;
    case CUBE__CTL_DRIVER_PROC:
      *(cube__backend_proc_fn*)arg = cube__cuda_proc;
      return CUBE_OK;
    case CUBE__CTL_DEVICE_IDENTITY: {
      cube__backend_text_t* t = arg;
      cube__cuda_identity(d, t->buf, t->size);
      return CUBE_OK;
    }
    case CUBE__CTL_MEMORY_INFO: {
      cube__backend_memory_info_t* mi = arg;
      size_t free_b = 0, total_b = 0;
      CUresult r;
      {
        CUBE__CUDA_SCOPE(d->ctx);
        r = d->cu->MemGetInfo(&free_b, &total_b);
      }
      if (r != CUDA_SUCCESS)
        return cube__cuda_error(r, CUBE_STATUS_OK, "cuda:%u: cuMemGetInfo", d->index);
      mi->used = total_b >= free_b ? total_b - free_b : 0;
      mi->total = total_b;
      /* The bounds flag, and the timing slots of self-timed streams. */
      mi->context = d->used_at_open + (d->bounds_dev ? 64u : 0u) +
                    atomic_load_explicit(&d->act_bytes, memory_order_relaxed);
      mi->modules = atomic_load_explicit(&d->module_bytes, memory_order_relaxed);
      return CUBE_OK;
    }
    case CUBE__CTL_MEMORY_GRANULE:
      /* cuMemAlloc and the VMM calls map device memory in 2 MiB pages. */
      *(uint64_t*)arg = 2ull << 20;
      return CUBE_OK;
    case CUBE__CTL_DLPACK_DEVICE:
      ((int32_t*)arg)[0] = 2; /* kDLCUDA */
      ((int32_t*)arg)[1] = (int32_t)d->index;
      ((int32_t*)arg)[2] = 0; /* addresses */
      return CUBE_OK;
    case CUBE__CTL_ORDER_NATIVE_STREAM: {
      /* The consumer's stream waits for an event recorded after the work
       * given to |stream| so far; the event may go at once (the driver keeps
       * the wait's dependency). */
      CUstream consumer = *(CUstream*)arg;
      void* ev = NULL;
      CUBE_RETURN_IF_ERROR(cube__cuda_event_record(d, stream, &ev));
      CUresult r;
      {
        CUBE__CUDA_SCOPE(d->ctx);
        r = d->cu->StreamWaitEvent(consumer, (CUevent)ev, 0);
      }
      cube__cuda_event_destroy(d, ev);
      if (r != CUDA_SUCCESS)
        return cube__cuda_error(r, CUBE_STATUS_INVALID_ARGUMENT,
                                "cuda:%u: making the consumer's stream %p wait for stream %p "
                                "(cuStreamWaitEvent)",
                                d->index, (void*)consumer, (void*)cube__cuda_s(stream));
      return CUBE_OK;
    }
    case CUBE__CTL_EXTERNAL_STORAGE: {
      cube__backend_external_t* x = arg;
      if (x->dl_device_type != 2 /* kDLCUDA */)
        return CUBE_INVALID("cuda:%u takes CUDA device memory (DLPack device type 2), not "
                            "device type %d", d->index, (int)x->dl_device_type);
      if (x->dl_device_id != (int32_t)d->index)
        return CUBE_INVALID("the tensor lives on CUDA device %d, this client's device is cuda:%u",
                            (int)x->dl_device_id, d->index);
      unsigned int type = 0;
      int ordinal = -1;
      CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                      CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
      void* data[2] = {&type, &ordinal};
      CUresult r;
      {
        CUBE__CUDA_SCOPE(d->ctx);
        r = d->cu->PointerGetAttributes(2, attrs, data, (CUdeviceptr)(uintptr_t)x->ptr);
      }
      if (r != CUDA_SUCCESS)
        return cube__cuda_error(r, CUBE_STATUS_INVALID_ARGUMENT,
                                "cuda:%u: the driver does not know address %p "
                                "(cuPointerGetAttributes)", d->index, x->ptr);
      if (type != CU_MEMORYTYPE_DEVICE || ordinal != (int)d->index)
        return CUBE_INVALID("cuda:%u: address %p is not device memory of this device (memory "
                            "type %u, device %d)", d->index, x->ptr, type, ordinal);
      x->storage.ptr = x->ptr;
      x->storage.size = x->size;
      x->storage.backend_data = NULL; /* never deallocated by cube */
      return CUBE_OK;
    }
    default:
      return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                               "cuda:%u: control operation %u is not implemented",
                               d->index, op);
  }
}
