/* Tests that read a JSON file the library wrote (a trace, a memory
 * snapshot): the file parsed with cJSON, and typed reads of an object's
 * members. Header-only (static inline), for tests that link cJSON. */
#ifndef CUBE_TEST_JSON_FILE_H_
#define CUBE_TEST_JSON_FILE_H_

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

/* The document in |path| (the caller deletes it), or NULL. */
static inline cJSON* cube_test_json_load(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* text = n >= 0 ? malloc((size_t)n + 1) : NULL;
  size_t got = text ? fread(text, 1, (size_t)n, f) : 0;
  fclose(f);
  if (!text) return NULL;
  text[got] = 0;
  cJSON* doc = cJSON_Parse(text);
  free(text);
  return doc;
}

/* Member |key| of |o| as a number (-1 when it is not one). */
static inline double cube_test_json_num(const cJSON* o, const char* key) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsNumber(v) ? v->valuedouble : -1.0;
}

/* Member |key| of |o| as a string ("" when it is not one). */
static inline const char* cube_test_json_str(const cJSON* o, const char* key) {
  const cJSON* v = cJSON_GetObjectItemCaseSensitive(o, key);
  return cJSON_IsString(v) ? v->valuestring : "";
}

#endif /* CUBE_TEST_JSON_FILE_H_ */
