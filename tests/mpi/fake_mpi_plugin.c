/* A stand-in for libcube_mpi.so (tests/unit/test_mpi_plugin.c): its entry
 * point refuses to open (CUBE_TEST_FAKE_MPI_PLUGIN_MODE=refuse) or answers
 * with a table of the next interface version (=abi), so the loader's checks
 * run without MPI. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective/mpi_abi.h"

__attribute__((visibility("default"))) const cube__mpi_plugin_t* cube_mpi_plugin_open(
    uint32_t abi, const cube__mpi_host_t* host, char* why, size_t why_size);

const cube__mpi_plugin_t* cube_mpi_plugin_open(uint32_t abi, const cube__mpi_host_t* host,
                                               char* why, size_t why_size) {
  (void)host;
  static cube__mpi_plugin_t next;
  const char* mode = getenv("CUBE_TEST_FAKE_MPI_PLUGIN_MODE");
  if (mode && strcmp(mode, "abi") == 0) {
    next.abi = abi + 1;
    next.size = sizeof(next);
    return &next;
  }
  snprintf(why, why_size, "the stand-in refuses interface version %u", abi);
  return NULL;
}
