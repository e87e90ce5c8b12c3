/* The cube dialect: reading a kernel's signature out of its source
 * (cube__dialect_parse) and the lexing the generator and the CPU splitter
 * share (dialect_internal.h).
 *
 * Parsing works on a "code view" of the source: a copy in which comments and
 * the contents of string and character literals are blanked (newlines kept),
 * so that offsets and line numbers stay those of the source and every token
 * search sees code only.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kernel/dialect.h"
#include "kernel/dialect_internal.h"

/* The code view ------------------------------------------------------------ */

/* A malloc'd copy of |src| (length |n|) with comments and literal contents
 * replaced by spaces, newlines kept. NULL when out of memory. */
char* cube__code_view(const char* src, size_t n) {
  char* v = malloc(n + 1);
  if (!v) return NULL;
  memcpy(v, src, n + 1);
  size_t i = 0;
  while (i < n) {
    char c = src[i];
    if (c == '/' && i + 1 < n && src[i + 1] == '/') {
      /* Line comment; a backslash-newline continues it. */
      while (i < n && src[i] != '\n') {
        if (src[i] == '\\' && i + 1 < n && src[i + 1] == '\n') {
          v[i] = ' ';
          i += 2;
          continue;
        }
        if (src[i] == '\\' && i + 2 < n && src[i + 1] == '\r' && src[i + 2] == '\n') {
          v[i] = v[i + 1] = ' ';
          i += 3;
          continue;
        }
        v[i++] = ' ';
      }
    } else if (c == '/' && i + 1 < n && src[i + 1] == '*') {
      v[i] = v[i + 1] = ' ';
      i += 2;
      while (i < n && !(src[i] == '*' && i + 1 < n && src[i + 1] == '/')) {
        if (src[i] != '\n') v[i] = ' ';
        ++i;
      }
      if (i < n) {
        v[i] = v[i + 1] = ' ';
        i += 2;
      }
    } else if (c == '"' || c == '\'') {
      /* Keep the quotes, blank the contents. */
      ++i;
      while (i < n && src[i] != c && src[i] != '\n') {
        if (src[i] == '\\' && i + 1 < n) {
          v[i] = ' ';
          ++i;
          if (src[i] != '\n') v[i] = ' ';
          ++i;
          continue;
        }
        v[i++] = ' ';
      }
      if (i < n && src[i] == c) ++i;
    } else {
      ++i;
    }
  }
  return v;
}

uint32_t cube__line_at(const char* view, size_t off) {
  uint32_t line = 1;
  for (size_t i = 0; i < off; ++i)
    if (view[i] == '\n') ++line;
  return line;
}

size_t cube__skip_space(const char* v, size_t i, size_t n) {
  while (i < n && cube__is_space(v[i])) ++i;
  return i;
}

/* Finds the next identifier token equal to |word| at or after |from|;
 * returns its offset or |n|. */
size_t cube__find_token(const char* v, size_t n, size_t from, const char* word) {
  size_t wl = strlen(word);
  size_t i = from;
  while (i < n) {
    if (cube__is_ident_start(v[i])) {
      size_t s = i;
      while (i < n && cube__is_ident_char(v[i])) ++i;
      if (i - s == wl && memcmp(v + s, word, wl) == 0) return s;
    } else if (v[i] >= '0' && v[i] <= '9') {
      /* A number (1e5f, 0x1p3, 10u): its letters are no identifier. */
      while (i < n && (cube__is_ident_char(v[i]) || v[i] == '.')) ++i;
    } else {
      ++i;
    }
  }
  return n;
}

/* Whether the identifier token at |i| (bounded by |e|) is |word|. */
bool cube__tok_is(const char* v, size_t i, size_t e, const char* word) {
  size_t wl = strlen(word);
  if (i + wl > e || memcmp(v + i, word, wl) != 0) return false;
  if (i > 0 && cube__is_ident_char(v[i - 1])) return false;
  return i + wl == e || !cube__is_ident_char(v[i + wl]);
}

/* Given |open| at '(' (or '[' / '{'), the offset of the matching closer, or
 * |n| when the source ends first. */
size_t cube__match_paren(const char* v, size_t n, size_t open) {
  int depth = 0;
  for (size_t i = open; i < n; ++i) {
    char c = v[i];
    if (c == '(' || c == '[' || c == '{') {
      ++depth;
    } else if (c == ')' || c == ']' || c == '}') {
      if (--depth == 0) return i;
    }
  }
  return n;
}

/* Splits v[b, e) at top-level commas into at most |max| ranges; returns the
 * number of parts (may exceed |max|: only the first |max| are stored). */
uint32_t cube__split_commas(const char* v, size_t b, size_t e, size_t* starts, size_t* ends,
                            uint32_t max) {
  uint32_t count = 0;
  int depth = 0;
  size_t s = b;
  for (size_t i = b; i <= e; ++i) {
    if (i == e || (v[i] == ',' && depth == 0)) {
      if (count < max) {
        starts[count] = s;
        ends[count] = i;
      }
      ++count;
      s = i + 1;
      continue;
    }
    char c = v[i];
    if (c == '(' || c == '[' || c == '{') ++depth;
    if (c == ')' || c == ']' || c == '}') --depth;
  }
  return count;
}

void cube__trim(const char* v, size_t* b, size_t* e) {
  while (*b < *e && cube__is_space(v[*b])) ++*b;
  while (*e > *b && cube__is_space(v[*e - 1])) --*e;
}

/* Copies v[b, e) into |out| (capacity |cap|) with every run of white space
 * made one space and none around punctuation; false when it does not fit. */
static bool cube__normalize(const char* v, size_t b, size_t e, char* out, size_t cap) {
  size_t o = 0;
  bool pending_space = false;
  for (size_t i = b; i < e; ++i) {
    char c = v[i];
    if (cube__is_space(c)) {
      pending_space = o > 0;
      continue;
    }
    if (pending_space && cube__is_ident_char(c) && cube__is_ident_char(out[o - 1])) {
      if (o + 1 >= cap) return false;
      out[o++] = ' ';
    }
    pending_space = false;
    if (o + 1 >= cap) return false;
    out[o++] = c;
  }
  out[o] = '\0';
  return true;
}

/* Kernel declarations -------------------------------------------------------- */

/* Reads the CUBE_KERNEL declaration at |kw|. */
cube__decl_t cube__read_decl(const char* v, size_t n, size_t kw) {
  cube__decl_t d;
  memset(&d, 0, sizeof d);
  d.kw = kw;
  size_t i = cube__skip_space(v, kw + strlen("CUBE_KERNEL"), n);
  if (i >= n || v[i] != '(') {
    d.malformed = true;
    d.close = i;
    return d;
  }
  d.open = i;
  d.close = cube__match_paren(v, n, i);
  i = cube__skip_space(v, i + 1, n);
  d.name_b = i;
  while (i < n && cube__is_ident_char(v[i])) ++i;
  d.name_e = i;
  if (d.name_e == d.name_b || !cube__is_ident_start(v[d.name_b])) {
    d.malformed = true;
    return d;
  }
  i = cube__skip_space(v, i, n);
  if (i < n && v[i] == ',') {
    d.has_comma = true;
    d.params_b = i + 1;
  } else {
    d.params_b = i;
  }
  return d;
}

bool cube__decl_named(const char* v, const cube__decl_t* d, const char* name) {
  size_t len = strlen(name);
  return !d->malformed && d->name_e - d->name_b == len && memcmp(v + d->name_b, name, len) == 0;
}

size_t cube__find_decl(const char* v, size_t n, size_t from, const char* name, cube__decl_t* out) {
  for (size_t at = cube__find_token(v, n, from, "CUBE_KERNEL"); at < n;
       at = cube__find_token(v, n, at + 1, "CUBE_KERNEL")) {
    *out = cube__read_decl(v, n, at);
    if (cube__decl_named(v, out, name)) return at;
  }
  return n;
}

/* Scalar types ----------------------------------------------------------------- */

typedef struct cube__scalar_spelling {
  const char* spelling;
  cube_arg_kind_t kind;
} cube__scalar_spelling_t;

static const cube__scalar_spelling_t cube__scalars[] = {
    {"uint32_t", CUBE_ARG_U32},
    {"unsigned", CUBE_ARG_U32},
    {"unsigned int", CUBE_ARG_U32},
    {"int32_t", CUBE_ARG_I32},
    {"int", CUBE_ARG_I32},
    {"signed", CUBE_ARG_I32},
    {"signed int", CUBE_ARG_I32},
    {"uint64_t", CUBE_ARG_U64},
    {"unsigned long long", CUBE_ARG_U64},
    {"unsigned long long int", CUBE_ARG_U64},
    {"int64_t", CUBE_ARG_I64},
    {"long long", CUBE_ARG_I64},
    {"long long int", CUBE_ARG_I64},
    {"signed long long", CUBE_ARG_I64},
    {"signed long long int", CUBE_ARG_I64},
    {"float", CUBE_ARG_F32},
    {"double", CUBE_ARG_F64},
};

const char* cube__canonical_scalar(cube_arg_kind_t kind) {
  switch (kind) {
    case CUBE_ARG_U32: return "uint32_t";
    case CUBE_ARG_I32: return "int32_t";
    case CUBE_ARG_U64: return "uint64_t";
    case CUBE_ARG_I64: return "int64_t";
    case CUBE_ARG_F32: return "float";
    case CUBE_ARG_F64: return "double";
    default: return NULL;
  }
}

/* Removes the whole-word "const" tokens at the start and the end of |type|
 * (in place); true when one was removed. */
static bool cube__strip_const(char* type) {
  bool found = false;
  for (;;) {
    size_t len = strlen(type);
    if (strncmp(type, "const", 5) == 0 && (len == 5 || !cube__is_ident_char(type[5]))) {
      size_t skip = 5;
      while (type[skip] == ' ') ++skip;
      memmove(type, type + skip, len - skip + 1);
      found = true;
      continue;
    }
    if (len >= 5 && strcmp(type + len - 5, "const") == 0 &&
        (len == 5 || !cube__is_ident_char(type[len - 6]))) {
      size_t keep = len - 5;
      while (keep > 0 && type[keep - 1] == ' ') --keep;
      type[keep] = '\0';
      found = true;
      continue;
    }
    return found;
  }
}

/* Parsing ------------------------------------------------------------------------ */

#define CUBE__PARAM_TEXT_MAX 80

/* The parameter's text for messages ("float* p"). */
static void cube__param_text(const char* v, size_t b, size_t e, char* out) {
  if (!cube__normalize(v, b, e, out, CUBE__PARAM_TEXT_MAX)) {
    size_t len = e - b < CUBE__PARAM_TEXT_MAX - 4 ? e - b : CUBE__PARAM_TEXT_MAX - 4;
    memcpy(out, v + b, len);
    memcpy(out + len, "...", 4);
  }
}

static cube_status_t cube__param_error(const char* entry, uint32_t line, uint32_t index,
                                       const char* text, const char* fmt, ...)
    CUBE_PRINTF(5, 6);
static cube_status_t cube__param_error(const char* entry, uint32_t line, uint32_t index,
                                       const char* text, const char* fmt, ...) {
  char why[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  return CUBE_INVALID("kernel '%s', line %" PRIu32 ", parameter %" PRIu32 " ('%s'): %s", entry,
                      line, index + 1, text, why);
}

/* Parses one parameter v[b, e) (trimmed, non-empty) into |p|. */
static cube_status_t cube__parse_param(const char* v, size_t b, size_t e, const char* entry,
                                       uint32_t line, uint32_t index, cube__param_t* p) {
  char text[CUBE__PARAM_TEXT_MAX];
  cube__param_text(v, b, e, text);
  memset(p, 0, sizeof *p);

  size_t kw_e = b;
  while (kw_e < e && cube__is_ident_char(v[kw_e])) ++kw_e;
  if (kw_e - b == strlen("CUBE_ARRAY") && memcmp(v + b, "CUBE_ARRAY", kw_e - b) == 0) {
    size_t open = cube__skip_space(v, kw_e, e);
    if (open >= e || v[open] != '(')
      return cube__param_error(entry, line, index, text,
                               "CUBE_ARRAY must be followed by (T, name)");
    size_t close = cube__match_paren(v, e, open);
    if (close >= e)
      return cube__param_error(entry, line, index, text, "unbalanced parentheses in CUBE_ARRAY");
    if (cube__skip_space(v, close + 1, e) != e)
      return cube__param_error(entry, line, index, text,
                               "unexpected text after CUBE_ARRAY(T, name)");
    size_t s[3], t[3];
    uint32_t parts = cube__split_commas(v, open + 1, close, s, t, 3);
    if (parts != 2)
      return cube__param_error(entry, line, index, text,
                               "CUBE_ARRAY takes two arguments (T, name), got %" PRIu32, parts);
    size_t tb = s[0], te = t[0], nb = s[1], ne = t[1];
    cube__trim(v, &tb, &te);
    cube__trim(v, &nb, &ne);
    if (!cube__is_identifier(v + nb, ne - nb))
      return cube__param_error(entry, line, index, text, "the array name is not an identifier");
    if (ne - nb >= sizeof p->name)
      return cube__param_error(entry, line, index, text, "the name is longer than %zu characters",
                               sizeof p->name - 1);
    if (!cube__normalize(v, tb, te, p->type, sizeof p->type))
      return cube__param_error(entry, line, index, text,
                               "the element type is longer than %zu characters",
                               sizeof p->type - 1);
    p->is_const = cube__strip_const(p->type);
    if (!p->type[0])
      return cube__param_error(entry, line, index, text, "the element type is missing");
    if (strchr(p->type, '"') || strchr(p->type, '\''))
      return cube__param_error(entry, line, index, text, "the element type is not a type");
    /* Buffers hold scalars; vectors are loaded from them (CUBE_VLOAD): a
     * CUDA or OpenCL pointer to a vector would need the view aligned to the
     * vector, which views at any element offset are not. */
    static const struct {
      const char* vec;
      const char* elem;
    } k_vectors[] = {{"float2", "float"}, {"float4", "float"},   {"int2", "int32_t"},
                     {"int4", "int32_t"}, {"uint2", "uint32_t"}, {"uint4", "uint32_t"}};
    for (size_t k = 0; k < sizeof(k_vectors) / sizeof(k_vectors[0]); ++k)
      if (strcmp(p->type, k_vectors[k].vec) == 0)
        return cube__param_error(entry, line, index, text,
                                 "a buffer of vectors is not supported: declare CUBE_ARRAY(%s%s, "
                                 "%.*s) and use CUBE_VLOAD(%s, %.*s, i) / CUBE_VSTORE",
                                 p->is_const ? "const " : "", k_vectors[k].elem, (int)(ne - nb),
                                 v + nb, k_vectors[k].vec, (int)(ne - nb), v + nb);
    memcpy(p->name, v + nb, ne - nb);
    p->name[ne - nb] = '\0';
    p->kind = CUBE_ARG_BUFFER;
    return CUBE_OK;
  }

  /* A scalar: type words, then the name. */
  char words[8][64];
  uint32_t nwords = 0;
  size_t i = b;
  while (i < e) {
    if (cube__is_space(v[i])) {
      ++i;
      continue;
    }
    if (!cube__is_ident_start(v[i])) {
      if (v[i] == '*' || v[i] == '[')
        return cube__param_error(entry, line, index, text,
                                 "pointer and array parameters are written CUBE_ARRAY(T, name)");
      return cube__param_error(entry, line, index, text, "unexpected '%c' in a scalar parameter",
                               v[i]);
    }
    size_t s = i;
    while (i < e && cube__is_ident_char(v[i])) ++i;
    if (nwords == 8)
      return cube__param_error(entry, line, index, text, "unknown scalar type");
    if (i - s >= sizeof words[0])
      return cube__param_error(entry, line, index, text, "a word is longer than %zu characters",
                               sizeof words[0] - 1);
    memcpy(words[nwords], v + s, i - s);
    words[nwords][i - s] = '\0';
    ++nwords;
  }
  if (nwords < 2)
    return cube__param_error(entry, line, index, text,
                             "expected a type and a name (e.g. 'uint32_t n' or "
                             "CUBE_ARRAY(float, x))");
  const char* name = words[nwords - 1];
  if (strlen(name) >= sizeof p->name)
    return cube__param_error(entry, line, index, text, "the name is longer than %zu characters",
                             sizeof p->name - 1);
  char type[8 * 64] = "";
  for (uint32_t w = 0; w + 1 < nwords; ++w) {
    if (strcmp(words[w], "const") == 0) continue;
    if (type[0]) strcat(type, " ");
    strcat(type, words[w]);
  }
  for (size_t k = 0; k < sizeof cube__scalars / sizeof cube__scalars[0]; ++k) {
    if (strcmp(type, cube__scalars[k].spelling) == 0) {
      p->kind = cube__scalars[k].kind;
      snprintf(p->type, sizeof p->type, "%s", cube__canonical_scalar(p->kind));
      snprintf(p->name, sizeof p->name, "%s", name);
      return CUBE_OK;
    }
  }
  return cube__param_error(entry, line, index, text,
                           "unknown scalar type '%s' (a scalar is uint32_t, int32_t, uint64_t, "
                           "int64_t, float or double; a buffer is CUBE_ARRAY(T, name))",
                           type);
}

/* The body of the kernel whose declaration closes at |close|: [*b, *e), the
 * braces included; false if there is none. */
bool cube__kernel_body(const char* v, size_t n, size_t close, size_t* b, size_t* e) {
  size_t i = close + 1;
  while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == '\n' || v[i] == '\r')) ++i;
  if (i >= n || v[i] != '{') return false;
  size_t depth = 0;
  for (size_t j = i; j < n; ++j) {
    if (v[j] == '{') ++depth;
    if (v[j] == '}' && --depth == 0) {
      *b = i;
      *e = j + 1;
      return true;
    }
  }
  return false;
}

bool cube__in_other_kernel(const char* v, size_t n, size_t at, size_t entry_close) {
  for (size_t k = cube__find_token(v, n, 0, "CUBE_KERNEL"); k < n;
       k = cube__find_token(v, n, k + 1, "CUBE_KERNEL")) {
    cube__decl_t cand = cube__read_decl(v, n, k);
    size_t b, e;
    if (cand.close < n && cand.close != entry_close &&
        cube__kernel_body(v, n, cand.close, &b, &e) && at >= b && at < e)
      return true;
  }
  return false;
}

/* Whether the entry (declaration closing at |entry_close|) runs its units as
 * fibers: sync_cube appears in its own body or outside every kernel body (a
 * helper function it may call). A sync_cube in *another* kernel of the same
 * source does not count: that kernel's barrier must not slow this one down
 * (a loop over units is ~80x faster than fibers). */
static bool cube__uses_sync_cube(const char* v, size_t n, size_t entry_close) {
  size_t eb = 0, ee = 0;
  bool entry_body = cube__kernel_body(v, n, entry_close, &eb, &ee);
  for (size_t at = cube__find_token(v, n, 0, "sync_cube"); at < n;
       at = cube__find_token(v, n, at + 1, "sync_cube")) {
    if (entry_body && at >= eb && at < ee) return true;
    if (!cube__in_other_kernel(v, n, at, entry_close)) return true;
  }
  return false;
}

cube_status_t cube__dialect_parse(const char* source, const char* entry,
                                  cube__signature_t* out_signature) {
  const char* fn = "cube__dialect_parse";
  if (!source) return CUBE_INVALID("%s: source is NULL", fn);
  if (!entry) return CUBE_INVALID("%s: entry is NULL", fn);
  if (!out_signature) return CUBE_INVALID("%s: out_signature is NULL", fn);
  size_t elen = strlen(entry);
  if (!cube__is_identifier(entry, elen))
    return CUBE_INVALID("kernel '%s': the entry name is not a C identifier", entry);
  if (elen >= sizeof out_signature->entry)
    return CUBE_INVALID("kernel '%s': the entry name is longer than %zu characters", entry,
                        sizeof out_signature->entry - 1);

  size_t n = strlen(source);
  char* v = cube__code_view(source, n);
  if (!v) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);

  /* Find the entry's declaration; remember the others for the message. */
  char others[256] = "";
  size_t others_len = 0;
  bool found = false;
  cube__decl_t d;
  memset(&d, 0, sizeof d);
  for (size_t at = cube__find_token(v, n, 0, "CUBE_KERNEL"); at < n;
       at = cube__find_token(v, n, at + 1, "CUBE_KERNEL")) {
    cube__decl_t cand = cube__read_decl(v, n, at);
    if (cube__decl_named(v, &cand, entry)) {
      d = cand;
      found = true;
      break;
    }
    if (!cand.malformed && others_len + (cand.name_e - cand.name_b) + 3 < sizeof others) {
      if (others_len) {
        memcpy(others + others_len, ", ", 2);
        others_len += 2;
      }
      memcpy(others + others_len, v + cand.name_b, cand.name_e - cand.name_b);
      others_len += cand.name_e - cand.name_b;
      others[others_len] = '\0';
    }
  }
  cube_status_t st = CUBE_OK;
  if (!found) {
    st = CUBE_INVALID("kernel '%s': the source has no CUBE_KERNEL(%s, ...) (kernels found: %s)",
                      entry, entry, others_len ? others : "none");
    goto done;
  }

  cube__signature_t* sig = out_signature;
  memset(sig, 0, sizeof *sig);
  memcpy(sig->entry, entry, elen + 1);
  sig->line = cube__line_at(v, d.kw);
  if (d.close >= n) {
    st = CUBE_INVALID("kernel '%s', line %" PRIu32
                      ": unbalanced parentheses: CUBE_KERNEL(%s, ... is never closed",
                      entry, sig->line, entry);
    goto done;
  }
  if (!d.has_comma) {
    st = CUBE_INVALID("kernel '%s', line %" PRIu32 ": CUBE_KERNEL(%s) has no parameters "
                      "(expected CUBE_KERNEL(%s, params...))",
                      entry, sig->line, entry, entry);
    goto done;
  }
  {
    size_t starts[CUBE_MAX_KERNEL_ARGS + 1], ends[CUBE_MAX_KERNEL_ARGS + 1];
    uint32_t parts =
        cube__split_commas(v, d.params_b, d.close, starts, ends, CUBE_MAX_KERNEL_ARGS + 1);
    if (parts > CUBE_MAX_KERNEL_ARGS) {
      st = CUBE_INVALID("kernel '%s', line %" PRIu32 ": %" PRIu32
                        " parameters, more than CUBE_MAX_KERNEL_ARGS (%d)",
                        entry, sig->line, parts, CUBE_MAX_KERNEL_ARGS);
      goto done;
    }
    for (uint32_t k = 0; k < parts; ++k) {
      size_t b = starts[k], e = ends[k];
      cube__trim(v, &b, &e);
      uint32_t line = cube__line_at(v, b);
      if (b == e) {
        st = CUBE_INVALID("kernel '%s', line %" PRIu32 ", parameter %" PRIu32
                          ": empty parameter (a stray comma?)",
                          entry, line, k + 1);
        goto done;
      }
      st = cube__parse_param(v, b, e, entry, line, k, &sig->params[k]);
      if (st) goto done;
      for (uint32_t j = 0; j < k; ++j) {
        if (strcmp(sig->params[j].name, sig->params[k].name) == 0) {
          char text[CUBE__PARAM_TEXT_MAX];
          cube__param_text(v, b, e, text);
          st = cube__param_error(entry, line, k, text, "the name '%s' is also parameter %" PRIu32,
                                 sig->params[k].name, j + 1);
          goto done;
        }
      }
      if (strncmp(sig->params[k].name, "cube__", 6) == 0) {
        char text[CUBE__PARAM_TEXT_MAX];
        cube__param_text(v, b, e, text);
        st = cube__param_error(entry, line, k, text, "names starting with cube__ are reserved");
        goto done;
      }
    }
    sig->count = parts;
  }
  sig->uses_sync_cube = cube__uses_sync_cube(v, n, d.close);

done:
  free(v);
  return st;
}
