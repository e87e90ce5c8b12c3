/* The barrier split of the CPU target (dialect_split.c, the statement reader
 * and the generator; dialect_split_scan.c, what the kernel's text allows):
 * the state of one split and the scans both files use. Internal to
 * src/kernel/. */
#ifndef CUBE_KERNEL_DIALECT_SPLIT_INTERNAL_H_
#define CUBE_KERNEL_DIALECT_SPLIT_INTERNAL_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernel/dialect.h"
#include "kernel/dialect_internal.h"

#define CUBE__SPLIT_MAX_PRIV 32
#define CUBE__SPLIT_MAX_LOOPS 32
#define CUBE__SPLIT_MAX_SHARED 32
#define CUBE__SPLIT_MAX_WRITES 64
#define CUBE__SPLIT_NONE ((size_t)-1)

typedef struct cube__split_priv {
  size_t b, e;   /* the name in the view */
  char type[16]; /* its scalar type, const dropped */
  bool unit_pos; /* declared at the top level of the body, of an unsigned or 64-bit
                    integer type, initialised with UNIT_POS_X or UNIT_POS alone */
  uint32_t count; /* elements of a local array, 0 for a scalar */
  bool uniform;   /* a uniform local: one plain variable (cube__split_uniform_write) */
  char axis;      /* 'x', 'y' or 'z': a scalar declared at the top level of the body and
                     initialised with UNIT_POS_X, _Y or _Z alone; 0 otherwise */
  bool axis_only; /* axis set and the name never written again: it means the unit
                     loop's own counter (no per-unit array) */
  bool addressed; /* its address is taken somewhere ('&name'): never held in a
                     region's local copy (cube__split_close) */
} cube__split_priv_t;

typedef struct cube__split {
  const char* src; /* the user's source */
  const char* v;   /* its code view */
  size_t n;
  const char* entry;
  size_t entry_close; /* the ')' of the entry's declaration */
  size_t body_b, body_e; /* the entry's body, inside its braces */
  const cube__signature_t* sig;
  const cube_define_t* defines;
  uint32_t define_count;
  uint32_t guarded; /* regions that stop at the first unit whose guard is false */
  cube__sb_t body;   /* regions and uniform loops */
  cube__sb_t shared; /* the CUBE_SHARED declarations */
  bool in_region;
  cube__split_priv_t priv[CUBE__SPLIT_MAX_PRIV];
  uint32_t npriv;
  size_t hdr_b[CUBE__SPLIT_MAX_LOOPS], hdr_e[CUBE__SPLIT_MAX_LOOPS]; /* uniform headers */
  uint32_t nhdr;
  size_t lv_b[CUBE__SPLIT_MAX_LOOPS * 4], lv_e[CUBE__SPLIT_MAX_LOOPS * 4]; /* loop variables */
  size_t lv_body_b[CUBE__SPLIT_MAX_LOOPS * 4], lv_body_e[CUBE__SPLIT_MAX_LOOPS * 4];
  uint32_t nlv;
  size_t sh_b[CUBE__SPLIT_MAX_SHARED], sh_e[CUBE__SPLIT_MAX_SHARED]; /* shared names */
  bool sh_alias[CUBE__SPLIT_MAX_SHARED]; /* read through a pointer (cube__split_sole_name) */
  uint32_t nshared;
  bool returns;    /* the body has a return: per-unit "returned" flags (cube__rt) */
  uint32_t uloops; /* uniform loops around the statement being read */
  uint32_t labels; /* labels cube__nxN emitted so far */
  bool region_jump; /* the open region has a return, which jumps to its label */
  size_t region_at; /* where the open region's unit loops start in |body| */
  size_t region_stmts; /* where its statements start (after the loops' heads) */
  size_t uw[CUBE__SPLIT_MAX_WRITES]; /* where uniform locals are written (their name) */
  uint32_t nuw;
  size_t banned[CUBE__SPLIT_MAX_PRIV]; /* declarations that may not be uniform locals */
  uint32_t nbanned;
} cube__split_t;

bool cube__range_has(const char* v, size_t b, size_t e, const char* word);

/* The end (one past) of the C statement starting at or after |i|, or
 * CUBE__SPLIT_NONE when it cannot be read with confidence. */
size_t cube__stmt_end(const char* v, size_t i, size_t e);

/* Whether the identifier at [at, at + len) is written there: assigned,
 * incremented, decremented or its address taken. */
bool cube__is_modified(const char* v, size_t n, size_t at, size_t len);

/* Whether [b, e) is the same identifier as [b2, e2). */
bool cube__same_name(const char* v, size_t b, size_t e, size_t b2, size_t e2);

/* The scalar type words at |i| ([const] T [const]); *out_end after them and
 * the type (const dropped) in |type|. 1 when it is one of the supported
 * scalar types, 0 when [i] starts no type word, -1 otherwise. */
int cube__split_type(const char* v, size_t i, size_t e, size_t* out_end, char* type,
                            size_t cap);

/* The integer literal (decimal or hex, a u or U suffix allowed) that
 * [b, e) is alone, in *out; false otherwise or when it exceeds 2^20. */
bool cube__split_number(const char* t, size_t b, size_t e, uint64_t* out);

/* The element count of a local array, [b, e) inside its brackets: a product
 * ('*') of integer literals and of defines whose value is one; 0 when it is
 * anything else, zero, or more than 2^16. */
uint32_t cube__split_array_count(const cube__split_t* s, size_t b, size_t e);

/* How the body uses the name declared at [b, e) after its declaration:
 * *written when it is assigned, incremented, decremented or its address is
 * taken; *addressed when its address is taken ('&name', not '&&'). A name of
 * 64 characters or more counts as both. */
void cube__split_uses(const cube__split_t* s, size_t b, size_t e, bool* written,
                             bool* addressed);

/* Bytes of one of the scalar types of cube__split_type. */
uint64_t cube__split_type_size(const char* type);

/* Whether a statement of a region, [i, end), may sit in a loop over units: it
 * must not declare anything at the top level (that would be gone for the
 * next region). */
bool cube__split_plain_ok(const char* v, size_t i, size_t end);

/* Whether [b, e) is an expression the same for every unit of a region and
 * free of side effects: numbers, + - * / % ~ ! << >> and parentheses, and
 * names that no unit can change: scalar parameters, loop variables of
 * uniform loops, the cube's dimensions, positions and counts, defines whose
 * value is a number, and the scalar type names of a cast. No relational,
 * equality, bitwise, logical, conditional, assignment or comma operator is
 * allowed (each binds looser than '<', or writes). */
bool cube__split_uniform_expr(const cube__split_t* s, size_t b, size_t e);

/* Whether [b, e) is a condition the same for every unit and free of side
 * effects: the names and numbers of cube__split_uniform_expr, joined by any
 * arithmetic, relational, equality, bitwise, logical or conditional
 * operator; no assignment, increment, comma, call, index or member. */
bool cube__split_uniform_cond(const cube__split_t* s, size_t b, size_t e);

/* Whether [b, e) names a uniform local. */
bool cube__split_uniform_local(const cube__split_t* s, size_t b, size_t e);

/* Whether the statement [i, end) is a uniform write: `x = E;`, `x op= E;`,
 * `++x;`, `--x;`, `x++;` or `x--;` with x a uniform local and E the same for
 * every unit (cube__split_uniform_cond); *at: where x is. */
bool cube__split_uniform_write(const cube__split_t* s, size_t i, size_t end, size_t* at);

/* Whether the statement [b, e) has a `break` or `continue` outside every
 * loop inside it (one that leaves the statement); *ok false when one cannot
 * be placed (a loop whose end is not read). */
bool cube__split_escapes(const char* v, size_t b, size_t e, bool* ok);

/* Whether [b, e) names a private local whose value is the unit's position
 * (cube__split_priv_t.unit_pos). */
bool cube__split_unit_priv(const cube__split_t* s, size_t b, size_t e);

/* Whether the statement [i, end) (followed in its block, which ends at |e|,
 * by a barrier or by the block's end) is `if (A < B) stmt` or
 * `if (B > A) stmt` without else, where A is a private local initialised with
 * UNIT_POS_X or UNIT_POS at the top level of the body and never written
 * again, and B is the same for every unit of the region
 * (cube__split_uniform_expr). Then, in the order the region runs its units,
 * the guard holds for a prefix of them. [*out_b, *out_e): the condition. */
bool cube__split_guard(const cube__split_t* s, size_t i, size_t end, size_t e,
                              size_t* out_b, size_t* out_e);

/* Whether every occurrence of the name declared at [nb, ne) in the body
 * [bb, be) is that object: none before the declaration (some outer object of
 * that name), none a member (".name", "->name") and none declaring the name
 * again ("T name", "T* name"), so that a #define of the name reaches only it.
 * A name longer than 63 characters counts as not. */
bool cube__split_sole_name(const char* v, size_t bb, size_t be, size_t nb, size_t ne);

/* Checks of the whole kernel once its statements are read. */
bool cube__split_checks(cube__split_t* s, const cube__signature_t* sig, size_t bb,
                               size_t be, size_t eb, size_t ee, const cube_define_t* defines,
                               uint32_t define_count);

#endif  // CUBE_KERNEL_DIALECT_SPLIT_INTERNAL_H_
