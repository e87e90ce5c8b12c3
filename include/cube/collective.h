/* cube/collective.h: collective operations over several devices (as CubeCL:
 * docs/cubecl.md, "Collectives"): element types, reduce operations, the
 * operations themselves and their profile records.
 *
 * Model (docs/collectives.md). A collective over a set of devices is called
 * once per participating device, each through a client of that device, from
 * any threads (one thread for all is fine). Each call only queues its part on
 * its device's stream, after the work queued before it, and returns: the
 * operation happens once every participant's part has run (on the CPU: the
 * last participant to arrive performs it for all). cube_client_sync_collective
 * then orders the stream's later work after the collectives it queued before.
 * Read dst only after it; src must not change until then.
 *
 * Devices. A communicator is keyed by the sorted set of device ids, so any
 * order of the same set is the same communicator. Every participant must list
 * the same set and call the operations of one communicator in the same order.
 * Under MPI (one process per rank, docs/collectives.md) device ids are
 * global: cpu:g is local CPU device g % L of rank g / L, L being
 * CUBE_CPU_DEVICES (the same on every rank); without MPI global = local.
 *
 * Errors. Bad input returns at once. What is found when the parts meet (sizes,
 * element types or ops that differ between participants) and timeouts are
 * deferred to each participant's stream, returned by its next flush, sync or
 * read after cube_client_sync_collective. A participant waits at most
 * CUBE_COLLECTIVE_TIMEOUT seconds (default 60) for the others; then the
 * operation fails with DEADLINE_EXCEEDED naming the devices (and ranks) that
 * did not join, on every participant, and the clients stay usable. A
 * destination the operation did not produce (it failed, or an input of a
 * participant held no valid contents: in this process, or in another over
 * MPI; not through NCCL between processes) reads as DATA_LOST naming why,
 * after cube_client_sync_collective (docs/failures.md). A rank
 * (process) that died shows so too; cube_client_shrink_collective then
 * rebuilds the set among the survivors, and any set holding a device of a
 * rank it found lost fails at once with PEER_LOST.
 *
 * Graphs (cube/graph.h, docs/graphs.md). On a stream that captures,
 * all_reduce, send, recv and sync_collective are checked as always and
 * recorded instead of queued; each replay runs this participant's part again
 * at that place, on the replay's stream, with the replay's buffers. Every
 * participant captures and replays its own graph, and the replays must be
 * issued on every participant, in the same order of operations, as the eager
 * calls must. ensure_init_collective is refused in a capture.
 *
 * Every operation taking a client fails with INVALID_ARGUMENT for a NULL
 * client and FAILED_PRECONDITION for a client from before cube_shutdown.
 *
 * Thread safety: every function here is thread-safe; in inline queue mode the
 * sync_collective wait runs on the calling thread, so queue every
 * participant's part before any sync_collective when one thread drives
 * several devices.
 */
#ifndef CUBE_COLLECTIVE_H_
#define CUBE_COLLECTIVE_H_

#include <stddef.h>
#include <stdint.h>

#include "cube/client.h"
#include "cube/device.h"
#include "cube/handle.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types. Values are stable; new types are added at the end. */
typedef enum cube_dtype_e {
  CUBE_DTYPE_U8 = 0,
  CUBE_DTYPE_I8,
  CUBE_DTYPE_U32,
  CUBE_DTYPE_I32,
  CUBE_DTYPE_U64,
  CUBE_DTYPE_I64,
  CUBE_DTYPE_F16,
  CUBE_DTYPE_BF16,
  CUBE_DTYPE_F32,
  CUBE_DTYPE_F64,
} cube_dtype_t;

/* Bytes per element; 0 for a value that is not a cube_dtype_t. */
uint32_t cube_dtype_size(cube_dtype_t dtype);
/* "u8", "f32", ...: a static string; "unknown" for an invalid value. */
const char* cube_dtype_name(cube_dtype_t dtype);

/* Integer MEAN divides the sum by the participant count, rounding toward
 * zero; integer SUM and PROD wrap around (two's complement). f16 and bf16 are
 * combined in float and rounded to nearest even. Values are stable. */
typedef enum cube_reduce_op_e {
  CUBE_REDUCE_SUM = 0,
  CUBE_REDUCE_MEAN = 1,
  CUBE_REDUCE_MAX = 2,  /* cube's own (CubeCL: sum, mean) */
  CUBE_REDUCE_MIN = 3,  /* cube's own (CubeCL: sum, mean) */
  CUBE_REDUCE_PROD = 4, /* cube's own (CubeCL: sum, mean) */
} cube_reduce_op_t;

/* "sum", "mean", "max", "min", "prod": a static string; NULL for an invalid
 * value. */
const char* cube_reduce_op_name(cube_reduce_op_t op);

typedef enum cube_collective_kind_e {
  CUBE_COLLECTIVE_ALL_REDUCE = 0,
  CUBE_COLLECTIVE_SEND = 1,
  CUBE_COLLECTIVE_RECV = 2,
} cube_collective_kind_t;

/* The profile record of one completed collective (cube_client_last_collective;
 * an output struct, see cube/cube.h, "Struct sizes").
 * time_ns runs from the moment the last participant joined (all data ready)
 * to completion; wait_ns from the first participant joining to the last.
 * algbw = bytes / time; busbw = algbw * 2(n-1)/n for all_reduce (the NCCL
 * convention: what each link carried), = algbw for send/recv. */
typedef struct cube_collective_record {
  size_t struct_size;    /* set by the caller: 0 or sizeof(cube_collective_record_t) */
  cube_collective_kind_t kind;
  cube_dtype_t dtype;
  cube_reduce_op_t op;   /* all_reduce only */
  uint64_t bytes;        /* per participant */
  uint32_t participants; /* devices in the communicator (all processes) */
  uint32_t ranks;        /* processes taking part (1 without MPI) */
  uint64_t sequence;     /* n-th operation of this kind on the communicator, from 0 */
  uint64_t time_ns;
  uint64_t wait_ns;
  double algbw_gbps;     /* 1e9 bytes per second */
  double busbw_gbps;
  const char* transport; /* "host", "staged" or "nccl" (a static string) */
} cube_collective_record_t;

/* Operations -------------------------------------------------------------- */

/* Sets up the communicator of |devices| (idempotent; any order of the same set
 * is the same communicator). The client's device must be in the set. Fails
 * with INVALID_ARGUMENT (device_count 0 or over 4096, NULL devices, an invalid
 * backend, devices of another backend than the client's, a device listed
 * twice, the client's device not in the set), NOT_FOUND (a device that does
 * not exist), UNIMPLEMENTED (a backend without a collective transport),
 * UNAVAILABLE (a set spanning processes whose transport needs MPI, without
 * MPI), FAILED_PRECONDITION (the client's stream is capturing a graph: the
 * set-up is done once, before the capture, not by each replay),
 * OUT_OF_MEMORY. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_ensure_init_collective(
    cube_client_t* client, size_t device_count, const cube_device_id_t* devices);

/* Rebuilds the communicator of |devices| among the processes (MPI ranks)
 * still alive, after one of them died (docs/collectives.md, "A rank that
 * dies"). Without a failure detector, a dead rank shows as a collective that
 * fails by CUBE_COLLECTIVE_TIMEOUT with DEADLINE_EXCEEDED naming the rank
 * (or PEER_LOST once a shrink found it lost); every surviving process then
 * calls this once, through one of its clients whose device is in the set,
 * with the same |devices|. The survivors agree over MPI point-to-point
 * messages on who is alive: a rank that does not answer within the timeout
 * (twice the timeout in the first round, so that a survivor whose own
 * collective failed one operation later still joins) is left out; agreement
 * takes one round more than the ranks found lost, each such round waiting
 * out its timeout. No MPI call waits on a dead rank.
 *
 * On success, *out_count gets the number of surviving devices and
 * out_devices[0 .. *out_count) their global ids, ascending (|out_devices|
 * holds device_count entries; it may be |devices| itself); their
 * communicator is set up, so the program goes on with collectives over
 * exactly that set. The ranks left out are lost for the rest of the
 * process: any collective over a set holding one of their devices fails at
 * once with PEER_LOST naming them. Collectives of the old set still queued
 * fail (PEER_LOST); read their errors with sync_collective and a flush first.
 * The survivors may disagree on whether the last operation before the death
 * completed (a rank that died between its messages reached some survivors
 * only); a program that must know agrees on where to resume, e.g. with an
 * all_reduce of MIN over the new set.
 *
 * A set within this process only (or no MPI and one process) has nothing to
 * agree on: its devices are returned as they are. Blocks the calling thread
 * (up to (lost ranks + 2) x the timeout); shrinks of one process run one at
 * a time. Thread-safe. Fails with INVALID_ARGUMENT (NULL client, out_count
 * or out_devices, the device list as for ensure_init_collective),
 * NOT_FOUND, UNIMPLEMENTED (no transport), FAILED_PRECONDITION (the client's
 * stream is capturing), UNAVAILABLE (a set spanning processes without MPI),
 * ABORTED (another survivor holds this rank lost: it heard nothing from it
 * in time; this process is then not among the survivors; or no agreement
 * was reached, as when ranks keep dying during the shrink), OUT_OF_MEMORY;
 * *out_count and out_devices are then unspecified. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_shrink_collective(
    cube_client_t* client, size_t device_count, const cube_device_id_t* devices,
    size_t* out_count, cube_device_id_t* out_devices);

/* Makes the calling stream's later work wait for the collectives this client's
 * stream queued before; their failures go to the stream's deferred errors.
 * Returns at once in threaded mode (the wait is queued); in inline mode it
 * waits on the calling thread. In a capture it is recorded: a replay waits
 * at that node for what the replay's stream has pending (in inline mode on
 * the replaying thread: one thread that drives several devices replays
 * their graphs' parts before any of their waits, so keep the wait out of
 * such graphs). Fails with UNIMPLEMENTED on a backend without a collective
 * transport, INVALID_ARGUMENT for a malformed CUBE_COLLECTIVE_TIMEOUT. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_sync_collective(cube_client_t* client);

/* Reduces |src| over |devices| into |dst| with |op|: every participant's dst
 * gets op(src of every participant). src and dst view the same number of
 * bytes, a multiple of dtype's size; dst may be src (in place). The handles
 * are borrowed: the queued part keeps their memory alive until it ran. Fails
 * at once with INVALID_ARGUMENT (a handle of another device, sizes that
 * differ or are not whole elements, an invalid dtype or op, the device list
 * as for ensure_init_collective), NOT_FOUND (a released handle, a device that
 * does not exist), UNIMPLEMENTED (no transport); later failures are deferred
 * (see "Errors" above). */
CUBE_MUST_USE_RESULT cube_status_t cube_client_all_reduce(cube_client_t* client, cube_handle_t src,
                                                          cube_handle_t dst, cube_dtype_t dtype,
                                                          size_t device_count,
                                                          const cube_device_id_t* devices,
                                                          cube_reduce_op_t op);

/* Point to point (cube's own: CubeCL's send/recv are server-only): the k-th
 * send from device A to device B meets the k-th recv on B from A, which
 * copies the whole view of |src| into the whole view of |dst| (same size, else
 * both fail, deferred). |peer| may be the client's own device. Ordered and
 * synchronised as the collectives above (cube_client_sync_collective). Fails
 * at once as cube_client_all_reduce does for its handle and devices. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_send(cube_client_t* client, cube_handle_t src,
                                                    cube_device_id_t peer);
CUBE_MUST_USE_RESULT cube_status_t cube_client_recv(cube_client_t* client, cube_handle_t dst,
                                                    cube_device_id_t peer);

/* Writes the profile record of the last collective this client's device
 * completed (bytes, participants, time, algbw, busbw) into |out_record|, under
 * the output-struct rules (set out_record->struct_size first, 0 = this
 * header's layout). Fails with NOT_FOUND before the device's first
 * collective, INVALID_ARGUMENT for a NULL |out_record| or a struct_size
 * smaller than the struct_size field. */
CUBE_MUST_USE_RESULT cube_status_t cube_client_last_collective(
    const cube_client_t* client, cube_collective_record_t* out_record);

/* This process's place under MPI: its rank and the number of ranks (0 and 1
 * without MPI), and L, the CPU devices per rank. Starts MPI when the process
 * was launched by mpirun and cube was built with MPI; the answer is computed
 * once per process. Each out_ pointer may be NULL. Fails with the status of
 * an MPI start that failed, or INVALID_ARGUMENT for malformed
 * CUBE_COLLECTIVE_RANK / CUBE_COLLECTIVE_RANKS; writes nothing then. */
CUBE_MUST_USE_RESULT cube_status_t cube_collective_world(uint32_t* out_rank, uint32_t* out_ranks,
                                                         uint32_t* out_local_devices);

/* The transport collectives of |backend| go through in this process: "host"
 * (CPU: shared memory, MPI across processes), "nccl" (CUDA when NCCL loads),
 * "staged" (device memory through host buffers: OpenCL, and CUDA when NCCL
 * does not load), or NULL when the backend has none (or is invalid). All
 * strings are static. *out_detail (may be NULL) gets a static line: the NCCL
 * version and library, or why NCCL is not used. Loads NCCL on first use for
 * CUDA. */
const char* cube_collective_transport(cube_backend_t backend, const char** out_detail);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_COLLECTIVE_H_ */
