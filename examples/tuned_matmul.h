/* A tunable matmul (cube/tune.h, docs/autotune.md): C = A * B over row-major
 * floats, with square tiles of A and B in cube-local memory, in candidates
 * that differ by the tile (TILE: 8, 16, 32) and by the vector width (VW: how
 * many neighbouring columns of C each unit computes: 1, 2, 4). Each
 * candidate's cube is TILE/VW x TILE units. The key is the three sizes
 * anchored to powers of two; a candidate whose cube has more units than the
 * device allows is not valid there. Candidate 2 (TILE 16, VW 1: the kernel of
 * the untuned example) is the default and the reference the others are
 * checked against.
 *
 * Shared by examples/matmul.c and bench/bench_dialect.c (section 6). Every
 * function returns a status; nothing here aborts. */
#ifndef CUBE_EXAMPLE_TUNED_MATMUL_H_
#define CUBE_EXAMPLE_TUNED_MATMUL_H_

#include <cube/cube.h>
#include <stdio.h>

/* Only scalar locals, and barriers at the top level or in loops over
 * uniform values: the CPU backend runs it split at its barriers
 * (docs/dialect.md). acc1..acc3 are used only when VW is large enough. */
static const char* const tuned_matmul_source =
    "CUBE_KERNEL(matmul, CUBE_ARRAY(const float, a), CUBE_ARRAY(const float, b),\n"
    "            CUBE_ARRAY(float, c), uint32_t m, uint32_t n, uint32_t k) {\n"
    "  CUBE_SHARED(float, ta, TILE * TILE);\n"
    "  CUBE_SHARED(float, tb, TILE * TILE);\n"
    "  uint32_t tx = UNIT_POS_X, ty = UNIT_POS_Y;\n"
    "  uint32_t row = CUBE_POS_Y * TILE + ty, col = CUBE_POS_X * TILE + tx * VW;\n"
    "  float acc0 = 0.0f, acc1 = 0.0f, acc2 = 0.0f, acc3 = 0.0f;\n"
    "  for (uint32_t t = 0; t < k; t += TILE) {\n"
    "    for (uint32_t v = 0; v < VW; ++v) {\n"
    "      uint32_t x = tx * VW + v;\n"
    "      ta[ty * TILE + x] = (row < m && t + x < k) ? a[(uint64_t)row * k + t + x] : 0.0f;\n"
    "      tb[ty * TILE + x] =\n"
    "          (t + ty < k && col + v < n) ? b[(uint64_t)(t + ty) * n + col + v] : 0.0f;\n"
    "    }\n"
    "    sync_cube();\n"
    "    for (uint32_t q = 0; q < TILE; ++q) {\n"
    "      float av = ta[ty * TILE + q];\n"
    "      uint32_t bq = q * TILE + tx * VW;\n"
    "      acc0 += av * tb[bq];\n"
    "      if (VW > 1) acc1 += av * tb[bq + 1];\n"
    "      if (VW > 2) {\n"
    "        acc2 += av * tb[bq + 2];\n"
    "        acc3 += av * tb[bq + 3];\n"
    "      }\n"
    "    }\n"
    "    sync_cube();\n"
    "  }\n"
    "  if (row < m) {\n"
    "    uint64_t o = (uint64_t)row * n + col;\n"
    "    if (col < n) CUBE_STORE(c, o, acc0);\n"
    "    if (VW > 1 && col + 1 < n) CUBE_STORE(c, o + 1, acc1);\n"
    "    if (VW > 2 && col + 2 < n) CUBE_STORE(c, o + 2, acc2);\n"
    "    if (VW > 2 && col + 3 < n) CUBE_STORE(c, o + 3, acc3);\n"
    "  }\n"
    "}\n";

typedef struct tuned_matmul_variant {
  const char* name;
  uint32_t tile, vw;
} tuned_matmul_variant_t;

enum { TUNED_MATMUL_CANDIDATES = 7, TUNED_MATMUL_DEFAULT = 2 };

static const tuned_matmul_variant_t tuned_matmul_variants[TUNED_MATMUL_CANDIDATES] = {
    {"t8v1", 8, 1},   {"t8v2", 8, 2},   {"t16v1", 16, 1}, {"t16v2", 16, 2},
    {"t16v4", 16, 4}, {"t32v2", 32, 2}, {"t32v4", 32, 4},
};

/* Arguments: a, b, c, m, n, k. */
static cube_status_t tuned_matmul_count(void* user, size_t n, const cube_arg_t* args,
                                        cube_count_t* out) {
  (void)n;
  const tuned_matmul_variant_t* v = user;
  uint32_t rows = args[3].v.u32, cols = args[4].v.u32;
  *out = cube_count_static((cols + v->tile - 1) / v->tile, (rows + v->tile - 1) / v->tile, 1);
  return CUBE_OK;
}

static cube_status_t tuned_matmul_valid(void* user, const cube_device_properties_t* props,
                                        size_t n, const cube_arg_t* args) {
  (void)n;
  (void)args;
  const tuned_matmul_variant_t* v = user;
  uint32_t units = v->tile / v->vw * v->tile;
  if (units > props->hardware.max_units_per_cube)
    return cube_status_make(CUBE_STATUS_UNSUPPORTED,
                            "tuned matmul %s: %u units per cube, the device allows %u", v->name,
                            units, props->hardware.max_units_per_cube);
  return CUBE_OK;
}

static cube_status_t tuned_matmul_key(void* user, const cube_device_properties_t* props, size_t n,
                                      const cube_arg_t* args, cube_tune_key_t* out) {
  (void)user;
  (void)props;
  (void)n;
  out->count = 3;
  out->values[0] = cube_tune_anchor(args[3].v.u32, 0);
  out->values[1] = cube_tune_anchor(args[4].v.u32, 0);
  out->values[2] = cube_tune_anchor(args[5].v.u32, 0);
  return CUBE_OK;
}

/* Creates the operation (the caller releases it) and, into |out_kernels|
 * when not NULL, a reference on each candidate's kernel (released by the
 * caller) for launching one alone. |budget_s| 0: CUBE_TUNE_BUDGET. */
static cube_status_t tuned_matmul_create(double budget_s, cube_tune_op_t** out_op,
                                         cube_kernel_t** out_kernels) {
  cube_kernel_t* k[TUNED_MATMUL_CANDIDATES] = {0};
  cube_tune_candidate_t cands[TUNED_MATMUL_CANDIDATES];
  cube_status_t st = CUBE_OK;
  for (int i = 0; i < TUNED_MATMUL_CANDIDATES && !st; ++i) {
    const tuned_matmul_variant_t* v = &tuned_matmul_variants[i];
    char tile[8], vw[8], name[32];
    snprintf(tile, sizeof(tile), "%u", v->tile);
    snprintf(vw, sizeof(vw), "%u", v->vw);
    snprintf(name, sizeof(name), "matmul_%s", v->name);
    cube_define_t defs[2] = {{"TILE", tile}, {"VW", vw}};
    cube_kernel_desc_t d;
    cube_kernel_desc_initialize(&d);
    d.name = name;
    d.source = tuned_matmul_source;
    d.entry = "matmul";
    d.cube_dim = (cube_dim_t){v->tile / v->vw, v->tile, 1};
    d.defines = defs;
    d.define_count = 2;
    st = cube_kernel_create(&d, &k[i]);
    cands[i] = (cube_tune_candidate_t){v->name, k[i], tuned_matmul_count, tuned_matmul_valid,
                                       (void*)v};
  }
  if (!st) {
    cube_tune_op_desc_t od;
    cube_tune_op_desc_initialize(&od);
    od.name = "example_matmul";
    od.version = "1";
    od.candidates = cands;
    od.candidate_count = TUNED_MATMUL_CANDIDATES;
    od.key = tuned_matmul_key;
    od.reference = TUNED_MATMUL_DEFAULT;
    od.default_candidate = TUNED_MATMUL_DEFAULT;
    od.outputs = 1u << 2;
    od.compare = CUBE_TUNE_COMPARE_F32;
    od.rtol = 1e-4;
    od.atol = 1e-5;
    od.budget_s = budget_s;
    st = cube_tune_op_create(&od, out_op);
  }
  for (int i = 0; i < TUNED_MATMUL_CANDIDATES; ++i) {
    if (out_kernels && !st)
      out_kernels[i] = k[i];
    else
      cube_kernel_release(k[i]);
  }
  return st;
}

#endif /* CUBE_EXAMPLE_TUNED_MATMUL_H_ */
