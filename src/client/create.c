/* The client API: creating memory (create, create_from_slice, tensors,
 * staging, empty). Validation and layouts here; the pools are the server's
 * (cube__stream_alloc) and so is the copy (cube__server_write). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "base/bytes.h"
#include "client/client_internal.h"
#include "server/recover.h"

//===----------------------------------------------------------------------===//
// Creating memory
//===----------------------------------------------------------------------===//

bool cube__rows(const cube_layout_desc_t* d, const uint64_t* strides, uint64_t* width,
                uint64_t* height, uint64_t* pitch, uint64_t* span) {
  uint32_t r = d->rank;
  uint64_t w, h = 1, p, s = 0;
  if (cube__mul_overflow_u64(r ? d->shape[r - 1] : 1, d->elem_size, &w)) return false;
  for (uint32_t i = 0; i + 1 < r; ++i)
    if (cube__mul_overflow_u64(h, d->shape[i], &h)) return false;
  p = w;
  if (r >= 2 && cube__mul_overflow_u64(strides[r - 2], d->elem_size, &p)) return false;
  if (h && (cube__mul_overflow_u64(h - 1, p, &s) || cube__add_overflow_u64(s, w, &s)))
    return false;
  *width = w;
  *height = h;
  *pitch = p;
  *span = s;
  return true;
}

static uint64_t cube__dense_size(const cube_layout_desc_t* d) {
  uint64_t n = d->elem_size;
  for (uint32_t i = 0; i < d->rank; ++i) n *= d->shape[i];
  return n;
}

#define CUBE__STACK_TENSORS 4

static void cube__release_bytes(cube_bytes_t** bytes, size_t count) {
  for (size_t i = 0; bytes && i < count; ++i) cube_bytes_release(bytes[i]);
}

/* Creates |count| tensors in one buffer. |data| (with |sizes|) or |bytes|
 * (consumed) or neither (empty). |in_descs| is the caller's array (any
 * struct_size the input rules accept). */
static cube_status_t cube__create_tensors(cube_client_t* c, const char* fn, size_t count,
                                          const cube_layout_desc_t* in_descs,
                                          const void* const* data, const size_t* sizes,
                                          cube_bytes_t** bytes, cube_tensor_t* out) {
  cube__server_t* s = c->server;
  if (count == 0) return CUBE_OK;
  if (!in_descs) {
    cube__release_bytes(bytes, count);
    return CUBE_INVALID("%s: descs is NULL for %zu tensors", fn, count);
  }
  if (data && !sizes) return CUBE_INVALID("%s: sizes is NULL", fn);
  const void* read_descs;
  void* owned_descs;
  cube_status_t read_st = cube__struct_array_read(fn, "descs", &cube__struct_layout_desc, in_descs,
                                                  count, &read_descs, &owned_descs);
  if (read_st) {
    cube__release_bytes(bytes, count);
    return read_st;
  }
  const cube_layout_desc_t* descs = read_descs;
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
    st = cube__stream_stage_file(stream, &bytes[i]);
    if (st) {
      st = cube__status_annotate(st, "%s: bytes[%zu]", fn, i);
      goto done;
    }
  }
  /* Reserve up to the end of the last tensor: the rounding between tensors
   * is part of the buffer, the tail rounding is the pool's padding (so
   * bytes_in_use counts what was asked for). */
  st = cube__stream_alloc(stream, offsets[count - 1] + tsizes[count - 1], fn, &mem);
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
    uint64_t w, h, p, span;
    (void)cube__rows(&descs[i], strides[i], &w, &h, &p, &span); /* laid out: no overflow */
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
  cube__release_bytes(bytes, count);
  if (heap) {
    free(strides);
    free(offsets);
    free(tsizes);
  }
  free(owned_descs);
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
  cube_status_t st = cube_layout_desc_initialize(strategy, rank, shape, elem_size, d);
  return st ? cube__status_annotate(st, "%s", fn) : CUBE_OK;
}

/* The pool-hit path of cube_client_empty and cube_client_create_from_slice. A 1-D byte buffer has stride 1
 * and |size| bytes under either layout policy, and the buffer is |size|
 * rounded up to the alignment: what cube_layout_compute gives, without its
 * generality. False (nothing done) for anything it would refuse: the general
 * path then gives the same errors. */
/* Inlined into both callers: the pool-hit path is counted (docs/benchmarks.md). */
static inline __attribute__((always_inline)) bool cube__empty_1d(
    cube_client_t* c, const char* fn, size_t size, cube_handle_t* out_handle,
    cube__stream_t** out_stream, cube__memory_t** out_mem, cube_status_t* out_status) {
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
  if (!st) st = cube__stream_alloc(stream, size, fn, &mem);
  if (!st) {
    cube__handle_info_t info = {mem, total, 0, total - size, s, stream->id};
    st = cube__handle_create(&info, out_handle);
    if (st) cube__memory_handle_unref(mem);
  }
  if (!st) {
    *out_stream = stream;
    *out_mem = mem;
  }
  *out_status = st;
  return true;
}

/* cube_client_create_from_slice for the public function |fn|, which its
 * statuses name. |keep| (cube_client_create_restorable): the buffer made
 * empty, then its host copy kept, then the upload, in that order: a
 * recovery before the copy is kept comes before the upload, whose whole
 * write makes the buffer valid again, and one after it restores the copy;
 * no recovery between the upload and the copy can leave a buffer created
 * restorable lost. (Constant for each caller: the plain path is unchanged.) */
static inline __attribute__((always_inline)) cube_status_t cube__create_from_slice(
    cube_client_t* c, const char* fn, const void* data, size_t size, bool keep,
    cube_handle_t* out_handle) {
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_handle, fn, "out_handle");
  if (!data) return CUBE_INVALID("%s: data is NULL", fn);
  if (size == 0) return CUBE_INVALID("%s: size 0 is invalid (must be > 0)", fn);
  cube_status_t st;
  cube__stream_t* stream;
  cube__memory_t* mem;
  if (cube__empty_1d(c, fn, size, out_handle, &stream, &mem, &st)) {
    if (!st && keep) {
      st = cube__server_keep(mem, data, size);
      if (st) {
        cube_handle_release(*out_handle);
        *out_handle = CUBE_HANDLE_NULL;
        return cube__status_annotate(st, "%s", fn);
      }
    }
    if (!st) cube__server_write(stream, mem, 0, size, data, size, 1, NULL);
    return st;
  }
  cube_layout_desc_t d;
  cube__desc_1d(size, &d);
  cube_tensor_t t;
  if (!keep) {
    CUBE_RETURN_IF_ERROR(cube__create_tensors(c, fn, 1, &d, &data, &size, NULL, &t));
    *out_handle = t.handle;
    return CUBE_OK;
  }
  CUBE_RETURN_IF_ERROR(cube__create_tensors(c, fn, 1, &d, NULL, NULL, NULL, &t));
  cube__handle_info_t info;
  st = cube__client_handle_f(c, t.handle, &info, "%s: handle", fn);
  if (!st) st = cube__server_keep(info.mem, data, size);
  if (!st) st = cube_client_write(c, t.handle, data, size);
  if (st) {
    cube_handle_release(t.handle);
    return cube__status_annotate(st, "%s", fn);
  }
  *out_handle = t.handle;
  return CUBE_OK;
}

cube_status_t cube_client_create_from_slice(cube_client_t* c, const void* data, size_t size,
                                            cube_handle_t* out_handle) {
  return cube__create_from_slice(c, "cube_client_create_from_slice", data, size, false,
                                 out_handle);
}

cube_status_t cube__client_create_kept(cube_client_t* c, const char* fn, const void* data,
                                       size_t size, cube_handle_t* out_handle) {
  return cube__create_from_slice(c, fn, data, size, true, out_handle);
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
    cube_status_t st = cube__stream_staging(stream, sizes[i], &out_bytes[i]);
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
  if (!cube__stream_has_staging(stream)) return CUBE_OK; /* no staging memory (as CubeCL) */
  for (size_t i = 0; i < count; ++i) {
    cube_bytes_t* b = inout_bytes[i];
    if (!b) return CUBE_INVALID("%s: inout_bytes[%zu] is NULL", fn, i);
    cube_bytes_property_t p = cube_bytes_property(b);
    bool eligible = p == CUBE_BYTES_FILE || (!file_only && p != CUBE_BYTES_PINNED);
    if (!eligible) continue;
    cube_bytes_t* staged;
    cube_status_t st = cube__stream_staging(stream, cube_bytes_size(b), &staged);
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
                                                            const cube_layout_desc_t* in_descs,
                                                            const void* const* data,
                                                            const size_t* sizes,
                                                            cube_tensor_t* out_tensors) {
  const char* fn = "cube_client_create_tensors_from_slices_pinned";
  CUBE__CHECK_CLIENT(c, fn);
  if (count == 0) return CUBE_OK;
  if (!data || !sizes || !in_descs || !out_tensors)
    return CUBE_INVALID("%s: %s is NULL", fn,
                        !data ? "data" : !sizes ? "sizes" : !in_descs ? "descs" : "out_tensors");
  const void* read_descs;
  void* owned_descs;
  CUBE_RETURN_IF_ERROR(cube__struct_array_read(fn, "descs", &cube__struct_layout_desc, in_descs,
                                               count, &read_descs, &owned_descs));
  const cube_layout_desc_t* descs = read_descs;
  cube_status_t st = CUBE_OK;
  for (size_t i = 0; i < count && !st; ++i) {
    if (!data[i]) {
      st = CUBE_INVALID("%s: data[%zu] is NULL", fn, i);
      break;
    }
    /* Check the sizes against the shapes before any staging is reserved. */
    cube_layout_desc_t d;
    st = cube_layout_desc_initialize(descs[i].strategy, descs[i].rank, descs[i].shape,
                                     descs[i].elem_size, &d);
    if (st) {
      st = cube__status_annotate(st, "%s: descs[%zu]", fn, i);
      break;
    }
    uint64_t dense = cube__dense_size(&d);
    if (sizes[i] != dense)
      st = CUBE_INVALID("%s: data[%zu] holds %zu bytes but its shape needs %" PRIu64
                        " (prod(shape) * elem_size %u)",
                        fn, i, sizes[i], dense, descs[i].elem_size);
  }
  cube_bytes_t** b = st ? NULL : calloc(count, sizeof(*b));
  if (!st && !b) st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
  if (!st) st = cube_client_reserve_staging(c, count, sizes, b);
  if (!st) {
    for (size_t i = 0; i < count; ++i) memcpy(cube_bytes_data(b[i]), data[i], sizes[i]);
    st = cube__create_tensors(c, fn, count, descs, NULL, NULL, b, out_tensors);
  }
  free(b);
  free(owned_descs);
  return st;
}

cube_status_t cube_client_empty(cube_client_t* c, size_t size, cube_handle_t* out_handle) {
  const char* fn = "cube_client_empty";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_handle, fn, "out_handle");
  if (size == 0) return CUBE_INVALID("%s: size 0 is invalid (must be > 0)", fn);
  cube_status_t st;
  cube__stream_t* stream;
  cube__memory_t* mem;
  if (cube__empty_1d(c, fn, size, out_handle, &stream, &mem, &st)) return st;
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
