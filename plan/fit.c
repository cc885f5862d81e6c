/* "would fit with ...": the memory options the plan tries when a step does
 * not fit (fit.h). Each try is one more step on the meta backend, so
 * the answer is what the code would allocate with those options, not an
 * estimate. The ladder adds options cumulatively, cheapest in step time
 * first: bf16 storage and the tiled loss cost nothing, ZeRO 1-2 an
 * all-gather of the weights, the tiled MLP a recomputed MLP hidden, layer
 * recomputation a third more compute, ZeRO 3 gathering the weights twice. */
#include "plan/fit.h"

#include <stdio.h>
#include <string.h>

typedef struct rung {
    const char *flag;
    int (*needed)(const usp_train_config *c); /* 0: the config has it already */
    void (*apply)(usp_train_config *c);
} rung;

static int wants_bf16(const usp_train_config *c) { return c->storage == USP_F32; }
static void use_bf16(usp_train_config *c) { c->storage = USP_BF16; }
static int wants_tiled_loss(const usp_train_config *c) { return !c->tiled_loss; }
static void use_tiled_loss(usp_train_config *c) { c->tiled_loss = 1; }
static int wants_zero1(const usp_train_config *c) { return c->zero_stage < 1; }
static void use_zero1(usp_train_config *c) { c->zero_stage = 1; }
static int wants_zero2(const usp_train_config *c) { return c->zero_stage < 2; }
static void use_zero2(usp_train_config *c) { c->zero_stage = 2; }
static int wants_tiled_mlp(const usp_train_config *c) { return !c->tiled_mlp; }
static void use_tiled_mlp(usp_train_config *c) { c->tiled_mlp = 1; }
static int wants_recompute(const usp_train_config *c) { return !c->recompute_layers; }
static void use_recompute(usp_train_config *c) { c->recompute_layers = 1; }
static int wants_zero3(const usp_train_config *c) { return c->zero_stage < 3; }
static void use_zero3(usp_train_config *c) { c->zero_stage = 3; }

static const rung ladder[] = {
    {"--dtype bf16", wants_bf16, use_bf16},       {"--tiled-loss", wants_tiled_loss, use_tiled_loss},
    {"--zero 1", wants_zero1, use_zero1},         {"--zero 2", wants_zero2, use_zero2},
    {"--tiled-mlp", wants_tiled_mlp, use_tiled_mlp}, {"--recompute", wants_recompute, use_recompute},
    {"--zero 3", wants_zero3, use_zero3},
};

/* Appends `flag` to the options text, a later ZeRO stage replacing an earlier one. */
static void add_flag(char *text, size_t size, const char *flag)
{
    char *zero = strstr(text, "--zero ");
    if (zero && strncmp(flag, "--zero ", 7) == 0) {
        zero[7] = flag[7];
        return;
    }
    size_t len = strlen(text);
    snprintf(text + len, size - len, "%s%s", len ? " " : "", flag);
}

usp_status plan_would_fit(const usp_train_config *train, const sim_cost_model *cost, plan_fit *out)
{
    *out = (plan_fit){0};
    usp_train_config c = *train;
    for (size_t i = 0; i < sizeof ladder / sizeof *ladder; i++) {
        if (!ladder[i].needed(&c))
            continue;
        ladder[i].apply(&c);
        add_flag(out->options, sizeof out->options, ladder[i].flag);
        plan_result r;
        USP_CHECK(plan_run(&c, cost, NULL, &r));
        out->tries++;
        out->peak_bytes = r.peak_bytes[r.peak_rank];
        out->step_time_s = r.step_time_s;
        out->found = r.fits;
        plan_result_free(&r);
        if (out->found)
            return USP_OK;
    }
    return USP_OK;
}
