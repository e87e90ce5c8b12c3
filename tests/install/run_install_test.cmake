# Installs the built library into a scratch prefix, then builds the example
# against it twice (find_package(cube) and pkg-config) and runs both.
# Inputs: CUBE_BUILD_DIR, CUBE_SOURCE_DIR, CUBE_WORK_DIR, CUBE_C_COMPILER.
file(REMOVE_RECURSE ${CUBE_WORK_DIR})
file(MAKE_DIRECTORY ${CUBE_WORK_DIR})
set(prefix ${CUBE_WORK_DIR}/prefix)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

run(${CMAKE_COMMAND} --install ${CUBE_BUILD_DIR} --prefix ${prefix})
file(GLOB_RECURSE installed ${prefix}/*)
foreach(f cube/cube.h cube.pc cubeConfig.cmake libcube.so libcube.a)
  set(found ${installed})
  list(FILTER found INCLUDE REGEX "/${f}$")
  if(NOT found)
    message(FATAL_ERROR "the install under ${prefix} lacks ${f}")
  endif()
endforeach()

# 1. CMake package.
run(${CMAKE_COMMAND} -S ${CUBE_SOURCE_DIR}/examples -B ${CUBE_WORK_DIR}/cmake-build
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${CUBE_C_COMPILER})
run(${CMAKE_COMMAND} --build ${CUBE_WORK_DIR}/cmake-build)
run(${CUBE_WORK_DIR}/cmake-build/hello_cube)

# 2. pkg-config, static and shared.
find_program(PKG_CONFIG pkg-config REQUIRED)
file(GLOB_RECURSE pcs ${prefix}/cube.pc)
list(GET pcs 0 pc)
get_filename_component(pcdir ${pc} DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pcdir})
execute_process(COMMAND ${PKG_CONFIG} --cflags --libs cube OUTPUT_VARIABLE flags
                OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pkg-config cube failed")
endif()
separate_arguments(flags UNIX_COMMAND "${flags}")
file(GLOB_RECURSE libso ${prefix}/libcube.so)
get_filename_component(libdir ${libso} DIRECTORY)
run(${CUBE_C_COMPILER} -std=c11 ${CUBE_SOURCE_DIR}/examples/hello_cube.c ${flags}
    -Wl,-rpath,${libdir} -o ${CUBE_WORK_DIR}/hello_pkgconfig)
run(${CUBE_WORK_DIR}/hello_pkgconfig)
