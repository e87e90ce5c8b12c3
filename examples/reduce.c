/* reduce: a sum with cube-local memory and sync_cube (a tree reduction per
 * cube, then the partial sums on the host), checked against a double sum. */
#include <math.h>

#include "example_util.h"

static const char* source =
    "CUBE_KERNEL(block_sum, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, partial)) {\n"
    "  CUBE_SHARED(float, tile, BLOCK);\n"
    "  uint32_t u = UNIT_POS_X;\n"
    "  uint64_t i = ABSOLUTE_POS_X;\n"
    "  tile[u] = i < CUBE_LEN(x) ? x[i] : 0.0f;\n"
    "  sync_cube();\n"
    "  for (uint32_t s = BLOCK / 2; s > 0; s >>= 1) {\n"
    "    if (u < s) tile[u] += tile[u + s];\n"
    "    sync_cube();\n"
    "  }\n"
    "  if (u == 0) partial[CUBE_POS_X] = tile[0];\n"
    "}\n";

int main(void) {
  enum { N = 1 << 20, BLOCK = 256, CUBES = N / BLOCK };
  float* x = malloc(N * sizeof(float));
  uint64_t seed = 7;
  double expect = 0;
  for (int i = 0; i < N; ++i) expect += x[i] = example_rand(&seed);

  cube_client_t* c;
  TRY(cube_client_load((cube_device_id_t){cube_backend_default(), 0}, &c));
  cube_define_t defs[] = {{"BLOCK", "256"}};
  cube_kernel_desc_t desc = {.cube_dim = {BLOCK, 1, 1}, .source = source, .entry = "block_sum",
                             .defines = defs, .define_count = 1};
  cube_kernel_t* k;
  TRY(cube_kernel_create(&desc, &k));
  cube_handle_t hx, hp;
  TRY(cube_client_create_from_slice(c, x, N * sizeof(float), &hx));
  TRY(cube_client_empty(c, CUBES * sizeof(float), &hp));
  cube_arg_t args[] = {cube_arg_buffer(hx), cube_arg_buffer(hp)};
  TRY(cube_client_launch(c, k, cube_count_static(CUBES, 1, 1), 2, args));
  cube_bytes_t* out;
  TRY(cube_client_read_one(c, hp, &out));
  double got = 0;
  for (int i = 0; i < CUBES; ++i) got += ((const float*)cube_bytes_const_data(out))[i];
  int ok = fabs(got - expect) <= 1e-3 * (1 + fabs(expect));
  printf("sum of %d floats: %.6f (host %.6f): %s\n", N, got, expect, ok ? "ok" : "WRONG");
  cube_bytes_release(out);
  cube_handle_release(hx);
  cube_handle_release(hp);
  cube_kernel_release(k);
  cube_client_release(c);
  cube_shutdown();
  free(x);
  return !ok;
}
