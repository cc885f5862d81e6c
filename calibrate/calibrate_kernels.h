/* The kernel sweep of a full `usp calibrate` (not --quick): every kernel class
 * a training step runs, over the shapes that matter, through core/ops/ops.h on
 * the rank's backend (cpu, cuda, or the simulator's meta: the method is the
 * same on each), and the fit of each class (sim/kernel_model.h).
 *
 * - GEMM over m {64, 512, 4096} x n {32, 256, 2048, 8192} x k {32, 256, 2048},
 *   untransposed and with either operand transposed (the backward's forms), up
 *   to 2.2 GFLOP a call (larger ones run at the rate of the largest: the fit's
 *   flop term);
 * - flash attention forward and backward over tokens {128, 512, 2048}, heads
 *   {2, 8}, head dimension {16, 64}, causal or not, up to 0.6 GFLOP forward;
 * - the element-wise and norm kernels (copy, zero, accumulate, scale, sum of
 *   squares, bias, GELU, SwiGLU, LayerNorm, RMSNorm, RoPE, cross-entropy,
 *   AdamW, and the bf16 conversion where the backend stores bf16) over 256 to
 *   4M elements, the norms and RoPE at two row widths, cross-entropy at two
 *   vocabularies; the smallest size shows the fixed cost a call.
 *
 * Each case: a barrier (every rank computes at once, as in a step), one
 * warm-up run, then a cold run (after 128 MiB were zeroed: its operands out
 * of cache) and a hot run (the case again at once: its operands in cache),
 * synchronised, with the work the op reported (usp_backend_flops,
 * usp_backend_work). The sweep runs 3 times over all the cases (the warm-up
 * in the first pass only), and each case keeps the median of its 3 cold and
 * of its 3 hot runs. A step's ops are some of each: a
 * 1.5 MB copy took 28 us warm here, and 72 us on average in a GPT-2 step; the
 * planner weighs the two by what the rank's cache holds (sim/cache_model.h).
 * Rank 0 takes each case's slowest rank. About a minute on a 2-core CPU with
 * 2 ranks. */
#ifndef USP_CALIBRATE_KERNELS_H
#define USP_CALIBRATE_KERNELS_H

#include "sim/kernel_model.h"
#include "calibrate/calibrate_measure.h"

/* Runs the sweep on this rank into rec->points (rank 0 also names each point's op in run->point_op). */
usp_status calibrate_kernel_sweep(const usp_rank_ctx *ctx, calibrate_run *run, calibrate_record *rec);

/* Rank 0, after the run: one class a measured op, and "*" over the element-wise ones, into *out; the cold ones,
 * and with a cache of cache_bytes (> 0) the hot ones (sim/kernel_model.h) from the cases that fit half of it. */
usp_status calibrate_fit_kernels(const calibrate_run *run, int world, double cache_bytes, sim_kernel_model *out);

/* The slowest rank's time of point i. */
double calibrate_point_seconds(const calibrate_run *run, int world, int i);

/* Prints each class's line and how far it is from its points (the largest relative error). */
void calibrate_print_kernels(const calibrate_run *run, int world, const sim_kernel_model *m, double cache_bytes);

/* The measured cases as JSON: [{op, dtype, flops, bytes, outputs, time_us, model_us, hot_time_us, hot_model_us}]
 * (empty under --quick). */
json_t *calibrate_kernel_cases_json(const calibrate_run *run, int world, const sim_kernel_model *m);

#endif
