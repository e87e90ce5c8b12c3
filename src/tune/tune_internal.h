/* Tunable operations (cube/tune.h), shared by tune.c (operations, the key
 * table, launches and policies), tune_measure.c (a tuning) and tune_store.c
 * (the records in the cache directory). The tuner sits above the client: it
 * launches through the public client API, and reads from the client layer
 * only the execution override (client/policy.h). */
#ifndef CUBE_TUNE_TUNE_INTERNAL_H_
#define CUBE_TUNE_TUNE_INTERNAL_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cube/cube.h"
#include "cube/tune.h"

typedef struct cube__tune_cand {
  char* name;
  cube_kernel_t* kernel;
  cube_tune_count_fn count;
  cube_tune_valid_fn valid;
  void* user;
} cube__tune_cand_t;

/* A tuned key of one device: published once, then only read. */
typedef struct cube__tune_entry {
  uint64_t hash;
  uint32_t device; /* backend * 65536 + index */
  cube_tune_key_t key;
  uint32_t order_count;                     /* measured candidates, fastest first */
  uint32_t order[CUBE_TUNE_MAX_CANDIDATES];
  cube_tune_record_t record;
} cube__tune_entry_t;

/* Open addressing over published entries, at most half full; grown by
 * copying into a table twice as large (the old one is kept until the
 * operation goes: readers may still walk it). */
typedef struct cube__tune_table {
  size_t cap;
  struct cube__tune_table* retired_next;
  _Atomic(cube__tune_entry_t*) slots[];
} cube__tune_table_t;

/* A key being tuned by some thread. */
typedef struct cube__tune_inflight {
  uint64_t hash;
  uint32_t device;
  cube_tune_key_t key;
  struct cube__tune_inflight* next;
} cube__tune_inflight_t;

struct cube_tune_op_s {
  atomic_uint refs;
  char* name;
  char* version;
  uint32_t count;
  cube__tune_cand_t cands[CUBE_TUNE_MAX_CANDIDATES];
  uint32_t arg_count;
  cube_arg_kind_t arg_kinds[CUBE_MAX_KERNEL_ARGS];
  cube_tune_key_fn key;
  void* key_user;
  int32_t reference;
  uint32_t default_candidate;
  uint64_t outputs;
  cube_tune_compare_t compare;
  double rtol, atol;
  double budget_s;
  cube_execution_mode_t mode;
  /* The tuned keys. */
  _Atomic(cube__tune_table_t*) table;
  pthread_mutex_t lock; /* insertions, the retired tables, |inflight| */
  pthread_cond_t cond;  /* a tuning ended */
  size_t entries;
  cube__tune_table_t* retired;
  cube__tune_inflight_t* inflight;
};

/* The published entry of (device, key), or NULL. Lock-free. */
cube__tune_entry_t* cube__tune_find(cube_tune_op_t* op, uint64_t hash, uint32_t device,
                                    const cube_tune_key_t* key);
/* Publishes |e| (malloc'd; the table owns it). Returns the entry now in the
 * table (an existing one when another was first: |e| is freed then). */
cube__tune_entry_t* cube__tune_publish(cube_tune_op_t* op, cube__tune_entry_t* e);
/* The ranking of |e| from its record (measured candidates by best time). */
void cube__tune_rank(cube__tune_entry_t* e);

/* Measures the candidates of |op| for |args| on |c| (tune_measure.c) into
 * |out| (whose key is set by the caller). Returns the failure that stops the
 * tuning before any candidate ran (the stream's deferred errors, no host or
 * device memory for the scratch outputs); a tuning in which no candidate
 * could be measured is CUBE_OK with every result saying why. */
cube_status_t cube__tune_measure(cube_tune_op_t* op, cube_client_t* c, size_t arg_count,
                                 const cube_arg_t* args, cube_tune_record_t* out);

/* The persisted record (tune_store.c). The key of the entry hashes cube's
 * version, |identity|, the operation's name, version and candidate names,
 * and the tuning key. */
typedef struct cube__tune_disk_key {
  uint64_t hi, lo;
} cube__tune_disk_key_t;
cube__tune_disk_key_t cube__tune_disk_key(const cube_tune_op_t* op, const char* identity,
                                          const cube_tune_key_t* key);
/* Loads the record of |dkey|: true when found and valid for |op|, |identity|
 * and |key| (a stale or malformed record is false, and says why in |why|). */
bool cube__tune_load(const cube_tune_op_t* op, const char* identity, const cube_tune_key_t* key,
                     cube__tune_disk_key_t dkey, cube_tune_record_t* out, char* why,
                     size_t why_size);
/* Stores |rec| (atomically, through the kernel cache). */
cube_status_t cube__tune_store(const cube_tune_op_t* op, const char* identity,
                               const char* backend, cube__tune_disk_key_t dkey,
                               const cube_tune_record_t* rec);

/* The index of the candidate that runs |args| for entry |e| (NULL: no
 * tuning): the fastest measured one whose validity accepts them, else the
 * default, else the first that can. INVALID_ARGUMENT naming every reason when
 * none can. */
cube_status_t cube__tune_choose(cube_tune_op_t* op, const cube__tune_entry_t* e,
                                const cube_device_properties_t* props, size_t arg_count,
                                const cube_arg_t* args, uint32_t* out_index);

/* Whether candidate |i| can run |args| (its validity check; its count; the
 * device's limits on its cube dim): CUBE_OK or why not. */
cube_status_t cube__tune_candidate_ok(cube_tune_op_t* op, uint32_t i,
                                      const cube_device_properties_t* props, size_t arg_count,
                                      const cube_arg_t* args, cube_count_t* out_count);

#endif /* CUBE_TUNE_TUNE_INTERNAL_H_ */
