/* The layout of a self-timed CUDA kernel's timing slots, shared by the
 * backend (cuda_activity_internal.h) and the tests that hold the CUDA
 * prelude to it (the prelude, src/kernel/preludes/cuda.h, is CUDA text and
 * says its CUBE__TIMING_PLANE_WORDS itself: unit.dialect checks that it is
 * CUBE__ACT_LINE / 8). No dependencies: it builds without CUDA's headers. */
#ifndef CUBE_BACKENDS_CUDA_CUDA_TIMING_LAYOUT_H_
#define CUBE_BACKENDS_CUDA_CUDA_TIMING_LAYOUT_H_

/* Launches submitted and not copied after which the launching thread has
 * the stream copy their slots. */
#define CUBE__ACT_BATCH 1024u
/* Self-timed kernels (preludes/cuda.h, struct cube__timing): the slots of a
 * stream's CUBE__ACT_LAUNCHES launches, in batches of CUBE__ACT_BATCH, a
 * batch in groups of CUBE__ACT_GROUP launches. A group is CUBE__ACT_PLANES
 * + 1 lines of CUBE__ACT_LINE bytes: line 0 holds the group's starts, line
 * 1 + j the end raised by each launch's cubes whose index is j modulo
 * CUBE__ACT_PLANES; launch k of a group has its words 8 * k bytes into each
 * line. So a launch's cubes meet in 32 cache lines 128 bytes apart, not in
 * one (one line cost a kernel of 4,096 cubes 22 % on the H200, 32 lines 128
 * bytes apart nothing measurable; 32 words 2 KiB apart, the layout before
 * this one, still 18 % on the H100: docs/benchmarks.md), and a batch's slots
 * are one contiguous region that the stream copies, in the same layout, into
 * its ring of mapped host memory. After a piece of a batch the stream copies
 * as many words of 1 (on the device after the slots) into
 * the host's marks, one a launch after the slots: a mark seen on the host
 * means its launch's words landed before it, in the stream's order. The
 * prelude's CUBE__TIMING_PLANE_WORDS is CUBE__ACT_LINE / 8, its
 * CUBE__TIMING_PLANES is CUBE__ACT_PLANES (unit.dialect holds them). */
#define CUBE__ACT_PLANES 32u
#define CUBE__ACT_GROUP 16u
#define CUBE__ACT_LINE (CUBE__ACT_GROUP * 8u)
#define CUBE__ACT_GROUP_BYTES ((CUBE__ACT_PLANES + 1u) * CUBE__ACT_LINE)
#define CUBE__ACT_BATCH_BYTES ((CUBE__ACT_BATCH / CUBE__ACT_GROUP) * CUBE__ACT_GROUP_BYTES)
_Static_assert(CUBE__ACT_BATCH % CUBE__ACT_GROUP == 0, "whole groups in a batch");
_Static_assert((CUBE__ACT_PLANES & (CUBE__ACT_PLANES - 1u)) == 0,
               "the prelude takes a cube's plane by a mask (CUBE__TIMING_PLANES)");

#endif  // CUBE_BACKENDS_CUDA_CUDA_TIMING_LAYOUT_H_
