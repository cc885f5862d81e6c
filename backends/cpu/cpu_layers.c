/* Transformer layer ops on the CPU: embedding, layernorm, rmsnorm and rotary
 * embeddings (cpu_map.c has the element-wise ones, GELU and SwiGLU; cpu_loss_optim.c
 * the loss, AdamW and the small reductions of a training step).
 *
 * The shape is llm.c's train_gpt2.c (outputs first, dimensions last, one free
 * function per op), with three differences that matter at long context on many
 * cores. Every op runs under OpenMP, the backward passes included. Every
 * result is bitwise the same for any thread count: a row-parallel loop gives
 * that for free (a row is one thread's); the sums over rows that make
 * parameter gradients (dweight, dbias) are split by column blocks instead, each
 * thread walking all rows of its columns in order, and the embedding gradient
 * by table row (token id modulo the thread count), each owner adding its rows
 * in order: no float atomics, no order that depends on the schedule. And the
 * inner loops vectorise: a row or a chunk is a function compiled for AVX-512,
 * AVX2 and SSE2 (picked at load time), and exp is a branch-free polynomial,
 * because a call to libm's expf or tanhf in a loop stops vectorisation (GELU
 * through tanhf was 20x slower on one core, measured). Row statistics and
 * column sums are accumulated in double: free next to the memory traffic, and a
 * sum over a million rows stays accurate.
 *
 * Layout: activations are row-major [n, C] with n = batch * tokens. */
#include "backends/cpu/cpu_layers.h"
#include "backends/cpu/cpu_simd.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* ---- embedding ---------------------------------------------------------- */

SIMD_CLONES static void add_rows(float *dst, const float *a, const float *b, int64_t C)
{
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
        dst[c] = a[c] + b[c];
}

usp_status cpu_embedding_forward(const usp_op *op)
{
    float *out = op->operand[0].data;
    const int32_t *tokens = op->operand[1].data, *positions = op->operand[4].data;
    const float *wte = op->operand[2].data, *wpe = op->operand[3].data;
    const int64_t n = op->p.rows.n, C = op->p.rows.C;
#pragma omp parallel for schedule(static) if (n * C >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        const float *e = wte + (int64_t)tokens[i] * C;
        if (wpe)
            add_rows(out + i * C, e, wpe + (int64_t)positions[i] * C, C);
        else
            memcpy(out + i * C, e, (size_t)C * sizeof *out);
    }
    return USP_OK;
}

/* table[ids[i]] += rows[i]. Rows that share an id add into the same table row,
 * so each table row has one owner thread (id mod threads), which adds its rows
 * in row order: the sum of every element is the same for any thread count, and
 * a row is added whole (contiguous, unlike a split by columns). */
static void scatter_add_rows(float *table, const float *rows, const int32_t *ids, int64_t n, int64_t C)
{
#pragma omp parallel if (n * C >= PARALLEL_MIN)
    {
        const int32_t owners = omp_get_num_threads(), me = omp_get_thread_num();
        for (int64_t i = 0; i < n; i++)
            if (ids[i] % owners == me)
                add_rows(table + (int64_t)ids[i] * C, table + (int64_t)ids[i] * C, rows + i * C, C);
    }
}

usp_status cpu_embedding_backward(const usp_op *op)
{
    float *dwte = op->operand[0].data, *dwpe = op->operand[1].data;
    const float *dout = op->operand[2].data;
    const int32_t *tokens = op->operand[3].data, *positions = op->operand[4].data;
    const int64_t n = op->p.rows.n, C = op->p.rows.C;
    scatter_add_rows(dwte, dout, tokens, n, C);
    if (dwpe)
        scatter_add_rows(dwpe, dout, positions, n, C);
    return USP_OK;
}

/* ---- layernorm and rmsnorm --------------------------------------------- */

/* y = (x - mean) * rstd * w + b, rstd = 1/sqrt(var + eps), biased variance (PyTorch's LayerNorm). */
SIMD_CLONES static void layernorm_row(float *y, float *mean, float *rstd, const float *x, const float *w,
                                      const float *b, int64_t C, float eps)
{
    double s = 0.0, v = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; c++)
        s += (double)x[c];
    const float m = (float)(s / (double)C);
#pragma omp simd reduction(+ : v)
    for (int64_t c = 0; c < C; c++) {
        const double d = (double)(x[c] - m);
        v += d * d;
    }
    const float r = (float)(1.0 / sqrt(v / (double)C + (double)eps));
    if (b) {
#pragma omp simd
        for (int64_t c = 0; c < C; c++)
            y[c] = (x[c] - m) * r * w[c] + b[c];
    } else {
#pragma omp simd
        for (int64_t c = 0; c < C; c++)
            y[c] = (x[c] - m) * r * w[c];
    }
    *mean = m, *rstd = r;
}

usp_status cpu_layernorm_forward(const usp_op *op)
{
    float *out = op->operand[0].data, *mean = op->operand[1].data, *rstd = op->operand[2].data;
    const float *inp = op->operand[3].data, *weight = op->operand[4].data, *bias = op->operand[5].data;
    const int64_t n = op->p.rows.n, C = op->p.rows.C;
    const float eps = op->p.rows.eps;
#pragma omp parallel for schedule(static) if (n * C >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        float m, r;
        layernorm_row(out + i * C, &m, &r, inp + i * C, weight, bias, C, eps);
        if (mean)
            mean[i] = m;
        if (rstd)
            rstd[i] = r;
    }
    return USP_OK;
}

/* With xh = (x - mean) * rstd and g = w * dy (llm.c's derivation):
 *   dx += rstd * (g - mean(g) - xh * mean(g * xh)). */
SIMD_CLONES static void layernorm_row_backward(float *dx, const float *dy, const float *x, const float *w, float m,
                                               float r, int64_t C)
{
    double sg = 0.0, sgx = 0.0;
#pragma omp simd reduction(+ : sg, sgx)
    for (int64_t c = 0; c < C; c++) {
        const float g = w[c] * dy[c];
        sg += (double)g;
        sgx += (double)(g * ((x[c] - m) * r));
    }
    const float g_mean = (float)(sg / (double)C), gx_mean = (float)(sgx / (double)C);
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
        dx[c] += (w[c] * dy[c] - g_mean - (x[c] - m) * r * gx_mean) * r;
}

/* Columns [c0, c0 + width) of dw += sum_rows dy * xh and db += sum_rows dy, with
 * xh = (x - mean) * rstd (mean NULL: rmsnorm's xh = x * rstd; db NULL: none). */
SIMD_CLONES static void norm_param_grads_block(float *dw, float *db, const float *dout, const float *inp,
                                               const float *mean, const float *rstd, int64_t n, int64_t C,
                                               int64_t c0, int64_t width)
{
    double aw[COL_BLOCK_MAX] = {0}, ab[COL_BLOCK_MAX] = {0};
    for (int64_t i = 0; i < n; i++) {
        const float *x = inp + i * C + c0, *dy = dout + i * C + c0;
        const float m = mean ? mean[i] : 0.0f, r = rstd[i];
#pragma omp simd
        for (int64_t c = 0; c < width; c++) {
            aw[c] += (double)(dy[c] * ((x[c] - m) * r));
            ab[c] += (double)dy[c];
        }
    }
    for (int64_t c = 0; c < width; c++) {
        dw[c0 + c] += (float)aw[c];
        if (db)
            db[c0 + c] += (float)ab[c];
    }
}


static void norm_param_grads(float *dw, float *db, const float *dout, const float *inp, const float *mean,
                             const float *rstd, int64_t n, int64_t C)
{
    const int64_t width = col_block_width(C), blocks = (C + width - 1) / width;
#pragma omp parallel for schedule(static) if (n * C >= PARALLEL_MIN)
    for (int64_t b = 0; b < blocks; b++)
        norm_param_grads_block(dw, db, dout, inp, mean, rstd, n, C, b * width, min64(width, C - b * width));
}

usp_status cpu_layernorm_backward(const usp_op *op)
{
    float *dinp = op->operand[0].data, *dweight = op->operand[1].data, *dbias = op->operand[2].data;
    const float *dout = op->operand[3].data, *inp = op->operand[4].data, *weight = op->operand[5].data;
    const float *mean = op->operand[6].data, *rstd = op->operand[7].data;
    const int64_t n = op->p.rows.n, C = op->p.rows.C;
#pragma omp parallel for schedule(static) if (n * C >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        layernorm_row_backward(dinp + i * C, dout + i * C, inp + i * C, weight, mean[i], rstd[i], C);
    norm_param_grads(dweight, dbias, dout, inp, mean, rstd, n, C);
    return USP_OK;
}

SIMD_CLONES static float rmsnorm_row(float *y, const float *x, const float *w, int64_t C, float eps)
{
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; c++)
        ss += (double)x[c] * (double)x[c];
    const float r = (float)(1.0 / sqrt(ss / (double)C + (double)eps));
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
        y[c] = x[c] * r * w[c];
    return r;
}

usp_status cpu_rmsnorm_forward(const usp_op *op)
{
    float *out = op->operand[0].data, *rstd = op->operand[1].data;
    const float *inp = op->operand[2].data, *weight = op->operand[3].data;
    const int64_t n = op->p.rows.n, C = op->p.rows.C;
    const float eps = op->p.rows.eps;
#pragma omp parallel for schedule(static) if (n * C >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        const float r = rmsnorm_row(out + i * C, inp + i * C, weight, C, eps);
        if (rstd)
            rstd[i] = r;
    }
    return USP_OK;
}

/* y = x * r * w with r = (mean(x^2) + eps)^(-1/2), so dr/dx_c = -r^3 x_c / C and
 *   dx += r * w * dy - (r^3 / C) * x * sum_c(w_c dy_c x_c). */
SIMD_CLONES static void rmsnorm_row_backward(float *dx, const float *dy, const float *x, const float *w, float r,
                                             int64_t C)
{
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < C; c++)
        s += (double)(w[c] * dy[c] * x[c]);
    const float k = (float)((double)r * r * r * s / (double)C);
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
        dx[c] += r * w[c] * dy[c] - k * x[c];
}

usp_status cpu_rmsnorm_backward(const usp_op *op)
{
    float *dinp = op->operand[0].data, *dweight = op->operand[1].data;
    const float *dout = op->operand[2].data, *inp = op->operand[3].data, *weight = op->operand[4].data;
    const float *rstd = op->operand[5].data;
    const int64_t n = op->p.rows.n, C = op->p.rows.C;
#pragma omp parallel for schedule(static) if (n * C >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        rmsnorm_row_backward(dinp + i * C, dout + i * C, inp + i * C, weight, rstd[i], C);
    norm_param_grads(dweight, NULL, dout, inp, NULL, rstd, n, C); /* dw = sum_rows dy * x * r */
    return USP_OK;
}

/* ---- rotary embeddings --------------------------------------------------- */

/* Pairs processed per batch of angles: cos and sin for ROPE_BATCH pairs serve all heads. */
#define ROPE_BATCH 32

/* (a, b) -> (a cos - b sin, b cos + a sin) for `len` pairs of every head of one row. */
SIMD_CLONES static void rope_apply(float *row, const float *cs, const float *sn, int64_t H, int64_t D, int64_t j0,
                                   int64_t len)
{
    const int64_t half = D / 2;
    for (int64_t h = 0; h < H; h++) {
        float *a = row + h * D + j0, *b = a + half;
#pragma omp simd
        for (int64_t j = 0; j < len; j++) {
            const float x = a[j], y = b[j];
            a[j] = x * cs[j] - y * sn[j];
            b[j] = y * cs[j] + x * sn[j];
        }
    }
}

/* Hugging Face Llama's rotate_half: dims j and j + D/2 of each head form a pair,
 * angle = position * theta^(-2j/D) (or * table[j]); sign = -1 rotates by minus the angle, the
 * transpose (and inverse). The angle and its cos/sin are computed in double: at
 * position 10^6 a float angle is off by up to 0.03 rad, more than the relative
 * position it encodes (Hugging Face computes it in float32; the two agree to
 * float precision at the positions checkpoints are trained at, a few thousand).
 * The frequencies are the running product (theta^(-2/D))^j, off from pow() by j
 * ulps of a double. */
static void rope_rotate(float *x, const int32_t *positions, int64_t n, int64_t H, int64_t D, float theta,
                        const double *table, double sign)
{
    const int64_t half = D / 2;
    const double ratio = pow((double)theta, -2.0 / (double)D);
#pragma omp parallel for schedule(static) if (n * H * D >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        float cs[ROPE_BATCH], sn[ROPE_BATCH];
        double inv_freq = 1.0;
        for (int64_t j0 = 0; j0 < half; j0 += ROPE_BATCH) {
            const int64_t len = min64(ROPE_BATCH, half - j0);
            for (int64_t j = 0; j < len; j++, inv_freq *= ratio) {
                double s, c;
                sincos((double)positions[i] * (table ? table[j0 + j] : inv_freq), &s, &c);
                cs[j] = (float)c, sn[j] = (float)(sign * s);
            }
            rope_apply(x + i * H * D, cs, sn, H, D, j0, len);
        }
    }
}

usp_status cpu_rope_forward(const usp_op *op)
{
    rope_rotate(op->operand[0].data, op->operand[1].data, op->p.rope.n, op->p.rope.H, op->p.rope.D, op->p.rope.theta,
                op->p.rope.inv_freq, 1.0);
    return USP_OK;
}

/* The forward is y = R x with R orthogonal, so dx = R^T dy: the rotation by -angle. */
usp_status cpu_rope_backward(const usp_op *op)
{
    rope_rotate(op->operand[0].data, op->operand[1].data, op->p.rope.n, op->p.rope.H, op->p.rope.D, op->p.rope.theta,
                op->p.rope.inv_freq, -1.0);
    return USP_OK;
}
