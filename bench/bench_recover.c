/* bench_recover: the time from a sticky device fault to a recovered device
 * (issue 15), on a real GPU.
 *
 * One client of device 0 of CUBE_BACKEND (default cuda) holds LIVE GiB of
 * buffers, RESTORABLE GiB of them restorable (cube_client_create_restorable,
 * random contents kept here to compare). A kernel launched unchecked then
 * writes far outside its buffer: on CUDA an illegal address, which poisons
 * the context. The program times
 *   - detect: the sync after the faulting launch, until it returns the
 *     device's loss (DEVICE_LOST);
 *   - recover: cube_device_recover, until the device is usable again with
 *     every restorable buffer written back;
 * and then checks, on the same client: each restorable buffer reads back bit
 * for bit, a plain buffer reads DATA_LOST, and saxpy on new buffers computes
 * the host's answer. Where the driver refuses the process a new context
 * after the fault (CUDA: docs/failures.md, "Recovery on a real GPU"), it
 * checks instead that every restorable buffer's host copy reads back bit for
 * bit without the device (cube_client_read_restorable) and that the device
 * refuses work at once, and stops. Exit status 1 on any mismatch.
 *
 *   bench_recover [LIVE_GIB [RESTORABLE_GIB [ROUNDS]]]     (defaults 10 1 3)
 *
 * A backend that is not there, or one whose devices cannot be lost (cpu,
 * opencl), prints why and exits 0 having measured nothing. */
#define BENCH_NAME "bench_recover"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "cube/cube.h"

#define CHUNK ((size_t)256 << 20)

static const char* k_wild =
    "CUBE_KERNEL(wild_store, CUBE_ARRAY(float, y)) {\n"
    "  /* 4 TiB past the buffer: an illegal address on a GPU. */\n"
    "  CUBE_STORE(y, ABSOLUTE_POS + ((uint64_t)1 << 40), 1.0f);\n"
    "}\n";

static const char* k_saxpy =
    "CUBE_KERNEL(saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(float, y), float a) {\n"
    "  uint64_t i = ABSOLUTE_POS;\n"
    "  if (i < CUBE_LEN(y)) CUBE_STORE(y, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "}\n";

static uint64_t g_seed = 0x9e3779b97f4a7c15ull;
static int g_unrecoverable; /* the driver refused a recovery */
static uint64_t next_rand(void) {
  g_seed ^= g_seed << 13;
  g_seed ^= g_seed >> 7;
  g_seed ^= g_seed << 17;
  return g_seed;
}

static void fill_random(void* p, size_t n) {
  uint64_t* w = p;
  for (size_t i = 0; i < n / 8; ++i) w[i] = next_rand();
}

/* saxpy on new buffers of |n| floats, checked against the host: 0 when right. */
static int saxpy_right(cube_client_t* c, cube_kernel_t* k, size_t n) {
  float* x = malloc(n * sizeof(float));
  float* y = malloc(n * sizeof(float));
  if (!x || !y) {
    free(x);
    free(y);
    return 1;
  }
  for (size_t i = 0; i < n; ++i) {
    x[i] = (float)(next_rand() % 2001) / 1000.0f - 1.0f;
    y[i] = (float)(next_rand() % 2001) / 1000.0f - 1.0f;
  }
  cube_handle_t hx = CUBE_HANDLE_NULL, hy = CUBE_HANDLE_NULL;
  int bad = 0;
  cube_status_t s = cube_client_create_from_slice(c, x, n * sizeof(float), &hx);
  if (!s) s = cube_client_create_from_slice(c, y, n * sizeof(float), &hy);
  cube_arg_t args[] = {cube_arg_buffer(hx), cube_arg_buffer(hy), cube_arg_f32(1.5f)};
  if (!s) s = cube_client_launch(c, k, cube_count_static((uint32_t)((n + 255) / 256), 1, 1), 3, args);
  cube_bytes_t* out = NULL;
  if (!s) s = cube_client_read_one(c, hy, &out);
  if (s) {
    fail_status("saxpy", s);
    bad = 1;
  } else {
    const float* r = cube_bytes_const_data(out);
    for (size_t i = 0; i < n; ++i) {
      float e = 1.5f * x[i] + y[i];
      bad += fabsf(r[i] - e) > 1e-6f * (1.0f + fabsf(e));
    }
    if (bad) fprintf(stderr, BENCH_NAME ": saxpy: %d of %zu wrong\n", bad, n);
  }
  cube_bytes_release(out);
  cube_handle_release(hx);
  cube_handle_release(hy);
  free(x);
  free(y);
  return bad != 0;
}

/* One round; 0 when every check held. */
static int round_once(cube_device_id_t dev, size_t live_gib, size_t rest_gib, cube_kernel_t* wild,
                      cube_kernel_t* saxpy, double* detect_s, double* recover_s, double* total_s) {
  cube_client_t* c = NULL;
  cube_status_t s = cube_client_load(dev, &c);
  if (s) {
    fail_status("cube_client_load", s);
    return 1;
  }
  size_t n_rest = rest_gib * ((size_t)1 << 30) / CHUNK;
  size_t n_plain = (live_gib - rest_gib) * ((size_t)1 << 30) / CHUNK;
  cube_handle_t* rest = calloc(n_rest ? n_rest : 1, sizeof(*rest));
  cube_handle_t* plain = calloc(n_plain ? n_plain : 1, sizeof(*plain));
  uint64_t* want = calloc(n_rest ? n_rest : 1, sizeof(*want)); /* seeds of the contents */
  void* host = malloc(CHUNK);
  int bad = 0;
  if (!rest || !plain || !want || !host) {
    fprintf(stderr, BENCH_NAME ": out of host memory\n");
    bad = 1;
    goto done;
  }
  for (size_t i = 0; i < n_rest && !bad; ++i) {
    want[i] = g_seed;
    fill_random(host, CHUNK);
    s = cube_client_create_restorable(c, host, CHUNK, &rest[i]);
    if (s) fail_status("cube_client_create_restorable", s), bad = 1;
  }
  for (size_t i = 0; i < n_plain && !bad; ++i) {
    s = cube_client_empty(c, CHUNK, &plain[i]);
    if (s) fail_status("cube_client_empty", s), bad = 1;
  }
  if (!bad) bad = saxpy_right(c, saxpy, 1000003); /* the device works before */
  if (!bad && (s = cube_client_sync(c)) != CUBE_OK) fail_status("sync before the fault", s), bad = 1;
  if (bad) goto done;

  /* The fault. */
  cube_arg_t arg = cube_arg_buffer(n_plain ? plain[0] : rest[0]);
  uint64_t t0 = now_ns();
  s = cube_client_launch_unchecked(c, wild, cube_count_static(1, 1, 1), 1, &arg);
  if (!s) s = cube_client_sync(c);
  uint64_t t1 = now_ns();
  if (cube_status_code(s) != CUBE_STATUS_DEVICE_LOST) {
    fprintf(stderr, BENCH_NAME ": after the wild store, expected DEVICE_LOST, got [%s] %s\n",
            cube_status_code_name(cube_status_code(s)), s ? cube_status_message(s) : "");
    cube_status_free(s);
    bad = 1;
    goto done;
  }
  printf("  the fault: %s\n", cube_status_message(s));
  cube_status_free(s);
  s = cube_device_recover(dev);
  uint64_t t2 = now_ns();
  if (cube_status_code(s) == CUBE_STATUS_DEVICE_LOST) {
    /* The driver gives this process no new context (docs/failures.md,
     * "Recovery on a real GPU"): the restorable contents, from their host
     * copies, without the device. */
    printf("  recovery refused after %.3f s: %s\n", (double)(t2 - t1) / 1e9,
           cube_status_message(s));
    cube_status_free(s);
    g_unrecoverable = 1;
    uint64_t t3 = now_ns();
    for (size_t i = 0; i < n_rest && !bad; ++i) {
      uint64_t keep_seed = g_seed;
      g_seed = want[i];
      fill_random(host, CHUNK);
      g_seed = keep_seed;
      cube_bytes_t* b = NULL;
      s = cube_client_read_restorable(c, rest[i], &b);
      if (s) {
        fail_status("cube_client_read_restorable", s);
        bad = 1;
      } else if (cube_bytes_size(b) != CHUNK || memcmp(cube_bytes_const_data(b), host, CHUNK) != 0) {
        fprintf(stderr, BENCH_NAME ": the host copy of restorable buffer %zu differs\n", i);
        bad = 1;
      }
      cube_bytes_release(b);
    }
    uint64_t t4 = now_ns();
    cube_bytes_t* b = NULL;
    s = cube_client_read_one(c, n_plain ? plain[0] : rest[0], &b);
    uint64_t t5 = now_ns();
    if (cube_status_code(s) != CUBE_STATUS_DEVICE_LOST) {
      fprintf(stderr, BENCH_NAME ": a read of the lost device returned [%s], expected DEVICE_LOST\n",
              cube_status_code_name(cube_status_code(s)));
      bad = 1;
    }
    cube_status_free(s);
    cube_bytes_release(b);
    if (!bad)
      printf("  detect %.3f s; %zu MiB of restorable contents read back bit-exact from their "
             "host copies in %.3f s; a device read refused (DEVICE_LOST) in %.1f us\n",
             (double)(t1 - t0) / 1e9, n_rest * (CHUNK >> 20), (double)(t4 - t3) / 1e9,
             (double)(t5 - t4) / 1e3);
    goto done;
  }
  if (s) {
    fail_status("cube_device_recover", s);
    bad = 1;
    goto done;
  }
  *detect_s = (double)(t1 - t0) / 1e9;
  *recover_s = (double)(t2 - t1) / 1e9;
  *total_s = (double)(t2 - t0) / 1e9;

  /* What the recovery promised, checked on the same client. */
  uint64_t after = g_seed;
  for (size_t i = 0; i < n_rest && !bad; ++i) {
    g_seed = want[i];
    fill_random(host, CHUNK);
    cube_bytes_t* b = NULL;
    s = cube_client_read_one(c, rest[i], &b);
    if (s) {
      fail_status("read of a restorable buffer", s);
      bad = 1;
    } else if (cube_bytes_size(b) != CHUNK || memcmp(cube_bytes_const_data(b), host, CHUNK) != 0) {
      fprintf(stderr, BENCH_NAME ": restorable buffer %zu differs after the recovery\n", i);
      bad = 1;
    }
    cube_bytes_release(b);
  }
  g_seed = after;
  if (n_plain && !bad) {
    cube_bytes_t* b = NULL;
    s = cube_client_read_one(c, plain[n_plain - 1], &b);
    if (cube_status_code(s) != CUBE_STATUS_DATA_LOST) {
      fprintf(stderr, BENCH_NAME ": a plain buffer read [%s], expected DATA_LOST\n",
              cube_status_code_name(cube_status_code(s)));
      bad = 1;
    }
    cube_status_free(s);
    cube_bytes_release(b);
  }
  if (!bad) bad = saxpy_right(c, saxpy, 1000003);
done:
  for (size_t i = 0; rest && i < n_rest; ++i) cube_handle_release(rest[i]);
  for (size_t i = 0; plain && i < n_plain; ++i) cube_handle_release(plain[i]);
  free(rest);
  free(plain);
  free(want);
  free(host);
  cube_client_release(c);
  return bad;
}

int main(int argc, char** argv) {
  size_t live = argc > 1 ? strtoull(argv[1], NULL, 10) : 10;
  size_t rest = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
  int rounds = argc > 3 ? atoi(argv[3]) : 3;
  if (rest > live || rounds < 1 || rounds > 100) {
    fprintf(stderr, "usage: bench_recover [LIVE_GIB [RESTORABLE_GIB <= LIVE_GIB [ROUNDS]]]\n");
    return 2;
  }
  print_machine(BENCH_NAME, cube_version());
  cube_backend_t be = CUBE_BACKEND_CUDA;
  const char* name = getenv("CUBE_BACKEND");
  if (name && name[0]) {
    cube_status_t s = cube_backend_parse(name, &be);
    if (s) {
      fail_status("CUBE_BACKEND", s);
      return 2;
    }
  }
  cube_status_t avail = cube_backend_status(be);
  if (avail) {
    printf("backend unavailable, nothing measured: %s\n", cube_status_message(avail));
    cube_status_free(avail);
    return 0;
  }
  if (be != CUBE_BACKEND_CUDA) {
    printf("only the cuda backend loses devices to a fault; nothing measured\n");
    return 0;
  }
  cube_device_id_t dev = {be, 0};
  cube_kernel_desc_t dw = {.cube_dim = {32, 1, 1}, .source = k_wild, .entry = "wild_store"};
  cube_kernel_desc_t ds = {.cube_dim = {256, 1, 1}, .source = k_saxpy, .entry = "saxpy"};
  cube_kernel_t *wild = NULL, *saxpy = NULL;
  TRY("cube_kernel_create", cube_kernel_create(&dw, &wild));
  TRY("cube_kernel_create", cube_kernel_create(&ds, &saxpy));
  if (g_failures) return 1;
  printf("%zu GiB live in buffers of %zu MiB, %zu GiB of them restorable; %d rounds\n", live,
         CHUNK >> 20, rest, rounds);
  double det[100], rec[100], tot[100];
  int bad = 0;
  for (int r = 0; r < rounds && !bad; ++r) {
    bad = round_once(dev, live, rest, wild, saxpy, &det[r], &rec[r], &tot[r]);
    if (g_unrecoverable) {
      printf("the device cannot be used again in this process; no further rounds\n");
      rounds = 0;
      break;
    }
    if (!bad)
      printf("  round %d: detect %.3f s, recover %.3f s, fault to recovered %.3f s; restorable "
             "bit-exact, plain DATA_LOST, saxpy right\n",
             r + 1, det[r], rec[r], tot[r]);
  }
  if (!bad && rounds > 0) {
    qsort(tot, (size_t)rounds, sizeof(double), cmp_double);
    qsort(rec, (size_t)rounds, sizeof(double), cmp_double);
    printf("fault to recovered device: median %.3f s (min %.3f, max %.3f) over %d rounds; "
           "recover call alone median %.3f s; target <= 1 s\n",
           median_sorted(tot, rounds), tot[0], tot[rounds - 1], rounds,
           median_sorted(rec, rounds));
  }
  cube_kernel_release(wild);
  cube_kernel_release(saxpy);
  cube_shutdown();
  return bad || g_failures ? 1 : 0;
}
