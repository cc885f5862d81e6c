/* The training loop (see train.h). It prints nothing: rank 0's progress
 * leaves as records through the config's on_record. */
#include "core/train/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/checkpoint/checkpoint.h"
#include "core/data/data.h"
#include "core/model/model.h"

/* held-out samples: USP_TRAIN_HELD_OUT_FIRST + k (train.h), never drawn in training; usp generate's too */

typedef struct trainer {
    const usp_rank_ctx *ctx;
    const usp_train_config *c;
    usp_train_result *result;
    usp_mesh mesh;
    usp_model *model;
    usp_data data;
    usp_shard *shards;        /* [M][B_local]: a step's micro-batches, read at once */
    int64_t B_local, N;       /* sequences a rank's model runs at once (one micro-batch), padded length */
    int64_t M, per_call;      /* micro-batches a step; sequences over all replicas a micro-batch (batch / M) */
    usp_param_table table;
    usp_param_store *store;   /* weights, gradients and Adam state (whole or ZeRO-sharded) */
    double *scalars;          /* backend, small reductions */
    int64_t step;             /* steps done */
    int numerics;             /* 0 on the meta backend: nothing is read back */
    double log_clock;         /* modelled clock at the last progress line, and its step */
    int64_t log_step;
    int stopping;             /* the world agreed to stop after this step (usp_train_config.stop) */
    double grad_norm;         /* the last step's, before clipping (NaN: none) */
    int64_t first_step, last_step; /* this run's: steps first_step + 1 .. last_step */
    double start_wall;        /* when the first of them began */
    double eval_wall;         /* wall seconds in the periodic evaluations so far (left out of tokens/s) */
} trainer;

#define BE (t->ctx->backend)
#define ST (t->ctx->stream)

/* The rank's modelled clock (0 when the runtime has none). */
static double clock_now(const trainer *t) { return t->ctx->clock ? t->ctx->clock(t->ctx->runtime) : 0; }

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sums n doubles over `group` (through backend memory, as every transfer must).
 * On meta the calls are made (their time counts) but nothing arrives: `values`
 * keep this rank's own. */
static usp_status sum_over(trainer *t, usp_comm_t *group, double *values, int n)
{
    USP_CHECK(usp_buffer_copy(BE, t->scalars, values, (size_t)n * sizeof *values, USP_COPY_HOST_TO_DEVICE, ST));
    USP_CHECK(usp_comm_all_reduce(group, t->scalars, t->scalars, (size_t)n, USP_F64, USP_REDUCE_SUM, ST));
    return usp_buffer_download(BE, values, t->scalars, (size_t)n * sizeof *values, ST);
}

/* Reads this rank's shards of the B_local sequences of DP replica d at `first_sample` into shards[B_local]. */
static usp_status read_batch(trainer *t, int64_t first_sample, usp_shard *shards)
{
    int sp = usp_comm_rank(t->mesh.sp);
    for (int64_t b = 0; b < t->B_local; b++)
        USP_CHECK(usp_data_read_shard(&t->data, usp_model_layout(t->model), sp,
                                      first_sample + t->mesh.d * t->B_local + b, t->c->seq_len, &shards[b]));
    return USP_OK;
}

/* Valid targets of shards[rows]. */
static double count_targets(const usp_shard *shards, int64_t rows)
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

/* A rank asked to stop (usp_train_config.stop) adds STOP_MARK to its count of valid targets: the
 * world's sum is then stops * 2^40 + count, so the all-reduce every step makes anyway tells every
 * rank, at the same step, whether any rank was asked. Exact in a double while the count is below
 * 2^40 and the world at most 2^12 ranks (2^52 < 2^53). */
#define STOP_MARK 1099511627776.0 /* 2^40 */

/* *count (this rank's valid targets) summed over the world; none at all is an error. With
 * `stop` (a training step), this rank's stop flag rides along and *stop says whether any rank's was set. */
static usp_status world_targets(trainer *t, double *count, int *stop)
{
    if (*count >= STOP_MARK)
        return usp_error(USP_ERR_CONFIG, "%.0f target tokens in one step: usp counts up to 2^40", *count);
    int asked = stop && t->numerics && t->c->stop && atomic_load(t->c->stop); /* meta: nothing is summed across ranks */
    *count += asked ? STOP_MARK : 0;
    USP_CHECK(sum_over(t, t->ctx->world, count, 1));
    if (stop) {
        double stops = floor(*count / STOP_MARK);
        *count -= stops * STOP_MARK;
        *stop = stops > 0;
    }
    if (*count < 1 && t->numerics) /* on meta the count is this rank's own, possibly 0 (padding) */
        return usp_error(USP_ERR_CONFIG, "the batch has no valid target token");
    return USP_OK;
}

/* Forward and loss (no gradient) of the batch read; *loss = mean over the global batch's
 * valid targets. With `digits`, passkey answers predicted right per sample. */
static usp_status eval_forward(trainer *t, double *loss, double *digits)
{
    double count = count_targets(t->shards, t->B_local), sum;
    USP_CHECK(world_targets(t, &count, NULL));
    USP_CHECK(usp_model_forward(t->model, t->shards));
    if (digits)
        USP_CHECK(count_right_digits(t, digits));
    USP_CHECK(usp_model_loss(t->model, (float)(1.0 / (count > 1 ? count : 1)), 0, &sum));
    USP_CHECK(sum_over(t, t->ctx->world, &sum, 1));
    *loss = sum / count;
    return USP_OK;
}

/* A step's forward (and, unless forward-only, backward) over its M micro-batches: gradient
 * accumulation. The step's micro-batches are read at once and their valid targets counted (one
 * all-reduce), so that every micro-batch's loss is scaled by the whole step's count and the
 * gradients the store accumulates are the whole batch's; with M = 1 this is one read, one forward
 * and one backward. *loss = the
 * step's mean loss; *fwd, *recompute: the forward and recomputed FLOPs of all its micro-batches. */
static usp_status step_passes(trainer *t, int64_t first_sample, double *loss, double *fwd, double *recompute)
{
    const int with_grad = !t->c->forward_only;
    for (int64_t m = 0; m < t->M; m++)
        USP_CHECK(read_batch(t, first_sample + m * t->per_call, t->shards + m * t->B_local));
    double count = count_targets(t->shards, t->M * t->B_local), sum = 0;
    USP_CHECK(world_targets(t, &count, &t->stopping));
    const float grad_scale = (float)(1.0 / (count > 1 ? count : 1));
    *fwd = *recompute = 0;
    for (int64_t m = 0; m < t->M; m++) {
        usp_param_store_accumulate(t->store, m > 0);
        usp_param_store_reduce_in_backward(t->store, m == t->M - 1); /* the sums once, with the last pass */
        double part, f, r;
        USP_CHECK(usp_model_forward(t->model, t->shards + m * t->B_local));
        USP_CHECK(usp_model_loss(t->model, grad_scale, with_grad, &part));
        USP_CHECK(sum_over(t, t->ctx->world, &part, 1)); /* each pass's, as a run of one pass always did */
        if (with_grad)
            USP_CHECK(usp_model_backward(t->model));
        usp_model_step_flops(t->model, &f, &r);
        sum += part, *fwd += f, *recompute += r;
    }
    usp_param_store_accumulate(t->store, 0);
    usp_param_store_reduce_in_backward(t->store, 1);
    *loss = sum / count;
    return USP_OK;
}

/* Emits step 1's whole gradients as a FIRST_GRADS record (rank 0; tests). */
static usp_status record_first_grads(trainer *t, const float *whole)
{
    size_t bytes = (size_t)t->table.total * sizeof(float);
    float *host = malloc(bytes);
    if (!host)
        return usp_error(USP_ERR_RUNTIME, "out of memory copying the first gradients");
    usp_status s = usp_buffer_download(BE, host, whole, bytes, ST);
    if (s == USP_OK)
        t->c->on_record(t->c->record_ctx, &(usp_train_record){.kind = USP_TRAIN_RECORD_FIRST_GRADS, .step = 1,
                                                               .steps = t->c->steps, .values = host,
                                                               .n_values = t->table.total});
    free(host);
    return s;
}

/* A diverged step stops the run before AdamW, and so before any save: one NaN or Inf in the
 * loss or the gradient norm would spread into every weight, and `loss nan` would end in exit 0
 * with a checkpoint of NaN. The loss and the norm are all-reduced (sum_over, and
 * usp_param_store_reduce_grads), so every rank holds the same value (a NaN or Inf on one rank
 * is one in the sum) and all stop at the same step: no rank is left waiting in a collective.
 * On meta nothing is computed, so nothing is checked. */
static usp_status stop_if_not_finite(const trainer *t, int64_t step, const char *what, double value)
{
    if (!t->numerics || isfinite(value))
        return USP_OK;
    return usp_error(USP_ERR_RUNTIME, "step %lld of %lld: the %s is %g, not a finite number: the training diverged and "
                     "stops before this step's update, saving nothing; lower --lr (now %g), or check the data",
                     (long long)step, (long long)t->c->steps, what, value, t->c->lr);
}

/* The store sums the gradients over the ranks (every rank, or each its shard,
 * ends with the gradient of the global loss); clipping; AdamW. */
static usp_status reduce_and_update(trainer *t, int64_t step)
{
    double norm;
    USP_CHECK(usp_param_store_reduce_grads(t->store, &norm));
    USP_CHECK(stop_if_not_finite(t, step, "gradient norm", norm));
    t->grad_norm = t->numerics ? norm : NAN;
    float *whole = usp_param_store_whole_grads(t->store);
    if (t->c->record_tensors && t->c->on_record && t->ctx->rank == 0 && step == 1 && t->numerics && whole)
        USP_CHECK(record_first_grads(t, whole));
    /* on meta the norm is unknown (0): count the clip, a step usually pays it early in training */
    if (t->c->grad_clip > 0 && (norm > t->c->grad_clip || !t->numerics))
        USP_CHECK(usp_param_store_scale_grads(t->store, t->numerics ? (float)(t->c->grad_clip / norm) : 1.0f));
    usp_adamw_config a = {.lr = (float)usp_train_lr(t->c, step), .beta1 = (float)t->c->beta1,
                          .beta2 = (float)t->c->beta2, .eps = (float)t->c->eps,
                          .weight_decay = (float)t->c->weight_decay, .step = step};
    return usp_param_store_adamw(t->store, &a);
}

/* The peak memory of every rank (a small all_gather, on record steps only: it
 * is part of the modelled run, as its place in the progress always was). On
 * meta nothing arrives: only peaks[0], this rank's own, is set. */
static usp_status gather_peaks(trainer *t, double *peaks)
{
    double mine = (double)usp_backend_peak_bytes(BE);
    USP_CHECK(usp_buffer_copy(BE, t->scalars, &mine, sizeof mine, USP_COPY_HOST_TO_DEVICE, ST));
    USP_CHECK(usp_comm_all_gather(t->ctx->world, t->scalars, t->scalars + 1, 1, USP_F64, ST));
    USP_CHECK(usp_buffer_download(BE, peaks, t->scalars + 1, (size_t)t->ctx->world_size * sizeof *peaks, ST));
    if (!t->numerics)
        peaks[0] = mine;
    return USP_OK;
}

/* A STEP record (rank 0). sim is the modelled clock; sim per step averages it
 * over the steps since the last record. */
static void record_step(trainer *t, int64_t step, double loss, double tokens_per_s, const double *peaks)
{
    double sim = clock_now(t);
    double per_step = step > t->log_step ? (sim - t->log_clock) / (double)(step - t->log_step) : 0;
    t->log_clock = sim, t->log_step = step;
    usp_train_record r = {.kind = USP_TRAIN_RECORD_STEP, .step = step, .steps = t->c->steps, .loss = loss,
                          .lr = usp_train_lr(t->c, step), .grad_norm = t->grad_norm,
                          .elapsed_s = wall_now() - t->start_wall, .first_step = t->first_step,
                          .last_step = t->last_step, .tokens_per_s = tokens_per_s, .clock_s = sim,
                          .clock_step_s = per_step, .peak_bytes = peaks,
                          .n_peaks = t->numerics ? t->ctx->world_size : 1, .shapes_only = !t->numerics};
    t->c->on_record(t->c->record_ctx, &r);
}

/* The batches of held-out samples an evaluation runs: eval_samples, in whole batches. */
static int64_t eval_batches(const trainer *t) { return (t->c->eval_samples + t->per_call - 1) / t->per_call; }

/* Mean loss and, for passkey data, the fraction of held-out samples whose
 * five key digits are all predicted right. */
static usp_status evaluate(trainer *t, double *loss_out, double *accuracy)
{
    int64_t batches = eval_batches(t);
    double loss_sum = 0, right[2] = {0, 0}; /* samples right, samples seen */
    double *digits = calloc((size_t)t->B_local, sizeof *digits);
    if (!digits)
        return usp_error(USP_ERR_RUNTIME, "out of memory for the evaluation");
    usp_status s = USP_OK;
    for (int64_t i = 0; i < batches && s == USP_OK; i++) {
        double loss = 0;
        s = read_batch(t, USP_TRAIN_HELD_OUT_FIRST + i * t->per_call, t->shards);
        if (s == USP_OK)
            s = eval_forward(t, &loss, t->data.kind == USP_DATA_PASSKEY ? digits : NULL);
        if (s == USP_OK && t->data.kind == USP_DATA_PASSKEY)
            s = sum_over(t, t->mesh.sp, digits, (int)t->B_local); /* the digits may sit on several SP ranks */
        for (int64_t b = 0; b < t->B_local && s == USP_OK && t->data.kind == USP_DATA_PASSKEY; b++)
            right[0] += digits[b] == USP_PASSKEY_DIGITS, right[1] += 1;
        loss_sum += loss;
    }
    free(digits);
    USP_CHECK(s);
    if (t->data.kind == USP_DATA_PASSKEY)
        USP_CHECK(sum_over(t, t->mesh.dp, right, 2));
    *loss_out = loss_sum / (double)(batches > 0 ? batches : 1);
    *accuracy = t->numerics && t->data.kind == USP_DATA_PASSKEY && right[1] > 0 ? right[0] / right[1] : -1;
    return USP_OK;
}

/* An EVAL record (rank 0). */
static void record_eval(const trainer *t, int64_t step, double loss, double accuracy)
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
static usp_status evaluate_every(trainer *t, int64_t step)
{
    int64_t every = t->c->eval_every;
    if (every <= 0 || step % every != 0 || t->stopping || step == t->last_step)
        return USP_OK;
    double wall = wall_now(), clock = clock_now(t), loss, accuracy;
    USP_CHECK(evaluate(t, &loss, &accuracy));
    t->eval_wall += wall_now() - wall, t->log_clock += clock_now(t) - clock;
    record_eval(t, step, loss, accuracy);
    return USP_OK;
}

/* Every rank joins the save, which streams the store bucket by bucket (a
 * gather per bucket when it is sharded); rank 0 writes the checkpoint. */
static usp_status save(trainer *t)
{
    return usp_checkpoint_save_store(t->c->save_dir, &t->c->model, &t->table, t->store, t->ctx, t->step, t->c->seed,
                                     t->c->keep, NULL);
}

/* Fresh weights, drawn for the part of each bucket this rank keeps, through one
 * bucket's host buffer: element i depends on (seed, i) alone, so every rank
 * draws the same model; Adam's moments start at zero. */
static usp_status init_weights(trainer *t)
{
    int64_t most = 0, lo, count;
    for (int b = 0; b < usp_param_store_n_buckets(t->store); b++) {
        usp_param_store_held(t->store, USP_ARRAY_WEIGHTS, b, &lo, &count);
        most = count > most ? count : most;
    }
    float *host;
    USP_CHECK(usp_malloc((void **)&host, (size_t)(most > 0 ? most : 1) * sizeof *host, "the initial weights"));
    usp_status s = usp_param_store_zero(t->store, USP_ARRAY_WEIGHTS); /* the shards' padding too */
    for (int b = 0; b < usp_param_store_n_buckets(t->store) && s == USP_OK; b++) {
        usp_param_store_held(t->store, USP_ARRAY_WEIGHTS, b, &lo, &count);
        usp_param_init_range(&t->table, &t->c->model, t->c->seed, lo, count, host);
        s = usp_param_store_write_range(t->store, USP_ARRAY_WEIGHTS, lo, count, host);
    }
    free(host);
    for (int a = USP_ARRAY_ADAM_M; a <= USP_ARRAY_ADAM_V && s == USP_OK; a++)
        s = usp_param_store_zero(t->store, (usp_param_array)a);
    t->step = 0;
    return s;
}

/* Fresh weights from the seed, or a checkpoint (with its optimizer state when it
 * has one: every rank reads the part it keeps). On meta nothing: there is
 * nowhere to put them. */
static usp_status load_weights(trainer *t)
{
    if (!t->numerics)
        return USP_OK;
    if (!t->c->resume_dir)
        return init_weights(t);
    int has_optimizer;
    return usp_checkpoint_load_store(t->c->resume_dir, &t->c->model, &t->table, t->store, t->ctx, &t->step,
                                     &has_optimizer, NULL);
}

/* Every rank joins the read (a gather when the weights are sharded); rank 0
 * emits them as a LAST_WEIGHTS record (tests). */
static usp_status record_last_weights(trainer *t)
{
    float *host = malloc((size_t)t->table.total * sizeof *host);
    if (!host)
        return usp_error(USP_ERR_RUNTIME, "out of memory copying the weights");
    usp_status s = usp_param_store_read(t->store, USP_ARRAY_WEIGHTS, host);
    if (s == USP_OK)
        s = usp_backend_synchronize(BE, ST);
    if (s == USP_OK && t->ctx->rank == 0)
        t->c->on_record(t->c->record_ctx, &(usp_train_record){.kind = USP_TRAIN_RECORD_LAST_WEIGHTS, .step = t->step,
                                                               .steps = t->c->steps, .values = host,
                                                               .n_values = t->table.total});
    free(host);
    return s;
}

static usp_status setup(trainer *t)
{
    const usp_train_config *c = t->c;
    t->numerics = usp_backend_has_numerics(BE);
    if (!t->numerics && c->save_dir)
        return usp_error(USP_ERR_CONFIG, "--save %s with the %s backend: a run on shapes only has no weights to "
                         "save; drop --save or --meta", c->save_dir, usp_backend_name(BE));
    if (c->save_dir) /* before the run, not after hours of it */
        USP_CHECK(usp_checkpoint_check_save_dir(c->save_dir));
    if (t->numerics && c->storage != USP_F32 && !usp_backend_stores_bf16(BE))
        return usp_error(USP_ERR_CONFIG, "--dtype %s with the %s backend, which stores fp32 only: use the cpu, "
                         "lazy or cuda backend, or plan it (--meta, usp plan)", usp_dtype_name(c->storage),
                         usp_backend_name(BE));
    if (t->numerics && c->eager_loss)
        return usp_error(USP_ERR_CONFIG, "--loss eager with the %s backend: a framework's loss is planned on shapes "
                         "only (add --meta, or use usp plan)", usp_backend_name(BE));
    if (c->eager_loss && c->tiled_loss)
        return usp_error(USP_ERR_CONFIG, "--loss eager with --tiled-loss: a tiled loss never holds the [tokens, "
                         "vocabulary] arrays an eager loss keeps; choose one");
    if (t->numerics && c->eager_ring_merge)
        return usp_error(USP_ERR_CONFIG, "--ring-merge eager with the %s backend: a framework's merge is planned on "
                         "shapes only (add --meta, or use usp plan)", usp_backend_name(BE));
    if (t->numerics && c->forward_only)
        return usp_error(USP_ERR_CONFIG, "a forward-only step with the %s backend: it is planned on shapes only "
                         "(usp plan --forward-only)", usp_backend_name(BE));
    if (t->numerics && c->offload_optimizer)
        return usp_error(USP_ERR_CONFIG, "--offload optimizer with the %s backend: an optimizer on the host is "
                         "planned on shapes only (add --meta, or use usp plan)", usp_backend_name(BE));
    USP_CHECK(usp_train_check(c, &t->N));
    USP_CHECK(usp_mesh_create(t->ctx->world, &c->shape, &t->mesh));
    t->M = c->micro_batches > 1 ? c->micro_batches : 1;
    t->B_local = c->batch / c->shape.dp / t->M, t->per_call = c->batch / t->M;
    USP_CHECK(usp_data_open(c->data, c->seed, &t->data));
    if (t->data.vocab > c->model.vocab && t->data.kind != USP_DATA_TOKENS16 && t->data.kind != USP_DATA_TOKENS32)
        return usp_error(USP_ERR_CONFIG, "--data %s produces tokens up to %lld but model %s has a vocabulary of %lld",
                         c->data, (long long)t->data.vocab - 1, c->model.name, (long long)c->model.vocab);
    USP_CHECK(usp_param_table_make(&c->model, &t->table));
    usp_param_store_config pc = {.backend = BE, .stream = ST, .table = &t->table, .n_layer = (int)c->model.n_layer,
                                 .zero_stage = c->zero_stage, .world = t->ctx->world,
                                 .grad_group = t->ctx->world, /* the ranks sharing the gradient: dp x sp */
                                 .bucket_bytes = usp_train_bucket_bytes(c), .optimizer = 1, .storage = c->storage,
                                 .grad_reduce = c->grad_reduce, .offload_optimizer = c->offload_optimizer};
    USP_CHECK(usp_param_store_create(&pc, &t->store));
    usp_model_setup ms = {.config = &c->model, .backend = BE, .stream = ST, .mesh = &t->mesh,
                          .attention_local = c->attention_local, .batch = t->B_local, .seq_len = t->N,
                          .store = t->store, .recompute_layers = c->recompute_layers,
                          .selective_recompute = c->selective_recompute, .tiled_mlp = c->tiled_mlp,
                          .tiled_loss = c->tiled_loss, .tile_rows = c->tile_rows, .storage = c->storage,
                          .eager_loss = c->eager_loss, .eager_ring_merge = c->eager_ring_merge,
                          .ring_backward_overlap = c->ring_backward_overlap, .ulysses_overlap = c->ulysses_overlap};
    USP_CHECK(usp_model_create(&ms, &t->model));
    USP_CHECK(usp_buffer_alloc(BE, (size_t)(t->ctx->world_size + c->batch + 64) * sizeof(double), "comm", (void **)&t->scalars));
    USP_CHECK(usp_calloc((void **)&t->shards, (size_t)(t->M * t->B_local), sizeof *t->shards, "shards"));
    for (int64_t b = 0; b < t->M * t->B_local; b++)
        USP_CHECK(usp_shard_alloc(&t->shards[b], usp_model_layout(t->model)->per_rank, !t->numerics));
    return load_weights(t);
}

static void teardown(trainer *t)
{
    for (int64_t b = 0; t->shards && b < t->M * t->B_local; b++)
        usp_shard_free(&t->shards[b]);
    free(t->shards);
    usp_buffer_free(BE, t->scalars);
    usp_model_destroy(t->model);
    usp_param_store_destroy(t->store);
    usp_param_table_free(&t->table);
    usp_data_close(&t->data);
    usp_mesh_destroy(&t->mesh);
}

static usp_status run(trainer *t)
{
    const usp_train_config *c = t->c;
    USP_CHECK(setup(t));
    int64_t until = c->eval_only ? t->step : c->until > 0 && c->until < c->steps ? c->until : c->steps;
    double start = wall_now(), loss = 0, tokens = 0;
    t->grad_norm = NAN, t->first_step = t->step, t->last_step = until, t->start_wall = start;
    /* Every rank's peak reaches rank 0's record only with numerics: on meta nothing arrives
     * (the meta backend writes no host memory) and one slot, this rank's own, is all that is
     * read; W of them in each of W ranks was W^2 doubles (128 MB at W = 4096) on shapes only. */
    double *peaks = calloc(t->numerics ? (size_t)t->ctx->world_size : 1, sizeof *peaks);
    if (!peaks)
        return usp_error(USP_ERR_RUNTIME, "out of memory");
    usp_status s = USP_OK;
    t->log_clock = clock_now(t), t->log_step = t->step;
    while (t->step < until && s == USP_OK && !t->stopping) {
        int64_t step = ++t->step;
        double step_start = clock_now(t), flops_start = usp_backend_flops(BE), fwd = 0, recompute = 0;
        s = step_passes(t, (step - 1) * c->batch, &loss, &fwd, &recompute);
        if (t->result && step == 1 && t->ctx->rank == 0)
            t->result->first_loss = loss;
        if (s == USP_OK) s = stop_if_not_finite(t, step, "loss", loss);
        if (s == USP_OK && !c->forward_only) s = reduce_and_update(t, step);
        if (s == USP_OK && t->ctx->trace) /* the frame a comparison takes one step in (plan/compare.h) */
            s = usp_trace_record_step(t->ctx->trace, t->ctx->rank, step, step_start, clock_now(t));
        if (s == USP_OK && c->step_stats) {
            usp_train_step_stats st = {.step_flops = usp_backend_flops(BE) - flops_start, .start_s = step_start,
                                       .end_s = clock_now(t), .fwd_flops = fwd, .recompute_flops = recompute};
            s = usp_rank_gather(t->ctx, &st, sizeof st, c->step_stats);
        }
        tokens += (double)c->batch * (double)c->seq_len;
        if (s == USP_OK && c->on_record && (step % c->log_every == 0 || step == until || t->stopping)) {
            s = gather_peaks(t, peaks);
            if (s == USP_OK && t->ctx->rank == 0)
                record_step(t, step, loss, tokens / (wall_now() - start - t->eval_wall), peaks);
        }
        if (s == USP_OK)
            s = evaluate_every(t, step);
        if (s == USP_OK && c->save_dir && c->save_every > 0 && step % c->save_every == 0 && step < until &&
            !t->stopping) /* the last step's save, or the stop's, comes after the loop */
            s = save(t);
    }
    free(peaks);
    if (s == USP_OK && c->record_tensors && c->on_record && t->numerics)
        s = record_last_weights(t);
    double wall = wall_now() - start, accuracy = -1, steps_clock = clock_now(t), steps_wall = wall - t->eval_wall;
    if (s == USP_OK && c->save_dir)
        s = save(t);
    int evaluated = (c->eval_samples > 0 || c->eval_only) && !t->stopping; /* a stop is asked to be quick */
    if (s == USP_OK && evaluated)
        s = evaluate(t, &loss, &accuracy);
    if (s == USP_OK && evaluated && !c->eval_only && c->eval_every > 0 && t->step % c->eval_every == 0)
        record_eval(t, t->step, loss, accuracy); /* the last step's periodic evaluation is this one */
    if (s == USP_OK && t->ctx->rank == 0 && t->result)
        *t->result = (usp_train_result){.loss = loss, .loss_held_out = evaluated, .passkey_accuracy = accuracy,
                                        .wall_s = wall, .steps_time_s = steps_clock,
                                        .first_loss = t->result->first_loss,
                                        .tokens_per_s = steps_wall > 0 ? tokens / steps_wall : 0,
                                        .steps_done = t->step,
                                        .clock_s = clock_now(t),
                                        .seq_len_padded = t->N, .peak_bytes = t->result->peak_bytes};
    if (s == USP_OK && t->ctx->rank == 0 && t->result)
        usp_param_store_grad_traffic(t->store, &t->result->grad_collectives, &t->result->grad_bytes);
    if (s == USP_OK && t->result)
        t->result->stopped = t->stopping; /* every rank's process decides its exit code by it */
    if (s == USP_OK && t->result && t->result->peak_bytes) {
        size_t mine = usp_backend_peak_bytes(BE);
        s = usp_rank_gather(t->ctx, &mine, sizeof mine, t->result->peak_bytes);
    }
    return s;
}

usp_status usp_train_rank(const usp_rank_ctx *ctx, void *arg)
{
    usp_train_run *r = arg;
    trainer t = {.ctx = ctx, .c = r->config, .result = r->result};
    usp_status s = run(&t);
    teardown(&t);
    return s;
}
