/* fuzz_client: client API call sequences on the CPU backend
 * (include/cube/client.h).
 *
 * One client of CPU device 0, created on the first input with a 256 MiB
 * memory limit and the inline queue (CUBE_FUZZ_THREADED=1 in the environment
 * selects the threaded queue); released and cube_shutdown run at exit.
 *
 * Each input is a sequence of operations on up to 32 handles: create from a
 * slice, empty (sizes 0, small and huge), read of valid, released and random
 * ids, release (checked), offset views, launches of a native fill kernel
 * (static and dynamic counts, wrong argument lists, failing runs), strided
 * tensor reads with fuzzed shapes and strides, tensors created from slices,
 * flush / sync / usage / cleanup / allocation mode, restorable buffers
 * (create_restorable, checkpoint, read_restorable). Every handle is released
 * at the end of the input.
 *
 * Checked: every call returns a status (no crash, no sanitizer report);
 * bad input (size 0, released or random handles, unreadable strides) is
 * refused; reads of valid handles return what the model says was written
 * (uploads, kernel fills, through views and sub-ranges); a restorable
 * buffer's host copy reads back what it held at its last checkpoint (or its
 * upload), a buffer never made restorable is FAILED_PRECONDITION; handle
 * sizes and offsets agree with the model. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cube/cube.h"
#include "fuzz_input.h"

#define MAX_HANDLES 32
#define MAX_UPLOAD (64 * 1024)
#define MEMORY_LIMIT (256ull << 20)

/* The client ----------------------------------------------------------------- */

static cube_client_t* g_client;
static cube_kernel_t* g_fill;   /* (buffer, u32 pattern, u32 fail) */
static cube_kernel_t* g_scalar; /* (u64): touches no memory */

static uint64_t cube_linear(const cube_cpu_cube_t* c) {
  return c->cube_pos[0] +
         (uint64_t)c->cube_count[0] * (c->cube_pos[1] + (uint64_t)c->cube_count[1] * c->cube_pos[2]);
}

/* Cube i of n writes bytes [i*len/n, (i+1)*len/n) with (pattern + index). */
static int fill_kernel(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  if (n != 3) return 2;
  if (args[2].u32) return 1;
  uint8_t* p = args[0].buffer.data;
  uint64_t len = args[0].buffer.len;
  uint64_t cubes = (uint64_t)cube->cube_count[0] * cube->cube_count[1] * cube->cube_count[2];
  uint64_t i = cube_linear(cube);
  uint64_t lo = (uint64_t)((unsigned __int128)i * len / cubes);
  uint64_t hi = (uint64_t)((unsigned __int128)(i + 1) * len / cubes);
  for (uint64_t k = lo; k < hi; ++k) p[k] = (uint8_t)(args[1].u32 + k);
  return 0;
}

static int scalar_kernel(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube;
  return n == 1 && args[0].u64 == 0xDEAD ? 1 : 0;
}

static unsigned long g_restorable_reads; /* compared with the model (FUZZ_VERBOSE) */

static void at_exit(void) {
  if (getenv("FUZZ_VERBOSE"))
    fprintf(stderr, "fuzz_client: %lu reads of restorable copies compared\n", g_restorable_reads);
  cube_kernel_release(g_fill);
  cube_kernel_release(g_scalar);
  cube_client_release(g_client);
  g_fill = g_scalar = NULL;
  g_client = NULL;
  cube_shutdown();
}

static void init_once(void) {
  if (g_client) return;
  g_client = fz_cpu_client(0, MEMORY_LIMIT);
  cube_status_t st;
  static const cube_arg_kind_t fill_kinds[] = {CUBE_ARG_BUFFER, CUBE_ARG_U32, CUBE_ARG_U32};
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = "fuzz_fill";
  d.cube_dim = (cube_dim_t){1, 1, 1};
  d.arg_kinds = fill_kinds;
  d.arg_count = 3;
  d.cpu_fn = fill_kernel;
  st = cube_kernel_create(&d, &g_fill);
  FZ_ASSERT(st == CUBE_OK, "cube_kernel_create: %s", cube_status_message(st));
  static const cube_arg_kind_t scalar_kinds[] = {CUBE_ARG_U64};
  d.name = "fuzz_scalar";
  d.cube_dim = (cube_dim_t){4, 2, 1};
  d.arg_kinds = scalar_kinds;
  d.arg_count = 1;
  d.cpu_fn = scalar_kernel;
  st = cube_kernel_create(&d, &g_scalar);
  FZ_ASSERT(st == CUBE_OK, "cube_kernel_create: %s", cube_status_message(st));
  atexit(at_exit);
}

/* Model ---------------------------------------------------------------------- */


typedef struct buf {
  unsigned refs; /* handles of the model on this buffer */
  size_t size;
  uint8_t* bytes;
  uint8_t* known; /* 1 where |bytes| is what the device holds */
  /* Restorable (cube_client_checkpoint, cube_client_create_restorable): the
   * host copy as the model knows it (saved_known 1 where it does). */
  uint8_t* saved;
  uint8_t* saved_known;
} buf_t;

typedef struct hmodel {
  cube_handle_t h;
  buf_t* b;
  uint64_t off, size; /* the view inside the buffer */
} hmodel_t;

typedef struct state {
  hmodel_t live[MAX_HANDLES];
  size_t count;
  cube_handle_t dead[16]; /* released ids */
  size_t dead_count;
  bool pending; /* a deferred error may be waiting on the stream */
  bool spoiled; /* a launch may have failed: buffers it wrote read as DATA_LOST (taint) */
} state_t;

static buf_t* buf_new(size_t size, const uint8_t* content) {
  buf_t* b = calloc(1, sizeof(*b));
  FZ_ASSERT(b, "host memory");
  b->refs = 1;
  b->size = size;
  b->bytes = calloc(size ? size : 1, 1);
  b->known = calloc(size ? size : 1, 1);
  FZ_ASSERT(b->bytes && b->known, "host memory");
  if (content) {
    memcpy(b->bytes, content, size);
    memset(b->known, 1, size);
  }
  return b;
}

static void buf_unref(buf_t* b) {
  if (--b->refs) return;
  free(b->saved);
  free(b->saved_known);
  free(b->bytes);
  free(b->known);
  free(b);
}

static void add_handle(state_t* s, cube_handle_t h, buf_t* b, uint64_t off, uint64_t size) {
  hmodel_t* m = &s->live[s->count++];
  m->h = h;
  m->b = b;
  m->off = off;
  m->size = size;
}

static void release_at(state_t* s, size_t i) {
  hmodel_t m = s->live[i];
  cube_status_t st = cube_handle_release_checked(m.h);
  FZ_ASSERT(st == CUBE_OK, "releasing a live handle: %s", cube_status_message(st));
  buf_unref(m.b);
  s->live[i] = s->live[--s->count];
  if (s->dead_count < 16) s->dead[s->dead_count++] = m.h;
  else s->dead[m.h.id % 16] = m.h;
}

/* A handle for an operation: a live one (most often), a released one, NULL or
 * a random id. *out_live is its index in s->live, or -1. */
static cube_handle_t pick_handle(fz_t* f, state_t* s, int* out_live) {
  uint8_t b = fz_u8(f);
  *out_live = -1;
  switch (b >> 6) {
    case 0:
    case 1:
      if (s->count) {
        *out_live = (int)(b % s->count);
        return s->live[*out_live].h;
      }
      return CUBE_HANDLE_NULL;
    case 2:
      if (s->dead_count) return s->dead[b % s->dead_count];
      return CUBE_HANDLE_NULL;
    default: {
      if (b & 1) return CUBE_HANDLE_NULL;
      cube_handle_t h = {fz_u64(f)};
      for (size_t i = 0; i < s->count; ++i)
        if (s->live[i].h.id == h.id) *out_live = (int)i;
      return h;
    }
  }
}

static void check_content(const hmodel_t* m, const uint8_t* got, size_t n, const char* what) {
  FZ_ASSERT(n <= m->size, "%s: %zu bytes from a view of %" PRIu64, what, n, m->size);
  for (size_t i = 0; i < n; ++i) {
    size_t at = (size_t)m->off + i;
    if (!m->b->known[at]) continue;
    FZ_ASSERT(got[i] == m->b->bytes[at],
              "%s: byte %zu of handle 0x%" PRIx64 " (view +%" PRIu64 " of %zu) is %u, wrote %u",
              what, i, m->h.id, m->off, m->b->size, got[i], m->b->bytes[at]);
  }
}

static bool is_ok_or_oom(cube_status_t st) {
  cube_status_code_t c = cube_status_code(st);
  return c == CUBE_STATUS_OK || c == CUBE_STATUS_OUT_OF_MEMORY;
}

/* Deferred-error-aware expectation: with a pending error any status is
 * allowed; otherwise the call must succeed. */
static void expect_ok(state_t* s, cube_status_t st, const char* what) {
  /* A buffer a failed launch should have written stays tainted after the
   * failure was reported (docs/failures.md): its reads say DATA_LOST. */
  if (s->spoiled && cube_status_code(st) == CUBE_STATUS_DATA_LOST) return;
  if (!s->pending)
    FZ_ASSERT(st == CUBE_OK, "%s: %s: %s", what, cube_status_code_name(cube_status_code(st)),
              cube_status_message(st));
}

static size_t decode_upload_size(fz_t* f) {
  uint8_t b = fz_u8(f);
  if (b < 64) return b;                          /* 0..63, 0 included */
  if (b < 192) return fz_u16(f) % 4097;          /* up to 4 KiB */
  return (size_t)fz_u16(f) % MAX_UPLOAD + 1;     /* up to 64 KiB */
}

static size_t decode_empty_size(fz_t* f, bool* huge) {
  uint8_t b = fz_u8(f);
  *huge = false;
  switch (b >> 5) {
    case 0:
      return b & 1;
    case 1:
    case 2:
      return fz_u16(f) % 4097;
    case 3:
    case 4:
      return (size_t)fz_u16(f) * 16 + 1; /* up to ~1 MiB */
    default: {
      static const size_t huge_sizes[] = {SIZE_MAX, SIZE_MAX / 2, (size_t)1 << 40, (size_t)1 << 63,
                                          MEMORY_LIMIT + 1, (size_t)1 << 33};
      *huge = true;
      return huge_sizes[b % 6];
    }
  }
}

static uint64_t decode_dim(fz_t* f) {
  uint8_t b = fz_u8(f);
  if (b < 200) return (uint64_t)(b % 8) + 1;
  if (b < 240) return (uint64_t)fz_u8(f);      /* 0 included */
  if (b < 250) return (uint64_t)fz_u16(f) + 1;
  return fz_u64(f);
}

/* Operations ------------------------------------------------------------------ */

static void op_create(fz_t* f, state_t* s) {
  size_t n = decode_upload_size(f);
  uint8_t seed = fz_u8(f);
  static uint8_t data[MAX_UPLOAD];
  for (size_t i = 0; i < n; ++i) data[i] = (uint8_t)(seed + i * 7u);
  cube_handle_t h = CUBE_HANDLE_NULL;
  cube_status_t st = cube_client_create_from_slice(g_client, data, n, &h);
  if (n == 0) {
    FZ_ASSERT(cube_status_code(st) == CUBE_STATUS_INVALID_ARGUMENT,
              "create_from_slice of 0 bytes: %s", cube_status_message(st));
    cube_status_free(st);
    return;
  }
  FZ_ASSERT(is_ok_or_oom(st), "create_from_slice(%zu): %s", n, cube_status_message(st));
  if (st) {
    cube_status_free(st);
    return;
  }
  FZ_ASSERT(cube_handle_size(h) == n, "new handle views %" PRIu64 " bytes, not %zu",
            cube_handle_size(h), n);
  FZ_ASSERT(cube_handle_can_mut(h), "a new handle is not mutable");
  if (s->count == MAX_HANDLES) {
    cube_handle_release(h);
    return;
  }
  add_handle(s, h, buf_new(n, data), 0, n);
}

static void op_empty(fz_t* f, state_t* s) {
  bool huge;
  size_t n = decode_empty_size(f, &huge);
  cube_handle_t h = CUBE_HANDLE_NULL;
  cube_status_t st = cube_client_empty(g_client, n, &h);
  if (n == 0 || huge) {
    FZ_ASSERT(st != CUBE_OK, "empty(%zu) succeeded", n);
    FZ_ASSERT(h.id == 0, "failed empty wrote a handle");
    cube_status_free(st);
    return;
  }
  FZ_ASSERT(is_ok_or_oom(st), "empty(%zu): %s", n, cube_status_message(st));
  if (st) {
    cube_status_free(st);
    return;
  }
  FZ_ASSERT(cube_handle_size(h) == n, "empty handle views %" PRIu64 " bytes, not %zu",
            cube_handle_size(h), n);
  if (s->count == MAX_HANDLES) {
    cube_handle_release(h);
    return;
  }
  add_handle(s, h, buf_new(n, NULL), 0, n);
}

static void op_read(fz_t* f, state_t* s) {
  size_t count = fz_u8(f) % 5; /* 0 included */
  cube_handle_t hs[4];
  int idx[4];
  bool all_live = true;
  for (size_t i = 0; i < count; ++i) {
    hs[i] = pick_handle(f, s, &idx[i]);
    if (idx[i] < 0) all_live = false;
  }
  cube_bytes_t* out[4] = {0};
  cube_status_t st = count == 1 && (fz_u8(f) & 1)
                         ? cube_client_read_one(g_client, hs[0], out)
                         : cube_client_read(g_client, count, count ? hs : NULL, out);
  if (count == 0 || !all_live) {
    FZ_ASSERT(st != CUBE_OK, "read of %zu handles (a bad one among them) succeeded", count);
    cube_status_free(st);
    return;
  }
  expect_ok(s, st, "read of live handles");
  s->pending = false;
  if (st) {
    cube_status_free(st);
    return;
  }
  for (size_t i = 0; i < count; ++i) {
    const hmodel_t* m = &s->live[idx[i]];
    FZ_ASSERT(out[i] && cube_bytes_size(out[i]) == m->size, "read returned %zu bytes of %" PRIu64,
              out[i] ? cube_bytes_size(out[i]) : 0, m->size);
    check_content(m, cube_bytes_const_data(out[i]), cube_bytes_size(out[i]), "read");
  }
  cube_bytes_release_array(out, count);
}

static void op_release(fz_t* f, state_t* s) {
  int li;
  cube_handle_t h = pick_handle(f, s, &li);
  if (li >= 0) {
    release_at(s, (size_t)li);
    return;
  }
  cube_status_t st = cube_handle_release_checked(h);
  FZ_ASSERT(st != CUBE_OK, "releasing a dead or random id 0x%" PRIx64 " succeeded", h.id);
  cube_status_free(st);
  /* The plain release must accept it too. */
  cube_handle_release(h);
}

static void op_view(fz_t* f, state_t* s) {
  int li;
  cube_handle_t h = pick_handle(f, s, &li);
  uint8_t mode = fz_u8(f);
  uint64_t a, b;
  if (mode & 1) {
    a = fz_u64(f);
    b = fz_u64(f);
  } else {
    a = fz_u16(f);
    b = fz_u16(f);
    if (li >= 0 && s->live[li].size) {
      a %= s->live[li].size;
      b %= s->live[li].size;
    }
  }
  cube_handle_t v = CUBE_HANDLE_NULL;
  cube_status_t st = cube_handle_offset_view(h, a, b, &v);
  if (li < 0) {
    FZ_ASSERT(st != CUBE_OK, "offset_view of a dead or random id succeeded");
    cube_status_free(st);
    return;
  }
  hmodel_t* m = &s->live[li];
  unsigned __int128 cut = (unsigned __int128)a + b;
  if (cut >= m->size) {
    FZ_ASSERT(cube_status_code(st) == CUBE_STATUS_INVALID_ARGUMENT,
              "offset_view %" PRIu64 "+%" PRIu64 " of %" PRIu64 " bytes: %s", a, b, m->size,
              cube_status_message(st));
    cube_status_free(st);
    return;
  }
  FZ_ASSERT(st == CUBE_OK, "offset_view: %s", cube_status_message(st));
  FZ_ASSERT(cube_handle_size(v) == m->size - a - b, "view size %" PRIu64 ", expected %" PRIu64,
            cube_handle_size(v), m->size - a - b);
  FZ_ASSERT(cube_handle_offset(v) == cube_handle_offset(m->h) + a, "view offset %" PRIu64,
            cube_handle_offset(v));
  FZ_ASSERT(!cube_handle_can_mut(v) && !cube_handle_can_mut(m->h),
            "two handles on one buffer, yet can_mut");
  if (s->count == MAX_HANDLES) {
    cube_handle_release(v);
    return;
  }
  m->b->refs++;
  add_handle(s, v, m->b, m->off + a, m->size - a - b);
}

static void op_launch(fz_t* f, state_t* s) {
  int li;
  cube_handle_t h = pick_handle(f, s, &li);
  uint8_t how = fz_u8(f);
  uint32_t pattern = fz_u8(f);
  bool fail = (how & 0x70) == 0x70;
  uint8_t cb = fz_u8(f);
  cube_count_t count = cube_count_static(cb & 7, (cb >> 3) & 3, (cb >> 5) & 3);
  bool dynamic = (how & 0x0C) == 0x0C;
  if (dynamic) {
    int di;
    cube_handle_t dh = pick_handle(f, s, &di);
    /* A live handle of >= 12 bytes would give an unbounded count: only
     * small, dead or random ones. */
    if (di >= 0 && s->live[di].size >= 12) dynamic = false;
    else count = cube_count_dynamic(dh);
  }
  cube_arg_t args[4] = {cube_arg_buffer(h), cube_arg_u32(pattern), cube_arg_u32(fail), cube_arg_u32(0)};
  size_t nargs = 3;
  bool bad_args = false;
  switch (how & 3) {
    case 1: /* wrong count */
      nargs = (how >> 7) ? 4 : 2;
      bad_args = true;
      break;
    case 2: /* wrong kind */
      if (how & 0x80) {
        args[1] = cube_arg_f32(1.0f);
        bad_args = true;
      }
      break;
    default:
      break;
  }
  uint8_t mb = fz_u8(f);
  cube_status_t st;
  bool bad_mode = false;
  if (mb < 128) {
    st = cube_client_launch(g_client, g_fill, count, nargs, args);
  } else if (mb < 250) {
    st = cube_client_launch_mode(g_client, g_fill, count, nargs, args,
                                 (cube_execution_mode_t)(mb % 3));
  } else {
    bad_mode = true;
    st = cube_client_launch_mode(g_client, g_fill, count, nargs, args,
                                 (cube_execution_mode_t)(mb - 247));
  }
  bool empty = !dynamic && (uint64_t)count.x * count.y * count.z == 0;
  if (li < 0 || bad_args || bad_mode) {
    /* Library behaviour (reported): an empty static launch returns CUBE_OK
     * before argument kinds and handles are checked; only the argument
     * count and the mode are checked first. */
    bool lenient = empty && !bad_mode && nargs == 3;
    FZ_ASSERT(st != CUBE_OK || lenient,
              "launch with a bad handle, argument list or mode succeeded");
    cube_status_free(st);
    return;
  }
  if (dynamic) {
    /* Bad dynamic counts may be refused now or deferred. */
    if (st == CUBE_OK) s->pending = s->spoiled = true;
    cube_status_free(st);
    hmodel_t* m = &s->live[li];
    memset(m->b->known + m->off, 0, (size_t)m->size); /* whatever count it read */
    return;
  }
  FZ_ASSERT(st == CUBE_OK, "launch of a valid kernel: %s", cube_status_message(st));
  if (fail) {
    s->pending = s->spoiled = true;
    return;
  }
  if (empty) return; /* launches nothing */
  hmodel_t* m = &s->live[li];
  for (uint64_t k = 0; k < m->size; ++k) {
    m->b->bytes[m->off + k] = (uint8_t)(pattern + k);
    m->b->known[m->off + k] = 1;
  }
}

static void op_launch_scalar(fz_t* f, state_t* s) {
  uint64_t v = (fz_u8(f) & 1) ? 0xDEAD : fz_u64(f);
  cube_arg_t a = cube_arg_u64(v);
  cube_status_t st = cube_client_launch(g_client, g_scalar, cube_count_static(2, 1, 1), 1, &a);
  FZ_ASSERT(st == CUBE_OK, "scalar launch: %s", cube_status_message(st));
  if (v == 0xDEAD) s->pending = s->spoiled = true;
}

static void op_read_tensor(fz_t* f, state_t* s) {
  int li;
  cube_tensor_t t;
  memset(&t, 0, sizeof(t));
  t.handle = pick_handle(f, s, &li);
  uint8_t rb = fz_u8(f);
  t.rank = rb < 250 ? rb % 5 : rb - 237; /* 0..4, sometimes 13..18 */
  uint32_t stored = t.rank < CUBE_MAX_RANK ? t.rank : CUBE_MAX_RANK;
  for (uint32_t k = 0; k < stored; ++k) t.shape[k] = decode_dim(f);
  static const uint32_t elems[] = {1, 2, 4, 8, 3, 0};
  uint8_t eb = fz_u8(f);
  t.elem_size = elems[eb % 6];
  uint8_t sm = fz_u8(f);
  uint64_t acc = 1;
  for (uint32_t k = stored; k-- > 0;) {
    t.strides[k] = acc;
    acc *= t.shape[k];
  }
  if (sm & 1) { /* perturb */
    uint32_t k = stored ? fz_u8(f) % stored : 0;
    if (stored) t.strides[k] = (sm & 2) ? fz_u64(f) : t.strides[k] + 1;
  }

  /* Expectation. */
  bool ok = li >= 0 && t.rank <= CUBE_MAX_RANK && t.elem_size;
  unsigned __int128 bytes = t.elem_size;
  for (uint32_t k = 0; ok && k < t.rank; ++k) {
    if (t.shape[k] == 0) ok = false;
    bytes *= t.shape[k];
    if (bytes > UINT64_MAX) ok = false;
  }
  if (ok) {
    /* Readable on the CPU: exactly row-major. */
    unsigned __int128 e = 1;
    for (uint32_t k = t.rank; k-- > 0;) {
      if (t.strides[k] != e) ok = false;
      e *= t.shape[k];
    }
  }
  if (ok && bytes > s->live[li].size) ok = false;

  cube_bytes_t* out = NULL;
  cube_status_t st = cube_client_read_tensor(g_client, 1, &t, &out);
  if (!ok) {
    FZ_ASSERT(st != CUBE_OK, "read_tensor of a bad tensor succeeded (rank %u, elem %u)", t.rank,
              t.elem_size);
    cube_status_free(st);
    return;
  }
  expect_ok(s, st, "read_tensor");
  s->pending = false;
  if (st) {
    cube_status_free(st);
    return;
  }
  FZ_ASSERT(cube_bytes_size(out) == (size_t)bytes, "read_tensor gave %zu bytes, expected %zu",
            cube_bytes_size(out), (size_t)bytes);
  check_content(&s->live[li], cube_bytes_const_data(out), cube_bytes_size(out), "read_tensor");
  cube_bytes_release(out);
}

static void op_create_tensor(fz_t* f, state_t* s) {
  uint32_t rank = fz_u8(f) % 4;
  uint64_t shape[CUBE_MAX_RANK];
  unsigned __int128 n = 1;
  for (uint32_t k = 0; k < rank; ++k) {
    shape[k] = (fz_u8(f) % 9); /* 0 included */
    n *= shape[k];
  }
  static const uint32_t elems[] = {1, 2, 4, 8, 3};
  uint32_t elem = elems[fz_u8(f) % 5];
  n *= elem;
  uint8_t sb = fz_u8(f);
  size_t size = (sb & 0x80) ? (size_t)n + (sb & 3) : (size_t)n;
  static uint8_t data[MAX_UPLOAD];
  if (size > sizeof(data)) return;
  for (size_t i = 0; i < size; ++i) data[i] = (uint8_t)(sb + i * 13u);
  cube_tensor_t t;
  memset(&t, 0, sizeof(t));
  cube_status_t st = cube_client_create_tensor_from_slice(g_client, data, size, rank, shape, elem, &t);
  bool valid = size == n && n > 0;
  if (!valid) {
    FZ_ASSERT(st != CUBE_OK, "create_tensor_from_slice with size %zu for %zu bytes succeeded",
              size, (size_t)n);
    cube_status_free(st);
    return;
  }
  FZ_ASSERT(is_ok_or_oom(st), "create_tensor_from_slice: %s", cube_status_message(st));
  if (st) {
    cube_status_free(st);
    return;
  }
  FZ_ASSERT(t.rank == rank && t.elem_size == elem, "tensor descriptor not kept");
  FZ_ASSERT(cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, t.rank, t.shape, t.strides),
            "a created tensor has unreadable strides");
  cube_bytes_t* out = NULL;
  st = cube_client_read_tensor(g_client, 1, &t, &out);
  expect_ok(s, st, "read_tensor of a created tensor");
  s->pending = false;
  if (st == CUBE_OK) {
    FZ_ASSERT(cube_bytes_size(out) == size && memcmp(cube_bytes_const_data(out), data, size) == 0,
              "tensor round trip differs (%zu bytes)", size);
    cube_bytes_release(out);
  } else {
    cube_status_free(st);
  }
  if (s->count == MAX_HANDLES) {
    cube_tensor_release(&t);
    return;
  }
  uint64_t view = cube_handle_size(t.handle);
  FZ_ASSERT(view >= size, "tensor handle views %" PRIu64 " < %zu", view, size);
  buf_t* b = buf_new((size_t)view, NULL);
  memcpy(b->bytes, data, size);
  memset(b->known, 1, size);
  add_handle(s, t.handle, b, 0, view);
}

/* The model's copy of a restorable buffer: what it holds now. */
static void buf_save(buf_t* b) {
  size_t n = b->size ? b->size : 1;
  if (!b->saved) {
    b->saved = malloc(n);
    b->saved_known = malloc(n);
    FZ_ASSERT(b->saved && b->saved_known, "host memory");
  }
  memcpy(b->saved, b->bytes, n);
  memcpy(b->saved_known, b->known, n);
}

static void op_create_restorable(fz_t* f, state_t* s) {
  size_t n = decode_upload_size(f);
  uint8_t seed = fz_u8(f);
  static uint8_t data[MAX_UPLOAD];
  for (size_t i = 0; i < n; ++i) data[i] = (uint8_t)(seed * 3u + i);
  cube_handle_t h = CUBE_HANDLE_NULL;
  cube_status_t st = cube_client_create_restorable(g_client, data, n, &h);
  if (n == 0) {
    FZ_ASSERT(cube_status_code(st) == CUBE_STATUS_INVALID_ARGUMENT,
              "create_restorable of 0 bytes: %s", cube_status_message(st));
    cube_status_free(st);
    return;
  }
  FZ_ASSERT(is_ok_or_oom(st), "create_restorable(%zu): %s", n, cube_status_message(st));
  if (st) {
    cube_status_free(st);
    return;
  }
  if (s->count == MAX_HANDLES) {
    cube_handle_release(h);
    return;
  }
  buf_t* b = buf_new(n, data);
  buf_save(b);
  add_handle(s, h, b, 0, n);
}

static void op_checkpoint(fz_t* f, state_t* s) {
  int live;
  cube_handle_t h = pick_handle(f, s, &live);
  cube_status_t st = cube_client_checkpoint(g_client, h);
  if (live < 0) {
    FZ_ASSERT(st != CUBE_OK, "checkpoint of a handle that is not live succeeded");
    cube_status_free(st);
    return;
  }
  expect_ok(s, st, "checkpoint of a live handle");
  if (st == CUBE_OK) buf_save(s->live[live].b); /* else the copy before stays */
  cube_status_free(st);
}

static void op_read_restorable(fz_t* f, state_t* s) {
  int live;
  cube_handle_t h = pick_handle(f, s, &live);
  cube_bytes_t* out = (cube_bytes_t*)1;
  cube_status_t st = cube_client_read_restorable(g_client, h, &out);
  if (st) FZ_ASSERT(out == NULL, "read_restorable failed and left *out_bytes set");
  if (live < 0) {
    FZ_ASSERT(st != CUBE_OK, "read_restorable of a handle that is not live succeeded");
    cube_status_free(st);
    return;
  }
  const hmodel_t* m = &s->live[live];
  if (!m->b->saved) {
    FZ_ASSERT(cube_status_code(st) == CUBE_STATUS_FAILED_PRECONDITION,
              "read_restorable of a buffer never made restorable: %s",
              st ? cube_status_message(st) : "OK");
    cube_status_free(st);
    return;
  }
  FZ_ASSERT(st == CUBE_OK, "read_restorable: %s", cube_status_message(st));
  FZ_ASSERT(cube_bytes_size(out) == m->size, "read_restorable gave %zu bytes of a %" PRIu64
            "-byte view", cube_bytes_size(out), m->size);
  const uint8_t* got = cube_bytes_const_data(out);
  for (size_t i = 0; i < m->size; ++i) {
    size_t at = (size_t)m->off + i;
    if (!m->b->saved_known[at]) continue;
    FZ_ASSERT(got[i] == m->b->saved[at],
              "read_restorable: byte %zu of handle 0x%" PRIx64 " is %u, the copy had %u", i,
              m->h.id, got[i], m->b->saved[at]);
  }
  g_restorable_reads++;
  cube_bytes_release(out);
}

static void op_misc(fz_t* f, state_t* s) {
  uint8_t b = fz_u8(f);
  cube_status_t st;
  switch (b % 11) {
    case 0:
      st = cube_client_flush(g_client);
      s->pending = false;
      cube_status_free(st);
      break;
    case 1:
      st = cube_client_sync(g_client);
      s->pending = false;
      cube_status_free(st);
      break;
    case 2: {
      cube_memory_usage_t u;
      st = cube_client_memory_usage(g_client, &u);
      if (st == CUBE_OK)
        FZ_ASSERT(u.bytes_in_use <= u.bytes_reserved, "usage in use > reserved");
      else
        FZ_ASSERT(cube_status_code(st) == CUBE_STATUS_FAILED_PRECONDITION,
                  "memory_usage: %s", cube_status_message(st));
      cube_status_free(st);
      break;
    }
    case 3:
      cube_status_free(cube_client_memory_cleanup(g_client));
      break;
    case 4: {
      cube_allocation_mode_t mode = (b & 0x80) ? CUBE_ALLOCATION_PERSISTENT : CUBE_ALLOCATION_AUTO;
      st = cube_client_allocation_mode(g_client, mode);
      FZ_ASSERT(st == CUBE_OK, "allocation_mode: %s", cube_status_message(st));
      break;
    }
    case 5: { /* sizes and offsets of live handles */
      for (size_t i = 0; i < s->count; ++i) {
        FZ_ASSERT(cube_handle_size(s->live[i].h) == s->live[i].size, "handle size drifted");
        cube_device_id_t d;
        st = cube_handle_device(s->live[i].h, &d);
        FZ_ASSERT(st == CUBE_OK && d.backend == CUBE_BACKEND_CPU, "handle device");
      }
      for (size_t i = 0; i < s->dead_count; ++i)
        FZ_ASSERT(cube_handle_size(s->dead[i]) == 0, "a released handle has a size");
      break;
    }
    case 6: {
      cube_memory_report_t r = {0};
      st = cube_client_memory_report(g_client, &r);
      cube_status_free(st);
      break;
    }
    case 7:
      op_launch_scalar(f, s);
      break;
    case 8:
      op_create_restorable(f, s);
      break;
    case 9:
      op_checkpoint(f, s);
      break;
    default:
      op_read_restorable(f, s);
      break;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  init_once();
  fz_t f = fz_make(data, size);
  static state_t s;
  memset(&s, 0, sizeof(s));
  unsigned ops = 0;
  while (!fz_done(&f) && ops++ < 64) {
    uint8_t op = fz_u8(&f);
    switch (op % 10) {
      case 0:
      case 1:
        op_create(&f, &s);
        break;
      case 2:
        op_empty(&f, &s);
        break;
      case 3:
        op_read(&f, &s);
        break;
      case 4:
        op_release(&f, &s);
        break;
      case 5:
        op_view(&f, &s);
        break;
      case 6:
        op_launch(&f, &s);
        break;
      case 7:
        op_read_tensor(&f, &s);
        break;
      case 8:
        op_create_tensor(&f, &s);
        break;
      default:
        op_misc(&f, &s);
        break;
    }
  }
  while (s.count) release_at(&s, s.count - 1);
  cube_status_free(cube_client_sync(g_client));
  cube_status_free(cube_client_allocation_mode(g_client, CUBE_ALLOCATION_AUTO));
  return 0;
}
