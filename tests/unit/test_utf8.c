// cube-test-libs: cube_static PkgConfig::CJSON
/* UTF-8 for the JSON cube writes (src/base/utf8.h): which sequences are
 * well formed (RFC 3629's table, edge by edge), cutting a name between
 * characters, and the copy in which every byte that is not UTF-8 is U+FFFD;
 * then random bytes, checked against the decoder of tests/harness/json_file.h
 * (written apart, by decoding). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/utf8.h"
#include "check.h"
#include "json_file.h"

static size_t seq(const char* s) { return cube__utf8_seq((const unsigned char*)s, strlen(s)); }

CUBE_TEST(sequences_at_their_edges) {
  static const struct {
    const char* s;
    size_t len;
  } v[] = {
      {"A", 1},
      {"\x7F", 1},
      {"\xC2\x80", 2},          /* U+0080 */
      {"\xDF\xBF", 2},          /* U+07FF */
      {"\xC0\xAF", 0},          /* overlong '/' */
      {"\xC1\xBF", 0},          /* overlong */
      {"\xE0\xA0\x80", 3},      /* U+0800 */
      {"\xE0\x9F\xBF", 0},      /* overlong */
      {"\xED\x9F\xBF", 3},      /* U+D7FF */
      {"\xED\xA0\x80", 0},      /* U+D800, a surrogate */
      {"\xED\xBF\xBF", 0},      /* U+DFFF */
      {"\xEE\x80\x80", 3},      /* U+E000 */
      {"\xEF\xBF\xBF", 3},      /* U+FFFF */
      {"\xF0\x90\x80\x80", 4},  /* U+10000 */
      {"\xF0\x8F\xBF\xBF", 0},  /* overlong */
      {"\xF4\x8F\xBF\xBF", 4},  /* U+10FFFF */
      {"\xF4\x90\x80\x80", 0},  /* past U+10FFFF */
      {"\xF5\x80\x80\x80", 0},
      {"\xFF", 0},
      {"\x80", 0},              /* a continuation alone */
      {"\xC3", 0},              /* cut short */
      {"\xE6\xB8", 0},
      {"\xF0\x9F\x98", 0},
      {"\xC3\x41", 0},          /* not a continuation */
  };
  for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); ++i) {
    if (seq(v[i].s) != v[i].len) fprintf(stderr, "vector %zu\n", i);
    CHECK_EQ_U64(seq(v[i].s), v[i].len);
    CHECK(cube__utf8_valid(v[i].s) == (v[i].len == strlen(v[i].s)));
    size_t bad;
    CHECK(cube_test_utf8_ok((const unsigned char*)v[i].s, strlen(v[i].s), &bad) ==
          (v[i].len == strlen(v[i].s)));
  }
  CHECK(cube__utf8_valid(NULL));
  CHECK(cube__utf8_valid(""));
  CHECK_EQ_U64(cube__utf8_seq((const unsigned char*)"A", 0), 0);
}

CUBE_TEST(cut_between_characters) {
  const char* s = "ab\xC3\xA9\xE6\xB8\xA9\xF0\x9F\x98\x80z"; /* a b é 温 😀 z */
  /* Every cut keeps whole characters: the character that byte n falls in
   * is left out when it began before n. */
  static const size_t want[] = {0, 1, 2, 2, 4, 4, 4, 7, 7, 7, 7, 11, 12};
  for (size_t n = 0; n <= strlen(s); ++n) {
    CHECK_EQ_U64(cube__utf8_cut(s, n), want[n]);
    char part[16];
    memcpy(part, s, cube__utf8_cut(s, n));
    part[cube__utf8_cut(s, n)] = '\0';
    CHECK(cube__utf8_valid(part));
  }
  /* Stray continuation bytes after ASCII are left for the cleaning copy. */
  CHECK_EQ_U64(cube__utf8_cut("a\x80\x80", 2), 2);
}

CUBE_TEST(text_replaces_what_is_not_utf8) {
  char buf[64];
  const char* ok = "\xE6\xB8\xA9\xE5\xBA\xA6 fine";
  CHECK(cube__utf8_text(ok, buf, sizeof(buf)) == ok); /* no copy */
  CHECK(strcmp(cube__utf8_text(NULL, buf, sizeof(buf)), "") == 0);
  CHECK(strcmp(cube__utf8_text("a\xFF" "b", buf, sizeof(buf)), "a\xEF\xBF\xBD" "b") == 0);
  /* A sequence cut short: each byte that starts none is one U+FFFD. */
  CHECK(strcmp(cube__utf8_text("x\xE6\xB8", buf, sizeof(buf)), "x\xEF\xBF\xBD\xEF\xBF\xBD") == 0);
  CHECK(strcmp(cube__utf8_text("\xED\xA0\x80", buf, sizeof(buf)),
               "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD") == 0);
  /* Kept valid UTF-8 next to replaced bytes. */
  CHECK(strcmp(cube__utf8_text("\xC3\xA9\x80\xC3\xA9", buf, sizeof(buf)),
               "\xC3\xA9\xEF\xBF\xBD\xC3\xA9") == 0);
  /* A small buffer ends before the first character that does not fit. */
  char small[6];
  CHECK(strcmp(cube__utf8_text("ab\xFF\xFF", small, sizeof(small)), "ab\xEF\xBF\xBD") == 0);
  CHECK(strcmp(cube__utf8_text("\xFF" "abcdef", small, 4), "\xEF\xBF\xBD") == 0);
}

CUBE_TEST(random_bytes_come_out_utf8) {
  /* A seed that differs between runs, printed (CUBE_TEST_SEED replays it). */
  const char* fixed = getenv("CUBE_TEST_SEED");
  uint64_t seed = fixed ? strtoull(fixed, NULL, 10)
                        : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
  fprintf(stderr, "seed %llu\n", (unsigned long long)seed);
  seed |= 1;
  char in[48], buf[3 * sizeof(in) + 1];
  for (int round = 0; round < 20000; ++round) {
    size_t n = cube_test_rand(&seed) % (sizeof(in) - 1);
    for (size_t i = 0; i < n; ++i) {
      /* Mostly bytes of UTF-8's lead and continuation ranges. */
      uint64_t r = cube_test_rand(&seed);
      in[i] = (char)(r % 3 == 0 ? 0x80 + (r >> 8) % 64 : 1 + (r >> 8) % 255);
    }
    in[n] = '\0';
    n = strlen(in);
    const char* out = cube__utf8_text(in, buf, sizeof(buf));
    size_t bad;
    CHECK(cube_test_utf8_ok((const unsigned char*)out, strlen(out), &bad));
    const bool valid = cube_test_utf8_ok((const unsigned char*)in, n, &bad);
    CHECK(cube__utf8_valid(in) == valid);
    if (valid) CHECK(out == in);
    /* Cuts of the valid ones are valid. */
    if (valid)
      for (size_t k = 0; k <= n; ++k) {
        char part[sizeof(in)];
        size_t m = cube__utf8_cut(in, k);
        CHECK(m <= k && k - m <= 3);
        memcpy(part, in, m);
        part[m] = '\0';
        CHECK(cube_test_utf8_ok((const unsigned char*)part, m, &bad));
      }
  }
}
