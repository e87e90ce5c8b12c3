// cube-test-libs: cube_static
/* The deprecated names (kept one release after their rename) still work and
 * agree with their replacements. This is the one file that calls them: it is
 * compiled with -Wno-deprecated-declarations (tests/CMakeLists.txt); anywhere
 * else a call warns (tests/install/headers.cmake checks that it does).
 *
 *   cube_device_count        -> cube_enumerate_devices(backend, NULL, 0, &n)
 *   cube_device_count_total  -> cube_enumerate_all_devices(NULL, 0, &n)
 *   cube_layout_desc_init    -> cube_layout_desc_initialize
 *   cube_kernel_precompile   -> cube_client_precompile
 *   cube_stream_create_id    -> cube_stream_id_new
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cube/cube.h"

CUBE_TEST(device_counts) {
  setenv("CUBE_CPU_DEVICES", "3", 1);
  setenv("CUBE_NULL_DEVICES", "2", 1);
  size_t total = 0;
  for (int b = 0; cube_backend_name((cube_backend_t)b); ++b) {
    size_t n = 99;
    REQUIRE_OK(cube_enumerate_devices((cube_backend_t)b, NULL, 0, &n));
    CHECK_EQ_U64(cube_device_count((cube_backend_t)b), n);
    total += n;
  }
  CHECK_EQ_U64(cube_device_count(CUBE_BACKEND_CPU), 3);
  CHECK_EQ_U64(cube_device_count(CUBE_BACKEND_NULL), 2);
  CHECK_EQ_U64(cube_device_count_total(), total);
  size_t all = 0;
  REQUIRE_OK(cube_enumerate_all_devices(NULL, 0, &all));
  CHECK_EQ_U64(cube_device_count_total(), all);
  /* Invalid values: 0, as before. */
  CHECK_EQ_U64(cube_device_count((cube_backend_t)9), 0);
  CHECK_EQ_U64(cube_device_count(CUBE_BACKEND_NONE), 0);
  cube_shutdown();
}

CUBE_TEST(layout_desc_init) {
  uint64_t seed = 0x1234567ull;
  for (int round = 0; round < 50; ++round) {
    uint32_t rank = (uint32_t)(cube_test_rand(&seed) % (CUBE_MAX_RANK + 2)); /* some too big */
    uint64_t shape[CUBE_MAX_RANK + 2];
    for (uint32_t k = 0; k < rank; ++k) shape[k] = cube_test_rand(&seed) % 6; /* some zero */
    uint32_t elem = (uint32_t)(cube_test_rand(&seed) % 5);                    /* some zero */
    cube_layout_strategy_t s = (cube_layout_strategy_t)(cube_test_rand(&seed) % 3);
    cube_layout_desc_t a, b;
    memset(&a, 0x3C, sizeof(a));
    memset(&b, 0x3C, sizeof(b));
    cube_status_t sa = cube_layout_desc_init(s, rank, shape, elem, &a);
    cube_status_t sb = cube_layout_desc_initialize(s, rank, shape, elem, &b);
    CHECK(cube_status_code(sa) == cube_status_code(sb));
    /* The old name answers as the new one, whose name its messages carry. */
    CHECK(strcmp(cube_status_message(sa), cube_status_message(sb)) == 0);
    if (sa) CHECK(strstr(cube_status_message(sa), "cube_layout_desc_initialize") != NULL);
    CHECK(memcmp(&a, &b, sizeof(a)) == 0);
    if (!sa) CHECK_EQ_U64(a.struct_size, sizeof(cube_layout_desc_t));
    cube_status_free(sa);
    cube_status_free(sb);
  }
}

CUBE_TEST(kernel_precompile) {
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &c));
  cube_kernel_desc_t d;
  cube_kernel_desc_initialize(&d);
  d.source =
      "CUBE_KERNEL(twice, CUBE_ARRAY(float, x)) {\n"
      "  uint64_t i = ABSOLUTE_POS;\n"
      "  if (i < CUBE_LEN(x)) CUBE_STORE(x, i, 2.0f * CUBE_LOAD(x, i));\n"
      "}\n";
  d.entry = "twice";
  cube_kernel_t* k = NULL;
  REQUIRE_OK(cube_kernel_create(&d, &k));
  CHECK_OK(cube_kernel_precompile(c, 1, &k, CUBE_EXEC_CHECKED));
  CHECK_OK(cube_client_precompile(c, 1, &k, CUBE_EXEC_CHECKED));
  /* Bad input answers with the new name. */
  CHECK_STATUS(cube_kernel_precompile(c, 1, NULL, CUBE_EXEC_CHECKED),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_client_precompile", "kernels is NULL");
  CHECK_STATUS(cube_kernel_precompile(NULL, 0, NULL, CUBE_EXEC_CHECKED),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_client_precompile", "client is NULL");
  /* The kernel precompiled through the old name runs. */
  float x[64];
  for (int i = 0; i < 64; ++i) x[i] = (float)i - 20.5f;
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, x, sizeof(x), &h));
  cube_arg_t arg = cube_arg_buffer(h);
  CHECK_OK(cube_client_launch(c, k, cube_count_static(64, 1, 1), 1, &arg));
  cube_bytes_t* out = NULL;
  CHECK_OK(cube_client_read_one(c, h, &out));
  if (out) {
    const float* y = cube_bytes_const_data(out);
    bool ok = true;
    for (int i = 0; i < 64; ++i) ok = ok && y[i] == 2.0f * x[i];
    CHECK(ok);
  }
  cube_bytes_release(out);
  cube_handle_release(h);
  cube_kernel_release(k);
  cube_client_release(c);
  cube_shutdown();
}

CUBE_TEST(stream_create_id) {
  /* Both draw fresh ids from one counter: all distinct, none the thread's. */
  cube_stream_id_t mine = cube_stream_current();
  cube_stream_id_t ids[20];
  for (int i = 0; i < 20; ++i) ids[i] = i % 2 ? cube_stream_create_id() : cube_stream_id_new();
  for (int i = 0; i < 20; ++i) {
    CHECK(ids[i] != mine);
    for (int j = 0; j < i; ++j) CHECK(ids[i] != ids[j]);
  }
  /* A client pinned to one works on it. */
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &c));
  cube_client_set_stream(c, ids[1]);
  CHECK_EQ_U64(cube_client_stream(c), ids[1]);
  uint32_t v = 0xC0FFEEu;
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, &v, sizeof(v), &h));
  uint32_t back = 0;
  CHECK_OK(cube_client_read_into(c, h, &back, sizeof(back)));
  CHECK_EQ_U64(back, v);
  cube_handle_release(h);
  cube_client_release(c);
  cube_shutdown();
}
