/* Aligned host memory: the library's one way to get blocks with an
 * alignment (64-byte bytes, staging scratch, pools' bookkeeping), and
 * mapping the pages of memory a large copy is about to touch. The lowest
 * module: it uses libc only.
 *
 * Thread-safe. */
#ifndef CUBE_BASE_ALLOC_H_
#define CUBE_BASE_ALLOC_H_

#include <stdbool.h>
#include <stddef.h>

/* |size| bytes aligned to |alignment| (a power of two; raised to
 * sizeof(void*)); size 0 still gives a distinct block. cube__aligned_calloc
 * zeroes. Both return NULL on failure or size overflow; free with
 * cube__aligned_free (NULL accepted). */
void* cube__aligned_alloc(size_t size, size_t alignment);
void* cube__aligned_calloc(size_t size, size_t alignment);
void cube__aligned_free(void* p);

/* Grows the array |p| of |*cap| elements of |elem| bytes to hold at least
 * |need| (capacity doubled from 16) with realloc. Returns the array, |p|
 * itself when it is large enough, or NULL without touching |p| or |*cap| when
 * memory or the size runs out. */
void* cube__array_grow(void* p, size_t* cap, size_t need, size_t elem);

/* Maps the pages of host memory [p, p + n) that a copy is about to read
 * (|write| false) or write (|write| true), in one system call, when a sample
 * of them (first, middle and last page) shows some not mapped yet: a source
 * that was never touched otherwise takes one page fault per 4 KiB inside the
 * copy (a staged 1 GiB upload from untouched memory ran at 20 GB/s against
 * 49-51 from touched memory on the H200 host). Contents are unchanged. Advice
 * only: any failure (an old kernel, a mapping that refuses it) is ignored.
 * Thread-safe. */
void cube__prefault(const void* p, size_t n, bool write);

#endif /* CUBE_BASE_ALLOC_H_ */
