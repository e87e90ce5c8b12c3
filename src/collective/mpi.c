/* The MPI transport's loader: libcube never links MPI. A process that wants
 * MPI (started by an MPI launcher, or CUBE_COLLECTIVE_MPI=1) loads the plugin
 * libcube_mpi.so (src/collective/mpi_plugin/, built when CMake finds MPI) on
 * its first collective, checks its interface version and hands it the host
 * table (mpi_abi.h); every other process never loads it, nor MPI.
 *
 * Where the plugin is searched, first that loads wins:
 *  1. CUBE_MPI_PLUGIN (a path): only there;
 *  2. next to the file that holds libcube (libcube.so, or the program linked
 *     with libcube.a): <dir>/libcube_mpi.so, then <dir>/cube/libcube_mpi.so
 *     (a relocated install: lib/libcube.so and lib/cube/libcube_mpi.so);
 *  3. the install directory (CUBE_MPI_PLUGIN_DIR, the build's
 *     ${CMAKE_INSTALL_FULL_LIBDIR}/cube);
 *  4. the dynamic loader's own search (LD_LIBRARY_PATH, ...).
 * A failure is an UNAVAILABLE status that lists every path tried and why.
 */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/options.h"
#include "base/status.h"
#include "collective/collective.h"
#include "platform/platform.h"

#ifndef CUBE_MPI_PLUGIN_DIR
#define CUBE_MPI_PLUGIN_DIR "/usr/local/lib/cube"
#endif

//===----------------------------------------------------------------------===//
// The host table
//===----------------------------------------------------------------------===//

static const char* cube__mpi_host_dtype_name(uint32_t dtype) {
  return cube_dtype_name((cube_dtype_t)dtype);
}
static const char* cube__mpi_host_op_name(uint32_t op) {
  return cube_reduce_op_name((cube_reduce_op_t)op);
}

static const cube__mpi_host_t cube__mpi_host = {
    .abi = CUBE__MPI_PLUGIN_ABI,
    .size = sizeof(cube__mpi_host_t),
    .status_makev = cube__status_makev,
    .scratch_get = cube__coll_scratch_get,
    .scratch_put = cube__coll_scratch_put,
    .scratch_free = cube__coll_scratch_free,
    .now_ns = cube__now_ns,
    .dtype_name = cube__mpi_host_dtype_name,
    .reduce_op_name = cube__mpi_host_op_name,
};

//===----------------------------------------------------------------------===//
// Finding and opening the plugin
//===----------------------------------------------------------------------===//

static pthread_once_t g_mpi_load_once = PTHREAD_ONCE_INIT;
/* Set (release) once the plugin loaded and MPI started; read (acquire) by
 * every transport call. */
static _Atomic(const cube__mpi_plugin_t*) g_mpi_plugin;
static const cube__mpi_plugin_t* g_mpi_loaded; /* written in the once only */
static char g_mpi_tried[2048];                 /* the paths tried and why, on failure */

/* Appends "<label> (<why>)" to the list of attempts. */
static void cube__mpi_note(const char* label, const char* why) {
  size_t o = strlen(g_mpi_tried);
  if (o + 8 >= sizeof(g_mpi_tried)) return;
  snprintf(g_mpi_tried + o, sizeof(g_mpi_tried) - o, "%s%s (%s)", o ? "; " : "", label, why);
}

/* Opens |path| and takes its table; false with the reason noted otherwise.
 * |must_exist|: a path that is not there is noted "absent" rather than with
 * dlopen's longer message. */
static bool cube__mpi_try(const char* path, const char* label, bool must_exist) {
  if (must_exist && access(path, F_OK) != 0) {
    cube__mpi_note(label, "absent");
    return false;
  }
  /* Never closed: MPI_Finalize runs from the plugin's atexit handler. */
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!lib) {
    const char* e = dlerror();
    cube__mpi_note(label, e ? e : "dlopen failed");
    return false;
  }
  cube__mpi_plugin_open_fn open_fn;
  void* sym = dlsym(lib, CUBE__MPI_PLUGIN_ENTRY);
  memcpy(&open_fn, &sym, sizeof(open_fn));
  if (!sym) {
    cube__mpi_note(label, "no " CUBE__MPI_PLUGIN_ENTRY ": not cube's MPI plugin");
    return false;
  }
  char why[512] = "";
  const cube__mpi_plugin_t* t = open_fn(CUBE__MPI_PLUGIN_ABI, &cube__mpi_host, why, sizeof(why));
  if (!t) {
    cube__mpi_note(label, why[0] ? why : "the plugin refused to open");
    return false;
  }
  if (t->abi != CUBE__MPI_PLUGIN_ABI || t->size < sizeof(cube__mpi_plugin_t) || !t->start ||
      !t->exchange || !t->gather || !t->send || !t->recv || !t->peer_lost) {
    char m[160];
    snprintf(m, sizeof(m), "interface version %u with a %u-byte table, the library needs %u and %zu",
             t->abi, t->size, CUBE__MPI_PLUGIN_ABI, sizeof(cube__mpi_plugin_t));
    cube__mpi_note(label, m);
    return false;
  }
  g_mpi_loaded = t;
  return true;
}

/* The directory of the file that holds this code: libcube.so, or the program
 * itself when it is linked with libcube.a. False when unknown. */
static bool cube__mpi_own_dir(char* out, size_t size) {
  Dl_info info;
  struct link_map* map = NULL;
  if (!dladdr1((void*)&cube__mpi_start, &info, (void**)&map, RTLD_DL_LINKMAP) || !map)
    return false;
  char path[PATH_MAX];
  if (map->l_name && map->l_name[0]) {
    if (!realpath(map->l_name, path)) snprintf(path, sizeof(path), "%s", map->l_name);
  } else {
    /* The main program: its link map has no name (and dli_fname is argv[0]). */
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    if (n <= 0) return false;
    path[n] = '\0';
  }
  char* slash = strrchr(path, '/');
  if (!slash) return false;
  *slash = '\0';
  snprintf(out, size, "%s", path[0] ? path : "/");
  return true;
}

static void cube__mpi_load(void) {
  const char* env = cube__option_str(CUBE__OPT_MPI_PLUGIN);
  if (env && env[0]) {
    char label[PATH_MAX + 32];
    snprintf(label, sizeof(label), "CUBE_MPI_PLUGIN=%s", env);
    cube__mpi_try(env, label, false);
    return;
  }
  char tried[3][PATH_MAX + 32];
  size_t n = 0;
  char dir[PATH_MAX];
  if (cube__mpi_own_dir(dir, sizeof(dir))) {
    snprintf(tried[n++], sizeof(tried[0]), "%s/" CUBE__MPI_PLUGIN_FILE, dir);
    snprintf(tried[n++], sizeof(tried[0]), "%s/cube/" CUBE__MPI_PLUGIN_FILE, dir);
  }
  snprintf(tried[n++], sizeof(tried[0]), "%s/" CUBE__MPI_PLUGIN_FILE, CUBE_MPI_PLUGIN_DIR);
  for (size_t i = 0; i < n; ++i) {
    bool seen = false;
    for (size_t j = 0; j < i; ++j) seen = seen || strcmp(tried[i], tried[j]) == 0;
    if (!seen && cube__mpi_try(tried[i], tried[i], true)) return;
  }
  cube__mpi_try(CUBE__MPI_PLUGIN_FILE, CUBE__MPI_PLUGIN_FILE " on the loader's search path",
                false);
}

//===----------------------------------------------------------------------===//
// cube__mpi_* (collective.h)
//===----------------------------------------------------------------------===//

/* Why this process wants MPI, for messages; NULL when it does not. */
static const char* cube__mpi_wanted(void) {
  const char* v;
  uint32_t mpi_opt = cube__option_enum(CUBE__OPT_COLLECTIVE_MPI); /* auto (0), 1, 0 */
  if (mpi_opt != 0) return mpi_opt == 1 ? "CUBE_COLLECTIVE_MPI=1" : NULL;
  static const char* const launcher[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"};
  static const char* const why[] = {
      "this process was started by an MPI launcher (OMPI_COMM_WORLD_SIZE is set)",
      "this process was started by an MPI launcher (PMI_SIZE is set)",
      "this process was started by an MPI launcher (PMIX_RANK is set)"};
  for (size_t i = 0; i < sizeof(launcher) / sizeof(launcher[0]); ++i)
    if (cube__env_str(launcher[i], &v)) return why[i];
  return NULL;
}

cube_status_t cube__mpi_start(bool* out_active, uint32_t* out_rank, uint32_t* out_ranks) {
  *out_active = false;
  *out_rank = 0;
  *out_ranks = 1;
  const char* why = cube__mpi_wanted();
  if (!why) return CUBE_OK;
  pthread_once(&g_mpi_load_once, cube__mpi_load);
  if (!g_mpi_loaded) {
#ifdef CUBE_HAVE_MPI
    const char* hint = "";
#else
    const char* hint = "; this cube was built without MPI (install libopenmpi-dev and rebuild)";
#endif
    return cube__status_make(CUBE_STATUS_UNAVAILABLE,
                             "collectives: %s but the MPI transport plugin " CUBE__MPI_PLUGIN_FILE
                             " could not be loaded: tried %s%s; set CUBE_MPI_PLUGIN to its path, "
                             "or CUBE_COLLECTIVE_MPI=0 to run without MPI",
                             why, g_mpi_tried, hint);
  }
  uint32_t rank = 0, ranks = 1;
  CUBE_RETURN_IF_ERROR(g_mpi_loaded->start(&rank, &ranks));
  atomic_store_explicit(&g_mpi_plugin, g_mpi_loaded, memory_order_release);
  *out_active = true;
  *out_rank = rank;
  *out_ranks = ranks;
  return CUBE_OK;
}

static const cube__mpi_plugin_t* cube__mpi_active(void) {
  return atomic_load_explicit(&g_mpi_plugin, memory_order_acquire);
}

static cube_status_t cube__mpi_inactive(const char* what) {
  return cube__status_make(CUBE_STATUS_UNAVAILABLE, "%s: MPI is not in use in this process",
                           what);
}

cube_status_t cube__mpi_exchange(uint64_t tag_key, const cube__mpi_header_t* header,
                                 const void* partial, uint32_t count, const uint32_t* ranks,
                                 void** out_received, uint32_t* out_flags, uint64_t deadline_ns,
                                 const char* what) {
  const cube__mpi_plugin_t* p = cube__mpi_active();
  if (!p) return cube__mpi_inactive(what);
  return p->exchange(tag_key, header, partial, count, ranks, out_received, out_flags,
                     deadline_ns, what);
}

cube_status_t cube__mpi_gather(uint64_t tag_key, const cube__mpi_header_t* header,
                               const void* partial, uint32_t count, const uint32_t* ranks,
                               void** out_received, uint32_t* out_flags, uint64_t deadline_ns,
                               const char* what) {
  const cube__mpi_plugin_t* p = cube__mpi_active();
  if (!p) return cube__mpi_inactive(what);
  return p->gather(tag_key, header, partial, count, ranks, out_received, out_flags, deadline_ns,
                   what);
}

cube_status_t cube__mpi_send(uint64_t tag_key, const cube__mpi_header_t* header, const void* src,
                             uint32_t rank, uint64_t deadline_ns, const char* what) {
  const cube__mpi_plugin_t* p = cube__mpi_active();
  if (!p) return cube__mpi_inactive(what);
  return p->send(tag_key, header, src, rank, deadline_ns, what);
}

cube_status_t cube__mpi_recv(uint64_t tag_key, const cube__mpi_header_t* header, void* dst,
                             uint32_t* out_flags, uint32_t rank, uint64_t deadline_ns,
                             const char* what) {
  const cube__mpi_plugin_t* p = cube__mpi_active();
  if (!p) return cube__mpi_inactive(what);
  return p->recv(tag_key, header, dst, out_flags, rank, deadline_ns, what);
}

void cube__mpi_peer_lost(void) {
  const cube__mpi_plugin_t* p = cube__mpi_active();
  if (p) p->peer_lost();
}
