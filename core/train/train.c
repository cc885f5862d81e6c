/* The training loop (see train.h). It prints nothing: rank 0's progress
 * leaves as records through the config's on_record. */
#include "core/train/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/checkpoint/checkpoint.h"
#include "core/train/trainer.h"

/* A rank asked to stop (usp_train_config.stop) adds STOP_MARK to its count of valid targets: the
 * world's sum is then stops * 2^40 + count, so the all-reduce every step makes anyway tells every
 * rank, at the same step, whether any rank was asked. Exact in a double while the count is below
 * 2^40 and the world at most 2^12 ranks (2^52 < 2^53). */
#define STOP_MARK 1099511627776.0 /* 2^40 */

/* A training step's stop flags: this rank's count of valid targets, with STOP_MARK when it was asked to
 * stop, summed over the world in the all-reduce every step makes anyway, as world_targets does, but
 * only enqueued, with the copy of the sum to t->stop_word: read_stop_flags reads it after the step's
 * wait, so every rank learns at the same step whether any was asked. */
static usp_status post_stop_flags(trainer *t, double count)
{
    if (count >= STOP_MARK)
        return usp_error(USP_ERR_CONFIG, "%.0f target tokens in one step: usp counts up to 2^40", count);
    int asked = t->numerics && t->c->stop && atomic_load(t->c->stop); /* meta: nothing is summed across ranks */
    double mine = (t->numerics ? trainer_count_targets(t->shards, t->M * t->B_local) : count) + (asked ? STOP_MARK : 0);
    *t->stop_word = mine; /* meta: nothing arrives, this rank's own */
    USP_CHECK(usp_buffer_copy(BE, t->scalars, &mine, sizeof mine, USP_COPY_HOST_TO_DEVICE, ST));
    USP_CHECK(usp_comm_all_reduce(t->ctx->world, t->scalars, t->scalars, 1, USP_F64, USP_REDUCE_SUM, ST));
    return usp_buffer_copy(BE, t->numerics ? t->stop_word : NULL, t->scalars, sizeof mine,
                           USP_COPY_DEVICE_TO_HOST, ST);
}

/* After the step's wait (t->stop_word has landed): t->stopping, and the world's count checked against
 * the `count` the step scaled its gradients by. */
static usp_status read_stop_flags(trainer *t, double count)
{
    double stops = floor(*t->stop_word / STOP_MARK), got = *t->stop_word - stops * STOP_MARK;
    t->stopping = stops > 0;
    if (t->numerics && got != count)
        return usp_error(USP_ERR_RUNTIME, "the world's valid targets this step are %.0f, not the %.0f the "
                         "gradients were scaled by (batch x seq_len)", got, count);
    return USP_OK;
}

/* A step's forward (and, unless forward-only, backward) over its M micro-batches: gradient
 * accumulation. The step's micro-batches are read at once and their valid targets counted, so that
 * every micro-batch's loss is scaled by the whole step's count and the gradients the store
 * accumulates are the whole batch's; with M = 1 this is one read, one forward and one backward.
 * Nothing here waits for the device: the losses are copied to t->host_losses and read after the
 * step's one wait (step_loss). *count = the step's valid targets over the world; *fwd, *recompute:
 * the forward and recomputed FLOPs of all its micro-batches. */
static usp_status step_passes(trainer *t, int64_t first_sample, double *count, double *fwd, double *recompute)
{
    const int with_grad = !t->c->forward_only;
    for (int64_t m = 0; m < t->M; m++)
        USP_CHECK(trainer_read_batch(t, first_sample + m * t->per_call, t->shards + m * t->B_local));
    /* every target of the batch's real tokens is valid but a document's end-of-text token's, and the
     * padding's are not (core/data/data.c), so the world's count is batch x seq_len less the step's
     * end-of-text tokens, known here without a collective: post_stop_flags checks it. On meta nothing is
     * summed: the count is this rank's own, as it always was. */
    *count = t->numerics ? 0 : trainer_count_targets(t->shards, t->M * t->B_local);
    for (int64_t b = 0; b < t->c->batch && t->numerics; b++) {
        int64_t n;
        USP_CHECK(usp_data_sample_targets(&t->data, first_sample + b, t->c->seq_len, &n));
        *count += (double)n;
    }
    USP_CHECK(post_stop_flags(t, *count));
    const float grad_scale = (float)(1.0 / (*count > 1 ? *count : 1));
    *fwd = *recompute = 0;
    const int64_t rows = usp_model_rows(t->model);
    for (int64_t m = 0; m < t->M; m++) {
        usp_param_store_accumulate(t->store, m > 0);
        usp_param_store_reduce_in_backward(t->store, m == t->M - 1); /* the sums once, with the last pass */
        double f, r;
        USP_CHECK(usp_model_forward(t->model, t->shards + m * t->B_local));
        USP_CHECK(usp_model_loss_enqueue(t->model, grad_scale, with_grad,
                                         t->host_losses ? t->host_losses + m * rows : NULL));
        if (with_grad)
            USP_CHECK(usp_model_backward(t->model));
        usp_model_step_flops(t->model, &f, &r);
        *fwd += f, *recompute += r;
    }
    usp_param_store_accumulate(t->store, 0);
    usp_param_store_reduce_in_backward(t->store, 1);
    return USP_OK;
}

/* After the step's wait, where `needed`, the step's mean loss over the world (*loss; NaN when not
 * needed). Each micro-batch's sum is this rank's rows in row order, then summed over the world in one
 * all-reduce of M values, then over the micro-batches in order: the bits of the per-pass all-reduce
 * this replaces. Reading the world's loss is one more wait, so it is made only on the steps that show
 * or check it (train_step). */
static usp_status step_loss(trainer *t, int needed, double count, double *loss)
{
    *loss = NAN;
    if (!needed)
        return USP_OK;
    const int64_t T = usp_model_layout(t->model)->per_rank, rows = usp_model_rows(t->model);
    double *parts = malloc((size_t)t->M * sizeof *parts), sum = 0;
    if (!parts)
        return usp_error(USP_ERR_RUNTIME, "out of memory for the step's losses");
    for (int64_t m = 0; m < t->M; m++) {
        parts[m] = t->numerics ? 0.0 : NAN; /* meta: nothing arrived */
        for (int64_t b = 0; b < t->B_local && t->numerics; b++)
            parts[m] = usp_model_add_losses(parts[m], t->host_losses + m * rows + b * T,
                                            t->shards[m * t->B_local + b].targets, T);
    }
    usp_status s = trainer_sum_over(t, t->ctx->world, parts, (int)t->M);
    for (int64_t m = 0; m < t->M; m++)
        sum += parts[m];
    free(parts);
    *loss = sum / count;
    return s;
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

/* The store sums the gradients over the ranks (every rank, or each its shard, ends with the
 * gradient of the global loss), and t->grad_norm. This is the step's host wait, the one value a
 * step must read (the norm decides the clipping): at ZeRO 0-1 the blocking sum of squares of the
 * whole gradient; at ZeRO 2-3 that of this rank's shard, then its sum over the world, read
 * (usp_param_store_reduce_grads): two. Everything the step enqueued before on the stream has then
 * landed (the losses, the stop flags). tests/test_host_waits.c asserts these bounds. */
static usp_status reduce_grads(trainer *t)
{
    double norm;
    USP_CHECK(usp_param_store_reduce_grads(t->store, &norm));
    t->grad_norm = t->numerics ? norm : NAN;
    return USP_OK;
}

/* Clipping and AdamW, once the norm is known finite. */
static usp_status update(trainer *t, int64_t step)
{
    double norm = t->numerics ? t->grad_norm : 0;
    USP_CHECK(stop_if_not_finite(t, step, "gradient norm", norm));
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
    double sim = trainer_clock_now(t);
    double per_step = step > t->log_step ? (sim - t->log_clock) / (double)(step - t->log_step) : 0;
    t->log_clock = sim, t->log_step = step;
    usp_train_record r = {.kind = USP_TRAIN_RECORD_STEP, .step = step, .steps = t->c->steps, .loss = loss,
                          .lr = usp_train_lr(t->c, step), .grad_norm = t->grad_norm,
                          .elapsed_s = usp_wall_seconds() - t->start_wall, .first_step = t->first_step,
                          .last_step = t->last_step, .tokens_per_s = tokens_per_s, .clock_s = sim,
                          .clock_step_s = per_step, .peak_bytes = peaks,
                          .n_peaks = t->numerics ? t->ctx->world_size : 1, .shapes_only = !t->numerics};
    t->c->on_record(t->c->record_ctx, &r);
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
    if (c->eot >= 0)
        USP_CHECK(usp_data_set_eot(&t->data, c->eot, c->model.vocab));
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
                          .attention = c->attention, .batch = t->B_local, .seq_len = t->N,
                          .store = t->store, .recompute_layers = c->recompute_layers,
                          .selective_recompute = c->selective_recompute, .tiled_mlp = c->tiled_mlp,
                          .tiled_loss = c->tiled_loss, .tile_rows = c->tile_rows, .storage = c->storage,
                          .eager_loss = c->eager_loss, .eager_ring_merge = c->eager_ring_merge,
                          .ring_backward_overlap = c->ring_backward_overlap, .ulysses_overlap = c->ulysses_overlap,
                          .window = c->window, .documents = t->data.eot >= 0, .doc_lengths = c->doc_lengths,
                          .n_doc_lengths = c->n_doc_lengths};
    USP_CHECK(usp_model_create(&ms, &t->model));
    USP_CHECK(usp_buffer_alloc(BE, (size_t)(t->ctx->world_size + c->batch + 64) * sizeof(double), "comm", (void **)&t->scalars));
    USP_CHECK(usp_calloc((void **)&t->shards, (size_t)(t->M * t->B_local), sizeof *t->shards, "shards"));
    /* host memory the step's copies land in without a wait (pinned on cuda) */
    if (t->numerics)
        USP_CHECK(usp_host_alloc(BE, (size_t)(t->M * usp_model_rows(t->model)) * sizeof *t->host_losses,
                                 "the step's losses", (void **)&t->host_losses));
    USP_CHECK(usp_host_alloc(BE, sizeof *t->stop_word, "the step's stop flags", (void **)&t->stop_word));
    for (int64_t b = 0; b < t->M * t->B_local; b++) {
        USP_CHECK(usp_shard_alloc(&t->shards[b], usp_model_layout(t->model)->per_rank, !t->numerics));
        if (t->data.eot >= 0) /* --eot, or text:DIR's own */
            USP_CHECK(usp_shard_alloc_documents(&t->shards[b], t->N));
    }
    return load_weights(t);
}

static void teardown(trainer *t)
{
    for (int64_t b = 0; t->shards && b < t->M * t->B_local; b++)
        usp_shard_free(&t->shards[b]);
    free(t->shards);
    usp_host_free(BE, t->host_losses);
    usp_host_free(BE, t->stop_word);
    usp_buffer_free(BE, t->scalars);
    usp_model_destroy(t->model);
    usp_param_store_destroy(t->store);
    usp_param_table_free(&t->table);
    usp_data_close(&t->data);
    usp_mesh_destroy(&t->mesh);
}

/* 1 on a step that makes a STEP record (every log_every, the last, a stop's). */
static int logged(const trainer *t, int64_t step, int64_t until)
{
    return step % t->c->log_every == 0 || step == until || t->stopping;
}

/* One training step: passes, the gradient norm (the step's wait), the stop flags, the loss where it
 * crosses to the host (a logged step, the first for first_loss, the last and a stop's: a diverged loss
 * in between shows in the gradient norm, checked every step), the update. */
static usp_status train_step(trainer *t, int64_t step, int64_t until, double *loss, double *fwd, double *recompute)
{
    double count = 0;
    USP_CHECK(step_passes(t, (step - 1) * t->c->batch, &count, fwd, recompute));
    if (!t->c->forward_only)
        USP_CHECK(reduce_grads(t));
    USP_CHECK(read_stop_flags(t, count));
    const int needed = step == 1 || logged(t, step, until);
    USP_CHECK(step_loss(t, needed, count, loss));
    if (t->result && step == 1 && t->ctx->rank == 0)
        t->result->first_loss = *loss;
    if (needed)
        USP_CHECK(stop_if_not_finite(t, step, "loss", *loss));
    return t->c->forward_only ? USP_OK : update(t, step);
}

static usp_status run(trainer *t)
{
    const usp_train_config *c = t->c;
    USP_CHECK(setup(t));
    int64_t until = c->eval_only ? t->step : c->until > 0 && c->until < c->steps ? c->until : c->steps;
    double start = usp_wall_seconds(), loss = 0, tokens = 0;
    t->grad_norm = NAN, t->first_step = t->step, t->last_step = until, t->start_wall = start;
    /* Every rank's peak reaches rank 0's record only with numerics: on meta nothing arrives
     * (the meta backend writes no host memory) and one slot, this rank's own, is all that is
     * read; W of them in each of W ranks was W^2 doubles (128 MB at W = 4096) on shapes only. */
    double *peaks = calloc(t->numerics ? (size_t)t->ctx->world_size : 1, sizeof *peaks);
    if (!peaks)
        return usp_error(USP_ERR_RUNTIME, "out of memory");
    usp_status s = USP_OK;
    t->log_clock = trainer_clock_now(t), t->log_step = t->step;
    while (t->step < until && s == USP_OK && !t->stopping) {
        int64_t step = ++t->step;
        double step_start = trainer_clock_now(t), flops_start = usp_backend_flops(BE), fwd = 0, recompute = 0;
        const double attention_start = usp_backend_attention_flops(BE);
        const uint64_t waits_start = usp_backend_host_waits(BE);
        s = train_step(t, step, until, &loss, &fwd, &recompute);
        t->attention_flops += usp_backend_attention_flops(BE) - attention_start;
        if (s == USP_OK && t->ctx->trace) /* the frame a comparison takes one step in (plan/compare.h) */
            s = usp_trace_record_step(t->ctx->trace, t->ctx->rank, step, step_start, trainer_clock_now(t));
        if (s == USP_OK && c->step_stats) {
            usp_train_step_stats st = {.step_flops = usp_backend_flops(BE) - flops_start, .start_s = step_start,
                                       .end_s = trainer_clock_now(t), .fwd_flops = fwd, .recompute_flops = recompute,
                                       .attention_flops = usp_backend_attention_flops(BE) - attention_start,
                                       .host_waits = (double)(usp_backend_host_waits(BE) - waits_start)};
            s = usp_rank_gather(t->ctx, &st, sizeof st, c->step_stats);
        }
        tokens += (double)c->batch * (double)c->seq_len;
        if (s == USP_OK && c->on_record && logged(t, step, until)) {
            s = gather_peaks(t, peaks);
            if (s == USP_OK && t->ctx->rank == 0)
                record_step(t, step, loss, tokens / (usp_wall_seconds() - start - t->eval_wall), peaks);
        }
        t->step_waits += usp_backend_host_waits(BE) - waits_start;
        if (s == USP_OK)
            s = trainer_evaluate_every(t, step);
        if (s == USP_OK && c->save_dir && c->save_every > 0 && step % c->save_every == 0 && step < until &&
            !t->stopping) /* the last step's save, or the stop's, comes after the loop */
            s = save(t);
    }
    free(peaks);
    if (s == USP_OK && c->record_tensors && c->on_record && t->numerics)
        s = record_last_weights(t);
    double wall = usp_wall_seconds() - start, accuracy = -1, steps_clock = trainer_clock_now(t);
    double steps_wall = wall - t->eval_wall;
    double steps_run = t->step > t->first_step ? (double)(t->step - t->first_step) : 1;
    if (s == USP_OK && c->save_dir)
        s = save(t);
    int evaluated = (c->eval_samples > 0 || c->eval_only) && !t->stopping; /* a stop is asked to be quick */
    if (s == USP_OK && evaluated)
        s = trainer_evaluate(t, &loss, &accuracy);
    if (s == USP_OK && evaluated && !c->eval_only && c->eval_every > 0 && t->step % c->eval_every == 0)
        trainer_record_eval(t, t->step, loss, accuracy); /* the last step's periodic evaluation is this one */
    if (s == USP_OK && t->ctx->rank == 0 && t->result)
        *t->result = (usp_train_result){.loss = loss, .loss_held_out = evaluated, .passkey_accuracy = accuracy,
                                        .wall_s = wall, .steps_time_s = steps_clock,
                                        .first_loss = t->result->first_loss,
                                        .tokens_per_s = steps_wall > 0 ? tokens / steps_wall : 0,
                                        .steps_done = t->step,
                                        .clock_s = trainer_clock_now(t),
                                        .seq_len_padded = t->N, .peak_bytes = t->result->peak_bytes,
                                        .attention_flops = t->result->attention_flops,
                                        .host_waits_per_step = (double)t->step_waits / (double)steps_run};
    if (s == USP_OK && t->ctx->rank == 0 && t->result)
        usp_param_store_grad_traffic(t->store, &t->result->grad_collectives, &t->result->grad_bytes);
    if (s == USP_OK && t->result)
        t->result->stopped = t->stopping; /* every rank's process decides its exit code by it */
    if (s == USP_OK && t->result && t->result->peak_bytes) {
        size_t mine = usp_backend_peak_bytes(BE);
        s = usp_rank_gather(t->ctx, &mine, sizeof mine, t->result->peak_bytes);
    }
    if (s == USP_OK && t->result && t->result->attention_flops)
        s = usp_rank_gather(t->ctx, &t->attention_flops, sizeof t->attention_flops, t->result->attention_flops);
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
