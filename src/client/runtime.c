/* The client API: the runtime as a whole (cube_shutdown). */
#include "base/options.h"
#include "client/client_internal.h"
#include "collective/collective.h"
#include "kernel/cache.h"

atomic_uint_fast64_t cube__client_epoch_counter;

void cube_shutdown(void) {
  atomic_fetch_add(&cube__client_epoch_counter, 1);
  /* Steps held by automatic capture are queued first: what was called
   * before the shutdown runs, as eager launches would. */
  cube__auto_shutdown();
  /* Every device runs what was queued before any is destroyed (a device's
   * task may use another's memory: the last participant of a collective),
   * then NCCL work in flight ends (or is aborted). */
  cube__queue_drain_all();
  cube__coll_quiesce();
  cube__queue_shutdown_all();
  cube__coll_shutdown();
  cube__handle_invalidate_all();
  cube__server_sweep_orphans();
  cube__cache_shutdown();
  /* Last: the next use reads the environment again (base/options.h). */
  cube__options_reset();
}
