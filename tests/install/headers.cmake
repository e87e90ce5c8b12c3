# The public headers as a program sees them (include/cube/cube.h, "Rules"):
#  1. each header compiles on its own, included twice, as C11 and (when a C++
#     compiler is found) as C++11, warning-free under -Wall -Wextra -Wpedantic;
#  2. every function that returns a cube_status_t is CUBE_MUST_USE_RESULT, and
#     dropping the result of one warns;
#  3. calling a deprecated name warns, naming its replacement;
#  4. the shared library exports every deprecated name beside its new one;
#  5. no public header declares a _COUNT enumerator.
# Inputs: CUBE_SOURCE_DIR, CUBE_WORK_DIR, CUBE_C_COMPILER, CUBE_CXX_COMPILER
# (may be empty), CUBE_SHARED_LIBRARY, CUBE_NM (may be empty).
file(REMOVE_RECURSE ${CUBE_WORK_DIR})
file(MAKE_DIRECTORY ${CUBE_WORK_DIR})
set(inc ${CUBE_SOURCE_DIR}/include)
set(cflags -std=c11 -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Werror -I${inc})
# No -Wshadow for C++: it reports cube_kernel_cache_stats() "hiding" the
# constructor of struct cube_kernel_cache_stats, the same legal pattern as
# POSIX's stat() and struct stat.
set(cxxflags -x c++ -std=c++11 -Wall -Wextra -Wpedantic -Werror -I${inc})

function(fail msg)
  message(SEND_ERROR "${msg}")
endfunction()

# Compiles |src| with |compiler| and |flags|; sets ${out_rc} and ${out_text}.
function(try_compile_file compiler src out_rc out_text)
  execute_process(COMMAND ${compiler} ${ARGN} -c ${src} -o ${src}.o
                  RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e)
  set(${out_rc} ${rc} PARENT_SCOPE)
  set(${out_text} "${o}${e}" PARENT_SCOPE)
endfunction()

# 1. Each header alone.
file(GLOB_RECURSE headers RELATIVE ${inc} ${inc}/cube/*.h)
list(LENGTH headers n_headers)
if(n_headers LESS 14)
  fail("only ${n_headers} public headers found under ${inc}/cube")
endif()
foreach(h IN LISTS headers)
  string(MAKE_C_IDENTIFIER ${h} id)
  set(src ${CUBE_WORK_DIR}/alone_${id}.c)
  file(WRITE ${src} "#include \"${h}\"\n#include \"${h}\"\nint cube_header_test_${id}(void);\nint cube_header_test_${id}(void) { return 0; }\n")
  try_compile_file(${CUBE_C_COMPILER} ${src} rc text ${cflags})
  if(NOT rc EQUAL 0)
    fail("${h} does not compile on its own as C11:\n${text}")
  endif()
  if(CUBE_CXX_COMPILER)
    try_compile_file(${CUBE_CXX_COMPILER} ${src} rc text ${cxxflags})
    if(NOT rc EQUAL 0)
      fail("${h} does not compile on its own as C++11:\n${text}")
    endif()
  endif()
endforeach()

# 2. CUBE_MUST_USE_RESULT on every status-returning function, and it warns.
foreach(h IN LISTS headers)
  file(READ ${inc}/${h} text)
  string(REGEX MATCHALL "[^\n;{}]*cube_status_t[ \t\n]+cube_[a-z0-9_]+\\(" decls "${text}")
  foreach(d IN LISTS decls)
    if(NOT d MATCHES "CUBE_MUST_USE_RESULT")
      string(STRIP "${d}" d)
      fail("${h}: '${d}' returns a status without CUBE_MUST_USE_RESULT")
    endif()
  endforeach()
endforeach()
set(dropped
  "cube_enumerate_devices(CUBE_BACKEND_CPU, 0, 0, &n)"
  "cube_enumerate_all_devices(0, 0, &n)"
  "cube_backend_status(CUBE_BACKEND_CPU)"
  "cube_handle_release_checked(h)"
  "cube_handle_device(h, &d)"
  "cube_status_make(CUBE_STATUS_INTERNAL, \"x\")")
set(i 0)
foreach(call IN LISTS dropped)
  math(EXPR i "${i} + 1")
  set(src ${CUBE_WORK_DIR}/dropped_${i}.c)
  file(WRITE ${src} "#include \"cube/cube.h\"\nvoid f(void);\nvoid f(void) {\n  size_t n; cube_handle_t h = {0}; cube_device_id_t d;\n  (void)n; (void)d;\n  ${call};\n}\n")
  try_compile_file(${CUBE_C_COMPILER} ${src} rc text ${cflags} -Werror=unused-result)
  if(rc EQUAL 0 OR NOT text MATCHES "unused|warn_unused_result")
    fail("dropping the status of ${call} does not warn:\n${text}")
  endif()
endforeach()

# 3. The deprecated names warn and say what to use.
set(deprecated
  "cube_device_count|(void)cube_device_count(CUBE_BACKEND_CPU)|cube_enumerate_devices"
  "cube_device_count_total|(void)cube_device_count_total()|cube_enumerate_all_devices"
  "cube_layout_desc_init|cube_status_free(cube_layout_desc_init(CUBE_LAYOUT_CONTIGUOUS, 0, 0, 1, &ld))|cube_layout_desc_initialize"
  "cube_kernel_precompile|cube_status_free(cube_kernel_precompile(0, 0, 0, CUBE_EXEC_CHECKED))|cube_client_precompile"
  "cube_stream_create_id|(void)cube_stream_create_id()|cube_stream_id_new")
set(exports "")
foreach(entry IN LISTS deprecated)
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 call)
  list(GET parts 2 instead)
  list(APPEND exports ${name} ${instead})
  set(src ${CUBE_WORK_DIR}/deprecated_${name}.c)
  file(WRITE ${src} "#include \"cube/cube.h\"\nvoid f(void);\nvoid f(void) {\n  cube_layout_desc_t ld;\n  (void)ld;\n  ${call};\n}\n")
  try_compile_file(${CUBE_C_COMPILER} ${src} rc text ${cflags})
  if(rc EQUAL 0 OR NOT text MATCHES "deprecated" OR NOT text MATCHES "use ${instead}")
    fail("calling ${name} does not warn that it is deprecated for ${instead}:\n${text}")
  endif()
  # With the warning off it compiles: the name is still declared.
  try_compile_file(${CUBE_C_COMPILER} ${src} rc text ${cflags} -Wno-deprecated-declarations)
  if(NOT rc EQUAL 0)
    fail("${name} no longer compiles with -Wno-deprecated-declarations:\n${text}")
  endif()
endforeach()

# 4. Exported, old and new.
if(CUBE_NM AND CUBE_SHARED_LIBRARY)
  execute_process(COMMAND ${CUBE_NM} -D --defined-only ${CUBE_SHARED_LIBRARY}
                  OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    fail("${CUBE_NM} could not read ${CUBE_SHARED_LIBRARY}")
  endif()
  foreach(s IN LISTS exports ITEMS cube_status_make cube_status_makev cube_kernel_desc_initialize)
    if(NOT syms MATCHES " T ${s}\n")
      fail("${CUBE_SHARED_LIBRARY} does not export ${s}")
    endif()
  endforeach()
  if(syms MATCHES " T cube__")
    fail("${CUBE_SHARED_LIBRARY} exports an internal cube__ name")
  endif()
endif()

# 5. No public _COUNT enumerator (the public ones were removed; a new one
# would come back with the same problem: its value changes with each
# enumerator added).
foreach(h IN LISTS headers)
  file(READ ${inc}/${h} text)
  string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" "" code "${text}")
  # A count enumerator takes the next value implicitly (CUBE_FEATURE_DYNAMIC_
  # COUNT, a feature bit with a value of its own, is not one).
  string(REGEX MATCHALL "CUBE_[A-Z_]*_COUNT[ \t\n]*[,}]" hits "${code}")
  foreach(hit IN LISTS hits)
    fail("${h} declares ${hit}: enumerations have no public _COUNT")
  endforeach()
endforeach()

if(CUBE_CXX_COMPILER)
  message(STATUS "${n_headers} public headers checked as C11 and C++11")
else()
  message(STATUS "${n_headers} public headers checked as C11 (no C++ compiler found)")
endif()
