/* Restorable buffers' host copies on every backend (docs/failures.md,
 * "Recovery"): cube_client_read_restorable gives the contents a recovery
 * would write back (the creating upload, then the last checkpoint), the part
 * a view covers, without the device; a buffer that is not restorable is
 * refused. Random contents, odd sizes, several threads checkpointing and
 * reading at once. (A lost device's copies are read in
 * tests/unit/test_cuda_recover.c, over the mock driver.) */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cts.h"

enum { RN = 3001 }; /* bytes: odd */

/* 1 when the host copy of |h| holds the |n| bytes at |want|. */
static int copy_equals(cube_client_t* c, cube_handle_t h, const void* want, size_t n) {
  cube_bytes_t* b = NULL;
  cube_status_t s = cube_client_read_restorable(c, h, &b);
  if (s) {
    fprintf(stderr, "cube_client_read_restorable: %s\n", cube_status_message(s));
    cube_status_free(s);
    return 0;
  }
  int ok = cube_bytes_size(b) == n && memcmp(cube_bytes_const_data(b), want, n) == 0;
  if (!ok) fprintf(stderr, "host copy: %zu bytes, %zu expected, or contents differ\n",
                   cube_bytes_size(b), n);
  cube_bytes_release(b);
  return ok;
}

CUBE_TEST(restorable_host_copy_follows_checkpoints) {
  CTS_CLIENT(c);
  unsigned char* a = malloc(RN);
  unsigned char* b = malloc(RN);
  REQUIRE(a && b);
  cube_test_fill_random(a, RN, 0x5eed01);
  cube_test_fill_random(b, RN, 0x5eed02);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_restorable(c, a, RN, &h));
  /* The copy is the caller's data as it was: changing it after changes nothing. */
  a[0] ^= 0xFF;
  a[RN - 1] ^= 0x0F;
  CHECK(!copy_equals(c, h, a, RN));
  a[0] ^= 0xFF;
  a[RN - 1] ^= 0x0F;
  CHECK(copy_equals(c, h, a, RN));
  CHECK(cts_read_equals(c, h, a, RN));
  /* A write changes the buffer, not its copy, until a checkpoint. */
  REQUIRE_OK(cube_client_write(c, h, b, RN));
  CHECK(cts_read_equals(c, h, b, RN));
  CHECK(copy_equals(c, h, a, RN));
  REQUIRE_OK(cube_client_checkpoint(c, h));
  CHECK(copy_equals(c, h, b, RN));
  /* A view reads its part of the copy. */
  cube_handle_t v;
  REQUIRE_OK(cube_handle_offset_view(h, 17, 101, &v));
  CHECK(copy_equals(c, v, b + 17, RN - 17 - 101));
  /* A plain buffer has no copy. */
  cube_handle_t p;
  REQUIRE_OK(cube_client_create_from_slice(c, a, RN, &p));
  cube_bytes_t* out = (cube_bytes_t*)a; /* must come back NULL */
  CHECK_STATUS(cube_client_read_restorable(c, p, &out), CUBE_STATUS_FAILED_PRECONDITION,
               "cube_client_read_restorable", "not restorable");
  CHECK(out == NULL);
  /* Checkpointed, it has one. */
  REQUIRE_OK(cube_client_checkpoint(c, p));
  CHECK(copy_equals(c, p, a, RN));
  CHECK_STATUS(cube_client_read_restorable(c, h, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_read_restorable", "out_bytes");
  CHECK_STATUS(cube_client_read_restorable(NULL, h, &out), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_read_restorable");
  cube_handle_release(v);
  cube_handle_release(p);
  cube_handle_t gone = h;
  cube_handle_release(h);
  CHECK_STATUS(cube_client_read_restorable(c, gone, &out), CUBE_STATUS_NOT_FOUND,
               "cube_client_read_restorable");
  free(a);
  free(b);
  CTS_END(c);
}

/* One thread writes patterns into a buffer and checkpoints each while three
 * others read its copy: every copy read is one whole pattern, never a mix (a
 * reader never sees a copy being replaced). */
typedef struct {
  cube_client_t* c;
  cube_handle_t h;
  int id;
  int ok;
} rs_worker_t;

static void rs_pattern(unsigned char* p, int id) {
  for (size_t i = 0; i < RN; ++i) p[i] = (unsigned char)(id * 37 + (int)(i % 251));
}

static void* rs_main(void* arg) {
  rs_worker_t* w = arg;
  unsigned char* mine = malloc(RN);
  unsigned char* other = malloc(RN);
  w->ok = mine && other;
  for (int round = 0; w->ok && round < 40; ++round) {
    if (w->id == 0) {
      /* The writer: one write and its checkpoint, on this thread's stream. */
      rs_pattern(mine, 1 + round);
      if (cube_status_consume(cube_client_write(w->c, w->h, mine, RN)) ||
          cube_status_consume(cube_client_checkpoint(w->c, w->h)))
        w->ok = 0;
    } else {
      cube_bytes_t* b = NULL;
      if (cube_status_consume(cube_client_read_restorable(w->c, w->h, &b))) {
        w->ok = 0;
        break;
      }
      const unsigned char* d = cube_bytes_const_data(b);
      /* One of the patterns written (or the first), whole. */
      int found = -1;
      for (int id = 0; id <= 40 && found < 0; ++id) {
        rs_pattern(other, id);
        if (memcmp(other, d, RN) == 0) found = id;
      }
      if (found < 0) w->ok = 0;
      cube_bytes_release(b);
    }
  }
  free(mine);
  free(other);
  return NULL;
}

CUBE_TEST(restorable_host_copy_whole_under_threads) {
  CTS_CLIENT(c);
  unsigned char* p = malloc(RN);
  REQUIRE(p);
  rs_pattern(p, 0);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_restorable(c, p, RN, &h));
  enum { T = 4 };
  rs_worker_t w[T];
  pthread_t th[T];
  for (int i = 0; i < T; ++i) {
    w[i] = (rs_worker_t){c, h, i, 0};
    REQUIRE(pthread_create(&th[i], NULL, rs_main, &w[i]) == 0);
  }
  for (int i = 0; i < T; ++i) {
    pthread_join(th[i], NULL);
    CHECK(w[i].ok);
  }
  cube_handle_release(h);
  free(p);
  CTS_END(c);
}
