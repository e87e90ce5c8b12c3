/* Memory layout policies (docs/cubecl.md, "Layouts"): the size and strides of each tensor
 * and how several tensors pack into one buffer. Pure arithmetic: no memory is
 * touched, and every product is overflow-checked.
 *
 *   contiguous  size = prod(shape) * elem; row-major strides.
 *   pitched     width = last dim (1 for rank 0), height = prod(other dims);
 *               pitch = round_up(width * elem, align) with align = 1 for the
 *               Contiguous strategy and optimal_align(width, elem, A) for
 *               Optimized; size = height * pitch; strides[rank-2] = pitch/elem.
 *   packing     total = sum(round_up(size_i, A)); offset_i = the sum before i.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "base/status.h"
#include "cube/handle.h"
#include "platform/platform.h"

#define CUBE__LAYOUT_FN "cube_layout_compute"

static bool cube__is_pow2(uint64_t x) { return x && !(x & (x - 1)); }

static uint64_t cube__next_pow2(uint64_t x) {
  if (x <= 1) return 1;
  if (x > (UINT64_C(1) << 63)) return 0; /* does not fit */
  return UINT64_C(1) << (64 - __builtin_clzll(x - 1));
}

static uint64_t cube__gcd(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* CubeCL's optimal_align: elem when width is 1, else the next power of two of
 * the row's bytes clamped to [16, A] (A itself when A < 16). */
static uint64_t cube__optimal_align(uint64_t width, uint64_t elem, uint64_t buffer_align) {
  if (width == 1) return elem;
  uint64_t row = width * elem; /* checked by the caller */
  uint64_t align = row > buffer_align ? buffer_align : cube__next_pow2(row);
  if (align < 16) align = 16;
  if (align > buffer_align) align = buffer_align;
  return align;
}

static cube_status_t cube__layout_check_desc(const char* fn, const cube_layout_desc_t* d,
                                             size_t index) {
  if ((unsigned)d->strategy > (unsigned)CUBE_LAYOUT_OPTIMIZED)
    return CUBE_INVALID("%s: descs[%zu].strategy %d is not a cube_layout_strategy_t", fn, index,
                        (int)d->strategy);
  if (d->rank > CUBE_MAX_RANK)
    return CUBE_INVALID("%s: descs[%zu].rank %" PRIu32 " exceeds CUBE_MAX_RANK (%d)", fn, index,
                        d->rank, CUBE_MAX_RANK);
  if (d->elem_size == 0) return CUBE_INVALID("%s: descs[%zu].elem_size is 0", fn, index);
  for (uint32_t k = 0; k < d->rank; ++k)
    if (d->shape[k] == 0)
      return CUBE_INVALID("%s: descs[%zu].shape[%" PRIu32 "] is 0 (empty tensors are not allowed)",
                          fn, index, k);
  return CUBE_OK;
}

/* Size in bytes and strides (in elements) of one tensor. */
static cube_status_t cube__layout_one(cube_layout_policy_t policy, uint64_t buffer_align,
                                      const cube_layout_desc_t* d, size_t index,
                                      uint64_t strides[CUBE_MAX_RANK], uint64_t* out_size) {
  const char* fn = CUBE__LAYOUT_FN;
  CUBE_RETURN_IF_ERROR(cube__layout_check_desc(fn, d, index));
  const uint32_t rank = d->rank;
  const uint64_t elem = d->elem_size;

  if (policy == CUBE_LAYOUT_POLICY_CONTIGUOUS) {
    uint64_t numel = 1;
    for (uint32_t k = 0; k < rank; ++k) {
      uint64_t next;
      if (cube__mul_overflow_u64(numel, d->shape[k], &next))
        return CUBE_INVALID("%s: descs[%zu]: element count overflows at shape[%" PRIu32
                            "] (%" PRIu64 " x %" PRIu64 ")",
                            fn, index, k, numel, d->shape[k]);
      numel = next;
    }
    uint64_t size;
    if (cube__mul_overflow_u64(numel, elem, &size))
      return CUBE_INVALID("%s: descs[%zu]: size overflows (%" PRIu64 " elements x %" PRIu64
                          " bytes)",
                          fn, index, numel, elem);
    uint64_t s = 1;
    for (uint32_t k = rank; k-- > 0;) {
      strides[k] = s;
      s *= d->shape[k]; /* <= numel: cannot overflow */
    }
    *out_size = size;
    return CUBE_OK;
  }

  /* Pitched. */
  uint64_t width = rank ? d->shape[rank - 1] : 1;
  uint64_t height = 1;
  for (uint32_t k = 0; k + 1 < rank; ++k) {
    uint64_t next;
    if (cube__mul_overflow_u64(height, d->shape[k], &next))
      return CUBE_INVALID("%s: descs[%zu]: row count overflows at shape[%" PRIu32 "] (%" PRIu64
                          " x %" PRIu64 ")",
                          fn, index, k, height, d->shape[k]);
    height = next;
  }
  uint64_t row;
  if (cube__mul_overflow_u64(width, elem, &row))
    return CUBE_INVALID("%s: descs[%zu]: row size overflows (%" PRIu64 " elements x %" PRIu64
                        " bytes)",
                        fn, index, width, elem);
  uint64_t align = d->strategy == CUBE_LAYOUT_OPTIMIZED
                       ? cube__optimal_align(width, elem, buffer_align)
                       : 1;
  /* The pitch must hold whole elements; with power-of-two element sizes the
   * alignment already guarantees it, otherwise align to lcm(align, elem). */
  if (align % elem != 0) {
    uint64_t lcm;
    if (cube__mul_overflow_u64(align / cube__gcd(align, elem), elem, &lcm))
      return CUBE_INVALID("%s: descs[%zu]: pitch alignment overflows (align %" PRIu64
                          ", elem_size %" PRIu64 ")",
                          fn, index, align, elem);
    align = lcm;
  }
  /* Round up without forming row + align - 1, which can overflow even when the
   * rounded pitch fits (found by fuzz_layout). */
  uint64_t pitch = row;
  if (row % align != 0 && cube__add_overflow_u64(row, align - row % align, &pitch))
    return CUBE_INVALID("%s: descs[%zu]: pitch overflows (row %" PRIu64 " bytes, align %" PRIu64
                        ")",
                        fn, index, row, align);
  uint64_t size;
  if (cube__mul_overflow_u64(height, pitch, &size))
    return CUBE_INVALID("%s: descs[%zu]: size overflows (%" PRIu64 " rows x pitch %" PRIu64 ")",
                        fn, index, height, pitch);
  for (uint32_t k = 0; k < rank; ++k) strides[k] = 1;
  if (rank >= 2) {
    strides[rank - 2] = pitch / elem;
    for (uint32_t k = rank - 2; k-- > 0;) strides[k] = strides[k + 1] * d->shape[k + 1];
  }
  *out_size = size;
  return CUBE_OK;
}

static cube_status_t cube__layout_compute(cube_layout_policy_t policy, uint64_t alignment,
                                          size_t count, const cube_layout_desc_t* descs,
                                          uint64_t (*out_strides)[CUBE_MAX_RANK],
                                          uint64_t* out_offsets, uint64_t* out_sizes,
                                          uint64_t* out_total);

cube_status_t cube_layout_compute(cube_layout_policy_t policy, uint64_t alignment, size_t count,
                                  const cube_layout_desc_t* in_descs,
                                  uint64_t (*out_strides)[CUBE_MAX_RANK], uint64_t* out_offsets,
                                  uint64_t* out_sizes, uint64_t* out_total) {
  const char* fn = CUBE__LAYOUT_FN;
  if (policy != CUBE_LAYOUT_POLICY_CONTIGUOUS && policy != CUBE_LAYOUT_POLICY_PITCHED)
    return CUBE_INVALID("%s: policy %d is not a cube_layout_policy_t", fn, (int)policy);
  if (!cube__is_pow2(alignment))
    return CUBE_INVALID("%s: alignment %" PRIu64 " is not a power of two", fn, alignment);
  if (count > 0 && !in_descs) return CUBE_INVALID("%s: descs is NULL with count %zu", fn, count);
  /* The caller's layout of the descriptors (cube/cube.h, "Struct sizes");
   * nothing is copied when it is this library's. */
  const void* descs;
  void* owned;
  CUBE_RETURN_IF_ERROR(cube__struct_array_read(fn, "descs", &cube__struct_layout_desc, in_descs,
                                               count, &descs, &owned));
  cube_status_t st = cube__layout_compute(policy, alignment, count, descs, out_strides,
                                          out_offsets, out_sizes, out_total);
  free(owned);
  return st;
}

static cube_status_t cube__layout_compute(cube_layout_policy_t policy, uint64_t alignment,
                                          size_t count, const cube_layout_desc_t* descs,
                                          uint64_t (*out_strides)[CUBE_MAX_RANK],
                                          uint64_t* out_offsets, uint64_t* out_sizes,
                                          uint64_t* out_total) {
  const char* fn = CUBE__LAYOUT_FN;

  /* Pass 1: validate everything and compute the total, writing nothing. */
  uint64_t total = 0;
  for (size_t i = 0; i < count; ++i) {
    uint64_t strides[CUBE_MAX_RANK];
    uint64_t size = 0;
    CUBE_RETURN_IF_ERROR(cube__layout_one(policy, alignment, &descs[i], i, strides, &size));
    uint64_t next;
    if (size > UINT64_MAX - (alignment - 1) ||
        cube__add_overflow_u64(total, cube__round_up(size, alignment), &next))
      return CUBE_INVALID("%s: total size overflows at descs[%zu] (%" PRIu64 " + %" PRIu64
                          " bytes)",
                          fn, i, total, size);
    total = next;
  }

  /* Pass 2: write the results (cannot fail now). */
  uint64_t offset = 0;
  for (size_t i = 0; i < count; ++i) {
    uint64_t strides[CUBE_MAX_RANK] = {0};
    uint64_t size = 0;
    /* Validated in pass 1: returns CUBE_OK. */
    cube_status_free(cube__layout_one(policy, alignment, &descs[i], i, strides, &size));
    if (out_strides) memcpy(out_strides[i], strides, sizeof(strides));
    if (out_offsets) out_offsets[i] = offset;
    if (out_sizes) out_sizes[i] = size;
    offset += cube__round_up(size, alignment);
  }
  if (out_total) *out_total = total;
  return CUBE_OK;
}

bool cube_layout_strides_readable(cube_layout_policy_t policy, uint32_t rank,
                                  const uint64_t* shape, const uint64_t* strides) {
  if (policy != CUBE_LAYOUT_POLICY_CONTIGUOUS && policy != CUBE_LAYOUT_POLICY_PITCHED)
    return false;
  if (rank > CUBE_MAX_RANK) return false;
  if (rank == 0) return true;
  if (!shape || !strides) return false;
  if (strides[rank - 1] != 1) return false;
  for (uint32_t k = rank - 1; k-- > 0;) {
    uint64_t expected;
    if (cube__mul_overflow_u64(strides[k + 1], shape[k + 1], &expected)) return false;
    if (policy == CUBE_LAYOUT_POLICY_PITCHED && k == rank - 2) {
      if (strides[k] < expected) return false;
    } else if (strides[k] != expected) {
      return false;
    }
  }
  return true;
}

cube_status_t cube_layout_desc_initialize(cube_layout_strategy_t strategy, uint32_t rank,
                                          const uint64_t* shape, uint32_t elem_size,
                                          cube_layout_desc_t* out_desc) {
  const char* fn = "cube_layout_desc_initialize";
  if (!out_desc) return CUBE_INVALID("%s: out_desc is NULL", fn);
  if ((unsigned)strategy > (unsigned)CUBE_LAYOUT_OPTIMIZED)
    return CUBE_INVALID("%s: strategy %d is not a cube_layout_strategy_t", fn, (int)strategy);
  if (rank > CUBE_MAX_RANK)
    return CUBE_INVALID("%s: rank %" PRIu32 " exceeds CUBE_MAX_RANK (%d)", fn, rank,
                        CUBE_MAX_RANK);
  if (rank > 0 && !shape) return CUBE_INVALID("%s: shape is NULL with rank %" PRIu32, fn, rank);
  if (elem_size == 0) return CUBE_INVALID("%s: elem_size is 0", fn);
  for (uint32_t k = 0; k < rank; ++k)
    if (shape[k] == 0)
      return CUBE_INVALID("%s: shape[%" PRIu32 "] is 0 (empty tensors are not allowed)", fn, k);
  cube_layout_desc_t d;
  memset(&d, 0, sizeof(d));
  d.struct_size = sizeof(d);
  d.strategy = strategy;
  d.rank = rank;
  for (uint32_t k = 0; k < rank; ++k) d.shape[k] = shape[k];
  d.elem_size = elem_size;
  *out_desc = d;
  return CUBE_OK;
}

/* The deprecated spelling (cube/handle.h): same function, new name in its
 * messages. */
cube_status_t cube_layout_desc_init(cube_layout_strategy_t strategy, uint32_t rank,
                                    const uint64_t* shape, uint32_t elem_size,
                                    cube_layout_desc_t* out_desc) {
  return cube_layout_desc_initialize(strategy, rank, shape, elem_size, out_desc);
}
