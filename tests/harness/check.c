#include "check.h"

#include <stdarg.h>

int cube_test_failures = 0;
int cube_test_skipped = 0;

#define CUBE_TEST_MAX 512
static cube_test_case_t cube_tests[CUBE_TEST_MAX];
static int cube_test_count = 0;

void cube_test_register(const char* name, cube_test_fn fn) {
  if (cube_test_count < CUBE_TEST_MAX) cube_tests[cube_test_count++] = (cube_test_case_t){name, fn};
}

int cube_test_case_count(void) { return cube_test_count; }
const char* cube_test_case_name(int i) {
  return i >= 0 && i < cube_test_count ? cube_tests[i].name : NULL;
}

int cube_test_check_status(const char* file, int line, const char* expr, cube_status_t s,
                           cube_status_code_t code, ...) {
  int ok = 1;
  if (cube_status_code(s) != code) {
    fprintf(stderr, "%s:%d: %s: expected %s, got %s: %s\n", file, line, expr,
            cube_status_code_name(code), cube_status_code_name(cube_status_code(s)),
            cube_status_message(s));
    ok = 0;
  } else {
    va_list ap;
    va_start(ap, code);
    const char* word;
    while ((word = va_arg(ap, const char*)) != NULL) {
      if (!strstr(cube_status_message(s), word)) {
        fprintf(stderr, "%s:%d: %s: message lacks '%s': %s\n", file, line, expr, word,
                cube_status_message(s));
        ok = 0;
      }
    }
    va_end(ap);
  }
  if (!ok) cube_test_failures++;
  cube_status_free(s);
  return ok;
}

/* Hook for suites that need set-up per process (e.g. the conformance suite
 * choosing a backend): defined weak, overridden by the suite. */
__attribute__((weak)) int cube_test_main_hook(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  return 0;
}

int main(int argc, char** argv) {
  int rc = cube_test_main_hook(&argc, &argv);
  if (rc) return rc;
  if (argc > 1 && strcmp(argv[1], "--list") == 0) {
    for (int i = 0; i < cube_test_count; ++i) printf("%s\n", cube_tests[i].name);
    return 0;
  }
  int ran = 0, failed = 0, skipped = 0;
  for (int i = 0; i < cube_test_count; ++i) {
    if (argc > 1 && strcmp(argv[1], cube_tests[i].name) != 0) continue;
    int before = cube_test_failures;
    cube_test_skipped = 0;
    cube_tests[i].fn();
    ++ran;
    if (cube_test_skipped && cube_test_failures == before) {
      printf("[skip] %s\n", cube_tests[i].name);
      ++skipped;
      if (argc > 1) return 77;
    } else {
      if (cube_test_failures != before) ++failed;
      printf("[%s] %s\n", cube_test_failures == before ? " ok " : "FAIL", cube_tests[i].name);
    }
    fflush(stdout);
  }
  if (ran == 0) {
    fprintf(stderr, "no test case named '%s'\n", argc > 1 ? argv[1] : "");
    return 2;
  }
  printf("%d passed, %d failed, %d skipped\n", ran - failed - skipped, failed, skipped);
  return cube_test_failures ? 1 : 0;
}
