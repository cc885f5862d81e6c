/* The CPU emulation of the tensor-core attention (see mma_attention_emulation.h). */
#include "tests/mma_attention_emulation.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/ops/dtype.h"

#define EMU_MAX_D 128
#define EMU_KSTEPS (EMU_MAX_D / MMA_K)         /* k steps of 16 over head_dim */
#define EMU_DBLOCKS (EMU_MAX_D / MMA_N)        /* n8 blocks over head_dim */
#define EMU_SBLOCKS (MMA_ATTN_BK / MMA_N)      /* n8 blocks over a 64-wide score tile */
#define EMU_STALE 0x7fc0u                      /* bf16 NaN: shared memory nobody wrote */

/* One fragment of a warp: lane l's registers are x[l]. */
typedef struct frag_a {
    uint16_t x[MMA_LANES][MMA_A_ELEMS];
} frag_a;
typedef struct frag_b {
    uint16_t x[MMA_LANES][MMA_B_ELEMS];
} frag_b;
typedef struct frag_c {
    float x[MMA_LANES][MMA_C_ELEMS];
} frag_c;

static uint16_t to_bf16(float x) { return usp_f32_to_bf16(x); }
static float from_bf16(uint16_t b) { return usp_bf16_to_f32(b); }
static float round_bf16(float x) { return from_bf16(to_bf16(x)); }

/* mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, d = a b + d: each operand gathered from the
 * lanes by the PTX fragment maps. Products of bf16 are exact in fp32; the sum runs in k order and is
 * added to d (the tensor core's own order differs within fp32 rounding: the tests' slack). */
static void emu_mma(frag_c *d, const frag_a *a, const frag_b *b)
{
    float A[MMA_M][MMA_K], B[MMA_K][MMA_N];
    for (int lane = 0; lane < MMA_LANES; lane++) {
        for (int i = 0; i < MMA_A_ELEMS; i++) {
            const mma_rc p = mma_a_elem(lane, i);
            A[p.row][p.col] = from_bf16(a->x[lane][i]);
        }
        for (int i = 0; i < MMA_B_ELEMS; i++) {
            const mma_rc p = mma_b_elem(lane, i);
            B[p.row][p.col] = from_bf16(b->x[lane][i]);
        }
    }
    for (int lane = 0; lane < MMA_LANES; lane++)
        for (int i = 0; i < MMA_C_ELEMS; i++) {
            const mma_rc p = mma_c_elem(lane, i);
            float sum = 0.0f;
            for (int k = 0; k < MMA_K; k++) sum += A[p.row][k] * B[k][p.col];
            d->x[lane][i] += sum;
        }
}

/* ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16 of the 16 x 16 block at (row0, col0) of a
 * swizzled tile: each lane gives the address of one 8-element row segment (mma_ldsm_addr); element e
 * of register r of lane l comes from the segment given by lane 8 r + its row in matrix r. */
static void emu_ldmatrix_x4(uint16_t out[MMA_LANES][8], const uint16_t *tile, int64_t ld, int64_t row0, int64_t col0,
                            mma_ld_kind kind)
{
    const uint16_t *addr[MMA_LANES];
    for (int lane = 0; lane < MMA_LANES; lane++) {
        const mma_rc p = mma_ldsm_addr(lane, kind);
        addr[lane] = tile + mma_smem_offset(row0 + p.row, col0 + p.col, ld);
    }
    for (int lane = 0; lane < MMA_LANES; lane++)
        for (int r = 0; r < 4; r++)
            for (int e = 0; e < 2; e++) {
                const mma_rc in = mma_ldsm_elem(lane, e, mma_ld_trans(kind));
                out[lane][2 * r + e] = addr[8 * r + in.row][in.col];
            }
}

/* An A fragment: register r holds (a_2r, a_2r+1). */
static void emu_load_a(frag_a *a, const uint16_t *tile, int64_t ld, int64_t row0, int64_t col0)
{
    emu_ldmatrix_x4(a->x, tile, ld, row0, col0, MMA_LD_A);
}

/* Two B fragments (n8 blocks 0, 1): register r holds block r >> 1, elements 2 (r & 1) and + 1. */
static void emu_load_b2(frag_b b[2], const uint16_t *tile, int64_t ld, int64_t row0, int64_t col0, mma_ld_kind kind)
{
    uint16_t raw[MMA_LANES][8];
    emu_ldmatrix_x4(raw, tile, ld, row0, col0, kind);
    for (int lane = 0; lane < MMA_LANES; lane++)
        for (int j = 0; j < 8; j++) b[j >> 2].x[lane][j & 3] = raw[lane][j];
}

/* cp.async of a tile of `tile_rows` rows from rows `stride` floats apart (first at src + first),
 * 8-element (16-byte) chunks, zero-filled past `rows`, into a swizzled bf16 tile. */
static void emu_tile_load(uint16_t *tile, int64_t tile_rows, int64_t D, const float *src, int64_t first,
                          int64_t stride, int64_t rows)
{
    for (int64_t r = 0; r < tile_rows; r++)
        for (int64_t c = 0; c < D; c += 8)
            for (int64_t e = 0; e < 8; e++)
                tile[mma_smem_offset(r, c + e, D)] = r < rows ? to_bf16(src[first + r * stride + c + e]) : 0;
}

/* acc[0 .. 8) = (warp's A rows) x tile^T over k = D: the tile is stored [n][k] (64 rows n, D
 * columns k): S = Q K^T, dP = dO V^T, S^T = K Q^T, dP^T = V dO^T. */
static void emu_scores(frag_c acc[EMU_SBLOCKS], const frag_a *a, int64_t D, const uint16_t *tile)
{
    memset(acc, 0, EMU_SBLOCKS * sizeof *acc);
    for (int nb2 = 0; nb2 < EMU_SBLOCKS / 2; nb2++)
        for (int64_t ks = 0; ks < D / MMA_K; ks++) {
            frag_b b[2];
            emu_load_b2(b, tile, D, 16 * nb2, 16 * ks, MMA_LD_B_NK);
            emu_mma(&acc[2 * nb2], &a[ks], &b[0]);
            emu_mma(&acc[2 * nb2 + 1], &a[ks], &b[1]);
        }
}

/* acc[0 .. D/8) += P x tile over k = 64, the tile stored [k][n] (64 rows k, D columns n): P's
 * accumulators become A fragments in registers (mma_a_from_c), rounded to bf16; B by ldmatrix .trans.
 * O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K. */
static void emu_accumulate(frag_c *acc, int64_t D, const frag_c p[EMU_SBLOCKS], const uint16_t *tile)
{
    for (int ks2 = 0; ks2 < EMU_SBLOCKS / 2; ks2++) {
        frag_a pa;
        for (int lane = 0; lane < MMA_LANES; lane++)
            for (int i = 0; i < MMA_A_ELEMS; i++)
                pa.x[lane][i] = to_bf16(p[2 * ks2 + mma_a_from_c_tile(i)].x[lane][mma_a_from_c_elem(i)]);
        for (int64_t db2 = 0; db2 < D / 16; db2++) {
            frag_b b[2];
            emu_load_b2(b, tile, D, 16 * ks2, 16 * db2, MMA_LD_B_KN);
            emu_mma(&acc[2 * db2], &pa, &b[0]);
            emu_mma(&acc[2 * db2 + 1], &pa, &b[1]);
        }
    }
}

/* A row reduction: each lane's two rows (g, g + 8), then the butterfly over its quad, all lanes at
 * once as __shfl_xor_sync does (max = 1: fmaxf, 0: sum). */
static void emu_row_reduce(float v[MMA_LANES][2], int max)
{
    for (int step = 0; step < MMA_ROW_STEPS; step++) {
        float next[MMA_LANES][2];
        for (int lane = 0; lane < MMA_LANES; lane++)
            for (int r = 0; r < 2; r++) {
                const float o = v[mma_row_partner(lane, step)][r];
                next[lane][r] = max ? fmaxf(v[lane][r], o) : v[lane][r] + o;
            }
        memcpy(v, next, sizeof next);
    }
}

/* ------------------------------------------------------------------------- */
/* Forward                                                                    */

/* A warp's registers in the forward: Q's A fragments (loaded once), O's accumulators, and for its
 * rows g and g + 8 the running max m (natural-log units) and the lane's partial sum l (FA2 sums the
 * quad only at the end). */
typedef struct fwd_warp {
    frag_a q[EMU_KSTEPS];
    frag_c o[EMU_DBLOCKS];
    float m[MMA_LANES][2], l[MMA_LANES][2];
} fwd_warp;

/* A CTA's rows and their spans (the kernels' row_spans): the columns each of its 64 rows counts. */
typedef struct emu_spans {
    int64_t first[MMA_ATTN_BQ], end[MMA_ATTN_BQ];
} emu_spans;

static void emu_row_spans(emu_spans *sp, const usp_attention_shape *s, int64_t b, int64_t row0, int keys_are_rows)
{
    for (int64_t r = 0; r < MMA_ATTN_BQ; r++) attn_row_span(s, b, row0 + r, keys_are_rows, &sp->first[r], &sp->end[r]);
}

/* Each lane's live bits in the block pair whose columns start at col0 (the kernels' live_bits). */
static void emu_live_bits(uint32_t live[MMA_LANES], const emu_spans *sp, int64_t col0, int warp)
{
    for (int lane = 0; lane < MMA_LANES; lane++) {
        const int64_t row = 16 * warp + mma_group_id(lane);
        int lo[2], hi[2];
        for (int r = 0; r < 2; r++) mma_attn_span_cols(sp->first[row + 8 * r], sp->end[row + 8 * r], col0, &lo[r], &hi[r]);
        live[lane] = mma_attn_live_bits(lane, lo, hi);
    }
}

/* One key block: S = Q K^T, mask, online softmax (cuda_attention_tiles.h's steps), O = alpha O + P V. */
static void emu_forward_step(fwd_warp *w, int warp, const usp_attention_shape *s, const emu_spans *sp, int64_t k0,
                             const uint16_t *Ks, const uint16_t *Vs)
{
    const int64_t D = s->head_dim;
    frag_c sc[EMU_SBLOCKS];
    float mx[MMA_LANES][2], alpha[MMA_LANES][2];
    uint32_t live[MMA_LANES];
    emu_live_bits(live, sp, k0, warp);
    emu_scores(sc, w->q, D, Ks);
    for (int lane = 0; lane < MMA_LANES; lane++) mx[lane][0] = mx[lane][1] = -INFINITY;
    for (int nb = 0; nb < EMU_SBLOCKS; nb++)
        for (int lane = 0; lane < MMA_LANES; lane++)
            for (int i = 0; i < MMA_C_ELEMS; i++) {
                float x = s->scale * sc[nb].x[lane][i];
                if (!((live[lane] >> (4 * nb + i)) & 1u)) x = -INFINITY;
                sc[nb].x[lane][i] = x;
                mx[lane][i >> 1] = fmaxf(mx[lane][i >> 1], x);
            }
    emu_row_reduce(mx, 1);
    for (int lane = 0; lane < MMA_LANES; lane++)
        for (int r = 0; r < 2; r++) {
            const float m_new = fmaxf(w->m[lane][r], mx[lane][r]);
            alpha[lane][r] = attn_softmax_rescale(w->m[lane][r], m_new);
            w->m[lane][r] = m_new;
            w->l[lane][r] *= alpha[lane][r];
        }
    for (int nb = 0; nb < EMU_SBLOCKS; nb++) /* P in fp32; its row sums use the fp32 values */
        for (int lane = 0; lane < MMA_LANES; lane++)
            for (int i = 0; i < MMA_C_ELEMS; i++) {
                const float p = attn_softmax_prob(sc[nb].x[lane][i], w->m[lane][i >> 1]);
                sc[nb].x[lane][i] = p;
                w->l[lane][i >> 1] += p;
            }
    for (int64_t db = 0; db < D / MMA_N; db++)
        for (int lane = 0; lane < MMA_LANES; lane++)
            for (int i = 0; i < MMA_C_ELEMS; i++) w->o[db].x[lane][i] *= alpha[lane][i >> 1];
    emu_accumulate(w->o, D, sc, Vs);
}

/* The end of a warp: l summed over the quad, o / l rounded to bf16, lse from the first lane of each quad. */
static void emu_forward_store(fwd_warp *w, int warp, const usp_attention_shape *s, int64_t b, int64_t h,
                              int64_t q0, float *o, float *lse)
{
    emu_row_reduce(w->l, 0);
    for (int64_t db = 0; db < s->head_dim / MMA_N; db++)
        for (int lane = 0; lane < MMA_LANES; lane++)
            for (int i = 0; i < MMA_C_ELEMS; i++) {
                const mma_rc p = mma_c_elem(lane, i);
                const int64_t row = q0 + 16 * warp + p.row;
                if (row < s->n_q)
                    o[attn_q_index(s, b, row, h, 8 * db + p.col)] =
                        round_bf16(w->o[db].x[lane][i] * attn_softmax_inv_sum(w->l[lane][i >> 1]));
            }
    for (int lane = 0; lane < MMA_LANES; lane += 4)
        for (int r = 0; r < 2; r++) {
            const int64_t row = q0 + 16 * warp + mma_group_id(lane) + 8 * r;
            if (row < s->n_q) lse[attn_row_index(s, b, h, row)] = attn_softmax_lse(w->m[lane][r], w->l[lane][r]);
        }
}

static void fill_stale(uint16_t *smem, size_t n)
{
    for (size_t e = 0; e < n; e++) smem[e] = EMU_STALE;
}

/* CTA x of the forward grid: (query block, batch * head), last blocks first. */
static void emu_forward_cta(const usp_attention_shape *s, const float *q, const float *k, const float *v, float *o,
                            float *lse, int64_t x, uint16_t *smem, fwd_warp *w)
{
    const int64_t D = s->head_dim;
    const attn_task task = attn_block_task(x, attn_n_tiles(s->n_q, MMA_ATTN_BQ), s->batch * s->n_heads, 1);
    const int64_t b = task.row / s->n_heads, h = task.row % s->n_heads, g = attn_kv_head(s, h);
    const int64_t q0 = task.tile * MMA_ATTN_BQ, kv_stride = s->n_kv_heads * D;
    uint16_t *Qs = smem, *Ks = Qs + MMA_ATTN_BQ * D, *Vs = Ks + MMA_ATTN_BK * D;
    fill_stale(smem, (size_t)((MMA_ATTN_BQ + 2 * MMA_ATTN_BK) * D));
    emu_tile_load(Qs, MMA_ATTN_BQ, D, q, attn_q_index(s, b, q0, h, 0), s->n_heads * D,
                  attn_tile_len(s->n_q, MMA_ATTN_BQ, task.tile));
    for (int warp = 0; warp < MMA_ATTN_WARPS; warp++) {
        for (int64_t ks = 0; ks < D / MMA_K; ks++) emu_load_a(&w[warp].q[ks], Qs, D, 16 * warp, 16 * ks);
        memset(w[warp].o, 0, sizeof w[warp].o);
        for (int lane = 0; lane < MMA_LANES; lane++)
            for (int r = 0; r < 2; r++) w[warp].m[lane][r] = -INFINITY, w[warp].l[lane][r] = 0.0f;
    }
    emu_spans sp;
    emu_row_spans(&sp, s, b, q0, 0);
    const mma_block_range kv = mma_attn_kv_blocks(s, b, task.tile);
    for (int64_t kb = kv.begin; kb < kv.end; kb++) {
        const int64_t k0 = kb * MMA_ATTN_BK, bk = attn_tile_len(s->n_kv, MMA_ATTN_BK, kb);
        emu_tile_load(Ks, MMA_ATTN_BK, D, k, attn_kv_index(s, b, k0, g, 0), kv_stride, bk);
        emu_tile_load(Vs, MMA_ATTN_BK, D, v, attn_kv_index(s, b, k0, g, 0), kv_stride, bk);
        for (int warp = 0; warp < MMA_ATTN_WARPS; warp++) emu_forward_step(&w[warp], warp, s, &sp, k0, Ks, Vs);
    }
    for (int warp = 0; warp < MMA_ATTN_WARPS; warp++) emu_forward_store(&w[warp], warp, s, b, h, q0, o, lse);
}

void mma_emu_forward(const usp_attention_shape *s, const float *q, const float *k, const float *v, float *o,
                     float *lse, int reverse)
{
    uint16_t *smem = malloc((size_t)((MMA_ATTN_BQ + 2 * MMA_ATTN_BK) * s->head_dim) * sizeof(uint16_t));
    fwd_warp *w = malloc(MMA_ATTN_WARPS * sizeof *w);
    const int64_t n = attn_n_tiles(s->n_q, MMA_ATTN_BQ) * s->batch * s->n_heads;
    for (int64_t x = 0; x < n; x++) emu_forward_cta(s, q, k, v, o, lse, reverse ? n - 1 - x : x, smem, w);
    free(w);
    free(smem);
}

/* ------------------------------------------------------------------------- */
/* Backward                                                                   */

/* A warp's registers in the backward: two operands' A fragments (K, V in the dK/dV pass; Q, dO in
 * the dQ pass) and two accumulators (dK, dV; dQ). */
typedef struct bwd_warp {
    frag_a a1[EMU_KSTEPS], a2[EMU_KSTEPS];
    frag_c acc1[EMU_DBLOCKS], acc2[EMU_DBLOCKS];
} bwd_warp;

/* The tiles of a backward CTA: bf16 Q, dO, K, V [64][D], and lse, delta of its 64 queries. */
typedef struct bwd_smem {
    uint16_t *q, *d_o, *k, *v;
    float lse[MMA_ATTN_BQ], delta[MMA_ATTN_BQ];
} bwd_smem;

/* lse and delta of queries [q0, q0 + 64) of (b, h); -inf and 0 past n_q (then P = 0, dS = 0). */
static void emu_row_stats(bwd_smem *t, const usp_attention_shape *s, const float *lse, const float *delta, int64_t b,
                          int64_t h, int64_t q0)
{
    for (int64_t i = 0; i < MMA_ATTN_BQ; i++) {
        const int in = q0 + i < s->n_q;
        t->lse[i] = in ? lse[attn_row_index(s, b, h, q0 + i)] : -INFINITY;
        t->delta[i] = in ? delta[attn_row_index(s, b, h, q0 + i)] : 0.0f;
    }
}

/* From S and dP accumulators of a warp's 16 x 64 block to P and dS (cuda_attention_tiles.h):
 * P = e^(scale s - lse), dS = P (dP - delta). keys_are_rows: the dK/dV pass's S^T. */
static void emu_probs(frag_c sp[EMU_SBLOCKS], frag_c dsp[EMU_SBLOCKS], const usp_attention_shape *s,
                      const bwd_smem *t, int warp, const uint32_t live[MMA_LANES], int keys_are_rows)
{
    for (int nb = 0; nb < EMU_SBLOCKS; nb++)
        for (int lane = 0; lane < MMA_LANES; lane++)
            for (int i = 0; i < MMA_C_ELEMS; i++) {
                const mma_rc p = mma_c_elem(lane, i);
                const int c = 8 * nb + p.col, qi = keys_are_rows ? c : 16 * warp + p.row;
                const int in = (live[lane] >> (4 * nb + i)) & 1u;
                const float prob = in ? attn_backward_prob(s->scale * sp[nb].x[lane][i], t->lse[qi]) : 0.0f;
                dsp[nb].x[lane][i] = in ? attn_backward_dscore(prob, dsp[nb].x[lane][i], t->delta[qi]) : 0.0f;
                sp[nb].x[lane][i] = prob;
            }
}

/* Accumulator rows [row0 + 16 warp + row] of a warp, times factor, rounded to bf16, into dst rows
 * (first, stride apart) below n_rows. */
static void emu_rows_store(float *dst, int64_t first, int64_t stride, const frag_c *acc, int warp, int64_t row0,
                           int64_t n_rows, int64_t D, float factor)
{
    for (int64_t db = 0; db < D / MMA_N; db++)
        for (int lane = 0; lane < MMA_LANES; lane++)
            for (int i = 0; i < MMA_C_ELEMS; i++) {
                const mma_rc p = mma_c_elem(lane, i);
                const int64_t r = 16 * warp + p.row;
                if (row0 + r < n_rows)
                    dst[first + r * stride + 8 * db + p.col] = round_bf16(factor * acc[db].x[lane][i]);
            }
}

/* dK/dV CTA x: key block and (batch, kv head); each warp 16 keys, over the group's query heads. */
static void emu_dkdv_cta(const usp_attention_shape *s, const float *q, const float *k, const float *v,
                         const float *lse, const float *delta, const float *d_o, float *dk, float *dv, int64_t x,
                         bwd_smem *t, bwd_warp *w)
{
    const int64_t D = s->head_dim, group = s->n_heads / s->n_kv_heads;
    const attn_task task = attn_block_task(x, attn_n_tiles(s->n_kv, MMA_ATTN_BK), s->batch * s->n_kv_heads, 0);
    const int64_t b = task.row / s->n_kv_heads, g = task.row % s->n_kv_heads, k0 = task.tile * MMA_ATTN_BK;
    const int64_t kv_first = attn_kv_index(s, b, k0, g, 0), kv_stride = s->n_kv_heads * D;
    fill_stale(t->q, (size_t)((2 * MMA_ATTN_BQ + 2 * MMA_ATTN_BK) * D));
    emu_tile_load(t->k, MMA_ATTN_BK, D, k, kv_first, kv_stride, attn_tile_len(s->n_kv, MMA_ATTN_BK, task.tile));
    emu_tile_load(t->v, MMA_ATTN_BK, D, v, kv_first, kv_stride, attn_tile_len(s->n_kv, MMA_ATTN_BK, task.tile));
    for (int warp = 0; warp < MMA_ATTN_WARPS; warp++) {
        for (int64_t ks = 0; ks < D / MMA_K; ks++) {
            emu_load_a(&w[warp].a1[ks], t->k, D, 16 * warp, 16 * ks);
            emu_load_a(&w[warp].a2[ks], t->v, D, 16 * warp, 16 * ks);
        }
        memset(w[warp].acc1, 0, sizeof w[warp].acc1);
        memset(w[warp].acc2, 0, sizeof w[warp].acc2);
    }
    emu_spans spans;
    emu_row_spans(&spans, s, b, k0, 1);
    const mma_block_range qr = mma_attn_q_blocks(s, b, task.tile);
    for (int64_t h = mma_attn_first_q_head(s, g); h < mma_attn_first_q_head(s, g) + group; h++)
        for (int64_t qb = qr.begin; qb < qr.end; qb++) {
            const int64_t q0 = qb * MMA_ATTN_BQ, bq = attn_tile_len(s->n_q, MMA_ATTN_BQ, qb);
            emu_tile_load(t->q, MMA_ATTN_BQ, D, q, attn_q_index(s, b, q0, h, 0), s->n_heads * D, bq);
            emu_tile_load(t->d_o, MMA_ATTN_BQ, D, d_o, attn_q_index(s, b, q0, h, 0), s->n_heads * D, bq);
            emu_row_stats(t, s, lse, delta, b, h, q0);
            for (int warp = 0; warp < MMA_ATTN_WARPS; warp++) {
                frag_c st[EMU_SBLOCKS], dpt[EMU_SBLOCKS];
                uint32_t live[MMA_LANES];
                emu_live_bits(live, &spans, q0, warp);
                emu_scores(st, w[warp].a1, D, t->q);    /* S^T = K Q^T */
                emu_scores(dpt, w[warp].a2, D, t->d_o); /* dP^T = V dO^T */
                emu_probs(st, dpt, s, t, warp, live, 1);
                emu_accumulate(w[warp].acc2, D, st, t->d_o); /* dV += P^T dO */
                emu_accumulate(w[warp].acc1, D, dpt, t->q);  /* dK += dS^T Q */
            }
        }
    for (int warp = 0; warp < MMA_ATTN_WARPS; warp++) {
        emu_rows_store(dk, kv_first, kv_stride, w[warp].acc1, warp, k0, s->n_kv, D, s->scale);
        emu_rows_store(dv, kv_first, kv_stride, w[warp].acc2, warp, k0, s->n_kv, D, 1.0f);
    }
}

/* dQ CTA x: query block and (batch, head), each warp 16 queries, key blocks in order. */
static void emu_dq_cta(const usp_attention_shape *s, const float *q, const float *k, const float *v,
                       const float *lse, const float *delta, const float *d_o, float *dq, int64_t x, bwd_smem *t,
                       bwd_warp *w)
{
    const int64_t D = s->head_dim;
    const attn_task task = attn_block_task(x, attn_n_tiles(s->n_q, MMA_ATTN_BQ), s->batch * s->n_heads, 1);
    const int64_t b = task.row / s->n_heads, h = task.row % s->n_heads, g = attn_kv_head(s, h);
    const int64_t q0 = task.tile * MMA_ATTN_BQ, q_first = attn_q_index(s, b, q0, h, 0), q_stride = s->n_heads * D;
    fill_stale(t->q, (size_t)((2 * MMA_ATTN_BQ + 2 * MMA_ATTN_BK) * D));
    emu_tile_load(t->q, MMA_ATTN_BQ, D, q, q_first, q_stride, attn_tile_len(s->n_q, MMA_ATTN_BQ, task.tile));
    emu_tile_load(t->d_o, MMA_ATTN_BQ, D, d_o, q_first, q_stride, attn_tile_len(s->n_q, MMA_ATTN_BQ, task.tile));
    emu_row_stats(t, s, lse, delta, b, h, q0);
    for (int warp = 0; warp < MMA_ATTN_WARPS; warp++) {
        for (int64_t ks = 0; ks < D / MMA_K; ks++) {
            emu_load_a(&w[warp].a1[ks], t->q, D, 16 * warp, 16 * ks);
            emu_load_a(&w[warp].a2[ks], t->d_o, D, 16 * warp, 16 * ks);
        }
        memset(w[warp].acc1, 0, sizeof w[warp].acc1);
    }
    emu_spans spans;
    emu_row_spans(&spans, s, b, q0, 0);
    const mma_block_range kv = mma_attn_kv_blocks(s, b, task.tile);
    for (int64_t kb = kv.begin; kb < kv.end; kb++) {
        const int64_t k0 = kb * MMA_ATTN_BK, bk = attn_tile_len(s->n_kv, MMA_ATTN_BK, kb);
        emu_tile_load(t->k, MMA_ATTN_BK, D, k, attn_kv_index(s, b, k0, g, 0), s->n_kv_heads * D, bk);
        emu_tile_load(t->v, MMA_ATTN_BK, D, v, attn_kv_index(s, b, k0, g, 0), s->n_kv_heads * D, bk);
        for (int warp = 0; warp < MMA_ATTN_WARPS; warp++) {
            frag_c sc[EMU_SBLOCKS], dp[EMU_SBLOCKS];
            uint32_t live[MMA_LANES];
            emu_live_bits(live, &spans, k0, warp);
            emu_scores(sc, w[warp].a1, D, t->k); /* S = Q K^T */
            emu_scores(dp, w[warp].a2, D, t->v); /* dP = dO V^T */
            emu_probs(sc, dp, s, t, warp, live, 0);
            emu_accumulate(w[warp].acc1, D, dp, t->k); /* dQ += dS K */
        }
    }
    for (int warp = 0; warp < MMA_ATTN_WARPS; warp++)
        emu_rows_store(dq, q_first, q_stride, w[warp].acc1, warp, q0, s->n_q, D, s->scale);
}

void mma_emu_backward(const usp_attention_shape *s, const float *q, const float *k, const float *v, const float *o,
                      const float *lse, const float *d_o, float *dq, float *dk, float *dv, int reverse)
{
    const int64_t D = s->head_dim, rows = s->batch * s->n_q * s->n_heads;
    float *delta = malloc((size_t)(rows ? rows : 1) * sizeof(float));
    for (int64_t r = 0; r < rows; r++) { /* delta_i = dO_i . O_i over bf16 values, fp32 in d order */
        float acc = 0.0f;
        for (int64_t d = 0; d < D; d++) acc += round_bf16(d_o[r * D + d]) * round_bf16(o[r * D + d]);
        delta[attn_row_index(s, r / (s->n_q * s->n_heads), r % s->n_heads, (r / s->n_heads) % s->n_q)] = acc;
    }
    bwd_smem t;
    t.q = malloc((size_t)((2 * MMA_ATTN_BQ + 2 * MMA_ATTN_BK) * D) * sizeof(uint16_t));
    t.d_o = t.q + MMA_ATTN_BQ * D, t.k = t.d_o + MMA_ATTN_BQ * D, t.v = t.k + MMA_ATTN_BK * D;
    bwd_warp *w = malloc(MMA_ATTN_WARPS * sizeof *w);
    const int64_t n_kv_ctas = attn_n_tiles(s->n_kv, MMA_ATTN_BK) * s->batch * s->n_kv_heads;
    const int64_t n_q_ctas = attn_n_tiles(s->n_q, MMA_ATTN_BQ) * s->batch * s->n_heads;
    for (int64_t x = 0; x < n_kv_ctas; x++)
        emu_dkdv_cta(s, q, k, v, lse, delta, d_o, dk, dv, reverse ? n_kv_ctas - 1 - x : x, &t, w);
    for (int64_t x = 0; x < n_q_ctas; x++)
        emu_dq_cta(s, q, k, v, lse, delta, d_o, dq, reverse ? n_q_ctas - 1 - x : x, &t, w);
    free(w);
    free(t.q);
    free(delta);
}
