/* What the files of the nccl transport share (nccl_cuda.c, nccl_comm.c,
 * nccl_issue.c, nccl.c). Not for the rest of the library. */
#ifndef CUBE_COLLECTIVE_NCCL_NCCL_INTERNAL_H_
#define CUBE_COLLECTIVE_NCCL_NCCL_INTERNAL_H_

#include <cuda.h>
#include <cudaTypedefs.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "collective/coll_internal.h"
#include "collective/nccl/nccl_api.h"
#include "server/server.h"

#define CUBE__NCCL_MAX_DEVICES 64u

/* The driver entry points this transport uses, taken by name from the CUDA
 * backend (CUBE__CTL_DRIVER_PROC: cuGetProcAddress at the ABI version the
 * backend uses), so that nothing here includes the backend's internals. */
#define CUBE__NCCL_CU_FUNCTIONS(X)                                        \
  X(CtxGetCurrent, "cuCtxGetCurrent", PFN_cuCtxGetCurrent_v4000)          \
  X(CtxPushCurrent, "cuCtxPushCurrent", PFN_cuCtxPushCurrent_v4000)       \
  X(CtxPopCurrent, "cuCtxPopCurrent", PFN_cuCtxPopCurrent_v4000)          \
  X(StreamCreate, "cuStreamCreate", PFN_cuStreamCreate_v2000)             \
  X(StreamDestroy, "cuStreamDestroy", PFN_cuStreamDestroy_v4000)          \
  X(StreamWaitEvent, "cuStreamWaitEvent", PFN_cuStreamWaitEvent_v3020)    \
  X(EventCreate, "cuEventCreate", PFN_cuEventCreate_v2000)                \
  X(EventRecord, "cuEventRecord", PFN_cuEventRecord_v2000)                \
  X(EventQuery, "cuEventQuery", PFN_cuEventQuery_v2000)                   \
  X(EventSynchronize, "cuEventSynchronize", PFN_cuEventSynchronize_v2000) \
  X(EventDestroy, "cuEventDestroy", PFN_cuEventDestroy_v4000)             \
  X(EventElapsedTime, "cuEventElapsedTime", PFN_cuEventElapsedTime_v2000) \
  X(GetErrorName, "cuGetErrorName", PFN_cuGetErrorName_v6000)             \
  X(GetErrorString, "cuGetErrorString", PFN_cuGetErrorString_v6000)

typedef struct cube__nccl_cu {
#define CUBE__NCCL_CU_FIELD(field, sym, type) type field;
  CUBE__NCCL_CU_FUNCTIONS(CUBE__NCCL_CU_FIELD)
#undef CUBE__NCCL_CU_FIELD
} cube__nccl_cu_t;

typedef struct cube__nccl_dev {
  CUcontext ctx;
  CUstream stream; /* NULL until first used */
} cube__nccl_dev_t;

typedef struct cube__nccl_scope {
  const cube__nccl_cu_t* cu;
  bool pushed;
} cube__nccl_scope_t;

typedef struct cube__nccl_state {
  pthread_mutex_t lock;     /* every NCCL call on |comms| */
  uint32_t generation;      /* communicators created so far */
  bool ready;               /* |comms| of this generation are usable */
  cube_status_t broken;     /* why they cannot be created again (across processes) */
  cube__nccl_comm_t* comms; /* [n]; NULL for the ranks of other processes */
  CUcontext guard_ctx;      /* a local device's context (cube__nccl_guard) */
  char id_file[512];        /* the unique id file this process wrote ("" if none) */
} cube__nccl_state_t;

/* What a participant's task leaves in its slot (slot->aux). */
typedef struct cube__nccl_ready {
  CUcontext ctx;
  CUevent event; /* on the compute stream, after the part's data */
} cube__nccl_ready_t;

/* An issued operation: what its participants' syncs share. */
typedef struct cube__nccl_flight {
  atomic_uint refs;
  cube__comm_t* comm;
  uint32_t generation;
  bool remote;                   /* ranks in other processes */
  _Atomic(cube_status_t) status; /* set once: the failure of the whole operation */
  cube_collective_record_t record;
  char what[320];
} cube__nccl_flight_t;

/* One local participant of a flight, until its stream's sync_collective. */
typedef struct cube__nccl_entry {
  cube__coll_entry_t link; /* first: the list's; keyed by the part's stream */
  cube__nccl_flight_t* flight;
  cube_collective_kind_t kind; /* for the record: ALL_REDUCE, SEND or RECV */
  CUcontext ctx;
  CUevent start, done; /* on the comm stream */
  cube__memory_t* mem[2];
} cube__nccl_entry_t;

/* Process-wide state (nccl_cuda.c, nccl_issue.c). */
extern pthread_mutex_t cube__nccl_dev_lock;
extern cube__nccl_dev_t cube__nccl_devs[CUBE__NCCL_MAX_DEVICES];
extern pthread_mutex_t cube__nccl_issue_lock;
extern cube__coll_list_t cube__nccl_entries;

/* nccl_cuda.c */
cube_status_t cube__nccl_cu_from(const cube__backend_t* be, const cube__nccl_cu_t** out);
cube_status_t cube__nccl_cu_get(const cube__nccl_cu_t** out);
cube_status_t cube__nccl_cu_error(CUresult r, cube_status_code_t code, const char* fmt, ...)
    CUBE_PRINTF(3, 4);
CUcontext cube__nccl_ctx(const cube__server_t* s);
uint32_t cube__nccl_ordinal(const cube__server_t* s);
CUstream cube__nccl_native_stream(const cube__stream_t* st);
cube__nccl_scope_t cube__nccl_enter(const cube__nccl_cu_t* cu, CUcontext ctx);
cube__nccl_scope_t cube__nccl_guard(const cube__nccl_cu_t* cu, CUcontext ctx);
void cube__nccl_leave(cube__nccl_scope_t* s);
cube_status_t cube__nccl_comm_stream(const cube__nccl_cu_t* cu, cube__server_t* s, CUstream* out,
                                     CUcontext* out_ctx);

/* nccl_comm.c */
cube__nccl_state_t* cube__nccl_state_locked(cube__comm_t* c);
void cube__nccl_nap(uint64_t* idle_since);
cube_status_t cube__nccl_settle(const cube__nccl_t* nc, cube__comm_t* c, cube__nccl_state_t* ns,
                                const bool* which, uint64_t deadline, const char* what,
                                bool* out_timeout);
void cube__nccl_abort_locked(const cube__nccl_t* nc, cube__comm_t* c, cube__nccl_state_t* ns);
void cube__nccl_remote_names(const cube__comm_t* c, char* buf, size_t size);
cube_status_t cube__nccl_ensure(const cube__nccl_t* nc, const cube__nccl_cu_t* cu, cube__comm_t* c,
                                cube__nccl_state_t* ns, CUcontext* ctx_of, uint64_t deadline,
                                const char* what);

/* nccl_issue.c */
void cube__nccl_ready_free(void* p);
void cube__nccl_flight_unref(cube__nccl_flight_t* f);
void cube__nccl_flight_fail(cube__nccl_flight_t* f, cube_status_t st);
void cube__nccl_entry_free(const cube__nccl_cu_t* cu, cube__nccl_entry_t* e, bool release_memory);
cube_status_t cube__nccl_issue(cube__comm_t* c, cube__coll_op_t* op, uint64_t timeout_ns,
                               const char* what);

/* nccl.c */
cube_status_t cube__nccl_finish(const cube__nccl_cu_t* cu, cube__nccl_entry_t* e,
                                uint64_t timeout_ns);

#endif /* CUBE_COLLECTIVE_NCCL_NCCL_INTERNAL_H_ */
