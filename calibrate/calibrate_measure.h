/* What every rank of `usp calibrate` measures (tools/cmd_calibrate.c prints
 * and fits it): all_to_all, all_reduce and sendrecv over message sizes on each
 * level of the machine, and its backend's GEMM, flash attention (forward and
 * backward) and device copies, all through usp's own interfaces (core/comm/comm.h,
 * core/ops/ops.h) on the runtime --backend names, so the figures are what a
 * training step pays, the communicator's decorator and fingerprints included.
 *
 * Levels: the world; when the world spans nodes, the ranks of one node (a
 * split by node) and one rank a node across the nodes (a split by the rank's
 * index on its node), each group of a level running at once, as in a step.
 * Nodes come from the host names (gathered with an all_gather), or from
 * --gpus-per-node; the model puts rank r on node r / gpus_per_node, so ranks
 * placed otherwise are refused with the launch option that fixes it.
 *
 * Timing, per call and size: one warm-up call, then calls each after a
 * barrier and a stagger (the group's last rank is busy while its peers post
 * and wait, as a step meets its collectives); every member notes its post
 * and its end (the backend synchronised, the clocks aligned across ranks),
 * and the call's transfer is what `plan --compare` measures in a step: each
 * member's time from the last post to its own end, the mean over them.
 * Cold: every rank first zeroes 128 MiB (its buffers out of cache), then the
 * last rank zeroes 16 MiB more as its stagger; up to 5 calls. Hot (all_to_all
 * and all_reduce): the call again at once, the last rank's stagger a spin
 * that touches no memory; up to 50 calls. The median call (nccl-tests takes
 * the mean; on a machine shared with other work the median is not one
 * stalled call's). Each rank's figures are gathered to rank 0
 * (usp_rank_gather), which takes the slowest rank's (every member of a group
 * reports the same). */
#ifndef USP_CALIBRATE_MEASURE_H
#define USP_CALIBRATE_MEASURE_H

#include <stddef.h>

#include "core/runtime/rank.h"
#include "sim/kernel_model.h"

#define CALIBRATE_SIZES_MAX 16
#define CALIBRATE_POINTS_MAX 512 /* kernel cases of the full sweep (calibrate/calibrate_kernels.h) */

enum { CAL_LEVEL_WORLD, CAL_LEVEL_NODE, CAL_LEVEL_NETWORK, CAL_LEVELS };
enum { CAL_OP_ALL_TO_ALL, CAL_OP_ALL_REDUCE, CAL_OP_SENDRECV, CAL_OPS };

/* The level's name ("world", "node", "network") and the op's ("all_to_all", ...). */
const char *calibrate_level_name(int level);
const char *calibrate_op_name(int op);

/* What to measure: the same on every rank. */
typedef struct calibrate_plan {
    size_t sizes[CALIBRATE_SIZES_MAX]; /* bytes a rank sends, ascending */
    int n_sizes;
    int quick;                         /* fewer calls a size, smaller kernels */
    int gpus_per_node;                 /* 0: nodes from the host names */
} calibrate_plan;

/* One rank's figures, gathered to rank 0. */
typedef struct calibrate_record {
    double seconds[CAL_LEVELS][CAL_OPS][CALIBRATE_SIZES_MAX]; /* a call, cold; 0: not measured */
    double hot_seconds[CAL_LEVELS][CAL_OPS][CALIBRATE_SIZES_MAX]; /* again at once, hot (no sendrecv); 0: none */
    double gemm_s, gemm_flops, attention_s, attention_flops, backward_s, backward_flops;
    double copy_s, copy_bytes;
    sim_kernel_point reference[3]; /* the gemm, attention forward and backward above: work and seconds */
    int n_points;                  /* the full sweep's cases (0: --quick) */
    sim_kernel_point points[CALIBRATE_POINTS_MAX];     /* each after a flush: cold */
    sim_kernel_point hot_points[CALIBRATE_POINTS_MAX]; /* each case again at once: its operands in cache */
} calibrate_record;

typedef struct calibrate_run {
    const calibrate_plan *plan;
    calibrate_record *records; /* [world], filled on rank 0 */
    /* Written by rank 0: */
    int nodes, gpus_per_node;
    int level_ranks[CAL_LEVELS];                         /* a group's ranks; 0: level not measured */
    size_t bytes[CAL_LEVELS][CAL_OPS][CALIBRATE_SIZES_MAX]; /* bytes a rank sent (the size, rounded to elements) */
    int gemm_n, attention_tokens, attention_heads, attention_head_dim;
    char backend[16];
    double cache_bytes;                                  /* what the backend says its ops share (0: nothing) */
    const char *point_op[CALIBRATE_POINTS_MAX]; /* the op of each point of the sweep */
    usp_dtype point_dtype[CALIBRATE_POINTS_MAX]; /* and the dtype it ran in */
} calibrate_run;

/* The rank main function (core/runtime/rank.h) of `usp calibrate`; arg is a calibrate_run. */
usp_status calibrate_rank(const usp_rank_ctx *ctx, void *arg);

#endif
