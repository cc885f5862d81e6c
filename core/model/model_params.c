/* The parameter table (see model_params.h). */
#include "core/model/model_params.h"

#include <math.h>
#include <stdlib.h>

static void add(usp_param_table *t, usp_param_kind kind, int layer, int64_t rows, int64_t cols)
{
    usp_param_tensor *p = &t->tensors[t->n++];
    *p = (usp_param_tensor){.kind = kind, .layer = layer, .ndim = cols ? 2 : 1, .shape = {rows, cols},
                            .offset = t->total, .count = rows * (cols ? cols : 1)};
    t->total += p->count;
}

usp_status usp_param_table_make(const usp_model_config *c, usp_param_table *out)
{
    *out = (usp_param_table){0};
    USP_CHECK(usp_calloc((void **)&out->tensors, (size_t)(c->n_layer * 12 + 8), sizeof *out->tensors,
                         "the parameter table"));
    const int64_t C = c->d_model, D = usp_model_config_head_dim(c), F = c->d_ff, V = c->vocab;
    const int64_t qkv = (c->n_head + 2 * c->n_kv_head) * D, up = c->mlp == USP_MLP_SWIGLU ? 2 * F : F;
    const int ln = c->norm == USP_NORM_LAYERNORM;
    add(out, USP_P_WTE, -1, V, C);
    if (c->positions == USP_POS_LEARNED)
        add(out, USP_P_WPE, -1, c->max_seq, C);
    for (int l = 0; l < c->n_layer; l++) {
        add(out, USP_P_NORM1_W, l, C, 0);
        if (ln) add(out, USP_P_NORM1_B, l, C, 0);
        add(out, USP_P_QKV_W, l, qkv, C);
        if (c->bias) add(out, USP_P_QKV_B, l, qkv, 0);
        add(out, USP_P_ATTN_O_W, l, C, c->n_head * D);
        if (c->bias) add(out, USP_P_ATTN_O_B, l, C, 0);
        add(out, USP_P_NORM2_W, l, C, 0);
        if (ln) add(out, USP_P_NORM2_B, l, C, 0);
        add(out, USP_P_MLP_UP_W, l, up, C);
        if (c->bias) add(out, USP_P_MLP_UP_B, l, up, 0);
        add(out, USP_P_MLP_DOWN_W, l, C, F);
        if (c->bias) add(out, USP_P_MLP_DOWN_B, l, C, 0);
    }
    add(out, USP_P_NORMF_W, -1, C, 0);
    if (ln) add(out, USP_P_NORMF_B, -1, C, 0);
    if (!c->tied_embeddings)
        add(out, USP_P_LM_HEAD, -1, V, C);
    return USP_OK;
}

void usp_param_table_free(usp_param_table *t)
{
    free(t->tensors);
    *t = (usp_param_table){0};
}

const usp_param_tensor *usp_param_find(const usp_param_table *t, usp_param_kind kind, int layer)
{
    for (int i = 0; i < t->n; i++)
        if (t->tensors[i].kind == kind && t->tensors[i].layer == layer)
            return &t->tensors[i];
    return NULL;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* A standard normal from two uniforms of (seed, i) (Box-Muller). */
static double normal(uint64_t seed, int64_t i)
{
    uint64_t a = mix(seed ^ mix((uint64_t)i)), b = mix(a);
    double u1 = ((double)(a >> 11) + 0.5) / 9007199254740992.0, u2 = (double)(b >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

void usp_param_init(const usp_param_table *t, const usp_model_config *c, uint64_t seed, float *params)
{
    usp_param_init_range(t, c, seed, 0, t->total, params);
}

void usp_param_init_range(const usp_param_table *t, const usp_model_config *c, uint64_t seed, int64_t lo,
                          int64_t count, float *out)
{
    const double residual_scale = 1.0 / sqrt(2.0 * (double)c->n_layer);
    for (int i = 0; i < t->n; i++) {
        const usp_param_tensor *p = &t->tensors[i];
        int64_t from = p->offset > lo ? p->offset : lo;
        int64_t to = p->offset + p->count < lo + count ? p->offset + p->count : lo + count;
        int is_norm = p->kind == USP_P_NORM1_W || p->kind == USP_P_NORM2_W || p->kind == USP_P_NORMF_W;
        double std = 0.02 * (p->kind == USP_P_ATTN_O_W || p->kind == USP_P_MLP_DOWN_W ? residual_scale : 1.0);
        /* Element e depends on (seed, e) alone, so the threads' split changes no bit. */
#pragma omp parallel for schedule(static) if (to - from >= (1 << 16))
        for (int64_t e = from; e < to; e++) /* norms start at 1, biases (and norm biases) at 0 */
            out[e - lo] = p->ndim == 1 ? (is_norm ? 1.0f : 0.0f) : (float)(std * normal(seed, e));
    }
}
