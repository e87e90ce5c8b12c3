/* The DLPack structs through the system's <dlpack/dlpack.h> (Debian:
 * libdlpack-dev) plus cube's versioned ones (tests/unit/dlpack_abi_check.h). */
#include "dlpack_abi_check.h"

CUBE_TEST(system_header_layout) {
#if !defined(__has_include)
  CUBE_SKIP("the compiler has no __has_include");
#elif !__has_include(<dlpack/dlpack.h>)
  CUBE_SKIP("no <dlpack/dlpack.h> here (install libdlpack-dev)");
#else
  dlpack_abi_check();
#endif
}
