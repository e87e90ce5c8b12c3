/* What the CUDA backend lends to the rest of the library (the nccl
 * transport of src/collective): a device's context and ordinal, and the
 * driver stream behind a server stream. */
#ifndef CUBE_BACKENDS_CUDA_CUDA_INTERNAL_H_
#define CUBE_BACKENDS_CUDA_CUDA_INTERNAL_H_

#include <stdint.h>

#include "backends/backend.h"
#include "backends/cuda/cuda_api.h"

/* The device's primary context (retained for the life of the process). */
CUcontext cube__cuda_device_context(const cube__backend_device_t* d);
/* The device's CUDA ordinal. */
uint32_t cube__cuda_device_ordinal(const cube__backend_device_t* d);
/* The CUstream of a server stream's backend_stream (NULL: the legacy stream). */
CUstream cube__cuda_stream_handle(void* backend_stream);

#endif /* CUBE_BACKENDS_CUDA_CUDA_INTERNAL_H_ */
