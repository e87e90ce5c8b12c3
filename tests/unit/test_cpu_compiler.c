// cube-test-libs: cube_static
/* Run-time compilation for the CPU backend: compile and run, memory and disk
 * hits (also from a new process), compiler errors with the #line file name,
 * concurrent compiles (threads and processes), damaged disk entries rebuilt,
 * a missing compiler. Every case uses its own cache directory. */
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backends/cpu/cpu_compiler.h"
#include "check.h"
#include "cube/cache.h"
#include "cube/kernel.h"
#include "cube/options.h"
#include "kernel/cache.h"
#include "platform/platform.h"

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

/* The role of a re-executed copy of this program (see compile_disk_hit_in_new_process). */
static const char* child_role(void) { return getenv("CUBE_TEST_CC_ROLE"); }

/* The compiler (NULL: the default), through the option table: the
 * environment is read once per cube_shutdown, so a case that changes the
 * compiler half-way sets the option. */
static void use_cc(const char* cc) { CHECK_OK(cube_option_set("CUBE_CC", cc)); }

/* CUBE_CACHE_DIR in the environment, read again by cube_shutdown (which
 * also drops the memory map, as cube__cache_shutdown does). */
static void env_cache_dir(const char* dir) {
  setenv("CUBE_CACHE_DIR", dir, 1);
  cube_shutdown();
}

static void use_fresh_cache(const char* name) {
  unsetenv("CUBE_CC");
  if (child_role()) { /* keep the parent's directory */
    const char* d = getenv("CUBE_CACHE_DIR");
    snprintf(g_dir, sizeof(g_dir), "%s", d ? d : "");
  } else {
    const char* base = getenv("CUBE_TEST_TMPDIR");
    if (!base || !*base) base = "/tmp";
    snprintf(g_dir, sizeof(g_dir), "%s/cccache-%s-%ld", base, name, (long)getpid());
    rm_tree(g_dir);
    setenv("CUBE_CACHE_DIR", g_dir, 1);
  }
  cube_shutdown(); /* the table reads the environment above */
  /* Counters to 0 (the directory is new). Not in a child: clear would delete
   * the parent's entries, and a new process starts at 0 anyway. */
  if (!child_role()) cube_status_free(cube_kernel_cache_clear());
}

static void done_with_cache(void) {
  cube__cache_shutdown();
  rm_tree(g_dir);
}

static cube_kernel_cache_stats_t stats(void) {
  cube_kernel_cache_stats_t s = {0};
  memset(&s, 0, sizeof(s));
  cube_status_t st = cube_kernel_cache_stats(&s);
  if (st) {
    fprintf(stderr, "stats: %s\n", cube_status_message(st));
    cube_status_free(st);
  }
  return s;
}

/* A unit filling a float buffer with a*i + b (b a compile-time constant), in
 * the native kernel ABI; |tag| makes the text (so the key) unique. */
static char* fill_unit(const char* tag, float b) {
  static const char* fmt =
      "/* %s */\n"
      "typedef union { struct { void* data; unsigned long long len; } buffer;\n"
      "  unsigned u32; int i32; unsigned long long u64; long long i64; float f32; double f64; } arg_t;\n"
      "typedef struct { unsigned cube_pos[3]; unsigned cube_count[3]; unsigned cube_dim[3]; } cube_t;\n"
      "#line 1 \"%s.cube\"\n"
      "int cube_kernel_entry(const cube_t* cube, const arg_t* args, unsigned n) {\n"
      "  float* y = (float*)args[0].buffer.data;\n"
      "  unsigned long long len = args[0].buffer.len / sizeof(float);\n"
      "  float a = args[1].f32;\n"
      "  for (unsigned long long i = 0; i < len; ++i) y[i] = a * (float)i + %.1ff;\n"
      "  return n == 2 ? (int)cube->cube_pos[0] : 99;\n"
      "}\n";
  size_t size = strlen(fmt) + 3 * strlen(tag) + 64;
  char* text = malloc(size);
  if (text) snprintf(text, size, fmt, tag, tag, (double)b);
  return text;
}

static cube__cache_key_t key_for(const char* text) {
  const char* cc = NULL;
  const char* identity = "";
  cube_status_t st = cube__cpu_compiler(&cc, &identity);
  if (st) {
    cube_status_free(st);
    identity = "no compiler";
  }
  const char* parts[] = {"test_cpu_compiler", cube__cpu_machine_id(), identity, text, NULL};
  return cube__cache_key(parts);
}

/* Runs a fill kernel on 100 floats with a = 2 and checks y[i] = 2i + b. */
static int run_fill(cube_cpu_kernel_fn fn, float b) {
  float y[100];
  memset(y, 0, sizeof(y));
  cube_cpu_arg_t args[2];
  args[0].buffer.data = y;
  args[0].buffer.len = sizeof(y);
  args[1].f32 = 2.0f;
  cube_cpu_cube_t cube;
  memset(&cube, 0, sizeof(cube));
  cube.cube_pos[0] = 0;
  int rc = fn(&cube, args, 2);
  if (rc != 0) return 100 + rc;
  for (int i = 0; i < 100; ++i)
    if (y[i] != 2.0f * (float)i + b) return 1;
  cube.cube_pos[0] = 5; /* the return value reaches the caller */
  if (fn(&cube, args, 2) != 5) return 2;
  return 0;
}

static bool have_compiler(void) {
  const char* cc;
  const char* id;
  cube_status_t st = cube__cpu_compiler(&cc, &id);
  if (st) {
    fprintf(stderr, "%s\n", cube_status_message(st));
    cube_status_free(st);
    return false;
  }
  return true;
}

static char g_entry[2048];
static const char* entry_of(cube__cache_key_t key) {
  cube_status_t st = cube__cache_entry_path(key, "so", g_entry, sizeof(g_entry));
  cube_status_free(st);
  return g_entry;
}

static bool file_exists(const char* path) {
  struct stat st;
  return stat(path, &st) == 0;
}

//===----------------------------------------------------------------------===//
// The compiler
//===----------------------------------------------------------------------===//

CUBE_TEST(compiler_identity) {
  use_fresh_cache("identity");
  const char* cc = NULL;
  const char* id = NULL;
  cube_status_t st = cube__cpu_compiler(&cc, &id);
  if (st) {
    fprintf(stderr, "%s\n", cube_status_message(st));
    cube_status_free(st);
    CUBE_SKIP("no C compiler");
  }
  printf("compiler: %s\nidentity: %s\nmachine: %s\n", cc, id, cube__cpu_machine_id());
  CHECK(cc && access(cc, X_OK) == 0);
  CHECK(strncmp(id, cc, strlen(cc)) == 0);
  CHECK(strstr(id, " | ") != NULL);
  CHECK(strstr(id, "-O3 -march=native") != NULL);
  /* Identified by its resolved binary, without running it. */
  CHECK(strstr(id, "size=") != NULL && strstr(id, "mtime=") != NULL);
  /* clang when it is on PATH (it vectorises the unit loop). */
  if (system("command -v clang >/dev/null 2>&1") == 0) {
    const char* base = strrchr(cc, '/');
    CHECK(base && strcmp(base, "/clang") == 0);
  }
  /* Same strings the second time. */
  const char* cc2 = NULL;
  const char* id2 = NULL;
  CHECK_OK(cube__cpu_compiler(&cc2, &id2));
  CHECK(cc2 == cc && id2 == id);
  const char* m = cube__cpu_machine_id();
  CHECK(strstr(m, "avx2=") && strstr(m, "avx512f=") && strstr(m, "flags="));
  CHECK(m == cube__cpu_machine_id());
  done_with_cache();
}

CUBE_TEST(compiler_cube_cc_chooses) {
  use_fresh_cache("cube_cc");
  if (system("command -v gcc >/dev/null 2>&1") != 0) CUBE_SKIP("no gcc on PATH");
  use_cc("gcc");
  const char* cc = NULL;
  const char* id = NULL;
  REQUIRE_OK(cube__cpu_compiler(&cc, &id));
  const char* base = strrchr(cc, '/');
  CHECK(base && strcmp(base, "/gcc") == 0);
  char* text = fill_unit("with_gcc", 1.0f);
  cube_cpu_kernel_fn fn = NULL;
  CHECK_OK(cube__cpu_compile(text, key_for(text), "cube_kernel_entry", "with_gcc", &fn));
  CHECK(fn && run_fill(fn, 1.0f) == 0);
  use_cc(NULL);
  const char* id3 = NULL;
  CHECK_OK(cube__cpu_compiler(NULL, &id3));
  /* The identity (so the key) follows the compiler. */
  if (system("command -v clang >/dev/null 2>&1") == 0) CHECK(strcmp(id, id3) != 0);
  free(text);
  done_with_cache();
}

CUBE_TEST(compiler_cube_cc_missing_is_named) {
  use_fresh_cache("cc_missing");
  use_cc("/nonexistent/cube-missing-cc");
  const char* cc = NULL;
  const char* id = NULL;
  CHECK_STATUS(cube__cpu_compiler(&cc, &id), CUBE_STATUS_UNAVAILABLE, "CUBE_CC",
               "/nonexistent/cube-missing-cc");
  char* text = fill_unit("cc_missing", 1.0f);
  cube__cache_key_t k = {1, 2};
  cube_cpu_kernel_fn fn = (cube_cpu_kernel_fn)1;
  CHECK_STATUS(cube__cpu_compile(text, k, "cube_kernel_entry", "cc_missing", &fn),
               CUBE_STATUS_UNAVAILABLE, "/nonexistent/cube-missing-cc");
  CHECK(fn == NULL);
  CHECK_EQ_U64(stats().compile_failures, 1);
  use_cc("cube-no-such-compiler-anywhere");
  CHECK_STATUS(cube__cpu_compiler(&cc, &id), CUBE_STATUS_UNAVAILABLE,
               "cube-no-such-compiler-anywhere", "on PATH");
  /* A program that is not a compiler: found, but compiling with it fails and
   * says how. */
  use_cc("false");
  if (system("command -v false >/dev/null 2>&1") == 0) {
    CHECK_OK(cube__cpu_compiler(&cc, &id));
    cube__cache_key_t k2 = {3, 4};
    CHECK_STATUS(cube__cpu_compile(text, k2, "cube_kernel_entry", "cc_false", &fn),
                 CUBE_STATUS_COMPILATION_FAILED, "cc_false", "exit status 1");
  }
  use_cc(NULL);
  free(text);
  done_with_cache();
}

//===----------------------------------------------------------------------===//
// Compile, memory hit, disk hit
//===----------------------------------------------------------------------===//

CUBE_TEST(compile_runs_kernel) {
  use_fresh_cache("runs");
  if (!have_compiler()) CUBE_SKIP("no C compiler");
  char* text = fill_unit("runs", 3.0f);
  cube__cache_key_t k = key_for(text);
  cube_cpu_kernel_fn fn = NULL;
  REQUIRE_OK(cube__cpu_compile(text, k, "cube_kernel_entry", "runs", &fn));
  REQUIRE(fn != NULL);
  CHECK_EQ_U64(run_fill(fn, 3.0f), 0);
  cube_kernel_cache_stats_t s = stats();
  CHECK_EQ_U64(s.misses, 1);
  CHECK_EQ_U64(s.memory_hits, 0);
  CHECK_EQ_U64(s.disk_hits, 0);
  CHECK_EQ_U64(s.compile_failures, 0);
  CHECK(s.compile_ns > 0);
  CHECK_EQ_U64(s.disk_entries, 1);
  CHECK(s.disk_bytes > 1000);
  CHECK(file_exists(entry_of(k)));
  /* A module lacking the symbol asked for. */
  cube_cpu_kernel_fn none = NULL;
  CHECK_STATUS(cube__cpu_compile(text, k, "no_such_function", "runs", &none), CUBE_STATUS_NOT_FOUND,
               "no_such_function", "runs");
  /* Bad arguments. */
  CHECK_STATUS(cube__cpu_compile(NULL, k, "cube_kernel_entry", "runs", &none),
               CUBE_STATUS_INVALID_ARGUMENT, "text");
  free(text);
  done_with_cache();
}

CUBE_TEST(compile_twice_is_memory_hit) {
  use_fresh_cache("memory_hit");
  if (!have_compiler()) CUBE_SKIP("no C compiler");
  char* text = fill_unit("memory_hit", 4.0f);
  cube__cache_key_t k = key_for(text);
  cube_cpu_kernel_fn f1 = NULL, f2 = NULL;
  REQUIRE_OK(cube__cpu_compile(text, k, "cube_kernel_entry", "memory_hit", &f1));
  REQUIRE_OK(cube__cpu_compile(text, k, "cube_kernel_entry", "memory_hit", &f2));
  CHECK(f1 == f2);
  CHECK_EQ_U64(run_fill(f2, 4.0f), 0);
  cube_kernel_cache_stats_t s = stats();
  CHECK_EQ_U64(s.misses, 1);
  CHECK_EQ_U64(s.memory_hits, 1);
  CHECK_EQ_U64(s.disk_hits, 0);
  free(text);
  done_with_cache();
}

/* Parent: compiles, then runs this case again in a new process (exec) that
 * must find the entry on disk. Child (CUBE_TEST_CC_ROLE=disk_hit): compiles
 * the same unit and checks it was a disk hit. */
CUBE_TEST(compile_disk_hit_in_new_process) {
  bool child = child_role() && strcmp(child_role(), "disk_hit") == 0;
  use_fresh_cache("disk_hit");
  if (!have_compiler()) CUBE_SKIP("no C compiler");
  char* text = fill_unit("disk_hit", 5.0f);
  cube__cache_key_t k = key_for(text);
  cube_cpu_kernel_fn fn = NULL;
  REQUIRE_OK(cube__cpu_compile(text, k, "cube_kernel_entry", "disk_hit", &fn));
  CHECK_EQ_U64(run_fill(fn, 5.0f), 0);
  cube_kernel_cache_stats_t s = stats();
  free(text);
  if (child) {
    CHECK_EQ_U64(s.disk_hits, 1);
    CHECK_EQ_U64(s.misses, 0);
    CHECK_EQ_U64(s.memory_hits, 0);
    CHECK(s.load_ns > 0);
    cube__cache_shutdown();
    return; /* the parent removes the directory */
  }
  CHECK_EQ_U64(s.misses, 1);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    setenv("CUBE_TEST_CC_ROLE", "disk_hit", 1);
    char* argv[] = {(char*)"/proc/self/exe", (char*)"compile_disk_hit_in_new_process", NULL};
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  int ws = 0;
  CHECK(waitpid(pid, &ws, 0) == pid);
  CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  /* In this process too, once the memory map is gone (the test hook). */
  cube__cache_shutdown();
  text = fill_unit("disk_hit", 5.0f);
  REQUIRE_OK(cube__cpu_compile(text, k, "cube_kernel_entry", "disk_hit", &fn));
  CHECK_EQ_U64(run_fill(fn, 5.0f), 0);
  s = stats();
  CHECK_EQ_U64(s.disk_hits, 1);
  CHECK_EQ_U64(s.misses, 1);
  free(text);
  done_with_cache();
}

/* Kernel objects keep the function they got across cube_shutdown (which calls
 * cube__cache_shutdown): the module must stay loaded. */
CUBE_TEST(compile_function_survives_cache_shutdown) {
  use_fresh_cache("survives");
  if (!have_compiler()) CUBE_SKIP("no C compiler");
  char* text = fill_unit("survives", 12.0f);
  cube__cache_key_t k = key_for(text);
  cube_cpu_kernel_fn f1 = NULL, f2 = NULL;
  REQUIRE_OK(cube__cpu_compile(text, k, "cube_kernel_entry", "survives", &f1));
  uint64_t gen = cube__cache_generation();
  cube__cache_shutdown();
  CHECK(cube__cache_generation() != gen);
  CHECK_EQ_U64(run_fill(f1, 12.0f), 0);
  REQUIRE_OK(cube__cpu_compile(text, k, "cube_kernel_entry", "survives", &f2));
  CHECK_EQ_U64(stats().disk_hits, 1);
  CHECK_EQ_U64(run_fill(f2, 12.0f), 0);
  CHECK_EQ_U64(run_fill(f1, 12.0f), 0);
  free(text);
  done_with_cache();
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

CUBE_TEST(compile_syntax_error_names_line) {
  use_fresh_cache("syntax");
  if (!have_compiler()) CUBE_SKIP("no C compiler");
  const char* text =
      "typedef struct cube_t cube_t;\n"
      "#line 1 \"broken.cube\"\n"
      "int cube_kernel_entry(const cube_t* cube, const void* args, unsigned n) {\n"
      "  int x = 1;\n"
      "  return x + undefined_thing;\n"
      "}\n";
  cube__cache_key_t k = key_for(text);
  cube_cpu_kernel_fn fn = (cube_cpu_kernel_fn)1;
  cube_status_t st = cube__cpu_compile(text, k, "cube_kernel_entry", "broken", &fn);
  printf("message: %s\n", cube_status_message(st));
  CHECK(fn == NULL);
  CHECK_STATUS(st, CUBE_STATUS_COMPILATION_FAILED, "compiling kernel 'broken' with ",
               "failed:\n", "broken.cube:3:", "error", "undefined_thing");
  cube_kernel_cache_stats_t s = stats();
  CHECK_EQ_U64(s.misses, 1);
  CHECK_EQ_U64(s.compile_failures, 1);
  CHECK_EQ_U64(s.disk_entries, 0);
  CHECK(!file_exists(entry_of(k)));
  done_with_cache();
}

CUBE_TEST(compile_error_log_is_truncated) {
  use_fresh_cache("long_log");
  if (!have_compiler()) CUBE_SKIP("no C compiler");
  /* Errors naming 3000-character identifiers (clang stops after 20 errors,
   * so make each one long): the message keeps the first and last ones. */
  size_t cap = 400000;
  char* text = malloc(cap);
  REQUIRE(text);
  char ident[3001];
  memset(ident, 'q', 3000);
  ident[3000] = '\0';
  size_t n = (size_t)snprintf(text, cap, "#line 1 \"long.cube\"\n");
  for (int i = 0; i < 40 && n + 3100 < cap; ++i)
    n += (size_t)snprintf(text + n, cap - n, "int f%d(void) { return %s%d; }\n", i, ident, i);
  cube_cpu_kernel_fn fn = NULL;
  cube_status_t st = cube__cpu_compile(text, key_for(text), "cube_kernel_entry", "long", &fn);
  const char* msg = cube_status_message(st);
  printf("message length %zu\n", strlen(msg));
  CHECK(cube_status_code(st) == CUBE_STATUS_COMPILATION_FAILED);
  CHECK(strlen(msg) < 20000);
  CHECK(strstr(msg, "long.cube:1:") != NULL);
  CHECK(strstr(msg, "compiler output left out") != NULL);
  cube_status_free(st);
  free(text);
  done_with_cache();
}

//===----------------------------------------------------------------------===//
// Concurrency
//===----------------------------------------------------------------------===//

CUBE_TEST(compile_two_processes_same_unit) {
  use_fresh_cache("two_procs");
  if (!have_compiler()) CUBE_SKIP("no C compiler");
  char* text = fill_unit("two_procs", 6.0f);
  cube__cache_key_t k = key_for(text);
  fflush(stdout);
  fflush(stderr);
  pid_t pids[2];
  for (int i = 0; i < 2; ++i) {
    pids[i] = fork();
    REQUIRE(pids[i] >= 0);
    if (pids[i] == 0) {
      cube_cpu_kernel_fn fn = NULL;
      cube_status_t st = cube__cpu_compile(text, k, "cube_kernel_entry", "two_procs", &fn);
      if (st) {
        fprintf(stderr, "child %d: %s\n", i, cube_status_message(st));
        _exit(10);
      }
      _exit(run_fill(fn, 6.0f));
    }
  }
  for (int i = 0; i < 2; ++i) {
    int ws = 0;
    CHECK(waitpid(pids[i], &ws, 0) == pids[i]);
    CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
  }
  cube_kernel_cache_stats_t s = stats();
  CHECK_EQ_U64(s.disk_entries, 1);
  /* The entry is whole: this process loads it. */
  cube_cpu_kernel_fn fn = NULL;
  REQUIRE_OK(cube__cpu_compile(text, k, "cube_kernel_entry", "two_procs", &fn));
  CHECK_EQ_U64(run_fill(fn, 6.0f), 0);
  s = stats();
  CHECK_EQ_U64(s.disk_hits, 1);
  CHECK_EQ_U64(s.corrupt_entries, 0);
  free(text);
  done_with_cache();
}

#define THREADS 6

typedef struct {
  const char* text;
  cube__cache_key_t key;
  cube_cpu_kernel_fn fn;
  int rc;
} thread_arg_t;

static void* compile_thread(void* p) {
  thread_arg_t* a = p;
  cube_status_t st = cube__cpu_compile(a->text, a->key, "cube_kernel_entry", "threads", &a->fn);
  if (st) {
    fprintf(stderr, "thread: %s\n", cube_status_message(st));
    cube_status_free(st);
    a->rc = -1;
    return NULL;
  }
  a->rc = run_fill(a->fn, 7.0f);
  return NULL;
}

CUBE_TEST(compile_threads_same_key) {
  use_fresh_cache("threads");
  if (!have_compiler()) CUBE_SKIP("no C compiler");
  char* text = fill_unit("threads", 7.0f);
  cube__cache_key_t k = key_for(text);
  pthread_t t[THREADS];
  thread_arg_t args[THREADS];
  for (int i = 0; i < THREADS; ++i) {
    args[i] = (thread_arg_t){text, k, NULL, -2};
    REQUIRE(pthread_create(&t[i], NULL, compile_thread, &args[i]) == 0);
  }
  for (int i = 0; i < THREADS; ++i) pthread_join(t[i], NULL);
  for (int i = 0; i < THREADS; ++i) {
    CHECK_EQ_U64(args[i].rc, 0);
    CHECK(args[i].fn == args[0].fn);
  }
  /* Serialised per key: one compile, the others wait and hit memory. */
  cube_kernel_cache_stats_t s = stats();
  CHECK_EQ_U64(s.misses, 1);
  CHECK_EQ_U64(s.memory_hits, THREADS - 1);
  free(text);
  done_with_cache();
}

//===----------------------------------------------------------------------===//
// Damaged disk entries
//===----------------------------------------------------------------------===//

CUBE_TEST(compile_rebuilds_corrupt_entry) {
  use_fresh_cache("corrupt");
  if (!have_compiler()) CUBE_SKIP("no C compiler");
  char* text = fill_unit("corrupt", 8.0f);
  cube__cache_key_t k = key_for(text);
  cube_cpu_kernel_fn fn = NULL;
  REQUIRE_OK(cube__cpu_compile(text, k, "cube_kernel_entry", "corrupt", &fn));
  cube__cache_shutdown(); /* forget the loaded module */
  /* Overwrite payload bytes in the middle of the entry. */
  const char* path = entry_of(k);
  FILE* f = fopen(path, "r+b");
  REQUIRE(f);
  REQUIRE(fseek(f, 0, SEEK_END) == 0);
  long size = ftell(f);
  REQUIRE(size > 200);
  REQUIRE(fseek(f, size / 2, SEEK_SET) == 0);
  fwrite("GARBAGE!GARBAGE!", 1, 16, f);
  fclose(f);
  REQUIRE_OK(cube__cpu_compile(text, k, "cube_kernel_entry", "corrupt", &fn));
  CHECK_EQ_U64(run_fill(fn, 8.0f), 0);
  cube_kernel_cache_stats_t s = stats();
  CHECK_EQ_U64(s.corrupt_entries, 1);
  CHECK_EQ_U64(s.misses, 2);
  CHECK_EQ_U64(s.disk_hits, 0);
  CHECK_EQ_U64(s.disk_entries, 1);
  /* The rebuilt entry is good. */
  cube__cache_shutdown();
  REQUIRE_OK(cube__cpu_compile(text, k, "cube_kernel_entry", "corrupt", &fn));
  CHECK_EQ_U64(run_fill(fn, 8.0f), 0);
  CHECK_EQ_U64(stats().disk_hits, 1);
  free(text);
  done_with_cache();
}

/* An entry whose checksum is right but whose payload is no shared object
 * (e.g. written by a broken build): it fails to load, counts as corrupt and
 * is rebuilt. */
CUBE_TEST(compile_rebuilds_unloadable_entry) {
  use_fresh_cache("unloadable");
  if (!have_compiler()) CUBE_SKIP("no C compiler");
  char* text = fill_unit("unloadable", 9.0f);
  cube__cache_key_t k = key_for(text);
  const char junk[] = "\177ELF but not really a shared object";
  REQUIRE_OK(cube__cache_disk_store(k, "so", junk, sizeof(junk)));
  cube_cpu_kernel_fn fn = NULL;
  REQUIRE_OK(cube__cpu_compile(text, k, "cube_kernel_entry", "unloadable", &fn));
  CHECK_EQ_U64(run_fill(fn, 9.0f), 0);
  cube_kernel_cache_stats_t s = stats();
  CHECK_EQ_U64(s.corrupt_entries, 1);
  CHECK_EQ_U64(s.misses, 1);
  CHECK_EQ_U64(s.disk_hits, 0);
  CHECK_EQ_U64(s.disk_entries, 1);
  CHECK(s.disk_bytes > sizeof(junk) + 28);
  free(text);
  done_with_cache();
}

CUBE_TEST(compile_with_disk_cache_off) {
  use_fresh_cache("off");
  if (!have_compiler()) CUBE_SKIP("no C compiler");
  env_cache_dir("off");
  char* text = fill_unit("off", 10.0f);
  cube__cache_key_t k = key_for(text);
  cube_cpu_kernel_fn fn = NULL;
  REQUIRE_OK(cube__cpu_compile(text, k, "cube_kernel_entry", "off", &fn));
  CHECK_EQ_U64(run_fill(fn, 10.0f), 0);
  cube__cache_shutdown();
  REQUIRE_OK(cube__cpu_compile(text, k, "cube_kernel_entry", "off", &fn));
  CHECK_EQ_U64(run_fill(fn, 10.0f), 0);
  cube_kernel_cache_stats_t s = stats();
  CHECK_EQ_U64(s.misses, 2);
  CHECK_EQ_U64(s.disk_hits, 0);
  CHECK(!file_exists(g_dir));
  env_cache_dir(g_dir);
  free(text);
  done_with_cache();
}

/* Many modules loaded at once stay distinct (dlopen knows objects by path:
 * "/proc/self/fd/<n>" must not be reused for a second module). */
CUBE_TEST(compile_many_distinct_modules) {
  use_fresh_cache("many");
  if (!have_compiler()) CUBE_SKIP("no C compiler");
  enum { N = 6 };
  cube_cpu_kernel_fn fns[N];
  for (int round = 0; round < 2; ++round) {
    if (round == 1) cube__cache_shutdown(); /* reload all from disk */
    for (int i = 0; i < N; ++i) {
      char tag[32];
      snprintf(tag, sizeof(tag), "many_%d", i);
      char* text = fill_unit(tag, (float)(i + 1));
      REQUIRE_OK(cube__cpu_compile(text, key_for(text), "cube_kernel_entry", tag, &fns[i]));
      free(text);
    }
    for (int i = 0; i < N; ++i) CHECK_EQ_U64(run_fill(fns[i], (float)(i + 1)), 0);
  }
  cube_kernel_cache_stats_t s = stats();
  CHECK_EQ_U64(s.misses, N);
  CHECK_EQ_U64(s.disk_hits, N);
  done_with_cache();
}

//===----------------------------------------------------------------------===//
// Timing (printed for docs; not a pass/fail criterion)
//===----------------------------------------------------------------------===//

CUBE_TEST(timing_cold_disk_memory) {
  use_fresh_cache("timing");
  /* CUBE_TEST_TIMING_CC=gcc times another compiler. */
  const char* other = getenv("CUBE_TEST_TIMING_CC");
  if (other && *other) use_cc(other);
  if (!have_compiler()) CUBE_SKIP("no C compiler");
  const char* cc = NULL;
  CHECK_OK(cube__cpu_compiler(&cc, NULL));
  char* text = fill_unit("timing", 11.0f);
  cube__cache_key_t k = key_for(text);
  cube_cpu_kernel_fn fn = NULL;
  uint64_t t0 = cube__now_ns();
  REQUIRE_OK(cube__cpu_compile(text, k, "cube_kernel_entry", "timing", &fn));
  uint64_t t1 = cube__now_ns();
  cube__cache_shutdown();
  REQUIRE_OK(cube__cpu_compile(text, k, "cube_kernel_entry", "timing", &fn));
  uint64_t t2 = cube__now_ns();
  enum { REPS = 1000 };
  for (int i = 0; i < REPS; ++i)
    REQUIRE_OK(cube__cpu_compile(text, k, "cube_kernel_entry", "timing", &fn));
  uint64_t t3 = cube__now_ns();
  CHECK_EQ_U64(run_fill(fn, 11.0f), 0);
  cube_kernel_cache_stats_t s = stats();
  printf("compiler %s\ncold compile %.2f ms (compile_ns %.2f ms), disk hit %.3f ms (load_ns %.3f ms), "
         "memory hit %.3f us\n",
         cc, (double)(t1 - t0) / 1e6, (double)s.compile_ns / 1e6, (double)(t2 - t1) / 1e6,
         (double)s.load_ns / 1e6, (double)(t3 - t2) / 1e3 / REPS);
  CHECK_EQ_U64(s.memory_hits, REPS);
  use_cc(NULL);
  free(text);
  done_with_cache();
}
