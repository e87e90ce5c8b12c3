/* cube/collective.h: element types, reduce operations and profile records
 * of collectives (reference §9). The collective operations themselves are in
 * client.h; docs/collectives.md describes the model (participants, device
 * ids across MPI ranks, ordering, timeouts). */
/* The functions in this header are thread-safe. */
#ifndef CUBE_COLLECTIVE_H_
#define CUBE_COLLECTIVE_H_

#include <stdint.h>

#include "cube/device.h"

#ifdef __cplusplus
extern "C" {
#endif

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
  CUBE_DTYPE_COUNT
} cube_dtype_t;

/* Bytes per element; 0 for an invalid value. */
uint32_t cube_dtype_size(cube_dtype_t dtype);
const char* cube_dtype_name(cube_dtype_t dtype);

/* Integer MEAN divides the sum by the participant count, rounding toward
 * zero; integer SUM and PROD wrap around (two's complement). f16 and bf16 are
 * combined in float and rounded to nearest even. */
typedef enum cube_reduce_op_e {
  CUBE_REDUCE_SUM = 0,
  CUBE_REDUCE_MEAN = 1,
  CUBE_REDUCE_MAX = 2,  /* beyond the reference */
  CUBE_REDUCE_MIN = 3,  /* beyond the reference */
  CUBE_REDUCE_PROD = 4, /* beyond the reference */
  CUBE_REDUCE_OP_COUNT
} cube_reduce_op_t;

/* "sum", "mean", "max", "min", "prod"; NULL for an invalid value. */
const char* cube_reduce_op_name(cube_reduce_op_t op);

typedef enum cube_collective_kind_e {
  CUBE_COLLECTIVE_ALL_REDUCE = 0,
  CUBE_COLLECTIVE_SEND = 1,
  CUBE_COLLECTIVE_RECV = 2,
} cube_collective_kind_t;

/* The profile record of one completed collective (cube_client_last_collective).
 * time_ns runs from the moment the last participant joined (all data ready)
 * to completion; wait_ns from the first participant joining to the last.
 * algbw = bytes / time; busbw = algbw * 2(n-1)/n for all_reduce (the NCCL
 * convention: what each link carried), = algbw for send/recv. */
typedef struct cube_collective_record {
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

/* The transport collectives of |backend| go through in this process: "host"
 * (CPU: shared memory, MPI across processes), "nccl" (CUDA when NCCL loads),
 * "staged" (device memory through host buffers: OpenCL, and CUDA when NCCL
 * does not load), or NULL when the backend has none. *out_detail (may be
 * NULL) gets a static line: the NCCL version and library, or why NCCL is not
 * used. Loads NCCL on first use for CUDA. */
const char* cube_collective_transport(cube_backend_t backend, const char** out_detail);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_COLLECTIVE_H_ */
