/* The client API: validation, layouts, handle creation, then the server. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/bytes.h"
#include "base/status.h"
#include "client/handles.h"
#include "collective/collective.h"
#include "cube/cube.h"
#include "kernel/cache.h"
#include "kernel/kernel.h"
#include "server/server.h"

/* Bumped by cube_shutdown: clients made before it are refused afterwards
 * (their server is gone). */
static atomic_uint_fast64_t cube__epoch;

struct cube_client_s {
  atomic_uint refs;
  uint64_t epoch; /* cube__epoch when created */
  cube__server_t* server;
  bool pinned;     /* stream pinned by cube_client_set_stream */
  uint64_t stream; /* valid when pinned */
};

struct cube_resource_s {
  cube__memory_t* mem; /* binding reference */
  void* ptr;
  uint64_t size;
};

static cube_status_t cube__client_check(const cube_client_t* c, const char* fn) {
  if (!c) return CUBE_INVALID("%s: client is NULL", fn);
  if (c->epoch != atomic_load_explicit(&cube__epoch, memory_order_relaxed))
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "%s: the client was created before cube_shutdown; load a new one", fn);
  return CUBE_OK;
}

/* True for a client that may be used (not NULL, not from before a shutdown). */
static bool cube__client_live(const cube_client_t* c) {
  return c && c->epoch == atomic_load_explicit(&cube__epoch, memory_order_relaxed);
}

#define CUBE__CHECK_CLIENT(c, fn) CUBE_RETURN_IF_ERROR(cube__client_check((c), (fn)))

#define CUBE__CHECK_OUT(p, fn, name) \
  do {                               \
    if (!(p)) return CUBE_INVALID("%s: %s is NULL", fn, name); \
  } while (0)

static uint64_t cube__client_stream_id(const cube_client_t* c) {
  return c->pinned ? c->stream : cube__stream_current_id();
}

static cube_status_t cube__client_stream(const cube_client_t* c, cube__stream_t** out) {
  return cube__server_stream(c->server, cube__client_stream_id(c), out);
}

//===----------------------------------------------------------------------===//
// Clients
//===----------------------------------------------------------------------===//

static cube_status_t cube__client_new(cube__server_t* s, cube_client_t** out) {
  cube_client_t* c = calloc(1, sizeof(*c));
  if (!c) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "client: no host memory");
  atomic_init(&c->refs, 1);
  c->epoch = atomic_load(&cube__epoch);
  c->server = s;
  *out = c;
  return CUBE_OK;
}

cube_status_t cube_client_load(cube_device_id_t device, cube_client_t** out_client) {
  CUBE__CHECK_OUT(out_client, "cube_client_load", "out_client");
  cube__server_t* s;
  cube_status_t st = cube__server_get(device, NULL, false, &s);
  if (st) return cube__status_annotate(st, "cube_client_load");
  return cube__client_new(s, out_client);
}

cube_status_t cube_client_init(cube_device_id_t device, const cube_server_options_t* options,
                               cube_client_t** out_client) {
  CUBE__CHECK_OUT(out_client, "cube_client_init", "out_client");
  if (options && ((unsigned)options->queue_mode > CUBE_QUEUE_INLINE ||
                  (unsigned)options->profile_level > CUBE_PROFILE_FULL ||
                  (unsigned)options->memory_config > CUBE_MEMORY_CONFIG_EXCLUSIVE_PAGES ||
                  (unsigned)options->check_mode > CUBE_CHECK_VALIDATE))
    return CUBE_INVALID("cube_client_init: options hold an out-of-range enum value "
                        "(queue_mode %d, profile_level %d, memory_config %d, check_mode %d)",
                        (int)options->queue_mode, (int)options->profile_level,
                        (int)options->memory_config, (int)options->check_mode);
  cube__server_t* s;
  cube_status_t st = cube__server_get(device, options, true, &s);
  if (st && cube_status_code(st) == CUBE_STATUS_ALREADY_EXISTS) return st; /* names it already */
  if (st) return cube__status_annotate(st, "cube_client_init");
  return cube__client_new(s, out_client);
}

cube_status_t cube_client_clone(cube_client_t* c, cube_client_t** out_client) {
  CUBE__CHECK_CLIENT(c, "cube_client_clone");
  CUBE__CHECK_OUT(out_client, "cube_client_clone", "out_client");
  CUBE_RETURN_IF_ERROR(cube__client_new(c->server, out_client));
  (*out_client)->pinned = c->pinned;
  (*out_client)->stream = c->stream;
  return CUBE_OK;
}

cube_client_t* cube_client_retain(cube_client_t* c) {
  if (c) atomic_fetch_add_explicit(&c->refs, 1, memory_order_relaxed);
  return c;
}

void cube_client_release(cube_client_t* c) {
  if (c && atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1) free(c);
}

cube_device_id_t cube_client_device(const cube_client_t* c) {
  return cube__client_live(c) ? c->server->id : (cube_device_id_t){CUBE_BACKEND_COUNT, 0};
}
const cube_backend_info_t* cube_client_info(const cube_client_t* c) {
  return cube__client_live(c) ? &c->server->info : NULL;
}
const cube_device_properties_t* cube_client_properties(const cube_client_t* c) {
  return cube__client_live(c) ? &c->server->props : NULL;
}
const cube_features_t* cube_client_features(const cube_client_t* c) {
  return cube__client_live(c) ? &c->server->features : NULL;
}
bool cube_client_is_blocking(const cube_client_t* c) {
  return cube__client_live(c) && cube__device_is_blocking(c->server->device);
}
cube_profile_level_t cube_client_profile_level(const cube_client_t* c) {
  return cube__client_live(c) ? c->server->profiler.level : CUBE_PROFILE_NONE;
}

//===----------------------------------------------------------------------===//
// Streams
//===----------------------------------------------------------------------===//

cube_stream_id_t cube_stream_current(void) { return cube__stream_current_id(); }
cube_stream_id_t cube_stream_create_id(void) { return cube__stream_new_id(); }

void cube_client_set_stream(cube_client_t* c, cube_stream_id_t stream) {
  if (!c) return;
  c->pinned = true;
  c->stream = stream;
}
void cube_client_unset_stream(cube_client_t* c) {
  if (c) c->pinned = false;
}
cube_stream_id_t cube_client_stream(const cube_client_t* c) {
  return c ? cube__client_stream_id(c) : 0;
}

//===----------------------------------------------------------------------===//
// Creating memory
//===----------------------------------------------------------------------===//

/* Geometry of a tensor's rows: width bytes, height rows, pitch apart. */
static void cube__rows(const cube_layout_desc_t* d, const uint64_t* strides, uint64_t* width,
                       uint64_t* height, uint64_t* pitch) {
  uint32_t r = d->rank;
  *width = (r ? d->shape[r - 1] : 1) * d->elem_size;
  uint64_t h = 1;
  for (uint32_t i = 0; i + 1 < r; ++i) h *= d->shape[i];
  *height = h;
  *pitch = r >= 2 ? strides[r - 2] * d->elem_size : *width;
}

static uint64_t cube__dense_size(const cube_layout_desc_t* d) {
  uint64_t n = d->elem_size;
  for (uint32_t i = 0; i < d->rank; ++i) n *= d->shape[i];
  return n;
}

#define CUBE__STACK_TENSORS 4

/* Creates |count| tensors in one buffer. |data| (with |sizes|) or |bytes|
 * (consumed) or neither (empty). */
static cube_status_t cube__create_tensors(cube_client_t* c, const char* fn, size_t count,
                                          const cube_layout_desc_t* descs, const void* const* data,
                                          const size_t* sizes, cube_bytes_t** bytes,
                                          cube_tensor_t* out) {
  cube__server_t* s = c->server;
  if (count == 0) return CUBE_OK;
  if (!descs) return CUBE_INVALID("%s: descs is NULL for %zu tensors", fn, count);
  if (data && !sizes) return CUBE_INVALID("%s: sizes is NULL", fn);
  /* Layout results: on the stack for a few tensors (every single-tensor
   * create), on the heap beyond. */
  uint64_t stack_strides[CUBE__STACK_TENSORS][CUBE_MAX_RANK];
  uint64_t stack_offsets[CUBE__STACK_TENSORS], stack_sizes[CUBE__STACK_TENSORS];
  bool heap = count > CUBE__STACK_TENSORS;
  uint64_t(*strides)[CUBE_MAX_RANK] = heap ? malloc(count * sizeof(*strides)) : stack_strides;
  uint64_t* offsets = heap ? malloc(count * sizeof(uint64_t)) : stack_offsets;
  uint64_t* tsizes = heap ? malloc(count * sizeof(uint64_t)) : stack_sizes;
  cube_status_t st = CUBE_OK;
  cube__memory_t* mem = NULL;
  size_t made = 0;
  uint64_t total = 0;
  if (!strides || !offsets || !tsizes) {
    st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
    goto done;
  }
  st = cube_layout_compute(s->props.layout_policy, s->props.memory.alignment, count, descs,
                           strides, offsets, tsizes, &total);
  if (st) {
    st = cube__status_annotate(st, "%s", fn);
    goto done;
  }
  for (size_t i = 0; i < count; ++i) {
    uint64_t dense = cube__dense_size(&descs[i]);
    if (dense == 0) {
      st = CUBE_INVALID("%s: descs[%zu] describes 0 bytes (size 0 is invalid)", fn, i);
      goto done;
    }
    if (data) {
      if (!data[i]) {
        st = CUBE_INVALID("%s: data[%zu] is NULL", fn, i);
        goto done;
      }
      if (sizes[i] != dense) {
        st = CUBE_INVALID("%s: data[%zu] holds %zu bytes but its shape needs %" PRIu64
                          " (prod(shape) * elem_size %u)",
                          fn, i, sizes[i], dense, descs[i].elem_size);
        goto done;
      }
    }
    if (bytes) {
      if (!bytes[i]) {
        st = CUBE_INVALID("%s: bytes[%zu] is NULL", fn, i);
        goto done;
      }
      if (cube_bytes_size(bytes[i]) != dense) {
        st = CUBE_INVALID("%s: bytes[%zu] holds %zu bytes but its shape needs %" PRIu64, fn, i,
                          cube_bytes_size(bytes[i]), dense);
        goto done;
      }
    }
  }
  if (total > s->props.memory.max_page_size) {
    char a[32];
    st = CUBE_INVALID("%s: size %" PRIu64 " exceeds the largest single allocation of %s (%s, "
                      "max_page_size)",
                      fn, total, s->props.name,
                      cube__format_bytes(s->props.memory.max_page_size, a, sizeof(a)));
    goto done;
  }
  cube__stream_t* stream;
  st = cube__client_stream(c, &stream);
  if (st) goto done;
  /* Copy file-backed buffers out first (staging(file_only)): never upload
   * from a mapping, whose file may have shrunk (SIGBUS); the copy says so. */
  for (size_t i = 0; bytes && i < count; ++i) {
    st = cube__server_stage_file(stream, &bytes[i]);
    if (st) {
      st = cube__status_annotate(st, "%s: bytes[%zu]", fn, i);
      goto done;
    }
  }
  /* Reserve up to the end of the last tensor: the rounding between tensors
   * is part of the buffer, the tail rounding is the pool's padding (so
   * bytes_in_use counts what was asked for). */
  st = cube__server_alloc(stream, offsets[count - 1] + tsizes[count - 1], fn, &mem);
  if (st) goto done;
  uint64_t stream_id = stream->id;
  for (made = 0; made < count; ++made) {
    cube__handle_info_t info = {mem, total, offsets[made], total - offsets[made] - tsizes[made],
                                s, stream_id};
    if (made > 0) cube__memory_handle_ref(mem);
    st = cube__handle_create(&info, &out[made].handle);
    if (st) {
      if (made > 0) cube__memory_handle_unref(mem);
      goto done;
    }
    out[made].rank = descs[made].rank;
    out[made].elem_size = descs[made].elem_size;
    memset(out[made].shape, 0, sizeof(out[made].shape));
    memset(out[made].strides, 0, sizeof(out[made].strides));
    memcpy(out[made].shape, descs[made].shape, descs[made].rank * sizeof(uint64_t));
    memcpy(out[made].strides, strides[made], descs[made].rank * sizeof(uint64_t));
  }
  for (size_t i = 0; i < count && (data || bytes); ++i) {
    uint64_t w, h, p;
    cube__rows(&descs[i], strides[i], &w, &h, &p);
    if (data)
      cube__server_write(stream, mem, offsets[i], p, data[i], w, h, NULL);
    else {
      cube__server_write(stream, mem, offsets[i], p, cube_bytes_const_data(bytes[i]), w, h,
                         bytes[i]);
      bytes[i] = NULL;
    }
  }
done:
  if (st) {
    for (size_t i = 0; i < made; ++i) {
      cube_handle_release(out[i].handle);
      out[i].handle = CUBE_HANDLE_NULL;
    }
    if (mem && made == 0) cube__memory_handle_unref(mem);
  }
  if (bytes)
    for (size_t i = 0; i < count; ++i) cube_bytes_release(bytes[i]);
  if (heap) {
    free(strides);
    free(offsets);
    free(tsizes);
  }
  return st;
}

static cube_status_t cube__desc_1d(uint64_t size, cube_layout_desc_t* d) {
  memset(d, 0, sizeof(*d));
  d->strategy = CUBE_LAYOUT_CONTIGUOUS;
  d->rank = 1;
  d->shape[0] = size;
  d->elem_size = 1;
  return CUBE_OK;
}

static cube_status_t cube__desc_nd(const char* fn, cube_layout_strategy_t strategy, uint32_t rank,
                                   const uint64_t* shape, uint32_t elem_size,
                                   cube_layout_desc_t* d) {
  if (rank && !shape) return CUBE_INVALID("%s: shape is NULL for rank %u", fn, rank);
  cube_status_t st = cube_layout_desc_init(strategy, rank, shape, elem_size, d);
  return st ? cube__status_annotate(st, "%s", fn) : CUBE_OK;
}

cube_status_t cube_client_create_from_slice(cube_client_t* c, const void* data, size_t size,
                                            cube_handle_t* out_handle) {
  const char* fn = "cube_client_create_from_slice";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_handle, fn, "out_handle");
  if (!data) return CUBE_INVALID("%s: data is NULL", fn);
  if (size == 0) return CUBE_INVALID("%s: size 0 is invalid (must be > 0)", fn);
  cube_layout_desc_t d;
  cube__desc_1d(size, &d);
  cube_tensor_t t;
  CUBE_RETURN_IF_ERROR(cube__create_tensors(c, fn, 1, &d, &data, &size, NULL, &t));
  *out_handle = t.handle;
  return CUBE_OK;
}

cube_status_t cube_client_create(cube_client_t* c, cube_bytes_t* bytes, cube_handle_t* out_handle) {
  const char* fn = "cube_client_create";
  cube_status_t cs = cube__client_check(c, fn);
  if (cs || !out_handle || !bytes || cube_bytes_size(bytes) == 0) {
    size_t n = bytes ? cube_bytes_size(bytes) : 0;
    cube_bytes_release(bytes);
    if (cs) return cs;
    if (!out_handle) return CUBE_INVALID("%s: out_handle is NULL", fn);
    if (!bytes) return CUBE_INVALID("%s: bytes is NULL", fn);
    return CUBE_INVALID("%s: bytes holds %zu bytes (size 0 is invalid)", fn, n);
  }
  cube_layout_desc_t d;
  cube__desc_1d(cube_bytes_size(bytes), &d);
  cube_tensor_t t;
  CUBE_RETURN_IF_ERROR(cube__create_tensors(c, fn, 1, &d, NULL, NULL, &bytes, &t));
  *out_handle = t.handle;
  return CUBE_OK;
}

cube_status_t cube_client_create_tensor_from_slice(cube_client_t* c, const void* data, size_t size,
                                                   uint32_t rank, const uint64_t* shape,
                                                   uint32_t elem_size, cube_tensor_t* out_tensor) {
  const char* fn = "cube_client_create_tensor_from_slice";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_tensor, fn, "out_tensor");
  if (!data) return CUBE_INVALID("%s: data is NULL", fn);
  cube_layout_desc_t d;
  CUBE_RETURN_IF_ERROR(cube__desc_nd(fn, CUBE_LAYOUT_OPTIMIZED, rank, shape, elem_size, &d));
  return cube__create_tensors(c, fn, 1, &d, &data, &size, NULL, out_tensor);
}

cube_status_t cube_client_create_tensor(cube_client_t* c, cube_bytes_t* bytes, uint32_t rank,
                                        const uint64_t* shape, uint32_t elem_size,
                                        cube_tensor_t* out_tensor) {
  const char* fn = "cube_client_create_tensor";
  cube_layout_desc_t d;
  cube_status_t st = cube__client_check(c, fn);
  if (st) {
  } else if (!out_tensor) {
    st = CUBE_INVALID("%s: out_tensor is NULL", fn);
  } else if (!bytes) {
    st = CUBE_INVALID("%s: bytes is NULL", fn);
  } else {
    st = cube__desc_nd(fn, CUBE_LAYOUT_OPTIMIZED, rank, shape, elem_size, &d);
  }
  if (st) {
    cube_bytes_release(bytes);
    return st;
  }
  return cube__create_tensors(c, fn, 1, &d, NULL, NULL, &bytes, out_tensor);
}

cube_status_t cube_client_create_tensors_from_slices(cube_client_t* c, size_t count,
                                                     const cube_layout_desc_t* descs,
                                                     const void* const* data, const size_t* sizes,
                                                     cube_tensor_t* out_tensors) {
  const char* fn = "cube_client_create_tensors_from_slices";
  CUBE__CHECK_CLIENT(c, fn);
  if (count && !out_tensors) return CUBE_INVALID("%s: out_tensors is NULL", fn);
  if (count && !data) return CUBE_INVALID("%s: data is NULL", fn);
  return cube__create_tensors(c, fn, count, descs, data, sizes, NULL, out_tensors);
}

cube_status_t cube_client_create_tensors(cube_client_t* c, size_t count,
                                         const cube_layout_desc_t* descs,
                                         cube_bytes_t* const* bytes, cube_tensor_t* out_tensors) {
  const char* fn = "cube_client_create_tensors";
  cube_status_t st = cube__client_check(c, fn);
  if (!st && count && !out_tensors) st = CUBE_INVALID("%s: out_tensors is NULL", fn);
  if (!st && count && !bytes) return CUBE_INVALID("%s: bytes is NULL", fn);
  if (st) {
    if (bytes)
      for (size_t i = 0; i < count; ++i) cube_bytes_release(bytes[i]);
    return st;
  }
  if (count == 0) return CUBE_OK;
  cube_bytes_t** own = malloc(count * sizeof(*own));
  if (!own) {
    for (size_t i = 0; i < count; ++i) cube_bytes_release(bytes[i]);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
  }
  memcpy(own, bytes, count * sizeof(*own));
  st = cube__create_tensors(c, fn, count, descs, NULL, NULL, own, out_tensors);
  free(own);
  return st;
}

cube_status_t cube_client_reserve_staging(cube_client_t* c, size_t count, const size_t* sizes,
                                          cube_bytes_t** out_bytes) {
  const char* fn = "cube_client_reserve_staging";
  CUBE__CHECK_CLIENT(c, fn);
  if (count == 0) return CUBE_OK;
  if (!sizes) return CUBE_INVALID("%s: sizes is NULL", fn);
  CUBE__CHECK_OUT(out_bytes, fn, "out_bytes");
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &stream));
  for (size_t i = 0; i < count; ++i) {
    cube_status_t st = cube__server_staging(stream, sizes[i], &out_bytes[i]);
    if (st) {
      /* As CubeCL: never fail for want of pinned memory; fall back to heap. */
      cube_status_free(st);
      st = cube_bytes_allocate(sizes[i], &out_bytes[i]);
      if (st) {
        cube_bytes_release_array(out_bytes, i);
        return cube__status_annotate(st, "%s: sizes[%zu] = %zu", fn, i, sizes[i]);
      }
    }
  }
  return CUBE_OK;
}

cube_status_t cube_client_staging(cube_client_t* c, size_t count, cube_bytes_t** inout_bytes,
                                  bool file_only) {
  const char* fn = "cube_client_staging";
  CUBE__CHECK_CLIENT(c, fn);
  if (count && !inout_bytes) return CUBE_INVALID("%s: inout_bytes is NULL", fn);
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &stream));
  if (!stream->pinned) return CUBE_OK; /* no staging memory: nothing to do (as CubeCL) */
  for (size_t i = 0; i < count; ++i) {
    cube_bytes_t* b = inout_bytes[i];
    if (!b) return CUBE_INVALID("%s: inout_bytes[%zu] is NULL", fn, i);
    cube_bytes_property_t p = cube_bytes_property(b);
    bool eligible = p == CUBE_BYTES_FILE || (!file_only && p != CUBE_BYTES_PINNED);
    if (!eligible) continue;
    cube_bytes_t* staged;
    cube_status_t st = cube__server_staging(stream, cube_bytes_size(b), &staged);
    if (st) {
      cube_status_free(st); /* as CubeCL: silently keep the original */
      continue;
    }
    st = cube__bytes_copy_out(b, 0, cube_bytes_data(staged), cube_bytes_size(b));
    if (st) { /* a FILE buffer whose file shrank: entries from i on are untouched */
      cube_bytes_release(staged);
      return cube__status_annotate(st, "%s: inout_bytes[%zu]", fn, i);
    }
    cube_bytes_release(b);
    inout_bytes[i] = staged;
  }
  return CUBE_OK;
}

cube_status_t cube_client_create_from_slice_pinned(cube_client_t* c, const void* data, size_t size,
                                                   cube_handle_t* out_handle) {
  const char* fn = "cube_client_create_from_slice_pinned";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_handle, fn, "out_handle");
  if (!data) return CUBE_INVALID("%s: data is NULL", fn);
  if (size == 0) return CUBE_INVALID("%s: size 0 is invalid (must be > 0)", fn);
  cube_bytes_t* b;
  CUBE_RETURN_IF_ERROR(cube_client_reserve_staging(c, 1, &size, &b));
  memcpy(cube_bytes_data(b), data, size);
  cube_status_t st = cube_client_create(c, b, out_handle);
  return st ? cube__status_annotate(st, "%s", fn) : CUBE_OK;
}

cube_status_t cube_client_create_tensors_from_slices_pinned(cube_client_t* c, size_t count,
                                                            const cube_layout_desc_t* descs,
                                                            const void* const* data,
                                                            const size_t* sizes,
                                                            cube_tensor_t* out_tensors) {
  const char* fn = "cube_client_create_tensors_from_slices_pinned";
  CUBE__CHECK_CLIENT(c, fn);
  if (count == 0) return CUBE_OK;
  if (!data || !sizes || !descs || !out_tensors)
    return CUBE_INVALID("%s: %s is NULL", fn,
                        !data ? "data" : !sizes ? "sizes" : !descs ? "descs" : "out_tensors");
  for (size_t i = 0; i < count; ++i) {
    if (!data[i]) return CUBE_INVALID("%s: data[%zu] is NULL", fn, i);
    /* Check the sizes against the shapes before any staging is reserved. */
    cube_layout_desc_t d;
    cube_status_t st = cube_layout_desc_init(descs[i].strategy, descs[i].rank, descs[i].shape,
                                             descs[i].elem_size, &d);
    if (st) return cube__status_annotate(st, "%s: descs[%zu]", fn, i);
    uint64_t dense = cube__dense_size(&d);
    if (sizes[i] != dense)
      return CUBE_INVALID("%s: data[%zu] holds %zu bytes but its shape needs %" PRIu64
                          " (prod(shape) * elem_size %u)",
                          fn, i, sizes[i], dense, descs[i].elem_size);
  }
  cube_bytes_t** b = calloc(count, sizeof(*b));
  if (!b) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
  cube_status_t st = cube_client_reserve_staging(c, count, sizes, b);
  if (!st) {
    for (size_t i = 0; i < count; ++i) memcpy(cube_bytes_data(b[i]), data[i], sizes[i]);
    st = cube__create_tensors(c, fn, count, descs, NULL, NULL, b, out_tensors);
  }
  free(b);
  return st;
}

/* The pool-hit path of cube_client_empty. A 1-D byte buffer has stride 1
 * and |size| bytes under either layout policy, and the buffer is |size|
 * rounded up to the alignment: what cube_layout_compute gives, without its
 * generality. False (nothing done) for anything it would refuse: the general
 * path then gives the same errors. */
static bool cube__empty_1d(cube_client_t* c, const char* fn, size_t size,
                           cube_handle_t* out_handle, cube_status_t* out_status) {
  cube__server_t* s = c->server;
  uint64_t align = s->props.memory.alignment;
  uint64_t max = s->props.memory.max_page_size;
  if ((s->props.layout_policy != CUBE_LAYOUT_POLICY_CONTIGUOUS &&
       s->props.layout_policy != CUBE_LAYOUT_POLICY_PITCHED) ||
      !align || (align & (align - 1)) || size > max)
    return false;
  uint64_t total = ((uint64_t)size + align - 1) & ~(align - 1);
  if (total > max || total < size) return false;
  cube__stream_t* stream;
  cube__memory_t* mem;
  cube_status_t st = cube__client_stream(c, &stream);
  if (!st) st = cube__server_alloc(stream, size, fn, &mem);
  if (!st) {
    cube__handle_info_t info = {mem, total, 0, total - size, s, stream->id};
    st = cube__handle_create(&info, out_handle);
    if (st) cube__memory_handle_unref(mem);
  }
  *out_status = st;
  return true;
}

cube_status_t cube_client_empty(cube_client_t* c, size_t size, cube_handle_t* out_handle) {
  const char* fn = "cube_client_empty";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_handle, fn, "out_handle");
  if (size == 0) return CUBE_INVALID("%s: size 0 is invalid (must be > 0)", fn);
  cube_status_t st;
  if (cube__empty_1d(c, fn, size, out_handle, &st)) return st;
  cube_layout_desc_t d;
  cube__desc_1d(size, &d);
  cube_tensor_t t;
  CUBE_RETURN_IF_ERROR(cube__create_tensors(c, fn, 1, &d, NULL, NULL, NULL, &t));
  *out_handle = t.handle;
  return CUBE_OK;
}

cube_status_t cube_client_empty_tensor(cube_client_t* c, uint32_t rank, const uint64_t* shape,
                                       uint32_t elem_size, cube_tensor_t* out_tensor) {
  const char* fn = "cube_client_empty_tensor";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_tensor, fn, "out_tensor");
  cube_layout_desc_t d;
  CUBE_RETURN_IF_ERROR(cube__desc_nd(fn, CUBE_LAYOUT_OPTIMIZED, rank, shape, elem_size, &d));
  return cube__create_tensors(c, fn, 1, &d, NULL, NULL, NULL, out_tensor);
}

cube_status_t cube_client_empty_tensors(cube_client_t* c, size_t count,
                                        const cube_layout_desc_t* descs,
                                        cube_tensor_t* out_tensors) {
  const char* fn = "cube_client_empty_tensors";
  CUBE__CHECK_CLIENT(c, fn);
  if (count && !out_tensors) return CUBE_INVALID("%s: out_tensors is NULL", fn);
  return cube__create_tensors(c, fn, count, descs, NULL, NULL, NULL, out_tensors);
}

void cube_tensor_release(cube_tensor_t* t) {
  if (!t) return;
  cube_handle_release(t->handle);
  t->handle = CUBE_HANDLE_NULL;
}

void cube_tensor_release_array(cube_tensor_t* t, size_t count) {
  if (!t) return;
  for (size_t i = 0; i < count; ++i) cube_tensor_release(&t[i]);
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

/* Looks up |h| for client |c|: live, and on c's device. */
static cube_status_t cube__client_handle(const cube_client_t* c, cube_handle_t h, const char* what,
                                         cube__handle_info_t* out) {
  CUBE_RETURN_IF_ERROR(cube__handle_get(h, what, out));
  if (out->server != c->server)
    return CUBE_INVALID("%s: handle 0x%" PRIx64 " lives on %s, not on this client's %s", what,
                        h.id, out->server->props.name, c->server->props.name);
  return CUBE_OK;
}

/* cube__client_handle with the description formatted only when the lookup
 * fails: launches and reads look handles up on every call, and formatting
 * the description up front cost more than the lookup. */
static cube_status_t cube__client_handle_f(const cube_client_t* c, cube_handle_t h,
                                           cube__handle_info_t* out, const char* fmt, ...)
    CUBE_PRINTF(4, 5);
static cube_status_t cube__client_handle_f(const cube_client_t* c, cube_handle_t h,
                                           cube__handle_info_t* out, const char* fmt, ...) {
  cube_status_t st = cube__client_handle(c, h, "", out);
  if (!st) return CUBE_OK;
  cube_status_free(st);
  char what[192];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  /* The same lookup again (a failed handle stays failed): its message. */
  return cube__client_handle(c, h, what, out);
}

static cube_status_t cube__read_handles(cube_client_t* c, const char* fn, size_t count,
                                        const cube_handle_t* handles, cube_future_t** out) {
  CUBE__CHECK_CLIENT(c, fn);
  if (count == 0) return CUBE_INVALID("%s: count is 0", fn);
  if (!handles) return CUBE_INVALID("%s: handles is NULL", fn);
  cube__read_region_t* r = calloc(count, sizeof(*r));
  if (!r) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
  for (size_t i = 0; i < count; ++i) {
    cube__handle_info_t info;
    cube_status_t st = cube__client_handle_f(c, handles[i], &info, "%s: handles[%zu]", fn, i);
    if (st) {
      for (size_t j = 0; j < i; ++j) cube__memory_unref(r[j].mem);
      free(r);
      return st;
    }
    cube__memory_ref(info.mem);
    uint64_t n = cube__handle_view_size(&info);
    r[i] = (cube__read_region_t){info.mem, info.offset_start, n, 1, n, NULL};
  }
  cube_status_t st = cube__server_read(c->server, cube__client_stream_id(c), count, r, out);
  free(r);
  return st;
}

cube_status_t cube_client_read_async(cube_client_t* c, size_t count, const cube_handle_t* handles,
                                     cube_future_t** out_future) {
  CUBE__CHECK_OUT(out_future, "cube_client_read_async", "out_future");
  return cube__read_handles(c, "cube_client_read_async", count, handles, out_future);
}

static cube_status_t cube__wait_future(cube_future_t* f, cube_bytes_t** out) {
  cube_status_t st = cube_future_wait(f, UINT64_MAX, out);
  cube_future_release(f);
  return st;
}

cube_status_t cube_client_read(cube_client_t* c, size_t count, const cube_handle_t* handles,
                               cube_bytes_t** out_bytes) {
  CUBE__CHECK_OUT(out_bytes, "cube_client_read", "out_bytes");
  cube_future_t* f;
  CUBE_RETURN_IF_ERROR(cube__read_handles(c, "cube_client_read", count, handles, &f));
  return cube__wait_future(f, out_bytes);
}

cube_status_t cube_client_read_one(cube_client_t* c, cube_handle_t handle,
                                   cube_bytes_t** out_bytes) {
  CUBE__CHECK_OUT(out_bytes, "cube_client_read_one", "out_bytes");
  cube_future_t* f;
  CUBE_RETURN_IF_ERROR(cube__read_handles(c, "cube_client_read_one", 1, &handle, &f));
  return cube__wait_future(f, out_bytes);
}

cube_status_t cube_client_read_into(cube_client_t* c, cube_handle_t handle, void* dst,
                                    size_t dst_size) {
  static const char fn[] = "cube_client_read_into";
  CUBE__CHECK_CLIENT(c, fn);
  cube__handle_info_t info;
  CUBE_RETURN_IF_ERROR(cube__client_handle_f(c, handle, &info, "%s: handle", fn));
  uint64_t n = cube__handle_view_size(&info);
  if (dst_size != n)
    return CUBE_INVALID("%s: handle 0x%" PRIx64 " views %" PRIu64 " bytes, dst_size is %zu", fn,
                        handle.id, n, dst_size);
  if (!dst && n) return CUBE_INVALID("%s: dst is NULL (%zu bytes to read)", fn, dst_size);
  cube__memory_ref(info.mem);
  cube__read_region_t r = {info.mem, info.offset_start, n, 1, n, dst};
  cube_future_t* f;
  CUBE_RETURN_IF_ERROR(cube__server_read(c->server, cube__client_stream_id(c), 1, &r, &f));
  cube_bytes_t* empty = NULL;
  cube_status_t st = cube__wait_future(f, &empty);
  cube_bytes_release(empty);
  return st;
}

static cube_status_t cube__read_tensors(cube_client_t* c, const char* fn, size_t count,
                                        const cube_tensor_t* tensors, cube_future_t** out) {
  CUBE__CHECK_CLIENT(c, fn);
  if (count == 0) return CUBE_INVALID("%s: count is 0", fn);
  if (!tensors) return CUBE_INVALID("%s: tensors is NULL", fn);
  cube__read_region_t* r = calloc(count, sizeof(*r));
  if (!r) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
  cube_status_t st = CUBE_OK;
  size_t i = 0;
  for (; i < count; ++i) {
    const cube_tensor_t* t = &tensors[i];
    char what[96];
    snprintf(what, sizeof(what), "%s: tensors[%zu].handle", fn, i);
    cube__handle_info_t info;
    st = cube__client_handle(c, t->handle, what, &info);
    if (st) break;
    cube_layout_desc_t d;
    st = cube_layout_desc_init(CUBE_LAYOUT_CONTIGUOUS, t->rank, t->shape, t->elem_size, &d);
    if (st) {
      st = cube__status_annotate(st, "%s: tensors[%zu]", fn, i);
      break;
    }
    if (!cube_layout_strides_readable(c->server->props.layout_policy, t->rank, t->shape,
                                      t->strides)) {
      char buf[256];
      size_t o = 0;
      for (uint32_t k = 0; k < t->rank && o < sizeof(buf) - 24; ++k)
        o += (size_t)snprintf(buf + o, sizeof(buf) - o, "%s%" PRIu64, k ? ", " : "", t->strides[k]);
      buf[o] = 0;
      st = cube__status_make(CUBE_STATUS_UNSUPPORTED,
                             "%s: tensors[%zu] has strides [%s] that %s does not produce "
                             "(it reads %s layouts only)",
                             fn, i, buf, c->server->props.name,
                             c->server->props.layout_policy == CUBE_LAYOUT_POLICY_PITCHED
                                 ? "pitched row-major"
                                 : "contiguous row-major");
      break;
    }
    uint64_t w, h, p;
    cube__rows(&d, t->strides, &w, &h, &p);
    uint64_t need = h ? (h - 1) * p + w : 0;
    uint64_t view = cube__handle_view_size(&info);
    if (need > view) {
      st = CUBE_INVALID("%s: tensors[%zu] needs %" PRIu64 " bytes but its handle views %" PRIu64,
                        fn, i, need, view);
      break;
    }
    cube__memory_ref(info.mem);
    r[i] = (cube__read_region_t){info.mem, info.offset_start, w, h, p, NULL};
  }
  if (st) {
    for (size_t j = 0; j < i; ++j) cube__memory_unref(r[j].mem);
    free(r);
    return st;
  }
  st = cube__server_read(c->server, cube__client_stream_id(c), count, r, out);
  free(r);
  return st;
}

cube_status_t cube_client_read_tensor_async(cube_client_t* c, size_t count,
                                            const cube_tensor_t* tensors,
                                            cube_future_t** out_future) {
  CUBE__CHECK_OUT(out_future, "cube_client_read_tensor_async", "out_future");
  return cube__read_tensors(c, "cube_client_read_tensor_async", count, tensors, out_future);
}

cube_status_t cube_client_read_tensor(cube_client_t* c, size_t count, const cube_tensor_t* tensors,
                                      cube_bytes_t** out_bytes) {
  CUBE__CHECK_OUT(out_bytes, "cube_client_read_tensor", "out_bytes");
  cube_future_t* f;
  CUBE_RETURN_IF_ERROR(cube__read_tensors(c, "cube_client_read_tensor", count, tensors, &f));
  return cube__wait_future(f, out_bytes);
}

//===----------------------------------------------------------------------===//
// Resources
//===----------------------------------------------------------------------===//

cube_status_t cube_client_get_resource(cube_client_t* c, cube_handle_t handle,
                                       cube_resource_t** out_resource) {
  const char* fn = "cube_client_get_resource";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_resource, fn, "out_resource");
  cube__handle_info_t info;
  CUBE_RETURN_IF_ERROR(cube__client_handle(c, handle, "cube_client_get_resource: handle", &info));
  const cube__storage_t* storage;
  uint64_t off, sz;
  if (!cube__memory_resolve(info.mem, &storage, &off, &sz))
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "%s: memory of handle 0x%" PRIx64
                             " is not bound", fn, handle.id);
  cube_resource_t* r = calloc(1, sizeof(*r));
  if (!r) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
  cube__memory_ref(info.mem);
  r->mem = info.mem;
  r->ptr = (char*)storage->ptr + off + info.offset_start;
  r->size = cube__handle_view_size(&info);
  *out_resource = r;
  return CUBE_OK;
}

void* cube_resource_ptr(const cube_resource_t* r) { return r ? r->ptr : NULL; }
uint64_t cube_resource_size(const cube_resource_t* r) { return r ? r->size : 0; }
void cube_resource_release(cube_resource_t* r) {
  if (!r) return;
  cube__memory_unref(r->mem);
  free(r);
}

//===----------------------------------------------------------------------===//
// Exclusive access and allocation modes
//===----------------------------------------------------------------------===//

cube_status_t cube_client_exclusive(cube_client_t* c, cube_task_fn fn, void* user) {
  CUBE__CHECK_CLIENT(c, "cube_client_exclusive");
  if (!fn) return CUBE_INVALID("cube_client_exclusive: fn is NULL");
  return cube__exclusive(c->server->device, cube__client_stream_id(c), fn, user);
}

static cube_status_t cube__set_mode(cube_client_t* c, uint64_t stream_id,
                                    cube_allocation_mode_t mode) {
  cube__stream_t* st;
  CUBE_RETURN_IF_ERROR(cube__server_stream(c->server, stream_id, &st));
  pthread_mutex_lock(&st->lock);
  cube__mm_set_mode(st->mm, mode);
  pthread_mutex_unlock(&st->lock);
  return CUBE_OK;
}

cube_status_t cube_client_allocation_mode(cube_client_t* c, cube_allocation_mode_t mode) {
  CUBE__CHECK_CLIENT(c, "cube_client_allocation_mode");
  if (mode != CUBE_ALLOCATION_AUTO && mode != CUBE_ALLOCATION_PERSISTENT)
    return CUBE_INVALID("cube_client_allocation_mode: mode %d is not AUTO (0) or PERSISTENT (1)",
                        (int)mode);
  return cube__set_mode(c, cube__client_stream_id(c), mode);
}

cube_status_t cube_client_memory_persistent_allocation(cube_client_t* c, cube_task_fn fn,
                                                       void* user) {
  CUBE__CHECK_CLIENT(c, "cube_client_memory_persistent_allocation");
  if (!fn) return CUBE_INVALID("cube_client_memory_persistent_allocation: fn is NULL");
  /* As CubeCL: the calling thread's stream, not a pinned one. */
  uint64_t sid = cube__stream_current_id();
  CUBE_RETURN_IF_ERROR(cube__set_mode(c, sid, CUBE_ALLOCATION_PERSISTENT));
  cube_status_t st = fn(user);
  cube_status_free(cube__set_mode(c, sid, CUBE_ALLOCATION_AUTO)); /* restored even on failure */
  return st;
}

//===----------------------------------------------------------------------===//
// Memory accounting
//===----------------------------------------------------------------------===//

cube_status_t cube_client_memory_cleanup(cube_client_t* c) {
  CUBE__CHECK_CLIENT(c, "cube_client_memory_cleanup");
  cube__stream_t* st;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &st));
  if (c->server->backend->event_done) cube__stream_release_holds(st, false);
  pthread_mutex_lock(&st->lock);
  cube__mm_cleanup(st->mm, true);
  if (st->pinned) cube__mm_cleanup(st->pinned, true); /* read results and staging buffers */
  pthread_mutex_unlock(&st->lock);
  /* Memory the pools gave back may sit in the driver's own pool. */
  if (c->server->backend->trim) c->server->backend->trim(c->server->bdev, st->backend_stream);
  return CUBE_OK;
}

static cube_status_t cube__stream_usage(cube__stream_t* st, const char* fn, bool fail_on_errors,
                                        cube_memory_usage_t* out) {
  pthread_mutex_lock(&st->lock);
  if (fail_on_errors && st->errors) {
    size_t n = cube_status_count(st->errors);
    pthread_mutex_unlock(&st->lock);
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "%s: stream %" PRIu64 " has %zu deferred error%s; flush or sync first",
                             fn, st->id, n, n == 1 ? "" : "s");
  }
  cube__mm_usage(st->mm, out);
  pthread_mutex_unlock(&st->lock);
  return CUBE_OK;
}

cube_status_t cube_client_memory_usage(cube_client_t* c, cube_memory_usage_t* out_usage) {
  const char* fn = "cube_client_memory_usage";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_usage, fn, "out_usage");
  cube__stream_t* st;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &st));
  /* As CubeCL (a blocking call): after the work queued before it, so that a
   * failure of that work is seen. */
  CUBE_RETURN_IF_ERROR(cube__server_barrier(c->server, cube__client_stream_id(c)));
  return cube__stream_usage(st, fn, true, out_usage);
}

cube_status_t cube_client_memory_report(cube_client_t* c, cube_memory_report_t* out_report) {
  const char* fn = "cube_client_memory_report";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_report, fn, "out_report");
  cube__stream_t* st;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &st));
  pthread_mutex_lock(&st->lock);
  cube__mm_report(st->mm, out_report);
  pthread_mutex_unlock(&st->lock);
  out_report->device_reserved = atomic_load(&c->server->device_reserved);
  out_report->memory_limit = c->server->memory_limit;
  return CUBE_OK;
}

cube_status_t cube_client_memory_usage_device(cube_client_t* c, cube_memory_usage_t* out_usage) {
  const char* fn = "cube_client_memory_usage_device";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_usage, fn, "out_usage");
  memset(out_usage, 0, sizeof(*out_usage));
  cube__server_t* s = c->server;
  for (uint32_t i = 0; i < s->max_streams; ++i) {
    cube__stream_t* st = atomic_load(&s->streams[i]);
    if (!st) continue;
    cube_memory_usage_t u;
    cube__stream_usage(st, fn, false, &u);
    out_usage->number_allocs += u.number_allocs;
    out_usage->bytes_in_use += u.bytes_in_use;
    out_usage->bytes_padding += u.bytes_padding;
    out_usage->bytes_reserved += u.bytes_reserved;
  }
  return CUBE_OK;
}

cube_status_t cube_client_memory_cleanup_device(cube_client_t* c) {
  CUBE__CHECK_CLIENT(c, "cube_client_memory_cleanup_device");
  cube__server_t* s = c->server;
  for (uint32_t i = 0; i < s->max_streams; ++i) {
    cube__stream_t* st = atomic_load(&s->streams[i]);
    if (!st) continue;
    if (s->backend->event_done) cube__stream_release_holds(st, false);
    pthread_mutex_lock(&st->lock);
    cube__mm_cleanup(st->mm, true);
    if (st->pinned) cube__mm_cleanup(st->pinned, true);
    pthread_mutex_unlock(&st->lock);
    if (s->backend->trim) s->backend->trim(s->bdev, st->backend_stream);
  }
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Launch
//===----------------------------------------------------------------------===//

static cube_status_t cube__launch(const char* fn, cube_client_t* c, cube_kernel_t* kernel,
                                  cube_count_t count, size_t arg_count, const cube_arg_t* args,
                                  cube_execution_mode_t mode) {
  CUBE__CHECK_CLIENT(c, fn);
  if (!kernel) return CUBE_INVALID("%s: kernel is NULL", fn);
  const cube__server_t* s = c->server;
  if ((unsigned)mode > CUBE_EXEC_UNCHECKED)
    return CUBE_INVALID("%s: kernel '%s': execution mode %d is invalid", fn, kernel->name,
                        (int)mode);
  if (arg_count != kernel->arg_count)
    return CUBE_INVALID("%s: kernel '%s' takes %u argument%s, got %zu", fn, kernel->name,
                        kernel->arg_count, kernel->arg_count == 1 ? "" : "s", arg_count);
  if (arg_count && !args) return CUBE_INVALID("%s: kernel '%s': args is NULL", fn, kernel->name);
  if (!kernel->cpu_fn && !kernel->source)
    return cube__status_make(CUBE_STATUS_UNIMPLEMENTED, "%s: kernel '%s' has no code", fn,
                             kernel->name);
  if (kernel->cpu_fn && s->id.backend != CUBE_BACKEND_CPU)
    return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                             "%s: kernel '%s' is a native CPU function; %s runs dialect kernels",
                             fn, kernel->name, s->props.name);
  const cube_dim_t d = kernel->cube_dim;
  const uint32_t* maxd = s->props.hardware.max_cube_dim;
  uint64_t units = (uint64_t)d.x * d.y * d.z;
  if (d.x > maxd[0] || d.y > maxd[1] || d.z > maxd[2] ||
      units > s->props.hardware.max_units_per_cube)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "%s: kernel '%s': cube dim (%u, %u, %u) = %" PRIu64
                             " units exceeds %s's limits (max dim (%u, %u, %u), %u units)",
                             fn, kernel->name, d.x, d.y, d.z, units, s->props.name, maxd[0],
                             maxd[1], maxd[2], s->props.hardware.max_units_per_cube);
  uint32_t xyz[3] = {0, 0, 0};
  cube__task_arg_t dyn;
  memset(&dyn, 0, sizeof(dyn));
  if (count.kind == CUBE_COUNT_STATIC) {
    xyz[0] = count.x;
    xyz[1] = count.y;
    xyz[2] = count.z;
    for (int i = 0; i < 3; ++i)
      if (xyz[i] > s->props.hardware.max_cube_count[i])
        return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                                 "%s: kernel '%s': cube count %c = %u exceeds %s's maximum %u", fn,
                                 kernel->name, "xyz"[i], xyz[i], s->props.name,
                                 s->props.hardware.max_cube_count[i]);
    /* An empty count (a zero component) runs nothing, after the arguments
     * were checked like any launch's (found by fuzz_client). */
  } else if (count.kind == CUBE_COUNT_DYNAMIC) {
    cube__handle_info_t info;
    CUBE_RETURN_IF_ERROR(cube__client_handle_f(c, count.handle, &info,
                                               "%s: kernel '%s': dynamic count handle", fn,
                                               kernel->name));
    if (cube__handle_view_size(&info) < 12)
      return CUBE_INVALID("%s: kernel '%s': the dynamic count handle views %" PRIu64
                          " bytes, it needs 12 (three u32)",
                          fn, kernel->name, cube__handle_view_size(&info));
    dyn.mem = info.mem;
    dyn.offset = info.offset_start;
    dyn.value.buffer.len = cube__handle_view_size(&info);
  } else {
    return CUBE_INVALID("%s: kernel '%s': count kind %d is invalid", fn, kernel->name,
                        (int)count.kind);
  }
  cube__task_arg_t targs[CUBE_MAX_KERNEL_ARGS];
  for (size_t i = 0; i < arg_count; ++i) {
    cube_arg_kind_t want = kernel->arg_kinds[i];
    if (args[i].kind != want)
      return CUBE_INVALID("%s: kernel '%s': argument %zu is %s, expected %s", fn, kernel->name, i,
                          cube_arg_kind_name(args[i].kind), cube_arg_kind_name(want));
    memset(&targs[i], 0, sizeof(targs[i]));
    switch (want) {
      case CUBE_ARG_BUFFER: {
        cube__handle_info_t info;
        CUBE_RETURN_IF_ERROR(cube__client_handle_f(c, args[i].v.buffer, &info,
                                                   "%s: kernel '%s': argument %zu", fn,
                                                   kernel->name, i));
        targs[i].mem = info.mem;
        targs[i].offset = info.offset_start;
        targs[i].value.buffer.len = cube__handle_view_size(&info);
        break;
      }
      case CUBE_ARG_U32: targs[i].value.u32 = args[i].v.u32; break;
      case CUBE_ARG_I32: targs[i].value.i32 = args[i].v.i32; break;
      case CUBE_ARG_U64: targs[i].value.u64 = args[i].v.u64; break;
      case CUBE_ARG_I64: targs[i].value.i64 = args[i].v.i64; break;
      case CUBE_ARG_F32: targs[i].value.f32 = args[i].v.f32; break;
      case CUBE_ARG_F64: targs[i].value.f64 = args[i].v.f64; break;
      default:
        return CUBE_INVALID("%s: kernel '%s': argument %zu has kind %d", fn, kernel->name, i,
                            (int)want);
    }
  }
  if (count.kind == CUBE_COUNT_STATIC && (!xyz[0] || !xyz[1] || !xyz[2])) return CUBE_OK;
  /* All checked: take the binding references the queued launch holds. */
  for (size_t i = 0; i < arg_count; ++i)
    if (targs[i].mem) cube__memory_ref(targs[i].mem);
  if (dyn.mem) cube__memory_ref(dyn.mem);
  return cube__server_launch(c->server, cube__client_stream_id(c), kernel, xyz,
                             dyn.mem ? &dyn : NULL, mode, (uint32_t)arg_count, targs);
}

cube_status_t cube_kernel_precompile(cube_client_t* c, size_t count, cube_kernel_t* const* kernels,
                                     cube_execution_mode_t mode) {
  const char* fn = "cube_kernel_precompile";
  CUBE__CHECK_CLIENT(c, fn);
  if (count && !kernels) return CUBE_INVALID("%s: kernels is NULL", fn);
  if ((unsigned)mode > CUBE_EXEC_UNCHECKED)
    return CUBE_INVALID("%s: execution mode %d is invalid", fn, (int)mode);
  cube__server_t* s = c->server;
  for (size_t i = 0; i < count; ++i) {
    if (!kernels[i]) return CUBE_INVALID("%s: kernels[%zu] is NULL", fn, i);
    if (!s->backend->prepare) continue;
    cube_status_t st = s->backend->prepare(s->bdev, kernels[i], mode);
    if (st) return cube__status_annotate(st, "%s: kernels[%zu]", fn, i);
  }
  return CUBE_OK;
}

cube_status_t cube_client_launch_mode(cube_client_t* c, cube_kernel_t* kernel, cube_count_t count,
                                      size_t arg_count, const cube_arg_t* args,
                                      cube_execution_mode_t mode) {
  return cube__launch("cube_client_launch_mode", c, kernel, count, arg_count, args, mode);
}

cube_status_t cube_client_launch(cube_client_t* c, cube_kernel_t* kernel, cube_count_t count,
                                 size_t arg_count, const cube_arg_t* args) {
  return cube__launch("cube_client_launch", c, kernel, count, arg_count, args, CUBE_EXEC_CHECKED);
}

cube_status_t cube_client_launch_unchecked(cube_client_t* c, cube_kernel_t* kernel,
                                           cube_count_t count, size_t arg_count,
                                           const cube_arg_t* args) {
  CUBE__CHECK_CLIENT(c, "cube_client_launch_unchecked");
  cube_execution_mode_t mode = CUBE_EXEC_UNCHECKED;
  if (c->server->options.check_mode == CUBE_CHECK_ENFORCE) mode = CUBE_EXEC_CHECKED;
  if (c->server->options.check_mode == CUBE_CHECK_VALIDATE) mode = CUBE_EXEC_VALIDATE;
  return cube__launch("cube_client_launch_unchecked", c, kernel, count, arg_count, args, mode);
}

//===----------------------------------------------------------------------===//
// Synchronisation and profiling
//===----------------------------------------------------------------------===//

cube_status_t cube_client_flush(cube_client_t* c) {
  CUBE__CHECK_CLIENT(c, "cube_client_flush");
  cube_status_t st = cube__server_flush(c->server, cube__client_stream_id(c));
  return st ? cube__status_annotate(st, "cube_client_flush") : CUBE_OK;
}

cube_status_t cube_client_sync(cube_client_t* c) {
  CUBE__CHECK_CLIENT(c, "cube_client_sync");
  cube_status_t st = cube__server_sync(c->server, cube__client_stream_id(c));
  return st ? cube__status_annotate(st, "cube_client_sync") : CUBE_OK;
}

cube_status_t cube_client_sync_async(cube_client_t* c, cube_future_t** out_future) {
  CUBE__CHECK_CLIENT(c, "cube_client_sync_async");
  CUBE__CHECK_OUT(out_future, "cube_client_sync_async", "out_future");
  return cube__server_sync_async(c->server, cube__client_stream_id(c), out_future);
}

cube_status_t cube_client_profile(cube_client_t* c, cube_task_fn fn, void* user, const char* name,
                                  cube_profile_duration_t* out_duration) {
  CUBE__CHECK_CLIENT(c, "cube_client_profile");
  if (!fn) return CUBE_INVALID("cube_client_profile: fn is NULL");
  CUBE__CHECK_OUT(out_duration, "cube_client_profile", "out_duration");
  return cube__server_profile(c->server, cube__client_stream_id(c), fn, user, name, out_duration);
}

cube_status_t cube_client_io_optimized_vector_sizes(const cube_client_t* c, uint32_t elem_size,
                                                    uint32_t* out_sizes, size_t capacity,
                                                    size_t* out_count) {
  const char* fn = "cube_client_io_optimized_vector_sizes";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_count, fn, "out_count");
  if (elem_size == 0) return CUBE_INVALID("%s: elem_size 0 is invalid", fn);
  const cube_device_properties_t* p = &c->server->props;
  uint64_t by_width = p->hardware.load_width / ((uint64_t)elem_size * 8);
  uint64_t max = p->hardware.max_vector_size < by_width ? p->hardware.max_vector_size : by_width;
  if (max < 1) max = 1;
  uint64_t top = 1;
  while (top * 2 <= max) top *= 2;
  size_t n = 0;
  for (uint64_t v = top; v >= 1; v /= 2) {
    if (out_sizes && n < capacity) out_sizes[n] = (uint32_t)v;
    ++n;
  }
  *out_count = n;
  if (out_sizes && n > capacity)
    return CUBE_INVALID("%s: %zu sizes do not fit in capacity %zu", fn, n, capacity);
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Between devices, collectives
//===----------------------------------------------------------------------===//

/* The in-transport path of to_client: dst gets a buffer of |size| bytes, the
 * source sends, the destination receives, and both streams are ordered after
 * the copy (receiver first: in inline mode one thread drives both). */
static cube_status_t cube__to_client_p2p(cube_client_t* src, cube_handle_t handle,
                                         cube_client_t* dst, cube_handle_t out) {
  cube_device_id_t a = cube__coll_global_id(src->server->id);
  cube_device_id_t b = cube__coll_global_id(dst->server->id);
  CUBE_RETURN_IF_ERROR(cube_client_send(src, handle, b));
  CUBE_RETURN_IF_ERROR(cube_client_recv(dst, out, a));
  CUBE_RETURN_IF_ERROR(cube_client_sync_collective(dst));
  return cube_client_sync_collective(src);
}

/* True when both devices share a collective transport (CPU to CPU). */
static bool cube__p2p_possible(const cube_client_t* src, const cube_client_t* dst) {
  return src->server->id.backend == dst->server->id.backend &&
         cube__coll_transport_for(src->server->id.backend) != NULL;
}

cube_status_t cube_client_to_client(cube_client_t* src, cube_handle_t handle, cube_client_t* dst,
                                    cube_handle_t* out_handle) {
  const char* fn = "cube_client_to_client";
  CUBE__CHECK_CLIENT(src, "cube_client_to_client: src");
  CUBE__CHECK_CLIENT(dst, "cube_client_to_client: dst");
  CUBE__CHECK_OUT(out_handle, fn, "out_handle");
  cube_status_t st;
  if (cube__p2p_possible(src, dst)) {
    cube__handle_info_t info;
    st = cube__client_handle(src, handle, "handle", &info);
    if (st) return cube__status_annotate(st, "%s", fn);
    cube_handle_t out;
    st = cube_client_empty(dst, (size_t)cube__handle_view_size(&info), &out);
    if (!st) st = cube__to_client_p2p(src, handle, dst, out);
    if (st) {
      cube_handle_release(out);
      return cube__status_annotate(st, "%s", fn);
    }
    *out_handle = out;
    return CUBE_OK;
  }
  /* No transport between these servers: read on src, write on dst (reference §9.1). */
  cube_bytes_t* b;
  st = cube_client_read_one(src, handle, &b);
  if (st) return cube__status_annotate(st, "%s", fn);
  st = cube_client_create(dst, b, out_handle);
  return st ? cube__status_annotate(st, "%s", fn) : CUBE_OK;
}

cube_status_t cube_client_to_client_tensor(cube_client_t* src, const cube_tensor_t* tensor,
                                           cube_client_t* dst, cube_tensor_t* out_tensor) {
  const char* fn = "cube_client_to_client_tensor";
  CUBE__CHECK_CLIENT(src, "cube_client_to_client_tensor: src");
  CUBE__CHECK_CLIENT(dst, "cube_client_to_client_tensor: dst");
  if (!tensor) return CUBE_INVALID("%s: tensor is NULL", fn);
  CUBE__CHECK_OUT(out_tensor, fn, "out_tensor");
  cube_status_t st;
  if (cube__p2p_possible(src, dst) &&
      cube_layout_strides_readable(src->server->props.layout_policy, tensor->rank, tensor->shape,
                                   tensor->strides)) {
    /* Same layout on both sides (one policy per backend): copy the view. */
    cube__handle_info_t info;
    st = cube__client_handle(src, tensor->handle, "tensor->handle", &info);
    if (st) return cube__status_annotate(st, "%s", fn);
    cube_tensor_t t;
    st = cube_client_empty_tensor(dst, tensor->rank, tensor->shape, tensor->elem_size, &t);
    if (st) return cube__status_annotate(st, "%s", fn);
    cube__handle_info_t tinfo;
    st = cube__client_handle(dst, t.handle, fn, &tinfo);
    bool same = !st && memcmp(t.strides, tensor->strides, sizeof(t.strides)) == 0 &&
                cube__handle_view_size(&tinfo) == cube__handle_view_size(&info);
    cube_status_free(st);
    if (same) {
      st = cube__to_client_p2p(src, tensor->handle, dst, t.handle);
      if (st) {
        cube_tensor_release(&t);
        return cube__status_annotate(st, "%s", fn);
      }
      *out_tensor = t;
      return CUBE_OK;
    }
    cube_tensor_release(&t);
  }
  cube_bytes_t* b;
  st = cube_client_read_tensor(src, 1, tensor, &b);
  if (st) return cube__status_annotate(st, "%s", fn);
  st = cube_client_create_tensor(dst, b, tensor->rank, tensor->shape, tensor->elem_size,
                                 out_tensor);
  return st ? cube__status_annotate(st, "%s", fn) : CUBE_OK;
}

static cube_status_t cube__check_devices(const char* fn, size_t n, const cube_device_id_t* ids) {
  if (n == 0) return CUBE_INVALID("%s: device_count is 0", fn);
  if (!ids) return CUBE_INVALID("%s: devices is NULL", fn);
  for (size_t i = 0; i < n; ++i) {
    if ((unsigned)ids[i].backend >= CUBE_BACKEND_COUNT)
      return CUBE_INVALID("%s: devices[%zu].backend %d is invalid", fn, i, (int)ids[i].backend);
    uint32_t count = cube__coll_global_count(ids[i].backend);
    if (ids[i].index >= count)
      return cube__status_make(CUBE_STATUS_NOT_FOUND, "%s: devices[%zu] = %s:%u does not exist",
                               fn, i, cube_backend_name(ids[i].backend), ids[i].index);
  }
  return CUBE_OK;
}

static cube_status_t cube__no_collectives(const cube_client_t* c, const char* fn) {
  return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                           "%s: the %s backend has no collective transport yet", fn,
                           c->server->backend->name);
}

/* The communicator of |devices| for client |c| and c's place in it. */
static cube_status_t cube__client_comm(cube_client_t* c, const char* fn, size_t n,
                                       const cube_device_id_t* devices, cube__comm_t** comm,
                                       uint32_t* rank) {
  CUBE_RETURN_IF_ERROR(cube__check_devices(fn, n, devices));
  if (!cube__coll_transport_for(c->server->id.backend)) return cube__no_collectives(c, fn);
  return cube__coll_comm_get(fn, n, devices, cube__coll_global_id(c->server->id), comm, rank);
}

cube_status_t cube_client_ensure_init_collective(cube_client_t* c, size_t device_count,
                                                 const cube_device_id_t* devices) {
  const char* fn = "cube_client_ensure_init_collective";
  CUBE__CHECK_CLIENT(c, fn);
  cube__comm_t* comm;
  uint32_t rank;
  CUBE_RETURN_IF_ERROR(cube__client_comm(c, fn, device_count, devices, &comm, &rank));
  /* The host transport needs no per-participant set-up (a transport with a
   * comm_init, NCCL, would queue it on the device here). */
  return CUBE_OK;
}

cube_status_t cube_client_sync_collective(cube_client_t* c) {
  const char* fn = "cube_client_sync_collective";
  CUBE__CHECK_CLIENT(c, fn);
  if (!cube__coll_transport_for(c->server->id.backend)) return cube__no_collectives(c, fn);
  uint64_t timeout;
  cube_status_t st = cube__coll_timeout_ns(&timeout);
  if (st) return cube__status_annotate(st, "%s", fn);
  st = cube__coll_submit_sync(c->server, cube__client_stream_id(c), timeout);
  return st ? cube__status_annotate(st, "%s", fn) : CUBE_OK;
}

/* Queues this participant's part; takes binding references on the buffers. */
static cube_status_t cube__coll_queue(cube_client_t* c, const char* fn, cube__comm_t* comm,
                                      cube_collective_kind_t kind, cube__coll_part_t* part,
                                      const cube__handle_info_t* src,
                                      const cube__handle_info_t* dst) {
  uint64_t timeout;
  cube_status_t st = cube__coll_timeout_ns(&timeout);
  if (st) return cube__status_annotate(st, "%s", fn);
  if (src) {
    part->src_mem = src->mem;
    part->src_offset = src->offset_start;
    cube__memory_ref(src->mem);
  }
  if (dst) {
    part->dst_mem = dst->mem;
    part->dst_offset = dst->offset_start;
    cube__memory_ref(dst->mem);
  }
  st = cube__coll_submit(c->server, cube__client_stream_id(c), comm, kind, part, timeout);
  return st ? cube__status_annotate(st, "%s", fn) : CUBE_OK;
}

cube_status_t cube_client_all_reduce(cube_client_t* c, cube_handle_t src, cube_handle_t dst,
                                     cube_dtype_t dtype, size_t device_count,
                                     const cube_device_id_t* devices, cube_reduce_op_t op) {
  const char* fn = "cube_client_all_reduce";
  CUBE__CHECK_CLIENT(c, fn);
  cube__handle_info_t a, b;
  CUBE_RETURN_IF_ERROR(cube__client_handle(c, src, "cube_client_all_reduce: src", &a));
  CUBE_RETURN_IF_ERROR(cube__client_handle(c, dst, "cube_client_all_reduce: dst", &b));
  if (cube_dtype_size(dtype) == 0) return CUBE_INVALID("%s: dtype %d is invalid", fn, (int)dtype);
  if ((unsigned)op >= CUBE_REDUCE_OP_COUNT)
    return CUBE_INVALID("%s: reduce op %d is invalid", fn, (int)op);
  CUBE_RETURN_IF_ERROR(cube__check_devices(fn, device_count, devices));
  uint64_t na = cube__handle_view_size(&a), nb = cube__handle_view_size(&b);
  if (na != nb)
    return CUBE_INVALID("%s: src views %" PRIu64 " bytes but dst %" PRIu64, fn, na, nb);
  if (na % cube_dtype_size(dtype))
    return CUBE_INVALID("%s: %" PRIu64 " bytes are not a whole number of %s elements (%u bytes)",
                        fn, na, cube_dtype_name(dtype), cube_dtype_size(dtype));
  cube__comm_t* comm;
  cube__coll_part_t part;
  memset(&part, 0, sizeof(part));
  CUBE_RETURN_IF_ERROR(cube__client_comm(c, fn, device_count, devices, &comm, &part.rank));
  part.bytes = na;
  part.dtype = dtype;
  part.op = op;
  return cube__coll_queue(c, fn, comm, CUBE_COLLECTIVE_ALL_REDUCE, &part, &a, &b);
}

static cube_status_t cube__p2p(cube_client_t* c, const char* fn, cube_handle_t h,
                               cube_device_id_t peer, bool is_send) {
  CUBE__CHECK_CLIENT(c, fn);
  cube__handle_info_t info;
  char what[64];
  snprintf(what, sizeof(what), "%s: %s", fn, is_send ? "src" : "dst");
  CUBE_RETURN_IF_ERROR(cube__client_handle(c, h, what, &info));
  cube_device_id_t self = cube__coll_global_id(c->server->id);
  cube_device_id_t set[2] = {self, peer};
  size_t n = self.backend == peer.backend && self.index == peer.index ? 1 : 2;
  CUBE_RETURN_IF_ERROR(cube__check_devices(fn, 2, set));
  cube__comm_t* comm;
  cube__coll_part_t part;
  memset(&part, 0, sizeof(part));
  CUBE_RETURN_IF_ERROR(cube__client_comm(c, fn, n, set, &comm, &part.rank));
  part.peer = n == 1 ? 0 : 1 - part.rank;
  part.bytes = cube__handle_view_size(&info);
  part.dtype = CUBE_DTYPE_U8;
  return cube__coll_queue(c, fn, comm, is_send ? CUBE_COLLECTIVE_SEND : CUBE_COLLECTIVE_RECV,
                          &part, is_send ? &info : NULL, is_send ? NULL : &info);
}

cube_status_t cube_client_send(cube_client_t* c, cube_handle_t src, cube_device_id_t peer) {
  return cube__p2p(c, "cube_client_send", src, peer, true);
}

cube_status_t cube_client_recv(cube_client_t* c, cube_handle_t dst, cube_device_id_t peer) {
  return cube__p2p(c, "cube_client_recv", dst, peer, false);
}

cube_status_t cube_client_last_collective(const cube_client_t* c,
                                          cube_collective_record_t* out_record) {
  const char* fn = "cube_client_last_collective";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_record, fn, "out_record");
  if (!cube__coll_last_record(c->server->id, out_record))
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "%s: %s has completed no collective yet", fn,
                             c->server->props.name);
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Devices
//===----------------------------------------------------------------------===//

cube_status_t cube_backend_status(cube_backend_t backend) {
  if ((unsigned)backend >= CUBE_BACKEND_COUNT)
    return CUBE_INVALID("cube_backend_status: backend %d is invalid", (int)backend);
  const cube__backend_vtable_t* b = cube__backend_get(backend);
  if (!b)
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "backend %s is not built into this library",
                             cube_backend_name(backend));
  return b->availability();
}

size_t cube_device_count(cube_backend_t backend) {
  const cube__backend_vtable_t* b =
      (unsigned)backend < CUBE_BACKEND_COUNT ? cube__backend_get(backend) : NULL;
  if (!b) return 0;
  cube_status_t st = b->availability();
  if (st) {
    cube_status_free(st);
    return 0;
  }
  return b->device_count();
}

size_t cube_device_count_total(void) {
  size_t n = 0;
  for (int b = 0; b < CUBE_BACKEND_COUNT; ++b) n += cube_device_count((cube_backend_t)b);
  return n;
}

cube_status_t cube_enumerate_devices(cube_backend_t backend, cube_device_id_t* out_ids,
                                     size_t capacity, size_t* out_count) {
  CUBE__CHECK_OUT(out_count, "cube_enumerate_devices", "out_count");
  if ((unsigned)backend >= CUBE_BACKEND_COUNT)
    return CUBE_INVALID("cube_enumerate_devices: backend %d is invalid", (int)backend);
  size_t n = cube_device_count(backend);
  for (size_t i = 0; i < n && out_ids && i < capacity; ++i)
    out_ids[i] = (cube_device_id_t){backend, (uint32_t)i};
  *out_count = n;
  return CUBE_OK;
}

cube_status_t cube_enumerate_all_devices(cube_device_id_t* out_ids, size_t capacity,
                                         size_t* out_count) {
  CUBE__CHECK_OUT(out_count, "cube_enumerate_all_devices", "out_count");
  size_t n = 0;
  for (int b = 0; b < CUBE_BACKEND_COUNT; ++b) {
    size_t k = cube_device_count((cube_backend_t)b);
    for (size_t i = 0; i < k; ++i, ++n)
      if (out_ids && n < capacity) out_ids[n] = (cube_device_id_t){(cube_backend_t)b, (uint32_t)i};
  }
  *out_count = n;
  return CUBE_OK;
}

void cube_shutdown(void) {
  atomic_fetch_add(&cube__epoch, 1);
  /* Every device runs what was queued before any is destroyed (a device's
   * task may use another's memory: the last participant of a collective),
   * then NCCL work in flight ends (or is aborted). */
  cube__queue_drain_all();
  cube__coll_quiesce();
  cube__queue_shutdown_all();
  cube__coll_shutdown();
  cube__handle_invalidate_all();
  cube__server_sweep_orphans();
  cube__cache_shutdown();
}
