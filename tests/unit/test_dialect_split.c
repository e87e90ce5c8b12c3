/* Kernels with sync_cube split at their barriers into loops over units
 * (src/kernel/dialect_split.c): the same source is compiled twice,
 * split and as fibers (CUBE_CPU_FIBERS), run cube by cube here and compared
 * exactly with each other and with a host reference; kernels outside the
 * supported subset must keep the fibers and stay correct.
 */
// cube-test-libs: cube_static
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "cube/backends/cpu.h"
#include "subprocess.h"
#include "kernel/dialect.h"

/* Build and run -------------------------------------------------------------------- */

static char tmp_dir_path[1024];

static void remove_tmp_dir(void) {
  if (tmp_dir_path[0]) rmdir(tmp_dir_path);
}

static const char* tmp_dir(void) {
  if (!tmp_dir_path[0]) {
    atexit(remove_tmp_dir);
    const char* base = getenv("CUBE_TEST_TMPDIR");
    if (!base || !base[0]) base = "/tmp";
    mkdir(base, 0755);
    snprintf(tmp_dir_path, sizeof tmp_dir_path, "%s/dialect-split-%ld", base, (long)getpid());
    mkdir(tmp_dir_path, 0755);
  }
  return tmp_dir_path;
}


static void print_file(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return;
  char buf[4096];
  size_t got;
  while ((got = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, got, stderr);
  fclose(f);
}

typedef struct kern {
  void* handle;
  cube_cpu_kernel_fn fn;
  cube__signature_t sig;
  cube_define_t defs[8];
  uint32_t ndefs;
  bool split; /* the generated unit has the split entry */
  char so_path[1100];
} kern_t;

static atomic_int so_counter;

/* Generates |entry| of |source| (split unless |fibers|), compiles and loads
 * it. */
static bool build(kern_t* k, const char* source, const char* entry, const cube_define_t* defines,
                  uint32_t define_count, bool fibers) {
  memset(k, 0, sizeof *k);
  for (uint32_t i = 0; i < define_count && i < 7; ++i) k->defs[k->ndefs++] = defines[i];
  if (fibers) k->defs[k->ndefs++] = (cube_define_t){"CUBE_CPU_FIBERS", "1"};
  cube_status_t st = cube__dialect_parse(source, entry, &k->sig);
  if (st) {
    fprintf(stderr, "parse %s: %s\n", entry, cube_status_message(st));
    cube_status_free(st);
    return false;
  }
  char* text = NULL;
  st = cube__dialect_generate(CUBE__TARGET_CPU, &k->sig, source, k->defs, k->ndefs,
                              CUBE_EXEC_CHECKED, &text);
  if (st) {
    fprintf(stderr, "generate %s: %s\n", entry, cube_status_message(st));
    cube_status_free(st);
    return false;
  }
  k->split = strstr(text, "cube__split_run(") != NULL;
  snprintf(k->so_path, sizeof k->so_path, "%s/%s-%d.so", tmp_dir(), entry,
           atomic_fetch_add(&so_counter, 1));
  char log_path[1200];
  snprintf(log_path, sizeof log_path, "%s.log", k->so_path);
  char* argv[] = {"cc",         "-O2", "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror",
                  "-std=gnu11", "-x",  "c",       "-",     "-o",    k->so_path, NULL};
  int rc = run_with_stdin(argv, text, log_path);
  if (rc != 0) {
    fprintf(stderr, "cc failed (%d) for %s:\n", rc, entry);
    print_file(log_path);
    if (getenv("CUBE_TEST_DUMP")) fputs(text, stderr);
  }
  unlink(log_path);
  free(text);
  if (rc != 0) return false;
  k->handle = dlopen(k->so_path, RTLD_NOW | RTLD_LOCAL);
  if (!k->handle) return false;
  k->fn = (cube_cpu_kernel_fn)(uintptr_t)dlsym(k->handle, "cube_kernel_entry");
  return k->fn != NULL;
}

static void unload(kern_t* k) {
  if (k->handle) dlclose(k->handle);
  if (k->so_path[0]) unlink(k->so_path);
  memset(k, 0, sizeof *k);
}

/* Whether the generator splits |entry| of |source| (no compile). */
static bool splits(const char* source, const char* entry, const cube_define_t* defines,
                   uint32_t define_count) {
  cube__signature_t sig;
  cube_status_t st = cube__dialect_parse(source, entry, &sig);
  if (st) {
    cube_status_free(st);
    return false;
  }
  char* text = NULL;
  st = cube__dialect_generate(CUBE__TARGET_CPU, &sig, source, defines, define_count,
                              CUBE_EXEC_CHECKED, &text);
  if (st) {
    cube_status_free(st);
    return false;
  }
  bool s = strstr(text, "cube__split_run(") != NULL;
  free(text);
  return s;
}

/* Runs every cube of count x dim, one after the other; the first non-zero
 * return of the entry, or 0. */
static int run(const kern_t* k, const uint32_t count[3], const uint32_t dim[3],
               const cube_cpu_arg_t* args, uint32_t nargs) {
  uint64_t units = (uint64_t)dim[0] * dim[1] * dim[2];
  uint64_t size = cube__dialect_cpu_scratch_size(&k->sig, units, k->defs, k->ndefs);
  void* scratch = size ? malloc(size) : NULL;
  cube_cpu_cube_t c;
  memset(&c, 0, sizeof c);
  memcpy(c.cube_count, count, sizeof c.cube_count);
  memcpy(c.cube_dim, dim, sizeof c.cube_dim);
  c.mode = CUBE_EXEC_CHECKED;
  c.scratch = scratch;
  c.scratch_size = size;
  int rc = 0;
  uint64_t cubes = (uint64_t)count[0] * count[1] * count[2];
  for (uint64_t i = 0; i < cubes && rc == 0; ++i) {
    c.cube_pos[0] = (uint32_t)(i % count[0]);
    c.cube_pos[1] = (uint32_t)(i / count[0] % count[1]);
    c.cube_pos[2] = (uint32_t)(i / count[0] / count[1]);
    rc = k->fn(&c, args, nargs);
  }
  free(scratch);
  return rc;
}

static cube_cpu_arg_t buf_arg(void* data, uint64_t bytes) {
  cube_cpu_arg_t a;
  memset(&a, 0, sizeof a);
  a.buffer.data = data;
  a.buffer.len = bytes;
  return a;
}
static cube_cpu_arg_t u32_arg(uint32_t v) {
  cube_cpu_arg_t a;
  memset(&a, 0, sizeof a);
  a.u32 = v;
  return a;
}

static float rand_float(uint64_t* rng) {
  return (float)(cube_test_rand(rng) >> 40) / (float)(1u << 24) - 0.5f;
}

/* Builds |entry| both ways; false (and a failed check) when either fails. */
static bool build_both(kern_t* split, kern_t* fib, const char* src, const char* entry,
                       const cube_define_t* defs, uint32_t ndefs) {
  bool ok = build(split, src, entry, defs, ndefs, false) && build(fib, src, entry, defs, ndefs, true);
  CHECK(ok);
  if (ok) {
    CHECK(split->split);
    CHECK(!fib->split);
  }
  return ok;
}

/* Reduction with a tree for any cube size ----------------------------------------- */

static const char* const K_REDUCE =
    "CUBE_KERNEL(rsum, CUBE_ARRAY(const float, in), CUBE_ARRAY(float, out))\n"
    "{\n"
    "    CUBE_SHARED(float, sh, 1024);\n"
    "    uint32_t u = UNIT_POS; /* a private local */\n"
    "    sh[u] = CUBE_LOAD(in, CUBE_POS * CUBE_DIM + u);\n"
    "    sync_cube();\n"
    "    for (uint32_t dim = CUBE_DIM; dim > 1u; dim = (dim + 1u) / 2u) {\n"
    "        const uint32_t s = (dim + 1u) / 2u;\n"
    "        if (u < s && u + s < dim) sh[u] += sh[u + s];\n"
    "        sync_cube();\n"
    "    }\n"
    "    if (u == 0) CUBE_STORE(out, CUBE_POS, sh[0]);\n"
    "}\n";

static float host_tree(const float* x, uint32_t dim) {
  float sh[1024];
  memcpy(sh, x, dim * sizeof(float));
  for (uint32_t d = dim; d > 1u; d = (d + 1u) / 2u) {
    uint32_t s = (d + 1u) / 2u;
    for (uint32_t u = 0; u < s && u + s < d; ++u) sh[u] += sh[u + s];
  }
  return sh[0];
}

CUBE_TEST(split_reduce_any_cube_size) {
  kern_t ks, kf;
  if (!build_both(&ks, &kf, K_REDUCE, "rsum", NULL, 0)) goto out;
  static const uint32_t dims[][3] = {{1, 1, 1}, {7, 1, 1}, {64, 1, 1}, {256, 1, 1},
                                     {100, 1, 1}, {3, 5, 2}, {1000, 1, 1}};
  uint64_t rng = 11;
  for (size_t d = 0; d < sizeof dims / sizeof dims[0]; ++d) {
    uint32_t dim = dims[d][0] * dims[d][1] * dims[d][2];
    uint32_t count[3] = {13, 1, 1};
    uint32_t n = dim * 13;
    float* in = malloc(n * sizeof(float));
    float* o1 = calloc(13, sizeof(float));
    float* o2 = calloc(13, sizeof(float));
    for (uint32_t i = 0; i < n; ++i) in[i] = rand_float(&rng);
    cube_cpu_arg_t a1[2] = {buf_arg(in, n * sizeof(float)), buf_arg(o1, 13 * sizeof(float))};
    cube_cpu_arg_t a2[2] = {buf_arg(in, n * sizeof(float)), buf_arg(o2, 13 * sizeof(float))};
    CHECK_EQ_U64(run(&ks, count, dims[d], a1, 2), 0);
    CHECK_EQ_U64(run(&kf, count, dims[d], a2, 2), 0);
    CHECK(memcmp(o1, o2, 13 * sizeof(float)) == 0);
    uint32_t bad = 0;
    for (uint32_t c = 0; c < 13; ++c) {
      float want = host_tree(in + c * dim, dim);
      if (memcmp(&want, &o1[c], sizeof want) != 0 && bad++ < 3)
        fprintf(stderr, "dim %u cube %u: %.9g, want %.9g\n", dim, c, (double)o1[c], (double)want);
    }
    CHECK_EQ_U64(bad, 0);
    free(in);
    free(o1);
    free(o2);
  }
  {
    /* Too little scratch: refused as with the fibers. */
    uint32_t dim[3] = {64, 1, 1};
    uint64_t need = cube__dialect_cpu_scratch_size(&ks.sig, 64, NULL, 0);
    float in[64] = {0}, out[1] = {0};
    cube_cpu_arg_t args[2] = {buf_arg(in, sizeof in), buf_arg(out, sizeof out)};
    cube_cpu_cube_t c;
    memset(&c, 0, sizeof c);
    c.cube_count[0] = c.cube_count[1] = c.cube_count[2] = 1;
    memcpy(c.cube_dim, dim, sizeof dim);
    c.scratch = malloc(need);
    c.scratch_size = need - 1;
    CHECK_EQ_U64(ks.fn(&c, args, 2), 1);
    c.scratch_size = need;
    CHECK_EQ_U64(ks.fn(&c, args, 2), 0);
    free(c.scratch);
  }
out:
  unload(&ks);
  unload(&kf);
}

/* Shared arrays read through one address -------------------------------------------- */

/* The generated unit of |entry| (malloc'd; NULL on failure). */
static char* split_text(const char* source, const char* entry) {
  cube__signature_t sig;
  cube_status_t st = cube__dialect_parse(source, entry, &sig);
  if (st) {
    cube_status_free(st);
    return NULL;
  }
  char* text = NULL;
  st = cube__dialect_generate(CUBE__TARGET_CPU, &sig, source, NULL, 0, CUBE_EXEC_CHECKED, &text);
  if (st) cube_status_free(st);
  return text;
}

/* |t| is both a shared array and, in a nested block, a float: the name may
 * not be redirected, and the kernel must still split and compute the same. */
static const char* const K_SHADOW =
    "CUBE_KERNEL(shadow, CUBE_ARRAY(const float, in), CUBE_ARRAY(float, out)) {\n"
    "  CUBE_SHARED(float, t, 256);\n"
    "  CUBE_SHARED(float, w, 256);\n"
    "  uint32_t u = UNIT_POS_X;\n"
    "  t[u] = CUBE_LOAD(in, CUBE_POS_X * CUBE_DIM_X + u);\n"
    "  w[u] = 2.0f * t[u] + (float)sizeof(w) / 1024.0f;\n"
    "  sync_cube();\n"
    "  if (u + 1 < CUBE_DIM_X) { float t = w[u + 1]; w[u] += t; }\n"
    "  sync_cube();\n"
    "  CUBE_STORE(out, CUBE_POS_X * CUBE_DIM_X + u, w[(u + 3) % CUBE_DIM_X] - (*&t)[u]);\n"
    "}\n";

CUBE_TEST(split_shared_arrays_read_through_one_address) {
  /* The generator reads each shared array's thread-local address once per
   * cube (a pointer the name then means), unless the name is declared again. */
  char* text = split_text(K_REDUCE, "rsum");
  CHECK(text != NULL);
  if (text) {
    CHECK(strstr(text, "cube__split_run(") != NULL);
    CHECK(strstr(text, "cube__sh_sh = &sh;") != NULL);
    CHECK(strstr(text, "#define sh (*cube__sh_sh)") != NULL);
  }
  free(text);
  text = split_text(K_SHADOW, "shadow");
  CHECK(text != NULL);
  if (text) {
    CHECK(strstr(text, "cube__split_run(") != NULL);
    CHECK(strstr(text, "cube__sh_t ") == NULL);
    CHECK(strstr(text, "#define w (*cube__sh_w)") != NULL);
  }
  free(text);

  /* The same results split and as fibers, and as the host computes them
   * (sizeof(w) is the array's, 1024 bytes). */
  kern_t ks, kf;
  if (!build_both(&ks, &kf, K_SHADOW, "shadow", NULL, 0)) goto out;
  uint64_t rng = 29;
  static const uint32_t dims[] = {1, 5, 64, 256};
  for (size_t d = 0; d < sizeof dims / sizeof dims[0]; ++d) {
    uint32_t dim = dims[d], cubes = 9, n = dim * cubes;
    uint32_t count[3] = {cubes, 1, 1}, dim3[3] = {dim, 1, 1};
    float* in = malloc(n * sizeof(float));
    float* o1 = calloc(n, sizeof(float));
    float* o2 = calloc(n, sizeof(float));
    for (uint32_t i = 0; i < n; ++i) in[i] = rand_float(&rng);
    cube_cpu_arg_t a1[2] = {buf_arg(in, n * sizeof(float)), buf_arg(o1, n * sizeof(float))};
    cube_cpu_arg_t a2[2] = {buf_arg(in, n * sizeof(float)), buf_arg(o2, n * sizeof(float))};
    CHECK_EQ_U64(run(&ks, count, dim3, a1, 2), 0);
    CHECK_EQ_U64(run(&kf, count, dim3, a2, 2), 0);
    CHECK(memcmp(o1, o2, n * sizeof(float)) == 0);
    uint32_t bad = 0;
    for (uint32_t c = 0; c < cubes; ++c) {
      const float* x = in + c * dim;
      float w[256];
      for (uint32_t u = 0; u < dim; ++u) w[u] = 2.0f * x[u] + 1.0f;
      for (uint32_t u = 0; u + 1 < dim; ++u) w[u] += w[u + 1];
      for (uint32_t u = 0; u < dim; ++u) {
        float want = w[(u + 3) % dim] - x[u];
        if (memcmp(&want, &o1[c * dim + u], sizeof want) != 0 && bad++ < 3)
          fprintf(stderr, "dim %u cube %u unit %u: %.9g, want %.9g\n", dim, c, u,
                  (double)o1[c * dim + u], (double)want);
      }
    }
    CHECK_EQ_U64(bad, 0);
    free(in);
    free(o1);
    free(o2);
  }
out:
  unload(&ks);
  unload(&kf);
}

/* Tiled matmul (examples/matmul.c) -------------------------------------------------- */

static const char* const K_MATMUL =
    "CUBE_KERNEL(matmul, CUBE_ARRAY(const float, a), CUBE_ARRAY(const float, b),\n"
    "            CUBE_ARRAY(float, c), uint32_t m, uint32_t n, uint32_t k) {\n"
    "  CUBE_SHARED(float, ta, TILE * TILE);\n"
    "  CUBE_SHARED(float, tb, TILE * TILE);\n"
    "  uint32_t tx = UNIT_POS_X, ty = UNIT_POS_Y;\n"
    "  uint32_t row = CUBE_POS_Y * TILE + ty, col = CUBE_POS_X * TILE + tx;\n"
    "  float acc = 0.0f;\n"
    "  for (uint32_t t = 0; t < k; t += TILE) {\n"
    "    ta[ty * TILE + tx] = (row < m && t + tx < k) ? a[(uint64_t)row * k + t + tx] : 0.0f;\n"
    "    tb[ty * TILE + tx] = (t + ty < k && col < n) ? b[(uint64_t)(t + ty) * n + col] : 0.0f;\n"
    "    sync_cube();\n"
    "    for (uint32_t q = 0; q < TILE; ++q) acc += ta[ty * TILE + q] * tb[q * TILE + tx];\n"
    "    sync_cube();\n"
    "  }\n"
    "  if (row < m && col < n) CUBE_STORE(c, (uint64_t)row * n + col, acc);\n"
    "}\n";

CUBE_TEST(split_matmul_odd_sizes) {
  static const uint32_t tiles[] = {8, 16};
  static const uint32_t sizes[][3] = {{37, 29, 45}, {1, 17, 3}, {33, 33, 33}};
  for (size_t t = 0; t < 2; ++t) {
    char tv[8];
    snprintf(tv, sizeof tv, "%u", tiles[t]);
    cube_define_t def = {"TILE", tv};
    kern_t ks, kf;
    if (!build_both(&ks, &kf, K_MATMUL, "matmul", &def, 1)) {
      unload(&ks);
      unload(&kf);
      continue;
    }
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
      uint32_t M = sizes[s][0], N = sizes[s][1], K = sizes[s][2], T = tiles[t];
      uint64_t rng = 5 + s;
      float* a = malloc(M * K * sizeof(float));
      float* b = malloc(K * N * sizeof(float));
      float* c1 = calloc(M * N, sizeof(float));
      float* c2 = calloc(M * N, sizeof(float));
      for (uint32_t i = 0; i < M * K; ++i) a[i] = rand_float(&rng);
      for (uint32_t i = 0; i < K * N; ++i) b[i] = rand_float(&rng);
      uint32_t count[3] = {(N + T - 1) / T, (M + T - 1) / T, 1}, dim[3] = {T, T, 1};
      cube_cpu_arg_t a1[6] = {buf_arg(a, M * K * sizeof(float)), buf_arg(b, K * N * sizeof(float)),
                              buf_arg(c1, M * N * sizeof(float)), u32_arg(M), u32_arg(N),
                              u32_arg(K)};
      cube_cpu_arg_t a2[6];
      memcpy(a2, a1, sizeof a2);
      a2[2] = buf_arg(c2, M * N * sizeof(float));
      CHECK_EQ_U64(run(&ks, count, dim, a1, 6), 0);
      CHECK_EQ_U64(run(&kf, count, dim, a2, 6), 0);
      CHECK(memcmp(c1, c2, M * N * sizeof(float)) == 0);
      double max_err = 0;
      for (uint32_t i = 0; i < M; ++i)
        for (uint32_t j = 0; j < N; ++j) {
          double sum = 0;
          for (uint32_t q = 0; q < K; ++q) sum += (double)a[i * K + q] * b[q * N + j];
          double err = fabs(sum - c1[i * N + j]);
          if (err > max_err) max_err = err;
        }
      CHECK(max_err < 1e-4);
      free(a);
      free(b);
      free(c1);
      free(c2);
    }
    unload(&ks);
    unload(&kf);
  }
}

/* Positions in 2-D and 3-D cubes across a barrier ------------------------------------ */

static const char* const K_POS =
    "CUBE_KERNEL(pos3, CUBE_ARRAY(uint32_t, out))\n"
    "{\n"
    "    CUBE_SHARED(uint32_t, sh, 512);\n"
    "    uint32_t lin = UNIT_POS;\n"
    "    sh[lin] = UNIT_POS_X + 100u * UNIT_POS_Y + 10000u * UNIT_POS_Z;\n"
    "    sync_cube();\n"
    "    uint32_t other = (lin + 1u) % CUBE_DIM;\n"
    "    CUBE_STORE(out, ABSOLUTE_POS * 3u, sh[other]);\n"
    "    CUBE_STORE(out, ABSOLUTE_POS * 3u + 1u,\n"
    "               ABSOLUTE_POS_X + 1000u * ABSOLUTE_POS_Y + 1000000u * ABSOLUTE_POS_Z);\n"
    "    CUBE_STORE(out, ABSOLUTE_POS * 3u + 2u, CUBE_POS + 1000u * UNIT_POS_PLANE + PLANE_DIM);\n"
    "}\n";

CUBE_TEST(split_positions_2d_3d) {
  kern_t ks, kf;
  if (!build_both(&ks, &kf, K_POS, "pos3", NULL, 0)) goto out;
  static const uint32_t cfg[][6] = {{4, 3, 2, 2, 3, 2}, {5, 3, 1, 3, 2, 1}, {1, 7, 3, 2, 1, 2}};
  for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; ++k) {
    uint32_t dim[3] = {cfg[k][0], cfg[k][1], cfg[k][2]}, count[3] = {cfg[k][3], cfg[k][4], cfg[k][5]};
    uint32_t gx = dim[0] * count[0], gy = dim[1] * count[1], gz = dim[2] * count[2];
    uint32_t total = gx * gy * gz, n = total * 3;
    uint32_t* o1 = calloc(n, sizeof(uint32_t));
    uint32_t* o2 = calloc(n, sizeof(uint32_t));
    cube_cpu_arg_t a1[1] = {buf_arg(o1, n * sizeof(uint32_t))};
    cube_cpu_arg_t a2[1] = {buf_arg(o2, n * sizeof(uint32_t))};
    CHECK_EQ_U64(run(&ks, count, dim, a1, 1), 0);
    CHECK_EQ_U64(run(&kf, count, dim, a2, 1), 0);
    CHECK(memcmp(o1, o2, n * sizeof(uint32_t)) == 0);
    uint32_t bad = 0, units = dim[0] * dim[1] * dim[2];
    for (uint32_t az = 0; az < gz; ++az)
      for (uint32_t ay = 0; ay < gy; ++ay)
        for (uint32_t ax = 0; ax < gx; ++ax) {
          uint32_t p = ax + gx * (ay + gy * az);
          uint32_t ux = ax % dim[0], uy = ay % dim[1], uz = az % dim[2];
          uint32_t cx = ax / dim[0], cy = ay / dim[1], cz = az / dim[2];
          uint32_t lin = ux + dim[0] * (uy + dim[1] * uz), o = (lin + 1) % units;
          uint32_t ox = o % dim[0], oy = o / dim[0] % dim[1], oz = o / dim[0] / dim[1];
          uint32_t want0 = ox + 100u * oy + 10000u * oz;
          uint32_t want1 = ax + 1000u * ay + 1000000u * az;
          uint32_t want2 = cx + count[0] * (cy + count[1] * cz) + 1u;
          if (o1[3 * p] != want0 || o1[3 * p + 1] != want1 || o1[3 * p + 2] != want2) ++bad;
        }
    CHECK_EQ_U64(bad, 0);
    free(o1);
    free(o2);
  }
out:
  unload(&ks);
  unload(&kf);
}

/* Unit axes and region locals ------------------------------------------------------- */

/* Privates initialised with UNIT_POS_X/_Y/_Z and never written mean the unit
 * loop's counters (tx, ty, tz); wx is written, so it keeps its slot. Each
 * region holds the privates it names in locals (acc, dacc), but acc2, whose
 * address is taken, and dacc where only a define (STEP) names it. */
static const char* const K_AXES =
    "static inline void bump(float* p, float v) { *p += v * 0.125f; }\n"
    "CUBE_KERNEL(axes, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, out), uint32_t reps)\n"
    "{\n"
    "    CUBE_SHARED(float, sh, 512);\n"
    "    uint32_t tx = UNIT_POS_X, ty = UNIT_POS_Y;\n"
    "    int32_t tz = UNIT_POS_Z;\n"
    "    uint32_t wx = UNIT_POS_X;\n"
    "    float acc = 0.0f, acc2 = 1.0f;\n"
    "    double dacc = 0.0;\n"
    "    uint32_t me = UNIT_POS;\n"
    "    sh[me] = CUBE_LOAD(x, ABSOLUTE_POS);\n"
    "    wx += 2u;\n"
    "    sync_cube();\n"
    "    for (uint32_t r = 0; r < reps; ++r) {\n"
    "        for (uint32_t q = 0; q < CUBE_DIM_X; ++q)\n"
    "            acc += sh[(ty + (uint32_t)tz * CUBE_DIM_Y) * CUBE_DIM_X + q] *\n"
    "                   sh[(q * CUBE_DIM_X + tx) % CUBE_DIM];\n"
    "        bump(&acc2, acc);\n"
    "        sync_cube();\n"
    "        sh[me] = acc * 0.5f + (float)wx + (float)dacc;\n"
    "        acc -= sh[me] * 0.25f;\n"
    "        STEP;\n"
    "        sync_cube();\n"
    "        STEP;\n"
    "        sync_cube();\n"
    "        dacc += (double)acc + (double)acc2;\n"
    "    }\n"
    "    CUBE_STORE(out, 2u * ABSOLUTE_POS, acc + acc2);\n"
    "    CUBE_STORE(out, 2u * ABSOLUTE_POS + 1u, (float)dacc + (float)(tx + 3u * ty) + (float)tz);\n"
    "}\n";

CUBE_TEST(split_unit_axes_and_region_locals) {
  cube_define_t step = {"STEP", "dacc += 0.5"};
  /* The text: no slots for the axes, a slot for wx; locals for acc and dacc
   * (written back), none for acc2. */
  cube__signature_t sig;
  char* text = NULL;
  REQUIRE_OK(cube__dialect_parse(K_AXES, "axes", &sig));
  REQUIRE_OK(cube__dialect_generate(CUBE__TARGET_CPU, &sig, K_AXES, &step, 1, CUBE_EXEC_CHECKED,
                                    &text));
  CHECK(strstr(text, "cube__split_run(") != NULL);
  CHECK(strstr(text, "cube__pv_tx") == NULL);
  CHECK(strstr(text, "cube__pv_ty") == NULL);
  CHECK(strstr(text, "cube__pv_tz") == NULL);
  CHECK(strstr(text, "#define tz ((int32_t)cube__uz)") != NULL);
  CHECK(strstr(text, "cube__pv_wx") != NULL);
  CHECK(strstr(text, "float cube__l_acc = cube__pv_acc[cube__unit];") != NULL);
  CHECK(strstr(text, "cube__pv_acc[cube__unit] = cube__l_acc;") != NULL);
  CHECK(strstr(text, "cube__pv_dacc[cube__unit] = cube__l_dacc;") != NULL);
  CHECK(strstr(text, "cube__l_acc2") == NULL);
  /* Five regions name dacc or run STEP; the one of `STEP;` alone names no
   * private, so dacc stays in its slot there: four hold it, not five. */
  int held = 0;
  for (const char* p = strstr(text, "double cube__l_dacc ="); p; p = strstr(p + 1, "double cube__l_dacc ="))
    ++held;
  CHECK_EQ_U64(held, 4);
  free(text);

  kern_t ks, kf;
  if (!build_both(&ks, &kf, K_AXES, "axes", &step, 1)) goto out;
  static const uint32_t cfg[][6] = {{4, 4, 1, 2, 1, 1}, {8, 2, 3, 1, 2, 1}, {5, 3, 2, 1, 1, 2},
                                    {16, 16, 1, 1, 1, 1}, {7, 1, 1, 3, 1, 1}};
  uint64_t rng = 0x5eed0a7e5ull;
  for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; ++k)
    for (uint32_t reps = 0; reps < 4; reps += 1 + (uint32_t)(k & 1)) {
      uint32_t dim[3] = {cfg[k][0], cfg[k][1], cfg[k][2]};
      uint32_t count[3] = {cfg[k][3], cfg[k][4], cfg[k][5]};
      uint32_t gx = dim[0] * count[0], gy = dim[1] * count[1], gz = dim[2] * count[2];
      uint32_t total = gx * gy * gz, U = dim[0] * dim[1] * dim[2];
      float* x = malloc(total * sizeof(float));
      float* o1 = malloc(2 * total * sizeof(float));
      float* o2 = malloc(2 * total * sizeof(float));
      REQUIRE(x && o1 && o2);
      for (uint32_t i = 0; i < total; ++i) x[i] = rand_float(&rng);
      for (uint32_t i = 0; i < 2 * total; ++i) o1[i] = o2[i] = NAN; /* poison */
      cube_cpu_arg_t a1[3] = {buf_arg(x, total * 4), buf_arg(o1, 2 * total * 4), u32_arg(reps)};
      cube_cpu_arg_t a2[3] = {buf_arg(x, total * 4), buf_arg(o2, 2 * total * 4), u32_arg(reps)};
      CHECK_EQ_U64(run(&ks, count, dim, a1, 3), 0);
      CHECK_EQ_U64(run(&kf, count, dim, a2, 3), 0);
      CHECK(memcmp(o1, o2, 2 * total * sizeof(float)) == 0);
      /* Host: region by region over the units of each cube. */
      uint32_t bad = 0;
      float sh[512], acc[512], acc2[512];
      double dacc[512];
      uint32_t wx[512], absu[512];
      for (uint32_t cz = 0; cz < count[2]; ++cz)
        for (uint32_t cy = 0; cy < count[1]; ++cy)
          for (uint32_t cx = 0; cx < count[0]; ++cx) {
            for (uint32_t u = 0; u < U; ++u) {
              uint32_t ux = u % dim[0], uy = u / dim[0] % dim[1], uz = u / dim[0] / dim[1];
              uint32_t ax = cx * dim[0] + ux, ay = cy * dim[1] + uy, az = cz * dim[2] + uz;
              absu[u] = ax + gx * (ay + gy * az);
              sh[u] = x[absu[u]];
              wx[u] = ux + 2u;
              acc[u] = 0.0f;
              acc2[u] = 1.0f;
              dacc[u] = 0.0;
            }
            for (uint32_t r = 0; r < reps; ++r) {
              for (uint32_t u = 0; u < U; ++u) {
                uint32_t ux = u % dim[0], uy = u / dim[0] % dim[1], uz = u / dim[0] / dim[1];
                for (uint32_t q = 0; q < dim[0]; ++q) {
                  float prod = sh[(uy + uz * dim[1]) * dim[0] + q] * sh[(q * dim[0] + ux) % U];
                  acc[u] += prod;
                }
                float inc = acc[u] * 0.125f;
                acc2[u] += inc;
              }
              for (uint32_t u = 0; u < U; ++u) {
                float h = acc[u] * 0.5f;
                h += (float)wx[u];
                sh[u] = h + (float)dacc[u];
                float d = sh[u] * 0.25f;
                acc[u] -= d;
                dacc[u] += 0.5;
              }
              for (uint32_t u = 0; u < U; ++u) dacc[u] += 0.5;
              for (uint32_t u = 0; u < U; ++u) dacc[u] += (double)acc[u] + (double)acc2[u];
            }
            for (uint32_t u = 0; u < U; ++u) {
              uint32_t ux = u % dim[0], uy = u / dim[0] % dim[1], uz = u / dim[0] / dim[1];
              float w0 = acc[u] + acc2[u];
              float w1 = (float)dacc[u] + (float)(ux + 3u * uy) + (float)uz;
              float g0 = o1[2 * absu[u]], g1 = o1[2 * absu[u] + 1];
              if (!(fabsf(g0 - w0) <= 1e-4f * (1.0f + fabsf(w0))) ||
                  !(fabsf(g1 - w1) <= 1e-4f * (1.0f + fabsf(w1))))
                ++bad;
            }
          }
      if (bad) fprintf(stderr, "config %zu reps %u: %u units differ from the host\n", k, reps, bad);
      CHECK_EQ_U64(bad, 0);
      free(x);
      free(o1);
      free(o2);
    }
out:
  unload(&ks);
  unload(&kf);
}

/* Private locals of every supported type across barriers --------------------------- */

static const char* const K_PRIV =
    "CUBE_KERNEL(privs, CUBE_ARRAY(double, out), CUBE_ARRAY(uint64_t, outi), uint32_t rounds)\n"
    "{\n"
    "    CUBE_SHARED(double, sh, 256);\n"
    "    const uint32_t u = UNIT_POS;\n"
    "    double a = u * 1.5, b = u + 0.25;\n"
    "    float f = (float)u * 0.5f;\n"
    "    uint64_t g = u * 0x9E3779B97F4A7C15ull;\n"
    "    int32_t neg = -(int32_t)u;\n"
    "    int64_t big = (int64_t)u << 40;\n"
    "    unsigned w = 3u;\n"
    "    int iv;\n"
    "    for (uint32_t r = 0; r < rounds; ++r) {\n"
    "        sh[u] = a;\n"
    "        sync_cube();\n"
    "        iv = (int)r;\n"
    "        a = a * 0.5 + sh[(u + 1u) % CUBE_DIM] + b;\n"
    "        f = f * 0.25f + (float)a;\n"
    "        g = g * 6364136223846793005ull + 1442695040888963407ull;\n"
    "        sync_cube();\n"
    "        b = b - 0.125 * (double)neg + iv;\n"
    "        big += w;\n"
    "    }\n"
    "    CUBE_STORE(out, ABSOLUTE_POS * 2u, a + b);\n"
    "    CUBE_STORE(out, ABSOLUTE_POS * 2u + 1u, (double)f);\n"
    "    CUBE_STORE(outi, ABSOLUTE_POS, g ^ (uint64_t)(int64_t)neg ^ (uint64_t)big);\n"
    "}\n";

CUBE_TEST(split_private_locals_across_barriers) {
  kern_t ks, kf;
  if (!build_both(&ks, &kf, K_PRIV, "privs", NULL, 0)) goto out;
  static const uint32_t dims[] = {2, 7, 64, 256};
  static const uint32_t rounds[] = {0, 1, 5};
  for (size_t d = 0; d < 4; ++d)
    for (size_t r = 0; r < 3; ++r) {
      uint32_t dim[3] = {dims[d], 1, 1}, count[3] = {3, 1, 1}, n = dims[d] * 3;
      double* o1 = calloc(2 * n, sizeof(double));
      double* o2 = calloc(2 * n, sizeof(double));
      uint64_t* i1 = calloc(n, sizeof(uint64_t));
      uint64_t* i2 = calloc(n, sizeof(uint64_t));
      cube_cpu_arg_t a1[3] = {buf_arg(o1, 2 * n * sizeof(double)), buf_arg(i1, n * 8),
                              u32_arg(rounds[r])};
      cube_cpu_arg_t a2[3] = {buf_arg(o2, 2 * n * sizeof(double)), buf_arg(i2, n * 8),
                              u32_arg(rounds[r])};
      CHECK_EQ_U64(run(&ks, count, dim, a1, 3), 0);
      CHECK_EQ_U64(run(&kf, count, dim, a2, 3), 0);
      CHECK(memcmp(o1, o2, 2 * n * sizeof(double)) == 0);
      CHECK(memcmp(i1, i2, n * sizeof(uint64_t)) == 0);
      /* Host: every unit of a cube, round by round. */
      uint32_t U = dims[d], bad = 0;
      double A[256], B[256], SH[256];
      float F[256];
      uint64_t G[256];
      int64_t BIG[256];
      for (uint32_t u = 0; u < U; ++u) {
        A[u] = u * 1.5;
        B[u] = u + 0.25;
        F[u] = (float)u * 0.5f;
        G[u] = u * 0x9E3779B97F4A7C15ull;
        BIG[u] = (int64_t)u << 40;
      }
      for (uint32_t k = 0; k < rounds[r]; ++k) {
        for (uint32_t u = 0; u < U; ++u) SH[u] = A[u];
        for (uint32_t u = 0; u < U; ++u) {
          A[u] = A[u] * 0.5 + SH[(u + 1u) % U] + B[u];
          F[u] = F[u] * 0.25f + (float)A[u];
          G[u] = G[u] * 6364136223846793005ull + 1442695040888963407ull;
        }
        for (uint32_t u = 0; u < U; ++u) {
          B[u] = B[u] - 0.125 * (double)-(int32_t)u + (int)k;
          BIG[u] += 3u;
        }
      }
      for (uint32_t c = 0; c < 3; ++c)
        for (uint32_t u = 0; u < U; ++u) {
          uint32_t p = c * U + u;
          uint64_t wi = G[u] ^ (uint64_t)(int64_t) - (int32_t)u ^ (uint64_t)BIG[u];
          if (fabs(o1[2 * p] - (A[u] + B[u])) > 1e-9 * (1 + fabs(A[u] + B[u])) ||
              fabs(o1[2 * p + 1] - F[u]) > 1e-5 * (1 + fabs(F[u])) || i1[p] != wi)
            ++bad;
        }
      CHECK_EQ_U64(bad, 0);
      free(o1);
      free(o2);
      free(i1);
      free(i2);
    }
out:
  unload(&ks);
  unload(&kf);
}

/* Kernels that kept the fibers before (issue 16, part 3) -------------------------- */

/* Each writes out[ABSOLUTE_POS] = (sum of (k + 1) over the units k < active of
 * the cube) + UNIT_POS, with |active| = n or every unit. */
static const char* const K_FB_RETURN =
    "CUBE_KERNEL(fb, CUBE_ARRAY(uint32_t, out), uint32_t n)\n"
    "{\n"
    "    CUBE_SHARED(uint32_t, sh, 256);\n"
    "    uint32_t u = UNIT_POS;\n"
    "    sh[u] = u < n ? u + 1u : 0u;\n"
    "    sync_cube();\n"
    "    if (u >= n) { CUBE_STORE(out, ABSOLUTE_POS, u); return; }\n"
    "    uint32_t sum = 0;\n"
    "    for (uint32_t k = 0; k < CUBE_DIM; ++k) sum += sh[k];\n"
    "    sync_cube();\n"
    "    CUBE_STORE(out, ABSOLUTE_POS, sum + u);\n"
    "}\n";

static const char* const K_FB_BREAK =
    "CUBE_KERNEL(fb, CUBE_ARRAY(uint32_t, out), uint32_t n)\n"
    "{\n"
    "    CUBE_SHARED(uint32_t, sh, 256);\n"
    "    uint32_t u = UNIT_POS, sum = 0;\n"
    "    for (uint32_t r = 0; r < 100u; ++r) {\n"
    "        sh[u] = u < n ? u + 1u : 0u;\n"
    "        sync_cube();\n"
    "        if (r == 2u) break;\n"
    "        sync_cube();\n"
    "    }\n"
    "    for (uint32_t k = 0; k < CUBE_DIM; ++k) sum += sh[k];\n"
    "    CUBE_STORE(out, ABSOLUTE_POS, sum + u);\n"
    "}\n";

static const char* const K_FB_WHILE =
    "CUBE_KERNEL(fb, CUBE_ARRAY(uint32_t, out), uint32_t n)\n"
    "{\n"
    "    CUBE_SHARED(uint32_t, sh, 256);\n"
    "    uint32_t u = UNIT_POS, r = 0, sum = 0;\n"
    "    while (r < 3u) {\n"
    "        sh[u] = u < n ? u + 1u : 0u;\n"
    "        sync_cube();\n"
    "        ++r;\n"
    "    }\n"
    "    for (uint32_t k = 0; k < CUBE_DIM; ++k) sum += sh[k];\n"
    "    CUBE_STORE(out, ABSOLUTE_POS, sum + u);\n"
    "}\n";

static const char* const K_FB_ARRAY =
    "CUBE_KERNEL(fb, CUBE_ARRAY(uint32_t, out), uint32_t n)\n"
    "{\n"
    "    CUBE_SHARED(uint32_t, sh, 256);\n"
    "    uint32_t u = UNIT_POS;\n"
    "    uint32_t mine[2] = {u < n ? u + 1u : 0u, u};\n"
    "    sh[u] = mine[0];\n"
    "    sync_cube();\n"
    "    for (uint32_t k = 0; k < CUBE_DIM; ++k) mine[0] += k == u ? 0u : sh[k];\n"
    "    CUBE_STORE(out, ABSOLUTE_POS, mine[0] + mine[1]);\n"
    "}\n";

static const char* const K_FB_IF =
    "CUBE_KERNEL(fb, CUBE_ARRAY(uint32_t, out), uint32_t n)\n"
    "{\n"
    "    CUBE_SHARED(uint32_t, sh, 256);\n"
    "    uint32_t u = UNIT_POS, sum = 0;\n"
    "    if (n > 0u) {\n"
    "        sh[u] = u < n ? u + 1u : 0u;\n"
    "        sync_cube();\n"
    "    }\n"
    "    for (uint32_t k = 0; k < CUBE_DIM; ++k) sum += sh[k];\n"
    "    CUBE_STORE(out, ABSOLUTE_POS, sum + u);\n"
    "}\n";

/* Kernels that kept the fibers before issue 16 part 3 (a return, a break, a
 * while, a local array, a barrier under an if) and now split: the same
 * results split, as fibers and as the host computes them, in 1-D and 2-D
 * cubes. */
CUBE_TEST(split_former_fallbacks_now_split) {
  static const char* const srcs[] = {K_FB_RETURN, K_FB_BREAK, K_FB_WHILE, K_FB_ARRAY, K_FB_IF};
  static const char* const names[] = {"return", "break", "while", "local array", "if"};
  for (size_t s = 0; s < 5; ++s) {
    CHECK(splits(srcs[s], "fb", NULL, 0));
    kern_t ks, kf;
    if (!build_both(&ks, &kf, srcs[s], "fb", NULL, 0)) {
      unload(&ks);
      unload(&kf);
      continue;
    }
    static const uint32_t dims[][3] = {{1, 1, 1}, {7, 1, 1}, {64, 1, 1}, {5, 3, 1}, {3, 5, 2}};
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; ++d) {
      uint32_t U = dims[d][0] * dims[d][1] * dims[d][2], n = U > 3 ? U - 3 : U;
      uint32_t count[3] = {2, 1, 1};
      uint32_t o1[128], o2[128];
      memset(o1, 0xff, sizeof o1);
      memset(o2, 0xff, sizeof o2);
      cube_cpu_arg_t a1[2] = {buf_arg(o1, 2 * U * sizeof(uint32_t)), u32_arg(n)};
      cube_cpu_arg_t a2[2] = {buf_arg(o2, 2 * U * sizeof(uint32_t)), u32_arg(n)};
      CHECK_EQ_U64(run(&ks, count, dims[d], a1, 2), 0);
      CHECK_EQ_U64(run(&kf, count, dims[d], a2, 2), 0);
      CHECK(memcmp(o1, o2, sizeof o1) == 0);
      uint32_t bad = 0;
      for (uint32_t c = 0; c < 2; ++c)
        for (uint32_t u = 0; u < U; ++u) {
          /* out[ABSOLUTE_POS]: the cubes lie along x. */
          uint32_t dx = dims[d][0], dy = dims[d][1];
          uint32_t ux = u % dx, uy = u / dx % dy, uz = u / dx / dy;
          uint32_t p = c * dx + ux + 2 * dx * (uy + dy * uz);
          uint32_t want = s == 0 && u >= n ? u : n * (n + 1) / 2 + u;
          if (o1[p] != want && bad++ < 2)
            fprintf(stderr, "%s dim %u unit %u: %u, want %u\n", names[s], U, u, o1[p], want);
        }
      CHECK_EQ_U64(bad, 0);
    }
    unload(&ks);
    unload(&kf);
  }
}

/* What is refused without running: per-unit loop headers, written parameters,
 * barriers in helpers, redeclared privates, CUBE_CPU_FIBERS. */
CUBE_TEST(split_refusals) {
  CHECK(splits(K_REDUCE, "rsum", NULL, 0));
  cube_define_t fib = {"CUBE_CPU_FIBERS", "1"};
  CHECK(!splits(K_REDUCE, "rsum", &fib, 1));
  static const char* const refused[] = {
      /* per-unit loop header */
      "CUBE_KERNEL(k, CUBE_ARRAY(float, o)) {\n"
      "  for (uint32_t r = 0; r < UNIT_POS_X; ++r) { o[r] = 1.0f; sync_cube(); }\n}\n",
      /* loop header reads a private */
      "CUBE_KERNEL(k, CUBE_ARRAY(float, o)) {\n  uint32_t u = UNIT_POS;\n"
      "  for (uint32_t r = 0; r < u; ++r) { o[r] = 1.0f; sync_cube(); }\n}\n",
      /* a parameter written */
      "CUBE_KERNEL(k, CUBE_ARRAY(float, o), uint32_t n) {\n  n += UNIT_POS;\n  sync_cube();\n"
      "  o[n] = 1.0f;\n}\n",
      /* the loop variable written in the body */
      "CUBE_KERNEL(k, CUBE_ARRAY(float, o)) {\n"
      "  for (uint32_t r = 0; r < 4u; ++r) { o[r] = 1.0f; r += 1u; sync_cube(); }\n}\n",
      /* a barrier in a helper */
      "CUBE_FN void h(CUBE_UNIT_PARAMS) { sync_cube(); }\n"
      "CUBE_KERNEL(k, CUBE_ARRAY(float, o)) {\n  o[UNIT_POS] = 1.0f;\n  sync_cube();\n"
      "  h(CUBE_UNIT_ARGS);\n}\n",
      /* a private declared again in a nested block */
      "CUBE_KERNEL(k, CUBE_ARRAY(float, o)) {\n  uint32_t u = UNIT_POS;\n  sync_cube();\n"
      "  { uint32_t u = 3u; o[u] = 1.0f; }\n  o[u] = 2.0f;\n}\n",
      /* a private named like a parameter */
      "CUBE_KERNEL(k, CUBE_ARRAY(float, o), uint32_t n) {\n  sync_cube();\n"
      "  { o[n] = 1.0f; }\n  uint32_t o2 = n;\n  float n2 = 1.0f, n = 2.0f;\n}\n",
      /* a pointer local */
      "CUBE_KERNEL(k, CUBE_ARRAY(float, o)) {\n  float* p = o + UNIT_POS;\n  sync_cube();\n"
      "  *p = 1.0f;\n}\n",
      /* a declaration of another type */
      "CUBE_KERNEL(k, CUBE_ARRAY(float, o)) {\n  bool b = UNIT_POS == 0;\n  sync_cube();\n"
      "  if (b) o[0] = 1.0f;\n}\n",
      /* a barrier inside an if */
      "CUBE_KERNEL(k, CUBE_ARRAY(float, o)) {\n  if (o[0] > 0.0f) sync_cube();\n}\n",
      /* a do loop with a barrier */
      "CUBE_KERNEL(k, CUBE_ARRAY(float, o)) {\n  do { sync_cube(); } while (o[0] > 1.0f);\n}\n",
      /* switch */
      "CUBE_KERNEL(k, CUBE_ARRAY(float, o)) {\n  switch (UNIT_POS) { default: o[0] = 1.0f; }\n"
      "  sync_cube();\n}\n",
      /* preprocessor lines in the body */
      "CUBE_KERNEL(k, CUBE_ARRAY(float, o)) {\n#if 1\n  o[UNIT_POS] = 1.0f;\n#endif\n"
      "  sync_cube();\n}\n",
  };
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; ++i) {
    if (splits(refused[i], "k", NULL, 0)) {
      fprintf(stderr, "split, but should not be: case %zu\n", i);
      CHECK(!"refused case was split");
    }
  }
  /* A sync_cube in another kernel of the source does not matter. */
  CHECK(splits("CUBE_KERNEL(other, CUBE_ARRAY(float, o)) { while (o[0] > 0.0f) sync_cube(); }\n"
               "CUBE_KERNEL(k, CUBE_ARRAY(float, o)) {\n  o[UNIT_POS] = 1.0f;\n  sync_cube();\n"
               "  o[0] = 2.0f;\n}\n",
               "k", NULL, 0));
}

/* Regions that stop at the first unit whose guard is false ------------------------ */

/* How many regions of |entry|'s split unit stop at the first unit whose guard
 * is false ("if (!(<guard>)) break;"); -1 when it does not split. */
static int guarded_regions(const char* source, const cube_define_t* defines, uint32_t ndefs) {
  cube__signature_t sig;
  cube_status_t st = cube__dialect_parse(source, "k", &sig);
  if (st) {
    cube_status_free(st);
    return -1;
  }
  char* text = NULL;
  st = cube__dialect_generate(CUBE__TARGET_CPU, &sig, source, defines, ndefs, CUBE_EXEC_CHECKED,
                              &text);
  if (st) {
    cube_status_free(st);
    return -1;
  }
  int n = -1;
  if (strstr(text, "cube__split_run(")) {
    n = 0;
    for (const char* p = strstr(text, ")) break;\n"); p; p = strstr(p + 1, ")) break;\n")) ++n;
  }
  free(text);
  return n;
}

/* A tree over the units of a row (UNIT_POS_X) for any width: the guard is
 * `A < B` with B the uniform loop's half; the row's units below it add the
 * element a half further. */
static const char* const K_ROWSUM =
    "CUBE_KERNEL(k, CUBE_ARRAY(const float, in), CUBE_ARRAY(float, out)) {\n"
    "  CUBE_SHARED(float, sh, 1024);\n"
    "  uint32_t u = UNIT_POS_X;\n"
    "  uint32_t r = UNIT_POS;\n"
    "  sh[r] = CUBE_LOAD(in, CUBE_POS * CUBE_DIM + r);\n"
    "  sync_cube();\n"
    "  for (uint32_t len = CUBE_DIM_X; len > 1u; len = (len + 1u) / 2u) {\n"
    "    if (u < len / 2u) sh[r] += sh[r + (len + 1u) / 2u];\n"
    "    sync_cube();\n"
    "  }\n"
    "  CUBE_STORE(out, CUBE_POS * CUBE_DIM + r, sh[r]);\n"
    "}\n";

/* A tree over the whole cube (UNIT_POS), the guard written `B > A`, B a
 * power of two from a parameter; a unit past the cube adds 0. */
static const char* const K_TREESUM =
    "CUBE_KERNEL(k, CUBE_ARRAY(const float, in), CUBE_ARRAY(float, out), uint32_t half) {\n"
    "  CUBE_SHARED(float, sh, 1024);\n"
    "  uint64_t u = UNIT_POS;\n"
    "  sh[u] = CUBE_LOAD(in, CUBE_POS * CUBE_DIM + u);\n"
    "  sync_cube();\n"
    "  for (uint32_t s = half; s > 0u; s >>= 1) {\n"
    "    if ((s) > u) sh[u] += u + s < CUBE_DIM ? sh[u + s] : 0.0f;\n"
    "    sync_cube();\n"
    "  }\n"
    "  if (u == 0) CUBE_STORE(out, CUBE_POS, sh[0]);\n"
    "}\n";

static void host_rows(const float* x, float* out, uint32_t dx, uint32_t rows) {
  for (uint32_t row = 0; row < rows; ++row) {
    float* sh = out + row * dx;
    memcpy(sh, x + row * dx, dx * sizeof(float));
    for (uint32_t len = dx; len > 1u; len = (len + 1u) / 2u)
      for (uint32_t u = 0; u < len / 2u; ++u) sh[u] += sh[u + (len + 1u) / 2u];
  }
}

CUBE_TEST(split_guarded_regions_text) {
  /* The demo's reduction: one guarded region (the tree's). */
  CHECK_EQ_U64(guarded_regions(K_ROWSUM, NULL, 0), 1);
  CHECK_EQ_U64(guarded_regions(K_TREESUM, NULL, 0), 1);
  cube_define_t block = {"BLOCK", "256"};
  CHECK_EQ_U64(guarded_regions("CUBE_KERNEL(k, CUBE_ARRAY(const float, x), CUBE_ARRAY(double, o)) {\n"
                               "  CUBE_SHARED(double, tile, BLOCK);\n"
                               "  uint32_t u = UNIT_POS_X;\n"
                               "  tile[u] = (double)CUBE_LOAD(x, ABSOLUTE_POS_X);\n"
                               "  sync_cube();\n"
                               "  for (uint32_t s = BLOCK / 2; s > 0; s >>= 1) {\n"
                               "    if (u < s) tile[u] += tile[u + s];\n"
                               "    sync_cube();\n"
                               "  }\n"
                               "  if (u < BLOCK / 4u) CUBE_STORE(o, CUBE_POS_X, tile[0]);\n"
                               "}\n",
                               &block, 1),
               2);
  /* Guards that are not a prefix of the units, or a region of more than the
   * one statement: the region runs every unit as before. */
  static const char* const plain[] = {
      /* an else */
      "  if (u < s) sh[u] += sh[u + s]; else sh[u] = 0.0f;\n",
      /* <= */
      "  if (u <= s) sh[u] += sh[u + s];\n",
      /* B reads a shared array */
      "  if (u < (uint32_t)sh[0]) sh[u] += sh[u + s];\n",
      /* B has a looser operator: (u < s) && ... */
      "  if (u < s && u + s < CUBE_DIM) sh[u] += sh[u + s];\n",
      /* B calls a function */
      "  if (u < cube_plane_max_u32(s)) sh[u] += sh[u + s];\n",
      /* B has a side effect */
      "  if (u < (n = s)) sh[u] += sh[u + s];\n",
      /* A is a shift, not a comparison */
      "  if (s >> u) sh[u] += sh[u + s];\n",
      /* A is not the unit's position */
      "  if (v < s) sh[u] += sh[u + s];\n",
      /* A is written elsewhere */
      "  if (w < s) sh[u] += sh[u + s];\n",
      /* two statements in the region */
      "  if (u < s) sh[u] += sh[u + s];\n  sh[u] += 0.0f;\n",
      /* A signed */
      "  if (i < s) sh[u] += sh[u + s];\n",
  };
  for (size_t c = 0; c < sizeof plain / sizeof plain[0]; ++c) {
    char src[2048];
    snprintf(src, sizeof src,
             "CUBE_KERNEL(k, CUBE_ARRAY(float, o), uint32_t m) {\n"
             "  CUBE_SHARED(float, sh, 1024);\n"
             "  uint32_t u = UNIT_POS_X;\n"
             "  uint32_t v = UNIT_POS_Y;\n"
             "  uint32_t w = UNIT_POS_X;\n"
             "  int i = UNIT_POS_X;\n"
             "  uint32_t n = m;\n"
             "  sh[u] = (float)u;\n"
             "  w += 0u;\n"
             "  sync_cube();\n"
             "  for (uint32_t s = 128; s > 0; s >>= 1) {\n"
             "%s"
             "    sync_cube();\n"
             "  }\n"
             "  o[u] = sh[u] + (float)(v + w + (uint32_t)i + n);\n"
             "}\n",
             plain[c]);
    int g = guarded_regions(src, NULL, 0);
    if (g != 0) fprintf(stderr, "case %zu: %d guarded regions, want 0 (and a split)\n", c, g);
    CHECK_EQ_U64(g, 0);
  }
  /* A define that is no number is not uniform for certain. */
  cube_define_t odd = {"HALF", "UNIT_POS_Y"};
  cube_define_t num = {"HALF", "64u"};
  const char* with_define =
      "CUBE_KERNEL(k, CUBE_ARRAY(float, o)) {\n"
      "  CUBE_SHARED(float, sh, 1024);\n"
      "  uint32_t u = UNIT_POS_X;\n"
      "  sh[u] = 1.0f;\n"
      "  sync_cube();\n"
      "  if (u < HALF) sh[u] += sh[u + HALF];\n"
      "  sync_cube();\n"
      "  o[u] = sh[u];\n"
      "}\n";
  CHECK_EQ_U64(guarded_regions(with_define, &odd, 1), 0);
  CHECK_EQ_U64(guarded_regions(with_define, &num, 1), 1);
}

CUBE_TEST(split_guarded_regions_results) {
  kern_t ks, kf;
  /* Rows of odd widths, 1-D and 2-D/3-D cubes. */
  if (build_both(&ks, &kf, K_ROWSUM, "k", NULL, 0)) {
    static const uint32_t dims[][3] = {{1, 1, 1}, {7, 1, 1},   {100, 1, 1}, {255, 1, 1},
                                       {256, 1, 1}, {3, 5, 2}, {33, 3, 1},  {1000, 1, 1}};
    uint64_t rng = 29;
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; ++d) {
      uint32_t dim = dims[d][0] * dims[d][1] * dims[d][2];
      uint32_t count[3] = {5, 1, 1};
      uint32_t n = dim * 5;
      float* in = malloc(n * sizeof(float));
      float* o1 = calloc(n, sizeof(float));
      float* o2 = calloc(n, sizeof(float));
      float* want = calloc(n, sizeof(float));
      for (uint32_t i = 0; i < n; ++i) in[i] = rand_float(&rng);
      cube_cpu_arg_t a1[2] = {buf_arg(in, n * sizeof(float)), buf_arg(o1, n * sizeof(float))};
      cube_cpu_arg_t a2[2] = {buf_arg(in, n * sizeof(float)), buf_arg(o2, n * sizeof(float))};
      CHECK_EQ_U64(run(&ks, count, dims[d], a1, 2), 0);
      CHECK_EQ_U64(run(&kf, count, dims[d], a2, 2), 0);
      CHECK(memcmp(o1, o2, n * sizeof(float)) == 0);
      host_rows(in, want, dims[d][0], n / dims[d][0]);
      uint32_t bad = 0;
      for (uint32_t i = 0; i < n; ++i)
        if (memcmp(&want[i], &o1[i], sizeof(float)) != 0 && bad++ < 3)
          fprintf(stderr, "rows, cube %ux%ux%u, element %u: %.9g, want %.9g\n", dims[d][0],
                  dims[d][1], dims[d][2], i, (double)o1[i], (double)want[i]);
      CHECK_EQ_U64(bad, 0);
      free(in);
      free(o1);
      free(o2);
      free(want);
    }
  }
  unload(&ks);
  unload(&kf);
  /* The whole cube, B > A. */
  if (build_both(&ks, &kf, K_TREESUM, "k", NULL, 0)) {
    static const uint32_t dims[][3] = {{1, 1, 1}, {7, 1, 1}, {100, 1, 1}, {256, 1, 1}, {3, 5, 2}};
    uint64_t rng = 31;
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; ++d) {
      uint32_t dim = dims[d][0] * dims[d][1] * dims[d][2];
      uint32_t half = 1;
      while (half * 2 < dim) half *= 2;
      if (dim == 1) half = 0;
      uint32_t count[3] = {7, 1, 1};
      uint32_t n = dim * 7;
      float* in = malloc(n * sizeof(float));
      float o1[7] = {0}, o2[7] = {0};
      for (uint32_t i = 0; i < n; ++i) in[i] = rand_float(&rng);
      cube_cpu_arg_t a1[3] = {buf_arg(in, n * sizeof(float)), buf_arg(o1, sizeof o1),
                              u32_arg(half)};
      cube_cpu_arg_t a2[3] = {buf_arg(in, n * sizeof(float)), buf_arg(o2, sizeof o2),
                              u32_arg(half)};
      CHECK_EQ_U64(run(&ks, count, dims[d], a1, 3), 0);
      CHECK_EQ_U64(run(&kf, count, dims[d], a2, 3), 0);
      CHECK(memcmp(o1, o2, sizeof o1) == 0);
      for (uint32_t c = 0; c < 7; ++c) {
        float sh[1024];
        memcpy(sh, in + c * dim, dim * sizeof(float));
        for (uint32_t s = half; s > 0; s >>= 1)
          for (uint32_t u = 0; u < s; ++u) sh[u] += u + s < dim ? sh[u + s] : 0.0f;
        CHECK(memcmp(&sh[0], &o1[c], sizeof(float)) == 0);
      }
      free(in);
    }
  }
  unload(&ks);
  unload(&kf);
}

/* More forms as loops (issue 16, part 3) -------------------------------------------- */

/* The host's result of a kernel of (const float in, float out, uint32_t n)
 * over |cubes| cubes of |dim|, into |out| (poisoned where the kernel writes
 * nothing). */
typedef void (*host_fn)(const float* in, float* out, const uint32_t dim[3], uint32_t cubes,
                        uint32_t n);

/* Runs |entry| of |src| split and as fibers over odd 1-D and 2-D cubes with
 * random inputs (|in_per_unit| floats per unit) and a poisoned output, for
 * each n of |ns|; compares both bit for bit with each other and with |host|. */
static void compare_forms(const char* src, const char* name, const cube_define_t* defs,
                          uint32_t ndefs, uint32_t in_per_unit, const uint32_t* ns, size_t nns,
                          host_fn host) {
  kern_t ks, kf;
  if (!build_both(&ks, &kf, src, "k", defs, ndefs)) goto out;
  static const uint32_t dims[][3] = {{1, 1, 1},  {2, 1, 1}, {7, 1, 1},  {64, 1, 1}, {100, 1, 1},
                                     {1, 7, 1},  {5, 3, 1}, {3, 5, 2},  {33, 3, 1}, {255, 1, 1}};
  uint64_t rng = 71;
  for (size_t d = 0; d < sizeof dims / sizeof dims[0]; ++d)
    for (size_t q = 0; q < nns; ++q) {
      uint32_t U = dims[d][0] * dims[d][1] * dims[d][2], cubes = 5, total = U * cubes;
      uint32_t count[3] = {cubes, 1, 1};
      uint32_t n = ns[q] == UINT32_MAX ? total - U / 2 - 1 : ns[q];
      float* in = malloc((size_t)total * in_per_unit * sizeof(float));
      float* o1 = malloc(total * sizeof(float));
      float* o2 = malloc(total * sizeof(float));
      float* want = malloc(total * sizeof(float));
      for (uint32_t i = 0; i < total * in_per_unit; ++i) in[i] = rand_float(&rng);
      memset(o1, 0xff, total * sizeof(float));
      memset(o2, 0xff, total * sizeof(float));
      memset(want, 0xff, total * sizeof(float));
      cube_cpu_arg_t a1[3] = {buf_arg(in, (uint64_t)total * in_per_unit * sizeof(float)),
                              buf_arg(o1, total * sizeof(float)), u32_arg(n)};
      cube_cpu_arg_t a2[3] = {a1[0], buf_arg(o2, total * sizeof(float)), u32_arg(n)};
      CHECK_EQ_U64(run(&ks, count, dims[d], a1, 3), 0);
      CHECK_EQ_U64(run(&kf, count, dims[d], a2, 3), 0);
      CHECK(memcmp(o1, o2, total * sizeof(float)) == 0);
      host(in, want, dims[d], cubes, n);
      uint32_t bad = 0;
      for (uint32_t i = 0; i < total; ++i)
        if (memcmp(&want[i], &o1[i], sizeof(float)) != 0 && bad++ < 3)
          fprintf(stderr, "%s, cube %ux%ux%u, n %u, element %u: %.9g, want %.9g\n", name,
                  dims[d][0], dims[d][1], dims[d][2], n, i, (double)o1[i], (double)want[i]);
      CHECK_EQ_U64(bad, 0);
      free(in);
      free(o1);
      free(o2);
      free(want);
    }
out:
  unload(&ks);
  unload(&kf);
}

/* 1. Barriers under a uniform if / else if / else (the else if's body a
 * uniform for). */
static const char* const K_IFELSE =
    "CUBE_KERNEL(k, CUBE_ARRAY(const float, in), CUBE_ARRAY(float, out), uint32_t n) {\n"
    "  CUBE_SHARED(float, sh, 1024);\n"
    "  uint32_t u = UNIT_POS;\n"
    "  float x = CUBE_LOAD(in, CUBE_POS * CUBE_DIM + u);\n"
    "  if (n % 2u == 1u && CUBE_DIM_X > 1u) {\n"
    "    sh[u] = x + 1.0f;\n"
    "    sync_cube();\n"
    "    x += sh[(u + 1u) % CUBE_DIM];\n"
    "  } else if (n > 4u)\n"
    "    for (uint32_t r = 0; r < n; r += 4u) {\n"
    "      sh[CUBE_DIM - 1u - u] = x;\n"
    "      sync_cube();\n"
    "      x -= sh[u];\n"
    "      sync_cube();\n"
    "    }\n"
    "  else\n"
    "    x = -x;\n"
    "  sync_cube();\n"
    "  sh[u] = x;\n"
    "  sync_cube();\n"
    "  CUBE_STORE(out, CUBE_POS * CUBE_DIM + u, x + sh[(u + 3u) % CUBE_DIM]);\n"
    "}\n";

static void host_ifelse(const float* in, float* out, const uint32_t dim[3], uint32_t cubes,
                        uint32_t n) {
  uint32_t U = dim[0] * dim[1] * dim[2];
  float x[1024], t[1024];
  for (uint32_t c = 0; c < cubes; ++c) {
    for (uint32_t u = 0; u < U; ++u) x[u] = in[c * U + u];
    if (n % 2u == 1u && dim[0] > 1u) {
      for (uint32_t u = 0; u < U; ++u) t[u] = x[u] + 1.0f;
      for (uint32_t u = 0; u < U; ++u) x[u] += t[(u + 1u) % U];
    } else if (n > 4u) {
      for (uint32_t r = 0; r < n; r += 4u) {
        for (uint32_t u = 0; u < U; ++u) t[U - 1u - u] = x[u];
        for (uint32_t u = 0; u < U; ++u) x[u] -= t[u];
      }
    } else {
      for (uint32_t u = 0; u < U; ++u) x[u] = -x[u];
    }
    for (uint32_t u = 0; u < U; ++u) out[c * U + u] = x[u] + x[(u + 3u) % U];
  }
}

CUBE_TEST(split_uniform_if_else) {
  static const uint32_t ns[] = {3, 9, 6, 8, 2};
  compare_forms(K_IFELSE, "if/else", NULL, 0, 1, ns, 5, host_ifelse);
}

/* 2. A uniform while: its condition reads a uniform local (one variable, written
 * only between regions); a uniform break and continue under uniform ifs. */
static const char* const K_WHILE =
    "CUBE_KERNEL(k, CUBE_ARRAY(const float, in), CUBE_ARRAY(float, out), uint32_t n) {\n"
    "  CUBE_SHARED(float, sh, 1024);\n"
    "  uint32_t u = UNIT_POS, r = 0, step = n / 2u + 1u;\n"
    "  float x = CUBE_LOAD(in, CUBE_POS * CUBE_DIM + u);\n"
    "  while (r < n) {\n"
    "    r += step;\n"
    "    if (r % 3u == 0u) continue;\n"
    "    sh[u] = x;\n"
    "    sync_cube();\n"
    "    x = 0.5f - sh[(u + r) % CUBE_DIM];\n"
    "    sync_cube();\n"
    "    if (r > 40u) break;\n"
    "  }\n"
    "  CUBE_STORE(out, CUBE_POS * CUBE_DIM + u, x + (float)r);\n"
    "}\n";

static void host_while(const float* in, float* out, const uint32_t dim[3], uint32_t cubes,
                       uint32_t n) {
  uint32_t U = dim[0] * dim[1] * dim[2];
  float x[1024], t[1024];
  for (uint32_t c = 0; c < cubes; ++c) {
    for (uint32_t u = 0; u < U; ++u) x[u] = in[c * U + u];
    uint32_t r = 0, step = n / 2u + 1u;
    while (r < n) {
      r += step;
      if (r % 3u == 0u) continue;
      for (uint32_t u = 0; u < U; ++u) t[u] = x[u];
      for (uint32_t u = 0; u < U; ++u) x[u] = 0.5f - t[(u + r) % U];
      if (r > 40u) break;
    }
    for (uint32_t u = 0; u < U; ++u) out[c * U + u] = x[u] + (float)r;
  }
}

CUBE_TEST(split_uniform_while_break_continue) {
  /* r and step are one variable each, not per-unit arrays. */
  char* text = split_text(K_WHILE, "k");
  CHECK(text != NULL);
  if (text) {
    CHECK(strstr(text, "cube__split_run(") != NULL);
    CHECK(strstr(text, "cube__pv_r ") == NULL);
    CHECK(strstr(text, "cube__pv_step ") == NULL);
    CHECK(strstr(text, "cube__pv_x ") != NULL);
  }
  free(text);
  static const uint32_t ns[] = {0, 1, 5, 12, 100};
  compare_forms(K_WHILE, "while", NULL, 0, 1, ns, 5, host_while);
}

/* 3. Returns: the common guard before the barriers, a per-unit return in a
 * region, and a uniform return (every unit) in a uniform if with a barrier.
 * A unit that returned takes part in no later region. */
static const char* const K_RETURN =
    "CUBE_KERNEL(k, CUBE_ARRAY(const float, in), CUBE_ARRAY(float, out), uint32_t n) {\n"
    "  CUBE_SHARED(float, sh, 1024);\n"
    "  uint32_t u = UNIT_POS;\n"
    "  uint32_t i = CUBE_POS * CUBE_DIM + u;\n"
    "  if (i >= n) return;\n"
    "  uint32_t live = n - CUBE_POS * CUBE_DIM < CUBE_DIM ? n - CUBE_POS * CUBE_DIM : CUBE_DIM;\n"
    "  uint32_t q = 1000u / (n > CUBE_POS * CUBE_DIM ? live : 0u);\n"
    "  sh[u] = CUBE_LOAD(in, i);\n"
    "  sync_cube();\n"
    "  float acc = sh[u] + sh[(u + 1u) % live];\n"
    "  sync_cube();\n"
    "  if (n % 5u == 0u) {\n"
    "    CUBE_STORE(out, i, -acc);\n"
    "    sync_cube();\n"
    "    return;\n"
    "  }\n"
    "  if (u % 3u == 2u) { CUBE_STORE(out, i, acc); return; }\n"
    "  sh[u] = acc;\n"
    "  sync_cube();\n"
    "  CUBE_STORE(out, i, acc - sh[(u + live - 1u) % live] + (float)q);\n"
    "}\n";

static void host_return(const float* in, float* out, const uint32_t dim[3], uint32_t cubes,
                        uint32_t n) {
  uint32_t U = dim[0] * dim[1] * dim[2];
  float sh[1024], acc[1024];
  for (uint32_t c = 0; c < cubes; ++c) {
    if (c * U >= n) continue;
    uint32_t live = n - c * U < U ? n - c * U : U, q = 1000u / live;
    for (uint32_t u = 0; u < live; ++u) sh[u] = in[c * U + u];
    for (uint32_t u = 0; u < live; ++u) acc[u] = sh[u] + sh[(u + 1u) % live];
    if (n % 5u == 0u) {
      for (uint32_t u = 0; u < live; ++u) out[c * U + u] = -acc[u];
      continue;
    }
    for (uint32_t u = 0; u < live; ++u)
      if (u % 3u == 2u) out[c * U + u] = acc[u];
      else sh[u] = acc[u];
    for (uint32_t u = 0; u < live; ++u)
      if (u % 3u != 2u)
        out[c * U + u] = acc[u] - sh[(u + live - 1u) % live] + (float)q;
  }
}

CUBE_TEST(split_returns) {
  char* text = split_text(K_RETURN, "k");
  CHECK(text != NULL);
  if (text) {
    CHECK(strstr(text, "cube__split_run(") != NULL);
    CHECK(strstr(text, "cube__rt[cube__unit] = 1;") != NULL);
    CHECK(strstr(text, "cube__rt[cube__unit]) continue;") != NULL);
    CHECK(strstr(text, "return 0;\n") != NULL);
  }
  free(text);
  /* n: every unit, a cut inside a cube, cubes whose units all return (then
   * q's division by zero, which no unit reaches, must not run), a uniform
   * return. */
  static const uint32_t ns[] = {100000, UINT32_MAX, 1, 4, 10, 15};
  compare_forms(K_RETURN, "return", NULL, 0, 1, ns, 6, host_return);
}

/* 4. break and continue in loops inside one region (plain C there). */
static const char* const K_INNER_BREAK =
    "CUBE_KERNEL(k, CUBE_ARRAY(const float, in), CUBE_ARRAY(float, out), uint32_t n) {\n"
    "  CUBE_SHARED(float, sh, 1024);\n"
    "  uint32_t u = UNIT_POS;\n"
    "  float x = CUBE_LOAD(in, CUBE_POS * CUBE_DIM + u);\n"
    "  for (uint32_t r = 0; r < n; ++r) {\n"
    "    sh[u] = x;\n"
    "    sync_cube();\n"
    "    float best = x;\n"
    "    for (uint32_t j = 0; j < CUBE_DIM; ++j) {\n"
    "      if (j == u) continue;\n"
    "      if (sh[j] > x + 0.25f) { best = sh[j]; break; }\n"
    "    }\n"
    "    uint32_t w = 0;\n"
    "    do { if (w == u) break; ++w; } while (w < 3u);\n"
    "    sync_cube();\n"
    "    x = best - 0.125f * (float)w;\n"
    "  }\n"
    "  CUBE_STORE(out, CUBE_POS * CUBE_DIM + u, x);\n"
    "}\n";

static void host_inner_break(const float* in, float* out, const uint32_t dim[3],
                             uint32_t cubes, uint32_t n) {
  uint32_t U = dim[0] * dim[1] * dim[2];
  float x[1024], sh[1024];
  for (uint32_t c = 0; c < cubes; ++c) {
    for (uint32_t u = 0; u < U; ++u) x[u] = in[c * U + u];
    for (uint32_t r = 0; r < n; ++r) {
      for (uint32_t u = 0; u < U; ++u) sh[u] = x[u];
      for (uint32_t u = 0; u < U; ++u) {
        float best = x[u];
        for (uint32_t j = 0; j < U; ++j)
          if (j != u && sh[j] > x[u] + 0.25f) {
            best = sh[j];
            break;
          }
        uint32_t w = u < 3u ? u : 3u;
        x[u] = best - 0.125f * (float)w;
      }
    }
    for (uint32_t u = 0; u < U; ++u) out[c * U + u] = x[u];
  }
}

CUBE_TEST(split_break_continue_inside_a_region) {
  static const uint32_t ns[] = {0, 1, 4};
  compare_forms(K_INNER_BREAK, "inner break", NULL, 0, 1, ns, 3, host_inner_break);
}

/* 5. Local arrays across barriers: per-unit arrays in the scratch (a size
 * from a define, an initialiser, sizeof). */
static const char* const K_ARRAY =
    "CUBE_KERNEL(k, CUBE_ARRAY(const float, in), CUBE_ARRAY(float, out), uint32_t n) {\n"
    "  CUBE_SHARED(float, sh, 1024);\n"
    "  uint32_t u = UNIT_POS;\n"
    "  float acc[ACC];\n"
    "  uint32_t hist[4] = {u, 1u};\n"
    "  for (uint32_t j = 0; j < ACC; ++j) acc[j] = CUBE_LOAD(in, (CUBE_POS * CUBE_DIM + u) * ACC + j);\n"
    "  for (uint32_t r = 0; r < n; ++r) {\n"
    "    sh[u] = acc[r % ACC];\n"
    "    sync_cube();\n"
    "    for (uint32_t j = 0; j < ACC; ++j) acc[j] += sh[(u + j + 1u) % CUBE_DIM];\n"
    "    hist[r % 4u] += (uint32_t)sizeof(acc) + hist[(r + 1u) % 4u];\n"
    "    sync_cube();\n"
    "  }\n"
    "  float s = 0.0f;\n"
    "  for (uint32_t j = 0; j < ACC; ++j) s += acc[j];\n"
    "  CUBE_STORE(out, CUBE_POS * CUBE_DIM + u,\n"
    "             s + (float)(hist[0] + hist[1] * 3u + hist[2] * 5u + hist[3] * 7u));\n"
    "}\n";

static void host_array(const float* in, float* out, const uint32_t dim[3], uint32_t cubes,
                       uint32_t n) {
  enum { A = 4 };
  uint32_t U = dim[0] * dim[1] * dim[2];
  static float acc[1024][A];
  static uint32_t hist[1024][4];
  float sh[1024];
  for (uint32_t c = 0; c < cubes; ++c) {
    for (uint32_t u = 0; u < U; ++u) {
      for (uint32_t j = 0; j < A; ++j) acc[u][j] = in[(c * U + u) * A + j];
      hist[u][0] = u;
      hist[u][1] = 1u;
      hist[u][2] = hist[u][3] = 0;
    }
    for (uint32_t r = 0; r < n; ++r) {
      for (uint32_t u = 0; u < U; ++u) sh[u] = acc[u][r % A];
      for (uint32_t u = 0; u < U; ++u) {
        for (uint32_t j = 0; j < A; ++j) acc[u][j] += sh[(u + j + 1u) % U];
        hist[u][r % 4u] += (uint32_t)sizeof(float[A]) + hist[u][(r + 1u) % 4u];
      }
    }
    for (uint32_t u = 0; u < U; ++u) {
      float s = 0.0f;
      for (uint32_t j = 0; j < A; ++j) s += acc[u][j];
      out[c * U + u] =
          s + (float)(hist[u][0] + hist[u][1] * 3u + hist[u][2] * 5u + hist[u][3] * 7u);
    }
  }
}

CUBE_TEST(split_local_arrays) {
  cube_define_t acc = {"ACC", "4"};
  char* text = NULL;
  {
    cube__signature_t sig;
    cube_status_t st = cube__dialect_parse(K_ARRAY, "k", &sig);
    CHECK(st == NULL);
    if (!st)
      st = cube__dialect_generate(CUBE__TARGET_CPU, &sig, K_ARRAY, &acc, 1, CUBE_EXEC_CHECKED,
                                  &text);
    if (st) cube_status_free(st);
  }
  CHECK(text != NULL && strstr(text, "(*restrict const cube__pv_acc)[4]") != NULL);
  CHECK(text != NULL && strstr(text, "(*restrict const cube__pv_hist)[4]") != NULL);
  free(text);
  static const uint32_t ns[] = {0, 1, 6};
  compare_forms(K_ARRAY, "local array", &acc, 1, 4, ns, 3, host_array);
}

/* What still keeps the fibers, each with a reason the split cannot prove
 * safe, and still computes what the host does. */
CUBE_TEST(split_more_forms_refused) {
  static const char* const refused[] = {
      /* a barrier under an if that reads a shared value (not provably uniform) */
      "CUBE_KERNEL(k, CUBE_ARRAY(uint32_t, o), uint32_t n) {\n  CUBE_SHARED(uint32_t, sh, 4);\n"
      "  if (UNIT_POS == 0) sh[0] = n;\n  sync_cube();\n"
      "  if (sh[0] > 2u) { o[UNIT_POS] = 1u; sync_cube(); }\n}\n",
      /* a barrier under an if that reads a private */
      "CUBE_KERNEL(k, CUBE_ARRAY(uint32_t, o), uint32_t n) {\n  uint32_t u = UNIT_POS;\n"
      "  if (u < n) { o[u] = 1u; sync_cube(); }\n}\n",
      /* a while whose condition reads a local written per unit */
      "CUBE_KERNEL(k, CUBE_ARRAY(uint32_t, o), uint32_t n) {\n  uint32_t r = 0;\n"
      "  while (r < n) { o[UNIT_POS] = r; sync_cube(); r += UNIT_POS < 1000u ? 1u : 0u; }\n}\n",
      /* a uniform-looking local written in a loop header */
      "CUBE_KERNEL(k, CUBE_ARRAY(uint32_t, o), uint32_t n) {\n  uint32_t r = 0;\n"
      "  for (; r < n; ++r) { o[UNIT_POS] = r; sync_cube(); }\n}\n",
      /* a local whose address is taken */
      "CUBE_KERNEL(k, CUBE_ARRAY(uint32_t, o), uint32_t n) {\n  uint32_t r = 0;\n"
      "  uint32_t* p = &r;\n  while (r < n) { sync_cube(); ++*p; }\n}\n",
      /* a break under a condition that reads shared memory */
      "CUBE_KERNEL(k, CUBE_ARRAY(uint32_t, o), uint32_t n) {\n  CUBE_SHARED(uint32_t, sh, 4);\n"
      "  for (uint32_t r = 0; r < n; ++r) {\n    sh[0] = r;\n    sync_cube();\n"
      "    if (sh[0] == 3u) break;\n    sync_cube();\n  }\n}\n",
      /* a break outside any loop of the region, at the top level */
      "CUBE_KERNEL(k, CUBE_ARRAY(uint32_t, o), uint32_t n) {\n"
      "  for (uint32_t r = 0; r < n; ++r) {\n    { o[0] = r; break; }\n    sync_cube();\n  }\n}\n",
      /* a local array of a size known only at run time */
      "CUBE_KERNEL(k, CUBE_ARRAY(uint32_t, o), uint32_t n) {\n  uint32_t a[n + 1u];\n"
      "  a[0] = n;\n  sync_cube();\n  o[UNIT_POS] = a[0];\n}\n",
      /* a two-dimensional local array */
      "CUBE_KERNEL(k, CUBE_ARRAY(uint32_t, o), uint32_t n) {\n  uint32_t a[2][2];\n"
      "  a[1][1] = n;\n  sync_cube();\n  o[UNIT_POS] = a[1][1];\n}\n",
      /* a local array larger than a unit's fiber stack */
      "CUBE_KERNEL(k, CUBE_ARRAY(uint32_t, o), uint32_t n) {\n  uint32_t a[4096];\n"
      "  a[0] = n;\n  sync_cube();\n  o[UNIT_POS] = a[0];\n}\n",
      /* goto */
      "CUBE_KERNEL(k, CUBE_ARRAY(uint32_t, o), uint32_t n) {\n  sync_cube();\n"
      "  if (n) goto end;\n  o[0] = 1u;\nend:\n  o[1] = 2u;\n}\n",
      /* a uniform-looking local that a define writes */
      "CUBE_KERNEL(k, CUBE_ARRAY(uint32_t, o), uint32_t n) {\n  uint32_t r = 0;\n"
      "  while (r < n) { o[UNIT_POS] = r; sync_cube(); BUMP; }\n}\n",
  };
  cube_define_t bump = {"BUMP", "r++"};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; ++i)
    if (splits(refused[i], "k", &bump, 1)) {
      fprintf(stderr, "split, but should not be: case %zu\n", i);
      CHECK(!"refused case was split");
    }
  /* A larger fiber stack makes room for the array: then it splits. */
  cube_define_t big = {"CUBE_CPU_FIBER_STACK", "65536"};
  CHECK(splits(refused[9], "k", &big, 1));
  CHECK(splits("CUBE_KERNEL(k, CUBE_ARRAY(uint32_t, o), uint32_t n) {\n  uint32_t a[4000];\n"
               "  a[0] = n;\n  sync_cube();\n  o[UNIT_POS] = a[0];\n}\n",
               "k", NULL, 0));
  /* The first three still compute the host's result as fibers. */
  for (size_t i = 0; i < 3; ++i) {
    kern_t k;
    if (!build(&k, refused[i], "k", NULL, 0, false)) {
      CHECK(!"build fallback");
      unload(&k);
      continue;
    }
    CHECK(!k.split);
    uint32_t dim[3] = {7, 1, 1}, count[3] = {2, 1, 1};
    for (uint32_t n = 1; n < 6; n += 4) {
      uint32_t o[14];
      memset(o, 0xff, sizeof o);
      cube_cpu_arg_t args[2] = {buf_arg(o, sizeof o), u32_arg(n)};
      CHECK_EQ_U64(run(&k, count, dim, args, 2), 0);
      for (uint32_t j = 0; j < 14; ++j) {
        uint32_t u = j % 7, want;
        if (i == 0) want = n > 2u ? 1u : 0xffffffffu;
        else if (i == 1) want = u < n ? 1u : 0xffffffffu;
        else want = n - 1u;
        if (j >= 7) want = 0xffffffffu; /* o[UNIT_POS]: both cubes write the first 7 */
        CHECK_EQ_U64(o[j], want);
      }
    }
    unload(&k);
  }
}
