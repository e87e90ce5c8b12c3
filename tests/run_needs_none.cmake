# Runs PROGRAM after checking that its dynamic section needs none of the libraries
# matching FORBID (a regex over readelf's NEEDED lines), e.g. a program linked with
# libcube.a that must need neither libcube.so nor MPI.
# Inputs: READELF, PROGRAM, FORBID.
cmake_policy(VERSION 3.20)
if(NOT READELF AND NOT CUBE_READELF)
  message(FATAL_ERROR "readelf (binutils) was not found when cube was configured")
endif()
execute_process(COMMAND ${READELF} -d ${PROGRAM} OUTPUT_VARIABLE dyn RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${READELF} -d ${PROGRAM} failed (${rc})")
endif()
string(REGEX MATCHALL "\\(NEEDED\\)[^\n]*" needed "${dyn}")
message(STATUS "${PROGRAM}:\n  ${needed}")
foreach(line IN LISTS needed)
  if(line MATCHES "${FORBID}")
    message(FATAL_ERROR "${PROGRAM} needs ${line}")
  endif()
endforeach()
execute_process(COMMAND ${PROGRAM} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} exited ${rc}")
endif()
