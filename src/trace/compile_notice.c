/* Compile notices (CUBE_COMPILE_NOTICE): a compile that runs longer than the
 * notice time is logged when it passes it ("compiling kernel ...") and when
 * it ends ("compiled kernel ... in <t>"), at every profile level, so that a
 * program that seems to hang on its first launch says why. A watcher thread,
 * started by the first compile, sleeps until the earliest compile in progress
 * reaches the notice time. Every compile also becomes a trace record. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/options.h"
#include "platform/platform.h"
#include "platform/private_file.h"
#include "trace/trace.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond;
static cube__compile_watch_t* g_head; /* compiles in progress */
static bool g_running, g_stop;
static pthread_t g_thread;

void cube__log_line(const char* fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = (size_t)n < sizeof(line) - 1 ? (size_t)n : sizeof(line) - 2;
  line[len++] = '\n';
  const char* path = cube__option_str(CUBE__OPT_LOG_FILE);
  int fd = 2;
  if (path) {
    char why[160];
    fd = cube__file_open_append_private(path, why, sizeof(why));
    if (fd < 0) fd = 2;
  }
  ssize_t w = write(fd, line, len);
  (void)w;
  if (fd != 2) close(fd);
}

static double cube__notice_seconds(void) { return cube__option_seconds(CUBE__OPT_COMPILE_NOTICE); }

static void* cube__notice_main(void* arg) {
  (void)arg;
  pthread_mutex_lock(&g_lock);
  while (!g_stop) {
    uint64_t limit = (uint64_t)(cube__notice_seconds() * 1e9);
    uint64_t now = cube__now_ns(), next = UINT64_MAX;
    for (cube__compile_watch_t* w = g_head; w; w = w->next) {
      if (w->announced) continue;
      if (now - w->start_ns >= limit) {
        w->announced = true;
        cube__log_line("cube: compiling kernel '%s' for %s (running for %.1f s)", w->kernel,
                       w->where, (double)(now - w->start_ns) / 1e9);
      } else if (w->start_ns + limit < next) {
        next = w->start_ns + limit;
      }
    }
    if (next == UINT64_MAX) {
      pthread_cond_wait(&g_cond, &g_lock);
    } else {
      struct timespec ts;
      clock_gettime(CLOCK_MONOTONIC, &ts);
      uint64_t wait = next - now;
      uint64_t ns = (uint64_t)ts.tv_nsec + wait % 1000000000ull;
      ts.tv_sec += (time_t)(wait / 1000000000ull + ns / 1000000000ull);
      ts.tv_nsec = (long)(ns % 1000000000ull);
      pthread_cond_timedwait(&g_cond, &g_lock, &ts);
    }
  }
  pthread_mutex_unlock(&g_lock);
  return NULL;
}

static void cube__notice_cond_init(void) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&g_cond, &a);
  pthread_condattr_destroy(&a);
}

void cube__compile_watch_begin(cube__compile_watch_t* w, const char* kernel, const char* where) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, cube__notice_cond_init);
  memset(w, 0, sizeof(*w));
  cube__trace_copy_name(w->kernel, sizeof(w->kernel), kernel ? kernel : "?");
  snprintf(w->where, sizeof(w->where), "%s", where ? where : "?");
  w->start_ns = cube__now_ns();
  pthread_mutex_lock(&g_lock);
  w->next = g_head;
  if (g_head) g_head->prev = w;
  g_head = w;
  if (!g_running) {
    g_stop = false;
    /* Without a watcher (no thread to spare) only the end line is written. */
    g_running = pthread_create(&g_thread, NULL, cube__notice_main, NULL) == 0;
  } else {
    pthread_cond_signal(&g_cond);
  }
  pthread_mutex_unlock(&g_lock);
}

uint64_t cube__compile_watch_end(cube__compile_watch_t* w, bool failed) {
  uint64_t end = cube__now_ns();
  uint64_t ns = end - w->start_ns;
  pthread_mutex_lock(&g_lock);
  if (w->prev) w->prev->next = w->next;
  else g_head = w->next;
  if (w->next) w->next->prev = w->prev;
  bool announced = w->announced;
  pthread_mutex_unlock(&g_lock);
  if (announced || (double)ns >= cube__notice_seconds() * 1e9)
    cube__log_line("cube: compiled kernel '%s' for %s in %.2f s%s", w->kernel, w->where,
                   (double)ns / 1e9, failed ? " (failed)" : "");
  if (cube__trace_on()) {
    cube__trace_record_t r;
    memset(&r, 0, sizeof(r));
    r.ts_ns = w->start_ns;
    r.dur_ns = ns;
    r.pid = CUBE__TRACE_HOST_PID;
    r.tid = cube__trace_thread_id();
    r.kind = CUBE__TRACE_COMPILE;
    r.a[0] = failed;
    cube__trace_prefix_name(r.name, sizeof(r.name), "compile ", w->kernel);
    snprintf(r.detail, sizeof(r.detail), "%s", w->where);
    cube__trace_emit(&r);
  }
  return ns;
}

void cube__compile_watch_shutdown(void) {
  pthread_mutex_lock(&g_lock);
  bool running = g_running;
  g_stop = true;
  g_running = false;
  if (running) pthread_cond_signal(&g_cond);
  pthread_mutex_unlock(&g_lock);
  if (running) pthread_join(g_thread, NULL);
}
