/* The memory options shared by `usp train` and `usp plan` (memory_options.h). */
#include "tools/memory_options.h"

#include <string.h>

usp_status memory_options_apply(const memory_options *o, usp_train_config *c)
{
    if (strcmp(o->dtype, "fp32") != 0 && strcmp(o->dtype, "bf16") != 0)
        return usp_error(USP_ERR_CONFIG, "--dtype %s: expected fp32 or bf16", o->dtype);
    c->storage = strcmp(o->dtype, "bf16") == 0 ? USP_BF16 : USP_F32;
    if (strcmp(o->offload, "none") != 0 && strcmp(o->offload, "optimizer") != 0)
        return usp_error(USP_ERR_CONFIG, "--offload %s: expected none or optimizer", o->offload);
    c->offload_optimizer = strcmp(o->offload, "optimizer") == 0;
    if (strcmp(o->loss, "fused") != 0 && strcmp(o->loss, "eager") != 0)
        return usp_error(USP_ERR_CONFIG, "--loss %s: expected fused or eager", o->loss);
    c->eager_loss = strcmp(o->loss, "eager") == 0;
    c->zero_stage = o->zero, c->recompute_layers = o->recompute;
    c->selective_recompute = o->selective_recompute;
    c->tiled_mlp = o->tiled_mlp, c->tiled_loss = o->tiled_loss, c->tile_rows = o->tile_rows;
    return USP_OK;
}
