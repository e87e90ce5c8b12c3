/* Element-wise reductions of collectives, for every element type and op.
 * Integers wrap (computed in the unsigned type); f16 and bf16 go through
 * float and are rounded to nearest even. */
#include <math.h>
#include <string.h>

#include "collective/collective.h"

const char* cube_reduce_op_name(cube_reduce_op_t op) {
  switch (op) {
    case CUBE_REDUCE_SUM: return "sum";
    case CUBE_REDUCE_MEAN: return "mean";
    case CUBE_REDUCE_MAX: return "max";
    case CUBE_REDUCE_MIN: return "min";
    case CUBE_REDUCE_PROD: return "prod";
  }
  return NULL;
}

//===----------------------------------------------------------------------===//
// 16-bit floats
//===----------------------------------------------------------------------===//

static float cube__f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else { /* subnormal: normalise */
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while (!(man & 0x400u));
      bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

static uint16_t cube__f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return (uint16_t)(sign | 0x7e00u); /* NaN */
  if (absx >= 0x47800000u) return (uint16_t)(sign | 0x7c00u); /* overflow or inf */
  if (absx < 0x38800000u) {                                    /* subnormal or zero */
    if (absx < 0x33000000u) return (uint16_t)sign;
    uint32_t e = absx >> 23;
    uint32_t man = (absx & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14..24 */
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return (uint16_t)(sign | half);
  }
  uint32_t h = ((absx >> 13) - ((127 - 15) << 10));
  uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h; /* may carry into inf: right */
  return (uint16_t)(sign | h);
}

static float cube__bf16_to_f32(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

static uint16_t cube__f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof(x));
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* NaN stays NaN */
  uint32_t round = 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)((x + round) >> 16);
}

//===----------------------------------------------------------------------===//
// Combine
//===----------------------------------------------------------------------===//

/* Integers: T the storage type, U its unsigned twin (wrapping sum/prod). */
#define CUBE__INT_COMBINE(name, T, U)                                                  \
  static void name(cube_reduce_op_t op, T* restrict a, const T* restrict b, uint64_t n) {\
    switch (op) {                                                                      \
      case CUBE_REDUCE_SUM:                                                            \
      case CUBE_REDUCE_MEAN:                                                           \
        for (uint64_t i = 0; i < n; ++i) a[i] = (T)((U)a[i] + (U)b[i]);                \
        break;                                                                         \
      case CUBE_REDUCE_PROD:                                                           \
        for (uint64_t i = 0; i < n; ++i) a[i] = (T)((U)a[i] * (U)b[i]);                \
        break;                                                                         \
      case CUBE_REDUCE_MAX:                                                            \
        for (uint64_t i = 0; i < n; ++i) a[i] = b[i] > a[i] ? b[i] : a[i];             \
        break;                                                                         \
      case CUBE_REDUCE_MIN:                                                            \
        for (uint64_t i = 0; i < n; ++i) a[i] = b[i] < a[i] ? b[i] : a[i];             \
        break;                                                                         \
      default: break;                                                                  \
    }                                                                                  \
  }

CUBE__INT_COMBINE(cube__combine_u8, uint8_t, uint8_t)
CUBE__INT_COMBINE(cube__combine_i8, int8_t, uint8_t)
CUBE__INT_COMBINE(cube__combine_u32, uint32_t, uint32_t)
CUBE__INT_COMBINE(cube__combine_i32, int32_t, uint32_t)
CUBE__INT_COMBINE(cube__combine_u64, uint64_t, uint64_t)
CUBE__INT_COMBINE(cube__combine_i64, int64_t, uint64_t)

/* Floats: MAX/MIN propagate NaN (as NCCL's fmax does not; documented). */
#define CUBE__FLOAT_COMBINE(name, T)                                                   \
  static void name(cube_reduce_op_t op, T* restrict a, const T* restrict b, uint64_t n) {\
    switch (op) {                                                                      \
      case CUBE_REDUCE_SUM:                                                            \
      case CUBE_REDUCE_MEAN:                                                           \
        for (uint64_t i = 0; i < n; ++i) a[i] += b[i];                                 \
        break;                                                                         \
      case CUBE_REDUCE_PROD:                                                           \
        for (uint64_t i = 0; i < n; ++i) a[i] *= b[i];                                 \
        break;                                                                         \
      case CUBE_REDUCE_MAX:                                                            \
        for (uint64_t i = 0; i < n; ++i) a[i] = (b[i] > a[i] || b[i] != b[i]) ? b[i] : a[i]; \
        break;                                                                         \
      case CUBE_REDUCE_MIN:                                                            \
        for (uint64_t i = 0; i < n; ++i) a[i] = (b[i] < a[i] || b[i] != b[i]) ? b[i] : a[i]; \
        break;                                                                         \
      default: break;                                                                  \
    }                                                                                  \
  }

CUBE__FLOAT_COMBINE(cube__combine_f32, float)
CUBE__FLOAT_COMBINE(cube__combine_f64, double)

/* 16-bit floats, through float in blocks. */
static void cube__combine_half(cube_reduce_op_t op, uint16_t* a, const uint16_t* b, uint64_t n,
                               bool bf16) {
  enum { BLOCK = 256 };
  float fa[BLOCK], fb[BLOCK];
  for (uint64_t base = 0; base < n; base += BLOCK) {
    uint64_t m = n - base < BLOCK ? n - base : BLOCK;
    for (uint64_t i = 0; i < m; ++i) {
      fa[i] = bf16 ? cube__bf16_to_f32(a[base + i]) : cube__f16_to_f32(a[base + i]);
      fb[i] = bf16 ? cube__bf16_to_f32(b[base + i]) : cube__f16_to_f32(b[base + i]);
    }
    cube__combine_f32(op, fa, fb, m);
    for (uint64_t i = 0; i < m; ++i)
      a[base + i] = bf16 ? cube__f32_to_bf16(fa[i]) : cube__f32_to_f16(fa[i]);
  }
}

void cube__reduce_combine(cube_dtype_t dtype, cube_reduce_op_t op, void* acc, const void* in,
                          uint64_t count) {
  switch (dtype) {
    case CUBE_DTYPE_U8: cube__combine_u8(op, acc, in, count); break;
    case CUBE_DTYPE_I8: cube__combine_i8(op, acc, in, count); break;
    case CUBE_DTYPE_U32: cube__combine_u32(op, acc, in, count); break;
    case CUBE_DTYPE_I32: cube__combine_i32(op, acc, in, count); break;
    case CUBE_DTYPE_U64: cube__combine_u64(op, acc, in, count); break;
    case CUBE_DTYPE_I64: cube__combine_i64(op, acc, in, count); break;
    case CUBE_DTYPE_F32: cube__combine_f32(op, acc, in, count); break;
    case CUBE_DTYPE_F64: cube__combine_f64(op, acc, in, count); break;
    case CUBE_DTYPE_F16: cube__combine_half(op, acc, in, count, false); break;
    case CUBE_DTYPE_BF16: cube__combine_half(op, acc, in, count, true); break;
  }
}

//===----------------------------------------------------------------------===//
// Mean
//===----------------------------------------------------------------------===//

#define CUBE__DIV(T, p, count, n)                                   \
  do {                                                              \
    T* v_ = (T*)(p);                                                \
    for (uint64_t i = 0; i < (count); ++i) v_[i] = (T)(v_[i] / (T)(n)); \
  } while (0)

void cube__reduce_finish(cube_dtype_t dtype, cube_reduce_op_t op, void* acc, uint64_t count,
                         uint32_t n) {
  if (op != CUBE_REDUCE_MEAN || n <= 1) return;
  switch (dtype) {
    case CUBE_DTYPE_U8: CUBE__DIV(uint8_t, acc, count, n); break;
    case CUBE_DTYPE_U32: CUBE__DIV(uint32_t, acc, count, n); break;
    case CUBE_DTYPE_U64: CUBE__DIV(uint64_t, acc, count, n); break;
    case CUBE_DTYPE_I8: CUBE__DIV(int8_t, acc, count, n); break;
    case CUBE_DTYPE_I32: CUBE__DIV(int32_t, acc, count, n); break;
    case CUBE_DTYPE_I64: CUBE__DIV(int64_t, acc, count, n); break;
    case CUBE_DTYPE_F32: CUBE__DIV(float, acc, count, n); break;
    case CUBE_DTYPE_F64: CUBE__DIV(double, acc, count, n); break;
    case CUBE_DTYPE_F16:
    case CUBE_DTYPE_BF16: {
      uint16_t* v = acc;
      bool bf = dtype == CUBE_DTYPE_BF16;
      for (uint64_t i = 0; i < count; ++i) {
        float f = (bf ? cube__bf16_to_f32(v[i]) : cube__f16_to_f32(v[i])) / (float)n;
        v[i] = bf ? cube__f32_to_bf16(f) : cube__f32_to_f16(f);
      }
      break;
    }
  }
}
