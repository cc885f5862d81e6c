/* "would fit with ...": the memory options the plan tries when a step does
 * not fit (fit.h). Each try is one more step on the meta backend, so
 * the answer is what the code would allocate with those options, not an
 * estimate. The ladder adds options cumulatively, cheapest in step time
 * first: bf16 storage and the tiled loss cost nothing, the selective
 * recompute element-wise work, micro-batches of one sequence (when a replica
 * runs several a step) a pass's fixed costs again, ZeRO 1-2 an all-gather of
 * the weights, the
 * tiled MLP a recomputed MLP hidden, layer recomputation a third more
 * compute, ZeRO 3 gathering the weights twice. */
#include "plan/fit.h"

#include <stdio.h>
#include <string.h>

#include "core/parallel/schedule.h"

typedef struct rung {
    const char *flag;
    int (*needed)(const usp_train_config *c); /* 0: the config has it already */
    void (*apply)(usp_train_config *c);
} rung;

static int wants_bf16(const usp_train_config *c) { return c->storage == USP_F32; }
static void use_bf16(usp_train_config *c) { c->storage = USP_BF16; }
static int wants_tiled_loss(const usp_train_config *c) { return !c->tiled_loss; }
static void use_tiled_loss(usp_train_config *c) { c->tiled_loss = 1, c->eager_loss = 0; /* it replaces the loss */ }
static int wants_zero1(const usp_train_config *c) { return c->zero_stage < 1; }
static void use_zero1(usp_train_config *c) { c->zero_stage = 1; }
static int wants_zero2(const usp_train_config *c) { return c->zero_stage < 2; }
static void use_zero2(usp_train_config *c) { c->zero_stage = 2; }
static int wants_tiled_mlp(const usp_train_config *c) { return !c->tiled_mlp; }
static void use_tiled_mlp(usp_train_config *c) { c->tiled_mlp = 1; }
static int wants_selective(const usp_train_config *c) { return !c->selective_recompute && !c->recompute_layers; }
static void use_selective(usp_train_config *c) { c->selective_recompute = 1; }
static int64_t per_replica(const usp_train_config *c) { return c->batch / c->shape.dp; }
static int wants_micro(const usp_train_config *c) { return per_replica(c) > (c->micro_batches > 1 ? c->micro_batches : 1); }
static void use_micro(usp_train_config *c) { c->micro_batches = per_replica(c); }
static int wants_recompute(const usp_train_config *c) { return !c->recompute_layers; }
static void use_recompute(usp_train_config *c) { c->recompute_layers = 1, c->selective_recompute = 0; }
static int wants_zero3(const usp_train_config *c) { return c->zero_stage < 3; }
static void use_zero3(usp_train_config *c) { c->zero_stage = 3; }

static const rung ladder[] = {
    {"--dtype bf16", wants_bf16, use_bf16},       {"--tiled-loss", wants_tiled_loss, use_tiled_loss},
    {"--selective-recompute", wants_selective, use_selective},
    {"--micro-batches", wants_micro, use_micro}, /* a pass a sequence: the flag takes the count */
    {"--zero 1", wants_zero1, use_zero1},         {"--zero 2", wants_zero2, use_zero2},
    {"--tiled-mlp", wants_tiled_mlp, use_tiled_mlp}, {"--recompute", wants_recompute, use_recompute},
    {"--zero 3", wants_zero3, use_zero3},
};

/* Appends `flag` to the options text, a later ZeRO stage replacing an earlier one and the whole layer's
 * recomputation the selective one (which it includes). */
static void add_flag(char *text, size_t size, const char *flag)
{
    char *zero = strstr(text, "--zero ");
    if (zero && strncmp(flag, "--zero ", 7) == 0) {
        zero[7] = flag[7];
        return;
    }
    const char *selective = "--selective-recompute";
    char *sel = strstr(text, selective);
    if (sel && strcmp(flag, "--recompute") == 0) {
        size_t skip = strlen(selective) + (sel[strlen(selective)] == ' ');
        memmove(sel, sel + skip, strlen(sel + skip) + 1);
        size_t len = strlen(text);
        if (len && text[len - 1] == ' ')
            text[len - 1] = '\0';
    }
    size_t len = strlen(text);
    snprintf(text + len, size - len, "%s%s", len ? " " : "", flag);
}

/* Runs the ladder on `c` from its own options: out->found when a rung makes it fit. */
static usp_status climb(usp_train_config c, const sim_cost_model *cost, plan_fit *out)
{
    out->options[0] = '\0';
    for (size_t i = 0; i < sizeof ladder / sizeof *ladder; i++) {
        if (!ladder[i].needed(&c))
            continue;
        ladder[i].apply(&c);
        char flag[64];
        if (ladder[i].apply == use_micro)
            snprintf(flag, sizeof flag, "%s %lld", ladder[i].flag, (long long)c.micro_batches);
        else
            snprintf(flag, sizeof flag, "%s", ladder[i].flag);
        add_flag(out->options, sizeof out->options, flag);
        plan_result r;
        USP_CHECK(plan_run_sharing(&c, cost, NULL, PLAN_SHARE_ROUNDED, &r));
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

/* One step of `c` with its own options: whether it fits, into *fits. USP_ERR_CONFIG (a split the code
 * refuses: heads that do not divide, a sequence that does not) comes back as a value to skip. */
static usp_status fits_as_is(const usp_train_config *c, const sim_cost_model *cost, plan_fit *out, int *fits)
{
    plan_result r;
    usp_status s = plan_run_sharing(c, cost, NULL, PLAN_SHARE_ROUNDED, &r);
    *fits = 0;
    if (s != USP_OK)
        return s;
    out->tries++;
    *fits = r.fits;
    if (r.fits)
        out->peak_bytes = r.peak_bytes[r.peak_rank], out->step_time_s = r.step_time_s;
    plan_result_free(&r);
    return USP_OK;
}

/* Every memory option of the ladder on. */
static usp_train_config all_options(usp_train_config c)
{
    for (size_t i = 0; i < sizeof ladder / sizeof *ladder; i++)
        if (ladder[i].needed(&c))
            ladder[i].apply(&c);
    return c;
}

/* The other U x R splits of the same world, in the order they are tried: only a larger SP degree
 * (U x R), which shards the sequence's activations over more GPUs. With every memory option on, ZeRO 3
 * shards the weights, gradients and Adam state over all W ranks whatever the split, so a split with
 * the same or a smaller SP degree holds as much or more a rank: trying it would cost a step (at
 * --seq 2^30 on 4 GPUs, seconds each) to learn nothing. The smallest such degree first (it
 * communicates least, so it is the fastest that fits), at one degree the larger U first (Ulysses'
 * all-to-all moves less than the ring for the same split). */
static int other_splits(const usp_train_config *c, int *u_out, int *r_out, int max)
{
    const int W = c->shape.world, own = c->shape.ulysses * c->shape.ring;
    int n = 0;
    for (int sp = own + 1; sp <= W && n < max; sp++) {
        if (W % sp != 0)
            continue;
        for (int u = sp; u >= 1 && n < max; u--) {
            if (sp % u != 0)
                continue;
            /* heads that do not share evenly over U leave ranks idle while another attends: not tried */
            if (c->model.n_head % u != 0 && u % c->model.n_head != 0)
                continue;
            /* nor a split the run's schedule does not run on (KV heads that do not map onto a rank's, ...) */
            const usp_schedule_shape shape = {.ulysses = u, .ring = sp / u, .n_heads = c->model.n_head,
                                              .n_kv_heads = c->model.n_kv_head, .causal = 1};
            const usp_schedule_i *runs = usp_schedule_pick(c->attention, u, sp / u);
            if (!runs || runs->check(&shape) != USP_OK)
                continue;
            u_out[n] = u, r_out[n] = sp / u, n++;
        }
    }
    return n;
}

/* The first other split that fits with every option, then the cheapest options that make it fit. */
static usp_status try_splits(const usp_train_config *train, const sim_cost_model *cost, plan_fit *out)
{
    int us[PLAN_FIT_SPLITS_MAX], rs[PLAN_FIT_SPLITS_MAX];
    int n = other_splits(train, us, rs, PLAN_FIT_SPLITS_MAX);
    for (int i = 0; i < n; i++) {
        usp_train_config c = *train;
        if (usp_mesh_shape_make(train->shape.world, us[i], rs[i], &c.shape) != USP_OK)
            continue;
        /* one sequence a replica (the default --batch) stays one a replica; another global batch is kept,
         * and must split over the replicas */
        if (train->batch == train->shape.dp)
            c.batch = c.shape.dp;
        else if (train->batch % c.shape.dp != 0)
            continue;
        usp_train_config lean = all_options(c);
        int fits;
        usp_status s = fits_as_is(&lean, cost, out, &fits);
        if (s == USP_ERR_CONFIG)
            continue; /* a split the code refuses for this model or sequence */
        USP_CHECK(s);
        out->splits_tried++;
        if (!fits)
            continue;
        USP_CHECK(fits_as_is(&c, cost, out, &fits)); /* the split alone, with the run's own options */
        if (fits)
            out->found = 1, out->options[0] = '\0';
        else
            USP_CHECK(climb(c, cost, out));
        out->other_split = 1;
        out->ulysses = c.shape.ulysses, out->ring = c.shape.ring, out->dp = c.shape.dp, out->batch = c.batch;
        return USP_OK;
    }
    return USP_OK;
}

usp_status plan_would_fit(const usp_train_config *train, const sim_cost_model *cost, plan_fit *out)
{
    *out = (plan_fit){.ulysses = train->shape.ulysses, .ring = train->shape.ring, .dp = train->shape.dp,
                      .batch = train->batch};
    USP_CHECK(climb(*train, cost, out));
    if (out->found)
        return USP_OK;
    plan_fit split = *out; /* what the run's own split needs with every option, kept if no split fits */
    USP_CHECK(try_splits(train, cost, &split));
    if (split.found)
        *out = split;
    else
        out->splits_tried = split.splits_tried, out->tries = split.tries;
    return USP_OK;
}
