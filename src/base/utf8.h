/* Text that goes into JSON files (traces, memory snapshots) must be UTF-8;
 * names and tags come from programs as bytes, and cube cuts long ones to
 * its buffers. These keep such text valid: a cut never ends inside a
 * character, and bytes that are not UTF-8 become U+FFFD.
 *
 * Pure functions of their arguments: thread-safe, no allocation. */
#ifndef CUBE_BASE_UTF8_H_
#define CUBE_BASE_UTF8_H_

#include <stdbool.h>
#include <stddef.h>

/* The length of the well-formed UTF-8 sequence (RFC 3629: no overlong
 * forms, no surrogates, nothing past U+10FFFF) at |s|, which has |n| bytes
 * readable; 0 when none starts there (or n is 0). */
size_t cube__utf8_seq(const unsigned char* s, size_t n);

/* Whether the NUL-terminated |s| is well-formed UTF-8 (NULL is). */
bool cube__utf8_valid(const char* s);

/* How many of the first |n| bytes of |s| to keep so that the kept bytes
 * do not end inside a character: |n| unless byte |n| (which must be
 * readable, the NUL included) continues a character that began before it;
 * then the start of that character. For cutting a name to a buffer. */
size_t cube__utf8_cut(const char* s, size_t n);

/* |s| itself when it is well-formed UTF-8 (or NULL: ""), else a copy in
 * |buf| (|size| >= 4 bytes) where each byte that starts no well-formed
 * sequence is U+FFFD, ending before the first character that does not fit.
 * Never NULL. */
const char* cube__utf8_text(const char* s, char* buf, size_t size);

#endif /* CUBE_BASE_UTF8_H_ */
