// cube-test-libs: cube_static
/* The CUDA backend where there may be no GPU: the driver is loaded with
 * dlopen, so a machine without one (CI) gets "unavailable" with the reason and
 * the rest of cube keeps working. On a machine with a GPU the same file checks
 * the properties read off the device. Each case runs in its own process (the
 * driver is loaded once per process), so each may point CUBE_CUDA_DRIVER
 * somewhere else. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backends/backend.h"
#include "check.h"
#include "cube/cube.h"

static const cube_device_id_t cuda0 = {CUBE_BACKEND_CUDA, 0};

/* The CPU backend still uploads and reads back random bytes. */
static void check_cpu_works(void) {
  cube_client_t* c = NULL;
  cube_device_id_t cpu0 = {CUBE_BACKEND_CPU, 0};
  REQUIRE_OK(cube_client_load(cpu0, &c));
  unsigned char data[1001];
  srand(7);
  for (size_t i = 0; i < sizeof(data); ++i) data[i] = (unsigned char)rand();
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(c, data, sizeof(data), &h));
  cube_bytes_t* b = NULL;
  CHECK_OK(cube_client_read_one(c, h, &b));
  CHECK(b && cube_bytes_size(b) == sizeof(data) &&
        memcmp(cube_bytes_const_data(b), data, sizeof(data)) == 0);
  cube_bytes_release(b);
  cube_handle_release(h);
  cube_client_release(c);
}

/* Skips the case when this library was built without the backend (its
 * headers were absent): there is nothing to be unavailable. Asked of the
 * registry, which loads no driver (the case sets the driver's path first). */
#define REQUIRE_BUILT_IN(backend)                                              \
  do {                                                                         \
    if (!cube__backend_get(backend))                                           \
      CUBE_SKIP("the backend is not built into this library");                \
  } while (0)

CUBE_TEST(unavailable_without_driver) {
  REQUIRE_BUILT_IN(CUBE_BACKEND_CUDA);
  setenv("CUBE_CUDA_DRIVER", "/nonexistent/cube-test/libcuda.so.1", 1);
  cube_status_t s = cube_backend_status(CUBE_BACKEND_CUDA);
  CHECK(cube_status_code(s) == CUBE_STATUS_UNAVAILABLE);
  CHECK(s && strstr(cube_status_message(s), "/nonexistent/cube-test/libcuda.so.1") != NULL);
  CHECK(s && strstr(cube_status_message(s), "could not be loaded") != NULL);
  cube_status_free(s);
  CHECK_EQ_U64(cube_test_device_count(CUBE_BACKEND_CUDA), 0);
  cube_client_t* c = NULL;
  CHECK_STATUS(cube_client_load(cuda0, &c), CUBE_STATUS_UNAVAILABLE, "cuda", "libcuda.so.1");
  CHECK(c == NULL);
  /* Asking twice gives the same answer (the load is attempted once). */
  CHECK_STATUS(cube_client_load(cuda0, &c), CUBE_STATUS_UNAVAILABLE, "could not be loaded");
  check_cpu_works();
  cube_shutdown();
}

CUBE_TEST(unavailable_with_stub_library) {
  REQUIRE_BUILT_IN(CUBE_BACKEND_CUDA);
  const char* stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (access(stub, R_OK) != 0) stub = "/usr/local/cuda/lib/stubs/libcuda.so";
  if (access(stub, R_OK) != 0) CUBE_SKIP("no CUDA toolkit stub library here");
  setenv("CUBE_CUDA_DRIVER", stub, 1);
  cube_status_t s = cube_backend_status(CUBE_BACKEND_CUDA);
  CHECK(cube_status_code(s) == CUBE_STATUS_UNAVAILABLE);
  CHECK(s && strstr(cube_status_message(s), "STUB") != NULL);
  if (s) fprintf(stderr, "stub: %s\n", cube_status_message(s));
  cube_status_free(s);
  CHECK_EQ_U64(cube_test_device_count(CUBE_BACKEND_CUDA), 0);
  check_cpu_works();
  cube_shutdown();
}

/* With the real driver: a GPU is described by what the device says, and no
 * GPU is a clean "unavailable". */
CUBE_TEST(real_driver_state) {
  cube_status_t s = cube_backend_status(CUBE_BACKEND_CUDA);
  if (s) {
    CHECK(cube_status_code(s) == CUBE_STATUS_UNAVAILABLE);
    CHECK(strlen(cube_status_message(s)) > 20);
    fprintf(stderr, "no GPU here: %s\n", cube_status_message(s));
    cube_status_free(s);
    CHECK_EQ_U64(cube_test_device_count(CUBE_BACKEND_CUDA), 0);
    check_cpu_works();
    cube_shutdown();
    return;
  }
  size_t n = cube_test_device_count(CUBE_BACKEND_CUDA);
  CHECK(n >= 1);
  for (uint32_t i = 0; i < n; ++i) {
    cube_client_t* c = NULL;
    cube_device_id_t id = {CUBE_BACKEND_CUDA, i};
    REQUIRE_OK(cube_client_load(id, &c));
    const cube_device_properties_t* p = cube_client_properties(c);
    CHECK(strncmp(p->name, "cuda", 4) == 0);
    CHECK_EQ_U64(p->memory.alignment, 512);
    CHECK(p->layout_policy == CUBE_LAYOUT_POLICY_PITCHED);
    CHECK(p->memory.total_memory >= (1ull << 30));
    CHECK(p->memory.max_page_size <= p->memory.total_memory / 4);
    CHECK_EQ_U64(p->hardware.plane_size_min, 32);
    CHECK(p->hardware.num_streaming_multiprocessors > 0);
    CHECK(p->hardware.max_units_per_cube >= 256);
    CHECK(p->timing_method == CUBE_TIMING_DEVICE);
    const cube_features_t* f = cube_client_features(c);
    CHECK(!(f->bits & CUBE_FEATURE_NATIVE_KERNELS));
    CHECK(f->bits & CUBE_FEATURE_PINNED_STAGING);
    fprintf(stderr, "%s: %llu SMs, %.1f GiB\n", p->name,
            (unsigned long long)p->hardware.num_streaming_multiprocessors,
            (double)p->memory.total_memory / (1u << 30));
    cube_client_release(c);
  }
  cube_shutdown();
}
