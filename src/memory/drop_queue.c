/* Drop queue for host buffers (reference §4.9). */
#include "memory/drop_queue.h"

#include <stdlib.h>

#include "base/status.h"

void cube__drop_policy_initialize(cube__drop_policy_t* out_policy) {
  out_policy->max_count = CUBE__DROP_DEFAULT_MAX_COUNT;
  out_policy->max_bytes = CUBE__DROP_DEFAULT_MAX_BYTES;
}

void cube__drop_counter_register(cube__drop_counter_t* counter, uint64_t bytes) {
  if (counter->count < UINT64_MAX) counter->count++;
  counter->bytes = bytes > UINT64_MAX - counter->bytes ? UINT64_MAX : counter->bytes + bytes;
}

bool cube__drop_counter_should_flush(const cube__drop_counter_t* counter,
                                     const cube__drop_policy_t* policy) {
  return counter->count >= policy->max_count || counter->bytes >= policy->max_bytes;
}

void cube__drop_counter_reset(cube__drop_counter_t* counter) {
  counter->count = 0;
  counter->bytes = 0;
}

void cube__drop_queue_initialize(cube__drop_queue_t* queue, const cube__drop_policy_t* policy,
                                 const cube__fence_ops_t* fences) {
  *queue = (cube__drop_queue_t){0};
  if (policy) {
    queue->policy = *policy;
  } else {
    cube__drop_policy_initialize(&queue->policy);
  }
  queue->fences = *fences;
}

static void cube__drop_list_release(cube__drop_list_t* list) {
  for (size_t i = 0; i < list->count; ++i) {
    cube__drop_item_t* it = &list->items[i];
    if (it->release) it->release(it->item);
  }
  list->count = 0;
}

/* Waits on a fresh fence: covers everything submitted so far. */
static cube_status_t cube__drop_wait_now(cube__drop_queue_t* queue) {
  void* fence = NULL;
  CUBE_RETURN_IF_ERROR(queue->fences.create(queue->fences.self, &fence));
  cube_status_t status = queue->fences.sync(queue->fences.self, fence);
  queue->fences.destroy(queue->fences.self, fence);
  return status;
}

/* Waits on the last flush's fence and drops it. */
static cube_status_t cube__drop_wait_last(cube__drop_queue_t* queue) {
  cube_status_t status = queue->fences.sync(queue->fences.self, queue->fence);
  queue->fences.destroy(queue->fences.self, queue->fence);
  queue->fence = NULL;
  queue->has_fence = false;
  return status;
}

cube_status_t cube__drop_queue_deinitialize(cube__drop_queue_t* queue) {
  cube_status_t status = CUBE_OK;
  bool need_wait = queue->staged.count > 0 || queue->pending.count > 0;
  if (queue->has_fence) {
    status = cube__drop_wait_last(queue);
    /* The last fence covers |pending|; only |staged| would need another. */
    if (status == CUBE_OK && queue->staged.count == 0) need_wait = false;
  }
  if (need_wait) status = cube__status_join(status, cube__drop_wait_now(queue));
  cube__drop_list_release(&queue->pending);
  cube__drop_list_release(&queue->staged);
  free(queue->pending.items);
  free(queue->staged.items);
  queue->pending = (cube__drop_list_t){0};
  queue->staged = (cube__drop_list_t){0};
  cube__drop_counter_reset(&queue->counter);
  return status;
}

cube_status_t cube__drop_queue_push(cube__drop_queue_t* queue, void* item, uint64_t size,
                                    cube__drop_release_fn release) {
  cube__drop_list_t* list = &queue->staged;
  if (list->count == list->capacity) {
    size_t cap = list->capacity ? list->capacity * 2 : 16;
    cube__drop_item_t* items =
        cap > SIZE_MAX / sizeof(*items) ? NULL : realloc(list->items, cap * sizeof(*items));
    if (!items) {
      return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                               "drop queue: out of host memory holding %zu buffers", list->count);
    }
    list->items = items;
    list->capacity = cap;
  }
  list->items[list->count++] = (cube__drop_item_t){item, size, release};
  cube__drop_counter_register(&queue->counter, size);
  return CUBE_OK;
}

bool cube__drop_queue_should_flush(const cube__drop_queue_t* queue) {
  return cube__drop_counter_should_flush(&queue->counter, &queue->policy);
}

cube_status_t cube__drop_queue_flush(cube__drop_queue_t* queue) {
  if (queue->has_fence) {
    CUBE_RETURN_IF_ERROR(cube__drop_wait_last(queue));
    cube__drop_list_release(&queue->pending);
  }
  if (queue->pending.count > 0) {
    /* Never fenced (an earlier fence failed): wait for everything now. */
    CUBE_RETURN_IF_ERROR(cube__drop_wait_now(queue));
    cube__drop_list_release(&queue->pending);
  }
  /* Swap the lists: pending (now empty) keeps its capacity for reuse. */
  cube__drop_list_t empty = queue->pending;
  queue->pending = queue->staged;
  queue->staged = empty;
  cube__drop_counter_reset(&queue->counter);
  void* fence = NULL;
  CUBE_RETURN_IF_ERROR(queue->fences.create(queue->fences.self, &fence));
  queue->fence = fence;
  queue->has_fence = true;
  return CUBE_OK;
}
