/* cube_cpu_compiler_info: the CPU backend's C compiler, its version, its
 * flags, and whether it vectorises a unit loop, by its own report on a probe
 * kernel generated as every dialect kernel is. See cube/cache.h. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cpu/cpu_compiler.h"
#include "base/abi.h"
#include "base/options.h"
#include "base/status.h"
#include "cube/cache.h"
#include "kernel/dialect.h"

/* The probe: a saxpy guarded by a scalar bound, as users write it. */
static const char cube__cc_probe_source[] =
    "CUBE_KERNEL(saxpy_probe, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a,\n"
    "            uint32_t n) {\n"
    "  uint32_t i = ABSOLUTE_POS;\n"
    "  if (i < n) CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "}\n";

/* The last answer, for the compiler it was about. */
static pthread_mutex_t cube__cci_lock = PTHREAD_MUTEX_INITIALIZER;
static cube_cpu_compiler_info_t cube__cci;
static char cube__cci_identity[1024];

static void cube__cci_copy(char* dst, size_t cap, const char* src, size_t n) {
  if (n >= cap) n = cap - 1;
  memcpy(dst, src, n);
  dst[n] = '\0';
}

/* The first line of |log| that contains |needle| (and |also|, when given)
 * into |dst|; false when none does. */
static bool cube__cci_line(const char* log, const char* needle, const char* also, char* dst,
                           size_t cap) {
  for (const char* line = log; line && *line;) {
    const char* end = strchr(line, '\n');
    size_t n = end ? (size_t)(end - line) : strlen(line);
    const char* hit = strstr(line, needle);
    if (hit && hit < line + n) {
      const char* hit2 = also ? strstr(line, also) : line;
      if (hit2 && hit2 < line + n) {
        cube__cci_copy(dst, cap, line, n);
        return true;
      }
    }
    line = end ? end + 1 : NULL;
  }
  return false;
}

static cube_status_t cube__cci_probe(cube_cpu_compiler_info_t* out) {
  const char* cc = NULL;
  CUBE_RETURN_IF_ERROR(cube__cpu_compiler(&cc, NULL));
  cube__cci_copy(out->command, sizeof(out->command), cc, strlen(cc));
  size_t at = 0;
  for (const char* const* f = cube__cpu_cc_flags(); *f; ++f) {
    int w = snprintf(out->flags + at, sizeof(out->flags) - at, "%s%s", at ? " " : "", *f);
    if (w < 0 || (size_t)w >= sizeof(out->flags) - at) break;
    at += (size_t)w;
  }
  /* The version. */
  static const char* const version_args[] = {"--version", NULL};
  char* log = NULL;
  bool ok = false;
  CUBE_RETURN_IF_ERROR(cube__cpu_cc_capture(false, version_args, NULL, &log, &ok));
  const char* nl = strchr(log, '\n');
  cube__cci_copy(out->version, sizeof(out->version), log, nl ? (size_t)(nl - log) : strlen(log));
  bool clang = strstr(out->version, "clang") != NULL;
  free(log);
  /* The probe's unit, compiled to assembly with the compiler's report. */
  cube__signature_t sig;
  CUBE_RETURN_IF_ERROR(cube__dialect_parse(cube__cc_probe_source, "saxpy_probe", &sig));
  char* text = NULL;
  CUBE_RETURN_IF_ERROR(cube__dialect_generate(CUBE__TARGET_CPU, &sig, cube__cc_probe_source, NULL,
                                              0, CUBE_EXEC_CHECKED, &text));
  const char* gcc_args[] = {"-fopt-info-vec-optimized", "-S", "-x", "c", "-", "-o", "/dev/null",
                            NULL};
  const char* clang_args[] = {"-Rpass=loop-vectorize", "-S", "-x", "c", "-", "-o", "/dev/null",
                              NULL};
  /* -S overrides -shared; the flags' -shared is harmless here. */
  cube_status_t st = cube__cpu_cc_capture(true, clang ? clang_args : gcc_args, text, &log, &ok);
  free(text);
  if (st) return st;
  out->unit_loop_vectorised = 0;
  if (!ok) {
    char first[400] = "";
    const char* nl2 = strchr(log, '\n');
    cube__cci_copy(first, sizeof(first), log, nl2 ? (size_t)(nl2 - log) : strlen(log));
    snprintf(out->report, sizeof(out->report), "the probe did not compile: %s", first);
  } else if (clang ? cube__cci_line(log, "vectorized loop", NULL, out->report, sizeof(out->report))
                   : cube__cci_line(log, "loop vectorized", "saxpy_probe.", out->report,
                                    sizeof(out->report))) {
    out->unit_loop_vectorised = 1;
  } else {
    snprintf(out->report, sizeof(out->report),
             "no report of a vectorised loop (%s with %s)", out->version,
             clang ? "-Rpass=loop-vectorize" : "-fopt-info-vec-optimized");
  }
  free(log);
  return CUBE_OK;
}

cube_status_t cube_cpu_compiler_info(cube_cpu_compiler_info_t* out_info) {
  const char* fn = "cube_cpu_compiler_info";
  if (!out_info) return CUBE_INVALID("%s: out_info is NULL", fn);
  /* A struct_size too small to be written is refused before the probe (a
   * compile) runs: cube__struct_write below says the same with no cost. */
  size_t want = out_info->struct_size;
  if (want != 0 && want < sizeof(size_t))
    return cube__struct_write(fn, "out_info->struct_size", &cube__struct_cpu_compiler_info,
                              out_info, NULL);
  CUBE_RETURN_IF_ERROR(cube__options_check(fn));
  const char* identity = NULL;
  cube_status_t st = cube__cpu_compiler(NULL, &identity);
  if (st) return cube__status_annotate(st, "%s", fn);
  cube_cpu_compiler_info_t info;
  pthread_mutex_lock(&cube__cci_lock);
  if (strcmp(cube__cci_identity, identity) != 0) {
    memset(&info, 0, sizeof(info));
    st = cube__cci_probe(&info);
    if (!st) {
      cube__cci = info;
      cube__cci_copy(cube__cci_identity, sizeof(cube__cci_identity), identity, strlen(identity));
    }
  }
  info = cube__cci;
  pthread_mutex_unlock(&cube__cci_lock);
  if (st) return cube__status_annotate(st, "%s", fn);
  info.struct_size = sizeof(info);
  return cube__struct_write(fn, "out_info->struct_size", &cube__struct_cpu_compiler_info, out_info,
                            &info);
}
