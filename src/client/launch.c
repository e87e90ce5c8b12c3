/* The client API: launches (checked against the kernel's signature and the
 * device's limits here, queued by the server) and precompilation. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "client/client_internal.h"
#include "client/policy.h"
#include "kernel/dialect.h"
#include "kernel/kernel.h"
#include "platform/platform.h"

//===----------------------------------------------------------------------===//
// Launch
//===----------------------------------------------------------------------===//

/* The launch: checks, then queued. Under an execution override |o| (whose
 * cache outcome record |rec| is open on this thread), the kernel is compiled
 * and counted after the checks, and queued only under CUBE_EXECUTION_RUN. */
static cube_status_t cube__launch_body(const char* fn, cube_client_t* c, cube_kernel_t* kernel,
                                       cube_count_t count, size_t arg_count,
                                       const cube_arg_t* args, cube_execution_mode_t mode,
                                       cube_execution_override_t* o, cube__cache_outcome_t* rec) {
  if (!kernel) return CUBE_INVALID("%s: kernel is NULL", fn);
  const cube__server_t* s = c->server;
  if ((unsigned)mode > CUBE_EXEC_UNCHECKED)
    return CUBE_INVALID("%s: kernel '%s': execution mode %d is invalid", fn, kernel->name,
                        (int)mode);
  if (arg_count != kernel->arg_count)
    return CUBE_INVALID("%s: kernel '%s' takes %u argument%s, got %zu", fn, kernel->name,
                        kernel->arg_count, kernel->arg_count == 1 ? "" : "s", arg_count);
  if (arg_count && !args) return CUBE_INVALID("%s: kernel '%s': args is NULL", fn, kernel->name);
  if (!kernel->cpu_fn && !kernel->source)
    return cube__status_make(CUBE_STATUS_UNIMPLEMENTED, "%s: kernel '%s' has no code", fn,
                             kernel->name);
  if (kernel->cpu_fn && !(s->features.bits & CUBE_FEATURE_NATIVE_KERNELS))
    return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                             "%s: kernel '%s' is a native CPU function; %s runs dialect kernels",
                             fn, kernel->name, s->props.name);
  const cube_dim_t d = kernel->cube_dim;
  const uint32_t* maxd = s->props.hardware.max_cube_dim;
  uint64_t units = (uint64_t)d.x * d.y * d.z;
  if (d.x > maxd[0] || d.y > maxd[1] || d.z > maxd[2] ||
      units > s->props.hardware.max_units_per_cube)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "%s: kernel '%s': cube dim (%u, %u, %u) = %" PRIu64
                             " units exceeds %s's limits (max dim (%u, %u, %u), %u units)",
                             fn, kernel->name, d.x, d.y, d.z, units, s->props.name, maxd[0],
                             maxd[1], maxd[2], s->props.hardware.max_units_per_cube);
  /* A native kernel's cube-local scratch is known from its descriptor: the
   * same limit as the backend's, here rather than at the next sync. */
  if (kernel->cpu_fn && kernel->shared_memory_size > s->props.hardware.max_shared_memory_size) {
    char a[32], b[32];
    return cube__status_make(
        CUBE_STATUS_OUT_OF_RANGE,
        "%s: kernel '%s': shared_memory_size %" PRIu64 " (%s) exceeds the %s of cube-local "
        "memory a cube has on %s",
        fn, kernel->name, kernel->shared_memory_size,
        cube__format_bytes(kernel->shared_memory_size, a, sizeof(a)),
        cube__format_bytes(s->props.hardware.max_shared_memory_size, b, sizeof(b)),
        s->props.name);
  }
  uint32_t xyz[3] = {0, 0, 0};
  cube__memory_t* dyn_mem = NULL;
  uint64_t dyn_offset = 0;
  if (count.kind == CUBE_COUNT_STATIC) {
    xyz[0] = count.x;
    xyz[1] = count.y;
    xyz[2] = count.z;
    for (int i = 0; i < 3; ++i)
      if (xyz[i] > s->props.hardware.max_cube_count[i])
        return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                                 "%s: kernel '%s': cube count %c = %u exceeds %s's maximum %u", fn,
                                 kernel->name, "xyz"[i], xyz[i], s->props.name,
                                 s->props.hardware.max_cube_count[i]);
    /* An empty count (a zero component) runs nothing, after the arguments
     * were checked like any launch's (found by fuzz_client). */
  } else if (count.kind == CUBE_COUNT_DYNAMIC) {
    cube__handle_info_t info;
    CUBE_RETURN_IF_ERROR(cube__client_handle_f(c, count.handle, &info,
                                               "%s: kernel '%s': dynamic count handle", fn,
                                               kernel->name));
    if (cube__handle_view_size(&info) < 12)
      return CUBE_INVALID("%s: kernel '%s': the dynamic count handle views %" PRIu64
                          " bytes, it needs 12 (three u32)",
                          fn, kernel->name, cube__handle_view_size(&info));
    dyn_mem = info.mem;
    dyn_offset = info.offset_start;
  } else {
    return CUBE_INVALID("%s: kernel '%s': count kind %d is invalid", fn, kernel->name,
                        (int)count.kind);
  }
  cube__task_arg_t targs[CUBE_MAX_KERNEL_ARGS];
  for (size_t i = 0; i < arg_count; ++i) {
    cube_arg_kind_t want = kernel->arg_kinds[i];
    if (args[i].kind != want)
      return CUBE_INVALID("%s: kernel '%s': argument %zu is %s, expected %s", fn, kernel->name, i,
                          cube_arg_kind_name(args[i].kind), cube_arg_kind_name(want));
    memset(&targs[i], 0, sizeof(targs[i]));
    switch (want) {
      case CUBE_ARG_BUFFER: {
        cube__handle_info_t info;
        CUBE_RETURN_IF_ERROR(cube__client_handle_f(c, args[i].v.buffer, &info,
                                                   "%s: kernel '%s': argument %zu", fn,
                                                   kernel->name, i));
        targs[i].mem = info.mem;
        targs[i].value.buffer.offset = info.offset_start;
        targs[i].value.buffer.len = cube__handle_view_size(&info);
        /* A view smaller than one element of the declared type would have
         * no element at all in the kernel (its length rounds down to 0). */
        uint32_t es = kernel->elem_size[i];
        if (es && targs[i].value.buffer.len < es) {
          const cube__param_t* p = &kernel->signature->params[i];
          return CUBE_INVALID("%s: kernel '%s': argument %zu ('%s', CUBE_ARRAY(%s%s)) views "
                              "%" PRIu64 " byte%s, less than one element of %u bytes",
                              fn, kernel->name, i, p->name, p->is_const ? "const " : "", p->type,
                              targs[i].value.buffer.len,
                              targs[i].value.buffer.len == 1 ? "" : "s", es);
        }
        break;
      }
      case CUBE_ARG_U32: targs[i].value.u32 = args[i].v.u32; break;
      case CUBE_ARG_I32: targs[i].value.i32 = args[i].v.i32; break;
      case CUBE_ARG_U64: targs[i].value.u64 = args[i].v.u64; break;
      case CUBE_ARG_I64: targs[i].value.i64 = args[i].v.i64; break;
      case CUBE_ARG_F32: targs[i].value.f32 = args[i].v.f32; break;
      case CUBE_ARG_F64: targs[i].value.f64 = args[i].v.f64; break;
      default:
        return CUBE_INVALID("%s: kernel '%s': argument %zu has kind %d", fn, kernel->name, i,
                            (int)want);
    }
  }
  if (count.kind == CUBE_COUNT_STATIC && (!xyz[0] || !xyz[1] || !xyz[2]) && !o) return CUBE_OK;
  /* Under an override the kernel is compiled here, on this thread, and
   * counted (client/policy.h); a compile error is this call's status. */
  if (o && kernel->source) CUBE_RETURN_IF_ERROR(cube__override_compile(o, c, kernel, mode, rec));
  if (kernel->source && cube__server_has_kernel_limits(s)) {
    /* What only the compiled kernel knows (OpenCL's work-group size and
     * local memory, CUDA's threads per block of the function): compiled now
     * if it is not yet, so that this call, not a later sync, refuses it. */
    cube__kernel_limits_t lim;
    cube_status_t st = cube__server_kernel_limits(c->server, kernel, mode, &lim);
    if (st) return cube__status_annotate(st, "%s", fn);
    if (lim.max_units && units > lim.max_units)
      return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                               "%s: kernel '%s': cube dim (%u, %u, %u) = %" PRIu64
                               " units exceeds the %u units this kernel runs in a cube on %s "
                               "(as compiled; the device allows %u)",
                               fn, kernel->name, d.x, d.y, d.z, units, lim.max_units,
                               s->props.name, s->props.hardware.max_units_per_cube);
    if (lim.max_local_memory && lim.local_memory > lim.max_local_memory) {
      char a[32], b[32];
      return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                               "%s: kernel '%s' uses %s of cube-local memory (CUBE_SHARED), more "
                               "than the %s a cube has on %s",
                               fn, kernel->name, cube__format_bytes(lim.local_memory, a, sizeof(a)),
                               cube__format_bytes(lim.max_local_memory, b, sizeof(b)),
                               s->props.name);
    }
  }
  if (o) {
    if (cube__override_skips_work(o)) {
      cube__override_count(o, CUBE__EXEC_LAUNCH_SKIPPED);
      return CUBE_OK;
    }
    if (count.kind == CUBE_COUNT_STATIC && (!xyz[0] || !xyz[1] || !xyz[2])) return CUBE_OK;
  }
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &stream));
  /* All checked: the queued record takes the binding references. */
  if (cube__stream_capturing(stream))
    return cube__graph_record_launch(stream, kernel, xyz, dyn_mem, dyn_offset, mode,
                                     (uint32_t)arg_count, targs);
  cube_status_t st =
      cube__stream_auto(stream)
          ? cube__auto_launch(stream, kernel, xyz, dyn_mem, dyn_offset, mode, (uint32_t)arg_count,
                              targs)
          : cube__server_launch(stream, kernel, xyz, dyn_mem, dyn_offset, mode,
                                (uint32_t)arg_count, targs);
  return st ? cube__queue_name_refusal(st, fn) : CUBE_OK; /* e.g. from a log callback */
}

static cube_status_t cube__launch(const char* fn, cube_client_t* c, cube_kernel_t* kernel,
                                  cube_count_t count, size_t arg_count, const cube_arg_t* args,
                                  cube_execution_mode_t mode) {
  CUBE__CHECK_CLIENT(c, fn);
  cube_execution_override_t* o = cube__client_override(c);
  if (!o) return cube__launch_body(fn, c, kernel, count, arg_count, args, mode, NULL, NULL);
  /* Under an override: what the kernel cache does for this launch's compile
   * (here, or in the kernel-limits check) is counted. */
  cube__cache_outcome_t rec;
  cube__cache_outcome_begin(&rec);
  cube_status_t st = cube__launch_body(fn, c, kernel, count, arg_count, args, mode, o, &rec);
  cube__cache_outcome_end();
  return st;
}

cube_status_t cube__client_launch_direct(cube_client_t* c, cube_kernel_t* kernel,
                                         cube_count_t count, size_t arg_count,
                                         const cube_arg_t* args, cube_execution_mode_t mode) {
  const char* fn = "cube_tune_op_launch";
  CUBE__CHECK_CLIENT(c, fn);
  return cube__launch_body(fn, c, kernel, count, arg_count, args, mode, NULL, NULL);
}

cube_status_t cube_client_precompile(cube_client_t* c, size_t count, cube_kernel_t* const* kernels,
                                     cube_execution_mode_t mode) {
  const char* fn = "cube_client_precompile";
  CUBE__CHECK_CLIENT(c, fn);
  if (count && !kernels) return CUBE_INVALID("%s: kernels is NULL", fn);
  if ((unsigned)mode > CUBE_EXEC_UNCHECKED)
    return CUBE_INVALID("%s: execution mode %d is invalid", fn, (int)mode);
  for (size_t i = 0; i < count; ++i) {
    if (!kernels[i]) return CUBE_INVALID("%s: kernels[%zu] is NULL", fn, i);
    cube_status_t st = cube__server_prepare(c->server, kernels[i], mode);
    if (st) return cube__status_annotate(st, "%s: kernels[%zu]", fn, i);
  }
  return CUBE_OK;
}

/* The deprecated spelling (cube/client.h). */
cube_status_t cube_kernel_precompile(cube_client_t* c, size_t count, cube_kernel_t* const* kernels,
                                     cube_execution_mode_t mode) {
  return cube_client_precompile(c, count, kernels, mode);
}

cube_status_t cube_client_launch_mode(cube_client_t* c, cube_kernel_t* kernel, cube_count_t count,
                                      size_t arg_count, const cube_arg_t* args,
                                      cube_execution_mode_t mode) {
  return cube__launch("cube_client_launch_mode", c, kernel, count, arg_count, args, mode);
}

cube_status_t cube_client_launch(cube_client_t* c, cube_kernel_t* kernel, cube_count_t count,
                                 size_t arg_count, const cube_arg_t* args) {
  return cube__launch("cube_client_launch", c, kernel, count, arg_count, args, CUBE_EXEC_CHECKED);
}

cube_status_t cube_client_launch_unchecked(cube_client_t* c, cube_kernel_t* kernel,
                                           cube_count_t count, size_t arg_count,
                                           const cube_arg_t* args) {
  CUBE__CHECK_CLIENT(c, "cube_client_launch_unchecked");
  cube_execution_mode_t mode = CUBE_EXEC_UNCHECKED;
  if (c->server->options.check_mode == CUBE_CHECK_ENFORCE) mode = CUBE_EXEC_CHECKED;
  if (c->server->options.check_mode == CUBE_CHECK_VALIDATE) mode = CUBE_EXEC_VALIDATE;
  return cube__launch("cube_client_launch_unchecked", c, kernel, count, arg_count, args, mode);
}
