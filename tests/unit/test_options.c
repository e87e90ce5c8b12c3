// cube-test-libs: cube_static
/* The option table (src/base/options.h, include/cube/options.h): every
 * CUBE_* variable parsed in one place, read once (and again after
 * cube_shutdown), malformed values failing the status-returning entry points
 * with the variable, the value and what is accepted; cube_option_get/set;
 * the README's table agreeing with the option table; and no CUBE_* variable
 * read anywhere else in the sources. Each case is its own process. */
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/abi.h"
#include "base/options.h"
#include "check.h"
#include "cube/cube.h"

static const cube_device_id_t cpu0 = {CUBE_BACKEND_CPU, 0};

/* Every CUBE_ variable of the table unset (the CTest environment sets
 * CUBE_CACHE_DIR), then the table re-read. */
static void clean_env(void) {
  for (int i = 0; i < CUBE__OPT_COUNT; ++i) unsetenv(cube_option_name((cube_option_t)i));
  cube_shutdown();
}

static char* read_text(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* s = n >= 0 ? malloc((size_t)n + 1) : NULL;
  if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
    free(s);
    s = NULL;
  }
  if (s) s[n] = '\0';
  fclose(f);
  return s;
}

static int noop_kernel(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube;
  (void)args;
  (void)n;
  return 0;
}

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

/* cube_device_count (deprecated) returns no status: it counts with the
 * defaults while an option is malformed. */
static size_t count_without_status(cube_backend_t b) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  return cube_device_count(b);
#pragma GCC diagnostic pop
}

CUBE_TEST(table_is_complete_and_defaults_parse) {
  clean_env();
  for (int i = 0; i < CUBE__OPT_COUNT; ++i) {
    cube_option_info_t info;
    REQUIRE_OK(cube_option_describe((cube_option_t)i, &info));
    CHECK(info.option == (cube_option_t)i);
    CHECK(strncmp(info.name, "CUBE_", 5) == 0);
    CHECK(strcmp(info.name, cube_option_name((cube_option_t)i)) == 0);
    CHECK(info.doc && info.doc[0] && info.accepted && info.accepted[0]);
    CHECK(info.default_doc && info.default_doc[0]);
    CHECK(info.source == CUBE_OPTION_SOURCE_DEFAULT && !info.rejected);
    /* Per-device options are read when a device is created, nothing else. */
    CHECK((info.scope == CUBE_OPTION_SCOPE_DEVICE) ==
          (info.when == CUBE_OPTION_AT_DEVICE_CREATION));
    /* Found by name, with or without the prefix, in any case. */
    cube_option_t id = (cube_option_t)CUBE__OPT_COUNT;
    CHECK_OK(cube_option_find(info.name, &id));
    CHECK(id == (cube_option_t)i);
    char lower[64];
    snprintf(lower, sizeof(lower), "%s", info.name + 5);
    for (char* c = lower; *c; ++c) *c = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    id = (cube_option_t)CUBE__OPT_COUNT;
    CHECK_OK(cube_option_find(lower, &id));
    CHECK(id == (cube_option_t)i);
    /* The default is a value the option accepts, and what the docs show. */
    char buf[4096];
    cube_option_source_t src = CUBE_OPTION_SOURCE_API;
    CHECK_OK(cube_option_get(info.name, buf, sizeof(buf), &src));
    CHECK(src == CUBE_OPTION_SOURCE_DEFAULT);
    if (info.default_value) {
      uint64_t bits = 0;
      CHECK_OK(cube__option_parse((cube__option_id_t)i, info.default_value, &bits));
      CHECK(strcmp(buf, info.default_value) == 0);
      CHECK(strncmp(info.default_doc, info.default_value, strlen(info.default_value)) == 0);
    } else {
      CHECK(buf[0] == '\0');
    }
  }
  cube_option_t id;
  CHECK_STATUS(cube_option_find("CUBE_NO_SUCH_OPTION", &id), CUBE_STATUS_NOT_FOUND,
               "'CUBE_NO_SUCH_OPTION'");
  CHECK_STATUS(cube_option_find(NULL, &id), CUBE_STATUS_INVALID_ARGUMENT, "name is NULL");
  CHECK_STATUS(cube_option_find("CUBE_BACKEND", NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "out_option");
  cube_option_info_t info;
  CHECK_STATUS(cube_option_describe((cube_option_t)CUBE__OPT_COUNT, &info), CUBE_STATUS_INVALID_ARGUMENT,
               "out of range");
  CHECK_STATUS(cube_option_describe(CUBE_OPTION_BACKEND, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "out_info");
  CHECK(cube_option_name((cube_option_t)CUBE__OPT_COUNT) == NULL);
  CHECK(cube_option_name((cube_option_t)-1) == NULL);
}

/* The words of the enum options are the enums of the API, in order. */
CUBE_TEST(enum_words_match_the_api) {
  clean_env();
  for (int b = 0; b < CUBE__BACKEND_COUNT; ++b) {
    uint64_t v = 99;
    CHECK_OK(cube__option_parse(CUBE__OPT_BACKEND, cube_backend_name((cube_backend_t)b), &v));
    CHECK_EQ_U64(v, (uint64_t)b);
  }
  for (int l = CUBE_PROFILE_NONE; l <= CUBE_PROFILE_FULL; ++l) {
    uint64_t v = 99;
    CHECK_OK(cube__option_parse(CUBE__OPT_PROFILE,
                                cube_profile_level_name((cube_profile_level_t)l), &v));
    CHECK_EQ_U64(v, (uint64_t)l);
  }
  static const struct {
    cube__option_id_t id;
    const char* word;
    uint64_t value;
  } words[] = {
      {CUBE__OPT_CHECK_MODE, "auto", CUBE_CHECK_AUTO},
      {CUBE__OPT_CHECK_MODE, "Enforce", CUBE_CHECK_ENFORCE},
      {CUBE__OPT_CHECK_MODE, "validate", CUBE_CHECK_VALIDATE},
      {CUBE__OPT_PROFILE, "disabled", CUBE_PROFILE_NONE},
      {CUBE__OPT_PROFILE, "MINIMAL", CUBE_PROFILE_EXEC},
      {CUBE__OPT_DEVICE_QUEUE, "threaded", 0},
      {CUBE__OPT_DEVICE_QUEUE, "inline", 1},
      {CUBE__OPT_CUDA_STREAM_COPY, "down", 0},
      {CUBE__OPT_CUDA_STREAM_COPY, "up", 1},
      {CUBE__OPT_CUDA_STREAM_COPY, "1", 2},
      {CUBE__OPT_CUDA_STREAM_COPY, "both", 2},
      {CUBE__OPT_CUDA_STREAM_COPY, "0", 3},
      {CUBE__OPT_CUDA_STREAM_COPY, "none", 3},
      {CUBE__OPT_COLLECTIVE_MPI, "auto", 0},
      {CUBE__OPT_COLLECTIVE_MPI, "1", 1},
      {CUBE__OPT_COLLECTIVE_MPI, "0", 2},
  };
  for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); ++i) {
    uint64_t v = 99;
    CHECK_OK(cube__option_parse(words[i].id, words[i].word, &v));
    if (v != words[i].value) fprintf(stderr, "word '%s'\n", words[i].word);
    CHECK_EQ_U64(v, words[i].value);
  }
}

/* Each type: values at the edges of what is accepted, and values just past
 * them, whose message names the variable, the text and what is accepted. */
CUBE_TEST(values_and_messages_by_type) {
  clean_env();
  static const struct {
    cube__option_id_t id;
    const char* text;
    uint64_t bits; /* for good values (doubles: see below) */
  } good[] = {
      {CUBE__OPT_NCCL_BLOCKING, "1", 1},          {CUBE__OPT_NCCL_BLOCKING, "off", 0},
      {CUBE__OPT_NCCL_BLOCKING, "Yes", 1},        {CUBE__OPT_NCCL_BLOCKING, "false", 0},
      {CUBE__OPT_CPU_DEVICES, "1", 1},        {CUBE__OPT_CPU_DEVICES, "64", 64},
      {CUBE__OPT_CPU_THREADS, "1024", 1024},  {CUBE__OPT_NULL_DEVICES, "0", 0},
      {CUBE__OPT_NULL_DEVICES, " 16 ", 16},   {CUBE__OPT_MAX_STREAMS, "65536", 65536},
      {CUBE__OPT_COLLECTIVE_RANK, "0", 0},    {CUBE__OPT_COLLECTIVE_RANKS, "65536", 65536},
      {CUBE__OPT_CUDA_STAGING_CHUNK, "64K", 65536},
      {CUBE__OPT_CUDA_STAGING_CHUNK, "64MiB", 64u << 20},
      {CUBE__OPT_CUDA_STAGING_CHUNK, "1052672", 1052672}, /* 257 * 4 KiB */
      {CUBE__OPT_MEMORY_LIMIT, "1.5GiB", 3ull << 29},
      {CUBE__OPT_MEMORY_LIMIT, "0", 0},
      {CUBE__OPT_CUDA_COPY_THREADS, "256", 256},
  };
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); ++i) {
    uint64_t v = 12345;
    cube_status_t st = cube__option_parse(good[i].id, good[i].text, &v);
    if (st || v != good[i].bits)
      fprintf(stderr, "%s='%s' -> %llu\n", cube_option_name((cube_option_t)good[i].id),
              good[i].text, (unsigned long long)v);
    CHECK_OK(st);
    CHECK_EQ_U64(v, good[i].bits);
  }
  uint64_t bits = 0;
  double d = 0;
  CHECK_OK(cube__option_parse(CUBE__OPT_COLLECTIVE_TIMEOUT, "1e9", &bits));
  memcpy(&d, &bits, sizeof(d));
  CHECK(d == 1e9);
  CHECK_OK(cube__option_parse(CUBE__OPT_COLLECTIVE_TIMEOUT, "0.001", &bits));
  memcpy(&d, &bits, sizeof(d));
  CHECK(d == 0.001);
  char longest[256];
  memset(longest, 'a', 255);
  longest[255] = '\0';
  CHECK_OK(cube__option_parse(CUBE__OPT_OPENCL_LIBRARY, longest, &bits));
  CHECK_OK(cube__option_parse(CUBE__OPT_FAULT, "cpu_alloc:1,CUDA_WRITE:3:2", &bits));

  char too_long[257];
  memset(too_long, 'a', 256);
  too_long[256] = '\0';
  const struct {
    cube__option_id_t id;
    const char* text;
    const char* words[3];
  } bad[] = {
      {CUBE__OPT_NCCL_BLOCKING, "maybe", {"CUBE_NCCL_BLOCKING", "'maybe'", "1/0, true/false"}},
      {CUBE__OPT_CPU_DEVICES, "0", {"CUBE_CPU_DEVICES", "'0'", "[1, 64]"}},
      {CUBE__OPT_CPU_DEVICES, "65", {"CUBE_CPU_DEVICES", "'65'", "[1, 64]"}},
      {CUBE__OPT_CPU_DEVICES, "-1", {"'-1'", "[1, 64]", NULL}},
      {CUBE__OPT_CPU_DEVICES, "3x", {"'3x'", "[1, 64]", NULL}},
      {CUBE__OPT_CPU_DEVICES, "99999999999999999999", {"'99999999999999999999'", NULL, NULL}},
      {CUBE__OPT_CPU_THREADS, "1025", {"CUBE_CPU_THREADS", "'1025'", "[1, 1024]"}},
      {CUBE__OPT_NULL_DEVICES, "17", {"CUBE_NULL_DEVICES", "'17'", "[0, 16]"}},
      {CUBE__OPT_MAX_STREAMS, "0", {"CUBE_MAX_STREAMS", "'0'", "[1, 65536]"}},
      {CUBE__OPT_COLLECTIVE_RANKS, "0", {"CUBE_COLLECTIVE_RANKS", "[1, 65536]", NULL}},
      {CUBE__OPT_CUDA_COPY_THREADS, "257", {"CUBE_CUDA_COPY_THREADS", "[1, 256]", NULL}},
      {CUBE__OPT_CUDA_STAGING_CHUNK, "65537", {"'65537'", "64 KiB to 64 MiB", "multiple of 4 KiB"}},
      {CUBE__OPT_CUDA_STAGING_CHUNK, "32K", {"CUBE_CUDA_STAGING_CHUNK", "'32K'", "64 KiB"}},
      {CUBE__OPT_CUDA_STAGING_CHUNK, "65M", {"'65M'", "64 MiB", NULL}},
      {CUBE__OPT_MEMORY_LIMIT, "lots", {"CUBE_MEMORY_LIMIT", "'lots'", "512K"}},
      {CUBE__OPT_MEMORY_LIMIT, "2X", {"'2X'", "size", NULL}},
      /* Not numbers a size can be (fuzz_options found "nan" converted to an
       * integer, undefined behaviour, before it was refused). */
      {CUBE__OPT_MEMORY_LIMIT, "nan", {"CUBE_MEMORY_LIMIT", "'nan'", "512K"}},
      {CUBE__OPT_MEMORY_LIMIT, "-nanG", {"'-nanG'", NULL, NULL}},
      {CUBE__OPT_CACHE_MAX, "NaN", {"CUBE_CACHE_MAX", "'NaN'", NULL}},
      {CUBE__OPT_MEMORY_LIMIT, "inf", {"'inf'", NULL, NULL}},
      {CUBE__OPT_MEMORY_LIMIT, "1e300T", {"'1e300T'", NULL, NULL}},
      {CUBE__OPT_CUDA_STAGING_CHUNK, "nan", {"'nan'", NULL, NULL}},
      {CUBE__OPT_COLLECTIVE_TIMEOUT, "soon", {"CUBE_COLLECTIVE_TIMEOUT", "'soon'", "seconds"}},
      {CUBE__OPT_COLLECTIVE_TIMEOUT, "0", {"'0'", "greater than 0", NULL}},
      {CUBE__OPT_COLLECTIVE_TIMEOUT, "-1", {"'-1'", "greater than 0", NULL}},
      {CUBE__OPT_COLLECTIVE_TIMEOUT, "nan", {"'nan'", "at most 1000000000", NULL}},
      {CUBE__OPT_COLLECTIVE_TIMEOUT, "inf", {"'inf'", NULL, NULL}},
      {CUBE__OPT_COLLECTIVE_TIMEOUT, "1e10", {"'1e10'", NULL, NULL}},
      {CUBE__OPT_BACKEND, "gpu", {"CUBE_BACKEND", "'gpu'", "one of cpu, cuda, opencl, null"}},
      {CUBE__OPT_CHECK_MODE, "strict", {"CUBE_CHECK_MODE", "'strict'", "auto, enforce, validate"}},
      {CUBE__OPT_PROFILE, "verbose", {"'verbose'", "none, exec, basic, medium, full", "disabled"}},
      {CUBE__OPT_DEVICE_QUEUE, "sideways", {"CUBE_DEVICE_QUEUE", "'sideways'", "threaded, inline"}},
      {CUBE__OPT_CUDA_STREAM_COPY, "2", {"CUBE_CUDA_STREAM_COPY", "'2'", "down, up, 1, 0"}},
      {CUBE__OPT_COLLECTIVE_MPI, "yes", {"CUBE_COLLECTIVE_MPI", "'yes'", "auto, 1, 0"}},
      {CUBE__OPT_OPENCL_LIBRARY, too_long, {"CUBE_OPENCL_LIBRARY", "256 bytes", "at most 255"}},
      {CUBE__OPT_FAULT, "cpu_alloc:1,bogus:1", {"CUBE_FAULT", "'bogus:1'", "<site>:<n>"}},
      {CUBE__OPT_FAULT, "cpu_alloc:0", {"CUBE_FAULT", "'cpu_alloc:0'", "n >= 1"}},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); ++i) {
    uint64_t v = 0;
    cube_status_t st = cube__option_parse(bad[i].id, bad[i].text, &v);
    CHECK_STATUS(st, CUBE_STATUS_INVALID_ARGUMENT, bad[i].words[0] ? bad[i].words[0] : "",
                 bad[i].words[1] ? bad[i].words[1] : "", bad[i].words[2] ? bad[i].words[2] : "");
  }
}

//===----------------------------------------------------------------------===//
// The environment: read once, again after cube_shutdown
//===----------------------------------------------------------------------===//

CUBE_TEST(environment_read_once_and_after_shutdown) {
  clean_env();
  setenv("CUBE_CPU_DEVICES", "3", 1);
  setenv("CUBE_COLLECTIVE_TIMEOUT", "0.25", 1);
  setenv("CUBE_BACKEND", "Null", 1);
  setenv("CUBE_CUDA_STAGING_CHUNK", "512K", 1);
  setenv("CUBE_NCCL_BLOCKING", "", 1); /* empty: unset */
  cube_shutdown();
  CHECK_EQ_U64(cube_test_device_count(CUBE_BACKEND_CPU), 3);
  CHECK(cube_backend_default() == CUBE_BACKEND_NULL);
  char buf[64];
  cube_option_source_t src;
  CHECK_OK(cube_option_get("CUBE_CPU_DEVICES", buf, sizeof(buf), &src));
  CHECK(strcmp(buf, "3") == 0 && src == CUBE_OPTION_SOURCE_ENVIRONMENT);
  CHECK_OK(cube_option_get("CUBE_BACKEND", buf, sizeof(buf), &src));
  CHECK(strcmp(buf, "Null") == 0 && src == CUBE_OPTION_SOURCE_ENVIRONMENT);
  CHECK_OK(cube_option_get("nccl_blocking", buf, sizeof(buf), &src));
  CHECK(strcmp(buf, "0") == 0 && src == CUBE_OPTION_SOURCE_DEFAULT);
  double t = 0;
  CHECK_OK(cube_option_get_double(CUBE_OPTION_COLLECTIVE_TIMEOUT, &t));
  CHECK(t == 0.25);
  uint64_t chunk = 0;
  CHECK_OK(cube_option_get_u64(CUBE_OPTION_CUDA_STAGING_CHUNK, &chunk));
  CHECK_EQ_U64(chunk, 512u << 10);
  /* A device created now takes the per-device values. */
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 2}, &c));
  cube_client_release(c);
  /* Changed in the environment: not seen until cube_shutdown. */
  setenv("CUBE_CPU_DEVICES", "5", 1);
  setenv("CUBE_COLLECTIVE_TIMEOUT", "9", 1);
  CHECK_EQ_U64(cube_test_device_count(CUBE_BACKEND_CPU), 3);
  CHECK_OK(cube_option_get_double(CUBE_OPTION_COLLECTIVE_TIMEOUT, &t));
  CHECK(t == 0.25);
  cube_shutdown();
  CHECK_EQ_U64(cube_test_device_count(CUBE_BACKEND_CPU), 5);
  CHECK_OK(cube_option_get_double(CUBE_OPTION_COLLECTIVE_TIMEOUT, &t));
  CHECK(t == 9.0);
  clean_env();
  CHECK_EQ_U64(cube_test_device_count(CUBE_BACKEND_CPU), 1);
}

/* Malformed values, several at once: every status-returning entry point
 * fails naming each; calls that return no status use the defaults. */
CUBE_TEST(malformed_environment_fails_every_entry_point) {
  clean_env();
  setenv("CUBE_BACKEND", "gpu", 1);
  setenv("CUBE_CPU_DEVICES", "many", 1);
  setenv("CUBE_CUDA_STAGING_CHUNK", "3", 1);
  cube_shutdown();
  const char* w1 = "CUBE_BACKEND: 'gpu' is not one of cpu, cuda, opencl, null";
  const char* w2 = "CUBE_CPU_DEVICES: 'many' is not an integer in [1, 64]";
  const char* w3 = "CUBE_CUDA_STAGING_CHUNK: '3' is not a size from 64 KiB to 64 MiB, a "
                   "multiple of 4 KiB";
  CHECK_STATUS(cube_options_check(), CUBE_STATUS_INVALID_ARGUMENT, w1, w2, w3);
  cube_client_t* c = NULL;
  CHECK_STATUS(cube_client_load(cpu0, &c), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_load", w1,
               w2, w3);
  CHECK(c == NULL);
  CHECK_STATUS(cube_client_init(cpu0, NULL, &c), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_client_init", w1);
  CHECK_STATUS(cube_backend_status(CUBE_BACKEND_NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_backend_status", w2);
  size_t n = 99;
  CHECK_STATUS(cube_enumerate_devices(CUBE_BACKEND_CPU, NULL, 0, &n),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_enumerate_devices", w3);
  CHECK_STATUS(cube_enumerate_all_devices(NULL, 0, &n), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_enumerate_all_devices", w1);
  CHECK_EQ_U64(n, 99); /* nothing written */
  uint32_t rank = 7;
  CHECK_STATUS(cube_collective_world(&rank, NULL, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_collective_world", w1);
  CHECK_EQ_U64(rank, 7);
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = "noop";
  d.cpu_fn = noop_kernel;
  cube_kernel_t* k = NULL;
  CHECK_STATUS(cube_kernel_create(&d, &k), CUBE_STATUS_INVALID_ARGUMENT, "cube_kernel_create",
               w2);
  CHECK(k == NULL);
  cube_kernel_cache_stats_t ks;
  CHECK_STATUS(cube_kernel_cache_stats(&ks), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_kernel_cache_stats", w1);
  CHECK_STATUS(cube_kernel_cache_dir_status(), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_kernel_cache_dir_status", w1);
  CHECK_STATUS(cube_kernel_cache_clear(), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_kernel_cache_clear", w1);
  /* No status to return: the defaults (the deprecated count has none). */
  CHECK(cube_backend_default() == CUBE_BACKEND_CPU);
  CHECK_EQ_U64(count_without_status(CUBE_BACKEND_CPU), 1);
  char buf[64];
  cube_option_source_t src;
  CHECK_OK(cube_option_get("CUBE_CPU_DEVICES", buf, sizeof(buf), &src));
  CHECK(strcmp(buf, "1") == 0 && src == CUBE_OPTION_SOURCE_DEFAULT);
  cube_option_info_t info;
  CHECK_OK(cube_option_describe(CUBE_OPTION_CPU_DEVICES, &info));
  CHECK(info.rejected);
  CHECK_OK(cube_option_describe(CUBE_OPTION_CPU_THREADS, &info));
  CHECK(!info.rejected);
  /* Set through the API, a process-wide option is fixed for good; a
   * per-device one cannot be set: its environment must be fixed. The count
   * above read CUBE_CPU_DEVICES (an AT_START option): a shutdown first. */
  CHECK_STATUS(cube_option_set_u64(CUBE_OPTION_CPU_DEVICES, 2), CUBE_STATUS_FAILED_PRECONDITION,
               "CUBE_CPU_DEVICES", "cube_shutdown");
  cube_shutdown();
  CHECK_OK(cube_option_set("CUBE_BACKEND", "cpu"));
  CHECK_OK(cube_option_set_u64(CUBE_OPTION_CPU_DEVICES, 2));
  CHECK_STATUS(cube_option_set("CUBE_CUDA_STAGING_CHUNK", "4M"), CUBE_STATUS_INVALID_ARGUMENT,
               "per-device", "cube_client_init");
  cube_status_t st = cube_client_load(cpu0, &c);
  CHECK_STATUS(st, CUBE_STATUS_INVALID_ARGUMENT, "CUBE_CUDA_STAGING_CHUNK");
  st = cube_options_check();
  CHECK(st && !strstr(cube_status_message(st), "CUBE_BACKEND") &&
        !strstr(cube_status_message(st), "CUBE_CPU_DEVICES"));
  cube_status_free(st);
  unsetenv("CUBE_CUDA_STAGING_CHUNK");
  cube_shutdown();
  CHECK_OK(cube_options_check());
  REQUIRE_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 1}, &c));
  CHECK_EQ_U64(cube_test_device_count(CUBE_BACKEND_CPU), 2);
  cube_client_release(c);
  clean_env();
  CHECK_OK(cube_option_set("CUBE_BACKEND", NULL));
  CHECK_OK(cube_option_set("CUBE_CPU_DEVICES", NULL));
}

/* Per-device values from the environment reach the device unless its
 * options give them. */
CUBE_TEST(per_device_environment_reaches_the_device) {
  clean_env();
  setenv("CUBE_PROFILE", "basic", 1);
  setenv("CUBE_DEVICE_QUEUE", "inline", 1);
  setenv("CUBE_CPU_DEVICES", "2", 1);
  cube_shutdown();
  cube_client_t* c = NULL;
  REQUIRE_OK(cube_client_load(cpu0, &c));
  CHECK(cube_client_is_blocking(c));
  CHECK(cube_client_profile_level(c) == CUBE_PROFILE_BASIC);
  cube_client_release(c);
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.queue_mode = CUBE_QUEUE_THREADED;
  o.profile_level = CUBE_PROFILE_FULL;
  REQUIRE_OK(cube_client_init((cube_device_id_t){CUBE_BACKEND_CPU, 1}, &o, &c));
  CHECK(!cube_client_is_blocking(c));
  CHECK(cube_client_profile_level(c) == CUBE_PROFILE_FULL);
  cube_client_release(c);
  clean_env();
}

//===----------------------------------------------------------------------===//
// cube_option_get / cube_option_set
//===----------------------------------------------------------------------===//

CUBE_TEST(set_and_get_text_and_typed) {
  clean_env();
  setenv("CUBE_COLLECTIVE_TIMEOUT", "7", 1);
  cube_shutdown();
  char buf[64];
  cube_option_source_t src;
  CHECK_OK(cube_option_set("CUBE_COLLECTIVE_TIMEOUT", "2.5"));
  double t = 0;
  CHECK_OK(cube_option_get_double(CUBE_OPTION_COLLECTIVE_TIMEOUT, &t));
  CHECK(t == 2.5);
  CHECK_OK(cube_option_get("collective_timeout", buf, sizeof(buf), &src));
  CHECK(strcmp(buf, "2.5") == 0 && src == CUBE_OPTION_SOURCE_API);
  CHECK_OK(cube_option_set_double(CUBE_OPTION_COLLECTIVE_TIMEOUT, 0.75));
  CHECK(cube__option_seconds(CUBE__OPT_COLLECTIVE_TIMEOUT) == 0.75);
  /* API values survive cube_shutdown; NULL goes back to the environment. */
  cube_shutdown();
  CHECK_OK(cube_option_get_double(CUBE_OPTION_COLLECTIVE_TIMEOUT, &t));
  CHECK(t == 0.75);
  CHECK_OK(cube_option_set("CUBE_COLLECTIVE_TIMEOUT", NULL));
  CHECK_OK(cube_option_get("CUBE_COLLECTIVE_TIMEOUT", buf, sizeof(buf), &src));
  CHECK(strcmp(buf, "7") == 0 && src == CUBE_OPTION_SOURCE_ENVIRONMENT);
  /* Enums by word index. */
  CHECK_OK(cube_option_set_u64(CUBE_OPTION_BACKEND, CUBE_BACKEND_NULL));
  CHECK(cube_backend_default() == CUBE_BACKEND_NULL);
  CHECK_OK(cube_option_get("CUBE_BACKEND", buf, sizeof(buf), &src));
  CHECK(strcmp(buf, "null") == 0);
  uint64_t v = 0;
  CHECK_OK(cube_option_get_u64(CUBE_OPTION_BACKEND, &v));
  CHECK_EQ_U64(v, CUBE_BACKEND_NULL);
  CHECK_STATUS(cube_option_set_u64(CUBE_OPTION_BACKEND, 4), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_option_set_u64", "CUBE_BACKEND", "0 to 3");
  CHECK_OK(cube_option_set_u64(CUBE_OPTION_NCCL_BLOCKING, 1));
  CHECK(cube__option_bool(CUBE__OPT_NCCL_BLOCKING));
  CHECK_STATUS(cube_option_set_u64(CUBE_OPTION_NCCL_BLOCKING, 2), CUBE_STATUS_INVALID_ARGUMENT,
               "CUBE_NCCL_BLOCKING", "'2'");
  /* Refusals change nothing. */
  CHECK_STATUS(cube_option_set("CUBE_COLLECTIVE_TIMEOUT", "soon"), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_option_set", "CUBE_COLLECTIVE_TIMEOUT", "'soon'");
  CHECK_STATUS(cube_option_set_double(CUBE_OPTION_COLLECTIVE_TIMEOUT, -1.0),
               CUBE_STATUS_INVALID_ARGUMENT, "greater than 0");
  CHECK_STATUS(cube_option_set_double(CUBE_OPTION_COLLECTIVE_TIMEOUT, NAN),
               CUBE_STATUS_INVALID_ARGUMENT, "CUBE_COLLECTIVE_TIMEOUT");
  CHECK_OK(cube_option_get_double(CUBE_OPTION_COLLECTIVE_TIMEOUT, &t));
  CHECK(t == 7.0);
  CHECK_STATUS(cube_option_set_u64(CUBE_OPTION_COLLECTIVE_TIMEOUT, 3),
               CUBE_STATUS_INVALID_ARGUMENT, "seconds", "_double");
  CHECK_STATUS(cube_option_get_u64(CUBE_OPTION_CC, &v), CUBE_STATUS_INVALID_ARGUMENT, "CUBE_CC",
               "text");
  CHECK_STATUS(cube_option_get_double(CUBE_OPTION_BACKEND, &t), CUBE_STATUS_INVALID_ARGUMENT,
               "_u64");
  CHECK_STATUS(cube_option_get_u64(CUBE_OPTION_CPU_THREADS, &v), CUBE_STATUS_NOT_FOUND,
               "CUBE_CPU_THREADS", "no value", "the cores");
  CHECK_STATUS(cube_option_get_u64((cube_option_t)CUBE__OPT_COUNT, &v), CUBE_STATUS_INVALID_ARGUMENT,
               "out of range");
  CHECK_STATUS(cube_option_get_u64(CUBE_OPTION_BACKEND, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "out_value");
  CHECK_STATUS(cube_option_set("CUBE_NOPE", "1"), CUBE_STATUS_NOT_FOUND, "cube_option_set",
               "'CUBE_NOPE'");
  CHECK_STATUS(cube_option_set(NULL, "1"), CUBE_STATUS_INVALID_ARGUMENT, "name is NULL");
  CHECK_STATUS(cube_option_set("CUBE_MAX_STREAMS", "4"), CUBE_STATUS_INVALID_ARGUMENT,
               "CUBE_MAX_STREAMS", "per-device");
  /* Text: a buffer too small is refused, not cut. */
  CHECK_OK(cube_option_set("CUBE_CC", "/opt/some/compiler-cc"));
  char small[8] = "xxxxxxx";
  CHECK_STATUS(cube_option_get("CUBE_CC", small, sizeof(small), &src), CUBE_STATUS_OUT_OF_RANGE,
               "CUBE_CC", "21 bytes", "7");
  CHECK(strcmp(small, "xxxxxxx") == 0);
  CHECK_OK(cube_option_get("CUBE_CC", buf, sizeof(buf), &src));
  CHECK(strcmp(buf, "/opt/some/compiler-cc") == 0 && src == CUBE_OPTION_SOURCE_API);
  CHECK(strcmp(cube__option_str(CUBE__OPT_CC), "/opt/some/compiler-cc") == 0);
  CHECK_STATUS(cube_option_get("CUBE_CC", NULL, 4, &src), CUBE_STATUS_INVALID_ARGUMENT, "buf");
  CHECK_OK(cube_option_set("CUBE_CC", NULL));
  CHECK(cube__option_str(CUBE__OPT_CC) == NULL);
  CHECK_OK(cube_option_set("CUBE_BACKEND", NULL));
  CHECK_OK(cube_option_set("CUBE_NCCL_BLOCKING", NULL));
  clean_env();
}

/* AT_START options: set before first use or after cube_shutdown. ONCE
 * options: before first use only. */
CUBE_TEST(set_after_use_is_refused) {
  clean_env();
  CHECK_OK(cube_option_set("CUBE_CPU_DEVICES", "2"));
  CHECK_EQ_U64(cube_test_device_count(CUBE_BACKEND_CPU), 2);
  CHECK_STATUS(cube_option_set("CUBE_CPU_DEVICES", "3"), CUBE_STATUS_FAILED_PRECONDITION,
               "CUBE_CPU_DEVICES", "cube_shutdown");
  CHECK_EQ_U64(cube_test_device_count(CUBE_BACKEND_CPU), 2);
  cube_shutdown();
  CHECK_OK(cube_option_set("CUBE_CPU_DEVICES", "3"));
  CHECK_EQ_U64(cube_test_device_count(CUBE_BACKEND_CPU), 3);
  /* An AT_USE option: at any time, seen at the next use. */
  CHECK_OK(cube_option_set("CUBE_BACKEND", "null"));
  CHECK(cube_backend_default() == CUBE_BACKEND_NULL);
  CHECK_OK(cube_option_set("CUBE_BACKEND", "cpu"));
  CHECK(cube_backend_default() == CUBE_BACKEND_CPU);
  /* ONCE: the collective world is fixed when first asked for. */
  CHECK_OK(cube_option_set("CUBE_COLLECTIVE_RANKS", "1"));
  uint32_t rank = 9, ranks = 9;
  CHECK_OK(cube_collective_world(&rank, &ranks, NULL));
  CHECK_EQ_U64(ranks, 1);
  CHECK_STATUS(cube_option_set("CUBE_COLLECTIVE_RANKS", "2"), CUBE_STATUS_FAILED_PRECONDITION,
               "CUBE_COLLECTIVE_RANKS", "once");
  cube_shutdown();
  CHECK_STATUS(cube_option_set("CUBE_COLLECTIVE_RANKS", "2"), CUBE_STATUS_FAILED_PRECONDITION,
               "once");
  CHECK_OK(cube_option_set("CUBE_CPU_DEVICES", NULL));
  clean_env();
}

/* The rank options together: rank < ranks, checked where they are used. */
CUBE_TEST(collective_rank_beyond_ranks_is_named) {
  clean_env();
  setenv("CUBE_COLLECTIVE_RANK", "2", 1);
  setenv("CUBE_COLLECTIVE_RANKS", "2", 1);
  cube_shutdown();
  uint32_t rank = 0;
  CHECK_STATUS(cube_collective_world(&rank, NULL, NULL), CUBE_STATUS_INVALID_ARGUMENT,
               "CUBE_COLLECTIVE_RANK=2", "CUBE_COLLECTIVE_RANKS=2", "rank < ranks");
  clean_env();
}

typedef struct {
  atomic_int stop;
  atomic_int bad;
} race_t;

static void* setter(void* p) {
  race_t* r = p;
  for (int i = 0; i < 2000 && !atomic_load(&r->stop); ++i) {
    cube_status_t st = cube_option_set_double(CUBE_OPTION_COLLECTIVE_TIMEOUT, i % 2 ? 1.5 : 3.0);
    if (st) atomic_fetch_add(&r->bad, 1);
    cube_status_free(st);
    st = cube_option_set("CUBE_CC", i % 2 ? "cc-one" : "cc-two");
    if (st) atomic_fetch_add(&r->bad, 1);
    cube_status_free(st);
  }
  return NULL;
}

static void* getter(void* p) {
  race_t* r = p;
  for (int i = 0; i < 4000; ++i) {
    double t = cube__option_seconds(CUBE__OPT_COLLECTIVE_TIMEOUT);
    if (t != 1.5 && t != 3.0 && t != 60.0) atomic_fetch_add(&r->bad, 1);
    const char* cc = cube__option_str(CUBE__OPT_CC);
    if (cc && strcmp(cc, "cc-one") != 0 && strcmp(cc, "cc-two") != 0) atomic_fetch_add(&r->bad, 1);
    char buf[32];
    cube_option_source_t src;
    cube_status_t st = cube_option_get("CUBE_CC", buf, sizeof(buf), &src);
    if (st || (buf[0] && strcmp(buf, "cc-one") != 0 && strcmp(buf, "cc-two") != 0))
      atomic_fetch_add(&r->bad, 1);
    cube_status_free(st);
  }
  return NULL;
}

/* Sets and gets from several threads: every value read is one that was set
 * (whole), under TSan without a race report. */
CUBE_TEST(concurrent_set_and_get) {
  clean_env();
  race_t r;
  atomic_init(&r.stop, 0);
  atomic_init(&r.bad, 0);
  pthread_t t[4];
  for (int i = 0; i < 4; ++i)
    REQUIRE(pthread_create(&t[i], NULL, i < 2 ? setter : getter, &r) == 0);
  for (int i = 0; i < 4; ++i) pthread_join(t[i], NULL);
  CHECK_EQ_U64(atomic_load(&r.bad), 0);
  CHECK_OK(cube_option_set("CUBE_CC", NULL));
  CHECK_OK(cube_option_set("CUBE_COLLECTIVE_TIMEOUT", NULL));
  cube_shutdown();
}

//===----------------------------------------------------------------------===//
// Backend parameters: the header contract (the backends' own parameters
// are tested with each backend: test_cpu_backend.c, test_cuda_mock.c)
//===----------------------------------------------------------------------===//

CUBE_TEST(backend_params_header_is_checked) {
  clean_env();
  cube_backend_params_header_t h = {(uint32_t)sizeof(h), CUBE_BACKEND_CUDA};
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  CHECK(o.backend_params == NULL);
  o.backend_params = &h;
  cube_client_t* c = NULL;
  CHECK_STATUS(cube_client_init(cpu0, &o, &c), CUBE_STATUS_INVALID_ARGUMENT, "cube_client_init",
               "backend_params are for backend cuda", "cpu:0");
  h.backend = (cube_backend_t)77;
  CHECK_STATUS(cube_client_init(cpu0, &o, &c), CUBE_STATUS_INVALID_ARGUMENT, "unknown",
               "tag 77");
  h.backend = CUBE_BACKEND_CPU;
  h.struct_size = 3;
  CHECK_STATUS(cube_client_init(cpu0, &o, &c), CUBE_STATUS_INVALID_ARGUMENT, "struct_size 3");
  /* The null and OpenCL backends take none. */
  setenv("CUBE_NULL_DEVICES", "1", 1);
  cube_shutdown();
  h.backend = CUBE_BACKEND_NULL;
  h.struct_size = (uint32_t)sizeof(h);
  CHECK_STATUS(cube_client_init((cube_device_id_t){CUBE_BACKEND_NULL, 0}, &o, &c),
               CUBE_STATUS_INVALID_ARGUMENT, "null:0", "takes no backend_params");
  CHECK(c == NULL);
  /* The parameters are borrowed for the call: a server made without them
   * works. */
  o.backend_params = NULL;
  REQUIRE_OK(cube_client_init((cube_device_id_t){CUBE_BACKEND_NULL, 0}, &o, &c));
  cube_client_release(c);
  clean_env();
}

//===----------------------------------------------------------------------===//
// The README's table and the sources
//===----------------------------------------------------------------------===//

/* Removes backquotes and surrounding blanks from |s| (in place). */
static char* cell_text(char* s) {
  char* w = s;
  for (char* r = s; *r; ++r)
    if (*r != '`') *w++ = *r;
  *w = '\0';
  while (*s == ' ') ++s;
  size_t n = strlen(s);
  while (n && s[n - 1] == ' ') s[--n] = '\0';
  return s;
}

CUBE_TEST(readme_table_matches_the_option_table) {
  const char* src = getenv("CUBE_SOURCE_DIR");
  if (!src || !*src) CUBE_SKIP("CUBE_SOURCE_DIR is not set");
  clean_env();
  char path[4096];
  snprintf(path, sizeof(path), "%s/README.md", src);
  char* text = read_text(path);
  REQUIRE(text);
  char* sec = strstr(text, "\n## Environment\n");
  REQUIRE(sec);
  char* end = strstr(sec + 1, "\n## ");
  if (end) *end = '\0';
  int rows_of[CUBE__OPT_COUNT] = {0};
  int rows = 0;
  bool header_seen = false;
  for (char* line = strtok(sec, "\n"); line; line = strtok(NULL, "\n")) {
    if (line[0] != '|') continue;
    if (!header_seen) { /* | variable | default | effect | */
      header_seen = true;
      CHECK(strstr(line, "variable") && strstr(line, "default") && strstr(line, "effect"));
      continue;
    }
    if (strncmp(line, "| ---", 5) == 0) continue;
    /* | `NAME` | default | effect | */
    char* c1 = line + 1;
    char* c2 = strchr(c1, '|');
    REQUIRE(c2);
    *c2++ = '\0';
    char* c3 = strchr(c2, '|');
    REQUIRE(c3);
    *c3 = '\0';
    char* name = cell_text(c1);
    char* dflt = cell_text(c2);
    ++rows;
    if (strncmp(name, "CUBE_", 5) != 0) continue; /* not cube's (NCCL_NVLS_ENABLE) */
    cube_option_t id;
    cube_status_t st = cube_option_find(name, &id);
    if (st) fprintf(stderr, "README names %s, which is not an option\n", name);
    CHECK_OK(st);
    if (st) continue;
    CHECK(strcmp(name, cube_option_name(id)) == 0);
    ++rows_of[id];
    cube_option_info_t info;
    CHECK_OK(cube_option_describe(id, &info));
    if (strcmp(dflt, info.default_doc) != 0)
      fprintf(stderr, "README: %s default '%s', the table's '%s'\n", name, dflt, info.default_doc);
    CHECK(strcmp(dflt, info.default_doc) == 0);
  }
  CHECK(header_seen);
  CHECK(rows >= CUBE__OPT_COUNT);
  for (int i = 0; i < CUBE__OPT_COUNT; ++i) {
    if (rows_of[i] != 1)
      fprintf(stderr, "README: %s has %d rows (expected 1)\n", cube_option_name((cube_option_t)i),
              rows_of[i]);
    CHECK_EQ_U64(rows_of[i], 1);
  }
  free(text);
}

/* A CUBE_* variable read outside the option table: "getenv(\"CUBE_" or
 * cube__env_str("CUBE_ in src/ or tools/ (beyond src/base/options.c). */
static int scan_dir(const char* dir, const char* root, int* files) {
  int hits = 0;
  DIR* d = opendir(dir);
  if (!d) return 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char p[4096];
    snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
    struct stat st;
    if (stat(p, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      hits += scan_dir(p, root, files);
      continue;
    }
    size_t n = strlen(p);
    if (n < 2 || (strcmp(p + n - 2, ".c") != 0 && strcmp(p + n - 2, ".h") != 0)) continue;
    if (strstr(p, "src/base/options.c")) continue;
    ++*files;
    char* text = read_text(p);
    if (!text) continue;
    static const char* const pats[] = {"getenv(\"CUBE_", "cube__env_str(\"CUBE_",
                                       "secure_getenv(\"CUBE_"};
    for (int k = 0; k < 3; ++k) {
      if (strstr(text, pats[k])) {
        fprintf(stderr, "%s reads a CUBE_ variable itself (%s...): use base/options.h\n",
                p + strlen(root), pats[k]);
        ++hits;
      }
    }
    free(text);
  }
  closedir(d);
  return hits;
}

CUBE_TEST(no_cube_variable_read_outside_the_table) {
  const char* src = getenv("CUBE_SOURCE_DIR");
  if (!src || !*src) CUBE_SKIP("CUBE_SOURCE_DIR is not set");
  char dir[4096];
  int files = 0, hits = 0;
  snprintf(dir, sizeof(dir), "%s/src", src);
  hits += scan_dir(dir, src, &files);
  snprintf(dir, sizeof(dir), "%s/tools", src);
  hits += scan_dir(dir, src, &files);
  CHECK(files > 50); /* the tree was found */
  CHECK_EQ_U64(hits, 0);
}
