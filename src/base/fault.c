/* Fault injection: see fault.h. */
#include "base/fault.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/options.h"

atomic_uint cube__fault_mode = 0; /* 0 uninitialised, 1 off, 2 on */

static atomic_uint_fast64_t cube__fault_calls_[CUBE__FAULT_SITE_COUNT];
static atomic_uint_fast64_t cube__fault_nth_[CUBE__FAULT_SITE_COUNT];
static atomic_uint_fast64_t cube__fault_count_[CUBE__FAULT_SITE_COUNT];
static atomic_uint_fast64_t cube__fault_injected_[CUBE__FAULT_SITE_COUNT];

/* Site names: the two sites that are not backend slots, then
 * "<backend>_<slot>" for every backend and fallible slot. */
#define CUBE__FAULT_NAME_B(id, name) #name,
static const char* const cube__fault_backend_names[CUBE__FAULT_BACKEND_COUNT] = {
    CUBE__FAULT_BACKENDS(CUBE__FAULT_NAME_B)};
static const char* const cube__fault_slot_names[CUBE__FAULT_SLOT_COUNT] = {
    CUBE__FAULT_BACKEND_SLOTS(CUBE__FAULT_NAME_B)};
#undef CUBE__FAULT_NAME_B

static char cube__fault_names[CUBE__FAULT_SITE_COUNT][48];
static pthread_once_t cube__fault_names_once = PTHREAD_ONCE_INIT;

static void cube__fault_names_init(void) {
  snprintf(cube__fault_names[CUBE__FAULT_KERNEL_COMPILE], sizeof(cube__fault_names[0]),
           "kernel_compile");
  snprintf(cube__fault_names[CUBE__FAULT_CACHE_STORE], sizeof(cube__fault_names[0]),
           "cache_store");
  for (unsigned b = 0; b < CUBE__FAULT_BACKEND_COUNT; ++b)
    for (unsigned k = 0; k < CUBE__FAULT_SLOT_COUNT; ++k)
      snprintf(cube__fault_names[cube__fault_backend_site(b, k)], sizeof(cube__fault_names[0]),
               "%s_%s", cube__fault_backend_names[b], cube__fault_slot_names[k]);
}

const char* cube__fault_site_name(cube__fault_site_t site) {
  if ((unsigned)site >= CUBE__FAULT_SITE_COUNT) return "?";
  pthread_once(&cube__fault_names_once, cube__fault_names_init);
  return cube__fault_names[site];
}

bool cube__fault_site_parse(const char* name, size_t len, cube__fault_site_t* out) {
  pthread_once(&cube__fault_names_once, cube__fault_names_init);
  for (unsigned i = 0; i < CUBE__FAULT_SITE_COUNT; ++i) {
    if (strlen(cube__fault_names[i]) == len && strncasecmp(cube__fault_names[i], name, len) == 0) {
      *out = (cube__fault_site_t)i;
      return true;
    }
  }
  return false;
}

static void cube__fault_arm(cube__fault_site_t site, uint64_t nth, uint64_t count) {
  /* Disarm first so that a concurrent hit never sees the new counter with
   * the old target. */
  atomic_store_explicit(&cube__fault_nth_[site], 0, memory_order_relaxed);
  atomic_store_explicit(&cube__fault_calls_[site], 0, memory_order_relaxed);
  atomic_store_explicit(&cube__fault_injected_[site], 0, memory_order_relaxed);
  atomic_store_explicit(&cube__fault_count_[site], count, memory_order_relaxed);
  atomic_store_explicit(&cube__fault_nth_[site], count ? nth : 0, memory_order_relaxed);
}

/* Parses one "<site>:<n>[:<count>]" of |len| bytes and, when |arm|, arms
 * it; false if malformed. */
static bool cube__fault_parse_one(const char* s, size_t len, bool arm) {
  char buf[128];
  if (len == 0 || len >= sizeof(buf)) return false;
  memcpy(buf, s, len);
  buf[len] = '\0';
  char* colon = strchr(buf, ':');
  if (!colon) return false;
  cube__fault_site_t site;
  if (!cube__fault_site_parse(buf, (size_t)(colon - buf), &site)) return false;
  char* p = colon + 1;
  char* end = NULL;
  if (*p < '0' || *p > '9') return false;
  errno = 0;
  unsigned long long nth = strtoull(p, &end, 10);
  if (errno || nth == 0) return false;
  unsigned long long count = 1;
  if (*end == ':') {
    p = end + 1;
    if (*p < '0' || *p > '9') return false;
    count = strtoull(p, &end, 10);
    if (errno) return false;
  }
  if (*end) return false;
  if (arm) cube__fault_arm(site, nth, count);
  return true;
}

cube_status_t cube__fault_spec_check(const char* text) {
  const char* p = text;
  for (;;) {
    size_t len = strcspn(p, ",");
    if (!cube__fault_parse_one(p, len, false))
      return CUBE_INVALID("'%.*s' is not <site>:<n>[:<count>] with n >= 1 and a site among "
                          "kernel_compile, cache_store and <backend>_<slot> (backend: cpu, "
                          "cuda, opencl, null; slot: device_create, alloc, host_alloc, "
                          "stream_create, write, read, launch, prepare, sync, event_record, "
                          "event_wait, event_sync, event_elapsed, ctl)",
                          (int)len, p);
    if (!p[len]) return CUBE_OK;
    p += len + 1;
  }
}

/* CUBE_FAULT, checked by the option table (a malformed value arms nothing
 * and is reported by the entry points: base/options.h). */
static void cube__fault_init_env(void) {
  const char* v = cube__option_str(CUBE__OPT_FAULT);
  unsigned mode = 1;
  if (v && *v) {
    const char* p = v;
    for (;;) {
      size_t len = strcspn(p, ",");
      if (cube__fault_parse_one(p, len, true)) mode = 2;
      if (!p[len]) break;
      p += len + 1;
    }
  }
  unsigned expected = 0;
  atomic_compare_exchange_strong(&cube__fault_mode, &expected, mode);
}

static pthread_once_t cube__fault_once = PTHREAD_ONCE_INIT;

static void cube__fault_init(void) { pthread_once(&cube__fault_once, cube__fault_init_env); }

bool cube__fault_hit_slow(cube__fault_site_t site) {
  unsigned mode = atomic_load_explicit(&cube__fault_mode, memory_order_relaxed);
  if (mode == 0) {
    cube__fault_init();
    mode = atomic_load_explicit(&cube__fault_mode, memory_order_relaxed);
  }
  if (mode != 2 || (unsigned)site >= CUBE__FAULT_SITE_COUNT) return false;
  uint64_t call = atomic_fetch_add_explicit(&cube__fault_calls_[site], 1, memory_order_relaxed) + 1;
  uint64_t nth = atomic_load_explicit(&cube__fault_nth_[site], memory_order_relaxed);
  uint64_t count = atomic_load_explicit(&cube__fault_count_[site], memory_order_relaxed);
  if (nth == 0 || call < nth || call - nth >= count) return false;
  atomic_fetch_add_explicit(&cube__fault_injected_[site], 1, memory_order_relaxed);
  return true;
}

cube_status_t cube__fault_status(cube_status_code_t code, const char* fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  return cube__status_make(code, "%s (injected fault)", msg);
}

void cube__fault_set(cube__fault_site_t site, uint64_t nth, uint64_t count) {
  cube__fault_init();
  if ((unsigned)site >= CUBE__FAULT_SITE_COUNT) return;
  cube__fault_arm(site, nth, count);
  atomic_store_explicit(&cube__fault_mode, 2, memory_order_relaxed);
}

void cube__fault_reset(void) {
  cube__fault_init();
  for (unsigned i = 0; i < CUBE__FAULT_SITE_COUNT; ++i)
    cube__fault_arm((cube__fault_site_t)i, 0, 0);
  atomic_store_explicit(&cube__fault_mode, 2, memory_order_relaxed);
}

uint64_t cube__fault_calls(cube__fault_site_t site) {
  if ((unsigned)site >= CUBE__FAULT_SITE_COUNT) return 0;
  return atomic_load_explicit(&cube__fault_calls_[site], memory_order_relaxed);
}

uint64_t cube__fault_injected(cube__fault_site_t site) {
  if ((unsigned)site >= CUBE__FAULT_SITE_COUNT) return 0;
  return atomic_load_explicit(&cube__fault_injected_[site], memory_order_relaxed);
}
