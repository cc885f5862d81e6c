/* Analytic gradients of every parameter kind against central finite
 * differences, on tiny GPT-2 and Llama configs (one rank), one of them with a
 * head width of its own (attention width H D = 32 != d_model 24).
 *
 * For each tensor, the directional derivative along its own gradient,
 * u = g / |g|, is |g|. The central difference d(h) = (L(w + h u) - L(w - h u)) / 2h
 * has an error c h^2 + O(h^4) plus the float rounding of L over h; Richardson's
 * (4 d(h/2) - d(h)) / 3 cancels the h^2 term, so h can stay large enough
 * for the rounding to be small. We require a relative error <= 1e-3. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/model/model.h"
#include "core/model/model_params.h"
#include "tests/harness.h"
#include "tests/check_main.h"

typedef struct grad_case {
    usp_model_config config;
    double loss;  /* at the test's weights */
    double worst;
    char report[256];
    char unused[256]; /* a row or column of an attention projection the loss does not depend on; "" if none */
} grad_case;

/* Every row and every column of the attention projections (qkv [(H + 2 Hkv) D, C], o [C, H D]) must
 * take part in the loss: a model that took D = C / H on a config with its own head_dim would be a
 * consistent function of a part of them, whose gradients finite differences would still confirm. */
static void find_unused(grad_case *gc, const usp_param_table *t, const float *g)
{
    gc->unused[0] = 0;
    for (int i = 0; i < t->n && !gc->unused[0]; i++) {
        const usp_param_tensor *p = &t->tensors[i];
        if (p->kind != USP_P_QKV_W && p->kind != USP_P_ATTN_O_W)
            continue;
        const int64_t rows = p->shape[0], cols = p->shape[1];
        for (int by_col = 0; by_col < 2; by_col++)
            for (int64_t a = 0; a < (by_col ? cols : rows); a++) {
                double sum = 0;
                for (int64_t b = 0; b < (by_col ? rows : cols); b++)
                    sum += fabs(g[p->offset + (by_col ? b * cols + a : a * cols + b)]);
                if (sum == 0 && !gc->unused[0])
                    snprintf(gc->unused, sizeof gc->unused, "%s: tensor kind %d layer %d [%lld, %lld]: %s %lld has "
                             "no gradient", gc->config.name, p->kind, p->layer, (long long)rows, (long long)cols,
                             by_col ? "column" : "row", (long long)a);
            }
    }
}

static usp_status loss_at(usp_model *m, const usp_shard *shard, double count, int with_grad, double *loss)
{
    double sum;
    USP_CHECK(usp_model_forward(m, shard));
    USP_CHECK(usp_model_loss(m, (float)(1.0 / count), with_grad, &sum));
    *loss = sum / count;
    return USP_OK;
}

static usp_status check_rank(const usp_rank_ctx *ctx, void *arg)
{
    grad_case *gc = arg;
    usp_mesh_shape shape;
    usp_mesh mesh;
    USP_CHECK(usp_mesh_shape_make(1, 1, 1, &shape));
    USP_CHECK(usp_mesh_create(ctx->world, &shape, &mesh));
    const int64_t N = 64;
    usp_model_setup setup = {.config = &gc->config, .backend = ctx->backend, .mesh = &mesh, .batch = 1, .seq_len = N};
    usp_model *m;
    USP_CHECK(usp_model_create(&setup, &m));
    const usp_param_table *t = usp_model_params_table(m);
    size_t bytes = (size_t)t->total * sizeof(float);
    float *w = malloc(bytes), *g = malloc(bytes), *probe = malloc(bytes);
    usp_param_init(t, &gc->config, 7, w);
    for (int64_t i = 0; i < t->total; i++) /* move norms and biases off 1 and 0 so their gradients are generic */
        w[i] += 0.05f * sinf((float)i);
    usp_data data;
    usp_shard shard;
    USP_CHECK(usp_data_open("passkey", 3, &data));
    USP_CHECK(usp_shard_alloc(&shard, N, 0));
    USP_CHECK(usp_data_read_shard(&data, usp_model_layout(m), 0, 0, N, &shard));
    double count = N, loss, plus, minus;
    usp_param_store *store = usp_model_store(m);
    USP_CHECK(usp_param_store_write(store, USP_ARRAY_WEIGHTS, w));
    USP_CHECK(loss_at(m, &shard, count, 1, &loss));
    gc->loss = loss;
    USP_CHECK(usp_model_backward(m));
    USP_CHECK(usp_buffer_copy(ctx->backend, g, usp_param_store_whole_grads(store), bytes, USP_COPY_DEVICE_TO_HOST,
                              NULL));
    find_unused(gc, t, g);
    gc->worst = 0;
    for (int i = 0; i < t->n; i++) {
        const usp_param_tensor *p = &t->tensors[i];
        double norm = 0;
        for (int64_t j = 0; j < p->count; j++)
            norm += (double)g[p->offset + j] * g[p->offset + j];
        norm = sqrt(norm);
        if (norm < 1e-6)
            continue; /* e.g. the embedding rows of tokens the sample lacks are exactly 0 */
        double d[2];
        for (int k = 0; k < 2; k++) {
            /* a step that moves L by about 2e-3 keeps rounding small; 1e-2..1e-1 keeps h^4 small */
            double h0 = fmin(fmax(2e-3 / norm, 1e-2), 1e-1), h = k == 0 ? h0 : h0 / 2;
            for (int sign = -1; sign <= 1; sign += 2) {
                memcpy(probe, w, bytes);
                for (int64_t j = 0; j < p->count; j++)
                    probe[p->offset + j] += (float)(sign * h * g[p->offset + j] / norm);
                USP_CHECK(usp_param_store_write(store, USP_ARRAY_WEIGHTS, probe));
                USP_CHECK(loss_at(m, &shard, count, 0, sign < 0 ? &minus : &plus));
            }
            d[k] = (plus - minus) / (2 * h);
        }
        double fd = (4 * d[1] - d[0]) / 3, err = fabs(fd - norm) / norm;
        if (err > gc->worst) {
            gc->worst = err;
            snprintf(gc->report, sizeof gc->report, "%s: tensor kind %d layer %d: |g| %.6g, finite difference %.6g",
                     gc->config.name, p->kind, p->layer, norm, fd);
        }
    }
    usp_shard_free(&shard);
    usp_data_close(&data);
    free(w), free(g), free(probe);
    usp_model_destroy(m);
    usp_mesh_destroy(&mesh);
    return USP_OK;
}

START_TEST(gradients_match_finite_differences)
{
    /* tiny is Llama; the third case is Llama with Llama 3's rope scaling, set so that its four
     * frequency pairs (head dim 8, wavelengths 6.3, 63, 628, 6283) fall in all three regimes:
     * kept (below 64/4), blended, divided by the factor (above 64); the fourth is Llama with
     * head_dim 8 on d_model 24 (4 heads of 8, 2 KV heads): q [24 -> 32], k, v [24 -> 16], o [32 -> 24] */
    const char *presets[] = {"tiny", "gpt2-124m", "tiny", "tiny"};
    double unscaled_loss = 0;
    for (int f = 0; f < 4; f++) {
        grad_case gc;
        ck_assert_int_eq(usp_model_config_preset(presets[f], &gc.config), USP_OK);
        if (f == 2) {
            gc.config.rope_scaling = (usp_rope_scaling){.kind = USP_ROPE_SCALING_LLAMA3, .factor = 8,
                                                        .low_freq_factor = 1, .high_freq_factor = 4,
                                                        .original_max_pos = 64};
            snprintf(gc.config.name, sizeof gc.config.name, "tiny with llama3 rope scaling");
        }
        gc.config.vocab = 128, gc.config.n_layer = 2, gc.config.d_model = 32, gc.config.n_head = 4;
        gc.config.max_seq = 64, gc.config.d_ff = f == 1 ? 128 : 48, gc.config.n_kv_head = f == 1 ? 4 : 2;
        if (f != 1)
            gc.config.tied_embeddings = 0; /* Llama: check lm_head too; GPT-2 stays tied */
        if (f == 3) {
            gc.config.d_model = 24, gc.config.head_dim = 8;
            snprintf(gc.config.name, sizeof gc.config.name, "tiny with head_dim 8 on d_model 24");
            ck_assert_int_eq(usp_model_config_attention_width(&gc.config), 32);
        }
        char report[1024];
        ck_assert_msg(harness_run(1, check_rank, &gc, NULL, 0, report, sizeof report) == USP_OK, "%s", report);
        ck_assert_msg(gc.worst <= 1e-3, "relative error %.3g at %s", gc.worst, gc.report);
        ck_assert_msg(!gc.unused[0], "%s", gc.unused);
        if (f == 0)
            unscaled_loss = gc.loss;
        if (f == 2) /* the same weights and tokens: only the scaled frequencies differ */
            ck_assert_msg(fabs(gc.loss - unscaled_loss) > 1e-6, "rope scaling changed nothing: loss %.9g", gc.loss);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gradcheck");
    TCase *t = tcase_create("gradcheck");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, gradients_match_finite_differences);
    suite_add_tcase(s, t);
    return check_main_run(s);
}
