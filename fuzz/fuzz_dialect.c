/* fuzz_dialect: the kernel dialect on source text decoded from the input
 * (src/kernel/dialect.h): cube__dialect_parse, cube__dialect_generate for
 * every target (the CPU target with its barrier split, dialect_split.c, and
 * with fibers), cube__dialect_cpu_scratch_size and cube__dialect_log_filter.
 *
 * Input: one flags byte (bits 0-1 the execution mode, 2 a define list, 3 a
 * CUBE_CPU_FIBER_STACK define of fuzzed text, 4 CUBE_CPU_FIBERS, 5 the entry
 * is the fixed name "k" rather than the one after the first CUBE_KERNEL( of
 * the source), then the kernel's source up to the first zero byte, then a
 * compiler log for the log filter.
 *
 * Checked: no crash, no sanitizer report, no leak; every failure is a status
 * with a message and leaves the out-parameter NULL; a parsed signature's
 * entry is the entry asked for and its parameter count is at most
 * CUBE_MAX_KERNEL_ARGS; a generated unit is one NUL-terminated text that
 * carries cube_kernel_entry and the "#line 1" marker for the user's source;
 * the scratch size is 0 for one unit and when the kernel does not use
 * sync_cube. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cube/status.h"
#include "fuzz_input.h"
#include "kernel/dialect.h"

#define CHECK(cond) FZ_CHECK(cond)

/* The identifier after the first "CUBE_KERNEL(" of |src| (spaces skipped),
 * at most |size| - 1 characters; "k" when there is none. */
static void entry_of(const char* src, char* out, size_t size) {
  snprintf(out, size, "k");
  const char* p = strstr(src, "CUBE_KERNEL(");
  if (!p) return;
  p += strlen("CUBE_KERNEL(");
  while (*p == ' ' || *p == '\t' || *p == '\n') ++p;
  size_t n = 0;
  while (n + 1 < size && ((p[n] >= 'a' && p[n] <= 'z') || (p[n] >= 'A' && p[n] <= 'Z') ||
                          (p[n] >= '0' && p[n] <= '9') || p[n] == '_'))
    ++n;
  if (n == 0) return;
  memcpy(out, p, n);
  out[n] = '\0';
}

static void check_failure(cube_status_t st, const char* what) {
  const char* m = cube_status_message(st);
  if (!m || !m[0]) {
    fprintf(stderr, "fuzz_dialect: %s failed with no message\n", what);
    abort();
  }
  cube_status_free(st);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fz_t in = fz_make(data, size);
  const uint8_t flags = fz_u8(&in);
  /* The source: up to the first zero byte; the rest is the log. */
  size_t src_len = 0;
  while (src_len < in.n && in.p[src_len] != 0) ++src_len;
  char* source = malloc(src_len + 1);
  if (!source) return 0;
  memcpy(source, in.p, src_len);
  source[src_len] = '\0';
  size_t log_len = src_len < in.n ? in.n - src_len - 1 : 0;
  char* log = malloc(log_len + 1);
  if (!log) {
    free(source);
    return 0;
  }
  if (log_len) memcpy(log, in.p + src_len + 1, log_len);
  log[log_len] = '\0';

  char entry[160];
  if (flags & 0x20)
    snprintf(entry, sizeof entry, "k");
  else
    entry_of(source, entry, sizeof entry);

  const cube_execution_mode_t mode = (cube_execution_mode_t)((flags & 3) % 3);
  cube_define_t defines[4];
  uint32_t define_count = 0;
  char stack_text[32];
  if (flags & 0x04) {
    defines[define_count++] = (cube_define_t){"WIDTH", "4"};
    defines[define_count++] = (cube_define_t){"T", "float"};
  }
  if (flags & 0x08) {
    /* A fuzzed value: the first line of the log, at most 31 characters. */
    size_t n = 0;
    while (n < sizeof stack_text - 1 && log[n] && log[n] != '\n') ++n;
    memcpy(stack_text, log, n);
    stack_text[n] = '\0';
    defines[define_count++] = (cube_define_t){"CUBE_CPU_FIBER_STACK", stack_text};
  }
  if (flags & 0x10) defines[define_count++] = (cube_define_t){"CUBE_CPU_FIBERS", "1"};

  cube__signature_t sig;
  cube_status_t st = cube__dialect_parse(source, entry, &sig);
  if (st) {
    check_failure(st, "cube__dialect_parse");
  } else {
    CHECK(strcmp(sig.entry, entry) == 0);
    CHECK(sig.count <= CUBE_MAX_KERNEL_ARGS);
    const cube__target_t targets[3] = {CUBE__TARGET_CPU, CUBE__TARGET_CUDA, CUBE__TARGET_OPENCL};
    for (int t = 0; t < 3; ++t) {
      char* text = (char*)1;
      st = cube__dialect_generate(targets[t], &sig, source, define_count ? defines : NULL,
                                  define_count, mode, &text);
      if (st) {
        CHECK(text == NULL);
        check_failure(st, "cube__dialect_generate");
        continue;
      }
      CHECK(text != NULL);
      CHECK(strstr(text, "cube_kernel_entry") != NULL);
      CHECK(strstr(text, "#line 1 \"") != NULL);
      free(text);
    }
    CHECK(cube__dialect_cpu_scratch_size(&sig, 1, defines, define_count) == 0);
    const uint64_t s = cube__dialect_cpu_scratch_size(&sig, 256, defines, define_count);
    if (!sig.uses_sync_cube) CHECK(s == 0);
  }

  /* The log filter takes any text; aliases of the fuzzed log's own words. */
  cube__log_alias_t aliases[2] = {{"/tmp/cube-unit.c", "unit.c"}, {"kernel", "k"}};
  char* filtered = cube__dialect_log_filter(log, entry, source, aliases, 2);
  free(filtered);

  free(log);
  free(source);
  return 0;
}
