// Can a process use its GPU again after a sticky fault (an illegal address)?
// Raw CUDA, no cube: a kernel stores 4 TiB past its buffer, the sync reports
// the fault, then each variant (argv[1]) tries to get a working context back
// and runs a small kernel whose result it checks:
//   primary   release the primary context, cuDevicePrimaryCtxReset, retain it
//   primary2  as primary, then a second reset without a release
//   created   the fault in a context of cuCtxCreate; destroy it, create another
//   mixed     the fault in the primary context; cuCtxCreate a new one, no reset
//   checkpoint  the fault in the primary context; a second process (this
//             program again, "controller PID") locks, checkpoints, restores
//             and unlocks this one through the driver's checkpoint calls
//             (CUDA 12.8+), then this one tries the same context, and if that
//             fails what "primary" does
//   checkpoint-clean  the same without the fault: does a checkpoint and a
//             restore of a healthy process work on this machine at all
// Every driver call's result is printed; "works: 1" means the GPU computed
// right again in this process. cube_device_recover does what "primary" does
// (docs/failures.md, "Recovery on a real GPU").
// Build (on a CUDA machine), one line:
//   gcc -O1 cuda_sticky_reset.c -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lcuda -lnvrtc
#include <cuda.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static char* cubin_of(const char* src) {
  nvrtcProgram p;
  nvrtcCreateProgram(&p, src, "k.cu", 0, 0, 0);
  const char* opts[] = {"--gpu-architecture=sm_90"};
  if (nvrtcCompileProgram(p, 1, opts)) {
    fprintf(stderr, "nvrtc failed\n");
    exit(1);
  }
  size_t sz;
  nvrtcGetCUBINSize(p, &sz);
  char* c = malloc(sz);
  nvrtcGetCUBIN(p, c);
  return c;
}

static const char* name_of(CUresult r) {
  const char* s = "?";
  cuGetErrorName(r, &s);
  return s;
}

#define SHOW(x)                                                       \
  do {                                                                \
    CUresult r_ = (x);                                                \
    printf("  %-48s -> %d %s\n", #x, (int)r_, name_of(r_));           \
  } while (0)

static char *bad_bin, *good_bin;

static void fault(void) {
  CUmodule m;
  CUfunction f;
  CUdeviceptr p;
  CUresult r = cuModuleLoadData(&m, bad_bin);
  if (r) {
    printf("  load of the faulting kernel -> %d\n", r);
    exit(1);
  }
  cuModuleGetFunction(&f, m, "wild");
  cuMemAlloc(&p, 4096);
  void* a[] = {&p};
  r = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, 0, a, 0);
  printf("  launch of the faulting kernel -> %d\n", r);
  r = cuCtxSynchronize();
  printf("  sync after it -> %d %s\n", r, name_of(r));
}

static int works(void) {
  CUmodule m;
  CUfunction f;
  CUdeviceptr p;
  CUresult r = cuModuleLoadData(&m, good_bin);
  printf("  load of a good kernel -> %d %s\n", r, name_of(r));
  if (r) return 0;
  cuModuleGetFunction(&f, m, "fill");
  r = cuMemAlloc(&p, 4096 * 4);
  printf("  alloc -> %d %s\n", r, name_of(r));
  if (r) return 0;
  void* a[] = {&p};
  r = cuLaunchKernel(f, 4, 1, 1, 1024, 1, 1, 0, 0, a, 0);
  if (!r) r = cuCtxSynchronize();
  printf("  launch + sync -> %d %s\n", r, name_of(r));
  if (r) return 0;
  static float h[4096];
  r = cuMemcpyDtoH(h, p, sizeof(h));
  int bad = 0;
  for (int i = 0; i < 4096; ++i) bad += h[i] != (float)i * 2;
  printf("  read -> %d, %d wrong\n", r, bad);
  return r == 0 && bad == 0;
}

/* The controller: another process, as the checkpoint calls require. */
static int controller(int pid) {
  SHOW(cuInit(0));
  CUprocessState st = CU_PROCESS_STATE_FAILED;
  SHOW(cuCheckpointProcessGetState(pid, &st));
  printf("  state of %d: %d\n", pid, (int)st);
  CUcheckpointLockArgs la;
  memset(&la, 0, sizeof(la));
  la.timeoutMs = 10000;
  CUcheckpointCheckpointArgs ca;
  memset(&ca, 0, sizeof(ca));
  CUcheckpointRestoreArgs ra;
  memset(&ra, 0, sizeof(ra));
  CUcheckpointUnlockArgs ua;
  memset(&ua, 0, sizeof(ua));
  double t0 = now();
  SHOW(cuCheckpointProcessLock(pid, &la));
  SHOW(cuCheckpointProcessCheckpoint(pid, &ca));
  SHOW(cuCheckpointProcessGetState(pid, &st));
  printf("  state of %d: %d\n", pid, (int)st);
  SHOW(cuCheckpointProcessRestore(pid, &ra));
  SHOW(cuCheckpointProcessUnlock(pid, &ua));
  SHOW(cuCheckpointProcessGetState(pid, &st));
  printf("  state of %d: %d; lock to unlock %.3f s\n", pid, (int)st, now() - t0);
  return 0;
}

/* Runs this program as the controller of this process and waits for it. */
static void checkpoint_me(const char* self) {
  char pid[32];
  snprintf(pid, sizeof(pid), "%d", (int)getpid());
  fflush(stdout);
  pid_t child = fork();
  if (child == 0) {
    execl(self, self, "controller", pid, (char*)NULL);
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  printf("  controller exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

int main(int argc, char** argv) {
  const char* v = argc > 1 ? argv[1] : "primary";
  if (!strcmp(v, "controller") && argc > 2) return controller(atoi(argv[2]));
  bad_bin = cubin_of("extern \"C\" __global__ void wild(float* p){ p[threadIdx.x + (1ull<<40)] = 1.0f; }\n");
  good_bin = cubin_of(
      "extern \"C\" __global__ void fill(float* p){ unsigned i = blockIdx.x*blockDim.x+threadIdx.x; "
      "p[i] = 2.0f*i; }\n");
  printf("variant %s\n", v);
  SHOW(cuInit(0));
  CUdevice d;
  cuDeviceGet(&d, 0);
  CUcontext c;
  if (!strcmp(v, "created")) {
    SHOW(cuCtxCreate(&c, NULL, 0, d));
    fault();
    double t0 = now();
    SHOW(cuCtxDestroy(c));
    SHOW(cuCtxCreate(&c, NULL, 0, d));
    printf("  %.3f s\nworks: %d\n", now() - t0, works());
    return 0;
  }
  SHOW(cuDevicePrimaryCtxRetain(&c, d));
  SHOW(cuCtxSetCurrent(c));
  if (!strcmp(v, "checkpoint-clean")) {
    printf("works before: %d\n", works());
    checkpoint_me("/proc/self/exe");
    printf("works: %d\n", works());
    return 0;
  }
  fault();
  double t0 = now();
  if (!strcmp(v, "checkpoint")) {
    checkpoint_me("/proc/self/exe");
    int w = works();
    printf("  %.3f s\nworks in the same context: %d\n", now() - t0, w);
    if (w) return 0;
  }
  if (!strcmp(v, "mixed")) {
    SHOW(cuCtxCreate(&c, NULL, 0, d));
    printf("works: %d\n", works());
    return 0;
  }
  SHOW(cuCtxSetCurrent(NULL));
  SHOW(cuDevicePrimaryCtxRelease(d));
  SHOW(cuDevicePrimaryCtxReset(d));
  SHOW(cuDevicePrimaryCtxRetain(&c, d));
  SHOW(cuCtxSetCurrent(c));
  printf("  %.3f s\nworks: %d\n", now() - t0, works());
  if (!strcmp(v, "primary2")) {
    printf(" a second reset, without a release\n");
    SHOW(cuDevicePrimaryCtxReset(d));
    SHOW(cuDevicePrimaryCtxRetain(&c, d));
    SHOW(cuCtxSetCurrent(c));
    printf("works: %d\n", works());
  }
  return 0;
}
