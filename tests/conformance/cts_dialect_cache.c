/* The kernel cache of dialect kernels through the public API: misses, memory
 * and disk hits, other processes (this program run again on the same backend
 * with a helper role), corrupt entries, processes racing to compile the same
 * kernel, precompilation, many define sets.
 *
 * Every case sets its own fresh CUBE_CACHE_DIR (under CUBE_TEST_TMPDIR, with
 * the backend and the pid in the name) and removes it when it passes. A
 * helper process runs the same case with CTS_ROLE=<role>[/<arg>] in its
 * environment (cts_spawn_role, cts_proc.c) and reports through its exit
 * status (0 = every check passed).
 */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cts.h"

//===----------------------------------------------------------------------===//
// Processes and files
//===----------------------------------------------------------------------===//

/* The helper role of this process ("disk_hit", "corrupt/2", ...), or NULL. */
static const char* role(void) { return cts_role(); }

/* The number after '/' in the role (0 if none). */
static unsigned role_arg(void) {
  const char* r = role();
  const char* slash = r ? strchr(r, '/') : NULL;
  return slash ? (unsigned)strtoul(slash + 1, NULL, 10) : 0;
}

static int role_is(const char* name) {
  const char* r = role();
  size_t n = strlen(name);
  return r && strncmp(r, name, n) == 0 && (r[n] == '\0' || r[n] == '/');
}

static int rm_one(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

static void rm_rf(const char* path) { nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* CUBE_CACHE_DIR before the case (restored at its end: all cases may run in
 * one process). */
static char saved_cache_dir[PATH_MAX];
static int saved_cache_dir_set;

/* CUBE_CACHE_DIR = |dir| (NULL: unset), seen from now on: the option table
 * reads the environment once, and again after cube_shutdown. */
static void cache_dir_env(const char* dir) {
  if (dir)
    setenv("CUBE_CACHE_DIR", dir, 1);
  else
    unsetenv("CUBE_CACHE_DIR");
  cube_shutdown();
}

/* Points CUBE_CACHE_DIR at a new, empty directory for this case (the library
 * creates it on first store). */
static const char* fresh_cache_dir(const char* case_name, char* buf, size_t size) {
  const char* old = getenv("CUBE_CACHE_DIR");
  saved_cache_dir_set = old != NULL;
  snprintf(saved_cache_dir, sizeof(saved_cache_dir), "%s", old ? old : "");
  char name[160];
  snprintf(name, sizeof(name), "dialect-cache-%s-%s", cts_backend()->name, case_name);
  cts_tmp_path(buf, size, name);
  rm_rf(buf);
  cache_dir_env(buf);
  return buf;
}

/* Removes the case's directory if the case passed (kept for a look otherwise). */
static void cache_dir_done(const char* dir) {
  if (cube_test_failures == 0)
    rm_rf(dir);
  else
    fprintf(stderr, "kept the cache directory %s\n", dir);
  cache_dir_env(saved_cache_dir_set ? saved_cache_dir : NULL);
}

static int run_child(const char* case_name, const char* role_value) {
  int rc = cts_wait_child(cts_spawn_role(case_name, role_value, -1));
  if (rc != 0) fprintf(stderr, "helper '%s' of %s exited with %d\n", role_value, case_name, rc);
  return rc;
}

typedef struct entries {
  int count;     /* <hex32>.<kind> entries (.so on the CPU, .clbin on OpenCL) */
  int temps;     /* leftover temporary files of stores */
  char path[PATH_MAX]; /* the last entry seen */
} entries_t;

/* Lists <dir>/v2. */
static entries_t list_entries(const char* dir) {
  entries_t e;
  memset(&e, 0, sizeof(e));
  char sub[PATH_MAX];
  snprintf(sub, sizeof(sub), "%s/v2", dir);
  DIR* d = opendir(sub);
  if (!d) return e;
  struct dirent* de;
  while ((de = readdir(d)) != NULL) {
    const char* name = de->d_name;
    if (name[0] == '.' && strlen(name) > 34 && strspn(name + 1, "0123456789abcdef") == 32) {
      e.temps++;
    } else if (strspn(name, "0123456789abcdef") == 32 && name[32] == '.' && name[33]) {
      e.count++;
      int n = snprintf(e.path, sizeof(e.path), "%s/%s", sub, name);
      if (n < 0 || (size_t)n >= sizeof(e.path)) e.path[0] = '\0';
    }
  }
  closedir(d);
  return e;
}

static unsigned char* read_file(const char* path, size_t* size) {
  *size = 0;
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char* p = malloc(n > 0 ? (size_t)n : 1);
  if (p && n > 0 && fread(p, 1, (size_t)n, f) != (size_t)n) {
    free(p);
    p = NULL;
  }
  fclose(f);
  if (p) *size = (size_t)n;
  return p;
}

static int write_file(const char* path, const void* data, size_t size) {
  FILE* f = fopen(path, "wb");
  if (!f) return 0;
  int ok = fwrite(data, 1, size, f) == size;
  return fclose(f) == 0 && ok;
}

//===----------------------------------------------------------------------===//
// The kernel
//===----------------------------------------------------------------------===//

static const char* k_affine =
    "/* y = x * MUL + ADD (u32), MUL and ADD by define. */\n"
    "CUBE_KERNEL(affine, CUBE_ARRAY(const uint32_t, x), CUBE_ARRAY(uint32_t, y)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(y)) CUBE_STORE(y, i, CUBE_LOAD(x, i) * MUL + ADD);\n"
    "}\n";

#define AFFINE_N 1037u

typedef struct affine {
  uint32_t mul, add;
  char mul_s[16], add_s[16];
} affine_t;

/* The define set number |i| (every process derives the same). */
static affine_t affine_set(unsigned i) {
  affine_t a;
  uint64_t s = 0xAFF1E + i;
  a.mul = (uint32_t)cube_test_rand(&s) | 1u;
  a.add = (uint32_t)cube_test_rand(&s);
  snprintf(a.mul_s, sizeof(a.mul_s), "%uu", a.mul);
  snprintf(a.add_s, sizeof(a.add_s), "%uu", a.add);
  return a;
}

/* The kernel of set |a|; |reversed| gives the defines in the other order. */
static cube_status_t affine_kernel(const affine_t* a, int reversed, cube_kernel_t** out) {
  cube_define_t defs[2] = {{"MUL", a->mul_s}, {"ADD", a->add_s}};
  if (reversed) {
    cube_define_t t = defs[0];
    defs[0] = defs[1];
    defs[1] = t;
  }
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.cube_dim.x = 64;
  d.cube_dim.y = 1;
  d.cube_dim.z = 1;
  d.source = k_affine;
  d.entry = "affine";
  d.defines = defs;
  d.define_count = 2;
  return cube_kernel_create(&d, out);
}

static void affine_input(uint32_t* x) {
  uint64_t s = 0x1A2B3C;
  for (uint32_t i = 0; i < AFFINE_N; ++i) x[i] = (uint32_t)cube_test_rand(&s);
}

/* Launches |k| (set |a|) into a new poisoned output; *out gets the handle. */
static cube_status_t affine_launch(cube_client_t* c, cube_kernel_t* k, cube_handle_t hx,
                                   cube_execution_mode_t mode, cube_handle_t* out) {
  cube_status_t s = cts_poisoned(c, AFFINE_N * 4, out);
  if (s) return s;
  cube_arg_t args[2] = {cube_arg_buffer(hx), cube_arg_buffer(*out)};
  return cube_client_launch_mode(c, k, cube_count_static((AFFINE_N + 63) / 64, 1, 1), 2, args,
                                 mode);
}

/* Reads |h| and compares it with set |a| applied to the input. */
static void affine_verify(cube_client_t* c, cube_handle_t h, const affine_t* a, const char* what) {
  uint32_t x[AFFINE_N];
  affine_input(x);
  uint32_t* got = NULL;
  size_t size = 0;
  CHECK_OK(cts_read_alloc(c, h, (void**)&got, &size));
  CHECK_EQ_U64(size, AFFINE_N * 4);
  if (got && size == AFFINE_N * 4) {
    size_t bad = 0;
    for (uint32_t i = 0; i < AFFINE_N; ++i) {
      uint32_t e = x[i] * a->mul + a->add;
      if (got[i] != e && bad++ < 5)
        fprintf(stderr, "%s: y[%u] = %u, expected %u (MUL=%s ADD=%s)\n", what, i, got[i], e,
                a->mul_s, a->add_s);
    }
    CHECK(bad == 0);
  }
  free(got);
}

/* Launches and checks |k| (set |a|) in |mode|. */
static void affine_check(cube_client_t* c, cube_kernel_t* k, const affine_t* a,
                         cube_execution_mode_t mode, const char* what) {
  uint32_t x[AFFINE_N];
  affine_input(x);
  cube_handle_t hx, hy;
  cube_status_t s = cube_client_create_from_slice(c, x, sizeof(x), &hx);
  if (s) {
    CHECK_OK(s);
    return;
  }
  s = affine_launch(c, k, hx, mode, &hy);
  CHECK_OK(s);
  if (!s) affine_verify(c, hy, a, what);
  CHECK_OK(cube_client_sync(c));
  cube_handle_release(hx);
  cube_handle_release(hy);
}

static cube_kernel_cache_stats_t stats(void) {
  cube_kernel_cache_stats_t st = {0};
  memset(&st, 0, sizeof(st));
  cube_status_t s = cube_kernel_cache_stats(&st);
  if (s) {
    fprintf(stderr, "cube_kernel_cache_stats: %s\n", cube_status_message(s));
    cube_status_free(s);
    cube_test_failures++;
  }
  return st;
}

/* Counter differences b - a. */
#define D_MEM(a, b) ((b).memory_hits - (a).memory_hits)
#define D_DISK(a, b) ((b).disk_hits - (a).disk_hits)
#define D_MISS(a, b) ((b).misses - (a).misses)
#define D_CORRUPT(a, b) ((b).corrupt_entries - (a).corrupt_entries)

/* One client, one kernel of set |set|, checked; returns the counter deltas. */
static void use_kernel_once(unsigned set, cube_kernel_cache_stats_t* before,
                            cube_kernel_cache_stats_t* after) {
  memset(before, 0, sizeof(*before));
  memset(after, 0, sizeof(*after));
  CTS_CLIENT(c);
  affine_t a = affine_set(set);
  cube_kernel_t* k = NULL;
  REQUIRE_OK(affine_kernel(&a, 0, &k));
  *before = stats();
  affine_check(c, k, &a, CUBE_EXEC_CHECKED, role() ? role() : "parent");
  *after = stats();
  cube_kernel_release(k);
  CTS_END(c);
}

//===----------------------------------------------------------------------===//
// Helper roles
//===----------------------------------------------------------------------===//

/* "disk_hit/<set>": the kernel comes from the disk cache, nothing compiles. */
static void helper_disk_hit(void) {
  cube_kernel_cache_stats_t s0 = {0}, s1 = {0};
  memset(&s0, 0, sizeof(s0));
  memset(&s1, 0, sizeof(s1));
  use_kernel_once(role_arg(), &s0, &s1);
  CHECK_EQ_U64(D_DISK(s0, s1), 1);
  CHECK_EQ_U64(D_MISS(s0, s1), 0);
  CHECK_EQ_U64(D_CORRUPT(s0, s1), 0);
}

/* "corrupt/<set>": the entry on disk is damaged: found corrupt, rebuilt. */
static void helper_corrupt(void) {
  cube_kernel_cache_stats_t s0 = {0}, s1 = {0};
  memset(&s0, 0, sizeof(s0));
  memset(&s1, 0, sizeof(s1));
  use_kernel_once(role_arg(), &s0, &s1);
  CHECK_EQ_U64(D_CORRUPT(s0, s1), 1);
  CHECK_EQ_U64(D_MISS(s0, s1), 1);
  CHECK_EQ_U64(D_DISK(s0, s1), 0);
  CHECK_EQ_U64(s1.compile_failures, 0);
}

/* "race/<set>": waits for the start signal, then compiles or loads. */
static void helper_race(void) {
  cts_wait_go();
  cube_kernel_cache_stats_t s0 = {0}, s1 = {0};
  memset(&s0, 0, sizeof(s0));
  memset(&s1, 0, sizeof(s1));
  use_kernel_once(role_arg(), &s0, &s1);
  CHECK_EQ_U64(D_MISS(s0, s1) + D_DISK(s0, s1), 1);
  CHECK_EQ_U64(D_CORRUPT(s0, s1), 0);
  CHECK_EQ_U64(s1.compile_failures, 0);
}

//===----------------------------------------------------------------------===//
// Cases
//===----------------------------------------------------------------------===//

/* Compiled here (a miss, one entry on disk); another process loads it from
 * disk; after cube_shutdown this process too (shutdown empties the memory
 * cache, the disk stays). */
CUBE_TEST(dialect_cache_disk_hit_in_child) {
  if (role_is("disk_hit")) {
    helper_disk_hit();
    return;
  }
  CTS_REQUIRE_DEVICES(1);
  char dir[PATH_MAX];
  fresh_cache_dir("disk_hit", dir, sizeof(dir));
  CHECK(strcmp(cube_kernel_cache_dir(), dir) == 0);
  cube_kernel_cache_stats_t s0 = {0}, s1 = {0};
  use_kernel_once(1, &s0, &s1);
  CHECK_EQ_U64(D_MISS(s0, s1), 1);
  CHECK_EQ_U64(D_DISK(s0, s1), 0);
  CHECK_EQ_U64(D_MEM(s0, s1), 0);
  CHECK_EQ_U64(s1.disk_entries, 1);
  CHECK(s1.disk_bytes > 0);
  entries_t e = list_entries(dir);
  CHECK_EQ_U64(e.count, 1);
  CHECK_EQ_U64(e.temps, 0);

  CHECK_EQ_U64(run_child("dialect_cache_disk_hit_in_child", "disk_hit/1"), 0);
  CHECK_EQ_U64(run_child("dialect_cache_disk_hit_in_child", "disk_hit/1"), 0);

  /* This process after cube_shutdown (use_kernel_once ended with it). */
  use_kernel_once(1, &s0, &s1);
  CHECK_EQ_U64(D_DISK(s0, s1), 1);
  CHECK_EQ_U64(D_MISS(s0, s1), 0);
  CHECK_EQ_U64(D_MEM(s0, s1), 0);
  CHECK_EQ_U64(list_entries(dir).count, 1);

  /* With the disk cache off nothing is stored or loaded. */
  cache_dir_env("off");
  CHECK(strcmp(cube_kernel_cache_dir(), "") == 0);
  use_kernel_once(1, &s0, &s1);
  CHECK_EQ_U64(D_MISS(s0, s1), 1);
  CHECK_EQ_U64(D_DISK(s0, s1), 0);
  cache_dir_env(dir);
  cache_dir_done(dir);
}

/* Damaged entries (bytes changed in the middle, truncated, empty) are found
 * by the next process that loads them, deleted, rebuilt and still right. */
CUBE_TEST(dialect_cache_corrupt_entry_rebuilt) {
  if (role_is("corrupt")) {
    helper_corrupt();
    return;
  }
  if (role_is("disk_hit")) {
    helper_disk_hit();
    return;
  }
  const char* self = "dialect_cache_corrupt_entry_rebuilt";
  CTS_REQUIRE_DEVICES(1);
  char dir[PATH_MAX];
  fresh_cache_dir("corrupt", dir, sizeof(dir));
  cube_kernel_cache_stats_t s0 = {0}, s1 = {0};
  use_kernel_once(2, &s0, &s1);
  CHECK_EQ_U64(D_MISS(s0, s1), 1);
  entries_t e = list_entries(dir);
  REQUIRE(e.count == 1);
  size_t size = 0;
  unsigned char* good = read_file(e.path, &size);
  REQUIRE(good != NULL && size > 256);

  for (int how = 0; how < 3; ++how) {
    static const char* const what[3] = {"64 bytes changed in the middle", "truncated to half",
                                        "emptied"};
    unsigned char* bad = malloc(size);
    REQUIRE(bad != NULL);
    memcpy(bad, good, size);
    size_t bad_size = size;
    if (how == 0)
      for (size_t i = size / 2; i < size / 2 + 64; ++i) bad[i] = (unsigned char)~bad[i];
    if (how == 1) bad_size = size / 2;
    if (how == 2) bad_size = 0;
    REQUIRE(write_file(e.path, bad, bad_size));
    if (run_child(self, "corrupt/2") != 0) {
      fprintf(stderr, "entry %s\n", what[how]);
      CHECK(!"a helper process rebuilds a corrupt entry");
    }
    /* Rebuilt: one entry again, loadable by the next process. */
    entries_t after = list_entries(dir);
    CHECK_EQ_U64(after.count, 1);
    CHECK_EQ_U64(after.temps, 0);
    size_t now_size = 0;
    unsigned char* now = read_file(e.path, &now_size);
    CHECK(now != NULL && now_size > 0 && (now_size != bad_size || memcmp(now, bad, now_size) != 0));
    free(now);
    if (run_child(self, "disk_hit/2") != 0) {
      fprintf(stderr, "entry %s\n", what[how]);
      CHECK(!"the rebuilt entry loads from disk");
    }
    free(bad);
  }

  /* In this process: after cube_shutdown the memory cache is empty, so a
   * damaged entry is read, found corrupt and rebuilt here. */
  size_t cur_size = 0;
  unsigned char* cur = read_file(e.path, &cur_size);
  REQUIRE(cur != NULL && cur_size > 128);
  cur[cur_size - 1] ^= 0x5A; /* the last payload byte: only the checksum sees it */
  REQUIRE(write_file(e.path, cur, cur_size));
  free(cur);
  use_kernel_once(2, &s0, &s1);
  CHECK_EQ_U64(D_CORRUPT(s0, s1), 1);
  CHECK_EQ_U64(D_MISS(s0, s1), 1);
  CHECK_EQ_U64(D_DISK(s0, s1), 0);
  free(good);
  cache_dir_done(dir);
}

/* Several processes compile the same new kernel at once: all succeed and
 * compute right, one entry is left (no temporary files), and it loads. */
CUBE_TEST(dialect_cache_concurrent_processes) {
  if (role_is("race")) {
    helper_race();
    return;
  }
  if (role_is("disk_hit")) {
    helper_disk_hit();
    return;
  }
  const char* self = "dialect_cache_concurrent_processes";
  CTS_REQUIRE_DEVICES(1);
  char dir[PATH_MAX];
  fresh_cache_dir("race", dir, sizeof(dir));
  enum { HELPERS = 3 };
  for (unsigned round = 0; round < 2; ++round) {
    unsigned set = 10 + round;
    int p[2];
    REQUIRE(pipe2(p, O_CLOEXEC) == 0);
    char r[32];
    snprintf(r, sizeof(r), "race/%u", set);
    pid_t pids[HELPERS];
    for (int i = 0; i < HELPERS; ++i) pids[i] = cts_spawn_role(self, r, p[0]);
    close(p[0]);
    cts_sleep_ms(100); /* let them start and block on the pipe */
    close(p[1]);       /* go */
    for (int i = 0; i < HELPERS; ++i) {
      int rc = cts_wait_child(pids[i]);
      if (rc != 0) fprintf(stderr, "round %u: racing helper %d exited with %d\n", round, i, rc);
      CHECK_EQ_U64(rc, 0);
    }
    entries_t e = list_entries(dir);
    CHECK_EQ_U64(e.count, round + 1);
    CHECK_EQ_U64(e.temps, 0);
    snprintf(r, sizeof(r), "disk_hit/%u", set);
    CHECK_EQ_U64(run_child(self, r), 0);
  }
  cache_dir_done(dir);
}

/* cube_client_precompile compiles (per mode); the launch after it compiles
 * nothing; another kernel object of the same source finds it in memory. */
CUBE_TEST(dialect_cache_precompile_no_recompile) {
  CTS_REQUIRE_DEVICES(1);
  char dir[PATH_MAX];
  fresh_cache_dir("precompile", dir, sizeof(dir));
  CTS_CLIENT(c);
  affine_t a = affine_set(20);
  cube_kernel_t* k = NULL;
  REQUIRE_OK(affine_kernel(&a, 0, &k));

  cube_kernel_cache_stats_t s0 = stats();
  CHECK_OK(cube_client_precompile(c, 1, &k, CUBE_EXEC_CHECKED));
  cube_kernel_cache_stats_t s1 = stats();
  CHECK_EQ_U64(D_MISS(s0, s1), 1);
  CHECK_EQ_U64(s1.disk_entries, 1);
  affine_check(c, k, &a, CUBE_EXEC_CHECKED, "after precompile");
  cube_kernel_cache_stats_t s2 = stats();
  CHECK_EQ_U64(D_MISS(s1, s2), 0);
  CHECK_EQ_U64(D_DISK(s1, s2), 0);
  /* Precompiling again does nothing new. */
  CHECK_OK(cube_client_precompile(c, 1, &k, CUBE_EXEC_CHECKED));
  cube_kernel_cache_stats_t s3 = stats();
  CHECK_EQ_U64(D_MISS(s2, s3), 0);
  CHECK_EQ_U64(D_DISK(s2, s3), 0);

  /* The mode is part of the kernel: Validate is compiled by its precompile,
   * Unchecked (not precompiled) by its launch. */
  CHECK_OK(cube_client_precompile(c, 1, &k, CUBE_EXEC_VALIDATE));
  cube_kernel_cache_stats_t s4 = stats();
  CHECK_EQ_U64(D_MISS(s3, s4), 1);
  CHECK_EQ_U64(s4.disk_entries, 2);
  affine_check(c, k, &a, CUBE_EXEC_VALIDATE, "validate after precompile");
  cube_kernel_cache_stats_t s5 = stats();
  CHECK_EQ_U64(D_MISS(s4, s5), 0);
  CHECK_EQ_U64(D_DISK(s4, s5), 0);
  affine_check(c, k, &a, CUBE_EXEC_UNCHECKED, "unchecked");
  cube_kernel_cache_stats_t s6 = stats();
  CHECK_EQ_U64(D_MISS(s5, s6), 1);

  /* Another kernel object of the same source and defines (in another order). */
  cube_kernel_t* k2 = NULL;
  REQUIRE_OK(affine_kernel(&a, 1, &k2));
  CHECK_OK(cube_client_precompile(c, 1, &k2, CUBE_EXEC_CHECKED));
  cube_kernel_cache_stats_t s7 = stats();
  CHECK_EQ_U64(D_MEM(s6, s7), 1);
  CHECK_EQ_U64(D_MISS(s6, s7), 0);
  CHECK_EQ_U64(D_DISK(s6, s7), 0);
  affine_check(c, k2, &a, CUBE_EXEC_CHECKED, "second object");

  /* A batch of two new kernels, a native one (nothing to do; only where the
   * device runs native kernels), an empty batch. */
  affine_t b1 = affine_set(21), b2 = affine_set(22);
  cube_kernel_t* batch[3] = {NULL, NULL, NULL};
  REQUIRE_OK(affine_kernel(&b1, 0, &batch[0]));
  REQUIRE_OK(affine_kernel(&b2, 0, &batch[1]));
  uint32_t batch_size = 2;
  if (cts_native_kernels()) {
    const cube_arg_kind_t copy_kinds[2] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER};
    cube_kernel_desc_t nd;
    memset(&nd, 0, sizeof(nd));
    nd.name = "native_copy";
    nd.cube_dim = (cube_dim_t){1, 1, 1};
    nd.arg_kinds = copy_kinds;
    nd.arg_count = 2;
    nd.cpu_fn = cts_k_copy;
    REQUIRE_OK(cube_kernel_create(&nd, &batch[2]));
    batch_size = 3;
  }
  cube_kernel_cache_stats_t s8 = stats();
  CHECK_OK(cube_client_precompile(c, batch_size, batch, CUBE_EXEC_CHECKED));
  CHECK_OK(cube_client_precompile(c, 0, NULL, CUBE_EXEC_CHECKED));
  cube_kernel_cache_stats_t s9 = stats();
  CHECK_EQ_U64(D_MISS(s8, s9), 2);
  affine_check(c, batch[0], &b1, CUBE_EXEC_CHECKED, "batch 0");
  affine_check(c, batch[1], &b2, CUBE_EXEC_CHECKED, "batch 1");
  cube_kernel_cache_stats_t s10 = stats();
  CHECK_EQ_U64(D_MISS(s9, s10), 0);
  CHECK_EQ_U64(D_DISK(s9, s10), 0);
  CHECK_EQ_U64(s10.disk_entries, 5);
  CHECK_EQ_U64(s10.compile_failures, s0.compile_failures);

  cube_kernel_release(k);
  cube_kernel_release(k2);
  for (int i = 0; i < 3; ++i) cube_kernel_release(batch[i]);
  CTS_END(c);
  cache_dir_done(dir);
}

/* Ten define sets of one source launched back to back (results read only at
 * the end): each output is its own kernel's. Then new objects with the defines
 * reordered (memory hits), then another process (disk hits). */
enum { MANY = 10 };

static void many_round(int reversed, const char* what) {
  CTS_CLIENT(c);
  uint32_t x[AFFINE_N];
  affine_input(x);
  cube_handle_t hx;
  REQUIRE_OK(cube_client_create_from_slice(c, x, sizeof(x), &hx));
  cube_kernel_t* k[MANY];
  affine_t a[MANY];
  cube_handle_t out[MANY];
  for (unsigned i = 0; i < MANY; ++i) {
    /* Reversed rounds also create and launch in the other order. */
    unsigned set = reversed ? MANY - 1 - i : i;
    a[set] = affine_set(100 + set);
    REQUIRE_OK(affine_kernel(&a[set], reversed, &k[set]));
    REQUIRE_OK(affine_launch(c, k[set], hx, CUBE_EXEC_CHECKED, &out[set]));
  }
  for (unsigned i = 0; i < MANY; ++i) {
    char w[64];
    snprintf(w, sizeof(w), "%s: set %u", what, i);
    affine_verify(c, out[i], &a[i], w);
  }
  CHECK_OK(cube_client_sync(c));
  for (unsigned i = 0; i < MANY; ++i) {
    cube_handle_release(out[i]);
    cube_kernel_release(k[i]);
  }
  cube_handle_release(hx);
  CTS_END(c);
}

CUBE_TEST(dialect_cache_many_define_sets) {
  if (role_is("many")) {
    cube_kernel_cache_stats_t s0 = stats();
    many_round(1, "helper");
    cube_kernel_cache_stats_t s1 = stats();
    CHECK_EQ_U64(D_DISK(s0, s1), MANY);
    CHECK_EQ_U64(D_MISS(s0, s1), 0);
    return;
  }
  CTS_REQUIRE_DEVICES(1);
  char dir[PATH_MAX];
  fresh_cache_dir("many", dir, sizeof(dir));
  cube_kernel_cache_stats_t s0 = stats();
  many_round(0, "first");
  cube_kernel_cache_stats_t s1 = stats();
  CHECK_EQ_U64(D_MISS(s0, s1), MANY);
  CHECK_EQ_U64(D_DISK(s0, s1), 0);
  CHECK_EQ_U64(s1.disk_entries, MANY);
  CHECK_EQ_U64(list_entries(dir).count, MANY);
  /* cube_shutdown emptied the memory cache: the disk serves them now. */
  many_round(1, "after shutdown");
  cube_kernel_cache_stats_t s2 = stats();
  CHECK_EQ_U64(D_DISK(s1, s2), MANY);
  CHECK_EQ_U64(D_MISS(s1, s2), 0);
  CHECK_EQ_U64(run_child("dialect_cache_many_define_sets", "many"), 0);
  cache_dir_done(dir);
}

/* Within one process and client: the reordered define sets are memory hits. */
CUBE_TEST(dialect_cache_memory_hits_in_process) {
  CTS_REQUIRE_DEVICES(1);
  char dir[PATH_MAX];
  fresh_cache_dir("memory", dir, sizeof(dir));
  CTS_CLIENT(c);
  cube_kernel_cache_stats_t s0 = stats();
  for (unsigned pass = 0; pass < 2; ++pass) {
    for (unsigned i = 0; i < 4; ++i) {
      affine_t a = affine_set(200 + i);
      cube_kernel_t* k = NULL;
      REQUIRE_OK(affine_kernel(&a, (int)pass, &k));
      char w[64];
      snprintf(w, sizeof(w), "pass %u set %u", pass, i);
      affine_check(c, k, &a, CUBE_EXEC_CHECKED, w);
      cube_kernel_release(k);
    }
  }
  cube_kernel_cache_stats_t s1 = stats();
  CHECK_EQ_U64(D_MISS(s0, s1), 4);
  CHECK_EQ_U64(D_MEM(s0, s1), 4);
  CHECK_EQ_U64(D_DISK(s0, s1), 0);
  CTS_END(c);
  cache_dir_done(dir);
}
