/* cube/device.h: backends, device ids, properties and features, enumeration.
 *
 * Every function here is thread-safe.
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
  CUBE_BACKEND_NULL = 3,   /* no devices; template for new backends */
  CUBE_BACKEND_COUNT
} cube_backend_t;

/* A device: backend plus index within the backend (CubeCL's DeviceId with
 * type_id = backend). Ordered by (backend, index). */
typedef struct cube_device_id {
  cube_backend_t backend;
  uint32_t index;
} cube_device_id_t;

/* "cpu", "cuda", "opencl", "null"; NULL for an invalid value. */
const char* cube_backend_name(cube_backend_t backend);

/* Parses a backend name (as above, case-insensitive). */
CUBE_MUST_USE_RESULT cube_status_t cube_backend_parse(const char* name, cube_backend_t* out_backend);

/* The backend named by CUBE_BACKEND, else CUBE_BACKEND_CPU. */
cube_backend_t cube_backend_default(void);

typedef enum cube_timing_method_e {
  CUBE_TIMING_SYSTEM = 0, /* host clock around full synchronisations */
  CUBE_TIMING_DEVICE = 1, /* timestamps taken where the work runs */
} cube_timing_method_t;

typedef enum cube_layout_policy_e {
  CUBE_LAYOUT_POLICY_CONTIGUOUS = 0, /* CPU, OpenCL */
  CUBE_LAYOUT_POLICY_PITCHED = 1,    /* CUDA: rows padded to a pitch */
} cube_layout_policy_t;

typedef struct cube_device_properties {
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

typedef struct cube_features {
  uint64_t bits; /* cube_feature_bits_t */
} cube_features_t;

/* Backend information (CubeCL's Server::Info). */
typedef struct cube_backend_info {
  cube_backend_t backend;
  char name[32];      /* "cpu" */
  char version[64];   /* backend/runtime version, e.g. "cube 0.1 cpu" */
  uint32_t device_count;
} cube_backend_info_t;

/* Writes the ids of |backend|'s devices into |out_ids| (at most |capacity|;
 * NULL with capacity 0 only counts) and their number into |out_count|.
 * A backend whose driver is absent yields 0 devices and CUBE_OK; use
 * cube_backend_status for the reason. Thread-safe. */
cube_status_t cube_enumerate_devices(cube_backend_t backend, cube_device_id_t* out_ids,
                                     size_t capacity, size_t* out_count);

/* Every device of every available backend, in (backend, index) order. */
cube_status_t cube_enumerate_all_devices(cube_device_id_t* out_ids, size_t capacity,
                                         size_t* out_count);

/* Number of devices of |backend| (0 if it is unavailable). */
size_t cube_device_count(cube_backend_t backend);

/* Number of devices over every backend. */
size_t cube_device_count_total(void);

/* CUBE_OK if |backend| can be used here, else why not (CUBE_STATUS_UNAVAILABLE
 * with the driver's message). Thread-safe. */
cube_status_t cube_backend_status(cube_backend_t backend);

/* Releases every server, runner thread and pool. Every client, handle, kernel,
 * future and byte buffer must have been released before; afterwards the
 * library may be used again (servers are created anew). Not thread-safe with
 * any other cube call. */
void cube_shutdown(void);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_DEVICE_H_ */
