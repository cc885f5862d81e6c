/* The op-conformance table, continued (tests/conformance_cases.c has the
 * tolerances' rationale): the layer ops (embedding, norms, activations, rope),
 * the cross-entropy, AdamW and the small reductions. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/conformance.h"

/* ---- embedding ------------------------------------------------------------------ */

#define EMB_N 13
#define EMB_C 24
#define EMB_V 11
#define EMB_P 16
/* token 3 four times, 1 three times: the backward adds rows of one token in order */
static const int32_t emb_tokens[EMB_N] = {3, 1, 3, 0, 10, 3, 6, 1, 1, 9, 3, 0, 5};
static const int32_t emb_positions[EMB_N] = {4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 4};

typedef struct with_params {
    int with; /* the optional operands: bias, mean and rstd, ... */
} with_params;

static const with_params with_it = {1}, without_it = {0};

typedef struct embedding_params {
    int backward;
    int with_wpe; /* 0: wpe (dwpe) and positions NULL */
} embedding_params;

/* Forward: out = wte[tokens] + wpe[positions]; backward: dwte and dwpe (the same random tables) accumulate dout. */
static void run_embedding(conformance_run *r, const void *params)
{
    const embedding_params *p = params;
    int32_t *tokens = conformance_ids(r, emb_tokens, EMB_N);
    int32_t *positions = p->with_wpe ? conformance_ids(r, emb_positions, EMB_N) : NULL;
    float *wte = conformance_input(r, EMB_V * EMB_C, 1);
    float *wpe = p->with_wpe ? conformance_input(r, EMB_P * EMB_C, 1) : NULL;
    if (!p->backward) {
        float *out = conformance_output_buffer(r, EMB_N * EMB_C);
        CONFORMANCE_OK(r, usp_embedding_forward(r->be, out, tokens, positions, wte, wpe, EMB_N, EMB_C, NULL));
        conformance_download(r, "out", out, EMB_N * EMB_C);
        return;
    }
    float *dout = conformance_input(r, EMB_N * EMB_C, 1);
    CONFORMANCE_OK(r, usp_embedding_backward(r->be, wte, wpe, dout, tokens, positions, EMB_N, EMB_C, NULL));
    conformance_download(r, "dwte", wte, EMB_V * EMB_C);
    if (p->with_wpe)
        conformance_download(r, "dwpe", wpe, EMB_P * EMB_C);
}

static const embedding_params emb_fwd = {0, 1}, emb_fwd_no_wpe = {0, 0}, emb_bwd = {1, 1}, emb_bwd_no_wpe = {1, 0};

/* ---- layernorm and rmsnorm ---------------------------------------------------------- */

#define NORM_N 6
#define NORM_C 40
#define NORM_EPS 1e-5f

/* Rows of scale 2, the first shifted by 3 (a large mean next to a small variance). */
static float *norm_input(conformance_run *r)
{
    float *x = conformance_host(r, NORM_N * NORM_C, 2);
    for (int64_t c = 0; c < NORM_C; c++)
        x[c] += 3.0f;
    return conformance_upload(r, x, NORM_N * NORM_C);
}

/* with: bias, mean and rstd given; without: all three NULL. */
static void run_layernorm_forward(conformance_run *r, const void *params)
{
    const int with = ((const with_params *)params)->with;
    float *inp = norm_input(r), *weight = conformance_input(r, NORM_C, 1);
    float *bias = with ? conformance_input(r, NORM_C, 1) : NULL;
    float *mean = with ? conformance_output_buffer(r, NORM_N) : NULL;
    float *rstd = with ? conformance_output_buffer(r, NORM_N) : NULL;
    float *out = conformance_output_buffer(r, NORM_N * NORM_C);
    CONFORMANCE_OK(r, usp_layernorm_forward(r->be, out, mean, rstd, inp, weight, bias, NORM_N, NORM_C, NORM_EPS, NULL));
    conformance_download(r, "out", out, NORM_N * NORM_C);
    if (with) {
        conformance_download(r, "mean", mean, NORM_N);
        conformance_download(r, "rstd", rstd, NORM_N);
    }
}

/* The forward saves mean and rstd; the backward accumulates into random gradients (with: dbias too, else NULL). */
static void run_layernorm_backward(conformance_run *r, const void *params)
{
    const int with = ((const with_params *)params)->with;
    const int64_t nc = NORM_N * NORM_C;
    float *inp = norm_input(r), *weight = conformance_input(r, NORM_C, 1), *bias = conformance_input(r, NORM_C, 1);
    float *out = conformance_output_buffer(r, nc), *mean = conformance_output_buffer(r, NORM_N);
    float *rstd = conformance_output_buffer(r, NORM_N);
    CONFORMANCE_OK(r, usp_layernorm_forward(r->be, out, mean, rstd, inp, weight, bias, NORM_N, NORM_C, NORM_EPS, NULL));
    float *dout = conformance_input(r, nc, 1), *dinp = conformance_input(r, nc, 1);
    float *dweight = conformance_input(r, NORM_C, 1), *dbias = with ? conformance_input(r, NORM_C, 1) : NULL;
    CONFORMANCE_OK(r, usp_layernorm_backward(r->be, dinp, dweight, dbias, dout, inp, weight, mean, rstd, NORM_N, NORM_C,
                                             NULL));
    conformance_download(r, "dinp", dinp, nc);
    conformance_download(r, "dweight", dweight, NORM_C);
    if (with)
        conformance_download(r, "dbias", dbias, NORM_C);
}

/* with: rstd saved; without: NULL. */
static void run_rmsnorm_forward(conformance_run *r, const void *params)
{
    const int with = ((const with_params *)params)->with;
    float *inp = norm_input(r), *weight = conformance_input(r, NORM_C, 1);
    float *rstd = with ? conformance_output_buffer(r, NORM_N) : NULL;
    float *out = conformance_output_buffer(r, NORM_N * NORM_C);
    CONFORMANCE_OK(r, usp_rmsnorm_forward(r->be, out, rstd, inp, weight, NORM_N, NORM_C, NORM_EPS, NULL));
    conformance_download(r, "out", out, NORM_N * NORM_C);
    if (with)
        conformance_download(r, "rstd", rstd, NORM_N);
}

static void run_rmsnorm_backward(conformance_run *r, const void *params)
{
    (void)params;
    const int64_t nc = NORM_N * NORM_C;
    float *inp = norm_input(r), *weight = conformance_input(r, NORM_C, 1);
    float *out = conformance_output_buffer(r, nc), *rstd = conformance_output_buffer(r, NORM_N);
    CONFORMANCE_OK(r, usp_rmsnorm_forward(r->be, out, rstd, inp, weight, NORM_N, NORM_C, NORM_EPS, NULL));
    float *dout = conformance_input(r, nc, 1), *dinp = conformance_input(r, nc, 1);
    float *dweight = conformance_input(r, NORM_C, 1);
    CONFORMANCE_OK(r, usp_rmsnorm_backward(r->be, dinp, dweight, dout, inp, weight, rstd, NORM_N, NORM_C, NULL));
    conformance_download(r, "dinp", dinp, nc);
    conformance_download(r, "dweight", dweight, NORM_C);
}

/* ---- activations -------------------------------------------------------------------- */

#define ACT_N 777

typedef struct pass_params {
    int backward;
} pass_params;

static const pass_params forward_pass = {0}, backward_pass = {1};

/* Forward: out = gelu(inp); backward: dinp = gelu'(inp) dout, overwritten. */
static void run_gelu(conformance_run *r, const void *params)
{
    const int backward = ((const pass_params *)params)->backward;
    float *inp = conformance_input(r, ACT_N, 4), *dout = backward ? conformance_input(r, ACT_N, 1) : NULL;
    float *out = conformance_output_buffer(r, ACT_N);
    CONFORMANCE_OK(r, backward ? usp_gelu_tanh_backward(r->be, out, inp, dout, ACT_N, NULL)
                               : usp_gelu_tanh_forward(r->be, out, inp, ACT_N, NULL));
    conformance_download(r, backward ? "dinp" : "out", out, ACT_N);
}

/* Forward: out = silu(gate) up; backward: dgate and dup, overwritten. */
static void run_swiglu(conformance_run *r, const void *params)
{
    const int backward = ((const pass_params *)params)->backward;
    float *gate = conformance_input(r, ACT_N, 4), *up = conformance_input(r, ACT_N, 4);
    float *dout = backward ? conformance_input(r, ACT_N, 1) : NULL;
    float *out = conformance_output_buffer(r, ACT_N), *dup = backward ? conformance_output_buffer(r, ACT_N) : NULL;
    CONFORMANCE_OK(r, backward ? usp_swiglu_backward(r->be, out, dup, gate, up, dout, ACT_N, NULL)
                               : usp_swiglu_forward(r->be, out, gate, up, ACT_N, NULL));
    conformance_download(r, backward ? "dgate" : "out", out, ACT_N);
    if (backward)
        conformance_download(r, "dup", dup, ACT_N);
}

/* ---- rope --------------------------------------------------------------------------------- */

typedef struct rope_params {
    int64_t n, H, D;
    int backward;
    int table; /* 1: a host inv_freq table instead of theta's frequencies */
} rope_params;

/* Global positions, not in order, some far from 0 (a later shard of the sequence). At 4000 an angle
 * computed in fp32 is off by ~2e-4 rad, above the tolerance: like the cpu kernel, compute it in double. */
static const int32_t rope_positions[] = {100, 101, 102, 7, 8, 9, 0, 1, 4000};
#define ROPE_THETA 10000.0f

static void run_rope(conformance_run *r, const void *params)
{
    const rope_params *p = params;
    double inv_freq[64];
    for (int64_t i = 0; i < p->D / 2; i++) /* Llama 3 style: theta's, the low frequencies divided by 8 */
        inv_freq[i] = pow(500000.0, -2.0 * (double)i / (double)p->D) / (i >= p->D / 4 ? 8.0 : 1.0);
    const double *table = p->table ? inv_freq : NULL;
    int32_t *positions = conformance_ids(r, rope_positions, p->n);
    float *x = conformance_input(r, p->n * p->H * p->D, 1);
    CONFORMANCE_OK(r, p->backward ? usp_rope_backward(r->be, x, positions, p->n, p->H, p->D, ROPE_THETA, table, NULL)
                                  : usp_rope_forward(r->be, x, positions, p->n, p->H, p->D, ROPE_THETA, table, NULL));
    conformance_download(r, "x", x, p->n * p->H * p->D);
}

/* D = 72: more pairs than one batch of angles of the cpu kernel. */
static const rope_params rope_fwd = {9, 3, 72, 0, 0}, rope_bwd = {9, 3, 72, 1, 0};
static const rope_params rope_fwd_table = {9, 2, 16, 0, 1}, rope_bwd_table = {9, 2, 16, 1, 1};

/* ---- cross-entropy ------------------------------------------------------------------------- */

typedef enum ce_outputs { CE_BOTH, CE_IN_PLACE, CE_NO_LOSSES, CE_NO_DLOGITS } ce_outputs;

typedef struct ce_params {
    int64_t n, V;
    ce_outputs outputs;
} ce_params;

/* Targets < 0 are ignored (loss 0, a zero gradient row); one target is the last id. */
static const int32_t ce_targets[] = {3, -1, 49, 0, -100, 17, 17};

static void run_cross_entropy(conformance_run *r, const void *params)
{
    const ce_params *p = params;
    const int64_t nv = p->n * p->V;
    int32_t *targets = conformance_ids(r, ce_targets, p->n);
    float *logits = conformance_input(r, nv, 5);
    float *losses = p->outputs == CE_NO_LOSSES ? NULL : conformance_output_buffer(r, p->n);
    float *dlogits = p->outputs == CE_IN_PLACE ? logits
                     : p->outputs == CE_NO_DLOGITS ? NULL : conformance_output_buffer(r, nv);
    CONFORMANCE_OK(r, usp_cross_entropy(r->be, losses, dlogits, logits, targets, p->n, p->V, 0.2f, NULL));
    if (losses)
        conformance_download(r, "losses", losses, p->n);
    if (dlogits)
        conformance_download(r, "dlogits", dlogits, nv);
}

static const ce_params ce_both = {7, 50, CE_BOTH}, ce_in_place = {7, 50, CE_IN_PLACE};
static const ce_params ce_no_losses = {7, 50, CE_NO_LOSSES}, ce_no_dlogits = {7, 50, CE_NO_DLOGITS};
static const ce_params ce_large_vocab = {3, 5000, CE_IN_PLACE};

/* ---- optimizer and reductions ------------------------------------------------------------------ */

static void run_adamw_step(conformance_run *r, const void *params)
{
    (void)params;
    const int64_t n = 300;
    float *v_host = conformance_host(r, n, 0.01f);
    for (int64_t i = 0; i < n; i++)
        v_host[i] = fabsf(v_host[i]); /* a second moment */
    float *param = conformance_input(r, n, 1), *grads = conformance_input(r, n, 1), *m = conformance_input(r, n, 0.1f);
    float *v = conformance_upload(r, v_host, n);
    CONFORMANCE_OK(r, usp_adamw_step(r->be, param, grads, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, NULL));
    conformance_download(r, "params", param, n);
    conformance_download(r, "m", m, n);
    conformance_download(r, "v", v, n);
}

static void run_sum_squares(conformance_run *r, const void *params)
{
    (void)params;
    const int64_t n = 1001;
    float *x = conformance_input(r, n, 1);
    double sum = -1.0;
    CONFORMANCE_OK(r, usp_sum_squares(r->be, &sum, x, n, NULL));
    conformance_scalar(r, "sum", sum);
}

static void run_scale(conformance_run *r, const void *params)
{
    (void)params;
    float *x = conformance_input(r, 257, 1);
    CONFORMANCE_OK(r, usp_scale(r->be, x, -0.37f, 257, NULL));
    conformance_download(r, "x", x, 257);
}

static void run_add_bias(conformance_run *r, const void *params)
{
    (void)params;
    float *x = conformance_input(r, 5 * 33, 1), *bias = conformance_input(r, 33, 1);
    CONFORMANCE_OK(r, usp_add_bias(r->be, x, bias, 5, 33, NULL));
    conformance_download(r, "x", x, 5 * 33);
}

static void run_bias_backward(conformance_run *r, const void *params)
{
    (void)params;
    float *dbias = conformance_input(r, 9, 1), *dout = conformance_input(r, 37 * 9, 1);
    CONFORMANCE_OK(r, usp_bias_backward(r->be, dbias, dout, 37, 9, NULL));
    conformance_download(r, "dbias", dbias, 9);
}

/* ---- the table ----------------------------------------------------------------------------------- */

const conformance_case conformance_layer_cases[] = {
    {"embedding forward with wpe", run_embedding, &emb_fwd, SLOT(embedding_forward), 1e-6, 0, 0},
    {"embedding forward without wpe", run_embedding, &emb_fwd_no_wpe, SLOT(embedding_forward), 1e-6, 0, 0},
    {"embedding backward, repeated tokens", run_embedding, &emb_bwd, SLOT(embedding_backward), 1e-6, 0, 0},
    {"embedding backward without dwpe", run_embedding, &emb_bwd_no_wpe, SLOT(embedding_backward), 1e-6, 0, 0},
    {"layernorm forward, bias, mean, rstd", run_layernorm_forward, &with_it, SLOT(layernorm_forward), 1e-5, 0, 0},
    {"layernorm forward, no bias, NULL mean and rstd", run_layernorm_forward, &without_it, SLOT(layernorm_forward),
     1e-5, 0, 0},
    {"layernorm backward with dbias", run_layernorm_backward, &with_it, SLOT(layernorm_backward), 1e-5, 0, 0},
    {"layernorm backward, dbias NULL", run_layernorm_backward, &without_it, SLOT(layernorm_backward), 1e-5, 0, 0},
    {"rmsnorm forward with rstd", run_rmsnorm_forward, &with_it, SLOT(rmsnorm_forward), 1e-5, 0, 0},
    {"rmsnorm forward, rstd NULL", run_rmsnorm_forward, &without_it, SLOT(rmsnorm_forward), 1e-5, 0, 0},
    {"rmsnorm backward", run_rmsnorm_backward, NULL, SLOT(rmsnorm_backward), 1e-5, 0, 0},
    {"gelu forward", run_gelu, &forward_pass, SLOT(gelu_tanh_forward), 1e-6, 0, 0},
    {"gelu backward", run_gelu, &backward_pass, SLOT(gelu_tanh_backward), 1e-6, 0, 0},
    {"swiglu forward", run_swiglu, &forward_pass, SLOT(swiglu_forward), 1e-6, 0, 0},
    {"swiglu backward", run_swiglu, &backward_pass, SLOT(swiglu_backward), 1e-6, 0, 0},
    {"rope forward, theta, D 72", run_rope, &rope_fwd, SLOT(rope_forward), 1e-5, 0, 0},
    {"rope backward, theta, D 72", run_rope, &rope_bwd, SLOT(rope_backward), 1e-5, 0, 0},
    {"rope forward, inv_freq table", run_rope, &rope_fwd_table, SLOT(rope_forward), 1e-5, 0, 0},
    {"rope backward, inv_freq table", run_rope, &rope_bwd_table, SLOT(rope_backward), 1e-5, 0, 0},
    {"cross-entropy, ignored targets", run_cross_entropy, &ce_both, SLOT(cross_entropy), 1e-5, 0, 0},
    {"cross-entropy, dlogits in place", run_cross_entropy, &ce_in_place, SLOT(cross_entropy), 1e-5, 0, 0},
    {"cross-entropy, losses NULL", run_cross_entropy, &ce_no_losses, SLOT(cross_entropy), 1e-5, 0, 0},
    {"cross-entropy, dlogits NULL", run_cross_entropy, &ce_no_dlogits, SLOT(cross_entropy), 1e-5, 0, 0},
    {"cross-entropy, V 5000 in place", run_cross_entropy, &ce_large_vocab, SLOT(cross_entropy), 1e-5, 0, 0},
    {"adamw step 3, weight decay", run_adamw_step, NULL, SLOT(adamw_step), 1e-6, 0, 0},
    {"sum_squares", run_sum_squares, NULL, SLOT(sum_squares), 1e-12, 0, 0},
    {"scale", run_scale, NULL, SLOT(map) | SLOT(scale), 0, 0, 0},
    {"add_bias", run_add_bias, NULL, SLOT(add_bias), 0, 0, 0},
    {"bias_backward", run_bias_backward, NULL, SLOT(bias_backward), 1e-6, 0, 0},
};

const int conformance_layer_case_count = (int)(sizeof conformance_layer_cases / sizeof *conformance_layer_cases);
