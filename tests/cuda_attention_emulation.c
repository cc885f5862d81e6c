/* The CPU emulation of the CUDA attention kernels (see cuda_attention_emulation.h). */
#include "tests/cuda_attention_emulation.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A warp's sum of x[0..n): lane l sums x[l], x[l + 32], ... in order, then the
 * xor butterfly of warp_sum (lane l adds lane l ^ off, off = 16 .. 1). */
static float emu_warp_sum(const float *x, int64_t n, int64_t stride)
{
    float lane[32], next[32];
    for (int l = 0; l < 32; l++) {
        lane[l] = 0.0f;
        for (int64_t j = l; j < n; j += 32) lane[l] += x[j * stride];
    }
    for (int off = 16; off > 0; off >>= 1) {
        for (int l = 0; l < 32; l++) next[l] = lane[l] + lane[l ^ off];
        memcpy(lane, next, sizeof lane);
    }
    return lane[0];
}

/* tile_load: rows [0, rows) of the head's rows (stride apart), zeros up to tile_rows. */
static void emu_tile_load(float *dst, int64_t ld, const float *src, int64_t first, int64_t stride, int64_t rows,
                          int64_t tile_rows, int64_t D)
{
    for (int64_t r = 0; r < tile_rows; r++)
        for (int64_t d = 0; d < D; d++) dst[r * ld + d] = r < rows ? src[first + r * stride + d] : 0.0f;
}

/* Key tile kt of query tile [q0, q0 + bq) of batch b, kv head g: its first key and length, and its
 * visibility under row b's mask; unless masked (the kernels skip it), K and V loaded into Ks and Vs
 * (row strides ld_k, ld_v). */
static attn_visibility emu_key_tile(const usp_attention_shape *s, attn_tiles T, int64_t b, int64_t g, int64_t q0,
                                    int64_t bq, int64_t kt, const float *k, const float *v, float *Ks, int64_t ld_k,
                                    float *Vs, int64_t ld_v, int64_t *k0, int64_t *bk)
{
    const int64_t D = s->head_dim;
    *k0 = kt * T.bk, *bk = attn_tile_len(s->n_kv, T.bk, kt);
    const attn_visibility vis = attn_tile_visibility(s, b, q0, bq, *k0, *bk);
    if (vis == ATTN_TILE_MASKED)
        return vis;
    emu_tile_load(Ks, ld_k, k, attn_kv_index(s, b, *k0, g, 0), s->n_kv_heads * D, *bk, T.bk, D);
    emu_tile_load(Vs, ld_v, v, attn_kv_index(s, b, *k0, g, 0), s->n_kv_heads * D, *bk, T.bk, D);
    return vis;
}

/* block_spans: the spans of the block's fixed rows [row0, row0 + n), keys of queries or (of_key) queries
 * of keys. */
static void emu_block_spans(const usp_attention_shape *s, int64_t b, int64_t row0, int64_t n, int of_key,
                            int64_t *first, int64_t *end)
{
    for (int64_t r = 0; r < n; r++) attn_row_span(s, b, row0 + r, of_key, &first[r], &end[r]);
}

/* attn_forward_kernel, block x. */
static void emu_forward_block(const usp_attention_shape *s, const float *q, const float *k, const float *v, float *o,
                              float *lse, int64_t x, float *smem)
{
    const int64_t D = s->head_dim, ld = attn_kv_ld(D);
    const attn_tiles T = attn_tiles_for(D);
    const attn_forward_smem L = attn_forward_smem_layout(D);
    float *Qs = smem + L.q, *Ks = smem + L.k, *Vs = smem + L.v, *Ss = smem + L.s, *Os = smem + L.o;
    float *ms = smem + L.m, *ls = smem + L.l, *alphas = smem + L.alpha;
    const attn_task task = attn_block_task(x, attn_n_tiles(s->n_q, T.bq), s->batch * s->n_heads, 1);
    const int64_t b = task.row / s->n_heads, h = task.row % s->n_heads, g = attn_kv_head(s, h);
    const int64_t q0 = task.tile * T.bq, bq = attn_tile_len(s->n_q, T.bq, task.tile);
    int64_t kf[ATTN_MAX_TILE], ke[ATTN_MAX_TILE]; /* the keys each query row sees */

    emu_tile_load(Qs, D, q, attn_q_index(s, b, q0, h, 0), s->n_heads * D, bq, T.bq, D);
    emu_block_spans(s, b, q0, bq, 0, kf, ke);
    for (int64_t e = 0; e < T.bq * D; e++) Os[e] = 0.0f;
    for (int64_t i = 0; i < T.bq; i++) ms[i] = -INFINITY, ls[i] = 0.0f;
    const attn_tile_range kr = attn_kv_tiles(s, b, q0, bq, T.bk);
    for (int64_t kt = kr.begin; kt < kr.end; kt++) {
        int64_t k0, bk;
        const attn_visibility vis = emu_key_tile(s, T, b, g, q0, bq, kt, k, v, Ks, ld, Vs, D, &k0, &bk);
        if (vis == ATTN_TILE_MASKED) continue;
        for (int64_t e = 0; e < T.bq * T.bk; e++) { /* forward_scores */
            const int64_t i = e / T.bk, j = e % T.bk;
            const int seen = i < bq && j < bk && (vis == ATTN_TILE_VISIBLE || (k0 + j >= kf[i] && k0 + j < ke[i]));
            Ss[e] = seen ? s->scale * attn_dot(Qs + i * D, Ks + j * ld, D) : -INFINITY;
        }
        for (int64_t i = 0; i < bq; i++) { /* forward_softmax_rows */
            float *row = Ss + i * T.bk, mx = -INFINITY;
            for (int64_t j = 0; j < bk; j++) mx = fmaxf(mx, row[j]);
            const float m_new = fmaxf(ms[i], mx);
            for (int64_t j = 0; j < bk; j++) row[j] = attn_softmax_prob(row[j], m_new);
            const float alpha = attn_softmax_rescale(ms[i], m_new);
            ls[i] = alpha * ls[i] + emu_warp_sum(row, bk, 1);
            ms[i] = m_new;
            alphas[i] = alpha;
        }
        for (int64_t e = 0; e < bq * D; e++) { /* forward_accumulate */
            const int64_t i = e / D, d = e % D;
            float acc = alphas[i] * Os[e];
            for (int64_t j = 0; j < bk; j++) acc += Ss[i * T.bk + j] * Vs[j * D + d];
            Os[e] = acc;
        }
    }
    for (int64_t e = 0; e < bq * D; e++)
        o[attn_q_index(s, b, q0 + e / D, h, e % D)] = Os[e] * attn_softmax_inv_sum(ls[e / D]);
    for (int64_t i = 0; i < bq; i++) lse[attn_row_index(s, b, h, q0 + i)] = attn_softmax_lse(ms[i], ls[i]);
}

void emu_forward(const usp_attention_shape *s, const float *q, const float *k, const float *v, float *o,
                        float *lse)
{
    float *smem = emu_scratch((size_t)attn_forward_smem_layout(s->head_dim).floats, NAN); /* stale: NaN */
    for (int64_t x = 0; x < attn_q_grid(s); x++) emu_forward_block(s, q, k, v, o, lse, x, smem);
    free(smem);
}

/* backward_probs: P (when not NULL) and dS of a tile pair, partial pairs tested against the spans sf, se of
 * the queries (of_key = 0) or the keys (1). */
static void emu_backward_probs(const usp_attention_shape *s, const float *Qs, const float *dOs, const float *Ks,
                               const float *Vs, const float *lses, const float *deltas, float *Ps, float *dSs,
                               const int64_t *sf, const int64_t *se, int of_key, int64_t q0, int64_t bq, int64_t k0,
                               int64_t bk, attn_visibility vis)
{
    const int64_t D = s->head_dim, ld = attn_kv_ld(D);
    const attn_tiles T = attn_tiles_for(D);
    for (int64_t e = 0; e < T.bq * T.bk; e++) {
        const int64_t i = e / T.bk, j = e % T.bk, r = of_key ? j : i, x = of_key ? q0 + i : k0 + j;
        float p = 0.0f, ds = 0.0f;
        if (i < bq && j < bk && (vis == ATTN_TILE_VISIBLE || (x >= sf[r] && x < se[r]))) {
            p = attn_backward_prob(s->scale * attn_dot(Qs + i * D, Ks + j * ld, D), lses[i]);
            ds = attn_backward_dscore(p, attn_dot(dOs + i * D, Vs + j * ld, D), deltas[i]);
        }
        if (Ps) Ps[e] = p;
        dSs[e] = ds;
    }
}

/* backward_row_stats. */
static void emu_row_stats(const usp_attention_shape *s, const float *lse, const float *delta, float *lses,
                          float *deltas, int64_t b, int64_t h, int64_t q0, int64_t bq)
{
    for (int64_t i = 0; i < attn_tiles_for(s->head_dim).bq; i++) {
        lses[i] = i < bq ? lse[attn_row_index(s, b, h, q0 + i)] : -INFINITY;
        deltas[i] = i < bq ? delta[attn_row_index(s, b, h, q0 + i)] : 0.0f;
    }
}

/* rows_store. */
static void emu_rows_store(float *dst, int64_t first, int64_t stride, const float *acc, float factor, int64_t rows,
                           int64_t D, int accumulate)
{
    for (int64_t e = 0; e < rows * D; e++) {
        const int64_t idx = first + (e / D) * stride + e % D;
        dst[idx] = (accumulate ? dst[idx] : 0.0f) + factor * acc[e];
    }
}

/* attn_dkdv_kernel, block x. */
static void emu_dkdv_block(const usp_attention_shape *s, const float *q, const float *k, const float *v,
                           const float *lse, const float *delta, const float *d_o, float *dk, float *dv,
                           int accumulate, int64_t x, float *smem)
{
    const int64_t D = s->head_dim, ld = attn_kv_ld(D);
    const attn_tiles T = attn_tiles_for(D);
    const attn_backward_smem L = attn_backward_smem_layout(D, 1);
    float *Qs = smem + L.q, *dOs = smem + L.d_o, *Ks = smem + L.k, *Vs = smem + L.v, *Ps = smem + L.p;
    float *dSs = smem + L.ds, *dKs = smem + L.acc_a, *dVs = smem + L.acc_b, *lses = smem + L.lse;
    float *deltas = smem + L.delta;
    const attn_task task = attn_block_task(x, attn_n_tiles(s->n_kv, T.bk), s->batch * s->n_kv_heads, 0);
    const int64_t b = task.row / s->n_kv_heads, g = task.row % s->n_kv_heads, group = s->n_heads / s->n_kv_heads;
    const int64_t k0 = task.tile * T.bk, bk = attn_tile_len(s->n_kv, T.bk, task.tile);
    const int64_t kv_first = attn_kv_index(s, b, k0, g, 0), kv_stride = s->n_kv_heads * D;

    emu_tile_load(Ks, ld, k, kv_first, kv_stride, bk, T.bk, D);
    emu_tile_load(Vs, ld, v, kv_first, kv_stride, bk, T.bk, D);
    for (int64_t e = 0; e < T.bk * D; e++) dKs[e] = dVs[e] = 0.0f;
    int64_t qf[ATTN_MAX_TILE], qe[ATTN_MAX_TILE]; /* the queries that see each key */
    emu_block_spans(s, b, k0, bk, 1, qf, qe);
    const attn_tile_range qr = attn_q_tiles(s, b, k0, bk, T.bq);
    for (int64_t h = g * group; h < (g + 1) * group; h++)
        for (int64_t qt = qr.begin; qt < qr.end; qt++) {
            const int64_t q0 = qt * T.bq, bq = attn_tile_len(s->n_q, T.bq, qt);
            const attn_visibility vis = attn_tile_visibility(s, b, q0, bq, k0, bk);
            if (vis == ATTN_TILE_MASKED) continue;
            emu_tile_load(Qs, D, q, attn_q_index(s, b, q0, h, 0), s->n_heads * D, bq, T.bq, D);
            emu_tile_load(dOs, D, d_o, attn_q_index(s, b, q0, h, 0), s->n_heads * D, bq, T.bq, D);
            emu_row_stats(s, lse, delta, lses, deltas, b, h, q0, bq);
            emu_backward_probs(s, Qs, dOs, Ks, Vs, lses, deltas, Ps, dSs, qf, qe, 1, q0, bq, k0, bk, vis);
            for (int64_t e = 0; e < bk * D; e++) {
                const int64_t j = e / D, d = e % D;
                float av = dVs[e], ak = dKs[e];
                for (int64_t i = 0; i < bq; i++) {
                    av += Ps[i * T.bk + j] * dOs[i * D + d];
                    ak += dSs[i * T.bk + j] * Qs[i * D + d];
                }
                dVs[e] = av;
                dKs[e] = ak;
            }
        }
    emu_rows_store(dk, kv_first, kv_stride, dKs, s->scale, bk, D, accumulate);
    emu_rows_store(dv, kv_first, kv_stride, dVs, 1.0f, bk, D, accumulate);
}

/* attn_dq_kernel, block x. */
static void emu_dq_block(const usp_attention_shape *s, const float *q, const float *k, const float *v,
                         const float *lse, const float *delta, const float *d_o, float *dq, int accumulate, int64_t x,
                         float *smem)
{
    const int64_t D = s->head_dim, ld = attn_kv_ld(D);
    const attn_tiles T = attn_tiles_for(D);
    const attn_backward_smem L = attn_backward_smem_layout(D, 0);
    float *Qs = smem + L.q, *dOs = smem + L.d_o, *Ks = smem + L.k, *Vs = smem + L.v, *dSs = smem + L.ds;
    float *dQs = smem + L.acc_a, *lses = smem + L.lse, *deltas = smem + L.delta;
    const attn_task task = attn_block_task(x, attn_n_tiles(s->n_q, T.bq), s->batch * s->n_heads, 1);
    const int64_t b = task.row / s->n_heads, h = task.row % s->n_heads, g = attn_kv_head(s, h);
    const int64_t q0 = task.tile * T.bq, bq = attn_tile_len(s->n_q, T.bq, task.tile);
    const int64_t q_first = attn_q_index(s, b, q0, h, 0), q_stride = s->n_heads * D;

    emu_tile_load(Qs, D, q, q_first, q_stride, bq, T.bq, D);
    emu_tile_load(dOs, D, d_o, q_first, q_stride, bq, T.bq, D);
    emu_row_stats(s, lse, delta, lses, deltas, b, h, q0, bq);
    int64_t kf[ATTN_MAX_TILE], ke[ATTN_MAX_TILE]; /* the keys each query row sees */
    emu_block_spans(s, b, q0, bq, 0, kf, ke);
    for (int64_t e = 0; e < T.bq * D; e++) dQs[e] = 0.0f;
    const attn_tile_range kr = attn_kv_tiles(s, b, q0, bq, T.bk);
    for (int64_t kt = kr.begin; kt < kr.end; kt++) {
        int64_t k0, bk;
        const attn_visibility vis = emu_key_tile(s, T, b, g, q0, bq, kt, k, v, Ks, ld, Vs, ld, &k0, &bk);
        if (vis == ATTN_TILE_MASKED) continue;
        emu_backward_probs(s, Qs, dOs, Ks, Vs, lses, deltas, NULL, dSs, kf, ke, 0, q0, bq, k0, bk, vis);
        for (int64_t e = 0; e < bq * D; e++) {
            const int64_t i = e / D, d = e % D;
            float acc = dQs[e];
            for (int64_t j = 0; j < bk; j++) acc += dSs[i * T.bk + j] * Ks[j * ld + d];
            dQs[e] = acc;
        }
    }
    emu_rows_store(dq, q_first, q_stride, dQs, s->scale, bq, D, accumulate);
}

/* cuda_attention_backward: attn_delta_kernel into the workspace, then dK/dV, then dQ. */
void emu_backward(const usp_attention_shape *s, const float *q, const float *k, const float *v, const float *o,
                         const float *lse, const float *d_o, float *dq, float *dk, float *dv, int accumulate)
{
    const int64_t D = s->head_dim, rows = s->batch * s->n_q * s->n_heads;
    float *delta = emu_scratch(attn_workspace_bytes(s) / sizeof(float), NAN);
    float *prod = emu_scratch((size_t)D, 0.0f);
    for (int64_t r = 0; r < rows; r++) { /* attn_delta_kernel: rows in q's layout order */
        for (int64_t d = 0; d < D; d++) prod[d] = d_o[r * D + d] * o[r * D + d];
        delta[attn_row_index(s, r / (s->n_q * s->n_heads), r % s->n_heads, (r / s->n_heads) % s->n_q)] =
            emu_warp_sum(prod, D, 1);
    }
    /* Each kernel's shared memory exactly as sized (ASan builds see any access past it). */
    float *smem = emu_scratch((size_t)attn_backward_smem_layout(D, 1).floats, NAN);
    for (int64_t x = 0; x < attn_kv_grid(s); x++)
        emu_dkdv_block(s, q, k, v, lse, delta, d_o, dk, dv, accumulate, x, smem);
    free(smem);
    smem = emu_scratch((size_t)attn_backward_smem_layout(D, 0).floats, NAN);
    for (int64_t x = 0; x < attn_q_grid(s); x++) emu_dq_block(s, q, k, v, lse, delta, d_o, dq, accumulate, x, smem);
    free(smem);
    free(prod);
    free(delta);
}

/* attn_merge_kernel over one batch row: o [n, H, D], lse [H, n]. */
void emu_merge(float *o, float *lse, const float *o_part, const float *lse_part, int64_t n, int64_t heads,
                      int64_t D)
{
    for (int64_t r = 0; r < n * heads; r++) {
        const int64_t i = r / heads, h = r % heads;
        const attn_merge_weights w = attn_merge_weigh(lse[h * n + i], lse_part[h * n + i]);
        if (w.skip) continue;
        for (int64_t d = 0; d < D; d++) o[r * D + d] = (w.wa * o[r * D + d] + w.wb * o_part[r * D + d]) / w.sum;
        lse[h * n + i] = w.lse;
    }
}

