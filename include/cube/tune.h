/* cube/tune.h: tunable operations (docs/autotune.md).
 *
 * An operation has N candidates: kernels that compute the same thing in
 * different ways (tile sizes, vector widths, cube dims, variants' defines),
 * each with the way to launch it for given arguments (its cube count). A key
 * function maps the arguments to a tuning key, anchored so that nearby
 * shapes share one (cube_tune_anchor rounds a size up to a power of two).
 *
 * The first launch of a key on a device tunes it: every candidate that can
 * run these arguments (its validity check, the device's limits) runs once on
 * scratch copies of the outputs and is compared with the reference candidate
 * when the operation has one (a candidate whose output differs is rejected,
 * with the first differing element in its record, and never chosen); then
 * the candidates are measured in rounds with device timing
 * (cube_client_profile: events on GPUs and OpenCL devices with profiling,
 * the host clock around launch and sync on the CPU), candidates clearly
 * slower than the fastest are eliminated early, and the measuring stops at
 * the time budget. The first round always completes (every candidate that
 * passed its checks has one sample before the budget is looked at), so a
 * tuning lasts at least one sample of each candidate even when that is
 * longer than the budget. When several candidates' median samples end within
 * 5 % of the fastest, up to 8 more rounds over those only decide between
 * them (within the budget). The winner, the candidate with the fastest
 * median sample, is launched on the caller's arguments. Later
 * launches of the key cost the key function and a lookup.
 *
 * Results persist in the kernel cache directory (CUBE_CACHE_DIR; entries of
 * kind "tune"), keyed by cube's version, the device's identity
 * (cube_client_device_identity), the operation's name and version, its
 * candidates' names and the key; written atomically, shared by processes (one
 * process tunes a key while the others wait for it, through a lock file), and
 * a stale or corrupt entry is ignored and tuned again. CUBE_TUNE=off launches
 * the default candidate and tunes nothing. Under an execution override
 * (cube/execution.h) compile-only compiles every candidate and tunes nothing;
 * compile-and-tune also tunes.
 *
 * Ownership: cube_tune_op_create returns an operation with one reference,
 * owned by the caller; it keeps references on its candidates' kernels and
 * copies of every string. Operations belong to no device.
 *
 * Thread safety: every function here is thread-safe; an operation may be
 * launched from several threads at once (concurrent first launches of one
 * key tune it once, the others wait). The callbacks (key, count, validity)
 * may be called from any thread that launches, concurrently: they must be
 * thread-safe, must not block, and must not call into the operation.
 */
#ifndef CUBE_TUNE_H_
#define CUBE_TUNE_H_

#include <stdint.h>

#include "cube/client.h"
#include "cube/device.h"
#include "cube/kernel.h"
#include "cube/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CUBE_TUNE_KEY_MAX 8
#define CUBE_TUNE_MAX_CANDIDATES 32

/* A tuning key: up to CUBE_TUNE_KEY_MAX values (a plain value). */
typedef struct cube_tune_key {
  uint32_t count;
  uint64_t values[CUBE_TUNE_KEY_MAX];
} cube_tune_key_t;

/* Anchoring: the bucket of |value|, the smallest power of two at least
 * |value| (0 stays 0); with |max| > 0, values beyond max share max's bucket.
 * Pure arithmetic. */
uint64_t cube_tune_anchor(uint64_t value, uint64_t max);

/* The key of |args| (the arguments of cube_tune_op_launch, borrowed for the
 * call) on a device with |props|: fills out_key (count <= CUBE_TUNE_KEY_MAX).
 * Put into the key what changes which candidate is fastest or which can run
 * (anchored sizes, divisibility that a candidate needs). A failure is the
 * launch's status. */
typedef cube_status_t (*cube_tune_key_fn)(void* user, const cube_device_properties_t* props,
                                          size_t arg_count, const cube_arg_t* args,
                                          cube_tune_key_t* out_key);

/* The cube count of a candidate for |args|. */
typedef cube_status_t (*cube_tune_count_fn)(void* user, size_t arg_count, const cube_arg_t* args,
                                            cube_count_t* out_count);

/* Whether a candidate can run |args| on a device with |props|: CUBE_OK, or a
 * status (handed over to the tuner, which keeps its message in the record)
 * saying why not. */
typedef cube_status_t (*cube_tune_valid_fn)(void* user, const cube_device_properties_t* props,
                                            size_t arg_count, const cube_arg_t* args);

/* One candidate (a plain value, copied by cube_tune_op_create). */
typedef struct cube_tune_candidate {
  const char* name;          /* unique in the operation: letters, digits, '_', '-', '.' */
  cube_kernel_t* kernel;     /* borrowed; the operation takes a reference */
  cube_tune_count_fn count;  /* required */
  cube_tune_valid_fn valid;  /* NULL: every argument set */
  void* user;                /* given to count and valid */
} cube_tune_candidate_t;

typedef enum cube_tune_compare_e {
  CUBE_TUNE_COMPARE_BYTES = 0, /* outputs equal byte for byte */
  CUBE_TUNE_COMPARE_F32 = 1,   /* float elements: |got - ref| <= atol + rtol * |ref| */
  CUBE_TUNE_COMPARE_F64 = 2,   /* the same over doubles */
} cube_tune_compare_t;

/* What cube_tune_op_create makes an operation from (an input struct:
 * cube_tune_op_desc_initialize, then the fields). */
typedef struct cube_tune_op_desc {
  size_t struct_size;
  const char* name;                        /* required; keys persisted results */
  const char* version;                     /* the operation's own version (NULL: ""); change
                                              it when candidates change what they do */
  const cube_tune_candidate_t* candidates; /* 1 to CUBE_TUNE_MAX_CANDIDATES */
  uint32_t candidate_count;
  cube_tune_key_fn key;                    /* required */
  void* key_user;
  int32_t reference;          /* index of the reference candidate, or -1 (none) */
  uint32_t default_candidate; /* launched when tuning is off (CUBE_TUNE=off) */
  uint64_t outputs;           /* bit i: argument i (a buffer) is written; these get scratch
                                 copies while tuning and are compared with the reference */
  cube_tune_compare_t compare;
  double rtol, atol;          /* for F32 and F64 */
  double budget_s;            /* seconds of measuring per key; 0: CUBE_TUNE_BUDGET */
  cube_execution_mode_t mode; /* of every launch */
} cube_tune_op_desc_t;

/* Defaults: no candidates, reference -1, default candidate 0, byte
 * comparison, rtol 1e-5, atol 0, the budget of CUBE_TUNE_BUDGET, Checked
 * mode; struct_size set. NULL is ignored. */
void cube_tune_op_desc_initialize(cube_tune_op_desc_t* desc);

typedef struct cube_tune_op_s cube_tune_op_t;

/* Creates an operation (owned by the caller). Fails with INVALID_ARGUMENT,
 * naming the field: a NULL desc, out_op, name, key or candidates; a
 * candidate count of 0 or above CUBE_TUNE_MAX_CANDIDATES; a candidate
 * without a name, kernel or count function, or whose name is repeated or
 * holds other characters; kernels whose argument counts or kinds differ; a
 * reference or default candidate out of range; a reference without outputs;
 * outputs naming an argument past the kernels' or one that is not a buffer;
 * a compare or mode value that is not one; negative tolerances or budget;
 * UNSUPPORTED for a struct_size this library does not know; OUT_OF_MEMORY. */
CUBE_MUST_USE_RESULT cube_status_t cube_tune_op_create(const cube_tune_op_desc_t* desc,
                                                       cube_tune_op_t** out_op);
cube_tune_op_t* cube_tune_op_retain(cube_tune_op_t* op);
void cube_tune_op_release(cube_tune_op_t* op);

/* The operation's name ("" for NULL). */
const char* cube_tune_op_name(const cube_tune_op_t* op);

/* Launches the operation on |args| through |client|: the key's winner, tuned
 * now when the key is new on the device (the call then takes as long as the
 * tuning). When the winner cannot run these exact arguments (another shape of
 * the key's bucket), the next fastest measured candidate that can runs, else
 * the first one that can. Fails with INVALID_ARGUMENT (NULL arguments, an
 * argument count or kind that differs from the candidates', a key of more than
 * CUBE_TUNE_KEY_MAX values, no candidate that can run the arguments: the
 * reasons are named), the key function's failure, a launch's failure (as
 * cube_client_launch_mode), the stream's deferred errors found before tuning,
 * or FAILED_PRECONDITION when tuning found no candidate that runs and gives
 * the reference's result (the record says why each was rejected). */
CUBE_MUST_USE_RESULT cube_status_t cube_tune_op_launch(cube_tune_op_t* op, cube_client_t* client,
                                                       size_t arg_count, const cube_arg_t* args);

/* Launches candidate |index| alone, as cube_client_launch_mode would (no
 * tuning, no lookup): for benchmarks and tests. Fails as cube_tune_op_launch,
 * and with OUT_OF_RANGE for an index past the candidates, or the candidate's
 * validity status. */
CUBE_MUST_USE_RESULT cube_status_t cube_tune_op_launch_candidate(cube_tune_op_t* op,
                                                                 cube_client_t* client,
                                                                 uint32_t index,
                                                                 size_t arg_count,
                                                                 const cube_arg_t* args);

typedef enum cube_tune_outcome_e {
  CUBE_TUNE_MEASURED = 0,     /* ran, gave the reference's result, timed */
  CUBE_TUNE_INVALID = 1,      /* cannot run these arguments here (reason) */
  CUBE_TUNE_WRONG = 2,        /* its output differs from the reference's (the first element) */
  CUBE_TUNE_FAILED = 3,       /* its compile or launch failed (the status) */
  CUBE_TUNE_ELIMINATED = 4,   /* measured, clearly slower than the fastest, dropped early */
  CUBE_TUNE_NOT_MEASURED = 5, /* the budget ran out before its turn (not made by this
                                 version's tuner, whose first round always completes;
                                 kept for records and programs that name it) */
} cube_tune_outcome_t;

/* "measured", "invalid", "wrong", "failed", "eliminated", "not measured";
 * "unknown" past the last. */
const char* cube_tune_outcome_name(cube_tune_outcome_t outcome);

/* One candidate's part of a tuning (a plain value). */
typedef struct cube_tune_result {
  cube_tune_outcome_t outcome;
  uint32_t samples;   /* timed samples */
  double best_ns;     /* fastest sample, per launch */
  double median_ns;   /* median sample, per launch: the winner has the fastest */
  char reason[192];   /* why not measured, or why eliminated */
} cube_tune_result_t;

typedef enum cube_tune_origin_e {
  CUBE_TUNE_ORIGIN_TUNED = 0, /* measured by this process */
  CUBE_TUNE_ORIGIN_DISK = 1,  /* loaded from the cache directory */
} cube_tune_origin_t;

/* The tuning of one key on one device (an output struct). */
typedef struct cube_tune_record {
  size_t struct_size;
  cube_tune_key_t key;
  uint32_t winner;
  uint32_t candidate_count;
  cube_tune_origin_t origin;
  cube_timing_method_t timing; /* how the samples were timed */
  double tuning_s;             /* how long the measuring took */
  cube_tune_result_t results[CUBE_TUNE_MAX_CANDIDATES]; /* in candidate order */
} cube_tune_record_t;

/* The record of the key |args| give on |client|'s device, tuned in this
 * process or found in the cache directory (this call tunes nothing). Fails
 * with NOT_FOUND when the key has not been tuned on this device, and as
 * cube_tune_op_launch for bad input; INVALID_ARGUMENT for a struct_size
 * smaller than the struct_size field. */
CUBE_MUST_USE_RESULT cube_status_t cube_tune_op_record(cube_tune_op_t* op, cube_client_t* client,
                                                       size_t arg_count, const cube_arg_t* args,
                                                       cube_tune_record_t* out_record);

#ifdef __cplusplus
}
#endif

#endif /* CUBE_TUNE_H_ */
