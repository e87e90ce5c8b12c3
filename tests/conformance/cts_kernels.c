/* Helpers and native kernels shared by the conformance cases. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cts.h"

/* The parameters of the twin's CUBE_KERNEL written CUBE_ARRAY(const ...):
 * bit i for parameter i (the twins' declarations are simple: one top-level
 * comma between parameters). */
static uint64_t cts_twin_read_only(const char* source) {
  const char* p = source ? strstr(source, "CUBE_KERNEL(") : NULL;
  if (!p) return 0;
  p += strlen("CUBE_KERNEL(");
  uint64_t bits = 0;
  int depth = 0, index = -1; /* the entry's name comes first */
  bool start = false;
  for (; *p && depth >= 0; ++p) {
    if (start) {
      while (*p == ' ' || *p == '\n') ++p;
      if (strncmp(p, "CUBE_ARRAY(const", 16) == 0 && index >= 0 && index < 64)
        bits |= UINT64_C(1) << index;
      start = false;
    }
    if (*p == '(') ++depth;
    else if (*p == ')') --depth;
    else if (*p == ',' && depth == 0) {
      ++index;
      start = true;
    }
  }
  return bits;
}

cube_status_t cts_kernel_create_twin(const char* name, cube_cpu_kernel_fn fn, const char* source,
                                     const char* entry, cube_dim_t dim, uint64_t shared,
                                     uint32_t arg_count, const cube_arg_kind_t* kinds,
                                     cube_kernel_t** out) {
  cube_kernel_desc_t d;
  memset(&d, 0, sizeof(d));
  d.name = name;
  d.cube_dim = dim;
  d.arg_kinds = kinds;
  d.arg_count = arg_count;
  if (cts_native_kernels()) {
    d.shared_memory_size = shared;
    d.cpu_fn = fn;
    /* The native kernel reads what its twin declares const: said so, a
     * failed launch leaves those buffers valid on both paths alike. */
    d.read_only_args = cts_twin_read_only(source);
  } else {
    d.source = source;
    d.entry = entry;
  }
  return cube_kernel_create(&d, out);
}

cube_status_t cts_poisoned(cube_client_t* c, size_t n, cube_handle_t* out) {
  void* p = malloc(n ? n : 1);
  if (!p) return cube_client_empty(c, 0, out); /* reports an error */
  memset(p, CTS_POISON, n);
  cube_status_t s = cube_client_create_from_slice(c, p, n, out);
  free(p);
  return s;
}

cube_status_t cts_read_alloc(cube_client_t* c, cube_handle_t h, void** out, size_t* out_size) {
  cube_bytes_t* b = NULL;
  cube_status_t s = cube_client_read_one(c, h, &b);
  if (s) return s;
  size_t n = cube_bytes_size(b);
  void* p = malloc(n ? n : 1);
  if (p) memcpy(p, cube_bytes_const_data(b), n);
  cube_bytes_release(b);
  *out = p;
  *out_size = n;
  return CUBE_OK;
}

int cts_tensor_layout_ok(cube_client_t* c, const cube_tensor_t* t, cube_layout_strategy_t strategy,
                         uint64_t* out_size) {
  const cube_device_properties_t* p = cube_client_properties(c);
  cube_layout_desc_t d;
  cube_status_t s = cube_layout_desc_initialize(strategy, t->rank, t->shape, t->elem_size, &d);
  uint64_t strides[1][CUBE_MAX_RANK], size = 0;
  if (!s) s = cube_layout_compute(p->layout_policy, p->memory.alignment, 1, &d, strides, NULL, &size, NULL);
  if (s) {
    fprintf(stderr, "cts_tensor_layout_ok: %s\n", cube_status_message(s));
    cube_status_free(s);
    return 0;
  }
  if (out_size) *out_size = size;
  int ok = cube_handle_size(t->handle) == size;
  for (uint32_t i = 0; i < t->rank; ++i) ok &= t->strides[i] == strides[0][i];
  if (!ok) {
    fprintf(stderr, "tensor layout: size %llu (expected %llu), strides", (unsigned long long)cube_handle_size(t->handle),
            (unsigned long long)size);
    for (uint32_t i = 0; i < t->rank; ++i)
      fprintf(stderr, " %llu (%llu)", (unsigned long long)t->strides[i], (unsigned long long)strides[0][i]);
    fprintf(stderr, "\n");
  }
  return ok;
}

int cts_tensor_dense(const cube_tensor_t* t) {
  uint64_t s = 1;
  for (uint32_t i = t->rank; i-- > 0;) {
    if (t->strides[i] != s) return 0;
    s *= t->shape[i];
  }
  return cube_handle_size(t->handle) == s * t->elem_size;
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

float cts_saxpy1(float a, float x, float y) {
  volatile float prod = a * x; /* no contraction into an FMA on either side */
  return prod + y;
}

int cts_saxpy_match(float got, float a, float x, float y) {
  float twice = cts_saxpy1(a, x, y), once = fmaf(a, x, y);
  return memcmp(&got, &twice, 4) == 0 || memcmp(&got, &once, 4) == 0;
}

/* The element of unit |u| of |cube| in the twins' numbering: (linear cube
 * index) * (units per cube) + u, the CUBE_POS * CUBE_DIM + UNIT_POS of the
 * dialect. */
int cts_k_saxpy(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  if (n != 5) return 7;
  const float* x = args[0].buffer.data;
  const float* y = args[1].buffer.data;
  float* out = args[2].buffer.data;
  float a = args[3].f32;
  uint32_t count = args[4].u32;
  if (args[0].buffer.len < (uint64_t)count * 4 || args[1].buffer.len < (uint64_t)count * 4 ||
      args[2].buffer.len < (uint64_t)count * 4)
    return 8;
  uint64_t units = (uint64_t)cube->cube_dim[0] * cube->cube_dim[1] * cube->cube_dim[2];
  uint64_t base = cts_cube_index(cube) * units;
  for (uint64_t u = 0; u < units; ++u) {
    uint64_t i = base + u;
    if (i < count) out[i] = cts_saxpy1(a, x[i], y[i]);
  }
  return 0;
}

const char cts_k_saxpy_dialect[] =
    "CUBE_KERNEL(cts_k_saxpy, CUBE_ARRAY(const float, x), CUBE_ARRAY(const float, y),\n"
    "            CUBE_ARRAY(float, out), float a, uint32_t n) {\n"
    "  uint64_t i = (uint64_t)CUBE_POS * CUBE_DIM + UNIT_POS;\n"
    "  if (i < n) CUBE_STORE(out, i, a * CUBE_LOAD(x, i) + CUBE_LOAD(y, i));\n"
    "}\n";

int cts_k_add_u32(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  if (n != 4) return 7;
  const uint32_t* in = args[0].buffer.data;
  uint32_t* out = args[1].buffer.data;
  uint32_t add = args[2].u32, count = args[3].u32;
  if (args[0].buffer.len < (uint64_t)count * 4 || args[1].buffer.len < (uint64_t)count * 4) return 8;
  uint64_t units = (uint64_t)cube->cube_dim[0] * cube->cube_dim[1] * cube->cube_dim[2];
  uint64_t base = cts_cube_index(cube) * units;
  for (uint64_t u = 0; u < units; ++u) {
    uint64_t i = base + u;
    if (i < count) out[i] = in[i] + add;
  }
  return 0;
}

const char cts_k_add_u32_dialect[] =
    "CUBE_KERNEL(cts_k_add_u32, CUBE_ARRAY(const uint32_t, in), CUBE_ARRAY(uint32_t, out),\n"
    "            uint32_t add, uint32_t n) {\n"
    "  uint64_t i = (uint64_t)CUBE_POS * CUBE_DIM + UNIT_POS;\n"
    "  if (i < n) CUBE_STORE(out, i, CUBE_LOAD(in, i) + add);\n"
    "}\n";

int cts_k_copy(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube;
  if (n != 2) return 7;
  uint64_t len = args[0].buffer.len < args[1].buffer.len ? args[0].buffer.len : args[1].buffer.len;
  memmove(args[1].buffer.data, args[0].buffer.data, (size_t)len);
  return 0;
}

/* Every cube copies it all (the cases launch one cube), its units striding. */
const char cts_k_copy_dialect[] =
    "CUBE_KERNEL(cts_k_copy, CUBE_ARRAY(const uint8_t, in), CUBE_ARRAY(uint8_t, out)) {\n"
    "  uint64_t n = CUBE_LEN(in) < CUBE_LEN(out) ? CUBE_LEN(in) : CUBE_LEN(out);\n"
    "  for (uint64_t i = UNIT_POS; i < n; i += CUBE_DIM) out[i] = in[i];\n"
    "}\n";

int cts_k_fail(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  if (n != 5) return 7;
  if (cube->cube_pos[0] == args[1].u32 && cube->cube_pos[1] == args[2].u32 &&
      cube->cube_pos[2] == args[3].u32)
    return args[4].i32;
  return 0;
}

const char cts_k_fail_dialect[] =
    "/* One store past the end at the failing cube: Validate mode reports it. */\n"
    "CUBE_KERNEL(cts_k_fail, CUBE_ARRAY(uint32_t, buf), uint32_t x, uint32_t y, uint32_t z,\n"
    "            int32_t code) {\n"
    "  if (code != 0 && UNIT_POS == 0 && CUBE_POS_X == x && CUBE_POS_Y == y && CUBE_POS_Z == z)\n"
    "    CUBE_STORE(buf, CUBE_LEN(buf), 0u);\n"
    "}\n";

cube_status_t cts_launch_fail(cube_client_t* c, cube_kernel_t* k, cube_count_t count,
                              uint32_t arg_count, const cube_arg_t* args) {
  return cube_client_launch_mode(c, k, count, arg_count, args, CUBE_EXEC_VALIDATE);
}

int cts_k_nop(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube;
  (void)args;
  return n == 1 ? 0 : 7;
}

const char cts_k_nop_dialect[] = "CUBE_KERNEL(cts_k_nop, CUBE_ARRAY(uint32_t, unused)) {}\n";

//===----------------------------------------------------------------------===//
// The gate
//===----------------------------------------------------------------------===//

#define CTS_GATE_POLLS 600000u /* 60 s at 100 us */

static atomic_int cts_gate_state = 1;   /* 1 = open */
static atomic_int cts_gate_entered = 0; /* the exclusive task runs */
static pthread_mutex_t cts_gate_lock = PTHREAD_MUTEX_INITIALIZER;
static int cts_gate_thread_live = 0; /* under cts_gate_lock */
static pthread_t cts_gate_thread;
static cube_client_t* cts_gate_client;

static int cts_gate_wait_open(void) {
  for (unsigned i = 0; i < CTS_GATE_POLLS; ++i) {
    if (atomic_load(&cts_gate_state)) return 1;
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  return 0;
}

static int cts_k_gate(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)cube;
  (void)args;
  (void)n;
  return cts_gate_wait_open() ? 0 : 99;
}

static cube_status_t cts_gate_task(void* p) {
  (void)p;
  atomic_store(&cts_gate_entered, 1);
  if (!cts_gate_wait_open()) {
    fprintf(stderr, "cts gate: not opened within 60 s\n");
    abort(); /* the case is broken (the native gate fails its launch instead) */
  }
  return CUBE_OK;
}

static void* cts_gate_main(void* p) {
  (void)p;
  cube_status_t s = cube_client_exclusive(cts_gate_client, cts_gate_task, NULL);
  if (s) {
    fprintf(stderr, "cts_gate_hold: cube_client_exclusive: %s\n", cube_status_message(s));
    cube_status_free(s);
    abort(); /* the main thread waits for the task forever otherwise */
  }
  return NULL;
}

static int cts_gate_ok(cube_status_t s, const char* what) {
  if (!s) return 1;
  fprintf(stderr, "cts_gate_hold: %s: %s\n", what, cube_status_message(s));
  cube_status_free(s);
  return 0;
}

int cts_gate_hold(cube_client_t* c) {
  atomic_store(&cts_gate_state, 0);
  if (cts_native_kernels()) {
    const cube_arg_kind_t kind = CUBE_ARG_BUFFER;
    cube_kernel_desc_t d;
    memset(&d, 0, sizeof(d));
    d.name = "cts_gate";
    d.cube_dim = (cube_dim_t){1, 1, 1};
    d.arg_kinds = &kind;
    d.arg_count = 1;
    d.cpu_fn = cts_k_gate;
    cube_kernel_t* k = NULL;
    cube_handle_t h = CUBE_HANDLE_NULL;
    int ok = cts_gate_ok(cube_kernel_create(&d, &k), "kernel") &&
             cts_gate_ok(cube_client_empty(c, 16, &h), "buffer");
    if (ok) {
      cube_arg_t a = cube_arg_buffer(h);
      ok = cts_gate_ok(cube_client_launch(c, k, cube_count_static(1, 1, 1), 1, &a), "launch");
    }
    cube_handle_release(h); /* the launch keeps both */
    cube_kernel_release(k);
    return ok;
  }
  pthread_mutex_lock(&cts_gate_lock);
  if (cts_gate_thread_live) {
    pthread_mutex_unlock(&cts_gate_lock);
    fprintf(stderr, "cts_gate_hold: a gate is already held\n");
    return 0;
  }
  atomic_store(&cts_gate_entered, 0);
  cts_gate_client = cube_client_retain(c);
  if (pthread_create(&cts_gate_thread, NULL, cts_gate_main, NULL) != 0) {
    cube_client_release(cts_gate_client);
    pthread_mutex_unlock(&cts_gate_lock);
    fprintf(stderr, "cts_gate_hold: pthread_create failed\n");
    return 0;
  }
  cts_gate_thread_live = 1;
  pthread_mutex_unlock(&cts_gate_lock);
  /* Held once the task runs on the device's runner. */
  while (!atomic_load(&cts_gate_entered)) cts_sleep_ms(1);
  return 1;
}

void cts_gate_open(void) {
  atomic_store(&cts_gate_state, 1);
  pthread_mutex_lock(&cts_gate_lock);
  if (cts_gate_thread_live) {
    pthread_join(cts_gate_thread, NULL);
    cube_client_release(cts_gate_client);
    cts_gate_client = NULL;
    cts_gate_thread_live = 0;
  }
  pthread_mutex_unlock(&cts_gate_lock);
}

//===----------------------------------------------------------------------===//
// Logs, files, strings
//===----------------------------------------------------------------------===//

void cts_log_init(cts_log_t* log) {
  memset(log, 0, sizeof(*log));
  pthread_mutex_init(&log->lock, NULL);
}

cube_status_t cts_client_logging(cube_profile_level_t level, cube_log_fn fn, void* user,
                                 cube_client_t** out) {
  cube_server_options_t o;
  cube_server_options_initialize(&o);
  o.profile_level = level;
  o.log_fn = fn;
  o.log_user = user;
  return cube_client_init(cts_device(0), &o, out);
}

void cts_log_fn(void* user, const char* line) {
  cts_log_t* log = user;
  pthread_mutex_lock(&log->lock);
  if (log->count == log->capacity) {
    size_t cap = log->capacity ? log->capacity * 2 : 64;
    char** l = realloc(log->lines, cap * sizeof(*l));
    if (!l) {
      pthread_mutex_unlock(&log->lock);
      return;
    }
    log->lines = l;
    log->capacity = cap;
  }
  log->lines[log->count] = strdup(line ? line : "(null)");
  if (log->lines[log->count]) log->count++;
  pthread_mutex_unlock(&log->lock);
}

long cts_log_find(cts_log_t* log, const char* word, ...) {
  const char* words[16];
  size_t nw = 0;
  va_list ap;
  va_start(ap, word);
  for (const char* w = word; w && nw < 16; w = va_arg(ap, const char*)) words[nw++] = w;
  va_end(ap);
  long found = -1;
  pthread_mutex_lock(&log->lock);
  for (size_t i = 0; i < log->count && found < 0; ++i) {
    size_t k = 0;
    while (k < nw && strstr(log->lines[i], words[k])) ++k;
    if (k == nw) found = (long)i;
  }
  pthread_mutex_unlock(&log->lock);
  return found;
}

void cts_log_dump(cts_log_t* log) {
  pthread_mutex_lock(&log->lock);
  fprintf(stderr, "log (%zu lines):\n", log->count);
  for (size_t i = 0; i < log->count; ++i) fprintf(stderr, "  %s\n", log->lines[i]);
  pthread_mutex_unlock(&log->lock);
}

void cts_log_clear(cts_log_t* log) {
  pthread_mutex_lock(&log->lock);
  for (size_t i = 0; i < log->count; ++i) free(log->lines[i]);
  log->count = 0;
  pthread_mutex_unlock(&log->lock);
}

void cts_log_free(cts_log_t* log) {
  cts_log_clear(log);
  free(log->lines);
  pthread_mutex_destroy(&log->lock);
  memset(log, 0, sizeof(*log));
}

const char* cts_tmp_path(char* buf, size_t size, const char* name) {
  const char* dir = getenv("CUBE_TEST_TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  snprintf(buf, size, "%s/%s.%ld", dir, name, (long)getpid());
  return buf;
}

void cts_sleep_ms(unsigned ms) {
  struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

int cts_contains(const char* s, ...) {
  va_list ap;
  va_start(ap, s);
  int ok = 1;
  for (const char* w = va_arg(ap, const char*); w; w = va_arg(ap, const char*))
    if (!s || !strstr(s, w)) ok = 0;
  va_end(ap);
  return ok;
}
