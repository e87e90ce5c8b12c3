/* Built by the install test against an installed libcube.so: with
 * CUBE_COLLECTIVE_MPI=1, cube_collective_world must find the MPI plugin next
 * to the library (<libdir>/cube/libcube_mpi.so) and start MPI as a singleton.
 * Prints the world and the plugin's path; exits 1 on failure. */
#define _GNU_SOURCE
#include <link.h>
#include <stdio.h>
#include <string.h>

#include <cube/cube.h>

static int find_plugin(struct dl_phdr_info* info, size_t size, void* arg) {
  (void)size;
  if (info->dlpi_name && strstr(info->dlpi_name, "/libcube_mpi.so")) {
    *(const char**)arg = info->dlpi_name;
    return 1;
  }
  return 0;
}

int main(void) {
  uint32_t rank = 0, ranks = 0, local = 0;
  cube_status_t s = cube_collective_world(&rank, &ranks, &local);
  if (s) {
    fprintf(stderr, "cube_collective_world: %s\n", cube_status_message(s));
    cube_status_free(s);
    return 1;
  }
  const char* plugin = NULL;
  dl_iterate_phdr(find_plugin, &plugin);
  printf("rank %u of %u, plugin %s\n", rank, ranks, plugin ? plugin : "(not loaded)");
  cube_shutdown();
  return plugin && ranks == 1 ? 0 : 1;
}
