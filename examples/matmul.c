/* matmul: C = A * B with square tiles in cube-local memory and sync_cube,
 * checked against a naive host product (relative error < 1e-5). */
#include <math.h>

#include "example_util.h"

static const char* source =
    "CUBE_KERNEL(matmul, CUBE_ARRAY(const float, a), CUBE_ARRAY(const float, b),\n"
    "            CUBE_ARRAY(float, c), uint32_t m, uint32_t n, uint32_t k) {\n"
    "  CUBE_SHARED(float, ta, TILE * TILE);\n"
    "  CUBE_SHARED(float, tb, TILE * TILE);\n"
    "  uint32_t tx = UNIT_POS_X, ty = UNIT_POS_Y;\n"
    "  uint32_t row = CUBE_POS_Y * TILE + ty, col = CUBE_POS_X * TILE + tx;\n"
    "  float acc = 0.0f;\n"
    "  for (uint32_t t = 0; t < k; t += TILE) {\n"
    "    ta[ty * TILE + tx] = (row < m && t + tx < k) ? a[(uint64_t)row * k + t + tx] : 0.0f;\n"
    "    tb[ty * TILE + tx] = (t + ty < k && col < n) ? b[(uint64_t)(t + ty) * n + col] : 0.0f;\n"
    "    sync_cube();\n"
    "    for (uint32_t q = 0; q < TILE; ++q) acc += ta[ty * TILE + q] * tb[q * TILE + tx];\n"
    "    sync_cube();\n"
    "  }\n"
    "  if (row < m && col < n) CUBE_STORE(c, (uint64_t)row * n + col, acc);\n"
    "}\n";

int main(void) {
  enum { M = 129, N = 97, K = 211, TILE = 16 };
  float* a = malloc(M * K * sizeof(float));
  float* b = malloc(K * N * sizeof(float));
  uint64_t seed = 3;
  for (int i = 0; i < M * K; ++i) a[i] = example_rand(&seed);
  for (int i = 0; i < K * N; ++i) b[i] = example_rand(&seed);

  cube_client_t* c;
  TRY(cube_client_load((cube_device_id_t){cube_backend_default(), 0}, &c));
  cube_define_t defs[] = {{"TILE", "16"}};
  cube_kernel_desc_t desc = {.cube_dim = {TILE, TILE, 1}, .source = source, .entry = "matmul",
                             .defines = defs, .define_count = 1};
  cube_kernel_t* kern;
  TRY(cube_kernel_create(&desc, &kern));
  cube_handle_t ha, hb, hc;
  TRY(cube_client_create_from_slice(c, a, M * K * sizeof(float), &ha));
  TRY(cube_client_create_from_slice(c, b, K * N * sizeof(float), &hb));
  TRY(cube_client_empty(c, M * N * sizeof(float), &hc));
  cube_arg_t args[] = {cube_arg_buffer(ha), cube_arg_buffer(hb), cube_arg_buffer(hc),
                       cube_arg_u32(M), cube_arg_u32(N), cube_arg_u32(K)};
  TRY(cube_client_launch(c, kern, cube_count_static((N + TILE - 1) / TILE, (M + TILE - 1) / TILE, 1),
                         6, args));
  cube_bytes_t* out;
  TRY(cube_client_read_one(c, hc, &out));
  const float* r = cube_bytes_const_data(out);
  double max_rel = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0, mag = 0;
      for (int q = 0; q < K; ++q) s += (double)a[i * K + q] * b[q * N + j], mag += fabs((double)a[i * K + q] * b[q * N + j]);
      double rel = fabs(r[i * N + j] - s) / (mag > 0 ? mag : 1);
      if (rel > max_rel) max_rel = rel;
    }
  int ok = max_rel < 1e-5;
  printf("matmul %dx%dx%d: max relative error %.2e: %s\n", M, N, K, max_rel, ok ? "ok" : "WRONG");
  cube_bytes_release(out);
  cube_handle_release(ha);
  cube_handle_release(hb);
  cube_handle_release(hc);
  cube_kernel_release(kern);
  cube_client_release(c);
  cube_shutdown();
  free(a);
  free(b);
  return !ok;
}
