/* The transformer's forward and backward passes (see model.h).
 *
 * One layer, with x the residual stream:
 *   h = norm1(x);  q, k, v = h Wqkv^T (+ b);  rope(q, k) at GLOBAL positions (Llama)
 *   a = attention(q, k, v);  x' = x + a Wo^T (+ b)
 *   h2 = norm2(x');  GPT-2: u = gelu(h2 Wfc^T + b);  Llama: u = silu(h2 Wg^T) * (h2 Wu^T)
 *   x'' = x' + u Wdown^T (+ b)
 * then normf, logits = h Wte^T (tied) or h Wlm^T, and the cross-entropy.
 * Linear layers are y = x W^T with W [out, in]; their backward is
 *   dx += dy W,  dW += dy^T x,  db += sum over rows of dy. */
#include "core/model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/ulysses.h"

typedef struct layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd;  /* [n, C], [n], [n] */
    float *q, *k, *v;                  /* after rope: [n, H D], [n, Hkv D] x 2 */
    float *att, *att_lse;              /* attention output [n, H D]; local attention's lse [B, H, T] */
    float *mid;                        /* residual after attention [n, C] */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *up;                         /* pre-activation [n, F] (Llama: gate [n, F] then up [n, F]) */
    float *act;                        /* [n, F] */
} layer_acts;

struct usp_model {
    usp_model_setup s;
    usp_model_config c;
    usp_param_table table;
    usp_seq_layout layout;
    int64_t n, B, T, C, H, Hkv, D, F, V;
    float *params, *grads;
    float *residual;                   /* [L + 1, n, C] */
    layer_acts *acts;                  /* [L] */
    ulysses_attention **attn;          /* [L], NULL with local attention */
    float *lnf, *lnf_mean, *lnf_rstd, *logits, *losses;
    int32_t *tokens, *targets, *positions; /* device [n] */
    int32_t *host_targets;             /* [n] */
    float *d_x, *d_h, *d_att, *d_q, *d_k, *d_v, *d_up, *d_act; /* backward scratch */
    float **owned;                     /* every buffer above, for destroy */
    int n_owned, cap_owned;
};

#define BE (m->s.backend)
#define ST (m->s.stream)

static usp_status buffer(usp_model *m, float **p, int64_t elems, const char *category)
{
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        float **grown = realloc(m->owned, (size_t)cap * sizeof *grown);
        if (!grown)
            return usp_error(USP_ERR_RUNTIME, "out of memory for the model's buffer list");
        m->owned = grown;
        m->cap_owned = cap;
    }
    USP_CHECK(usp_buffer_alloc(BE, (size_t)(elems > 0 ? elems : 1) * sizeof(float), category, (void **)p));
    m->owned[m->n_owned++] = *p;
    return USP_OK;
}

static const float *param(const usp_model *m, usp_param_kind kind, int layer)
{
    const usp_param_tensor *t = usp_param_find(&m->table, kind, layer);
    return t ? m->params + t->offset : NULL;
}

static float *grad(const usp_model *m, usp_param_kind kind, int layer)
{
    const usp_param_tensor *t = usp_param_find(&m->table, kind, layer);
    return t ? m->grads + t->offset : NULL;
}

static usp_status alloc_activations(usp_model *m)
{
    const int64_t n = m->n, C = m->C, qd = m->H * m->D, kd = m->Hkv * m->D;
    const int64_t up = m->c.mlp == USP_MLP_SWIGLU ? 2 * m->F : m->F;
    USP_CHECK(buffer(m, &m->residual, (m->c.n_layer + 1) * n * C, "activations"));
    for (int l = 0; l < m->c.n_layer; l++) {
        layer_acts *a = &m->acts[l];
        USP_CHECK(buffer(m, &a->ln1, n * C, "activations"));
        USP_CHECK(buffer(m, &a->ln1_mean, n, "activations"));
        USP_CHECK(buffer(m, &a->ln1_rstd, n, "activations"));
        USP_CHECK(buffer(m, &a->q, n * qd, "activations"));
        USP_CHECK(buffer(m, &a->k, n * kd, "activations"));
        USP_CHECK(buffer(m, &a->v, n * kd, "activations"));
        USP_CHECK(buffer(m, &a->att, n * qd, "activations"));
        if (m->s.attention_local)
            USP_CHECK(buffer(m, &a->att_lse, m->B * m->H * m->T, "activations"));
        USP_CHECK(buffer(m, &a->mid, n * C, "activations"));
        USP_CHECK(buffer(m, &a->ln2, n * C, "activations"));
        USP_CHECK(buffer(m, &a->ln2_mean, n, "activations"));
        USP_CHECK(buffer(m, &a->ln2_rstd, n, "activations"));
        USP_CHECK(buffer(m, &a->up, n * up, "activations"));
        USP_CHECK(buffer(m, &a->act, n * m->F, "activations"));
    }
    USP_CHECK(buffer(m, &m->lnf, n * C, "activations"));
    USP_CHECK(buffer(m, &m->lnf_mean, n, "activations"));
    USP_CHECK(buffer(m, &m->lnf_rstd, n, "activations"));
    USP_CHECK(buffer(m, &m->logits, n * m->V, "activations"));
    USP_CHECK(buffer(m, &m->losses, n, "activations"));
    USP_CHECK(buffer(m, (float **)&m->tokens, n, "activations"));
    USP_CHECK(buffer(m, (float **)&m->targets, n, "activations"));
    USP_CHECK(buffer(m, (float **)&m->positions, n, "activations"));
    const char *g = "gradients";
    USP_CHECK(buffer(m, &m->d_x, n * C, g));
    USP_CHECK(buffer(m, &m->d_h, n * C, g));
    USP_CHECK(buffer(m, &m->d_att, n * qd, g));
    USP_CHECK(buffer(m, &m->d_q, n * qd, g));
    USP_CHECK(buffer(m, &m->d_k, n * kd, g));
    USP_CHECK(buffer(m, &m->d_v, n * kd, g));
    USP_CHECK(buffer(m, &m->d_up, n * up, g));
    USP_CHECK(buffer(m, &m->d_act, n * m->F, g));
    return usp_malloc((void **)&m->host_targets, (size_t)n * sizeof(int32_t), "targets");
}

static usp_status create_attention(usp_model *m)
{
    usp_comm_t *ring = m->s.mesh->ring;
    for (int l = 0; l < m->c.n_layer; l++) {
        ulysses_attention_config ac = {.backend = BE, .stream = ST, .ulysses = m->s.mesh->ulysses, .ring = ring,
                                       .batch = m->B, .seq_len = m->s.seq_len, .n_heads = m->H,
                                       .n_kv_heads = m->Hkv, .head_dim = m->D, .causal = 1};
        USP_CHECK(ulysses_attention_create(&ac, &m->attn[l]));
    }
    m->layout = *ulysses_attention_layout(m->attn[0]);
    return USP_OK;
}

usp_status usp_model_create(const usp_model_setup *setup, usp_model **out)
{
    *out = NULL;
    usp_model *m;
    USP_CHECK(usp_calloc((void **)&m, 1, sizeof *m, "the model"));
    m->s = *setup;
    m->c = *setup->config;
    m->s.config = &m->c;
    usp_status s;
    USP_CHECK_GOTO(usp_model_config_check(&m->c), s, fail);
    USP_CHECK_GOTO(usp_param_table_make(&m->c, &m->table), s, fail);
    const usp_mesh_shape *sh = &setup->mesh->shape;
    m->B = setup->batch, m->C = m->c.d_model, m->H = m->c.n_head, m->Hkv = m->c.n_kv_head;
    m->D = m->C / m->H, m->F = m->c.d_ff, m->V = m->c.vocab;
    /* rope scaling changes the numbers, never a shape: a run on shapes only (meta) may plan such a model */
    if (m->c.positions == USP_POS_ROPE && m->c.rope_scaling.kind != USP_ROPE_SCALING_NONE &&
        usp_backend_has_numerics(setup->backend)) {
        s = usp_error(USP_ERR_CONFIG, "model %s asks for Llama 3's rope_scaling, which the model code does not "
                      "apply yet; use a config without rope_scaling (e.g. --model tiny or llama-7b)", m->c.name);
        goto fail;
    }
    if (m->c.positions == USP_POS_LEARNED && setup->seq_len > m->c.max_seq) {
        s = usp_error(USP_ERR_CONFIG, "--seq %lld is longer than the %lld learned positions of model %s",
                      (long long)setup->seq_len, (long long)m->c.max_seq, m->c.name);
        goto fail;
    }
    USP_CHECK_GOTO(usp_calloc((void **)&m->acts, (size_t)m->c.n_layer, sizeof *m->acts, "activations"), s, fail);
    USP_CHECK_GOTO(usp_calloc((void **)&m->attn, (size_t)m->c.n_layer, sizeof *m->attn, "attention"), s, fail);
    if (setup->attention_local)
        USP_CHECK_GOTO(usp_seq_layout_make(USP_LAYOUT_CONTIGUOUS, setup->seq_len, sh->ulysses, sh->ring, &m->layout),
                       s, fail);
    else
        USP_CHECK_GOTO(create_attention(m), s, fail);
    m->T = m->layout.per_rank;
    m->n = m->B * m->T;
    USP_CHECK_GOTO(buffer(m, &m->params, m->table.total, "weights"), s, fail);
    USP_CHECK_GOTO(buffer(m, &m->grads, m->table.total, "gradients"), s, fail);
    USP_CHECK_GOTO(alloc_activations(m), s, fail);
    *out = m;
    return USP_OK;
fail:
    usp_model_destroy(m);
    return s;
}

void usp_model_destroy(usp_model *m)
{
    if (!m)
        return;
    for (int l = 0; m->attn && l < m->c.n_layer; l++)
        ulysses_attention_destroy(m->attn[l]);
    for (int i = 0; i < m->n_owned; i++)
        usp_buffer_free(BE, m->owned[i]);
    free(m->owned), free(m->attn), free(m->acts), free(m->host_targets);
    usp_param_table_free(&m->table);
    free(m);
}

const usp_seq_layout *usp_model_layout(const usp_model *m) { return &m->layout; }
const usp_param_table *usp_model_params_table(const usp_model *m) { return &m->table; }
float *usp_model_params(usp_model *m) { return m->params; }
float *usp_model_grads(usp_model *m) { return m->grads; }

/* --- building blocks ------------------------------------------------------ */

/* out [n, o] = inp [n, i] W^T + b, W [o, i] */
static usp_status linear(usp_model *m, float *out, const float *inp, const float *w, const float *b, int64_t i,
                         int64_t o)
{
    usp_gemm_desc g = {.trans_b = 1, .m = m->n, .n = o, .k = i, .alpha = 1, .beta = 0, .a = inp, .lda = i,
                       .b = w, .ldb = i, .c = out, .ldc = o, .batch = 1};
    USP_CHECK(usp_gemm(BE, &g, ST));
    return b ? usp_add_bias(BE, out, b, m->n, o, ST) : USP_OK;
}

/* dinp (+)= dout W; dW += dout^T inp; db += column sums of dout */
static usp_status linear_backward(usp_model *m, float *dinp, int accumulate, float *dw, float *db,
                                  const float *dout, const float *inp, const float *w, int64_t i, int64_t o)
{
    usp_gemm_desc dx = {.m = m->n, .n = i, .k = o, .alpha = 1, .beta = accumulate ? 1.0f : 0.0f, .a = dout,
                        .lda = o, .b = w, .ldb = i, .c = dinp, .ldc = i, .batch = 1};
    usp_gemm_desc dW = {.trans_a = 1, .m = o, .n = i, .k = m->n, .alpha = 1, .beta = 1, .a = dout, .lda = o,
                        .b = inp, .ldb = i, .c = dw, .ldc = i, .batch = 1};
    USP_CHECK(usp_gemm(BE, &dx, ST));
    USP_CHECK(usp_gemm(BE, &dW, ST));
    return db ? usp_bias_backward(BE, db, dout, m->n, o, ST) : USP_OK;
}

static usp_status norm_forward(usp_model *m, float *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b)
{
    if (m->c.norm == USP_NORM_LAYERNORM)
        return usp_layernorm_forward(BE, out, mean, rstd, inp, w, b, m->n, m->C, m->c.norm_eps, ST);
    return usp_rmsnorm_forward(BE, out, rstd, inp, w, m->n, m->C, m->c.norm_eps, ST);
}

/* dinp += the norm's backward (dinp accumulates, so the residual gradient flows through) */
static usp_status norm_backward(usp_model *m, float *dinp, float *dw, float *db, const float *dout,
                                const float *inp, const float *w, const float *mean, const float *rstd)
{
    if (m->c.norm == USP_NORM_LAYERNORM)
        return usp_layernorm_backward(BE, dinp, dw, db, dout, inp, w, mean, rstd, m->n, m->C, ST);
    return usp_rmsnorm_backward(BE, dinp, dw, dout, inp, w, rstd, m->n, m->C, ST);
}

static usp_attention_shape local_attention(const usp_model *m)
{
    return (usp_attention_shape){.batch = m->B, .n_q = m->T, .n_kv = m->T, .n_heads = m->H,
                                 .n_kv_heads = m->Hkv, .head_dim = m->D, .causal = 1,
                                 .scale = 1.0f / sqrtf((float)m->D)};
}

/* --- forward -------------------------------------------------------------- */

static usp_status upload_batch(usp_model *m, const usp_shard *shards)
{
    for (int64_t b = 0; b < m->B; b++) {
        const usp_shard *sh = &shards[b];
        size_t at = (size_t)(b * m->T), bytes = (size_t)m->T * sizeof(int32_t);
        USP_CHECK(usp_buffer_copy(BE, m->tokens + at, sh->tokens, bytes, USP_COPY_HOST_TO_DEVICE, ST));
        USP_CHECK(usp_buffer_copy(BE, m->targets + at, sh->targets, bytes, USP_COPY_HOST_TO_DEVICE, ST));
        USP_CHECK(usp_buffer_copy(BE, m->positions + at, sh->positions, bytes, USP_COPY_HOST_TO_DEVICE, ST));
        memcpy(m->host_targets + at, sh->targets, bytes);
        for (int64_t i = 0; i < m->T; i++)
            if (sh->tokens[i] < 0 || sh->tokens[i] >= m->V || sh->targets[i] >= m->V)
                return usp_error(USP_ERR_CONFIG, "token %d at position %d is outside the vocabulary of %lld of "
                                 "model %s: use a model with a larger vocabulary for this data",
                                 sh->tokens[i] >= m->V || sh->tokens[i] < 0 ? sh->tokens[i] : sh->targets[i],
                                 sh->positions[i], (long long)m->V, m->c.name);
    }
    return USP_OK;
}

static usp_status attention_forward(usp_model *m, int l)
{
    layer_acts *a = &m->acts[l];
    if (!m->s.attention_local)
        return ulysses_attention_forward(m->attn[l], a->q, a->k, a->v, a->att);
    usp_attention_shape sh = local_attention(m);
    return usp_flash_attention_forward(BE, &sh, a->q, a->k, a->v, a->att, a->att_lse, ST);
}

static usp_status mlp_forward(usp_model *m, int l, const float *h)
{
    layer_acts *a = &m->acts[l];
    const float *w_up = param(m, USP_P_MLP_UP_W, l);
    const int64_t C = m->C, F = m->F, n = m->n;
    if (m->c.mlp == USP_MLP_SWIGLU) {
        USP_CHECK(linear(m, a->up, h, w_up, NULL, C, F));                  /* gate */
        USP_CHECK(linear(m, a->up + n * F, h, w_up + F * C, NULL, C, F));  /* up */
        return usp_swiglu_forward(BE, a->act, a->up, a->up + n * F, n * F, ST);
    }
    USP_CHECK(linear(m, a->up, h, w_up, param(m, USP_P_MLP_UP_B, l), C, F));
    return usp_gelu_tanh_forward(BE, a->act, a->up, n * F, ST);
}

static usp_status layer_forward(usp_model *m, int l)
{
    layer_acts *a = &m->acts[l];
    const int64_t n = m->n, C = m->C, qd = m->H * m->D, kd = m->Hkv * m->D;
    float *x = m->residual + l * n * C, *x_out = x + n * C;
    const float *w_qkv = param(m, USP_P_QKV_W, l), *b_qkv = param(m, USP_P_QKV_B, l);
    USP_CHECK(norm_forward(m, a->ln1, a->ln1_mean, a->ln1_rstd, x, param(m, USP_P_NORM1_W, l),
                           param(m, USP_P_NORM1_B, l)));
    USP_CHECK(linear(m, a->q, a->ln1, w_qkv, b_qkv, C, qd));
    USP_CHECK(linear(m, a->k, a->ln1, w_qkv + qd * C, b_qkv ? b_qkv + qd : NULL, C, kd));
    USP_CHECK(linear(m, a->v, a->ln1, w_qkv + (qd + kd) * C, b_qkv ? b_qkv + qd + kd : NULL, C, kd));
    if (m->c.positions == USP_POS_ROPE) {
        USP_CHECK(usp_rope_forward(BE, a->q, m->positions, n, m->H, m->D, m->c.rope_theta, ST));
        USP_CHECK(usp_rope_forward(BE, a->k, m->positions, n, m->Hkv, m->D, m->c.rope_theta, ST));
    }
    USP_CHECK(attention_forward(m, l));
    USP_CHECK(linear(m, a->mid, a->att, param(m, USP_P_ATTN_O_W, l), param(m, USP_P_ATTN_O_B, l), qd, C));
    USP_CHECK(usp_accumulate_2d(BE, a->mid, (size_t)C, x, (size_t)C, (size_t)C, (size_t)n, ST));
    USP_CHECK(norm_forward(m, a->ln2, a->ln2_mean, a->ln2_rstd, a->mid, param(m, USP_P_NORM2_W, l),
                           param(m, USP_P_NORM2_B, l)));
    USP_CHECK(mlp_forward(m, l, a->ln2));
    USP_CHECK(linear(m, x_out, a->act, param(m, USP_P_MLP_DOWN_W, l), param(m, USP_P_MLP_DOWN_B, l), m->F, C));
    return usp_accumulate_2d(BE, x_out, (size_t)C, a->mid, (size_t)C, (size_t)C, (size_t)n, ST);
}

static const float *lm_head(const usp_model *m)
{
    return m->c.tied_embeddings ? param(m, USP_P_WTE, -1) : param(m, USP_P_LM_HEAD, -1);
}

usp_status usp_model_forward(usp_model *m, const usp_shard *shards)
{
    USP_CHECK(upload_batch(m, shards));
    const float *wpe = param(m, USP_P_WPE, -1);
    USP_CHECK(usp_embedding_forward(BE, m->residual, m->tokens, wpe ? m->positions : NULL, param(m, USP_P_WTE, -1),
                                    wpe, m->n, m->C, ST));
    for (int l = 0; l < m->c.n_layer; l++)
        USP_CHECK(layer_forward(m, l));
    const float *x = m->residual + m->c.n_layer * m->n * m->C;
    USP_CHECK(norm_forward(m, m->lnf, m->lnf_mean, m->lnf_rstd, x, param(m, USP_P_NORMF_W, -1),
                           param(m, USP_P_NORMF_B, -1)));
    return linear(m, m->logits, m->lnf, lm_head(m), NULL, m->C, m->V);
}

usp_status usp_model_argmax(usp_model *m, const int64_t *rows, int n, int32_t *out)
{
    if (!usp_backend_has_numerics(BE)) { /* no logits to read: no token */
        for (int i = 0; i < n; i++)
            out[i] = -1;
        return USP_OK;
    }
    float *row = malloc((size_t)m->V * sizeof *row);
    if (!row)
        return usp_error(USP_ERR_RUNTIME, "out of memory reading logits");
    usp_status s = USP_OK;
    for (int i = 0; i < n && s == USP_OK; i++) {
        s = usp_buffer_copy(BE, row, m->logits + rows[i] * m->V, (size_t)m->V * sizeof *row, USP_COPY_DEVICE_TO_HOST, ST);
        int32_t best = 0;
        for (int64_t v = 1; v < m->V; v++)
            if (row[v] > row[best])
                best = (int32_t)v;
        out[i] = best;
    }
    free(row);
    return s;
}

usp_status usp_model_loss(usp_model *m, float grad_scale, double *loss_sum)
{
    USP_CHECK(usp_cross_entropy(BE, m->losses, m->logits, m->logits, m->targets, m->n, m->V, grad_scale, ST));
    float *losses = malloc((size_t)m->n * sizeof *losses);
    if (!losses)
        return usp_error(USP_ERR_RUNTIME, "out of memory reading losses");
    usp_status s = usp_buffer_copy(BE, losses, m->losses, (size_t)m->n * sizeof *losses, USP_COPY_DEVICE_TO_HOST, ST);
    double sum = 0; /* in row order, in double: the same bits on every run */
    for (int64_t i = 0; i < m->n && usp_backend_has_numerics(BE); i++)
        sum += m->host_targets[i] >= 0 ? (double)losses[i] : 0.0;
    free(losses);
    *loss_sum = usp_backend_has_numerics(BE) ? sum : NAN; /* meta: the copy cost counts, nothing arrived */
    return s;
}

/* --- backward ------------------------------------------------------------- */

static usp_status attention_backward(usp_model *m, int l)
{
    layer_acts *a = &m->acts[l];
    if (!m->s.attention_local)
        return ulysses_attention_backward(m->attn[l], m->d_att, m->d_q, m->d_k, m->d_v);
    usp_attention_shape sh = local_attention(m);
    return usp_flash_attention_backward(BE, &sh, a->q, a->k, a->v, a->att, a->att_lse, m->d_att, m->d_q, m->d_k,
                                        m->d_v, 0, ST);
}

/* d_x holds the gradient of the layer's output; on return, that of its input. */
static usp_status layer_backward(usp_model *m, int l)
{
    layer_acts *a = &m->acts[l];
    const int64_t n = m->n, C = m->C, F = m->F, qd = m->H * m->D, kd = m->Hkv * m->D;
    const float *x = m->residual + l * n * C;
    /* MLP: x_out = mid + act Wdown^T; the residual passes d_x on to mid unchanged */
    USP_CHECK(linear_backward(m, m->d_act, 0, grad(m, USP_P_MLP_DOWN_W, l), grad(m, USP_P_MLP_DOWN_B, l), m->d_x,
                              a->act, param(m, USP_P_MLP_DOWN_W, l), F, C));
    const float *w_up = param(m, USP_P_MLP_UP_W, l);
    float *dw_up = grad(m, USP_P_MLP_UP_W, l);
    if (m->c.mlp == USP_MLP_SWIGLU) {
        USP_CHECK(usp_swiglu_backward(BE, m->d_up, m->d_up + n * F, a->up, a->up + n * F, m->d_act, n * F, ST));
        USP_CHECK(linear_backward(m, m->d_h, 0, dw_up, NULL, m->d_up, a->ln2, w_up, C, F));
        USP_CHECK(linear_backward(m, m->d_h, 1, dw_up + F * C, NULL, m->d_up + n * F, a->ln2, w_up + F * C, C, F));
    } else {
        USP_CHECK(usp_gelu_tanh_backward(BE, m->d_up, a->up, m->d_act, n * F, ST));
        USP_CHECK(linear_backward(m, m->d_h, 0, dw_up, grad(m, USP_P_MLP_UP_B, l), m->d_up, a->ln2, w_up, C, F));
    }
    USP_CHECK(norm_backward(m, m->d_x, grad(m, USP_P_NORM2_W, l), grad(m, USP_P_NORM2_B, l), m->d_h, a->mid,
                            param(m, USP_P_NORM2_W, l), a->ln2_mean, a->ln2_rstd));
    /* attention: mid = x + att Wo^T */
    USP_CHECK(linear_backward(m, m->d_att, 0, grad(m, USP_P_ATTN_O_W, l), grad(m, USP_P_ATTN_O_B, l), m->d_x,
                              a->att, param(m, USP_P_ATTN_O_W, l), qd, C));
    USP_CHECK(attention_backward(m, l));
    if (m->c.positions == USP_POS_ROPE) {
        USP_CHECK(usp_rope_backward(BE, m->d_q, m->positions, n, m->H, m->D, m->c.rope_theta, ST));
        USP_CHECK(usp_rope_backward(BE, m->d_k, m->positions, n, m->Hkv, m->D, m->c.rope_theta, ST));
    }
    const float *w = param(m, USP_P_QKV_W, l);
    float *dw = grad(m, USP_P_QKV_W, l), *db = grad(m, USP_P_QKV_B, l);
    USP_CHECK(linear_backward(m, m->d_h, 0, dw, db, m->d_q, a->ln1, w, C, qd));
    USP_CHECK(linear_backward(m, m->d_h, 1, dw + qd * C, db ? db + qd : NULL, m->d_k, a->ln1, w + qd * C, C, kd));
    USP_CHECK(linear_backward(m, m->d_h, 1, dw + (qd + kd) * C, db ? db + qd + kd : NULL, m->d_v, a->ln1,
                              w + (qd + kd) * C, C, kd));
    return norm_backward(m, m->d_x, grad(m, USP_P_NORM1_W, l), grad(m, USP_P_NORM1_B, l), m->d_h, x,
                         param(m, USP_P_NORM1_W, l), a->ln1_mean, a->ln1_rstd);
}

usp_status usp_model_backward(usp_model *m)
{
    const int64_t n = m->n, C = m->C;
    USP_CHECK(usp_buffer_zero(BE, m->grads, (size_t)m->table.total * sizeof(float), ST));
    /* logits = lnf W^T: m->logits now holds dlogits */
    float *dw_head = m->c.tied_embeddings ? grad(m, USP_P_WTE, -1) : grad(m, USP_P_LM_HEAD, -1);
    USP_CHECK(linear_backward(m, m->d_h, 0, dw_head, NULL, m->logits, m->lnf, lm_head(m), C, m->V));
    USP_CHECK(usp_buffer_zero(BE, m->d_x, (size_t)(n * C) * sizeof(float), ST));
    const float *x = m->residual + m->c.n_layer * n * C;
    USP_CHECK(norm_backward(m, m->d_x, grad(m, USP_P_NORMF_W, -1), grad(m, USP_P_NORMF_B, -1), m->d_h, x,
                            param(m, USP_P_NORMF_W, -1), m->lnf_mean, m->lnf_rstd));
    for (int l = (int)m->c.n_layer - 1; l >= 0; l--)
        USP_CHECK(layer_backward(m, l));
    const float *wpe = param(m, USP_P_WPE, -1);
    return usp_embedding_backward(BE, grad(m, USP_P_WTE, -1), wpe ? grad(m, USP_P_WPE, -1) : NULL, m->d_x, m->tokens,
                                  wpe ? m->positions : NULL, n, C, ST);
}
