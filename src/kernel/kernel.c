/* Kernel objects and the launch-shape helpers (docs/cubecl.md, "CubeCount and CubeDim helpers"). */
#include "kernel/kernel.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/options.h"
#include "base/status.h"
#include "kernel/dialect.h"

static atomic_uint_least64_t cube__kernel_next_id = 1;

const char* cube_arg_kind_name(cube_arg_kind_t kind) {
  switch (kind) {
    case CUBE_ARG_BUFFER: return "buffer";
    case CUBE_ARG_U32: return "u32";
    case CUBE_ARG_I32: return "i32";
    case CUBE_ARG_U64: return "u64";
    case CUBE_ARG_I64: return "i64";
    case CUBE_ARG_F32: return "f32";
    case CUBE_ARG_F64: return "f64";
  }
  return "unknown";
}

/* Kernels ----------------------------------------------------------------- */

void cube_kernel_desc_initialize(cube_kernel_desc_t* desc) {
  if (!desc) return;
  memset(desc, 0, sizeof(*desc));
  desc->struct_size = sizeof(*desc);
}

/* Bytes of the scalar type |type| (as the dialect's signature reads it:
 * words one space apart), following the kernel's defines a few times
 * ("REAL" with REAL=float); 0 when it is none of the fixed-size scalars of
 * C, OpenCL C and CUDA C (a typedef, a struct, `long`). */
static uint32_t cube__kernel_elem_size(const char* type, const cube_define_t* defines,
                                       uint32_t define_count) {
  static const struct {
    const char* name;
    uint32_t size;
  } k_sizes[] = {
      {"int8_t", 1},   {"uint8_t", 1},   {"char", 1},   {"signed char", 1}, {"unsigned char", 1},
      {"uchar", 1},    {"bool", 1},      {"_Bool", 1},  {"int16_t", 2},     {"uint16_t", 2},
      {"short", 2},    {"unsigned short", 2},           {"ushort", 2},      {"half", 2},
      {"int32_t", 4},  {"uint32_t", 4},  {"int", 4},    {"signed", 4},      {"signed int", 4},
      {"unsigned", 4}, {"unsigned int", 4},             {"uint", 4},        {"float", 4},
      {"int64_t", 8},  {"uint64_t", 8},  {"long long", 8},                  {"long long int", 8},
      {"unsigned long long", 8},         {"unsigned long long int", 8},     {"ulong", 8},
      {"double", 8},
  };
  char t[64];
  for (int depth = 0; type && depth < 8; ++depth) {
    while (*type == ' ' || *type == '\t') ++type;
    size_t n = strlen(type);
    while (n > 0 && (type[n - 1] == ' ' || type[n - 1] == '\t')) --n;
    if (n >= sizeof(t)) return 0;
    memcpy(t, type, n);
    t[n] = '\0';
    for (size_t i = 0; i < sizeof(k_sizes) / sizeof(k_sizes[0]); ++i)
      if (strcmp(t, k_sizes[i].name) == 0) return k_sizes[i].size;
    type = NULL;
    for (uint32_t d = 0; d < define_count && !type; ++d)
      if (defines[d].name && strcmp(defines[d].name, t) == 0) type = defines[d].value;
  }
  return 0;
}

cube_status_t cube_kernel_create(const cube_kernel_desc_t* in_desc, cube_kernel_t** out_kernel) {
  const char* fn = "cube_kernel_create";
  if (!out_kernel) return CUBE_INVALID("%s: out_kernel is NULL", fn);
  if (!in_desc) return CUBE_INVALID("%s: desc is NULL", fn);
  CUBE_RETURN_IF_ERROR(cube__options_check(fn));
  /* The caller's layout (cube/cube.h, "Struct sizes") into this library's. */
  cube_kernel_desc_t read;
  cube_kernel_desc_initialize(&read);
  CUBE_RETURN_IF_ERROR(
      cube__struct_read(fn, "desc->struct_size", &cube__struct_kernel_desc, in_desc, &read));
  const cube_kernel_desc_t* desc = &read;
  if (desc->source && !desc->entry) return CUBE_INVALID("%s: desc->source is set but desc->entry is NULL", fn);
  if (!desc->name && !desc->source) return CUBE_INVALID("%s: desc->name is NULL", fn);
  const char* name = desc->name ? desc->name : desc->entry;
  if (!name[0]) return CUBE_INVALID("%s: desc->name is empty", fn);
  if (!desc->cpu_fn && !desc->source)
    return CUBE_INVALID("%s: kernel '%s': desc->cpu_fn is NULL and there is no desc->source", fn,
                        name);
  if (desc->cpu_fn && desc->source)
    return CUBE_INVALID("%s: kernel '%s': give desc->cpu_fn (native) or desc->source (dialect), "
                        "not both", fn, name);

  cube_dim_t dim = desc->cube_dim;
  if (dim.x == 0 && dim.y == 0 && dim.z == 0) {
    dim.x = dim.y = dim.z = 1;
  } else {
    const uint32_t comp[3] = {dim.x, dim.y, dim.z};
    static const char axis[3] = {'x', 'y', 'z'};
    for (int i = 0; i < 3; ++i)
      if (comp[i] == 0)
        return CUBE_INVALID("%s: kernel '%s': desc->cube_dim.%c is 0 (cube_dim is (%" PRIu32
                            ", %" PRIu32 ", %" PRIu32 "); use {0,0,0} for (1,1,1))",
                            fn, name, axis[i], dim.x, dim.y, dim.z);
    uint64_t units = (uint64_t)dim.x * dim.y;
    if (units > UINT32_MAX || units * dim.z > UINT32_MAX)
      return CUBE_INVALID("%s: kernel '%s': desc->cube_dim (%" PRIu32 ", %" PRIu32 ", %" PRIu32
                          ") has more than %" PRIu32 " units",
                          fn, name, dim.x, dim.y, dim.z, UINT32_MAX);
  }

  cube__signature_t* sig = NULL;
  cube_arg_kind_t kinds[CUBE_MAX_KERNEL_ARGS];
  uint32_t arg_count = desc->arg_count;
  if (desc->source) {
    sig = calloc(1, sizeof(*sig));
    if (!sig) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
    cube_status_t st = cube__dialect_parse(desc->source, desc->entry, sig);
    if (st) {
      free(sig);
      return cube__status_annotate(st, "%s", fn);
    }
    if (desc->arg_kinds || desc->arg_count) {
      /* A declared signature must agree with the source. */
      cube_status_t mismatch = CUBE_OK;
      if (!desc->arg_kinds || desc->arg_count != sig->count) {
        mismatch = CUBE_INVALID("%s: kernel '%s': desc->arg_count is %" PRIu32
                                " but CUBE_KERNEL(%s, ...) in the source has %" PRIu32
                                " parameters",
                                fn, name, desc->arg_count, desc->entry, sig->count);
      } else {
        for (uint32_t i = 0; i < sig->count && !mismatch; ++i)
          if (desc->arg_kinds[i] != sig->params[i].kind)
            mismatch = CUBE_INVALID("%s: kernel '%s': desc->arg_kinds[%" PRIu32 "] is %s but "
                                    "parameter %" PRIu32 " ('%s') of CUBE_KERNEL(%s, ...) is %s",
                                    fn, name, i, cube_arg_kind_name(desc->arg_kinds[i]), i,
                                    sig->params[i].name, desc->entry,
                                    cube_arg_kind_name(sig->params[i].kind));
      }
      if (mismatch) {
        free(sig);
        return mismatch;
      }
    }
    arg_count = sig->count;
    for (uint32_t i = 0; i < sig->count; ++i) kinds[i] = sig->params[i].kind;
    for (uint32_t i = 0; i < desc->define_count; ++i) {
      const char* dn = desc->defines ? desc->defines[i].name : NULL;
      bool ok = dn && (dn[0] == '_' || (dn[0] >= 'A' && dn[0] <= 'Z') || (dn[0] >= 'a' && dn[0] <= 'z'));
      for (const char* c = dn; ok && *c; ++c)
        ok = *c == '_' || (*c >= '0' && *c <= '9') || (*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z');
      const char* dv = desc->defines && desc->defines[i].value ? desc->defines[i].value : "";
      if (ok && (strchr(dv, '\n') || strchr(dv, '\r'))) ok = false;
      if (!ok) {
        free(sig);
        return CUBE_INVALID("%s: kernel '%s': desc->defines[%" PRIu32 "] ('%s') is not a C "
                            "identifier with a one-line value",
                            fn, name, i, dn ? dn : "(null)");
      }
    }
  } else {
    if (desc->arg_count > CUBE_MAX_KERNEL_ARGS)
      return CUBE_INVALID("%s: kernel '%s': desc->arg_count %" PRIu32
                          " exceeds CUBE_MAX_KERNEL_ARGS (%d)",
                          fn, name, desc->arg_count, CUBE_MAX_KERNEL_ARGS);
    if (desc->arg_count > 0 && !desc->arg_kinds)
      return CUBE_INVALID("%s: kernel '%s': desc->arg_kinds is NULL with desc->arg_count %" PRIu32,
                          fn, name, desc->arg_count);
    for (uint32_t i = 0; i < desc->arg_count; ++i)
      if ((unsigned)desc->arg_kinds[i] >= (unsigned)CUBE__ARG_KIND_COUNT)
        return CUBE_INVALID("%s: kernel '%s': desc->arg_kinds[%" PRIu32
                            "] is %d (not a cube_arg_kind_t)",
                            fn, name, i, (int)desc->arg_kinds[i]);
    for (uint32_t i = 0; i < desc->arg_count; ++i) kinds[i] = desc->arg_kinds[i];
  }

  uint64_t written = 0;
  for (uint32_t i = 0; i < arg_count; ++i) {
    uint64_t bit = UINT64_C(1) << i;
    bool is_buffer = kinds[i] == CUBE_ARG_BUFFER;
    if ((desc->read_only_args & bit) && !is_buffer) {
      free(sig);
      return CUBE_INVALID("%s: kernel '%s': desc->read_only_args has bit %" PRIu32
                          " set, but argument %" PRIu32 " is %s, not a buffer",
                          fn, name, i, i, cube_arg_kind_name(kinds[i]));
    }
    bool read_only = (desc->read_only_args & bit) || (sig && sig->params[i].is_const);
    if (is_buffer && !read_only) written |= bit;
  }
  if (arg_count < 64 && (desc->read_only_args >> arg_count) != 0) {
    free(sig);
    return CUBE_INVALID("%s: kernel '%s': desc->read_only_args 0x%" PRIx64
                        " has bits past its %" PRIu32 " arguments",
                        fn, name, desc->read_only_args, arg_count);
  }

  /* 64-byte aligned: the reference count has a cache line of its own. */
  cube_kernel_t* k = cube__aligned_calloc(sizeof(*k), 64);
  size_t name_len = strlen(name);
  char* name_copy = malloc(name_len + 1);
  if (!k || !name_copy) {
    cube__aligned_free(k);
    free(name_copy);
    free(sig);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: kernel '%s': out of host memory", fn,
                             name);
  }
  memcpy(name_copy, name, name_len + 1);
  atomic_init(&k->refs, 1);
  k->id = atomic_fetch_add_explicit(&cube__kernel_next_id, 1, memory_order_relaxed);
  k->name = name_copy;
  k->cube_dim = dim;
  k->arg_count = arg_count;
  for (uint32_t i = 0; i < arg_count; ++i) k->arg_kinds[i] = kinds[i];
  k->written_args = written;
  k->shared_memory_size = desc->shared_memory_size;
  k->cpu_fn = desc->cpu_fn;
  k->signature = sig;
  if (desc->source) {
    k->source = strdup(desc->source);
    k->entry = strdup(desc->entry);
    k->define_count = desc->define_count;
    k->defines = desc->define_count ? calloc(desc->define_count, sizeof(cube_define_t)) : NULL;
    bool ok = k->source && k->entry && (!desc->define_count || k->defines);
    for (uint32_t i = 0; ok && i < desc->define_count; ++i) {
      k->defines[i].name = strdup(desc->defines[i].name);
      k->defines[i].value = strdup(desc->defines[i].value ? desc->defines[i].value : "");
      ok = k->defines[i].name && k->defines[i].value;
    }
    if (!ok) {
      cube_kernel_release(k);
      return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: kernel '%s': out of host memory",
                               fn, name);
    }
    for (uint32_t i = 0; i < sig->count; ++i)
      if (sig->params[i].kind == CUBE_ARG_BUFFER)
        k->elem_size[i] = cube__kernel_elem_size(sig->params[i].type, k->defines, k->define_count);
    /* Sorted by name: the same set in any order is the same kernel. */
    for (uint32_t i = 1; i < k->define_count; ++i)
      for (uint32_t j = i; j > 0 && strcmp(k->defines[j - 1].name, k->defines[j].name) > 0; --j) {
        cube_define_t t = k->defines[j];
        k->defines[j] = k->defines[j - 1];
        k->defines[j - 1] = t;
      }
  }
  *out_kernel = k;
  return CUBE_OK;
}

const char* cube__kernel_param_name(const cube_kernel_t* k, uint32_t i, char buf[16]) {
  if (k && k->signature && i < k->signature->count) return k->signature->params[i].name;
  snprintf(buf, 16, "arg%u", i);
  return buf;
}

cube_kernel_t* cube_kernel_retain(cube_kernel_t* kernel) {
  if (kernel) atomic_fetch_add_explicit(&kernel->refs, 1, memory_order_relaxed);
  return kernel;
}

void cube_kernel_release(cube_kernel_t* kernel) {
  if (!kernel) return;
  if (atomic_fetch_sub_explicit(&kernel->refs, 1, memory_order_acq_rel) != 1) return;
  for (uint32_t i = 0; kernel->defines && i < kernel->define_count; ++i) {
    free((char*)kernel->defines[i].name);
    free((char*)kernel->defines[i].value);
  }
  free(kernel->defines);
  free(kernel->source);
  free(kernel->entry);
  free(kernel->signature);
  free(kernel->name);
  cube__aligned_free(kernel);
}

const char* cube_kernel_name(const cube_kernel_t* kernel) { return kernel ? kernel->name : ""; }

cube_dim_t cube_kernel_cube_dim(const cube_kernel_t* kernel) {
  cube_dim_t none = {0, 0, 0};
  return kernel ? kernel->cube_dim : none;
}

uint32_t cube_kernel_arg_count(const cube_kernel_t* kernel) {
  return kernel ? kernel->arg_count : 0;
}

int cube_kernel_arg_kind(const cube_kernel_t* kernel, uint32_t index) {
  return kernel && index < kernel->arg_count ? (int)kernel->arg_kinds[index] : -1;
}

/* Launch shapes (docs/cubecl.md, "CubeCount and CubeDim helpers") ----------- */

/* CubeCL's CubeCountSelection: x starts at |num_cubes|; while x > max_x,
 * x = ceil(x/2) and y doubles; then the same for y into z. The spreading
 * stops at the first axis that already fits. */
cube_status_t cube_count_select(uint64_t num_cubes, const uint32_t max_count[3],
                                cube_count_t* out_count, bool* out_exact) {
  const char* fn = "cube_count_select";
  if (!max_count) return CUBE_INVALID("%s: max_count is NULL", fn);
  if (!out_count) return CUBE_INVALID("%s: out_count is NULL", fn);
  static const char axis[3] = {'x', 'y', 'z'};
  for (int i = 0; i < 3; ++i)
    if (max_count[i] == 0)
      return CUBE_INVALID("%s: max_count[%d] (%c) is 0", fn, i, axis[i]);

  uint64_t n[3] = {num_cubes, 1, 1};
  bool fits = true;
  for (int i = 0; i < 2 && fits; ++i) {
    if (n[i] <= max_count[i]) break;
    while (n[i] > max_count[i]) {
      if (n[i + 1] > UINT64_MAX / 2) {
        fits = false;
        break;
      }
      n[i] = n[i] / 2 + (n[i] & 1);
      n[i + 1] *= 2;
    }
  }
  if (!fits || n[2] > max_count[2])
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "%s: %" PRIu64 " cubes do not fit under max_count (%" PRIu32
                             ", %" PRIu32 ", %" PRIu32 ")",
                             fn, num_cubes, max_count[0], max_count[1], max_count[2]);
  *out_count = cube_count_static((uint32_t)n[0], (uint32_t)n[1], (uint32_t)n[2]);
  uint64_t xy, xyz;
  bool overflow = __builtin_mul_overflow(n[0], n[1], &xy) || __builtin_mul_overflow(xy, n[2], &xyz);
  if (out_exact) *out_exact = !overflow && xyz == num_cubes;
  return CUBE_OK;
}

/* CubeCL's CubeDim::new: plane = plane_size_max; planes per cube = on a
 * device whose units run on CPU cores (num_cpu_cores > 0 and no streaming
 * multiprocessors: the CPU backend, an OpenCL CPU device) min(cores, units);
 * on a GPU 2^min(3, floor(log2(max(1, units / plane)))). The result is
 * (plane, max(1, min(max_units_per_cube / plane, planes)), 1). */
cube_dim_t cube_dim_for_units(const cube_device_properties_t* props, uint64_t working_units) {
  cube_dim_t one = {1, 1, 1};
  /* Props a program built itself, in an older layout that lacks the
   * hardware fields, read as none. */
  const size_t needs = offsetof(cube_device_properties_t, hardware) + sizeof(props->hardware);
  if (!props || (props->struct_size && props->struct_size < needs)) return one;
  uint64_t plane = props->hardware.plane_size_max ? props->hardware.plane_size_max : 1;
  uint64_t planes;
  if (props->hardware.num_cpu_cores > 0 && props->hardware.num_streaming_multiprocessors == 0) {
    uint64_t cores = props->hardware.num_cpu_cores ? props->hardware.num_cpu_cores : 1;
    planes = working_units < cores ? working_units : cores;
  } else {
    uint64_t max_planes = working_units / plane;
    if (max_planes < 1) max_planes = 1;
    uint32_t log2 = 63u - (uint32_t)__builtin_clzll(max_planes);
    planes = UINT64_C(1) << (log2 < 3 ? log2 : 3);
  }
  uint64_t limit = props->hardware.max_units_per_cube / plane;
  uint64_t y = planes < limit ? planes : limit;
  if (y < 1) y = 1;
  if (y > UINT32_MAX) y = UINT32_MAX;
  cube_dim_t dim = {(uint32_t)plane, (uint32_t)y, 1};
  return dim;
}

cube_status_t cube__kernel_bounds_status(const cube_kernel_t* k, const char* name,
                                         const cube_bounds_error_t* b) {
  char nb[16];
  return cube__status_make(CUBE_STATUS_LAUNCH_FAILED,
                           "launch of kernel '%s' (Validate mode): out-of-bounds %s of argument "
                           "%u ('%s', %llu elements) at index %llu",
                           name, b->is_write ? "write" : "read", b->arg,
                           cube__kernel_param_name(k, b->arg, nb), (unsigned long long)b->len,
                           (unsigned long long)b->index);
}
