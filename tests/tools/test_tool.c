/* The cube tool (tools/cube.c) run as a new user would run it: exit codes,
 * which stream gets the text, --help that does not run the command, wrong
 * command lines named, `info --json` a valid document that agrees with
 * `info`, and an unusable kernel cache directory reported. Each case runs
 * the tool in child processes (CUBE_TOOL_PATH, set by CMake). */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "cube/cube.h"
#include "subprocess.h"

#ifndef CUBE_TOOL_PATH
#error "CUBE_TOOL_PATH must name the built tool"
#endif

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

static char g_tmp[1024];  /* this case's scratch directory */
static char g_out[1100], g_err[1100];

static int rm_entry(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}
static void rm_tree(const char* path) { (void)nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static void scratch(const char* name) {
  const char* base = getenv("CUBE_TEST_TMPDIR");
  if (!base || !*base) base = "/tmp";
  snprintf(g_tmp, sizeof(g_tmp), "%s/tool-%s-%ld", base, name, (long)getpid());
  rm_tree(g_tmp);
  mkdir(g_tmp, 0700);
  snprintf(g_out, sizeof(g_out), "%s/stdout", g_tmp);
  snprintf(g_err, sizeof(g_err), "%s/stderr", g_tmp);
}

/* The result of one run of the tool. */
typedef struct {
  int rc;
  char* out; /* never NULL */
  char* err;
} run_t;

static void run_free(run_t* r) {
  free(r->out);
  free(r->err);
}

/* Runs the tool with up to 4 arguments (NULL ends the list). */
static run_t tool(const char* a1, const char* a2, const char* a3) {
  char* argv[5] = {(char*)CUBE_TOOL_PATH, (char*)a1, (char*)a2, (char*)a3, NULL};
  run_t r;
  r.rc = run_redirected(argv, NULL, g_out, g_err);
  r.out = read_whole_file(g_out);
  r.err = read_whole_file(g_err);
  if (!r.out) r.out = strdup("");
  if (!r.err) r.err = strdup("");
  return r;
}

static bool has(const char* s, const char* word) { return s && strstr(s, word) != NULL; }

static bool exists(const char* path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* A cache directory path under the scratch directory, not created. */
static void fresh_cache_dir(char* out, size_t size) {
  snprintf(out, size, "%s/kernel-cache", g_tmp);
  rm_tree(out);
  setenv("CUBE_CACHE_DIR", out, 1);
}

static void write_file(const char* path, const char* text) {
  FILE* f = fopen(path, "w");
  if (f) {
    fputs(text, f);
    fclose(f);
  }
}

/* A wrong command line: exit 2, nothing on stdout, stderr names |word| and
 * points at --help. */
static void check_usage_error(const char* a1, const char* a2, const char* a3, const char* word) {
  run_t r = tool(a1, a2, a3);
  if (r.rc != 2 || r.out[0] != '\0' || !has(r.err, word) || !has(r.err, "--help"))
    fprintf(stderr, "cube %s %s %s: rc %d, stdout \"%s\", stderr \"%s\" (expected 2, '%s')\n",
            a1 ? a1 : "", a2 ? a2 : "", a3 ? a3 : "", r.rc, r.out, r.err, word);
  CHECK_EQ_U64(r.rc, 2);
  CHECK(r.out[0] == '\0');
  CHECK(has(r.err, word));
  CHECK(has(r.err, "--help"));
  run_free(&r);
}

//===----------------------------------------------------------------------===//
// Usage, version, wrong command lines
//===----------------------------------------------------------------------===//

/* The options the library has (cube_option_name is NULL past the last). */
static int option_count(void) {
  int n = 0;
  while (cube_option_name((cube_option_t)n)) ++n;
  return n;
}

CUBE_TEST(help_on_stdout_exit_zero) {
  scratch("help");
  const char* forms[] = {"--help", "-h", "help"};
  for (int i = 0; i < 3; ++i) {
    run_t r = tool(forms[i], NULL, NULL);
    CHECK_EQ_U64(r.rc, 0);
    CHECK(has(r.out, "usage: cube"));
    const char* words[] = {"info",   "--json",    "cache",  "clear",  "demo",
                           "--version", "--options", "list", "prune", "bundle export",
                           "bundle import"};
    for (int k = 0; k < 11; ++k) CHECK(has(r.out, words[k]));
    CHECK(r.err[0] == '\0');
    run_free(&r);
  }
  /* `cube help <command>`: that command's usage. */
  run_t r = tool("help", "demo", NULL);
  CHECK_EQ_U64(r.rc, 0);
  CHECK(has(r.out, "usage: cube demo"));
  CHECK(r.err[0] == '\0');
  run_free(&r);
  rm_tree(g_tmp);
}

CUBE_TEST(no_command_is_a_usage_error) {
  scratch("nocommand");
  run_t r = tool(NULL, NULL, NULL);
  CHECK_EQ_U64(r.rc, 2);
  CHECK(r.out[0] == '\0');
  CHECK(has(r.err, "usage: cube"));
  run_free(&r);
  rm_tree(g_tmp);
}

CUBE_TEST(version_prints_library_version) {
  scratch("version");
  run_t r = tool("--version", NULL, NULL);
  char expect[128];
  snprintf(expect, sizeof(expect), "cube %s\n", cube_version());
  CHECK_EQ_U64(r.rc, 0);
  CHECK(strcmp(r.out, expect) == 0);
  CHECK(r.err[0] == '\0');
  run_free(&r);
  rm_tree(g_tmp);
}

CUBE_TEST(unknown_command_and_options_named) {
  scratch("unknown");
  check_usage_error("frobnicate", NULL, NULL, "unknown command 'frobnicate'");
  check_usage_error("--frob", NULL, NULL, "unknown option '--frob'");
  check_usage_error("help", "nope", NULL, "unknown command 'nope'");
  check_usage_error("--help", "extra", NULL, "'extra'");
  check_usage_error("--version", "extra", NULL, "'extra'");
  check_usage_error("info", "--bogus", NULL, "unknown option '--bogus'");
  check_usage_error("info", "extra", NULL, "unexpected argument 'extra'");
  check_usage_error("info", "--json", "--json", "'--json' given twice");
  check_usage_error("info", "--options", "--options", "'--options' given twice");
  check_usage_error("info", "--options", "extra", "unexpected argument 'extra'");
  check_usage_error("cache", "bogus", NULL, "unexpected argument 'bogus'");
  check_usage_error("cache", "clear", "extra", "unexpected argument 'extra'");
  check_usage_error("cache", "-x", NULL, "unknown option '-x'");
  /* demo with a wrong argument does not run: no kernel reached the cache. */
  char dir[1200];
  fresh_cache_dir(dir, sizeof(dir));
  unsetenv("CUBE_BACKEND");
  check_usage_error("demo", "--fast", NULL, "unknown option '--fast'");
  check_usage_error("demo", "now", NULL, "unexpected argument 'now'");
  CHECK(!exists(dir));
  rm_tree(g_tmp);
}

//===----------------------------------------------------------------------===//
// --help after a command prints its usage and does nothing else
//===----------------------------------------------------------------------===//

CUBE_TEST(command_help_does_not_run_the_command) {
  scratch("cmdhelp");
  char dir[1200];
  fresh_cache_dir(dir, sizeof(dir));
  unsetenv("CUBE_BACKEND");
  const char* cmds[] = {"info", "cache", "demo"};
  const char* helps[] = {"--help", "-h"};
  for (int i = 0; i < 3; ++i) {
    for (int h = 0; h < 2; ++h) {
      run_t r = tool(cmds[i], helps[h], NULL);
      char usage[64];
      snprintf(usage, sizeof(usage), "usage: cube %s", cmds[i]);
      CHECK_EQ_U64(r.rc, 0);
      CHECK(has(r.out, usage));
      CHECK(r.err[0] == '\0');
      /* Nothing of the command's own output. */
      CHECK(!has(r.out, "queue)"));           /* demo: "demo on <device> (<kind> queue)" */
      CHECK(!has(r.out, "checks passed"));    /* demo */
      CHECK(!has(r.out, "default backend:")); /* info */
      CHECK(!has(r.out, "entries on disk:")); /* cache */
      run_free(&r);
    }
  }
  /* The demo compiles kernels into the cache: none were. */
  CHECK(!exists(dir));
  /* `cache clear --help` clears nothing; `cache clear` does. */
  char sub[1300], entry[1400];
  snprintf(sub, sizeof(sub), "%s/v2", dir);
  mkdir(dir, 0700);
  mkdir(sub, 0700);
  snprintf(entry, sizeof(entry), "%s/0123456789abcdef0123456789abcdef.so", sub);
  write_file(entry, "not really a kernel");
  REQUIRE(exists(entry));
  run_t r = tool("cache", "clear", "--help");
  CHECK_EQ_U64(r.rc, 0);
  CHECK(has(r.out, "usage: cube cache"));
  CHECK(exists(entry));
  run_free(&r);
  r = tool("cache", "clear", NULL);
  CHECK_EQ_U64(r.rc, 0);
  CHECK(has(r.out, "kernel cache cleared"));
  CHECK(!exists(entry));
  run_free(&r);
  rm_tree(g_tmp);
}

/* The positive side of the cases above: the demo, run, passes and fills the
 * cache (so "the directory was not created" does show the demo did not run). */
CUBE_TEST(demo_runs_and_fills_the_cache) {
  scratch("demo");
  char dir[1200];
  fresh_cache_dir(dir, sizeof(dir));
  unsetenv("CUBE_BACKEND");
  run_t r = tool("demo", NULL, NULL);
  if (r.rc != 0) fprintf(stderr, "demo: rc %d\n%s\n%s\n", r.rc, r.out, r.err);
  CHECK_EQ_U64(r.rc, 0);
  CHECK(has(r.out, "queue)"));
  CHECK(has(r.out, "demo: all checks passed"));
  CHECK(!has(r.out, "FAIL"));
  CHECK(exists(dir));
  run_free(&r);
  r = tool("cache", NULL, NULL);
  CHECK_EQ_U64(r.rc, 0);
  CHECK(has(r.out, dir));
  CHECK(!has(r.out, "entries on disk: 0,"));
  CHECK(!has(r.out, "is unusable"));
  run_free(&r);
  rm_tree(g_tmp);
}

/* The demo with CUBE_TRACE: the file parses as JSON, with the demo's
 * kernels, in the order it launched them, on stream 0 of cpu:0 after its
 * uploads; compiles on a host track; every track's timestamps monotone; and
 * (CUBE_COMPILE_NOTICE small) the compile notices on stderr. */
CUBE_TEST(demo_trace_parses) {
  scratch("demo-trace");
  char dir[1200], trace[1200];
  fresh_cache_dir(dir, sizeof(dir));
  snprintf(trace, sizeof(trace), "%s/demo.%%p.json", g_tmp);
  setenv("CUBE_TRACE", trace, 1);
  setenv("CUBE_COMPILE_NOTICE", "0.001", 1);
  setenv("CUBE_BACKEND", "cpu", 1);
  run_t r = tool("demo", NULL, NULL);
  unsetenv("CUBE_TRACE");
  unsetenv("CUBE_COMPILE_NOTICE");
  unsetenv("CUBE_BACKEND");
  CHECK_EQ_U64(r.rc, 0);
  CHECK(has(r.err, "cube: compiling kernel 'saxpy' for cpu"));
  CHECK(has(r.err, "cube: compiled kernel 'saxpy' for cpu in"));
  run_free(&r);
  /* The one file the demo wrote ("%p": its process id). */
  char path[1400] = "";
  DIR* d = opendir(g_tmp);
  REQUIRE(d);
  struct dirent* e;
  while ((e = readdir(d)) != NULL)
    if (strncmp(e->d_name, "demo.", 5) == 0) snprintf(path, sizeof(path), "%s/%s", g_tmp, e->d_name);
  closedir(d);
  REQUIRE(path[0]);
  char* text = read_whole_file(path);
  REQUIRE(text);
  cJSON* doc = cJSON_Parse(text);
  free(text);
  REQUIRE(doc);
  const cJSON* events = cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
  REQUIRE(cJSON_IsArray(events));
  const char* kernels[4];
  int nk = 0, uploads_before = 0, compiles = 0, x = 0;
  double last_ts = -1, last_pid = -1, last_tid = -1;
  const cJSON* ev;
  cJSON_ArrayForEach(ev, events) {
    const char* ph = cJSON_GetObjectItemCaseSensitive(ev, "ph")->valuestring;
    if (strcmp(ph, "X") != 0) continue;
    x++;
    double pid = cJSON_GetObjectItemCaseSensitive(ev, "pid")->valuedouble;
    double tid = cJSON_GetObjectItemCaseSensitive(ev, "tid")->valuedouble;
    double ts = cJSON_GetObjectItemCaseSensitive(ev, "ts")->valuedouble;
    if (pid == last_pid && tid == last_tid) CHECK(ts >= last_ts);
    last_pid = pid, last_tid = tid, last_ts = ts;
    const char* cat = cJSON_GetObjectItemCaseSensitive(ev, "cat")->valuestring;
    const char* name = cJSON_GetObjectItemCaseSensitive(ev, "name")->valuestring;
    if (strcmp(cat, "compile") == 0) {
      CHECK(pid == 0);
      compiles++;
    }
    if (pid == 1 && tid == 0 && strcmp(cat, "upload") == 0 && nk == 0) uploads_before++;
    if (pid == 1 && tid == 0 && strcmp(cat, "kernel") == 0 && nk < 4) kernels[nk++] = name;
  }
  CHECK(x >= 10);
  CHECK(compiles == 2); /* a fresh cache: saxpy and partial_sum compiled */
  CHECK(uploads_before >= 2);
  CHECK(nk >= 2);
  bool partial = false;
  for (int i = 0; i < nk; ++i) partial |= strcmp(kernels[i], "partial_sum") == 0;
  if (nk >= 2) CHECK(strcmp(kernels[0], "saxpy") == 0); /* the demo's first launch */
  CHECK(partial);
  const cJSON* other = cJSON_GetObjectItemCaseSensitive(doc, "otherData");
  CHECK(cJSON_GetObjectItemCaseSensitive(other, "dropped_events")->valuedouble == 0);
  cJSON_Delete(doc);
  rm_tree(g_tmp);
}

//===----------------------------------------------------------------------===//
// info --json
//===----------------------------------------------------------------------===//

/* Checks the document against the text `cube info` (argv[1]), the version
 * (argv[2]) and CUBE_CACHE_DIR (non-UTF-8 bytes read as U+FFFD). */
static const char* json_check_py =
    "import json, os, sys\n"
    "d = json.load(sys.stdin)\n"
    "text = open(sys.argv[1], encoding='utf-8', errors='replace').read()\n"
    "assert d['version'] == sys.argv[2], d['version']\n"
    "kc = d['kernel_cache']\n"
    "want = os.environb[b'CUBE_CACHE_DIR'].decode('utf-8', 'replace')\n"
    "assert kc['dir'] == want, (kc['dir'], want)\n"
    "assert kc['disk'] in ('usable', 'unusable', 'off')\n"
    "assert (kc['reason'] is None) == (kc['disk'] != 'unusable')\n"
    "if len(sys.argv) > 3: assert kc['disk'] == sys.argv[3] and sys.argv[4] in kc['reason'], kc\n"
    "assert isinstance(d['backends'], list) and len(d['backends']) >= 2\n"
    "names = [b['name'] for b in d['backends']]\n"
    "assert d['default_backend'] in names\n"
    "for b in d['backends']:\n"
    "    line = [l for l in text.splitlines() if l.startswith('backend ' + b['name'] + ' ')]\n"
    "    assert len(line) == 1, (b['name'], line)\n"
    "    assert ('unavailable' not in line[0]) == b['available'], (b, line)\n"
    "    if not b['available']:\n"
    "        assert isinstance(b['reason'], str) and b['reason'] and b['reason'] in line[0], b\n"
    "    else:\n"
    "        assert b['reason'] is None\n"
    "    assert isinstance(b['devices'], list) and len(b['devices']) == b['device_count']\n"
    "    for dev in b['devices']:\n"
    "        if dev['error'] is None:\n"
    "            assert dev['name'] in text, dev['name']\n"
    "            assert isinstance(dev['features'], list)\n"
    "            assert dev['memory']['total_bytes'] > 0\n"
    "            assert ('device %s  %s' % (dev['id'], dev['name'])) in text\n"
    "cpu = d['backends'][names.index('cpu')]\n"
    "assert cpu['available'] and cpu['device_count'] >= 1\n"
    "print('json ok: %d backends' % len(names))\n";

static bool have_python(void) {
  char* argv[] = {(char*)"python3", (char*)"-c", (char*)"import json", NULL};
  return run_redirected(argv, NULL, NULL, NULL) == 0;
}

/* Runs `info` and `info --json`, then the check above (with the extra
 * expectation |disk|, |reason_word| when not NULL). */
static void check_info_json(const char* disk, const char* reason_word) {
  char text_path[1200], json_path[1200], py_out[1200];
  snprintf(text_path, sizeof(text_path), "%s/info.txt", g_tmp);
  snprintf(json_path, sizeof(json_path), "%s/info.json", g_tmp);
  snprintf(py_out, sizeof(py_out), "%s/python.out", g_tmp);
  char* targv[] = {(char*)CUBE_TOOL_PATH, (char*)"info", NULL};
  CHECK_EQ_U64(run_redirected(targv, NULL, text_path, NULL), 0);
  char* jargv[] = {(char*)CUBE_TOOL_PATH, (char*)"info", (char*)"--json", NULL};
  CHECK_EQ_U64(run_redirected(jargv, NULL, json_path, g_err), 0);
  char* jerr = read_whole_file(g_err);
  /* The document is stdout's: nothing of it on stderr. */
  CHECK(jerr && !has(jerr, "{"));
  free(jerr);
  char* pargv[] = {(char*)"python3", (char*)"-c", (char*)json_check_py, text_path,
                   (char*)cube_version(), (char*)disk, (char*)reason_word, NULL};
  int rc = run_redirected(pargv, json_path, py_out, py_out);
  char* log = read_whole_file(py_out);
  if (rc != 0) fprintf(stderr, "python check (rc %d):\n%s\n", rc, log ? log : "");
  CHECK_EQ_U64(rc, 0);
  CHECK(log && has(log, "json ok"));
  free(log);
}

CUBE_TEST(info_json_parses_and_agrees_with_info) {
  if (!have_python()) CUBE_SKIP("python3 is not available");
  scratch("json");
  char dir[1200];
  fresh_cache_dir(dir, sizeof(dir));
  check_info_json(NULL, NULL);
  rm_tree(g_tmp);
}

/* Strings that need escaping (a quote, a backslash, a newline, a tab, a
 * byte that is not UTF-8) in the cache directory, which is unusable: the
 * document stays valid and holds them, and the reason. */
CUBE_TEST(info_json_escapes_strings) {
  if (!have_python()) CUBE_SKIP("python3 is not available");
  scratch("json_escape");
  char file[1200], dir[1300];
  snprintf(file, sizeof(file), "%s/a \"quoted\" back\\slash\nnew\tline \xff end", g_tmp);
  write_file(file, "a file where a directory should be");
  REQUIRE(exists(file));
  snprintf(dir, sizeof(dir), "%s/cache", file);
  setenv("CUBE_CACHE_DIR", dir, 1);
  check_info_json("unusable", "is not a directory");
  rm_tree(g_tmp);
}

//===----------------------------------------------------------------------===//
// An unusable kernel cache directory
//===----------------------------------------------------------------------===//

CUBE_TEST(cache_shows_unusable_directory) {
  scratch("cache_unusable");
  char file[1200];
  snprintf(file, sizeof(file), "%s/not-a-directory", g_tmp);
  write_file(file, "x");
  setenv("CUBE_CACHE_DIR", file, 1);
  run_t r = tool("cache", NULL, NULL);
  CHECK_EQ_U64(r.rc, 0); /* it reports the cache as it is */
  CHECK(has(r.out, file));
  CHECK(has(r.out, "unusable"));
  CHECK(has(r.out, "is not a directory"));
  CHECK(has(r.out, "kept in memory only"));
  run_free(&r);
  r = tool("info", NULL, NULL);
  CHECK_EQ_U64(r.rc, 0);
  CHECK(has(r.out, "unusable"));
  CHECK(has(r.out, "is not a directory"));
  run_free(&r);
  /* A usable one: no such line. */
  char dir[1200];
  fresh_cache_dir(dir, sizeof(dir));
  r = tool("cache", NULL, NULL);
  CHECK_EQ_U64(r.rc, 0);
  CHECK(has(r.out, dir));
  CHECK(!has(r.out, "is unusable"));
  run_free(&r);
  rm_tree(g_tmp);
}

/* The demo compiles several kernels with the cache directory unusable: they
 * compile and run, and stderr has exactly one line about it. */
CUBE_TEST(demo_with_unusable_cache_reports_once) {
  scratch("demo_unusable");
  char file[1200], dir[1300];
  snprintf(file, sizeof(file), "%s/a-file", g_tmp);
  write_file(file, "x");
  snprintf(dir, sizeof(dir), "%s/sub", file);
  setenv("CUBE_CACHE_DIR", dir, 1);
  unsetenv("CUBE_BACKEND");
  run_t r = tool("demo", NULL, NULL);
  CHECK_EQ_U64(r.rc, 0);
  CHECK(has(r.out, "demo: all checks passed"));
  /* Compile notices (a compile past CUBE_COMPILE_NOTICE) aside. */
  size_t notices = 0;
  for (const char* p = r.err; (p = strstr(p, "cube: compil")) != NULL; ++p) notices++;
  if (count_lines(r.err) != 1 + notices) fprintf(stderr, "stderr:\n%s\n", r.err);
  CHECK_EQ_U64(count_lines(r.err), 1 + notices);
  CHECK(has(r.err, dir));
  CHECK(has(r.err, file)); /* the component that is not a directory */
  CHECK(has(r.err, "kept in memory only"));
  run_free(&r);
  rm_tree(g_tmp);
}

//===----------------------------------------------------------------------===//
// cache list / prune; bundle export / import / show
//===----------------------------------------------------------------------===//

/* Entries ("<hex>.<kind>") in |dir|/v2. */
static int entry_files(const char* dir) {
  char sub[1300];
  snprintf(sub, sizeof(sub), "%s/v2", dir);
  DIR* d = opendir(sub);
  if (!d) return 0;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.' && strchr(e->d_name, '.') != NULL;
  closedir(d);
  return n;
}

/* The demo fills directory A; `cube cache list` names its kernels;
 * `cube bundle export` in that process's place writes a bundle; in a
 * second, empty directory B another process imports it, and the demo run
 * there compiles nothing (its kernel cache line: 0 compiled); a damaged
 * bundle is refused (exit 1, why on stderr) and stores nothing; prune
 * empties a directory down to a size. Every step is its own process. */
CUBE_TEST(bundle_export_import_then_demo_compiles_nothing) {
  scratch("bundle");
  unsetenv("CUBE_BACKEND");
  char dir_a[1200], dir_b[1200], bundle[1200], bad[1200];
  snprintf(dir_a, sizeof(dir_a), "%s/cache-a", g_tmp);
  snprintf(dir_b, sizeof(dir_b), "%s/cache-b", g_tmp);
  snprintf(bundle, sizeof(bundle), "%s/app.cubebundle", g_tmp);
  snprintf(bad, sizeof(bad), "%s/bad.cubebundle", g_tmp);
  setenv("CUBE_CACHE_DIR", dir_a, 1);
  /* Nothing to export yet. */
  run_t r = tool("bundle", "export", bundle);
  CHECK_EQ_U64(r.rc, 1);
  CHECK(has(r.err, "no entry"));
  CHECK(!exists(bundle));
  run_free(&r);
  r = tool("demo", NULL, NULL);
  CHECK_EQ_U64(r.rc, 0);
  CHECK(has(r.out, "kernel cache: 2 compiled"));
  run_free(&r);
  r = tool("cache", "list", NULL);
  CHECK_EQ_U64(r.rc, 0);
  CHECK(has(r.out, "2 entries"));
  CHECK(has(r.out, "saxpy"));
  CHECK(has(r.out, "partial_sum"));
  CHECK(has(r.out, " cpu "));
  CHECK(has(r.out, cube_version()));
  run_free(&r);
  r = tool("bundle", "export", bundle);
  if (r.rc) fprintf(stderr, "export: %s%s\n", r.out, r.err);
  CHECK_EQ_U64(r.rc, 0);
  CHECK(has(r.out, "2 entries (2 compiled kernels, 0 tuning results)"));
  CHECK(exists(bundle));
  run_free(&r);
  r = tool("bundle", "show", bundle);
  CHECK_EQ_U64(r.rc, 0);
  CHECK(has(r.out, "2 entries"));
  run_free(&r);

  /* B: empty; a damaged copy is refused and stores nothing. */
  setenv("CUBE_CACHE_DIR", dir_b, 1);
  char* bytes = read_whole_file(bundle);
  REQUIRE(bytes);
  struct stat st;
  REQUIRE(stat(bundle, &st) == 0);
  FILE* f = fopen(bad, "wb");
  REQUIRE(f);
  REQUIRE(fwrite(bytes, 1, (size_t)st.st_size / 2, f) == (size_t)st.st_size / 2); /* truncated */
  fclose(f);
  free(bytes);
  chmod(bad, 0600);
  r = tool("bundle", "import", bad);
  CHECK_EQ_U64(r.rc, 1);
  CHECK(has(r.err, "bundle import"));
  CHECK(has(r.err, "checksum"));
  CHECK(r.out[0] == '\0');
  run_free(&r);
  CHECK_EQ_U64(entry_files(dir_b), 0);
  r = tool("bundle", "import", bundle);
  if (r.rc) fprintf(stderr, "import: %s%s\n", r.out, r.err);
  CHECK_EQ_U64(r.rc, 0);
  CHECK(has(r.out, "imported"));
  CHECK(has(r.out, dir_b));
  run_free(&r);
  CHECK_EQ_U64(entry_files(dir_b), 2);
  r = tool("demo", NULL, NULL);
  if (!has(r.out, "kernel cache: 0 compiled, 2 loaded from disk")) fprintf(stderr, "%s\n", r.out ? r.out : "");
  CHECK_EQ_U64(r.rc, 0);
  CHECK(has(r.out, "kernel cache: 0 compiled, 2 loaded from disk"));
  CHECK(has(r.out, "demo: all checks passed"));
  run_free(&r);

  /* prune: down to 1 byte keeps nothing; wrong sizes are usage errors. */
  check_usage_error("cache", "prune", "--max", "--max");
  check_usage_error("bundle", "send", bundle, "send");
  check_usage_error("bundle", "import", NULL, "FILE");
  r = tool("cache", "prune", NULL);
  CHECK_EQ_U64(r.rc, 0);
  CHECK(has(r.out, "kept: 2 entries"));
  run_free(&r);
  char* pargv[] = {(char*)CUBE_TOOL_PATH, (char*)"cache", (char*)"prune", (char*)"--max",
                   (char*)"1", NULL};
  CHECK_EQ_U64(run_redirected(pargv, NULL, g_out, g_err), 0);
  CHECK_EQ_U64(entry_files(dir_b), 0);
  rm_tree(g_tmp);
}

//===----------------------------------------------------------------------===//
// Options: a malformed one fails the commands; info --options lists them
//===----------------------------------------------------------------------===//

CUBE_TEST(malformed_option_fails_the_commands) {
  scratch("bad_option");
  char dir[1200];
  fresh_cache_dir(dir, sizeof(dir));
  setenv("CUBE_BACKEND", "gpu", 1);
  const char* const cmds[][2] = {{"info", NULL}, {"info", "--json"}, {"demo", NULL},
                                 {"cache", NULL}};
  for (int i = 0; i < 4; ++i) {
    run_t r = tool(cmds[i][0], cmds[i][1], NULL);
    if (r.rc == 0 || !has(r.err, "CUBE_BACKEND"))
      fprintf(stderr, "cube %s %s: rc %d\nstdout: %s\nstderr: %s\n", cmds[i][0],
              cmds[i][1] ? cmds[i][1] : "", r.rc, r.out, r.err);
    CHECK(r.rc != 0 && r.rc != 2); /* not a usage error: the environment is wrong */
    CHECK(has(r.err, "CUBE_BACKEND"));
    CHECK(has(r.err, "'gpu'"));
    CHECK(has(r.err, "cpu, cuda, opencl, null"));
    run_free(&r);
  }
  /* info prints nothing before failing. */
  run_t r = tool("info", NULL, NULL);
  CHECK_EQ_U64(r.rc, 1);
  CHECK(r.out[0] == '\0');
  run_free(&r);
  CHECK(!exists(dir)); /* the demo compiled nothing */
  unsetenv("CUBE_BACKEND");
  r = tool("info", NULL, NULL);
  CHECK_EQ_U64(r.rc, 0);
  run_free(&r);
  rm_tree(g_tmp);
}

/* The line of |name| in `info --options` output, copied into |line|. */
static bool option_line(const char* out, const char* name, char* line, size_t size) {
  size_t n = strlen(name);
  for (const char* p = out; p && *p;) {
    const char* e = strchr(p, '\n');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    if (len > n && strncmp(p, name, n) == 0 && (p[n] == '=' || p[n] == ' ')) {
      snprintf(line, size, "%.*s", (int)len, p);
      return true;
    }
    p = e ? e + 1 : NULL;
  }
  return false;
}

CUBE_TEST(info_options_lists_every_option) {
  scratch("options");
  char dir[1200];
  fresh_cache_dir(dir, sizeof(dir));
  unsetenv("CUBE_BACKEND");
  setenv("CUBE_CPU_DEVICES", "3", 1);
  run_t r = tool("info", "--options", NULL);
  CHECK_EQ_U64(r.rc, 0);
  CHECK(r.err[0] == '\0');
  CHECK_EQ_U64(count_lines(r.out), option_count());
  char line[9000];
  for (int i = 0; i < option_count(); ++i) {
    const char* name = cube_option_name((cube_option_t)i);
    bool found = option_line(r.out, name, line, sizeof(line));
    if (!found) fprintf(stderr, "no line for %s in:\n%s\n", name, r.out);
    CHECK(found);
  }
  REQUIRE(option_line(r.out, "CUBE_CPU_DEVICES", line, sizeof(line)));
  CHECK(has(line, "CUBE_CPU_DEVICES=3") && has(line, "(environment)") && has(line, "[1, 64]"));
  REQUIRE(option_line(r.out, "CUBE_CACHE_DIR", line, sizeof(line)));
  CHECK(has(line, dir) && has(line, "(environment)"));
  REQUIRE(option_line(r.out, "CUBE_BACKEND", line, sizeof(line)));
  CHECK(has(line, "CUBE_BACKEND=cpu") && has(line, "(default)") && has(line, "process"));
  REQUIRE(option_line(r.out, "CUBE_CUDA_STAGING_CHUNK", line, sizeof(line)));
  CHECK(has(line, "=4M") && has(line, "(default)") && has(line, "per device"));
  REQUIRE(option_line(r.out, "CUBE_CPU_THREADS", line, sizeof(line)));
  CHECK(has(line, "unset") && has(line, "the cores this process may use"));
  run_free(&r);
  /* A rejected value: the default is shown, marked, and the command fails
   * saying why. */
  setenv("CUBE_CUDA_STAGING_CHUNK", "3", 1);
  r = tool("info", "--options", NULL);
  CHECK_EQ_U64(r.rc, 1);
  CHECK_EQ_U64(count_lines(r.out), option_count());
  REQUIRE(option_line(r.out, "CUBE_CUDA_STAGING_CHUNK", line, sizeof(line)));
  CHECK(has(line, "=4M") && has(line, "environment value rejected"));
  CHECK(has(r.err, "CUBE_CUDA_STAGING_CHUNK") && has(r.err, "'3'") && has(r.err, "64 KiB"));
  run_free(&r);
  unsetenv("CUBE_CUDA_STAGING_CHUNK");
  /* --json: one document with every option. */
  if (have_python()) {
    char json_path[1200], py_out[1200];
    snprintf(json_path, sizeof(json_path), "%s/options.json", g_tmp);
    snprintf(py_out, sizeof(py_out), "%s/python.out", g_tmp);
    char* jargv[] = {(char*)CUBE_TOOL_PATH, (char*)"info", (char*)"--options", (char*)"--json",
                     NULL};
    CHECK_EQ_U64(run_redirected(jargv, NULL, json_path, NULL), 0);
    char count[16];
    snprintf(count, sizeof(count), "%d", option_count());
    static const char* py =
        "import json, sys\n"
        "d = json.load(sys.stdin)['options']\n"
        "assert len(d) == int(sys.argv[1]), len(d)\n"
        "o = {x['name']: x for x in d}\n"
        "assert o['CUBE_CPU_DEVICES']['value'] == '3' and "
        "o['CUBE_CPU_DEVICES']['source'] == 'environment', o['CUBE_CPU_DEVICES']\n"
        "assert o['CUBE_CPU_THREADS']['value'] is None\n"
        "assert o['CUBE_BACKEND']['type'] == 'enum' and o['CUBE_BACKEND']['scope'] == 'process'\n"
        "assert all(x['doc'] and x['accepted'] and x['default'] for x in d)\n"
        "print('options ok')\n";
    char* pargv[] = {(char*)"python3", (char*)"-c", (char*)py, count, NULL};
    int rc = run_redirected(pargv, json_path, py_out, py_out);
    char* log = read_whole_file(py_out);
    if (rc != 0) fprintf(stderr, "python check (rc %d):\n%s\n", rc, log ? log : "");
    CHECK_EQ_U64(rc, 0);
    free(log);
  }
  unsetenv("CUBE_CPU_DEVICES");
  rm_tree(g_tmp);
}

/* `cube memory FILE` summarises a snapshot this process writes: the
 * largest holder by tag first, with its bytes; the pools that hold pages;
 * the ledger. A file that is not a snapshot is named (exit 1). */
CUBE_TEST(memory_summarises_a_snapshot) {
  scratch("memory");
  cube_client_t* c = NULL;
  cube_device_id_t cpu = {CUBE_BACKEND_CPU, 0};
  REQUIRE_OK(cube_client_load(cpu, &c));
  uint64_t seed = (uint64_t)time(NULL) * 2654435761u;
  /* "big" holds more than "small" whatever the sizes drawn. */
  size_t big = (2u << 20) + (size_t)(cube_test_rand(&seed) % (1u << 20));
  size_t small = 1 + (size_t)(cube_test_rand(&seed) % (1u << 20));
  cube_handle_t h[3];
  REQUIRE_OK(cube_memory_tag_push(c, "big-tag"));
  REQUIRE_OK(cube_client_empty(c, big, &h[0]));
  REQUIRE_OK(cube_memory_tag_pop(c));
  REQUIRE_OK(cube_client_empty(c, small, &h[1]));
  REQUIRE_OK(cube_handle_set_tag(h[1], "small-tag"));
  REQUIRE_OK(cube_client_empty(c, 100, &h[2]));
  char path[1200];
  snprintf(path, sizeof(path), "%s/snap.json", g_tmp);
  REQUIRE_OK(cube_client_memory_snapshot(c, path));
  run_t r = tool("memory", path, NULL);
  CHECK_EQ_U64(r.rc, 0);
  const char* holders = strstr(r.out, "largest holders by tag:\n");
  REQUIRE(holders != NULL);
  holders = strchr(holders, '\n') + 1;
  while (*holders == ' ') ++holders;
  CHECK(strncmp(holders, "big-tag", 7) == 0); /* first */
  CHECK(has(r.out, "small-tag"));
  CHECK(has(r.out, "(untagged)"));
  CHECK(has(r.out, "3 buffers"));
  CHECK(has(r.out, "fragmentation"));
  CHECK(has(r.out, "unaccounted"));
  run_free(&r);
  char bad[1200];
  snprintf(bad, sizeof(bad), "%s/bad.json", g_tmp);
  write_file(bad, "{\"format\": \"something else\"}");
  r = tool("memory", bad, NULL);
  CHECK_EQ_U64(r.rc, 1);
  CHECK(has(r.err, "not a cube memory snapshot"));
  run_free(&r);
  cube_handle_release_array(h, 3);
  cube_client_release(c);
  cube_shutdown();
  rm_tree(g_tmp);
}

/* Writes |doc| with |mutate| applied to a copy of it to |path|. */
static void write_mutated(const char* path, const cJSON* doc, void (*mutate)(cJSON*)) {
  cJSON* copy = cJSON_Duplicate(doc, true);
  mutate(copy);
  char* text = cJSON_Print(copy);
  write_file(path, text);
  free(text);
  cJSON_Delete(copy);
}
static void m_negative(cJSON* d) {
  cJSON_ReplaceItemInObject(cJSON_GetObjectItem(d, "total"), "bytes_in_use",
                            cJSON_CreateNumber(-5));
}
static void m_usage_null(cJSON* d) {
  cJSON_ReplaceItemInObject(cJSON_GetArrayItem(cJSON_GetObjectItem(d, "pools"), 0), "usage",
                            cJSON_CreateNull());
}
static void m_no_ledger(cJSON* d) { cJSON_DeleteItemFromObject(d, "ledger"); }
static void m_version(cJSON* d) { cJSON_ReplaceItemInObject(d, "version", cJSON_CreateNumber(2)); }
static void m_tag_number(cJSON* d) {
  cJSON_AddItemToArray(cJSON_GetObjectItem(d, "by_tag"), cJSON_CreateNumber(7));
}
/* Terminal controls in a pool's name: a screen clear, a cursor move, a C1
 * control (U+009B, the one-character CSI) and a newline that fakes a line. */
static void m_controls(cJSON* d) {
  cJSON* p;
  cJSON_ArrayForEach(p, cJSON_GetObjectItem(d, "pools")) {
    if (cJSON_GetArraySize(cJSON_GetObjectItem(p, "pages")) == 0) continue; /* not printed */
    cJSON_ReplaceItemInObject(p, "name", cJSON_CreateString("evil\x1b[2J\x1b[1;1H\xc2\x9b"
                                                            "31m\nfake line"));
    break;
  }
}

/* `cube memory` on damaged and hand-made files: each is refused (exit 1)
 * with a message that says what is wrong and where, never printed as a
 * summary of zeros; strings from the file reach the terminal without their
 * control characters. Before, a snapshot cut short was "not a cube memory
 * snapshot (no format)", a file missing every member printed a summary of
 * zeros with exit 0, a directory was "not a cube memory snapshot", and a
 * pool's name could drive the terminal. */
CUBE_TEST(memory_refuses_damaged_snapshots) {
  scratch("memory-damaged");
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &c));
  uint64_t seed = (uint64_t)time(NULL) * 2654435761u + 3u;
  cube_handle_t h[2];
  REQUIRE_OK(cube_client_empty(c, 1 + (size_t)(cube_test_rand(&seed) % (1u << 20)), &h[0]));
  REQUIRE_OK(cube_client_empty(c, 1 + (size_t)(cube_test_rand(&seed) % (8u << 20)), &h[1]));
  REQUIRE_OK(cube_handle_set_tag(h[1], "tagged"));
  char good[1200], bad[1200];
  snprintf(good, sizeof(good), "%s/snap.json", g_tmp);
  snprintf(bad, sizeof(bad), "%s/bad.json", g_tmp);
  REQUIRE_OK(cube_client_memory_snapshot(c, good));
  cube_handle_release_array(h, 2);
  cube_client_release(c);
  cube_shutdown();
  char* text = read_whole_file(good);
  REQUIRE(text != NULL);
  size_t len = strlen(text);
  cJSON* doc = cJSON_Parse(text);
  REQUIRE(doc != NULL);
  run_t r = tool("memory", good, NULL);
  CHECK_EQ_U64(r.rc, 0);
  CHECK(has(r.out, "tagged"));
  CHECK(!has(r.out, "cpu:0 (cpu:0")); /* the device's name carries its id already */
  run_free(&r);

  /* Cut short anywhere: not JSON, the place named. */
  size_t cut = 1 + (size_t)(cube_test_rand(&seed) % (len - 2));
  text[cut] = '\0';
  write_file(bad, text);
  r = tool("memory", bad, NULL);
  CHECK_EQ_U64(r.rc, 1);
  CHECK(has(r.err, "is not JSON: the parser stopped at byte"));
  CHECK(has(r.err, "cut short"));
  run_free(&r);
  unlink(bad);

  struct {
    void (*mutate)(cJSON*);
    const char* says;
  } cases[] = {
      {m_negative, "\"total.bytes_in_use\" is -5 where a count"},
      {m_usage_null, "\"pools[0].usage\" is null where an object was expected"},
      {m_no_ledger, "\"ledger\" is missing where an object was expected"},
      {m_version, "format version 2; this cube reads version 1"},
      {m_tag_number, "is 7 where an object was expected"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    write_mutated(bad, doc, cases[i].mutate);
    r = tool("memory", bad, NULL);
    CHECK_EQ_U64(r.rc, 1);
    CHECK(has(r.err, cases[i].says));
    CHECK(r.out[0] == '\0');
    run_free(&r);
    unlink(bad);
  }

  write_mutated(bad, doc, m_controls);
  r = tool("memory", bad, NULL);
  CHECK_EQ_U64(r.rc, 0);
  CHECK(has(r.out, "evil?[2J?[1;1H?31m?fake line"));
  CHECK(strchr(r.out, '\x1b') == NULL);
  CHECK(strstr(r.out, "\xc2\x9b") == NULL);
  CHECK(!has(r.out, "\nfake line"));
  run_free(&r);
  unlink(bad);

  write_file(bad, "");
  r = tool("memory", bad, NULL);
  CHECK_EQ_U64(r.rc, 1);
  CHECK(has(r.err, "is empty"));
  run_free(&r);
  r = tool("memory", g_tmp, NULL); /* a directory */
  CHECK_EQ_U64(r.rc, 1);
  CHECK(has(r.err, "cannot read"));
  CHECK(has(r.err, strerror(EISDIR)));
  run_free(&r);
  cJSON_Delete(doc);
  free(text);
  rm_tree(g_tmp);
}
