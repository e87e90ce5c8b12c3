/* Collectives: communicators, the rendezvous of participants, and the
 * transports that move the data (docs/collectives.md). This header is the
 * module's interface to the rest of the library; coll_internal.h is what the
 * transports share inside it.
 *
 * Files: collective.c (the transport registry, pending operations and their
 * wait, the tasks, quiesce / shutdown), world.c (this process's place, global
 * ids, the timeout), rendezvous.c (communicators, operations, records),
 * host.c, staged.c and nccl/ (the transports), scratch.c, reduce.c, mpi.c.
 *
 * Shape. A client call (src/client/collective_api.c) validates its
 * arguments, finds (or creates) the communicator of the sorted device set and
 * queues one task on its device's stream. That task, on the runner (or in inline mode on the
 * caller, under the device lock), hands this participant's part to the
 * backend's transport and returns without waiting for the others. A later
 * cube_client_sync_collective queues a task that waits (at most
 * CUBE_COLLECTIVE_TIMEOUT) until the parts queued before on that stream are
 * complete, and defers their failures to the stream.
 *
 * Transports. A table per backend (cube__coll_transport_t), chosen by
 * cube__coll_transport_for: every entry runs on the participant's runner,
 * in stream order, and must not wait for peers that the same thread may
 * still have to submit (one thread may drive every device):
 *  - host (CPU devices, any backend whose memory is host memory): the
 *    participants of this process meet in the communicator; the last one to
 *    arrive reduces (or copies) for all, through shared memory, and, when the
 *    communicator spans MPI ranks, exchanges the partial result with the other
 *    ranks over MPI point-to-point messages (the plugin loaded by
 *    src/collective/mpi.c: src/collective/mpi_plugin/);
 *  - staged (devices whose memory is not host memory, without a collective
 *    library: OpenCL; CUDA where NCCL does not load): the same rendezvous
 *    over host copies of the parts;
 *  - nccl (CUDA, src/collective/nccl/nccl.c): the same rendezvous, and the last
 *    participant of the process to arrive issues the NCCL calls of every
 *    local rank in one group, on each device's comm stream after an event
 *    of the participant's compute stream; sync_collective makes the compute
 *    stream wait for the comm stream's "done" event and waits for it (with
 *    the deadline) before the memory references are let go.
 *
 * Threading: everything here is thread-safe.
 */
#ifndef CUBE_COLLECTIVE_COLLECTIVE_H_
#define CUBE_COLLECTIVE_COLLECTIVE_H_

#include <stdbool.h>
#include <stdint.h>

#include "collective/mpi_abi.h"
#include "cube/collective.h"
#include "memory/memory.h"
#include "server/stream.h"

typedef struct cube__comm cube__comm_t;
typedef struct cube__coll_op cube__coll_op_t;

/* One participant's part, as its task hands it to the transport. The memory
 * references are owned by the part: a transport that keeps them sets the
 * fields to NULL. |stream| is the participant's stream (its server is
 * stream->server): the key of what a transport keeps until the stream's
 * sync_collective (two stream ids that map to one stream are one stream). */
typedef struct cube__coll_part {
  cube__stream_t* stream;
  cube__memory_t* src_mem; /* all_reduce, send */
  uint64_t src_offset;
  cube__memory_t* dst_mem; /* all_reduce, recv */
  uint64_t dst_offset;
  uint64_t bytes;
  cube_dtype_t dtype;
  cube_reduce_op_t op;
  uint32_t rank; /* this participant's place in the communicator */
  uint32_t peer; /* send/recv: the other participant's place */
} cube__coll_part_t;

typedef struct cube__coll_transport {
  const char* id;   /* "host", "staged", "nccl": what backend tables name (records, cube info) */
  const char* name; /* a description */
  /* CUBE_OK when the transport can be used in this process (NCCL loads),
   * else why not. NULL: always. */
  cube_status_t (*available)(void);
  /* A static line for cube info (the library and its version); NULL: name. */
  const char* (*describe)(void);
  /* Reaches other processes by itself (NCCL with its unique id through MPI or
   * a file); false: a communicator spanning processes needs MPI. */
  bool spans_processes_without_mpi;
  /* Per participant, once per communicator (at ensure_init). May be NULL. */
  cube_status_t (*comm_init)(cube__comm_t* comm, uint32_t rank);
  /* This participant's part. *out_op: an operation to wait on in
   * sync_collective (a reference), or NULL when the transport orders the
   * work on the device's own stream. */
  cube_status_t (*all_reduce)(cube__comm_t* comm, cube__coll_part_t* part,
                              cube__coll_op_t** out_op);
  cube_status_t (*send)(cube__comm_t* comm, cube__coll_part_t* part, cube__coll_op_t** out_op);
  cube_status_t (*recv)(cube__comm_t* comm, cube__coll_part_t* part, cube__coll_op_t** out_op);
  /* Orders the stream after its collectives (NULL: waiting on the operations
   * is enough). */
  cube_status_t (*sync)(cube__comm_t* comm, cube__stream_t* stream);
  void (*comm_destroy)(cube__comm_t* comm);
  /* Process-wide, may be NULL. quiesce: before the device queues shut down,
   * ends work in flight (NCCL: waits at most the collective timeout, then
   * aborts the communicators whose work does not finish, so that no device
   * synchronisation hangs on it). shutdown: after every communicator was
   * destroyed, frees what is left. */
  void (*quiesce)(void);
  void (*shutdown)(void);
} cube__coll_transport_t;

/* The transport of |backend|: the first of its table's collective_transports
 * that is available here; NULL when it has none. */
const cube__coll_transport_t* cube__coll_transport_for(cube_backend_t backend);

/* The in-process + MPI transport over host memory. */
extern const cube__coll_transport_t cube__coll_host_transport;
/* Devices whose memory is not host memory: parts staged through host buffers,
 * written back by the participant's sync_collective. */
extern const cube__coll_transport_t cube__coll_staged_transport;
/* NCCL (src/collective/nccl.c), built where the CUDA toolkit's headers are. */
extern const cube__coll_transport_t cube__coll_nccl_transport;

/* cube_shutdown, before the device queues shut down: every transport's quiesce. */
void cube__coll_quiesce(void);

/* World -------------------------------------------------------------------- */

typedef struct cube__coll_world {
  uint32_t rank, ranks; /* 0, 1 without MPI (or CUBE_COLLECTIVE_RANK/RANKS) */
  uint32_t local_cpu;   /* CPU devices per rank (CUBE_CPU_DEVICES) */
  bool mpi;             /* MPI is in use */
} cube__coll_world_t;

/* The process's place (starts MPI on first use when launched by mpirun;
 * without MPI, CUBE_COLLECTIVE_RANK / CUBE_COLLECTIVE_RANKS). */
cube_status_t cube__coll_world(cube__coll_world_t* out);

/* Devices of |backend| per process when its ids are global (index = process
 * x this + local index): CPU under MPI, CUDA with several processes; 0 when
 * ids are local. */
uint32_t cube__coll_per_rank(const cube__coll_world_t* w, cube_backend_t backend);

/* Global id of a local device, and the number of global devices of a backend
 * (local count x ranks for CPU, local count otherwise). */
cube_device_id_t cube__coll_global_id(cube_device_id_t local);
uint32_t cube__coll_global_count(cube_backend_t backend);

/* Communicators ------------------------------------------------------------ */

/* The communicator of the set |devices| (global ids, any order, no
 * duplicates), created on first use. *out_rank: the place of |self| in it
 * (INVALID_ARGUMENT naming the set when |self| is not a member). |fn| prefixes
 * messages. The communicator lives until cube__coll_shutdown. PEER_LOST
 * when the set holds a device of a rank that a shrink found lost. */
cube_status_t cube__coll_comm_get(const char* fn, size_t count, const cube_device_id_t* devices,
                                  cube_device_id_t self, cube__comm_t** out_comm,
                                  uint32_t* out_rank);

/* The shrink of |devices| (cube_client_shrink_collective, src/collective/
 * shrink.c): the surviving devices into |out_devices| (capacity |count|),
 * their number into *out_count, and their communicator set up for |self|. */
cube_status_t cube__coll_shrink(const char* fn, size_t count, const cube_device_id_t* devices,
                                cube_device_id_t self, size_t* out_count,
                                cube_device_id_t* out_devices);

/* "{cpu:0, cpu:1}" into |buf|. */
const char* cube__coll_comm_name(const cube__comm_t* comm, char* buf, size_t size);
uint32_t cube__coll_comm_size(const cube__comm_t* comm);
cube_device_id_t cube__coll_comm_device(const cube__comm_t* comm, uint32_t rank);

/* CUBE_COLLECTIVE_TIMEOUT in ns (default 60 s); INVALID_ARGUMENT when the
 * variable is not a positive number of seconds. */
cube_status_t cube__coll_timeout_ns(uint64_t* out_ns);

/* The last record of a local device; false before the first. */
bool cube__coll_last_record(cube_device_id_t local, cube_collective_record_t* out);

/* Destroys every communicator, pending list and record (cube_shutdown, after
 * the queues are shut down). */
void cube__coll_shutdown(void);

/* Queues participant |part| of a collective of |kind| on |stream| (the
 * client's, cube__client_stream; part->stream is set to it); |part|'s memory
 * references move into the task (also on failure). When |stream| captures,
 * the task is recorded into its graph instead (cube__graph_record_task, its
 * src and dst as the node's slots): each replay runs it again, as queued
 * here, with the replay's stream and buffers. The communicator is not
 * referenced: it lives until cube__coll_shutdown, and graphs are released
 * before cube_shutdown. */
cube_status_t cube__coll_submit(cube__stream_t* stream, cube__comm_t* comm,
                                cube_collective_kind_t kind, const cube__coll_part_t* part,
                                uint64_t timeout_ns);
/* Queues the sync_collective task on |stream| (recorded, as above, when it
 * captures: a replay waits at that node). */
cube_status_t cube__coll_submit_sync(cube__stream_t* stream, uint64_t timeout_ns);

/* Host buffers for large temporaries (staging blocks, partial results, MPI
 * messages), kept for reuse: a fresh buffer costs a page fault per 4 KiB on
 * first touch, which dominated large operations. 64-byte aligned; NULL when
 * out of host memory. put(NULL) does nothing; free() releases for good. */
void* cube__coll_scratch_get(size_t size);
void cube__coll_scratch_put(void* p);
void cube__coll_scratch_free(void* p);

/* Reductions (src/collective/reduce.c) ------------------------------------- */

/* acc[i] = op(acc[i], in[i]) for |count| elements of |dtype| (MEAN adds);
 * |acc| and |in| do not overlap. */
void cube__reduce_combine(cube_dtype_t dtype, cube_reduce_op_t op, void* acc, const void* in,
                          uint64_t count);
/* acc[i] /= n for MEAN, nothing otherwise. */
void cube__reduce_finish(cube_dtype_t dtype, cube_reduce_op_t op, void* acc, uint64_t count,
                         uint32_t n);

/* MPI (src/collective/mpi.c: the loader of the plugin, mpi_abi.h) ------------- */

/* Starts MPI if this process was launched by an MPI launcher (or
 * CUBE_COLLECTIVE_MPI=1), unless CUBE_COLLECTIVE_MPI=0: loads the MPI plugin
 * (libcube_mpi.so) then. *out_active false (rank 0 of 1) when MPI is not
 * wanted; UNAVAILABLE naming the paths tried when it is wanted and the plugin
 * does not load. */
cube_status_t cube__mpi_start(bool* out_active, uint32_t* out_rank, uint32_t* out_ranks);

/* Exchanges this rank's |bytes| of |partial| with the |count| other |ranks|
 * (message tag derived from |tag_key|), each message carrying |header|
 * (cube__mpi_header_t, mpi_abi.h). out_received[i] gets rank ranks[i]'s
 * payload (a scratch buffer: cube__coll_scratch_put it), out_flags[i] (when
 * |out_flags| is not NULL) the flags of its header. Waits until
 * |deadline_ns| (cube__now_ns clock); on timeout the error names the ranks
 * whose message did not come. The functions below are UNAVAILABLE
 * unless cube__mpi_start made MPI active. */
cube_status_t cube__mpi_exchange(uint64_t tag_key, const cube__mpi_header_t* header,
                                 const void* partial, uint32_t count, const uint32_t* ranks,
                                 void** out_received, uint32_t* out_flags, uint64_t deadline_ns,
                                 const char* what);

/* Point to point: sends |bytes| with |header| to |rank| / receives from
 * |rank| into |dst| (*out_flags, when not NULL, the flags of the sender's
 * header), until |deadline_ns|. */
/* A shrink found a rank dead: MPI_Finalize is not called at exit (it would
 * wait for the dead rank). Nothing when MPI is not active. */
void cube__mpi_peer_lost(void);

/* cube__mpi_exchange, except that a rank whose message did not come by
 * |deadline_ns| is no error: its out_received entry is NULL. */
cube_status_t cube__mpi_gather(uint64_t tag_key, const cube__mpi_header_t* header,
                               const void* partial, uint32_t count, const uint32_t* ranks,
                               void** out_received, uint32_t* out_flags, uint64_t deadline_ns,
                               const char* what);

cube_status_t cube__mpi_send(uint64_t tag_key, const cube__mpi_header_t* header, const void* src,
                             uint32_t rank, uint64_t deadline_ns, const char* what);
cube_status_t cube__mpi_recv(uint64_t tag_key, const cube__mpi_header_t* header, void* dst,
                             uint32_t* out_flags, uint32_t rank, uint64_t deadline_ns,
                             const char* what);

#endif /* CUBE_COLLECTIVE_COLLECTIVE_H_ */
