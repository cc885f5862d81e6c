/* `usp selftest`: a communication schedule shaped like one training step,
 * with payloads whose every element is checked on arrival.
 *
 * Per attention layer, forward: Ulysses all-to-all of packed Q/K/V
 * (sequence -> heads), R-1 ring steps passing K/V blocks, all-to-all of the
 * output back (heads -> sequence); backward mirrors it. Then the loss and its
 * token count all-reduced over sp, gradients all-reduced over sp and dp, a
 * ZeRO-style reduce-scatter + all-gather over dp, a broadcast and a max over
 * the world, an uneven all_to_all_v (zero counts included), point-to-point
 * pairs and a barrier. Consecutive collectives always differ in op, group or
 * count, so a swapped or skipped call is a mismatch or deadlock, never a
 * silent exchange of data. */
#ifndef USP_SELFTEST_H
#define USP_SELFTEST_H

#include <stdint.h>

#include "core/parallel/mesh.h"
#include "core/runtime/rank.h"

/* Gradient buckets reduced during the backward (selftest --overlap): none; on a stream of their own that the
 * next all-to-all waits for (ordered: every GPU starts the two in the order they were issued); or with no
 * event between them (unordered: the planted bug of tutorial 08, whose order is each GPU's choice). */
typedef enum usp_selftest_overlap {
    USP_SELFTEST_OVERLAP_NONE,
    USP_SELFTEST_OVERLAP_ORDERED,
    USP_SELFTEST_OVERLAP_UNORDERED,
} usp_selftest_overlap;

typedef struct usp_selftest_config {
    usp_mesh_shape shape;
    usp_selftest_overlap overlap;
    int layers;          /* attention layers in the step */
    int heads, kv_heads; /* query and key/value heads */
    int head_dim;
    int tokens_per_rank;
} usp_selftest_config;

typedef struct usp_selftest_stats {
    uint64_t elements_checked; /* received elements compared with what was sent */
    uint64_t buffers_checked;
    uint64_t buffers_wrong;    /* checks that failed; the rank goes on, as training would */
    double end_s;              /* the rank's clock (modelled time) when its schedule ended */
    uint64_t peak_bytes;       /* its backend's peak memory */
} usp_selftest_stats;

typedef struct usp_selftest_run {
    usp_selftest_config config;
    usp_selftest_stats *stats; /* [world]: every rank's, gathered to rank 0 (usp_rank_gather) when the
                                  whole schedule ran */
} usp_selftest_run;

/* A default config for a mesh shape: 2 layers, 8 heads (a multiple of U), 2 KV heads, head_dim 16, 32 tokens per rank. */
usp_selftest_config usp_selftest_default(const usp_mesh_shape *shape);

/* One rank of the selftest (arg: usp_selftest_run *). */
usp_status usp_selftest_rank(const usp_rank_ctx *ctx, void *arg);

#endif
