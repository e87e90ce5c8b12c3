#include "base/status.h"

#include "base/abi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cube_status_s {
  cube_status_code_t code;
  size_t count;                 /* errors joined in this status */
  int is_static;                /* the fallback object: never freed */
  uint64_t oom_requested;
  cube_memory_report_t* oom_report; /* owned, may be NULL */
  char* message;
};

static char cube__oom_message[] = "out of memory while creating an error status";
static struct cube_status_s cube__status_oom_static = {
    CUBE_STATUS_OUT_OF_MEMORY, 1, 1, 0, NULL, cube__oom_message};

static const char* const cube__code_names[] = {
    "OK",          "INVALID_ARGUMENT", "NOT_FOUND",   "ALREADY_EXISTS",
    "OUT_OF_MEMORY", "FAILED_PRECONDITION", "UNAVAILABLE", "UNIMPLEMENTED",
    "COMPILATION_FAILED", "LAUNCH_FAILED", "DEADLINE_EXCEEDED", "OUT_OF_RANGE",
    "UNSUPPORTED", "ABORTED", "INTERNAL", "DATA_LOST", "DEVICE_LOST", "PEER_LOST"};
_Static_assert(sizeof(cube__code_names) / sizeof(cube__code_names[0]) == CUBE__STATUS_CODE_COUNT,
               "a name for every status code");

const char* cube_status_code_name(cube_status_code_t code) {
  if ((unsigned)code >= (unsigned)CUBE__STATUS_CODE_COUNT) return "UNKNOWN";
  return cube__code_names[code];
}

cube_status_code_t cube_status_code(cube_status_t s) { return s ? s->code : CUBE_STATUS_OK; }

const char* cube_status_message(cube_status_t s) {
  return (s && s->message) ? s->message : "";
}

size_t cube_status_count(cube_status_t s) { return s ? s->count : 0; }

void cube_status_free(cube_status_t s) {
  if (!s || s->is_static) return;
  free(s->oom_report);
  free(s->message);
  free(s);
}

cube_status_code_t cube_status_consume(cube_status_t s) {
  cube_status_code_t c = cube_status_code(s);
  cube_status_free(s);
  return c;
}

cube_status_t cube__status_makev(cube_status_code_t code, const char* fmt, va_list ap) {
  if (code == CUBE_STATUS_OK) return CUBE_OK;
  if (!fmt) fmt = "";
  struct cube_status_s* s = calloc(1, sizeof(*s));
  if (!s) return &cube__status_oom_static;
  s->code = code;
  s->count = 1;
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) n = 0;
  s->message = malloc((size_t)n + 1);
  if (!s->message) {
    free(s);
    return &cube__status_oom_static;
  }
  vsnprintf(s->message, (size_t)n + 1, fmt, ap);
  return s;
}

cube_status_t cube__status_make(cube_status_code_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cube_status_t s = cube__status_makev(code, fmt, ap);
  va_end(ap);
  return s;
}

static char* cube__vformat(const char* fmt, va_list ap);

/* The public constructor: the internal one, plus a check of |code|, which
 * comes from the program and so may be anything. */
cube_status_t cube_status_makev(cube_status_code_t code, const char* fmt, va_list args) {
  if (code == CUBE_STATUS_OK) return CUBE_OK;
  if ((unsigned)code >= (unsigned)CUBE__STATUS_CODE_COUNT) {
    char* msg = cube__vformat(fmt ? fmt : "", args);
    cube_status_t s = cube__status_make(CUBE_STATUS_INTERNAL,
                                        "cube_status_make: code %d is not a cube_status_code_t "
                                        "(message: %s)",
                                        (int)code, msg ? msg : "(no memory to format it)");
    free(msg);
    return s;
  }
  return cube__status_makev(code, fmt, args);
}

cube_status_t cube_status_make(cube_status_code_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cube_status_t s = cube_status_makev(code, fmt, ap);
  va_end(ap);
  return s;
}

cube_status_t cube__status_oom(uint64_t requested, const cube_memory_report_t* report,
                               const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cube_status_t s = cube__status_makev(CUBE_STATUS_OUT_OF_MEMORY, fmt, ap);
  va_end(ap);
  if (s->is_static) return s;
  s->oom_requested = requested;
  if (report) {
    s->oom_report = malloc(sizeof(*report));
    if (s->oom_report) memcpy(s->oom_report, report, sizeof(*report));
  }
  return s;
}

bool cube_status_oom_report(cube_status_t s, uint64_t* out_requested,
                            cube_memory_report_t* out_report) {
  if (!s || s->code != CUBE_STATUS_OUT_OF_MEMORY || s->is_static) return false;
  if (out_requested) *out_requested = s->oom_requested;
  if (out_report) {
    cube_memory_report_t none;
    memset(&none, 0, sizeof(none));
    /* A struct_size too small for the field itself leaves the report as it
     * was (this function has no status to say so). */
    cube_status_free(cube__struct_write("cube_status_oom_report", "out_report->struct_size",
                                        &cube__struct_memory_report, out_report,
                                        s->oom_report ? s->oom_report : &none));
  }
  return true;
}

cube_memory_report_t* cube__status_oom_report_mut(cube_status_t s) {
  return (s && !s->is_static) ? s->oom_report : NULL;
}

static void cube__status_set_message(struct cube_status_s* s, char* msg) {
  if (!msg) return; /* keep the old message rather than lose it */
  free(s->message);
  s->message = msg;
}

static char* cube__vformat(const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) return NULL;
  char* out = malloc((size_t)n + 1);
  if (out) vsnprintf(out, (size_t)n + 1, fmt, ap);
  return out;
}

cube_status_t cube__status_annotate(cube_status_t s, const char* fmt, ...) {
  if (!s || s->is_static) return s;
  va_list ap;
  va_start(ap, fmt);
  char* prefix = cube__vformat(fmt, ap);
  va_end(ap);
  if (!prefix) return s;
  size_t a = strlen(prefix), b = strlen(cube_status_message(s));
  char* msg = malloc(a + 2 + b + 1);
  if (msg) {
    memcpy(msg, prefix, a);
    memcpy(msg + a, ": ", 2);
    memcpy(msg + a + 2, cube_status_message(s), b + 1);
    cube__status_set_message(s, msg);
  }
  free(prefix);
  return s;
}

cube_status_t cube__status_clone(cube_status_t s) {
  if (!s) return NULL;
  if (s->is_static) return s;
  struct cube_status_s* c = calloc(1, sizeof(*c));
  if (!c) return &cube__status_oom_static;
  *c = *s;
  c->message = s->message ? strdup(s->message) : NULL;
  c->oom_report = NULL;
  if (s->oom_report) {
    c->oom_report = malloc(sizeof(*s->oom_report));
    if (c->oom_report) memcpy(c->oom_report, s->oom_report, sizeof(*s->oom_report));
  }
  if (s->message && !c->message) {
    free(c->oom_report);
    free(c);
    return &cube__status_oom_static;
  }
  return c;
}

cube_status_t cube__status_join(cube_status_t first, cube_status_t second) {
  if (!first) return second;
  if (!second) return first;
  if (first->is_static) {
    cube_status_free(second);
    return first;
  }
  size_t count = first->count + (second->is_static ? 1 : second->count);
  const char* m1 = cube_status_message(first);
  const char* m2 = cube_status_message(second);
  size_t need = strlen(m1) + strlen(m2) + 96;
  char* msg = malloc(need);
  if (msg) {
    if (first->count == 1)
      snprintf(msg, need, "%zu errors: [1] %s; [%zu] %s", count, m1, count, m2);
    else {
      /* first already reads "N errors: ..."; skip its head */
      const char* body = strstr(m1, ": ");
      body = body ? body + 2 : m1;
      snprintf(msg, need, "%zu errors: %s; [%zu] %s", count, body, count, m2);
    }
    cube__status_set_message(first, msg);
  }
  first->count = count;
  if (!first->oom_report && !second->is_static && second->oom_report &&
      first->code == CUBE_STATUS_OUT_OF_MEMORY) {
    first->oom_report = second->oom_report;
    first->oom_requested = second->oom_requested;
    second->oom_report = NULL;
  }
  cube_status_free(second);
  return first;
}
