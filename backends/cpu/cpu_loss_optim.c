/* The loss and optimizer ops of the CPU backend: fused softmax cross-entropy,
 * AdamW, and the small reductions of a training step (sum of squares, scale,
 * bias). Same rules as cpu_layers.c: OpenMP, the same bits for any thread
 * count, vectorised inner loops. */
#include "backends/cpu/cpu_layers.h"
#include "backends/cpu/cpu_simd.h"

#include <math.h>
#include <omp.h>
#include <string.h>

/* ---- cross-entropy -------------------------------------------------------- */

/* Logits per piece of the exponential pass: e^(z - m) is one vectorised loop into
 * memory (dz, or a stack buffer when only the loss is wanted), its sum another. */
#define CE_PIECE 512

static inline void exp_shifted(float *e, const float *z, float m, int64_t len)
{
#pragma omp simd
    for (int64_t j = 0; j < len; j++)
        e[j] = exp_fast(z[j] - m);
}

static inline double sum_f64(const float *x, int64_t len)
{
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < len; j++)
        s += (double)x[j];
    return s;
}

/* max_j z_j (NaNs skipped), as CE_LANES running maxima, one a vector lane, then the lanes:
 * an elementwise select that gcc and clang both vectorise (clang does not vectorise an
 * `omp simd reduction(max)` over floats without -ffast-math). A maximum does not depend
 * on the order it is taken in, so this is the serial loop's value. */
#define CE_LANES 16
static inline float max_row(const float *z, int64_t V)
{
    float lane[CE_LANES];
    for (int l = 0; l < CE_LANES; l++)
        lane[l] = -INFINITY;
    int64_t j = 0;
    for (; j + CE_LANES <= V; j += CE_LANES)
#pragma omp simd
        for (int l = 0; l < CE_LANES; l++)
            lane[l] = z[j + l] > lane[l] ? z[j + l] : lane[l];
    float m = -INFINITY;
    for (; j < V; j++)
        m = z[j] > m ? z[j] : m;
    for (int l = 0; l < CE_LANES; l++)
        m = lane[l] > m ? lane[l] : m;
    return m;
}

/* One row, target t >= 0, with m = max_j z_j and S = sum_j e^(z_j - m):
 *   loss = m + log S - z_t,   dz_j = grad_scale * (e^(z_j - m) / S - [j == t]).
 * z_t is read first, so the exponentials can be stored in dz even when dz is z.
 * S is summed by the same pieces with or without dz: the loss has the same bits. */
SIMD_CLONES static float cross_entropy_row(float *dz, const float *z, int32_t t, int64_t V, float grad_scale)
{
    const float zt = z[t];
    float buf[CE_PIECE];
    const float m = max_row(z, V);
    double sum = 0.0;
    for (int64_t j0 = 0; j0 < V; j0 += CE_PIECE) {
        const int64_t len = min64(CE_PIECE, V - j0);
        float *e = dz ? dz + j0 : buf;
        exp_shifted(e, z + j0, m, len);
        sum += sum_f64(e, len);
    }
    if (dz) {
        const float k = (float)((double)grad_scale / sum);
#pragma omp simd
        for (int64_t j = 0; j < V; j++)
            dz[j] *= k;
        dz[t] -= grad_scale;
    }
    return (float)((double)m + log(sum) - (double)zt);
}

usp_status cpu_cross_entropy(const usp_op *op)
{
    float *losses = op->operand[0].data, *dlogits = op->operand[1].data;
    const float *logits = op->operand[2].data;
    const int32_t *targets = op->operand[3].data;
    const int64_t n = op->p.loss.n, V = op->p.loss.V;
    const float grad_scale = op->p.loss.grad_scale;
    for (int64_t i = 0; i < n; i++)
        if (targets[i] >= V)
            return usp_error(USP_ERR_CONFIG,
                             "cross-entropy: target %d of row %lld is not a token of the vocabulary [0, %lld): "
                             "targets must be token ids below the vocabulary size, or negative to ignore the row",
                             (int)targets[i], (long long)i, (long long)V);
#pragma omp parallel for schedule(static) if (n * V >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) {
        float *dz = dlogits ? dlogits + i * V : NULL;
        float loss = 0.0f;
        if (targets[i] >= 0)
            loss = cross_entropy_row(dz, logits + i * V, targets[i], V, grad_scale);
        else if (dz)
            memset(dz, 0, (size_t)V * sizeof *dz);
        if (losses)
            losses[i] = loss;
    }
    return USP_OK;
}

/* ---- optimizer and reductions --------------------------------------------- */

/* Adam with decoupled weight decay (Loshchilov & Hutter; PyTorch's AdamW):
 *   m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2,
 *   p -= lr * ( (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * p ).
 * c1, c2 are the inverse bias corrections. */
SIMD_CLONES static void adamw_range(float *p, const float *grad, float *m, float *v, int64_t n, float lr, float b1,
                                    float b2, float eps, float wd, float c1, float c2)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float g = grad[i];
        const float mi = b1 * m[i] + (1.0f - b1) * g, vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi, v[i] = vi;
        p[i] -= lr * (mi * c1 / (sqrtf(vi * c2) + eps) + wd * p[i]);
    }
}

usp_status cpu_adamw_step(const usp_op *op)
{
    float *params = op->operand[0].data, *m = op->operand[2].data, *v = op->operand[3].data;
    const float *grads = op->operand[1].data;
    const int64_t n = op->p.adamw.n, t = op->p.adamw.t;
    const float lr = op->p.adamw.lr, beta1 = op->p.adamw.beta1, beta2 = op->p.adamw.beta2, eps = op->p.adamw.eps,
                weight_decay = op->p.adamw.weight_decay;
    const float c1 = (float)(1.0 / (1.0 - pow((double)beta1, (double)t)));
    const float c2 = (float)(1.0 / (1.0 - pow((double)beta2, (double)t)));
    const int64_t chunks = (n + ELEM_CHUNK - 1) / ELEM_CHUNK;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN)
    for (int64_t k = 0; k < chunks; k++) {
        const int64_t lo = k * ELEM_CHUNK, len = min64(ELEM_CHUNK, n - lo);
        adamw_range(params + lo, grads + lo, m + lo, v + lo, len, lr, beta1, beta2, eps, weight_decay, c1, c2);
    }
    return USP_OK;
}

/* A fixed number of chunks with bounds from n alone, each summed in 8 lanes of
 * fixed order (written out, so neither the thread count nor the vector width
 * nor the buffer's alignment moves a rounding). Products of two floats are
 * exact in double. */
#define SUMSQ_CHUNKS 64
#define SUMSQ_LANES 8

SIMD_CLONES static double sum_squares_chunk(const float *x, int64_t n)
{
    double lane[SUMSQ_LANES] = {0};
    int64_t i = 0;
    for (; i + SUMSQ_LANES <= n; i += SUMSQ_LANES)
        for (int l = 0; l < SUMSQ_LANES; l++)
            lane[l] += (double)x[i + l] * (double)x[i + l];
    for (int l = 0; i < n; i++, l++)
        lane[l] += (double)x[i] * (double)x[i];
    double s = 0.0;
    for (int l = 0; l < SUMSQ_LANES; l++)
        s += lane[l];
    return s;
}

usp_status cpu_sum_squares(const usp_op *op)
{
    const float *x = op->operand[0].data;
    const int64_t n = op->p.sum.n;
    double *out = op->p.sum.out;
    double part[SUMSQ_CHUNKS];
    const int64_t chunk = (n + SUMSQ_CHUNKS - 1) / SUMSQ_CHUNKS;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN)
    for (int k = 0; k < SUMSQ_CHUNKS; k++) {
        const int64_t lo = min64(k * chunk, n), hi = min64(lo + chunk, n);
        part[k] = sum_squares_chunk(x + lo, hi - lo);
    }
    double total = 0.0;
    for (int k = 0; k < SUMSQ_CHUNKS; k++)
        total += part[k];
    *out = total;
    return USP_OK;
}

usp_status cpu_add_bias(const usp_op *op)
{
    float *x = op->operand[0].data;
    const float *bias = op->operand[1].data;
    const int64_t n = op->p.rows.n, C = op->p.rows.C;
#pragma omp parallel for schedule(static) if (n * C >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
    {
        float *row = x + i * C;
#pragma omp simd
        for (int64_t c = 0; c < C; c++)
            row[c] += bias[c];
    }
    return USP_OK;
}

/* Columns [c0, c0 + width) of dbias += sum_rows dout, rows in order. */
SIMD_CLONES static void bias_grads_block(float *dbias, const float *dout, int64_t n, int64_t C, int64_t c0,
                                         int64_t width)
{
    double acc[COL_BLOCK_MAX] = {0};
    for (int64_t i = 0; i < n; i++) {
        const float *dy = dout + i * C + c0;
#pragma omp simd
        for (int64_t c = 0; c < width; c++)
            acc[c] += (double)dy[c];
    }
    for (int64_t c = 0; c < width; c++)
        dbias[c0 + c] += (float)acc[c];
}

usp_status cpu_bias_backward(const usp_op *op)
{
    float *dbias = op->operand[0].data;
    const float *dout = op->operand[1].data;
    const int64_t n = op->p.rows.n, C = op->p.rows.C;
    const int64_t width = col_block_width(C), blocks = (C + width - 1) / width;
#pragma omp parallel for schedule(static) if (n * C >= PARALLEL_MIN)
    for (int64_t b = 0; b < blocks; b++)
        bias_grads_block(dbias, dout, n, C, b * width, min64(width, C - b * width));
    return USP_OK;
}
