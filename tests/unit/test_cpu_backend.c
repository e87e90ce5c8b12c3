// cube-test-libs: cube_static
/* The CPU backend table (devices, storage, copies, native launches), the
 * null backend and the registry, driven through the vtables directly. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "base/options.h"
#include "backends/backend.h"
#include "check.h"
#include "cube/backends/cpu.h"
#include "cube/cube.h"
#include "kernel/kernel.h"
#include "platform/platform.h"

static const cube__backend_vtable_t* const cpu = &cube__backend_cpu;

static cube__backend_device_t* open_device(uint32_t index, cube_device_properties_t* props) {
  cube__backend_device_t* dev = NULL;
  cube_device_properties_t p;
  cube_features_t f;
  cube_backend_info_t info;
  cube_status_t s = cpu->device_create(index, NULL, &dev, props ? props : &p, &f, &info);
  if (s != CUBE_OK) {
    fprintf(stderr, "device_create(%u): %s\n", index, cube_status_message(s));
    cube_status_free(s);
    return NULL;
  }
  return dev;
}

/* A kernel object as cube_kernel_create would make it. */
static cube_kernel_t make_kernel(const char* name, cube_cpu_kernel_fn fn, uint32_t dim_x,
                                 uint64_t shared) {
  cube_kernel_t k;
  memset(&k, 0, sizeof(k));
  atomic_init(&k.refs, 1);
  k.id = 1;
  k.name = (char*)name;
  k.cube_dim = (cube_dim_t){dim_x, 1, 1};
  k.shared_memory_size = shared;
  k.cpu_fn = fn;
  return k;
}

/* A launch record with its arguments as the server builds them: each buffer
 * (args[i].buffer, a host address and a length) becomes a storage of its
 * own. |kinds| has one letter per argument: 'b' a buffer, 's' a scalar. */
typedef struct launch_rec {
  cube__launch_t l;
  cube__storage_t storage[4];
  cube__launch_arg_t args[4];
  cube_arg_kind_t kinds[4];
} launch_rec_t;

static cube__launch_t* make_launch(launch_rec_t* r, const cube_kernel_t* k, uint32_t cx,
                                   uint32_t cy, uint32_t cz, cube_dim_t dim,
                                   const cube_cpu_arg_t* args, const char* kinds) {
  memset(r, 0, sizeof(*r));
  uint32_t argc = kinds ? (uint32_t)strlen(kinds) : 0;
  for (uint32_t i = 0; i < argc && i < 4; ++i) {
    if (kinds[i] == 'b') {
      r->kinds[i] = CUBE_ARG_BUFFER;
      r->storage[i] = (cube__storage_t){i + 1, args[i].buffer.data, args[i].buffer.len, NULL};
      r->args[i].buffer.storage = &r->storage[i];
      r->args[i].buffer.offset = 0;
      r->args[i].buffer.len = args[i].buffer.len;
    } else {
      r->kinds[i] = CUBE_ARG_U64;
      r->args[i].u64 = args[i].u64;
    }
  }
  cube__launch_t* l = &r->l;
  l->kernel = k;
  l->name = k->name;
  l->count[0] = cx;
  l->count[1] = cy;
  l->count[2] = cz;
  l->dim = dim;
  l->mode = CUBE_EXEC_CHECKED;
  l->arg_count = argc;
  l->kinds = r->kinds;
  l->args = r->args;
  return l;
}

//===----------------------------------------------------------------------===//
// Devices and properties
//===----------------------------------------------------------------------===//

CUBE_TEST(properties_sanity) {
  unsetenv("CUBE_CPU_DEVICES");
  setenv("CUBE_CPU_THREADS", "3", 1);
  CHECK_OK(cpu->availability());
  CHECK_EQ_U64(cpu->device_count(), 1);
  CHECK(cpu->backend == CUBE_BACKEND_CPU);
  CHECK(strcmp(cpu->name, "cpu") == 0);
  CHECK(cpu->caps & CUBE__CAP_HOST_MEMORY);
  CHECK(cpu->caps & CUBE__CAP_NATIVE_KERNELS);
  CHECK_OK(cube__backend_validate(cpu));

  cube__backend_device_t* dev = NULL;
  cube_device_properties_t p;
  cube_features_t f;
  cube_backend_info_t info;
  REQUIRE_OK(cpu->device_create(0, NULL, &dev, &p, &f, &info));
  printf("name: %s\nversion: %s\n", p.name, info.version);
  CHECK(strncmp(p.name, "cpu:0 (", 7) == 0 && p.name[strlen(p.name) - 1] == ')');
  CHECK(p.id.backend == CUBE_BACKEND_CPU && p.id.index == 0);
  CHECK(p.memory.total_memory == cube__total_memory() && p.memory.total_memory > 0);
  CHECK_EQ_U64(p.memory.alignment, 64);
  CHECK_EQ_U64(p.memory.max_page_size, p.memory.total_memory / 4 / 64 * 64);
  CHECK_EQ_U64(p.hardware.load_width, 512);
  CHECK(p.hardware.plane_size_min == 1 && p.hardware.plane_size_max == 1);
  CHECK_EQ_U64(p.hardware.max_bindings, 1024);
  CHECK_EQ_U64(p.hardware.max_shared_memory_size, 1u << 20);
  for (int i = 0; i < 3; ++i) CHECK_EQ_U64(p.hardware.max_cube_count[i], UINT32_MAX);
  CHECK_EQ_U64(p.hardware.max_units_per_cube, 1024);
  CHECK(p.hardware.max_cube_dim[0] == 1024 && p.hardware.max_cube_dim[1] == 1024 &&
        p.hardware.max_cube_dim[2] == 64);
  CHECK_EQ_U64(p.hardware.num_cpu_cores, 3);
  CHECK_EQ_U64(p.hardware.max_vector_size, 16);
  CHECK(p.timing_method == CUBE_TIMING_DEVICE);
  CHECK(p.layout_policy == CUBE_LAYOUT_POLICY_CONTIGUOUS);
  const uint64_t want = CUBE_FEATURE_NATIVE_KERNELS | CUBE_FEATURE_DYNAMIC_COUNT |
                        CUBE_FEATURE_F64 | CUBE_FEATURE_I64 | CUBE_FEATURE_ATOMIC_U32 |
                        CUBE_FEATURE_ATOMIC_F32_ADD | CUBE_FEATURE_SHARED_MEMORY |
                        CUBE_FEATURE_PINNED_STAGING | CUBE_FEATURE_COLLECTIVES;
  CHECK_EQ_U64(f.bits, want);
  CHECK(info.backend == CUBE_BACKEND_CPU);
  CHECK(strcmp(info.name, "cpu") == 0);
  CHECK(strcmp(info.version, "cube " CUBE_VERSION_STRING " cpu, 3 threads") == 0);
  CHECK_EQ_U64(info.device_count, 1);

  void* stream = (void*)1;
  CHECK_OK(cpu->stream_create(dev, 7, &stream));
  CHECK(stream == NULL);
  CHECK_OK(cpu->sync(dev, stream));
  cpu->stream_destroy(dev, stream);

  cube__backend_device_t* other = NULL;
  CHECK_STATUS(cpu->device_create(1, NULL, &other, &p, &f, &info), CUBE_STATUS_NOT_FOUND,
               "cpu:1");
  CHECK(other == NULL);
  cpu->device_destroy(dev);
}

CUBE_TEST(three_devices_from_env) {
  setenv("CUBE_CPU_DEVICES", "3", 1);
  CHECK_OK(cpu->availability());
  CHECK_EQ_U64(cpu->device_count(), 3);
  cube__backend_device_t* devs[3] = {NULL};
  for (uint32_t i = 0; i < 3; ++i) {
    cube_device_properties_t p;
    cube_features_t f;
    cube_backend_info_t info;
    REQUIRE_OK(cpu->device_create(i, NULL, &devs[i], &p, &f, &info));
    char prefix[16];
    snprintf(prefix, sizeof(prefix), "cpu:%u (", i);
    CHECK(strncmp(p.name, prefix, strlen(prefix)) == 0);
    CHECK(p.id.backend == CUBE_BACKEND_CPU && p.id.index == i);
    CHECK_EQ_U64(info.device_count, 3);
  }
  cube__backend_device_t* extra = NULL;
  cube_device_properties_t p;
  cube_features_t f;
  cube_backend_info_t info;
  CHECK_STATUS(cpu->device_create(3, NULL, &extra, &p, &f, &info), CUBE_STATUS_NOT_FOUND, "3");
  for (int i = 0; i < 3; ++i) cpu->device_destroy(devs[i]);
}

CUBE_TEST(invalid_device_count_reported) {
  static const char* const bad[] = {"0", "65", "abc", "-1", "3x", "99999999999999999999"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    setenv("CUBE_CPU_DEVICES", bad[i], 1);
    cube_shutdown(); /* the environment is read again after it */
    char quoted[64];
    snprintf(quoted, sizeof(quoted), "'%s'", bad[i]);
    /* The entry points report a malformed option (tests/unit/test_options.c);
     * here the backend is available, counts it as unset (a count returns
     * no status) and refuses to create a device with it. */
    CHECK_OK(cpu->availability());
    CHECK_EQ_U64(cpu->device_count(), 1);
    cube__backend_device_t* dev = NULL;
    cube_device_properties_t p;
    cube_features_t f;
    cube_backend_info_t info;
    CHECK_STATUS(cpu->device_create(0, NULL, &dev, &p, &f, &info), CUBE_STATUS_INVALID_ARGUMENT,
                 "CUBE_CPU_DEVICES", quoted, "an integer in [1, 64]");
  }
  setenv("CUBE_CPU_DEVICES", "64", 1);
  cube_shutdown();
  CHECK_OK(cpu->availability());
  CHECK_EQ_U64(cpu->device_count(), 64);
}

//===----------------------------------------------------------------------===//
// Storage and copies
//===----------------------------------------------------------------------===//

static int all_zero(const uint8_t* p, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i)
    if (p[i]) return 0;
  return 1;
}

CUBE_TEST(alloc_zeroed_aligned_small_and_large) {
  cube__backend_device_t* dev = open_device(0, NULL);
  REQUIRE(dev);
  static const uint64_t sizes[] = {0,      1,          63,         64,          100,
                                   4096,   262143,     262144,     262145,      (64u << 20) + 3};
  enum { N = sizeof(sizes) / sizeof(sizes[0]) };
  for (int pass = 0; pass < 2; ++pass) { /* device storage, then host staging */
    cube__storage_t st[N];
    for (int i = 0; i < N; ++i) {
      cube_status_t s = pass == 0 ? cpu->alloc(dev, sizes[i], &st[i])
                                  : cpu->host_alloc(dev, sizes[i], &st[i]);
      REQUIRE_OK(s);
      CHECK(st[i].ptr != NULL);
      CHECK(((uintptr_t)st[i].ptr & 63) == 0);
      CHECK_EQ_U64(st[i].size, sizes[i]);
      CHECK(all_zero(st[i].ptr, sizes[i]));
      memset(st[i].ptr, 0xA5, (size_t)sizes[i]); /* really writable */
      for (int j = 0; j < i; ++j) CHECK(st[i].id != st[j].id);
    }
    /* Small and large come from different places, and say so. */
    CHECK(st[1].backend_data != st[N - 1].backend_data);
    for (int i = 0; i < N; ++i) {
      if (pass == 0)
        cpu->dealloc(dev, &st[i]);
      else
        cpu->host_dealloc(dev, &st[i]);
    }
  }
  /* Memory handed back and taken again is zero again. */
  for (int round = 0; round < 3; ++round) {
    cube__storage_t a, b;
    REQUIRE_OK(cpu->alloc(dev, 1000, &a));
    REQUIRE_OK(cpu->alloc(dev, 1u << 20, &b));
    CHECK(all_zero(a.ptr, 1000) && all_zero(b.ptr, 1u << 20));
    memset(a.ptr, 1, 1000);
    memset(b.ptr, 1, 1u << 20);
    cpu->dealloc(dev, &a);
    cpu->dealloc(dev, &b);
  }
  cube__storage_t huge;
  CHECK_STATUS(cpu->alloc(dev, 1ull << 60, &huge), CUBE_STATUS_OUT_OF_MEMORY,
               "1152921504606846976");
  CHECK_STATUS(cpu->alloc(dev, UINT64_MAX, &huge), CUBE_STATUS_OUT_OF_MEMORY,
               "18446744073709551615");
  cpu->device_destroy(dev);
}

/* 1 when the mapping that holds |p| carries the MADV_HUGEPAGE flag ("hg" in
 * VmFlags of /proc/self/smaps), 0 when not, -1 when it cannot be told. */
static int mapping_advised_huge(const void* p) {
  FILE* f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[512];
  int in = 0, result = -1;
  while (fgets(line, sizeof(line), f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
      continue;
    }
    if (in && strncmp(line, "VmFlags:", 8) == 0) {
      result = strstr(line, " hg") != NULL;
      break;
    }
  }
  fclose(f);
  return result;
}

/* Buffers of 4 MiB and more are advised to use transparent huge pages and
 * start on a 2 MiB boundary (CUBE_CPU_HUGE_PAGES, default 1), smaller ones
 * are not, and 0 turns the advice off; the memory is zero and writable
 * either way. */
CUBE_TEST(large_buffers_advised_huge_pages) {
  FILE* thp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (!thp) CUBE_SKIP("this kernel has no transparent huge pages");
  fclose(thp);
  cube__backend_device_t* dev = open_device(0, NULL);
  REQUIRE(dev);
  static const struct {
    const char* env; /* CUBE_CPU_HUGE_PAGES, NULL: unset */
    uint64_t size;
    int want;
  } cases[] = {{NULL, 8u << 20, 1},      {NULL, (4u << 20) + 4096, 1}, {NULL, 1u << 20, 0},
               {"1", 6u << 20, 1},       {"0", 8u << 20, 0},           {"off", 16u << 20, 0}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); ++i) {
    if (cases[i].env)
      setenv("CUBE_CPU_HUGE_PAGES", cases[i].env, 1);
    else
      unsetenv("CUBE_CPU_HUGE_PAGES");
    cube__options_reset(); /* the table is read again (as after cube_shutdown) */
    for (int pass = 0; pass < 2; ++pass) { /* device storage, then host staging */
      cube__storage_t st;
      REQUIRE_OK(pass == 0 ? cpu->alloc(dev, cases[i].size, &st)
                           : cpu->host_alloc(dev, cases[i].size, &st));
      int got = mapping_advised_huge(st.ptr);
      if (got != cases[i].want)
        fprintf(stderr, "CUBE_CPU_HUGE_PAGES=%s, %llu bytes (%s): advised %d, expected %d\n",
                cases[i].env ? cases[i].env : "(unset)", (unsigned long long)cases[i].size,
                pass ? "host" : "device", got, cases[i].want);
      CHECK(got == cases[i].want);
      /* Advised buffers start on a 2 MiB boundary: every 2 MiB can be one huge page. */
      if (cases[i].want) CHECK(((uintptr_t)st.ptr & ((2u << 20) - 1)) == 0);
      CHECK(all_zero(st.ptr, cases[i].size));
      memset(st.ptr, 0x5A, (size_t)cases[i].size);
      if (pass == 0)
        cpu->dealloc(dev, &st);
      else
        cpu->host_dealloc(dev, &st);
    }
  }
  unsetenv("CUBE_CPU_HUGE_PAGES");
  cube__options_reset();
  cpu->device_destroy(dev);
}

/* Large contiguous writes, reads and copies are shared by the workers in
 * pieces (cpu_backend.c, cube__cpu_memcpy): odd sizes and offsets, so that
 * pieces end mid-byte-run and the last one is short; nothing outside the
 * range is touched. */
CUBE_TEST(large_copies_are_exact) {
  cube__backend_device_t* dev = open_device(0, NULL);
  REQUIRE(dev);
  const uint64_t cap = (9u << 20) + 4096;
  cube__storage_t a, b;
  REQUIRE_OK(cpu->alloc(dev, cap, &a));
  REQUIRE_OK(cpu->alloc(dev, cap, &b));
  uint64_t seed = 777;
  static const struct {
    uint64_t offset, bytes;
  } cases[] = {{0, 2u << 20},       {1, (2u << 20) + 1},       {4093, (5u << 20) + 123},
               {64, (8u << 20) + 7}, {333, (256u << 10) * 9 - 1}, {0, (9u << 20) + 4096}};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    const uint64_t off = cases[c].offset, n = cases[c].bytes;
    REQUIRE(off + n <= cap);
    uint8_t* src = malloc(n);
    uint8_t* back = malloc(n);
    REQUIRE(src && back);
    cube_test_fill_random(src, n, cube_test_rand(&seed));
    memset(a.ptr, 0x11, cap);
    memset(b.ptr, 0x22, cap);
    CHECK_OK(cpu->write(dev, NULL, &a, off, 0, src, n, 1));
    CHECK(memcmp((uint8_t*)a.ptr + off, src, n) == 0);
    uint64_t stray = 0;
    for (uint64_t i = 0; i < off; ++i) stray += ((uint8_t*)a.ptr)[i] != 0x11;
    for (uint64_t i = off + n; i < cap; ++i) stray += ((uint8_t*)a.ptr)[i] != 0x11;
    CHECK_EQ_U64(stray, 0);
    /* A copy to another offset of another storage, then a read of it. */
    uint64_t to = cap - n - off;
    CHECK_OK(cpu->copy(dev, NULL, &b, to, &a, off, n));
    memset(back, 0, n);
    CHECK_OK(cpu->read(dev, NULL, back, &b, to, 0, n, 1));
    CHECK(memcmp(back, src, n) == 0);
    stray = 0;
    for (uint64_t i = 0; i < to; ++i) stray += ((uint8_t*)b.ptr)[i] != 0x22;
    for (uint64_t i = to + n; i < cap; ++i) stray += ((uint8_t*)b.ptr)[i] != 0x22;
    CHECK_EQ_U64(stray, 0);
    free(src);
    free(back);
  }
  cpu->dealloc(dev, &a);
  cpu->dealloc(dev, &b);
  cpu->device_destroy(dev);
}

CUBE_TEST(write_read_round_trip_with_pitch) {
  cube__backend_device_t* dev = open_device(0, NULL);
  REQUIRE(dev);
  cube__storage_t st;
  REQUIRE_OK(cpu->alloc(dev, 1u << 20, &st));
  uint64_t seed = 12345;
  static const struct {
    uint64_t offset, pitch, width, height;
  } cases[] = {
      {0, 0, 1, 1},     {5, 0, 1001, 1},    {3, 64, 37, 13},     {17, 129, 129, 7},
      {0, 333, 1, 100}, {64, 4099, 4097, 9}, {100, 1000, 999, 1},
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    const uint64_t off = cases[c].offset, pitch = cases[c].pitch, w = cases[c].width,
                   h = cases[c].height;
    memset(st.ptr, 0, st.size);
    uint8_t* src = malloc(w * h);
    uint8_t* dst = malloc(w * h);
    REQUIRE(src && dst);
    cube_test_fill_random(src, w * h, cube_test_rand(&seed));
    memset(dst, 0, w * h);
    CHECK_OK(cpu->write(dev, NULL, &st, off, pitch, src, w, h));
    CHECK_OK(cpu->read(dev, NULL, dst, &st, off, pitch, w, h));
    CHECK(memcmp(src, dst, w * h) == 0);
    /* On the device the rows sit |pitch| apart and the gaps stay zero. */
    const uint8_t* d = st.ptr;
    const uint64_t step = h > 1 ? pitch : w;
    for (uint64_t r = 0; r < h; ++r) CHECK(memcmp(d + off + r * step, src + r * w, w) == 0);
    uint64_t stray = 0;
    for (uint64_t i = 0; i < st.size; ++i) {
      bool inside = i >= off && (i - off) % step < w && (i - off) / step < h;
      if (!inside && d[i]) ++stray;
    }
    CHECK_EQ_U64(stray, 0);
    free(src);
    free(dst);
  }
  uint8_t buf[64] = {0};
  CHECK_STATUS(cpu->write(dev, NULL, &st, st.size - 10, 0, buf, 11, 1), CUBE_STATUS_OUT_OF_RANGE,
               "write");
  CHECK_STATUS(cpu->read(dev, NULL, buf, &st, 0, 1u << 19, 8, 3), CUBE_STATUS_OUT_OF_RANGE,
               "read");
  CHECK_STATUS(cpu->write(dev, NULL, &st, 0, 4, buf, 8, 2), CUBE_STATUS_INVALID_ARGUMENT,
               "pitch");
  CHECK_OK(cpu->write(dev, NULL, &st, 0, 0, buf, 0, 5)); /* nothing to copy */
  cpu->dealloc(dev, &st);
  cpu->device_destroy(dev);
}

//===----------------------------------------------------------------------===//
// Launches
//===----------------------------------------------------------------------===//

/* y = a * x + y, one unit per element, cube_dim.x units per cube. */
static int saxpy_kernel(const cube_cpu_cube_t* c, const cube_cpu_arg_t* args, uint32_t argc) {
  if (argc != 3) return 99;
  const float* x = args[0].buffer.data;
  float* y = args[1].buffer.data;
  const float a = args[2].f32;
  const uint64_t len = args[1].buffer.len / sizeof(float);
  const uint64_t base = (uint64_t)c->cube_pos[0] * c->cube_dim[0];
  for (uint32_t u = 0; u < c->cube_dim[0]; ++u) {
    uint64_t i = base + u;
    if (i < len) y[i] = a * x[i] + y[i];
  }
  return 0;
}

CUBE_TEST(saxpy_matches_host_loop) {
  cube__backend_device_t* dev = open_device(0, NULL);
  REQUIRE(dev);
  const uint64_t n = 1000003;
  cube__storage_t xs, ys;
  REQUIRE_OK(cpu->alloc(dev, n * sizeof(float), &xs));
  REQUIRE_OK(cpu->alloc(dev, n * sizeof(float), &ys));
  float* x = malloc(n * sizeof(float));
  float* y = malloc(n * sizeof(float));
  float* out = malloc(n * sizeof(float));
  REQUIRE(x && y && out);
  uint64_t seed = 7;
  for (uint64_t i = 0; i < n; ++i) {
    x[i] = (float)(cube_test_rand(&seed) % 2001) / 100.0f - 10.0f;
    y[i] = (float)(cube_test_rand(&seed) % 2001) / 100.0f - 10.0f;
  }
  CHECK_OK(cpu->write(dev, NULL, &xs, 0, 0, x, n * sizeof(float), 1));
  CHECK_OK(cpu->write(dev, NULL, &ys, 0, 0, y, n * sizeof(float), 1));
  cube_kernel_t k = make_kernel("saxpy", saxpy_kernel, 256, 0);
  cube_cpu_arg_t args[3];
  args[0].buffer.data = xs.ptr;
  args[0].buffer.len = n * sizeof(float);
  args[1].buffer.data = ys.ptr;
  args[1].buffer.len = n * sizeof(float);
  args[2].f32 = 2.5f;
  const uint32_t cubes = (uint32_t)((n + 255) / 256);
  launch_rec_t lr;
  cube__launch_t* l = make_launch(&lr, &k, cubes, 1, 1, (cube_dim_t){256, 1, 1}, args, "bbs");
  CHECK_OK(cpu->launch(dev, NULL, l));
  CHECK_OK(cpu->sync(dev, NULL));
  CHECK_OK(cpu->read(dev, NULL, out, &ys, 0, 0, n * sizeof(float), 1));
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < n; ++i) {
    volatile float want = 2.5f * x[i];
    want = want + y[i];
    if (out[i] != want) ++wrong;
  }
  CHECK_EQ_U64(wrong, 0);
  free(x);
  free(y);
  free(out);
  cpu->dealloc(dev, &xs);
  cpu->dealloc(dev, &ys);
  cpu->device_destroy(dev);
}

typedef struct {
  atomic_uint* visits;     /* one per cube */
  atomic_uint bad;         /* wrong count/dim/worker seen */
  uint32_t workers;
  uint32_t count[3], dim[3];
} visit_ctx_t;

static int visit_kernel(const cube_cpu_cube_t* c, const cube_cpu_arg_t* args, uint32_t argc) {
  (void)argc;
  visit_ctx_t* v = args[0].buffer.data;
  for (int i = 0; i < 3; ++i)
    if (c->cube_count[i] != v->count[i] || c->cube_dim[i] != v->dim[i] ||
        c->cube_pos[i] >= v->count[i])
      atomic_fetch_add(&v->bad, 1);
  if (c->worker >= v->workers || c->shared != NULL || c->shared_size != 0 ||
      c->mode != CUBE_EXEC_VALIDATE)
    atomic_fetch_add(&v->bad, 1);
  uint64_t linear = ((uint64_t)c->cube_pos[2] * c->cube_count[1] + c->cube_pos[1]) *
                        c->cube_count[0] + c->cube_pos[0];
  atomic_fetch_add(&v->visits[linear], 1);
  return 0;
}

CUBE_TEST(counts_3d_visit_every_cube_once) {
  setenv("CUBE_CPU_THREADS", "4", 1);
  cube_device_properties_t props;
  cube__backend_device_t* dev = open_device(0, &props);
  REQUIRE(dev);
  static const uint32_t shapes[][6] = {
      {1, 1, 1, 1, 1, 1},   {7, 5, 3, 2, 2, 1},    {61, 37, 11, 4, 4, 4},
      {1, 1, 3001, 1, 1, 1}, {1, 4099, 1, 32, 1, 1}, {100003, 1, 1, 1, 1, 1},
      {3, 2, 65537, 8, 8, 16},
  };
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s) {
    const uint32_t* sh = shapes[s];
    uint64_t total = (uint64_t)sh[0] * sh[1] * sh[2];
    visit_ctx_t v;
    memset(&v, 0, sizeof(v));
    v.visits = calloc(total, sizeof(atomic_uint));
    REQUIRE(v.visits);
    v.workers = props.hardware.num_cpu_cores;
    memcpy(v.count, sh, sizeof(v.count));
    memcpy(v.dim, sh + 3, sizeof(v.dim));
    cube_kernel_t k = make_kernel("visit", visit_kernel, sh[3], 0);
    cube_cpu_arg_t arg;
    arg.buffer.data = &v;
    arg.buffer.len = sizeof(v);
    launch_rec_t lr;
    cube__launch_t* l =
        make_launch(&lr, &k, sh[0], sh[1], sh[2], (cube_dim_t){sh[3], sh[4], sh[5]}, &arg, "b");
    l->mode = CUBE_EXEC_VALIDATE;
    CHECK_OK(cpu->launch(dev, NULL, l));
    uint64_t wrong = 0;
    for (uint64_t i = 0; i < total; ++i) wrong += atomic_load(&v.visits[i]) != 1;
    CHECK_EQ_U64(wrong, 0);
    CHECK_EQ_U64(atomic_load(&v.bad), 0);
    free(v.visits);
  }
  /* A count with a zero component runs nothing and succeeds. */
  visit_ctx_t v;
  memset(&v, 0, sizeof(v));
  cube_kernel_t k = make_kernel("visit", visit_kernel, 1, 0);
  cube_cpu_arg_t arg;
  arg.buffer.data = &v;
  arg.buffer.len = sizeof(v);
  launch_rec_t lr;
  cube__launch_t* l = make_launch(&lr, &k, 5, 0, 3, (cube_dim_t){1, 1, 1}, &arg, "b");
  CHECK_OK(cpu->launch(dev, NULL, l)); /* visits is NULL: would crash if it ran */
  cpu->device_destroy(dev);
}

/* Fills its scratch with its cube id, works a while, checks the scratch. */
static int scratch_kernel(const cube_cpu_cube_t* c, const cube_cpu_arg_t* args, uint32_t argc) {
  (void)argc;
  if (!c->shared || ((uintptr_t)c->shared & 63) != 0 || c->shared_size != args[0].u64) return 77;
  uint64_t id = ((uint64_t)c->cube_pos[2] * c->cube_count[1] + c->cube_pos[1]) * c->cube_count[0] +
                c->cube_pos[0] + 1;
  uint64_t* s = c->shared;
  const uint64_t words = c->shared_size / sizeof(uint64_t);
  for (uint64_t i = 0; i < words; ++i) s[i] = id ^ i;
  volatile uint64_t sink = 0;
  for (int i = 0; i < 2000; ++i) sink += (uint64_t)i * id;
  (void)sink;
  for (uint64_t i = 0; i < words; ++i)
    if (s[i] != (id ^ i)) return 1;
  return 0;
}

typedef struct {
  cube__backend_device_t* dev;
  uint64_t shared;
  int rounds;
  int failures;
} scratch_job_t;

static void* scratch_runner(void* p) {
  scratch_job_t* j = p;
  for (int r = 0; r < j->rounds; ++r) {
    /* Growing sizes: the per-participant cache must grow. */
    uint64_t shared = j->shared + (uint64_t)(r % 4) * 1024;
    cube_kernel_t k = make_kernel("scratch", scratch_kernel, 64, shared);
    cube_cpu_arg_t arg;
    arg.u64 = shared;
    launch_rec_t lr;
    cube__launch_t* l = make_launch(&lr, &k, 50, 20, 3, (cube_dim_t){64, 1, 1}, &arg, "s");
    cube_status_t s = cpu->launch(j->dev, NULL, l);
    if (s != CUBE_OK) {
      fprintf(stderr, "scratch launch: %s\n", cube_status_message(s));
      cube_status_free(s);
      j->failures++;
    }
  }
  return NULL;
}

CUBE_TEST(shared_scratch_is_per_participant) {
  setenv("CUBE_CPU_THREADS", "4", 1);
  setenv("CUBE_CPU_DEVICES", "2", 1);
  cube__backend_device_t* d0 = open_device(0, NULL);
  cube__backend_device_t* d1 = open_device(1, NULL);
  REQUIRE(d0 && d1);
  /* One device alone, then two devices launching at the same time. */
  scratch_job_t a = {d0, 256, 20, 0}, b = {d1, 4096, 20, 0};
  scratch_runner(&a);
  CHECK_EQ_U64(a.failures, 0);
  a.failures = 0;
  pthread_t ta, tb;
  REQUIRE(pthread_create(&ta, NULL, scratch_runner, &a) == 0);
  REQUIRE(pthread_create(&tb, NULL, scratch_runner, &b) == 0);
  pthread_join(ta, NULL);
  pthread_join(tb, NULL);
  CHECK_EQ_U64(a.failures, 0);
  CHECK_EQ_U64(b.failures, 0);
  cpu->device_destroy(d0);
  cpu->device_destroy(d1);
}

static int failing_kernel(const cube_cpu_cube_t* c, const cube_cpu_arg_t* args, uint32_t argc) {
  (void)args;
  (void)argc;
  if (c->cube_pos[0] == 3 && c->cube_pos[1] == 2 && c->cube_pos[2] == 1) return 5;
  return 0;
}

CUBE_TEST(failing_kernel_reports_launch_failed) {
  setenv("CUBE_CPU_THREADS", "4", 1);
  cube__backend_device_t* dev = open_device(0, NULL);
  REQUIRE(dev);
  cube_kernel_t k = make_kernel("failing_kernel", failing_kernel, 1, 0);
  for (int round = 0; round < 10; ++round) {
    launch_rec_t lr;
    cube__launch_t* l = make_launch(&lr, &k, 8, 4, 2 + (uint32_t)round * 100,
                                    (cube_dim_t){1, 1, 1}, NULL, NULL);
    CHECK_STATUS(cpu->launch(dev, NULL, l), CUBE_STATUS_LAUNCH_FAILED,
                 "launch of kernel 'failing_kernel'", "cube (3, 2, 1)", "returned error 5");
  }
  /* No native function. */
  cube_kernel_t none = make_kernel("source_only", NULL, 1, 0);
  launch_rec_t lr;
  cube__launch_t* l = make_launch(&lr, &none, 1, 1, 1, (cube_dim_t){1, 1, 1}, NULL, NULL);
  CHECK_STATUS(cpu->launch(dev, NULL, l), CUBE_STATUS_UNIMPLEMENTED, "source_only",
               "no native CPU function");
  /* The device still works. */
  launch_rec_t lr_ok;
  cube__launch_t* ok = make_launch(&lr_ok, &k, 3, 2, 1, (cube_dim_t){1, 1, 1}, NULL, NULL);
  CHECK_OK(cpu->launch(dev, NULL, ok));
  cpu->device_destroy(dev);
}

static int never_runs(const cube_cpu_cube_t* c, const cube_cpu_arg_t* args, uint32_t argc) {
  (void)c;
  (void)args;
  (void)argc;
  return 1;
}

CUBE_TEST(dim_over_limits_is_out_of_range) {
  cube__backend_device_t* dev = open_device(0, NULL);
  REQUIRE(dev);
  cube_kernel_t k = make_kernel("big_cube", never_runs, 1, 0);
  launch_rec_t lr;
  cube__launch_t* l = make_launch(&lr, &k, 1, 1, 1, (cube_dim_t){2048, 1, 1}, NULL, NULL);
  CHECK_STATUS(cpu->launch(dev, NULL, l), CUBE_STATUS_OUT_OF_RANGE, "big_cube", "2048", "1024");
  l->dim = (cube_dim_t){1, 1, 65};
  CHECK_STATUS(cpu->launch(dev, NULL, l), CUBE_STATUS_OUT_OF_RANGE, "big_cube", "65", "64");
  l->dim = (cube_dim_t){64, 32, 1}; /* each axis fine, 2048 units too many */
  CHECK_STATUS(cpu->launch(dev, NULL, l), CUBE_STATUS_OUT_OF_RANGE, "big_cube", "2048 units",
               "1024");
  l->dim = (cube_dim_t){0, 1, 1};
  CHECK_STATUS(cpu->launch(dev, NULL, l), CUBE_STATUS_OUT_OF_RANGE, "big_cube", "(0, 1, 1)");
  l->dim = (cube_dim_t){1, 1, 1};
  cube_kernel_t fat = make_kernel("fat_cube", never_runs, 1, (1u << 20) + 1);
  l->kernel = &fat;
  l->name = fat.name;
  CHECK_STATUS(cpu->launch(dev, NULL, l), CUBE_STATUS_OUT_OF_RANGE, "fat_cube", "1048577");
  /* 2^32-1 cubes on every axis do not fit in 64 bits. */
  l->kernel = &k;
  l->name = k.name;
  l->count[0] = l->count[1] = l->count[2] = UINT32_MAX;
  CHECK_STATUS(cpu->launch(dev, NULL, l), CUBE_STATUS_OUT_OF_RANGE, "big_cube", "4294967295");
  cpu->device_destroy(dev);
}

typedef struct {
  atomic_uint calls;
  pthread_t thread;
  uint32_t worker;
} tiny_ctx_t;

static int tiny_kernel(const cube_cpu_cube_t* c, const cube_cpu_arg_t* args, uint32_t argc) {
  (void)argc;
  tiny_ctx_t* t = args[0].buffer.data;
  atomic_fetch_add(&t->calls, 1);
  t->thread = pthread_self();
  t->worker = c->worker;
  return 0;
}

CUBE_TEST(one_cube_runs_on_the_caller) {
  setenv("CUBE_CPU_THREADS", "4", 1);
  cube__backend_device_t* dev = open_device(0, NULL);
  REQUIRE(dev);
  cube_kernel_t k = make_kernel("tiny", tiny_kernel, 256, 0);
  tiny_ctx_t t;
  memset(&t, 0, sizeof(t));
  cube_cpu_arg_t arg;
  arg.buffer.data = &t;
  arg.buffer.len = sizeof(t);
  /* One cube of any size, and a few small cubes, stay on the caller. */
  static const uint32_t shapes[][2] = {{1, 1}, {1, 1024}, {4, 256}, {1000, 1}};
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); ++s) {
    memset(&t, 0, sizeof(t));
    launch_rec_t lr;
    cube__launch_t* l =
        make_launch(&lr, &k, shapes[s][0], 1, 1, (cube_dim_t){shapes[s][1], 1, 1}, &arg, "b");
    CHECK_OK(cpu->launch(dev, NULL, l));
    CHECK_EQ_U64(atomic_load(&t.calls), shapes[s][0]);
    CHECK(pthread_equal(t.thread, pthread_self()) && t.worker == 0);
  }
  /* Launch latency of one cube (information, not a limit). */
  launch_rec_t lr;
  cube__launch_t* l = make_launch(&lr, &k, 1, 1, 1, (cube_dim_t){1, 1, 1}, &arg, "b");
  const int reps = 100000;
  uint64_t t0 = cube__now_ns();
  for (int i = 0; i < reps; ++i) {
    cube_status_t s = cpu->launch(dev, NULL, l);
    if (s != CUBE_OK) {
      CHECK_OK(s);
      break;
    }
  }
  uint64_t t1 = cube__now_ns();
  printf("one-cube launch: %.1f ns\n", (double)(t1 - t0) / reps);
  cpu->device_destroy(dev);
}

//===----------------------------------------------------------------------===//
// Registry and null backend
//===----------------------------------------------------------------------===//

CUBE_TEST(registry_tables) {
  CHECK(cube__backend_get(CUBE_BACKEND_CPU) == &cube__backend_cpu);
  CHECK(cube__backend_get(CUBE_BACKEND_NULL) == &cube__backend_null);
#ifdef CUBE_HAVE_CUDA
  CHECK(cube__backend_get(CUBE_BACKEND_CUDA) == &cube__backend_cuda);
#else
  CHECK(cube__backend_get(CUBE_BACKEND_CUDA) == NULL);
#endif
#ifdef CUBE_HAVE_OPENCL
  CHECK(cube__backend_get(CUBE_BACKEND_OPENCL) == &cube__backend_opencl);
#else
  CHECK(cube__backend_get(CUBE_BACKEND_OPENCL) == NULL);
#endif
  CHECK(cube__backend_get(CUBE__BACKEND_COUNT) == NULL);
  CHECK(cube__backend_get((cube_backend_t)-1) == NULL);
  for (int b = 0; b < CUBE__BACKEND_COUNT; ++b) {
    const cube__backend_vtable_t* t = cube__backend_get((cube_backend_t)b);
    if (!t) continue;
    CHECK(t->backend == (cube_backend_t)b);
    CHECK_OK(cube__backend_validate(t));
    CHECK(t->api_version == CUBE__BACKEND_API_VERSION);
    /* Event entries come as a set (the server uses them together). */
    bool ev = t->event_record != NULL;
    CHECK(ev == (t->event_wait != NULL) && ev == (t->event_done != NULL) &&
          ev == (t->event_sync != NULL) && ev == (t->event_destroy != NULL));
    CHECK((t->alloc_on != NULL) == (t->dealloc_on != NULL));
  }
}

//===----------------------------------------------------------------------===//
// Per-device parameters (cube_cpu_params_t)
//===----------------------------------------------------------------------===//

/* Which participant numbers ran cubes, the cubes run, and numbers out of
 * range (num_cpu_cores bounds them). */
static atomic_uint_fast64_t g_worker_mask;
static atomic_uint g_cubes_run, g_worker_out_of_range;
static uint32_t g_worker_bound;

static int record_worker(const cube_cpu_cube_t* c, const cube_cpu_arg_t* args, uint32_t argc) {
  (void)args;
  (void)argc;
  if (c->worker >= g_worker_bound || c->worker >= 64) atomic_fetch_add(&g_worker_out_of_range, 1);
  else atomic_fetch_or(&g_worker_mask, (uint_fast64_t)1 << c->worker);
  atomic_fetch_add(&g_cubes_run, 1);
  /* Some work per cube, so that the pool's threads do join. */
  volatile uint64_t sink = 0;
  for (uint32_t i = 0; i < 20000; ++i) sink += i * (uint64_t)c->cube_pos[0];
  (void)sink;
  return 0;
}

static unsigned popcount64(uint64_t v) {
  unsigned n = 0;
  for (; v; v &= v - 1) ++n;
  return n;
}

/* Launches 4096 cubes on |c| and checks every one ran on a participant below
 * |bound|; returns how many participant numbers were seen. */
static unsigned launch_and_count_workers(cube_client_t* c, uint32_t bound) {
  atomic_store(&g_worker_mask, 0);
  atomic_store(&g_cubes_run, 0);
  atomic_store(&g_worker_out_of_range, 0);
  g_worker_bound = bound;
  static const cube_arg_kind_t kinds[1] = {CUBE_ARG_BUFFER};
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = "record_worker";
  d.cpu_fn = record_worker;
  d.arg_count = 1;
  d.arg_kinds = kinds;
  d.cube_dim = (cube_dim_t){1, 1, 1};
  cube_kernel_t* k = NULL;
  cube_handle_t h = CUBE_HANDLE_NULL;
  cube_status_t st = cube_kernel_create(&d, &k);
  if (!st) st = cube_client_empty(c, 64, &h);
  cube_arg_t arg = cube_arg_buffer(h);
  for (int round = 0; !st && round < 4; ++round)
    st = cube_client_launch(c, k, cube_count_static(64, 64, 1), 1, &arg);
  if (!st) st = cube_client_sync(c);
  CHECK_OK(st);
  CHECK_EQ_U64(atomic_load(&g_cubes_run), 4 * 64 * 64);
  CHECK_EQ_U64(atomic_load(&g_worker_out_of_range), 0);
  cube_handle_release(h);
  cube_kernel_release(k);
  return popcount64(atomic_load(&g_worker_mask));
}

CUBE_TEST(params_threads_limit_the_device) {
  setenv("CUBE_CPU_THREADS", "4", 1);
  setenv("CUBE_CPU_DEVICES", "3", 1);
  cube_cpu_params_t one, two;
  cube_cpu_params_initialize(&one);
  CHECK_EQ_U64(one.struct_size, sizeof(one));
  CHECK(one.backend == CUBE_BACKEND_CPU);
  CHECK_EQ_U64(one.threads, 0);
  one.threads = 1;
  cube_cpu_params_initialize(&two);
  two.threads = 2;
  cube_server_options_t o1, o2;
  cube_server_options_initialize(&o1);
  cube_server_options_initialize(&o2);
  o1.backend_params = &one;
  o2.backend_params = &two;
  cube_client_t *c0 = NULL, *c1 = NULL, *c2 = NULL;
  REQUIRE_OK(cube_client_init((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &o1, &c0));
  REQUIRE_OK(cube_client_init((cube_device_id_t){CUBE_BACKEND_CPU, 1}, &o2, &c1));
  REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 2}, &c2));
  CHECK_EQ_U64(cube_client_properties(c0)->hardware.num_cpu_cores, 1);
  CHECK_EQ_U64(cube_client_properties(c1)->hardware.num_cpu_cores, 2);
  CHECK_EQ_U64(cube_client_properties(c2)->hardware.num_cpu_cores, 4);
  CHECK(strstr(cube_client_info(c0)->version, ", 1 threads") != NULL);
  CHECK(strstr(cube_client_info(c2)->version, ", 4 threads") != NULL);
  /* One thread: every cube on the runner (participant 0). */
  CHECK_EQ_U64(launch_and_count_workers(c0, 1), 1);
  CHECK_EQ_U64(atomic_load(&g_worker_mask), 1);
  /* Two: participants 0 and 1 at most. */
  unsigned n2 = launch_and_count_workers(c1, 2);
  CHECK(n2 >= 1 && n2 <= 2);
  CHECK_EQ_U64(atomic_load(&g_worker_mask) & ~(uint64_t)3, 0);
  /* The whole pool. */
  unsigned n4 = launch_and_count_workers(c2, 4);
  CHECK(n4 >= 1 && n4 <= 4);
  printf("participants seen: 1 thread %u, 2 threads %u, pool of 4 %u\n", 1u, n2, n4);
  cube_client_release(c0);
  cube_client_release(c1);
  cube_client_release(c2);
  cube_shutdown();
}

CUBE_TEST(params_wrong_are_refused) {
  setenv("CUBE_CPU_THREADS", "2", 1);
  cube_cpu_params_t prm;
  cube_cpu_params_initialize(&prm);
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.backend_params = &prm;
  cube__backend_device_t* dev = NULL;
  cube_device_properties_t p;
  cube_features_t f;
  cube_backend_info_t info;
  /* More threads than the pool has: the whole pool. */
  prm.threads = 9;
  REQUIRE_OK(cpu->device_create(0, &o, &dev, &p, &f, &info));
  CHECK_EQ_U64(p.hardware.num_cpu_cores, 2);
  cpu->device_destroy(dev);
  dev = NULL;
  prm.threads = 1025;
  CHECK_STATUS(cpu->device_create(0, &o, &dev, &p, &f, &info), CUBE_STATUS_INVALID_ARGUMENT,
               "cpu:0", "threads is 1025", "1 to 1024");
  prm.threads = 1;
  prm.struct_size = (uint32_t)sizeof(prm) + 8;
  CHECK_STATUS(cpu->device_create(0, &o, &dev, &p, &f, &info), CUBE_STATUS_INVALID_ARGUMENT,
               "cpu:0", "struct_size", "cube_cpu_params_initialize");
  prm.struct_size = 4;
  CHECK_STATUS(cpu->device_create(0, &o, &dev, &p, &f, &info), CUBE_STATUS_INVALID_ARGUMENT,
               "struct_size is 4");
  prm.struct_size = (uint32_t)sizeof(prm);
  prm.backend = CUBE_BACKEND_CUDA;
  CHECK_STATUS(cpu->device_create(0, &o, &dev, &p, &f, &info), CUBE_STATUS_INVALID_ARGUMENT,
               "backend_params are for backend cuda", "not cpu");
  CHECK(dev == NULL);
  /* Through the client, the same refusals, and the device stays free. */
  cube_client_t* c = NULL;
  CHECK_STATUS(cube_client_init((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &o, &c),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_client_init", "for backend cuda");
  prm.backend = CUBE_BACKEND_CPU;
  prm.threads = 5000;
  CHECK_STATUS(cube_client_init((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &o, &c),
               CUBE_STATUS_INVALID_ARGUMENT, "threads is 5000");
  prm.threads = 1;
  REQUIRE_OK(cube_client_init((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &o, &c));
  CHECK_EQ_U64(cube_client_properties(c)->hardware.num_cpu_cores, 1);
  cube_client_release(c);
  cube_shutdown();
}
