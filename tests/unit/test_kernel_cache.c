// cube-test-libs: cube_static
/* The kernel cache's storage: keys, the disk format and its atomic writes,
 * corrupt entries, the memory map, counters, stats and clear. Every case uses
 * its own cache directory (CUBE_CACHE_DIR). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backends/cpu/cpu_compiler.h"
#include "check.h"
#include "cube/cache.h"
#include "cube/cube.h"
#include "kernel/cache.h"
#include "kernel/cache_internal.h"

#define HEADER_SIZE 32 /* entries stored without metadata */

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

static char g_dir[1024];

static int rm_entry(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}
static void rm_tree(const char* path) { (void)nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* CUBE_CACHE_DIR set to |dir| (NULL: unset). The option table reads the
 * environment once, and again after cube_shutdown (which also drops the
 * memory map, as cube__cache_shutdown does). */
static void env_cache_dir(const char* dir) {
  if (dir)
    setenv("CUBE_CACHE_DIR", dir, 1);
  else
    unsetenv("CUBE_CACHE_DIR");
  cube_shutdown();
}

/* A fresh cache directory for the case, empty counters and memory map. */
static void use_fresh_cache(const char* name) {
  const char* base = getenv("CUBE_TEST_TMPDIR");
  if (!base || !*base) base = "/tmp";
  snprintf(g_dir, sizeof(g_dir), "%s/kcache-%s-%ld", base, name, (long)getpid());
  rm_tree(g_dir);
  env_cache_dir(g_dir);
  CHECK_OK(cube_kernel_cache_clear());
}

static void done_with_cache(void) {
  cube__cache_shutdown();
  rm_tree(g_dir);
}

static cube__cache_key_t key_of(const char* a, const char* b) {
  const char* parts[] = {a, b, NULL};
  return cube__cache_key(parts);
}

static void entry_path(cube__cache_key_t key, const char* kind, char* out, size_t size) {
  cube_status_t st = cube__cache_entry_path(key, kind, out, size);
  if (st) {
    fprintf(stderr, "entry path: %s\n", cube_status_message(st));
    cube_status_free(st);
    out[0] = '\0';
  }
}

static bool file_exists(const char* path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static uint64_t corrupt_count(void) {
  cube_kernel_cache_stats_t s = {0};
  cube_status_t st = cube_kernel_cache_stats(&s);
  if (st) {
    cube_status_free(st);
    return UINT64_MAX;
  }
  return s.corrupt_entries;
}

//===----------------------------------------------------------------------===//
// Keys
//===----------------------------------------------------------------------===//

CUBE_TEST(key_part_boundaries_matter) {
  const char* ab_c[] = {"ab", "c", NULL};
  const char* a_bc[] = {"a", "bc", NULL};
  const char* abc[] = {"abc", NULL};
  const char* a[] = {"a", NULL};
  const char* a_empty[] = {"a", "", NULL};
  const char* none[] = {NULL};
  const char* empty[] = {"", NULL};
  cube__cache_key_t k1 = cube__cache_key(ab_c), k2 = cube__cache_key(a_bc);
  cube__cache_key_t k3 = cube__cache_key(abc), k4 = cube__cache_key(a);
  cube__cache_key_t k5 = cube__cache_key(a_empty), k6 = cube__cache_key(none);
  cube__cache_key_t k7 = cube__cache_key(empty);
  cube__cache_key_t all[] = {k1, k2, k3, k4, k5, k6, k7};
  for (int i = 0; i < 7; ++i)
    for (int j = i + 1; j < 7; ++j)
      CHECK(!(all[i].hi == all[j].hi && all[i].lo == all[j].lo));
  /* Same parts, same key. */
  const char* ab_c2[] = {"ab", "c", NULL};
  cube__cache_key_t k1b = cube__cache_key(ab_c2);
  CHECK(k1.hi == k1b.hi && k1.lo == k1b.lo);
  /* A single changed byte changes the key. */
  const char* ab_d[] = {"ab", "d", NULL};
  cube__cache_key_t k8 = cube__cache_key(ab_d);
  CHECK(!(k1.hi == k8.hi && k1.lo == k8.lo));
}

CUBE_TEST(key_hex_is_stable) {
  char hex[33];
  cube__cache_key_t k = {0x0123456789abcdefull, 0xfedcba9876543210ull};
  cube__cache_key_hex(k, hex);
  CHECK(strcmp(hex, "0123456789abcdeffedcba9876543210") == 0);
  cube__cache_key_t z = {0, 0};
  cube__cache_key_hex(z, hex);
  CHECK(strcmp(hex, "00000000000000000000000000000000") == 0);
  /* The scheme itself is fixed (changing it silently orphans every disk
   * entry): XXH3-128 of (u64 length, bytes) per part, then the part count. */
  const char* parts[] = {"cube", "0.1.0", "cpu", "int main(void){return 0;}", NULL};
  cube__cache_key_hex(cube__cache_key(parts), hex);
  printf("key hex: %s\n", hex);
  CHECK(strlen(hex) == 32);
  CHECK(strspn(hex, "0123456789abcdef") == 32);
  CHECK(strcmp(hex, "5961405e66096c49620c623612420cf8") == 0);
}

//===----------------------------------------------------------------------===//
// Disk
//===----------------------------------------------------------------------===//

CUBE_TEST(disk_store_load_round_trip) {
  use_fresh_cache("round_trip");
  cube__cache_key_t k = key_of("round", "trip");
  size_t n = 100000;
  unsigned char* payload = malloc(n);
  REQUIRE(payload);
  cube_test_fill_random(payload, n, 42);

  void* data = (void*)1;
  size_t size = 7;
  CHECK_STATUS(cube__cache_disk_load(k, "so", &data, &size), CUBE_STATUS_NOT_FOUND, "no entry");
  CHECK(data == NULL && size == 0);

  CHECK_OK(cube__cache_disk_store(k, "so", payload, n));
  CHECK_OK(cube__cache_disk_load(k, "so", &data, &size));
  CHECK_EQ_U64(size, n);
  CHECK(data && memcmp(data, payload, n) == 0);
  free(data);

  /* Layout: <dir>/v2/<hex>.so, header + payload; private modes. */
  char path[2048], hex[33], expect[2048];
  entry_path(k, "so", path, sizeof(path));
  cube__cache_key_hex(k, hex);
  snprintf(expect, sizeof(expect), "%s/v2/%s.so", g_dir, hex);
  CHECK(strcmp(path, expect) == 0);
  struct stat st;
  REQUIRE(stat(path, &st) == 0);
  CHECK_EQ_U64(st.st_size, n + HEADER_SIZE);
  CHECK_EQ_U64(st.st_mode & 0777, 0600);
  char v2[2048];
  snprintf(v2, sizeof(v2), "%s/v2", g_dir);
  REQUIRE(stat(v2, &st) == 0);
  CHECK_EQ_U64(st.st_mode & 0777, 0700);
  REQUIRE(stat(g_dir, &st) == 0);
  CHECK_EQ_U64(st.st_mode & 0777, 0700);
  FILE* f = fopen(path, "rb");
  REQUIRE(f);
  char magic[8];
  CHECK(fread(magic, 1, 8, f) == 8 && memcmp(magic, "CUBEKC02", 8) == 0);
  fclose(f);

  /* Kinds are separate entries; an empty payload round-trips; a second
   * store replaces. */
  CHECK_STATUS(cube__cache_disk_load(k, "cubin", &data, &size), CUBE_STATUS_NOT_FOUND, "cubin");
  CHECK_OK(cube__cache_disk_store(k, "clbin", "", 0));
  CHECK_OK(cube__cache_disk_load(k, "clbin", &data, &size));
  CHECK_EQ_U64(size, 0);
  free(data);
  CHECK_OK(cube__cache_disk_store(k, "so", "second", 6));
  CHECK_OK(cube__cache_disk_load(k, "so", &data, &size));
  CHECK(size == 6 && memcmp(data, "second", 6) == 0);
  free(data);
  CHECK_EQ_U64(corrupt_count(), 0);

  /* A bad kind is refused. */
  CHECK_STATUS(cube__cache_disk_store(k, "../x", "a", 1), CUBE_STATUS_INVALID_ARGUMENT, "kind");
  CHECK_STATUS(cube__cache_disk_load(k, "", &data, &size), CUBE_STATUS_INVALID_ARGUMENT, "kind");
  free(payload);
  done_with_cache();
}

CUBE_TEST(disk_store_creates_nested_directories) {
  use_fresh_cache("nested");
  char nested[1100];
  snprintf(nested, sizeof(nested), "%s/a/b/c", g_dir);
  env_cache_dir(nested);
  CHECK(strcmp(cube_kernel_cache_dir(), nested) == 0);
  cube__cache_key_t k = key_of("nested", "dirs");
  CHECK_OK(cube__cache_disk_store(k, "so", "xyz", 3));
  void* data = NULL;
  size_t size = 0;
  CHECK_OK(cube__cache_disk_load(k, "so", &data, &size));
  CHECK(size == 3 && memcmp(data, "xyz", 3) == 0);
  free(data);
  struct stat st;
  char b[1200];
  snprintf(b, sizeof(b), "%s/a/b", g_dir);
  REQUIRE(stat(b, &st) == 0);
  CHECK_EQ_U64(st.st_mode & 0777, 0700);
  /* A trailing slash names the same directory. */
  char slash[1200];
  snprintf(slash, sizeof(slash), "%s/", nested);
  env_cache_dir(slash);
  CHECK(strcmp(cube_kernel_cache_dir(), nested) == 0);
  CHECK_OK(cube__cache_disk_load(k, "so", &data, &size));
  free(data);
  env_cache_dir(g_dir);
  done_with_cache();
}

CUBE_TEST(disk_store_unusable_directory_reports) {
  use_fresh_cache("unusable");
  /* A regular file where a parent directory should be (refused even to root). */
  FILE* f = fopen(g_dir, "w");
  REQUIRE(f);
  fclose(f);
  char sub[1100];
  snprintf(sub, sizeof(sub), "%s/cache", g_dir);
  env_cache_dir(sub);
  cube__cache_key_t k = key_of("unusable", "dir");
  CHECK_STATUS(cube__cache_disk_store(k, "so", "abc", 3), CUBE_STATUS_UNAVAILABLE,
               "cannot create directory", sub, "Not a directory");
  void* data = NULL;
  size_t size = 0;
  CHECK_STATUS(cube__cache_disk_load(k, "so", &data, &size), CUBE_STATUS_NOT_FOUND, sub);
  cube_kernel_cache_stats_t s = {0};
  CHECK_OK(cube_kernel_cache_stats(&s)); /* nothing to count: not an error */
  CHECK_EQ_U64(s.disk_entries, 0);
  unlink(g_dir);
  env_cache_dir(g_dir);
  done_with_cache();
}

/* Two processes store different payloads under one key, 200 times each,
 * while a third loads: every load is one payload intact, or a miss. */
CUBE_TEST(disk_store_atomic_across_processes) {
  use_fresh_cache("atomic");
  cube__cache_key_t k = key_of("atomic", "race");
  const size_t na = 300000, nb = 170000;
  unsigned char* pa = malloc(na);
  unsigned char* pb = malloc(nb);
  REQUIRE(pa && pb);
  cube_test_fill_random(pa, na, 1);
  cube_test_fill_random(pb, nb, 2);
  struct shared {
    atomic_int writers_done;
    atomic_int loads_a, loads_b, misses, bad, corrupt;
  }* sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(sh != MAP_FAILED);
  memset(sh, 0, sizeof(*sh));
  fflush(stdout);
  fflush(stderr);

  pid_t loader = fork();
  REQUIRE(loader >= 0);
  if (loader == 0) {
    uint64_t rounds = 0;
    while (!atomic_load(&sh->writers_done) || rounds < 10) {
      void* data = NULL;
      size_t size = 0;
      cube_status_t st = cube__cache_disk_load(k, "so", &data, &size);
      if (st) {
        if (cube_status_code(st) == CUBE_STATUS_NOT_FOUND && !strstr(cube_status_message(st), "corrupt"))
          atomic_fetch_add(&sh->misses, 1);
        else {
          fprintf(stderr, "loader: %s\n", cube_status_message(st));
          atomic_fetch_add(&sh->bad, 1);
        }
        cube_status_free(st);
      } else if (size == na && memcmp(data, pa, na) == 0) {
        atomic_fetch_add(&sh->loads_a, 1);
      } else if (size == nb && memcmp(data, pb, nb) == 0) {
        atomic_fetch_add(&sh->loads_b, 1);
      } else {
        atomic_fetch_add(&sh->bad, 1);
      }
      free(data);
      ++rounds;
    }
    cube_kernel_cache_stats_t s = {0};
    if (cube_status_consume(cube_kernel_cache_stats(&s)) == CUBE_STATUS_OK)
      atomic_store(&sh->corrupt, (int)s.corrupt_entries);
    _exit(0);
  }
  pid_t writers[2];
  for (int w = 0; w < 2; ++w) {
    writers[w] = fork();
    REQUIRE(writers[w] >= 0);
    if (writers[w] == 0) {
      int failures = 0;
      for (int i = 0; i < 200; ++i) {
        cube_status_t st = w == 0 ? cube__cache_disk_store(k, "so", pa, na)
                                  : cube__cache_disk_store(k, "so", pb, nb);
        if (st) {
          fprintf(stderr, "writer %d: %s\n", w, cube_status_message(st));
          cube_status_free(st);
          ++failures;
        }
      }
      _exit(failures ? 1 : 0);
    }
  }
  for (int w = 0; w < 2; ++w) {
    int ws = 0;
    CHECK(waitpid(writers[w], &ws, 0) == writers[w]);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  }
  atomic_store(&sh->writers_done, 1);
  int ws = 0;
  CHECK(waitpid(loader, &ws, 0) == loader);
  CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  printf("loads: %d of payload A, %d of B, %d misses, %d bad, %d corrupt\n",
         atomic_load(&sh->loads_a), atomic_load(&sh->loads_b), atomic_load(&sh->misses),
         atomic_load(&sh->bad), atomic_load(&sh->corrupt));
  CHECK_EQ_U64(atomic_load(&sh->bad), 0);
  CHECK_EQ_U64(atomic_load(&sh->corrupt), 0);
  CHECK(atomic_load(&sh->loads_a) + atomic_load(&sh->loads_b) > 0);
  /* One entry left, no temporary files. */
  cube_kernel_cache_stats_t s = {0};
  CHECK_OK(cube_kernel_cache_stats(&s));
  CHECK_EQ_U64(s.disk_entries, 1);
  CHECK(s.disk_bytes == na + HEADER_SIZE || s.disk_bytes == nb + HEADER_SIZE);
  char v2[1100];
  snprintf(v2, sizeof(v2), "%s/v2", g_dir);
  char cmd[1300];
  snprintf(cmd, sizeof(cmd), "test $(ls -A '%s' | wc -l) -eq 1", v2);
  CHECK(system(cmd) == 0);
  munmap(sh, sizeof(*sh));
  free(pa);
  free(pb);
  done_with_cache();
}

/* Stores a payload, damages the file with |damage|, then expects the load to
 * report NOT_FOUND "corrupt", count it and delete the file. */
static void check_corruption(const char* name, void (*damage)(const char* path, size_t n),
                             const char* why) {
  use_fresh_cache(name);
  cube__cache_key_t k = key_of("corrupt", name);
  size_t n = 4096;
  unsigned char payload[4096];
  cube_test_fill_random(payload, n, 7);
  CHECK_OK(cube__cache_disk_store(k, "so", payload, n));
  char path[2048];
  entry_path(k, "so", path, sizeof(path));
  REQUIRE(file_exists(path));
  damage(path, n);
  void* data = (void*)1;
  size_t size = 1;
  CHECK_STATUS(cube__cache_disk_load(k, "so", &data, &size), CUBE_STATUS_NOT_FOUND, "corrupt",
               path, why);
  CHECK(data == NULL && size == 0);
  CHECK_EQ_U64(corrupt_count(), 1);
  CHECK(!file_exists(path));
  /* Then a plain miss, not counted again; a new store works. */
  CHECK_STATUS(cube__cache_disk_load(k, "so", &data, &size), CUBE_STATUS_NOT_FOUND, "no entry");
  CHECK_EQ_U64(corrupt_count(), 1);
  CHECK_OK(cube__cache_disk_store(k, "so", payload, n));
  CHECK_OK(cube__cache_disk_load(k, "so", &data, &size));
  CHECK(size == n && memcmp(data, payload, n) == 0);
  free(data);
  done_with_cache();
}

static void patch(const char* path, off_t at, const void* bytes, size_t n) {
  int fd = open(path, O_WRONLY);
  if (fd < 0) return;
  if (pwrite(fd, bytes, n, at) != (ssize_t)n) perror("pwrite");
  close(fd);
}

static void damage_truncate(const char* path, size_t n) {
  if (truncate(path, (off_t)(HEADER_SIZE + n / 2)) != 0) perror("truncate");
}
static void damage_truncate_header(const char* path, size_t n) {
  (void)n;
  if (truncate(path, 10) != 0) perror("truncate");
}
static void damage_flip_byte(const char* path, size_t n) {
  int fd = open(path, O_RDWR);
  if (fd < 0) return;
  unsigned char b = 0;
  off_t at = (off_t)(HEADER_SIZE + n / 3);
  if (pread(fd, &b, 1, at) == 1) {
    b ^= 0x10;
    if (pwrite(fd, &b, 1, at) != 1) perror("pwrite");
  }
  close(fd);
}
static void damage_magic(const char* path, size_t n) {
  (void)n;
  patch(path, 0, "NOTACUBE", 8);
}
static void damage_version(const char* path, size_t n) {
  (void)n;
  const unsigned char v3[4] = {3, 0, 0, 0};
  patch(path, 8, v3, 4);
}
static void damage_length(const char* path, size_t n) {
  uint64_t len = n - 1; /* little-endian on disk */
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = (unsigned char)(len >> (8 * i));
  patch(path, 16, le, 8);
}
static void damage_append(const char* path, size_t n) {
  (void)n;
  FILE* f = fopen(path, "ab");
  if (!f) return;
  fputs("trailing garbage", f);
  fclose(f);
}

CUBE_TEST(disk_corrupt_truncated_payload) { check_corruption("trunc", damage_truncate, "length"); }
CUBE_TEST(disk_corrupt_truncated_header) { check_corruption("trunc_hdr", damage_truncate_header, "short file"); }
CUBE_TEST(disk_corrupt_flipped_byte) { check_corruption("flip", damage_flip_byte, "checksum"); }
CUBE_TEST(disk_corrupt_bad_magic) { check_corruption("magic", damage_magic, "magic"); }
CUBE_TEST(disk_corrupt_bad_version) { check_corruption("version", damage_version, "version 3"); }
CUBE_TEST(disk_corrupt_bad_length) { check_corruption("length", damage_length, "payload length 4095"); }
CUBE_TEST(disk_corrupt_trailing_bytes) { check_corruption("append", damage_append, "length"); }

CUBE_TEST(disk_discard_counts_and_deletes) {
  use_fresh_cache("discard");
  cube__cache_key_t k = key_of("discard", "me");
  CHECK_OK(cube__cache_disk_store(k, "so", "abc", 3));
  char path[2048];
  entry_path(k, "so", path, sizeof(path));
  REQUIRE(file_exists(path));
  cube__cache_disk_discard(k, "so");
  CHECK(!file_exists(path));
  CHECK_EQ_U64(corrupt_count(), 1);
  done_with_cache();
}

/* Entries another user could have planted (docs/reliability.md, "Files
 * others can touch"): each is refused with one line on stderr, loads as a
 * miss, and the next store replaces it with this user's private file. */

/* Runs |fn| with stderr going to a file; the text written, in |out|. */
static void capture_stderr(void (*fn)(void*), void* arg, char* out, size_t size) {
  char path[1100];
  snprintf(path, sizeof(path), "%s-stderr", g_dir);
  fflush(stderr);
  int saved = dup(2);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (saved < 0 || fd < 0) {
    out[0] = '\0';
    fn(arg);
    return;
  }
  dup2(fd, 2);
  close(fd);
  fn(arg);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  FILE* f = fopen(path, "r");
  size_t n = f ? fread(out, 1, size - 1, f) : 0;
  if (f) fclose(f);
  out[n] = '\0';
  unlink(path);
}

typedef struct {
  cube__cache_key_t key;
  cube_status_t status;
} load_call_t;

static void load_into_call(void* arg) {
  load_call_t* c = arg;
  void* data = (void*)1;
  size_t size = 7;
  c->status = cube__cache_disk_load(c->key, "so", &data, &size);
  if (!c->status) free(data);
}

/* |plant| turns the stored entry at |path| into something this process must
 * not trust; the load refuses it naming |why|, and a store rebuilds it. */
static void check_refused_entry(const char* name, void (*plant)(const char* path),
                                const char* why) {
  use_fresh_cache(name);
  cube__cache_key_t k = key_of("refused", name);
  CHECK_OK(cube__cache_disk_store(k, "so", "planted", 7));
  char path[2048];
  entry_path(k, "so", path, sizeof(path));
  plant(path);
  load_call_t call = {k, CUBE_OK};
  char err[4096];
  capture_stderr(load_into_call, &call, err, sizeof(err));
  CHECK_STATUS(call.status, CUBE_STATUS_NOT_FOUND, "refused", path, why);
  int lines = 0;
  for (const char* c = err; *c; ++c) lines += *c == '\n';
  CHECK_EQ_U64(lines, 1);
  CHECK(strstr(err, path) && strstr(err, why) && strstr(err, "rebuilt"));
  CHECK_EQ_U64(corrupt_count(), 0);
  /* Rebuilt: the store renames this user's entry over it. */
  CHECK_OK(cube__cache_disk_store(k, "so", "rebuilt", 7));
  void* data = NULL;
  size_t size = 0;
  CHECK_OK(cube__cache_disk_load(k, "so", &data, &size));
  CHECK(size == 7 && data && memcmp(data, "rebuilt", 7) == 0);
  free(data);
  struct stat st;
  REQUIRE(lstat(path, &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK_EQ_U64(st.st_uid, geteuid());
  CHECK_EQ_U64(st.st_mode & 0777, 0600);
  done_with_cache();
}

static void plant_link(const char* path) {
  /* A well-formed entry elsewhere, reached through a link. */
  char target[2100];
  snprintf(target, sizeof(target), "%s.elsewhere", path);
  if (rename(path, target) != 0 || symlink(target, path) != 0) perror("plant_link");
}
static void plant_other_owner(const char* path) {
  if (chown(path, 65534, 65534) != 0) perror("chown");
}
static void plant_world_writable(const char* path) {
  if (chmod(path, 0606) != 0) perror("chmod");
}
static void plant_group_writable(const char* path) {
  if (chmod(path, 0620) != 0) perror("chmod");
}

CUBE_TEST(disk_entry_through_a_link_is_refused) {
  check_refused_entry("link", plant_link, "symbolic link");
}
CUBE_TEST(disk_entry_of_another_user_is_refused) {
  if (geteuid() != 0) CUBE_SKIP("giving a file to another user needs root");
  check_refused_entry("owner", plant_other_owner, "belongs to uid 65534");
}
CUBE_TEST(disk_entry_writable_by_others_is_refused) {
  check_refused_entry("others", plant_world_writable, "writable by others (mode 0606)");
}
CUBE_TEST(disk_entry_writable_by_its_group_is_refused) {
  check_refused_entry("group", plant_group_writable, "writable by its group (mode 0620)");
}

CUBE_TEST(disk_off_disables) {
  use_fresh_cache("off");
  env_cache_dir("off");
  CHECK(strcmp(cube_kernel_cache_dir(), "") == 0);
  cube__cache_key_t k = key_of("off", "switch");
  CHECK_OK(cube__cache_disk_store(k, "so", "abc", 3));
  void* data = NULL;
  size_t size = 0;
  CHECK_STATUS(cube__cache_disk_load(k, "so", &data, &size), CUBE_STATUS_NOT_FOUND, "off");
  char path[256];
  CHECK_STATUS(cube__cache_entry_path(k, "so", path, sizeof(path)), CUBE_STATUS_UNAVAILABLE, "off");
  cube_kernel_cache_stats_t s = {0};
  CHECK_OK(cube_kernel_cache_stats(&s));
  CHECK_EQ_U64(s.disk_entries, 0);
  CHECK_EQ_U64(s.disk_bytes, 0);
  CHECK_OK(cube_kernel_cache_clear());
  /* Nothing was written anywhere: the case directory was never made. */
  CHECK(!file_exists(g_dir));
  env_cache_dir(g_dir);
  CHECK_STATUS(cube__cache_disk_load(k, "so", &data, &size), CUBE_STATUS_NOT_FOUND, "no entry");
  done_with_cache();
}

CUBE_TEST(dir_default_resolution) {
  char* saved_home = getenv("HOME") ? strdup(getenv("HOME")) : NULL;
  char* saved_xdg = getenv("XDG_CACHE_HOME") ? strdup(getenv("XDG_CACHE_HOME")) : NULL;
  char* saved_dir = getenv("CUBE_CACHE_DIR") ? strdup(getenv("CUBE_CACHE_DIR")) : NULL;
  env_cache_dir(NULL);
  setenv("XDG_CACHE_HOME", "/xdg/cache", 1);
  setenv("HOME", "/home/someone", 1);
  CHECK(strcmp(cube_kernel_cache_dir(), "/xdg/cache/cube") == 0);
  setenv("XDG_CACHE_HOME", "relative/ignored", 1); /* XDG: relative paths are invalid */
  CHECK(strcmp(cube_kernel_cache_dir(), "/home/someone/.cache/cube") == 0);
  unsetenv("XDG_CACHE_HOME");
  CHECK(strcmp(cube_kernel_cache_dir(), "/home/someone/.cache/cube") == 0);
  unsetenv("HOME");
  /* A copy: cube_shutdown (in env_cache_dir) frees the interned string. */
  char tmp[4096];
  snprintf(tmp, sizeof(tmp), "%s", cube_kernel_cache_dir());
  printf("fallback: %s\n", tmp);
  CHECK(strncmp(tmp, "/tmp/", 5) == 0);
  env_cache_dir(""); /* empty = unset */
  CHECK(strcmp(cube_kernel_cache_dir(), tmp) == 0);
  env_cache_dir("/explicit/dir");
  CHECK(strcmp(cube_kernel_cache_dir(), "/explicit/dir") == 0);
  /* The same string for the same directory. */
  CHECK(cube_kernel_cache_dir() == cube_kernel_cache_dir());
  if (saved_home) setenv("HOME", saved_home, 1);
  if (saved_xdg) setenv("XDG_CACHE_HOME", saved_xdg, 1);
  if (saved_dir)
    env_cache_dir(saved_dir);
  else
    env_cache_dir(NULL);
  free(saved_home);
  free(saved_xdg);
  free(saved_dir);
}

CUBE_TEST(stats_count_entries_and_bytes) {
  use_fresh_cache("stats");
  cube_kernel_cache_stats_t s = {0};
  CHECK_OK(cube_kernel_cache_stats(&s));
  CHECK_EQ_U64(s.disk_entries, 0);
  CHECK_EQ_U64(s.disk_bytes, 0);
  CHECK_OK(cube__cache_disk_store(key_of("s", "1"), "so", "a", 1));
  CHECK_OK(cube__cache_disk_store(key_of("s", "2"), "so", "bbbbbbbbbb", 10));
  CHECK_OK(cube__cache_disk_store(key_of("s", "3"), "cubin", "cc", 2));
  /* Files that are not entries are not counted (nor deleted by clear). */
  char other[1200];
  snprintf(other, sizeof(other), "%s/v2/README", g_dir);
  FILE* f = fopen(other, "w");
  REQUIRE(f);
  fputs("not an entry", f);
  fclose(f);
  CHECK_OK(cube_kernel_cache_stats(&s));
  CHECK_EQ_U64(s.disk_entries, 3);
  CHECK_EQ_U64(s.disk_bytes, 13 + 3 * HEADER_SIZE);

  cube__cache_count_memory_hit();
  cube__cache_count_memory_hit();
  cube__cache_count_disk_hit("k", 0, 1000);
  cube__cache_count_miss(5000, false);
  cube__cache_count_miss(7000, true);
  CHECK_OK(cube_kernel_cache_stats(&s));
  CHECK_EQ_U64(s.memory_hits, 2);
  CHECK_EQ_U64(s.disk_hits, 1);
  CHECK_EQ_U64(s.load_ns, 1000);
  CHECK_EQ_U64(s.misses, 2);
  CHECK_EQ_U64(s.compile_failures, 1);
  CHECK_EQ_U64(s.compile_ns, 12000);
  CHECK_EQ_U64(s.corrupt_entries, 0);
  CHECK_STATUS(cube_kernel_cache_stats(NULL), CUBE_STATUS_INVALID_ARGUMENT, "NULL");
  unlink(other);
  done_with_cache();
}

static int g_destroyed;
static void count_destroy(void* p) {
  (void)p;
  g_destroyed++;
}

CUBE_TEST(clear_removes_entries_and_resets_counters) {
  use_fresh_cache("clear");
  for (int i = 0; i < 5; ++i) {
    char id[8];
    snprintf(id, sizeof(id), "%d", i);
    CHECK_OK(cube__cache_disk_store(key_of("clear", id), "so", "payload", 7));
  }
  /* A temporary file left by a crashed store goes too. */
  char hex[33], tmp[1200];
  cube__cache_key_hex(key_of("clear", "tmp"), hex);
  snprintf(tmp, sizeof(tmp), "%s/v2/.%s.so.AbCdEf", g_dir, hex);
  FILE* f = fopen(tmp, "w");
  REQUIRE(f);
  fclose(f);
  cube__cache_count_miss(100, true);
  cube__cache_count_memory_hit();
  static int artifact = 1;
  g_destroyed = 0;
  CHECK(cube__cache_memory_put(key_of("clear", "mem"), &artifact, count_destroy) == &artifact);

  cube_kernel_cache_stats_t s = {0};
  CHECK_OK(cube_kernel_cache_stats(&s));
  CHECK_EQ_U64(s.disk_entries, 5);
  CHECK_OK(cube_kernel_cache_clear());
  CHECK_OK(cube_kernel_cache_stats(&s));
  CHECK_EQ_U64(s.disk_entries, 0);
  CHECK_EQ_U64(s.disk_bytes, 0);
  CHECK_EQ_U64(s.misses, 0);
  CHECK_EQ_U64(s.compile_failures, 0);
  CHECK_EQ_U64(s.memory_hits, 0);
  CHECK_EQ_U64(s.compile_ns, 0);
  CHECK(!file_exists(tmp));
  void* data = NULL;
  size_t size = 0;
  CHECK_STATUS(cube__cache_disk_load(key_of("clear", "0"), "so", &data, &size),
               CUBE_STATUS_NOT_FOUND, "no entry");
  /* Loaded artifacts stay. */
  CHECK(cube__cache_memory_get(key_of("clear", "mem")) == &artifact);
  CHECK_EQ_U64(g_destroyed, 0);
  /* Clearing an absent directory is fine. */
  rm_tree(g_dir);
  CHECK_OK(cube_kernel_cache_clear());
  done_with_cache();
  CHECK_EQ_U64(g_destroyed, 1);
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

CUBE_TEST(memory_put_keeps_first) {
  use_fresh_cache("memory_first");
  static int a = 1, b = 2;
  g_destroyed = 0;
  cube__cache_key_t k = key_of("memory", "first");
  CHECK(cube__cache_memory_get(k) == NULL);
  CHECK(cube__cache_memory_put(k, &a, count_destroy) == &a);
  CHECK(cube__cache_memory_put(k, &b, count_destroy) == &a);
  CHECK_EQ_U64(g_destroyed, 1); /* the loser */
  CHECK(cube__cache_memory_get(k) == &a);
  CHECK(cube__cache_memory_get(key_of("memory", "other")) == NULL);
  cube__cache_shutdown();
  CHECK_EQ_U64(g_destroyed, 2);
  CHECK(cube__cache_memory_get(k) == NULL);
  /* Usable after shutdown. */
  CHECK(cube__cache_memory_put(k, &b, count_destroy) == &b);
  CHECK(cube__cache_memory_get(k) == &b);
  done_with_cache();
  CHECK_EQ_U64(g_destroyed, 3);
}

#define RACE_THREADS 8
#define RACE_KEYS 2000

static atomic_int g_race_destroyed;
static void race_destroy(void* p) {
  free(p);
  atomic_fetch_add(&g_race_destroyed, 1);
}

typedef struct {
  int id;
  int mismatches;
} race_arg_t;

static void* race_thread(void* p) {
  race_arg_t* a = p;
  for (int i = 0; i < RACE_KEYS; ++i) {
    char id[16];
    snprintf(id, sizeof(id), "%d", i);
    cube__cache_key_t k = key_of("race", id);
    int* mine = malloc(sizeof(int));
    *mine = a->id;
    int* got = cube__cache_memory_put(k, mine, race_destroy);
    if (got != cube__cache_memory_get(k)) a->mismatches++;
  }
  return NULL;
}

CUBE_TEST(memory_map_concurrent_puts) {
  use_fresh_cache("memory_race");
  atomic_store(&g_race_destroyed, 0);
  pthread_t t[RACE_THREADS];
  race_arg_t args[RACE_THREADS];
  for (int i = 0; i < RACE_THREADS; ++i) {
    args[i].id = i;
    args[i].mismatches = 0;
    REQUIRE(pthread_create(&t[i], NULL, race_thread, &args[i]) == 0);
  }
  for (int i = 0; i < RACE_THREADS; ++i) pthread_join(t[i], NULL);
  for (int i = 0; i < RACE_THREADS; ++i) CHECK_EQ_U64(args[i].mismatches, 0);
  /* One winner per key; every loser destroyed. */
  CHECK_EQ_U64(atomic_load(&g_race_destroyed), (RACE_THREADS - 1) * RACE_KEYS);
  for (int i = 0; i < RACE_KEYS; ++i) {
    char id[16];
    snprintf(id, sizeof(id), "%d", i);
    CHECK(cube__cache_memory_get(key_of("race", id)) != NULL);
  }
  done_with_cache();
  CHECK_EQ_U64(atomic_load(&g_race_destroyed), RACE_THREADS * RACE_KEYS);
}

//===----------------------------------------------------------------------===//
// An unusable directory: cube_kernel_cache_dir_status and the one log line
//===----------------------------------------------------------------------===//

static void make_file(const char* path) {
  FILE* f = fopen(path, "w");
  if (f) {
    fputs("a file, not a directory", f);
    fclose(f);
  }
}

CUBE_TEST(dir_status_names_directory_and_reason) {
  use_fresh_cache("dir_status");
  /* Absent under a writable directory: usable (made on the first store), and
   * asking creates nothing. */
  CHECK_OK(cube_kernel_cache_dir_status());
  CHECK(!file_exists(g_dir));
  REQUIRE(mkdir(g_dir, 0700) == 0);
  CHECK_OK(cube_kernel_cache_dir_status());
  char file[1100], below[1200];
  snprintf(file, sizeof(file), "%s/plain-file", g_dir);
  make_file(file);
  /* A file where the directory should be. */
  env_cache_dir(file);
  CHECK_STATUS(cube_kernel_cache_dir_status(), CUBE_STATUS_UNAVAILABLE, "cube kernel cache",
               file, "is not a directory", "kept in memory only");
  /* A directory that cannot be created: a file is in its way. */
  snprintf(below, sizeof(below), "%s/a/b", file);
  env_cache_dir(below);
  CHECK_STATUS(cube_kernel_cache_dir_status(), CUBE_STATUS_UNAVAILABLE, below, file,
               "is not a directory");
  /* The stores agree: they fail there, and the compile path goes on. */
  CHECK_STATUS(cube__cache_disk_store(key_of("status", "x"), "so", "abc", 3),
               CUBE_STATUS_UNAVAILABLE, "cannot create directory", file);
  /* Off: nothing to use, nothing wrong. */
  env_cache_dir("off");
  CHECK_OK(cube_kernel_cache_dir_status());
  env_cache_dir(g_dir);
  CHECK_OK(cube_kernel_cache_dir_status());
  unlink(file);
  done_with_cache();
}

CUBE_TEST(dir_status_read_only_directory) {
  if (geteuid() == 0) CUBE_SKIP("root writes into read-only directories");
  use_fresh_cache("dir_read_only");
  REQUIRE(mkdir(g_dir, 0500) == 0);
  CHECK_STATUS(cube_kernel_cache_dir_status(), CUBE_STATUS_UNAVAILABLE, g_dir, "not writable");
  CHECK_STATUS(cube__cache_disk_store(key_of("ro", "x"), "so", "abc", 3), CUBE_STATUS_UNAVAILABLE,
               g_dir);
  /* Writable again: a store succeeds, and the failure recorded is gone. */
  chmod(g_dir, 0700);
  CHECK_OK(cube__cache_disk_store(key_of("ro", "x"), "so", "abc", 3));
  CHECK_OK(cube_kernel_cache_dir_status());
  done_with_cache();
}

/* Kernels of the child below: one compile per VALUE. */
static const char* fill_source =
    "CUBE_KERNEL(fill, CUBE_ARRAY(float, out)) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(out)) CUBE_STORE(out, i, (float)VALUE + 0.5f * (float)i);\n"
    "}\n";

/* The child: compiles and runs |count| kernels on the CPU; 0 when each
 * wrote what it should and the directory status says why it is unusable. */
static int compile_and_run_kernels(int count) {
  cube_client_t* c = NULL;
  cube_status_t st = cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &c);
  if (st) return 10;
  enum { N = 1000 };
  int bad = 0;
  for (int v = 0; v < count; ++v) {
    char value[16];
    snprintf(value, sizeof(value), "%d", 3 * v + 1);
    cube_define_t def = {"VALUE", value};
    cube_kernel_desc_t d = {.cube_dim = {64, 1, 1}, .source = fill_source, .entry = "fill",
                            .defines = &def, .define_count = 1};
    cube_kernel_t* k = NULL;
    cube_handle_t h = CUBE_HANDLE_NULL;
    cube_bytes_t* out = NULL;
    st = cube_kernel_create(&d, &k);
    if (!st) st = cube_client_empty(c, N * sizeof(float), &h);
    cube_arg_t arg = cube_arg_buffer(h);
    if (!st) st = cube_client_launch(c, k, cube_count_static((N + 63) / 64, 1, 1), 1, &arg);
    if (!st) st = cube_client_read_one(c, h, &out);
    if (st) {
      printf("kernel %d: %s\n", v, cube_status_message(st));
      cube_status_free(st);
      bad++;
    } else {
      const float* f = cube_bytes_const_data(out);
      for (int i = 0; i < N; ++i) bad += f[i] != (float)(3 * v + 1) + 0.5f * (float)i;
    }
    cube_bytes_release(out);
    cube_handle_release(h);
    cube_kernel_release(k);
  }
  cube_kernel_cache_stats_t s = {0};
  if (cube_status_consume(cube_kernel_cache_stats(&s)) || s.misses != (uint64_t)count) bad++;
  st = cube_kernel_cache_dir_status();
  if (cube_status_code(st) != CUBE_STATUS_UNAVAILABLE) bad++;
  cube_status_free(st);
  cube_client_release(c);
  cube_shutdown();
  return bad ? 20 : 0;
}


/* Runs the fill kernel with VALUE |value| on the CPU; mismatches (or 1000 on
 * an error). */
static int run_fill(int value) {
  cube_client_t* c = NULL;
  if (cube_status_consume(cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &c)))
    return 1000;
  enum { N = 1000 };
  char text[16];
  snprintf(text, sizeof(text), "%d", value);
  cube_define_t def = {"VALUE", text};
  cube_kernel_desc_t d = {.cube_dim = {64, 1, 1}, .source = fill_source, .entry = "fill",
                          .defines = &def, .define_count = 1};
  cube_kernel_t* k = NULL;
  cube_handle_t h = CUBE_HANDLE_NULL;
  cube_bytes_t* out = NULL;
  cube_status_t st = cube_kernel_create(&d, &k);
  if (!st) st = cube_client_empty(c, N * sizeof(float), &h);
  cube_arg_t arg = cube_arg_buffer(h);
  if (!st) st = cube_client_launch(c, k, cube_count_static((N + 63) / 64, 1, 1), 1, &arg);
  if (!st) st = cube_client_read_one(c, h, &out);
  int bad = 0;
  if (st) {
    fprintf(stderr, "fill %d: %s\n", value, cube_status_message(st));
    cube_status_free(st);
    bad = 1000;
  } else {
    const float* f = cube_bytes_const_data(out);
    for (int i = 0; i < N; ++i) bad += f[i] != (float)value + 0.5f * (float)i;
  }
  cube_bytes_release(out);
  cube_handle_release(h);
  cube_kernel_release(k);
  cube_client_release(c);
  return bad;
}

/* The one "*.so" entry of <dir>/v1 that is not |except|, in |out|. */
static bool find_so_entry(const char* except, char* out, size_t size) {
  char v1[1100];
  snprintf(v1, sizeof(v1), "%s/" CUBE__KC_SUBDIR, g_dir);
  DIR* d = opendir(v1);
  if (!d) return false;
  bool found = false;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    size_t n = strlen(e->d_name);
    if (e->d_name[0] == '.' || n < 4 || strcmp(e->d_name + n - 3, ".so") != 0) continue;
    snprintf(out, size, "%s/%s", v1, e->d_name);
    if (except && strcmp(out, except) == 0) continue;
    found = true;
    break;
  }
  closedir(d);
  return found;
}

/* A well-formed entry of another kernel copied over a kernel's own entry,
 * left writable by others: the kernel is compiled again, not loaded from
 * it (the entry would run VALUE 1 where VALUE 2 was asked). */
CUBE_TEST(planted_kernel_entry_is_not_run) {
  use_fresh_cache("planted_kernel");
  const char* cc = NULL;
  cube_status_t cst = cube__cpu_compiler(&cc, NULL);
  if (cst) {
    cube_status_free(cst);
    CUBE_SKIP("no C compiler");
  }
  CHECK_EQ_U64(run_fill(1), 0);
  char one[2048], two[2048];
  REQUIRE(find_so_entry(NULL, one, sizeof(one)));
  cube_shutdown();
  CHECK_EQ_U64(run_fill(2), 0);
  REQUIRE(find_so_entry(one, two, sizeof(two)));
  cube_shutdown();
  /* Plant: the bytes of VALUE 1's entry at VALUE 2's path, mode 0666. */
  FILE* in = fopen(one, "rb");
  REQUIRE(in);
  static char bytes[1 << 22];
  size_t n = fread(bytes, 1, sizeof(bytes), in);
  fclose(in);
  REQUIRE(n > 28 && n < sizeof(bytes));
  REQUIRE(unlink(two) == 0);
  int fd = open(two, O_WRONLY | O_CREAT | O_EXCL, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, bytes, n) == (ssize_t)n);
  REQUIRE(fchmod(fd, 0666) == 0);
  close(fd);
  cube_kernel_cache_stats_t before = {0}, after = {0};
  CHECK_OK(cube_kernel_cache_stats(&before));
  CHECK_EQ_U64(run_fill(2), 0);
  CHECK_OK(cube_kernel_cache_stats(&after));
  CHECK_EQ_U64(after.disk_hits - before.disk_hits, 0);
  CHECK_EQ_U64(after.misses - before.misses, 1);
  struct stat st;
  REQUIRE(stat(two, &st) == 0);
  CHECK_EQ_U64(st.st_mode & 0777, 0600); /* rebuilt */
  cube_shutdown();
  done_with_cache();
}

CUBE_TEST(unusable_dir_reported_once_over_compiles) {
  use_fresh_cache("report_once");
  const char* cc = NULL;
  cube_status_t cst = cube__cpu_compiler(&cc, NULL);
  if (cst) {
    cube_status_free(cst);
    CUBE_SKIP("no C compiler");
  }
  REQUIRE(mkdir(g_dir, 0700) == 0);
  char file[1100], dir[1200], err_path[1100];
  snprintf(file, sizeof(file), "%s/in-the-way", g_dir);
  make_file(file);
  snprintf(dir, sizeof(dir), "%s/cache", file);
  snprintf(err_path, sizeof(err_path), "%s/stderr", g_dir);
  env_cache_dir(dir);
  fflush(NULL);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) _exit(30);
    dup2(fd, 2);
    close(fd);
    int rc = compile_and_run_kernels(4);
    fflush(NULL);
    _exit(rc);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  FILE* f = fopen(err_path, "r");
  REQUIRE(f);
  char text[8192];
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  text[n] = '\0';
  int lines = 0;
  for (size_t i = 0; i < n; ++i) lines += text[i] == '\n';
  if (lines != 1) fprintf(stderr, "child stderr:\n%s\n", text);
  CHECK_EQ_U64(lines, 1);
  CHECK(strstr(text, "cube: kernel cache directory") != NULL);
  CHECK(strstr(text, dir) != NULL);
  CHECK(strstr(text, "is not a directory") != NULL);
  CHECK(strstr(text, "kept in memory only") != NULL);
  unlink(file);
  unlink(err_path);
  env_cache_dir(g_dir);
  done_with_cache();
}

//===----------------------------------------------------------------------===//
// The directory as users manage it: list, eviction, prune, trusted files
//===----------------------------------------------------------------------===//

/* Sets the modification time (the last use) of |key|'s entry to |secs| ago. */
static void age_entry(cube__cache_key_t key, const char* kind, long secs) {
  char path[2048];
  entry_path(key, kind, path, sizeof(path));
  struct timespec ts[2];
  clock_gettime(CLOCK_REALTIME, &ts[0]);
  ts[0].tv_sec -= secs;
  ts[1] = ts[0];
  if (utimensat(AT_FDCWD, path, ts, 0) != 0) perror("utimensat");
}

static const cube__cache_meta_t k_meta_a = {"alpha", "cpu", "cpu | test machine | cc: none"};
static const cube__cache_meta_t k_meta_b = {"beta", "opencl", "opencl | test platform"};

CUBE_TEST(list_names_kernel_backend_size_and_last_use) {
  use_fresh_cache("list");
  cube_kernel_cache_entry_t* e = (void*)1;
  size_t n = 7;
  CHECK_OK(cube_kernel_cache_list(&e, &n));
  CHECK(e == NULL && n == 0);
  CHECK_OK(cube__cache_disk_store_meta(key_of("list", "a"), "so", &k_meta_a, "aaaa", 4));
  CHECK_OK(cube__cache_disk_store_meta(key_of("list", "b"), "clbin", &k_meta_b, "bbbbbbbbbb", 10));
  CHECK_OK(cube__cache_disk_store(key_of("list", "c"), "tune", "c", 1));
  age_entry(key_of("list", "a"), "so", 300);
  age_entry(key_of("list", "b"), "clbin", 200);
  age_entry(key_of("list", "c"), "tune", 100);
  CHECK_OK(cube_kernel_cache_list(&e, &n));
  REQUIRE(n == 3);
  /* Most recently used first: c (100 s ago), b, a. */
  CHECK(strcmp(e[0].kind, "tune") == 0 && e[0].name[0] == '\0' && e[0].readable);
  CHECK(strcmp(e[1].name, "beta") == 0 && strcmp(e[1].backend, "opencl") == 0);
  CHECK(strcmp(e[1].device, "opencl | test platform") == 0 && strcmp(e[1].kind, "clbin") == 0);
  CHECK(strcmp(e[1].version, CUBE_VERSION_STRING) == 0);
  CHECK(strcmp(e[2].name, "alpha") == 0 && strcmp(e[2].backend, "cpu") == 0);
  char hex[33];
  cube__cache_key_hex(key_of("list", "a"), hex);
  CHECK(strncmp(e[2].file, hex, 32) == 0 && strcmp(e[2].file + 32, ".so") == 0);
  size_t meta_a = strlen("cube=" CUBE_VERSION_STRING "\nbackend=cpu\ndevice=cpu | test machine | cc: none\nname=alpha\n");
  CHECK_EQ_U64(e[2].size, HEADER_SIZE + meta_a + 4);
  time_t now = time(NULL);
  CHECK(e[2].last_use <= now - 299 && e[2].last_use >= now - 302);
  cube_kernel_cache_list_free(e);
  /* A load marks an entry used: a is now the most recent. */
  void* data = NULL;
  size_t size = 0;
  CHECK_OK(cube__cache_disk_load(key_of("list", "a"), "so", &data, &size));
  CHECK(size == 4 && memcmp(data, "aaaa", 4) == 0);
  free(data);
  CHECK_OK(cube_kernel_cache_list(&e, &n));
  REQUIRE(n == 3);
  CHECK(strcmp(e[0].name, "alpha") == 0);
  CHECK(e[0].last_use >= now - 2);
  cube_kernel_cache_list_free(e);
  /* A damaged header is listed as unreadable, with the reason. */
  char path[2048];
  entry_path(key_of("list", "b"), "clbin", path, sizeof(path));
  patch(path, 0, "NOTACUBE", 8);
  CHECK_OK(cube_kernel_cache_list(&e, &n));
  REQUIRE(n == 3);
  int unreadable = 0;
  for (size_t i = 0; i < n; ++i)
    if (!e[i].readable) unreadable += strstr(e[i].why, "magic") != NULL;
  CHECK_EQ_U64(unreadable, 1);
  cube_kernel_cache_list_free(e);
  CHECK_STATUS(cube_kernel_cache_list(NULL, &n), CUBE_STATUS_INVALID_ARGUMENT, "out_entries");
  done_with_cache();
}

CUBE_TEST(cache_max_evicts_least_recently_used) {
  use_fresh_cache("evict");
  enum { N = 1000 };
  char* payload = malloc(N);
  REQUIRE(payload);
  memset(payload, 'x', N);
  const char* ids[] = {"0", "1", "2", "3"};
  for (int i = 0; i < 3; ++i) {
    CHECK_OK(cube__cache_disk_store(key_of("evict", ids[i]), "so", payload, N));
    age_entry(key_of("evict", ids[i]), "so", 1000 - 100 * i); /* 0 oldest, 2 newest */
  }
  /* 0 is the oldest stored but used last: 1 is now the least recently used. */
  void* data = NULL;
  size_t size = 0;
  CHECK_OK(cube__cache_disk_load(key_of("evict", "0"), "so", &data, &size));
  free(data);
  /* Room for three entries (each N + HEADER_SIZE bytes): the fourth store
   * evicts exactly the least recently used one. */
  REQUIRE_OK(cube_option_set("CUBE_CACHE_MAX", "3100"));
  CHECK_OK(cube__cache_disk_store(key_of("evict", ids[3]), "so", payload, N));
  char path[2048];
  entry_path(key_of("evict", "1"), "so", path, sizeof(path));
  CHECK(!file_exists(path));
  for (int i = 0; i < 4; ++i) {
    if (i == 1) continue;
    entry_path(key_of("evict", ids[i]), "so", path, sizeof(path));
    if (!file_exists(path)) fprintf(stderr, "entry %d was evicted\n", i);
    CHECK(file_exists(path));
  }
  cube_kernel_cache_stats_t s = {0};
  CHECK_OK(cube_kernel_cache_stats(&s));
  CHECK_EQ_U64(s.disk_entries, 3);
  CHECK(s.disk_bytes <= 3100);
  /* A limit below one entry keeps the entry just stored, alone. */
  REQUIRE_OK(cube_option_set("CUBE_CACHE_MAX", "10"));
  CHECK_OK(cube__cache_disk_store(key_of("evict", "big"), "so", payload, N));
  CHECK_OK(cube_kernel_cache_stats(&s));
  CHECK_EQ_U64(s.disk_entries, 1);
  CHECK_OK(cube__cache_disk_load(key_of("evict", "big"), "so", &data, &size));
  CHECK_EQ_U64(size, N);
  free(data);
  REQUIRE_OK(cube_option_set("CUBE_CACHE_MAX", NULL));
  free(payload);
  done_with_cache();
}

CUBE_TEST(prune_removes_what_cannot_be_used) {
  use_fresh_cache("prune");
  cube__kc_dir_t d;
  REQUIRE_OK(cube__kc_dir_resolve(&d));
  /* Kept: two entries of this version. */
  CHECK_OK(cube__cache_disk_store_meta(key_of("prune", "a"), "so", &k_meta_a, "aaaa", 4));
  CHECK_OK(cube__cache_disk_store_meta(key_of("prune", "b"), "so", &k_meta_b, "bbbb", 4));
  age_entry(key_of("prune", "a"), "so", 500);
  /* Another version's entry, a corrupt one, an old and a fresh temporary file. */
  const char other[] = "cube=0.0.1\nbackend=cpu\nname=old\n";
  CHECK_OK(cube__kc_store_raw(&d, key_of("prune", "old"), "so", other, strlen(other), "o", 1));
  CHECK_OK(cube__cache_disk_store_meta(key_of("prune", "bad"), "so", &k_meta_a, "xxxxxxxx", 8));
  char path[2048];
  entry_path(key_of("prune", "bad"), "so", path, sizeof(path));
  size_t size_bad = 0;
  {
    struct stat st;
    REQUIRE(stat(path, &st) == 0);
    size_bad = (size_t)st.st_size;
    patch(path, st.st_size - 1, "!", 1);
  }
  char hex[33], tmp_old[1200], tmp_new[1200];
  cube__cache_key_hex(key_of("prune", "tmp"), hex);
  snprintf(tmp_old, sizeof(tmp_old), "%s/v2/.%s.so.AbCdEf", g_dir, hex);
  snprintf(tmp_new, sizeof(tmp_new), "%s/v2/.%s.so.GhIjKl", g_dir, hex);
  make_file(tmp_old);
  make_file(tmp_new);
  struct timespec ts[2];
  clock_gettime(CLOCK_REALTIME, &ts[0]);
  ts[0].tv_sec -= 7200;
  ts[1] = ts[0];
  REQUIRE(utimensat(AT_FDCWD, tmp_old, ts, 0) == 0);

  cube_kernel_cache_prune_report_t r = {0};
  CHECK_OK(cube_kernel_cache_prune(0, &r));
  CHECK_EQ_U64(r.corrupt, 1);
  CHECK_EQ_U64(r.other_version, 1);
  CHECK_EQ_U64(r.temporary, 1);
  CHECK_EQ_U64(r.evicted, 0);
  CHECK_EQ_U64(r.kept, 2);
  CHECK(!file_exists(path) && !file_exists(tmp_old) && file_exists(tmp_new));
  CHECK(r.removed_bytes >= size_bad);
  /* Then down to one entry's bytes: the least recently used (a) goes. */
  uint64_t one = r.kept_bytes / 2;
  CHECK_OK(cube_kernel_cache_prune(one, &r));
  CHECK_EQ_U64(r.evicted, 1);
  CHECK_EQ_U64(r.kept, 1);
  entry_path(key_of("prune", "a"), "so", path, sizeof(path));
  CHECK(!file_exists(path));
  entry_path(key_of("prune", "b"), "so", path, sizeof(path));
  CHECK(file_exists(path));
  unlink(tmp_new);
  done_with_cache();
}

CUBE_TEST(load_reads_only_trusted_files) {
  use_fresh_cache("trusted");
  CHECK_OK(cube__cache_disk_store(key_of("trust", "a"), "so", "aaaa", 4));
  char path[2048];
  entry_path(key_of("trust", "a"), "so", path, sizeof(path));
  void* data = NULL;
  size_t size = 0;
  /* Writable by others or the group: not read, not deleted, not corrupt. */
  REQUIRE(chmod(path, 0602) == 0);
  CHECK_STATUS(cube__cache_disk_load(key_of("trust", "a"), "so", &data, &size),
               CUBE_STATUS_NOT_FOUND, "writable by others");
  REQUIRE(chmod(path, 0620) == 0);
  CHECK_STATUS(cube__cache_disk_load(key_of("trust", "a"), "so", &data, &size),
               CUBE_STATUS_NOT_FOUND, "writable by its group");
  CHECK(file_exists(path));
  CHECK_EQ_U64(corrupt_count(), 0);
  REQUIRE(chmod(path, 0600) == 0);
  /* Another user's file (only root can make one here). */
  if (geteuid() == 0) {
    REQUIRE(chown(path, 12345, 12345) == 0);
    CHECK_STATUS(cube__cache_disk_load(key_of("trust", "a"), "so", &data, &size),
                 CUBE_STATUS_NOT_FOUND, "belongs to uid 12345");
    REQUIRE(chown(path, 0, 0) == 0);
  }
  /* A symbolic link is never followed. */
  char target[1200];
  snprintf(target, sizeof(target), "%s/elsewhere", g_dir);
  REQUIRE(rename(path, target) == 0);
  REQUIRE(symlink(target, path) == 0);
  CHECK_STATUS(cube__cache_disk_load(key_of("trust", "a"), "so", &data, &size),
               CUBE_STATUS_NOT_FOUND, "symbolic link", "not followed");
  unlink(path);
  REQUIRE(rename(target, path) == 0);
  CHECK_OK(cube__cache_disk_load(key_of("trust", "a"), "so", &data, &size));
  CHECK(size == 4);
  free(data);
  done_with_cache();
}
