/* Host byte buffers (CubeCL's Bytes): a reference-counted owner of a block of
 * host memory that knows how the block was obtained and how to give it back.
 *
 *   NATIVE  from cube_bytes_allocate/_from_copy/cube__bytes_allocate_uninit:
 *           header and data share one heap block; the data is 64-byte aligned.
 *   FILE    a private (copy-on-write) mapping of a file region; the mapping
 *           starts at the page boundary at or below the requested offset.
 *           The buffer keeps the file open: the library reads the contents
 *           with pread (cube__bytes_copy_out), never through the mapping,
 *           because a page of the mapping past the end of a file that shrank
 *           raises SIGBUS where pread returns short.
 *   any     cube__bytes_make / cube_bytes_wrap: external memory given back
 *           through the caller's release callback.
 *
 * Counting: increments are relaxed (a new reference is made from an existing
 * one), decrements acq_rel so that the thread that drops the last reference
 * sees every write made through the others before it releases the memory.
 */
#include "base/bytes.h"
#include "base/alloc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"

/* Copies from this size on map their pages first (cube_bytes_from_copy). */
#define CUBE__BYTES_PREFAULT_MIN ((size_t)1 << 20)

#define CUBE__BYTES_ALIGN 64

typedef enum cube__bytes_storage_e {
  CUBE__BYTES_INLINE = 0,   /* data follows the header in the same block */
  CUBE__BYTES_EXTERNAL = 1, /* data owned elsewhere; |release| gives it back */
  CUBE__BYTES_MAPPED = 2,   /* a file mapping: munmap(map_base, map_len) */
} cube__bytes_storage_t;

struct cube_bytes_s {
  atomic_uint refs;
  cube_bytes_property_t property;
  cube__bytes_storage_t storage;
  void* data;
  size_t size;
  cube_bytes_release_fn release; /* EXTERNAL only; may be NULL */
  void* user;
  void* map_base; /* MAPPED only; NULL for a 0-byte region (nothing mapped) */
  size_t map_len;
  int fd;                 /* MAPPED only: the file, kept open for pread; -1 when size 0 */
  uint64_t file_offset;   /* MAPPED only: where data starts in the file */
  atomic_bool written;    /* MAPPED only: cube_bytes_data was called (pages may be private) */
  char path[];            /* MAPPED only: the path, for messages */
};

/* What an inline block holds besides the data: the header, and room to
 * start the data at the next 64-byte boundary wherever malloc put the block. */
#define CUBE__BYTES_HEADER (sizeof(struct cube_bytes_s) + CUBE__BYTES_ALIGN - 1)

/* Where an empty buffer points, so that data is never NULL. Zero bytes of it
 * are ever read or written. */
static char cube__bytes_empty[CUBE__BYTES_ALIGN] __attribute__((aligned(CUBE__BYTES_ALIGN)));

static bool cube__bytes_property_valid(cube_bytes_property_t property) {
  return (unsigned)property <= (unsigned)CUBE_BYTES_OTHER;
}

const char* cube_bytes_property_name(cube_bytes_property_t property) {
  switch (property) {
    case CUBE_BYTES_NATIVE: return "native";
    case CUBE_BYTES_PINNED: return "pinned";
    case CUBE_BYTES_FILE: return "file";
    case CUBE_BYTES_OTHER: return "other";
  }
  return "unknown";
}

/* One block from malloc (or calloc): the header at its start, then |size|
 * bytes at the first 64-byte boundary after the header. malloc's own
 * alignment (16) plus up to 63 bytes of slack costs less than
 * posix_memalign, whose aligned path is several times slower for the small
 * buffers of reads. */
static cube_status_t cube__bytes_native(const char* fn, size_t size, bool zero,
                                        cube_bytes_t** out_bytes) {
  if (!out_bytes) return CUBE_INVALID("%s: out_bytes is NULL", fn);
  if (size > SIZE_MAX - CUBE__BYTES_HEADER)
    return CUBE_INVALID("%s: size %zu is too large", fn, size);
  size_t total = CUBE__BYTES_HEADER + size;
  void* block = zero ? calloc(1, total) : malloc(total);
  if (!block)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                             "%s: cannot allocate %zu bytes of host memory", fn, size);
  struct cube_bytes_s* b = block;
  memset(b, 0, sizeof(*b));
  atomic_init(&b->refs, 1);
  b->property = CUBE_BYTES_NATIVE;
  b->storage = CUBE__BYTES_INLINE;
  b->data = (void*)(((uintptr_t)block + sizeof(*b) + CUBE__BYTES_ALIGN - 1) &
                    ~(uintptr_t)(CUBE__BYTES_ALIGN - 1));
  b->size = size;
  *out_bytes = b;
  return CUBE_OK;
}

cube_status_t cube_bytes_allocate(size_t size, cube_bytes_t** out_bytes) {
  return cube__bytes_native("cube_bytes_allocate", size, true, out_bytes);
}

cube_status_t cube__bytes_allocate_uninit(size_t size, cube_bytes_t** out_bytes) {
  return cube__bytes_native("cube__bytes_allocate_uninit", size, false, out_bytes);
}

cube_status_t cube_bytes_from_copy(const void* data, size_t size, cube_bytes_t** out_bytes) {
  if (!out_bytes) return CUBE_INVALID("cube_bytes_from_copy: out_bytes is NULL");
  if (!data && size > 0)
    return CUBE_INVALID("cube_bytes_from_copy: data is NULL with size %zu", size);
  cube_bytes_t* b = NULL;
  CUBE_RETURN_IF_ERROR(cube__bytes_native("cube_bytes_from_copy", size, false, &b));
  /* A large block is fresh memory (malloc maps it anew): its pages, and any
   * of the source's not mapped yet, are mapped in one call each rather than
   * one fault per 4 KiB inside the copy (cube__prefault). */
  if (size >= CUBE__BYTES_PREFAULT_MIN) {
    cube__prefault(b->data, size, true);
    cube__prefault(data, size, false);
  }
  if (size) memcpy(b->data, data, size);
  *out_bytes = b;
  return CUBE_OK;
}

static cube_status_t cube__bytes_external(const char* fn, cube_bytes_property_t property,
                                          void* data, size_t size,
                                          cube_bytes_release_fn release, void* user,
                                          cube_bytes_t** out_bytes) {
  if (!out_bytes) return CUBE_INVALID("%s: out_bytes is NULL", fn);
  if (!cube__bytes_property_valid(property))
    return CUBE_INVALID("%s: property %d is not a cube_bytes_property_t", fn, (int)property);
  if (!data && size > 0) return CUBE_INVALID("%s: data is NULL with size %zu", fn, size);
  struct cube_bytes_s* b = calloc(1, sizeof(*b));
  if (!b)
    return cube__status_make(CUBE_STATUS_OUT_OF_MEMORY, "%s: cannot allocate a buffer header",
                             fn);
  atomic_init(&b->refs, 1);
  b->property = property;
  b->storage = CUBE__BYTES_EXTERNAL;
  b->data = data ? data : (void*)cube__bytes_empty;
  b->size = size;
  b->release = release;
  b->user = user;
  *out_bytes = b;
  return CUBE_OK;
}

cube_status_t cube__bytes_make(cube_bytes_property_t property, void* data, size_t size,
                               cube_bytes_release_fn release, void* user,
                               cube_bytes_t** out_bytes) {
  return cube__bytes_external("cube__bytes_make", property, data, size, release, user,
                              out_bytes);
}

cube_status_t cube_bytes_wrap(void* data, size_t size, cube_bytes_release_fn release, void* user,
                              cube_bytes_t** out_bytes) {
  return cube__bytes_external("cube_bytes_wrap", CUBE_BYTES_OTHER, data, size, release, user,
                              out_bytes);
}

/* Files ------------------------------------------------------------------ */

static cube_status_t cube__bytes_open_error(const char* path, int err) {
  cube_status_code_t code;
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      code = CUBE_STATUS_NOT_FOUND;
      break;
    case EACCES:
    case EPERM:
      code = CUBE_STATUS_FAILED_PRECONDITION;
      break;
    case ENAMETOOLONG:
    case ELOOP:
      code = CUBE_STATUS_INVALID_ARGUMENT;
      break;
    case ENOMEM:
      code = CUBE_STATUS_OUT_OF_MEMORY;
      break;
    default:
      code = CUBE_STATUS_UNAVAILABLE;
      break;
  }
  return cube__status_make(code, "cube_bytes_map_file: cannot open '%s': %s", path,
                           strerror(err));
}

cube_status_t cube_bytes_map_file(const char* path, uint64_t offset, size_t size,
                                  cube_bytes_t** out_bytes) {
  if (!path) return CUBE_INVALID("cube_bytes_map_file: path is NULL");
  if (!*path) return CUBE_INVALID("cube_bytes_map_file: path is empty");
  if (!out_bytes) return CUBE_INVALID("cube_bytes_map_file: out_bytes is NULL ('%s')", path);

  int fd;
  do {
    fd = open(path, O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return cube__bytes_open_error(path, errno);

  cube_status_t status = CUBE_OK;
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    status = cube__status_make(CUBE_STATUS_UNAVAILABLE, "cube_bytes_map_file: cannot stat '%s': %s",
                               path, strerror(err));
    goto done;
  }
  if (!S_ISREG(st.st_mode)) {
    status = CUBE_INVALID("cube_bytes_map_file: '%s' is not a regular file", path);
    goto done;
  }
  uint64_t file_len = (uint64_t)st.st_size;
  if (offset > file_len) {
    status = cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                               "cube_bytes_map_file: '%s': offset %" PRIu64 " (size %zu) is past "
                               "the end of the file (length %" PRIu64 ")",
                               path, offset, size, file_len);
    goto done;
  }
  uint64_t avail = file_len - offset;
  if (size == 0) {
    if (avail > (uint64_t)SIZE_MAX) {
      status = cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                                 "cube_bytes_map_file: '%s': %" PRIu64 " bytes from offset %" PRIu64
                                 " do not fit in memory (file length %" PRIu64 ")",
                                 path, avail, offset, file_len);
      goto done;
    }
    size = (size_t)avail;
  } else if ((uint64_t)size > avail) {
    status = cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                               "cube_bytes_map_file: '%s': offset %" PRIu64 " + size %zu is past "
                               "the end of the file (length %" PRIu64 ")",
                               path, offset, size, file_len);
    goto done;
  }

  void* map_base = NULL;
  size_t map_len = 0;
  void* data = cube__bytes_empty;
  if (size > 0) {
    long page = sysconf(_SC_PAGESIZE);
    uint64_t page_size = page > 0 ? (uint64_t)page : 4096;
    uint64_t base_offset = offset - offset % page_size;
    size_t delta = (size_t)(offset - base_offset);
    if (size > SIZE_MAX - delta) {
      status = CUBE_INVALID("cube_bytes_map_file: '%s': size %zu is too large", path, size);
      goto done;
    }
    map_len = delta + size;
    map_base = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, (off_t)base_offset);
    if (map_base == MAP_FAILED) {
      int err = errno;
      status = cube__status_make(err == ENOMEM ? CUBE_STATUS_OUT_OF_MEMORY : CUBE_STATUS_UNAVAILABLE,
                                 "cube_bytes_map_file: cannot map '%s' (offset %" PRIu64
                                 ", size %zu): %s",
                                 path, offset, size, strerror(err));
      goto done;
    }
    data = (char*)map_base + delta;
  }

  size_t path_len = strlen(path);
  struct cube_bytes_s* b = calloc(1, sizeof(*b) + path_len + 1);
  if (!b) {
    if (map_base) munmap(map_base, map_len);
    status = cube__status_make(CUBE_STATUS_OUT_OF_MEMORY,
                               "cube_bytes_map_file: cannot allocate a buffer header ('%s')", path);
    goto done;
  }
  atomic_init(&b->refs, 1);
  b->property = CUBE_BYTES_FILE;
  b->storage = CUBE__BYTES_MAPPED;
  b->data = data;
  b->size = size;
  b->map_base = map_base;
  b->map_len = map_len;
  b->file_offset = offset;
  atomic_init(&b->written, false);
  memcpy(b->path, path, path_len + 1);
  /* An empty region has nothing to read: no descriptor held. */
  b->fd = size > 0 ? fd : -1;
  if (size > 0) fd = -1;
  *out_bytes = b;

done:
  if (fd >= 0) close(fd);
  return status;
}

/* Counting and access ------------------------------------------------------ */

cube_bytes_t* cube_bytes_retain(cube_bytes_t* bytes) {
  if (bytes) atomic_fetch_add_explicit(&bytes->refs, 1, memory_order_relaxed);
  return bytes;
}

static void cube__bytes_destroy(struct cube_bytes_s* b) {
  switch (b->storage) {
    case CUBE__BYTES_INLINE:
      free(b);
      return;
    case CUBE__BYTES_EXTERNAL:
      if (b->release)
        b->release(b->user, b->data == (void*)cube__bytes_empty ? NULL : b->data, b->size);
      free(b);
      return;
    case CUBE__BYTES_MAPPED:
      if (b->map_base) munmap(b->map_base, b->map_len);
      if (b->fd >= 0) close(b->fd);
      free(b);
      return;
  }
}

void cube_bytes_release(cube_bytes_t* bytes) {
  if (!bytes) return;
  if (atomic_fetch_sub_explicit(&bytes->refs, 1, memory_order_acq_rel) == 1)
    cube__bytes_destroy(bytes);
}

void cube_bytes_release_array(cube_bytes_t** bytes, size_t count) {
  if (!bytes) return;
  for (size_t i = 0; i < count; ++i) {
    cube_bytes_release(bytes[i]);
    bytes[i] = NULL;
  }
}

void* cube_bytes_data(cube_bytes_t* bytes) {
  if (!bytes) return NULL;
  /* Writes through the pointer land in private pages the file does not
   * hold: from now on the mapping, not the file, is the content. */
  if (bytes->storage == CUBE__BYTES_MAPPED &&
      !atomic_load_explicit(&bytes->written, memory_order_relaxed))
    atomic_store_explicit(&bytes->written, true, memory_order_relaxed);
  return bytes->data;
}

const void* cube_bytes_const_data(const cube_bytes_t* bytes) {
  return bytes ? bytes->data : NULL;
}

size_t cube_bytes_size(const cube_bytes_t* bytes) { return bytes ? bytes->size : 0; }

cube_bytes_property_t cube_bytes_property(const cube_bytes_t* bytes) {
  return bytes ? bytes->property : CUBE_BYTES_NATIVE;
}

bool cube__bytes_owns_data(const cube_bytes_t* b) {
  return b && (b->storage != CUBE__BYTES_EXTERNAL || b->release != NULL);
}

/* Reading the contents ------------------------------------------------------ */

/* The file of |b| must still hold its whole region; else OUT_OF_RANGE. */
static cube_status_t cube__bytes_file_check(const struct cube_bytes_s* b, const char* what) {
  struct stat st;
  if (fstat(b->fd, &st) != 0) {
    int err = errno;
    return cube__status_make(CUBE_STATUS_UNAVAILABLE, "%s of '%s': cannot stat the file: %s",
                             what, b->path, strerror(err));
  }
  uint64_t need = b->file_offset + (uint64_t)b->size;
  if ((uint64_t)st.st_size < need)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "%s of '%s': the file shrank after it was mapped: the buffer holds "
                             "%zu bytes at offset %" PRIu64 ", which needs a file of %" PRIu64
                             " bytes; the file now holds %" PRIu64,
                             what, b->path, b->size, b->file_offset, need, (uint64_t)st.st_size);
  return CUBE_OK;
}

cube_status_t cube__bytes_copy_out(const cube_bytes_t* b, size_t offset, void* dst, size_t n) {
  static const char* what = "reading a file-mapped buffer";
  if (!b) return CUBE_INVALID("cube__bytes_copy_out: bytes is NULL");
  if (offset > b->size || n > b->size - offset)
    return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                             "cube__bytes_copy_out: %zu bytes at offset %zu of a buffer of %zu",
                             n, offset, b->size);
  if (n == 0) return CUBE_OK;
  if (!dst) return CUBE_INVALID("cube__bytes_copy_out: dst is NULL for %zu bytes", n);
  if (b->storage != CUBE__BYTES_MAPPED || b->fd < 0) {
    memcpy(dst, (const char*)b->data + offset, n);
    return CUBE_OK;
  }
  if (atomic_load_explicit(&b->written, memory_order_relaxed)) {
    /* Written-to pages are private copies the file does not have: copy from
     * the mapping, once the file is seen to still cover all of it (the pages
     * not written still read the file). */
    CUBE_RETURN_IF_ERROR(cube__bytes_file_check(b, what));
    memcpy(dst, (const char*)b->data + offset, n);
    return CUBE_OK;
  }
  uint64_t pos = b->file_offset + offset;
  size_t done = 0;
  while (done < n) {
    size_t chunk = n - done;
    if (chunk > ((size_t)1 << 30)) chunk = (size_t)1 << 30;
    ssize_t r = pread(b->fd, (char*)dst + done, chunk, (off_t)(pos + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int err = errno;
      return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                               "%s of '%s': read of %zu bytes at file offset %" PRIu64
                               " failed: %s",
                               what, b->path, chunk, pos + done, strerror(err));
    }
    if (r == 0) {
      /* End of file before the region's end: the file shrank. */
      cube_status_t st = cube__bytes_file_check(b, what);
      if (st) return st;
      return cube__status_make(CUBE_STATUS_OUT_OF_RANGE,
                               "%s of '%s': the file ended after %zu of %zu bytes read from "
                               "offset %" PRIu64,
                               what, b->path, done, n, pos);
    }
    done += (size_t)r;
  }
  return CUBE_OK;
}

bool cube__bytes_is_file(const cube_bytes_t* b) { return b && b->storage == CUBE__BYTES_MAPPED; }
