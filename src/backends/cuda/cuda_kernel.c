/* The CUDA backend's kernels: the dialect's CUDA unit compiled by NVRTC to a
 * cubin for the device's architecture (sm_90 on an H200), through the kernel
 * cache (memory and disk, kind "cubin"); the module is loaded once per device
 * and the function found through a per-device map keyed by (kernel id, mode),
 * under the device's fn_lock.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_backend_internal.h"
#include "base/fault.h"
#include "base/alloc.h"
#include "base/status.h"
#include "cube/cube.h"
#include "kernel/cache.h"
#include "kernel/compile_limit.h"
#include "kernel/dialect.h"
#include "kernel/kernel.h"
#include "platform/platform.h"

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

typedef struct cube__cuda_blob {
  size_t size;
  char data[];
} cube__cuda_blob_t;

static void cube__cuda_blob_destroy(void* p) { free(p); }

/* One nvrtcCompileProgram, on a thread of its own under CUBE_COMPILE_TIMEOUT
 * (kernel/compile_limit.h). NVRTC cannot be interrupted: left behind at the
 * limit, the compile ends in the background, stores its cubin in the disk
 * cache (a later launch finds it) and destroys its program. */
typedef struct cube__cuda_build {
  const cube__nvrtc_t* nv;
  nvrtcProgram prog;
  char arch[48];
  nvrtcResult result;
  cube__cache_key_t key;
  char name[128];
  char identity[512];
} cube__cuda_build_t;

static void cube__cuda_build_run(void* p) {
  cube__cuda_build_t* b = p;
  const char* opts[] = {b->arch, "--std=c++17", "-lineinfo", "--device-as-default-execution-space"};
  b->result = b->nv->CompileProgram(b->prog, (int)(sizeof(opts) / sizeof(opts[0])), opts);
}

static void cube__cuda_build_abandon(void* p) {
  cube__cuda_build_t* b = p;
  size_t n = 0;
  void* cubin = NULL;
  if (b->result == NVRTC_SUCCESS && b->nv->GetCUBINSize(b->prog, &n) == NVRTC_SUCCESS && n &&
      (cubin = malloc(n)) && b->nv->GetCUBIN(b->prog, cubin) == NVRTC_SUCCESS) {
    const cube__cache_meta_t meta = {b->name, "cuda", b->identity};
    cube_status_free(cube__cache_disk_store_meta(b->key, "cubin", &meta, cubin, n));
  }
  free(cubin);
  b->nv->DestroyProgram(&b->prog);
  free(b);
}

/* Compiles |text| with NVRTC for |d|'s architecture into a cubin blob. */
static cube_status_t cube__cuda_nvrtc_compile(cube__backend_device_t* d, const char* text,
                                              const cube_kernel_t* k, cube__cache_key_t key,
                                              cube__cuda_blob_t** out) {
  const char* kname = k->name;
  CUBE__FAULT_RETURN(CUBE__FAULT_KERNEL_COMPILE, CUBE_STATUS_COMPILATION_FAILED,
                     "compiling kernel '%s' with NVRTC failed", kname);
  const cube__nvrtc_t* nv;
  CUBE_RETURN_IF_ERROR(cube__cuda_nvrtc(&nv));
  char unit[160];
  snprintf(unit, sizeof(unit), "%s.cu", kname);
  nvrtcProgram prog = NULL;
  nvrtcResult r = nv->CreateProgram(&prog, text, unit, 0, NULL, NULL);
  if (r != NVRTC_SUCCESS)
    return cube__status_make(CUBE_STATUS_INTERNAL, "compiling kernel '%s': nvrtcCreateProgram: %s",
                             kname, nv->GetErrorString(r));
  cube__cuda_build_t* job = calloc(1, sizeof(*job));
  if (!job) {
    nv->DestroyProgram(&prog);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "compiling kernel '%s': no host memory",
                             kname);
  }
  job->nv = nv;
  job->prog = prog;
  snprintf(job->arch, sizeof(job->arch), "--gpu-architecture=%s", d->arch);
  job->key = key;
  snprintf(job->name, sizeof(job->name), "%s", kname);
  cube__cuda_identity(d, job->identity, sizeof(job->identity));
  double limit = cube__compile_limit_seconds();
  if (!cube__compile_limit_run(cube__cuda_build_run, cube__cuda_build_abandon, job, limit)) {
    char how[96];
    snprintf(how, sizeof(how), "NVRTC %d.%d for %s", nv->major, nv->minor, d->arch);
    return cube__compile_limit_status(
        kname, how, limit,
        "; NVRTC cannot be interrupted: the compile goes on in the background and stores its "
        "cubin in the kernel cache");
  }
  r = job->result;
  free(job);
  cube_status_t st = CUBE_OK;
  if (r != NVRTC_SUCCESS) {
    size_t n = 0;
    char* log = NULL;
    if (nv->GetProgramLogSize(prog, &n) == NVRTC_SUCCESS && n > 0 && (log = malloc(n + 1))) {
      if (nv->GetProgramLog(prog, log) != NVRTC_SUCCESS) log[0] = '\0';
      log[n] = '\0';
      /* The user's file only, as "file:line:col:" (NVRTC writes
       * "file(line):" and puts the column under a caret); lines in the
       * unit's own name ("<kernel>.cu": the preludes) go. */
      char* filtered = cube__dialect_log_filter(log, k->entry, k->source, NULL, 0);
      if (filtered) {
        free(log);
        log = filtered;
      }
    }
    st = cube__status_make(CUBE_STATUS_COMPILATION_FAILED,
                           "compiling kernel '%s' with NVRTC %d.%d for %s failed (%s):\n%s", kname,
                           nv->major, nv->minor, d->arch, nv->GetErrorString(r),
                           log && log[0] ? log : "(no log)");
    free(log);
  } else {
    size_t n = 0;
    r = nv->GetCUBINSize(prog, &n);
    cube__cuda_blob_t* b = r == NVRTC_SUCCESS && n ? malloc(sizeof(*b) + n) : NULL;
    if (!b) {
      st = cube__status_make(r == NVRTC_SUCCESS ? CUBE_STATUS_OUT_OF_MEMORY : CUBE_STATUS_INTERNAL,
                             "compiling kernel '%s': no cubin (%zu bytes)", kname, n);
    } else if ((r = nv->GetCUBIN(prog, b->data)) != NVRTC_SUCCESS) {
      free(b);
      st = cube__status_make(CUBE_STATUS_INTERNAL, "compiling kernel '%s': nvrtcGetCUBIN: %s",
                             kname, nv->GetErrorString(r));
    } else {
      b->size = n;
      *out = b;
    }
  }
  nv->DestroyProgram(&prog);
  return st;
}

void cube__cuda_identity(const cube__backend_device_t* d, char* out, size_t size) {
  if (!size) return;
  const cube__nvrtc_t* nv = NULL;
  cube_status_t st = cube__cuda_nvrtc(&nv);
  char nvv[32] = "none";
  if (!st) snprintf(nvv, sizeof(nvv), "%d.%d", nv->major, nv->minor);
  cube_status_free(st);
  snprintf(out, size, "cuda | %s | %s | driver %d | nvrtc %s", d->name, d->arch, d->cu->version,
           nvv);
}

/* The cubin of |key| from the kernel cache (memory, then disk), or compiled
 * and stored. The blob belongs to the cache. */
static cube_status_t cube__cuda_cubin(cube__backend_device_t* d, cube__cache_key_t key,
                                      const char* text, const cube_kernel_t* k,
                                      const cube__cuda_blob_t** out) {
  cube__cuda_blob_t* b = cube__cache_memory_get(key);
  if (b) {
    cube__cache_count_memory_hit();
    *out = b;
    return CUBE_OK;
  }
  uint64_t t0 = cube__now_ns();
  void* data = NULL;
  size_t size = 0;
  cube_status_t st = cube__cache_disk_load(key, "cubin", &data, &size);
  if (!st) {
    b = malloc(sizeof(*b) + size);
    if (!b) {
      free(data);
      return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                               "kernel '%s': no host memory for its cubin", k->name);
    }
    b->size = size;
    memcpy(b->data, data, size);
    free(data);
    cube__cache_count_disk_hit(k->name, t0, cube__now_ns() - t0);
    *out = cube__cache_memory_put(key, b, cube__cuda_blob_destroy);
    return CUBE_OK;
  }
  cube_status_free(st);
  char where[32];
  snprintf(where, sizeof(where), "cuda:%u", d->index);
  cube__compile_watch_t watch;
  cube__compile_watch_begin(&watch, k->name, where);
  st = cube__cuda_nvrtc_compile(d, text, k, key, &b);
  cube__cache_count_miss(cube__compile_watch_end(&watch, st != CUBE_OK), st != CUBE_OK);
  if (st) return st;
  char identity[512];
  cube__cuda_identity(d, identity, sizeof(identity));
  const cube__cache_meta_t meta = {k->name, "cuda", identity};
  cube_status_free(cube__cache_disk_store_meta(key, "cubin", &meta, b->data, b->size));
  *out = cube__cache_memory_put(key, b, cube__cuda_blob_destroy);
  return CUBE_OK;
}

/* |text| with CUBE_LAUNCH_1D defined ahead of it (the prelude's 1-D positions);
 * NULL when out of memory. The caller frees it. */
static char* cube__cuda_one_d_text(const char* text) {
  static const char def[] = "#define CUBE_LAUNCH_1D 1\n";
  size_t n = strlen(text);
  char* out = malloc(sizeof(def) - 1 + n + 1);
  if (!out) return NULL;
  memcpy(out, def, sizeof(def) - 1);
  memcpy(out + sizeof(def) - 1, text, n + 1);
  return out;
}

/* The entry function's name in the module: "cube_k_" and 16 hex digits of
 * the unit's hash (CUBE__CUDA_FN_NAME_LEN characters), put in front of the
 * text as a define of the prelude's cube_kernel_entry. Distinct units get
 * distinct names, so that the driver's activity records (CUPTI's, which name
 * the function and not the module) say which kernel ran. */
static char* cube__cuda_named_text(const char* text, uint64_t* out_hash) {
  const char* parts[] = {"cuda entry", text, NULL};
  cube__cache_key_t h = cube__cache_key(parts);
  *out_hash = h.hi ^ h.lo;
  char def[64];
  int dn = snprintf(def, sizeof(def), "#define cube_kernel_entry " CUBE__CUDA_FN_PREFIX "%016llx\n",
                    (unsigned long long)*out_hash);
  size_t n = strlen(text);
  char* out = malloc((size_t)dn + n + 1);
  if (!out) return NULL;
  memcpy(out, def, (size_t)dn);
  memcpy(out + dn, text, n + 1);
  return out;
}

/* The function map: open addressing on (kernel id, variant), the variant being
 * the execution mode and, in bit 2, the 1-D form; the table is at most half
 * full. Guarded by fn_lock. */
static uint64_t cube__cuda_fn_key(uint64_t id, uint32_t variant) { return (id << 3) | variant; }

static bool cube__cuda_fn_find(cube__backend_device_t* d, uint64_t id, uint32_t mode,
                               cube__cuda_fn_t* out) {
  if (!d->fn_cap) return false;
  uint64_t key = cube__cuda_fn_key(id, mode);
  for (size_t i = (size_t)(key * 0x9E3779B97F4A7C15ull) & (d->fn_cap - 1);;
       i = (i + 1) & (d->fn_cap - 1)) {
    const cube__cuda_fn_t* e = &d->fns[i];
    if (!e->fn) return false;
    if (cube__cuda_fn_key(e->kernel_id, e->mode) == key) {
      *out = *e;
      return true;
    }
  }
}

static void cube__cuda_fn_place(cube__cuda_fn_t* table, size_t cap, const cube__cuda_fn_t* e) {
  uint64_t key = cube__cuda_fn_key(e->kernel_id, e->mode);
  size_t i = (size_t)(key * 0x9E3779B97F4A7C15ull) & (cap - 1);
  while (table[i].fn) i = (i + 1) & (cap - 1);
  table[i] = *e;
}

static bool cube__cuda_fn_insert(cube__backend_device_t* d, const cube__cuda_fn_t* e) {
  if ((d->fn_count + 1) * 2 > d->fn_cap) {
    size_t cap = d->fn_cap ? d->fn_cap * 2 : 64;
    cube__cuda_fn_t* table = calloc(cap, sizeof(*table));
    if (!table) return false;
    for (size_t i = 0; i < d->fn_cap; ++i)
      if (d->fns[i].fn) cube__cuda_fn_place(table, cap, &d->fns[i]);
    free(d->fns);
    d->fns = table;
    d->fn_cap = cap;
  }
  cube__cuda_fn_place(d->fns, d->fn_cap, e);
  d->fn_count++;
  return true;
}

/* The function of (|k|, |mode|) on |d|, compiled and loaded on first use. The
 * 1-D form (|one_d|) is compiled with CUBE_LAUNCH_1D defined: the prelude then
 * makes every y and z position 0 and every y and z size 1 at compile time, so
 * ABSOLUTE_POS costs no reads of the y and z registers (about 45 ns a kernel on
 * the H200 in a graph of small kernels). It serves launches whose cube dim and
 * cube count are 1 in y and z; the two forms are separate modules. */
cube_status_t cube__cuda_function(cube__backend_device_t* d, const cube_kernel_t* k,
                                  cube_execution_mode_t mode, bool one_d, cube__cuda_fn_t* out) {
  if (!k->source || !k->signature)
    return cube__status_make(CUBE_STATUS_UNIMPLEMENTED,
                             "kernel '%s' has no dialect source: native CPU kernels cannot run on "
                             "cuda:%u",
                             k->name, d->index);
  if ((unsigned)mode > CUBE_EXEC_UNCHECKED)
    return CUBE_INVALID("kernel '%s': execution mode %d is invalid", k->name, (int)mode);
  const uint32_t variant = (uint32_t)mode | (one_d ? 4u : 0u);
  pthread_mutex_lock(&d->fn_lock);
  bool found = cube__cuda_fn_find(d, k->id, variant, out);
  pthread_mutex_unlock(&d->fn_lock);
  if (found) return CUBE_OK;

  char* text = NULL;
  cube_status_t st = cube__dialect_generate(CUBE__TARGET_CUDA, k->signature, k->source, k->defines,
                                            k->define_count, mode, &text);
  if (st) return cube__status_annotate(st, "kernel '%s'", k->name);
  if (one_d) {
    char* with = cube__cuda_one_d_text(text);
    free(text);
    if (!with) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "kernel '%s': no host memory",
                                        k->name);
    text = with;
  }
  uint64_t name_hash = 0;
  {
    char* with = cube__cuda_named_text(text, &name_hash);
    free(text);
    if (!with) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "kernel '%s': no host memory",
                                        k->name);
    text = with;
  }
  static const char* const mode_names[3] = {"checked", "validate", "unchecked"};
  const cube__nvrtc_t* nv = NULL;
  st = cube__cuda_nvrtc(&nv);
  if (st) {
    free(text);
    return cube__status_annotate(st, "kernel '%s'", k->name);
  }
  char nvv[32];
  snprintf(nvv, sizeof(nvv), "nvrtc %d.%d", nv->major, nv->minor);
  const char* parts[] = {"cube", CUBE_VERSION_STRING, "cuda", d->arch, nvv, mode_names[mode],
                         text, NULL};
  cube__cache_key_t key = cube__cache_key(parts);

  /* Serialise per device: a second thread asking for the same kernel waits
   * and finds it loaded. */
  pthread_mutex_lock(&d->fn_lock);
  if (cube__cuda_fn_find(d, k->id, variant, out)) {
    pthread_mutex_unlock(&d->fn_lock);
    free(text);
    return CUBE_OK;
  }
  cube__cuda_module_t* mod = NULL;
  for (size_t i = 0; i < d->module_count; ++i)
    if (d->modules[i].key.hi == key.hi && d->modules[i].key.lo == key.lo) mod = &d->modules[i];
  if (mod) {
    /* Another kernel object with the same unit: its module is loaded already,
     * an in-memory hit as on every backend. */
    cube__cache_count_memory_hit();
  } else {
    const cube__cuda_blob_t* cubin = NULL;
    st = cube__cuda_cubin(d, key, text, k, &cubin);
    CUBE__CUDA_SCOPE(d->ctx);
    CUmodule m = NULL;
    CUfunction f = NULL;
    if (!st) {
      CUresult r = d->cu->ModuleLoadData(&m, cubin->data);
      char fn_name[CUBE__CUDA_FN_NAME_LEN + 1];
      snprintf(fn_name, sizeof(fn_name), CUBE__CUDA_FN_PREFIX "%016llx",
               (unsigned long long)name_hash);
      if (r == CUDA_SUCCESS) r = d->cu->ModuleGetFunction(&f, m, fn_name);
      if (r != CUDA_SUCCESS) {
        if (m) d->cu->ModuleUnload(m);
        st = cube__cuda_error(r, CUBE_STATUS_COMPILATION_FAILED,
                              "kernel '%s': loading its cubin (%zu bytes, %s) on cuda:%u",
                              k->name, cubin->size, d->arch, d->index);
      }
    }
    if (!st) {
      void* grown =
          cube__array_grow(d->modules, &d->module_cap, d->module_count + 1, sizeof(*d->modules));
      if (!grown) {
        d->cu->ModuleUnload(m);
        st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "kernel '%s': no host memory", k->name);
      } else {
        d->modules = grown;
        atomic_fetch_add_explicit(&d->module_bytes, cubin->size, memory_order_relaxed);
        mod = &d->modules[d->module_count++];
        mod->key = key;
        mod->module = m;
        mod->fn = f;
        mod->name_hash = name_hash;
        snprintf(mod->kernel_name, sizeof(mod->kernel_name), "%s", k->name);
        mod->max_threads = 0;
        if (d->cu->FuncGetAttribute(&mod->max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK,
                                    f) != CUDA_SUCCESS)
          mod->max_threads = (int)d->max_threads_per_block;
      }
    }
  }
  if (!st) {
    cube__cuda_fn_t e = {k->id, variant, mod->fn, mod->max_threads, mod->name_hash};
    if (!cube__cuda_fn_insert(d, &e))
      st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "kernel '%s': no host memory", k->name);
    else
      *out = e;
  }
  pthread_mutex_unlock(&d->fn_lock);
  free(text);
  return st;
}

cube_status_t cube__cuda_prepare(cube__backend_device_t* d, const cube_kernel_t* k,
                                 cube_execution_mode_t mode) {
  cube__cuda_fn_t f;
  return cube__cuda_function(d, k, mode, true, &f);
}

cube_status_t cube__cuda_kernel_limits(cube__backend_device_t* d, const cube_kernel_t* k,
                                       cube_execution_mode_t mode, cube__kernel_limits_t* out) {
  memset(out, 0, sizeof(*out));
  if (!k->source || !k->signature) return CUBE_OK; /* refused at launch by name */
  cube__cuda_fn_t f;
  CUBE_RETURN_IF_ERROR(cube__cuda_function(d, k, mode, true, &f));
  /* Static shared memory beyond the device's is ptxas's compile error. */
  out->max_units = f.max_threads > 0 ? (uint32_t)f.max_threads : 0;
  return CUBE_OK;
}
