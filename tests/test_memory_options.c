/* The memory options (core/model/model.h, core/model/param_store.h): each trains as the
 * plain step does, each lowers the peak by what its closed form says, and the
 * meta backend (the planner) counts the same bytes as the numeric run.
 *
 * Tolerances: recomputing a layer, or its norms and MLP activation (the
 * selective recompute), runs the same ops on the same input, so it is bit for
 * bit the plain step. Tiles and ZeRO's reduce-scatter sum the same
 * numbers in another order (weight gradients over tiles; gradients over the
 * world in one reduction instead of sp then dp; micro-batches sum the batch's
 * gradients in parts), so after three AdamW steps the
 * weights may differ by rounding: within 1e-5 of each tensor's largest value
 * (with eps raised so that AdamW does not amplify rounding noise: config_for). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/meta/meta_backend.h"
#include "core/trace/comm_kind.h"
#include "core/ops/dtype.h"
#include "core/model/model_params.h"
#include "core/trace/trace.h"
#include "core/train/train.h"
#include "tests/harness.h"
#include "tests/check_main.h"

static usp_model_config small_model(usp_model_family family)
{
    usp_model_config c;
    ck_assert_int_eq(usp_model_config_preset(family == USP_FAMILY_GPT2 ? "gpt2-124m" : "tiny", &c), USP_OK);
    c.vocab = 128, c.n_layer = 3, c.d_model = 32, c.n_head = 4, c.max_seq = 64;
    c.n_kv_head = family == USP_FAMILY_GPT2 ? 4 : 2;
    c.d_ff = family == USP_FAMILY_GPT2 ? 128 : 48;
    snprintf(c.name, sizeof c.name, "test-%s", family == USP_FAMILY_GPT2 ? "gpt2" : "llama");
    return c;
}

typedef struct options {
    const char *name;
    int zero, recompute, selective, tiled_mlp, tiled_loss, micro;
    usp_dtype storage;
} options;

static usp_train_config config_for(usp_model_family family, int world, int ulysses, int ring, const options *o)
{
    usp_train_config c;
    usp_train_defaults(&c);
    c.model = small_model(family);
    ck_assert_int_eq(usp_mesh_shape_make(world, ulysses, ring, &c.shape), USP_OK);
    c.data = "passkey", c.seq_len = 64, c.batch = 2, c.steps = 10, c.until = 3, c.warmup = 2;
    /* AdamW moves an element by about lr x g / (|g| + eps): with the default eps (1e-8), an element whose
     * gradient is rounding noise (the key bias's is 0 in exact arithmetic: softmax ignores a constant
     * added to a row of scores) moves by whatever the noise is, and another summation order makes
     * other noise. eps 1e-4 keeps such elements still and real gradients (1e-3 and up) moving. */
    c.eps = 1e-4;
    c.eval_samples = 2; /* the evaluation's argmax: a collective with ZeRO 3 and the tiled loss */
    c.zero_stage = o->zero, c.recompute_layers = o->recompute, c.tiled_mlp = o->tiled_mlp;
    c.selective_recompute = o->selective, c.micro_batches = o->micro;
    c.tiled_loss = o->tiled_loss, c.tile_rows = 7, c.storage = o->storage; /* 7 divides no row count here */
    return c;
}

/* Trains c for its steps; the last loss and the final weights. */
static void train(const usp_train_config *config, double *loss, float *weights)
{
    usp_train_config c = *config;
    harness_tensors tensors = {.last_weights = weights};
    c.on_record = harness_record_tensors, c.record_ctx = &tensors, c.record_tensors = 1;
    usp_train_result result;
    char report[4096];
    ck_assert_msg(harness_train(&c, &result, report, sizeof report) == USP_OK, "%s", report);
    *loss = result.loss;
}

static const options variants[] = {
    {.name = "recompute", .recompute = 1},  {.name = "tiled mlp", .tiled_mlp = 1}, {.name = "tiled loss", .tiled_loss = 1},
    {.name = "selective", .selective = 1},  {.name = "selective tiled", .selective = 1, .tiled_mlp = 1},
    {.name = "micro 2", .micro = 2},        {.name = "micro 2 zero 2", .micro = 2, .zero = 2},
    {.name = "micro 2 zero 3", .micro = 2, .zero = 3},
    {.name = "zero 1", .zero = 1},          {.name = "zero 2", .zero = 2},         {.name = "zero 3", .zero = 3},
    {.name = "all", .zero = 3, .recompute = 1, .tiled_mlp = 1, .tiled_loss = 1},
};
#define N_VARIANTS (int)(sizeof variants / sizeof *variants)

START_TEST(every_option_trains_like_the_plain_step)
{
    /* Llama on the hybrid (ZeRO over 2 Ulysses x 2 ring ranks); GPT-2 (tied embeddings) on DP 2 x U 2 */
    const usp_model_family family = _i == 0 ? USP_FAMILY_LLAMA : USP_FAMILY_GPT2;
    const int ulysses = 2, ring = _i == 0 ? 2 : 1;
    const options plain = {.name = "plain"};
    usp_train_config base = config_for(family, 4, ulysses, ring, &plain);
    usp_param_table table;
    ck_assert_int_eq(usp_param_table_make(&base.model, &table), USP_OK);
    float *ref = calloc((size_t)table.total, sizeof *ref), *got = calloc((size_t)table.total, sizeof *got);
    double ref_loss, loss;
    train(&base, &ref_loss, ref);
    for (int v = 0; v < N_VARIANTS; v++) {
        usp_train_config c = config_for(family, 4, ulysses, ring, &variants[v]);
        if (variants[v].micro > 1 && c.batch / c.shape.dp % variants[v].micro != 0)
            continue; /* GPT-2 here: one sequence a replica, nothing to split */
        memset(got, 0, (size_t)table.total * sizeof *got);
        train(&c, &loss, got);
        int which;
        double err = harness_worst_tensor_error(&table, got, ref, &which);
        const usp_param_tensor *wt = &table.tensors[which];
        printf("%s %-10s loss %.9g (plain %.9g), weights off by %.3g of a tensor's largest\n", base.model.name,
               variants[v].name, loss, ref_loss, err);
        if (!strcmp(variants[v].name, "recompute") || !strcmp(variants[v].name, "selective")) {
            ck_assert_msg(loss == ref_loss && err == 0, "%s %s: loss %.9g vs %.9g, tensor %d off by %.3g",
                          base.model.name, variants[v].name, loss, ref_loss, which, err);
            continue;
        }
        ck_assert_msg(fabs(loss - ref_loss) <= 1e-5 * fabs(ref_loss), "%s %s: loss %.9g vs %.9g", base.model.name,
                      variants[v].name, loss, ref_loss);
        ck_assert_msg(err <= 1e-5, "%s %s: weights of tensor %d (kind %d, layer %d) off by %.3g of its largest",
                      base.model.name, variants[v].name, which, wt->kind, wt->layer, err);
    }
    free(ref), free(got);
    usp_param_table_free(&table);
}
END_TEST

/* One step on the simulator with `factory` (NULL: cpu); the world is kept for inspection. */
static sim_world *run_step(const usp_train_config *config, sim_backend_factory factory)
{
    usp_train_config c = *config;
    c.until = 1;
    sim_world *w;
    ck_assert_msg(harness_train_world(&c, factory, &w) == USP_OK, "%s", usp_error_message());
    return w;
}

/* Bytes of `category` at rank 0's peak (0 when absent). */
static size_t at_peak(const sim_world *w, const char *category)
{
    const char *names[16];
    size_t bytes[16];
    int n = usp_backend_peak_breakdown(sim_world_backend(w, 0), names, bytes, 16);
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], category))
            return bytes[i];
    return 0;
}

/* One step of each of the n option sets on the hybrid: every rank's peak on meta is the numeric run's. */
static void expect_meta_peaks_numeric(const options *o, int n)
{
    for (int v = 0; v < n; v++) {
        usp_train_config c = config_for(USP_FAMILY_LLAMA, 4, 2, 2, &o[v]);
        sim_world *wn = run_step(&c, NULL), *wm = run_step(&c, usp_backend_meta_create);
        for (int r = 0; r < 4; r++)
            ck_assert_msg(sim_world_peak_bytes(wn, r) == sim_world_peak_bytes(wm, r), "%s rank %d: %zu vs %zu",
                          o[v].name, r, sim_world_peak_bytes(wn, r), sim_world_peak_bytes(wm, r));
        sim_world_destroy(wn);
        sim_world_destroy(wm);
    }
}

START_TEST(meta_counts_what_the_numeric_run_allocates) { expect_meta_peaks_numeric(variants, N_VARIANTS); }
END_TEST

/* ceil(len / W) summed over the buckets: embeddings, each layer, final norm + lm_head. */
static int64_t shard_elems(const usp_param_table *t, int n_layer, int W)
{
    int64_t len[64] = {0};
    int seen_layer = 0;
    for (int i = 0; i < t->n; i++) {
        seen_layer |= t->tensors[i].layer >= 0;
        int b = t->tensors[i].layer >= 0 ? t->tensors[i].layer + 1 : seen_layer ? n_layer + 1 : 0;
        len[b] += t->tensors[i].count;
    }
    int64_t sum = 0;
    for (int b = 0; b < n_layer + 2; b++)
        sum += (len[b] + W - 1) / W;
    return sum;
}

START_TEST(each_option_saves_what_its_closed_form_says)
{
    const options plain = {.name = "plain"}, zero1 = {.name = "zero 1", .zero = 1}, loss = {.name = "tiled loss", .tiled_loss = 1};
    const options bf16 = {.name = "bf16", .storage = USP_BF16}, recompute = {.name = "recompute", .recompute = 1};
    usp_train_config c = config_for(USP_FAMILY_LLAMA, 4, 4, 1, &plain);
    usp_param_table t;
    ck_assert_int_eq(usp_param_table_make(&c.model, &t), USP_OK);
    const size_t P = (size_t)t.total, V = (size_t)c.model.vocab, n = (size_t)(c.batch * c.seq_len / 4);
    sim_world *w0 = run_step(&c, usp_backend_meta_create);
    const size_t peak0 = sim_world_peak_bytes(w0, 0);
    ck_assert_uint_eq(at_peak(w0, "weights"), 4 * P);
    ck_assert_uint_eq(at_peak(w0, "optimizer"), 8 * P);

    /* ZeRO 1: Adam's two moments, 4 bytes each, for this rank's shard of every bucket */
    c = config_for(USP_FAMILY_LLAMA, 4, 4, 1, &zero1);
    sim_world *w = run_step(&c, usp_backend_meta_create);
    ck_assert_uint_eq(at_peak(w, "optimizer"), 8 * (size_t)shard_elems(&t, (int)c.model.n_layer, 4));
    ck_assert_uint_lt(sim_world_peak_bytes(w, 0), peak0);
    sim_world_destroy(w);

    /* bf16 mixed precision: 2-byte weights, fp32 master + m + v (12 bytes); parameter gradients stay fp32 */
    c = config_for(USP_FAMILY_LLAMA, 4, 4, 1, &bf16);
    w = run_step(&c, usp_backend_meta_create);
    ck_assert_uint_eq(at_peak(w, "weights"), 2 * P);
    ck_assert_uint_eq(at_peak(w, "optimizer"), 12 * P);
    ck_assert_uint_lt(at_peak(w, "activations"), at_peak(w0, "activations"));
    sim_world_destroy(w);

    /* tiled loss: the logits buffer is 7 rows of V instead of n rows */
    c = config_for(USP_FAMILY_LLAMA, 4, 4, 1, &loss);
    w = run_step(&c, usp_backend_meta_create);
    ck_assert_uint_eq(at_peak(w0, "activations") - at_peak(w, "activations"), 4 * (n - 7) * V);
    sim_world_destroy(w);

    /* recomputation keeps one layer's set instead of L: the peak drops by at least (L - 1) layers' q */
    c = config_for(USP_FAMILY_LLAMA, 4, 4, 1, &recompute);
    w = run_step(&c, usp_backend_meta_create);
    const size_t q_bytes = 4 * n * (size_t)c.model.d_model;
    ck_assert_uint_ge(at_peak(w0, "activations") - at_peak(w, "activations"), (size_t)(c.model.n_layer - 1) * q_bytes);
    sim_world_destroy(w);

    /* two micro-batches of one sequence hold the activations of a step of one sequence, not of two */
    const options micro = {.name = "micro 2", .micro = 2};
    c = config_for(USP_FAMILY_LLAMA, 4, 4, 1, &micro);
    w = run_step(&c, usp_backend_meta_create);
    c = config_for(USP_FAMILY_LLAMA, 4, 4, 1, &plain);
    c.batch = 1;
    sim_world *one = run_step(&c, usp_backend_meta_create);
    ck_assert_uint_eq(at_peak(w, "activations"), at_peak(one, "activations"));
    ck_assert_uint_lt(at_peak(w, "activations"), at_peak(w0, "activations"));
    sim_world_destroy(one);
    sim_world_destroy(w);
    /* and a count that does not divide a replica's sequences is refused, naming both */
    c = config_for(USP_FAMILY_LLAMA, 4, 4, 1, &plain);
    c.micro_batches = 3;
    int64_t padded;
    ck_assert_int_eq(usp_train_check(&c, &padded), USP_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(usp_error_message(), "--micro-batches 3 does not divide the 2 sequences"));
    sim_world_destroy(w0);
    usp_param_table_free(&t);
}
END_TEST

/* Bytes one layer adds to the "activations" category of a rank (fp32, Llama: SwiGLU, rmsnorm, no bias;
 * no memory options), n = B T tokens a rank, D the head width (C / H unless head_dim is set), on U x R:
 * - the model: its input in the residual stream, ln1, mid, ln2 [n, C]; the attention output att
 *   [n, H D]; the two norms' mean and rstd [n] x 4; the SwiGLU hidden [n, 2F] and its activation [n, F];
 * - q, k, v [n, (H + 2 Hkv) D] only where the backward reads them: at U = 1 (pure Ring), which hands
 *   them straight to ring attention. At U > 1 Ulysses keeps its own copies, gathered by head, and the
 *   model's are one scratch set for all layers (before issue 14 they were kept for every layer);
 * - Ulysses (U > 1): this rank's nq = H / U query heads and nkv KV heads (Hkv / U, or the one
 *   shared head when U > Hkv) of q, k, v, o over the group's U T tokens; the fp32 lse [B, nq, U T] at
 *   every U (at U = 1 nothing else: before issue 14, copies of q, k, v, o too). */
static size_t layer_activation_bytes(const usp_train_config *c)
{
    const usp_model_config *m = &c->model;
    const int64_t U = c->shape.ulysses, R = c->shape.ring, DP = c->shape.world / (U * R);
    const int64_t B = c->batch / DP, T = c->seq_len / (U * R), n = B * T, NU = U * T;
    const int64_t C = m->d_model, H = m->n_head, Hkv = m->n_kv_head, D = usp_model_config_head_dim(m), F = m->d_ff;
    const int64_t nq = H / U, nkv = Hkv >= U ? Hkv / U : 1;
    int64_t elems = n * (4 * C + H * D + 4 + 2 * F + F) + B * nq * NU;
    elems += U == 1 ? n * (H + 2 * Hkv) * D : B * NU * (2 * nq + 2 * nkv) * D;
    return 4 * (size_t)elems;
}

START_TEST(activations_per_layer_match_the_closed_form)
{
    /* Ulysses, the hybrid, pure Ring; each at 2 and 3 layers: the difference is one layer's bytes;
     * o = 2: plain, with heads of 12 on d_model 32 (attention width 48), as Qwen3's wider attention;
     * o = 3: the selective recompute */
    const int splits[][2] = {{4, 1}, {2, 2}, {1, 4}};
    const options plain = {.name = "plain"}, recompute = {.name = "recompute", .recompute = 1};
    const options selective = {.name = "selective", .selective = 1};
    for (int i = 0; i < 3; i++)
        for (int o = 0; o < 4; o++) {
            size_t act[2], peak[2];
            usp_train_config c;
            for (int L = 2; L <= 3; L++) {
                c = config_for(USP_FAMILY_LLAMA, 4, splits[i][0], splits[i][1],
                               o == 1 ? &recompute : o == 3 ? &selective : &plain);
                c.model.n_layer = L;
                c.model.head_dim = o == 2 ? 12 : 0;
                sim_world *wn = run_step(&c, NULL), *wm = run_step(&c, usp_backend_meta_create);
                act[L - 2] = at_peak(wm, "activations"), peak[L - 2] = sim_world_peak_bytes(wm, 0);
                /* the planner counts what the numeric run allocates, category by category */
                for (int r = 0; r < 4; r++)
                    ck_assert_msg(sim_world_peak_bytes(wn, r) == sim_world_peak_bytes(wm, r),
                                  "U %d x R %d rank %d: numeric %zu vs meta %zu", splits[i][0], splits[i][1], r,
                                  sim_world_peak_bytes(wn, r), sim_world_peak_bytes(wm, r));
                ck_assert_uint_eq(at_peak(wn, "activations"), act[L - 2]);
                sim_world_destroy(wn);
                sim_world_destroy(wm);
            }
            /* recomputation keeps one layer's set whatever L: a layer adds only its input, [n, C]; the
             * selective recompute keeps one set of ln1, ln2 [n, C], their statistics [n] x 4 and act [n, F] */
            const int64_t n = c.batch * c.seq_len / 4, C = c.model.d_model, F = c.model.d_ff;
            const size_t want = o == 1   ? 4 * (size_t)(n * C)
                                : o == 3 ? layer_activation_bytes(&c) - 4 * (size_t)(n * (2 * C + 4 + F))
                                         : layer_activation_bytes(&c);
            const char *what = o == 1 ? " --recompute" : o == 2 ? " head_dim 12" : o == 3 ? " --selective-recompute" : "";
            printf("U %d x R %d%s: activations per layer %zu bytes (closed form %zu), peak %zu -> %zu\n",
                   splits[i][0], splits[i][1], what, act[1] - act[0], want, peak[0], peak[1]);
            ck_assert_msg(act[1] - act[0] == want, "U %d x R %d%s: a layer adds %zu activation bytes, closed form %zu",
                          splits[i][0], splits[i][1], what, act[1] - act[0], want);
        }
}
END_TEST

/* What the backward reads survives the scratch q, k, v (U 4: one set for all layers, overwritten by
 * every layer's forward) and the tensors handed straight to ring attention (R 4: read again in
 * backward), with and without recomputation: three steps bit for bit the same either way. */
START_TEST(recompute_is_bitwise_the_plain_step_on_ulysses_and_pure_ring)
{
    const options plain = {.name = "plain"}, recomputes[] = {{.name = "recompute", .recompute = 1},
                                                             {.name = "selective", .selective = 1}};
    const int splits[][2] = {{4, 1}, {1, 4}};
    usp_train_config c = config_for(USP_FAMILY_LLAMA, 4, 4, 1, &plain);
    usp_param_table table;
    ck_assert_int_eq(usp_param_table_make(&c.model, &table), USP_OK);
    float *ref = calloc((size_t)table.total, sizeof *ref), *got = calloc((size_t)table.total, sizeof *got);
    for (int i = 0; i < 2; i++) {
        double ref_loss, loss;
        int which;
        c = config_for(USP_FAMILY_LLAMA, 4, splits[i][0], splits[i][1], &plain);
        train(&c, &ref_loss, ref);
        for (int k = 0; k < 2; k++) {
            c = config_for(USP_FAMILY_LLAMA, 4, splits[i][0], splits[i][1], &recomputes[k]);
            train(&c, &loss, got);
            double err = harness_worst_tensor_error(&table, got, ref, &which);
            ck_assert_msg(loss == ref_loss && err == 0, "U %d x R %d %s: loss %.9g vs %.9g, tensor %d off by %.3g",
                          splits[i][0], splits[i][1], recomputes[k].name, loss, ref_loss, which, err);
        }
    }
    free(ref), free(got);
    usp_param_table_free(&table);
}
END_TEST

/* A step on the simulator with the trace on: its all-to-all calls and the bytes its copies move on rank 0. */
static void traced_step(const usp_train_config *config, size_t *all_to_alls, double *copy_bytes)
{
    usp_train_config c = *config;
    c.until = 1, c.eval_samples = 0;
    sim_config sc = sim_config_default(c.shape.world);
    sc.make_backend = harness_backend_factory(), sc.stack_bytes = (size_t)1 << 20;
    sim_world *w;
    ck_assert_int_eq(sim_world_create(&sc, &w), USP_OK);
    usp_train_result result = {.passkey_accuracy = -1};
    usp_train_run run = {.config = &c, .result = &result};
    ck_assert_msg(sim_world_run(w, usp_train_rank, &run) == USP_OK, "%s", sim_world_report(w));
    const usp_trace_t *t = sim_world_trace(w);
    *all_to_alls = 0, *copy_bytes = 0;
    for (size_t e = 0; e < usp_trace_count(t); e++) {
        const usp_trace_event *ev = usp_trace_at(t, e);
        *all_to_alls += ev->rank == 0 && (ev->kind == USP_OP_ALL_TO_ALL || ev->kind == USP_OP_ALL_TO_ALL_V);
    }
    for (size_t e = 0; e < usp_trace_compute_count(t); e++) {
        const usp_trace_event *ev = usp_trace_compute_at(t, e);
        if (ev->rank == 0 && !strcmp(ev->name, "copy"))
            *copy_bytes += ev->mem_bytes;
    }
    sim_world_destroy(w);
}

START_TEST(pure_ring_hands_the_tensors_straight_to_ring_attention)
{
    const options plain = {.name = "plain"};
    size_t a2a;
    double copies;
    /* U 2 x R 2: per layer, forward's q, k, v, o and backward's dO, dq, dk, dv each cross one all-to-all */
    usp_train_config c = config_for(USP_FAMILY_LLAMA, 4, 2, 2, &plain);
    traced_step(&c, &a2a, &copies);
    ck_assert_uint_eq(a2a, 8 * (size_t)c.model.n_layer);
    /* U 1 x R 4: none, and the only device copies left are ring attention's own: per layer, K and V into
     * the travelling buffer (forward and backward), dK and dV out of it, the lse to and from per-run slabs
     * (a copy counts its bytes read and written). The one-rank layout copies of q, k, v, o (forward) and
     * of dO, dq, dk, dv (backward), two copies each, would add 2 x 2 x 2 x 4 n (2 H + 2 Hkv) D bytes a layer. */
    c = config_for(USP_FAMILY_LLAMA, 4, 1, 4, &plain);
    traced_step(&c, &a2a, &copies);
    const double B = (double)c.batch, T = (double)c.seq_len / 4, n = B * T, H = (double)c.model.n_head;
    const double Hkv = (double)c.model.n_kv_head, D = (double)usp_model_config_head_dim(&c.model);
    const double blk = 4 * B * T * Hkv * D, lse = 4 * B * H * T, L = (double)c.model.n_layer;
    const double ring_own = L * (2 * 6 * blk + 2 * 2 * lse), layout = L * 2 * 4 * 4 * n * (2 * H + 2 * Hkv) * D;
    printf("pure ring: %zu all-to-alls, copies move %.0f bytes on rank 0 (ring's own %.0f; the layout copies "
           "would add %.0f)\n", a2a, copies, ring_own, layout);
    ck_assert_uint_eq(a2a, 0);
    ck_assert_msg(copies == ring_own, "pure ring copies %.0f bytes, ring attention's own are %.0f", copies, ring_own);
}
END_TEST

/* bf16 on the cpu backend allocates what the meta backend plans: the widening scratch of the cpu kernels
 * is a GPU's registers, not a buffer, and counts nowhere. */
START_TEST(bf16_numeric_run_allocates_what_meta_plans)
{
    const options bf16[] = {
        {.name = "bf16", .storage = USP_BF16},
        {.name = "bf16 zero 3 recompute tiled", .storage = USP_BF16, .zero = 3, .recompute = 1, .tiled_mlp = 1,
         .tiled_loss = 1},
        {.name = "bf16 zero 1 micro 2", .storage = USP_BF16, .zero = 1, .micro = 2},
    };
    expect_meta_peaks_numeric(bf16, (int)(sizeof bf16 / sizeof *bf16));
}
END_TEST

START_TEST(bf16_rounds_to_nearest_even)
{
    /* 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even 1; just above goes up */
    ck_assert_float_eq(usp_bf16_to_f32(usp_f32_to_bf16(1.0f + 0x1p-8f)), 1.0f);
    ck_assert_float_eq(usp_bf16_to_f32(usp_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);
    ck_assert_float_eq(usp_bf16_to_f32(usp_f32_to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f); /* odd: up */
    ck_assert_float_eq(usp_bf16_to_f32(usp_f32_to_bf16(-2.5f)), -2.5f);
    ck_assert(isnan(usp_bf16_to_f32(usp_f32_to_bf16(NAN))));
    ck_assert(isinf(usp_bf16_to_f32(usp_f32_to_bf16(INFINITY))));
}
END_TEST

/* An all_reduce in bf16 sums in rank order, rounding after every addition. */
static usp_status bf16_sum_rank(const usp_rank_ctx *ctx, void *arg)
{
    (void)arg;
    uint16_t mine[2] = {usp_f32_to_bf16(ctx->rank == 0 ? 1.0f : 0x1p-8f), usp_f32_to_bf16((float)(ctx->rank + 1))};
    void *buf;
    USP_CHECK(harness_upload(ctx, mine, sizeof mine, &buf));
    USP_CHECK(usp_comm_all_reduce(ctx->world, buf, buf, 2, USP_BF16, USP_REDUCE_SUM, ctx->stream));
    uint16_t got[2];
    USP_CHECK(harness_download(ctx, got, buf, sizeof got));
    usp_buffer_free(ctx->backend, buf);
    /* ((1 + 2^-8) -> 1) + 2^-8 -> 1, twice more: 1, where an f32 sum would give 1 + 3 x 2^-8 */
    USP_CHECK(harness_expect_eq(ctx, "bf16 sum of 1 and three 2^-8", 0, usp_bf16_to_f32(got[0]), 1.0));
    return harness_expect_eq(ctx, "bf16 sum of 1..4", 1, usp_bf16_to_f32(got[1]), 10.0);
}

START_TEST(bf16_all_reduce_rounds_each_step)
{
    char report[2048];
    ck_assert_msg(harness_run(4, bf16_sum_rank, NULL, NULL, 0, report, sizeof report) == USP_OK, "%s", report);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("memory_options");
    TCase *tc = tcase_create("memory_options");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, every_option_trains_like_the_plain_step, 0, 2);
    tcase_add_test(tc, meta_counts_what_the_numeric_run_allocates);
    tcase_add_test(tc, each_option_saves_what_its_closed_form_says);
    tcase_add_test(tc, activations_per_layer_match_the_closed_form);
    tcase_add_test(tc, pure_ring_hands_the_tensors_straight_to_ring_attention);
    tcase_add_test(tc, recompute_is_bitwise_the_plain_step_on_ulysses_and_pure_ring);
    tcase_add_test(tc, bf16_numeric_run_allocates_what_meta_plans);
    tcase_add_test(tc, bf16_rounds_to_nearest_even);
    tcase_add_test(tc, bf16_all_reduce_rounds_each_step);
    suite_add_tcase(s, tc);
    return check_main_run(s);
}
