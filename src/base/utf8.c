/* UTF-8 for JSON text (base/utf8.h). */
#include "base/utf8.h"

#include <string.h>

static bool cube__cont(unsigned char c) { return (c & 0xC0) == 0x80; }

size_t cube__utf8_seq(const unsigned char* s, size_t n) {
  if (n == 0) return 0;
  const unsigned char c = s[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;      /* not overlong */
    if (c == 0xED) hi = 0x9F;      /* not a surrogate */
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;      /* not overlong */
    if (c == 0xF4) hi = 0x8F;      /* not past U+10FFFF */
  } else {
    return 0;
  }
  if (n < len || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < len; ++i)
    if (!cube__cont(s[i])) return 0;
  return len;
}

bool cube__utf8_valid(const char* s) {
  if (!s) return true;
  const unsigned char* p = (const unsigned char*)s;
  size_t n = strlen(s);
  while (n) {
    size_t k = cube__utf8_seq(p, n);
    if (!k) return false;
    p += k;
    n -= k;
  }
  return true;
}

size_t cube__utf8_cut(const char* s, size_t n) {
  const unsigned char* p = (const unsigned char*)s;
  if (!cube__cont(p[n])) return n;
  /* Byte n continues a character: keep what is before its lead byte (at
   * most 3 bytes back; a run of stray continuation bytes is left as it is,
   * for cube__utf8_text to replace). */
  for (size_t back = 1; back <= 3 && back <= n; ++back)
    if (!cube__cont(p[n - back])) return p[n - back] >= 0xC0 ? n - back : n;
  return n;
}

const char* cube__utf8_text(const char* s, char* buf, size_t size) {
  if (!s) return "";
  if (cube__utf8_valid(s)) return s;
  const unsigned char* p = (const unsigned char*)s;
  size_t n = strlen(s), at = 0;
  while (n) {
    size_t k = cube__utf8_seq(p, n);
    const unsigned char* from = k ? p : (const unsigned char*)"\xEF\xBF\xBD";
    size_t len = k ? k : 3;
    if (at + len + 1 > size) break;
    memcpy(buf + at, from, len);
    at += len;
    p += k ? k : 1;
    n -= k ? k : 1;
  }
  buf[at] = '\0';
  return buf;
}
