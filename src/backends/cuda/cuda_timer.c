/* Kernels that time themselves (CUBE_CUDA_KERNEL_TIMER=self;
 * docs/observability.md, "How CUDA kernels are timed"): each stream's slots
 * (device memory, copied by the stream in batches into pinned host memory),
 * the clock kernel that puts the GPU's global timer on cube's clock, and the
 * reading of copied slots in launch order. The generated kernel's side is
 * the CUDA prelude's (src/kernel/preludes/cuda.h, CUBE__ENTRY_TIMER); the
 * registry, the poller thread and the delivery are cuda_activity.c's. Every
 * function here but cube__ktimer_copy is called holding the registry's lock.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/cuda/cuda_activity_internal.h"
#include "backends/cuda/cuda_backend_internal.h"
#include "platform/platform.h"
#include "trace/trace.h"

/* The clock kernel: the global timer into mapped memory, then a flag. */
static const char cube__act_clock_src[] =
    "extern \"C\" __global__ void cube_clock(volatile unsigned long long* out) {\n"
    "  unsigned long long t;\n"
    "  asm volatile(\"mov.u64 %0, %%globaltimer;\" : \"=l\"(t));\n"
    "  out[0] = t;\n"
    "  __threadfence_system();\n"
    "  out[1] = 1ull;\n"
    "}\n";

/* Under the registry's lock, |d|'s context current: the clock kernel loaded. */
static bool cube__act_clock_load(cube__backend_device_t* d) {
  if (d->act_clock_fn && d->act_epoch == atomic_load(&d->epoch)) return true;
  const cube__nvrtc_t* nv = NULL;
  cube_status_t st = cube__cuda_nvrtc(&nv);
  if (st) {
    cube_status_free(st);
    return false;
  }
  nvrtcProgram prog = NULL;
  if (nv->CreateProgram(&prog, cube__act_clock_src, "cube_clock.cu", 0, NULL, NULL) !=
      NVRTC_SUCCESS)
    return false;
  char arch[64];
  snprintf(arch, sizeof(arch), "--gpu-architecture=%s", d->arch);
  const char* opts[] = {arch};
  size_t n = 0;
  char* cubin = NULL;
  bool ok = nv->CompileProgram(prog, 1, opts) == NVRTC_SUCCESS &&
            nv->GetCUBINSize(prog, &n) == NVRTC_SUCCESS && n && (cubin = malloc(n)) != NULL &&
            nv->GetCUBIN(prog, cubin) == NVRTC_SUCCESS;
  nv->DestroyProgram(&prog);
  CUmodule m = NULL;
  CUfunction f = NULL;
  ok = ok && d->cu->ModuleLoadData(&m, cubin) == CUDA_SUCCESS;
  free(cubin);
  if (ok && d->cu->ModuleGetFunction(&f, m, "cube_clock") != CUDA_SUCCESS) {
    d->cu->ModuleUnload(m);
    ok = false;
  }
  if (!ok) return false;
  /* A module of an earlier context went with it (a recovery's reset). */
  d->act_clock_module = m;
  d->act_clock_fn = f;
  d->act_epoch = atomic_load(&d->epoch);
  atomic_store(&d->act_calibrated, false);
  cube__activity_epoch_bump(); /* servers ask again (backends/backend.h) */
  return true;
}

/* Under the registry's lock, |d|'s context current: the global timer's
 * offset to cube's clock. The clock kernel runs on a stream of its own, 16
 * times: each gives a lower bound (cube's clock before the launch minus the
 * timer) and an upper bound (cube's clock once the flag is seen minus the
 * timer); the tightest upper bound is kept, so that device times are never
 * earlier than they were (and late by the flag's trip at most, about a
 * microsecond). */
static bool cube__act_calibrate_once(cube__backend_device_t* d);
static bool cube__act_calibrate(cube__backend_device_t* d) {
  /* Not again in a context where it failed: that device's kernels are
   * timed by events. */
  if (atomic_load(&d->act_refused) == atomic_load(&d->epoch) + 1) return false;
  if (cube__act_calibrate_once(d)) return true;
  atomic_store(&d->act_refused, atomic_load(&d->epoch) + 1);
  return false;
}
static bool cube__act_calibrate_once(cube__backend_device_t* d) {
  if (!cube__act_clock_load(d)) return false;
  CUstream cs = NULL;
  if (d->cu->StreamCreate(&cs, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return false;
  volatile uint64_t* out = NULL;
  bool ok = d->cu->MemHostAlloc((void**)&out, 64, CU_MEMHOSTALLOC_PORTABLE |
                                                     CU_MEMHOSTALLOC_DEVICEMAP) == CUDA_SUCCESS;
  int64_t lo = INT64_MIN, hi = INT64_MAX;
  for (int k = 0; ok && k < 16; ++k) {
    out[0] = 0;
    out[1] = 0;
    CUdeviceptr dp = (CUdeviceptr)(uintptr_t)out; /* unified addressing */
    void* params[] = {&dp};
    uint64_t t0 = cube__now_ns();
    if (d->cu->LaunchKernel(d->act_clock_fn, 1, 1, 1, 1, 1, 1, 0, cs, params, NULL) !=
        CUDA_SUCCESS) {
      ok = false;
      break;
    }
    uint64_t t1 = t0;
    while (__atomic_load_n(&out[1], __ATOMIC_ACQUIRE) == 0) {
      t1 = cube__now_ns();
      if (t1 - t0 > 1000000000ull) break; /* a second: no answer */
    }
    t1 = cube__now_ns();
    if (__atomic_load_n(&out[1], __ATOMIC_ACQUIRE) == 0) {
      ok = false;
      break;
    }
    int64_t g = (int64_t)out[0];
    if ((int64_t)t0 - g > lo) lo = (int64_t)t0 - g;
    if ((int64_t)t1 - g < hi) hi = (int64_t)t1 - g;
  }
  if (ok) ok = d->cu->StreamSynchronize(cs) == CUDA_SUCCESS;
  d->cu->StreamDestroy(cs);
  if (out) d->cu->MemFreeHost((void*)out);
  if (!ok || hi < lo) return false;
  d->act_offset = hi;
  d->act_calibrated_at = cube__now_ns();
  atomic_store(&d->act_calibrated, true);
  return true;
}

void cube__ktimer_recalibrate(cube__backend_device_t* d) {
  d->act_stale = false;
  /* A lost device runs nothing; a recovered one is measured at its next
   * timed launch (its epoch changed: cube__ktimer_setup). */
  if (atomic_load(&d->lost) || d->act_epoch != atomic_load(&d->epoch) ||
      !atomic_load(&d->act_calibrated))
    return;
  CUBE__CUDA_SCOPE(d->ctx);
  (void)cube__act_calibrate_once(d);
}

/* Under the registry's lock, |d|'s context current: |s|'s slots, set up. */
bool cube__ktimer_setup(cube__backend_device_t* d, cube__cuda_stream_t* s) {
  struct cube__cuda_activity* a = s->act;
  if (!atomic_load(&d->act_calibrated) || d->act_epoch != atomic_load(&d->epoch))
    if (!cube__act_calibrate(d)) return false;
  if (a->slots) return true;
  const size_t bytes = (size_t)CUBE__ACT_DEVICE_BYTES;
  CUdeviceptr slots = 0;
  void* host = NULL;
  bool ok = d->cu->MemAlloc(&slots, bytes) == CUDA_SUCCESS;
  if (ok)
    ok = d->cu->MemHostAlloc(&host, CUBE__ACT_HOST_BYTES, CU_MEMHOSTALLOC_PORTABLE) ==
         CUDA_SUCCESS;
  if (ok) {
    /* The device slots start at 0 (an end only grows), its marks at 1;
     * before the first timed launch, which the caller makes after this
     * returns. The host's marks start at 0: nothing copied. */
    memset(host, 0, CUBE__ACT_HOST_BYTES);
    uint64_t* ones = (uint64_t*)((char*)host + CUBE__ACT_SLOTS_BYTES);
    for (unsigned k = 0; k < CUBE__ACT_BATCH; ++k) ones[k] = 1;
    CUstream cs = NULL;
    ok = d->cu->StreamCreate(&cs, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS;
    if (ok) {
      ok = d->cu->MemcpyHtoDAsync(slots, host, bytes, cs) == CUDA_SUCCESS &&
           d->cu->StreamSynchronize(cs) == CUDA_SUCCESS;
      d->cu->StreamDestroy(cs);
    }
    memset(ones, 0, CUBE__ACT_BATCH * 8u);
  }
  if (!ok) {
    if (slots) d->cu->MemFree(slots);
    if (host) d->cu->MemFreeHost(host);
    return false;
  }
  /* Launches noted before (none while records were off) are passed; the
   * next one names itself (the reader does not read those before it). The
   * caller is the stream's launching thread. */
  uint64_t put = atomic_load(&a->put);
  atomic_store(&a->got, put);
  a->named_kernel = 0;
  atomic_store(&a->submitted, put);
  pthread_mutex_init(&a->copy_lock, NULL);
  atomic_store(&a->copied, put);
  a->host = host;
  a->slots = slots;
  atomic_fetch_add(&d->act_bytes, (uint64_t)bytes);
  return true;
}

void cube__ktimer_copy(cube__backend_device_t* d, cube__cuda_stream_t* s, uint64_t at_least,
                       bool wait) {
  struct cube__cuda_activity* a = s->act;
  if (!a || !a->slots) return;
  if (wait) {
    pthread_mutex_lock(&a->copy_lock);
  } else if (pthread_mutex_trylock(&a->copy_lock) != 0) {
    return; /* another thread is at it */
  }
  /* Launches submitted so far precede this copy on the stream. */
  const uint64_t upto = atomic_load_explicit(&a->submitted, memory_order_acquire);
  const uint64_t from = atomic_load(&a->copied);
  CUresult r = CUDA_SUCCESS;
  if (upto - from >= (at_least ? at_least : 1)) {
    uint64_t i = from;
    while (r == CUDA_SUCCESS && i < upto) { /* a piece per batch */
      const uint64_t at = i % CUBE__ACT_LAUNCHES;
      const uint64_t k = at % CUBE__ACT_BATCH;
      uint64_t n = upto - i;
      if (n > CUBE__ACT_BATCH - k) n = CUBE__ACT_BATCH - k;
      const size_t base = (size_t)(at / CUBE__ACT_BATCH) * CUBE__ACT_BATCH_BYTES;
      /* The groups of launches k .. k+n-1 (one region: the other launches
       * of its first and last group are copied too, and are read only after
       * a copy of their own), then a mark for each of the n: a mark seen on
       * the host means its launch's words landed before it, in the stream's
       * order. */
      const size_t g0 = base + (size_t)(k / CUBE__ACT_GROUP) * CUBE__ACT_GROUP_BYTES;
      const size_t g1 = base + (size_t)((k + n - 1) / CUBE__ACT_GROUP + 1) * CUBE__ACT_GROUP_BYTES;
      r = d->cu->MemcpyDtoHAsync((void*)((volatile char*)a->host + g0), a->slots + g0, g1 - g0,
                                 s->stream);
      if (r == CUDA_SUCCESS)
        r = d->cu->MemcpyDtoHAsync(
            (void*)((volatile char*)a->host + CUBE__ACT_SLOTS_BYTES + (size_t)at * 8u),
            a->slots + CUBE__ACT_SLOTS_BYTES, (size_t)n * 8u, s->stream);
      i += n;
    }
    if (r == CUDA_SUCCESS) atomic_store(&a->copied, upto);
  }
  if (wait && r == CUDA_SUCCESS) {
    void* ev = NULL;
    cube_status_t st = cube__cuda_event_record(d, s, &ev);
    if (!st) {
      d->cu->EventSynchronize((CUevent)ev);
      cube__cuda_event_destroy(d, ev);
    }
    cube_status_free(st);
  }
  pthread_mutex_unlock(&a->copy_lock);
}

/* Under the registry's lock: |s|'s completed self-timed kernels, in launch
 * order, into the trace and its queue. */
void cube__ktimer_drain(cube__cuda_stream_t* s) {
  struct cube__cuda_activity* a = s->act;
  if (!a->slots) return;
  cube__backend_device_t* d = a->device;
  if (d->act_stale) cube__ktimer_recalibrate(d); /* before a record is converted */
  uint64_t got = atomic_load_explicit(&a->got, memory_order_relaxed);
  const uint64_t put = atomic_load_explicit(&a->put, memory_order_acquire);
  for (; got < put; ++got) {
    const uint64_t i = got % CUBE__ACT_LAUNCHES;
    const cube__act_launch_t* l = &a->launches[i];
    if (l->named) memcpy(a->read_name, a->names[i], sizeof(a->read_name));
    uint64_t* h = (uint64_t*)((char*)a->host + cube__act_slot_offset(i));
    uint64_t* mark = (uint64_t*)((char*)a->host + CUBE__ACT_SLOTS_BYTES) + i;
    /* Copied by the stream: done when its mark has landed (its words were
     * copied before it); the end is the latest of the 32. An end word left
     * from the slot's earlier use is older than this launch's, and a
     * launch's cube 0 raises one of its words. */
    if (!__atomic_load_n(mark, __ATOMIC_ACQUIRE)) break; /* not copied yet */
    uint64_t start = __atomic_load_n(&h[0], __ATOMIC_RELAXED);
    uint64_t end = 0;
    for (unsigned j = 1; j <= CUBE__ACT_PLANES; ++j) {
      uint64_t e = __atomic_load_n(&h[(size_t)j * (CUBE__ACT_LINE / 8u)], __ATOMIC_RELAXED);
      if (e > end) end = e;
    }
    __atomic_store_n(mark, 0, __ATOMIC_RELAXED);
    if (!start || !end) {
      /* Copied (its mark landed) but never written: the kernel did not run
       * to its timer. No record, counted as dropped; the launches after it
       * are read on. */
      a->dropped++;
      continue;
    }
    if (end < start) start = end;
    if (got < a->quiet_below) continue; /* launched before records came on again */
    cube__act_entry_t e;
    memset(&e, 0, sizeof(e));
    e.start_ns = (uint64_t)((int64_t)start + d->act_offset);
    e.end_ns = (uint64_t)((int64_t)end + d->act_offset);
    e.order = l->order;
    memcpy(e.count, l->count, sizeof(e.count));
    memcpy(e.foreign, a->read_name, sizeof(e.foreign)); /* the launch's name */
    cube__act_deliver(s, &e);
  }
  atomic_store_explicit(&a->got, got, memory_order_release);
  uint64_t untimed = atomic_exchange_explicit(&a->untimed, 0, memory_order_relaxed);
  a->dropped += untimed;
}

