/* The readers and writers of struct_size (cube/cube.h, "Struct sizes"), and
 * the table of the public structs that have one. */
#include "base/abi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "cube/cube.h"

//===----------------------------------------------------------------------===//
// The structs
//===----------------------------------------------------------------------===//

/* Every struct below but cube_kernel_desc_t is in its first layout with a
 * struct_size. When a field is appended to one, its old sizeof goes into an
 * `older` array here. */
#define CUBE__STRUCT(var, type) \
  const cube__struct_info_t var = {#type, sizeof(type), NULL, 0}

CUBE__STRUCT(cube__struct_server_options, cube_server_options_t);
/* cube_kernel_desc_t: read_only_args was appended to the first layout (it
 * ended with define_count, 96 bytes on LP64 with its tail padding). */
static const size_t cube__kernel_desc_older[] = {offsetof(cube_kernel_desc_t, read_only_args)};
const cube__struct_info_t cube__struct_kernel_desc = {"cube_kernel_desc_t",
                                                      sizeof(cube_kernel_desc_t),
                                                      cube__kernel_desc_older, 1};
#if UINTPTR_MAX == UINT64_MAX
_Static_assert(offsetof(cube_kernel_desc_t, read_only_args) == 96,
               "the first layout of cube_kernel_desc_t was 96 bytes");
#endif
CUBE__STRUCT(cube__struct_layout_desc, cube_layout_desc_t);
CUBE__STRUCT(cube__struct_memory_report, cube_memory_report_t);
CUBE__STRUCT(cube__struct_profile_summary, cube_profile_summary_t);
CUBE__STRUCT(cube__struct_kernel_cache_stats, cube_kernel_cache_stats_t);
CUBE__STRUCT(cube__struct_cpu_compiler_info, cube_cpu_compiler_info_t);
CUBE__STRUCT(cube__struct_collective_record, cube_collective_record_t);
CUBE__STRUCT(cube__struct_graph_auto_stats, cube_graph_auto_stats_t);
CUBE__STRUCT(cube__struct_dlpack_export, cube_dlpack_export_t);
CUBE__STRUCT(cube__struct_kernel_cache_prune_report, cube_kernel_cache_prune_report_t);
CUBE__STRUCT(cube__struct_execution_stats, cube_execution_stats_t);
CUBE__STRUCT(cube__struct_tune_op_desc, cube_tune_op_desc_t);
CUBE__STRUCT(cube__struct_tune_record, cube_tune_record_t);
CUBE__STRUCT(cube__struct_bundle_info, cube_bundle_info_t);
CUBE__STRUCT(cube__struct_memory_ledger, cube_memory_ledger_t);
CUBE__STRUCT(cube__struct_memory_pools, cube_memory_pools_t);

/* struct_size is the first member of each, so that it can be read before
 * anything else is known about the caller's layout. */
_Static_assert(offsetof(cube_server_options_t, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(cube_kernel_desc_t, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(cube_layout_desc_t, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(cube_memory_report_t, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(cube_kernel_cache_stats_t, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(cube_collective_record_t, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(cube_graph_auto_stats_t, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(cube_kernel_cache_prune_report_t, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(cube_execution_stats_t, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(cube_tune_op_desc_t, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(cube_tune_record_t, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(cube_bundle_info_t, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(cube_memory_ledger_t, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(cube_memory_pools_t, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(cube_device_properties_t, struct_size) == 0, "struct_size first");
_Static_assert(offsetof(cube_backend_info_t, struct_size) == 0, "struct_size first");

//===----------------------------------------------------------------------===//
// Reading input structs
//===----------------------------------------------------------------------===//

static bool cube__struct_known_older(const cube__struct_info_t* info, size_t size) {
  for (size_t i = 0; i < info->older_count; ++i)
    if (info->older[i] == size) return true;
  return false;
}

/* "64" or "64, or an earlier 40, 48" into |buf|. */
static const char* cube__struct_sizes(const cube__struct_info_t* info, char* buf, size_t n) {
  int o = snprintf(buf, n, "%zu", info->size);
  for (size_t i = 0; i < info->older_count && o > 0 && (size_t)o < n; ++i)
    o += snprintf(buf + o, n - (size_t)o, "%s%zu", i ? ", " : ", or an earlier layout's ",
                  info->older[i]);
  return buf;
}

static cube_status_t cube__struct_unknown(const char* fn, const char* field,
                                          const cube__struct_info_t* info, size_t size) {
  char sizes[128];
  return cube__status_make(CUBE_STATUS_UNSUPPORTED,
                           "%s: %s %zu is not a size of %s this library knows (%s; 0 means "
                           "this library's layout)",
                           fn, field, size, info->name,
                           cube__struct_sizes(info, sizes, sizeof(sizes)));
}

cube_status_t cube__struct_read(const char* fn, const char* field, const cube__struct_info_t* info,
                                const void* in, void* out) {
  size_t size = cube__struct_size_of(in);
  if (size == 0 || size == info->size) {
    memcpy(out, in, info->size);
  } else if (size > info->size) {
    const unsigned char* tail = (const unsigned char*)in + info->size;
    for (size_t i = 0; i < size - info->size; ++i)
      if (tail[i])
        return cube__status_make(
            CUBE_STATUS_UNSUPPORTED,
            "%s: %s is %zu, larger than this library's %s (%zu bytes), and byte %zu is not zero "
            "(0x%02x): the struct sets a field this library does not know",
            fn, field, size, info->name, info->size, info->size + i, (unsigned)tail[i]);
    memcpy(out, in, info->size);
  } else if (cube__struct_known_older(info, size)) {
    memcpy(out, in, size); /* the fields after an earlier layout keep their defaults */
  } else {
    return cube__struct_unknown(fn, field, info, size);
  }
  *(size_t*)out = info->size;
  return CUBE_OK;
}

cube_status_t cube__struct_array_read(const char* fn, const char* array,
                                      const cube__struct_info_t* info, const void* in,
                                      size_t count, const void** out, void** out_owned) {
  *out = in;
  *out_owned = NULL;
  if (count == 0 || !in) return CUBE_OK;
  size_t stride = cube__struct_size_of(in);
  if (stride == 0) stride = info->size;
  const unsigned char* base = in;
  char field[96];
  if (stride < info->size && !cube__struct_known_older(info, stride)) {
    snprintf(field, sizeof(field), "%s[0].struct_size", array);
    return cube__struct_unknown(fn, field, info, stride);
  }
  bool as_is = stride == info->size;
  for (size_t i = 1; i < count; ++i) {
    size_t s = cube__struct_size_of(base + i * stride);
    if (s != stride && !(s == 0 && stride == info->size))
      return cube__status_make(CUBE_STATUS_UNSUPPORTED,
                               "%s: %s[%zu].struct_size is %zu but %s[0]'s is %zu: the elements "
                               "of an array of %s have one struct_size",
                               fn, array, i, s, array, cube__struct_size_of(in), info->name);
  }
  if (as_is) return CUBE_OK;
  unsigned char* copy = calloc(count, info->size);
  if (!copy)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory to read %zu %s", fn,
                             count, info->name);
  for (size_t i = 0; i < count; ++i) {
    snprintf(field, sizeof(field), "%s[%zu].struct_size", array, i);
    cube_status_t st = cube__struct_read(fn, field, info, base + i * stride, copy + i * info->size);
    if (st) {
      free(copy);
      return st;
    }
  }
  *out = copy;
  *out_owned = copy;
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Writing output structs
//===----------------------------------------------------------------------===//

cube_status_t cube__struct_write(const char* fn, const char* field,
                                 const cube__struct_info_t* info, void* out, const void* full) {
  size_t size = cube__struct_size_of(out);
  if (size == 0 || size > info->size) size = info->size;
  if (size < sizeof(size_t))
    return CUBE_INVALID("%s: %s %zu is smaller than the struct_size field of %s (%zu bytes); "
                        "set it to sizeof(%s) or 0",
                        fn, field, size, info->name, sizeof(size_t), info->name);
  memcpy(out, full, size);
  *(size_t*)out = size;
  return CUBE_OK;
}
