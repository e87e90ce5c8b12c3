/* NCCL, loaded with dlopen at run time: nothing links libnccl.
 *
 * NCCL ships no typedef header for its entry points (CUDA has
 * cudaTypedefs.h), so the function types below are written here. Where CMake
 * found nccl.h (CUBE_HAVE_NCCL_H: in CUBE_CUDA_INCLUDE_DIR or /usr/include),
 * its types and enums are used and nccl_api.c checks at compile time that
 * every function type here is the one the header declares; without the
 * header, the types are spelled out below with NCCL's ABI values (stable
 * since NCCL 2.0; the config struct as of 2.14).
 *
 * Environment:
 *   CUBE_NCCL_LIBRARY  path or name of the library (default libnccl.so.2)
 * Before the library is loaded NCCL_NVLS_ENABLE=0 is put in the environment
 * unless it is set already: NVLink multicast stays off on shared hosts.
 *
 * Thread-safe: loading happens once (pthread_once); the table is read-only
 * afterwards.
 */
#ifndef CUBE_COLLECTIVE_NCCL_API_H_
#define CUBE_COLLECTIVE_NCCL_API_H_

#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#include "cube/status.h"

#ifdef CUBE_HAVE_NCCL_H
#include <nccl.h>
typedef ncclResult_t cube__nccl_result_t;
typedef ncclComm_t cube__nccl_comm_t;
typedef ncclUniqueId cube__nccl_uid_t;
typedef ncclDataType_t cube__nccl_type_t;
typedef ncclRedOp_t cube__nccl_op_t;
typedef ncclConfig_t* cube__nccl_config_ptr_t;
#define CUBE__NCCL_SUCCESS ncclSuccess
#define CUBE__NCCL_INVALID_ARGUMENT ncclInvalidArgument
#define CUBE__NCCL_IN_PROGRESS ncclInProgress
#else
typedef enum {
  CUBE__NCCL_SUCCESS = 0,
  CUBE__NCCL_INVALID_ARGUMENT = 4,
  CUBE__NCCL_IN_PROGRESS = 7,
} cube__nccl_result_t;
typedef struct ncclComm* cube__nccl_comm_t;
typedef struct {
  char internal[128];
} cube__nccl_uid_t;
typedef enum {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
} cube__nccl_type_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } cube__nccl_op_t;
typedef struct cube__nccl_config* cube__nccl_config_ptr_t;
#endif

/* ncclConfig_t as of NCCL 2.14 (size, magic, version, blocking): later
 * libraries copy the |size| bytes given and default the rest. */
typedef struct cube__nccl_config {
  size_t size;
  unsigned int magic;   /* 0xcafebeef */
  unsigned int version; /* 21400: NCCL 2.14.0 */
  int blocking;
} cube__nccl_config_t;

/* The entry points cube uses. */
typedef cube__nccl_result_t (*cube__nccl_get_version_fn)(int* version);
typedef cube__nccl_result_t (*cube__nccl_get_unique_id_fn)(cube__nccl_uid_t* id);
typedef cube__nccl_result_t (*cube__nccl_comm_init_rank_config_fn)(cube__nccl_comm_t* comm,
                                                                   int nranks,
                                                                   cube__nccl_uid_t id, int rank,
                                                                   cube__nccl_config_ptr_t config);
typedef cube__nccl_result_t (*cube__nccl_group_fn)(void);
typedef cube__nccl_result_t (*cube__nccl_all_reduce_fn)(const void* sendbuff, void* recvbuff,
                                                        size_t count, cube__nccl_type_t type,
                                                        cube__nccl_op_t op, cube__nccl_comm_t comm,
                                                        CUstream stream);
typedef cube__nccl_result_t (*cube__nccl_send_fn)(const void* sendbuff, size_t count,
                                                  cube__nccl_type_t type, int peer,
                                                  cube__nccl_comm_t comm, CUstream stream);
typedef cube__nccl_result_t (*cube__nccl_recv_fn)(void* recvbuff, size_t count,
                                                  cube__nccl_type_t type, int peer,
                                                  cube__nccl_comm_t comm, CUstream stream);
typedef cube__nccl_result_t (*cube__nccl_comm_fn)(cube__nccl_comm_t comm);
typedef cube__nccl_result_t (*cube__nccl_comm_async_error_fn)(cube__nccl_comm_t comm,
                                                              cube__nccl_result_t* error);
typedef const char* (*cube__nccl_error_string_fn)(cube__nccl_result_t result);
typedef const char* (*cube__nccl_last_error_fn)(cube__nccl_comm_t comm);

typedef struct cube__nccl {
  cube__nccl_get_version_fn GetVersion;
  cube__nccl_get_unique_id_fn GetUniqueId;
  cube__nccl_comm_init_rank_config_fn CommInitRankConfig;
  cube__nccl_group_fn GroupStart;
  cube__nccl_group_fn GroupEnd;
  cube__nccl_all_reduce_fn AllReduce;
  cube__nccl_send_fn Send;
  cube__nccl_recv_fn Recv;
  cube__nccl_comm_fn CommFinalize;
  cube__nccl_comm_fn CommDestroy;
  cube__nccl_comm_fn CommAbort;
  cube__nccl_comm_async_error_fn CommGetAsyncError;
  cube__nccl_error_string_fn GetErrorString;
  cube__nccl_last_error_fn GetLastError; /* optional (2.13+): NULL when absent */
  int version;                           /* 22809 = NCCL 2.28.9 */
  char path[256];                        /* what was loaded */
} cube__nccl_t;

/* The oldest NCCL cube uses: nonblocking communicators (ncclCommInitRankConfig
 * with blocking = 0), ncclAvg and bfloat16 are all there by 2.14. */
#define CUBE__NCCL_MIN_VERSION 21400

/* NCCL, or UNAVAILABLE with the reason (library absent, a symbol missing, a
 * version older than 2.14). The status is a new copy for the caller. */
cube_status_t cube__nccl_get(const cube__nccl_t** out);

/* "NCCL 2.28.9 (libnccl.so.2)" or the reason it is not used, for `cube info`
 * and the docs' fallback rule; a static string. */
const char* cube__nccl_describe(void);

/* "<what>: ncclInvalidUsage (NCCL's text; the last error: ...)" with |code|
 * (INTERNAL when 0). */
cube_status_t cube__nccl_error(cube__nccl_result_t r, cube__nccl_comm_t comm,
                               cube_status_code_t code, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* NCCL's version code as "2.28.9". */
const char* cube__nccl_version_name(int version, char* buf, size_t size);

#endif /* CUBE_COLLECTIVE_NCCL_API_H_ */
