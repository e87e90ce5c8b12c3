/* cube: the command-line tool.
 *   cube info   backends, devices, properties and features
 *   cube cache  kernel cache: directory, entries, size and counters
 *   cube cache clear   remove every disk entry
 *   cube demo   uploads tensors (contiguous and packed), runs kernels, reads
 *               the results back and checks them, prints memory usage and a
 *               profile. Exit status 0 only if every check passed.
 */
#include <cube/cube.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int usage(void) {
  fprintf(stderr,
          "usage: cube <command>\n"
          "  info   list backends, devices, properties and features\n"
          "  cache  show the kernel cache (directory, entries, size, counters)\n"
          "  cache clear   remove every kernel cache entry on disk\n"
          "  demo   run the demo on the default backend (CUBE_BACKEND, else cpu)\n");
  return 2;
}

static const char* fmt_bytes(uint64_t b, char* buf, size_t n) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int i = 0;
  while (v >= 1024 && i < 4) v /= 1024, ++i;
  snprintf(buf, n, i ? "%.2f %s" : "%.0f %s", v, u[i]);
  return buf;
}

static void print_features(uint64_t bits) {
  static const struct {
    uint64_t bit;
    const char* name;
  } names[] = {{CUBE_FEATURE_F16, "f16"},
               {CUBE_FEATURE_BF16, "bf16"},
               {CUBE_FEATURE_F64, "f64"},
               {CUBE_FEATURE_I64, "i64"},
               {CUBE_FEATURE_ATOMIC_U32, "atomic-u32"},
               {CUBE_FEATURE_ATOMIC_F32_ADD, "atomic-f32-add"},
               {CUBE_FEATURE_PLANE, "plane"},
               {CUBE_FEATURE_SYNC_CUBE, "sync-cube"},
               {CUBE_FEATURE_SHARED_MEMORY, "shared-memory"},
               {CUBE_FEATURE_NATIVE_KERNELS, "native-kernels"},
               {CUBE_FEATURE_DYNAMIC_COUNT, "dynamic-count"},
               {CUBE_FEATURE_COLLECTIVES, "collectives"},
               {CUBE_FEATURE_PINNED_STAGING, "pinned-staging"}};
  printf("    features:");
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i)
    if (bits & names[i].bit) printf(" %s", names[i].name);
  printf("\n");
}

static int cmd_info(void) {
  printf("cube %s\n", cube_version());
  printf("default backend: %s\n", cube_backend_name(cube_backend_default()));
  for (int b = 0; b < CUBE_BACKEND_COUNT; ++b) {
    cube_status_t st = cube_backend_status((cube_backend_t)b);
    size_t n = cube_device_count((cube_backend_t)b);
    printf("backend %-7s %s, %zu device%s%s%s\n", cube_backend_name((cube_backend_t)b),
           st ? "unavailable" : "available", n, n == 1 ? "" : "s", st ? ": " : "",
           st ? cube_status_message(st) : "");
    cube_status_free(st);
    for (size_t i = 0; i < n; ++i) {
      cube_client_t* c;
      cube_status_t s = cube_client_load((cube_device_id_t){(cube_backend_t)b, (uint32_t)i}, &c);
      if (s) {
        printf("  device %zu: %s\n", i, cube_status_message(s));
        cube_status_free(s);
        continue;
      }
      const cube_device_properties_t* p = cube_client_properties(c);
      const cube_backend_info_t* info = cube_client_info(c);
      char a[32], m[32];
      printf("  device %s:%zu  %s\n", cube_backend_name((cube_backend_t)b), i, p->name);
      printf("    runtime: %s; queue: %s\n", info->version,
             cube_client_is_blocking(c) ? "inline" : "threaded");
      printf("    memory: %s total, largest allocation %s, alignment %" PRIu64 " B\n",
             fmt_bytes(p->memory.total_memory, a, sizeof(a)),
             fmt_bytes(p->memory.max_page_size, m, sizeof(m)), p->memory.alignment);
      if (p->hardware.num_streaming_multiprocessors)
        printf("    multiprocessors: %u; compute capability %u.%u; ",
               p->hardware.num_streaming_multiprocessors, p->hardware.compute_capability / 10,
               p->hardware.compute_capability % 10);
      else
        printf("    cores: %u; ", p->hardware.num_cpu_cores);
      if (p->hardware.l2_cache_size)
        printf("L2 %s; ", fmt_bytes(p->hardware.l2_cache_size, a, sizeof(a)));
      printf("load width %u bits; plane %u..%u; max vector %u\n", p->hardware.load_width,
             p->hardware.plane_size_min, p->hardware.plane_size_max, p->hardware.max_vector_size);
      printf("    cube dim max (%u, %u, %u), %u units; cube count max (%u, %u, %u)\n",
             p->hardware.max_cube_dim[0], p->hardware.max_cube_dim[1],
             p->hardware.max_cube_dim[2], p->hardware.max_units_per_cube,
             p->hardware.max_cube_count[0], p->hardware.max_cube_count[1],
             p->hardware.max_cube_count[2]);
      printf("    shared memory %s per cube; timing %s; layout %s\n",
             fmt_bytes(p->hardware.max_shared_memory_size, a, sizeof(a)),
             p->timing_method == CUBE_TIMING_DEVICE ? "device" : "system",
             p->layout_policy == CUBE_LAYOUT_POLICY_PITCHED ? "pitched" : "contiguous");
      uint32_t vs[8];
      size_t nv = 0;
      cube_status_free(cube_client_io_optimized_vector_sizes(c, 4, vs, 8, &nv));
      printf("    io vector sizes for f32:");
      for (size_t k = 0; k < nv && k < 8; ++k) printf(" %u", vs[k]);
      printf("\n");
      print_features(cube_client_features(c)->bits);
      if (cube_client_features(c)->bits & CUBE_FEATURE_COLLECTIVES) {
        const char* detail = NULL;
        const char* t = cube_collective_transport((cube_backend_t)b, &detail);
        printf("    collectives: %s (%s)\n", t ? t : "none", detail ? detail : "");
      }
      cube_client_release(c);
    }
  }
  cube_shutdown();
  return 0;
}

//===----------------------------------------------------------------------===//
// demo
//===----------------------------------------------------------------------===//

/* The demo's kernels in the cube dialect (docs/dialect.md): compiled by the
 * backend on first launch and kept in the kernel cache. */
static const char* demo_source =
    "#ifndef BLOCK\n"
    "#define BLOCK 256 /* a compile-time constant; each define set is its own kernel */\n"
    "#endif\n"
    "\n"
    "CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(y)) CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "}\n"
    "\n"
    "/* Per-cube partial sums: a tree in cube-local memory, one barrier per level. */\n"
    "CUBE_KERNEL(partial_sum, CUBE_ARRAY(const float, x), CUBE_ARRAY(double, out)) {\n"
    "  CUBE_SHARED(double, tile, BLOCK);\n"
    "  uint32_t u = UNIT_POS_X;\n"
    "  uint64_t i = ABSOLUTE_POS_X;\n"
    "  tile[u] = i < CUBE_LEN(x) ? (double)x[i] : 0.0;\n"
    "  sync_cube();\n"
    "  for (uint32_t s = BLOCK / 2; s > 0; s >>= 1) {\n"
    "    if (u < s) tile[u] += tile[u + s];\n"
    "    sync_cube();\n"
    "  }\n"
    "  if (u == 0) CUBE_STORE(out, CUBE_POS_X, tile[0]);\n"
    "}\n"
    "\n"
    "/* m[r][c] *= s over a rank-2 tensor with the given row stride: one cube a row. */\n"
    "CUBE_KERNEL(scale_rows, CUBE_ARRAY(float, m), float s, uint64_t row_stride, uint64_t cols) {\n"
    "  uint64_t r = CUBE_POS_X;\n"
    "  for (uint64_t c = 0; c < cols; ++c) CUBE_STORE(m, r * row_stride + c, s * CUBE_LOAD(m, r * row_stride + c));\n"
    "}\n";

/* m[r][c] *= s over a rank-2 tensor with row stride args[2]. */
static int scale_rows(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)n;
  float* m = args[0].buffer.data;
  float s = args[1].f32;
  uint64_t row_stride = args[2].u64, cols = args[3].u64;
  uint32_t r = cube->cube_pos[0];
  for (uint64_t c = 0; c < cols; ++c) m[r * row_stride + c] *= s;
  return 0;
}

static int failures = 0;
#define DEMO_CHECK(cond, ...)                   \
  do {                                          \
    if (cond) {                                 \
      printf("  ok    ");                       \
    } else {                                    \
      printf("  FAIL  ");                       \
      ++failures;                               \
    }                                           \
    printf(__VA_ARGS__);                        \
    printf("\n");                               \
  } while (0)

#define TRY(expr)                                                           \
  do {                                                                      \
    cube_status_t s_ = (expr);                                              \
    if (s_) {                                                               \
      printf("  FAIL  %s: [%s] %s\n", #expr,                                \
             cube_status_code_name(cube_status_code(s_)), cube_status_message(s_)); \
      cube_status_free(s_);                                                 \
      return 1;                                                             \
    }                                                                       \
  } while (0)

static void log_line(void* user, const char* line) {
  (void)user;
  printf("  profile | %s\n", line);
}

typedef struct {
  cube_client_t* c;
  cube_kernel_t* k;
  cube_handle_t x, y;
  uint32_t cubes;
} profile_arg_t;

static cube_status_t profiled_launch(void* p) {
  profile_arg_t* a = p;
  cube_arg_t args[] = {cube_arg_buffer(a->x), cube_arg_buffer(a->y), cube_arg_f32(0.5f)};
  return cube_client_launch(a->c, a->k, cube_count_static(a->cubes, 1, 1), 3, args);
}

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static float rand_float(void) {
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return (float)((rng * 0x2545F4914F6CDD1Dull) >> 40) / (float)(1u << 24) - 0.5f;
}

static int cmd_demo(void) {
  cube_device_id_t dev = {cube_backend_default(), 0};
  cube_server_options_t opts;
  cube_server_options_initialize(&opts);
  opts.profile_level = CUBE_PROFILE_BASIC;
  opts.log_fn = log_line;
  cube_client_t* c;
  TRY(cube_client_init(dev, &opts, &c));
  const cube_device_properties_t* p = cube_client_properties(c);
  printf("demo on %s (%s queue)\n", p->name, cube_client_is_blocking(c) ? "inline" : "threaded");

  /* 1. Contiguous upload + saxpy. */
  enum { N = 1 << 20, DIM = 256 };
  float* x = malloc(N * sizeof(float));
  float* y = malloc(N * sizeof(float));
  float* expect = malloc(N * sizeof(float));
  for (int i = 0; i < N; ++i) {
    x[i] = rand_float();
    y[i] = rand_float();
    expect[i] = 2.0f * x[i] + y[i];
  }
  cube_handle_t hx, hy;
  TRY(cube_client_create_from_slice(c, x, N * sizeof(float), &hx));
  TRY(cube_client_create_from_slice(c, y, N * sizeof(float), &hy));
  cube_kernel_desc_t d1 = {.cube_dim = {DIM, 1, 1}, .source = demo_source, .entry = "saxpy"};
  cube_kernel_t* k_saxpy;
  TRY(cube_kernel_create(&d1, &k_saxpy));
  cube_arg_t a1[] = {cube_arg_buffer(hx), cube_arg_buffer(hy), cube_arg_f32(2.0f)};
  TRY(cube_client_launch(c, k_saxpy, cube_count_static(N / DIM, 1, 1), 3, a1));
  cube_bytes_t* out;
  TRY(cube_client_read_one(c, hy, &out));
  const float* got = cube_bytes_const_data(out);
  int bad = 0;
  /* The compiled kernel may fuse a*x+y into one FMA: compare within an ulp. */
  for (int i = 0; i < N; ++i) bad += fabsf(got[i] - expect[i]) > 1e-6f * (1.0f + fabsf(expect[i]));
  DEMO_CHECK(bad == 0, "saxpy (dialect kernel) over %d floats: %d mismatches", N, bad);
  cube_bytes_release(out);

  /* 2. Reduction with cube-local memory. */
  cube_handle_t hpart;
  TRY(cube_client_empty(c, (N / DIM) * sizeof(double), &hpart));
  cube_define_t block[] = {{"BLOCK", "256"}}; /* = DIM */
  cube_kernel_desc_t d2 = {.cube_dim = {DIM, 1, 1}, .source = demo_source, .entry = "partial_sum",
                           .defines = block, .define_count = 1};
  cube_kernel_t* k_sum;
  TRY(cube_kernel_create(&d2, &k_sum));
  cube_arg_t a2[] = {cube_arg_buffer(hx), cube_arg_buffer(hpart)};
  TRY(cube_client_launch(c, k_sum, cube_count_static(N / DIM, 1, 1), 2, a2));
  TRY(cube_client_read_one(c, hpart, &out));
  double total = 0, host = 0;
  for (int i = 0; i < N / DIM; ++i) total += ((const double*)cube_bytes_const_data(out))[i];
  for (int i = 0; i < N; ++i) host += x[i];
  DEMO_CHECK(fabs(total - host) <= 1e-6 * (fabs(host) + 1),
             "sum of %d floats (dialect kernel, sync_cube): %.6f (host %.6f)", N, total, host);
  cube_bytes_release(out);

  /* 3. Three tensors packed into one buffer, one scaled in place. */
  enum { R = 3, C = 5, V = 7, B = 1001 };
  float m[R * C];
  double v[V];
  uint8_t bytes[B];
  for (int i = 0; i < R * C; ++i) m[i] = rand_float();
  for (int i = 0; i < V; ++i) v[i] = rand_float();
  for (int i = 0; i < B; ++i) bytes[i] = (uint8_t)(rand_float() * 255);
  cube_layout_desc_t descs[3];
  uint64_t sm[2] = {R, C}, sv[1] = {V}, sb[1] = {B};
  TRY(cube_layout_desc_init(CUBE_LAYOUT_OPTIMIZED, 2, sm, 4, &descs[0]));
  TRY(cube_layout_desc_init(CUBE_LAYOUT_CONTIGUOUS, 1, sv, 8, &descs[1]));
  TRY(cube_layout_desc_init(CUBE_LAYOUT_CONTIGUOUS, 1, sb, 1, &descs[2]));
  const void* datas[3] = {m, v, bytes};
  size_t sizes[3] = {sizeof(m), sizeof(v), sizeof(bytes)};
  cube_tensor_t t[3];
  TRY(cube_client_create_tensors_from_slices(c, 3, descs, datas, sizes, t));
  printf("  packed 3 tensors in one buffer of %" PRIu64 " bytes at offsets %" PRIu64 ", %" PRIu64
         ", %" PRIu64 "\n",
         cube_handle_buffer_size(t[0].handle), cube_handle_offset(t[0].handle),
         cube_handle_offset(t[1].handle), cube_handle_offset(t[2].handle));
  cube_arg_kind_t scale_kinds[] = {CUBE_ARG_BUFFER, CUBE_ARG_F32, CUBE_ARG_U64, CUBE_ARG_U64};
  /* A native C kernel beside the dialect ones where the backend takes them
   * (the CPU), else the same operation in the dialect. */
  bool native = (cube_client_features(c)->bits & CUBE_FEATURE_NATIVE_KERNELS) != 0;
  cube_kernel_desc_t d3 = {.name = "scale_rows", .cube_dim = {1, 1, 1}, .arg_kinds = scale_kinds,
                           .arg_count = 4, .cpu_fn = scale_rows};
  if (!native)
    d3 = (cube_kernel_desc_t){.cube_dim = {1, 1, 1}, .source = demo_source, .entry = "scale_rows"};
  cube_kernel_t* k_scale;
  TRY(cube_kernel_create(&d3, &k_scale));
  cube_arg_t a3[] = {cube_arg_buffer(t[0].handle), cube_arg_f32(3.0f), cube_arg_u64(t[0].strides[0]),
                     cube_arg_u64(C)};
  TRY(cube_client_launch(c, k_scale, cube_count_static(R, 1, 1), 4, a3));
  cube_bytes_t* outs[3];
  TRY(cube_client_read_tensor(c, 3, t, outs));
  bad = 0;
  for (int i = 0; i < R * C; ++i) bad += ((const float*)cube_bytes_const_data(outs[0]))[i] != m[i] * 3.0f;
  bad += memcmp(cube_bytes_const_data(outs[1]), v, sizeof(v)) != 0;
  bad += memcmp(cube_bytes_const_data(outs[2]), bytes, sizeof(bytes)) != 0;
  DEMO_CHECK(bad == 0, "packed tensors [3x5 f32 scaled (%s kernel), 7 f64, 1001 u8] read back: %d mismatches",
             native ? "native C" : "dialect", bad);
  cube_bytes_release_array(outs, 3);

  /* 4. A measured launch. */
  profile_arg_t pa = {c, k_saxpy, hx, hy, N / DIM};
  cube_profile_duration_t dur;
  TRY(cube_client_profile(c, profiled_launch, &pa, "saxpy (profiled)", &dur));
  DEMO_CHECK(cube_profile_duration_ns(&dur) > 0, "profiled saxpy took %.3f ms",
             cube_profile_duration_ns(&dur) / 1e6);

  /* 5. Memory usage, then the profile summary printed by sync. */
  cube_memory_usage_t u;
  TRY(cube_client_memory_usage(c, &u));
  char line[256];
  printf("  memory: %s\n", cube_memory_usage_format(&u, line, sizeof(line)));
  DEMO_CHECK(u.number_allocs == 4, "memory usage counts %" PRIu64 " live slices (4 expected: x, y, partial sums, the packed buffer)",
             u.number_allocs);
  printf("  profile summary (printed by sync):\n");
  TRY(cube_client_sync(c));

  for (int i = 0; i < 3; ++i) cube_tensor_release(&t[i]);
  cube_handle_release(hx);
  cube_handle_release(hy);
  cube_handle_release(hpart);
  TRY(cube_client_memory_cleanup(c));
  TRY(cube_client_memory_usage(c, &u));
  DEMO_CHECK(u.number_allocs == 0 && u.bytes_reserved == 0,
             "after release and cleanup: %" PRIu64 " allocations, %" PRIu64 " bytes reserved",
             u.number_allocs, u.bytes_reserved);
  cube_kernel_release(k_saxpy);
  cube_kernel_release(k_sum);
  cube_kernel_release(k_scale);
  cube_client_release(c);
  cube_shutdown();
  free(x);
  free(y);
  free(expect);
  printf("demo: %s\n", failures ? "FAILED" : "all checks passed");
  return failures ? 1 : 0;
}

static int cmd_cache(int argc, char** argv) {
  if (argc >= 3 && strcmp(argv[2], "clear") == 0) {
    cube_status_t st = cube_kernel_cache_clear();
    if (st) {
      fprintf(stderr, "cube cache clear: %s\n", cube_status_message(st));
      cube_status_free(st);
      return 1;
    }
    printf("kernel cache cleared: %s\n", cube_kernel_cache_dir());
    return 0;
  }
  if (argc >= 3) return usage();
  cube_kernel_cache_stats_t s;
  cube_status_t st = cube_kernel_cache_stats(&s);
  if (st) {
    fprintf(stderr, "cube cache: %s\n", cube_status_message(st));
    cube_status_free(st);
    return 1;
  }
  char b[32];
  const char* dir = cube_kernel_cache_dir();
  printf("kernel cache: %s\n", dir[0] ? dir : "(disk cache off: CUBE_CACHE_DIR=off)");
  printf("  entries on disk: %llu, %s\n", (unsigned long long)s.disk_entries,
         fmt_bytes(s.disk_bytes, b, sizeof(b)));
  printf("  this process: %llu memory hits, %llu disk hits, %llu misses, %llu failed compiles, "
         "%llu corrupt entries rebuilt\n",
         (unsigned long long)s.memory_hits, (unsigned long long)s.disk_hits,
         (unsigned long long)s.misses, (unsigned long long)s.compile_failures,
         (unsigned long long)s.corrupt_entries);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  if (strcmp(argv[1], "cache") == 0) return cmd_cache(argc, argv);
  if (strcmp(argv[1], "info") == 0) return cmd_info();
  if (strcmp(argv[1], "demo") == 0) return cmd_demo();
  return usage();
}
