/* The staged transport: devices whose memory is not host memory.
 *
 * For backends without a collective engine of their own (OpenCL; CUDA where
 * NCCL does not load): a part copies its source to host memory on its own
 * stream (a blocking read, ordered after the work queued before it), joins
 * the same rendezvous as the host transport (host.c), and its result lands in
 * a host buffer; the participant's next sync_collective writes that buffer to
 * its device on its own stream. So, as with CubeCL's NCCL path, the
 * destination holds the result once sync_collective has returned, not
 * before.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "backends/backend.h"
#include "base/status.h"
#include "collective/coll_internal.h"
#include "server/server.h"

/* A part's host copies, until its stream's next sync_collective. */
typedef struct cube__coll_staged {
  cube__coll_entry_t link; /* first: the list's; keyed by the part's stream */
  cube__coll_op_t* op;     /* a reference */
  cube__memory_t* dst_mem; /* a binding reference; NULL when nothing is written back */
  uint64_t dst_offset;
  uint64_t bytes;
  void* src_host; /* scratch buffers (NULL when unused) */
  void* dst_host;
} cube__coll_staged_t;

static cube__coll_list_t g_staged = CUBE__COLL_LIST_INIT(g_staged);

static void cube__coll_staged_free(cube__coll_staged_t* e) {
  if (e->dst_mem) cube__memory_unref(e->dst_mem);
  cube__coll_scratch_put(e->src_host);
  cube__coll_scratch_put(e->dst_host);
  cube__coll_op_unref(e->op);
  free(e);
}

/* Keeps |part|'s host copies until its stream's next sync_collective (called
 * with the op found and the comm's lock held, before the part arrives). */
void cube__coll_staged_add(cube__coll_part_t* part, cube__coll_op_t* op, void* src_host,
                           void* dst_host, bool write_back) {
  cube__coll_staged_t* e = calloc(1, sizeof(*e));
  if (!e) {
    /* Without the record the result cannot be written back: fail the op
     * rather than lose it silently. */
    cube__coll_op_complete_locked(
        op,
        cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "collective: no host memory to stage a part"));
    return;
  }
  e->link.stream = part->stream;
  e->op = op;
  atomic_fetch_add(&op->refs, 1);
  if (write_back && part->dst_mem) {
    e->dst_mem = part->dst_mem;
    cube__memory_ref(e->dst_mem);
  }
  e->dst_offset = part->dst_offset;
  e->bytes = part->bytes;
  e->src_host = src_host;
  e->dst_host = dst_host;
  cube__coll_list_append(&g_staged, &e->link);
}

/* Copies |bytes| of |mem| (+ |offset|) into |host| (or back, |to_device|) on
 * stream |st|. */
static cube_status_t cube__coll_staged_copy(cube__stream_t* st, cube__memory_t* mem,
                                            uint64_t offset, uint64_t bytes, void* host,
                                            bool to_device) {
  const cube__server_t* s = st->server;
  const cube__storage_t* storage;
  uint64_t off, sz;
  if (!mem || !cube__memory_resolve(mem, &storage, &off, &sz))
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "memory %" PRIu64 " is not bound",
                             mem ? mem->id : 0);
  if (bytes == 0) return CUBE_OK;
  CUBE_RETURN_IF_ERROR(cube__stream_order(st, mem));
  return to_device ? cube__backend_write(&s->be, st->backend_stream, storage, off + offset, bytes,
                                         host, bytes, 1)
                   : cube__backend_read(&s->be, st->backend_stream, host, storage, off + offset,
                                        bytes, bytes, 1);
}

static cube_status_t cube__coll_staged_all_reduce(cube__comm_t* c, cube__coll_part_t* part,
                                                  cube__coll_op_t** out_op) {
  size_t n = (size_t)part->bytes;
  void* src = cube__coll_scratch_get(n ? n : 1);
  void* dst = cube__coll_scratch_get(n ? n : 1);
  cube_status_t rs = src && dst ? CUBE_OK
                                : cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                                                    "no host memory to stage %zu bytes", n);
  if (!rs)
    rs = cube__coll_staged_copy(part->stream, part->src_mem, part->src_offset, part->bytes, src,
                                false);
  if (rs || !src || !dst) {
    /* The op records the failure; the buffers are not kept. */
    cube__coll_scratch_put(src);
    cube__coll_scratch_put(dst);
    return cube__coll_host_all_reduce_at(c, part, NULL, NULL, rs, false, out_op);
  }
  return cube__coll_host_all_reduce_at(c, part, src, dst, CUBE_OK, true, out_op);
}

static cube_status_t cube__coll_staged_p2p(cube__comm_t* c, cube__coll_part_t* part, bool is_send,
                                           cube__coll_op_t** out_op) {
  size_t n = (size_t)part->bytes;
  void* p = cube__coll_scratch_get(n ? n : 1);
  cube_status_t rs =
      p ? CUBE_OK
        : cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "no host memory to stage %zu bytes", n);
  if (!rs && is_send)
    rs = cube__coll_staged_copy(part->stream, part->src_mem, part->src_offset, part->bytes, p,
                                false);
  if (rs) {
    cube__coll_scratch_put(p);
    return cube__coll_host_p2p_at(c, part, is_send, NULL, rs, false, out_op);
  }
  return cube__coll_host_p2p_at(c, part, is_send, p, CUBE_OK, true, out_op);
}

static cube_status_t cube__coll_staged_send(cube__comm_t* c, cube__coll_part_t* part,
                                            cube__coll_op_t** out_op) {
  return cube__coll_staged_p2p(c, part, true, out_op);
}

static cube_status_t cube__coll_staged_recv(cube__comm_t* c, cube__coll_part_t* part,
                                            cube__coll_op_t** out_op) {
  return cube__coll_staged_p2p(c, part, false, out_op);
}

/* On |stream|'s runner, after its pending operations completed: writes back
 * the results of its staged parts, in the order they were queued. */
static cube_status_t cube__coll_staged_sync(cube__comm_t* comm, cube__stream_t* stream) {
  (void)comm;
  /* Every part queued on this stream before this sync is complete: the wait
   * before this call waited for (or abandoned) its operation. */
  cube__coll_entry_t* mine = cube__coll_list_take(&g_staged, stream, NULL, NULL);
  cube_status_t errors = CUBE_OK;
  while (mine) {
    cube__coll_staged_t* e = (cube__coll_staged_t*)mine;
    mine = mine->next;
    cube__event_wait(&e->op->done, UINT64_MAX); /* done already; orders the reads below */
    /* A failed operation's error was already returned by the wait. */
    if (!e->op->status && e->dst_mem) {
      cube_status_t st =
          cube__coll_staged_copy(stream, e->dst_mem, e->dst_offset, e->bytes, e->dst_host, true);
      if (st) errors = cube__status_join(errors, cube__status_annotate(st, "writing a collective's "
                                                                            "result back"));
    }
    cube__coll_staged_free(e);
  }
  return errors;
}

/* After every communicator was destroyed: the parts no sync took. */
static void cube__coll_staged_shutdown(void) {
  cube__coll_entry_t* e = cube__coll_list_take_all(&g_staged);
  while (e) {
    cube__coll_staged_t* x = (cube__coll_staged_t*)e;
    e = e->next;
    cube__coll_staged_free(x);
  }
}

const cube__coll_transport_t cube__coll_staged_transport = {
    .id = "staged",
    .name = "device memory through host buffers",
    .all_reduce = cube__coll_staged_all_reduce,
    .send = cube__coll_staged_send,
    .recv = cube__coll_staged_recv,
    .sync = cube__coll_staged_sync,
    .shutdown = cube__coll_staged_shutdown,
};
