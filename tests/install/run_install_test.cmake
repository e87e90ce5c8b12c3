# Installs the built library into a scratch prefix, then checks that nothing of it asks a
# consumer for MPI (libcube.so's NEEDED, cube.pc, the CMake package), builds the example
# against it with find_package(cube) (shared and static) and with pkg-config (cube, and
# cube-static: libcube.a), runs each, and, where the MPI plugin is built, checks that a
# program linked with the installed libcube.so finds <libdir>/cube/libcube_mpi.so.
# Inputs: CUBE_BUILD_DIR, CUBE_SOURCE_DIR, CUBE_WORK_DIR, CUBE_C_COMPILER, CUBE_READELF,
# CUBE_HAVE_MPI.
cmake_policy(VERSION 3.20)
if(NOT READELF AND NOT CUBE_READELF)
  message(FATAL_ERROR "readelf (binutils) was not found when cube was configured")
endif()
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

# Fails if |file|'s dynamic section needs a library matching |forbid|.
function(check_needed file forbid)
  execute_process(COMMAND ${CUBE_READELF} -d ${file} OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${CUBE_READELF} -d ${file} failed")
  endif()
  string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*" needed "${dyn}")
  foreach(line IN LISTS needed)
    if(line MATCHES "${forbid}")
      message(FATAL_ERROR "${file} needs ${line}")
    endif()
  endforeach()
  message(STATUS "${file}: ${needed}")
endfunction()

function(find_installed var name)
  file(GLOB_RECURSE found ${prefix}/*/${name})
  if(NOT found)
    message(FATAL_ERROR "the install under ${prefix} lacks ${name}")
  endif()
  list(GET found 0 f)
  set(${var} ${f} PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install ${CUBE_BUILD_DIR} --prefix ${prefix})
foreach(f cube/cube.h cube.pc cube-static.pc cubeConfig.cmake libcube.so libcube.a)
  find_installed(unused ${f})
endforeach()
find_installed(libso libcube.so)
find_installed(pc cube.pc)
find_installed(config cubeConfig.cmake)
get_filename_component(libdir ${libso} DIRECTORY)
get_filename_component(pcdir ${pc} DIRECTORY)

# No MPI for consumers: libcube.so does not need it, cube.pc and the package do not ask
# for it; the plugin, where built, sits in <libdir>/cube/.
check_needed(${libso} "libmpi")
file(READ ${pc} pc_text)
file(READ ${config} config_text)
if(pc_text MATCHES "mpi" OR config_text MATCHES "MPI")
  message(FATAL_ERROR "cube.pc or cubeConfig.cmake still mentions MPI:\n${pc_text}\n${config_text}")
endif()
if(NOT pc_text MATCHES "Libs.private: -lpthread -ldl -lm")
  message(FATAL_ERROR "cube.pc has no Libs.private for libcube.a:\n${pc_text}")
endif()
if(CUBE_HAVE_MPI AND NOT EXISTS ${libdir}/cube/libcube_mpi.so)
  message(FATAL_ERROR "the MPI plugin is not installed in ${libdir}/cube/")
endif()

# 1. CMake package, shared then static.
foreach(kind shared static)
  set(link_static OFF)
  if(kind STREQUAL "static")
    set(link_static ON)
  endif()
  run(${CMAKE_COMMAND} -S ${CUBE_SOURCE_DIR}/examples -B ${CUBE_WORK_DIR}/cmake-${kind}
      -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_C_COMPILER=${CUBE_C_COMPILER}
      -DCUBE_EXAMPLES_STATIC=${link_static})
  run(${CMAKE_COMMAND} --build ${CUBE_WORK_DIR}/cmake-${kind} --target hello_cube saxpy)
  check_needed(${CUBE_WORK_DIR}/cmake-${kind}/hello_cube "libmpi")
  run(${CUBE_WORK_DIR}/cmake-${kind}/hello_cube)
endforeach()
check_needed(${CUBE_WORK_DIR}/cmake-static/saxpy "libcube|libmpi")
run(${CUBE_WORK_DIR}/cmake-static/saxpy)

# 2. pkg-config: cube (libcube.so), then cube-static (libcube.a and what it needs).
find_program(PKG_CONFIG pkg-config REQUIRED)
set(ENV{PKG_CONFIG_PATH} ${pcdir})
function(pkg_flags var)
  execute_process(COMMAND ${PKG_CONFIG} ${ARGN} OUTPUT_VARIABLE flags
                  OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config ${ARGN} failed")
  endif()
  message(STATUS "pkg-config ${ARGN}: ${flags}")
  if(flags MATCHES "mpi")
    message(FATAL_ERROR "pkg-config ${ARGN} asks for MPI: ${flags}")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  set(${var} ${flags} PARENT_SCOPE)
endfunction()
pkg_flags(shared_flags --cflags --libs cube)
run(${CUBE_C_COMPILER} -std=c11 ${CUBE_SOURCE_DIR}/examples/hello_cube.c ${shared_flags}
    -Wl,-rpath,${libdir} -o ${CUBE_WORK_DIR}/hello_pkgconfig)
run(${CUBE_WORK_DIR}/hello_pkgconfig)
pkg_flags(cube_static_libs --static --libs cube)
pkg_flags(static_flags --static --cflags --libs cube-static)
run(${CUBE_C_COMPILER} -std=c11 ${CUBE_SOURCE_DIR}/examples/saxpy.c ${static_flags}
    -o ${CUBE_WORK_DIR}/saxpy_pkgconfig_static)
check_needed(${CUBE_WORK_DIR}/saxpy_pkgconfig_static "libcube|libmpi")
run(${CUBE_WORK_DIR}/saxpy_pkgconfig_static)

# 3. The installed plugin, found next to the installed libcube.so (no CUBE_MPI_PLUGIN):
# a singleton MPI process (root in CI needs Open MPI's consent).
if(CUBE_HAVE_MPI)
  run(${CUBE_C_COMPILER} -std=c11 ${CUBE_SOURCE_DIR}/tests/install/mpi_world.c ${shared_flags}
      -Wl,-rpath,${libdir} -o ${CUBE_WORK_DIR}/mpi_world)
  unset(ENV{CUBE_MPI_PLUGIN})
  set(ENV{CUBE_COLLECTIVE_MPI} 1)
  set(ENV{OMPI_ALLOW_RUN_AS_ROOT} 1)
  set(ENV{OMPI_ALLOW_RUN_AS_ROOT_CONFIRM} 1)
  set(ENV{OMPI_MCA_btl} self,vader)
  execute_process(COMMAND ${CUBE_WORK_DIR}/mpi_world RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0 OR NOT out MATCHES "rank 0 of 1, plugin ${libdir}/cube/libcube_mpi.so")
    message(FATAL_ERROR "mpi_world (${rc}) did not load ${libdir}/cube/libcube_mpi.so:\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endif()
