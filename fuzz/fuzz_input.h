/* fuzz_input.h: a tiny reader over the fuzzer's bytes, shared by the fuzz
 * targets. Reading past the end yields zeros, so every input decodes. */
#ifndef CUBE_FUZZ_INPUT_H_
#define CUBE_FUZZ_INPUT_H_

#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cube/cube.h"

typedef struct fz {
  const uint8_t* p;
  size_t n;
} fz_t;

static inline fz_t fz_make(const uint8_t* data, size_t size) {
  fz_t f = {data, size};
  return f;
}

static inline bool fz_done(const fz_t* f) { return f->n == 0; }

static inline uint8_t fz_u8(fz_t* f) {
  if (f->n == 0) return 0;
  f->n--;
  return *f->p++;
}

static inline uint16_t fz_u16(fz_t* f) {
  uint16_t v = fz_u8(f);
  return (uint16_t)(v | (uint16_t)fz_u8(f) << 8);
}

static inline uint32_t fz_u32(fz_t* f) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= (uint32_t)fz_u8(f) << (8 * i);
  return v;
}

static inline uint64_t fz_u64(fz_t* f) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= (uint64_t)fz_u8(f) << (8 * i);
  return v;
}

/* Up to |max| bytes of the input (fewer at the end); returns the count. */
static inline size_t fz_take(fz_t* f, size_t max, const uint8_t** out) {
  size_t k = f->n < max ? f->n : max;
  *out = f->p;
  f->p += k;
  f->n -= k;
  return k;
}

/* An invariant of the library broke: print and abort so libFuzzer keeps the
 * input as a crash. */
#define FZ_ASSERT(cond, ...)                                                 \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "fuzz invariant failed at %s:%d: %s\n  ", __FILE__,   \
              __LINE__, #cond);                                              \
      fprintf(stderr, __VA_ARGS__);                                          \
      fputc('\n', stderr);                                                   \
      abort();                                                               \
    }                                                                        \
  } while (0)

/* FZ_ASSERT without a message of its own. */
#define FZ_CHECK(cond) FZ_ASSERT(cond, "%s", "(no more to say)")

/* A call of the library that must succeed here: its status printed. */
#define FZ_CHECK_OK(expr)                                                            \
  do {                                                                               \
    cube_status_t fz_st_ = (expr);                                                   \
    if (fz_st_) {                                                                    \
      fprintf(stderr, "fuzz call failed at %s:%d: %s: %s\n", __FILE__, __LINE__, #expr, \
              cube_status_message(fz_st_));                                          \
      abort();                                                                       \
    }                                                                                \
  } while (0)

/* A client of CPU device |device| for a target: the inline queue, or the
 * threaded one with CUBE_FUZZ_THREADED=1 in the environment; |memory_limit|
 * bytes of device memory (0: none). Aborts when it cannot be made. */
static inline cube_client_t* fz_cpu_client(uint32_t device, uint64_t memory_limit) {
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  const char* threaded = getenv("CUBE_FUZZ_THREADED");
  o.queue_mode = threaded && *threaded == '1' ? CUBE_QUEUE_THREADED : CUBE_QUEUE_INLINE;
  o.memory_limit = memory_limit;
  cube_client_t* c = NULL;
  cube_status_t st = cube_client_init((cube_device_id_t){CUBE_BACKEND_CPU, device}, &o, &c);
  if (st) {
    fprintf(stderr, "fuzz: cube_client_init of cpu:%u: %s\n", device, cube_status_message(st));
    abort();
  }
  return c;
}

/* The files under |path| (recursively; links count as files and are not
 * followed); with |remove|, each is removed, then the folders and |path|. */
static inline unsigned fz_tree(const char* path, bool remove) {
  unsigned n = 0;
  DIR* d = opendir(path);
  if (d) {
    struct dirent* e;
    while ((e = readdir(d))) {
      if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
      char p[PATH_MAX];
      snprintf(p, sizeof(p), "%s/%s", path, e->d_name);
      struct stat st;
      if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
        n += fz_tree(p, remove);
      } else {
        ++n;
        if (remove) unlink(p);
      }
    }
    closedir(d);
  }
  if (remove) rmdir(path);
  return n;
}

static inline void fz_rm_tree(const char* path) { (void)fz_tree(path, true); }

/* A private directory for a target's files: TMPDIR, else /dev/shm (stores
 * fsync: a RAM file system keeps that cheap), else /tmp; |out| gets
 * "<there>/<name>-XXXXXX" made by mkdtemp. Aborts when it cannot be made. */
static inline void fz_private_dir(const char* name, char* out, size_t size) {
  const char* tmp = getenv("TMPDIR");
  struct stat shm;
  if (!tmp || !*tmp)
    tmp = stat("/dev/shm", &shm) == 0 && S_ISDIR(shm.st_mode) && access("/dev/shm", W_OK) == 0
              ? "/dev/shm"
              : "/tmp";
  snprintf(out, size, "%s/%s-XXXXXX", tmp, name);
  if (!mkdtemp(out)) {
    perror("fuzz: mkdtemp");
    abort();
  }
}

#endif /* CUBE_FUZZ_INPUT_H_ */
