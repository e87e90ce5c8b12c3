/* Files in paths that other users can touch (a shared /tmp, a cache or an
 * id file on a shared file system): created without following a link and
 * without replacing anything, read only when their owner and mode say that
 * nobody else wrote them.
 *
 * The checks are made on the opened descriptor (fstat), never on the path
 * before the open: a file swapped between a check and an open is never
 * read. Only the last component of a path is protected; the directories
 * above it are the caller's choice. */
#ifndef CUBE_PLATFORM_PRIVATE_FILE_H_
#define CUBE_PLATFORM_PRIVATE_FILE_H_

#include <stdbool.h>
#include <stddef.h>

/* Creates |path| for writing with O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC
 * and mode 0600 (less the umask): fails with EEXIST when anything, a link
 * included, is there already. Returns the descriptor, or -1 with errno set.
 * Thread-safe. */
int cube__file_create_private(const char* path);

/* Creates a new private file from |template| (ending in "XXXXXX", replaced
 * in place as mkostemp does; same flags and mode as above). Returns the
 * descriptor, or -1 with errno set. Thread-safe. */
int cube__file_create_private_temp(char* template_path);

/* What cube__file_open_trusted found when it returns no descriptor. */
typedef enum cube__file_refusal_e {
  CUBE__FILE_ABSENT = 0,     /* no file there (ENOENT, ENOTDIR): a reader may wait for it */
  CUBE__FILE_UNREADABLE = 1, /* the open failed otherwise (EACCES, EIO, ...) */
  CUBE__FILE_REFUSED = 2,    /* something is there and is not trusted */
} cube__file_refusal_t;

/* Opens |path| read-only and returns the descriptor when the file is a
 * regular file that belongs to this process's effective user and that
 * neither its group nor others may write. Otherwise returns -1, sets
 * *out_refusal, and writes into |why| (of |why_size| bytes) a few words:
 * "it is a symbolic link (links are not followed)", "it belongs to uid
 * 65534, not to uid 1000", "it is writable by others (mode 0666)", "it is a
 * directory", or strerror.
 * The open uses O_NOFOLLOW (a link is refused, never followed) and
 * O_NONBLOCK (a planted FIFO cannot block the caller; cleared on success);
 * the checks are on the opened descriptor. Thread-safe. */
int cube__file_open_trusted(const char* path, cube__file_refusal_t* out_refusal, char* why,
                            size_t why_size);

/* Opens |path| to append to it (O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
 * mode 0600 when created): accepted when the result is a regular file of
 * this effective user or a character device (/dev/null, a terminal).
 * Returns the descriptor, or -1 with |why| as above. Thread-safe. */
int cube__file_open_append_private(const char* path, char* why, size_t why_size);

#endif /* CUBE_PLATFORM_PRIVATE_FILE_H_ */
