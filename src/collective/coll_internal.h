/* The rendezvous shared by the transports of src/collective (private to the
 * module): communicators, operation records and their helpers, records of
 * finished collectives and the per-stream entry lists (rendezvous.c); the
 * host rendezvous that the staged transport joins too (host.c); the staged
 * transport's entries (staged.c); the pending operations of a stream and the
 * task's timeout (collective.c); scratch buffers at shutdown (scratch.c).
 * Used by the transports kept in files of their own (nccl/nccl.c). Not for
 * the rest of the library (collective.h is its interface).
 */
#ifndef CUBE_COLLECTIVE_COLL_INTERNAL_H_
#define CUBE_COLLECTIVE_COLL_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>

#include "collective/collective.h"
#include "platform/platform.h"

typedef struct cube__coll_slot {
  bool has;
  cube__coll_part_t part; /* the memory references are the op's while it runs */
  void* src;              /* resolved pointers (host memory, or device addresses) */
  void* dst;
  void* aux;              /* the transport's (nccl: the compute stream's event) */
} cube__coll_slot_t;

struct cube__coll_op {
  atomic_uint refs;
  cube__comm_t* comm;
  cube_collective_kind_t kind; /* ALL_REDUCE, or SEND for a send/recv pair */
  uint32_t from, to;           /* send/recv */
  uint64_t seq;
  uint32_t expected; /* parts of this process */
  uint32_t arrived;  /* under comm->lock */
  bool linked;       /* in comm->ops */
  bool complete;     /* under comm->lock; status set, done set */
  uint64_t bytes;    /* of the first part */
  cube_dtype_t dtype;
  cube_reduce_op_t op;
  uint64_t t_first, t_last;
  uint32_t nslots;
  cube__coll_slot_t* slots; /* all_reduce: one per rank; pair: [0] send, [1] recv */
  cube_status_t status;
  /* Under comm->lock: the union of the taints (memory/taint.h) of the inputs
   * of this process's parts that joined, NULL while all were valid. Each
   * part's destination takes it where the part is settled, in its stream's
   * order (collective.c, cube__coll_pending_settle): a recv gets the taint
   * of what was sent, an all_reduce that of every input. */
  struct cube__taint* spoiled;
  /* Set when the performer starts (or the operation ends without it): from
   * then on the waiters of this process help with the blocks. */
  cube__event_t started;
  bool shared;          /* blocks may be taken by helpers (set before started) */
  uint64_t nblocks;     /* set before started */
  atomic_uint_fast64_t next_block, blocks_done;
  cube__event_t done;
  /* Frees a slot's |aux| that the transport did not take (a failed or
   * abandoned operation); NULL when the transport stores none. */
  void (*aux_free)(void* aux);
  struct cube__coll_op* next;
};

struct cube__comm {
  struct cube__comm* next;
  uint64_t hash;
  uint32_t n;
  cube_device_id_t* ids; /* sorted, global */
  uint32_t* rank_of;     /* process (MPI rank) of each participant */
  bool* local;
  uint32_t local_n;
  uint32_t* ranks; /* distinct processes, ascending */
  uint32_t rank_count;
  uint32_t my_rank;
  uint32_t local_per_rank; /* devices of the backend per process (global ids) */
  const cube__coll_transport_t* transport;
  void* tstate; /* the transport's state (nccl: its communicators), freed by comm_destroy */
  pthread_mutex_t lock;
  uint32_t shrinks;   /* shrinks of this communicator run by this process (under lock) */
  uint64_t* ar_seq;   /* [n] all_reduces joined */
  uint64_t* send_seq; /* [n*n] sends from i to j */
  uint64_t* recv_seq; /* [n*n] recvs at j from i (index i*n+j) */
  cube__coll_op_t* ops;
};

/* cube__coll_comm_get without the check for lost ranks (the shrink's). */
cube_status_t cube__coll_comm_find(const char* fn, size_t count, const cube_device_id_t* devices,
                                   cube_device_id_t self, cube__comm_t** out_comm,
                                   uint32_t* out_rank);

/* Lost ranks (shrink.c) ----------------------------------------------------- */

/* PEER_LOST naming the ranks of |comm| that a shrink found lost, prefixed
 * with |what|; CUBE_OK when it has none (one relaxed load when no rank was
 * ever lost). */
cube_status_t cube__coll_lost_check(const cube__comm_t* comm, const char* what);

/* World (world.c) ---------------------------------------------------------- */

/* "cuda:3" into |buf|. */
const char* cube__coll_dev_name(cube_device_id_t d, char* buf, size_t size);

/* Operations (rendezvous.c; the comm's lock where the name says so) -------- */

void cube__coll_op_unref(cube__coll_op_t* op);
/* "all_reduce #3 (f32 sum, 1024 bytes) over {cpu:0, cpu:1}" into |buf|. */
const char* cube__coll_op_name(const cube__coll_op_t* op, char* buf, size_t size);
/* Completes |op| with |status| (consumed) if it is not yet: lets go of the
 * parts' memory references and sets its events. */
void cube__coll_op_complete_locked(cube__coll_op_t* op, cube_status_t status);
/* Finds or creates the operation (kind, from, to, seq). The list's reference
 * is the creation's; NULL when out of memory. */
cube__coll_op_t* cube__coll_op_find_locked(cube__comm_t* c, cube_collective_kind_t kind,
                                           uint32_t from, uint32_t to, uint64_t seq,
                                           uint32_t expected, uint32_t nslots);
/* Stores |part| (its memory references move into the op) in |slot|; true if
 * it is the last part of this process. A mismatch completes the op with the
 * error naming both sides. */
bool cube__coll_op_arrive_locked(cube__coll_op_t* op, uint32_t slot, cube__coll_part_t* part,
                                 void* src, void* dst);
/* A completed operation that no one else shares (MPI point to point), with
 * |status| (consumed); NULL when out of memory. */
cube__coll_op_t* cube__coll_op_solo(cube__comm_t* c, cube_collective_kind_t kind, uint32_t from,
                                    uint32_t to, uint64_t seq, uint64_t bytes,
                                    cube_status_t status);
/* Lets go of the part's memory references. */
void cube__coll_part_release(cube__coll_part_t* p);

/* The address of |mem| + |offset| (a device address on device backends). */
cube_status_t cube__coll_resolve(cube__memory_t* mem, uint64_t offset, void** out);

/* Records (rendezvous.c) --------------------------------------------------- */

/* Stores |r| as the last record of |server|'s device (and profiles it). */
void cube__coll_record_store(struct cube__server* server, const cube_collective_record_t* r);
/* The record of |op| (time_ns given), without the per-device fields. */
void cube__coll_record_of(const cube__coll_op_t* op, uint64_t time_ns, cube_collective_record_t* r);
/* The records of |op|, ended at |t_end|, on the devices of its parts. */
void cube__coll_op_record(const cube__coll_op_t* op, uint64_t t_end);
/* The record of a send or receive |part| that was its MPI message alone
 * (sequence |seq|, from |t0| to |t1|). */
void cube__coll_part_record(cube__coll_part_t* part, cube_collective_kind_t kind,
                            const cube__comm_t* c, uint64_t seq, uint64_t t0, uint64_t t1);

/* Entries of streams (rendezvous.c) ---------------------------------------- */

/* What a transport keeps per part until the part's stream's sync_collective
 * (the staged transport's host copies, the nccl transport's parts in
 * flight): an entry starts with this link. */
typedef struct cube__coll_entry {
  struct cube__coll_entry* next;
  cube__stream_t* stream; /* the part's stream: the key */
} cube__coll_entry_t;

/* Entries in the order they were added. |lock| guards the links (a transport
 * may walk the list under it). */
typedef struct cube__coll_list {
  pthread_mutex_t lock;
  cube__coll_entry_t* head;
  cube__coll_entry_t** tail;
} cube__coll_list_t;

#define CUBE__COLL_LIST_INIT(list) {PTHREAD_MUTEX_INITIALIZER, NULL, &(list).head}

/* Appends the entries linked from |chain| (NULL: nothing). */
void cube__coll_list_append(cube__coll_list_t* l, cube__coll_entry_t* chain);
/* Takes the entries of |stream| off |l|, linked in the order they were
 * added: all of them, or, with |ready|, those before the first one of the
 * stream for which ready(entry, arg) is false (called under the list's lock),
 * so that a stream's entries are let go in their order. */
cube__coll_entry_t* cube__coll_list_take(cube__coll_list_t* l, const cube__stream_t* stream,
                                         bool (*ready)(const cube__coll_entry_t* e,
                                                       const void* arg),
                                         const void* arg);
/* Takes every entry off |l| (shutdown). */
cube__coll_entry_t* cube__coll_list_take_all(cube__coll_list_t* l);

/* Destroys every communicator (their transports' comm_destroy) and record. */
void cube__coll_rendezvous_shutdown(void);

/* The host rendezvous (host.c) --------------------------------------------- */

/* The rendezvous of an all_reduce part whose data is at |src| and goes to
 * |dst| (host memory); |rs| a failure to get there (consumed). |staged|: the
 * part's host copies (src, dst) are kept until its sync writes dst back. The
 * last part of this process performs the operation. */
cube_status_t cube__coll_host_all_reduce_at(cube__comm_t* c, cube__coll_part_t* part, void* src,
                                            void* dst, cube_status_t rs, bool staged,
                                            cube__coll_op_t** out_op);
/* A send or receive part whose data is at (or goes to) |p| in host memory;
 * |rs| a failure to get there (consumed). |staged|: |p| is the part's host
 * copy, kept until its sync (a receive writes it back then). */
cube_status_t cube__coll_host_p2p_at(cube__comm_t* c, cube__coll_part_t* part, bool is_send,
                                     void* p, cube_status_t rs, bool staged,
                                     cube__coll_op_t** out_op);
/* A waiter of |op| takes blocks of it until none is left, once it started
 * (nothing for an operation that is not shared in blocks). */
void cube__coll_op_help(cube__coll_op_t* op);

/* Keeps |part|'s host copies until its stream's next sync_collective (the
 * op found and the comm's lock held, before the part arrives); staged.c. */
void cube__coll_staged_add(cube__coll_part_t* part, cube__coll_op_t* op, void* src_host,
                           void* dst_host, bool write_back);

/* Pending operations and tasks (collective.c) ------------------------------ */

/* Records |op| (consumes the reference) as pending on |stream|, for the part
 * whose destination is |bytes| at |dst_offset| of |dst| (NULL: a send) and
 * whose own input had the taint |own| (NULL: valid, or none); both are
 * borrowed, and the caller's reference to |dst| must still be held (the
 * record takes its own references). On |stream|'s runner. */
void cube__coll_pending_add(cube__stream_t* stream, cube__comm_t* comm, cube__coll_op_t* op,
                            struct cube__memory* dst, uint64_t dst_offset, uint64_t bytes,
                            struct cube__taint* own);

/* Settles and forgets the operations pending on |stream| that completed
 * without error (their destinations take the taint of the operation's other
 * inputs). On |stream|'s runner, before its next part. */
void cube__coll_pending_settle_done(cube__stream_t* stream);

/* Waits for the operations pending on |stream|, at most |timeout_ns| for each
 * that is not complete, abandoning those whose participants did not all
 * join; returns their failures joined (NULL if none). */
cube_status_t cube__coll_pending_wait(cube__stream_t* stream, uint64_t timeout_ns);

/* The timeout of the collective task running on this thread (0 outside). */
uint64_t cube__coll_task_timeout_ns(void);

/* Frees the kept scratch buffers (scratch.c; shutdown). */
void cube__coll_scratch_shutdown(void);

#endif /* CUBE_COLLECTIVE_COLL_INTERNAL_H_ */
