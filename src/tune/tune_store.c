/* Tuning records in the kernel cache directory (entries of kind "tune"):
 * one JSON document per (cube version, device identity, operation, its
 * version and candidates, key), written through the kernel cache's atomic
 * store. A record is used only when everything it says matches what the
 * process asks for; otherwise it is stale and the key is tuned again (and the
 * record replaced). */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "kernel/cache.h"
#include "tune/tune_internal.h"

#define CUBE__TUNE_FORMAT 1

static const char* const cube__tune_outcome_words[] = {"measured", "invalid", "wrong", "failed",
                                                       "eliminated", "not measured"};

/* "v0,v1,..." */
static void cube__tune_key_text(const cube_tune_key_t* key, char* out, size_t size) {
  size_t at = 0;
  out[0] = '\0';
  for (uint32_t i = 0; i < key->count && at < size; ++i)
    at += (size_t)snprintf(out + at, size - at, "%s%" PRIu64, i ? "," : "", key->values[i]);
}

cube__tune_disk_key_t cube__tune_disk_key(const cube_tune_op_t* op, const char* identity,
                                          const cube_tune_key_t* key) {
  char names[CUBE_TUNE_MAX_CANDIDATES * 100];
  size_t at = 0;
  names[0] = '\0';
  for (uint32_t i = 0; i < op->count && at < sizeof(names); ++i)
    at += (size_t)snprintf(names + at, sizeof(names) - at, "%s%s", i ? "," : "", op->cands[i].name);
  char keys[CUBE_TUNE_KEY_MAX * 24];
  cube__tune_key_text(key, keys, sizeof(keys));
  const char* parts[] = {"cube tune", CUBE_VERSION_STRING, identity, op->name, op->version,
                         names, keys, NULL};
  cube__cache_key_t k = cube__cache_key(parts);
  cube__tune_disk_key_t d = {k.hi, k.lo};
  return d;
}

cube_status_t cube__tune_store(const cube_tune_op_t* op, const char* identity,
                               const char* backend, cube__tune_disk_key_t dkey,
                               const cube_tune_record_t* rec) {
  cJSON* doc = cJSON_CreateObject();
  cJSON* cands = cJSON_CreateArray();
  cJSON* key = cJSON_CreateArray();
  cJSON* results = cJSON_CreateArray();
  if (!doc || !cands || !key || !results) {
    cJSON_Delete(doc);
    cJSON_Delete(cands);
    cJSON_Delete(key);
    cJSON_Delete(results);
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "tuning record: no host memory");
  }
  cJSON_AddNumberToObject(doc, "format", CUBE__TUNE_FORMAT);
  cJSON_AddStringToObject(doc, "cube", CUBE_VERSION_STRING);
  cJSON_AddStringToObject(doc, "device", identity);
  cJSON_AddStringToObject(doc, "op", op->name);
  cJSON_AddStringToObject(doc, "op_version", op->version);
  /* Key values as strings: a JSON number is a double (2^53). */
  for (uint32_t i = 0; i < rec->key.count; ++i) {
    char v[24];
    snprintf(v, sizeof(v), "%" PRIu64, rec->key.values[i]);
    cJSON_AddItemToArray(key, cJSON_CreateString(v));
  }
  cJSON_AddItemToObject(doc, "key", key);
  for (uint32_t i = 0; i < op->count; ++i)
    cJSON_AddItemToArray(cands, cJSON_CreateString(op->cands[i].name));
  cJSON_AddItemToObject(doc, "candidates", cands);
  cJSON_AddStringToObject(doc, "winner", op->cands[rec->winner].name);
  cJSON_AddStringToObject(doc, "timing", rec->timing == CUBE_TIMING_DEVICE ? "device" : "system");
  cJSON_AddNumberToObject(doc, "tuning_s", rec->tuning_s);
  for (uint32_t i = 0; i < rec->candidate_count; ++i) {
    const cube_tune_result_t* r = &rec->results[i];
    cJSON* o = cJSON_CreateObject();
    if (!o) continue;
    cJSON_AddStringToObject(o, "name", op->cands[i].name);
    cJSON_AddStringToObject(o, "outcome", cube__tune_outcome_words[r->outcome]);
    cJSON_AddNumberToObject(o, "samples", r->samples);
    cJSON_AddNumberToObject(o, "best_ns", r->best_ns);
    cJSON_AddNumberToObject(o, "median_ns", r->median_ns);
    cJSON_AddStringToObject(o, "reason", r->reason);
    cJSON_AddItemToArray(results, o);
  }
  cJSON_AddItemToObject(doc, "results", results);
  char* text = cJSON_PrintUnformatted(doc);
  cJSON_Delete(doc);
  if (!text) return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "tuning record: no host memory");
  cube__cache_key_t k = {dkey.hi, dkey.lo};
  const cube__cache_meta_t meta = {op->name, backend, identity};
  cube_status_t st = cube__cache_disk_store_meta(k, "tune", &meta, text, strlen(text));
  cJSON_free(text);
  return st;
}

static const char* cube__tune_str(const cJSON* o, const char* name) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, name);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool cube__tune_num(const cJSON* o, const char* name, double* out) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, name);
  if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return false;
  *out = v->valuedouble;
  return true;
}

static bool cube__tune_same_str(const cJSON* o, const char* name, const char* want, char* why,
                                size_t why_size) {
  const char* got = cube__tune_str(o, name);
  if (got && strcmp(got, want) == 0) return true;
  snprintf(why, why_size, "'%s' is %.60s%s%.60s, expected %.80s", name, got ? "\"" : "",
           got ? got : "missing", got ? "\"" : "", want);
  return false;
}

bool cube__tune_load(const cube_tune_op_t* op, const char* identity, const cube_tune_key_t* key,
                     cube__tune_disk_key_t dkey, cube_tune_record_t* out, char* why,
                     size_t why_size) {
  cube__cache_key_t k = {dkey.hi, dkey.lo};
  void* data = NULL;
  size_t size = 0;
  cube_status_t st = cube__cache_disk_load(k, "tune", &data, &size);
  if (st) {
    snprintf(why, why_size, "%s", cube_status_message(st));
    cube_status_free(st);
    return false;
  }
  cJSON* doc = cJSON_ParseWithLength(data, size);
  free(data);
  bool ok = false;
  memset(out, 0, sizeof(*out));
  out->struct_size = sizeof(*out);
  out->key = *key;
  out->candidate_count = op->count;
  double format = 0;
  if (!doc || !cJSON_IsObject(doc)) {
    snprintf(why, why_size, "not a JSON object");
    goto done;
  }
  if (!cube__tune_num(doc, "format", &format) || format != CUBE__TUNE_FORMAT) {
    snprintf(why, why_size, "format %g, expected %d", format, CUBE__TUNE_FORMAT);
    goto done;
  }
  if (!cube__tune_same_str(doc, "cube", CUBE_VERSION_STRING, why, why_size) ||
      !cube__tune_same_str(doc, "device", identity, why, why_size) ||
      !cube__tune_same_str(doc, "op", op->name, why, why_size) ||
      !cube__tune_same_str(doc, "op_version", op->version, why, why_size))
    goto done;
  const cJSON* keys = cJSON_GetObjectItemCaseSensitive(doc, "key");
  if (!cJSON_IsArray(keys) || cJSON_GetArraySize(keys) != (int)key->count) {
    snprintf(why, why_size, "the key has another length");
    goto done;
  }
  for (uint32_t i = 0; i < key->count; ++i) {
    const cJSON* v = cJSON_GetArrayItem(keys, (int)i);
    char want[24];
    snprintf(want, sizeof(want), "%" PRIu64, key->values[i]);
    if (!cJSON_IsString(v) || strcmp(v->valuestring, want) != 0) {
      snprintf(why, why_size, "key value %" PRIu32 " differs", i);
      goto done;
    }
  }
  const cJSON* cands = cJSON_GetObjectItemCaseSensitive(doc, "candidates");
  const cJSON* results = cJSON_GetObjectItemCaseSensitive(doc, "results");
  if (!cJSON_IsArray(cands) || cJSON_GetArraySize(cands) != (int)op->count ||
      !cJSON_IsArray(results) || cJSON_GetArraySize(results) != (int)op->count) {
    snprintf(why, why_size, "made for %d candidates, the operation has %" PRIu32,
             cJSON_IsArray(cands) ? cJSON_GetArraySize(cands) : -1, op->count);
    goto done;
  }
  const char* winner = cube__tune_str(doc, "winner");
  bool winner_found = false;
  for (uint32_t i = 0; i < op->count; ++i) {
    const cJSON* n = cJSON_GetArrayItem(cands, (int)i);
    const cJSON* r = cJSON_GetArrayItem(results, (int)i);
    if (!cJSON_IsString(n) || strcmp(n->valuestring, op->cands[i].name) != 0 ||
        !cJSON_IsObject(r) || !cube__tune_same_str(r, "name", op->cands[i].name, why, why_size)) {
      snprintf(why, why_size, "candidate %" PRIu32 " is not '%s'", i, op->cands[i].name);
      goto done;
    }
    cube_tune_result_t* res = &out->results[i];
    const char* outcome = cube__tune_str(r, "outcome");
    int oc = -1;
    for (int w = 0; outcome && w < 6; ++w)
      if (strcmp(outcome, cube__tune_outcome_words[w]) == 0) oc = w;
    double samples = 0;
    if (oc < 0 || !cube__tune_num(r, "samples", &samples) || samples < 0 || samples > 1e6 ||
        !cube__tune_num(r, "best_ns", &res->best_ns) ||
        !cube__tune_num(r, "median_ns", &res->median_ns)) {
      snprintf(why, why_size, "the result of candidate '%s' is malformed", op->cands[i].name);
      goto done;
    }
    res->outcome = (cube_tune_outcome_t)oc;
    res->samples = (uint32_t)samples;
    const char* reason = cube__tune_str(r, "reason");
    snprintf(res->reason, sizeof(res->reason), "%s", reason ? reason : "");
    if (winner && strcmp(winner, op->cands[i].name) == 0) {
      if (res->outcome != CUBE_TUNE_MEASURED) {
        snprintf(why, why_size, "its winner '%s' was not measured", winner);
        goto done;
      }
      out->winner = i;
      winner_found = true;
    }
  }
  if (!winner_found) {
    snprintf(why, why_size, "no winner among the candidates");
    goto done;
  }
  const char* timing = cube__tune_str(doc, "timing");
  out->timing = timing && strcmp(timing, "device") == 0 ? CUBE_TIMING_DEVICE : CUBE_TIMING_SYSTEM;
  if (!cube__tune_num(doc, "tuning_s", &out->tuning_s)) out->tuning_s = 0;
  out->origin = CUBE_TUNE_ORIGIN_DISK;
  ok = true;
done:
  cJSON_Delete(doc);
  return ok;
}
