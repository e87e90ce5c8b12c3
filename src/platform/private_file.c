/* Files in paths that other users can touch: private_file.h. */
#include "platform/private_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int cube__file_create_private(const char* path) {
  return open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
}

int cube__file_create_private_temp(char* template_path) {
  /* mkostemp creates with O_CREAT | O_EXCL (a link is never followed) and
   * mode 0600, retrying other names when one exists. */
  return mkostemp(template_path, O_CLOEXEC);
}

/* "a directory", "a FIFO", ... for a file that is not regular. */
static const char* cube__file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISLNK(m)) return "a symbolic link";
  return "not a regular file";
}

/* Why an open with O_NOFOLLOW failed with |e|. */
static void cube__file_open_error(int e, char* why, size_t why_size) {
  if (e == ELOOP)
    snprintf(why, why_size, "it is a symbolic link (links are not followed)");
  else
    snprintf(why, why_size, "%s", strerror(e));
}


/* Whether the open |fd| is a regular file of this user (or, with
 * |allow_chr|, a character device), and with |check_writable| not writable
 * by its group or others: 0, or an errno with the reason in |why|. */
static int cube__file_check_owned(int fd, bool allow_chr, bool check_writable, char* why,
                                  size_t why_size) {
  struct stat st;
  uid_t me = geteuid();
  if (fstat(fd, &st) != 0) {
    int e = errno;
    snprintf(why, why_size, "fstat: %s", strerror(e));
    return e;
  }
  if (allow_chr && S_ISCHR(st.st_mode)) return 0;
  if (!S_ISREG(st.st_mode)) {
    snprintf(why, why_size, "it is %s", cube__file_kind(st.st_mode));
    return EINVAL;
  }
  if (st.st_uid != me) {
    snprintf(why, why_size, "it belongs to uid %lu, not to uid %lu", (unsigned long)st.st_uid,
             (unsigned long)me);
    return EPERM;
  }
  if (check_writable && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    snprintf(why, why_size, "it is writable by %s (mode %04o)",
             (st.st_mode & S_IWOTH) ? "others" : "its group", (unsigned)(st.st_mode & 07777));
    return EPERM;
  }
  return 0;
}

/* Clears O_NONBLOCK (opened with it so that a FIFO planted at the path cannot
 * block the open): 0, or errno with "fcntl: ..." in |why|. */
static int cube__file_clear_nonblock(int fd, char* why, size_t why_size) {
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0 && fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == 0) return 0;
  int e = errno;
  snprintf(why, why_size, "fcntl: %s", strerror(e));
  return e;
}
int cube__file_open_trusted(const char* path, cube__file_refusal_t* out_refusal, char* why,
                            size_t why_size) {
  *out_refusal = CUBE__FILE_REFUSED;
  if (why_size) why[0] = '\0';
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT || e == ENOTDIR)
      *out_refusal = CUBE__FILE_ABSENT;
    else if (e != ELOOP)
      *out_refusal = CUBE__FILE_UNREADABLE;
    cube__file_open_error(e, why, why_size);
    errno = e;
    return -1;
  }
  int e = cube__file_check_owned(fd, false, true, why, why_size);
  if (!e && (e = cube__file_clear_nonblock(fd, why, why_size)) != 0)
    *out_refusal = CUBE__FILE_UNREADABLE;
  if (e) {
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

int cube__file_open_append_private(const char* path, char* why, size_t why_size) {
  if (why_size) why[0] = '\0';
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd < 0) {
    int e = errno;
    cube__file_open_error(e, why, why_size);
    errno = e;
    return -1;
  }
  /* A character device (/dev/null, a terminal) is allowed: nothing another
   * user planted can be there. */
  int e = cube__file_check_owned(fd, true, false, why, why_size);
  if (!e) e = cube__file_clear_nonblock(fd, why, why_size);
  if (e) {
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}
