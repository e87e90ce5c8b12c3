/* cube dialect prelude: CUDA target (CUDA C++ compiled by NVRTC, no
 * includes: NVRTC has no <stdint.h> by default).
 *
 * docs/dialect.md describes the vocabulary. The generated unit is:
 *   #define CUBE_MODE_<mode> 1, the common prelude (common.h: the mode's
 *   accessors, the derived positions), this prelude, the kernel's defines,
 *   "#define cube__kernel_<entry> cube_kernel_entry", the user's source under
 *   #line. Every CUBE_KERNEL becomes an extern "C" __global__ function; the
 *   entry's is named cube_kernel_entry, which the CUDA backend defines in
 *   front of the unit as "cube_k_" and 16 hex digits of the unit's hash (a
 *   name per distinct kernel, for the driver's activity records).
 *
 * Launch ABI: the user's parameters in order, a CUBE_ARRAY(T, a) as two
 * (T* a, uint64_t a__bytes: the buffer's length in bytes), a scalar as
 * itself; in Validate mode one more, the bounds record (uint32_t* cube__bounds,
 * 8 words laid out as cube_bounds_error_t); last, the timing slot
 * (struct cube__timing*, NULL when the launch is not timed).
 */
#ifndef CUBE__PRELUDE_CUDA_H
#define CUBE__PRELUDE_CUDA_H 1

#define CUBE_TARGET_CUDA 1

typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
/* The 64-bit unsigned type of the common prelude's accessors. */
typedef uint64_t CUBE__U64;

#ifndef UINT32_MAX
#define UINT32_MAX 0xffffffffu
#endif
#ifndef INT32_MAX
#define INT32_MAX 0x7fffffff
#endif
#ifndef INT32_MIN
#define INT32_MIN (-INT32_MAX - 1)
#endif
#ifndef UINT64_MAX
#define UINT64_MAX 0xffffffffffffffffull
#endif
#ifndef INT64_MAX
#define INT64_MAX 0x7fffffffffffffffll
#endif
#ifndef INT64_MIN
#define INT64_MIN (-INT64_MAX - 1)
#endif
#ifndef FLT_MAX
#define FLT_MAX 3.402823466e+38f
#endif
#ifndef FLT_MIN
#define FLT_MIN 1.175494351e-38f
#endif
#ifndef FLT_EPSILON
#define FLT_EPSILON 1.192092896e-07f
#endif
#ifndef DBL_MAX
#define DBL_MAX 1.7976931348623158e+308
#endif
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif

/* Qualifiers --------------------------------------------------------------- */

#define CUBE_FN static __device__ inline __attribute__((unused))
/* Prelude functions: unused ones must not warn. */
#define CUBE__PFN static __device__ inline __attribute__((unused))
#define CUBE_GLOBAL
#define CUBE_LOCAL
#define CUBE_RESTRICT __restrict__

/* Kernels ------------------------------------------------------------------- */

#if defined(CUBE_MODE_VALIDATE)
#define CUBE__BOUNDS_PARAM , uint32_t* cube__bounds
#else
#define CUBE__BOUNDS_PARAM
#endif

/* Every kernel takes one more parameter last: the launch's timing slot, or
 * NULL (docs/observability.md, "How CUDA kernels are timed"). The entry's
 * body starts with CUBE__ENTRY_TIMER (the generator puts it after the body's
 * '{'): an object whose constructor reads the GPU's global timer into the
 * slot's start in the first unit of cube 0, and whose destructor, run at
 * every return, raises one of the slot's ends to the timer in the first
 * unit of every cube (an atomic max whose result nobody waits for: no cube
 * is held at its end). The slot is device memory; the host has the stream copy its
 * slots into mapped memory in batches (cuda_timer.c). Nothing else is put on
 * the stream and no profiler is involved; an untimed launch pays two tests
 * of a parameter. */
struct cube__timing {
  uint64_t start; /* cube 0's first unit, at its start; the ends are further on (below) */
};
/* The ends of a launch: CUBE__TIMING_PLANES words CUBE__TIMING_PLANE_WORDS
 * apart, each in a 128-byte line of its own (beside the words of 15 other
 * launches), the word of cube i raised by cubes whose x index is i modulo
 * CUBE__TIMING_PLANES (cuda_timing_layout.h, CUBE__ACT_PLANES,
 * CUBE__ACT_LINE; unit.dialect holds the two together), so that a
 * kernel's cubes do not all meet in one line. Never lowered: the timer only
 * grows, so a slot used again needs no reset. */
#define CUBE__TIMING_PLANE_WORDS 16u
#define CUBE__TIMING_PLANES 32u /* a power of two: cube i raises word i modulo it */
CUBE__PFN uint64_t cube__globaltimer(void) {
  uint64_t t = 0;
#if defined(__CUDA_ARCH__)
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
#endif
  return t;
}
/* Which units time: every unit tests its x indices, which a kernel's body
 * reads anyway; only the 1-D form knows the y and z ones are 0 (CUBE_LAUNCH_1D,
 * below), the general form tests them where the x ones are 0 only (the
 * compiler may still read them early there): in the 1-D form no unit reads
 * four more special registers that the body does not (as that form spares
 * ABSOLUTE_POS; docs/benchmarks.md, sixteenth session, for what a self-timed
 * saxpy paid). */
#if defined(CUBE_LAUNCH_1D)
#define CUBE__TIMER_UNIT_YZ 0u
#define CUBE__TIMER_CUBE_YZ 0u
#else
#define CUBE__TIMER_UNIT_YZ (threadIdx.y | threadIdx.z)
#define CUBE__TIMER_CUBE_YZ (blockIdx.y | blockIdx.z)
#endif
struct cube__timer {
  cube__timing* t;
  __device__ explicit cube__timer(cube__timing* t_) : t(t_) {
    if (t && (threadIdx.x | blockIdx.x) == 0 && (CUBE__TIMER_UNIT_YZ | CUBE__TIMER_CUBE_YZ) == 0)
      t->start = cube__globaltimer();
  }
  __device__ ~cube__timer() {
    if (t && threadIdx.x == 0 && CUBE__TIMER_UNIT_YZ == 0) {
      uint64_t* end = &t->start + CUBE__TIMING_PLANE_WORDS * (1u + (blockIdx.x & (CUBE__TIMING_PLANES - 1u)));
      /* A reduction: no result, nothing waits. On the global address: the
       * same reduction on the generic address cost a kernel of 4,096 cubes
       * 20 % on the H100 against 5 % for this (docs/benchmarks.md). (Not
       * atomicMax on 64 bits: that makes NVRTC load its builtins library,
       * whose thread-local storage LeakSanitizer cannot read at exit.) */
#if defined(__CUDA_ARCH__)
      asm volatile(
          "{\n\t.reg .u64 g;\n\tcvta.to.global.u64 g, %0;\n\tred.global.max.u64 [g], %1;\n\t}"
          ::"l"(end), "l"(cube__globaltimer()) : "memory");
#else
      (void)end;
#endif
    }
  }
};
#define CUBE__ENTRY_TIMER cube__timer cube__timer_obj(cube__slot);

#define CUBE_KERNEL(name, ...)                                                  \
  extern "C" __global__ void cube__kernel_##name(__VA_ARGS__ CUBE__BOUNDS_PARAM, \
                                                 cube__timing* cube__slot)

/* Helpers that use positions, sync_cube() or the checked accessors declare
 * CUBE_UNIT_PARAMS first and are called with CUBE_UNIT_ARGS. */
#if defined(CUBE_MODE_VALIDATE)
#define CUBE_UNIT_PARAMS uint32_t* cube__bounds
#define CUBE_UNIT_ARGS cube__bounds
#else
#define CUBE_UNIT_PARAMS int cube__unit
#define CUBE_UNIT_ARGS 0
#endif

#define CUBE_ARRAY(T, name) T* name, uint64_t name##__bytes
#define CUBE_ARRAY_ARG(a) a, a##__bytes
#define CUBE_LEN(a) ((uint64_t)((a##__bytes) / sizeof(*(a))))

/* Positions (uint32_t) per axis; common.h makes UNIT_POS, ABSOLUTE_POS and
 * the others of them. */
#define UNIT_POS_X ((uint32_t)threadIdx.x)
#define CUBE_POS_X ((uint32_t)blockIdx.x)
#define CUBE_DIM_X ((uint32_t)blockDim.x)
#define CUBE_COUNT_X ((uint32_t)gridDim.x)
#if defined(CUBE_LAUNCH_1D)
/* The form the backend compiles for launches of 1 in y and z (cube dim and
 * count): those positions and sizes are constants, so no y or z register is
 * read. */
#define UNIT_POS_Y 0u
#define UNIT_POS_Z 0u
#define CUBE_POS_Y 0u
#define CUBE_POS_Z 0u
#define CUBE_DIM_Y 1u
#define CUBE_DIM_Z 1u
#define CUBE_COUNT_Y 1u
#define CUBE_COUNT_Z 1u
#else
#define UNIT_POS_Y ((uint32_t)threadIdx.y)
#define UNIT_POS_Z ((uint32_t)threadIdx.z)
#define CUBE_POS_Y ((uint32_t)blockIdx.y)
#define CUBE_POS_Z ((uint32_t)blockIdx.z)
#define CUBE_DIM_Y ((uint32_t)blockDim.y)
#define CUBE_DIM_Z ((uint32_t)blockDim.z)
#define CUBE_COUNT_Y ((uint32_t)gridDim.y)
#define CUBE_COUNT_Z ((uint32_t)gridDim.z)
#endif
#define PLANE_DIM ((uint32_t)warpSize)
#define UNIT_POS_PLANE (UNIT_POS % (uint32_t)warpSize)

#define CUBE_SHARED(T, name, N) __shared__ T name[N]

#define sync_cube() __syncthreads()

/* The record of the first out-of-bounds access (Validate mode; CUBE_LOAD and
 * CUBE_STORE of common.h call it). */
CUBE__PFN void cube__bounds_fail(uint32_t* b, uint32_t arg, uint64_t index,
                                                uint64_t len, uint32_t is_write) {
  if (atomicCAS(b, 0u, 1u) == 0u) {
    b[1] = arg;
    b[2] = (uint32_t)index;
    b[3] = (uint32_t)(index >> 32);
    b[4] = (uint32_t)len;
    b[5] = (uint32_t)(len >> 32);
    b[6] = is_write;
    __threadfence();
  }
}

/* Atomics (relaxed); each returns the old value. ----------------------------- */

#define CUBE__ATOMIC_INT(sfx, T)                                                             \
  CUBE__PFN T cube_atomic_add_##sfx(T* p, T v) { return atomicAdd(p, v); }    \
  CUBE__PFN T cube_atomic_sub_##sfx(T* p, T v) { return atomicSub(p, v); }    \
  CUBE__PFN T cube_atomic_and_##sfx(T* p, T v) { return atomicAnd(p, v); }    \
  CUBE__PFN T cube_atomic_or_##sfx(T* p, T v) { return atomicOr(p, v); }      \
  CUBE__PFN T cube_atomic_xor_##sfx(T* p, T v) { return atomicXor(p, v); }    \
  CUBE__PFN T cube_atomic_min_##sfx(T* p, T v) { return atomicMin(p, v); }    \
  CUBE__PFN T cube_atomic_max_##sfx(T* p, T v) { return atomicMax(p, v); }    \
  CUBE__PFN T cube_atomic_exchange_##sfx(T* p, T v) { return atomicExch(p, v); } \
  CUBE__PFN T cube_atomic_compare_exchange_##sfx(T* p, T expected, T desired) { \
    return atomicCAS(p, expected, desired);                                                  \
  }
CUBE__ATOMIC_INT(u32, uint32_t)
CUBE__ATOMIC_INT(i32, int32_t)

CUBE__PFN float cube_atomic_add_f32(float* p, float v) { return atomicAdd(p, v); }

/* Plane (warp) operations: butterfly shuffles over the whole warp (every lane
 * of the warp must take part, as in CubeCL). ------------------------------- */

#define CUBE__PLANE_REDUCE(name, T, OP)                                                      \
  CUBE__PFN T name(T v) {                                                     \
    for (int o = warpSize / 2; o > 0; o >>= 1) {                                             \
      T w = __shfl_xor_sync(0xffffffffu, v, o);                                              \
      v = OP;                                                                                \
    }                                                                                        \
    return v;                                                                                \
  }
CUBE__PLANE_REDUCE(cube_plane_sum_f32, float, v + w)
CUBE__PLANE_REDUCE(cube_plane_min_f32, float, fminf(v, w))
CUBE__PLANE_REDUCE(cube_plane_max_f32, float, fmaxf(v, w))
CUBE__PLANE_REDUCE(cube_plane_sum_u32, uint32_t, v + w)
CUBE__PLANE_REDUCE(cube_plane_min_u32, uint32_t, (w < v ? w : v))
CUBE__PLANE_REDUCE(cube_plane_max_u32, uint32_t, (w > v ? w : v))
CUBE__PLANE_REDUCE(cube_plane_sum_i32, int32_t, v + w)
CUBE__PLANE_REDUCE(cube_plane_min_i32, int32_t, (w < v ? w : v))
CUBE__PLANE_REDUCE(cube_plane_max_i32, int32_t, (w > v ? w : v))

/* Vector types (common.h, docs/dialect.md "Vector types"): CUDA's built-in
 * float2 float4 int2 int4 uint2 uint4 and make_<type>, with the element-wise
 * operators CUDA does not define (+ - * / of two vectors or of a vector and
 * a scalar, unary -, += -= *= /=). A load or store is one access of the
 * vector's width when the address is aligned to it (a pool buffer at a
 * multiple of the width), else one per element. ----------------------------- */

#define CUBE__VOPS2(V, E)                                                                    \
  CUBE__PFN V operator+(V a, V b) { return make_##V(a.x + b.x, a.y + b.y); }                 \
  CUBE__PFN V operator-(V a, V b) { return make_##V(a.x - b.x, a.y - b.y); }                 \
  CUBE__PFN V operator*(V a, V b) { return make_##V(a.x * b.x, a.y * b.y); }                 \
  CUBE__PFN V operator/(V a, V b) { return make_##V(a.x / b.x, a.y / b.y); }                 \
  CUBE__PFN V cube__spread_##V(E s) { return make_##V(s, s); }                              \
  CUBE__PFN V operator-(V a) { return make_##V(-a.x, -a.y); }
#define CUBE__VOPS4(V, E)                                                                    \
  CUBE__PFN V operator+(V a, V b) {                                                          \
    return make_##V(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);                             \
  }                                                                                          \
  CUBE__PFN V operator-(V a, V b) {                                                          \
    return make_##V(a.x - b.x, a.y - b.y, a.z - b.z, a.w - b.w);                             \
  }                                                                                          \
  CUBE__PFN V operator*(V a, V b) {                                                          \
    return make_##V(a.x * b.x, a.y * b.y, a.z * b.z, a.w * b.w);                             \
  }                                                                                          \
  CUBE__PFN V operator/(V a, V b) {                                                          \
    return make_##V(a.x / b.x, a.y / b.y, a.z / b.z, a.w / b.w);                             \
  }                                                                                          \
  CUBE__PFN V cube__spread_##V(E s) { return make_##V(s, s, s, s); }                        \
  CUBE__PFN V operator-(V a) { return make_##V(-a.x, -a.y, -a.z, -a.w); }
/* What every width shares: scalar mixes, compound assignments, the plain
 * loads and stores. */
#define CUBE__VCOMMON(V, E, N)                                                               \
  CUBE__PFN V operator+(V a, E s) { return a + cube__spread_##V(s); }                       \
  CUBE__PFN V operator-(V a, E s) { return a - cube__spread_##V(s); }                       \
  CUBE__PFN V operator*(V a, E s) { return a * cube__spread_##V(s); }                       \
  CUBE__PFN V operator/(V a, E s) { return a / cube__spread_##V(s); }                       \
  CUBE__PFN V operator+(E s, V a) { return cube__spread_##V(s) + a; }                       \
  CUBE__PFN V operator-(E s, V a) { return cube__spread_##V(s) - a; }                       \
  CUBE__PFN V operator*(E s, V a) { return cube__spread_##V(s) * a; }                       \
  CUBE__PFN V operator/(E s, V a) { return cube__spread_##V(s) / a; }                       \
  CUBE__PFN V& operator+=(V& a, V b) { return a = a + b; }                                   \
  CUBE__PFN V& operator-=(V& a, V b) { return a = a - b; }                                   \
  CUBE__PFN V& operator*=(V& a, V b) { return a = a * b; }                                   \
  CUBE__PFN V& operator/=(V& a, V b) { return a = a / b; }                                   \
  CUBE__PFN V& operator+=(V& a, E s) { return a = a + s; }                                   \
  CUBE__PFN V& operator-=(V& a, E s) { return a = a - s; }                                   \
  CUBE__PFN V& operator*=(V& a, E s) { return a = a * s; }                                   \
  CUBE__PFN V& operator/=(V& a, E s) { return a = a / s; }                                   \
  CUBE__PFN V cube_vload_##V(const E* p, uint64_t i) {                                       \
    const E* q = p + i * N;                                                                  \
    if (((unsigned long long)q & (sizeof(V) - 1)) == 0) return *(const V*)q;                 \
    V v;                                                                                     \
    E* e = (E*)&v;                                                                           \
    for (int k = 0; k < N; ++k) e[k] = q[k];                                                 \
    return v;                                                                                \
  }                                                                                          \
  CUBE__PFN void cube_vstore_##V(E* p, uint64_t i, V v) {                                    \
    E* q = p + i * N;                                                                        \
    if (((unsigned long long)q & (sizeof(V) - 1)) == 0) {                                    \
      *(V*)q = v;                                                                            \
      return;                                                                                \
    }                                                                                        \
    const E* e = (const E*)&v;                                                               \
    for (int k = 0; k < N; ++k) q[k] = e[k];                                                 \
  }
CUBE__VOPS2(float2, float)
CUBE__VCOMMON(float2, float, 2)
CUBE__VOPS4(float4, float)
CUBE__VCOMMON(float4, float, 4)
CUBE__VOPS2(int2, int)
CUBE__VCOMMON(int2, int, 2)
CUBE__VOPS4(int4, int)
CUBE__VCOMMON(int4, int, 4)
CUBE__VOPS2(uint2, unsigned int)
CUBE__VCOMMON(uint2, unsigned int, 2)
CUBE__VOPS4(uint4, unsigned int)
CUBE__VCOMMON(uint4, unsigned int, 4)
#define CUBE__VZERO_float2 make_float2(0.0f, 0.0f)
#define CUBE__VZERO_float4 make_float4(0.0f, 0.0f, 0.0f, 0.0f)
#define CUBE__VZERO_int2 make_int2(0, 0)
#define CUBE__VZERO_int4 make_int4(0, 0, 0, 0)
#define CUBE__VZERO_uint2 make_uint2(0u, 0u)
#define CUBE__VZERO_uint4 make_uint4(0u, 0u, 0u, 0u)

#endif /* CUBE__PRELUDE_CUDA_H */
