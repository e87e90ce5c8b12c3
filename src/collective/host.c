/* The host transport (CPU devices, any backend whose memory is host memory):
 * the participants of this process meet in the rendezvous (rendezvous.c);
 * the last one to arrive performs the operation for all, in blocks of
 * CUBE__COLL_BLOCK bytes that the waiting participants help with, or, when
 * the communicator spans MPI ranks, alone: it reduces the local parts,
 * exchanges the partial result with the other ranks (mpi.c) and combines
 * them in rank order. A send or receive whose peer is in another process is
 * its MPI message. The staged transport (staged.c) joins the same rendezvous
 * with host copies of its parts.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "collective/coll_internal.h"
#include "memory/memory.h"
#include "memory/taint.h"
#include "platform/platform.h"

#define CUBE__COLL_BLOCK (256u * 1024u) /* bytes reduced per pass over the parts */

//===----------------------------------------------------------------------===//
// Performing
//===----------------------------------------------------------------------===//

/* Adds to |op|'s taint a root for what other ranks flagged as made from
 * memory without valid contents (CUBE__MPI_FLAG_SPOILED): the ranks
 * |ranks[i]| whose |flags[i]| say so. Taint does not cross processes as a
 * chain: the root names the ranks, whose own reads name why. */
static void cube__coll_remote_spoiled(cube__coll_op_t* op, const char* what, uint32_t count,
                                      const uint32_t* ranks, const uint32_t* flags) {
  char list[160];
  size_t o = 0;
  uint32_t n = 0;
  list[0] = 0;
  for (uint32_t i = 0; i < count; ++i) {
    if (!(flags[i] & CUBE__MPI_FLAG_SPOILED)) continue;
    if (o + 16 < sizeof(list))
      o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%u", n ? ", " : "", ranks[i]);
    ++n;
  }
  if (!n) return;
  cube_status_t st = cube__status_make(
      CUBE_STATUS_DATA_LOST,
      "what rank%s %s sent was made from memory that held no valid contents there (a read of it "
      "on that rank names why)",
      n == 1 ? "" : "s", list);
  cube__taint_t* root = cube__taint_create(st, what);
  cube_status_free(st);
  if (!root) return; /* no host memory: nothing more is known */
  pthread_mutex_lock(&op->comm->lock);
  cube__taint_t* u = cube__taint_union(op->spoiled, root);
  cube__taint_unref(op->spoiled);
  op->spoiled = u;
  pthread_mutex_unlock(&op->comm->lock);
  cube__taint_unref(root);
}

/* Reduces the local parts of |op| into every local dst, exchanging with the
 * other ranks when the communicator spans several. */
static cube_status_t cube__coll_host_reduce(cube__coll_op_t* op, uint64_t timeout_ns) {
  cube__comm_t* c = op->comm;
  uint32_t esize = cube_dtype_size(op->dtype);
  uint64_t count = op->bytes / esize;
  uint32_t first = UINT32_MAX;
  for (uint32_t i = 0; i < op->nslots; ++i)
    if (op->slots[i].has && first == UINT32_MAX) first = i;
  if (first == UINT32_MAX) return CUBE_OK;
  /* Across ranks: this rank's partial, then every rank's partial in rank
   * order, so that each rank computes the same result. */
  void* partial = cube__coll_scratch_get(op->bytes);
  void** received = calloc(c->rank_count, sizeof(void*));
  uint32_t* others = calloc(c->rank_count, sizeof(uint32_t));
  uint32_t* flags = calloc(c->rank_count, sizeof(uint32_t));
  cube_status_t st = CUBE_OK;
  if (!partial || !received || !others || !flags) {
    st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "no host memory for the partial result");
    goto done;
  }
  memcpy(partial, op->slots[first].src, op->bytes);
  for (uint32_t i = first + 1; i < op->nslots; ++i)
    if (op->slots[i].has) cube__reduce_combine(op->dtype, op->op, partial, op->slots[i].src, count);
  uint32_t no = 0;
  for (uint32_t k = 0; k < c->rank_count; ++k)
    if (c->ranks[k] != c->my_rank) others[no++] = c->ranks[k];
  /* This rank's parts all arrived: their taint is final. */
  pthread_mutex_lock(&c->lock);
  uint32_t mine = op->spoiled ? CUBE__MPI_FLAG_SPOILED : 0u;
  pthread_mutex_unlock(&c->lock);
  cube__mpi_header_t h = {c->hash, op->seq, op->bytes, (uint32_t)op->kind, (uint32_t)op->dtype,
                          (uint32_t)op->op, c->local_per_rank, c->my_rank, mine};
  char what[320];
  cube__coll_op_name(op, what, sizeof(what));
  /* Queued before a shrink found one of its ranks lost: fail now rather than
   * wait out the timeout for it. */
  st = cube__coll_lost_check(c, what);
  if (!st)
    st = cube__mpi_exchange(c->hash * 4u + 1u, &h, partial, no, others, received, flags,
                            cube__now_ns() + timeout_ns, what);
  if (st) goto done;
  cube__coll_remote_spoiled(op, what, no, others, flags);
  /* received[j] belongs to others[j]; combine in rank order into |acc|. */
  void* acc = NULL;
  uint32_t j = 0;
  for (uint32_t k = 0; k < c->rank_count; ++k) {
    const void* p = c->ranks[k] == c->my_rank ? partial : received[j++];
    if (!acc) {
      acc = cube__coll_scratch_get(op->bytes);
      if (!acc) {
        st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "no host memory for the result");
        goto done;
      }
      memcpy(acc, p, op->bytes);
    } else {
      cube__reduce_combine(op->dtype, op->op, acc, p, count);
    }
  }
  cube__reduce_finish(op->dtype, op->op, acc, count, c->n);
  for (uint32_t i = 0; i < op->nslots; ++i)
    if (op->slots[i].has) memcpy(op->slots[i].dst, acc, op->bytes);
  cube__coll_scratch_put(acc);
done:
  if (received)
    for (uint32_t k = 0; k < c->rank_count; ++k) cube__coll_scratch_put(received[k]);
  free(received);
  free(others);
  free(flags);
  cube__coll_scratch_put(partial);
  return st;
}

/* Block |b| of a shared operation: reduce (through |tmp|, CUBE__COLL_BLOCK
 * bytes) or copy. */
static void cube__coll_op_block(cube__coll_op_t* op, uint64_t b, void* tmp) {
  if (op->kind != CUBE_COLLECTIVE_ALL_REDUCE) {
    uint64_t off = b * CUBE__COLL_BLOCK;
    uint64_t len = op->nblocks == 1 ? op->bytes
                   : op->bytes - off < CUBE__COLL_BLOCK ? op->bytes - off : CUBE__COLL_BLOCK;
    memmove((char*)op->slots[1].dst + off, (const char*)op->slots[0].src + off, len);
    return;
  }
  uint32_t esize = cube_dtype_size(op->dtype);
  uint64_t block_elems = CUBE__COLL_BLOCK / esize, count = op->bytes / esize;
  uint64_t e0 = b * block_elems;
  uint64_t m = count - e0 < block_elems ? count - e0 : block_elems;
  uint64_t off = e0 * esize, len = m * esize;
  uint32_t first = 0;
  while (!op->slots[first].has) ++first;
  memcpy(tmp, (const char*)op->slots[first].src + off, len);
  for (uint32_t i = first + 1; i < op->nslots; ++i)
    if (op->slots[i].has)
      cube__reduce_combine(op->dtype, op->op, tmp, (const char*)op->slots[i].src + off, m);
  cube__reduce_finish(op->dtype, op->op, tmp, m, op->comm->n);
  for (uint32_t i = 0; i < op->nslots; ++i)
    if (op->slots[i].has) memcpy((char*)op->slots[i].dst + off, tmp, len);
}

/* Takes blocks of a started shared operation until none is left; the one who
 * finishes the last block completes it. A helper without memory for its
 * staging block just does not help. */
void cube__coll_op_help(cube__coll_op_t* op) {
  if (!op->shared) return;
  if (atomic_load_explicit(&op->next_block, memory_order_relaxed) >= op->nblocks) return;
  void* tmp = NULL;
  if (op->kind == CUBE_COLLECTIVE_ALL_REDUCE) {
    tmp = cube__coll_scratch_get(CUBE__COLL_BLOCK);
    if (!tmp) return;
  }
  for (;;) {
    uint64_t b = atomic_fetch_add_explicit(&op->next_block, 1, memory_order_relaxed);
    if (b >= op->nblocks) break;
    cube__coll_op_block(op, b, tmp);
    if (atomic_fetch_add_explicit(&op->blocks_done, 1, memory_order_acq_rel) + 1 == op->nblocks) {
      cube__coll_op_record(op, cube__now_ns());
      pthread_mutex_lock(&op->comm->lock);
      cube__coll_op_complete_locked(op, CUBE_OK);
      pthread_mutex_unlock(&op->comm->lock);
    }
  }
  cube__coll_scratch_put(tmp);
}

/* The last participant of this process performs |op|: in blocks that the
 * waiting participants help with (in-process), or alone (across ranks). */
static void cube__coll_op_perform(cube__coll_op_t* op, uint64_t timeout_ns) {
  cube__comm_t* c = op->comm;
  pthread_mutex_lock(&c->lock);
  bool skip = op->complete;
  pthread_mutex_unlock(&c->lock);
  if (skip) return;
  bool p2p = op->kind != CUBE_COLLECTIVE_ALL_REDUCE;
  if (p2p || c->rank_count <= 1) {
    /* The performer needs its staging block before it may start. */
    void* probe = p2p ? NULL : cube__coll_scratch_get(CUBE__COLL_BLOCK);
    if (!p2p && !probe) {
      char what[320];
      pthread_mutex_lock(&c->lock);
      cube__coll_op_complete_locked(
          op, cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory for a staging block",
                                cube__coll_op_name(op, what, sizeof(what))));
      pthread_mutex_unlock(&c->lock);
      return;
    }
    cube__coll_scratch_put(probe);
    uint64_t nb = (op->bytes + CUBE__COLL_BLOCK - 1) / CUBE__COLL_BLOCK;
    if (!p2p) {
      uint64_t be = CUBE__COLL_BLOCK / cube_dtype_size(op->dtype);
      uint64_t count = op->bytes / cube_dtype_size(op->dtype);
      nb = (count + be - 1) / be;
    } else {
      /* Overlapping views of one buffer: one block, in order. */
      const char* a = op->slots[0].src;
      const char* d = op->slots[1].dst;
      if (a < d + op->bytes && d < a + op->bytes) nb = 1;
    }
    if (nb == 0) {
      cube__coll_op_record(op, cube__now_ns());
      pthread_mutex_lock(&c->lock);
      cube__coll_op_complete_locked(op, CUBE_OK);
      pthread_mutex_unlock(&c->lock);
      return;
    }
    op->nblocks = nb;
    op->shared = true;
    cube__event_set(&op->started);
    cube__coll_op_help(op);
    return;
  }
  cube__event_set(&op->started);
  cube_status_t st = cube__coll_host_reduce(op, timeout_ns);
  uint64_t t_end = cube__now_ns();
  if (st) {
    char what[320];
    st = cube__status_annotate(st, "%s", cube__coll_op_name(op, what, sizeof(what)));
  } else {
    cube__coll_op_record(op, t_end);
  }
  pthread_mutex_lock(&c->lock);
  cube__coll_op_complete_locked(op, st);
  pthread_mutex_unlock(&c->lock);
}

//===----------------------------------------------------------------------===//
// The host transport
//===----------------------------------------------------------------------===//

/* The rendezvous of an all_reduce part whose data is at |src| and goes to
 * |dst| (host memory); |rs| a failure to get there (consumed). |staged|: the
 * part's host copies (src, dst) are kept until its sync writes dst back. */
cube_status_t cube__coll_host_all_reduce_at(cube__comm_t* c, cube__coll_part_t* part, void* src,
                                            void* dst, cube_status_t rs, bool staged,
                                            cube__coll_op_t** out_op) {
  uint64_t timeout_ns = cube__coll_task_timeout_ns();
  pthread_mutex_lock(&c->lock);
  uint64_t seq = c->ar_seq[part->rank]++;
  cube__coll_op_t* op =
      cube__coll_op_find_locked(c, CUBE_COLLECTIVE_ALL_REDUCE, 0, 0, seq, c->local_n, c->n);
  if (!op) {
    pthread_mutex_unlock(&c->lock);
    cube_status_free(rs);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "all_reduce #%" PRIu64 ": no host memory",
                             seq);
  }
  atomic_fetch_add(&op->refs, 1); /* the caller's */
  if (rs) {
    char what[320];
    cube__coll_op_name(op, what, sizeof(what));
    cube__coll_op_complete_locked(op, cube__status_annotate(rs, "%s", what));
  }
  if (staged) cube__coll_staged_add(part, op, src, dst, true);
  bool last = cube__coll_op_arrive_locked(op, part->rank, part, src, dst);
  pthread_mutex_unlock(&c->lock);
  if (last) {
    cube__coll_op_perform(op, timeout_ns);
    cube__coll_op_unref(op); /* the list's */
  }
  *out_op = op;
  return CUBE_OK;
}

static cube_status_t cube__coll_host_all_reduce(cube__comm_t* c, cube__coll_part_t* part,
                                                cube__coll_op_t** out_op) {
  void* src = NULL;
  void* dst = NULL;
  cube_status_t rs = cube__coll_resolve(part->src_mem, part->src_offset, &src);
  if (!rs) rs = cube__coll_resolve(part->dst_mem, part->dst_offset, &dst);
  return cube__coll_host_all_reduce_at(c, part, src, dst, rs, false, out_op);
}

/* A send or receive part whose data is at (or goes to) |p| in host memory;
 * |rs| a failure to get there (consumed). |staged|: |p| is the part's host
 * copy, kept until its sync (a receive writes it back then). */
cube_status_t cube__coll_host_p2p_at(cube__comm_t* c, cube__coll_part_t* part, bool is_send,
                                     void* p, cube_status_t rs, bool staged,
                                     cube__coll_op_t** out_op) {
  uint64_t timeout_ns = cube__coll_task_timeout_ns();
  uint32_t from = is_send ? part->rank : part->peer;
  uint32_t to = is_send ? part->peer : part->rank;
  uint32_t other = is_send ? to : from;
  if (!c->local[other]) {
    /* Across processes: the message itself, on this runner, until the
     * deadline. */
    pthread_mutex_lock(&c->lock);
    uint64_t seq = is_send ? c->send_seq[from * c->n + to]++ : c->recv_seq[from * c->n + to]++;
    pthread_mutex_unlock(&c->lock);
    /* A send made from memory without valid contents says so; the
     * receiver's destination takes a root naming this rank. */
    uint32_t flags = is_send && part->src_mem && cube__memory_taint(part->src_mem)
                         ? CUBE__MPI_FLAG_SPOILED
                         : 0u;
    cube__mpi_header_t h = {c->hash, seq, part->bytes, (uint32_t)CUBE_COLLECTIVE_SEND, 0, 0,
                            c->local_per_rank, c->my_rank, flags};
    char what[200], a[32], b[32];
    snprintf(what, sizeof(what), "send/recv #%" PRIu64 " %s -> %s (%" PRIu64 " bytes)", seq,
             cube__coll_dev_name(c->ids[from], a, sizeof(a)),
             cube__coll_dev_name(c->ids[to], b, sizeof(b)), part->bytes);
    uint64_t t0 = cube__now_ns();
    cube_status_t st = rs;
    uint64_t tag = c->hash * 4u + 2u + (uint64_t)from * 8191u + to;
    if (!st)
      st = is_send ? cube__mpi_send(tag, &h, p, c->rank_of[to], t0 + timeout_ns, what)
                   : cube__mpi_recv(tag, &h, p, &flags, c->rank_of[from], t0 + timeout_ns, what);
    if (!st)
      cube__coll_part_record(part, is_send ? CUBE_COLLECTIVE_SEND : CUBE_COLLECTIVE_RECV, c, seq,
                             t0, cube__now_ns());
    cube__coll_op_t* op =
        cube__coll_op_solo(c, CUBE_COLLECTIVE_SEND, from, to, seq, part->bytes, st);
    if (!op) {
      if (staged) cube__coll_scratch_put(p);
      return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", what);
    }
    if (!is_send && !op->status) {
      uint32_t sender = c->rank_of[from];
      cube__coll_remote_spoiled(op, what, 1, &sender, &flags);
    }
    if (staged) {
      /* The host copy is the part's until its sync, which writes a received
       * one back to the device (and gives the buffer back either way). */
      pthread_mutex_lock(&c->lock);
      cube__coll_staged_add(part, op, is_send ? p : NULL, is_send ? NULL : p, !is_send);
      pthread_mutex_unlock(&c->lock);
    }
    *out_op = op;
    return CUBE_OK;
  }
  pthread_mutex_lock(&c->lock);
  uint64_t seq = is_send ? c->send_seq[from * c->n + to]++ : c->recv_seq[from * c->n + to]++;
  cube__coll_op_t* op = cube__coll_op_find_locked(c, CUBE_COLLECTIVE_SEND, from, to, seq, 2, 2);
  if (!op) {
    pthread_mutex_unlock(&c->lock);
    cube_status_free(rs);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "send/recv #%" PRIu64 ": no host memory",
                             seq);
  }
  atomic_fetch_add(&op->refs, 1);
  if (rs) {
    char what[320];
    cube__coll_op_name(op, what, sizeof(what));
    cube__coll_op_complete_locked(op, cube__status_annotate(rs, "%s", what));
  }
  if (staged) cube__coll_staged_add(part, op, is_send ? p : NULL, is_send ? NULL : p, !is_send);
  bool last = cube__coll_op_arrive_locked(op, is_send ? 0 : 1, part, is_send ? p : NULL,
                                          is_send ? NULL : p);
  pthread_mutex_unlock(&c->lock);
  if (last) {
    cube__coll_op_perform(op, timeout_ns);
    cube__coll_op_unref(op);
  }
  *out_op = op;
  return CUBE_OK;
}

static cube_status_t cube__coll_host_p2p(cube__comm_t* c, cube__coll_part_t* part, bool is_send,
                                         cube__coll_op_t** out_op) {
  void* p = NULL;
  cube_status_t rs = is_send ? cube__coll_resolve(part->src_mem, part->src_offset, &p)
                             : cube__coll_resolve(part->dst_mem, part->dst_offset, &p);
  return cube__coll_host_p2p_at(c, part, is_send, p, rs, false, out_op);
}

static cube_status_t cube__coll_host_send(cube__comm_t* c, cube__coll_part_t* part,
                                          cube__coll_op_t** out_op) {
  return cube__coll_host_p2p(c, part, true, out_op);
}

static cube_status_t cube__coll_host_recv(cube__comm_t* c, cube__coll_part_t* part,
                                          cube__coll_op_t** out_op) {
  return cube__coll_host_p2p(c, part, false, out_op);
}

const cube__coll_transport_t cube__coll_host_transport = {
    .id = "host",
    .name = "shared memory in-process, MPI across processes",
    .all_reduce = cube__coll_host_all_reduce,
    .send = cube__coll_host_send,
    .recv = cube__coll_host_recv,
};
