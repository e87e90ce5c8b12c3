/* The compile time limit for in-process compilers (compile_limit.h). */
#include "kernel/compile_limit.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "base/options.h"
#include "base/status.h"

double cube__compile_limit_seconds(void) {
  if (!cube__option_has_value(CUBE__OPT_COMPILE_TIMEOUT)) return 0;
  return cube__option_seconds(CUBE__OPT_COMPILE_TIMEOUT);
}

/* One compile on its own thread; two owners (the caller and the thread),
 * the last one frees it. */
typedef struct cube__climit_job {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool done;
  bool abandoned;
  int refs;
  void (*run)(void*);
  void (*abandon)(void*);
  void* arg;
} cube__climit_job_t;

static pthread_mutex_t cube__climit_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cube__climit_idle = PTHREAD_COND_INITIALIZER;
static unsigned cube__climit_running; /* abandoned compiles not finished yet */

static void cube__climit_unref(cube__climit_job_t* j) {
  pthread_mutex_lock(&j->lock);
  bool last = --j->refs == 0;
  pthread_mutex_unlock(&j->lock);
  if (!last) return;
  pthread_cond_destroy(&j->cond);
  pthread_mutex_destroy(&j->lock);
  free(j);
}

static void* cube__climit_thread(void* p) {
  cube__climit_job_t* j = p;
  j->run(j->arg);
  pthread_mutex_lock(&j->lock);
  j->done = true;
  bool abandoned = j->abandoned;
  pthread_cond_broadcast(&j->cond);
  pthread_mutex_unlock(&j->lock);
  if (abandoned) {
    j->abandon(j->arg);
    pthread_mutex_lock(&cube__climit_lock);
    if (--cube__climit_running == 0) pthread_cond_broadcast(&cube__climit_idle);
    pthread_mutex_unlock(&cube__climit_lock);
  }
  cube__climit_unref(j);
  return NULL;
}

bool cube__compile_limit_run(void (*run)(void* arg), void (*abandon)(void* arg), void* arg,
                             double seconds) {
  if (!(seconds > 0)) {
    run(arg);
    return true;
  }
  cube__climit_job_t* j = calloc(1, sizeof(*j));
  if (!j) {
    run(arg);
    return true;
  }
  pthread_mutex_init(&j->lock, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&j->cond, &ca);
  pthread_condattr_destroy(&ca);
  j->refs = 2;
  j->run = run;
  j->abandon = abandon;
  j->arg = arg;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_t t;
  int e = pthread_create(&t, &attr, cube__climit_thread, j);
  pthread_attr_destroy(&attr);
  if (e) {
    pthread_cond_destroy(&j->cond);
    pthread_mutex_destroy(&j->lock);
    free(j);
    run(arg);
    return true;
  }
  struct timespec deadline;
  clock_gettime(CLOCK_MONOTONIC, &deadline);
  double whole = (double)(time_t)seconds;
  deadline.tv_sec += (time_t)seconds;
  deadline.tv_nsec += (long)((seconds - whole) * 1e9);
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec += 1;
    deadline.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&j->lock);
  while (!j->done) {
    int r = pthread_cond_timedwait(&j->cond, &j->lock, &deadline);
    if (r == ETIMEDOUT) break;
  }
  bool done = j->done;
  if (!done) {
    j->abandoned = true;
    /* Counted under the job's lock: the thread, which decrements, reads
     * |abandoned| under it after |run| returned. */
    pthread_mutex_lock(&cube__climit_lock);
    cube__climit_running++;
    pthread_mutex_unlock(&cube__climit_lock);
  }
  pthread_mutex_unlock(&j->lock);
  cube__climit_unref(j);
  return done;
}

cube_status_t cube__compile_limit_status(const char* kernel, const char* how, double seconds,
                                         const char* detail) {
  return cube__status_make(CUBE_STATUS_DEADLINE_EXCEEDED,
                           "compiling kernel '%s' with %s was stopped after the compile time "
                           "limit of %g s (CUBE_COMPILE_TIMEOUT)%s",
                           kernel, how, seconds, detail ? detail : "");
}

void cube__compile_limit_drain(void) {
  pthread_mutex_lock(&cube__climit_lock);
  while (cube__climit_running) pthread_cond_wait(&cube__climit_idle, &cube__climit_lock);
  pthread_mutex_unlock(&cube__climit_lock);
}

unsigned cube__compile_limit_running(void) {
  pthread_mutex_lock(&cube__climit_lock);
  unsigned n = cube__climit_running;
  pthread_mutex_unlock(&cube__climit_lock);
  return n;
}
