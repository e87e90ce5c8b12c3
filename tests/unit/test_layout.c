// cube-test-libs: cube_static
/* Memory layout policies (docs/cubecl.md, "Layouts"): cube_layout_desc_initialize,
 * cube_layout_compute and cube_layout_strides_readable. */
#include "check.h"
#include "cube/handle.h"

static cube_layout_desc_t desc(cube_layout_strategy_t strategy, uint32_t rank,
                               const uint64_t* shape, uint32_t elem_size) {
  cube_layout_desc_t d;
  memset(&d, 0, sizeof(d));
  cube_status_t s = cube_layout_desc_initialize(strategy, rank, shape, elem_size, &d);
  if (s) {
    fprintf(stderr, "desc: %s\n", cube_status_message(s));
    cube_status_free(s);
    cube_test_failures++;
  }
  return d;
}

/* One tensor through cube_layout_compute. */
static cube_status_t one(cube_layout_policy_t policy, uint64_t align, cube_layout_desc_t d,
                         uint64_t strides[CUBE_MAX_RANK], uint64_t* size, uint64_t* total) {
  uint64_t st[1][CUBE_MAX_RANK];
  uint64_t offset = 99;
  cube_status_t s = cube_layout_compute(policy, align, 1, &d, st, &offset, size, total);
  if (!s) {
    memcpy(strides, st[0], sizeof(st[0]));
    CHECK_EQ_U64(offset, 0);
  }
  return s;
}

/* Worked examples of the pitched layout (CUDA, A = 512) ------------------------ */

CUBE_TEST(cuda_f32_3x5_optimized) {
  uint64_t shape[] = {3, 5};
  uint64_t strides[CUBE_MAX_RANK], size = 0, total = 0;
  REQUIRE_OK(one(CUBE_LAYOUT_POLICY_PITCHED, 512, desc(CUBE_LAYOUT_OPTIMIZED, 2, shape, 4),
                 strides, &size, &total));
  CHECK_EQ_U64(size, 96); /* pitch 32 x 3 rows */
  CHECK_EQ_U64(strides[0], 8); /* pitch 32 / 4 */
  CHECK_EQ_U64(strides[1], 1);
  CHECK_EQ_U64(total, 512);
}

CUBE_TEST(cuda_f32_5_optimized) {
  uint64_t shape[] = {5};
  uint64_t strides[CUBE_MAX_RANK], size = 0, total = 0;
  REQUIRE_OK(one(CUBE_LAYOUT_POLICY_PITCHED, 512, desc(CUBE_LAYOUT_OPTIMIZED, 1, shape, 4),
                 strides, &size, &total));
  CHECK_EQ_U64(size, 32); /* pitch 32, padding included */
  CHECK_EQ_U64(strides[0], 1);
  CHECK_EQ_U64(total, 512);
}

CUBE_TEST(cuda_two_contiguous_100_and_600) {
  uint64_t s0[] = {100}, s1[] = {600};
  cube_layout_desc_t d[2] = {desc(CUBE_LAYOUT_CONTIGUOUS, 1, s0, 1),
                             desc(CUBE_LAYOUT_CONTIGUOUS, 1, s1, 1)};
  uint64_t strides[2][CUBE_MAX_RANK], offsets[2], sizes[2], total = 0;
  REQUIRE_OK(cube_layout_compute(CUBE_LAYOUT_POLICY_PITCHED, 512, 2, d, strides, offsets, sizes,
                                 &total));
  CHECK_EQ_U64(sizes[0], 100);
  CHECK_EQ_U64(sizes[1], 600);
  CHECK_EQ_U64(offsets[0], 0);
  CHECK_EQ_U64(offsets[1], 512);
  CHECK_EQ_U64(total, 1536); /* 512 + 1024 */
  CHECK_EQ_U64(strides[0][0], 1);
  CHECK_EQ_U64(strides[1][0], 1);
}

CUBE_TEST(contiguous_policy_two_tensors_100_and_600) {
  uint64_t s0[] = {25}, s1[] = {150};
  cube_layout_desc_t d[2] = {desc(CUBE_LAYOUT_OPTIMIZED, 1, s0, 4),
                             desc(CUBE_LAYOUT_OPTIMIZED, 1, s1, 4)};
  uint64_t offsets[2], sizes[2], total = 0;
  REQUIRE_OK(cube_layout_compute(CUBE_LAYOUT_POLICY_CONTIGUOUS, 512, 2, d, NULL, offsets, sizes,
                                 &total));
  CHECK_EQ_U64(sizes[0], 100);
  CHECK_EQ_U64(sizes[1], 600);
  CHECK_EQ_U64(offsets[1], 512);
  CHECK_EQ_U64(total, 1536);
}

/* Further pitched cases --------------------------------------------------------- */

CUBE_TEST(rank0_scalar) {
  uint64_t strides[CUBE_MAX_RANK], size = 0, total = 0;
  REQUIRE_OK(one(CUBE_LAYOUT_POLICY_PITCHED, 512, desc(CUBE_LAYOUT_OPTIMIZED, 0, NULL, 4),
                 strides, &size, &total));
  CHECK_EQ_U64(size, 4); /* width 1, height 1: align = elem */
  CHECK_EQ_U64(total, 512);
  REQUIRE_OK(one(CUBE_LAYOUT_POLICY_CONTIGUOUS, 64, desc(CUBE_LAYOUT_OPTIMIZED, 0, NULL, 8),
                 strides, &size, &total));
  CHECK_EQ_U64(size, 8);
  CHECK_EQ_U64(total, 64);
  CHECK(cube_layout_strides_readable(CUBE_LAYOUT_POLICY_PITCHED, 0, NULL, NULL));
  CHECK(cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, 0, NULL, NULL));
}

CUBE_TEST(rank3_pitched_strides) {
  uint64_t shape[] = {2, 3, 5};
  uint64_t strides[CUBE_MAX_RANK], size = 0, total = 0;
  REQUIRE_OK(one(CUBE_LAYOUT_POLICY_PITCHED, 512, desc(CUBE_LAYOUT_OPTIMIZED, 3, shape, 4),
                 strides, &size, &total));
  CHECK_EQ_U64(strides[2], 1);
  CHECK_EQ_U64(strides[1], 8);      /* pitch 32 / 4 */
  CHECK_EQ_U64(strides[0], 8 * 3);  /* strides[1] * shape[1] */
  CHECK_EQ_U64(size, 6 * 32);       /* height 6 x pitch 32 */
  CHECK_EQ_U64(total, 512);
  CHECK(cube_layout_strides_readable(CUBE_LAYOUT_POLICY_PITCHED, 3, shape, strides));
  CHECK(!cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, 3, shape, strides));
}

CUBE_TEST(rank4_pitched_strides) {
  uint64_t shape[] = {2, 3, 4, 5};
  uint64_t strides[CUBE_MAX_RANK], size = 0, total = 0;
  REQUIRE_OK(one(CUBE_LAYOUT_POLICY_PITCHED, 512, desc(CUBE_LAYOUT_OPTIMIZED, 4, shape, 4),
                 strides, &size, &total));
  CHECK_EQ_U64(strides[3], 1);
  CHECK_EQ_U64(strides[2], 8);
  CHECK_EQ_U64(strides[1], 8 * 4);
  CHECK_EQ_U64(strides[0], 8 * 4 * 3);
  CHECK_EQ_U64(size, 24 * 32);
  CHECK_EQ_U64(total, 1024);
}

CUBE_TEST(width1_align_is_elem) {
  uint64_t shape[] = {7, 1};
  uint64_t strides[CUBE_MAX_RANK], size = 0, total = 0;
  REQUIRE_OK(one(CUBE_LAYOUT_POLICY_PITCHED, 512, desc(CUBE_LAYOUT_OPTIMIZED, 2, shape, 4),
                 strides, &size, &total));
  CHECK_EQ_U64(size, 28); /* pitch = elem = 4, 7 rows */
  CHECK_EQ_U64(strides[0], 1);
  CHECK_EQ_U64(strides[1], 1);
  uint64_t shape3[] = {3, 1};
  REQUIRE_OK(one(CUBE_LAYOUT_POLICY_PITCHED, 512, desc(CUBE_LAYOUT_OPTIMIZED, 2, shape3, 8),
                 strides, &size, &total));
  CHECK_EQ_U64(size, 24);
  CHECK_EQ_U64(strides[0], 1);
}

CUBE_TEST(pitched_align_clamped_low_16) {
  uint64_t shape[] = {4, 3};
  uint64_t strides[CUBE_MAX_RANK], size = 0, total = 0;
  REQUIRE_OK(one(CUBE_LAYOUT_POLICY_PITCHED, 512, desc(CUBE_LAYOUT_OPTIMIZED, 2, shape, 1),
                 strides, &size, &total));
  CHECK_EQ_U64(strides[0], 16); /* 3 bytes -> 4 -> clamped up to 16 */
  CHECK_EQ_U64(size, 64);
}

CUBE_TEST(pitched_align_clamped_high_a) {
  uint64_t shape[] = {2, 1000};
  uint64_t strides[CUBE_MAX_RANK], size = 0, total = 0;
  REQUIRE_OK(one(CUBE_LAYOUT_POLICY_PITCHED, 512, desc(CUBE_LAYOUT_OPTIMIZED, 2, shape, 4),
                 strides, &size, &total));
  /* 4000 bytes -> 4096 clamped to 512 -> pitch round_up(4000, 512) = 4096. */
  CHECK_EQ_U64(strides[0], 1024);
  CHECK_EQ_U64(size, 8192);
  CHECK_EQ_U64(total, 8192);
}

CUBE_TEST(pitched_contiguous_strategy_unpadded) {
  uint64_t shape[] = {3, 5};
  uint64_t strides[CUBE_MAX_RANK], size = 0, total = 0;
  REQUIRE_OK(one(CUBE_LAYOUT_POLICY_PITCHED, 512, desc(CUBE_LAYOUT_CONTIGUOUS, 2, shape, 4),
                 strides, &size, &total));
  CHECK_EQ_U64(size, 60); /* pitch_align 1 */
  CHECK_EQ_U64(strides[0], 5);
  CHECK_EQ_U64(strides[1], 1);
  CHECK_EQ_U64(total, 512);
}

CUBE_TEST(contiguous_policy_cpu) {
  uint64_t a[] = {3, 5}, b[] = {7}, c[] = {2, 3, 4};
  cube_layout_desc_t d[3] = {desc(CUBE_LAYOUT_OPTIMIZED, 2, a, 4),
                             desc(CUBE_LAYOUT_OPTIMIZED, 1, b, 8),
                             desc(CUBE_LAYOUT_CONTIGUOUS, 3, c, 2)};
  uint64_t strides[3][CUBE_MAX_RANK], offsets[3], sizes[3], total = 0;
  REQUIRE_OK(cube_layout_compute(CUBE_LAYOUT_POLICY_CONTIGUOUS, 64, 3, d, strides, offsets, sizes,
                                 &total));
  CHECK_EQ_U64(sizes[0], 60); /* no pitch on CPU, even for Optimized */
  CHECK_EQ_U64(strides[0][0], 5);
  CHECK_EQ_U64(strides[0][1], 1);
  CHECK_EQ_U64(sizes[1], 56);
  CHECK_EQ_U64(strides[1][0], 1);
  CHECK_EQ_U64(sizes[2], 48);
  CHECK_EQ_U64(strides[2][0], 12);
  CHECK_EQ_U64(strides[2][1], 4);
  CHECK_EQ_U64(strides[2][2], 1);
  CHECK_EQ_U64(offsets[0], 0);
  CHECK_EQ_U64(offsets[1], 64);
  CHECK_EQ_U64(offsets[2], 128);
  CHECK_EQ_U64(total, 192);
  for (int i = 0; i < 3; ++i)
    CHECK(cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, d[i].rank, d[i].shape,
                                       strides[i]));
}

CUBE_TEST(packing_offsets_sum_rounded_sizes) {
  /* Mixed tensors under the CUDA policy: offset_i = sum of round_up(size_j, A). */
  uint64_t a[] = {3, 5}, b[] = {5}, c[] = {2, 1000};
  cube_layout_desc_t d[3] = {desc(CUBE_LAYOUT_OPTIMIZED, 2, a, 4),
                             desc(CUBE_LAYOUT_OPTIMIZED, 1, b, 4),
                             desc(CUBE_LAYOUT_OPTIMIZED, 2, c, 4)};
  uint64_t offsets[3], sizes[3], total = 0;
  REQUIRE_OK(cube_layout_compute(CUBE_LAYOUT_POLICY_PITCHED, 512, 3, d, NULL, offsets, sizes,
                                 &total));
  CHECK_EQ_U64(offsets[0], 0);
  CHECK_EQ_U64(offsets[1], 512);
  CHECK_EQ_U64(offsets[2], 1024);
  CHECK_EQ_U64(total, 1024 + 8192);
  CHECK_EQ_U64(sizes[2], 8192);
}

CUBE_TEST(count_zero_total_zero) {
  uint64_t total = 7;
  REQUIRE_OK(cube_layout_compute(CUBE_LAYOUT_POLICY_PITCHED, 512, 0, NULL, NULL, NULL, NULL,
                                 &total));
  CHECK_EQ_U64(total, 0);
}

/* Readability rule ------------------------------------------------------------ */

CUBE_TEST(readable_contiguous_policy) {
  uint64_t shape[] = {2, 3, 4};
  uint64_t dense[] = {12, 4, 1};
  uint64_t pitched[] = {24, 8, 1};
  uint64_t transposed[] = {1, 2, 6};
  uint64_t inner2[] = {24, 8, 2};
  CHECK(cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, 3, shape, dense));
  CHECK(!cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, 3, shape, pitched));
  CHECK(!cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, 3, shape, transposed));
  CHECK(!cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, 3, shape, inner2));
  uint64_t s1[] = {9}, st1[] = {1}, st1b[] = {2};
  CHECK(cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, 1, s1, st1));
  CHECK(!cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, 1, s1, st1b));
}

CUBE_TEST(readable_pitched_policy) {
  uint64_t shape[] = {3, 5};
  uint64_t dense[] = {5, 1};
  uint64_t pitched[] = {8, 1};
  uint64_t narrow[] = {4, 1};      /* rows overlap */
  uint64_t transposed[] = {1, 3};  /* column-major */
  CHECK(cube_layout_strides_readable(CUBE_LAYOUT_POLICY_PITCHED, 2, shape, dense));
  CHECK(cube_layout_strides_readable(CUBE_LAYOUT_POLICY_PITCHED, 2, shape, pitched));
  CHECK(!cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, 2, shape, pitched));
  CHECK(!cube_layout_strides_readable(CUBE_LAYOUT_POLICY_PITCHED, 2, shape, narrow));
  CHECK(!cube_layout_strides_readable(CUBE_LAYOUT_POLICY_PITCHED, 2, shape, transposed));
  CHECK(!cube_layout_strides_readable(CUBE_LAYOUT_POLICY_CONTIGUOUS, 2, shape, transposed));
  /* Only the second-to-last stride may be padded. */
  uint64_t shape3[] = {2, 3, 5};
  uint64_t ok3[] = {24, 8, 1};
  uint64_t outer_padded[] = {32, 8, 1};
  CHECK(cube_layout_strides_readable(CUBE_LAYOUT_POLICY_PITCHED, 3, shape3, ok3));
  CHECK(!cube_layout_strides_readable(CUBE_LAYOUT_POLICY_PITCHED, 3, shape3, outer_padded));
  CHECK(!cube_layout_strides_readable(CUBE_LAYOUT_POLICY_PITCHED, 2, shape, NULL));
  CHECK(!cube_layout_strides_readable((cube_layout_policy_t)7, 2, shape, dense));
}

CUBE_TEST(computed_strides_are_readable) {
  uint64_t seed = 12345;
  for (int iter = 0; iter < 500; ++iter) {
    cube_layout_desc_t d;
    memset(&d, 0, sizeof(d));
    d.strategy = (cube_layout_strategy_t)(cube_test_rand(&seed) % 2);
    d.rank = (uint32_t)(cube_test_rand(&seed) % 5);
    for (uint32_t k = 0; k < d.rank; ++k) d.shape[k] = 1 + cube_test_rand(&seed) % 9;
    static const uint32_t elems[] = {1, 2, 4, 8};
    d.elem_size = elems[cube_test_rand(&seed) % 4];
    for (int p = 0; p < 2; ++p) {
      uint64_t strides[1][CUBE_MAX_RANK], size = 0, total = 0;
      REQUIRE_OK(cube_layout_compute((cube_layout_policy_t)p, 256, 1, &d, strides, NULL, &size,
                                     &total));
      CHECK(cube_layout_strides_readable((cube_layout_policy_t)p, d.rank, d.shape, strides[0]));
      /* The last element lies inside the tensor's bytes. */
      uint64_t last = 0;
      for (uint32_t k = 0; k < d.rank; ++k) last += (d.shape[k] - 1) * strides[0][k];
      CHECK((last + 1) * d.elem_size <= size);
      CHECK(total % 256 == 0 && total >= size);
    }
  }
}

/* Validation ---------------------------------------------------------------------- */

CUBE_TEST(compute_rejects_bad_descs) {
  uint64_t shape[] = {3, 5};
  cube_layout_desc_t d[2] = {desc(CUBE_LAYOUT_OPTIMIZED, 2, shape, 4),
                             desc(CUBE_LAYOUT_OPTIMIZED, 2, shape, 4)};
  uint64_t sizes[2] = {777, 777}, offsets[2] = {777, 777}, total = 777;
  d[1].elem_size = 0;
  CHECK_STATUS(cube_layout_compute(CUBE_LAYOUT_POLICY_PITCHED, 512, 2, d, NULL, offsets, sizes,
                                   &total),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_layout_compute: descs[1].elem_size is 0");
  d[1].elem_size = 4;
  d[1].rank = CUBE_MAX_RANK + 1;
  CHECK_STATUS(cube_layout_compute(CUBE_LAYOUT_POLICY_CONTIGUOUS, 64, 2, d, NULL, offsets, sizes,
                                   &total),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_layout_compute", "descs[1].rank", "13");
  d[1].rank = 2;
  d[1].shape[1] = 0;
  CHECK_STATUS(cube_layout_compute(CUBE_LAYOUT_POLICY_PITCHED, 512, 2, d, NULL, offsets, sizes,
                                   &total),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_layout_compute", "descs[1].shape[1] is 0");
  d[1].shape[1] = 5;
  d[0].strategy = (cube_layout_strategy_t)5;
  CHECK_STATUS(cube_layout_compute(CUBE_LAYOUT_POLICY_PITCHED, 512, 2, d, NULL, offsets, sizes,
                                   &total),
               CUBE_STATUS_INVALID_ARGUMENT, "descs[0].strategy", "5");
  /* A failed call writes nothing. */
  CHECK_EQ_U64(sizes[0], 777);
  CHECK_EQ_U64(offsets[0], 777);
  CHECK_EQ_U64(total, 777);
}

CUBE_TEST(compute_rejects_overflow) {
  uint64_t big[] = {UINT64_C(1) << 40, UINT64_C(1) << 40};
  cube_layout_desc_t d = desc(CUBE_LAYOUT_OPTIMIZED, 2, big, 4);
  uint64_t total = 0;
  CHECK_STATUS(cube_layout_compute(CUBE_LAYOUT_POLICY_CONTIGUOUS, 64, 1, &d, NULL, NULL, NULL,
                                   &total),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_layout_compute", "descs[0]", "overflow",
               "1099511627776");
  CHECK_STATUS(cube_layout_compute(CUBE_LAYOUT_POLICY_PITCHED, 512, 1, &d, NULL, NULL, NULL,
                                   &total),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_layout_compute", "descs[0]", "overflow");
  uint64_t near[] = {UINT64_MAX / 4};
  cube_layout_desc_t d2 = desc(CUBE_LAYOUT_CONTIGUOUS, 1, near, 4);
  CHECK_STATUS(cube_layout_compute(CUBE_LAYOUT_POLICY_CONTIGUOUS, 64, 1, &d2, NULL, NULL, NULL,
                                   &total),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_layout_compute", "overflow");
}

CUBE_TEST(compute_rejects_bad_arguments) {
  uint64_t shape[] = {4};
  cube_layout_desc_t d = desc(CUBE_LAYOUT_OPTIMIZED, 1, shape, 4);
  uint64_t total = 0;
  CHECK_STATUS(cube_layout_compute(CUBE_LAYOUT_POLICY_PITCHED, 0, 1, &d, NULL, NULL, NULL, &total),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_layout_compute", "alignment 0");
  CHECK_STATUS(cube_layout_compute(CUBE_LAYOUT_POLICY_PITCHED, 48, 1, &d, NULL, NULL, NULL, &total),
               CUBE_STATUS_INVALID_ARGUMENT, "alignment 48");
  CHECK_STATUS(cube_layout_compute((cube_layout_policy_t)3, 64, 1, &d, NULL, NULL, NULL, &total),
               CUBE_STATUS_INVALID_ARGUMENT, "policy 3");
  CHECK_STATUS(cube_layout_compute(CUBE_LAYOUT_POLICY_PITCHED, 64, 2, NULL, NULL, NULL, NULL,
                                   &total),
               CUBE_STATUS_INVALID_ARGUMENT, "descs is NULL", "2");
}

CUBE_TEST(desc_init_copies_and_validates) {
  uint64_t shape[] = {2, 3, 4};
  cube_layout_desc_t d;
  memset(&d, 0xFF, sizeof(d));
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 3, shape, 2, &d));
  CHECK(d.strategy == CUBE_LAYOUT_OPTIMIZED);
  CHECK_EQ_U64(d.rank, 3);
  CHECK_EQ_U64(d.shape[0], 2);
  CHECK_EQ_U64(d.shape[2], 4);
  CHECK_EQ_U64(d.shape[3], 0);
  CHECK_EQ_U64(d.shape[CUBE_MAX_RANK - 1], 0);
  CHECK_EQ_U64(d.elem_size, 2);
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_CONTIGUOUS, 0, NULL, 4, &d));
  CHECK_EQ_U64(d.rank, 0);

  CHECK_STATUS(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 13, shape, 4, &d),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_layout_desc_initialize", "rank 13");
  CHECK_STATUS(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 3, shape, 0, &d),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_layout_desc_initialize", "elem_size is 0");
  CHECK_STATUS(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 2, NULL, 4, &d),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_layout_desc_initialize", "shape is NULL");
  uint64_t zero[] = {4, 0};
  CHECK_STATUS(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 2, zero, 4, &d),
               CUBE_STATUS_INVALID_ARGUMENT, "cube_layout_desc_initialize", "shape[1] is 0");
  CHECK_STATUS(cube_layout_desc_initialize((cube_layout_strategy_t)9, 2, shape, 4, &d),
               CUBE_STATUS_INVALID_ARGUMENT, "strategy 9");
  CHECK_STATUS(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 2, shape, 4, NULL),
               CUBE_STATUS_INVALID_ARGUMENT, "out_desc");
}

/* Found by fuzz_layout: rounding up a row whose pitch alignment is lcm(A,
 * elem) must not overflow when the rounded pitch itself fits. */
CUBE_TEST(pitched_round_up_near_u64_max) {
  cube_layout_desc_t d;
  uint64_t shape[1] = {1537228672809129302ull};
  REQUIRE_OK(cube_layout_desc_initialize(CUBE_LAYOUT_OPTIMIZED, 1, shape, 3, &d));
  uint64_t strides[1][CUBE_MAX_RANK], off[1], size[1], total = 0;
  REQUIRE_OK(cube_layout_compute(CUBE_LAYOUT_POLICY_PITCHED, 1ull << 62, 1, &d, strides, off, size,
                                 &total));
  CHECK_EQ_U64(size[0], 13835058055282163712ull); /* 3 * 2^62 */
  CHECK_EQ_U64(total, 13835058055282163712ull);
}
