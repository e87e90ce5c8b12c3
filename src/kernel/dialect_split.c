/* The cube dialect, CPU target: the entry of a kernel that calls sync_cube,
 * split at its barriers into loops over the units (cube__split_generate).
 *
 * A kernel whose body has a simple enough shape runs as loops over its units
 * instead of fibers: each region between barriers becomes one loop over every
 * unit of the cube. Control whose condition is uniform (the same for every
 * unit, free of side effects: cube__split_uniform_cond) runs once, outside
 * the unit loops, its bodies split in turn: a `for` with barriers whose
 * header reads no per-unit value, an `if`/`else` or `while` with barriers,
 * and `break;`/`continue;` of such a loop (also under a uniform `if`).
 * Top-level scalar locals ("private" locals) and local arrays of a size known
 * here live in per-unit arrays in cube->scratch, within the bytes the fibers
 * would take (CUBE_CPU_FIBER_STACK per unit); a scalar local that only
 * uniform writes change (whole statements between regions) is one variable
 * (a "uniform local"; when it is written elsewhere the kernel is read again
 * with it per unit). A `return;` in a region marks the unit in a per-unit
 * "returned" array (cube__rt) that later regions skip, and the kernel ends
 * once every unit has returned; a `return;` every unit reaches ends it.
 * Anything outside that subset (a barrier under a condition that is not
 * uniform, goto, switch, do, pointer locals, ...) keeps the fiber entry. The
 * units of a region run in the fibers' order (unit 0 first), so a kernel
 * without data races computes exactly what it computes as fibers. The define
 * CUBE_CPU_FIBERS forces the fiber entry.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel/dialect.h"
#include "kernel/dialect_internal.h"
#include "kernel/dialect_split_internal.h"

/* Names the user's line of |off| and pads to its column (a tab stays a tab,
 * anything else is a space), so that a message about the text copied next
 * names the user's line and column. */
static void cube__split_line(cube__split_t* s, cube__sb_t* sb, size_t off) {
  cube__sb_printf(sb, "#line %" PRIu32 " \"%s.cube\"\n", cube__line_at(s->v, off), s->entry);
  size_t start = off;
  while (start > 0 && s->src[start - 1] != '\n') --start;
  for (size_t i = start; i < off; ++i) cube__sb_put(sb, s->src[i] == '\t' ? "\t" : " ", 1);
}

/* The unit's index (cube__unit) is computed in 64 bits: its private slots'
 * addresses are then affine in the x loop's counter for the compilers, which
 * vectorise that loop only so (a 32-bit index may wrap). */
static void cube__split_open(cube__split_t* s) {
  if (s->in_region) return;
  s->in_region = true;
  s->region_at = s->body.len;
  cube__sb_puts(&s->body,
                "for (uint32_t cube__uz = 0; cube__uz < cube__dz; ++cube__uz)\n"
                "for (uint32_t cube__uy = 0; cube__uy < cube__dy; ++cube__uy)\n"
                "for (uint32_t cube__ux = 0; cube__ux < cube__dx; ++cube__ux) {\n"
                "const uint64_t cube__unit CUBE__UNUSED = (uint64_t)cube__ux + "
                "(uint64_t)cube__dx * ((uint64_t)cube__uy + (uint64_t)cube__dy * cube__uz);\n"
                "const uint32_t cube__ax CUBE__UNUSED = cube__cx * cube__dx + cube__ux;\n"
                "const uint32_t cube__abs CUBE__UNUSED = CUBE__ABSOLUTE_POS_OF_AXES;\n");
  /* Units that returned take part in no later region. The flags are read
   * only once some unit has returned: until then the test is the same for
   * the whole loop, which the compiler takes out of it. */
  if (s->returns)
    cube__sb_puts(&s->body,
                  "if (cube__live != cube__all && cube__rt[cube__unit]) continue;\n");
  s->region_stmts = s->body.len;
}

/* The open region's private locals held in locals of the unit's iteration:
 * those its statements name are read from their slots first, written back
 * last (when the region or a define it may use writes them), and the name
 * means the local in between (#define). A unit's slots are its own, so
 * nothing else reads them meanwhile; the compiler can keep the value in a
 * register (an accumulator across an unrolled loop) instead of reading and
 * writing its slot at every use, which it must do when a store through
 * another pointer (a shared array) might alias the slot. Uniform locals,
 * local arrays, unit axes and locals whose address is taken keep what they
 * are. A unit's `return;` jumps past the write-back: it runs no later region. */
static void cube__split_hold(cube__split_t* s) {
  cube__sb_t* b = &s->body;
  if (b->failed || !b->data || s->region_stmts > b->len) return;
  size_t rn = b->len - s->region_stmts;
  char* region = malloc(rn + 1);
  if (!region) {
    b->failed = true;
    return;
  }
  memcpy(region, b->data + s->region_stmts, rn);
  region[rn] = '\0';
  cube__sb_t pro = {NULL, 0, 0, false}, epi = {NULL, 0, 0, false};
  for (uint32_t k = 0; k < s->npriv; ++k) {
    const cube__split_priv_t* p = &s->priv[k];
    if (p->axis_only || p->addressed || p->uniform || p->count) continue;
    char name[64];
    size_t len = p->e - p->b;
    if (len >= sizeof name) continue;
    memcpy(name, s->v + p->b, len);
    name[len] = '\0';
    /* The region's text is the user's, unblanked: a name in a comment only
     * costs a copy. */
    size_t at = cube__find_token(region, rn, 0, name);
    if (at >= rn) continue;
    bool written = false;
    for (; at < rn && !written; at = cube__find_token(region, rn, at + 1, name))
      written = cube__is_modified(region, rn, at, len);
    for (uint32_t d = 0; d < s->define_count && !written; ++d) {
      const char* val = s->defines[d].value ? s->defines[d].value : "";
      written = cube__find_token(val, strlen(val), 0, name) < strlen(val);
    }
    cube__sb_printf(&pro, "%s cube__l_%s = cube__pv_%s[cube__unit];\n#undef %s\n"
                    "#define %s cube__l_%s\n", p->type, name, name, name, name, name);
    if (written) cube__sb_printf(&epi, "cube__pv_%s[cube__unit] = cube__l_%s;\n", name, name);
    cube__sb_printf(&epi, "#undef %s\n#define %s (cube__pv_%s[cube__unit])\n", name, name,
                    name);
  }
  if (pro.len) {
    b->len = s->region_stmts;
    cube__sb_put(b, pro.data, pro.len);
    cube__sb_put(b, region, rn);
    cube__sb_put(b, epi.data, epi.len);
  }
  if (pro.failed || epi.failed) b->failed = true;
  free(region);
  free(pro.data);
  free(epi.data);
}

static void cube__split_close(cube__split_t* s) {
  if (!s->in_region) return;
  s->in_region = false;
  cube__split_hold(s);
  if (s->region_jump) cube__sb_printf(&s->body, "cube__nx%" PRIu32 ": ;\n", s->labels++);
  cube__sb_puts(&s->body, "}\n");
  /* Once every unit has returned, nothing more runs: no uniform condition,
   * header or local below is evaluated that no unit evaluates as a fiber
   * (a division by zero a return guards against). */
  if (s->region_jump) cube__sb_puts(&s->body, "if (cube__live == 0) return 0;\n");
  s->region_jump = false;
}

/* A top-level declaration [i, end): 1 when handled (private locals; their
 * initialisers become assignments in the current region), 0 when the
 * statement is no declaration, -1 when it must keep the fibers. */
static int cube__split_decl(cube__split_t* s, size_t i, size_t end, int depth) {
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
    uint32_t count = 0;
    if (q < e && v[q] == '[') {
      /* A local array of a size known here: per-unit arrays too, its
       * initialiser (a braced list or none) copied in element by element. */
      size_t c = cube__match_paren(v, e, q);
      if (c >= e || (count = cube__split_array_count(s, q + 1, c)) == 0) return -1;
      q = cube__skip_space(v, c + 1, e);
      if (q < e) {
        if (v[q] != '=' || (q + 1 < e && v[q + 1] == '=')) return -1;
        ib = cube__skip_space(v, q + 1, e);
        ie = e;
        cube__trim(v, &ib, &ie);
        if (ib >= ie || v[ib] != '{' || cube__match_paren(v, ie, ib) + 1 != ie) return -1;
      }
      q = e;
    }
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
    pv->unit_pos = false;
    pv->uniform = false;
    pv->count = count;
    pv->axis = 0;
    pv->axis_only = false;
    bool written;
    cube__split_uses(s, b, ne, &written, &pv->addressed);
    if (count && ib < ie) {
      cube__split_open(s);
      cube__split_line(s, &s->body, b);
      cube__sb_printf(&s->body, "{ %s cube__in[%" PRIu32 "] = ", type, count);
      cube__sb_put(&s->body, s->src + ib, ie - ib);
      cube__sb_printf(&s->body,
                      "; for (uint32_t cube__i = 0; cube__i < %" PRIu32 "u; ++cube__i) ", count);
      cube__sb_put(&s->body, s->src + b, ne - b);
      cube__sb_puts(&s->body, "[cube__i] = cube__in[cube__i]; }\n");
      continue;
    }
    if (count) continue;
    /* A uniform local: its initial value (if any) the same for every unit. It
     * stays one when every write of it is a uniform write (checked after). */
    bool banned = false;
    for (uint32_t j = 0; j < s->nbanned; ++j) banned = banned || s->banned[j] == b;
    if (!banned && (ib == ie || cube__split_uniform_cond(s, ib, ie))) {
      /* Declared before the open region's unit loops (its value, read from
       * no per-unit value and no object the region can write, is the same
       * there), so that the region stays one loop; but not before a region
       * where a unit may return (all of them might: see cube__split_close). */
      cube__sb_t decl = {NULL, 0, 0, false};
      cube__split_line(s, &decl, b);
      cube__sb_printf(&decl, "%s ", type);
      cube__sb_put(&decl, s->src + b, ne - b);
      cube__sb_puts(&decl, " CUBE__UNUSED");
      if (ib < ie) {
        cube__sb_puts(&decl, " = ");
        cube__sb_put(&decl, s->src + ib, ie - ib);
      }
      cube__sb_puts(&decl, ";\n");
      if (decl.failed) {
        free(decl.data);
        return -1;
      }
      if (s->region_jump) cube__split_close(s); /* not before a unit's return */
      size_t at = s->in_region ? s->region_at : s->body.len, old = s->body.len;
      cube__sb_put(&s->body, decl.data, decl.len); /* room at the end */
      if (!s->body.failed && at < old) {
        memmove(s->body.data + at + decl.len, s->body.data + at, old - at);
        memcpy(s->body.data + at, decl.data, decl.len);
      }
      if (s->in_region) {
        s->region_at += decl.len;
        s->region_stmts += decl.len;
      }
      free(decl.data);
      pv->uniform = true;
      continue;
    }
    if (ib < ie && depth == 0 &&
        (cube__tok_is(v, ib, ie, "UNIT_POS_X") || cube__tok_is(v, ib, ie, "UNIT_POS"))) {
      size_t we = ib;
      while (we < ie && cube__is_ident_char(v[we])) ++we;
      static const char* const ok[] = {"uint32_t", "uint64_t", "int64_t", "unsigned",
                                       "unsigned int"};
      for (size_t w = 0; we == ie && w < sizeof ok / sizeof ok[0]; ++w)
        if (strcmp(type, ok[w]) == 0) pv->unit_pos = true;
    }
    if (ib < ie && depth == 0) {
      static const char* const axes[] = {"UNIT_POS_X", "UNIT_POS_Y", "UNIT_POS_Z"};
      for (size_t w = 0; w < 3; ++w)
        if (cube__tok_is(v, ib, ie, axes[w]) && ib + strlen(axes[w]) == ie)
          pv->axis = (char)('x' + w);
    }
    if (pv->axis && !written) {
      /* The name means the unit loop's counter (cube__split_generate): no
       * array, no assignment, and an index computed from it is affine in the
       * loop's counter, so that the loop vectorises with plain loads. */
      pv->axis_only = true;
      continue;
    }
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

/* Copies the statement [i, end) of a region into the current region, each
 * `return;` turned into "this unit has returned; on to the next unit" (its
 * flag set, a jump to the end of the region's unit loop). False for a
 * `return` with a value. */
static bool cube__split_copy(cube__split_t* s, size_t i, size_t end) {
  const char* v = s->v;
  size_t from = i;
  for (size_t at = cube__find_token(v, end, i, "return"); at < end;
       at = cube__find_token(v, end, at + 1, "return")) {
    size_t semi = cube__skip_space(v, at + 6, end);
    if (semi >= end || v[semi] != ';') return false;
    cube__sb_put(&s->body, s->src + from, at - from);
    cube__sb_printf(&s->body,
                    "{ cube__rt[cube__unit] = 1; --cube__live; goto cube__nx%" PRIu32 "; }",
                    s->labels);
    s->region_jump = true;
    from = semi + 1;
  }
  cube__sb_put(&s->body, s->src + from, end - from);
  cube__sb_puts(&s->body, "\n");
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
      ++s->uloops;
      if (!cube__split_block(s, bb + 1, be, depth + 1)) return false;
      --s->uloops;
      cube__sb_puts(&s->body, "}\n");
      i = end;
      continue;
    }
    bool jump_ok;
    bool escapes = !has_sync && cube__split_escapes(v, i, end, &jump_ok);
    if (escapes && !jump_ok) return false;
    if ((has_sync || escapes) &&
        (cube__tok_is(v, i, end, "if") || cube__tok_is(v, i, end, "while"))) {
      /* A uniform if (else) or while: once, outside the unit loops, its
       * bodies split in turn. A break or continue it holds leaves the
       * uniform loop around it (a while of its own when it has barriers). */
      bool is_while = cube__tok_is(v, i, end, "while");
      size_t p = cube__skip_space(v, i + (is_while ? 5 : 2), end);
      if (p >= end || v[p] != '(') return false;
      size_t c = cube__match_paren(v, end, p);
      if (c >= end || !cube__split_uniform_cond(s, p + 1, c)) return false;
      if (is_while && !has_sync) return false; /* a break of the while: no barrier, no need */
      size_t tb = cube__skip_space(v, c + 1, end);
      size_t te = cube__stmt_end(v, tb, end);
      if (te == CUBE__SPLIT_NONE) return false;
      size_t eb = end, ee = end;
      size_t q = cube__skip_space(v, te, end);
      if (q < end) {
        if (is_while || !cube__tok_is(v, q, end, "else")) return false;
        eb = cube__skip_space(v, q + 4, end);
        ee = cube__stmt_end(v, eb, end);
        if (ee != end) return false;
      }
      cube__split_close(s);
      cube__split_line(s, &s->body, i);
      cube__sb_put(&s->body, s->src + i, c + 1 - i);
      cube__sb_puts(&s->body, " {\n");
      if (is_while) ++s->uloops;
      bool ok = v[tb] == '{' ? cube__split_block(s, tb + 1, te - 1, depth + 1)
                             : cube__split_block(s, tb, te, depth + 1);
      if (is_while) --s->uloops;
      if (!ok) return false;
      cube__sb_puts(&s->body, "}\n");
      if (eb < ee) {
        cube__sb_puts(&s->body, "else {\n");
        ok = v[eb] == '{' ? cube__split_block(s, eb + 1, ee - 1, depth + 1)
                          : cube__split_block(s, eb, ee, depth + 1);
        if (!ok) return false;
        cube__sb_puts(&s->body, "}\n");
      }
      i = end;
      continue;
    }
    if (escapes) {
      /* `break;` or `continue;` of a uniform loop, reached by every unit. */
      bool brk = cube__tok_is(v, i, end, "break");
      if (!brk && !cube__tok_is(v, i, end, "continue")) return false;
      if (s->uloops == 0 || cube__skip_space(v, i + (brk ? 5 : 8), end) + 1 != end) return false;
      cube__split_close(s);
      cube__split_line(s, &s->body, i);
      cube__sb_puts(&s->body, brk ? "break;\n" : "continue;\n");
      i = end;
      continue;
    }
    size_t wat;
    if (!has_sync && cube__split_uniform_write(s, i, end, &wat)) {
      /* Once, between the regions (it writes no per-unit value). */
      if (s->nuw == CUBE__SPLIT_MAX_WRITES) return false;
      s->uw[s->nuw++] = wat;
      cube__split_close(s);
      cube__split_line(s, &s->body, i);
      cube__sb_put(&s->body, s->src + i, end - i);
      cube__sb_puts(&s->body, "\n");
      i = end;
      continue;
    }
    if (cube__tok_is(v, i, end, "return")) {
      /* Every unit returns here: the kernel ends once the open region is done. */
      if (cube__skip_space(v, i + 6, end) + 1 != end) return false;
      cube__split_close(s);
      cube__sb_puts(&s->body, "return 0;\n");
      i = end;
      continue;
    }
    if (has_sync) return false;
    if (v[i] == ';') {
      i = end;
      continue;
    }
    int d = cube__split_decl(s, i, end, depth);
    if (d < 0) return false;
    if (d == 0) {
      if (!cube__split_plain_ok(v, i, end)) return false;
      size_t gb = 0, ge = 0;
      if (!s->in_region && cube__split_guard(s, i, end, e, &gb, &ge)) {
        /* A region of one `if (A < B) stmt`: its guard holds for a prefix of
         * the units (A is the unit's position, B the same for all), so the
         * unit loop stops at the first unit for which it does not. */
        cube__split_open(s);
        cube__sb_puts(&s->body, "if (!(");
        cube__sb_put(&s->body, s->src + gb, ge - gb);
        cube__sb_puts(&s->body, ")) break;\n");
        ++s->guarded;
      }
      cube__split_open(s);
      cube__split_line(s, &s->body, i);
      if (!cube__split_copy(s, i, end)) return false;
    }
    i = end;
  }
  cube__split_close(s);
  return true;
}

char* cube__split_generate(const cube__signature_t* sig, const char* source, const char* v,
                           size_t n, const cube_define_t* defines, uint32_t define_count) {
  bool present;
  cube__find_define(defines, define_count, "CUBE_CPU_FIBERS", &present);
  if (present || !sig->uses_sync_cube) return NULL;
  char* result = NULL;
  cube__split_t* s = calloc(1, sizeof *s);
  if (!s) goto done;
  /* The first declaration of the entry that has a body. */
  size_t eb = 0, ee = 0;
  cube__decl_t d;
  size_t at = cube__find_decl(v, n, 0, sig->entry, &d);
  while (at < n && !(d.close < n && cube__kernel_body(v, n, d.close, &eb, &ee)))
    at = cube__find_decl(v, n, at + 1, sig->entry, &d);
  if (at >= n) goto done;
  const cube__split_t first = {.src = source, .v = v, .n = n, .entry = sig->entry,
                               .entry_close = d.close, .body_b = eb + 1, .body_e = ee - 1,
                               .sig = sig, .defines = defines, .define_count = define_count,
                               .returns = cube__range_has(v, eb + 1, ee - 1, "return")};
  *s = first;
  for (;;) {
    if (!cube__split_block(s, eb + 1, ee - 1, 0)) goto done;
    /* A uniform local written anywhere but by a uniform write (in a region,
     * a loop header, its address taken, named by a define) is a private
     * local: read again. */
    size_t bad = CUBE__SPLIT_NONE;
    for (uint32_t k = 0; bad == CUBE__SPLIT_NONE && k < s->npriv; ++k) {
      const cube__split_priv_t* p = &s->priv[k];
      if (!p->uniform) continue;
      char name[64];
      size_t len = p->e - p->b;
      if (len >= sizeof name) goto done;
      memcpy(name, v + p->b, len);
      name[len] = '\0';
      for (uint32_t k2 = 0; k2 < define_count; ++k2) { /* a macro that might write it */
        const char* val = defines[k2].value ? defines[k2].value : "";
        if (cube__find_token(val, strlen(val), 0, name) < strlen(val)) bad = p->b;
      }
      for (size_t wa = cube__find_token(v, ee - 1, eb + 1, name); wa < ee - 1;
           wa = cube__find_token(v, ee - 1, wa + 1, name)) {
        if (wa == p->b || !cube__is_modified(v, ee - 1, wa, len)) continue;
        bool listed = false;
        for (uint32_t w = 0; w < s->nuw; ++w) listed = listed || s->uw[w] == wa;
        if (!listed) bad = p->b;
      }
    }
    if (bad == CUBE__SPLIT_NONE) break;
    if (s->nbanned == CUBE__SPLIT_MAX_PRIV) goto done;
    /* Again from the start, that local per unit. */
    size_t banned[CUBE__SPLIT_MAX_PRIV];
    uint32_t nbanned = s->nbanned;
    memcpy(banned, s->banned, sizeof banned);
    banned[nbanned++] = bad;
    free(s->body.data);
    free(s->shared.data);
    *s = first;
    memcpy(s->banned, banned, sizeof banned);
    s->nbanned = nbanned;
  }
  if (!cube__split_checks(s, sig, eb + 1, ee - 1, eb, ee, defines, define_count)) goto done;
  if (s->body.failed || s->shared.failed) goto done;
  {
    /* The per-unit arrays fit in the scratch the fibers ask for (so that the
     * kernel runs with the same scratch either way): each takes at most its
     * units' bytes plus 63 of rounding, and with two units or more that is
     * below units * (bytes + 32); the fibers have CUBE_CPU_FIBER_STACK per
     * unit. */
    uint64_t per_unit = s->returns ? 1u + 32u : 0u;
    for (uint32_t k = 0; k < s->npriv; ++k)
      if (!s->priv[k].uniform)
        per_unit += cube__split_type_size(s->priv[k].type) *
                      (s->priv[k].count ? s->priv[k].count : 1u) + 32u;
    if (per_unit > cube__cpu_fiber_stack(defines, define_count)) goto done;
  }

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
    if (p->uniform || p->axis_only) continue;
    if (p->count)
      cube__sb_printf(&out,
                      "  %s (*restrict const cube__pv_%.*s)[%" PRIu32 "] = (%s(*)[%" PRIu32
                      "])cube__sp;\n"
                      "  cube__sp += (uintptr_t)((cube__units * sizeof(%s[%" PRIu32
                      "]) + 63u) & ~(uint64_t)63u);\n",
                      p->type, len, v + p->b, p->count, p->type, p->count, p->type, p->count);
    else
      cube__sb_printf(&out,
                      "  %s* restrict const cube__pv_%.*s = (%s*)cube__sp;\n"
                      "  cube__sp += (uintptr_t)((cube__units * sizeof(%s) + 63u) & "
                      "~(uint64_t)63u);\n",
                      p->type, len, v + p->b, p->type, p->type);
  }
  if (s->returns)
    cube__sb_puts(&out,
                  "  unsigned char* restrict const cube__rt = (unsigned char*)cube__sp;\n"
                  "  cube__sp += (uintptr_t)((cube__units + 63u) & ~(uint64_t)63u);\n");
  cube__sb_puts(&out,
                "  if (cube__sp - (uintptr_t)cube__scratch > cube__scratch_size) return 1;\n");
  if (s->returns)
    cube__sb_puts(&out,
                  "  __builtin_memset(cube__rt, 0, cube__units);\n"
                  "  uint32_t cube__live CUBE__UNUSED = (uint32_t)cube__units;\n"
                  "  const uint32_t cube__all CUBE__UNUSED = (uint32_t)cube__units;\n");
  cube__sb_put(&out, s->shared.data ? s->shared.data : "", s->shared.len);
  /* CUBE_SHARED is thread-local storage, and in a loaded shared object each
   * access to it is a call (__tls_get_addr) that gcc and clang keep in the
   * unit loops (they recompute a thread-local address where it is used, also
   * one held in a local): the array's address is read once here, made opaque
   * to the compiler by an empty asm, and the name means the array through it
   * (same type: sizeof, &, indexing). */
  for (uint32_t k = 0; k < s->nshared; ++k) {
    if (!s->sh_alias[k]) continue;
    int len = (int)(s->sh_e[k] - s->sh_b[k]);
    const char* nm = v + s->sh_b[k];
    cube__sb_printf(&out,
                    "  __typeof__(%.*s)* cube__sh_%.*s = &%.*s;\n"
                    "  __asm__(\"\" : \"+r\"(cube__sh_%.*s));\n"
                    "#pragma push_macro(\"%.*s\")\n#undef %.*s\n"
                    "#define %.*s (*cube__sh_%.*s)\n",
                    len, nm, len, nm, len, nm, len, nm, len, nm, len, nm, len, nm, len, nm);
  }
  for (uint32_t k = 0; k < s->npriv; ++k) {
    int len = (int)(s->priv[k].e - s->priv[k].b);
    const char* nm = v + s->priv[k].b;
    if (s->priv[k].uniform) continue;
    cube__sb_printf(&out, "#pragma push_macro(\"%.*s\")\n#undef %.*s\n", len, nm, len, nm);
    if (s->priv[k].axis_only)
      cube__sb_printf(&out, "#define %.*s ((%s)cube__u%c)\n", len, nm, s->priv[k].type,
                      s->priv[k].axis);
    else
      cube__sb_printf(&out, "#define %.*s (cube__pv_%.*s[cube__unit])\n", len, nm, len, nm);
  }
  cube__sb_put(&out, s->body.data ? s->body.data : "", s->body.len);
  cube__sb_puts(&out, "  return 0;\n}\n");
  for (uint32_t k = 0; k < s->npriv; ++k) {
    int len = (int)(s->priv[k].e - s->priv[k].b);
    const char* nm = v + s->priv[k].b;
    if (s->priv[k].uniform) continue;
    cube__sb_printf(&out, "#undef %.*s\n#pragma pop_macro(\"%.*s\")\n", len, nm, len, nm);
  }
  for (uint32_t k = 0; k < s->nshared; ++k) {
    if (!s->sh_alias[k]) continue;
    int len = (int)(s->sh_e[k] - s->sh_b[k]);
    const char* nm = v + s->sh_b[k];
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
  return result;
}
