/* A run's config before any rank runs (see train.h): its defaults, the learning-rate schedule and the
 * checks that refuse, naming the option, what every rank would otherwise refuse after the world is built. */
#include "core/train/train.h"

#include <math.h>

#include "core/data/data.h"
#include "core/model/model.h"
#include "core/parallel/schedule.h"

void usp_train_defaults(usp_train_config *c)
{
    *c = (usp_train_config){0};
    c->lr = 1e-3, c->min_lr_ratio = 0.1, c->weight_decay = 0.1, c->grad_clip = 1.0;
    c->beta1 = 0.9, c->beta2 = 0.95, c->eps = 1e-8, c->warmup = -1, c->log_every = 10, c->seed = 1234;
    c->eot = -1;
}

double usp_train_lr(const usp_train_config *c, int64_t t)
{
    int64_t warmup = c->warmup >= 0 ? c->warmup : c->steps / 10;
    if (t <= warmup)
        return c->lr * (double)t / (double)(warmup > 0 ? warmup : 1);
    double progress = (double)(t - warmup) / (double)(c->steps - warmup > 0 ? c->steps - warmup : 1);
    double min_lr = c->lr * c->min_lr_ratio;
    return min_lr + 0.5 * (c->lr - min_lr) * (1.0 + cos(M_PI * (progress < 1 ? progress : 1)));
}

/* The optimizer's numbers, before step 1: a NaN learning rate would otherwise
 * surface only inside AdamW, after the setup and a forward and backward pass,
 * naming no option. --lr is the command's option; the others are fields a
 * program sets, named as such. */
static usp_status check_optimizer(const usp_train_config *c)
{
    if (!isfinite(c->lr) || c->lr <= 0)
        return usp_error(USP_ERR_CONFIG, "--lr %g: the learning rate must be a finite number above 0, e.g. --lr 1e-3",
                         c->lr);
    const struct {
        const char *name, *range;
        double value, low, high;
        int high_included;
    } fields[] = {
        {"min_lr_ratio", "in [0, 1] (the schedule's floor as a fraction of the peak lr; default 0.1)",
         c->min_lr_ratio, 0, 1, 1},
        {"weight_decay", ">= 0 (default 0.1)", c->weight_decay, 0, INFINITY, 0},
        {"grad_clip", ">= 0 (0: no clipping; default 1)", c->grad_clip, 0, INFINITY, 0},
        {"beta1", "in [0, 1) (default 0.9)", c->beta1, 0, 1, 0},
        {"beta2", "in [0, 1) (default 0.95)", c->beta2, 0, 1, 0},
        {"eps", "above 0 (default 1e-8)", c->eps, 0x1p-1074 /* the least double above 0 */, INFINITY, 0},
    };
    if (!c->eval_only && c->warmup > c->steps) /* lr(t) = lr t / warmup up to the peak: never reached */
        return usp_error(USP_ERR_CONFIG, "--warmup %lld is more than the %lld --steps: the learning rate would still "
                         "be rising when the run ends, at %.3g%% of --lr %g; give --warmup %lld or fewer (the default "
                         "is 10%% of --steps)", (long long)c->warmup, (long long)c->steps,
                         100.0 * (double)c->steps / (double)c->warmup, c->lr, (long long)c->steps);
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        double v = fields[i].value;
        int in_range = v >= fields[i].low && (fields[i].high_included ? v <= fields[i].high : v < fields[i].high);
        if (!isfinite(v) || !in_range)
            return usp_error(USP_ERR_CONFIG, "usp_train_config.%s = %g: AdamW and its schedule need a finite number "
                             "%s", fields[i].name, v, fields[i].range);
    }
    return USP_OK;
}

/* --eval-every: a period of whole steps, of an evaluation that has samples to evaluate. */
static usp_status check_eval_every(const usp_train_config *c)
{
    if (c->eval_every < 0)
        return usp_error(USP_ERR_CONFIG, "--eval-every %lld: give a number of steps, 1 or more (or leave it out: "
                         "the held-out evaluation then runs at the end only)", (long long)c->eval_every);
    if (c->eval_every > 0 && c->eval_samples < 1)
        return usp_error(USP_ERR_CONFIG, "--eval-every %lld with --eval-samples %lld: an evaluation of no sample "
                         "evaluates nothing; give --eval-samples 1 or more (default 64)", (long long)c->eval_every,
                         (long long)c->eval_samples);
    return USP_OK;
}

int64_t usp_train_bucket_bytes(const usp_train_config *c)
{
    double bytes = c->bucket_mb * 1048576.0;
    return c->bucket_mb > 0 ? (bytes < 1 ? 1 : bytes > 0x1p62 ? (int64_t)1 << 62 : (int64_t)bytes) : 0;
}

usp_status usp_train_check(const usp_train_config *c, int64_t *padded_len)
{
    USP_CHECK(check_optimizer(c));
    USP_CHECK(check_eval_every(c));
    if (c->eot >= 0)
        USP_CHECK(usp_data_eot_check(c->data, c->eot, c->model.vocab));
    if (c->window < 0)
        return usp_error(USP_ERR_CONFIG, "--window %lld: a sliding window is a count of keys, at least 1 (each "
                         "token sees itself and the W - 1 before it); leave it out for none", (long long)c->window);
    if (!isfinite(c->bucket_mb) || c->bucket_mb < 0)
        return usp_error(USP_ERR_CONFIG, "--bucket-mb %g: a gradient bucket's size is a finite number of MiB, "
                         "e.g. --bucket-mb 25 (0: the default, 25)", c->bucket_mb);
    if (c->grad_reduce == USP_BF16 && c->storage != USP_BF16)
        return usp_error(USP_ERR_CONFIG, "--grad-reduce bf16 with --dtype fp32: reducing the gradients in bf16 is a "
                         "part of mixed precision; add --dtype bf16, or keep --grad-reduce fp32");
    if (c->batch < 1 || c->batch % c->shape.dp != 0)
        return usp_error(USP_ERR_CONFIG, "--batch %lld is not a multiple of the %d data-parallel replicas "
                         "(W / (U R)); use --batch %d or a multiple", (long long)c->batch, c->shape.dp, c->shape.dp);
    int64_t M = c->micro_batches > 1 ? c->micro_batches : 1, per_replica = c->batch / c->shape.dp;
    if (per_replica % M != 0)
        return usp_error(USP_ERR_CONFIG, "--micro-batches %lld does not divide the %lld sequences a replica runs a "
                         "step (--batch %lld over %d data-parallel replicas): use a divisor of %lld",
                         (long long)M, (long long)per_replica, (long long)c->batch, c->shape.dp,
                         (long long)per_replica);
    const usp_schedule_i *schedule = usp_schedule_pick(c->attention, c->shape.ulysses, c->shape.ring);
    if (!schedule) {
        char known[256];
        usp_schedules_describe(known, sizeof known);
        return usp_error(USP_ERR_CONFIG, "--attention %s: no such schedule; the schedules are %s", c->attention,
                         known);
    }
    const usp_schedule_shape shape = {.ulysses = c->shape.ulysses, .ring = c->shape.ring, .seq_len = c->seq_len,
                                      .causal = 1,
                                      .window = usp_model_config_common_window(&c->model, c->window)};
    usp_layout_kind kind = schedule->layout(&shape);
    int64_t multiple = usp_seq_layout_multiple(kind, c->shape.ulysses, c->shape.ring);
    *padded_len = c->pad ? (c->seq_len + multiple - 1) / multiple * multiple : c->seq_len;
    usp_seq_layout check;
    USP_CHECK(usp_seq_layout_make(kind, *padded_len, c->shape.ulysses, c->shape.ring, &check));
    /* what each rank's model would refuse, refused once here rather than by every rank after the world is built */
    USP_CHECK(usp_model_config_check(&c->model));
    return usp_model_check_shape(&c->model, *padded_len, &c->shape, c->attention, c->tile_rows, c->window);
}
