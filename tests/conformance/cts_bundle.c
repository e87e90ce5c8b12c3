/* Bundles (cube/bundle.h): export the entries of one device from a cache
 * directory, import them into a second clean one, and a cold process there
 * compiles nothing and tunes nothing (counted by an execution override's
 * statistics and the kernel cache's counters); refusals of damaged bundles,
 * bundles of another version or device, files this user may not trust. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#include "base/fault.h"
#include "cts.h"
#include "kernel/cache.h"
#include "kernel/cache_internal.h"

static const char* k_src =
    "CUBE_KERNEL(scale_add, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a,\n"
    "            uint32_t n) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < n) CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i) + OFFSET);\n"
    "}\n";

typedef struct variant {
  uint32_t dim;
  const char* offset;
} variant_t;

static cube_kernel_t* make_kernel(const char* name, uint32_t dim, const char* offset) {
  char d[16];
  snprintf(d, sizeof(d), "%u", dim);
  cube_define_t defs[2] = {{"OFFSET", offset}, {"DIM", d}};
  cube_kernel_desc_t desc;
  cube_kernel_desc_initialize(&desc);
  desc.name = name;
  desc.source = k_src;
  desc.entry = "scale_add";
  desc.cube_dim = (cube_dim_t){dim, 1, 1};
  desc.defines = defs;
  desc.define_count = 2;
  cube_kernel_t* k = NULL;
  cube_status_t st = cube_kernel_create(&desc, &k);
  if (st) {
    fprintf(stderr, "kernel %s: %s\n", name, cube_status_message(st));
    cube_status_free(st);
  }
  return k;
}

static const variant_t k_dims[2] = {{64, "0.0f"}, {128, "0.0f"}};

static cube_status_t count_fn(void* user, size_t n, const cube_arg_t* args, cube_count_t* out) {
  (void)n;
  const variant_t* v = user;
  *out = cube_count_static((args[3].v.u32 + v->dim - 1) / v->dim, 1, 1);
  return CUBE_OK;
}

static cube_status_t key_fn(void* user, const cube_device_properties_t* props, size_t n,
                            const cube_arg_t* args, cube_tune_key_t* out) {
  (void)user;
  (void)props;
  (void)n;
  out->count = 1;
  out->values[0] = cube_tune_anchor(args[3].v.u32, 0);
  return CUBE_OK;
}

enum { N = 4000 };

/* The workload: a plain kernel (offset 1), then a tunable operation of two
 * candidates. Returns 0 when both results are right. Counts into |o| when
 * given. */
static int workload(cube_client_t* c) {
  int bad = 0;
  float x[N], y[N];
  for (int i = 0; i < N; ++i) x[i] = (float)(i % 17), y[i] = 1.0f;
  cube_handle_t hx, hy;
  if (cube_status_consume(cube_client_create_from_slice(c, x, sizeof(x), &hx)) ||
      cube_status_consume(cube_client_create_from_slice(c, y, sizeof(y), &hy)))
    return 1;
  cube_kernel_t* plain = make_kernel("plain_scale", 64, "1.0f");
  cube_kernel_t* k0 = make_kernel("tuned_64", 64, "0.0f");
  cube_kernel_t* k1 = make_kernel("tuned_128", 128, "0.0f");
  if (!plain || !k0 || !k1) return 2;
  cube_arg_t a[4] = {cube_arg_buffer(hx), cube_arg_buffer(hy), cube_arg_f32(2.0f), cube_arg_u32(N)};
  bad += cube_status_consume(
             cube_client_launch(c, plain, cube_count_static((N + 63) / 64, 1, 1), 4, a)) != 0;
  cube_tune_candidate_t cands[2] = {{"dim64", k0, count_fn, NULL, (void*)&k_dims[0]},
                                    {"dim128", k1, count_fn, NULL, (void*)&k_dims[1]}};
  cube_tune_op_desc_t od;
  cube_tune_op_desc_initialize(&od);
  od.name = "bundle_op";
  od.version = "1";
  od.candidates = cands;
  od.candidate_count = 2;
  od.key = key_fn;
  od.reference = 0;
  od.outputs = 1u << 1;
  od.compare = CUBE_TUNE_COMPARE_F32;
  od.budget_s = 1.0;
  cube_tune_op_t* op = NULL;
  if (cube_status_consume(cube_tune_op_create(&od, &op))) return 3;
  cube_status_t st = cube_tune_op_launch(op, c, 4, a);
  if (st) {
    fprintf(stderr, "tuned launch: %s\n", cube_status_message(st));
    cube_status_free(st);
    bad++;
  }
  float got[N];
  if (cube_status_consume(cube_client_read_into(c, hy, got, sizeof(got)))) bad++;
  for (int i = 0; i < N && !bad; ++i)
    if (got[i] != 1.0f + 2.0f * x[i] + 1.0f + 2.0f * x[i]) {
      fprintf(stderr, "y[%d] = %g\n", i, got[i]);
      bad++;
    }
  cube_tune_op_release(op);
  cube_kernel_release(plain);
  cube_kernel_release(k0);
  cube_kernel_release(k1);
  cube_handle_release(hx);
  cube_handle_release(hy);
  return bad ? 4 : 0;
}

/* The helper: a cold process over the directory it is given. With
 * CTS_BUNDLE_PATH it imports that bundle first. Exit 0 when it compiled and
 * tuned nothing, 10 when it compiled and tuned (as a cold start does), else
 * a failure. */
static void helper_cold(void) {
  cube_client_t* c = NULL;
  if (cube_status_consume(cube_client_load(cts_device(0), &c))) _exit(1);
  const char* bundle = getenv("CTS_BUNDLE_PATH");
  if (bundle) {
    cube_bundle_info_t info = {0};
    cube_status_t st = cube_bundle_import(c, bundle, &info);
    if (st) {
      fprintf(stderr, "import: %s\n", cube_status_message(st));
      cube_status_free(st);
      _exit(2);
    }
  }
  cube_execution_override_t* o = NULL;
  if (cube_status_consume(cube_client_execution_begin(c, CUBE_EXECUTION_RUN, &o))) _exit(3);
  int w = workload(c);
  if (w) _exit(20 + w);
  cube_execution_stats_t es = {0};
  cube_kernel_cache_stats_t ks = {0};
  if (cube_status_consume(cube_execution_override_stats(o, &es)) ||
      cube_status_consume(cube_kernel_cache_stats(&ks)))
    _exit(4);
  fprintf(stderr, "cold helper%s: kernels compiled %llu loaded %llu, keys tuned %llu loaded %llu, "
                  "cache misses %llu disk hits %llu\n",
          bundle ? " (bundle)" : "", (unsigned long long)es.kernels_compiled,
          (unsigned long long)es.kernels_loaded, (unsigned long long)es.keys_tuned,
          (unsigned long long)es.keys_loaded, (unsigned long long)ks.misses,
          (unsigned long long)ks.disk_hits);
  int rc = 5;
  if (es.kernels_compiled == 0 && es.keys_tuned == 0 && ks.misses == 0 && es.keys_loaded == 1 &&
      es.kernels_loaded >= 2)
    rc = 0;
  else if (es.kernels_compiled >= 2 && es.keys_tuned == 1 && ks.misses >= 2)
    rc = 10;
  cube_execution_override_release(o);
  cube_client_release(c);
  cube_shutdown();
  _exit(rc);
}

static int entries_in(const char* dir) {
  (void)dir;
  cube_kernel_cache_entry_t* e = NULL;
  size_t n = 0;
  if (cube_status_consume(cube_kernel_cache_list(&e, &n))) return -1;
  cube_kernel_cache_list_free(e);
  return (int)n;
}

CUBE_TEST(bundle_second_directory_compiles_and_tunes_nothing) {
  if (cts_role_is("cold")) helper_cold();
  CTS_REQUIRE_BACKEND();
  CTS_REQUIRE_DEVICES(1);
  const char* self = "bundle_second_directory_compiles_and_tunes_nothing";
  char dir_a[PATH_MAX], dir_b[PATH_MAX], dir_c[PATH_MAX], bundle[PATH_MAX];
  cts_tmp_path(bundle, sizeof(bundle), "app.cubebundle");
  unlink(bundle);
  /* A: a run fills the directory. */
  cts_cache_dir_fresh("bundle-a", dir_a, sizeof(dir_a));
  CTS_CLIENT(c);
  CHECK_EQ_U64(workload(c), 0);
  char identity[512];
  REQUIRE_OK(cube_client_device_identity(c, identity, sizeof(identity)));
  cube_bundle_info_t info = {0};
  REQUIRE_OK(cube_bundle_export(c, bundle, &info));
  CHECK(strcmp(info.version, CUBE_VERSION_STRING) == 0);
  CHECK(strcmp(info.device, identity) == 0);
  CHECK(strcmp(info.backend, cube_backend_name(cts_backend()->backend)) == 0);
  CHECK(info.kernels >= 3); /* the plain kernel and both candidates */
  CHECK_EQ_U64(info.tunings, 1);
  CHECK_EQ_U64(info.entries, info.kernels + info.tunings);
  struct stat st;
  REQUIRE(stat(bundle, &st) == 0);
  CHECK_EQ_U64(info.bytes, (uint64_t)st.st_size);
  CHECK_EQ_U64(st.st_mode & 0777, 0600);
  cube_bundle_info_t described = {0};
  CHECK_OK(cube_bundle_describe(bundle, &described));
  CHECK_EQ_U64(described.entries, info.entries);
  CHECK(strcmp(described.device, identity) == 0);
  cube_client_release(c);
  cube_shutdown();

  /* B: a second clean directory with the bundle imported: nothing compiled,
   * nothing tuned. */
  cts_cache_dir_fresh("bundle-b", dir_b, sizeof(dir_b));
  setenv("CTS_BUNDLE_PATH", bundle, 1);
  CHECK_EQ_U64(cts_wait_child(cts_spawn_role(self, "cold", -1)), 0);
  unsetenv("CTS_BUNDLE_PATH");
  CHECK_EQ_U64(entries_in(dir_b), info.entries);
  /* C: a clean directory without it: the same process compiles and tunes
   * (what the statistics above would have counted). */
  cts_cache_dir_fresh("bundle-c", dir_c, sizeof(dir_c));
  CHECK_EQ_U64(cts_wait_child(cts_spawn_role(self, "cold", -1)), 10);
  cts_cache_dir_done(dir_c);
  cts_cache_dir_use(dir_b);
  cts_cache_dir_done(dir_b);
  cts_cache_dir_use(dir_a);
  cts_cache_dir_done(dir_a);
  if (cube_test_failures == 0) unlink(bundle);
}

/* Rewrites every "cube=<this version>" of the bundle |path| to
 * "cube=9.9.9" and fixes the checksum: a well-formed bundle of another
 * version. */
static int rewrite_version(const char* path) {
  FILE* f = fopen(path, "r+b");
  if (!f) return 0;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char* p = malloc((size_t)n);
  if (!p || fread(p, 1, (size_t)n, f) != (size_t)n) return 0;
  const char* from = "cube=" CUBE_VERSION_STRING "\n";
  size_t fl = strlen(from);
  int changed = 0;
  for (long i = 0; i + (long)fl <= n - 16; ++i)
    if (memcmp(p + i, from, fl) == 0) {
      memcpy(p + i + 5, "9.9.9", 5);
      changed++;
    }
  XXH128_hash_t h = XXH3_128bits(p, (size_t)n - 16);
  for (int k = 0; k < 8; ++k) {
    p[n - 16 + k] = (unsigned char)(h.high64 >> (8 * k));
    p[n - 8 + k] = (unsigned char)(h.low64 >> (8 * k));
  }
  fseek(f, 0, SEEK_SET);
  int ok = fwrite(p, 1, (size_t)n, f) == (size_t)n;
  fclose(f);
  free(p);
  return ok && changed >= 2;
}

static int copy_file(const char* from, const char* to) {
  FILE* a = fopen(from, "rb");
  int fd = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  FILE* b = fd >= 0 ? fdopen(fd, "wb") : NULL;
  if (!a || !b) return 0;
  char buf[4096];
  size_t k;
  while ((k = fread(buf, 1, sizeof(buf), a)) > 0)
    if (fwrite(buf, 1, k, b) != k) return 0;
  fclose(a);
  return fclose(b) == 0;
}

CUBE_TEST(bundle_refusals) {
  CTS_REQUIRE_BACKEND();
  char dir[PATH_MAX], good[PATH_MAX], bad[PATH_MAX];
  cts_cache_dir_fresh("bundle-refusals", dir, sizeof(dir));
  cts_tmp_path(good, sizeof(good), "good.cubebundle");
  cts_tmp_path(bad, sizeof(bad), "bad.cubebundle");
  CTS_CLIENT(c);
  /* Nothing to export yet. */
  CHECK_STATUS(cube_bundle_export(c, good, NULL), CUBE_STATUS_FAILED_PRECONDITION, "no entry");
  CHECK_EQ_U64(workload(c), 0);
  REQUIRE_OK(cube_bundle_export(c, good, NULL));
  int before = entries_in(dir);
  /* A damaged bundle. */
  REQUIRE(copy_file(good, bad));
  {
    int fd = open(bad, O_RDWR);
    REQUIRE(fd >= 0);
    char b = 0;
    REQUIRE(pread(fd, &b, 1, 100) == 1);
    b ^= 1;
    REQUIRE(pwrite(fd, &b, 1, 100) == 1);
    close(fd);
  }
  CHECK_STATUS(cube_bundle_import(c, bad, NULL), CUBE_STATUS_FAILED_PRECONDITION, "checksum");
  CHECK_STATUS(cube_bundle_describe(bad, &(cube_bundle_info_t){0}), CUBE_STATUS_FAILED_PRECONDITION,
               "damaged");
  /* Another version (well formed otherwise). */
  REQUIRE(copy_file(good, bad));
  REQUIRE(rewrite_version(bad));
  cube_bundle_info_t info = {0};
  CHECK_OK(cube_bundle_describe(bad, &info));
  CHECK(strcmp(info.version, "9.9.9") == 0);
  CHECK_STATUS(cube_bundle_import(c, bad, NULL), CUBE_STATUS_FAILED_PRECONDITION,
               "made by cube 9.9.9");
  /* Another device: entries made for another identity, bundled. */
  const cube__cache_meta_t other = {"elsewhere", "cpu", "cpu | another machine | cc: none"};
  const char* parts[] = {"bundle test", "other device", NULL};
  REQUIRE_OK(cube__cache_disk_store_meta(cube__cache_key(parts), "so", &other, "payload", 7));
  cube__bundle_head_t head;
  REQUIRE_OK(cube__bundle_export(bad, "cpu", other.device, &head));
  CHECK_EQ_U64(head.entries, 1);
  CHECK_STATUS(cube_bundle_import(c, bad, NULL), CUBE_STATUS_FAILED_PRECONDITION,
               "made for device 'cpu | another machine | cc: none'");
  /* Not a bundle; no such file; a file others may write. */
  FILE* f = fopen(bad, "wb");
  REQUIRE(f);
  fputs("certainly not a bundle, but long enough to be looked at", f);
  fclose(f);
  CHECK_STATUS(cube_bundle_import(c, bad, NULL), CUBE_STATUS_INVALID_ARGUMENT, "not a bundle");
  unlink(bad);
  CHECK_STATUS(cube_bundle_import(c, bad, NULL), CUBE_STATUS_NOT_FOUND, "bundle");
  REQUIRE(copy_file(good, bad));
  REQUIRE(chmod(bad, 0666) == 0);
  CHECK_STATUS(cube_bundle_import(c, bad, NULL), CUBE_STATUS_FAILED_PRECONDITION,
               "is not read: it is writable by others (mode 0666)");
  /* A FIFO planted at the path: refused at once, not waited on (the alarm
   * ends the case if an open blocks); a link: refused, not followed. */
  unlink(bad);
  REQUIRE(mkfifo(bad, 0600) == 0);
  alarm(20);
  CHECK_STATUS(cube_bundle_describe(bad, &(cube_bundle_info_t){0}),
               CUBE_STATUS_FAILED_PRECONDITION, "is not read: it is a FIFO");
  CHECK_STATUS(cube_bundle_import(c, bad, NULL), CUBE_STATUS_FAILED_PRECONDITION,
               "is not read: it is a FIFO");
  alarm(0);
  unlink(bad);
  REQUIRE(symlink(good, bad) == 0);
  CHECK_STATUS(cube_bundle_import(c, bad, NULL), CUBE_STATUS_FAILED_PRECONDITION,
               "is not read: it is a symbolic link");
  /* None of the refusals stored anything (the other device's entry is the
   * one this case stored itself). */
  CHECK_EQ_U64(entries_in(dir), before + 1);
  /* The good one imports (into the same directory: the same entries). */
  CHECK_OK(cube_bundle_import(c, good, &info));
  CHECK_EQ_U64(entries_in(dir), before + 1);
  CHECK_STATUS(cube_bundle_import(NULL, good, NULL), CUBE_STATUS_INVALID_ARGUMENT, "NULL");
  CHECK_STATUS(cube_bundle_import(c, NULL, NULL), CUBE_STATUS_INVALID_ARGUMENT, "path");
  unlink(bad);
  unlink(good);
  CTS_END(c);
  cts_cache_dir_done(dir);
}

/* Files in |dir|/v2 whose names start with '.' (temporary files of stores). */
static int temp_files_in(const char* dir) {
  char sub[PATH_MAX];
  snprintf(sub, sizeof(sub), "%s/v2", dir);
  DIR* d = opendir(sub);
  if (!d) return 0;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] == '.' && strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n++;
  closedir(d);
  return n;
}

/* A store that fails in the middle of an import (a full disk, injected at
 * the second entry) leaves the directory as it was: no entry, no temporary
 * file; the same import then succeeds whole. */
CUBE_TEST(bundle_import_is_all_or_none) {
  CTS_REQUIRE_BACKEND();
  CTS_REQUIRE_DEVICES(1);
  char dir_a[PATH_MAX], dir_b[PATH_MAX], bundle[PATH_MAX];
  cts_tmp_path(bundle, sizeof(bundle), "all-or-none.cubebundle");
  cts_cache_dir_fresh("bundle-aon-a", dir_a, sizeof(dir_a));
  cube_bundle_info_t info = {0};
  {
    CTS_CLIENT(c);
    CHECK_EQ_U64(workload(c), 0);
    REQUIRE_OK(cube_bundle_export(c, bundle, &info));
    CTS_END(c);
  }
  REQUIRE(info.entries >= 3);
  cts_cache_dir_fresh("bundle-aon-b", dir_b, sizeof(dir_b));
  {
    CTS_CLIENT(c);
    cube__fault_set(CUBE__FAULT_CACHE_STORE, 2, 1);
    cube_bundle_info_t got = {0};
    CHECK_STATUS(cube_bundle_import(c, bundle, &got), CUBE_STATUS_UNAVAILABLE,
                 "nothing imported");
    CHECK_EQ_U64(cube__fault_injected(CUBE__FAULT_CACHE_STORE), 1);
    cube__fault_reset();
    CHECK_EQ_U64(got.entries, info.entries); /* the refusal still describes the file */
    CHECK_EQ_U64(entries_in(dir_b), 0);
    CHECK_EQ_U64(temp_files_in(dir_b), 0);
    CHECK_OK(cube_bundle_import(c, bundle, &got));
    CHECK_EQ_U64(entries_in(dir_b), info.entries);
    CHECK_EQ_U64(temp_files_in(dir_b), 0);
    CTS_END(c);
  }
  cts_cache_dir_done(dir_b);
  cts_cache_dir_use(dir_a);
  cts_cache_dir_done(dir_a);
  if (cube_test_failures == 0) unlink(bundle);
}
