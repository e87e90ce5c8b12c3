/* The DLPack ABI as cube/dlpack_types.h declares it, checked against the
 * layout the DLPack specification gives on LP64 (x86-64, AArch64): included
 * by test_dlpack_abi.c (the system's <dlpack/dlpack.h> where installed) and
 * by test_dlpack_abi_own.c (cube's own declarations), so the two agree. */
#include <stddef.h>

#include "check.h"
#include "cube/dlpack.h"
#include "cube/dlpack_types.h"

#define ABI_AT(type, field, want) CHECK_EQ_U64(offsetof(type, field), (want))

static inline void dlpack_abi_check(void) {
  if (sizeof(void*) != 8) CUBE_SKIP("the offsets below are LP64's");
  CHECK_EQ_U64(sizeof(DLDevice), 8);
  CHECK_EQ_U64(sizeof(DLDataType), 4);
  CHECK_EQ_U64(sizeof(DLDataType), sizeof(cube_dlpack_dtype_t));
  ABI_AT(DLTensor, data, 0);
  ABI_AT(DLTensor, device, 8);
  ABI_AT(DLTensor, ndim, 16);
  ABI_AT(DLTensor, dtype, 20);
  ABI_AT(DLTensor, shape, 24);
  ABI_AT(DLTensor, strides, 32);
  ABI_AT(DLTensor, byte_offset, 40);
  CHECK_EQ_U64(sizeof(DLTensor), 48);
  ABI_AT(DLManagedTensor, dl_tensor, 0);
  ABI_AT(DLManagedTensor, manager_ctx, 48);
  ABI_AT(DLManagedTensor, deleter, 56);
  CHECK_EQ_U64(sizeof(DLManagedTensor), 64);
  CHECK_EQ_U64(sizeof(DLPackVersion), 8);
  ABI_AT(DLManagedTensorVersioned, version, 0);
  ABI_AT(DLManagedTensorVersioned, manager_ctx, 8);
  ABI_AT(DLManagedTensorVersioned, deleter, 16);
  ABI_AT(DLManagedTensorVersioned, flags, 24);
  ABI_AT(DLManagedTensorVersioned, dl_tensor, 32);
  CHECK_EQ_U64(sizeof(DLManagedTensorVersioned), 80);
  CHECK_EQ_U64(DLPACK_FLAG_BITMASK_READ_ONLY, CUBE_DLPACK_READ_ONLY);
  CHECK_EQ_U64(DLPACK_FLAG_BITMASK_IS_COPIED, CUBE_DLPACK_IS_COPIED);
  CHECK_EQ_U64(kDLCPU, CUBE_DLPACK_DEVICE_CPU);
  CHECK_EQ_U64(kDLCUDA, CUBE_DLPACK_DEVICE_CUDA);
  CHECK_EQ_U64(kDLCUDAHost, CUBE_DLPACK_DEVICE_CUDA_HOST);
  CHECK_EQ_U64(kDLOpenCL, CUBE_DLPACK_DEVICE_OPENCL);
  CHECK_EQ_U64(kDLROCMHost, CUBE_DLPACK_DEVICE_ROCM_HOST);
  CHECK_EQ_U64(kDLCUDAManaged, CUBE_DLPACK_DEVICE_CUDA_MANAGED);
  CHECK_EQ_U64(kDLInt, CUBE_DLPACK_INT);
  CHECK_EQ_U64(kDLUInt, CUBE_DLPACK_UINT);
  CHECK_EQ_U64(kDLFloat, CUBE_DLPACK_FLOAT);
  CHECK_EQ_U64(kDLOpaqueHandle, CUBE_DLPACK_OPAQUE_HANDLE);
  CHECK_EQ_U64(kDLBfloat, CUBE_DLPACK_BFLOAT);
  CHECK_EQ_U64(kDLComplex, CUBE_DLPACK_COMPLEX);
}
