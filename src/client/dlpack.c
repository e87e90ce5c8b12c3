/* The client API: DLPack export and import (cube/dlpack.h, docs/dlpack.md).
 *
 * An export is one heap record: the managed tensor (versioned or legacy)
 * first, its shape and strides, and a binding reference on the buffer's
 * descriptor, counted as a lend (cube__server_lend) so that a shutdown keeps
 * the pool while the record lives. Its deleter drops the reference and frees
 * the record; it reads nothing but the record and the global epoch, so it
 * is safe on any thread, after the client's release and after cube_shutdown.
 *
 * An import is either one of our own exports (recognised by its deleter; a
 * handle on the same descriptor, the export deleted at once) or memory of
 * another library: an external descriptor (src/memory) whose last reference
 * calls the producer's deleter. */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "client/client_internal.h"
#include "cube/dlpack.h"
#include "cube/dlpack_types.h"

_Static_assert(sizeof(cube_dlpack_dtype_t) == sizeof(DLDataType), "DLDataType layout");
_Static_assert(offsetof(DLManagedTensorVersioned, dl_tensor) == 32 || sizeof(void*) != 8,
               "DLManagedTensorVersioned layout (DLPack 1.x, LP64)");

typedef struct cube__dlpack_export {
  union {
    DLManagedTensorVersioned v;
    DLManagedTensor l;
  } t;                     /* first: what the consumer holds */
  cube__memory_t* mem;     /* a binding reference, counted as a lend */
  cube__server_t* server;  /* identity only (never dereferenced by the deleter) */
  uint64_t epoch;          /* cube__client_epoch() at the export */
  uint64_t buffer_size;    /* of the handle's buffer */
  uint64_t elem0;          /* element 0's byte from the buffer's start */
  uint64_t view_lo, view_hi; /* the exported handle's view, bytes from the buffer's start */
  uint64_t stream_id;      /* the stream whose pools own the buffer */
  int64_t shape[CUBE_MAX_RANK];
  int64_t strides[CUBE_MAX_RANK];
} cube__dlpack_export_t;

static void cube__dlpack_export_free(cube__dlpack_export_t* e) {
  bool after_shutdown = e->epoch != cube__client_epoch();
  cube__memory_unref(e->mem);
  free(e);
  cube__server_unlend(after_shutdown);
}

static void cube__dlpack_delete_versioned(DLManagedTensorVersioned* self) {
  if (self) cube__dlpack_export_free(self->manager_ctx);
}

static void cube__dlpack_delete_legacy(DLManagedTensor* self) {
  if (self) cube__dlpack_export_free(self->manager_ctx);
}

//===----------------------------------------------------------------------===//
// Shared checks
//===----------------------------------------------------------------------===//

static const char* cube__dlpack_code_name(unsigned code) {
  static const char* const names[] = {"int", "uint", "float", "opaque handle",
                                      "bfloat", "complex", "bool"};
  return code < sizeof(names) / sizeof(names[0]) ? names[code] : "unknown";
}

/* The device of |s| as DLPack names it, or why it has none. */
static cube_status_t cube__dlpack_device_of(cube__server_t* s, const char* fn, int32_t out[3]) {
  cube_status_t st = cube__server_dlpack_device(s, out);
  if (!st) return CUBE_OK;
  cube_status_code_t code = cube_status_code(st);
  cube_status_free(st);
  return cube__status_make(code, "%s: the memory of %s cannot be exchanged through DLPack "
                           "(its backend names no DLPack device)", fn, s->props.name);
}

/* |a| * |b| + |c| into *out without overflow (all >= 0). */
static bool cube__mul_add(uint64_t a, uint64_t b, uint64_t c, uint64_t* out) {
  uint64_t m;
  if (__builtin_mul_overflow(a, b, &m)) return false;
  return !__builtin_add_overflow(m, c, out);
}

static void cube__format_dims(const int64_t* v, uint32_t n, char* buf, size_t size) {
  size_t at = 0;
  buf[0] = 0;
  at += (size_t)snprintf(buf, size, "(");
  for (uint32_t i = 0; i < n && at < size; ++i)
    at += (size_t)snprintf(buf + at, size - at, i ? ", %" PRId64 : "%" PRId64, v[i]);
  if (at < size) snprintf(buf + at, size - at, ")");
}

//===----------------------------------------------------------------------===//
// Export
//===----------------------------------------------------------------------===//

cube_status_t cube_dlpack_export_initialize(cube_handle_t handle, cube_dlpack_dtype_t dtype,
                                            uint32_t rank, const int64_t* shape,
                                            cube_dlpack_export_t* out) {
  const char* fn = "cube_dlpack_export_initialize";
  CUBE__CHECK_OUT(out, fn, "out_export");
  if (rank > CUBE_MAX_RANK)
    return CUBE_INVALID("%s: rank %u exceeds CUBE_MAX_RANK (%d)", fn, rank, CUBE_MAX_RANK);
  if (rank && !shape) return CUBE_INVALID("%s: shape is NULL with rank %u", fn, rank);
  for (uint32_t i = 0; i < rank; ++i)
    if (shape[i] < 0)
      return CUBE_INVALID("%s: shape[%u] is %" PRId64 " (must be >= 0)", fn, i, shape[i]);
  cube_dlpack_export_t d;
  memset(&d, 0, sizeof(d));
  d.struct_size = sizeof(d);
  d.handle = handle;
  d.dtype = dtype;
  d.rank = rank;
  int64_t stride = 1;
  for (uint32_t i = rank; i-- > 0;) {
    d.shape[i] = shape[i];
    d.strides[i] = stride;
    if (shape[i] > 1 && __builtin_mul_overflow(stride, shape[i], &stride)) stride = INT64_MAX;
  }
  d.stream = CUBE_DLPACK_STREAM_WAIT;
  *out = d;
  return CUBE_OK;
}

cube_status_t cube_client_dlpack_device(cube_client_t* c, int32_t* out_type, int32_t* out_id) {
  const char* fn = "cube_client_dlpack_device";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_type, fn, "out_device_type");
  CUBE__CHECK_OUT(out_id, fn, "out_device_id");
  int32_t dev[3];
  CUBE_RETURN_IF_ERROR(cube__dlpack_device_of(c->server, fn, dev));
  *out_type = dev[0];
  *out_id = dev[1];
  return CUBE_OK;
}

cube_status_t cube_client_dlpack_stream(cube_client_t* c, int64_t* out_stream) {
  const char* fn = "cube_client_dlpack_stream";
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out_stream, fn, "out_stream");
  int32_t dev[3];
  CUBE_RETURN_IF_ERROR(cube__dlpack_device_of(c->server, fn, dev));
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &stream));
  void* native = NULL;
  cube_status_t st = cube__server_native_stream(stream, &native);
  if (st && cube_status_code(st) != CUBE_STATUS_UNIMPLEMENTED)
    return cube__status_annotate(st, "%s", fn);
  cube_status_free(st);
  *out_stream = (int64_t)(intptr_t)native;
  return CUBE_OK;
}

/* Checks |d| against the handle's view (|view| bytes) and gives element 0's
 * byte in the view. */
static cube_status_t cube__dlpack_check_export(const char* fn, const cube_dlpack_export_t* d,
                                               uint64_t view) {
  if (d->rank > CUBE_MAX_RANK)
    return CUBE_INVALID("%s: desc->rank %u exceeds CUBE_MAX_RANK (%d)", fn, d->rank,
                        CUBE_MAX_RANK);
  if (d->dtype.lanes == 0 || d->dtype.bits == 0 || d->dtype.bits % 8)
    return CUBE_INVALID("%s: desc->dtype (code %u %s, %u bits, %u lanes) is not a whole number "
                        "of bytes per element", fn, d->dtype.code,
                        cube__dlpack_code_name(d->dtype.code), d->dtype.bits, d->dtype.lanes);
  uint64_t item = (uint64_t)(d->dtype.bits / 8) * d->dtype.lanes;
  bool empty = false;
  for (uint32_t i = 0; i < d->rank; ++i) {
    if (d->shape[i] < 0)
      return CUBE_INVALID("%s: desc->shape[%u] is %" PRId64 " (must be >= 0)", fn, i,
                          d->shape[i]);
    if (d->shape[i] == 0) empty = true;
  }
  if (d->byte_offset > view)
    return CUBE_INVALID("%s: desc->byte_offset %" PRIu64 " is past the handle's view of %" PRIu64
                        " bytes", fn, d->byte_offset, view);
  if (empty) return CUBE_OK;
  /* The lowest and the highest element, in elements from element 0. */
  uint64_t below = 0, above = 0;
  int64_t low_at[CUBE_MAX_RANK], high_at[CUBE_MAX_RANK];
  for (uint32_t i = 0; i < d->rank; ++i) {
    uint64_t n = (uint64_t)d->shape[i] - 1;
    int64_t s = d->strides[i];
    uint64_t mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    uint64_t* side = s < 0 ? &below : &above;
    low_at[i] = s < 0 ? d->shape[i] - 1 : 0;
    high_at[i] = s < 0 ? 0 : d->shape[i] - 1;
    if (!cube__mul_add(mag, n, *side, side))
      return CUBE_INVALID("%s: desc->strides[%u] %" PRId64 " x shape %" PRId64
                          " overflows 64 bits", fn, i, s, d->shape[i]);
  }
  uint64_t lo_bytes = 0, hi_bytes = 0;
  char at[256];
  if (!cube__mul_add(below, item, 0, &lo_bytes) || lo_bytes > d->byte_offset) {
    cube__format_dims(low_at, d->rank, at, sizeof(at));
    return CUBE_INVALID("%s: element %s lies %" PRIu64 " elements of %" PRIu64
                        " bytes before element 0, which is at byte %" PRIu64
                        " of the handle's view: before its start",
                        fn, at, below, item, d->byte_offset);
  }
  if (!cube__mul_add(above, item, d->byte_offset + item, &hi_bytes) || hi_bytes > view) {
    cube__format_dims(high_at, d->rank, at, sizeof(at));
    return CUBE_INVALID("%s: element %s ends at byte %" PRIu64 " (element 0 at byte %" PRIu64
                        ", %" PRIu64 " elements of %" PRIu64 " bytes after it), past the "
                        "handle's view of %" PRIu64 " bytes",
                        fn, at, hi_bytes, d->byte_offset, above, item, view);
  }
  return CUBE_OK;
}

static cube_status_t cube__to_dlpack(cube_client_t* c, const char* fn,
                                     const cube_dlpack_export_t* in, bool versioned,
                                     cube__dlpack_export_t** out) {
  CUBE__CHECK_CLIENT(c, fn);
  if (!in) return CUBE_INVALID("%s: desc is NULL", fn);
  CUBE__CHECK_OUT(out, fn, "out_tensor");
  cube_dlpack_export_t d;
  memset(&d, 0, sizeof(d));
  CUBE_RETURN_IF_ERROR(
      cube__struct_read(fn, "desc->struct_size", &cube__struct_dlpack_export, in, &d));
  cube__handle_info_t info;
  CUBE_RETURN_IF_ERROR(cube__client_handle_f(c, d.handle, &info, "%s: desc->handle", fn));
  int32_t dev[3];
  CUBE_RETURN_IF_ERROR(cube__dlpack_device_of(c->server, fn, dev));
  CUBE_RETURN_IF_ERROR(cube__dlpack_check_export(fn, &d, cube__handle_view_size(&info)));
  if (d.stream < -1)
    return CUBE_INVALID("%s: desc->stream %" PRId64 " is not a stream (0 waits, -1 orders "
                        "nothing, else a native stream)", fn, d.stream);
  cube__stream_t* stream;
  CUBE_RETURN_IF_ERROR(cube__client_stream(c, &stream));
  if (cube__stream_capturing(stream))
    return cube__stream_capture_refusal(stream, fn, "a DLPack export");
  if (cube__stream_auto(stream)) cube__auto_step_end(stream, "a DLPack export");
  if (d.stream != CUBE_DLPACK_STREAM_NONE) {
    void* consumer = d.stream == CUBE_DLPACK_STREAM_WAIT ? NULL : (void*)(intptr_t)d.stream;
    cube_status_t st = cube__server_lend_order(stream, info.mem, consumer);
    if (st) return cube__status_annotate(st, "%s", fn);
  }
  const cube__storage_t* storage;
  uint64_t slice_off;
  if (!cube__memory_resolve(info.mem, &storage, &slice_off, NULL))
    return cube__status_make(CUBE_STATUS_NOT_FOUND, "%s: memory of handle 0x%" PRIx64
                             " is not bound", fn, d.handle.id);
  cube__dlpack_export_t* e = calloc(1, sizeof(*e));
  if (!e) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
  e->server = c->server;
  e->epoch = cube__client_epoch();
  e->buffer_size = info.buffer_size;
  e->elem0 = info.offset_start + d.byte_offset;
  e->view_lo = info.offset_start;
  e->view_hi = info.buffer_size - info.offset_end;
  e->stream_id = info.stream_id;
  memcpy(e->shape, d.shape, sizeof(e->shape));
  memcpy(e->strides, d.strides, sizeof(e->strides));
  DLTensor* t = versioned ? &e->t.v.dl_tensor : &e->t.l.dl_tensor;
  if (dev[2]) {
    /* A handle, not an address (OpenCL's cl_mem): the offset says where. */
    t->data = storage->ptr;
    t->byte_offset = slice_off + e->elem0;
  } else {
    t->data = (char*)storage->ptr + slice_off + e->elem0;
    t->byte_offset = 0;
  }
  t->device.device_type = (DLDeviceType)dev[0];
  t->device.device_id = dev[1];
  t->ndim = (int)d.rank;
  t->dtype.code = d.dtype.code;
  t->dtype.bits = d.dtype.bits;
  t->dtype.lanes = d.dtype.lanes;
  t->shape = e->shape;
  t->strides = e->strides;
  if (versioned) {
    e->t.v.version.major = CUBE_DLPACK_MAJOR_VERSION;
    e->t.v.version.minor = CUBE_DLPACK_MINOR_VERSION;
    e->t.v.manager_ctx = e;
    e->t.v.deleter = cube__dlpack_delete_versioned;
    e->t.v.flags = (d.flags & CUBE_DLPACK_READ_ONLY) ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  } else {
    e->t.l.manager_ctx = e;
    e->t.l.deleter = cube__dlpack_delete_legacy;
  }
  cube__memory_ref(info.mem);
  e->mem = info.mem;
  cube__server_lend();
  *out = e;
  return CUBE_OK;
}

cube_status_t cube_client_to_dlpack(cube_client_t* c, const cube_dlpack_export_t* desc,
                                    struct DLManagedTensorVersioned** out_tensor) {
  cube__dlpack_export_t* e;
  CUBE_RETURN_IF_ERROR(
      cube__to_dlpack(c, "cube_client_to_dlpack", desc, true, out_tensor ? &e : NULL));
  *out_tensor = &e->t.v;
  return CUBE_OK;
}

cube_status_t cube_client_to_dlpack_legacy(cube_client_t* c, const cube_dlpack_export_t* desc,
                                           struct DLManagedTensor** out_tensor) {
  cube__dlpack_export_t* e;
  CUBE_RETURN_IF_ERROR(
      cube__to_dlpack(c, "cube_client_to_dlpack_legacy", desc, false, out_tensor ? &e : NULL));
  *out_tensor = &e->t.l;
  return CUBE_OK;
}

//===----------------------------------------------------------------------===//
// Import
//===----------------------------------------------------------------------===//

static void cube__dlpack_release_versioned(void* user) {
  DLManagedTensorVersioned* t = user;
  if (t->deleter) t->deleter(t);
}

static void cube__dlpack_release_legacy(void* user) {
  DLManagedTensor* t = user;
  if (t->deleter) t->deleter(t);
}

/* The element type, or why cube does not take it; the element's bytes and
 * the alignment its address needs. */
static cube_status_t cube__dlpack_check_dtype(const char* fn, DLDataType dt, uint64_t* out_item,
                                              uint64_t* out_align) {
  bool known = dt.code <= CUBE_DLPACK_BOOL && dt.code != CUBE_DLPACK_OPAQUE_HANDLE;
  if (!known || dt.lanes != 1 || dt.bits == 0 || dt.bits % 8)
    return cube__status_make(CUBE_STATUS_UNSUPPORTED,
                             "%s: dtype code %u (%s), %u bits, %u lanes is not supported (cube "
                             "takes int, uint, float, bfloat, complex and bool of whole bytes, "
                             "one lane)",
                             fn, dt.code, cube__dlpack_code_name(dt.code), dt.bits, dt.lanes);
  *out_item = dt.bits / 8u;
  /* A complex number is two of its parts: aligned as one part. */
  uint64_t a = dt.code == CUBE_DLPACK_COMPLEX ? *out_item / 2 : *out_item;
  *out_align = a > 16 ? 16 : (a ? a : 1);
  return CUBE_OK;
}

/* The byte span of a dense layout: refuses negative strides and any layout
 * that is not a permutation of a compact one. */
static cube_status_t cube__dlpack_check_layout(const char* fn, const DLTensor* t, uint64_t item,
                                               uint64_t* out_span) {
  int n = t->ndim;
  if (n < 0 || n > CUBE_MAX_RANK)
    return cube__status_make(CUBE_STATUS_UNSUPPORTED, "%s: ndim %d is outside 0..%d", fn, n,
                             CUBE_MAX_RANK);
  if (n && !t->shape) return CUBE_INVALID("%s: shape is NULL with ndim %d", fn, n);
  uint64_t count = 1;
  char dims[256], strides[256];
  for (int i = 0; i < n; ++i) {
    if (t->shape[i] < 0)
      return CUBE_INVALID("%s: shape[%d] is %" PRId64 " (must be >= 0)", fn, i, t->shape[i]);
    if (!cube__mul_add(count, (uint64_t)t->shape[i], 0, &count))
      return CUBE_INVALID("%s: the element count overflows 64 bits", fn);
  }
  if (count == 0) {
    cube__format_dims(t->shape, (uint32_t)n, dims, sizeof(dims));
    return cube__status_make(CUBE_STATUS_UNSUPPORTED, "%s: the tensor of shape %s has no "
                             "elements; a cube handle views at least one byte", fn, dims);
  }
  if (t->strides) {
    /* Dense: taken by increasing stride, each dimension of more than one
     * element starts where the ones before it end. */
    bool used[CUBE_MAX_RANK] = {false};
    /* In uint64_t: a product of the dimensions, at most the element count
     * (which fits), where int64_t could overflow. */
    uint64_t expect = 1;
    for (int k = 0; k < n; ++k) {
      int best = -1;
      for (int i = 0; i < n; ++i)
        if (!used[i] && t->shape[i] > 1 && (best < 0 || t->strides[i] < t->strides[best]))
          best = i;
      if (best < 0) break;
      used[best] = true;
      if (t->strides[best] < 0 || (uint64_t)t->strides[best] != expect) {
        cube__format_dims(t->shape, (uint32_t)n, dims, sizeof(dims));
        cube__format_dims(t->strides, (uint32_t)n, strides, sizeof(strides));
        const char* why = t->strides[best] < 0 ? "a negative stride (a flipped view)"
                          : (uint64_t)t->strides[best] < expect
                              ? "elements that overlap (a broadcast)"
                              : "gaps between elements (a slice)";
        return cube__status_make(CUBE_STATUS_UNSUPPORTED,
                                 "%s: strides %s (in elements) of shape %s have %s: cube views "
                                 "are contiguous byte ranges; make the tensor contiguous first",
                                 fn, strides, dims, why);
      }
      expect *= (uint64_t)t->shape[best];
    }
  }
  if (!cube__mul_add(count, item, 0, out_span))
    return CUBE_INVALID("%s: the tensor's bytes overflow 64 bits", fn);
  return CUBE_OK;
}

static cube_status_t cube__from_dlpack(cube_client_t* c, const char* fn, void* managed,
                                       const DLTensor* t, bool versioned, uint64_t tflags,
                                       cube_dlpack_flags_t flags, cube_handle_t* out) {
  CUBE__CHECK_CLIENT(c, fn);
  CUBE__CHECK_OUT(out, fn, "out_handle");
  if (!managed) return CUBE_INVALID("%s: tensor is NULL", fn);
  if ((tflags & DLPACK_FLAG_BITMASK_READ_ONLY) && !(flags & CUBE_DLPACK_READ_ONLY))
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "%s: the tensor is read-only (DLPack's read-only flag) and a cube "
                             "handle is writable; pass CUBE_DLPACK_READ_ONLY to take it, "
                             "promising not to write it", fn);
  int32_t dev[3];
  CUBE_RETURN_IF_ERROR(cube__dlpack_device_of(c->server, fn, dev));
  uint64_t item = 1, align = 1, span = 0;
  CUBE_RETURN_IF_ERROR(cube__dlpack_check_dtype(fn, t->dtype, &item, &align));
  CUBE_RETURN_IF_ERROR(cube__dlpack_check_layout(fn, t, item, &span));
  if (!t->data) return CUBE_INVALID("%s: data is NULL for %" PRIu64 " bytes", fn, span);

  /* One of ours, of this device and this runtime: the same buffer. */
  bool ours = versioned
                  ? ((DLManagedTensorVersioned*)managed)->deleter == cube__dlpack_delete_versioned
                  : ((DLManagedTensor*)managed)->deleter == cube__dlpack_delete_legacy;
  cube__dlpack_export_t* e =
      ours ? (versioned ? ((DLManagedTensorVersioned*)managed)->manager_ctx
                        : ((DLManagedTensor*)managed)->manager_ctx)
           : NULL;
  if (e && e->server == c->server && e->epoch == cube__client_epoch()) {
    /* Element 0 where the tensor says it is now (data + byte_offset, or the
     * byte offset in a handle device's buffer), which a consumer may have
     * moved since the export: a view of the exported buffer only. */
    const cube__storage_t* storage;
    uint64_t slice_off;
    if (!cube__memory_resolve(e->mem, &storage, &slice_off, NULL))
      return cube__status_make(CUBE_STATUS_NOT_FOUND, "%s: the exported buffer is not bound", fn);
    const uint64_t base = dev[2] ? slice_off : (uint64_t)(uintptr_t)storage->ptr + slice_off;
    uint64_t at = 0;
    bool placed;
    if (dev[2]) { /* a handle (OpenCL's cl_mem): the offset in it */
      placed = t->data == storage->ptr;
      at = t->byte_offset;
    } else {
      placed = !__builtin_add_overflow((uint64_t)(uintptr_t)t->data, t->byte_offset, &at);
    }
    if (!placed || at < base + e->view_lo || at - base > e->view_hi)
      return CUBE_INVALID("%s: the tensor's element 0 (data %p + byte_offset %" PRIu64
                          ") is not inside the handle's view cube exported it from",
                          fn, t->data, t->byte_offset);
    const uint64_t elem0 = at - base;
    if (span > e->view_hi - elem0)
      return CUBE_INVALID("%s: the tensor's %" PRIu64 " bytes from byte %" PRIu64
                          " of the exported handle's view do not fit its %" PRIu64 " bytes",
                          fn, span, elem0 - e->view_lo, e->view_hi - e->view_lo);
    cube__handle_info_t info = {e->mem, e->buffer_size, elem0,
                                e->buffer_size - elem0 - span, c->server, e->stream_id};
    cube__memory_handle_ref(e->mem);
    cube_status_t st = cube__handle_create(&info, out);
    if (st) {
      cube__memory_handle_unref(e->mem);
      return st;
    }
    /* The handle holds the buffer now: the export goes at once. */
    if (versioned)
      cube__dlpack_delete_versioned(managed);
    else
      cube__dlpack_delete_legacy(managed);
    return CUBE_OK;
  }

  /* The backend says what it takes (the CPU also takes pinned host memory of
   * GPU drivers) and names the devices when it does not. */
  uintptr_t addr = 0;
  if (!dev[2]) {
    addr = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
    if (addr % align)
      return CUBE_INVALID("%s: address 0x%" PRIxPTR " (data + byte_offset %" PRIu64
                          ") is not aligned to %" PRIu64 " bytes, as its %" PRIu64
                          "-byte elements need", fn, addr, t->byte_offset, align, item);
  }
  cube__backend_external_t x;
  memset(&x, 0, sizeof(x));
  x.dl_device_type = (int32_t)t->device.device_type;
  x.dl_device_id = t->device.device_id;
  x.ptr = (void*)addr;
  x.size = span;
  cube_status_t st = cube__server_external_storage(c->server, &x);
  if (st) return cube__status_annotate(st, "%s", fn);
  cube__memory_t* mem = cube__memory_create_external(
      &x.storage, versioned ? cube__dlpack_release_versioned : cube__dlpack_release_legacy,
      managed);
  if (!mem) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
  cube__handle_info_t info = {mem, span, 0, 0, c->server, cube__client_stream_id(c)};
  st = cube__handle_create(&info, out);
  if (st) {
    cube__memory_external_forget(mem); /* not consumed: the caller still owns it */
    cube__memory_handle_unref(mem);
    return st;
  }
  return CUBE_OK;
}

cube_status_t cube_client_from_dlpack(cube_client_t* c, struct DLManagedTensorVersioned* tensor,
                                      cube_dlpack_flags_t flags, cube_handle_t* out_handle) {
  const char* fn = "cube_client_from_dlpack";
  if (tensor && tensor->version.major != CUBE_DLPACK_MAJOR_VERSION)
    return cube__status_make(CUBE_STATUS_UNSUPPORTED,
                             "%s: the tensor is of DLPack %u.%u; cube reads the layout of major "
                             "version %d", fn, tensor->version.major, tensor->version.minor,
                             CUBE_DLPACK_MAJOR_VERSION);
  return cube__from_dlpack(c, fn, tensor, tensor ? &tensor->dl_tensor : NULL, true,
                           tensor ? tensor->flags : 0, flags, out_handle);
}

cube_status_t cube_client_from_dlpack_legacy(cube_client_t* c, struct DLManagedTensor* tensor,
                                             cube_dlpack_flags_t flags,
                                             cube_handle_t* out_handle) {
  return cube__from_dlpack(c, "cube_client_from_dlpack_legacy", tensor,
                           tensor ? &tensor->dl_tensor : NULL, false, 0, flags, out_handle);
}

//===----------------------------------------------------------------------===//
// Python capsules (for bindings that do not link Python)
//===----------------------------------------------------------------------===//

static atomic_size_t cube__capsule_header = 2 * sizeof(void*);

void cube_dlpack_capsule_layout(size_t header_size) {
  if (header_size) atomic_store_explicit(&cube__capsule_header, header_size, memory_order_relaxed);
}

void cube_dlpack_capsule_destructor(void* capsule) {
  if (!capsule) return;
  size_t at = atomic_load_explicit(&cube__capsule_header, memory_order_relaxed);
  void* pointer;
  const char* name;
  memcpy(&pointer, (char*)capsule + at, sizeof(pointer));
  memcpy(&name, (char*)capsule + at + sizeof(void*), sizeof(name));
  if (!pointer || !name) return;
  if (strcmp(name, "dltensor_versioned") == 0) {
    DLManagedTensorVersioned* t = pointer;
    if (t->deleter) t->deleter(t);
  } else if (strcmp(name, "dltensor") == 0) {
    DLManagedTensor* t = pointer;
    if (t->deleter) t->deleter(t);
  }
}
