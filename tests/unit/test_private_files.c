// cube-test-libs: cube_static
/* Files in paths that other users can touch (src/platform/private_file.h):
 * created without following a link or replacing anything, read only when
 * this user wrote them and nobody else may, checked on the opened
 * descriptor. One case per rule, each with the thing planted for real (a
 * link, a file given to uid 65534, a world- or group-writable file, a FIFO),
 * and the CUBE_LOG_FILE that the profiler appends to. The kernel cache's
 * entries and the NCCL id file have their own cases (test_kernel_cache.c,
 * test_nccl.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "cube/cube.h"
#include "platform/private_file.h"

static char g_dir[512];

/* A fresh directory for the case (0755: the planted files live in it). */
static void fresh_dir(const char* name) {
  const char* base = getenv("CUBE_TEST_TMPDIR");
  snprintf(g_dir, sizeof(g_dir), "%s/private-%s-%ld", base && *base ? base : "/tmp", name,
           (long)getpid());
  char cmd[700];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) perror("rm");
  if (mkdir(g_dir, 0755) != 0) perror("mkdir");
}

static void done_dir(void) {
  char cmd[700];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_dir);
  if (system(cmd) != 0) perror("rm");
}

/* Writes |text| to a new file |path| with |mode| (set after creation, so no
 * umask applies). */
static void write_file(const char* path, const char* text, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) || fchmod(fd, mode) != 0)
    perror(path);
  if (fd >= 0) close(fd);
}

/* The contents of |path| (at most |size| - 1 bytes), "" when unreadable. */
static const char* read_text(const char* path, char* out, size_t size) {
  out[0] = '\0';
  int fd = open(path, O_RDONLY);
  if (fd < 0) return out;
  ssize_t n = read(fd, out, size - 1);
  close(fd);
  out[n > 0 ? n : 0] = '\0';
  return out;
}

/* open_trusted on |path|: returns the refusal (-1 when it opened), |why|. */
static int trusted(const char* path, char* why, size_t size) {
  cube__file_refusal_t r = CUBE__FILE_ABSENT;
  int fd = cube__file_open_trusted(path, &r, why, size);
  if (fd >= 0) {
    close(fd);
    return -1;
  }
  return (int)r;
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

CUBE_TEST(read_own_private_file) {
  fresh_dir("own");
  char path[600], why[200], text[64];
  snprintf(path, sizeof(path), "%s/f", g_dir);
  write_file(path, "mine", 0600);
  cube__file_refusal_t r = CUBE__FILE_REFUSED;
  int fd = cube__file_open_trusted(path, &r, why, sizeof(why));
  REQUIRE(fd >= 0);
  ssize_t n = read(fd, text, sizeof(text));
  CHECK(n == 4 && memcmp(text, "mine", 4) == 0);
  /* Blocking again (O_NONBLOCK was for the open only), close-on-exec. */
  CHECK((fcntl(fd, F_GETFL) & O_NONBLOCK) == 0);
  CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  close(fd);
  /* Read-only for everyone is fine: nobody else may write it. */
  write_file(path, "mine", 0444);
  CHECK_EQ_U64(trusted(path, why, sizeof(why)), (uint64_t)-1);
  /* Absent: the reader may wait for it. */
  snprintf(path, sizeof(path), "%s/none", g_dir);
  CHECK_EQ_U64(trusted(path, why, sizeof(why)), CUBE__FILE_ABSENT);
  snprintf(path, sizeof(path), "%s/f/below-a-file", g_dir);
  CHECK_EQ_U64(trusted(path, why, sizeof(why)), CUBE__FILE_ABSENT);
  (void)read_text;
  done_dir();
}

CUBE_TEST(read_refuses_a_link) {
  fresh_dir("link");
  char target[600], link[600], why[200];
  snprintf(target, sizeof(target), "%s/target", g_dir);
  snprintf(link, sizeof(link), "%s/link", g_dir);
  write_file(target, "good contents", 0600);
  REQUIRE(symlink(target, link) == 0);
  CHECK_EQ_U64(trusted(link, why, sizeof(why)), CUBE__FILE_REFUSED);
  CHECK(strstr(why, "symbolic link") != NULL);
  /* A dangling link is refused too, not taken for an absent file. */
  REQUIRE(unlink(target) == 0);
  CHECK_EQ_U64(trusted(link, why, sizeof(why)), CUBE__FILE_REFUSED);
  done_dir();
}

CUBE_TEST(read_refuses_another_users_file) {
  if (geteuid() != 0) CUBE_SKIP("giving a file to another user needs root");
  fresh_dir("owner");
  char path[600], why[200];
  snprintf(path, sizeof(path), "%s/f", g_dir);
  write_file(path, "theirs", 0644);
  REQUIRE(chown(path, 65534, 65534) == 0);
  CHECK_EQ_U64(trusted(path, why, sizeof(why)), CUBE__FILE_REFUSED);
  char expect[100];
  snprintf(expect, sizeof(expect), "it belongs to uid 65534, not to uid %lu",
           (unsigned long)geteuid());
  CHECK(strstr(why, expect) != NULL);
  done_dir();
}

CUBE_TEST(read_refuses_a_file_others_may_write) {
  fresh_dir("mode");
  char path[600], why[200];
  snprintf(path, sizeof(path), "%s/f", g_dir);
  write_file(path, "anyone's", 0666);
  CHECK_EQ_U64(trusted(path, why, sizeof(why)), CUBE__FILE_REFUSED);
  CHECK(strstr(why, "writable by others (mode 0666)") != NULL);
  write_file(path, "anyone's", 0602);
  CHECK_EQ_U64(trusted(path, why, sizeof(why)), CUBE__FILE_REFUSED);
  CHECK(strstr(why, "writable by others (mode 0602)") != NULL);
  write_file(path, "the group's", 0660);
  CHECK_EQ_U64(trusted(path, why, sizeof(why)), CUBE__FILE_REFUSED);
  CHECK(strstr(why, "writable by its group (mode 0660)") != NULL);
  done_dir();
}

CUBE_TEST(read_refuses_what_is_not_a_regular_file) {
  fresh_dir("kind");
  char path[600], why[200];
  snprintf(path, sizeof(path), "%s/d", g_dir);
  REQUIRE(mkdir(path, 0700) == 0);
  CHECK_EQ_U64(trusted(path, why, sizeof(why)), CUBE__FILE_REFUSED);
  CHECK(strstr(why, "a directory") != NULL);
  /* A FIFO with no writer: refused at once, the open does not block. */
  snprintf(path, sizeof(path), "%s/fifo", g_dir);
  REQUIRE(mkfifo(path, 0600) == 0);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_EQ_U64(trusted(path, why, sizeof(why)), CUBE__FILE_REFUSED);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  CHECK(strstr(why, "a FIFO") != NULL);
  CHECK(t1.tv_sec - t0.tv_sec < 2);
  done_dir();
}

//===----------------------------------------------------------------------===//
// Creating
//===----------------------------------------------------------------------===//

CUBE_TEST(create_is_new_private_and_clobbers_nothing) {
  fresh_dir("create");
  char path[600], victim[600], link[600], text[64];
  snprintf(path, sizeof(path), "%s/new", g_dir);
  mode_t old_mask = umask(0);
  int fd = cube__file_create_private(path);
  umask(old_mask);
  REQUIRE(fd >= 0);
  CHECK((fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
  close(fd);
  struct stat st;
  REQUIRE(lstat(path, &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK_EQ_U64(st.st_mode & 07777, 0600);
  /* Something there already: EEXIST, and it is left as it was. */
  write_file(path, "existing", 0644);
  errno = 0;
  CHECK(cube__file_create_private(path) < 0 && errno == EEXIST);
  CHECK(strcmp(read_text(path, text, sizeof(text)), "existing") == 0);
  /* A planted link is not followed: its target is not created or written. */
  snprintf(victim, sizeof(victim), "%s/victim", g_dir);
  snprintf(link, sizeof(link), "%s/link", g_dir);
  REQUIRE(symlink(victim, link) == 0);
  errno = 0;
  CHECK(cube__file_create_private(link) < 0 && errno == EEXIST);
  CHECK(lstat(victim, &st) != 0);
  write_file(victim, "victim", 0644);
  CHECK(cube__file_create_private(link) < 0);
  CHECK(strcmp(read_text(victim, text, sizeof(text)), "victim") == 0);
  /* Temporary names: new files, 0600, never an existing name. */
  char tmp[600];
  snprintf(tmp, sizeof(tmp), "%s/tmp.XXXXXX", g_dir);
  fd = cube__file_create_private_temp(tmp);
  REQUIRE(fd >= 0);
  close(fd);
  REQUIRE(lstat(tmp, &st) == 0);
  CHECK_EQ_U64(st.st_mode & 07777, 0600);
  CHECK(strstr(tmp, "XXXXXX") == NULL);
  done_dir();
}

//===----------------------------------------------------------------------===//
// Appending (CUBE_LOG_FILE)
//===----------------------------------------------------------------------===//

CUBE_TEST(append_refuses_links_and_others_files) {
  fresh_dir("append");
  char path[600], why[200], text[64];
  snprintf(path, sizeof(path), "%s/log", g_dir);
  int fd = cube__file_open_append_private(path, why, sizeof(why));
  REQUIRE(fd >= 0);
  CHECK(write(fd, "a", 1) == 1);
  close(fd);
  fd = cube__file_open_append_private(path, why, sizeof(why));
  REQUIRE(fd >= 0);
  CHECK(write(fd, "b", 1) == 1);
  close(fd);
  CHECK(strcmp(read_text(path, text, sizeof(text)), "ab") == 0);
  struct stat st;
  REQUIRE(stat(path, &st) == 0);
  CHECK_EQ_U64(st.st_mode & 0077, 0);
  /* /dev/null (a character device) is a fine log. */
  fd = cube__file_open_append_private("/dev/null", why, sizeof(why));
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  /* A link to a file of this user is not followed. */
  char victim[600], link[600];
  snprintf(victim, sizeof(victim), "%s/victim", g_dir);
  snprintf(link, sizeof(link), "%s/link", g_dir);
  write_file(victim, "victim", 0600);
  REQUIRE(symlink(victim, link) == 0);
  CHECK(cube__file_open_append_private(link, why, sizeof(why)) < 0);
  CHECK(strstr(why, "symbolic link") != NULL);
  CHECK(strcmp(read_text(victim, text, sizeof(text)), "victim") == 0);
  if (geteuid() == 0) {
    REQUIRE(chown(path, 65534, 65534) == 0);
    CHECK(cube__file_open_append_private(path, why, sizeof(why)) < 0);
    CHECK(strstr(why, "belongs to uid 65534") != NULL);
  }
  done_dir();
}

/* The profiler's log: a link planted where CUBE_LOG_FILE points makes the
 * client's creation fail naming the path and the reason; its target is
 * left alone. */
CUBE_TEST(log_file_through_a_link_is_refused) {
  fresh_dir("log");
  char victim[600], link[600], text[64];
  snprintf(victim, sizeof(victim), "%s/victim", g_dir);
  snprintf(link, sizeof(link), "%s/cube.log", g_dir);
  write_file(victim, "victim", 0600);
  REQUIRE(symlink(victim, link) == 0);
  setenv("CUBE_LOG_FILE", link, 1);
  setenv("CUBE_PROFILE", "exec", 1);
  cube_shutdown(); /* the option table reads the environment again */
  cube_client_t* c = NULL;
  cube_status_t st = cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &c);
  CHECK_STATUS(st, CUBE_STATUS_INVALID_ARGUMENT, "CUBE_LOG_FILE", link, "symbolic link");
  if (c) cube_client_release(c);
  CHECK(strcmp(read_text(victim, text, sizeof(text)), "victim") == 0);
  /* The same path as a file of this user works. */
  REQUIRE(unlink(link) == 0);
  c = NULL;
  CHECK_OK(cube_client_load((cube_device_id_t){CUBE_BACKEND_CPU, 0}, &c));
  if (c) cube_client_release(c);
  unsetenv("CUBE_LOG_FILE");
  unsetenv("CUBE_PROFILE");
  cube_shutdown();
  done_dir();
}
