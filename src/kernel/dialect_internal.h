/* What the files of the dialect share: the lexing of the code view and the
 * kernel declarations (dialect_parse.c), the string builder and the defines
 * (dialect_emit.c), the CPU barrier splitter (dialect_split.c). Not for the
 * rest of the library: kernel/dialect.h is the module's interface.
 *
 * All of it is pure and thread-safe: functions read their arguments and write
 * only what they are given (a builder, an out-parameter) or memory they return.
 *
 * Offsets are into a "code view" (cube__code_view): a copy of the source in
 * which comments and the contents of string and character literals are
 * blanked, newlines kept, so that offsets and line numbers are the source's
 * and every token search sees code only.
 */
#ifndef CUBE_KERNEL_DIALECT_INTERNAL_H_
#define CUBE_KERNEL_DIALECT_INTERNAL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernel/dialect.h"

/* Bytes of fiber stack per unit when the defines do not say otherwise; the
 * generated wrapper defaults CUBE_CPU_FIBER_STACK to the same value. */
#define CUBE__CPU_FIBER_STACK_DEFAULT 16384u
#define CUBE__CPU_FIBER_STACK_MIN 4096u

//===----------------------------------------------------------------------===//
// Characters and tokens (dialect_parse.c)
//===----------------------------------------------------------------------===//

static inline bool cube__is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static inline bool cube__is_ident_char(char c) {
  return cube__is_ident_start(c) || (c >= '0' && c <= '9');
}
static inline bool cube__is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static inline bool cube__is_identifier(const char* s, size_t n) {
  if (n == 0 || !cube__is_ident_start(s[0])) return false;
  for (size_t i = 1; i < n; ++i)
    if (!cube__is_ident_char(s[i])) return false;
  return true;
}

/* A malloc'd code view of |src| (length |n|, NUL-terminated); the caller
 * frees it. NULL when out of memory. */
char* cube__code_view(const char* src, size_t n);

/* The 1-based source line of offset |off|. */
uint32_t cube__line_at(const char* view, size_t off);

/* The first offset at or after |i| (below |n|) that is no white space, or |n|. */
size_t cube__skip_space(const char* v, size_t i, size_t n);

/* The offset of the next identifier token equal to |word| in v[from, n), or |n|. */
size_t cube__find_token(const char* v, size_t n, size_t from, const char* word);

/* Whether the identifier token at |i| (bounded by |e|) is |word|. */
bool cube__tok_is(const char* v, size_t i, size_t e, const char* word);

/* Given |open| at '(' (or '[' / '{'), the offset of the matching closer, or
 * |n| when the source ends first. */
size_t cube__match_paren(const char* v, size_t n, size_t open);

/* Splits v[b, e) at top-level commas into at most |max| ranges; returns the
 * number of parts (may exceed |max|: only the first |max| are stored). */
uint32_t cube__split_commas(const char* v, size_t b, size_t e, size_t* starts, size_t* ends,
                            uint32_t max);

/* Narrows [*b, *e) to exclude white space at both ends. */
void cube__trim(const char* v, size_t* b, size_t* e);

//===----------------------------------------------------------------------===//
// Kernel declarations (dialect_parse.c)
//===----------------------------------------------------------------------===//

typedef struct cube__decl {
  size_t kw;         /* offset of CUBE_KERNEL */
  size_t open;       /* '(' */
  size_t close;      /* matching ')', or n when unbalanced */
  size_t name_b, name_e;
  size_t params_b;   /* after the comma that follows the name (== close if none) */
  bool has_comma;
  bool malformed;    /* no '(' or no name */
} cube__decl_t;

/* Reads the CUBE_KERNEL declaration at |kw|. */
cube__decl_t cube__read_decl(const char* v, size_t n, size_t kw);

/* Whether |d| is well formed and declares the kernel |name|. */
bool cube__decl_named(const char* v, const cube__decl_t* d, const char* name);

/* The first CUBE_KERNEL(name, ...) at or after |from|: its offset (and the
 * declaration in |*out|), or |n| when there is none. */
size_t cube__find_decl(const char* v, size_t n, size_t from, const char* name, cube__decl_t* out);

/* The body of the kernel whose declaration closes at |close|: [*b, *e), the
 * braces included; false if there is none. */
bool cube__kernel_body(const char* v, size_t n, size_t close, size_t* b, size_t* e);

/* Whether offset |at| lies in the body of a kernel other than the one whose
 * declaration closes at |entry_close|. */
bool cube__in_other_kernel(const char* v, size_t n, size_t at, size_t entry_close);

/* "uint32_t" for CUBE_ARG_U32 and so on (static text); NULL for a buffer or
 * an unknown kind. */
const char* cube__canonical_scalar(cube_arg_kind_t kind);

//===----------------------------------------------------------------------===//
// Text and defines (dialect_emit.c)
//===----------------------------------------------------------------------===//

/* A growing string; |failed| sticks after the first allocation failure (the
 * later calls do nothing). Start from {NULL, 0, 0, false}; the owner frees
 * |data|. */
typedef struct cube__sb {
  char* data;
  size_t len, cap;
  bool failed;
} cube__sb_t;

void cube__sb_put(cube__sb_t* sb, const char* s, size_t n);
void cube__sb_puts(cube__sb_t* sb, const char* s);
void cube__sb_printf(cube__sb_t* sb, const char* fmt, ...) CUBE_PRINTF(2, 3);

/* The value of the define |name| (NULL when it has none), *present telling
 * whether it is there. */
const char* cube__find_define(const cube_define_t* defines, uint32_t count, const char* name,
                              bool* present);

/* Bytes of fiber stack per unit of a CPU kernel generated with |defines|:
 * CUBE_CPU_FIBER_STACK when it is valid, else the default (dialect_emit.c). */
uint64_t cube__cpu_fiber_stack(const cube_define_t* defines, uint32_t define_count);

//===----------------------------------------------------------------------===//
// The CPU barrier splitter (dialect_split.c)
//===----------------------------------------------------------------------===//

/* The split function for |sig|'s kernel, "static int cube__split_run(const
 * cube__args_t*, void* scratch, uint64_t scratch_size)" (malloc'd, the
 * caller frees it), or NULL when the kernel keeps the fiber entry (no
 * sync_cube, CUBE_CPU_FIBERS defined, a body outside the supported subset, or
 * out of memory: the fibers compute the same). |v| is the code view of
 * |source|, |n| their length. */
char* cube__split_generate(const cube__signature_t* sig, const char* source, const char* v,
                           size_t n, const cube_define_t* defines, uint32_t define_count);

#endif /* CUBE_KERNEL_DIALECT_INTERNAL_H_ */
