/* What the files of the client API share (client.c, create.c, read.c,
 * launch.c, collective_api.c, runtime.c). Not for the rest of the library.
 *
 * The client validates, computes layouts, looks handles up and asks the
 * server (src/server) to do the work: it never takes a stream's lock, walks
 * a server's streams or calls a backend.
 */
#ifndef CUBE_CLIENT_CLIENT_INTERNAL_H_
#define CUBE_CLIENT_CLIENT_INTERNAL_H_

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "client/handles.h"
#include "cube/cube.h"
#include "server/server.h"

struct cube_client_s {
  atomic_uint refs;
  uint64_t epoch; /* cube__client_epoch() when created */
  cube__server_t* server;
  bool pinned;     /* stream pinned by cube_client_set_stream */
  uint64_t stream; /* valid when pinned */
  /* The execution override in force (cube/execution.h), NULL: none; every
   * launch and read loads it once. */
  _Atomic(struct cube_execution_override_s*) policy;
  /* Every override begun on this client, kept until it is freed
   * (client/policy.h). */
  struct cube_execution_override_s* overrides;
};

/* Frees the overrides of a client that goes away (policy.c). */
void cube__client_overrides_free(cube_client_t* c);

/* Bumped by cube_shutdown (runtime.c): clients made before it are refused
 * afterwards (their server is gone). */
extern atomic_uint_fast64_t cube__client_epoch_counter;

static inline uint64_t cube__client_epoch(void) {
  return atomic_load_explicit(&cube__client_epoch_counter, memory_order_relaxed);
}

/* True for a client that may be used (not NULL, not from before a shutdown). */
static inline bool cube__client_live(const cube_client_t* c) {
  return c && c->epoch == cube__client_epoch();
}

/* CUBE_OK for a live client of a device that is not lost; else
 * INVALID_ARGUMENT (NULL), FAILED_PRECONDITION (from before a shutdown) or
 * DEVICE_LOST (the device hit a fault that poisons it: the status names the
 * device and that fault; docs/failures.md, "Lost devices"), naming |fn|.
 * Every client call that can fail starts here: the loss is tested at this one
 * place, with one relaxed load. */
cube_status_t cube__client_refuse(const cube_client_t* c, const char* fn);

static inline cube_status_t cube__client_check(const cube_client_t* c, const char* fn) {
  return cube__client_live(c) && !cube__backend_lost(&c->server->be)
             ? CUBE_OK
             : cube__client_refuse(c, fn);
}

#define CUBE__CHECK_CLIENT(c, fn) CUBE_RETURN_IF_ERROR(cube__client_check((c), (fn)))

/* The stream id a call on |c| uses now: the pinned one, else the thread's. */
static inline uint64_t cube__client_stream_id(const cube_client_t* c) {
  return c->pinned ? c->stream : cube__stream_current_id();
}

/* The stream object of that id (created on first use). */
static inline cube_status_t cube__client_stream(const cube_client_t* c, cube__stream_t** out) {
  return cube__server_stream(c->server, cube__client_stream_id(c), out);
}

/* cube_client_create_restorable (statuses name |fn|): a buffer of |size|
 * bytes from |data| whose host copy is kept before the upload (create.c). */
cube_status_t cube__client_create_kept(cube_client_t* c, const char* fn, const void* data,
                                       size_t size, cube_handle_t* out_handle);

/* The failure of cube__client_handle for a live handle of another device. */
cube_status_t cube__client_handle_foreign(const cube_client_t* c, cube_handle_t h,
                                          const char* what, const cube__handle_info_t* info);

/* Looks up |h| for client |c|: live, and on c's device. |what| starts the
 * message of a failure ("cube_client_read: handles[2]"). Inline: launches
 * and reads look every handle up. */
static inline cube_status_t cube__client_handle(const cube_client_t* c, cube_handle_t h,
                                                const char* what, cube__handle_info_t* out) {
  CUBE_RETURN_IF_ERROR(cube__handle_get(h, what, out));
  if (out->server != c->server) return cube__client_handle_foreign(c, h, what, out);
  return CUBE_OK;
}

/* cube__client_handle with the description formatted only when the lookup
 * fails: launches and reads look handles up on every call, and formatting
 * the description up front cost more than the lookup. */
cube_status_t cube__client_handle_f(const cube_client_t* c, cube_handle_t h,
                                    cube__handle_info_t* out, const char* fmt, ...)
    CUBE_PRINTF(4, 5);

/* For a call of |c| on one buffer that cannot be recorded into a graph
 * (|what|: "a checkpoint"): the buffer of |handle| and the calling stream,
 * refused while the stream captures, and ending an automatic capture's
 * step (the buffer touched). */
cube_status_t cube__client_uncaptured_buffer(cube_client_t* c, cube_handle_t handle,
                                             const char* fn, const char* what,
                                             cube__handle_info_t* out_info,
                                             cube__stream_t** out_stream);

/* Geometry of a tensor's rows: width bytes, height rows, pitch apart, and
 * the bytes they span from the first row's start to the last row's end.
 * False (nothing set) when one of these overflows 64 bits: a shape and
 * strides that the caller made up can describe more bytes than exist. */
bool cube__rows(const cube_layout_desc_t* d, const uint64_t* strides, uint64_t* width,
                uint64_t* height, uint64_t* pitch, uint64_t* span);

#endif /* CUBE_CLIENT_CLIENT_INTERNAL_H_ */
