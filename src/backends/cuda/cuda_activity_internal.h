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
#include "backends/cuda/cuda_timing_layout.h"

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
#define CUBE__ACT_LAUNCHES 16384u /* 512 KiB a stream, and 1.25 MiB of names, touched as used */
#define CUBE__ACT_SEARCH 64u /* launches a record's match is looked for in */
typedef struct cube__act_launch {
  uint64_t hash;
  uint64_t order;
  uint32_t count[3];
  /* Its name is in |names| at its index. Self-timed, a launch of the kernel
   * of the launch before it carries no name (false): the reader, which reads
   * the ring in order, keeps the last name it passed. */
  bool named;
} cube__act_launch_t;

/* The slots' layout: cuda_timing_layout.h. */
#define CUBE__ACT_SLOTS_BYTES ((CUBE__ACT_LAUNCHES / CUBE__ACT_BATCH) * CUBE__ACT_BATCH_BYTES)
/* The device's words of 1 (one a launch of a batch) after the slots, and
 * the host's marks (one a launch of the ring) after its copy of the slots. */
#define CUBE__ACT_DEVICE_BYTES (CUBE__ACT_SLOTS_BYTES + CUBE__ACT_BATCH * 8u)
#define CUBE__ACT_HOST_BYTES (CUBE__ACT_SLOTS_BYTES + CUBE__ACT_LAUNCHES * 8u)
/* Launch |i| of the ring: its slot's offset (its start; its ends are
 * CUBE__ACT_LINE bytes apart after it), on the device and in the host's copy. */
static inline size_t cube__act_slot_offset(uint64_t i) {
  const uint64_t k = i % CUBE__ACT_BATCH;
  return (size_t)((i / CUBE__ACT_BATCH) * CUBE__ACT_BATCH_BYTES +
                  (k / CUBE__ACT_GROUP) * CUBE__ACT_GROUP_BYTES + (k % CUBE__ACT_GROUP) * 8u);
}
_Static_assert(CUBE__ACT_LAUNCHES % CUBE__ACT_BATCH == 0, "whole batches in the ring");

struct cube__cuda_activity {
  /* |put| is the launching thread's, |got| the reader's: 64 bytes apart, so
   * that neither's store takes the other's cache line on every launch. */
  atomic_uint_fast64_t put;
  char put_line[64 - sizeof(atomic_uint_fast64_t)];
  atomic_uint_fast64_t got;
  cube__act_launch_t launches[CUBE__ACT_LAUNCHES];
  char names[CUBE__ACT_LAUNCHES][80]; /* launch i's name, where launches[i].named */
  uint64_t named_kernel; /* the launching thread's: the kernel whose name the last record carried, 0 none */
  char read_name[80];    /* the reader's: the name of the last record it passed that carried one */
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
/* |d|'s clock, stale (measured over a second before records came on
 * again), measured again (its context made current here); a failed measure
 * keeps the earlier offset. cube__ktimer_drain calls it before it converts
 * a record: on the poller, a trace's stop, a stream's end, or a launching
 * thread only when that thread reads its own full ring. */
void cube__ktimer_recalibrate(cube__backend_device_t* d);
/* |s|'s completed kernels, in launch order, delivered. */
void cube__ktimer_drain(cube__cuda_stream_t* s);
/* Not under the registry's lock: the stream told to copy the slots of the
 * launches submitted and not copied yet (|d|'s context current), when there
 * are at least |at_least| of them; |wait|: and waited for. */
void cube__ktimer_copy(cube__backend_device_t* d, cube__cuda_stream_t* s, uint64_t at_least,
                       bool wait);

#endif /* CUBE_BACKENDS_CUDA_CUDA_ACTIVITY_INTERNAL_H_ */
