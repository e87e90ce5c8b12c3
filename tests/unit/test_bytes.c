// cube-test-libs: cube_static
/* Host byte buffers: cube/bytes.h and base/bytes.h (CubeCL's Bytes and AllocationProperty). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "base/bytes.h"
#include "check.h"
#include "cube/bytes.h"

/* A temporary file with |size| random bytes; its path goes to |path|. */
static int make_temp_file(char* path, size_t path_size, size_t size, uint64_t seed,
                          uint8_t** out_content) {
  const char* dir = getenv("CUBE_TEST_TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  snprintf(path, path_size, "%s/cube_bytes_XXXXXX", dir);
  int fd = mkstemp(path);
  if (fd < 0) {
    snprintf(path, path_size, "/tmp/cube_bytes_XXXXXX");
    fd = mkstemp(path);
  }
  if (fd < 0) return -1;
  uint8_t* content = malloc(size ? size : 1);
  cube_test_fill_random(content, size, seed);
  size_t done = 0;
  while (done < size) {
    ssize_t n = write(fd, content + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      free(content);
      unlink(path);
      return -1;
    }
    done += (size_t)n;
  }
  close(fd);
  *out_content = content;
  return 0;
}

static int all_zero(const void* p, size_t n) {
  const uint8_t* b = p;
  for (size_t i = 0; i < n; ++i)
    if (b[i]) return 0;
  return 1;
}

CUBE_TEST(allocate_zeroed) {
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_bytes_allocate(4096 + 13, &b));
  CHECK_EQ_U64(cube_bytes_size(b), 4096 + 13);
  CHECK(cube_bytes_property(b) == CUBE_BYTES_NATIVE);
  CHECK(cube_bytes_data(b) != NULL);
  CHECK(((uintptr_t)cube_bytes_data(b) % 64) == 0);
  CHECK(all_zero(cube_bytes_const_data(b), cube_bytes_size(b)));
  memset(cube_bytes_data(b), 0xAB, cube_bytes_size(b)); /* writable */
  cube_bytes_release(b);
}

CUBE_TEST(allocate_zero_size) {
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_bytes_allocate(0, &b));
  CHECK_EQ_U64(cube_bytes_size(b), 0);
  CHECK(cube_bytes_data(b) != NULL);
  cube_bytes_release(b);
}

CUBE_TEST(allocate_uninit_aligned) {
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube__bytes_allocate_uninit(1000, &b));
  CHECK_EQ_U64(cube_bytes_size(b), 1000);
  CHECK(cube_bytes_property(b) == CUBE_BYTES_NATIVE);
  CHECK(((uintptr_t)cube_bytes_data(b) % 64) == 0);
  memset(cube_bytes_data(b), 1, 1000);
  cube_bytes_release(b);
}

CUBE_TEST(allocate_null_out) {
  CHECK_STATUS(cube_bytes_allocate(8, NULL), CUBE_STATUS_INVALID_ARGUMENT, "cube_bytes_allocate",
               "out_bytes");
}

CUBE_TEST(from_copy_equal) {
  uint8_t src[777];
  cube_test_fill_random(src, sizeof(src), 42);
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_bytes_from_copy(src, sizeof(src), &b));
  CHECK_EQ_U64(cube_bytes_size(b), sizeof(src));
  CHECK(cube_bytes_property(b) == CUBE_BYTES_NATIVE);
  CHECK(cube_bytes_const_data(b) != (const void*)src);
  CHECK(memcmp(cube_bytes_const_data(b), src, sizeof(src)) == 0);
  CHECK(((uintptr_t)cube_bytes_data(b) % 64) == 0);
  cube_bytes_release(b);
}

CUBE_TEST(from_copy_null_data) {
  cube_bytes_t* b = NULL;
  CHECK_STATUS(cube_bytes_from_copy(NULL, 16, &b), CUBE_STATUS_INVALID_ARGUMENT,
               "cube_bytes_from_copy", "data", "16");
  CHECK(b == NULL);
  REQUIRE_OK(cube_bytes_from_copy(NULL, 0, &b));
  CHECK_EQ_U64(cube_bytes_size(b), 0);
  cube_bytes_release(b);
}

typedef struct {
  atomic_int calls;
  void* data;
  size_t size;
} release_log_t;

static void log_release(void* user, void* data, size_t size) {
  release_log_t* log = user;
  atomic_fetch_add(&log->calls, 1);
  log->data = data;
  log->size = size;
}

CUBE_TEST(wrap_release_once) {
  static char storage[100];
  release_log_t log = {0};
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_bytes_wrap(storage, sizeof(storage), log_release, &log, &b));
  CHECK(cube_bytes_property(b) == CUBE_BYTES_OTHER);
  CHECK(cube_bytes_data(b) == storage);
  CHECK_EQ_U64(cube_bytes_size(b), sizeof(storage));
  for (int i = 0; i < 5; ++i) CHECK(cube_bytes_retain(b) == b);
  for (int i = 0; i < 5; ++i) {
    cube_bytes_release(b);
    CHECK_EQ_U64(atomic_load(&log.calls), 0);
  }
  cube_bytes_release(b);
  CHECK_EQ_U64(atomic_load(&log.calls), 1);
  CHECK(log.data == storage);
  CHECK_EQ_U64(log.size, sizeof(storage));
}

CUBE_TEST(wrap_null_release) {
  char storage[8];
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_bytes_wrap(storage, sizeof(storage), NULL, NULL, &b));
  cube_bytes_release(cube_bytes_retain(b));
  cube_bytes_release(b);
  cube_bytes_release(NULL);
  CHECK(cube_bytes_retain(NULL) == NULL);
}

typedef struct {
  cube_bytes_t* b;
  int rounds;
} retain_arg_t;

static void* retain_release_thread(void* p) {
  retain_arg_t* a = p;
  for (int i = 0; i < a->rounds; ++i) cube_bytes_release(cube_bytes_retain(a->b));
  cube_bytes_release(a->b); /* drops the reference the main thread gave */
  return NULL;
}

CUBE_TEST(wrap_release_once_threads) {
  static char storage[64];
  release_log_t log = {0};
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_bytes_wrap(storage, sizeof(storage), log_release, &log, &b));
  enum { N = 8 };
  pthread_t threads[N];
  retain_arg_t args[N];
  for (int i = 0; i < N; ++i) {
    args[i].b = cube_bytes_retain(b);
    args[i].rounds = 20000;
    REQUIRE(pthread_create(&threads[i], NULL, retain_release_thread, &args[i]) == 0);
  }
  cube_bytes_release(b);
  for (int i = 0; i < N; ++i) pthread_join(threads[i], NULL);
  CHECK_EQ_U64(atomic_load(&log.calls), 1);
}

CUBE_TEST(make_pinned_property) {
  static char storage[32];
  release_log_t log = {0};
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube__bytes_make(CUBE_BYTES_PINNED, storage, sizeof(storage), log_release, &log, &b));
  CHECK(cube_bytes_property(b) == CUBE_BYTES_PINNED);
  cube_bytes_release(b);
  CHECK_EQ_U64(atomic_load(&log.calls), 1);
  CHECK_STATUS(cube__bytes_make((cube_bytes_property_t)9, storage, 1, NULL, NULL, &b),
               CUBE_STATUS_INVALID_ARGUMENT, "cube__bytes_make", "property", "9");
}

CUBE_TEST(release_array) {
  cube_bytes_t* arr[3] = {NULL, NULL, NULL};
  REQUIRE_OK(cube_bytes_allocate(8, &arr[0]));
  REQUIRE_OK(cube_bytes_allocate(16, &arr[2]));
  cube_bytes_release_array(arr, 3);
  CHECK(arr[0] == NULL && arr[1] == NULL && arr[2] == NULL);
  cube_bytes_release_array(NULL, 0);
}

CUBE_TEST(map_file_unaligned_offset) {
  char path[512];
  uint8_t* content = NULL;
  const size_t file_size = 3 * 4096 + 123;
  if (make_temp_file(path, sizeof(path), file_size, 0xC0FFEE, &content) != 0)
    CUBE_SKIP("cannot write a temporary file");
  const uint64_t offset = 4096 + 77; /* not page-aligned */
  const size_t size = 5000;
  cube_bytes_t* b = NULL;
  CHECK_OK(cube_bytes_map_file(path, offset, size, &b));
  if (b) {
    CHECK(cube_bytes_property(b) == CUBE_BYTES_FILE);
    CHECK_EQ_U64(cube_bytes_size(b), size);
    CHECK(memcmp(cube_bytes_const_data(b), content + offset, size) == 0);
    /* Copy-on-write: writes stay private, the file keeps its content. */
    uint8_t* d = cube_bytes_data(b);
    d[0] ^= 0xFF;
    cube_bytes_t* again = NULL;
    CHECK_OK(cube_bytes_map_file(path, offset, 1, &again));
    if (again) CHECK(((const uint8_t*)cube_bytes_const_data(again))[0] == content[offset]);
    cube_bytes_release(again);
    cube_bytes_release(b);
  }
  unlink(path);
  free(content);
}

CUBE_TEST(map_file_size_zero_to_end) {
  char path[512];
  uint8_t* content = NULL;
  const size_t file_size = 10000;
  if (make_temp_file(path, sizeof(path), file_size, 7, &content) != 0)
    CUBE_SKIP("cannot write a temporary file");
  cube_bytes_t* b = NULL;
  CHECK_OK(cube_bytes_map_file(path, 333, 0, &b));
  if (b) {
    CHECK_EQ_U64(cube_bytes_size(b), file_size - 333);
    CHECK(memcmp(cube_bytes_const_data(b), content + 333, file_size - 333) == 0);
    cube_bytes_release(b);
  }
  /* Whole file. */
  b = NULL;
  CHECK_OK(cube_bytes_map_file(path, 0, 0, &b));
  if (b) {
    CHECK_EQ_U64(cube_bytes_size(b), file_size);
    CHECK(memcmp(cube_bytes_const_data(b), content, file_size) == 0);
    cube_bytes_release(b);
  }
  /* Offset at the end: an empty region, nothing mapped. */
  b = NULL;
  CHECK_OK(cube_bytes_map_file(path, file_size, 0, &b));
  if (b) {
    CHECK_EQ_U64(cube_bytes_size(b), 0);
    CHECK(cube_bytes_property(b) == CUBE_BYTES_FILE);
    cube_bytes_release(b);
  }
  unlink(path);
  free(content);
}

CUBE_TEST(map_file_empty_file) {
  char path[512];
  uint8_t* content = NULL;
  if (make_temp_file(path, sizeof(path), 0, 1, &content) != 0)
    CUBE_SKIP("cannot write a temporary file");
  cube_bytes_t* b = NULL;
  CHECK_OK(cube_bytes_map_file(path, 0, 0, &b));
  if (b) {
    CHECK_EQ_U64(cube_bytes_size(b), 0);
    cube_bytes_release(b);
  }
  CHECK_STATUS(cube_bytes_map_file(path, 0, 1, &b), CUBE_STATUS_OUT_OF_RANGE, path);
  unlink(path);
  free(content);
}

CUBE_TEST(map_file_missing) {
  const char* path = "/nonexistent-cube-dir/missing-file.bin";
  cube_bytes_t* b = NULL;
  CHECK_STATUS(cube_bytes_map_file(path, 0, 0, &b), CUBE_STATUS_NOT_FOUND, "cube_bytes_map_file",
               path, strerror(ENOENT));
  CHECK(b == NULL);
}

CUBE_TEST(map_file_out_of_range) {
  char path[512];
  uint8_t* content = NULL;
  if (make_temp_file(path, sizeof(path), 1000, 3, &content) != 0)
    CUBE_SKIP("cannot write a temporary file");
  cube_bytes_t* b = NULL;
  /* Offset past the end. */
  CHECK_STATUS(cube_bytes_map_file(path, 1001, 0, &b), CUBE_STATUS_OUT_OF_RANGE,
               "cube_bytes_map_file", path, "1001", "1000");
  CHECK_STATUS(cube_bytes_map_file(path, 5000, 10, &b), CUBE_STATUS_OUT_OF_RANGE, path, "5000",
               "10", "1000");
  /* Region running past the end. */
  CHECK_STATUS(cube_bytes_map_file(path, 900, 101, &b), CUBE_STATUS_OUT_OF_RANGE, path, "900",
               "101", "1000");
  CHECK(b == NULL);
  /* The last byte exactly fits. */
  CHECK_OK(cube_bytes_map_file(path, 900, 100, &b));
  if (b) {
    CHECK(memcmp(cube_bytes_const_data(b), content + 900, 100) == 0);
    cube_bytes_release(b);
  }
  unlink(path);
  free(content);
}

CUBE_TEST(map_file_bad_arguments) {
  cube_bytes_t* b = NULL;
  CHECK_STATUS(cube_bytes_map_file(NULL, 0, 0, &b), CUBE_STATUS_INVALID_ARGUMENT, "path");
  CHECK_STATUS(cube_bytes_map_file("", 0, 0, &b), CUBE_STATUS_INVALID_ARGUMENT, "path");
  CHECK_STATUS(cube_bytes_map_file("/tmp", 0, 0, &b), CUBE_STATUS_INVALID_ARGUMENT, "/tmp",
               "regular file");
}

CUBE_TEST(property_names) {
  CHECK(strcmp(cube_bytes_property_name(CUBE_BYTES_NATIVE), "native") == 0);
  CHECK(strcmp(cube_bytes_property_name(CUBE_BYTES_PINNED), "pinned") == 0);
  CHECK(strcmp(cube_bytes_property_name(CUBE_BYTES_FILE), "file") == 0);
  CHECK(strcmp(cube_bytes_property_name(CUBE_BYTES_OTHER), "other") == 0);
  CHECK(strcmp(cube_bytes_property_name((cube_bytes_property_t)42), "unknown") == 0);
}

//===----------------------------------------------------------------------===//
// cube__bytes_copy_out: how the library reads contents
//===----------------------------------------------------------------------===//

CUBE_TEST(copy_out_native_ranges) {
  uint8_t src[1001], dst[1001];
  cube_test_fill_random(src, sizeof(src), 41);
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_bytes_from_copy(src, sizeof(src), &b));
  memset(dst, 0, sizeof(dst));
  CHECK_OK(cube__bytes_copy_out(b, 0, dst, sizeof(dst)));
  CHECK(memcmp(dst, src, sizeof(src)) == 0);
  CHECK_OK(cube__bytes_copy_out(b, 999, dst, 2));
  CHECK(dst[0] == src[999] && dst[1] == src[1000]);
  CHECK_OK(cube__bytes_copy_out(b, 1001, NULL, 0)); /* empty at the end */
  CHECK_STATUS(cube__bytes_copy_out(b, 1000, dst, 2), CUBE_STATUS_OUT_OF_RANGE, "2 bytes",
               "offset 1000", "1001");
  CHECK_STATUS(cube__bytes_copy_out(b, 1002, dst, 0), CUBE_STATUS_OUT_OF_RANGE, "1002");
  CHECK_STATUS(cube__bytes_copy_out(b, (size_t)-1, dst, 2), CUBE_STATUS_OUT_OF_RANGE, "1001");
  CHECK(!cube__bytes_is_file(b));
  cube_bytes_release(b);
}

/* Open descriptors of this process among the first 4096. */
static int open_fd_count(void) {
  int n = 0;
  for (int fd = 0; fd < 4096; ++fd)
    if (fcntl(fd, F_GETFD) != -1) ++n;
  return n;
}

CUBE_TEST(copy_out_file_reads_the_file) {
  char path[512];
  uint8_t* content = NULL;
  const size_t file_size = 4 * 4096 + 77;
  if (make_temp_file(path, sizeof(path), file_size, 42, &content) != 0)
    CUBE_SKIP("cannot write a temporary file");
  int fds = open_fd_count();
  const uint64_t offset = 4096 + 5;
  const size_t size = 2 * 4096 + 13;
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_bytes_map_file(path, offset, size, &b));
  CHECK(cube__bytes_is_file(b));
  CHECK_EQ_U64(open_fd_count(), fds + 1); /* the buffer holds the file open */
  uint8_t* dst = malloc(size);
  REQUIRE(dst);
  CHECK_OK(cube__bytes_copy_out(b, 0, dst, size));
  CHECK(memcmp(dst, content + offset, size) == 0);
  CHECK_OK(cube__bytes_copy_out(b, 4000, dst, 300)); /* across a page boundary */
  CHECK(memcmp(dst, content + offset + 4000, 300) == 0);
  /* Unlinked: still the same file. */
  unlink(path);
  memset(dst, 0, size);
  CHECK_OK(cube__bytes_copy_out(b, 0, dst, size));
  CHECK(memcmp(dst, content + offset, size) == 0);
  cube_bytes_release(b);
  CHECK_EQ_U64(open_fd_count(), fds); /* and closes it with the last reference */
  free(dst);
  free(content);
  /* An empty region holds no descriptor. */
  if (make_temp_file(path, sizeof(path), 100, 43, &content) != 0)
    CUBE_SKIP("cannot write a temporary file");
  b = NULL;
  REQUIRE_OK(cube_bytes_map_file(path, 100, 0, &b));
  CHECK_EQ_U64(open_fd_count(), fds);
  CHECK_OK(cube__bytes_copy_out(b, 0, NULL, 0));
  cube_bytes_release(b);
  free(content);
  unlink(path);
}

CUBE_TEST(copy_out_file_shrunk_is_an_error) {
  char path[512];
  uint8_t* content = NULL;
  const size_t file_size = 3 * 4096 + 901;
  if (make_temp_file(path, sizeof(path), file_size, 44, &content) != 0)
    CUBE_SKIP("cannot write a temporary file");
  cube_bytes_t* b = NULL;
  REQUIRE_OK(cube_bytes_map_file(path, 100, 0, &b));
  size_t size = file_size - 100;
  REQUIRE(truncate(path, 5000) == 0);
  uint8_t* dst = malloc(size);
  REQUIRE(dst);
  char holds[64];
  snprintf(holds, sizeof(holds), "holds %zu bytes at offset 100", size);
  CHECK_STATUS(cube__bytes_copy_out(b, 0, dst, size), CUBE_STATUS_OUT_OF_RANGE, path, holds,
               "now holds 5000");
  /* What the file still has is readable. */
  CHECK_OK(cube__bytes_copy_out(b, 0, dst, 4900));
  CHECK(memcmp(dst, content + 100, 4900) == 0);
  /* Written into: the size is checked before the mapping is read. */
  ((uint8_t*)cube_bytes_data(b))[0] ^= 0xFF;
  CHECK_STATUS(cube__bytes_copy_out(b, 0, dst, 10), CUBE_STATUS_OUT_OF_RANGE, path,
               "now holds 5000");
  cube_bytes_release(b);
  unlink(path);
  free(dst);
  free(content);
}
