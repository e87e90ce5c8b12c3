/* cube/dlpack_types.h: the DLPack structs, for programs that read or fill
 * the tensors of cube/dlpack.h (cube.h does not include this header).
 *
 * The legacy structs (DLDevice, DLDataType, DLTensor, DLManagedTensor) come
 * from the system's <dlpack/dlpack.h> (Debian: libdlpack-dev). Where that
 * header predates DLPack 1.0 (Debian 12 ships 0.6), the versioned ones are
 * declared here, ABI-compatible with the DLPack 1.x specification:
 *
 *   DLPackVersion             {uint32_t major, minor}
 *   DLManagedTensorVersioned  {version, manager_ctx, deleter, flags, dl_tensor}
 *   DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_FLAG_BITMASK_IS_COPIED
 *
 * A header of DLPack 1.0 or later (one that defines DLPACK_MAJOR_VERSION) is
 * used as it is. Without any <dlpack/dlpack.h> (or with
 * CUBE_DLPACK_NO_SYSTEM_HEADER defined) the legacy structs are declared here
 * too, from the same specification, and DLPACK_DLPACK_H_ is defined so that
 * a later #include <dlpack/dlpack.h> adds nothing; include this header
 * first then. tests/unit/test_dlpack_abi.c checks both declarations against
 * each other.
 *
 * Thread safety: declarations only.
 */
#ifndef CUBE_DLPACK_TYPES_H_
#define CUBE_DLPACK_TYPES_H_

#include <stddef.h>
#include <stdint.h>

#if !defined(CUBE_DLPACK_NO_SYSTEM_HEADER) && defined(__has_include)
#if __has_include(<dlpack/dlpack.h>)
#include <dlpack/dlpack.h>
#endif
#endif

#ifdef __cplusplus
extern "C" {
#endif

#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_
/* The legacy ABI (DLPack 0.x), when no system header is there. */
typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int device_id;
} DLDevice;

typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
} DLDataTypeCode;

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void* data;
  DLDevice device;
  int ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;
#endif /* DLPACK_DLPACK_H_ */

#if !defined(DLPACK_MAJOR_VERSION) || DLPACK_MAJOR_VERSION < 1
/* DLPack 1.x's versioned tensor: the version first, so that a consumer can
 * tell the layout before it reads anything else; then the owner's context
 * and deleter, the flags, and the tensor itself. */
typedef struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

/* The consumer must not write the memory. */
#define DLPACK_FLAG_BITMASK_READ_ONLY (UINT64_C(1) << 0)
/* The producer copied the data for this tensor. */
#define DLPACK_FLAG_BITMASK_IS_COPIED (UINT64_C(1) << 1)
#endif

#ifdef __cplusplus
}
#endif

#endif /* CUBE_DLPACK_TYPES_H_ */
