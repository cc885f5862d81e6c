/* The memory options shared by `usp train` and `usp plan` (memory_options.h). */
#include "tools/memory_options.h"

#include <string.h>

/* A two-way option: *second = 1 when `value` is `b`, 0 when it is `a`; anything else names the option. */
static usp_status either(const char *option, const char *value, const char *a, const char *b, int *second)
{
    *second = 0; /* written on every path: the caller's flag is defined even where it cannot see the check */
    if (strcmp(value, a) != 0 && strcmp(value, b) != 0)
        return usp_error(USP_ERR_CONFIG, "%s %s: expected %s or %s", option, value, a, b);
    *second = strcmp(value, b) == 0;
    return USP_OK;
}

usp_status memory_options_apply(const memory_options *o, usp_train_config *c)
{
    int bf16;
    USP_CHECK(either("--dtype", o->dtype, "fp32", "bf16", &bf16));
    c->storage = bf16 ? USP_BF16 : USP_F32;
    USP_CHECK(either("--grad-reduce", o->grad_reduce, "fp32", "bf16", &bf16));
    c->grad_reduce = bf16 ? USP_BF16 : USP_F32;
    USP_CHECK(either("--offload", o->offload, "none", "optimizer", &c->offload_optimizer));
    USP_CHECK(either("--loss", o->loss, "fused", "eager", &c->eager_loss));
    USP_CHECK(either("--ring-merge", o->ring_merge, "fused", "eager", &c->eager_ring_merge));
    static const char *const overlap[] = {"auto", "on", "off"}; /* in ring_overlap's order */
    int k = 0;
    while (k < 3 && strcmp(o->ring_overlap, overlap[k]) != 0)
        k++;
    if (k == 3)
        return usp_error(USP_ERR_CONFIG, "--ring-overlap %s: expected auto, on or off", o->ring_overlap);
    c->ring_backward_overlap = (ring_overlap)k;
    c->zero_stage = o->zero, c->recompute_layers = o->recompute;
    c->selective_recompute = o->selective_recompute, c->micro_batches = o->micro_batches;
    c->tiled_mlp = o->tiled_mlp, c->tiled_loss = o->tiled_loss, c->tile_rows = o->tile_rows;
    c->bucket_mb = o->bucket_mb;
    return USP_OK;
}
