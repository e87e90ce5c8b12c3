// cube-test-libs: cube_static
/* The bad-input catalogue (docs/errors.md) as a table-driven test.
 *
 * Each function group is one X-list: X(id, function, invalid input, code,
 * expression, key words of the message...) for calls that return a status,
 * V(id, function, invalid input, fallback, condition) for accessors that return
 * a documented fallback value. The same lists build
 *   - k_rows[], the table that mirrors docs/errors.md row by row, and
 *   - the body of one CUBE_TEST per group, which evaluates every expression
 *     and checks it exactly as CHECK_STATUS does (code, then every word).
 * The case doc_matches_table compares k_rows[] with docs/errors.md (ids, order,
 * function and code) when CUBE_SOURCE_DIR names the source tree.
 *
 * CUBE_ERRORS_DUMP=1 prints "ROW|id|CODE|message" for every row: that output
 * is where the messages in docs/errors.md come from.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include <sys/stat.h>

#include "cube/cube.h"
#include "cube/dlpack.h"
#include "cube/dlpack_types.h"

#define INV CUBE_STATUS_INVALID_ARGUMENT
#define NOTF CUBE_STATUS_NOT_FOUND
#define EXISTS CUBE_STATUS_ALREADY_EXISTS
#define PRECOND CUBE_STATUS_FAILED_PRECONDITION
#define UNIMPL CUBE_STATUS_UNIMPLEMENTED
#define DEADLINE CUBE_STATUS_DEADLINE_EXCEEDED
#define RANGE CUBE_STATUS_OUT_OF_RANGE
#define UNSUP CUBE_STATUS_UNSUPPORTED
#define LAUNCHF CUBE_STATUS_LAUNCH_FAILED
#define UNAVAIL CUBE_STATUS_UNAVAILABLE
/* A known defect: the call crashes instead of returning |code|. The row is
 * documented as DEFECT and its call runs only with CUBE_ERRORS_RUN_DEFECTS=1. */
#define DEFECT(code) ((cube_status_code_t)(0x100 | (code)))
#define ROW_CODE(code) ((cube_status_code_t)((code) & 0xff))
#define ROW_IS_DEFECT(code) (((code) & 0x100) != 0)

//===----------------------------------------------------------------------===//
// Fixtures shared by the rows
//===----------------------------------------------------------------------===//

static cube_device_id_t dev(int backend, uint32_t index) {
  cube_device_id_t d = {(cube_backend_t)backend, index};
  return d;
}
static cube_device_id_t cpu0(void) { return dev(CUBE_BACKEND_CPU, 0); }

/* cube_device_count is deprecated (enumeration with capacity 0 counts) but
 * still public: its row stays while the name does, called from here only. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static size_t deprecated_device_count(cube_backend_t backend) { return cube_device_count(backend); }
#pragma GCC diagnostic pop

/* A handle id that was never handed out (index far past any table chunk). */
static cube_handle_t random_handle(void) {
  cube_handle_t h = {UINT64_C(0xFFFFFFFF0FFFFFFF)};
  return h;
}

/* A fresh NATIVE buffer (for calls that consume their bytes argument). */
static cube_bytes_t* fresh_bytes(size_t n) {
  cube_bytes_t* b = NULL;
  cube_status_free(cube_bytes_allocate(n, &b));
  return b;
}

/* A FILE buffer over all 64 bytes of a file written at |path|, which is then
 * cut to 10 bytes: its contents are gone from under the mapping. */
static cube_bytes_t* shrunk_file_bytes(const char* path) {
  char zeros[64] = {0};
  FILE* f = fopen(path, "wb");
  if (!f) return NULL;
  size_t w = fwrite(zeros, 1, sizeof(zeros), f);
  fclose(f);
  cube_bytes_t* b = NULL;
  if (w != sizeof(zeros) || cube_status_consume(cube_bytes_map_file(path, 0, 0, &b))) return NULL;
  if (truncate(path, 10) != 0) {
    cube_bytes_release(b);
    return NULL;
  }
  return b;
}

/* cube_client_staging of one such buffer (released after the call). */
static cube_status_t staging_shrunk(cube_client_t* c, const char* path) {
  cube_bytes_t* b[1] = {shrunk_file_bytes(path)};
  cube_status_t s = cube_client_staging(c, 1, b, true);
  cube_bytes_release(b[0]);
  return s;
}

/* cube_kernel_cache_dir_status with CUBE_CACHE_DIR = |dir| for the call. */
static cube_status_t cache_dir_status_with(const char* dir) {
  const char* old = getenv("CUBE_CACHE_DIR");
  char* saved = old ? strdup(old) : NULL;
  setenv("CUBE_CACHE_DIR", dir, 1);
  cube_status_t s = cube_kernel_cache_dir_status();
  if (saved)
    setenv("CUBE_CACHE_DIR", saved, 1);
  else
    unsetenv("CUBE_CACHE_DIR");
  free(saved);
  return s;
}

static cube_client_t* client_or_null(cube_device_id_t d) {
  cube_client_t* c = NULL;
  cube_status_t s = cube_client_load(d, &c);
  if (s) {
    fprintf(stderr, "cannot load %s:%u: %s\n", cube_backend_name(d.backend), d.index,
            cube_status_message(s));
    cube_status_free(s);
    return NULL;
  }
  return c;
}

static int k_noop(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube, (void)args, (void)n;
  return 0;
}
static int k_fail(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube, (void)args, (void)n;
  return 1;
}
static int k_sleep(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube, (void)args, (void)n;
  struct timespec ts = {0, 300 * 1000 * 1000};
  nanosleep(&ts, NULL);
  return 0;
}
static cube_status_t task_ok(void* user) {
  (void)user;
  return CUBE_OK;
}

static const cube_arg_kind_t k_buf_u32[2] = {CUBE_ARG_BUFFER, CUBE_ARG_U32};

static cube_kernel_t* native_kernel(const char* name, cube_cpu_kernel_fn fn, uint32_t argc,
                                    const cube_arg_kind_t* kinds, cube_dim_t dim) {
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = name;
  d.cpu_fn = fn;
  d.arg_count = argc;
  d.arg_kinds = kinds;
  d.cube_dim = dim;
  cube_kernel_t* k = NULL;
  cube_status_t s = cube_kernel_create(&d, &k);
  if (s) {
    fprintf(stderr, "kernel %s: %s\n", name, cube_status_message(s));
    cube_status_free(s);
  }
  return k;
}

/* Kernel descriptors for the kernel_create rows. */
static cube_kernel_desc_t kdesc(void) {
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = "kd";
  d.cpu_fn = k_noop;
  return d;
}
static const char k_src[] = "CUBE_KERNEL(fill, CUBE_ARRAY(float, out)) { }\n";
static const cube_define_t k_bad_define[1] = {{"1bad", "1"}};
static const cube_arg_kind_t k_bad_kind[1] = {(cube_arg_kind_t)99};
static const cube_arg_kind_t k_u32[1] = {CUBE_ARG_U32};

static cube_kernel_desc_t kd_source_no_entry(void) { cube_kernel_desc_t d = kdesc(); d.cpu_fn = NULL; d.source = k_src; return d; }
static cube_kernel_desc_t kd_no_name(void) { cube_kernel_desc_t d = kdesc(); d.name = NULL; return d; }
static cube_kernel_desc_t kd_empty_name(void) { cube_kernel_desc_t d = kdesc(); d.name = ""; return d; }
static cube_kernel_desc_t kd_no_code(void) { cube_kernel_desc_t d = kdesc(); d.cpu_fn = NULL; return d; }
static cube_kernel_desc_t kd_both(void) { cube_kernel_desc_t d = kdesc(); d.source = k_src; d.entry = "fill"; return d; }
static cube_kernel_desc_t kd_dim_y0(void) { cube_kernel_desc_t d = kdesc(); d.cube_dim = (cube_dim_t){4, 0, 1}; return d; }
static cube_kernel_desc_t kd_dim_huge(void) { cube_kernel_desc_t d = kdesc(); d.cube_dim = (cube_dim_t){65536, 65536, 2}; return d; }
static cube_kernel_desc_t kd_too_many_args(void) { cube_kernel_desc_t d = kdesc(); d.arg_count = CUBE_MAX_KERNEL_ARGS + 1; d.arg_kinds = k_buf_u32; return d; }
static cube_kernel_desc_t kd_read_only_scalar(void) { cube_kernel_desc_t d = kdesc(); d.arg_count = 2; d.arg_kinds = k_buf_u32; d.read_only_args = 3; return d; }
static cube_kernel_desc_t kd_read_only_past(void) { cube_kernel_desc_t d = kdesc(); d.arg_count = 2; d.arg_kinds = k_buf_u32; d.read_only_args = 1u << 5; return d; }
static cube_kernel_desc_t kd_kinds_null(void) { cube_kernel_desc_t d = kdesc(); d.arg_count = 2; return d; }
static cube_kernel_desc_t kd_bad_kind(void) { cube_kernel_desc_t d = kdesc(); d.arg_count = 1; d.arg_kinds = k_bad_kind; return d; }
static cube_kernel_desc_t kd_dialect(void) { cube_kernel_desc_t d = kdesc(); d.cpu_fn = NULL; d.name = NULL; d.source = k_src; d.entry = "fill"; return d; }
static cube_kernel_desc_t kd_missing_entry(void) { cube_kernel_desc_t d = kd_dialect(); d.entry = "nope"; return d; }
static cube_kernel_desc_t kd_disagree(void) { cube_kernel_desc_t d = kd_dialect(); d.arg_count = 1; d.arg_kinds = k_u32; return d; }
static cube_kernel_desc_t kd_bad_define(void) { cube_kernel_desc_t d = kd_dialect(); d.defines = k_bad_define; d.define_count = 1; return d; }
static cube_kernel_desc_t kd_malformed(void) { cube_kernel_desc_t d = kd_dialect(); d.source = "CUBE_KERNEL(fill, CUBE_ARRAY(float out) { }\n"; return d; }

static cube_kernel_desc_t kd_vector_buffer(void) { cube_kernel_desc_t d = kd_dialect(); d.source = "CUBE_KERNEL(fill, CUBE_ARRAY(const float4, v)) { }\n"; return d; }

static cube_status_t kernel_try_keep(cube_kernel_desc_t d, cube_kernel_t** out) {
  return cube_kernel_create(&d, out);
}

static cube_status_t kernel_try(cube_kernel_desc_t d) {
  cube_kernel_t* k = NULL;
  cube_status_t s = cube_kernel_create(&d, &k);
  if (!s) cube_kernel_release(k);
  return s;
}

/* Layout descriptors. */
static cube_layout_desc_t ld(uint32_t rank, uint64_t s0, uint64_t s1, uint32_t elem) {
  cube_layout_desc_t d;
  memset(&d, 0, sizeof(d));
  d.strategy = CUBE_LAYOUT_CONTIGUOUS;
  d.rank = rank;
  d.shape[0] = s0;
  d.shape[1] = s1;
  d.elem_size = elem;
  return d;
}
static cube_layout_desc_t ld3(uint64_t s0, uint64_t s1, uint64_t s2, uint32_t elem) {
  cube_layout_desc_t d = ld(3, s0, s1, elem);
  d.shape[2] = s2;
  return d;
}
static cube_layout_desc_t ld_strategy(int strategy) {
  cube_layout_desc_t d = ld(1, 4, 0, 4);
  d.strategy = (cube_layout_strategy_t)strategy;
  return d;
}
static cube_status_t layout_one(cube_layout_policy_t policy, uint64_t align, cube_layout_desc_t d) {
  uint64_t total = 0;
  return cube_layout_compute(policy, align, 1, &d, NULL, NULL, NULL, &total);
}
static cube_status_t layout_two(cube_layout_desc_t a, cube_layout_desc_t b) {
  cube_layout_desc_t d[2] = {a, b};
  uint64_t total = 0;
  return cube_layout_compute(CUBE_LAYOUT_POLICY_CONTIGUOUS, 64, 2, d, NULL, NULL, NULL, &total);
}

static cube_server_options_t opts_bad(int which) {
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  if (which == 0) o.queue_mode = (cube_queue_mode_t)7;
  if (which == 1) o.profile_level = (cube_profile_level_t)9;
  if (which == 2) o.memory_config = (cube_memory_config_t)5;
  if (which == 3) o.check_mode = (cube_check_mode_t)6;
  return o;
}
static cube_status_t init_with(cube_device_id_t d, cube_server_options_t o) {
  cube_client_t* c = NULL;
  cube_status_t s = cube_client_init(d, &o, &c);
  if (!s) cube_client_release(c);
  return s;
}
static cube_status_t load_try(cube_device_id_t d) {
  cube_client_t* c = NULL;
  cube_status_t s = cube_client_load(d, &c);
  if (!s) cube_client_release(c);
  return s;
}

//===----------------------------------------------------------------------===//
// The catalogue
//===----------------------------------------------------------------------===//

/* Devices and backends. */
#define G_DEVICES(X, V)                                                                           \
  X("E001", "cube_enumerate_devices", "out_count NULL", INV,                                     \
    cube_enumerate_devices(CUBE_BACKEND_CPU, NULL, 0, NULL), "cube_enumerate_devices", "out_count", "NULL") \
  X("E002", "cube_enumerate_devices", "backend out of range (9)", INV,                           \
    cube_enumerate_devices((cube_backend_t)9, NULL, 0, &count), "cube_enumerate_devices", "backend 9", "invalid") \
  X("E003", "cube_enumerate_all_devices", "out_count NULL", INV,                                 \
    cube_enumerate_all_devices(NULL, 0, NULL), "cube_enumerate_all_devices", "out_count", "NULL") \
  X("E004", "cube_backend_status", "backend out of range (9)", INV,                              \
    cube_backend_status((cube_backend_t)9), "cube_backend_status", "backend 9", "invalid")       \
  V("E005", "cube_device_count", "backend out of range (9)", "0",                                \
    deprecated_device_count((cube_backend_t)9) == 0)                                                   \
  V("E006", "cube_backend_name", "backend out of range (9)", "NULL",                             \
    cube_backend_name((cube_backend_t)9) == NULL)                                                \
  V("E007", "cube_dtype_size", "dtype out of range (10)", "0",                     \
    cube_dtype_size((cube_dtype_t)10) == 0)                                                      \
  V("E008", "cube_dtype_name", "dtype out of range (10)", "\"unknown\"",           \
    strcmp(cube_dtype_name((cube_dtype_t)10), "unknown") == 0)                                   \
  V("E009", "cube_arg_kind_name", "kind out of range (99)", "\"unknown\"",                       \
    strcmp(cube_arg_kind_name((cube_arg_kind_t)99), "unknown") == 0)                             \
  V("E010", "cube_bytes_property_name", "property out of range (9)", "\"unknown\"",              \
    strcmp(cube_bytes_property_name((cube_bytes_property_t)9), "unknown") == 0)                  \
  V("E011", "cube_profile_level_name", "level out of range (9)", "\"unknown\"",                  \
    strcmp(cube_profile_level_name((cube_profile_level_t)9), "unknown") == 0)                    \
  V("E012", "cube_status_code_name", "code out of range (18)", "\"UNKNOWN\"", \
    strcmp(cube_status_code_name((cube_status_code_t)18), "UNKNOWN") == 0)                       \
  V("E013", "cube_status_message", "status NULL (CUBE_OK)", "\"\"",                              \
    strcmp(cube_status_message(CUBE_OK), "") == 0)                                               \
  V("E014", "cube_status_oom_report", "status that is not OUT_OF_MEMORY", "false",               \
    !cube_status_oom_report(CUBE_OK, NULL, NULL))                                                \
  V("E015", "cube_dim_for_units", "props NULL", "(1, 1, 1)",                                     \
    cube_dim_for_units(NULL, 64).x == 1 && cube_dim_for_units(NULL, 64).y == 1)                  \
  V("E016", "cube_memory_usage_format", "usage NULL", "\"(no memory usage)\" in buf",            \
    strcmp(cube_memory_usage_format(NULL, buf, sizeof(buf)), "(no memory usage)") == 0)

/* Parsers. */
#define G_PARSE(X, V)                                                                             \
  X("E017", "cube_backend_parse", "name NULL", INV, cube_backend_parse(NULL, &backend),          \
    "cube_backend_parse", "name", "NULL")                                                        \
  X("E018", "cube_backend_parse", "out_backend NULL", INV, cube_backend_parse("cpu", NULL),      \
    "cube_backend_parse", "out_backend", "NULL", "'cpu'")                                        \
  X("E019", "cube_backend_parse", "unknown name \"vulkan\"", INV,                                \
    cube_backend_parse("vulkan", &backend), "cube_backend_parse", "unknown backend", "'vulkan'", "valid: cpu") \
  X("E020", "cube_backend_parse", "empty name \"\"", INV, cube_backend_parse("", &backend),      \
    "cube_backend_parse", "unknown backend", "''")                                               \
  X("E021", "cube_profile_level_parse", "text NULL", INV, cube_profile_level_parse(NULL, &level), \
    "cube_profile_level_parse", "text", "NULL")                                                  \
  X("E022", "cube_profile_level_parse", "out_level NULL", INV,                                   \
    cube_profile_level_parse("full", NULL), "cube_profile_level_parse", "out_level", "NULL", "'full'") \
  X("E023", "cube_profile_level_parse", "unknown level \"verbose\"", INV,                        \
    cube_profile_level_parse("verbose", &level), "cube_profile_level_parse", "unknown profile level", "'verbose'")

/* Host byte buffers. */
#define G_BYTES(X, V)                                                                             \
  X("E024", "cube_bytes_allocate", "out_bytes NULL", INV, cube_bytes_allocate(8, NULL),          \
    "cube_bytes_allocate", "out_bytes", "NULL")                                                  \
  X("E025", "cube_bytes_allocate", "size SIZE_MAX", INV, cube_bytes_allocate(SIZE_MAX, &bytes),  \
    "cube_bytes_allocate", "size 18446744073709551615", "too large")                             \
  X("E026", "cube_bytes_from_copy", "data NULL with size 8", INV,                                \
    cube_bytes_from_copy(NULL, 8, &bytes), "cube_bytes_from_copy", "data", "NULL", "size 8")     \
  X("E027", "cube_bytes_from_copy", "out_bytes NULL", INV, cube_bytes_from_copy(buf, 8, NULL),   \
    "cube_bytes_from_copy", "out_bytes", "NULL")                                                 \
  X("E028", "cube_bytes_wrap", "out_bytes NULL", INV, cube_bytes_wrap(buf, 8, NULL, NULL, NULL), \
    "cube_bytes_wrap", "out_bytes", "NULL")                                                      \
  X("E029", "cube_bytes_wrap", "data NULL with size 8", INV,                                     \
    cube_bytes_wrap(NULL, 8, NULL, NULL, &bytes), "cube_bytes_wrap", "data", "NULL", "size 8")   \
  X("E030", "cube_bytes_map_file", "path NULL", INV, cube_bytes_map_file(NULL, 0, 0, &bytes),    \
    "cube_bytes_map_file", "path", "NULL")                                                       \
  X("E031", "cube_bytes_map_file", "path \"\"", INV, cube_bytes_map_file("", 0, 0, &bytes),      \
    "cube_bytes_map_file", "path", "empty")                                                      \
  X("E032", "cube_bytes_map_file", "out_bytes NULL", INV, cube_bytes_map_file(path, 0, 0, NULL), \
    "cube_bytes_map_file", "out_bytes", "NULL", path)                                            \
  X("E033", "cube_bytes_map_file", "path that does not exist", NOTF,                             \
    cube_bytes_map_file(missing, 0, 0, &bytes), "cube_bytes_map_file", "cannot open", missing)   \
  X("E034", "cube_bytes_map_file", "path of a directory", INV,                                   \
    cube_bytes_map_file(dir, 0, 0, &bytes), "cube_bytes_map_file", dir, "not a regular file")    \
  X("E035", "cube_bytes_map_file", "offset 100 past the end of a 64-byte file", RANGE,           \
    cube_bytes_map_file(path, 100, 0, &bytes), "cube_bytes_map_file", "offset 100", "length 64") \
  X("E036", "cube_bytes_map_file", "offset 32 + size 64 past the end of a 64-byte file", RANGE,  \
    cube_bytes_map_file(path, 32, 64, &bytes), "cube_bytes_map_file", "offset 32", "size 64", "length 64") \
  V("E037", "cube_bytes_data", "bytes NULL", "NULL", cube_bytes_data(NULL) == NULL)              \
  V("E038", "cube_bytes_const_data", "bytes NULL", "NULL", cube_bytes_const_data(NULL) == NULL)  \
  V("E039", "cube_bytes_size", "bytes NULL", "0", cube_bytes_size(NULL) == 0)                    \
  V("E040", "cube_bytes_property", "bytes NULL", "CUBE_BYTES_NATIVE",                            \
    cube_bytes_property(NULL) == CUBE_BYTES_NATIVE)                                              \
  V("E041", "cube_bytes_retain", "bytes NULL", "NULL", cube_bytes_retain(NULL) == NULL)

/* Layout descriptors and the layout policies. */
#define G_LAYOUT(X, V)                                                                            \
  X("E042", "cube_layout_desc_initialize", "out_desc NULL", INV,                                       \
    cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 1, shape, 4, NULL), "cube_layout_desc_initialize", "out_desc", "NULL") \
  X("E043", "cube_layout_desc_initialize", "strategy out of range (5)", INV,                           \
    cube_layout_desc_initialize((cube_layout_strategy_t)5, 1, shape, 4, &desc), "cube_layout_desc_initialize", "strategy 5") \
  X("E044", "cube_layout_desc_initialize", "rank 13 > CUBE_MAX_RANK", INV,                             \
    cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 13, shape, 4, &desc), "cube_layout_desc_initialize", "rank 13", "CUBE_MAX_RANK (12)") \
  X("E045", "cube_layout_desc_initialize", "shape NULL with rank 2", INV,                              \
    cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 2, NULL, 4, &desc), "cube_layout_desc_initialize", "shape", "NULL", "rank 2") \
  X("E046", "cube_layout_desc_initialize", "elem_size 0", INV,                                         \
    cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 1, shape, 0, &desc), "cube_layout_desc_initialize", "elem_size is 0") \
  X("E047", "cube_layout_desc_initialize", "a zero dimension (shape[1] = 0)", INV,                     \
    cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 2, shape_zero, 4, &desc), "cube_layout_desc_initialize", "shape[1] is 0") \
  X("E048", "cube_layout_compute", "policy out of range (4)", INV,                               \
    layout_one((cube_layout_policy_t)4, 64, ld(1, 4, 0, 4)), "cube_layout_compute", "policy 4")   \
  X("E049", "cube_layout_compute", "alignment 0", INV,                                           \
    layout_one(CUBE_LAYOUT_POLICY_CONTIGUOUS, 0, ld(1, 4, 0, 4)), "cube_layout_compute", "alignment 0", "power of two") \
  X("E050", "cube_layout_compute", "alignment 48 (not a power of two)", INV,                     \
    layout_one(CUBE_LAYOUT_POLICY_CONTIGUOUS, 48, ld(1, 4, 0, 4)), "cube_layout_compute", "alignment 48", "power of two") \
  X("E051", "cube_layout_compute", "descs NULL with count 3", INV,                               \
    cube_layout_compute(CUBE_LAYOUT_POLICY_CONTIGUOUS, 64, 3, NULL, NULL, NULL, NULL, NULL),     \
    "cube_layout_compute", "descs", "NULL", "count 3")                                           \
  X("E052", "cube_layout_compute", "descs[i].strategy out of range (7)", INV,                    \
    layout_one(CUBE_LAYOUT_POLICY_CONTIGUOUS, 64, ld_strategy(7)), "cube_layout_compute", "descs[0].strategy 7") \
  X("E053", "cube_layout_compute", "descs[i].rank 13 > CUBE_MAX_RANK", INV,                      \
    layout_one(CUBE_LAYOUT_POLICY_CONTIGUOUS, 64, ld(13, 4, 4, 4)), "cube_layout_compute", "descs[0].rank 13", "CUBE_MAX_RANK") \
  X("E054", "cube_layout_compute", "descs[i].elem_size 0 (second descriptor)", INV,              \
    layout_two(ld(1, 4, 0, 4), ld(1, 4, 0, 0)), "cube_layout_compute", "descs[1].elem_size is 0") \
  X("E055", "cube_layout_compute", "descs[i].shape[k] 0", INV,                                   \
    layout_one(CUBE_LAYOUT_POLICY_CONTIGUOUS, 64, ld(2, 4, 0, 4)), "cube_layout_compute", "descs[0].shape[1] is 0") \
  X("E056", "cube_layout_compute", "contiguous: element count overflows (2^63 x 4)", INV,        \
    layout_one(CUBE_LAYOUT_POLICY_CONTIGUOUS, 64, ld(2, UINT64_C(1) << 63, 4, 1)), "cube_layout_compute", "descs[0]", "element count overflows", "shape[1]") \
  X("E057", "cube_layout_compute", "contiguous: byte size overflows (2^62 elements x 8)", INV,    \
    layout_one(CUBE_LAYOUT_POLICY_CONTIGUOUS, 64, ld(1, UINT64_C(1) << 62, 0, 8)), "cube_layout_compute", "descs[0]", "size overflows", "x 8 bytes") \
  X("E058", "cube_layout_compute", "pitched: row count overflows (2^63 x 4 rows)", INV,          \
    layout_one(CUBE_LAYOUT_POLICY_PITCHED, 256, ld3(UINT64_C(1) << 63, 4, 2, 1)), "cube_layout_compute", "descs[0]", "row count overflows") \
  X("E059", "cube_layout_compute", "pitched: row size overflows (2^62 elements x 8)", INV,       \
    layout_one(CUBE_LAYOUT_POLICY_PITCHED, 256, ld(2, 2, UINT64_C(1) << 62, 8)), "cube_layout_compute", "descs[0]", "row size overflows") \
  X("E060", "cube_layout_compute", "total size overflows over two descriptors", INV,             \
    layout_two(ld(1, UINT64_C(1) << 62, 0, 2), ld(1, UINT64_C(1) << 62, 0, 2)), "cube_layout_compute", "total size overflows", "descs[1]") \
  V("E061", "cube_layout_strides_readable", "transposed strides (1, 4) for shape (4, 4)", "false", \
    !cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, 2, shape44, strides_t))          \
  V("E062", "cube_layout_strides_readable", "rank 13 > CUBE_MAX_RANK", "false",                  \
    !cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, 13, shape44, strides_t))         \
  V("E063", "cube_layout_strides_readable", "policy out of range (4)", "false",                  \
    !cube_layout_strides_readable((cube_layout_policy_t)4, 2, shape44, strides_ok))               \
  V("E064", "cube_layout_strides_readable", "shape or strides NULL with rank 2", "false",        \
    !cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, 2, shape44, NULL))

/* Kernel descriptors. */
#define G_KERNEL_DESC(X, V)                                                                       \
  X("E065", "cube_kernel_create", "out_kernel NULL", INV, cube_kernel_create(&good, NULL),       \
    "cube_kernel_create", "out_kernel", "NULL")                                                  \
  X("E066", "cube_kernel_create", "desc NULL", INV, cube_kernel_create(NULL, &kernel),           \
    "cube_kernel_create", "desc is NULL")                                                        \
  X("E067", "cube_kernel_create", "source without entry", INV, kernel_try(kd_source_no_entry()), \
    "cube_kernel_create", "desc->entry", "NULL")                                                 \
  X("E068", "cube_kernel_create", "name NULL (native kernel)", INV, kernel_try(kd_no_name()),    \
    "cube_kernel_create", "desc->name", "NULL")                                                  \
  X("E069", "cube_kernel_create", "name \"\"", INV, kernel_try(kd_empty_name()),                 \
    "cube_kernel_create", "desc->name", "empty")                                                 \
  X("E070", "cube_kernel_create", "neither cpu_fn nor source", INV, kernel_try(kd_no_code()),    \
    "cube_kernel_create", "'kd'", "desc->cpu_fn", "desc->source")                                \
  X("E071", "cube_kernel_create", "both cpu_fn and source", INV, kernel_try(kd_both()),          \
    "cube_kernel_create", "'kd'", "not both")                                                    \
  X("E072", "cube_kernel_create", "a zero cube_dim component (4, 0, 1)", INV,                    \
    kernel_try(kd_dim_y0()), "cube_kernel_create", "'kd'", "desc->cube_dim.y is 0", "(4, 0, 1)")  \
  X("E073", "cube_kernel_create", "cube_dim with more than 2^32-1 units", INV,                   \
    kernel_try(kd_dim_huge()), "cube_kernel_create", "'kd'", "desc->cube_dim (65536, 65536, 2)")  \
  X("E074", "cube_kernel_create", "arg_count 65 > CUBE_MAX_KERNEL_ARGS", INV,                    \
    kernel_try(kd_too_many_args()), "cube_kernel_create", "'kd'", "desc->arg_count 65", "CUBE_MAX_KERNEL_ARGS (64)") \
  X("E075", "cube_kernel_create", "arg_kinds NULL with arg_count 2", INV,                        \
    kernel_try(kd_kinds_null()), "cube_kernel_create", "'kd'", "desc->arg_kinds is NULL", "desc->arg_count 2") \
  X("E076", "cube_kernel_create", "arg_kinds[0] out of range (99)", INV,                         \
    kernel_try(kd_bad_kind()), "cube_kernel_create", "'kd'", "desc->arg_kinds[0] is 99")          \
  X("E077", "cube_kernel_create", "dialect: entry not in the source", INV,                       \
    kernel_try(kd_missing_entry()), "cube_kernel_create", "'nope'")                              \
  X("E078", "cube_kernel_create", "dialect: arg_kinds disagree with the source", INV,            \
    kernel_try(kd_disagree()), "cube_kernel_create", "'fill'", "desc->arg_kinds[0] is u32", "('out')", "is buffer") \
  X("E079", "cube_kernel_create", "dialect: define name \"1bad\" is not an identifier", INV,     \
    kernel_try(kd_bad_define()), "cube_kernel_create", "'fill'", "desc->defines[0]", "'1bad'")    \
  X("E080", "cube_kernel_create", "dialect: malformed CUBE_KERNEL declaration", INV,             \
    kernel_try(kd_malformed()), "cube_kernel_create", "'fill'", "line 1")                        \
  X("E456", "cube_kernel_create", "dialect: a buffer of vectors (CUBE_ARRAY(const float4, v))", INV, \
    kernel_try(kd_vector_buffer()), "cube_kernel_create", "'fill'", "line 1", "parameter 1", \
    "CUBE_ARRAY(const float, v)", "CUBE_VLOAD(float4, v, i)")                                 \
  V("E081", "cube_kernel_name", "kernel NULL", "\"\"", strcmp(cube_kernel_name(NULL), "") == 0)  \
  V("E082", "cube_kernel_cube_dim", "kernel NULL", "(0, 0, 0)", cube_kernel_cube_dim(NULL).x == 0) \
  V("E083", "cube_kernel_arg_count", "kernel NULL", "0", cube_kernel_arg_count(NULL) == 0)       \
  V("E084", "cube_kernel_retain", "kernel NULL", "NULL", cube_kernel_retain(NULL) == NULL)     \
  X("E318", "cube_kernel_create", "read_only_args bit of a u32 argument", INV,                  \
    kernel_try(kd_read_only_scalar()), "cube_kernel_create", "read_only_args", "bit 1", "u32")  \
  X("E319", "cube_kernel_create", "read_only_args bit past the arguments", INV,                 \
    kernel_try(kd_read_only_past()), "cube_kernel_create", "read_only_args", "0x20", "2 arguments")

/* Cube count selection. */
#define G_COUNT_SELECT(X, V)                                                                      \
  X("E085", "cube_count_select", "max_count NULL", INV, cube_count_select(10, NULL, &cc, &exact), \
    "cube_count_select", "max_count", "NULL")                                                    \
  X("E086", "cube_count_select", "out_count NULL", INV, cube_count_select(10, maxc, NULL, &exact), \
    "cube_count_select", "out_count", "NULL")                                                    \
  X("E087", "cube_count_select", "max_count[1] 0", INV, cube_count_select(10, maxc_y0, &cc, &exact), \
    "cube_count_select", "max_count[1] (y) is 0")                                                \
  X("E088", "cube_count_select", "num_cubes 1000 beyond max_count (4, 4, 4)", RANGE,             \
    cube_count_select(1000, maxc444, &cc, &exact), "cube_count_select", "1000 cubes", "(4, 4, 4)")

/* Clients: load, init, clone and the NULL-client accessors. */
#define G_CLIENT(X, V)                                                                            \
  X("E089", "cube_client_load", "out_client NULL", INV, cube_client_load(cpu0(), NULL),          \
    "cube_client_load", "out_client", "NULL")                                                    \
  X("E090", "cube_client_load", "backend out of range (9)", INV, load_try(dev(9, 0)),            \
    "cube_client_load", "backend 9")                                                             \
  X("E091", "cube_client_load", "device index out of range (cpu:99)", NOTF,                      \
    load_try(dev(CUBE_BACKEND_CPU, 99)), "cube_client_load", "cpu:99", "does not exist")          \
  X("E092", "cube_client_load", "backend with no devices (null:0)", NOTF,                        \
    load_try(dev(CUBE_BACKEND_NULL, 0)), "cube_client_load", "null:0", "does not exist")          \
  X("E093", "cube_client_init", "out_client NULL", INV, cube_client_init(cpu0(), NULL, NULL),    \
    "cube_client_init", "out_client", "NULL")                                                    \
  X("E094", "cube_client_init", "options.queue_mode out of range (7)", INV,                      \
    init_with(cpu0(), opts_bad(0)), "cube_client_init", "queue_mode 7")                          \
  X("E095", "cube_client_init", "options.profile_level out of range (9)", INV,                   \
    init_with(cpu0(), opts_bad(1)), "cube_client_init", "profile_level 9")                       \
  X("E096", "cube_client_init", "options.memory_config out of range (5)", INV,                   \
    init_with(cpu0(), opts_bad(2)), "cube_client_init", "memory_config 5")                       \
  X("E097", "cube_client_init", "options.check_mode out of range (6)", INV,                      \
    init_with(cpu0(), opts_bad(3)), "cube_client_init", "check_mode 6")                          \
  X("E098", "cube_client_init", "device that already has a server (cpu:0)", EXISTS,              \
    init_with(cpu0(), good_opts), "cube_client_init: device cpu:0", "already has a server")           \
  X("E099", "cube_client_init", "device index out of range (cpu:99)", NOTF,                      \
    init_with(dev(CUBE_BACKEND_CPU, 99), good_opts), "cube_client_init", "cpu:99", "does not exist") \
  X("E100", "cube_client_clone", "client NULL", INV, cube_client_clone(NULL, &other),            \
    "cube_client_clone", "client is NULL")                                                       \
  X("E101", "cube_client_clone", "out_client NULL", INV, cube_client_clone(c, NULL),             \
    "cube_client_clone", "out_client", "NULL")                                                   \
  V("E102", "cube_client_device", "client NULL", "{CUBE_BACKEND_NONE, 0}",                      \
    cube_client_device(NULL).backend == CUBE_BACKEND_NONE)                                      \
  V("E103", "cube_client_info", "client NULL", "NULL", cube_client_info(NULL) == NULL)           \
  V("E104", "cube_client_properties", "client NULL", "NULL", cube_client_properties(NULL) == NULL) \
  V("E105", "cube_client_features", "client NULL", "NULL", cube_client_features(NULL) == NULL)   \
  V("E106", "cube_client_is_blocking", "client NULL", "false", !cube_client_is_blocking(NULL))   \
  V("E107", "cube_client_profile_level", "client NULL", "CUBE_PROFILE_NONE",                     \
    cube_client_profile_level(NULL) == CUBE_PROFILE_NONE)                                        \
  V("E108", "cube_client_stream", "client NULL", "0", cube_client_stream(NULL) == 0)             \
  V("E109", "cube_client_retain", "client NULL", "NULL", cube_client_retain(NULL) == NULL)

/* Creating memory from host data. */
#define G_CREATE(X, V)                                                                            \
  X("E110", "cube_client_create_from_slice", "client NULL", INV,                                 \
    cube_client_create_from_slice(NULL, buf, 16, &h), "cube_client_create_from_slice", "client is NULL") \
  X("E111", "cube_client_create_from_slice", "out_handle NULL", INV,                             \
    cube_client_create_from_slice(c, buf, 16, NULL), "cube_client_create_from_slice", "out_handle", "NULL") \
  X("E112", "cube_client_create_from_slice", "data NULL", INV,                                   \
    cube_client_create_from_slice(c, NULL, 16, &h), "cube_client_create_from_slice", "data is NULL") \
  X("E113", "cube_client_create_from_slice", "size 0", INV,                                      \
    cube_client_create_from_slice(c, buf, 0, &h), "cube_client_create_from_slice", "size 0")     \
  X("E114", "cube_client_create_from_slice", "size max_page_size + 1", INV,                      \
    cube_client_create_from_slice(c, buf, (size_t)oversize, &h), "cube_client_create_from_slice", "exceeds", "max_page_size") \
  X("E115", "cube_client_create", "client NULL (bytes consumed)", INV,                           \
    cube_client_create(NULL, fresh_bytes(16), &h), "cube_client_create", "client is NULL")       \
  X("E116", "cube_client_create", "out_handle NULL (bytes consumed)", INV,                       \
    cube_client_create(c, fresh_bytes(16), NULL), "cube_client_create", "out_handle", "NULL")    \
  X("E117", "cube_client_create", "bytes NULL", INV, cube_client_create(c, NULL, &h),            \
    "cube_client_create", "bytes is NULL")                                                       \
  X("E118", "cube_client_create", "bytes of size 0", INV, cube_client_create(c, fresh_bytes(0), &h), \
    "cube_client_create", "0 bytes", "size 0")                                                   \
  X("E119", "cube_client_create_tensor_from_slice", "out_tensor NULL", INV,                      \
    cube_client_create_tensor_from_slice(c, buf, 64, 2, shape44, 4, NULL), "cube_client_create_tensor_from_slice", "out_tensor", "NULL") \
  X("E120", "cube_client_create_tensor_from_slice", "data NULL", INV,                            \
    cube_client_create_tensor_from_slice(c, NULL, 64, 2, shape44, 4, &t), "cube_client_create_tensor_from_slice", "data is NULL") \
  X("E121", "cube_client_create_tensor_from_slice", "shape NULL with rank 2", INV,               \
    cube_client_create_tensor_from_slice(c, buf, 64, 2, NULL, 4, &t), "cube_client_create_tensor_from_slice", "shape", "NULL", "rank 2") \
  X("E122", "cube_client_create_tensor_from_slice", "rank 13 > CUBE_MAX_RANK", INV,              \
    cube_client_create_tensor_from_slice(c, buf, 64, 13, shape13, 4, &t), "cube_client_create_tensor_from_slice", "rank 13", "CUBE_MAX_RANK") \
  X("E123", "cube_client_create_tensor_from_slice", "elem_size 0", INV,                          \
    cube_client_create_tensor_from_slice(c, buf, 64, 2, shape44, 0, &t), "cube_client_create_tensor_from_slice", "elem_size is 0") \
  X("E124", "cube_client_create_tensor_from_slice", "a zero dimension", INV,                     \
    cube_client_create_tensor_from_slice(c, buf, 64, 2, shape_zero, 4, &t), "cube_client_create_tensor_from_slice", "shape[1] is 0") \
  X("E125", "cube_client_create_tensor_from_slice", "size 60 != prod(shape) * elem_size 64", INV, \
    cube_client_create_tensor_from_slice(c, buf, 60, 2, shape44, 4, &t), "cube_client_create_tensor_from_slice", "data[0] holds 60 bytes", "needs 64") \
  X("E126", "cube_client_create_tensor", "bytes NULL", INV,                                      \
    cube_client_create_tensor(c, NULL, 2, shape44, 4, &t), "cube_client_create_tensor", "bytes is NULL") \
  X("E127", "cube_client_create_tensor", "out_tensor NULL (bytes consumed)", INV,                \
    cube_client_create_tensor(c, fresh_bytes(64), 2, shape44, 4, NULL), "cube_client_create_tensor", "out_tensor", "NULL") \
  X("E128", "cube_client_create_tensor", "bytes of 60 != 64 the shape needs", INV,               \
    cube_client_create_tensor(c, fresh_bytes(60), 2, shape44, 4, &t), "cube_client_create_tensor", "bytes[0] holds 60 bytes", "needs 64") \
  X("E129", "cube_client_create_tensor", "rank 13 > CUBE_MAX_RANK (bytes consumed)", INV,        \
    cube_client_create_tensor(c, fresh_bytes(64), 13, shape13, 4, &t), "cube_client_create_tensor", "rank 13") \
  X("E130", "cube_client_create_tensors_from_slices", "out_tensors NULL", INV,                   \
    cube_client_create_tensors_from_slices(c, 2, descs2, data2, sizes2, NULL), "cube_client_create_tensors_from_slices", "out_tensors", "NULL") \
  X("E131", "cube_client_create_tensors_from_slices", "data NULL", INV,                          \
    cube_client_create_tensors_from_slices(c, 2, descs2, NULL, sizes2, ts), "cube_client_create_tensors_from_slices", "data is NULL") \
  X("E132", "cube_client_create_tensors_from_slices", "descs NULL", INV,                         \
    cube_client_create_tensors_from_slices(c, 2, NULL, data2, sizes2, ts), "cube_client_create_tensors_from_slices", "descs is NULL", "2 tensors") \
  X("E133", "cube_client_create_tensors_from_slices", "sizes NULL", INV,                         \
    cube_client_create_tensors_from_slices(c, 2, descs2, data2, NULL, ts), "cube_client_create_tensors_from_slices", "sizes is NULL") \
  X("E134", "cube_client_create_tensors_from_slices", "data[1] NULL", INV,                       \
    cube_client_create_tensors_from_slices(c, 2, descs2, data2_null, sizes2, ts), "cube_client_create_tensors_from_slices", "data[1] is NULL") \
  X("E135", "cube_client_create_tensors_from_slices", "sizes[1] 8 != 16 the shape needs", INV,   \
    cube_client_create_tensors_from_slices(c, 2, descs2, data2, sizes2_bad, ts), "cube_client_create_tensors_from_slices", "data[1] holds 8 bytes", "needs 16") \
  X("E136", "cube_client_create_tensors_from_slices", "descs[1].elem_size 0", INV,               \
    cube_client_create_tensors_from_slices(c, 2, descs2_bad, data2, sizes2, ts), "cube_client_create_tensors_from_slices", "descs[1].elem_size is 0") \
  X("E137", "cube_client_create_tensors", "bytes NULL", INV,                                     \
    cube_client_create_tensors(c, 2, descs2, NULL, ts), "cube_client_create_tensors", "bytes is NULL") \
  X("E138", "cube_client_create_tensors", "out_tensors NULL", INV,                               \
    cube_client_create_tensors(c, 1, descs2, fresh1(), NULL), "cube_client_create_tensors", "out_tensors", "NULL") \
  X("E139", "cube_client_create_tensors", "bytes[1] NULL", INV,                                  \
    cube_client_create_tensors(c, 2, descs2, fresh2(64, 0), ts), "cube_client_create_tensors", "bytes[1] is NULL") \
  X("E140", "cube_client_create_tensors", "bytes[1] of 8 != 16 the shape needs", INV,            \
    cube_client_create_tensors(c, 2, descs2, fresh2(64, 8), ts), "cube_client_create_tensors", "bytes[1] holds 8 bytes", "needs 16") \
  X("E468", "cube_client_create_restorable", "data NULL", INV,                                   \
    cube_client_create_restorable(c, NULL, 64, &h), "cube_client_create_restorable: data is NULL") \
  X("E469", "cube_client_create_restorable", "size 0", INV,                                      \
    cube_client_create_restorable(c, data2[0], 0, &h), "cube_client_create_restorable: size 0")

/* Staging. */
#define G_STAGING(X, V)                                                                           \
  X("E141", "cube_client_reserve_staging", "client NULL", INV,                                   \
    cube_client_reserve_staging(NULL, 1, sizes2, sb), "cube_client_reserve_staging", "client is NULL") \
  X("E142", "cube_client_reserve_staging", "sizes NULL", INV,                                    \
    cube_client_reserve_staging(c, 1, NULL, sb), "cube_client_reserve_staging", "sizes is NULL")  \
  X("E143", "cube_client_reserve_staging", "out_bytes NULL", INV,                                \
    cube_client_reserve_staging(c, 1, sizes2, NULL), "cube_client_reserve_staging", "out_bytes", "NULL") \
  X("E144", "cube_client_create_from_slice_pinned", "client NULL", INV,                          \
    cube_client_create_from_slice_pinned(NULL, buf, 16, &h), "cube_client_create_from_slice_pinned", "client is NULL") \
  X("E145", "cube_client_create_from_slice_pinned", "out_handle NULL", INV,                      \
    cube_client_create_from_slice_pinned(c, buf, 16, NULL), "cube_client_create_from_slice_pinned", "out_handle", "NULL") \
  X("E146", "cube_client_create_from_slice_pinned", "data NULL", INV,                            \
    cube_client_create_from_slice_pinned(c, NULL, 16, &h), "cube_client_create_from_slice_pinned", "data is NULL") \
  X("E147", "cube_client_create_from_slice_pinned", "size 0", INV,                               \
    cube_client_create_from_slice_pinned(c, buf, 0, &h), "cube_client_create_from_slice_pinned", "size 0") \
  X("E148", "cube_client_create_tensors_from_slices_pinned", "data NULL", INV,                   \
    cube_client_create_tensors_from_slices_pinned(c, 2, descs2, NULL, sizes2, ts), "cube_client_create_tensors_from_slices_pinned", "data is NULL") \
  X("E149", "cube_client_create_tensors_from_slices_pinned", "sizes NULL", INV,                  \
    cube_client_create_tensors_from_slices_pinned(c, 2, descs2, data2, NULL, ts), "cube_client_create_tensors_from_slices_pinned", "sizes is NULL") \
  X("E150", "cube_client_create_tensors_from_slices_pinned", "descs NULL", INV,                  \
    cube_client_create_tensors_from_slices_pinned(c, 2, NULL, data2, sizes2, ts), "cube_client_create_tensors_from_slices_pinned", "descs is NULL") \
  X("E151", "cube_client_create_tensors_from_slices_pinned", "out_tensors NULL", INV,            \
    cube_client_create_tensors_from_slices_pinned(c, 2, descs2, data2, sizes2, NULL), "cube_client_create_tensors_from_slices_pinned", "out_tensors is NULL") \
  X("E152", "cube_client_create_tensors_from_slices_pinned", "data[1] NULL", INV,                \
    cube_client_create_tensors_from_slices_pinned(c, 2, descs2, data2_null, sizes2, ts), "cube_client_create_tensors_from_slices_pinned", "data[1] is NULL") \
  X("E153", "cube_client_create_tensors_from_slices_pinned", "sizes[1] 8 != 16 the shape needs", INV, \
    cube_client_create_tensors_from_slices_pinned(c, 2, descs2, data2, sizes2_bad, ts), "cube_client_create_tensors_from_slices_pinned", "[1] holds 8 bytes", "needs 16") \
  X("E154", "cube_client_staging", "client NULL", INV, cube_client_staging(NULL, 1, sb, false),   \
    "cube_client_staging", "client is NULL")                                                     \
  X("E155", "cube_client_staging", "inout_bytes NULL with count 1", INV,                         \
    cube_client_staging(c, 1, NULL, false), "cube_client_staging", "inout_bytes is NULL")        \
  X("E156", "cube_client_staging", "inout_bytes[1] NULL", INV,                                   \
    cube_client_staging(c, 2, staging_null, false), "cube_client_staging", "inout_bytes[1] is NULL")

/* Uninitialised memory. */
#define G_EMPTY(X, V)                                                                             \
  X("E157", "cube_client_empty", "client NULL", INV, cube_client_empty(NULL, 16, &h),            \
    "cube_client_empty", "client is NULL")                                                       \
  X("E158", "cube_client_empty", "out_handle NULL", INV, cube_client_empty(c, 16, NULL),         \
    "cube_client_empty", "out_handle", "NULL")                                                   \
  X("E159", "cube_client_empty", "size 0", INV, cube_client_empty(c, 0, &h),                     \
    "cube_client_empty", "size 0 is invalid")                                                    \
  X("E160", "cube_client_empty", "size max_page_size + 1", INV,                                  \
    cube_client_empty(c, (size_t)oversize, &h), "cube_client_empty", "exceeds the largest single allocation", "max_page_size") \
  X("E161", "cube_client_empty_tensor", "out_tensor NULL", INV,                                  \
    cube_client_empty_tensor(c, 2, shape44, 4, NULL), "cube_client_empty_tensor", "out_tensor", "NULL") \
  X("E162", "cube_client_empty_tensor", "rank 13 > CUBE_MAX_RANK", INV,                          \
    cube_client_empty_tensor(c, 13, shape13, 4, &t), "cube_client_empty_tensor", "rank 13", "CUBE_MAX_RANK") \
  X("E163", "cube_client_empty_tensor", "shape NULL with rank 2", INV,                           \
    cube_client_empty_tensor(c, 2, NULL, 4, &t), "cube_client_empty_tensor", "shape", "NULL", "rank 2") \
  X("E164", "cube_client_empty_tensor", "elem_size 0", INV,                                      \
    cube_client_empty_tensor(c, 2, shape44, 0, &t), "cube_client_empty_tensor", "elem_size is 0") \
  X("E165", "cube_client_empty_tensor", "a zero dimension", INV,                                 \
    cube_client_empty_tensor(c, 2, shape_zero, 4, &t), "cube_client_empty_tensor", "shape[1] is 0") \
  X("E166", "cube_client_empty_tensor", "shape whose size overflows (2^63 x 4)", INV,            \
    cube_client_empty_tensor(c, 2, shape_huge, 4, &t), "cube_client_empty_tensor", "overflows")   \
  X("E167", "cube_client_empty_tensor", "shape beyond max_page_size", INV,                       \
    cube_client_empty_tensor(c, 1, shape_over, 1, &t), "cube_client_empty_tensor", "exceeds", "max_page_size") \
  X("E168", "cube_client_empty_tensors", "out_tensors NULL", INV,                                \
    cube_client_empty_tensors(c, 2, descs2, NULL), "cube_client_empty_tensors", "out_tensors", "NULL") \
  X("E169", "cube_client_empty_tensors", "descs NULL", INV, cube_client_empty_tensors(c, 2, NULL, ts), \
    "cube_client_empty_tensors", "descs is NULL", "2 tensors")                                   \
  X("E170", "cube_client_empty_tensors", "descs[1].elem_size 0", INV,                            \
    cube_client_empty_tensors(c, 2, descs2_bad, ts), "cube_client_empty_tensors", "descs[1].elem_size is 0")

/* Reading handles. */
#define G_READ(X, V)                                                                              \
  X("E171", "cube_client_read", "client NULL", INV, cube_client_read(NULL, 1, &live, ob),        \
    "cube_client_read", "client is NULL")                                                        \
  X("E172", "cube_client_read", "out_bytes NULL", INV, cube_client_read(c, 1, &live, NULL),      \
    "cube_client_read", "out_bytes", "NULL")                                                     \
  X("E173", "cube_client_read", "count 0", INV, cube_client_read(c, 0, &live, ob),               \
    "cube_client_read", "count is 0")                                                            \
  X("E174", "cube_client_read", "handles NULL", INV, cube_client_read(c, 1, NULL, ob),           \
    "cube_client_read", "handles is NULL")                                                       \
  X("E175", "cube_client_read", "handles[1] the null handle", INV, cube_client_read(c, 2, live_null, ob), \
    "cube_client_read", "handles[1]", "null handle")                                             \
  X("E176", "cube_client_read", "handles[0] released", NOTF, cube_client_read(c, 1, &released, ob), \
    "cube_client_read", "handles[0]", "released")                                                \
  X("E177", "cube_client_read", "handles[0] never existed (random id)", NOTF,                    \
    cube_client_read(c, 1, &rnd, ob), "cube_client_read", "handles[0]", "0xffffffff0fffffff", "never existed") \
  X("E178", "cube_client_read_async", "out_future NULL", INV, cube_client_read_async(c, 1, &live, NULL), \
    "cube_client_read_async", "out_future", "NULL")                                              \
  X("E179", "cube_client_read_async", "client NULL", INV, cube_client_read_async(NULL, 1, &live, &fut), \
    "cube_client_read_async", "client is NULL")                                                  \
  X("E180", "cube_client_read_async", "handles[0] released", NOTF,                               \
    cube_client_read_async(c, 1, &released, &fut), "cube_client_read_async", "handles[0]", "released") \
  X("E181", "cube_client_read_one", "out_bytes NULL", INV, cube_client_read_one(c, live, NULL),  \
    "cube_client_read_one", "out_bytes", "NULL")                                                 \
  X("E182", "cube_client_read_one", "client NULL", INV, cube_client_read_one(NULL, live, ob),    \
    "cube_client_read_one", "client is NULL")                                                    \
  X("E183", "cube_client_read_one", "the null handle", INV, cube_client_read_one(c, CUBE_HANDLE_NULL, ob), \
    "cube_client_read_one", "handles[0]", "null handle")                                         \
  X("E184", "cube_client_read_one", "released handle", NOTF, cube_client_read_one(c, released, ob), \
    "cube_client_read_one", "handles[0]", "released")

/* Reading tensors. */
#define G_READ_TENSOR(X, V)                                                                       \
  X("E185", "cube_client_read_tensor", "client NULL", INV, cube_client_read_tensor(NULL, 1, &t, ob), \
    "cube_client_read_tensor", "client is NULL")                                                 \
  X("E186", "cube_client_read_tensor", "out_bytes NULL", INV, cube_client_read_tensor(c, 1, &t, NULL), \
    "cube_client_read_tensor", "out_bytes", "NULL")                                              \
  X("E187", "cube_client_read_tensor", "count 0", INV, cube_client_read_tensor(c, 0, &t, ob),    \
    "cube_client_read_tensor", "count is 0")                                                     \
  X("E188", "cube_client_read_tensor", "tensors NULL", INV, cube_client_read_tensor(c, 1, NULL, ob), \
    "cube_client_read_tensor", "tensors is NULL")                                                \
  X("E189", "cube_client_read_tensor", "unreadable (transposed) strides", UNSUP,                 \
    cube_client_read_tensor(c, 1, &t_transposed, ob), "cube_client_read_tensor", "tensors[0]", "strides [1, 4]", "contiguous row-major") \
  X("E190", "cube_client_read_tensor", "tensor rank 13 > CUBE_MAX_RANK", INV,                    \
    cube_client_read_tensor(c, 1, &t_rank13, ob), "cube_client_read_tensor", "tensors[0]", "rank 13") \
  X("E191", "cube_client_read_tensor", "tensor elem_size 0", INV,                                \
    cube_client_read_tensor(c, 1, &t_elem0, ob), "cube_client_read_tensor", "tensors[0]", "elem_size is 0") \
  X("E192", "cube_client_read_tensor", "shape needs more bytes than the handle views", INV,       \
    cube_client_read_tensor(c, 1, &t_small, ob), "cube_client_read_tensor", "tensors[0] needs 64 bytes", "views 16") \
  X("E193", "cube_client_read_tensor", "tensors[0].handle released", NOTF,                       \
    cube_client_read_tensor(c, 1, &t_released, ob), "cube_client_read_tensor", "tensors[0].handle", "released") \
  X("E194", "cube_client_read_tensor_async", "out_future NULL", INV,                             \
    cube_client_read_tensor_async(c, 1, &t, NULL), "cube_client_read_tensor_async", "out_future", "NULL") \
  X("E195", "cube_client_read_tensor_async", "unreadable (transposed) strides", UNSUP,           \
    cube_client_read_tensor_async(c, 1, &t_transposed, &fut), "cube_client_read_tensor_async", "tensors[0]", "strides [1, 4]")

/* Futures. */
#define G_FUTURE(X, V)                                                                            \
  X("E196", "cube_future_wait", "future NULL", INV, cube_future_wait(NULL, UINT64_MAX, ob),      \
    "cube_future_wait", "future is NULL")                                                        \
  X("E197", "cube_future_wait", "out_bytes NULL for a read future", INV,                         \
    cube_future_wait(fut_read, UINT64_MAX, NULL), "cube_future_wait", "out_bytes is NULL", "1 results") \
  X("E198", "cube_future_wait", "second wait after a successful wait", PRECOND,                  \
    cube_future_wait(fut_done, UINT64_MAX, ob), "cube_future_wait", "already taken")             \
  X("E199", "cube_future_wait", "timeout 0 while the work still runs", DEADLINE,                 \
    cube_future_wait(fut_slow, 0, ob), "cube_future_wait", "not ready after 0 ns")               \
  V("E200", "cube_future_is_ready", "future NULL", "false", !cube_future_is_ready(NULL))         \
  V("E201", "cube_future_count", "future NULL", "0", cube_future_count(NULL) == 0)

/* Handles. */
#define G_HANDLES(X, V)                                                                           \
  X("E202", "cube_handle_release_checked", "the null handle", INV,                               \
    cube_handle_release_checked(CUBE_HANDLE_NULL), "cube_handle_release_checked", "null handle") \
  X("E203", "cube_handle_release_checked", "released handle", NOTF,                              \
    cube_handle_release_checked(released), "cube_handle_release_checked", "already released")    \
  X("E204", "cube_handle_release_checked", "random id", NOTF, cube_handle_release_checked(rnd),  \
    "cube_handle_release_checked", "0xffffffff0fffffff", "never existed")                        \
  X("E205", "cube_handle_device", "out_device NULL", INV, cube_handle_device(live, NULL),        \
    "cube_handle_device", "out_device", "NULL")                                                  \
  X("E206", "cube_handle_device", "the null handle", INV, cube_handle_device(CUBE_HANDLE_NULL, &did), \
    "cube_handle_device", "null handle")                                                         \
  X("E207", "cube_handle_device", "released handle", NOTF, cube_handle_device(released, &did),   \
    "cube_handle_device", "released")                                                            \
  X("E208", "cube_handle_device", "random id", NOTF, cube_handle_device(rnd, &did),              \
    "cube_handle_device", "0xffffffff0fffffff")                                                  \
  X("E209", "cube_handle_offset_view", "out_handle NULL", INV, cube_handle_offset_view(live, 0, 0, NULL), \
    "cube_handle_offset_view", "out_handle", "NULL")                                             \
  X("E210", "cube_handle_offset_view", "released handle", NOTF,                                  \
    cube_handle_offset_view(released, 0, 0, &h), "cube_handle_offset_view", "released")          \
  X("E211", "cube_handle_offset_view", "the null handle", INV,                                   \
    cube_handle_offset_view(CUBE_HANDLE_NULL, 0, 0, &h), "cube_handle_offset_view", "null handle") \
  X("E212", "cube_handle_offset_view", "offsets 8 + 8 leave nothing of a 16-byte view", INV,     \
    cube_handle_offset_view(live, 8, 8, &h), "cube_handle_offset_view", "offsets 8 + 8", "16 bytes") \
  X("E213", "cube_handle_offset_view", "offsets that overflow (2^64-1 + 1)", INV,                \
    cube_handle_offset_view(live, UINT64_MAX, 1, &h), "cube_handle_offset_view", "leave nothing") \
  V("E214", "cube_handle_size", "released / null / random handle", "0",                          \
    cube_handle_size(released) == 0 && cube_handle_size(CUBE_HANDLE_NULL) == 0 && cube_handle_size(rnd) == 0) \
  V("E215", "cube_handle_buffer_size", "released / null / random handle", "0",                   \
    cube_handle_buffer_size(released) == 0 && cube_handle_buffer_size(rnd) == 0)                 \
  V("E216", "cube_handle_offset", "released / null / random handle", "0",                        \
    cube_handle_offset(released) == 0 && cube_handle_offset(rnd) == 0)                           \
  V("E217", "cube_handle_can_mut", "released / null / random handle", "false",                   \
    !cube_handle_can_mut(released) && !cube_handle_can_mut(CUBE_HANDLE_NULL) && !cube_handle_can_mut(rnd)) \
  V("E218", "cube_handle_retain", "released / random handle", "the handle, unchanged (no reference taken)", \
    cube_handle_retain(released).id == released.id && cube_handle_retain(rnd).id == rnd.id)      \
  V("E219", "cube_handle_release", "released / null handle", "no effect",                        \
    (cube_handle_release(released), cube_handle_release(CUBE_HANDLE_NULL), cube_handle_size(live) == 16))

/* Resources. */
#define G_RESOURCE(X, V)                                                                          \
  X("E220", "cube_client_get_resource", "client NULL", INV, cube_client_get_resource(NULL, live, &res), \
    "cube_client_get_resource", "client is NULL")                                                \
  X("E221", "cube_client_get_resource", "out_resource NULL", INV, cube_client_get_resource(c, live, NULL), \
    "cube_client_get_resource", "out_resource", "NULL")                                          \
  X("E222", "cube_client_get_resource", "the null handle", INV,                                  \
    cube_client_get_resource(c, CUBE_HANDLE_NULL, &res), "cube_client_get_resource", "handle", "null handle") \
  X("E223", "cube_client_get_resource", "released handle", NOTF,                                 \
    cube_client_get_resource(c, released, &res), "cube_client_get_resource", "handle", "released") \
  V("E224", "cube_resource_ptr", "resource NULL", "NULL", cube_resource_ptr(NULL) == NULL)       \
  V("E225", "cube_resource_size", "resource NULL", "0", cube_resource_size(NULL) == 0)

/* Exclusive access and allocation modes. */
#define G_MODES(X, V)                                                                             \
  X("E226", "cube_client_exclusive", "client NULL", INV, cube_client_exclusive(NULL, task_ok, NULL), \
    "cube_client_exclusive", "client is NULL")                                                   \
  X("E227", "cube_client_exclusive", "fn NULL", INV, cube_client_exclusive(c, NULL, NULL),       \
    "cube_client_exclusive", "fn is NULL")                                                       \
  X("E228", "cube_client_allocation_mode", "client NULL", INV,                                   \
    cube_client_allocation_mode(NULL, CUBE_ALLOCATION_AUTO), "cube_client_allocation_mode", "client is NULL") \
  X("E229", "cube_client_allocation_mode", "mode out of range (2)", INV,                         \
    cube_client_allocation_mode(c, (cube_allocation_mode_t)2), "cube_client_allocation_mode", "mode 2") \
  X("E230", "cube_client_memory_persistent_allocation", "client NULL", INV,                      \
    cube_client_memory_persistent_allocation(NULL, task_ok, NULL), "cube_client_memory_persistent_allocation", "client is NULL") \
  X("E231", "cube_client_memory_persistent_allocation", "fn NULL", INV,                          \
    cube_client_memory_persistent_allocation(c, NULL, NULL), "cube_client_memory_persistent_allocation", "fn is NULL")

/* Memory accounting. */
#define G_MEMORY(X, V)                                                                            \
  X("E232", "cube_client_memory_cleanup", "client NULL", INV, cube_client_memory_cleanup(NULL),  \
    "cube_client_memory_cleanup", "client is NULL")                                              \
  X("E233", "cube_client_memory_usage", "client NULL", INV, cube_client_memory_usage(NULL, &usage), \
    "cube_client_memory_usage", "client is NULL")                                                \
  X("E234", "cube_client_memory_usage", "out_usage NULL", INV, cube_client_memory_usage(c, NULL), \
    "cube_client_memory_usage", "out_usage", "NULL")                                             \
  X("E235", "cube_client_memory_usage", "stream with a deferred launch error", PRECOND,          \
    cube_client_memory_usage(c, &usage), "cube_client_memory_usage", "1 deferred error", "flush or sync") \
  X("E236", "cube_client_flush", "stream with a deferred launch error (reported once)", LAUNCHF, \
    cube_client_flush(c), "cube_client_flush", "k_fail")                                         \
  X("E237", "cube_client_memory_report", "client NULL", INV, cube_client_memory_report(NULL, &report), \
    "cube_client_memory_report", "client is NULL")                                               \
  X("E238", "cube_client_memory_report", "out_report NULL", INV, cube_client_memory_report(c, NULL), \
    "cube_client_memory_report", "out_report", "NULL")                                           \
  X("E239", "cube_client_memory_usage_device", "client NULL", INV,                               \
    cube_client_memory_usage_device(NULL, &usage), "cube_client_memory_usage_device", "client is NULL") \
  X("E240", "cube_client_memory_usage_device", "out_usage NULL", INV,                            \
    cube_client_memory_usage_device(c, NULL), "cube_client_memory_usage_device", "out_usage", "NULL") \
  X("E241", "cube_client_memory_cleanup_device", "client NULL", INV,                             \
    cube_client_memory_cleanup_device(NULL), "cube_client_memory_cleanup_device", "client is NULL")

/* Launch. */
#define G_LAUNCH(X, V)                                                                            \
  X("E242", "cube_client_launch", "client NULL", INV, cube_client_launch(NULL, k, one, 2, args), \
    "cube_client_launch", "client is NULL")                                                      \
  X("E243", "cube_client_launch", "kernel NULL", INV, cube_client_launch(c, NULL, one, 2, args), \
    "cube_client_launch", "kernel is NULL")                                                      \
  X("E244", "cube_client_launch", "1 argument for a kernel of 2", INV,                           \
    cube_client_launch(c, k, one, 1, args), "cube_client_launch", "'k_args'", "takes 2 arguments", "got 1") \
  X("E245", "cube_client_launch", "args NULL with arg_count 2", INV,                             \
    cube_client_launch(c, k, one, 2, NULL), "cube_client_launch", "'k_args'", "args is NULL")     \
  X("E246", "cube_client_launch", "argument 1 of the wrong kind (f32 for u32)", INV,             \
    cube_client_launch(c, k, one, 2, args_kind), "cube_client_launch", "'k_args'", "argument 1 is f32", "expected u32") \
  X("E247", "cube_client_launch", "argument 0 the null handle", INV,                             \
    cube_client_launch(c, k, one, 2, args_null), "cube_client_launch", "'k_args'", "argument 0", "null handle") \
  X("E248", "cube_client_launch", "argument 0 a released handle", NOTF,                          \
    cube_client_launch(c, k, one, 2, args_released), "cube_client_launch", "'k_args'", "argument 0", "released") \
  X("E249", "cube_client_launch", "argument 0 a random handle id", NOTF,                         \
    cube_client_launch(c, k, one, 2, args_rnd), "cube_client_launch", "'k_args'", "argument 0", "never existed") \
  X("E250", "cube_client_launch", "count kind out of range (5)", INV,                            \
    cube_client_launch(c, k, bad_kind, 2, args), "cube_client_launch", "'k_args'", "count kind 5") \
  X("E251", "cube_client_launch", "dynamic count: the null handle", INV,                         \
    cube_client_launch(c, k, dyn_null, 2, args), "cube_client_launch", "'k_args'", "dynamic count handle", "null handle") \
  X("E252", "cube_client_launch", "dynamic count: a handle of 4 bytes (needs 12)", INV,          \
    cube_client_launch(c, k, dyn_small, 2, args), "cube_client_launch", "'k_args'", "views 4 bytes", "needs 12") \
  X("E253", "cube_client_launch", "kernel cube_dim (1024, 2, 1) beyond the device", RANGE,       \
    cube_client_launch(c, kbig, one, 0, NULL), "cube_client_launch", "'k_big'", "(1024, 2, 1)", "2048 units") \
  X("E316", "cube_client_launch", "argument 0 a buffer of 3 bytes for CUBE_ARRAY(float)", INV,   \
    cube_client_launch(c, kfill, one, 1, args_three), "cube_client_launch", "'fill'", "argument 0 ('out', CUBE_ARRAY(float))", "views 3 bytes", "one element of 4 bytes") \
  X("E317", "cube_client_launch", "native kernel shared_memory_size 2 MiB (the CPU has 1 MiB)", RANGE, \
    cube_client_launch(c, kshared, one, 0, NULL), "cube_client_launch", "'k_shared'", "shared_memory_size 2097152", "cpu:0") \
  X("E254", "cube_client_launch_mode", "execution mode out of range (3)", INV,                   \
    cube_client_launch_mode(c, k, one, 2, args, (cube_execution_mode_t)3), "cube_client_launch_mode", "'k_args'", "execution mode 3") \
  X("E255", "cube_client_launch_mode", "client NULL", INV,                                       \
    cube_client_launch_mode(NULL, k, one, 2, args, CUBE_EXEC_CHECKED), "cube_client_launch_mode", "client is NULL")         \
  X("E256", "cube_client_launch_unchecked", "client NULL", INV,                                  \
    cube_client_launch_unchecked(NULL, k, one, 2, args), "cube_client_launch_unchecked", "client is NULL") \
  X("E257", "cube_client_launch_unchecked", "1 argument for a kernel of 2", INV,                 \
    cube_client_launch_unchecked(c, k, one, 1, args), "cube_client_launch_unchecked", "'k_args'", "takes 2 arguments", "got 1")   \
  X("E258", "cube_client_precompile", "client NULL", INV,                                        \
    cube_client_precompile(NULL, 1, &k, CUBE_EXEC_CHECKED), "cube_client_precompile", "client is NULL") \
  X("E259", "cube_client_precompile", "kernels NULL with count 1", INV,                          \
    cube_client_precompile(c, 1, NULL, CUBE_EXEC_CHECKED), "cube_client_precompile", "kernels is NULL") \
  X("E260", "cube_client_precompile", "execution mode out of range (3)", INV,                    \
    cube_client_precompile(c, 1, &k, (cube_execution_mode_t)3), "cube_client_precompile", "execution mode 3") \
  X("E261", "cube_client_precompile", "kernels[1] NULL", INV,                                    \
    cube_client_precompile(c, 2, kernels_null, CUBE_EXEC_CHECKED), "cube_client_precompile", "kernels[1] is NULL")

/* Synchronisation, profiling, vector sizes. */
#define G_SYNC(X, V)                                                                              \
  X("E262", "cube_client_flush", "client NULL", INV, cube_client_flush(NULL), "cube_client_flush", "client is NULL") \
  X("E263", "cube_client_sync", "client NULL", INV, cube_client_sync(NULL), "cube_client_sync", "client is NULL") \
  X("E264", "cube_client_sync_async", "client NULL", INV, cube_client_sync_async(NULL, &fut),    \
    "cube_client_sync_async", "client is NULL")                                                  \
  X("E265", "cube_client_sync_async", "out_future NULL", INV, cube_client_sync_async(c, NULL),   \
    "cube_client_sync_async", "out_future", "NULL")                                              \
  X("E266", "cube_client_profile", "client NULL", INV,                                           \
    cube_client_profile(NULL, task_ok, NULL, "p", &dur), "cube_client_profile", "client is NULL") \
  X("E267", "cube_client_profile", "fn NULL", INV, cube_client_profile(c, NULL, NULL, "p", &dur), \
    "cube_client_profile", "fn is NULL")                                                         \
  X("E268", "cube_client_profile", "out_duration NULL", INV,                                     \
    cube_client_profile(c, task_ok, NULL, "p", NULL), "cube_client_profile", "out_duration", "NULL") \
  X("E269", "cube_client_io_optimized_vector_sizes", "client NULL", INV,                         \
    cube_client_io_optimized_vector_sizes(NULL, 4, vs, 8, &count), "cube_client_io_optimized_vector_sizes", "client is NULL") \
  X("E270", "cube_client_io_optimized_vector_sizes", "out_count NULL", INV,                      \
    cube_client_io_optimized_vector_sizes(c, 4, vs, 8, NULL), "cube_client_io_optimized_vector_sizes", "out_count", "NULL") \
  X("E271", "cube_client_io_optimized_vector_sizes", "elem_size 0", INV,                         \
    cube_client_io_optimized_vector_sizes(c, 0, vs, 8, &count), "cube_client_io_optimized_vector_sizes", "elem_size 0") \
  X("E272", "cube_client_io_optimized_vector_sizes", "capacity 1 too small (out_count still set)", INV, \
    cube_client_io_optimized_vector_sizes(c, 1, vs, 1, &count), "cube_client_io_optimized_vector_sizes", "capacity 1")

/* Handles of another device (CUBE_CPU_DEVICES=2) and copies between devices. */
#define G_CROSS_DEVICE(X, V)                                                                      \
  X("E273", "cube_client_read_one", "handle of cpu:1 on a client of cpu:0", INV,                 \
    cube_client_read_one(c, h1, ob), "cube_client_read_one", "handles[0]", "lives on", "not on this client's") \
  X("E274", "cube_client_read_tensor", "tensor of cpu:1 on a client of cpu:0", INV,              \
    cube_client_read_tensor(c, 1, &t1, ob), "cube_client_read_tensor", "tensors[0].handle", "lives on") \
  X("E275", "cube_client_launch", "argument 0 a handle of cpu:1 on a client of cpu:0", INV,      \
    cube_client_launch(c, k, one, 2, args_other), "cube_client_launch", "argument 0", "lives on") \
  X("E276", "cube_client_get_resource", "handle of cpu:1 on a client of cpu:0", INV,             \
    cube_client_get_resource(c, h1, &res), "cube_client_get_resource", "lives on")               \
  X("E277", "cube_client_all_reduce", "src of cpu:1 on a client of cpu:0", INV,                  \
    cube_client_all_reduce(c, h1, h0, CUBE_DTYPE_F32, 2, devs2, CUBE_REDUCE_SUM), "cube_client_all_reduce: src", "lives on") \
  X("E278", "cube_client_to_client", "src NULL", INV, cube_client_to_client(NULL, h0, c1, &h),   \
    "cube_client_to_client", "src", "client is NULL")                                            \
  X("E279", "cube_client_to_client", "dst NULL", INV, cube_client_to_client(c, h0, NULL, &h),    \
    "cube_client_to_client", "dst", "client is NULL")                                            \
  X("E280", "cube_client_to_client", "out_handle NULL", INV, cube_client_to_client(c, h0, c1, NULL), \
    "cube_client_to_client", "out_handle", "NULL")                                               \
  X("E281", "cube_client_to_client", "handle that lives on dst, not src", INV,                   \
    cube_client_to_client(c, h1, c1, &h), "cube_client_to_client", "lives on")                   \
  X("E282", "cube_client_to_client", "released handle", NOTF,                                    \
    cube_client_to_client(c, released, c1, &h), "cube_client_to_client", "released")             \
  X("E283", "cube_client_to_client_tensor", "tensor NULL", INV,                                  \
    cube_client_to_client_tensor(c, NULL, c1, &t), "cube_client_to_client_tensor", "tensor is NULL") \
  X("E284", "cube_client_to_client_tensor", "out_tensor NULL", INV,                              \
    cube_client_to_client_tensor(c, &t0, c1, NULL), "cube_client_to_client_tensor", "out_tensor", "NULL") \
  X("E285", "cube_client_to_client_tensor", "src NULL", INV,                                     \
    cube_client_to_client_tensor(NULL, &t0, c1, &t), "cube_client_to_client_tensor", "src", "client is NULL") \
  X("E286", "cube_client_to_client_tensor", "tensor with unreadable strides", UNSUP,             \
    cube_client_to_client_tensor(c, &t0_transposed, c1, &t), "cube_client_to_client_tensor", "strides [1, 4]") \
  X("E320", "cube_client_accept_contents", "client NULL", INV,                                   \
    cube_client_accept_contents(NULL, h0), "cube_client_accept_contents", "client is NULL")      \
  X("E321", "cube_client_accept_contents", "released handle", NOTF,                              \
    cube_client_accept_contents(c, released), "cube_client_accept_contents", "handle", "released") \
  X("E322", "cube_client_accept_contents", "handle of cpu:1 on a client of cpu:0", INV,          \
    cube_client_accept_contents(c, h1), "cube_client_accept_contents", "handle", "lives on")

/* Collectives (the CPU backend has the host transport). */
#define G_COLLECTIVES(X, V)                                                                       \
  X("E287", "cube_client_ensure_init_collective", "devices listing cpu:0 twice", INV,          \
    cube_client_ensure_init_collective(c, 2, devs_twice), "cube_client_ensure_init_collective", "lists cpu:0 twice") \
  X("E288", "cube_client_ensure_init_collective", "client NULL", INV,                            \
    cube_client_ensure_init_collective(NULL, 1, devs1), "cube_client_ensure_init_collective", "client is NULL") \
  X("E289", "cube_client_ensure_init_collective", "device_count 0", INV,                         \
    cube_client_ensure_init_collective(c, 0, devs1), "cube_client_ensure_init_collective", "device_count is 0") \
  X("E290", "cube_client_ensure_init_collective", "devices NULL", INV,                           \
    cube_client_ensure_init_collective(c, 1, NULL), "cube_client_ensure_init_collective", "devices is NULL") \
  X("E291", "cube_client_ensure_init_collective", "devices[1] out of range (cpu:99)", NOTF,      \
    cube_client_ensure_init_collective(c, 2, devs_bad), "cube_client_ensure_init_collective", "devices[1] = cpu:99", "does not exist") \
  X("E292", "cube_client_ensure_init_collective", "devices[0] of a bad backend (9)", INV,        \
    cube_client_ensure_init_collective(c, 1, devs_bad_backend), "cube_client_ensure_init_collective", "devices[0].backend 9", "invalid") \
  X("E293", "cube_option_set", "CUBE_COLLECTIVE_TIMEOUT='soon'", INV,                           \
    set_bad_timeout(c), "cube_option_set", "CUBE_COLLECTIVE_TIMEOUT", "'soon'", "seconds") \
  X("E294", "cube_client_sync_collective", "client NULL", INV, cube_client_sync_collective(NULL), \
    "cube_client_sync_collective", "client is NULL")                                             \
  X("E295", "cube_client_all_reduce", "src of 64 bytes, dst of 32", INV,                         \
    cube_client_all_reduce(c, h0, h_small, CUBE_DTYPE_F32, 1, devs1, CUBE_REDUCE_SUM), "cube_client_all_reduce", "src views 64 bytes but dst 32") \
  X("E296", "cube_client_all_reduce", "client NULL", INV,                                        \
    cube_client_all_reduce(NULL, h0, h0b, CUBE_DTYPE_F32, 1, devs1, CUBE_REDUCE_SUM), "cube_client_all_reduce", "client is NULL") \
  X("E297", "cube_client_all_reduce", "src the null handle", INV,                                \
    cube_client_all_reduce(c, CUBE_HANDLE_NULL, h0b, CUBE_DTYPE_F32, 1, devs1, CUBE_REDUCE_SUM), "cube_client_all_reduce: src", "null handle") \
  X("E298", "cube_client_all_reduce", "dst released", NOTF,                                      \
    cube_client_all_reduce(c, h0, released, CUBE_DTYPE_F32, 1, devs1, CUBE_REDUCE_SUM), "cube_client_all_reduce: dst", "released") \
  X("E299", "cube_client_all_reduce", "dtype out of range (10)", INV,              \
    cube_client_all_reduce(c, h0, h0b, (cube_dtype_t)10, 1, devs1, CUBE_REDUCE_SUM), "cube_client_all_reduce", "dtype 10") \
  X("E300", "cube_client_all_reduce", "reduce op out of range (7)", INV,                         \
    cube_client_all_reduce(c, h0, h0b, CUBE_DTYPE_F32, 1, devs1, (cube_reduce_op_t)7), "cube_client_all_reduce", "reduce op 7") \
  X("E301", "cube_client_all_reduce", "device_count 0", INV,                                     \
    cube_client_all_reduce(c, h0, h0b, CUBE_DTYPE_F32, 0, devs1, CUBE_REDUCE_SUM), "cube_client_all_reduce", "device_count is 0") \
  X("E302", "cube_client_all_reduce", "devices NULL", INV,                                       \
    cube_client_all_reduce(c, h0, h0b, CUBE_DTYPE_F32, 1, NULL, CUBE_REDUCE_SUM), "cube_client_all_reduce", "devices is NULL") \
  X("E303", "cube_client_all_reduce", "devices[1] out of range (cpu:99)", NOTF,                  \
    cube_client_all_reduce(c, h0, h0b, CUBE_DTYPE_F32, 2, devs_bad, CUBE_REDUCE_SUM), "cube_client_all_reduce", "devices[1] = cpu:99") \
  X("E462", "cube_client_shrink_collective", "client NULL", INV,                                 \
    cube_client_shrink_collective(NULL, 1, devs1, &shrunk_n, shrunk), "cube_client_shrink_collective", "client is NULL") \
  X("E463", "cube_client_shrink_collective", "out_count NULL", INV,                              \
    cube_client_shrink_collective(c, 1, devs1, NULL, shrunk), "cube_client_shrink_collective", "out_count", "NULL") \
  X("E464", "cube_client_shrink_collective", "out_devices NULL", INV,                            \
    cube_client_shrink_collective(c, 1, devs1, &shrunk_n, NULL), "cube_client_shrink_collective", "out_devices", "NULL") \
  X("E465", "cube_client_shrink_collective", "device_count 0", INV,                              \
    cube_client_shrink_collective(c, 0, devs1, &shrunk_n, shrunk), "cube_client_shrink_collective", "device_count is 0") \
  X("E466", "cube_client_shrink_collective", "devices[1] out of range (cpu:99)", NOTF,           \
    cube_client_shrink_collective(c, 2, devs_bad, &shrunk_n, shrunk), "cube_client_shrink_collective", "devices[1] = cpu:99", "does not exist") \
  X("E467", "cube_client_shrink_collective", "devices listing cpu:0 twice", INV,                 \
    cube_client_shrink_collective(c, 2, devs_twice, &shrunk_n, shrunk), "cube_client_shrink_collective", "lists cpu:0 twice")

/* Kernel cache. */
#define G_CACHE(X, V)                                                                             \
  X("E304", "cube_kernel_cache_stats", "out_stats NULL", INV, cube_kernel_cache_stats(NULL),     \
    "cube_kernel_cache_stats", "out_stats", "NULL")                                              \
  X("E305", "cube_kernel_cache_dir_status", "CUBE_CACHE_DIR names a regular file", UNAVAIL,      \
    cache_dir_status_with(file), "cube kernel cache", file, "is not a directory", "kept in memory only") \
  X("E426", "cube_cpu_compiler_info", "out_info NULL", INV, cube_cpu_compiler_info(NULL),         \
    "cube_cpu_compiler_info", "out_info", "NULL")                                                \
  X("E427", "cube_cpu_compiler_info", "out_info->struct_size 4", INV, cc_info_with_struct_size(4), \
    "cube_cpu_compiler_info", "out_info->struct_size 4", "smaller")

/* Files that changed under a FILE buffer (cube_bytes_map_file). */
#define G_FILES(X, V)                                                                             \
  X("E306", "cube_client_create", "FILE bytes whose file shrank from 64 to 10 bytes", RANGE,     \
    cube_client_create(c, shrunk_file_bytes(path), &h), "cube_client_create", "bytes[0]", path, "64 bytes", "now holds 10") \
  X("E307", "cube_client_staging", "inout_bytes[0] a FILE buffer whose file shrank (64 to 10)", RANGE, \
    staging_shrunk(c, path), "cube_client_staging", "inout_bytes[0]", path, "now holds 10")

/* Tuning, execution policies, bundles, the cache as users manage it
 * (cube/tune.h, cube/execution.h, cube/bundle.h, cube/cache.h). */
#define G_TUNE(X, V)                                                                              \
  X("E340", "cube_tune_op_create", "desc NULL", INV, cube_tune_op_create(NULL, &op),            \
    "cube_tune_op_create", "desc", "NULL")                                                       \
  X("E341", "cube_tune_op_create", "out_op NULL", INV, cube_tune_op_create(&od, NULL),          \
    "cube_tune_op_create", "out_op", "NULL")                                                     \
  X("E342", "cube_tune_op_create", "candidate_count 0", INV, tune_op_with_count(0),             \
    "cube_tune_op_create", "candidate_count", "0")                                               \
  X("E343", "cube_tune_op_create", "candidate_count 33 (above CUBE_TUNE_MAX_CANDIDATES)", INV,  \
    tune_op_with_count(33), "cube_tune_op_create", "candidate_count", "33")                     \
  X("E344", "cube_tune_op_launch", "op NULL", INV, cube_tune_op_launch(NULL, c, 0, NULL),       \
    "cube_tune_op_launch", "NULL")                                                               \
  V("E345", "cube_tune_op_name", "op NULL", "\"\"", strcmp(cube_tune_op_name(NULL), "") == 0)   \
  V("E346", "cube_tune_outcome_name", "outcome out of range (99)", "\"unknown\"",              \
    strcmp(cube_tune_outcome_name((cube_tune_outcome_t)99), "unknown") == 0)                     \
  X("E347", "cube_client_execution_begin", "policy out of range (9)", INV,                      \
    cube_client_execution_begin(c, (cube_execution_policy_t)9, &ov), "cube_client_execution_begin", \
    "policy 9")                                                                                  \
  X("E348", "cube_execution_override_end", "override NULL", INV,                                \
    cube_execution_override_end(NULL), "cube_execution_override_end", "NULL")                   \
  V("E349", "cube_execution_policy_name", "policy out of range (9)", "\"unknown\"",            \
    strcmp(cube_execution_policy_name((cube_execution_policy_t)9), "unknown") == 0)              \
  X("E350", "cube_kernel_cache_list", "out_entries NULL", INV,                                  \
    cube_kernel_cache_list(NULL, &count), "cube_kernel_cache_list", "out_entries", "NULL")      \
  X("E351", "cube_bundle_export", "client NULL", INV, cube_bundle_export(NULL, path, NULL),     \
    "cube_bundle_export", "client", "NULL")                                                      \
  X("E352", "cube_bundle_export", "path NULL", INV, cube_bundle_export(c, NULL, NULL),          \
    "cube_bundle_export", "path", "NULL")                                                        \
  X("E353", "cube_bundle_describe", "out_info NULL", INV, cube_bundle_describe(path, NULL),     \
    "cube_bundle_describe", "out_info", "NULL")                                                  \
  X("E354", "cube_bundle_import", "path that does not exist", NOTF,                             \
    cube_bundle_import(c, missing, NULL), "cube_bundle_import", missing, "No such file")        \
  X("E355", "cube_bundle_import", "a file that is not a bundle", INV,                           \
    cube_bundle_import(c, path, NULL), "cube_bundle_import", path, "not a bundle")

/* struct_size of input and output structs, and the public status
 * constructor (include/cube/cube.h, "Struct sizes"). */
#define G_ABI(X, V)                                                                               \
  X("E308", "cube_client_init", "options->struct_size 12 (no layout has it)", UNSUP,             \
    init_with_struct_size(12), "cube_client_init", "options->struct_size 12", "cube_server_options_t") \
  X("E309", "cube_client_init", "options from a newer header with a newer field set", UNSUP,     \
    init_with_newer_field(), "cube_client_init", "options->struct_size", "larger", "not zero")  \
  X("E310", "cube_kernel_create", "desc->struct_size 12", UNSUP, kernel_with_struct_size(12),   \
    "cube_kernel_create", "desc->struct_size 12", "cube_kernel_desc_t")                          \
  X("E311", "cube_layout_compute", "descs[0].struct_size 12", UNSUP,                             \
    layout_with_struct_sizes(12, 12), "cube_layout_compute", "descs[0].struct_size 12", "cube_layout_desc_t") \
  X("E312", "cube_layout_compute", "descs[1].struct_size 0 after descs[0]'s 160", UNSUP,         \
    layout_with_struct_sizes(160, 0), "cube_layout_compute", "descs[1].struct_size is 0", "descs[0]'s is 160") \
  X("E313", "cube_client_memory_report", "out_report->struct_size 4", INV,                       \
    report_with_struct_size(c, 4), "cube_client_memory_report", "out_report->struct_size 4", "smaller") \
  X("E314", "cube_kernel_cache_stats", "out_stats->struct_size 4", INV,                          \
    stats_with_struct_size(4), "cube_kernel_cache_stats", "out_stats->struct_size 4", "smaller") \
  X("E315", "cube_status_make", "code 99 (not a cube_status_code_t)", CUBE_STATUS_INTERNAL,      \
    cube_status_make((cube_status_code_t)99, "step %d", 3), "cube_status_make", "code 99", "step 3")

/* DLPack export and import (include/cube/dlpack.h). The import rows build a
 * tensor of host memory with dl_*() below; a refused import leaves it the
 * caller's (its deleter is not called: the case checks). */
/* Traces and the profile summary (docs/observability.md). */
#define G_TRACE(X, V)                                                                             \
  X("E450", "cube_trace_start", "path NULL", INV, cube_trace_start(NULL), "cube_trace_start",    \
    "path", "NULL")                                                                              \
  X("E451", "cube_trace_start", "a path where a file exists", EXISTS, cube_trace_start(g_trace_existing), \
    "cube_trace_start", "exists", "never written over")                                          \
  X("E452", "cube_trace_stop", "no trace recording", PRECOND, cube_trace_stop(),                 \
    "cube_trace_stop", "no trace is recording")                                                  \
  X("E453", "cube_client_profile_summary", "out_summary NULL", INV,                              \
    cube_client_profile_summary(c, 0, NULL), "cube_client_profile_summary", "out_summary", "NULL") \
  X("E454", "cube_client_profile_summary", "flags 0x8", INV,                                     \
    cube_client_profile_summary(c, 8u, &g_summary), "cube_client_profile_summary", "flags", "0x8") \
  X("E455", "cube_client_profile_summary", "struct_size 8", INV, profile_summary_small(c),       \
    "cube_client_profile_summary", "struct_size 8", "rows")

#define G_DLPACK(X, V)                                                                            \
  X("E400", "cube_client_to_dlpack", "desc->handle NULL", INV,                                   \
    cube_client_to_dlpack(c, export_of(CUBE_HANDLE_NULL, 16, 0, 0), &vt), "cube_client_to_dlpack", "desc->handle") \
  X("E401", "cube_dlpack_export_initialize", "rank 13 > CUBE_MAX_RANK", INV,                     \
    cube_dlpack_export_initialize(h64, f32, 13, shape1, &ex), "cube_dlpack_export_initialize", "rank 13") \
  X("E402", "cube_dlpack_export_initialize", "shape NULL with rank 2", INV,                      \
    cube_dlpack_export_initialize(h64, f32, 2, NULL, &ex), "cube_dlpack_export_initialize", "shape is NULL", "rank 2") \
  X("E403", "cube_dlpack_export_initialize", "shape[0] = -1", INV,                               \
    cube_dlpack_export_initialize(h64, f32, 1, neg1, &ex), "cube_dlpack_export_initialize", "shape[0] is -1") \
  X("E404", "cube_dlpack_export_initialize", "out_export NULL", INV,                             \
    cube_dlpack_export_initialize(h64, f32, 1, shape1, NULL), "cube_dlpack_export_initialize", "out_export") \
  X("E405", "cube_client_to_dlpack", "desc NULL", INV, cube_client_to_dlpack(c, NULL, &vt),      \
    "cube_client_to_dlpack", "desc is NULL")                                                     \
  X("E406", "cube_client_to_dlpack", "out_tensor NULL", INV,                                     \
    cube_client_to_dlpack(c, export_of(h64, 16, 0, 0), NULL), "cube_client_to_dlpack", "out_tensor") \
  X("E407", "cube_client_to_dlpack", "17 floats of a 64-byte handle", INV,                       \
    cube_client_to_dlpack(c, export_of(h64, 17, 0, 0), &vt), "cube_client_to_dlpack", "68", "64") \
  X("E408", "cube_client_to_dlpack", "byte_offset 128 of a 64-byte handle", INV,                 \
    cube_client_to_dlpack(c, export_of(h64, 1, 128, 0), &vt), "cube_client_to_dlpack", "byte_offset 128") \
  X("E409", "cube_client_to_dlpack", "stream 7 on the CPU (no native streams)", INV,             \
    cube_client_to_dlpack(c, export_of(h64, 16, 0, 7), &vt), "cube_client_to_dlpack", "stream 0x7", "no native streams") \
  X("E410", "cube_client_to_dlpack_legacy", "desc NULL", INV,                                    \
    cube_client_to_dlpack_legacy(c, NULL, &lt), "cube_client_to_dlpack_legacy", "desc is NULL")  \
  X("E411", "cube_client_dlpack_device", "out_device_type NULL", INV,                            \
    cube_client_dlpack_device(c, NULL, &dev_id), "cube_client_dlpack_device", "out_device_type") \
  X("E412", "cube_client_from_dlpack", "tensor NULL", INV, cube_client_from_dlpack(c, NULL, 0, &h), \
    "cube_client_from_dlpack", "tensor is NULL")                                                 \
  X("E413", "cube_client_from_dlpack", "out_handle NULL", INV,                                   \
    cube_client_from_dlpack(c, dl_f32(8), 0, NULL), "cube_client_from_dlpack", "out_handle")     \
  X("E414", "cube_client_from_dlpack", "a CUDA tensor on a CPU client", INV,                     \
    cube_client_from_dlpack(c, dl_device(kDLCUDA, 0), 0, &h), "cube_client_from_dlpack", "device type") \
  X("E415", "cube_client_from_dlpack", "device id 3 on cpu:0", INV,                              \
    cube_client_from_dlpack(c, dl_device(kDLCPU, 3), 0, &h), "cube_client_from_dlpack", "device id 0, not 3") \
  X("E416", "cube_client_from_dlpack", "dtype float32 x 4 lanes", UNSUP,                         \
    cube_client_from_dlpack(c, dl_dtype(kDLFloat, 32, 4), 0, &h), "cube_client_from_dlpack", "dtype", "4 lanes") \
  X("E417", "cube_client_from_dlpack", "dtype int of 4 bits", UNSUP,                             \
    cube_client_from_dlpack(c, dl_dtype(kDLInt, 4, 1), 0, &h), "cube_client_from_dlpack", "dtype", "4 bits") \
  X("E418", "cube_client_from_dlpack", "no elements (shape 0)", UNSUP,                           \
    cube_client_from_dlpack(c, dl_f32(0), 0, &h), "cube_client_from_dlpack", "no elements")      \
  X("E419", "cube_client_from_dlpack", "ndim 13", UNSUP,                                         \
    cube_client_from_dlpack(c, dl_ndim(13), 0, &h), "cube_client_from_dlpack", "ndim 13")        \
  X("E420", "cube_client_from_dlpack", "data NULL", INV,                                         \
    cube_client_from_dlpack(c, dl_null_data(), 0, &h), "cube_client_from_dlpack", "data is NULL") \
  X("E421", "cube_client_from_dlpack", "float64 at byte_offset 4 (misaligned)", INV,             \
    cube_client_from_dlpack(c, dl_misaligned(), 0, &h), "cube_client_from_dlpack", "not aligned to 8 bytes") \
  X("E422", "cube_client_from_dlpack", "DLPack version 2.0", UNSUP,                              \
    cube_client_from_dlpack(c, dl_version(2), 0, &h), "cube_client_from_dlpack", "DLPack 2.0")   \
  X("E423", "cube_client_from_dlpack", "read-only tensor without CUBE_DLPACK_READ_ONLY", PRECOND, \
    cube_client_from_dlpack(c, dl_read_only(), 0, &h), "cube_client_from_dlpack", "read-only", "CUBE_DLPACK_READ_ONLY") \
  X("E424", "cube_client_from_dlpack", "strides with gaps (shape 6x4x2, strides 16,4,2)", UNSUP, \
    cube_client_from_dlpack(c, dl_gaps(), 0, &h), "cube_client_from_dlpack", "strides", "gaps") \
  X("E425", "cube_client_from_dlpack_legacy", "tensor NULL", INV,                                \
    cube_client_from_dlpack_legacy(c, NULL, 0, &h), "cube_client_from_dlpack_legacy", "tensor is NULL")

#define G_MEMVIEW(X, V) \
  X("E428", "cube_memory_tag_push", "client NULL", INV, cube_memory_tag_push(NULL, "w"), "cube_memory_tag_push", "client is NULL") \
  X("E429", "cube_memory_tag_push", "tag NULL", INV, cube_memory_tag_push(c, NULL), "cube_memory_tag_push", "tag is NULL") \
  X("E430", "cube_memory_tag_push", "tag \"\"", INV, cube_memory_tag_push(c, ""), "cube_memory_tag_push", "empty") \
  X("E431", "cube_memory_tag_push", "a tag of 64 bytes", INV, cube_memory_tag_push(c, long_tag()), "cube_memory_tag_push", "longer than 63 bytes") \
  X("E432", "cube_memory_tag_pop", "no scope open", PRECOND, cube_memory_tag_pop(c), "cube_memory_tag_pop", "no tag scope is open") \
  X("E433", "cube_handle_set_tag", "the null handle", INV, cube_handle_set_tag(CUBE_HANDLE_NULL, "w"), "cube_handle_set_tag", "null handle") \
  X("E434", "cube_client_memory_snapshot", "path NULL", INV, cube_client_memory_snapshot(c, NULL), "cube_client_memory_snapshot", "path is NULL") \
  X("E435", "cube_client_memory_snapshot_json", "out_json NULL", INV, cube_client_memory_snapshot_json(c, NULL), "cube_client_memory_snapshot_json", "out_json") \
  X("E436", "cube_client_memory_ledger", "out_ledger NULL", INV, cube_client_memory_ledger(c, NULL), "cube_client_memory_ledger", "out_ledger") \
  X("E437", "cube_client_memory_install", "pool_count 0", INV, cube_client_memory_install(c, &no_pools), "cube_client_memory_install", "pool_count 0") \
  X("E438", "cube_client_memory_install", "a buffer live", PRECOND, cube_client_memory_install(c, NULL), "cube_client_memory_install", "1 live buffer", "before installing pools") \
  X("E439", "cube_client_memory_measure_end", "not measuring", PRECOND, cube_client_memory_measure_end(c, NULL), "cube_client_memory_measure_end", "not measuring")

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

typedef struct row {
  const char* id;
  const char* group;
  const char* fn;
  const char* input;
  cube_status_code_t code; /* CUBE_STATUS_OK: a fallback-value row */
  const char* fallback;
} row_t;

#define TABLE_X(id, fn, input, code, expr, ...) {id, group_name_, fn, input, code, NULL},
#define TABLE_V(id, fn, input, fallback, cond) {id, group_name_, fn, input, CUBE_STATUS_OK, fallback},
/* group_name_ names the group of the list expanded below it. */
static char g_trace_existing[512];
static cube_profile_summary_t g_summary;
static cube_status_t profile_summary_small(cube_client_t* c) {
  cube_profile_summary_t s;
  memset(&s, 0, sizeof(s));
  s.struct_size = 8;
  return cube_client_profile_summary(c, 0, &s);
}

static const row_t k_rows[] = {
#define group_name_ "devices"
    G_DEVICES(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "parse"
    G_PARSE(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "bytes"
    G_BYTES(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "layout"
    G_LAYOUT(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "kernel_desc"
    G_KERNEL_DESC(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "count_select"
    G_COUNT_SELECT(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "client"
    G_CLIENT(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "create"
    G_CREATE(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "staging"
    G_STAGING(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "empty"
    G_EMPTY(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "read"
    G_READ(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "read_tensor"
    G_READ_TENSOR(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "future"
    G_FUTURE(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "handles"
    G_HANDLES(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "resource"
    G_RESOURCE(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "modes"
    G_MODES(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "memory"
    G_MEMORY(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "launch"
    G_LAUNCH(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "sync"
    G_SYNC(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "cross_device"
    G_CROSS_DEVICE(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "collectives"
    G_COLLECTIVES(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "cache"
    G_CACHE(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "files"
    G_FILES(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "abi"
    G_ABI(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "tune"
    G_TUNE(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "dlpack"
    G_DLPACK(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "memview"
    G_MEMVIEW(TABLE_X, TABLE_V)
#undef group_name_
#define group_name_ "trace"
    G_TRACE(TABLE_X, TABLE_V)
#undef group_name_
};
#define ROW_COUNT (sizeof(k_rows) / sizeof(k_rows[0]))

static bool g_seen[ROW_COUNT];

static int row_index(const char* id) {
  for (size_t i = 0; i < ROW_COUNT; ++i)
    if (strcmp(k_rows[i].id, id) == 0) return (int)i;
  return -1;
}

static bool dump_on(void) {
  const char* v = getenv("CUBE_ERRORS_DUMP");
  return v && *v && strcmp(v, "0") != 0;
}

/* Marks |id| evaluated; prints the observed result in dump mode. */
static void row_seen(const char* id, cube_status_t s, bool is_value, bool value_ok) {
  int i = row_index(id);
  if (i < 0) {
    fprintf(stderr, "row %s is not in the table\n", id);
    cube_test_failures++;
    return;
  }
  g_seen[i] = true;
  if (!dump_on()) return;
  if (is_value)
    printf("ROW|%s|fallback|%s\n", id, value_ok ? k_rows[i].fallback : "(fallback not returned)");
  else
    printf("ROW|%s|%s|%s\n", id, cube_status_code_name(cube_status_code(s)), cube_status_message(s));
}

/* True (and the row counts as evaluated) for a known-defect row when
 * CUBE_ERRORS_RUN_DEFECTS is not set. */
static bool row_skip_defect(const char* id, cube_status_code_t code) {
  if (!ROW_IS_DEFECT(code)) return false;
  const char* v = getenv("CUBE_ERRORS_RUN_DEFECTS");
  if (v && *v && strcmp(v, "0") != 0) return false;
  int i = row_index(id);
  if (i >= 0) g_seen[i] = true;
  printf("note: row %s is a known defect (%s: %s); set CUBE_ERRORS_RUN_DEFECTS=1 to run it\n", id,
         i >= 0 ? k_rows[i].fn : "?", i >= 0 ? k_rows[i].input : "?");
  if (dump_on()) printf("ROW|%s|DEFECT|(not run)\n", id);
  return true;
}

/* As CHECK_STATUS, keeping the status long enough to dump it. */
#define CHECK_X(id, fn, input, code, expr, ...)                                                   \
  do {                                                                                            \
    if (row_skip_defect(id, code)) break;                                                         \
    cube_status_t row_s_ = (expr);                                                                \
    row_seen(id, row_s_, false, false);                                                           \
    if (!cube_test_check_status(__FILE__, __LINE__, #expr, row_s_, ROW_CODE(code), __VA_ARGS__,   \
                                (const char*)NULL))                                               \
      fprintf(stderr, "  ^ row %s (%s: %s)\n", id, fn, input);                                    \
  } while (0);
#define CHECK_V(id, fn, input, fallback, cond)                                                    \
  do {                                                                                            \
    bool row_ok_ = (cond);                                                                        \
    row_seen(id, CUBE_OK, true, row_ok_);                                                         \
    if (!row_ok_) {                                                                               \
      fprintf(stderr, "%s:%d: row %s (%s: %s): expected the fallback %s: %s\n", __FILE__,        \
              __LINE__, id, fn, input, fallback, #cond);                                          \
      cube_test_failures++;                                                                       \
    }                                                                                             \
  } while (0);

/* Every row of |group| in the table was evaluated by the case. */
static void group_done(const char* group) {
  for (size_t i = 0; i < ROW_COUNT; ++i)
    if (strcmp(k_rows[i].group, group) == 0 && !g_seen[i]) {
      fprintf(stderr, "row %s of group %s was not evaluated\n", k_rows[i].id, group);
      cube_test_failures++;
    }
}

//===----------------------------------------------------------------------===//
// One case per group
//===----------------------------------------------------------------------===//

static const uint64_t shape44[2] = {4, 4};
static const uint64_t shape_zero[2] = {4, 0};
static const uint64_t shape13[13] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
static const uint64_t strides_t[2] = {1, 4};
static const uint64_t strides_ok[2] = {4, 1};

CUBE_TEST(devices) {
  size_t count = 0;
  char buf[128];
  G_DEVICES(CHECK_X, CHECK_V)
  (void)count;
  group_done("devices");
}

CUBE_TEST(parse) {
  cube_backend_t backend;
  cube_profile_level_t level;
  G_PARSE(CHECK_X, CHECK_V)
  group_done("parse");
}

CUBE_TEST(bytes) {
  char buf[64] = {0};
  cube_bytes_t* bytes = NULL;
  const char* tmp = getenv("CUBE_TEST_TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  char path[512], missing[512], dir[512];
  snprintf(path, sizeof(path), "%s/errors_catalogue_%d.bin", tmp, (int)getpid());
  snprintf(missing, sizeof(missing), "%s/errors_catalogue_missing.bin", tmp);
  snprintf(dir, sizeof(dir), "%s", tmp);
  FILE* f = fopen(path, "wb");
  REQUIRE(f != NULL);
  REQUIRE(fwrite(buf, 1, 64, f) == 64);
  fclose(f);
  remove(missing);
  G_BYTES(CHECK_X, CHECK_V)
  remove(path);
  group_done("bytes");
}

CUBE_TEST(layout) {
  cube_layout_desc_t desc;
  const uint64_t shape[13] = {4, 4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  G_LAYOUT(CHECK_X, CHECK_V)
  group_done("layout");
}

CUBE_TEST(kernel_desc) {
  cube_kernel_desc_t good = kdesc();
  cube_kernel_t* kernel = NULL;
  G_KERNEL_DESC(CHECK_X, CHECK_V)
  group_done("kernel_desc");
}

CUBE_TEST(count_select) {
  cube_count_t cc;
  bool exact;
  const uint32_t maxc[3] = {8, 8, 8}, maxc_y0[3] = {8, 0, 8}, maxc444[3] = {4, 4, 4};
  G_COUNT_SELECT(CHECK_X, CHECK_V)
  group_done("count_select");
}

CUBE_TEST(client) {
  cube_client_t* c = client_or_null(cpu0()); /* cpu:0 has a server from here on */
  REQUIRE(c != NULL);
  cube_client_t* other = NULL;
  cube_server_options_t good_opts;
  cube_server_options_initialize(&good_opts);
  G_CLIENT(CHECK_X, CHECK_V)
  cube_client_release(c);
  group_done("client");
}

/* Three fresh buffers (64, n1 bytes; n1 0 = a NULL entry). */
static cube_bytes_t* g_fresh[2];
static cube_bytes_t* const* fresh2(size_t n0, size_t n1) {
  g_fresh[0] = fresh_bytes(n0);
  g_fresh[1] = n1 ? fresh_bytes(n1) : NULL;
  return g_fresh;
}
static cube_bytes_t* const* fresh1(void) {
  g_fresh[0] = fresh_bytes(64);
  g_fresh[1] = NULL;
  return g_fresh;
}

CUBE_TEST(create) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  char buf[64] = {0};
  cube_handle_t h;
  cube_tensor_t t;
  cube_tensor_t ts[2];
  uint64_t oversize = cube_client_properties(c)->memory.max_page_size + 1;
  cube_layout_desc_t descs2[2] = {ld(2, 4, 4, 4), ld(1, 4, 0, 4)};
  cube_layout_desc_t descs2_bad[2] = {ld(2, 4, 4, 4), ld(1, 4, 0, 0)};
  const void* data2[2] = {buf, buf};
  const void* data2_null[2] = {buf, NULL};
  const size_t sizes2[2] = {64, 16};
  const size_t sizes2_bad[2] = {64, 8};
  G_CREATE(CHECK_X, CHECK_V)
  cube_client_release(c);
  group_done("create");
}

CUBE_TEST(staging) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  char buf[64] = {0};
  cube_handle_t h;
  cube_tensor_t ts[2];
  cube_bytes_t* sb[2] = {NULL, NULL};
  cube_layout_desc_t descs2[2] = {ld(2, 4, 4, 4), ld(1, 4, 0, 4)};
  const void* data2[2] = {buf, buf};
  const void* data2_null[2] = {buf, NULL};
  const size_t sizes2[2] = {64, 16};
  const size_t sizes2_bad[2] = {64, 8};
  cube_bytes_t* staging_null[2] = {fresh_bytes(16), NULL};
  G_STAGING(CHECK_X, CHECK_V)
  cube_bytes_release_array(staging_null, 2);
  cube_client_release(c);
  group_done("staging");
}

CUBE_TEST(empty) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  cube_handle_t h;
  cube_tensor_t t;
  cube_tensor_t ts[2];
  uint64_t oversize = cube_client_properties(c)->memory.max_page_size + 1;
  const uint64_t shape_over[1] = {oversize};
  const uint64_t shape_huge[2] = {UINT64_C(1) << 63, 4};
  cube_layout_desc_t descs2[2] = {ld(2, 4, 4, 4), ld(1, 4, 0, 4)};
  cube_layout_desc_t descs2_bad[2] = {ld(2, 4, 4, 4), ld(1, 4, 0, 0)};
  G_EMPTY(CHECK_X, CHECK_V)
  cube_client_release(c);
  group_done("empty");
}

/* A live 16-byte handle and a released one. */
static void two_handles(cube_client_t* c, cube_handle_t* live, cube_handle_t* released) {
  *live = CUBE_HANDLE_NULL;
  *released = CUBE_HANDLE_NULL;
  cube_status_free(cube_client_empty(c, 16, live));
  cube_status_free(cube_client_empty(c, 16, released));
  cube_handle_release(*released);
}

CUBE_TEST(read) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  cube_handle_t live, released, rnd = random_handle();
  two_handles(c, &live, &released);
  REQUIRE(!cube_handle_is_null(live));
  cube_handle_t live_null[2] = {live, CUBE_HANDLE_NULL};
  cube_bytes_t* ob[2] = {NULL, NULL};
  cube_future_t* fut = NULL;
  G_READ(CHECK_X, CHECK_V)
  cube_handle_release(live);
  cube_client_release(c);
  group_done("read");
}

CUBE_TEST(read_tensor) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  cube_tensor_t t;
  REQUIRE_OK(cube_client_empty_tensor(c, 2, shape44, 4, &t));
  cube_tensor_t t_transposed = t, t_rank13 = t, t_elem0 = t, t_small = t, t_released = t;
  t_transposed.strides[0] = 1;
  t_transposed.strides[1] = 4;
  t_rank13.rank = 13;
  t_elem0.elem_size = 0;
  cube_handle_t live, released;
  two_handles(c, &live, &released);
  t_small.handle = live;         /* 16 bytes for a 4x4 f32 tensor */
  t_released.handle = released;
  cube_bytes_t* ob[1] = {NULL};
  cube_future_t* fut = NULL;
  G_READ_TENSOR(CHECK_X, CHECK_V)
  cube_handle_release(live);
  cube_tensor_release(&t);
  cube_client_release(c);
  group_done("read_tensor");
}

CUBE_TEST(future) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  cube_handle_t live, released;
  two_handles(c, &live, &released);
  cube_bytes_t* ob[1] = {NULL};
  cube_future_t *fut_read = NULL, *fut_done = NULL, *fut_slow = NULL;
  REQUIRE_OK(cube_client_read_async(c, 1, &live, &fut_read));
  REQUIRE_OK(cube_client_read_async(c, 1, &live, &fut_done));
  REQUIRE_OK(cube_future_wait(fut_done, UINT64_MAX, ob)); /* the first wait takes the result */
  cube_bytes_release(ob[0]);
  ob[0] = NULL;
  cube_kernel_t* ks = native_kernel("k_sleep", k_sleep, 0, NULL, (cube_dim_t){1, 1, 1});
  REQUIRE(ks != NULL);
  REQUIRE_OK(cube_client_launch(c, ks, cube_count_static(1, 1, 1), 0, NULL));
  REQUIRE_OK(cube_client_read_async(c, 1, &live, &fut_slow)); /* queued behind the sleep */
  G_FUTURE(CHECK_X, CHECK_V)
  CHECK_OK(cube_future_wait(fut_slow, UINT64_MAX, ob)); /* still usable after the timeout */
  cube_bytes_release(ob[0]);
  ob[0] = NULL;
  CHECK_OK(cube_future_wait(fut_read, UINT64_MAX, ob));
  cube_bytes_release(ob[0]);
  cube_future_release(fut_read);
  cube_future_release(fut_done);
  cube_future_release(fut_slow);
  cube_kernel_release(ks);
  cube_handle_release(live);
  cube_client_release(c);
  group_done("future");
}

CUBE_TEST(handles) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  cube_handle_t live, released, rnd = random_handle(), h;
  two_handles(c, &live, &released);
  cube_device_id_t did;
  G_HANDLES(CHECK_X, CHECK_V)
  cube_handle_release(live);
  cube_client_release(c);
  group_done("handles");
}

CUBE_TEST(resource) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  cube_handle_t live, released;
  two_handles(c, &live, &released);
  cube_resource_t* res = NULL;
  G_RESOURCE(CHECK_X, CHECK_V)
  cube_handle_release(live);
  cube_client_release(c);
  group_done("resource");
}

CUBE_TEST(modes) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  G_MODES(CHECK_X, CHECK_V)
  cube_client_release(c);
  group_done("modes");
}

CUBE_TEST(memory) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  cube_memory_usage_t usage;
  cube_memory_report_t report = {0};
  cube_kernel_t* kf = native_kernel("k_fail", k_fail, 0, NULL, (cube_dim_t){1, 1, 1});
  REQUIRE(kf != NULL);
  /* A launch that fails on the device: its error waits on the stream. */
  REQUIRE_OK(cube_client_launch(c, kf, cube_count_static(1, 1, 1), 0, NULL));
  G_MEMORY(CHECK_X, CHECK_V)
  CHECK_OK(cube_client_sync(c)); /* the flush above cleared the deferred error */
  cube_kernel_release(kf);
  cube_client_release(c);
  group_done("memory");
}

CUBE_TEST(launch) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  cube_handle_t live, released, rnd = random_handle(), small = CUBE_HANDLE_NULL;
  two_handles(c, &live, &released);
  REQUIRE_OK(cube_client_empty(c, 4, &small));
  cube_kernel_t* k = native_kernel("k_args", k_noop, 2, k_buf_u32, (cube_dim_t){1, 1, 1});
  cube_kernel_t* kbig = native_kernel("k_big", k_noop, 0, NULL, (cube_dim_t){1024, 2, 1});
  REQUIRE(k != NULL && kbig != NULL);
  cube_kernel_t* kfill = NULL;
  REQUIRE_OK(kernel_try_keep(kd_dialect(), &kfill));
  cube_kernel_desc_t dshared = kdesc();
  dshared.name = "k_shared";
  dshared.shared_memory_size = 2u << 20;
  cube_kernel_t* kshared = NULL;
  REQUIRE_OK(kernel_try_keep(dshared, &kshared));
  cube_handle_t three = CUBE_HANDLE_NULL;
  REQUIRE_OK(cube_client_empty(c, 3, &three));
  const cube_arg_t args_three[1] = {cube_arg_buffer(three)};
  cube_kernel_t* kernels_null[2] = {k, NULL};
  cube_count_t one = cube_count_static(1, 1, 1);
  cube_count_t bad_kind = one;
  bad_kind.kind = (cube_count_kind_t)5;
  cube_count_t dyn_null = cube_count_dynamic(CUBE_HANDLE_NULL);
  cube_count_t dyn_small = cube_count_dynamic(small);
  const cube_arg_t args[2] = {cube_arg_buffer(live), cube_arg_u32(1)};
  const cube_arg_t args_kind[2] = {cube_arg_buffer(live), cube_arg_f32(1.0f)};
  const cube_arg_t args_null[2] = {cube_arg_buffer(CUBE_HANDLE_NULL), cube_arg_u32(1)};
  const cube_arg_t args_released[2] = {cube_arg_buffer(released), cube_arg_u32(1)};
  const cube_arg_t args_rnd[2] = {cube_arg_buffer(rnd), cube_arg_u32(1)};
  G_LAUNCH(CHECK_X, CHECK_V)
  CHECK_OK(cube_client_sync(c));
  cube_kernel_release(k);
  cube_kernel_release(kbig);
  cube_kernel_release(kfill);
  cube_kernel_release(kshared);
  cube_handle_release(three);
  cube_handle_release(small);
  cube_handle_release(live);
  cube_client_release(c);
  group_done("launch");
}

CUBE_TEST(sync) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  cube_future_t* fut = NULL;
  cube_profile_duration_t dur;
  uint32_t vs[8];
  size_t count = 0;
  G_SYNC(CHECK_X, CHECK_V)
  cube_client_release(c);
  group_done("sync");
}

CUBE_TEST(cross_device) {
  /* Two CPU devices: must be set before the first call of this process that
   * counts them (each CTest case is its own process). */
  setenv("CUBE_CPU_DEVICES", "2", 1);
  cube_client_t* c = client_or_null(cpu0());
  cube_client_t* c1 = client_or_null(dev(CUBE_BACKEND_CPU, 1));
  REQUIRE(c != NULL && c1 != NULL);
  cube_handle_t h0 = CUBE_HANDLE_NULL, h1 = CUBE_HANDLE_NULL, h, released, live;
  REQUIRE_OK(cube_client_empty(c, 64, &h0));
  REQUIRE_OK(cube_client_empty(c1, 64, &h1));
  two_handles(c, &live, &released);
  cube_tensor_t t, t0, t1;
  REQUIRE_OK(cube_client_empty_tensor(c, 2, shape44, 4, &t0));
  REQUIRE_OK(cube_client_empty_tensor(c1, 2, shape44, 4, &t1));
  cube_tensor_t t0_transposed = t0;
  t0_transposed.strides[0] = 1;
  t0_transposed.strides[1] = 4;
  cube_kernel_t* k = native_kernel("k_args", k_noop, 2, k_buf_u32, (cube_dim_t){1, 1, 1});
  REQUIRE(k != NULL);
  cube_count_t one = cube_count_static(1, 1, 1);
  const cube_arg_t args_other[2] = {cube_arg_buffer(h1), cube_arg_u32(1)};
  const cube_device_id_t devs2[2] = {cpu0(), dev(CUBE_BACKEND_CPU, 1)};
  cube_bytes_t* ob[1] = {NULL};
  cube_resource_t* res = NULL;
  G_CROSS_DEVICE(CHECK_X, CHECK_V)
  cube_kernel_release(k);
  cube_tensor_release(&t0);
  cube_tensor_release(&t1);
  cube_handle_release(h0);
  cube_handle_release(h1);
  cube_handle_release(live);
  cube_client_release(c1);
  cube_client_release(c);
  group_done("cross_device");
}

/* The environment is read once (and after cube_shutdown), so a malformed
 * timeout reaches a live client only through cube_option_set, which refuses
 * it; the collectives keep the timeout they had. */
static cube_status_t set_bad_timeout(cube_client_t* c) {
  cube_status_t s = cube_option_set("CUBE_COLLECTIVE_TIMEOUT", "soon");
  cube_status_t after = cube_client_sync_collective(c);
  if (after) {
    cube_status_free(s);
    return after;
  }
  return s;
}

CUBE_TEST(collectives) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  cube_handle_t h0 = CUBE_HANDLE_NULL, h0b = CUBE_HANDLE_NULL, h_small = CUBE_HANDLE_NULL, released, live;
  REQUIRE_OK(cube_client_empty(c, 64, &h0));
  REQUIRE_OK(cube_client_empty(c, 64, &h0b));
  REQUIRE_OK(cube_client_empty(c, 32, &h_small));
  const cube_device_id_t devs_twice[2] = {cpu0(), cpu0()};
  two_handles(c, &live, &released);
  const cube_device_id_t devs1[1] = {cpu0()};
  const cube_device_id_t devs_bad[2] = {cpu0(), dev(CUBE_BACKEND_CPU, 99)};
  const cube_device_id_t devs_bad_backend[1] = {dev(9, 0)};
  cube_device_id_t shrunk[2];
  size_t shrunk_n = 0;
  G_COLLECTIVES(CHECK_X, CHECK_V)
  cube_handle_release(h0);
  cube_handle_release(h0b);
  cube_handle_release(h_small);
  cube_handle_release(live);
  cube_client_release(c);
  group_done("collectives");
}

static cube_status_t cc_info_with_struct_size(size_t size) {
  cube_cpu_compiler_info_t info;
  memset(&info, 0, sizeof(info));
  info.struct_size = size;
  return cube_cpu_compiler_info(&info);
}

CUBE_TEST(cache) {
  const char* tmp = getenv("CUBE_TEST_TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  char file[512];
  snprintf(file, sizeof(file), "%s/errors_catalogue_cache_%d", tmp, (int)getpid());
  FILE* f = fopen(file, "w");
  REQUIRE(f != NULL);
  fclose(f);
  G_CACHE(CHECK_X, CHECK_V)
  remove(file);
  group_done("cache");
}

CUBE_TEST(files) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  const char* tmp = getenv("CUBE_TEST_TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  char path[512];
  snprintf(path, sizeof(path), "%s/errors_catalogue_shrunk_%d.bin", tmp, (int)getpid());
  cube_handle_t h = CUBE_HANDLE_NULL;
  G_FILES(CHECK_X, CHECK_V)
  remove(path);
  cube_client_release(c);
  group_done("files");
}

static cube_status_t init_with_struct_size(size_t size) {
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.struct_size = size;
  cube_client_t* c = NULL;
  cube_status_t s = cube_client_init(cpu0(), &o, &c);
  cube_client_release(c);
  return s;
}

static cube_status_t init_with_newer_field(void) {
  struct {
    cube_server_options_t o;
    uint32_t newer[4];
  } big;
  memset(&big, 0, sizeof(big));
  big.o.struct_size = sizeof(big);
  big.newer[1] = 1;
  cube_client_t* c = NULL;
  cube_status_t s = cube_client_init(cpu0(), &big.o, &c);
  cube_client_release(c);
  return s;
}

static int k_nothing(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube;
  (void)args;
  (void)n;
  return 0;
}

static cube_status_t kernel_with_struct_size(size_t size) {
  cube_kernel_desc_t d;
  cube_kernel_desc_initialize(&d);
  d.struct_size = size;
  d.name = "k";
  d.cpu_fn = k_nothing;
  cube_kernel_t* k = NULL;
  cube_status_t s = cube_kernel_create(&d, &k);
  cube_kernel_release(k);
  return s;
}

static cube_status_t layout_with_struct_sizes(size_t first, size_t second) {
  /* Two descriptors, the second at the stride |first| gives (this library's
   * when |first| is smaller than its struct). */
  _Alignas(16) unsigned char buf[2 * 160];
  memset(buf, 0, sizeof(buf));
  size_t stride = first > sizeof(cube_layout_desc_t) ? first : sizeof(cube_layout_desc_t);
  uint64_t shape[1] = {4};
  for (int i = 0; i < 2; ++i)
    cube_status_free(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 1, shape, 4,
                                                 (cube_layout_desc_t*)(buf + i * stride)));
  ((cube_layout_desc_t*)buf)->struct_size = first;
  ((cube_layout_desc_t*)(buf + stride))->struct_size = second;
  uint64_t total;
  return cube_layout_compute(CUBE_LAYOUT_POLICY_CONTIGUOUS, 64, 2, (cube_layout_desc_t*)buf, NULL,
                             NULL, NULL, &total);
}

static cube_status_t report_with_struct_size(cube_client_t* c, size_t size) {
  cube_memory_report_t r = {0};
  r.struct_size = size;
  return cube_client_memory_report(c, &r);
}

static cube_status_t stats_with_struct_size(size_t size) {
  cube_kernel_cache_stats_t st = {0};
  st.struct_size = size;
  return cube_kernel_cache_stats(&st);
}

CUBE_TEST(abi) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  G_ABI(CHECK_X, CHECK_V)
  cube_client_release(c);
  group_done("abi");
}

/* An operation description with |count| candidates (all the same, valid
 * otherwise) handed to cube_tune_op_create. */
static cube_status_t tune_key_none(void* user, const cube_device_properties_t* props, size_t n,
                                   const cube_arg_t* args, cube_tune_key_t* out) {
  (void)user;
  (void)props;
  (void)n;
  (void)args;
  out->count = 0;
  return CUBE_OK;
}

static cube_status_t tune_count_one(void* user, size_t n, const cube_arg_t* args,
                                    cube_count_t* out) {
  (void)user;
  (void)n;
  (void)args;
  *out = cube_count_static(1, 1, 1);
  return CUBE_OK;
}

static cube_status_t tune_op_with_count(uint32_t count) {
  static const char* src = "CUBE_KERNEL(nothing, uint32_t x) {}\n";
  cube_kernel_desc_t d;
  cube_kernel_desc_initialize(&d);
  d.source = src;
  d.entry = "nothing";
  d.cube_dim = (cube_dim_t){1, 1, 1};
  cube_kernel_t* k = NULL;
  cube_status_t st = cube_kernel_create(&d, &k);
  if (st) return st;
  cube_tune_candidate_t cands[40];
  char names[40][8];
  for (int i = 0; i < 40; ++i) {
    snprintf(names[i], sizeof(names[i]), "c%d", i);
    cands[i] = (cube_tune_candidate_t){names[i], k, tune_count_one, NULL, NULL};
  }
  cube_tune_op_desc_t od;
  cube_tune_op_desc_initialize(&od);
  od.name = "catalogue";
  od.candidates = cands;
  od.candidate_count = count;
  od.key = tune_key_none;
  cube_tune_op_t* op = NULL;
  st = cube_tune_op_create(&od, &op);
  cube_tune_op_release(op);
  cube_kernel_release(k);
  return st;
}

CUBE_TEST(tune) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  const char* tmp = getenv("CUBE_TEST_TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  char path[512], missing[512];
  snprintf(path, sizeof(path), "%s/errors_catalogue_bundle_%d", tmp, (int)getpid());
  snprintf(missing, sizeof(missing), "%s/errors_catalogue_missing.cubebundle", tmp);
  FILE* f = fopen(path, "w");
  REQUIRE(f != NULL);
  fputs("this text is long enough to be looked at, and it is not a bundle", f);
  fclose(f);
  chmod(path, 0600);
  cube_tune_op_t* op = NULL;
  cube_tune_op_desc_t od;
  cube_tune_op_desc_initialize(&od);
  cube_execution_override_t* ov = NULL;
  size_t count = 0;
  G_TUNE(CHECK_X, CHECK_V)
  remove(path);
  cube_client_release(c);
  group_done("tune");
}

/* The DLPack rows' tensors: one static DLPack 1.0 tensor of host floats,
 * remade by each dl_*(); its deleter counts (a refused import must not call
 * it). */
static float g_dl_data[64];
static int64_t g_dl_shape[CUBE_MAX_RANK + 1], g_dl_strides[CUBE_MAX_RANK + 1];
static DLManagedTensorVersioned g_dl;
static int g_dl_deleted;

static void dl_deleter(DLManagedTensorVersioned* t) {
  (void)t;
  g_dl_deleted++;
}

static DLManagedTensorVersioned* dl_f32(int64_t n) {
  memset(&g_dl, 0, sizeof(g_dl));
  g_dl.version.major = 1;
  g_dl.version.minor = 0;
  g_dl.deleter = dl_deleter;
  g_dl_shape[0] = n;
  g_dl_strides[0] = 1;
  g_dl.dl_tensor.data = g_dl_data;
  g_dl.dl_tensor.device.device_type = kDLCPU;
  g_dl.dl_tensor.ndim = 1;
  g_dl.dl_tensor.dtype.code = kDLFloat;
  g_dl.dl_tensor.dtype.bits = 32;
  g_dl.dl_tensor.dtype.lanes = 1;
  g_dl.dl_tensor.shape = g_dl_shape;
  g_dl.dl_tensor.strides = g_dl_strides;
  return &g_dl;
}

static DLManagedTensorVersioned* dl_device(int32_t type, int32_t id) {
  dl_f32(8)->dl_tensor.device.device_type = (DLDeviceType)type;
  g_dl.dl_tensor.device.device_id = id;
  return &g_dl;
}

static DLManagedTensorVersioned* dl_dtype(uint8_t code, uint8_t bits, uint16_t lanes) {
  DLDataType d = {code, bits, lanes};
  dl_f32(8)->dl_tensor.dtype = d;
  return &g_dl;
}

static DLManagedTensorVersioned* dl_ndim(int32_t ndim) {
  for (int i = 0; i < CUBE_MAX_RANK + 1; ++i) g_dl_shape[i] = 1;
  dl_f32(1)->dl_tensor.ndim = ndim;
  g_dl.dl_tensor.strides = NULL;
  for (int i = 0; i < CUBE_MAX_RANK + 1; ++i) g_dl_shape[i] = 1;
  return &g_dl;
}

static DLManagedTensorVersioned* dl_null_data(void) {
  dl_f32(8)->dl_tensor.data = NULL;
  return &g_dl;
}

static DLManagedTensorVersioned* dl_misaligned(void) {
  dl_f32(4)->dl_tensor.dtype.bits = 64;
  g_dl.dl_tensor.byte_offset = 4;
  return &g_dl;
}

static DLManagedTensorVersioned* dl_version(uint32_t major) {
  dl_f32(8)->version.major = major;
  return &g_dl;
}

static DLManagedTensorVersioned* dl_read_only(void) {
  dl_f32(8)->flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  return &g_dl;
}

static DLManagedTensorVersioned* dl_gaps(void) {
  dl_f32(6)->dl_tensor.ndim = 3;
  g_dl_shape[1] = 4;
  g_dl_shape[2] = 2;
  g_dl_strides[0] = 16;
  g_dl_strides[1] = 4;
  g_dl_strides[2] = 2;
  return &g_dl;
}

/* An export of |n| floats of |h| from byte |offset|, with |stream|. */
static cube_dlpack_export_t g_export;

static const cube_dlpack_export_t* export_of(cube_handle_t h, int64_t n, uint64_t offset,
                                             int64_t stream) {
  cube_status_t s = cube_dlpack_export_initialize(h, cube_dlpack_dtype(CUBE_DLPACK_FLOAT, 32), 1,
                                                  &n, &g_export);
  if (s) {
    fprintf(stderr, "cube_dlpack_export_initialize: %s\n", cube_status_message(s));
    cube_status_free(s);
    cube_test_failures++;
  }
  g_export.byte_offset = offset;
  g_export.stream = stream;
  return &g_export;
}

CUBE_TEST(dlpack) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  cube_handle_t h64 = CUBE_HANDLE_NULL, h = CUBE_HANDLE_NULL;
  REQUIRE_OK(cube_client_empty(c, 64, &h64));
  const cube_dlpack_dtype_t f32 = cube_dlpack_dtype(CUBE_DLPACK_FLOAT, 32);
  const int64_t shape1[CUBE_MAX_RANK + 1] = {16, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  const int64_t neg1[1] = {-1};
  cube_dlpack_export_t ex;
  DLManagedTensorVersioned* vt = NULL;
  DLManagedTensor* lt = NULL;
  int32_t dev_id = 0;
  g_dl_deleted = 0;
  G_DLPACK(CHECK_X, CHECK_V)
  CHECK(vt == NULL && lt == NULL);    /* no tensor made by a refused export */
  CHECK(cube_handle_is_null(h));      /* no handle made by a refused import */
  CHECK_EQ_U64(g_dl_deleted, 0);      /* nor a refused tensor's deleter run */
  cube_handle_release(h64);
  cube_client_release(c);
  group_done("dlpack");
}

/* A tag one byte longer than cube accepts. */
static const char* long_tag(void) {
  static char t[65];
  memset(t, 'x', 64);
  t[64] = '\0';
  return t;
}

/* Tags, snapshots, the ledger and planning (cube/memory.h). */
CUBE_TEST(memview) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  cube_stream_id_t sid = cube_stream_id_new();
  cube_client_set_stream(c, sid);
  cube_memory_pools_t no_pools = {0};
  cube_handle_t h64 = CUBE_HANDLE_NULL;
  REQUIRE_OK(cube_client_empty(c, 64, &h64)); /* live: an install is refused */
  G_MEMVIEW(CHECK_X, CHECK_V)
  cube_handle_release(h64);
  cube_client_release(c);
  group_done("memview");
}

//===----------------------------------------------------------------------===//
// docs/errors.md against the table
//===----------------------------------------------------------------------===//

/* Trims spaces and one pair of backticks from a markdown cell, in place. */
static char* cell_trim(char* s) {
  while (*s == ' ') ++s;
  size_t n = strlen(s);
  while (n && s[n - 1] == ' ') s[--n] = 0;
  if (n >= 2 && s[0] == '`' && s[n - 1] == '`') {
    s[n - 1] = 0;
    ++s;
  }
  return s;
}

CUBE_TEST(trace) {
  cube_client_t* c = client_or_null(cpu0());
  REQUIRE(c != NULL);
  const char* tmp = getenv("CUBE_TEST_TMPDIR");
  if (!tmp || !*tmp) tmp = "/tmp";
  snprintf(g_trace_existing, sizeof(g_trace_existing), "%s/errors_catalogue_trace_%d.json", tmp,
           (int)getpid());
  FILE* f = fopen(g_trace_existing, "w");
  REQUIRE(f != NULL);
  fclose(f);
  G_TRACE(CHECK_X, CHECK_V)
  remove(g_trace_existing);
  cube_client_release(c);
  group_done("trace");
}

CUBE_TEST(doc_matches_table) {
  const char* src = getenv("CUBE_SOURCE_DIR");
  if (!src || !*src) {
    printf("note: CUBE_SOURCE_DIR is not set; docs/errors.md was not compared with the table "
           "(%zu rows)\n",
           (size_t)ROW_COUNT);
    return;
  }
  char path[1024];
  snprintf(path, sizeof(path), "%s/docs/errors.md", src);
  FILE* f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    cube_test_failures++;
    return;
  }
  /* Table rows look like "| E001 | `fn` | input | `CODE` | message |". */
  char line[4096];
  size_t n = 0;
  while (fgets(line, sizeof(line), f)) {
    if (strncmp(line, "| E", 3) != 0) continue;
    char* cells[5] = {0};
    char* p = line + 1;
    for (int k = 0; k < 5 && p; ++k) {
      char* bar = strchr(p, '|');
      if (bar) *bar = 0;
      cells[k] = cell_trim(p);
      p = bar ? bar + 1 : NULL;
    }
    if (!cells[3]) {
      fprintf(stderr, "%s: malformed row: %s\n", path, line);
      cube_test_failures++;
      continue;
    }
    if (n >= ROW_COUNT) {
      fprintf(stderr, "%s: row %s is not in the test table\n", path, cells[0]);
      cube_test_failures++;
      continue;
    }
    const row_t* r = &k_rows[n];
    const char* code = r->code == CUBE_STATUS_OK  ? "fallback"
                       : ROW_IS_DEFECT(r->code) ? "DEFECT"
                                                : cube_status_code_name(r->code);
    if (strcmp(cells[0], r->id) != 0 || strcmp(cells[1], r->fn) != 0 || strcmp(cells[3], code) != 0) {
      fprintf(stderr, "%s: row %zu is %s | %s | %s, the test table has %s | %s | %s\n", path,
              n + 1, cells[0], cells[1], cells[3], r->id, r->fn, code);
      cube_test_failures++;
    }
    ++n;
  }
  fclose(f);
  if (n != ROW_COUNT) {
    fprintf(stderr, "%s has %zu rows, the test table %zu\n", path, n, (size_t)ROW_COUNT);
    cube_test_failures++;
  }
}
