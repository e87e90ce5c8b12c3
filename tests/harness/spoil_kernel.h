/* A CPU kernel of one buffer argument whose every launch fails on the runner
 * (its function returns 9, "returned error 9"): the buffer it is launched
 * over is spoiled (taint, docs/failures.md). For tests of the public API;
 * header-only (static inline): the harness library itself does not link
 * cube. */
#ifndef CUBE_TEST_SPOIL_KERNEL_H_
#define CUBE_TEST_SPOIL_KERNEL_H_

#include <stdint.h>

#include "cube/cube.h"

static inline int cube_test_spoil_fn(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args,
                                     uint32_t n) {
  (void)cube;
  (void)args;
  (void)n;
  return 9;
}

/* The kernel "spoil" (the caller releases it). */
static inline cube_status_t cube_test_spoil_kernel(cube_kernel_t** out) {
  static const cube_arg_kind_t kinds[1] = {CUBE_ARG_BUFFER};
  cube_kernel_desc_t d;
  cube_kernel_desc_initialize(&d);
  d.name = "spoil";
  d.cube_dim = (cube_dim_t){1, 1, 1};
  d.arg_kinds = kinds;
  d.arg_count = 1;
  d.cpu_fn = cube_test_spoil_fn;
  return cube_kernel_create(&d, out);
}

#endif /* CUBE_TEST_SPOIL_KERNEL_H_ */
