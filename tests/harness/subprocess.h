/* Running a child program from a test (the dialect tests compile generated
 * units with cc). POSIX; header-only. */
#ifndef CUBE_TEST_SUBPROCESS_H_
#define CUBE_TEST_SUBPROCESS_H_

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs argv (searching PATH) with |input| on stdin and stdout+stderr in
 * |log_path|; returns the exit status, -1 when it could not run or died. */
static inline int run_with_stdin(char* const* argv, const char* input, const char* log_path) {
  int in[2];
  if (pipe(in) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) {
    close(in[0]);
    close(in[1]);
    return -1;
  }
  if (pid == 0) {
    int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) _exit(126);
    dup2(in[0], 0);
    dup2(fd, 1);
    dup2(fd, 2);
    close(in[0]);
    close(in[1]);
    close(fd);
    execvp(argv[0], argv);
    _exit(127);
  }
  close(in[0]);
  size_t len = strlen(input), off = 0;
  while (off < len) {
    ssize_t w = write(in[1], input + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    off += (size_t)w;
  }
  close(in[1]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Runs argv (searching PATH) with stdin from |in_path| (NULL: /dev/null),
 * stdout into |out_path| and stderr into |err_path| (each NULL: /dev/null),
 * apart so that a test can tell which stream got what. The environment is
 * the caller's. Returns the exit status; 128 + the signal when it died of
 * one; -1 when it could not be started (127 when exec failed). */
static inline int run_redirected(char* const* argv, const char* in_path, const char* out_path,
                                 const char* err_path) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int in = open(in_path ? in_path : "/dev/null", O_RDONLY);
    int out = open(out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_path ? err_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0) _exit(126);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    close(in);
    close(out);
    close(err);
    execvp(argv[0], argv);
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The contents of |path| as a NUL-terminated malloc'd string (NULL when it
 * cannot be read). */
static inline char* read_whole_file(const char* path) {
  int fd = open(path, O_RDONLY);
  if (fd < 0) return NULL;
  size_t cap = 4096, len = 0;
  char* buf = (char*)malloc(cap);
  for (;;) {
    if (!buf) break;
    if (len + 1 >= cap) {
      char* grown = (char*)realloc(buf, cap * 2);
      if (!grown) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = grown;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + len, cap - 1 - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      free(buf);
      buf = NULL;
      break;
    }
    if (r == 0) break;
    len += (size_t)r;
  }
  close(fd);
  if (buf) buf[len] = '\0';
  return buf;
}

/* Lines in |s| (a last line without its newline counts). */
static inline size_t count_lines(const char* s) {
  size_t n = 0;
  for (const char* p = s; *p; ++p)
    if (*p == '\n' || p[1] == '\0') ++n;
  return n;
}

#endif /* CUBE_TEST_SUBPROCESS_H_ */
