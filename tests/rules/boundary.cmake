# The backend boundary, kept true by a test (ctest: rules.backend_boundary).
#
# Above src/backends/ (the client, the server, the collectives, memory, the
# device queue, the profiler) no file
#   - names a backend in code: CUBE_BACKEND_CPU|CUDA|OPENCL|NULL, the tables
#     cube__backend_<name>, or a backend's internal functions cube__cuda_*,
#     cube__cpu_*, cube__opencl_* (what varies by backend is a capability
#     bit, a table field or a ctl operation of src/backends/backend.h);
#   - tests a backend at compile time: #if/#ifdef CUBE_HAVE_CUDA|OPENCL;
#   - includes a header of a backend's folder ("backends/<name>/...");
# and no file outside src/backends/backend.c calls a table slot (vt->slot(...)).
#
# src/collective/nccl/ is the NCCL transport: it talks to CUDA by nature
# (through the CUDA toolkit's headers and the backend's ctl), so it may name
# CUDA; it still may not include the backend's internal headers.
#
# Comments are not code: they are stripped before the checks.
if(NOT SRC)
  message(FATAL_ERROR "usage: cmake -DSRC=<repo>/src -P boundary.cmake")
endif()

set(above client server collective memory queue profile trace tune)
set(failures "")
set(checked 0)
foreach(dir IN LISTS above)
  file(GLOB_RECURSE files ${SRC}/${dir}/*.c ${SRC}/${dir}/*.h)
  foreach(f IN LISTS files)
    file(RELATIVE_PATH rel ${SRC} ${f})
    math(EXPR checked "${checked} + 1")
    file(READ ${f} text)
    # Strip /* ... */ and // comments (string literals with comment markers
    # do not occur in these files).
    string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" "" code "${text}")
    string(REGEX REPLACE "//[^\n]*" "" code "${code}")
    set(transport_folder FALSE)
    if(rel MATCHES "^collective/nccl/")
      set(transport_folder TRUE)
    endif()
    if(NOT transport_folder)
      string(REGEX MATCHALL "CUBE_BACKEND_(CPU|CUDA|OPENCL|NULL)" hits "${code}")
      if(hits)
        list(REMOVE_DUPLICATES hits)
        list(APPEND failures "${rel}: names a backend: ${hits}")
      endif()
      string(REGEX MATCHALL "cube__backend_(cpu|cuda|opencl|null)[^_a-z]" hits "${code}")
      if(hits)
        list(APPEND failures "${rel}: names a backend's table")
      endif()
      string(REGEX MATCHALL "cube__(cuda|cpu|opencl)_[a-z_]+" hits "${code}")
      # The platform's processor helpers are not the CPU backend.
      list(REMOVE_ITEM hits cube__cpu_relax cube__cpu_count)
      if(hits)
        list(REMOVE_DUPLICATES hits)
        list(APPEND failures "${rel}: calls a backend's internals: ${hits}")
      endif()
      string(REGEX MATCHALL "#[ \t]*(if|ifdef|ifndef|elif)[^\n]*CUBE_HAVE_(CUDA|OPENCL)" hits "${code}")
      if(hits)
        list(APPEND failures "${rel}: tests a backend at compile time: ${hits}")
      endif()
    endif()
    string(REGEX MATCHALL "#[ \t]*include[ \t]*\"backends/[a-z_]+/[^\"]*\"" hits "${code}")
    if(hits)
      list(APPEND failures "${rel}: includes a backend's internal header: ${hits}")
    endif()
  endforeach()
endforeach()

# Only the wrappers call the table (any table's slot called through a
# cube__backend_t: be.vt->write(...)).
set(slots "(availability|device_count|device_create|device_destroy|alloc|dealloc|write|read|launch|host_alloc|host_dealloc|stream_create|stream_destroy|prepare|kernel_limits|sync|alloc_on|dealloc_on|trim|event_record|event_wait|event_done|event_sync|event_destroy|event_elapsed|ctl|graph_create|graph_update|graph_launch|graph_destroy|copy)")
file(GLOB_RECURSE all ${SRC}/*.c)
foreach(f IN LISTS all)
  file(RELATIVE_PATH rel ${SRC} ${f})
  if(rel STREQUAL "backends/backend.c")
    continue()
  endif()
  file(READ ${f} text)
  string(REGEX REPLACE "/\\*([^*]|\\*+[^*/])*\\*+/" "" code "${text}")
  string(REGEX REPLACE "//[^\n]*" "" code "${code}")
  string(REGEX MATCHALL "(\\.|->)vt->${slots}\\(" hits "${code}")
  if(hits)
    list(APPEND failures "${rel}: calls a backend slot directly (use src/backends/backend.c): ${hits}")
  endif()
endforeach()

if(NOT DEFINED MIN_FILES)
  set(MIN_FILES 20)
endif()
if(checked LESS MIN_FILES)
  message(FATAL_ERROR "rules: only ${checked} files found under ${SRC}: wrong SRC?")
endif()
if(failures)
  list(JOIN failures "\n  " msg)
  message(FATAL_ERROR "the backend boundary is broken:\n  ${msg}")
endif()
message(STATUS "backend boundary holds over ${checked} files above src/backends/")
