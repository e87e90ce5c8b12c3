/* Compiler logs of generated units, rewritten to name the user's file only
 * (cube__dialect_log_filter in dialect.h; the rules are in docs/errors.md,
 * "Kernel compile errors").
 *
 * A log is read as groups: a diagnostic head (a location and a severity)
 * with the lines under it (the quoted source line, the caret, fix-its),
 * context heads (gcc's "<file>: In function 'f':"), summaries ("2 errors
 * generated.") and other free lines. Three head layouts occur:
 *   cc, clang:  "<file>:<line>[:<col>]: <severity>: <message>"
 *   PoCL:       "<severity>: <file>:<line>:<col>[ <Spelling=<loc>>]: <message>"
 *   NVRTC:      "<file>(<line>): <severity>: <message>", the column being
 *               where the caret under the quoted source line points
 * and all are written in the first. */
#include <ctype.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/dialect.h"
#include "kernel/dialect_internal.h"

typedef enum cube__log_kind {
  CUBE__LOG_FREE = 0, /* not under a head: kept (renamed) */
  CUBE__LOG_HEAD,     /* a diagnostic */
  CUBE__LOG_CONTEXT,  /* "<file>: In function 'f':" and the like */
  CUBE__LOG_MORE,     /* a line under the head before it */
  CUBE__LOG_SUMMARY,  /* "2 errors generated." and the like: dropped */
} cube__log_kind_t;

typedef struct cube__log_loc {
  const char* file;
  size_t file_n;
  uint32_t line, col; /* col 0: none given */
} cube__log_loc_t;

typedef struct cube__log_line {
  const char* s;
  size_t n;
  cube__log_kind_t kind;
  cube__log_loc_t at;       /* heads and contexts */
  cube__log_loc_t spelling; /* PoCL: where the token was written (file NULL: none) */
  const char* sev;
  size_t sev_n;
  const char* msg; /* heads: the message; contexts: the text after "<file>: " */
  size_t msg_n;
  bool nvrtc; /* the column comes from the caret under the head */
} cube__log_line_t;

/* The length of the severity at the start of |s| ("warning #177-D" for
 * NVRTC: it runs to the ": "), 0 when there is none. */
static size_t cube__log_severity(const char* s, size_t n) {
  static const char* const words[] = {"fatal error", "catastrophic error", "internal error",
                                      "error", "warning", "note", "remark"};
  for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); ++w) {
    size_t k = strlen(words[w]);
    if (n < k || memcmp(s, words[w], k) != 0) continue;
    size_t e = k;
    while (e < n && e < k + 16 && s[e] != ':') ++e;
    return e + 1 < n && s[e] == ':' && s[e + 1] == ' ' ? e : 0;
  }
  return 0;
}

static bool cube__log_digits(const char* s, size_t n, size_t* i, uint32_t* out) {
  size_t b = *i;
  uint32_t v = 0;
  while (*i < n && isdigit((unsigned char)s[*i]) && v < 100000000u)
    v = v * 10 + (uint32_t)(s[(*i)++] - '0');
  if (*i == b) return false;
  *out = v;
  return true;
}

/* "<file>:<line>[:<col>]" from |*i| to a ':' or ' ' or the end |n|; the
 * file runs to the first ':' that digits follow. */
static bool cube__log_location(const char* s, size_t n, size_t* i, cube__log_loc_t* out) {
  for (size_t c = *i + 1; c < n; ++c) {
    if (s[c] != ':' || c + 1 >= n || !isdigit((unsigned char)s[c + 1])) continue;
    size_t j = c + 1;
    uint32_t line = 0, col = 0;
    if (!cube__log_digits(s, n, &j, &line)) continue;
    if (j + 1 < n && s[j] == ':' && isdigit((unsigned char)s[j + 1])) {
      ++j;
      if (!cube__log_digits(s, n, &j, &col)) continue;
    }
    if (j < n && s[j] != ':' && s[j] != ' ') continue;
    out->file = s + *i;
    out->file_n = c - *i;
    out->line = line;
    out->col = col;
    *i = j;
    return true;
  }
  return false;
}

/* A head whose severity starts at |sev_at|. */
static bool cube__log_head_at(cube__log_line_t* l, size_t sev_at) {
  const char* s = l->s;
  size_t n = l->n;
  size_t k = cube__log_severity(s + sev_at, n - sev_at);
  if (!k) return false;
  l->kind = CUBE__LOG_HEAD;
  l->sev = s + sev_at;
  l->sev_n = k;
  l->msg = s + sev_at + k + 2;
  l->msg_n = n - (sev_at + k + 2);
  return true;
}

static void cube__log_parse(cube__log_line_t* l) {
  const char* s = l->s;
  size_t n = l->n;
  l->kind = CUBE__LOG_FREE;
  if (n == 0) return;
  /* PoCL: "<severity>: <location>[ <Spelling=<location>>]: <message>". */
  size_t sv = cube__log_severity(s, n);
  if (sv) {
    size_t i = sv + 2;
    cube__log_loc_t at;
    if (!cube__log_location(s, n, &i, &at)) return;
    cube__log_loc_t sp = {NULL, 0, 0, 0};
    if (i + 11 < n && memcmp(s + i, " <Spelling=", 11) == 0) {
      const char* b = s + i + 11;
      const char* close = memchr(b, '>', n - (size_t)(b - s));
      if (!close) return;
      size_t k = 0, m = (size_t)(close - b);
      if (!cube__log_location(b, m, &k, &sp) || k != m) sp.file = NULL;
      i = (size_t)(close - s) + 1;
    }
    if (i + 1 >= n || s[i] != ':' || s[i + 1] != ' ') return;
    l->kind = CUBE__LOG_HEAD;
    l->at = at;
    l->spelling = sp;
    l->sev = s;
    l->sev_n = sv;
    l->msg = s + i + 2;
    l->msg_n = n - i - 2;
    return;
  }
  /* NVRTC: "<file>(<line>): <severity>: <message>". */
  for (size_t c = 1; c + 1 < n; ++c) {
    if (s[c] != '(' || !isdigit((unsigned char)s[c + 1])) continue;
    size_t j = c + 1;
    uint32_t line = 0;
    if (!cube__log_digits(s, n, &j, &line)) continue;
    if (j + 2 >= n || s[j] != ')' || s[j + 1] != ':' || s[j + 2] != ' ') continue;
    if (!cube__log_head_at(l, j + 3)) continue;
    l->at = (cube__log_loc_t){s, c, line, 0};
    l->nvrtc = true;
    return;
  }
  /* cc, clang: "<location>: <severity>: <message>". */
  size_t i = 0;
  cube__log_loc_t at;
  if (cube__log_location(s, n, &i, &at) && i + 1 < n && s[i] == ':' && s[i + 1] == ' ' &&
      cube__log_head_at(l, i + 2)) {
    l->at = at;
    return;
  }
  /* gcc's context: "<file>: In function 'f':", "<file>: At top level:". */
  const char* colon = memchr(s, ':', n);
  if (colon && colon > s && (size_t)(colon - s) + 2 < n && colon[1] == ' ') {
    const char* rest = colon + 2;
    size_t rn = n - (size_t)(rest - s);
    if ((rn > 3 && memcmp(rest, "In ", 3) == 0) ||
        (rn >= 12 && memcmp(rest, "At top level", 12) == 0)) {
      l->kind = CUBE__LOG_CONTEXT;
      l->at = (cube__log_loc_t){s, (size_t)(colon - s), 0, 0};
      l->msg = rest;
      l->msg_n = rn;
    }
  }
}

/* A free line that sums up or reports the tool, not a line of the source:
 * "2 errors generated.", NVRTC's "2 errors detected in the compilation of
 * "k.cu"." (both count what was dropped too, and name the unit). */
static bool cube__log_is_summary(const char* s, size_t n) {
  size_t i = 0;
  while (i < n && isdigit((unsigned char)s[i])) ++i;
  if (i == 0 || i >= n || s[i] != ' ') return false;
  const char* rest = s + i + 1;
  size_t rn = n - i - 1;
  return (rn >= 5 && memcmp(rest, "error", 5) == 0) || (rn >= 7 && memcmp(rest, "warning", 7) == 0);
}

/* A line that starts a new group although it is no head: the tools' own. */
static bool cube__log_is_tool_line(const char* s, size_t n) {
  static const char* const starts[] = {"Device ", "Remark", "ptxas", "nvlink", "cc1", "collect2",
                                       "clang: ", "gcc: ", "ld: ", "/usr/bin/ld"};
  for (size_t k = 0; k < sizeof(starts) / sizeof(starts[0]); ++k) {
    size_t m = strlen(starts[k]);
    if (n >= m && memcmp(s, starts[k], m) == 0) return true;
  }
  return false;
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

typedef struct cube__log_out {
  cube__sb_t sb;
  const char* entry;
  char user_file[160]; /* "<entry>.cube" */
  const cube__log_alias_t* aliases;
  uint32_t alias_count;
} cube__log_out_t;

static bool cube__log_is_user(const cube__log_out_t* o, const cube__log_loc_t* at) {
  return at->file && at->file_n == strlen(o->user_file) &&
         memcmp(at->file, o->user_file, at->file_n) == 0;
}

/* Puts |s| with the generator's names put back into the user's words: the
 * entry's function names, the OpenCL rewrite's CUBE_ARRAY, PoCL's spelling
 * note, and the caller's aliases (a temporary path, the unit's name). */
static void cube__log_put(cube__log_out_t* o, const char* s, size_t n) {
  char kernel_fn[160];
  snprintf(kernel_fn, sizeof(kernel_fn), "cube__kernel_%s", o->entry);
  size_t kn = strlen(kernel_fn);
  size_t i = 0;
  while (i < n) {
    const char* r = s + i;
    size_t left = n - i;
    if (left >= kn && memcmp(r, kernel_fn, kn) == 0 &&
        (left == kn || !(isalnum((unsigned char)r[kn]) || r[kn] == '_'))) {
      cube__sb_puts(&o->sb, o->entry);
      i += kn;
      continue;
    }
    if (left >= 17 && memcmp(r, "cube_kernel_entry", 17) == 0) {
      cube__sb_puts(&o->sb, o->entry);
      i += 17;
      continue;
    }
    /* The CUDA entry's own name: "cube_k_" and 16 hex digits. */
    if (left >= 23 && memcmp(r, "cube_k_", 7) == 0) {
      size_t h = 7;
      while (h < 23 && isxdigit((unsigned char)r[h])) ++h;
      if (h == 23 && (left == 23 || !(isalnum((unsigned char)r[23]) || r[23] == '_'))) {
        cube__sb_puts(&o->sb, o->entry);
        i += 23;
        continue;
      }
    }
    if (left >= 10 && memcmp(r, "CUBE__EARR", 10) == 0) {
      cube__sb_puts(&o->sb, "CUBE_ARRAY"); /* as long: columns stay */
      i += 10;
      continue;
    }
    if (left >= 17 && memcmp(r, "CUBE__ENTRY_ARRAY", 17) == 0) {
      cube__sb_puts(&o->sb, "CUBE_ARRAY");
      i += 17;
      continue;
    }
    if (left >= 11 && memcmp(r, " <Spelling=", 11) == 0) {
      const char* close = memchr(r, '>', left);
      if (close) {
        i += (size_t)(close - r) + 1;
        continue;
      }
    }
    bool aliased = false;
    for (uint32_t a = 0; a < o->alias_count && !aliased; ++a) {
      const char* from = o->aliases[a].from;
      size_t fn = from ? strlen(from) : 0;
      if (fn && left >= fn && memcmp(r, from, fn) == 0) {
        cube__sb_puts(&o->sb, o->aliases[a].to ? o->aliases[a].to : "");
        i += fn;
        aliased = true;
      }
    }
    if (aliased) continue;
    cube__sb_put(&o->sb, r, 1);
    ++i;
  }
}

/* Line |line| (1-based) of |source|: its start and length. */
static bool cube__log_source_line(const char* source, uint32_t line, const char** out,
                                  size_t* out_n) {
  if (!source || line == 0) return false;
  const char* p = source;
  for (uint32_t k = 1; k < line; ++k) {
    p = strchr(p, '\n');
    if (!p) return false;
    ++p;
  }
  *out = p;
  *out_n = strcspn(p, "\r\n");
  return true;
}

/* NVRTC quotes the source line under a head, indented by two spaces, and
 * puts a caret under the column: the column, or 0 when the quote is not the
 * user's line as written (tabs are expanded to 8 there). The quote of the
 * line of the entry body's '{' starts with blanks where the user's line has
 * its text up to the '{' (dialect_emit.c puts generated code behind it and
 * pads the rest of the line back to its column): a quote may have blanks for
 * a prefix of the user's line. */
static uint32_t cube__log_caret_column(const cube__log_line_t* lines, size_t count, size_t head,
                                       const char* source) {
  const char* src;
  size_t src_n;
  if (!cube__log_source_line(source, lines[head].at.line, &src, &src_n)) return 0;
  size_t q = head + 1;
  while (q < count && lines[q].kind == CUBE__LOG_MORE && lines[q].n == 0) ++q;
  if (q + 1 >= count || lines[q].kind != CUBE__LOG_MORE || lines[q + 1].kind != CUBE__LOG_MORE)
    return 0;
  const cube__log_line_t* quote = &lines[q];
  const cube__log_line_t* caret = &lines[q + 1];
  const char* hat = memchr(caret->s, '^', caret->n);
  if (!hat || quote->n < 2 || memcmp(quote->s, "  ", 2) != 0) return 0;
  size_t want = (size_t)(hat - caret->s); /* display position in the quote */
  if (want < 2) return 0;
  want -= 2;
  /* Walk the user's line, expanding tabs, and check it is what was quoted. */
  size_t disp = 0;
  const char* qs = quote->s + 2;
  size_t qn = quote->n - 2;
  bool blanks = true; /* the quote has been blank so far */
  for (size_t b = 0; b < src_n; ++b) {
    if (disp == want) return (uint32_t)(b + 1);
    size_t w = src[b] == '\t' ? 8 - disp % 8 : 1;
    for (size_t k = 0; k < w; ++k) {
      if (disp + k >= qn) return 0;
      char qc = qs[disp + k];
      if (qc == (src[b] == '\t' ? ' ' : src[b])) {
        if (qc != ' ') blanks = false;
        continue;
      }
      if (!(blanks && qc == ' ')) return 0;
    }
    disp += w;
  }
  return disp == want ? (uint32_t)(src_n + 1) : 0;
}

static void cube__log_put_head(cube__log_out_t* o, const cube__log_loc_t* at,
                               const cube__log_line_t* l, const char* suffix) {
  cube__sb_puts(&o->sb, o->user_file);
  if (at && at->line) cube__sb_printf(&o->sb, ":%" PRIu32, at->line);
  if (at && at->line && at->col) cube__sb_printf(&o->sb, ":%" PRIu32, at->col);
  cube__sb_puts(&o->sb, ": ");
  cube__sb_put(&o->sb, l->sev, l->sev_n);
  cube__sb_puts(&o->sb, ": ");
  cube__log_put(o, l->msg, l->msg_n);
  if (suffix) cube__sb_puts(&o->sb, suffix);
  cube__sb_puts(&o->sb, "\n");
}

static bool cube__log_is_note(const cube__log_line_t* l) {
  return (l->sev_n >= 4 && memcmp(l->sev, "note", 4) == 0) ||
         (l->sev_n >= 6 && memcmp(l->sev, "remark", 6) == 0);
}

char* cube__dialect_log_filter(const char* log, const char* entry, const char* source,
                               const cube__log_alias_t* aliases, uint32_t alias_count) {
  if (!log || !entry) return NULL;
  cube__log_out_t o;
  memset(&o, 0, sizeof(o));
  o.entry = entry;
  snprintf(o.user_file, sizeof(o.user_file), "%s.cube", entry);
  o.aliases = aliases;
  o.alias_count = alias_count;

  size_t count = 1;
  for (const char* p = log; *p; ++p) count += *p == '\n';
  cube__log_line_t* lines = calloc(count, sizeof(*lines));
  if (!lines) return NULL;
  size_t nl = 0;
  for (const char* p = log; nl < count;) {
    size_t n = strcspn(p, "\n");
    size_t m = n;
    if (m && p[m - 1] == '\r') --m;
    lines[nl].s = p;
    lines[nl].n = m;
    cube__log_parse(&lines[nl]);
    ++nl;
    if (!p[n]) break;
    p += n + 1;
  }
  /* Lines under a head are its own until the next head, context or tool
   * line; summaries go. */
  bool under = false;
  for (size_t k = 0; k < nl; ++k) {
    cube__log_line_t* l = &lines[k];
    if (l->kind == CUBE__LOG_HEAD) {
      under = true;
    } else if (l->kind == CUBE__LOG_CONTEXT) {
      under = false;
    } else if (cube__log_is_summary(l->s, l->n)) {
      l->kind = CUBE__LOG_SUMMARY;
      under = false;
    } else if (cube__log_is_tool_line(l->s, l->n)) {
      under = false;
    } else if (under) {
      l->kind = CUBE__LOG_MORE;
    }
  }
  /* Where each head is in the user's file, if anywhere. */
  cube__log_loc_t* where = calloc(nl, sizeof(*where));
  bool* in_user = calloc(nl, sizeof(*in_user));
  if (!where || !in_user) {
    free(where);
    free(in_user);
    free(lines);
    return NULL;
  }
  bool any_user_error = false;
  for (size_t k = 0; k < nl; ++k) {
    cube__log_line_t* l = &lines[k];
    if (l->kind != CUBE__LOG_HEAD) continue;
    if (cube__log_is_user(&o, &l->spelling)) {
      where[k] = l->spelling; /* where the token was written */
      in_user[k] = true;
    } else if (cube__log_is_user(&o, &l->at)) {
      where[k] = l->at;
      in_user[k] = true;
    }
    if (in_user[k] && l->nvrtc) where[k].col = cube__log_caret_column(lines, nl, k, source);
    if (!in_user[k] && !cube__log_is_note(l)) {
      /* An error in the prelude or generated code: the first note after it
       * at the user's line is where the user's code made it happen (gcc:
       * "<stdin>:61:79: error: ..." then "k.cube:4:5: note: in expansion of
       * macro 'CUBE_STORE'"). */
      for (size_t q = k + 1; q < nl; ++q) {
        const cube__log_line_t* nq = &lines[q];
        if (nq->kind == CUBE__LOG_MORE || nq->kind == CUBE__LOG_FREE) continue;
        if (nq->kind != CUBE__LOG_HEAD || !cube__log_is_note(nq)) break;
        if (cube__log_is_user(&o, &nq->at)) {
          where[k] = nq->at;
          in_user[k] = true;
          break;
        }
      }
    }
    if (in_user[k] && !cube__log_is_note(l)) any_user_error = true;
  }

  /* Write: the user's heads with their lines (each once: the CPU unit can
   * hold a kernel's body twice, as written and split at its barriers);
   * heads elsewhere only when no error names the user's file at all, then
   * without the quoted code; contexts of the user's file. */
  size_t* written = calloc(nl, sizeof(*written)); /* offsets of written heads */
  size_t* written_n = calloc(nl, sizeof(*written_n));
  size_t nwritten = 0;
  bool keep_more = false;
  const cube__log_line_t* context = NULL; /* written before the next head written */
  for (size_t k = 0; k < nl && written && written_n; ++k) {
    cube__log_line_t* l = &lines[k];
    switch (l->kind) {
      case CUBE__LOG_SUMMARY:
        keep_more = false;
        break;
      case CUBE__LOG_FREE:
        keep_more = false;
        if (l->n == 0) break;
        cube__log_put(&o, l->s, l->n);
        cube__sb_puts(&o.sb, "\n");
        break;
      case CUBE__LOG_CONTEXT:
        keep_more = false;
        context = cube__log_is_user(&o, &l->at) ? l : NULL;
        break;
      case CUBE__LOG_MORE:
        if (keep_more) {
          cube__log_put(&o, l->s, l->n);
          cube__sb_puts(&o.sb, "\n");
        }
        break;
      case CUBE__LOG_HEAD: {
        keep_more = false;
        size_t mark = o.sb.len;
        if (in_user[k]) {
          cube__log_put_head(&o, &where[k], l, NULL);
        } else if (!any_user_error && !cube__log_is_note(l)) {
          cube__log_put_head(&o, NULL, l, " (in the code cube generates around the kernel)");
        } else {
          break;
        }
        if (o.sb.failed) break;
        /* The same head written before: take this one back. */
        bool dup = false;
        for (size_t w = 0; w < nwritten && !dup; ++w)
          dup = written_n[w] == o.sb.len - mark &&
                memcmp(o.sb.data + written[w], o.sb.data + mark, written_n[w]) == 0;
        if (dup) {
          o.sb.len = mark;
          o.sb.data[mark] = '\0';
          break;
        }
        written[nwritten] = mark;
        written_n[nwritten++] = o.sb.len - mark;
        /* The quoted code under it is the user's only when the head was
         * (not when it took a note's location: it quotes the prelude). */
        keep_more = cube__log_is_user(&o, &l->at) || cube__log_is_user(&o, &l->spelling);
        if (context) {
          /* gcc's "In function" line goes in front of the head it leads to,
           * when it names a function of the user's. */
          cube__sb_t head = {NULL, 0, 0, false};
          cube__sb_put(&head, o.sb.data + mark, o.sb.len - mark);
          o.sb.len = mark;
          size_t cmark = o.sb.len;
          cube__sb_puts(&o.sb, o.user_file);
          cube__sb_puts(&o.sb, ": ");
          cube__log_put(&o, context->msg, context->msg_n);
          cube__sb_puts(&o.sb, "\n");
          if (!o.sb.failed && strstr(o.sb.data + cmark, "cube__")) o.sb.len = cmark;
          if (head.failed) o.sb.failed = true;
          else cube__sb_put(&o.sb, head.data, head.len);
          free(head.data);
          written[nwritten - 1] = o.sb.len - written_n[nwritten - 1];
          context = NULL;
        }
        break;
      }
    }
  }
  bool failed = o.sb.failed || !written || !written_n;
  free(written);
  free(written_n);
  free(where);
  free(in_user);
  free(lines);
  if (failed) {
    free(o.sb.data);
    return NULL;
  }
  /* No trailing line break (the caller's message goes on). */
  while (o.sb.len && (o.sb.data[o.sb.len - 1] == '\n' || o.sb.data[o.sb.len - 1] == ' '))
    o.sb.data[--o.sb.len] = '\0';
  if (!o.sb.data) return strdup("");
  return o.sb.data;
}
