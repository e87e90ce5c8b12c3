// cube-test-libs: cube_static
/* The public API's growth rules (include/cube/cube.h): struct_size of input
 * structs, output structs and structs in library memory, the _initialize
 * functions, the public status constructor and the statuses of the caller's
 * own tasks, and the sentinels that replaced the public _COUNT values.
 *
 * Every case ends with cube_shutdown, so that the cases also run together in
 * one process (cube_client_init needs a device without a server).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/abi.h"
#include "check.h"
#include "cube/cube.h"

static const cube_device_id_t k_cpu0 = {CUBE_BACKEND_CPU, 0};

/* A seed that differs between runs, printed so that a failure can be
 * replayed (CUBE_TEST_SEED=<n>). */
static uint64_t test_seed(void) {
  const char* s = getenv("CUBE_TEST_SEED");
  uint64_t seed = s ? strtoull(s, NULL, 10) : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
  fprintf(stderr, "seed %llu\n", (unsigned long long)seed);
  return seed;
}

static bool all_bytes(const void* p, size_t n, unsigned char v) {
  const unsigned char* b = p;
  for (size_t i = 0; i < n; ++i)
    if (b[i] != v) return false;
  return true;
}

//===----------------------------------------------------------------------===//
// Input structs: cube_server_options_t
//===----------------------------------------------------------------------===//

/* A program built against a newer header: the struct with fields appended. */
typedef struct {
  cube_server_options_t o;
  uint64_t newer[5];
} newer_options_t;

CUBE_TEST(options_initialize_fills_defaults_and_size) {
  cube_server_options_t o;
  memset(&o, 0xA5, sizeof(o));
  cube_server_options_initialize(&o);
  CHECK_EQ_U64(o.struct_size, sizeof(cube_server_options_t));
  CHECK(all_bytes((const char*)&o + sizeof(size_t), sizeof(o) - sizeof(size_t), 0));
  cube_server_options_initialize(NULL); /* ignored */
}

CUBE_TEST(options_struct_size_zero_is_this_layout) {
  /* A designated initialiser from before struct_size: still read whole. */
  cube_server_options_t o = {.queue_mode = CUBE_QUEUE_INLINE, .max_streams = 3};
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_init(k_cpu0, &o, &c));
  CHECK(cube_client_is_blocking(c));
  cube_client_release(c);
  cube_shutdown();
}

CUBE_TEST(options_larger_size_with_zero_tail_is_read) {
  newer_options_t big;
  memset(&big, 0, sizeof(big));
  big.o.struct_size = sizeof(big);
  big.o.queue_mode = CUBE_QUEUE_INLINE;
  big.o.profile_level = CUBE_PROFILE_EXEC;
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_init(k_cpu0, &big.o, &c));
  /* The fields this library knows were read. */
  CHECK(cube_client_is_blocking(c));
  CHECK(cube_client_profile_level(c) == CUBE_PROFILE_EXEC);
  cube_client_release(c);
  cube_shutdown();
}

CUBE_TEST(options_larger_size_with_a_set_newer_field_is_refused) {
  uint64_t seed = test_seed();
  newer_options_t big;
  memset(&big, 0, sizeof(big));
  big.o.struct_size = sizeof(big);
  big.o.queue_mode = CUBE_QUEUE_INLINE;
  size_t k = (size_t)(cube_test_rand(&seed) % 5);
  big.newer[k] = 1 + cube_test_rand(&seed) % 1000;
  /* The first nonzero byte past this library's struct, as the message names. */
  size_t first = sizeof(cube_server_options_t);
  while (((const unsigned char*)&big)[first] == 0) ++first;
  char size_word[64], byte_word[64], ours[64];
  snprintf(size_word, sizeof(size_word), "options->struct_size is %zu", sizeof(big));
  snprintf(byte_word, sizeof(byte_word), "byte %zu is not zero", first);
  snprintf(ours, sizeof(ours), "(%zu bytes)", sizeof(cube_server_options_t));
  cube_client_t* c = NULL;
  CHECK_STATUS(cube_client_init(k_cpu0, &big.o, &c), CUBE_STATUS_UNSUPPORTED, "cube_client_init",
               "cube_server_options_t", size_word, byte_word, ours);
  CHECK(c == NULL);
  /* Refused before anything was made: the device still has no server. */
  big.newer[k] = 0;
  REQUIRE_OK(cube_client_init(k_cpu0, &big.o, &c));
  CHECK(cube_client_is_blocking(c));
  cube_client_release(c);
  cube_shutdown();
}

CUBE_TEST(options_unknown_smaller_size_is_refused) {
  uint64_t seed = test_seed();
  /* Any size between 1 and sizeof - 1: no earlier layout exists yet. */
  size_t size = 1 + (size_t)(cube_test_rand(&seed) % (sizeof(cube_server_options_t) - 1));
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.struct_size = size;
  char word[64], known[64];
  snprintf(word, sizeof(word), "options->struct_size %zu", size);
  snprintf(known, sizeof(known), "knows (%zu;", sizeof(cube_server_options_t));
  cube_client_t* c = NULL;
  CHECK_STATUS(cube_client_init(k_cpu0, &o, &c), CUBE_STATUS_UNSUPPORTED, "cube_client_init",
               word, "cube_server_options_t", known);
  CHECK(c == NULL);
  cube_shutdown();
}

//===----------------------------------------------------------------------===//
// Input structs: cube_kernel_desc_t
//===----------------------------------------------------------------------===//

/* out[i] = in[i] * 3 + add, one cube per element. */
static int k_affine(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  if (n != 3) return 1;
  uint32_t i = cube->cube_pos[0];
  const uint32_t* in = args[0].buffer.data;
  uint32_t* out = args[1].buffer.data;
  if ((uint64_t)(i + 1) * 4 > args[0].buffer.len) return 2;
  out[i] = in[i] * 3u + args[2].u32;
  return 0;
}

static const cube_arg_kind_t k_affine_kinds[3] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_U32};

/* Creates |desc|'s kernel and checks that it computes what k_affine does on
 * random data. */
static void check_affine_kernel(const cube_kernel_desc_t* desc, uint64_t* seed) {
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cube_kernel_create(desc, &k));
  CHECK(strcmp(cube_kernel_name(k), "affine") == 0);
  CHECK_EQ_U64(cube_kernel_arg_count(k), 3);
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(k_cpu0, &c));
  uint32_t n = 1 + (uint32_t)(cube_test_rand(seed) % 300);
  uint32_t add = (uint32_t)cube_test_rand(seed);
  uint32_t* in = malloc(n * 4);
  REQUIRE(in);
  for (uint32_t i = 0; i < n; ++i) in[i] = (uint32_t)cube_test_rand(seed);
  cube_handle_t a, b;
  REQUIRE_OK(cube_client_create_from_slice(c, in, n * 4, &a));
  REQUIRE_OK(cube_client_empty(c, n * 4, &b));
  cube_arg_t args[3] = {cube_arg_buffer(a), cube_arg_buffer(b), cube_arg_u32(add)};
  CHECK_OK(cube_client_launch(c, k, cube_count_static(n, 1, 1), 3, args));
  cube_bytes_t* out = NULL;
  CHECK_OK(cube_client_read_one(c, b, &out));
  if (out) {
    const uint32_t* y = cube_bytes_const_data(out);
    bool ok = cube_bytes_size(out) == n * 4;
    for (uint32_t i = 0; ok && i < n; ++i) ok = y[i] == in[i] * 3u + add;
    CHECK(ok);
  }
  cube_bytes_release(out);
  cube_handle_release(a);
  cube_handle_release(b);
  cube_kernel_release(k);
  cube_client_release(c);
  free(in);
}

CUBE_TEST(kernel_desc_initialize_and_sizes) {
  uint64_t seed = test_seed();
  cube_kernel_desc_t d;
  memset(&d, 0x5A, sizeof(d));
  cube_kernel_desc_initialize(&d);
  CHECK_EQ_U64(d.struct_size, sizeof(cube_kernel_desc_t));
  CHECK(all_bytes((const char*)&d + sizeof(size_t), sizeof(d) - sizeof(size_t), 0));
  cube_kernel_desc_initialize(NULL);
  d.name = "affine";
  d.arg_kinds = k_affine_kinds;
  d.arg_count = 3;
  d.cpu_fn = k_affine;
  check_affine_kernel(&d, &seed);
  /* struct_size 0: a designated initialiser from before struct_size. */
  cube_kernel_desc_t z = {.name = "affine", .arg_kinds = k_affine_kinds, .arg_count = 3,
                          .cpu_fn = k_affine};
  check_affine_kernel(&z, &seed);
  /* A newer program's larger struct with its new fields zero. */
  struct {
    cube_kernel_desc_t d;
    void* newer[3];
  } big;
  memset(&big, 0, sizeof(big));
  big.d = z;
  big.d.struct_size = sizeof(big);
  check_affine_kernel(&big.d, &seed);
  /* ... with one of them set. */
  big.newer[cube_test_rand(&seed) % 3] = &big;
  cube_kernel_t* k = NULL;
  CHECK_STATUS(cube_kernel_create(&big.d, &k), CUBE_STATUS_UNSUPPORTED, "cube_kernel_create",
               "desc->struct_size", "cube_kernel_desc_t", "not zero");
  CHECK(k == NULL);
  /* A size no layout has: an odd one (every layout's size is a multiple of
   * 8; a random even size could be an earlier layout's). */
  z.struct_size = sizeof(cube_kernel_desc_t) - 1 - 2 * (size_t)(cube_test_rand(&seed) % 8);
  char word[64];
  snprintf(word, sizeof(word), "desc->struct_size %zu", z.struct_size);
  CHECK_STATUS(cube_kernel_create(&z, &k), CUBE_STATUS_UNSUPPORTED, "cube_kernel_create", word,
               "cube_kernel_desc_t");
  CHECK(k == NULL);
  cube_shutdown();
}

//===----------------------------------------------------------------------===//
// Input structs: arrays of cube_layout_desc_t
//===----------------------------------------------------------------------===//

typedef struct {
  cube_layout_desc_t d;
  uint32_t newer[3]; /* a newer header's fields, left zero */
} newer_desc_t;

static void random_desc(uint64_t* seed, cube_layout_desc_t* d) {
  uint32_t rank = 1 + (uint32_t)(cube_test_rand(seed) % 3);
  uint64_t shape[3];
  for (uint32_t k = 0; k < rank; ++k) shape[k] = 1 + cube_test_rand(seed) % 9;
  static const uint32_t elems[4] = {1, 2, 4, 8};
  cube_layout_strategy_t s = cube_test_rand(seed) & 1 ? CUBE_LAYOUT_OPTIMIZED
                                                      : CUBE_LAYOUT_CONTIGUOUS;
  cube_status_free(cube_layout_desc_initialize(s, rank, shape, elems[cube_test_rand(seed) % 4], d));
}

CUBE_TEST(layout_desc_initialize_sets_size) {
  uint64_t shape[2] = {3, 5};
  cube_layout_desc_t d;
  memset(&d, 0xEE, sizeof(d));
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 2, shape, 4, &d));
  CHECK_EQ_U64(d.struct_size, sizeof(cube_layout_desc_t));
  CHECK(d.strategy == CUBE_LAYOUT_OPTIMIZED && d.rank == 2 && d.elem_size == 4);
  CHECK(d.shape[0] == 3 && d.shape[1] == 5 && d.shape[2] == 0);
  /* A failure writes nothing. */
  cube_layout_desc_t before = d;
  CHECK_STATUS(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 2, shape, 0, &d),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_layout_desc_initialize", "elem_size");
  CHECK(memcmp(&before, &d, sizeof(d)) == 0);
}

CUBE_TEST(layout_compute_reads_a_newer_stride) {
  uint64_t seed = test_seed();
  enum { N = 7 };
  cube_layout_desc_t plain[N];
  newer_desc_t wide[N];
  memset(wide, 0, sizeof(wide));
  for (int i = 0; i < N; ++i) {
    random_desc(&seed, &plain[i]);
    if (i % 2) plain[i].struct_size = 0; /* 0 and sizeof mix in this library's stride */
    wide[i].d = plain[i];
    wide[i].d.struct_size = sizeof(newer_desc_t);
  }
  for (int policy = 0; policy < 2; ++policy) {
    uint64_t s1[N][CUBE_MAX_RANK], s2[N][CUBE_MAX_RANK], o1[N], o2[N], z1[N], z2[N], t1, t2;
    memset(s1, 0, sizeof(s1));
    memset(s2, 0, sizeof(s2));
    REQUIRE_OK(cube_layout_compute((cube_layout_policy_t)policy, 256, N, plain, s1, o1, z1, &t1));
    REQUIRE_OK(cube_layout_compute((cube_layout_policy_t)policy, 256, N, &wide[0].d, s2, o2, z2,
                                   &t2));
    CHECK(memcmp(s1, s2, sizeof(s1)) == 0);
    CHECK(memcmp(o1, o2, sizeof(o1)) == 0);
    CHECK(memcmp(z1, z2, sizeof(z1)) == 0);
    CHECK_EQ_U64(t1, t2);
  }
  /* One element with another struct_size, one with a newer field set. */
  size_t bad = 1 + (size_t)(cube_test_rand(&seed) % (N - 1));
  char word[64];
  snprintf(word, sizeof(word), "descs[%zu].struct_size is 0", bad);
  wide[bad].d.struct_size = 0;
  uint64_t total = 0;
  CHECK_STATUS(cube_layout_compute(CUBE_LAYOUT_POLICY_CONTIGUOUS, 64, N, &wide[0].d, NULL, NULL,
                                   NULL, &total),
               CUBE_STATUS_UNSUPPORTED, "cube_layout_compute", word, "one struct_size");
  wide[bad].d.struct_size = sizeof(newer_desc_t);
  wide[bad].newer[2] = 9;
  snprintf(word, sizeof(word), "descs[%zu].struct_size", bad);
  CHECK_STATUS(cube_layout_compute(CUBE_LAYOUT_POLICY_CONTIGUOUS, 64, N, &wide[0].d, NULL, NULL,
                                   NULL, &total),
               CUBE_STATUS_UNSUPPORTED, "cube_layout_compute", word, "not zero");
  /* A stride no layout has. */
  plain[0].struct_size = 12;
  CHECK_STATUS(cube_layout_compute(CUBE_LAYOUT_POLICY_CONTIGUOUS, 64, N, plain, NULL, NULL, NULL,
                                   &total),
               CUBE_STATUS_UNSUPPORTED, "cube_layout_compute", "descs[0].struct_size 12",
               "cube_layout_desc_t");
}

static int g_released;
static void count_release(void* user, void* data, size_t size) {
  (void)user;
  (void)size;
  free(data);
  g_released++;
}

CUBE_TEST(create_tensors_read_a_newer_stride) {
  uint64_t seed = test_seed();
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(k_cpu0, &c));
  enum { N = 4 };
  newer_desc_t wide[N];
  memset(wide, 0, sizeof(wide));
  void* data[N];
  size_t sizes[N];
  for (int i = 0; i < N; ++i) {
    random_desc(&seed, &wide[i].d);
    wide[i].d.struct_size = sizeof(newer_desc_t);
    sizes[i] = wide[i].d.elem_size;
    for (uint32_t k = 0; k < wide[i].d.rank; ++k) sizes[i] *= wide[i].d.shape[k];
    data[i] = malloc(sizes[i]);
    REQUIRE(data[i]);
    cube_test_fill_random(data[i], sizes[i], cube_test_rand(&seed));
  }
  for (int pinned = 0; pinned < 2; ++pinned) {
    cube_tensor_t t[N];
    cube_status_t st = pinned ? cube_client_create_tensors_from_slices_pinned(
                                    c, N, &wide[0].d, (const void* const*)data, sizes, t)
                              : cube_client_create_tensors_from_slices(
                                    c, N, &wide[0].d, (const void* const*)data, sizes, t);
    REQUIRE_OK(st);
    cube_bytes_t* out[N] = {0};
    CHECK_OK(cube_client_read_tensor(c, N, t, out));
    for (int i = 0; i < N; ++i) {
      CHECK(t[i].rank == wide[i].d.rank && t[i].elem_size == wide[i].d.elem_size);
      CHECK(out[i] && cube_bytes_size(out[i]) == sizes[i] &&
            memcmp(cube_bytes_const_data(out[i]), data[i], sizes[i]) == 0);
    }
    cube_bytes_release_array(out, N);
    cube_tensor_release_array(t, N);
  }
  cube_tensor_t t[N];
  REQUIRE_OK(cube_client_empty_tensors(c, N, &wide[0].d, t));
  for (int i = 0; i < N; ++i) CHECK_EQ_U64(cube_handle_size(t[i].handle) >= sizes[i], 1);
  cube_tensor_release_array(t, N);

  /* A newer field set: refused by each entry point; bytes are consumed. */
  wide[N - 1].newer[0] = 1;
  CHECK_STATUS(cube_client_create_tensors_from_slices(c, N, &wide[0].d, (const void* const*)data,
                                                      sizes, t),
               CUBE_STATUS_UNSUPPORTED, "cube_client_create_tensors_from_slices", "descs[3]");
  CHECK_STATUS(cube_client_create_tensors_from_slices_pinned(c, N, &wide[0].d,
                                                             (const void* const*)data, sizes, t),
               CUBE_STATUS_UNSUPPORTED, "cube_client_create_tensors_from_slices_pinned",
               "descs[3]");
  CHECK_STATUS(cube_client_empty_tensors(c, N, &wide[0].d, t), CUBE_STATUS_UNSUPPORTED,
               "cube_client_empty_tensors", "descs[3]");
  cube_bytes_t* bytes[N];
  g_released = 0;
  for (int i = 0; i < N; ++i) {
    void* copy = malloc(sizes[i]);
    REQUIRE(copy);
    memcpy(copy, data[i], sizes[i]);
    REQUIRE_OK(cube_bytes_wrap(copy, sizes[i], count_release, NULL, &bytes[i]));
  }
  CHECK_STATUS(cube_client_create_tensors(c, N, &wide[0].d, bytes, t), CUBE_STATUS_UNSUPPORTED,
               "cube_client_create_tensors", "descs[3]");
  CHECK_EQ_U64(g_released, N);
  for (int i = 0; i < N; ++i) free(data[i]);
  CHECK_OK(cube_client_sync(c));
  cube_client_release(c);
  cube_shutdown();
}

/* The rule for an earlier layout, on a struct with a history: the library
 * has no public struct in a second layout yet, so the reader is checked on
 * two versions of a made-up one. */
typedef struct {
  size_t struct_size;
  uint32_t a, b;
} v1_t;
typedef struct {
  size_t struct_size;
  uint32_t a, b;
  uint64_t c; /* appended in "v2" */
  uint32_t d;
} v2_t;

CUBE_TEST(struct_read_earlier_layout_keeps_defaults) {
  uint64_t seed = test_seed();
  static const size_t older[1] = {sizeof(v1_t)};
  const cube__struct_info_t info = {"v2_t", sizeof(v2_t), older, 1};
  v1_t old = {sizeof(v1_t), (uint32_t)cube_test_rand(&seed), (uint32_t)cube_test_rand(&seed)};
  v2_t out = {0, 0, 0, 77, 5}; /* the defaults of the appended fields */
  REQUIRE_OK(cube__struct_read("f", "x->struct_size", &info, &old, &out));
  CHECK_EQ_U64(out.struct_size, sizeof(v2_t));
  CHECK(out.a == old.a && out.b == old.b && out.c == 77 && out.d == 5);
  /* A size between the layouts: neither. */
  v2_t cur = {sizeof(v1_t) + 4, 1, 2, 3, 4};
  CHECK_STATUS(cube__struct_read("f", "x->struct_size", &info, &cur, &out),
               CUBE_STATUS_UNSUPPORTED, "f: x->struct_size 20", "v2_t", "or an earlier");
  /* An array of the earlier layout: its stride. */
  v1_t arr[3];
  for (int i = 0; i < 3; ++i) {
    arr[i].struct_size = sizeof(v1_t);
    arr[i].a = (uint32_t)cube_test_rand(&seed);
    arr[i].b = (uint32_t)i;
  }
  const void* got;
  void* owned;
  REQUIRE_OK(cube__struct_array_read("f", "xs", &info, arr, 3, &got, &owned));
  REQUIRE(owned != NULL && got == owned);
  const v2_t* v = got;
  for (int i = 0; i < 3; ++i)
    CHECK(v[i].struct_size == sizeof(v2_t) && v[i].a == arr[i].a && v[i].b == (uint32_t)i &&
          v[i].c == 0 && v[i].d == 0);
  free(owned);
  /* This library's own stride: used in place. */
  v2_t mine[2] = {{0, 1, 2, 3, 4}, {sizeof(v2_t), 5, 6, 7, 8}};
  REQUIRE_OK(cube__struct_array_read("f", "xs", &info, mine, 2, &got, &owned));
  CHECK(got == (const void*)mine && owned == NULL);
}

//===----------------------------------------------------------------------===//
// Output structs
//===----------------------------------------------------------------------===//

/* Checks the output rules of one writer. |call| writes into |p| (which holds
 * |room| bytes; the struct's own size is |size|); |cut| is a size smaller
 * than the struct that ends on a field. */
typedef cube_status_t (*writer_fn)(void* ctx, void* out);

static void check_output_rules(const char* what, writer_fn call, void* ctx, size_t size,
                               size_t cut) {
  fprintf(stderr, "output rules of %s\n", what);
  size_t room = size + 64;
  unsigned char* full = calloc(1, room);
  unsigned char* p = malloc(room);
  REQUIRE(full && p);
  /* struct_size 0: the whole struct, struct_size set. */
  REQUIRE_OK(call(ctx, full));
  CHECK_EQ_U64(*(size_t*)full, size);
  /* Larger (a newer program): this library's bytes, the rest untouched. */
  memset(p, 0xC3, room);
  *(size_t*)p = room;
  REQUIRE_OK(call(ctx, p));
  CHECK_EQ_U64(*(size_t*)p, size);
  CHECK(all_bytes(p + size, room - size, 0xC3));
  /* Smaller (an older program): only what it has room for. */
  memset(p, 0xC3, room);
  *(size_t*)p = cut;
  REQUIRE_OK(call(ctx, p));
  CHECK_EQ_U64(*(size_t*)p, cut);
  CHECK(all_bytes(p + cut, room - cut, 0xC3));
  /* Smaller than the field itself: refused, nothing written. */
  memset(p, 0xC3, room);
  *(size_t*)p = 4;
  CHECK_STATUS(call(ctx, p), CUBE_STATUS_INVALID_ARGUMENT, "struct_size 4", "smaller");
  CHECK_EQ_U64(*(size_t*)p, 4);
  CHECK(all_bytes(p + sizeof(size_t), room - sizeof(size_t), 0xC3));
  free(full);
  free(p);
}

static cube_status_t write_report(void* ctx, void* out) {
  return cube_client_memory_report(ctx, out);
}
static cube_status_t write_cache_stats(void* ctx, void* out) {
  (void)ctx;
  return cube_kernel_cache_stats(out);
}
static cube_status_t write_record(void* ctx, void* out) {
  return cube_client_last_collective(ctx, out);
}

CUBE_TEST(output_structs_follow_the_rules) {
  uint64_t seed = test_seed();
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(k_cpu0, &c));
  /* Something in the pools, so that the report has content. */
  cube_handle_t h[3];
  for (int i = 0; i < 3; ++i)
    REQUIRE_OK(cube_client_empty(c, 1 + (size_t)(cube_test_rand(&seed) % 100000), &h[i]));
  check_output_rules("cube_memory_report_t", write_report, c, sizeof(cube_memory_report_t),
                     offsetof(cube_memory_report_t, pools));
  /* The cut report holds what the full one does up to the cut. */
  cube_memory_report_t full = {0}, cut;
  memset(&cut, 0x11, sizeof(cut));
  cut.struct_size = offsetof(cube_memory_report_t, pools);
  REQUIRE_OK(cube_client_memory_report(c, &full));
  REQUIRE_OK(cube_client_memory_report(c, &cut));
  CHECK(full.pool_count > 0 && cut.pool_count == full.pool_count);
  CHECK(full.total.bytes_in_use > 0);

  check_output_rules("cube_kernel_cache_stats_t", write_cache_stats, NULL,
                     sizeof(cube_kernel_cache_stats_t),
                     offsetof(cube_kernel_cache_stats_t, disk_entries));

  /* A collective over cpu:0 alone, so that there is a record. */
  cube_handle_t buf;
  float x[16];
  for (int i = 0; i < 16; ++i) x[i] = (float)(cube_test_rand(&seed) % 1000);
  REQUIRE_OK(cube_client_create_from_slice(c, x, sizeof(x), &buf));
  REQUIRE_OK(cube_client_all_reduce(c, buf, buf, CUBE_DTYPE_F32, 1, &k_cpu0, CUBE_REDUCE_SUM));
  REQUIRE_OK(cube_client_sync_collective(c));
  REQUIRE_OK(cube_client_sync(c));
  check_output_rules("cube_collective_record_t", write_record, c,
                     sizeof(cube_collective_record_t),
                     offsetof(cube_collective_record_t, sequence));
  cube_collective_record_t r = {0};
  REQUIRE_OK(cube_client_last_collective(c, &r));
  CHECK(r.kind == CUBE_COLLECTIVE_ALL_REDUCE && r.bytes == sizeof(x) && r.participants == 1);
  cube_handle_release(buf);
  cube_handle_release_array(h, 3);
  cube_client_release(c);
  cube_shutdown();
}

CUBE_TEST(oom_report_follows_the_output_rules) {
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.memory_limit = 1 << 16;
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_init(k_cpu0, &o, &c));
  cube_handle_t h = CUBE_HANDLE_NULL;
  cube_status_t s = cube_client_empty(c, 1 << 20, &h);
  REQUIRE(cube_status_code(s) == CUBE_STATUS_OUT_OF_MEMORY);
  unsigned char room[sizeof(cube_memory_report_t) + 32];
  cube_memory_report_t* r = (cube_memory_report_t*)room;
  uint64_t requested = 0;
  /* Full. */
  memset(room, 0, sizeof(room));
  CHECK(cube_status_oom_report(s, &requested, r));
  CHECK_EQ_U64(requested, 1 << 20);
  CHECK_EQ_U64(r->struct_size, sizeof(cube_memory_report_t));
  CHECK_EQ_U64(r->memory_limit, 1 << 16);
  /* Larger. */
  memset(room, 0x7E, sizeof(room));
  r->struct_size = sizeof(room);
  CHECK(cube_status_oom_report(s, &requested, r));
  CHECK_EQ_U64(r->struct_size, sizeof(cube_memory_report_t));
  CHECK(all_bytes(room + sizeof(cube_memory_report_t), 32, 0x7E));
  /* Smaller. */
  memset(room, 0x7E, sizeof(room));
  r->struct_size = offsetof(cube_memory_report_t, pools);
  CHECK(cube_status_oom_report(s, &requested, r));
  CHECK_EQ_U64(r->struct_size, offsetof(cube_memory_report_t, pools));
  CHECK(all_bytes(room + offsetof(cube_memory_report_t, pools),
                  sizeof(room) - offsetof(cube_memory_report_t, pools), 0x7E));
  /* Too small for the field: left as it was. */
  memset(room, 0x7E, sizeof(room));
  r->struct_size = 2;
  CHECK(cube_status_oom_report(s, &requested, r));
  CHECK_EQ_U64(r->struct_size, 2);
  CHECK(all_bytes(room + sizeof(size_t), sizeof(room) - sizeof(size_t), 0x7E));
  cube_status_free(s);
  cube_client_release(c);
  cube_shutdown();
}

//===----------------------------------------------------------------------===//
// Structs in library memory, sentinels
//===----------------------------------------------------------------------===//

CUBE_TEST(library_structs_carry_the_library_size) {
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(k_cpu0, &c));
  const cube_device_properties_t* p = cube_client_properties(c);
  const cube_backend_info_t* info = cube_client_info(c);
  REQUIRE(p && info);
  CHECK_EQ_U64(p->struct_size, sizeof(cube_device_properties_t));
  CHECK_EQ_U64(info->struct_size, sizeof(cube_backend_info_t));
  /* Passed back: 0 = this layout, a layout without the hardware fields
   * reads as none. */
  cube_device_properties_t copy = *p;
  cube_dim_t want = cube_dim_for_units(p, 1000);
  copy.struct_size = 0;
  cube_dim_t got = cube_dim_for_units(&copy, 1000);
  CHECK(got.x == want.x && got.y == want.y && got.z == want.z);
  copy.struct_size = offsetof(cube_device_properties_t, hardware);
  got = cube_dim_for_units(&copy, 1000);
  CHECK(got.x == 1 && got.y == 1 && got.z == 1);
  cube_client_release(c);
  cube_shutdown();
}

CUBE_TEST(dead_client_sentinels) {
  CHECK(cube_client_device(NULL).backend == CUBE_BACKEND_NONE);
  CHECK(cube_backend_name(CUBE_BACKEND_NONE) == NULL);
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(k_cpu0, &c));
  CHECK(cube_client_device(c).backend == CUBE_BACKEND_CPU);
  cube_shutdown();
  /* A client from before the shutdown: the sentinel, no pointers. */
  CHECK(cube_client_device(c).backend == CUBE_BACKEND_NONE);
  CHECK(cube_client_info(c) == NULL);
  CHECK(cube_client_properties(c) == NULL);
  CHECK(cube_client_features(c) == NULL);
  CHECK_STATUS(cube_client_sync(c), CUBE_STATUS_FAILED_PRECONDITION, "cube_client_sync",
               "cube_shutdown");
  cube_client_release(c);
  /* Every backend is named, then none: the list ends. */
  int n = 0;
  while (cube_backend_name((cube_backend_t)n)) ++n;
  CHECK_EQ_U64(n, CUBE__BACKEND_COUNT);
  CHECK(cube_dtype_size((cube_dtype_t)CUBE__DTYPE_COUNT) == 0);
  CHECK(cube_reduce_op_name((cube_reduce_op_t)CUBE__REDUCE_OP_COUNT) == NULL);
  CHECK(strcmp(cube_arg_kind_name((cube_arg_kind_t)CUBE__ARG_KIND_COUNT), "unknown") == 0);
  CHECK(strcmp(cube_status_code_name((cube_status_code_t)CUBE__STATUS_CODE_COUNT), "UNKNOWN") == 0);
  CHECK(strcmp(cube_status_code_name(CUBE_STATUS_INTERNAL), "INTERNAL") == 0);
}

//===----------------------------------------------------------------------===//
// cube_status_make and the caller's own statuses
//===----------------------------------------------------------------------===//

static cube_status_t make_v(cube_status_code_t code, const char* fmt, ...) CUBE_PRINTF(2, 3);
static cube_status_t make_v(cube_status_code_t code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  cube_status_t s = cube_status_makev(code, fmt, ap);
  va_end(ap);
  return s;
}

CUBE_TEST(status_make_codes_and_messages) {
  uint64_t seed = test_seed();
  CHECK(cube_status_make(CUBE_STATUS_OK, "ignored %d", 1) == CUBE_OK);
  CHECK(make_v(CUBE_STATUS_OK, "ignored") == CUBE_OK);
  for (int code = 1; code < CUBE__STATUS_CODE_COUNT; ++code) {
    unsigned v = (unsigned)cube_test_rand(&seed);
    char want[64];
    snprintf(want, sizeof(want), "task %u of %s failed", v, cube_status_code_name(code));
    for (int vform = 0; vform < 2; ++vform) {
      cube_status_t s = vform ? make_v((cube_status_code_t)code, "task %u of %s failed", v,
                                       cube_status_code_name(code))
                              : cube_status_make((cube_status_code_t)code, "task %u of %s failed",
                                                 v, cube_status_code_name(code));
      REQUIRE(s != NULL);
      CHECK((int)cube_status_code(s) == code);
      CHECK(strcmp(cube_status_message(s), want) == 0);
      CHECK_EQ_U64(cube_status_count(s), 1);
      cube_status_free(s);
    }
  }
  cube_status_t s = cube_status_make(CUBE_STATUS_ABORTED, NULL);
  CHECK(cube_status_code(s) == CUBE_STATUS_ABORTED && strcmp(cube_status_message(s), "") == 0);
  cube_status_free(s);
  /* Codes that are not codes: an INTERNAL status that says so, keeping the
   * message. */
  const int bad[3] = {CUBE__STATUS_CODE_COUNT, 9999, -3};
  for (int i = 0; i < 3; ++i) {
    char code_word[48];
    snprintf(code_word, sizeof(code_word), "code %d is not a cube_status_code_t", bad[i]);
    CHECK_STATUS(cube_status_make((cube_status_code_t)bad[i], "disk %s full", "/tmp"),
                 CUBE_STATUS_INTERNAL, "cube_status_make", code_word, "disk /tmp full");
    CHECK_STATUS(make_v((cube_status_code_t)bad[i], "x=%d", 41), CUBE_STATUS_INTERNAL, code_word,
                 "x=41");
  }
}

typedef struct {
  cube_status_code_t code;
  char message[96];
  cube_status_t made; /* the object handed back, to compare */
  cube_client_t* client;
  bool work;          /* also queue a launch-free piece of work */
} task_ctx_t;

static cube_status_t my_task(void* user) {
  task_ctx_t* t = user;
  if (t->work) {
    cube_handle_t h;
    uint32_t v = 7;
    cube_status_t s = cube_client_create_from_slice(t->client, &v, sizeof(v), &h);
    if (s) return s;
    cube_handle_release(h);
  }
  t->made = cube_status_make(t->code, "%s", t->message);
  return t->made;
}

/* The three ways a task runs, each in threaded and inline queue mode. */
CUBE_TEST(task_statuses_come_back_intact) {
  uint64_t seed = test_seed();
  setenv("CUBE_CPU_DEVICES", "2", 1);
  cube_client_t* clients[2] = {NULL, NULL};
  REQUIRE_OK(cube_client_load(k_cpu0, &clients[0]));
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.queue_mode = CUBE_QUEUE_INLINE;
  REQUIRE_OK(cube_client_init((cube_device_id_t){CUBE_BACKEND_CPU, 1}, &o, &clients[1]));
  CHECK(!cube_client_is_blocking(clients[0]) && cube_client_is_blocking(clients[1]));
  static const char* const ways[3] = {"exclusive", "profile", "persistent"};
  for (int ci = 0; ci < 2; ++ci) {
    for (int way = 0; way < 3; ++way) {
      for (int round = 0; round < 4; ++round) {
        task_ctx_t t;
        memset(&t, 0, sizeof(t));
        t.client = clients[ci];
        t.work = round & 1;
        /* A random valid code, or (last round) one that is not a code. */
        t.code = round == 3 ? (cube_status_code_t)(100 + cube_test_rand(&seed) % 100)
                            : (cube_status_code_t)(1 + cube_test_rand(&seed) %
                                                           (CUBE__STATUS_CODE_COUNT - 1));
        snprintf(t.message, sizeof(t.message), "%s on cpu:%d: step %llu of the model failed",
                 ways[way], ci, (unsigned long long)(cube_test_rand(&seed) % 100000));
        cube_profile_duration_t d;
        memset(&d, 0xD1, sizeof(d));
        cube_status_t s = way == 0   ? cube_client_exclusive(clients[ci], my_task, &t)
                          : way == 1 ? cube_client_profile(clients[ci], my_task, &t, "mine", &d)
                                     : cube_client_memory_persistent_allocation(clients[ci],
                                                                                my_task, &t);
        REQUIRE(s != NULL);
        CHECK(s == t.made); /* the same object */
        if (round == 3) {
          CHECK(cube_status_code(s) == CUBE_STATUS_INTERNAL);
          CHECK(strstr(cube_status_message(s), t.message) != NULL);
        } else {
          CHECK(cube_status_code(s) == t.code);
          CHECK(strcmp(cube_status_message(s), t.message) == 0);
        }
        CHECK_EQ_U64(cube_status_count(s), 1);
        if (way == 1) CHECK(all_bytes(&d, sizeof(d), 0xD1)); /* not written on failure */
        cube_status_free(s);
        /* Nothing was left on the stream. */
        CHECK_OK(cube_client_sync(clients[ci]));
      }
    }
  }
  cube_client_release(clients[0]);
  cube_client_release(clients[1]);
  cube_shutdown();
}
