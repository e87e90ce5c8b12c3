/* matmul: C = A * B with square tiles in cube-local memory and sync_cube, as a
 * tunable operation (examples/tuned_matmul.h: tiles of 8, 16 and 32, vector
 * widths 1, 2 and 4). The first launch of a shape tunes it (or finds the
 * result of an earlier run in the kernel cache directory); the example prints
 * each candidate's outcome and checks the product against a naive host one
 * (relative error < 1e-5). CUBE_TUNE=off launches the default candidate. */
#include <math.h>

#include "example_util.h"
#include "tuned_matmul.h"

int main(void) {
  enum { M = 129, N = 97, K = 211 };
  float* a = malloc(M * K * sizeof(float));
  float* b = malloc(K * N * sizeof(float));
  uint64_t seed = 3;
  for (int i = 0; i < M * K; ++i) a[i] = example_rand(&seed);
  for (int i = 0; i < K * N; ++i) b[i] = example_rand(&seed);

  cube_client_t* c;
  TRY(cube_client_load((cube_device_id_t){cube_backend_default(), 0}, &c));
  cube_tune_op_t* op;
  TRY(tuned_matmul_create(1.0, &op, NULL)); /* at most 1 s of measuring per shape */
  cube_handle_t ha, hb, hc;
  TRY(cube_client_create_from_slice(c, a, M * K * sizeof(float), &ha));
  TRY(cube_client_create_from_slice(c, b, K * N * sizeof(float), &hb));
  TRY(cube_client_empty(c, M * N * sizeof(float), &hc));
  cube_arg_t args[] = {cube_arg_buffer(ha), cube_arg_buffer(hb), cube_arg_buffer(hc),
                       cube_arg_u32(M), cube_arg_u32(N), cube_arg_u32(K)};
  TRY(cube_tune_op_launch(op, c, 6, args));
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

  /* What the tuning found (NOT_FOUND with CUBE_TUNE=off: nothing was tuned). */
  cube_tune_record_t rec;
  rec.struct_size = sizeof(rec);
  cube_status_t st = cube_tune_op_record(op, c, 6, args, &rec);
  if (!st) {
    printf("tuned for the shape bucket %llux%llux%llu (%s, %.2f s): winner %s\n",
           (unsigned long long)rec.key.values[0], (unsigned long long)rec.key.values[1],
           (unsigned long long)rec.key.values[2],
           rec.origin == CUBE_TUNE_ORIGIN_DISK ? "from the cache directory" : "measured now",
           rec.tuning_s, tuned_matmul_variants[rec.winner].name);
    for (uint32_t i = 0; i < rec.candidate_count; ++i) {
      const cube_tune_result_t* x = &rec.results[i];
      printf("  %-6s %-12s", tuned_matmul_variants[i].name, cube_tune_outcome_name(x->outcome));
      if (x->samples) printf(" median %9.1f us over %u samples", x->median_ns / 1e3, x->samples);
      if (x->reason[0]) printf("  (%s)", x->reason);
      printf("\n");
    }
  } else {
    printf("not tuned: %s\n", cube_status_message(st));
    cube_status_free(st);
  }
  cube_bytes_release(out);
  cube_handle_release(ha);
  cube_handle_release(hb);
  cube_handle_release(hc);
  cube_tune_op_release(op);
  cube_client_release(c);
  cube_shutdown();
  free(a);
  free(b);
  return !ok;
}
