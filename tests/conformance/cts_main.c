#include <stdlib.h>
#include <string.h>

#include "cts.h"

static const cts_backend_t cts_backends[] = {
    {"cpu", CUBE_BACKEND_CPU, "threaded"},
    {"cpu-inline", CUBE_BACKEND_CPU, "inline"},
};

static const cts_backend_t* cts_current = &cts_backends[0];

const cts_backend_t* cts_backend(void) { return cts_current; }

cube_device_id_t cts_device(uint32_t index) {
  cube_device_id_t id = {cts_current->backend, index};
  return id;
}

int cts_read_equals(cube_client_t* c, cube_handle_t h, const void* expect, size_t n) {
  cube_bytes_t* b = NULL;
  cube_status_t s = cube_client_read_one(c, h, &b);
  if (s) {
    fprintf(stderr, "cts_read_equals: read failed: %s\n", cube_status_message(s));
    cube_status_free(s);
    return 0;
  }
  int ok = cube_bytes_size(b) == n && memcmp(cube_bytes_const_data(b), expect, n) == 0;
  if (!ok)
    fprintf(stderr, "cts_read_equals: %zu bytes read, %zu expected, contents %s\n",
            cube_bytes_size(b), n, cube_bytes_size(b) == n ? "differ" : "-");
  cube_bytes_release(b);
  return ok;
}

/* Picks the backend from "--backend NAME" and removes the two arguments. */
int cube_test_main_hook(int* argc, char*** argv) {
  char** a = *argv;
  if (*argc >= 3 && strcmp(a[1], "--backend") == 0) {
    const char* name = a[2];
    cts_current = NULL;
    for (size_t i = 0; i < sizeof(cts_backends) / sizeof(cts_backends[0]); ++i)
      if (strcmp(cts_backends[i].name, name) == 0) cts_current = &cts_backends[i];
    if (!cts_current) {
      fprintf(stderr, "cube_cts: unknown backend '%s'\n", name);
      return 2;
    }
    for (int i = 3; i <= *argc; ++i) a[i - 2] = a[i];
    *argc -= 2;
  }
  if (cts_current->queue_mode) setenv("CUBE_DEVICE_QUEUE", cts_current->queue_mode, 1);
  return 0;
}
