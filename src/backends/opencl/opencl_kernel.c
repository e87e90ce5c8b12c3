/* The OpenCL backend's kernels and launches.
 *
 * - Kernels: the dialect's OpenCL unit built with clBuildProgram; the program
 *   binary (CL_PROGRAM_BINARIES) is stored in the kernel cache on disk and
 *   loaded with clCreateProgramWithBinary, keyed by runtime version, platform,
 *   device name, driver and OpenCL versions, execution mode and unit text.
 *   Per device, a table maps (kernel object, mode) to its cl_kernel; units
 *   with the same key share one cl_program.
 * - Launch: each buffer argument is passed as (cl_mem, view bytes, view
 *   offset), the OpenCL entry ABI of src/kernel/preludes/opencl.h; a profiled
 *   launch reports CL_PROFILING_COMMAND_START..END.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/opencl/opencl_backend_internal.h"
#include "base/status.h"
#include "cube/cube.h"
#include "kernel/cache.h"
#include "kernel/compile_limit.h"
#include "kernel/dialect.h"
#include "kernel/kernel.h"
#include "platform/platform.h"

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
  char why[160];
  if (!cube__ocl_pocl_binary_sound(data, size, why, sizeof(why))) {
    /* PoCL asserts (aborts the process) on such a binary: never hand it over. */
    free(data);
    char hex[33];
    cube__cache_key_hex(key, hex);
    cube__log_line("cube: kernel cache entry %s.clbin is a torn PoCL binary (%s): discarded, "
                   "the kernel is built from source",
                   hex, why);
    cube__cache_disk_discard(key, "clbin");
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

/* Reads a little-endian integer of |n| bytes at |*at| if it lies within
 * |end|; advances |*at|. */
static bool cube__ocl_take(const unsigned char** at, const unsigned char* end, unsigned n,
                           uint64_t* out) {
  if ((size_t)(end - *at) < n) return false;
  uint64_t v = 0;
  for (unsigned i = 0; i < n; ++i) v |= (uint64_t)(*at)[i] << (8 * i);
  *at += n;
  *out = v;
  return true;
}

bool cube__ocl_pocl_binary_sound(const void* data, size_t size, char* why, size_t why_size) {
  static const char magic[8] = "poclbin";
  const unsigned char* b = data;
  const unsigned char* end = b + size;
  if (size < sizeof(magic) || memcmp(b, magic, sizeof(magic)) != 0) return true; /* not PoCL's */
  const unsigned char* at = b + sizeof(magic);
  uint64_t device_id, version, kernels, flags, roots, scope_bytes;
  if (!cube__ocl_take(&at, end, 8, &device_id) || !cube__ocl_take(&at, end, 4, &version) ||
      !cube__ocl_take(&at, end, 4, &kernels) || !cube__ocl_take(&at, end, 8, &flags) ||
      !cube__ocl_take(&at, end, 4, &roots) || (size_t)(end - at) < 41) {
    snprintf(why, why_size, "header cut short: %zu bytes", size);
    return false;
  }
  at += 41; /* the program's build hash: 40 hex digits and a NUL */
  if ((flags & 2u) && !cube__ocl_take(&at, end, 8, &scope_bytes)) {
    snprintf(why, why_size, "header cut short: %zu bytes", size);
    return false;
  }
  if (kernels == 0) {
    snprintf(why, why_size, "no kernels (format version %" PRIu64 ")", version);
    return false;
  }
  /* PoCL 5 counts only the root files it found (3.1 stores an empty entry
   * for a missing one): none means program.bc was missing. */
  if (roots == 0) {
    snprintf(why, why_size, "no root entries, so no program.bc (format version %" PRIu64 ")",
             version);
    return false;
  }
  for (uint64_t r = 0; r < roots; ++r) {
    uint64_t len;
    if (!cube__ocl_take(&at, end, 8, &len)) {
      snprintf(why, why_size, "root entry %" PRIu64 " of %" PRIu64 " cut short", r, roots);
      return false;
    }
    if (len == 0 || len > (uint64_t)(end - at)) {
      snprintf(why, why_size,
               "root entry %" PRIu64 " of %" PRIu64 " holds %" PRIu64 " bytes of %zu left", r,
               roots, len, (size_t)(end - at));
      return false;
    }
    /* Its files: (u32 path length, path, u32 content length, content)... */
    const unsigned char* f = at;
    const unsigned char* fend = at + len;
    while (f < fend) {
      uint64_t path_len, content_len;
      if (!cube__ocl_take(&f, fend, 4, &path_len) || path_len == 0 ||
          path_len > (uint64_t)(fend - f)) {
        snprintf(why, why_size, "root entry %" PRIu64 ": a file without a name", r);
        return false;
      }
      f += path_len;
      if (!cube__ocl_take(&f, fend, 4, &content_len) || content_len > (uint64_t)(fend - f)) {
        snprintf(why, why_size, "root entry %" PRIu64 ": file '%.*s' is cut short", r,
                 (int)(path_len < 64 ? path_len : 64), (const char*)(f - path_len - 4));
        return false;
      }
      f += content_len;
    }
    at = fend;
  }
  return true;
}

/* The binary of |p| (malloc'd into *out, *out_size), or false. */
static bool cube__ocl_binary_of(const cube__ocl_api_t* cl, cl_program p, unsigned char** out,
                                size_t* out_size) {
  size_t size = 0;
  if (cl->GetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof(size), &size, NULL) != CL_SUCCESS ||
      size == 0)
    return false;
  unsigned char* bin = malloc(size);
  if (!bin) return false;
  if (cl->GetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof(bin), &bin, NULL) != CL_SUCCESS) {
    free(bin);
    return false;
  }
  *out = bin;
  *out_size = size;
  return true;
}

/* A second build of |p|'s source on |device|, for its binary (NULL when it
 * fails). */
static cl_program cube__ocl_rebuild(const cube__ocl_api_t* cl, cl_program p,
                                    cl_device_id device) {
  cl_context ctx = NULL;
  size_t n = 0;
  if (cl->GetProgramInfo(p, CL_PROGRAM_CONTEXT, sizeof(ctx), &ctx, NULL) != CL_SUCCESS ||
      cl->GetProgramInfo(p, CL_PROGRAM_SOURCE, 0, NULL, &n) != CL_SUCCESS || n < 2)
    return NULL;
  char* text = malloc(n);
  if (!text) return NULL;
  cl_program q = NULL;
  cl_int err = CL_SUCCESS;
  if (cl->GetProgramInfo(p, CL_PROGRAM_SOURCE, n, text, NULL) == CL_SUCCESS) {
    const char* t = text;
    q = cl->CreateProgramWithSource(ctx, 1, &t, NULL, &err);
    if (q && cl->BuildProgram(q, 1, &device, "", NULL, NULL) != CL_SUCCESS) {
      cl->ReleaseProgram(q);
      q = NULL;
    }
  }
  free(text);
  return q;
}

/* Stores the binary of |p| in the disk cache (failures ignored: the cache is
 * an optimisation). PoCL packs its own cache directory into the binary, and
 * another process building the same source rewrites that directory (remove,
 * then rename): a binary taken meanwhile lacks a file, and PoCL's loader
 * aborts on it. Such a binary is never stored; the source is built again
 * (PoCL's cache answers) and its binary taken, a few times. */
static void cube__ocl_binary_to_disk(const cube__ocl_api_t* cl, cl_program p,
                                     cl_device_id device, cube__cache_key_t key,
                                     const char* name, const char* identity) {
  char why[160] = "";
  for (int attempt = 0; attempt < 4; ++attempt) {
    cl_program q = attempt == 0 ? p : cube__ocl_rebuild(cl, p, device);
    if (!q) return;
    unsigned char* bin = NULL;
    size_t size = 0;
    bool got = cube__ocl_binary_of(cl, q, &bin, &size);
    if (q != p) cl->ReleaseProgram(q);
    if (!got) return;
    if (cube__ocl_pocl_binary_sound(bin, size, why, sizeof(why))) {
      const cube__cache_meta_t meta = {name, "opencl", identity};
      cube_status_free(cube__cache_disk_store_meta(key, "clbin", &meta, bin, size));
      free(bin);
      return;
    }
    free(bin);
    if (attempt < 3) {
      struct timespec pause = {0, 2000000L << attempt};
      nanosleep(&pause, NULL);
    }
  }
  cube__log_line("cube: kernel '%s': PoCL's program binary stayed torn (%s); not cached", name,
                 why);
}

static void cube__ocl_program_to_disk(cube__backend_device_t* dev, cl_program p,
                                      cube__cache_key_t key, const char* name) {
  char identity[600];
  snprintf(identity, sizeof(identity), "opencl | %s", dev->identity);
  cube__ocl_binary_to_disk(dev->cl, p, dev->device, key, name, identity);
}

/* One clBuildProgram, on a thread of its own under CUBE_COMPILE_TIMEOUT
 * (kernel/compile_limit.h): left behind at the limit, it stores its binary
 * in the disk cache when it ends, so that a later launch finds it. */
typedef struct cube__ocl_build {
  const cube__ocl_api_t* cl;
  cl_program program; /* a reference of the build's own */
  cl_device_id device;
  cl_int err;
  cube__cache_key_t key;
  char name[128];
  char identity[600];
} cube__ocl_build_t;

static void cube__ocl_build_run(void* p) {
  cube__ocl_build_t* b = p;
  b->err = b->cl->BuildProgram(b->program, 1, &b->device, "", NULL, NULL);
}

static void cube__ocl_build_abandon(void* p) {
  cube__ocl_build_t* b = p;
  if (b->err == CL_SUCCESS)
    cube__ocl_binary_to_disk(b->cl, b->program, b->device, b->key, b->name, b->identity);
  b->cl->ReleaseProgram(b->program);
  free(b);
}

/* Builds the unit |text| of kernel |k|: COMPILATION_FAILED with the build
 * log, filtered to the user's file (cube__dialect_log_filter);
 * DEADLINE_EXCEEDED past CUBE_COMPILE_TIMEOUT. */
static cube_status_t cube__ocl_program_from_source(cube__backend_device_t* dev,
                                                  const cube_kernel_t* k, const char* text,
                                                  cube_execution_mode_t mode,
                                                  cube__cache_key_t key, cl_program* out) {
  cl_int err = CL_SUCCESS;
  cl_program p = dev->cl->CreateProgramWithSource(dev->ctx, 1, &text, NULL, &err);
  if (!p)
    return cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                           "kernel '%s': clCreateProgramWithSource on opencl:%u (%s)",
                           k->name, dev->index, dev->name);
  double limit = cube__compile_limit_seconds();
  if (limit > 0) {
    cube__ocl_build_t* b = calloc(1, sizeof(*b));
    if (!b) {
      dev->cl->ReleaseProgram(p);
      return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "kernel '%s': no host memory", k->name);
    }
    b->cl = dev->cl;
    b->program = p;
    dev->cl->RetainProgram(p);
    b->device = dev->device;
    b->key = key;
    snprintf(b->name, sizeof(b->name), "%s", k->name);
    snprintf(b->identity, sizeof(b->identity), "opencl | %s", dev->identity);
    if (!cube__compile_limit_run(cube__ocl_build_run, cube__ocl_build_abandon, b, limit)) {
      dev->cl->ReleaseProgram(p);
      char how[160];
      snprintf(how, sizeof(how), "clBuildProgram on opencl:%u (%s)", dev->index, dev->name);
      return cube__compile_limit_status(
          k->name, how, limit,
          "; the build goes on in the background and stores its binary in the kernel cache");
    }
    err = b->err;
    dev->cl->ReleaseProgram(p); /* the build's reference */
    free(b);
  } else {
    err = dev->cl->BuildProgram(p, 1, &dev->device, "", NULL, NULL);
  }
  if (err != CL_SUCCESS) {
    char* log = cube__ocl_build_log(dev, p);
    /* The user's file only: PoCL names its temporary copy of the unit in
     * "<Spelling=...>" and reports columns of the rewritten entry. */
    char* filtered = log ? cube__dialect_log_filter(log, k->entry, k->source, NULL, 0) : NULL;
    if (filtered) {
      free(log);
      log = filtered;
    }
    char eb[32];
    cube_status_t st = cube__status_make(
        err == CL_BUILD_PROGRAM_FAILURE ? CUBE_STATUS_COMPILATION_FAILED : CUBE_STATUS_INTERNAL,
        "compiling kernel '%s' (%s mode) with clBuildProgram on opencl:%u (%s) failed "
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
    /* A miss: one build of this unit at a time among the processes sharing
     * the cache directory; the others wait and then load its binary. That
     * saves the compiles, and keeps cube's processes from rewriting PoCL's
     * cache under each other (see cube__ocl_binary_to_disk). Without a usable
     * directory there is no lock, and every process builds. */
    cube__cache_lock_t lock = {-1};
    if (!program) {
      cube_status_free(cube__cache_lock(key, &lock));
      if (lock.fd >= 0) {
        t0 = cube__now_ns();
        program = cube__ocl_program_from_disk(dev, key);
      }
    }
    if (program) {
      cube__cache_count_disk_hit(k->name, t0, cube__now_ns() - t0);
    } else {
      char where[32];
      snprintf(where, sizeof(where), "opencl:%u", dev->index);
      cube__compile_watch_t watch;
      cube__compile_watch_begin(&watch, k->name, where);
      st = cube__ocl_program_from_source(dev, k, text, mode, key, &program);
      cube__cache_count_miss(cube__compile_watch_end(&watch, st != CUBE_OK), st != CUBE_OK);
      if (!st) cube__ocl_program_to_disk(dev, program, key, k->name);
    }
    cube__cache_unlock(&lock);
    if (st) goto done;
  }
  cl_int err = CL_SUCCESS;
  kernel = dev->cl->CreateKernel(program, "cube_kernel_entry", &err);
  if (!kernel) {
    st = cube__ocl_error(CUBE_STATUS_INTERNAL, err,
                         "kernel '%s': clCreateKernel(cube_kernel_entry) on opencl:%u (%s)",
                         k->name, dev->index, dev->name);
    dev->cl->ReleaseProgram(program);
    goto done;
  }
  size_t wg = 0;
  if (dev->cl->GetKernelWorkGroupInfo(kernel, dev->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof(wg),
                                      &wg, NULL) != CL_SUCCESS ||
      wg == 0)
    wg = dev->max_work_group;
  cl_ulong local = 0;
  if (dev->cl->GetKernelWorkGroupInfo(kernel, dev->device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof(local),
                                      &local, NULL) != CL_SUCCESS)
    local = 0;
  cube__ocl_entry_t* e = &dev->entries[dev->entry_count++];
  e->kernel_id = k->id;
  e->mode = (uint32_t)mode;
  e->key = key;
  e->program = program;
  e->kernel = kernel;
  e->max_work_group = wg;
  e->local_mem = local;
  *out = *e;
done:
  free(text);
  pthread_mutex_unlock(&dev->lock);
  return st;
}

cube_status_t cube__ocl_prepare(cube__backend_device_t* dev, const cube_kernel_t* k,
                                cube_execution_mode_t mode) {
  /* A native kernel has nothing to compile (its launches are refused). */
  if (!k->source || !k->signature) return CUBE_OK;
  cube__ocl_entry_t e;
  return cube__ocl_entry(dev, k, mode, &e);
}

cube_status_t cube__ocl_kernel_limits(cube__backend_device_t* dev, const cube_kernel_t* k,
                                      cube_execution_mode_t mode, cube__kernel_limits_t* out) {
  memset(out, 0, sizeof(*out));
  if (!k->source || !k->signature) return CUBE_OK; /* refused at launch by name */
  cube__ocl_entry_t e;
  CUBE_RETURN_IF_ERROR(cube__ocl_entry(dev, k, mode, &e));
  out->max_units = e.max_work_group > UINT32_MAX ? UINT32_MAX : (uint32_t)e.max_work_group;
  out->local_memory = e.local_mem;
  out->max_local_memory = dev->local_mem;
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Launch
//===----------------------------------------------------------------------===//

static const uint32_t cube__ocl_zero_bounds[8];

cube_status_t cube__ocl_launch(cube__backend_device_t* dev, void* stream,
                               const cube__launch_t* l) {
  const cube_kernel_t* k = l->kernel;
  const char* name = l->name ? l->name : (k && k->name ? k->name : "?");
  if (!k) return CUBE_INVALID("launch of kernel '%s': no kernel object", name);
  const cube__ocl_api_t* cl = dev->cl;
  cube__ocl_stream_t* s = stream;
  /* Sources of writes that completed go back now, not at the next write,
   * read or sync (a stream may launch for long without either). */
  if (s && s->pending_count) cube__ocl_reap_done(dev, s);
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
                               "[1, %zu] on opencl:%u (%s)",
                               name, dim[0], dim[1], dim[2], "xyz"[i], dim[i], dev->max_item[i],
                               dev->index, dev->name);
  }
  uint64_t units = (uint64_t)dim[0] * dim[1] * dim[2];
  if (units > e.max_work_group)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "launch of kernel '%s': cube dim (%u, %u, %u) has %" PRIu64
                             " units, more than the %zu opencl:%u (%s) runs in a cube of "
                             "this kernel",
                             name, dim[0], dim[1], dim[2], units, e.max_work_group, dev->index,
                             dev->name);
  /* A kernel whose __local arrays exceed the device's local memory must not
   * reach clEnqueueNDRangeKernel: PoCL asserts (aborts the process) there. */
  if (dev->local_mem && e.local_mem > dev->local_mem)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "launch of kernel '%s': it uses %" PRIu64 " bytes of cube-local "
                             "memory, more than the %" PRIu64 " of opencl:%u (%s)",
                             name, e.local_mem, dev->local_mem, dev->index, dev->name);
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
    const cube__launch_arg_t* a = &l->args[i];
    switch (l->kinds[i]) {
      case CUBE_ARG_BUFFER: {
        const cube__storage_t* storage = a->buffer.storage;
        if (!storage)
          return CUBE_INVALID("launch of kernel '%s': argument %u has no storage", name, i);
        cl_mem mem = (cl_mem)storage->backend_data;
        cl_ulong bytes = a->buffer.len, offset = a->buffer.offset;
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

  if (l->mode == CUBE_EXEC_VALIDATE) {
    /* The record is the device's, shared by the queues: a Validate launch
     * reads it back (blocking) before it returns, so no two overlap. */
    err = cl->EnqueueWriteBuffer(s->queue, dev->bounds, CL_FALSE, 0, sizeof(cube__ocl_zero_bounds),
                                 cube__ocl_zero_bounds, 0, NULL, NULL);
    if (err != CL_SUCCESS)
      return cube__ocl_error(CUBE_STATUS_LAUNCH_FAILED, err,
                             "launch of kernel '%s': clearing the bounds record", name);
  }
  cl_event done = NULL;
  err = cl->EnqueueNDRangeKernel(s->queue, e.kernel, 3, NULL, global, local, 0, NULL,
                                 l->device_ns || l->activity ? &done : NULL);
  if (err != CL_SUCCESS)
    return cube__ocl_error(err == CL_OUT_OF_RESOURCES || err == CL_MEM_OBJECT_ALLOCATION_FAILURE
                               ? CUBE_STATUS_OUT_OF_MEMORY
                               : CUBE_STATUS_LAUNCH_FAILED,
                           err,
                           "launch of kernel '%s': clEnqueueNDRangeKernel of (%u, %u, %u) cubes "
                           "of (%u, %u, %u) units on opencl:%u (%s)",
                           name, l->count[0], l->count[1], l->count[2], dim[0], dim[1], dim[2],
                           dev->index, dev->name);
  cl->Flush(s->queue); /* start it now: the runner may not come back to this queue soon */
  cube_status_t st = CUBE_OK;
  if (done && l->activity) {
    /* Read once it completed (activity_take): the launch does not wait. */
    cube__ocl_timed_push(dev, s, done, CUBE__ACTIVITY_KERNEL, name, l->count, 0);
    done = NULL;
  }
  if (done) {
    cl_ulong t0 = 0, t1 = 0;
    cl_int exec = CL_COMPLETE;
    err = cl->WaitForEvents(1, &done);
    cl->GetEventInfo(done, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof(exec), &exec, NULL);
    if (err != CL_SUCCESS || exec < 0) {
      st = cube__ocl_error(CUBE_STATUS_LAUNCH_FAILED, exec < 0 ? exec : err,
                           "launch of kernel '%s' on opencl:%u (%s) failed", name,
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
