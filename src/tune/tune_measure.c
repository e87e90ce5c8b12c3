/* One tuning (cube/tune.h, docs/autotune.md "How a key is tuned"):
 *  1. the stream's earlier work is synced (its deferred errors are the
 *     caller's, not a candidate's);
 *  2. each candidate's validity (its check, the device's limits, its count);
 *  3. scratch copies of the outputs: a pristine copy of each output's content
 *     and a working buffer the candidates write, refreshed from the pristine
 *     copy before each checked run (in-place operations read what the caller
 *     had);
 *  4. the reference candidate runs once, its outputs are read;
 *  5. every other candidate runs once (which also compiles it and warms it),
 *     its outputs compared with the reference's: a difference rejects it;
 *  6. rounds of timed samples (cube_client_profile around a batch of
 *     launches, so that a sample lasts about 2 ms: the device's timing, not
 *     the bracket's, dominates), round-robin over the candidates left;
 *     after each round a candidate whose fastest sample is more than 3x (after
 *     one sample) or 1.5x (after two or more) the fastest candidate's is
 *     eliminated; the rounds stop after CUBE__TUNE_SAMPLES samples or at the
 *     budget, which is checked from the second round on (every candidate
 *     left after the checks has at least one sample);
 *  7. a close finish: when several candidates' median samples are within
 *     5 % of the fastest median, up to CUBE__TUNE_FINISH_ROUNDS more rounds
 *     over those only (rotated order, within the budget), so that a choice
 *     between near-equals rests on more samples than the noise between two.
 * The winner is the candidate with the fastest median sample (tune.c ranks
 * the record the same way). */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "base/status.h"
#include "client/policy.h"
#include "platform/platform.h"
#include "tune/tune_internal.h"

#define CUBE__TUNE_SAMPLES 7         /* timed samples per candidate in step 6 at most */
#define CUBE__TUNE_FINISH_ROUNDS 8   /* more samples of each close contender at most */
#define CUBE__TUNE_FINISH_WITHIN 1.05 /* a close contender: median within 5 % of the fastest */
#define CUBE__TUNE_SAMPLE_NS 2000000 /* a sample's target length */
#define CUBE__TUNE_BATCH_MAX 1024    /* launches per sample at most (a 2 us kernel: 2 ms) */

typedef struct cube__tune_state {
  cube_tune_op_t* op;
  cube_client_t* c;
  size_t n;
  const cube_arg_t* args;  /* the caller's */
  cube_arg_t cargs[CUBE_MAX_KERNEL_ARGS]; /* with the working outputs */
  cube_handle_t pristine[CUBE_MAX_KERNEL_ARGS];
  cube_handle_t work[CUBE_MAX_KERNEL_ARGS];
  cube_count_t counts[CUBE_TUNE_MAX_CANDIDATES];
  bool alive[CUBE_TUNE_MAX_CANDIDATES];
} cube__tune_state_t;

static void cube__tune_reason(cube_tune_result_t* r, cube_tune_outcome_t outcome,
                              const char* fmt, ...) CUBE_PRINTF(3, 4);
static void cube__tune_reason(cube_tune_result_t* r, cube_tune_outcome_t outcome,
                              const char* fmt, ...) {
  r->outcome = outcome;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r->reason, sizeof(r->reason), fmt, ap);
  va_end(ap);
}

/* Refreshes the working outputs from the pristine copies (queued). */
static cube_status_t cube__tune_restore(cube__tune_state_t* s) {
  for (size_t j = 0; j < s->n; ++j) {
    if (!s->work[j].id) continue;
    CUBE_RETURN_IF_ERROR(cube_client_copy(s->c, s->pristine[j], s->work[j]));
  }
  return CUBE_OK;
}

static cube_status_t cube__tune_launch(cube__tune_state_t* s, uint32_t i) {
  return cube__client_launch_direct(s->c, s->op->cands[i].kernel, s->counts[i], s->n, s->cargs,
                                    s->op->mode);
}

/* Runs candidate |i| once on fresh outputs and waits. */
static cube_status_t cube__tune_run_once(cube__tune_state_t* s, uint32_t i) {
  CUBE_RETURN_IF_ERROR(cube__tune_restore(s));
  cube_status_t st = cube__tune_launch(s, i);
  cube_status_t sy = cube_client_sync(s->c);
  if (st) {
    cube_status_free(sy);
    return st;
  }
  return sy;
}

/* The outputs as they are now, one buffer per output argument. */
static cube_status_t cube__tune_read_outputs(cube__tune_state_t* s, cube_bytes_t** out) {
  for (size_t j = 0; j < s->n; ++j) {
    out[j] = NULL;
    if (!s->work[j].id) continue;
    cube_status_t st = cube__client_read_direct(s->c, s->work[j], &out[j]);
    if (st) {
      for (size_t k = 0; k < j; ++k) cube_bytes_release(out[k]);
      return st;
    }
  }
  return CUBE_OK;
}

/* Whether |got| matches |ref| (output argument |arg|); the first difference
 * in |why| otherwise. */
static bool cube__tune_same(const cube_tune_op_t* op, uint32_t arg, const cube_bytes_t* got,
                            const cube_bytes_t* ref, char* why, size_t why_size) {
  size_t n = cube_bytes_size(ref);
  if (cube_bytes_size(got) != n) {
    snprintf(why, why_size, "output argument %" PRIu32 " holds %zu bytes, the reference's %zu",
             arg, cube_bytes_size(got), n);
    return false;
  }
  const unsigned char* g = cube_bytes_const_data(got);
  const unsigned char* r = cube_bytes_const_data(ref);
  size_t esize = op->compare == CUBE_TUNE_COMPARE_F32 ? 4 : op->compare == CUBE_TUNE_COMPARE_F64 ? 8 : 1;
  for (size_t k = 0; k + esize <= n; k += esize) {
    double a, b;
    if (esize == 1) {
      if (g[k] == r[k]) continue;
      snprintf(why, why_size,
               "output argument %" PRIu32 ", byte %zu: 0x%02x where the reference gives 0x%02x",
               arg, k, g[k], r[k]);
      return false;
    }
    if (esize == 4) {
      float fa, fb;
      memcpy(&fa, g + k, 4);
      memcpy(&fb, r + k, 4);
      a = fa;
      b = fb;
    } else {
      memcpy(&a, g + k, 8);
      memcpy(&b, r + k, 8);
    }
    bool ok = (isnan(a) && isnan(b)) || a == b ||
              (!isnan(a) && !isnan(b) && fabs(a - b) <= op->atol + op->rtol * fabs(b));
    if (ok) continue;
    snprintf(why, why_size,
             "output argument %" PRIu32 ", element %zu: %.9g where the reference gives %.9g "
             "(tolerance %g + %g x |reference|)",
             arg, k / esize, a, b, op->atol, op->rtol);
    return false;
  }
  return true;
}

typedef struct cube__tune_batch {
  cube__tune_state_t* s;
  uint32_t i;
  uint32_t launches;
} cube__tune_batch_t;

static cube_status_t cube__tune_batch_run(void* p) {
  cube__tune_batch_t* b = p;
  for (uint32_t k = 0; k < b->launches; ++k) CUBE_RETURN_IF_ERROR(cube__tune_launch(b->s, b->i));
  return CUBE_OK;
}

static int cube__tune_cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* One timed sample of candidate |i|: a batch of |launches| inside
 * cube_client_profile, per launch, appended to |samples|. False (the
 * candidate failed and is out, with its reason) on a failure. */
static bool cube__tune_sample(cube__tune_state_t* s, cube_tune_record_t* rec, uint32_t i,
                              uint32_t launches, double* samples, double* out_per) {
  cube__tune_batch_t b = {s, i, launches};
  cube_profile_duration_t d;
  cube_status_t st = cube_client_profile(s->c, cube__tune_batch_run, &b, NULL, &d);
  if (st) {
    cube__tune_reason(&rec->results[i], CUBE_TUNE_FAILED, "%s", cube_status_message(st));
    cube_status_free(st);
    s->alive[i] = false;
    return false;
  }
  *out_per = (double)cube_profile_duration_ns(&d) / (double)b.launches;
  rec->timing = d.method;
  samples[rec->results[i].samples++] = *out_per;
  return true;
}

/* Each candidate's fastest and median sample from |samples| (left as they
 * were: a copy is sorted). */
static void cube__tune_summarise(const cube__tune_state_t* s, cube_tune_record_t* rec,
                                 double samples[][CUBE__TUNE_SAMPLES + CUBE__TUNE_FINISH_ROUNDS]) {
  for (uint32_t i = 0; i < s->op->count; ++i) {
    cube_tune_result_t* res = &rec->results[i];
    uint32_t n = res->samples;
    if (!n) continue;
    double sorted[CUBE__TUNE_SAMPLES + CUBE__TUNE_FINISH_ROUNDS];
    memcpy(sorted, samples[i], n * sizeof(double));
    qsort(sorted, n, sizeof(double), cube__tune_cmp);
    res->best_ns = sorted[0];
    res->median_ns = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  }
}

static void cube__tune_free_scratch(cube__tune_state_t* s) {
  for (size_t j = 0; j < s->n; ++j) {
    if (s->pristine[j].id) cube_handle_release(s->pristine[j]);
    if (s->work[j].id) cube_handle_release(s->work[j]);
  }
}

cube_status_t cube__tune_measure(cube_tune_op_t* op, cube_client_t* c, size_t n,
                                 const cube_arg_t* args, cube_tune_record_t* rec) {
  const cube_device_properties_t* props = cube_client_properties(c);
  rec->candidate_count = op->count;
  rec->timing = props->timing_method;
  double budget = op->budget_s > 0 ? op->budget_s : cube__option_seconds(CUBE__OPT_TUNE_BUDGET);
  /* 1. Earlier work's failures are the caller's. */
  CUBE_RETURN_IF_ERROR(cube_client_sync(c));

  cube__tune_state_t* s = calloc(1, sizeof(*s));
  if (!s) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "tuning: no host memory");
  s->op = op;
  s->c = c;
  s->n = n;
  s->args = args;
  memcpy(s->cargs, args, n * sizeof(*args));

  /* 2. Who can run these arguments. */
  uint32_t valid = 0;
  for (uint32_t i = 0; i < op->count; ++i) {
    cube_status_t st = cube__tune_candidate_ok(op, i, props, n, args, &s->counts[i]);
    if (st) {
      cube__tune_reason(&rec->results[i], CUBE_TUNE_INVALID, "%s", cube_status_message(st));
      cube_status_free(st);
      continue;
    }
    s->alive[i] = true;
    valid++;
  }

  /* 3. Scratch outputs; an argument that is the same buffer view as an
   * output is substituted with it. */
  cube_status_t fail = CUBE_OK;
  for (size_t j = 0; valid && j < n && !fail; ++j) {
    if (!(op->outputs >> j & 1)) continue;
    uint64_t size = cube_handle_size(args[j].v.buffer);
    fail = cube_client_empty(c, (size_t)size, &s->pristine[j]);
    if (!fail) fail = cube_client_empty(c, (size_t)size, &s->work[j]);
    if (!fail) fail = cube_client_copy(c, args[j].v.buffer, s->pristine[j]);
    if (fail) break;
    for (size_t k = 0; k < n; ++k)
      if (args[k].kind == CUBE_ARG_BUFFER && args[k].v.buffer.id == args[j].v.buffer.id)
        s->cargs[k].v.buffer = s->work[j];
  }
  if (fail) {
    cube__tune_free_scratch(s);
    free(s);
    return cube__status_annotate(fail, "tuning operation '%s': scratch outputs", op->name);
  }

  /* 4. The reference's outputs. */
  cube_bytes_t* ref[CUBE_MAX_KERNEL_ARGS] = {0};
  bool have_ref = false;
  int32_t r = op->reference;
  if (r >= 0 && s->alive[r]) {
    cube_status_t st = cube__tune_run_once(s, (uint32_t)r);
    if (!st) st = cube__tune_read_outputs(s, ref);
    if (st) {
      cube__tune_reason(&rec->results[r], CUBE_TUNE_FAILED, "%s", cube_status_message(st));
      cube_status_free(st);
      s->alive[r] = false;
    } else {
      have_ref = true;
    }
  }

  /* 5. Each other candidate once: compiled, warm, checked. */
  for (uint32_t i = 0; i < op->count; ++i) {
    if (!s->alive[i] || (int32_t)i == r) continue;
    cube_status_t st = cube__tune_run_once(s, i);
    if (st) {
      cube__tune_reason(&rec->results[i], CUBE_TUNE_FAILED, "%s", cube_status_message(st));
      cube_status_free(st);
      s->alive[i] = false;
      continue;
    }
    if (!have_ref) continue;
    cube_bytes_t* got[CUBE_MAX_KERNEL_ARGS] = {0};
    st = cube__tune_read_outputs(s, got);
    if (st) {
      cube__tune_reason(&rec->results[i], CUBE_TUNE_FAILED, "reading its outputs: %s",
                        cube_status_message(st));
      cube_status_free(st);
      s->alive[i] = false;
      continue;
    }
    char why[192] = "";
    for (size_t j = 0; j < n && s->alive[i]; ++j) {
      if (!ref[j]) continue;
      if (!cube__tune_same(op, (uint32_t)j, got[j], ref[j], why, sizeof(why))) {
        cube__tune_reason(&rec->results[i], CUBE_TUNE_WRONG, "%s (reference '%s')", why,
                          op->cands[r].name);
        s->alive[i] = false;
      }
    }
    cube_bytes_release_array(got, n);
  }
  cube_bytes_release_array(ref, n);

  /* 6. Timed rounds. */
  double samples[CUBE_TUNE_MAX_CANDIDATES][CUBE__TUNE_SAMPLES + CUBE__TUNE_FINISH_ROUNDS];
  uint32_t batch[CUBE_TUNE_MAX_CANDIDATES];
  for (uint32_t i = 0; i < op->count; ++i) batch[i] = 1;
  uint64_t t0 = cube__now_ns();
  bool out_of_time = false;
  bool any_sample = false;
  for (uint32_t round = 0; round < CUBE__TUNE_SAMPLES && !out_of_time; ++round) {
    uint32_t left = 0;
    for (uint32_t i = 0; i < op->count && !out_of_time; ++i) {
      if (!s->alive[i]) continue;
      /* The first round always completes: a winner chosen from part of the
       * candidates (the ones measured before a budget shorter than one
       * sample ran out) can be several times slower than the best, and it
       * is kept on disk. The budget stops the later rounds. */
      if (round > 0 && any_sample && (double)(cube__now_ns() - t0) > budget * 1e9) {
        out_of_time = true;
        break;
      }
      double per;
      if (!cube__tune_sample(s, rec, i, batch[i], samples[i], &per)) continue;
      any_sample = true;
      left++;
      if (round == 0) {
        /* A sample of about CUBE__TUNE_SAMPLE_NS from now on. */
        double want = per > 0 ? ceil(CUBE__TUNE_SAMPLE_NS / per) : CUBE__TUNE_BATCH_MAX;
        batch[i] = want < 1 ? 1 : want > CUBE__TUNE_BATCH_MAX ? CUBE__TUNE_BATCH_MAX : (uint32_t)want;
      }
    }
    /* Early elimination against the fastest so far. */
    double best = INFINITY;
    for (uint32_t i = 0; i < op->count; ++i) {
      if (!s->alive[i] || !rec->results[i].samples) continue;
      double m = samples[i][0];
      for (uint32_t k = 1; k < rec->results[i].samples; ++k) m = fmin(m, samples[i][k]);
      rec->results[i].best_ns = m;
      best = fmin(best, m);
    }
    double factor = round == 0 ? 3.0 : 1.5;
    for (uint32_t i = 0; i < op->count && left > 1; ++i) {
      if (!s->alive[i] || !rec->results[i].samples) continue;
      if (rec->results[i].best_ns > factor * best) {
        s->alive[i] = false;
        cube__tune_reason(&rec->results[i], CUBE_TUNE_ELIMINATED,
                          "%.3g x the fastest after %" PRIu32 " sample%s (limit %.1f x)",
                          rec->results[i].best_ns / best, rec->results[i].samples,
                          rec->results[i].samples == 1 ? "" : "s", factor);
      }
    }
  }
  cube__tune_summarise(s, rec, samples);

  /* 7. The close finish. */
  double fastest = INFINITY;
  for (uint32_t i = 0; i < op->count; ++i)
    if (s->alive[i] && rec->results[i].samples) fastest = fmin(fastest, rec->results[i].median_ns);
  uint32_t close[CUBE_TUNE_MAX_CANDIDATES], nclose = 0;
  for (uint32_t i = 0; i < op->count; ++i)
    if (s->alive[i] && rec->results[i].samples &&
        rec->results[i].median_ns <= CUBE__TUNE_FINISH_WITHIN * fastest)
      close[nclose++] = i;
  for (uint32_t round = 0; nclose > 1 && !out_of_time && round < CUBE__TUNE_FINISH_ROUNDS;
       ++round) {
    for (uint32_t k = 0; k < nclose; ++k) {
      if ((double)(cube__now_ns() - t0) > budget * 1e9) {
        out_of_time = true;
        break;
      }
      uint32_t i = close[(k + round) % nclose];
      double per;
      if (!s->alive[i]) continue;
      (void)cube__tune_sample(s, rec, i, batch[i], samples[i], &per);
    }
  }
  cube__tune_summarise(s, rec, samples);
  rec->tuning_s = (double)(cube__now_ns() - t0) / 1e9;
  for (uint32_t i = 0; i < op->count; ++i) {
    cube_tune_result_t* res = &rec->results[i];
    if (res->samples) {
      if (s->alive[i]) res->outcome = CUBE_TUNE_MEASURED;
    } else if (s->alive[i]) {
      cube__tune_reason(res, CUBE_TUNE_NOT_MEASURED, "the budget of %g s ran out before its turn",
                        budget);
    }
  }
  /* The winner: the fastest median sample (tune.c ranks the record). */
  uint32_t w = op->default_candidate;
  double wbest = INFINITY;
  for (uint32_t i = 0; i < op->count; ++i)
    if (rec->results[i].outcome == CUBE_TUNE_MEASURED && rec->results[i].median_ns < wbest)
      w = i, wbest = rec->results[i].median_ns;
  rec->winner = w;
  cube__tune_free_scratch(s);
  free(s);
  return CUBE_OK;
}
