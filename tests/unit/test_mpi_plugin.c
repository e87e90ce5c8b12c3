// cube-test-libs: cube_static
/* The MPI transport as a plugin (src/collective/mpi.c, mpi_abi.h): a process
 * that does not want MPI never loads the plugin nor MPI; one that wants it and
 * cannot load the plugin gets an UNAVAILABLE status naming every path tried
 * and why (missing file, not a plugin, refused, another interface version);
 * one that wants it and finds it loads it (a singleton MPI process).
 *
 * The world of a process is settled on its first collective, so every case
 * sets its environment first and needs a process of its own (CTest runs one
 * case per process). tests/CMakeLists.txt builds this file twice: linked with
 * libcube.a (test_mpi_plugin) and with libcube.so (test_mpi_plugin_shared,
 * where the plugin is searched next to the library). CUBE_TEST_MPI_PLUGIN is
 * the built plugin (undefined without MPI), CUBE_TEST_FAKE_MPI_PLUGIN a stand-in
 * that refuses to open or answers with another interface version. */
#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "collective/mpi_abi.h"
#include "cube/cube.h"

static cube_device_id_t cpu(uint32_t i) {
  cube_device_id_t d = {CUBE_BACKEND_CPU, i};
  return d;
}

/* No MPI launcher in sight, two CPU devices, then |mpi| and |plugin| (NULL:
 * unset). */
static void setup(const char* mpi, const char* plugin) {
  static const char* const launcher[] = {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                                         "PMI_SIZE", "PMI_RANK", "PMIX_RANK",
                                         "CUBE_COLLECTIVE_RANK", "CUBE_COLLECTIVE_RANKS"};
  for (size_t i = 0; i < sizeof(launcher) / sizeof(launcher[0]); ++i) unsetenv(launcher[i]);
  setenv("CUBE_CPU_DEVICES", "2", 1);
  if (mpi)
    setenv("CUBE_COLLECTIVE_MPI", mpi, 1);
  else
    unsetenv("CUBE_COLLECTIVE_MPI");
  if (plugin)
    setenv("CUBE_MPI_PLUGIN", plugin, 1);
  else
    unsetenv("CUBE_MPI_PLUGIN");
}

//===----------------------------------------------------------------------===//
// What is loaded
//===----------------------------------------------------------------------===//

typedef struct {
  const char* needle;
  char found[512];
} loaded_t;

static int loaded_cb(struct dl_phdr_info* info, size_t size, void* arg) {
  (void)size;
  loaded_t* l = arg;
  const char* name = info->dlpi_name ? info->dlpi_name : "";
  const char* base = strrchr(name, '/');
  base = base ? base + 1 : name;
  if (strncmp(base, l->needle, strlen(l->needle)) == 0) {
    snprintf(l->found, sizeof(l->found), "%s", name);
    return 1;
  }
  return 0;
}

/* The path of the loaded object whose file name starts with |prefix|; NULL if
 * none. Also checks /proc/self/maps, which sees any mapping of the file. */
static const char* loaded(const char* prefix) {
  static loaded_t l;
  memset(&l, 0, sizeof(l));
  l.needle = prefix;
  if (dl_iterate_phdr(loaded_cb, &l)) return l.found;
  FILE* f = fopen("/proc/self/maps", "r");
  if (!f) return NULL;
  char line[1024];
  bool hit = false;
  while (!hit && fgets(line, sizeof(line), f)) {
    char* path = strchr(line, '/');
    if (!path) continue;
    char* base = strrchr(path, '/') + 1;
    if (strncmp(base, prefix, strlen(prefix)) == 0) {
      path[strcspn(path, "\n")] = '\0';
      snprintf(l.found, sizeof(l.found), "%s", path);
      hit = true;
    }
  }
  fclose(f);
  return hit ? l.found : NULL;
}

/* Neither the plugin nor any part of Open MPI / MPICH is in the process. */
static void check_no_mpi_loaded(void) {
  static const char* const libs[] = {"libcube_mpi", "libmpi", "libopen-pal", "libopen-rte",
                                     "libpmix"};
  for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); ++i) {
    const char* p = loaded(libs[i]);
    if (p) {
      fprintf(stderr, "%s is loaded (%s) in a process that does not use MPI\n", libs[i], p);
      cube_test_failures++;
    }
  }
}

//===----------------------------------------------------------------------===//
// Collectives on the two CPU devices of this process
//===----------------------------------------------------------------------===//

/* all_reduce (i32 sum, odd size, random data) over cpu:0 and cpu:1, then a
 * send/recv from cpu:1 to cpu:0, both checked against the host. */
static void local_collectives(uint64_t seed) {
  cube_client_t* c[2] = {NULL, NULL};
  REQUIRE_OK(cube_client_load(cpu(0), &c[0]));
  REQUIRE_OK(cube_client_load(cpu(1), &c[1]));
  enum { N = 4099 };
  static int32_t in[2][N], want[N];
  uint64_t rng = seed;
  for (int d = 0; d < 2; ++d)
    for (int i = 0; i < N; ++i) in[d][i] = (int32_t)(cube_test_rand(&rng) >> 40) - (1 << 22);
  for (int i = 0; i < N; ++i) want[i] = in[0][i] + in[1][i];
  cube_handle_t h[2];
  for (int d = 0; d < 2; ++d) REQUIRE_OK(cube_client_create_from_slice(c[d], in[d], sizeof(in[d]),
                                                                       &h[d]));
  cube_device_id_t ids[2] = {cpu(1), cpu(0)};
  for (int d = 0; d < 2; ++d)
    CHECK_OK(cube_client_all_reduce(c[d], h[d], h[d], CUBE_DTYPE_I32, 2, ids, CUBE_REDUCE_SUM));
  for (int d = 0; d < 2; ++d) CHECK_OK(cube_client_sync_collective(c[d]));
  for (int d = 0; d < 2; ++d) {
    cube_bytes_t* b = NULL;
    CHECK_OK(cube_client_read_one(c[d], h[d], &b));
    if (!b) continue;
    CHECK_EQ_U64(cube_bytes_size(b), sizeof(want));
    CHECK(memcmp(cube_bytes_const_data(b), want, sizeof(want)) == 0);
    cube_bytes_release(b);
  }
  /* cpu:1's original data to cpu:0. */
  cube_handle_t s, r;
  REQUIRE_OK(cube_client_create_from_slice(c[1], in[1], sizeof(in[1]), &s));
  REQUIRE_OK(cube_client_create_from_slice(c[0], in[0], sizeof(in[0]), &r));
  CHECK_OK(cube_client_recv(c[0], r, cpu(1)));
  CHECK_OK(cube_client_send(c[1], s, cpu(0)));
  for (int d = 0; d < 2; ++d) CHECK_OK(cube_client_sync_collective(c[d]));
  cube_bytes_t* b = NULL;
  CHECK_OK(cube_client_read_one(c[0], r, &b));
  if (b) {
    CHECK(cube_bytes_size(b) == sizeof(in[1]) &&
          memcmp(cube_bytes_const_data(b), in[1], sizeof(in[1])) == 0);
    cube_bytes_release(b);
  }
  cube_handle_release(s);
  cube_handle_release(r);
  for (int d = 0; d < 2; ++d) {
    cube_handle_release(h[d]);
    CHECK_OK(cube_client_sync(c[d]));
    cube_client_release(c[d]);
  }
}

//===----------------------------------------------------------------------===//
// Not wanted: never loaded
//===----------------------------------------------------------------------===//

/* Even with the plugin named and findable, a process that no launcher started
 * keeps to itself: rank 0 of 1, local collectives work, no MPI in sight. */
CUBE_TEST(not_wanted_never_loads_plugin) {
#ifdef CUBE_TEST_MPI_PLUGIN
  setup(NULL, CUBE_TEST_MPI_PLUGIN);
#else
  setup(NULL, NULL);
#endif
  uint32_t rank = 9, ranks = 9, local = 9;
  CHECK_OK(cube_collective_world(&rank, &ranks, &local));
  CHECK_EQ_U64(rank, 0);
  CHECK_EQ_U64(ranks, 1);
  local_collectives(0x5EED01);
  check_no_mpi_loaded();
  cube_shutdown();
  check_no_mpi_loaded();
}

/* CUBE_COLLECTIVE_MPI=0 wins over a launcher's variables. */
CUBE_TEST(disabled_under_launcher_never_loads_plugin) {
#ifdef CUBE_TEST_MPI_PLUGIN
  setup("0", CUBE_TEST_MPI_PLUGIN);
#else
  setup("0", NULL);
#endif
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  setenv("PMIX_RANK", "1", 1);
  uint32_t rank = 9, ranks = 9, local = 9;
  CHECK_OK(cube_collective_world(&rank, &ranks, &local));
  CHECK_EQ_U64(rank, 0);
  CHECK_EQ_U64(ranks, 1);
  local_collectives(0x5EED02);
  check_no_mpi_loaded();
  cube_shutdown();
}

//===----------------------------------------------------------------------===//
// Wanted, not loadable: a status naming what was tried
//===----------------------------------------------------------------------===//

/* Expects the world and an all_reduce over the local devices both to fail
 * with UNAVAILABLE naming |a|, |b|, |c| and the way out. */
static void check_unavailable(const char* a, const char* b, const char* c) {
  uint32_t rank, ranks, local;
  CHECK_STATUS(cube_collective_world(&rank, &ranks, &local), CUBE_STATUS_UNAVAILABLE,
               "collectives: ", a, b, c, "could not be loaded", "CUBE_COLLECTIVE_MPI=0");
  /* Asked again (the first failure is not cached as success, nor a crash). */
  CHECK_STATUS(cube_collective_world(&rank, &ranks, &local), CUBE_STATUS_UNAVAILABLE, a, b);
  cube_client_t* cl = NULL;
  REQUIRE_OK(cube_client_load(cpu(0), &cl));
  int32_t x[5] = {1, 2, 3, 4, 5};
  cube_handle_t h;
  REQUIRE_OK(cube_client_create_from_slice(cl, x, sizeof(x), &h));
  cube_device_id_t ids[2] = {cpu(0), cpu(1)};
  CHECK_STATUS(cube_client_all_reduce(cl, h, h, CUBE_DTYPE_I32, 2, ids, CUBE_REDUCE_SUM),
               CUBE_STATUS_UNAVAILABLE, a, b);
  cube_handle_release(h);
  CHECK_OK(cube_client_sync(cl));
  cube_client_release(cl);
  check_no_mpi_loaded();
  cube_shutdown();
}

CUBE_TEST(wanted_missing_plugin_is_unavailable) {
  setup("1", "/nonexistent/libcube_mpi.so");
  check_unavailable("CUBE_COLLECTIVE_MPI=1", "CUBE_MPI_PLUGIN=/nonexistent/libcube_mpi.so",
                    "No such file");
}

/* Started by a launcher (its variable named), plugin missing. */
CUBE_TEST(launcher_missing_plugin_is_unavailable) {
  setup(NULL, "/nonexistent/libcube_mpi.so");
  setenv("PMI_SIZE", "2", 1);
  check_unavailable("started by an MPI launcher (PMI_SIZE is set)",
                    "CUBE_MPI_PLUGIN=/nonexistent/libcube_mpi.so", "No such file");
}

/* A shared library that is not a plugin (no entry point). */
CUBE_TEST(wanted_not_a_plugin_is_unavailable) {
  setup("1", "libm.so.6");
  check_unavailable("CUBE_MPI_PLUGIN=libm.so.6", "no " CUBE__MPI_PLUGIN_ENTRY, "not cube's");
}

CUBE_TEST(wanted_plugin_refuses_is_unavailable) {
#ifndef CUBE_TEST_FAKE_MPI_PLUGIN
  CUBE_SKIP("the stand-in plugin is not built");
#else
  setup("1", CUBE_TEST_FAKE_MPI_PLUGIN);
  setenv("CUBE_TEST_FAKE_MPI_PLUGIN_MODE", "refuse", 1);
  char want[80];
  snprintf(want, sizeof(want), "the stand-in refuses interface version %u", CUBE__MPI_PLUGIN_ABI);
  check_unavailable("CUBE_MPI_PLUGIN=" CUBE_TEST_FAKE_MPI_PLUGIN, want, "");
#endif
}

CUBE_TEST(wanted_plugin_other_abi_is_unavailable) {
#ifndef CUBE_TEST_FAKE_MPI_PLUGIN
  CUBE_SKIP("the stand-in plugin is not built");
#else
  setup("1", CUBE_TEST_FAKE_MPI_PLUGIN);
  setenv("CUBE_TEST_FAKE_MPI_PLUGIN_MODE", "abi", 1);
  /* The stand-in answers with the next version (the numbers follow
   * CUBE__MPI_PLUGIN_ABI). */
  char theirs[80], ours[80];
  snprintf(theirs, sizeof(theirs), "interface version %u with a", CUBE__MPI_PLUGIN_ABI + 1);
  snprintf(ours, sizeof(ours), "the library needs %u", CUBE__MPI_PLUGIN_ABI);
  check_unavailable("CUBE_MPI_PLUGIN=" CUBE_TEST_FAKE_MPI_PLUGIN, theirs, ours);
#endif
}

/* Without CUBE_MPI_PLUGIN the places searched are named in order: next to the
 * program (this one is linked with libcube.a, in tests/, where no plugin is),
 * the install directory, the loader's path. */
CUBE_TEST(search_names_every_path) {
#ifdef CUBE_TEST_LINKED_SHARED
  CUBE_SKIP("the case of the program linked with libcube.a");
#else
  char installed[4096];
  snprintf(installed, sizeof(installed), "%s/%s", CUBE_MPI_PLUGIN_DIR, CUBE__MPI_PLUGIN_FILE);
  if (access(installed, F_OK) == 0)
    CUBE_SKIP("a plugin is installed (%s): the search would find it", installed);
  setup("1", NULL);
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  REQUIRE(n > 0);
  exe[n] = '\0';
  *strrchr(exe, '/') = '\0';
  char next[2 * sizeof(exe) + 128], sub[2 * sizeof(installed) + 128];
  snprintf(next, sizeof(next), "tried %s/%s (absent); %s/cube/%s (absent); ", exe,
           CUBE__MPI_PLUGIN_FILE, exe, CUBE__MPI_PLUGIN_FILE);
  snprintf(sub, sizeof(sub), "%s (absent); %s on the loader's search path (", installed,
           CUBE__MPI_PLUGIN_FILE);
  check_unavailable(next, sub, "; set CUBE_MPI_PLUGIN to its path");
#endif
}

//===----------------------------------------------------------------------===//
// Wanted and found
//===----------------------------------------------------------------------===//

/* One process, CUBE_COLLECTIVE_MPI=1: MPI starts as a singleton (rank 0 of 1)
 * through the plugin, which is now loaded, with MPI: the loaded-objects check
 * above sees what it looks for. The shared build finds the plugin next to
 * libcube.so (no CUBE_MPI_PLUGIN), the static one through CUBE_MPI_PLUGIN. */
CUBE_TEST(wanted_loads_plugin) {
#ifndef CUBE_TEST_MPI_PLUGIN
  CUBE_SKIP("cube was built without MPI: no plugin");
#else
#ifdef CUBE_TEST_LINKED_SHARED
  setup("1", NULL);
#else
  setup("1", CUBE_TEST_MPI_PLUGIN);
#endif
  /* A singleton as root (CI) needs Open MPI's consent. */
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  setenv("OMPI_MCA_btl", "self,vader", 0);
  CHECK(loaded("libcube_mpi") == NULL);
  uint32_t rank = 9, ranks = 9, local = 9;
  REQUIRE_OK(cube_collective_world(&rank, &ranks, &local));
  CHECK_EQ_U64(rank, 0);
  CHECK_EQ_U64(ranks, 1);
  const char* p = loaded("libcube_mpi");
  CHECK(p != NULL);
  if (p) {
    char want[4096], got[4096];
    CHECK(realpath(CUBE_TEST_MPI_PLUGIN, want) && realpath(p, got) && strcmp(want, got) == 0);
  }
  CHECK(loaded("libmpi") != NULL);
  local_collectives(0x5EED03);
  cube_shutdown();
#endif
}
