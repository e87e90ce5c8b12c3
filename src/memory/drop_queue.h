/* Drop queue (reference §4.9): keeps host buffers alive until the device has
 * consumed them. Items are opaque: a pointer, a size in bytes and a release
 * callback. Fences come from a small ops table so that the queue works with
 * CUDA events, a CPU backend, or counters in tests.
 *
 * Each flush waits for the fence recorded by the previous flush, releases the
 * items that fence covered (|pending|), moves the items pushed since then
 * (|staged|) to |pending| and records a new fence after them. An item is
 * therefore held for at most two flush cycles.
 *
 * Thread-compatible: the owner (a stream) serialises calls. Release
 * callbacks run on the calling thread, inside flush and deinitialize.
 */
#ifndef CUBE_MEMORY_DROP_QUEUE_H_
#define CUBE_MEMORY_DROP_QUEUE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube/status.h"

#define CUBE__DROP_DEFAULT_MAX_COUNT 64u
#define CUBE__DROP_DEFAULT_MAX_BYTES (64ull * 1024ull * 1024ull)

typedef void (*cube__drop_release_fn)(void* item);

typedef struct cube__drop_item {
  void* item;
  uint64_t size;
  cube__drop_release_fn release; /* may be NULL: nothing to release */
} cube__drop_item_t;

/* A fence marks the point of the device's work submitted so far. */
typedef struct cube__fence_ops {
  void* self;
  /* Records a fence after the work submitted so far. */
  cube_status_t (*create)(void* self, void** out_fence);
  /* Waits until the device reached |fence|. */
  cube_status_t (*sync)(void* self, void* fence);
  /* Frees |fence| (synced or not). */
  void (*destroy)(void* self, void* fence);
} cube__fence_ops_t;

/* Flush once |max_count| items or |max_bytes| bytes are staged. */
typedef struct cube__drop_policy {
  uint64_t max_count;
  uint64_t max_bytes;
} cube__drop_policy_t;

/* Defaults: 64 items, 64 MiB. */
void cube__drop_policy_initialize(cube__drop_policy_t* out_policy);

/* What has been staged since the last flush. Counters saturate. */
typedef struct cube__drop_counter {
  uint64_t count;
  uint64_t bytes;
} cube__drop_counter_t;

void cube__drop_counter_register(cube__drop_counter_t* counter, uint64_t bytes);
bool cube__drop_counter_should_flush(const cube__drop_counter_t* counter,
                                     const cube__drop_policy_t* policy);
void cube__drop_counter_reset(cube__drop_counter_t* counter);

typedef struct cube__drop_list {
  cube__drop_item_t* items;
  size_t count;
  size_t capacity;
} cube__drop_list_t;

typedef struct cube__drop_queue {
  cube__drop_policy_t policy;
  cube__fence_ops_t fences;
  cube__drop_list_t staged;  /* pushed since the last flush; no fence covers them */
  cube__drop_list_t pending; /* moved at the last flush; |fence| covers them when set */
  void* fence;               /* recorded by the last flush; valid when has_fence */
  bool has_fence;
  cube__drop_counter_t counter; /* over |staged| */
} cube__drop_queue_t;

/* |policy| NULL = defaults. |fences| is copied. */
void cube__drop_queue_initialize(cube__drop_queue_t* queue, const cube__drop_policy_t* policy,
                                 const cube__fence_ops_t* fences);

/* Waits for everything (the last fence, or a new one when items were never
 * fenced), releases every item and frees the queue's memory. Items are
 * released even when a wait fails (the owner is going away); the error is
 * returned. */
cube_status_t cube__drop_queue_deinitialize(cube__drop_queue_t* queue);

/* Takes |item| (released later by |release|). On failure (out of host
 * memory) the item is not taken. */
cube_status_t cube__drop_queue_push(cube__drop_queue_t* queue, void* item, uint64_t size,
                                    cube__drop_release_fn release);

bool cube__drop_queue_should_flush(const cube__drop_queue_t* queue);

/* One flush cycle (see the top of this file). On a failed wait the items
 * stay queued (pending and staged unchanged, the fence dropped); the next
 * flush records and waits on a fresh fence for them. */
cube_status_t cube__drop_queue_flush(cube__drop_queue_t* queue);

static inline size_t cube__drop_queue_staged_count(const cube__drop_queue_t* queue) {
  return queue->staged.count;
}
static inline size_t cube__drop_queue_pending_count(const cube__drop_queue_t* queue) {
  return queue->pending.count;
}

#endif /* CUBE_MEMORY_DROP_QUEUE_H_ */
