/* saxpy: y = a * x + y with a kernel written in the cube dialect, compiled by
 * the backend at first launch (and cached), checked against a host loop. */
#include <math.h>
#include <string.h>

#include "example_util.h"

static const char* source =
    "CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(y)) CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "}\n";

int main(void) {
  enum { N = 1000003, DIM = 256 };
  float* x = malloc(N * sizeof(float));
  float* y = malloc(N * sizeof(float));
  uint64_t seed = 42;
  for (int i = 0; i < N; ++i) x[i] = example_rand(&seed), y[i] = example_rand(&seed);

  cube_client_t* c;
  TRY(cube_client_load((cube_device_id_t){cube_backend_default(), 0}, &c));
  cube_kernel_desc_t desc = {.cube_dim = {DIM, 1, 1}, .source = source, .entry = "saxpy"};
  cube_kernel_t* k;
  TRY(cube_kernel_create(&desc, &k));
  cube_handle_t hx, hy;
  TRY(cube_client_create_from_slice(c, x, N * sizeof(float), &hx));
  TRY(cube_client_create_from_slice(c, y, N * sizeof(float), &hy));
  cube_arg_t args[] = {cube_arg_buffer(hx), cube_arg_buffer(hy), cube_arg_f32(2.5f)};
  TRY(cube_client_launch(c, k, cube_count_static((N + DIM - 1) / DIM, 1, 1), 3, args));
  cube_bytes_t* out;
  TRY(cube_client_read_one(c, hy, &out));
  const float* r = cube_bytes_const_data(out);
  /* The compiled kernel may fuse a * x + y into one FMA (one rounding instead
   * of two), so compare within an ulp-sized tolerance. */
  int bad = 0;
  for (int i = 0; i < N; ++i) {
    float e = 2.5f * x[i] + y[i];
    bad += fabsf(r[i] - e) > 1e-6f * (1.0f + fabsf(e));
  }
  printf("saxpy over %d floats on %s: %d mismatches\n", N, cube_client_properties(c)->name, bad);
  cube_bytes_release(out);
  cube_handle_release(hx);
  cube_handle_release(hy);
  cube_kernel_release(k);
  cube_client_release(c);
  cube_shutdown();
  free(x);
  free(y);
  return bad != 0;
}
