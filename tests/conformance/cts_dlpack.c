/* Conformance: DLPack export and import (cube/dlpack.h). Every case needs a
 * device with a DLPack name (cube_client_dlpack_device): the null backend
 * has none, and cts_variants.c lists these cases for it. Cases that read the
 * memory through the tensor's own pointer, or make a tensor of host memory
 * themselves, run where the device's memory is host memory (DLPack CPU) and
 * skip elsewhere, saying so. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cts.h"
#include "cube/dlpack_types.h"

/* The device's DLPack name; fails the case (null: UNIMPLEMENTED) otherwise. */
static int cts_dl_device(cube_client_t* c, int32_t* type, int32_t* id) {
  cube_status_t s = cube_client_dlpack_device(c, type, id);
  if (s) {
    fprintf(stderr, "cube_client_dlpack_device: [%s] %s\n",
            cube_status_code_name(cube_status_code(s)), cube_status_message(s));
    cube_status_free(s);
    return 0;
  }
  return 1;
}

#define CTS_DL_DEVICE(c, type, id) \
  int32_t type = -1, id = -1;      \
  REQUIRE(cts_dl_device((c), &type, &id))

/* Skips (after releasing |c| and shutting down) where the device's memory is
 * not host memory. */
#define CTS_DL_REQUIRE_HOST(c, type, why)                     \
  do {                                                        \
    if ((type) != kDLCPU) {                                   \
      CTS_END(c);                                             \
      CUBE_SKIP("%s: %s", cts_backend()->name, (why));        \
    }                                                         \
  } while (0)

/* The address (or handle + offset) a tensor's element 0 is at. */
static uintptr_t cts_dl_at(const DLTensor* t) { return (uintptr_t)t->data + t->byte_offset; }

static uintptr_t cts_resource_at(cube_client_t* c, cube_handle_t h) {
  cube_resource_t* r = NULL;
  cube_status_t s = cube_client_get_resource(c, h, &r);
  if (s) {
    cube_status_free(s);
    return 0;
  }
  uintptr_t p = (uintptr_t)cube_resource_ptr(r);
  cube_resource_release(r);
  return p;
}

/* A tensor of host memory made here, with a counting deleter. */
typedef struct cts_host_tensor {
  DLManagedTensorVersioned v;
  DLManagedTensor l;
  int64_t shape[4];
  int64_t strides[4];
  void* data;
  atomic_int deleted;
  _Atomic(pthread_t*) deleted_on;
  pthread_t deleter_thread;
} cts_host_tensor_t;

static void cts_host_record(cts_host_tensor_t* h) {
  h->deleter_thread = pthread_self();
  atomic_store(&h->deleted_on, &h->deleter_thread);
  atomic_fetch_add(&h->deleted, 1);
}
static void cts_host_delete_v(DLManagedTensorVersioned* t) { cts_host_record(t->manager_ctx); }
static void cts_host_delete_l(DLManagedTensor* t) { cts_host_record(t->manager_ctx); }

/* |n| elements of |dtype| at |data| (not owned), rank 1, in both forms. */
static void cts_host_init(cts_host_tensor_t* h, void* data, int64_t n, DLDataType dtype) {
  memset(h, 0, sizeof(*h));
  h->data = data;
  h->shape[0] = n;
  h->strides[0] = 1;
  DLTensor t;
  memset(&t, 0, sizeof(t));
  t.data = data;
  t.device.device_type = kDLCPU;
  t.device.device_id = 0;
  t.ndim = 1;
  t.dtype = dtype;
  t.shape = h->shape;
  t.strides = h->strides;
  h->v.version.major = 1;
  h->v.version.minor = 0;
  h->v.manager_ctx = h;
  h->v.deleter = cts_host_delete_v;
  h->v.dl_tensor = t;
  h->l.manager_ctx = h;
  h->l.deleter = cts_host_delete_l;
  h->l.dl_tensor = t;
}

static DLDataType cts_dt(uint8_t code, uint8_t bits, uint16_t lanes) {
  DLDataType d = {code, bits, lanes};
  return d;
}

//===----------------------------------------------------------------------===//
// The device
//===----------------------------------------------------------------------===//

/* The device's DLPack name is the backend's (CPU 1 / device 0 for every CPU
 * device, CUDA 2 / ordinal, OpenCL 4 / index), and exports carry it. */
CUBE_TEST(dlpack_device_names_the_backend) {
  CTS_CLIENT(c);
  CTS_DL_DEVICE(c, type, id);
  switch (cts_backend()->backend) {
    case CUBE_BACKEND_CPU: CHECK(type == kDLCPU && id == 0); break;
    case CUBE_BACKEND_CUDA: CHECK(type == kDLCUDA && id == 0); break;
    case CUBE_BACKEND_OPENCL: CHECK(type == kDLOpenCL && id == 0); break;
    default: CHECK(!"a backend with a DLPack device this case does not know"); break;
  }
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 64, &h));
  cube_dlpack_export_t d;
  int64_t n = 16;
  REQUIRE_OK(cube_dlpack_export_initialize(h, cube_dlpack_dtype(CUBE_DLPACK_FLOAT, 32), 1, &n, &d));
  DLManagedTensorVersioned* t = NULL;
  REQUIRE_OK(cube_client_to_dlpack(c, &d, &t));
  CHECK((int32_t)t->dl_tensor.device.device_type == type);
  CHECK(t->dl_tensor.device.device_id == id);
  t->deleter(t);
  CHECK_STATUS(cube_client_dlpack_device(c, NULL, &id), CUBE_STATUS_INVALID_ARGUMENT,
               "out_device_type");
  /* As a consumer: CUDA names its stream, devices without streams 0. */
  int64_t stream = -5;
  CHECK_OK(cube_client_dlpack_stream(c, &stream));
  CHECK(type == kDLCUDA ? stream != 0 : stream == 0);
  if (stream) {
    /* A consumer on a native stream (here cube's own, the one a consumer
     * that is cube would pass): ordered by an event, no host wait. */
    uint8_t bytes[64];
    cube_test_fill_random(bytes, sizeof(bytes), 7050);
    CHECK_OK(cube_client_write(c, h, bytes, sizeof(bytes)));
    d.stream = stream;
    DLManagedTensor* lt = NULL;
    REQUIRE_OK(cube_client_to_dlpack_legacy(c, &d, &lt));
    cube_handle_t back;
    REQUIRE_OK(cube_client_from_dlpack_legacy(c, lt, 0, &back));
    CHECK(cts_read_equals(c, back, bytes, sizeof(bytes)));
    cube_handle_release(back);
  }
  cube_handle_release(h);
  CTS_END(c);
}

//===----------------------------------------------------------------------===//
// Export
//===----------------------------------------------------------------------===//

/* Random bytes at odd sizes, exported in both forms over views at odd
 * offsets: element 0 is where the handle's memory is (pointer identity),
 * shape, strides and dtype are as asked, the versioned form carries 1.0 and
 * the read-only flag; the data read through the pointer (host memory) or
 * back through a handle is the random data; the handle lives on after the
 * deleter. */
CUBE_TEST(dlpack_export_pointer_identity_and_contents) {
  CTS_CLIENT(c);
  CTS_DL_DEVICE(c, type, id);
  static const size_t sizes[] = {4, 12, 4096 + 4, 1031 * 4, (1u << 20) + 36};
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); ++k) {
    size_t n = sizes[k];
    uint8_t* data = malloc(n);
    REQUIRE(data);
    cube_test_fill_random(data, n, 7100 + k);
    cube_handle_t whole, view;
    REQUIRE_OK(cube_client_create_from_slice(c, data, n, &whole));
    uint64_t front = n > 8 ? 4 : 0;
    REQUIRE_OK(cube_handle_offset_view(whole, front, 0, &view));
    int64_t count = (int64_t)((n - front) / 4);
    cube_dlpack_export_t d;
    REQUIRE_OK(cube_dlpack_export_initialize(view, cube_dlpack_dtype(CUBE_DLPACK_UINT, 32), 1,
                                             &count, &d));
    d.flags = CUBE_DLPACK_READ_ONLY;
    DLManagedTensorVersioned* v = NULL;
    DLManagedTensor* l = NULL;
    REQUIRE_OK(cube_client_to_dlpack(c, &d, &v));
    REQUIRE_OK(cube_client_to_dlpack_legacy(c, &d, &l));
    uintptr_t at = cts_resource_at(c, view);
    CHECK(at != 0);
    CHECK(cts_dl_at(&v->dl_tensor) == at);
    CHECK(cts_dl_at(&l->dl_tensor) == at);
    CHECK(v->version.major == 1 && v->version.minor == 0);
    CHECK(v->flags == DLPACK_FLAG_BITMASK_READ_ONLY);
    CHECK(v->dl_tensor.ndim == 1 && l->dl_tensor.ndim == 1);
    CHECK(v->dl_tensor.shape[0] == count && v->dl_tensor.strides[0] == 1);
    CHECK(l->dl_tensor.shape[0] == count && l->dl_tensor.strides[0] == 1);
    CHECK(v->dl_tensor.dtype.code == kDLUInt && v->dl_tensor.dtype.bits == 32 &&
          v->dl_tensor.dtype.lanes == 1);
    if (type == kDLCPU) {
      CHECK(v->dl_tensor.byte_offset == 0);
      CHECK(memcmp(v->dl_tensor.data, data + front, (size_t)count * 4) == 0);
    }
    /* The handles go first: the exports keep the memory. */
    cube_handle_release(view);
    cube_handle_release(whole);
    cube_handle_t back;
    REQUIRE_OK(cube_client_from_dlpack_legacy(c, l, 0, &back)); /* consumes l */
    CHECK(cts_resource_at(c, back) == at);
    CHECK(cts_read_equals(c, back, data + front, (size_t)count * 4));
    v->deleter(v);
    CHECK(cts_read_equals(c, back, data + front, (size_t)count * 4));
    cube_handle_release(back);
    free(data);
  }
  CTS_END(c);
}

/* Shapes and strides beyond the flat case: a 2-D tensor, its transpose by
 * strides, and a row slice by byte offset, each checked by where element
 * (i, j) is. */
CUBE_TEST(dlpack_export_strided_views) {
  CTS_CLIENT(c);
  CTS_DL_DEVICE(c, type, id);
  enum { R = 7, C = 5 };
  float host[R * C];
  for (int i = 0; i < R * C; ++i) host[i] = (float)i * 1.5f - 3.0f;
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, host, sizeof(host), &h));
  uintptr_t base = cts_resource_at(c, h);
  int64_t shape[2] = {R, C};
  cube_dlpack_export_t d;
  REQUIRE_OK(cube_dlpack_export_initialize(h, cube_dlpack_dtype(CUBE_DLPACK_FLOAT, 32), 2, shape, &d));
  CHECK(d.strides[0] == C && d.strides[1] == 1);
  /* Transposed: shape (C, R), strides (1, C). */
  d.shape[0] = C;
  d.shape[1] = R;
  d.strides[0] = 1;
  d.strides[1] = C;
  DLManagedTensorVersioned* t = NULL;
  REQUIRE_OK(cube_client_to_dlpack(c, &d, &t));
  CHECK(cts_dl_at(&t->dl_tensor) == base);
  if (type == kDLCPU) {
    const float* p = t->dl_tensor.data;
    int bad = 0;
    for (int j = 0; j < C; ++j)
      for (int i = 0; i < R; ++i)
        bad += p[j * t->dl_tensor.strides[0] + i * t->dl_tensor.strides[1]] != host[i * C + j];
    CHECK(bad == 0);
  }
  t->deleter(t);
  /* Rows 2..4 of the row-major tensor by byte offset. */
  REQUIRE_OK(cube_dlpack_export_initialize(h, cube_dlpack_dtype(CUBE_DLPACK_FLOAT, 32), 2, shape, &d));
  d.shape[0] = 3;
  d.byte_offset = 2 * C * sizeof(float);
  REQUIRE_OK(cube_client_to_dlpack(c, &d, &t));
  CHECK(cts_dl_at(&t->dl_tensor) == base + d.byte_offset);
  if (type == kDLCPU) CHECK(((const float*)t->dl_tensor.data)[0] == host[2 * C]);
  /* A compact slice imports back as exactly its bytes. */
  cube_handle_t rows;
  REQUIRE_OK(cube_client_from_dlpack(c, t, 0, &rows));
  CHECK_EQ_U64(cube_handle_size(rows), 3 * C * sizeof(float));
  CHECK(cts_read_equals(c, rows, host + 2 * C, 3 * C * sizeof(float)));
  cube_handle_release(rows);
  cube_handle_release(h);
  CTS_END(c);
}

/* What an export refuses, each naming the call and the numbers. */
CUBE_TEST(dlpack_export_refusals) {
  CTS_CLIENT(c);
  CTS_DL_DEVICE(c, type, id);
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 400, &h));
  int64_t n = 100;
  cube_dlpack_export_t d;
  REQUIRE_OK(cube_dlpack_export_initialize(h, cube_dlpack_dtype(CUBE_DLPACK_FLOAT, 32), 1, &n, &d));
  DLManagedTensorVersioned* t = (DLManagedTensorVersioned*)(uintptr_t)1;
  cube_dlpack_export_t e = d;
  e.shape[0] = 101; /* one past the view */
  CHECK_STATUS(cube_client_to_dlpack(c, &e, &t), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_to_dlpack", "element (100)", "404", "400 bytes");
  e = d;
  e.byte_offset = 4; /* the last element sticks out */
  CHECK_STATUS(cube_client_to_dlpack(c, &e, &t), CUBE_STATUS_INVALID_ARGUMENT, "element (99)",
               "404");
  e = d;
  e.strides[0] = -1; /* from element 0 at byte 0 downwards */
  CHECK_STATUS(cube_client_to_dlpack(c, &e, &t), CUBE_STATUS_INVALID_ARGUMENT, "element (99)",
               "before element 0");
  e = d;
  e.byte_offset = 396; /* the same, flipped: fits */
  e.strides[0] = -1;
  REQUIRE_OK(cube_client_to_dlpack(c, &e, &t));
  t->deleter(t);
  t = (DLManagedTensorVersioned*)(uintptr_t)1;
  e = d;
  e.dtype.bits = 12;
  CHECK_STATUS(cube_client_to_dlpack(c, &e, &t), CUBE_STATUS_INVALID_ARGUMENT, "12 bits");
  e = d;
  e.dtype.lanes = 0;
  CHECK_STATUS(cube_client_to_dlpack(c, &e, &t), CUBE_STATUS_INVALID_ARGUMENT, "0 lanes");
  e = d;
  e.rank = CUBE_MAX_RANK + 1;
  CHECK_STATUS(cube_client_to_dlpack(c, &e, &t), CUBE_STATUS_INVALID_ARGUMENT, "rank 13");
  e = d;
  e.shape[0] = -3;
  CHECK_STATUS(cube_client_to_dlpack(c, &e, &t), CUBE_STATUS_INVALID_ARGUMENT, "shape[0] is -3");
  e = d;
  e.byte_offset = 401;
  CHECK_STATUS(cube_client_to_dlpack(c, &e, &t), CUBE_STATUS_INVALID_ARGUMENT, "byte_offset 401");
  e = d;
  e.stream = -2;
  CHECK_STATUS(cube_client_to_dlpack(c, &e, &t), CUBE_STATUS_INVALID_ARGUMENT, "stream -2");
  if (type != kDLCUDA) {
    e = d;
    e.stream = 5;
    CHECK_STATUS(cube_client_to_dlpack(c, &e, &t), CUBE_STATUS_INVALID_ARGUMENT,
                 "no native streams");
  }
  /* A newer header's struct, with a field this library cannot read set. */
  struct {
    cube_dlpack_export_t e;
    uint64_t newer;
  } bigger;
  memset(&bigger, 0, sizeof(bigger));
  bigger.e = d;
  bigger.e.struct_size = sizeof(bigger);
  bigger.newer = 1;
  CHECK_STATUS(cube_client_to_dlpack(c, &bigger.e, &t), CUBE_STATUS_UNSUPPORTED,
               "desc->struct_size");
  CHECK_STATUS(cube_client_to_dlpack(c, NULL, &t), CUBE_STATUS_INVALID_ARGUMENT, "desc is NULL");
  CHECK_STATUS(cube_client_to_dlpack(c, &d, NULL), CUBE_STATUS_INVALID_ARGUMENT, "out_tensor");
  CHECK_STATUS(cube_client_to_dlpack(NULL, &d, &t), CUBE_STATUS_INVALID_ARGUMENT, "client");
  CHECK_STATUS(cube_dlpack_export_initialize(h, d.dtype, 2, NULL, &e), CUBE_STATUS_INVALID_ARGUMENT,
               "shape is NULL");
  /* A capture records no export. */
  REQUIRE_OK(cube_client_capture_begin(c));
  CHECK_STATUS(cube_client_to_dlpack(c, &d, &t), CUBE_STATUS_FAILED_PRECONDITION,
               "cube_client_to_dlpack");
  cube_graph_t* g = NULL;
  CHECK_OK(cube_client_capture_end(c, &g));
  cube_graph_release(g);
  CHECK(t == (DLManagedTensorVersioned*)(uintptr_t)1); /* nothing written on failure */
  cube_handle_release(h);
  CHECK_STATUS(cube_client_to_dlpack(c, &d, &t), CUBE_STATUS_NOT_FOUND, "desc->handle");
  CTS_END(c);
}

/* An export keeps the buffer: the handle's release does not free it (the
 * memory stays in use), the deleter does; the memory is reused only then. */
CUBE_TEST(dlpack_export_keeps_the_buffer_until_deleted) {
  CTS_CLIENT(c);
  CTS_DL_DEVICE(c, type, id);
  enum { N = 1 << 16 };
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, N, &h));
  cube_memory_usage_t before;
  REQUIRE_OK(cube_client_memory_usage(c, &before));
  int64_t n = N;
  cube_dlpack_export_t d;
  REQUIRE_OK(cube_dlpack_export_initialize(h, cube_dlpack_dtype(CUBE_DLPACK_UINT, 8), 1, &n, &d));
  DLManagedTensor* t = NULL;
  REQUIRE_OK(cube_client_to_dlpack_legacy(c, &d, &t));
  cube_handle_release(h);
  cube_memory_usage_t held;
  REQUIRE_OK(cube_client_memory_usage(c, &held));
  CHECK_EQ_U64(held.bytes_in_use, before.bytes_in_use);
  CHECK_EQ_U64(held.number_allocs, before.number_allocs);
  t->deleter(t);
  cube_memory_usage_t after;
  REQUIRE_OK(cube_client_memory_usage(c, &after));
  CHECK(after.bytes_in_use + N <= held.bytes_in_use);
  CTS_END(c);
}

/* Several threads export one buffer and delete their tensors on other
 * threads than the one that made them; the buffer is freed once, after the
 * last. */
typedef struct cts_dl_thread {
  cube_client_t* c;
  cube_handle_t h;
  DLManagedTensorVersioned* made[64];
  int ok;
} cts_dl_thread_t;

static void* cts_dl_export_many(void* arg) {
  cts_dl_thread_t* a = arg;
  int64_t n = 256;
  cube_dlpack_export_t d;
  a->ok = 1;
  for (int i = 0; i < 64; ++i) {
    cube_status_t s = cube_dlpack_export_initialize(a->h, cube_dlpack_dtype(CUBE_DLPACK_INT, 32),
                                                    1, &n, &d);
    if (!s) s = cube_client_to_dlpack(a->c, &d, &a->made[i]);
    if (s) {
      fprintf(stderr, "export %d: %s\n", i, cube_status_message(s));
      cube_status_free(s);
      a->ok = 0;
      a->made[i] = NULL;
    }
  }
  return NULL;
}

static void* cts_dl_delete_many(void* arg) {
  cts_dl_thread_t* a = arg;
  for (int i = 0; i < 64; ++i)
    if (a->made[i]) a->made[i]->deleter(a->made[i]);
  return NULL;
}

CUBE_TEST(dlpack_export_threads) {
  CTS_CLIENT(c);
  CTS_DL_DEVICE(c, type, id);
  cube_handle_t h;
  uint32_t data[256];
  cube_test_fill_random(data, sizeof(data), 7300);
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  enum { T = 4 };
  cts_dl_thread_t a[T];
  pthread_t th[T];
  for (int i = 0; i < T; ++i) {
    memset(&a[i], 0, sizeof(a[i]));
    a[i].c = c;
    a[i].h = h;
    REQUIRE(pthread_create(&th[i], NULL, cts_dl_export_many, &a[i]) == 0);
  }
  for (int i = 0; i < T; ++i) pthread_join(th[i], NULL);
  for (int i = 0; i < T; ++i) CHECK(a[i].ok);
  uintptr_t at = cts_resource_at(c, h);
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < 64; ++j) CHECK(a[i].made[j] && cts_dl_at(&a[i].made[j]->dl_tensor) == at);
  cube_handle_release(h);
  /* Thread i deletes what thread i+1 made. */
  cts_dl_thread_t swapped[T];
  for (int i = 0; i < T; ++i) {
    swapped[i] = a[(i + 1) % T];
    REQUIRE(pthread_create(&th[i], NULL, cts_dl_delete_many, &swapped[i]) == 0);
  }
  for (int i = 0; i < T; ++i) pthread_join(th[i], NULL);
  CTS_END(c);
}

/* The export is ordered after the work queued before it: a launch writes the
 * buffer, the export (stream protocol: wait) comes right after with no sync,
 * and the memory read through the tensor's pointer has the launch's result. */
CUBE_TEST(dlpack_export_after_queued_launch) {
  CTS_CLIENT(c);
  CTS_DL_DEVICE(c, type, id);
  CTS_DL_REQUIRE_HOST(c, type, "reads the tensor through its host pointer");
  enum { N = (1 << 20) + 3 };
  uint32_t* in = malloc(N * 4);
  REQUIRE(in);
  cube_test_fill_random(in, N * 4, 7400);
  cube_handle_t hin, hout;
  REQUIRE_OK(cube_client_create_from_slice(c, in, N * 4, &hin));
  REQUIRE_OK(cts_poisoned(c, N * 4, &hout));
  CTS_KERNEL(k, "add", cts_k_add_u32, 64, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32,
             CUBE_ARG_U32);
  for (int round = 0; round < 3; ++round) {
    cube_arg_t args[] = {cube_arg_buffer(hin), cube_arg_buffer(hout), cube_arg_u32(17u + (uint32_t)round),
                         cube_arg_u32(N)};
    REQUIRE_OK(cube_client_launch(c, k, cube_count_static((N + 63) / 64, 1, 1), 4, args));
    int64_t n = N;
    cube_dlpack_export_t d;
    REQUIRE_OK(cube_dlpack_export_initialize(hout, cube_dlpack_dtype(CUBE_DLPACK_UINT, 32), 1, &n, &d));
    DLManagedTensorVersioned* t = NULL;
    REQUIRE_OK(cube_client_to_dlpack(c, &d, &t));
    const uint32_t* got = t->dl_tensor.data;
    size_t bad = 0;
    for (size_t i = 0; i < N; ++i) bad += got[i] != in[i] + 17u + (uint32_t)round;
    CHECK_EQ_U64(bad, 0);
    t->deleter(t);
  }
  CHECK_OK(cube_client_sync(c));
  cube_kernel_release(k);
  cube_handle_release(hin);
  cube_handle_release(hout);
  free(in);
  CTS_END(c);
}

/* An export outlives its handle, its client and cube_shutdown: the memory
 * stays readable through the pointer (host memory), the deleter runs on
 * another thread afterwards and frees the kept pool (ASan sees neither a
 * use after free nor a leak), and the runtime works again after. */
static void* cts_dl_delete_legacy(void* t) {
  ((DLManagedTensor*)t)->deleter(t);
  return NULL;
}

CUBE_TEST(dlpack_export_outlives_client_and_shutdown) {
  CTS_CLIENT(c);
  CTS_DL_DEVICE(c, type, id);
  enum { N = 3 << 20 };
  uint8_t* data = malloc(N);
  REQUIRE(data);
  cube_test_fill_random(data, N, 7500);
  cube_handle_t h, other;
  REQUIRE_OK(cube_client_create_from_slice(c, data, N, &h));
  REQUIRE_OK(cube_client_empty(c, 4096, &other)); /* a handle still live at shutdown */
  int64_t n = N;
  cube_dlpack_export_t d;
  REQUIRE_OK(cube_dlpack_export_initialize(h, cube_dlpack_dtype(CUBE_DLPACK_UINT, 8), 1, &n, &d));
  DLManagedTensor* t = NULL;
  REQUIRE_OK(cube_client_to_dlpack_legacy(c, &d, &t));
  cube_handle_release(h);
  cube_client_release(c);
  cube_shutdown();
  if (type == kDLCPU) CHECK(memcmp(t->dl_tensor.data, data, N) == 0);
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, cts_dl_delete_legacy, t) == 0);
  pthread_join(th, NULL);
  /* The runtime again: a new client, an export deleted before shutdown. */
  CTS_CLIENT(c2);
  REQUIRE_OK(cube_client_create_from_slice(c2, data, 64, &h));
  REQUIRE_OK(cube_dlpack_export_initialize(h, cube_dlpack_dtype(CUBE_DLPACK_UINT, 8), 1,
                                           &(int64_t){64}, &d));
  REQUIRE_OK(cube_client_to_dlpack_legacy(c2, &d, &t));
  CHECK(cts_read_equals(c2, h, data, 64));
  t->deleter(t);
  cube_handle_release(h);
  free(data);
  CTS_END(c2);
}

//===----------------------------------------------------------------------===//
// Import
//===----------------------------------------------------------------------===//

/* A tensor of this process's host memory becomes a handle on that memory:
 * the same address both ways (resource, re-export), a launch writes the
 * caller's array in place, and the producer's deleter runs once, on the
 * thread that drops the last reference, after the queued launch let go. */
typedef struct cts_release_arg {
  cube_handle_t h;
} cts_release_arg_t;

static void* cts_dl_release_handle(void* arg) {
  cube_handle_release(((cts_release_arg_t*)arg)->h);
  return NULL;
}

CUBE_TEST(dlpack_import_host_memory_zero_copy) {
  CTS_CLIENT(c);
  CTS_DL_DEVICE(c, type, id);
  CTS_DL_REQUIRE_HOST(c, type, "makes tensors of host memory");
  enum { N = 100003 };
  uint32_t* in = malloc(N * 4);
  uint32_t* out = malloc(N * 4);
  REQUIRE(in && out);
  cube_test_fill_random(in, N * 4, 7600);
  memset(out, CTS_POISON, N * 4);
  cts_host_tensor_t tin, tout;
  cts_host_init(&tin, in, N, cts_dt(kDLUInt, 32, 1));
  cts_host_init(&tout, out, N, cts_dt(kDLUInt, 32, 1));
  cube_handle_t hin, hout;
  REQUIRE_OK(cube_client_from_dlpack(c, &tin.v, 0, &hin));
  REQUIRE_OK(cube_client_from_dlpack_legacy(c, &tout.l, 0, &hout));
  CHECK(cts_resource_at(c, hin) == (uintptr_t)in);
  CHECK(cts_resource_at(c, hout) == (uintptr_t)out);
  CHECK_EQ_U64(cube_handle_size(hin), N * 4);
  CHECK(cts_read_equals(c, hin, in, N * 4));
  /* Not in any pool: memory usage does not count it. */
  cube_memory_usage_t u;
  REQUIRE_OK(cube_client_memory_usage(c, &u));
  CHECK(u.bytes_in_use < N * 4);
  CTS_KERNEL(k, "add", cts_k_add_u32, 64, 0, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32,
             CUBE_ARG_U32);
  cube_arg_t args[] = {cube_arg_buffer(hin), cube_arg_buffer(hout), cube_arg_u32(5), cube_arg_u32(N)};
  REQUIRE_OK(cube_client_launch(c, k, cube_count_static((N + 63) / 64, 1, 1), 4, args));
  /* The handles go while the launch may still be queued: its bindings keep
   * the memory, the deleters wait for them. */
  cube_handle_release(hin);
  CHECK_OK(cube_client_sync(c));
  CHECK(atomic_load(&tin.deleted) == 1);
  size_t bad = 0;
  for (size_t i = 0; i < N; ++i) bad += out[i] != in[i] + 5u;
  CHECK_EQ_U64(bad, 0);
  /* Re-exported: the same address; its deleter keeps the producer's alive. */
  int64_t n = N;
  cube_dlpack_export_t d;
  REQUIRE_OK(cube_dlpack_export_initialize(hout, cube_dlpack_dtype(CUBE_DLPACK_UINT, 32), 1, &n, &d));
  DLManagedTensorVersioned* again = NULL;
  REQUIRE_OK(cube_client_to_dlpack(c, &d, &again));
  CHECK(again->dl_tensor.data == (void*)out);
  cts_release_arg_t ra = {hout};
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, cts_dl_release_handle, &ra) == 0);
  pthread_join(th, NULL);
  CHECK(atomic_load(&tout.deleted) == 0);
  again->deleter(again);
  CHECK(atomic_load(&tout.deleted) == 1);
  CHECK(atomic_load(&tin.deleted) == 1);
  cube_kernel_release(k);
  CTS_END(c);
  CHECK(atomic_load(&tout.deleted) == 1);
  free(in);
  free(out);
}

/* The last reference dropped on another thread runs the deleter there, once;
 * a handle still live at cube_shutdown has its deleter run by the shutdown,
 * once. */
CUBE_TEST(dlpack_import_deleter_once_any_thread) {
  CTS_CLIENT(c);
  CTS_DL_DEVICE(c, type, id);
  CTS_DL_REQUIRE_HOST(c, type, "makes tensors of host memory");
  double a[333], b[17];
  cube_test_fill_random(a, sizeof(a), 7700);
  cube_test_fill_random(b, sizeof(b), 7701);
  cts_host_tensor_t ta, tb;
  cts_host_init(&ta, a, 333, cts_dt(kDLFloat, 64, 1));
  cts_host_init(&tb, b, 17, cts_dt(kDLFloat, 64, 1));
  cube_handle_t ha, hb, clone;
  REQUIRE_OK(cube_client_from_dlpack(c, &ta.v, 0, &ha));
  REQUIRE_OK(cube_client_from_dlpack(c, &tb.v, 0, &hb));
  clone = cube_handle_retain(ha);
  cube_handle_release(ha);
  CHECK(atomic_load(&ta.deleted) == 0);
  cts_release_arg_t ra = {clone};
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, cts_dl_release_handle, &ra) == 0);
  pthread_join(th, NULL);
  CHECK(atomic_load(&ta.deleted) == 1);
  CHECK(atomic_load(&ta.deleted_on) && pthread_equal(ta.deleter_thread, th));
  cube_handle_release(clone); /* released already: nothing more */
  CHECK(atomic_load(&ta.deleted) == 1);
  CHECK(cts_read_equals(c, hb, b, sizeof(b)));
  CHECK(atomic_load(&tb.deleted) == 0);
  CTS_END(c); /* hb is live: the shutdown drops it */
  CHECK(atomic_load(&tb.deleted) == 1);
}

/* Layouts: column-major and other permutations of a compact layout import
 * as their bytes; gaps, overlaps and flips are refused, naming the strides;
 * dimensions of one element may have any stride. */
CUBE_TEST(dlpack_import_layouts) {
  CTS_CLIENT(c);
  CTS_DL_DEVICE(c, type, id);
  CTS_DL_REQUIRE_HOST(c, type, "makes tensors of host memory");
  float m[6 * 4 * 2];
  cube_test_fill_random(m, sizeof(m), 7800);
  cts_host_tensor_t t;
  cts_host_init(&t, m, 0, cts_dt(kDLFloat, 32, 1));
  t.v.dl_tensor.ndim = 3;
  int64_t* s = t.shape;
  int64_t* st = t.strides;
  struct {
    int64_t shape[3], strides[3];
    int ok;
    const char* why;
  } cases[] = {
      {{6, 4, 2}, {8, 2, 1}, 1, NULL},                  /* row-major */
      {{6, 4, 2}, {1, 6, 24}, 1, NULL},                 /* column-major */
      {{4, 6, 2}, {2, 8, 1}, 1, NULL},                  /* a transpose of the first two */
      {{6, 1, 8}, {8, 99, 1}, 1, NULL},                 /* a unit dimension's stride is free */
      {{6, 4, 2}, {16, 4, 2}, 0, "gaps between elements"},
      {{6, 4, 2}, {8, 2, 0}, 0, "overlap"},
      {{6, 4, 2}, {8, 2, -1}, 0, "negative stride"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    memcpy(s, cases[i].shape, sizeof(cases[i].shape));
    memcpy(st, cases[i].strides, sizeof(cases[i].strides));
    cube_handle_t h = CUBE_HANDLE_NULL;
    if (cases[i].ok) {
      CHECK_OK(cube_client_from_dlpack(c, &t.v, 0, &h));
      CHECK_EQ_U64(cube_handle_size(h), sizeof(m));
      CHECK(cts_resource_at(c, h) == (uintptr_t)m);
      cube_handle_release(h);
      CHECK(atomic_load(&t.deleted) == 1);
      atomic_store(&t.deleted, 0);
    } else {
      CHECK_STATUS(cube_client_from_dlpack(c, &t.v, 0, &h), CUBE_STATUS_UNSUPPORTED,
                   "cube_client_from_dlpack", "strides", cases[i].why, "contiguous");
      CHECK(atomic_load(&t.deleted) == 0); /* not consumed */
    }
  }
  /* strides NULL (compact row-major, as DLPack before 1.0 allowed). */
  t.l.dl_tensor.ndim = 2;
  t.l.dl_tensor.strides = NULL;
  s[0] = 12;
  s[1] = 4;
  cube_handle_t h;
  REQUIRE_OK(cube_client_from_dlpack_legacy(c, &t.l, 0, &h));
  CHECK_EQ_U64(cube_handle_size(h), sizeof(m));
  cube_handle_release(h);
  CHECK(atomic_load(&t.deleted) == 1);
  /* 2^63 bytes laid out densely: the running product of the dimensions
   * (2^31, then 2^63) fits the element count's 64 bits but not int64_t's, which
   * the check once multiplied in (fuzz_dlpack; UBSan saw it). cube cannot
   * know the memory is smaller than the tensor says: the handle says 2^63. */
  atomic_store(&t.deleted, 0);
  cts_host_init(&t, m, 0, cts_dt(kDLUInt, 8, 1));
  t.v.dl_tensor.ndim = 2;
  s[0] = INT64_C(1) << 31;
  s[1] = INT64_C(1) << 32;
  st[0] = 1;
  st[1] = INT64_C(1) << 31;
  REQUIRE_OK(cube_client_from_dlpack(c, &t.v, 0, &h));
  CHECK_EQ_U64(cube_handle_size(h), UINT64_C(1) << 63);
  cube_handle_release(h);
  CHECK(atomic_load(&t.deleted) == 1);
  CTS_END(c);
}

/* What an import refuses: each names why, and the tensor stays the
 * caller's (its deleter is not called). */
CUBE_TEST(dlpack_import_refusals) {
  CTS_CLIENT(c);
  CTS_DL_DEVICE(c, type, id);
  uint64_t buf[64] = {0};
  cts_host_tensor_t t;
  cube_handle_t h = CUBE_HANDLE_NULL;
  /* Another device. */
  cts_host_init(&t, buf, 8, cts_dt(kDLFloat, 32, 1));
  t.v.dl_tensor.device.device_type = type == kDLCPU ? kDLCUDA : kDLCPU;
  CHECK_STATUS(cube_client_from_dlpack(c, &t.v, 0, &h), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_from_dlpack", "device type");
  if (type == kDLCPU) {
    t.v.dl_tensor.device.device_type = kDLCPU;
    t.v.dl_tensor.device.device_id = 3;
    CHECK_STATUS(cube_client_from_dlpack(c, &t.v, 0, &h), CUBE_STATUS_INVALID_ARGUMENT,
                 "device id 0, not 3");
  }
  /* Element types. */
  struct {
    DLDataType dt;
    const char* words;
  } dts[] = {
      {{kDLFloat, 32, 4}, "4 lanes"},       {{kDLInt, 4, 1}, "4 bits"},
      {{kDLOpaqueHandle, 64, 1}, "opaque"}, {{7, 8, 1}, "code 7"},
      {{kDLUInt, 0, 1}, "0 bits"},
  };
  for (size_t i = 0; i < sizeof(dts) / sizeof(dts[0]); ++i) {
    cts_host_init(&t, buf, 8, dts[i].dt);
    CHECK_STATUS(cube_client_from_dlpack(c, &t.v, 0, &h), CUBE_STATUS_UNSUPPORTED, "dtype",
                 dts[i].words);
  }
  /* No elements, too many dimensions, NULL data, misaligned, a version 2. */
  cts_host_init(&t, buf, 0, cts_dt(kDLFloat, 32, 1));
  CHECK_STATUS(cube_client_from_dlpack(c, &t.v, 0, &h), CUBE_STATUS_UNSUPPORTED, "no elements");
  cts_host_init(&t, buf, 8, cts_dt(kDLFloat, 32, 1));
  t.v.dl_tensor.ndim = 13;
  CHECK_STATUS(cube_client_from_dlpack(c, &t.v, 0, &h), CUBE_STATUS_UNSUPPORTED, "ndim 13");
  cts_host_init(&t, NULL, 8, cts_dt(kDLFloat, 32, 1));
  CHECK_STATUS(cube_client_from_dlpack(c, &t.v, 0, &h), CUBE_STATUS_INVALID_ARGUMENT,
               "data is NULL");
  if (type == kDLCPU) {
    cts_host_init(&t, buf, 8, cts_dt(kDLFloat, 64, 1));
    t.v.dl_tensor.byte_offset = 4;
    CHECK_STATUS(cube_client_from_dlpack(c, &t.v, 0, &h), CUBE_STATUS_INVALID_ARGUMENT,
                 "not aligned to 8 bytes");
  }
  cts_host_init(&t, buf, 8, cts_dt(kDLFloat, 32, 1));
  t.v.version.major = 2;
  CHECK_STATUS(cube_client_from_dlpack(c, &t.v, 0, &h), CUBE_STATUS_UNSUPPORTED, "DLPack 2.0");
  /* Read-only: refused unless the caller says it will not write. */
  cts_host_init(&t, buf, 8, cts_dt(kDLFloat, 32, 1));
  t.v.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  CHECK_STATUS(cube_client_from_dlpack(c, &t.v, 0, &h), CUBE_STATUS_FAILED_PRECONDITION,
               "read-only", "CUBE_DLPACK_READ_ONLY");
  CHECK(atomic_load(&t.deleted) == 0);
  CHECK_STATUS(cube_client_from_dlpack(c, NULL, 0, &h), CUBE_STATUS_INVALID_ARGUMENT,
               "tensor is NULL");
  CHECK_STATUS(cube_client_from_dlpack(c, &t.v, 0, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "out_handle");
  CHECK(cube_handle_is_null(h));
  if (type == kDLCPU) {
    CHECK_OK(cube_client_from_dlpack(c, &t.v, CUBE_DLPACK_READ_ONLY, &h));
    CHECK(cts_read_equals(c, h, buf, 32));
    cube_handle_release(h);
    CHECK(atomic_load(&t.deleted) == 1);
  }
  CTS_END(c);
}

/* A tensor cube exported comes back as a handle on the same buffer (on every
 * backend, OpenCL's cl_mem included): writes through one are read through
 * the other, and the export's deleter ran at the import. */
CUBE_TEST(dlpack_import_own_export) {
  CTS_CLIENT(c);
  CTS_DL_DEVICE(c, type, id);
  enum { N = 5000 };
  uint8_t a[N], b[N];
  cube_test_fill_random(a, N, 7900);
  cube_test_fill_random(b, N, 7901);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, a, N, &h));
  int64_t n = N - 3;
  cube_dlpack_export_t d;
  REQUIRE_OK(cube_dlpack_export_initialize(h, cube_dlpack_dtype(CUBE_DLPACK_UINT, 8), 1, &n, &d));
  d.byte_offset = 3;
  DLManagedTensorVersioned* t = NULL;
  REQUIRE_OK(cube_client_to_dlpack(c, &d, &t));
  cube_handle_t back;
  REQUIRE_OK(cube_client_from_dlpack(c, t, 0, &back));
  CHECK_EQ_U64(cube_handle_size(back), N - 3);
  CHECK(cts_resource_at(c, back) == cts_resource_at(c, h) + 3);
  CHECK_OK(cube_client_write(c, back, b, N - 3));
  uint8_t want[N];
  memcpy(want, a, 3);
  memcpy(want + 3, b, N - 3);
  CHECK(cts_read_equals(c, h, want, N));
  cube_handle_release(h);
  CHECK(cts_read_equals(c, back, b, N - 3));
  cube_handle_release(back);
  CTS_END(c);
}

/* A tensor cube exported whose consumer moved element 0 (its byte_offset)
 * or grew its shape before handing it back: the handle views what the tensor
 * says now, inside the exported handle's view only (fuzz_dlpack found the
 * import keeping the export's element 0, whatever the tensor said, and
 * letting the shape reach past the view into the buffer's padding). */
CUBE_TEST(dlpack_import_own_export_moved) {
  CTS_CLIENT(c);
  CTS_DL_DEVICE(c, type, id);
  enum { N = 100 };
  uint8_t a[N];
  cube_test_fill_random(a, N, 7950);
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, a, N, &h));
  int64_t n = 90;
  cube_dlpack_export_t d;
  REQUIRE_OK(cube_dlpack_export_initialize(h, cube_dlpack_dtype(CUBE_DLPACK_UINT, 8), 1, &n, &d));
  d.byte_offset = 4;
  /* Moved 6 bytes on (the same on every backend: data + byte_offset on the
   * CPU and CUDA, the offset in the cl_mem on OpenCL), 80 elements. */
  DLManagedTensorVersioned* t = NULL;
  REQUIRE_OK(cube_client_to_dlpack(c, &d, &t));
  t->dl_tensor.byte_offset += 6;
  t->dl_tensor.shape[0] = 80;
  cube_handle_t back = CUBE_HANDLE_NULL;
  REQUIRE_OK(cube_client_from_dlpack(c, t, 0, &back));
  CHECK_EQ_U64(cube_handle_size(back), 80);
  CHECK(cts_read_equals(c, back, a + 10, 80));
  cube_handle_release(back);
  back = CUBE_HANDLE_NULL;
  /* Grown past the handle's view (4 + 6 + 91 > 100): refused, not consumed. */
  REQUIRE_OK(cube_client_to_dlpack(c, &d, &t));
  t->dl_tensor.byte_offset += 6;
  t->dl_tensor.shape[0] = 91;
  CHECK_STATUS(cube_client_from_dlpack(c, t, 0, &back), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_from_dlpack", "91 bytes from byte 10", "do not fit its 100 bytes");
  /* Moved before the view's start. */
  t->dl_tensor.shape[0] = 4;
  t->dl_tensor.byte_offset -= 11;
  CHECK_STATUS(cube_client_from_dlpack(c, t, 0, &back), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_from_dlpack", "element 0", "not inside the handle's view");
  CHECK(cube_handle_is_null(back));
  t->deleter(t);
  /* As exported, it still comes back where it was. */
  REQUIRE_OK(cube_client_to_dlpack(c, &d, &t));
  REQUIRE_OK(cube_client_from_dlpack(c, t, 0, &back));
  CHECK_EQ_U64(cube_handle_size(back), 90);
  CHECK(cts_read_equals(c, back, a + 4, 90));
  cube_handle_release(back);
  cube_handle_release(h);
  CTS_END(c);
}

/* The capsule destructor for bindings: deletes the tensor of a capsule still
 * named "dltensor"/"dltensor_versioned", once, and leaves a renamed one
 * alone (the layout: a header of the size set, then pointer and name). */
CUBE_TEST(dlpack_capsule_destructor) {
  CTS_CLIENT(c);
  CTS_DL_DEVICE(c, type, id);
  cube_handle_t h;
  REQUIRE_OK(cube_client_empty(c, 1 << 16, &h));
  cube_memory_usage_t before, after;
  REQUIRE_OK(cube_client_memory_usage(c, &before));
  int64_t n = 1 << 16;
  cube_dlpack_export_t d;
  REQUIRE_OK(cube_dlpack_export_initialize(h, cube_dlpack_dtype(CUBE_DLPACK_UINT, 8), 1, &n, &d));
  DLManagedTensorVersioned* v = NULL;
  DLManagedTensor* l = NULL;
  REQUIRE_OK(cube_client_to_dlpack(c, &d, &v));
  REQUIRE_OK(cube_client_to_dlpack_legacy(c, &d, &l));
  cube_handle_release(h);
  struct {
    uint64_t header[3]; /* a header of 24 bytes */
    void* pointer;
    const char* name;
  } cap_v = {{0, 0, 0}, v, "dltensor_versioned"}, cap_l = {{0, 0, 0}, l, "used_dltensor"};
  cube_dlpack_capsule_layout(24);
  cube_dlpack_capsule_destructor(&cap_v); /* deletes v */
  cube_dlpack_capsule_destructor(&cap_l); /* consumed: leaves l */
  cube_dlpack_capsule_destructor(NULL);
  REQUIRE_OK(cube_client_memory_usage(c, &after));
  CHECK_EQ_U64(after.bytes_in_use, before.bytes_in_use); /* l still holds the buffer */
  cap_l.name = "dltensor";
  cube_dlpack_capsule_destructor(&cap_l);
  REQUIRE_OK(cube_client_memory_usage(c, &after));
  CHECK(after.bytes_in_use + (1 << 16) <= before.bytes_in_use);
  cube_dlpack_capsule_layout(16);
  CTS_END(c);
}
