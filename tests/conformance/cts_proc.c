/* Helpers of the cases that start helper processes (this program run again
 * on the same backend with CTS_ROLE set) and use a cache directory of their
 * own: the tuning, bundle and compile-limit cases (cts.h). */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cts.h"

extern char** environ;

#define CTS_ROLE_ENV "CTS_ROLE"
#define CTS_GO_FD_ENV "CTS_GO_FD"
#define CTS_GO_FD 100

static int cts_rm_one(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

static char cts_saved_dir[PATH_MAX];
static int cts_saved_set = -1; /* -1: nothing saved */

void cts_cache_dir_use(const char* dir) {
  if (!dir && cts_saved_set >= 0) dir = cts_saved_set ? cts_saved_dir : NULL;
  if (dir)
    setenv("CUBE_CACHE_DIR", dir, 1);
  else
    unsetenv("CUBE_CACHE_DIR");
  cube_shutdown();
}

const char* cts_cache_dir_fresh(const char* tag, char* buf, size_t size) {
  if (cts_saved_set < 0) {
    const char* old = getenv("CUBE_CACHE_DIR");
    cts_saved_set = old != NULL;
    snprintf(cts_saved_dir, sizeof(cts_saved_dir), "%s", old ? old : "");
  }
  char name[160];
  snprintf(name, sizeof(name), "%s-%s", tag, cts_backend()->name);
  cts_tmp_path(buf, size, name);
  nftw(buf, cts_rm_one, 16, FTW_DEPTH | FTW_PHYS);
  setenv("CUBE_CACHE_DIR", buf, 1);
  cube_shutdown();
  return buf;
}

void cts_cache_dir_done(const char* dir) {
  if (cube_test_failures == 0)
    nftw(dir, cts_rm_one, 16, FTW_DEPTH | FTW_PHYS);
  else
    fprintf(stderr, "kept the cache directory %s\n", dir);
  cts_cache_dir_use(NULL);
}

const char* cts_role(void) {
  const char* r = getenv(CTS_ROLE_ENV);
  return r && *r ? r : NULL;
}

int cts_role_is(const char* name) {
  const char* r = cts_role();
  return r && strcmp(r, name) == 0;
}

pid_t cts_spawn_role(const char* case_name, const char* role, int go_fd) {
  size_t n = 0;
  while (environ[n]) ++n;
  char** envp = calloc(n + 3, sizeof(char*));
  if (!envp) return -1;
  size_t k = 0;
  for (size_t i = 0; i < n; ++i)
    if (strncmp(environ[i], CTS_ROLE_ENV "=", strlen(CTS_ROLE_ENV) + 1) != 0 &&
        strncmp(environ[i], CTS_GO_FD_ENV "=", strlen(CTS_GO_FD_ENV) + 1) != 0)
      envp[k++] = environ[i];
  char role_kv[160], go_kv[64];
  snprintf(role_kv, sizeof(role_kv), "%s=%s", CTS_ROLE_ENV, role);
  envp[k++] = role_kv;
  if (go_fd >= 0) {
    snprintf(go_kv, sizeof(go_kv), "%s=%d", CTS_GO_FD_ENV, CTS_GO_FD);
    envp[k++] = go_kv;
  }
  envp[k] = NULL;
  char* argv[] = {(char*)"/proc/self/exe", (char*)"--backend", (char*)cts_backend()->name,
                  (char*)case_name, NULL};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  if (go_fd >= 0) posix_spawn_file_actions_adddup2(&fa, go_fd, CTS_GO_FD);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = -1;
  int e = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, envp);
  posix_spawn_file_actions_destroy(&fa);
  free(envp);
  if (e) {
    fprintf(stderr, "posix_spawn of /proc/self/exe: %s\n", strerror(e));
    return -1;
  }
  return pid;
}

int cts_wait_child(pid_t pid) {
  if (pid < 0) return -1;
  int ws = 0;
  while (waitpid(pid, &ws, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
}

void cts_wait_go(void) {
  const char* v = getenv(CTS_GO_FD_ENV);
  if (!v) return;
  int fd = atoi(v);
  char b;
  for (;;) {
    ssize_t r = read(fd, &b, 1);
    if (r == 0 || (r < 0 && errno != EINTR)) break;
  }
  close(fd);
}
