/* Tests of lost and recovered CUDA devices against the mock driver
 * (tests/mock_cuda): MOCK_SETUP, and the mock's fault functions found with
 * dlsym once cube has loaded it. Header-only (static inline). */
#ifndef CUBE_TEST_MOCK_CUDA_FAULTS_H_
#define CUBE_TEST_MOCK_CUDA_FAULTS_H_

#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cube/cube.h"

#ifdef CUBE_MOCK_CUDA_PATH
#define MOCK_SETUP(devices)                                    \
  do {                                                         \
    setenv("CUBE_CUDA_DRIVER", CUBE_MOCK_CUDA_PATH, 1);        \
    setenv("CUBE_MOCK_CUDA_DEVICES", (devices), 1);            \
  } while (0)
#else
#define MOCK_SETUP(devices) CUBE_SKIP("the CUDA backend is not built (no CUDA headers)")
#endif

/* The mock's test functions. */
typedef struct {
  void (*fail_sticky)(const char* name, long n, int code);
  void (*fail_sticky_on)(int device, const char* name, long n, int code);
  void (*fail_with)(const char* name, long n, int code);
  long (*lost_calls)(void);
  int (*lost)(int device);
  void (*restore)(int device);
  long (*resets)(void);
} mock_t;

/* Fills |m| (after the CUDA backend loaded the mock): false when the mock
 * is not there or lacks one of them. */
static inline bool mock_get(mock_t* m) {
  memset(m, 0, sizeof(*m));
#ifdef CUBE_MOCK_CUDA_PATH
  cube_status_t st = cube_backend_status(CUBE_BACKEND_CUDA);
  if (st) {
    fprintf(stderr, "cuda: %s\n", cube_status_message(st));
    cube_status_free(st);
    return false;
  }
  void* h = dlopen(CUBE_MOCK_CUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return false;
  m->fail_sticky = (void (*)(const char*, long, int))(uintptr_t)dlsym(h, "cube_mock_cuda_fail_sticky");
  m->fail_sticky_on =
      (void (*)(int, const char*, long, int))(uintptr_t)dlsym(h, "cube_mock_cuda_fail_sticky_on");
  m->fail_with = (void (*)(const char*, long, int))(uintptr_t)dlsym(h, "cube_mock_cuda_fail_with");
  m->lost_calls = (long (*)(void))(uintptr_t)dlsym(h, "cube_mock_cuda_lost_calls");
  m->lost = (int (*)(int))(uintptr_t)dlsym(h, "cube_mock_cuda_lost");
  m->restore = (void (*)(int))(uintptr_t)dlsym(h, "cube_mock_cuda_restore");
  m->resets = (long (*)(void))(uintptr_t)dlsym(h, "cube_mock_cuda_resets");
  dlclose(h); /* still loaded: cube holds it */
#endif
  return m->fail_sticky && m->fail_sticky_on && m->fail_with && m->lost_calls && m->lost &&
         m->restore && m->resets;
}

/* |n| pseudo-random bytes from |seed|. */
static inline void fill_random(void* p, size_t n, unsigned seed) {
  unsigned char* b = p;
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1103515245u + 12345u;
    b[i] = (unsigned char)(seed >> 16);
  }
}

#endif /* CUBE_TEST_MOCK_CUDA_FAULTS_H_ */
