/* fuzz_input.h: a tiny reader over the fuzzer's bytes, shared by the fuzz
 * targets. Reading past the end yields zeros, so every input decodes. */
#ifndef CUBE_FUZZ_INPUT_H_
#define CUBE_FUZZ_INPUT_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct fz {
  const uint8_t* p;
  size_t n;
} fz_t;

static inline fz_t fz_make(const uint8_t* data, size_t size) {
  fz_t f = {data, size};
  return f;
}

static inline bool fz_done(const fz_t* f) { return f->n == 0; }

static inline uint8_t fz_u8(fz_t* f) {
  if (f->n == 0) return 0;
  f->n--;
  return *f->p++;
}

static inline uint16_t fz_u16(fz_t* f) {
  uint16_t v = fz_u8(f);
  return (uint16_t)(v | (uint16_t)fz_u8(f) << 8);
}

static inline uint32_t fz_u32(fz_t* f) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= (uint32_t)fz_u8(f) << (8 * i);
  return v;
}

static inline uint64_t fz_u64(fz_t* f) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= (uint64_t)fz_u8(f) << (8 * i);
  return v;
}

/* Up to |max| bytes of the input (fewer at the end); returns the count. */
static inline size_t fz_take(fz_t* f, size_t max, const uint8_t** out) {
  size_t k = f->n < max ? f->n : max;
  *out = f->p;
  f->p += k;
  f->n -= k;
  return k;
}

/* An invariant of the library broke: print and abort so libFuzzer keeps the
 * input as a crash. */
#define FZ_ASSERT(cond, ...)                                                 \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "fuzz invariant failed at %s:%d: %s\n  ", __FILE__,   \
              __LINE__, #cond);                                              \
      fprintf(stderr, __VA_ARGS__);                                          \
      fputc('\n', stderr);                                                   \
      abort();                                                               \
    }                                                                        \
  } while (0)

#endif /* CUBE_FUZZ_INPUT_H_ */
