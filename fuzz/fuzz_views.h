/* fuzz_views.h: what fuzz_graph and fuzz_graph_auto share: two buffers of
 * 256 u32 on the CPU backend, views of them (16, 32 or 64 elements at
 * multiples of 16), a native kernel dst[i] = dst[i] * 3 + src[i] + k over
 * two views of one length, and the model of both buffers that the targets
 * keep as the eager calls would leave them. */
#ifndef CUBE_FUZZ_VIEWS_H_
#define CUBE_FUZZ_VIEWS_H_

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cube/cube.h"
#include "fuzz_input.h"

#define FV_ELEMS 256u

typedef struct fv_view {
  uint32_t base, start, len; /* in elements */
  cube_handle_t h;
  bool live;
} fv_view_t;

/* The buffers as the calls made so far leave them. */
static uint32_t fv_model[2][FV_ELEMS];

static inline bool fv_overlap(const fv_view_t* x, const fv_view_t* y) {
  return x->base == y->base && x->start < y->start + y->len && y->start < x->start + x->len;
}

static inline bool fv_same(const fv_view_t* x, const fv_view_t* y) {
  return x->base == y->base && x->start == y->start && x->len == y->len;
}

/* The two views of a launch have no model when they partly overlap (cubes
 * of the kernel race over them). */
static inline bool fv_launchable(const fv_view_t* dst, const fv_view_t* src) {
  return dst->len == src->len && (!fv_overlap(dst, src) || fv_same(dst, src));
}

static inline uint32_t* fv_at(const fv_view_t* v) { return &fv_model[v->base][v->start]; }

static int fv_step_kernel(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  if (n != 3) return 2;
  uint32_t* dst = args[0].buffer.data;
  const uint32_t* src = args[1].buffer.data;
  uint64_t len = args[0].buffer.len / 4;
  uint64_t cubes = (uint64_t)cube->cube_count[0];
  uint64_t lo = cube->cube_pos[0] * len / cubes, hi = (cube->cube_pos[0] + 1) * len / cubes;
  for (uint64_t i = lo; i < hi; ++i) dst[i] = dst[i] * 3u + src[i] + args[2].u32;
  return 0;
}

/* The kernel (buffer dst, buffer src (read only), u32 k). */
static inline cube_kernel_t* fv_kernel_create(const char* name) {
  static const cube_arg_kind_t kinds[] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32};
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof d);
  d.name = name;
  d.cube_dim = (cube_dim_t){1, 1, 1};
  d.arg_kinds = kinds;
  d.arg_count = 3;
  d.read_only_args = 2; /* src */
  d.cpu_fn = fv_step_kernel;
  cube_kernel_t* k = NULL;
  FZ_CHECK_OK(cube_kernel_create(&d, &k));
  return k;
}

/* Queues the kernel over |dst| and |src| in 1 to 3 cubes. */
static inline cube_status_t fv_launch(cube_client_t* c, cube_kernel_t* k, const fv_view_t* dst,
                                      const fv_view_t* src, uint32_t kv) {
  cube_arg_t args[3] = {{.kind = CUBE_ARG_BUFFER, .v.buffer = dst->h},
                        {.kind = CUBE_ARG_BUFFER, .v.buffer = src->h},
                        {.kind = CUBE_ARG_U32, .v.u32 = kv}};
  return cube_client_launch(c, k, cube_count_static(1 + kv % 3, 1, 1), 3, args);
}

/* What the kernel does, in the model. */
static inline void fv_model_launch(const fv_view_t* dst, const fv_view_t* src, uint32_t kv) {
  uint32_t tmp[64];
  memcpy(tmp, fv_at(src), dst->len * 4); /* src is dst or apart from it */
  uint32_t* d = fv_at(dst);
  for (uint32_t i = 0; i < dst->len; ++i) d[i] = d[i] * 3u + tmp[i] + kv;
}

/* Both buffers, filled (the model too), and |count| views decoded from the
 * input. */
static inline void fv_setup(cube_client_t* c, fz_t* in, cube_handle_t base[2], fv_view_t* views,
                            uint32_t count) {
  for (int b = 0; b < 2; ++b) {
    for (uint32_t i = 0; i < FV_ELEMS; ++i)
      fv_model[b][i] = (uint32_t)(i * 2654435761u + (uint32_t)b);
    FZ_CHECK_OK(cube_client_create_from_slice(c, fv_model[b], FV_ELEMS * 4, &base[b]));
  }
  for (uint32_t v = 0; v < count; ++v) {
    uint8_t x = fz_u8(in);
    views[v].base = x & 1;
    views[v].len = 16u << ((x >> 1) % 3);
    views[v].start = ((uint32_t)(x >> 3) * 16u) % (FV_ELEMS - views[v].len + 16) / 16 * 16;
    if (views[v].start + views[v].len > FV_ELEMS) views[v].start = FV_ELEMS - views[v].len;
    FZ_CHECK_OK(cube_handle_offset_view(base[views[v].base], (uint64_t)views[v].start * 4,
                                        (uint64_t)(FV_ELEMS - views[v].start - views[v].len) * 4,
                                        &views[v].h));
    views[v].live = true;
  }
}

/* Reads both buffers and compares them with the model (|what| names the
 * target in the message). */
static inline void fv_check(cube_client_t* c, const cube_handle_t base[2], const char* what) {
  cube_bytes_t* out[2] = {NULL, NULL};
  FZ_CHECK_OK(cube_client_read(c, 2, base, out));
  for (int b = 0; b < 2; ++b) {
    FZ_CHECK(cube_bytes_size(out[b]) == FV_ELEMS * 4);
    const uint32_t* got = cube_bytes_const_data(out[b]);
    for (uint32_t i = 0; i < FV_ELEMS; ++i)
      FZ_ASSERT(got[i] == fv_model[b][i], "%s: buffer %d element %u is %u, the model says %u",
                what, b, i, got[i], fv_model[b][i]);
    cube_bytes_release(out[b]);
  }
}

/* Releases the live views and both buffers, and waits for the device. */
static inline void fv_teardown(cube_client_t* c, cube_handle_t base[2], fv_view_t* views,
                               uint32_t count) {
  for (uint32_t v = 0; v < count; ++v)
    if (views[v].live) cube_handle_release(views[v].h);
  cube_handle_release(base[0]);
  cube_handle_release(base[1]);
  FZ_CHECK_OK(cube_client_sync(c));
}

#endif /* CUBE_FUZZ_VIEWS_H_ */
