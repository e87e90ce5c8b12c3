/* Run-time compilation for the CPU backend: the system C compiler as a child
 * process (posix_spawn, no shell), the shared object through the kernel cache
 * and dlopen from a memfd. See cpu_compiler.h. */
#include "backends/cpu/cpu_compiler.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <xxhash.h>

#include "base/fault.h"
#include "base/options.h"
#include "base/status.h"
#include "kernel/compile_limit.h"
#include "kernel/dialect.h"
#include "platform/platform.h"

extern char** environ;

/* Compiler output kept in an error message: the head (first errors matter
 * most) and the tail (the summary). */
#define CUBE__CC_LOG_HEAD (12 * 1024)
#define CUBE__CC_LOG_TAIL (2 * 1024)

/* The flags of every compile, before "-x c - -o <out>" (part of the
 * compiler identity, so of every key). */
/* -fno-trapping-math: floating-point operations do not trap (as on every GPU);
 * without it gcc does not if-convert a guarded store whose value is computed
 * in floating point ("tree could trap"), and such a unit loop is not
 * vectorised. clang assumes it already.
 * -pipe: no temporary assembly files (gcc writes one per compile; a full or
 * size-limited /tmp then fails the compile, seen with RLIMIT_FSIZE). */
static const char* const cube__cc_flags[] = {
    "-O3", "-march=native", "-fPIC", "-shared", "-std=gnu11", "-fno-math-errno",
    "-fno-trapping-math", "-fopenmp-simd", "-pipe", "-w", NULL};
#define CUBE__CC_NFLAGS (sizeof(cube__cc_flags) / sizeof(cube__cc_flags[0]) - 1)

/* Small helpers -------------------------------------------------------- */

static const char* cube__cc_tmpdir(void) {
  const char* t = getenv("TMPDIR");
  return (t && t[0] == '/') ? t : "/tmp";
}

/* A name fit for file names: letters, digits, '_', '-', '.', at most 48. */
static void cube__cc_safe_name(const char* in, char* out, size_t size) {
  size_t n = 0;
  for (const char* c = in ? in : ""; *c && n + 1 < size && n < 48; ++c) {
    char ch = *c;
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || ch == '.';
    out[n++] = ok ? ch : '_';
  }
  if (n == 0 && size > 7) {
    memcpy(out, "kernel", 6);
    n = 6;
  }
  out[n] = '\0';
}

/* Keeps |fd| off 0-2 so that dup2 onto the child's standard streams works. */
static int cube__cc_high_fd(int fd) {
  if (fd < 0 || fd > 2) return fd;
  int h = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  close(fd);
  return h;
}

/* An anonymous read-write file: a memfd, or an unlinked temporary file. */
static int cube__cc_anon_file(const char* name) {
  int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) {
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/cube-anon-XXXXXX", cube__cc_tmpdir());
    fd = mkostemp(path, O_CLOEXEC);
    if (fd >= 0) (void)unlink(path);
  }
  return cube__cc_high_fd(fd);
}

static bool cube__cc_write_full(int fd, const void* buf, size_t size) {
  size_t done = 0;
  while (done < size) {
    ssize_t w = write(fd, (const char*)buf + done, size - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return false;
    }
    done += (size_t)w;
  }
  return true;
}

/* Reads the whole of |fd| from offset 0 (malloc'd, NUL-terminated). */
static char* cube__cc_read_all(int fd, size_t* out_size) {
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < 0) return NULL;
  size_t size = (size_t)st.st_size;
  char* buf = malloc(size + 1);
  if (!buf) return NULL;
  size_t done = 0;
  while (done < size) {
    ssize_t r = pread(fd, buf + done, size - done, (off_t)done);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    done += (size_t)r;
  }
  buf[done] = '\0';
  *out_size = done;
  return buf;
}

/* The compiler log for a message: trailing blank lines dropped, the middle
 * of a very long log left out. Returns a malloc'd string (NULL: no memory). */
static char* cube__cc_log_excerpt(const char* log, size_t size) {
  while (size > 0 && (log[size - 1] == '\n' || log[size - 1] == '\r' || log[size - 1] == ' '))
    --size;
  if (size <= CUBE__CC_LOG_HEAD + CUBE__CC_LOG_TAIL + 256) {
    char* s = malloc(size + 1);
    if (s) {
      memcpy(s, log, size);
      s[size] = '\0';
    }
    return s;
  }
  size_t head = CUBE__CC_LOG_HEAD, tail = CUBE__CC_LOG_TAIL;
  while (head > 0 && log[head - 1] != '\n') --head; /* cut at line ends */
  if (head == 0) head = CUBE__CC_LOG_HEAD;
  size_t tail_start = size - tail;
  while (tail_start < size && log[tail_start - 1] != '\n') ++tail_start;
  if (tail_start == size) tail_start = size - tail;
  char mid[96];
  int m = snprintf(mid, sizeof(mid), "[... %zu bytes of compiler output left out ...]\n",
                   tail_start - head);
  size_t total = head + (size_t)m + (size - tail_start);
  char* s = malloc(total + 1);
  if (!s) return NULL;
  memcpy(s, log, head);
  memcpy(s + head, mid, (size_t)m);
  memcpy(s + head + (size_t)m, log + tail_start, size - tail_start);
  s[total] = '\0';
  return s;
}

/* Runs |argv| (argv[0] a path) with stdin from |in_fd| (-1: /dev/null) and
 * stdout+stderr into |out_fd|; waits. *out_spawn_errno is set when it could
 * not start. With a |limit| (seconds, 0: none) the child runs in a process
 * group of its own, and the whole group (the compiler driver and what it
 * started: cc1, as, ld) is killed when the limit passes; *out_timed_out
 * says so. */
static void cube__cc_run(char* const argv[], int in_fd, int out_fd, double limit,
                         int* out_wstatus, int* out_spawn_errno, bool* out_timed_out) {
  *out_wstatus = 0;
  *out_spawn_errno = 0;
  *out_timed_out = false;
  posix_spawn_file_actions_t fa;
  int e = posix_spawn_file_actions_init(&fa);
  if (e) {
    *out_spawn_errno = e;
    return;
  }
  posix_spawnattr_t attr;
  e = posix_spawnattr_init(&attr);
  if (e) {
    posix_spawn_file_actions_destroy(&fa);
    *out_spawn_errno = e;
    return;
  }
  if (limit > 0) {
    e = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    if (!e) e = posix_spawnattr_setpgroup(&attr, 0);
  }
  if (!e) {
    if (in_fd >= 0)
      e = posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
    else
      e = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  }
  if (!e) e = posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  if (!e) e = posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
  pid_t pid = -1;
  if (!e) e = posix_spawn(&pid, argv[0], &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (e) {
    *out_spawn_errno = e;
    return;
  }
  int ws = 0;
  uint64_t start = cube__now_ns();
  uint64_t sleep_ns = 200000; /* 0.2 ms, doubling up to 20 ms */
  for (;;) {
    pid_t r = waitpid(pid, &ws, limit > 0 ? WNOHANG : 0);
    if (r == pid) break;
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) {
      /* Still compiling. */
      if ((double)(cube__now_ns() - start) >= limit * 1e9) {
        (void)kill(-pid, SIGKILL);
        *out_timed_out = true;
        while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
        }
        break;
      }
      struct timespec ts = {0, (long)sleep_ns};
      nanosleep(&ts, NULL);
      if (sleep_ns < 20000000) sleep_ns *= 2;
      continue;
    }
    /* ECHILD: SIGCHLD is ignored and the child was reaped for us; its
     * result is unknown, the caller looks at the output. */
    ws = -1;
    break;
  }
  *out_wstatus = ws;
}

static bool cube__cc_exited_ok(int ws) { return ws == -1 || (WIFEXITED(ws) && WEXITSTATUS(ws) == 0); }

static void cube__cc_describe_exit(int ws, char* buf, size_t size) {
  if (ws == -1)
    snprintf(buf, size, "exit status unknown");
  else if (WIFEXITED(ws))
    snprintf(buf, size, "exit status %d", WEXITSTATUS(ws));
  else if (WIFSIGNALED(ws))
    snprintf(buf, size, "killed by signal %d (%s)", WTERMSIG(ws), strsignal(WTERMSIG(ws)));
  else
    snprintf(buf, size, "wait status 0x%x", (unsigned)ws);
}

/* The compiler ---------------------------------------------------------- */

/* Finds |name| (a path when it holds '/', else looked up on PATH). */
static bool cube__cc_find_program(const char* name, char* out, size_t size) {
  struct stat st;
  if (strchr(name, '/')) {
    if (stat(name, &st) != 0 || !S_ISREG(st.st_mode) || access(name, X_OK) != 0) return false;
    return snprintf(out, size, "%s", name) < (int)size;
  }
  const char* path = getenv("PATH");
  if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
  const char* p = path;
  for (;;) {
    const char* colon = strchr(p, ':');
    size_t len = colon ? (size_t)(colon - p) : strlen(p);
    int n = len ? snprintf(out, size, "%.*s/%s", (int)len, p, name)
                : snprintf(out, size, "./%s", name);
    if (n > 0 && (size_t)n < size && stat(out, &st) == 0 && S_ISREG(st.st_mode) &&
        access(out, X_OK) == 0)
      return true;
    if (!colon) break;
    p = colon + 1;
  }
  return false;
}

typedef struct cube__cc_info {
  struct cube__cc_info* next;
  char* request; /* the CUBE_CC value ("" when unset) */
  char* command;
  char* identity;
} cube__cc_info_t;

static pthread_mutex_t cube__cc_lock = PTHREAD_MUTEX_INITIALIZER;
static cube__cc_info_t* cube__cc_infos; /* kept for the process: the strings are handed out */

static cube_status_t cube__cc_probe(const char* request, cube__cc_info_t** out) {
  char path[PATH_MAX];
  const char* what = NULL;
  if (request[0]) {
    if (!cube__cc_find_program(request, path, sizeof(path)))
      return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                               "CPU kernel compiler: CUBE_CC='%s' is not an executable program%s",
                               request, strchr(request, '/') ? "" : " on PATH");
    what = "CUBE_CC";
  } else if (cube__cc_find_program("clang", path, sizeof(path))) {
    what = "clang";
  } else if (cube__cc_find_program("cc", path, sizeof(path))) {
    what = "cc";
  } else {
    return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "CPU kernel compiler: neither clang nor cc is on PATH ('%s'); "
                             "install one or set CUBE_CC",
                             getenv("PATH") ? getenv("PATH") : "");
  }
  /* Its identity, without running it (a disk-cache hit must not cost a
   * process spawn, ~20 ms): the resolved binary with its size, inode and
   * modification time, which change whenever the compiler is replaced. */
  char real[PATH_MAX];
  struct stat sb;
  if (!realpath(path, real) || stat(real, &sb) != 0)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "CPU kernel compiler (%s): cannot stat '%s': %s",
                             what, path, strerror(errno));
  char line[PATH_MAX + 96];
  snprintf(line, sizeof(line), "%s size=%lld ino=%llu mtime=%lld.%09ld", real, (long long)sb.st_size,
           (unsigned long long)sb.st_ino, (long long)sb.st_mtim.tv_sec, (long)sb.st_mtim.tv_nsec);
  size_t line_len = strlen(line);
  char* text = NULL;
  cube__cc_info_t* info = calloc(1, sizeof(*info));
  size_t flags_len = 0;
  for (size_t i = 0; i < CUBE__CC_NFLAGS; ++i) flags_len += strlen(cube__cc_flags[i]) + 1;
  size_t ident_size = strlen(path) + line_len + flags_len + 8;
  if (info) {
    info->request = strdup(request);
    info->command = strdup(path);
    info->identity = malloc(ident_size);
  }
  if (!info || !info->request || !info->command || !info->identity) {
    if (info) {
      free(info->request);
      free(info->command);
      free(info->identity);
    }
    free(info);
    free(text);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "CPU kernel compiler: out of memory describing '%s'", path);
  }
  int n = snprintf(info->identity, ident_size, "%s | %.*s |", path, (int)line_len, line);
  for (size_t i = 0; i < CUBE__CC_NFLAGS && n > 0 && (size_t)n < ident_size; ++i)
    n += snprintf(info->identity + n, ident_size - (size_t)n, " %s", cube__cc_flags[i]);
  free(text);
  *out = info;
  return CUBE_OK;
}

cube_status_t cube__cpu_compiler(const char** out_command, const char** out_identity) {
  const char* request = cube__option_str(CUBE__OPT_CC);
  if (!request) request = "";
  pthread_mutex_lock(&cube__cc_lock);
  cube__cc_info_t* info = NULL;
  for (cube__cc_info_t* i = cube__cc_infos; i; i = i->next) {
    if (strcmp(i->request, request) == 0) {
      info = i;
      break;
    }
  }
  cube_status_t st = CUBE_OK;
  if (!info) {
    /* Probed under the lock: one --version run per process and setting. */
    st = cube__cc_probe(request, &info);
    if (!st) {
      info->next = cube__cc_infos;
      cube__cc_infos = info;
    }
  }
  pthread_mutex_unlock(&cube__cc_lock);
  if (st) return st;
  if (out_command) *out_command = info->command;
  if (out_identity) *out_identity = info->identity;
  return CUBE_OK;
}

/* Runs the CPU compiler with |args| (NULL-terminated; |with_flags|: the
 * flags of every compile first) and |text| on stdin (NULL: none); its output
 * (stdout and stderr) in *out_log (malloc'd), whether it exited with 0 in
 * *out_ok. */
cube_status_t cube__cpu_cc_capture(bool with_flags, const char* const* args, const char* text,
                                   char** out_log, bool* out_ok) {
  *out_log = NULL;
  *out_ok = false;
  const char* cc = NULL;
  CUBE_RETURN_IF_ERROR(cube__cpu_compiler(&cc, NULL));
  char* argv[CUBE__CC_NFLAGS + 24];
  size_t a = 0;
  argv[a++] = (char*)cc;
  for (size_t i = 0; with_flags && i < CUBE__CC_NFLAGS; ++i) argv[a++] = (char*)cube__cc_flags[i];
  for (size_t i = 0; args && args[i] && a + 1 < sizeof(argv) / sizeof(argv[0]); ++i)
    argv[a++] = (char*)args[i];
  argv[a] = NULL;
  int in = -1;
  if (text) {
    in = cube__cc_anon_file("cube-cc-source");
    size_t len = strlen(text);
    if (in < 0 || !cube__cc_write_full(in, text, len) || lseek(in, 0, SEEK_SET) != 0) {
      int e = errno;
      if (in >= 0) close(in);
      return cube__status_make(CUBE_STATUS_INTERNAL, "running %s: cannot write its input: %s", cc,
                               strerror(e));
    }
  }
  int log = cube__cc_anon_file("cube-cc-log");
  if (log < 0) {
    int e = errno;
    if (in >= 0) close(in);
    return cube__status_make(CUBE_STATUS_INTERNAL, "running %s: cannot create a temporary file: %s",
                             cc, strerror(e));
  }
  int ws = 0, spawn_errno = 0;
  bool timed_out = false; /* no limit here: the probe and --version are not kernels */
  cube__cc_run(argv, in, log, 0, &ws, &spawn_errno, &timed_out);
  if (in >= 0) close(in);
  if (spawn_errno) {
    close(log);
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "cannot start the compiler %s: %s", cc,
                             strerror(spawn_errno));
  }
  size_t size = 0;
  *out_log = cube__cc_read_all(log, &size);
  close(log);
  if (!*out_log)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "running %s: no memory for its output",
                             cc);
  *out_ok = cube__cc_exited_ok(ws);
  return CUBE_OK;
}

const char* const* cube__cpu_cc_flags(void) { return cube__cc_flags; }

/* Modules ------------------------------------------------------------------ */

struct cube__cpu_module {
  void* handle;
  /* The memfd the module was loaded from, open while it is loaded: dlopen
   * matches objects by path, so "/proc/self/fd/<fd>" must keep naming this
   * one module (-1 when it came from a temporary file). */
  int fd;
  struct cube__cpu_module* next_retired;
};

/* Modules the memory map let go (cube__cache_shutdown, or a loser of a race
 * to insert a key). They stay loaded: kernel objects keep the functions they
 * got (cube_kernel_t's compiled slots) across cube_shutdown, and a new client
 * may launch them. Kept reachable here; the process exit unmaps them. */
static pthread_mutex_t cube__cc_retired_lock = PTHREAD_MUTEX_INITIALIZER;
static cube__cpu_module_t* cube__cc_retired;

static void cube__cpu_module_retire(void* p) {
  cube__cpu_module_t* m = p;
  if (!m) return;
  pthread_mutex_lock(&cube__cc_retired_lock);
  m->next_retired = cube__cc_retired;
  cube__cc_retired = m;
  pthread_mutex_unlock(&cube__cc_retired_lock);
}

static atomic_uint_fast64_t cube__cc_load_serial;

/* Loads a shared object from |data|. */
static cube_status_t cube__cc_load(const void* data, size_t size, const char* display_name,
                                   cube__cpu_module_t** out) {
  *out = NULL;
  char safe[64];
  cube__cc_safe_name(display_name, safe, sizeof(safe));
  char memfd_error[512] = "";
  char memfd_name[80];
  snprintf(memfd_name, sizeof(memfd_name), "cube-kernel-%s", safe);
  int fd = cube__cc_high_fd(memfd_create(memfd_name, MFD_CLOEXEC));
  if (fd >= 0) {
    if (cube__cc_write_full(fd, data, size)) {
      char path[64];
      snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
      void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
      if (h) {
        cube__cpu_module_t* m = malloc(sizeof(*m));
        if (!m) {
          dlclose(h);
          close(fd);
          return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                                   "loading kernel '%s': out of memory", display_name);
        }
        m->handle = h;
        m->fd = fd;
        m->next_retired = NULL;
        *out = m;
        return CUBE_OK;
      }
      const char* err = dlerror();
      snprintf(memfd_error, sizeof(memfd_error), "dlopen of a memfd: %s", err ? err : "?");
    } else {
      snprintf(memfd_error, sizeof(memfd_error), "writing %zu bytes to a memfd: %s", size,
               strerror(errno));
    }
    close(fd);
  } else {
    snprintf(memfd_error, sizeof(memfd_error), "memfd_create: %s", strerror(errno));
  }

  /* Fallback: a temporary file, unlinked once loaded. The name is unique in
   * the process (pid, serial), so it never names an earlier module. */
  char path[PATH_MAX];
  unsigned long long serial =
      (unsigned long long)atomic_fetch_add_explicit(&cube__cc_load_serial, 1, memory_order_relaxed);
  snprintf(path, sizeof(path), "%s/cube-%s-%ld-%llu-XXXXXX", cube__cc_tmpdir(), safe,
           (long)getpid(), serial);
  fd = mkostemp(path, O_CLOEXEC);
  if (fd < 0)
    return cube__status_make(CUBE_STATUS_INTERNAL,
                             "loading kernel '%s' (%zu bytes) failed: %s; creating '%s': %s",
                             display_name, size, memfd_error, path, strerror(errno));
  bool written = cube__cc_write_full(fd, data, size);
  int werr = errno;
  close(fd);
  void* h = written ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  const char* err = h ? NULL : (written ? dlerror() : strerror(werr));
  char file_error[512];
  snprintf(file_error, sizeof(file_error), "%s", err ? err : "");
  (void)unlink(path);
  if (!h)
    return cube__status_make(CUBE_STATUS_INTERNAL,
                             "loading kernel '%s' (%zu bytes) failed: %s; from a file: %s",
                             display_name, size, memfd_error, file_error);
  cube__cpu_module_t* m = malloc(sizeof(*m));
  if (!m) {
    dlclose(h);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "loading kernel '%s': out of memory",
                             display_name);
  }
  m->handle = h;
  m->fd = -1;
  m->next_retired = NULL;
  *out = m;
  return CUBE_OK;
}

static cube_status_t cube__cc_symbol(cube__cpu_module_t* m, const char* symbol,
                                     const char* display_name, cube_cpu_kernel_fn* out_fn) {
  (void)dlerror();
  void* sym = dlsym(m->handle, symbol);
  if (!sym) {
    const char* err = dlerror();
    return cube__status_make(CUBE_STATUS_NOT_FOUND,
                             "kernel '%s': the compiled module exports no function '%s' (%s)",
                             display_name, symbol, err ? err : "symbol is NULL");
  }
  cube_cpu_kernel_fn fn;
  memcpy(&fn, &sym, sizeof(fn));
  *out_fn = fn;
  return CUBE_OK;
}

/* Compiling --------------------------------------------------------------- */

/* Runs the compiler on |text|; the shared object's bytes in *out_so. With
 * an |entry| (a dialect unit of |source|), the log is filtered to the user's
 * file (cube__dialect_log_filter) before it goes into the status. */
static cube_status_t cube__cc_compile_text(const char* cc, const char* text,
                                           const char* display_name, const char* entry,
                                           const char* source, void** out_so,
                                           size_t* out_size) {
  *out_so = NULL;
  *out_size = 0;
  CUBE__FAULT_RETURN(CUBE__FAULT_KERNEL_COMPILE, CUBE_STATUS_COMPILATION_FAILED,
                     "compiling kernel '%s' with %s failed", display_name, cc);
  char safe[64];
  cube__cc_safe_name(display_name, safe, sizeof(safe));
  char dir[PATH_MAX];
  snprintf(dir, sizeof(dir), "%s/cube-cc-XXXXXX", cube__cc_tmpdir());
  if (!mkdtemp(dir))
    return cube__status_make(CUBE_STATUS_INTERNAL,
                             "compiling kernel '%s': cannot create a directory '%s': %s",
                             display_name, dir, strerror(errno));
  char out_path[PATH_MAX];
  int pn = snprintf(out_path, sizeof(out_path), "%s/%s.so", dir, safe);
  if (pn < 0 || (size_t)pn >= sizeof(out_path)) {
    (void)rmdir(dir);
    return cube__status_make(CUBE_STATUS_INTERNAL,
                             "compiling kernel '%s': temporary directory '%s' is too long",
                             display_name, dir);
  }
  cube_status_t st = CUBE_OK;
  int in = cube__cc_anon_file("cube-cc-source");
  int log = cube__cc_anon_file("cube-cc-log");
  if (in < 0 || log < 0) {
    st = cube__status_make(CUBE_STATUS_INTERNAL,
                           "compiling kernel '%s': cannot create a temporary file: %s",
                           display_name, strerror(errno));
    goto done;
  }
  size_t len = strlen(text);
  if (!cube__cc_write_full(in, text, len) || lseek(in, 0, SEEK_SET) != 0) {
    st = cube__status_make(CUBE_STATUS_INTERNAL,
                           "compiling kernel '%s': cannot write its %zu bytes of source: %s",
                           display_name, len, strerror(errno));
    goto done;
  }
  char* argv[CUBE__CC_NFLAGS + 7];
  size_t a = 0;
  argv[a++] = (char*)cc;
  for (size_t i = 0; i < CUBE__CC_NFLAGS; ++i) argv[a++] = (char*)cube__cc_flags[i];
  argv[a++] = (char*)"-x";
  argv[a++] = (char*)"c";
  argv[a++] = (char*)"-";
  argv[a++] = (char*)"-o";
  argv[a++] = out_path;
  argv[a] = NULL;
  int ws = 0, spawn_errno = 0;
  bool timed_out = false;
  double limit = cube__compile_limit_seconds();
  cube__cc_run(argv, in, log, limit, &ws, &spawn_errno, &timed_out);
  if (spawn_errno) {
    st = cube__status_make(CUBE_STATUS_UNAVAILABLE,
                           "compiling kernel '%s': cannot start the compiler %s: %s",
                           display_name, cc, strerror(spawn_errno));
    goto done;
  }
  if (timed_out) {
    st = cube__compile_limit_status(display_name, cc, limit,
                                    "; the compiler and the processes it started were killed");
    goto done;
  }
  int so = open(out_path, O_RDONLY | O_CLOEXEC);
  if (!cube__cc_exited_ok(ws) || so < 0) {
    if (so >= 0) close(so);
    size_t log_size = 0;
    char* log_text = cube__cc_read_all(log, &log_size);
    if (log_text && entry) {
      /* The output's directory is the compile's own, of no use to the user. */
      const cube__log_alias_t alias = {dir, "<temporary directory>"};
      char* filtered = cube__dialect_log_filter(log_text, entry, source, &alias, 1);
      if (filtered) {
        free(log_text);
        log_text = filtered;
        log_size = strlen(filtered);
      }
    }
    char* excerpt = log_text ? cube__cc_log_excerpt(log_text, log_size) : NULL;
    char how[96];
    cube__cc_describe_exit(ws, how, sizeof(how));
    if (excerpt && *excerpt)
      st = cube__status_make(CUBE_STATUS_COMPILATION_FAILED,
                             "compiling kernel '%s' with %s failed:\n%s\n(%s)", display_name, cc,
                             excerpt, how);
    else
      st = cube__status_make(CUBE_STATUS_COMPILATION_FAILED,
                             "compiling kernel '%s' with %s failed: %s, no messages%s",
                             display_name, cc, how,
                             cube__cc_exited_ok(ws) ? " and no output file" : "");
    free(excerpt);
    free(log_text);
    goto done;
  }
  size_t size = 0;
  char* bytes = cube__cc_read_all(so, &size);
  close(so);
  if (!bytes || size == 0) {
    free(bytes);
    st = cube__status_make(CUBE_STATUS_INTERNAL,
                           "compiling kernel '%s' with %s: cannot read its output '%s' (%zu bytes)",
                           display_name, cc, out_path, size);
    goto done;
  }
  *out_so = bytes;
  *out_size = size;
done:
  if (in >= 0) close(in);
  if (log >= 0) close(log);
  (void)unlink(out_path);
  (void)rmdir(dir);
  return st;
}

/* Per-key serialisation in the process ----------------------------------- */

typedef struct cube__cc_inflight {
  cube__cache_key_t key;
  struct cube__cc_inflight* next;
} cube__cc_inflight_t;

static pthread_mutex_t cube__cc_inflight_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cube__cc_inflight_cond = PTHREAD_COND_INITIALIZER;
static cube__cc_inflight_t* cube__cc_inflight_head;

static bool cube__cc_inflight_has(cube__cache_key_t key) {
  for (cube__cc_inflight_t* i = cube__cc_inflight_head; i; i = i->next)
    if (i->key.hi == key.hi && i->key.lo == key.lo) return true;
  return false;
}

static void cube__cc_inflight_remove(cube__cc_inflight_t* me) {
  pthread_mutex_lock(&cube__cc_inflight_lock);
  for (cube__cc_inflight_t** p = &cube__cc_inflight_head; *p; p = &(*p)->next) {
    if (*p == me) {
      *p = me->next;
      break;
    }
  }
  pthread_cond_broadcast(&cube__cc_inflight_cond);
  pthread_mutex_unlock(&cube__cc_inflight_lock);
}

/* Disk hit or compile, then load; the module goes into the memory cache. */
static cube_status_t cube__cc_build(const char* text, cube__cache_key_t key,
                                    const char* display_name, const char* entry,
                                    const char* source, cube__cpu_module_t** out) {
  *out = NULL;
  uint64_t t0 = cube__now_ns();
  void* bytes = NULL;
  size_t size = 0;
  cube_status_t st = cube__cache_disk_load(key, "so", &bytes, &size);
  if (!st) {
    cube__cpu_module_t* m = NULL;
    st = cube__cc_load(bytes, size, display_name, &m);
    free(bytes);
    if (!st) {
      cube__cache_count_disk_hit(display_name, t0, cube__now_ns() - t0);
      *out = cube__cache_memory_put(key, m, cube__cpu_module_retire);
      return CUBE_OK;
    }
    /* A well-formed entry that does not load: corrupt, rebuild it. */
    cube_status_free(st);
    cube__cache_disk_discard(key, "so");
  } else {
    /* Miss, corrupt (deleted and counted by the load) or unreadable: compile. */
    cube_status_free(st);
  }

  const char* cc = NULL;
  cube__compile_watch_t watch;
  cube__compile_watch_begin(&watch, display_name, "cpu");
  st = cube__cpu_compiler(&cc, NULL);
  if (!st) st = cube__cc_compile_text(cc, text, display_name, entry, source, &bytes, &size);
  cube__cache_count_miss(cube__compile_watch_end(&watch, st != CUBE_OK), st != CUBE_OK);
  if (st) return st;
  char identity[1024];
  cube__cpu_identity(identity, sizeof(identity));
  const cube__cache_meta_t meta = {display_name, "cpu", identity};
  cube_status_t store = cube__cache_disk_store_meta(key, "so", &meta, bytes, size);
  cube_status_free(store); /* the disk cache is an optimisation */
  cube__cpu_module_t* m = NULL;
  st = cube__cc_load(bytes, size, display_name, &m);
  free(bytes);
  if (st) return st;
  *out = cube__cache_memory_put(key, m, cube__cpu_module_retire);
  return CUBE_OK;
}

cube_status_t cube__cpu_compile(const char* text, cube__cache_key_t key, const char* symbol,
                                const char* display_name, cube_cpu_kernel_fn* out_fn) {
  return cube__cpu_compile_kernel(text, key, symbol, display_name, NULL, NULL, out_fn);
}

cube_status_t cube__cpu_compile_kernel(const char* text, cube__cache_key_t key, const char* symbol,
                                       const char* display_name, const char* entry,
                                       const char* source, cube_cpu_kernel_fn* out_fn) {
  if (out_fn) *out_fn = NULL;
  if (!display_name) display_name = symbol ? symbol : "(unnamed)";
  if (!text || !symbol || !*symbol || !out_fn)
    return CUBE_INVALID("compiling kernel '%s': %s is NULL or empty", display_name,
                        !text ? "text" : !out_fn ? "out_fn" : "symbol");
  cube__cpu_module_t* m = cube__cache_memory_get(key);
  if (m) {
    cube__cache_count_memory_hit();
    return cube__cc_symbol(m, symbol, display_name, out_fn);
  }
  /* One build per key at a time in this process: later callers wait and
   * then find the module in memory. */
  cube__cc_inflight_t me = {key, NULL};
  pthread_mutex_lock(&cube__cc_inflight_lock);
  while (cube__cc_inflight_has(key))
    pthread_cond_wait(&cube__cc_inflight_cond, &cube__cc_inflight_lock);
  m = cube__cache_memory_get(key);
  if (!m) {
    me.next = cube__cc_inflight_head;
    cube__cc_inflight_head = &me;
  }
  pthread_mutex_unlock(&cube__cc_inflight_lock);
  if (m) {
    cube__cache_count_memory_hit();
    return cube__cc_symbol(m, symbol, display_name, out_fn);
  }
  cube_status_t st = cube__cc_build(text, key, display_name, entry, source, &m);
  cube__cc_inflight_remove(&me);
  if (st) return st;
  return cube__cc_symbol(m, symbol, display_name, out_fn);
}

/* Machine ------------------------------------------------------------------ */

static pthread_once_t cube__cc_machine_once = PTHREAD_ONCE_INIT;
static char cube__cc_machine[320] = "unknown";

/* The value of a "key\t: value" line of /proc/cpuinfo, or NULL. */
static const char* cube__cc_cpuinfo_value(const char* line, const char* key) {
  size_t n = strlen(key);
  if (strncmp(line, key, n) != 0) return NULL;
  const char* p = line + n;
  while (*p == ' ' || *p == '\t') ++p;
  if (*p != ':') return NULL;
  ++p;
  while (*p == ' ') ++p;
  return p;
}

static bool cube__cc_has_flag(const char* flags, const char* flag) {
  size_t n = strlen(flag);
  for (const char* p = flags; (p = strstr(p, flag)) != NULL; p += n) {
    bool start = p == flags || p[-1] == ' ';
    bool end = p[n] == '\0' || p[n] == ' ' || p[n] == '\n';
    if (start && end) return true;
  }
  return false;
}

static void cube__cc_machine_read(void) {
  char model[160] = "";
  char part[64] = "";
  char* flags = NULL;
  FILE* f = fopen("/proc/cpuinfo", "re");
  if (f) {
    char* line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, f)) > 0) {
      if (line[len - 1] == '\n') line[len - 1] = '\0';
      const char* v;
      if (!model[0] && (v = cube__cc_cpuinfo_value(line, "model name")))
        snprintf(model, sizeof(model), "%s", v);
      else if (!part[0] && (v = cube__cc_cpuinfo_value(line, "CPU part")))
        snprintf(part, sizeof(part), "part %s", v);
      else if (!flags && ((v = cube__cc_cpuinfo_value(line, "flags")) ||
                          (v = cube__cc_cpuinfo_value(line, "Features"))))
        flags = strdup(v);
      if (model[0] && flags) break;
    }
    free(line);
    fclose(f);
  }
  struct utsname u;
  const char* arch = uname(&u) == 0 ? u.machine : "?";
  const char* fl = flags ? flags : "";
  snprintf(cube__cc_machine, sizeof(cube__cc_machine),
           "%s | %s | avx2=%d avx512f=%d | flags=%016llx", model[0] ? model : (part[0] ? part : "?"),
           arch, cube__cc_has_flag(fl, "avx2"), cube__cc_has_flag(fl, "avx512f"),
           (unsigned long long)XXH3_64bits(fl, strlen(fl)));
  free(flags);
}

const char* cube__cpu_machine_id(void) {
  pthread_once(&cube__cc_machine_once, cube__cc_machine_read);
  return cube__cc_machine;
}

void cube__cpu_identity(char* out, size_t size) {
  if (!size) return;
  const char* identity = NULL;
  cube_status_t st = cube__cpu_compiler(NULL, &identity);
  if (st)
    snprintf(out, size, "cpu | %s | cc: none (%s)", cube__cpu_machine_id(), cube_status_message(st));
  else
    snprintf(out, size, "cpu | %s | cc: %s", cube__cpu_machine_id(), identity);
  cube_status_free(st);
}
