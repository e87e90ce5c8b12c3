/* cube dialect prelude: OpenCL target (OpenCL C 1.2, clBuildProgram).
 *
 * docs/dialect.md describes the vocabulary. The generated unit is:
 *   #define CUBE_MODE_<mode> 1, the common prelude (common.h: the mode's
 *   accessors, the derived positions), this prelude, the kernel's defines,
 *   "#define cube__kernel_<entry> cube_kernel_entry", the user's source under
 *   #line. Every CUBE_KERNEL becomes a __kernel function (cube-local memory
 *   may only be declared in one); the entry's is named cube_kernel_entry.
 *
 * Launch ABI of the entry: the user's parameters in order, a CUBE_ARRAY(T, a)
 * as three (__global T* buffer, ulong a__bytes: the view's length in bytes,
 * ulong offset: where the view starts in the buffer, in bytes; a cl_mem is no
 * address, so the generator rewrites the entry's CUBE_ARRAY parameters as
 * CUBE__EARR, i.e. CUBE__ENTRY_ARRAY, and opens its body with
 * CUBE__ENTRY_VIEW, which declares the pointer `a`), a scalar as itself; in
 * Validate mode one more, the bounds record (__global uint* cube__bounds, 8
 * words laid out as cube_bounds_error_t). Other kernels of the source keep two arguments per
 * array (no offset): they are compiled, never run.
 *
 * Planes are one unit wide here (OpenCL 1.2 has no sub-groups).
 */
#ifndef CUBE__PRELUDE_OPENCL_H
#define CUBE__PRELUDE_OPENCL_H 1

#define CUBE_TARGET_OPENCL 1

#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif

typedef char int8_t;
typedef uchar uint8_t;
typedef short int16_t;
typedef ushort uint16_t;
typedef int int32_t;
typedef uint uint32_t;
typedef long int64_t;
typedef ulong uint64_t;
/* The 64-bit unsigned type of the common prelude's accessors. */
typedef ulong CUBE__U64;

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
#define UINT64_MAX 0xffffffffffffffffUL
#endif
#ifndef INT64_MAX
#define INT64_MAX 0x7fffffffffffffffL
#endif
#ifndef INT64_MIN
#define INT64_MIN (-INT64_MAX - 1)
#endif

/* The C99 float functions, mapped to OpenCL's overloaded builtins (the
 * double ones are builtins already, with cl_khr_fp64). */
#define sqrtf(x) sqrt((float)(x))
#define expf(x) exp((float)(x))
#define exp2f(x) exp2((float)(x))
#define logf(x) log((float)(x))
#define log2f(x) log2((float)(x))
#define log10f(x) log10((float)(x))
#define sinf(x) sin((float)(x))
#define cosf(x) cos((float)(x))
#define tanf(x) tan((float)(x))
#define asinf(x) asin((float)(x))
#define acosf(x) acos((float)(x))
#define atanf(x) atan((float)(x))
#define atan2f(y, x) atan2((float)(y), (float)(x))
#define sinhf(x) sinh((float)(x))
#define coshf(x) cosh((float)(x))
#define tanhf(x) tanh((float)(x))
#define fabsf(x) fabs((float)(x))
#define fminf(x, y) fmin((float)(x), (float)(y))
#define fmaxf(x, y) fmax((float)(x), (float)(y))
#define fmodf(x, y) fmod((float)(x), (float)(y))
#define powf(x, y) pow((float)(x), (float)(y))
#define floorf(x) floor((float)(x))
#define ceilf(x) ceil((float)(x))
#define truncf(x) trunc((float)(x))
#define roundf(x) round((float)(x))
#define fmaf(x, y, z) fma((float)(x), (float)(y), (float)(z))

/* Qualifiers --------------------------------------------------------------- */

#define CUBE_FN static inline
#define CUBE_GLOBAL __global
#define CUBE_LOCAL __local
#define CUBE_RESTRICT restrict

/* Kernels ------------------------------------------------------------------- */

#if defined(CUBE_MODE_VALIDATE)
#define CUBE__BOUNDS_PARAM , __global uint* cube__bounds
#else
#define CUBE__BOUNDS_PARAM
#endif

#define CUBE_KERNEL(name, ...) __kernel void cube__kernel_##name(__VA_ARGS__ CUBE__BOUNDS_PARAM)

/* Helpers that use positions, sync_cube() or the checked accessors declare
 * CUBE_UNIT_PARAMS first and are called with CUBE_UNIT_ARGS. */
#if defined(CUBE_MODE_VALIDATE)
#define CUBE_UNIT_PARAMS __global uint* cube__bounds
#define CUBE_UNIT_ARGS cube__bounds
#else
#define CUBE_UNIT_PARAMS int cube__unit
#define CUBE_UNIT_ARGS 0
#endif

#define CUBE_ARRAY(T, name) __global T* name, ulong name##__bytes
#define CUBE_ARRAY_ARG(a) a, a##__bytes
#define CUBE__ENTRY_ARRAY(T, name) \
  __global T* cube__base_##name, ulong name##__bytes, ulong cube__off_##name
/* CUBE_ARRAY's name in the entry's declaration: as long as "CUBE_ARRAY", so
 * that the rewrite moves no column of the user's line. */
#define CUBE__EARR(T, name) CUBE__ENTRY_ARRAY(T, name)
#define CUBE__ENTRY_VIEW(T, name) \
  __global T* name = (__global T*)((__global const uchar*)cube__base_##name + cube__off_##name);
#define CUBE_LEN(a) ((ulong)((a##__bytes) / sizeof(*(a))))

/* Positions (uint32_t) per axis; common.h makes UNIT_POS, ABSOLUTE_POS and
 * the others of them. */
#define UNIT_POS_X ((uint)get_local_id(0))
#define UNIT_POS_Y ((uint)get_local_id(1))
#define UNIT_POS_Z ((uint)get_local_id(2))
#define CUBE_POS_X ((uint)get_group_id(0))
#define CUBE_POS_Y ((uint)get_group_id(1))
#define CUBE_POS_Z ((uint)get_group_id(2))
#define CUBE_DIM_X ((uint)get_local_size(0))
#define CUBE_DIM_Y ((uint)get_local_size(1))
#define CUBE_DIM_Z ((uint)get_local_size(2))
#define CUBE_COUNT_X ((uint)get_num_groups(0))
#define CUBE_COUNT_Y ((uint)get_num_groups(1))
#define CUBE_COUNT_Z ((uint)get_num_groups(2))
#define PLANE_DIM 1u
#define UNIT_POS_PLANE 0u

#define CUBE_SHARED(T, name, N) __local T name[N]

#define sync_cube() barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)

/* The record of the first out-of-bounds access (Validate mode; CUBE_LOAD and
 * CUBE_STORE of common.h call it). */
static inline void cube__bounds_fail(__global uint* b, uint arg, ulong index, ulong len,
                                     uint is_write) {
  if (atomic_cmpxchg((volatile __global uint*)b, 0u, 1u) == 0u) {
    b[1] = arg;
    b[2] = (uint)index;
    b[3] = (uint)(index >> 32);
    b[4] = (uint)len;
    b[5] = (uint)(len >> 32);
    b[6] = is_write;
  }
}

/* Atomics (relaxed); each returns the old value. The integer ones map to the
 * OpenCL 1.1 builtins, which take __global and __local pointers alike. ------ */

#define cube_atomic_add_u32(p, v) atomic_add((p), (uint)(v))
#define cube_atomic_sub_u32(p, v) atomic_sub((p), (uint)(v))
#define cube_atomic_and_u32(p, v) atomic_and((p), (uint)(v))
#define cube_atomic_or_u32(p, v) atomic_or((p), (uint)(v))
#define cube_atomic_xor_u32(p, v) atomic_xor((p), (uint)(v))
#define cube_atomic_min_u32(p, v) atomic_min((p), (uint)(v))
#define cube_atomic_max_u32(p, v) atomic_max((p), (uint)(v))
#define cube_atomic_exchange_u32(p, v) atomic_xchg((p), (uint)(v))
#define cube_atomic_compare_exchange_u32(p, e, d) atomic_cmpxchg((p), (uint)(e), (uint)(d))
#define cube_atomic_add_i32(p, v) atomic_add((p), (int)(v))
#define cube_atomic_sub_i32(p, v) atomic_sub((p), (int)(v))
#define cube_atomic_and_i32(p, v) atomic_and((p), (int)(v))
#define cube_atomic_or_i32(p, v) atomic_or((p), (int)(v))
#define cube_atomic_xor_i32(p, v) atomic_xor((p), (int)(v))
#define cube_atomic_min_i32(p, v) atomic_min((p), (int)(v))
#define cube_atomic_max_i32(p, v) atomic_max((p), (int)(v))
#define cube_atomic_exchange_i32(p, v) atomic_xchg((p), (int)(v))
#define cube_atomic_compare_exchange_i32(p, e, d) atomic_cmpxchg((p), (int)(e), (int)(d))

/* Float add: a compare-exchange loop (no native float atomics in 1.2). */
static inline float __attribute__((overloadable)) cube_atomic_add_f32(volatile __global float* p,
                                                                      float v) {
  volatile __global uint* w = (volatile __global uint*)p;
  uint old = *w, seen;
  while ((seen = atomic_cmpxchg(w, old, as_uint(as_float(old) + v))) != old) old = seen;
  return as_float(old);
}
static inline float __attribute__((overloadable)) cube_atomic_add_f32(volatile __local float* p,
                                                                      float v) {
  volatile __local uint* w = (volatile __local uint*)p;
  uint old = *w, seen;
  while ((seen = atomic_cmpxchg(w, old, as_uint(as_float(old) + v))) != old) old = seen;
  return as_float(old);
}

/* Plane operations: a plane is one unit wide here. ---------------------------- */

#define cube_plane_sum_f32(v) ((float)(v))
#define cube_plane_min_f32(v) ((float)(v))
#define cube_plane_max_f32(v) ((float)(v))
#define cube_plane_sum_u32(v) ((uint)(v))
#define cube_plane_min_u32(v) ((uint)(v))
#define cube_plane_max_u32(v) ((uint)(v))
#define cube_plane_sum_i32(v) ((int)(v))
#define cube_plane_min_i32(v) ((int)(v))
#define cube_plane_max_i32(v) ((int)(v))

/* Vector types (common.h, docs/dialect.md "Vector types"): OpenCL's own.
 * vloadn/vstoren need only the element's alignment. ------------------------ */

#define make_float2(x, y) ((float2)((float)(x), (float)(y)))
#define make_float4(x, y, z, w) ((float4)((float)(x), (float)(y), (float)(z), (float)(w)))
#define make_int2(x, y) ((int2)((int)(x), (int)(y)))
#define make_int4(x, y, z, w) ((int4)((int)(x), (int)(y), (int)(z), (int)(w)))
#define make_uint2(x, y) ((uint2)((uint)(x), (uint)(y)))
#define make_uint4(x, y, z, w) ((uint4)((uint)(x), (uint)(y), (uint)(z), (uint)(w)))
#define cube_vload_float2(p, i) vload2((size_t)(i), (p))
#define cube_vload_float4(p, i) vload4((size_t)(i), (p))
#define cube_vload_int2(p, i) vload2((size_t)(i), (p))
#define cube_vload_int4(p, i) vload4((size_t)(i), (p))
#define cube_vload_uint2(p, i) vload2((size_t)(i), (p))
#define cube_vload_uint4(p, i) vload4((size_t)(i), (p))
#define cube_vstore_float2(p, i, v) vstore2((v), (size_t)(i), (p))
#define cube_vstore_float4(p, i, v) vstore4((v), (size_t)(i), (p))
#define cube_vstore_int2(p, i, v) vstore2((v), (size_t)(i), (p))
#define cube_vstore_int4(p, i, v) vstore4((v), (size_t)(i), (p))
#define cube_vstore_uint2(p, i, v) vstore2((v), (size_t)(i), (p))
#define cube_vstore_uint4(p, i, v) vstore4((v), (size_t)(i), (p))
#define CUBE__VZERO_float2 ((float2)(0.0f))
#define CUBE__VZERO_float4 ((float4)(0.0f))
#define CUBE__VZERO_int2 ((int2)(0))
#define CUBE__VZERO_int4 ((int4)(0))
#define CUBE__VZERO_uint2 ((uint2)(0u))
#define CUBE__VZERO_uint4 ((uint4)(0u))

/* OpenCL C keywords that are ordinary names in the dialect (a cube-local
 * array may well be called `local`): after this prelude, which spells them
 * __global, __local..., they are plain identifiers. */
#define global cube__name_global
#define local cube__name_local
#define constant cube__name_constant
#define private cube__name_private
#define kernel cube__name_kernel

#endif /* CUBE__PRELUDE_OPENCL_H */
