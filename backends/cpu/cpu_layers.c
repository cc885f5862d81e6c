/* Transformer layer ops on the CPU: embedding, layernorm, rmsnorm, GELU, SwiGLU,
 * rotary embeddings, fused softmax cross-entropy, AdamW, and the small
 * reductions of a training step (sum of squares, scale, bias).
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

/* Below this many elements an op stays on one thread: waking the pool costs more. */
#define PARALLEL_MIN ((int64_t)1 << 15)
/* Elements per task of the elementwise ops. */
#define ELEM_CHUNK ((int64_t)1 << 13)
/* Column blocks of the sums over rows: a multiple of one 64-byte cache line of
 * floats, at most COL_BLOCK_MAX wide (the double accumulators live on the stack). */
#define COL_ALIGN 16
#define COL_BLOCK_MAX 512
/* sqrt(2 / pi), GPT-2's GELU. */
#define GELU_K 0.7978845608028654f


/* e^x within a few ulp, branch-free (Cephes expf): x = n ln2 + r with
 * n = round(x log2 e) and ln2 split in two (Cody-Waite) so that r is exact,
 * e^r for |r| <= ln2/2 by a degree-6 polynomial, times 2^n built from exponent
 * bits as 2^(n/2) 2^(n - n/2) (n reaches 128, one more than a float exponent).
 * Adding 1.5 * 2^23 rounds to an integer held in the low mantissa bits. Like
 * expf, +inf above 88.72 and NaN stays NaN; 0 below -87.34 (where expf would
 * return a denormal). */
static inline float exp_fast(float x)
{
    const float magic = 12582912.0f, lo = -87.33654f, hi = 88.72283f;
    const float xc = x < lo ? lo : (x > hi ? hi : x);
    union { float f; uint32_t u; } nb, a, b;
    nb.f = xc * 1.44269504088896341f + magic;
    const float n = nb.f - magic;
    const int32_t ni = (int32_t)(nb.u - 0x4B400000u), n1 = ni / 2; /* ni in [-126, 128] */
    a.u = (uint32_t)(n1 + 127) << 23;
    b.u = (uint32_t)(ni - n1 + 127) << 23;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    const float y = (p * r * r + r + 1.0f) * a.f * b.f;
    return x != x ? x : (x < lo ? 0.0f : (x > hi ? INFINITY : y));
}

/* tanh(u) = 1 - 2 / (e^2u + 1): exact limits +-1, absolute error ~1e-7 near 0. */
static inline float tanh_fast(float u) { return 1.0f - 2.0f / (exp_fast(2.0f * u) + 1.0f); }

/* ---- embedding ---------------------------------------------------------- */

SIMD_CLONES static void add_rows(float *dst, const float *a, const float *b, int64_t C)
{
#pragma omp simd
    for (int64_t c = 0; c < C; c++)
        dst[c] = a[c] + b[c];
}

usp_status cpu_embedding_forward(void *ctx, float *out, const int32_t *tokens, const int32_t *positions,
                                 const float *wte, const float *wpe, int64_t n, int64_t C, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
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

usp_status cpu_embedding_backward(void *ctx, float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                                  const int32_t *positions, int64_t n, int64_t C, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
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

usp_status cpu_layernorm_forward(void *ctx, float *out, float *mean, float *rstd, const float *inp,
                                 const float *weight, const float *bias, int64_t n, int64_t C, float eps,
                                 usp_stream_t *stream)
{
    (void)ctx, (void)stream;
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

/* One column block per thread, so that each thread streams long contiguous
 * pieces of every row. The width changes no bit: every column is summed over
 * the rows in order whatever block it falls in. */
static int64_t col_block_width(int64_t C)
{
    const int64_t threads = omp_get_max_threads();
    const int64_t w = ((C + threads - 1) / threads + COL_ALIGN - 1) / COL_ALIGN * COL_ALIGN;
    return w < COL_BLOCK_MAX ? w : COL_BLOCK_MAX;
}

static void norm_param_grads(float *dw, float *db, const float *dout, const float *inp, const float *mean,
                             const float *rstd, int64_t n, int64_t C)
{
    const int64_t width = col_block_width(C), blocks = (C + width - 1) / width;
#pragma omp parallel for schedule(static) if (n * C >= PARALLEL_MIN)
    for (int64_t b = 0; b < blocks; b++)
        norm_param_grads_block(dw, db, dout, inp, mean, rstd, n, C, b * width, min64(width, C - b * width));
}

usp_status cpu_layernorm_backward(void *ctx, float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, const float *mean, const float *rstd,
                                  int64_t n, int64_t C, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
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

usp_status cpu_rmsnorm_forward(void *ctx, float *out, float *rstd, const float *inp, const float *weight, int64_t n,
                               int64_t C, float eps, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
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

usp_status cpu_rmsnorm_backward(void *ctx, float *dinp, float *dweight, const float *dout, const float *inp,
                                const float *weight, const float *rstd, int64_t n, int64_t C, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
#pragma omp parallel for schedule(static) if (n * C >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        rmsnorm_row_backward(dinp + i * C, dout + i * C, inp + i * C, weight, rstd[i], C);
    norm_param_grads(dweight, NULL, dout, inp, NULL, rstd, n, C); /* dw = sum_rows dy * x * r */
    return USP_OK;
}

/* ---- activations: tasks of ELEM_CHUNK elements, each a vectorised range ---- */

/* gelu(x) = x/2 * (1 + tanh(u)), u = k (x + 0.044715 x^3). */
SIMD_CLONES static void gelu_range(float *out, const float *inp, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanh_fast(GELU_K * (x + 0.044715f * x * x * x)));
    }
}

/* gelu'(x) = (1 + t)/2 + x/2 * (1 - t^2) * k (1 + 3 * 0.044715 x^2), t = tanh(u). */
SIMD_CLONES static void gelu_backward_range(float *dinp, const float *inp, const float *dout, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float x = inp[i], t = tanh_fast(GELU_K * (x + 0.044715f * x * x * x));
        dinp[i] = (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x)) *
                  dout[i];
    }
}

/* silu(g) = g * s with s = sigmoid(g) = 1/(1 + e^-g): saturates to 0 or 1, never NaN. */
SIMD_CLONES static void swiglu_range(float *out, const float *gate, const float *up, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i];
        out[i] = g / (1.0f + exp_fast(-g)) * up[i];
    }
}

/* d silu(g)/dg = s + g s (1 - s) = s (1 + g (1 - s)). */
SIMD_CLONES static void swiglu_backward_range(float *dgate, float *dup, const float *gate, const float *up,
                                              const float *dout, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        const float g = gate[i], s = 1.0f / (1.0f + exp_fast(-g)), dy = dout[i];
        dgate[i] = dy * up[i] * s * (1.0f + g * (1.0f - s));
        dup[i] = dy * g * s;
    }
}

usp_status cpu_gelu_tanh_forward(void *ctx, float *out, const float *inp, int64_t n, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
    const int64_t chunks = (n + ELEM_CHUNK - 1) / ELEM_CHUNK;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN)
    for (int64_t k = 0; k < chunks; k++) {
        const int64_t lo = k * ELEM_CHUNK, len = min64(ELEM_CHUNK, n - lo);
        gelu_range(out + lo, inp + lo, len);
    }
    return USP_OK;
}

usp_status cpu_gelu_tanh_backward(void *ctx, float *dinp, const float *inp, const float *dout, int64_t n,
                                  usp_stream_t *stream)
{
    (void)ctx, (void)stream;
    const int64_t chunks = (n + ELEM_CHUNK - 1) / ELEM_CHUNK;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN)
    for (int64_t k = 0; k < chunks; k++) {
        const int64_t lo = k * ELEM_CHUNK, len = min64(ELEM_CHUNK, n - lo);
        gelu_backward_range(dinp + lo, inp + lo, dout + lo, len);
    }
    return USP_OK;
}

usp_status cpu_swiglu_forward(void *ctx, float *out, const float *gate, const float *up, int64_t n,
                              usp_stream_t *stream)
{
    (void)ctx, (void)stream;
    const int64_t chunks = (n + ELEM_CHUNK - 1) / ELEM_CHUNK;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN)
    for (int64_t k = 0; k < chunks; k++) {
        const int64_t lo = k * ELEM_CHUNK, len = min64(ELEM_CHUNK, n - lo);
        swiglu_range(out + lo, gate + lo, up + lo, len);
    }
    return USP_OK;
}

usp_status cpu_swiglu_backward(void *ctx, float *dgate, float *dup, const float *gate, const float *up,
                               const float *dout, int64_t n, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
    const int64_t chunks = (n + ELEM_CHUNK - 1) / ELEM_CHUNK;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN)
    for (int64_t k = 0; k < chunks; k++) {
        const int64_t lo = k * ELEM_CHUNK, len = min64(ELEM_CHUNK, n - lo);
        swiglu_backward_range(dgate + lo, dup + lo, gate + lo, up + lo, dout + lo, len);
    }
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
 * angle = position * theta^(-2j/D); sign = -1 rotates by minus the angle, the
 * transpose (and inverse). The angle and its cos/sin are computed in double: at
 * position 10^6 a float angle is off by up to 0.03 rad, more than the relative
 * position it encodes (Hugging Face computes it in float32; the two agree to
 * float precision at the positions checkpoints are trained at, a few thousand).
 * The frequencies are the running product (theta^(-2/D))^j, off from pow() by j
 * ulps of a double. */
static void rope_rotate(float *x, const int32_t *positions, int64_t n, int64_t H, int64_t D, float theta, double sign)
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
                sincos((double)positions[i] * inv_freq, &s, &c);
                cs[j] = (float)c, sn[j] = (float)(sign * s);
            }
            rope_apply(x + i * H * D, cs, sn, H, D, j0, len);
        }
    }
}

usp_status cpu_rope_forward(void *ctx, float *x, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                            float theta, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
    rope_rotate(x, positions, n, H, D, theta, 1.0);
    return USP_OK;
}

/* The forward is y = R x with R orthogonal, so dx = R^T dy: the rotation by -angle. */
usp_status cpu_rope_backward(void *ctx, float *dx, const int32_t *positions, int64_t n, int64_t H, int64_t D,
                             float theta, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
    rope_rotate(dx, positions, n, H, D, theta, -1.0);
    return USP_OK;
}

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

/* One row, target t >= 0, with m = max_j z_j and S = sum_j e^(z_j - m):
 *   loss = m + log S - z_t,   dz_j = grad_scale * (e^(z_j - m) / S - [j == t]).
 * z_t is read first, so the exponentials can be stored in dz even when dz is z.
 * S is summed by the same pieces with or without dz: the loss has the same bits. */
SIMD_CLONES static float cross_entropy_row(float *dz, const float *z, int32_t t, int64_t V, float grad_scale)
{
    const float zt = z[t];
    float m = -INFINITY, buf[CE_PIECE];
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < V; j++)
        m = z[j] > m ? z[j] : m;
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

usp_status cpu_cross_entropy(void *ctx, float *losses, float *dlogits, const float *logits, const int32_t *targets,
                             int64_t n, int64_t V, float grad_scale, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
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

usp_status cpu_adamw_step(void *ctx, float *params, const float *grads, float *m, float *v, int64_t n, float lr,
                          float beta1, float beta2, float eps, float weight_decay, int64_t t, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
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

usp_status cpu_sum_squares(void *ctx, double *out, const float *x, int64_t n, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
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

SIMD_CLONES static void scale_range(float *x, float s, int64_t n)
{
#pragma omp simd
    for (int64_t i = 0; i < n; i++)
        x[i] *= s;
}

usp_status cpu_scale(void *ctx, float *x, float s, int64_t n, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
    const int64_t chunks = (n + ELEM_CHUNK - 1) / ELEM_CHUNK;
#pragma omp parallel for schedule(static) if (n >= PARALLEL_MIN)
    for (int64_t k = 0; k < chunks; k++) {
        const int64_t lo = k * ELEM_CHUNK, len = min64(ELEM_CHUNK, n - lo);
        scale_range(x + lo, s, len);
    }
    return USP_OK;
}

usp_status cpu_add_bias(void *ctx, float *x, const float *bias, int64_t n, int64_t C, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
#pragma omp parallel for schedule(static) if (n * C >= PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++)
        add_rows(x + i * C, x + i * C, bias, C);
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

usp_status cpu_bias_backward(void *ctx, float *dbias, const float *dout, int64_t n, int64_t C, usp_stream_t *stream)
{
    (void)ctx, (void)stream;
    const int64_t width = col_block_width(C), blocks = (C + width - 1) / width;
#pragma omp parallel for schedule(static) if (n * C >= PARALLEL_MIN)
    for (int64_t b = 0; b < blocks; b++)
        bias_grads_block(dbias, dout, n, C, b * width, min64(width, C - b * width));
    return USP_OK;
}
