/* Running a child program from a test (the dialect tests compile generated
 * units with cc). POSIX; header-only. */
#ifndef CUBE_TEST_SUBPROCESS_H_
#define CUBE_TEST_SUBPROCESS_H_

#include <errno.h>
#include <fcntl.h>
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

#endif /* CUBE_TEST_SUBPROCESS_H_ */
