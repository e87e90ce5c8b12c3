/* reduce: a sum with cube-local memory and sync_cube (each cube sums a chunk
 * of 1024 elements: its units stride over the chunk, then a tree in
 * cube-local memory; the partial sums are finished on the host), checked
 * against a double sum. The cube dim is tuned (cube/tune.h): candidates of
 * 64, 128, 256 and 512 units per cube compute the same partial sums; the
 * first run tunes the size bucket, later runs find the result in the kernel
 * cache directory. */
#include <math.h>

#include "example_util.h"

static const char* source =
    "CUBE_KERNEL(chunk_sum, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, partial),\n"
    "            uint32_t n) {\n"
    "  CUBE_SHARED(float, tile, BLOCK);\n"
    "  uint32_t u = UNIT_POS_X;\n"
    "  uint64_t base = (uint64_t)CUBE_POS_X * CHUNK;\n"
    "  float s = 0.0f;\n"
    "  for (uint32_t j = u; j < CHUNK; j += BLOCK) {\n"
    "    uint64_t i = base + j;\n"
    "    if (i < n) s += x[i];\n"
    "  }\n"
    "  tile[u] = s;\n"
    "  sync_cube();\n"
    "  for (uint32_t h = BLOCK / 2; h > 0; h >>= 1) {\n"
    "    if (u < h) tile[u] += tile[u + h];\n"
    "    sync_cube();\n"
    "  }\n"
    "  if (u == 0) partial[CUBE_POS_X] = tile[0];\n"
    "}\n";

enum { CHUNK = 1024, CANDIDATES = 4 };
static const uint32_t blocks[CANDIDATES] = {64, 128, 256, 512};
static const char* const names[CANDIDATES] = {"dim64", "dim128", "dim256", "dim512"};

/* Arguments: x, partial, n. */
static cube_status_t count(void* user, size_t n, const cube_arg_t* args, cube_count_t* out) {
  (void)user;
  (void)n;
  *out = cube_count_static((args[2].v.u32 + CHUNK - 1) / CHUNK, 1, 1);
  return CUBE_OK;
}

static cube_status_t valid(void* user, const cube_device_properties_t* props, size_t n,
                           const cube_arg_t* args) {
  (void)n;
  (void)args;
  uint32_t units = *(const uint32_t*)user;
  if (units > props->hardware.max_units_per_cube || units > props->hardware.max_cube_dim[0])
    return cube_status_make(CUBE_STATUS_UNSUPPORTED, "%u units per cube: the device allows %u",
                            units, props->hardware.max_units_per_cube);
  return CUBE_OK;
}

static cube_status_t key(void* user, const cube_device_properties_t* props, size_t n,
                         const cube_arg_t* args, cube_tune_key_t* out) {
  (void)user;
  (void)props;
  (void)n;
  out->count = 1;
  out->values[0] = cube_tune_anchor(args[2].v.u32, 0);
  return CUBE_OK;
}

int main(void) {
  enum { N = 1 << 20, PARTS = N / CHUNK };
  float* x = malloc(N * sizeof(float));
  uint64_t seed = 7;
  double expect = 0;
  for (int i = 0; i < N; ++i) expect += x[i] = example_rand(&seed);

  cube_client_t* c;
  TRY(cube_client_load((cube_device_id_t){cube_backend_default(), 0}, &c));
  cube_kernel_t* k[CANDIDATES];
  cube_tune_candidate_t cands[CANDIDATES];
  for (int i = 0; i < CANDIDATES; ++i) {
    char b[8], ch[8];
    snprintf(b, sizeof(b), "%u", blocks[i]);
    snprintf(ch, sizeof(ch), "%u", (unsigned)CHUNK);
    cube_define_t defs[] = {{"BLOCK", b}, {"CHUNK", ch}};
    cube_kernel_desc_t desc = {.cube_dim = {blocks[i], 1, 1}, .source = source,
                               .entry = "chunk_sum", .defines = defs, .define_count = 2};
    TRY(cube_kernel_create(&desc, &k[i]));
    cands[i] = (cube_tune_candidate_t){names[i], k[i], count, valid, (void*)&blocks[i]};
  }
  cube_tune_op_desc_t od;
  cube_tune_op_desc_initialize(&od);
  od.name = "example_reduce";
  od.version = "1";
  od.candidates = cands;
  od.candidate_count = CANDIDATES;
  od.key = key;
  od.reference = 2; /* 256 units: the untuned example's cube */
  od.default_candidate = 2;
  od.outputs = 1u << 1;
  od.compare = CUBE_TUNE_COMPARE_F32; /* the order of the additions differs */
  od.rtol = 1e-4;
  od.atol = 1e-4;
  od.budget_s = 1.0;
  cube_tune_op_t* op;
  TRY(cube_tune_op_create(&od, &op));
  for (int i = 0; i < CANDIDATES; ++i) cube_kernel_release(k[i]); /* the operation holds them */

  cube_handle_t hx, hp;
  TRY(cube_client_create_from_slice(c, x, N * sizeof(float), &hx));
  TRY(cube_client_empty(c, PARTS * sizeof(float), &hp));
  cube_arg_t args[] = {cube_arg_buffer(hx), cube_arg_buffer(hp), cube_arg_u32(N)};
  TRY(cube_tune_op_launch(op, c, 3, args));
  cube_bytes_t* out;
  TRY(cube_client_read_one(c, hp, &out));
  double got = 0;
  for (int i = 0; i < PARTS; ++i) got += ((const float*)cube_bytes_const_data(out))[i];
  int ok = fabs(got - expect) <= 1e-3 * (1 + fabs(expect));
  printf("sum of %d floats: %.6f (host %.6f): %s\n", N, got, expect, ok ? "ok" : "WRONG");
  cube_tune_record_t rec;
  rec.struct_size = sizeof(rec);
  cube_status_t st = cube_tune_op_record(op, c, 3, args, &rec);
  if (!st) {
    printf("cube dim for %u elements (%s): %s\n", (unsigned)N,
           rec.origin == CUBE_TUNE_ORIGIN_DISK ? "from the cache directory" : "tuned now",
           names[rec.winner]);
    for (uint32_t i = 0; i < rec.candidate_count; ++i)
      printf("  %-7s %-12s median %9.1f us%s%s\n", names[i],
             cube_tune_outcome_name(rec.results[i].outcome), rec.results[i].median_ns / 1e3,
             rec.results[i].reason[0] ? "  " : "", rec.results[i].reason);
  } else {
    printf("not tuned: %s\n", cube_status_message(st));
    cube_status_free(st);
  }
  cube_bytes_release(out);
  cube_handle_release(hx);
  cube_handle_release(hp);
  cube_tune_op_release(op);
  cube_client_release(c);
  cube_shutdown();
  free(x);
  return !ok;
}
