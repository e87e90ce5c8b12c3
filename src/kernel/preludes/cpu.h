/* cube dialect prelude: CPU target (host C11, compiled by the system C
 * compiler into a shared object, one translation unit per kernel).
 *
 * docs/dialect.md describes the vocabulary. The generated unit is:
 *   #define CUBE_MODE_<mode> 1, the common prelude (common.h: the mode's
 *   accessors, the derived positions), this prelude, layout checks, the
 *   kernel's defines, the user's source under #line, the entry wrapper.
 * Every name this prelude adds besides the documented vocabulary starts with
 * cube__ (or CUBE__). All functions are static inline: nothing but
 * cube_kernel_entry leaves the shared object.
 */
#ifndef CUBE__PRELUDE_CPU_H
#define CUBE__PRELUDE_CPU_H 1

#define CUBE_TARGET_CPU 1

/* The ucontext fallback needs the X/Open declarations. */
#if !defined(__x86_64__) && !defined(__aarch64__) && !defined(CUBE_CPU_FIBER_UCONTEXT)
#define CUBE_CPU_FIBER_UCONTEXT 1
#endif
#if defined(CUBE_CPU_FIBER_UCONTEXT) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE 1
#endif

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(CUBE_CPU_FIBER_UCONTEXT)
#include <ucontext.h>
#endif

/* `#pragma omp simd` is emitted on the unit loop; without -fopenmp-simd gcc
 * would warn about it under -Wall. */
#pragma GCC diagnostic ignored "-Wunknown-pragmas"
/* With -fopenmp-simd clang reports unit loops it could not vectorise; that is
 * a hint not taken, not a fault of the kernel. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpass-failed"
#endif

/* The native CPU kernel ABI (include/cube/kernel.h), copied: this unit is
 * compiled on its own. The generator adds _Static_asserts that compare every
 * size and offset with the values the runtime was built with. */
typedef struct cube_bounds_error {
  uint32_t flag;
  uint32_t arg;
  uint64_t index;
  uint64_t len;
  uint32_t is_write;
  uint32_t reserved;
} cube_bounds_error_t;

typedef union cube_cpu_arg {
  struct {
    void* data;
    uint64_t len; /* bytes */
  } buffer;
  uint32_t u32;
  int32_t i32;
  uint64_t u64;
  int64_t i64;
  float f32;
  double f64;
} cube_cpu_arg_t;

typedef struct cube_cpu_cube {
  uint32_t cube_pos[3];
  uint32_t cube_count[3];
  uint32_t cube_dim[3];
  int32_t mode; /* cube_execution_mode_t */
  void* shared;
  uint64_t shared_size;
  uint32_t worker;
  cube_bounds_error_t* bounds;
  void* scratch;
  uint64_t scratch_size;
} cube_cpu_cube_t;

/* Qualifiers --------------------------------------------------------------- */

#define CUBE_FN static inline __attribute__((unused))
#define CUBE_GLOBAL
#define CUBE_LOCAL
#define CUBE_RESTRICT restrict
#define CUBE__UNUSED __attribute__((unused))
/* The 64-bit unsigned type of the common prelude's accessors. */
typedef uint64_t CUBE__U64;
/* Prelude functions: unused ones must not warn (the unit is one main file). */
#define CUBE__PFN static inline __attribute__((unused))

/* Fibers (kernels that call sync_cube) -------------------------------------- */

/* The scheduler of one cube: its units run one after the other on this
 * worker's thread; sync_cube() switches to the next live unit of the ring.
 * Round robin makes the barrier: when the last unit reaches it and switches
 * to the first, every unit has arrived. A unit that returns leaves the ring
 * (it no longer holds the others back, like an exited GPU thread). */
typedef struct cube__sched {
  void* main_sp;      /* the entry's context */
  void** sp;          /* saved context per unit */
  uint32_t* next;     /* ring of live units */
  uint32_t cur, prev; /* running unit, its predecessor in the ring */
  const void* args;   /* the entry's unpacked arguments */
#if defined(CUBE_CPU_FIBER_UCONTEXT)
  ucontext_t main_uc;
#endif
} cube__sched_t;

typedef void (*cube__fiber_fn)(cube__sched_t*);

#if defined(CUBE_CPU_FIBER_UCONTEXT)
/* Portable fallback: ucontext (slow: swapcontext makes a sigprocmask system
 * call per switch). A unit's ucontext_t sits at the bottom of its region. */
CUBE__PFN void cube__ctx_switch(void** save, void* load) {
  swapcontext((ucontext_t*)*save, (ucontext_t*)load);
}
CUBE__PFN void cube__fiber_entry_uc(unsigned int lo, unsigned int hi, unsigned int flo,
                                        unsigned int fhi) {
  cube__sched_t* s = (cube__sched_t*)(((uintptr_t)hi << 16 << 16) | (uintptr_t)lo);
  cube__fiber_fn fn = (cube__fiber_fn)(((uintptr_t)fhi << 16 << 16) | (uintptr_t)flo);
  fn(s);
}
CUBE__PFN void* cube__fiber_init(void* region, uint64_t region_size, cube__fiber_fn fn,
                                     cube__sched_t* s) {
  ucontext_t* uc = (ucontext_t*)region;
  uintptr_t sp = (uintptr_t)s, fp = (uintptr_t)fn;
  size_t hdr = (sizeof(ucontext_t) + 63u) & ~(size_t)63u;
  getcontext(uc);
  uc->uc_stack.ss_sp = (char*)region + hdr;
  uc->uc_stack.ss_size = (size_t)region_size - hdr;
  uc->uc_link = 0;
  makecontext(uc, (void (*)(void))cube__fiber_entry_uc, 4, (unsigned int)(sp & 0xffffffffu),
              (unsigned int)(sp >> 16 >> 16), (unsigned int)(fp & 0xffffffffu),
              (unsigned int)(fp >> 16 >> 16));
  return uc;
}
#define CUBE__MAIN_CTX(s) ((s)->main_sp = &(s)->main_uc, &(s)->main_sp)
#else
/* Hand-written switch: saves the callee-saved registers on the current stack,
 * stores the stack pointer in *save, loads |load| and restores. The floating
 * point control words (MXCSR, x87 CW, FPCR) are not switched: kernels do not
 * change them. Hidden, local to this shared object. */
extern void cube__ctx_switch(void** save, void* load) __attribute__((visibility("hidden")));
extern void cube__fiber_start(void) __attribute__((visibility("hidden")));
#if defined(__x86_64__)
__asm__(
    ".pushsection .text\n"
    ".p2align 4\n"
    ".type cube__ctx_switch,@function\n"
    "cube__ctx_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size cube__ctx_switch, .-cube__ctx_switch\n"
    /* A new fiber 'returns' here with r12 = scheduler, r13 = body. */
    ".p2align 4\n"
    ".type cube__fiber_start,@function\n"
    "cube__fiber_start:\n"
    "  movq %r12, %rdi\n"
    "  callq *%r13\n"
    "  ud2\n"
    ".size cube__fiber_start, .-cube__fiber_start\n"
    ".popsection\n");
#define CUBE__FRAME_WORDS 7 /* r15 r14 r13 r12 rbx rbp ret */
CUBE__PFN void* cube__fiber_init(void* region, uint64_t region_size, cube__fiber_fn fn,
                                     cube__sched_t* s) {
  uintptr_t* sp = (uintptr_t*)(((uintptr_t)region + (uintptr_t)region_size) & ~(uintptr_t)15);
  sp -= CUBE__FRAME_WORDS; /* after the pops and ret, rsp is 16-aligned */
  sp[0] = 0;                              /* r15 */
  sp[1] = 0;                              /* r14 */
  sp[2] = (uintptr_t)fn;                  /* r13 */
  sp[3] = (uintptr_t)s;                   /* r12 */
  sp[4] = 0;                              /* rbx */
  sp[5] = 0;                              /* rbp */
  sp[6] = (uintptr_t)&cube__fiber_start;  /* return address */
  return sp;
}
#elif defined(__aarch64__)
__asm__(
    ".pushsection .text\n"
    ".p2align 4\n"
    ".type cube__ctx_switch,%function\n"
    "cube__ctx_switch:\n"
    "  sub sp, sp, #160\n"
    "  stp x19, x20, [sp, #0]\n"
    "  stp x21, x22, [sp, #16]\n"
    "  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n"
    "  stp x27, x28, [sp, #64]\n"
    "  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n"
    "  stp d10, d11, [sp, #112]\n"
    "  stp d12, d13, [sp, #128]\n"
    "  stp d14, d15, [sp, #144]\n"
    "  mov x9, sp\n"
    "  str x9, [x0]\n"
    "  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n"
    "  ldp x21, x22, [sp, #16]\n"
    "  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n"
    "  ldp x27, x28, [sp, #64]\n"
    "  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n"
    "  ldp d10, d11, [sp, #112]\n"
    "  ldp d12, d13, [sp, #128]\n"
    "  ldp d14, d15, [sp, #144]\n"
    "  add sp, sp, #160\n"
    "  ret\n"
    ".size cube__ctx_switch, .-cube__ctx_switch\n"
    /* A new fiber 'returns' here with x19 = scheduler, x20 = body. */
    ".p2align 4\n"
    ".type cube__fiber_start,%function\n"
    "cube__fiber_start:\n"
    "  mov x0, x19\n"
    "  blr x20\n"
    "  brk #0\n"
    ".size cube__fiber_start, .-cube__fiber_start\n"
    ".popsection\n");
#define CUBE__FRAME_WORDS 20 /* x19..x30, d8..d15 */
CUBE__PFN void* cube__fiber_init(void* region, uint64_t region_size, cube__fiber_fn fn,
                                     cube__sched_t* s) {
  uintptr_t* sp = (uintptr_t*)(((uintptr_t)region + (uintptr_t)region_size) & ~(uintptr_t)15);
  sp -= CUBE__FRAME_WORDS;
  for (int i = 0; i < CUBE__FRAME_WORDS; ++i) sp[i] = 0;
  sp[0] = (uintptr_t)s;                   /* x19 */
  sp[1] = (uintptr_t)fn;                  /* x20 */
  sp[11] = (uintptr_t)&cube__fiber_start; /* x30 */
  return sp;
}
#endif
#define CUBE__MAIN_CTX(s) (&(s)->main_sp)
#endif /* fiber switch */

/* Barrier: every live unit of the cube reaches it before any goes on. */
CUBE__PFN void cube__sync_cube(cube__sched_t* s) {
  if (s == 0) return; /* a cube of one unit */
  uint32_t cur = s->cur, nxt = s->next[cur];
  if (nxt == cur) return;
  s->prev = cur;
  s->cur = nxt;
  __asm__ __volatile__("" ::: "memory");
  cube__ctx_switch(&s->sp[cur], s->sp[nxt]);
  __asm__ __volatile__("" ::: "memory");
}

/* The running unit returned: it leaves the ring; the last one goes back to
 * the entry. Never returns. */
CUBE__PFN void cube__fiber_exit(cube__sched_t* s) {
  uint32_t cur = s->cur, nxt = s->next[cur];
  void* to;
  if (nxt == cur) {
    to = s->main_sp;
  } else {
    s->next[s->prev] = nxt;
    s->cur = nxt;
    to = s->sp[nxt];
  }
  __asm__ __volatile__("" ::: "memory");
  cube__ctx_switch(&s->sp[cur], to);
  __builtin_unreachable();
}

#define CUBE__STACK_CANARY 0x6375626566696265ull

/* Scratch layout for |units| fibers of |stack| bytes (a multiple of 64):
 * 64-byte aligned base; units saved contexts; units ring links; stacks. Must
 * agree with cube__dialect_cpu_scratch_size (src/kernel/dialect_emit.c). */
CUBE__PFN uint64_t cube__fiber_scratch_need(uint64_t units, uint64_t stack) {
  return 64u + ((units * 12u + 63u) & ~(uint64_t)63u) + units * stack;
}

/* Runs |units| fibers of |body| to completion. Returns 0, 1 when the scratch
 * is too small, 3 when a fiber overflowed its stack. */
CUBE__PFN int cube__fiber_run(cube__sched_t* s, uint32_t units, void* scratch,
                                  uint64_t scratch_size, uint64_t stack, cube__fiber_fn body) {
  if (scratch == 0 || scratch_size < cube__fiber_scratch_need(units, stack)) return 1;
  uintptr_t base = ((uintptr_t)scratch + 63u) & ~(uintptr_t)63u;
  s->sp = (void**)base;
  s->next = (uint32_t*)(base + (uintptr_t)units * sizeof(void*));
  char* stacks = (char*)(base + (((uintptr_t)units * 12u + 63u) & ~(uintptr_t)63u));
  for (uint32_t u = 0; u < units; ++u) {
    char* region = stacks + (uint64_t)u * stack;
    uint64_t canary = CUBE__STACK_CANARY;
#if defined(CUBE_CPU_FIBER_UCONTEXT)
    memcpy(region + ((sizeof(ucontext_t) + 63u) & ~(size_t)63u), &canary, sizeof canary);
#else
    memcpy(region, &canary, sizeof canary);
#endif
    /* Stack tops staggered by 64 bytes: regions a power of two apart would
     * all start in the same L1 set. */
    s->sp[u] = cube__fiber_init(region, stack - (uint64_t)(u & 31u) * 64u, body, s);
    s->next[u] = u + 1 == units ? 0 : u + 1;
  }
  s->cur = 0;
  s->prev = units - 1;
  __asm__ __volatile__("" ::: "memory");
  cube__ctx_switch(CUBE__MAIN_CTX(s), s->sp[0]);
  __asm__ __volatile__("" ::: "memory");
  int rc = 0;
  for (uint32_t u = 0; u < units; ++u) {
    char* region = stacks + (uint64_t)u * stack;
    uint64_t canary;
#if defined(CUBE_CPU_FIBER_UCONTEXT)
    memcpy(&canary, region + ((sizeof(ucontext_t) + 63u) & ~(size_t)63u), sizeof canary);
#else
    memcpy(&canary, region, sizeof canary);
#endif
    if (canary != CUBE__STACK_CANARY) rc = 3;
  }
  return rc;
}

/* Kernels ------------------------------------------------------------------- */

/* What a unit knows: its position and the cube's (plain scalars, so that the
 * unit loop vectorises), the bounds record and the fiber scheduler. Kernels
 * get these as hidden leading parameters; a helper that needs positions,
 * sync_cube() or the checked accessors declares CUBE_UNIT_PARAMS first and
 * is called with CUBE_UNIT_ARGS. */
#define CUBE_UNIT_PARAMS                                                                     \
  uint32_t cube__ux CUBE__UNUSED, uint32_t cube__uy CUBE__UNUSED,                            \
      uint32_t cube__uz CUBE__UNUSED, uint32_t cube__cx CUBE__UNUSED,                        \
      uint32_t cube__cy CUBE__UNUSED, uint32_t cube__cz CUBE__UNUSED,                        \
      uint32_t cube__dx CUBE__UNUSED, uint32_t cube__dy CUBE__UNUSED,                        \
      uint32_t cube__dz CUBE__UNUSED, uint32_t cube__nx CUBE__UNUSED,                        \
      uint32_t cube__ny CUBE__UNUSED, uint32_t cube__nz CUBE__UNUSED,                        \
      cube_bounds_error_t* cube__bounds CUBE__UNUSED, cube__sched_t* cube__sched CUBE__UNUSED, \
      uint32_t cube__abs CUBE__UNUSED, uint32_t cube__ax CUBE__UNUSED
#define CUBE_UNIT_ARGS                                                                       \
  cube__ux, cube__uy, cube__uz, cube__cx, cube__cy, cube__cz, cube__dx, cube__dy, cube__dz,  \
      cube__nx, cube__ny, cube__nz, cube__bounds, cube__sched, cube__abs, cube__ax

/* ABSOLUTE_POS is the unit's hidden parameter cube__abs: the same value as
 * common.h's formula of the axes (the entry computes it so), but in the unit
 * loop of an interior cube it is the loop's own counter, whose addresses
 * compilers see as affine (gcc does not vectorise a loop whose index is the
 * wrapping 32-bit formula). */
#undef ABSOLUTE_POS
#define ABSOLUTE_POS cube__abs
/* ABSOLUTE_POS_X likewise is the hidden parameter cube__ax (common.h's
 * CUBE_POS_X * CUBE_DIM_X + UNIT_POS_X): in the unit loop of an interior
 * cube of a kernel that reads ABSOLUTE_POS_X and not ABSOLUTE_POS it is the
 * loop's counter, so that a row index computed from it in 64 bits is affine
 * (a 2-D kernel vectorises under gcc). */
#undef ABSOLUTE_POS_X
#define ABSOLUTE_POS_X cube__ax

/* The user's kernel: an always-inlined function of the unit (above) and the
 * user's parameters. */
#define CUBE_KERNEL(name, ...)                                                               \
  static inline __attribute__((always_inline, unused)) void cube__kernel_##name(             \
      CUBE_UNIT_PARAMS, __VA_ARGS__)

/* A buffer: pointer plus its length in elements; CUBE_ARRAY_ARG(a) passes
 * both on to a helper that declares CUBE_ARRAY(T, a). */
#define CUBE_ARRAY(T, name) T* name, uint64_t name##__len CUBE__UNUSED
#define CUBE_ARRAY_ARG(a) a, a##__len
#define CUBE_LEN(a) ((uint64_t)(a##__len))

/* Positions (uint32_t) per axis; common.h makes UNIT_POS, ABSOLUTE_POS and
 * the others of them. */
#define UNIT_POS_X cube__ux
#define UNIT_POS_Y cube__uy
#define UNIT_POS_Z cube__uz
#define CUBE_POS_X cube__cx
#define CUBE_POS_Y cube__cy
#define CUBE_POS_Z cube__cz
#define CUBE_DIM_X cube__dx
#define CUBE_DIM_Y cube__dy
#define CUBE_DIM_Z cube__dz
#define CUBE_COUNT_X cube__nx
#define CUBE_COUNT_Y cube__ny
#define CUBE_COUNT_Z cube__nz
#define PLANE_DIM 1u
#define UNIT_POS_PLANE 0u

/* Cube-local memory: one copy per worker thread (a worker runs all units of
 * a cube, and one cube at a time). */
#define CUBE_SHARED(T, name, N) static _Thread_local T name[N]

#define sync_cube() cube__sync_cube(cube__sched)

/* The record of the first out-of-bounds access (Validate mode; CUBE_LOAD and
 * CUBE_STORE of common.h call it). */
CUBE__PFN void cube__bounds_fail(cube_bounds_error_t* b, uint32_t arg, uint64_t index,
                                     uint64_t len, uint32_t is_write) {
  uint32_t expected = 0;
  if (b != 0 && __atomic_compare_exchange_n(&b->flag, &expected, 1u, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED)) {
    b->arg = arg;
    b->index = index;
    b->len = len;
    b->is_write = is_write;
  }
}

/* Atomics (relaxed, like GPU atomics); each returns the old value. ---------- */

#define CUBE__ATOMIC_INT(sfx, T)                                                             \
  CUBE__PFN T cube_atomic_add_##sfx(T* p, T v) {                                         \
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);                                       \
  }                                                                                          \
  CUBE__PFN T cube_atomic_sub_##sfx(T* p, T v) {                                         \
    return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED);                                       \
  }                                                                                          \
  CUBE__PFN T cube_atomic_and_##sfx(T* p, T v) {                                         \
    return __atomic_fetch_and(p, v, __ATOMIC_RELAXED);                                       \
  }                                                                                          \
  CUBE__PFN T cube_atomic_or_##sfx(T* p, T v) {                                          \
    return __atomic_fetch_or(p, v, __ATOMIC_RELAXED);                                        \
  }                                                                                          \
  CUBE__PFN T cube_atomic_xor_##sfx(T* p, T v) {                                         \
    return __atomic_fetch_xor(p, v, __ATOMIC_RELAXED);                                       \
  }                                                                                          \
  CUBE__PFN T cube_atomic_exchange_##sfx(T* p, T v) {                                    \
    return __atomic_exchange_n(p, v, __ATOMIC_RELAXED);                                      \
  }                                                                                          \
  CUBE__PFN T cube_atomic_compare_exchange_##sfx(T* p, T expected, T desired) {          \
    __atomic_compare_exchange_n(p, &expected, desired, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED); \
    return expected;                                                                         \
  }                                                                                          \
  CUBE__PFN T cube_atomic_min_##sfx(T* p, T v) {                                         \
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                            \
    while (v < old && !__atomic_compare_exchange_n(p, &old, v, 1, __ATOMIC_RELAXED,          \
                                                   __ATOMIC_RELAXED)) {                      \
    }                                                                                        \
    return old;                                                                              \
  }                                                                                          \
  CUBE__PFN T cube_atomic_max_##sfx(T* p, T v) {                                         \
    T old = __atomic_load_n(p, __ATOMIC_RELAXED);                                            \
    while (v > old && !__atomic_compare_exchange_n(p, &old, v, 1, __ATOMIC_RELAXED,          \
                                                   __ATOMIC_RELAXED)) {                      \
    }                                                                                        \
    return old;                                                                              \
  }
CUBE__ATOMIC_INT(u32, uint32_t)
CUBE__ATOMIC_INT(i32, int32_t)

CUBE__PFN float cube_atomic_add_f32(float* p, float v) {
  uint32_t* w = (uint32_t*)(void*)p;
  uint32_t old = __atomic_load_n(w, __ATOMIC_RELAXED), neu;
  float f;
  do {
    memcpy(&f, &old, sizeof f);
    f += v;
    memcpy(&neu, &f, sizeof neu);
  } while (!__atomic_compare_exchange_n(w, &old, neu, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  memcpy(&f, &old, sizeof f);
  return f;
}

/* Plane (warp) operations: a plane is one unit wide on the CPU. ------------- */

CUBE__PFN float cube_plane_sum_f32(float v) { return v; }
CUBE__PFN float cube_plane_min_f32(float v) { return v; }
CUBE__PFN float cube_plane_max_f32(float v) { return v; }
CUBE__PFN uint32_t cube_plane_sum_u32(uint32_t v) { return v; }
CUBE__PFN uint32_t cube_plane_min_u32(uint32_t v) { return v; }
CUBE__PFN uint32_t cube_plane_max_u32(uint32_t v) { return v; }
CUBE__PFN int32_t cube_plane_sum_i32(int32_t v) { return v; }
CUBE__PFN int32_t cube_plane_min_i32(int32_t v) { return v; }
CUBE__PFN int32_t cube_plane_max_i32(int32_t v) { return v; }

/* Vector types (common.h, docs/dialect.md "Vector types"): the compiler's
 * vector extensions, the same under gcc and clang: element-wise + - * /,
 * a scalar operand is spread over the vector. Locals are naturally aligned;
 * loads and stores copy bytes (unaligned moves), so any element-aligned
 * address works. Element access v.x .. v.w is v[0] .. v[3]: the generator
 * rewrites the members of sources that use vectors (dialect_emit.c). */
#define CUBE__VEC_TYPE(V, E, N)                                                              \
  typedef E V __attribute__((vector_size(N * sizeof(E))));                                   \
  CUBE__PFN V cube_vload_##V(const E* p, uint64_t i) {                                       \
    V v;                                                                                     \
    __builtin_memcpy(&v, p + i * N, sizeof v);                                               \
    return v;                                                                                \
  }                                                                                          \
  CUBE__PFN void cube_vstore_##V(E* p, uint64_t i, V v) {                                    \
    __builtin_memcpy(p + i * N, &v, sizeof v);                                               \
  }
CUBE__VEC_TYPE(float2, float, 2)
CUBE__VEC_TYPE(float4, float, 4)
CUBE__VEC_TYPE(int2, int32_t, 2)
CUBE__VEC_TYPE(int4, int32_t, 4)
CUBE__VEC_TYPE(uint2, uint32_t, 2)
CUBE__VEC_TYPE(uint4, uint32_t, 4)
CUBE__PFN float2 make_float2(float x, float y) { return (float2){x, y}; }
CUBE__PFN float4 make_float4(float x, float y, float z, float w) { return (float4){x, y, z, w}; }
CUBE__PFN int2 make_int2(int32_t x, int32_t y) { return (int2){x, y}; }
CUBE__PFN int4 make_int4(int32_t x, int32_t y, int32_t z, int32_t w) {
  return (int4){x, y, z, w};
}
CUBE__PFN uint2 make_uint2(uint32_t x, uint32_t y) { return (uint2){x, y}; }
CUBE__PFN uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
  return (uint4){x, y, z, w};
}
#define CUBE__VZERO_float2 ((float2){0, 0})
#define CUBE__VZERO_float4 ((float4){0, 0, 0, 0})
#define CUBE__VZERO_int2 ((int2){0, 0})
#define CUBE__VZERO_int4 ((int4){0, 0, 0, 0})
#define CUBE__VZERO_uint2 ((uint2){0, 0})
#define CUBE__VZERO_uint4 ((uint4){0, 0, 0, 0})

/* A fact the generated entry has checked and tells the optimiser (interior
 * cubes: every unit's ABSOLUTE_POS is inside every array). */
#if defined(__clang__)
#define CUBE__ASSUME(x) __builtin_assume(x)
#else
/* gcc has no assumption that leaves no branch behind before its vectoriser:
 * `if (!(x)) __builtin_unreachable();` is control flow in the loop, and the
 * loop is then not vectorised at all (gcc 12). */
#define CUBE__ASSUME(x) ((void)0)
#endif

#endif /* CUBE__PRELUDE_CPU_H */
