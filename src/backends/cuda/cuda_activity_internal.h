/* What cuda_activity.c (the registry of streams, records on and off, CUPTI)
 * and cuda_timer.c (kernels that time themselves) share: a stream's ring of
 * launches, its queue of records, and the delivery of a record. Internal to
 * the CUDA backend. */
#ifndef CUBE_BACKENDS_CUDA_CUDA_ACTIVITY_INTERNAL_H_
#define CUBE_BACKENDS_CUDA_CUDA_ACTIVITY_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backends/cuda/cuda_backend_internal.h"

typedef struct cube__act_entry {
  uint64_t start_ns, end_ns;
  uint64_t order; /* its place in the stream's order (trace.h), 0: not known */
  uint64_t hash; /* the entry function's name hash; 0: |foreign| is the name */
  uint32_t count[3];
  char foreign[80]; /* the launch's name, or a function not of cube's: its name (|hash| 0) */
} cube__act_entry_t;

/* The launches of a stream while records are on, in order: a ring with one
 * writer (the stream's launching thread) and one reader (whoever reads
 * buffers, under the registry's lock). */
#define CUBE__ACT_LAUNCHES 16384u /* 1.5 MiB a stream, touched as used */
#define CUBE__ACT_SEARCH 64u /* launches a record's match is looked for in */
typedef struct cube__act_launch {
  uint64_t hash;
  uint64_t order;
  uint32_t count[3];
  char name[80];
} cube__act_launch_t;

/* Launches submitted and not copied after which the launching thread has
 * the stream copy their slots. */
#define CUBE__ACT_BATCH 256u
/* Self-timed kernels (preludes/cuda.h, struct cube__timing): the slots of a
 * stream's CUBE__ACT_LAUNCHES launches, in batches of CUBE__ACT_BATCH. A
 * batch is CUBE__ACT_PLANES + 1 planes of CUBE__ACT_BATCH words: plane 0
 * holds each launch's start, plane 1 + j the end raised by the launch's cubes
 * whose index is j modulo CUBE__ACT_PLANES. Launch k of a batch has its
 * words 8 * k bytes into each plane, planes CUBE__ACT_PLANE_BYTES apart: a
 * launch's cubes meet in 32 cache lines, not one (one line cost a kernel of
 * 4,096 cubes 22 % on the H200; 32 lines nothing measurable:
 * docs/benchmarks.md), and a batch's slots are one contiguous region that
 * the stream copies, in the same layout, into its ring of mapped host
 * memory. The prelude's CUBE__TIMING_PLANE_WORDS is CUBE__ACT_BATCH. */
#define CUBE__ACT_PLANES 32u
#define CUBE__ACT_PLANE_BYTES (CUBE__ACT_BATCH * 8u)
#define CUBE__ACT_BATCH_BYTES ((CUBE__ACT_PLANES + 1u) * CUBE__ACT_PLANE_BYTES)
#define CUBE__ACT_SLOTS_BYTES ((CUBE__ACT_LAUNCHES / CUBE__ACT_BATCH) * CUBE__ACT_BATCH_BYTES)
_Static_assert(CUBE__ACT_LAUNCHES % CUBE__ACT_BATCH == 0, "whole batches in the ring");

struct cube__cuda_activity {
  /* |put| is the launching thread's, |got| the reader's: 64 bytes apart, so
   * that neither's store takes the other's cache line on every launch. */
  atomic_uint_fast64_t put;
  char put_line[64 - sizeof(atomic_uint_fast64_t)];
  atomic_uint_fast64_t got;
  cube__act_launch_t launches[CUBE__ACT_LAUNCHES];
  cube__backend_device_t* device;
  uint64_t noted;       /* the launching thread's last noted launch + 1, 0: none */
  uint64_t quiet_below; /* self-timed: launches below it are read but not delivered */
  CUdeviceptr slots;    /* self-timed: the device slots, or 0 */
  volatile uint64_t* host; /* self-timed: the mapped host slots */
  atomic_uint_fast64_t submitted; /* self-timed: launches noted and taken by the driver */
  atomic_uint_fast64_t copied; /* self-timed: launches whose slots the stream was told to copy */
  pthread_mutex_t copy_lock; /* self-timed: |copied| and the copies' order */
  bool known;           /* registered: |ctx_id|, |sid| valid */
  uint32_t ctx_id, sid; /* CUPTI's ids of its context and stream */
  cube__act_entry_t* q; /* ring of |cap| */
  size_t head, count, cap;
  uint64_t dropped;
  atomic_uint_fast64_t untimed; /* self-timed launches made while the ring was full */
};

/* Under the registry's lock: kernel |e| of stream |s| into the trace (while
 * one records) and, where the device's profile summary keeps records, into
 * the stream's queue (cuda_activity.c). */
void cube__act_deliver(cube__cuda_stream_t* s, cube__act_entry_t* e);

/* Self-timed kernels (cuda_timer.c), under the registry's lock:
 * |s|'s slots set up and its device's clock measured where it is not (its
 * context made current here); false: not timed this way (events then). */
bool cube__ktimer_setup(cube__backend_device_t* d, cube__cuda_stream_t* s);
/* |s|'s completed kernels, in launch order, delivered. */
void cube__ktimer_drain(cube__cuda_stream_t* s);
/* Not under the registry's lock: the stream told to copy the slots of the
 * launches submitted and not copied yet (|d|'s context current), when there
 * are at least |at_least| of them; |wait|: and waited for. */
void cube__ktimer_copy(cube__backend_device_t* d, cube__cuda_stream_t* s, uint64_t at_least,
                       bool wait);

#endif /* CUBE_BACKENDS_CUDA_CUDA_ACTIVITY_INTERNAL_H_ */
