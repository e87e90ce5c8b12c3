/* What the library keeps private about the shape of its public API:
 *  - the extents of the public enumerations (they have no public _COUNT:
 *    a count in a header would change with every value added, and a program
 *    built against one header would carry the wrong one), and
 *  - the readers and writers of the struct_size of the public options,
 *    descriptor and report structs (cube/cube.h, "Struct sizes").
 */
#ifndef CUBE_BASE_ABI_H_
#define CUBE_BASE_ABI_H_

#include <stddef.h>

#include "cube/collective.h"
#include "cube/device.h"
#include "cube/kernel.h"
#include "cube/status.h"

//===----------------------------------------------------------------------===//
// Extents of the public enumerations
//===----------------------------------------------------------------------===//

/* One past the last value of each. A value added to a public enumeration
 * moves its extent here (the tables sized by these check it where they are
 * defined). */
#define CUBE__BACKEND_COUNT ((int)CUBE_BACKEND_NULL + 1)
#define CUBE__STATUS_CODE_COUNT ((int)CUBE_STATUS_PEER_LOST + 1)
#define CUBE__ARG_KIND_COUNT ((int)CUBE_ARG_F64 + 1)
#define CUBE__DTYPE_COUNT ((int)CUBE_DTYPE_F64 + 1)
#define CUBE__REDUCE_OP_COUNT ((int)CUBE_REDUCE_PROD + 1)

//===----------------------------------------------------------------------===//
// struct_size
//===----------------------------------------------------------------------===//

/* A public struct that starts with `size_t struct_size`. |older| lists the
 * sizes of its earlier released layouts, ascending: when a field is appended
 * to the struct, the size it had before goes at the end of that list (as a
 * number: sizeof of the old layout on the ABI, including its tail padding). */
typedef struct cube__struct_info {
  const char* name;    /* "cube_server_options_t" */
  size_t size;         /* sizeof in this library */
  const size_t* older; /* earlier layouts' sizes, ascending; NULL when none */
  size_t older_count;
} cube__struct_info_t;

extern const cube__struct_info_t cube__struct_server_options;
extern const cube__struct_info_t cube__struct_kernel_desc;
extern const cube__struct_info_t cube__struct_layout_desc;
extern const cube__struct_info_t cube__struct_memory_report;
extern const cube__struct_info_t cube__struct_profile_summary;
extern const cube__struct_info_t cube__struct_kernel_cache_stats;
extern const cube__struct_info_t cube__struct_cpu_compiler_info;
extern const cube__struct_info_t cube__struct_collective_record;
extern const cube__struct_info_t cube__struct_graph_auto_stats;
extern const cube__struct_info_t cube__struct_dlpack_export;
extern const cube__struct_info_t cube__struct_kernel_cache_prune_report;
extern const cube__struct_info_t cube__struct_execution_stats;
extern const cube__struct_info_t cube__struct_tune_op_desc;
extern const cube__struct_info_t cube__struct_tune_record;
extern const cube__struct_info_t cube__struct_bundle_info;
extern const cube__struct_info_t cube__struct_memory_ledger;
extern const cube__struct_info_t cube__struct_memory_pools;

/* The struct_size of the struct at |p| (the first member of every such
 * struct). */
static inline size_t cube__struct_size_of(const void* p) { return *(const size_t*)p; }

/* Reads the caller's input struct |in| into |out| (this library's layout,
 * info->size bytes, which the caller has filled with the defaults), under the
 * input rules: struct_size 0 or info->size is read whole; an earlier layout's
 * size reads that many bytes (the rest keeps the defaults); a larger size is
 * read when every byte past info->size is zero; anything else is
 * UNSUPPORTED, the message starting "<fn>: <field>" (field: the caller's
 * expression for the struct_size, "options->struct_size"). out's struct_size
 * is then info->size. */
cube_status_t cube__struct_read(const char* fn, const char* field, const cube__struct_info_t* info,
                                const void* in, void* out);

/* An array of |count| input structs at |in| (descs[0].struct_size is the
 * stride; every element must carry it, or 0 when it is info->size) in this
 * library's layout. When the array already is (stride info->size), *out is
 * |in| and *out_owned NULL: nothing is copied. Otherwise *out and *out_owned
 * are a malloc'd copy (each element read as by cube__struct_read over zero
 * defaults) that the caller frees. |array| names the array in messages
 * ("descs" gives "descs[1].struct_size"). count 0 gives *out = in. */
cube_status_t cube__struct_array_read(const char* fn, const char* array,
                                      const cube__struct_info_t* info, const void* in,
                                      size_t count, const void** out, void** out_owned);

/* Writes |full| (this library's layout, info->size bytes) to the caller's
 * output struct |out| under the output rules: min(struct_size, info->size)
 * bytes (struct_size 0 = info->size), with out's struct_size set to that
 * number. INVALID_ARGUMENT (nothing written) for a nonzero struct_size below
 * sizeof(size_t). */
cube_status_t cube__struct_write(const char* fn, const char* field,
                                 const cube__struct_info_t* info, void* out, const void* full);

#endif /* CUBE_BASE_ABI_H_ */
