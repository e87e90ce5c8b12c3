/* The cube dialect: signature parsing and translation-unit generation.
 *
 * Parsing works on a "code view" of the source: a copy in which comments and
 * the contents of string and character literals are blanked (newlines kept),
 * so that offsets and line numbers stay those of the source and every token
 * search sees code only.
 */
#include "kernel/dialect.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

extern const char cube__prelude_cpu[];
extern const char cube__prelude_cuda[];
extern const char cube__prelude_opencl[];

/* Bytes of fiber stack per unit when the defines do not say otherwise; the
 * generated wrapper defaults CUBE_CPU_FIBER_STACK to the same value. */
#define CUBE__CPU_FIBER_STACK_DEFAULT 16384u
#define CUBE__CPU_FIBER_STACK_MIN 4096u

/* Character classes ------------------------------------------------------- */

static bool cube__is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool cube__is_ident_char(char c) {
  return cube__is_ident_start(c) || (c >= '0' && c <= '9');
}
static bool cube__is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static bool cube__is_identifier(const char* s, size_t n) {
  if (n == 0 || !cube__is_ident_start(s[0])) return false;
  for (size_t i = 1; i < n; ++i)
    if (!cube__is_ident_char(s[i])) return false;
  return true;
}

/* The code view ------------------------------------------------------------ */

/* A malloc'd copy of |src| (length |n|) with comments and literal contents
 * replaced by spaces, newlines kept. NULL when out of memory. */
static char* cube__code_view(const char* src, size_t n) {
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

static uint32_t cube__line_at(const char* view, size_t off) {
  uint32_t line = 1;
  for (size_t i = 0; i < off; ++i)
    if (view[i] == '\n') ++line;
  return line;
}

static size_t cube__skip_space(const char* v, size_t i, size_t n) {
  while (i < n && cube__is_space(v[i])) ++i;
  return i;
}

/* Finds the next identifier token equal to |word| at or after |from|;
 * returns its offset or |n|. */
static size_t cube__find_token(const char* v, size_t n, size_t from, const char* word) {
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

/* Given |open| at '(' (or '[' / '{'), the offset of the matching closer, or
 * |n| when the source ends first. */
static size_t cube__match_paren(const char* v, size_t n, size_t open) {
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
static uint32_t cube__split_commas(const char* v, size_t b, size_t e, size_t* starts, size_t* ends,
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

static void cube__trim(const char* v, size_t* b, size_t* e) {
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
static cube__decl_t cube__read_decl(const char* v, size_t n, size_t kw) {
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

static bool cube__decl_named(const char* v, const cube__decl_t* d, const char* name) {
  size_t len = strlen(name);
  return !d->malformed && d->name_e - d->name_b == len && memcmp(v + d->name_b, name, len) == 0;
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

static const char* cube__canonical_scalar(cube_arg_kind_t kind) {
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
static bool cube__kernel_body(const char* v, size_t n, size_t close, size_t* b, size_t* e) {
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
    bool in_other = false;
    for (size_t k = cube__find_token(v, n, 0, "CUBE_KERNEL"); k < n && !in_other;
         k = cube__find_token(v, n, k + 1, "CUBE_KERNEL")) {
      cube__decl_t cand = cube__read_decl(v, n, k);
      size_t b, e;
      if (cand.close < n && cand.close != entry_close && cube__kernel_body(v, n, cand.close, &b, &e))
        in_other = at >= b && at < e;
    }
    if (!in_other) return true;
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

/* Generation ---------------------------------------------------------------------- */

const char* cube__dialect_prelude(cube__target_t target) {
  switch (target) {
    case CUBE__TARGET_CPU: return cube__prelude_cpu;
    case CUBE__TARGET_CUDA: return cube__prelude_cuda;
    case CUBE__TARGET_OPENCL: return cube__prelude_opencl;
  }
  return NULL;
}

/* A growing string; |failed| sticks after the first allocation failure. */
typedef struct cube__sb {
  char* data;
  size_t len, cap;
  bool failed;
} cube__sb_t;

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

static void cube__sb_put(cube__sb_t* sb, const char* s, size_t n) {
  cube__sb_reserve(sb, n);
  if (sb->failed) return;
  memcpy(sb->data + sb->len, s, n);
  sb->len += n;
  sb->data[sb->len] = '\0';
}

static void cube__sb_puts(cube__sb_t* sb, const char* s) { cube__sb_put(sb, s, strlen(s)); }

static void cube__sb_printf(cube__sb_t* sb, const char* fmt, ...) CUBE_PRINTF(2, 3);
static void cube__sb_printf(cube__sb_t* sb, const char* fmt, ...) {
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

static const char* cube__find_define(const cube_define_t* defines, uint32_t count, const char* name,
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

uint64_t cube__dialect_cpu_fiber_stack(const cube_define_t* defines, uint32_t define_count) {
  bool present;
  const char* value = cube__find_define(defines, define_count, "CUBE_CPU_FIBER_STACK", &present);
  uint64_t stack;
  if (present && cube__parse_stack(value, &stack) && stack >= CUBE__CPU_FIBER_STACK_MIN &&
      stack % 64 == 0)
    return stack;
  return CUBE__CPU_FIBER_STACK_DEFAULT;
}

/* Same formula as cube__fiber_scratch_need in preludes/cpu.h. */
static uint64_t cube__fiber_scratch(uint64_t units, uint64_t stack) {
  return 64u + ((units * 12u + 63u) & ~(uint64_t)63u) + units * stack;
}

uint64_t cube__dialect_cpu_scratch_size(const cube__signature_t* signature, uint64_t units) {
  return cube__dialect_cpu_scratch_size_defines(signature, units, NULL, 0);
}

uint64_t cube__dialect_cpu_scratch_size_defines(const cube__signature_t* signature, uint64_t units,
                                                const cube_define_t* defines,
                                                uint32_t define_count) {
  if (!signature || !signature->uses_sync_cube || units <= 1) return 0;
  return cube__fiber_scratch(units, cube__dialect_cpu_fiber_stack(defines, define_count));
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
static void cube__emit_argidx(cube__sb_t* sb, const cube__signature_t* sig, const char* source) {
  cube__sb_puts(sb, "\n/* Argument indices for the bounds record. */\n");
  for (uint32_t i = 0; i < sig->count; ++i)
    if (sig->params[i].kind == CUBE_ARG_BUFFER)
      cube__sb_printf(sb, "#define cube__argidx_%s %" PRIu32 "u\n", sig->params[i].name, i);
  size_t n = strlen(source);
  char* v = cube__code_view(source, n);
  if (!v) {
    sb->failed = true;
    return;
  }
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
  free(v);
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

/* True when the source's code declares thread-local storage (CUBE_SHARED is
 * static _Thread_local on the CPU). */
static bool cube__uses_tls(const char* source, bool* out_of_memory) {
  size_t n = strlen(source);
  char* v = cube__code_view(source, n);
  if (!v) {
    *out_of_memory = true;
    return false;
  }
  bool tls = cube__find_token(v, n, 0, "CUBE_SHARED") < n ||
             cube__find_token(v, n, 0, "_Thread_local") < n ||
             cube__find_token(v, n, 0, "__thread") < n;
  free(v);
  return tls;
}

/* Split entry (CPU, kernels with sync_cube) -------------------------------------------
 *
 * A kernel whose body has a simple enough shape runs as loops over its units
 * instead of fibers: each region between barriers becomes one loop over every
 * unit of the cube; a `for` loop with barriers at the top level of its body
 * and a header that reads no per-unit value runs once, outside the unit
 * loops; top-level scalar locals ("private" locals) live in per-unit arrays
 * in cube->scratch. Anything outside that subset (return, break, barriers
 * under if/while, local arrays, ...) keeps the fiber entry. The units of a
 * region run in the fibers' order (unit 0 first), so a kernel without data
 * races computes exactly what it computes as fibers. The define
 * CUBE_CPU_FIBERS forces the fiber entry. */

#define CUBE__SPLIT_MAX_PRIV 32
#define CUBE__SPLIT_MAX_LOOPS 32
#define CUBE__SPLIT_MAX_SHARED 32
#define CUBE__SPLIT_NONE ((size_t)-1)

typedef struct cube__split_priv {
  size_t b, e;   /* the name in the view */
  char type[16]; /* its scalar type, const dropped */
} cube__split_priv_t;

typedef struct cube__split {
  const char* src; /* the user's source */
  const char* v;   /* its code view */
  size_t n;
  const char* entry;
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
  uint32_t nshared;
} cube__split_t;

/* Whether the identifier token at |i| (bounded by |e|) is |word|. */
static bool cube__tok_is(const char* v, size_t i, size_t e, const char* word) {
  size_t wl = strlen(word);
  if (i + wl > e || memcmp(v + i, word, wl) != 0) return false;
  if (i > 0 && cube__is_ident_char(v[i - 1])) return false;
  return i + wl == e || !cube__is_ident_char(v[i + wl]);
}

static bool cube__range_has(const char* v, size_t b, size_t e, const char* word) {
  return cube__find_token(v, e, b, word) < e;
}

/* The end (one past) of the C statement starting at or after |i|, or
 * CUBE__SPLIT_NONE when it cannot be read with confidence. */
static size_t cube__stmt_end(const char* v, size_t i, size_t e) {
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
static bool cube__is_modified(const char* v, size_t n, size_t at, size_t len) {
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
static bool cube__same_name(const char* v, size_t b, size_t e, size_t b2, size_t e2) {
  return e - b == e2 - b2 && memcmp(v + b, v + b2, e - b) == 0;
}

static void cube__split_line(cube__split_t* s, cube__sb_t* sb, size_t off) {
  cube__sb_printf(sb, "#line %" PRIu32 " \"%s.cube\"\n", cube__line_at(s->v, off), s->entry);
}

static void cube__split_open(cube__split_t* s) {
  if (s->in_region) return;
  s->in_region = true;
  cube__sb_puts(&s->body,
                "for (uint32_t cube__uz = 0; cube__uz < cube__dz; ++cube__uz)\n"
                "for (uint32_t cube__uy = 0; cube__uy < cube__dy; ++cube__uy)\n"
                "for (uint32_t cube__ux = 0; cube__ux < cube__dx; ++cube__ux) {\n"
                "const uint32_t cube__unit CUBE__UNUSED = "
                "cube__ux + cube__dx * (cube__uy + cube__dy * cube__uz);\n");
}

static void cube__split_close(cube__split_t* s) {
  if (!s->in_region) return;
  s->in_region = false;
  cube__sb_puts(&s->body, "}\n");
}

/* The scalar type words at |i| ([const] T [const]); *out_end after them and
 * the type (const dropped) in |type|. 1 when it is one of the supported
 * scalar types, 0 when [i] starts no type word, -1 otherwise. */
static int cube__split_type(const char* v, size_t i, size_t e, size_t* out_end, char* type,
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

/* A top-level declaration [i, end): 1 when handled (private locals; their
 * initialisers become assignments in the current region), 0 when the
 * statement is no declaration, -1 when it must keep the fibers. */
static int cube__split_decl(cube__split_t* s, size_t i, size_t end) {
  const char* v = s->v;
  char type[16];
  size_t p;
  int t = cube__split_type(v, i, end, &p, type, sizeof type);
  if (t <= 0) return t;
  size_t st[17], en[17];
  uint32_t parts = cube__split_commas(v, p, end - 1, st, en, 17);
  if (parts > 16) return -1;
  for (uint32_t k = 0; k < parts; ++k) {
    size_t b = st[k], e = en[k];
    cube__trim(v, &b, &e);
    if (b >= e || !cube__is_ident_start(v[b])) return -1;
    size_t ne = b;
    while (ne < e && cube__is_ident_char(v[ne])) ++ne;
    if (ne - b >= 64 || (ne - b >= 6 && memcmp(v + b, "cube__", 6) == 0)) return -1;
    size_t q = cube__skip_space(v, ne, e);
    size_t ib = e, ie = e;
    if (q < e) {
      if (v[q] != '=' || (q + 1 < e && v[q + 1] == '=')) return -1;
      ib = q + 1;
      ie = e;
      cube__trim(v, &ib, &ie);
      if (ib >= ie) return -1;
      for (size_t j = ib; j < ie; ++j)
        if (v[j] == '{') return -1;
    }
    if (s->npriv == CUBE__SPLIT_MAX_PRIV) return -1;
    cube__split_priv_t* pv = &s->priv[s->npriv++];
    pv->b = b;
    pv->e = ne;
    memcpy(pv->type, type, sizeof pv->type);
    if (ib < ie) {
      cube__split_open(s);
      cube__split_line(s, &s->body, b);
      cube__sb_put(&s->body, s->src + b, ne - b);
      cube__sb_puts(&s->body, " = ");
      cube__sb_put(&s->body, s->src + ib, ie - ib);
      cube__sb_puts(&s->body, ";\n");
    }
  }
  return 1;
}

/* Whether a statement of a region, [i, end), may sit in a loop over units: it
 * must not declare anything at the top level (that would be gone for the
 * next region). */
static bool cube__split_plain_ok(const char* v, size_t i, size_t end) {
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

static bool cube__split_block(cube__split_t* s, size_t b, size_t e, int depth) {
  const char* v = s->v;
  size_t i = b;
  for (;;) {
    i = cube__skip_space(v, i, e);
    if (i >= e) break;
    size_t end = cube__stmt_end(v, i, e);
    if (end == CUBE__SPLIT_NONE) return false;
    bool has_sync = cube__range_has(v, i, end, "sync_cube");
    if (cube__tok_is(v, i, end, "sync_cube")) {
      size_t p = cube__skip_space(v, i + 9, end);
      if (p >= end || v[p] != '(') return false;
      p = cube__skip_space(v, p + 1, end);
      if (p >= end || v[p] != ')') return false;
      p = cube__skip_space(v, p + 1, end);
      if (p + 1 != end || v[p] != ';') return false;
      cube__split_close(s);
      i = end;
      continue;
    }
    if (cube__tok_is(v, i, end, "CUBE_SHARED")) {
      if (depth != 0 || has_sync || s->nshared == CUBE__SPLIT_MAX_SHARED) return false;
      size_t p = cube__skip_space(v, i + 11, end);
      if (p >= end || v[p] != '(') return false;
      size_t c = cube__match_paren(v, end, p);
      if (c >= end || cube__skip_space(v, c + 1, end) + 1 != end) return false;
      size_t st[4], en[4];
      if (cube__split_commas(v, p + 1, c, st, en, 4) != 3) return false;
      size_t nb = st[1], ne = en[1];
      cube__trim(v, &nb, &ne);
      if (!cube__is_identifier(v + nb, ne - nb)) return false;
      s->sh_b[s->nshared] = nb;
      s->sh_e[s->nshared++] = ne;
      cube__split_line(s, &s->shared, i);
      cube__sb_put(&s->shared, s->src + i, end - i);
      cube__sb_puts(&s->shared, "\n");
      i = end;
      continue;
    }
    if (has_sync && cube__tok_is(v, i, end, "for")) {
      /* A uniform loop: once, outside the unit loops. */
      if (s->nhdr == CUBE__SPLIT_MAX_LOOPS) return false;
      size_t p = cube__skip_space(v, i + 3, end);
      size_t c = cube__match_paren(v, end, p);
      if (c >= end || cube__range_has(v, p, c, "sync_cube")) return false;
      s->hdr_b[s->nhdr] = p + 1;
      s->hdr_e[s->nhdr++] = c;
      size_t semi = p + 1;
      int d = 0;
      while (semi < c && !(v[semi] == ';' && d == 0)) {
        if (v[semi] == '(' || v[semi] == '[' || v[semi] == '{') ++d;
        if (v[semi] == ')' || v[semi] == ']' || v[semi] == '}') --d;
        ++semi;
      }
      if (semi >= c) return false;
      size_t bb = cube__skip_space(v, c + 1, end);
      if (bb >= end || v[bb] != '{') return false;
      size_t be = cube__match_paren(v, end, bb);
      if (be + 1 != end) return false;
      size_t ib = p + 1, ie = semi;
      cube__trim(v, &ib, &ie);
      if (ib < ie) {
        /* The init declares the loop's variables (and assigns nothing else). */
        char type[16];
        size_t q;
        if (cube__split_type(v, ib, ie, &q, type, sizeof type) != 1) return false;
        size_t st[9], en[9];
        uint32_t parts = cube__split_commas(v, q, ie, st, en, 9);
        if (parts > 8) return false;
        for (uint32_t k = 0; k < parts; ++k) {
          size_t nb = st[k], ne;
          nb = cube__skip_space(v, nb, en[k]);
          ne = nb;
          while (ne < en[k] && cube__is_ident_char(v[ne])) ++ne;
          if (ne == nb || !cube__is_ident_start(v[nb])) return false;
          size_t eq = cube__skip_space(v, ne, en[k]);
          if (eq < en[k] && (v[eq] != '=' || (eq + 1 < en[k] && v[eq + 1] == '='))) return false;
          if (s->nlv == CUBE__SPLIT_MAX_LOOPS * 4) return false;
          s->lv_b[s->nlv] = nb;
          s->lv_e[s->nlv] = ne;
          s->lv_body_b[s->nlv] = bb;
          s->lv_body_e[s->nlv++] = be;
        }
      }
      cube__split_close(s);
      cube__split_line(s, &s->body, i);
      cube__sb_put(&s->body, s->src + i, c + 1 - i);
      cube__sb_puts(&s->body, " {\n");
      if (!cube__split_block(s, bb + 1, be, depth + 1)) return false;
      cube__sb_puts(&s->body, "}\n");
      i = end;
      continue;
    }
    if (has_sync) return false;
    if (v[i] == ';') {
      i = end;
      continue;
    }
    int d = cube__split_decl(s, i, end);
    if (d < 0) return false;
    if (d == 0) {
      if (!cube__split_plain_ok(v, i, end)) return false;
      cube__split_open(s);
      cube__split_line(s, &s->body, i);
      cube__sb_put(&s->body, s->src + i, end - i);
      cube__sb_puts(&s->body, "\n");
    }
    i = end;
  }
  cube__split_close(s);
  return true;
}

/* Checks of the whole kernel once its statements are read. */
static bool cube__split_checks(cube__split_t* s, const cube__signature_t* sig, size_t bb,
                               size_t be, size_t eb, size_t ee, const cube_define_t* defines,
                               uint32_t define_count) {
  const char* v = s->v;
  size_t n = s->n;
  static const char* const banned[] = {
      "return", "goto", "break", "continue", "switch", "static", "_Thread_local", "__thread",
      "setjmp", "longjmp", "cube__sched", "CUBE_UNIT_PARAMS", "__label__", "asm", "__asm__",
      "__asm", "alloca", "__builtin_alloca", "cube__unit"};
  for (size_t k = 0; k < sizeof banned / sizeof banned[0]; ++k)
    if (cube__range_has(v, bb, be, banned[k])) return false;
  for (size_t j = bb; j < be; ++j)
    if (v[j] == '#') return false;
  /* A barrier anywhere but in this body or another kernel's (a helper, a
   * macro) keeps the fibers. */
  for (size_t at = cube__find_token(v, n, 0, "sync_cube"); at < n;
       at = cube__find_token(v, n, at + 1, "sync_cube")) {
    if (at >= eb && at < ee) continue;
    bool in_other = false;
    for (size_t k = cube__find_token(v, n, 0, "CUBE_KERNEL"); k < n && !in_other;
         k = cube__find_token(v, n, k + 1, "CUBE_KERNEL")) {
      cube__decl_t cand = cube__read_decl(v, n, k);
      size_t b2, e2;
      if (cand.close < n && cube__kernel_body(v, n, cand.close, &b2, &e2))
        in_other = at >= b2 && at < e2 && !(b2 == eb);
    }
    if (!in_other) return false;
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
    char name[64];
    size_t len = p->e - p->b;
    memcpy(name, v + p->b, len);
    name[len] = '\0';
    for (size_t at = cube__find_token(v, be, bb, name); at < be;
         at = cube__find_token(v, be, at + 1, name)) {
      if (at == p->b) continue;
      if (at < p->b) return false; /* used before: some outer object of that name */
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
  }
  /* Uniform headers read no per-unit value and call nothing. */
  static const char* const unit_words[] = {
      "UNIT_POS", "UNIT_POS_X", "UNIT_POS_Y", "UNIT_POS_Z", "UNIT_POS_PLANE", "ABSOLUTE_POS",
      "ABSOLUTE_POS_X", "ABSOLUTE_POS_Y", "ABSOLUTE_POS_Z", "cube__ux", "cube__uy", "cube__uz",
      "CUBE_UNIT_ARGS"};
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
        if (cube__same_name(v, tb, i, s->priv[k].b, s->priv[k].e)) return false;
      for (uint32_t k = 0; k < s->nshared; ++k)
        if (cube__same_name(v, tb, i, s->sh_b[k], s->sh_e[k])) return false;
      size_t p = cube__skip_space(v, i, e);
      if (p < e && v[p] == '(' && !cube__tok_is(v, tb, i, "sizeof")) return false;
    }
  }
  return true;
}

/* The split function for |sig|'s kernel, "static int cube__split_run(const
 * cube__args_t*, void* scratch, uint64_t scratch_size)" (malloc'd), or NULL
 * when the kernel keeps the fiber entry. */
static char* cube__split_generate(const cube__signature_t* sig, const char* source,
                                  const cube_define_t* defines, uint32_t define_count) {
  bool present;
  cube__find_define(defines, define_count, "CUBE_CPU_FIBERS", &present);
  if (present || !sig->uses_sync_cube) return NULL;
  size_t n = strlen(source);
  char* v = cube__code_view(source, n);
  if (!v) return NULL;
  char* result = NULL;
  cube__split_t* s = calloc(1, sizeof *s);
  if (!s) goto done;
  s->src = source;
  s->v = v;
  s->n = n;
  s->entry = sig->entry;
  size_t eb = 0, ee = 0;
  bool found = false;
  for (size_t at = cube__find_token(v, n, 0, "CUBE_KERNEL"); at < n && !found;
       at = cube__find_token(v, n, at + 1, "CUBE_KERNEL")) {
    cube__decl_t d = cube__read_decl(v, n, at);
    if (cube__decl_named(v, &d, sig->entry) && d.close < n)
      found = cube__kernel_body(v, n, d.close, &eb, &ee);
  }
  if (!found) goto done;
  if (!cube__split_block(s, eb + 1, ee - 1, 0)) goto done;
  if (!cube__split_checks(s, sig, eb + 1, ee - 1, eb, ee, defines, define_count)) goto done;
  if (s->body.failed || s->shared.failed) goto done;

  cube__sb_t out = {NULL, 0, 0, false};
  cube__sb_puts(&out,
                "/* The kernel split at its barriers: one loop over the units per region. */\n"
                "static int cube__split_run(const cube__args_t* cube__ap, void* cube__scratch,\n"
                "                           uint64_t cube__scratch_size) {\n");
  for (uint32_t i = 0; i < sig->count; ++i) {
    const cube__param_t* p = &sig->params[i];
    if (p->kind == CUBE_ARG_BUFFER)
      cube__sb_printf(&out,
                      "  %s%s* const %s CUBE__UNUSED = cube__ap->%s;\n"
                      "  const uint64_t %s__len CUBE__UNUSED = cube__ap->%s__len;\n",
                      p->is_const ? "const " : "", p->type, p->name, p->name, p->name, p->name);
    else
      cube__sb_printf(&out, "  const %s %s CUBE__UNUSED = cube__ap->%s;\n",
                      cube__canonical_scalar(p->kind), p->name, p->name);
  }
  static const char* const pos[] = {"cx", "cy", "cz", "dx", "dy", "dz", "nx", "ny", "nz"};
  for (size_t k = 0; k < 9; ++k)
    cube__sb_printf(&out, "  const uint32_t cube__%s CUBE__UNUSED = cube__ap->cube__%s;\n", pos[k],
                    pos[k]);
  cube__sb_puts(&out,
                "  cube_bounds_error_t* const cube__bounds CUBE__UNUSED = cube__ap->cube__bounds;\n"
                "  cube__sched_t* const cube__sched CUBE__UNUSED = (cube__sched_t*)0;\n"
                "  const uint64_t cube__units CUBE__UNUSED = (uint64_t)cube__dx * cube__dy * "
                "cube__dz;\n"
                "  uintptr_t cube__sp CUBE__UNUSED = ((uintptr_t)cube__scratch + 63u) & "
                "~(uintptr_t)63u;\n");
  for (uint32_t k = 0; k < s->npriv; ++k) {
    const cube__split_priv_t* p = &s->priv[k];
    int len = (int)(p->e - p->b);
    cube__sb_printf(&out,
                    "  %s* restrict const cube__pv_%.*s = (%s*)cube__sp;\n"
                    "  cube__sp += (uintptr_t)((cube__units * sizeof(%s) + 63u) & "
                    "~(uint64_t)63u);\n",
                    p->type, len, v + p->b, p->type, p->type);
  }
  cube__sb_puts(&out,
                "  if (cube__sp - (uintptr_t)cube__scratch > cube__scratch_size) return 1;\n");
  cube__sb_put(&out, s->shared.data ? s->shared.data : "", s->shared.len);
  for (uint32_t k = 0; k < s->npriv; ++k) {
    int len = (int)(s->priv[k].e - s->priv[k].b);
    const char* nm = v + s->priv[k].b;
    cube__sb_printf(&out,
                    "#pragma push_macro(\"%.*s\")\n#undef %.*s\n"
                    "#define %.*s (cube__pv_%.*s[cube__unit])\n",
                    len, nm, len, nm, len, nm, len, nm);
  }
  cube__sb_put(&out, s->body.data ? s->body.data : "", s->body.len);
  cube__sb_puts(&out, "  return 0;\n}\n");
  for (uint32_t k = 0; k < s->npriv; ++k) {
    int len = (int)(s->priv[k].e - s->priv[k].b);
    const char* nm = v + s->priv[k].b;
    cube__sb_printf(&out, "#undef %.*s\n#pragma pop_macro(\"%.*s\")\n", len, nm, len, nm);
  }
  cube__sb_printf(&out, "#line 1 \"%s.split.c\"\n", sig->entry);
  if (out.failed)
    free(out.data);
  else
    result = out.data;
done:
  if (s) {
    free(s->body.data);
    free(s->shared.data);
    free(s);
  }
  free(v);
  return result;
}

/* One call of the user's kernel for unit (cube__x, cube__y, cube__z) of the
 * cube in cube__a, at |indent|. */
static void cube__emit_unit_call(cube__sb_t* sb, const cube__signature_t* sig, const char* e,
                                 const char* indent) {
  cube__sb_printf(sb,
                  "%scube__kernel_%s(cube__x, cube__y, cube__z, cube__a.cube__cx, "
                  "cube__a.cube__cy, cube__a.cube__cz,\n"
                  "%s    cube__a.cube__dx, cube__a.cube__dy, cube__a.cube__dz, "
                  "cube__a.cube__nx, cube__a.cube__ny, cube__a.cube__nz,\n"
                  "%s    cube__a.cube__bounds, (cube__sched_t*)0",
                  indent, e, indent, indent);
  cube__emit_call_params(sb, sig, "cube__a.");
  cube__sb_puts(sb, ");\n");
}

static void cube__emit_cpu_entry(cube__sb_t* sb, const cube__signature_t* sig, bool uses_tls,
                                 const char* split) {
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
    cube__sb_printf(sb,
                    "static void cube__fiber_body(cube__sched_t* cube__s) {\n"
                    "  const cube__args_t* cube__p = (const cube__args_t*)cube__s->args;\n"
                    "  uint32_t cube__u = cube__s->cur;\n"
                    "  uint32_t cube__x = cube__u %% cube__p->cube__dx;\n"
                    "  uint32_t cube__yz = cube__u / cube__p->cube__dx;\n"
                    "  cube__kernel_%s(cube__x, cube__yz %% cube__p->cube__dy, "
                    "cube__yz / cube__p->cube__dy,\n"
                    "      cube__p->cube__cx, cube__p->cube__cy, cube__p->cube__cz, "
                    "cube__p->cube__dx, cube__p->cube__dy, cube__p->cube__dz,\n"
                    "      cube__p->cube__nx, cube__p->cube__ny, cube__p->cube__nz, "
                    "cube__p->cube__bounds, cube__s",
                    e);
    cube__emit_call_params(sb, sig, "cube__p->");
    cube__sb_puts(sb, ");\n  cube__fiber_exit(cube__s);\n}\n\n");
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
    cube__sb_printf(sb,
                    "  uint64_t cube__units = (uint64_t)cube__a.cube__dx * cube__a.cube__dy * "
                    "cube__a.cube__dz;\n"
                    "  if (cube__units == 0) return 0;\n"
                    "  if (cube__units > 0xffffffffu) return 4;\n"
                    "  if (cube__units == 1) {\n"
                    "    cube__kernel_%s(0, 0, 0, cube__a.cube__cx, cube__a.cube__cy, "
                    "cube__a.cube__cz, 1, 1, 1,\n"
                    "        cube__a.cube__nx, cube__a.cube__ny, cube__a.cube__nz, "
                    "cube__a.cube__bounds, (cube__sched_t*)0",
                    e);
    cube__emit_call_params(sb, sig, "cube__a.");
    cube__sb_puts(sb,
                  ");\n"
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
     * unit's, checked in 64 bits and without 32-bit wrap) is below every
     * array's length, the unit loop states that fact to the compiler: the
     * kernel's own guards and the checked accessors then fold away and the
     * loop vectorises without masked loads and stores (5x on saxpy with
     * AVX-512). The assumption is checked before it is made, so behaviour is
     * unchanged; edge cubes take the plain loop. */
    uint32_t arrays = 0;
    for (uint32_t i = 0; i < sig->count; ++i) arrays += sig->params[i].kind == CUBE_ARG_BUFFER;
    if (arrays) {
      cube__sb_puts(sb,
                    "  {\n"
                    "    const uint64_t cube__gx = (uint64_t)cube__a.cube__nx * cube__a.cube__dx;\n"
                    "    const uint64_t cube__gy = (uint64_t)cube__a.cube__ny * cube__a.cube__dy;\n"
                    "    const uint64_t cube__last =\n"
                    "        ((uint64_t)cube__a.cube__cx * cube__a.cube__dx + cube__a.cube__dx - 1) +\n"
                    "        cube__gx * (((uint64_t)cube__a.cube__cy * cube__a.cube__dy + cube__a.cube__dy - 1) +\n"
                    "                    cube__gy * ((uint64_t)cube__a.cube__cz * cube__a.cube__dz + "
                    "cube__a.cube__dz - 1));\n"
                    "    int cube__interior = cube__last <= 0xffffffffu");
      for (uint32_t i = 0; i < sig->count; ++i)
        if (sig->params[i].kind == CUBE_ARG_BUFFER)
          cube__sb_printf(sb, " && cube__last < cube__a.%s__len", sig->params[i].name);
      cube__sb_printf(sb,
                      ";\n"
                      "    if (cube__interior) {\n"
                      "      for (uint32_t cube__z = 0; cube__z < cube__a.cube__dz; ++cube__z) {\n"
                      "        for (uint32_t cube__y = 0; cube__y < cube__a.cube__dy; ++cube__y) {\n"
                      "#pragma omp simd\n"
                      "          for (uint32_t cube__x = 0; cube__x < cube__a.cube__dx; ++cube__x) {\n"
                      "            /* ABSOLUTE_POS exactly as the prelude computes it. */\n"
                      "            const uint32_t cube__p =\n"
                      "                (cube__a.cube__cx * cube__a.cube__dx + cube__x) +\n"
                      "                cube__a.cube__nx * cube__a.cube__dx *\n"
                      "                    ((cube__a.cube__cy * cube__a.cube__dy + cube__y) +\n"
                      "                     cube__a.cube__ny * cube__a.cube__dy *\n"
                      "                         (cube__a.cube__cz * cube__a.cube__dz + cube__z));\n"
                      "            (void)cube__p;\n");
      for (uint32_t i = 0; i < sig->count; ++i)
        if (sig->params[i].kind == CUBE_ARG_BUFFER)
          cube__sb_printf(sb, "            CUBE__ASSUME((uint64_t)cube__p < cube__a.%s__len);\n",
                          sig->params[i].name);
      cube__emit_unit_call(sb, sig, e, "            ");
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
    cube__emit_unit_call(sb, sig, e, "        ");
    cube__sb_puts(sb,
                  "      }\n"
                  "    }\n"
                  "  }\n"
                  "  return 0;\n"
                  "}\n");
  }
}

/* OpenCL: the source with the entry's buffer parameters taking a byte offset.
 * A cl_mem is not an address, so a view into a pooled buffer is passed as the
 * buffer, its length and its offset: CUBE_ARRAY(T, a) of the entry's
 * declaration becomes CUBE__ENTRY_ARRAY(T, a) (base, a__bytes, offset), and
 * CUBE__ENTRY_VIEW(T, a) right after the body's '{' declares the local
 * pointer `a` the body uses. Both insertions keep every line where it was, so
 * compiler messages still name the user's lines. Other kernels of the source
 * keep the plain ABI (they are compiled, never run). */
static void cube__emit_opencl_source(cube__sb_t* sb, const cube__signature_t* sig,
                                     const char* source) {
  size_t n = strlen(source);
  char* v = cube__code_view(source, n);
  if (!v) {
    sb->failed = true;
    return;
  }
  cube__decl_t d;
  bool found = false;
  for (size_t at = cube__find_token(v, n, 0, "CUBE_KERNEL"); at < n;
       at = cube__find_token(v, n, at + 1, "CUBE_KERNEL")) {
    d = cube__read_decl(v, n, at);
    if (cube__decl_named(v, &d, sig->entry)) {
      found = true;
      break;
    }
  }
  size_t bb = 0, be = 0;
  if (!found || d.close >= n || !d.has_comma || !cube__kernel_body(v, n, d.close, &bb, &be)) {
    cube__sb_puts(sb, source); /* the compiler reports what is wrong */
    free(v);
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
    cube__sb_puts(sb, "CUBE__ENTRY_ARRAY");
    pos = b + strlen("CUBE_ARRAY");
  }
  cube__sb_put(sb, source + pos, bb + 1 - pos);
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
  cube__sb_puts(sb, source + bb + 1);
  free(v);
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
      if (!cube__parse_stack(value, &stack) || stack < CUBE__CPU_FIBER_STACK_MIN || stack % 64)
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

  static const char* const target_names[] = {"CPU", "CUDA", "OpenCL"};
  cube__sb_t sb = {NULL, 0, 0, false};
  cube__sb_printf(&sb, "/* cube: %s unit of kernel '%s' (generated). */\n#define CUBE_MODE_%s 1\n",
                  target_names[target], entry, mode_name);
  cube__sb_puts(&sb, prelude);
  if (target == CUBE__TARGET_CPU) cube__emit_layout_asserts(&sb);
  if (define_count) cube__sb_puts(&sb, "\n/* Compile-time defines. */\n");
  for (uint32_t i = 0; i < define_count; ++i)
    cube__sb_printf(&sb, "#define %s %s\n", defines[i].name,
                    defines[i].value ? defines[i].value : "");
  cube__emit_argidx(&sb, signature, source);
  if (target != CUBE__TARGET_CPU)
    cube__sb_printf(&sb, "#define cube__kernel_%s cube_kernel_entry\n", entry);
  cube__sb_printf(&sb, "#line 1 \"%s.cube\"\n", entry);
  if (target == CUBE__TARGET_OPENCL)
    cube__emit_opencl_source(&sb, signature, source);
  else
    cube__sb_puts(&sb, source);
  cube__sb_puts(&sb, "\n");
  if (target == CUBE__TARGET_CPU) {
    bool oom = false;
    bool tls = cube__uses_tls(source, &oom);
    if (oom) sb.failed = true;
    char* split = cube__split_generate(signature, source, defines, define_count);
    cube__emit_cpu_entry(&sb, signature, tls, split);
    free(split);
  }
  if (sb.failed) {
    free(sb.data);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: kernel '%s': no host memory", fn,
                             entry);
  }
  *out_text = sb.data;
  return CUBE_OK;
}
