/* The trace's ring, its sessions (cube_trace_start/stop, CUBE_TRACE) and the
 * user ranges (include/cube/trace.h). */
#include "trace/trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/options.h"
#include "base/status.h"
#include "platform/platform.h"
#include "platform/private_file.h"

atomic_bool cube__trace_recording;

/* docs/observability.md ("Bounded memory") gives the ring's cost from this
 * size: change both together. */
_Static_assert(sizeof(cube__trace_record_t) == 200, "a trace record is 200 bytes");

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static cube__trace_record_t* g_ring; /* g_capacity records; NULL while none records */
static uint64_t g_capacity;
static uint64_t g_written; /* records ever emitted in this session */
static int g_fd = -1;
static char g_path[4096];
/* Which trace records now: 1 for the process's first, one more at every
 * start (a range is recorded only into the trace it was opened in). */
static atomic_uint_fast64_t g_session;

uint64_t cube__trace_thread_id(void) {
  static _Thread_local uint64_t id;
  if (!id) id = (uint64_t)syscall(SYS_gettid);
  return id;
}

void cube__trace_emit(const cube__trace_record_t* r) {
  pthread_mutex_lock(&g_lock);
  if (g_ring) {
    g_ring[g_written % g_capacity] = *r;
    g_written++;
  }
  pthread_mutex_unlock(&g_lock);
}

void cube__trace_host(cube__trace_kind_t kind, const char* name, uint64_t ts_ns, uint64_t dur_ns,
                      uint64_t a0) {
  cube__trace_record_t r;
  memset(&r, 0, sizeof(r));
  r.ts_ns = ts_ns;
  r.dur_ns = dur_ns;
  r.pid = CUBE__TRACE_HOST_PID;
  r.tid = cube__trace_thread_id();
  r.kind = (uint32_t)kind;
  r.a[0] = a0;
  cube__trace_copy_name(r.name, sizeof(r.name), name); /* not inside a character */
  cube__trace_emit(&r);
}

/* "%p" in |pattern| replaced by the process id. */
static void cube__trace_expand(const char* pattern, char* out, size_t size) {
  size_t o = 0;
  for (const char* p = pattern; *p && o + 1 < size; ++p) {
    if (p[0] == '%' && p[1] == 'p') {
      int n = snprintf(out + o, size - o, "%ld", (long)getpid());
      o += n > 0 ? (size_t)n : 0;
      if (o >= size) o = size - 1;
      ++p;
    } else {
      out[o++] = *p;
    }
  }
  out[o] = 0;
}

static cube_status_t cube__trace_start_at(const char* fn, const char* path) {
  if (!path || !*path) return CUBE_INVALID("%s: path is NULL or empty", fn);
  /* A refused CUBE_TRACE_RECORDS is said, not replaced by the default ring
   * (whose drops the program would then not expect). */
  cube_status_t bad = cube__option_status(CUBE__OPT_TRACE_RECORDS);
  if (bad) {
    cube_status_t s = CUBE_INVALID("%s: %s (from the environment: fix or unset the variable)", fn,
                                   cube_status_message(bad));
    cube_status_free(bad);
    return s;
  }
  uint64_t cap = cube__option_u32(CUBE__OPT_TRACE_RECORDS);
  pthread_mutex_lock(&g_lock);
  if (g_ring) {
    cube_status_t s = cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                                        "%s: a trace is already recording (to '%s'); stop it first",
                                        fn, g_path);
    pthread_mutex_unlock(&g_lock);
    return s;
  }
  /* Every page touched now (a write through a volatile pointer: a compiler
   * turns malloc + memset(0) into calloc, whose zero pages are mapped
   * lazily): the runner recording a launch then never faults a page in. */
  cube__trace_record_t* ring = malloc(cap * sizeof(*ring));
  if (ring)
    for (size_t b = 0; b < cap * sizeof(*ring); b += 4096) ((volatile char*)ring)[b] = 0;
  if (!ring) {
    pthread_mutex_unlock(&g_lock);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "%s: no host memory for a ring of %llu records (CUBE_TRACE_RECORDS)",
                             fn, (unsigned long long)cap);
  }
  int fd = cube__file_create_private(path);
  if (fd < 0) {
    int e = errno;
    free(ring);
    pthread_mutex_unlock(&g_lock);
    if (e == EEXIST)
      return cube__status_make(CUBE_STATUS_ALREADY_EXISTS,
                               "%s: '%s' exists (a trace is never written over a file or through "
                               "a link): choose another path",
                               fn, path);
    return CUBE_INVALID("%s: cannot create '%s': %s", fn, path, strerror(e));
  }
  g_ring = ring;
  g_capacity = cap;
  g_written = 0;
  g_fd = fd;
  snprintf(g_path, sizeof(g_path), "%s", path);
  atomic_fetch_add_explicit(&g_session, 1, memory_order_relaxed);
  atomic_store_explicit(&cube__trace_recording, true, memory_order_release);
  pthread_mutex_unlock(&g_lock);
  return CUBE_OK;
}

cube_status_t cube_trace_start(const char* path) {
  return cube__trace_start_at("cube_trace_start", path);
}

#define CUBE__TRACE_STOP_HOOKS 8
typedef struct cube__trace_hook {
  void (*before)(void);
  void (*after)(void);
} cube__trace_hook_t;
static cube__trace_hook_t g_stop_hooks[CUBE__TRACE_STOP_HOOKS];
static unsigned g_stop_hook_count;

void cube__trace_on_stop(void (*before)(void), void (*after)(void)) {
  pthread_mutex_lock(&g_lock);
  bool known = false;
  for (unsigned i = 0; i < g_stop_hook_count; ++i)
    known = known || (g_stop_hooks[i].before == before && g_stop_hooks[i].after == after);
  if (!known && g_stop_hook_count < CUBE__TRACE_STOP_HOOKS)
    g_stop_hooks[g_stop_hook_count++] = (cube__trace_hook_t){before, after};
  pthread_mutex_unlock(&g_lock);
}

/* The hooks' |before| (|after| false) or |after| functions. */
static void cube__trace_hooks(bool after) {
  cube__trace_hook_t hooks[CUBE__TRACE_STOP_HOOKS];
  pthread_mutex_lock(&g_lock);
  unsigned n = g_stop_hook_count;
  memcpy(hooks, g_stop_hooks, sizeof(hooks));
  pthread_mutex_unlock(&g_lock);
  for (unsigned i = 0; i < n; ++i) {
    void (*fn)(void) = after ? hooks[i].after : hooks[i].before;
    if (fn) fn();
  }
}

static cube_status_t cube__trace_stop_at(const char* fn) {
  if (cube__trace_on()) cube__trace_hooks(false);
  pthread_mutex_lock(&g_lock);
  if (!g_ring) {
    pthread_mutex_unlock(&g_lock);
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "%s: no trace is recording (cube_trace_start or CUBE_TRACE starts one)",
                             fn);
  }
  atomic_store_explicit(&cube__trace_recording, false, memory_order_release);
  cube__trace_record_t* ring = g_ring;
  uint64_t cap = g_capacity, written = g_written;
  int fd = g_fd;
  char path[sizeof(g_path)];
  memcpy(path, g_path, sizeof(path));
  g_ring = NULL;
  g_fd = -1;
  pthread_mutex_unlock(&g_lock);
  cube__trace_hooks(true);
  /* The ring in the order written: the oldest kept record first. */
  uint64_t count = written < cap ? written : cap;
  uint64_t dropped = written - count;
  cube__trace_record_t* ordered = ring;
  if (written > cap) {
    ordered = malloc(cap * sizeof(*ordered));
    if (ordered) {
      uint64_t first = written % cap;
      memcpy(ordered, ring + first, (cap - first) * sizeof(*ordered));
      memcpy(ordered + (cap - first), ring, first * sizeof(*ordered));
    }
  }
  size_t done = 0, total = 0;
  bool ok = ordered && cube__trace_write_json(fd, ordered, count, dropped, cap, &done, &total);
  int e = ordered ? errno : ENOMEM;
  if (ordered != ring) free(ordered);
  free(ring);
  struct stat made;
  bool known = fstat(fd, &made) == 0;
  if (close(fd) != 0 && ok) {
    ok = false;
    e = errno;
  }
  if (!ok) {
    /* A file cut short is no JSON any reader opens: it goes, as a memory
     * snapshot's does, if the name still leads to the file this trace
     * created (a relative name after a chdir, or a file put in its place,
     * is left alone). */
    struct stat now;
    bool removed = known && stat(path, &now) == 0 && now.st_dev == made.st_dev &&
                   now.st_ino == made.st_ino && unlink(path) == 0;
    char sizes[96] = "";
    if (total)
      snprintf(sizes, sizeof(sizes), " (%zu of %zu bytes written)", done, total);
    return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "%s: writing the trace of %llu records to '%s' failed%s: %s; %s", fn,
                             (unsigned long long)count, path, sizes,
                             e == ENOMEM ? "no host memory for the document" : strerror(e),
                             removed ? "the partial file was removed"
                                     : "the partial file could not be removed");
  }
  return CUBE_OK;
}

cube_status_t cube_trace_stop(void) { return cube__trace_stop_at("cube_trace_stop"); }

bool cube_trace_active(void) { return cube__trace_on(); }

//===----------------------------------------------------------------------===//
// CUBE_TRACE
//===----------------------------------------------------------------------===//

static void cube__trace_at_exit(void) {
  cube_status_t s = cube__trace_stop_at("CUBE_TRACE");
  /* Stopped by the program already: nothing to say. */
  if (s && cube_status_code(s) != CUBE_STATUS_FAILED_PRECONDITION)
    fprintf(stderr, "cube: %s\n", cube_status_message(s));
  cube_status_free(s);
}

static void cube__trace_env_once(void) {
  const char* pattern = cube__option_str(CUBE__OPT_TRACE);
  if (!pattern || !*pattern) return;
  char path[4096];
  cube__trace_expand(pattern, path, sizeof(path));
  cube_status_t s = cube__trace_start_at("CUBE_TRACE", path);
  if (s) {
    fprintf(stderr, "cube: no trace: %s\n", cube_status_message(s));
    cube_status_free(s);
    return;
  }
  atexit(cube__trace_at_exit);
}

void cube__trace_env_start(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, cube__trace_env_once);
}

//===----------------------------------------------------------------------===//
// User ranges
//===----------------------------------------------------------------------===//

#define CUBE__TRACE_RANGE_DEPTH 64

typedef struct cube__trace_range {
  uint64_t start_ns;
  uint64_t session; /* the trace it was opened in */
  char name[80];
} cube__trace_range_t;

/* Each thread's open ranges, on the heap (a thread's first push allocates
 * them; a pthread key frees them when the thread ends): a static TLS array
 * of this size would not fit the surplus that a dlopen'd library gets. */
typedef struct cube__trace_ranges {
  uint32_t depth; /* pushes not yet popped, also past the limit */
  cube__trace_range_t open[CUBE__TRACE_RANGE_DEPTH];
} cube__trace_ranges_t;

static pthread_key_t g_range_key;
static pthread_once_t g_range_once = PTHREAD_ONCE_INIT;
static _Thread_local cube__trace_ranges_t* g_ranges;

static void cube__trace_range_key(void) { (void)pthread_key_create(&g_range_key, free); }

void cube_trace_range_push(const char* name) {
  if (!cube__trace_on()) return;
  if (!g_ranges) {
    pthread_once(&g_range_once, cube__trace_range_key);
    g_ranges = calloc(1, sizeof(*g_ranges));
    if (!g_ranges) return;
    (void)pthread_setspecific(g_range_key, g_ranges);
  }
  uint32_t d = g_ranges->depth++;
  if (d >= CUBE__TRACE_RANGE_DEPTH) return;
  cube__trace_copy_name(g_ranges->open[d].name, sizeof(g_ranges->open[d].name),
                        name ? name : "range");
  g_ranges->open[d].session = atomic_load_explicit(&g_session, memory_order_relaxed);
  g_ranges->open[d].start_ns = cube__now_ns();
}

void cube_trace_range_pop(void) {
  if (!g_ranges || !g_ranges->depth) return;
  uint32_t d = --g_ranges->depth;
  if (d >= CUBE__TRACE_RANGE_DEPTH || !cube__trace_on()) return;
  uint64_t now = cube__now_ns();
  const cube__trace_range_t* r = &g_ranges->open[d];
  /* A range still open when its trace stopped is in neither that trace nor
   * the next: it would start before the next one did, and its depth would
   * count ranges that trace never saw. */
  uint64_t session = atomic_load_explicit(&g_session, memory_order_relaxed);
  if (r->session != session) return;
  uint64_t depth = 0;
  for (uint32_t i = 0; i < d; ++i) depth += g_ranges->open[i].session == session;
  cube__trace_host(CUBE__TRACE_RANGE, r->name, r->start_ns,
                   now > r->start_ns ? now - r->start_ns : 0, depth);
}
