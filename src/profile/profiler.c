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
  pthread_mutex_init(&p->log_lock, NULL);
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
  for (cube__log_line_t* l = p->queued; l;) { /* none: deliverers return only once it is empty */
    cube__log_line_t* next = l->next;
    free(l);
    l = next;
  }
  pthread_mutex_destroy(&p->lock);
  pthread_mutex_destroy(&p->log_lock);
  memset(p, 0, sizeof(*p));
}

/* Queues |n| lines behind the thread that is delivering (log_lock held). */
static void cube__log_queue_locked(cube__profiler_t* p, const char* const* lines, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    size_t len = strlen(lines[i]);
    cube__log_line_t* l =
        p->queued_count < CUBE__LOG_QUEUE_MAX ? malloc(sizeof(*l) + len + 1) : NULL;
    if (!l) {
      p->dropped++;
      continue;
    }
    memcpy(l->text, lines[i], len + 1);
    l->next = NULL;
    if (p->queued_tail)
      p->queued_tail->next = l;
    else
      p->queued = l;
    p->queued_tail = l;
    p->queued_count++;
  }
}

/* Writes |n| lines together: no other line of this server comes between
 * them. To the file (or stderr) under log_lock; to log_fn under no lock
 * (profiler.h). */
static void cube__profiler_emit(cube__profiler_t* p, const char* const* lines, size_t n) {
  pthread_mutex_lock(&p->log_lock);
  if (!p->log_fn) {
    FILE* f = p->file ? p->file : stderr;
    for (size_t i = 0; i < n; ++i) {
      fputs(lines[i], f);
      fputc('\n', f);
    }
    fflush(f);
    pthread_mutex_unlock(&p->log_lock);
    return;
  }
  if (p->delivering) { /* another thread, or this one from inside the callback */
    cube__log_queue_locked(p, lines, n);
    pthread_mutex_unlock(&p->log_lock);
    return;
  }
  p->delivering = true;
  pthread_mutex_unlock(&p->log_lock);
  for (size_t i = 0; i < n; ++i) p->log_fn(p->log_user, lines[i]);
  for (;;) { /* the lines others left meanwhile */
    pthread_mutex_lock(&p->log_lock);
    cube__log_line_t* l = p->queued;
    uint64_t dropped = 0;
    if (l) {
      p->queued = l->next;
      if (!p->queued) p->queued_tail = NULL;
      p->queued_count--;
    } else {
      dropped = p->dropped;
      p->dropped = 0;
      if (!dropped) p->delivering = false;
    }
    pthread_mutex_unlock(&p->log_lock);
    if (l) {
      p->log_fn(p->log_user, l->text);
      free(l);
    } else if (dropped) {
      char note[128];
      snprintf(note, sizeof(note),
               "cube: %llu log lines dropped (%d were waiting for the log callback)",
               (unsigned long long)dropped, CUBE__LOG_QUEUE_MAX);
      p->log_fn(p->log_user, note);
    } else {
      return;
    }
  }
}

void cube__profiler_log(cube__profiler_t* p, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  const char* line = buf;
  cube__profiler_emit(p, &line, 1);
}

void cube__profiler_record(cube__profiler_t* p, cube_profile_row_kind_t kind, const char* name,
                           uint64_t ns) {
  pthread_mutex_lock(&p->lock);
  size_t i = 0;
  for (; i < p->count; ++i)
    if (p->entries[i].kind == kind && strcmp(p->entries[i].name, name) == 0) break;
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
    p->entries[i].kind = kind;
    p->entries[i].total_ns = 0;
    p->entries[i].count = 0;
    p->entries[i].min_ns = UINT64_MAX;
    p->entries[i].max_ns = 0;
    p->count++;
  }
  cube__profile_entry_t* e = &p->entries[i];
  e->total_ns += ns;
  e->count += 1;
  if (ns < e->min_ns) e->min_ns = ns;
  if (ns > e->max_ns) e->max_ns = ns;
  pthread_mutex_unlock(&p->lock);
}

static bool cube__row_is_device(cube_profile_row_kind_t k) {
  return k <= CUBE_PROFILE_ROW_COLLECTIVE;
}

static int cube__row_cmp(const void* a, const void* b) {
  const cube_profile_row_t* x = a;
  const cube_profile_row_t* y = b;
  bool dx = cube__row_is_device(x->kind), dy = cube__row_is_device(y->kind);
  if (dx != dy) return dx ? -1 : 1; /* device work first */
  if (!dx && x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
  if (x->total_ns != y->total_ns) return x->total_ns > y->total_ns ? -1 : 1;
  return strcmp(x->name, y->name);
}

static void cube__profiler_clear_locked(cube__profiler_t* p) {
  for (size_t i = 0; i < p->count; ++i) free(p->entries[i].name);
  p->count = 0;
}

bool cube__profiler_snapshot(cube__profiler_t* p, bool reset, cube_profile_summary_t* out) {
  memset(out, 0, sizeof(*out));
  out->struct_size = sizeof(*out);
  pthread_mutex_lock(&p->lock);
  if (p->count) {
    out->rows = calloc(p->count, sizeof(*out->rows));
    if (!out->rows) {
      pthread_mutex_unlock(&p->lock);
      return false;
    }
  }
  out->row_count = p->count;
  for (size_t i = 0; i < p->count; ++i) {
    const cube__profile_entry_t* e = &p->entries[i];
    cube_profile_row_t* r = &out->rows[i];
    snprintf(r->name, sizeof(r->name), "%s", e->name);
    r->kind = e->kind;
    r->count = e->count;
    r->total_ns = e->total_ns;
    r->min_ns = e->count ? e->min_ns : 0;
    r->max_ns = e->max_ns;
    if (cube__row_is_device(e->kind)) {
      out->device_ns += e->total_ns;
      out->device_count += e->count;
    } else if (e->kind == CUBE_PROFILE_ROW_REGION) {
      out->region_ns += e->total_ns;
      out->region_count += e->count;
    } else {
      out->compile_ns += e->total_ns;
      out->compile_count += e->count;
    }
  }
  if (reset) cube__profiler_clear_locked(p);
  pthread_mutex_unlock(&p->lock);
  if (out->row_count) qsort(out->rows, out->row_count, sizeof(*out->rows), cube__row_cmp);
  return true;
}

void cube_profile_summary_deinitialize(cube_profile_summary_t* summary) {
  if (!summary) return;
  free(summary->rows);
  size_t size = summary->struct_size;
  memset(summary, 0, sizeof(*summary));
  summary->struct_size = size;
}

const char* cube_profile_row_kind_name(cube_profile_row_kind_t kind) {
  switch (kind) {
    case CUBE_PROFILE_ROW_KERNEL: return "kernel";
    case CUBE_PROFILE_ROW_TRANSFER: return "transfer";
    case CUBE_PROFILE_ROW_GRAPH: return "graph";
    case CUBE_PROFILE_ROW_COLLECTIVE: return "collective";
    case CUBE_PROFILE_ROW_COMPILE: return "compile";
    case CUBE_PROFILE_ROW_CACHE_LOAD: return "cache load";
    case CUBE_PROFILE_ROW_REGION: return "region";
  }
  return "unknown";
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

void cube__profiler_summary(cube__profiler_t* p) {
  cube_profile_summary_t sum;
  if (!cube__profiler_snapshot(p, true, &sum) || sum.row_count == 0) {
    cube_profile_summary_deinitialize(&sum);
    return;
  }
  size_t width = 5;
  for (size_t i = 0; i < sum.row_count; ++i) {
    size_t l = strlen(sum.rows[i].name);
    if (l > width) width = l;
  }
  if (width > 60) width = 60;
  /* The table's lines, written together (a header, the rows, a Total). */
  enum { LINE = 320 };
  size_t n = 0;
  char* text = malloc((sum.row_count + 2) * LINE);
  const char** lines = malloc((sum.row_count + 2) * sizeof(*lines));
  if (!text || !lines) {
    free(text);
    free(lines);
    cube_profile_summary_deinitialize(&sum);
    return;
  }
  char d[32];
#define CUBE__ROW() (lines[n] = text + n * LINE, text + (n++) * LINE)
  snprintf(CUBE__ROW(), LINE, "| %-*s | %-10s | %14s | %12s | %7s |", (int)width, "Name", "Kind",
           "Duration", "Num Computed", "Ratio");
  bool total_done = false;
  for (size_t i = 0; i <= sum.row_count; ++i) {
    const cube_profile_row_t* r = i < sum.row_count ? &sum.rows[i] : NULL;
    if (!total_done && (!r || !cube__row_is_device(r->kind))) {
      /* Device work ends here: its total, each operation counted once. */
      total_done = true;
      if (sum.device_count)
        snprintf(CUBE__ROW(), LINE, "| %-*s | %-10s | %14s | %12llu | %6.2f%% |", (int)width,
                 "Total", "", cube__format_duration(sum.device_ns, d, sizeof(d)),
                 (unsigned long long)sum.device_count, 100.0);
    }
    if (!r) break;
    char ratio[16];
    if (cube__row_is_device(r->kind))
      snprintf(ratio, sizeof(ratio), "%6.2f%%",
               sum.device_ns ? 100.0 * (double)r->total_ns / (double)sum.device_ns : 0.0);
    else
      snprintf(ratio, sizeof(ratio), "%7s", "-");
    snprintf(CUBE__ROW(), LINE, "| %-*.*s | %-10s | %14s | %12llu | %s |", (int)width, (int)width,
             r->name, cube_profile_row_kind_name(r->kind),
             cube__format_duration(r->total_ns, d, sizeof(d)), (unsigned long long)r->count,
             ratio);
  }
#undef CUBE__ROW
  cube__profiler_emit(p, lines, n);
  free(lines);
  free(text);
  cube_profile_summary_deinitialize(&sum);
}
