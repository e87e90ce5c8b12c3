/* The recorded graph (graph.c records it, graph_replay.c runs it): its
 * nodes, slots and native state. Nothing outside src/server/ includes it. */
#ifndef CUBE_SERVER_GRAPH_INTERNAL_H_
#define CUBE_SERVER_GRAPH_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cube/graph.h"
#include "server/server.h"
#include "server/tasks_internal.h"

enum { CUBE__NODE_LAUNCH = 0, CUBE__NODE_WRITE = 1, CUBE__NODE_COPY = 2 };

/* A buffer view the graph uses; slots are numbered in order of first use. */
typedef struct cube__graph_slot {
  cube__memory_t* mem; /* a binding reference held by the graph */
  uint64_t offset;     /* the view's start in the buffer */
  uint64_t len;        /* the view's size */
} cube__graph_slot_t;

/* The kind of a task node, apart from the kinds above. */
enum { CUBE__NODE_TASK = 3 };

/* A task of a layer above the server (cube__graph_record_task): run as the
 * queue would run it, on a copy of |payload| with the replay's stream and
 * slots. */
typedef struct cube__graph_task {
  cube__task_fn fn;
  cube__payload_drop_fn drop;   /* run on |payload| when the graph is freed */
  const char* what;             /* names the node in messages */
  size_t size;
  size_t stream_at;             /* SIZE_MAX: no stream in the payload */
  uint32_t view_count;
  cube__graph_task_view_t* views;
  uint32_t* view_slots;         /* the slot of each view, UINT32_MAX where its memory is NULL */
  unsigned char* payload;       /* |size| bytes, 64-byte aligned; owns its references */
} cube__graph_task_t;

typedef struct cube__graph_node {
  uint32_t kind;
  uint32_t slot;                /* write, copy: the slot written */
  uint32_t src_slot;            /* copy: the slot read */
  cube__launch_task_t* launch;  /* launch: the record as the queue would run it */
  uint32_t* arg_slots;          /* launch: the slot of each argument, UINT32_MAX for scalars */
  cube__write_task_t write;     /* write: bytes owned; mem's reference is the slot's */
  cube__copy_task_t copy;       /* copy: both references are the slots' */
  cube__graph_task_t* task;     /* task: owned */
} cube__graph_node_t;

/* Where a slot's view is in device storage, as a native graph's nodes use it. */
typedef struct cube__graph_bound {
  const cube__storage_t* storage; /* NULL: not known (every node using it is updated) */
  uint64_t offset;                /* the view's start in |storage| */
} cube__graph_bound_t;

enum { CUBE__NATIVE_UNTRIED = 0, CUBE__NATIVE_BUILT = 1, CUBE__NATIVE_NO = 2 };

struct cube_graph_s {
  atomic_uint refs;
  cube__server_t* server;
  pthread_mutex_t lock; /* recording (several threads may share a pinned stream) */
  cube_status_t failure; /* the first failure while recording */
  bool automatic;        /* made by automatic capture (graph_auto.c): node failures are
                            deferred as the eager launch's would be, unannotated */
  cube__graph_node_t* nodes;
  size_t node_count, node_cap;
  cube__graph_slot_t* slots;
  size_t slot_count, slot_cap;
  size_t copy_count; /* copy nodes: the replay call checks them against its substitutes */
  /* Native execution (a backend with graph slots), built by the first
   * replay; native_lock orders the updates and launches of replays from
   * several streams (the exec's parameters are one set). */
  pthread_mutex_t native_lock;
  int native_state;             /* CUBE__NATIVE_* */
  void* native;                 /* the backend's graph */
  cube__graph_bound_t* bound;   /* slot_count: what the native nodes use now */
  cube__graph_bound_t* want;    /* slot_count: what this replay needs (scratch) */
  cube__memory_t** want_mems;   /* slot_count: the memory of each (scratch) */
  bool* scalar_dirty;           /* node_count: its scalars were substituted last */
  size_t dirty_count;           /* true entries of scalar_dirty */
  atomic_bool ran_native;
};

#endif /* CUBE_SERVER_GRAPH_INTERNAL_H_ */
