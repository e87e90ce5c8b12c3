/* The option table (options.h): descriptors built from the X-macro list,
 * one atomic value per option, the environment read once per resolution,
 * and the public cube_option_* functions. */
#include "base/options.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/status.h"

//===----------------------------------------------------------------------===//
// Descriptors
//===----------------------------------------------------------------------===//

/* The public ids are the table's numbers: the same order, nothing missing. */
#define CUBE__OPTION_SAME_ID(ID, ...)                                       \
  _Static_assert((int)CUBE__OPT_##ID == (int)CUBE_OPTION_##ID,            \
                 "include/cube/options.h lists CUBE_OPTION_" #ID " out of order");
CUBE__OPTION_TABLE(CUBE__OPTION_SAME_ID)
#undef CUBE__OPTION_SAME_ID
_Static_assert((int)CUBE__OPT_COUNT == (int)CUBE_OPTION_CUDA_KERNEL_TIMER + 1,
               "include/cube/options.h and src/base/options.h list different options");

typedef cube_status_t (*cube__option_check_fn)(const char* text);

typedef struct cube__option_desc {
  const char* name;
  cube_option_type_t type;
  cube_option_scope_t scope;
  cube_option_when_t when;
  const char* dflt;
  const char* dflt_doc;
  double min, max;
  uint64_t step;
  const char* words;
  cube__option_check_fn check;
  const char* doc;
} cube__option_desc_t;

#define CUBE__OPTION_DESC(ID, TYPE, SCOPE, WHEN, DFLT, DFLT_DOC, MIN, MAX, STEP, WORDS, CHECK,   \
                          DOC)                                                                   \
  {"CUBE_" #ID, CUBE_OPTION_TYPE_##TYPE, CUBE_OPTION_SCOPE_##SCOPE, CUBE_OPTION_##WHEN, DFLT,    \
   DFLT_DOC, (double)(MIN), (double)(MAX), (uint64_t)(STEP), WORDS, CHECK, DOC},

/* Parses sizes such as "1048576", "512K", "64MiB", "2G", "1.5GiB". Returns an
 * INVALID_ARGUMENT status naming |name| and the text on bad input. */
static cube_status_t cube__parse_size(const char* name, const char* text, uint64_t* out) {
  const char* p = text;
  while (isspace((unsigned char)*p)) ++p;
  char* end = NULL;
  errno = 0;
  double v = strtod(p, &end);
  /* !(v >= 0) also refuses "nan", which no comparison below would catch. */
  if (end == p || errno || !(v >= 0))
    return CUBE_INVALID("%s: '%s' is not a size (expected e.g. 1048576, 512K, 64MiB, 2G)", name,
                        text);
  while (isspace((unsigned char)*end)) ++end;
  double mul = 1;
  char u = (char)toupper((unsigned char)*end);
  if (u == 'K') mul = 1024.0;
  else if (u == 'M') mul = 1024.0 * 1024.0;
  else if (u == 'G') mul = 1024.0 * 1024.0 * 1024.0;
  else if (u == 'T') mul = 1024.0 * 1024.0 * 1024.0 * 1024.0;
  else if (u == 'B' || u == 0) mul = 1;
  else
    return CUBE_INVALID("%s: '%s' has an unknown unit (use K, M, G or T)", name, text);
  if (u && u != 'B') {
    ++end;
    if (*end == 'i' || *end == 'I') ++end;
    if (*end == 'b' || *end == 'B') ++end;
  } else if (u == 'B') {
    ++end;
  }
  while (isspace((unsigned char)*end)) ++end;
  if (*end) return CUBE_INVALID("%s: '%s' has trailing characters", name, text);
  double bytes = v * mul;
  if (!(bytes <= 1.8e19)) return CUBE_INVALID("%s: '%s' is too large", name, text);
  *out = (uint64_t)bytes;
  return CUBE_OK;
}

static const cube__option_desc_t cube__opt_desc[CUBE__OPT_COUNT] = {
    CUBE__OPTION_TABLE(CUBE__OPTION_DESC)};
#undef CUBE__OPTION_DESC

/* Enum words: split once from the table's "a|b|alias=b". */
#define CUBE__OPT_MAX_WORDS 12
typedef struct cube__option_words {
  uint32_t count;     /* every word, aliases included */
  uint32_t canonical; /* the first |canonical| have value == index */
  char word[CUBE__OPT_MAX_WORDS][24];
  uint32_t value[CUBE__OPT_MAX_WORDS];
} cube__option_words_t;

static cube__option_words_t cube__opt_words[CUBE__OPT_COUNT];
static char cube__opt_accepted[CUBE__OPT_COUNT][160];
static pthread_once_t cube__opt_desc_once = PTHREAD_ONCE_INIT;

static void cube__opt_words_split(cube__option_id_t id) {
  cube__option_words_t* w = &cube__opt_words[id];
  const char* p = cube__opt_desc[id].words;
  while (p && *p && w->count < CUBE__OPT_MAX_WORDS) {
    size_t len = strcspn(p, "|");
    char item[sizeof(w->word[0])];
    snprintf(item, sizeof(item), "%.*s", (int)(len < sizeof(item) ? len : sizeof(item) - 1), p);
    char* eq = strchr(item, '=');
    uint32_t k = w->count++;
    if (eq) {
      *eq = '\0';
      w->value[k] = 0;
      for (uint32_t j = 0; j < w->canonical; ++j)
        if (strcmp(w->word[j], eq + 1) == 0) w->value[k] = j;
    } else {
      w->value[k] = k;
      w->canonical = k + 1;
    }
    snprintf(w->word[k], sizeof(w->word[k]), "%s", item);
    p += len;
    if (*p == '|') ++p;
  }
}

/* "64 KiB", "4 MiB", "1000 bytes". */
static void cube__opt_format_size(uint64_t v, char* buf, size_t size) {
  if (v && v % (1ull << 30) == 0) snprintf(buf, size, "%" PRIu64 " GiB", v >> 30);
  else if (v && v % (1ull << 20) == 0) snprintf(buf, size, "%" PRIu64 " MiB", v >> 20);
  else if (v && v % (1ull << 10) == 0) snprintf(buf, size, "%" PRIu64 " KiB", v >> 10);
  else snprintf(buf, size, "%" PRIu64 " bytes", v);
}

static void cube__opt_accepted_build(cube__option_id_t id) {
  const cube__option_desc_t* d = &cube__opt_desc[id];
  char* out = cube__opt_accepted[id];
  size_t n = sizeof(cube__opt_accepted[id]);
  switch (d->type) {
    case CUBE_OPTION_TYPE_BOOL:
      snprintf(out, n, "a boolean: 1/0, true/false, yes/no, on/off");
      break;
    case CUBE_OPTION_TYPE_U32:
      snprintf(out, n, "an integer in [%.0f, %.0f]", d->min, d->max);
      break;
    case CUBE_OPTION_TYPE_SIZE: {
      /* An unbounded size has max = 2^64 as a double, which no uint64_t holds:
         it is described without a range rather than converted. */
      if (d->max >= 1.8e19) {
        snprintf(out, n, "a size in bytes (e.g. 1048576, 512K, 64MiB, 2G)");
        break;
      }
      char lo[32], hi[32], step[32];
      cube__opt_format_size((uint64_t)d->min, lo, sizeof(lo));
      cube__opt_format_size((uint64_t)d->max, hi, sizeof(hi));
      cube__opt_format_size(d->step, step, sizeof(step));
      snprintf(out, n, "a size from %s to %s%s%s (e.g. 512K, 4M)", lo, hi,
               d->step ? ", a multiple of " : "", d->step ? step : "");
      break;
    }
    case CUBE_OPTION_TYPE_SECONDS:
      snprintf(out, n, "a number of seconds greater than %g and at most %.0f", d->min, d->max);
      break;
    case CUBE_OPTION_TYPE_ENUM: {
      const cube__option_words_t* w = &cube__opt_words[id];
      size_t at = (size_t)snprintf(out, n, "one of ");
      for (uint32_t k = 0; k < w->canonical && at < n; ++k)
        at += (size_t)snprintf(out + at, n - at, "%s%s", k ? ", " : "", w->word[k]);
      for (uint32_t k = w->canonical; k < w->count && at < n; ++k)
        at += (size_t)snprintf(out + at, n - at, "%s%s%s", k == w->canonical ? " (also " : ", ",
                               w->word[k], k + 1 == w->count ? ")" : "");
      break;
    }
    case CUBE_OPTION_TYPE_STRING:
    case CUBE_OPTION_TYPE_PATH:
      if (d->words)
        snprintf(out, n, "%s", d->words);
      else
        snprintf(out, n, "%s of at most %.0f bytes",
                 d->type == CUBE_OPTION_TYPE_PATH ? "a path" : "text", d->max);
      break;
  }
}

static void cube__opt_desc_init(void) {
  for (int i = 0; i < CUBE__OPT_COUNT; ++i) {
    if (cube__opt_desc[i].type == CUBE_OPTION_TYPE_ENUM)
      cube__opt_words_split((cube__option_id_t)i);
    cube__opt_accepted_build((cube__option_id_t)i);
  }
}

static void cube__opt_desc_ready(void) { pthread_once(&cube__opt_desc_once, cube__opt_desc_init); }

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

static cube_status_t cube__opt_refuse(cube__option_id_t id, const char* text) {
  return CUBE_INVALID("%s: '%s' is not %s", cube__opt_desc[id].name, text,
                      cube__opt_accepted[id]);
}

/* Decimal digits only (surrounding blanks allowed), into |out|. */
static bool cube__opt_parse_uint(const char* text, uint64_t* out) {
  const char* p = text;
  while (isspace((unsigned char)*p)) ++p;
  if (!isdigit((unsigned char)*p)) return false;
  char* end = NULL;
  errno = 0;
  unsigned long long v = strtoull(p, &end, 10);
  if (errno) return false;
  while (isspace((unsigned char)*end)) ++end;
  if (*end) return false;
  *out = (uint64_t)v;
  return true;
}

cube_status_t cube__option_parse(cube__option_id_t id, const char* text, uint64_t* out_bits) {
  if ((unsigned)id >= CUBE__OPT_COUNT) return CUBE_INVALID("option %d does not exist", (int)id);
  cube__opt_desc_ready();
  const cube__option_desc_t* d = &cube__opt_desc[id];
  if (!text) return CUBE_INVALID("%s: the value is NULL", d->name);
  *out_bits = 0;
  switch (d->type) {
    case CUBE_OPTION_TYPE_BOOL: {
      static const char* const yes[] = {"1", "true", "yes", "on"};
      static const char* const no[] = {"0", "false", "no", "off"};
      for (int k = 0; k < 4; ++k) {
        if (strcasecmp(text, yes[k]) == 0) {
          *out_bits = 1;
          return CUBE_OK;
        }
        if (strcasecmp(text, no[k]) == 0) return CUBE_OK;
      }
      return cube__opt_refuse(id, text);
    }
    case CUBE_OPTION_TYPE_U32: {
      uint64_t v;
      if (!cube__opt_parse_uint(text, &v) || (double)v < d->min || (double)v > d->max)
        return cube__opt_refuse(id, text);
      *out_bits = v;
      return CUBE_OK;
    }
    case CUBE_OPTION_TYPE_SIZE: {
      uint64_t v = 0;
      cube_status_t st = cube__parse_size(d->name, text, &v);
      if (st) {
        cube_status_free(st);
        return cube__opt_refuse(id, text);
      }
      if ((double)v < d->min || (double)v > d->max || (d->step && v % d->step))
        return cube__opt_refuse(id, text);
      *out_bits = v;
      return CUBE_OK;
    }
    case CUBE_OPTION_TYPE_SECONDS: {
      const char* p = text;
      while (isspace((unsigned char)*p)) ++p;
      char* end = NULL;
      errno = 0;
      double v = strtod(p, &end);
      if (end == p || errno) return cube__opt_refuse(id, text);
      while (isspace((unsigned char)*end)) ++end;
      if (*end || !isfinite(v) || !(v > d->min) || v > d->max) return cube__opt_refuse(id, text);
      memcpy(out_bits, &v, sizeof(v));
      return CUBE_OK;
    }
    case CUBE_OPTION_TYPE_ENUM: {
      const cube__option_words_t* w = &cube__opt_words[id];
      for (uint32_t k = 0; k < w->count; ++k) {
        if (strcasecmp(text, w->word[k]) == 0) {
          *out_bits = w->value[k];
          return CUBE_OK;
        }
      }
      return cube__opt_refuse(id, text);
    }
    case CUBE_OPTION_TYPE_STRING:
    case CUBE_OPTION_TYPE_PATH: {
      size_t len = strlen(text);
      if ((double)len > d->max)
        return CUBE_INVALID("%s: the value is %zu bytes long (at most %.0f)", d->name, len,
                            d->max);
      if (d->check) {
        cube_status_t st = d->check(text);
        if (st) return cube__status_annotate(st, "%s: '%s'", d->name, text);
      }
      return CUBE_OK;
    }
  }
  return CUBE_INVALID("%s: unknown option type", d->name);
}

cube_status_t cube__option_check_value(cube__option_id_t id, uint64_t value, const char* what) {
  if ((unsigned)id >= CUBE__OPT_COUNT) return CUBE_INVALID("option %d does not exist", (int)id);
  cube__opt_desc_ready();
  char text[32];
  if (cube__opt_desc[id].type == CUBE_OPTION_TYPE_ENUM) {
    if (value >= cube__opt_words[id].canonical)
      return CUBE_INVALID("%s is %" PRIu64 ", not a value from 0 to %u (as %s: %s)", what, value,
                          cube__opt_words[id].canonical - 1, cube__opt_desc[id].name,
                          cube__opt_accepted[id]);
    snprintf(text, sizeof(text), "%s", cube__opt_words[id].word[value]);
  } else {
    snprintf(text, sizeof(text), "%" PRIu64, value);
  }
  uint64_t bits;
  cube_status_t st = cube__option_parse(id, text, &bits);
  if (!st) return CUBE_OK;
  cube_status_free(st);
  return CUBE_INVALID("%s is %s, not %s (as %s)", what, text, cube__opt_accepted[id],
                      cube__opt_desc[id].name);
}

//===----------------------------------------------------------------------===//
// Values
//===----------------------------------------------------------------------===//

/* Texts of values, kept until cube__options_reset (a reader may still hold
 * one after a set; reset runs when no other call does). */
typedef struct cube__opt_text {
  struct cube__opt_text* next;
  char text[];
} cube__opt_text_t;

typedef struct cube__opt_state {
  _Atomic uint64_t bits;
  _Atomic(const char*) text; /* NULL: no value */
  atomic_int source;         /* cube_option_source_t */
  atomic_bool read;          /* read by the runtime since the last reset */
  char* error;               /* why the environment's value was refused (under the lock) */
} cube__opt_state_t;

static pthread_mutex_t cube__opt_lock = PTHREAD_MUTEX_INITIALIZER;
static cube__opt_state_t cube__opt_state[CUBE__OPT_COUNT];
static cube__opt_text_t* cube__opt_texts; /* under the lock */
static atomic_bool cube__opt_resolved;
static atomic_uint cube__opt_refused; /* options holding an error */

static const char* cube__opt_intern_locked(const char* s) {
  size_t n = strlen(s);
  cube__opt_text_t* t = malloc(sizeof(*t) + n + 1);
  if (!t) return NULL;
  memcpy(t->text, s, n + 1);
  t->next = cube__opt_texts;
  cube__opt_texts = t;
  return t->text;
}

static void cube__opt_error_set_locked(cube__option_id_t id, cube_status_t st) {
  cube__opt_state_t* s = &cube__opt_state[id];
  if (s->error) {
    free(s->error);
    s->error = NULL;
    atomic_fetch_sub(&cube__opt_refused, 1);
  }
  if (st) {
    s->error = strdup(cube_status_message(st));
    if (s->error) atomic_fetch_add(&cube__opt_refused, 1);
    cube_status_free(st);
  }
}

/* Stores |text| (NULL: no value) with its |bits|. */
static void cube__opt_store_locked(cube__option_id_t id, const char* text, uint64_t bits,
                                   cube_option_source_t source) {
  cube__opt_state_t* s = &cube__opt_state[id];
  const char* kept = text ? cube__opt_intern_locked(text) : NULL;
  if (text && !kept) {
    /* No memory for the text: keep the default rather than half a value. */
    text = cube__opt_desc[id].dflt;
    source = CUBE_OPTION_SOURCE_DEFAULT;
    bits = 0;
    if (text) cube_status_free(cube__option_parse(id, text, &bits));
    kept = text;
  }
  atomic_store(&s->bits, bits);
  atomic_store(&s->text, kept);
  atomic_store(&s->source, (int)source);
}

static void cube__opt_store_default_locked(cube__option_id_t id) {
  const char* dflt = cube__opt_desc[id].dflt;
  uint64_t bits = 0;
  /* The table's defaults parse (tests/unit/test_options.c checks every one). */
  if (dflt) cube_status_free(cube__option_parse(id, dflt, &bits));
  atomic_store(&cube__opt_state[id].bits, bits);
  atomic_store(&cube__opt_state[id].text, dflt);
  atomic_store(&cube__opt_state[id].source, (int)CUBE_OPTION_SOURCE_DEFAULT);
}

/* The environment's value of |id|, or its default when unset or refused
 * (then the error is kept for cube__options_check). */
static void cube__opt_from_env_locked(cube__option_id_t id) {
  const char* v = getenv(cube__opt_desc[id].name);
  cube__opt_error_set_locked(id, CUBE_OK);
  if (!v || !*v) {
    cube__opt_store_default_locked(id);
    return;
  }
  uint64_t bits = 0;
  cube_status_t st = cube__option_parse(id, v, &bits);
  if (st) {
    cube__opt_store_default_locked(id);
    cube__opt_error_set_locked(id, st);
    return;
  }
  cube__opt_store_locked(id, v, bits, CUBE_OPTION_SOURCE_ENVIRONMENT);
}

static void cube__opt_resolve_locked(void) {
  if (atomic_load(&cube__opt_resolved)) return;
  for (int i = 0; i < CUBE__OPT_COUNT; ++i) {
    cube__opt_state_t* s = &cube__opt_state[i];
    if (atomic_load(&s->source) == CUBE_OPTION_SOURCE_API) continue;
    /* A ONCE option already taken keeps the value it was taken with. */
    if (cube__opt_desc[i].when == CUBE_OPTION_ONCE && atomic_load(&s->read)) continue;
    cube__opt_from_env_locked((cube__option_id_t)i);
  }
  atomic_store_explicit(&cube__opt_resolved, true, memory_order_release);
}

static void cube__opt_ready(void) {
  if (atomic_load_explicit(&cube__opt_resolved, memory_order_acquire)) return;
  cube__opt_desc_ready();
  pthread_mutex_lock(&cube__opt_lock);
  cube__opt_resolve_locked();
  pthread_mutex_unlock(&cube__opt_lock);
}

void cube__options_reset(void) {
  pthread_mutex_lock(&cube__opt_lock);
  atomic_store(&cube__opt_resolved, false);
  for (int i = 0; i < CUBE__OPT_COUNT; ++i)
    if (cube__opt_desc[i].when != CUBE_OPTION_ONCE) atomic_store(&cube__opt_state[i].read, false);
  /* Texts no option holds any more (no call runs during cube_shutdown). */
  cube__opt_text_t** link = &cube__opt_texts;
  while (*link) {
    cube__opt_text_t* t = *link;
    bool held = false;
    for (int i = 0; i < CUBE__OPT_COUNT && !held; ++i)
      held = atomic_load(&cube__opt_state[i].text) == t->text;
    if (held) {
      link = &t->next;
    } else {
      *link = t->next;
      free(t);
    }
  }
  pthread_mutex_unlock(&cube__opt_lock);
}

//===----------------------------------------------------------------------===//
// Reads
//===----------------------------------------------------------------------===//

/* The runtime took the value (an AT_START or ONCE option can no longer be
 * set). Stored once: reads on hot paths do not write a shared line. */
static void cube__opt_mark_read(cube__option_id_t id) {
  if (!atomic_load_explicit(&cube__opt_state[id].read, memory_order_relaxed))
    atomic_store_explicit(&cube__opt_state[id].read, true, memory_order_relaxed);
}

static uint64_t cube__opt_bits(cube__option_id_t id, cube_option_type_t type) {
  if ((unsigned)id >= CUBE__OPT_COUNT || cube__opt_desc[id].type != type) return 0;
  cube__opt_ready();
  cube__opt_mark_read(id);
  return atomic_load_explicit(&cube__opt_state[id].bits, memory_order_relaxed);
}

bool cube__option_bool(cube__option_id_t id) {
  return cube__opt_bits(id, CUBE_OPTION_TYPE_BOOL) != 0;
}
uint32_t cube__option_u32(cube__option_id_t id) {
  return (uint32_t)cube__opt_bits(id, CUBE_OPTION_TYPE_U32);
}
uint64_t cube__option_size(cube__option_id_t id) {
  return cube__opt_bits(id, CUBE_OPTION_TYPE_SIZE);
}
uint32_t cube__option_enum(cube__option_id_t id) {
  return (uint32_t)cube__opt_bits(id, CUBE_OPTION_TYPE_ENUM);
}
double cube__option_seconds(cube__option_id_t id) {
  uint64_t bits = cube__opt_bits(id, CUBE_OPTION_TYPE_SECONDS);
  double v;
  memcpy(&v, &bits, sizeof(v));
  return v;
}

const char* cube__option_str(cube__option_id_t id) {
  if ((unsigned)id >= CUBE__OPT_COUNT) return NULL;
  cube_option_type_t t = cube__opt_desc[id].type;
  if (t != CUBE_OPTION_TYPE_STRING && t != CUBE_OPTION_TYPE_PATH) return NULL;
  cube__opt_ready();
  cube__opt_mark_read(id);
  return atomic_load_explicit(&cube__opt_state[id].text, memory_order_acquire);
}

bool cube__option_has_value(cube__option_id_t id) {
  if ((unsigned)id >= CUBE__OPT_COUNT) return false;
  cube__opt_ready();
  cube__opt_mark_read(id);
  return atomic_load_explicit(&cube__opt_state[id].text, memory_order_acquire) != NULL;
}

cube_status_t cube__option_status(cube__option_id_t id) {
  if ((unsigned)id >= CUBE__OPT_COUNT) return CUBE_OK;
  cube__opt_ready();
  if (atomic_load(&cube__opt_refused) == 0) return CUBE_OK;
  cube_status_t st = CUBE_OK;
  pthread_mutex_lock(&cube__opt_lock);
  if (cube__opt_state[id].error) st = CUBE_INVALID("%s", cube__opt_state[id].error);
  pthread_mutex_unlock(&cube__opt_lock);
  return st;
}

cube_status_t cube__options_check(const char* fn) {
  cube__opt_ready();
  if (atomic_load(&cube__opt_refused) == 0) return CUBE_OK;
  char msg[2048];
  size_t at = 0;
  unsigned n = 0;
  msg[0] = '\0';
  pthread_mutex_lock(&cube__opt_lock);
  for (int i = 0; i < CUBE__OPT_COUNT; ++i) {
    const char* e = cube__opt_state[i].error;
    if (!e || at >= sizeof(msg)) continue;
    at += (size_t)snprintf(msg + at, sizeof(msg) - at, "%s%s", n ? "; " : "", e);
    ++n;
  }
  pthread_mutex_unlock(&cube__opt_lock);
  if (n == 0) return CUBE_OK; /* fixed meanwhile */
  return CUBE_INVALID("%s%s%s (from the environment: fix or unset the variable)", fn ? fn : "",
                      fn ? ": " : "", msg);
}

//===----------------------------------------------------------------------===//
// The public API
//===----------------------------------------------------------------------===//

cube_status_t cube_option_find(const char* name, cube_option_t* out_option) {
  if (!name) return CUBE_INVALID("cube_option_find: name is NULL");
  if (!out_option) return CUBE_INVALID("cube_option_find: out_option is NULL ('%s')", name);
  for (int i = 0; i < CUBE__OPT_COUNT; ++i) {
    const char* full = cube__opt_desc[i].name;
    if (strcasecmp(name, full) == 0 || strcasecmp(name, full + strlen("CUBE_")) == 0) {
      *out_option = (cube_option_t)i;
      return CUBE_OK;
    }
  }
  return cube__status_make(CUBE_STATUS_NOT_FOUND,
                           "no option is named '%s' (`cube info --options` lists them)", name);
}

const char* cube_option_name(cube_option_t option) {
  if ((unsigned)option >= CUBE__OPT_COUNT) return NULL;
  return cube__opt_desc[option].name;
}

cube_status_t cube_option_describe(cube_option_t option, cube_option_info_t* out_info) {
  if ((unsigned)option >= CUBE__OPT_COUNT)
    return CUBE_INVALID("cube_option_describe: option %d is out of range (0 to %d)", (int)option,
                        CUBE__OPT_COUNT - 1);
  if (!out_info)
    return CUBE_INVALID("cube_option_describe: out_info is NULL (%s)", cube__opt_desc[option].name);
  cube__opt_ready();
  const cube__option_desc_t* d = &cube__opt_desc[option];
  memset(out_info, 0, sizeof(*out_info));
  out_info->option = option;
  out_info->name = d->name;
  out_info->type = d->type;
  out_info->scope = d->scope;
  out_info->when = d->when;
  out_info->default_value = d->dflt;
  out_info->default_doc = d->dflt_doc;
  out_info->accepted = cube__opt_accepted[option];
  out_info->doc = d->doc;
  out_info->source = (cube_option_source_t)atomic_load(&cube__opt_state[option].source);
  pthread_mutex_lock(&cube__opt_lock);
  out_info->rejected = cube__opt_state[option].error != NULL;
  pthread_mutex_unlock(&cube__opt_lock);
  return CUBE_OK;
}

cube_status_t cube_option_get(const char* name, char* buf, size_t size,
                              cube_option_source_t* out_source) {
  if (!name) return CUBE_INVALID("cube_option_get: name is NULL");
  if (!buf || size == 0)
    return CUBE_INVALID("cube_option_get: buf is NULL or size is 0 (%s)", name);
  cube_option_t id;
  cube_status_t st = cube_option_find(name, &id);
  if (st) return cube__status_annotate(st, "cube_option_get");
  cube__opt_ready();
  cube_option_source_t source = (cube_option_source_t)atomic_load(&cube__opt_state[id].source);
  if (out_source) *out_source = source;
  const char* text = atomic_load_explicit(&cube__opt_state[id].text, memory_order_acquire);
  size_t n = text ? strlen(text) : 0;
  if (n >= size)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "cube_option_get: %s holds %zu bytes; buf has room for %zu",
                             cube__opt_desc[id].name, n, size - 1);
  memcpy(buf, text ? text : "", n + 1);
  return CUBE_OK;
}

/* Sets |id| from |text| (NULL: back to the environment or the default). */
static cube_status_t cube__opt_set(const char* fn, cube__option_id_t id, const char* text) {
  const cube__option_desc_t* d = &cube__opt_desc[id];
  cube__opt_desc_ready();
  if (d->scope == CUBE_OPTION_SCOPE_DEVICE)
    return CUBE_INVALID("%s: %s is a per-device option: give it to cube_client_init (in "
                        "cube_server_options_t or the backend's parameters), or set it in the "
                        "environment before the device is created",
                        fn, d->name);
  uint64_t bits = 0;
  if (text) {
    cube_status_t st = cube__option_parse(id, text, &bits);
    if (st) return cube__status_annotate(st, "%s", fn);
  }
  pthread_mutex_lock(&cube__opt_lock);
  cube__opt_resolve_locked();
  cube_status_t st = CUBE_OK;
  if (atomic_load(&cube__opt_state[id].read) && d->when == CUBE_OPTION_AT_START)
    st = cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                           "%s: %s was read already (the runtime started); set it before the "
                           "first use, or after cube_shutdown",
                           fn, d->name);
  else if (atomic_load(&cube__opt_state[id].read) && d->when == CUBE_OPTION_ONCE)
    st = cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                           "%s: %s is read once per process and was read already; set it "
                           "before the first use",
                           fn, d->name);
  if (!st) {
    if (text) {
      cube__opt_error_set_locked(id, CUBE_OK);
      cube__opt_store_locked(id, text, bits, CUBE_OPTION_SOURCE_API);
    } else {
      atomic_store(&cube__opt_state[id].source, (int)CUBE_OPTION_SOURCE_DEFAULT);
      cube__opt_from_env_locked(id);
    }
  }
  pthread_mutex_unlock(&cube__opt_lock);
  return st;
}

cube_status_t cube_option_set(const char* name, const char* text) {
  if (!name) return CUBE_INVALID("cube_option_set: name is NULL");
  cube_option_t id;
  cube_status_t st = cube_option_find(name, &id);
  if (st) return cube__status_annotate(st, "cube_option_set");
  return cube__opt_set("cube_option_set", (cube__option_id_t)id, text);
}

static cube_status_t cube__opt_typed(const char* fn, cube_option_t option, bool seconds) {
  if ((unsigned)option >= CUBE__OPT_COUNT)
    return CUBE_INVALID("%s: option %d is out of range (0 to %d)", fn, (int)option,
                        CUBE__OPT_COUNT - 1);
  cube_option_type_t t = cube__opt_desc[option].type;
  bool is_seconds = t == CUBE_OPTION_TYPE_SECONDS;
  bool is_int = t == CUBE_OPTION_TYPE_BOOL || t == CUBE_OPTION_TYPE_U32 ||
                t == CUBE_OPTION_TYPE_SIZE || t == CUBE_OPTION_TYPE_ENUM;
  if (seconds ? !is_seconds : !is_int)
    return CUBE_INVALID("%s: %s is %s; use %s", fn, cube__opt_desc[option].name,
                        is_seconds ? "a number of seconds"
                        : is_int   ? "an integer option"
                                   : "text",
                        is_seconds ? "the _double functions"
                        : is_int   ? "the _u64 functions"
                                   : "cube_option_get/cube_option_set");
  return CUBE_OK;
}

static cube_status_t cube__opt_get_bits(const char* fn, cube_option_t option, bool seconds,
                                        uint64_t* out_bits) {
  CUBE_RETURN_IF_ERROR(cube__opt_typed(fn, option, seconds));
  cube__opt_ready();
  if (!atomic_load_explicit(&cube__opt_state[option].text, memory_order_acquire))
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "%s: %s has no value (its default: %s)", fn,
                             cube__opt_desc[option].name, cube__opt_desc[option].dflt_doc);
  *out_bits = atomic_load(&cube__opt_state[option].bits);
  return CUBE_OK;
}

cube_status_t cube_option_get_u64(cube_option_t option, uint64_t* out_value) {
  if (!out_value) return CUBE_INVALID("cube_option_get_u64: out_value is NULL");
  return cube__opt_get_bits("cube_option_get_u64", option, false, out_value);
}

cube_status_t cube_option_get_double(cube_option_t option, double* out_value) {
  if (!out_value) return CUBE_INVALID("cube_option_get_double: out_value is NULL");
  uint64_t bits = 0;
  CUBE_RETURN_IF_ERROR(cube__opt_get_bits("cube_option_get_double", option, true, &bits));
  memcpy(out_value, &bits, sizeof(*out_value));
  return CUBE_OK;
}

cube_status_t cube_option_set_u64(cube_option_t option, uint64_t value) {
  CUBE_RETURN_IF_ERROR(cube__opt_typed("cube_option_set_u64", option, false));
  cube__opt_desc_ready();
  char text[32];
  if (cube__opt_desc[option].type == CUBE_OPTION_TYPE_ENUM) {
    const cube__option_words_t* w = &cube__opt_words[option];
    if (value >= w->canonical)
      return CUBE_INVALID("cube_option_set_u64: %s: %" PRIu64 " is not a word index (0 to %u: %s)",
                          cube__opt_desc[option].name, value, w->canonical - 1,
                          cube__opt_accepted[option]);
    snprintf(text, sizeof(text), "%s", w->word[value]);
  } else {
    snprintf(text, sizeof(text), "%" PRIu64, value);
  }
  return cube__opt_set("cube_option_set_u64", (cube__option_id_t)option, text);
}

cube_status_t cube_option_set_double(cube_option_t option, double value) {
  CUBE_RETURN_IF_ERROR(cube__opt_typed("cube_option_set_double", option, true));
  char text[48];
  snprintf(text, sizeof(text), "%.17g", value);
  return cube__opt_set("cube_option_set_double", (cube__option_id_t)option, text);
}

/* No "cube_options_check: " prefix: the message is about the variables. */
cube_status_t cube_options_check(void) { return cube__options_check(NULL); }
