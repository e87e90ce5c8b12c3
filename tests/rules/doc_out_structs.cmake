# The documentation's examples never declare an output struct without
# initialising it (ctest: rules.docs_init_out_structs). A struct the library
# writes takes its struct_size from the caller (include/cube/cube.h, "Struct
# sizes"): declared as `cube_memory_pools_t plan;` it holds whatever was on
# the stack, and a program copied from the example had its plan cut short
# or refused. Run over docs/*.md and README.md.
if(NOT ROOT)
  message(FATAL_ERROR "usage: cmake -DROOT=<repo> -P doc_out_structs.cmake")
endif()
file(GLOB docs ${ROOT}/docs/*.md)
list(APPEND docs ${ROOT}/README.md)
set(types memory_pools memory_ledger memory_report profile_summary kernel_cache_stats
          graph_auto_stats collective_record)
list(JOIN types "|" alternatives)
set(failures "")
foreach(doc IN LISTS docs)
  file(STRINGS ${doc} hits REGEX "cube_(${alternatives})_t +[A-Za-z_][A-Za-z0-9_]*( *, *[A-Za-z_][A-Za-z0-9_]*)* *;")
  foreach(h IN LISTS hits)
    file(RELATIVE_PATH rel ${ROOT} ${doc})
    string(STRIP "${h}" h)
    list(APPEND failures "${rel}: ${h}")
  endforeach()
endforeach()
if(failures)
  list(JOIN failures "\n  " msg)
  message(FATAL_ERROR "output structs declared without an initialiser (write `= {0}`):\n  ${msg}")
endif()
list(LENGTH docs n)
message(STATUS "${n} documents declare their output structs initialised")
