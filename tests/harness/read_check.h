/* A read-back check for tests that use the public API: reads the whole view
 * of |h| and compares it with |expect|, printing where it first differs.
 * Header-only (static inline): the harness library itself does not link cube. */
#ifndef CUBE_TEST_READ_CHECK_H_
#define CUBE_TEST_READ_CHECK_H_

#include <stdio.h>
#include <string.h>

#include "cube/cube.h"

static inline int cube_test_read_equals(cube_client_t* c, cube_handle_t h, const void* expect,
                                        size_t n) {
  cube_bytes_t* b = NULL;
  cube_status_t s = cube_client_read_one(c, h, &b);
  if (s) {
    fprintf(stderr, "read: %s\n", cube_status_message(s));
    cube_status_free(s);
    return 0;
  }
  int ok = cube_bytes_size(b) == n && memcmp(cube_bytes_const_data(b), expect, n) == 0;
  if (!ok) {
    size_t first = 0;
    const unsigned char *x = (const unsigned char*)cube_bytes_const_data(b),
                        *y = (const unsigned char*)expect;
    while (first < n && first < cube_bytes_size(b) && x[first] == y[first]) ++first;
    fprintf(stderr, "read of %zu bytes differs (got %zu bytes, first difference at byte %zu)\n",
            n, cube_bytes_size(b), first);
  }
  cube_bytes_release(b);
  return ok;
}

/* A read of |h| that fails with DATA_LOST (its contents are not valid:
 * docs/failures.md) and whose message holds |why|; says what it got when
 * not. */
static inline int cube_test_read_lost(cube_client_t* c, cube_handle_t h, const char* why) {
  cube_bytes_t* b = NULL;
  cube_status_t s = cube_client_read_one(c, h, &b);
  if (!s) {
    fprintf(stderr, "read: %zu bytes, expected DATA_LOST (%s)\n", cube_bytes_size(b), why);
    cube_bytes_release(b);
    return 0;
  }
  int ok = cube_status_code(s) == CUBE_STATUS_DATA_LOST && strstr(cube_status_message(s), why);
  if (!ok) fprintf(stderr, "read: %s, expected DATA_LOST (%s)\n", cube_status_message(s), why);
  cube_status_free(s);
  return ok;
}

#endif /* CUBE_TEST_READ_CHECK_H_ */
