/* The trace (include/cube/trace.h, docs/observability.md): a process-wide
 * ring of records that the layers above write as work completes, written as
 * Chrome trace-event JSON (through cJSON) when the trace stops.
 *
 * cube__trace_on() is one relaxed atomic load: every producer tests it
 * first, so a process that records no trace pays a predictable branch.
 * cube__trace_emit copies the record into the ring under one mutex.
 *
 * Thread-safe.
 */
#ifndef CUBE_TRACE_TRACE_H_
#define CUBE_TRACE_TRACE_H_

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/utf8.h"
#include "cube/device.h"
#include "cube/trace.h"

/* What a record is (its "cat" in the file). */
typedef enum cube__trace_kind {
  CUBE__TRACE_KERNEL = 0,    /* a launch: a[0..2] the cube count */
  CUBE__TRACE_UPLOAD = 1,    /* host to device: a[0] bytes */
  CUBE__TRACE_DOWNLOAD = 2,  /* device to host: a[0] bytes */
  CUBE__TRACE_COPY = 3,      /* device to device: a[0] bytes */
  CUBE__TRACE_COMPILE = 4,   /* a kernel compiled (a[0] 1: it failed) */
  CUBE__TRACE_CACHE_LOAD = 5, /* a compiled kernel loaded from the disk cache */
  CUBE__TRACE_WAIT = 6,      /* a host thread waiting for a device (sync, read) */
  CUBE__TRACE_COLLECTIVE = 7, /* a[0] bytes, a[1] participants, a[2] ranks; f[0] algbw, f[1] busbw */
  CUBE__TRACE_GRAPH = 8,     /* a replay: a[0] nodes */
  CUBE__TRACE_OOM = 9,       /* an out-of-memory failure (instant): a[0] bytes asked */
  CUBE__TRACE_RANGE = 10,    /* a user range */
  CUBE__TRACE_KIND_COUNT
} cube__trace_kind_t;

/* The pid of the host's tracks; a device's is cube__trace_device_pid. */
#define CUBE__TRACE_HOST_PID 0u
/* The tid of a device's collectives track (stream ids are below it). */
#define CUBE__TRACE_COLLECTIVE_TID 0xFFFFFFFFull

typedef struct cube__trace_record {
  uint64_t ts_ns;  /* start, on the host monotonic clock (cube__now_ns) */
  uint64_t dur_ns; /* 0 for an instant */
  uint64_t tid;    /* stream id on a device; the thread's id on the host */
  uint64_t a[3];
  double f[2];
  /* Work of a device stream: its place in the stream's order (1, 2, ...), 0
   * when not known. The writer keeps a stream's track in this order: no
   * record starts before the one before it ended (a start that the host
   * estimated as a lower bound moves later). */
  uint64_t order;
  uint32_t pid;
  uint32_t kind; /* cube__trace_kind_t */
  char name[80];
  char detail[40]; /* a word more: the transport, "device clock", "host clock" */
} cube__trace_record_t;

extern atomic_bool cube__trace_recording;

static inline bool cube__trace_on(void) {
  return atomic_load_explicit(&cube__trace_recording, memory_order_relaxed);
}

/* 1 + backend * 256 + index: a device's track group. */
static inline uint32_t cube__trace_device_pid(cube_device_id_t d) {
  return 1u + (uint32_t)d.backend * 256u + (d.index & 255u);
}

/* Copies |src| into |dst| (of |size| bytes), cut and terminated: the
 * record's strings without snprintf's cost on the launch path. */
static inline void cube__trace_copy_name(char* dst, size_t size, const char* src) {
  size_t n = src ? strnlen(src, size - 1) : 0; /* libc's: words at a time, not bytes */
  if (src && src[n]) n = cube__utf8_cut(src, n); /* cut: not inside a character */
  __builtin_memcpy(dst, src ? src : "", n);
  dst[n] = 0;
}

/* |prefix| (ASCII) then |name| into |dst| (of |size| bytes), cut and
 * terminated as cube__trace_copy_name cuts: "compile <kernel>", "profile
 * <region>" never end inside a character of the program's name. */
static inline void cube__trace_prefix_name(char* dst, size_t size, const char* prefix,
                                           const char* name) {
  size_t p = 0;
  while (prefix[p] && p + 1 < size) {
    dst[p] = prefix[p];
    ++p;
  }
  cube__trace_copy_name(dst + p, size - p, name);
}

/* The calling thread's id (the host track's tid). */
uint64_t cube__trace_thread_id(void);

/* At every later stop of a trace, from the stopping thread: |before| while
 * the trace still records (a layer below hands over what it holds for it),
 * |after| once it no longer does (what it keeps on for traces may go off).
 * Either may be NULL. At most 8 pairs; a repeated pair is kept once.
 * Thread-safe; neither is called with the trace's lock held. */
void cube__trace_on_stop(void (*before)(void), void (*after)(void));

/* Copies |r| into the ring (nothing while no trace records). */
void cube__trace_emit(const cube__trace_record_t* r);

/* A record on the calling thread's host track. */
void cube__trace_host(cube__trace_kind_t kind, const char* name, uint64_t ts_ns, uint64_t dur_ns,
                      uint64_t a0);

/* Starts the trace that CUBE_TRACE names, once per process (the first
 * device's creation calls it); its file is written at exit. A failure is
 * written to stderr and the process goes on without a trace. */
void cube__trace_env_start(void);

/* Writes the ring as trace-event JSON to |fd| (cube_trace_stop; tests).
 * False with errno set when it could not (ENOMEM: no host memory for the
 * document); *out_written and *out_total (either may be NULL) say how many
 * bytes of the document reached |fd|, of how many. */
bool cube__trace_write_json(int fd, const cube__trace_record_t* records, uint64_t count,
                            uint64_t dropped, uint64_t capacity, size_t* out_written,
                            size_t* out_total);

//===----------------------------------------------------------------------===//
// Compile notices (CUBE_COMPILE_NOTICE): compile_notice.c
//===----------------------------------------------------------------------===//

/* A compile in progress, on the compiling thread's stack. */
typedef struct cube__compile_watch {
  struct cube__compile_watch* next;
  struct cube__compile_watch* prev;
  uint64_t start_ns;
  bool announced; /* the "still compiling" line was written */
  char kernel[80];
  char where[32];
} cube__compile_watch_t;

/* Registers a compile of |kernel| for |where| ("cpu", "cuda:0") that starts
 * now: a line "compiling kernel ..." is logged if it is still running after
 * CUBE_COMPILE_NOTICE seconds (by a watcher thread started on first use). */
void cube__compile_watch_begin(cube__compile_watch_t* w, const char* kernel, const char* where);

/* Ends it: a line "compiled kernel ... in <t>" when it took CUBE_COMPILE_NOTICE
 * seconds or more, and a compile record on the trace. Returns its ns. */
uint64_t cube__compile_watch_end(cube__compile_watch_t* w, bool failed);

/* Stops the watcher thread (cube_shutdown); a later compile starts it again. */
void cube__compile_watch_shutdown(void);

/* Writes a line of the library's own log (stderr, or CUBE_LOG_FILE). */
void cube__log_line(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

#endif /* CUBE_TRACE_TRACE_H_ */
