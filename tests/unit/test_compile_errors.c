// cube-test-libs: cube_static
/* Kernel compile errors name the user's file, line and column only
 * (docs/errors.md, "Kernel compile errors"): never a line of the preludes
 * (cc's "<stdin>:421", clang's "<scratch space>"), generated code
 * ("<entry>.entry.c", ".split.c", ".entry.cl"), a temporary path (PoCL's
 * "<Spelling=/tmp/...>") or the generator's names; columns are right on
 * OpenCL although its entry is rewritten.
 *
 * The log filter first, on logs the compilers wrote (so these run
 * everywhere); then broken kernels at known lines and columns through every
 * backend present: the CPU backend with clang and with gcc, OpenCL (PoCL),
 * CUDA's NVRTC (over the mock driver: NVRTC runs on the CPU). A backend or
 * compiler that is absent skips its case. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "cube/cube.h"
#include "kernel/dialect.h"

/* NVRTC and PoCL (with its LLVM) keep allocations until exit; not ours to
 * report. */
const char* __lsan_default_suppressions(void);
const char* __lsan_default_suppressions(void) {
  return "leak:libnvrtc\nleak:libpocl\nleak:libOpenCL\nleak:libLLVM\nleak:libclang\nleak:libhwloc\n";
}

/* Texts that must never reach the user. */

static const char* const k_internal[] = {
    "<stdin>", "<scratch space>", ".entry.c", ".entry.cl", ".split.c", "/tmp/", "Spelling",
    "cube__kernel_", "cube_kernel_entry", "CUBE__EARR", "CUBE__ENTRY", "cube__split",
    "generated.", ".cu\"", ".cu(", ".cu:", "tempfile", NULL};

/* Every diagnostic line of |msg| is at "<entry>.cube" and nothing internal
 * shows; prints |msg| when not. */
static bool clean_log(const char* msg, const char* entry) {
  bool ok = true;
  for (int i = 0; k_internal[i]; ++i)
    if (strstr(msg, k_internal[i])) {
      fprintf(stderr, "message holds '%s'\n", k_internal[i]);
      ok = false;
    }
  char file[96];
  snprintf(file, sizeof(file), "%s.cube", entry);
  for (const char* line = msg; line && *line;) {
    const char* end = strchr(line, '\n');
    size_t n = end ? (size_t)(end - line) : strlen(line);
    static const char* const sev[] = {": error: ", ": warning", ": note: ", ": fatal error: "};
    for (int s = 0; s < 4; ++s) {
      const char* hit = memchr(line, ':', n) ? strstr(line, sev[s]) : NULL;
      if (hit && hit < line + n && strncmp(line, file, strlen(file)) != 0) {
        fprintf(stderr, "diagnostic not at %s: %.*s\n", file, (int)n, line);
        ok = false;
      }
    }
    line = end ? end + 1 : NULL;
  }
  if (!ok) fprintf(stderr, "---\n%s\n---\n", msg);
  return ok;
}

static bool filter_is(const char* log, const char* entry, const char* source, const char* want) {
  char* got = cube__dialect_log_filter(log, entry, source, NULL, 0);
  bool ok = got && strcmp(got, want) == 0;
  if (!ok) fprintf(stderr, "filtered:\n%s\nwanted:\n%s\n", got ? got : "(null)", want);
  free(got);
  return ok;
}

//===----------------------------------------------------------------------===//
// The filter, on the compilers' own logs
//===----------------------------------------------------------------------===//

/* gcc reports a misused prelude macro inside the prelude, and the user's
 * line only in a note: the error moves to the note's location. */
CUBE_TEST(filter_gcc_macro_error_moves_to_the_user_line) {
  CHECK(filter_is("mac.cube: In function \xe2\x80\x98" "cube__kernel_mac\xe2\x80\x99:\n"
                  "<stdin>:61:79: error: incompatible types when assigning to type \xe2\x80\x98"
                  "float\xe2\x80\x99 from type \xe2\x80\x98" "float *\xe2\x80\x99\n"
                  "mac.cube:4:5: note: in expansion of macro \xe2\x80\x98"
                  "CUBE_STORE\xe2\x80\x99\n",
                  "mac", NULL,
                  "mac.cube: In function \xe2\x80\x98mac\xe2\x80\x99:\n"
                  "mac.cube:4:5: error: incompatible types when assigning to type \xe2\x80\x98"
                  "float\xe2\x80\x99 from type \xe2\x80\x98" "float *\xe2\x80\x99\n"
                  "mac.cube:4:5: note: in expansion of macro \xe2\x80\x98"
                  "CUBE_STORE\xe2\x80\x99"));
  /* The prelude's code quoted under such an error goes with its location. */
  CHECK(filter_is("<stdin>:61:77: error: bad thing\n"
                  "#define CUBE_STORE(a, i, v) x\n"
                  "        ^\n"
                  "k.cube:4:5: note: in expansion of macro 'CUBE_STORE'\n"
                  "  CUBE_STORE(y, i, y);\n"
                  "  ^\n",
                  "k", NULL,
                  "k.cube:4:5: error: bad thing\n"
                  "k.cube:4:5: note: in expansion of macro 'CUBE_STORE'\n"
                  "  CUBE_STORE(y, i, y);\n"
                  "  ^"));
  /* A note into the prelude goes; errors in the generated entry go when the
   * user's line has one (they follow from it). */
  CHECK(filter_is("tk.cube:1:28: error: unknown type name 'flaot'\n"
                  "<stdin>:416:25: note: in definition of macro 'CUBE_KERNEL'\n"
                  "tk.cube:1:17: note: in expansion of macro 'CUBE_ARRAY'\n"
                  "tk.entry.c:7:3: error: unknown type name 'flaot'\n"
                  "tk.entry.c: In function 'cube_kernel_entry':\n"
                  "tk.entry.c:20:16: error: 'flaot' undeclared\n",
                  "tk", NULL,
                  "tk.cube:1:28: error: unknown type name 'flaot'\n"
                  "tk.cube:1:17: note: in expansion of macro 'CUBE_ARRAY'"));
}

/* clang's notes into the prelude and its scratch space go with the code they
 * quote; the user's quoted lines and carets stay; counts go. */
CUBE_TEST(filter_clang_notes_into_the_prelude_go) {
  CHECK(filter_is("atk.cube:1:123: error: too few arguments to function call, expected 2, have 1\n"
                  "  q = cube_atomic_add_u32(&c[0]);\n"
                  "      ~~~~~~~~~~~~~~~~~~~      ^\n"
                  "<stdin>:500:1: note: 'cube_atomic_add_u32' declared here\n"
                  "CUBE__ATOMIC_INT(u32, uint32_t)\n"
                  "^\n"
                  "<stdin>:464:15: note: expanded from macro 'CUBE__ATOMIC_INT'\n"
                  "  CUBE__PFN T cube_atomic_add_##sfx(T* p, T v) {        \\\n"
                  "              ^\n"
                  "<scratch space>:32:1: note: expanded from here\n"
                  "cube_atomic_add_u32\n"
                  "^\n"
                  "1 error generated.\n",
                  "atk", NULL,
                  "atk.cube:1:123: error: too few arguments to function call, expected 2, have 1\n"
                  "  q = cube_atomic_add_u32(&c[0]);\n"
                  "      ~~~~~~~~~~~~~~~~~~~      ^"));
  /* The same error twice (the CPU unit holds a kernel with barriers twice:
   * as written and split) is shown once. */
  CHECK(filter_is("s.cube:6:22: error: use of undeclared identifier 'zz'\n"
                  "  y[u] = zz;\n"
                  "         ^\n"
                  "s.cube:6:22: error: use of undeclared identifier 'zz'\n"
                  "  y[u] = zz;\n"
                  "         ^\n"
                  "2 errors generated.\n",
                  "s", NULL,
                  "s.cube:6:22: error: use of undeclared identifier 'zz'\n"
                  "  y[u] = zz;\n"
                  "         ^"));
}

/* PoCL: "error: <loc> <Spelling=<loc>>: ..." becomes "<loc>: error: ...",
 * the spelling winning when it is the user's, the temporary path gone. */
CUBE_TEST(filter_pocl_layout_and_spelling) {
  CHECK(filter_is("error: tk.cube:1:1 <Spelling=tk.cube:1:28>: unknown type name 'flaot'\n"
                  "error: tk.entry.cl:1:2 <Spelling=tk.entry.cl:1:19>: unknown type name 'flaot'\n"
                  "Device pthread-cpu failed to build the program\n",
                  "tk", NULL,
                  "tk.cube:1:28: error: unknown type name 'flaot'\n"
                  "Device pthread-cpu failed to build the program"));
  CHECK(filter_is("error: mac.cube:4:5 <Spelling=/tmp/pocl/tempfile_RTFPcX.cl:61:77>: assigning to "
                  "'__global float' from incompatible type\n",
                  "mac", NULL,
                  "mac.cube:4:5: error: assigning to '__global float' from incompatible type"));
}

/* NVRTC: "<file>(<line>): ..." becomes "<file>:<line>:<col>: ...", the
 * column read from the caret under the quoted line (also past a tab, which
 * NVRTC expands); the summary naming the unit goes. */
CUBE_TEST(filter_nvrtc_column_from_the_caret) {
  const char* src = "CUBE_KERNEL(b, CUBE_ARRAY(float, y)) {\n"
                    "  uint32_t i = ABSOLUTE_POS;\n"
                    "\ty[i] = nope + 1.0f;\n"
                    "  y[0] = nope2;\n"
                    "}\n";
  CHECK(filter_is("b.cube(3): error: identifier \"nope\" is undefined\n"
                  "          y[i] = nope + 1.0f;\n"
                  "                 ^\n"
                  "\n"
                  "b.cube(4): error: identifier \"nope2\" is undefined\n"
                  "    y[0] = nope2;\n"
                  "           ^\n"
                  "\n"
                  "b.cu(120): warning #177-D: variable \"cube__t\" was declared but never "
                  "referenced\n"
                  "\n"
                  "2 errors detected in the compilation of \"b.cu\".\n",
                  "b", src,
                  "b.cube:3:9: error: identifier \"nope\" is undefined\n"
                  "          y[i] = nope + 1.0f;\n"
                  "                 ^\n"
                  "\n"
                  "b.cube:4:10: error: identifier \"nope2\" is undefined\n"
                  "    y[0] = nope2;\n"
                  "           ^"));
  /* A quote that is not the user's line: no column rather than a wrong one. */
  CHECK(filter_is("b.cube(4): error: x\n  something else\n     ^\n", "b", src,
                  "b.cube:4: error: x\n  something else\n     ^"));
}

/* An error only in generated code (no error at the user's lines) is kept,
 * without the generated code's location; tool lines stay, the temporary
 * directory the caller names does not. */
CUBE_TEST(filter_generated_only_and_aliases) {
  CHECK(filter_is("<stdin>:12:3: error: something the prelude did\n"
                  "  cube__x = 1;\n"
                  "  ^\n",
                  "k", NULL, "k.cube: error: something the prelude did (in the code cube generates "
                  "around the kernel)"));
  cube__log_alias_t alias = {"/tmp/cube-cc-Ab12Cd", "<temporary directory>"};
  char* got = cube__dialect_log_filter(
      "/usr/bin/ld: cannot open output file /tmp/cube-cc-Ab12Cd/k.so: No space left on device\n"
      "clang: error: linker command failed with exit code 1\n",
      "k", NULL, &alias, 1);
  REQUIRE(got != NULL);
  CHECK(strcmp(got, "/usr/bin/ld: cannot open output file <temporary directory>/k.so: No space "
                    "left on device\n"
                    "clang: error: linker command failed with exit code 1") == 0);
  free(got);
  CHECK(cube__dialect_log_filter(NULL, "k", NULL, NULL, 0) == NULL);
  got = cube__dialect_log_filter("", "k", NULL, NULL, 0);
  CHECK(got && !*got);
  free(got);
}

//===----------------------------------------------------------------------===//
// Broken kernels through the backends
//===----------------------------------------------------------------------===//

typedef struct broken {
  const char* entry;
  const char* source;
  uint32_t line;
  const char* at;     /* the text the error is at (its column), or NULL: line only */
  const char* word;   /* in the compiler's message */
  bool col_on_nvrtc;  /* NVRTC puts its caret at |at| too */
} broken_t;

static const broken_t k_broken[] = {
    /* Line 1, after the signature: the OpenCL rewrite of the arrays sits on
     * this line. */
    {"col_k",
     "CUBE_KERNEL(col_k, CUBE_ARRAY(float, y), CUBE_ARRAY(const float, x), uint32_t n) { "
     "if (n) y[0] = x[0] + undeclared_a; }\n",
     1, "undeclared_a", "undeclared_a", true},
    /* A prelude macro misused: cc reports it inside the prelude. */
    {"mac_k",
     "CUBE_KERNEL(mac_k, CUBE_ARRAY(float, y)) {\n"
     "  uint32_t i = ABSOLUTE_POS;\n"
     "  CUBE_STORE(y, i, y);\n"
     "}\n",
     3, "CUBE_STORE", "error", true},
    /* A prelude function called wrongly: notes point into the prelude. */
    {"args_k",
     "CUBE_KERNEL(args_k, CUBE_ARRAY(uint32_t, c)) {\n"
     "  uint32_t old = cube_atomic_add_u32(&c[0]);\n"
     "  c[1] = old;\n"
     "}\n",
     2, NULL, "error", false},
    /* An error in a kernel with a barrier (the CPU splits its body). */
    {"sync_k",
     "CUBE_KERNEL(sync_k, CUBE_ARRAY(uint32_t, y)) {\n"
     "  CUBE_SHARED(uint32_t, t, 64);\n"
     "  uint32_t u = UNIT_POS_X;\n"
     "  t[u] = u;\n"
     "  sync_cube();\n"
     "  y[u] = t[63 - u] + not_declared_6;\n"
     "}\n",
     6, "not_declared_6", "not_declared_6", true},
    /* An unknown element type: the generated entry uses it too. */
    {"type_k",
     "CUBE_KERNEL(type_k, CUBE_ARRAY(flaot, y)) {\n"
     "  y[0] = 1;\n"
     "}\n",
     1, "flaot", "flaot", false},
};

/* Column of |at| in line |line| of |src| (1-based). */
static uint32_t column_of(const char* src, uint32_t line, const char* at) {
  const char* p = src;
  for (uint32_t l = 1; l < line; ++l) p = strchr(p, '\n') + 1;
  return (uint32_t)(strstr(p, at) - p) + 1;
}

/* Compiles every broken kernel on |c| and checks its message; |nvrtc| says
 * whose column convention applies. */
static void compile_broken(cube_client_t* c, bool nvrtc) {
  for (size_t i = 0; i < sizeof(k_broken) / sizeof(k_broken[0]); ++i) {
    const broken_t* b = &k_broken[i];
    cube_kernel_desc_t d;
    memset(&d, 0, sizeof(d));
    d.source = b->source;
    d.entry = b->entry;
    d.cube_dim = (cube_dim_t){64, 1, 1};
    cube_kernel_t* k = NULL;
    REQUIRE_OK(cube_kernel_create(&d, &k));
    for (int m = 0; m < 2; ++m) { /* two modes: two units */
      cube_execution_mode_t mode = m ? CUBE_EXEC_VALIDATE : CUBE_EXEC_CHECKED;
      cube_status_t s = cube_client_precompile(c, 1, &k, mode);
      CHECK_EQ_U64(cube_status_code(s), CUBE_STATUS_COMPILATION_FAILED);
      const char* msg = cube_status_message(s);
      char want[128];
      if (b->at && (!nvrtc || b->col_on_nvrtc))
        snprintf(want, sizeof(want), "\n%s.cube:%u:%u: ", b->entry, b->line,
                 column_of(b->source, b->line, b->at));
      else
        snprintf(want, sizeof(want), "\n%s.cube:%u:", b->entry, b->line);
      bool at_ok = strstr(msg, want) != NULL;
      if (!at_ok) fprintf(stderr, "wanted '%s' in:\n%s\n", want + 1, msg);
      CHECK(at_ok);
      CHECK(strstr(msg, b->word) != NULL);
      CHECK(clean_log(msg, b->entry));
      cube_status_free(s);
    }
    cube_kernel_release(k);
  }
}

static bool on_path(const char* prog) {
  const char* path = getenv("PATH");
  if (!path) return false;
  char buf[4096];
  snprintf(buf, sizeof(buf), "%s", path);
  for (char* dir = strtok(buf, ":"); dir; dir = strtok(NULL, ":")) {
    char full[4200];
    snprintf(full, sizeof(full), "%s/%s", dir, prog);
    if (access(full, X_OK) == 0) return true;
  }
  return false;
}

static void cpu_with(const char* cc) {
  if (!on_path(cc)) CUBE_SKIP("%s is not on PATH", cc);
  setenv("CUBE_CC", cc, 1);
  cube_client_t* c = NULL;
  cube_device_id_t cpu0 = {CUBE_BACKEND_CPU, 0};
  REQUIRE_OK(cube_client_load(cpu0, &c));
  compile_broken(c, false);
  cube_client_release(c);
  cube_shutdown();
}

CUBE_TEST(cpu_clang_names_user_lines_only) { cpu_with("clang"); }
CUBE_TEST(cpu_gcc_names_user_lines_only) { cpu_with("gcc"); }

CUBE_TEST(opencl_names_user_lines_and_columns) {
  cube_status_t s = cube_backend_status(CUBE_BACKEND_OPENCL);
  if (s || cube_test_device_count(CUBE_BACKEND_OPENCL) == 0) {
    cube_status_free(s);
    CUBE_SKIP("no OpenCL device");
  }
  cube_client_t* c = NULL;
  cube_device_id_t cl0 = {CUBE_BACKEND_OPENCL, 0};
  REQUIRE_OK(cube_client_load(cl0, &c));
  compile_broken(c, false);
  cube_client_release(c);
  cube_shutdown();
}

CUBE_TEST(cuda_nvrtc_names_user_lines_and_columns) {
#ifndef CUBE_MOCK_CUDA_PATH
  CUBE_SKIP("the CUDA backend is not built (no CUDA headers)");
#else
  setenv("CUBE_CUDA_DRIVER", CUBE_MOCK_CUDA_PATH, 1);
  setenv("CUBE_MOCK_CUDA_DELAY_US", "0", 1);
  cube_client_t* c = NULL;
  cube_device_id_t cu0 = {CUBE_BACKEND_CUDA, 0};
  REQUIRE_OK(cube_client_load(cu0, &c));
  /* NVRTC present? A kernel that compiles says. */
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.source = "CUBE_KERNEL(ok_k, CUBE_ARRAY(float, y)) { y[0] = 1.0f; }\n";
  d.entry = "ok_k";
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cube_kernel_create(&d, &k));
  cube_status_t s = cube_client_precompile(c, 1, &k, CUBE_EXEC_CHECKED);
  cube_kernel_release(k);
  if (s) {
    bool absent = cube_status_code(s) == CUBE_STATUS_UNAVAILABLE;
    fprintf(stderr, "%s\n", cube_status_message(s));
    cube_status_free(s);
    cube_client_release(c);
    cube_shutdown();
    if (absent) CUBE_SKIP("no NVRTC");
    CHECK(!"a valid kernel compiles with NVRTC");
    return;
  }
  compile_broken(c, true);
  cube_client_release(c);
  cube_shutdown();
#endif
}
