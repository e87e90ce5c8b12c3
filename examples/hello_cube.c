/* hello_cube: upload two vectors, add them with a native CPU kernel, read the
 * sum back and check it. Build against an installed cube:
 *   cc hello_cube.c $(pkg-config --cflags --libs cube)
 */
#include <cube/cube.h>
#include <stdio.h>
#include <string.h>

/* One call per cube: units x of this cube each add one element. */
static int add_kernel(const cube_cpu_cube_t* cube, const cube_cpu_arg_t* args, uint32_t n) {
  (void)n;
  const float* a = args[0].buffer.data;
  const float* b = args[1].buffer.data;
  float* out = args[2].buffer.data;
  uint64_t len = args[2].buffer.len / sizeof(float);
  for (uint32_t u = 0; u < cube->cube_dim[0]; ++u) {
    uint64_t i = (uint64_t)cube->cube_pos[0] * cube->cube_dim[0] + u;
    if (i < len) out[i] = a[i] + b[i];
  }
  return 0;
}

#define CHECK(expr)                                                         \
  do {                                                                      \
    cube_status_t s_ = (expr);                                              \
    if (s_) {                                                               \
      fprintf(stderr, "%s: %s\n", #expr, cube_status_message(s_));          \
      cube_status_free(s_);                                                 \
      return 1;                                                             \
    }                                                                       \
  } while (0)

int main(void) {
  enum { N = 1000 };
  float a[N], b[N];
  for (int i = 0; i < N; ++i) {
    a[i] = (float)i;
    b[i] = 0.5f * (float)i;
  }
  cube_client_t* client;
  cube_device_id_t dev = {cube_backend_default(), 0};
  CHECK(cube_client_load(dev, &client));
  cube_handle_t ha, hb, hout;
  CHECK(cube_client_create_from_slice(client, a, sizeof(a), &ha));
  CHECK(cube_client_create_from_slice(client, b, sizeof(b), &hb));
  CHECK(cube_client_empty(client, sizeof(a), &hout));

  cube_arg_kind_t kinds[] = {CUBE_ARG_BUFFER, CUBE_ARG_BUFFER, CUBE_ARG_BUFFER};
  cube_kernel_desc_t desc = {.name = "add", .cube_dim = {64, 1, 1}, .arg_kinds = kinds, .arg_count = 3, .shared_memory_size = 0, .cpu_fn = add_kernel};
  cube_kernel_t* kernel;
  CHECK(cube_kernel_create(&desc, &kernel));
  cube_arg_t args[] = {cube_arg_buffer(ha), cube_arg_buffer(hb), cube_arg_buffer(hout)};
  CHECK(cube_client_launch(client, kernel, cube_count_static((N + 63) / 64, 1, 1), 3, args));

  cube_bytes_t* out;
  CHECK(cube_client_read_one(client, hout, &out));
  const float* sum = cube_bytes_const_data(out);
  int bad = 0;
  for (int i = 0; i < N; ++i) bad += sum[i] != a[i] + b[i];
  printf("hello_cube: cube %s on %s, %d of %d sums wrong\n", cube_version(),
         cube_client_properties(client)->name, bad, N);

  cube_bytes_release(out);
  cube_kernel_release(kernel);
  cube_handle_release(ha);
  cube_handle_release(hb);
  cube_handle_release(hout);
  cube_client_release(client);
  cube_shutdown();
  return bad != 0;
}
