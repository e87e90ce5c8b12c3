/* The barrier split of the CPU target: what the kernel's text allows. The
 * scans of dialect_split.c's statement reader (where a statement ends, what
 * writes a name, which expressions and conditions are the same for every
 * unit, which `if` guards a prefix of the units) and the checks of the whole
 * kernel once its statements are read (cube__split_checks). */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/dialect.h"
#include "kernel/dialect_internal.h"
#include "kernel/dialect_split_internal.h"

bool cube__range_has(const char* v, size_t b, size_t e, const char* word) {
  return cube__find_token(v, e, b, word) < e;
}

/* The end (one past) of the C statement starting at or after |i|, or
 * CUBE__SPLIT_NONE when it cannot be read with confidence. */
size_t cube__stmt_end(const char* v, size_t i, size_t e) {
  i = cube__skip_space(v, i, e);
  if (i >= e) return CUBE__SPLIT_NONE;
  if (v[i] == ';') return i + 1;
  if (v[i] == '{') {
    size_t c = cube__match_paren(v, e, i);
    return c < e ? c + 1 : CUBE__SPLIT_NONE;
  }
  if (cube__is_ident_start(v[i])) {
    size_t we = i;
    while (we < e && cube__is_ident_char(v[we])) ++we;
    bool is_if = cube__tok_is(v, i, e, "if");
    if (is_if || cube__tok_is(v, i, e, "for") || cube__tok_is(v, i, e, "while") ||
        cube__tok_is(v, i, e, "switch")) {
      size_t p = cube__skip_space(v, we, e);
      if (p >= e || v[p] != '(') return CUBE__SPLIT_NONE;
      size_t c = cube__match_paren(v, e, p);
      if (c >= e) return CUBE__SPLIT_NONE;
      size_t end = cube__stmt_end(v, c + 1, e);
      if (end == CUBE__SPLIT_NONE || !is_if) return end;
      size_t q = cube__skip_space(v, end, e);
      if (q < e && cube__tok_is(v, q, e, "else")) return cube__stmt_end(v, q + 4, e);
      return end;
    }
    if (cube__tok_is(v, i, e, "do")) {
      size_t end = cube__stmt_end(v, we, e);
      if (end == CUBE__SPLIT_NONE) return end;
      size_t q = cube__skip_space(v, end, e);
      if (q >= e || !cube__tok_is(v, q, e, "while")) return CUBE__SPLIT_NONE;
      size_t p = cube__skip_space(v, q + 5, e);
      if (p >= e || v[p] != '(') return CUBE__SPLIT_NONE;
      size_t c = cube__match_paren(v, e, p);
      if (c >= e) return CUBE__SPLIT_NONE;
      q = cube__skip_space(v, c + 1, e);
      return q < e && v[q] == ';' ? q + 1 : CUBE__SPLIT_NONE;
    }
    if (cube__tok_is(v, i, e, "else")) return CUBE__SPLIT_NONE;
  }
  int depth = 0;
  for (size_t j = i; j < e; ++j) {
    char c = v[j];
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && --depth < 0) return CUBE__SPLIT_NONE;
    if (c == ';' && depth == 0) return j + 1;
  }
  return CUBE__SPLIT_NONE;
}

/* Whether the identifier at [at, at + len) is written there: assigned,
 * incremented, decremented or its address taken. */
bool cube__is_modified(const char* v, size_t n, size_t at, size_t len) {
  size_t j = cube__skip_space(v, at + len, n);
  char c0 = j < n ? v[j] : 0, c1 = j + 1 < n ? v[j + 1] : 0, c2 = j + 2 < n ? v[j + 2] : 0;
  if (c0 == '=' && c1 != '=') return true;
  if (strchr("+-*/%&|^", c0) && c0 && c1 == '=') return true;
  if ((c0 == '+' && c1 == '+') || (c0 == '-' && c1 == '-')) return true;
  if ((c0 == '<' || c0 == '>') && c1 == c0 && c2 == '=') return true;
  size_t k = at;
  while (k > 0 && cube__is_space(v[k - 1])) --k;
  if (k >= 2 && ((v[k - 1] == '+' && v[k - 2] == '+') || (v[k - 1] == '-' && v[k - 2] == '-')))
    return true;
  if (k >= 1 && v[k - 1] == '&' && (k < 2 || v[k - 2] != '&')) return true;
  return false;
}

/* Whether [b, e) is the same identifier as [b2, e2). */
bool cube__same_name(const char* v, size_t b, size_t e, size_t b2, size_t e2) {
  return e - b == e2 - b2 && memcmp(v + b, v + b2, e - b) == 0;
}

/* The scalar type words at |i| ([const] T [const]); *out_end after them and
 * the type (const dropped) in |type|. 1 when it is one of the supported
 * scalar types, 0 when [i] starts no type word, -1 otherwise. */
int cube__split_type(const char* v, size_t i, size_t e, size_t* out_end, char* type,
                            size_t cap) {
  static const char* const words[] = {"const",   "uint32_t", "int32_t", "uint64_t", "int64_t",
                                      "float",   "double",   "unsigned", "int"};
  type[0] = '\0';
  bool any = false;
  for (;;) {
    size_t p = cube__skip_space(v, i, e);
    bool hit = false;
    for (size_t w = 0; w < sizeof words / sizeof words[0]; ++w) {
      if (cube__tok_is(v, p, e, words[w])) {
        hit = true;
        any = true;
        if (w != 0) {
          if (strlen(type) + strlen(words[w]) + 2 > cap) return -1;
          if (type[0]) strcat(type, " ");
          strcat(type, words[w]);
        }
        i = p + strlen(words[w]);
        break;
      }
    }
    if (!hit) break;
  }
  *out_end = i;
  if (!any) return 0;
  static const char* const ok[] = {"uint32_t", "int32_t", "uint64_t", "int64_t", "float",
                                   "double",   "unsigned", "int",     "unsigned int"};
  for (size_t k = 0; k < sizeof ok / sizeof ok[0]; ++k)
    if (strcmp(type, ok[k]) == 0) return 1;
  return -1;
}

/* The integer literal (decimal or hex, a u or U suffix allowed) that
 * [b, e) is alone, in *out; false otherwise or when it exceeds 2^20. */
bool cube__split_number(const char* t, size_t b, size_t e, uint64_t* out) {
  while (b < e && cube__is_space(t[b])) ++b;
  while (e > b && cube__is_space(t[e - 1])) --e;
  if (e > b && (t[e - 1] == 'u' || t[e - 1] == 'U')) --e;
  if (b >= e) return false;
  unsigned base = 10;
  if (e - b > 2 && t[b] == '0' && (t[b + 1] == 'x' || t[b + 1] == 'X')) {
    base = 16;
    b += 2;
  }
  uint64_t x = 0;
  for (size_t i = b; i < e; ++i) {
    char c = t[i];
    unsigned d;
    if (c >= '0' && c <= '9')
      d = (unsigned)(c - '0');
    else if (base == 16 && c >= 'a' && c <= 'f')
      d = (unsigned)(c - 'a' + 10);
    else if (base == 16 && c >= 'A' && c <= 'F')
      d = (unsigned)(c - 'A' + 10);
    else
      return false;
    x = x * base + d;
    if (x > (1u << 20)) return false;
  }
  *out = x;
  return true;
}

/* The element count of a local array, [b, e) inside its brackets: a product
 * ('*') of integer literals and of defines whose value is one; 0 when it is
 * anything else, zero, or more than 2^16. */
uint32_t cube__split_array_count(const cube__split_t* s, size_t b, size_t e) {
  const char* v = s->v;
  uint64_t total = 1;
  size_t i = b;
  while (i <= e) {
    size_t j = i;
    while (j < e && v[j] != '*') ++j;
    size_t tb = i, te = j;
    cube__trim(v, &tb, &te);
    uint64_t x = 0;
    bool ok = cube__split_number(v, tb, te, &x);
    for (uint32_t k = 0; !ok && k < s->define_count; ++k) {
      if (!cube__tok_is(v, tb, te, s->defines[k].name) ||
          te - tb != strlen(s->defines[k].name))
        continue;
      const char* val = s->defines[k].value ? s->defines[k].value : "";
      ok = cube__split_number(val, 0, strlen(val), &x);
    }
    if (!ok || x == 0) return 0;
    total *= x;
    if (total > (1u << 16)) return 0;
    i = j + 1;
  }
  return (uint32_t)total;
}

/* How the body uses the name declared at [b, e) after its declaration:
 * *written when it is assigned, incremented, decremented or its address is
 * taken; *addressed when its address is taken ('&name', not '&&'). A name of
 * 64 characters or more counts as both. */
void cube__split_uses(const cube__split_t* s, size_t b, size_t e, bool* written,
                             bool* addressed) {
  char name[64];
  size_t len = e - b;
  *written = *addressed = true;
  if (len >= sizeof name) return;
  memcpy(name, s->v + b, len);
  name[len] = '\0';
  *written = *addressed = false;
  for (size_t at = cube__find_token(s->v, s->body_e, s->body_b, name); at < s->body_e;
       at = cube__find_token(s->v, s->body_e, at + 1, name)) {
    if (at == b) continue;
    if (cube__is_modified(s->v, s->body_e, at, len)) *written = true;
    size_t k = at;
    while (k > s->body_b && cube__is_space(s->v[k - 1])) --k;
    if (k > s->body_b && s->v[k - 1] == '&' && (k < s->body_b + 2 || s->v[k - 2] != '&'))
      *addressed = true;
  }
}

/* Bytes of one of the scalar types of cube__split_type. */
uint64_t cube__split_type_size(const char* type) {
  return strstr(type, "64") || strcmp(type, "double") == 0 ? 8u : 4u;
}

/* Whether a statement of a region, [i, end), may sit in a loop over units: it
 * must not declare anything at the top level (that would be gone for the
 * next region). */
bool cube__split_plain_ok(const char* v, size_t i, size_t end) {
  if (!cube__is_ident_start(v[i])) return true;
  static const char* const refuse[] = {
      "static", "typedef", "struct", "union", "enum", "extern", "register", "auto", "volatile",
      "_Thread_local", "__thread", "bool", "_Bool", "char", "short", "long", "signed", "void",
      "CUBE_GLOBAL", "CUBE_LOCAL", "CUBE_RESTRICT", "restrict", "_Static_assert",
      "__attribute__", "__extension__", "_Alignas", "case", "default", "else", "const",
      "CUBE_SHARED", "__label__", "asm", "__asm__", "__asm"};
  for (size_t k = 0; k < sizeof refuse / sizeof refuse[0]; ++k)
    if (cube__tok_is(v, i, end, refuse[k])) return false;
  size_t we = i;
  while (we < end && cube__is_ident_char(v[we])) ++we;
  if (we - i >= 2 && v[we - 2] == '_' && v[we - 1] == 't') return false; /* a type name */
  size_t p = cube__skip_space(v, we, end);
  if (p < end && cube__is_ident_start(v[p])) {
    /* "T x": a declaration; only the statement keywords may be followed by a word. */
    return cube__tok_is(v, i, end, "do") || cube__tok_is(v, i, end, "if") ||
           cube__tok_is(v, i, end, "for") || cube__tok_is(v, i, end, "while");
  }
  if (p < end && v[p] == ':' && (p + 1 >= end || v[p + 1] != ':')) return false; /* label */
  if (p < end && v[p] == '*') { /* "T *x" */
    size_t q = p;
    while (q < end && (v[q] == '*' || cube__is_space(v[q]))) ++q;
    if (q < end && cube__is_ident_start(v[q])) return false;
  }
  return true;
}

/* Whether [b, e) is an expression the same for every unit of a region and
 * free of side effects: numbers, + - * / % ~ ! << >> and parentheses, and
 * names that no unit can change: scalar parameters, loop variables of
 * uniform loops, the cube's dimensions, positions and counts, defines whose
 * value is a number, and the scalar type names of a cast. No relational,
 * equality, bitwise, logical, conditional, assignment or comma operator is
 * allowed (each binds looser than '<', or writes). */
bool cube__split_uniform_expr(const cube__split_t* s, size_t b, size_t e) {
  const char* v = s->v;
  static const char* const words[] = {
      "CUBE_DIM",   "CUBE_DIM_X", "CUBE_DIM_Y", "CUBE_DIM_Z", "CUBE_COUNT", "CUBE_COUNT_X",
      "CUBE_COUNT_Y", "CUBE_COUNT_Z", "CUBE_POS", "CUBE_POS_X", "CUBE_POS_Y", "CUBE_POS_Z",
      "uint32_t",   "int32_t",    "uint64_t",   "int64_t",    "unsigned",   "int",
      "float",      "double"};
  bool any = false;
  size_t i = b;
  while (i < e) {
    char c = v[i];
    if (cube__is_space(c)) {
      ++i;
      continue;
    }
    any = true;
    if (c >= '0' && c <= '9') {
      while (i < e && (cube__is_ident_char(v[i]) || v[i] == '.')) ++i;
      continue;
    }
    if (cube__is_ident_start(c)) {
      size_t tb = i;
      while (i < e && cube__is_ident_char(v[i])) ++i;
      bool ok = false;
      for (size_t k = 0; !ok && k < sizeof words / sizeof words[0]; ++k)
        ok = cube__tok_is(v, tb, i, words[k]);
      for (uint32_t k = 0; !ok && k < s->sig->count; ++k)
        ok = s->sig->params[k].kind != CUBE_ARG_BUFFER &&
             cube__tok_is(v, tb, i, s->sig->params[k].name);
      for (uint32_t k = 0; !ok && k < s->nlv; ++k)
        ok = cube__same_name(v, tb, i, s->lv_b[k], s->lv_e[k]);
      for (uint32_t k = 0; !ok && k < s->define_count; ++k) {
        const char* val = s->defines[k].value ? s->defines[k].value : "";
        size_t vl = strlen(val), q = 0;
        while (q < vl && cube__is_space(val[q])) ++q;
        bool number = q < vl && val[q] >= '0' && val[q] <= '9';
        for (; number && q < vl; ++q)
          number = cube__is_ident_char(val[q]) || val[q] == '.' || cube__is_space(val[q]);
        ok = number && cube__tok_is(v, tb, i, s->defines[k].name);
      }
      bool uniform_local = false;
      for (uint32_t k = 0; k < s->npriv; ++k)
        if (cube__same_name(v, tb, i, s->priv[k].b, s->priv[k].e))
          uniform_local = s->priv[k].uniform;
      if (uniform_local) continue;
      /* A name the kernel declares again (a local of that name) is not the
       * object above. */
      for (uint32_t k = 0; ok && k < s->npriv; ++k)
        ok = !cube__same_name(v, tb, i, s->priv[k].b, s->priv[k].e);
      for (uint32_t k = 0; ok && k < s->nshared; ++k)
        ok = !cube__same_name(v, tb, i, s->sh_b[k], s->sh_e[k]);
      if (!ok) return false;
      continue;
    }
    if ((c == '<' || c == '>') && i + 1 < e && v[i + 1] == c) {
      i += 2;
      continue;
    }
    if ((c == '+' || c == '-') && i + 1 < e && v[i + 1] == c) return false;
    if (!strchr("+-*/%~!()", c)) return false;
    ++i;
  }
  return any;
}

/* Whether [b, e) is a condition the same for every unit and free of side
 * effects: the names and numbers of cube__split_uniform_expr, joined by any
 * arithmetic, relational, equality, bitwise, logical or conditional
 * operator; no assignment, increment, comma, call, index or member. */
bool cube__split_uniform_cond(const cube__split_t* s, size_t b, size_t e) {
  const char* v = s->v;
  bool any = false;
  size_t i = b;
  while (i < e) {
    char c = v[i], c1 = i + 1 < e ? v[i + 1] : 0, c2 = i + 2 < e ? v[i + 2] : 0;
    if (cube__is_space(c) || c == '(' || c == ')') {
      ++i;
      continue;
    }
    if (c >= '0' && c <= '9') {
      any = true;
      while (i < e && (cube__is_ident_char(v[i]) || v[i] == '.')) ++i;
      continue;
    }
    if (cube__is_ident_start(c)) {
      size_t tb = i;
      while (i < e && cube__is_ident_char(v[i])) ++i;
      if (!cube__split_uniform_expr(s, tb, i)) return false;
      size_t p = cube__skip_space(v, i, e);
      if (p < e && (v[p] == '(' || v[p] == '[' || v[p] == '.')) return false;
      any = true;
      continue;
    }
    if ((c == '<' || c == '>') && c1 == c) { /* << >>, not <<= >>= */
      if (c2 == '=') return false;
      i += 2;
      continue;
    }
    if ((c == '<' || c == '>' || c == '!' || c == '=') && c1 == '=') { /* <= >= != == */
      i += 2;
      continue;
    }
    if ((c == '&' || c == '|') && c1 == c) {
      i += 2;
      continue;
    }
    if (c == '=' || ((c == '+' || c == '-') && c1 == c)) return false;
    if (strchr("+-*/%&|^", c) && c1 == '=') return false;
    if (!strchr("+-*/%~!<>&|^?:", c)) return false;
    ++i;
  }
  return any;
}

/* Whether [b, e) names a uniform local. */
bool cube__split_uniform_local(const cube__split_t* s, size_t b, size_t e) {
  for (uint32_t k = 0; k < s->npriv; ++k)
    if (cube__same_name(s->v, b, e, s->priv[k].b, s->priv[k].e)) return s->priv[k].uniform;
  return false;
}

/* Whether the statement [i, end) is a uniform write: `x = E;`, `x op= E;`,
 * `++x;`, `--x;`, `x++;` or `x--;` with x a uniform local and E the same for
 * every unit (cube__split_uniform_cond); *at: where x is. */
bool cube__split_uniform_write(const cube__split_t* s, size_t i, size_t end, size_t* at) {
  const char* v = s->v;
  size_t last = end - 1; /* the ';' */
  if (last <= i || v[last] != ';') return false;
  bool pre = (v[i] == '+' || v[i] == '-') && i + 1 < last && v[i + 1] == v[i];
  size_t nb = cube__skip_space(v, pre ? i + 2 : i, last), ne = nb;
  while (ne < last && cube__is_ident_char(v[ne])) ++ne;
  if (ne == nb || !cube__is_ident_start(v[nb]) || !cube__split_uniform_local(s, nb, ne))
    return false;
  *at = nb;
  size_t q = cube__skip_space(v, ne, last);
  if (pre) return q == last;
  if (q + 1 < last && (v[q] == '+' || v[q] == '-') && v[q + 1] == v[q])
    return cube__skip_space(v, q + 2, last) == last;
  if (q + 2 < last && (v[q] == '<' || v[q] == '>') && v[q + 1] == v[q] && v[q + 2] == '=')
    q += 3;
  else if (q + 1 < last && strchr("+-*/%&|^", v[q]) && v[q + 1] == '=')
    q += 2;
  else if (q < last && v[q] == '=' && (q + 1 >= last || v[q + 1] != '='))
    q += 1;
  else
    return false;
  return cube__split_uniform_cond(s, q, last);
}

/* Whether the statement [b, e) has a `break` or `continue` outside every
 * loop inside it (one that leaves the statement); *ok false when one cannot
 * be placed (a loop whose end is not read). */
bool cube__split_escapes(const char* v, size_t b, size_t e, bool* ok) {
  *ok = true;
  static const char* const jumps[] = {"break", "continue"};
  for (size_t w = 0; w < 2; ++w) {
    for (size_t at = cube__find_token(v, e, b, jumps[w]); at < e;
         at = cube__find_token(v, e, at + 1, jumps[w])) {
      bool inside = false;
      static const char* const loops[] = {"for", "while", "do"};
      for (size_t l = 0; !inside && l < 3; ++l)
        for (size_t k = cube__find_token(v, at, b, loops[l]); !inside && k < at;
             k = cube__find_token(v, at, k + 1, loops[l])) {
          size_t end = cube__stmt_end(v, k, e);
          if (end == CUBE__SPLIT_NONE) {
            *ok = false;
            return true;
          }
          inside = at < end;
        }
      if (!inside) return true;
    }
  }
  return false;
}

/* Whether [b, e) names a private local whose value is the unit's position
 * (cube__split_priv_t.unit_pos). */
bool cube__split_unit_priv(const cube__split_t* s, size_t b, size_t e) {
  for (uint32_t k = 0; k < s->npriv; ++k)
    if (cube__same_name(s->v, b, e, s->priv[k].b, s->priv[k].e)) return s->priv[k].unit_pos;
  return false;
}

/* Whether the statement [i, end) (followed in its block, which ends at |e|,
 * by a barrier or by the block's end) is `if (A < B) stmt` or
 * `if (B > A) stmt` without else, where A is a private local initialised with
 * UNIT_POS_X or UNIT_POS at the top level of the body and never written
 * again, and B is the same for every unit of the region
 * (cube__split_uniform_expr). Then, in the order the region runs its units,
 * the guard holds for a prefix of them. [*out_b, *out_e): the condition. */
bool cube__split_guard(const cube__split_t* s, size_t i, size_t end, size_t e,
                              size_t* out_b, size_t* out_e) {
  const char* v = s->v;
  if (!cube__tok_is(v, i, end, "if")) return false;
  size_t after = cube__skip_space(v, end, e);
  if (after < e && !cube__tok_is(v, after, e, "sync_cube")) return false;
  size_t p = cube__skip_space(v, i + 2, end);
  if (p >= end || v[p] != '(') return false;
  size_t c = cube__match_paren(v, end, p);
  if (c >= end) return false;
  size_t body_end = cube__stmt_end(v, c + 1, end);
  if (body_end != end) return false; /* an else */
  size_t cb = p + 1, ce = c;
  cube__trim(v, &cb, &ce);
  if (cb >= ce) return false;
  /* A < B, else B > A. */
  size_t ab = cb, ae = cb, bb = 0, be = 0;
  while (ae < ce && cube__is_ident_char(v[ae])) ++ae;
  size_t op = cube__skip_space(v, ae, ce);
  if (ae > ab && cube__split_unit_priv(s, ab, ae) && op + 1 < ce && v[op] == '<' &&
      v[op + 1] != '<' && v[op + 1] != '=') {
    bb = op + 1;
    be = ce;
  } else {
    ab = ae = ce;
    while (ab > cb && cube__is_ident_char(v[ab - 1])) --ab;
    if (ab == ae || !cube__is_ident_start(v[ab]) || !cube__split_unit_priv(s, ab, ae))
      return false;
    op = ab;
    while (op > cb && cube__is_space(v[op - 1])) --op;
    if (op < cb + 2 || v[op - 1] != '>' || v[op - 2] == '>' || v[op - 2] == '-') return false;
    bb = cb;
    be = op - 1;
  }
  /* A is never written after its declaration. */
  char name[64];
  size_t len = ae - ab;
  if (len >= sizeof name) return false;
  memcpy(name, v + ab, len);
  name[len] = '\0';
  size_t decl = CUBE__SPLIT_NONE;
  for (uint32_t k = 0; k < s->npriv; ++k)
    if (cube__same_name(v, ab, ae, s->priv[k].b, s->priv[k].e)) decl = s->priv[k].b;
  for (size_t at = cube__find_token(v, s->body_e, s->body_b, name); at < s->body_e;
       at = cube__find_token(v, s->body_e, at + 1, name))
    if (at != decl && cube__is_modified(v, s->body_e, at, len)) return false;
  if (!cube__split_uniform_expr(s, bb, be)) return false;
  *out_b = cb;
  *out_e = ce;
  return true;
}

/* Whether every occurrence of the name declared at [nb, ne) in the body
 * [bb, be) is that object: none before the declaration (some outer object of
 * that name), none a member (".name", "->name") and none declaring the name
 * again ("T name", "T* name"), so that a #define of the name reaches only it.
 * A name longer than 63 characters counts as not. */
bool cube__split_sole_name(const char* v, size_t bb, size_t be, size_t nb, size_t ne) {
  char name[64];
  size_t len = ne - nb;
  if (len >= sizeof name) return false;
  memcpy(name, v + nb, len);
  name[len] = '\0';
  for (size_t at = cube__find_token(v, be, bb, name); at < be;
       at = cube__find_token(v, be, at + 1, name)) {
    if (at == nb) continue;
    if (at < nb) return false; /* used before: some outer object of that name */
    size_t q = at;
    while (q > bb && cube__is_space(v[q - 1])) --q;
    if (q > bb && (v[q - 1] == '.' || (v[q - 1] == '>' && q - 1 > bb && v[q - 2] == '-')))
      return false; /* a member of that name */
    if (q > bb && cube__is_ident_char(v[q - 1])) {
      size_t w = q;
      while (w > bb && cube__is_ident_char(v[w - 1])) --w;
      if (!cube__tok_is(v, w, q, "sizeof") && !cube__tok_is(v, w, q, "else") &&
          !cube__tok_is(v, w, q, "do"))
        return false;
    }
    if (q > bb && v[q - 1] == '*') {
      size_t r = q - 1;
      while (r > bb && (v[r - 1] == '*' || cube__is_space(v[r - 1]))) --r;
      if (r > bb && cube__is_ident_char(v[r - 1])) {
        size_t w = r;
        while (w > bb && cube__is_ident_char(v[w - 1])) --w;
        while (w > bb && cube__is_space(v[w - 1])) --w;
        if (w == bb || strchr(";{}(,", v[w - 1])) return false;
      }
    }
  }
  return true;
}

/* Checks of the whole kernel once its statements are read. */
bool cube__split_checks(cube__split_t* s, const cube__signature_t* sig, size_t bb,
                               size_t be, size_t eb, size_t ee, const cube_define_t* defines,
                               uint32_t define_count) {
  const char* v = s->v;
  size_t n = s->n;
  static const char* const banned[] = {
      "goto", "switch", "static", "_Thread_local", "__thread",
      "setjmp", "longjmp", "cube__sched", "CUBE_UNIT_PARAMS", "__label__", "asm", "__asm__",
      "__asm", "alloca", "__builtin_alloca", "cube__unit", "cube__ax"};
  for (size_t k = 0; k < sizeof banned / sizeof banned[0]; ++k)
    if (cube__range_has(v, bb, be, banned[k])) return false;
  for (size_t j = bb; j < be; ++j)
    if (v[j] == '#') return false;
  /* A barrier anywhere but in this body or another kernel's (a helper, a
   * macro) keeps the fibers. */
  for (size_t at = cube__find_token(v, n, 0, "sync_cube"); at < n;
       at = cube__find_token(v, n, at + 1, "sync_cube")) {
    if (at >= eb && at < ee) continue;
    if (!cube__in_other_kernel(v, n, at, s->entry_close)) return false;
  }
  for (uint32_t i = 0; i < define_count; ++i) {
    const char* val = defines[i].value ? defines[i].value : "";
    size_t vl = strlen(val);
    static const char* const bad[] = {"sync_cube", "return", "break", "continue", "goto"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; ++k)
      if (cube__find_token(val, vl, 0, bad[k]) < vl) return false;
  }
  /* Parameters are shared by the units of a region: none may be written. */
  for (uint32_t i = 0; i < sig->count; ++i) {
    const char* name = sig->params[i].name;
    size_t len = strlen(name);
    for (size_t at = cube__find_token(v, be, bb, name); at < be;
         at = cube__find_token(v, be, at + 1, name))
      if (cube__is_modified(v, be, at, len)) return false;
    for (uint32_t k = 0; k < s->npriv; ++k)
      if (s->priv[k].e - s->priv[k].b == len && memcmp(v + s->priv[k].b, name, len) == 0)
        return false;
  }
  /* Loop variables of uniform loops: written by the header only. */
  for (uint32_t i = 0; i < s->nlv; ++i) {
    char name[64];
    size_t len = s->lv_e[i] - s->lv_b[i];
    if (len >= sizeof name) return false;
    memcpy(name, v + s->lv_b[i], len);
    name[len] = '\0';
    for (size_t at = cube__find_token(v, s->lv_body_e[i], s->lv_body_b[i], name);
         at < s->lv_body_e[i]; at = cube__find_token(v, s->lv_body_e[i], at + 1, name))
      if (cube__is_modified(v, s->lv_body_e[i], at, len)) return false;
  }
  /* Private locals: unique names, never declared again (a nested declaration
   * would meet the #define). */
  for (uint32_t k = 0; k < s->npriv; ++k) {
    const cube__split_priv_t* p = &s->priv[k];
    for (uint32_t j = 0; j < k; ++j)
      if (cube__same_name(v, p->b, p->e, s->priv[j].b, s->priv[j].e)) return false;
    for (uint32_t j = 0; j < s->nshared; ++j)
      if (cube__same_name(v, p->b, p->e, s->sh_b[j], s->sh_e[j])) return false;
    for (uint32_t j = 0; j < s->nlv; ++j)
      if (cube__same_name(v, p->b, p->e, s->lv_b[j], s->lv_e[j])) return false;
    if (!cube__split_sole_name(v, bb, be, p->b, p->e)) return false;
  }
  /* Shared arrays: aliased through a pointer read once (cube__split_generate)
   * when the name means that array wherever it occurs. */
  for (uint32_t k = 0; k < s->nshared; ++k)
    s->sh_alias[k] = cube__split_sole_name(v, bb, be, s->sh_b[k], s->sh_e[k]);
  /* Uniform headers read no per-unit value and call nothing. */
  static const char* const unit_words[] = {
      "UNIT_POS", "UNIT_POS_X", "UNIT_POS_Y", "UNIT_POS_Z", "UNIT_POS_PLANE", "ABSOLUTE_POS",
      "ABSOLUTE_POS_X", "ABSOLUTE_POS_Y", "ABSOLUTE_POS_Z", "cube__ux", "cube__uy", "cube__uz",
      "cube__abs", "cube__ax", "CUBE_UNIT_ARGS"};
  for (uint32_t h = 0; h < s->nhdr; ++h) {
    size_t i = s->hdr_b[h], e = s->hdr_e[h];
    while (i < e) {
      if (v[i] >= '0' && v[i] <= '9') {
        while (i < e && (cube__is_ident_char(v[i]) || v[i] == '.')) ++i;
        continue;
      }
      if (!cube__is_ident_start(v[i])) {
        ++i;
        continue;
      }
      size_t tb = i;
      while (i < e && cube__is_ident_char(v[i])) ++i;
      for (size_t k = 0; k < sizeof unit_words / sizeof unit_words[0]; ++k)
        if (cube__tok_is(v, tb, i, unit_words[k])) return false;
      for (uint32_t k = 0; k < s->npriv; ++k)
        if (cube__same_name(v, tb, i, s->priv[k].b, s->priv[k].e) && !s->priv[k].uniform)
          return false;
      for (uint32_t k = 0; k < s->nshared; ++k)
        if (cube__same_name(v, tb, i, s->sh_b[k], s->sh_e[k])) return false;
      size_t p = cube__skip_space(v, i, e);
      if (p < e && v[p] == '(' && !cube__tok_is(v, tb, i, "sizeof")) return false;
    }
  }
  return true;
}
