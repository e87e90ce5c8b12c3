/* The rendezvous shared by the transports of src/collective: communicators,
 * operation records and their helpers (collective.c), for the transports
 * kept in files of their own (nccl.c). Not for the rest of the library.
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
  uint64_t* ar_seq;   /* [n] all_reduces joined */
  uint64_t* send_seq; /* [n*n] sends from i to j */
  uint64_t* recv_seq; /* [n*n] recvs at j from i (index i*n+j) */
  cube__coll_op_t* ops;
};

/* "cuda:3" into |buf|. */
const char* cube__dev_name(cube_device_id_t d, char* buf, size_t size);

/* Operation records (the comm's lock where the name says so). */
void cube__op_unref(cube__coll_op_t* op);
const char* cube__op_name(const cube__coll_op_t* op, char* buf, size_t size);
void cube__op_complete_locked(cube__coll_op_t* op, cube_status_t status);
cube__coll_op_t* cube__op_find_locked(cube__comm_t* c, cube_collective_kind_t kind, uint32_t from,
                                      uint32_t to, uint64_t seq, uint32_t expected,
                                      uint32_t nslots);
/* Stores |part| (its memory references move into the op) in |slot|; true if
 * it is the last part of this process. A mismatch completes the op with the
 * error naming both sides. */
bool cube__op_arrive_locked(cube__coll_op_t* op, uint32_t slot, cube__coll_part_t* part, void* src,
                            void* dst);
void cube__part_release(cube__coll_part_t* p);

/* The address of |mem| + |offset| (a device address on device backends). */
cube_status_t cube__resolve(cube__memory_t* mem, uint64_t offset, void** out);

/* Stores |r| as the last record of |server|'s device (and profiles it). */
void cube__coll_record_store(struct cube__server* server, const cube_collective_record_t* r);
/* The record of |op| (time_ns given), without the per-device fields. */
void cube__coll_record_of(const cube__coll_op_t* op, uint64_t time_ns, cube_collective_record_t* r);

/* The timeout of the collective task running on this thread (0 outside). */
uint64_t cube__coll_task_timeout_ns(void);

#endif /* CUBE_COLLECTIVE_COLL_INTERNAL_H_ */
