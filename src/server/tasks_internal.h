/* The task records of src/server/tasks.c, shared with graph.c (a captured
 * graph keeps launch records as the queue would have run them and replays
 * them on the runner). Nothing outside src/server/ includes it. */
#ifndef CUBE_SERVER_TASKS_INTERNAL_H_
#define CUBE_SERVER_TASKS_INTERNAL_H_

#include "memory/taint.h"
#include "server/server.h"

typedef struct cube__write_task {
  cube__stream_t* stream;
  cube__memory_t* mem;
  uint64_t offset, pitch, width, height;
  cube_bytes_t* bytes; /* owns the source */
} cube__write_task_t;

/* A copy of |bytes| between two views (each a buffer and the view's start
 * in it); both references are held by the record (a graph's are its
 * slots'). */
typedef struct cube__copy_task {
  cube__stream_t* stream;
  cube__memory_t* src;
  uint64_t src_offset;
  cube__memory_t* dst;
  uint64_t dst_offset;
  uint64_t bytes;
} cube__copy_task_t;

typedef struct cube__launch_task {
  cube__stream_t* stream;
  cube_kernel_t* kernel;
  cube__memory_t* dyn_mem; /* NULL: static count */
  uint64_t dyn_offset;
  uint32_t count[3];
  cube_execution_mode_t mode;
  uint32_t arg_count;
  uint32_t graph_node; /* a graph replay's node: its index + 1 (messages only); 0 otherwise */
  cube__launch_arg_t args[]; /* arg_count, then cube__memory_t* mems[arg_count] */
} cube__launch_task_t;

_Static_assert(sizeof(cube__launch_task_t) + 4 * (sizeof(cube__launch_arg_t) + sizeof(void*)) <=
                   CUBE__TASK_INLINE_BYTES,
               "a launch of four arguments fits a queue cell");

static inline cube__memory_t** cube__launch_mems(cube__launch_task_t* t) {
  return (cube__memory_t**)(void*)(t->args + t->arg_count);
}

static inline size_t cube__launch_task_size(uint32_t arg_count) {
  return sizeof(cube__launch_task_t) +
         arg_count * (sizeof(cube__launch_arg_t) + sizeof(cube__memory_t*));
}

typedef struct cube__launch_fill {
  cube__stream_t* stream;
  cube_kernel_t* kernel;
  const uint32_t* count;
  cube__memory_t* dyn_mem;
  uint64_t dyn_offset;
  cube_execution_mode_t mode;
  uint32_t arg_count;
  const cube__task_arg_t* args;
} cube__launch_fill_t;

/* Builds a launch record at |payload| (cube__launch_task_size bytes) from the
 * cube__launch_fill_t at |arg|, taking a kernel reference and a binding
 * reference on every buffer; cube__launch_task_drop gives them back. */
void cube__launch_fill(void* payload, const void* arg);
void cube__launch_task_drop(void* payload);

/* Runs a launch record on the runner: resolves its buffers in place (the
 * record is changed: run a copy of one that is kept), orders them across
 * streams, launches. |profiled|: as the server's profile level says (a row
 * per launch); false for a graph's nodes (the replay is the row). Returns the
 * launch's status. */
cube_status_t cube__launch_exec(cube__server_t* s, cube__stream_t* st, cube__launch_task_t* t,
                               bool profiled);

/* Writes rows into |mem| at |offset| through the backend, on the runner (or
 * on the caller for a fresh buffer). |owner|: bytes that hold |src| and that
 * nobody changes (the task's copy, a graph's), which the backend may keep
 * referenced instead of waiting for the device to read them (the write_held
 * slot); NULL: |src| is valid only during the call. */
cube_status_t cube__write_exec(cube__stream_t* st, cube__memory_t* mem, uint64_t offset,
                               uint64_t pitch, const void* src, uint64_t width, uint64_t height,
                               cube_bytes_t* owner);

/* Runs a copy on the runner (the eager task and a graph's copy nodes): on
 * backends with events, orders both buffers after their last use on
 * another stream and holds them for this stream's next user. A view copied
 * onto itself does nothing; overlapping views are INVALID_ARGUMENT (the
 * callers refuse them before). Returns the copy's status. */
cube_status_t cube__copy_exec(cube__stream_t* st, cube__memory_t* src, uint64_t src_offset,
                              cube__memory_t* dst, uint64_t dst_offset, uint64_t bytes);

/* Taint (src/server/taint.c; memory/taint.h) ----------------------------------
 *
 * Where work runs (the device's runner, a caller with the device to
 * itself, or the caller of an upload into a fresh buffer), after or before
 * it runs. */

/* |t| failed with |failure| (borrowed): a new root, and every buffer its
 * kernel may write (cube_kernel_t.written_args) gets it with the taints of
 * the launch's other buffers. */
void cube__taint_launch_failed(cube__stream_t* stream, cube__launch_task_t* t,
                               cube_status_t failure);

/* When a buffer of |t| (or its dynamic count) is tainted: the written
 * buffers take the union of those taints, the launch is noted in the chain
 * of each root as "launch of kernel '<k>' on <where> (<how>)", and true
 * (the caller does not run it). False, nothing done, when none is. */
bool cube__taint_launch_skip(cube__stream_t* stream, cube__launch_task_t* t, const char* how);

/* A new root: |failure| (cloned) of "<what> on <stream's where>", now; NULL
 * without host memory. For a caller that gives one failure to more buffers
 * than one call of cube__taint_fail takes. */
cube__taint_t* cube__taint_root(cube__stream_t* stream, cube_status_t failure, const char* what);

/* A new root of |failure| (borrowed) for "<what> on <where>", given with
 * |with| (borrowed, may be NULL) to each of |mems| (NULL entries skipped). */
void cube__taint_fail(cube__stream_t* stream, cube__memory_t* const* mems, uint32_t n,
                      cube__taint_t* with, cube_status_t failure, const char* what);

/* True when |span| bytes from |offset| cover the whole of |m|: a write or
 * copy that succeeded over it clears its taint. */
bool cube__taint_covers(const cube__memory_t* m, uint64_t offset, uint64_t span);

/* After a write of |height| rows of |width| bytes at |offset| (|pitch| apart)
 * into |mem| that returned |status| (borrowed): a failure taints |mem|, a
 * success that covered all of it clears its taint. */
void cube__taint_after_write(cube__stream_t* stream, cube__memory_t* mem, uint64_t offset,
                             uint64_t pitch, uint64_t width, uint64_t height,
                             cube_status_t status);

/* Before a copy: when |src| is tainted, |dst| takes its taint, the copy is
 * noted in the chain ("... (<how>)"), and true (the copy is not run). */
bool cube__taint_copy_skip(cube__stream_t* stream, cube__memory_t* src, cube__memory_t* dst,
                           uint64_t bytes, const char* how);

/* After a copy that returned |status| (borrowed): a failure taints |dst|, a
 * success that covered all of |dst| clears its taint. */
void cube__taint_after_copy(cube__stream_t* stream, cube__memory_t* src, cube__memory_t* dst,
                            uint64_t dst_offset, uint64_t bytes, cube_status_t status);

/* After a collective's part wrote (or should have written) |bytes| at
 * |dst_offset| of |dst|: a failure |status| (borrowed) taints |dst| with a
 * new root for |what| ("all_reduce of 4096 bytes") and |in|; else |in|, the
 * taint of the part's own input (borrowed, may be NULL), passes to |dst|
 * (the collective ran on it: the other participants would wait for it), and
 * a clean part that covered all of |dst| clears its taint. The taint of
 * the other inputs of the same process comes when the part is settled
 * (collective.c); that of other processes' inputs is not seen
 * (docs/failures.md). */
void cube__taint_collective(cube__stream_t* stream, cube__memory_t* dst, uint64_t dst_offset,
                            uint64_t bytes, cube__taint_t* in, const char* what,
                            cube_status_t status);

/* The DATA_LOST status of reading |regions| when any is tainted (every root
 * of them, joined), else CUBE_OK. */
cube_status_t cube__taint_read_status(const cube__read_region_t* regions, size_t count);

#endif /* CUBE_SERVER_TASKS_INTERNAL_H_ */
