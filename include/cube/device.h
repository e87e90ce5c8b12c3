/* cube/device.h: backends, device ids, properties and features, enumeration
 * and shutdown.
 *
 * Model. A backend (CPU, CUDA, OpenCL, null) is a family of devices; a device
 * is named by its backend and its index within the backend. Backends whose
 * driver is absent are present with zero devices: enumeration never fails
 * for want of a driver, and cube_backend_status says why a backend is empty.
 *
 * Counting devices. There is one way: enumeration with capacity 0.
 *   size_t n;
 *   cube_status_t s = cube_enumerate_devices(CUBE_BACKEND_CUDA, NULL, 0, &n);
 * counts the CUDA devices, cube_enumerate_all_devices(NULL, 0, &n) those of
 * every backend. (cube_device_count and cube_device_count_total are the
 * deprecated spellings of the same.)
 *
 * Backends are numbered densely from 0: cube_backend_name returns NULL past
 * the last one, so `for (b = 0; cube_backend_name(b); ++b)` visits every
 * backend this library knows, also in a program built against an older
 * header.
 *
 * Thread safety: every function here is thread-safe, except cube_shutdown.
 */
#ifndef CUBE_DEVICE_H_
#define CUBE_DEVICE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cube_backend_e {
  CUBE_BACKEND_CPU = 0,    /* default: worker threads on this machine */
  CUBE_BACKEND_CUDA = 1,   /* NVIDIA GPUs (loaded with dlopen) */
  CUBE_BACKEND_OPENCL = 2, /* OpenCL devices (loaded with dlopen) */
  CUBE_BACKEND_NULL = 3,   /* no devices unless CUBE_NULL_DEVICES=n; template for new backends */
  /* Not a backend: the backend of no device (cube_client_device of a NULL or
   * dead client). Its value stays the same when backends are added. */
  CUBE_BACKEND_NONE = 0x7fffffff,
} cube_backend_t;

/* A device: backend plus index within the backend (CubeCL's DeviceId with
 * type_id = backend). Ordered by (backend, index). A plain value. */
typedef struct cube_device_id {
  cube_backend_t backend;
  uint32_t index;
} cube_device_id_t;

/* "cpu", "cuda", "opencl", "null": a static string; NULL for CUBE_BACKEND_NONE
 * and any other value that is not a backend of this library. */
const char* cube_backend_name(cube_backend_t backend);

/* Parses a backend name (as above, case-insensitive) into |out_backend|.
 * Fails with INVALID_ARGUMENT for a NULL |name| or |out_backend| and for an
 * unknown name (the message lists the valid ones); writes nothing then. */
CUBE_MUST_USE_RESULT cube_status_t cube_backend_parse(const char* name,
                                                      cube_backend_t* out_backend);

/* The backend named by the CUBE_BACKEND environment variable, else (also for
 * a name that does not parse) CUBE_BACKEND_CPU. Reads the environment on
 * every call. */
cube_backend_t cube_backend_default(void);

typedef enum cube_timing_method_e {
  CUBE_TIMING_SYSTEM = 0, /* host clock around full synchronisations */
  CUBE_TIMING_DEVICE = 1, /* timestamps taken where the work runs */
} cube_timing_method_t;

typedef enum cube_layout_policy_e {
  CUBE_LAYOUT_POLICY_CONTIGUOUS = 0, /* CPU, OpenCL */
  CUBE_LAYOUT_POLICY_PITCHED = 1,    /* CUDA: rows padded to a pitch */
} cube_layout_policy_t;

/* What a device is and can do (an output struct, see cube/cube.h, "Struct
 * sizes"). cube_client_properties returns a pointer to the server's copy,
 * whose struct_size is sizeof(cube_device_properties_t) of the library: a
 * program built against a newer header reads a field only when struct_size
 * covers it. */
typedef struct cube_device_properties {
  size_t struct_size;
  char name[128];
  cube_device_id_t id;
  struct {
    uint64_t total_memory;  /* bytes the device has (CPU: RAM or cgroup limit) */
    uint64_t max_page_size; /* largest single dynamic allocation */
    uint64_t alignment;     /* buffer alignment in bytes */
  } memory;
  struct {
    uint32_t load_width;            /* bits per widest load */
    uint32_t plane_size_min;
    uint32_t plane_size_max;
    uint32_t max_bindings;
    uint64_t max_shared_memory_size;
    uint32_t max_cube_count[3];
    uint32_t max_units_per_cube;
    uint32_t max_cube_dim[3];
    uint32_t num_streaming_multiprocessors;
    uint32_t num_tensor_cores;
    uint32_t min_tensor_cores_dim;
    uint32_t num_cpu_cores;
    uint32_t max_vector_size;
    uint64_t l2_cache_size;      /* bytes; 0 where unknown */
    uint32_t compute_capability; /* CUDA: major * 10 + minor (90 on an H200); 0 elsewhere */
  } hardware;
  cube_timing_method_t timing_method;
  cube_layout_policy_t layout_policy;
} cube_device_properties_t;

/* Feature bits. */
typedef enum cube_feature_bits_e {
  CUBE_FEATURE_F16 = 1u << 0,
  CUBE_FEATURE_BF16 = 1u << 1,
  CUBE_FEATURE_F64 = 1u << 2,
  CUBE_FEATURE_I64 = 1u << 3,
  CUBE_FEATURE_ATOMIC_U32 = 1u << 4,
  CUBE_FEATURE_ATOMIC_F32_ADD = 1u << 5,
  CUBE_FEATURE_PLANE = 1u << 6,
  CUBE_FEATURE_SYNC_CUBE = 1u << 7,
  CUBE_FEATURE_SHARED_MEMORY = 1u << 8,
  CUBE_FEATURE_NATIVE_KERNELS = 1u << 9, /* accepts C function pointers */
  CUBE_FEATURE_DYNAMIC_COUNT = 1u << 10,
  CUBE_FEATURE_COLLECTIVES = 1u << 11,
  CUBE_FEATURE_PINNED_STAGING = 1u << 12,
} cube_feature_bits_t;

/* A set of cube_feature_bits_t. It grows by bits, not by fields: no
 * struct_size. */
typedef struct cube_features {
  uint64_t bits; /* cube_feature_bits_t */
} cube_features_t;

/* Backend information (CubeCL's Server::Info; an output struct, see
 * cube/cube.h, "Struct sizes"). cube_client_info returns a pointer to the
 * server's copy, whose struct_size is the library's sizeof. */
typedef struct cube_backend_info {
  size_t struct_size;
  cube_backend_t backend;
  char name[32];      /* "cpu" */
  char version[64];   /* backend/runtime version, e.g. "cube 0.1 cpu" */
  uint32_t device_count;
} cube_backend_info_t;

/* Writes the ids of |backend|'s devices, in index order, into |out_ids| (at
 * most |capacity| of them; |out_ids| may be NULL when |capacity| is 0) and
 * their number into |out_count|, which may exceed |capacity|: capacity 0
 * counts. A backend whose driver is absent has 0 devices and returns CUBE_OK
 * (cube_backend_status gives the reason). Fails with INVALID_ARGUMENT for a
 * NULL |out_count| or a |backend| that is not one. The first call for a
 * backend may load its driver (dlopen). */
CUBE_MUST_USE_RESULT cube_status_t cube_enumerate_devices(cube_backend_t backend,
                                                          cube_device_id_t* out_ids,
                                                          size_t capacity, size_t* out_count);

/* As cube_enumerate_devices over every backend, in (backend, index) order.
 * Fails with INVALID_ARGUMENT for a NULL |out_count| only. */
CUBE_MUST_USE_RESULT cube_status_t cube_enumerate_all_devices(cube_device_id_t* out_ids,
                                                              size_t capacity, size_t* out_count);

/* Deprecated: cube_enumerate_devices(backend, NULL, 0, &count). Returns 0 for
 * an unavailable or invalid backend. */
CUBE_DEPRECATED("use cube_enumerate_devices(backend, NULL, 0, &count)")
size_t cube_device_count(cube_backend_t backend);

/* Deprecated: cube_enumerate_all_devices(NULL, 0, &count). */
CUBE_DEPRECATED("use cube_enumerate_all_devices(NULL, 0, &count)")
size_t cube_device_count_total(void);

/* CUBE_OK if |backend| can be used here, else why not: UNAVAILABLE with the
 * driver's message (library not found, no device, version too old), or
 * because the backend is not built into this library; INVALID_ARGUMENT for a
 * value that is not a backend. The caller owns the status. */
CUBE_MUST_USE_RESULT cube_status_t cube_backend_status(cube_backend_t backend);

/* Releases every server, runner thread and pool, after running the work
 * queued on every device. Every future, resource, kernel and byte buffer must
 * have been released before. Clients and handles held across it are detected
 * rather than undefined: a client from before is refused afterwards with
 * FAILED_PRECONDITION (cube_client_device returns the CUBE_BACKEND_NONE
 * sentinel for it, cube_client_info/_properties/_features NULL), and a handle
 * from before is reported released (NOT_FOUND); release them as usual.
 * Pointers that cube_client_info, _properties and _features returned before
 * are dangling. Afterwards the library may be used again (servers are
 * created anew on first use). Not thread-safe: no other cube call may run at
 * the same time, and it must not be called from a task of a device. */
void cube_shutdown(void);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_DEVICE_H_ */
