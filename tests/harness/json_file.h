/* Tests that read a JSON file the library wrote (a trace, a memory
 * snapshot): the file parsed with cJSON, and typed reads of an object's
 * members. Header-only (static inline), for tests that link cJSON. */
#ifndef CUBE_TEST_JSON_FILE_H_
#define CUBE_TEST_JSON_FILE_H_

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Whether |n| bytes at |p| are UTF-8 as JSON requires (RFC 3629: each
 * character decoded to its code point, which must be in the shortest form,
 * not a surrogate and at most U+10FFFF); *bad_at is the first byte that is
 * not. Written apart from the library's checks (src/base/utf8.c), by
 * decoding rather than by byte ranges. */
static inline bool cube_test_utf8_ok(const unsigned char* p, size_t n, size_t* bad_at) {
  static const uint32_t shortest[5] = {0, 0, 0x80, 0x800, 0x10000};
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    const size_t len = c < 0x80 ? 1 : c >= 0xF8 ? 0 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    bool ok = len > 0 && i + len <= n;
    uint32_t cp = len == 1 ? c : c & (0x7Fu >> len);
    for (size_t k = 1; ok && k < len; ++k) {
      ok = (p[i + k] & 0xC0) == 0x80;
      cp = cp << 6 | (p[i + k] & 0x3Fu);
    }
    if (ok && len > 1) ok = cp >= shortest[len] && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF);
    if (!ok) {
      if (bad_at) *bad_at = i;
      return false;
    }
    i += len;
  }
  return true;
}

/* The document in |path| (the caller deletes it), or NULL; NULL too, with
 * a line on stderr, when the file is not UTF-8 (JSON text must be). */
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
  size_t bad = 0;
  if (!cube_test_utf8_ok((const unsigned char*)text, got, &bad)) {
    fprintf(stderr, "%s: not UTF-8 at byte %zu (0x%02x)\n", path, bad, (unsigned char)text[bad]);
    free(text);
    return NULL;
  }
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
