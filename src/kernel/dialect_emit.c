/* The cube dialect: the translation unit each backend compiles
 * (cube__dialect_generate): the common prelude and the target's, the
 * defines, the user's source under #line and, on the CPU, the entry wrapper
 * (a loop over units, the split entry of dialect_split.c, or fibers); and the
 * CPU entry's scratch size and error codes.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "cube/backends/cpu.h"
#include "kernel/dialect.h"
#include "kernel/dialect_internal.h"

/* src/kernel/preludes/<name>.h, embedded by cmake/embed.cmake. */
extern const char cube__prelude_common[];
extern const char cube__prelude_cpu[];
extern const char cube__prelude_cuda[];
extern const char cube__prelude_opencl[];

/* Preludes ------------------------------------------------------------------------ */

const char* cube__dialect_prelude(cube__target_t target) {
  switch (target) {
    case CUBE__TARGET_CPU: return cube__prelude_cpu;
    case CUBE__TARGET_CUDA: return cube__prelude_cuda;
    case CUBE__TARGET_OPENCL: return cube__prelude_opencl;
  }
  return NULL;
}

/* The string builder --------------------------------------------------------------- */

static void cube__sb_reserve(cube__sb_t* sb, size_t extra) {
  if (sb->failed || sb->len + extra + 1 <= sb->cap) return;
  size_t cap = sb->cap ? sb->cap : 4096;
  while (cap < sb->len + extra + 1) cap *= 2;
  char* d = realloc(sb->data, cap);
  if (!d) {
    sb->failed = true;
    return;
  }
  sb->data = d;
  sb->cap = cap;
}

void cube__sb_put(cube__sb_t* sb, const char* s, size_t n) {
  cube__sb_reserve(sb, n);
  if (sb->failed) return;
  memcpy(sb->data + sb->len, s, n);
  sb->len += n;
  sb->data[sb->len] = '\0';
}

void cube__sb_puts(cube__sb_t* sb, const char* s) { cube__sb_put(sb, s, strlen(s)); }

void cube__sb_printf(cube__sb_t* sb, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  if (n < 0) {
    sb->failed = true;
    return;
  }
  cube__sb_reserve(sb, (size_t)n);
  if (sb->failed) return;
  va_start(ap, fmt);
  vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  sb->len += (size_t)n;
}

/* Defines and the CPU scratch ------------------------------------------------------- */

/* Parses a CUBE_CPU_FIBER_STACK value: a decimal count of bytes. */
static bool cube__parse_stack(const char* s, uint64_t* out) {
  if (!s) return false;
  while (*s == ' ' || *s == '\t') ++s;
  uint64_t x = 0;
  const char* p = s;
  while (*p >= '0' && *p <= '9') {
    if (x > (UINT64_MAX - 9) / 10) return false;
    x = x * 10 + (uint64_t)(*p++ - '0');
  }
  if (p == s) return false;
  while (*p == 'u' || *p == 'U' || *p == 'l' || *p == 'L') ++p;
  while (*p == ' ' || *p == '\t') ++p;
  if (*p) return false;
  *out = x;
  return true;
}

const char* cube__find_define(const cube_define_t* defines, uint32_t count, const char* name,
                              bool* present) {
  *present = false;
  for (uint32_t i = 0; defines && i < count; ++i) {
    if (defines[i].name && strcmp(defines[i].name, name) == 0) {
      *present = true;
      return defines[i].value;
    }
  }
  return NULL;
}

/* Whether |value| is a valid CUBE_CPU_FIBER_STACK (decimal, a multiple of
 * 64, at least the minimum); the bytes in |*stack|. */
static bool cube__fiber_stack_value(const char* value, uint64_t* stack) {
  return cube__parse_stack(value, stack) && *stack >= CUBE__CPU_FIBER_STACK_MIN &&
         *stack % 64 == 0;
}

/* Bytes of fiber stack per unit: the CUBE_CPU_FIBER_STACK define or the default. */
uint64_t cube__cpu_fiber_stack(const cube_define_t* defines, uint32_t define_count) {
  bool present;
  const char* value = cube__find_define(defines, define_count, "CUBE_CPU_FIBER_STACK", &present);
  uint64_t stack;
  if (present && cube__fiber_stack_value(value, &stack)) return stack;
  return CUBE__CPU_FIBER_STACK_DEFAULT;
}

/* Same formula as cube__fiber_scratch_need in preludes/cpu.h. */
static uint64_t cube__fiber_scratch(uint64_t units, uint64_t stack) {
  return 64u + ((units * 12u + 63u) & ~(uint64_t)63u) + units * stack;
}

uint64_t cube__dialect_cpu_scratch_size(const cube__signature_t* signature, uint64_t units,
                                        const cube_define_t* defines, uint32_t define_count) {
  if (!signature || !signature->uses_sync_cube || units <= 1) return 0;
  return cube__fiber_scratch(units, cube__cpu_fiber_stack(defines, define_count));
}

const char* cube__dialect_cpu_entry_error(int code) {
  switch (code) {
    case 0: return "success";
    case 1: return "the runtime scratch for fiber stacks is too small for the cube (see "
                   "CUBE_CPU_FIBER_STACK)";
    case 2: return "the kernel was called with a different number of arguments than it declares";
    case 3: return "a unit overflowed its fiber stack (raise CUBE_CPU_FIBER_STACK)";
    case 4: return "the cube has more than 2^32-1 units";
    default: return "the kernel failed";
  }
}

/* The pieces of a unit ---------------------------------------------------------------- */

/* Layout checks of the CPU prelude's copies of the kernel ABI types. */
static void cube__emit_layout_asserts(cube__sb_t* sb) {
#define CUBE__SIZE(T)                                                                          \
  cube__sb_printf(sb, "_Static_assert(sizeof(" #T ") == %zu && _Alignof(" #T                   \
                  ") == %zu, \"cube: " #T " of the CPU prelude differs from cube/kernel.h\");\n", \
                  sizeof(T), _Alignof(T))
#define CUBE__FIELD(T, f)                                                                      \
  cube__sb_printf(sb, "_Static_assert(offsetof(" #T ", " #f ") == %zu && sizeof(((" #T         \
                  "*)0)->" #f ") == %zu, \"cube: " #T "." #f                                  \
                  " of the CPU prelude differs from cube/kernel.h\");\n",                      \
                  offsetof(T, f), sizeof(((T*)0)->f))
  cube__sb_puts(sb, "\n/* The kernel ABI as the runtime was built with it. */\n");
  CUBE__SIZE(cube_bounds_error_t);
  CUBE__FIELD(cube_bounds_error_t, flag);
  CUBE__FIELD(cube_bounds_error_t, arg);
  CUBE__FIELD(cube_bounds_error_t, index);
  CUBE__FIELD(cube_bounds_error_t, len);
  CUBE__FIELD(cube_bounds_error_t, is_write);
  CUBE__FIELD(cube_bounds_error_t, reserved);
  CUBE__SIZE(cube_cpu_arg_t);
  CUBE__FIELD(cube_cpu_arg_t, buffer.data);
  CUBE__FIELD(cube_cpu_arg_t, buffer.len);
  CUBE__FIELD(cube_cpu_arg_t, u32);
  CUBE__FIELD(cube_cpu_arg_t, i32);
  CUBE__FIELD(cube_cpu_arg_t, u64);
  CUBE__FIELD(cube_cpu_arg_t, i64);
  CUBE__FIELD(cube_cpu_arg_t, f32);
  CUBE__FIELD(cube_cpu_arg_t, f64);
  CUBE__SIZE(cube_cpu_cube_t);
  CUBE__FIELD(cube_cpu_cube_t, cube_pos);
  CUBE__FIELD(cube_cpu_cube_t, cube_count);
  CUBE__FIELD(cube_cpu_cube_t, cube_dim);
  CUBE__FIELD(cube_cpu_cube_t, mode);
  CUBE__FIELD(cube_cpu_cube_t, shared);
  CUBE__FIELD(cube_cpu_cube_t, shared_size);
  CUBE__FIELD(cube_cpu_cube_t, worker);
  CUBE__FIELD(cube_cpu_cube_t, bounds);
  CUBE__FIELD(cube_cpu_cube_t, scratch);
  CUBE__FIELD(cube_cpu_cube_t, scratch_size);
#undef CUBE__SIZE
#undef CUBE__FIELD
}

/* "#define cube__argidx_<name> <i>" for the entry's arrays, then a
 * placeholder for every other CUBE_ARRAY name of the source (other kernels'
 * accessors must compile; they never run in this unit). */
static void cube__emit_argidx(cube__sb_t* sb, const cube__signature_t* sig, const char* v,
                              size_t n) {
  cube__sb_puts(sb, "\n/* Argument indices for the bounds record. */\n");
  for (uint32_t i = 0; i < sig->count; ++i)
    if (sig->params[i].kind == CUBE_ARG_BUFFER)
      cube__sb_printf(sb, "#define cube__argidx_%s %" PRIu32 "u\n", sig->params[i].name, i);
  for (size_t at = cube__find_token(v, n, 0, "CUBE_ARRAY"); at < n;
       at = cube__find_token(v, n, at + 1, "CUBE_ARRAY")) {
    size_t open = cube__skip_space(v, at + strlen("CUBE_ARRAY"), n);
    if (open >= n || v[open] != '(') continue;
    size_t close = cube__match_paren(v, n, open);
    if (close >= n) break;
    size_t s[3], e[3];
    if (cube__split_commas(v, open + 1, close, s, e, 3) != 2) continue;
    size_t b = s[1], t = e[1];
    cube__trim(v, &b, &t);
    if (!cube__is_identifier(v + b, t - b) || t - b > 200) continue;
    cube__sb_printf(sb,
                    "#ifndef cube__argidx_%.*s\n#define cube__argidx_%.*s 4294967295u\n#endif\n",
                    (int)(t - b), v + b, (int)(t - b), v + b);
  }
}

static const char* cube__arg_member(cube_arg_kind_t kind) {
  switch (kind) {
    case CUBE_ARG_U32: return "u32";
    case CUBE_ARG_I32: return "i32";
    case CUBE_ARG_U64: return "u64";
    case CUBE_ARG_I64: return "i64";
    case CUBE_ARG_F32: return "f32";
    case CUBE_ARG_F64: return "f64";
    default: return NULL;
  }
}

/* The arguments of the user's kernel function after the hidden ones. */
static void cube__emit_call_params(cube__sb_t* sb, const cube__signature_t* sig, const char* obj) {
  for (uint32_t i = 0; i < sig->count; ++i) {
    const cube__param_t* p = &sig->params[i];
    if (p->kind == CUBE_ARG_BUFFER)
      cube__sb_printf(sb, ", %s%s, %s%s__len", obj, p->name, obj, p->name);
    else
      cube__sb_printf(sb, ", %s%s", obj, p->name);
  }
}

/* True when the source's code (view |v|, length |n|) declares thread-local
 * storage (CUBE_SHARED is static _Thread_local on the CPU). */
static bool cube__uses_tls(const char* v, size_t n) {
  return cube__find_token(v, n, 0, "CUBE_SHARED") < n ||
         cube__find_token(v, n, 0, "_Thread_local") < n ||
         cube__find_token(v, n, 0, "__thread") < n;
}

/* True when the source's code uses the dialect's vector types (a type name,
 * a constructor, the accessors or CUBE_VEC): then, on the CPU, its member
 * accesses .x .y .z .w are element accesses (cube__cpu_vector_members). */
static bool cube__uses_vectors(const char* v, size_t n) {
  static const char* const k_words[] = {"float2", "float4", "int2", "int4", "uint2", "uint4",
                                        "CUBE_VEC", "CUBE_VLOAD", "CUBE_VSTORE"};
  static const char* const k_prefixes[] = {"make_", "cube_vload_", "cube_vstore_"};
  for (size_t i = 0; i < n;) {
    if (cube__is_ident_start(v[i]) && (i == 0 || !cube__is_ident_char(v[i - 1]))) {
      size_t e = i;
      while (e < n && cube__is_ident_char(v[e])) ++e;
      for (size_t w = 0; w < sizeof(k_words) / sizeof(k_words[0]); ++w)
        if (cube__tok_is(v, i, e, k_words[w])) return true;
      for (size_t p = 0; p < sizeof(k_prefixes) / sizeof(k_prefixes[0]); ++p) {
        size_t pl = strlen(k_prefixes[p]);
        if (e - i > pl && strncmp(v + i, k_prefixes[p], pl) == 0) {
          for (size_t w = 0; w < 6; ++w) /* the type names: make_float4, cube_vload_int2 */
            if (e - i - pl == strlen(k_words[w]) &&
                strncmp(v + i + pl, k_words[w], e - i - pl) == 0)
              return true;
        }
      }
      i = e;
    } else {
      ++i;
    }
  }
  return false;
}

/* The CPU's vector types are the compilers' vector extensions, which have no
 * members: |source| with every member access `.x` `.y` `.z` `.w` (a '.'
 * that is no part of a number or of "...", then that whole identifier)
 * written `[0]` .. `[3]` (malloc'd; NULL when out of memory). |v| is its
 * code view (length |n|): comments and literals are left as they are. Each
 * rewrite moves the rest of its line one column right. */
static char* cube__cpu_vector_members(const char* source, const char* v, size_t n) {
  cube__sb_t sb = {NULL, 0, 0, false};
  size_t copied = 0;
  for (size_t i = 0; i < n;) {
    char c = v[i];
    if (cube__is_ident_start(c)) {
      while (i < n && cube__is_ident_char(v[i])) ++i;
    } else if ((c >= '0' && c <= '9') || (c == '.' && i + 1 < n && v[i + 1] >= '0' &&
                                          v[i + 1] <= '9')) {
      /* A preprocessing number: digits, letters, '.', '_' and a sign after
       * an exponent letter. */
      ++i;
      while (i < n) {
        char d = v[i];
        if ((d == '+' || d == '-') && (v[i - 1] == 'e' || v[i - 1] == 'E' || v[i - 1] == 'p' ||
                                       v[i - 1] == 'P'))
          ++i;
        else if (cube__is_ident_char(d) || d == '.')
          ++i;
        else
          break;
      }
    } else if (c == '.' && i + 2 < n && v[i + 1] == '.' && v[i + 2] == '.') {
      i += 3;
    } else if (c == '.') {
      /* Blanks may separate the '.' from the name, line breaks not (the
       * rewrite must keep every line where it was). */
      size_t m = i + 1;
      while (m < n && (v[m] == ' ' || v[m] == '\t')) ++m;
      size_t e = m;
      while (e < n && cube__is_ident_char(v[e])) ++e;
      static const char k_members[] = "xyzw";
      const char* hit = e == m + 1 ? strchr(k_members, v[m]) : NULL;
      int k = hit ? (int)(hit - k_members) : -1;
      if (k >= 0) {
        cube__sb_put(&sb, source + copied, i - copied);
        cube__sb_printf(&sb, "[%d]", k);
        copied = e;
        i = e;
      } else {
        ++i;
      }
    } else {
      ++i;
    }
  }
  cube__sb_put(&sb, source + copied, n - copied);
  if (!sb.failed && !sb.data) sb.data = calloc(1, 1);
  if (sb.failed || !sb.data) {
    free(sb.data);
    return NULL;
  }
  return sb.data;
}

/* True when the interior unit loop should count ABSOLUTE_POS_X rather than
 * ABSOLUTE_POS: the source reads the first and not the second (a 2-D kernel
 * whose row index is affine in ABSOLUTE_POS_X only when that is the loop's
 * own counter; gcc vectorises no other). */
static bool cube__counter_x(const char* v, size_t n) {
  return cube__find_token(v, n, 0, "ABSOLUTE_POS_X") < n &&
         cube__find_token(v, n, 0, "ABSOLUTE_POS") >= n;
}

/* A call of the user's kernel: the hidden arguments (CUBE_UNIT_PARAMS of
 * preludes/cpu.h, in its order), then the user's, read from |obj| ("cube__a."
 * or "cube__p->"). |pos| is the unit's position and |dim| the cube's
 * dimensions ("x, y, z"; NULL: those of |obj|), |sched| the fiber scheduler;
 * at |indent|. */
/* The call of the user's kernel for one unit: |pos| its three positions, |dim|
 * the cube dim (NULL: |obj|'s), |abs| its ABSOLUTE_POS (NULL: the formula of
 * the axes, of |pos| and |obj|'s fields, evaluated in uint32_t as the
 * prelude's), |ax| its ABSOLUTE_POS_X (NULL: likewise). */
static void cube__emit_kernel_call(cube__sb_t* sb, const cube__signature_t* sig,
                                   const char* indent, const char* obj, const char* pos,
                                   const char* dim, const char* sched, const char* abs,
                                   const char* ax) {
  cube__sb_printf(sb, "%s{\n%s  const uint32_t cube__ux_ = ", indent, indent);
  /* The three positions, named, so that the formula below can use them. */
  const char* comma1 = strchr(pos, ',');
  const char* comma2 = comma1 ? strchr(comma1 + 1, ',') : NULL;
  if (!comma1 || !comma2) {
    sb->failed = true;
    return;
  }
  cube__sb_put(sb, pos, (size_t)(comma1 - pos));
  cube__sb_printf(sb, ";\n%s  const uint32_t cube__uy_ = ", indent);
  cube__sb_put(sb, comma1 + 1, (size_t)(comma2 - comma1 - 1));
  cube__sb_printf(sb, ";\n%s  const uint32_t cube__uz_ = %s;\n", indent, comma2 + 1);
  cube__sb_printf(sb, "%s  cube__kernel_%s(cube__ux_, cube__uy_, cube__uz_, %scube__cx, %scube__cy, "
                  "%scube__cz,\n", indent, sig->entry, obj, obj, obj);
  if (dim)
    cube__sb_printf(sb, "%s      %s,\n", indent, dim);
  else
    cube__sb_printf(sb, "%s      %scube__dx, %scube__dy, %scube__dz,\n", indent, obj, obj, obj);
  cube__sb_printf(sb, "%s      %scube__nx, %scube__ny, %scube__nz, %scube__bounds, %s, ", indent,
                  obj, obj, obj, obj, sched);
  if (abs)
    cube__sb_puts(sb, abs);
  else
    cube__sb_printf(sb,
                    "(%scube__cx * %scube__dx + cube__ux_) + %scube__nx * %scube__dx * "
                    "((%scube__cy * %scube__dy + cube__uy_) + %scube__ny * %scube__dy * "
                    "(%scube__cz * %scube__dz + cube__uz_))",
                    obj, obj, obj, obj, obj, obj, obj, obj, obj, obj);
  if (ax)
    cube__sb_printf(sb, ", %s", ax);
  else
    cube__sb_printf(sb, ", %scube__cx * %scube__dx + cube__ux_", obj, obj);
  cube__emit_call_params(sb, sig, obj);
  cube__sb_printf(sb, ");\n%s}\n", indent);
}

/* |fmt| (one %s: the array's name) once per array parameter, in order. */
static void cube__emit_per_array(cube__sb_t* sb, const cube__signature_t* sig, const char* fmt) {
  for (uint32_t i = 0; i < sig->count; ++i)
    if (sig->params[i].kind == CUBE_ARG_BUFFER) cube__sb_printf(sb, fmt, sig->params[i].name);
}

static void cube__emit_cpu_entry(cube__sb_t* sb, const cube__signature_t* sig, bool uses_tls,
                                 bool counter_x, const char* split) {
  const char* e = sig->entry;
  cube__sb_printf(sb,
                  "\n#line 1 \"%s.entry.c\"\n"
                  "/* Entry wrapper (generated): runs the units of one cube. */\n"
                  "#ifndef CUBE_CPU_FIBER_STACK\n#define CUBE_CPU_FIBER_STACK %uu\n#endif\n"
                  "_Static_assert((CUBE_CPU_FIBER_STACK) %% 64 == 0 &&"
                  " (CUBE_CPU_FIBER_STACK) >= %u,"
                  " \"CUBE_CPU_FIBER_STACK must be a multiple of 64, at least %u\");\n"
                  "typedef struct cube__args {\n",
                  e, CUBE__CPU_FIBER_STACK_DEFAULT, CUBE__CPU_FIBER_STACK_MIN,
                  CUBE__CPU_FIBER_STACK_MIN);
  for (uint32_t i = 0; i < sig->count; ++i) {
    const cube__param_t* p = &sig->params[i];
    if (p->kind == CUBE_ARG_BUFFER)
      cube__sb_printf(sb, "  %s%s* %s;\n  uint64_t %s__len;\n", p->is_const ? "const " : "",
                      p->type, p->name, p->name);
    else
      cube__sb_printf(sb, "  %s %s;\n", cube__canonical_scalar(p->kind), p->name);
  }
  cube__sb_puts(sb,
                "  uint32_t cube__cx, cube__cy, cube__cz, cube__dx, cube__dy, cube__dz;\n"
                "  uint32_t cube__nx, cube__ny, cube__nz;\n"
                "  cube_bounds_error_t* cube__bounds;\n"
                "} cube__args_t;\n\n");

  if (split) {
    cube__sb_puts(sb, split);
  } else if (sig->uses_sync_cube) {
    /* One fiber per unit. */
    cube__sb_puts(sb,
                  "static void cube__fiber_body(cube__sched_t* cube__s) {\n"
                  "  const cube__args_t* cube__p = (const cube__args_t*)cube__s->args;\n"
                  "  uint32_t cube__u = cube__s->cur;\n"
                  "  uint32_t cube__x = cube__u % cube__p->cube__dx;\n"
                  "  uint32_t cube__yz = cube__u / cube__p->cube__dx;\n");
    cube__emit_kernel_call(sb, sig, "  ", "cube__p->",
                           "cube__x, cube__yz % cube__p->cube__dy, cube__yz / cube__p->cube__dy",
                           NULL, "cube__s", NULL, NULL);
    cube__sb_puts(sb, "  cube__fiber_exit(cube__s);\n}\n\n");
  }

  if (uses_tls) {
    /* The first access to this object's thread-local storage on a thread
     * allocates it (a slow __tls_get_addr). clang assumes that call keeps
     * xmm16-31, which an allocator running there may not (seen with
     * AddressSanitizer's malloc and AVX-512): make that first access here, in
     * a function with nothing live, so that the kernel's own accesses take the
     * fast path. */
    cube__sb_puts(sb,
                  "static _Thread_local unsigned char cube__tls_anchor;\n"
                  "__attribute__((noinline)) static void cube__tls_touch(void) {\n"
                  "  __asm__ __volatile__(\"\" : : \"r\"(&cube__tls_anchor) : \"memory\");\n"
                  "}\n\n");
  }
  cube__sb_printf(sb,
                  "__attribute__((visibility(\"default\"))) int cube_kernel_entry(\n"
                  "    const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args,"
                  " uint32_t arg_count);\n"
                  "__attribute__((visibility(\"default\"))) int cube_kernel_entry(\n"
                  "    const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args,"
                  " uint32_t arg_count) {\n"
                  "  if (arg_count != %" PRIu32 "u) return 2;\n"
                  "%s"
                  "  cube__args_t cube__a;\n",
                  sig->count, uses_tls ? "  cube__tls_touch();\n" : "");
  for (uint32_t i = 0; i < sig->count; ++i) {
    const cube__param_t* p = &sig->params[i];
    if (p->kind == CUBE_ARG_BUFFER) {
      const char* c = p->is_const ? "const " : "";
      cube__sb_printf(sb,
                      "  cube__a.%s = (%s%s*)args[%" PRIu32 "].buffer.data;\n"
                      "  cube__a.%s__len = args[%" PRIu32 "].buffer.len / sizeof(%s);\n",
                      p->name, c, p->type, i, p->name, i, p->type);
    } else {
      cube__sb_printf(sb, "  cube__a.%s = args[%" PRIu32 "].%s;\n", p->name, i,
                      cube__arg_member(p->kind));
    }
  }
  cube__sb_puts(sb,
                "  cube__a.cube__cx = cube->cube_pos[0];\n"
                "  cube__a.cube__cy = cube->cube_pos[1];\n"
                "  cube__a.cube__cz = cube->cube_pos[2];\n"
                "  cube__a.cube__dx = cube->cube_dim[0];\n"
                "  cube__a.cube__dy = cube->cube_dim[1];\n"
                "  cube__a.cube__dz = cube->cube_dim[2];\n"
                "  cube__a.cube__nx = cube->cube_count[0];\n"
                "  cube__a.cube__ny = cube->cube_count[1];\n"
                "  cube__a.cube__nz = cube->cube_count[2];\n"
                "  cube__a.cube__bounds = cube->bounds;\n");
  if (sig->uses_sync_cube) {
    cube__sb_puts(sb,
                  "  uint64_t cube__units = (uint64_t)cube__a.cube__dx * cube__a.cube__dy * "
                  "cube__a.cube__dz;\n"
                  "  if (cube__units == 0) return 0;\n"
                  "  if (cube__units > 0xffffffffu) return 4;\n"
                  "  if (cube__units == 1) {\n");
    cube__emit_kernel_call(sb, sig, "    ", "cube__a.", "0, 0, 0", "1, 1, 1",
                           "(cube__sched_t*)0", NULL, NULL);
    cube__sb_puts(sb,
                  "    return 0;\n"
                  "  }\n");
    if (split) {
      /* Same scratch check as the fibers: the kernel behaves the same either way. */
      cube__sb_puts(sb,
                    "  if (cube->scratch == 0 || cube->scratch_size <\n"
                    "      cube__fiber_scratch_need(cube__units, CUBE_CPU_FIBER_STACK)) return 1;\n"
                    "  return cube__split_run(&cube__a, cube->scratch, cube->scratch_size);\n"
                    "}\n");
      return;
    }
    cube__sb_puts(sb,
                  "  cube__sched_t cube__s;\n"
                  "  cube__s.args = &cube__a;\n"
                  "  return cube__fiber_run(&cube__s, (uint32_t)cube__units, cube->scratch, "
                  "cube->scratch_size,\n"
                  "                         CUBE_CPU_FIBER_STACK, cube__fiber_body);\n"
                  "}\n");
  } else {
    /* Interior cubes. When every unit's ABSOLUTE_POS (the largest is the last
     * unit's, checked in 64 bits and below 2^32 - 1) is below every array's
     * length, the unit loop states that fact to the compiler: the kernel's own
     * guards and the checked accessors then fold away and the loop vectorises
     * without masked loads and stores (5x on saxpy with AVX-512). The loop's
     * counter is ABSOLUTE_POS itself, from the row's first to one past its
     * last (which fits in 32 bits: the check above), so that the addresses
     * are affine in it without a 32-bit wrap in between: gcc vectorises only
     * such loops. A kernel that reads ABSOLUTE_POS_X and not ABSOLUTE_POS (a
     * 2-D kernel: row * width + x) gets a loop whose counter is
     * ABSOLUTE_POS_X instead (cube__counter_x): an index computed from it in
     * 64 bits is then affine. The assumption is checked before it is made, so
     * behaviour is unchanged; edge cubes take the plain loop. */
    uint32_t arrays = 0;
    for (uint32_t i = 0; i < sig->count; ++i) arrays += sig->params[i].kind == CUBE_ARG_BUFFER;
    if (arrays) {
      cube__sb_puts(sb,
                    "  {\n"
                    "    const uint64_t cube__gx = (uint64_t)cube__a.cube__nx * cube__a.cube__dx;\n"
                    "    const uint64_t cube__gy = (uint64_t)cube__a.cube__ny * cube__a.cube__dy;\n"
                    "    const uint64_t cube__last =\n"
                    "        ((uint64_t)cube__a.cube__cx * cube__a.cube__dx + cube__a.cube__dx - 1)"
                    " +\n"
                    "        cube__gx * (((uint64_t)cube__a.cube__cy * cube__a.cube__dy + "
                    "cube__a.cube__dy - 1) +\n"
                    "                    cube__gy * ((uint64_t)cube__a.cube__cz * "
                    "cube__a.cube__dz + cube__a.cube__dz - 1));\n"
                    "    int cube__interior = cube__last < 0xffffffffu");
      cube__emit_per_array(sb, sig, " && cube__last < cube__a.%s__len");
      cube__sb_printf(sb,
                      ";\n"
                      "    if (cube__interior) {\n"
                      "      for (uint32_t cube__z = 0; cube__z < cube__a.cube__dz; ++cube__z) {\n"
                      "        for (uint32_t cube__y = 0; cube__y < cube__a.cube__dy; ++cube__y)"
                      " {\n"
                      "          /* ABSOLUTE_POS of the row's first unit, as the prelude computes"
                      " it. */\n"
                      "          const uint32_t cube__row =\n"
                      "              cube__a.cube__cx * cube__a.cube__dx +\n"
                      "              cube__a.cube__nx * cube__a.cube__dx *\n"
                      "                  ((cube__a.cube__cy * cube__a.cube__dy + cube__y) +\n"
                      "                   cube__a.cube__ny * cube__a.cube__dy *\n"
                      "                       (cube__a.cube__cz * cube__a.cube__dz + cube__z));\n"
                      "          const uint32_t cube__end = cube__row + cube__a.cube__dx;\n");
      /* For gcc: the row's end, in 64 bits, is no later than every array's
       * length and below 2^32 (the interior check above). Said before the
       * loop, whose counter then is 64-bit too, it lets gcc fold the kernel's
       * own length guard (`i < CUBE_LEN(y)`); without it gcc 12 and 13
       * if-convert the guard into masked loads and stores (docs/benchmarks.md).
       * clang folds the guard through CUBE__ASSUME and keeps its 32-bit loop
       * (the 64-bit form made its loop slower). */
      if (!counter_x) {
        cube__sb_puts(sb,
                      "#if !defined(__clang__)\n"
                      "          const uint64_t cube__end64 = (uint64_t)cube__row + "
                      "cube__a.cube__dx;\n"
                      "          if (cube__end64 > 0xffffffffu");
        cube__emit_per_array(sb, sig, " || cube__end64 > cube__a.%s__len");
        cube__sb_puts(sb, ")\n            __builtin_unreachable();\n#endif\n");
      }
      if (counter_x) {
        /* The counter is ABSOLUTE_POS_X, from the cube's first to one past
         * its last (below 2^32 - 1 by the check above). */
        cube__sb_puts(sb,
                      "          const uint32_t cube__x0 = cube__a.cube__cx * cube__a.cube__dx;\n"
                      "          const uint32_t cube__xe = cube__x0 + cube__a.cube__dx;\n"
                      "          (void)cube__end;\n"
                      "#pragma omp simd\n"
                      "          for (uint32_t cube__q = cube__x0; cube__q < cube__xe; ++cube__q) {\n"
                      "            const uint32_t cube__p = cube__row + (cube__q - cube__x0);\n");
      } else {
        cube__sb_puts(sb,
                      "#if !defined(__clang__)\n"
                      "          (void)cube__end;\n"
                      "#pragma omp simd\n"
                      "          for (uint64_t cube__p = cube__row; cube__p < cube__end64; "
                      "++cube__p) {\n"
                      "#else\n"
                      "#pragma omp simd\n"
                      "          for (uint32_t cube__p = cube__row; cube__p < cube__end; "
                      "++cube__p) {\n"
                      "#endif\n");
      }
      cube__emit_per_array(sb, sig, "            CUBE__ASSUME((uint64_t)cube__p < cube__a.%s__len);\n");
      cube__emit_kernel_call(sb, sig, "            ", "cube__a.",
                             "(uint32_t)(cube__p - cube__row), cube__y, cube__z", NULL,
                             "(cube__sched_t*)0", "(uint32_t)cube__p",
                             counter_x ? "cube__q" : NULL);
      cube__sb_puts(sb,
                    "          }\n"
                    "        }\n"
                    "      }\n"
                    "      return 0;\n"
                    "    }\n"
                    "  }\n");
    }
    cube__sb_puts(sb,
                  "  for (uint32_t cube__z = 0; cube__z < cube__a.cube__dz; ++cube__z) {\n"
                  "    for (uint32_t cube__y = 0; cube__y < cube__a.cube__dy; ++cube__y) {\n"
                  "#pragma omp simd\n"
                  "      for (uint32_t cube__x = 0; cube__x < cube__a.cube__dx; ++cube__x) {\n");
    cube__emit_kernel_call(sb, sig, "        ", "cube__a.", "cube__x, cube__y, cube__z", NULL,
                           "(cube__sched_t*)0", NULL, NULL);
    cube__sb_puts(sb,
                  "      }\n"
                  "    }\n"
                  "  }\n"
                  "  return 0;\n"
                  "}\n");
  }
}

/* After generated lines put behind the entry body's '{' at |bb|: #line and
 * padding put the rest of the user's line back at its line and column, then
 * the rest of the source. */
static void cube__emit_rest_of_body(cube__sb_t* sb, const char* entry, const char* source,
                                    const char* v, size_t bb) {
  cube__sb_printf(sb, "\n#line %" PRIu32 " \"%s.cube\"\n", cube__line_at(v, bb), entry);
  size_t line_start = bb;
  while (line_start > 0 && source[line_start - 1] != '\n') --line_start;
  for (size_t i = line_start; i <= bb; ++i) cube__sb_put(sb, source[i] == '\t' ? "\t" : " ", 1);
  cube__sb_puts(sb, source + bb + 1);
}

/* OpenCL: the source with the entry's buffer parameters taking a byte offset.
 * A cl_mem is not an address, so a view into a pooled buffer is passed as the
 * buffer, its length and its offset: CUBE_ARRAY(T, a) of the entry's
 * declaration becomes CUBE__EARR(T, a) (base, a__bytes, offset; a name of the
 * same length, so that every later column of the line stays where it was),
 * and after the body's '{' a line of generated code (its own file,
 * "<entry>.entry.cl", under #line) declares the local pointer `a` the body
 * uses with CUBE__ENTRY_VIEW; then #line and padding put the rest of the
 * user's line back at its line and column. Compiler messages about the
 * source so name the user's lines and columns. Other kernels of the source
 * keep the plain ABI (they are compiled, never run). */
static void cube__emit_opencl_source(cube__sb_t* sb, const cube__signature_t* sig,
                                     const char* source, const char* v, size_t n) {
  cube__decl_t d;
  bool found = cube__find_decl(v, n, 0, sig->entry, &d) < n;
  size_t bb = 0, be = 0;
  if (!found || d.close >= n || !d.has_comma || !cube__kernel_body(v, n, d.close, &bb, &be)) {
    cube__sb_puts(sb, source); /* the compiler reports what is wrong */
    return;
  }
  size_t starts[CUBE_MAX_KERNEL_ARGS + 1], ends[CUBE_MAX_KERNEL_ARGS + 1];
  uint32_t parts = cube__split_commas(v, d.params_b, d.close, starts, ends,
                                      CUBE_MAX_KERNEL_ARGS + 1);
  if (parts > CUBE_MAX_KERNEL_ARGS) parts = CUBE_MAX_KERNEL_ARGS;
  size_t pos = 0;
  for (uint32_t k = 0; k < parts; ++k) {
    size_t b = starts[k], e = ends[k];
    cube__trim(v, &b, &e);
    if (!cube__tok_is(v, b, e, "CUBE_ARRAY")) continue;
    cube__sb_put(sb, source + pos, b - pos);
    cube__sb_puts(sb, "CUBE__EARR"); /* strlen("CUBE_ARRAY") bytes */
    pos = b + strlen("CUBE_ARRAY");
  }
  cube__sb_put(sb, source + pos, bb + 1 - pos);
  cube__sb_printf(sb, "\n#line 1 \"%s.entry.cl\"\n", sig->entry);
  for (uint32_t k = 0; k < parts; ++k) {
    size_t b = starts[k], e = ends[k];
    cube__trim(v, &b, &e);
    if (!cube__tok_is(v, b, e, "CUBE_ARRAY")) continue;
    cube__sb_puts(sb, " CUBE__ENTRY_VIEW");
    for (size_t i = b + strlen("CUBE_ARRAY"); i < e; ++i) {
      char c = v[i] == '\n' || v[i] == '\r' ? ' ' : v[i];
      cube__sb_put(sb, &c, 1);
    }
  }
  cube__emit_rest_of_body(sb, sig->entry, source, v, bb);
}

/* CUDA: the source with CUBE__ENTRY_TIMER (the CUDA prelude's, the launch's
 * timing) after the entry body's '{', on a line of its own file
 * ("<entry>.entry.cu", under #line); then #line and padding put the rest of
 * the user's line back at its line and column, as for OpenCL. A source whose
 * entry has no body is left as it is (the compiler reports it). */
static void cube__emit_cuda_source(cube__sb_t* sb, const cube__signature_t* sig,
                                   const char* source, const char* v, size_t n) {
  cube__decl_t d;
  bool found = cube__find_decl(v, n, 0, sig->entry, &d) < n;
  size_t bb = 0, be = 0;
  if (!found || d.close >= n || !cube__kernel_body(v, n, d.close, &bb, &be)) {
    cube__sb_puts(sb, source);
    return;
  }
  cube__sb_put(sb, source, bb + 1);
  cube__sb_printf(sb, "\n#line 1 \"%s.entry.cu\"\n CUBE__ENTRY_TIMER", sig->entry);
  cube__emit_rest_of_body(sb, sig->entry, source, v, bb);
}

cube_status_t cube__dialect_generate(cube__target_t target, const cube__signature_t* signature,
                                     const char* source, const cube_define_t* defines,
                                     uint32_t define_count, cube_execution_mode_t mode,
                                     char** out_text) {
  const char* fn = "cube__dialect_generate";
  if (!out_text) return CUBE_INVALID("%s: out_text is NULL", fn);
  *out_text = NULL;
  if (!signature) return CUBE_INVALID("%s: signature is NULL", fn);
  if (!source) return CUBE_INVALID("%s: source is NULL", fn);
  const char* entry = signature->entry;
  if (!cube__is_identifier(entry, strnlen(entry, sizeof signature->entry)) ||
      strnlen(entry, sizeof signature->entry) == sizeof signature->entry)
    return CUBE_INVALID("%s: the signature's entry name is not a C identifier", fn);
  if (signature->count > CUBE_MAX_KERNEL_ARGS)
    return CUBE_INVALID("%s: kernel '%s': %" PRIu32 " parameters (max %d)", fn, entry,
                        signature->count, CUBE_MAX_KERNEL_ARGS);
  const char* prelude = cube__dialect_prelude(target);
  if (!prelude) return CUBE_INVALID("%s: kernel '%s': unknown target %d", fn, entry, (int)target);
  const char* mode_name;
  switch (mode) {
    case CUBE_EXEC_CHECKED: mode_name = "CHECKED"; break;
    case CUBE_EXEC_VALIDATE: mode_name = "VALIDATE"; break;
    case CUBE_EXEC_UNCHECKED: mode_name = "UNCHECKED"; break;
    default:
      return CUBE_INVALID("%s: kernel '%s': unknown execution mode %d", fn, entry, (int)mode);
  }
  if (define_count && !defines)
    return CUBE_INVALID("%s: kernel '%s': define_count is %" PRIu32 " but defines is NULL", fn,
                        entry, define_count);
  for (uint32_t i = 0; i < define_count; ++i) {
    const char* name = defines[i].name;
    const char* value = defines[i].value;
    if (!name || !cube__is_identifier(name, strlen(name)))
      return CUBE_INVALID("%s: kernel '%s': define %" PRIu32 " ('%s') is not a C identifier", fn,
                          entry, i, name ? name : "(null)");
    if (value && (strchr(value, '\n') || strchr(value, '\r')))
      return CUBE_INVALID("%s: kernel '%s': the value of define '%s' contains a line break", fn,
                          entry, name);
    if (strcmp(name, "CUBE_CPU_FIBER_STACK") == 0) {
      uint64_t stack;
      if (!cube__fiber_stack_value(value, &stack))
        return CUBE_INVALID("%s: kernel '%s': CUBE_CPU_FIBER_STACK='%s' must be a decimal "
                            "number of bytes, a multiple of 64, at least %u",
                            fn, entry, value ? value : "", CUBE__CPU_FIBER_STACK_MIN);
    }
  }
  for (uint32_t i = 0; i < signature->count; ++i) {
    const cube__param_t* p = &signature->params[i];
    if (!cube__is_identifier(p->name, strnlen(p->name, sizeof p->name)) ||
        (p->kind != CUBE_ARG_BUFFER && !cube__canonical_scalar(p->kind)) ||
        (p->kind == CUBE_ARG_BUFFER && (!p->type[0] || strnlen(p->type, sizeof p->type) ==
                                                           sizeof p->type)))
      return CUBE_INVALID("%s: kernel '%s': parameter %" PRIu32 " of the signature is malformed",
                          fn, entry, i + 1);
  }

  /* The code view of the source, read by the pieces below. */
  size_t n = strlen(source);
  char* v = cube__code_view(source, n);
  if (!v)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: kernel '%s': no host memory", fn,
                             entry);
  /* CPU: a source with vectors reads their members as elements; the pieces
   * below (the splitter too) see the rewritten text. */
  char* rewritten = NULL;
  if (target == CUBE__TARGET_CPU && cube__uses_vectors(v, n)) {
    rewritten = cube__cpu_vector_members(source, v, n);
    free(v);
    v = NULL;
    if (rewritten) {
      source = rewritten;
      n = strlen(source);
      v = cube__code_view(source, n);
    }
    if (!v) {
      free(rewritten);
      return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: kernel '%s': no host memory", fn,
                               entry);
    }
  }

  static const char* const target_names[] = {"CPU", "CUDA", "OpenCL"};
  cube__sb_t sb = {NULL, 0, 0, false};
  cube__sb_printf(&sb, "/* cube: %s unit of kernel '%s' (generated). */\n#define CUBE_MODE_%s 1\n",
                  target_names[target], entry, mode_name);
  cube__sb_puts(&sb, cube__prelude_common);
  cube__sb_puts(&sb, prelude);
  if (target == CUBE__TARGET_CPU) cube__emit_layout_asserts(&sb);
  if (define_count) cube__sb_puts(&sb, "\n/* Compile-time defines. */\n");
  for (uint32_t i = 0; i < define_count; ++i)
    cube__sb_printf(&sb, "#define %s %s\n", defines[i].name,
                    defines[i].value ? defines[i].value : "");
  cube__emit_argidx(&sb, signature, v, n);
  if (target != CUBE__TARGET_CPU)
    cube__sb_printf(&sb, "#define cube__kernel_%s cube_kernel_entry\n", entry);
  /* Everything before this line is the generator's; from here on compiler
   * messages name the user's lines. */
  cube__sb_printf(&sb, "#line 1 \"%s.cube\"\n", entry);
  if (target == CUBE__TARGET_OPENCL)
    cube__emit_opencl_source(&sb, signature, source, v, n);
  else if (target == CUBE__TARGET_CUDA)
    cube__emit_cuda_source(&sb, signature, source, v, n);
  else
    cube__sb_puts(&sb, source);
  cube__sb_puts(&sb, "\n");
  if (target == CUBE__TARGET_CPU) {
    char* split = cube__split_generate(signature, source, v, n, defines, define_count);
    cube__emit_cpu_entry(&sb, signature, cube__uses_tls(v, n), cube__counter_x(v, n), split);
    free(split);
  }
  free(v);
  free(rewritten);
  if (sb.failed) {
    free(sb.data);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: kernel '%s': no host memory", fn,
                             entry);
  }
  *out_text = sb.data;
  return CUBE_OK;
}
