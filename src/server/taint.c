/* Taint of buffers by the work that failed to write them (memory/taint.h;
 * docs/failures.md): which
 * buffers a failed or skipped launch, write or copy taints, which work is
 * skipped, what clears a taint and what a read of a tainted buffer says.
 *
 * Everything here runs where the work runs: on the device's runner, or on a
 * caller that has the device to itself (cube__submit_here), or, for the
 * upload into a fresh buffer, on the caller that made the buffer (nothing
 * queued references it yet). A descriptor belongs to one device, so its
 * taint is only ever read and replaced in that device's order. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "kernel/kernel.h"
#include "memory/taint.h"
#include "server/tasks_internal.h"

/* Launches ------------------------------------------------------------------ */

/* The union of the taints of every buffer of |t| (its dynamic count's too):
 * a new reference, NULL when none is tainted. */
static cube__taint_t* cube__launch_taint_in(cube__launch_task_t* t) {
  cube__memory_t** mems = cube__launch_mems(t);
  cube__taint_t* all = t->dyn_mem ? cube__taint_ref(cube__memory_taint(t->dyn_mem)) : NULL;
  for (uint32_t i = 0; i < t->arg_count; ++i) {
    if (!mems[i]) continue;
    cube__taint_t* m = cube__memory_taint(mems[i]);
    if (!m) continue;
    cube__taint_t* u = cube__taint_union(all, m);
    cube__taint_unref(all);
    all = u;
  }
  return all;
}

/* Gives each buffer |t|'s kernel may write the union of its taint and |with|. */
static void cube__launch_taint_out(cube__launch_task_t* t, cube__taint_t* with) {
  cube__memory_t** mems = cube__launch_mems(t);
  uint64_t written = t->kernel->written_args;
  for (uint32_t i = 0; i < t->arg_count; ++i) {
    if (!mems[i] || !(written & (UINT64_C(1) << i))) continue;
    cube__memory_set_taint(mems[i], cube__taint_union(cube__memory_taint(mems[i]), with));
  }
}

/* "launch of kernel 'k' (node 3 of a graph) on cpu:0 stream 2" */
static void cube__launch_what(cube__stream_t* st, const cube__launch_task_t* t, const char* how,
                              char* buf, size_t n) {
  char where[64], node[40] = "";
  if (t->graph_node) snprintf(node, sizeof(node), " (node %u of a graph)", t->graph_node - 1);
  snprintf(buf, n, "launch of kernel '%s'%s on %s%s%s%s", t->kernel->name, node,
           cube__stream_where(st, where, sizeof(where)), how ? " (" : "", how ? how : "",
           how ? ")" : "");
}

void cube__taint_launch_failed(cube__stream_t* st, cube__launch_task_t* t,
                               cube_status_t failure) {
  char what[256];
  cube__launch_what(st, t, NULL, what, sizeof(what));
  cube__taint_t* root = cube__taint_create(failure, what);
  cube__taint_t* in = cube__launch_taint_in(t);
  cube__taint_t* all = cube__taint_union(in, root);
  cube__launch_taint_out(t, all);
  cube__taint_unref(all);
  cube__taint_unref(in);
  cube__taint_unref(root);
}

bool cube__taint_launch_skip(cube__stream_t* st, cube__launch_task_t* t, const char* how) {
  cube__taint_t* in = cube__launch_taint_in(t);
  if (!in) return false;
  char what[256];
  cube__launch_what(st, t, how, what, sizeof(what));
  cube__taint_note(in, what);
  cube__launch_taint_out(t, in);
  cube__taint_unref(in);
  return true;
}

/* Writes and copies ---------------------------------------------------------- */

cube__taint_t* cube__taint_root(cube__stream_t* st, cube_status_t failure, const char* what) {
  char where[64], full[256];
  snprintf(full, sizeof(full), "%s on %s", what, cube__stream_where(st, where, sizeof(where)));
  return cube__taint_create(failure, full);
}

void cube__taint_fail(cube__stream_t* st, cube__memory_t* const* mems, uint32_t n,
                      cube__taint_t* with, cube_status_t failure, const char* what) {
  cube__taint_t* root = cube__taint_root(st, failure, what);
  cube__taint_t* all = cube__taint_union(with, root);
  for (uint32_t i = 0; i < n; ++i)
    if (mems[i])
      cube__memory_set_taint(mems[i], cube__taint_union(cube__memory_taint(mems[i]), all));
  cube__taint_unref(all);
  cube__taint_unref(root);
}

bool cube__taint_covers(const cube__memory_t* m, uint64_t offset, uint64_t span) {
  const cube__storage_t* storage;
  uint64_t off, size;
  if (!cube__memory_resolve(m, &storage, &off, &size)) return false;
  return offset == 0 && span >= size;
}

void cube__taint_after_write(cube__stream_t* st, cube__memory_t* mem, uint64_t offset,
                             uint64_t pitch, uint64_t width, uint64_t height,
                             cube_status_t status) {
  if (status) {
    char what[96];
    snprintf(what, sizeof(what), "write of %" PRIu64 " bytes into memory %" PRIu64,
             width * height, mem->id);
    cube__taint_fail(st, &mem, 1, NULL, status, what);
    return;
  }
  if (!cube__memory_taint(mem)) return;
  /* Every row of a pitched tensor written: the padding after each row (the
   * last one's too) holds no contents, so the whole buffer is valid. */
  uint64_t span = height ? pitch * (height - 1) + width : 0;
  uint64_t rows = height && pitch >= width ? pitch * height : span;
  if (cube__taint_covers(mem, offset, rows > span ? rows : span))
    cube__memory_set_taint(mem, NULL);
}

bool cube__taint_copy_skip(cube__stream_t* st, cube__memory_t* src, cube__memory_t* dst,
                           uint64_t bytes, const char* how) {
  cube__taint_t* in = cube__memory_taint(src);
  if (!in) return false;
  char where[64], what[256];
  snprintf(what, sizeof(what),
           "copy of %" PRIu64 " bytes from memory %" PRIu64 " to memory %" PRIu64 " on %s (%s)",
           bytes, src->id, dst->id, cube__stream_where(st, where, sizeof(where)), how);
  cube__taint_note(in, what);
  cube__memory_set_taint(dst, cube__taint_union(cube__memory_taint(dst), in));
  return true;
}

void cube__taint_after_copy(cube__stream_t* st, cube__memory_t* src, cube__memory_t* dst,
                            uint64_t dst_offset, uint64_t bytes, cube_status_t status) {
  if (status) {
    char what[128];
    snprintf(what, sizeof(what), "copy of %" PRIu64 " bytes from memory %" PRIu64
             " to memory %" PRIu64, bytes, src->id, dst->id);
    cube__taint_fail(st, &dst, 1, cube__memory_taint(src), status, what);
    return;
  }
  if (cube__memory_taint(dst) && cube__taint_covers(dst, dst_offset, bytes))
    cube__memory_set_taint(dst, NULL);
}

/* Collectives --------------------------------------------------------------- */

void cube__taint_collective(cube__stream_t* st, cube__memory_t* dst, uint64_t dst_offset,
                            uint64_t bytes, cube__taint_t* in, const char* what,
                            cube_status_t status) {
  if (status) {
    cube__taint_fail(st, &dst, 1, in, status, what);
    return;
  }
  if (in) {
    char where[64], full[256];
    snprintf(full, sizeof(full), "%s on %s (ran on invalid contents)", what,
             cube__stream_where(st, where, sizeof(where)));
    cube__taint_note(in, full);
    cube__memory_set_taint(dst, cube__taint_union(cube__memory_taint(dst), in));
    return;
  }
  if (cube__memory_taint(dst) && cube__taint_covers(dst, dst_offset, bytes))
    cube__memory_set_taint(dst, NULL);
}

/* Reads ------------------------------------------------------------------------ */

typedef struct cube__taint_check {
  cube__memory_t* mem;
  const char* where;
} cube__taint_check_t;

static cube_status_t cube__taint_check_run(void* state, void* payload) {
  (void)state;
  const cube__taint_check_t* c = payload;
  cube__taint_t* t = cube__taint_any() ? cube__memory_taint(c->mem) : NULL;
  return t ? cube__taint_status(t, c->where) : CUBE_OK;
}

cube_status_t cube__server_taint_check(cube__stream_t* st, cube__memory_t* mem,
                                       const char* where) {
  cube__taint_check_t c = {mem, where};
  return cube__submit_blocking(st->server->service, st->id, cube__taint_check_run, &c);
}

cube_status_t cube__taint_read_status(const cube__read_region_t* regions, size_t count) {
  cube__taint_t* all = NULL;
  size_t first = SIZE_MAX, tainted = 0;
  for (size_t i = 0; i < count; ++i) {
    cube__taint_t* m = regions[i].mem ? cube__memory_taint(regions[i].mem) : NULL;
    if (!m) continue;
    if (first == SIZE_MAX) first = i;
    ++tainted;
    cube__taint_t* u = cube__taint_union(all, m);
    cube__taint_unref(all);
    all = u;
  }
  if (!all) return CUBE_OK;
  char where[160];
  if (tainted == 1)
    snprintf(where, sizeof(where), "read of handles[%zu] (memory %" PRIu64 ")", first,
             regions[first].mem->id);
  else
    snprintf(where, sizeof(where),
             "read of handles[%zu] (memory %" PRIu64 ") and %zu more of the %zu handles", first,
             regions[first].mem->id, tainted - 1, count);
  cube_status_t s = cube__taint_status(all, where);
  cube__taint_unref(all);
  return s;
}
