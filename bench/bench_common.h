/* Shared by the benches in bench/: the clock, median/min over trials, and the
 * machine line of the header. Each bench is one C file including this. */
#ifndef CUBE_BENCH_COMMON_H_
#define CUBE_BENCH_COMMON_H_

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cube/status.h"

static inline uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define MAX_TRIALS 64

typedef struct stats {
  double median_us; /* per operation */
  double min_us;
  int trials;
  bool valid; /* false: not measured (system absent or failed) */
} stats_t;

/* One trial runs |iters| operations and returns its total time in ns. */
typedef uint64_t (*trial_fn)(void* ctx, uint64_t iters);

static inline int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static inline double median_sorted(const double* t, int n) {
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* |warmup| untimed trials, then |trials| timed ones: median and min per
 * operation in microseconds. */
static inline stats_t measure(trial_fn fn, void* ctx, uint64_t iters, int warmup, int trials) {
  double t[MAX_TRIALS];
  if (trials > MAX_TRIALS) trials = MAX_TRIALS;
  for (int i = 0; i < warmup; ++i) (void)fn(ctx, iters);
  for (int i = 0; i < trials; ++i) t[i] = (double)fn(ctx, iters) / 1000.0 / (double)iters;
  qsort(t, (size_t)trials, sizeof(double), cmp_double);
  stats_t s;
  s.trials = trials;
  s.min_us = t[0];
  s.median_us = median_sorted(t, trials);
  s.valid = true;
  return s;
}

/* "cube <name> (cube X)", then "machine: <CPU model>, N cores online, M usable"
 * and "date: ..." lines. */
static inline void print_machine(const char* bench, const char* version) {
  char model[256] = "unknown";
  FILE* f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof(line), f)) {
      if (strncmp(line, "model name", 10) != 0) continue;
      const char* v = strchr(line, ':');
      if (!v) continue;
      v++;
      while (*v == ' ' || *v == '\t') v++;
      snprintf(model, sizeof(model), "%.*s", (int)strcspn(v, "\n"), v);
      break;
    }
    fclose(f);
  }
  cpu_set_t set;
  int usable = -1;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) usable = CPU_COUNT(&set);
  char date[64];
  time_t t = time(NULL);
  struct tm tm;
  localtime_r(&t, &tm);
  strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S %Z", &tm);
  printf("cube %s (cube %s)\n", bench, version);
  printf("machine: %s, %ld cores online, %d usable by this process\n", model,
         sysconf(_SC_NPROCESSORS_ONLN), usable);
  printf("date: %s\n", date);
}

/* Failed calls are counted (the bench then exits 1) and printed with the
 * bench's name; define BENCH_NAME before including this header. */
/* Whether CUBE_BENCH_ONLY, a comma-separated list of section names, names
 * |section|; unset or empty: every section is wanted. */
static inline bool bench_wanted(const char* section) {
  const char* only = getenv("CUBE_BENCH_ONLY");
  if (!only || !*only) return true;
  size_t n = strlen(section);
  for (const char* p = only; *p;) {
    const char* comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len == n && strncmp(p, section, n) == 0) return true;
    if (!comma) break;
    p = comma + 1;
  }
  return false;
}

/* Whether CUBE_BENCH_ONLY is set to a list (a bench whose sections have no
 * names of their own runs them all unless it names one that it knows). */
static inline bool bench_only_set(void) {
  const char* only = getenv("CUBE_BENCH_ONLY");
  return only && *only;
}

#ifndef BENCH_NAME
#define BENCH_NAME "bench"
#endif
static int g_failures;

static inline void fail_status(const char* what, cube_status_t s) {
  fprintf(stderr, BENCH_NAME ": %s failed: [%s] %s\n", what,
          cube_status_code_name(cube_status_code(s)), cube_status_message(s));
  cube_status_free(s);
  g_failures++;
}

#define TRY(what, expr)                         \
  do {                                          \
    cube_status_t s_ = (expr);                  \
    if (s_ != CUBE_OK) fail_status((what), s_); \
  } while (0)

#endif /* CUBE_BENCH_COMMON_H_ */
