/* The bf16 cases of the op-conformance table, continued (tests/conformance_bf16.c
 * has the rationale of the tolerances): the layer ops of a bf16 step with the
 * dtypes core/model gives them. Activations, weights and the gradients of
 * activations are stored (bf16 where the backend stores it); the residual
 * stream, weight gradients, mean, rstd, losses and logits are fp32. So a norm
 * reads the fp32 residual and writes a bf16 output, its backward adds into the
 * input's gradient and into fp32 weight gradients; the embedding reads bf16
 * tables into the fp32 residual and its backward adds bf16 gradients into fp32
 * tables. Where a step may also store the residual or its gradient in bf16, a
 * second case covers that mix. */
#include <math.h>

#include "tests/conformance.h"

/* ---- embedding ----------------------------------------------------------------------------- */

#define EMB_N 13
#define EMB_C 24
#define EMB_V 11
#define EMB_P 16
/* The largest id of each table is used: the slot's view of a table is one row (the wrapper cannot
 * know the vocabulary), so a backend that widens or copies a table must reach the rows the ids name. */
static const int32_t emb_tokens[EMB_N] = {3, 1, 3, 0, 10, 3, 6, 1, 1, 9, 3, 0, 5};
static const int32_t emb_positions[EMB_N] = {4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 4};

typedef struct embedding_bf16_params {
    int backward, with_wpe;
    int out; /* forward: 1, the output stored; 0, fp32 (the residual stream) */
} embedding_bf16_params;

/* Forward: out = wte[tokens] + wpe[positions], tables stored; backward: stored dout added into
 * fp32 dwte and dwpe (random: earlier contributions), rows of a repeated token in order. */
static void run_embedding_bf16(conformance_run *r, const void *params)
{
    const embedding_bf16_params *p = params;
    int32_t *tokens = conformance_ids(r, emb_tokens, EMB_N);
    int32_t *positions = p->with_wpe ? conformance_ids(r, emb_positions, EMB_N) : NULL;
    if (!p->backward) {
        float *wte = conformance_input_stored(r, EMB_V * EMB_C, 1);
        float *wpe = p->with_wpe ? conformance_input_stored(r, EMB_P * EMB_C, 1) : NULL;
        float *out = conformance_result(r, p->out, EMB_N * EMB_C);
        CONFORMANCE_OK(r, usp_embedding_forward(r->be, out, tokens, positions, wte, wpe, EMB_N, EMB_C, NULL));
        conformance_download_stored(r, "out", out, EMB_N * EMB_C);
        return;
    }
    float *dwte = conformance_input(r, EMB_V * EMB_C, 1);
    float *dwpe = p->with_wpe ? conformance_input(r, EMB_P * EMB_C, 1) : NULL;
    float *dout = conformance_input_stored(r, EMB_N * EMB_C, 1);
    CONFORMANCE_OK(r, usp_embedding_backward(r->be, dwte, dwpe, dout, tokens, positions, EMB_N, EMB_C, NULL));
    conformance_download(r, "dwte", dwte, EMB_V * EMB_C);
    if (p->with_wpe)
        conformance_download(r, "dwpe", dwpe, EMB_P * EMB_C);
}

/* {backward, with_wpe, out stored} */
static const embedding_bf16_params emb_fwd = {0, 1, 0}, emb_fwd_rope = {0, 0, 0}, emb_fwd_stored = {0, 1, 1};
static const embedding_bf16_params emb_bwd = {1, 1, 0}, emb_bwd_rope = {1, 0, 0};

/* ---- layernorm and rmsnorm ------------------------------------------------------------------- */

#define NORM_N 9
#define NORM_C 96

typedef struct norm_bf16_params {
    int layernorm; /* 0: rmsnorm */
    int inp;       /* 1: the input stored; 0: fp32 (the residual stream) */
    int dinp;      /* 1: its gradient stored; 0: fp32 */
    int dweight;   /* 1: the weight's gradient stored; 0: fp32 (a step's) */
} norm_bf16_params;

/* Forward from inp (rows of scale 2, the first shifted by 3: a large mean beside a small variance)
 * into a stored out, mean and rstd fp32; then the backward from a stored dout, added into dinp
 * and into the weight's and bias's gradients (random: earlier contributions). */
static void run_norm_bf16(conformance_run *r, const void *params)
{
    const norm_bf16_params *p = params;
    const int64_t nc = NORM_N * NORM_C;
    float *x = conformance_host(r, nc, 2);
    for (int64_t c = 0; c < NORM_C; c++)
        x[c] += 3.0f;
    float *inp = p->inp ? conformance_upload_stored(r, x, nc) : conformance_upload(r, x, nc);
    float *weight = conformance_input_stored(r, NORM_C, 1), *bias = NULL, *mean = NULL;
    if (p->layernorm)
        bias = conformance_input_stored(r, NORM_C, 1), mean = conformance_output_buffer(r, NORM_N);
    float *rstd = conformance_output_buffer(r, NORM_N), *out = conformance_output_stored(r, nc);
    CONFORMANCE_OK(r, p->layernorm ? usp_layernorm_forward(r->be, out, mean, rstd, inp, weight, bias, NORM_N, NORM_C,
                                                           1e-5f, NULL)
                                   : usp_rmsnorm_forward(r->be, out, rstd, inp, weight, NORM_N, NORM_C, 1e-5f, NULL));
    conformance_download_stored(r, "out", out, nc);
    if (p->layernorm)
        conformance_download(r, "mean", mean, NORM_N);
    conformance_download(r, "rstd", rstd, NORM_N);
    float *dout = conformance_input_stored(r, nc, 1), *dinp = conformance_operand(r, p->dinp, nc, 1);
    float *dweight = conformance_operand(r, p->dweight, NORM_C, 1);
    float *dbias = p->layernorm ? conformance_input(r, NORM_C, 1) : NULL;
    CONFORMANCE_OK(r, p->layernorm ? usp_layernorm_backward(r->be, dinp, dweight, dbias, dout, inp, weight, mean, rstd,
                                                            NORM_N, NORM_C, NULL)
                                   : usp_rmsnorm_backward(r->be, dinp, dweight, dout, inp, weight, rstd, NORM_N,
                                                          NORM_C, NULL));
    conformance_download_stored(r, "dinp", dinp, nc);
    conformance_download_stored(r, "dweight", dweight, NORM_C);
    if (p->layernorm)
        conformance_download(r, "dbias", dbias, NORM_C);
}

/* {layernorm, inp, dinp, dweight stored} */
static const norm_bf16_params rmsnorm_all_stored = {0, 1, 1, 1};
static const norm_bf16_params rmsnorm_step = {0, 0, 1, 0}, rmsnorm_f32_dinp = {0, 1, 0, 0};
static const norm_bf16_params layernorm_step = {1, 0, 1, 0}, layernorm_f32_dinp = {1, 1, 0, 0};

/* ---- activations ------------------------------------------------------------------------------- */

#define ACT_N 777

/* gelu forward and backward, every operand stored; inputs of scale 4 reach the tails. */
static void run_gelu_bf16(conformance_run *r, const void *params)
{
    (void)params;
    float *inp = conformance_input_stored(r, ACT_N, 4), *out = conformance_output_stored(r, ACT_N);
    CONFORMANCE_OK(r, usp_gelu_tanh_forward(r->be, out, inp, ACT_N, NULL));
    conformance_download_stored(r, "out", out, ACT_N);
    float *dout = conformance_input_stored(r, ACT_N, 1), *dinp = conformance_output_stored(r, ACT_N);
    CONFORMANCE_OK(r, usp_gelu_tanh_backward(r->be, dinp, inp, dout, ACT_N, NULL));
    conformance_download_stored(r, "dinp", dinp, ACT_N);
}

static void run_swiglu_forward_bf16(conformance_run *r, const void *params)
{
    (void)params;
    const int64_t n = 300;
    float *gate = conformance_input_stored(r, n, 3), *up = conformance_input_stored(r, n, 3);
    float *out = conformance_output_stored(r, n);
    CONFORMANCE_OK(r, usp_swiglu_forward(r->be, out, gate, up, n, NULL));
    conformance_download_stored(r, "out", out, n);
}

/* dgate and dup overwritten, every operand stored. */
static void run_swiglu_backward_bf16(conformance_run *r, const void *params)
{
    (void)params;
    float *gate = conformance_input_stored(r, ACT_N, 4), *up = conformance_input_stored(r, ACT_N, 4);
    float *dout = conformance_input_stored(r, ACT_N, 1);
    float *dgate = conformance_output_stored(r, ACT_N), *dup = conformance_output_stored(r, ACT_N);
    CONFORMANCE_OK(r, usp_swiglu_backward(r->be, dgate, dup, gate, up, dout, ACT_N, NULL));
    conformance_download_stored(r, "dgate", dgate, ACT_N);
    conformance_download_stored(r, "dup", dup, ACT_N);
}

/* ---- rope ------------------------------------------------------------------------------------------ */

typedef struct rope_bf16_params {
    int backward;
    int table; /* 1: a host inv_freq table (Llama 3's scaling) instead of theta's frequencies */
} rope_bf16_params;

/* Global positions, some far from 0 (a later shard of the sequence). */
static const int32_t rope_positions[] = {100, 101, 102, 7, 8, 9, 0, 1, 4000};
#define ROPE_N 9
#define ROPE_H 3
#define ROPE_D 64

/* q or k [n, H, D] stored, rotated in place (forward) or by the inverse rotation (backward). */
static void run_rope_bf16(conformance_run *r, const void *params)
{
    const rope_bf16_params *p = params;
    double inv_freq[ROPE_D / 2];
    for (int i = 0; i < ROPE_D / 2; i++)
        inv_freq[i] = pow(500000.0, -2.0 * i / (double)ROPE_D) / (i >= ROPE_D / 4 ? 8.0 : 1.0);
    const double *table = p->table ? inv_freq : NULL;
    int32_t *positions = conformance_ids(r, rope_positions, ROPE_N);
    float *x = conformance_input_stored(r, ROPE_N * ROPE_H * ROPE_D, 1);
    CONFORMANCE_OK(r, p->backward
                          ? usp_rope_backward(r->be, x, positions, ROPE_N, ROPE_H, ROPE_D, 10000.0f, table, NULL)
                          : usp_rope_forward(r->be, x, positions, ROPE_N, ROPE_H, ROPE_D, 10000.0f, table, NULL));
    conformance_download_stored(r, "x", x, ROPE_N * ROPE_H * ROPE_D);
}

static const rope_bf16_params rope_fwd = {0, 0}, rope_bwd = {1, 0}, rope_fwd_table = {0, 1};

/* ---- the loss ------------------------------------------------------------------------------------- */

/* A step's logits are fp32 (core/model/model_head.c): no bf16 operand reaches the cross-entropy
 * there. This case stores them anyway, dlogits over the logits as the step passes them: the one
 * slot whose written operand is also an input at the same address, which a backend that widens
 * operands must widen once (backends/cpu/cpu_widen.c). Targets < 0 are ignored. */
static const int32_t ce_targets[] = {3, -1, 49, 0, -100, 17, 17};

static void run_cross_entropy_bf16(conformance_run *r, const void *params)
{
    (void)params;
    const int64_t n = 7, V = 50;
    int32_t *targets = conformance_ids(r, ce_targets, n);
    float *logits = conformance_input_stored(r, n * V, 5), *losses = conformance_output_buffer(r, n);
    CONFORMANCE_OK(r, usp_cross_entropy(r->be, losses, logits, logits, targets, n, V, 0.2f, NULL));
    conformance_download(r, "losses", losses, n);
    conformance_download_stored(r, "dlogits", logits, n * V);
}

/* ---- biases and the gradients' reductions ------------------------------------------------------------ */

typedef struct with_x_params {
    int x; /* 1: x stored (q, k, v, the MLP's hidden); 0: fp32 (the residual stream) */
} with_x_params;

/* x [5, 33] += bias [33], the bias stored. */
static void run_add_bias_bf16(conformance_run *r, const void *params)
{
    const int stored = ((const with_x_params *)params)->x;
    float *x = conformance_operand(r, stored, 5 * 33, 1), *bias = conformance_input_stored(r, 33, 1);
    CONFORMANCE_OK(r, usp_add_bias(r->be, x, bias, 5, 33, NULL));
    conformance_download_stored(r, "x", x, 5 * 33);
}

static const with_x_params x_stored = {1}, x_f32 = {0};

/* fp32 dbias [9] += the column sums of a stored dout [37, 9]. */
static void run_bias_backward_bf16(conformance_run *r, const void *params)
{
    (void)params;
    float *dbias = conformance_input(r, 9, 1), *dout = conformance_input_stored(r, 37 * 9, 1);
    CONFORMANCE_OK(r, usp_bias_backward(r->be, dbias, dout, 37, 9, NULL));
    conformance_download(r, "dbias", dbias, 9);
}

/* A step's gradients are fp32 (the fp32 table's cases); stored ones are scaled and summed alike. */
static void run_scale_bf16(conformance_run *r, const void *params)
{
    (void)params;
    float *x = conformance_input_stored(r, 257, 1);
    CONFORMANCE_OK(r, usp_scale(r->be, x, -0.37f, 257, NULL));
    conformance_download_stored(r, "x", x, 257);
}

static void run_sum_squares_bf16(conformance_run *r, const void *params)
{
    (void)params;
    float *x = conformance_input_stored(r, 1001, 1);
    double sum = -1.0;
    CONFORMANCE_OK(r, usp_sum_squares(r->be, &sum, x, 1001, NULL));
    conformance_scalar(r, "sum", sum);
}

/* ---- the table ----------------------------------------------------------------------------------------- */

#define RMSNORM (SLOT(rmsnorm_forward) | SLOT(rmsnorm_backward))
#define LAYERNORM (SLOT(layernorm_forward) | SLOT(layernorm_backward))

/* Tolerances as in conformance_bf16.c: a stored output is one rounding of the fp32 result, a
 * stored weight gradient too (a sum over rows, rounded once): <= 1/2 BF16_ULP on cpu and lazy, and
 * 1 ulp leaves another backend's fp32 order room to round the other way. Outputs kept in fp32
 * (tol_f32) are held to the fp32 table's bound for the same op: 1e-6 for the embedding's and the
 * bias's sums of a few rows, 1e-5 for row reductions (norm statistics and weight gradients, the
 * losses), 1e-7 for one fp32 add (bitwise on every backend so far), 1e-12 for the sum of squares
 * in double. */
const conformance_case conformance_bf16_layer_cases[] = {
    {"bf16: embedding forward into the fp32 residual", run_embedding_bf16, &emb_fwd, SLOT(embedding_forward),
     BF16_ULP, 1, 1e-6},
    {"bf16: embedding forward without wpe, fp32 out", run_embedding_bf16, &emb_fwd_rope, SLOT(embedding_forward),
     BF16_ULP, 1, 1e-6},
    {"bf16: embedding forward into a bf16 out", run_embedding_bf16, &emb_fwd_stored, SLOT(embedding_forward),
     BF16_ULP, 1, 1e-6},
    {"bf16: embedding backward into fp32 dwte and dwpe", run_embedding_bf16, &emb_bwd, SLOT(embedding_backward),
     BF16_ULP, 1, 1e-6},
    {"bf16: embedding backward into fp32 dwte, no wpe", run_embedding_bf16, &emb_bwd_rope, SLOT(embedding_backward),
     BF16_ULP, 1, 1e-6},
    {"bf16: rmsnorm forward and backward", run_norm_bf16, &rmsnorm_all_stored, RMSNORM, BF16_ULP, 1, 1e-5},
    {"bf16: rmsnorm of the fp32 residual, fp32 dweight", run_norm_bf16, &rmsnorm_step, RMSNORM, BF16_ULP, 1, 1e-5},
    {"bf16: rmsnorm of a bf16 input, fp32 dinp and dweight", run_norm_bf16, &rmsnorm_f32_dinp, RMSNORM, BF16_ULP, 1,
     1e-5},
    {"bf16: layernorm of the fp32 residual, fp32 dweight, dbias", run_norm_bf16, &layernorm_step, LAYERNORM,
     BF16_ULP, 1, 1e-5},
    {"bf16: layernorm of a bf16 input, fp32 dinp", run_norm_bf16, &layernorm_f32_dinp, LAYERNORM, BF16_ULP, 1, 1e-5},
    {"bf16: gelu forward and backward", run_gelu_bf16, NULL, SLOT(gelu_tanh_forward) | SLOT(gelu_tanh_backward),
     BF16_ULP, 1, 0},
    {"bf16: swiglu forward", run_swiglu_forward_bf16, NULL, SLOT(swiglu_forward), BF16_ULP, 1, 0},
    {"bf16: swiglu backward", run_swiglu_backward_bf16, NULL, SLOT(swiglu_backward), BF16_ULP, 1, 0},
    {"bf16: rope forward in place, theta, D 64", run_rope_bf16, &rope_fwd, SLOT(rope_forward), BF16_ULP, 1, 0},
    {"bf16: rope backward in place, theta, D 64", run_rope_bf16, &rope_bwd, SLOT(rope_backward), BF16_ULP, 1, 0},
    {"bf16: rope forward in place, inv_freq table", run_rope_bf16, &rope_fwd_table, SLOT(rope_forward), BF16_ULP, 1,
     0},
    {"bf16: cross-entropy, bf16 logits, dlogits in place", run_cross_entropy_bf16, NULL, SLOT(cross_entropy),
     BF16_ULP, 1, 1e-5},
    {"bf16: add_bias into bf16 x", run_add_bias_bf16, &x_stored, SLOT(add_bias), BF16_ULP, 1, 0},
    {"bf16: add_bias into the fp32 residual", run_add_bias_bf16, &x_f32, SLOT(add_bias), BF16_ULP, 1, 1e-7},
    {"bf16: bias_backward into fp32 dbias", run_bias_backward_bf16, NULL, SLOT(bias_backward), BF16_ULP, 1, 1e-6},
    {"bf16: scale", run_scale_bf16, NULL, SLOT(scale), BF16_ULP, 1, 0},
    {"bf16: sum_squares", run_sum_squares_bf16, NULL, SLOT(sum_squares), BF16_ULP, 1, 1e-12},
};

const int conformance_bf16_layer_case_count =
    (int)(sizeof conformance_bf16_layer_cases / sizeof *conformance_bf16_layer_cases);
