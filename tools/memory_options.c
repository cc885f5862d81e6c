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

/* auto, on or off as a usp_overlap (a config error naming the option otherwise). */
static usp_status overlap_mode(const char *option, const char *value, usp_overlap *out)
{
    static const char *const mode[] = {"auto", "on", "off"}; /* in usp_overlap's order */
    for (int k = 0; k < 3; k++)
        if (strcmp(value, mode[k]) == 0) {
            *out = (usp_overlap)k;
            return USP_OK;
        }
    return usp_error(USP_ERR_CONFIG, "%s %s: expected auto, on or off", option, value);
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
    USP_CHECK(overlap_mode("--ring-overlap", o->ring_overlap, &c->ring_backward_overlap));
    USP_CHECK(overlap_mode("--ulysses-overlap", o->ulysses_overlap, &c->ulysses_overlap));
    c->zero_stage = o->zero, c->recompute_layers = o->recompute;
    c->selective_recompute = o->selective_recompute, c->micro_batches = o->micro_batches;
    c->tiled_mlp = o->tiled_mlp, c->tiled_loss = o->tiled_loss, c->tile_rows = o->tile_rows;
    c->bucket_mb = o->bucket_mb;
    return USP_OK;
}
