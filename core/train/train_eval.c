/* The held-out evaluation of the training loop (train_internal.h): the mean
 * loss over held-out samples and, for passkey data, the accuracy of the key;
 * and the batch reading and small sums over ranks it shares with train.c. */
#include <stdlib.h>
#include <string.h>

#include "core/train/trainer.h"

usp_status trainer_sum_over(trainer *t, usp_comm_t *group, double *values, int n)
{
    USP_CHECK(usp_buffer_copy(BE, t->scalars, values, (size_t)n * sizeof *values, USP_COPY_HOST_TO_DEVICE, ST));
    USP_CHECK(usp_comm_all_reduce(group, t->scalars, t->scalars, (size_t)n, USP_F64, USP_REDUCE_SUM, ST));
    return usp_buffer_download(BE, values, t->scalars, (size_t)n * sizeof *values, ST);
}

usp_status trainer_read_batch(trainer *t, int64_t first_sample, usp_shard *shards)
{
    int sp = usp_comm_rank(t->mesh.sp);
    for (int64_t b = 0; b < t->B_local; b++)
        USP_CHECK(usp_data_read_shard(&t->data, usp_model_layout(t->model), sp,
                                      first_sample + t->mesh.d * t->B_local + b, t->c->seq_len, &shards[b]));
    return USP_OK;
}

double trainer_count_targets(const usp_shard *shards, int64_t rows)
{
    double n = 0;
    for (int64_t b = 0; b < rows && !shards[b].targets; b++) /* meta: no tokens, every row counts */
        n += (double)shards[b].count;
    for (int64_t b = 0; b < rows && shards[b].targets; b++)
        for (int64_t i = 0; i < shards[b].count; i++)
            n += shards[b].targets[i] >= 0;
    return n;
}

/* digits[b]: the answer digits of sequence b this rank predicts right. Every
 * rank calls the argmax once, with the rows it holds answers in (maybe none):
 * with ZeRO 3 it gathers the lm_head's weights, a collective. */
static usp_status count_right_digits(trainer *t, double *digits)
{
    const usp_seq_layout *l = usp_model_layout(t->model);
    int64_t *rows = malloc((size_t)(t->B_local * USP_PASSKEY_DIGITS) * sizeof *rows); /* answers only */
    int32_t *guess = malloc((size_t)(t->B_local * USP_PASSKEY_DIGITS) * sizeof *guess);
    int n = 0;
    usp_token_run runs[2];
    int n_runs = usp_seq_layout_runs(l, usp_comm_rank(t->mesh.sp), runs);
    const int64_t answer = t->c->seq_len - USP_PASSKEY_DIGITS; /* the answer digits close the sequence */
    for (int64_t b = 0; rows && guess && b < t->B_local; b++) /* from the layout: meta has no positions */
        for (int r = 0; r < n_runs; r++) {
            int64_t g0 = runs[r].global_first, end = g0 + runs[r].count;
            for (int64_t g = g0 > answer ? g0 : answer; g < end; g++)
                if (usp_data_is_answer(&t->data, g, t->c->seq_len))
                    rows[n++] = b * l->per_rank + runs[r].local_first + (g - g0);
        }
    usp_status s = rows && guess ? usp_model_argmax(t->model, rows, n, guess)
                                 : usp_error(USP_ERR_RUNTIME, "out of memory for the answer rows");
    memset(digits, 0, (size_t)t->B_local * sizeof *digits);
    for (int k = 0; k < n && s == USP_OK && t->numerics; k++) {
        int64_t b = rows[k] / l->per_rank, i = rows[k] % l->per_rank;
        digits[b] += guess[k] == t->shards[b].targets[i];
    }
    free(rows), free(guess);
    return s;
}

/* *count (this rank's valid targets of an evaluation's batch) summed over the world; none at all is an error. */
static usp_status world_targets(trainer *t, double *count)
{
    USP_CHECK(trainer_sum_over(t, t->ctx->world, count, 1));
    if (*count < 1 && t->numerics) /* on meta the count is this rank's own, possibly 0 (padding) */
        return usp_error(USP_ERR_CONFIG, "the batch has no valid target token");
    return USP_OK;
}

/* Forward and loss (no gradient) of the batch read; *loss = mean over the global batch's
 * valid targets. With `digits`, passkey answers predicted right per sample. */
static usp_status eval_forward(trainer *t, double *loss, double *digits)
{
    double count = trainer_count_targets(t->shards, t->B_local), sum;
    USP_CHECK(world_targets(t, &count));
    USP_CHECK(usp_model_forward(t->model, t->shards));
    if (digits)
        USP_CHECK(count_right_digits(t, digits));
    USP_CHECK(usp_model_loss(t->model, (float)(1.0 / (count > 1 ? count : 1)), 0, &sum));
    USP_CHECK(trainer_sum_over(t, t->ctx->world, &sum, 1));
    *loss = sum / count;
    return USP_OK;
}

/* The batches of held-out samples an evaluation runs: eval_samples, in whole batches. */
static int64_t eval_batches(const trainer *t) { return (t->c->eval_samples + t->per_call - 1) / t->per_call; }

/* Mean loss and, for passkey data, the fraction of held-out samples whose
 * five key digits are all predicted right. */
usp_status trainer_evaluate(trainer *t, double *loss_out, double *accuracy)
{
    int64_t batches = eval_batches(t);
    double loss_sum = 0, right[2] = {0, 0}; /* samples right, samples seen */
    double *digits = calloc((size_t)t->B_local, sizeof *digits);
    if (!digits)
        return usp_error(USP_ERR_RUNTIME, "out of memory for the evaluation");
    usp_status s = USP_OK;
    for (int64_t i = 0; i < batches && s == USP_OK; i++) {
        double loss = 0;
        s = trainer_read_batch(t, USP_TRAIN_HELD_OUT_FIRST + i * t->per_call, t->shards);
        if (s == USP_OK)
            s = eval_forward(t, &loss, t->data.kind == USP_DATA_PASSKEY ? digits : NULL);
        if (s == USP_OK && t->data.kind == USP_DATA_PASSKEY)
            s = trainer_sum_over(t, t->mesh.sp, digits, (int)t->B_local); /* the digits may sit on several SP ranks */
        for (int64_t b = 0; b < t->B_local && s == USP_OK && t->data.kind == USP_DATA_PASSKEY; b++)
            right[0] += digits[b] == USP_PASSKEY_DIGITS, right[1] += 1;
        loss_sum += loss;
    }
    free(digits);
    USP_CHECK(s);
    if (t->data.kind == USP_DATA_PASSKEY)
        USP_CHECK(trainer_sum_over(t, t->mesh.dp, right, 2));
    *loss_out = loss_sum / (double)(batches > 0 ? batches : 1);
    *accuracy = t->numerics && t->data.kind == USP_DATA_PASSKEY && right[1] > 0 ? right[0] / right[1] : -1;
    return USP_OK;
}

/* An EVAL record (rank 0). */
void trainer_record_eval(const trainer *t, int64_t step, double loss, double accuracy)
{
    if (t->ctx->rank != 0 || !t->c->on_record)
        return;
    usp_train_record r = {.kind = USP_TRAIN_RECORD_EVAL, .step = step, .steps = t->c->steps, .loss = loss,
                          .passkey_accuracy = accuracy, .samples = eval_batches(t) * t->per_call,
                          .shapes_only = !t->numerics};
    t->c->on_record(t->c->record_ctx, &r);
}

/* The held-out evaluation every eval_every steps, run by every rank after the same step: the step count
 * and an agreed stop (never followed by one) are the same on all of them. It leaves the training as it
 * was, bit for bit: the data source reads a sample by its index (no cursor, no random state), the
 * forward and the loss make no gradient, and the next step reads its own batch and overwrites the
 * activations. The run's last step is evaluated by the end's evaluation, once. Its time is kept out of
 * the steps' rates: tokens/s leaves out its wall seconds, and the next record's clock per step its clock. */
usp_status trainer_evaluate_every(trainer *t, int64_t step)
{
    int64_t every = t->c->eval_every;
    if (every <= 0 || step % every != 0 || t->stopping || step == t->last_step)
        return USP_OK;
    double wall = usp_wall_seconds(), clock = trainer_clock_now(t), loss, accuracy;
    USP_CHECK(trainer_evaluate(t, &loss, &accuracy));
    t->eval_wall += usp_wall_seconds() - wall, t->log_clock += trainer_clock_now(t) - clock;
    trainer_record_eval(t, step, loss, accuracy);
    return USP_OK;
}

