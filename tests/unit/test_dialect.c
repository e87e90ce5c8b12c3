/* The cube dialect: signature parsing and translation-unit generation
 * (src/kernel/dialect_*.c). Compiling and running the generated units is
 * tests/unit/test_dialect_kernels.c.
 */
// cube-test-libs: cube_static
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_timing_layout.h"
#include "base/abi.h"
#include "check.h"
#include "cube/backends/cpu.h"
#include "kernel/dialect.h"

static cube__signature_t sig;

static cube_status_t parse(const char* src, const char* entry) {
  return cube__dialect_parse(src, entry, &sig);
}

/* Parses |src| expecting success; false (and a failure) otherwise. */
static int parse_ok(const char* src, const char* entry) {
  cube_status_t s = parse(src, entry);
  if (s) {
    fprintf(stderr, "parse of '%s' failed: %s\n", entry, cube_status_message(s));
    cube_status_free(s);
    cube_test_failures++;
    return 0;
  }
  return 1;
}

CUBE_TEST(parse_saxpy) {
  const char* src =
      "CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a)\n"
      "{\n"
      "    uint32_t i = ABSOLUTE_POS;\n"
      "    if (i < CUBE_LEN(y)) CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
      "}\n";
  if (!parse_ok(src, "saxpy")) return;
  CHECK(strcmp(sig.entry, "saxpy") == 0);
  CHECK_EQ_U64(sig.count, 3);
  CHECK_EQ_U64(sig.line, 1);
  CHECK(!sig.uses_sync_cube);
  CHECK_EQ_U64(sig.params[0].kind, CUBE_ARG_BUFFER);
  CHECK(strcmp(sig.params[0].name, "x") == 0);
  CHECK(strcmp(sig.params[0].type, "float") == 0);
  CHECK(sig.params[0].is_const);
  CHECK_EQ_U64(sig.params[1].kind, CUBE_ARG_BUFFER);
  CHECK(strcmp(sig.params[1].name, "y") == 0);
  CHECK(!sig.params[1].is_const);
  CHECK_EQ_U64(sig.params[2].kind, CUBE_ARG_F32);
  CHECK(strcmp(sig.params[2].name, "a") == 0);
  CHECK(strcmp(sig.params[2].type, "float") == 0);
  CHECK_EQ_U64(cube__dialect_cpu_scratch_size(&sig, 256, NULL, 0), 0);
}

CUBE_TEST(parse_every_scalar_type) {
  static const struct {
    const char* type;
    cube_arg_kind_t kind;
  } cases[] = {
      {"uint32_t", CUBE_ARG_U32},        {"unsigned", CUBE_ARG_U32},
      {"unsigned int", CUBE_ARG_U32},    {"const uint32_t", CUBE_ARG_U32},
      {"int32_t", CUBE_ARG_I32},         {"int", CUBE_ARG_I32},
      {"signed", CUBE_ARG_I32},          {"signed int", CUBE_ARG_I32},
      {"uint64_t", CUBE_ARG_U64},        {"unsigned long long", CUBE_ARG_U64},
      {"unsigned  long\tlong int", CUBE_ARG_U64},
      {"int64_t", CUBE_ARG_I64},         {"long long", CUBE_ARG_I64},
      {"long long int", CUBE_ARG_I64},   {"signed long long", CUBE_ARG_I64},
      {"float", CUBE_ARG_F32},           {"const float", CUBE_ARG_F32},
      {"float const", CUBE_ARG_F32},     {"double", CUBE_ARG_F64},
  };
  static const char* canonical[CUBE__ARG_KIND_COUNT] = {NULL,      "uint32_t", "int32_t",
                                                        "uint64_t", "int64_t",  "float",
                                                        "double"};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    char src[256];
    snprintf(src, sizeof src, "CUBE_KERNEL(k, CUBE_ARRAY(float, out), %s v) { }\n", cases[i].type);
    if (!parse_ok(src, "k")) continue;
    CHECK_EQ_U64(sig.count, 2);
    if (sig.params[1].kind != cases[i].kind)
      fprintf(stderr, "type '%s' parsed as kind %d\n", cases[i].type, (int)sig.params[1].kind);
    CHECK_EQ_U64(sig.params[1].kind, cases[i].kind);
    CHECK(strcmp(sig.params[1].name, "v") == 0);
    CHECK(strcmp(sig.params[1].type, canonical[cases[i].kind]) == 0);
  }
  /* All six in one kernel, over several lines. */
  const char* src =
      "CUBE_KERNEL(all,\n"
      "  uint32_t a, int32_t b,\n"
      "  uint64_t c, int64_t d,\n"
      "  float e, double f, CUBE_ARRAY(double, g))\n"
      "{ }\n";
  if (!parse_ok(src, "all")) return;
  CHECK_EQ_U64(sig.count, 7);
  static const cube_arg_kind_t kinds[7] = {CUBE_ARG_U32, CUBE_ARG_I32, CUBE_ARG_U64, CUBE_ARG_I64,
                                           CUBE_ARG_F32, CUBE_ARG_F64, CUBE_ARG_BUFFER};
  for (int i = 0; i < 7; ++i) CHECK_EQ_U64(sig.params[i].kind, kinds[i]);
  CHECK(strcmp(sig.params[6].type, "double") == 0);
}

CUBE_TEST(parse_const_arrays) {
  const char* src =
      "CUBE_KERNEL(k, CUBE_ARRAY(const float, a), CUBE_ARRAY(float const, b),\n"
      "           CUBE_ARRAY( const   unsigned   int , c ), CUBE_ARRAY(uint8_t, d),\n"
      "           CUBE_ARRAY(constant_t, e))\n"
      "{ }\n";
  if (!parse_ok(src, "k")) return;
  CHECK_EQ_U64(sig.count, 5);
  CHECK(sig.params[0].is_const && strcmp(sig.params[0].type, "float") == 0);
  CHECK(sig.params[1].is_const && strcmp(sig.params[1].type, "float") == 0);
  CHECK(sig.params[2].is_const && strcmp(sig.params[2].type, "unsigned int") == 0);
  CHECK(strcmp(sig.params[2].name, "c") == 0);
  CHECK(!sig.params[3].is_const && strcmp(sig.params[3].type, "uint8_t") == 0);
  /* "constant_t" starts with "const" but is another word. */
  CHECK(!sig.params[4].is_const && strcmp(sig.params[4].type, "constant_t") == 0);
}

CUBE_TEST(parse_comments_and_strings) {
  const char* src =
      "// CUBE_KERNEL(k, int wrong) in a line comment\n"
      "/* CUBE_KERNEL(k, float also_wrong)\n"
      "   across lines */\n"
      "static const char* s = \"CUBE_KERNEL(k, double nope)\";\n"
      "static const char c = ',';\n"
      "CUBE_KERNEL(k, /* a, b, */ CUBE_ARRAY(float, x) /* ) */, // trailing, comment\n"
      "            uint32_t n /* \"(\" */)\n"
      "{\n"
      "  const char* t = \"sync_cube(), CUBE_KERNEL(\";\n"
      "}\n";
  if (!parse_ok(src, "k")) return;
  CHECK_EQ_U64(sig.line, 6);
  CHECK_EQ_U64(sig.count, 2);
  CHECK(strcmp(sig.params[0].name, "x") == 0);
  CHECK(strcmp(sig.params[1].name, "n") == 0);
  CHECK_EQ_U64(sig.params[1].kind, CUBE_ARG_U32);
  CHECK(!sig.uses_sync_cube);
  /* A string with an escaped quote does not end early. */
  const char* src2 =
      "const char* s = \"\\\" CUBE_KERNEL(k, int bad) \\\"\";\n"
      "CUBE_KERNEL(k, float good) { }\n";
  if (!parse_ok(src2, "k")) return;
  CHECK_EQ_U64(sig.line, 2);
  CHECK(strcmp(sig.params[0].name, "good") == 0);
}

CUBE_TEST(parse_entry_is_a_whole_token) {
  const char* src =
      "CUBE_KERNEL(saxpy2, float wrong) { }\n"
      "MY_CUBE_KERNEL(saxpy, float wrong2) { }\n"
      "CUBE_KERNEL_X(saxpy, float wrong3) { }\n"
      "CUBE_KERNEL ( saxpy , float right ) { }\n";
  if (!parse_ok(src, "saxpy")) return;
  CHECK_EQ_U64(sig.line, 4);
  CHECK_EQ_U64(sig.count, 1);
  CHECK(strcmp(sig.params[0].name, "right") == 0);
  /* And a prefix of the entry is no match either. */
  CHECK_STATUS(parse("CUBE_KERNEL(sax, float a) { }\n", "saxpy"), CUBE_STATUS_INVALID_ARGUMENT,
               "saxpy", "sax");
}

CUBE_TEST(parse_nested_parentheses_in_types) {
  const char* src =
      "#define VEC(T, n) T\n"
      "CUBE_KERNEL(k, CUBE_ARRAY(VEC(float, 4), v), CUBE_ARRAY(__typeof__(1.0f), w),\n"
      "           uint32_t n)\n"
      "{ }\n";
  if (!parse_ok(src, "k")) return;
  CHECK_EQ_U64(sig.count, 3);
  CHECK(strcmp(sig.params[0].type, "VEC(float,4)") == 0);
  CHECK(strcmp(sig.params[0].name, "v") == 0);
  CHECK(strcmp(sig.params[1].type, "__typeof__(1.0f)") == 0);
  CHECK(strcmp(sig.params[1].name, "w") == 0);
  CHECK_EQ_U64(sig.params[2].kind, CUBE_ARG_U32);
}

CUBE_TEST(parse_missing_entry) {
  const char* src =
      "CUBE_KERNEL(alpha, float a) { }\n"
      "CUBE_KERNEL(beta, float b) { }\n";
  CHECK_STATUS(parse(src, "gamma"), CUBE_STATUS_INVALID_ARGUMENT, "gamma", "alpha", "beta");
  CHECK_STATUS(parse("int x;\n", "k"), CUBE_STATUS_INVALID_ARGUMENT, "'k'", "none");
  CHECK_STATUS(parse("// CUBE_KERNEL(k, float a)\n", "k"), CUBE_STATUS_INVALID_ARGUMENT, "'k'");
  CHECK_STATUS(parse(src, "not an identifier"), CUBE_STATUS_INVALID_ARGUMENT, "identifier");
  CHECK_STATUS(cube__dialect_parse(NULL, "k", &sig), CUBE_STATUS_INVALID_ARGUMENT, "source");
  CHECK_STATUS(cube__dialect_parse(src, NULL, &sig), CUBE_STATUS_INVALID_ARGUMENT, "entry");
  CHECK_STATUS(cube__dialect_parse(src, "alpha", NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "out_signature");
}

CUBE_TEST(parse_bad_type_names_line) {
  const char* src =
      "// a kernel\n"
      "CUBE_KERNEL(k,\n"
      "    CUBE_ARRAY(float, x),\n"
      "    long n)\n"
      "{ }\n";
  CHECK_STATUS(parse(src, "k"), CUBE_STATUS_INVALID_ARGUMENT, "'k'", "line 4", "parameter 2",
               "long n", "unknown scalar type 'long'");
  CHECK_STATUS(parse("CUBE_KERNEL(k, float* p) { }", "k"), CUBE_STATUS_INVALID_ARGUMENT,
               "line 1", "parameter 1", "CUBE_ARRAY");
  CHECK_STATUS(parse("CUBE_KERNEL(k, size_t n) { }", "k"), CUBE_STATUS_INVALID_ARGUMENT,
               "size_t");
  CHECK_STATUS(parse("CUBE_KERNEL(k, float) { }", "k"), CUBE_STATUS_INVALID_ARGUMENT,
               "parameter 1", "name");
  CHECK_STATUS(parse("CUBE_KERNEL(k, float a,, float b) { }", "k"), CUBE_STATUS_INVALID_ARGUMENT,
               "parameter 2", "empty");
  CHECK_STATUS(parse("CUBE_KERNEL(k, CUBE_ARRAY(float), float b) { }", "k"),
               CUBE_STATUS_INVALID_ARGUMENT, "parameter 1", "CUBE_ARRAY");
  CHECK_STATUS(parse("CUBE_KERNEL(k, CUBE_ARRAY(float, 1x)) { }", "k"),
               CUBE_STATUS_INVALID_ARGUMENT, "identifier");
  CHECK_STATUS(parse("CUBE_KERNEL(k, float a, int a) { }", "k"), CUBE_STATUS_INVALID_ARGUMENT,
               "parameter 2", "'a'");
  CHECK_STATUS(parse("CUBE_KERNEL(k) { }", "k"), CUBE_STATUS_INVALID_ARGUMENT, "no parameters");
  CHECK_STATUS(parse("CUBE_KERNEL(k, float cube__x) { }", "k"), CUBE_STATUS_INVALID_ARGUMENT,
               "reserved");
  /* Long names: up to 63 characters; long type words are refused, not cut. */
  if (parse_ok("CUBE_KERNEL(k, float a_parameter_name_that_is_rather_long_but_below_the_limit_x)"
               " { }",
               "k"))
    CHECK_EQ_U64(strlen(sig.params[0].name), 58);
  CHECK_STATUS(parse("CUBE_KERNEL(k, a_type_word_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa "
                     "b_type_word_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa "
                     "c_type_word_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa "
                     "d_type_word_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa "
                     "e_type_word_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa "
                     "f_type_word_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa "
                     "g_type_word_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa n) { }",
                     "k"),
               CUBE_STATUS_INVALID_ARGUMENT, "parameter 1");
  char longname[200];
  memset(longname, 'n', sizeof longname);
  memcpy(longname, "CUBE_KERNEL(k, float ", 21);
  memcpy(longname + 150, ") { }", 6);
  CHECK_STATUS(parse(longname, "k"), CUBE_STATUS_INVALID_ARGUMENT, "parameter 1", "longer");
}

CUBE_TEST(parse_unbalanced_parentheses) {
  CHECK_STATUS(parse("\n\nCUBE_KERNEL(k, CUBE_ARRAY(float, x), float a\n{ }\n", "k"),
               CUBE_STATUS_INVALID_ARGUMENT, "'k'", "line 3", "unbalanced");
  CHECK_STATUS(parse("CUBE_KERNEL(k, CUBE_ARRAY(float, x, float a) { }\n", "k"),
               CUBE_STATUS_INVALID_ARGUMENT, "'k'", "unbalanced");
}

CUBE_TEST(parse_too_many_parameters) {
  char src[8192];
  size_t o = (size_t)snprintf(src, sizeof src, "CUBE_KERNEL(k");
  for (int i = 0; i < CUBE_MAX_KERNEL_ARGS; ++i)
    o += (size_t)snprintf(src + o, sizeof src - o, ", float a%d", i);
  snprintf(src + o, sizeof src - o, ") { }\n");
  if (parse_ok(src, "k")) CHECK_EQ_U64(sig.count, CUBE_MAX_KERNEL_ARGS);
  /* One more is too many. */
  o = strlen(src) - strlen(") { }\n");
  snprintf(src + o, sizeof src - o, ", float extra) { }\n");
  CHECK_STATUS(parse(src, "k"), CUBE_STATUS_INVALID_ARGUMENT, "'k'", "65", "CUBE_MAX_KERNEL_ARGS");
}

CUBE_TEST(parse_two_kernels_choose_entry) {
  const char* src =
      "CUBE_FN float twice(float v) { return 2.0f * v; }\n"
      "CUBE_KERNEL(first, CUBE_ARRAY(float, a), uint32_t n)\n"
      "{ }\n"
      "\n"
      "CUBE_KERNEL(second, CUBE_ARRAY(double, b), int64_t m, float s)\n"
      "{ }\n";
  if (!parse_ok(src, "second")) return;
  CHECK(strcmp(sig.entry, "second") == 0);
  CHECK_EQ_U64(sig.line, 5);
  CHECK_EQ_U64(sig.count, 3);
  CHECK(strcmp(sig.params[0].name, "b") == 0 && strcmp(sig.params[0].type, "double") == 0);
  CHECK_EQ_U64(sig.params[1].kind, CUBE_ARG_I64);
  CHECK_EQ_U64(sig.params[2].kind, CUBE_ARG_F32);
  if (!parse_ok(src, "first")) return;
  CHECK_EQ_U64(sig.line, 2);
  CHECK_EQ_U64(sig.count, 2);
  CHECK(strcmp(sig.params[0].name, "a") == 0);
}

CUBE_TEST(parse_sync_cube_detection) {
  const char* with =
      "CUBE_KERNEL(k, CUBE_ARRAY(float, x))\n"
      "{\n"
      "  x[UNIT_POS] = 1.0f;\n"
      "  sync_cube ();\n"
      "}\n";
  if (parse_ok(with, "k")) CHECK(sig.uses_sync_cube);
  const char* commented =
      "CUBE_KERNEL(k, CUBE_ARRAY(float, x))\n"
      "{\n"
      "  // sync_cube();\n"
      "  /* sync_cube(); */\n"
      "  const char* s = \"sync_cube()\";\n"
      "  float my_sync_cube = 0.0f, sync_cubes = 1.0f;\n"
      "  x[UNIT_POS] = my_sync_cube + sync_cubes;\n"
      "}\n";
  if (parse_ok(commented, "k")) {
    CHECK(!sig.uses_sync_cube);
    CHECK_EQ_U64(cube__dialect_cpu_scratch_size(&sig, 64, NULL, 0), 0);
  }
  /* In a helper: the whole unit needs fibers. */
  const char* helper =
      "CUBE_FN void barrier_twice(void) { }\n"
      "#define BARRIER() sync_cube()\n"
      "CUBE_KERNEL(k, CUBE_ARRAY(float, x)) { BARRIER(); }\n";
  if (parse_ok(helper, "k")) {
    CHECK(sig.uses_sync_cube);
    uint64_t s1 = cube__dialect_cpu_scratch_size(&sig, 1, NULL, 0);
    uint64_t s256 = cube__dialect_cpu_scratch_size(&sig, 256, NULL, 0);
    CHECK_EQ_U64(s1, 0); /* one unit runs on the worker's stack */
    CHECK(s256 >= 256u * 16384u);
    /* 64 units more cost 64 saved contexts and ring links (12 bytes each, 768
     * in all: a multiple of 64) and 64 stacks of CUBE_CPU_FIBER_STACK bytes,
     * 16384 when the define is absent or invalid. */
    cube_define_t big = {"CUBE_CPU_FIBER_STACK", "65536"};
    cube_define_t odd = {"CUBE_CPU_FIBER_STACK", "5000"};
    CHECK_EQ_U64(cube__dialect_cpu_scratch_size(&sig, 128, &big, 1) -
                     cube__dialect_cpu_scratch_size(&sig, 64, &big, 1),
                 64u * (12u + 65536u));
    CHECK_EQ_U64(cube__dialect_cpu_scratch_size(&sig, 128, NULL, 0) -
                     cube__dialect_cpu_scratch_size(&sig, 64, NULL, 0),
                 64u * (12u + 16384u));
    CHECK_EQ_U64(cube__dialect_cpu_scratch_size(&sig, 256, &odd, 1), s256);
    CHECK(cube__dialect_cpu_scratch_size(&sig, 256, &big, 1) >= 256u * 65536u);
  }
}

/* Generation ----------------------------------------------------------------- */

static const char* saxpy_src =
    "CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a)\n"
    "{\n"
    "    uint32_t i = ABSOLUTE_POS;\n"
    "    if (i < CUBE_LEN(y)) CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "}\n";

CUBE_TEST(generate_structure) {
  if (!parse_ok(saxpy_src, "saxpy")) return;
  cube_define_t defs[2] = {{"BLOCK", "64"}, {"EMPTY", NULL}};
  static const char* modes[3] = {"#define CUBE_MODE_CHECKED 1", "#define CUBE_MODE_VALIDATE 1",
                                 "#define CUBE_MODE_UNCHECKED 1"};
  for (int t = 0; t < 3; ++t) {
    for (int m = 0; m < 3; ++m) {
      char* text = NULL;
      CHECK_OK(cube__dialect_generate((cube__target_t)t, &sig, saxpy_src, defs, 2,
                                      (cube_execution_mode_t)m, &text));
      if (!text) continue;
      const char* prelude = cube__dialect_prelude((cube__target_t)t);
      const char* pm = strstr(text, modes[m]);
      const char* pp = strstr(text, prelude);
      /* The common prelude (preludes/common.h: accessors, derived positions)
       * comes once, after the mode and before the target's. */
      const char* pc = strstr(text, "#define CUBE__PRELUDE_COMMON_H 1\n");
      CHECK(pc != NULL && strstr(pc + 1, "#define CUBE__PRELUDE_COMMON_H 1\n") == NULL);
      if (pm && pc && pp) CHECK(pm < pc && pc < pp);
      const char* pd = strstr(text, "#define BLOCK 64\n");
      const char* pi = strstr(text, "#define cube__argidx_y 1u\n");
      const char* pl = strstr(text, "#line 1 \"saxpy.cube\"\n");
      /* OpenCL: the entry's arrays take a view offset (preludes/opencl.h);
       * the rewrite keeps every line and column where it was: CUBE__EARR is
       * as long as CUBE_ARRAY, the views are generated code on a line of
       * their own, and the rest of the '{' line is padded back to its
       * column. */
      static const char* const opencl_src =
          "CUBE_KERNEL(saxpy, CUBE__EARR(const float, x), CUBE__EARR(float, y), float a)\n"
          "{\n"
          "#line 1 \"saxpy.entry.cl\"\n"
          " CUBE__ENTRY_VIEW(const float, x) CUBE__ENTRY_VIEW(float, y)\n"
          "#line 2 \"saxpy.cube\"\n"
          " \n"
          "    uint32_t i = ABSOLUTE_POS;\n";
      /* CUDA: the entry times itself (preludes/cuda.h, CUBE__ENTRY_TIMER):
       * generated code on a line of its own behind the '{', as above. */
      static const char* const cuda_src =
          "CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a)\n"
          "{\n"
          "#line 1 \"saxpy.entry.cu\"\n"
          " CUBE__ENTRY_TIMER\n"
          "#line 2 \"saxpy.cube\"\n"
          " \n"
          "    uint32_t i = ABSOLUTE_POS;\n";
      const char* ps = strstr(text, t == CUBE__TARGET_OPENCL ? opencl_src
                                    : t == CUBE__TARGET_CUDA ? cuda_src
                                                             : saxpy_src);
      CHECK(pm && pp && pd && pi && pl && ps);
      if (t != CUBE__TARGET_CPU && pl && !ps) fprintf(stderr, "unit:\n%s\n", pl);
      CHECK(strstr(text, "#define EMPTY \n") != NULL);
      CHECK(strstr(text, "#define cube__argidx_x 0u\n") != NULL);
      if (pm && pp && pd && pl && ps) CHECK(pm < pp && pp < pd && pd < pl && pl < ps);
      if (t == CUBE__TARGET_CPU) {
        CHECK(strstr(text, "int cube_kernel_entry(") != NULL);
        CHECK(strstr(text, "#pragma omp simd") != NULL);
        CHECK(strstr(text, "_Static_assert(offsetof(cube_cpu_cube_t, bounds)") != NULL);
      } else {
        CHECK(strstr(text, "#define cube__kernel_saxpy cube_kernel_entry\n") != NULL);
      }
      free(text);
    }
  }
  CHECK(strstr(cube__dialect_prelude(CUBE__TARGET_CUDA), "extern \"C\" __global__") != NULL);
  CHECK(strstr(cube__dialect_prelude(CUBE__TARGET_OPENCL), "__kernel") != NULL);
  CHECK(strstr(cube__dialect_prelude(CUBE__TARGET_CPU), "#include <stdint.h>") != NULL);
  CHECK(cube__dialect_prelude((cube__target_t)7) == NULL);
}

/* The CUDA prelude's self-timed kernels raise their ends where the backend
 * reads them: CUBE__TIMING_PLANE_WORDS words apart, one 128-byte line each
 * (cuda_timing_layout.h). The prelude is CUDA text, so it cannot take the
 * constant from the backend's header; this holds the two together. */
CUBE_TEST(cuda_prelude_timing_layout_is_the_backends) {
  const char* prelude = cube__dialect_prelude(CUBE__TARGET_CUDA);
  REQUIRE(prelude != NULL);
  const char* key = "#define CUBE__TIMING_PLANE_WORDS ";
  const char* at = strstr(prelude, key);
  REQUIRE(at != NULL);
  char* end = NULL;
  unsigned long words = strtoul(at + strlen(key), &end, 10);
  CHECK(end != at + strlen(key) && *end == 'u');
  CHECK_EQ_U64((uint64_t)words, (uint64_t)(CUBE__ACT_LINE / 8u));
  /* Cube i raises end word i modulo the planes, as many as the backend reads. */
  const char* pkey = "#define CUBE__TIMING_PLANES ";
  const char* pat = strstr(prelude, pkey);
  REQUIRE(pat != NULL);
  unsigned long planes = strtoul(pat + strlen(pkey), &end, 10);
  CHECK(end != pat + strlen(pkey) && *end == 'u');
  CHECK_EQ_U64((uint64_t)planes, (uint64_t)CUBE__ACT_PLANES);
  CHECK(planes && (planes & (planes - 1u)) == 0);
  CHECK(strstr(prelude, "CUBE__TIMING_PLANE_WORDS * (1u + (blockIdx.x & (CUBE__TIMING_PLANES - 1u)))") != NULL);
  /* The end's reduction is issued on the global address: on the generic one
   * it cost a kernel of 4,096 cubes about 0.9 us on the H100 (20 % against
   * 5 %; docs/benchmarks.md, thirteenth session), which no CI machine can
   * measure. One reduction instruction in the prelude's inline PTX (each
   * instruction there follows a "\t"), and it is that one. */
  const char* red = strstr(prelude, "\\tred.");
  REQUIRE(red != NULL);
  CHECK(strncmp(red, "\\tred.global.max.u64 ", strlen("\\tred.global.max.u64 ")) == 0);
  CHECK(strstr(red + 1, "\\tred.") == NULL);
  const char* cvta = strstr(prelude, "cvta.to.global.u64 ");
  CHECK(cvta != NULL && cvta < red);
}

/* The timer's tests read no y or z index in every unit: the 1-D form (the
 * backend's CUBE_LAUNCH_1D, launches of 1 in y and z) makes them constants,
 * and the general form reads them only behind the tests of the x indices,
 * which the kernel's body reads anyway (docs/benchmarks.md, sixteenth
 * session: those reads, in all units, were what a self-timed saxpy paid).
 * The prelude is CUDA text; this holds its text to that. */
CUBE_TEST(cuda_prelude_timer_reads_y_and_z_only_behind_x) {
  const char* prelude = cube__dialect_prelude(CUBE__TARGET_CUDA);
  REQUIRE(prelude != NULL);
  CHECK(strstr(prelude, "#if defined(CUBE_LAUNCH_1D)\n#define CUBE__TIMER_UNIT_YZ 0u\n"
                        "#define CUBE__TIMER_CUBE_YZ 0u\n#else\n") != NULL);
  const char* from = strstr(prelude, "struct cube__timer {");
  const char* to = from ? strstr(from, "#define CUBE__ENTRY_TIMER") : NULL;
  REQUIRE(from != NULL && to != NULL);
  char timer[4096];
  REQUIRE((size_t)(to - from) < sizeof(timer));
  memcpy(timer, from, (size_t)(to - from));
  timer[to - from] = '\0';
  static const char* const yz[] = {"threadIdx.y", "threadIdx.z", "blockIdx.y", "blockIdx.z",
                                   "UNIT_POS_Y", "CUBE_POS_Y"};
  for (size_t i = 0; i < sizeof(yz) / sizeof(yz[0]); ++i) CHECK(strstr(timer, yz[i]) == NULL);
  CHECK(strstr(timer, "if (t && (threadIdx.x | blockIdx.x) == 0 && "
                      "(CUBE__TIMER_UNIT_YZ | CUBE__TIMER_CUBE_YZ) == 0)") != NULL);
  CHECK(strstr(timer, "if (t && threadIdx.x == 0 && CUBE__TIMER_UNIT_YZ == 0)") != NULL);
}

CUBE_TEST(generate_rejects_bad_input) {
  if (!parse_ok(saxpy_src, "saxpy")) return;
  char* text = (char*)1;
  cube_define_t bad_name = {"1BAD", "x"};
  CHECK_STATUS(cube__dialect_generate(CUBE__TARGET_CPU, &sig, saxpy_src, &bad_name, 1,
                                      CUBE_EXEC_CHECKED, &text),
               CUBE_STATUS_INVALID_ARGUMENT, "1BAD");
  CHECK(text == NULL);
  cube_define_t newline = {"N", "1\n#include <evil>"};
  CHECK_STATUS(cube__dialect_generate(CUBE__TARGET_CPU, &sig, saxpy_src, &newline, 1,
                                      CUBE_EXEC_CHECKED, &text),
               CUBE_STATUS_INVALID_ARGUMENT, "'N'", "line break");
  cube_define_t stack = {"CUBE_CPU_FIBER_STACK", "1000"};
  CHECK_STATUS(cube__dialect_generate(CUBE__TARGET_CPU, &sig, saxpy_src, &stack, 1,
                                      CUBE_EXEC_CHECKED, &text),
               CUBE_STATUS_INVALID_ARGUMENT, "CUBE_CPU_FIBER_STACK");
  CHECK_STATUS(cube__dialect_generate(CUBE__TARGET_CPU, &sig, saxpy_src, NULL, 0,
                                      (cube_execution_mode_t)9, &text),
               CUBE_STATUS_INVALID_ARGUMENT, "mode");
  CHECK_STATUS(cube__dialect_generate((cube__target_t)9, &sig, saxpy_src, NULL, 0,
                                      CUBE_EXEC_CHECKED, &text),
               CUBE_STATUS_INVALID_ARGUMENT, "target");
  CHECK_STATUS(cube__dialect_generate(CUBE__TARGET_CPU, NULL, saxpy_src, NULL, 0,
                                      CUBE_EXEC_CHECKED, &text),
               CUBE_STATUS_INVALID_ARGUMENT, "signature");
  CHECK_STATUS(cube__dialect_generate(CUBE__TARGET_CPU, &sig, saxpy_src, NULL, 2,
                                      CUBE_EXEC_CHECKED, &text),
               CUBE_STATUS_INVALID_ARGUMENT, "defines");
  CHECK_STATUS(cube__dialect_generate(CUBE__TARGET_CPU, &sig, saxpy_src, NULL, 0,
                                      CUBE_EXEC_CHECKED, NULL),
               CUBE_STATUS_INVALID_ARGUMENT, "out_text");
}

CUBE_TEST(generate_argidx_for_other_kernels) {
  const char* src =
      "CUBE_KERNEL(a, CUBE_ARRAY(float, p), CUBE_ARRAY(float, q)) { }\n"
      "CUBE_KERNEL(b, uint32_t n, CUBE_ARRAY(float, q), CUBE_ARRAY(float, r)) { }\n";
  if (!parse_ok(src, "b")) return;
  char* text = NULL;
  CHECK_OK(cube__dialect_generate(CUBE__TARGET_OPENCL, &sig, src, NULL, 0, CUBE_EXEC_VALIDATE,
                                  &text));
  if (!text) return;
  CHECK(strstr(text, "#define cube__argidx_q 1u\n") != NULL);
  CHECK(strstr(text, "#define cube__argidx_r 2u\n") != NULL);
  CHECK(strstr(text, "#define cube__argidx_p 4294967295u\n") != NULL);
  free(text);
}

/* Thread-local storage (CUBE_SHARED on the CPU) is first touched by the entry,
 * outside kernel code (see cube__emit_cpu_entry). */
CUBE_TEST(generate_cpu_tls_touch) {
  const char* shared_src =
      "CUBE_KERNEL(k, CUBE_ARRAY(float, x))\n"
      "{\n"
      "    CUBE_SHARED(float, sh, 64);\n"
      "    sh[UNIT_POS] = 1.0f;\n"
      "    sync_cube();\n"
      "    CUBE_STORE(x, ABSOLUTE_POS, sh[0]);\n"
      "}\n";
  char* text = NULL;
  if (parse_ok(shared_src, "k")) {
    CHECK_OK(cube__dialect_generate(CUBE__TARGET_CPU, &sig, shared_src, NULL, 0,
                                    CUBE_EXEC_CHECKED, &text));
    CHECK(text && strstr(text, "  cube__tls_touch();\n") != NULL);
    free(text);
    text = NULL;
  }
  if (parse_ok(saxpy_src, "saxpy")) {
    CHECK_OK(cube__dialect_generate(CUBE__TARGET_CPU, &sig, saxpy_src, NULL, 0, CUBE_EXEC_CHECKED,
                                    &text));
    CHECK(text && strstr(text, "cube__tls_touch") == NULL);
    free(text);
  }
}

CUBE_TEST(cpu_entry_error_texts) {
  CHECK(strstr(cube__dialect_cpu_entry_error(1), "scratch") != NULL);
  CHECK(strstr(cube__dialect_cpu_entry_error(2), "arguments") != NULL);
  CHECK(strstr(cube__dialect_cpu_entry_error(3), "CUBE_CPU_FIBER_STACK") != NULL);
  CHECK(cube__dialect_cpu_entry_error(99) != NULL);
}

/* A barrier in another kernel of the same source must not turn this kernel's
 * units into fibers; one in a helper function (outside every kernel) does. */
CUBE_TEST(parse_sync_cube_is_per_kernel) {
  const char* src =
      "CUBE_KERNEL(with_barrier, CUBE_ARRAY(float, x)) {\n"
      "  CUBE_SHARED(float, t, 4);\n  t[UNIT_POS_X] = x[0];\n  sync_cube();\n  x[0] = t[0];\n}\n"
      "CUBE_KERNEL(plain, CUBE_ARRAY(float, x)) { x[ABSOLUTE_POS] = 1.0f; }\n";
  cube__signature_t sg;
  REQUIRE_OK(cube__dialect_parse(src, "with_barrier", &sg));
  CHECK(sg.uses_sync_cube);
  REQUIRE_OK(cube__dialect_parse(src, "plain", &sg));
  CHECK(!sg.uses_sync_cube);
  const char* helper =
      "CUBE_FN void wait_all(CUBE_UNIT_PARAMS) { sync_cube(); }\n"
      "CUBE_KERNEL(calls_helper, CUBE_ARRAY(float, x)) { x[0] = 1.0f; }\n";
  REQUIRE_OK(cube__dialect_parse(helper, "calls_helper", &sg));
  CHECK(sg.uses_sync_cube);
}
