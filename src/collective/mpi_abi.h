/* The interface between libcube and its MPI transport plugin (libcube_mpi.so).
 *
 * libcube never links MPI: when a process wants MPI (docs/collectives.md), the
 * loader (src/collective/mpi.c) dlopens the plugin, built from
 * src/collective/mpi_plugin/mpi_plugin.c against MPI, and calls its one
 * exported function, CUBE__MPI_PLUGIN_ENTRY. The plugin may use libcube's
 * public headers for types and constants only, never a function of libcube: a
 * program linked with libcube.a exports no symbol to a plugin, and libcube.so
 * exports cube_* only. Everything it needs from libcube comes through the host
 * table below, everything libcube calls comes back in the plugin table.
 *
 * Versioning: both tables start with (abi, size). The loader passes
 * CUBE__MPI_PLUGIN_ABI to the entry point and checks the abi of the table it
 * gets back; a plugin refuses a host of another abi (and says why). Any change
 * to a table, to cube__mpi_header_t or to the meaning of a function bumps
 * CUBE__MPI_PLUGIN_ABI; libcube and the plugin are installed together, so
 * there is no compatibility across versions, only a clear refusal.
 *
 * Threading: every function of both tables is thread-safe.
 */
#ifndef CUBE_COLLECTIVE_MPI_ABI_H_
#define CUBE_COLLECTIVE_MPI_ABI_H_

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube/status.h"

#define CUBE__MPI_PLUGIN_ABI 3u
#define CUBE__MPI_PLUGIN_ENTRY "cube_mpi_plugin_open"
#define CUBE__MPI_PLUGIN_FILE "libcube_mpi.so"

/* The header of every message between ranks (compared on receipt: a header
 * that differs in anything but the rank and the flags is a mismatch). kind 0
 * is a reduction (dtype and op name it), anything else is data (send/recv,
 * NCCL's id, the proposals of a shrink: CUBE__MPI_KIND_SHRINK). */
#define CUBE__MPI_KIND_SHRINK 3u
/* flags: the payload was made from memory that held no valid contents on
 * the sending rank (docs/failures.md: the receiver's destination is spoiled
 * too). */
#define CUBE__MPI_FLAG_SPOILED 1u
typedef struct cube__mpi_header {
  uint64_t comm_hash;
  uint64_t sequence;
  uint64_t bytes;
  uint32_t kind, dtype, op, local_cpu;
  uint32_t sender_rank, flags;
} cube__mpi_header_t;

/* What libcube lends the plugin. */
typedef struct cube__mpi_host {
  uint32_t abi;  /* CUBE__MPI_PLUGIN_ABI */
  uint32_t size; /* sizeof(cube__mpi_host_t) */
  /* A new status (never NULL for a non-OK code); the plugin returns it. */
  cube_status_t (*status_makev)(cube_status_code_t code, const char* fmt, va_list ap);
  /* libcube's reusable host buffers (cube__coll_scratch_*): messages and the
   * payloads handed back by exchange are allocated here, and libcube puts
   * them back. */
  void* (*scratch_get)(size_t size);
  void (*scratch_put)(void* p);
  void (*scratch_free)(void* p);
  /* The clock of every deadline (cube__now_ns). */
  uint64_t (*now_ns)(void);
  /* Static names for messages ("f32", "sum"). */
  const char* (*dtype_name)(uint32_t dtype);
  const char* (*reduce_op_name)(uint32_t op);
} cube__mpi_host_t;

/* What the plugin gives back; the functions behind cube__mpi_* of
 * collective.h, with the same contracts. */
typedef struct cube__mpi_plugin {
  uint32_t abi;  /* CUBE__MPI_PLUGIN_ABI */
  uint32_t size; /* sizeof(cube__mpi_plugin_t) */
  /* Initialises MPI (unless the program did) and gives this rank's place. */
  cube_status_t (*start)(uint32_t* out_rank, uint32_t* out_ranks);
  cube_status_t (*exchange)(uint64_t tag_key, const cube__mpi_header_t* header,
                            const void* partial, uint32_t count, const uint32_t* ranks,
                            void** out_received, uint32_t* out_flags, uint64_t deadline_ns,
                            const char* what);
  /* exchange, except that a rank whose message did not come by the deadline
   * is no error: its out_received entry stays NULL (the shrink's rounds,
   * src/collective/shrink.c). Errors are those of exchange but the timeout. */
  cube_status_t (*gather)(uint64_t tag_key, const cube__mpi_header_t* header,
                          const void* partial, uint32_t count, const uint32_t* ranks,
                          void** out_received, uint32_t* out_flags, uint64_t deadline_ns,
                          const char* what);
  cube_status_t (*send)(uint64_t tag_key, const cube__mpi_header_t* header, const void* src,
                        uint32_t rank, uint64_t deadline_ns, const char* what);
  cube_status_t (*recv)(uint64_t tag_key, const cube__mpi_header_t* header, void* dst,
                        uint32_t* out_flags, uint32_t rank, uint64_t deadline_ns,
                        const char* what);
  /* A shrink found a rank of the job dead: the plugin does not call
   * MPI_Finalize at exit (Open MPI 4.1's fences with every process of the
   * job, the dead one included, and may wait for it forever). */
  void (*peer_lost)(void);
} cube__mpi_plugin_t;

/* The entry point: returns the plugin's table (static, never freed) or NULL
 * with the reason in |why| (NUL-terminated, at most |why_size| bytes). |host|
 * outlives the process's use of the plugin. */
typedef const cube__mpi_plugin_t* (*cube__mpi_plugin_open_fn)(uint32_t abi,
                                                              const cube__mpi_host_t* host,
                                                              char* why, size_t why_size);

#endif /* CUBE_COLLECTIVE_MPI_ABI_H_ */
