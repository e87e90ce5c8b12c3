#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cts.h"

/* PoCL, the ICD loader and LLVM keep allocations until exit (the OpenCL
 * library stays loaded for the process): not ours to report under LSan. */
const char* __lsan_default_suppressions(void);
const char* __lsan_default_suppressions(void) {
  return "leak:libpocl\nleak:libOpenCL\nleak:libLLVM\nleak:libclang\nleak:libhwloc\n";
}

/* The backend under test, parsed from its CTest name: "<backend>" followed by
 * variants: "-inline" (the inline device queue), "-dialect" (CUBE_CTS_DIALECT=1:
 * the dialect twins of the shared kernels even where native kernels run),
 * "-mock" (cuda only: the mock driver of tests/mock_cuda, which runs no
 * kernels, and the mock NCCL of tests/mock_nccl), "-staged" (cuda only: no
 * NCCL, collectives through host buffers), e.g. "cpu", "cpu-inline", "cpu-dialect", "cuda-mock". The list of names lives in one
 * place: CUBE_CTS_BACKENDS in tests/CMakeLists.txt. */
static cts_backend_t cts_parsed = {"cpu", CUBE_BACKEND_CPU, "threaded"};
static const cts_backend_t* cts_current = &cts_parsed;
static char cts_name[64];

const cts_backend_t* cts_backend(void) { return cts_current; }

cube_device_id_t cts_device(uint32_t index) {
  cube_device_id_t id = {cts_current->backend, index};
  return id;
}

int cts_read_equals(cube_client_t* c, cube_handle_t h, const void* expect, size_t n) {
  cube_bytes_t* b = NULL;
  cube_status_t s = cube_client_read_one(c, h, &b);
  if (s) {
    fprintf(stderr, "cts_read_equals: read failed: %s\n", cube_status_message(s));
    cube_status_free(s);
    return 0;
  }
  int ok = cube_bytes_size(b) == n && memcmp(cube_bytes_const_data(b), expect, n) == 0;
  if (!ok)
    fprintf(stderr, "cts_read_equals: %zu bytes read, %zu expected, contents %s\n",
            cube_bytes_size(b), n, cube_bytes_size(b) == n ? "differ" : "-");
  cube_bytes_release(b);
  return ok;
}

int cts_read_lost(cube_client_t* c, cube_handle_t h, ...) {
  cube_bytes_t* b = NULL;
  cube_status_t s = cube_client_read_one(c, h, &b);
  const char* m = cube_status_message(s);
  /* The read names itself first (docs/errors.md, "Spoiled contents"). */
  static const char call[] = "cube_client_read_one: read of handles[0] (memory ";
  int ok = cube_status_code(s) == CUBE_STATUS_DATA_LOST && b == NULL &&
           strncmp(m, call, sizeof(call) - 1) == 0;
  va_list ap;
  va_start(ap, h);
  for (const char* w; ok && (w = va_arg(ap, const char*)) != NULL;) ok = strstr(m, w) != NULL;
  va_end(ap);
  if (!ok)
    fprintf(stderr, "cts_read_lost: expected DATA_LOST, got %s: %s\n",
            cube_status_code_name(cube_status_code(s)), s ? m : "(the read succeeded)");
  cube_status_free(s);
  cube_bytes_release(b);
  return ok;
}

static bool cts_native = false;

bool cts_native_kernels(void) { return cts_native; }

/* Native kernels unless CUBE_CTS_DIALECT=1 or device 0 lacks the feature
 * (or cannot be loaded: then the cases skip or fail on their own). Probed
 * before any case runs, then shut down again, so that a case still starts
 * with no server (cases load clients with their own options and
 * environment: the option table reads the environment again after
 * cube_shutdown, and cube_backend_status above read it once already). */
static void cts_probe_native(void) {
  const char* forced = getenv("CUBE_CTS_DIALECT");
  if (forced && strcmp(forced, "1") == 0) {
    cts_native = false;
    cube_shutdown();
    return;
  }
  cube_client_t* c = NULL;
  cube_status_t s = cube_client_load(cts_device(0), &c);
  if (s) {
    cube_status_free(s);
    cts_native = false;
    return;
  }
  const cube_features_t* f = cube_client_features(c);
  cts_native = f && (f->bits & CUBE_FEATURE_NATIVE_KERNELS) != 0;
  cube_client_release(c);
  cube_shutdown();
}

/* Picks the backend from "--backend NAME" and removes the two arguments. */
int cube_test_main_hook(int* argc, char*** argv) {
  char** a = *argv;
  if (*argc >= 3 && strcmp(a[1], "--backend") == 0) {
    snprintf(cts_name, sizeof(cts_name), "%s", a[2]);
    char base[64];
    snprintf(base, sizeof(base), "%s", a[2]);
    const char* mode = "threaded";
    char* dash = strchr(base, '-');
    if (dash) {
      *dash = 0;
      for (char* v = dash + 1; v;) {
        char* next = strchr(v, '-');
        if (next) *next++ = 0;
        if (strcmp(v, "inline") == 0) {
          mode = "inline";
        } else if (strcmp(v, "dialect") == 0) {
          setenv("CUBE_CTS_DIALECT", "1", 1);
        } else if (strcmp(v, "mock") == 0 && strcmp(base, "cuda") == 0) {
#ifdef CUBE_MOCK_CUDA_PATH
          /* The CPU stand-in for the CUDA driver (tests/mock_cuda): the
           * backend's memory paths in CI; it runs no kernels. */
          setenv("CUBE_CUDA_DRIVER", CUBE_MOCK_CUDA_PATH, 1);
          setenv("CUBE_MOCK_CUDA_DEVICES", "2", 0); /* cases across devices run too */
#ifdef CUBE_MOCK_NCCL_PATH
          /* Collectives through the nccl transport, over the NCCL stand-in
           * (tests/mock_nccl); "-staged" below keeps it away. */
          setenv("CUBE_NCCL_LIBRARY", CUBE_MOCK_NCCL_PATH, 0);
#endif
#endif
        } else if (strcmp(v, "staged") == 0 && strcmp(base, "cuda") == 0) {
          /* No NCCL: CUDA collectives through host buffers (the fallback). */
          setenv("CUBE_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
        } else {
          fprintf(stderr, "cube_cts: unknown variant '%s' of backend '%s'\n", v, base);
          return 2;
        }
        v = next;
      }
    }
    /* The null backend has no devices unless asked (two: the cases across
     * devices run too). */
    if (strcmp(base, "null") == 0) setenv("CUBE_NULL_DEVICES", "2", 0);
    cube_backend_t b;
    cube_status_t s = cube_backend_parse(base, &b);
    if (s) {
      fprintf(stderr, "cube_cts: %s\n", cube_status_message(s));
      cube_status_free(s);
      return 2;
    }
    cts_parsed = (cts_backend_t){cts_name, b, mode};
    for (int i = 3; i <= *argc; ++i) a[i - 2] = a[i];
    *argc -= 2;
  }
  if (cts_current->queue_mode) setenv("CUBE_DEVICE_QUEUE", cts_current->queue_mode, 1);
  /* An unavailable backend skips every case, also those that need no device:
   * nothing may pass for a backend that is not there. */
  cube_status_t avail = cube_backend_status(cts_current->backend);
  if (cube_status_code(avail) == CUBE_STATUS_UNAVAILABLE) {
    printf("[skip] every case: backend %s is unavailable: %s\n", cts_current->name,
           cube_status_message(avail));
    cube_status_free(avail);
    return 77;
  }
  cube_status_free(avail);
  bool listing = *argc > 1 && strcmp((*argv)[1], "--list") == 0;
  if (*argc > 1 && strcmp((*argv)[1], "--unsupported") == 0) {
    /* The cases this variant skips, for the check that they still fail. */
    for (int i = 0; i < cube_test_case_count(); ++i)
      if (cts_unsupported_reason(cts_current->name, cube_test_case_name(i)))
        printf("%s\n", cube_test_case_name(i));
    exit(0);
  }
  /* CUBE_CTS_VERIFY_UNSUPPORTED=1 runs the unsupported cases anyway (they
   * must fail: a case that passes no longer belongs in the list). */
  const char* verify = getenv("CUBE_CTS_VERIFY_UNSUPPORTED");
  if (!listing && *argc > 1 && !(verify && strcmp(verify, "1") == 0)) {
    const char* why = cts_unsupported_reason(cts_current->name, (*argv)[1]);
    if (why) {
      printf("[skip] %s on %s: %s (tests/conformance/cts_variants.c)\n", (*argv)[1],
             cts_current->name, why);
      return 77;
    }
  }
  if (!listing) cts_probe_native();
  return 0;
}
