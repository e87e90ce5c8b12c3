/* Tunable operations (cube/tune.h): the operation objects, the table of
 * tuned keys (lock-free reads), launches, and what a launch does under an
 * execution override. The measuring is tune_measure.c, the records on disk
 * tune_store.c. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "base/options.h"
#include "base/status.h"
#include "client/policy.h"
#include "kernel/cache.h"
#include "tune/tune_internal.h"

//===----------------------------------------------------------------------===//
// Keys and anchoring
//===----------------------------------------------------------------------===//

uint64_t cube_tune_anchor(uint64_t value, uint64_t max) {
  if (max && value > max) value = max;
  if (value <= 1) return value;
  if (value > (UINT64_C(1) << 63)) return UINT64_C(1) << 63;
  return UINT64_C(1) << (64 - __builtin_clzll(value - 1));
}

static inline uint64_t cube__tune_hash(uint32_t device, const cube_tune_key_t* key) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ ((uint64_t)device << 32) ^ key->count;
  for (uint32_t i = 0; i < key->count; ++i) {
    h ^= key->values[i] + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ull;
  }
  h ^= h >> 31;
  return h ? h : 1;
}

static inline bool cube__tune_key_eq(const cube_tune_key_t* a, const cube_tune_key_t* b) {
  if (a->count != b->count) return false;
  for (uint32_t i = 0; i < a->count; ++i)
    if (a->values[i] != b->values[i]) return false;
  return true;
}

//===----------------------------------------------------------------------===//
// Operations
//===----------------------------------------------------------------------===//

void cube_tune_op_desc_initialize(cube_tune_op_desc_t* d) {
  if (!d) return;
  memset(d, 0, sizeof(*d));
  d->struct_size = sizeof(*d);
  d->reference = -1;
  d->compare = CUBE_TUNE_COMPARE_BYTES;
  d->rtol = 1e-5;
  d->mode = CUBE_EXEC_CHECKED;
}

static bool cube__tune_name_ok(const char* s) {
  if (!s || !*s || strlen(s) > 96) return false;
  for (const char* c = s; *c; ++c) {
    bool ok = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '_' || *c == '-' || *c == '.';
    if (!ok) return false;
  }
  return true;
}

static void cube__tune_op_free(cube_tune_op_t* op) {
  for (uint32_t i = 0; i < op->count; ++i) {
    free(op->cands[i].name);
    cube_kernel_release(op->cands[i].kernel);
  }
  cube__tune_table_t* t = atomic_load_explicit(&op->table, memory_order_relaxed);
  if (t) {
    for (size_t i = 0; i < t->cap; ++i)
      free(atomic_load_explicit(&t->slots[i], memory_order_relaxed));
    free(t);
  }
  while (op->retired) {
    cube__tune_table_t* next = op->retired->retired_next;
    free(op->retired);
    op->retired = next;
  }
  pthread_cond_destroy(&op->cond);
  pthread_mutex_destroy(&op->lock);
  free(op->name);
  free(op->version);
  free(op);
}

cube_status_t cube_tune_op_create(const cube_tune_op_desc_t* in_desc, cube_tune_op_t** out_op) {
  static const char fn[] = "cube_tune_op_create";
  if (!out_op) return CUBE_INVALID("%s: out_op is NULL", fn);
  if (!in_desc) return CUBE_INVALID("%s: desc is NULL", fn);
  cube_tune_op_desc_t read;
  cube_tune_op_desc_initialize(&read);
  CUBE_RETURN_IF_ERROR(
      cube__struct_read(fn, "desc->struct_size", &cube__struct_tune_op_desc, in_desc, &read));
  const cube_tune_op_desc_t* d = &read;
  if (!cube__tune_name_ok(d->name))
    return CUBE_INVALID("%s: desc->name '%s' is not 1 to 96 letters, digits, '_', '-' or '.'", fn,
                        d->name ? d->name : "(null)");
  const char* nm = d->name;
  if (!d->key) return CUBE_INVALID("%s: operation '%s': desc->key is NULL", fn, nm);
  if (!d->candidates) return CUBE_INVALID("%s: operation '%s': desc->candidates is NULL", fn, nm);
  if (d->candidate_count == 0 || d->candidate_count > CUBE_TUNE_MAX_CANDIDATES)
    return CUBE_INVALID("%s: operation '%s': desc->candidate_count is %" PRIu32
                        " (1 to %d)",
                        fn, nm, d->candidate_count, CUBE_TUNE_MAX_CANDIDATES);
  if (d->version && strlen(d->version) > 96)
    return CUBE_INVALID("%s: operation '%s': desc->version is longer than 96 bytes", fn, nm);
  for (uint32_t i = 0; i < d->candidate_count; ++i) {
    const cube_tune_candidate_t* c = &d->candidates[i];
    if (!cube__tune_name_ok(c->name))
      return CUBE_INVALID("%s: operation '%s': candidates[%" PRIu32
                          "].name '%s' is not 1 to 96 letters, digits, '_', '-' or '.'",
                          fn, nm, i, c->name ? c->name : "(null)");
    if (!c->kernel)
      return CUBE_INVALID("%s: operation '%s': candidates[%" PRIu32 "] ('%s') has no kernel", fn,
                          nm, i, c->name);
    if (!c->count)
      return CUBE_INVALID("%s: operation '%s': candidates[%" PRIu32
                          "] ('%s') has no count function",
                          fn, nm, i, c->name);
    for (uint32_t j = 0; j < i; ++j)
      if (strcmp(d->candidates[j].name, c->name) == 0)
        return CUBE_INVALID("%s: operation '%s': candidates[%" PRIu32 "] and [%" PRIu32
                            "] are both named '%s'",
                            fn, nm, j, i, c->name);
    const cube_kernel_t* k0 = d->candidates[0].kernel;
    uint32_t n0 = cube_kernel_arg_count(k0), ni = cube_kernel_arg_count(c->kernel);
    if (ni != n0)
      return CUBE_INVALID("%s: operation '%s': candidate '%s' takes %" PRIu32
                          " arguments, candidate '%s' %" PRIu32,
                          fn, nm, c->name, ni, d->candidates[0].name, n0);
    for (uint32_t a = 0; a < ni; ++a)
      if (cube_kernel_arg_kind(c->kernel, a) != cube_kernel_arg_kind(k0, a))
        return CUBE_INVALID("%s: operation '%s': argument %" PRIu32 " is %s in candidate '%s', "
                            "%s in '%s'",
                            fn, nm, a,
                            cube_arg_kind_name((cube_arg_kind_t)cube_kernel_arg_kind(c->kernel, a)),
                            c->name, cube_arg_kind_name((cube_arg_kind_t)cube_kernel_arg_kind(k0, a)),
                            d->candidates[0].name);
  }
  uint32_t nargs = cube_kernel_arg_count(d->candidates[0].kernel);
  if (d->reference < -1 || d->reference >= (int32_t)d->candidate_count)
    return CUBE_INVALID("%s: operation '%s': desc->reference is %" PRId32
                        " (-1, or a candidate index below %" PRIu32 ")",
                        fn, nm, d->reference, d->candidate_count);
  if (d->default_candidate >= d->candidate_count)
    return CUBE_INVALID("%s: operation '%s': desc->default_candidate is %" PRIu32
                        " (below %" PRIu32 ")",
                        fn, nm, d->default_candidate, d->candidate_count);
  if (d->reference >= 0 && !d->outputs)
    return CUBE_INVALID("%s: operation '%s': a reference candidate needs desc->outputs (the "
                        "arguments to compare)",
                        fn, nm);
  for (uint32_t a = 0; a < 64; ++a) {
    if (!(d->outputs >> a & 1)) continue;
    if (a >= nargs || cube_kernel_arg_kind(d->candidates[0].kernel, a) != CUBE_ARG_BUFFER)
      return CUBE_INVALID("%s: operation '%s': desc->outputs names argument %" PRIu32
                          ", which is not a buffer argument of its %" PRIu32 " arguments",
                          fn, nm, a, nargs);
  }
  if ((unsigned)d->compare > CUBE_TUNE_COMPARE_F64)
    return CUBE_INVALID("%s: operation '%s': desc->compare %d is not a cube_tune_compare_t", fn,
                        nm, (int)d->compare);
  if ((unsigned)d->mode > CUBE_EXEC_UNCHECKED)
    return CUBE_INVALID("%s: operation '%s': desc->mode %d is not an execution mode", fn, nm,
                        (int)d->mode);
  if (!(d->rtol >= 0) || !(d->atol >= 0) || !(d->budget_s >= 0) || isinf(d->budget_s))
    return CUBE_INVALID("%s: operation '%s': desc->rtol (%g), atol (%g) and budget_s (%g) must "
                        "be finite and not negative",
                        fn, nm, d->rtol, d->atol, d->budget_s);

  cube_tune_op_t* op = calloc(1, sizeof(*op));
  if (!op) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: no host memory", fn);
  atomic_init(&op->refs, 1);
  pthread_mutex_init(&op->lock, NULL);
  pthread_cond_init(&op->cond, NULL);
  op->name = strdup(d->name);
  op->version = strdup(d->version ? d->version : "");
  bool ok = op->name && op->version;
  for (uint32_t i = 0; ok && i < d->candidate_count; ++i) {
    const cube_tune_candidate_t* c = &d->candidates[i];
    op->cands[i].name = strdup(c->name);
    ok = op->cands[i].name != NULL;
    op->cands[i].kernel = cube_kernel_retain(c->kernel);
    op->cands[i].count = c->count;
    op->cands[i].valid = c->valid;
    op->cands[i].user = c->user;
    op->count = i + 1;
  }
  if (!ok) {
    cube__tune_op_free(op);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: operation '%s': no host memory", fn,
                             nm);
  }
  op->arg_count = nargs;
  for (uint32_t a = 0; a < nargs; ++a)
    op->arg_kinds[a] = (cube_arg_kind_t)cube_kernel_arg_kind(d->candidates[0].kernel, a);
  op->key = d->key;
  op->key_user = d->key_user;
  op->reference = d->reference;
  op->default_candidate = d->default_candidate;
  op->outputs = d->outputs;
  op->compare = d->compare;
  op->rtol = d->rtol;
  op->atol = d->atol;
  op->budget_s = d->budget_s;
  op->mode = d->mode;
  *out_op = op;
  return CUBE_OK;
}

cube_tune_op_t* cube_tune_op_retain(cube_tune_op_t* op) {
  if (op) atomic_fetch_add_explicit(&op->refs, 1, memory_order_relaxed);
  return op;
}

void cube_tune_op_release(cube_tune_op_t* op) {
  if (!op || atomic_fetch_sub_explicit(&op->refs, 1, memory_order_acq_rel) != 1) return;
  cube__tune_op_free(op);
}

const char* cube_tune_op_name(const cube_tune_op_t* op) { return op ? op->name : ""; }

const char* cube_tune_outcome_name(cube_tune_outcome_t o) {
  switch (o) {
    case CUBE_TUNE_MEASURED: return "measured";
    case CUBE_TUNE_INVALID: return "invalid";
    case CUBE_TUNE_WRONG: return "wrong";
    case CUBE_TUNE_FAILED: return "failed";
    case CUBE_TUNE_ELIMINATED: return "eliminated";
    case CUBE_TUNE_NOT_MEASURED: return "not measured";
  }
  return "unknown";
}

//===----------------------------------------------------------------------===//
// The table of tuned keys
//===----------------------------------------------------------------------===//

/* The probe, inlined into the launch's hit path; cube__tune_find for the
 * other callers. */
static inline cube__tune_entry_t* cube__tune_probe(cube_tune_op_t* op, uint64_t hash,
                                                   uint32_t device, const cube_tune_key_t* key) {
  cube__tune_table_t* t = atomic_load_explicit(&op->table, memory_order_acquire);
  if (!t) return NULL;
  for (size_t i = (size_t)hash & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
    cube__tune_entry_t* e = atomic_load_explicit(&t->slots[i], memory_order_acquire);
    if (!e) return NULL;
    if (e->hash == hash && e->device == device && cube__tune_key_eq(&e->key, key)) return e;
  }
}

cube__tune_entry_t* cube__tune_find(cube_tune_op_t* op, uint64_t hash, uint32_t device,
                                    const cube_tune_key_t* key) {
  return cube__tune_probe(op, hash, device, key);
}

static bool cube__tune_table_put(cube__tune_table_t* t, cube__tune_entry_t* e) {
  for (size_t i = (size_t)e->hash & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
    if (!atomic_load_explicit(&t->slots[i], memory_order_relaxed)) {
      atomic_store_explicit(&t->slots[i], e, memory_order_release);
      return true;
    }
  }
}

cube__tune_entry_t* cube__tune_publish(cube_tune_op_t* op, cube__tune_entry_t* e) {
  pthread_mutex_lock(&op->lock);
  cube__tune_entry_t* found = cube__tune_find(op, e->hash, e->device, &e->key);
  if (found) {
    pthread_mutex_unlock(&op->lock);
    free(e);
    return found;
  }
  cube__tune_table_t* t = atomic_load_explicit(&op->table, memory_order_relaxed);
  if (!t || (op->entries + 1) * 2 > t->cap) {
    size_t cap = t ? t->cap * 2 : 16;
    cube__tune_table_t* nt = calloc(1, sizeof(*nt) + cap * sizeof(nt->slots[0]));
    if (!nt) {
      /* Without memory the key stays untabled: the next launch looks again. */
      pthread_mutex_unlock(&op->lock);
      return e; /* the caller uses it for this launch, then frees it */
    }
    nt->cap = cap;
    for (size_t i = 0; t && i < t->cap; ++i) {
      cube__tune_entry_t* old = atomic_load_explicit(&t->slots[i], memory_order_relaxed);
      if (old) cube__tune_table_put(nt, old);
    }
    atomic_store_explicit(&op->table, nt, memory_order_release);
    if (t) {
      t->retired_next = op->retired;
      op->retired = t;
    }
    t = nt;
  }
  cube__tune_table_put(t, e);
  op->entries++;
  pthread_mutex_unlock(&op->lock);
  return e;
}

/* True when |e| is in the table (false: a table grown without memory). */
static bool cube__tune_tabled(cube_tune_op_t* op, cube__tune_entry_t* e) {
  return cube__tune_find(op, e->hash, e->device, &e->key) == e;
}

void cube__tune_rank(cube__tune_entry_t* e) {
  e->order_count = 0;
  const cube_tune_record_t* r = &e->record;
  for (uint32_t i = 0; i < r->candidate_count; ++i)
    if (r->results[i].outcome == CUBE_TUNE_MEASURED) e->order[e->order_count++] = i;
  /* Insertion sort by the median sample; ties keep the candidate order. */
  for (uint32_t i = 1; i < e->order_count; ++i)
    for (uint32_t j = i;
         j > 0 && r->results[e->order[j]].median_ns < r->results[e->order[j - 1]].median_ns;
         --j) {
      uint32_t t = e->order[j];
      e->order[j] = e->order[j - 1];
      e->order[j - 1] = t;
    }
  if (e->order_count) e->record.winner = e->order[0];
}

//===----------------------------------------------------------------------===//
// Choosing and launching
//===----------------------------------------------------------------------===//

static cube_status_t cube__tune_check_args(const char* fn, const cube_tune_op_t* op,
                                           size_t arg_count, const cube_arg_t* args) {
  if (arg_count != op->arg_count)
    return CUBE_INVALID("%s: operation '%s' takes %" PRIu32 " arguments, got %zu", fn, op->name,
                        op->arg_count, arg_count);
  if (arg_count && !args) return CUBE_INVALID("%s: operation '%s': args is NULL", fn, op->name);
  for (size_t i = 0; i < arg_count; ++i)
    if (args[i].kind != op->arg_kinds[i])
      return CUBE_INVALID("%s: operation '%s': argument %zu is %s, expected %s", fn, op->name, i,
                          cube_arg_kind_name(args[i].kind), cube_arg_kind_name(op->arg_kinds[i]));
  return CUBE_OK;
}

cube_status_t cube__tune_candidate_ok(cube_tune_op_t* op, uint32_t i,
                                      const cube_device_properties_t* props, size_t arg_count,
                                      const cube_arg_t* args, cube_count_t* out_count) {
  const cube__tune_cand_t* c = &op->cands[i];
  if (c->valid) {
    cube_status_t st = c->valid(c->user, props, arg_count, args);
    if (st) return st;
  }
  cube_dim_t d = cube_kernel_cube_dim(c->kernel);
  uint64_t units = (uint64_t)d.x * d.y * d.z;
  const uint32_t* maxd = props->hardware.max_cube_dim;
  if (d.x > maxd[0] || d.y > maxd[1] || d.z > maxd[2] || units > props->hardware.max_units_per_cube)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "cube dim (%" PRIu32 ", %" PRIu32 ", %" PRIu32 ") = %" PRIu64
                             " units is beyond %s (%" PRIu32 " units at most)",
                             d.x, d.y, d.z, units, props->name, props->hardware.max_units_per_cube);
  cube_count_t count;
  cube_status_t st = c->count(c->user, arg_count, args, &count);
  if (st) return cube__status_annotate(st, "its count function");
  if (out_count) *out_count = count;
  return CUBE_OK;
}

cube_status_t cube__tune_choose(cube_tune_op_t* op, const cube__tune_entry_t* e,
                                const cube_device_properties_t* props, size_t arg_count,
                                const cube_arg_t* args, uint32_t* out_index) {
  /* The measured ones, fastest first. */
  for (uint32_t k = 0; e && k < e->order_count; ++k) {
    uint32_t i = e->order[k];
    if (!op->cands[i].valid) {
      *out_index = i;
      return CUBE_OK;
    }
    cube_status_t st = op->cands[i].valid(op->cands[i].user, props, arg_count, args);
    if (!st) {
      *out_index = i;
      return CUBE_OK;
    }
    cube_status_free(st);
  }
  /* The default, then the first that can. */
  char why[1024];
  size_t at = 0;
  why[0] = '\0';
  for (uint32_t k = 0; k <= op->count; ++k) {
    uint32_t i = k == 0 ? op->default_candidate : k - 1;
    if (k > 0 && i == op->default_candidate) continue;
    cube_status_t st = cube__tune_candidate_ok(op, i, props, arg_count, args, NULL);
    if (!st) {
      *out_index = i;
      return CUBE_OK;
    }
    if (at < sizeof(why))
      at += (size_t)snprintf(why + at, sizeof(why) - at, "%s'%s': %s", at ? "; " : "",
                             op->cands[i].name, cube_status_message(st));
    cube_status_free(st);
  }
  return CUBE_INVALID("operation '%s': no candidate can run these arguments on %s (%s)", op->name,
                      props->name, why);
}

/* Launches candidate |i| on |args| through the public path (an override in
 * force applies to it). */
static cube_status_t cube__tune_launch_index(cube_tune_op_t* op, cube_client_t* c, uint32_t i,
                                             size_t arg_count, const cube_arg_t* args) {
  const cube__tune_cand_t* cand = &op->cands[i];
  cube_count_t count;
  cube_status_t st = cand->count(cand->user, arg_count, args, &count);
  if (st)
    return cube__status_annotate(st, "cube_tune_op_launch: operation '%s', candidate '%s'",
                                 op->name, cand->name);
  return cube_client_launch_mode(c, cand->kernel, count, arg_count, args, op->mode);
}

static uint32_t cube__tune_device(const cube_client_t* c) {
  cube_device_id_t id = cube_client_device(c);
  return (uint32_t)id.backend * 65536u + id.index;
}

/* Calls the key function. Only the key's first |count| values are written:
 * the values after them are indeterminate until cube__tune_obtain zeroes
 * them (the hit path neither reads nor copies them). */
static inline cube_status_t cube__tune_key_call(const char* fn, cube_tune_op_t* op,
                                                const cube_device_properties_t* props,
                                                size_t arg_count, const cube_arg_t* args,
                                                cube_tune_key_t* out_key) {
  out_key->count = 0;
  cube_status_t st = op->key(op->key_user, props, arg_count, args, out_key);
  if (st) return cube__status_annotate(st, "%s: operation '%s': the key function", fn, op->name);
  if (out_key->count > CUBE_TUNE_KEY_MAX)
    return CUBE_INVALID("%s: operation '%s': the key function gave %" PRIu32
                        " values (at most %d)",
                        fn, op->name, out_key->count, CUBE_TUNE_KEY_MAX);
  return CUBE_OK;
}

/* The key of |args|; checks the arguments first. */
static cube_status_t cube__tune_key_of(const char* fn, cube_tune_op_t* op, cube_client_t* c,
                                       size_t arg_count, const cube_arg_t* args,
                                       const cube_device_properties_t** out_props,
                                       cube_tune_key_t* out_key) {
  if (!op) return CUBE_INVALID("%s: op is NULL", fn);
  if (!c) return CUBE_INVALID("%s: client is NULL", fn);
  const cube_device_properties_t* props = cube_client_properties(c);
  if (!props)
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "%s: operation '%s': the client is from before cube_shutdown", fn,
                             op->name);
  CUBE_RETURN_IF_ERROR(cube__tune_check_args(fn, op, arg_count, args));
  *out_props = props;
  return cube__tune_key_call(fn, op, props, arg_count, args, out_key);
}

//===----------------------------------------------------------------------===//
// Tuning a key: memory, other threads, disk, other processes, measuring
//===----------------------------------------------------------------------===//

static cube__tune_inflight_t* cube__tune_inflight_find(cube_tune_op_t* op, uint64_t hash,
                                                       uint32_t device,
                                                       const cube_tune_key_t* key) {
  for (cube__tune_inflight_t* f = op->inflight; f; f = f->next)
    if (f->hash == hash && f->device == device && cube__tune_key_eq(&f->key, key)) return f;
  return NULL;
}

static cube__tune_entry_t* cube__tune_entry_new(uint64_t hash, uint32_t device,
                                                const cube_tune_key_t* key,
                                                const cube_tune_record_t* rec) {
  cube__tune_entry_t* e = calloc(1, sizeof(*e));
  if (!e) return NULL;
  e->hash = hash;
  e->device = device;
  e->key = *key;
  e->record = *rec;
  e->record.key = *key;
  cube__tune_rank(e);
  return e;
}

/* Compiles every candidate under |o|, counted (compile-only, and before a
 * tuning under any override). Failures are counted, not returned. */
static void cube__tune_compile_all(cube_tune_op_t* op, cube_client_t* c,
                                   cube_execution_override_t* o) {
  for (uint32_t i = 0; i < op->count; ++i)
    cube_status_free(cube__override_compile(o, c, op->cands[i].kernel, op->mode, NULL));
}

/* The entry of (device, key): from this process, from disk, or tuned now
 * (when |tune|). *out is NULL when not tuned and |tune| is false. |o| (may be
 * NULL) counts what happened. */
static cube_status_t cube__tune_obtain(cube_tune_op_t* op, cube_client_t* c, size_t arg_count,
                                       const cube_arg_t* args, uint32_t device,
                                       const cube_tune_key_t* key_in, uint64_t hash,
                                       bool tune, cube_execution_override_t* o, bool counted,
                                       cube__tune_entry_t** out) {
  *out = NULL;
  /* The key as it is kept and stored: the values after count are zero. */
  cube_tune_key_t key_copy = {key_in->count, {0}};
  memcpy(key_copy.values, key_in->values, key_in->count * sizeof(key_in->values[0]));
  const cube_tune_key_t* key = &key_copy;
  cube__tune_entry_t* e = cube__tune_find(op, hash, device, key);
  if (e) {
    if (o && counted) cube__override_count(o, CUBE__EXEC_KEY_LOADED);
    *out = e;
    return CUBE_OK;
  }
  /* One tuning per key in the process: the others wait for it. */
  pthread_mutex_lock(&op->lock);
  while (cube__tune_inflight_find(op, hash, device, key)) pthread_cond_wait(&op->cond, &op->lock);
  e = cube__tune_find(op, hash, device, key);
  cube__tune_inflight_t me = {hash, device, *key, NULL};
  if (!e) {
    me.next = op->inflight;
    op->inflight = &me;
  }
  pthread_mutex_unlock(&op->lock);
  if (e) {
    if (o && counted) cube__override_count(o, CUBE__EXEC_KEY_LOADED);
    *out = e;
    return CUBE_OK;
  }

  cube_status_t st = CUBE_OK;
  char identity[1024];
  cube_status_free(cube_client_device_identity(c, identity, sizeof(identity)));
  cube__tune_disk_key_t dkey = cube__tune_disk_key(op, identity, key);
  cube_tune_record_t* rec = calloc(1, sizeof(*rec));
  char why[256];
  if (!rec) {
    st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "cube_tune_op_launch: no host memory");
    goto done;
  }
  bool found = cube__tune_load(op, identity, key, dkey, rec, why, sizeof(why));
  if (!found && tune) {
    /* One tuning per key across processes: the others wait on the lock and
     * then find the record. Without a usable directory, no lock (and no
     * record) is needed. */
    cube__cache_lock_t lock = {-1};
    cube__cache_key_t lk = {dkey.hi, dkey.lo};
    cube_status_free(cube__cache_lock(lk, &lock));
    found = cube__tune_load(op, identity, key, dkey, rec, why, sizeof(why));
    if (!found) {
      if (o) cube__tune_compile_all(op, c, o);
      memset(rec, 0, sizeof(*rec));
      rec->struct_size = sizeof(*rec);
      rec->key = *key;
      st = cube__tune_measure(op, c, arg_count, args, rec);
      bool any = false;
      for (uint32_t i = 0; i < rec->candidate_count; ++i)
        any |= rec->results[i].outcome == CUBE_TUNE_MEASURED;
      if (!st && !any) {
        char list[1536];
        size_t at = 0;
        list[0] = '\0';
        for (uint32_t i = 0; i < rec->candidate_count && at < sizeof(list); ++i)
          at += (size_t)snprintf(list + at, sizeof(list) - at, "%s'%s' %s: %s", i ? "; " : "",
                                 op->cands[i].name,
                                 cube_tune_outcome_name(rec->results[i].outcome),
                                 rec->results[i].reason);
        st = cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                               "cube_tune_op_launch: operation '%s': tuning found no candidate "
                               "that runs and gives the reference's result (%s)",
                               op->name, list);
      }
      if (st) {
        if (o) cube__override_count(o, CUBE__EXEC_KEY_FAILED);
      } else {
        rec->origin = CUBE_TUNE_ORIGIN_TUNED;
        if (o) cube__override_count(o, CUBE__EXEC_KEY_TUNED);
        cube_device_id_t dev = cube_client_device(c);
        cube_status_t ss = cube__tune_store(op, identity, cube_backend_name(dev.backend), dkey, rec);
        if (!ss && o) cube__override_count(o, CUBE__EXEC_KEY_PERSISTED);
        cube_status_free(ss);
      }
    } else if (o) {
      cube__override_count(o, CUBE__EXEC_KEY_LOADED);
    }
    cube__cache_unlock(&lock);
  } else if (found && o) {
    cube__override_count(o, CUBE__EXEC_KEY_LOADED);
  }
  if (!st && found) rec->origin = CUBE_TUNE_ORIGIN_DISK;
  if (!st && (found || tune)) {
    e = cube__tune_entry_new(hash, device, key, rec);
    if (!e)
      st = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "cube_tune_op_launch: no host memory");
    else
      *out = cube__tune_publish(op, e);
  }
done:
  free(rec);
  pthread_mutex_lock(&op->lock);
  for (cube__tune_inflight_t** p = &op->inflight; *p; p = &(*p)->next) {
    if (*p == &me) {
      *p = me.next;
      break;
    }
  }
  pthread_cond_broadcast(&op->cond);
  pthread_mutex_unlock(&op->lock);
  return st;
}

static cube_status_t cube__tune_launch_general(cube_tune_op_t* op, cube_client_t* c,
                                               const cube_device_properties_t* props,
                                               size_t arg_count, const cube_arg_t* args,
                                               const cube_tune_key_t* key_in, uint32_t device,
                                               uint64_t hash, cube_execution_override_t* o);

cube_status_t cube_tune_op_launch(cube_tune_op_t* op, cube_client_t* c, size_t arg_count,
                                  const cube_arg_t* args) {
  static const char fn[] = "cube_tune_op_launch";
  const cube_device_properties_t* props;
  cube_tune_key_t key;
  cube_execution_override_t* o;
  /* The hit, in one frame: the arguments as declared, no override in force, a
   * key this device has tuned. A launch that fails a check here takes the
   * general path, which checks again and says why. */
  if (op && c && arg_count == op->arg_count && (args || !arg_count) &&
      !(o = cube__client_override(c)) && (props = cube_client_properties(c))) {
    bool kinds_ok = true;
    for (size_t a = 0; a < arg_count; ++a) kinds_ok &= args[a].kind == op->arg_kinds[a];
    if (kinds_ok) {
      CUBE_RETURN_IF_ERROR(cube__tune_key_call(fn, op, props, arg_count, args, &key));
      uint32_t device = cube__tune_device(c);
      uint64_t hash = cube__tune_hash(device, &key);
      cube__tune_entry_t* e = cube__tune_probe(op, hash, device, &key);
      if (e) {
        uint32_t i = e->order_count ? e->order[0] : op->default_candidate;
        cube__tune_cand_t* w = &op->cands[i];
        if (w->valid) {
          cube_status_t vs = w->valid(w->user, props, arg_count, args);
          if (vs) {
            cube_status_free(vs);
            CUBE_RETURN_IF_ERROR(cube__tune_choose(op, e, props, arg_count, args, &i));
            w = &op->cands[i];
          }
        }
        cube_count_t count;
        cube_status_t st = w->count(w->user, arg_count, args, &count);
        if (st)
          return cube__status_annotate(st, "%s: operation '%s', candidate '%s'", fn, op->name,
                                       w->name);
        return cube_client_launch_mode(c, w->kernel, count, arg_count, args, op->mode);
      }
      return cube__tune_launch_general(op, c, props, arg_count, args, &key, device, hash, NULL);
    }
  }
  CUBE_RETURN_IF_ERROR(cube__tune_key_of(fn, op, c, arg_count, args, &props, &key));
  uint32_t device = cube__tune_device(c);
  uint64_t hash = cube__tune_hash(device, &key);
  o = cube__client_override(c);
  if (!o) {
    cube__tune_entry_t* e = cube__tune_find(op, hash, device, &key);
    if (e) {
      uint32_t i = 0;
      CUBE_RETURN_IF_ERROR(cube__tune_choose(op, e, props, arg_count, args, &i));
      return cube__tune_launch_index(op, c, i, arg_count, args);
    }
  }
  return cube__tune_launch_general(op, c, props, arg_count, args, &key, device, hash, o);
}

/* cube_tune_op_launch past the hit: a key not tuned yet, an override in
 * force, tuning off. */
static cube_status_t cube__tune_launch_general(cube_tune_op_t* op, cube_client_t* c,
                                               const cube_device_properties_t* props,
                                               size_t arg_count, const cube_arg_t* args,
                                               const cube_tune_key_t* key_in, uint32_t device,
                                               uint64_t hash, cube_execution_override_t* o) {
  bool off = cube__option_enum(CUBE__OPT_TUNE) == 1;
  cube_execution_policy_t policy = o ? cube__override_policy(o) : CUBE_EXECUTION_RUN;
  bool counted = o ? cube__override_key(o, hash ^ (uint64_t)(uintptr_t)op) : false;
  if (policy == CUBE_EXECUTION_COMPILE_ONLY || (off && policy == CUBE_EXECUTION_COMPILE_AND_TUNE)) {
    cube__tune_compile_all(op, c, o);
    cube__override_count(o, CUBE__EXEC_LAUNCH_SKIPPED);
    return CUBE_OK;
  }
  cube__tune_entry_t* e = NULL;
  if (!off) {
    if (policy == CUBE_EXECUTION_COMPILE_AND_TUNE) cube__tune_compile_all(op, c, o);
    CUBE_RETURN_IF_ERROR(
        cube__tune_obtain(op, c, arg_count, args, device, key_in, hash, true, o, counted, &e));
  }
  if (policy == CUBE_EXECUTION_COMPILE_AND_TUNE) {
    cube__override_count(o, CUBE__EXEC_LAUNCH_SKIPPED);
    if (e && !cube__tune_tabled(op, e)) free(e);
    return CUBE_OK;
  }
  uint32_t i = 0;
  cube_status_t st = cube__tune_choose(op, e, props, arg_count, args, &i);
  if (!st) st = cube__tune_launch_index(op, c, i, arg_count, args);
  if (e && !cube__tune_tabled(op, e)) free(e);
  return st;
}

cube_status_t cube_tune_op_launch_candidate(cube_tune_op_t* op, cube_client_t* c, uint32_t index,
                                            size_t arg_count, const cube_arg_t* args) {
  static const char fn[] = "cube_tune_op_launch_candidate";
  if (!op) return CUBE_INVALID("%s: op is NULL", fn);
  if (!c) return CUBE_INVALID("%s: client is NULL", fn);
  const cube_device_properties_t* props = cube_client_properties(c);
  if (!props)
    return cube__status_make(CUBE_STATUS_FAILED_PRECONDITION,
                             "%s: operation '%s': the client is from before cube_shutdown", fn,
                             op->name);
  if (index >= op->count)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "%s: operation '%s' has %" PRIu32 " candidates, index %" PRIu32, fn,
                             op->name, op->count, index);
  CUBE_RETURN_IF_ERROR(cube__tune_check_args(fn, op, arg_count, args));
  cube_status_t st = cube__tune_candidate_ok(op, index, props, arg_count, args, NULL);
  if (st)
    return cube__status_annotate(st, "%s: operation '%s': candidate '%s' cannot run these "
                                     "arguments",
                                 fn, op->name, op->cands[index].name);
  return cube__tune_launch_index(op, c, index, arg_count, args);
}

cube_status_t cube_tune_op_record(cube_tune_op_t* op, cube_client_t* c, size_t arg_count,
                                  const cube_arg_t* args, cube_tune_record_t* out_record) {
  static const char fn[] = "cube_tune_op_record";
  CUBE__CHECK_OUT(out_record, fn, "out_record");
  const cube_device_properties_t* props;
  cube_tune_key_t key;
  CUBE_RETURN_IF_ERROR(cube__tune_key_of(fn, op, c, arg_count, args, &props, &key));
  uint32_t device = cube__tune_device(c);
  uint64_t hash = cube__tune_hash(device, &key);
  cube__tune_entry_t* e = NULL;
  CUBE_RETURN_IF_ERROR(
      cube__tune_obtain(op, c, arg_count, args, device, &key, hash, false, NULL, false, &e));
  if (!e)
    return cube__status_make(CUBE_STATUS_NOT_FOUND,
                             "%s: operation '%s': this key has not been tuned on %s", fn,
                             op->name, props->name);
  cube_status_t st = cube__struct_write(fn, "out_record->struct_size",
                                        &cube__struct_tune_record, out_record, &e->record);
  if (!cube__tune_tabled(op, e)) free(e);
  return st;
}
