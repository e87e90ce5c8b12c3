// cube-test-libs: cube_static
/* Enumeration names and parsers, the memory usage line, the version. */
#include "base/abi.h"
#include "check.h"
#include "cube/cube.h"

CUBE_TEST(backend_names_round_trip) {
  for (int b = 0; b < CUBE__BACKEND_COUNT; ++b) {
    const char* name = cube_backend_name((cube_backend_t)b);
    REQUIRE(name != NULL);
    cube_backend_t parsed = CUBE__BACKEND_COUNT;
    CHECK_OK(cube_backend_parse(name, &parsed));
    CHECK_EQ_U64(parsed, b);
  }
  CHECK(strcmp(cube_backend_name(CUBE_BACKEND_CPU), "cpu") == 0);
  CHECK(strcmp(cube_backend_name(CUBE_BACKEND_CUDA), "cuda") == 0);
  CHECK(strcmp(cube_backend_name(CUBE_BACKEND_OPENCL), "opencl") == 0);
  CHECK(strcmp(cube_backend_name(CUBE_BACKEND_NULL), "null") == 0);
  CHECK(cube_backend_name(CUBE__BACKEND_COUNT) == NULL);
  CHECK(cube_backend_name((cube_backend_t)-1) == NULL);
}

CUBE_TEST(backend_parse_case_insensitive) {
  cube_backend_t b = CUBE_BACKEND_CPU;
  CHECK_OK(cube_backend_parse("CUDA", &b));
  CHECK(b == CUBE_BACKEND_CUDA);
  CHECK_OK(cube_backend_parse("OpenCL", &b));
  CHECK(b == CUBE_BACKEND_OPENCL);
  CHECK_OK(cube_backend_parse("Cpu", &b));
  CHECK(b == CUBE_BACKEND_CPU);
}

CUBE_TEST(backend_parse_errors) {
  cube_backend_t b = CUBE_BACKEND_NULL;
  CHECK_STATUS(cube_backend_parse("vulkan", &b), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_backend_parse", "'vulkan'", "cpu", "cuda", "opencl", "null");
  CHECK(b == CUBE_BACKEND_NULL); /* untouched */
  CHECK_STATUS(cube_backend_parse("", &b), CUBE_STATUS_INVALID_ARGUMENT, "cube_backend_parse");
  CHECK_STATUS(cube_backend_parse("cpu ", &b), CUBE_STATUS_INVALID_ARGUMENT, "'cpu '");
  CHECK_STATUS(cube_backend_parse(NULL, &b), CUBE_STATUS_INVALID_ARGUMENT, "name is NULL");
  CHECK_STATUS(cube_backend_parse("cpu", NULL), CUBE_STATUS_INVALID_ARGUMENT, "out_backend");
}

/* The environment is read once, and again after cube_shutdown: each value
 * below is set, then made visible with cube_shutdown. */
static void backend_env(const char* value) {
  if (value)
    setenv("CUBE_BACKEND", value, 1);
  else
    unsetenv("CUBE_BACKEND");
  cube_shutdown();
}

CUBE_TEST(backend_default_from_env) {
  const char* old = getenv("CUBE_BACKEND");
  char* saved = old ? strdup(old) : NULL;
  backend_env(NULL);
  CHECK(cube_backend_default() == CUBE_BACKEND_CPU);
  CHECK_OK(cube_options_check());
  backend_env("cuda");
  CHECK(cube_backend_default() == CUBE_BACKEND_CUDA);
  /* Read once: a change without cube_shutdown is not seen. */
  setenv("CUBE_BACKEND", "opencl", 1);
  CHECK(cube_backend_default() == CUBE_BACKEND_CUDA);
  backend_env("NULL");
  CHECK(cube_backend_default() == CUBE_BACKEND_NULL);
  /* Malformed: the default meanwhile, and every status-returning entry
   * point says what is wrong. */
  backend_env("no-such-backend");
  CHECK(cube_backend_default() == CUBE_BACKEND_CPU);
  CHECK_STATUS(cube_options_check(), CUBE_STATUS_INVALID_ARGUMENT, "CUBE_BACKEND",
               "'no-such-backend'", "cpu, cuda, opencl, null");
  CHECK_STATUS(cube_backend_status(CUBE_BACKEND_CPU), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_backend_status", "CUBE_BACKEND", "'no-such-backend'");
  backend_env("");
  CHECK(cube_backend_default() == CUBE_BACKEND_CPU);
  CHECK_OK(cube_options_check());
  if (saved) {
    setenv("CUBE_BACKEND", saved, 1);
    free(saved);
  } else {
    unsetenv("CUBE_BACKEND");
  }
  cube_shutdown();
}

CUBE_TEST(dtype_sizes_and_names) {
  static const struct {
    cube_dtype_t t;
    uint32_t size;
    const char* name;
  } table[] = {
      {CUBE_DTYPE_U8, 1, "u8"},   {CUBE_DTYPE_I8, 1, "i8"},     {CUBE_DTYPE_U32, 4, "u32"},
      {CUBE_DTYPE_I32, 4, "i32"}, {CUBE_DTYPE_U64, 8, "u64"},   {CUBE_DTYPE_I64, 8, "i64"},
      {CUBE_DTYPE_F16, 2, "f16"}, {CUBE_DTYPE_BF16, 2, "bf16"}, {CUBE_DTYPE_F32, 4, "f32"},
      {CUBE_DTYPE_F64, 8, "f64"},
  };
  CHECK_EQ_U64(sizeof(table) / sizeof(table[0]), CUBE__DTYPE_COUNT);
  for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); ++i) {
    CHECK_EQ_U64(cube_dtype_size(table[i].t), table[i].size);
    CHECK(strcmp(cube_dtype_name(table[i].t), table[i].name) == 0);
  }
  CHECK_EQ_U64(cube_dtype_size(CUBE__DTYPE_COUNT), 0);
  CHECK_EQ_U64(cube_dtype_size((cube_dtype_t)-1), 0);
  CHECK(strcmp(cube_dtype_name(CUBE__DTYPE_COUNT), "unknown") == 0);
}

CUBE_TEST(profile_level_round_trip) {
  for (int l = CUBE_PROFILE_NONE; l <= CUBE_PROFILE_FULL; ++l) {
    const char* name = cube_profile_level_name((cube_profile_level_t)l);
    cube_profile_level_t parsed = (cube_profile_level_t)99;
    CHECK_OK(cube_profile_level_parse(name, &parsed));
    CHECK_EQ_U64(parsed, l);
  }
  CHECK(strcmp(cube_profile_level_name(CUBE_PROFILE_NONE), "none") == 0);
  CHECK(strcmp(cube_profile_level_name(CUBE_PROFILE_EXEC), "exec") == 0);
  CHECK(strcmp(cube_profile_level_name(CUBE_PROFILE_BASIC), "basic") == 0);
  CHECK(strcmp(cube_profile_level_name(CUBE_PROFILE_MEDIUM), "medium") == 0);
  CHECK(strcmp(cube_profile_level_name(CUBE_PROFILE_FULL), "full") == 0);
  CHECK(strcmp(cube_profile_level_name((cube_profile_level_t)17), "unknown") == 0);
}

CUBE_TEST(profile_level_cubecl_aliases) {
  cube_profile_level_t l = CUBE_PROFILE_FULL;
  CHECK_OK(cube_profile_level_parse("disabled", &l));
  CHECK(l == CUBE_PROFILE_NONE);
  CHECK_OK(cube_profile_level_parse("minimal", &l));
  CHECK(l == CUBE_PROFILE_EXEC);
  CHECK_OK(cube_profile_level_parse("MEDIUM", &l));
  CHECK(l == CUBE_PROFILE_MEDIUM);
}

CUBE_TEST(profile_level_parse_errors) {
  cube_profile_level_t l = CUBE_PROFILE_BASIC;
  CHECK_STATUS(cube_profile_level_parse("verbose", &l), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_profile_level_parse", "'verbose'", "none", "full");
  CHECK(l == CUBE_PROFILE_BASIC);
  CHECK_STATUS(cube_profile_level_parse("", &l), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_profile_level_parse");
  CHECK_STATUS(cube_profile_level_parse(NULL, &l), CUBE_STATUS_INVALID_ARGUMENT, "text is NULL");
  CHECK_STATUS(cube_profile_level_parse("full", NULL), CUBE_STATUS_INVALID_ARGUMENT, "out_level");
}

CUBE_TEST(bytes_property_names) {
  CHECK(strcmp(cube_bytes_property_name(CUBE_BYTES_NATIVE), "native") == 0);
  CHECK(strcmp(cube_bytes_property_name(CUBE_BYTES_PINNED), "pinned") == 0);
  CHECK(strcmp(cube_bytes_property_name(CUBE_BYTES_FILE), "file") == 0);
  CHECK(strcmp(cube_bytes_property_name(CUBE_BYTES_OTHER), "other") == 0);
}

CUBE_TEST(memory_usage_format) {
  cube_memory_usage_t u = {3, 1020000, 12, 2040000};
  char buf[256];
  const char* s = cube_memory_usage_format(&u, buf, sizeof(buf));
  CHECK(s == buf);
  fprintf(stderr, "%s\n", buf);
  CHECK(strstr(buf, "3 allocations") != NULL);
  CHECK(strstr(buf, "996.09 KiB in use") != NULL); /* binary units, as every memory message */
  CHECK(strstr(buf, "12 B padding") != NULL);
  CHECK(strstr(buf, "1.95 MiB reserved") != NULL);
  CHECK(strstr(buf, "usage efficiency 50.00%") != NULL);
  CHECK(strstr(buf, "padding overhead 0.00%") != NULL);
}

CUBE_TEST(memory_usage_format_units_and_zero) {
  char buf[256];
  cube_memory_usage_t zero = {0, 0, 0, 0};
  cube_memory_usage_format(&zero, buf, sizeof(buf));
  CHECK(strstr(buf, "0 B in use") != NULL);
  CHECK(strstr(buf, "usage efficiency 0.00%") != NULL); /* no NaN for 0/0 */
  CHECK(strstr(buf, "nan") == NULL);
  cube_memory_usage_t u = {1, 999, 1000, 3000000000ull};
  cube_memory_usage_format(&u, buf, sizeof(buf));
  CHECK(strstr(buf, "999 B in use") != NULL);
  CHECK(strstr(buf, "1000 B padding") != NULL);
  CHECK(strstr(buf, "MB") == NULL && strstr(buf, "KB") == NULL && strstr(buf, "GB") == NULL);
  CHECK(strstr(buf, "2.79 GiB reserved") != NULL);
  CHECK(strstr(buf, "padding overhead 100.10%") != NULL);
  /* Truncation keeps the buffer terminated; NULL/0 buffers are returned as is. */
  char small[8];
  cube_memory_usage_format(&u, small, sizeof(small));
  CHECK(strlen(small) == sizeof(small) - 1);
  CHECK(cube_memory_usage_format(&u, NULL, 0) == NULL);
}

CUBE_TEST(version_string) {
  CHECK(strcmp(cube_version(), CUBE_VERSION_STRING) == 0);
  char expected[32];
  snprintf(expected, sizeof(expected), "%d.%d.%d", CUBE_VERSION_MAJOR, CUBE_VERSION_MINOR,
           CUBE_VERSION_PATCH);
  CHECK(strcmp(cube_version(), expected) == 0);
}
