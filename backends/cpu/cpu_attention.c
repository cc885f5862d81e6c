/* Flash attention on the CPU (FlashAttention-2 schedule): forward and backward.
 *
 * Why tiles: the score matrix of one head at N = 1M tokens would be 4 TB. A Q
 * tile of BQ rows walks the K/V tiles of BK keys; each step is two sgemm calls
 * on tiles that stay in L2 (S = Q K^T, then O += P V) and an elementwise pass
 * (online softmax) between them. Only the log-sum-exp of each query row
 * survives to the backward pass, which recomputes P from q, k and lse.
 *
 * Why sgemm for the tile products: measured on the 2-core Zen 4 this was built
 * on, OpenBLAS runs 256x256x64 tile products at 85-100% of its 2048^3 rate
 * (it runs single-threaded inside our parallel region, which is what we want),
 * well above what a portable vectorised loop reaches. The elementwise work
 * (max, exp, the dS formula) is in `omp simd` loops, one call per tile, and on
 * x86-64 cloned for AVX2 and AVX-512 (picked at load time): exp then costs
 * ~15% of a forward tile step and ~6% of a backward one.
 *
 * Scores are kept in base 2: the first sgemm multiplies by scale * log2(e), so
 * every exp is an exp2 (cheaper) and the row max / lse bookkeeping happens in
 * log2 units; lse is converted back to natural log when it is stored.
 *
 * Parallelism and determinism: OpenMP over independent tasks, each owning its
 * output tile outright, so no float is ever added to by two threads and the
 * order of every sum is fixed by the shape alone: the bits do not depend on the
 * thread count or the schedule. The backward pass therefore runs two passes:
 * dQ parallel over (batch, head, query tile), and dK/dV parallel over (batch,
 * kv head, kv tile) looping over the query heads of its GQA group. This costs
 * recomputing S and dP in both passes (7 tile products instead of the 5 of a
 * fused backward, i.e. 1.4x the matmul work), but the alternatives are worse:
 * atomics on floats are not deterministic, and per-thread dQ copies reduced at
 * the end cost O(N x threads) memory and depend on the thread count.
 *
 * Memory: per thread two BQ x BK float tiles and two BQ vectors (514 KiB),
 * whatever N and D; outputs are written in place (o is the running accumulator). */
#include "backends/cpu/cpu_attention.h"
#include "backends/cpu/cpu_simd.h"

#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

/* Tile sizes: Q rows per tile and keys per tile. Measured with bench/attention.c
 * on 2 Zen 4 cores (N = 4096 and 16384, D = 64 and 128, best of 3 interleaved
 * rounds): 128x128 reached 63% (fwd) / 48% (bwd) of sgemm, 256x128 66 / 52,
 * 256x256 71 / 55, 256x384 and 256x512 no better, 384x256 and 512x256 worse
 * (S and dP then crowd the 1 MiB L2). Larger tiles win because
 * each sgemm call packs its operands again: the packing is 1/BK and 1/BQ of the
 * multiply-adds. Override with -DCPU_ATTN_BQ=... to retune (the tests pass for
 * any sizes, e.g. 32x16). */
#ifndef CPU_ATTN_BQ
#define CPU_ATTN_BQ 256
#endif
#ifndef CPU_ATTN_BK
#define CPU_ATTN_BK 256
#endif
#define BQ ((int64_t)CPU_ATTN_BQ)
#define BK ((int64_t)CPU_ATTN_BK)

/* Floats of one thread's workspace slot: S and dP tiles, two row vectors; padded
 * to a 64-byte multiple so slots of different threads never share a cache line. */
#define SLOT_FLOATS ((((2 * BQ * BK + 2 * BQ) + 15) / 16) * 16)

#define LOG2E 1.44269504088896340736f
#define LN2 0.69314718055994530942f

static inline int64_t clamp64(int64_t x, int64_t lo, int64_t hi) { return x < lo ? lo : (x > hi ? hi : x); }

/* ------------------------------------------------------------------------- */
/* exp2                                                                       */

/* 2^x, relative error < 1e-7 (measured), exactly 0 below -126 (exp2(-inf) = 0).
 * x = n + f with n = round(x) and f in [-1/2, 1/2]: 2^f by the Cephes exp2f
 * minimax polynomial, and 2^n added to the exponent bits. Branch-free and made of
 * adds, multiplies and integer ops, so that `omp simd` loops vectorise it. The
 * rounding adds 1.5 * 2^23: the float sum's low mantissa bits then hold n. */
static inline float exp2_fast(float x)
{
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    float xc = x < -126.0f ? -126.0f : (x > 126.0f ? 126.0f : x);
    union { float f; uint32_t u; } r, t;
    r.f = xc + magic;
    float n = r.f - magic;
    uint32_t ni = r.u - 0x4B400000u; /* n as a two's-complement integer */
    float f = xc - n;
    float p = 1.535336188319500e-4f;
    p = p * f + 1.339887440266574e-3f;
    p = p * f + 9.618437357674640e-3f;
    p = p * f + 5.550332471162809e-2f;
    p = p * f + 2.402264791363012e-1f;
    p = p * f + 6.931472028550421e-1f;
    t.f = p * f + 1.0f;
    t.u += ni << 23;
    return x < -126.0f ? 0.0f : t.f;
}

/* ------------------------------------------------------------------------- */
/* Masks and pointers                                                         */

/* Causal visibility: the query at local index i (global position q_offset + i)
 * sees the keys j of this call with kv_offset + j <= q_offset + i, i.e. the keys
 * [0, end): returns end (n_kv when not causal; 0 when the block is all future). */
static int64_t kv_visible_end(const cpu_attention_shape *s, int64_t i)
{
    if (!s->causal) return s->n_kv;
    return clamp64(s->q_offset + i - s->kv_offset + 1, 0, s->n_kv);
}

/* The first local query that sees key j (n_q if none does). */
static int64_t q_first_seeing(const cpu_attention_shape *s, int64_t j)
{
    if (!s->causal) return 0;
    return clamp64(s->kv_offset + j - s->q_offset, 0, s->n_q);
}

/* Row i of q, o, d_o or dq for batch b, head h: rows of one head are H*D apart. */
static size_t q_row(const cpu_attention_shape *s, int64_t b, int64_t i, int64_t h)
{
    return (((size_t)b * (size_t)s->n_q + (size_t)i) * (size_t)s->n_heads + (size_t)h) * (size_t)s->head_dim;
}

/* Row j of k, v, dk or dv for batch b, kv head g: rows are Hkv*D apart. */
static size_t kv_row(const cpu_attention_shape *s, int64_t b, int64_t j, int64_t g)
{
    return (((size_t)b * (size_t)s->n_kv + (size_t)j) * (size_t)s->n_kv_heads + (size_t)g) * (size_t)s->head_dim;
}

/* Thread t's slot of the caller's workspace, aligned to 64 bytes. */
static float *workspace_slot(void *workspace, int t)
{
    uintptr_t p = ((uintptr_t)workspace + 63) & ~(uintptr_t)63;
    return (float *)p + (size_t)t * (size_t)SLOT_FLOATS;
}

size_t cpu_attention_workspace_bytes(const cpu_attention_shape *s)
{
    (void)s; /* the tiles do not grow with the shape: outputs are accumulated in place */
    return (size_t)omp_get_max_threads() * (size_t)SLOT_FLOATS * sizeof(float) + 64;
}

/* ------------------------------------------------------------------------- */
/* Forward                                                                    */

/* Online softmax over one score tile S (log2 units) for rows with running max m
 * and running sum l, o the running (unnormalised) output:
 *   m' = max(m, max_j S_ij),  P_ij = 2^(S_ij - m'),
 *   l' = 2^(m - m') l + sum_j P_ij,  o' = 2^(m - m') o   (then o' += P V).
 * Entries a row may not see (causal) are set to P = 0; a row that sees nothing
 * in this tile keeps m, l and o unchanged (no -inf - -inf = NaN). One call per
 * tile, not per row: a call per row cost ~5% of the forward (measured). */
SIMD_CLONES static void forward_softmax_tile(const cpu_attention_shape *s, float *S /* [bq, BK] */,
                                             float *m /* [bq] */, float *l /* [bq] */,
                                             float *ot /* [bq, D], rows ldo apart */, int64_t ldo, int64_t q0,
                                             int64_t bq, int64_t k0, int64_t bk)
{
    const int64_t D = s->head_dim;
    for (int64_t i = 0; i < bq; i++) {
        float *srow = S + (size_t)i * BK, *orow = ot + (size_t)i * ldo;
        const int64_t nvis = clamp64(kv_visible_end(s, q0 + i) - k0, 0, bk);
        if (nvis > 0) {
            float mx = m[i], sum = 0.0f;
#pragma omp simd reduction(max : mx)
            for (int64_t j = 0; j < nvis; j++) mx = srow[j] > mx ? srow[j] : mx;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < nvis; j++) {
                float p = exp2_fast(srow[j] - mx);
                srow[j] = p;
                sum += p;
            }
            const float alpha = exp2_fast(m[i] - mx); /* m = -inf on the first visible tile: alpha = 0 */
            l[i] = alpha * l[i] + sum;
            m[i] = mx;
            if (alpha != 1.0f) {
#pragma omp simd
                for (int64_t d = 0; d < D; d++) orow[d] *= alpha;
            }
        }
        for (int64_t j = nvis; j < bk; j++) srow[j] = 0.0f;
    }
}

/* One task of the forward: batch b, head h, queries [q0, q0 + bq). */
static void forward_task(const cpu_attention_shape *s, const float *q, const float *k, const float *v, float *o,
                         float *lse, int64_t b, int64_t h, int64_t q0, float *ws)
{
    const int64_t D = s->head_dim, ldq = s->n_heads * D, ldk = s->n_kv_heads * D;
    const int64_t g = h / (s->n_heads / s->n_kv_heads);
    const int64_t bq = min64(BQ, s->n_q - q0);
    const float *qt = q + q_row(s, b, q0, h);    /* [bq, D], rows ldq apart */
    float *ot = o + q_row(s, b, q0, h);          /* [bq, D], rows ldq apart */
    const float *kh = k + kv_row(s, b, 0, g);    /* [Nkv, D], rows ldk apart */
    const float *vh = v + kv_row(s, b, 0, g);    /* [Nkv, D], rows ldk apart */
    float *lt = lse + ((size_t)b * (size_t)s->n_heads + (size_t)h) * (size_t)s->n_q + (size_t)q0; /* [bq] */
    float *S = ws;                               /* [BQ, BK] scores, then P */
    float *m = ws + BQ * BK;                     /* [BQ] running max, log2 units */
    float *l = m + BQ;                           /* [BQ] running sum */

    for (int64_t i = 0; i < bq; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        memset(ot + (size_t)i * ldq, 0, (size_t)D * sizeof(float));
    }
    /* Keys past the last row's horizon are masked for the whole tile: not computed. */
    const int64_t kv_end = kv_visible_end(s, q0 + bq - 1);
    for (int64_t k0 = 0; k0 < kv_end; k0 += BK) {
        const int64_t bk = min64(BK, kv_end - k0);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)bq, (int)bk, (int)D, s->scale * LOG2E, qt,
                    (int)ldq, kh + (size_t)k0 * ldk, (int)ldk, 0.0f, S, (int)BK);
        forward_softmax_tile(s, S, m, l, ot, ldq, q0, bq, k0, bk);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)bq, (int)D, (int)bk, 1.0f, S, (int)BK,
                    vh + (size_t)k0 * ldk, (int)ldk, 1.0f, ot, (int)ldq);
    }
    /* o = o / l and lse = ln 2 (m + log2 l); a row that saw no key keeps o = 0. */
    for (int64_t i = 0; i < bq; i++) {
        if (l[i] > 0.0f) {
            const float inv = 1.0f / l[i];
            for (int64_t d = 0; d < D; d++) ot[(size_t)i * ldq + d] *= inv;
            lt[i] = LN2 * (m[i] + log2f(l[i]));
        } else {
            lt[i] = -INFINITY;
        }
    }
}

void cpu_flash_attention_forward(const cpu_attention_shape *s, const float *q, const float *k, const float *v,
                                 float *o, float *lse, void *workspace)
{
    const int64_t n_qt = (s->n_q + BQ - 1) / BQ, n_bh = s->batch * s->n_heads;
    const int64_t n_tasks = n_qt * n_bh;
    const int nt = omp_get_max_threads(); /* the count cpu_attention_workspace_bytes sized for */
#pragma omp parallel num_threads(nt)
    {
        float *ws = workspace_slot(workspace, omp_get_thread_num());
        /* Causal: the last query tiles see the most keys; hand them out first. */
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_tasks; t++) {
            int64_t qt = n_qt - 1 - t / n_bh, bh = t % n_bh;
            forward_task(s, q, k, v, o, lse, bh / s->n_heads, bh % s->n_heads, qt * BQ, ws);
        }
    }
}

/* ------------------------------------------------------------------------- */
/* Backward                                                                   */

/* With P_ij = exp(scale q_i.k_j - lse_i) recomputed from the given lse (the
 * global one when this call is a block of ring attention):
 *   dV_j = sum_i P_ij dO_i            dP_ij = dO_i . V_j
 *   dS_ij = P_ij (dP_ij - Delta_i)    Delta_i = dO_i . O_i = sum_j P_ij dP_ij
 *   dQ_i = scale sum_j dS_ij K_j      dK_j = scale sum_i dS_ij Q_i
 * Delta from the given o is what makes block-wise gradients add up to the
 * gradients of the whole attention. A row with lse = -inf saw no key: P = 0. */

/* Delta_i and lse_i * log2(e) of queries [q0, q0 + bq) of batch b, head h. */
SIMD_CLONES static void backward_row_stats(const cpu_attention_shape *s, const float *o, const float *lse,
                                           const float *d_o, int64_t b, int64_t h, int64_t q0, int64_t bq,
                                           float *delta /* [bq] */, float *lse2 /* [bq] */)
{
    const float *lt = lse + ((size_t)b * (size_t)s->n_heads + (size_t)h) * (size_t)s->n_q + (size_t)q0;
    for (int64_t i = 0; i < bq; i++) {
        const float *orow = o + q_row(s, b, q0 + i, h), *dorow = d_o + q_row(s, b, q0 + i, h);
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t d = 0; d < s->head_dim; d++) sum += dorow[d] * orow[d];
        delta[i] = sum;
        lse2[i] = lt[i] * LOG2E; /* -inf stays -inf */
    }
}

/* S (log2 units) -> P_ij = 2^(S_ij - lse2_i) and dP -> dS_ij = P_ij (dP_ij - Delta_i)
 * for the tile of queries [q0, q0 + bq) and keys [k0, k0 + bk); masked entries
 * and rows with lse = -inf get 0 in both. */
SIMD_CLONES static void backward_p_ds_tile(const cpu_attention_shape *s, float *S /* [bq, BK] */,
                                           float *dP /* [bq, BK] */, const float *delta /* [bq] */,
                                           const float *lse2 /* [bq] */, int64_t q0, int64_t bq, int64_t k0,
                                           int64_t bk)
{
    for (int64_t i = 0; i < bq; i++) {
        float *srow = S + (size_t)i * BK, *dprow = dP + (size_t)i * BK;
        const float li = lse2[i], di = delta[i];
        const int64_t nvis = isinf(li) ? 0 : clamp64(kv_visible_end(s, q0 + i) - k0, 0, bk);
#pragma omp simd
        for (int64_t j = 0; j < nvis; j++) {
            float p = exp2_fast(srow[j] - li);
            srow[j] = p;
            dprow[j] = p * (dprow[j] - di);
        }
        for (int64_t j = nvis; j < bk; j++) srow[j] = dprow[j] = 0.0f;
    }
}

/* S = scale log2(e) Q K^T and dP = dO V^T for a tile (the two products both passes need). */
static void backward_scores(const cpu_attention_shape *s, const float *qt, const float *dot, const float *kt,
                            const float *vt, int64_t bq, int64_t bk, float *S, float *dP)
{
    const int D = (int)s->head_dim, ldq = (int)(s->n_heads * s->head_dim);
    const int ldk = (int)(s->n_kv_heads * s->head_dim);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)bq, (int)bk, D, s->scale * LOG2E, qt, ldq, kt, ldk,
                0.0f, S, (int)BK);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)bq, (int)bk, D, 1.0f, dot, ldq, vt, ldk, 0.0f, dP,
                (int)BK);
}

/* Pass 1 task: dQ of batch b, head h, queries [q0, q0 + bq), over all visible keys. */
static void backward_dq_task(const cpu_attention_shape *s, const float *q, const float *k, const float *v,
                             const float *o, const float *lse, const float *d_o, float *dq, int accumulate,
                             int64_t b, int64_t h, int64_t q0, float *ws)
{
    const int64_t D = s->head_dim, ldq = s->n_heads * D, ldk = s->n_kv_heads * D;
    const int64_t g = h / (s->n_heads / s->n_kv_heads);
    const int64_t bq = min64(BQ, s->n_q - q0);
    const float *qt = q + q_row(s, b, q0, h);    /* [bq, D], rows ldq apart */
    const float *dot = d_o + q_row(s, b, q0, h); /* [bq, D], rows ldq apart */
    float *dqt = dq + q_row(s, b, q0, h);        /* [bq, D], rows ldq apart */
    const float *kh = k + kv_row(s, b, 0, g);    /* [Nkv, D], rows ldk apart */
    const float *vh = v + kv_row(s, b, 0, g);    /* [Nkv, D], rows ldk apart */
    float *S = ws, *dP = ws + BQ * BK;           /* [BQ, BK] each */
    float *delta = dP + BQ * BK, *lse2 = delta + BQ; /* [BQ] each */

    backward_row_stats(s, o, lse, d_o, b, h, q0, bq, delta, lse2);
    if (!accumulate)
        for (int64_t i = 0; i < bq; i++) memset(dqt + (size_t)i * ldq, 0, (size_t)D * sizeof(float));
    const int64_t kv_end = kv_visible_end(s, q0 + bq - 1);
    for (int64_t k0 = 0; k0 < kv_end; k0 += BK) {
        const int64_t bk = min64(BK, kv_end - k0);
        const float *kt = kh + (size_t)k0 * ldk, *vt = vh + (size_t)k0 * ldk;
        backward_scores(s, qt, dot, kt, vt, bq, bk, S, dP);
        backward_p_ds_tile(s, S, dP, delta, lse2, q0, bq, k0, bk);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)bq, (int)D, (int)bk, s->scale, dP, (int)BK,
                    kt, (int)ldk, 1.0f, dqt, (int)ldq); /* dQ += scale dS K */
    }
}

/* Pass 2 task: dK, dV of batch b, kv head g, keys [k0, k0 + bk), over every query
 * head of the GQA group and every query that sees these keys. */
static void backward_dkdv_task(const cpu_attention_shape *s, const float *q, const float *k, const float *v,
                               const float *o, const float *lse, const float *d_o, float *dk, float *dv,
                               int accumulate, int64_t b, int64_t g, int64_t k0, float *ws)
{
    const int64_t D = s->head_dim, ldq = s->n_heads * D, ldk = s->n_kv_heads * D;
    const int64_t group = s->n_heads / s->n_kv_heads;
    const int64_t bk = min64(BK, s->n_kv - k0);
    const float *kt = k + kv_row(s, b, k0, g);   /* [bk, D], rows ldk apart */
    const float *vt = v + kv_row(s, b, k0, g);   /* [bk, D], rows ldk apart */
    float *dkt = dk + kv_row(s, b, k0, g);       /* [bk, D], rows ldk apart */
    float *dvt = dv + kv_row(s, b, k0, g);       /* [bk, D], rows ldk apart */
    float *S = ws, *dP = ws + BQ * BK;           /* [BQ, BK] each */
    float *delta = dP + BQ * BK, *lse2 = delta + BQ; /* [BQ] each */

    if (!accumulate)
        for (int64_t j = 0; j < bk; j++) {
            memset(dkt + (size_t)j * ldk, 0, (size_t)D * sizeof(float));
            memset(dvt + (size_t)j * ldk, 0, (size_t)D * sizeof(float));
        }
    /* Queries before the first one that sees key k0 see none of this tile. */
    const int64_t q_begin = q_first_seeing(s, k0);
    for (int64_t h = g * group; h < (g + 1) * group; h++) {
        for (int64_t q0 = q_begin; q0 < s->n_q; q0 += BQ) {
            const int64_t bq = min64(BQ, s->n_q - q0);
            const float *qt = q + q_row(s, b, q0, h);    /* [bq, D], rows ldq apart */
            const float *dot = d_o + q_row(s, b, q0, h); /* [bq, D], rows ldq apart */
            backward_row_stats(s, o, lse, d_o, b, h, q0, bq, delta, lse2);
            backward_scores(s, qt, dot, kt, vt, bq, bk, S, dP);
            backward_p_ds_tile(s, S, dP, delta, lse2, q0, bq, k0, bk);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)bk, (int)D, (int)bq, 1.0f, S, (int)BK, dot,
                        (int)ldq, 1.0f, dvt, (int)ldk); /* dV += P^T dO */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)bk, (int)D, (int)bq, s->scale, dP, (int)BK,
                        qt, (int)ldq, 1.0f, dkt, (int)ldk); /* dK += scale dS^T Q */
        }
    }
}

void cpu_flash_attention_backward(const cpu_attention_shape *s, const float *q, const float *k, const float *v,
                                  const float *o, const float *lse, const float *d_o, float *dq, float *dk,
                                  float *dv, int accumulate, void *workspace)
{
    const int64_t n_qt = (s->n_q + BQ - 1) / BQ, n_bh = s->batch * s->n_heads;
    const int64_t n_kt = (s->n_kv + BK - 1) / BK, n_bg = s->batch * s->n_kv_heads;
    const int nt = omp_get_max_threads(); /* the count cpu_attention_workspace_bytes sized for */
#pragma omp parallel num_threads(nt)
    {
        float *ws = workspace_slot(workspace, omp_get_thread_num());
        /* Pass 1, dQ: the last query tiles see the most keys; hand them out first. */
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_qt * n_bh; t++) {
            int64_t qt = n_qt - 1 - t / n_bh, bh = t % n_bh;
            backward_dq_task(s, q, k, v, o, lse, d_o, dq, accumulate, bh / s->n_heads, bh % s->n_heads, qt * BQ,
                             ws);
        }
        /* Pass 2, dK and dV: the first key tiles are seen by the most queries. */
#pragma omp for schedule(dynamic, 1)
        for (int64_t t = 0; t < n_kt * n_bg; t++) {
            int64_t kt = t / n_bg, bg = t % n_bg;
            backward_dkdv_task(s, q, k, v, o, lse, d_o, dk, dv, accumulate, bg / s->n_kv_heads,
                               bg % s->n_kv_heads, kt * BK, ws);
        }
    }
}
