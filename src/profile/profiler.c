#include "profile/profiler.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/options.h"
#include "base/status.h"
#include "platform/platform.h"
#include "platform/private_file.h"

cube_status_t cube__profiler_init(cube__profiler_t* p, cube_profile_level_t level,
                                  cube_log_fn log_fn, void* log_user) {
  memset(p, 0, sizeof(*p));
  pthread_mutex_init(&p->lock, NULL);
  p->level = level;
  const char* env;
  /* CUBE_PROFILE's words are cube_profile_level_t's, in order. */
  if (level == CUBE_PROFILE_NONE) {
    CUBE_RETURN_IF_ERROR(cube__option_status(CUBE__OPT_PROFILE));
    p->level = (cube_profile_level_t)cube__option_enum(CUBE__OPT_PROFILE);
  }
  p->log_fn = log_fn;
  p->log_user = log_user;
  if (!log_fn && (env = cube__option_str(CUBE__OPT_LOG_FILE)) != NULL) {
    /* Not through a link, and not into another user's file: a log named in
     * a shared directory (/tmp) cannot be planted (platform/private_file.h). */
    char why[160];
    int fd = cube__file_open_append_private(env, why, sizeof(why));
    p->file = fd >= 0 ? fdopen(fd, "a") : NULL;
    if (!p->file) {
      if (fd >= 0) {
        snprintf(why, sizeof(why), "fdopen: %s", strerror(errno));
        close(fd);
      }
      return cube__status_make(CUBE_STATUS_INVALID_ARGUMENT,
                               "CUBE_LOG_FILE: cannot open '%s' for appending: %s", env, why);
    }
  }
  return CUBE_OK;
}

void cube__profiler_deinit(cube__profiler_t* p) {
  for (size_t i = 0; i < p->count; ++i) free(p->entries[i].name);
  free(p->entries);
  if (p->file) fclose(p->file);
  pthread_mutex_destroy(&p->lock);
  memset(p, 0, sizeof(*p));
}

static void cube__profiler_emit_locked(cube__profiler_t* p, const char* line) {
  if (p->log_fn) {
    p->log_fn(p->log_user, line);
  } else {
    FILE* f = p->file ? p->file : stderr;
    fputs(line, f);
    fputc('\n', f);
    fflush(f);
  }
}

void cube__profiler_log(cube__profiler_t* p, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&p->lock);
  cube__profiler_emit_locked(p, buf);
  pthread_mutex_unlock(&p->lock);
}

void cube__profiler_record(cube__profiler_t* p, const char* name, uint64_t ns) {
  pthread_mutex_lock(&p->lock);
  size_t i = 0;
  for (; i < p->count; ++i)
    if (strcmp(p->entries[i].name, name) == 0) break;
  if (i == p->count) {
    if (p->count == p->capacity) {
      size_t cap = p->capacity ? p->capacity * 2 : 16;
      cube__profile_entry_t* e = realloc(p->entries, cap * sizeof(*e));
      if (!e) {
        pthread_mutex_unlock(&p->lock);
        return; /* dropping a measurement beats failing the launch */
      }
      p->entries = e;
      p->capacity = cap;
    }
    p->entries[i].name = strdup(name);
    if (!p->entries[i].name) {
      pthread_mutex_unlock(&p->lock);
      return;
    }
    p->entries[i].total_ns = 0;
    p->entries[i].count = 0;
    p->count++;
  }
  p->entries[i].total_ns += ns;
  p->entries[i].count += 1;
  pthread_mutex_unlock(&p->lock);
}

const char* cube__format_duration(uint64_t ns, char* buf, size_t size) {
  if (ns < 1000)
    snprintf(buf, size, "%llu ns", (unsigned long long)ns);
  else if (ns < 1000000)
    snprintf(buf, size, "%.3f us", ns / 1e3);
  else if (ns < 1000000000ull)
    snprintf(buf, size, "%.3f ms", ns / 1e6);
  else
    snprintf(buf, size, "%.3f s", ns / 1e9);
  return buf;
}

static int cube__entry_cmp(const void* a, const void* b) {
  const cube__profile_entry_t* x = a;
  const cube__profile_entry_t* y = b;
  if (x->total_ns != y->total_ns) return x->total_ns > y->total_ns ? -1 : 1;
  return strcmp(x->name, y->name);
}

void cube__profiler_summary(cube__profiler_t* p) {
  pthread_mutex_lock(&p->lock);
  if (p->count == 0) {
    pthread_mutex_unlock(&p->lock);
    return;
  }
  qsort(p->entries, p->count, sizeof(*p->entries), cube__entry_cmp);
  uint64_t total = 0, calls = 0;
  size_t width = 4;
  for (size_t i = 0; i < p->count; ++i) {
    total += p->entries[i].total_ns;
    calls += p->entries[i].count;
    size_t l = strlen(p->entries[i].name);
    if (l > width) width = l;
  }
  if (width > 60) width = 60;
  char line[256], d[32];
  snprintf(line, sizeof(line), "| %-*s | %14s | %12s | %7s |", (int)width, "Name", "Duration",
           "Num Computed", "Ratio");
  cube__profiler_emit_locked(p, line);
  for (size_t i = 0; i < p->count; ++i) {
    const cube__profile_entry_t* e = &p->entries[i];
    double ratio = total ? 100.0 * (double)e->total_ns / (double)total : 0.0;
    snprintf(line, sizeof(line), "| %-*.*s | %14s | %12llu | %6.2f%% |", (int)width, (int)width,
             e->name, cube__format_duration(e->total_ns, d, sizeof(d)),
             (unsigned long long)e->count, ratio);
    cube__profiler_emit_locked(p, line);
  }
  snprintf(line, sizeof(line), "| %-*s | %14s | %12llu | %6.2f%% |", (int)width, "Total",
           cube__format_duration(total, d, sizeof(d)), (unsigned long long)calls, 100.0);
  cube__profiler_emit_locked(p, line);
  for (size_t i = 0; i < p->count; ++i) free(p->entries[i].name);
  p->count = 0;
  pthread_mutex_unlock(&p->lock);
}
