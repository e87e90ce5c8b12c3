/* Small helpers shared by the examples: fail loudly with the status message. */
#ifndef CUBE_EXAMPLE_UTIL_H_
#define CUBE_EXAMPLE_UTIL_H_

#include <cube/cube.h>
#include <stdio.h>
#include <stdlib.h>

#define TRY(expr)                                                                 \
  do {                                                                            \
    cube_status_t s_ = (expr);                                                    \
    if (s_) {                                                                     \
      fprintf(stderr, "%s:%d: %s\n  [%s] %s\n", __FILE__, __LINE__, #expr,        \
              cube_status_code_name(cube_status_code(s_)), cube_status_message(s_)); \
      cube_status_free(s_);                                                       \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

static inline float example_rand(uint64_t* s) {
  *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
  return (float)((*s * 0x2545F4914F6CDD1Dull) >> 40) / (float)(1u << 24) - 0.5f;
}

#endif
