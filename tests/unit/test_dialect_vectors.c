/* The dialect's vector types in the generated units (src/kernel/preludes/,
 * src/kernel/dialect_emit.c): the CPU's member rewrite (.x -> [0]) and where
 * it applies, the CUDA unit's use of CUDA's built-in vectors and the
 * prelude's operators, and, since no GPU runs the CUDA unit here, that unit
 * compiled as C++ by the host's C++ compiler against a stand-in for CUDA's
 * built-ins and run unit by unit on random data: every vector type, every
 * execution mode, loads that are and are not vector-aligned, and the bounds
 * record of a vector out of bounds. The results on real devices are the
 * conformance cases tests/conformance/cts_dialect_vectors.c.
 */
// cube-test-libs: cube_static
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "kernel/dialect.h"

static char* generate(cube__target_t target, const char* src, const char* entry,
                      const cube_define_t* defs, uint32_t ndefs, cube_execution_mode_t mode) {
  cube__signature_t sig;
  cube_status_t s = cube__dialect_parse(src, entry, &sig);
  if (s) {
    fprintf(stderr, "parse: %s\n", cube_status_message(s));
    cube_status_free(s);
    cube_test_failures++;
    return NULL;
  }
  char* text = NULL;
  s = cube__dialect_generate(target, &sig, src, defs, ndefs, mode, &text);
  if (s) {
    fprintf(stderr, "generate: %s\n", cube_status_message(s));
    cube_status_free(s);
    cube_test_failures++;
    return NULL;
  }
  return text;
}

/* The user's part of a generated unit: from its #line 1 "<entry>.cube". */
static const char* user_part(const char* text, const char* entry) {
  char mark[160];
  snprintf(mark, sizeof mark, "#line 1 \"%s.cube\"\n", entry);
  const char* p = text ? strstr(text, mark) : NULL;
  return p ? p + strlen(mark) : NULL;
}

static const char* k_members =
    "/* comment: v.x stays */\n"
    "CUBE_FN float helper(float4 v) { return v.x + v . y + v.z * 1.5e+2f + .5f; }\n"
    "CUBE_KERNEL(members, CUBE_ARRAY(float, out)) {\n"
    "  float4 v = make_float4(1.f, 2.f, 3.f, 4.f);\n"
    "  v.w = v.z;\n"
    "  out[0] = helper(v) + CUBE_VLOAD(float4, out, 1).y + (float)sizeof(\"a.x\");\n"
    "  out[1] = v.xw;\n"
    "  out[2] = v.\n"
    "      y;\n"
    "}\n";

CUBE_TEST(cpu_member_access_becomes_subscripts) {
  char* text = generate(CUBE__TARGET_CPU, k_members, "members", NULL, 0, CUBE_EXEC_CHECKED);
  const char* u = user_part(text, "members");
  CHECK(u != NULL);
  if (u) {
    static const char* const expect =
        "/* comment: v.x stays */\n"
        "CUBE_FN float helper(float4 v) { return v[0] + v [1] + v[2] * 1.5e+2f + .5f; }\n"
        "CUBE_KERNEL(members, CUBE_ARRAY(float, out)) {\n"
        "  float4 v = make_float4(1.f, 2.f, 3.f, 4.f);\n"
        "  v[3] = v[2];\n"
        "  out[0] = helper(v) + CUBE_VLOAD(float4, out, 1)[1] + (float)sizeof(\"a.x\");\n"
        "  out[1] = v.xw;\n" /* no swizzles: left for the compiler to refuse */
        "  out[2] = v.\n"     /* not across a line break: lines stay where they were */
        "      y;\n"
        "}\n";
    if (strncmp(u, expect, strlen(expect)) != 0) {
      fprintf(stderr, "CPU unit's source:\n%.600s\n", u);
      CHECK(!"members rewritten as subscripts, nothing else");
    }
  }
  free(text);
  /* The other targets keep the members. */
  for (int t = CUBE__TARGET_CUDA; t <= CUBE__TARGET_OPENCL; ++t) {
    text = generate((cube__target_t)t, k_members, "members", NULL, 0, CUBE_EXEC_CHECKED);
    u = user_part(text, "members");
    CHECK(u && strstr(u, "v.w = v.z;") && strstr(u, "CUBE_VLOAD(float4, out, 1).y"));
    free(text);
  }
}

/* A source without vectors keeps its structs' members on the CPU. */
CUBE_TEST(cpu_members_kept_without_vectors) {
  static const char* src =
      "typedef struct { float x, y; } pt_t;\n"
      "CUBE_KERNEL(pts, CUBE_ARRAY(float, out)) {\n"
      "  pt_t p = {1.0f, 2.0f};\n"
      "  pt_t* q = &p;\n"
      "  out[ABSOLUTE_POS] = p.x + q->y; /* float4 in a comment is no use */\n"
      "}\n";
  char* text = generate(CUBE__TARGET_CPU, src, "pts", NULL, 0, CUBE_EXEC_CHECKED);
  const char* u = user_part(text, "pts");
  CHECK(u && strncmp(u, src, strlen(src)) == 0);
  free(text);
}

static const char* k_vec_src =
    "CUBE_FN E vec_lane(E t, E x, E y, uint32_t lane) {\n"
    "  return lane == 0 ? t + (E)1 : lane == 1 ? x - t : lane == 2 ? t * y : (E)0 - t;\n"
    "}\n"
    "CUBE_KERNEL(vec_mix, CUBE_ARRAY(const E, a), CUBE_ARRAY(const E, b), CUBE_ARRAY(E, out),\n"
    "            %s s) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  uint64_t nv = CUBE_LEN(out) / W;\n"
    "  if (i < nv) {\n"
    "    V x = CUBE_VLOAD(V, a, i);\n"
    "    V y = CUBE_VLOAD(V, b, i);\n"
    "    V r = s * (x + y) - x / y + LANES;\n"
    "    r -= s;\n"
    "    r.x = r.x + (E)1;\n"
    "    r.y = x.y - r.y;\n"
    "#if W == 4\n"
    "    r.z = r.z * y.z;\n"
    "    r.w = (E)0 - r.w;\n"
    "#endif\n"
    "    CUBE_VSTORE(V, out, i, -(-r));\n"
    "  } else if (i == nv) {\n"
    "    for (uint64_t k = nv * W; k < CUBE_LEN(out); ++k) {\n"
    "      E x = CUBE_LOAD(a, k), y = CUBE_LOAD(b, k);\n"
    "      E t = s * (x + y) - x / y + (E)(k - nv * W);\n"
    "      t -= s;\n"
    "      CUBE_STORE(out, k, vec_lane(t, x, y, (uint32_t)(k - nv * W)));\n"
    "    }\n"
    "  }\n"
    "}\n"
    "CUBE_KERNEL(vec_copy, CUBE_ARRAY(const E, a), CUBE_ARRAY(E, out), uint32_t last) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  V one = make_V1;\n"
    "  if (i <= last) CUBE_VSTORE(V, out, i, CUBE_VLOAD(V, a, i) * one + (E)1);\n"
    "}\n";

typedef struct vt {
  const char* name, *elem, *lanes, *one;
  int kind; /* 0 float, 1 int, 2 uint */
  unsigned width;
} vt_t;

static const vt_t k_vts[] = {
    {"float2", "float", "make_float2(0, 1)", "make_float2(1, 1)", 0, 2},
    {"float4", "float", "make_float4(0, 1, 2, 3)", "make_float4(1, 1, 1, 1)", 0, 4},
    {"int2", "int32_t", "make_int2(0, 1)", "make_int2(1, 1)", 1, 2},
    {"int4", "int32_t", "make_int4(0, 1, 2, 3)", "make_int4(1, 1, 1, 1)", 1, 4},
    {"uint2", "uint32_t", "make_uint2(0, 1)", "make_uint2(1, 1)", 2, 2},
    {"uint4", "uint32_t", "make_uint4(0, 1, 2, 3)", "make_uint4(1, 1, 1, 1)", 2, 4},
};

static char* vec_unit(cube__target_t target, const vt_t* t, cube_execution_mode_t mode) {
  char src[4096], w[16];
  snprintf(src, sizeof src, k_vec_src, t->elem);
  snprintf(w, sizeof w, "%u", t->width);
  cube_define_t defs[5] = {{"V", t->name}, {"E", t->elem}, {"W", w}, {"LANES", t->lanes},
                           {"make_V1", t->one}};
  return generate(target, src, "vec_mix", defs, 5, mode);
}

CUBE_TEST(cuda_unit_uses_builtin_vectors_and_prelude_operators) {
  for (size_t i = 0; i < sizeof(k_vts) / sizeof(k_vts[0]); ++i) {
    const vt_t* t = &k_vts[i];
    char* text = vec_unit(CUBE__TARGET_CUDA, t, CUBE_EXEC_VALIDATE);
    if (!text) continue;
    char want[160];
    /* CUDA's own type and constructor, never defined by the prelude. */
    snprintf(want, sizeof want, "typedef %s", t->name);
    CHECK(strstr(text, want) == NULL);
    snprintf(want, sizeof want, "struct %s", t->name);
    CHECK(strstr(text, want) == NULL);
    /* The element-wise operators and scalar mixes CUDA lacks, for this type. */
    snprintf(want, sizeof want, "\nCUBE__VOPS%u(%s, ", t->width, t->name);
    CHECK(strstr(text, want) != NULL);
    snprintf(want, sizeof want, "\nCUBE__VCOMMON(%s, ", t->name);
    CHECK(strstr(text, want) != NULL);
    static const char* const ops[] = {"operator+(V a, V b)", "operator/(V a, V b)",
                                      "operator*(V a, E s)", "operator-(E s, V a)",
                                      "operator-=(V& a, E s)", "operator-(V a)"};
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); ++o) CHECK(strstr(text, ops[o]) != NULL);
    snprintf(want, sizeof want, "#define CUBE__VZERO_%s make_%s(", t->name, t->name);
    CHECK(strstr(text, want) != NULL);
    /* Members and constructors stay as written. */
    const char* u = user_part(text, "vec_mix");
    CHECK(u && strstr(u, "r.x = r.x + (E)1;") && strstr(u, "r.y = x.y - r.y;"));
    free(text);
    /* OpenCL: vloadn / vstoren, which need only the element's alignment. */
    text = vec_unit(CUBE__TARGET_OPENCL, t, CUBE_EXEC_CHECKED);
    snprintf(want, sizeof want, "#define cube_vload_%s(p, i) vload%u((size_t)(i), (p))", t->name,
             t->width);
    CHECK(text && strstr(text, want) != NULL);
    free(text);
  }
}

//===----------------------------------------------------------------------===//
// The CUDA unit on the host
//===----------------------------------------------------------------------===//

/* What NVRTC gives a unit without includes, as far as the preludes use it:
 * the vector structs (aligned to their size) and make_<type>, the position
 * registers, the qualifiers, the atomics and shuffles (one thread at a time
 * here, so plain code), warpSize. */
static const char* k_shim =
    /* No C library headers: they declare int64_t otherwise than the unit. */
    "extern \"C\" int printf(const char*, ...);\n"
    "extern \"C\" void* memcpy(void*, const void*, unsigned long);\n"
    "extern \"C\" float fminf(float, float);\nextern \"C\" float fmaxf(float, float);\n"
    "#define __global__\n#define __device__\n#define __shared__ static\n"
    "#define __align_v(n) __attribute__((aligned(n)))\n"
    "struct __align_v(8) float2 { float x, y; };\n"
    "struct __align_v(16) float4 { float x, y, z, w; };\n"
    "struct __align_v(8) int2 { int x, y; };\n"
    "struct __align_v(16) int4 { int x, y, z, w; };\n"
    "struct __align_v(8) uint2 { unsigned x, y; };\n"
    "struct __align_v(16) uint4 { unsigned x, y, z, w; };\n"
    "static float2 make_float2(float x, float y) { float2 v = {x, y}; return v; }\n"
    "static float4 make_float4(float x, float y, float z, float w) { float4 v = {x, y, z, w}; return v; }\n"
    "static int2 make_int2(int x, int y) { int2 v = {x, y}; return v; }\n"
    "static int4 make_int4(int x, int y, int z, int w) { int4 v = {x, y, z, w}; return v; }\n"
    "static uint2 make_uint2(unsigned x, unsigned y) { uint2 v = {x, y}; return v; }\n"
    "static uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { uint4 v = {x, y, z, w}; return v; }\n"
    "struct shim_dim3 { unsigned x, y, z; };\n"
    "static shim_dim3 threadIdx, blockIdx, blockDim, gridDim;\n"
    "static const int warpSize = 32;\n"
    "static long shim_vector_loads, shim_element_loads;\n"
    "static void __syncthreads() {}\n static void __threadfence() {}\n"
    "static void __threadfence_system() {}\n"
    "static float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }\n"
    "template <class T> static T atomicCAS(T* p, T e, T d) { T o = *p; if (o == e) *p = d; return o; }\n"
    "template <class T> static T atomicAdd(T* p, T v) { T o = *p; *p = o + v; return o; }\n"
    "template <class T> static T atomicSub(T* p, T v) { T o = *p; *p = o - v; return o; }\n"
    "template <class T> static T atomicAnd(T* p, T v) { T o = *p; *p = o & v; return o; }\n"
    "template <class T> static T atomicOr(T* p, T v) { T o = *p; *p = o | v; return o; }\n"
    "template <class T> static T atomicXor(T* p, T v) { T o = *p; *p = o ^ v; return o; }\n"
    "template <class T> static T atomicMin(T* p, T v) { T o = *p; *p = v < o ? v : o; return o; }\n"
    "template <class T> static T atomicMax(T* p, T v) { T o = *p; *p = v > o ? v : o; return o; }\n"
    "template <class T> static T atomicExch(T* p, T v) { T o = *p; *p = v; return o; }\n"
    "template <class T> static T __shfl_xor_sync(unsigned, T v, int) { return v; }\n";

/* Runs vec_mix over n elements (a and out one element into their arrays:
 * not vector-aligned; b aligned) and vec_copy one vector past a short a,
 * as the CUDA launch would, unit by unit; exit 0 when all matches. E, W,
 * KIND and VALIDATE are defines of the compile. */
static const char* k_driver = /* (KIND, VALIDATE, UNCHECKED too) */
    "\n#if VALIDATE\n#define BARG , bounds\n#else\n#define BARG\n#endif\n"
    "static unsigned long long shim_seed = 0x9E3779B97F4A7C15ull;\n"
    "static unsigned shim_rand() { shim_seed = shim_seed * 6364136223846793005ull + 1442695040888963407ull;\n"
    "  return (unsigned)(shim_seed >> 33); }\n"
    "static E value(bool nonzero) {\n"
    "#if KIND == 0\n  float v = (float)(shim_rand() %% 16000) / 1000.0f - 8.0f;\n"
    "  if (nonzero && __builtin_fabs(v) < 0.5f) v = v < 0 ? -0.5f : 0.5f; return v;\n"
    "#elif KIND == 1\n  int v = (int)(shim_rand() %% 2001) - 1000; if (nonzero && v == 0) v = 7; return v;\n"
    "#else\n  unsigned v = shim_rand() * 2654435761u; if (nonzero) v |= 1u; return v;\n#endif\n}\n"
    "static E host(E x, E y, E s, unsigned lane) {\n"
    "  E t = s * (x + y) - x / y + (E)lane; t -= s;\n"
    "  return lane == 0 ? t + (E)1 : lane == 1 ? x - t : lane == 2 ? t * y : (E)0 - t;\n}\n"
    "static bool same(E g, E e, E x, E y, E s) {\n"
    "#if KIND == 0\n  double mag = (__builtin_fabs(s) * (__builtin_fabs(x) + __builtin_fabs(y)) + __builtin_fabs(x / y) + __builtin_fabs(s) + 4) * (1 + __builtin_fabs(y));\n"
    "  return __builtin_fabs((double)g - e) <= 1e-5 * mag;\n#else\n  (void)x; (void)y; (void)s; return g == e;\n#endif\n}\n"
    "int main() {\n"
    "  const unsigned n = %u, nv = n / W;\n"
    "  static __align_v(16) E abuf[n + 1], b[n], obuf[n + 1];\n"
    "  E* a = abuf + 1; E* out = obuf + 1;\n"
    "  for (unsigned k = 0; k < n; ++k) a[k] = value(false), b[k] = value(true);\n"
    "  E s = value(false);\n"
    "  uint32_t bounds[8] = {0, 0, 0, 0, 0, 0, 0, 0}; (void)bounds;\n"
    "  blockDim.x = 32; blockDim.y = blockDim.z = 1; gridDim.x = (nv + 1 + 31) / 32; gridDim.y = gridDim.z = 1;\n"
    "  for (blockIdx.x = 0; blockIdx.x < gridDim.x; ++blockIdx.x)\n"
    "    for (threadIdx.x = 0; threadIdx.x < 32; ++threadIdx.x)\n"
    "      cube_kernel_entry(a, n * sizeof(E), b, n * sizeof(E), out, n * sizeof(E), s BARG, nullptr);\n"
    "  int bad = 0;\n"
    "  for (unsigned k = 0; k < n; ++k)\n"
    "    if (!same(out[k], host(a[k], b[k], s, k %% W), a[k], b[k], s) && bad++ < 5)\n"
    "      printf(\"out[%%u] = %%.9g, expected %%.9g\\n\", k, (double)out[k], (double)host(a[k], b[k], s, k %% W));\n"
    "  /* vec_copy: a holds 5 vectors and a part, out 6 vectors; vector 5 is out. */\n"
    "  const unsigned part = 5 * W + W / 2;\n"
    "  static __align_v(16) E o2[6 * W + 1];\n"
    "  for (unsigned k = 0; k < 6 * W + 1; ++k) o2[k] = (E)77;\n"
    "  gridDim.x = 1; blockDim.x = 8; blockIdx.x = 0;\n"
    "  for (threadIdx.x = 0; threadIdx.x < 8; ++threadIdx.x)\n"
    "    cube__kernel_vec_copy(a, part * sizeof(E), o2, 6 * W * sizeof(E), 5 BARG, nullptr);\n"
    "  for (unsigned k = 0; k < 6 * W + 1; ++k) {\n"
    "    /* Unchecked: a is longer than the view given, so the read is real. */\n"
    "    E e = k >= 6 * W ? (E)77 : k >= 5 * W && !UNCHECKED ? (E)1 : a[k] + (E)1;\n"
    "    if (o2[k] != e && bad++ < 10) printf(\"copy: out[%%u] = %%.9g, expected %%.9g\\n\", k, (double)o2[k], (double)e);\n"
    "  }\n"
    "#if VALIDATE\n"
    "  if (bounds[0] != 1 || bounds[1] != 0 || bounds[2] != 5 * W + W - 1 || bounds[3] != 0 ||\n"
    "      bounds[4] != part || bounds[6] != 0) {\n"
    "    printf(\"bounds record %%u %%u %%u %%u %%u %%u %%u\\n\", bounds[0], bounds[1], bounds[2], bounds[3], bounds[4], bounds[5], bounds[6]);\n"
    "    ++bad;\n  }\n"
    "#endif\n"
    "  return bad ? 1 : 0;\n}\n";

static int run_cmd(const char* cmd) {
  int rc = system(cmd);
  if (rc == -1 || !WIFEXITED(rc)) return -1;
  return WEXITSTATUS(rc);
}

CUBE_TEST(cuda_unit_runs_on_host_cxx) {
  if (run_cmd("c++ --version >/dev/null 2>&1") != 0) CUBE_SKIP("no C++ compiler (c++) on PATH");
  const char* base = getenv("CUBE_TEST_TMPDIR");
  char dir[512];
  snprintf(dir, sizeof dir, "%s/cube-cuda-host-XXXXXX", base && base[0] ? base : "/tmp");
  REQUIRE(mkdtemp(dir) != NULL);
  static const cube_execution_mode_t modes[3] = {CUBE_EXEC_CHECKED, CUBE_EXEC_VALIDATE,
                                                 CUBE_EXEC_UNCHECKED};
  for (size_t i = 0; i < sizeof(k_vts) / sizeof(k_vts[0]); ++i) {
    for (int m = 0; m < 3; ++m) {
      const vt_t* t = &k_vts[i];
      char* text = vec_unit(CUBE__TARGET_CUDA, t, modes[m]);
      if (!text) continue;
      char path[600], bin[600], cmd[4096];
      snprintf(path, sizeof path, "%s/%s_%d.cpp", dir, t->name, m);
      snprintf(bin, sizeof bin, "%s/%s_%d", dir, t->name, m);
      FILE* f = fopen(path, "w");
      REQUIRE(f != NULL);
      fputs(k_shim, f);
      fputs(text, f);
      /* The element type as the driver spells it (the unit's typedefs). */
      fprintf(f,
              "\n#undef E\n#define E %s\n#define KIND %d\n#define VALIDATE %d\n"
              "#define UNCHECKED %d\n#undef W\n#define W %uu\n",
              t->elem, t->kind, modes[m] == CUBE_EXEC_VALIDATE, modes[m] == CUBE_EXEC_UNCHECKED,
              t->width);
      fprintf(f, k_driver, 1003u);
      fclose(f);
      free(text);
      snprintf(cmd, sizeof cmd,
               "c++ -std=c++11 -O1 -w -o '%s' '%s' > '%s.log' 2>&1 && '%s' >> '%s.log' 2>&1", bin,
               path, bin, bin, bin);
      int rc = run_cmd(cmd);
      if (rc != 0) {
        fprintf(stderr, "%s mode %d: rc %d; %s.log:\n", t->name, m, rc, bin);
        char show[800];
        snprintf(show, sizeof show, "head -c 3000 '%s.log' >&2", bin);
        (void)run_cmd(show);
        CHECK(!"the CUDA unit compiles as C++ and computes as the host");
      }
    }
  }
  char rm[600];
  if (cube_test_failures == 0) {
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    (void)run_cmd(rm);
  }
}
