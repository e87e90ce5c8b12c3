// cube-test-libs: cube_mod_memory
/* Drop queue and its flush policy (reference §4.9). */
#include <stdbool.h>

#include "base/status.h"
#include "check.h"
#include "memory/drop_queue.h"

/* Counting fences; |fail_sync| makes the next syncs fail. */
typedef struct fake_fences {
  int created, synced, destroyed;
  int fail_sync, fail_create;
  int token; /* fences are pointers into here */
} fake_fences_t;

static cube_status_t fake_create(void* self, void** out_fence) {
  fake_fences_t* f = self;
  if (f->fail_create > 0) {
    f->fail_create--;
    return cube__status_make(CUBE_STATUS_ABORTED, "fake fence: create failed");
  }
  f->created++;
  *out_fence = &f->token;
  return CUBE_OK;
}

static cube_status_t fake_sync(void* self, void* fence) {
  fake_fences_t* f = self;
  if (fence != &f->token) return cube__status_make(CUBE_STATUS_INTERNAL, "bad fence");
  if (f->fail_sync > 0) {
    f->fail_sync--;
    return cube__status_make(CUBE_STATUS_ABORTED, "fake fence: device lost");
  }
  f->synced++;
  return CUBE_OK;
}

static void fake_destroy(void* self, void* fence) {
  fake_fences_t* f = self;
  (void)fence;
  f->destroyed++;
}

static cube__fence_ops_t fake_ops(fake_fences_t* f) {
  *f = (fake_fences_t){0};
  return (cube__fence_ops_t){f, fake_create, fake_sync, fake_destroy};
}

static int released;
static void count_release(void* item) {
  (void)item;
  released++;
}

/* Policy ---------------------------------------------------------------- */

static const cube__drop_policy_t small_policy = {4, 100};

CUBE_TEST(drop_policy_nothing_registered_no_flush) {
  cube__drop_counter_t c = {0, 0};
  CHECK(!cube__drop_counter_should_flush(&c, &small_policy));
}

CUBE_TEST(drop_policy_flush_on_count) {
  cube__drop_counter_t c = {0, 0};
  for (int i = 0; i < 3; ++i) cube__drop_counter_register(&c, 1);
  CHECK(!cube__drop_counter_should_flush(&c, &small_policy));
  cube__drop_counter_register(&c, 1);
  CHECK(cube__drop_counter_should_flush(&c, &small_policy));
}

CUBE_TEST(drop_policy_flush_on_one_large_entry) {
  cube__drop_counter_t c = {0, 0};
  cube__drop_counter_register(&c, 101);
  CHECK(cube__drop_counter_should_flush(&c, &small_policy));
}

CUBE_TEST(drop_policy_flush_on_accumulated_size) {
  cube__drop_counter_t c = {0, 0};
  cube__drop_counter_register(&c, 60);
  CHECK(!cube__drop_counter_should_flush(&c, &small_policy));
  cube__drop_counter_register(&c, 60);
  CHECK(cube__drop_counter_should_flush(&c, &small_policy));
}

CUBE_TEST(drop_policy_reset_clears) {
  cube__drop_counter_t c = {0, 0};
  for (int i = 0; i < 4; ++i) cube__drop_counter_register(&c, 1);
  cube__drop_counter_register(&c, 200);
  CHECK(cube__drop_counter_should_flush(&c, &small_policy));
  cube__drop_counter_reset(&c);
  CHECK(!cube__drop_counter_should_flush(&c, &small_policy));
  CHECK_EQ_U64(c.count, 0);
  CHECK_EQ_U64(c.bytes, 0);
}

CUBE_TEST(drop_policy_defaults_and_saturation) {
  cube__drop_policy_t p;
  cube__drop_policy_initialize(&p);
  CHECK_EQ_U64(p.max_count, 64);
  CHECK_EQ_U64(p.max_bytes, 64ull * 1024 * 1024);
  cube__drop_counter_t c = {0, 0};
  cube__drop_counter_register(&c, UINT64_MAX - 1);
  cube__drop_counter_register(&c, 5); /* no wrap (the u32 bug of the reference) */
  CHECK_EQ_U64(c.bytes, UINT64_MAX);
  CHECK(cube__drop_counter_should_flush(&c, &p));
}

/* Queue ----------------------------------------------------------------- */

static const cube__drop_policy_t queue_policy = {2048, 8};

CUBE_TEST(drop_queue_should_flush_on_count) {
  fake_fences_t f;
  cube__fence_ops_t ops = fake_ops(&f);
  cube__drop_queue_t q;
  cube__drop_queue_initialize(&q, &queue_policy, &ops);
  for (int i = 0; i < 2047; ++i) CHECK_OK(cube__drop_queue_push(&q, NULL, 0, NULL));
  CHECK(!cube__drop_queue_should_flush(&q));
  CHECK_OK(cube__drop_queue_push(&q, NULL, 0, NULL));
  CHECK(cube__drop_queue_should_flush(&q));
  CHECK_OK(cube__drop_queue_deinitialize(&q));
}

CUBE_TEST(drop_queue_should_flush_on_size) {
  fake_fences_t f;
  cube__fence_ops_t ops = fake_ops(&f);
  cube__drop_queue_t q;
  cube__drop_queue_initialize(&q, &queue_policy, &ops);
  CHECK(!cube__drop_queue_should_flush(&q));
  CHECK_OK(cube__drop_queue_push(&q, NULL, 9, NULL));
  CHECK(cube__drop_queue_should_flush(&q));
  CHECK_OK(cube__drop_queue_deinitialize(&q));
}

CUBE_TEST(drop_queue_first_flush_creates_without_sync) {
  fake_fences_t f;
  cube__fence_ops_t ops = fake_ops(&f);
  cube__drop_queue_t q;
  cube__drop_queue_initialize(&q, &queue_policy, &ops);
  CHECK_OK(cube__drop_queue_push(&q, NULL, 1, NULL));
  CHECK_OK(cube__drop_queue_flush(&q));
  CHECK_EQ_U64(f.created, 1);
  CHECK_EQ_U64(f.synced, 0);
  CHECK_OK(cube__drop_queue_deinitialize(&q));
}

CUBE_TEST(drop_queue_two_flushes_one_sync) {
  fake_fences_t f;
  cube__fence_ops_t ops = fake_ops(&f);
  cube__drop_queue_t q;
  cube__drop_queue_initialize(&q, &queue_policy, &ops);
  CHECK_OK(cube__drop_queue_push(&q, NULL, 1, NULL));
  CHECK_OK(cube__drop_queue_flush(&q));
  CHECK_OK(cube__drop_queue_push(&q, NULL, 1, NULL));
  CHECK_OK(cube__drop_queue_flush(&q));
  CHECK_EQ_U64(f.synced, 1);
  CHECK_EQ_U64(f.created, 2);
  CHECK_OK(cube__drop_queue_deinitialize(&q));
}

CUBE_TEST(drop_queue_ten_cycles_nine_syncs) {
  fake_fences_t f;
  cube__fence_ops_t ops = fake_ops(&f);
  cube__drop_queue_t q;
  cube__drop_queue_initialize(&q, &queue_policy, &ops);
  released = 0;
  for (int i = 0; i < 10; ++i) {
    CHECK_OK(cube__drop_queue_push(&q, NULL, 4, count_release));
    CHECK_OK(cube__drop_queue_flush(&q));
  }
  CHECK_EQ_U64(f.synced, 9);
  CHECK_EQ_U64(f.created, 10);
  CHECK_EQ_U64(f.destroyed, 9);
  CHECK_EQ_U64(released, 9); /* the last item waits for one more cycle */
  CHECK_OK(cube__drop_queue_deinitialize(&q));
  CHECK_EQ_U64(released, 10);
  CHECK_EQ_U64(f.destroyed, f.created);
}

CUBE_TEST(drop_queue_staged_moves_to_pending) {
  fake_fences_t f;
  cube__fence_ops_t ops = fake_ops(&f);
  cube__drop_queue_t q;
  cube__drop_queue_initialize(&q, &queue_policy, &ops);
  released = 0;
  int items[6];
  for (int i = 0; i < 5; ++i) CHECK_OK(cube__drop_queue_push(&q, &items[i], 1, count_release));
  CHECK_EQ_U64(cube__drop_queue_staged_count(&q), 5);
  CHECK_OK(cube__drop_queue_flush(&q));
  CHECK_EQ_U64(cube__drop_queue_staged_count(&q), 0);
  CHECK_EQ_U64(cube__drop_queue_pending_count(&q), 5);
  for (int i = 0; i < 5; ++i) CHECK(q.pending.items[i].item == &items[i]);
  CHECK_EQ_U64(released, 0);
  CHECK_OK(cube__drop_queue_push(&q, &items[5], 1, count_release));
  CHECK_OK(cube__drop_queue_flush(&q));
  CHECK_EQ_U64(cube__drop_queue_pending_count(&q), 1);
  CHECK(q.pending.items[0].item == &items[5]);
  CHECK_EQ_U64(released, 5);
  CHECK_OK(cube__drop_queue_deinitialize(&q));
  CHECK_EQ_U64(released, 6);
}

CUBE_TEST(drop_queue_no_flush_right_after_flush) {
  fake_fences_t f;
  cube__fence_ops_t ops = fake_ops(&f);
  cube__drop_queue_t q;
  cube__drop_queue_initialize(&q, &queue_policy, &ops);
  CHECK_OK(cube__drop_queue_push(&q, NULL, 100, NULL));
  CHECK(cube__drop_queue_should_flush(&q));
  CHECK_OK(cube__drop_queue_flush(&q));
  CHECK(!cube__drop_queue_should_flush(&q));
  CHECK_OK(cube__drop_queue_deinitialize(&q));
}

CUBE_TEST(drop_queue_flush_empty_three_times) {
  fake_fences_t f;
  cube__fence_ops_t ops = fake_ops(&f);
  cube__drop_queue_t q;
  cube__drop_queue_initialize(&q, NULL, &ops);
  for (int i = 0; i < 3; ++i) CHECK_OK(cube__drop_queue_flush(&q));
  CHECK_EQ_U64(cube__drop_queue_staged_count(&q), 0);
  CHECK_EQ_U64(cube__drop_queue_pending_count(&q), 0);
  CHECK_EQ_U64(f.created, 3);
  CHECK_EQ_U64(f.synced, 2);
  CHECK_OK(cube__drop_queue_deinitialize(&q));
  CHECK_EQ_U64(f.destroyed, f.created);
}

/* Deinitialize waits for staged items with a fresh fence, then releases. */
CUBE_TEST(drop_queue_deinitialize_waits_and_releases) {
  fake_fences_t f;
  cube__fence_ops_t ops = fake_ops(&f);
  cube__drop_queue_t q;
  cube__drop_queue_initialize(&q, NULL, &ops);
  released = 0;
  CHECK_OK(cube__drop_queue_push(&q, NULL, 1, count_release));
  CHECK_OK(cube__drop_queue_flush(&q));
  CHECK_OK(cube__drop_queue_push(&q, NULL, 1, count_release));
  CHECK_OK(cube__drop_queue_deinitialize(&q));
  CHECK_EQ_U64(released, 2);
  CHECK_EQ_U64(f.synced, 2); /* the last flush's fence, then a fresh one */
  CHECK_EQ_U64(f.destroyed, f.created);
}

/* A failed wait keeps the items; the next flush fences them again. */
CUBE_TEST(drop_queue_failed_sync_keeps_items) {
  fake_fences_t f;
  cube__fence_ops_t ops = fake_ops(&f);
  cube__drop_queue_t q;
  cube__drop_queue_initialize(&q, NULL, &ops);
  released = 0;
  CHECK_OK(cube__drop_queue_push(&q, NULL, 1, count_release));
  CHECK_OK(cube__drop_queue_flush(&q));
  CHECK_OK(cube__drop_queue_push(&q, NULL, 1, count_release));
  f.fail_sync = 1;
  CHECK_STATUS(cube__drop_queue_flush(&q), CUBE_STATUS_ABORTED, "device lost");
  CHECK_EQ_U64(released, 0);
  CHECK_EQ_U64(cube__drop_queue_pending_count(&q), 1);
  CHECK_EQ_U64(cube__drop_queue_staged_count(&q), 1);
  CHECK_OK(cube__drop_queue_flush(&q)); /* fresh fence for the pending item */
  CHECK_EQ_U64(released, 1);
  CHECK_EQ_U64(cube__drop_queue_pending_count(&q), 1);
  CHECK_OK(cube__drop_queue_deinitialize(&q));
  CHECK_EQ_U64(released, 2);
  CHECK_EQ_U64(f.destroyed, f.created);
}

/* A failed fence record leaves the moved items pending without a fence. */
CUBE_TEST(drop_queue_failed_create_is_recovered) {
  fake_fences_t f;
  cube__fence_ops_t ops = fake_ops(&f);
  cube__drop_queue_t q;
  cube__drop_queue_initialize(&q, NULL, &ops);
  released = 0;
  CHECK_OK(cube__drop_queue_push(&q, NULL, 1, count_release));
  f.fail_create = 1;
  CHECK_STATUS(cube__drop_queue_flush(&q), CUBE_STATUS_ABORTED, "create failed");
  CHECK_EQ_U64(cube__drop_queue_pending_count(&q), 1);
  CHECK(!q.has_fence);
  CHECK_OK(cube__drop_queue_flush(&q));
  CHECK_EQ_U64(released, 1);
  CHECK_OK(cube__drop_queue_deinitialize(&q));
  CHECK_EQ_U64(f.destroyed, f.created);
}
