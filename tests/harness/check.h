/* A small always-on test harness (asserts stay on in Release builds).
 *
 *   CUBE_TEST(name) { CHECK(x == 1); CHECK_OK(cube_call(...)); }
 *
 * Each test file is one executable; `prog <case>` runs one case, `prog` runs
 * all, `prog --list` lists them. CMake registers one CTest entry per case by
 * scanning the source for CUBE_TEST(. A case returns early with CUBE_SKIP
 * (exit code 77, CTest SKIP_RETURN_CODE) when what it needs is absent.
 */
#ifndef CUBE_TEST_CHECK_H_
#define CUBE_TEST_CHECK_H_

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cube/device.h"
#include "cube/status.h"

/* Devices of |backend|, counted the one documented way (enumeration with
 * capacity 0); 0 when that fails (a value that is not a backend). */
static inline size_t cube_test_device_count(cube_backend_t backend) {
  size_t n = 0;
  cube_status_t s = cube_enumerate_devices(backend, NULL, 0, &n);
  if (s) {
    cube_status_free(s);
    return 0;
  }
  return n;
}

typedef void (*cube_test_fn)(void);
typedef struct {
  const char* name;
  cube_test_fn fn;
} cube_test_case_t;

extern int cube_test_failures;
extern int cube_test_skipped;
void cube_test_register(const char* name, cube_test_fn fn);
/* The registered cases (for suites that list or filter them). */
int cube_test_case_count(void);
const char* cube_test_case_name(int i);

#define CUBE_TEST(name)                                                         \
  static void cube_test_##name(void);                                           \
  __attribute__((constructor)) static void cube_test_reg_##name(void) {         \
    cube_test_register(#name, cube_test_##name);                                \
  }                                                                             \
  static void cube_test_##name(void)

#define CHECK(cond)                                                             \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);  \
      cube_test_failures++;                                                     \
    }                                                                           \
  } while (0)

/* Fails and leaves the case at once. */
#define REQUIRE(cond)                                                           \
  do {                                                                          \
    if (!(cond)) {                                                              \
      fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond);\
      cube_test_failures++;                                                     \
      return;                                                                   \
    }                                                                           \
  } while (0)

#define CHECK_EQ_U64(a, b)                                                      \
  do {                                                                          \
    uint64_t cube_a_ = (uint64_t)(a), cube_b_ = (uint64_t)(b);                  \
    if (cube_a_ != cube_b_) {                                                   \
      fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %s (%" PRIu64 " vs %" PRIu64 ")\n", \
              __FILE__, __LINE__, #a, #b, cube_a_, cube_b_);                    \
      cube_test_failures++;                                                     \
    }                                                                           \
  } while (0)

/* Expects CUBE_OK; prints the status message otherwise. */
#define CHECK_OK(expr)                                                          \
  do {                                                                          \
    cube_status_t cube_s_ = (expr);                                             \
    if (cube_s_ != CUBE_OK) {                                                   \
      fprintf(stderr, "%s:%d: %s failed: [%s] %s\n", __FILE__, __LINE__, #expr, \
              cube_status_code_name(cube_status_code(cube_s_)),                 \
              cube_status_message(cube_s_));                                    \
      cube_status_free(cube_s_);                                                \
      cube_test_failures++;                                                     \
    }                                                                           \
  } while (0)

#define REQUIRE_OK(expr)                                                        \
  do {                                                                          \
    cube_status_t cube_s_ = (expr);                                             \
    if (cube_s_ != CUBE_OK) {                                                   \
      fprintf(stderr, "%s:%d: %s failed: [%s] %s\n", __FILE__, __LINE__, #expr, \
              cube_status_code_name(cube_status_code(cube_s_)),                 \
              cube_status_message(cube_s_));                                    \
      cube_status_free(cube_s_);                                                \
      cube_test_failures++;                                                     \
      return;                                                                   \
    }                                                                           \
  } while (0)

/* Expects an error with |code| whose message contains every listed word
 * (pass NULL-terminated substrings). */
int cube_test_check_status(const char* file, int line, const char* expr, cube_status_t s,
                           cube_status_code_t code, ...);
#define CHECK_STATUS(expr, code, ...)                                           \
  cube_test_check_status(__FILE__, __LINE__, #expr, (expr), (code), __VA_ARGS__, (const char*)NULL)

#define CUBE_SKIP(...)                                                          \
  do {                                                                          \
    fprintf(stderr, "SKIP: ");                                                  \
    fprintf(stderr, __VA_ARGS__);                                               \
    fprintf(stderr, "\n");                                                      \
    cube_test_skipped = 1;                                                      \
    return;                                                                     \
  } while (0)

/* Deterministic pseudo-random numbers (xorshift64*), seeded per case. */
static inline uint64_t cube_test_rand(uint64_t* state) {
  uint64_t x = *state ? *state : 0x9E3779B97F4A7C15ull;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545F4914F6CDD1Dull;
}
static inline void cube_test_fill_random(void* p, size_t n, uint64_t seed) {
  uint8_t* b = (uint8_t*)p;
  uint64_t s = seed | 1;
  for (size_t i = 0; i < n; ++i) b[i] = (uint8_t)(cube_test_rand(&s) >> 56);
}

#endif /* CUBE_TEST_CHECK_H_ */
