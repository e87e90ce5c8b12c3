/* The conformance registry: what each backend variant cannot run, and why.
 * A case listed here for the variant under test skips (exit 77) with its
 * reason printed, instead of failing for want of something the backend does
 * not have; every other case must pass. A new backend adds a line here only
 * if it lacks a capability (IREE's CTS calls these "unsupported tests").
 *
 * Patterns: a case name, or a prefix ending in '*'. */
#include <stdio.h>
#include <string.h>

#include "cts.h"

typedef struct cts_unsupported {
  const char* variant; /* a variant name, or a prefix ending in '*' ("cuda-mock*") */
  const char* cases;   /* space-separated names or prefixes ending in '*' */
  const char* reason;
} cts_unsupported_t;

static const cts_unsupported_t cts_unsupported[] = {
    {"null",
     "dialect_saxpy dialect_reduce_sync_cube dialect_sync_cube_shapes dialect_matmul_tiled "
     "dialect_atomic_histogram dialect_defines_specialise dialect_dynamic_count "
     "dialect_positions_1d dialect_positions_2d dialect_positions_3d dialect_positions_count_shapes "
     "dialect_oob_checked "
     "dialect_oob_validate dialect_unchecked_in_bounds dialect_compile_error "
     "dialect_cache_disk_hit_in_child dialect_cache_corrupt_entry_rebuilt "
     "dialect_cache_concurrent_processes dialect_cache_precompile_no_recompile "
     "dialect_cache_many_define_sets dialect_cache_memory_hits_in_process launch_saxpy_1000003 launch_static_3d_visits_each_cube_once launch_dynamic_count "
     "launch_zero_count_runs_nothing launch_unchecked_and_modes "
     "launch_unchecked_check_mode_enforce launch_shared_memory_scratch "
     "launch_keeps_buffers_alive launch_order_and_views profile_launch_duration "
     "profile_failing_launch_reported_by_profile profile_level_basic_summary "
     "profile_level_exec_logs_launches profile_env_medium profile_level_full_logs_counts "
     "profile_log_file_env bad_input_kernel_args devices_shutdown_and_reuse errors_deferred_to_flush "
     "errors_deferred_to_sync errors_deferred_to_read errors_two_failures_one_status "
     "errors_memory_usage_while_pending errors_work_after_failure_still_runs "
     "memory_handle_can_mut_and_accessors streams_two_threads_independent "
     "streams_two_threads_one_client streams_pinned_stream_errors_separate "
     "streams_handle_used_on_another_stream streams_thread_errors_do_not_leak "
     "streams_write_launch_read_on_three_streams "
     "exclusive_nested_calls exclusive_no_interleaving write_ordered_with_launches "
     "graph_replay_matches_eager graph_captured_write graph_rebinding "
     "graph_outlives_handles graph_replay_several_threads profile_graph_replay_one_row "
     "graph_scalar_rebinding copy_ordered_with_launches graph_copy_between_launches "
     "graph_collectives_between_launches graph_node_failures_deferred "
     "graph_auto_random_steps_match_eager graph_auto_falls_back_when_the_sequence_changes "
     "graph_auto_new_buffers_each_step graph_auto_aliasing_is_part_of_the_step "
     "graph_auto_errors_as_eager graph_auto_other_stream_sees_held_work "
     "graph_auto_leaves_explicit_capture_alone graph_auto_several_threads "
     "graph_auto_threads_share_a_pinned_stream graph_auto_off_by_default "
     "graph_auto_out_of_memory_as_eager "
     "read_order_races_launches_pinned_stream read_order_error_after_finished_launch "
     "taint_chain_names_the_root taint_cleared_by_whole_write_or_copy "
     "taint_read_only_buffers_stay_valid taint_two_failures_reported_together "
     "taint_diamond_across_streams_and_threads taint_graph_replay_like_eager",
     "the null backend compiles and runs no kernels (its launch slot is UNIMPLEMENTED)"},
    {"null",
     "compile_limit_fails_the_launch_and_the_device_goes_on "
     "compile_limit_status_names_kernel_and_limit compile_limit_background_build_fills_the_cache",
     "the null backend compiles no kernels: there is no compile to stop"},
    {"null",
     "execution_compile_only_compiles_and_runs_nothing "
     "execution_compile_only_reports_a_compile_error execution_run_override_counts_and_runs",
     "the null backend compiles and runs no kernels"},
    {"null",
     "tune_anchoring_shares_a_key tune_rejects_a_wrong_candidate_and_skips_invalid_ones "
     "tune_without_a_correct_candidate_fails tune_winner_invalid_for_another_shape_falls_back "
     "tune_concurrent_first_launches_tune_once tune_two_processes_tune_once "
     "tune_persists_across_processes tune_corrupt_or_stale_record_is_tuned_again "
     "tune_record_keyed_by_operation_version_and_candidates tune_off_launches_the_default "
     "tune_budget_stops_the_measuring tune_policies_warm_a_cache tune_record_names_the_timing "
     "tune_winner_has_the_fastest_median",
     "the null backend runs no kernels: no candidate can be measured"},
    {"null", "bundle_second_directory_compiles_and_tunes_nothing bundle_refusals "
             "bundle_import_is_all_or_none",
     "the null backend runs no kernels: there is nothing to bundle"},
    {"null", "dialect_vector_*",
     "the null backend compiles and runs no kernels (its launch slot is UNIMPLEMENTED)"},
    {"null", "dlpack_*",
     "the null backend's memory has no DLPack device (its ctl does not answer "
     "CUBE__CTL_DLPACK_DEVICE)"},
};

/* True if |name| matches |pattern| (exact, or prefix* ). */
static bool cts_match(const char* pattern, size_t len, const char* name) {
  if (len && pattern[len - 1] == '*') return strncmp(name, pattern, len - 1) == 0;
  return strlen(name) == len && strncmp(name, pattern, len) == 0;
}

static bool cts_listed(const char* list, const char* name) {
  for (const char* p = list; *p;) {
    while (*p == ' ') ++p;
    size_t len = strcspn(p, " ");
    if (len && cts_match(p, len, name)) return true;
    p += len;
  }
  return false;
}

const char* cts_unsupported_reason(const char* variant, const char* case_name) {
  for (size_t i = 0; i < sizeof(cts_unsupported) / sizeof(cts_unsupported[0]); ++i) {
    const cts_unsupported_t* u = &cts_unsupported[i];
    if (!cts_match(u->variant, strlen(u->variant), variant)) continue;
    if (cts_listed(u->cases, case_name)) return u->reason;
  }
  return NULL;
}
