/* The DLPack structs as cube/dlpack_types.h declares them itself, where no
 * system header is there (tests/unit/dlpack_abi_check.h): the same layout. */
#define CUBE_DLPACK_NO_SYSTEM_HEADER 1
#include "dlpack_abi_check.h"

CUBE_TEST(own_declarations_layout) { dlpack_abi_check(); }
