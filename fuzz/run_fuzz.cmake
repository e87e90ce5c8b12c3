# Runs one libFuzzer target (cmake -P): FUZZER, SEEDS (the committed seed
# corpus, read only), WORK (a build-tree folder), SECONDS.
foreach(v FUZZER SEEDS WORK SECONDS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_fuzz.cmake: ${v} is not set")
  endif()
endforeach()
file(MAKE_DIRECTORY ${WORK}/corpus ${WORK}/artifacts)
file(GLOB seeds ${SEEDS}/*)
if(seeds)
  file(COPY ${seeds} DESTINATION ${WORK}/corpus)
endif()
execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} -rss_limit_mb=2048
          -artifact_prefix=${WORK}/artifacts/ -print_final_stats=1 ${WORK}/corpus
  WORKING_DIRECTORY ${WORK}
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE out)
file(WRITE ${WORK}/last-run.log "${out}")
string(REGEX MATCH "Done [0-9]+ runs in [0-9]+ second\\(s\\)" done "${out}")
string(REGEX MATCH "stat::number_of_executed_units: *[0-9]+" units "${out}")
if(NOT rc EQUAL 0)
  message("${out}")
  message(FATAL_ERROR "${FUZZER} failed (exit ${rc}); log: ${WORK}/last-run.log, "
                      "crashing inputs under ${WORK}/artifacts/")
endif()
get_filename_component(name ${FUZZER} NAME)
message("${name}: ${done} (${units}); corpus ${WORK}/corpus")
