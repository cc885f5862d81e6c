/* Training end to end on the simulator: gradients against finite differences,
 * the same loss and gradients whatever the mesh (the silent SP bugs: shifted
 * labels, local positions, per-rank loss means, missing reductions), padding,
 * and bit-exact resume (also from ZeRO 3's sharded state), and resume at another
 * ZeRO stage or world; the mesh equality also on a model whose attention width
 * (heads x head_dim) differs from d_model; periodic evaluations that leave the
 * training bit for bit as it was. Packed documents and sliding windows: the mesh equality again, the
 * documents cut across ranks (core/data/data.h, core/ops/mask.h). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/model/model_params.h"
#include "core/train/train.h"
#include "tests/harness.h"
#include "tests/check_main.h"

static usp_model_config tiny_config(usp_model_family family)
{
    usp_model_config c;
    ck_assert_int_eq(usp_model_config_preset(family == USP_FAMILY_GPT2 ? "gpt2-124m" : "tiny", &c), USP_OK);
    c.vocab = 128, c.n_layer = 2, c.d_model = 32, c.n_head = 4, c.max_seq = 64;
    c.n_kv_head = family == USP_FAMILY_GPT2 ? 4 : 2;
    c.d_ff = family == USP_FAMILY_GPT2 ? 128 : 48;
    snprintf(c.name, sizeof c.name, "test-%s", family == USP_FAMILY_GPT2 ? "gpt2" : "llama");
    return c;
}

/* Llama whose attention is wider than the model, as Qwen3's: d_model 24, 4 heads of 8 (2 KV heads),
 * so q is [24 -> 32], k and v [24 -> 16], o [32 -> 24]. */
static usp_model_config head_dim_config(void)
{
    usp_model_config c = tiny_config(USP_FAMILY_LLAMA);
    c.d_model = 24, c.head_dim = 8;
    snprintf(c.name, sizeof c.name, "test-llama-head_dim-8");
    ck_assert_int_eq(usp_model_config_attention_width(&c), 32);
    return c;
}

typedef struct run_spec {
    int world, ulysses, ring, pad, local, zero;
    int64_t seq, batch, steps, until;
    const char *save, *resume;
    const char *data;      /* NULL: passkey */
    int documents;         /* 1: --eot PACKED_EOT */
    int64_t window;        /* --window (0: none) */
    int recompute;         /* --recompute */
} run_spec;

#define PACKED_EOT 127

/* The training config of run r of `model`. */
static usp_train_config config_of(const usp_model_config *model, const run_spec *r)
{
    usp_train_config c;
    usp_train_defaults(&c);
    c.model = *model;
    ck_assert_int_eq(usp_mesh_shape_make(r->world, r->ulysses, r->ring, &c.shape), USP_OK);
    c.data = r->data ? r->data : "passkey", c.eot = r->documents ? PACKED_EOT : -1, c.window = r->window;
    c.seq_len = r->seq, c.pad = r->pad, c.batch = r->batch, c.steps = r->steps;
    c.until = r->until, c.attention = r->local ? "local" : NULL, c.save_dir = r->save, c.resume_dir = r->resume;
    c.log_every = 1000, c.warmup = 2, c.zero_stage = r->zero, c.recompute_layers = r->recompute;
    return c;
}

/* Runs a training on the simulator; returns the status, the first loss and (optionally) the first gradients. */
static usp_status train(const usp_model_config *model, const run_spec *r, double *first_loss, float *grads,
                        usp_train_result *result_out)
{
    usp_train_config c = config_of(model, r);
    harness_tensors tensors = {.first_grads = grads};
    c.on_record = harness_record_tensors, c.record_ctx = &tensors, c.record_tensors = grads != NULL;
    usp_train_result result;
    char report[4096];
    usp_status s = harness_train(&c, &result, report, sizeof report);
    ck_assert_msg(s == USP_OK, "W=%d U=%d R=%d: %s", r->world, r->ulysses, r->ring, report);
    if (first_loss)
        *first_loss = result.first_loss;
    if (result_out)
        *result_out = result;
    return s;
}

START_TEST(every_mesh_gives_the_single_rank_loss_and_gradients)
{
    const usp_model_family families[] = {USP_FAMILY_LLAMA, USP_FAMILY_GPT2};
    for (int f = 0; f < 3; f++) {
        usp_model_config model = f < 2 ? tiny_config(families[f]) : head_dim_config();
        usp_param_table table;
        ck_assert_int_eq(usp_param_table_make(&model, &table), USP_OK);
        float *ref = calloc((size_t)table.total, sizeof *ref), *got = calloc((size_t)table.total, sizeof *got);
        double ref_loss, loss;
        run_spec one = {.world = 1, .ulysses = 1, .ring = 1, .seq = 64, .batch = 2, .steps = 10, .until = 1};
        train(&model, &one, &ref_loss, ref, NULL);
        const run_spec meshes[] = {
            {.world = 4, .ulysses = 4, .ring = 1}, {.world = 4, .ulysses = 1, .ring = 4},
            {.world = 4, .ulysses = 2, .ring = 2}, {.world = 4, .ulysses = 2, .ring = 1}, /* DP 2 x U 2 */
        };
        for (size_t m = 0; m < sizeof meshes / sizeof *meshes; m++) {
            run_spec r = meshes[m];
            r.seq = 64, r.batch = 2, r.steps = 10, r.until = 1;
            train(&model, &r, &loss, got, NULL);
            int worst = 0;
            double err = harness_worst_tensor_error(&table, got, ref, &worst);
            ck_assert_msg(fabs(loss - ref_loss) <= 1e-5 * fabs(ref_loss), "%s U=%d R=%d DP=%d: loss %.9f vs %.9f",
                          model.name, r.ulysses, r.ring, r.world / (r.ulysses * r.ring), loss, ref_loss);
            ck_assert_msg(err <= 1e-5, "%s U=%d R=%d: gradient of tensor %d (kind %d, layer %d) off by %.3g relative",
                          model.name, r.ulysses, r.ring, worst, table.tensors[worst].kind, table.tensors[worst].layer, err);
        }
        free(ref), free(got);
        usp_param_table_free(&table);
    }
}
END_TEST

/* A file of tokens below PACKED_EOT, cut into documents by it: lengths 1, 3, 37 and others, so that
 * documents straddle the ranks of every mesh of a 64-token sequence. */
static void write_packed_tokens(const char *path)
{
    static const int lengths[] = {1, 3, 37, 5, 11, 1, 20, 2, 9, 30, 3, 17};
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    uint32_t seed = 7;
    for (int t = 0, d = 0; t < 2000; d++)
        for (int i = 0; i < lengths[d % 12] && t < 2000; i++, t++) {
            seed = seed * 1664525u + 1013904223u;
            const uint16_t token = i + 1 == lengths[d % 12] ? PACKED_EOT : (uint16_t)(seed >> 16) % PACKED_EOT;
            ck_assert_int_eq(fwrite(&token, sizeof token, 1, f), 1);
        }
    fclose(f);
}

START_TEST(packed_documents_and_windows_give_the_single_rank_result)
{
    char path[] = "/tmp/usp_packed_XXXXXX";
    const int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    write_packed_tokens(path);
    char data[64];
    snprintf(data, sizeof data, "tokens:%s", path);
    usp_model_config model = tiny_config(USP_FAMILY_LLAMA);
    usp_param_table table;
    ck_assert_int_eq(usp_param_table_make(&model, &table), USP_OK);
    float *ref = calloc((size_t)table.total, sizeof *ref), *got = calloc((size_t)table.total, sizeof *got);
    const struct { int documents; int64_t window; } masks[] = {{1, 0}, {0, 5}, {1, 9}};
    run_spec one = {.world = 1, .ulysses = 1, .ring = 1, .seq = 64, .batch = 2, .steps = 10, .until = 1, .data = data};
    double causal_loss;
    float *causal = calloc((size_t)table.total, sizeof *causal);
    train(&model, &one, &causal_loss, causal, NULL);
    for (size_t k = 0; k < sizeof masks / sizeof *masks; k++) {
        double ref_loss, loss;
        one.documents = masks[k].documents, one.window = masks[k].window;
        train(&model, &one, &ref_loss, ref, NULL);
        int worst = 0; /* the mask reaches the attention: the gradients move by far more than the tolerance */
        const double moved = harness_worst_tensor_error(&table, ref, causal, &worst);
        ck_assert_msg(moved > 1e-3, "documents %d window %lld: the gradients are the causal ones' (%.3g)",
                      masks[k].documents, (long long)masks[k].window, moved);
        const run_spec meshes[] = {
            {.world = 4, .ulysses = 4, .ring = 1}, {.world = 4, .ulysses = 1, .ring = 4},
            {.world = 4, .ulysses = 2, .ring = 2}, {.world = 4, .ulysses = 2, .ring = 1, .zero = 3}, /* DP 2 x U 2 */
        };
        for (size_t m = 0; m < sizeof meshes / sizeof *meshes; m++) {
            run_spec r = meshes[m];
            r.seq = 64, r.batch = 2, r.steps = 10, r.until = 1, r.data = data;
            r.documents = masks[k].documents, r.window = masks[k].window;
            train(&model, &r, &loss, got, NULL);
            int worst = 0;
            const double err = harness_worst_tensor_error(&table, got, ref, &worst);
            ck_assert_msg(fabs(loss - ref_loss) <= 1e-6 * fabs(ref_loss),
                          "documents %d window %lld, U=%d R=%d DP=%d: loss %.9f vs %.9f", masks[k].documents,
                          (long long)masks[k].window, r.ulysses, r.ring, r.world / (r.ulysses * r.ring), loss,
                          ref_loss);
            ck_assert_msg(err <= 1e-5, "documents %d window %lld, U=%d R=%d: gradient of tensor %d off by %.3g",
                          masks[k].documents, (long long)masks[k].window, r.ulysses, r.ring, worst, err);
        }
    }
    free(ref), free(got), free(causal);
    usp_param_table_free(&table);
    unlink(path);
}
END_TEST

/* A config whose layer 1 attends to everything and layer 0 has a window of 5 (layer_types, as Gemma's):
 * every mesh, with recomputed layers too (which then share one attention per kind of layer), gives one
 * rank's loss and gradients; and the layer types matter (the gradients move from the all-window model's). */
START_TEST(layers_with_and_without_a_window_give_the_single_rank_result)
{
    usp_model_config model = tiny_config(USP_FAMILY_LLAMA);
    model.sliding_window = 5;
    usp_param_table table;
    ck_assert_int_eq(usp_param_table_make(&model, &table), USP_OK);
    float *all = calloc((size_t)table.total, sizeof *all), *ref = calloc((size_t)table.total, sizeof *ref);
    float *got = calloc((size_t)table.total, sizeof *got);
    run_spec one = {.world = 1, .ulysses = 1, .ring = 1, .seq = 64, .batch = 2, .steps = 10, .until = 1};
    double ref_loss, loss;
    train(&model, &one, &ref_loss, all, NULL);
    model.full_layers[0] = 2; /* layer 1 */
    train(&model, &one, &ref_loss, ref, NULL);
    int worst = 0;
    ck_assert_msg(harness_worst_tensor_error(&table, all, ref, &worst) > 1e-3, "layer_types changed nothing");
    const run_spec meshes[] = {{.world = 4, .ulysses = 4, .ring = 1}, {.world = 4, .ulysses = 1, .ring = 4},
                               {.world = 4, .ulysses = 2, .ring = 2}, {.world = 4, .ulysses = 1, .ring = 4, .recompute = 1},
                               {.world = 4, .ulysses = 2, .ring = 2, .recompute = 1}};
    for (size_t m = 0; m < sizeof meshes / sizeof *meshes; m++) {
        run_spec r = meshes[m];
        r.seq = 64, r.batch = 2, r.steps = 10, r.until = 1;
        train(&model, &r, &loss, got, NULL);
        const double err = harness_worst_tensor_error(&table, got, ref, &worst);
        ck_assert_msg(fabs(loss - ref_loss) <= 1e-6 * fabs(ref_loss) && err <= 1e-5, "U=%d R=%d recompute %d: loss "
                      "%.9f vs %.9f, gradient of tensor %d off by %.3g", r.ulysses, r.ring, r.recompute, loss, ref_loss,
                      worst, err);
    }
    free(all), free(ref), free(got);
    usp_param_table_free(&table);
}
END_TEST

/* Each rank's attention work over a run (usp_train_result.attention_flops) into work[world]. */
static void attention_work(const usp_model_config *model, const run_spec *r, double *work)
{
    usp_train_config c = config_of(model, r);
    usp_train_result result = {.passkey_accuracy = -1, .attention_flops = work};
    usp_train_run run = {.config = &c, .result = &result};
    char report[4096];
    ck_assert_msg(harness_run(r->world, usp_train_rank, &run, NULL, 0, report, sizeof report) == USP_OK, "%s", report);
}

/* The ranks' attention work is their share of the mask's: summed, one rank's (the visible pairs partition,
 * 1e-12 relative), and on Ulysses a quarter each (every rank its heads over the whole sequence). */
START_TEST(each_ranks_attention_work_is_its_share_of_the_mask)
{
    char path[] = "/tmp/usp_packed_XXXXXX", data[64];
    const int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    write_packed_tokens(path);
    snprintf(data, sizeof data, "tokens:%s", path);
    const usp_model_config model = tiny_config(USP_FAMILY_LLAMA);
    const run_spec one = {.world = 1, .ulysses = 1, .ring = 1, .seq = 64, .batch = 2, .steps = 2,
                          .data = data, .documents = 1, .window = 9};
    double whole, work[4];
    attention_work(&model, &one, &whole);
    ck_assert(whole > 0);
    const int meshes[][2] = {{4, 1}, {1, 4}, {2, 2}};
    for (int m = 0; m < 3; m++) {
        run_spec r = one;
        r.world = 4, r.ulysses = meshes[m][0], r.ring = meshes[m][1];
        attention_work(&model, &r, work);
        const double sum = work[0] + work[1] + work[2] + work[3];
        ck_assert_msg(fabs(sum - whole) <= 1e-12 * whole, "U%d R%d: %.17g FLOPs over the ranks, one rank %.17g",
                      r.ulysses, r.ring, sum, whole);
        for (int i = 0; i < 4 && r.ring == 1; i++)
            ck_assert_double_eq_tol(work[i], whole / 4, 1e-12 * whole);
    }
    unlink(path);
}
END_TEST

/* Writes `n` uint16 tokens to a new temporary file; its spec "tokens:PATH" into spec, the path into path. */
static void write_token_file(const uint16_t *tokens, size_t n, char path[32], char spec[64])
{
    snprintf(path, 32, "/tmp/usp_docs_XXXXXX");
    const int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, tokens, n * sizeof *tokens), (ssize_t)(n * sizeof *tokens));
    close(fd);
    snprintf(spec, 64, "tokens:%s", path);
}

/* A packed sequence is its documents run alone: 64 tokens holding documents of 1, 3, 37, 1, 5 and 17
 * tokens (the last ending the sequence) give, on one rank, U4, R4 and U2 x R2, the loss and the step-1
 * gradients of each document trained alone on one rank (its L - 1 targets), weighted by its targets:
 * loss within 1e-6 relative, gradients within 1e-5. A 1-token document has no target. Llama (rotary
 * positions, which only relative positions reach) and GPT-2 (learned positions: each document's restart
 * at 0 matters). */
START_TEST(a_packed_sequence_is_its_documents_run_alone)
{
    const usp_model_family family = _i ? USP_FAMILY_GPT2 : USP_FAMILY_LLAMA;
    static const int lengths[] = {1, 3, 37, 1, 5, 17};
    uint16_t tokens[2 * 64];
    for (int t = 0, d = 0, at = 0; t < 2 * 64; t++, at++) {
        if (at == lengths[d % 6])
            d++, at = 0;
        tokens[t] = at + 1 == lengths[d % 6] ? PACKED_EOT : (uint16_t)((t * 37 + d * 11) % PACKED_EOT);
    }
    const usp_model_config model = tiny_config(family);
    usp_param_table table;
    ck_assert_int_eq(usp_param_table_make(&model, &table), USP_OK);
    double *want = calloc((size_t)table.total, sizeof *want), want_loss = 0, targets = 0;
    float *alone = calloc((size_t)table.total, sizeof *alone), *got = calloc((size_t)table.total, sizeof *got);
    char path[32], spec[64];
    for (int d = 0, first = 0; d < 6; first += lengths[d++]) {
        if (lengths[d] < 3) /* 1 token: no target; seq must be at least 2 */
            continue;
        write_token_file(tokens + first, (size_t)lengths[d], path, spec);
        const run_spec r = {.world = 1, .ulysses = 1, .ring = 1, .seq = lengths[d] - 1, .batch = 1, .steps = 10,
                            .until = 1, .data = spec};
        double loss;
        train(&model, &r, &loss, alone, NULL);
        const double n = lengths[d] - 1;
        want_loss += n * loss, targets += n;
        for (int64_t i = 0; i < table.total; i++)
            want[i] += n * alone[i];
        unlink(path);
    }
    write_token_file(tokens, 2 * 64, path, spec);
    const int meshes[][2] = {{1, 1}, {4, 1}, {1, 4}, {2, 2}};
    for (int m = 0; m < 4; m++) {
        const run_spec r = {.world = meshes[m][0] * meshes[m][1], .ulysses = meshes[m][0], .ring = meshes[m][1],
                            .seq = 64, .batch = 1, .steps = 10, .until = 1, .data = spec, .documents = 1};
        double loss, worst = 0;
        train(&model, &r, &loss, got, NULL);
        ck_assert_msg(fabs(loss - want_loss / targets) <= 1e-6 * want_loss / targets, "U%d R%d: loss %.9f, the "
                      "documents alone %.9f", r.ulysses, r.ring, loss, want_loss / targets);
        for (int64_t i = 0; i < table.total; i++) { /* relative to the tensor-wide scale of the gradients */
            const double e = fabs(got[i] - want[i] / targets);
            worst = e > worst ? e : worst;
        }
        double scale = 0;
        for (int64_t i = 0; i < table.total; i++)
            scale = fabs(want[i] / targets) > scale ? fabs(want[i] / targets) : scale;
        ck_assert_msg(worst <= 1e-5 * scale, "U%d R%d: a gradient off by %.3g of %.3g", r.ulysses, r.ring, worst,
                      scale);
    }
    unlink(path);
    free(want), free(alone), free(got);
    usp_param_table_free(&table);
}
END_TEST

/* A length that does not divide, padded: the loss and gradients of the real tokens only. */
START_TEST(padding_gives_the_unpadded_single_rank_result)
{
    usp_model_config model = tiny_config(USP_FAMILY_LLAMA);
    usp_param_table table;
    ck_assert_int_eq(usp_param_table_make(&model, &table), USP_OK);
    float *ref = calloc((size_t)table.total, sizeof *ref), *got = calloc((size_t)table.total, sizeof *got);
    double ref_loss, loss;
    run_spec one = {.world = 1, .ulysses = 1, .ring = 1, .seq = 125, .batch = 2, .steps = 10, .until = 1};
    train(&model, &one, &ref_loss, ref, NULL);
    const run_spec meshes[] = {{.world = 4, .ulysses = 4, .ring = 1}, {.world = 4, .ulysses = 2, .ring = 2}};
    for (int m = 0; m < 2; m++) {
        run_spec r = meshes[m];
        r.seq = 125, r.batch = 2, r.steps = 10, r.until = 1, r.pad = 1;
        train(&model, &r, &loss, got, NULL);
        int worst = 0;
        double err = harness_worst_tensor_error(&table, got, ref, &worst);
        ck_assert_msg(fabs(loss - ref_loss) <= 1e-5 * fabs(ref_loss), "padded U=%d R=%d: loss %.9f vs %.9f",
                      r.ulysses, r.ring, loss, ref_loss);
        ck_assert_msg(err <= 1e-5, "padded U=%d R=%d: tensor %d off by %.3g", r.ulysses, r.ring, worst, err);
    }
    free(ref), free(got);
    usp_param_table_free(&table);
}
END_TEST

/* _i = 0: whole weights; 1: ZeRO 3, whose save gathers the shards a bucket at a time and whose resume
 * has each rank read only its shards */
START_TEST(twenty_steps_equal_ten_then_resume_then_ten)
{
    usp_model_config model = tiny_config(USP_FAMILY_LLAMA);
    char dir[] = "/tmp/usp_resume_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char straight[256], half[256], resumed[256];
    snprintf(straight, sizeof straight, "%s/straight", dir);
    snprintf(half, sizeof half, "%s/half", dir);
    snprintf(resumed, sizeof resumed, "%s/resumed", dir);
    run_spec a = {.world = 4, .ulysses = 2, .ring = 2, .seq = 64, .batch = 2, .steps = 20, .save = straight};
    run_spec b = {.world = 4, .ulysses = 2, .ring = 2, .seq = 64, .batch = 2, .steps = 20, .until = 10, .save = half};
    run_spec c = {.world = 4, .ulysses = 2, .ring = 2, .seq = 64, .batch = 2, .steps = 20, .resume = half,
                  .save = resumed};
    a.zero = b.zero = c.zero = _i ? 3 : 0;
    usp_train_result ra, rc;
    train(&model, &a, NULL, NULL, &ra);
    train(&model, &b, NULL, NULL, NULL);
    train(&model, &c, NULL, NULL, &rc);
    ck_assert_int_eq(rc.steps_done, 20);
    const char *files[] = {"model.safetensors", "optimizer.safetensors"};
    for (int i = 0; i < 2; i++) {
        char p1[512], p2[512];
        snprintf(p1, sizeof p1, "%s/%s", straight, files[i]);
        snprintf(p2, sizeof p2, "%s/%s", resumed, files[i]);
        size_t n1, n2;
        char *d1 = harness_read_file(p1, &n1), *d2 = harness_read_file(p2, &n2);
        ck_assert_msg(d1 && d2, "cannot read %s or %s", p1, p2);
        ck_assert_msg(n1 == n2 && memcmp(d1, d2, n1) == 0, "%s differs after resume", files[i]);
        free(d1), free(d2);
    }
    ck_assert_double_eq(ra.loss, rc.loss);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Saved at step 10 of a ZeRO 3 run on 4 ranks, resumed at ZeRO 0 on the same mesh (_i = 0) or at
 * ZeRO 1 on 2 ranks (_i = 1), each rank reading only what it keeps: step 20's loss is the
 * uninterrupted ZeRO 0 run's. Rounding differs (ZeRO's reduce-scatter sums in another order; 2
 * ranks split the sequence differently), hence a tolerance, as tests/test_memory_options.c allows. */
START_TEST(a_resume_at_another_stage_or_world_continues_the_same_losses)
{
    usp_model_config model = tiny_config(USP_FAMILY_LLAMA);
    char dir[] = "/tmp/usp_restage_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char half[256];
    snprintf(half, sizeof half, "%s/half", dir);
    run_spec a = {.world = 4, .ulysses = 2, .ring = 2, .seq = 64, .batch = 2, .steps = 20};
    run_spec b = a, c = a;
    b.zero = 3, b.until = 10, b.save = half;
    if (_i == 1)
        c.world = 2, c.ring = 1, c.zero = 1;
    c.resume = half;
    usp_train_result ra, rc;
    train(&model, &a, NULL, NULL, &ra);
    train(&model, &b, NULL, NULL, NULL);
    train(&model, &c, NULL, NULL, &rc);
    ck_assert_int_eq(rc.steps_done, 20);
    ck_assert_msg(fabs(rc.loss - ra.loss) <= 1e-4 * fabs(ra.loss), "resumed %s: loss %.9g, straight %.9g",
                  _i == 0 ? "at ZeRO 0" : "on 2 ranks at ZeRO 1", rc.loss, ra.loss);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* What periodic_evaluation_leaves_the_training_bitwise keeps of a run's records. */
typedef struct eval_records {
    harness_tensors tensors;
    double step_loss[16];  /* [step]: the STEP records' losses */
    int64_t eval_step[16]; /* the EVAL records' steps, in order */
    double eval_loss[16];
    int n_evals;
} eval_records;

static void keep_eval_records(void *ctx, const usp_train_record *r)
{
    eval_records *e = ctx;
    harness_record_tensors(&e->tensors, r);
    if (r->kind == USP_TRAIN_RECORD_STEP && r->step < 16)
        e->step_loss[r->step] = r->loss;
    if (r->kind == USP_TRAIN_RECORD_EVAL && e->n_evals < 16)
        e->eval_step[e->n_evals] = r->step, e->eval_loss[e->n_evals++] = r->loss;
}

/* --eval-every 2 over 7 steps evaluates after steps 2, 4 and 6 (not after 7, the end's evaluation), and the
 * training is the same, bit for bit: every step's loss and the last weights. _i = 0: Ulysses 2 x ring 2 with
 * whole weights; 1: ZeRO 3 (the evaluation gathers sharded weights) with 2 micro-batches a step. */
START_TEST(periodic_evaluation_leaves_the_training_bitwise)
{
    usp_model_config model = tiny_config(USP_FAMILY_LLAMA);
    usp_param_table table;
    ck_assert_int_eq(usp_param_table_make(&model, &table), USP_OK);
    eval_records runs[2];
    memset(runs, 0, sizeof runs);
    usp_train_result results[2];
    for (int with_evals = 0; with_evals < 2; with_evals++) {
        usp_train_config c;
        usp_train_defaults(&c);
        c.model = model, c.data = "passkey", c.seq_len = 64, c.batch = 4, c.steps = 7, c.warmup = 2;
        ck_assert_int_eq(usp_mesh_shape_make(4, 2, 2, &c.shape), USP_OK);
        c.zero_stage = _i ? 3 : 0, c.micro_batches = _i ? 2 : 1;
        c.log_every = 1, c.eval_samples = 8, c.eval_every = with_evals ? 2 : 0;
        eval_records *e = &runs[with_evals];
        e->tensors.last_weights = calloc((size_t)table.total, sizeof(float));
        c.on_record = keep_eval_records, c.record_ctx = e, c.record_tensors = 1;
        char report[4096];
        ck_assert_msg(harness_train(&c, &results[with_evals], report, sizeof report) == USP_OK, "%s", report);
    }
    for (int step = 1; step <= 7; step++)
        ck_assert_msg(memcmp(&runs[0].step_loss[step], &runs[1].step_loss[step], sizeof(double)) == 0,
                      "step %d: loss %.17g without evaluations, %.17g with", step, runs[0].step_loss[step],
                      runs[1].step_loss[step]);
    ck_assert_msg(memcmp(runs[0].tensors.last_weights, runs[1].tensors.last_weights,
                         (size_t)table.total * sizeof(float)) == 0, "the weights after 7 steps differ");
    ck_assert_int_eq(runs[0].n_evals, 0);
    ck_assert_int_eq(runs[1].n_evals, 3);
    for (int k = 0; k < 3; k++) {
        ck_assert_int_eq(runs[1].eval_step[k], 2 * (k + 1));
        ck_assert_msg(isfinite(runs[1].eval_loss[k]) && runs[1].eval_loss[k] > 0, "eval %d: loss %g", k,
                      runs[1].eval_loss[k]);
    }
    ck_assert_double_eq(results[0].loss, results[1].loss); /* the end's evaluation, of the same weights */
    ck_assert(results[1].loss_held_out);
    free(runs[0].tensors.last_weights), free(runs[1].tensors.last_weights);
    usp_param_table_free(&table);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("train");
    TCase *t = tcase_create("train");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, every_mesh_gives_the_single_rank_loss_and_gradients);
    tcase_add_test(t, packed_documents_and_windows_give_the_single_rank_result);
    tcase_add_test(t, each_ranks_attention_work_is_its_share_of_the_mask);
    tcase_add_test(t, layers_with_and_without_a_window_give_the_single_rank_result);
    tcase_add_loop_test(t, a_packed_sequence_is_its_documents_run_alone, 0, 2);
    tcase_add_test(t, padding_gives_the_unpadded_single_rank_result);
    tcase_add_loop_test(t, twenty_steps_equal_ten_then_resume_then_ten, 0, 2);
    tcase_add_loop_test(t, a_resume_at_another_stage_or_world_continues_the_same_losses, 0, 2);
    tcase_add_loop_test(t, periodic_evaluation_leaves_the_training_bitwise, 0, 2);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
