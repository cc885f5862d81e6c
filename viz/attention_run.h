/* One attention layer on a runtime (the simulator), for the schedule diagrams: the real
 * code of the schedule the mesh picks (core/parallel/schedule.h: Ulysses, Ring, the hybrid)
 * on tiny real data, so the trace holds exactly the communication that configuration does. Shapes are
 * what matter; the numbers are small so a W = 64 picture takes a moment. */
#ifndef USP_VIZ_ATTENTION_RUN_H
#define USP_VIZ_ATTENTION_RUN_H

#include <stdint.h>

#include "core/parallel/mesh.h"
#include "core/runtime/runtime.h"

typedef struct viz_attention_config {
    usp_mesh_shape shape;  /* W = DP x R x U (core/parallel/mesh.h) */
    int64_t seq_len;       /* N, the whole sequence */
    int64_t batch;
    int64_t n_heads, n_kv_heads, head_dim;
    int causal;
} viz_attention_config;

/* Checks the config the way the attention will (layout, heads), with messages
 * that name --seq, --heads, --kv-heads, --ulysses and --ring, before any rank runs. */
usp_status viz_attention_check(const viz_attention_config *c);

/* Runs the mesh's schedule's forward once on every rank of `rt` (a runtime of
 * c->shape.world ranks that records a trace: usp_runtime_trace is what the
 * pictures draw), after viz_attention_check. */
usp_status viz_attention_run(const viz_attention_config *c, usp_runtime_t *rt);

#endif
