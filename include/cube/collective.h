/* cube/collective.h: element types and reduce operations for collectives
 * (reference §9). The collective operations themselves are in client.h. */
/* The functions in this header are thread-safe. */
#ifndef CUBE_COLLECTIVE_H_
#define CUBE_COLLECTIVE_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cube_dtype_e {
  CUBE_DTYPE_U8 = 0,
  CUBE_DTYPE_I8,
  CUBE_DTYPE_U32,
  CUBE_DTYPE_I32,
  CUBE_DTYPE_U64,
  CUBE_DTYPE_I64,
  CUBE_DTYPE_F16,
  CUBE_DTYPE_BF16,
  CUBE_DTYPE_F32,
  CUBE_DTYPE_F64,
  CUBE_DTYPE_COUNT
} cube_dtype_t;

/* Bytes per element; 0 for an invalid value. */
uint32_t cube_dtype_size(cube_dtype_t dtype);
const char* cube_dtype_name(cube_dtype_t dtype);

typedef enum cube_reduce_op_e {
  CUBE_REDUCE_SUM = 0,
  CUBE_REDUCE_MEAN = 1,
} cube_reduce_op_t;

#ifdef __cplusplus
}
#endif

#endif /* CUBE_COLLECTIVE_H_ */
