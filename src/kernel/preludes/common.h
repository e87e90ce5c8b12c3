/* cube dialect prelude: what every target means the same way. The generator
 * puts this text before the target's prelude (cpu.h, cuda.h, opencl.h), right
 * after "#define CUBE_MODE_<mode> 1", so it must be valid C11, CUDA C++ and
 * OpenCL C 1.2 alike: macros only, no includes, no declarations.
 *
 * The macros below expand where the kernel uses them, after the target
 * prelude, which defines what they are made of:
 *   CUBE__U64                 a 64-bit unsigned type (uint64_t, ulong);
 *   CUBE_LEN(a)               the length of array |a| in elements;
 *   cube__bounds_fail(b, arg, index, len, is_write)
 *                             records the first out-of-bounds access in the
 *                             bounds record |b| (Validate mode);
 *   cube__bounds              the bounds record, in scope in every kernel and
 *                             in every helper declared with CUBE_UNIT_PARAMS;
 *   UNIT_POS_{X,Y,Z}, CUBE_POS_{X,Y,Z}, CUBE_DIM_{X,Y,Z}, CUBE_COUNT_{X,Y,Z}
 *                             the per-axis positions (uint32_t).
 * cube__argidx_<array> (the array's argument index) comes from the generator.
 * Every name added besides the documented vocabulary starts with cube__ or
 * CUBE__.
 */
#ifndef CUBE__PRELUDE_COMMON_H
#define CUBE__PRELUDE_COMMON_H 1

#if !defined(CUBE_MODE_CHECKED) && !defined(CUBE_MODE_VALIDATE) && !defined(CUBE_MODE_UNCHECKED)
#define CUBE_MODE_CHECKED 1
#endif

/* Positions made of the per-axis ones (uint32_t, wrapping like the GPU's). */
#define UNIT_POS (UNIT_POS_X + CUBE_DIM_X * (UNIT_POS_Y + CUBE_DIM_Y * UNIT_POS_Z))
#define CUBE_POS (CUBE_POS_X + CUBE_COUNT_X * (CUBE_POS_Y + CUBE_COUNT_Y * CUBE_POS_Z))
#define CUBE_DIM (CUBE_DIM_X * CUBE_DIM_Y * CUBE_DIM_Z)
#define CUBE_COUNT (CUBE_COUNT_X * CUBE_COUNT_Y * CUBE_COUNT_Z)
#define ABSOLUTE_POS_X (CUBE_POS_X * CUBE_DIM_X + UNIT_POS_X)
#define ABSOLUTE_POS_Y (CUBE_POS_Y * CUBE_DIM_Y + UNIT_POS_Y)
#define ABSOLUTE_POS_Z (CUBE_POS_Z * CUBE_DIM_Z + UNIT_POS_Z)
/* ABSOLUTE_POS from the per-axis positions; a target may define ABSOLUTE_POS
 * otherwise (the CPU passes the value it computed once, see cpu.h). */
#define CUBE__ABSOLUTE_POS_OF_AXES                                                           \
  (ABSOLUTE_POS_X +                                                                          \
   CUBE_COUNT_X * CUBE_DIM_X * (ABSOLUTE_POS_Y + CUBE_COUNT_Y * CUBE_DIM_Y * ABSOLUTE_POS_Z))
#define ABSOLUTE_POS CUBE__ABSOLUTE_POS_OF_AXES

/* Bounds-checked accessors, as the execution mode says (docs/dialect.md):
 * Checked: an out-of-bounds load gives 0 and an out-of-bounds store is
 * dropped; Validate: the same, and the first out-of-bounds access of the
 * launch is recorded; Unchecked: plain access. The index is evaluated more
 * than once. */
#if defined(CUBE_MODE_UNCHECKED)
#define CUBE_LOAD(a, i) ((a)[(i)])
#define CUBE_STORE(a, i, v) ((void)((a)[(i)] = (v)))
#elif defined(CUBE_MODE_VALIDATE)
#define CUBE_LOAD(a, i)                                                                      \
  ((CUBE__U64)(i) < CUBE_LEN(a)                                                              \
       ? (a)[(i)]                                                                            \
       : (cube__bounds_fail(cube__bounds, cube__argidx_##a, (CUBE__U64)(i), CUBE_LEN(a), 0u), 0))
#define CUBE_STORE(a, i, v)                                                                  \
  ((CUBE__U64)(i) < CUBE_LEN(a)                                                              \
       ? (void)((a)[(i)] = (v))                                                              \
       : cube__bounds_fail(cube__bounds, cube__argidx_##a, (CUBE__U64)(i), CUBE_LEN(a), 1u))
#else /* CUBE_MODE_CHECKED */
#define CUBE_LOAD(a, i) ((CUBE__U64)(i) < CUBE_LEN(a) ? (a)[(i)] : 0)
#define CUBE_STORE(a, i, v) ((CUBE__U64)(i) < CUBE_LEN(a) ? (void)((a)[(i)] = (v)) : (void)0)
#endif

/* Vector types (docs/dialect.md, "Vector types"): float2 float4 int2 int4
 * uint2 uint4, each target's own (CPU vector extensions, CUDA's built-in
 * structs with the prelude's operators, OpenCL's native types). The target
 * prelude defines, for each type V of element E and width N:
 *   V, make_V(...) (N elements), cube_vload_V(p, i) and cube_vstore_V(p, i, v)
 *   (plain access to elements i*N .. i*N+N-1 of the E array p, any element
 *   alignment) and CUBE__VZERO_V (a V of zeros).
 * CUBE_VLOAD / CUBE_VSTORE check the whole vector as the mode says: vector i
 * of array a is inside when i < CUBE_LEN(a) / N (its last element, i*N+N-1,
 * is below the length); outside, a load gives zeros, a store is dropped, and
 * Validate records the index of the vector's last element, in elements. The
 * type may be a macro (CUBE_VEC(float, W)): it is expanded before pasting. */
#define CUBE__VN_float2 2
#define CUBE__VN_float4 4
#define CUBE__VN_int2 2
#define CUBE__VN_int4 4
#define CUBE__VN_uint2 2
#define CUBE__VN_uint4 4
#define CUBE__VPASTE_I(a, b) a##b
#define CUBE__VPASTE(a, b) CUBE__VPASTE_I(a, b)
/* The vector type of N elements of E: CUBE_VEC(float, 4) is float4. */
#define CUBE_VEC(E, N) CUBE__VPASTE(E, N)
#define CUBE__VN(V) CUBE__VPASTE(CUBE__VN_, V)
#define CUBE__VLD(V) CUBE__VPASTE(cube_vload_, V)
#define CUBE__VST(V) CUBE__VPASTE(cube_vstore_, V)
#define CUBE__VZ(V) CUBE__VPASTE(CUBE__VZERO_, V)
#define CUBE__VIN(V, a, i) ((CUBE__U64)(i) < CUBE_LEN(a) / (CUBE__U64)CUBE__VN(V))
#define CUBE__VLAST(V, a, i) \
  ((CUBE__U64)(i) * (CUBE__U64)CUBE__VN(V) + (CUBE__U64)(CUBE__VN(V) - 1))

#if defined(CUBE_MODE_UNCHECKED)
#define CUBE_VLOAD(V, a, i) CUBE__VLD(V)((a), (i))
#define CUBE_VSTORE(V, a, i, v) CUBE__VST(V)((a), (i), (v))
#elif defined(CUBE_MODE_VALIDATE)
#define CUBE_VLOAD(V, a, i)                                                                  \
  (CUBE__VIN(V, a, i) ? CUBE__VLD(V)((a), (i))                                               \
                      : (cube__bounds_fail(cube__bounds, cube__argidx_##a, CUBE__VLAST(V, a, i), \
                                           CUBE_LEN(a), 0u),                                 \
                         CUBE__VZ(V)))
#define CUBE_VSTORE(V, a, i, v)                                                              \
  (CUBE__VIN(V, a, i) ? CUBE__VST(V)((a), (i), (v))                                          \
                      : cube__bounds_fail(cube__bounds, cube__argidx_##a, CUBE__VLAST(V, a, i), \
                                          CUBE_LEN(a), 1u))
#else /* CUBE_MODE_CHECKED */
#define CUBE_VLOAD(V, a, i) (CUBE__VIN(V, a, i) ? CUBE__VLD(V)((a), (i)) : CUBE__VZ(V))
#define CUBE_VSTORE(V, a, i, v) \
  (CUBE__VIN(V, a, i) ? CUBE__VST(V)((a), (i), (v)) : (void)0)
#endif

#endif /* CUBE__PRELUDE_COMMON_H */
