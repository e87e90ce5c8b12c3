/* The server as a device-queue service: created once per device (with its
 * options resolved against the option table and the backend device opened),
 * destroyed by cube_shutdown. Streams are in stream.c, tasks in tasks.c. */
#include "trace/trace.h"
#include "server/server.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "base/options.h"
#include "base/status.h"

/* A caller's polls before it sleeps while it waits for a host-memory device
 * (cube__device_set_caller_polls): about 2-3 us. */
#define CUBE__HOST_CALLER_POLLS 50u

static void cube__server_destroy(void* state) {
  cube__server_t* s = state;
  if (!s) return;
  if (s->streams) {
    for (uint32_t i = 0; i < s->max_streams; ++i) cube__stream_destroy(atomic_load(&s->streams[i]));
    free((void*)s->streams);
  }
  cube__backend_device_destroy(&s->be);
  cube__profiler_deinit(&s->profiler);
  cube__mem_ring_deinit(&s->mem_ring);
  free(s->installed);
  pthread_mutex_destroy(&s->streams_lock);
  free(s);
}

static cube_status_t cube__server_create(cube__device_key_t key, void* arg, void** out_state) {
  const cube_server_options_t* in = arg;
  cube__server_t* s = calloc(1, sizeof(*s));
  if (!s) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "server: no host memory");
  pthread_mutex_init(&s->streams_lock, NULL);
  cube__mem_ring_init(&s->mem_ring);
  s->id = (cube_device_id_t){(cube_backend_t)key.type, key.index};
  if (in) s->options = *in;
  cube_status_t status = CUBE_OK;
  /* Options left at 0 take the option table's value (the environment). */
  if (!s->options.memory_limit) {
    status = cube__option_status(CUBE__OPT_MEMORY_LIMIT);
    s->options.memory_limit = cube__option_size(CUBE__OPT_MEMORY_LIMIT);
  }
  if (!status && !s->options.max_streams) {
    status = cube__option_status(CUBE__OPT_MAX_STREAMS);
    s->options.max_streams = cube__option_u32(CUBE__OPT_MAX_STREAMS);
  }
  /* CUBE_CHECK_MODE's words are auto, enforce, validate: cube_check_mode_t. */
  if (!status && s->options.check_mode == CUBE_CHECK_AUTO) {
    status = cube__option_status(CUBE__OPT_CHECK_MODE);
    s->options.check_mode = (cube_check_mode_t)cube__option_enum(CUBE__OPT_CHECK_MODE);
  }
  /* CUBE_GRAPHS's words are off, auto: cube_graphs_mode_t minus one. */
  if (!status && s->options.graphs == CUBE_GRAPHS_DEFAULT) {
    status = cube__option_status(CUBE__OPT_GRAPHS);
    s->options.graphs = (cube_graphs_mode_t)(cube__option_enum(CUBE__OPT_GRAPHS) + 1);
  }
  if (!status && !s->options.graphs_warmup) {
    status = cube__option_status(CUBE__OPT_GRAPHS_WARMUP);
    s->options.graphs_warmup = cube__option_u32(CUBE__OPT_GRAPHS_WARMUP);
  }
  cube__trace_env_start(); /* CUBE_TRACE: once per process, from the first device */
  if (!status)
    status = cube__profiler_init(&s->profiler, s->options.profile_level, s->options.log_fn,
                                 s->options.log_user);
  if (!status) {
    s->options.profile_level = s->profiler.level;
    s->memory_limit = s->options.memory_limit;
    s->max_streams = s->options.max_streams;
    s->streams = calloc(s->max_streams, sizeof(*s->streams));
    if (!s->streams) status = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "server: no host memory");
  }
  if (!status)
    status = cube__backend_device_create(&s->be, s->id.backend, key.index, &s->options,
                                         &s->props, &s->features, &s->info);
  s->options.backend_params = NULL; /* borrowed for the creation only */
  if (status) {
    cube__server_destroy(s);
    return status;
  }
  /* Structs in library memory carry the library's layout (cube/cube.h,
   * "Struct sizes"), whatever the backend filled in. */
  s->props.struct_size = sizeof(s->props);
  s->info.struct_size = sizeof(s->info);
  s->options.struct_size = sizeof(s->options);
  *out_state = s;
  return CUBE_OK;
}

static void cube__server_task_failed(void* state, uint64_t stream_id, cube_status_t status) {
  cube__server_t* s = state;
  cube__stream_t* st;
  cube_status_t e = cube__server_stream(s, stream_id, &st);
  if (e) {
    cube_status_free(e);
    cube__profiler_log(&s->profiler, "task failed on stream %" PRIu64 ": %s", stream_id,
                       cube_status_message(status));
    cube_status_free(status);
    return;
  }
  cube__stream_push_error(st, status);
}

const cube__service_vtable_t cube__server_service = {
    "compute server", cube__server_create, cube__server_destroy, cube__server_task_failed};

cube_status_t cube__server_get(cube_device_id_t device, const cube_server_options_t* options,
                               bool insert, cube__server_t** out_server) {
  const cube__backend_vtable_t* b = cube__backend_get(device.backend);
  if ((unsigned)device.backend >= CUBE__BACKEND_COUNT)
    return CUBE_INVALID("device backend %d is not a backend", (int)device.backend);
  if (!b)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "backend %s is not built into this library",
                             cube_backend_name(device.backend));
  CUBE_RETURN_IF_ERROR(b->availability());
  uint32_t n = b->device_count();
  if (device.index >= n)
    return cube__status_make(CUBE_STATUS_NOT_FOUND,
                             "device %s:%u does not exist (the %s backend has %u device%s)",
                             b->name, device.index, b->name, n, n == 1 ? "" : "s");
  cube__device_key_t key = {(uint32_t)device.backend, device.index};
  cube_server_options_t defaults;
  if (!options) {
    cube_server_options_initialize(&defaults);
    options = &defaults;
  }
  cube__service_t* svc;
  if (insert) {
    /* Exactly one of several concurrent inits creates the server (with its
     * options); the others are told, rather than handed a server made with
     * another thread's options. */
    cube_status_t st = cube__service_create(key, options->queue_mode, &cube__server_service,
                                            (void*)options, &svc);
    if (cube_status_code(st) == CUBE_STATUS_ALREADY_EXISTS) {
      cube_status_free(st);
      return cube__status_make(CUBE_STATUS_ALREADY_EXISTS,
                               "cube_client_init: device %s:%u already has a server", b->name,
                               device.index);
    }
    CUBE_RETURN_IF_ERROR(st);
  } else {
    CUBE_RETURN_IF_ERROR(cube__service_get(key, options->queue_mode, &cube__server_service,
                                           (void*)options, &svc));
  }
  cube__server_t* s = cube__service_state_unsafe(svc);
  atomic_store_explicit(&s->service, svc, memory_order_relaxed);
  atomic_store_explicit(&s->device, cube__service_device(svc), memory_order_relaxed);
  /* On a device backend the caller issues its launch or replay after a read
   * or sync itself (tasks.c, graph.c): its runner need not spin then. */
  cube__device_set_caller_issues(cube__service_device(svc), cube__server_async(s));
  /* On a backend whose kernels run on the host's cores, a caller waiting for
   * a sync polls briefly and then sleeps: polling for the default ~100 us
   * took a core from the pool, which runs as many threads as there are
   * cores (docs/benchmarks.md, 2026-12-04 fifth session: saxpy on 16 cores). */
  if (!cube__server_async(s))
    cube__device_set_caller_polls(cube__service_device(svc), CUBE__HOST_CALLER_POLLS);
  *out_server = s;
  return CUBE_OK;
}

void cube_server_options_initialize(cube_server_options_t* o) {
  if (!o) return;
  memset(o, 0, sizeof(*o));
  o->struct_size = sizeof(*o);
}
cube_status_t cube__server_dlpack_device(cube__server_t* s, int32_t out[3]) {
  return cube__backend_ctl(&s->be, NULL, CUBE__CTL_DLPACK_DEVICE, out);
}

cube_status_t cube__server_external_storage(cube__server_t* s, cube__backend_external_t* x) {
  return cube__backend_ctl(&s->be, NULL, CUBE__CTL_EXTERNAL_STORAGE, x);
}

void cube__server_device_identity(cube__server_t* s, char* out, size_t size) {
  if (!size) return;
  out[0] = '\0';
  cube__backend_text_t t = {out, size};
  cube_status_t st = cube__backend_ctl(&s->be, NULL, CUBE__CTL_DEVICE_IDENTITY, &t);
  if (st || !out[0]) snprintf(out, size, "%s | %s", s->props.name, s->info.version);
  cube_status_free(st);
}

cube_status_t cube__server_native_stream(cube__stream_t* stream, void** out) {
  *out = NULL;
  /* The backend stream is a recovery's to replace (server.h). */
  if (!cube__stream_enter(stream)) return cube__backend_lost_status(&stream->server->be, NULL);
  cube_status_t st = cube__backend_ctl(&stream->server->be, stream->backend_stream,
                                       CUBE__CTL_NATIVE_STREAM, out);
  cube__stream_leave(stream);
  return st;
}
