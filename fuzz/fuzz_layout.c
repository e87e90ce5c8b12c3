/* fuzz_layout: cube_layout_compute and cube_layout_strides_readable
 * (include/cube/handle.h) on descriptors decoded from the input.
 *
 * Input: policy, alignment, count, then per descriptor strategy, rank, shape
 * and element size (small values are likely, any value is possible), then
 * a stride vector for a direct strides_readable probe.
 *
 * Checked: no crash; the status agrees with an independent model of the
 * policies (docs/cubecl.md, "Layouts") in 128-bit arithmetic; on success offsets are
 * aligned and increasing, sizes >= the dense size, tensors do not overlap,
 * total = sum of rounded sizes, the computed strides are readable under the
 * policy, and results do not depend on which out_ pointers are NULL. */
#include <string.h>

#include "cube/handle.h"
#include "cube/status.h"
#include "fuzz_input.h"

typedef unsigned __int128 u128;
#define U64MAX ((u128)UINT64_MAX)

/* Saturating multiply: anything past UINT64_MAX stays UINT64_MAX + 1. */
static u128 sat_mul(u128 a, u128 b) {
  if (a > U64MAX || b > U64MAX) return U64MAX + 1;
  u128 r = a * b; /* both < 2^64: no 128-bit overflow */
  return r > U64MAX ? U64MAX + 1 : r;
}

static u128 round_up(u128 x, u128 a) { return (x + a - 1) / a * a; }

static uint64_t gcd64(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

static uint64_t next_pow2(uint64_t x) {
  uint64_t p = 1;
  while (p < x) {
    if (p > (UINT64_C(1) << 62)) return 0;
    p <<= 1;
  }
  return p;
}

/* The documented optimal_align (CubeCL): elem when width is 1, else the next
 * power of two of the row's bytes clamped to [16, A] (A itself when A < 16). */
static uint64_t model_optimal_align(uint64_t width, uint64_t elem, uint64_t a) {
  if (width == 1) return elem;
  uint64_t row = width * elem; /* fits: checked by the caller */
  uint64_t align = row > a ? a : next_pow2(row);
  if (align < 16) align = 16;
  if (align > a) align = a;
  return align;
}

/* Model of one tensor: false when the library must refuse it. */
static bool model_one(cube_layout_policy_t policy, uint64_t a, const cube_layout_desc_t* d,
                      uint64_t* out_size, bool* ambiguous) {
  if ((unsigned)d->strategy > 1u || d->rank > CUBE_MAX_RANK || d->elem_size == 0) return false;
  for (uint32_t k = 0; k < d->rank; ++k)
    if (d->shape[k] == 0) return false;
  u128 elem = d->elem_size;
  if (policy == CUBE_LAYOUT_POLICY_CONTIGUOUS) {
    u128 numel = 1;
    for (uint32_t k = 0; k < d->rank; ++k) numel = sat_mul(numel, d->shape[k]);
    u128 size = sat_mul(numel, elem);
    if (size > U64MAX) return false;
    *out_size = (uint64_t)size;
    return true;
  }
  u128 width = d->rank ? d->shape[d->rank - 1] : 1;
  u128 height = 1;
  for (uint32_t k = 0; k + 1 < d->rank; ++k) height = sat_mul(height, d->shape[k]);
  if (height > U64MAX) return false;
  u128 row = sat_mul(width, elem);
  if (row > U64MAX) return false;
  u128 align = d->strategy == CUBE_LAYOUT_OPTIMIZED
                   ? model_optimal_align((uint64_t)width, d->elem_size, a)
                   : 1;
  if (align % elem) {
    align = align / gcd64((uint64_t)align, d->elem_size) * elem;
    if (align > U64MAX) return false;
  }
  u128 pitch = round_up(row, align);
  if (pitch > U64MAX) return false;
  /* The library computes round_up as (row + align - 1) / align * align and
   * refuses when row + align - 1 overflows, although the rounded pitch may
   * still fit when align is not a power of two (reported). */
  if (row + align - 1 > U64MAX) *ambiguous = true;
  u128 size = sat_mul(height, pitch);
  if (size > U64MAX) return false;
  *out_size = (uint64_t)size;
  return true;
}

/* Reference readability (the header's definition). */
static bool model_readable(cube_layout_policy_t policy, uint32_t rank, const uint64_t* shape,
                           const uint64_t* strides) {
  if (policy != CUBE_LAYOUT_POLICY_CONTIGUOUS && policy != CUBE_LAYOUT_POLICY_PITCHED)
    return false;
  if (rank > CUBE_MAX_RANK) return false;
  if (rank == 0) return true;
  if (strides[rank - 1] != 1) return false;
  for (uint32_t k = rank - 1; k-- > 0;) {
    u128 expected = (u128)strides[k + 1] * shape[k + 1];
    if (expected > U64MAX) return false;
    if (policy == CUBE_LAYOUT_POLICY_PITCHED && k == rank - 2) {
      if ((u128)strides[k] < expected) return false;
    } else if ((u128)strides[k] != expected) {
      return false;
    }
  }
  return true;
}

static uint64_t decode_dim(fz_t* f) {
  uint8_t b = fz_u8(f);
  switch (b >> 5) {
    case 0:
    case 1:
    case 2:
      return (uint64_t)(b & 15) + 1; /* 1..16 */
    case 3:
      return (uint64_t)fz_u8(f) + 1;
    case 4:
      return (uint64_t)fz_u16(f) + 1;
    case 5:
      return (uint64_t)fz_u32(f);
    case 6:
      return (b & 1) ? 0 : UINT64_C(1) << (b & 63);
    default:
      return fz_u64(f);
  }
}

static uint32_t decode_elem(fz_t* f) {
  static const uint32_t common[] = {1, 2, 4, 8, 16, 3, 6, 12, 24, 5, 7, 0};
  uint8_t b = fz_u8(f);
  if (b < 0xF0) return common[b % (sizeof(common) / sizeof(common[0]))];
  return fz_u32(f);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fz_t f = fz_make(data, size);
  uint8_t pb = fz_u8(&f);
  cube_layout_policy_t policy = (pb & 0x80) ? (cube_layout_policy_t)(pb & 0x7F)
                                            : (cube_layout_policy_t)(pb & 1);
  uint8_t ab = fz_u8(&f);
  uint64_t alignment = (ab & 0x80) ? (uint64_t)(ab & 0x7F) : UINT64_C(1) << (ab % 64);
  uint8_t cb = fz_u8(&f);
  size_t count = (cb & 0x80) ? 0 : (size_t)(cb % 8) + 1;

  cube_layout_desc_t descs[8];
  memset(descs, 0, sizeof(descs));
  for (size_t i = 0; i < count; ++i) {
    uint8_t sb = fz_u8(&f);
    descs[i].strategy = sb == 0xFF ? (cube_layout_strategy_t)fz_u8(&f)
                                   : (cube_layout_strategy_t)(sb & 1);
    uint8_t rb = fz_u8(&f);
    descs[i].rank = rb == 0xFF ? fz_u8(&f) : (uint32_t)(rb % (CUBE_MAX_RANK + 1));
    uint32_t stored = descs[i].rank < CUBE_MAX_RANK ? descs[i].rank : CUBE_MAX_RANK;
    for (uint32_t k = 0; k < stored; ++k) descs[i].shape[k] = decode_dim(&f);
    descs[i].elem_size = decode_elem(&f);
  }

  /* Model. */
  bool valid = (policy == CUBE_LAYOUT_POLICY_CONTIGUOUS || policy == CUBE_LAYOUT_POLICY_PITCHED) &&
               alignment && !(alignment & (alignment - 1));
  uint64_t msizes[8] = {0};
  u128 mtotal = 0;
  bool ambiguous = false;
  for (size_t i = 0; valid && i < count; ++i) {
    if (!model_one(policy, alignment, &descs[i], &msizes[i], &ambiguous)) {
      valid = false;
      break;
    }
    mtotal += round_up(msizes[i], alignment);
    if (mtotal > U64MAX) valid = false;
  }

  uint64_t strides[8][CUBE_MAX_RANK];
  uint64_t offsets[8], sizes[8], total = 0;
  memset(strides, 0xAB, sizeof(strides));
  memset(offsets, 0xAB, sizeof(offsets));
  memset(sizes, 0xAB, sizeof(sizes));
  cube_status_t st = cube_layout_compute(policy, alignment, count, count ? descs : NULL, strides,
                                         offsets, sizes, &total);
  cube_status_code_t code = cube_status_code(st);
  FZ_ASSERT(code == CUBE_STATUS_OK || code == CUBE_STATUS_INVALID_ARGUMENT,
            "unexpected status %s: %s", cube_status_code_name(code), cube_status_message(st));
  if (ambiguous && valid && code != CUBE_STATUS_OK) {
    cube_status_free(st);
    return 0;
  }
  FZ_ASSERT(valid == (code == CUBE_STATUS_OK), "model says %s, library says %s: %s",
            valid ? "valid" : "invalid", cube_status_code_name(code), cube_status_message(st));
  if (st) {
    FZ_ASSERT(cube_status_message(st)[0] != '\0', "error without a message");
    cube_status_free(st);
  } else {
    FZ_ASSERT(total == (uint64_t)mtotal, "total %llu, model %llu", (unsigned long long)total,
              (unsigned long long)(uint64_t)mtotal);
    u128 sum = 0;
    for (size_t i = 0; i < count; ++i) {
      const cube_layout_desc_t* d = &descs[i];
      FZ_ASSERT(offsets[i] % alignment == 0, "offset[%zu] %llu not aligned to %llu", i,
                (unsigned long long)offsets[i], (unsigned long long)alignment);
      FZ_ASSERT(offsets[i] == (uint64_t)sum, "offset[%zu] %llu, expected %llu", i,
                (unsigned long long)offsets[i], (unsigned long long)(uint64_t)sum);
      FZ_ASSERT(sizes[i] == msizes[i], "size[%zu] %llu, model %llu", i,
                (unsigned long long)sizes[i], (unsigned long long)msizes[i]);
      u128 dense = d->elem_size;
      for (uint32_t k = 0; k < d->rank; ++k) dense = sat_mul(dense, d->shape[k]);
      FZ_ASSERT((u128)sizes[i] >= dense, "size[%zu] %llu below the dense size", i,
                (unsigned long long)sizes[i]);
      if (i + 1 < count) {
        FZ_ASSERT((u128)offsets[i] + sizes[i] <= (u128)offsets[i + 1] || sizes[i] == 0,
                  "tensor %zu [%llu, +%llu) overlaps tensor %zu at %llu", i,
                  (unsigned long long)offsets[i], (unsigned long long)sizes[i], i + 1,
                  (unsigned long long)offsets[i + 1]);
        FZ_ASSERT(offsets[i] < offsets[i + 1], "offsets not increasing at %zu", i);
      }
      sum += round_up(sizes[i], alignment);
      FZ_ASSERT(cube_layout_strides_readable(policy, d->rank, d->shape, strides[i]),
                "computed strides of tensor %zu are not readable under policy %d", i,
                (int)policy);
      FZ_ASSERT(model_readable(policy, d->rank, d->shape, strides[i]),
                "computed strides of tensor %zu do not match the policy", i);
      /* The last addressed element lies inside the tensor's bytes. */
      u128 last = 0;
      for (uint32_t k = 0; k < d->rank; ++k) last += (u128)(d->shape[k] - 1) * strides[i][k];
      FZ_ASSERT((last + 1) * d->elem_size <= (u128)sizes[i],
                "tensor %zu addresses past its size %llu", i, (unsigned long long)sizes[i]);
    }
    FZ_ASSERT(sum == (u128)total, "total is not the sum of rounded sizes");

    /* NULL outputs give the same answer. */
    uint64_t total2 = 0;
    st = cube_layout_compute(policy, alignment, count, descs, NULL, NULL, NULL, &total2);
    FZ_ASSERT(st == CUBE_OK && total2 == total, "NULL outputs changed the result");
    st = cube_layout_compute(policy, alignment, count, descs, NULL, NULL, NULL, NULL);
    FZ_ASSERT(st == CUBE_OK, "all-NULL outputs failed");
  }
  if (code != CUBE_STATUS_OK && count) {
    /* A failed call writes nothing. */
    for (size_t i = 0; i < count; ++i)
      FZ_ASSERT(offsets[i] == UINT64_C(0xABABABABABABABAB) &&
                    sizes[i] == UINT64_C(0xABABABABABABABAB),
                "a failed call wrote outputs");
  }

  /* Direct probe of strides_readable with fuzzed strides. */
  if (count) {
    const cube_layout_desc_t* d = &descs[0];
    uint64_t probe[CUBE_MAX_RANK];
    uint8_t how = fz_u8(&f);
    uint32_t r = d->rank < CUBE_MAX_RANK ? d->rank : CUBE_MAX_RANK;
    for (uint32_t k = 0; k < r; ++k) {
      if (how & 1) {
        probe[k] = decode_dim(&f);
      } else {
        /* Row-major, then perturbed. */
        uint64_t s = 1;
        for (uint32_t j = k + 1; j < r; ++j) s *= d->shape[j];
        probe[k] = s + (uint64_t)(fz_u8(&f) % 3) - 1;
      }
    }
    cube_layout_policy_t pp = (how & 2) ? policy : (cube_layout_policy_t)((how >> 2) & 1);
    bool got = cube_layout_strides_readable(pp, d->rank, d->shape, probe);
    bool want = model_readable(pp, d->rank, d->shape, probe);
    FZ_ASSERT(got == want, "strides_readable says %d, model %d (rank %u)", got, want, d->rank);
    FZ_ASSERT(!cube_layout_strides_readable(pp, d->rank ? d->rank : 1, NULL, NULL),
              "NULL shape/strides readable");
  }
  return 0;
}
