/* fuzz_options: the parser of every CUBE_* variable (src/base/options.h,
 * cube__option_parse), which reads text from the environment and from
 * cube_option_set, and the CUBE_FAULT syntax check behind it.
 *
 * Input: one byte picks the option (modulo their number), the rest up to the
 * first zero byte is the text.
 *
 * Checked, against the option table itself (CUBE__OPTION_TABLE): no crash,
 * no sanitizer report (a float-to-integer conversion out of range is one),
 * no leak; a refusal is INVALID_ARGUMENT whose message names the variable;
 * an accepted value is in the option's range: a bool 0 or 1, an integer or
 * a size within [MIN, MAX] (a size a multiple of STEP), seconds finite
 * within (MIN, MAX], an enum's index below its number of canonical words, a
 * string or path at most MAX bytes; the same text parses the same way twice. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "cube/status.h"

#define CHECK(cond)                                                                    \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      fprintf(stderr, "fuzz_options: check failed at line %d: %s (option %s, text '%s')\n", \
              __LINE__, #cond, g_name, g_text);                                        \
      abort();                                                                         \
    }                                                                                  \
  } while (0)

typedef struct row {
  const char* name;
  cube_option_type_t type;
  double min, max;
  uint64_t step;
  const char* words;
} row_t;

#define ROW(ID, TYPE, SCOPE, WHEN, DFLT, DFLT_DOC, MIN, MAX, STEP, WORDS, CHECKFN, DOC) \
  {"CUBE_" #ID, CUBE_OPTION_TYPE_##TYPE, (double)(MIN), (double)(MAX), (uint64_t)(STEP), WORDS},
static const row_t rows[CUBE__OPT_COUNT] = {CUBE__OPTION_TABLE(ROW)};
#undef ROW

static const char* g_name = "";
static const char* g_text = "";

/* The canonical words of "a|b|alias=b": those without '='. */
static uint32_t canonical_words(const char* words) {
  uint32_t n = 0;
  for (const char* p = words; p && *p;) {
    size_t len = strcspn(p, "|");
    if (!memchr(p, '=', len)) ++n;
    p += len;
    if (*p == '|') ++p;
  }
  return n;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const cube__option_id_t id = (cube__option_id_t)(data[0] % CUBE__OPT_COUNT);
  size_t len = 0;
  while (1 + len < size && data[1 + len] != 0) ++len;
  char* text = malloc(len + 1);
  if (!text) return 0;
  memcpy(text, data + 1, len);
  text[len] = '\0';
  const row_t* r = &rows[id];
  g_name = r->name;
  g_text = text;

  uint64_t bits = 0;
  cube_status_t st = cube__option_parse(id, text, &bits);
  uint64_t again = 0;
  cube_status_t st2 = cube__option_parse(id, text, &again);
  CHECK((st == NULL) == (st2 == NULL));
  cube_status_free(st2);
  if (st) {
    CHECK(cube_status_code(st) == CUBE_STATUS_INVALID_ARGUMENT);
    CHECK(strstr(cube_status_message(st), r->name) != NULL);
    cube_status_free(st);
  } else {
    CHECK(bits == again);
    switch (r->type) {
      case CUBE_OPTION_TYPE_BOOL:
        CHECK(bits <= 1);
        break;
      case CUBE_OPTION_TYPE_U32:
      case CUBE_OPTION_TYPE_SIZE:
        CHECK((double)bits >= r->min && (double)bits <= r->max);
        if (r->type == CUBE_OPTION_TYPE_U32) CHECK(bits <= UINT32_MAX);
        if (r->step) CHECK(bits % r->step == 0);
        break;
      case CUBE_OPTION_TYPE_SECONDS: {
        double v;
        memcpy(&v, &bits, sizeof v);
        CHECK(isfinite(v) && v > r->min && v <= r->max);
        break;
      }
      case CUBE_OPTION_TYPE_ENUM:
        CHECK(bits < canonical_words(r->words));
        break;
      case CUBE_OPTION_TYPE_STRING:
      case CUBE_OPTION_TYPE_PATH:
        CHECK((double)len <= r->max);
        break;
    }
  }
  free(text);
  return 0;
}
