/* The CPU fault guard (cpu_fault_guard.h). */
#include "backends/cpu/cpu_fault_guard.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "base/status.h"

/* A signal stack large enough for the handler and what it calls (the
 * previous handlers run on it too). */
#define CUBE__CPU_GUARD_STACK (64u * 1024u)

static pthread_once_t cube__guard_once = PTHREAD_ONCE_INIT;
static int cube__guard_install_errno; /* 0: installed */
static struct sigaction cube__guard_old_segv, cube__guard_old_bus;
static pthread_key_t cube__guard_key;
static __thread cube__cpu_guard_t* cube__guard_tls;

bool cube__cpu_guard_wanted(void) { return cube__option_bool(CUBE__OPT_CPU_FAULT_GUARD); }

const char* cube__cpu_guard_signal_name(int signo) {
  switch (signo) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    default: return "a signal";
  }
}

static void cube__guard_handler(int sig, siginfo_t* si, void* uc) {
  cube__cpu_guard_t* g = cube__guard_tls;
  /* si_code > 0: raised by the processor for this thread's own access (not
   * kill or sigqueue from elsewhere). */
  if (g && g->armed && si && si->si_code > 0) {
    g->armed = 0;
    g->signo = sig;
    g->addr = si->si_addr;
    siglongjmp(g->jump, 1);
  }
  /* Not a guarded kernel's: what was there before. */
  const struct sigaction* old = sig == SIGBUS ? &cube__guard_old_bus : &cube__guard_old_segv;
  if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction) {
    old->sa_sigaction(sig, si, uc);
    return;
  }
  if (!(old->sa_flags & SA_SIGINFO) && old->sa_handler != SIG_DFL && old->sa_handler != SIG_IGN) {
    old->sa_handler(sig);
    return;
  }
  /* The default action: restored, then the faulting instruction runs again
   * and ends the process as it would have without the guard. */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  (void)sigaction(sig, &dfl, NULL);
}

static void cube__guard_thread_end(void* p) {
  cube__cpu_guard_t* g = p;
  if (!g) return;
  stack_t now;
  if (g->altstack && sigaltstack(NULL, &now) == 0 && now.ss_sp == g->altstack) {
    stack_t off;
    memset(&off, 0, sizeof(off));
    off.ss_flags = SS_DISABLE;
    (void)sigaltstack(&off, NULL);
  }
  free(g->altstack);
  free(g);
}

static void cube__guard_install(void) {
  if (pthread_key_create(&cube__guard_key, cube__guard_thread_end) != 0) {
    cube__guard_install_errno = EAGAIN;
    return;
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = cube__guard_handler;
  /* NODEFER: the jump out of the handler leaves the signal unblocked
   * without a sigprocmask per launch. ONSTACK: the thread's own stack may
   * be what overflowed. */
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGSEGV, &sa, &cube__guard_old_segv) != 0 ||
      sigaction(SIGBUS, &sa, &cube__guard_old_bus) != 0)
    cube__guard_install_errno = errno ? errno : EINVAL;
}

/* ThreadSanitizer takes SIGSEGV for itself and does not let a handler jump
 * out of it: under TSan the guard refuses, with a status, rather than crash. */
#if defined(__SANITIZE_THREAD__)
#define CUBE__GUARD_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CUBE__GUARD_UNDER_TSAN 1
#endif
#endif

cube_status_t cube__cpu_guard_thread(cube__cpu_guard_t** out) {
  *out = cube__guard_tls;
  if (*out) return CUBE_OK;
#ifdef CUBE__GUARD_UNDER_TSAN
  return cube__status_make(CUBE_STATUS_UNSUPPORTED,
                           "the CPU fault guard (CUBE_CPU_FAULT_GUARD) does not work in a build "
                           "with ThreadSanitizer, which takes SIGSEGV for itself");
#endif
  pthread_once(&cube__guard_once, cube__guard_install);
  if (cube__guard_install_errno)
    return cube__status_make(CUBE_STATUS_INTERNAL,
                             "the CPU fault guard (CUBE_CPU_FAULT_GUARD) could not install its "
                             "SIGSEGV/SIGBUS handler: %s",
                             strerror(cube__guard_install_errno));
  cube__cpu_guard_t* g = calloc(1, sizeof(*g));
  if (!g)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "the CPU fault guard (CUBE_CPU_FAULT_GUARD): no memory for a "
                             "thread's guard");
  /* A signal stack, unless the thread has one already (the program's). */
  stack_t now;
  if (sigaltstack(NULL, &now) == 0 && (now.ss_flags & SS_DISABLE)) {
    g->altstack = malloc(CUBE__CPU_GUARD_STACK);
    if (!g->altstack) {
      free(g);
      return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                               "the CPU fault guard (CUBE_CPU_FAULT_GUARD): no memory for a "
                               "thread's signal stack of %u bytes",
                               CUBE__CPU_GUARD_STACK);
    }
    stack_t ss;
    memset(&ss, 0, sizeof(ss));
    ss.ss_sp = g->altstack;
    ss.ss_size = CUBE__CPU_GUARD_STACK;
    if (sigaltstack(&ss, NULL) != 0) {
      int e = errno;
      free(g->altstack);
      free(g);
      return cube__status_make(CUBE_STATUS_INTERNAL,
                               "the CPU fault guard (CUBE_CPU_FAULT_GUARD): sigaltstack: %s",
                               strerror(e));
    }
  }
  (void)pthread_setspecific(cube__guard_key, g);
  cube__guard_tls = g;
  *out = g;
  return CUBE_OK;
}
