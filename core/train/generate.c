/* Autoregressive generation on one rank (see generate.h). */
#include "core/train/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/checkpoint/checkpoint.h"
#include "core/data/data.h"
#include "core/model/model.h"
#include "core/train/train.h"

/* What one rank holds while it generates. */
typedef struct generator {
    const usp_rank_ctx *ctx;
    const usp_generate_config *g;
    usp_mesh mesh;
    int has_mesh;
    usp_param_table table;
    usp_param_store *store;
    usp_model *model;
    usp_shard shard;          /* the forward's input: [N] tokens, targets, positions */
    int32_t *seq;             /* [N + 1]: the prompt, then the tokens generated so far */
    float *logits;            /* host [V]: the last real row's */
} generator;

usp_status usp_generate_check(const usp_generate_config *g)
{
    USP_CHECK(usp_model_config_check(&g->model));
    if (!isfinite(g->temperature) || g->temperature < 0)
        return usp_error(USP_ERR_CONFIG, "--temperature %g: give 0 (greedy: the most likely token, the default) or a "
                         "finite number above 0 (a draw from softmax(logits / T); 1 samples the model's own "
                         "distribution)", g->temperature);
    if (g->n_prompt < 1)
        return usp_error(USP_ERR_CONFIG, "--prompt is empty: generation needs at least one token to continue");
    if (g->n_prompt > g->seq_len)
        return usp_error(USP_ERR_CONFIG, "--prompt of %lld tokens is longer than --seq %lld, the length the model "
                         "runs at: give --seq %lld or more, or a shorter prompt", (long long)g->n_prompt,
                         (long long)g->seq_len, (long long)g->n_prompt);
    int64_t room = g->seq_len - g->n_prompt + 1; /* the last token is drawn from row N - 1 and needs no row */
    if (g->n_new < 1 || g->n_new > room)
        return usp_error(USP_ERR_CONFIG, "--tokens %lld: give 1 to %lld (the prompt's %lld tokens and the new ones "
                         "but the last must fit --seq %lld, the length the model runs at)", (long long)g->n_new,
                         (long long)room, (long long)g->n_prompt, (long long)g->seq_len);
    for (int64_t i = 0; i < g->n_prompt; i++)
        if (g->prompt[i] < 0 || g->prompt[i] >= g->model.vocab)
            return usp_error(USP_ERR_CONFIG, "--prompt: token %d (at %lld) is not in model %s's vocabulary of %lld",
                             g->prompt[i], (long long)i, g->model.name, (long long)g->model.vocab);
    const usp_mesh_shape one_rank = {.world = 1, .dp = 1, .ring = 1, .ulysses = 1};
    return usp_model_check_shape(&g->model, g->seq_len, &one_rank, NULL, 0, 0);
}

/* splitmix64: the generator's next 64 bits (its state advanced by the golden-ratio increment). */
static uint64_t next_bits(uint64_t *state)
{
    uint64_t x = (*state += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

int32_t usp_generate_pick(const float *logits, int64_t V, double temperature, uint64_t *rng)
{
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (logits[v] > logits[best])
            best = v;
    if (temperature <= 0)
        return (int32_t)best;
    /* p_v = exp((l_v - l_max) / T) / sum: the shift by the largest keeps every exp in [0, 1] */
    double total = 0;
    for (int64_t v = 0; v < V; v++)
        total += exp(((double)logits[v] - (double)logits[best]) / temperature);
    double u = (double)(next_bits(rng) >> 11) * 0x1p-53 * total; /* uniform in [0, total) */
    for (int64_t v = 0; v < V; v++) {
        u -= exp(((double)logits[v] - (double)logits[best]) / temperature);
        if (u < 0)
            return (int32_t)v;
    }
    return (int32_t)best; /* u left >= 0 by rounding in the sums: the mode is as good a draw as any */
}

usp_status usp_generate_passkey_prompt(uint64_t data_seed, int64_t sample, int64_t len, int32_t *prompt,
                                       int64_t *n_prompt, int32_t *key)
{
    usp_data data;
    usp_seq_layout layout;
    usp_shard shard = {0};
    USP_CHECK(usp_data_open("passkey", data_seed, &data));
    usp_status s = usp_seq_layout_make(USP_LAYOUT_CONTIGUOUS, len, 1, 1, &layout);
    if (s == USP_OK)
        s = usp_shard_alloc(&shard, len, 0);
    if (s == USP_OK) /* the tokens training and usp eval read: one rank holds them all, in order */
        s = usp_data_read_shard(&data, &layout, 0, USP_TRAIN_HELD_OUT_FIRST + sample, len, &shard);
    int digits = 0;
    *n_prompt = 0;
    for (int64_t i = 0; s == USP_OK && i < len; i++) {
        if (!usp_data_is_answer(&data, i, len))
            continue;
        if (digits == 0) /* position i predicts the first digit: the prompt is tokens 0..i */
            *n_prompt = i + 1;
        key[digits++] = shard.targets[i];
    }
    if (s == USP_OK)
        memcpy(prompt, shard.tokens, (size_t)*n_prompt * sizeof *prompt);
    usp_shard_free(&shard);
    usp_data_close(&data);
    return s;
}

/* The mesh of one rank, the store (with the optimizer's arrays: a usp checkpoint's load fills them), the
 * model at N tokens and the checkpoint's weights. */
static usp_status setup(generator *t)
{
    const usp_generate_config *g = t->g;
    usp_backend_t *be = t->ctx->backend;
    if (t->ctx->world_size != 1)
        return usp_error(USP_ERR_CONFIG, "generation runs on one rank, not a world of %d", t->ctx->world_size);
    if (!usp_backend_has_numerics(be))
        return usp_error(USP_ERR_CONFIG, "generation on the %s backend: it runs on shapes only and computes no "
                         "logits", usp_backend_name(be));
    USP_CHECK(usp_generate_check(g));
    usp_mesh_shape shape;
    USP_CHECK(usp_mesh_shape_make(1, 1, 1, &shape));
    USP_CHECK(usp_mesh_create(t->ctx->world, &shape, &t->mesh));
    t->has_mesh = 1;
    USP_CHECK(usp_param_table_make(&g->model, &t->table));
    usp_param_store_config pc = {.backend = be, .stream = t->ctx->stream, .table = &t->table,
                                 .n_layer = (int)g->model.n_layer, .world = t->ctx->world,
                                 .grad_group = t->ctx->world, .optimizer = 1, .storage = USP_F32};
    USP_CHECK(usp_param_store_create(&pc, &t->store));
    usp_model_setup ms = {.config = &g->model, .backend = be, .stream = t->ctx->stream, .mesh = &t->mesh,
                          .batch = 1, .seq_len = g->seq_len, .store = t->store};
    USP_CHECK(usp_model_create(&ms, &t->model));
    USP_CHECK(usp_shard_alloc(&t->shard, g->seq_len, 0));
    USP_CHECK(usp_malloc((void **)&t->seq, (size_t)(g->seq_len + 1) * sizeof *t->seq, "the sequence"));
    USP_CHECK(usp_malloc((void **)&t->logits, (size_t)g->model.vocab * sizeof *t->logits, "a row of logits"));
    int64_t step;
    int has_optimizer;
    return usp_checkpoint_load_store(g->checkpoint, &g->model, &t->table, t->store, t->ctx, &step, &has_optimizer,
                                     NULL);
}

static void teardown(generator *t)
{
    free(t->logits);
    free(t->seq);
    usp_shard_free(&t->shard);
    usp_model_destroy(t->model);
    usp_param_store_destroy(t->store);
    usp_param_table_free(&t->table);
    if (t->has_mesh)
        usp_mesh_destroy(&t->mesh);
}

/* The forward's input for the first `len` tokens of t->seq: padding (token 0, target -1) from len to N. */
static void fill_shard(generator *t, int64_t len)
{
    for (int64_t i = 0; i < t->shard.count; i++) {
        t->shard.positions[i] = (int32_t)i;
        t->shard.tokens[i] = i < len ? t->seq[i] : 0;
        t->shard.targets[i] = i + 1 < len ? t->seq[i + 1] : -1;
    }
}

static usp_status generate(generator *t)
{
    const usp_generate_config *g = t->g;
    USP_CHECK(setup(t));
    memcpy(t->seq, g->prompt, (size_t)g->n_prompt * sizeof *t->seq);
    uint64_t rng = g->seed;
    for (int64_t k = 0; k < g->n_new; k++) {
        int64_t len = g->n_prompt + k, last = len - 1;
        fill_shard(t, len);
        USP_CHECK(usp_model_forward(t->model, &t->shard));
        USP_CHECK(usp_model_logits(t->model, &last, 1, t->logits));
        t->seq[len] = g->out[k] = usp_generate_pick(t->logits, g->model.vocab, g->temperature, &rng);
    }
    return USP_OK;
}

usp_status usp_generate_rank(const usp_rank_ctx *ctx, void *arg)
{
    generator t = {.ctx = ctx, .g = arg};
    usp_status s = generate(&t);
    teardown(&t);
    return s;
}
