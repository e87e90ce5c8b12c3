/* fuzz_dlpack: DLPack import and export (include/cube/dlpack.h) on the CPU
 * backend, with tensors decoded from the input, as another library might
 * hand them over (any ndim, shape, strides, dtype, offset, device, version).
 *
 * Each input is a few steps; each step is one of:
 *   - import a foreign tensor over a host buffer of 4 KiB (versioned or
 *     legacy; data NULL, aligned or not; device CPU, CUDA host or another);
 *   - export a handle of cube's own with a fuzzed shape, strides (0 and
 *     negative too) and byte offset, then import the exported tensor back
 *     (sometimes with its shape or strides changed first).
 *
 * Checked against a model written here in 128-bit arithmetic: no crash, no
 * sanitizer report, no leak; an import is accepted exactly when DLPack's
 * rules as docs/dlpack.md gives them hold (a known dtype of whole bytes and
 * one lane, 0..CUBE_MAX_RANK dimensions, none negative, at least one
 * element, strides absent or a permutation of a compact layout, data not
 * NULL and aligned to the element, bytes within 64 bits, a host device,
 * major version 1), and then its handle's size is the elements' bytes; a
 * refused tensor's deleter is not called, an accepted one's exactly once,
 * by the time its handle is released and the device synced; an export is
 * accepted exactly when every element lies inside the handle's view, and a
 * read through an imported view of a buffer of cube's own returns the
 * buffer's bytes at the view's place. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cube/cube.h"
#include "cube/dlpack_types.h"
#include "fuzz_input.h"

#define CHECK(cond) FZ_CHECK(cond)

typedef unsigned __int128 u128;
typedef __int128 i128;

#define HOST_BYTES 4096
#define OWN_BYTES 512

static cube_client_t* g_client;
static unsigned char* g_host; /* 64-byte aligned, HOST_BYTES + 64 */

static void at_exit(void) {
  cube_client_release(g_client);
  g_client = NULL;
  cube_shutdown();
  free(g_host);
}

static void init_once(void) {
  if (g_client) return;
  g_client = fz_cpu_client(0, 64ull << 20);
  if (posix_memalign((void**)&g_host, 64, HOST_BYTES + 64) != 0) abort();
  for (size_t i = 0; i < HOST_BYTES + 64; ++i) g_host[i] = (unsigned char)(i * 131 + 7);
  atexit(at_exit);
}

/* Deleters that count. */
static int g_deleted;
static void delete_versioned(DLManagedTensorVersioned* t) {
  (void)t;
  ++g_deleted;
}
static void delete_legacy(DLManagedTensor* t) {
  (void)t;
  ++g_deleted;
}

/* A dimension or stride: small values mostly, any value sometimes. */
static int64_t fz_dim(fz_t* in) {
  uint8_t sel = fz_u8(in);
  switch (sel >> 5) {
    case 0: case 1: case 2: case 3: return sel & 7;
    case 4: return -(int64_t)(sel & 7);
    case 5: return (int64_t)((uint64_t)1 << (sel & 63));
    case 6: return (int64_t)fz_u32(in);
    default: { uint64_t v = fz_u32(in); v = v << 32 | fz_u32(in); return (int64_t)v; }
  }
}

/* The model of an import: whether it must be accepted, and its bytes. */
static bool import_ok(const DLTensor* t, bool check_align, uint64_t* out_span) {
  const uint8_t code = t->dtype.code;
  const bool known = code <= 6 && code != 3; /* int uint float opaque bfloat complex bool */
  if (!known || t->dtype.lanes != 1 || t->dtype.bits == 0 || t->dtype.bits % 8) return false;
  if (t->ndim < 0 || t->ndim > CUBE_MAX_RANK) return false;
  if (t->ndim && !t->shape) return false;
  u128 count = 1;
  for (int i = 0; i < t->ndim; ++i) {
    if (t->shape[i] < 0) return false;
    count *= (u128)t->shape[i];
    if (count > UINT64_MAX) return false;
  }
  if (count == 0) return false;
  if (t->strides) {
    /* Sort the dimensions of more than one element by stride (stable). */
    int order[CUBE_MAX_RANK], m = 0;
    for (int i = 0; i < t->ndim; ++i)
      if (t->shape[i] > 1) order[m++] = i;
    for (int a = 1; a < m; ++a)
      for (int b = a; b > 0 && t->strides[order[b]] < t->strides[order[b - 1]]; --b) {
        int x = order[b];
        order[b] = order[b - 1];
        order[b - 1] = x;
      }
    i128 expect = 1;
    for (int k = 0; k < m; ++k) {
      if ((i128)t->strides[order[k]] != expect) return false;
      expect *= t->shape[order[k]];
    }
  }
  const u128 span = count * (t->dtype.bits / 8u);
  if (span > UINT64_MAX) return false;
  if (!t->data) return false;
  const uint64_t item = t->dtype.bits / 8u;
  uint64_t align = code == 5 ? item / 2 : item;
  align = align > 16 ? 16 : (align ? align : 1);
  if (check_align && ((uintptr_t)t->data + (uintptr_t)t->byte_offset) % align) return false;
  const int dt = t->device.device_type;
  if (dt != 1 && dt != 3 && dt != 11) return false;
  if (dt == 1 && t->device.device_id != 0) return false;
  *out_span = (uint64_t)span;
  return true;
}

static void fill_tensor(fz_t* in, DLTensor* t, int64_t* shape, int64_t* strides, bool* strided) {
  uint8_t nd = fz_u8(in);
  t->ndim = nd < 240 ? nd % (CUBE_MAX_RANK + 1) : (int)(int8_t)nd; /* sometimes out of range */
  int dims = t->ndim < 0 ? 0 : t->ndim > CUBE_MAX_RANK ? CUBE_MAX_RANK : t->ndim;
  for (int i = 0; i < dims; ++i) shape[i] = fz_dim(in);
  *strided = fz_u8(in) & 1;
  if (*strided) {
    /* Compact row-major strides, then maybe one changed. */
    int64_t s = 1;
    for (int i = dims - 1; i >= 0; --i) {
      strides[i] = s;
      s = shape[i] > 1 ? (int64_t)((uint64_t)s * (uint64_t)shape[i]) : s;
    }
    uint8_t change = fz_u8(in);
    if (dims && (change & 1)) strides[(change >> 1) % dims] = fz_dim(in);
    if (dims > 1 && (change & 0x80)) { /* swap two: a permutation */
      int a = (change >> 1) % dims, b = (change >> 4) % dims;
      int64_t x = strides[a]; strides[a] = strides[b]; strides[b] = x;
      x = shape[a]; shape[a] = shape[b]; shape[b] = x;
    }
  }
  t->shape = shape;
  t->strides = *strided ? strides : NULL;
  static const uint8_t bits[] = {8, 16, 32, 64, 128, 0, 12, 24};
  uint8_t d = fz_u8(in);
  t->dtype.code = (uint8_t)((d & 7) == 7 ? fz_u8(in) : (d & 7));
  t->dtype.bits = bits[(d >> 3) & 7];
  t->dtype.lanes = (d & 0x40) ? (uint16_t)fz_u8(in) : 1;
  uint8_t dev = fz_u8(in);
  t->device.device_type = (DLDeviceType)((dev & 3) == 0 ? 1 : (dev & 3) == 1 ? 3 : dev);
  t->device.device_id = (dev & 0x80) ? 1 : 0;
}

static void step_foreign(fz_t* in) {
  DLManagedTensorVersioned v;
  DLManagedTensor l;
  memset(&v, 0, sizeof v);
  memset(&l, 0, sizeof l);
  const uint8_t how = fz_u8(in);
  const bool versioned = how & 1;
  DLTensor* t = versioned ? &v.dl_tensor : &l.dl_tensor;
  int64_t shape[CUBE_MAX_RANK] = {0}, strides[CUBE_MAX_RANK] = {0};
  bool strided;
  fill_tensor(in, t, shape, strides, &strided);
  const uint8_t where = fz_u8(in);
  t->data = (where & 3) == 0 ? NULL : g_host + (where >> 2) % 64;
  t->byte_offset = (where & 3) == 3 ? fz_u8(in) : 0;
  v.version.major = (how & 2) ? (uint32_t)fz_u8(in) % 3 : 1;
  v.version.minor = 2;
  v.deleter = delete_versioned;
  l.deleter = delete_legacy;
  const bool read_only = how & 4;
  v.flags = read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  const cube_dlpack_flags_t flags = (how & 8) ? CUBE_DLPACK_READ_ONLY : 0;

  uint64_t span = 0;
  bool want = import_ok(t, true, &span);
  if (versioned && (v.version.major != 1 || (read_only && !flags))) want = false;

  g_deleted = 0;
  cube_handle_t h = CUBE_HANDLE_NULL;
  cube_status_t st = versioned ? cube_client_from_dlpack(g_client, &v, flags, &h)
                               : cube_client_from_dlpack_legacy(g_client, &l, flags, &h);
  if (st) {
    if (want) fprintf(stderr, "fuzz_dlpack: refused: %s\n", cube_status_message(st));
    CHECK(!want);
    CHECK(cube_status_message(st)[0] != '\0');
    cube_status_free(st);
    CHECK(g_deleted == 0);
    return;
  }
  CHECK(want);
  CHECK(cube_handle_size(h) == span);
  CHECK(g_deleted == 0);
  cube_handle_release(h);
  CHECK(cube_client_sync(g_client) == CUBE_OK);
  CHECK(g_deleted == 1);
}

static void step_own(fz_t* in) {
  unsigned char src[OWN_BYTES];
  for (int i = 0; i < OWN_BYTES; ++i) src[i] = (unsigned char)(i * 37 + 11);
  const size_t size = 1 + fz_u16(in) % OWN_BYTES;
  cube_handle_t h;
  CHECK(cube_client_create_from_slice(g_client, src, size, &h) == CUBE_OK);
  cube_dlpack_export_t d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.handle = h;
  const uint8_t dt = fz_u8(in);
  static const uint8_t bits[] = {8, 16, 32, 64, 0, 12};
  d.dtype = cube_dlpack_dtype((cube_dlpack_code_t)(dt & 3), bits[(dt >> 2) % 6]);
  if (dt & 0x80) d.dtype.lanes = fz_u8(in) % 4;
  d.rank = fz_u8(in) % (CUBE_MAX_RANK + 2);
  for (uint32_t i = 0; i < CUBE_MAX_RANK; ++i) {
    d.shape[i] = fz_dim(in);
    d.strides[i] = fz_dim(in);
  }
  d.byte_offset = fz_u8(in) & 1 ? fz_u16(in) : 0;
  d.stream = CUBE_DLPACK_STREAM_WAIT;

  /* The model: every element inside the view. */
  bool want = d.rank <= CUBE_MAX_RANK && d.dtype.lanes && d.dtype.bits && d.dtype.bits % 8 == 0;
  bool empty = false;
  for (uint32_t i = 0; want && i < d.rank; ++i) {
    if (d.shape[i] < 0) want = false;
    if (d.shape[i] == 0) empty = true;
  }
  if (want && d.byte_offset > size) want = false;
  if (want && !empty) {
    const i128 item = (i128)(d.dtype.bits / 8) * d.dtype.lanes;
    i128 lo = 0, hi = 0; /* in elements */
    /* Each reach is below 2^127 in size; past 2^100 in all the view (512
     * bytes) is left far behind, so stop adding there. */
    const i128 far = (i128)1 << 100;
    for (uint32_t i = 0; i < d.rank && lo > -far && hi < far; ++i) {
      i128 reach = (i128)d.strides[i] * (d.shape[i] - 1);
      if (reach < 0) lo += reach > -far ? reach : -far; else hi += reach < far ? reach : far;
    }
    if (lo <= -far || hi >= far) want = false;
    else if ((i128)d.byte_offset + lo * item < 0) want = false;
    else if ((i128)d.byte_offset + hi * item + item > (i128)size) want = false;
  }

  DLManagedTensorVersioned* t = NULL;
  cube_status_t st = cube_client_to_dlpack(g_client, &d, &t);
  if (st) {
    if (want) fprintf(stderr, "fuzz_dlpack: export refused: %s\n", cube_status_message(st));
    CHECK(!want);
    cube_status_free(st);
    cube_handle_release(h);
    return;
  }
  CHECK(want);
  CHECK(t && t->deleter && t->dl_tensor.ndim == (int32_t)d.rank);
  /* Back in, maybe changed first: cube's own buffer again, or refused. */
  const uint8_t change = fz_u8(in);
  if ((change & 1) && t->dl_tensor.ndim) t->dl_tensor.shape[change % t->dl_tensor.ndim] = fz_dim(in);
  if ((change & 2) && t->dl_tensor.ndim) t->dl_tensor.strides[change % t->dl_tensor.ndim] = fz_dim(in);
  if (change & 4) t->dl_tensor.byte_offset = fz_u16(in);
  uint64_t span = 0;
  /* cube's own tensor comes back at any byte of the exported handle's view
   * (views are byte ranges: no alignment asked), inside that view only. */
  bool in_ok = import_ok(&t->dl_tensor, false, &span);
  if (d.byte_offset + (uint64_t)t->dl_tensor.byte_offset + span > size) in_ok = false;
  const uint64_t now_offset = t->dl_tensor.byte_offset; /* |t| goes with the import */
  char what[512];
  {
    int at = snprintf(what, sizeof what, "dtype %u/%u/%u, byte offset %llu + %llu, span %llu,",
                      d.dtype.code, d.dtype.bits, d.dtype.lanes,
                      (unsigned long long)d.byte_offset, (unsigned long long)now_offset,
                      (unsigned long long)span);
    for (int i = 0; i < t->dl_tensor.ndim && at > 0 && (size_t)at < sizeof what; ++i)
      at += snprintf(what + at, sizeof what - (size_t)at, " %lld/%lld",
                     (long long)t->dl_tensor.shape[i], (long long)t->dl_tensor.strides[i]);
  }
  cube_handle_t back = CUBE_HANDLE_NULL;
  st = cube_client_from_dlpack(g_client, t, 0, &back);
  if (st) {
    cube_status_free(st);
    t->deleter(t); /* not consumed: ours to delete */
  } else {
    if (!in_ok)
      fprintf(stderr, "fuzz_dlpack: cube's own tensor accepted back: %s (handle of %zu bytes)\n",
              what, size);
    CHECK(in_ok);
    CHECK(cube_handle_size(back) == span);
    cube_bytes_t* out = NULL;
    CHECK(cube_client_read(g_client, 1, &back, &out) == CUBE_OK);
    const unsigned char* got = cube_bytes_const_data(out);
    /* The view starts at the export's element 0 (data points at it, byte
     * offset 0 on the CPU) plus the offset the tensor says now. */
    const uint64_t off = d.byte_offset + now_offset;
    CHECK(off + span <= size);
    CHECK(memcmp(got, src + off, span) == 0);
    cube_bytes_release(out);
    cube_handle_release(back);
  }
  cube_handle_release(h);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  init_once();
  fz_t in = fz_make(data, size);
  for (int steps = 0; steps < 8 && !fz_done(&in); ++steps) {
    if (fz_u8(&in) & 1)
      step_own(&in);
    else
      step_foreign(&in);
  }
  CHECK(cube_client_sync(g_client) == CUBE_OK);
  return 0;
}
