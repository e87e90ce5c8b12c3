/* The handle table: cube_handle_t ids -> reference-counted views of managed
 * memory. An id is (generation << 32) | (slot index + 1); a slot's
 * generation changes when it is freed, so a released id is recognised and
 * refused instead of touching freed memory. Slots live in chunks that are
 * never freed, so looking up a stale id is always memory-safe.
 *
 * Thread-safe.
 */
#ifndef CUBE_CLIENT_HANDLES_H_
#define CUBE_CLIENT_HANDLES_H_

#include "cube/handle.h"
#include "memory/memory.h"

struct cube__server;

/* What a handle views. Immutable for the life of the slot. */
typedef struct cube__handle_info {
  cube__memory_t* mem;         /* the buffer's descriptor (one handle ref per slot) */
  uint64_t buffer_size;        /* size of the whole buffer */
  uint64_t offset_start;       /* view = [offset_start, buffer_size - offset_end) */
  uint64_t offset_end;
  struct cube__server* server; /* device the memory lives on */
  uint64_t stream_id;          /* stream whose pools own the buffer */
} cube__handle_info_t;

/* Creates a handle taking over one handle reference on info->mem. */
cube_status_t cube__handle_create(const cube__handle_info_t* info, cube_handle_t* out);

/* Copies the slot's info if |h| is live. On failure returns NOT_FOUND (or
 * INVALID_ARGUMENT for the null handle) whose message starts with |what|
 * (e.g. "cube_client_read: handles[2]"). */
cube_status_t cube__handle_get(cube_handle_t h, const char* what, cube__handle_info_t* out);

/* Size of the view. */
static inline uint64_t cube__handle_view_size(const cube__handle_info_t* i) {
  return i->buffer_size - i->offset_start - i->offset_end;
}

/* Kills every live handle (cube_shutdown): their ids become "released" and
 * their references on the memory are dropped. Not thread-safe with handle use. */
void cube__handle_invalidate_all(void);

/* Live handles now (for leak checks in tests): a scan of the table, not for
 * hot paths. */
uint64_t cube__handle_live_count(void);

#endif /* CUBE_CLIENT_HANDLES_H_ */
